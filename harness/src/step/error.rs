//! [`StepError`]: why a step's `run` failed.

use crate::error::BoxError;
use std::error::Error;
use std::fmt;

/// What a step's `run` returns.
pub type StepResult<U> = Result<U, StepError>;

/// Why a step's `run` failed.
///
/// Any error type converts into it with `?`; use [`StepError::msg`] for a
/// plain message. Like `anyhow::Error`, it does not itself implement
/// `std::error::Error` (that would conflict with the blanket conversion), but
/// [`RunError::Step`](crate::RunError::Step) exposes the original error as its source.
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
