//! The framework's share of a real model turn: the quickstart's loop
//! (think → call the weather tool → think) against a real model on a local
//! OpenAI-compatible server, `--runs` times (default 5), on a durable sled
//! store as an application would run it.
//!
//! ```sh
//! eval "$(scripts/local-model)"
//! cargo run --release -p harness-benchmarks --bin real_turn
//! ```
//!
//! Each run's wall time is split three ways, all measured in this one run:
//!
//! - **the model**: the server's own time on the requests (prompt and
//!   generation), read from llama.cpp's `/metrics` counters before and after;
//! - **the provider**: the rest of each `complete` call as the loop saw it
//!   (harness-openai's request and answer JSON, HTTP on loopback);
//! - **the loop**: the rest of the run (steps, state updates, the tool,
//!   checkpoints with their fsync, events).
//!
//! `--store none` runs without a session store (no checkpoints).
//!
//! It prints one line per run, the totals, and `RESULT` lines: the loop's
//! and the provider's time per model turn, and their share of the wall
//! time. Needs `HARNESS_LLM_URL` and `HARNESS_LLM_MODEL` (what
//! `scripts/local-model` prints).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use harness::llm::{
    LanguageModel, Message, ModelError, ModelRequest, ModelResponse, Tool, ToolSet,
};
use harness::{Context, Cx, Harness, HarnessState, StepResult, create_agent_with};
use harness_benchmarks::{arg, result, scratch_dir};
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Chat {
    #[field(reduce = append)]
    messages: Vec<Message>,
}

#[derive(Context)]
struct Deps {
    #[slot(fixed)]
    tools: Arc<ToolSet>,
    #[slot(agent)]
    model: Arc<dyn LanguageModel>,
}

async fn think(chat: Arc<Chat>, cx: Cx<Deps>) -> StepResult<ChatUpdate> {
    let request = ModelRequest::builder()
        .system("You are a helpful assistant. Use the tools for facts.")
        .messages(chat.messages.iter().cloned())
        .tools(cx.tools.specs())
        .max_tokens(64)
        .build();
    let answer = cx.complete(&*cx.model, &request).await?;
    Ok(ChatUpdate::new().messages(vec![answer.into_message()]))
}

fn after_think(chat: &Chat) -> &'static str {
    match chat.messages.last() {
        Some(m) if m.tool_calls().next().is_some() => "call_tools",
        _ => "complete",
    }
}

async fn call_tools(chat: Arc<Chat>, cx: Cx<Deps>) -> StepResult<ChatUpdate> {
    let mut results = Vec::new();
    if let Some(last) = chat.messages.last() {
        for call in last.tool_calls() {
            results.push(cx.tools.dispatch_or_report(call).await);
        }
    }
    Ok(ChatUpdate::new().messages(vec![Message::tool_results(results)]))
}

#[derive(Deserialize, schemars::JsonSchema)]
struct WeatherArgs {
    /// The city.
    city: String,
}

struct Weather;

#[async_trait::async_trait]
impl Tool for Weather {
    type Args = WeatherArgs;
    type Output = serde_json::Value;
    type Error = String;

    fn name(&self) -> &str {
        "weather"
    }

    fn description(&self) -> &str {
        "Current weather in a city: temperature in °C and conditions."
    }

    async fn call(&self, args: WeatherArgs) -> Result<serde_json::Value, String> {
        Ok(json!({"city": args.city, "celsius": 18, "sky": "cloudy"}))
    }
}

/// The model, timing each call as the loop sees it.
struct Timed {
    inner: harness_openai::CompletionModel,
    calls: AtomicU64,
    nanos: AtomicU64,
}

#[async_trait::async_trait]
impl LanguageModel for Timed {
    async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        let began = Instant::now();
        let answer = self.inner.complete(request).await;
        let took = u64::try_from(began.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.nanos.fetch_add(took, Ordering::Relaxed);
        answer
    }

    fn provider(&self) -> &str {
        self.inner.provider()
    }

    fn model_name(&self) -> &str {
        self.inner.model_name()
    }
}

