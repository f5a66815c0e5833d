//! Replicas: servers sharing one session store share their runs.
//!
//! With [`Server::replicas`](crate::Server::replicas), every run is kept in
//! the store as a record of its own — a session of the `harness-server/run`
//! owner, whose snapshot is the run ([`RunDoc`]) and whose log holds its
//! stream's frames in batches — and each thread keeps an index of its runs.
//! So:
//! - **one replica runs each run**: the one that created it holds a lease
//!   on its record and renews it; its keeper writes the run's frames and
//!   status there as they come (every [`Replicas::poll`]);
//! - **the store decides a thread's multitask strategy**: a new run is
//!   admitted into the thread's index by compare-and-set, so two replicas
//!   cannot both start a run on a thread that rejects a second one;
//! - **any replica serves any run**: one that did not create it follows its
//!   record (a mirror), so `join`, `join_stream` and `wait` work anywhere,
//!   and a cancel there is written to the record, where the runner's keeper
//!   finds it and stops the run;
//! - **a run outlives its replica**: when its lease lapses (the replica died
//!   or lost the store), another replica's reaper takes the record by
//!   compare-and-set, catches up on its frames and goes on — a run that had
//!   not started is started, one under way is continued from its session's
//!   last checkpoint with [`Agent::recover`](harness::Agent::recover), as a
//!   [`Worker`](harness::worker::Worker) would, so no step is applied twice.
//!
//! What is not shared: the frames a replica had not written when it died
//! (its clients saw them, a client joining elsewhere does not), and the
//! streaming protocol's thread streams (`GET /threads/{id}/stream`), which
//! see the runs of their own replica only.

use crate::app::{RUNS_KEPT, Shared};
use crate::error::ApiError;
use crate::record::{Frame, Mode, RunRecord, RunResult, RunStatus};
use crate::time::iso;
use harness::session::{
    Checkpoint, CheckpointKind, Commit, Lease, Saved, SessionError, SessionPhase, StoreError,
    StoredRun, load_saved, save_commit,
};
use harness::{SessionId, Signal};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

/// How servers sharing a store share their runs; see
/// [`Server::replicas`](crate::Server::replicas).
#[derive(Clone, Debug)]
pub struct Replicas {
    lease: Duration,
    poll: Duration,
}

impl Default for Replicas {
    fn default() -> Self {
        Self::new()
    }
}

impl Replicas {
    /// A lease of 10 s, a poll of 100 ms.
    pub fn new() -> Self {
        Self {
            lease: Duration::from_secs(10),
            poll: Duration::from_millis(100),
        }
    }

    /// How long a replica holds a run it does not renew (default 10 s, at
    /// least 3 polls): how long a run waits for another replica after its
    /// own died. The replica renews it every third of it.
    #[must_use]
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How often a replica writes its runs' new frames and reads the runs
    /// of others it follows (default 100 ms): the delay a stream joined on
    /// another replica adds, and what a cancel there waits at most.
    #[must_use]
    pub fn poll(mut self, every: Duration) -> Self {
        self.poll = every.max(Duration::from_millis(5));
        self
    }
}

/// A replica: its name (the owner of the leases it takes) and settings.
pub(crate) struct Replica {
    pub(crate) id: String,
    lease: Duration,
    poll: Duration,
    /// The keepers of the runs this replica runs, by run id.
    keepers: Mutex<HashMap<String, Arc<Keeper>>>,
    /// Set when the replica starts stopping: it takes no run over any
    /// more (it hands its own over).
    draining: std::sync::atomic::AtomicBool,
}

