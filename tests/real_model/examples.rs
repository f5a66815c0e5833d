//! Every example, run as a user runs it against a local server:
//! `HARNESS_PROVIDER=openai OPENAI_BASE_URL=… HARNESS_MODEL=… cargo run
//! --example NAME`, in a fresh directory, reading what it prints.
//!
//! What is asserted is the loop's behaviour as the example reports it —
//! the steps taken, tool results fed back, approvals asked and answered,
//! sessions stored and resumed in another process, usage counted, a typed
//! error where the model fails — never what the model wrote.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Instant;

use crate::server;
use harness_tests::stdout_of;

/// Example `EXAMPLE` of `PACKAGE` run with `ARGS` in `dir` against the
/// local model (as `cargo run -p PACKAGE --example EXAMPLE -- ARGS` runs
/// it), with `input` on its standard input; prints how long it took (the
/// figures of the note come from these lines).
fn run_example(package: &str, example: &str, dir: &Path, args: &[&str], input: &str) -> Output {
    let (url, model) = server();
    // Built first, so that the time printed is the run's, not the build's.
    let binary = harness_tests::example(package, example);
    let began = Instant::now();
    let mut child = Command::new(binary)
        .args(args)
        .current_dir(dir)
        .env("HARNESS_PROVIDER", "openai")
        .env("OPENAI_BASE_URL", url)
        .env("HARNESS_MODEL", model)
        // A local server takes no key; none may leak in from the caller.
        .env_remove("OPENAI_API_KEY")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    // What the loop did, in the example's words, for the record.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let said: Vec<&str> = stdout
        .lines()
        .chain(stderr.lines().filter(|l| l.starts_with("error")))
        .filter(|l| {
            [
                "outcome:",
                "ended",
                "plans:",
                "solved",
                "not solved",
                "completed with",
                "paused",
                "error",
                "total:",
            ]
            .iter()
            .any(|p| l.starts_with(p))
        })
        .collect();
    eprintln!(
        "real model: {example} {args:?} ran in {:.1} s: {}",
        began.elapsed().as_secs_f64(),
        said.join(" | ")
    );
    out
}

/// The number just before `word` in `line`: 3 for "after 3 steps" and
/// `steps`.
fn number_before(line: &str, word: &str) -> u64 {
    let words: Vec<&str> = line.split_whitespace().collect();
    words
        .windows(2)
        .find(|w| w[1] == word)
        .and_then(|w| w[0].parse().ok())
        .unwrap_or_else(|| panic!("no number before {word:?} in {line:?}"))
}

fn line_starting<'a>(text: &'a str, prefix: &str) -> &'a str {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starts with {prefix:?} in:\n{text}"))
}

#[test]
fn quickstart_calls_the_weather_tool_feeds_the_result_back_and_completes() {
    let dir = tempfile::tempdir().unwrap();
    let text = stdout_of(&run_example(
        "harness-examples",
        "quickstart",
        dir.path(),
        &[],
        "",
    ));
    let calls = text
        .lines()
        .filter(|l| l.contains("[think] model calls weather("))
        .count();
    let results = text
        .lines()
        .filter(|l| l.starts_with("  [call_tools] weather returns"))
        .count();
    assert!(calls >= 1, "the model called the tool:\n{text}");
    assert!(results >= 1, "its result went back to the model:\n{text}");
    let outcome = line_starting(&text, "outcome: ");
    assert!(outcome.starts_with("outcome: complete after"), "{outcome}");
    // think → call_tools → think …: every model call but the last is
    // followed by a tool step.
    let steps = number_before(outcome, "steps");
    let model_calls = number_before(outcome, "model");
    assert!(model_calls >= 2, "{outcome}");
    assert_eq!(steps, 2 * model_calls - 1, "{outcome}");
}

#[test]
fn map_reduce_summarises_each_document_in_its_own_branch_and_streams_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let text = stdout_of(&run_example(
        "harness-examples",
        "map_reduce",
        dir.path(),
        &["--tokens"],
        "",
    ));
    for branch in 0..5 {
        let summary = format!("[summarise#{branch}] summary ");
        let line = line_starting(&text, &summary);
        // The typed summary arrived as JSON through response_format.
        let json: serde_json::Value = serde_json::from_str(&line[summary.len()..]).unwrap();
        assert!(json["words"].as_u64().unwrap() > 0, "{line}");
        assert!(
            text.contains(&format!("[summarise#{branch}] token ")),
            "branch {branch} streamed its tokens:\n{text}"
        );
    }
    assert!(
        text.contains("[main] joined 5 branches at combine"),
        "{text}"
    );
    assert!(text.contains("at most 2 branches ran at once"), "{text}");
    let outcome = line_starting(&text, "outcome: ");
    assert!(
        outcome.starts_with("outcome: $end after 7 steps and 6 model calls"),
        "{outcome}"
    );
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("  summary: "))
            .count(),
        5,
        "{text}"
    );
}

