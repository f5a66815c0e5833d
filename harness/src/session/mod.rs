//! Sessions: a run's progress kept in a [`SessionStore`] so that it survives
//! the process.
//!
//! A session is a head ([`StoredRun`]: who runs it, its phase, the next step,
//! the current step's journal, a version and a lease) plus an append-only log
//! of [`Checkpoint`]s: one state snapshot when the session starts, one update
//! per completed step, and now and then a fresh snapshot which supersedes the
//! previous one (see [`SessionConfig`]), so storage grows with the data, not
//! with steps × data.
//! The state at any step is the nearest snapshot before it plus the updates
//! after it, merged through the reducers.
//!
//! Stores only need two guarantees, which every store in `harness-stores`
//! provides and its conformance suite checks:
//! - [`SessionStore::commit`] is atomic and compare-and-set on the head's
//!   version, so two writers of one session cannot both succeed;
//! - a commit with `durable = true` is on disk when it returns.
//!
//! One run per session is a lease in the head (owner + expiry), taken and
//! renewed by compare-and-set; an expired lease (a crashed process) can be
//! taken over.

mod cursor;
mod depth;
pub(crate) mod head;
mod rebuild;

pub use crate::error::{
    GapKind, LogGap, NoSession, SessionError, SessionInFlight, SessionPendingInterrupt, StoreError,
    StoreLoad, ValueTooDeep,
};
pub(crate) use cursor::{Holder, SessionCursor};
pub use depth::MAX_VALUE_DEPTH;
pub(crate) use depth::check_commit;
pub use head::{Busy, Saved, Stopping, Submitted, load_saved, load_value, save_commit, save_value};
pub(crate) use head::{Journals, journals};
pub use rebuild::{Span, read_log};
pub(crate) use rebuild::{TaskRebuilt, child_visit, end_open_fork, rebuild, rebuild_tasks, replay};

use crate::ids::{RunId, SessionId, TaskPath};
use crate::signal::Signal;
use crate::step::{Interrupt, StepJournal};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::pin::Pin;
use std::time::Duration;

/// The version of the stored format; a record of another version is refused
/// with [`StoreLoad`] rather than misread.
pub const SCHEMA_VERSION: u32 = 1;

/// Milliseconds since the Unix epoch.
pub fn now_millis() -> u64 {
    crate::clock::now_millis()
}

/// Where a session's latest run is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub enum SessionPhase {
    /// A run is going (or its process died; see the lease).
    Running,
    /// Paused for a human.
    Interrupted {
        /// What was asked, and the id a resume must give.
        interrupt: Interrupt,
    },
    /// The run ended with this signal (`$stopped` when stopped).
    Completed {
        /// The final signal.
        signal: Signal,
    },
    /// The run failed.
    Failed {
        /// The error, rendered.
        error: String,
    },
}

/// Who runs a session, until when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The owner: one per run attempt.
    pub owner: String,
    /// When the lease ends, in ms since the epoch, unless renewed.
    pub expires_at: u64,
}

impl Lease {
    /// Whether the lease still holds at `now` (ms since the epoch).
    pub fn is_live(&self, now: u64) -> bool {
        self.expires_at > now
    }
}

