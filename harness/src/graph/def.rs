//! A loop as declared, before validation: steps by name, their transitions,
//! and their retry policies.

use crate::error::RunError;
use crate::ids::TaskPath;
use crate::session::{Journals, SessionCursor};
use crate::signal::Signal;
use crate::state::HarnessState;
use crate::step::{Cx, Emitter, Interrupt, RunInfo, StepError};
use futures::future::BoxFuture;
use serde_json::Value;
use std::any::{Any, TypeId};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// The async half of a step, boxed.
pub(crate) type RunFn<S, C> = Arc<
    dyn Fn(Arc<S>, Cx<C>) -> BoxFuture<'static, Result<<S as HarnessState>::Update, StepError>>
        + Send
        + Sync,
>;
/// The pure half of a step.
pub(crate) type RouteFn<S> = Arc<dyn Fn(&S) -> Signal + Send + Sync>;

/// How often a failing step is tried, and how long to wait in between.
///
/// The wait doubles after each failure, from `backoff` up to `max_backoff`.
/// Interrupts are never retried; a step's `cx.once` results are kept across
/// attempts, so a retry does not repeat a side effect that already happened.
///
/// ```
/// use harness::RetryPolicy;
/// use std::time::Duration;
/// let p = RetryPolicy::attempts(3).backoff(Duration::from_millis(50));
/// assert_eq!(p.delay_before(2), Duration::from_millis(50));
/// assert_eq!(p.delay_before(3), Duration::from_millis(100));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    attempts: u32,
    backoff: Duration,
    max_backoff: Duration,
}

impl Default for RetryPolicy {
    /// One attempt: no retry.
    fn default() -> Self {
        Self::attempts(1)
    }
}

impl RetryPolicy {
    /// Up to `attempts` tries in all (at least 1), with no wait in between.
    pub fn attempts(attempts: u32) -> Self {
        Self {
            attempts: attempts.max(1),
            backoff: Duration::ZERO,
            max_backoff: Duration::from_secs(30),
        }
    }

    /// Waits `initial` before the second attempt, doubling each time after.
    #[must_use]
    pub fn backoff(mut self, initial: Duration) -> Self {
        self.backoff = initial;
        self
    }

    /// Caps the wait between attempts (default 30 s).
    #[must_use]
    pub fn max_backoff(mut self, max: Duration) -> Self {
        self.max_backoff = max;
        self
    }

    /// The number of attempts in all.
    pub fn max_attempts(&self) -> u32 {
        self.attempts
    }

    /// The wait before attempt number `attempt` (1-based; attempt 1 has none).
    pub fn delay_before(&self, attempt: u32) -> Duration {
        if attempt <= 1 || self.backoff.is_zero() {
            return Duration::ZERO;
        }
        let doublings = (attempt - 2).min(31);
        self.backoff
            .saturating_mul(1_u32 << doublings)
            .min(self.max_backoff)
    }
}

/// The inputs of a fan-out's branches, from the state: one JSON value per
/// branch, or why they cannot be made.
pub(crate) type InputsFn<S> = Arc<dyn Fn(&S) -> Result<Vec<Value>, String> + Send + Sync>;
/// A failed branch's error, turned into an update (`collect_errors`).
pub(crate) type CollectFn<S> =
    Arc<dyn Fn(BranchFailure) -> <S as HarnessState>::Update + Send + Sync>;

/// A Rust type, named for messages and compared by id.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TypeTag {
    pub(crate) id: TypeId,
    pub(crate) name: TypeName,
}

impl TypeTag {
    pub(crate) fn of<T: 'static>() -> Self {
        Self {
            id: TypeId::of::<T>(),
            name: TypeName(std::any::type_name::<T>()),
        }
    }
}

/// A type's name as [`std::any::type_name`] gives it, displayed as the user
/// writes it (`Vec<Order>`, see [`short_type_name`](crate::short_type_name)).
#[derive(Clone, Copy, Debug)]
pub(crate) struct TypeName(&'static str);

impl fmt::Display for TypeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::shorten_type_name(self.0))
    }
}

