//! Recording a real model's exchanges to a JSON file, and replaying them.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use async_trait::async_trait;
use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::durable::{self, write_atomic};
use crate::llm::LanguageModel;
use crate::llm::error::ModelError;
use crate::llm::request::ModelRequest;
use crate::llm::response::ModelResponse;
use crate::llm::stream::{ModelStream, StreamEvent, collect_stream};

/// The file format version this crate writes and reads.
const FORMAT_VERSION: u32 = 1;

/// How a recorded request was answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A whole response (the request was made with `complete`).
    Response(ModelResponse),
    /// A stream (the request was made with `stream`): the events as they came,
    /// and the error that ended it early, if one did.
    Stream {
        /// The events, in order.
        events: Vec<StreamEvent>,
        /// The error that ended the stream, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<ModelError>,
    },
    /// An error instead of an answer.
    Error(ModelError),
}

/// One request and how it was answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Exchange {
    /// The request as sent.
    pub request: ModelRequest,
    /// The answer.
    pub outcome: Outcome,
}

/// A recording: the exchanges with one model, in the order they completed.
/// This is the JSON file's content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recording {
    /// File format version.
    pub version: u32,
    /// The recorded model's provider.
    pub provider: String,
    /// The recorded model's name.
    pub model: String,
    /// The exchanges.
    pub exchanges: Vec<Exchange>,
}

impl Recording {
    /// An empty recording for the given provider and model names.
    pub fn new(provider: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            version: FORMAT_VERSION,
            provider: provider.into(),
            model: model.into(),
            exchanges: Vec::new(),
        }
    }

    /// Reads a recording from a JSON file.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ModelError> {
        let path = path.as_ref();
        let failure = |message: String| ModelError::Recording {
            path: path.to_owned(),
            message,
        };
        let text = fs::read_to_string(path).map_err(|e| failure(format!("cannot read it: {e}")))?;
        let recording: Recording = serde_json::from_str(&text)
            .map_err(|e| failure(format!("it is not a recording: {e}")))?;
        if recording.version != FORMAT_VERSION {
            return Err(failure(format!(
                "it has format version {}, but this crate reads version {FORMAT_VERSION}; re-record it",
                recording.version
            )));
        }
        Ok(recording)
    }

    /// Writes the recording as pretty JSON, replacing the file atomically.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), ModelError> {
        let path = path.as_ref();
        let failure = |message: String| ModelError::Recording {
            path: path.to_owned(),
            message,
        };
        let text = serde_json::to_string_pretty(self).map_err(|e| failure(e.to_string()))?;
        // A crash leaves the previous recording or this one, whole.
        write_atomic(path, (text + "\n").as_bytes(), durable::Sync::FileAndDir)
            .map_err(|e| failure(e.to_string()))
    }
}

/// Where a [`Recorded`] model keeps its recording.
#[derive(Debug)]
struct Sink {
    path: PathBuf,
    recording: Mutex<Recording>,
}

impl Sink {
    fn lock(&self) -> MutexGuard<'_, Recording> {
        self.recording
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn append(&self, exchange: Exchange) -> Result<(), ModelError> {
        let mut recording = self.lock();
        recording.exchanges.push(exchange);
        recording.save(&self.path)
    }
}

/// A [`LanguageModel`] wrapper that records every exchange with the wrapped
/// model to a JSON file, rewriting the file after each one. Replay the file
/// with [`Replay`].
///
/// The recording starts empty, replacing any file at the path once the first
/// exchange completes. Failing to write the file fails the call with
/// [`ModelError::Recording`]. A stream is recorded when it ends or is dropped.
///
/// ```no_run
/// use harness::llm::{LanguageModel, Recorded, ScriptedModel};
///
/// # fn demo(real_model: ScriptedModel) {
/// let model = Recorded::new(real_model, "tests/recordings/weather.json");
/// # }
/// ```
#[derive(Debug)]
pub struct Recorded<M> {
    inner: M,
    sink: Arc<Sink>,
}

impl<M: LanguageModel> Recorded<M> {
    /// Records `inner`'s exchanges to the file at `path`.
    pub fn new(inner: M, path: impl Into<PathBuf>) -> Self {
        let recording = Recording::new(inner.provider(), inner.model_name());
        Self {
            inner,
            sink: Arc::new(Sink {
                path: path.into(),
                recording: Mutex::new(recording),
            }),
        }
    }

