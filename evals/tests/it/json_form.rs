//! Values a report cannot hold as JSON (a NaN, an infinity, a map whose
//! keys are not strings) are never recorded or scored as `null`: a task's
//! output or a case's input fails its case, naming why; an evaluator
//! reading one gets a typed error.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use harness_evals::{
    Case, CaseFailure, CaseRecord, Contains, Dataset, Equals, EvalCase, EvalError, Evaluator,
    Evaluators, Experiment, FieldMatch, JsonSchemaValid, Judge, Matches, NumericTolerance,
    Progress, Report, Score, TaskError, from_fn, task_fn,
};
use serde::Serialize;
use serde_json::{Value, json};

/// Outputs with and without a JSON form.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
enum Out {
    Number(f64),
    Numbers(Vec<f64>),
    Pairs(BTreeMap<(u8, u8), String>),
    Nested { inner: BTreeMap<String, Vec<f32>> },
    Text(String),
}

fn out(case: &str) -> Out {
    match case {
        "nan" => Out::Number(f64::NAN),
        "infinite" => Out::Numbers(vec![1.0, f64::INFINITY]),
        "tuple-keys" => Out::Pairs(BTreeMap::from([((1, 2), "v".to_owned())])),
        "nested" => Out::Nested {
            inner: BTreeMap::from([("xs".to_owned(), vec![0.5, f32::NEG_INFINITY])]),
        },
        "number" => Out::Number(2.5),
        _ => Out::Text(case.to_owned()),
    }
}

#[tokio::test]
async fn an_output_without_a_json_form_fails_its_case_naming_why() {
    let names = ["nan", "fine", "infinite", "tuple-keys", "nested", "number"];
    let dataset: Dataset<String, String> =
        Dataset::new("d", names.map(|n| Case::new(n, n.to_owned())));
    let task = task_fn(|input: String, _cx| async move { Ok::<_, TaskError>(out(&input)) });
    let scored = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&scored);
    let evaluators = Evaluators::new()
        .with(Equals::value(Value::Null))
        .with(from_fn(
            "seen",
            move |_: &EvalCase<'_, String, String, Out>| {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok(Score::pass("seen"))
            },
        ));
    let report = Experiment::new("outputs")
        .progress(Progress::Off)
        .run(&dataset, &task, &evaluators)
        .await
        .unwrap();
    let failure = |case: &str| match &report.case(case).unwrap().failure {
        Some(CaseFailure::Error(message)) => message.clone(),
        other => panic!("case {case}: {other:?}"),
    };
    for (case, why) in [
        ("nan", "the value is NaN"),
        ("infinite", "the value at `/1` is infinite"),
        (
            "tuple-keys",
            "the value is a map with a key JSON cannot hold",
        ),
        ("nested", "the value at `/inner/xs/1` is infinite"),
    ] {
        let message = failure(case);
        assert!(
            message.starts_with(&format!(
                "case `{case}`: the task's output has no JSON form, so the report cannot hold it \
                 and it was not scored: {why}"
            )),
            "{message}"
        );
        let case = report.case(case).unwrap();
        assert_eq!(case.output, None, "never null");
        assert!(case.scores.is_empty(), "not scored: {case:?}");
    }
    // The others are recorded and scored as usual.
    assert_eq!(report.case("fine").unwrap().output, Some(json!("fine")));
    assert_eq!(report.case("number").unwrap().output, Some(json!(2.5)));
    assert!(!report.case("number").unwrap().scores["equals"].passed());
    assert_eq!(scored.load(Ordering::SeqCst), 2);
    assert_eq!(report.summary().failed, 4);
    let dir = tempfile::tempdir().unwrap();
    report.save(dir.path().join("r.json")).unwrap();
    assert_eq!(Report::load(dir.path().join("r.json")).unwrap(), report);
}

#[tokio::test]
async fn an_input_or_expected_output_without_a_json_form_fails_its_case_unrun() {
    let dataset: Dataset<f64, f64> = Dataset::new(
        "d",
        [
            Case::new("nan-input", f64::NAN).expect(1.0),
            Case::new("fine", 1.0).expect(1.0),
            Case::new("infinite-input", f64::NEG_INFINITY),
            Case::new("infinite-expected", 1.0).expect(f64::INFINITY),
        ],
    );
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    let task = task_fn(move |input: f64, _cx| {
        counted.fetch_add(1, Ordering::SeqCst);
        async move { Ok::<_, TaskError>(input) }
    });
    let report = Experiment::new("inputs")
        .progress(Progress::Off)
        .run(
            &dataset,
            &task,
            &Evaluators::new().with(NumericTolerance::new(0.0)),
        )
        .await
        .unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1, "only `fine` ran");
    assert!(report.case("fine").unwrap().passed());
    for (case, what, why) in [
        ("nan-input", "input", "the value is NaN"),
        ("infinite-input", "input", "the value is infinite"),
        (
            "infinite-expected",
            "expected output",
            "the value is infinite",
        ),
    ] {
        let failure = report.case(case).unwrap().failure.clone();
        assert_eq!(
            failure,
            Some(CaseFailure::Error(format!(
                "case `{case}`: its {what} has no JSON form, so the report cannot hold it; the \
                 task was not run: {why}, which JSON cannot hold"
            ))),
        );
    }
}