/// A branch that failed, as a fork with
/// [`collect_errors`](crate::ForkBuilder::collect_errors) hands it to its
/// function, which turns it into an update of the state.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct BranchFailure {
    /// The branch (`search`, `summarize#2`).
    pub path: TaskPath,
    /// The step that failed.
    pub step: String,
    /// The error, rendered.
    pub error: String,
    /// The input of the branch, for a fan-out's branch.
    pub input: Option<Value>,
    /// Whether the branch was cut short by the deadline of the loop the
    /// fork is in (the run's [deadline](crate::HarnessBuilder::deadline),
    /// or a sub-agent's own) rather than failing on its own: its error is a
    /// [`RunError::Deadline`](crate::RunError::Deadline), in the branch or
    /// in a sub-agent it ran, and that deadline has fallen. A step's
    /// timeout, or a sub-agent's own deadline falling before the loop's,
    /// is the branch's failure (`false`). A run past its deadline ends at
    /// the next step that waits (one that only computes runs on); the
    /// branch is recorded as done at the join, so it is the application
    /// that may do its work again (the orchestrator does, with its next
    /// wave, in a recovered run).
    pub deadline: bool,
}

/// Which branches a fork starts, as declared.
pub(crate) enum BranchesDef<S: HarnessState> {
    /// One branch per named step, in this order.
    Static(Vec<String>),
    /// One branch per input, each starting at `step`.
    Each {
        step: String,
        inputs: InputsFn<S>,
        input: TypeTag,
    },
}

/// A fork as declared: its branches, the step they join at, how many run at
/// once, and what a failing branch does.
pub(crate) struct ForkDef<S: HarnessState> {
    pub(crate) branches: BranchesDef<S>,
    pub(crate) join: String,
    pub(crate) limit: Option<usize>,
    pub(crate) max_branches: Option<usize>,
    pub(crate) collect: Option<CollectFn<S>>,
}

/// Where a declared transition leads, by name, before validation.
pub(crate) enum Dest<S: HarnessState> {
    Step(String),
    End,
    Fork(Box<ForkDef<S>>),
}

/// A step whose body is another loop (a sub-agent), which the engine hands
/// what that loop needs to run inside the step.
pub(crate) trait SubStep<S: HarnessState, C>: Send + Sync {
    /// Runs (or goes on with) the sub-agent's loop.
    fn call<'a>(
        &'a self,
        call: SubCall<'a, S, C>,
    ) -> BoxFuture<'a, Result<SubEnd<S::Update>, RunError>>;

    /// The sub-agents' loops, for drawing: one, or one per role (named)
    /// for a step that dispatches by role.
    fn shapes(&self) -> Vec<(Option<String>, SubShape)>;

    /// The input the step takes when it starts a fan-out's branch.
    fn input(&self) -> Option<TypeTag>;
}

/// A sub-agent's loop as drawn: its steps, its start, its edges (from, label,
/// to; `None` for the end).
pub(crate) struct SubShape {
    pub(crate) steps: Vec<String>,
    pub(crate) start: usize,
    pub(crate) edges: Vec<(usize, Option<String>, Option<usize>)>,
}

/// What a sub-agent's step gets from the engine.
pub(crate) struct SubCall<'a, S, C> {
    /// The state of the task that runs it.
    pub(crate) state: Arc<S>,
    /// That task's fan-out input, when the step starts a fan-out's branch.
    pub(crate) input: Option<&'a Value>,
    /// That task's context.
    pub(crate) ctx: &'a Arc<C>,
    /// That task's path.
    pub(crate) parent: TaskPath,
    /// The sub-agent's path.
    pub(crate) path: TaskPath,
    /// Where the sub-agent was when it paused in this process, or the
    /// journals of its steps read from the session.
    pub(crate) held: Option<Box<dyn SubRun>>,
    /// The session, if the run has one.
    pub(crate) cursor: Option<&'a Arc<SessionCursor>>,
    pub(crate) info: &'a RunInfo,
    /// The run's stop flag.
    pub(crate) stop: Arc<AtomicBool>,
    /// The run's event stream.
    pub(crate) emitter: Arc<dyn Emitter>,
    /// The run's observers of model and tool calls.
    pub(crate) hooks: Option<Arc<dyn crate::step::CallHooks>>,
    /// The run's effect journal: the sub-agent's effects go into it too.
    pub(crate) effects: Option<Arc<dyn crate::effect::EffectJournal>>,
    /// The run's deadline, which the sub-agent's steps keep too.
    pub(crate) deadline: Option<crate::step::RunDeadline>,
}