    /// The exchanges recorded so far.
    pub fn recording(&self) -> Recording {
        self.sink.lock().clone()
    }

    /// The wrapped model.
    pub fn into_inner(self) -> M {
        self.inner
    }
}

#[async_trait]
impl<M: LanguageModel> LanguageModel for Recorded<M> {
    async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        let result = self.inner.complete(request).await;
        let outcome = match &result {
            Ok(response) => Outcome::Response(response.clone()),
            Err(error) => Outcome::Error(error.clone()),
        };
        self.sink.append(Exchange {
            request: request.clone(),
            outcome,
        })?;
        result
    }

    async fn stream(&self, request: &ModelRequest) -> Result<ModelStream, ModelError> {
        match self.inner.stream(request).await {
            Ok(inner) => Ok(Box::pin(TeeStream {
                inner,
                events: Vec::new(),
                request: Some(request.clone()),
                sink: Arc::clone(&self.sink),
            })),
            Err(error) => {
                self.sink.append(Exchange {
                    request: request.clone(),
                    outcome: Outcome::Error(error.clone()),
                })?;
                Err(error)
            }
        }
    }

    fn provider(&self) -> &str {
        self.inner.provider()
    }

    fn model_name(&self) -> &str {
        self.inner.model_name()
    }
}

/// Passes a stream through while keeping its events, and records them once.
struct TeeStream {
    inner: ModelStream,
    events: Vec<StreamEvent>,
    /// `None` once the exchange has been recorded.
    request: Option<ModelRequest>,
    sink: Arc<Sink>,
}

impl TeeStream {
    fn record(&mut self, error: Option<ModelError>) -> Result<(), ModelError> {
        match self.request.take() {
            Some(request) => self.sink.append(Exchange {
                request,
                outcome: Outcome::Stream {
                    events: std::mem::take(&mut self.events),
                    error,
                },
            }),
            None => Ok(()),
        }
    }
}

impl Stream for TeeStream {
    type Item = Result<StreamEvent, ModelError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.request.is_none() {
            return Poll::Ready(None);
        }
        match this.inner.poll_next_unpin(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Ok(event))) => {
                this.events.push(event.clone());
                Poll::Ready(Some(Ok(event)))
            }
            Poll::Ready(Some(Err(error))) => match this.record(Some(error.clone())) {
                Ok(()) => Poll::Ready(Some(Err(error))),
                Err(recording_error) => Poll::Ready(Some(Err(recording_error))),
            },
            Poll::Ready(None) => match this.record(None) {
                Ok(()) => Poll::Ready(None),
                Err(recording_error) => Poll::Ready(Some(Err(recording_error))),
            },
        }
    }
}

impl Drop for TeeStream {
    fn drop(&mut self) {
        // A consumer that stops early still leaves a record of what it saw.
        if let Err(error) = self.record(None) {
            tracing::warn!(%error, "could not record a stream that was dropped early");
        }
    }
}

#[derive(Debug, Default)]
struct ReplayState {
    used: Vec<bool>,
    served: usize,
}

/// A [`LanguageModel`] that answers from a [`Recording`], deterministically
/// and without a network.
///
/// Each request must equal a recorded, not yet used request: the next one in
/// order, or (for loops that issue requests concurrently) any later one. A
/// request that matches none gets a [`ModelError::ReplayMismatch`] that names
/// the turn and the first place it differs from the next recorded request.
/// Recorded streams replay as the same events; a recorded whole response
/// replays as a stream too, and vice versa.
///
/// ```no_run
/// use harness::llm::{LanguageModel, Message, ModelRequest, Replay};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), harness::llm::ModelError> {
/// let model = Replay::from_file("tests/recordings/weather.json")?;
/// let response = model.complete(&ModelRequest::new([Message::user("Weather in Paris?")])).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Replay {
    recording: Recording,
    state: Mutex<ReplayState>,
}

impl Replay {
    /// Replays `recording`.
    pub fn new(recording: Recording) -> Self {
        let used = vec![false; recording.exchanges.len()];
        Self {
            recording,
            state: Mutex::new(ReplayState { used, served: 0 }),
        }
    }

