//! The errors of steps and runs.

use crate::ids::InterruptId;
use crate::signal::Signal;
use std::error::Error;
use std::fmt;
use std::time::Duration;

/// A boxed error from user code.
pub type BoxError = Box<dyn Error + Send + Sync + 'static>;

/// What a step's `run` returns.
pub type StepResult<U> = Result<U, StepError>;

/// Why a step's `run` failed.
///
/// Any error type converts into it with `?`; use [`StepError::msg`] for a
/// plain message. Like `anyhow::Error`, it does not itself implement
/// `std::error::Error` (that would conflict with the blanket conversion), but
/// [`RunError::Step`] exposes the original error as its source.
pub struct StepError {
    kind: StepErrorKind,
}

enum StepErrorKind {
    Failed(BoxError),
    Interrupted,
}

#[derive(Debug)]
struct Message(String);

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Error for Message {}

impl StepError {
    /// A failure with this message.
    pub fn msg(message: impl fmt::Display) -> Self {
        Self {
            kind: StepErrorKind::Failed(Box::new(Message(message.to_string()))),
        }
    }

    /// A failure caused by `error`.
    pub fn new(error: impl Into<BoxError>) -> Self {
        Self {
            kind: StepErrorKind::Failed(error.into()),
        }
    }

    pub(crate) fn interrupted() -> Self {
        Self {
            kind: StepErrorKind::Interrupted,
        }
    }

    /// Whether this is the pause that [`Cx::interrupt`](crate::Cx::interrupt) asks for.
    pub fn is_interrupt(&self) -> bool {
        matches!(self.kind, StepErrorKind::Interrupted)
    }

    pub(crate) fn into_source(self) -> BoxError {
        match self.kind {
            StepErrorKind::Failed(e) => e,
            StepErrorKind::Interrupted => Box::new(Message("the step was interrupted".into())),
        }
    }
}

impl<E: Error + Send + Sync + 'static> From<E> for StepError {
    fn from(e: E) -> Self {
        Self::new(e)
    }
}

impl fmt::Debug for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            StepErrorKind::Failed(e) => f.debug_tuple("StepError").field(e).finish(),
            StepErrorKind::Interrupted => f.write_str("StepError(Interrupted)"),
        }
    }
}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            StepErrorKind::Failed(e) => fmt::Display::fmt(e, f),
            StepErrorKind::Interrupted => {
                f.write_str("the step is paused for a human (return this error with `?`)")
            }
        }
    }
}

/// Why a run ended without an outcome.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// A step's `run` failed on its last attempt.
    #[error("step `{step}` failed after {attempts} attempt(s): {source}")]
    Step {
        /// The step.
        step: String,
        /// Attempts made.
        attempts: u32,
        /// The step's error.
        source: BoxError,
    },
    /// A step's `run` took longer than its timeout on its last attempt.
    #[error("step `{step}` timed out after {limit:?} on each of {attempts} attempt(s)")]
    Timeout {
        /// The step.
        step: String,
        /// The step's timeout.
        limit: Duration,
        /// Attempts made.
        attempts: u32,
    },
    /// A step's `route` returned a signal the step does not declare.
    #[error(
        "step `{step}` routed to signal `{signal}`, which it does not declare (declared: {})",
        fmt_signals(.declared)
    )]
    UndeclaredSignal {
        /// The step.
        step: String,
        /// The signal returned.
        signal: Signal,
        /// The signals the step declares with `.on(..)`.
        declared: Vec<Signal>,
    },
    /// The run took as many steps as its limit allows.
    #[error(
        "the run reached its limit of {limit} steps before step `{step}`; \
         raise it with .step_limit(n) if the loop is meant to run that long"
    )]
    StepLimit {
        /// The limit.
        limit: u64,
        /// The step that would have run next.
        step: String,
    },
    /// The run is paused on an interrupt and was awaited again without a resume.
    #[error("the run is paused on interrupt {interrupt}; call run.resume(response, id) first")]
    Paused {
        /// The pending interrupt.
        interrupt: InterruptId,
    },
    /// The session store failed, or another run took the session over.
    #[error(transparent)]
    Store(#[from] crate::session::StoreError),
    /// The run already settled; it cannot be awaited again.
    #[error("the run has already settled; start a new run")]
    Settled,
}

fn fmt_signals(s: &[Signal]) -> String {
    if s.is_empty() {
        return "none".into();
    }
    s.iter()
        .map(|s| format!("`{s}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A resume that names an interrupt the run is not paused on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", match .pending {
    Some(p) => format!("the run is not paused on interrupt {given}: it is paused on {p}"),
    None => format!("the run is not paused on interrupt {given}: it is not paused at all"),
})]
pub struct NoInterrupt {
    /// The interrupt id given to resume.
    pub given: InterruptId,
    /// The interrupt the run is paused on, if any.
    pub pending: Option<InterruptId>,
}
