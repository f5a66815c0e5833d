//! The `assistant` example, run as a new user would: the built binary in
//! a directory of its own, answered on its standard input, stopped at a
//! question and resumed by a second process.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

// `harness_tests::example` and its cargo (that crate sits above the kit;
// there its functions are exported, here they are private to the tests).
#[allow(unreachable_pub)]
#[path = "../../../tests/cargo_command.rs"]
mod cargo_command;

const README: &str = "line one about an agent\nline two\nthe agent kit\n";

/// The example's binary, built as `harness_tests::example` builds it
/// (once per test process).
pub(crate) fn assistant() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| cargo_command::example("harness-examples", "assistant"))
}

/// A working directory with a README.md of known size.
pub(crate) fn workdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("a temporary directory: {e}"));
    std::fs::write(dir.path().join("README.md"), README)
        .unwrap_or_else(|e| panic!("README.md is written: {e}"));
    dir
}

/// Runs the assistant in `dir` with `args`, typing `input`.
fn run(dir: &Path, args: &[&str], input: &str) -> (String, Output) {
    let mut child = Command::new(assistant())
        .args(["--store", ".harness/assistant"])
        .args(args)
        .current_dir(dir)
        // Offline, whatever the environment of the test run.
        .env_remove("HARNESS_PROVIDER")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("the assistant starts: {e}"));
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(input.as_bytes())
            .unwrap_or_else(|e| panic!("the assistant reads its input: {e}"));
    }
    let output = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("the assistant exits: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "the assistant succeeds:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    (stdout, output)
}

fn questions(stdout: &str) -> Vec<&str> {
    stdout
        .lines()
        .filter(|l| l.starts_with("? "))
        .map(|l| l.split_whitespace().nth(1).unwrap_or_default())
        .collect()
}

#[test]
fn the_assistant_asks_before_each_shell_command_and_remembers_always() {
    let dir = workdir();
    std::fs::write(
        dir.path().join("prices.json"),
        r#"{"scripted": {"input": 1.0, "output": 2.0}}"#,
    )
    .unwrap_or_else(|e| panic!("the price table is written: {e}"));
    // `a` for `wc -l README.md` (always allow that command line), `y` for
    // `grep`; the second `wc -l README.md` runs unasked.
    let (out, _) = run(dir.path(), &["--prices", "prices.json"], "a\ny\n");
    assert_eq!(questions(&out), ["call_2", "call_3"], "{out}");
    assert!(out.contains("README.md\n"), "{out}"); // list_dir ran unasked
    assert!(out.contains("← call_3\n      2\n"), "{out}");
    assert!(out.contains("← call_4\n      3 README.md"), "{out}");
    assert_eq!(out.matches("3 README.md").count(), 2, "{out}");
    assert!(
        out.contains("always allowed in this session: shell: wc -l README.md\n"),
        "{out}"
    );
    assert!(out.contains("ended: answered after 4 model turns"), "{out}");
    // 2211 input tokens at 1 and 111 output tokens at 2 per million.
    assert!(
        out.contains("scripted: 2211 input, 111 output; cost 0.002433\ntotal: 2211 input, 111 output; cost 0.002433"),
        "{out}"
    );
}

#[test]
fn a_second_process_resumes_at_the_question_with_the_allow_list_of_the_first() {
    let dir = workdir();
    // The first process: always allow `wc -l README.md`, then the input
    // ends at `grep`.
    let (first, _) = run(dir.path(), &[], "a\n");
    assert_eq!(questions(&first), ["call_2", "call_3"], "{first}");
    assert!(first.contains("3 README.md"), "{first}");
    assert!(first.contains("paused at a question"), "{first}");
    let session = first
        .lines()
        .find_map(|l| l.strip_prefix("session: "))
        .unwrap_or_else(|| panic!("the session is printed:\n{first}"))
        .to_owned();
    // The second process answers `grep`; `wc -l README.md` runs unasked,
    // by the allow-list the first process stored.
    let (second, _) = run(dir.path(), &["--resume", &session], "y\n");
    assert_eq!(questions(&second), ["call_3"], "{second}");
    assert!(second.contains("← call_3\n      2\n"), "{second}");
    assert!(second.contains("← call_4\n      3 README.md"), "{second}");
    assert!(
        second.contains("ended: answered after 4 model turns"),
        "{second}"
    );
    // Usage is the session's, both processes' turns.
    assert!(
        second.contains("scripted: 2211 input, 111 output\ntotal: 2211 input, 111 output"),
        "{second}"
    );
    // The session is finished: resuming it again is refused.
    let output = Command::new(assistant())
        .args(["--store", ".harness/assistant", "--resume", &session])
        .current_dir(dir.path())
        .env_remove("HARNESS_PROVIDER")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("the assistant runs: {e}"));
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("is not waiting"), "{stderr}");
}

#[test]
fn edits_are_checked_and_corrections_and_rejections_reach_the_model() {
    let dir = workdir();
    let input = [
        // call_2: an edit that does not match the schema, then one that does.
        "e",
        r#"{"command": 5}"#,
        "e",
        r#"{"command": "wc -c README.md"}"#,
        // call_3: a correction.
        "c",
        "stop counting words",
        // call_4 (`wc -l README.md` is not always allowed: the edit was a
        // plain approval).
        "n",
        "enough",
    ]
    .join("\n")
        + "\n";
    let (out, _) = run(dir.path(), &[], &input);
    assert_eq!(
        questions(&out),
        ["call_2", "call_2", "call_3", "call_4"],
        "{out}"
    );
    assert!(
        out.contains("`call_2`") && out.contains("expected a string"),
        "{out}"
    );
    assert!(out.contains("47 README.md"), "{out}");
    assert!(
        out.contains("✗ call_3\n      not run: the user answered with a correction"),
        "{out}"
    );
    assert!(out.contains("user: stop counting words"), "{out}");
    assert!(
        out.contains("✗ call_4\n      not run: the user rejected this call: enough"),
        "{out}"
    );
    assert!(!out.contains("3 README.md"), "{out}");
}

#[test]
fn a_bad_price_table_is_an_error_naming_the_file() {
    let dir = workdir();
    std::fs::write(
        dir.path().join("prices.json"),
        r#"{"scripted": {"input": -1, "output": 2}}"#,
    )
    .unwrap_or_else(|e| panic!("the price table is written: {e}"));
    std::fs::write(dir.path().join("broken.json"), "{\"scripted\": ")
        .unwrap_or_else(|e| panic!("the price table is written: {e}"));
    for (file, needle) in [
        ("prices.json", "not a finite, non-negative"),
        ("broken.json", "is not valid"),
        ("missing.json", "cannot read"),
    ] {
        let output = Command::new(assistant())
            .args(["--store", ".harness/assistant", "--prices", file])
            .current_dir(dir.path())
            .env_remove("HARNESS_PROVIDER")
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("the assistant runs: {e}"));
        assert!(!output.status.success());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(file) && stderr.contains(needle), "{stderr}");
    }
}
