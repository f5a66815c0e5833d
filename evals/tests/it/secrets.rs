//! The secrets the process holds reach no saved report or dataset, no
//! printed table or comparison, no log line and no error, whichever field
//! quotes them; a record that cannot be redacted is withheld, never kept.
//!
//! Every test registers secrets of its own (the set is the process's, so
//! they are unlike any text another test writes).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use harness::llm::{
    Exchange, Expect, LanguageModel, ModelError, ModelRequest, ModelResponse, ModelStream, Outcome,
    ScriptedModel,
};
use harness_evals::{
    Case, CaseCx, CaseFailure, CaseRecord, CaseReport, Comparison, Contains, Dataset, Evaluators,
    EventRecord, Experiment, Judge, Progress, REPORT_VERSION, Report, Score, Scored, TaskError,
    from_fn, side_by_side, task_fn,
};
use serde_json::{Value, json};

/// Fails when `text` holds `secret` as it is or JSON-escaped.
fn assert_hidden(secret: &str, text: &str, what: &str) {
    let escaped = serde_json::to_string(secret).unwrap();
    let escaped = &escaped[1..escaped.len() - 1];
    assert!(
        !text.contains(secret) && !text.contains(escaped),
        "{what} holds {secret:?}:\n{text}"
    );
}

/// What a report made by this crate is shown as: its `Debug`, and all
/// that [`assert_report_hidden`] checks. Returns the file's text.
fn assert_made_hidden(secrets: &[&str], report: &Report) -> String {
    for secret in secrets {
        assert_hidden(secret, &format!("{report:?}"), "the report's Debug");
    }
    assert_report_hidden(secrets, report)
}

/// What any report is shown as: its file (saved, then read back), its
/// table, a comparison with it (table and JSON) and a side-by-side view.
/// Returns the file's text.
fn assert_report_hidden(secrets: &[&str], report: &Report) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("report.json");
    report.save(&path).unwrap();
    let saved = String::from_utf8(std::fs::read(&path).unwrap()).unwrap();
    Report::load(&path).unwrap();
    // Every case regressed, so the comparison lists them by name.
    let mut worse = report.clone();
    for case in &mut worse.cases {
        case.scores.clear();
    }
    let comparison = Comparison::new(report, &worse);
    let shown = [
        ("the saved report", saved.clone()),
        ("the table", report.table()),
        ("the comparison", comparison.table()),
        (
            "the comparison's JSON",
            serde_json::to_string(&comparison).unwrap(),
        ),
        (
            "the side-by-side view",
            side_by_side(&[report.clone(), worse]),
        ),
    ];
    for secret in secrets {
        for (what, text) in &shown {
            assert_hidden(secret, text, what);
        }
    }
    saved
}

fn register(secrets: &[&str]) {
    for secret in secrets {
        assert!(harness::secrets::register(secret), "{secret}");
    }
}

/// The record of case `index` as saved: `withheld` and the exchanges.
fn saved_record(saved: &str, index: usize) -> Value {
    let report: Value = serde_json::from_str(saved).unwrap();
    report["cases"][index]["record"].clone()
}

/// The task that answers with its input.
async fn echo(input: String, _cx: CaseCx) -> Result<String, TaskError> {
    Ok(input)
}

#[tokio::test]
async fn a_secret_in_a_name_a_tag_or_metadata_is_in_no_saved_or_printed_report() {
    let plain = "sk-names-tags-7d3f9a1c5e2b8064";
    let quoted = "sk-names-\"quoted\"\\tag-51c9e7a3";
    register(&[plain, quoted]);
    for secret in [plain, quoted] {
        let dataset = Dataset::<String, String>::new(
            format!("dataset of {secret}"),
            [
                Case::new(format!("named {secret}"), "a".to_owned()).expect("a".to_owned()),
                Case::new("tagged", "b".to_owned())
                    .expect("b".to_owned())
                    .tag(format!("env:{secret}"))
                    .tag(secret),
                Case::new("nested", "c".to_owned())
                    .expect("c".to_owned())
                    .meta(
                        "env",
                        json!({
                            "vars": [{"name": "API_KEY", "value": secret}],
                            "deep": {"deeper": [[format!("x{secret}y")]]},
                        }),
                    )
                    .meta(secret, 1)
                    .meta("plain", format!("copied from the shell: {secret}")),
            ],
        );
        let report = Experiment::new(format!("experiment {secret}"))
            .progress(Progress::Off)
            .run(
                &dataset,
                &task_fn(echo),
                &Evaluators::new().with(Contains::expected().named(format!("contains {secret}"))),
            )
            .await
            .unwrap();
        assert_eq!(report.cases.len(), 3);
        for case in &report.cases {
            assert!(case.passed(), "{case:?}");
        }
        let saved = assert_made_hidden(&[secret], &report);
        assert!(saved.contains("[redacted]"), "{saved}");
        // Redacted, not withheld: nothing in the record needed it.
        assert_eq!(saved_record(&saved, 0)["withheld"], Value::Null, "{saved}");
    }
}

