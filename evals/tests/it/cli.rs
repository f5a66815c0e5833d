//! The `harness-evals` command: show, compare (its exit status), side by side.

use std::process::Command;

use crate::report;

fn evals(args: &[&str], dir: &std::path::Path) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_harness-evals"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn compare_exits_non_zero_on_a_regression_beyond_the_threshold() {
    let dir = tempfile::tempdir().unwrap();
    report("base", &[1.0, 1.0, 0.5, 0.8])
        .save(dir.path().join("base.json"))
        .unwrap();
    report("better", &[1.0, 1.0, 0.9, 0.8])
        .save(dir.path().join("better.json"))
        .unwrap();
    report("worse", &[1.0, 0.9, 0.5, 0.8])
        .save(dir.path().join("worse.json"))
        .unwrap();

    let (code, out, _) = evals(&["compare", "base.json", "better.json"], dir.path());
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("1 improved, 0 regressed"), "{out}");
    // case-1 dropped by 0.1.
    assert_eq!(
        evals(&["compare", "base.json", "worse.json"], dir.path()).0,
        1
    );
    assert_eq!(
        evals(
            &["compare", "base.json", "worse.json", "--threshold", "0.05"],
            dir.path()
        )
        .0,
        1
    );
    assert_eq!(
        evals(
            &["compare", "base.json", "worse.json", "--threshold", "0.2"],
            dir.path()
        )
        .0,
        0
    );
    let (code, out, _) = evals(
        &["compare", "base.json", "worse.json", "--json"],
        dir.path(),
    );
    assert_eq!(code, 1);
    let parsed: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(parsed["cases"][1]["change"], "regressed");

    // Usage and file errors: exit 2, with a message naming what.
    for (args, needle) in [
        (vec!["compare", "base.json"], "usage"),
        (vec!["compare", "base.json", "nope.json"], "nope.json"),
        (
            vec!["compare", "base.json", "worse.json", "--threshold", "-1"],
            "--threshold",
        ),
        (
            vec!["compare", "base.json", "worse.json", "--threshold"],
            "--threshold",
        ),
        (
            vec!["compare", "base.json", "worse.json", "--bogus"],
            "--bogus",
        ),
        (vec!["frobnicate"], "frobnicate"),
        (vec![], "usage"),
    ] {
        let (code, _, err) = evals(&args, dir.path());
        assert_eq!(code, 2, "{args:?}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn show_and_side_by_side_print_tables() {
    let dir = tempfile::tempdir().unwrap();
    report("a", &[1.0, 0.25])
        .save(dir.path().join("a.json"))
        .unwrap();
    report("b", &[0.0, 0.75])
        .save(dir.path().join("b.json"))
        .unwrap();
    let (code, out, _) = evals(&["show", "a.json"], dir.path());
    assert_eq!(code, 0);
    assert!(
        out.contains("case-1") && out.contains("✘ 0.25") && out.contains("mean (2 cases)"),
        "{out}"
    );
    let (code, out, _) = evals(&["side-by-side", "a.json", "b.json"], dir.path());
    assert_eq!(code, 0);
    assert!(
        out.contains("a:score") && out.contains("b:score") && out.contains("0.625"),
        "{out}"
    );
}

#[test]
fn compare_exits_non_zero_when_the_candidate_lost_cases_or_evaluators() {
    let dir = tempfile::tempdir().unwrap();
    report("base", &[1.0, 0.0, 1.0])
        .save(dir.path().join("base.json"))
        .unwrap();
    report("empty", &[])
        .save(dir.path().join("empty.json"))
        .unwrap();
    // The failing case dropped: the rest is unchanged.
    let mut dropped = report("dropped", &[1.0, 0.0, 1.0]);
    dropped.cases.remove(1);
    dropped.save(dir.path().join("dropped.json")).unwrap();
    let mut none = report("none", &[1.0, 0.0, 1.0]);
    none.evaluators.clear();
    for case in &mut none.cases {
        case.scores.clear();
    }
    none.save(dir.path().join("none.json")).unwrap();

    let (code, out, err) = evals(&["compare", "base.json", "empty.json"], dir.path());
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("case `case-0` of the baseline is missing from the candidate"),
        "{err}"
    );
    // Each report's own mean; none for the empty one.
    assert!(out.contains("score      0.667     -"), "{out}");

    let (code, _, err) = evals(
        &["compare", "base.json", "dropped.json", "--threshold", "0.5"],
        dir.path(),
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("case `case-1` of the baseline is missing"),
        "{err}"
    );

    let (code, out, err) = evals(
        &["compare", "base.json", "none.json", "--threshold", "0.5"],
        dir.path(),
    );
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("evaluator `score` of the baseline is missing from the candidate"),
        "{err}"
    );
    assert!(out.contains("missing"), "{out}");

    // A candidate's new cases are no shortfall, but count in its mean: the
    // new failing case lowers it from 1.0 to 0.667.
    let (code, _, err) = evals(&["compare", "dropped.json", "base.json"], dir.path());
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("the mean of evaluator `score` dropped from 1.000 to 0.667"),
        "{err}"
    );
    assert_eq!(
        evals(
            &["compare", "dropped.json", "base.json", "--threshold", "0.5"],
            dir.path()
        )
        .0,
        0
    );

    let (code, out, _) = evals(&["side-by-side", "base.json", "empty.json"], dir.path());
    assert_eq!(code, 0);
    assert!(
        out.lines()
            .last()
            .unwrap()
            .split_whitespace()
            .eq(["mean", "0.667", "-"]),
        "{out}"
    );
}

