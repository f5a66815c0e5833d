//! End-to-end tests of `harness analyze` on notebooks and percent scripts.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn harness(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(args)
        .output()
        .unwrap()
}

fn analyze_json(path: &Path) -> (Value, Option<i32>) {
    let output = harness(&["analyze", path.to_str().unwrap()]);
    let stdout = String::from_utf8(output.stdout).unwrap();
    let value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"));
    (value, output.status.code())
}

/// The fields of a cell that the tests compare.
fn summary(cell: &Value) -> Value {
    let pick = |key: &str| cell.get(key).cloned().unwrap_or(Value::Null);
    let depends: Vec<Value> = cell["depends_on"]
        .as_array()
        .map(|deps| {
            deps.iter()
                .map(|d| json!([d["cell"], d["names"]]))
                .collect()
        })
        .unwrap_or_default();
    json!({
        "cell": pick("cell"),
        "reads": pick("reads"),
        "writes": pick("writes"),
        "mutations": pick("mutations"),
        "depends_on": depends,
    })
}

#[test]
fn notebook_prints_reads_writes_mutations_and_dependencies() {
    let (report, code) = analyze_json(&fixture("sales.ipynb"));
    assert_eq!(code, Some(0));
    assert_eq!(report["format"], "ipynb");
    let cells = report["cells"].as_array().unwrap();
    let summaries: Vec<Value> = cells.iter().map(summary).collect();
    assert_eq!(
        summaries,
        [
            json!({"cell": 1, "reads": [], "writes": ["np", "pd"], "mutations": [], "depends_on": []}),
            json!({"cell": 2, "reads": ["path", "pd"], "writes": ["df", "threshold"], "mutations": [],
                   "depends_on": [[1, ["pd"]]]}),
            json!({"cell": 3, "reads": ["df", "threshold"], "writes": [], "mutations": ["df"],
                   "depends_on": [[2, ["df", "threshold"]]]}),
            json!({"cell": 4, "reads": ["log"], "writes": ["summarize"], "mutations": ["log"],
                   "depends_on": []}),
            json!({"cell": 5, "reads": ["df", "summarize"], "writes": ["log", "summary"], "mutations": [],
                   "depends_on": [[3, ["df"]], [4, ["summarize"]]]}),
            json!({"cell": 6, "reads": ["log", "summary", "threshold"], "writes": [], "mutations": [],
                   "depends_on": [[2, ["threshold"]], [5, ["log", "summary"]]]}),
            json!({"cell": 7, "reads": null, "writes": null, "mutations": null, "depends_on": []}),
        ]
    );
    // Magics and shell lines are skipped with a note; `%%bash` cells entirely.
    assert_eq!(
        cells[0]["notes"][0],
        "skipped IPython command on line 1: %matplotlib inline"
    );
    assert_eq!(
        cells[0]["imports"][0],
        json!({"module": "pandas", "bound": "pd", "line": 2, "top_level": true})
    );
    assert_eq!(cells[3]["definitions"][0]["call_mutations"], json!(["log"]));
    assert_eq!(cells[5]["builtins"], json!(["len", "print"]));
    assert_eq!(cells[6]["skipped"], true);
    assert!(cells[6]["notes"][0].as_str().unwrap().contains("%%bash"));
    assert!(cells.iter().all(|s| s.get("error").is_none()));
}

#[test]
fn percent_script_and_dot_output() {
    let (report, code) = analyze_json(&fixture("cells.py"));
    assert_eq!(code, Some(0));
    assert_eq!(report["format"], "percent");
    let cells = report["cells"].as_array().unwrap();
    let positions: Vec<(i64, i64)> = cells
        .iter()
        .map(|s| (s["cell"].as_i64().unwrap(), s["line"].as_i64().unwrap()))
        .collect();
    assert_eq!(positions, [(0, 2), (2, 9), (3, 12), (4, 17)]);
    assert_eq!(cells[2]["conditional_writes"], json!(["label"]));
    assert_eq!(cells[3]["defeats_analysis"], true);
    assert_eq!(cells[3]["dynamic"][0]["feature"], "exec");
    assert_eq!(cells[3]["depends_on"].as_array().unwrap().len(), 3);
    assert_eq!(cells[3]["depends_on"][0]["conservative"], true);

    let output = harness(&["analyze", fixture("cells.py").to_str().unwrap(), "--dot"]);
    assert!(output.status.success());
    let dot = String::from_utf8(output.stdout).unwrap();
    assert!(dot.starts_with("digraph cells {"), "{dot}");
    assert!(dot.contains("s0 -> s1 [label=\"math, radius\"];"), "{dot}");
    assert!(dot.contains("s0 [label=\"cell 0: import math\"];"), "{dot}");
}

