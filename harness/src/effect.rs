//! Where a run's side effects are journaled: the seam a durable-execution
//! engine plugs into.
//!
//! A run's durability has two halves:
//! - its **progress** — a checkpoint per step, the phase (running,
//!   interrupted for a human, ended), the one owner of a session (a lease) —
//!   is committed to a [`SessionStore`](crate::session::SessionStore);
//! - its **side effects** — what a step does through
//!   [`Cx::once`](crate::Cx::once) and [`Cx::try_once`](crate::Cx::try_once)
//!   — are recorded in the step's journal, in that store, by default.
//!
//! An engine that replays a handler's journal by call order (Restate,
//! Temporal, DBOS) needs the second half to go through it: an
//! [`EffectJournal`] given to
//! [`HarnessBuilder::effects`](crate::graph::HarnessBuilder::effects) is asked
//! before every effect that the step's own journal has not recorded. It
//! either answers with the outcome it recorded on an earlier execution (the
//! effect is not run) or lets the effect run and records its outcome
//! ([`Journaled::Run`]). `harness-restate` implements it with Restate's
//! `ctx.run`.
//!
//! # The rule for steps
//!
//! A journal replays a run by asking for the same effects in the same
//! order. So a step does its I/O only through its context (`once`,
//! `try_once`), and decides what to do next only from its state, its
//! inputs and the results its effects returned: a step that reads the clock
//! or a random number outside `once` may ask for other effects on a replay,
//! which the journal reports as a divergence naming the effect.
//!
//! Branches are the one place where the engine itself could ask in an order
//! set by timing: a fork's branches run side by side, and which one reaches
//! its next effect first depends on how long the last one took. A journal
//! that replays by order says so ([`EffectJournal::ordered`]), and the
//! branches' effects then **take turns**: every branch's first effect, in
//! branch order, then every branch's second, and so on, a branch that has
//! ended being passed over. The branches still run side by side, and so do
//! their effects once handed to the journal (at most the fork's
//! [`limit`](crate::graph::ForkBuilder::limit) at once): a branch that is
//! slow to reach its next effect holds the branches after it back only
//! until it asks, never until its effect is done. A fork inside such a
//! branch (or inside a sub-agent it runs) is part of the branch's own
//! sequence: its branches run one after the other. A journal that records
//! one effect at a time but can record several run at once as one entry
//! says so ([`EffectJournal::batches`]) and is handed a round at a time
//! ([`EffectJournal::begin_all`]): every branch's next effect, the same
//! rounds on a replay. Within a step, effects
//! asked at once (`join!` of two `once`) are asked in the order the step's
//! future polls them, which a replay repeats.
//!
//! Under a journal an effect's failure is recorded too, as its message: a
//! failed `try_once` returns `StepError::msg(message)` both when it runs and
//! when it is replayed, so a step that looks at the error takes the same
//! path both times. An interrupt belongs outside `once`: asked inside a
//! journaled effect, it is recorded as the effect's failure.
//!
//! ```
//! use harness::effect::{EffectError, EffectId, EffectJournal, Journaled, PendingEffect};
//! use futures::future::BoxFuture;
//! use serde_json::Value;
//! use std::collections::HashMap;
//! use std::sync::{Arc, Mutex};
//!
//! /// Records outcomes by effect name, in memory.
//! #[derive(Debug, Default)]
//! struct Recorder(Arc<Mutex<HashMap<String, Result<Value, String>>>>);
//!
//! struct Pending(Arc<Mutex<HashMap<String, Result<Value, String>>>>, String);
//!
//! impl PendingEffect for Pending {
//!     fn finish(
//!         self: Box<Self>,
//!         outcome: Result<Value, String>,
//!     ) -> BoxFuture<'static, Result<Result<Value, String>, EffectError>> {
//!         self.0.lock().unwrap().insert(self.1, outcome.clone());
//!         Box::pin(async move { Ok(outcome) })
//!     }
//! }
//!
//! impl EffectJournal for Recorder {
//!     fn begin<'a>(&'a self, effect: &'a EffectId) -> BoxFuture<'a, Result<Journaled, EffectError>> {
//!         let name = effect.name();
//!         let recorded = self.0.lock().unwrap().get(&name).cloned();
//!         Box::pin(async move {
//!             Ok(match recorded {
//!                 Some(outcome) => Journaled::Recorded(outcome),
//!                 None => Journaled::Run(Box::new(Pending(self.0.clone(), name))),
//!             })
//!         })
//!     }
//! }
//! ```

use crate::ids::{RunId, SessionId, TaskPath};
use futures::future::BoxFuture;

pub(crate) mod turns;
use serde_json::Value;
use std::fmt::{self, Debug};
use std::sync::Arc;

