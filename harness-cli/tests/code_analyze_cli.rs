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

/// The fields of a step that the tests compare.
fn summary(step: &Value) -> Value {
    let pick = |key: &str| step.get(key).cloned().unwrap_or(Value::Null);
    let depends: Vec<Value> = step["depends_on"]
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
    let steps = report["steps"].as_array().unwrap();
    let summaries: Vec<Value> = steps.iter().map(summary).collect();
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
        steps[0]["notes"][0],
        "skipped IPython command on line 1: %matplotlib inline"
    );
    assert_eq!(
        steps[0]["imports"][0],
        json!({"module": "pandas", "bound": "pd", "line": 2, "top_level": true})
    );
    assert_eq!(steps[3]["definitions"][0]["call_mutations"], json!(["log"]));
    assert_eq!(steps[5]["builtins"], json!(["len", "print"]));
    assert_eq!(steps[6]["skipped"], true);
    assert!(steps[6]["notes"][0].as_str().unwrap().contains("%%bash"));
    assert!(steps.iter().all(|s| s.get("error").is_none()));
}

#[test]
fn percent_script_and_dot_output() {
    let (report, code) = analyze_json(&fixture("steps.py"));
    assert_eq!(code, Some(0));
    assert_eq!(report["format"], "percent");
    let steps = report["steps"].as_array().unwrap();
    let cells: Vec<(i64, i64)> = steps
        .iter()
        .map(|s| (s["cell"].as_i64().unwrap(), s["line"].as_i64().unwrap()))
        .collect();
    assert_eq!(cells, [(0, 2), (2, 9), (3, 12), (4, 17)]);
    assert_eq!(steps[2]["conditional_writes"], json!(["label"]));
    assert_eq!(steps[3]["defeats_analysis"], true);
    assert_eq!(steps[3]["dynamic"][0]["feature"], "exec");
    assert_eq!(steps[3]["depends_on"].as_array().unwrap().len(), 3);
    assert_eq!(steps[3]["depends_on"][0]["conservative"], true);

    let output = harness(&["analyze", fixture("steps.py").to_str().unwrap(), "--dot"]);
    assert!(output.status.success());
    let dot = String::from_utf8(output.stdout).unwrap();
    assert!(dot.starts_with("digraph steps {"), "{dot}");
    assert!(dot.contains("s0 -> s1 [label=\"math, radius\"];"), "{dot}");
    assert!(dot.contains("s0 [label=\"cell 0: import math\"];"), "{dot}");
}

#[test]
fn syntax_error_cell_is_reported_and_exit_code_is_one() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let path = dir.join("broken_steps.py");
    std::fs::write(&path, "# %%\nx = 1\n# %%\ny = (x,\n# %%\nz = x\n").unwrap();
    let (report, code) = analyze_json(&path);
    assert_eq!(code, Some(1));
    let steps = report["steps"].as_array().unwrap();
    assert_eq!(steps[1]["error"]["kind"], "syntax");
    assert_eq!(steps[1]["error"]["line"], 1);
    assert!(steps[1].get("step").is_none());
    assert_eq!(
        steps[2]["depends_on"],
        json!([{"cell": 0, "step": 0, "names": ["x"]}])
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
