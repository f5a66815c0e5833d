//! [`Cx`]: what a step's `run` gets besides the state.

use super::error::StepError;
use super::{Interrupt, ModelCallInfo, ToolCallInfo};
use crate::effect::{EffectId, EffectJournal, Journaled};
use crate::error::StoreError;
use crate::ids::{InterruptId, RunId, SessionId, TaskPath};
use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::ops::Deref;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// What a step has recorded during its current visit: the answers to its
/// interrupts (by order) and the results of its `cx.once` calls (by key).
///
/// It survives retries and resumes of the step and is cleared when the step
/// completes, so re-entering a step never repeats what it already did.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StepJournal {
    /// Answers to the step's interrupts, in the order the step asked.
    pub responses: Vec<Value>,
    /// Results of `cx.once(key, ..)`, by key.
    pub once: BTreeMap<String, Value>,
}

/// Where a step's journal is kept while the step runs: the run's session,
/// when the run has a store.
pub(crate) trait JournalSink: Send + Sync {
    /// Makes `journal` durable, merged into what the session holds for the
    /// current step (`once` results are only ever added, so merging
    /// records made out of order loses nothing).
    fn record<'a>(
        &'a self,
        path: &'a TaskPath,
        journal: StepJournal,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
}

/// Where a step's custom events go: the run's event stream, whatever the
/// state type of the loop the step is in.
pub(crate) trait Emitter: Send + Sync {
    /// Whether anyone listens; nothing is serialized otherwise.
    fn active(&self) -> bool;
    /// Sends a custom event of step `step` at `path`.
    fn emit(&self, path: &TaskPath, step: &Arc<str>, kind: &str, payload: Value);
    /// Sends an event of a sub-agent's loop (whose state type is not the
    /// run's), as data.
    fn child(&self, path: &TaskPath, step: &Arc<str>, kind: &str, detail: Value);
    /// Whether someone listens for the tokens of model calls.
    fn wants_tokens(&self) -> bool;
    /// Sends text a model is streaming.
    fn token(&self, path: &TaskPath, step: &Arc<str>, text: &str);
    /// Tells that step `step` at `path` read and kept the answer to
    /// `interrupt`.
    fn accepted(&self, path: &TaskPath, step: &Arc<str>, interrupt: &InterruptId);
}

/// The run's observers, for the model and tool calls a step makes through
/// its context (whatever the loop's state type).
pub(crate) trait CallHooks: Send + Sync {
    fn model_called<'a>(
        &'a self,
        step: &'a super::StepInfo,
        call: &'a super::ModelCallInfo<'a>,
    ) -> BoxFuture<'a, ()>;
    fn tool_called<'a>(
        &'a self,
        step: &'a super::StepInfo,
        call: &'a super::ToolCallInfo<'a>,
    ) -> BoxFuture<'a, ()>;
}

pub(crate) struct CxShared {
    pub(crate) run_id: RunId,
    pub(crate) session_id: SessionId,
    pub(crate) step: Arc<str>,
    pub(crate) index: u64,
    /// The step's place in its session: steps the session completed before
    /// it (the run's own count when the run has no store). The same on every
    /// attempt, resume and recovery of this step visit.
    pub(crate) visit: u64,
    pub(crate) attempt: u32,
    /// The task the step runs in (the root for the run's own loop).
    pub(crate) path: TaskPath,
    /// The input of a fan-out's branch, for its first step.
    pub(crate) input: Option<Value>,
    emitter: Option<Arc<dyn Emitter>>,
    hooks: Option<Arc<dyn CallHooks>>,
    effects: Option<Arc<dyn EffectJournal>>,
    sink: Option<Arc<dyn JournalSink>>,
    journal: Mutex<StepJournal>,
    next_interrupt: AtomicUsize,
    pending: Mutex<Option<Interrupt>>,
    rejected: Mutex<Option<RejectedAnswer>>,
    /// The interrupt whose answer is the journal's newest, until the step
    /// has read and kept it (then told, once).
    answering: Mutex<Option<InterruptId>>,
    /// Whether the step read and kept that answer.
    accepted: std::sync::atomic::AtomicBool,
    /// The span the step runs in, made when the step began: the parent of
    /// the model and tool calls its `Cx` makes from a task of their own
    /// (spawned), where no span is current. A `Cx` kept past its step
    /// keeps it open.
    span: tracing::Span,
    /// In a branch of a fork on a journal that replays by order, the
    /// permits its model calls take ([`crate::effect::turns::call_permits`]).
    calls: Option<Arc<tokio::sync::Semaphore>>,
}