#[tokio::test]
async fn a_secret_in_the_output_or_an_experiment_name_is_in_no_saved_or_printed_report() {
    let plain = "sk-output-name-0b6e2d9f4a7c1358";
    let other = "ghp_outputNameToken9f8e7d6c5b4a";
    register(&[plain, other]);
    for secret in [plain, other] {
        // The model echoes the key it was sent; the output quotes it in a
        // key and a value; an event's payload, a reason and a judge's
        // answer quote it too.
        let model = Arc::new(ScriptedModel::new([
            Expect::any().reply(ModelResponse::from_text(format!("echo {secret}")))
        ]));
        let judge_model = Arc::new(ScriptedModel::new([Expect::any().reply(
            ModelResponse::from_text(
                json!({"reason": format!("it quotes {secret}"), "passed": true, "score": 1.0})
                    .to_string(),
            ),
        )]));
        let task = task_fn(move |input: String, cx: CaseCx| async move {
            let request = ModelRequest::builder()
                .user(format!("{input} {secret}"))
                .build();
            let said = cx.model().complete(&request).await?.text();
            cx.record_event(
                serde_json::from_value::<EventRecord>(json!({
                    "kind": "custom",
                    "step": format!("step {secret}"),
                    "payload": {"env": [secret], secret: true},
                }))
                .unwrap(),
            );
            Ok::<_, TaskError>(BTreeMap::from([
                (secret.to_owned(), said),
                ("note".to_owned(), format!("the key is {secret}")),
            ]))
        });
        let evaluators = Evaluators::<String, String, BTreeMap<String, String>>::new()
            .with(from_fn(
                "quotes",
                |case: &harness_evals::EvalCase<'_, _, _, _>| {
                    Ok(Score::pass(format!("saw {:?}", case.output)))
                },
            ))
            .with(Judge::new(
                judge_model.clone() as Arc<dyn LanguageModel>,
                format!("Does it quote {secret}?"),
            ));
        let reports = Experiment::new(format!("by model {secret}"))
            .progress(Progress::Off)
            .run_models(
                [model as Arc<dyn LanguageModel>],
                &Dataset::new("outputs", [Case::new("one", "say".to_owned())]),
                &task,
                &evaluators,
            )
            .await
            .unwrap();
        let report = &reports[0];
        assert!(report.cases[0].passed(), "{:?}", report.cases[0]);
        let saved = assert_made_hidden(&[secret], report);
        let record = saved_record(&saved, 0);
        assert_eq!(record["withheld"], Value::Null, "{saved}");
        assert_eq!(record["exchanges"].as_array().unwrap().len(), 1, "{saved}");
        assert_eq!(
            record["judge_exchanges"].as_array().unwrap().len(),
            1,
            "{saved}"
        );
        // Nor was it sent to the judge.
        let asked = serde_json::to_string(&judge_model.requests()).unwrap();
        assert_hidden(secret, &asked, "the judge's prompt");
    }
}