#[test]
fn syntax_error_cell_is_reported_and_exit_code_is_one() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let path = dir.join("broken_cells.py");
    std::fs::write(&path, "# %%\nx = 1\n# %%\ny = (x,\n# %%\nz = x\n").unwrap();
    let (report, code) = analyze_json(&path);
    assert_eq!(code, Some(1));
    let cells = report["cells"].as_array().unwrap();
    assert_eq!(cells[1]["error"]["kind"], "syntax");
    assert_eq!(cells[1]["error"]["line"], 1);
    assert!(cells[1].get("id").is_none());
    assert_eq!(
        cells[2]["depends_on"],
        json!([{"cell": 0, "id": 0, "names": ["x"]}])
    );
}

#[test]
fn unreadable_inputs_fail_with_exit_code_two() {
    let output = harness(&["analyze", "/nonexistent/file.py"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8(output.stderr)
            .unwrap()
            .contains("cannot read")
    );

    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let path = dir.join("not_a_notebook.ipynb");
    std::fs::write(&path, "{\"cells\": []}").unwrap();
    let output = harness(&["analyze", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8(output.stderr)
            .unwrap()
            .contains("nbformat")
    );
}

#[test]
fn hostile_cells_are_errors_with_a_message_not_a_crash() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let deep = [
        ("sum", format!("x = {}\n", vec!["a"; 200_000].join(" + "))),
        ("not", format!("x = {}a\n", "not ".repeat(200_000))),
        (
            "if_else",
            format!("x = {}b\n", "a if c else ".repeat(100_000)),
        ),
        ("lambdas", format!("x = {}a\n", "lambda: ".repeat(100_000))),
        ("calls", format!("x = f{}\n", "()".repeat(100_000))),
        (
            "parens",
            format!("x = {}a{}\n", "(".repeat(100_000), ")".repeat(100_000)),
        ),
    ];
    for (name, cell) in deep {
        let path = dir.join(format!("hostile_{name}.py"));
        std::fs::write(
            &path,
            format!("# %%\nimport os\n# %%\n{cell}# %%\ny = os.sep\n"),
        )
        .unwrap();
        let output = harness(&["analyze", path.to_str().unwrap()]);
        let stderr = String::from_utf8(output.stderr).unwrap();
        // A signal (a stack overflow aborts) has no exit code.
        assert_eq!(output.status.code(), Some(1), "{name}: {stderr}");
        let report: Value = serde_json::from_slice(&output.stdout).unwrap();
        let cells = report["cells"].as_array().unwrap();
        let kind = cells[1]["error"]["kind"].as_str().unwrap();
        assert!(
            ["too_complex", "too_deeply_nested"].contains(&kind),
            "{name}: {}",
            cells[1]
        );
        assert_eq!(cells[2]["depends_on"][0]["names"], json!(["os"]));
        assert!(
            stderr.contains(&format!("hostile_{name}.py: cell 1 (line 4 of the file): ")),
            "{name}: {stderr}"
        );
        assert!(stderr.contains("nested"), "{name}: {stderr}");
        assert!(
            !stderr.contains("overflow") && !stderr.contains("panicked"),
            "{stderr}"
        );
    }
}

/// Runs `harness ARGS…`, killed (and the test failed) if it has not ended
/// within 30 s: a read that waits on a FIFO never ends by itself.
fn harness_within(args: &[&std::ffi::OsStr]) -> Output {
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let began = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if began.elapsed() > std::time::Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("harness {args:?} did not end within 30 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success(), "mkfifo {}", path.display());
}

/// Every entry under `dir` (not following links), with a regular file's
/// bytes; other kinds (a FIFO) only by name, never opened.
fn tree(dir: &Path) -> Vec<(PathBuf, String, Vec<u8>)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        let kind = std::fs::symlink_metadata(&path).unwrap().file_type();
        if kind.is_dir() {
            out.push((path.clone(), "dir".into(), Vec::new()));
            out.extend(tree(&path));
        } else if kind.is_file() {
            out.push((path.clone(), "file".into(), std::fs::read(&path).unwrap()));
        } else {
            out.push((path, format!("{kind:?}"), Vec::new()));
        }
    }
    out.sort();
    out
}