/// An answer to an interrupt that does not have the shape the step asked
/// for: which answer (by order) and why.
#[derive(Debug)]
pub(crate) struct RejectedAnswer {
    /// Its position among the step's answers.
    pub(crate) index: usize,
    /// What is wrong with it.
    pub(crate) reason: String,
}

/// How a step visit ended, besides its own result.
pub(crate) struct Visit {
    /// The journal, to keep if the step is re-entered.
    pub(crate) journal: StepJournal,
    /// The interrupt the step asked for, if any.
    pub(crate) pending: Option<Interrupt>,
    /// An answer the step could not read, if any.
    pub(crate) rejected: Option<RejectedAnswer>,
    /// Whether the step read and kept the answer it was resumed with
    /// ([`CxShared::answering`]).
    pub(crate) accepted: bool,
}

/// Locks a mutex whose data stays consistent even if a holder panicked:
/// every critical section here is a single insert or take.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl CxShared {
    #[allow(clippy::too_many_arguments)] // one call site; a struct would only rename them
    pub(crate) fn new(
        run_id: RunId,
        session_id: SessionId,
        step: Arc<str>,
        index: u64,
        visit: u64,
        attempt: u32,
        journal: StepJournal,
        sink: Option<Arc<dyn JournalSink>>,
    ) -> Self {
        Self {
            run_id,
            session_id,
            step,
            index,
            visit,
            attempt,
            path: TaskPath::root(),
            input: None,
            emitter: None,
            hooks: None,
            effects: None,
            sink,
            journal: Mutex::new(journal),
            next_interrupt: AtomicUsize::new(0),
            pending: Mutex::new(None),
            rejected: Mutex::new(None),
            answering: Mutex::new(None),
            accepted: std::sync::atomic::AtomicBool::new(false),
            span: tracing::Span::current(),
            calls: crate::effect::turns::call_permits(),
        }
    }

    /// The span a model or tool call made now nests under: the current
    /// one, or the step's where there is none (a task the step spawned).
    fn call_parent(&self) -> tracing::Span {
        let current = tracing::Span::current();
        if current.is_none() {
            self.span.clone()
        } else {
            current
        }
    }

    /// The step runs again with the answer to `interrupt` as its journal's
    /// newest: its reading the answer, and keeping it, is told
    /// ([`RunEvent::AnswerAccepted`](crate::RunEvent::AnswerAccepted)).
    pub(crate) fn answering(self, interrupt: Option<InterruptId>) -> Self {
        *lock(&self.answering) = interrupt;
        self
    }

    /// Places the step in task `path`, sending its custom events to
    /// `emitter`.
    pub(crate) fn within(
        mut self,
        path: TaskPath,
        input: Option<Value>,
        emitter: Option<Arc<dyn Emitter>>,
    ) -> Self {
        self.path = path;
        self.input = input;
        self.emitter = emitter;
        self
    }

    /// Hands the model and tool calls of the step to the run's observers.
    pub(crate) fn observed(mut self, hooks: Option<Arc<dyn CallHooks>>) -> Self {
        self.hooks = hooks;
        self
    }

    /// Journals the step's effects in `effects` as well as in the session.
    pub(crate) fn journaled(mut self, effects: Option<Arc<dyn EffectJournal>>) -> Self {
        self.effects = effects;
        self
    }

    /// The step read and kept answer `k`: if that is the answer the run was
    /// resumed with (the journal's newest), it is told, once.
    fn keep_answer(&self, k: usize) {
        if lock(&self.journal).responses.len() != k + 1 {
            return;
        }
        let Some(interrupt) = lock(&self.answering).take() else {
            return;
        };
        self.accepted.store(true, Ordering::SeqCst);
        if let Some(emitter) = &self.emitter {
            emitter.accepted(&self.path, &self.step, &interrupt);
        }
    }

    /// Whether the step has asked to pause (an interrupt, or an answer it
    /// refused), whatever it returns.
    pub(crate) fn pausing(&self) -> bool {
        lock(&self.pending).is_some() || lock(&self.rejected).is_some()
    }

    /// What the visit left: the journal, the interrupt the step asked for,
    /// an answer it could not read.
    pub(crate) fn finish(&self) -> Visit {
        let rejected = lock(&self.rejected).take();
        Visit {
            journal: std::mem::take(&mut *lock(&self.journal)),
            pending: lock(&self.pending).take(),
            // Told, and not refused later in the visit.
            accepted: rejected.is_none() && self.accepted.load(Ordering::SeqCst),
            rejected,
        }
    }
}

