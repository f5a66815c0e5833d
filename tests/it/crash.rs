//! Crash safety: a run on a sled store is killed with SIGKILL at a random
//! step; a new process recovers it. No completed step is lost and none is
//! applied twice.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

const STEPS: u64 = 200;

/// A worker process SIGKILLed midway, and the process that recovered its
/// session.
struct Killed {
    /// The lines the first process printed up to the kill.
    seen: Vec<String>,
    /// The first process's pid.
    first_pid: u32,
    /// The recovering process's `final ` line, without the prefix.
    final_line: String,
}

/// Starts `worker` with `start`, SIGKILLs it once `enough` holds of the
/// lines it has printed, then runs it with `recover` to its end (which
/// must succeed and print a `final ` line).
fn kill_then_recover(
    worker: &str,
    start: &[&str],
    recover: &[&str],
    enough: impl Fn(&[String]) -> bool,
) -> Killed {
    let mut first = Command::new(worker)
        .args(start)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let first_pid = first.id();
    let mut seen = Vec::new();
    for line in BufReader::new(first.stdout.take().unwrap()).lines() {
        seen.push(line.unwrap());
        if enough(&seen) {
            break;
        }
    }
    first.kill().unwrap(); // SIGKILL
    first.wait().unwrap();
    assert!(enough(&seen), "the worker stopped early, after {seen:?}");
    let second = Command::new(worker).args(recover).output().unwrap();
    assert!(
        second.status.success(),
        "{recover:?}: {}",
        String::from_utf8_lossy(&second.stderr)
    );
    let stdout = String::from_utf8(second.stdout).unwrap();
    let final_line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("final "))
        .unwrap_or_else(|| panic!("no final line in {stdout}"))
        .to_string();
    Killed {
        seen,
        first_pid,
        final_line,
    }
}

/// The lines of `seen` that start with `prefix`, without it.
fn reported<'a>(seen: &'a [String], prefix: &str) -> Vec<&'a str> {
    seen.iter().filter_map(|l| l.strip_prefix(prefix)).collect()
}

/// Starts a run of `STEPS` ticks with `durability`, SIGKILLs it after
/// `kill_after` committed steps, recovers it in a new process. Returns the
/// final ticks, the steps committed before the kill and the first pid.
fn kill_and_recover(durability: &str, kill_after: u64) -> (Vec<(u64, u32)>, u64, u32) {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let store = store.to_str().unwrap();
    let steps = STEPS.to_string();
    let args = |mode| [mode, store, "s1", &steps, "1000", durability];
    let last = |seen: &[String]| {
        reported(seen, "durable ")
            .last()
            .map_or(0, |n| n.parse::<u64>().unwrap())
    };
    let killed = kill_then_recover(
        env!("CARGO_BIN_EXE_crash_worker"),
        &args("start"),
        &args("recover"),
        |seen| last(seen) >= kill_after,
    );
    let (durable, first_pid, final_line) =
        (last(&killed.seen), killed.first_pid, killed.final_line);
    let ticks: Vec<(u64, u32)> = serde_json::from_str(&final_line).unwrap();
    let numbers: Vec<u64> = ticks.iter().map(|t| t.0).collect();
    assert_eq!(
        numbers,
        (1..=STEPS).collect::<Vec<_>>(),
        "{durability}: every step exactly once"
    );
    (ticks, durable, first_pid)
}

/// How many of the first ticks the killed process ran; none after them.
fn kept(ticks: &[(u64, u32)], first_pid: u32) -> u64 {
    let by_first = ticks.iter().take_while(|t| t.1 == first_pid).count();
    assert!(ticks[by_first..].iter().all(|t| t.1 != first_pid));
    by_first as u64
}

fn kill_point() -> u64 {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64;
    5 + seed % 140
}

#[test]
fn a_killed_run_is_recovered_in_a_new_process_without_loss_or_repeats() {
    let kill_after = kill_point();
    let (ticks, durable, first_pid) = kill_and_recover("every-step", kill_after);
    let by_first = kept(&ticks, first_pid);
    assert!(
        by_first >= durable,
        "steps 1..={durable} were durable before the kill but only {by_first} survived"
    );
    println!(
        "killed after {durable} durable steps (target {kill_after}); the first process's steps kept: {by_first}; recovered the rest"
    );
}