#[test]
fn assistant_pauses_at_a_shell_command_and_another_process_approves_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "one\ntwo\nthree\n").unwrap();
    // The first process: no answer on its input (end of input), so it stops
    // at the approval question with the session saved.
    let first = stdout_of(&run_example(
        "harness-examples",
        "assistant",
        dir.path(),
        &["--task", "Run the shell command: wc -l notes.txt"],
        "",
    ));
    assert!(
        first.contains("wants to run shell("),
        "the model's shell command waits for approval:\n{first}"
    );
    assert!(first.contains("paused at a question"), "{first}");
    let session = line_starting(&first, "session: ")["session: ".len()..].trim();

    // Another process answers "yes": the command runs once, its output goes
    // back to the model, which answers.
    let second = stdout_of(&run_example(
        "harness-examples",
        "assistant",
        dir.path(),
        &["--resume", session],
        "y\n",
    ));
    assert!(second.contains("wants to run shell("), "{second}");
    let result = second
        .lines()
        .skip_while(|l| !l.contains("  ← "))
        .nth(1)
        .unwrap_or_else(|| panic!("the command's output is shown:\n{second}"));
    assert!(result.contains("notes.txt"), "wc's own output: {result}");
    let ended = line_starting(&second, "ended: ");
    assert!(ended.starts_with("ended: answered after"), "{ended}");
    assert!(number_before(ended, "model") >= 2, "{ended}");
    // Usage was counted for the real model's calls.
    let usage = second
        .lines()
        .find(|l| l.starts_with("total: "))
        .unwrap_or_else(|| panic!("a usage total:\n{second}"));
    assert!(number_before(usage, "input") > 0, "{usage}");
    assert!(number_before(usage, "output") > 0, "{usage}");
}

#[test]
fn sub_agent_pauses_inside_the_child_and_resumes_there_in_another_process() {
    let dir = tempfile::tempdir().unwrap();
    let first = stdout_of(&run_example(
        "harness-examples",
        "sub_agent",
        dir.path(),
        &[],
        "",
    ));
    assert!(first.contains("ran research/search"), "{first}");
    assert!(first.contains("paused inside research/approve"), "{first}");
    let session = line_starting(&first, "session:")["session:".len()..].trim();

    let second = stdout_of(&run_example(
        "harness-examples",
        "sub_agent",
        dir.path(),
        &["--resume", session, "--answer", "yes"],
        "",
    ));
    assert!(
        !second.contains("ran research/search"),
        "the child's completed step does not run again:\n{second}"
    );
    assert!(second.contains("ran research/summarise"), "{second}");
    assert!(second.contains("ran write"), "{second}");
}

#[test]
fn orchestrator_runs_the_plan_or_replans_with_each_reason_printed() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_example(
        "harness-examples",
        "orchestrator",
        dir.path(),
        &["--max-replans", "2"],
        "",
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let replans: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("replan of plan "))
        .collect();
    for line in &replans {
        // "replan of plan N: reason; reason"
        let (_, reasons) = line
            .split_once(": ")
            .unwrap_or_else(|| panic!("a replan names its reasons: {line}"));
        assert!(!reasons.trim().is_empty(), "{line}");
    }
    let ended = line_starting(&text, "ended with: ");
    // "plans: P, replans: R": every replan was printed with its reasons.
    let counts = numbers(line_starting(&text, "plans: "));
    assert_eq!(counts.get(1).copied(), Some(replans.len() as u32), "{text}");
    match ended {
        "ended with: done" => {
            assert!(out.status.success(), "an answer exits with 0: {text}");
            assert!(text.lines().any(|l| l.starts_with("answer: ")), "{text}");
            assert!(text.lines().any(|l| l.starts_with("result ")), "{text}");
        }
        "ended with: gave_up" => {
            // Gave up only after the allowed replans, each printed.
            assert_eq!(replans.len(), 3, "{text}");
            assert!(text.contains("no answer"), "{text}");
            // Giving up is a failure for the shell too.
            assert_eq!(out.status.code(), Some(1), "{text}");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(stderr.contains("the orchestrator gave up"), "{stderr}");
        }
        other => panic!("the run ends done or gave_up: {other}\n{text}"),
    }
}