impl Replica {
    pub(crate) fn new(settings: &Replicas) -> Self {
        Self {
            id: format!("server-{}-{}", std::process::id(), uuid::Uuid::new_v4()),
            lease: settings.lease.max(settings.poll * 3),
            poll: settings.poll,
            keepers: Mutex::new(HashMap::new()),
            draining: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn keepers(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Keeper>>> {
        self.keepers.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The owner of run records in the store.
pub(crate) const RUN_OWNER: &str = "harness-server/run";
/// The owner of the threads' run indexes.
const INDEX_OWNER: &str = "harness-server/runs-of";
/// The step name of a checkpoint holding frames.
const FRAMES: &str = "$frames";
/// The step name of a checkpoint holding a record's value.
const SAVED: &str = "$saved";

fn run_key(run: &str) -> SessionId {
    SessionId::from(format!("{RUN_OWNER}/{run}"))
}

fn index_key(thread: &str) -> SessionId {
    SessionId::from(format!("{INDEX_OWNER}/{thread}"))
}

/// What starts a run once its turn comes, as the record keeps it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct LaunchDoc {
    pub(crate) input: Option<Value>,
    pub(crate) resume: Option<Value>,
    /// A checkpoint to fork at, and the body field that named it.
    pub(crate) checkpoint: Option<(String, String)>,
    pub(crate) tokens: bool,
    #[serde(default)]
    pub(crate) pause: crate::served::Pause,
}

/// A run as the store keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct RunDoc {
    pub(crate) run_id: String,
    pub(crate) thread_id: String,
    pub(crate) assistant_id: String,
    pub(crate) created_at: u64,
    pub(crate) updated_at: u64,
    pub(crate) metadata: Value,
    pub(crate) kwargs: Value,
    pub(crate) multitask_strategy: String,
    pub(crate) modes: Vec<String>,
    pub(crate) status: String,
    /// A cancel was asked for (from any replica).
    #[serde(default)]
    pub(crate) cancel: bool,
    /// Frames stored so far.
    #[serde(default)]
    pub(crate) frames: u64,
    pub(crate) launch: LaunchDoc,
    /// The runs of the thread it waits for.
    #[serde(default)]
    pub(crate) before: Vec<String>,
    /// When it may start (`after_seconds`), in ms since the epoch.
    #[serde(default)]
    pub(crate) not_before: Option<u64>,
    #[serde(default)]
    pub(crate) start_point: Option<StartPoint>,
    #[serde(default)]
    pub(crate) launched: Option<(String, Option<u64>)>,
    #[serde(default)]
    pub(crate) result: Option<RunResult>,
    #[serde(default)]
    pub(crate) webhook: Option<String>,
    #[serde(default)]
    pub(crate) delete_thread: bool,
    /// Refused when admitted, or deleted: no longer one of its thread's.
    #[serde(default)]
    pub(crate) gone: bool,
}

impl RunDoc {
    /// The record of a new run.
    pub(crate) fn new(
        run: &RunRecord,
        launch: LaunchDoc,
        not_before: Option<u64>,
        webhook: Option<String>,
        delete_thread: bool,
    ) -> Self {
        RunDoc {
            run_id: run.run_id.clone(),
            thread_id: run.thread_id.clone(),
            assistant_id: run.assistant_id.clone(),
            created_at: run.created_at,
            updated_at: run.created_at,
            metadata: run.metadata.clone(),
            kwargs: run.kwargs.clone(),
            multitask_strategy: run.multitask_strategy.to_string(),
            modes: run.modes.iter().map(|m| m.name().to_string()).collect(),
            status: RunStatus::Pending.as_str().into(),
            cancel: false,
            frames: 0,
            launch,
            before: Vec::new(),
            not_before,
            start_point: None,
            launched: None,
            result: None,
            webhook,
            delete_thread,
            gone: false,
        }
    }

    fn status(&self) -> RunStatus {
        RunStatus::parse(&self.status).unwrap_or(RunStatus::Error)
    }

    fn settled(&self) -> bool {
        self.status().is_done()
    }

    /// The run as the API shows it (as [`RunRecord::to_json`]).
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "run_id": self.run_id,
            "thread_id": self.thread_id,
            "assistant_id": self.assistant_id,
            "created_at": iso(self.created_at),
            "updated_at": iso(self.updated_at),
            "status": self.status,
            "metadata": self.metadata,
            "multitask_strategy": self.multitask_strategy,
            "kwargs": self.kwargs,
        })
    }

    /// A local copy of the run, without its frames.
    fn record(&self, mirror: bool) -> Arc<RunRecord> {
        let modes = self.modes.iter().filter_map(|m| Mode::parse(m)).collect();
        let record = RunRecord::restore(
            self.run_id.clone(),
            self.thread_id.clone(),
            self.assistant_id.clone(),
            self.created_at,
            self.metadata.clone(),
            self.kwargs.clone(),
            strategy_name(&self.multitask_strategy),
            modes,
            mirror,
        );
        if let Some(point) = &self.start_point {
            record.set_start_point(point.at.clone());
        }
        if let Some((session, seq)) = &self.launched {
            record.set_launched(session.clone(), *seq);
        }
        record
    }
}

/// Where the thread stood when the run started (see
/// [`RunRecord::start_point`]): a struct, since serde reads a `null` of a
/// doubled `Option` back as the outer `None`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct StartPoint {
    /// The session and its step count; `None` for a thread that had no
    /// state.
    pub(crate) at: Option<(String, u64)>,
}

/// A strategy's name as the static string a record keeps.
pub(crate) fn strategy_name(name: &str) -> &'static str {
    ["reject", "enqueue", "interrupt", "rollback"]
        .into_iter()
        .find(|s| *s == name)
        .unwrap_or("reject")
}

// ---- records kept as one-snapshot sessions ----

fn damaged(key: &SessionId, why: impl std::fmt::Display) -> ApiError {
    ApiError::Internal(format!("the server's record {key} is damaged: {why}"))
}

/// The record `key` of `owner` (its head and its value), if it exists: as
/// `load_saved` reads it, a record of another owner or without its value
/// being damage.
async fn read(app: &Shared, key: &SessionId, owner: &str) -> Result<Option<Saved>, ApiError> {
    match load_saved(&*app.store, owner, key).await {
        Ok(kept) => Ok(kept),
        Err(e @ SessionError::Load(_)) => Err(damaged(key, e)),
        Err(e) => Err(e.into()),
    }
}

