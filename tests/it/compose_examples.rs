//! The composition examples, run as a new user runs them (`cargo run -p
//! harness-examples --example NAME`: the example's binary, built as the
//! suite is, see [`harness_tests::example`]) in a fresh directory, offline
//! (the scripted model), reading what they print.
//!
//! `map_reduce` fans out over five documents two at a time and joins once;
//! `sub_agent` stops at the approval its sub-agent asks for, and a second
//! process answers it and goes on inside the sub-agent without running its
//! completed step again. `orchestrator` replans a failed task and writes
//! the answer; killed mid-plan, `--resume SESSION` goes on without planning
//! again or re-running a finished task.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::path::Path;
use std::process::{Command, Output};

pub(crate) use harness_tests::stdout_of;

/// Example `EXAMPLE` of harness-examples run with `ARGS` in `dir`, with no
/// provider chosen (so offline), as `cargo run -p harness-examples
/// --example EXAMPLE -- ARGS` runs it; built first if it is not up to date.
pub(crate) fn cargo_run(dir: &Path, example: &str, args: &[&str]) -> Output {
    Command::new(harness_tests::example("harness-examples", example))
        .args(args)
        .current_dir(dir)
        // What an example puts in the temporary directory (long_running's
        // project, without `--dir`) goes with the test's own directory.
        .env("TMPDIR", dir)
        .env_remove("HARNESS_PROVIDER")
        .env_remove("HARNESS_MODEL")
        .output()
        .unwrap()
}

/// The value after `label` on the line that starts with it.
fn field<'a>(text: &'a str, label: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.strip_prefix(label))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no line starts with {label:?} in:\n{text}"))
}

fn count(text: &str, line: &str) -> usize {
    text.lines().filter(|l| l.trim() == line).count()
}

#[test]
fn map_reduce_runs_a_branch_per_document_two_at_a_time_and_joins_once() {
    let dir = tempfile::tempdir().unwrap();
    let text = stdout_of(&cargo_run(dir.path(), "map_reduce", &[]));

    // One branch per document, each named by its path, each calling the
    // model once for its own document.
    let titles = ["tides", "sourdough", "rust", "bees", "glaciers"];
    for (i, title) in titles.iter().enumerate() {
        let branch = format!("[summarise#{i}]");
        let started = text
            .lines()
            .filter(|l| l.starts_with(&format!("{branch} summarise started")))
            .count();
        assert_eq!(started, 1, "{branch} started once:\n{text}");
        assert!(
            text.contains(&format!("{branch} summary {{\"title\":\"{title}\"")),
            "{branch} summarised {title}:\n{text}"
        );
        assert_eq!(
            text.lines()
                .filter(|l| l.starts_with(&format!("{branch} summarise finished")))
                .count(),
            1,
            "{text}"
        );
    }

    // Read from the event lines, not from the example's own count: never
    // more than two branches between their start and their finish, and two
    // at once while the model answers.
    let (mut in_flight, mut peak) = (0i32, 0i32);
    for line in text.lines().filter(|l| l.starts_with("[summarise#")) {
        if line.contains("summarise started") {
            in_flight += 1;
        } else if line.contains("summarise finished") {
            in_flight -= 1;
        }
        peak = peak.max(in_flight);
    }
    assert_eq!((peak, in_flight), (2, 0), "{text}");

    // The join ran once, after every branch, and the summaries merged in
    // document order.
    assert_eq!(count(&text, "[main] joined 5 branches at combine"), 1);
    let joined = text.find("[main] joined").unwrap();
    let last_branch = text.rfind("summarise finished").unwrap();
    assert!(last_branch < joined, "{text}");
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("[main] combine finished"))
            .count(),
        1
    );
    let summaries: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("  summary: "))
        .map(|l| l.split(':').next().unwrap())
        .collect();
    assert_eq!(summaries, titles, "{text}");
    assert!(
        text.contains("outcome: $end after 7 steps and 6 model calls"),
        "{text}"
    );
    assert!(field(&text, "combined: ").contains("tides and glaciers"));
    assert!(
        !text.contains("] token "),
        "tokens only when asked:\n{text}"
    );
}

