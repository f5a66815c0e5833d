//! Server-sent events: from a response body to a [`ModelStream`].

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::retry::HttpOptions;

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
            // What the server or the decoder said may quote a secret.
            self.pending.push_back(Err(error.redacted()));
            self.finished = true;
        }
    }
}

/// Decodes `events` with `decoder` into a [`ModelStream`]. The first error
/// (from the body or the decoder) is the stream's last item,
/// [redacted](ModelError::redacted).
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
/// chunk arrives for the idle timeout or the stream outlasts its deadline,
/// and with [`ModelError::ResponseTooLarge`] at a line or event over
/// [`HttpOptions::max_event_bytes`] or a stream over
/// [`HttpOptions::max_stream_bytes`]. A timeout names `model`.
pub(crate) fn sse_events(
    response: reqwest::Response,
    options: &HttpOptions,
    model: &str,
) -> SseEvents {
    let model = model.to_owned();
    let (idle, deadline) = (options.stream_idle_timeout, options.stream_deadline);
    let limits = Limits {
        event: options.max_event_bytes,
        stream: options.max_stream_bytes,
    };
    let guard = Arc::new(Mutex::new(EventSize::default()));
    let bytes = {
        let guard = Arc::clone(&guard);
        // A chunk that takes a line or an event past the limit ends the
        // body there: the decoder never buffers it.
        response.bytes_stream().take_while(move |chunk| {
            let within = match chunk {
                Ok(bytes) => lock(&guard).take(bytes, limits),
                Err(_) => true,
            };
            futures::future::ready(within)
        })
    };
    let decoder = Box::pin(sse_stream::SseByteStream::new(bytes));
    // A deadline too far to be a point in time (`Duration::MAX`) is none.
    let ends_at = Instant::now().checked_add(deadline);
    Box::pin(futures::stream::unfold(Some(decoder), move |decoder| {
        let guard = Arc::clone(&guard);
        let model = model.clone();
        async move {
            let mut decoder = decoder?;
            loop {
                let left = ends_at.map_or(Duration::MAX, |at| {
                    at.saturating_duration_since(Instant::now())
                });
                let wait = idle.min(left);
                let next = tokio::time::timeout(wait, decoder.next()).await;
                let over = lock(&guard).over;
                if let Some(over) = over {
                    let (what, limit) = match over {
                        Over::Event => ("stream event (or line)", limits.event),
                        Over::Stream => ("stream (its events together)", limits.stream),
                    };
                    let error = ModelError::ResponseTooLarge {
                        what: what.into(),
                        limit,
                    };
                    return Some((Err(error), None));
                }
                match next {
                    Err(_) => {
                        let after = if wait < idle { deadline } else { idle };
                        let error = ModelError::timeout(after).for_model(&model).redacted();
                        return Some((Err(error), None));
                    }
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
        }
    }))
}

fn lock(m: &Mutex<EventSize>) -> std::sync::MutexGuard<'_, EventSize> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The limits [`EventSize`] checks, in bytes.
#[derive(Debug, Clone, Copy)]
struct Limits {
    /// A line, and an event.
    event: u64,
    /// The whole stream.
    stream: u64,
}

/// Which limit a stream went past.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Over {
    Event,
    Stream,
}

/// The size of the line and of the event being received, across chunks,
/// and of the stream so far. Lines end at CR, LF or CRLF; an empty line
/// ends an event.
#[derive(Debug, Default)]
struct EventSize {
    line: u64,
    event: u64,
    total: u64,
    after_cr: bool,
    over: Option<Over>,
}

impl EventSize {
    /// Counts `bytes`; false (and `over` set) once a line or an event
    /// exceeds `limits.event`, or the stream `limits.stream`.
    fn take(&mut self, bytes: &[u8], limits: Limits) -> bool {
        self.total = self.total.saturating_add(bytes.len() as u64);
        if self.total > limits.stream {
            self.over = Some(Over::Stream);
            return false;
        }
        let limit = limits.event;
        for &b in bytes {
            match b {
                b'\n' if self.after_cr => self.after_cr = false,
                b'\n' | b'\r' => {
                    if self.line == 0 {
                        self.event = 0;
                    }
                    self.line = 0;
                    self.after_cr = b == b'\r';
                }
                _ => {
                    self.after_cr = false;
                    self.line += 1;
                    self.event += 1;
                    if self.line > limit || self.event > limit {
                        self.over = Some(Over::Event);
                        return false;
                    }
                }
            }
        }
        true
    }
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
