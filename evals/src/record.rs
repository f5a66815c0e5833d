//! What a case's run left behind: its model exchanges, its events, its
//! costs. Enough to score it again without calling a model, and to replay it.

use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use futures::StreamExt;
use harness::llm::{
    Exchange, LanguageModel, ModelError, ModelRequest, ModelResponse, ModelStream, Outcome,
    PriceTable, Recording, Replay, StreamCollector, StreamEvent, ToolCall, Usage,
};
use harness::{HarnessState, RunEvent};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One event of a case's run, as data (the run's state type erased).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventRecord {
    /// The event's kind: `step_finished`, `step_failed`, `interrupted`, … (see
    /// [`RunEvent::kind`]); a sub-agent's step events are recorded with their
    /// own kind (`step_finished`, …), not as `child`.
    pub kind: String,
    /// The task it happened in (`""` for the run's own loop).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path: String,
    /// The step, for a step's events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// The signal a finished step routed to, or a finished run ended with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// The step's time, for a finished step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elapsed_ms: Option<f64>,
    /// The error, for a failed step or run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// A custom event's payload, an interrupt's payload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Value>,
}

impl EventRecord {
    fn new(kind: &str) -> Self {
        Self {
            kind: kind.to_owned(),
            path: String::new(),
            step: None,
            signal: None,
            elapsed_ms: None,
            error: None,
            payload: None,
        }
    }

    /// Records `event`; token events are not kept.
    pub fn from_event<S: HarnessState>(event: &RunEvent<S>) -> Option<Self> {
        let path = event.path();
        let path = if path.is_root() {
            String::new()
        } else {
            path.to_string()
        };
        let mut record = Self::new(event.kind());
        record.path = path;
        match event {
            RunEvent::Token { .. } => return None,
            RunEvent::Started { .. } | RunEvent::Forked { .. } | RunEvent::Joined { .. } => {}
            RunEvent::StepStarted { step, .. } => record.step = Some(step.to_string()),
            RunEvent::StepFinished {
                step,
                elapsed,
                signal,
                ..
            } => {
                record.step = Some(step.to_string());
                record.elapsed_ms = Some(elapsed.as_secs_f64() * 1e3);
                record.signal = signal.as_ref().map(|s| s.as_str().to_owned());
            }
            RunEvent::StepFailed { step, error, .. } => {
                record.step = Some(step.to_string());
                record.error = Some(error.clone());
            }
            RunEvent::Child {
                step, kind, detail, ..
            } => {
                record.kind = kind.to_string();
                record.step = Some(step.to_string());
                record.elapsed_ms = detail.get("elapsed_ms").and_then(Value::as_f64);
                record.signal = detail
                    .get("signal")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                record.error = detail
                    .get("error")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
            }
            RunEvent::Custom {
                step,
                kind,
                payload,
                ..
            } => {
                record.step = Some(step.to_string());
                record.signal = Some(kind.to_string());
                record.payload = Some(payload.clone());
            }
            RunEvent::Interrupted(interrupt) => {
                record.payload = Some(interrupt.payload.clone());
            }
            RunEvent::AnswerAccepted { step, .. } => record.step = Some(step.to_string()),
            RunEvent::Finished { signal, .. } => {
                record.signal = Some(signal.as_str().to_owned());
            }
            RunEvent::Failed { error } => record.error = Some(error.clone()),
            // A kind this crate does not know yet: kept by its kind alone.
            _ => {}
        }
        Some(record)
    }

    /// The step as a trajectory entry: `step` in the run's own loop,
    /// `path/step` in a branch or a sub-agent.
    pub fn qualified_step(&self) -> Option<String> {
        let step = self.step.as_deref()?;
        Some(if self.path.is_empty() {
            step.to_owned()
        } else {
            format!("{}/{step}", self.path)
        })
    }
}

/// What a case cost.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    /// Wall time of the task's last attempt.
    pub latency_ms: f64,
    /// Model calls the task made (its last attempt).
    pub model_calls: u32,
    /// Tokens of those calls.
    pub usage: Usage,
    /// Their cost, when the experiment has prices for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    /// Attempts made (1, or more after transient model errors).
    pub attempts: u32,
}

/// Everything a case's run left behind.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CaseRecord {
    /// The task's model exchanges, in the order they completed.
    #[serde(default)]
    pub exchanges: Vec<Exchange>,
    /// The judges' exchanges (replayed when the report is re-scored).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub judge_exchanges: Vec<Exchange>,
    /// The events of the runs the task observed.
    #[serde(default)]
    pub events: Vec<EventRecord>,
    /// The sessions of those runs (for a link to their timeline).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sessions: Vec<String>,
    /// What the case cost.
    pub metrics: Metrics,
    /// Why the exchanges, events and sessions are missing, when they were
    /// dropped because they could not be redacted (see the crate's docs on
    /// secrets): a replay of this case diverges at its first model call, and
    /// a re-score reports an error for every evaluator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub withheld: Option<String>,
}

impl CaseRecord {
    /// The tool calls the model asked for, in order.
    pub fn tool_calls(&self) -> Vec<ToolCall> {
        self.exchanges
            .iter()
            .filter_map(|e| response_of(&e.outcome))
            .flat_map(|r| r.tool_calls().cloned().collect::<Vec<_>>())
            .collect()
    }