/// The head of a session: everything but the checkpoint log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredRun {
    /// [`SCHEMA_VERSION`] when written.
    pub schema_version: u32,
    /// The session.
    pub session_id: SessionId,
    /// The agent whose loop it runs.
    pub agent_id: String,
    /// Its latest run.
    pub run_id: RunId,
    /// Where that run is.
    pub phase: SessionPhase,
    /// The step to run next (the interrupted step, when interrupted).
    pub next_step: Option<String>,
    /// The signal the run's last step ended it with, stored with that step's
    /// checkpoint (`next_step` is then `None`) until the run records its end:
    /// if its process dies in between, [`Agent::recover`](crate::Agent::recover)
    /// records the end with this signal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_with: Option<Signal>,
    /// Steps completed in the session (the index of the last checkpoint).
    pub steps: u64,
    /// The current step's journal: interrupt answers and `once` results.
    pub journal: StepJournal,
    /// The journals of the current steps of parallel branches, by branch,
    /// while a fork is under way.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub branch_journals: BTreeMap<TaskPath, StepJournal>,
    /// Incremented by every commit; commits are compare-and-set on it.
    pub version: u64,
    /// The run holding the session, if any.
    pub lease: Option<Lease>,
    /// The sequence number of the latest snapshot.
    pub snapshot_seq: u64,
    /// The step index of the latest snapshot.
    pub snapshot_index: u64,
    /// The state's size in bytes (as JSON) when last measured: at the
    /// latest snapshot, or when the harness last checked whether one was
    /// due.
    #[serde(default, alias = "snapshot_bytes")]
    pub state_bytes: u64,
    /// The bytes of updates (step updates and run inputs) written since the
    /// latest snapshot.
    #[serde(default)]
    pub bytes_since_snapshot: u64,
    /// The step index at which the state's size was last measured (to decide
    /// whether a snapshot pays).
    #[serde(default)]
    pub measured_index: u64,
    /// The sequence number of the latest checkpoint.
    pub last_seq: u64,
    /// When the session was created (ms since the epoch).
    pub created_at: u64,
    /// When the head was last written (ms since the epoch).
    pub updated_at: u64,
    /// Inputs of runs submitted while the session was busy, in order; each
    /// starts a run when the one before it ends.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queued: Vec<Value>,
    /// The run asked to stop from outside the process that runs it
    /// ([`Agent::stop_session`](crate::Agent::stop_session)): it stops at
    /// its next step boundary when this is its [`run_id`](Self::run_id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_requested: Option<RunId>,
    /// [`steps`](Self::steps) when the latest run began (after its input),
    /// plus the steps its sub-agents' loops have taken since: the run has
    /// taken `steps - run_start` steps of its own loop (its branches'
    /// included), which its step limit and its outcome count across pauses
    /// and processes, as the process that runs it counts them; a
    /// sub-agent's steps are the session's (`steps` counts them), not the
    /// run's. `None` in a head written before it was kept: a run resumed
    /// from it counts from there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_start: Option<u64>,
}

impl StoredRun {
    /// The steps the latest run has taken (its branches' included), as far
    /// as this head knows: from [`run_start`](Self::run_start), else none.
    pub fn run_steps(&self) -> u64 {
        self.run_start
            .map_or(0, |start| self.steps.saturating_sub(start))
    }
}

/// What a checkpoint holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum CheckpointKind {
    /// The whole state.
    Snapshot(Value),
    /// A step's update, to merge through the reducers.
    Update(Value),
    /// A fork started its branches (recorded with the step that forked).
    Fork(ForkRecord),
    /// A step of a branch completed: its update applies to the branch's
    /// own state, and to the state of the task that forked at the join.
    Branch(BranchRecord),
    /// Every branch of a fork reached its join: their updates, in branch
    /// order, merged into the state of the task that forked.
    Join(JoinRecord),
    /// A record of a sub-agent's loop, run by a step of this session's
    /// loop: kept under the sub-agent's path, in the sub-agent's own state
    /// type. It does not change the state of the loop that runs it.
    Child(ChildRecord),
}

/// A record of a sub-agent's loop ([`CheckpointKind::Child`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChildRecord {
    /// The sub-agent: the path of the step that runs it.
    pub path: TaskPath,
    /// For an update of the sub-agent's own loop: its next step (`None`
    /// when the sub-agent ends).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
    /// For the update that ends the sub-agent's loop: the signal it ends
    /// with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<Signal>,
    /// The record, as the sub-agent's loop made it (its paths are full
    /// paths, under `path`).
    pub record: Box<CheckpointKind>,
}