#[test]
fn trace_reads_the_notebook_without_writing_in_its_directory() {
    use harness_code::Provenance;
    use harness_code::kernel::KernelConfig;
    use harness_code::notebook::Notebook;

    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("analyze-trace-reads-only");
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let script = base.join("s.py");
    std::fs::write(&script, "# %%\nx = 1\n# %%\ny = x + 1\n").unwrap();
    // A notebook as `harness run` saves it (its blob store included).
    let saved = base.join("saved");
    let mut notebook = Notebook::create(&saved, KernelConfig::default()).unwrap();
    for source in ["x = 1\n", "y = x + 1\n"] {
        notebook
            .add_cell(source, Provenance::now("test", "cell"))
            .unwrap();
    }
    notebook.save().unwrap();
    assert!(saved.join("blobs").is_dir());
    // Its file alone, copied elsewhere.
    let copied = base.join("copied");
    std::fs::create_dir_all(&copied).unwrap();
    std::fs::copy(saved.join("session.json"), copied.join("session.json")).unwrap();
    // A FIFO, a device or text that is no notebook in the file's place,
    // an empty directory, none at all.
    let fifo = base.join("fifo");
    std::fs::create_dir_all(&fifo).unwrap();
    mkfifo(&fifo.join("session.json"));
    let device = base.join("device");
    std::fs::create_dir_all(&device).unwrap();
    std::os::unix::fs::symlink("/dev/zero", device.join("session.json")).unwrap();
    let garbage = base.join("garbage");
    std::fs::create_dir_all(&garbage).unwrap();
    std::fs::write(garbage.join("session.json"), "not a notebook").unwrap();
    let empty = base.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let absent = base.join("absent");

    for (state, code, says) in [
        (&saved, 0, None),
        (&copied, 0, None),
        (&fifo, 2, Some("no notebook")),
        (&device, 2, Some("no notebook")),
        (&garbage, 2, Some("session.json")),
        (&empty, 2, Some("no notebook")),
        (&absent, 2, Some("no notebook")),
    ] {
        let before = tree(&base);
        let out = harness_within(&[
            "analyze".as_ref(),
            "--trace".as_ref(),
            "--state".as_ref(),
            state.as_os_str(),
            script.as_os_str(),
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{}: {stderr}",
            state.display()
        );
        if let Some(says) = says {
            assert!(stderr.contains(says), "{}: {stderr}", state.display());
            assert!(
                stderr.contains(&state.display().to_string()),
                "{}: {stderr}",
                state.display()
            );
        } else {
            let report: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(report["cells"].as_array().unwrap().len(), 2);
        }
        assert_eq!(
            tree(&base),
            before,
            "analyze --trace --state {} wrote",
            state.display()
        );
    }
    assert!(!copied.join("blobs").exists());
    assert!(!absent.exists());
}

#[test]
fn input_files_that_are_no_regular_files_or_too_large_are_refused_at_once() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("analyze-bad-inputs");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("pipe.py");
    mkfifo(&fifo);
    let zero = dir.join("zero.py");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    let folder = dir.join("folder.py");
    std::fs::create_dir_all(&folder).unwrap();
    // Sparse: 64 MiB and one byte of nothing on disk.
    let big = dir.join("big.ipynb");
    std::fs::File::create(&big)
        .unwrap()
        .set_len((64 << 20) + 1)
        .unwrap();
    let binary = dir.join("binary.py");
    std::fs::write(&binary, b"x = 1\n\xff\xfe\n").unwrap();
    let cases: [(&Path, &str); 6] = [
        (&fifo, "a FIFO, not a regular file"),
        (Path::new("/dev/zero"), "a device, not a regular file"),
        (&zero, "a device, not a regular file"),
        (&folder, "a directory, not a regular file"),
        (&big, "it is larger than the 64 MiB harness reads"),
        (&binary, "not UTF-8 text"),
    ];
    for (path, says) in cases {
        for command in ["analyze", "run", "bench-analyze"] {
            let mut args = vec![command.as_ref(), path.as_os_str()];
            let state = dir.join(format!("state-{command}"));
            if command == "run" {
                args.extend(["--state".as_ref(), state.as_os_str()]);
            }
            let out = harness_within(&args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                out.status.code(),
                Some(2),
                "{command} {}: {stderr}",
                path.display()
            );
            assert!(
                stderr.contains(&format!("cannot read {}: {says}", path.display())),
                "{command} {}: {stderr}",
                path.display()
            );
            assert!(!state.exists(), "{command} {}", path.display());
        }
    }
    // The files a list names: each one that is no file is unreadable.
    let list = dir.join("list.txt");
    let named: Vec<String> = cases.iter().map(|(p, _)| p.display().to_string()).collect();
    std::fs::write(&list, named.join("\n")).unwrap();
    let out = harness_within(&[
        "bench-analyze".as_ref(),
        list.as_os_str(),
        "--rounds".as_ref(),
        "1".as_ref(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["files"], 0, "{report}");
    assert_eq!(report["unreadable"], cases.len(), "{report}");
    assert!(!dir.join(".harness").exists());
}