/// A step's handle on its run: the slots (through `Deref` to the context),
/// interrupts, and journaled side effects.
///
/// Cheap to clone; clones share the same step visit.
pub struct Cx<C> {
    pub(crate) ctx: Arc<C>,
    pub(crate) shared: Arc<CxShared>,
}

impl<C> Clone for Cx<C> {
    fn clone(&self) -> Self {
        Self {
            ctx: Arc::clone(&self.ctx),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<C> fmt::Debug for Cx<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cx")
            .field("run_id", &self.shared.run_id)
            .field("session_id", &self.shared.session_id)
            .field("step", &self.shared.step)
            .field("index", &self.shared.index)
            .field("attempt", &self.shared.attempt)
            .finish_non_exhaustive()
    }
}

impl<C> Deref for Cx<C> {
    type Target = C;

    /// The context: steps read slots as its fields (`cx.model`).
    fn deref(&self) -> &C {
        &self.ctx
    }
}

impl<C> Cx<C> {
    /// The context, also reachable through `Deref`.
    pub fn context(&self) -> &C {
        &self.ctx
    }

    /// The run this step belongs to.
    pub fn run_id(&self) -> &RunId {
        &self.shared.run_id
    }

    /// The session this run belongs to.
    pub fn session_id(&self) -> &SessionId {
        &self.shared.session_id
    }

    /// The step's name.
    pub fn step(&self) -> &str {
        &self.shared.step
    }

    /// How many steps the run completed before this one.
    pub fn index(&self) -> u64 {
        self.shared.index
    }

    /// The attempt number of this step visit (1 unless retried).
    pub fn attempt(&self) -> u32 {
        self.shared.attempt
    }

    /// Pauses the run for a human.
    ///
    /// The first time, this returns an error that the step should return with
    /// `?`: the run settles with the signal `$interrupt`, `payload` and a new
    /// interrupt id. When the run is resumed with a response, the step is run
    /// again from its start, and this same call (matched by order: the first
    /// `interrupt` call of the step gets the first response) returns the
    /// response, deserialized as `R`.
    ///
    /// Work done before the call is repeated when the step re-runs; wrap side
    /// effects in [`once`](Self::once).
    ///
    /// A step that swallows the error and returns `Ok` is still interrupted:
    /// its update is discarded and the run pauses.
    ///
    /// An answer that cannot be read as `R` is refused, not kept: the run
    /// settles with [`RunError::AnswerRejected`](crate::RunError::AnswerRejected)
    /// and waits on the same interrupt, whose next answer is read instead.
    pub fn interrupt<P: Serialize, R: DeserializeOwned>(&self, payload: P) -> Result<R, StepError> {
        self.interrupt_with(payload, Ok)
    }

