//! The examples' command lines, as a newcomer mistypes them: `--help`
//! and `-h` print the usage on standard output and exit with 0; an
//! unknown argument, a missing or bad value is `error: …` naming it, the
//! usage on standard error, status 2, before anything is created; a
//! `--store` that holds no store is an error naming it when the example
//! would only read a session there (nothing is created), and errors are
//! sentences, not Rust's debug output. Offline, as `compose_examples`
//! runs them; only the paths that read the arguments, but for the few
//! runs that make a session to resume.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use crate::compose_examples::stdout_of;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, PoisonError};

/// Example `example`'s binary, built (or found up to date) once per test
/// process: these tests run the examples many times, each briefly.
fn binary(example: &'static str) -> PathBuf {
    static BUILT: Mutex<BTreeMap<&str, PathBuf>> = Mutex::new(BTreeMap::new());
    let mut built = BUILT.lock().unwrap_or_else(PoisonError::into_inner);
    built
        .entry(example)
        .or_insert_with(|| harness_tests::example(package(example), example))
        .clone()
}

/// [`cargo_run`](crate::compose_examples::cargo_run), without asking
/// cargo again whether the example is up to date: `example ARGS` in
/// `dir`, offline.
fn cargo_run(dir: &Path, example: &'static str, args: &[&str]) -> Output {
    Command::new(binary(example))
        .args(args)
        .current_dir(dir)
        .env("TMPDIR", dir)
        .env_remove("HARNESS_PROVIDER")
        .env_remove("HARNESS_MODEL")
        .output()
        .unwrap()
}

/// The package whose example `example` is.
fn package(example: &str) -> &'static str {
    if example == "code_agent" {
        "harness-code"
    } else {
        "harness-examples"
    }
}

/// Every example that reads its command line.
const EXAMPLES: [&str; 10] = [
    "quickstart",
    "interrupt_resume",
    "map_reduce",
    "sub_agent",
    "assistant",
    "orchestrator",
    "long_running",
    "evals",
    "serve",
    "code_agent",
];

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn shown(out: &Output) -> String {
    format!(
        "status {}\n--- stdout\n{}--- stderr\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    )
}

/// What is in `dir`, by name.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Not Rust's `{:?}` of an error or a value: `Io { path: …`, `Os { code`,
/// `Completed { signal`.
fn assert_no_debug_output(out: &Output) {
    let stderr = text(&out.stderr);
    for debug in [
        "Io {",
        "Os {",
        "{ path:",
        "Completed {",
        "Failed {",
        "kind: ",
    ] {
        assert!(!stderr.contains(debug), "{debug:?} in:\n{}", shown(out));
    }
}

/// `example ARGS` run in an empty directory is a usage error: status 2,
/// `error: …` with `needle`, the example's usage on standard error,
/// nothing on standard output, nothing created.
fn assert_usage_error(example: &'static str, args: &[&str], needle: &str) {
    let dir = tempfile::tempdir().unwrap();
    let out = cargo_run(dir.path(), example, args);
    let stderr = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{example} {args:?}:\n{}",
        shown(&out)
    );
    assert!(
        stderr.starts_with("error: ") && stderr.contains(needle),
        "{example} {args:?}: no `error: …{needle}…`:\n{}",
        shown(&out)
    );
    assert!(
        stderr.contains(&format!("usage: {example}")),
        "{example} {args:?}: no usage:\n{}",
        shown(&out)
    );
    assert_eq!(
        text(&out.stdout),
        "",
        "{example} {args:?}:\n{}",
        shown(&out)
    );
    assert_no_debug_output(&out);
    assert_eq!(
        entries(dir.path()),
        Vec::<String>::new(),
        "{example} {args:?} created something"
    );
}