#[tokio::test]
async fn a_record_that_cannot_round_trip_is_withheld_never_kept_with_its_secret() {
    // A secret that is also the name of an error's kind: the record's JSON
    // redacted no longer reads as a record.
    let kind = "content_filtered";
    let prompt_secret = "sk-round-trip-3e9a7c1f5b2d8046";
    register(&[kind, prompt_secret]);
    let model = Arc::new(ScriptedModel::new([
        Expect::any().fail(ModelError::ContentFiltered {
            reason: "policy".into(),
        }),
        Expect::any().reply(ModelResponse::from_text(format!("echo {prompt_secret}"))),
    ]));
    let task = task_fn(move |input: String, cx: CaseCx| async move {
        let request = ModelRequest::builder()
            .user(format!("{input} {prompt_secret}"))
            .build();
        let _filtered = cx.model().complete(&request).await;
        let said = cx.model().complete(&request).await?.text();
        Ok::<_, TaskError>(said)
    });
    let report = Experiment::new("round trip")
        .model(model)
        .progress(Progress::Off)
        .run(
            &Dataset::<String, String>::new("d", [Case::new("filtered", "say".to_owned())]),
            &task,
            &Evaluators::new(),
        )
        .await
        .unwrap();
    let saved = assert_made_hidden(&[kind, prompt_secret], &report);
    let record = saved_record(&saved, 0);
    assert!(
        record["withheld"]
            .as_str()
            .is_some_and(|w| w.contains("withheld")),
        "{saved}"
    );
    assert_eq!(record["exchanges"], json!([]), "{saved}");
    // The metrics are numbers, and stay.
    assert_eq!(record["metrics"]["model_calls"], 2, "{saved}");
    // Nothing to score it again from, or to replay: said, not guessed.
    let rescored = Experiment::rescore::<String, String, String>(
        &report,
        &Evaluators::new().with(Contains::text("echo")),
    )
    .await
    .unwrap();
    assert!(
        matches!(&rescored.cases[0].scores["contains"], Scored::Error(e) if e.contains("withheld")),
        "{:?}",
        rescored.cases[0].scores
    );
    let replayed = Experiment::new("again")
        .progress(Progress::Off)
        .replay(
            &Dataset::<String, String>::new("d", [Case::new("filtered", "say".to_owned())]),
            &report,
            &task,
            &Evaluators::new(),
        )
        .await
        .unwrap();
    assert!(
        matches!(replayed.cases[0].failure, Some(CaseFailure::Diverged(_))),
        "{:?}",
        replayed.cases[0]
    );
}

