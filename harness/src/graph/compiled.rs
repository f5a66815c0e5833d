//! A validated loop, compiled: transitions resolved to step indices.

use super::def::{RetryPolicy, RouteFn, RunFn};
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
}

/// Everything a harness is, shared by its agents and their runs.
pub(crate) struct HarnessInner<S: HarnessState, C: Context> {
    pub(crate) steps: Vec<CompiledStep<S, C>>,
    pub(crate) start: usize,
    pub(crate) fixed: C::Fixed,
    pub(crate) observers: Vec<Arc<dyn Observer<S>>>,
    pub(crate) step_limit: u64,
    pub(crate) store: Option<Arc<dyn SessionStore>>,
    pub(crate) session_config: SessionConfig,
}

impl<S: HarnessState, C: Context> HarnessInner<S, C> {
    /// The index of the step named `name`.
    pub(crate) fn step_index(&self, name: &str) -> Option<usize> {
        self.steps.iter().position(|s| &*s.name == name)
    }

    /// The name of the start step.
    pub(crate) fn start_name(&self) -> &str {
        &self.steps[self.start].name
    }
}
