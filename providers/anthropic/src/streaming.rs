//! Streamed messages: `message_start`, content blocks with their deltas,
//! `message_delta`, `message_stop`.

use harness::llm::{ModelError, PartialToolCalls, Reasoning, StreamEvent, Usage};
use harness_provider_http::{Flow, SseDecoder, SseEvent, error_from_body, excerpt};

use crate::completion::{AnswerTool, PROVIDER, stop_reason, thinking};
use crate::wire::{self, StreamEventIn};

/// Follows the content blocks of one streamed message. Tool-use blocks are
/// numbered apart from text blocks, so tool call indexes count from 0.
/// Thinking blocks are gathered until they stop, since their signature
/// comes last.
#[derive(Debug, Default)]
pub(crate) struct EventDecoder {
    calls: PartialToolCalls,
    /// `(content block index, tool call index)` of tool-use blocks.
    tool_blocks: Vec<(usize, usize)>,
    /// Blocks of a kind this crate does not read (a server tool's call and
    /// result: web search, code execution, MCP): their deltas are skipped,
    /// as a whole answer's are.
    skipped_blocks: Vec<usize>,
    /// `(content block index, reasoning so far)` of open thinking blocks.
    thinking_blocks: Vec<(usize, Reasoning)>,
    input_tokens: u64,
    output_tokens: u64,
    cache_read_tokens: u64,
    cache_write_tokens: u64,
    stop_reason: Option<String>,
    /// The request's answer tool, if it asked for a response format.
    answer: Option<AnswerTool>,
    /// `(content block index, input so far)` of the answer tool's block,
    /// which becomes text when it stops.
    answer_block: Option<(usize, String)>,
}

impl EventDecoder {
    pub(crate) fn new(answer: Option<AnswerTool>) -> Self {
        Self {
            answer,
            ..Self::default()
        }
    }

    /// Ends the answer tool's block `block` as a text event. Input that is
    /// not JSON (an answer cut off at the token limit) goes as it came, for
    /// the typed-answer check to report.
    fn end_answer(&mut self, block: usize, out: &mut Vec<StreamEvent>) {
        let (Some(answer), Some((index, input))) = (&self.answer, &self.answer_block) else {
            return;
        };
        if *index != block {
            return;
        }
        let text = match serde_json::from_str::<serde_json::Value>(input) {
            Ok(input) => answer.answer(&input),
            Err(_) if input.trim().is_empty() => "{}".to_owned(),
            Err(_) => input.clone(),
        };
        out.push(StreamEvent::text(text));
        self.answer_block = None;
    }

    fn tool_index(&self, block: usize) -> Option<usize> {
        self.tool_blocks
            .iter()
            .find(|(b, _)| *b == block)
            .map(|(_, tool)| *tool)
    }

    fn thinking_block(&mut self, block: usize, delta: &str) -> Result<&mut Reasoning, ModelError> {
        self.thinking_blocks
            .iter_mut()
            .find(|(b, _)| *b == block)
            .map(|(_, reasoning)| reasoning)
            .ok_or_else(|| {
                ModelError::malformed(format!(
                    "{delta} for content block {block}, which is not a thinking block"
                ))
            })
    }

    /// Ends thinking block `block` (all of them if `None`), in order.
    fn end_thinking(&mut self, block: Option<usize>, out: &mut Vec<StreamEvent>) {
        let (ended, open) = std::mem::take(&mut self.thinking_blocks)
            .into_iter()
            .partition(|(b, _)| block.is_none_or(|block| *b == block));
        self.thinking_blocks = open;
        for (_, mut reasoning) in ended {
            reasoning.signature = reasoning.signature.filter(|s| !s.is_empty());
            out.push(StreamEvent::ReasoningEnd { reasoning });
        }
    }

    fn add_usage(&mut self, usage: &wire::UsageIn) {
        if let Some(input) = usage.input() {
            self.input_tokens = input;
        }
        if let Some(output) = usage.output_tokens {
            self.output_tokens = output;
        }
        if let Some(read) = usage.cache_read_input_tokens {
            self.cache_read_tokens = read;
        }
        if let Some(write) = usage.cache_creation_input_tokens {
            self.cache_write_tokens = write;
        }
    }
}