/// A model whose every answer is an error naming a recording file whose
/// path is not UTF-8 (so the record cannot be serialized), with a secret
/// in its message.
struct Unserializable(&'static str);

#[async_trait]
impl LanguageModel for Unserializable {
    async fn complete(&self, _: &ModelRequest) -> Result<ModelResponse, ModelError> {
        use std::os::unix::ffi::OsStringExt;
        Err(ModelError::Recording {
            path: std::ffi::OsString::from_vec(b"/tmp/rec-\xff.json".to_vec()).into(),
            message: format!("cannot write with key {}", self.0),
        })
    }

    async fn stream(&self, request: &ModelRequest) -> Result<ModelStream, ModelError> {
        Err(self.complete(request).await.unwrap_err())
    }

    fn provider(&self) -> &str {
        "broken"
    }

    fn model_name(&self) -> &str {
        "broken"
    }
}

#[tokio::test]
async fn a_record_that_cannot_be_serialized_is_withheld_and_the_report_still_saves() {
    let secrets = [
        "sk-unserializable-6c2e8a4f0b9d1357",
        "sk-unserializable-\"q\"-4f0b9d1357",
    ];
    register(&secrets);
    for secret in secrets {
        let task = task_fn(|_: String, cx: CaseCx| async move {
            let asked = cx
                .model()
                .complete(&ModelRequest::builder().user("save it").build())
                .await;
            Ok::<_, TaskError>(format!("{}", asked.is_err()))
        });
        let report = Experiment::new("unserializable")
            .model(Arc::new(Unserializable(secret)))
            .progress(Progress::Off)
            .run(
                &Dataset::<String, String>::new("d", [Case::new("broken", "x".to_owned())]),
                &task,
                &Evaluators::new(),
            )
            .await
            .unwrap();
        let saved = assert_made_hidden(&[secret], &report);
        let record = saved_record(&saved, 0);
        assert!(record["withheld"].is_string(), "{saved}");
        assert_eq!(record["exchanges"], json!([]), "{saved}");
    }
}

/// A report as a hand (or an older version of this crate) could have
/// written it: the secret in every field, the record included.
fn report_with(secret: &str) -> Report {
    let mut record = CaseRecord::default();
    record.exchanges.push(Exchange {
        request: ModelRequest::builder()
            .system(format!("key {secret}"))
            .user(secret)
            .build(),
        outcome: Outcome::Response(ModelResponse::from_text(format!("echo {secret}"))),
    });
    record.sessions.push(format!("session-{secret}"));
    // Cut at 80 characters in the table: the secret straddles the cut.
    let long = format!("{} {secret} and more", "x".repeat(70));
    let case = |name: String, failure: Option<CaseFailure>| CaseReport {
        name,
        tags: vec![secret.to_owned()],
        metadata: json!({"env": {"list": [secret]}, secret: secret})
            .as_object()
            .unwrap()
            .clone(),
        input: json!({"question": secret}),
        expected: Some(json!([secret])),
        output: failure.is_none().then(|| json!(format!("said {secret}"))),
        failure,
        scores: [
            (
                format!("judge {secret}"),
                Scored::Score(Score::pass(format!("because {secret}"))),
            ),
            ("broken".to_owned(), Scored::Error(format!("no {secret}"))),
        ]
        .into(),
        record: record.clone(),
    };
    Report {
        version: REPORT_VERSION,
        experiment: format!("experiment {secret}"),
        dataset: format!("dataset {secret}"),
        provider: Some(format!("provider {secret}")),
        model: Some(format!("model {secret}")),
        evaluators: vec![format!("judge {secret}"), "broken".to_owned()],
        started_ms: 0,
        elapsed_ms: 1.0,
        cases: vec![
            case(format!("ok {secret}"), None),
            case(
                format!("failed {secret}"),
                Some(CaseFailure::Error(long.clone())),
            ),
            case("timed out".to_owned(), Some(CaseFailure::Timeout(long))),
        ],
    }
}

#[test]
fn a_report_built_by_hand_is_saved_and_printed_redacted() {
    let secrets = [
        "sk-by-hand-9a1c5e2b8064d3f7",
        "sk-by-hand-\"quoted\"-2b8064d3",
    ];
    register(&secrets);
    for secret in secrets {
        let report = report_with(secret);
        let saved = assert_report_hidden(&[secret], &report);
        // No part of it either, where the table cut a failure short.
        let table = report.table();
        assert_hidden(&secret[..14], &table, "the table");
        assert!(saved.contains("[redacted]"), "{saved}");
    }
}

#[test]
fn a_numeric_secret_is_replaced_in_values_and_left_in_measurements() {
    let pin = "9081726354";
    register(&[pin]);
    let mut report = report_with("sk-numeric-neighbour-64d3f79a1c5e");
    // Measurements whose digits hold the secret by chance.
    report.started_ms = 1_909_081_726_354;
    report.cases[0].record.metrics.latency_ms = 9_081_726_354.5;
    // Values that hold it: a number, in text, in a tool call's arguments.
    report.cases[0].output = Some(json!({"pin": 9_081_726_354_u64, "note": format!("pin {pin}")}));
    report.cases[0]
        .metadata
        .insert("pins".into(), json!([9_081_726_354_u64, 7]));
    report.cases[0].record.exchanges.push(Exchange {
        request: ModelRequest::builder().user("unlock").build(),
        outcome: Outcome::Response(ModelResponse::from_tool_call(harness::llm::ToolCall::new(
            "c1",
            "unlock",
            json!({"pin": 9_081_726_354_u64}),
        ))),
    });
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("report.json");
    report.save(&path).unwrap();
    let saved: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let case = &saved["cases"][0];
    assert_eq!(
        case["output"],
        json!({"pin": "[redacted]", "note": "pin [redacted]"})
    );
    assert_eq!(case["metadata"]["pins"], json!(["[redacted]", 7]));
    let exchanges = case["record"]["exchanges"].as_array().unwrap();
    let call = &exchanges.last().unwrap()["outcome"]["response"]["content"][0];
    assert_eq!(call["arguments"], json!({"pin": "[redacted]"}), "{call}");
    // The measurements are kept, and the record with them.
    assert_eq!(saved["started_ms"], 1_909_081_726_354_u64);
    assert_eq!(case["record"]["metrics"]["latency_ms"], 9_081_726_354.5);
    assert_eq!(case["record"]["withheld"], Value::Null);
}

#[tokio::test]
async fn a_reason_cut_short_keeps_no_part_of_a_secret() {
    let secret = "sk-cut-short-5e2b8064d3f79a1c";
    register(&[secret]);
    // `contains` shows the output cut to 80 characters; the cut falls in
    // the secret, 13 to 27 of its characters before it.
    for pad in [52, 60, 66] {
        let output = format!("{} {secret} tail", "y".repeat(pad));
        let task = task_fn(move |_: String, _cx: CaseCx| {
            let output = output.clone();
            async move { Ok::<_, TaskError>(output) }
        });
        let report = Experiment::new("cut")
            .progress(Progress::Off)
            .run(
                &Dataset::<String, String>::new("d", [Case::new("long", "x".to_owned())]),
                &task,
                &Evaluators::new().with(Contains::text("absent")),
            )
            .await
            .unwrap();
        let saved = assert_made_hidden(&[secret], &report);
        assert_hidden(&secret[..12], &saved, "the saved report");
    }
}

#[tokio::test]
async fn a_rescored_report_is_redacted() {
    let secret = "sk-rescored-8064d3f79a1c5e2b";
    register(&[secret]);
    // A report of an older version of this crate: nothing redacted.
    let mut older = report_with(secret);
    older.cases.truncate(1);
    older.evaluators.clear();
    older.cases[0].scores.clear();
    let evaluators = Evaluators::<Value, Value, Value>::new()
        .with(from_fn(
            format!("quotes {secret}"),
            |case: &harness_evals::EvalCase<'_, Value, Value, Value>| {
                Ok(Score::pass(format!("output {}", case.output)))
            },
        ))
        .with(Contains::text(secret).named("needle"));
    let rescored = Experiment::rescore(&older, &evaluators).await.unwrap();
    assert!(rescored.cases[0].passed(), "{:?}", rescored.cases[0]);
    assert_made_hidden(&[secret], &rescored);
}

