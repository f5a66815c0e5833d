//! Workers: processes that take runnable sessions from a shared store and
//! run them.
//!
//! A run is submitted with [`Agent::submit`] or [`Agent::submit_input`]; any
//! worker of any process that shares the store may take it. Taking a session
//! is a compare-and-set on its lease, so exactly one worker runs it; a worker
//! that dies leaves its lease to expire, and the session becomes runnable
//! again for the others, continuing from its last checkpoint.
//!
//! ```no_run
//! # use harness::schemars;
//! # #[derive(Clone, Debug, serde::Serialize, serde::Deserialize, harness::JsonSchema, harness::HarnessState)]
//! # struct MyState { n: u32 }
//! # async fn f(agent: harness::Agent<MyState>) -> Result<(), harness::session::SessionError> {
//! use harness::worker::Worker;
//! let worker = Worker::new(agent);
//! let shutdown = tokio::time::sleep(std::time::Duration::from_secs(3600));
//! let report = worker.run_until(shutdown).await?;
//! println!("{} runs completed", report.completed);
//! # Ok(()) }
//! ```

use crate::agent::Agent;
use crate::session::{SessionError, now_millis};
use crate::signal::Signal;
use crate::slots::{Context, NoSlots};
use crate::state::HarnessState;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// What a worker did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerReport {
    /// Runs taken.
    pub runs: u64,
    /// Runs that ended with a signal of the loop.
    pub completed: u64,
    /// Runs that paused for a human.
    pub interrupted: u64,
    /// Runs that failed (recorded as failed in their session).
    pub failed: u64,
    /// Sessions another worker took first.
    pub lost_races: u64,
}

/// Takes runnable sessions of one agent from its store and runs them, one at
/// a time. Start several (in one process or many) for a pool.
pub struct Worker<S: HarnessState, C: Context> {
    agent: Agent<S, C>,
    slots: Arc<dyn Fn() -> C::Run + Send + Sync>,
    poll: Duration,
    batch: usize,
}

impl<S: HarnessState, C: Context> fmt::Debug for Worker<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Worker")
            .field("agent", &self.agent.id())
            .field("poll", &self.poll)
            .field("batch", &self.batch)
            .finish_non_exhaustive()
    }
}

impl<S: HarnessState, C: Context> Worker<S, C> {
    /// A worker for `agent`, whose context has no run slots.
    pub fn new(agent: Agent<S, C>) -> Self
    where
        C::Run: NoSlots,
    {
        Self::with_run_slots(agent, C::Run::none)
    }

    /// A worker for `agent`; `slots` gives each run it takes its run slots.
    pub fn with_run_slots(
        agent: Agent<S, C>,
        slots: impl Fn() -> C::Run + Send + Sync + 'static,
    ) -> Self {
        Self {
            agent,
            slots: Arc::new(slots),
            poll: Duration::from_millis(100),
            batch: 1,
        }
    }

    /// How long to wait when nothing is runnable (default 100 ms).
    #[must_use]
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.poll = every;
        self
    }

    /// How many runnable sessions to ask the store for at once (default 1).
    /// Stores that claim what they return (PostgreSQL, Redis) hide those
    /// sessions from other workers for a while, so a worker should not ask
    /// for more than it runs next.
    #[must_use]
    pub fn batch(mut self, n: usize) -> Self {
        self.batch = n.max(1);
        self
    }

    /// Takes and runs what is runnable now; returns how many runs it took.
    pub async fn run_once(&self, report: &mut WorkerReport) -> Result<usize, SessionError> {
        let store = self.agent.store_handle().ok_or(SessionError::NoStore)?;
        let mut taken = 0;
        for session in store.runnable(now_millis(), self.batch).await? {
            let run = match self.agent.with((self.slots)()).recover(&session).await {
                Ok(run) => run,
                // Another worker was faster, or the session moved on.
                Err(SessionError::InFlight(_) | SessionError::NothingToRecover { .. }) => {
                    report.lost_races += 1;
                    continue;
                }
                Err(e) => return Err(e),
            };
            taken += 1;
            report.runs += 1;
            match run.await {
                Ok(outcome) if outcome.signal == Signal::INTERRUPT => report.interrupted += 1,
                Ok(_) => report.completed += 1,
                Err(e) => {
                    tracing::warn!(session = %session, error = %e, "run failed");
                    report.failed += 1;
                }
            }
        }
        Ok(taken)
    }

    /// Runs sessions until `shutdown` completes, then finishes the run in
    /// progress and returns what it did.
    pub async fn run_until(
        &self,
        shutdown: impl Future<Output = ()>,
    ) -> Result<WorkerReport, SessionError> {
        let mut report = WorkerReport::default();
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            let taken = tokio::select! {
                biased;
                () = &mut shutdown => return Ok(report),
                taken = self.run_once(&mut report) => taken?,
            };
            if taken == 0 {
                tokio::select! {
                    () = &mut shutdown => return Ok(report),
                    () = tokio::time::sleep(self.poll) => {}
                }
            }
        }
    }
}
