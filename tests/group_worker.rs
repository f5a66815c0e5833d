//! A worker process for the group-commit crash test: many sessions step at
//! once on one store (sled, or the log store), every step durable; each
//! step is reported once its commit is acknowledged.
//!
//! `group_worker STORE_DIR SESSIONS STEPS [sled|log]` (default `sled`)

use futures::StreamExt;
use harness::session::{Durability, SessionConfig, SessionStore};
use harness::{Harness, HarnessState, RunEvent, SessionId, StepResult, create_agent};
use harness_stores::{LogStore, SledStore};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Count {
    #[field(reduce = add)]
    n: u64,
    limit: u64,
}

async fn count(_: Arc<Count>) -> StepResult<CountUpdate> {
    Ok(CountUpdate::new().n(1))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: group_worker STORE_DIR SESSIONS STEPS [sled|log]";
    let (dir, sessions, steps, kind) = match args.as_slice() {
        [_, dir, sessions, steps] => (dir, sessions, steps, "sled"),
        [_, dir, sessions, steps, kind] => (dir, sessions, steps, kind.as_str()),
        _ => return Err(usage.into()),
    };
    let (sessions, steps): (usize, u64) = (sessions.parse()?, steps.parse()?);
    let store: Arc<dyn SessionStore> = match kind {
        "sled" => Arc::new(SledStore::open(dir)?),
        "log" => Arc::new(LogStore::open(dir)?),
        other => return Err(format!("unknown store {other:?}; {usage}").into()),
    };
    let harness = Harness::<Count>::builder()
        .step("count")
        .run(count)
        .route(|s: &Count| if s.n < s.limit { "again" } else { "done" })
        .on("again")
        .to("count")
        .on("done")
        .end()
        .start("count")
        .store(store)
        .session_config(SessionConfig {
            durability: Durability::EveryStep,
            ..SessionConfig::default()
        })
        .build()?;
    let agent = create_agent("group", &harness);
    let mut tasks = Vec::new();
    for i in 0..sessions {
        let run = agent.run_in(
            SessionId::from(format!("s{i}")),
            Count { n: 0, limit: steps },
        );
        let mut events = run.events();
        tasks.push(tokio::spawn(async move {
            while let Some(e) = events.next().await {
                if let RunEvent::StepFinished { index, .. } = e {
                    // Sent once the step's commit is acknowledged: durable.
                    println!("ack s{i} {}", index + 1);
                }
            }
        }));
        tokio::spawn(run);
    }
    for t in tasks {
        t.await?;
    }
    Ok(())
}
