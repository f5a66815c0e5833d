//! Streamed answers: each SSE event is a whole `GenerateContentResponse`
//! carrying the next parts; the last one has a `finishReason`.

use harness::llm::{ModelError, Reasoning, StreamEvent, Usage};
use harness_provider_http::{Flow, SseDecoder, SseEvent, excerpt};

use crate::completion::{bare_signature, check_blocked, stop_reason, thought, tool_call, usage};
use crate::wire;

/// Gemini sends each function call whole, so each becomes a start, one
/// delta and an end at once. A thought comes in pieces over several chunks:
/// it is gathered until a piece carries a signature or another part comes.
#[derive(Debug, Default)]
pub(crate) struct ChunkDecoder {
    calls: usize,
    thought: Option<Reasoning>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
}

impl ChunkDecoder {
    /// Emits the thought gathered so far, unless it is empty.
    fn end_thought(&mut self, out: &mut Vec<StreamEvent>) {
        if let Some(reasoning) = self.thought.take()
            && (!reasoning.text.is_empty() || reasoning.signature.is_some())
        {
            out.push(StreamEvent::ReasoningEnd { reasoning });
        }
    }
}

impl SseDecoder for ChunkDecoder {
    fn decode(&mut self, event: SseEvent, out: &mut Vec<StreamEvent>) -> Result<Flow, ModelError> {
        let chunk: wire::GenerateResponse = serde_json::from_str(&event.data).map_err(|e| {
            ModelError::malformed(format!(
                "a stream chunk is not the expected JSON ({e}): {:?}",
                // A bounded, redacted quote: the event may be megabytes,
                // and the message goes back to the model and into logs.
                excerpt(&event.data, 200)
            ))
        })?;
        if let Some(error) = chunk.error {
            return Err(error.into_model_error());
        }
        check_blocked(&chunk)?;
        if let Some(metadata) = chunk.usage_metadata {
            self.usage = Some(usage(metadata));
        }
        let Some(candidate) = chunk.candidates.into_iter().next() else {
            return Ok(Flow::Continue);
        };
        for part in candidate.content.map(|c| c.parts).unwrap_or_default() {
            if part.thought == Some(true) {
                let text = part.text.filter(|text| !text.is_empty());
                let gathered = self
                    .thought
                    .get_or_insert_with(|| thought(String::new(), None));
                if let Some(text) = text {
                    gathered.text.push_str(&text);
                    out.push(StreamEvent::ReasoningDelta { text });
                }
                if let Some(signature) = part.thought_signature {
                    gathered.signature = Some(signature);
                    self.end_thought(out);
                }
                continue;
            }
            self.end_thought(out);
            if let Some(call) = part.function_call {
                let index = self.calls;
                self.calls += 1;
                let call = tool_call(call, index, part.thought_signature);
                out.push(StreamEvent::ToolCallStart {
                    index,
                    id: call.id.clone(),
                    name: call.name.clone(),
                });
                out.push(StreamEvent::ToolCallDelta {
                    index,
                    arguments: call.arguments.to_string(),
                });
                out.push(StreamEvent::ToolCallEnd { index, call });
            } else {
                if let Some(text) = part.text.filter(|text| !text.is_empty()) {
                    out.push(StreamEvent::text(text));
                }
                if let Some(signature) = part.thought_signature {
                    out.push(StreamEvent::ReasoningEnd {
                        reasoning: bare_signature(signature),
                    });
                }
            }
        }
        if let Some(reason) = candidate.finish_reason {
            // Fail fast on a safety stop rather than at the end.
            stop_reason(Some(&reason), self.calls > 0)?;
            self.finish_reason = Some(reason);
        }
        Ok(Flow::Continue)
    }

    fn finish(&mut self, out: &mut Vec<StreamEvent>) -> Result<(), ModelError> {
        let Some(reason) = self.finish_reason.as_deref() else {
            return Err(ModelError::malformed(
                "the stream ended before a chunk with a finishReason; it was cut off",
            ));
        };
        let stop_reason = stop_reason(Some(reason), self.calls > 0)?;
        self.end_thought(out);
        if let Some(usage) = self.usage {
            out.push(StreamEvent::Usage(usage));
        }
        out.push(StreamEvent::finish(stop_reason));
        Ok(())
    }
}
