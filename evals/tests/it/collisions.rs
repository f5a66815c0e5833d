//! Case names that redaction makes equal stay distinct, so that a report
//! can be loaded and a comparison finds each case's regression; a report
//! with a case name twice is refused.
//!
//! The secrets come from the environment, as in CI (`OPENAI_API_KEY`,
//! `GITHUB_TOKEN`): the test runs itself again in a child process with
//! those variables set, since this process's environment is read once.

use std::process::Command;

use harness_evals::{
    Case, Change, Comparison, Dataset, Equals, Evaluators, Experiment, ExperimentError, Progress,
    Report, ReportError, Shortfall, TaskError, task_fn,
};

use crate::report;

const CHILD: &str = "HARNESS_EVALS_COLLISION_CHILD";
const KEY: &str = "sk-test-SECRET123-collision-7f3a";
const TOKEN: &str = "ghp_test-SECRET456-collision-c9e1";

/// Runs the test `name` (in this module) in a child process with the
/// secrets in its environment; fails with the child's output if it fails.
fn in_child_with_secrets(name: &str) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([&format!("collisions::{name}"), "--exact", "--nocapture"])
        .env(CHILD, "1")
        .env("OPENAI_API_KEY", KEY)
        .env("GITHUB_TOKEN", TOKEN)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("1 passed"), "the test ran: {stdout}");
    for text in [&stdout, &stderr] {
        assert!(!text.contains(KEY) && !text.contains(TOKEN), "{text}");
    }
}

/// The cases: two names that differ by the secret they hold, and plain
/// ones, one of them already the redacted form of the others.
fn dataset(key: &str, token: &str, second_passes: bool) -> Dataset<String, String> {
    let second = if second_passes { "pass" } else { "fail" };
    Dataset::new(
        "collide",
        [
            Case::new(format!("with-{key}"), "pass".to_owned()).expect("pass".to_owned()),
            Case::new(format!("with-{token}"), second.to_owned()).expect("pass".to_owned()),
            Case::new("plain", "pass".to_owned()).expect("pass".to_owned()),
            Case::new(format!("also-{key}"), "pass".to_owned()).expect("pass".to_owned()),
            Case::new("also-[redacted]", "pass".to_owned()).expect("pass".to_owned()),
            Case::new(format!("also-{token}"), second.to_owned()).expect("pass".to_owned()),
        ],
    )
}

async fn run(name: &str, dataset: &Dataset<String, String>) -> Report {
    let task = task_fn(|input: String, _cx| async move { Ok::<_, TaskError>(input) });
    Experiment::new(name)
        .progress(Progress::Off)
        .run(dataset, &task, &Evaluators::new().with(Equals::expected()))
        .await
        .unwrap()
}

#[tokio::test]
async fn names_that_redaction_makes_equal_stay_distinct_and_regressions_are_found() {
    if std::env::var_os(CHILD).is_none() {
        return in_child_with_secrets(
            "names_that_redaction_makes_equal_stay_distinct_and_regressions_are_found",
        );
    }
    let key = std::env::var("OPENAI_API_KEY").unwrap();
    let token = std::env::var("GITHUB_TOKEN").unwrap();
    let baseline = run("base", &dataset(&key, &token, true)).await;
    let candidate = run("cand", &dataset(&key, &token, false)).await;
    // Names that held no secret are kept; the later of two equal redacted
    // names gets the smallest free suffix.
    let names: Vec<&str> = candidate.cases.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "with-[redacted]",
            "with-[redacted] (2)",
            "plain",
            "also-[redacted] (2)",
            "also-[redacted]",
            "also-[redacted] (3)",
        ]
    );
    // The same in every run of the dataset.
    let base_names: Vec<&str> = baseline.cases.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(base_names, names);
    assert!(!candidate.case("with-[redacted] (2)").unwrap().passed());
    assert!(candidate.case("with-[redacted]").unwrap().passed());

    // Saved, loaded back, compared: both regressions are found.
    let dir = tempfile::tempdir().unwrap();
    baseline.save(dir.path().join("base.json")).unwrap();
    candidate.save(dir.path().join("cand.json")).unwrap();
    let baseline = Report::load(dir.path().join("base.json")).unwrap();
    let candidate = Report::load(dir.path().join("cand.json")).unwrap();
    let comparison = Comparison::new(&baseline, &candidate);
    let regressed: Vec<&str> = comparison.regressions().map(|c| c.name.as_str()).collect();
    assert_eq!(regressed, ["with-[redacted] (2)", "also-[redacted] (3)"]);
    assert_eq!(comparison.cases.len(), 6);
    let dropped: Vec<String> = comparison
        .shortfalls(0.6)
        .unwrap()
        .into_iter()
        .filter_map(|s| match s {
            Shortfall::CaseDropped { case, .. } => Some(case),
            _ => None,
        })
        .collect();
    assert_eq!(dropped, ["with-[redacted] (2)", "also-[redacted] (3)"]);
    let table = comparison.table();
    assert!(table.contains("with-[redacted] (2)"), "{table}");
}

