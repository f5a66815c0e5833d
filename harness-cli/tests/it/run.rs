//! End-to-end tests of `harness run` (needs `python3`): each invocation is a
//! new process that reopens the notebook kept next to the file.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::workdir;
use serde_json::Value;

const SCRIPT: &str = r#"# %% Load the data
import statistics
rows = [{"city": c, "temp": t} for c, t in
        [("Oslo", 4.5), ("Lima", 19.0), ("Cairo", 22.5), ("Perth", 18.2), ("Quito", 14.1)]]

# %% Threshold
threshold = 15.0

# %% Fahrenheit
fahrenheit = {r["city"]: r["temp"] * 9 / 5 + 32 for r in rows}

# %% Warm cities
warm = sorted(r["city"] for r in rows if r["temp"] > threshold)

# %% Mean temperature
mean_temp = statistics.mean(r["temp"] for r in rows)

# %% A helper
def label(city):
    return f"{city} ({fahrenheit[city]:.0f}F)"

# %% Report
report = [label(c) for c in warm]
print(report)
"#;

/// Runs `harness run --json FILE`; returns (the report, exit code).
fn run(file: &Path) -> (Value, Option<i32>) {
    let output = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(["run", "--json", "--quiet", file.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (report, output.status.code())
}

fn cells_with(report: &Value, action: &str) -> Vec<u64> {
    report["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == action)
        .map(|e| e["cell"].as_u64().unwrap())
        .collect()
}

#[test]
fn second_run_executes_only_affected_cells() {
    let dir = workdir("run-weather");
    let file = dir.join("weather.py");
    std::fs::write(&file, SCRIPT).unwrap();

    let (first, code) = run(&file);
    assert_eq!(code, Some(0), "{first}");
    assert_eq!(cells_with(&first, "executed"), [0, 1, 2, 3, 4, 5, 6]);
    assert!(dir.join(".harness/code/weather/session.json").is_file());

    // Edit the threshold cell: it, the cell reading it and the report run.
    std::fs::write(
        &file,
        SCRIPT.replace("threshold = 15.0", "threshold = 18.5"),
    )
    .unwrap();
    let (second, code) = run(&file);
    assert_eq!(code, Some(0), "{second}");
    assert_eq!(cells_with(&second, "executed"), [1, 3, 6]);
    assert_eq!(cells_with(&second, "skipped"), [0, 2, 4, 5]);
    let reason = &second["entries"][3]["reason"];
    assert_eq!(reason["reason"], "inputs_changed");
    assert_eq!(reason["changes"][0]["name"], "threshold");
    // The report needs the helper function, which has no blob: its cell is
    // re-run (after restoring `fahrenheit`) instead of the whole script.
    assert_eq!(second["entries"][6]["recomputed"], serde_json::json!([5]));

    // An edit that does not change which cities are warm: the report cell's
    // inputs hash the same, so its cached run is reused.
    std::fs::write(
        &file,
        SCRIPT.replace("threshold = 15.0", "threshold = 18.6"),
    )
    .unwrap();
    let (third, _) = run(&file);
    assert_eq!(cells_with(&third, "executed"), [1, 3]);
    assert_eq!(cells_with(&third, "reused"), [6]);

    // Nothing changed: nothing runs.
    let (fourth, _) = run(&file);
    assert_eq!(cells_with(&fourth, "executed"), Vec::<u64>::new());
}

#[test]
fn notebook_with_ipython_commands_runs() {
    let dir = workdir("run-notebook");
    let file = dir.join("nb.ipynb");
    let notebook = serde_json::json!({
        "nbformat": 4, "nbformat_minor": 5, "metadata": {},
        "cells": [
            {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": null,
             "source": ["%matplotlib inline\n", "x = 20"]},
            {"cell_type": "markdown", "metadata": {}, "source": ["# notes"]},
            {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": null,
             "source": ["y = x + 1\n", "y"]},
            {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": null,
             "source": ["z = 1 / 0"]}
        ]
    });
    std::fs::write(&file, notebook.to_string()).unwrap();
    let (report, code) = run(&file);
    assert_eq!(code, Some(1), "a failing cell fails the run: {report}");
    assert_eq!(cells_with(&report, "executed"), [0, 1, 2]);
    assert!(
        report["entries"][2]["error"]
            .as_str()
            .unwrap()
            .contains("ZeroDivisionError")
    );
    let saved: Value =
        serde_json::from_slice(&std::fs::read(dir.join(".harness/code/nb/session.json")).unwrap())
            .unwrap();
    assert_eq!(saved["records"]["1"]["display"], "21");
}

#[test]
fn numeric_options_out_of_range_are_usage_errors_that_name_the_option() {
    let dir = workdir("run_bad_numbers");
    let file = dir.join("cells.py");
    std::fs::write(&file, "x = 1\n").unwrap();
    let cases: &[(&str, &str)] = &[
        ("--timeout", "inf"),
        ("--timeout", "NaN"),
        ("--timeout", "-1"),
        ("--timeout", "1e400"),
        ("--timeout", "1e12"),
        ("--timeout", "ten"),
        ("--memory-mb", "0"),
        ("--memory-mb", "-5"),
        ("--memory-mb", "17592186044416"),
        ("--memory-mb", "18446744073709551615"),
        ("--memory-mb", "lots"),
    ];
    for (option, value) in cases {
        let output = Command::new(env!("CARGO_BIN_EXE_harness"))
            .args([
                "run",
                "--quiet",
                &format!("{option}={value}"),
                file.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{option} {value}: {stderr}");
        assert!(stderr.contains(option), "{option} {value}: {stderr}");
        assert!(!stderr.contains("panicked"), "{option} {value}: {stderr}");
    }
    // Nothing ran: no notebook was created for the script.
    assert!(!dir.join(".harness").exists());
    // The largest values in range are accepted.
    let output = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args([
            "run",
            "--quiet",
            "--timeout",
            "31536000",
            "--memory-mb",
            "4096",
            file.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A script whose dependencies only a run shows: a list changed through a
/// second name, and a file written by one cell and read by another.
const TRACED: &str = r#"# %%
xs = [1]
ys = xs

# %%
ys.append(2)

# %%
with open("n.txt", "w") as f:
    f.write("3")

# %%
with open("n.txt") as f:
    n = int(f.read())

# %%
print(len(xs), n)
"#;

fn harness(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(args)
        .output()
        .unwrap()
}

fn depends_on(analysis: &Value, cell: usize) -> Vec<(u64, Vec<String>)> {
    analysis["cells"][cell]["depends_on"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            let traced = d["traced"]
                .as_array()
                .map(|names| {
                    names
                        .iter()
                        .map(|n| n.as_str().unwrap().to_owned())
                        .collect()
                })
                .unwrap_or_default();
            (d["cell"].as_u64().unwrap(), traced)
        })
        .collect()
}

#[test]
fn run_prints_what_each_cell_did_and_analyze_trace_links_by_it() {
    let dir = workdir("run-traced");
    let file = dir.join("traced.py");
    std::fs::write(&file, TRACED).unwrap();
    let path = file.to_str().unwrap();

    let output = harness(&["run", path]);
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains("did: read ys; changed in place xs, ys"),
        "{stdout}"
    );
    assert!(
        stdout.contains("note: changed xs in place, which the static analysis did not see"),
        "{stdout}"
    );
    let written = dir.canonicalize().unwrap().join("n.txt");
    assert!(
        stdout.contains(&format!("wrote files {}", written.display())),
        "{stdout}"
    );
    assert!(stdout.contains("| 2 3"), "{stdout}");

    // The static analysis alone: the last cell needs `xs` from cell 0 only,
    // and cell 3 nothing from cell 2.
    let plain = harness(&["analyze", path]);
    let plain: Value = serde_json::from_slice(&plain.stdout).unwrap();
    assert_eq!(depends_on(&plain, 4), [(0, vec![]), (3, vec![])]);
    assert!(depends_on(&plain, 3).is_empty());

    // With the traces of that run, cell 4 also needs cell 1, and cell 3
    // reads the file cell 2 wrote.
    let traced = harness(&["analyze", "--trace", path]);
    assert_eq!(traced.status.code(), Some(0));
    let traced: Value = serde_json::from_slice(&traced.stdout).unwrap();
    assert_eq!(
        depends_on(&traced, 4),
        [(0, vec![]), (1, vec!["xs".to_owned()]), (3, vec![])]
    );
    assert_eq!(
        depends_on(&traced, 3),
        [(2, vec![format!("file:{}", written.display())])]
    );
    assert_eq!(
        traced["cells"][1]["trace"]["mutated"],
        serde_json::json!(["xs", "ys"])
    );

    // An edit of the cell that changes the list through `ys` re-runs the
    // cell that prints `xs`, in a new process.
    std::fs::write(&file, TRACED.replace("ys.append(2)", "ys.extend([2, 3])")).unwrap();
    let (second, code) = run(&file);
    assert_eq!(code, Some(0), "{second}");
    assert_eq!(cells_with(&second, "executed"), [1, 4]);
    let output = harness(&["run", path]);
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(stdout.contains("0 executed, 5 reused"), "{stdout}");

    // Editing the writer of the file re-runs its reader.
    std::fs::write(
        &file,
        TRACED
            .replace("ys.append(2)", "ys.extend([2, 3])")
            .replace("f.write(\"3\")", "f.write(\"5\")"),
    )
    .unwrap();
    let (third, code) = run(&file);
    assert_eq!(code, Some(0), "{third}");
    assert_eq!(cells_with(&third, "executed"), [2, 3, 4]);
}

#[test]
fn analyze_trace_without_a_run_says_to_run_first() {
    let dir = workdir("analyze-trace-no-run");
    let file = dir.join("never_ran.py");
    std::fs::write(&file, TRACED).unwrap();
    let output = harness(&["analyze", "--trace", file.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("harness run"), "{stderr}");
    assert!(output.stdout.is_empty());
}

#[test]
fn cells_that_do_not_parse_are_each_located_and_nothing_runs() {
    let dir = workdir("run-syntax");
    let file = dir.join("broken.py");
    // Cells 1 and 3 do not parse; cell 0 writes a file if it runs.
    std::fs::write(
        &file,
        "# %%\nopen('ran.txt', 'w').write('x')\n# %%\nb = (1,\n# %%\nc = 2\n# %%\n\nd = = 3\n",
    )
    .unwrap();
    let output = harness(&["run", file.to_str().unwrap()]);
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 3, "{stderr}");
    // Each names its cell and the line of the file, not of the cell.
    assert!(
        lines[0].contains("broken.py: cell 1: syntax error at line 4, column"),
        "{stderr}"
    );
    assert!(
        lines[1].contains("broken.py: cell 3: syntax error at line 9, column"),
        "{stderr}"
    );
    assert!(lines[2].contains("nothing was run"), "{stderr}");
    assert!(!dir.join("ran.txt").exists(), "no cell ran");

    // In a notebook, cells are texts of their own: the line is the cell's.
    let notebook = dir.join("broken.ipynb");
    let cells = serde_json::json!({
        "nbformat": 4, "nbformat_minor": 5, "metadata": {},
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": "# title"},
            {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": null,
             "source": "x = 1\ny = (x,\n"}
        ]
    });
    std::fs::write(&notebook, cells.to_string()).unwrap();
    let output = harness(&["run", notebook.to_str().unwrap()]);
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("broken.ipynb: cell 1: syntax error at line 3, column"),
        "{stderr}"
    );
}

#[test]
fn cells_and_lines_that_are_not_python_are_shown_not_dropped() {
    let dir = workdir("run-magics");
    let file = dir.join("magic.ipynb");
    let code = |source: &str| {
        serde_json::json!({"cell_type": "code", "metadata": {}, "outputs": [],
                           "execution_count": null, "source": source})
    };
    let notebook = serde_json::json!({
        "nbformat": 4, "nbformat_minor": 5,
        "metadata": {"kernelspec": {"name": "python3", "language": "python"}},
        "cells": [
            code("r = 2"),
            code("%%bash\necho hi\n"),
            code("files = !ls\nn = r + 1"),
            code("print(n)"),
        ]
    });
    std::fs::write(&file, notebook.to_string()).unwrap();
    let output = harness(&["run", file.to_str().unwrap()]);
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("(4 cells, 1 not Python,"), "{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    let at = |prefix: &str| {
        lines
            .iter()
            .position(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no line {prefix:?}: {stdout}"))
    };
    // In the file's order, the skipped cell with why.
    assert!(at("cell 0 ") < at("cell 1 ") && at("cell 1 ") < at("cell 2 "));
    assert!(
        lines[at("cell 1 ")].contains("skipped")
            && lines[at("cell 1 ")].contains("`%%bash` does not run Python"),
        "{stdout}"
    );
    assert!(
        stdout.contains("note: IPython command on line 1 not run: !ls"),
        "{stdout}"
    );
    assert!(stdout.contains("| 3"), "{stdout}");

    // A notebook of another language is refused, naming it.
    let other = dir.join("r.ipynb");
    let r = serde_json::json!({
        "nbformat": 4, "nbformat_minor": 5,
        "metadata": {"kernelspec": {"name": "ir", "language": "R"},
                     "language_info": {"name": "R"}},
        "cells": [code("x <- c(1, 2)")]
    });
    std::fs::write(&other, r.to_string()).unwrap();
    let output = harness(&["run", other.to_str().unwrap()]);
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("kernel runs R, not Python"), "{stderr}");
    assert!(
        !dir.join(".harness/code/r").exists(),
        "nothing was made for it"
    );
}

#[test]
fn what_the_kernel_could_not_set_up_is_said() {
    let dir = workdir("run-warnings");
    let file = dir.join("one.py");
    std::fs::write(&file, "x = 1\n").unwrap();
    let output = harness(&["run", file.to_str().unwrap()]);
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0");
    // Linux does not hold root to the process limit: the kernel says so,
    // and so must the run.
    assert_eq!(
        stderr.contains("harness: warning: the kernel: ") && stderr.contains("RLIMIT_NPROC"),
        root,
        "root: {root}; {stderr}"
    );
}

#[test]
fn a_truncated_output_ends_its_line_before_the_errors_begin() {
    let dir = workdir("run-truncated");
    let file = dir.join("loud.py");
    std::fs::write(
        &file,
        "import sys\nprint('x' * 200_000)\nsys.stderr.write('e' * 10)\n",
    )
    .unwrap();
    let output = harness(&["run", file.to_str().unwrap()]);
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert_eq!(output.status.code(), Some(0));
    let note = stdout
        .lines()
        .find(|l| l.contains("[output truncated:"))
        .unwrap_or_else(|| panic!("no note: {}", &stdout[..200]));
    assert!(note.trim_end().ends_with("bytes shown]"), "{note:.120}");
    assert!(
        stdout.lines().any(|l| l == "    | eeeeeeeeee"),
        "stderr on a line of its own"
    );
}

/// The notebook's directory is printed as the user reaches it from where
/// they ran `harness run`: next to the file, whatever the file's path.
#[test]
fn the_notebook_directory_is_printed_from_where_harness_runs() {
    let dir = std::fs::canonicalize(workdir("run-shown-state")).unwrap();
    std::fs::create_dir_all(dir.join("py")).unwrap();
    std::fs::write(dir.join("py/s.py"), "# %%\nx = 1\n").unwrap();
    let notebook = dir.join("py/.harness/code/s");
    for (cwd, file, shown) in [
        (dir.clone(), "py/s.py", "py/.harness/code/s".to_string()),
        (dir.join("py"), "s.py", ".harness/code/s".to_string()),
        (dir.join("py"), "../py/s.py", ".harness/code/s".to_string()),
        (
            PathBuf::from("/"),
            dir.join("py/s.py").to_str().unwrap(),
            notebook.display().to_string(),
        ),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_harness"))
            .args(["run", file])
            .current_dir(&cwd)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{file}: {stdout}");
        assert!(
            stdout.contains(&format!("notebook in {shown})")),
            "{file} from {}: {stdout}",
            cwd.display()
        );
    }
    assert!(notebook.is_dir());
}
