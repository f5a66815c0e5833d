//! Streamed chat completions: `data:` chunks up to `data: [DONE]`.

use harness::llm::{ModelError, PartialToolCalls, ResponseFormat, StreamEvent, Usage};
use harness_provider_http::{Flow, SseDecoder, SseEvent, excerpt};

use crate::completion::{stop_reason, usage};
use crate::wire;

/// Assembles tool calls from their per-index deltas and remembers the finish
/// reason and usage, which arrive in separate chunks before `[DONE]`.
#[derive(Debug, Default)]
pub(crate) struct ChunkDecoder {
    calls: PartialToolCalls,
    /// Indexes of calls seen, in order, with each one's id.
    seen: Vec<(usize, String)>,
    /// The call each index of the wire last started.
    wire: Vec<(usize, usize)>,
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

    /// The call a delta continues, if it continues one. Only a delta that
    /// names a function starts a call: one of an index no call has yet,
    /// one naming both a function and an id other than that of the call
    /// its index holds (servers that number every call 0), or one naming a
    /// function without an index (some servers and proxies send none) and
    /// without the id of a call already started. A delta without a
    /// function's name continues the call of its index, else of its id,
    /// else the last one started at its position in the chunk.
    fn continued(&self, delta: &wire::ToolCallDelta, position: usize) -> Option<usize> {
        let id_of = |index: usize| {
            self.seen
                .iter()
                .find(|(i, _)| *i == index)
                .map(|(_, id)| id)
        };
        let at_wire = |wire: usize| {
            self.wire
                .iter()
                .rev()
                .find(|(w, _)| *w == wire)
                .map(|(_, ours)| *ours)
        };
        let named = delta
            .function
            .as_ref()
            .and_then(|f| f.name.as_deref())
            .is_some_and(|name| !name.is_empty());
        let id = delta.id.as_deref().filter(|id| !id.is_empty());
        match delta.index {
            Some(wire) => {
                let ours = at_wire(wire)?;
                match id {
                    Some(id) if named && id_of(ours).is_some_and(|seen| seen != id) => None,
                    _ => Some(ours),
                }
            }
            None => {
                if let Some(id) = id
                    && let Some((ours, _)) = self.seen.iter().find(|(_, s)| s == id)
                {
                    return Some(*ours);
                }
                if named {
                    return None;
                }
                at_wire(position).or_else(|| self.seen.last().map(|(i, _)| *i))
            }
        }
    }

    fn tool_call_delta(
        &mut self,
        position: usize,
        delta: wire::ToolCallDelta,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), ModelError> {
        let continued = self.continued(&delta, position);
        let function = delta.function.unwrap_or(wire::FunctionDelta {
            name: None,
            arguments: None,
        });
        let index = match continued {
            Some(index) => index,
            None => {
                // The wire's index when no call has it yet, else the next
                // one free.
                let taken = |i: usize| self.seen.iter().any(|(s, _)| *s == i);
                let wanted = delta.index.unwrap_or(position);
                let index = if taken(wanted) {
                    self.seen.iter().map(|(s, _)| s + 1).max().unwrap_or(0)
                } else {
                    wanted
                };
                let name = function.name.ok_or_else(|| {
                    ModelError::malformed(format!(
                        "tool call {index} began without a function name"
                    ))
                })?;
                let id = delta
                    .id
                    .filter(|id| !id.is_empty())
                    .unwrap_or_else(|| format!("call_{index}"));
                self.calls.start(index, id.clone(), name.clone());
                self.seen.push((index, id.clone()));
                self.wire.push((wanted, index));
                out.push(StreamEvent::ToolCallStart { index, id, name });
                index
            }
        };
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
            return Err(error.into_model_error());
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