/// A commit writing `value` as record `key`'s new snapshot (after
/// `frames`, if any), replacing `prev`'s, in `phase` under `lease`: the
/// commit `save_commit` makes, with the frames before the snapshot.
fn write(
    prev: Option<&StoredRun>,
    key: &SessionId,
    owner: &str,
    value: Value,
    frames: Option<Value>,
    (phase, lease): (SessionPhase, Option<Lease>),
    now: u64,
) -> Commit {
    let mut commit = save_commit(prev, owner, key, value);
    commit.head.phase = phase;
    commit.head.lease = lease;
    commit.head.updated_at = now;
    for c in &mut commit.append {
        c.time = now;
    }
    if let Some(frames) = frames {
        let seq = commit.head.last_seq;
        for c in &mut commit.append {
            c.seq += 1;
        }
        commit.head.snapshot_seq += 1;
        commit.head.last_seq += 1;
        commit.append.insert(
            0,
            Checkpoint {
                seq,
                index: 0,
                step: FRAMES.into(),
                time: now,
                kind: CheckpointKind::Update(frames),
            },
        );
    }
    commit
}

fn doc_of(key: &SessionId, value: Value) -> Result<RunDoc, ApiError> {
    serde_json::from_value(value).map_err(|e| damaged(key, e))
}

/// The stored record of run `run`, with its head.
async fn read_run(app: &Shared, run: &str) -> Result<Option<(StoredRun, RunDoc)>, ApiError> {
    let key = run_key(run);
    match read(app, &key, RUN_OWNER).await? {
        Some(kept) => Ok(Some((kept.head, doc_of(&key, kept.value)?))),
        None => Ok(None),
    }
}

/// The stored record of run `run` as the API shows it, if it is one of
/// thread `thread`'s (any thread's when `None`).
pub(crate) async fn run_json(
    app: &Shared,
    thread: Option<&str>,
    run: &str,
) -> Result<Option<Value>, ApiError> {
    Ok(read_run(app, run)
        .await?
        .filter(|(_, d)| !d.gone && thread.is_none_or(|t| t == d.thread_id))
        .map(|(_, d)| d.to_json()))
}

impl Replica {
    fn lease_from(&self, app: &Shared) -> Lease {
        let millis = u64::try_from(self.lease.as_millis()).unwrap_or(u64::MAX);
        Lease {
            owner: self.id.clone(),
            expires_at: app.store.now().saturating_add(millis),
        }
    }
}

fn replica(app: &Shared) -> &Replica {
    app.replica
        .as_ref()
        .expect("replica code runs only on a server with replicas")
}