#[test]
fn a_report_with_a_case_name_twice_is_refused_naming_the_name_and_both_cases() {
    let dir = tempfile::tempdir().unwrap();
    for (names, name, first, second) in [
        (vec!["a", "b", "a"], "a", 1, 3),
        (vec!["x", "y", "z", "y"], "y", 2, 4),
        (vec!["same", "same"], "same", 1, 2),
    ] {
        let mut made = report("dup", &[1.0].repeat(names.len()));
        for (case, n) in made.cases.iter_mut().zip(&names) {
            case.name = (*n).to_owned();
        }
        // Written by another tool: `save` would refuse it too (see below).
        let path = dir.path().join(format!("{name}.json"));
        std::fs::write(&path, serde_json::to_string(&made).unwrap()).unwrap();
        let error = Report::load(&path).unwrap_err();
        match &error {
            ReportError::DuplicateCase {
                name: got,
                first: f,
                second: s,
                ..
            } => assert_eq!((got.as_str(), *f, *s), (name, first, second)),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            error.to_string(),
            format!(
                "report {}: cases {first} and {second} are both named `{name}`; a report's case \
                 names must be unique",
                path.display()
            )
        );
        // And `save` refuses it with the same error, writing nothing.
        let saved_path = dir.path().join(format!("saved-{name}.json"));
        let saved = made.save(&saved_path).unwrap_err();
        assert!(
            matches!(saved, ReportError::DuplicateCase { first: f, second: s, .. } if (f, s) == (first, second)),
            "{saved:?}"
        );
        assert!(!saved_path.exists());
    }
}

#[test]
fn a_comparison_of_reports_made_by_hand_matches_a_repeated_name_by_rank() {
    // Only a report built in memory can hold a name twice; its second case
    // is compared with the other's second, not with its first.
    let mut baseline = report("base", &[1.0, 1.0]);
    let mut candidate = report("cand", &[1.0, 0.0]);
    for report in [&mut baseline, &mut candidate] {
        for case in &mut report.cases {
            case.name = "twice".into();
        }
    }
    let comparison = Comparison::new(&baseline, &candidate);
    let changes: Vec<Change> = comparison.cases.iter().map(|c| c.change).collect();
    assert_eq!(changes, [Change::Unchanged, Change::Regressed]);
    assert!(comparison.regressed(0.5));
}

/// Two evaluators whose names the secrets make equal would share one score
/// of each case: the experiment refuses them, naming the redacted name,
/// and so does a rescore.
#[tokio::test]
async fn evaluator_names_that_redaction_makes_equal_are_refused() {
    if std::env::var_os(CHILD).is_none() {
        return in_child_with_secrets("evaluator_names_that_redaction_makes_equal_are_refused");
    }
    let key = std::env::var("OPENAI_API_KEY").unwrap();
    let token = std::env::var("GITHUB_TOKEN").unwrap();
    let evaluators = || {
        Evaluators::new()
            .with(Equals::expected().named(format!("judge-{key}")))
            .with(Equals::expected().named(format!("judge-{token}")))
    };
    let dataset = dataset(&key, &token, true);
    let task = task_fn(|input: String, _cx| async move { Ok::<_, TaskError>(input) });
    let error = Experiment::new("evaluators")
        .progress(Progress::Off)
        .run(&dataset, &task, &evaluators())
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ExperimentError::DuplicateEvaluator(name) if name == "judge-[redacted]"),
        "{error:?}"
    );
    let report = run("base", &dataset).await;
    let error = Experiment::rescore(&report, &evaluators())
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ExperimentError::DuplicateEvaluator(name) if name == "judge-[redacted]"),
        "{error:?}"
    );
    // Names that differ once redacted are kept apart.
    let distinct = Evaluators::new()
        .with(Equals::expected().named(format!("judge-{key}")))
        .with(Equals::expected().named(format!("strict-{token}")));
    let report = Experiment::new("evaluators")
        .progress(Progress::Off)
        .run(&dataset, &task, &distinct)
        .await
        .unwrap();
    assert_eq!(report.evaluators, ["judge-[redacted]", "strict-[redacted]"]);
}
