//! A run's handle on its session: it holds the lease and commits the run's
//! transitions (from [`head`](super::head)) one after another.

use super::head::{self, BranchDone, ChildDone, Journals, NewSession, StepDone};
use super::{
    Commit, JoinRecord, Lease, SessionConfig, SessionError, SessionInFlight, SessionPhase,
    SessionStore, StoreError, StoredRun,
};
use crate::ids::{RunId, SessionId, TaskPath};
use crate::step::{JournalSink, StepJournal};
use futures::future::BoxFuture;
use serde_json::Value;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use tokio::sync::Mutex;

/// A run's handle on its session. Shared with the lease renewer.
pub(crate) struct SessionCursor {
    pub(crate) store: Arc<dyn SessionStore>,
    pub(crate) config: SessionConfig,
    owner: String,
    head: Mutex<StoredRun>,
    /// When the lease last written ends (the store's clock; 0 for none):
    /// readable while a commit holds `head`.
    expires_at: AtomicU64,
    /// Steps the session has completed, as last written.
    steps: AtomicU64,
    /// Whether the run was asked to stop from outside its process (see
    /// [`head::stop`]), as last read.
    stop_asked: AtomicBool,
    /// The run's stop flag, set when such a request is read.
    stop: OnceLock<Arc<AtomicBool>>,
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
    ///
    /// The commit is made, boxed, before the returned future is first
    /// polled: the future is inline in every run's task (see
    /// [`SessionCursor::write_with`]).
    #[allow(clippy::too_many_arguments)] // one call site each; a struct would only rename them
    pub(crate) fn create(
        store: Arc<dyn SessionStore>,
        config: SessionConfig,
        agent_id: &str,
        run_id: RunId,
        session_id: SessionId,
        state: Value,
        next_step: &str,
        holder: Holder,
    ) -> impl Future<Output = Result<Self, StoreError>> + Send + use<> {
        let owner = head::owner_id();
        let mut commit = head::create(
            NewSession {
                agent_id,
                run_id,
                session_id,
                state,
                next_step,
                lease: (holder == Holder::ThisRun)
                    .then(|| head::lease(&owner, &config, store.now())),
            },
            &config,
        );
        super::depth::redact_commit(&mut commit);
        let checked = super::check_commit(&commit).map(|()| Box::new(commit));
        async move {
            let commit = checked?;
            store.commit(&commit).await?;
            Ok(Self::holding(store, config, owner, commit.head))
        }
    }

    /// Takes the lease of an existing session for a new run (`run_id`),
    /// optionally appending the run's input as a checkpoint.
    pub(crate) async fn acquire(
        store: Arc<dyn SessionStore>,
        config: SessionConfig,
        current: StoredRun,
        run_id: Option<RunId>,
        next_step: Option<String>,
        journals: Journals,
        input: Option<Value>,
    ) -> Result<Self, SessionError> {
        let now = store.now();
        if let Some(held) = head::in_flight(&current, now) {
            return Err(held.into());
        }
        let owner = head::owner_id();
        let lease = head::lease(&owner, &config, now);
        let mut commit = head::acquire(&current, lease, run_id, next_step, journals, input);
        super::depth::redact_commit(&mut commit);
        super::check_commit(&commit).map_err(StoreError::from)?;
        match store.commit(&commit).await {
            Ok(()) => Ok(Self::holding(store, config, owner, commit.head)),
            // Someone else took it between our read and our write: its
            // lease as the store now has it, so that the caller knows when
            // to try again; when it is over already (the other run ended),
            // now.
            Err(StoreError::Conflict { .. }) => {
                let winner = match store.load(&current.session_id).await {
                    Ok(Some(head)) => head::in_flight(&head, store.now()),
                    Ok(None) | Err(_) => None,
                };
                Err(winner
                    .unwrap_or(SessionInFlight {
                        session: current.session_id,
                        owner: "another run".into(),
                        expires_at: now,
                    })
                    .into())
            }
            Err(e) => Err(e.into()),
        }
    }

    fn holding(
        store: Arc<dyn SessionStore>,
        config: SessionConfig,
        owner: String,
        head: StoredRun,
    ) -> Self {
        let expires_at = head.lease.as_ref().map_or(0, |l| l.expires_at);
        let steps = head.steps;
        let stop_asked = AtomicBool::new(head::stop_asked(&head));
        Self {
            store,
            config,
            owner,
            head: Mutex::new(head),
            expires_at: AtomicU64::new(expires_at),
            steps: AtomicU64::new(steps),
            stop_asked,
            stop: OnceLock::new(),
        }
    }

