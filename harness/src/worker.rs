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
use crate::error::RunError;
use crate::ids::{RunId, SessionId};
use crate::session::SessionError;
use crate::signal::Signal;
use crate::slots::{Context, NoSlots};
use crate::state::HarnessState;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// What a worker did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerReport {
    /// Runs taken.
    pub runs: u64,
    /// Runs that ended with a signal of the loop.
    pub completed: u64,
    /// Runs that paused for a human.
    pub interrupted: u64,
    /// Runs that failed: recorded as failed in their session, or, when
    /// another run was queued behind them, followed by that run.
    pub failed: u64,
    /// Runs stopped because their lease was lost (the session stays
    /// runnable, and a worker continues it from its last checkpoint).
    pub leases_lost: u64,
    /// Sessions another worker took first.
    pub lost_races: u64,
    /// Sessions that could not be taken because the store failed; each is
    /// tried again after a backoff.
    pub retries: u64,
    /// Sessions that could not be taken on every attempt, for long enough
    /// (see [`Worker::quarantine_after`]): marked failed, with the reason,
    /// so that the other sessions keep flowing.
    pub quarantined: u64,
    /// Times the store failed to list runnable sessions; the worker backs off
    /// and asks again.
    pub store_errors: u64,
}

/// A session the worker failed to take: how often, and when to try again.
#[derive(Clone, Debug)]
struct Backoff {
    failures: u32,
    until: Instant,
    /// The first failure of those in a row.
    since: Instant,
    /// The session's run and steps at the last failure, when its head
    /// read: a failure after another worker moved it on (another run, more
    /// steps) starts a new row.
    mark: Option<(RunId, u64)>,
}

/// A backoff entry whose wait ended this long ago (or twice
/// [`Worker::quarantine_after`], if longer) is dropped: its session has
/// not been offered since (another worker ran it, or it ended; or a long
/// queue kept it back), and a failure after so long starts a new row.
const FORGET_BACKOFF_AFTER: Duration = Duration::from_secs(24 * 3600);

/// Takes runnable sessions of one agent from its store and runs them, one at
/// a time. Start several (in one process or many) for a pool.
///
/// A worker only takes sessions of its own agent, so agents can share a
/// store. What cannot stop it:
/// - a session it cannot take, because it cannot load it (a corrupt
///   record, a state of another schema, a step it does not have) or
///   because the store fails, is tried again with exponential backoff,
///   other sessions going first meanwhile; after
///   [`max_attempts`](Self::max_attempts) failures in a row, the first at
///   least [`quarantine_after`](Self::quarantine_after) ago (default five
///   minutes), the session is **quarantined**: marked failed with the
///   reason, visible in `harness sessions show`, and recoverable with
///   [`Agent::recover`](crate::Agent::recover) once the cause is fixed.
///   A database's failover or a network blip shorter than that
///   quarantines nothing, nor does a rolling deploy whose new workers run
///   within it: a worker of the old version that cannot load a session the
///   new version wrote (a step it added) leaves it, and a worker of the new
///   version takes it (when the old worker's claim on it, if the store
///   claims, has run out).
///   A try comes no sooner than the store offers the session again: a
///   store that claims what [`runnable`](crate::session::SessionStore::runnable)
///   returns (PostgreSQL and Redis, `claim_ttl`, 10 s by default) hides it
///   for that long, so the backoff between tries is at least the claim
///   time, whatever [`max_backoff`](Self::max_backoff) says, and a
///   quarantine comes after `max_attempts` claim times at the least.
///   A session whose head itself does not read is never quarantined,
///   since nothing is written over a record that does not read: the
///   worker keeps backing off from it (one load a try, a warning naming
///   the record each time) until the record is restored or removed;
/// - a store error while listing sessions makes
///   [`run_until`](Self::run_until) back off and ask again.
pub struct Worker<S: HarnessState, C: Context> {
    agent: Agent<S, C>,
    slots: Arc<dyn Fn() -> C::Run + Send + Sync>,
    poll: Duration,
    batch: usize,
    max_attempts: u32,
    quarantine_after: Duration,
    max_backoff: Duration,
    backoff: Mutex<HashMap<SessionId, Backoff>>,
}

