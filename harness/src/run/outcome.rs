//! [`Outcome`]: how a run settled.

use crate::ids::{RunId, SessionId};
use crate::signal::Signal;
use crate::step::Interrupt;

/// How a run settled.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Outcome<S> {
    /// The final signal: the one whose `.on(..).end()` ended the run, or
    /// [`Signal::INTERRUPT`], or [`Signal::STOPPED`].
    pub signal: Signal,
    /// The state when the run settled.
    pub state: S,
    /// The run.
    pub run_id: RunId,
    /// Its session.
    pub session_id: SessionId,
    /// Steps completed, in all.
    pub steps: u64,
    /// The pending interrupt when the signal is `$interrupt`.
    pub interrupt: Option<Interrupt>,
}

impl<S> Outcome<S> {
    /// Whether the run is paused for a human.
    pub fn is_interrupted(&self) -> bool {
        self.interrupt.is_some()
    }
}
