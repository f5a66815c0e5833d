//! The tool-using agent loop: [`AgentLoop`] makes its two steps, `model`
//! and `tools`, for any state that embeds [`AgentMemory`] and any context
//! that gives a model.

use crate::approval::{ApprovalRequest, Decision, Decisions, PendingCall};
use crate::memory::{AgentMemory, AgentStatus, LimitKind, MemoryConfig, plan_eviction};
use crate::policy::{Policy, Verdict};
use crate::schema;
use crate::tokens::{Calibration, TokenCounter};
use crate::transcript::{Transcript, render_unit};
use futures::StreamExt;
use harness::llm::{
    ContentPart, LanguageModel, Message, ModelError, ModelRequest, ToolCall, ToolError, ToolResult,
    ToolSet, ToolSpec, Usage,
};
use harness::slots::NoSlots;
use harness::state::reduce::Appendable;
use harness::{
    Context, Cx, Harness, HarnessBuilder, HarnessState, RetryPolicy, StepBuilder, StepFn,
    StepResult,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The signals the model step's route returns.
pub mod signals {
    /// The model asked for tools: go to the tools step.
    pub const TOOLS: &str = "tools";
    /// The model answered.
    pub const ANSWERED: &str = "answered";
    /// A limit was reached before the model was asked again.
    pub const LIMIT: &str = "limit";
}

/// The most tokens the model may generate in one turn of the agent unless
/// [`AgentLoop::max_output_tokens`] sets another: every answer is
/// bounded, so a model that would not stop is cut off (its turn then ends
/// with [`StopReason::MaxTokens`](harness::llm::StopReason::MaxTokens)).
pub const DEFAULT_MAX_OUTPUT_TOKENS: u32 = 4096;

/// The bound on working memory's summary of evicted turns.
const SUMMARY_MAX_TOKENS: u32 = 1024;

/// Ends what a summarizer is given when the rest would not fit.
const CUT_MARK: &str = "\n[… the rest of this part is cut: it does not fit one request]\n";

/// What a summarizer is told.
const SUMMARY_PROMPT: &str = "Summarize this earlier part of a conversation between a user and \
    an assistant that uses tools, for the assistant's own later reference. Keep facts learnt, \
    decisions taken, file names, numbers and open questions; drop pleasantries. Answer with the \
    summary only.";

/// The kind of the run event working memory sends when it evicts units
/// ([`Cx::emit`]); its payload is a [`MemoryEvicted`].
pub const MEMORY_EVICTED: &str = "memory.evicted";

/// The payload of a [`MEMORY_EVICTED`] event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MemoryEvicted {
    /// The units evicted, oldest first.
    pub units: Vec<u64>,
    /// Tokens the request would have taken.
    pub tokens_before: u64,
    /// Tokens it takes without them (before the summary, if any).
    pub tokens_after: u64,
    /// The budget.
    pub budget: u64,
    /// Whether a model summarized them (else they were dropped).
    pub summarized: bool,
    /// Why the summarizer gave no summary, when it failed: the units were
    /// dropped instead, and the turn went on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary_failed: Option<String>,
}

/// A state the agent loop can run on: it embeds an [`AgentMemory`] (with
/// the `append` reducer) and says how to wrap an update of it. See
/// [`AgentMemory`] for an example.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a state the agent loop can run on",
    note = "embed an `AgentMemory` field with `#[field(reduce = append)]` and implement `harness_kit::AgentState` for `{Self}`: `memory` returns the field, `memory_update` wraps an update of it"
)]
pub trait AgentState: HarnessState {
    /// The agent's memory.
    fn memory(&self) -> &AgentMemory;

    /// An update of the state that merges `update` into the memory.
    fn memory_update(update: AgentMemory) -> Self::Update;
}