#[test]
fn a_dataset_is_saved_without_the_secrets_it_quotes() {
    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Question {
        text: String,
        env: BTreeMap<String, String>,
    }
    let secrets = [
        "sk-dataset-d3f79a1c5e2b8064",
        "sk-dataset-\"quoted\"\\-5e2b8064",
    ];
    register(&secrets);
    for secret in secrets {
        let dataset = Dataset::<Question, String>::new(
            format!("dataset {secret}"),
            [
                Case::new(
                    format!("named {secret}"),
                    Question {
                        text: format!("what is {secret}?"),
                        env: BTreeMap::from([(secret.to_owned(), "set".to_owned())]),
                    },
                )
                .expect(format!("it is {secret}"))
                .tag(secret)
                .meta("env", json!({"vars": [{"value": secret}]}))
                .meta(secret, true),
                Case::new(
                    "plain",
                    Question {
                        text: "nothing secret".to_owned(),
                        env: BTreeMap::new(),
                    },
                ),
            ],
        );
        let dir = tempfile::tempdir().unwrap();
        for file in ["cases.yaml", "cases.jsonl"] {
            let path = dir.path().join(file);
            dataset.save(&path).unwrap();
            let saved = String::from_utf8(std::fs::read(&path).unwrap()).unwrap();
            assert_hidden(secret, &saved, file);
            assert!(saved.contains("[redacted]"), "{file}: {saved}");
            let loaded = Dataset::<Question, String>::load(&path).unwrap();
            assert_eq!(loaded.cases.len(), 2, "{file}");
            assert_eq!(loaded.cases[0].input.text, "what is [redacted]?", "{file}");
            assert_eq!(loaded.cases[1], dataset.cases[1], "{file}");
        }
    }
}

#[tokio::test]
async fn errors_and_debug_output_quote_no_secret() {
    let secret = "sk-errors-debug-1c5e2b8064d3f79a";
    register(&[secret]);
    let mut shown = Vec::new();
    // Two cases of one name.
    let twice = Dataset::<String, String>::new(
        "d",
        [
            Case::new(format!("dup {secret}"), "a".to_owned()),
            Case::new(format!("dup {secret}"), "b".to_owned()),
        ],
    );
    let error = Experiment::new("e")
        .progress(Progress::Off)
        .run(&twice, &task_fn(echo), &Evaluators::new())
        .await
        .unwrap_err();
    shown.push(error.to_string());
    // Two evaluators of one name.
    let error = Experiment::new("e")
        .progress(Progress::Off)
        .run(
            &Dataset::<String, String>::new("d", [Case::new("a", "a".to_owned())]),
            &task_fn(echo),
            &Evaluators::new()
                .with(Contains::text("a").named(format!("twice {secret}")))
                .with(Contains::text("b").named(format!("twice {secret}"))),
        )
        .await
        .unwrap_err();
    shown.push(error.to_string());
    // Files that do not read, quoting the secret where they fail.
    shown.push(
        Dataset::<String, String>::from_yaml(&format!("name: d\ncases: {secret}\n"), "d.yaml")
            .unwrap_err()
            .to_string(),
    );
    shown.push(
        Dataset::<i64, String>::from_json_lines(
            "d",
            &format!("{{\"name\": \"a\", \"input\": \"{secret}\"}}\n"),
            "d.jsonl",
        )
        .unwrap_err()
        .to_string(),
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.json");
    std::fs::write(&path, format!("{{\"version\": \"{secret}\"}}")).unwrap();
    shown.push(Report::load(&path).unwrap_err().to_string());
    // A recorded value that does not read as the type given.
    let mut report = report_with(secret);
    report.cases[0].input = json!(secret);
    let error = Experiment::rescore::<i64, Value, Value>(&report, &Evaluators::new())
        .await
        .unwrap_err();
    shown.push(error.to_string());
    // A replay of a case the report does not have.
    let error = Experiment::new("e")
        .progress(Progress::Off)
        .replay(
            &Dataset::<String, String>::new("d", [Case::new(format!("new {secret}"), "a".into())]),
            &report,
            &task_fn(echo),
            &Evaluators::new(),
        )
        .await
        .unwrap_err();
    shown.push(error.to_string());
    // Debug output.
    shown.push(format!("{:?}", Experiment::new(format!("named {secret}"))));
    let judge = Judge::new(Arc::new(ScriptedModel::new([])), format!("Is it {secret}?"))
        .named(format!("judge {secret}"));
    shown.push(format!("{judge:?}"));
    let seen = Arc::new(Mutex::new(String::new()));
    let saw = Arc::clone(&seen);
    Experiment::new(format!("cx {secret}"))
        .progress(Progress::Off)
        .run(
            &Dataset::<String, String>::new("d", [Case::new(format!("case {secret}"), "a".into())]),
            &task_fn(move |_: String, cx: CaseCx| {
                let saw = Arc::clone(&saw);
                async move {
                    *saw.lock().unwrap() = format!("{cx:?}");
                    Ok::<_, TaskError>(String::new())
                }
            }),
            &Evaluators::new(),
        )
        .await
        .unwrap();
    shown.push(seen.lock().unwrap().clone());
    for text in &shown {
        assert!(!text.is_empty());
        assert_hidden(secret, text, "an error or a Debug output");
    }
}

/// Every span's attributes and every event's fields, as text.
#[derive(Clone, Default)]
struct Traced(Arc<Mutex<Vec<String>>>);

struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!("{}={value:?} ", field.name()));
    }
}

