//! harness-server driven by the real Python `langgraph-sdk` client
//! (`sdk.rs`), and its answers to malformed requests (`errors.rs`).
#![allow(clippy::unwrap_used, missing_docs, unreachable_pub)]

mod errors;
mod sdk;

use harness::{Cx, Harness, HarnessState, JsonSchema, StepResult, create_agent, schemars};
use harness_server::Server;
use harness_stores::SledStore;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

/// A ticket drafted, then reviewed by a human.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
pub struct Ticket {
    #[field(reduce = append)]
    pub log: Vec<String>,
    #[field(reduce = add)]
    pub drafts: u32,
    pub decision: String,
}

/// The answer the review step reads.
#[derive(Debug, Deserialize)]
struct Review {
    approve: bool,
}

async fn draft(ticket: Arc<Ticket>, cx: Cx<()>) -> StepResult<TicketUpdate> {
    cx.emit(
        "progress",
        serde_json::json!({ "drafted": ticket.drafts + 1 }),
    );
    Ok(TicketUpdate::new()
        .log(vec![format!("draft {}", ticket.drafts + 1)])
        .drafts(1))
}

async fn review(ticket: Arc<Ticket>, cx: Cx<()>) -> StepResult<TicketUpdate> {
    let answer: Review = cx.interrupt(serde_json::json!({
        "question": "approve this draft?",
        "drafts": ticket.drafts,
    }))?;
    let decision = if answer.approve {
        "approved"
    } else {
        "rejected"
    };
    Ok(TicketUpdate::new()
        .log(vec![format!("review: {decision}")])
        .decision(decision.to_string()))
}

/// A counter that ticks every 50 ms until `limit`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
pub struct Ticks {
    #[field(reduce = add)]
    pub ticks: u32,
    pub limit: u32,
}

async fn tick(_: Arc<Ticks>, _: Cx<()>) -> StepResult<TicksUpdate> {
    tokio::time::sleep(Duration::from_millis(50)).await;
    Ok(TicksUpdate::new().ticks(1))
}

/// The server of the tests, on a temporary sled store: the `ticket` and
/// `ticks` agents.
pub fn server(dir: &std::path::Path) -> Server {
    let store = Arc::new(SledStore::open(dir.join("store")).unwrap());
    let tickets = Harness::<Ticket>::builder()
        .step("draft")
        .run(draft)
        .next("review")
        .step("review")
        .run(review)
        .end()
        .start("draft")
        .store(Arc::clone(&store))
        .build()
        .unwrap();
    let ticks = Harness::<Ticks>::builder()
        .step("tick")
        .run(tick)
        .route(|t: &Ticks| if t.ticks < t.limit { "again" } else { "done" })
        .on("again")
        .to("tick")
        .on("done")
        .end()
        .start("tick")
        .step_limit(100_000)
        .store(Arc::clone(&store))
        .build()
        .unwrap();
    Server::new()
        .agent(&create_agent("ticket", &tickets), &tickets)
        .agent(&create_agent("ticks", &ticks), &ticks)
        .store(store)
        .body_limit(64 * 1024)
}
