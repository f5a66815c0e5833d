//! Every built-in evaluator, with outputs that pass and outputs that fail.

use std::time::Duration;

use harness::llm::Usage;
use harness_evals::{
    Budget, CaseRecord, Contains, Equals, EvalCase, EvalError, Evaluator, FieldMatch,
    JsonSchemaValid, Matches, NumericTolerance, Score, from_fn,
};
use serde_json::{Value, json};

type Eval = dyn Evaluator<Value, Value, Value>;

async fn score(
    evaluator: &Eval,
    expected: Option<Value>,
    output: Value,
) -> Result<Score, EvalError> {
    score_with(evaluator, expected, output, &CaseRecord::default()).await
}

async fn score_with(
    evaluator: &Eval,
    expected: Option<Value>,
    output: Value,
    record: &CaseRecord,
) -> Result<Score, EvalError> {
    let input = json!("the input");
    let case = EvalCase::new("case-1", &input, expected.as_ref(), &output, record);
    evaluator.evaluate(&case).await
}

async fn passes(evaluator: &Eval, expected: Option<Value>, output: Value) -> bool {
    let s = score(evaluator, expected.clone(), output.clone()).await;
    let s = s.unwrap_or_else(|e| panic!("{}: {e}", evaluator.name()));
    assert_eq!(s.value, if s.passed { 1.0 } else { 0.0 }, "{s:?}");
    assert!(!s.reason.is_empty(), "a reason is given: {s:?}");
    s.passed
}

#[tokio::test]
async fn equals_compares_json() {
    let e = Equals::expected();
    assert!(passes(&e, Some(json!({"a": [1, 2]})), json!({"a": [1, 2]})).await);
    assert!(!passes(&e, Some(json!({"a": [1, 2]})), json!({"a": [2, 1]})).await);
    assert!(!passes(&e, Some(json!("5")), json!(5)).await);
    assert!(passes(&Equals::value("ok"), None, json!("ok")).await);
    assert!(!passes(&Equals::value("ok"), None, json!("OK")).await);
    // No expected output to compare with: an error, not a failure.
    assert!(matches!(
        score(&e, None, json!(1)).await,
        Err(EvalError::NoExpected { .. })
    ));
}

#[tokio::test]
async fn contains_looks_in_the_output_text() {
    assert!(passes(&Contains::text("Paris"), None, json!("It is Paris.")).await);
    assert!(!passes(&Contains::text("Paris"), None, json!("It is paris.")).await);
    assert!(
        passes(
            &Contains::text("Paris").ignore_case(),
            None,
            json!("It is PARIS.")
        )
        .await
    );
    assert!(
        passes(
            &Contains::expected(),
            Some(json!("Tokyo")),
            json!("Tokyo, Japan")
        )
        .await
    );
    assert!(!passes(&Contains::expected(), Some(json!("Tokyo")), json!("Kyoto")).await);
    // A structured output is searched as its JSON text.
    assert!(
        passes(
            &Contains::text("\"city\":\"Oslo\""),
            None,
            json!({"city": "Oslo"})
        )
        .await
    );
}

