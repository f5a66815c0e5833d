//! Streamed answers: each SSE event is a whole `GenerateContentResponse`
//! carrying the next parts; the last one has a `finishReason`.

use harness::llm::{ModelError, StreamEvent, Usage};
use harness_provider_http::{Flow, SseDecoder, SseEvent};

use crate::completion::{check_blocked, stop_reason, tool_call, usage};
use crate::wire;

/// Gemini sends each function call whole, so each becomes a start, one
/// delta and an end at once.
#[derive(Debug, Default)]
pub(crate) struct ChunkDecoder {
    calls: usize,
    finish_reason: Option<String>,
    usage: Option<Usage>,
}

impl SseDecoder for ChunkDecoder {
    fn decode(&mut self, event: SseEvent, out: &mut Vec<StreamEvent>) -> Result<Flow, ModelError> {
        let chunk: wire::GenerateResponse = serde_json::from_str(&event.data).map_err(|e| {
            ModelError::malformed(format!(
                "a stream chunk is not the expected JSON ({e}): {:?}",
                event.data
            ))
        })?;
        check_blocked(&chunk)?;
        if let Some(metadata) = chunk.usage_metadata {
            self.usage = Some(usage(metadata));
        }
        let Some(candidate) = chunk.candidates.into_iter().next() else {
            return Ok(Flow::Continue);
        };
        for part in candidate.content.map(|c| c.parts).unwrap_or_default() {
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
            } else if let Some(text) = part.text
                && part.thought != Some(true)
                && !text.is_empty()
            {
                out.push(StreamEvent::text(text));
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
        if let Some(usage) = self.usage {
            out.push(StreamEvent::Usage(usage));
        }
        out.push(StreamEvent::finish(stop_reason));
        Ok(())
    }
}
