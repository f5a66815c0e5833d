//! A run's handle on its session: it holds the lease and commits the run's
//! transitions (from [`head`](super::head)) one after another.

use super::head::{self, NewSession, StepDone};
use super::{
    Commit, Lease, SessionConfig, SessionError, SessionInFlight, SessionPhase, SessionStore,
    StoreError, StoredRun, now_millis,
};
use crate::ids::{RunId, SessionId};
use crate::step::StepJournal;
use serde_json::Value;
use std::sync::Arc;
use tokio::sync::Mutex;

/// A run's handle on its session. Shared with the lease renewer.
pub(crate) struct SessionCursor {
    pub(crate) store: Arc<dyn SessionStore>,
    pub(crate) config: SessionConfig,
    owner: String,
    head: Mutex<StoredRun>,
}

impl std::fmt::Debug for SessionCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionCursor")
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

/// What a new session is created for: a run that holds it from the start,
/// or a submitted run that a worker takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Holder {
    ThisRun,
    AWorker,
}

impl SessionCursor {
    /// Creates a session whose state is `state`, starting at `next_step`.
    #[allow(clippy::too_many_arguments)] // one call site each; a struct would only rename them
    pub(crate) async fn create(
        store: Arc<dyn SessionStore>,
        config: SessionConfig,
        agent_id: &str,
        run_id: RunId,
        session_id: SessionId,
        state: Value,
        next_step: &str,
        holder: Holder,
    ) -> Result<Self, StoreError> {
        let owner = head::owner_id();
        let commit = head::create(
            NewSession {
                agent_id,
                run_id,
                session_id,
                state,
                next_step,
                lease: (holder == Holder::ThisRun).then(|| head::lease(&owner, &config)),
            },
            &config,
        );
        let first = commit.head.clone();
        super::check_commit(&commit)?;
        store.commit(commit).await?;
        Ok(Self {
            store,
            config,
            owner,
            head: Mutex::new(first),
        })
    }

    /// Takes the lease of an existing session for a new run (`run_id`),
    /// optionally appending the run's input as a checkpoint.
    pub(crate) async fn acquire(
        store: Arc<dyn SessionStore>,
        config: SessionConfig,
        current: StoredRun,
        run_id: Option<RunId>,
        next_step: Option<String>,
        journal: StepJournal,
        input: Option<Value>,
    ) -> Result<Self, SessionError> {
        let now = now_millis();
        if let Some(held) = head::in_flight(&current, now) {
            return Err(held.into());
        }
        let owner = head::owner_id();
        let lease = head::lease(&owner, &config);
        let commit = head::acquire(&current, lease, run_id, next_step, journal, input);
        let next = commit.head.clone();
        super::check_commit(&commit).map_err(StoreError::from)?;
        match store.commit(commit).await {
            Ok(()) => Ok(Self {
                store,
                config,
                owner,
                head: Mutex::new(next),
            }),
            // Someone else took it between our read and our write.
            Err(StoreError::Conflict { .. }) => Err(SessionInFlight {
                session: current.session_id,
                owner: "another run".into(),
                expires_at: now,
            }
            .into()),
            Err(e) => Err(e.into()),
        }
    }

    /// Commits `commit` (made from `head`) and makes its head the cursor's.
    async fn write(&self, head: &mut StoredRun, commit: Commit) -> Result<(), StoreError> {
        let next = commit.head.clone();
        super::check_commit(&commit)?;
        self.store.commit(commit).await?;
        *head = next;
        Ok(())
    }

    fn lease(&self) -> Lease {
        head::lease(&self.owner, &self.config)
    }

    /// Takes the lease again for an in-process resume of a paused run.
    pub(crate) async fn reacquire(&self, journal: StepJournal) -> Result<(), StoreError> {
        let mut current = self.head.lock().await;
        let commit = head::reacquire(&current, self.lease(), journal);
        self.write(&mut current, commit).await
    }

    /// Records a completed step (see [`head::step_done`]).
    pub(crate) async fn step_done(
        &self,
        done: StepDone<'_>,
        measure: impl FnOnce() -> u64,
        snapshot: impl FnOnce() -> Result<Value, StoreError>,
    ) -> Result<(), StoreError> {
        let mut current = self.head.lock().await;
        let commit = head::step_done(
            &current,
            done,
            self.lease(),
            &self.config,
            measure,
            snapshot,
        )?;
        self.write(&mut current, commit).await
    }

    /// Records how the run settled and releases the lease (see
    /// [`head::settle`]).
    pub(crate) async fn settle(
        &self,
        phase: SessionPhase,
        next_step: Option<&str>,
        journal: StepJournal,
        start: &str,
    ) -> Result<(), StoreError> {
        let mut current = self.head.lock().await;
        let commit = head::settle(&current, phase, next_step, journal, start);
        self.write(&mut current, commit).await
    }

    /// Extends the lease if a third of it has passed. Called while a step runs.
    pub(crate) async fn renew(&self) -> Result<(), StoreError> {
        let mut current = self.head.lock().await;
        match head::renew(&current, self.lease(), &self.config) {
            Some(commit) => self.write(&mut current, commit).await,
            None => Ok(()),
        }
    }
}