    /// Replays the recording in the JSON file at `path`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ModelError> {
        Recording::load(path).map(Self::new)
    }

    /// How many recorded exchanges have not been replayed yet.
    pub fn remaining(&self) -> usize {
        self.lock().used.iter().filter(|used| !**used).count()
    }

    fn lock(&self) -> MutexGuard<'_, ReplayState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn next_outcome(&self, request: &ModelRequest) -> Result<Outcome, ModelError> {
        let mut state = self.lock();
        state.served += 1;
        let turn = state.served;
        let mismatch = |message: String| ModelError::ReplayMismatch { turn, message };
        let actual = serde_json::to_value(request)
            .map_err(|e| mismatch(format!("the request cannot be serialized: {e}")))?;
        let unused: Vec<usize> = (0..state.used.len()).filter(|i| !state.used[*i]).collect();
        let Some(&next) = unused.first() else {
            return Err(mismatch(format!(
                "the recording has {} exchanges and all were replayed",
                self.recording.exchanges.len()
            )));
        };
        let recorded =
            |index: usize| serde_json::to_value(&self.recording.exchanges[index].request);
        let matching = unused
            .iter()
            .copied()
            .find(|index| recorded(*index).is_ok_and(|value| value == actual));
        match matching {
            Some(index) => {
                state.used[index] = true;
                Ok(self.recording.exchanges[index].outcome.clone())
            }
            None => {
                let expected = recorded(next).unwrap_or(Value::Null);
                let difference = first_difference(&expected, &actual, &mut String::new())
                    .unwrap_or_else(|| "the requests differ".to_owned());
                Err(mismatch(format!(
                    "the request differs from recorded exchange {}: {difference}",
                    next + 1
                )))
            }
        }
    }
}

#[async_trait]
impl LanguageModel for Replay {
    async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        match self.next_outcome(request)? {
            Outcome::Response(response) => Ok(response),
            Outcome::Error(error) => Err(error),
            Outcome::Stream { events, error } => collect_stream(replayed(events, error)).await,
        }
    }

    async fn stream(&self, request: &ModelRequest) -> Result<ModelStream, ModelError> {
        match self.next_outcome(request)? {
            Outcome::Response(response) => Ok(response.into_stream()),
            Outcome::Error(error) => Err(error),
            Outcome::Stream { events, error } => Ok(Box::pin(replayed(events, error))),
        }
    }

    fn provider(&self) -> &str {
        &self.recording.provider
    }

    fn model_name(&self) -> &str {
        &self.recording.model
    }
}

fn replayed(
    events: Vec<StreamEvent>,
    error: Option<ModelError>,
) -> impl Stream<Item = Result<StreamEvent, ModelError>> + Send + 'static {
    futures::stream::iter(events.into_iter().map(Ok).chain(error.map(Err)))
}

/// Where `actual` first differs from `expected`, as "at PATH: recorded X, got Y".
fn first_difference(expected: &Value, actual: &Value, path: &mut String) -> Option<String> {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            let mut keys: Vec<&String> = e.keys().chain(a.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
                let null = Value::Null;
                let found = first_difference(
                    e.get(key).unwrap_or(&null),
                    a.get(key).unwrap_or(&null),
                    path,
                );
                path.truncate(len);
                if found.is_some() {
                    return found;
                }
            }
            None
        }
        (Value::Array(e), Value::Array(a)) => {
            for (i, (x, y)) in e.iter().zip(a).enumerate() {
                let len = path.len();
                let _ = write!(path, "[{i}]");
                let found = first_difference(x, y, path);
                path.truncate(len);
                if found.is_some() {
                    return found;
                }
            }
            (e.len() != a.len()).then(|| {
                format!(
                    "at {}: recorded {} items, got {}",
                    display_path(path),
                    e.len(),
                    a.len()
                )
            })
        }
        _ => (expected != actual).then(|| {
            format!(
                "at {}: recorded {}, got {}",
                display_path(path),
                abbreviated(expected),
                abbreviated(actual)
            )
        }),
    }
}

fn display_path(path: &str) -> &str {
    if path.is_empty() {
        "the top level"
    } else {
        path
    }
}

fn abbreviated(value: &Value) -> String {
    const LIMIT: usize = 120;
    let text = value.to_string();
    match text.char_indices().nth(LIMIT) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}
