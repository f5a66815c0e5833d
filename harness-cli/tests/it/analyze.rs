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