#[test]
fn help_prints_the_usage_on_stdout_and_exits_0_having_done_nothing_else() {
    for example in EXAMPLES {
        for help in ["--help", "-h"] {
            let dir = tempfile::tempdir().unwrap();
            let out = cargo_run(dir.path(), example, &[help]);
            let stdout = text(&out.stdout);
            assert_eq!(
                out.status.code(),
                Some(0),
                "{example} {help}:\n{}",
                shown(&out)
            );
            assert!(
                stdout.starts_with(&format!("usage: {example}")),
                "{example} {help}:\n{}",
                shown(&out)
            );
            assert_eq!(text(&out.stderr), "", "{example} {help}:\n{}", shown(&out));
            // map_reduce printed its whole loop first.
            assert!(!stdout.contains("The loop"), "{example} {help}:\n{stdout}");
            assert!(!stdout.contains("graph "), "{example} {help}:\n{stdout}");
            assert_eq!(
                entries(dir.path()),
                Vec::<String>::new(),
                "{example} {help}"
            );
        }
    }
    // After other arguments too, and in place of a value: still nothing
    // created, not even the store named.
    for (example, args) in [
        (
            "interrupt_resume",
            &["--store", "made", "--resume", "s", "--help"][..],
        ),
        ("sub_agent", &["--store", "made", "-h"][..]),
        (
            "orchestrator",
            &["--store", "made", "--max-replans", "--help"][..],
        ),
        ("long_running", &["--dir", "made", "--turns", "-h"][..]),
        ("evals", &["--out", "made.json", "--help"][..]),
        ("serve", &["--store", "made", "--addr", "-h"][..]),
        ("map_reduce", &["--tokens", "--help"][..]),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let out = cargo_run(dir.path(), example, args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{example} {args:?}:\n{}",
            shown(&out)
        );
        assert!(text(&out.stdout).starts_with(&format!("usage: {example}")));
        assert_eq!(
            entries(dir.path()),
            Vec::<String>::new(),
            "{example} {args:?}"
        );
    }
}

#[test]
fn an_unknown_argument_is_a_usage_error_naming_it() {
    for example in EXAMPLES {
        assert_usage_error(example, &["--bogus"], "unknown argument \"--bogus\"");
    }
    // quickstart takes none at all; map_reduce read only its first.
    assert_usage_error("quickstart", &["extra"], "unknown argument \"extra\"");
    assert_usage_error(
        "map_reduce",
        &["--tokens", "--bogus"],
        "unknown argument \"--bogus\"",
    );
    assert_usage_error(
        "interrupt_resume",
        &["--store", "s", "bogus"],
        "unknown argument \"bogus\"",
    );
}

#[test]
fn a_missing_value_or_arguments_that_do_not_go_together_are_usage_errors() {
    for (example, flag) in [
        ("interrupt_resume", "--store"),
        ("interrupt_resume", "--answer"),
        ("sub_agent", "--resume"),
        ("assistant", "--task"),
        ("orchestrator", "--max-replans"),
        ("long_running", "--dir"),
        ("evals", "--baseline"),
        ("serve", "--addr"),
    ] {
        assert_usage_error(example, &[flag], &format!("{flag} needs a value"));
    }
    assert_usage_error(
        "interrupt_resume",
        &["--resume", "s"],
        "--resume needs --answer",
    );
    assert_usage_error(
        "interrupt_resume",
        &["--answer", "yes"],
        "go with --resume SESSION",
    );
    assert_usage_error(
        "sub_agent",
        &["--interrupt", "i"],
        "go with --resume SESSION",
    );
    assert_usage_error(
        "sub_agent",
        &["--resume", "s", "--answer", "maybe"],
        "answer yes or no, not \"maybe\"",
    );
    assert_usage_error(
        "assistant",
        &["--task", "t", "--resume", "s"],
        "--task starts a new session",
    );
    assert_usage_error("evals", &["--threshold", "0.1"], "give --baseline FILE too");
    assert_usage_error("evals", &["--models", ","], "--models needs model names");
    assert_usage_error(
        "evals",
        &["--models", "scripted", "--out", "r.json"],
        "does not go with --out or --baseline",
    );
}

#[test]
fn bad_numbers_are_usage_errors_saying_what_to_give() {
    for threshold in ["-5", "-0.01", "NaN", "inf", "-inf", "1e999", "abc", ""] {
        assert_usage_error(
            "evals",
            &["--baseline", "old.json", "--threshold", threshold],
            &format!("--threshold {threshold:?}: give a number ≥ 0"),
        );
    }
    for turns in ["0", "-1", "x", "1.5", "4294967296"] {
        assert_usage_error(
            "long_running",
            &["--turns", turns],
            &format!("--turns {turns:?}: give a whole number ≥ 1"),
        );
    }
    // 0 s failed only once the project's directory was made.
    for seconds in ["0", "-3", "x", "31536001", "18446744073709551615"] {
        assert_usage_error(
            "long_running",
            &["--seconds", seconds],
            &format!("--seconds {seconds:?}: give a whole number of seconds from 1"),
        );
    }
    for sessions in ["-1", "many"] {
        assert_usage_error(
            "long_running",
            &["--sessions", sessions],
            &format!("--sessions {sessions:?}: give a whole number ≥ 0"),
        );
    }
    for replans in ["-1", "two"] {
        assert_usage_error(
            "orchestrator",
            &["--max-replans", replans],
            &format!("--max-replans {replans:?}: give a whole number ≥ 0"),
        );
    }
    assert_usage_error("serve", &["--addr", "nowhere"], "--addr \"nowhere\": give");
}

