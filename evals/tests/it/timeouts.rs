//! Evaluators that never finish (one that waits forever, a judge whose
//! model never answers) lose their score on that case alone, within the
//! bound, in a run and in a re-score; the bound has a default.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use harness::llm::{LanguageModel, ModelError, ModelRequest, ModelResponse, ModelStream};
use harness_evals::{
    Case, Dataset, EvalCase, EvalError, Evaluator, Evaluators, Experiment, Judge, Progress, Report,
    Score, Scored, TaskError, from_fn, task_fn,
};

type Ev<'a> = EvalCase<'a, String, String, String>;

/// Waits forever on the case named `slow`; passes the others.
struct HangsOnSlow;

#[async_trait]
impl Evaluator<String, String, String> for HangsOnSlow {
    fn name(&self) -> &str {
        "hangs"
    }
    async fn evaluate(&self, case: &Ev<'_>) -> Result<Score, EvalError> {
        if case.name == "slow" {
            futures::future::pending::<()>().await;
        }
        Ok(Score::pass("quick"))
    }
}

/// A model that never answers.
#[derive(Debug)]
struct Silent;

#[async_trait]
impl LanguageModel for Silent {
    async fn complete(&self, _: &ModelRequest) -> Result<ModelResponse, ModelError> {
        futures::future::pending().await
    }
    async fn stream(&self, _: &ModelRequest) -> Result<ModelStream, ModelError> {
        futures::future::pending().await
    }
    fn provider(&self) -> &str {
        "silent"
    }
    fn model_name(&self) -> &str {
        "silent"
    }
}

fn dataset() -> Dataset<String, String> {
    Dataset::new(
        "d",
        ["a", "slow", "b"].map(|n| Case::new(n, n.to_owned()).expect(n.to_owned())),
    )
}

fn equals() -> impl Evaluator<String, String, String> {
    from_fn("equals", |case: &Ev<'_>| {
        Ok(Score::check(
            Some(case.output) == case.expected,
            case.output.clone(),
        ))
    })
}

fn error<'r>(report: &'r Report, case: &str, evaluator: &str) -> Option<&'r str> {
    match report.case(case)?.scores.get(evaluator)? {
        Scored::Error(message) => Some(message),
        Scored::Score(_) => None,
    }
}

/// Runs `future`, failing the test (rather than hanging it) past `limit`.
async fn within<T>(limit: Duration, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(limit, future)
        .await
        .expect("the experiment finishes: no evaluator may hang it")
}

const A_MINUTE: Duration = Duration::from_secs(60);

async fn run_within(limit: Duration, evaluators: &Evaluators<String, String, String>) -> Report {
    let task = task_fn(|input: String, _cx| async move { Ok::<_, TaskError>(input) });
    let experiment = Experiment::new("bounded").progress(Progress::Off);
    let dataset = dataset();
    within(limit, experiment.run(&dataset, &task, evaluators))
        .await
        .expect("the experiment runs")
}

async fn run(evaluators: &Evaluators<String, String, String>) -> Report {
    run_within(A_MINUTE, evaluators).await
}

#[tokio::test]
async fn a_hanging_evaluator_or_judge_loses_its_score_on_that_case_alone() {
    let limit = Duration::from_millis(100);
    let judge = Judge::new(Arc::new(Silent), "anything").named("judge");
    let evaluators = Evaluators::new()
        .with(equals())
        .with(HangsOnSlow)
        .with(judge)
        .timeout(limit);
    let report = run(&evaluators).await;
    let names: Vec<&str> = report.cases.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["a", "slow", "b"], "every case is kept");
    for case in &report.cases {
        assert!(case.failure.is_none(), "{case:?}");
        // The other evaluators' scores are kept.
        assert!(case.scores["equals"].passed(), "{case:?}");
        // The judge's model never answers: an error on every case.
        let message = error(&report, &case.name, "judge").expect("the judge timed out");
        assert_eq!(
            message,
            format!(
                "evaluator `judge` did not finish on case `{}` within 100ms; it was stopped",
                case.name
            )
        );
    }
    // The hanging evaluator loses its score on `slow` alone.
    assert!(report.case("a").unwrap().scores["hangs"].passed());
    assert!(report.case("b").unwrap().scores["hangs"].passed());
    assert_eq!(
        error(&report, "slow", "hangs"),
        Some("evaluator `hangs` did not finish on case `slow` within 100ms; it was stopped")
    );
    let summary = report.summary();
    let hangs = summary
        .evaluators
        .iter()
        .find(|e| e.name == "hangs")
        .unwrap();
    assert_eq!((hangs.passed, hangs.errors), (2, 1));
    // The report saves and loads back.
    let dir = tempfile::tempdir().unwrap();
    report.save(dir.path().join("r.json")).unwrap();
    assert_eq!(Report::load(dir.path().join("r.json")).unwrap(), report);
}

#[tokio::test]
async fn a_rescore_bounds_its_evaluators_as_a_run_does() {
    let report = run(&Evaluators::new().with(equals())).await;
    let evaluators = Evaluators::new()
        .with(HangsOnSlow)
        .with(equals())
        .timeout(Duration::from_millis(50));
    let rescored = within(
        A_MINUTE,
        Experiment::rescore::<String, String, String>(&report, &evaluators),
    )
    .await
    .unwrap();
    assert_eq!(rescored.cases.len(), 3);
    for case in &rescored.cases {
        assert!(case.scores["equals"].passed(), "{case:?}");
    }
    assert_eq!(
        error(&rescored, "slow", "hangs"),
        Some("evaluator `hangs` did not finish on case `slow` within 50ms; it was stopped")
    );
    assert!(rescored.case("a").unwrap().scores["hangs"].passed());
    assert!(rescored.case("b").unwrap().scores["hangs"].passed());
}

// Time is paused: the runtime jumps to the next timer when every task
// waits, so the five minutes of the default pass at once; without a
// default the test's own bound (ten minutes) would fire and fail it.
#[tokio::test(start_paused = true)]
async fn by_default_an_evaluator_is_stopped_after_five_minutes() {
    assert_eq!(
        Evaluators::<String, String, String>::DEFAULT_TIMEOUT,
        Duration::from_secs(300)
    );
    let started = tokio::time::Instant::now();
    let report = run_within(
        Duration::from_secs(600),
        &Evaluators::new().with(HangsOnSlow).with(equals()),
    )
    .await;
    assert_eq!(
        error(&report, "slow", "hangs"),
        Some("evaluator `hangs` did not finish on case `slow` within 300s; it was stopped")
    );
    assert!(report.case("slow").unwrap().scores["equals"].passed());
    assert!(started.elapsed() >= Duration::from_secs(300));
}