/// A context the agent loop can run with: it gives the model, and
/// optionally the model that summarizes what working memory evicts.
///
/// ```
/// use harness::Context;
/// use harness::llm::LanguageModel;
/// use harness_kit::AgentContext;
/// use std::sync::Arc;
///
/// #[derive(Context)]
/// struct Deps {
///     #[slot(agent)]
///     model: Arc<dyn LanguageModel>,
/// }
///
/// impl AgentContext for Deps {
///     fn model(&self) -> &dyn LanguageModel {
///         &*self.model
///     }
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` does not give the agent loop a model",
    note = "implement `harness_kit::AgentContext` for `{Self}`: `fn model(&self) -> &dyn LanguageModel`"
)]
pub trait AgentContext: Context {
    /// The model that takes the agent's turns.
    fn model(&self) -> &dyn LanguageModel;

    /// The model that summarizes evicted units; `None` (the default) drops
    /// them instead.
    fn summarizer(&self) -> Option<&dyn LanguageModel> {
        None
    }
}

/// A ready-made state: the agent's memory and nothing else.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, harness::HarnessState)]
pub struct AgentChat {
    /// The agent's memory.
    #[field(reduce = append)]
    pub memory: AgentMemory,
}

impl AgentChat {
    /// A chat whose memory starts with `task`, pinned.
    pub fn with_task(task: impl Into<String>) -> Self {
        Self {
            memory: AgentMemory::with_task(task),
        }
    }
}

impl AgentState for AgentChat {
    fn memory(&self) -> &AgentMemory {
        &self.memory
    }

    fn memory_update(update: AgentMemory) -> AgentChatUpdate {
        AgentChatUpdate::new().memory(update)
    }
}

/// A ready-made context: the model (and a summarizer) as agent slots.
#[derive(harness::Context)]
pub struct ModelDeps {
    /// The model that takes the agent's turns.
    #[slot(agent)]
    pub model: Arc<dyn LanguageModel>,
    /// The model that summarizes evicted units, if any.
    #[slot(agent)]
    pub summarizer: Option<Arc<dyn LanguageModel>>,
}

impl std::fmt::Debug for ModelDeps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelDeps")
            .field("model", &self.model.model_name())
            .field(
                "summarizer",
                &self
                    .summarizer
                    .as_deref()
                    .map(|m| m.model_name().to_owned()),
            )
            .finish()
    }
}

impl AgentContext for ModelDeps {
    fn model(&self) -> &dyn LanguageModel {
        &*self.model
    }

    fn summarizer(&self) -> Option<&dyn LanguageModel> {
        self.summarizer.as_deref()
    }
}

/// When the agent loop stops asking the model: after `turns` model calls,
/// `tokens` spent by the session's models, or `time` spent working (model
/// calls, tools and the loop's own work; time waiting for a person does not
/// count). Reaching one ends the model step with the signal
/// [`signals::LIMIT`].
///
/// ```
/// use harness_kit::Limits;
/// use std::time::Duration;
///
/// let limits = Limits::none().turns(20).tokens(200_000).time(Duration::from_secs(300));
/// # let _ = limits;
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    turns: Option<u32>,
    tokens: Option<u64>,
    time: Option<Duration>,
}

impl Limits {
    /// No limit.
    pub fn none() -> Self {
        Self::default()
    }

    /// At most `max` model calls (the repair call after an empty or
    /// unreadable answer counts as one: with no call left for it, the loop
    /// stops with [`LimitKind::Turns`] instead).
    #[must_use]
    pub fn turns(mut self, max: u32) -> Self {
        self.turns = Some(max);
        self
    }

    /// At most `max` tokens (input and output, every model of the session).
    #[must_use]
    pub fn tokens(mut self, max: u64) -> Self {
        self.tokens = Some(max);
        self
    }

    /// At most `max` of working time.
    #[must_use]
    pub fn time(mut self, max: Duration) -> Self {
        self.time = Some(max);
        self
    }

    fn reached(&self, memory: &AgentMemory) -> Option<LimitKind> {
        if let Some(max) = self.turns
            && memory.turns() >= max
        {
            return Some(LimitKind::Turns { max });
        }
        if let Some(max) = self.tokens {
            let used = memory.usage().total().total();
            if used >= max {
                return Some(LimitKind::Tokens { max, used });
            }
        }
        let (max_ms, used_ms) = (self.time_ms()?, memory.active_ms());
        (used_ms >= max_ms).then_some(LimitKind::Time { max_ms, used_ms })
    }

    fn time_ms(&self) -> Option<u64> {
        self.time
            .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX))
    }

    /// Working time left, if time is limited.
    fn time_left(&self, memory: &AgentMemory) -> Option<Duration> {
        let max = self.time_ms()?;
        Some(Duration::from_millis(
            max.saturating_sub(memory.active_ms()),
        ))
    }
}

/// Where the loop goes when the model step ends with a signal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Exit {
    /// The run ends with the signal.
    End,
    /// The run continues at this step (one of yours).
    To(String),
}