impl<S: HarnessState, C: Context> fmt::Debug for Worker<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Worker")
            .field("agent", &self.agent.id())
            .field("poll", &self.poll)
            .field("batch", &self.batch)
            .field("max_attempts", &self.max_attempts)
            .field("quarantine_after", &self.quarantine_after)
            .field("max_backoff", &self.max_backoff)
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
            max_attempts: 5,
            quarantine_after: Duration::from_secs(300),
            max_backoff: Duration::from_secs(30),
            backoff: Mutex::new(HashMap::new()),
        }
    }

    /// How long to wait when nothing is runnable (default 100 ms); also the
    /// first backoff after a store error, doubled at each error in a row.
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

    /// How many times in a row taking one session may fail (it cannot be
    /// loaded, or the store fails) before the session is quarantined
    /// (default 5, at least 1).
    #[must_use]
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n.max(1);
        self
    }

    /// How long taking one session must go on failing before it is
    /// quarantined (default 5 minutes), besides
    /// [`max_attempts`](Self::max_attempts) failures in a row: a session
    /// that the store fails to hand over for a short while (a failover, a
    /// restart, a network blip) is tried again, never set aside; so is one
    /// this worker cannot load but a worker of a newer version can (a step
    /// the new version added, during a rolling deploy), which that worker
    /// takes meanwhile. `Duration::ZERO` quarantines a session that cannot
    /// be loaded after `max_attempts` at once.
    #[must_use]
    pub fn quarantine_after(mut self, after: Duration) -> Self {
        self.quarantine_after = after;
        self
    }

    /// The longest backoff after store errors (default 30 s); a duration
    /// too long to be a point in time (`Duration::MAX`) waits about thirty
    /// years.
    #[must_use]
    pub fn max_backoff(mut self, max: Duration) -> Self {
        self.max_backoff = max;
        self
    }

    /// The backoff after `failures` errors in a row: the poll interval,
    /// doubled at each, up to the maximum.
    fn backoff_after(&self, failures: u32) -> Duration {
        let factor = 1u32 << failures.saturating_sub(1).min(16);
        self.poll.saturating_mul(factor).min(self.max_backoff)
    }

    /// When the backoff after `failures` errors ends; a backoff too long to
    /// be a point in time (`Duration::MAX`) ends in about thirty years.
    fn backoff_until(&self, failures: u32) -> Instant {
        let now = Instant::now();
        now.checked_add(self.backoff_after(failures))
            .unwrap_or_else(|| now + Duration::from_secs(1 << 30))
    }

    fn backoffs(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Backoff>> {
        self.backoff.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes and runs what is runnable now; returns how many runs it took.
    ///
    /// # Errors
    ///
    /// [`SessionError::NoStore`] if the agent has no store; the store's
    /// error if it cannot list runnable sessions. A session that cannot be
    /// taken is not an error of this call: see the [type docs](Self).
    pub async fn run_once(&self, report: &mut WorkerReport) -> Result<usize, SessionError> {
        self.run_found(report, || false)
            .await
            .map(|(taken, _)| taken)
    }

    /// [`run_once`](Self::run_once), asking `stop` before each session it
    /// takes; how many it took, and whether `stop` said to stop (then it
    /// is not asked again).
    async fn run_found(
        &self,
        report: &mut WorkerReport,
        mut stop: impl FnMut() -> bool,
    ) -> Result<(usize, bool), SessionError> {
        let store = self.agent.store_handle().ok_or(SessionError::NoStore)?;
        let now = Instant::now();
        let waiting: HashSet<SessionId> = {
            let mut backoffs = self.backoffs();
            let forget = FORGET_BACKOFF_AFTER.max(self.quarantine_after.saturating_mul(2));
            backoffs.retain(|_, b| now.saturating_duration_since(b.until) < forget);
            backoffs
                .iter()
                .filter(|(_, b)| b.until > now)
                .map(|(id, _)| id.clone())
                .collect()
        };
        // Ask for enough that sessions in backoff cannot hide the others.
        let ask = self.batch.saturating_add(waiting.len());
        let found = store.runnable(self.agent.id(), store.now(), ask).await?;
        let mut taken = 0;
        for session in found.into_iter().filter(|s| !waiting.contains(s)) {
            // A session claimed but not taken is offered again when its
            // claim runs out.
            if stop() {
                return Ok((taken, true));
            }
            let run = match self.agent.with((self.slots)()).take_running(&session).await {
                Ok(run) => run,
                // Another worker was faster, or the session moved on: it
                // can be taken, and a failure of this worker's before
                // does not count towards a quarantine.
                Err(SessionError::InFlight(_) | SessionError::NothingToRecover { .. }) => {
                    self.backoffs().remove(&session);
                    report.lost_races += 1;
                    continue;
                }
                // A store error, or a session this worker cannot load: a
                // corrupt one, or one a newer version of the agent wrote
                // (a rolling deploy), which its workers take meanwhile.
                // Set aside only once it has gone on long enough.
                Err(e) => {
                    self.failed_to_take(&session, &e, report).await;
                    continue;
                }
            };
            self.backoffs().remove(&session);
            taken += 1;
            report.runs += 1;
            match run.await {
                Ok(outcome) if outcome.signal == Signal::INTERRUPT => report.interrupted += 1,
                Ok(_) => report.completed += 1,
                Err(RunError::LeaseLost { .. }) => {
                    tracing::warn!(session = %session, "run stopped: its lease was lost");
                    report.leases_lost += 1;
                }
                Err(e) => {
                    let error = crate::secrets::redact(&e.to_string()).into_owned();
                    tracing::warn!(session = %session, error, "run failed");
                    report.failed += 1;
                }
            }
        }
        Ok((taken, false))
    }

    /// A failure to take `session` (a store error, or it cannot be loaded):
    /// back off from it, or quarantine it after too many in a row over
    /// long enough.
    async fn failed_to_take(
        &self,
        session: &SessionId,
        e: &SessionError,
        report: &mut WorkerReport,
    ) {
        report.retries += 1;
        // Where the session is, if its head reads (a load error may be the
        // head's own).
        let mark = match self.agent.store_handle() {
            Some(store) => match store.load(session).await {
                Ok(Some(head)) => Some((head.run_id, head.steps)),
                _ => None,
            },
            None => None,
        };
        let (failures, since) = {
            let mut backoffs = self.backoffs();
            let now = Instant::now();
            let fresh = Backoff {
                failures: 0,
                until: now,
                since: now,
                mark: mark.clone(),
            };
            let entry = backoffs
                .entry(session.clone())
                .or_insert_with(|| fresh.clone());
            if entry.mark.is_some() && mark.is_some() && entry.mark != mark {
                // Another worker moved it on since: a new row.
                *entry = fresh;
            } else if mark.is_some() {
                entry.mark = mark;
            }
            entry.failures = entry.failures.saturating_add(1);
            entry.until = self.backoff_until(entry.failures);
            (entry.failures, entry.since)
        };
        tracing::warn!(session = %session, error = %e, failures, "cannot take session; backing off");
        if failures >= self.max_attempts && since.elapsed() >= self.quarantine_after {
            self.backoffs().remove(session);
            let reason = format!(
                "taking it failed {failures} times in a row, over {:?}; the last error: {e}",
                since.elapsed()
            );
            self.quarantine(session, &reason, report).await;
        }
    }

    /// Marks `session` failed with `reason`, unless another run has taken it
    /// meanwhile.
    async fn quarantine(&self, session: &SessionId, reason: &str, report: &mut WorkerReport) {
        match self.agent.quarantine(session, reason).await {
            Ok(true) => {
                tracing::error!(session = %session, reason, "session quarantined");
                report.quarantined += 1;
            }
            Ok(false) => report.lost_races += 1,
            Err(e) => {
                // Not even the head can be written: try again later.
                tracing::warn!(session = %session, error = %e, "cannot quarantine session");
                let mut backoffs = self.backoffs();
                let now = Instant::now();
                let entry = backoffs.entry(session.clone()).or_insert(Backoff {
                    failures: 0,
                    until: now,
                    since: now,
                    mark: None,
                });
                entry.failures = entry.failures.saturating_add(1);
                entry.until = self.backoff_until(entry.failures);
            }
        }
    }

    /// Runs sessions until `shutdown` completes, then finishes the run in
    /// progress and returns what it did (it takes no other session, even of
    /// a [`batch`](Self::batch) it asked for: those are offered again when
    /// the store's claim on them runs out). A store that fails to list
    /// runnable sessions is asked again after a backoff (see
    /// [`max_backoff`](Self::max_backoff)); it does not end the loop.
    ///
    /// # Errors
    ///
    /// [`SessionError::NoStore`] if the agent has no store.
    pub async fn run_until(
        &self,
        shutdown: impl Future<Output = ()>,
    ) -> Result<WorkerReport, SessionError> {
        let mut report = WorkerReport::default();
        let mut shutdown = std::pin::pin!(shutdown);
        let mut errors = 0u32;
        loop {
            // Checked between runs, never during one: a run in progress
            // finishes (it is not dropped mid-step).
            if futures::FutureExt::now_or_never(&mut shutdown).is_some() {
                return Ok(report);
            }
            let taken = self
                .run_found(&mut report, || {
                    futures::FutureExt::now_or_never(&mut shutdown).is_some()
                })
                .await;
            let pause = match taken {
                Ok((_, true)) => return Ok(report),
                Ok((0, false)) => {
                    errors = 0;
                    self.poll
                }
                Ok((_, false)) => {
                    errors = 0;
                    continue;
                }
                Err(SessionError::NoStore) => return Err(SessionError::NoStore),
                Err(e) => {
                    errors = errors.saturating_add(1);
                    report.store_errors += 1;
                    let pause = self.backoff_after(errors);
                    tracing::warn!(error = %e, ?pause, "cannot list runnable sessions; backing off");
                    pause
                }
            };
            tokio::select! {
                () = &mut shutdown => return Ok(report),
                () = tokio::time::sleep(pause) => {}
            }
        }
    }
}