#[test]
fn map_reduce_with_tokens_streams_each_branch_s_model_text_under_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let text = stdout_of(&cargo_run(dir.path(), "map_reduce", &["--tokens"]));
    // The text streamed to each task, put together from its token lines.
    let streamed = |task: &str| -> (usize, String) {
        let pieces: Vec<String> = text
            .lines()
            .filter_map(|l| l.strip_prefix(&format!("[{task}] token ")))
            .map(|quoted| serde_json::from_str::<String>(quoted).unwrap())
            .collect();
        (pieces.len(), pieces.concat())
    };
    let summaries: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("  summary: "))
        .collect();
    assert_eq!(summaries.len(), 5, "{text}");
    for (i, line) in summaries.iter().enumerate() {
        let (_, summary) = line.split_once(": ").unwrap();
        let (pieces, whole) = streamed(&format!("summarise#{i}"));
        assert!(pieces > 1, "streamed in pieces:\n{text}");
        assert_eq!(whole, summary, "{text}");
    }
    let (pieces, whole) = streamed("main");
    assert!(pieces > 1);
    assert_eq!(whole, field(&text, "combined: "));
}

#[test]
fn sub_agent_pauses_inside_the_child_and_another_process_resumes_it_without_rerunning_its_steps() {
    let dir = tempfile::tempdir().unwrap();

    // First process: runs until the sub-agent's approve step asks.
    let first = stdout_of(&cargo_run(dir.path(), "sub_agent", &[]));
    for ran in ["plan", "research/search", "research/approve"] {
        assert!(
            first.contains(&format!("  ran {ran} (process ")),
            "{ran}:\n{first}"
        );
    }
    assert!(!first.contains("ran research/summarise"), "{first}");
    assert!(!first.contains("ran write"), "{first}");
    assert!(
        first.contains("paused inside research/approve: "),
        "{first}"
    );
    let session = field(&first, "session:").to_string();
    let interrupt = field(&first, "interrupt:").to_string();
    assert!(
        dir.path().join(".harness/sub_agent").is_dir(),
        "the session is stored under .harness/"
    );

    // An answer other than yes or no is refused, and the session still
    // waits on the same question.
    let refused = cargo_run(
        dir.path(),
        "sub_agent",
        &["--resume", &session, "--answer", "maybe"],
    );
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("answer yes or no, not \"maybe\""),
        "{refused:?}"
    );

    // Second process: answers; the sub-agent goes on at approve.
    let second = stdout_of(&cargo_run(
        dir.path(),
        "sub_agent",
        &[
            "--resume",
            &session,
            "--answer",
            "yes",
            "--interrupt",
            &interrupt,
        ],
    ));
    assert!(
        second.contains(&format!("resuming session {session} with answer \"yes\"")),
        "{second}"
    );
    for ran in ["research/approve", "research/summarise", "write"] {
        assert!(
            second.contains(&format!("  ran {ran} (process ")),
            "{ran}:\n{second}"
        );
    }
    assert!(
        !second.contains("ran research/search"),
        "the sub-agent's completed step did not run again:\n{second}"
    );
    assert!(!second.contains("ran plan"), "{second}");
    let both = format!("{first}{second}");
    assert_eq!(
        both.lines()
            .filter(|l| l.starts_with("  ran research/search "))
            .count(),
        1,
        "search ran once over both processes"
    );
    let pid = |text: &str, step: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("  ran {step} ")))
            .unwrap()
            .rsplit_once("process ")
            .unwrap()
            .1
            .to_string()
    };
    assert_ne!(
        pid(&first, "research/search"),
        pid(&second, "research/summarise")
    );
    assert!(
        second.contains("log: research ended with `$end`: 3 notes from 3 sources"),
        "{second}"
    );
    assert_eq!(
        field(&second, "checkpoints:"),
        "$start → plan → research/search → research/approve → research/summarise → research → write"
    );

    // Answered: nothing waits any more.
    let again = cargo_run(
        dir.path(),
        "sub_agent",
        &["--resume", &session, "--answer", "yes"],
    );
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("is not waiting"),
        "{again:?}"
    );

    // Another session, answered no: the sub-agent ends without summarising
    // and the parent's `map_out` reports the notes dropped.
    let third = stdout_of(&cargo_run(dir.path(), "sub_agent", &[]));
    let session = field(&third, "session:").to_string();
    let fourth = stdout_of(&cargo_run(
        dir.path(),
        "sub_agent",
        &["--resume", &session, "--answer", "no"],
    ));
    assert!(!fourth.contains("ran research/summarise"), "{fourth}");
    assert!(!fourth.contains("ran research/search"), "{fourth}");
    assert!(
        fourth.contains("log: research ended with `dropped`: 3 notes dropped"),
        "{fourth}"
    );
    assert!(
        fourth.contains("brief: tides: nothing approved to report."),
        "{fourth}"
    );
}