#[derive(Clone)]
struct Config {
    tools: ToolSet,
    specs: Vec<ToolSpec>,
    policies: BTreeMap<String, Policy>,
    default_policy: Policy,
    system: Option<String>,
    limits: Limits,
    memory: MemoryConfig,
    concurrency: usize,
    max_output_tokens: Option<u32>,
}

/// The tool-using agent loop, as two steps you add to your own loop:
///
/// - **model**: asks the model with the transcript (after working memory
///   fits it to its budget) and the tools; routes [`signals::TOOLS`] when
///   the model asked for tools, [`signals::ANSWERED`] when it answered,
///   [`signals::LIMIT`] when a [`Limits`] limit stopped it first;
/// - **tools**: judges each call by its tool's [`Policy`], asks a person
///   about the calls that need it (one interrupt, one decision per call
///   id), runs the rest concurrently and attaches every call's result;
///   then back to **model**.
///
/// Every call gets exactly one result before the model is asked again: a
/// malformed, unknown, refused, rejected or failed call gets an error
/// result the model can read.
///
/// See the [crate docs](crate) for the loop drawn and a full example.
pub struct AgentLoop<S, C> {
    config: Arc<Config>,
    model_step: String,
    tools_step: String,
    on_answer: Exit,
    on_limit: Exit,
    model_retry: RetryPolicy,
    types: PhantomData<fn() -> (S, C)>,
}

impl<S, C> std::fmt::Debug for AgentLoop<S, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentLoop")
            .field("tools", &self.config.tools)
            .field("model_step", &self.model_step)
            .field("tools_step", &self.tools_step)
            .field("limits", &self.config.limits)
            .finish_non_exhaustive()
    }
}