    /// Like [`interrupt`](Self::interrupt), with a check of the answer: an
    /// answer that `check` refuses (with the reason, which should name what
    /// is wrong and where) is rejected exactly like one that cannot be read
    /// as `R`. The awaiting caller gets
    /// [`RunError::AnswerRejected`](crate::RunError::AnswerRejected) with
    /// the reason, the answer is dropped, and the run waits on the same
    /// interrupt, whose next answer is checked instead.
    ///
    /// ```
    /// # use harness::{Cx, StepError};
    /// # async fn f(cx: Cx<()>) -> Result<(), StepError> {
    /// let copies: u32 = cx.interrupt_with("How many copies (1-10)?", |n: u32| {
    ///     if (1..=10).contains(&n) { Ok(n) } else { Err(format!("{n} is not between 1 and 10")) }
    /// })?;
    /// # let _ = copies; Ok(()) }
    /// ```
    pub fn interrupt_with<P, R, T>(
        &self,
        payload: P,
        check: impl FnOnce(R) -> Result<T, String>,
    ) -> Result<T, StepError>
    where
        P: Serialize,
        R: DeserializeOwned,
    {
        let k = self.shared.next_interrupt.fetch_add(1, Ordering::SeqCst);
        let answered = lock(&self.shared.journal).responses.get(k).cloned();
        if let Some(response) = answered {
            let reason = match serde_json::from_value::<R>(response) {
                Ok(answer) => match check(answer) {
                    Ok(checked) => {
                        self.shared.keep_answer(k);
                        return Ok(checked);
                    }
                    Err(reason) => format!(
                        "interrupt #{} of step `{}` refused the answer: {reason}",
                        k + 1,
                        self.shared.step
                    ),
                },
                Err(e) => format!(
                    "interrupt #{} of step `{}` expects `{}`: {e}",
                    k + 1,
                    self.shared.step,
                    crate::short_type_name::<R>()
                ),
            };
            // The answer is refused, not the run: the engine drops it and
            // the run waits on the same interrupt again.
            let mut rejected = lock(&self.shared.rejected);
            if rejected.is_none() {
                *rejected = Some(RejectedAnswer { index: k, reason });
            }
            return Err(StepError::interrupted());
        }
        let payload = serde_json::to_value(payload).map_err(|e| {
            StepError::msg(format!(
                "the payload of an interrupt in step `{}` cannot be serialized: {e}",
                self.shared.step
            ))
        })?;
        let mut pending = lock(&self.shared.pending);
        if pending.is_none() {
            *pending = Some(Interrupt {
                id: InterruptId::random(),
                step: self.shared.step.to_string(),
                path: self.shared.path.clone(),
                payload,
                breakpoint: None,
            });
        }
        Err(StepError::interrupted())
    }

    /// Sends a custom event to the run's event stream
    /// ([`RunEvent::Custom`](crate::RunEvent::Custom)), with this step's
    /// name and path: progress, a tool call starting, a memory eviction.
    /// `payload` is serialized only when someone listens; one that cannot
    /// be serialized is sent as its error message.
    ///
    /// Events are not stored in the session: a step re-run after an
    /// interrupt or a retry emits its events again.
    ///
    /// ```
    /// # use harness::{Cx, StepError};
    /// # async fn f(cx: Cx<()>) -> Result<(), StepError> {
    /// cx.emit("progress", serde_json::json!({ "done": 3, "of": 10 }));
    /// # Ok(()) }
    /// ```
    pub fn emit(&self, kind: &str, payload: impl Serialize) {
        let Some(emitter) = &self.shared.emitter else {
            return;
        };
        if !emitter.active() {
            return;
        }
        let payload = serde_json::to_value(payload)
            .unwrap_or_else(|e| Value::String(format!("(the payload cannot be serialized: {e})")));
        emitter.emit(&self.shared.path, &self.shared.step, kind, payload);
    }

    /// The input a fan-out gave this branch, read as `I`
    /// ([`StepBuilder::run_each`](crate::StepBuilder::run_each) calls this).
    pub(crate) fn input<I: DeserializeOwned>(&self) -> Result<I, StepError> {
        let Some(input) = &self.shared.input else {
            return Err(StepError::msg(format!(
                "step `{}` takes an input, but it was not started by a fan-out",
                self.shared.step
            )));
        };
        I::deserialize(input).map_err(|e| {
            StepError::msg(format!(
                "the input of step `{}` at `{}` is not a `{}`: {e}",
                self.shared.step,
                self.shared.path,
                crate::short_type_name::<I>()
            ))
        })
    }

