//! Quickstart: an agent that thinks, calls tools, thinks again and completes.
//!
//! ```text
//! think ──call_tools──▶ call_tools ──▶ think ──complete──▶ end
//! ```
//!
//! Runs offline on a scripted model: `cargo run -p harness-examples --example quickstart`.

use harness::llm::{
    ContentPart, Expect, LanguageModel, Message, ModelRequest, ModelResponse, Role, ScriptedModel,
    Tool, ToolCall, ToolSet,
};
use harness::{
    Context, Cx, Harness, HarnessState, JsonSchema, RunEvent, StepResult, create_agent_with,
    schemars,
};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::sync::Arc;

/// The conversation: each step's messages are appended.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
struct Chat {
    #[field(reduce = append)]
    messages: Vec<Message>,
    #[field(reduce = add)]
    model_calls: u32,
}

/// What the steps depend on.
#[derive(Context)]
struct Deps {
    /// The tools, the same for every agent of this harness.
    #[slot(fixed)]
    tools: Arc<ToolSet>,
    /// The model, chosen per agent.
    #[slot(agent)]
    model: Arc<dyn LanguageModel>,
}

/// The model reads the conversation and answers, maybe with tool calls.
async fn think(chat: Arc<Chat>, cx: Cx<Deps>) -> StepResult<ChatUpdate> {
    let request = ModelRequest::builder()
        .system("You are a helpful assistant. Use the tools for facts.")
        .messages(chat.messages.iter().cloned())
        .tools(cx.tools.specs())
        .build();
    let answer = cx.model.complete(&request).await?;
    Ok(ChatUpdate::new()
        .messages(vec![answer.into_message()])
        .model_calls(1))
}

/// After thinking: call tools if the model asked for any, else complete.
fn after_think(chat: &Chat) -> &'static str {
    match chat.messages.last() {
        Some(m) if m.tool_calls().next().is_some() => "call_tools",
        _ => "complete",
    }
}

/// Runs every tool call of the last message; errors are reported to the model.
async fn call_tools(chat: Arc<Chat>, cx: Cx<Deps>) -> StepResult<ChatUpdate> {
    let mut results = Vec::new();
    if let Some(last) = chat.messages.last() {
        for call in last.tool_calls() {
            results.push(cx.tools.dispatch_or_report(call).await);
        }
    }
    Ok(ChatUpdate::new().messages(vec![Message::tool_results(results)]))
}

#[derive(Deserialize, JsonSchema)]
struct WeatherArgs {
    /// The city, e.g. "Paris".
    city: String,
}

/// A weather tool with a fixed table, so the example needs no network.
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
        match args.city.as_str() {
            "Paris" => Ok(json!({"city": "Paris", "celsius": 18, "sky": "cloudy"})),
            "Oslo" => Ok(json!({"city": "Oslo", "celsius": 9, "sky": "rain"})),
            other => Err(format!("no weather station in {other}")),
        }
    }
}

/// What the offline model answers: the same turns a real model gave for this
/// question, each checked against the request it answers.
fn script() -> ScriptedModel {
    ScriptedModel::new([
        Expect::any()
            .last_role(Role::User)
            .offers_tool("weather")
            .reply(ModelResponse::from_tool_calls([
                ToolCall::new("call_1", "weather", json!({"city": "Paris"})),
                ToolCall::new("call_2", "weather", json!({"city": "Oslo"})),
            ])),
        Expect::any()
            .last_role(Role::Tool)
            .last_message_contains("cloudy")
            .reply(ModelResponse::from_text(
                "Paris is warmer: 18 °C and cloudy, against 9 °C and rain in Oslo.",
            )),
    ])
}

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let tools = Arc::new(ToolSet::new().with(Weather));
    let harness = Harness::<Chat, Deps>::builder_with(DepsFixed { tools })
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
        .start("think")
        .build()?;
    println!("The loop:\n{}", harness.to_mermaid());

    // HARNESS_PROVIDER=openai|anthropic|gemini runs the same loop on a real model.
    let model = harness_examples::providers_select::model_from_env(script())?;
    let agent = create_agent_with("quickstart", &harness, DepsAgent { model });

    let question = "Is it warmer in Paris or in Oslo right now?";
    println!("user: {question}");
    let run = agent.run(Chat {
        messages: vec![Message::user(question)],
        model_calls: 0,
    });
    let mut events = run.events();
    let printer = tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            if let RunEvent::StepFinished {
                step,
                update,
                signal,
                elapsed,
                ..
            } = event
            {
                for m in update.messages.unwrap_or_default() {
                    for call in m.tool_calls() {
                        println!("  [{step}] model calls {}({})", call.name, call.arguments);
                    }
                    for part in &m.content {
                        if let ContentPart::ToolResult(r) = part {
                            println!("  [{step}] {} returns {}", r.name, r.content);
                        }
                    }
                    let text = m.text();
                    if !text.is_empty() {
                        println!("  [{step}] {:?}: {text}", m.role);
                    }
                }
                let to = signal.map(|s| format!(" -> {s}")).unwrap_or_default();
                println!("  [{step}] done in {elapsed:?}{to}");
            }
        }
    });

    let outcome = run.await?;
    printer.await?;
    let answer = outcome
        .state
        .messages
        .last()
        .map(Message::text)
        .unwrap_or_default();
    println!(
        "outcome: {} after {} steps and {} model calls",
        outcome.signal, outcome.steps, outcome.state.model_calls
    );
    println!("assistant: {answer}");
    Ok(())
}