    /// Passes a stop asked through the store ([`head::stop`]) on to the
    /// run's stop `flag`, which its steps' boundaries check: at once if the
    /// session was taken with the request in it, else when a commit reads
    /// it.
    pub(crate) fn forward_stop(&self, flag: Arc<AtomicBool>) {
        if self.stop_asked.load(Ordering::Acquire) {
            flag.store(true, Ordering::Release);
        }
        let _ = self.stop.set(flag);
    }

    fn note_stop(&self) {
        self.stop_asked.store(true, Ordering::Release);
        if let Some(flag) = self.stop.get() {
            flag.store(true, Ordering::Release);
        }
    }

    /// Commits what `make` makes of the head (nothing if it makes nothing).
    ///
    /// The future it returns is inline in every run's task, step after
    /// step, so it holds little across its awaits: the commit is made in a
    /// block of its own and kept boxed while the store writes it (its head
    /// is then this cursor's, without a copy), and it is an `async` block
    /// rather than an `async fn`, whose arguments would be held twice (as
    /// this method's callers are too).
    ///
    /// While this run holds the lease, the only other writers of the head
    /// are a run queued behind it ([`Busy::Queue`](super::Busy::Queue)) and
    /// a stop asked from another process ([`head::stop`]); when
    /// one wins the compare-and-set, the commit is made again from the new
    /// head, and `make` gets the commit that was refused, to take back what
    /// it moved into it (so that a step's update is moved into its commit,
    /// not copied in case of a retry). When the lease is no longer this
    /// run's (another run took the session over), it fails with
    /// [`StoreError::Conflict`].
    #[allow(clippy::manual_async_fn)] // an `async fn` would hold `make` twice
    fn write_with<'a>(
        &'a self,
        mut make: impl FnMut(&StoredRun, Option<Box<Commit>>) -> Result<Option<Commit>, StoreError>
        + Send
        + 'a,
    ) -> impl Future<Output = Result<(), StoreError>> + Send + 'a {
        async move {
            let mut current = self.head.lock().await;
            let mut refused = None;
            loop {
                let commit = {
                    let Some(mut commit) = make(&current, refused.take())? else {
                        return Ok(());
                    };
                    super::depth::redact_commit(&mut commit);
                    super::check_commit(&commit)?;
                    Box::new(commit)
                };
                match self.store.commit(&commit).await {
                    Ok(()) => {
                        let next = commit.head;
                        let expires_at = next.lease.as_ref().map_or(0, |l| l.expires_at);
                        self.expires_at.store(expires_at, Ordering::SeqCst);
                        self.steps.store(next.steps, Ordering::SeqCst);
                        *current = next;
                        return Ok(());
                    }
                    Err(conflict @ StoreError::Conflict { .. }) => {
                        let held =
                            |h: &StoredRun| h.lease.as_ref().is_some_and(|l| l.owner == self.owner);
                        match self.store.load(&current.session_id).await? {
                            Some(fresh)
                                if held(&current)
                                    && held(&fresh)
                                    && fresh.version > current.version =>
                            {
                                // The only other writers while the lease is
                                // held: a run queued, a stop asked.
                                if head::stop_asked(&fresh) {
                                    self.note_stop();
                                }
                                *current = fresh;
                                refused = Some(commit);
                            }
                            _ => return Err(conflict),
                        }
                    }
                    Err(e) => return Err(e),
                }
            }
        }
    }

    /// Steps the session has completed, as last written.
    pub(crate) fn steps(&self) -> u64 {
        self.steps.load(Ordering::SeqCst)
    }

    /// When the lease ends (the store's clock), as last written; 0 if this
    /// run holds none.
    pub(crate) fn lease_expires_at(&self) -> u64 {
        self.expires_at.load(Ordering::SeqCst)
    }

    fn lease(&self) -> Lease {
        head::lease(&self.owner, &self.config, self.store.now())
    }

    /// Takes the lease again for an in-process resume of a paused run.
    pub(crate) fn reacquire(
        &self,
        journals: Journals,
    ) -> impl Future<Output = Result<(), StoreError>> + Send + '_ {
        self.write_with(move |current, _| {
            Ok(Some(head::reacquire(
                current,
                self.lease(),
                journals.clone(),
            )))
        })
    }

    /// Records a completed step of a branch (see [`head::branch_done`]).
    pub(crate) fn branch_done<'a>(
        &'a self,
        done: BranchDone<'a>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send + 'a {
        self.write_with(move |current, _| {
            Ok(Some(head::branch_done(
                current,
                &done,
                self.lease(),
                &self.config,
            )))
        })
    }

    /// Records what a sub-agent's loop did (see [`head::child_done`]).
    pub(crate) fn child_done<'a>(
        &'a self,
        done: ChildDone<'a>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send + 'a {
        self.write_with(move |current, _| {
            Ok(Some(head::child_done(
                current,
                &done,
                self.lease(),
                &self.config,
            )))
        })
    }

    /// The session's head as this run last wrote it.
    pub(crate) async fn head(&self) -> StoredRun {
        self.head.lock().await.clone()
    }

    /// Records the merge of a fork's branches at its join `step` (see
    /// [`head::joined`]).
    pub(crate) fn joined<'a>(
        &'a self,
        step: &'a str,
        record: JoinRecord,
        steps_this_run: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send + 'a {
        self.write_with(move |current, _| {
            Ok(Some(head::joined(
                current,
                step,
                record.clone(),
                self.lease(),
                &self.config,
                steps_this_run,
            )))
        })
    }

    /// Records a completed step (see [`head::step_done`]).
    pub(crate) fn step_done<'a>(
        &'a self,
        done: StepDone<'a>,
        measure: impl Fn() -> u64 + Send + 'a,
        snapshot: impl Fn() -> Result<Value, StoreError> + Send + 'a,
    ) -> impl Future<Output = Result<(), StoreError>> + Send + 'a {
        // The update and the fork are moved into the commit, and taken back
        // from it if it is refused; the rest of `done` is references.
        let mut shell = done;
        let mut owned = Some((std::mem::take(&mut shell.update), shell.fork.take()));
        self.write_with(move |current, refused| {
            let (update, fork) = match (owned.take(), refused) {
                (Some(owned), _) => owned,
                (None, Some(refused)) => head::take_back_step(*refused)?,
                (None, None) => {
                    return Err(StoreError::backend(
                        "a step's commit was made again without the one refused",
                    ));
                }
            };
            let done = StepDone {
                update,
                fork,
                ..shell.clone()
            };
            head::step_done(
                current,
                done,
                self.lease(),
                &self.config,
                &measure,
                &snapshot,
            )
            .map(Some)
        })
    }

    /// Records how the run settled and releases the lease (see
    /// [`head::settle`]).
    pub(crate) fn settle<'a>(
        &'a self,
        phase: SessionPhase,
        next_step: Option<&'a str>,
        journals: Journals,
        start: &'a str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send + 'a {
        self.write_with(move |current, _| {
            Ok(Some(head::settle(
                current,
                phase.clone(),
                next_step,
                journals.clone(),
                start,
                &self.config,
            )))
        })
    }

    /// Extends the lease if a third of it has passed. Called while a step runs.
    pub(crate) fn renew(&self) -> impl Future<Output = Result<(), StoreError>> + Send + '_ {
        self.write_with(|current, _| {
            let now = self.store.now();
            let lease = head::lease(&self.owner, &self.config, now);
            Ok(head::renew(current, lease, &self.config, now))
        })
    }
}

