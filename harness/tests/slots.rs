//! Slots: every problem reported at once, by name and phase.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use harness::slots::{Phase, SlotProblem};
use harness::{Context, Cx, Harness, HarnessState, Slots, StepResult, create_agent};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct S {
    greeting: String,
}

#[derive(Context)]
struct Deps {
    #[slot(fixed)]
    prefix: String,
    #[slot(agent)]
    name: Arc<str>,
    #[slot(run)]
    punctuation: char,
}

async fn greet(_: Arc<S>, cx: Cx<Deps>) -> StepResult<SUpdate> {
    Ok(SUpdate::new().greeting(format!("{} {}{}", cx.prefix, cx.name, cx.punctuation)))
}

fn harness(fixed: Slots) -> Harness<S, Deps> {
    Harness::<S, Deps>::builder()
        .step("greet")
        .run(greet)
        .route(|_: &S| "done")
        .on("done")
        .end()
        .start("greet")
        .slots(fixed)
        .build()
        .unwrap()
}

#[tokio::test]
async fn steps_read_slots_of_all_three_phases_as_fields() {
    let h = harness(Slots::new().with("prefix", "Hello".to_string()));
    let agent = create_agent(
        "greeter",
        &h,
        Slots::new().with("name", Arc::<str>::from("Ada")),
    )
    .unwrap();
    let out = agent
        .run(S::default(), Slots::new().with("punctuation", '!'))
        .unwrap()
        .await
        .unwrap();
    assert_eq!(out.state.greeting, "Hello Ada!");
}

#[test]
fn missing_slots_of_two_phases_are_named_in_one_error() {
    let h = harness(Slots::new());
    let err = create_agent("greeter", &h, Slots::new()).unwrap_err();
    let missing: Vec<_> = err.missing().collect();
    assert_eq!(missing, [("prefix", Phase::Fixed), ("name", Phase::Agent)]);
    let msg = err.to_string();
    assert!(
        msg.contains("`prefix` (fixed)") && msg.contains("`name` (agent)"),
        "{msg}"
    );
}

#[test]
fn missing_run_slot_is_reported_at_run() {
    let h = harness(Slots::new().with("prefix", "Hi".to_string()));
    let agent = create_agent("a", &h, Slots::new().with("name", Arc::<str>::from("x"))).unwrap();
    let err = agent.run(S::default(), Slots::new()).unwrap_err();
    assert_eq!(
        err.problems,
        vec![SlotProblem::Missing {
            name: "punctuation",
            phase: Phase::Run
        }]
    );
}

#[test]
fn slot_given_in_the_wrong_phase_is_an_error() {
    let h = harness(Slots::new().with("prefix", "Hi".to_string()));
    // `punctuation` is a run slot, given to the agent instead.
    let err = create_agent(
        "a",
        &h,
        Slots::new()
            .with("name", Arc::<str>::from("x"))
            .with("punctuation", '!'),
    )
    .unwrap_err();
    assert_eq!(
        err.problems,
        vec![SlotProblem::WrongPhase {
            name: "punctuation".into(),
            declared: Phase::Run,
            given: Phase::Agent
        }]
    );
    assert!(err.to_string().contains("agent.run"), "{err}");
}

#[test]
fn wrong_type_and_unknown_slots_are_reported_together() {
    let h = harness(Slots::new().with("prefix", "Hi"));
    let err = create_agent(
        "a",
        &h,
        Slots::new()
            .with("name", Arc::<str>::from("x"))
            .with("nmae", 1),
    )
    .unwrap_err();
    assert_eq!(err.problems.len(), 2, "{err}");
    assert!(err.problems.contains(&SlotProblem::WrongType {
        name: "prefix".into(),
        expected: std::any::type_name::<String>(),
        found: std::any::type_name::<&str>(),
    }));
    assert!(err.problems.contains(&SlotProblem::Unknown {
        name: "nmae".into(),
        given: Phase::Agent
    }));
}

#[test]
fn slots_debug_shows_types_not_values() {
    let s = Slots::new().with("api_key", "sk-secret".to_string());
    let shown = format!("{s:?}");
    assert!(
        shown.contains("api_key") && !shown.contains("sk-secret"),
        "{shown}"
    );
}

/// A hand-written context that reads a slot it did not declare.
struct Undeclared {
    _db: String,
}

impl Context for Undeclared {
    fn slots() -> &'static [harness::slots::SlotSpec] {
        &[]
    }

    fn from_slots(source: &harness::slots::SlotSource<'_>) -> Result<Self, harness::SlotError> {
        Ok(Self {
            _db: source.get("db", Phase::Run)?,
        })
    }
}

#[test]
fn a_context_reading_a_slot_nobody_gave_gets_missing_with_its_phase() {
    let h = Harness::<S, Undeclared>::builder()
        .step("noop")
        .run(|_: Arc<S>, _: Cx<Undeclared>| async { Ok(SUpdate::new()) })
        .route(|_: &S| "done")
        .on("done")
        .end()
        .start("noop")
        .build()
        .unwrap();
    let agent = create_agent("a", &h, Slots::new()).unwrap();
    let err = agent.run(S::default(), Slots::new()).unwrap_err();
    assert_eq!(
        err.problems,
        vec![SlotProblem::Missing {
            name: "db",
            phase: Phase::Run
        }]
    );
}