#[test]
fn orchestrator_replans_a_failed_task_and_synthesizes_the_answer() {
    let dir = tempfile::tempdir().unwrap();
    let out = stdout_of(&cargo_run(dir.path(), "orchestrator", &[]));
    let story: Vec<&str> = out
        .lines()
        .filter(|l| {
            ["plan ", "wave ", "task ", "replan ", "ended with"]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .map(|l| l.split(':').next().unwrap_or(l))
        .collect();
    assert_eq!(
        story,
        [
            "plan 1",
            "wave 1",
            "task cause done",
            "task rhythm failed",
            "replan of plan 1",
            "plan 2",
            "wave 2",
            "task rhythm done",
            "wave 3",
            "task explainer done",
            "ended with"
        ],
        "{out}"
    );
    assert_eq!(field(&out, "ended with:"), "done");
    assert_eq!(field(&out, "plans:"), "2, replans: 1");
    // The replan says why: the failed task, its agent and its error.
    let error = field(&out, "task rhythm failed:");
    assert!(error.contains("overloaded, staged by the example"), "{out}");
    assert_eq!(
        field(&out, "replan of plan 1:"),
        format!("task `rhythm` (researcher) failed: {error}"),
        "{out}"
    );
    assert!(field(&out, "answer:").starts_with("Tides are the sea answering the Moon"));
    // The research tasks of the first wave ran at once, two at a time.
    assert!(out.contains("wave 1: [\"cause\",\"rhythm\"]"), "{out}");
    assert!(
        out.contains("\"task: researcher (sub-agent)\""),
        "the loop is drawn: {out}"
    );
}

#[test]
fn orchestrator_killed_mid_plan_is_resumed_with_resume_and_does_not_redo_what_is_done() {
    use std::io::{BufRead, BufReader};
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    let mut first = Command::new(harness_tests::example("harness-examples", "orchestrator"))
        .current_dir(dir.path())
        .env_remove("HARNESS_PROVIDER")
        .env_remove("HARNESS_MODEL")
        .process_group(0)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut session = None;
    let mut seen = Vec::new();
    for line in BufReader::new(first.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if let Some(s) = line.strip_prefix("session: ") {
            session = Some(s.to_string());
        }
        let second_wave = line.starts_with("wave 2");
        seen.push(line);
        if second_wave {
            break;
        }
    }
    // SIGKILL the example's whole process group.
    let killed = Command::new("kill")
        .args(["-s", "KILL", "--", &format!("-{}", first.id())])
        .status()
        .unwrap();
    assert!(killed.success());
    first.wait().unwrap();
    assert!(
        seen.iter().any(|l| l
            .strip_prefix("replan of plan 1: task `rhythm` (researcher) failed: ")
            .is_some_and(|why| why.contains("overloaded, staged by the example"))),
        "the replan and its reason: {seen:?}"
    );
    let session = session.unwrap();

    let out = stdout_of(&cargo_run(
        dir.path(),
        "orchestrator",
        &["--resume", &session],
    ));
    assert_eq!(field(&out, "session:"), session);
    assert_eq!(field(&out, "ended with:"), "done");
    assert_eq!(
        count(
            &out,
            "plan 1: cause (researcher), rhythm (researcher), explainer (writer)"
        ),
        0
    );
    assert!(
        !out.lines().any(|l| l.starts_with("plan ")),
        "no plan again: {out}"
    );
    assert!(
        !out.contains("task cause done"),
        "cause did not run again: {out}"
    );
    assert_eq!(field(&out, "plans:"), "2, replans: 1");
    assert!(
        out.contains("result cause (researcher, plan 1): The Moon's gravity"),
        "the first process's result is kept: {out}"
    );
    assert!(field(&out, "answer:").starts_with("Tides are the sea answering the Moon"));
}
