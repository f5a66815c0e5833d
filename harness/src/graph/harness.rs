//! [`Harness`]: a validated loop with its fixed slots.

use super::compiled::HarnessInner;
use super::export;
use crate::slots::Context;
use crate::state::HarnessState;
use std::fmt;
use std::sync::Arc;

/// A validated loop with its fixed slots: what agents are created from.
///
/// Cheap to clone (shared).
///
/// ```
/// use harness::{Harness, HarnessState, StepResult, Cx, schemars};
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
            .field("step_limit", &self.inner.step_limit)
            .finish_non_exhaustive()
    }
}

impl<S: HarnessState, C: Context> Harness<S, C> {
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
        export::mermaid(&self.inner.steps, &self.inner.forks, self.inner.start)
    }

    /// The loop as a Graphviz DOT digraph.
    pub fn to_dot(&self) -> String {
        export::dot(&self.inner.steps, &self.inner.forks, self.inner.start)
    }
}
