//! Agents: a harness with its agent slots, ready to run.

use crate::graph::{Harness, HarnessInner};
use crate::ids::SessionId;
use crate::run::Run;
use crate::slots::{Context, Phase, SlotError, SlotSource, Slots};
use crate::state::HarnessState;
use std::fmt;
use std::sync::Arc;

pub(crate) struct AgentInner<S: HarnessState, C> {
    pub(crate) id: Arc<str>,
    pub(crate) harness: Arc<HarnessInner<S, C>>,
    pub(crate) slots: Slots,
}

/// A harness with its agent slots: runs are started from it.
///
/// Cheap to clone (shared).
pub struct Agent<S: HarnessState, C: Context = ()> {
    inner: Arc<AgentInner<S, C>>,
}

impl<S: HarnessState, C: Context> Clone for Agent<S, C> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<S: HarnessState, C: Context> fmt::Debug for Agent<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Agent")
            .field("id", &self.inner.id)
            .field("slots", &self.inner.slots)
            .finish_non_exhaustive()
    }
}

/// Creates an agent named `id` from `harness`, with its agent slots.
///
/// The fixed slots (given to the harness) and the agent slots are checked
/// here: every missing, misplaced, unknown or mistyped slot is reported in one
/// [`SlotError`].
pub fn create_agent<S: HarnessState, C: Context>(
    id: impl Into<String>,
    harness: &Harness<S, C>,
    slots: Slots,
) -> Result<Agent<S, C>, SlotError> {
    let none = Slots::new();
    SlotSource::new(&harness.inner.fixed, &slots, &none)
        .check::<C>(&[Phase::Fixed, Phase::Agent])?;
    Ok(Agent {
        inner: Arc::new(AgentInner {
            id: Arc::from(id.into()),
            harness: Arc::clone(&harness.inner),
            slots,
        }),
    })
}

impl<S: HarnessState, C: Context> Agent<S, C> {
    /// The agent's id.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// Starts a run from `state` with the run slots, in a new session.
    ///
    /// Returns the [`Run`]; await it for the outcome. The run slots are
    /// checked here, all problems reported together.
    pub fn run(&self, state: S, slots: Slots) -> Result<Run<S, C>, SlotError> {
        self.run_in(SessionId::random(), state, slots)
    }

    /// Starts a run in the session `session_id`.
    pub fn run_in(
        &self,
        session_id: SessionId,
        state: S,
        slots: Slots,
    ) -> Result<Run<S, C>, SlotError> {
        let inner = &self.inner;
        let source = SlotSource::new(&inner.harness.fixed, &inner.slots, &slots);
        source.check::<C>(&[Phase::Run])?;
        let ctx = C::from_slots(&source)?;
        Ok(Run::new(Arc::clone(inner), ctx, state, session_id))
    }
}