/// `Durability::EveryN(n)` flushes every n-th step: a kill loses at most the
/// n-1 steps after the last flush, which run again; none is applied twice.
/// `Durability::AtExit` promises no step before the end: a kill may lose
/// every step since the run started, which all run again, still exactly once.
#[test]
fn every_n_and_at_exit_lose_at_most_what_they_promise_and_never_apply_a_step_twice() {
    for (durability, n) in [
        ("every-5", Some(5)),
        ("every-2", Some(2)),
        ("at-exit", None),
    ] {
        let kill_after = kill_point();
        let (ticks, committed, first_pid) = kill_and_recover(durability, kill_after);
        let by_first = kept(&ticks, first_pid);
        if let Some(n) = n {
            let flushed = committed / n * n;
            assert!(
                by_first >= flushed,
                "{durability}: {flushed} steps were flushed before the kill, {by_first} survived"
            );
        }
        println!(
            "{durability}: killed after {committed} committed steps; kept {by_first}, ran the rest again"
        );
    }
}

/// Runs `once_worker start` until it reports reaching `point`, SIGKILLs it,
/// recovers the session in a new process; returns the effects file's lines
/// (effect, idempotency key, pid) and the final log.
fn kill_at_and_recover(point: &str) -> (Vec<(String, String, u32)>, Vec<String>, u32) {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let effects = dir.path().join("effects");
    let (store, effects_arg) = (store.to_str().unwrap(), effects.to_str().unwrap());
    let at = format!("at {point}");
    let killed = kill_then_recover(
        env!("CARGO_BIN_EXE_once_worker"),
        &["start", store, "order-1", point, effects_arg],
        &["recover", store, "order-1", point, effects_arg],
        |seen| seen.last() == Some(&at),
    );
    let first_pid = killed.first_pid;
    let log: Vec<String> = serde_json::from_str(&killed.final_line).unwrap();
    let lines = std::fs::read_to_string(&effects)
        .unwrap()
        .lines()
        .map(|l| {
            let mut parts = l.split(' ');
            let (what, key, pid) = (parts.next(), parts.next(), parts.next());
            (
                what.unwrap().to_string(),
                key.unwrap().to_string(),
                pid.unwrap().parse().unwrap(),
            )
        })
        .collect();
    (lines, log, first_pid)
}

#[test]
fn once_effects_are_not_repeated_after_a_kill_or_repeat_with_the_same_idempotency_key() {
    // (where the first process is killed, the effect run twice, if any)
    for (point, repeated) in [
        ("charge-done", Some("charge")),
        ("charge-recorded", None),
        ("ship-done", Some("ship")),
        ("ship-recorded", None),
        ("mail-done", Some("mail")),
        ("mail-recorded", None),
    ] {
        let (effects, log, first_pid) = kill_at_and_recover(point);
        for what in ["charge", "ship", "mail"] {
            let runs: Vec<_> = effects.iter().filter(|e| e.0 == what).collect();
            let expected = if repeated == Some(what) { 2 } else { 1 };
            assert_eq!(
                runs.len(),
                expected,
                "killed at {point}: `{what}` ran {} times: {effects:?}",
                runs.len()
            );
            // Every run of one effect carries one key, which names the
            // session, the step visit and the effect.
            assert!(runs.iter().all(|r| r.1 == runs[0].1), "{point}: {runs:?}");
            assert!(runs[0].1.starts_with("harness:order-1:"), "{}", runs[0].1);
            assert!(runs[0].1.ends_with(&format!(":{what}")), "{}", runs[0].1);
            if expected == 2 {
                assert_eq!((runs[0].2, runs[1].2 == first_pid), (first_pid, false));
            }
        }
        // Different effects, different keys.
        let keys: std::collections::BTreeSet<_> = effects.iter().map(|e| &e.1).collect();
        assert_eq!(keys.len(), 3, "{point}: {effects:?}");
        // The state records each effect once, with the key it ran with.
        assert_eq!(log.len(), 3, "{point}: {log:?}");
        for (entry, what) in log.iter().zip(["charge", "ship", "mail"]) {
            let key = &effects.iter().find(|e| e.0 == what).unwrap().1;
            assert!(entry.ends_with(key.as_str()), "{point}: {entry} vs {key}");
        }
    }
}

/// Group commit: 100 sessions step at once on one sled store, sharing
/// flushes; the process is SIGKILLed mid-way. Every step whose commit was
/// acknowledged is in the store when it is opened again. (A killed process
/// loses what it had not yet handed to the OS, not what the OS had not yet
/// synced: that no commit is acknowledged before a flush covering it has
/// finished is checked with an instrumented flush in `stores/src/group.rs`.)
#[test]
fn no_acknowledged_step_is_lost_when_concurrent_sessions_share_flushes() {
    kill_group_and_check_acknowledged_steps("sled");
}

/// The same on the log store: its single writer thread appends the
/// sessions' commits and they share each `fdatasync`; a commit torn by the
/// kill is set aside on reopening, and none of them was acknowledged.
#[test]
fn no_acknowledged_step_is_lost_when_concurrent_sessions_share_flushes_on_the_log_store() {
    kill_group_and_check_acknowledged_steps("log");
}

