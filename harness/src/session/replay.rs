//! The engine's side of persistence: a cursor on one session that commits
//! checkpoints, holds the lease, and rebuilds state from the log.

use super::{
    Checkpoint, CheckpointKind, Commit, Durability, Lease, SCHEMA_VERSION, SessionConfig,
    SessionInFlight, SessionPhase, SessionStore, StoreError, StoreLoad, StoredRun, now_millis,
};
use crate::ids::{RunId, SessionId};
use crate::run::StepJournal;
use crate::state::HarnessState;
use serde_json::Value;
use std::sync::Arc;
use tokio::sync::Mutex;

/// The step name of a session's first snapshot.
pub(crate) const START: &str = "$start";
/// The step name of a run's input merged into an existing session.
pub(crate) const INPUT: &str = "$input";
/// The signal of a run whose last step ends it without one (`.next` to the
/// end, or `.end()` without a route).
pub(crate) const END: &str = "$end";

/// A run's handle on its session. Shared with the lease renewer.
pub(crate) struct SessionCursor {
    pub(crate) store: Arc<dyn SessionStore>,
    pub(crate) config: SessionConfig,
    pub(crate) owner: String,
    pub(crate) head: Mutex<StoredRun>,
}

impl std::fmt::Debug for SessionCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionCursor")
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

fn lease(owner: &str, config: &SessionConfig) -> Lease {
    let ttl = u64::try_from(config.lease_ttl.as_millis()).unwrap_or(u64::MAX);
    Lease {
        owner: owner.to_string(),
        expires_at: now_millis().saturating_add(ttl),
    }
}

fn owner_id() -> String {
    format!("{}-{}", std::process::id(), uuid::Uuid::new_v4())
}

impl SessionCursor {
    /// Creates a session whose state is `state`, leased to this run unless
    /// `leased` is false (a submitted run, for a worker to take).
    #[allow(clippy::too_many_arguments)] // one call site each; a struct would only rename them
    pub(crate) async fn create(
        store: Arc<dyn SessionStore>,
        config: SessionConfig,
        agent_id: &str,
        run_id: RunId,
        session_id: SessionId,
        state: Value,
        next_step: &str,
        leased: bool,
    ) -> Result<Self, StoreError> {
        let owner = owner_id();
        let now = now_millis();
        let state_bytes = json_len(&state);
        let head = StoredRun {
            schema_version: SCHEMA_VERSION,
            session_id,
            agent_id: agent_id.to_string(),
            run_id,
            phase: SessionPhase::Running,
            next_step: Some(next_step.to_string()),
            ended_with: None,
            steps: 0,
            journal: StepJournal::default(),
            version: 1,
            lease: leased.then(|| lease(&owner, &config)),
            snapshot_seq: 0,
            snapshot_index: 0,
            state_bytes,
            bytes_since_snapshot: 0,
            measured_index: 0,
            last_seq: 0,
            created_at: now,
            updated_at: now,
            queued: Vec::new(),
        };
        store
            .commit(Commit {
                head: head.clone(),
                expected_version: None,
                append: vec![Checkpoint {
                    seq: 0,
                    index: 0,
                    step: START.into(),
                    time: now,
                    kind: CheckpointKind::Snapshot(state),
                }],
                remove: Vec::new(),
                durable: config.durability == Durability::EveryStep,
            })
            .await?;
        Ok(Self {
            store,
            config,
            owner,
            head: Mutex::new(head),
        })
    }

    /// Takes the lease of an existing session for a new run (`run_id`),
    /// optionally appending the run's input as a checkpoint.
    pub(crate) async fn acquire(
        store: Arc<dyn SessionStore>,
        config: SessionConfig,
        mut head: StoredRun,
        run_id: Option<RunId>,
        next_step: Option<String>,
        journal: StepJournal,
        input: Option<Value>,
    ) -> Result<Self, AcquireError> {
        let now = now_millis();
        if let Some(l) = &head.lease
            && l.is_live(now)
        {
            return Err(AcquireError::InFlight(SessionInFlight {
                session: head.session_id.clone(),
                owner: l.owner.clone(),
                expires_at: l.expires_at,
            }));
        }
        let owner = owner_id();
        let expected = head.version;
        head.version += 1;
        head.lease = Some(lease(&owner, &config));
        head.phase = SessionPhase::Running;
        if let Some(run_id) = run_id {
            head.run_id = run_id;
        }
        head.next_step = next_step;
        head.journal = journal;
        head.updated_at = now;
        let mut append = Vec::new();
        if let Some(input) = input {
            append.push(push_input(&mut head, input, now));
        }
        let session = head.session_id.clone();
        match store
            .commit(Commit {
                head: head.clone(),
                expected_version: Some(expected),
                append,
                remove: Vec::new(),
                durable: true,
            })
            .await
        {
            Ok(()) => Ok(Self {
                store,
                config,
                owner,
                head: Mutex::new(head),
            }),
            // Someone else took it between our read and our write.
            Err(StoreError::Conflict { .. }) => Err(AcquireError::InFlight(SessionInFlight {
                session,
                owner: "another run".into(),
                expires_at: now,
            })),
            Err(e) => Err(AcquireError::Store(e)),
        }
    }

