//! The loop: named steps and the transitions between them, built with
//! [`Harness::builder`], validated as a graph when built, and exportable as
//! Mermaid or Graphviz DOT.
//!
//! A step can
//! - `run`: async, reads the state and the context, returns a partial update
//!   (the only place the state changes);
//! - `route`: pure, reads the state after `run`, returns a [`Signal`];
//! - or both.
//!
//! Transitions: `.on(signal).to(step)`, `.on(signal).end()`, `.next(step)`.
//! This gives the three usual shapes: transform + route, transform + next, and
//! a decision node (route only).

mod builder;
mod export;
mod validate;

pub use builder::{DEFAULT_STEP_LIMIT, HarnessBuilder, OnBuilder, RetryPolicy, StepBuilder};
pub use validate::{LoopValidationError, Violation};

use crate::observe::Observer;
use crate::run::StepError;
use crate::session::{SessionConfig, SessionStore};
use crate::signal::Signal;
use crate::slots::{Context, Slots};
use crate::state::HarnessState;
use futures::future::BoxFuture;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// The async half of a step, boxed.
pub(crate) type RunFn<S, C> = Arc<
    dyn Fn(
            Arc<S>,
            crate::Cx<C>,
        ) -> BoxFuture<'static, Result<<S as HarnessState>::Update, StepError>>
        + Send
        + Sync,
>;
/// The pure half of a step.
pub(crate) type RouteFn<S> = Arc<dyn Fn(&S) -> Signal + Send + Sync>;

/// Where a transition leads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    Step(usize),
    End,
}

/// How a step leaves.
pub(crate) enum Exits {
    /// `.next(step)`: after `run`, always to this step.
    Next(usize),
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

pub(crate) struct HarnessInner<S: HarnessState, C> {
    pub(crate) steps: Vec<CompiledStep<S, C>>,
    pub(crate) start: usize,
    pub(crate) fixed: Slots,
    pub(crate) observers: Vec<Arc<dyn Observer<S>>>,
    pub(crate) step_limit: u64,
    pub(crate) store: Option<Arc<dyn SessionStore>>,
    pub(crate) session_config: SessionConfig,
}

impl<S: HarnessState, C> HarnessInner<S, C> {
    /// The index of the step named `name`.
    pub(crate) fn step_index(&self, name: &str) -> Option<usize> {
        self.steps.iter().position(|s| &*s.name == name)
    }
}

/// A validated loop with its fixed slots: what agents are created from.
///
/// Cheap to clone (shared).
///
/// ```
/// use harness::{Harness, HarnessState, StepResult, Cx};
/// use std::sync::Arc;
/// # use serde::{Serialize, Deserialize};
///
/// #[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
/// struct Count {
///     #[field(reduce = add)]
///     n: u32,
/// }
///
/// async fn bump(_: Arc<Count>, _: Cx<()>) -> StepResult<CountUpdate> {
///     Ok(CountUpdate::new().n(1))
/// }
///
/// let harness = Harness::<Count>::builder()
///     .step("bump").run(bump).route(|s: &Count| if s.n < 3 { "again" } else { "done" })
///         .on("again").to("bump")
///         .on("done").end()
///     .start("bump")
///     .build()?;
/// assert!(harness.to_mermaid().contains("bump"));
/// # Ok::<(), harness::LoopValidationError>(())
/// ```
pub struct Harness<S: HarnessState, C: Context = ()> {
    pub(crate) inner: Arc<HarnessInner<S, C>>,
}

impl<S: HarnessState, C: Context> Clone for Harness<S, C> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<S: HarnessState, C: Context> fmt::Debug for Harness<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Harness")
            .field("steps", &self.step_names().collect::<Vec<_>>())
            .field("start", &&*self.inner.steps[self.inner.start].name)
            .field("fixed_slots", &self.inner.fixed)
            .field("step_limit", &self.inner.step_limit)
            .finish_non_exhaustive()
    }
}

impl<S: HarnessState, C: Context> Harness<S, C> {
    /// Starts building a loop over state `S` with context `C`.
    pub fn builder() -> HarnessBuilder<S, C> {
        HarnessBuilder::new()
    }

    /// The steps' names, in the order they were declared.
    pub fn step_names(&self) -> impl Iterator<Item = &str> {
        self.inner.steps.iter().map(|s| &*s.name)
    }

    /// The name of the start step.
    pub fn start(&self) -> &str {
        &self.inner.steps[self.inner.start].name
    }

    /// The loop as a Mermaid flowchart.
    pub fn to_mermaid(&self) -> String {
        export::mermaid(&self.inner.steps, self.inner.start)
    }

    /// The loop as a Graphviz DOT digraph.
    pub fn to_dot(&self) -> String {
        export::dot(&self.inner.steps, self.inner.start)
    }
}