impl SseDecoder for EventDecoder {
    fn decode(&mut self, event: SseEvent, out: &mut Vec<StreamEvent>) -> Result<Flow, ModelError> {
        let parsed: StreamEventIn = serde_json::from_str(&event.data).map_err(|e| {
            ModelError::malformed(format!(
                "a stream event is not the expected JSON ({e}): {:?}",
                // A bounded, redacted quote: the event may be megabytes,
                // and the message goes back to the model and into logs.
                excerpt(&event.data, 200)
            ))
        })?;
        match parsed {
            StreamEventIn::MessageStart { message } => self.add_usage(&message.usage),
            StreamEventIn::ContentBlockStart {
                index,
                content_block,
            } => match content_block {
                wire::BlockStartIn::Text { text } => {
                    if !text.is_empty() {
                        out.push(StreamEvent::text(text));
                    }
                }
                wire::BlockStartIn::ToolUse { name, input, .. }
                    if self.answer.as_ref().is_some_and(|a| a.name() == name) =>
                {
                    let start = if input.as_object().is_some_and(|o| !o.is_empty()) {
                        input.to_string()
                    } else {
                        String::new()
                    };
                    self.answer_block = Some((index, start));
                }
                wire::BlockStartIn::ToolUse { id, name, input } => {
                    let tool = self.tool_blocks.len();
                    self.tool_blocks.push((index, tool));
                    self.calls.start(tool, id.clone(), name.clone());
                    out.push(StreamEvent::ToolCallStart {
                        index: tool,
                        id,
                        name,
                    });
                    // The API starts with `{}` and streams the input; a proxy
                    // may send it whole here instead.
                    if input.as_object().is_some_and(|o| !o.is_empty()) {
                        let arguments = input.to_string();
                        self.calls.append(tool, &arguments);
                        out.push(StreamEvent::ToolCallDelta {
                            index: tool,
                            arguments,
                        });
                    }
                }
                wire::BlockStartIn::Thinking {
                    thinking: text,
                    signature,
                } => {
                    if !text.is_empty() {
                        out.push(StreamEvent::ReasoningDelta { text: text.clone() });
                    }
                    self.thinking_blocks
                        .push((index, thinking(text, signature)));
                }
                wire::BlockStartIn::RedactedThinking { data } => self
                    .thinking_blocks
                    .push((index, Reasoning::redacted(PROVIDER, data))),
                wire::BlockStartIn::Other => self.skipped_blocks.push(index),
            },
            StreamEventIn::ContentBlockDelta { index, .. }
                if self.skipped_blocks.contains(&index) => {}
            StreamEventIn::ContentBlockDelta { index, delta } => match delta {
                wire::DeltaIn::TextDelta { text } => {
                    if !text.is_empty() {
                        out.push(StreamEvent::text(text));
                    }
                }
                wire::DeltaIn::InputJsonDelta { partial_json }
                    if self.answer_block.as_ref().is_some_and(|(b, _)| *b == index) =>
                {
                    if let Some((_, input)) = &mut self.answer_block {
                        input.push_str(&partial_json);
                    }
                }
                wire::DeltaIn::InputJsonDelta { partial_json } => {
                    let tool = self.tool_index(index).ok_or_else(|| {
                        ModelError::malformed(format!(
                            "input_json_delta for content block {index}, which is not a tool_use block"
                        ))
                    })?;
                    if !partial_json.is_empty() {
                        self.calls.append(tool, &partial_json);
                        out.push(StreamEvent::ToolCallDelta {
                            index: tool,
                            arguments: partial_json,
                        });
                    }
                }
                wire::DeltaIn::ThinkingDelta { thinking: text } => {
                    let reasoning = self.thinking_block(index, "thinking_delta")?;
                    if !text.is_empty() {
                        reasoning.text.push_str(&text);
                        out.push(StreamEvent::ReasoningDelta { text });
                    }
                }
                wire::DeltaIn::SignatureDelta { signature } => self
                    .thinking_block(index, "signature_delta")?
                    .signature
                    .get_or_insert_default()
                    .push_str(&signature),
                wire::DeltaIn::Other => {}
            },
            StreamEventIn::ContentBlockStop { index } => {
                self.end_thinking(Some(index), out);
                self.end_answer(index, out);
                if let Some(tool) = self.tool_index(index)
                    && let Some(call) = self.calls.finish(tool)
                {
                    out.push(StreamEvent::ToolCallEnd {
                        index: tool,
                        call: call?,
                    });
                }
            }
            StreamEventIn::MessageDelta { delta, usage } => {
                if let Some(reason) = delta.stop_reason {
                    self.stop_reason = Some(reason);
                }
                if let Some(usage) = usage {
                    self.add_usage(&usage);
                }
            }
            StreamEventIn::MessageStop => {
                self.end_thinking(None, out);
                if let Some((index, _)) = self.answer_block {
                    self.end_answer(index, out);
                }
                if self.answer.is_some()
                    && self.tool_blocks.is_empty()
                    && self.stop_reason.as_deref() == Some("tool_use")
                {
                    self.stop_reason = Some("end_turn".to_owned());
                }
                for (tool, call) in self.calls.finish_all() {
                    out.push(StreamEvent::ToolCallEnd {
                        index: tool,
                        call: call?,
                    });
                }
                let reason = stop_reason(self.stop_reason.as_deref())?;
                out.push(StreamEvent::Usage(
                    Usage::new(self.input_tokens, self.output_tokens)
                        .with_cache_read(self.cache_read_tokens)
                        .with_cache_write(self.cache_write_tokens),
                ));
                out.push(StreamEvent::finish(reason));
                return Ok(Flow::Done);
            }
            StreamEventIn::Error { error } => {
                return Err(error_from_body(&error.kind, error.message));
            }
            StreamEventIn::Ping | StreamEventIn::Unknown => {}
        }
        Ok(Flow::Continue)
    }

    fn finish(&mut self, _out: &mut Vec<StreamEvent>) -> Result<(), ModelError> {
        Err(ModelError::malformed(
            "the stream ended before `message_stop`; it was cut off",
        ))
    }
}