/// A run dropped without settling (its future dropped, its task aborted,
/// a `Run` never awaited) gives its lease up at once, so that its session
/// can be resumed, recovered or taken by a worker without waiting for the
/// lease to end. The session is left as the run last wrote it. This is done
/// in the background, on the tokio runtime the cursor is dropped in (none:
/// nothing is given up), and only while the lease is still this run's; a
/// process that dies gives nothing up, and its lease ends by itself.
impl Drop for SessionCursor {
    fn drop(&mut self) {
        if *self.expires_at.get_mut() == 0 {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let head = self.head.get_mut().clone();
        let store = Arc::clone(&self.store);
        let owner = std::mem::take(&mut self.owner);
        runtime.spawn(release(store, head, owner));
    }
}

/// Gives up `owner`'s lease on the session whose head it last wrote as
/// `head`; when that commit is refused (one was under way when the run was
/// dropped, or a run queued behind it wrote), reads the head again, while
/// the lease is still `owner`'s.
async fn release(store: Arc<dyn SessionStore>, mut head: StoredRun, owner: String) {
    for _ in 0..4 {
        let Some(commit) = head::release(&head, &owner) else {
            return;
        };
        match store.commit(&commit).await {
            Ok(()) => return,
            Err(StoreError::Conflict { .. }) => match store.load(&head.session_id).await {
                Ok(Some(fresh)) => head = fresh,
                _ => return,
            },
            Err(e) => {
                tracing::debug!(session = %head.session_id, error = %e,
                    "a dropped run's lease could not be given up; it ends by itself");
                return;
            }
        }
    }
}

impl JournalSink for SessionCursor {
    fn record<'a>(
        &'a self,
        path: &'a TaskPath,
        journal: StepJournal,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            self.write_with(|current, _| {
                Ok(Some(head::record_journal(
                    current,
                    path,
                    &journal,
                    self.lease(),
                )))
            })
            .await
        })
    }
}
