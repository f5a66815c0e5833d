//! Streamed chat completions: `data:` chunks up to `data: [DONE]`.

use harness::llm::{ModelError, PartialToolCalls, ResponseFormat, StreamEvent, Usage};
use harness_provider_http::{Flow, SseDecoder, SseEvent, error_from_body, excerpt};

use crate::completion::{stop_reason, usage};
use crate::wire;

/// Assembles tool calls from their per-index deltas and remembers the finish
/// reason and usage, which arrive in separate chunks before `[DONE]`.
#[derive(Debug, Default)]
pub(crate) struct ChunkDecoder {
    calls: PartialToolCalls,
    /// Indexes of calls seen, in order.
    seen: Vec<usize>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    refusal: String,
    /// The request's format when its answer travels wrapped: the text is
    /// gathered and unwrapped at the end.
    wrapped: Option<ResponseFormat>,
    text: String,
}

impl ChunkDecoder {
    pub(crate) fn new(wrapped: Option<ResponseFormat>) -> Self {
        Self {
            wrapped,
            ..Self::default()
        }
    }

    fn complete(&mut self, out: &mut Vec<StreamEvent>) -> Result<(), ModelError> {
        if let Some(format) = &self.wrapped
            && !self.text.is_empty()
        {
            out.push(StreamEvent::text(format.unwrap_answer(&self.text)));
            self.text.clear();
        }
        for (index, call) in self.calls.finish_all() {
            out.push(StreamEvent::ToolCallEnd { index, call: call? });
        }
        if !self.refusal.is_empty() {
            return Err(ModelError::ContentFiltered {
                reason: std::mem::take(&mut self.refusal),
            });
        }
        let stop_reason = stop_reason(self.finish_reason.as_deref(), !self.seen.is_empty())?;
        if let Some(usage) = self.usage {
            out.push(StreamEvent::Usage(usage));
        }
        out.push(StreamEvent::finish(stop_reason));
        Ok(())
    }

    fn tool_call_delta(
        &mut self,
        position: usize,
        delta: wire::ToolCallDelta,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), ModelError> {
        let index = delta.index.unwrap_or(position);
        let function = delta.function.unwrap_or(wire::FunctionDelta {
            name: None,
            arguments: None,
        });
        if !self.seen.contains(&index) {
            let name = function.name.ok_or_else(|| {
                ModelError::malformed(format!("tool call {index} began without a function name"))
            })?;
            let id = delta.id.unwrap_or_else(|| format!("call_{index}"));
            self.calls.start(index, id.clone(), name.clone());
            self.seen.push(index);
            out.push(StreamEvent::ToolCallStart { index, id, name });
        }
        if let Some(arguments) = function.arguments.filter(|a| !a.is_empty())
            && self.calls.append(index, &arguments)
        {
            out.push(StreamEvent::ToolCallDelta { index, arguments });
        }
        Ok(())
    }
}

impl SseDecoder for ChunkDecoder {
    fn decode(&mut self, event: SseEvent, out: &mut Vec<StreamEvent>) -> Result<Flow, ModelError> {
        let data = event.data.trim();
        if data == "[DONE]" {
            self.complete(out)?;
            return Ok(Flow::Done);
        }
        if data.is_empty() {
            return Ok(Flow::Continue);
        }
        let chunk: wire::ChatChunk = serde_json::from_str(data).map_err(|e| {
            // A bounded, redacted quote: the event may be megabytes, and
            // the message goes back to the model and into logs.
            ModelError::malformed(format!(
                "a stream chunk is not the expected JSON ({e}): {:?}",
                excerpt(data, 200)
            ))
        })?;
        if let Some(error) = chunk.error {
            let kind = error
                .kind
                .or_else(|| error.code.and_then(|c| c.as_str().map(str::to_owned)))
                .unwrap_or_default();
            return Err(error_from_body(&kind, error.message));
        }
        if let Some(chunk_usage) = chunk.usage {
            self.usage = Some(usage(Some(chunk_usage)));
        }
        for choice in chunk.choices {
            if let Some(delta) = choice.delta {
                if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
                    if self.wrapped.is_some() {
                        self.text.push_str(&text);
                    } else {
                        out.push(StreamEvent::text(text));
                    }
                }
                if let Some(refusal) = delta.refusal {
                    self.refusal.push_str(&refusal);
                }
                for (position, call) in delta.tool_calls.into_iter().flatten().enumerate() {
                    self.tool_call_delta(position, call, out)?;
                }
            }
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason);
            }
        }
        Ok(Flow::Continue)
    }

    fn finish(&mut self, out: &mut Vec<StreamEvent>) -> Result<(), ModelError> {
        // Some compatible servers end the body after the finish reason
        // without `[DONE]`; that answer is complete.
        if self.finish_reason.is_some() {
            return self.complete(out);
        }
        Err(ModelError::malformed(
            "the stream ended before its finish reason and `[DONE]`; it was cut off",
        ))
    }
}
