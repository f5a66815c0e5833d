//! A worker process for the crash test: runs a long loop on a sled store and
//! reports each step once its checkpoint is durable.
//!
//! `crash_worker start|recover STORE_DIR SESSION STEPS LEASE_MS [DURABILITY]`,
//! DURABILITY being `every-step` (the default), `every-N` or `at-exit`.

use futures::StreamExt;
use harness::session::{Durability, SessionConfig};
use harness::{Harness, HarnessState, RunEvent, SessionId, StepResult, create_agent};
use harness_stores::SledStore;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

/// Each tick records its number and the process that ran it.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Ticks {
    #[field(reduce = append)]
    ticks: Vec<(u64, u32)>,
    steps: u64,
}

async fn tick(s: Arc<Ticks>) -> StepResult<TicksUpdate> {
    tokio::time::sleep(Duration::from_millis(2)).await;
    Ok(TicksUpdate::new().ticks(vec![(s.ticks.len() as u64 + 1, std::process::id())]))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, mode, dir, session, steps, lease_ms, rest @ ..] = args.as_slice() else {
        return Err(
            "usage: crash_worker start|recover STORE_DIR SESSION STEPS LEASE_MS [DURABILITY]"
                .into(),
        );
    };
    let steps: u64 = steps.parse()?;
    let durability = match rest.first().map(String::as_str) {
        None | Some("every-step") => Durability::EveryStep,
        Some("at-exit") => Durability::AtExit,
        Some(other) => match other.strip_prefix("every-") {
            Some(n) => Durability::EveryN(n.parse()?),
            None => return Err(format!("unknown durability {other}").into()),
        },
    };
    let config = SessionConfig {
        lease_ttl: Duration::from_millis(lease_ms.parse()?),
        durability,
        ..SessionConfig::default()
    };
    let harness = Harness::<Ticks>::builder()
        .step("tick")
        .run(tick)
        .route(|s: &Ticks| {
            if (s.ticks.len() as u64) < s.steps {
                "again"
            } else {
                "done"
            }
        })
        .on("again")
        .to("tick")
        .on("done")
        .end()
        .start("tick")
        .store(SledStore::open(dir)?)
        .session_config(config)
        .build()?;
    let agent = create_agent("crash", &harness);
    let session = SessionId::from(session.as_str());
    let run = match mode.as_str() {
        "start" => agent.run_in(
            session,
            Ticks {
                ticks: vec![],
                steps,
            },
        ),
        "recover" => harness_tests::recover_when_free(&agent, &session).await?,
        other => return Err(format!("unknown mode {other}").into()),
    };
    let mut events = run.events();
    let printer = tokio::spawn(async move {
        while let Some(e) = events.next().await {
            if let RunEvent::StepFinished { index, .. } = e {
                // Sent after the step's checkpoint was committed (and
                // flushed, if the durability mode flushes it).
                println!("durable {}", index + 1);
            }
        }
    });
    let outcome = run.await?;
    printer.await?;
    println!("final {}", serde_json::to_string(&outcome.state.ticks)?);
    Ok(())
}