#[test]
fn serve_refuses_an_address_other_machines_reach_before_creating_its_store() {
    for addr in ["0.0.0.0:2999", "[::]:2999", "192.0.2.1:2024"] {
        assert_usage_error(
            "serve",
            &["--addr", addr],
            &format!("--addr {addr}: not a loopback address"),
        );
    }
}

#[test]
fn evals_checks_its_baseline_and_out_before_running_any_case() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("adir")).unwrap();
    std::fs::write(dir.path().join("notes.json"), "{\"not\": \"a report\"}").unwrap();
    let before = entries(dir.path());
    for (args, needles) in [
        (
            &["--baseline", "nofile.json"][..],
            &["--baseline", "nofile.json", "No such file"][..],
        ),
        (
            &["--baseline", "notes.json"][..],
            &["--baseline", "notes.json", "not a report"][..],
        ),
        (&["--baseline", "adir"][..], &["--baseline", "adir"][..]),
        (
            &["--out", "adir"][..],
            &["--out", "adir", "is a directory"][..],
        ),
        (
            &["--out", "missing/report.json"][..],
            &["--out", "missing/report.json", "No such file"][..],
        ),
    ] {
        let out = cargo_run(dir.path(), "evals", args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}:\n{}", shown(&out));
        assert!(stderr.starts_with("error: "), "{args:?}:\n{}", shown(&out));
        for needle in needles {
            assert!(
                stderr.contains(needle),
                "{args:?}: no {needle:?}:\n{}",
                shown(&out)
            );
        }
        assert_no_debug_output(&out);
        // No case ran: no table, no report, no model chosen.
        assert_eq!(text(&out.stdout), "", "{args:?}:\n{}", shown(&out));
        assert!(
            !stderr.contains("model: scripted"),
            "{args:?}:\n{}",
            shown(&out)
        );
        assert_eq!(entries(dir.path()), before, "{args:?}");
        assert_eq!(entries(&dir.path().join("adir")), Vec::<String>::new());
    }
}

/// The modes that read an existing session, each with a `--store`.
fn reading_modes(store: &str) -> Vec<(&'static str, Vec<String>)> {
    let with = |args: &[&str]| -> Vec<String> {
        ["--store", store]
            .iter()
            .chain(args)
            .map(ToString::to_string)
            .collect()
    };
    vec![
        (
            "interrupt_resume",
            with(&["--resume", "s1", "--answer", "yes"]),
        ),
        ("interrupt_resume", with(&["sessions", "list"])),
        ("interrupt_resume", with(&["sessions", "show", "s1"])),
        ("sub_agent", with(&["--resume", "s1", "--answer", "yes"])),
        ("assistant", with(&["--resume", "s1"])),
        ("orchestrator", with(&["--resume", "s1"])),
    ]
}

#[test]
fn resuming_from_a_store_that_is_not_there_names_it_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nowhere/x");
    std::fs::create_dir(dir.path().join("empty")).unwrap();
    std::fs::write(dir.path().join("file"), "not a store").unwrap();
    let before = entries(dir.path());
    for (store, needle) in [
        (missing.to_str().unwrap(), "nothing is there"),
        ("empty", "the directory holds no sled database"),
        ("file", "it is a file"),
    ] {
        for (example, args) in reading_modes(store) {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = cargo_run(dir.path(), example, &args);
            let stderr = text(&out.stderr);
            assert_eq!(
                out.status.code(),
                Some(1),
                "{example} {args:?}:\n{}",
                shown(&out)
            );
            assert!(
                stderr.contains(&format!("error: no store at {store}: {needle}")),
                "{example} {args:?}:\n{}",
                shown(&out)
            );
            assert_eq!(
                text(&out.stdout),
                "",
                "{example} {args:?}:\n{}",
                shown(&out)
            );
            assert_eq!(entries(dir.path()), before, "{example} {args:?}");
            assert_eq!(entries(&dir.path().join("empty")), Vec::<String>::new());
        }
    }
    // Without --store: the default, not created either.
    for (example, args) in [
        (
            "interrupt_resume",
            &["--resume", "s1", "--answer", "yes"][..],
        ),
        ("sub_agent", &["--resume", "s1", "--answer", "no"][..]),
        ("assistant", &["--resume", "s1"][..]),
        ("orchestrator", &["--resume", "s1"][..]),
    ] {
        let out = cargo_run(dir.path(), example, args);
        assert_eq!(out.status.code(), Some(1), "{example}:\n{}", shown(&out));
        assert!(
            text(&out.stderr).contains(&format!("no store at .harness/{}", {
                if example == "interrupt_resume" {
                    "sessions"
                } else {
                    example
                }
            })),
            "{example}:\n{}",
            shown(&out)
        );
        assert!(!dir.path().join(".harness").exists(), "{example}");
    }
}

