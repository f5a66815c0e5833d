//! What a run is controlled through from outside while it runs: its stop
//! flag and its event hub.

use super::events::EventHub;
use crate::state::HarnessState;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Stops a run at its next step boundary; see [`Run::stop_handle`](super::Run::stop_handle).
#[derive(Clone, Debug)]
pub struct StopHandle {
    pub(super) flag: Arc<AtomicBool>,
}

impl StopHandle {
    /// Asks the run to stop before its next step; the step running now is
    /// not cancelled. The outcome's signal is `$stopped`.
    pub fn stop(&self) {
        self.flag.store(true, Ordering::Release);
    }
}

/// Shared by a [`Run`](super::Run) handle and its engine.
pub(crate) struct RunControl<S: HarnessState> {
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) events: Arc<EventHub<S>>,
    /// The steps the run pauses before and after (its own loop's).
    pub(crate) breakpoints: std::sync::Mutex<Breakpoints>,
}

/// The steps a run pauses at, by index in the loop.
#[derive(Clone, Debug, Default)]
pub(crate) struct Breakpoints {
    pub(crate) before: Vec<usize>,
    pub(crate) after: Vec<usize>,
}