#[tokio::test]
async fn matches_uses_a_regex_and_refuses_a_bad_one() {
    let m = Matches::new(r"^\d{4}-\d{2}-\d{2}$").unwrap();
    assert!(passes(&m, None, json!("2026-11-26")).await);
    assert!(!passes(&m, None, json!("26/11/2026")).await);
    assert!(!passes(&m, None, json!("2026-11-26 and more")).await);
    for bad in ["(", "[a-", "x{2,1}"] {
        assert!(
            matches!(Matches::new(bad), Err(EvalError::Config { .. })),
            "{bad}"
        );
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct Reply {
    city: String,
    population: u64,
}

#[tokio::test]
async fn json_schema_valid_checks_structure() {
    let v = JsonSchemaValid::of::<Reply>().unwrap();
    assert!(passes(&v, None, json!({"city": "Oslo", "population": 700000})).await);
    assert!(!passes(&v, None, json!({"city": "Oslo"})).await);
    assert!(!passes(&v, None, json!({"city": "Oslo", "population": -1})).await);
    assert!(!passes(&v, None, json!("{\"city\": \"Oslo\", \"population\": 1}")).await);
    // A model's text answer, parsed first.
    let text = JsonSchemaValid::of::<Reply>()
        .unwrap()
        .parse_text()
        .named("json_schema text");
    assert!(
        passes(
            &text,
            None,
            json!("{\"city\": \"Oslo\", \"population\": 1}")
        )
        .await
    );
    assert!(!passes(&text, None, json!("Oslo has 700k people")).await);
    let failed = score(&text, None, json!({"city": 3, "population": 1}))
        .await
        .unwrap();
    assert!(
        failed.reason.contains("/city"),
        "the reason names where: {}",
        failed.reason
    );
    // A schema that is not one.
    assert!(matches!(
        JsonSchemaValid::new(&json!({"type": "no-such-type"})),
        Err(EvalError::Config { .. })
    ));
    assert!(JsonSchemaValid::new(&json!({"minimum": "five"})).is_err());
}

#[tokio::test]
async fn field_match_compares_one_field() {
    let f = FieldMatch::new("/answer/city");
    let expected = json!({"answer": {"city": "Oslo", "country": "Norway"}});
    assert!(
        passes(
            &f,
            Some(expected.clone()),
            json!({"answer": {"city": "Oslo", "country": "Sweden"}})
        )
        .await
    );
    assert!(
        !passes(
            &f,
            Some(expected.clone()),
            json!({"answer": {"city": "Bergen"}})
        )
        .await
    );
    assert!(!passes(&f, Some(expected.clone()), json!({"answer": {}})).await);
    let constant = FieldMatch::new("/status").equals("ok");
    assert!(passes(&constant, None, json!({"status": "ok"})).await);
    assert!(!passes(&constant, None, json!({"status": "error"})).await);
    let elsewhere = FieldMatch::new("/city").expected_at("/answer/city");
    assert!(passes(&elsewhere, Some(expected.clone()), json!({"city": "Oslo"})).await);
    // The expected output lacks the field: the evaluator cannot score.
    assert!(matches!(
        score(
            &FieldMatch::new("/nope"),
            Some(expected),
            json!({"nope": 1})
        )
        .await,
        Err(EvalError::Value { .. })
    ));
}

#[tokio::test]
async fn numeric_tolerance_reads_numbers_and_text() {
    let n = NumericTolerance::new(0.01);
    assert!(passes(&n, Some(json!(1.23456)), json!(1.235)).await);
    assert!(!passes(&n, Some(json!(1.23456)), json!(1.3)).await);
    assert!(passes(&n, Some(json!(84)), json!("12 × 7 = 84")).await);
    assert!(!passes(&n, Some(json!(84)), json!("12 × 7 = 82")).await);
    assert!(!passes(&n, Some(json!(84)), json!("I cannot compute that")).await);
    assert!(passes(&n, Some(json!("84")), json!(84)).await);
    let relative = NumericTolerance::new(0.0).relative(0.1);
    assert!(passes(&relative, Some(json!(1000)), json!(1090)).await);
    assert!(!passes(&relative, Some(json!(1000)), json!(1110)).await);
    let field = NumericTolerance::new(0.5).at("/total");
    assert!(passes(&field, Some(json!({"total": 10})), json!({"total": 10.4})).await);
    assert!(!passes(&field, Some(json!({"total": 10})), json!({"sum": 10})).await);
    // An expected value that is no number cannot be scored.
    assert!(matches!(
        score(&n, Some(json!({"a": 1})), json!(1)).await,
        Err(EvalError::Value { .. })
    ));
}

#[tokio::test]
async fn budget_checks_the_record() {
    let mut record = CaseRecord::default();
    record.metrics.latency_ms = 120.0;
    record.metrics.model_calls = 3;
    record.metrics.usage = Usage::new(900, 100);
    let run = |budget: Budget, record: CaseRecord| async move {
        score_with(&budget, None, json!(null), &record).await
    };
    let ok = run(
        Budget::new()
            .max_latency(Duration::from_millis(200))
            .max_tokens(1000)
            .max_model_calls(3),
        record.clone(),
    )
    .await
    .unwrap();
    assert!(ok.passed, "{ok:?}");
    for budget in [
        Budget::new().max_latency(Duration::from_millis(100)),
        Budget::new().max_tokens(999),
        Budget::new().max_model_calls(2),
    ] {
        let s = run(budget, record.clone()).await.unwrap();
        assert!(!s.passed && s.reason.starts_with("over:"), "{s:?}");
    }
    // Cost: unknown without prices, then checked.
    assert!(
        run(Budget::new().max_cost(0.01), record.clone())
            .await
            .is_err()
    );
    record.metrics.cost = Some(0.02);
    assert!(
        !run(Budget::new().max_cost(0.01), record.clone())
            .await
            .unwrap()
            .passed
    );
    assert!(
        run(Budget::new().max_cost(0.05), record)
            .await
            .unwrap()
            .passed
    );
}

#[tokio::test]
async fn closures_are_evaluators() {
    let short = from_fn("short", |case: &EvalCase<'_, Value, Value, Value>| {
        let n = case.output.as_str().map_or(0, str::len);
        Ok(Score::graded(
            1.0 - n as f64 / 20.0,
            0.5,
            format!("{n} chars"),
        ))
    });
    let s = score(&short, None, json!("12345")).await.unwrap();
    assert!(s.passed && (s.value - 0.75).abs() < 1e-9, "{s:?}");
    let s = score(&short, None, json!("a long answer, too long"))
        .await
        .unwrap();
    assert!(!s.passed && s.value == 0.0, "{s:?}");
}

#[tokio::test]
async fn equals_compares_integers_exactly_and_shows_them_exactly() {
    let e = Equals::expected();
    // Distinct integers that are the same f64.
    for (want, got) in [
        (
            json!(9_007_199_254_740_993_u64),
            json!(9_007_199_254_740_992_u64),
        ),
        (json!(u64::MAX), json!(u64::MAX - 1)),
        (json!(i64::MIN + 1), json!(i64::MIN)),
        (
            json!([1, 9_007_199_254_740_993_i64]),
            json!([1, 9_007_199_254_740_992_i64]),
        ),
        (
            json!({"id": 9_007_199_254_740_993_u64}),
            json!({"id": 9_007_199_254_740_992.0}),
        ),
    ] {
        let s = score(&e, Some(want.clone()), got.clone()).await.unwrap();
        assert!(!s.passed, "{got} is not {want}");
        assert_eq!(s.reason, format!("got {got}, want {want}"));
    }
    let s = score(
        &e,
        Some(json!(9_007_199_254_740_993_u64)),
        json!(9_007_199_254_740_992_u64),
    )
    .await
    .unwrap();
    assert_eq!(s.reason, "got 9007199254740992, want 9007199254740993");
    // Equal values, however written: an integer and the same float too.
    for (want, got) in [
        (
            json!(9_007_199_254_740_993_u64),
            json!(9_007_199_254_740_993_i64),
        ),
        (json!(u64::MAX), json!(u64::MAX)),
        (json!(1), json!(1.0)),
        (json!(-7.0), json!(-7)),
        (json!({"n": [2, 0.5]}), json!({"n": [2.0, 0.5]})),
    ] {
        assert!(
            passes(&e, Some(want.clone()), got.clone()).await,
            "{got} is {want}"
        );
    }
    assert!(!passes(&e, Some(json!(1)), json!(1.5)).await);
    // A field compares the same way.
    let field = FieldMatch::new("/id");
    assert!(
        !passes(
            &field,
            Some(json!({"id": 9_007_199_254_740_993_u64})),
            json!({"id": 9_007_199_254_740_992_u64})
        )
        .await
    );
}

#[tokio::test]
async fn numeric_tolerance_reads_the_last_number_written_in_text() {
    let n = NumericTolerance::new(0.0);
    for (text, number) in [
        ("pages 10-12", 12.0),
        ("on 2026-11-29", 29.0),
        ("the point (3,4)", 4.0),
        ("1,5", 5.0),
        ("6.02e23", 6.02e23),
        ("about 1e3", 1000.0),
        ("v1.2.3", 3.0),
        ("x = -3", -3.0),
        ("1,234,567", 1_234_567.0),
        ("1E-3", 0.001),
        ("+5", 5.0),
        (".5", 0.5),
        ("5.", 5.0),
        ("-0", 0.0),
    ] {
        let s = score(&n, Some(json!(number)), json!(text)).await.unwrap();
        assert!(s.passed, "{text:?} reads {number}: {}", s.reason);
        // And no other number.
        let other = number * 2.0 + 1.0;
        let off = score(&n, Some(json!(other)), json!(text)).await.unwrap();
        assert!(!off.passed, "{text:?}: {}", off.reason);
    }
}

#[tokio::test]
async fn numeric_tolerance_compares_large_integers_exactly() {
    let exact = NumericTolerance::new(0.0);
    let one = NumericTolerance::new(1.0);
    let want = json!(9_007_199_254_740_992_u64);
    for (output, passes_exact, passes_one) in [
        (json!("the id is 9007199254740992"), true, true),
        (json!("the id is 9007199254740993"), false, true),
        (json!(9_007_199_254_740_993_u64), false, true),
        (json!("9,007,199,254,740,994"), false, false),
        (json!(9.007_199_254_740_992e15), true, true),
    ] {
        let s = score(&exact, Some(want.clone()), output.clone())
            .await
            .unwrap();
        assert_eq!(s.passed, passes_exact, "{output} ± 0: {}", s.reason);
        let s = score(&one, Some(want.clone()), output.clone())
            .await
            .unwrap();
        assert_eq!(s.passed, passes_one, "{output} ± 1: {}", s.reason);
    }
    // The reason shows each number as written.
    let s = score(&exact, Some(want), json!("9007199254740993"))
        .await
        .unwrap();
    assert!(
        s.reason
            .contains("got 9007199254740993, want 9007199254740992"),
        "{}",
        s.reason
    );
}
