//! Streaming: the events a model emits while answering, and turning a stream
//! back into a [`ModelResponse`].

use std::pin::Pin;

use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::llm::error::ModelError;
use crate::llm::message::{ContentPart, Reasoning, ToolCall};
use crate::llm::response::{ModelResponse, StopReason};
use crate::llm::usage::Usage;

/// The stream [`LanguageModel::stream`](crate::llm::LanguageModel::stream)
/// returns. An `Err` item ends the stream.
pub type ModelStream = Pin<Box<dyn Stream<Item = Result<StreamEvent, ModelError>> + Send>>;

/// One step of a streamed answer.
///
/// A well-formed stream has any number of text, reasoning and tool-call
/// events, at most one (cumulative) [`StreamEvent::Usage`] per update, and
/// ends with [`StreamEvent::Finish`]. Each tool call is a `ToolCallStart`, any
/// number of `ToolCallDelta`s and a `ToolCallEnd`, all with the same `index`;
/// the end event carries the complete, parsed call, so consumers that do not
/// render arguments as they arrive can ignore the deltas. Likewise each
/// reasoning part is any number of `ReasoningDelta`s (its text, to show as it
/// comes) and a `ReasoningEnd` that carries the whole [`Reasoning`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
#[non_exhaustive]
pub enum StreamEvent {
    /// More answer text.
    TextDelta {
        /// The new text.
        text: String,
    },
    /// The model began a tool call.
    ToolCallStart {
        /// Position of the call among this answer's tool calls, from 0.
        index: usize,
        /// The call's id.
        id: String,
        /// The tool's name.
        name: String,
    },
    /// More of a tool call's arguments, as a fragment of JSON text.
    ToolCallDelta {
        /// Which call (see `ToolCallStart::index`).
        index: usize,
        /// The next fragment of the arguments' JSON text.
        arguments: String,
    },
    /// A tool call is complete.
    ToolCallEnd {
        /// Which call (see `ToolCallStart::index`).
        index: usize,
        /// The whole call, with parsed arguments.
        call: ToolCall,
    },
    /// More of the model's reasoning text, to show as it arrives; the
    /// whole part follows in a [`StreamEvent::ReasoningEnd`].
    ReasoningDelta {
        /// The new reasoning text.
        text: String,
    },
    /// A reasoning part is complete, where it stands in the answer.
    ReasoningEnd {
        /// The whole part, with its signature (see [`Reasoning`]).
        reasoning: Reasoning,
    },
    /// Tokens spent so far (cumulative: a later event replaces an earlier one).
    Usage(Usage),
    /// The answer is complete.
    Finish {
        /// Why generation stopped.
        stop_reason: StopReason,
    },
}

impl StreamEvent {
    /// A [`StreamEvent::TextDelta`].
    pub fn text(text: impl Into<String>) -> Self {
        Self::TextDelta { text: text.into() }
    }

    /// A [`StreamEvent::Finish`].
    pub fn finish(stop_reason: StopReason) -> Self {
        Self::Finish { stop_reason }
    }
}

/// Builds a [`ModelResponse`] from [`StreamEvent`]s as they arrive.
///
/// [`collect_stream`] drives one over a whole stream; use it directly when
/// you render the stream yourself and want the response afterwards.
///
/// ```
/// use harness::llm::{StopReason, StreamCollector, StreamEvent};
///
/// let mut collector = StreamCollector::new();
/// for event in [StreamEvent::text("Hel"), StreamEvent::text("lo"), StreamEvent::finish(StopReason::EndTurn)] {
///     collector.push(event)?;
/// }
/// assert_eq!(collector.finish()?.text(), "Hello");
/// # Ok::<(), harness::llm::ModelError>(())
/// ```
#[derive(Debug, Default)]
pub struct StreamCollector {
    content: Vec<ContentPart>,
    /// `(index, position in content)` of tool calls started but not ended.
    open_calls: Vec<(usize, usize)>,
    /// Whether the last content part may still grow with text deltas.
    text_open: bool,
    usage: Usage,
    stop_reason: Option<StopReason>,
}