    /// The steps that finished, in order, qualified by their task path.
    pub fn steps(&self) -> Vec<String> {
        self.events
            .iter()
            .filter(|e| e.kind == "step_finished")
            .filter_map(EventRecord::qualified_step)
            .collect()
    }
}

/// The response an exchange got, for a whole response or a stream that ended
/// well.
pub(crate) fn response_of(outcome: &Outcome) -> Option<ModelResponse> {
    match outcome {
        Outcome::Response(response) => Some(response.clone()),
        Outcome::Stream {
            events,
            error: None,
        } => {
            let mut collector = StreamCollector::new();
            for event in events {
                collector.push(event.clone()).ok()?;
            }
            collector.finish().ok()
        }
        Outcome::Stream { .. } | Outcome::Error(_) => None,
    }
}

/// Tokens and cost of `exchanges` made with `model`.
pub(crate) fn measure(exchanges: &[Exchange], model: &str, prices: &PriceTable) -> Metrics {
    let mut usage = Usage::default();
    for exchange in exchanges {
        match &exchange.outcome {
            Outcome::Response(r) => usage += r.usage,
            Outcome::Stream { events, .. } => {
                for event in events {
                    if let StreamEvent::Usage(u) = event {
                        usage += *u;
                    }
                }
            }
            Outcome::Error(_) => {}
        }
    }
    Metrics {
        model_calls: u32::try_from(exchanges.len()).unwrap_or(u32::MAX),
        usage,
        cost: prices.cost(model, &usage),
        ..Metrics::default()
    }
}

/// Exchanges collected by a [`CaseModel`].
#[derive(Debug, Default, Clone)]
pub(crate) struct Journal(Arc<Mutex<Vec<Exchange>>>);

impl Journal {
    fn lock(&self) -> MutexGuard<'_, Vec<Exchange>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn push(&self, exchange: Exchange) {
        self.lock().push(exchange);
    }

    pub(crate) fn take(&self) -> Vec<Exchange> {
        std::mem::take(&mut *self.lock())
    }
}

/// Where a [`CaseModel`]'s answers come from.
enum Source {
    /// A model, called.
    Live(Arc<dyn LanguageModel>),
    /// A recording, replayed exactly.
    Replay(Replay),
}

/// The model a case's task is given: the experiment's model with every
/// exchange recorded, or a recording replayed. Streams are read whole
/// before they are passed on.
#[derive(Debug)]
pub(crate) struct CaseModel {
    source: Source,
    provider: String,
    model: String,
    journal: Journal,
    /// How many exchanges a replay's recording holds (0 when live).
    recorded: usize,
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Live(model) => write!(f, "Live({})", model.model_name()),
            Source::Replay(replay) => write!(f, "Replay({} left)", replay.remaining()),
        }
    }
}

impl CaseModel {
    pub(crate) fn live(model: Arc<dyn LanguageModel>, journal: Journal) -> Self {
        Self {
            provider: model.provider().to_owned(),
            model: model.model_name().to_owned(),
            source: Source::Live(model),
            journal,
            recorded: 0,
        }
    }

    pub(crate) fn replay(
        provider: &str,
        model: &str,
        exchanges: Vec<Exchange>,
        journal: Journal,
    ) -> Self {
        let mut recording = Recording::new(provider, model);
        let recorded = exchanges.len();
        recording.exchanges = exchanges;
        Self {
            provider: provider.to_owned(),
            model: model.to_owned(),
            source: Source::Replay(Replay::new(recording)),
            journal,
            recorded,
        }
    }

    /// For a replay: how many recorded exchanges have not been replayed,
    /// and how many the recording holds; `None` for a live model.
    pub(crate) fn unreplayed(&self) -> Option<(usize, usize)> {
        match &self.source {
            Source::Live(_) => None,
            Source::Replay(replay) => Some((replay.remaining(), self.recorded)),
        }
    }

    fn inner(&self) -> &dyn LanguageModel {
        match &self.source {
            Source::Live(model) => model.as_ref(),
            Source::Replay(replay) => replay,
        }
    }
}

#[async_trait]
impl LanguageModel for CaseModel {
    async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        let result = self.inner().complete(request).await;
        let outcome = match &result {
            Ok(response) => Outcome::Response(response.clone()),
            Err(error) => Outcome::Error(error.clone()),
        };
        self.journal.push(Exchange {
            request: request.clone(),
            outcome,
        });
        result
    }

    async fn stream(&self, request: &ModelRequest) -> Result<ModelStream, ModelError> {
        let mut stream = match self.inner().stream(request).await {
            Ok(stream) => stream,
            Err(error) => {
                self.journal.push(Exchange {
                    request: request.clone(),
                    outcome: Outcome::Error(error.clone()),
                });
                return Err(error);
            }
        };
        let mut events = Vec::new();
        let mut error = None;
        while let Some(item) = stream.next().await {
            match item {
                Ok(event) => events.push(event),
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
        }
        self.journal.push(Exchange {
            request: request.clone(),
            outcome: Outcome::Stream {
                events: events.clone(),
                error: error.clone(),
            },
        });
        Ok(Box::pin(futures::stream::iter(
            events.into_iter().map(Ok).chain(error.map(Err)),
        )))
    }

    fn provider(&self) -> &str {
        &self.provider
    }

    fn model_name(&self) -> &str {
        &self.model
    }
}
