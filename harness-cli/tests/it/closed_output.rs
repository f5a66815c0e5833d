//! The reader goes away: `harness … | head -1` closes the pipe while
//! `harness` still writes. Every command ends quietly (no panic) with the
//! status it would have had (0, or 1 when something failed after the
//! reader went); with stderr closed, errors still give their status, not a
//! panic.

use crate::support::workdir;
use harness::SessionId;
use harness::session::save_value;
use std::process::{Command, Output, Stdio};

/// Runs `harness ARGS` with its stdout a pipe whose reading end is closed
/// before the command starts, so that its first write already fails.
fn with_stdout_closed(args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(args)
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

/// `n` cells, each binding a name and printing a line.
fn printing_cells(n: usize) -> String {
    (0..n)
        .map(|i| format!("# %%\nx{i} = {i}\nprint('cell', x{i})\n"))
        .collect()
}

/// A file store in `dir/store` holding `n` sessions `s0`, `s1`, … of
/// saved values.
fn store_of_notes(dir: &std::path::Path, n: usize) -> std::path::PathBuf {
    let store = dir.join("store");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let files = harness_stores::FileStore::open(&store).unwrap();
        for i in 0..n {
            let id = SessionId::from(format!("s{i}"));
            save_value(&files, "notes", &id, serde_json::json!({"i": i}))
                .await
                .unwrap_or_else(|e| panic!("cannot save {id} in {}: {e}", store.display()));
        }
    });
    store
}

fn assert_quiet(args: &[&str], output: &Output) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
        "harness {args:?}: {stderr}"
    );
    assert_eq!(output.status.code(), Some(0), "harness {args:?}: {stderr}");
}

#[test]
fn every_command_ends_quietly_when_its_reader_has_gone() {
    let dir = workdir("closed-output");
    let script = dir.join("cells.py");
    std::fs::write(&script, printing_cells(200)).unwrap();
    let store = store_of_notes(&dir, 50);
    let (script, store) = (script.to_str().unwrap(), store.to_str().unwrap());
    for args in [
        vec!["analyze", script],
        vec!["analyze", "--dot", script],
        vec!["sessions", "--store", store, "list"],
        vec!["sessions", "--store", store, "show", "s7"],
        vec!["sessions", "--store", store, "history", "s7"],
        vec!["run", script],
        vec!["run", "--json", "--fresh", script],
    ] {
        let output = with_stdout_closed(&args);
        assert_quiet(&args, &output);
    }
}

#[test]
fn errors_keep_their_status_when_stderr_is_closed() {
    let dir = workdir("closed-stderr");
    let missing = dir.join("missing.py");
    for (args, code) in [
        (vec!["analyze", missing.to_str().unwrap()], 2),
        (vec!["run", missing.to_str().unwrap()], 2),
        (
            vec!["sessions", "--store", missing.to_str().unwrap(), "list"],
            1,
        ),
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let status = Command::new(env!("CARGO_BIN_EXE_harness"))
            .args(&args)
            .stdout(Stdio::null())
            .stderr(writer)
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(code), "harness {args:?}");
    }
}

/// A failure after the reader went still gives its status: a cell that
/// raises after 200 printed ones, a store whose sessions list but one
/// does not read.
#[test]
fn a_failure_after_the_reader_went_keeps_its_status() {
    let dir = workdir("closed-output-failing");
    let script = dir.join("failing.py");
    let mut cells = printing_cells(200);
    cells.push_str("# %%\nraise ValueError('the last cell fails')\n");
    std::fs::write(&script, cells).unwrap();
    let store = store_of_notes(&dir, 50);
    // One session's head no longer reads.
    std::fs::write(store.join("s-s49").join("head.json"), "{ not json").unwrap();
    let (script, store) = (script.to_str().unwrap(), store.to_str().unwrap());
    for args in [
        vec!["run", script],
        vec!["run", "--fresh", script],
        vec!["sessions", "--store", store, "list"],
    ] {
        let output = with_stdout_closed(&args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!stderr.contains("panicked"), "harness {args:?}: {stderr}");
        assert_eq!(output.status.code(), Some(1), "harness {args:?}: {stderr}");
    }
}