/// The branches a fork started, as its [`CheckpointKind::Fork`] records them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ForkRecord {
    /// The task that forked (the root for the run's own loop).
    #[serde(default, skip_serializing_if = "TaskPath::is_root")]
    pub path: TaskPath,
    /// The fork: the step it leaves and how (`plan`, `plan/signal`).
    pub fork: String,
    /// The step the branches join at.
    pub join: String,
    /// The branches, in merge order.
    pub branches: Vec<BranchStart>,
}

/// One branch of a fork.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BranchStart {
    /// The branch's path.
    pub path: TaskPath,
    /// The step it starts at.
    pub step: String,
    /// Its input, for a fan-out's branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
}

/// A completed step of a branch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BranchRecord {
    /// The branch.
    pub path: TaskPath,
    /// The step's update.
    pub update: Value,
    /// The branch's next step; `None` once it has reached its join.
    pub next: Option<String>,
    /// For a failed branch whose fork collects errors: the error; `update`
    /// is then what the fork made of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

/// The merge of a fork's branches at its join.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JoinRecord {
    /// The task that forked.
    #[serde(default, skip_serializing_if = "TaskPath::is_root")]
    pub path: TaskPath,
    /// The branches merged, in the order their updates were applied.
    pub branches: Vec<TaskPath>,
}

/// One record of a session's log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Position in the log, from 0; unique per session.
    pub seq: u64,
    /// Steps completed once this record applies: a snapshot is the state
    /// after `index` steps, an update is step number `index`.
    pub index: u64,
    /// The step that produced it (`$input` for a run's input, `$start` for
    /// the first snapshot).
    pub step: String,
    /// When it was written (ms since the epoch).
    pub time: u64,
    /// The snapshot or the update.
    pub kind: CheckpointKind,
}

/// An atomic change to a session: the new head, checkpoints to append and
/// superseded snapshots to drop.
#[derive(Clone, Debug)]
pub struct Commit {
    /// The new head; its `version` is one more than `expected_version`'s.
    pub head: StoredRun,
    /// The version the stored head must have, or `None` if the session must
    /// not exist yet.
    pub expected_version: Option<u64>,
    /// Checkpoints to append.
    pub append: Vec<Checkpoint>,
    /// Sequence numbers of checkpoints to delete (superseded snapshots).
    pub remove: Vec<u64>,
    /// Whether the commit must be on disk before `commit` returns.
    pub durable: bool,
}

/// A page of a store's feed of created sessions
/// ([`SessionStore::created_since`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Created {
    /// The sessions, oldest creation first.
    pub sessions: Vec<SessionId>,
    /// The position to ask from next: that of the last session given, or
    /// the one asked from when none was.
    pub next: u64,
}

/// A session store: heads and checkpoint logs, with atomic compare-and-set
/// commits. See the [module docs](self) for the guarantees.
#[async_trait]
pub trait SessionStore: Send + Sync + Debug {
    /// The head of `session`, or `None` if there is no such session.
    async fn load(&self, session: &SessionId) -> Result<Option<StoredRun>, StoreError>;

    /// Applies `commit` atomically if the stored head's version is
    /// `commit.expected_version`; otherwise fails with
    /// [`StoreError::Conflict`] and changes nothing.
    ///
    /// The commit is lent, not given: a store writes what it reads from it
    /// (and copies what it keeps in memory), and the caller keeps the head
    /// it wrote without a copy of its own.
    async fn commit(&self, commit: &Commit) -> Result<(), StoreError>;

    /// The checkpoints of `session` with `seq >= from_seq`, in order.
    async fn checkpoints(
        &self,
        session: &SessionId,
        from_seq: u64,
    ) -> Result<Vec<Checkpoint>, StoreError>;

    /// Every session in the store.
    async fn sessions(&self) -> Result<Vec<SessionId>, StoreError>;

