//! A worker process for the `once` crash test: a run whose steps have side
//! effects through `cx.once`, each effect appended (and synced) to a file
//! with its idempotency key. In `start` mode it stops dead at the point
//! named, prints `at POINT` and waits to be killed.
//!
//! `once_worker start|recover STORE_DIR SESSION POINT EFFECTS_FILE`

use harness::session::{SessionConfig, SessionError};
use harness::{Cx, Harness, HarnessState, SessionId, StepResult, create_agent};
use harness_stores::SledStore;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Order {
    #[field(reduce = append)]
    log: Vec<String>,
}

/// Where to stop, and where effects go.
#[derive(harness::Context)]
struct Plan {
    #[slot(fixed)]
    stop_at: Option<String>,
    #[slot(fixed)]
    effects: PathBuf,
}

/// Stops here for good if this is the point to stop at.
async fn point(cx: &Cx<Plan>, name: &str) {
    if cx.stop_at.as_deref() == Some(name) {
        println!("at {name}");
        // The test reads the line; if it cannot, it times out on its own.
        let _ = std::io::stdout().flush();
        std::future::pending::<()>().await;
    }
}

/// The side effect: a line in the effects file, on disk before it returns.
fn effect(cx: &Cx<Plan>, what: &str, key: &str) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&cx.effects)?;
    writeln!(file, "{what} {key} {}", std::process::id())?;
    file.sync_all()
}

async fn pay(cx: Cx<Plan>) -> StepResult<OrderUpdate> {
    let charge_key = cx.idempotency_key("charge");
    let receipt: String = cx
        .try_once("charge", async {
            effect(&cx, "charge", &charge_key)?;
            point(&cx, "charge-done").await;
            Ok::<_, std::io::Error>(format!("charged with {charge_key}"))
        })
        .await?;
    point(&cx, "charge-recorded").await;
    let ship_key = cx.idempotency_key("ship");
    let tracking: String = cx
        .try_once("ship", async {
            effect(&cx, "ship", &ship_key)?;
            point(&cx, "ship-done").await;
            Ok::<_, std::io::Error>(format!("shipped with {ship_key}"))
        })
        .await?;
    point(&cx, "ship-recorded").await;
    Ok(OrderUpdate::new().log(vec![receipt, tracking]))
}

async fn notify(cx: Cx<Plan>) -> StepResult<OrderUpdate> {
    let key = cx.idempotency_key("mail");
    let sent: String = cx
        .try_once("mail", async {
            effect(&cx, "mail", &key)?;
            point(&cx, "mail-done").await;
            Ok::<_, std::io::Error>(format!("mailed with {key}"))
        })
        .await?;
    point(&cx, "mail-recorded").await;
    Ok(OrderUpdate::new().log(vec![sent]))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, mode, dir, session, stop_at, effects] = args.as_slice() else {
        return Err("usage: once_worker start|recover STORE_DIR SESSION POINT EFFECTS_FILE".into());
    };
    let plan = PlanFixed {
        stop_at: (mode == "start").then(|| stop_at.clone()),
        effects: PathBuf::from(effects),
    };
    let harness = Harness::<Order, Plan>::builder_with(plan)
        .step("pay")
        .run(pay)
        .next("notify")
        .step("notify")
        .run(notify)
        .end()
        .start("pay")
        .store(SledStore::open(dir)?)
        .session_config(SessionConfig {
            // The effects sync their file on this one thread, which a busy
            // disk may hold up: the first process keeps its lease through
            // that; the second, alone, waits out the killed one's.
            lease_ttl: if mode == "start" {
                Duration::from_millis(1_500)
            } else {
                Duration::from_secs(30)
            },
            ..SessionConfig::default()
        })
        .build()?;
    let agent = create_agent("orders", &harness);
    let session = SessionId::from(session.as_str());
    let run = match mode.as_str() {
        "start" => agent.run_in(session, Order { log: vec![] }),
        "recover" => loop {
            match agent.recover(&session).await {
                Ok(run) => break run,
                // The killed process's lease has not expired yet.
                Err(SessionError::InFlight(_)) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => return Err(e.into()),
            }
        },
        other => return Err(format!("unknown mode {other}").into()),
    };
    let outcome = run.await?;
    println!("final {}", serde_json::to_string(&outcome.state.log)?);
    Ok(())
}
