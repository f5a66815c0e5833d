//! The quickstart's agent: a loop that thinks, calls tools, thinks again
//! and completes, with a weather tool that needs no network. The
//! `quickstart` example runs it; `serve` serves it.
//!
//! ```text
//! think ──call_tools──▶ call_tools ──▶ think ──complete──▶ end
//! ```

use harness::llm::{
    Expect, LanguageModel, Message, ModelRequest, ModelResponse, Role, ScriptedModel, Tool,
    ToolCall, ToolSet,
};
use harness::{
    Context, Cx, Harness, HarnessBuilder, HarnessState, JsonSchema, RetryPolicy, StepResult,
};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::sync::Arc;

/// The conversation: each step's messages are appended.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
pub struct Chat {
    /// The messages, the user's question first.
    #[field(reduce = append)]
    pub messages: Vec<Message>,
    /// How many times the model was called.
    #[field(reduce = add)]
    pub model_calls: u32,
}

/// What the steps depend on.
#[derive(Context)]
pub struct Deps {
    /// The tools, the same for every agent of this harness.
    #[slot(fixed)]
    pub tools: Arc<ToolSet>,
    /// The model, chosen per agent.
    #[slot(agent)]
    pub model: Arc<dyn LanguageModel>,
}

impl std::fmt::Debug for Deps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deps")
            .field("tools", &self.tools)
            .field("model", &self.model.model_name())
            .finish()
    }
}

/// The model reads the conversation and answers, maybe with tool calls.
pub async fn think(chat: Arc<Chat>, cx: Cx<Deps>) -> StepResult<ChatUpdate> {
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
pub fn after_think(chat: &Chat) -> &'static str {
    match chat.messages.last() {
        Some(m) if m.tool_calls().next().is_some() => "call_tools",
        _ => "complete",
    }
}

/// Runs every tool call of the last message; errors are reported to the model.
pub async fn call_tools(chat: Arc<Chat>, cx: Cx<Deps>) -> StepResult<ChatUpdate> {
    let mut results = Vec::new();
    if let Some(last) = chat.messages.last() {
        for call in last.tool_calls() {
            results.push(cx.tools.dispatch_or_report(call).await);
        }
    }
    Ok(ChatUpdate::new().messages(vec![Message::tool_results(results)]))
}

/// The weather tool's arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct WeatherArgs {
    /// The city, e.g. "Paris".
    pub city: String,
}

/// A weather tool with a fixed table, so the example needs no network.
#[derive(Debug)]
pub struct Weather;

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

/// The loop, offering the weather tool, ready to build (a caller may give
/// it a store first).
///
/// ```
/// let harness = harness_examples::quickstart_agent::harness().build()?;
/// assert_eq!(harness.start(), "think");
/// # Ok::<(), harness::LoopValidationError>(())
/// ```
pub fn harness() -> HarnessBuilder<Chat, Deps> {
    let tools = Arc::new(ToolSet::new().with(Weather));
    Harness::<Chat, Deps>::builder_with(DepsFixed { tools })
        .step("think")
        .run(think)
        // A model's answer can fail where asking again would not: a local
        // model's tool call its server cannot parse, a dropped connection
        // past the client's own retries. One more try, then the run fails.
        .retry(RetryPolicy::attempts(2))
        .route(after_think)
        .on("call_tools")
        .to("call_tools")
        .on("complete")
        .end()
        .step("call_tools")
        .run(call_tools)
        .next("think")
        .start("think")
}

/// The offline model's turns for "Is it warmer in Paris or in Oslo?": the
/// same turns a real model gave for this question.
pub fn turns() -> [ModelResponse; 2] {
    [
        ModelResponse::from_tool_calls([
            ToolCall::new("call_1", "weather", json!({"city": "Paris"})),
            ToolCall::new("call_2", "weather", json!({"city": "Oslo"})),
        ]),
        ModelResponse::from_text(
            "Paris is warmer: 18 °C and cloudy, against 9 °C and rain in Oslo.",
        ),
    ]
}

/// The offline model for one run: [`turns`], each checked against the
/// request it answers.
pub fn script() -> ScriptedModel {
    let [call, answer] = turns();
    ScriptedModel::new([
        Expect::any()
            .last_role(Role::User)
            .offers_tool("weather")
            .reply(call),
        Expect::any()
            .last_role(Role::Tool)
            .last_message_contains("cloudy")
            .reply(answer),
    ])
}