// ---- a thread's run index: where the store decides ----

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Index {
    /// Oldest first.
    runs: Vec<Entry>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Entry {
    id: String,
    #[serde(default)]
    done: bool,
}

/// Changes thread `thread`'s index as `change` says (given the index and
/// the ids of its entries whose runs have settled though not yet marked),
/// by compare-and-set, deciding again when another replica wrote first.
async fn change_index<T>(
    app: &Shared,
    thread: &str,
    mut change: impl FnMut(&mut Index) -> Result<T, ApiError>,
) -> Result<T, ApiError> {
    let key = index_key(thread);
    for _ in 0..32 {
        let kept = read(app, &key, INDEX_OWNER).await?;
        let mut index: Index = match &kept {
            Some(k) => serde_json::from_value(k.value.clone()).map_err(|e| damaged(&key, e))?,
            None => Index::default(),
        };
        // Runs that settled without being marked (their replica died
        // between the two writes) are marked now.
        for entry in index.runs.iter_mut().filter(|e| !e.done) {
            if let Some((_, doc)) = read_run(app, &entry.id).await?
                && (doc.settled() || doc.gone)
            {
                entry.done = true;
            }
        }
        let out = change(&mut index)?;
        let mut excess = index.runs.len().saturating_sub(RUNS_KEPT);
        index.runs.retain(|e| {
            if excess > 0 && e.done {
                excess -= 1;
                false
            } else {
                true
            }
        });
        let value = serde_json::to_value(&index).map_err(|e| ApiError::Internal(e.to_string()))?;
        let commit = write(
            kept.as_ref().map(|k| &k.head),
            &key,
            INDEX_OWNER,
            value,
            None,
            (
                SessionPhase::Completed {
                    signal: Signal::new(SAVED),
                },
                None,
            ),
            app.store.now(),
        );
        match app.store.commit(&commit).await {
            Ok(()) => return Ok(out),
            Err(StoreError::Conflict { .. }) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(ApiError::Unavailable(format!(
        "the runs of thread {thread} kept changing while this server wrote them; try again"
    )))
}

/// Admits run `run` among thread `thread`'s runs: a 409 if the thread is
/// busy and `reject` says so; else the runs it comes after, oldest first.
pub(crate) async fn admit(
    app: &Shared,
    thread: &str,
    run: &str,
    reject: bool,
) -> Result<Vec<String>, ApiError> {
    change_index(app, thread, |index| {
        let before: Vec<String> = index
            .runs
            .iter()
            .filter(|e| !e.done)
            .map(|e| e.id.clone())
            .collect();
        if reject && let Some(active) = before.last() {
            return Err(ApiError::conflict(format!(
                "thread {thread} is busy with run {active}: wait for it, join it or cancel it, or \
                 give another multitask_strategy (enqueue, interrupt, rollback)"
            )));
        }
        index.runs.push(Entry {
            id: run.to_string(),
            done: false,
        });
        Ok(before)
    })
    .await
}

/// Takes `runs` out of thread `thread`'s index (a rollback, a delete).
pub(crate) async fn unlist(app: &Shared, thread: &str, runs: &[String]) -> Result<(), ApiError> {
    change_index(app, thread, |index| {
        index.runs.retain(|e| !runs.contains(&e.id));
        Ok(())
    })
    .await?;
    for run in runs {
        mark_gone(app, run).await?;
    }
    Ok(())
}

/// The ids of thread `thread`'s runs, newest first.
pub(crate) async fn list(app: &Shared, thread: &str) -> Result<Vec<String>, ApiError> {
    let key = index_key(thread);
    let Some(kept) = read(app, &key, INDEX_OWNER).await? else {
        return Ok(Vec::new());
    };
    let index: Index = serde_json::from_value(kept.value).map_err(|e| damaged(&key, e))?;
    Ok(index.runs.into_iter().rev().map(|e| e.id).collect())
}

/// Makes a mirror of each run of thread `thread` that the store keeps,
/// that is not in `seen` and that this replica has none of, oldest first,
/// so that a thread's stream here follows the runs other replicas run;
/// whether it made any. Each run found goes into `seen` and is not made
/// again (once let go of when settled runs are capped); a run listed
/// before its record is written is looked for again next time.
pub(crate) async fn adopt(
    app: &Shared,
    thread: &str,
    seen: &mut HashSet<String>,
) -> Result<bool, ApiError> {
    let mut ids = list(app, thread).await?;
    ids.reverse();
    let mut made = false;
    for id in ids {
        if seen.contains(&id) {
            continue;
        }
        let here = app.runs().find(thread, &id).is_some();
        if here || find(app, Some(thread), &id).await?.is_some() {
            made |= !here;
            seen.insert(id);
        }
    }
    Ok(made)
}

/// How often a replica looks at the store for what other replicas did.
pub(crate) fn poll(app: &Shared) -> Duration {
    replica(app).poll
}

/// Every run the store keeps (thread `thread`'s only, when given), as
/// copies without their frames for the API to show: a run this replica
/// runs as it stands here, any other as its record says. `/runs/search`
/// lists these, so that every replica lists the same runs.
pub(crate) async fn records(
    app: &Shared,
    thread: Option<&str>,
) -> Result<Vec<Arc<RunRecord>>, ApiError> {
    let ids: Vec<String> = match thread {
        Some(thread) => list(app, thread).await?,
        None => crate::app::ids_under(app.store.as_ref(), &format!("{RUN_OWNER}/")).await?,
    };
    let local: HashMap<String, Arc<RunRecord>> = app
        .runs()
        .by_thread
        .values()
        .flatten()
        .filter(|r| !r.is_mirror())
        .map(|r| (r.run_id.clone(), Arc::clone(r)))
        .collect();
    // Read a few at a time: a remote store answers each read in a round
    // trip.
    use futures::{StreamExt, TryStreamExt};
    let read = |id: String| {
        let local = local.get(&id).cloned();
        async move {
            if let Some(run) = local {
                return Ok(Some(run));
            }
            let Some((_, doc)) = read_run(app, &id).await? else {
                return Ok(None);
            };
            if doc.gone || thread.is_some_and(|t| t != doc.thread_id) {
                return Ok(None);
            }
            let record = doc.record(true);
            apply_doc(&record, &doc);
            Ok::<_, ApiError>(Some(record))
        }
    };
    let found: Vec<Option<Arc<RunRecord>>> = futures::stream::iter(ids)
        .map(read)
        .buffered(16)
        .try_collect()
        .await?;
    Ok(found.into_iter().flatten().collect())
}

/// The settled or unsettled runs of thread `thread` as the API shows them,
/// newest first.
pub(crate) async fn list_json(app: &Shared, thread: &str) -> Result<Vec<Value>, ApiError> {
    let mut out = Vec::new();
    for id in list(app, thread).await? {
        // A run this replica runs is fresher here than in the store.
        let local = app.runs().find(thread, &id);
        match local {
            Some(run) if !run.is_mirror() => out.push(run.to_json()),
            _ => {
                if let Some(json) = run_json(app, Some(thread), &id).await? {
                    out.push(json);
                }
            }
        }
    }
    Ok(out)
}

/// Marks run `run`'s record as no longer its thread's.
async fn mark_gone(app: &Shared, run: &str) -> Result<(), ApiError> {
    edit_run(app, run, |doc| {
        doc.gone = true;
        true
    })
    .await
    .map(|_| ())
}

/// Changes run `run`'s record as `change` says (`false`: nothing to
/// write), keeping its phase and lease; whether it was written.
async fn edit_run(
    app: &Shared,
    run: &str,
    mut change: impl FnMut(&mut RunDoc) -> bool,
) -> Result<bool, ApiError> {
    let key = run_key(run);
    for _ in 0..32 {
        let Some((head, mut doc)) = read_run(app, run).await? else {
            return Ok(false);
        };
        if !change(&mut doc) {
            return Ok(false);
        }
        let value = serde_json::to_value(&doc).map_err(|e| ApiError::Internal(e.to_string()))?;
        let commit = write(
            Some(&head),
            &key,
            RUN_OWNER,
            value,
            None,
            (head.phase.clone(), head.lease.clone()),
            app.store.now(),
        );
        match app.store.commit(&commit).await {
            Ok(()) => return Ok(true),
            Err(StoreError::Conflict { .. }) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(ApiError::Unavailable(format!(
        "run {run} kept changing while this server wrote it; try again"
    )))
}

// ---- the runs this replica runs ----

/// Writes what a run this replica runs does into its record.
pub(crate) struct Keeper {
    run: Arc<RunRecord>,
    state: tokio::sync::Mutex<KeepState>,
}

struct KeepState {
    /// The head this replica last wrote.
    head: StoredRun,
    doc: RunDoc,
    /// When the lease was last renewed (store clock, ms).
    renewed_at: u64,
    /// Settled, handed over or taken by another replica: nothing more to
    /// write.
    finished: bool,
}

/// Creates the record of `run`, new on this replica, leased to it; the
/// keeper that will write it.
pub(crate) async fn create(
    app: &Shared,
    run: &Arc<RunRecord>,
    doc: RunDoc,
) -> Result<Arc<Keeper>, ApiError> {
    let rep = replica(app);
    let key = run_key(&run.run_id);
    let value = serde_json::to_value(&doc).map_err(|e| ApiError::Internal(e.to_string()))?;
    let now = app.store.now();
    let commit = write(
        None,
        &key,
        RUN_OWNER,
        value,
        None,
        (SessionPhase::Running, Some(rep.lease_from(app))),
        now,
    );
    app.store.commit(&commit).await?;
    let keeper = Arc::new(Keeper {
        run: Arc::clone(run),
        state: tokio::sync::Mutex::new(KeepState {
            head: commit.head,
            doc,
            renewed_at: now,
            finished: false,
        }),
    });
    rep.keepers()
        .insert(run.run_id.clone(), Arc::clone(&keeper));
    Ok(keeper)
}

/// The keeper of run `run`, if this replica runs it.
pub(crate) fn keeper(app: &Shared, run: &str) -> Option<Arc<Keeper>> {
    app.replica.as_ref()?.keepers().get(run).cloned()
}

impl Keeper {
    /// Records that the run was refused when admitted: no longer any
    /// thread's, settled.
    pub(crate) async fn refused(&self, app: &Shared) {
        let mut st = self.state.lock().await;
        st.doc.gone = true;
        st.doc.status = RunStatus::Error.as_str().into();
        st.finished = true;
        let value = serde_json::to_value(&st.doc).unwrap_or(Value::Null);
        let commit = write(
            Some(&st.head),
            &run_key(&self.run.run_id),
            RUN_OWNER,
            value,
            None,
            (
                SessionPhase::Completed {
                    signal: Signal::new("$refused"),
                },
                None,
            ),
            app.store.now(),
        );
        if let Err(e) = app.store.commit(&commit).await {
            tracing::warn!(run = %self.run.run_id, error = %e, "cannot record a refused run");
        }
        replica(app).keepers().remove(&self.run.run_id);
    }

    /// Sets the runs the run waits for, and writes the record now.
    pub(crate) async fn set_before(
        &self,
        app: &Shared,
        before: Vec<String>,
    ) -> Result<(), ApiError> {
        self.state.lock().await.doc.before = before;
        self.sync(app, true).await
    }

    /// Writes the run's new frames and status, renews the lease when due,
    /// and reads what other replicas wrote (a cancel; a takeover, after
    /// which this replica stops the run and writes nothing more). With
    /// `force`, writes even when nothing changed.
    pub(crate) async fn sync(&self, app: &Shared, force: bool) -> Result<(), ApiError> {
        let rep = replica(app);
        let key = run_key(&self.run.run_id);
        let mut st = self.state.lock().await;
        if st.finished {
            return Ok(());
        }
        for _ in 0..8 {
            let current = app.store.load(&key).await?;
            let Some(current) = current else {
                return self.lost(app, &mut st, "its record is gone");
            };
            if current.version != st.head.version {
                let kept = read(app, &key, RUN_OWNER)
                    .await?
                    .ok_or_else(|| damaged(&key, "it vanished while read"))?;
                let theirs = doc_of(&key, kept.value)?;
                if kept.head.lease.as_ref().is_none_or(|l| l.owner != rep.id) {
                    return self.lost(app, &mut st, "another replica took it over");
                }
                if theirs.cancel && !st.doc.cancel {
                    st.doc.cancel = true;
                    self.run.cancel();
                }
                st.doc.gone |= theirs.gone;
                st.head = kept.head;
            }
            let (frames, done) = self.run.frames_after(st.doc.frames.checked_sub(1));
            let handing_over = self.run.is_handing_over();
            let mut doc = st.doc.clone();
            // Settled only with every frame written: a status read after
            // the frames may be ahead of them.
            let status = match self.run.status() {
                s if s.is_done() && !done => RunStatus::Running,
                s => s,
            };
            doc.frames += frames.len() as u64;
            doc.start_point = self.run.start_point().map(|at| StartPoint { at });
            doc.launched = self.run.launched();
            doc.updated_at = self.run.updated_at();
            if !handing_over {
                doc.status = status.as_str().into();
                if done {
                    doc.result = self.run.result();
                }
            } else if status.is_done() {
                // Stopped to be handed over: still under way for the store.
                doc.status = RunStatus::Running.as_str().into();
            }
            let now = app.store.now();
            let renew_due = now.saturating_sub(st.renewed_at)
                >= u64::try_from(rep.lease.as_millis() / 3).unwrap_or(u64::MAX);
            // A run handed over is released once it has stopped, or at
            // once if it had not started.
            let ending = (done && !handing_over)
                || (handing_over && (status.is_done() || status == RunStatus::Pending));
            if !force && !ending && frames.is_empty() && doc == st.doc && !renew_due {
                return Ok(());
            }
            let (phase, lease) = if done && !handing_over {
                (
                    SessionPhase::Completed {
                        signal: Signal::new(doc.status.clone()),
                    },
                    None,
                )
            } else if ending {
                // Handed over: the lease lapses at once.
                (
                    SessionPhase::Running,
                    Some(Lease {
                        owner: rep.id.clone(),
                        expires_at: 0,
                    }),
                )
            } else {
                (SessionPhase::Running, Some(rep.lease_from(app)))
            };
            let batch = (!frames.is_empty())
                .then(|| Value::Array(frames.iter().map(|f| f.to_stored()).collect()));
            let value =
                serde_json::to_value(&doc).map_err(|e| ApiError::Internal(e.to_string()))?;
            let commit = write(
                Some(&st.head),
                &key,
                RUN_OWNER,
                value,
                batch,
                (phase, lease),
                now,
            );
            match app.store.commit(&commit).await {
                Ok(()) => {
                    st.head = commit.head;
                    st.doc = doc;
                    st.renewed_at = now;
                    if ending {
                        st.finished = true;
                        rep.keepers().remove(&self.run.run_id);
                        if !handing_over {
                            let thread = st.doc.thread_id.clone();
                            let run = self.run.run_id.clone();
                            drop(st);
                            change_index(app, &thread, |index| {
                                if let Some(e) = index.runs.iter_mut().find(|e| e.id == run) {
                                    e.done = true;
                                }
                                Ok(())
                            })
                            .await?;
                        }
                    }
                    return Ok(());
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(ApiError::Unavailable(format!(
            "run {} kept changing while this server wrote it",
            self.run.run_id
        )))
    }

    fn lost(&self, app: &Shared, st: &mut KeepState, why: &str) -> Result<(), ApiError> {
        tracing::warn!(run = %self.run.run_id, why, "this server no longer runs the run; stopping it here");
        st.finished = true;
        replica(app).keepers().remove(&self.run.run_id);
        self.run.hand_over();
        Ok(())
    }
}

/// `run`'s result once it settles (an error if the server stops first);
/// with replicas, once its settling is in the store too, so that every
/// replica reports it settled as soon as this one has.
pub(crate) async fn settled(app: &Shared, run: &RunRecord) -> Result<RunResult, ApiError> {
    let result = app.settled(run).await?;
    if let Some(keeper) = keeper(app, &run.run_id) {
        keeper.sync(app, false).await?;
    }
    Ok(result)
}

/// Keeps writing `keeper`'s run until it settles (or is handed over, or
/// taken by another replica).
pub(crate) fn keep(app: &Shared, keeper: Arc<Keeper>) {
    let app = Arc::clone(app);
    tokio::spawn(async move {
        let poll = replica(&app).poll;
        let mut ticks = keeper.run.ticks();
        loop {
            // New frames are written at once (those that come while a
            // write is under way go with the next: a group commit), so
            // that a replica that dies loses as few as it can; otherwise
            // the store is read for a cancel every poll.
            ticks.borrow_and_update();
            let _ = tokio::time::timeout(poll, ticks.changed()).await;
            if let Err(e) = keeper.sync(&app, false).await {
                tracing::warn!(run = %keeper.run.run_id, error = %e, "cannot write the run to the store; trying again");
                tokio::time::sleep(poll).await;
            }
            if keeper.state.lock().await.finished {
                return;
            }
        }
    });
}

// ---- the runs of other replicas ----

/// The run `run` of any replica, as this one sees it: its own, else a
/// mirror following the store (made now if need be); `None` if the store
/// has no such run (of thread `thread`, when given).
pub(crate) async fn find(
    app: &Shared,
    thread: Option<&str>,
    run: &str,
) -> Result<Option<Arc<RunRecord>>, ApiError> {
    let Some((head, doc)) = read_run(app, run).await? else {
        return Ok(None);
    };
    if doc.gone || thread.is_some_and(|t| t != doc.thread_id) {
        return Ok(None);
    }
    // Another request may have made it meanwhile.
    if let Some(found) = app.runs().find(&doc.thread_id, run) {
        return Ok(Some(found));
    }
    let mirror = doc.record(true);
    let key = run_key(run);
    let next = catch_up(app, &mirror, &key, 0).await?;
    apply_doc(&mirror, &doc);
    {
        let mut runs = app.runs();
        if let Some(found) = runs.find(&doc.thread_id, run) {
            return Ok(Some(found));
        }
        runs.add(Arc::clone(&mirror));
    }
    if !mirror.status().is_done() {
        tail(app, Arc::downgrade(&mirror), head.version, next);
    }
    Ok(Some(mirror))
}

/// Pushes the frames stored from checkpoint `from` on into `run`; the
/// checkpoint to read from next.
async fn catch_up(
    app: &Shared,
    run: &RunRecord,
    key: &SessionId,
    from: u64,
) -> Result<u64, ApiError> {
    let mut next = from;
    for c in app.store.checkpoints(key, from).await? {
        next = c.seq + 1;
        if let (FRAMES, CheckpointKind::Update(Value::Array(frames))) = (c.step.as_str(), c.kind) {
            for f in &frames {
                if let Some(frame) = Frame::from_stored(f) {
                    run.push_stored(frame);
                }
            }
        }
    }
    Ok(next)
}

/// A mirror's status as the stored record says; settles it when the record
/// has settled.
fn apply_doc(run: &RunRecord, doc: &RunDoc) {
    if let Some(point) = &doc.start_point {
        run.set_start_point(point.at.clone());
    }
    if doc.settled() {
        if !run.status().is_done() {
            run.finish(doc.status(), doc.result.clone().unwrap_or_default());
        }
    } else {
        run.mirror_status(doc.status(), doc.updated_at);
    }
}

/// Follows the record of a mirror until it settles, the mirror is
/// forgotten, or this replica takes the run over; passes a cancel asked
/// here on to the store.
fn tail(app: &Shared, run: Weak<RunRecord>, mut version: u64, mut next: u64) {
    let app = Arc::clone(app);
    tokio::spawn(async move {
        let poll = replica(&app).poll;
        let mut cancel_written = false;
        loop {
            tokio::time::sleep(poll).await;
            let Some(run) = run.upgrade() else { return };
            if !run.is_mirror() || run.status().is_done() {
                return;
            }
            let key = run_key(&run.run_id);
            if run.was_cancelled() && !cancel_written {
                match edit_run(&app, &run.run_id, |doc| {
                    let changed = !doc.cancel && !doc.settled();
                    doc.cancel = true;
                    changed
                })
                .await
                {
                    Ok(_) => cancel_written = true,
                    Err(e) => {
                        tracing::warn!(run = %run.run_id, error = %e, "cannot pass a cancel on")
                    }
                }
            }
            let head = match app.store.load(&key).await {
                Ok(Some(head)) => head,
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!(run = %run.run_id, error = %e, "cannot read a run of another server");
                    continue;
                }
            };
            if head.version == version {
                continue;
            }
            // The record first, then the frames: a commit writes a batch
            // of frames and the record together, so the frames read after
            // the record hold every frame written up to it. (Read the other
            // way round, a run that settled in between would end the
            // stream without its last frames.)
            let read = async {
                let kept = read(&app, &key, RUN_OWNER)
                    .await?
                    .ok_or_else(|| damaged(&key, "it vanished while read"))?;
                let doc = doc_of(&key, kept.value)?;
                let next = catch_up(&app, &run, &key, next).await?;
                Ok::<_, ApiError>((next, doc, kept.head.version))
            };
            match read.await {
                Ok((n, doc, v)) => {
                    next = n;
                    version = v;
                    if run.is_mirror() {
                        apply_doc(&run, &doc);
                    }
                }
                Err(e) => {
                    tracing::warn!(run = %run.run_id, error = %e, "cannot read a run of another server");
                }
            }
        }
    });
}

// ---- taking over the runs of replicas that died ----

/// What a replica that takes a run over does with it.
pub(crate) enum TakenOver {
    /// It had not started: start it (after the runs it waits for).
    Start(Arc<RunRecord>, RunDoc),
    /// It was under way: continue its session.
    Continue(Arc<RunRecord>, RunDoc),
}

/// Takes over the runs whose replica stopped renewing them: every half
/// lease, asks the store for run records with a lapsed lease, takes each
/// by compare-and-set and hands it to `go_on`.
pub(crate) fn reap<F, Fut>(app: &Shared, go_on: F)
where
    F: Fn(Shared, TakenOver) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let app = Arc::clone(app);
    tokio::spawn(async move {
        let every = replica(&app).lease / 2;
        let mut stopping = app.stopping.subscribe();
        loop {
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                _ = stopping.wait_for(|s| *s) => return,
            }
            let ids = match app.store.runnable(RUN_OWNER, app.store.now(), 16).await {
                Ok(ids) => ids,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot ask the store for runs to take over");
                    continue;
                }
            };
            if replica(&app)
                .draining
                .load(std::sync::atomic::Ordering::Acquire)
            {
                return;
            }
            for key in ids {
                let Some(run) = key.as_str().strip_prefix(&format!("{RUN_OWNER}/")) else {
                    continue;
                };
                match take(&app, run).await {
                    Ok(Some(taken)) => {
                        tokio::spawn(go_on(Arc::clone(&app), taken));
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(run, error = %e, "cannot take over a run");
                    }
                }
            }
        }
    });
}

/// Takes run `run` over if its lease has lapsed: the record is leased to
/// this replica, the local copy (a mirror made owned, or a new one) has
/// every stored frame, and its keeper runs.
async fn take(app: &Shared, run: &str) -> Result<Option<TakenOver>, ApiError> {
    let rep = replica(app);
    // A run this replica still keeps (its keeper fell behind the lease) is
    // renewed by its keeper, not taken a second time.
    if let Some(keeper) = keeper(app, run) {
        keeper.sync(app, true).await?;
        return Ok(None);
    }
    let key = run_key(run);
    let Some(kept) = read(app, &key, RUN_OWNER).await? else {
        return Ok(None);
    };
    let now = app.store.now();
    if kept.head.phase != SessionPhase::Running
        || kept.head.lease.as_ref().is_some_and(|l| l.is_live(now))
    {
        return Ok(None);
    }
    let doc = doc_of(&key, kept.value.clone())?;
    let commit = write(
        Some(&kept.head),
        &key,
        RUN_OWNER,
        kept.value,
        None,
        (SessionPhase::Running, Some(rep.lease_from(app))),
        now,
    );
    match app.store.commit(&commit).await {
        Ok(()) => {}
        Err(StoreError::Conflict { .. }) => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    tracing::info!(run, thread = %doc.thread_id, "taking over a run whose server stopped renewing it");
    let local = app.runs().find(&doc.thread_id, run);
    let record = match local {
        Some(r) => {
            r.own();
            r
        }
        None => {
            let r = doc.record(false);
            app.runs().add(Arc::clone(&r));
            r
        }
    };
    catch_up(app, &record, &key, 0).await?;
    if let Some(point) = &doc.start_point {
        record.set_start_point(point.at.clone());
    }
    if let Some((session, seq)) = &doc.launched {
        record.set_launched(session.clone(), *seq);
    }
    if doc.cancel {
        record.cancel();
    }
    let keeper = Arc::new(Keeper {
        run: Arc::clone(&record),
        state: tokio::sync::Mutex::new(KeepState {
            head: commit.head,
            doc: doc.clone(),
            renewed_at: now,
            finished: false,
        }),
    });
    rep.keepers().insert(run.to_string(), Arc::clone(&keeper));
    keep(app, keeper);
    Ok(Some(if doc.launched.is_some() {
        TakenOver::Continue(record, doc)
    } else {
        TakenOver::Start(record, doc)
    }))
}

/// The runs this replica runs that have not settled; from now on it takes
/// no run over (it is stopping).
pub(crate) fn drain(app: &Shared) -> Vec<Arc<RunRecord>> {
    if let Some(rep) = &app.replica {
        rep.draining
            .store(true, std::sync::atomic::Ordering::Release);
    }
    owned(app)
}

/// The runs this replica runs that have not settled.
fn owned(app: &Shared) -> Vec<Arc<RunRecord>> {
    app.replica.as_ref().map_or_else(Vec::new, |rep| {
        rep.keepers().values().map(|k| Arc::clone(&k.run)).collect()
    })
}

/// Writes every kept run once more (their last frames, their handing
/// over) before the server stops.
pub(crate) async fn flush_all(app: &Shared) {
    let keepers: Vec<_> = match &app.replica {
        Some(rep) => rep.keepers().values().cloned().collect(),
        None => return,
    };
    for k in keepers {
        if let Err(e) = k.sync(app, true).await {
            tracing::warn!(run = %k.run.run_id, error = %e, "cannot write a run before stopping");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{LaunchDoc, RunDoc, StartPoint};
    use crate::record::{Frame, Mode, RunRecord, RunResult};
    use serde_json::{Value, json};

    #[test]
    fn a_run_record_reads_back_as_written_even_where_a_thread_had_no_state() {
        let run = RunRecord::new(
            "r".into(),
            "t".into(),
            "a".into(),
            json!({"k": 1}),
            Value::Null,
            "rollback",
            vec![Mode::Values, Mode::MessagesFull],
        );
        for at in [None, Some(("s".to_string(), 3))] {
            let mut doc = RunDoc::new(&run, LaunchDoc::default(), Some(5), None, true);
            doc.start_point = Some(StartPoint { at: at.clone() });
            doc.launched = Some(("s".into(), None));
            doc.result = Some(RunResult {
                values: json!({"x": 1}),
                interrupts: vec![json!({"id": "i"})],
                error: Some(("E".into(), "m".into())),
            });
            let text = serde_json::to_string(&doc).unwrap();
            let back: RunDoc = serde_json::from_str(&text).unwrap();
            assert_eq!(back, doc);
            let record = back.record(true);
            assert_eq!(record.start_point(), Some(at));
            assert_eq!(record.modes, vec![Mode::Values, Mode::MessagesFull]);
            assert_eq!(record.multitask_strategy, "rollback");
        }
    }

    #[test]
    fn frames_read_back_as_stored_and_foreign_ones_are_refused() {
        let frame = Frame {
            seq: 7,
            mode: Mode::MessagesFull,
            event: "messages/partial",
            ns: Some("sub:1".into()),
            data: json!([{"content": "hi"}]),
        };
        let back = Frame::from_stored(&frame.to_stored()).unwrap();
        assert_eq!(
            (back.seq, back.mode, back.event, back.ns, back.data),
            (frame.seq, frame.mode, frame.event, frame.ns, frame.data)
        );
        for bad in [
            json!(null),
            json!([1, "values", "values", null]),
            json!([1, "nope", "values", null, {}]),
            json!([1, "values", "unheard-of", null, {}]),
            json!(["1", "values", "values", null, {}]),
        ] {
            assert!(Frame::from_stored(&bad).is_none(), "{bad}");
        }
    }
}
