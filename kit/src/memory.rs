//! [`AgentMemory`]: the kit's part of a user's state, and working memory's
//! budget ([`MemoryConfig`], [`plan_eviction`]).

use crate::tokens::{Calibration, Estimate, TokenCounter};
use crate::transcript::{Transcript, Unit, UnitBody, render_unit};
use harness::llm::{Message, ToolSpec, Usage, UsageByModel};
use harness::state::reduce::{Addable, Appendable};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::sync::Arc;

/// Why the last model step of the agent loop ended as it did; its route
/// reads it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum AgentStatus {
    /// The model asked for tools; the tools step runs them.
    ToolCalls,
    /// The model answered without asking for tools.
    Answered,
    /// A limit was reached before the model was asked again.
    LimitReached {
        /// Which limit.
        limit: LimitKind,
    },
}

/// A limit of the agent loop ([`Limits`](crate::Limits)).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "limit", rename_all = "snake_case")]
pub enum LimitKind {
    /// The model was called `max` times.
    Turns {
        /// The limit.
        max: u32,
    },
    /// The session's models spent `used` tokens of `max`.
    Tokens {
        /// The limit.
        max: u64,
        /// Input and output tokens spent.
        used: u64,
    },
    /// The agent worked `used_ms` of its `max_ms` (waiting for a person
    /// does not count).
    Time {
        /// The limit, in milliseconds.
        max_ms: u64,
        /// Time spent working, in milliseconds.
        used_ms: u64,
    },
}

/// What the agent kit keeps in a session: the transcript, the tools the
/// person always allows, usage per model, turns taken and time worked.
///
/// Embed it in your loop's state with the `append` reducer and implement
/// [`AgentState`](crate::AgentState) to hand it to the kit's steps:
///
/// ```
/// use harness::{HarnessState, JsonSchema, schemars};
/// use harness_kit::{AgentMemory, AgentState};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
/// struct Assistant {
///     #[field(reduce = append)]
///     agent: AgentMemory,
///     /// A field of your own, for your own steps.
///     reviewed: bool,
/// }
///
/// impl AgentState for Assistant {
///     fn memory(&self) -> &AgentMemory {
///         &self.agent
///     }
///     fn memory_update(update: AgentMemory) -> AssistantUpdate {
///         AssistantUpdate::new().agent(update)
///     }
/// }
/// ```
///
/// Like a [`Transcript`], a value of this type is its own update: merging
/// one appends its transcript's units and changes, adds its tools to the
/// allow-list, adds its usage, turns and time, and takes its status if it
/// has one. The kit's steps build the updates; your steps can add to the
/// conversation with `AgentMemory::from(Transcript::new().user(".."))`,
/// and the usage of their own model calls with
/// [`spending`](AgentMemory::spending).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentMemory {
    #[serde(default)]
    transcript: Transcript,
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    allowed: BTreeSet<String>,
    #[serde(default, skip_serializing_if = "UsageByModel::is_empty")]
    usage: UsageByModel,
    #[serde(default)]
    turns: u32,
    #[serde(default)]
    active_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status: Option<AgentStatus>,
    #[serde(default)]
    calibration: Calibration,
}

impl From<Transcript> for AgentMemory {
    fn from(transcript: Transcript) -> Self {
        Self {
            transcript,
            ..Self::default()
        }
    }
}

impl AgentMemory {
    /// Memory whose transcript starts with `task` as a pinned user message:
    /// the task stays when older turns are evicted.
    pub fn with_task(task: impl Into<String>) -> Self {
        Transcript::new().pinned_user(task).into()
    }

    /// The conversation.
    pub fn transcript(&self) -> &Transcript {
        &self.transcript
    }

    /// Allow-list keys of the calls a person chose to always allow in this
    /// session (see [`Policy::remember_by`](crate::Policy::remember_by)).
    pub fn allowed(&self) -> &BTreeSet<String> {
        &self.allowed
    }