/// The server's busy time so far: prompt processing and generation, in
/// seconds, from llama.cpp's Prometheus counters (`GET /metrics` over a
/// plain HTTP/1.0 connection: the server is on loopback).
fn server_seconds(root: &str) -> f64 {
    use std::io::{Read, Write};
    let host = root
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap_or_default();
    let mut stream = std::net::TcpStream::connect(host)
        .unwrap_or_else(|e| panic!("{root}: {e} (start the server with scripts/local-model)"));
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: {host}\r\n\r\n").expect("a request");
    let mut text = String::new();
    stream.read_to_string(&mut text).expect("the metrics");
    [
        "llamacpp:prompt_seconds_total",
        "llamacpp:tokens_predicted_seconds_total",
    ]
    .iter()
    .map(|name| {
        text.lines()
            .find_map(|l| l.strip_prefix(name).map(str::trim))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no {name} in {root}/metrics"))
    })
    .sum()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let runs: u32 = arg(&args, "--runs", 5);
    // `sled` (durable checkpoints, as an application runs) or `none`.
    let store: String = arg(&args, "--store", "sled".to_owned());
    let url = std::env::var("HARNESS_LLM_URL")
        .map_err(|_| "HARNESS_LLM_URL is not set: eval \"$(scripts/local-model)\" first")?;
    let name = std::env::var("HARNESS_LLM_MODEL")
        .map_err(|_| "HARNESS_LLM_MODEL is not set: eval \"$(scripts/local-model)\" first")?;
    let root = url.trim_end_matches('/').trim_end_matches("/v1").to_owned();

    let dir = scratch_dir("real_turn");
    let builder = Harness::<Chat, Deps>::builder_with(DepsFixed {
        tools: Arc::new(ToolSet::new().with(Weather)),
    })
    .step("think")
    .run(think)
    .route(after_think)
    .on("call_tools")
    .to("call_tools")
    .on("complete")
    .end()
    .step("call_tools")
    .run(call_tools)
    .next("think")
    .start("think");
    let harness = match store.as_str() {
        "sled" => builder
            .store(harness_stores::SledStore::open(&dir)?)
            .build()?,
        "none" => builder.build()?,
        other => return Err(format!("--store {other}: use sled or none").into()),
    };
    let model = Arc::new(Timed {
        inner: harness_openai::Client::builder()
            .base_url(&url)
            .max_attempts(1)
            .build()?
            .completion_model(&name),
        calls: AtomicU64::new(0),
        nanos: AtomicU64::new(0),
    });
    let agent = create_agent_with(
        "real_turn",
        &harness,
        DepsAgent {
            model: Arc::clone(&model) as Arc<dyn LanguageModel>,
        },
    );

    println!("run  steps  turns   wall ms  model ms  provider ms  loop ms");
    let (mut wall, mut server, mut calls_total, mut call_time) = (0.0, 0.0, 0, 0.0);
    for run in 0..runs {
        let (calls_before, nanos_before) = (
            model.calls.load(Ordering::Relaxed),
            model.nanos.load(Ordering::Relaxed),
        );
        let server_before = server_seconds(&root);
        let began = Instant::now();
        let outcome = agent
            .run(Chat {
                messages: vec![Message::user(format!(
                    "What is the weather in {} right now?",
                    ["Paris", "Oslo", "Rome", "Lima", "Kyiv"][run as usize % 5]
                ))],
            })
            .await?;
        let run_wall = began.elapsed().as_secs_f64();
        let run_server = server_seconds(&root) - server_before;
        let run_calls = model.calls.load(Ordering::Relaxed) - calls_before;
        let run_call_time =
            Duration::from_nanos(model.nanos.load(Ordering::Relaxed) - nanos_before).as_secs_f64();
        println!(
            "{run:>3}  {:>5}  {run_calls:>5}  {:>8.1}  {:>8.1}  {:>11.2}  {:>7.2}",
            outcome.steps,
            run_wall * 1e3,
            run_server * 1e3,
            (run_call_time - run_server) * 1e3,
            (run_wall - run_call_time) * 1e3,
        );
        wall += run_wall;
        server += run_server;
        calls_total += run_calls;
        call_time += run_call_time;
    }
    let turns = calls_total.max(1) as f64;
    let provider = call_time - server;
    let loop_time = wall - call_time;
    println!(
        "per model turn: model {:.1} ms, provider {:.2} ms, loop {:.2} ms; \
         the framework's share of the wall time: {:.3}% (provider {:.3}%, loop {:.3}%)",
        server / turns * 1e3,
        provider / turns * 1e3,
        loop_time / turns * 1e3,
        (provider + loop_time) / wall * 100.0,
        provider / wall * 100.0,
        loop_time / wall * 100.0,
    );
    result("real_turn_model_ms", server / turns * 1e3);
    result("real_turn_provider_ms", provider / turns * 1e3);
    result("real_turn_loop_ms", loop_time / turns * 1e3);
    result("real_turn_framework_share", (provider + loop_time) / wall);
    Ok(())
}
