//! Bad input from the user's side: tasks and evaluators that panic, scores
//! out of range, comparisons that lost cases or evaluators, thresholds that
//! are not numbers, dataset files with a byte order mark or an upper-case
//! extension, and counts in messages.

use async_trait::async_trait;
use harness::llm::Usage;
use harness_evals::{
    Budget, Case, CaseFailure, CaseRecord, Change, Comparison, Dataset, EvalCase, EvalError,
    Evaluator, Evaluators, Experiment, InvalidThreshold, Match, Progress, Report, ReportError,
    Score, Scored, Shortfall, StepTrajectory, TaskError, from_fn, side_by_side, task_fn,
};
use serde_json::json;

use crate::report;

type Ev<'a> = EvalCase<'a, String, String, String>;

fn dataset(names: &[&str]) -> Dataset<String, String> {
    Dataset::new(
        "d",
        names
            .iter()
            .map(|n| Case::new(*n, (*n).to_owned()).expect((*n).to_owned())),
    )
}

fn experiment() -> Experiment {
    Experiment::new("robust").progress(Progress::Off)
}

/// Panics with a payload that depends on the case: a `&str`, a `String`,
/// a value that is not a string; returns `Ok` for the case `ok`.
fn panic_on(case: &str) {
    match case {
        "str" => panic!("a static message"),
        "string" => panic!("a formatted message {}", 7),
        "any" => std::panic::panic_any(42_u32),
        _ => {}
    }
}

#[tokio::test]
async fn a_panicking_task_fails_its_case_alone() {
    let cases = ["str", "ok", "string", "any", "ok2"];
    let task = task_fn(|input: String, _cx| async move {
        panic_on(&input);
        Ok::<_, TaskError>(input)
    });
    let report = experiment()
        .concurrency(2)
        .run(
            &dataset(&cases),
            &task,
            &Evaluators::new().with(harness_evals::Equals::expected()),
        )
        .await
        .expect("the experiment completes");
    assert_eq!(report.cases.len(), cases.len());
    let names: Vec<&str> = report.cases.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, cases, "in dataset order");
    for ok in ["ok", "ok2"] {
        let case = report.case(ok).unwrap();
        assert!(case.passed(), "{case:?}");
        assert_eq!(case.output, Some(json!(ok)));
    }
    let failure = |name: &str| report.case(name).unwrap().failure.clone();
    assert_eq!(
        failure("str"),
        Some(CaseFailure::Error(
            "the task panicked: a static message".into()
        ))
    );
    assert_eq!(
        failure("string"),
        Some(CaseFailure::Error(
            "the task panicked: a formatted message 7".into()
        ))
    );
    assert_eq!(
        failure("any"),
        Some(CaseFailure::Error(
            "the task panicked: (its payload is not a string)".into()
        ))
    );
    let summary = report.summary();
    assert_eq!((summary.passed, summary.failed), (2, 3));
    // A panicking case is not retried like a transient error.
    assert_eq!(report.case("str").unwrap().record.metrics.attempts, 1);
}

#[tokio::test]
async fn a_panicking_task_under_a_timeout_fails_its_case_alone() {
    let task = task_fn(|input: String, _cx| async move {
        panic_on(&input);
        Ok::<_, TaskError>(input)
    });
    let report = experiment()
        .timeout(std::time::Duration::from_secs(5))
        .run(&dataset(&["string", "ok"]), &task, &Evaluators::new())
        .await
        .unwrap();
    assert!(report.case("ok").unwrap().passed());
    assert_eq!(
        report.case("string").unwrap().failure,
        Some(CaseFailure::Error(
            "the task panicked: a formatted message 7".into()
        ))
    );
}