impl tracing::Subscriber for Traced {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let mut fields = Fields(String::new());
        span.record(&mut fields);
        self.0.lock().unwrap().push(fields.0);
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        let mut fields = Fields(String::new());
        values.record(&mut fields);
        self.0.lock().unwrap().push(fields.0);
    }
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut fields = Fields(String::new());
        event.record(&mut fields);
        self.0.lock().unwrap().push(fields.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// A model that is rate limited once, then answers.
#[derive(Default)]
struct LimitedOnce(Mutex<bool>);

#[async_trait]
impl LanguageModel for LimitedOnce {
    async fn complete(&self, _: &ModelRequest) -> Result<ModelResponse, ModelError> {
        let mut limited = self.0.lock().unwrap();
        if *limited {
            return Ok(ModelResponse::from_text("fine"));
        }
        *limited = true;
        Err(ModelError::RateLimited {
            retry_after: None,
            message: "slow down".into(),
        })
    }

    async fn stream(&self, request: &ModelRequest) -> Result<ModelStream, ModelError> {
        Ok(self.complete(request).await?.into_stream())
    }

    fn provider(&self) -> &str {
        "limited"
    }

    fn model_name(&self) -> &str {
        "limited"
    }
}

#[tokio::test]
async fn spans_and_log_lines_name_no_secret() {
    let secrets = ["sk-traced-2b8064d3f79a1c5e", "sk-traced-\"q\"-64d3f79a1c5e"];
    register(&secrets);
    for secret in secrets {
        let traced = Traced::default();
        let _guard = tracing::subscriber::set_default(traced.clone());
        let task = task_fn(|question: String, cx: CaseCx| async move {
            let response = cx
                .model()
                .complete(&ModelRequest::builder().user(question).build())
                .await?;
            Ok::<_, TaskError>(response.text())
        });
        let report = Experiment::new(format!("experiment {secret}"))
            .model(Arc::new(LimitedOnce::default()))
            .retries(1, Duration::from_millis(1))
            .progress(Progress::Off)
            .run(
                &Dataset::<String, String>::new(
                    "d",
                    [Case::new(format!("case {secret}"), "hi".into())],
                ),
                &task,
                &Evaluators::new(),
            )
            .await
            .unwrap();
        assert_eq!(report.cases[0].record.metrics.attempts, 2);
        let lines = traced.0.lock().unwrap().clone();
        assert!(
            lines.iter().any(|l| l.contains("transient model error")),
            "{lines:?}"
        );
        assert!(
            lines.iter().any(|l| l.contains("eval case [redacted]")),
            "{lines:?}"
        );
        for line in &lines {
            assert_hidden(secret, line, "a span or a log line");
        }
    }
}

#[test]
fn the_command_prints_no_secret_of_its_environment() {
    // Reports written by an older version: nothing redacted in the files.
    let secret = "sk-command-env-64d3f79a1c5e2b80";
    let dir = tempfile::tempdir().unwrap();
    let mut worse = report_with(secret);
    for case in &mut worse.cases {
        case.scores.clear();
    }
    for (file, report) in [("a.json", report_with(secret)), ("b.json", worse)] {
        std::fs::write(
            dir.path().join(file),
            serde_json::to_string(&report).unwrap(),
        )
        .unwrap();
    }
    std::fs::write(
        dir.path().join("bad.json"),
        format!("{{\"version\": \"{secret}\"}}"),
    )
    .unwrap();
    for args in [
        &["show", "a.json"][..],
        &["compare", "a.json", "b.json"],
        &["compare", "a.json", "b.json", "--json"],
        &["side-by-side", "a.json", "b.json"],
        &["show", "bad.json"],
    ] {
        // The command knows the secret from its environment, by the
        // variable's name.
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_harness-evals"))
            .args(args)
            .current_dir(dir.path())
            .env("HARNESS_EVALS_TEST_TOKEN", secret)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stdout.is_empty() || !stderr.is_empty(), "{args:?}");
        assert_hidden(secret, &stdout, &format!("{args:?}: stdout"));
        assert_hidden(secret, &stderr, &format!("{args:?}: stderr"));
    }
}

