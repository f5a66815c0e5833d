//! Crash safety: a run on a sled store is killed with SIGKILL at a random
//! step; a new process recovers it. No completed step is lost and none is
//! applied twice.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

const STEPS: u64 = 200;

#[test]
fn a_killed_run_is_recovered_in_a_new_process_without_loss_or_repeats() {
    let dir = std::env::temp_dir().join(format!("harness-crash-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = dir.to_str().unwrap().to_string();
    let worker = env!("CARGO_BIN_EXE_crash_worker");
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64;
    let kill_after = 5 + seed % 140;

    let mut first = Command::new(worker)
        .args(["start", &store, "s1", &STEPS.to_string(), "1000"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let first_pid = first.id();
    let mut durable = 0;
    for line in BufReader::new(first.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if let Some(n) = line.strip_prefix("durable ") {
            durable = n.parse::<u64>().unwrap();
            if durable >= kill_after {
                break;
            }
        }
    }
    first.kill().unwrap(); // SIGKILL
    first.wait().unwrap();
    assert!(durable >= kill_after, "the worker reported {durable} steps");

    let second = Command::new(worker)
        .args(["recover", &store, "s1", &STEPS.to_string(), "1000"])
        .output()
        .unwrap();
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    let stdout = String::from_utf8(second.stdout).unwrap();
    let final_line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("final "))
        .unwrap();
    let ticks: Vec<(u64, u32)> = serde_json::from_str(final_line).unwrap();

    let numbers: Vec<u64> = ticks.iter().map(|t| t.0).collect();
    assert_eq!(
        numbers,
        (1..=STEPS).collect::<Vec<_>>(),
        "every step exactly once"
    );
    let by_first = ticks.iter().take_while(|t| t.1 == first_pid).count() as u64;
    assert!(
        by_first >= durable,
        "steps 1..={durable} were durable before the kill but only {by_first} survived"
    );
    assert!(ticks[by_first as usize..].iter().all(|t| t.1 != first_pid));
    println!(
        "killed after {durable} durable steps (target {kill_after}); the first process's steps kept: {by_first}; recovered the rest"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
