//! Tool-call and step trajectories in each mode, with argument matchers.

use harness_evals::{EvalCase, Evaluator, Match, StepTrajectory, ToolTrajectory, call};
use serde_json::{Value, json};

use crate::record;

async fn passed(
    evaluator: &dyn Evaluator<Value, Value, Value>,
    expected: Option<Value>,
    record: &harness_evals::CaseRecord,
) -> bool {
    let input = json!(null);
    let output = json!("done");
    let case = EvalCase::new("t", &input, expected.as_ref(), &output, record);
    let score = evaluator.evaluate(&case).await.expect("scored");
    assert!(!score.reason.is_empty());
    score.passed
}

#[tokio::test]
async fn tool_trajectories_in_every_mode() {
    let run = record(
        &[
            ("search", json!({"q": "oslo", "n": 3})),
            ("weather", json!({"city": "Oslo"})),
        ],
        &[],
    );
    let search = || call("search").args(json!({"q": "oslo", "n": 3}));
    let weather = || call("weather");
    let book = || call("book");
    // (mode, reference, passes)
    let table: Vec<(Match, Vec<harness_evals::ExpectedCall>, bool)> = vec![
        (Match::Strict, vec![search(), weather()], true),
        (Match::Strict, vec![weather(), search()], false),
        (Match::Strict, vec![search()], false),
        (Match::Strict, vec![search(), weather(), book()], false),
        (Match::Unordered, vec![weather(), search()], true),
        (Match::Unordered, vec![weather()], false),
        (Match::Unordered, vec![weather(), search(), book()], false),
        (Match::Subset, vec![weather(), search(), book()], true),
        (Match::Subset, vec![weather()], false),
        (Match::Superset, vec![weather()], true),
        (Match::Superset, vec![book()], false),
        (Match::Superset, vec![weather(), weather()], false),
    ];
    for (i, (mode, reference, want)) in table.into_iter().enumerate() {
        let t = ToolTrajectory::new(mode, reference);
        assert_eq!(passed(&t, None, &run).await, want, "row {i} ({mode})");
    }
}

#[tokio::test]
async fn argument_matchers() {
    let run = record(
        &[("search", json!({"q": "oslo", "n": 3, "lang": "en"}))],
        &[],
    );
    let cases = [
        (call("search"), true),
        (
            call("search").args(json!({"q": "oslo", "n": 3, "lang": "en"})),
            true,
        ),
        (call("search").args(json!({"q": "oslo"})), false),
        (call("search").args_contain(json!({"q": "oslo"})), true),
        (call("search").args_contain(json!({"q": "bergen"})), false),
        (
            call("search").args_check(|a| a["n"].as_u64() == Some(3)),
            true,
        ),
        (
            call("search").args_check(|a| a["n"].as_u64() > Some(3)),
            false,
        ),
        (call("find"), false),
    ];
    for (i, (reference, want)) in cases.into_iter().enumerate() {
        let t = ToolTrajectory::new(Match::Strict, [reference]);
        assert_eq!(passed(&t, None, &run).await, want, "matcher {i}");
    }
}

#[tokio::test]
async fn a_reference_where_one_call_fits_two_needs_a_matching_not_a_greedy_pass() {
    // Reference A accepts either call, reference B only the first: a greedy
    // pass that gives A the first call would fail.
    let run = record(
        &[("search", json!({"q": "a"})), ("search", json!({"q": "b"}))],
        &[],
    );
    let t = ToolTrajectory::new(
        Match::Unordered,
        [call("search"), call("search").args(json!({"q": "a"}))],
    );
    assert!(passed(&t, None, &run).await);
}

#[tokio::test]
async fn a_reference_read_from_the_expected_output() {
    let run = record(
        &[
            ("add", json!({"a": 2, "b": 3})),
            ("multiply", json!({"a": 5, "b": 4})),
        ],
        &[],
    );
    let expected = json!({"answer": 20, "tools": [
        {"name": "add", "args": {"a": 2, "b": 3}},
        {"name": "multiply"}
    ]});
    let exact = ToolTrajectory::from_expected(Match::Strict, "/tools");
    assert!(passed(&exact, Some(expected.clone()), &run).await);
    let wrong = json!({"tools": [{"name": "add", "args": {"a": 2}}, {"name": "multiply"}]});
    assert!(!passed(&exact, Some(wrong.clone()), &run).await);
    let contains = ToolTrajectory::from_expected(Match::Strict, "/tools").args_mode_contains();
    assert!(passed(&contains, Some(wrong), &run).await);
    // A malformed reference cannot be scored.
    let input = json!(null);
    let output = json!(null);
    for bad in [
        json!({"tools": 3}),
        json!({"tools": [{"args": {}}]}),
        json!({}),
    ] {
        let case = EvalCase::new("t", &input, Some(&bad), &output, &run);
        assert!(exact.evaluate(&case).await.is_err(), "{bad}");
    }
}

#[tokio::test]
async fn step_trajectories_with_task_paths() {
    let run = record(
        &[],
        &["plan", "research#0/search", "research#1/search", "answer"],
    );
    let qualified = ["plan", "research#0/search", "research#1/search", "answer"];
    assert!(passed(&StepTrajectory::new(Match::Strict, qualified), None, &run).await);
    assert!(
        !passed(
            &StepTrajectory::new(Match::Strict, ["plan", "search", "search", "answer"]),
            None,
            &run
        )
        .await
    );
    assert!(
        passed(
            &StepTrajectory::new(Match::Strict, ["plan", "search", "search", "answer"])
                .unqualified(),
            None,
            &run
        )
        .await
    );
    assert!(
        passed(
            &StepTrajectory::new(Match::Superset, ["plan", "answer"]),
            None,
            &run
        )
        .await
    );
    assert!(
        !passed(
            &StepTrajectory::new(Match::Superset, ["plan", "review"]),
            None,
            &run
        )
        .await
    );
    assert!(
        passed(
            &StepTrajectory::new(Match::Subset, qualified.iter().copied().chain(["review"])),
            None,
            &run
        )
        .await
    );
    assert!(!passed(&StepTrajectory::new(Match::Subset, ["plan"]), None, &run).await);
    assert!(
        passed(
            &StepTrajectory::new(
                Match::Unordered,
                ["answer", "research#1/search", "plan", "research#0/search"]
            ),
            None,
            &run
        )
        .await
    );
    let from_expected = StepTrajectory::from_expected(Match::Superset, "/steps");
    assert!(passed(&from_expected, Some(json!({"steps": ["answer"]})), &run).await);
    assert!(!passed(&from_expected, Some(json!({"steps": ["nope"]})), &run).await);
}