/// A secret in a file's path (a directory named after a key, a token in a
/// path) is in no error about that file: reading, writing or parsing a
/// dataset or a report, whichever the error.
#[test]
fn a_secret_in_a_files_path_is_in_no_error_about_it() {
    let secret = "sk-in-a-path-4f8e2a9c7b1d3e56";
    register(&[secret]);
    let dir = tempfile::tempdir().unwrap();
    let secret_dir = dir.path().join(format!("keys-{secret}"));
    let mut errors: Vec<(String, String)> = Vec::new();
    let mut shown = |what: &str, error: &dyn std::fmt::Display| {
        errors.push((what.to_owned(), error.to_string()));
    };
    // Absent files, in a directory that does not exist.
    let absent = secret_dir.join("cases.yaml");
    shown(
        "reading an absent dataset",
        &Dataset::<String, String>::load(&absent).unwrap_err(),
    );
    shown(
        "reading an absent report",
        &Report::load(secret_dir.join("r.json")).unwrap_err(),
    );
    // Writing where a directory cannot be made.
    std::fs::write(dir.path().join("file"), b"x").unwrap();
    let under_file = dir.path().join("file").join(format!("{secret}.json"));
    // Files that do not read as what they should.
    std::fs::create_dir_all(&secret_dir).unwrap();
    let bad_yaml = secret_dir.join("bad.yaml");
    std::fs::write(&bad_yaml, "cases: [").unwrap();
    shown(
        "parsing a bad YAML dataset",
        &Dataset::<String, String>::load(&bad_yaml).unwrap_err(),
    );
    let bad_lines = secret_dir.join("bad.jsonl");
    std::fs::write(&bad_lines, "{not json}\n").unwrap();
    shown(
        "parsing a bad JSON Lines dataset",
        &Dataset::<String, String>::load(&bad_lines).unwrap_err(),
    );
    let unknown = secret_dir.join("cases.txt");
    std::fs::write(&unknown, "x").unwrap();
    shown(
        "a dataset of an unknown format",
        &Dataset::<String, String>::load(&unknown).unwrap_err(),
    );
    let bad_report = secret_dir.join("report.json");
    std::fs::write(&bad_report, "{}").unwrap();
    shown(
        "parsing a bad report",
        &Report::load(&bad_report).unwrap_err(),
    );
    let dataset = Dataset::new(
        "cases",
        vec![Case::new("one", "in".to_owned()).expect("out".to_owned())],
    );
    shown(
        "saving a dataset under a file",
        &dataset.save(under_file.with_extension("yaml")).unwrap_err(),
    );
    assert!(errors.len() >= 7);
    for (what, text) in &errors {
        assert!(
            text.contains("keys-") || text.contains("file"),
            "{what}: names the file: {text}"
        );
        assert_hidden(secret, text, what);
    }
}