impl StreamCollector {
    /// An empty collector.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes in the next event. Fails on events that contradict the ones
    /// before: a delta for a call that was never started, a call started twice.
    pub fn push(&mut self, event: StreamEvent) -> Result<(), ModelError> {
        match event {
            StreamEvent::TextDelta { text } => {
                if text.is_empty() {
                    return Ok(());
                }
                match self.content.last_mut() {
                    Some(ContentPart::Text { text: last }) if self.text_open => {
                        last.push_str(&text)
                    }
                    _ => {
                        self.content.push(ContentPart::Text { text });
                        self.text_open = true;
                    }
                }
            }
            StreamEvent::ToolCallStart { index, id, name } => {
                if self.open_calls.iter().any(|(open, _)| *open == index) {
                    return Err(ModelError::malformed(format!(
                        "tool call {index} was started twice in the stream"
                    )));
                }
                self.open_calls.push((index, self.content.len()));
                self.content
                    .push(ContentPart::ToolCall(ToolCall::new(id, name, Value::Null)));
                self.text_open = false;
            }
            StreamEvent::ToolCallDelta { index, .. } => {
                if !self.open_calls.iter().any(|(open, _)| *open == index) {
                    return Err(ModelError::malformed(format!(
                        "arguments arrived for tool call {index}, which was not started"
                    )));
                }
            }
            StreamEvent::ToolCallEnd { index, call } => {
                match self.open_calls.iter().position(|(open, _)| *open == index) {
                    Some(at) => {
                        let (_, slot) = self.open_calls.remove(at);
                        self.content[slot] = ContentPart::ToolCall(call);
                    }
                    None => {
                        self.content.push(ContentPart::ToolCall(call));
                        self.text_open = false;
                    }
                }
            }
            // The end event carries the whole part.
            StreamEvent::ReasoningDelta { .. } => {}
            StreamEvent::ReasoningEnd { reasoning } => {
                self.content.push(ContentPart::Reasoning(reasoning));
                self.text_open = false;
            }
            StreamEvent::Usage(usage) => self.usage = usage,
            StreamEvent::Finish { stop_reason } => self.stop_reason = Some(stop_reason),
        }
        Ok(())
    }

    /// The complete response. Fails if the stream never finished or left a
    /// tool call open, which means it was cut off.
    pub fn finish(self) -> Result<ModelResponse, ModelError> {
        if let Some((index, _)) = self.open_calls.first() {
            return Err(ModelError::malformed(format!(
                "the stream ended while tool call {index} was still open; it was cut off"
            )));
        }
        let stop_reason = self.stop_reason.ok_or_else(|| {
            ModelError::malformed("the stream ended without a finish event; it was cut off")
        })?;
        Ok(ModelResponse::new(self.content, self.usage, stop_reason))
    }
}

/// Drains `stream` into a [`ModelResponse`], so a streamed answer and a
/// non-streamed one can be handled alike. The first error ends collection.
///
/// ```
/// use harness::llm::{collect_stream, ModelResponse};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), harness::llm::ModelError> {
/// let response = ModelResponse::from_text("Hi");
/// let collected = collect_stream(response.clone().into_stream()).await?;
/// assert_eq!(collected, response);
/// # Ok(())
/// # }
/// ```
pub async fn collect_stream<S>(stream: S) -> Result<ModelResponse, ModelError>
where
    S: Stream<Item = Result<StreamEvent, ModelError>>,
{
    let mut stream = std::pin::pin!(stream);
    let mut collector = StreamCollector::new();
    while let Some(event) = stream.next().await {
        collector.push(event?)?;
    }
    collector.finish()
}

