//! `harness run` interrupted (Ctrl-C) or killed while a cell runs forever:
//! the kernel, and what its cell started, do not outlive it.

#![cfg(target_os = "linux")]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A cell that starts a process, writes its pid and the kernel's to
/// `pids`, and runs forever.
const ENDLESS: &str = r#"# %% Runs forever
import os, subprocess
sleeper = subprocess.Popen(["sleep", "300"])
with open("pids.tmp", "w") as handle:
    handle.write("%d %d" % (os.getpid(), sleeper.pid))
os.replace("pids.tmp", "pids")
while True:
    pass
"#;

/// Whether process `pid` is gone (or only its zombie is left).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

fn kernel_dies_with_harness_run(signal: &str) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("run-interrupt-{signal}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("endless.py");
    std::fs::write(&script, ENDLESS).unwrap();
    let mut harness = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(["run", "--quiet", script.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    let pids = loop {
        if let Ok(text) = std::fs::read_to_string(dir.join("pids")) {
            break text;
        }
        if let Some(status) = harness.try_wait().unwrap() {
            panic!("harness run exited ({status}) before the cell ran");
        }
        assert!(Instant::now() < deadline, "the cell did not start");
        std::thread::sleep(Duration::from_millis(20));
    };
    let pids: Vec<u32> = pids
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    let sent = Command::new("kill")
        .args(["-s", signal, &harness.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    harness.wait().unwrap();
    // A safety net, not a timing check.
    let deadline = Instant::now() + Duration::from_secs(120);
    while let Some(pid) = pids.iter().find(|&&pid| !gone(pid)) {
        if Instant::now() > deadline {
            for pid in &pids {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
            panic!(
                "process {pid} (of {pids:?}: the kernel, a process of its cell) outlived `harness run` ({signal})"
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn ctrl_c_of_harness_run_ends_the_kernel_and_what_its_cell_started() {
    kernel_dies_with_harness_run("INT");
}

#[test]
fn killing_harness_run_ends_the_kernel_and_what_its_cell_started() {
    kernel_dies_with_harness_run("KILL");
}