/// How a sub-agent's loop settled inside its step.
pub(crate) enum SubEnd<U> {
    /// It ended; the update its step returns.
    Done(U),
    /// It paused for a human.
    Paused(Interrupt, Box<dyn SubRun>),
    /// An answer to its interrupt was refused.
    Rejected(Interrupt, String, Box<dyn SubRun>),
    /// The run was stopped.
    Stopped(Box<dyn SubRun>),
}

/// A paused sub-agent, held by the task whose step runs it: answered in
/// place, its journals saved with the run's.
pub(crate) trait SubRun: Send + Sync {
    /// Gives `response` to the interrupt at `path` inside it.
    fn answer(&mut self, path: &TaskPath, response: Value, interrupt: Interrupt);
    /// Marks `interrupt` (at its path inside it) as the one whose answer
    /// its journal's last response is.
    fn answering(&mut self, interrupt: Interrupt);
    /// Its journals, by task.
    fn journals(&self, out: &mut Journals);
    /// For the step to take it back as what it is.
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send>;
    /// Keeps `journal` of the task at `path` inside it, if it is a
    /// sub-agent known only by its journals (a [`SubStub`]); a held loop
    /// has its journals in its tasks already.
    fn keep_journal(&mut self, _path: TaskPath, _journal: crate::step::StepJournal) {}
}

/// A sub-agent known only by the journals its session holds (after a
/// restart), until its step rebuilds it from the log.
#[derive(Default)]
pub(crate) struct SubStub {
    /// Its tasks' journals.
    pub(crate) journals: Journals,
    /// The interrupt whose answer was just given, if any.
    pub(crate) answering: Option<Interrupt>,
}

impl SubRun for SubStub {
    fn answer(&mut self, path: &TaskPath, response: Value, interrupt: Interrupt) {
        self.journals
            .entry(path.clone())
            .or_default()
            .responses
            .push(response);
        self.answering = Some(interrupt);
    }

    fn answering(&mut self, interrupt: Interrupt) {
        self.answering = Some(interrupt);
    }

    fn journals(&self, out: &mut Journals) {
        out.extend(self.journals.iter().map(|(p, j)| (p.clone(), j.clone())));
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }

    fn keep_journal(&mut self, path: TaskPath, journal: crate::step::StepJournal) {
        self.journals.insert(path, journal);
    }
}

/// A step as declared, before validation.
pub(crate) struct StepDef<S: HarnessState, C> {
    pub(crate) name: String,
    pub(crate) run: Option<RunFn<S, C>>,
    pub(crate) route: Option<RouteFn<S>>,
    pub(crate) on: Vec<(Signal, Dest<S>)>,
    /// `.next(step)` or `.end()`: where the step always goes after `run`.
    pub(crate) next: Option<Dest<S>>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) retry: RetryPolicy,
    /// The fields the step says it writes (`None`: any).
    pub(crate) writes: Option<Vec<String>>,
    /// The type of the input the step takes (`run_each`), if any.
    pub(crate) input: Option<TypeTag>,
    /// The sub-agent the step runs, if its body is one.
    pub(crate) sub: Option<Arc<dyn SubStep<S, C>>>,
    /// Whether `.cache` was declared with no `run` to cache.
    pub(crate) cache_without_run: bool,
    /// What the step declared more than once (each once): a violation.
    pub(crate) twice: Vec<&'static str>,
}

/// What [`StepDef::again`] notes: the step's body,
pub(crate) const BODY: &str = "its body (`.run`, `.run_each`, `.sub_agent`, `.dispatch`)";
/// its router,
pub(crate) const ROUTER: &str = "its router (`.route`)";
/// and where it goes after `run`.
pub(crate) const AFTER_RUN: &str =
    "where it goes after `run` (`.next`, `.end`, `.fork`/`.fan_out` with `.join`)";

impl<S: HarnessState, C> StepDef<S, C> {
    /// Notes that `what` is declared again when `already` is.
    pub(crate) fn again(&mut self, already: bool, what: &'static str) {
        if already && !self.twice.contains(&what) {
            self.twice.push(what);
        }
    }
}

impl<S: HarnessState, C> StepDef<S, C> {
    /// Whether the step has a body: `run` or a sub-agent.
    pub(crate) fn has_body(&self) -> bool {
        self.run.is_some() || self.sub.is_some()
    }
}
