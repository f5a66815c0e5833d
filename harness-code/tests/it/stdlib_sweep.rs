//! Analyses every `.py` file of the local CPython standard library: no file
//! may panic, and every file that CPython itself compiles must parse.
//!
//! This test needs `python3` on PATH and fails (rather than skips) without it.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use harness_code::analyze_cell;

/// Python that reads file paths on stdin and prints those CPython compiles.
const COMPILE_CHECK: &str = r#"
import sys, warnings
warnings.simplefilter("ignore")
for line in sys.stdin:
    path = line.rstrip("\n")
    try:
        with open(path, "rb") as f:
            compile(f.read(), path, "exec", dont_inherit=True)
    except Exception:
        continue
    print(path)
"#;

fn python3(args: &[&str], stdin: Option<&str>) -> String {
    let mut child = Command::new("python3")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the stdlib sweep needs `python3` on PATH; install Python 3 to run it");
    let mut input = child.stdin.take().unwrap();
    let text = stdin.unwrap_or("").to_owned();
    // Write from another thread so a full stdout pipe cannot deadlock us.
    let writer = std::thread::spawn(move || input.write_all(text.as_bytes()));
    let output = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(output.status.success(), "python3 {args:?} failed");
    String::from_utf8(output.stdout).unwrap()
}

fn python_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            let name = entry.file_name();
            // Third-party packages are not the standard library.
            if name != "site-packages" && name != "dist-packages" && name != "__pycache__" {
                python_files(&path, out);
            }
        } else if kind.is_file() && path.extension().is_some_and(|e| e == "py") {
            out.push(path);
        }
    }
}

#[test]
fn every_stdlib_file_analyses_without_panic_and_compilable_ones_parse() {
    let stdlib = python3(
        &[
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['stdlib'])",
        ],
        None,
    );
    let stdlib = PathBuf::from(stdlib.trim());
    let mut files = Vec::new();
    python_files(&stdlib, &mut files);
    files.sort();
    assert!(
        files.len() > 500,
        "found only {} .py files under {}",
        files.len(),
        stdlib.display()
    );

    let list: String = files.iter().map(|p| format!("{}\n", p.display())).collect();
    let compilable: BTreeSet<PathBuf> = python3(&["-c", COMPILE_CHECK], Some(&list))
        .lines()
        .map(PathBuf::from)
        .collect();

    let mut panics = Vec::new();
    let mut wrong_errors = Vec::new();
    let mut not_utf8 = 0;
    let mut rejected_invalid = 0;
    let mut bytes = 0;
    for path in &files {
        let raw = std::fs::read(path).unwrap();
        bytes += raw.len();
        let Ok(source) = String::from_utf8(raw) else {
            // Legacy encodings declared by a coding cookie; the analyser
            // takes text, and decoding is the caller's job.
            not_utf8 += 1;
            continue;
        };
        match catch_unwind(AssertUnwindSafe(|| analyze_cell(&source))) {
            Err(_) => panics.push(path.clone()),
            Ok(Err(error)) if compilable.contains(path) => {
                wrong_errors.push(format!("{}: {error}", path.display()));
            }
            Ok(Err(_)) => rejected_invalid += 1,
            Ok(Ok(_)) => {}
        }
    }
    eprintln!(
        "stdlib sweep: {} files ({bytes} bytes) under {}, {} compile with CPython, \
         {not_utf8} not UTF-8, {rejected_invalid} invalid files rejected",
        files.len(),
        stdlib.display(),
        compilable.len(),
    );
    assert!(panics.is_empty(), "analysis panicked on: {panics:#?}");
    assert!(
        wrong_errors.is_empty(),
        "files CPython compiles failed to parse:\n{}",
        wrong_errors.join("\n")
    );
    assert!(compilable.len() > 500, "python3 compiled too few files");
}