    /// Up to `limit` sessions whose ids start with `prefix`, in the
    /// store's order, from the one after `after` (an id an earlier page
    /// returned, which need not exist any more), or from the first: the
    /// pages of a listing that reads no more than it returns.
    ///
    /// The order is the same at every call, so pages asked one after the
    /// other each return a session at most once, and every session that
    /// existed throughout. It is the ids' byte order in every store of
    /// this crate's family but PostgreSQL's, where an id holding `%` or a
    /// NUL (stored escaped) may sort elsewhere. The default sorts
    /// [`sessions`](Self::sessions) and filters them: correct for any
    /// store, but it reads every id at each page; a store that can read a
    /// range of ids (sled, PostgreSQL, Redis) overrides it. Applications sharing
    /// one store between kinds of records under prefixes (the HTTP
    /// server's threads, runs and crons) list one kind through it.
    async fn sessions_page(
        &self,
        prefix: &str,
        after: Option<&SessionId>,
        limit: usize,
    ) -> Result<Vec<SessionId>, StoreError> {
        let mut ids: Vec<SessionId> = self
            .sessions()
            .await?
            .into_iter()
            .filter(|id| id.as_str().starts_with(prefix))
            .collect();
        ids.sort_unstable();
        ids.dedup();
        let from = after.map_or(0, |after| ids.partition_point(|id| id <= after));
        Ok(ids.into_iter().skip(from).take(limit).collect())
    }

    /// The sessions created after position `since` of the store's feed of
    /// creations, oldest first, at most `limit`, with the position to ask
    /// from next; with `since` `None`, no session and the feed's position
    /// now, which a reader starting now asks from. What a reader that
    /// follows a store (the studio's event stream) finds new sessions by,
    /// at the cost of what appeared rather than of a listing of every id.
    ///
    /// A session is in the feed once per creation (the commit that wrote
    /// its first head), and again if it is created again after it was gone
    /// (expired); it may be gone by the time it is read, so a reader loads
    /// each. Positions grow with each creation, and mean nothing to another store. A
    /// store may hold a creation back until the ones begun before it have
    /// ended, so that what it gives stays in order; it may give again,
    /// after the position of `None`, a session created just before it
    /// (PostgreSQL's does both); and it leaves out the sessions a writer
    /// that knows no feed created (an older build running beside), or that
    /// came in by other ways its docs name. So the feed tells a reader
    /// what is new at the cost of what appeared; it is no inventory. A
    /// store whose feed began again below `since` (its data was lost, or
    /// restored elsewhere) reads it from its start, so `next` then goes
    /// back: a reader asks from the `next` it was given, whatever it is.
    ///
    /// `Ok(None)` when the store keeps no such feed, which is the default:
    /// a reader then compares listings ([`sessions`](Self::sessions)). The
    /// memory, log, file, sled, Redis and PostgreSQL stores keep one.
    async fn created_since(
        &self,
        since: Option<u64>,
        limit: usize,
    ) -> Result<Option<Created>, StoreError> {
        let _ = (since, limit);
        Ok(None)
    }

    /// Makes every earlier commit durable.
    async fn flush(&self) -> Result<(), StoreError>;

    /// Up to `limit` sessions of agent `agent` that a worker could run now
    /// (at `now`, ms since the epoch, by [`now`](Self::now)): phase
    /// `Running` with no lease or an expired one — submitted runs, and runs
    /// whose process died. Oldest `updated_at` first. Sessions of other
    /// agents sharing the store are never returned.
    ///
    /// Taking one is still a compare-and-set on its head
    /// ([`Agent::recover`](crate::Agent::recover)); a store may hide sessions
    /// other workers are taking at the same moment (PostgreSQL's
    /// `FOR UPDATE SKIP LOCKED`). The default scans every session and skips
    /// heads it cannot read (with a warning): one corrupt record must not
    /// hide every other session from the workers.
    async fn runnable(
        &self,
        agent: &str,
        now: u64,
        limit: usize,
    ) -> Result<Vec<SessionId>, StoreError> {
        let mut found = Vec::new();
        for id in self.sessions().await? {
            let head = match self.load(&id).await {
                Ok(Some(head)) => head,
                Ok(None) => continue,
                Err(StoreError::Load(e)) => {
                    tracing::warn!(session = %id, error = %e, "skipping an unreadable session");
                    continue;
                }
                Err(e) => return Err(e),
            };
            if head.agent_id == agent
                && head.phase == SessionPhase::Running
                && head.lease.as_ref().is_none_or(|l| !l.is_live(now))
            {
                found.push((head.updated_at, id));
            }
        }
        found.sort();
        Ok(found.into_iter().take(limit).map(|(_, id)| id).collect())
    }

