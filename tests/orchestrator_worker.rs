//! A worker process for the orchestrator's crash test: runs a plan of six
//! tasks (four independent, two that need others), two at a time, on a
//! sled store, and reports each task once its result is durable.
//!
//! `orchestrator_worker start|recover STORE_DIR SESSION`
//!
//! When recovering, the planner has no answers left: asking it again would
//! fail the run, so a recovery that re-plans is caught.

use futures::StreamExt;
use harness::llm::{Expect, ModelResponse, ScriptedModel};
use harness::session::SessionConfig;
use harness::{Harness, HarnessState, RunEvent, SessionId, create_agent_with};
use harness_recipes::orchestrator::{
    Orchestrator, OrchestratorDepsAgent, OrchestratorState, TaskInput, worker,
};
use harness_stores::SledStore;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

/// A task's work: which task, and the process that did it.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Work {
    task: String,
    done_by: String,
}

const PLAN: &str = r#"{"tasks": [
    {"id": "t0", "agent": "work", "instructions": "zero"},
    {"id": "t1", "agent": "work", "instructions": "one"},
    {"id": "t2", "agent": "work", "instructions": "two"},
    {"id": "t3", "agent": "work", "instructions": "three"},
    {"id": "t4", "agent": "work", "instructions": "four", "needs": ["t0", "t1"]},
    {"id": "t5", "agent": "work", "instructions": "five", "needs": ["t4", "t2", "t3"]}
]}"#;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, mode, dir, session] = args.as_slice() else {
        return Err("usage: orchestrator_worker start|recover STORE_DIR SESSION".into());
    };
    let work = Harness::<Work>::builder()
        .step("work")
        .run(async |w: Arc<Work>| {
            tokio::time::sleep(Duration::from_millis(40)).await;
            Ok(WorkUpdate::new().done_by(format!("{} by {}", w.task, std::process::id())))
        })
        .end()
        .start("work")
        .build()?;
    let harness = Orchestrator::new()
        .role(
            "work",
            "does a task",
            worker(
                &work,
                |t: &TaskInput| Work {
                    task: t.task.id.clone(),
                    done_by: String::new(),
                },
                |_, out| Ok(out.state.done_by),
            ),
        )
        .parallel(2)
        .builder()
        .store(SledStore::open(dir)?)
        .session_config(SessionConfig {
            lease_ttl: Duration::from_millis(1000),
            ..SessionConfig::default()
        })
        .build()?;
    let planner = match mode.as_str() {
        "start" => ScriptedModel::new([Expect::any().reply(ModelResponse::from_text(PLAN))]),
        _ => ScriptedModel::new([]),
    };
    let synthesizer = ScriptedModel::new([Expect::any()
        .last_message_contains("- t5 (work): t5 by ")
        .reply(ModelResponse::from_text("all six done"))]);
    let agent = create_agent_with(
        "orchestrator",
        &harness,
        OrchestratorDepsAgent {
            planner: Arc::new(planner),
            synthesizer: Arc::new(synthesizer),
        },
    );
    let session = SessionId::from(session.as_str());
    let run = match mode.as_str() {
        "start" => agent.run_in(session, OrchestratorState::new("do six things")),
        "recover" => harness_tests::recover_when_free(&agent, &session).await?,
        other => return Err(format!("unknown mode {other}").into()),
    };
    let mut events = run.events();
    let printer = tokio::spawn(async move {
        while let Some(e) = events.next().await {
            if let RunEvent::StepFinished { step, update, .. } = e
                && &*step == "task"
            {
                // Sent after the branch's checkpoint was committed and flushed.
                for (id, result) in update.results.into_iter().flatten() {
                    println!("durable {id} {}", result.output);
                }
            }
        }
    });
    let outcome = run.await?;
    printer.await?;
    let done: Vec<(String, String)> = outcome
        .state
        .results
        .into_iter()
        .map(|(id, r)| (id, r.output))
        .collect();
    println!(
        "final {}",
        serde_json::to_string(&(done, outcome.state.answer, outcome.state.plans))?
    );
    Ok(())
}