type Ev<O> = dyn Evaluator<Value, Value, O>;

async fn evaluate<O: Serialize + Sync>(
    evaluator: &Ev<O>,
    expected: Option<&Value>,
    output: &O,
) -> Result<Score, EvalError> {
    let input = json!("the input");
    let record = CaseRecord::default();
    let case = EvalCase::new("the-case", &input, expected, output, &record);
    evaluator.evaluate(&case).await
}

/// Every built-in evaluator that reads the output, named `name`.
fn readers<O: Serialize + Sync + 'static>() -> Vec<(&'static str, Box<Ev<O>>)> {
    vec![
        ("equals", Box::new(Equals::expected())),
        ("contains", Box::new(Contains::text("x"))),
        ("matches", Box::new(Matches::new("x").unwrap())),
        (
            "json_schema",
            Box::new(JsonSchemaValid::new(&json!({})).unwrap()),
        ),
        ("field /a", Box::new(FieldMatch::new("/a"))),
        ("numeric", Box::new(NumericTolerance::new(0.1).at("/a"))),
    ]
}

async fn assert_no_json<O: Serialize + Sync + 'static>(output: O, why: &str) {
    let expected = json!({"a": 1});
    for (name, evaluator) in readers::<O>() {
        let error = evaluate(evaluator.as_ref(), Some(&expected), &output)
            .await
            .expect_err(name);
        assert_eq!(
            error,
            EvalError::NoJson {
                evaluator: name.to_owned(),
                case: "the-case".to_owned(),
                what: "output",
                message: why.to_owned(),
            }
        );
        assert!(
            error.to_string().starts_with(&format!(
                "evaluator `{name}` cannot read the output of case `the-case` as JSON: "
            )),
            "{error}"
        );
    }
}

#[tokio::test]
async fn evaluators_reading_an_output_without_a_json_form_give_a_typed_error() {
    assert_no_json(f64::NAN, "the value is NaN, which JSON cannot hold").await;
    assert_no_json(
        vec![f64::INFINITY],
        "the value at `/0` is infinite, which JSON cannot hold",
    )
    .await;
    let keys = BTreeMap::from([((1_u8, 2_u8), 3)]);
    let error = evaluate(readers()[0].1.as_ref(), Some(&json!(1)), &keys)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, EvalError::NoJson { what: "output", message, .. }
            if message.starts_with("the value is a map with a key JSON cannot hold")),
        "{error:?}"
    );
    let nested = BTreeMap::from([("a", BTreeMap::from([(vec![1], 1)]))]);
    let error = evaluate(readers()[4].1.as_ref(), Some(&json!({"a": 1})), &nested)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, EvalError::NoJson { message, .. }
            if message.starts_with("the value at `/a` is a map with a key")),
        "{error:?}"
    );
}

#[tokio::test]
async fn an_expected_output_or_a_judged_input_without_a_json_form_is_a_typed_error() {
    // The expected output, through the evaluators that compare with it.
    let output = json!(1.0);
    for expected in [f64::NAN, f64::INFINITY] {
        let input = json!("in");
        let record = CaseRecord::default();
        let case: EvalCase<'_, Value, f64, Value> =
            EvalCase::new("the-case", &input, Some(&expected), &output, &record);
        for evaluator in [
            Box::new(Equals::expected()) as Box<dyn Evaluator<Value, f64, Value>>,
            Box::new(NumericTolerance::new(0.1)),
            Box::new(Contains::expected()),
        ] {
            let error = evaluator.evaluate(&case).await.unwrap_err();
            assert!(
                matches!(&error, EvalError::NoJson { what: "expected output", case, .. }
                    if case == "the-case"),
                "{error:?}"
            );
        }
    }
    // The input, as a judge shows it to its model (which is never asked).
    let model = Arc::new(harness::llm::ScriptedModel::new(Vec::new()));
    let judge = Judge::new(model, "anything");
    for input in [f64::NAN, f64::NEG_INFINITY] {
        let record = CaseRecord::default();
        let output = json!("out");
        let case: EvalCase<'_, f64, Value, Value> =
            EvalCase::new("judged", &input, None, &output, &record);
        let error = judge.evaluate(&case).await.unwrap_err();
        assert!(
            matches!(&error, EvalError::NoJson { what: "input", evaluator, .. } if evaluator == "judge"),
            "{error:?}"
        );
    }
}

#[tokio::test]
async fn a_value_to_compare_with_without_a_json_form_is_a_config_error() {
    let output = json!(null);
    for (evaluator, why) in [
        (
            Box::new(Equals::value(f64::NAN)) as Box<Ev<Value>>,
            "the value is NaN",
        ),
        (
            Box::new(Equals::value(vec![f64::INFINITY]).named("eq")),
            "the value at `/0` is infinite",
        ),
        (
            Box::new(FieldMatch::new("/a").equals(BTreeMap::from([((1, 2), 3)]))),
            "the value is a map with a key",
        ),
    ] {
        let error = evaluate(evaluator.as_ref(), None, &output)
            .await
            .unwrap_err();
        match &error {
            EvalError::Config {
                evaluator: name,
                message,
            } => {
                assert_eq!(name, evaluator.name());
                assert!(
                    message.starts_with(&format!(
                        "the value to compare with has no JSON form: {why}"
                    )),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
    }
}