    /// Commits `next` over `head` (compare-and-set on its version) and makes
    /// it the cursor's head.
    async fn write(
        &self,
        head: &mut StoredRun,
        next: StoredRun,
        append: Vec<Checkpoint>,
        remove: Vec<u64>,
        durable: bool,
    ) -> Result<(), StoreError> {
        self.store
            .commit(Commit {
                head: next.clone(),
                expected_version: Some(head.version),
                append,
                remove,
                durable,
            })
            .await?;
        *head = next;
        Ok(())
    }

    /// Takes the lease again for an in-process resume of a paused run.
    pub(crate) async fn reacquire(&self, journal: StepJournal) -> Result<(), StoreError> {
        let mut head = self.head.lock().await;
        let mut next = head.clone();
        next.version += 1;
        next.lease = Some(lease(&self.owner, &self.config));
        next.phase = SessionPhase::Running;
        next.journal = journal;
        next.updated_at = now_millis();
        self.write(&mut head, next, Vec::new(), Vec::new(), true)
            .await
    }

    /// Records a completed step: its update, the step to run next, and a
    /// snapshot of the state when one pays (see [`SessionConfig`]).
    /// `measure` gives the state's size as JSON, `snapshot` the state.
    pub(crate) async fn step_done(
        &self,
        done: StepDone<'_>,
        measure: impl FnOnce() -> u64,
        snapshot: impl FnOnce() -> Result<Value, StoreError>,
    ) -> Result<(), StoreError> {
        let StepDone {
            step,
            update,
            next_step,
            signal,
            steps_this_run,
        } = done;
        let mut head = self.head.lock().await;
        let now = now_millis();
        let mut next = head.clone();
        next.version += 1;
        next.steps += 1;
        next.last_seq += 1;
        next.next_step = next_step.map(str::to_string);
        // The last step: its signal, for `recover` should the process die
        // before `settle` records the end.
        next.ended_with = match next_step {
            None => Some(signal.cloned().unwrap_or_else(|| crate::Signal::new(END))),
            Some(_) => None,
        };
        next.journal = StepJournal::default();
        next.updated_at = now;
        next.lease = Some(lease(&self.owner, &self.config));
        next.bytes_since_snapshot = head.bytes_since_snapshot.saturating_add(json_len(&update));
        // Every K steps since the last measure, and whenever the updates
        // since the last snapshot reach twice the state's size as last
        // measured, the state is measured again. A snapshot pays only when
        // replaying those updates reads at least twice the bytes of reading
        // the state: when steps overwrite what earlier steps wrote. A
        // session whose steps only add to its state gains nothing from one,
        // since its updates are its state, and is stored once, not twice.
        let since = next.bytes_since_snapshot;
        let every = self.config.snapshot_every;
        let last_measure = head.snapshot_index.max(head.measured_index);
        let by_steps = every > 0 && next.steps >= last_measure.saturating_add(every);
        let by_bytes = since
            >= head
                .state_bytes
                .max(self.config.snapshot_min_bytes)
                .saturating_mul(2);
        let mut append = vec![Checkpoint {
            seq: next.last_seq,
            index: next.steps,
            step: step.to_string(),
            time: now,
            kind: CheckpointKind::Update(update),
        }];
        let mut remove = Vec::new();
        if by_steps || by_bytes {
            next.state_bytes = measure();
            next.measured_index = next.steps;
            if since >= next.state_bytes.saturating_mul(2) {
                next.bytes_since_snapshot = 0;
                next.last_seq += 1;
                append.push(Checkpoint {
                    seq: next.last_seq,
                    index: next.steps,
                    step: step.to_string(),
                    time: now,
                    kind: CheckpointKind::Snapshot(snapshot()?),
                });
                // The first snapshot stays for time travel; a later one is
                // only a shortcut, superseded by this one.
                if head.snapshot_seq != 0 {
                    remove.push(head.snapshot_seq);
                }
                next.snapshot_seq = next.last_seq;
                next.snapshot_index = next.steps;
            }
        }
        let durable = match self.config.durability {
            Durability::EveryStep => true,
            Durability::EveryN(n) => n <= 1 || steps_this_run.is_multiple_of(u64::from(n)),
            Durability::AtExit => false,
        };
        self.write(&mut head, next, append, remove, durable).await
    }

