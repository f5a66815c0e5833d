//! A validated loop, compiled: transitions resolved to step indices.

use super::def::{CollectFn, InputsFn, RetryPolicy, RouteFn, RunFn, SubStep};
use crate::observe::Observer;
use crate::session::{SessionConfig, SessionStore};
use crate::signal::Signal;
use crate::slots::Context;
use crate::state::HarnessState;
use std::sync::Arc;
use std::time::Duration;

/// Where a transition leads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    Step(usize),
    End,
    /// Into the branches of fork number `n` (`HarnessInner::forks`), then
    /// on at its join.
    Fork(usize),
}

/// Which branches a fork starts.
pub(crate) enum Branches<S: HarnessState> {
    /// One per step, in this order.
    Static(Vec<usize>),
    /// One per input, each starting at `step`; more than `max` inputs
    /// fail the run.
    Each {
        step: usize,
        inputs: InputsFn<S>,
        max: usize,
    },
}

/// A validated fork.
pub(crate) struct CompiledFork<S: HarnessState> {
    /// Names the fork in the session's log: the step it leaves and how
    /// (`plan` for `.next`, `plan/signal` for `.on(signal)`).
    pub(crate) id: String,
    pub(crate) branches: Branches<S>,
    pub(crate) join: usize,
    /// Branches running at once.
    pub(crate) limit: usize,
    /// Turns a failed branch into an update; `None`: the run fails.
    pub(crate) collect: Option<CollectFn<S>>,
}

/// How a step leaves.
pub(crate) enum Exits {
    /// `.next(step)` or `.end()`: after `run`, always there.
    Next(Target),
    /// `.on(signal)`: by the signal `route` returns.
    On(Vec<(Signal, Target)>),
}

/// A validated step, with its transitions resolved to indices.
pub(crate) struct CompiledStep<S: HarnessState, C> {
    pub(crate) name: Arc<str>,
    pub(crate) run: Option<RunFn<S, C>>,
    pub(crate) route: Option<RouteFn<S>>,
    pub(crate) exits: Exits,
    pub(crate) timeout: Option<Duration>,
    pub(crate) retry: RetryPolicy,
    /// The fields the step says it writes, checked on each update.
    pub(crate) writes: Option<Vec<String>>,
    /// The sub-agent the step runs, if its body is one.
    pub(crate) sub: Option<Arc<dyn SubStep<S, C>>>,
}

/// Everything a harness is, shared by its agents and their runs.
pub(crate) struct HarnessInner<S: HarnessState, C: Context> {
    pub(crate) steps: Vec<CompiledStep<S, C>>,
    pub(crate) forks: Vec<CompiledFork<S>>,
    pub(crate) start: usize,
    pub(crate) fixed: C::Fixed,
    pub(crate) observers: Vec<Arc<dyn Observer<S>>>,
    pub(crate) step_limit: u64,
    /// How long one run may go on; see `HarnessBuilder::deadline`.
    pub(crate) deadline: Option<Duration>,
    pub(crate) store: Option<Arc<dyn SessionStore>>,
    /// Where effects are journaled besides the session; see `HarnessBuilder::effects`.
    pub(crate) effects: Option<Arc<dyn crate::effect::EffectJournal>>,
    pub(crate) session_config: SessionConfig,
}

impl<S: HarnessState, C: Context> HarnessInner<S, C> {
    /// The index of the step named `name`.
    pub(crate) fn step_index(&self, name: &str) -> Option<usize> {
        self.steps.iter().position(|s| &*s.name == name)
    }

    /// The index of the fork named `id`.
    pub(crate) fn fork_index(&self, id: &str) -> Option<usize> {
        self.forks.iter().position(|f| f.id == id)
    }

    /// The name of the start step.
    pub(crate) fn start_name(&self) -> &str {
        &self.steps[self.start].name
    }
}