/// A store with one session of interrupt_resume waiting on its question:
/// the session's id and its interrupt's.
fn waiting_session(dir: &Path, store: &str) -> (String, String) {
    let first = stdout_of(&cargo_run(dir, "interrupt_resume", &["--store", store]));
    let field = |label: &str| {
        first
            .lines()
            .find_map(|l| l.strip_prefix(label))
            .map(|v| v.trim().to_string())
            .unwrap_or_else(|| panic!("no {label:?} in:\n{first}"))
    };
    (field("session:"), field("interrupt:"))
}

#[test]
fn a_session_not_in_the_store_is_named_with_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = "claims store";
    waiting_session(dir.path(), store);
    for (example, args) in reading_modes(store) {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        if args.contains(&"list") {
            continue; // the store is there: it lists its sessions
        }
        let out = cargo_run(dir.path(), example, &args);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{example} {args:?}:\n{}",
            shown(&out)
        );
        assert!(
            text(&out.stderr).contains(&format!("error: no session s1 in the store at {store}")),
            "{example} {args:?}:\n{}",
            shown(&out)
        );
    }
}

#[test]
fn answering_a_session_that_waits_for_nothing_says_its_phase_in_words() {
    let dir = tempfile::tempdir().unwrap();
    let store = "s";
    let (session, interrupt) = waiting_session(dir.path(), store);
    let answer = ["--store", store, "--resume", &session, "--answer", "yes"];
    let done = stdout_of(&cargo_run(dir.path(), "interrupt_resume", &answer));
    assert!(done.contains("completed with `$end`"), "{done}");

    let with_interrupt = [&answer[..], &["--interrupt", &interrupt]].concat();
    for args in [&answer[..], &with_interrupt[..]] {
        let out = cargo_run(dir.path(), "interrupt_resume", args);
        assert_eq!(out.status.code(), Some(1), "{}", shown(&out));
        assert!(
            text(&out.stderr).contains(&format!(
                "error: session {session} is not waiting for an answer: it is completed with `$end`"
            )),
            "{}",
            shown(&out)
        );
        assert_no_debug_output(&out);
    }

    // sub_agent's: answered once with no, its research ends; again, it
    // is not waiting.
    let first = stdout_of(&cargo_run(dir.path(), "sub_agent", &["--store", store]));
    let session = first
        .lines()
        .find_map(|l| l.strip_prefix("session:"))
        .unwrap()
        .trim()
        .to_string();
    let no = ["--store", store, "--resume", &session, "--answer", "no"];
    stdout_of(&cargo_run(dir.path(), "sub_agent", &no));
    let out = cargo_run(dir.path(), "sub_agent", &no);
    assert_eq!(out.status.code(), Some(1), "{}", shown(&out));
    assert!(
        text(&out.stderr).contains(&format!(
            "error: session {session} is not waiting for an answer: it is completed with `$end`"
        )),
        "{}",
        shown(&out)
    );
    assert_no_debug_output(&out);
}

#[test]
fn long_running_names_the_directory_it_cannot_make() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("lrf")).unwrap();
    std::fs::write(dir.path().join("lrf/file"), "in the way").unwrap();
    let mut cases = vec![("lrf/file", "Not a directory")];
    if Path::new("/proc/self").exists() {
        cases.push(("/proc", "No such file or directory"));
    }
    for (project, why) in cases {
        let out = cargo_run(
            dir.path(),
            "long_running",
            &["--dir", project, "--sessions", "0"],
        );
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{project}:\n{}", shown(&out));
        assert!(
            stderr.contains(&format!(
                "error: --dir {project}: cannot create the project's repository directory {project}/repo: {why}"
            )),
            "{project}:\n{}",
            shown(&out)
        );
    }
    assert_eq!(entries(&dir.path().join("lrf")), ["file"]);
}