#[tokio::test]
async fn a_secret_split_across_streamed_deltas_is_in_no_saved_report_and_replays() {
    use futures::StreamExt;
    use harness::llm::{StopReason, StreamEvent, Usage, collect_stream};
    let key = "sk-split-stream-4c8e1a7f3b9d2605";
    register(&[key]);
    let (a, b) = key.split_at(key.len() / 2);
    let (x, rest) = key.split_at(7);
    let (y, z) = rest.split_at(11);
    let two = vec![
        StreamEvent::text(format!("the key is {a}")),
        StreamEvent::text(format!("{b}.")),
        StreamEvent::finish(StopReason::EndTurn),
    ];
    let three = vec![
        StreamEvent::text("first "),
        StreamEvent::text(format!("then {x}")),
        StreamEvent::Usage(Usage::default()),
        StreamEvent::text(y),
        StreamEvent::text(format!("{z} and after")),
        StreamEvent::text(" the end"),
        StreamEvent::finish(StopReason::EndTurn),
    ];
    // A tool call under way between the two pieces: the reader's text goes
    // on across its deltas (as `StreamCollector` joins it).
    let around_a_call = vec![
        StreamEvent::ToolCallStart {
            index: 0,
            id: "c1".into(),
            name: "look".into(),
        },
        StreamEvent::text(format!("the key is {a}")),
        StreamEvent::ToolCallDelta {
            index: 0,
            arguments: "{}".into(),
        },
        StreamEvent::text(format!("{b}.")),
        StreamEvent::ToolCallEnd {
            index: 0,
            call: harness::llm::ToolCall::new("c1", "look", json!({})),
        },
        StreamEvent::finish(StopReason::EndTurn),
    ];
    for (events, halves, said) in [
        (two, vec![a, b], "the key is [redacted]."),
        (around_a_call, vec![a, b], "the key is [redacted]."),
        (
            three,
            vec![x, y, z],
            "first then [redacted] and after the end",
        ),
    ] {
        let model = Arc::new(ScriptedModel::new([Expect::any().stream(events)]));
        let task = task_fn(|q: String, cx: CaseCx| async move {
            let request = ModelRequest::builder().user(q).build();
            let stream = cx.model().stream(&request).await?;
            let response = collect_stream(stream.map(|e| e)).await?;
            Ok::<_, TaskError>(response.text())
        });
        let dataset = Dataset::<String, String>::new("d", [Case::new("stream", "q".to_owned())]);
        let report = Experiment::new("split")
            .model(model)
            .progress(Progress::Off)
            .run(&dataset, &task, &Evaluators::new())
            .await
            .unwrap();
        let mut shown = vec![key];
        shown.extend(halves.iter().copied().filter(|h| h.len() >= 8));
        let saved = assert_made_hidden(&shown, &report);
        for half in &halves {
            assert!(!saved.contains(half), "{half:?} in\n{saved}");
        }
        let record = saved_record(&saved, 0);
        assert_eq!(record["withheld"], Value::Null, "{saved}");
        assert_eq!(report.cases[0].output, Some(json!(said)), "{saved}");
        // The recorded deltas join into the redacted text: the report
        // replays, and answers the same.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.json");
        report.save(&path).unwrap();
        let loaded = Report::load(&path).unwrap();
        let replayed = Experiment::new("again")
            .progress(Progress::Off)
            .replay(&dataset, &loaded, &task, &Evaluators::new())
            .await
            .unwrap();
        assert_eq!(replayed.cases[0].failure, None, "{:?}", replayed.cases[0]);
        assert_eq!(replayed.cases[0].output, Some(json!(said)));
    }
}

#[test]
fn a_yaml_error_shows_no_run_of_a_key_cropped_by_the_parsers_snippet() {
    let key = "sk-yaml-crop-SECRET8e4b2d61";
    register(&[key]);
    // A key at several offsets in a long value of the wrong type: the
    // parser's snippet crops the line at a width, wherever the key is.
    for pad in [0, 20, 38, 41, 42, 45, 50, 55, 60, 80] {
        let text = format!(
            "name: d\ncases:\n  - name: a\n    input: \"{}{key}{}\"\n",
            "A".repeat(pad),
            "B".repeat(50)
        );
        let message = match Dataset::<u32, String>::from_yaml(&text, "crop.yaml") {
            Ok(d) => panic!("read {d:?}"),
            Err(e) => format!("{e} {e:?}"),
        };
        for start in 0..=key.len() - 8 {
            let run = &key[start..start + 8];
            assert!(
                !message.contains(run),
                "pad {pad}: {run:?} of the key in {message}"
            );
        }
        // Still says where.
        assert!(message.contains('4'), "the line: {message}");
    }
}