    /// Sends `request` to `model` on behalf of this step: traced as a
    /// `chat {model}` span with the OpenTelemetry GenAI attributes
    /// (`gen_ai.operation.name`, `gen_ai.provider.name`,
    /// `gen_ai.request.model`, then `gen_ai.usage.input_tokens`,
    /// `gen_ai.usage.output_tokens` and `gen_ai.response.finish_reasons`),
    /// reported to the run's observers
    /// ([`Observer::model_called`](crate::observe::Observer::model_called)),
    /// and, when someone subscribed with
    /// [`Run::events_with_tokens`](crate::Run::events_with_tokens), streamed:
    /// each piece of text is a [`RunEvent::Token`](crate::RunEvent::Token)
    /// with this step's path, so a sub-agent's tokens show live.
    ///
    /// The answer is the one `model.complete` gives.
    ///
    /// In a branch of a fork on an effect journal that replays by order
    /// (Restate), where every branch runs and their effects take turns, the
    /// fork's [`limit`](crate::ForkBuilder::limit) bounds these calls too:
    /// at most that many at once, the others waiting their turn.
    pub async fn complete(
        &self,
        model: &dyn crate::llm::LanguageModel,
        request: &crate::llm::ModelRequest,
    ) -> Result<crate::llm::ModelResponse, crate::llm::ModelError> {
        use futures::StreamExt;
        use tracing::Instrument;
        let _permit = match &self.shared.calls {
            Some(calls) => Arc::clone(calls).acquire_owned().await.ok(),
            None => None,
        };
        let provider = model.provider();
        let name = model.model_name();
        // The GenAI conventions' inference span; what a sampler reads
        // (operation, provider, model) is set at its start. Token counts are
        // recorded as i64: OpenTelemetry has no unsigned integers.
        let span = tracing::info_span!(
            parent: &self.shared.call_parent(),
            "gen_ai.chat",
            otel.name = %format_args!("chat {name}"),
            otel.kind = "client",
            gen_ai.operation.name = "chat",
            gen_ai.provider.name = %provider,
            gen_ai.request.model = %name,
            gen_ai.conversation.id = %self.shared.session_id,
            harness.step = %self.shared.step,
            harness.path = %self.shared.path,
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            gen_ai.usage.cache_read.input_tokens = tracing::field::Empty,
            gen_ai.usage.cache_creation.input_tokens = tracing::field::Empty,
            gen_ai.usage.reasoning.output_tokens = tracing::field::Empty,
            gen_ai.response.finish_reasons = tracing::field::Empty,
            error.type = tracing::field::Empty,
            otel.status_description = tracing::field::Empty,
        );
        let began = std::time::Instant::now();
        let streaming = self.shared.emitter.as_ref().filter(|e| e.wants_tokens());
        let result = async {
            match streaming {
                None => model.complete(request).await,
                Some(emitter) => {
                    let stream = model.stream(request).await?;
                    let path = self.shared.path.clone();
                    let step = Arc::clone(&self.shared.step);
                    let emitter = Arc::clone(emitter);
                    let tapped = stream.inspect(move |event| {
                        if let Ok(crate::llm::StreamEvent::TextDelta { text }) = event {
                            emitter.token(&path, &step, text);
                        }
                    });
                    crate::llm::collect_stream(tapped).await
                }
            }
        }
        .instrument(span.clone())
        .await
        // A model of the application's own (not an HTTP provider, which
        // redacts already) may quote a secret in its error.
        .map_err(crate::llm::ModelError::redacted);
        let tokens = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        match &result {
            Ok(response) => {
                use crate::llm::StopReason;
                span.record(
                    "gen_ai.usage.input_tokens",
                    tokens(response.usage.input_tokens),
                );
                span.record(
                    "gen_ai.usage.output_tokens",
                    tokens(response.usage.output_tokens),
                );
                // The details, when the provider reported them.
                for (field, n) in [
                    (
                        "gen_ai.usage.cache_read.input_tokens",
                        response.usage.cache_read_tokens,
                    ),
                    (
                        "gen_ai.usage.cache_creation.input_tokens",
                        response.usage.cache_write_tokens,
                    ),
                    (
                        "gen_ai.usage.reasoning.output_tokens",
                        response.usage.reasoning_tokens,
                    ),
                ] {
                    if n > 0 {
                        span.record(field, tokens(n));
                    }
                }
                // The conventions' finish reasons, as a JSON array (a
                // `tracing` field holds no arrays; harness-otel exports it
                // as a string array).
                let reason = match &response.stop_reason {
                    StopReason::EndTurn | StopReason::StopSequence => "stop",
                    StopReason::ToolUse => "tool_call",
                    StopReason::MaxTokens => "length",
                    StopReason::Other(other) => other.as_str(),
                };
                span.record(
                    "gen_ai.response.finish_reasons",
                    tracing::field::display(Value::from(vec![reason])),
                );
            }
            Err(e) => {
                // A low-cardinality type (the error's kind, as serialized:
                // `rate_limited`, `timeout`, ...), the message as the status.
                let kind = serde_json::to_value(e)
                    .ok()
                    .and_then(|v| v.get("kind").and_then(Value::as_str).map(str::to_owned))
                    .unwrap_or_else(|| "_OTHER".to_owned());
                span.record("error.type", kind.as_str());
                span.record("otel.status_description", tracing::field::display(e));
            }
        }
        // Message contents, for subscribers that ask for them (at TRACE,
        // under their own target, which harness-otel drops unless the user
        // opts in): nothing is serialized unless someone listens.
        if tracing::enabled!(target: "harness::gen_ai::content", tracing::Level::TRACE) {
            let json = |v: Result<String, serde_json::Error>| v.unwrap_or_else(|e| e.to_string());
            let messages = json(serde_json::to_string(&request.messages));
            let response = result.as_ref().ok().map(|r| json(serde_json::to_string(r)));
            tracing::event!(
                name: "harness.gen_ai.content",
                target: "harness::gen_ai::content",
                parent: &span,
                tracing::Level::TRACE,
                harness.request.messages = %messages,
                harness.response = response,
            );
        }
        if let Some(hooks) = &self.shared.hooks {
            let info = ModelCallInfo {
                provider,
                model: name,
                request,
                result: result.as_ref(),
                elapsed: began.elapsed(),
            };
            hooks.model_called(&self.step_info(), &info).await;
        }
        result
    }