impl<S, C> AgentLoop<S, C>
where
    S: AgentState,
    C: AgentContext,
{
    /// A loop offering `tools`, every one allowed, with no limits and no
    /// memory budget.
    pub fn new(tools: ToolSet) -> Self {
        let specs = tools.specs();
        Self {
            config: Arc::new(Config {
                tools,
                specs,
                policies: BTreeMap::new(),
                default_policy: Policy::allow(),
                system: None,
                limits: Limits::none(),
                memory: MemoryConfig::default(),
                concurrency: 4,
                max_output_tokens: Some(DEFAULT_MAX_OUTPUT_TOKENS),
            }),
            model_step: "model".into(),
            tools_step: "tools".into(),
            on_answer: Exit::End,
            on_limit: Exit::End,
            model_retry: RetryPolicy::default(),
            types: PhantomData,
        }
    }

    /// The configuration, to change; steps made before keep the old one.
    fn config_mut(&mut self) -> &mut Config {
        Arc::make_mut(&mut self.config)
    }

    /// The system prompt, sent first with every request (never evicted).
    #[must_use]
    pub fn system(mut self, prompt: impl Into<String>) -> Self {
        self.config_mut().system = Some(prompt.into());
        self
    }

    /// The policy of tool `tool`.
    #[must_use]
    pub fn policy(mut self, tool: impl Into<String>, policy: Policy) -> Self {
        self.config_mut().policies.insert(tool.into(), policy);
        self
    }

    /// The policy of tools without one of their own (default: allow).
    #[must_use]
    pub fn default_policy(mut self, policy: Policy) -> Self {
        self.config_mut().default_policy = policy;
        self
    }

    /// The limits. By default there are none: a model that keeps making
    /// the same bad call is stopped only by the harness's step limit
    /// ([`DEFAULT_STEP_LIMIT`](harness::graph::DEFAULT_STEP_LIMIT) steps,
    /// about half as many model calls), so set the turns, tokens or time a
    /// task may take.
    #[must_use]
    pub fn limits(mut self, limits: Limits) -> Self {
        self.config_mut().limits = limits;
        self
    }

    /// Working memory's budget.
    #[must_use]
    pub fn memory(mut self, memory: MemoryConfig) -> Self {
        self.config_mut().memory = memory;
        self
    }

    /// How many tool calls of one turn run at once (default 4, at least 1).
    #[must_use]
    pub fn tool_concurrency(mut self, calls: usize) -> Self {
        self.config_mut().concurrency = calls.max(1);
        self
    }

    /// The most tokens the model may generate per turn (default
    /// [`DEFAULT_MAX_OUTPUT_TOKENS`]). Every request of the loop sets it, so
    /// a provider's own default for requests that set none (such as
    /// `default_max_tokens` on a model) does not apply inside the loop.
    #[must_use]
    pub fn max_output_tokens(mut self, tokens: u32) -> Self {
        self.config_mut().max_output_tokens = Some(tokens);
        self
    }

    /// The names of the two steps (default `model` and `tools`).
    #[must_use]
    pub fn step_names(mut self, model: impl Into<String>, tools: impl Into<String>) -> Self {
        self.model_step = model.into();
        self.tools_step = tools.into();
        self
    }

    /// Where [`add_to`](Self::add_to) sends [`signals::ANSWERED`] (default: the end).
    #[must_use]
    pub fn on_answer(mut self, exit: Exit) -> Self {
        self.on_answer = exit;
        self
    }

    /// Where [`add_to`](Self::add_to) sends [`signals::LIMIT`] (default: the end).
    #[must_use]
    pub fn on_limit(mut self, exit: Exit) -> Self {
        self.on_limit = exit;
        self
    }

    /// How [`add_to`](Self::add_to) retries a failed model step (a
    /// provider's error after its own retries, a malformed answer); by
    /// default it does not.
    #[must_use]
    pub fn model_retry(mut self, policy: RetryPolicy) -> Self {
        self.model_retry = policy;
        self
    }

    /// The model step's name.
    pub fn model_step_name(&self) -> &str {
        &self.model_step
    }

    /// The tools step's name.
    pub fn tools_step_name(&self) -> &str {
        &self.tools_step
    }

    /// The model step's `run`, to declare the step yourself.
    pub fn model_step(&self) -> impl StepFn<S, C, (Arc<S>, Cx<C>)> + use<S, C> {
        let config = Arc::clone(&self.config);
        move |state: Arc<S>, cx: Cx<C>| {
            let config = Arc::clone(&config);
            async move { model_turn::<S, C>(&config, &state, &cx).await }
        }
    }

    /// The model step's `route`: [`signals::TOOLS`], [`signals::ANSWERED`]
    /// or [`signals::LIMIT`].
    pub fn model_route(&self) -> impl Fn(&S) -> &'static str + Send + Sync + 'static + use<S, C> {
        |state: &S| match state.memory().status() {
            Some(AgentStatus::ToolCalls) => signals::TOOLS,
            Some(AgentStatus::LimitReached { .. }) => signals::LIMIT,
            Some(AgentStatus::Answered) | None => signals::ANSWERED,
        }
    }

    /// The tools step's `run`, to declare the step yourself.
    pub fn tools_step(&self) -> impl StepFn<S, C, (Arc<S>, Cx<C>)> + use<S, C> {
        let config = Arc::clone(&self.config);
        move |state: Arc<S>, cx: Cx<C>| {
            let config = Arc::clone(&config);
            async move { tools_turn::<S, C>(&config, &state, &cx).await }
        }
    }

    /// Declares the two steps on `builder`: the model step routes to the
    /// tools step, and to [`on_answer`](Self::on_answer) and
    /// [`on_limit`](Self::on_limit); the tools step goes back to the model.
    /// The returned builder goes on: more steps, `start`, `store`, `build`.
    pub fn add_to(&self, builder: HarnessBuilder<S, C>) -> StepBuilder<S, C> {
        let exit = |step: StepBuilder<S, C>, signal: &'static str, exit: &Exit| match exit {
            Exit::End => step.on(signal).end(),
            Exit::To(to) => step.on(signal).to(to.as_str()),
        };
        let model = builder
            .step(self.model_step.as_str())
            .run(self.model_step())
            .retry(self.model_retry.clone())
            .route(self.model_route())
            .on(signals::TOOLS)
            .to(self.tools_step.as_str());
        let model = exit(model, signals::ANSWERED, &self.on_answer);
        let model = exit(model, signals::LIMIT, &self.on_limit);
        model
            .step(self.tools_step.as_str())
            .run(self.tools_step())
            .next(self.model_step.as_str())
    }

    /// A loop of just the two steps, starting at the model step, for a
    /// context without fixed slots.
    pub fn builder(&self) -> HarnessBuilder<S, C>
    where
        C::Fixed: NoSlots,
    {
        self.add_to(Harness::builder())
            .start(self.model_step.as_str())
    }

    /// A loop of just the two steps, starting at the model step, with the
    /// context's fixed slots.
    pub fn builder_with(&self, fixed: C::Fixed) -> HarnessBuilder<S, C> {
        self.add_to(Harness::builder_with(fixed))
            .start(self.model_step.as_str())
    }
}

