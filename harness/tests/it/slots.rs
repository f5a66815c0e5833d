//! Slots: typed per phase, given as the structs `#[derive(Context)]`
//! generates, shared or moved into each run's context. What must not
//! compile (a misspelled slot, a wrong type, a missing phase) is in
//! `tests/ui/fail`.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use harness::{
    Context, Cx, Harness, HarnessState, JsonSchema, StepResult, create_agent_with, schemars,
};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
struct S {
    greeting: String,
}

#[derive(Context)]
struct Deps {
    #[slot(fixed)]
    prefix: String,
    #[slot(agent)]
    name: Arc<str>,
    /// Counts the contexts built from the agent slots.
    #[slot(agent)]
    built: Arc<AtomicUsize>,
    #[slot(run)]
    punctuation: char,
}

async fn greet(cx: Cx<Deps>) -> StepResult<SUpdate> {
    cx.built.fetch_add(1, Ordering::SeqCst);
    Ok(SUpdate::new().greeting(format!("{} {}{}", cx.prefix, cx.name, cx.punctuation)))
}

fn harness(prefix: &str) -> Harness<S, Deps> {
    Harness::<S, Deps>::builder_with(DepsFixed {
        prefix: prefix.to_string(),
    })
    .step("greet")
    .run(greet)
    .end()
    .start("greet")
    .build()
    .unwrap()
}

#[tokio::test]
async fn steps_read_slots_of_all_three_phases_as_fields() {
    let built = Arc::new(AtomicUsize::new(0));
    let agent = create_agent_with(
        "greeter",
        &harness("Hello"),
        DepsAgent {
            name: "Ada".into(),
            built: built.clone(),
        },
    );
    let out = agent
        .with(DepsRun { punctuation: '!' })
        .run(S::default())
        .await
        .unwrap();
    assert_eq!(out.state.greeting, "Hello Ada!");
    // Each run gets its own run slots; the agent slots are shared, not copied
    // deeply: both runs counted on the same counter.
    let out = agent
        .with(DepsRun { punctuation: '?' })
        .run(S::default())
        .await
        .unwrap();
    assert_eq!(out.state.greeting, "Hello Ada?");
    assert_eq!(built.load(Ordering::SeqCst), 2);
}

#[test]
fn assemble_clones_shared_slots_and_moves_run_slots() {
    let fixed = DepsFixed {
        prefix: "Hi".into(),
    };
    let agent = DepsAgent {
        name: "Bo".into(),
        built: Arc::new(AtomicUsize::new(7)),
    };
    let ctx = Deps::assemble(&fixed, &agent, DepsRun { punctuation: '.' });
    assert_eq!(ctx.prefix, "Hi");
    assert!(Arc::ptr_eq(&ctx.built, &agent.built));
    assert_eq!(ctx.punctuation, '.');
    // The phase structs are still usable: nothing was taken from them.
    assert_eq!(fixed.prefix, "Hi");
}

#[test]
fn slot_structs_debug_names_and_types_but_never_values() {
    #[derive(Context)]
    struct Secrets {
        #[slot(agent)]
        api_key: String,
    }
    let slots = SecretsAgent {
        api_key: "sk-secret".into(),
    };
    assert_eq!(Secrets::assemble(&(), &slots, ()).api_key, "sk-secret");
    let shown = format!("{slots:?}");
    assert!(shown.contains("api_key"), "{shown}");
    assert!(shown.contains("String"), "{shown}");
    assert!(!shown.contains("sk-secret"), "{shown}");
}

#[test]
fn phases_without_slots_are_unit() {
    #[derive(Context)]
    struct OnlyRun {
        #[slot(run)]
        user: u64,
    }
    fn is_unit<T: 'static>() -> bool {
        std::any::TypeId::of::<T>() == std::any::TypeId::of::<()>()
    }
    assert!(is_unit::<<OnlyRun as Context>::Fixed>());
    assert!(is_unit::<<OnlyRun as Context>::Agent>());
    assert!(!is_unit::<<OnlyRun as Context>::Run>());
    let ctx = OnlyRun::assemble(&(), &(), OnlyRunRun { user: 3 });
    assert_eq!(ctx.user, 3);
}

#[test]
fn phase_structs_can_be_renamed() {
    #[derive(Context)]
    #[context(run = PerRequest)]
    struct Renamed {
        #[slot(run)]
        request: u32,
    }
    let ctx = Renamed::assemble(&(), &(), PerRequest { request: 9 });
    assert_eq!(ctx.request, 9);
}