    /// Tokens spent per model (by [`LanguageModel::model_name`](harness::llm::LanguageModel::model_name),
    /// the name a [`PriceTable`](harness::llm::PriceTable) prices): every
    /// turn of the agent and every summary working memory asked for, in
    /// every process that ran the session. Its
    /// [`cost`](UsageByModel::cost) needs a price table.
    pub fn usage(&self) -> &UsageByModel {
        &self.usage
    }

    /// Model calls the agent loop made.
    pub fn turns(&self) -> u32 {
        self.turns
    }

    /// Time the agent loop spent working (model calls, tools, its own
    /// bookkeeping), in milliseconds; time waiting for a person is not in it.
    pub fn active_ms(&self) -> u64 {
        self.active_ms
    }

    /// How the last model step ended; `None` before the first.
    pub fn status(&self) -> Option<&AgentStatus> {
        self.status.as_ref()
    }

    /// The ratio of reported to estimated input tokens learnt so far.
    pub fn calibration(&self) -> Calibration {
        self.calibration
    }

    /// The model's last answer: the text of the last assistant message.
    pub fn answer(&self) -> Option<String> {
        self.transcript
            .units()
            .iter()
            .rev()
            .find_map(|u| match &u.body {
                UnitBody::Turn(turn) => Some(turn.message.text()),
                _ => None,
            })
    }

    /// This update with `usage` of a call to `model` (by the name a
    /// [`PriceTable`](harness::llm::PriceTable) prices) added, so that
    /// [`usage`](Self::usage), the token limit and the cost count calls
    /// your own steps make (a classifier before the agent, a check after
    /// it) beside the agent's.
    ///
    /// ```
    /// use harness::llm::Usage;
    /// use harness::state::reduce::Appendable;
    /// use harness_kit::AgentMemory;
    ///
    /// let mut memory = AgentMemory::default().spending("small", Usage::new(100, 5));
    /// memory.append_from(AgentMemory::default().spending("small", Usage::new(40, 2)));
    /// assert_eq!(memory.usage().get("small"), Some(Usage::new(140, 7)));
    /// assert_eq!(memory.turns(), 0, "no turn of the agent loop");
    /// ```
    #[must_use]
    pub fn spending(self, model: impl Into<String>, usage: Usage) -> Self {
        self.spent(model.into(), usage)
    }

    // Updates, built by the kit's steps.

    pub(crate) fn add_transcript(mut self, update: Transcript) -> Self {
        self.transcript = std::mem::take(&mut self.transcript).then(update);
        self
    }

    pub(crate) fn allow(mut self, key: String) -> Self {
        self.allowed.insert(key);
        self
    }

    pub(crate) fn spent(mut self, model: String, usage: Usage) -> Self {
        self.usage.record(model, usage);
        self
    }

    pub(crate) fn turn_taken(mut self) -> Self {
        self.turns += 1;
        self
    }

    pub(crate) fn worked(mut self, ms: u64) -> Self {
        self.active_ms = self.active_ms.saturating_add(ms);
        self
    }

    pub(crate) fn with_status(mut self, status: AgentStatus) -> Self {
        self.status = Some(status);
        self
    }

    pub(crate) fn calibrated(mut self, observed: Calibration) -> Self {
        self.calibration += observed;
        self
    }
}

impl Appendable for AgentMemory {
    /// Merges an update; see the type's docs.
    fn append_from(&mut self, update: Self) {
        self.transcript.append_from(update.transcript);
        self.allowed.extend(update.allowed);
        self.usage.add_from(update.usage);
        self.turns = self.turns.saturating_add(update.turns);
        self.active_ms = self.active_ms.saturating_add(update.active_ms);
        if update.status.is_some() {
            self.status = update.status;
        }
        self.calibration += update.calibration;
    }
}

/// Working memory's budget: how many tokens a request may take, and how
/// they are counted.
///
/// ```
/// use harness_kit::MemoryConfig;
///
/// let memory = MemoryConfig::budget(8_000).keep_recent(2);
/// # let _ = memory;
/// ```
#[derive(Clone, Debug)]
pub struct MemoryConfig {
    pub(crate) budget: Option<u64>,
    pub(crate) counter: Arc<dyn TokenCounter>,
    pub(crate) keep_recent: usize,
}