    /// Asks `model` for an answer of type `T`, as
    /// [`LanguageModelExt::complete_typed`](crate::llm::LanguageModelExt::complete_typed)
    /// does (the response format set, the answer validated, one repair
    /// turn), with each call made through [`complete`](Self::complete): a
    /// `chat {model}` span, the run's observers and token events for each.
    pub async fn complete_typed<T>(
        &self,
        model: &dyn crate::llm::LanguageModel,
        request: &crate::llm::ModelRequest,
    ) -> Result<crate::llm::TypedAnswer<T>, crate::llm::TypedAnswerError>
    where
        T: DeserializeOwned + schemars::JsonSchema,
    {
        crate::llm::typed_answer(request, |r: crate::llm::ModelRequest| async move {
            self.complete(model, &r).await
        })
        .await
    }

    /// Runs the tool call `call` (as a model made it) from `tools` on
    /// behalf of this step, and gives the result to send back to the model:
    /// a failed tool, an unknown tool or malformed arguments become an
    /// error result naming the call, never a failed step. Traced as an
    /// `execute_tool {tool}` span (`gen_ai.operation.name`,
    /// `gen_ai.tool.name`, `gen_ai.tool.call.id`) and reported to the run's
    /// observers ([`Observer::tool_called`](crate::observe::Observer::tool_called)).
    pub async fn call_tool(
        &self,
        tools: &crate::llm::ToolSet,
        call: &crate::llm::ToolCall,
    ) -> crate::llm::ToolResult {
        use tracing::Instrument;
        // The GenAI conventions' tool span: INTERNAL (the tool runs here),
        // with the call's id.
        let span = tracing::info_span!(
            parent: &self.shared.call_parent(),
            "gen_ai.execute_tool",
            otel.name = %format_args!("execute_tool {}", call.name),
            otel.kind = "internal",
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = %call.name,
            gen_ai.tool.call.id = %call.id,
            gen_ai.tool.type = "function",
            gen_ai.conversation.id = %self.shared.session_id,
            harness.step = %self.shared.step,
            harness.path = %self.shared.path,
            error.type = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        let began = std::time::Instant::now();
        let result = tools
            .dispatch_or_report(call)
            .instrument(span.clone())
            .await;
        if result.is_error {
            span.record("error.type", "tool_error");
            span.record("otel.status_code", "error");
        }
        // The call's arguments and result, only for subscribers that ask
        // (see `complete`).
        if tracing::enabled!(target: "harness::gen_ai::content", tracing::Level::TRACE) {
            tracing::event!(
                name: "harness.gen_ai.content",
                target: "harness::gen_ai::content",
                parent: &span,
                tracing::Level::TRACE,
                harness.tool.arguments = %call.arguments,
                harness.tool.result = %result.content,
            );
        }
        if let Some(hooks) = &self.shared.hooks {
            let info = ToolCallInfo {
                call,
                result: &result,
                elapsed: began.elapsed(),
            };
            hooks.tool_called(&self.step_info(), &info).await;
        }
        result
    }

    fn step_info(&self) -> super::StepInfo {
        super::StepInfo {
            name: Arc::clone(&self.shared.step),
            path: self.shared.path.clone(),
            index: self.shared.index,
        }
    }

    /// The task this step runs in: the root for the run's own loop, else
    /// its branch or sub-agent (see [`TaskPath`]).
    pub fn path(&self) -> &TaskPath {
        &self.shared.path
    }

    /// Runs the side effect `effect` once per step visit and records its
    /// result under `key`; if the step is re-entered (after an interrupt is
    /// answered, on retry, or when a crashed run is recovered) the recorded
    /// result is returned and `effect` is not polled.
    ///
    /// ```
    /// # use harness::{Cx, StepError};
    /// # async fn f(cx: Cx<()>) -> Result<(), StepError> {
    /// let receipt: String = cx.once("charge", async { "charged 10 EUR".to_string() }).await?;
    /// let approved: bool = cx.interrupt(format!("{receipt}; ship it?"))?;
    /// # let _ = approved; Ok(()) }
    /// ```
    ///
    /// # What is guaranteed
    ///
    /// - **Without a store**, the result lives in the run: it survives
    ///   retries and in-process resumes, not the process.
    /// - **With a store**, the result is written to the session, durably
    ///   (whatever the [`Durability`](crate::session::Durability)), before
    ///   `once` returns: once `once` has returned, no later attempt,
    ///   resume, or recovery in another process runs `effect` again.
    /// - One window remains, and no framework can close it alone: a process
    ///   that dies after `effect` had its effect and before its result is
    ///   written runs `effect` again when the run is recovered. Hand the
    ///   effect [`idempotency_key`](Self::idempotency_key)`(key)` to pass to
    ///   the external API (a payment's idempotency key, a message's
    ///   deduplication id): it is the same on that second run, so the API
    ///   can recognise the repeat.
    /// - If the result cannot be written (the store fails), `once` fails
    ///   with that error: the step fails (and is retried by its policy)
    ///   rather than go on with an effect that is not recorded.
    pub async fn once<T, F>(&self, key: &str, effect: F) -> Result<T, StepError>
    where
        T: Serialize + DeserializeOwned,
        F: Future<Output = T>,
    {
        self.try_once(key, async { Ok::<T, StepError>(effect.await) })
            .await
    }

    /// Like [`once`](Self::once) for a fallible side effect: only a success is
    /// recorded, so a failed attempt runs again on retry.
    pub async fn try_once<T, E, F>(&self, key: &str, effect: F) -> Result<T, StepError>
    where
        T: Serialize + DeserializeOwned,
        E: Into<StepError>,
        F: Future<Output = Result<T, E>>,
    {
        let recorded = lock(&self.shared.journal).once.get(key).cloned();
        if let Some(value) = recorded {
            return serde_json::from_value(value).map_err(|e| {
                StepError::msg(format!(
                    "the recorded result of once(\"{key}\") in step `{}` is not a `{}`: {e}",
                    self.shared.step,
                    crate::short_type_name::<T>()
                ))
            });
        }
        let (value, json) = match &self.shared.effects {
            None => {
                let value = effect.await.map_err(Into::into)?;
                let json = serde_json::to_value(&value).map_err(|e| {
                    StepError::msg(format!(
                        "the result of once(\"{key}\") in step `{}` cannot be recorded: {e}",
                        self.shared.step
                    ))
                })?;
                (value, json)
            }
            Some(journal) => self.journaled_effect(&**journal, key, effect).await?,
        };
        let journal = {
            let mut journal = lock(&self.shared.journal);
            journal.once.insert(key.to_string(), json);
            journal.clone()
        };
        if let Some(sink) = &self.shared.sink {
            sink.record(&self.shared.path, journal).await.map_err(|e| {
                StepError::msg(format!(
                    "the result of once(\"{key}\") in step `{}` had its effect but cannot be recorded in the session: {e}",
                    self.shared.step
                ))
            })?;
        }
        Ok(value)
    }

    /// Runs `effect` through the run's effect journal (see
    /// [`crate::effect`]): the outcome it recorded, or the effect run now
    /// and its outcome recorded. A failure is the recorded message, on both
    /// paths.
    async fn journaled_effect<T, E, F>(
        &self,
        journal: &dyn EffectJournal,
        key: &str,
        effect: F,
    ) -> Result<(T, Value), StepError>
    where
        T: Serialize + DeserializeOwned,
        E: Into<StepError>,
        F: Future<Output = Result<T, E>>,
    {
        let shared = &self.shared;
        let id = EffectId {
            session_id: shared.session_id.clone(),
            path: shared.path.clone(),
            step: Arc::clone(&shared.step),
            visit: shared.visit,
            attempt: shared.attempt,
            key: key.to_string(),
        };
        // In a branch whose effects take turns, `_running` holds the
        // effect's place among those running until its outcome is recorded.
        let (journaled, _running) = crate::effect::turns::begin(journal, &id)
            .await
            .map_err(StepError::new)?;
        let outcome = match journaled {
            Journaled::Recorded(outcome) => outcome,
            Journaled::Run(pending) => {
                let outcome = match effect.await {
                    Ok(value) => serde_json::to_value(&value).map_err(|e| {
                        format!(
                            "the result of once(\"{key}\") in step `{}` cannot be recorded: {e}",
                            shared.step
                        )
                    }),
                    Err(e) => Err(e.into().to_string()),
                };
                pending.finish(outcome).await.map_err(StepError::new)?
            }
        };
        let json = outcome.map_err(StepError::msg)?;
        let value = serde_json::from_value(json.clone()).map_err(|e| {
            StepError::msg(format!(
                "the journaled result of once(\"{key}\") ({id}) is not a `{}`: {e}",
                crate::short_type_name::<T>()
            ))
        })?;
        Ok((value, json))
    }

    /// A key naming the side effect `once(key, ..)` of this step visit, to
    /// hand to an external API that deduplicates requests by key.
    ///
    /// It is the same on every attempt of this visit: retries, resumes after
    /// an interrupt, and a recovery in another process after a crash. It
    /// differs between sessions, between visits of a step (a loop that
    /// comes back to the step gets a new key) and between keys. It has the
    /// form `harness:{session}:{n}:{step}:{key}`, where `n` counts the steps
    /// the session completed before this visit (the run's own count for a
    /// run without a store, whose visits do not survive the process).
    ///
    /// ```
    /// # use harness::{Cx, StepError};
    /// # async fn charge(_amount: u32, _idempotency_key: &str) -> String { String::new() }
    /// # async fn f(cx: Cx<()>) -> Result<(), StepError> {
    /// let key = cx.idempotency_key("charge");
    /// let receipt: String = cx.once("charge", charge(10, &key)).await?;
    /// # let _ = receipt; Ok(()) }
    /// ```
    pub fn idempotency_key(&self, key: &str) -> String {
        if self.shared.path.is_root() {
            format!(
                "harness:{}:{}:{}:{key}",
                self.shared.session_id, self.shared.visit, self.shared.step
            )
        } else {
            // A branch's visit: the session's steps when its fork started,
            // plus the branch's own steps, and the branch's path.
            format!(
                "harness:{}:{}:{}/{}:{key}",
                self.shared.session_id, self.shared.visit, self.shared.path, self.shared.step
            )
        }
    }
}