#[tokio::test]
async fn a_panicking_evaluator_loses_its_score_on_that_case_alone() {
    let cases = ["str", "ok", "string", "any"];
    let task = task_fn(|input: String, _cx| async move { Ok::<_, TaskError>(input) });
    let boom = from_fn("boom", |case: &Ev<'_>| {
        panic_on(case.name);
        Ok(Score::pass("fine"))
    });
    let evaluators = Evaluators::new()
        .with(boom)
        .with(harness_evals::Equals::expected());
    let report = experiment()
        .run(&dataset(&cases), &task, &evaluators)
        .await
        .expect("the experiment completes");
    for case in &report.cases {
        // The other evaluator scored every case.
        assert!(case.scores["equals"].passed(), "{case:?}");
        assert!(case.failure.is_none());
    }
    assert_eq!(
        report.case("ok").unwrap().scores["boom"],
        Scored::Score(Score::pass("fine"))
    );
    let error = |name: &str| match &report.case(name).unwrap().scores["boom"] {
        Scored::Error(e) => e.clone(),
        other => panic!("{name}: {other:?}"),
    };
    assert_eq!(
        error("str"),
        "evaluator `boom` panicked on case `str`: a static message"
    );
    assert_eq!(
        error("string"),
        "evaluator `boom` panicked on case `string`: a formatted message 7"
    );
    assert_eq!(
        error("any"),
        "evaluator `boom` panicked on case `any`: (its payload is not a string)"
    );
    let summary = report.summary();
    assert_eq!(summary.evaluators[0].errors, 3);
    assert_eq!(summary.evaluators[1].passed, 4);

    // A re-score catches it too.
    let rescored = Experiment::rescore::<String, String, String>(
        &report,
        &Evaluators::new().with(from_fn("boom", |case: &Ev<'_>| {
            panic_on(case.name);
            Ok(Score::pass("fine"))
        })),
    )
    .await
    .unwrap();
    assert!(matches!(
        &rescored.case("any").unwrap().scores["boom"],
        Scored::Error(e) if e.contains("panicked on case `any`")
    ));
}

/// An evaluator that gives the score it is made with.
struct Fixed(f64);

#[async_trait]
impl Evaluator<String, String, String> for Fixed {
    fn name(&self) -> &str {
        "fixed"
    }
    async fn evaluate(&self, _case: &Ev<'_>) -> Result<Score, EvalError> {
        Ok(Score {
            value: self.0,
            passed: true,
            reason: "hand-made".into(),
        })
    }
}

#[tokio::test]
async fn a_score_out_of_range_is_an_error_and_every_report_loads_back() {
    let dir = tempfile::tempdir().unwrap();
    let task = task_fn(|input: String, _cx| async move { Ok::<_, TaskError>(input) });
    for value in [
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        1.7,
        -3.0,
        1.0 + 1e-9,
    ] {
        let report = experiment()
            .run(
                &dataset(&["a"]),
                &task,
                &Evaluators::new().with(Fixed(value)),
            )
            .await
            .unwrap();
        let scored = &report.case("a").unwrap().scores["fixed"];
        assert_eq!(
            scored,
            &Scored::Error(format!(
                "evaluator `fixed` gave case `a` the value {value}; a score's value must be a \
                 number in 0.0..=1.0"
            )),
            "{value}"
        );
        let summary = report.summary();
        assert_eq!(summary.evaluators[0].mean, 0.0, "{value}");
        assert_eq!(summary.evaluators[0].errors, 1, "{value}");
        let path = dir.path().join("r.json");
        report.save(&path).unwrap();
        assert_eq!(Report::load(&path).unwrap(), report, "{value}");
    }
    // The bounds themselves are scores.
    for value in [0.0, 0.5, 1.0] {
        let report = experiment()
            .run(
                &dataset(&["a"]),
                &task,
                &Evaluators::new().with(Fixed(value)),
            )
            .await
            .unwrap();
        assert_eq!(report.case("a").unwrap().scores["fixed"].value(), value);
    }
}

