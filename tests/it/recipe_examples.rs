//! The recipes' examples, run as a new user runs them: `cargo run -p
//! harness-examples --example NAME` in a fresh directory, offline (the
//! scripted model), reading what they print.
//!
//! `long_running` builds a word-count command over sessions in a git
//! repository: a first process stops after one session, a second one goes
//! on with the same project to the end.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use crate::compose_examples::{cargo_run, stdout_of};
use std::path::Path;
use std::process::Command;

fn git(repo: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(repo)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn long_running_builds_a_word_count_over_sessions_and_a_second_process_finishes_it() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("wc");
    let project_arg = project.to_str().unwrap();

    // Without arguments: a temporary directory, every session.
    let text = stdout_of(&cargo_run(dir.path(), "long_running", &[]));
    assert!(text.contains("initialized: 3 features"), "{text}");
    assert!(text.contains("every feature passes"), "{text}");
    assert!(text.contains("passing: 3 of 3"), "{text}");

    // One session, then another process goes on.
    let first = stdout_of(&cargo_run(
        dir.path(),
        "long_running",
        &["--dir", project_arg, "--sessions", "1"],
    ));
    assert!(
        first.contains("session 1: count-words → passing"),
        "{first}"
    );
    assert!(first.contains("passing: 1 of 3"), "{first}");
    assert!(!first.contains("session 2:"), "{first}");

    let second = stdout_of(&cargo_run(
        dir.path(),
        "long_running",
        &["--dir", project_arg],
    ));
    assert!(!second.contains("initialized: "), "{second}");
    assert!(!second.contains("session 1:"), "{second}");
    assert!(
        second.contains("session 2: count-lines → passing"),
        "{second}"
    );
    assert!(
        second.contains("session 3: count-bytes → passing"),
        "{second}"
    );
    assert!(second.contains("**State:** complete"), "{second}");

    // The repository: a commit per session, and the command works.
    let repo = project.join("repo");
    let log = git(&repo, &["log", "--format=%s"]);
    assert_eq!(
        log.lines().collect::<Vec<_>>(),
        [
            "session 3: count-bytes is passing",
            "session 2: count-lines is passing",
            "session 1: count-words is passing",
            "initialize the project: 3 features",
        ]
    );
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
    let out = Command::new("sh")
        .args([
            "-c",
            "printf 'one two\\nthree\\n' | sh wc.sh -l; printf 'one two\\n' | sh wc.sh",
        ])
        .current_dir(&repo)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "2\n2\n");
}
