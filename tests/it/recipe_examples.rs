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

#[test]
fn long_running_hint_quotes_its_directory_so_the_shell_runs_it_as_printed() {
    let dir = tempfile::tempdir().unwrap();
    // Spaces, quotes, `$`, a command substitution, a newline, `;`.
    let project = dir.path().join("it's a \"$HOME\" $(touch pwned);\nproject");
    let out = stdout_of(&cargo_run(
        dir.path(),
        "long_running",
        &["--dir", project.to_str().unwrap(), "--sessions", "0"],
    ));
    let prefix = "continue in another process:\n  ";
    let hint = &out[out
        .find(prefix)
        .unwrap_or_else(|| panic!("no hint in:\n{out}"))
        + prefix.len()..];
    let hint = hint.strip_suffix('\n').unwrap();
    let quoted = hint
        .strip_prefix("cargo run -p harness-examples --example long_running -- --dir ")
        .unwrap_or_else(|| panic!("{hint}"));
    // The shell reads the quoted directory back as itself.
    let read = Command::new("sh")
        .args(["-c", &format!("printf '%s' {quoted}")])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8(read.stdout).unwrap(),
        project.to_str().unwrap()
    );
    // And the printed command, run by the shell as a user pastes it, goes
    // on with that project (nothing else is run on the way). Its `cargo
    // run -p harness-examples --example long_running --` (checked above)
    // runs the example built for the suite: a build of that one package
    // resolves other features, and so would build the example and its
    // dependencies again, over the suite's own build.
    let workspace = harness_tests::workspace_manifest();
    let cargo = "cargo() { \
        [ \"$1 $2 $3 $4 $5 $6\" = 'run -p harness-examples --example long_running --' ] \
        || { echo \"not the printed command: cargo $*\" >&2; exit 97; }; \
        shift 6; exec \"$EXAMPLE\" \"$@\"; }";
    let cont = Command::new("sh")
        .args(["-c", &format!("{cargo}\n{hint} --sessions 1")])
        .env(
            "EXAMPLE",
            harness_tests::example("harness-examples", "long_running"),
        )
        .current_dir(workspace.parent().unwrap())
        .env_remove("HARNESS_PROVIDER")
        .env_remove("HARNESS_MODEL")
        .output()
        .unwrap();
    let second = stdout_of(&cont);
    assert!(!second.contains("initialized: "), "{second}");
    assert!(
        second.contains("session 1: count-words → passing"),
        "{second}"
    );
    assert!(!dir.path().join("pwned").exists());
    assert!(!workspace.parent().unwrap().join("pwned").exists());
}

#[test]
fn orchestrator_that_gives_up_exits_with_a_failure_status() {
    let dir = tempfile::tempdir().unwrap();
    // No replan allowed: the staged failure of a research task ends it.
    let out = cargo_run(dir.path(), "orchestrator", &["--max-replans", "0"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stdout.contains("ended with: gave_up"), "{stdout}");
    assert!(stdout.contains("no answer"), "{stdout}");
    assert!(
        stderr.contains("error: the orchestrator gave up (`gave_up`)"),
        "{stderr}"
    );
    // (One that answers exits with 0: `stdout_of` in the orchestrator's
    // tests of compose_examples checks it.)
}