/// Runs `group_worker` with 100 sessions on a store of `kind` (`sled` or
/// `log`), SIGKILLs it after a random number of acknowledged steps, opens
/// the store again and checks that every session has at least the steps
/// acknowledged for it.
fn kill_group_and_check_acknowledged_steps(kind: &str) {
    const SESSIONS: usize = 100;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let mut child = Command::new(env!("CARGO_BIN_EXE_group_worker"))
        .args([store.to_str().unwrap(), &SESSIONS.to_string(), "1000", kind])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut acked = vec![0u64; SESSIONS];
    let kill_after = 500 + kill_point() * 10;
    let mut seen = 0;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        let Some(rest) = line.strip_prefix("ack s") else {
            continue;
        };
        let (session, step) = rest.split_once(' ').unwrap();
        let (session, step): (usize, u64) = (session.parse().unwrap(), step.parse().unwrap());
        acked[session] = acked[session].max(step);
        seen += 1;
        if seen >= kill_after {
            break;
        }
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert!(
        seen >= kill_after,
        "{kind}: the worker acknowledged {seen} steps"
    );

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store: Box<dyn harness::session::SessionStore> = match kind {
        "sled" => Box::new(harness_stores::SledStore::open(&store).unwrap()),
        "log" => Box::new(harness_stores::LogStore::open(&store).unwrap()),
        other => unreachable!("no store {other}"),
    };
    let mut kept = 0;
    for (i, acked) in acked.iter().enumerate() {
        let head = rt
            .block_on(store.load(&harness::SessionId::from(format!("s{i}"))))
            .unwrap();
        let steps = head.map_or(0, |h| h.steps);
        assert!(
            steps >= *acked,
            "{kind}: session s{i}: step {acked} was acknowledged, the store has {steps}"
        );
        kept += steps;
    }
    println!(
        "{kind}: killed after {seen} acknowledged steps of {SESSIONS} sessions; {kept} steps in the store"
    );
}

/// Starts a fan-out over `items` items (two steps per branch, three
/// branches at a time), SIGKILLs it after `kill_after` branch steps are
/// durable, recovers it in a new process. Returns what the branches did
/// (item, process) in their first and second steps, the join's runs, the
/// branch steps reported durable before the kill and the first pid.
#[allow(clippy::type_complexity)]
fn kill_fan_out(
    items: u64,
    kill_after: usize,
) -> (Vec<(u64, u32)>, Vec<(u64, u32)>, u32, Vec<String>, u32) {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let store = store.to_str().unwrap();
    let items = items.to_string();
    let args = |mode| [mode, store, "f1", &items, "1000"];
    let killed = kill_then_recover(
        env!("CARGO_BIN_EXE_fanout_worker"),
        &args("start"),
        &args("recover"),
        |seen| reported(seen, "durable ").len() >= kill_after,
    );
    let durable: Vec<String> = reported(&killed.seen, "durable ")
        .into_iter()
        .map(str::to_string)
        .collect();
    let (first_pid, final_line) = (killed.first_pid, killed.final_line);
    let (worked, checked, joins): (Vec<(u64, u32)>, Vec<(u64, u32)>, u32) =
        serde_json::from_str(&final_line).unwrap();
    (worked, checked, joins, durable, first_pid)
}

#[test]
fn a_fan_out_killed_midway_is_recovered_with_every_branch_applied_exactly_once() {
    const ITEMS: u64 = 12;
    // Several kill points: after the first branch step, mid-way, and with
    // most branches done.
    for kill_after in [1, 7, 16] {
        let (worked, checked, joins, durable, first_pid) = kill_fan_out(ITEMS, kill_after);
        let items = |v: &[(u64, u32)]| v.iter().map(|t| t.0).collect::<Vec<_>>();
        // Merged in branch (item) order, each exactly once.
        assert_eq!(
            items(&worked),
            (0..ITEMS).collect::<Vec<_>>(),
            "kill after {kill_after}"
        );
        assert_eq!(
            items(&checked),
            (0..ITEMS).collect::<Vec<_>>(),
            "kill after {kill_after}"
        );
        assert_eq!(joins, 1, "the join runs once");
        // Every branch step reported durable before the kill was not run
        // again: its record still names the killed process.
        for d in &durable {
            let (path, step) = d.split_once(' ').unwrap();
            let item: u64 = path.strip_prefix("work#").unwrap().parse().unwrap();
            let done = match step {
                "work" => &worked,
                "check" => &checked,
                other => panic!("unexpected step {other}"),
            };
            let (_, pid) = done.iter().find(|t| t.0 == item).unwrap();
            assert_eq!(
                *pid, first_pid,
                "kill after {kill_after}: {d} was durable, yet ran again"
            );
        }
        // And the recovering process did the rest.
        assert!(
            checked.iter().any(|t| t.1 != first_pid),
            "kill after {kill_after}: the recovery ran nothing"
        );
    }
}