impl Default for MemoryConfig {
    /// No budget: nothing is evicted.
    fn default() -> Self {
        Self {
            budget: None,
            counter: Arc::new(Estimate),
            keep_recent: 1,
        }
    }
}

impl MemoryConfig {
    /// A budget of `tokens` for each request: the system prompt, the tools
    /// offered and the transcript. Over it, the oldest unpinned units are
    /// summarized (when the context gives a summarizer) or dropped.
    pub fn budget(tokens: u64) -> Self {
        Self {
            budget: Some(tokens),
            ..Self::default()
        }
    }

    /// Counts tokens with `counter` instead of the calibrated [`Estimate`].
    #[must_use]
    pub fn counter(mut self, counter: impl TokenCounter + 'static) -> Self {
        self.counter = Arc::new(counter);
        self
    }

    /// How many of the latest units are never evicted (default 1, at least
    /// 1): the model always sees what it is answering.
    #[must_use]
    pub fn keep_recent(mut self, units: usize) -> Self {
        self.keep_recent = units.max(1);
        self
    }
}

/// What working memory will evict before a request, and the token counts
/// around it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct EvictionPlan {
    /// The units to evict, oldest first.
    pub units: Vec<u64>,
    /// Tokens the request would take without eviction.
    pub tokens_before: u64,
    /// Tokens it takes without the evicted units (before any summary).
    pub tokens_after: u64,
    /// The budget.
    pub budget: u64,
}

/// Tokens of one unit, as sent.
pub(crate) fn unit_tokens(unit: &Unit, counter: &dyn TokenCounter) -> u64 {
    let mut messages = Vec::new();
    render_unit(unit, &mut messages);
    messages.iter().map(|m| counter.message(m)).sum()
}

/// Scales a raw count by the calibration unless the counter is exact.
pub(crate) fn calibrated(raw: u64, counter: &dyn TokenCounter, calibration: Calibration) -> u64 {
    if counter.is_exact() {
        raw
    } else {
        calibration.scale(raw)
    }
}

/// The units to evict so that a request with `fixed` (system prompt and
/// tools) and `transcript` fits `config`'s budget: the oldest first, never
/// a pinned one, never one of the `keep_recent` latest, never a turn still
/// waiting for results. `None` when it already fits (or there is no
/// budget). The plan may not reach the budget when too much is pinned.
pub fn plan_eviction(
    transcript: &Transcript,
    fixed: &[Message],
    tools: &[ToolSpec],
    config: &MemoryConfig,
    calibration: Calibration,
) -> Option<EvictionPlan> {
    let budget = config.budget?;
    let counter = &*config.counter;
    let fixed_raw: u64 = fixed.iter().map(|m| counter.message(m)).sum::<u64>()
        + tools.iter().map(|t| counter.tool(t)).sum::<u64>();
    let sizes: Vec<u64> = transcript
        .units()
        .iter()
        .map(|u| unit_tokens(u, counter))
        .collect();
    let raw_total = fixed_raw + sizes.iter().sum::<u64>();
    let tokens_before = calibrated(raw_total, counter, calibration);
    if tokens_before <= budget {
        return None;
    }
    let units = transcript.units();
    let evictable = units.len().saturating_sub(config.keep_recent);
    let mut raw = raw_total;
    let mut chosen = Vec::new();
    for (unit, size) in units.iter().zip(&sizes).take(evictable) {
        if calibrated(raw, counter, calibration) <= budget {
            break;
        }
        let complete = match &unit.body {
            UnitBody::Turn(turn) => turn.is_complete(),
            _ => true,
        };
        if unit.pinned || !complete {
            continue;
        }
        chosen.push(unit.id);
        raw -= size;
    }
    if chosen.is_empty() {
        return None;
    }
    Some(EvictionPlan {
        units: chosen,
        tokens_before,
        tokens_after: calibrated(raw, counter, calibration),
        budget,
    })
}
