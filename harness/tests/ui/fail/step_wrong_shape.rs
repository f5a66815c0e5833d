use harness::{Harness, HarnessState, JsonSchema, StepResult, schemars};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
struct S {
    n: u32,
}

// Takes the state by reference: a step gets an `Arc<S>`.
async fn by_reference(_: &S) -> StepResult<SUpdate> {
    Ok(SUpdate::new())
}

// Returns the state, not an update.
async fn returns_state(s: std::sync::Arc<S>) -> StepResult<S> {
    Ok((*s).clone())
}

fn main() {
    let _ = Harness::<S>::builder().step("a").run(by_reference).end();
    let _ = Harness::<S>::builder().step("b").run(returns_state).end();
}