#[test]
fn a_sub_agent_killed_midway_is_recovered_inside_the_child_without_repeating_its_steps() {
    const TICKS: u64 = 40;
    for kill_after in [1, 17] {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("store");
        let store = store.to_str().unwrap();
        let ticks = TICKS.to_string();
        let args = |mode| [mode, store, "s1", &ticks, "1000", "sub"];
        let killed = kill_then_recover(
            env!("CARGO_BIN_EXE_fanout_worker"),
            &args("start"),
            &args("recover"),
            |seen| reported(seen, "durable work tick ").len() >= kill_after,
        );
        let (first_pid, final_line) = (killed.first_pid, killed.final_line);
        let (done, ends): (Vec<(u64, u32)>, u32) = serde_json::from_str(&final_line).unwrap();
        let numbers: Vec<u64> = done.iter().map(|t| t.0).collect();
        assert_eq!(
            numbers,
            (0..TICKS).collect::<Vec<_>>(),
            "every child step exactly once"
        );
        assert_eq!(ends, 1, "the parent's step completed once");
        // The child's durable steps were not run again: the first `kept`
        // ticks are the killed process's, the rest the recovering one's.
        let kept = done.iter().take_while(|t| t.1 == first_pid).count();
        assert!(kept >= kill_after, "kill after {kill_after}: kept {kept}");
        assert!(done[kept..].iter().all(|t| t.1 != first_pid));
        assert!(kept < TICKS as usize, "the recovery ran the rest");
    }
}

/// Runs the orchestrator's worker on a plan of six tasks, SIGKILLs it once
/// `kill_after` task results are durable, and recovers it in a new process.
/// Returns the tasks reported durable before the kill (id, output), the
/// final results (id, output), the answer, the plans made, and the first
/// pid.
#[allow(clippy::type_complexity)]
fn kill_orchestrator(
    kill_after: usize,
) -> (
    Vec<(String, String)>,
    Vec<(String, String)>,
    Option<String>,
    u32,
    u32,
) {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let store = store.to_str().unwrap();
    let killed = kill_then_recover(
        env!("CARGO_BIN_EXE_orchestrator_worker"),
        &["start", store, "o1"],
        &["recover", store, "o1"],
        |seen| reported(seen, "durable ").len() >= kill_after,
    );
    let durable: Vec<(String, String)> = reported(&killed.seen, "durable ")
        .into_iter()
        .map(|l| {
            let (id, output) = l.split_once(' ').unwrap();
            (id.to_string(), output.to_string())
        })
        .collect();
    let (first_pid, final_line) = (killed.first_pid, killed.final_line);
    let (done, answer, plans): (Vec<(String, String)>, Option<String>, u32) =
        serde_json::from_str(&final_line).unwrap();
    (durable, done, answer, plans, first_pid)
}

#[test]
fn an_orchestrator_killed_mid_plan_resumes_and_reruns_only_the_tasks_not_done() {
    // After the first task, mid-way (the second wave), and with five done.
    for kill_after in [1, 3, 5] {
        let (durable, done, answer, plans, first_pid) = kill_orchestrator(kill_after);
        let ids: Vec<&str> = done.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(
            ids,
            ["t0", "t1", "t2", "t3", "t4", "t5"],
            "kill after {kill_after}"
        );
        assert_eq!(answer.as_deref(), Some("all six done"));
        assert_eq!(plans, 1, "the recovery did not ask the planner again");
        // Every task whose result was durable before the kill kept it: it
        // was not run again by the recovering process.
        for (id, output) in &durable {
            assert_eq!(output, &format!("{id} by {first_pid}"));
            let (_, kept) = done.iter().find(|(d, _)| d == id).unwrap();
            assert_eq!(kept, output, "kill after {kill_after}: {id} ran again");
        }
        // The recovering process ran the rest, and the tasks it ran are
        // exactly those not durable before the kill.
        let rerun: Vec<&str> = done
            .iter()
            .filter(|(_, out)| !out.ends_with(&format!(" by {first_pid}")))
            .map(|(id, _)| id.as_str())
            .collect();
        assert!(
            !rerun.is_empty(),
            "kill after {kill_after}: the recovery ran nothing"
        );
        for id in &rerun {
            assert!(
                !durable.iter().any(|(d, _)| d == id),
                "kill after {kill_after}: {id} was durable, yet ran again"
            );
        }
    }
}
