use harness::{Context, Cx, Harness, HarnessState, JsonSchema, StepResult, create_agent, schemars};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
struct S {
    n: u32,
}

#[derive(Context)]
struct Deps {
    #[slot(agent)]
    model: Arc<str>,
    #[slot(run)]
    user: u64,
}

async fn step(_: Cx<Deps>) -> StepResult<SUpdate> {
    Ok(SUpdate::new())
}

fn main() {
    let harness = Harness::<S, Deps>::builder()
        .step("a").run(step).end()
        .start("a")
        .build()
        .unwrap();
    // Agent slots exist: create_agent_with(.., DepsAgent { .. }) is required.
    let agent = create_agent("a", &harness);
    // Run slots exist: agent.with(DepsRun { .. }).run(..) is required.
    let _ = agent.run(S::default());
}
