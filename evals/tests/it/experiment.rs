//! Experiments over a real harness agent (the kit's tool loop): recording,
//! concurrency, retries, timeouts, re-scoring offline, exact replays and
//! divergences, judges, comparisons.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use harness::llm::{
    Expect, LanguageModel, ModelError, ModelRequest, ModelResponse, ModelStream, Role,
    ScriptedModel, Tool, ToolCall, ToolSet, Usage,
};
use harness::{Harness, create_agent_with};
use harness_evals::{
    Case, CaseCx, CaseFailure, Change, Comparison, Contains, Dataset, EvalCase, EvalError,
    Evaluators, Experiment, ExperimentError, Judge, Match, NumericTolerance, Progress, Report,
    Scored, StepTrajectory, TaskError, ToolTrajectory, call, from_fn, side_by_side, task_fn,
};
use harness_kit::{AgentChat, AgentLoop, ModelDeps, ModelDepsAgent};
use serde_json::{Value, json};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Operands {
    a: i64,
    b: i64,
}

struct Op(&'static str);

#[async_trait]
impl Tool for Op {
    type Args = Operands;
    type Output = i64;
    type Error = std::convert::Infallible;
    fn name(&self) -> &str {
        self.0
    }
    fn description(&self) -> &str {
        "arithmetic on a and b"
    }
    async fn call(&self, args: Operands) -> Result<i64, Self::Error> {
        Ok(if self.0 == "add" {
            args.a + args.b
        } else {
            args.a * args.b
        })
    }
}

fn calculator(system: &str) -> Arc<Harness<AgentChat, ModelDeps>> {
    Arc::new(
        AgentLoop::<AgentChat, ModelDeps>::new(ToolSet::new().with(Op("add")).with(Op("multiply")))
            .system(system)
            .builder()
            .build()
            .expect("a valid loop"),
    )
}

/// The task: run the calculator agent on the question with the case's model.
fn agent_task(
    harness: Arc<Harness<AgentChat, ModelDeps>>,
) -> impl harness_evals::Task<String, String> {
    task_fn(move |question: String, cx: CaseCx| {
        let harness = Arc::clone(&harness);
        async move {
            let deps = ModelDepsAgent {
                model: cx.model(),
                summarizer: None,
            };
            let agent = create_agent_with("calculator", &harness, deps);
            let mut run = agent.run(AgentChat::with_task(question));
            let outcome = cx.observe(&mut run).await?;
            Ok::<_, TaskError>(outcome.state.memory.answer().unwrap_or_default())
        }
    })
}

/// A model that does arithmetic by the rules, for any number of cases at
/// once: "add 2 3" → a call to `add`, a tool result → "the result is N".
/// It counts calls in flight, and can fail the first calls it gets.
#[derive(Default)]
struct Arith {
    in_flight: AtomicUsize,
    most_in_flight: AtomicUsize,
    calls: AtomicUsize,
    /// Fail this many first calls with this error.
    fail_first: usize,
    failure: Option<ModelError>,
    delay: Duration,
}

#[async_trait]
impl LanguageModel for Arith {
    async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_in_flight.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        if let Some(failure) = self.failure.as_ref().filter(|_| n < self.fail_first) {
            return Err(failure.clone());
        }
        let last = request.messages.last().expect("a message");
        let response = if last.role == Role::Tool {
            ModelResponse::from_text(format!("the result is {}", last.text_or_results()))
        } else {
            let text = last.text();
            let words: Vec<&str> = text.split_whitespace().collect();
            match words.as_slice() {
                [op @ ("add" | "multiply"), a, b] => ModelResponse::from_tool_call(ToolCall::new(
                    format!("call-{n}"),
                    *op,
                    json!({"a": a.parse::<i64>().unwrap(), "b": b.parse::<i64>().unwrap()}),
                )),
                _ => ModelResponse::from_text("I cannot do that"),
            }
        };
        Ok(response.with_usage(Usage::new(10, 2)))
    }

    async fn stream(&self, request: &ModelRequest) -> Result<ModelStream, ModelError> {
        Ok(self.complete(request).await?.into_stream())
    }

    fn provider(&self) -> &str {
        "rules"
    }

    fn model_name(&self) -> &str {
        "arith"
    }
}

trait ResultText {
    fn text_or_results(&self) -> String;
}