impl ModelResponse {
    /// The events a streaming model would emit for this response, such that
    /// [`collect_stream`] gives the response back.
    pub fn to_events(&self) -> Vec<StreamEvent> {
        let mut events = Vec::new();
        let mut index = 0;
        for part in &self.content {
            match part {
                ContentPart::Text { text } => events.push(StreamEvent::text(text.clone())),
                ContentPart::ToolCall(call) => {
                    events.push(StreamEvent::ToolCallStart {
                        index,
                        id: call.id.clone(),
                        name: call.name.clone(),
                    });
                    events.push(StreamEvent::ToolCallDelta {
                        index,
                        arguments: call.arguments.to_string(),
                    });
                    events.push(StreamEvent::ToolCallEnd {
                        index,
                        call: call.clone(),
                    });
                    index += 1;
                }
                ContentPart::Reasoning(reasoning) => {
                    if !reasoning.text.is_empty() {
                        events.push(StreamEvent::ReasoningDelta {
                            text: reasoning.text.clone(),
                        });
                    }
                    events.push(StreamEvent::ReasoningEnd {
                        reasoning: reasoning.clone(),
                    });
                }
                // Images and tool results do not occur in model answers.
                _ => {}
            }
        }
        events.push(StreamEvent::Usage(self.usage));
        events.push(StreamEvent::finish(self.stop_reason.clone()));
        events
    }

    /// This response as a [`ModelStream`] (see [`ModelResponse::to_events`]).
    pub fn into_stream(self) -> ModelStream {
        Box::pin(futures::stream::iter(self.to_events().into_iter().map(Ok)))
    }
}

/// Tool calls whose arguments arrive in fragments, assembled per index.
///
/// For provider implementations: feed it starts and fragments as the wire
/// delivers them, then [`PartialToolCalls::finish`] parses the arguments.
#[derive(Debug, Default)]
pub struct PartialToolCalls {
    calls: Vec<PartialCall>,
}

#[derive(Debug)]
struct PartialCall {
    index: usize,
    id: String,
    name: String,
    arguments: String,
}

impl PartialToolCalls {
    /// No calls yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts call `index`. Returns `false` if it was already started.
    pub fn start(&mut self, index: usize, id: impl Into<String>, name: impl Into<String>) -> bool {
        if self.is_open(index) {
            return false;
        }
        self.calls.push(PartialCall {
            index,
            id: id.into(),
            name: name.into(),
            arguments: String::new(),
        });
        true
    }

    /// Whether call `index` was started and not yet finished.
    pub fn is_open(&self, index: usize) -> bool {
        self.calls.iter().any(|c| c.index == index)
    }

    /// Appends a fragment of call `index`'s arguments. Returns `false` if the
    /// call was not started.
    pub fn append(&mut self, index: usize, fragment: &str) -> bool {
        match self.calls.iter_mut().find(|c| c.index == index) {
            Some(call) => {
                call.arguments.push_str(fragment);
                true
            }
            None => false,
        }
    }

    /// Ends call `index` and parses its arguments; empty arguments become
    /// `{}`, and arguments that are not valid JSON are kept as the text the
    /// model wrote (a JSON string), so that the call can be answered with
    /// an error for that call alone rather than fail the whole turn.
    /// `None` if the call was not open.
    pub fn finish(&mut self, index: usize) -> Option<Result<ToolCall, ModelError>> {
        let at = self.calls.iter().position(|c| c.index == index)?;
        let call = self.calls.remove(at);
        Some(parse_call(call))
    }

    /// Ends every open call, in the order they were started.
    pub fn finish_all(&mut self) -> Vec<(usize, Result<ToolCall, ModelError>)> {
        self.calls
            .drain(..)
            .map(|call| (call.index, parse_call(call)))
            .collect()
    }
}

fn parse_call(call: PartialCall) -> Result<ToolCall, ModelError> {
    Ok(ToolCall::new(
        call.id,
        call.name,
        tool_arguments(&call.arguments),
    ))
}

/// A tool call's arguments from the text a model wrote: `{}` for none, the
/// JSON value, or — when the text is not JSON — the text itself as a JSON
/// string, which the tool's caller reports to the model as that call's
/// error ([`ToolSet::dispatch_or_report`](super::ToolSet::dispatch_or_report)
/// does).
pub fn tool_arguments(text: &str) -> Value {
    if text.trim().is_empty() {
        return Value::Object(Default::default());
    }
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}