    /// The time by which leases are judged, in ms since the epoch.
    ///
    /// Every process sharing a store must judge a lease by the same clock,
    /// or a worker whose clock runs ahead takes over a run that is still
    /// going. A store on a server (PostgreSQL, Redis) returns the server's
    /// clock, estimated from this machine's clock and an offset it measures
    /// against the server now and then; the default is this machine's
    /// clock, which is the one clock of a store that only one machine opens.
    fn now(&self) -> u64 {
        now_millis()
    }
}

/// A store's future, as the [`SessionStore`] methods return it.
type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// A shared store is its store: each method hands on the future of the
/// store it points to as it is, rather than boxing it once more (a future
/// that awaits the inner one), so a store passed as an `Arc` costs no more
/// per commit than the store itself.
impl<T: SessionStore + ?Sized> SessionStore for std::sync::Arc<T> {
    fn load<'s, 'i, 'a>(&'s self, session: &'i SessionId) -> StoreFuture<'a, Option<StoredRun>>
    where
        's: 'a,
        'i: 'a,
        Self: 'a,
    {
        (**self).load(session)
    }
    fn commit<'s, 'c, 'a>(&'s self, commit: &'c Commit) -> StoreFuture<'a, ()>
    where
        's: 'a,
        'c: 'a,
        Self: 'a,
    {
        (**self).commit(commit)
    }
    fn checkpoints<'s, 'i, 'a>(
        &'s self,
        session: &'i SessionId,
        from_seq: u64,
    ) -> StoreFuture<'a, Vec<Checkpoint>>
    where
        's: 'a,
        'i: 'a,
        Self: 'a,
    {
        (**self).checkpoints(session, from_seq)
    }
    fn sessions<'s, 'a>(&'s self) -> StoreFuture<'a, Vec<SessionId>>
    where
        's: 'a,
        Self: 'a,
    {
        (**self).sessions()
    }
    fn sessions_page<'s, 'p, 'i, 'a>(
        &'s self,
        prefix: &'p str,
        after: Option<&'i SessionId>,
        limit: usize,
    ) -> StoreFuture<'a, Vec<SessionId>>
    where
        's: 'a,
        'p: 'a,
        'i: 'a,
        Self: 'a,
    {
        (**self).sessions_page(prefix, after, limit)
    }
    fn created_since<'s, 'a>(
        &'s self,
        since: Option<u64>,
        limit: usize,
    ) -> StoreFuture<'a, Option<Created>>
    where
        's: 'a,
        Self: 'a,
    {
        (**self).created_since(since, limit)
    }
    fn flush<'s, 'a>(&'s self) -> StoreFuture<'a, ()>
    where
        's: 'a,
        Self: 'a,
    {
        (**self).flush()
    }
    fn runnable<'s, 'i, 'a>(
        &'s self,
        agent: &'i str,
        now: u64,
        limit: usize,
    ) -> StoreFuture<'a, Vec<SessionId>>
    where
        's: 'a,
        'i: 'a,
        Self: 'a,
    {
        (**self).runnable(agent, now, limit)
    }
    fn now(&self) -> u64 {
        (**self).now()
    }
}

/// When checkpoints reach the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Durability {
    /// Every step's checkpoint is flushed before the next step starts.
    /// The last step's checkpoint holds how the run ends (see
    /// [`StoredRun::ended_with`]), so the record of the end that follows
    /// is not waited for: should the process die before it reaches the
    /// disk, [`Agent::recover`](crate::Agent::recover) records the end from
    /// that checkpoint. A pause, a failure and a stop are flushed.
    #[default]
    EveryStep,
    /// Every n-th step's checkpoint is flushed (and every pause and end);
    /// a crash can lose up to n-1 steps, which then run again.
    EveryN(u32),
    /// Only pauses and the end of a run are flushed.
    AtExit,
}