/// The name usage is recorded under: the model's, which price tables use.
fn model_key(model: &dyn LanguageModel) -> String {
    model.model_name().to_owned()
}

fn elapsed_ms(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// The model step.
async fn model_turn<S: AgentState, C: AgentContext>(
    config: &Config,
    state: &S,
    cx: &Cx<C>,
) -> StepResult<S::Update> {
    let started = Instant::now();
    let memory = state.memory();
    let mut transcript = memory.transcript().clone();
    let mut update = AgentMemory::default();

    // A loop that came back here without running some calls (a step of
    // the user's in between) still owes the model their results.
    let dangling: Vec<ToolResult> = transcript
        .pending_calls()
        .into_iter()
        .map(|call| {
            ToolResult::failure(
                call,
                "not run: the agent went back to the model before this call ran",
            )
        })
        .collect();
    if !dangling.is_empty() {
        let results = Transcript::results(dangling);
        transcript.append_from(results.clone());
        update = update.add_transcript(results);
    }

    if let Some(limit) = config.limits.reached(memory) {
        let update = update
            .with_status(AgentStatus::LimitReached { limit })
            .worked(elapsed_ms(started));
        return Ok(S::memory_update(update));
    }

    let system: Vec<Message> = config.system.iter().map(Message::system).collect();
    if let Some(plan) = plan_eviction(
        &transcript,
        &system,
        &config.specs,
        &config.memory,
        memory.calibration(),
    ) {
        let mut summary_failed = None;
        let summary = match cx.context().summarizer() {
            Some(summarizer) => {
                // Its request is held to the same budget as the agent's.
                let counter: &dyn TokenCounter = &*config.memory.counter;
                let room = plan
                    .budget
                    .saturating_sub(counter.message(&Message::system(SUMMARY_PROMPT)));
                match summarize(cx, summarizer, &transcript, &plan.units, counter, room).await {
                    Ok((text, usage)) => {
                        update = update.spent(model_key(summarizer), usage);
                        Some(text)
                    }
                    // A summary is a help, not the turn: without one the
                    // units are dropped, as with no summarizer, and the
                    // model the agent talks to is not blamed for it.
                    Err(error) => {
                        summary_failed =
                            Some(harness::secrets::redact(&error.to_string()).into_owned());
                        None
                    }
                }
            }
            None => None,
        };
        cx.emit(
            MEMORY_EVICTED,
            MemoryEvicted {
                units: plan.units.clone(),
                tokens_before: plan.tokens_before,
                tokens_after: plan.tokens_after,
                budget: plan.budget,
                summarized: summary.is_some(),
                summary_failed,
            },
        );
        let evict = Transcript::evict(plan.units, summary);
        transcript.append_from(evict.clone());
        update = update.add_transcript(evict);
    }

    let mut messages = system;
    messages.extend(transcript.messages());
    let counter: &dyn TokenCounter = &*config.memory.counter;
    let estimated: u64 = messages.iter().map(|m| counter.message(m)).sum::<u64>()
        + config.specs.iter().map(|t| counter.tool(t)).sum::<u64>();
    let mut request = ModelRequest::builder()
        .messages(messages)
        .tools(config.specs.iter().cloned());
    if let Some(max) = config.max_output_tokens {
        request = request.max_tokens(max);
    }
    let request = request.build();

    let model = cx.context().model();
    // A model call held to the time left; `None` when the time is up.
    let call = async |request: &ModelRequest| match config.limits.time_left(memory) {
        Some(left) => {
            let left = left.saturating_sub(started.elapsed());
            tokio::time::timeout(left, cx.complete(model, request))
                .await
                .ok()
        }
        None => Some(cx.complete(model, request).await),
    };
    // (The call cut short was made: it counts.)
    let time_up = |update: AgentMemory| {
        let update = update.turn_taken();
        let used_ms = memory.active_ms().saturating_add(elapsed_ms(started));
        let limit = LimitKind::Time {
            max_ms: config.limits.time_ms().unwrap_or_default(),
            used_ms,
        };
        let update = update
            .with_status(AgentStatus::LimitReached { limit })
            .worked(elapsed_ms(started));
        Ok(S::memory_update(update))
    };
    let Some(response) = call(&request).await else {
        return time_up(update);
    };
    // An answer with neither text nor a tool call (seen from small local
    // models, and from any model cut at its bound before it wrote a word),
    // or one the server could not read (llama.cpp answers a call of a tool
    // it was not offered with HTTP 500), gets one repair turn, which says
    // what was wrong; a second such answer fails the step, named.
    let repair = match &response {
        Ok(answer) if is_empty_answer(answer) => {
            update = update.spent(model_key(model), answer.usage);
            Some(EMPTY_ANSWER_REPAIR.to_owned())
        }
        Err(ModelError::MalformedResponse { message }) => Some(format!(
            "Your last answer could not be read ({}). Answer the user in plain text, \
             or call one of these tools, by its exact name: {}.",
            quoted(message, REPAIR_QUOTE_CHARS),
            config
                .specs
                .iter()
                .map(|t| t.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
        _ => None,
    };
    let response = match repair {
        None => response?,
        Some(repair) => {
            // The repair is a model call like any other: counted, and held
            // to the limits.
            update = update.turn_taken();
            if let Some(max) = config.limits.turns
                && memory.turns().saturating_add(1) >= max
            {
                let update = update
                    .with_status(AgentStatus::LimitReached {
                        limit: LimitKind::Turns { max },
                    })
                    .worked(elapsed_ms(started));
                return Ok(S::memory_update(update));
            }
            let mut again = request.clone();
            again.messages.push(Message::user(repair));
            let Some(second) = call(&again).await else {
                return time_up(update);
            };
            let second = second?;
            if is_empty_answer(&second) {
                return Err(harness::StepError::msg(format!(
                    "the model answered with nothing after a repair turn (its last stop \
                     reason: {:?}); check the model and its token bound",
                    second.stop_reason
                )));
            }
            second
        }
    };
    let status = if response.has_tool_calls() {
        AgentStatus::ToolCalls
    } else {
        AgentStatus::Answered
    };
    let observed = if counter.is_exact() {
        Calibration::default()
    } else {
        Calibration::observed(estimated, response.usage.input_tokens)
    };
    let update = update
        .spent(model_key(model), response.usage)
        .calibrated(observed)
        .turn_taken()
        .with_status(status)
        .add_transcript(Transcript::new().message(response.into_message()))
        .worked(elapsed_ms(started));
    Ok(S::memory_update(update))
}

/// What the model is told after an empty answer.
const EMPTY_ANSWER_REPAIR: &str =
    "Your last answer was empty. Answer the user, or call one of the tools.";

/// No text (or only blanks) and no tool call.
fn is_empty_answer(response: &harness::llm::ModelResponse) -> bool {
    !response.has_tool_calls() && response.text().trim().is_empty()
}

/// Asks `summarizer` to summarize the units `ids` of `transcript`, in a
/// request of about `room` tokens at most (as `counter` counts them): what
/// would not fit is cut from the end, and said to be.
async fn summarize<C>(
    cx: &Cx<C>,
    summarizer: &dyn LanguageModel,
    transcript: &Transcript,
    ids: &[u64],
    counter: &dyn TokenCounter,
    room: u64,
) -> Result<(String, Usage), ModelError> {
    let mut messages = Vec::new();
    for unit in transcript.units().iter().filter(|u| ids.contains(&u.id)) {
        render_unit(unit, &mut messages);
    }
    let mut text = String::new();
    for message in &messages {
        for part in &message.content {
            let line = match part {
                ContentPart::Text { text } => format!("{:?}: {text}", message.role),
                ContentPart::ToolCall(call) => {
                    format!("assistant called {}({})", call.name, call.arguments)
                }
                ContentPart::ToolResult(result) => format!(
                    "{} {}: {}",
                    result.name,
                    if result.is_error {
                        "failed"
                    } else {
                        "returned"
                    },
                    result.content
                ),
                _ => continue,
            };
            text.push_str(&line);
            text.push('\n');
        }
    }
    let tokens = counter.message(&Message::user(text.as_str()));
    if tokens > room {
        // Proportionally, at a character boundary (the counts are
        // estimates), with room for the mark that says so.
        let room = room.saturating_sub(counter.message(&Message::user(CUT_MARK)));
        let keep =
            usize::try_from(u128::from(room) * text.len() as u128 / u128::from(tokens.max(1)))
                .unwrap_or(usize::MAX)
                .min(text.len());
        let mut end = keep;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str(CUT_MARK);
    }
    let request = ModelRequest::builder()
        .system(SUMMARY_PROMPT)
        .user(text)
        .max_tokens(SUMMARY_MAX_TOKENS)
        .build();
    let response = cx.complete(summarizer, &request).await?;
    Ok((response.text(), response.usage))
}

/// What the tools step does with one call.
enum Action {
    /// Run it with these arguments.
    Run(ToolCall),
    /// Its result is known without running it.
    Answer(ToolResult),
    /// Ask a person.
    Ask(PendingCall),
}

/// The most characters of a provider's message a repair turn quotes: a
/// model need not read megabytes of what it wrote to write it again.
const REPAIR_QUOTE_CHARS: usize = 1000;

/// `text` with the process's secrets redacted, then cut to `max`
/// characters and marked (in this order: a secret cut first would no
/// longer be found whole). Only the start of `text` is looked at.
fn quoted(text: &str, max: usize) -> String {
    let mut end = max
        .saturating_mul(4)
        .saturating_add(64 << 10)
        .min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let head = harness::secrets::redact(&text[..end]);
    match head.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &head[..cut]),
        None if end < text.len() => format!("{head}…"),
        None => head.into_owned(),
    }
}

fn classify(config: &Config, allowed: &BTreeSet<String>, call: &ToolCall) -> Action {
    let arguments = match &call.arguments {
        // Some providers hand over what the model wrote when it is not JSON.
        Value::String(raw) => match serde_json::from_str::<Value>(raw) {
            Ok(object @ Value::Object(_)) => object,
            Ok(other) => {
                return Action::Answer(ToolResult::failure(
                    call,
                    format!(
                        "the arguments of this call are {other}, not a JSON object; call `{}` again with a JSON object matching its schema",
                        call.name
                    ),
                ));
            }
            Err(e) => {
                return Action::Answer(ToolResult::failure(
                    call,
                    format!(
                        "the arguments of this call are not valid JSON ({e}); call `{}` again with a JSON object matching its schema",
                        call.name
                    ),
                ));
            }
        },
        other => other.clone(),
    };
    let Some(spec) = config.specs.iter().find(|s| s.name == call.name) else {
        let error = ToolError::UnknownTool {
            name: call.name.clone(),
            available: config.specs.iter().map(|s| s.name.clone()).collect(),
        };
        return Action::Answer(ToolResult::failure(call, error.to_string()));
    };
    match schema::validate(&spec.parameters, &arguments) {
        Ok(()) => {}
        Err(error @ schema::SchemaError::TooComplex { .. }) => {
            // Not the model's mistake: the tool's own schema cannot be
            // checked, so the call does not run whatever its arguments.
            return Action::Answer(ToolResult::failure(
                call,
                format!(
                    "not run: the arguments of `{}` cannot be checked: {error}",
                    call.name
                ),
            ));
        }
        Err(mismatch) => {
            let error = ToolError::InvalidArguments {
                tool: call.name.clone(),
                message: mismatch.to_string(),
            };
            return Action::Answer(ToolResult::failure(call, error.to_string()));
        }
    }
    let policy = config
        .policies
        .get(&call.name)
        .unwrap_or(&config.default_policy);
    let mut runnable = call.clone();
    runnable.arguments = arguments;
    match policy.judge(&runnable.arguments) {
        Verdict::Allow => Action::Run(runnable),
        Verdict::Deny(reason) => {
            Action::Answer(ToolResult::failure(call, format!("not run: {reason}")))
        }
        Verdict::Ask => {
            let allow_key = policy.allow_key(&call.name, &runnable.arguments);
            if allowed.contains(&allow_key) {
                Action::Run(runnable)
            } else {
                Action::Ask(PendingCall {
                    call_id: call.id.clone(),
                    tool: call.name.clone(),
                    arguments: runnable.arguments,
                    schema: spec.parameters.clone(),
                    allow_key,
                })
            }
        }
    }
}

/// The result a rejected call gets.
fn rejected(call: &ToolCall, message: &str) -> ToolResult {
    let text = if message.trim().is_empty() {
        "not run: the user rejected this call".to_owned()
    } else {
        format!("not run: the user rejected this call: {message}")
    };
    ToolResult::failure(call, text)
}

/// The tools step.
async fn tools_turn<S: AgentState, C: AgentContext>(
    config: &Config,
    state: &S,
    cx: &Cx<C>,
) -> StepResult<S::Update> {
    let memory = state.memory();
    let pending: Vec<ToolCall> = memory
        .transcript()
        .pending_calls()
        .into_iter()
        .cloned()
        .collect();
    if pending.is_empty() {
        return Ok(S::memory_update(AgentMemory::default()));
    }
    let mut actions: Vec<(ToolCall, Action)> = pending
        .iter()
        .map(|call| (call.clone(), classify(config, memory.allowed(), call)))
        .collect();
    let asks: Vec<PendingCall> = actions
        .iter()
        .filter_map(|(_, action)| match action {
            Action::Ask(pending) => Some(pending.clone()),
            _ => None,
        })
        .collect();
    let decisions = if asks.is_empty() {
        Vec::new()
    } else {
        let request = ApprovalRequest::new(asks);
        let check = request.clone();
        cx.interrupt_with(request, move |answer: Decisions| {
            check.resolve(answer).map_err(|e| e.to_string())
        })?
    };
    // Working time starts once the person has answered.
    let started = Instant::now();

    let mut update = AgentMemory::default();
    // Arguments that are not an object (what the model wrote, as text) are
    // replaced in the transcript by the object they hold, or by `{}`: some
    // providers refuse a conversation whose tool call input is not an
    // object. The text stays in the turn's `proposed`.
    let mut edits = Transcript::new();
    for (call, action) in &actions {
        if call.arguments.is_object() {
            continue;
        }
        let object = match action {
            Action::Run(runnable) => runnable.arguments.clone(),
            Action::Ask(asked) => asked.arguments.clone(),
            Action::Answer(_) => Value::Object(serde_json::Map::new()),
        };
        edits = edits.then(Transcript::edit(call.id.clone(), object));
    }
    let mut corrections = Vec::new();
    let mut decided: BTreeMap<String, Decision> = decisions
        .into_iter()
        .map(|d| (d.call_id, d.decision))
        .collect();
    for (call, action) in &mut actions {
        let Action::Ask(asked) = action else { continue };
        let Some(decision) = decided.remove(&call.id) else {
            // `resolve` gave one decision per asked call.
            continue;
        };
        let mut runnable = call.clone();
        runnable.arguments = asked.arguments.clone();
        *action = match decision {
            Decision::Approve => Action::Run(runnable),
            Decision::AlwaysAllow => {
                update = update.allow(asked.allow_key.clone());
                Action::Run(runnable)
            }
            Decision::Edit { arguments } => {
                edits = edits.then(Transcript::edit(call.id.clone(), arguments.clone()));
                runnable.arguments = arguments;
                Action::Run(runnable)
            }
            Decision::Reject { message } => Action::Answer(rejected(call, &message)),
            Decision::Correct { message } => {
                corrections.push(message);
                Action::Answer(ToolResult::failure(
                    call,
                    "not run: the user answered with a correction instead; read their next message",
                ))
            }
        };
    }

    let mut results: BTreeMap<String, ToolResult> = BTreeMap::new();
    let mut runs = Vec::new();
    for (call, action) in actions {
        match action {
            Action::Answer(result) => {
                results.insert(call.id.clone(), result);
            }
            Action::Run(runnable) => runs.push(runnable),
            Action::Ask(_) => {}
        }
    }
    let deadline = config.limits.time_left(memory).map(|left| started + left);
    let mut running = futures::stream::iter(runs.clone())
        .map(|call| {
            let (tools, cx) = (config.tools.clone(), cx.clone());
            async move {
                let key = format!("tool:{}", call.id);
                cx.once(&key, async { cx.call_tool(&tools, &call).await })
                    .await
            }
        })
        .buffer_unordered(config.concurrency);
    loop {
        let next = match deadline {
            Some(deadline) => match tokio::time::timeout_at(deadline, running.next()).await {
                Ok(next) => next,
                Err(_) => break,
            },
            None => running.next().await,
        };
        match next {
            Some(result) => {
                let result = result?;
                results.insert(result.call_id.clone(), result);
            }
            None => break,
        }
    }
    drop(running);
    for call in &runs {
        results.entry(call.id.clone()).or_insert_with(|| {
            ToolResult::failure(
                call,
                "not finished: the agent's working-time limit was reached while it ran",
            )
        });
    }
    // In the order of the calls, so the transcript reads the same whatever
    // order they finished in.
    let ordered: Vec<ToolResult> = pending
        .iter()
        .filter_map(|call| results.remove(&call.id))
        .collect();
    let mut transcript = edits.then(Transcript::results(ordered));
    if !corrections.is_empty() {
        transcript = transcript.then(Transcript::new().user(corrections.join("\n\n")));
    }
    let update = update
        .add_transcript(transcript)
        .worked(elapsed_ms(started));
    Ok(S::memory_update(update))
}
