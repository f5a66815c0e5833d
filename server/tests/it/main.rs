//! harness-server driven by the real Python `langgraph-sdk` client
//! (`sdk.rs`), its answers to malformed requests (`errors.rs`), and its
//! conformance to the Agent Protocol's OpenAPI spec (`conformance.rs`).
#![allow(clippy::unwrap_used, missing_docs, unreachable_pub)]

mod conformance;
mod errors;
mod guard;
mod limits;
mod listing;
mod replicas;
mod sdk;
#[cfg(feature = "studio")]
mod studio;

use harness::llm::{Expect, LanguageModel, ModelRequest, ScriptedModel, StopReason, StreamEvent};
use harness::memory::{HashedWords, IndexConfig, Memory};
use harness::{Context, Cx, Harness, HarnessState, JsonSchema, StepResult, create_agent, schemars};
use harness_server::{Server, Webhooks};

/// The secret the test server signs its webhook calls with.
pub const WEBHOOK_SECRET: &str = "whsec-test";
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

/// A reply from a model, streamed token by token.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
pub struct Chat {
    #[field(reduce = append)]
    pub messages: Vec<String>,
}

#[derive(Context)]
struct ChatDeps {
    #[slot(fixed)]
    model: Arc<dyn LanguageModel>,
}

async fn reply(chat: Arc<Chat>, cx: Cx<ChatDeps>) -> StepResult<ChatUpdate> {
    let request = ModelRequest::builder()
        .messages(chat.messages.iter().map(harness::llm::Message::user))
        .build();
    let answer = cx.complete(&*cx.model, &request).await?;
    Ok(ChatUpdate::new().messages(vec![answer.into_message().text()]))
}

/// A scripted model that streams "Hello there" in three pieces, `turns`
/// times.
fn streaming_model(turns: usize) -> Arc<dyn LanguageModel> {
    let turn = || {
        Expect::any().stream([
            StreamEvent::TextDelta { text: "Hel".into() },
            StreamEvent::TextDelta { text: "lo ".into() },
            StreamEvent::TextDelta {
                text: "there".into(),
            },
            StreamEvent::Finish {
                stop_reason: StopReason::EndTurn,
            },
        ])
    };
    Arc::new(ScriptedModel::new((0..turns).map(|_| turn())))
}

/// The server of the tests, on a temporary sled store: the `ticket`,
/// `ticks` and `chat` agents.
pub fn server(dir: &std::path::Path) -> Server {
    server_on(Arc::new(SledStore::open(dir.join("store")).unwrap()))
}

/// The server of the tests on `store`.
pub fn server_on(store: Arc<SledStore>) -> Server {
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
    let chat = Harness::<Chat, ChatDeps>::builder_with(ChatDepsFixed {
        model: streaming_model(8),
    })
    .step("reply")
    .run(reply)
    .end()
    .start("reply")
    .store(Arc::clone(&store))
    .build()
    .unwrap();
    let memory = Memory::in_memory()
        .with_index(IndexConfig::new(Arc::new(HashedWords::new(64)), 64).fields(["text"]));
    Server::new()
        .memory(memory)
        .webhooks(
            Webhooks::new(WEBHOOK_SECRET)
                .host("127.0.0.1")
                .first_pause(Duration::from_millis(50)),
        )
        .agent(&create_agent("ticket", &tickets), &tickets)
        .agent(&create_agent("ticks", &ticks), &ticks)
        .agent(&create_agent("chat", &chat), &chat)
        .store(store)
        .body_limit(64 * 1024)
}

/// One HTTP/1.1 request over a fresh connection, with `headers` (a
/// `Host` is added unless given): the status and the body.
pub async fn http(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        head.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    let request = format!(
        "{head}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    let text = String::from_utf8_lossy(&response).to_string();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}