#[test]
fn a_threshold_given_twice_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    report("base", &[1.0, 1.0])
        .save(dir.path().join("base.json"))
        .unwrap();
    report("worse", &[1.0, 0.5])
        .save(dir.path().join("worse.json"))
        .unwrap();
    for args in [
        vec!["--threshold", "0.6", "--threshold", "0"],
        vec!["--threshold", "0", "--threshold", "0.6"],
        vec!["--threshold", "0.6", "--json", "--threshold", "0.6"],
    ] {
        let mut all = vec!["compare", "base.json", "worse.json"];
        all.extend(&args);
        let (code, out, err) = evals(&all, dir.path());
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(
            err.starts_with("harness-evals: --threshold is given twice; give it once"),
            "{args:?}: {err}"
        );
        assert!(out.is_empty(), "nothing is compared: {out}");
    }
    // Once is fine, either side of the files.
    let (code, _, _) = evals(
        &["compare", "--threshold", "0.6", "base.json", "worse.json"],
        dir.path(),
    );
    assert_eq!(code, 0);
}

#[test]
fn compare_json_gives_the_verdict_of_the_exit_status() {
    let dir = tempfile::tempdir().unwrap();
    report("base", &[1.0, 1.0, 0.5])
        .save(dir.path().join("base.json"))
        .unwrap();
    report("worse", &[1.0, 0.0, 0.5])
        .save(dir.path().join("worse.json"))
        .unwrap();
    report("same", &[1.0, 1.0, 0.5])
        .save(dir.path().join("same.json"))
        .unwrap();
    for (candidate, threshold, regressed) in [
        ("worse.json", "0", true),
        ("worse.json", "0.4", true),
        ("worse.json", "1", false),
        ("same.json", "0", false),
    ] {
        let (code, out, err) = evals(
            &[
                "compare",
                "base.json",
                candidate,
                "--json",
                "--threshold",
                threshold,
            ],
            dir.path(),
        );
        assert_eq!(code, if regressed { 1 } else { 0 }, "{out}{err}");
        let json: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            json["regressed"], regressed,
            "{candidate} {threshold}: {out}"
        );
        assert_eq!(json["threshold"], threshold.parse::<f64>().unwrap());
        let reasons: Vec<&str> = json["reasons"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap())
            .collect();
        // The same reasons as on stderr, one line each.
        let printed: Vec<&str> = err.lines().filter_map(|l| l.strip_prefix("  - ")).collect();
        assert_eq!(reasons, printed, "{err}");
        assert_eq!(reasons.is_empty(), !regressed);
        assert_eq!(json["shortfalls"].as_array().unwrap().len(), reasons.len());
        // The comparison's own fields are still there.
        assert_eq!(json["baseline"], "base");
        assert_eq!(json["cases"].as_array().unwrap().len(), 3);
    }
    let (_, out, _) = evals(
        &["compare", "base.json", "worse.json", "--json"],
        dir.path(),
    );
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        json["shortfalls"],
        serde_json::json!([
            {"kind": "mean_dropped", "evaluator": "score", "baseline": 2.5 / 3.0, "candidate": 1.5 / 3.0},
            {"kind": "case_dropped", "case": "case-1", "evaluator": "score", "baseline": 1.0, "candidate": 0.0},
        ])
    );
    assert_eq!(
        json["reasons"][1],
        "case `case-1` dropped from 1 to 0 on evaluator `score`"
    );
}

