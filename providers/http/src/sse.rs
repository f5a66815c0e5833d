//! Server-sent events: from a response body to a [`ModelStream`].

use std::collections::VecDeque;
use std::pin::Pin;
use std::time::Duration;

use futures::{Stream, StreamExt};
use harness::llm::{ModelError, ModelStream, StreamEvent};

/// One server-sent event that carried data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, if the server named the event type.
    pub event: Option<String>,
    /// The `data:` lines, joined with newlines.
    pub data: String,
}

/// A stream of [`SseEvent`]s; an `Err` item ends it.
pub type SseEvents = Pin<Box<dyn Stream<Item = Result<SseEvent, ModelError>> + Send>>;

/// What a decoder wants after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// More events are expected.
    Continue,
    /// The provider marked the end of the answer (`[DONE]`, `message_stop`).
    Done,
}

/// A provider's stream format: turns its SSE events into [`StreamEvent`]s.
pub trait SseDecoder: Send + 'static {
    /// Decodes one event, pushing what it yields onto `out`.
    fn decode(&mut self, event: SseEvent, out: &mut Vec<StreamEvent>) -> Result<Flow, ModelError>;

    /// Called when the body ends without [`Flow::Done`]: pushes the last
    /// events, or fails if the answer is incomplete (the stream was cut off).
    fn finish(&mut self, out: &mut Vec<StreamEvent>) -> Result<(), ModelError>;
}

struct Decoding<D> {
    events: SseEvents,
    decoder: D,
    pending: VecDeque<Result<StreamEvent, ModelError>>,
    finished: bool,
}

impl<D: SseDecoder> Decoding<D> {
    fn queue(&mut self, out: Vec<StreamEvent>, result: Result<(), ModelError>) {
        self.pending.extend(out.into_iter().map(Ok));
        if let Err(error) = result {
            self.pending.push_back(Err(error));
            self.finished = true;
        }
    }
}

/// Decodes `events` with `decoder` into a [`ModelStream`]. The first error
/// (from the body or the decoder) is the stream's last item.
pub fn decode_events<D: SseDecoder>(events: SseEvents, decoder: D) -> ModelStream {
    let state = Decoding {
        events,
        decoder,
        pending: VecDeque::new(),
        finished: false,
    };
    Box::pin(futures::stream::unfold(state, |mut state| async move {
        loop {
            if let Some(item) = state.pending.pop_front() {
                return Some((item, state));
            }
            if state.finished {
                return None;
            }
            let mut out = Vec::new();
            match state.events.next().await {
                Some(Ok(event)) => {
                    let result = state.decoder.decode(event, &mut out);
                    if matches!(result, Ok(Flow::Done)) {
                        state.finished = true;
                    }
                    state.queue(out, result.map(|_| ()));
                }
                Some(Err(error)) => state.queue(out, Err(error)),
                None => {
                    let result = state.decoder.finish(&mut out);
                    state.finished = true;
                    state.queue(out, result);
                }
            }
        }
    }))
}

/// The events in `body`, failing with a [`ModelError::Timeout`] when no
/// chunk arrives for `idle`.
pub(crate) fn sse_events(response: reqwest::Response, idle: Duration) -> SseEvents {
    let decoder = Box::pin(sse_stream::SseByteStream::new(response.bytes_stream()));
    Box::pin(futures::stream::unfold(
        Some(decoder),
        move |decoder| async move {
            let mut decoder = decoder?;
            loop {
                match tokio::time::timeout(idle, decoder.next()).await {
                    Err(_) => return Some((Err(ModelError::Timeout { after: idle }), None)),
                    Ok(None) => return None,
                    Ok(Some(Ok(sse))) => {
                        if let Some(data) = sse.data {
                            let event = SseEvent {
                                event: sse.event,
                                data,
                            };
                            return Some((Ok(event), Some(decoder)));
                        }
                    }
                    Ok(Some(Err(error))) => {
                        let error = ModelError::Transport {
                            message: format!("the event stream broke: {}", error_chain(&error)),
                        };
                        return Some((Err(error), None));
                    }
                }
            }
        },
    ))
}

/// An error and its causes, joined.
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
