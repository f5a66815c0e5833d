//! What a model answers.

use serde::{Deserialize, Serialize};

use crate::llm::message::{ContentPart, Message, Reasoning, Role, ToolCall};
use crate::llm::usage::Usage;

/// Why the model stopped generating.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(tag = "reason", content = "detail", rename_all = "snake_case")]
#[non_exhaustive]
pub enum StopReason {
    /// It finished its answer.
    #[default]
    EndTurn,
    /// It wants tools run: the response holds [`ToolCall`]s.
    ToolUse,
    /// It hit the token limit; the answer is cut off.
    MaxTokens,
    /// It produced one of the request's stop sequences.
    StopSequence,
    /// A reason this crate does not know, as the provider named it.
    Other(String),
}

/// A model's answer: its content, the tokens spent and why it stopped.
///
/// ```
/// use harness::llm::{ModelResponse, StopReason};
/// let response = ModelResponse::from_text("Hello!");
/// assert_eq!(response.text(), "Hello!");
/// assert_eq!(response.stop_reason, StopReason::EndTurn);
/// assert!(!response.has_tool_calls());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ModelResponse {
    /// Text, reasoning and tool calls, in the order the model produced them.
    pub content: Vec<ContentPart>,
    /// Tokens spent.
    #[serde(default)]
    pub usage: Usage,
    /// Why generation stopped.
    #[serde(default)]
    pub stop_reason: StopReason,
}

impl ModelResponse {
    /// A response with the given parts, usage and stop reason.
    pub fn new(content: Vec<ContentPart>, usage: Usage, stop_reason: StopReason) -> Self {
        Self {
            content,
            usage,
            stop_reason,
        }
    }

    /// A plain text answer (stop reason [`StopReason::EndTurn`], no usage).
    pub fn from_text(text: impl Into<String>) -> Self {
        Self::new(
            vec![ContentPart::text(text)],
            Usage::default(),
            StopReason::EndTurn,
        )
    }

    /// An answer that calls one tool (stop reason [`StopReason::ToolUse`]).
    pub fn from_tool_call(call: ToolCall) -> Self {
        Self::from_tool_calls([call])
    }

    /// An answer that calls several tools (stop reason [`StopReason::ToolUse`]).
    pub fn from_tool_calls(calls: impl IntoIterator<Item = ToolCall>) -> Self {
        Self::new(
            calls.into_iter().map(ContentPart::ToolCall).collect(),
            Usage::default(),
            StopReason::ToolUse,
        )
    }

    /// Sets the usage, builder-style.
    pub fn with_usage(mut self, usage: Usage) -> Self {
        self.usage = usage;
        self
    }

    /// The text parts joined together (no separator); reasoning is left out.
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(ContentPart::as_text)
            .collect()
    }

    /// The tool calls, in order.
    pub fn tool_calls(&self) -> impl Iterator<Item = &ToolCall> {
        self.content.iter().filter_map(ContentPart::as_tool_call)
    }

    /// The reasoning parts, in order (see [`Reasoning`]).
    pub fn reasoning(&self) -> impl Iterator<Item = &Reasoning> {
        self.content.iter().filter_map(ContentPart::as_reasoning)
    }

    /// Whether the model asked for any tool to run.
    pub fn has_tool_calls(&self) -> bool {
        self.tool_calls().next().is_some()
    }

    /// The answer as an assistant message, to append to the conversation.
    pub fn to_message(&self) -> Message {
        Message::new(Role::Assistant, self.content.clone())
    }

    /// The answer as an assistant message, consuming the response.
    pub fn into_message(self) -> Message {
        Message::new(Role::Assistant, self.content)
    }
}