/// Runs the command with stdout or stderr piped to a reader that reads one
/// line and goes away; its exit status and the other stream's text.
fn evals_read_one_line(args: &[&str], dir: &std::path::Path, of_stderr: bool) -> (i32, String) {
    use std::io::{BufRead, BufReader, Read};
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_harness-evals"))
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (closed, mut other): (Box<dyn Read + Send>, Box<dyn Read + Send>) = if of_stderr {
        (
            Box::new(child.stderr.take().unwrap()),
            Box::new(child.stdout.take().unwrap()),
        )
    } else {
        (
            Box::new(child.stdout.take().unwrap()),
            Box::new(child.stderr.take().unwrap()),
        )
    };
    let draining = std::thread::spawn(move || {
        let mut text = String::new();
        other.read_to_string(&mut text).unwrap();
        text
    });
    let mut closed = BufReader::new(closed);
    let mut line = String::new();
    closed.read_line(&mut line).unwrap();
    assert!(!line.is_empty(), "a first line");
    drop(closed);
    let status = child.wait().unwrap();
    (status.code().unwrap_or(-1), draining.join().unwrap())
}

#[test]
fn a_reader_that_goes_away_early_is_no_panic_and_keeps_the_exit_status() {
    let dir = tempfile::tempdir().unwrap();
    // Far more than a pipe's buffer, so that the command is still writing
    // when the reader goes.
    report("base", &[1.0; 3000])
        .save(dir.path().join("base.json"))
        .unwrap();
    report("cand", &[0.0; 3000])
        .save(dir.path().join("cand.json"))
        .unwrap();
    for (args, code) in [
        (&["show", "base.json"][..], 0),
        (&["side-by-side", "base.json", "cand.json"][..], 0),
        (&["compare", "base.json", "base.json"][..], 0),
        (&["compare", "base.json", "cand.json"][..], 1),
        (&["compare", "base.json", "cand.json", "--json"][..], 1),
    ] {
        let (status, stderr) = evals_read_one_line(args, dir.path(), false);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(status, code, "{args:?}: {stderr}");
    }
    // The reasons of a regression on stderr, its reader gone.
    let (status, stdout) =
        evals_read_one_line(&["compare", "base.json", "cand.json"], dir.path(), true);
    assert_eq!(status, 1, "{}", &stdout[..stdout.len().min(200)]);
}

#[test]
fn control_characters_in_a_case_name_are_escaped_in_tables_and_reasons() {
    let dir = tempfile::tempdir().unwrap();
    let name = "ctrl\u{1b}[2J\u{1b}[31mRED\nnext line\u{7}";
    let mut base = report("base", &[1.0, 1.0]);
    base.cases[0].name = name.to_owned();
    base.save(dir.path().join("base.json")).unwrap();
    let mut cand = report("cand", &[0.0, 1.0]);
    cand.cases[0].name = name.to_owned();
    cand.save(dir.path().join("cand.json")).unwrap();
    let escaped = r"ctrl\u{1b}[2J\u{1b}[31mRED\nnext line\u{7}";
    for (args, code) in [
        (&["show", "base.json"][..], 0),
        (&["compare", "base.json", "cand.json"][..], 1),
        (&["side-by-side", "base.json", "cand.json"][..], 0),
    ] {
        let (status, out, err) = evals(args, dir.path());
        assert_eq!(status, code, "{args:?}: {out}{err}");
        for text in [&out, &err] {
            assert!(
                !text.contains('\u{1b}') && !text.contains('\u{7}'),
                "{args:?}: {text:?}"
            );
            assert!(!text.contains("RED\nnext"), "{args:?}: {text:?}");
        }
        assert!(out.contains(escaped), "{args:?}: {out}");
    }
    let (_, _, err) = evals(&["compare", "base.json", "cand.json"], dir.path());
    assert!(err.contains(escaped), "{err}");
}