/// How a harness persists its runs; see [`HarnessBuilder::store`](crate::HarnessBuilder::store).
#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// When checkpoints reach the disk (default: every step).
    pub durability: Durability,
    /// When this many steps (default 100; 0 for never) have passed since
    /// the state's size was last measured, the harness measures it and
    /// takes a full snapshot if it pays: when the updates since the last
    /// snapshot (step updates and run inputs) add up to at least twice the
    /// state's size, that is when steps overwrite what earlier steps wrote.
    /// A session whose steps only add to its state gains nothing from a
    /// snapshot (its updates are its state) and is stored once, not twice.
    ///
    /// This bounds the replay by count where the size rule below does not
    /// reach: a small state rewritten at every step (a counter, the last
    /// reply) is snapshotted every 100 steps, since 100 updates of it weigh
    /// far more than twice the state, so loading and resuming a session
    /// replays at most 100 updates however long it ran: resuming a
    /// 1 000-step session of 250-byte rewrites took 0.28 ms instead of
    /// 0.75 ms with the former default of 1 000, for 0.2% more bytes of
    /// checkpoints (see the [performance](crate::guide::performance)
    /// guide). The cost is one serialization of the state per 100 steps,
    /// and a snapshot only when it is less than half the updates it saves
    /// from replay.
    pub snapshot_every: u64,
    /// The same measure and decision, made whenever the updates since the
    /// last snapshot reach twice the state's size as last measured, and at
    /// least twice this many bytes (default 64 KiB). After any step,
    /// rebuilding a session therefore reads its latest snapshot and less than twice the larger of
    /// this and the state's size as last measured of updates; measuring
    /// costs one serialization of the state per doubling of the updates
    /// and one per `snapshot_every` steps.
    pub snapshot_min_bytes: u64,
    /// How long a run's lease lasts unless renewed (default 30 s); it is
    /// renewed at every checkpoint and every third of this while a step runs.
    pub lease_ttl: Duration,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            durability: Durability::EveryStep,
            snapshot_every: 100,
            snapshot_min_bytes: 64 * 1024,
            lease_ttl: Duration::from_secs(30),
        }
    }
}

/// One entry of a session's history: the state after step `index`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointInfo {
    /// Steps completed at this point.
    pub index: u64,
    /// The step that completed (`$start`, `$input` for a run's input).
    pub step: String,
    /// The task it completed in: the root, or a branch (whose update the
    /// run's state gets at the join).
    #[serde(default, skip_serializing_if = "TaskPath::is_root")]
    pub path: TaskPath,
    /// When (ms since the epoch).
    pub time: u64,
}

impl CheckpointInfo {
    /// A session's history from its log: the first snapshot (`$start`) and
    /// every update, in order. Later snapshots restate the updates before
    /// them, so they are not steps of their own.
    pub(crate) fn history(log: Vec<Checkpoint>) -> Vec<CheckpointInfo> {
        log.into_iter()
            .filter_map(|cp| {
                let path = match &cp.kind {
                    CheckpointKind::Snapshot(_) if cp.seq == 0 => TaskPath::root(),
                    CheckpointKind::Update(_) => TaskPath::root(),
                    CheckpointKind::Branch(b) => b.path.clone(),
                    CheckpointKind::Child(c) => match &*c.record {
                        CheckpointKind::Update(_) => c.path.clone(),
                        CheckpointKind::Branch(b) => b.path.clone(),
                        _ => return None,
                    },
                    _ => return None,
                };
                Some(CheckpointInfo {
                    index: cp.index,
                    step: cp.step,
                    path,
                    time: cp.time,
                })
            })
            .collect()
    }
}
