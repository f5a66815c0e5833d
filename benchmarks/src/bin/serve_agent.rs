//! harness's side of `benchmarks/scripts/bench-server`: the benchmark's
//! agent served by harness-server, for the load generator
//! (`benchmarks/langgraph_server/load.py`) to drive with the LangGraph SDK,
//! as it drives LangGraph's own server serving the same agent
//! (`benchmarks/langgraph_server/agent.py`).
//!
//! `serve_agent [--port 0]`
//!
//! The agent, `bench`: three steps, `plan` (a simulated model call: a 30 ms
//! tokio sleep), `act` (no model call) and `answer` (another 30 ms model
//! call); `steps` counts them and `reply` is the last step's word. No field
//! accumulates, so a thread keeps its size however many runs it has had.
//! Its sessions live in a [`MemoryStore`] (in memory, gone with the
//! process), as LangGraph's `langgraph dev` keeps its threads and
//! checkpoints in memory (with its file persistence turned off). The server
//! is harness-server with its defaults (loopback, no key, 4 096 streams at
//! most), on a multi-threaded tokio runtime. It prints `listening on ADDR`
//! once it accepts connections, then serves until it is killed.

use harness::{Harness, HarnessState, StepResult, create_agent};
use harness_benchmarks::arg;
use harness_server::Server;
use harness_stores::MemoryStore;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

/// One simulated model call.
const MODEL_LATENCY: Duration = Duration::from_millis(30);

/// The agent's state: no field accumulates.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Chat {
    input: String,
    steps: u64,
    reply: String,
}

async fn plan(s: Arc<Chat>) -> StepResult<ChatUpdate> {
    tokio::time::sleep(MODEL_LATENCY).await;
    Ok(ChatUpdate::new()
        .steps(s.steps + 1)
        .reply("plan".to_owned()))
}

async fn act(s: Arc<Chat>) -> StepResult<ChatUpdate> {
    Ok(ChatUpdate::new().steps(s.steps + 1).reply("act".to_owned()))
}

async fn answer(s: Arc<Chat>) -> StepResult<ChatUpdate> {
    tokio::time::sleep(MODEL_LATENCY).await;
    Ok(ChatUpdate::new()
        .steps(s.steps + 1)
        .reply("answer".to_owned()))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let port: u16 = arg(&args, "--port", 0);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let store = Arc::new(MemoryStore::new());
        let harness = Harness::<Chat>::builder()
            .step("plan")
            .run(plan)
            .next("act")
            .step("act")
            .run(act)
            .next("answer")
            .step("answer")
            .run(answer)
            .end()
            .start("plan")
            .store(Arc::clone(&store))
            .build()?;
        let agent = create_agent("bench", &harness);
        let bound = Server::new()
            .agent(&agent, &harness)
            .store(store)
            .bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
            .await?;
        println!("listening on {}", bound.addr());
        std::io::stdout().flush()?;
        bound.serve(std::future::pending()).await?;
        Ok(())
    })
}