    /// Records how the run settled and releases the lease. When the run
    /// completed and another run is queued on the session, that run's input
    /// is merged and the session becomes runnable again at `start`.
    pub(crate) async fn settle(
        &self,
        phase: SessionPhase,
        next_step: Option<&str>,
        journal: StepJournal,
        start: &str,
    ) -> Result<(), StoreError> {
        let mut head = self.head.lock().await;
        let mut next = head.clone();
        let now = now_millis();
        next.version += 1;
        next.next_step = next_step.map(str::to_string);
        next.ended_with = None;
        next.journal = journal;
        next.lease = None;
        next.updated_at = now;
        let mut append = Vec::new();
        if matches!(phase, SessionPhase::Completed { .. }) && !next.queued.is_empty() {
            let input = next.queued.remove(0);
            append.push(push_input(&mut next, input, now));
            next.phase = SessionPhase::Running;
            next.next_step = Some(start.to_string());
            next.run_id = RunId::random();
        } else {
            next.phase = phase;
        }
        self.write(&mut head, next, append, Vec::new(), true).await
    }

    /// Extends the lease if a third of it has passed. Called while a step runs.
    pub(crate) async fn renew(&self) -> Result<(), StoreError> {
        let mut head = self.head.lock().await;
        let ttl = u64::try_from(self.config.lease_ttl.as_millis()).unwrap_or(u64::MAX);
        let due = head
            .lease
            .as_ref()
            .is_none_or(|l| l.expires_at.saturating_sub(now_millis()) < ttl / 3 * 2);
        if !due || head.lease.is_none() {
            return Ok(());
        }
        let mut next = head.clone();
        next.version += 1;
        next.lease = Some(lease(&self.owner, &self.config));
        next.updated_at = now_millis();
        self.write(&mut head, next, Vec::new(), Vec::new(), false)
            .await
    }
}

/// A completed step, as [`SessionCursor::step_done`] records it.
pub(crate) struct StepDone<'a> {
    /// The step's name.
    pub step: &'a str,
    /// Its update, as stored.
    pub update: Value,
    /// The step to run next; `None` when the run ends.
    pub next_step: Option<&'a str>,
    /// The signal the step's route gave, if it has one.
    pub signal: Option<&'a crate::Signal>,
    /// Steps completed by this run so far (for `Durability::EveryN`).
    pub steps_this_run: u64,
}

/// Appends `input` (a run's input, merged through the reducers) to `head`'s
/// log as an `$input` update, counted like any update; returns the
/// checkpoint to commit with the head.
pub(crate) fn push_input(head: &mut StoredRun, input: Value, time: u64) -> Checkpoint {
    head.last_seq += 1;
    head.steps += 1;
    head.bytes_since_snapshot = head.bytes_since_snapshot.saturating_add(json_len(&input));
    Checkpoint {
        seq: head.last_seq,
        index: head.steps,
        step: INPUT.into(),
        time,
        kind: CheckpointKind::Update(input),
    }
}

/// The size of `value` as stored (compact JSON), counted without building
/// the text.
pub(crate) fn json_len<T: serde::Serialize + ?Sized>(value: &T) -> u64 {
    struct Count(u64);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // The sink cannot fail; a value that cannot be serialized counts what
    // was written before the error (callers serialize it for real anyway).
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// Why a run could not take a session.
#[derive(Debug)]
pub(crate) enum AcquireError {
    InFlight(SessionInFlight),
    Store(StoreError),
}

impl From<AcquireError> for super::SessionError {
    fn from(e: AcquireError) -> Self {
        match e {
            AcquireError::InFlight(f) => Self::InFlight(f),
            AcquireError::Store(s) => Self::from(s),
        }
    }
}

/// The state of `session` after `index` steps (the latest when `None`):
/// the nearest snapshot at or before it, then the updates after it.
pub(crate) async fn rebuild<S: HarnessState>(
    store: &dyn SessionStore,
    head: &StoredRun,
    index: Option<u64>,
) -> Result<S, StoreError> {
    let target = index.unwrap_or(head.steps);
    let from = if target >= head.snapshot_index {
        head.snapshot_seq
    } else {
        0
    };
    let session = &head.session_id;
    let log = store.checkpoints(session, from).await?;
    let bad = |cp: &Checkpoint, reason: String| {
        StoreError::Load(StoreLoad {
            session: session.clone(),
            record: format!("checkpoint {} (step {} `{}`)", cp.seq, cp.index, cp.step),
            reason,
        })
    };
    let mut iter = log.iter();
    let mut state: S = match iter.next() {
        Some(cp) if cp.seq == from => match &cp.kind {
            CheckpointKind::Snapshot(v) => serde_json::from_value(v.clone()).map_err(|e| {
                bad(
                    cp,
                    format!("the snapshot does not fit this state type: {e}"),
                )
            })?,
            CheckpointKind::Update(_) => {
                return Err(bad(cp, "expected a snapshot, found an update".into()));
            }
        },
        _ => {
            return Err(StoreError::Load(StoreLoad {
                session: session.clone(),
                record: format!("checkpoint {from}"),
                reason: "the snapshot is missing".into(),
            }));
        }
    };
    for cp in iter {
        if cp.index > target {
            break;
        }
        if let CheckpointKind::Update(v) = &cp.kind {
            let update: S::Update = serde_json::from_value(v.clone())
                .map_err(|e| bad(cp, format!("the update does not fit this state type: {e}")))?;
            state.apply(update);
        }
    }
    Ok(state)
}