#[test]
fn a_report_made_by_hand_with_a_nan_is_not_saved() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nan.json");
    let error = report("hand", &[1.0, f64::NAN]).save(&path).unwrap_err();
    assert!(matches!(error, ReportError::Format { .. }), "{error:?}");
    let message = error.to_string();
    assert!(
        message.contains("case `case-1`: the value of evaluator `score` is NaN"),
        "{message}"
    );
    assert!(!path.exists());

    let mut slow = report("hand", &[1.0]);
    slow.cases[0].record.metrics.latency_ms = f64::INFINITY;
    let message = slow.save(&path).unwrap_err().to_string();
    assert!(
        message.contains("case `case-0`: its latency_ms is inf"),
        "{message}"
    );
    assert!(!path.exists());
}

#[test]
fn a_candidate_that_lost_cases_or_evaluators_regressed() {
    let base = report("base", &[1.0, 0.0, 1.0]);
    assert!(!Comparison::new(&base, &base).regressed(0.0));

    // No cases at all.
    let empty = report("empty", &[]);
    let c = Comparison::new(&base, &empty);
    assert!(c.regressed(0.0) && c.regressed(0.5));
    assert_eq!(
        c.shortfalls(0.9).unwrap(),
        (0..3)
            .map(|i| Shortfall::MissingCase {
                case: format!("case-{i}")
            })
            .collect::<Vec<_>>()
    );
    // The baseline's own mean, and `-` for the empty candidate.
    assert_eq!(c.means[0].baseline, Some(2.0 / 3.0));
    assert_eq!(c.means[0].candidate, None);
    let table = c.table();
    assert!(table.contains("score      0.667     -"), "{table}");
    assert!(table.contains("3 missing from the candidate"), "{table}");

    // Only the failing case dropped: the candidate's mean went up.
    let mut dropped = base.clone();
    dropped.cases.remove(1);
    let c = Comparison::new(&base, &dropped);
    assert!(c.regressed(0.5));
    assert_eq!(
        c.shortfalls(0.5).unwrap(),
        [Shortfall::MissingCase {
            case: "case-1".into()
        }]
    );
    assert_eq!(c.cases[1].change, Change::Removed);

    // No evaluators.
    let mut no_evaluators = base.clone();
    no_evaluators.evaluators.clear();
    for case in &mut no_evaluators.cases {
        case.scores.clear();
    }
    let c = Comparison::new(&base, &no_evaluators);
    assert!(c.regressed(0.5));
    assert_eq!(
        c.shortfalls(0.5).unwrap(),
        [Shortfall::MissingEvaluator {
            evaluator: "score".into()
        }]
    );
    assert_eq!(
        c.shortfalls(0.5).unwrap()[0].to_string(),
        "evaluator `score` of the baseline is missing from the candidate"
    );
    let table = c.table();
    assert!(table.contains("score      0.667     missing"), "{table}");

    // A new case is no shortfall; its value counts in the candidate's mean.
    let more = report("more", &[1.0, 0.0, 1.0, 1.0]);
    let c = Comparison::new(&base, &more);
    assert_eq!(c.shortfalls(0.0).unwrap(), []);
    assert_eq!(c.means[0].candidate, Some(0.75));

    // Drops beyond the threshold are named.
    let worse = report("worse", &[1.0, 0.0, 0.8]);
    let c = Comparison::new(&base, &worse);
    assert!(c.shortfalls(0.25).unwrap().is_empty());
    let shortfalls = c.shortfalls(0.1).unwrap();
    assert_eq!(shortfalls.len(), 1, "{shortfalls:?}");
    assert_eq!(
        shortfalls[0].to_string(),
        "case `case-2` dropped from 1 to 0.80 on evaluator `score`"
    );
}

