//! What `harness run` and `harness analyze --trace --dot` print for people
//! (needs `python3`): text a cell controls (its output, its error, the
//! names of files it wrote) reaches the terminal with its control
//! characters escaped, so a cell cannot clear the screen, move the cursor,
//! set the window title or the clipboard, or overwrite the summary.
//! `--json` is left as it is.

use crate::support::{harness_in, workdir};

/// Cells that print, display, raise and name files with terminal control
/// sequences: ESC with CSI (erase, cursor up), OSC (window title, OSC 52
/// clipboard) ended by BEL, the C1 CSI (U+009B), a carriage return that
/// would overwrite its line, backspaces, a DEL, a form feed.
const SCRIPT: &str = r#"# %% Output
import sys
print("\x1b[2J\x1b]0;pwned\x07\x1b[1A\x1b[2Kfake: 0 failed")
print("clip \x1b]52;c;cHduZWQ=\x07 done")
print("c1 \x9b31m red \x9b2J")
print("7 executed, 0 failed\rFAKE SUMMARY")
print("back\b\b\b\bspace\x7f \x0c feed")
print("on stderr \x1b[31m red", file=sys.stderr)

# %% A file named with controls
name = "evil\x1b[2J\x07name.txt"
with open(name, "w") as handle:
    handle.write("x")

# %% Its reader
with open("evil\x1b[2J\x07name.txt") as handle:
    content = handle.read()

# %% A displayed value
"\x1b[5mblink\x1b[0m"

# %% An error
raise ValueError("boom \x1b]0;title\x07 \x9b2J \r overwritten")
"#;

/// The control characters in `bytes` other than newline and tab: C0, DEL
/// and C1 (as UTF-8, `C2 80`..`C2 9F`).
fn controls(bytes: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(bytes);
    text.chars()
        .filter(|&c| c.is_control() && c != '\n' && c != '\t')
        .map(|c| format!("U+{:04X}", u32::from(c)))
        .collect()
}

#[test]
fn harness_run_escapes_control_characters_a_cell_prints() {
    let dir = workdir("run-terminal-controls");
    std::fs::write(dir.join("controls.py"), SCRIPT).unwrap();
    let out = harness_in(&dir, &["run", "controls.py"]);
    assert_eq!(out.status.code(), Some(1), "the last cell fails");
    let stdout = String::from_utf8_lossy(&out.stdout);
    for (stream, bytes) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
        let found = controls(bytes);
        assert!(
            found.is_empty(),
            "{stream} holds control characters {found:?}:\n{}",
            String::from_utf8_lossy(bytes)
        );
    }
    // Shown, escaped: the reader sees what the cell tried.
    for shown in [
        r"\x1b[2J\x1b]0;pwned\x07",
        r"\x1b]52;c;cHduZWQ=\x07",
        r"\u{9b}31m",
        r"\x0dFAKE SUMMARY",
        r"back\x08\x08",
        r"\x7f",
        r"\x0c",
        r"on stderr \x1b[31m",
        r"evil\x1b[2J\x07name.txt",
        r"\x1b[5mblink",
        r"boom \x1b]0;title\x07",
    ] {
        assert!(stdout.contains(shown), "{shown} not in:\n{stdout}");
    }
    // The summary is the last line, whole.
    let last = stdout.lines().last().unwrap();
    assert!(last.contains("1 failed"), "{last}");

    // `--json` is JSON as before: the text is there, escaped by JSON.
    let out = harness_in(&dir, &["run", "--json", "controls.py"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let error = report["entries"][4]["error"].as_str().unwrap();
    assert!(error.contains("boom \x1b]0;title\x07"), "{error}");
}

#[test]
fn harness_analyze_trace_dot_escapes_file_names_a_cell_chose() {
    let dir = workdir("analyze-terminal-controls");
    std::fs::write(dir.join("controls.py"), SCRIPT).unwrap();
    let out = harness_in(&dir, &["run", "--quiet", "controls.py"]);
    assert_eq!(out.status.code(), Some(1));
    let out = harness_in(&dir, &["analyze", "--trace", "--dot", "controls.py"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dot = String::from_utf8_lossy(&out.stdout);
    assert!(
        dot.contains("name.txt"),
        "the traced file is on an edge:\n{dot}"
    );
    let found = controls(&out.stdout);
    assert!(found.is_empty(), "control characters {found:?}:\n{dot}");
}

/// `harness analyze`'s errors quote what a model or a cell wrote (the
/// file's name, a cell's source in a syntax error, a trace): shown with
/// their control characters escaped.
#[test]
fn harness_analyze_escapes_control_characters_in_its_errors() {
    let dir = workdir("analyze-error-controls");
    let cases: [(&str, &str); 3] = [
        // A name chosen to clear the screen; a cell that does not parse.
        ("bad\x1b[2J\x07.py", "# %%\nx = (1,\n"),
        // A cell whose syntax error quotes a line holding an OSC sequence.
        ("quoted.py", "# %%\nprint('\x1b]0;title\x07') +\n"),
        // A notebook that is not JSON, named with a C1 CSI and a CR.
        ("nb\u{9b}2J\rx.ipynb", "{\"cells\": [\x1b[1A"),
    ];
    for (name, text) in cases {
        std::fs::write(dir.join(name), text).unwrap();
        let out = harness_in(&dir, &["analyze", name]);
        assert_ne!(out.status.code(), Some(0), "{name:?} is refused");
        assert!(!out.stderr.is_empty(), "{name:?}: an error is shown");
        let found = controls(&out.stderr);
        assert!(
            found.is_empty(),
            "{name:?}: stderr holds control characters {found:?}:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = harness_in(&dir, &["analyze", "bad\x1b[2J\x07.py"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(r"bad\x1b[2J\x07.py"), "{stderr}");
}