impl ResultText for harness::llm::Message {
    fn text_or_results(&self) -> String {
        self.content
            .iter()
            .filter_map(|part| match part {
                harness::llm::ContentPart::ToolResult(r) => Some(r.content.clone()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Expected {
    answer: i64,
    tools: Vec<Value>,
}

fn dataset(n: i64) -> Dataset<String, Expected> {
    Dataset::new(
        "sums",
        (1..=n).map(|i| {
            let (op, answer) = if i % 2 == 0 {
                ("add", i + 10)
            } else {
                ("multiply", i * 10)
            };
            Case::new(format!("case-{i}"), format!("{op} {i} 10"))
                .expect(Expected {
                    answer,
                    tools: vec![json!({"name": op, "args": {"a": i, "b": 10}})],
                })
                .tag(op)
        }),
    )
}

fn evaluators() -> Evaluators<String, Expected, String> {
    Evaluators::new()
        .with(
            NumericTolerance::new(0.0)
                .expected_at("/answer")
                .named("answer"),
        )
        .with(ToolTrajectory::from_expected(Match::Strict, "/tools"))
        .with(StepTrajectory::new(
            Match::Strict,
            ["model", "tools", "model"],
        ))
}

fn experiment(name: &str, model: Arc<dyn LanguageModel>) -> Experiment {
    Experiment::new(name).model(model).progress(Progress::Off)
}

#[tokio::test]
async fn an_agent_over_a_dataset_is_scored_from_its_recorded_run() {
    let model = Arc::new(Arith::default());
    let report = experiment("rules", model.clone())
        .concurrency(4)
        .run(
            &dataset(8),
            &agent_task(calculator("Be exact.")),
            &evaluators(),
        )
        .await
        .unwrap();
    assert_eq!(report.cases.len(), 8);
    assert_eq!(report.model.as_deref(), Some("arith"));
    assert_eq!(
        report.evaluators,
        ["answer", "tools (strict)", "steps (strict)"]
    );
    // In dataset order, whatever order they finished in.
    let names: Vec<&str> = report.cases.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        (1..=8).map(|i| format!("case-{i}")).collect::<Vec<_>>()
    );
    for case in &report.cases {
        assert!(case.passed(), "{}: {:?}", case.name, case.scores);
        let m = &case.record.metrics;
        assert_eq!((m.model_calls, m.attempts), (2, 1), "{}", case.name);
        assert_eq!(m.usage, Usage::new(20, 4));
        assert_eq!(case.record.tool_calls().len(), 1);
        assert_eq!(case.record.steps(), ["model", "tools", "model"]);
        assert_eq!(case.record.sessions.len(), 1);
        assert!(case.record.events.iter().any(|e| e.kind == "finished"));
    }
    let summary = report.summary();
    assert_eq!(
        (
            summary.passed,
            summary.failed,
            summary.model_calls,
            summary.tokens
        ),
        (8, 0, 16, 192)
    );
    let table = report.table();
    assert!(
        table.contains("case-8") && table.contains("mean (8 cases)"),
        "{table}"
    );
    assert!(model.most_in_flight.load(Ordering::SeqCst) <= 4);
}

#[tokio::test]
async fn at_most_the_concurrency_limit_runs_at_once() {
    for limit in [1, 3] {
        let model = Arc::new(Arith {
            delay: Duration::from_millis(20),
            ..Arith::default()
        });
        let report = experiment("rules", model.clone())
            .concurrency(limit)
            .run(
                &dataset(6),
                &agent_task(calculator("Be exact.")),
                &evaluators(),
            )
            .await
            .unwrap();
        assert_eq!(report.summary().passed, 6);
        assert_eq!(
            model.most_in_flight.load(Ordering::SeqCst),
            limit,
            "limit {limit}"
        );
    }
}

#[tokio::test]
async fn transient_model_errors_are_retried_and_others_are_not() {
    let rate_limited = ModelError::RateLimited {
        message: "slow down".into(),
        retry_after: None,
    };
    let invalid = ModelError::InvalidRequest {
        status: Some(400),
        message: "bad".into(),
    };
    // (error, retries, passes, attempts)
    for (error, retries, passes, attempts) in [
        (rate_limited.clone(), 2, true, 3),
        (rate_limited.clone(), 1, false, 2),
        (rate_limited, 0, false, 1),
        (invalid, 3, false, 1),
    ] {
        let model = Arc::new(Arith {
            fail_first: 2,
            failure: Some(error.clone()),
            ..Arith::default()
        });
        // The kit's model step retries transient errors itself; this loop's
        // step does not, so that the experiment's retries are what is tested.
        let task = task_fn(|question: String, cx: CaseCx| async move {
            let response = cx
                .model()
                .complete(&ModelRequest::builder().user(question).build())
                .await?;
            Ok::<_, TaskError>(response.text())
        });
        let report = experiment("retries", model)
            .retries(retries, Duration::from_millis(1))
            .run(
                &dataset(1),
                &task,
                &Evaluators::<String, Expected, String>::new(),
            )
            .await
            .unwrap();
        let case = &report.cases[0];
        assert_eq!(
            case.failure.is_none(),
            passes,
            "{error:?} with {retries} retries: {case:?}"
        );
        assert_eq!(
            case.record.metrics.attempts, attempts,
            "{error:?} with {retries} retries"
        );
        if let Some(failure) = &case.failure {
            assert!(matches!(failure, CaseFailure::Error(_)));
        }
    }
}

#[tokio::test]
async fn a_case_past_its_timeout_fails_alone() {
    let task = task_fn(|question: String, _cx: CaseCx| async move {
        if question.contains("3 10") {
            tokio::time::sleep(Duration::from_secs(60)).await;
        }
        Ok::<_, TaskError>(question)
    });
    let report = experiment("timeouts", Arc::new(Arith::default()))
        .concurrency(4)
        .timeout(Duration::from_millis(300))
        .run(
            &dataset(4),
            &task,
            &Evaluators::<String, Expected, String>::new().with(Contains::text("10")),
        )
        .await
        .unwrap();
    for case in &report.cases {
        if case.name == "case-3" {
            assert!(
                matches!(case.failure, Some(CaseFailure::Timeout(_))),
                "{case:?}"
            );
            assert!(case.scores.is_empty());
            assert_eq!(case.value("contains"), 0.0);
        } else {
            assert!(case.passed(), "{case:?}");
        }
    }
    assert_eq!(report.summary().failed, 1);
}

#[tokio::test]
async fn a_failing_task_is_reported_with_its_error_and_no_secret() {
    let secret = "sk-evals-test-4f9d0c2b7a1e6f3d";
    harness::secrets::register(secret);
    // The model is asked with the key in its prompt, and echoes it.
    let model = Arc::new(ScriptedModel::new([
        Expect::any().reply(ModelResponse::from_text(format!("echo {secret}"))),
        Expect::any().reply(ModelResponse::from_text(format!("echo {secret}"))),
    ]));
    let task = task_fn(move |question: String, cx: CaseCx| async move {
        let request = ModelRequest::builder()
            .user(format!("{question} {secret}"))
            .build();
        let said = cx.model().complete(&request).await?.text();
        if question.starts_with("multiply 1 ") {
            return Err(TaskError::msg(format!("tool failed with key {secret}")));
        }
        Ok::<_, TaskError>(said)
    });
    let evaluators = Evaluators::<String, Expected, String>::new().with(Contains::text("echo"));
    let report = experiment("errors", model)
        .run(&dataset(2), &task, &evaluators)
        .await
        .unwrap();
    let failure = report.cases[0].failure.as_ref().expect("case-1 failed");
    assert!(failure.message().contains("tool failed"), "{failure:?}");
    assert!(report.cases[1].failure.is_none());
    assert!(report.cases[1].passed());
    // Not in the failure, the output, the recorded exchanges or the reasons.
    let saved = serde_json::to_string(&report).unwrap();
    assert!(!saved.contains(secret), "{saved}");
    assert!(saved.contains("[redacted]"));
}

#[tokio::test]
async fn evaluator_names_must_be_unique() {
    let evaluators = Evaluators::<String, Expected, String>::new()
        .with(Contains::text("a"))
        .with(Contains::text("b"));
    let error = experiment("dup", Arc::new(Arith::default()))
        .run(&dataset(1), &agent_task(calculator("x")), &evaluators)
        .await
        .unwrap_err();
    assert!(
        matches!(error, ExperimentError::DuplicateEvaluator(ref n) if n == "contains"),
        "{error}"
    );
    let ok = Evaluators::<String, Expected, String>::new()
        .with(Contains::text("a"))
        .with(Contains::text("b").named("contains b"));
    assert!(
        experiment("ok", Arc::new(Arith::default()))
            .run(&dataset(1), &agent_task(calculator("x")), &ok)
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn a_replay_is_exact_and_a_divergence_names_the_call_and_the_difference() {
    let data = dataset(4);
    let recorded = experiment("recorded", Arc::new(Arith::default()))
        .concurrency(2)
        .run(&data, &agent_task(calculator("Be exact.")), &evaluators())
        .await
        .unwrap();
    // The same task on the recorded answers: no model at all.
    let replayed = Experiment::new("replay")
        .progress(Progress::Off)
        .replay(
            &data,
            &recorded,
            &agent_task(calculator("Be exact.")),
            &evaluators(),
        )
        .await
        .unwrap();
    for (a, b) in recorded.cases.iter().zip(&replayed.cases) {
        assert_eq!(
            (&a.output, &a.scores, &a.failure),
            (&b.output, &b.scores, &b.failure)
        );
        assert_eq!(a.record.exchanges, b.record.exchanges, "{}", a.name);
        assert_eq!(a.record.steps(), b.record.steps());
    }
    assert_eq!(replayed.model.as_deref(), Some("arith"));
    // A changed prompt: every case diverges at its first model call.
    let diverged = Experiment::new("changed")
        .progress(Progress::Off)
        .replay(
            &data,
            &recorded,
            &agent_task(calculator("Be creative.")),
            &evaluators(),
        )
        .await
        .unwrap();
    for case in &diverged.cases {
        match &case.failure {
            Some(CaseFailure::Diverged(message)) => {
                assert!(message.contains("model call 1"), "{message}");
                assert!(
                    message.contains("Be exact.") && message.contains("Be creative."),
                    "{message}"
                );
            }
            other => panic!("{}: {other:?}", case.name),
        }
    }
    // A case the report does not hold cannot be replayed.
    let error = Experiment::new("more")
        .replay(
            &dataset(5),
            &recorded,
            &agent_task(calculator("Be exact.")),
            &evaluators(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(error, ExperimentError::NotRecorded { ref case, .. } if case == "case-5"),
        "{error}"
    );
}

fn verdict(passed: bool, score: f64) -> ModelResponse {
    ModelResponse::from_text(
        json!({"reason": "checked", "passed": passed, "score": score}).to_string(),
    )
}

#[tokio::test]
async fn a_judge_gives_typed_verdicts_and_a_report_rescores_offline() {
    let data = dataset(2);
    // The judge passes case-1 and fails case-2 (cases run one at a time).
    let judge_model = Arc::new(ScriptedModel::new([
        Expect::any()
            .any_message_contains("Rubric")
            .reply(verdict(true, 0.9)),
        Expect::any().reply(verdict(false, 0.2)),
    ]));
    let judge = || {
        Judge::new(
            judge_model.clone() as Arc<dyn LanguageModel>,
            "The answer states the result.",
        )
    };
    let with_judge = evaluators().with(judge());
    let report = experiment("judged", Arc::new(Arith::default()))
        .run(&data, &agent_task(calculator("Be exact.")), &with_judge)
        .await
        .unwrap();
    let judged = |r: &Report, case: usize| r.cases[case].scores["judge"].clone();
    assert!(
        matches!(judged(&report, 0), Scored::Score(ref s) if s.passed && s.value == 0.9),
        "{:?}",
        judged(&report, 0)
    );
    assert!(matches!(judged(&report, 1), Scored::Score(ref s) if !s.passed && s.value == 0.2));
    assert_eq!(report.cases[0].record.judge_exchanges.len(), 1);
    // The judge saw the rubric, the input and the output.
    let asked = &judge_model.requests()[0];
    let prompt = asked.last_message().unwrap().text();
    assert!(
        prompt.contains("The answer states the result.")
            && prompt.contains("multiply 1 10")
            && prompt.contains("the result is 10"),
        "{prompt}"
    );

    // Saved, loaded, re-scored with no model left to call: the script is
    // used up, so any live call would fail.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("report.json");
    report.save(&path).unwrap();
    let loaded = Report::load(&path).unwrap();
    assert_eq!(loaded, report);
    let extra = with_judge_and(judge());
    let rescored = Experiment::rescore::<String, Expected, String>(&loaded, &extra)
        .await
        .unwrap();
    for (a, b) in report.cases.iter().zip(&rescored.cases) {
        for (name, score) in &a.scores {
            assert_eq!(&b.scores[name], score, "{} {name}", a.name);
        }
        assert!(b.scores["short"].passed());
        assert_eq!(b.record.judge_exchanges, a.record.judge_exchanges);
    }
    assert!(rescored.evaluators.contains(&"short".to_owned()));
    // A judge with another rubric asks what the record does not hold: an
    // evaluator error naming the difference, not a live call.
    let other = evaluators().with(Judge::new(judge_model.clone(), "Is it polite?"));
    let rescored = Experiment::rescore::<String, Expected, String>(&loaded, &other)
        .await
        .unwrap();
    match &rescored.cases[0].scores["judge"] {
        Scored::Error(message) => assert!(message.contains("Is it polite?"), "{message}"),
        other => panic!("{other:?}"),
    }
    // Values that do not read as the types given.
    let error = Experiment::rescore::<String, Expected, i64>(&loaded, &Evaluators::new())
        .await
        .unwrap_err();
    assert!(
        matches!(error, ExperimentError::Type { what: "output", .. }),
        "{error}"
    );
}

fn with_judge_and(judge: Judge) -> Evaluators<String, Expected, String> {
    evaluators().with(judge).with(from_fn(
        "short",
        |case: &EvalCase<'_, String, Expected, String>| {
            Ok(harness_evals::Score::check(
                case.output.len() < 40,
                "length",
            ))
        },
    ))
}

#[tokio::test]
async fn a_judge_whose_model_fails_or_rambles_cannot_score() {
    let input = json!("q");
    let output = json!("a");
    let record = harness_evals::CaseRecord::default();
    for turns in [
        vec![Expect::any().fail(ModelError::InvalidRequest {
            status: Some(400),
            message: "no".into(),
        })],
        vec![
            Expect::any().reply(ModelResponse::from_text("I think it is fine")),
            Expect::any().reply(ModelResponse::from_text("{\"passed\": \"yes\"}")),
        ],
    ] {
        let judge = Judge::new(Arc::new(ScriptedModel::new(turns)), "rubric");
        let case = EvalCase::<Value, Value, Value>::new("c", &input, None, &output, &record);
        let error = harness_evals::Evaluator::evaluate(&judge, &case)
            .await
            .unwrap_err();
        assert!(matches!(error, EvalError::Model { .. }), "{error}");
    }
}

#[tokio::test]
async fn comparisons_list_improved_and_regressed_cases() {
    let data = dataset(4);
    let run = |fail_case: Option<&'static str>| {
        let data = &data;
        async move {
            let task = task_fn(move |question: String, _cx: CaseCx| async move {
                let n: i64 = question.split_whitespace().nth(1).unwrap().parse().unwrap();
                let answer = if fail_case.is_some_and(|c| question.starts_with(c)) {
                    -1
                } else if n % 2 == 0 {
                    n + 10
                } else {
                    n * 10
                };
                Ok::<_, TaskError>(answer.to_string())
            });
            let evaluators =
                Evaluators::new().with(NumericTolerance::new(0.0).expected_at("/answer"));
            experiment("x", Arc::new(Arith::default()))
                .run(data, &task, &evaluators)
                .await
                .unwrap()
        }
    };
    let baseline = run(Some("add 2 ")).await;
    let candidate = run(Some("multiply 3 ")).await;
    let comparison = Comparison::new(&baseline, &candidate);
    let improved: Vec<&str> = comparison.improved().map(|c| c.name.as_str()).collect();
    let regressed: Vec<&str> = comparison.regressions().map(|c| c.name.as_str()).collect();
    assert_eq!((improved, regressed), (vec!["case-2"], vec!["case-3"]));
    assert_eq!(comparison.means[0].delta(), Some(0.0));
    // A case dropped by 1.0: a regression under any threshold below 1.
    assert!(comparison.regressed(0.0) && comparison.regressed(0.5));
    assert!(!comparison.regressed(1.0));
    let same = Comparison::new(&baseline, &baseline);
    assert!(!same.regressed(0.0));
    assert!(same.cases.iter().all(|c| c.change == Change::Unchanged));
    let table = comparison.table();
    assert!(table.contains("1 improved, 1 regressed"), "{table}");
    let side = side_by_side(&[baseline, candidate]);
    assert!(
        side.contains("case-3") && side.lines().count() >= 8,
        "{side}"
    );
}

#[test]
fn reports_that_are_not_reports_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for (file, text) in [
        ("a.json", "{}"),
        ("b.json", "not json"),
        ("c.json", "{\"version\": 99}"),
    ] {
        let path = dir.path().join(file);
        std::fs::write(&path, text).unwrap();
        let error = Report::load(&path).unwrap_err();
        assert!(error.to_string().contains(file), "{error}");
    }
    assert!(Report::load(dir.path().join("missing.json")).is_err());
}

#[tokio::test]
async fn a_report_names_its_tool_trajectory_failures() {
    let model = Arc::new(Arith::default());
    let evaluators = Evaluators::<String, Expected, String>::new().with(ToolTrajectory::new(
        Match::Strict,
        [call("add").args(json!({"a": 1, "b": 10}))],
    ));
    let report = experiment("t", model)
        .run(&dataset(1), &agent_task(calculator("x")), &evaluators)
        .await
        .unwrap();
    match &report.cases[0].scores["tools (strict)"] {
        Scored::Score(s) => {
            assert!(!s.passed);
            assert!(
                s.reason.contains("multiply") && s.reason.contains("add"),
                "{}",
                s.reason
            );
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn several_models_run_side_by_side_in_one_call() {
    let wrong =
        Arc::new(ScriptedModel::new((0..4).map(|_| {
            Expect::any().reply(ModelResponse::from_text("no idea"))
        }))) as Arc<dyn LanguageModel>;
    let reports = experiment("models", Arc::new(Arith::default()))
        .run_models(
            [Arc::new(Arith::default()) as Arc<dyn LanguageModel>, wrong],
            &dataset(4),
            &agent_task(calculator("Be exact.")),
            &evaluators(),
        )
        .await
        .unwrap();
    assert_eq!(reports.len(), 2);
    assert_eq!(reports[0].experiment, "models [arith]");
    assert_eq!(reports[1].model.as_deref(), Some("scripted"));
    assert_eq!(
        (reports[0].summary().passed, reports[1].summary().passed),
        (4, 0)
    );
    let table = side_by_side(&reports);
    let header = table.lines().nth(1).unwrap();
    assert!(
        header.contains("arith:answer") && header.contains("scripted:answer"),
        "{table}"
    );
    let footer = table.lines().last().unwrap();
    assert!(
        footer.starts_with("mean") && footer.contains("1.000") && footer.contains("0.000"),
        "{table}"
    );
}

/// A report run with a judge (one recorded verdict per case), saved to a
/// fresh directory.
async fn judged_report() -> (Report, tempfile::TempDir, std::path::PathBuf) {
    let judge_model = Arc::new(ScriptedModel::new([
        Expect::any().reply(verdict(true, 0.9)),
        Expect::any().reply(verdict(false, 0.2)),
    ]));
    let judge = Judge::new(judge_model as Arc<dyn LanguageModel>, "States the result.");
    let report = experiment("judged", Arc::new(Arith::default()))
        .run(
            &dataset(2),
            &agent_task(calculator("Be exact.")),
            &evaluators().with(judge),
        )
        .await
        .unwrap();
    for case in &report.cases {
        assert_eq!(case.record.judge_exchanges.len(), 1, "{}", case.name);
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("report.json");
    report.save(&path).unwrap();
    (report, dir, path)
}

#[tokio::test]
async fn a_rescore_keeps_every_recorded_judge_answer() {
    // A judge that can no longer be called: any live call would fail.
    let gone = || Arc::new(ScriptedModel::new([])) as Arc<dyn LanguageModel>;
    let same = || Judge::new(gone(), "States the result.");
    // Rescored without the judge, with another rubric, under another name
    // (a request nobody recorded under that name is still the same request),
    // and with the judge as it was.
    let variants: Vec<(&str, Evaluators<String, Expected, String>)> = vec![
        ("no judge", evaluators()),
        (
            "another rubric",
            evaluators().with(Judge::new(gone(), "Is it polite?")),
        ),
        ("renamed", evaluators().with(same().named("grader"))),
        ("same judge", evaluators().with(same())),
    ];
    for (what, rescoring) in variants {
        let (original, _dir, path) = judged_report().await;
        let rescored = Experiment::rescore::<String, Expected, String>(
            &Report::load(&path).unwrap(),
            &rescoring,
        )
        .await
        .unwrap();
        for (a, b) in original.cases.iter().zip(&rescored.cases) {
            assert_eq!(
                b.record.judge_exchanges, a.record.judge_exchanges,
                "{what}: {}",
                a.name
            );
        }
        // The normal workflow: the rescore saved over the original. The
        // judge's answers are still there to rescore from.
        rescored.save(&path).unwrap();
        let again = Experiment::rescore::<String, Expected, String>(
            &Report::load(&path).unwrap(),
            &evaluators().with(same()),
        )
        .await
        .unwrap();
        for (a, b) in original.cases.iter().zip(&again.cases) {
            assert_eq!(b.scores["judge"], a.scores["judge"], "{what}: {}", a.name);
        }
    }
}

#[tokio::test]
async fn a_secret_in_a_case_never_reaches_the_judge() {
    let secret = "sk-judge-test-9b1f7c3e5a2d4086";
    harness::secrets::register(secret);
    // The secret in the output, in the input, in the expected output.
    let data = Dataset::<String, String>::new(
        "secrets",
        [
            Case::new("in-output", "echo the key".to_owned()).expect("an answer".to_owned()),
            Case::new("in-input", format!("the key is {secret}")).expect("an answer".to_owned()),
            Case::new("in-expected", "answer".to_owned()).expect(format!("uses {secret}")),
        ],
    );
    let task = task_fn(move |input: String, _cx: CaseCx| async move {
        Ok::<_, TaskError>(if input.starts_with("echo") {
            format!("the key is {secret}")
        } else {
            "an answer".to_owned()
        })
    });
    let judge_model = Arc::new(ScriptedModel::new(
        (0..3).map(|_| Expect::any().reply(verdict(true, 1.0))),
    ));
    let judged = Evaluators::<String, String, String>::new().with(
        Judge::new(
            judge_model.clone() as Arc<dyn LanguageModel>,
            "Is it right?",
        )
        .with_expected(),
    );
    let report = experiment("secrets", Arc::new(Arith::default()))
        .run(&data, &task, &judged)
        .await
        .unwrap();
    let asked = judge_model.requests();
    assert_eq!(asked.len(), 3);
    for (case, request) in report.cases.iter().zip(&asked) {
        assert!(case.passed(), "{case:?}");
        let sent = serde_json::to_string(request).unwrap();
        assert!(!sent.contains(secret), "{}: {sent}", case.name);
        assert!(sent.contains("[redacted]"), "{}: {sent}", case.name);
    }
    // The prompt the record holds is the one rescoring builds again.
    let again = Experiment::rescore::<String, String, String>(
        &report,
        &Evaluators::new()
            .with(Judge::new(Arc::new(ScriptedModel::new([])), "Is it right?").with_expected()),
    )
    .await
    .unwrap();
    for case in &again.cases {
        assert!(case.passed(), "{case:?}");
    }
}

/// Every event's fields, as text.
#[derive(Clone, Default)]
struct Logged(Arc<std::sync::Mutex<Vec<String>>>);

impl tracing::Subscriber for Logged {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Fields(String);
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!("{}={value:?} ", field.name()));
            }
        }
        let mut fields = Fields(String::new());
        event.record(&mut fields);
        self.0.lock().unwrap().push(fields.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[tokio::test]
async fn a_retried_model_error_is_logged_without_its_secret() {
    let secret = "sk-retry-log-test-3c8e1a7f5b9d2064";
    harness::secrets::register(secret);
    let logged = Logged::default();
    let _guard = tracing::subscriber::set_default(logged.clone());
    for error in [
        ModelError::RateLimited {
            message: format!("slow down, key {secret}"),
            retry_after: None,
        },
        ModelError::Overloaded {
            status: Some(503),
            message: format!("busy for {secret}"),
            retry_after: None,
        },
    ] {
        let model = Arc::new(Arith {
            fail_first: 1,
            failure: Some(error.clone()),
            ..Arith::default()
        });
        let task = task_fn(|question: String, cx: CaseCx| async move {
            let response = cx
                .model()
                .complete(&ModelRequest::builder().user(question).build())
                .await?;
            Ok::<_, TaskError>(response.text())
        });
        let report = experiment("retried", model)
            .retries(1, Duration::from_millis(1))
            .run(
                &dataset(1),
                &task,
                &Evaluators::<String, Expected, String>::new(),
            )
            .await
            .unwrap();
        assert_eq!(report.cases[0].record.metrics.attempts, 2, "{error:?}");
    }
    let lines = logged.0.lock().unwrap().clone();
    let retries: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("transient model error"))
        .collect();
    assert_eq!(retries.len(), 2, "{lines:?}");
    for line in retries {
        assert!(line.contains("[redacted]"), "{line}");
    }
    for line in &lines {
        assert!(!line.contains(secret), "{line}");
    }
}

#[test]
fn saving_a_report_leaves_the_users_files_alone() {
    let report = Report {
        version: harness_evals::REPORT_VERSION,
        experiment: "e".into(),
        dataset: "d".into(),
        provider: None,
        model: None,
        evaluators: Vec::new(),
        started_ms: 0,
        elapsed_ms: 0.0,
        cases: Vec::new(),
    };
    for name in ["report.json", "nested.report"] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        let users = dir.path().join(format!("{name}.tmp"));
        std::fs::write(&users, "the user's notes").unwrap();
        // A new file, then a replaced one.
        for _ in 0..2 {
            report.save(&path).unwrap();
            assert_eq!(Report::load(&path).unwrap(), report);
            assert_eq!(std::fs::read_to_string(&users).unwrap(), "the user's notes");
        }
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, [name.to_owned(), format!("{name}.tmp")]);
    }
    // A save that cannot rename into place (the path is a directory) names
    // the path and leaves nothing behind.
    let dir = tempfile::tempdir().unwrap();
    let blocked = dir.path().join("blocked.json");
    std::fs::create_dir_all(blocked.join("inside")).unwrap();
    let error = report.save(&blocked).unwrap_err();
    assert!(
        matches!(error, harness_evals::ReportError::Save { ref path, .. } if path == &blocked),
        "{error}"
    );
    assert!(error.to_string().contains("blocked.json"), "{error}");
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["blocked.json"]);
}

#[tokio::test]
async fn a_replay_whose_run_makes_fewer_model_calls_than_recorded_diverges() {
    // A task making as many calls as the case's input says.
    let task = task_fn(|calls: u64, cx: CaseCx| async move {
        let mut said = Vec::new();
        for i in 0..calls {
            let request = ModelRequest::builder().user(format!("call {i}")).build();
            said.push(cx.model().complete(&request).await?.text());
        }
        Ok::<_, TaskError>(said.join(" "))
    });
    let model =
        Arc::new(ScriptedModel::new((0..3).map(|i| {
            Expect::any().reply(ModelResponse::from_text(format!("r{i}")))
        })));
    let recorded = Experiment::new("recorded")
        .model(model)
        .progress(Progress::Off)
        .run(
            &Dataset::<u64, String>::new("d", [Case::new("three", 3)]),
            &task,
            &Evaluators::new(),
        )
        .await
        .unwrap();
    assert_eq!(recorded.cases[0].record.exchanges.len(), 3);
    // The same case, asking for all three: replayed whole.
    let same = Experiment::new("same")
        .progress(Progress::Off)
        .replay(
            &Dataset::<u64, String>::new("d", [Case::new("three", 3)]),
            &recorded,
            &task,
            &Evaluators::new(),
        )
        .await
        .unwrap();
    assert_eq!(same.cases[0].failure, None, "{:?}", same.cases[0]);
    // Two calls of the three recorded: a change, not a pass.
    let fewer = Experiment::new("fewer")
        .progress(Progress::Off)
        .replay(
            &Dataset::<u64, String>::new("d", [Case::new("three", 2)]),
            &recorded,
            &task,
            &Evaluators::new(),
        )
        .await
        .unwrap();
    match &fewer.cases[0].failure {
        Some(CaseFailure::Diverged(message)) => {
            assert!(message.contains("2 of the 3"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}