#[test]
fn a_threshold_must_be_a_finite_number_not_below_zero() {
    let base = report("base", &[1.0, 1.0]);
    let worse = report("worse", &[1.0, 0.9]);
    let same = Comparison::new(&base, &base);
    let worse = Comparison::new(&base, &worse);
    for threshold in [f64::NAN, -1.0, -1e-12, f64::INFINITY] {
        let error = same.shortfalls(threshold).unwrap_err();
        assert!(
            matches!(error, InvalidThreshold { threshold: t, .. } if t.to_bits() == threshold.to_bits()),
            "{error:?}"
        );
        assert!(error.to_string().contains("give a finite number ≥ 0"));
        // `regressed` takes it as 0.0, the strictest.
        assert!(!same.regressed(threshold), "{threshold}");
        assert!(worse.regressed(threshold), "{threshold}");
    }
    assert!(!worse.regressed(0.2));
}

#[test]
fn side_by_side_shows_each_reports_own_mean_and_a_dash_for_an_empty_one() {
    let table = side_by_side(&[report("a", &[1.0, 1.0]), report("b", &[])]);
    let footer: Vec<&str> = table.lines().last().unwrap().split_whitespace().collect();
    assert_eq!(footer, ["mean", "1.000", "-"], "{table}");
}

#[test]
fn dataset_files_may_start_with_a_bom_and_have_upper_case_extensions() {
    let dir = tempfile::tempdir().unwrap();
    let line = "{\"name\":\"a\",\"input\":\"x\"}\n";
    let yaml = "name: y\ncases:\n  - name: a\n    input: x\n";
    for (file, text) in [
        ("bom.jsonl", format!("\u{feff}{line}")),
        ("upper.JSONL", line.to_owned()),
        ("bom.yaml", format!("\u{feff}{yaml}")),
        ("upper.YML", yaml.to_owned()),
        ("mixed.Yaml", format!("\u{feff}{yaml}")),
    ] {
        let path = dir.path().join(file);
        std::fs::write(&path, text).unwrap();
        let dataset =
            Dataset::<String, String>::load(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(dataset.cases.len(), 1, "{file}");
        assert_eq!(dataset.cases[0].input, "x", "{file}");
    }
    // An upper-case extension is written in its format too.
    let path = dir.path().join("out.YAML");
    dataset(&["a"]).save(&path).unwrap();
    assert!(std::fs::read_to_string(&path).unwrap().starts_with("name:"));
    // Other extensions are still refused.
    std::fs::write(dir.path().join("x.txt"), line).unwrap();
    assert!(Dataset::<String, String>::load(dir.path().join("x.txt")).is_err());

    // A report file with a BOM loads.
    let path = dir.path().join("report.json");
    let text = serde_json::to_string(&report("r", &[1.0])).unwrap();
    std::fs::write(&path, format!("\u{feff}{text}")).unwrap();
    assert_eq!(Report::load(&path).unwrap(), report("r", &[1.0]));
}

#[tokio::test]
async fn counts_of_one_are_singular() {
    let mut record = CaseRecord::default();
    record.metrics.model_calls = 1;
    record.metrics.usage = Usage::new(1, 0);
    let (input, output) = (String::new(), String::new());
    let case = EvalCase::<String, String, String>::new("a", &input, None, &output, &record);
    let score = Budget::new()
        .max_tokens(10)
        .max_model_calls(5)
        .evaluate(&case)
        .await
        .unwrap();
    assert!(score.reason.contains("1 token of 10"), "{score:?}");
    assert!(score.reason.contains("1 model call of 5"), "{score:?}");

    let mut steps = CaseRecord::default();
    steps
        .events
        .push(serde_json::from_value(json!({"kind": "step_finished", "step": "think"})).unwrap());
    let case = EvalCase::<String, String, String>::new("a", &input, None, &output, &steps);
    let score = StepTrajectory::new(Match::Strict, ["think", "act"])
        .evaluate(&case)
        .await
        .unwrap();
    assert!(score.reason.starts_with("1 entry, want 2"), "{score:?}");

    let table = report("one", &[1.0]).table();
    assert!(table.contains("mean (1 case)"), "{table}");
    let table = report("two", &[1.0, 1.0]).table();
    assert!(table.contains("mean (2 cases)"), "{table}");
}