/// One effect: which `once` call of which step visit of which session.
///
/// Every part is the same when a run is replayed, so
/// [`name`](Self::name) is a stable key for it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct EffectId {
    /// The session.
    pub session_id: SessionId,
    /// The task the step runs in (the root for the run's own loop).
    pub path: TaskPath,
    /// The step.
    pub step: Arc<str>,
    /// Steps the session completed before this visit (see
    /// [`Cx::idempotency_key`](crate::Cx::idempotency_key)).
    pub visit: u64,
    /// The step's attempt, from 1.
    pub attempt: u32,
    /// The key the step gave `once`.
    pub key: String,
}

impl EffectId {
    /// `{path/}{step}#{visit}.{attempt}:{key}`: what a journal names the
    /// effect by, and what a divergence reports.
    pub fn name(&self) -> String {
        if self.path.is_root() {
            format!("{}#{}.{}:{}", self.step, self.visit, self.attempt, self.key)
        } else {
            format!(
                "{}/{}#{}.{}:{}",
                self.path, self.step, self.visit, self.attempt, self.key
            )
        }
    }
}

impl fmt::Display for EffectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// A journal that failed: it cannot be reached, cannot record, or the run
/// asked for an effect other than the one it recorded (a divergence). The
/// step fails with it (and is retried by its policy).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct EffectError {
    message: String,
}

impl EffectError {
    /// An error saying `message`: what failed, naming the effect.
    pub fn new(message: impl fmt::Display) -> Self {
        Self {
            message: message.to_string(),
        }
    }
}

/// What a journal answers when a step is about to run an effect.
pub enum Journaled {
    /// The outcome recorded on an earlier execution: the effect is not run.
    /// `Err` holds the message of a failure.
    Recorded(Result<Value, String>),
    /// Not recorded: the step runs the effect, then hands its outcome to
    /// the journal with [`PendingEffect::finish`].
    Run(Box<dyn PendingEffect>),
}

impl Debug for Journaled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Recorded(outcome) => f.debug_tuple("Recorded").field(outcome).finish(),
            Self::Run(_) => f.write_str("Run(..)"),
        }
    }
}

/// An effect the journal let run: its outcome is recorded by
/// [`finish`](Self::finish).
pub trait PendingEffect: Send {
    /// Records `outcome` (the effect's value as JSON, or its failure's
    /// message) and returns the outcome as recorded, which the step goes on
    /// with. Fails if it cannot be recorded: the step then fails (and is
    /// retried by its policy) rather than go on with an effect the journal
    /// does not hold.
    fn finish(
        self: Box<Self>,
        outcome: Result<Value, String>,
    ) -> BoxFuture<'static, Result<Result<Value, String>, EffectError>>;
}

/// A journal of side effects beyond the session store; see the
/// [module docs](self).
pub trait EffectJournal: Send + Sync + Debug {
    /// Called before the effect `effect` runs, when the step's own journal
    /// has no result for it. Fails if the journal cannot be reached, or if
    /// the run asks for an effect other than the one it recorded at this
    /// point (a divergence, naming both).
    fn begin<'a>(&'a self, effect: &'a EffectId) -> BoxFuture<'a, Result<Journaled, EffectError>>;

    /// Whether the journal holds a run's effects as one sequence that a
    /// replay must ask for in the same order (Restate's journal does; a
    /// journal keyed by the effects' names does not). When it does, the
    /// effects of a fork's or fan-out's branches take turns (see the
    /// [module docs](self)): branches asking as they reach their effects
    /// would ask in an order set by timing, which a replay (whose recorded
    /// effects return at once) would not repeat. Such a journal is asked
    /// about an effect while others it let run are still running, and
    /// must let them run side by side. The default is `false`.
    fn ordered(&self) -> bool {
        false
    }

    /// Whether an [`ordered`](Self::ordered) journal takes the branches'
    /// effects a round at a time ([`begin_all`](Self::begin_all)) rather
    /// than one turn at a time: for an engine that journals one effect at a
    /// time but can record several run side by side as one entry. A round
    /// is every branch's next effect (at most the fork's limit), made of
    /// the same effects on a replay; the next round is handed over once
    /// the effects of this one are done. The default is `false`.
    fn batches(&self) -> bool {
        false
    }

    /// The id of a run about to start, when the journal fixes it. An engine
    /// that checks a replay against what the first attempt wrote (Restate
    /// checks every state write) needs the run's id to be the same on every
    /// attempt: the id steps see (`cx.run_id()`), the one traces carry and
    /// the one the session keeps. `None` (the default): a random id.
    fn run_id(&self) -> Option<RunId> {
        None
    }

    /// Asks about the effects of one round at once, in branch order: one
    /// answer per effect, in the same order. Called only when
    /// [`batches`](Self::batches) is `true`. The default asks
    /// [`begin`](Self::begin) about each in turn.
    fn begin_all<'a>(
        &'a self,
        effects: &'a [EffectId],
    ) -> BoxFuture<'a, Result<Vec<Journaled>, EffectError>> {
        Box::pin(async move {
            let mut answers = Vec::with_capacity(effects.len());
            for effect in effects {
                answers.push(self.begin(effect).await?);
            }
            Ok(answers)
        })
    }
}