#[test]
fn long_running_plans_the_project_and_runs_a_session_or_names_why_not() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("wc");
    let out = run_example(
        "harness-examples",
        "long_running",
        dir.path(),
        // At most 4 model turns and 90 s of work in the session, and 90 s
        // to plan the project: a small model that never finishes is
        // stopped, and the test stays short (with 8 turns, one run here
        // took 47 s and the next 893 s; with 4, one answer of 4 096 tokens
        // took 268 s; with the planning unbounded, plans of 2 048 tokens
        // and their repairs held the suite for over 10 minutes).
        &[
            "--dir",
            project.to_str().unwrap(),
            "--sessions",
            "1",
            "--turns",
            "4",
            "--seconds",
            "90",
        ],
        "",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        // The initializer committed, and the session recorded its result.
        assert!(
            project.join("repo/.harness/ledger.json").is_file(),
            "{stdout}"
        );
        let log = Command::new("git")
            .args(["log", "--oneline"])
            .current_dir(project.join("repo"))
            .output()
            .unwrap();
        assert!(
            String::from_utf8_lossy(&log.stdout).lines().count() >= 1,
            "{stdout}"
        );
    } else {
        // A small model may fail the project: the reason is a typed error
        // naming the step, never a panic or a hang.
        let error = line_starting(&stderr, "error: ");
        assert!(error.contains("step `"), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

#[test]
fn code_agent_writes_cells_and_patches_a_failing_one_replaying_only_what_follows() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_example("harness-code", "code_agent", dir.path(), &[], "");
    let text = stdout_of(&out);
    let events: Vec<&str> = text.lines().filter(|l| l.starts_with('[')).collect();
    assert!(
        events.iter().any(|e| e.contains("proposed cell")),
        "the model wrote a cell:\n{text}"
    );
    let mut patched = None;
    for (i, event) in events.iter().enumerate() {
        // After every failure comes its diagnosis, then a patch or a named
        // refusal of the patcher.
        if event.contains(" FAILED: ") {
            let next = events.get(i + 1).copied().unwrap_or_default();
            assert!(
                next.contains("diagnosis of cell"),
                "{event} → {next}\n{text}"
            );
            let then = events.get(i + 2).copied().unwrap_or_default();
            assert!(
                then.contains("patch by ") || then.contains("no patch for cell"),
                "{next} → {then}\n{text}"
            );
        }
        if let Some((_, rest)) = event.split_once(" -> cell ") {
            patched = rest
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u32>().ok());
        }
        // A replay after a patch runs the patched cell and what follows it,
        // never a cell before it.
        if let Some(rest) = event.split_once("replay: executed ").map(|(_, r)| r) {
            let executed = rest.split(", reused").next().unwrap_or_default();
            let cells = numbers(executed);
            let cell = patched.expect("a replay follows a patch");
            assert!(
                cells.contains(&cell),
                "{event}: the patched cell {cell} ran"
            );
            assert!(
                cells.iter().all(|&c| c >= cell),
                "{event}: no cell before {cell} ran again"
            );
        }
    }
    assert!(
        text.lines()
            .any(|l| l.starts_with("solved in ") || l.starts_with("not solved: ")),
        "{text}"
    );
}

/// The numbers in `text`, in order.
fn numbers(text: &str) -> Vec<u32> {
    text.split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect()
}

#[test]
fn evals_scores_the_calculator_on_twenty_cases_rescores_offline_and_replays_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let text = stdout_of(&run_example(
        "harness-examples",
        "evals",
        dir.path(),
        &[],
        "",
    ));
    // Whatever the model answered, the report re-scores and replays the same.
    assert!(
        text.contains("re-scored offline: 20/20 cases scored the same"),
        "{text}"
    );
    assert!(text.contains("replayed: 20/20 cases identical"), "{text}");
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("evals-report.json")).unwrap(),
    )
    .unwrap();
    let cases = report["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 20);
    assert_eq!(report["model"], server().1.as_str());
    for case in cases {
        let name = &case["name"];
        let record = &case["record"];
        if case.get("failure").is_some() {
            assert!(case["scores"].as_object().unwrap().is_empty(), "{name}");
            continue;
        }
        // Every evaluator scored it.
        assert_eq!(case["scores"].as_object().unwrap().len(), 4, "{name}");
        // What was recorded is what ran: a tools step for every model
        // answer that called tools, a model step for every model call.
        let exchanges = record["exchanges"].as_array().unwrap();
        let calling = exchanges
            .iter()
            .filter(|e| e["outcome"].to_string().contains("tool_call"))
            .count();
        let steps: Vec<&str> = record["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["kind"] == "step_finished")
            .map(|e| e["step"].as_str().unwrap())
            .collect();
        assert_eq!(
            steps.iter().filter(|s| **s == "model").count(),
            exchanges.len(),
            "{name}: {steps:?}"
        );
        assert_eq!(
            steps.iter().filter(|s| **s == "tools").count(),
            calling,
            "{name}: {steps:?}"
        );
        assert_eq!(record["metrics"]["model_calls"], exchanges.len(), "{name}");
        assert!(
            record["metrics"]["usage"]["input_tokens"].as_u64().unwrap() > 0,
            "{name}"
        );
    }
}
