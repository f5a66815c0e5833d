//! A checkpoint log with a record missing, repeated or out of order is a
//! `StoreLoad` naming the break ([`LogGap`]) wherever the harness reads it —
//! resume, continue, time travel, history, fork — on every store, and
//! nothing is committed over the damaged session.
//!
//! Most cases damage what a store returns through a wrapper (the harness's
//! check is in the core, the same for every store); two delete a record on
//! disk, through the file and sled stores' documented layouts.

use crate::file::checkpoint_path;
use crate::id;
#[cfg(feature = "sled")]
use crate::sled_store::{checkpoint_key, tree};
use harness::session::{
    Checkpoint, Commit, GapKind, LogGap, SessionConfig, SessionError, SessionStore, StoreError,
    StoredRun,
};
use harness::{
    Cx, Harness, HarnessState, InterruptId, SessionId, Signal, StepResult, create_agent,
};
#[cfg(feature = "sled")]
use harness_stores::SledStore;
use harness_stores::{FileStore, MemoryStore};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};

/// Steps of work before the run asks to go on.
const WORK: u64 = 7;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Count {
    #[field(reduce = append)]
    done: Vec<u64>,
    /// Overwritten by each step: with [`snapshotting`], snapshots pay.
    note: String,
}

async fn work(s: Arc<Count>) -> StepResult<CountUpdate> {
    let n = s.done.len() as u64 + 1;
    Ok(CountUpdate::new()
        .done(vec![n])
        .note(n.to_string().repeat(400)))
}

async fn ask(_: Arc<Count>, cx: Cx<()>) -> StepResult<CountUpdate> {
    let go_on: bool = cx.interrupt("go on?")?;
    Ok(CountUpdate::new().note(format!("answered {go_on}")))
}

fn agent(store: Arc<dyn SessionStore>, config: SessionConfig) -> harness::Agent<Count> {
    let h = Harness::<Count>::builder()
        .step("work")
        .run(work)
        .route(|s: &Count| {
            if (s.done.len() as u64) < WORK {
                "again"
            } else {
                "enough"
            }
        })
        .on("again")
        .to("work")
        .on("enough")
        .to("ask")
        .step("ask")
        .run(ask)
        .end()
        .start("work")
        .store(store)
        .session_config(config)
        .build()
        .unwrap();
    create_agent("count", &h)
}

/// Snapshots whenever the updates since the last reach twice the state.
fn snapshotting() -> SessionConfig {
    SessionConfig {
        snapshot_min_bytes: 0,
        ..SessionConfig::default()
    }
}

/// What [`Damaged`] does to the log a store returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Damage {
    None,
    /// The record with this seq is gone.
    Drop(u64),
    /// The record with this seq comes twice.
    Duplicate(u64),
    /// The records with these seqs trade places.
    Swap(u64, u64),
}

/// A store whose logs come back damaged, as a broken disk, a bad restore or
/// a buggy store would return them.
#[derive(Debug)]
struct Damaged {
    inner: Arc<dyn SessionStore>,
    damage: Mutex<Damage>,
}

impl Damaged {
    fn new(inner: Arc<dyn SessionStore>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            damage: Mutex::new(Damage::None),
        })
    }

    fn set(&self, damage: Damage) {
        *self.damage.lock().unwrap() = damage;
    }
}

#[async_trait::async_trait]
impl SessionStore for Damaged {
    async fn load(&self, session: &SessionId) -> Result<Option<StoredRun>, StoreError> {
        self.inner.load(session).await
    }
    async fn commit(&self, commit: &Commit) -> Result<(), StoreError> {
        self.inner.commit(commit).await
    }
    async fn checkpoints(
        &self,
        session: &SessionId,
        from_seq: u64,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        let mut log = self.inner.checkpoints(session, from_seq).await?;
        let at = |log: &[Checkpoint], seq: u64| log.iter().position(|cp| cp.seq == seq);
        let damage = *self.damage.lock().unwrap();
        match damage {
            Damage::None => {}
            Damage::Drop(seq) => log.retain(|cp| cp.seq != seq),
            Damage::Duplicate(seq) => {
                if let Some(i) = at(&log, seq) {
                    log.insert(i + 1, log[i].clone());
                }
            }
            Damage::Swap(a, b) => {
                if let (Some(i), Some(j)) = (at(&log, a), at(&log, b)) {
                    log.swap(i, j);
                }
            }
        }
        Ok(log)
    }
    async fn sessions(&self) -> Result<Vec<SessionId>, StoreError> {
        self.inner.sessions().await
    }
    async fn flush(&self) -> Result<(), StoreError> {
        self.inner.flush().await
    }
}

/// The stores every case runs on, each in `dir`.
fn stores(dir: &std::path::Path) -> Vec<(&'static str, Arc<dyn SessionStore>)> {
    let mut stores: Vec<(&'static str, Arc<dyn SessionStore>)> = vec![
        ("memory", Arc::new(MemoryStore::new())),
        ("file", Arc::new(FileStore::open(dir.join("file")).unwrap())),
    ];
    #[cfg(feature = "sled")]
    stores.push(("sled", Arc::new(SledStore::temporary().unwrap())));
    stores
}

/// Runs a session of `agent` until it asks to go on.
async fn paused(agent: &harness::Agent<Count>) -> (SessionId, InterruptId) {
    let run = agent.run(Count::default());
    let session = run.session_id().clone();
    let interrupt = run.await.unwrap().interrupt.unwrap().id;
    (session, interrupt)
}

/// The break `result` failed with, after checking it is a `StoreLoad` of
/// `session`.
fn gap_of<T>(result: Result<T, SessionError>, session: &SessionId, what: &str) -> LogGap {
    match result {
        Err(SessionError::Load(load)) => {
            assert_eq!(&load.session, session, "{what}: {load}");
            assert!(
                load.to_string().contains("checkpoint log is broken"),
                "{what}: {load}"
            );
            let gap = load.gap.as_deref().copied();
            gap.unwrap_or_else(|| panic!("{what}: no gap in {load}"))
        }
        Err(other) => panic!("{what}: not a load error: {other}"),
        Ok(_) => panic!("{what}: the damaged log was read"),
    }
}

fn gap(kind: GapKind, expected_seq: u64, found_seq: Option<u64>) -> LogGap {
    LogGap {
        kind,
        expected_seq,
        found_seq,
    }
}

/// The session as stored, bypassing the damage.
async fn stored(store: &Damaged, session: &SessionId) -> (StoredRun, Vec<Checkpoint>) {
    let head = store.inner.load(session).await.unwrap().unwrap();
    let log = store.inner.checkpoints(session, 0).await.unwrap();
    (head, log)
}

/// Every read of a damaged log fails with its gap: answering the
/// interrupt (which rebuilds the state), reading the state now and at a
/// step, the history, a fork. None of them writes.
async fn every_read_fails(
    label: &str,
    store: &Damaged,
    agent: &harness::Agent<Count>,
    session: &SessionId,
    interrupt: &InterruptId,
    expected: LogGap,
) {
    let before = stored(store, session).await;
    let listed = store.inner.sessions().await.unwrap();
    let what = |op: &str| format!("{label}: {op}");
    let resumed = agent.resume(true, session, interrupt).await;
    assert_eq!(gap_of(resumed, session, &what("resume")), expected);
    let now = agent.state_at(session, None).await;
    assert_eq!(gap_of(now, session, &what("state_at(None)")), expected);
    let first = agent.state_at(session, Some(1)).await;
    gap_of(first, session, &what("state_at(1)"));
    gap_of(agent.history(session).await, session, &what("history"));
    gap_of(agent.fork(session, 1, None).await, session, &what("fork"));
    // Nothing was committed over the damage: the head and the log as stored
    // are as they were.
    assert_eq!(stored(store, session).await, before, "{}", what("stored"));
    assert_eq!(
        store.inner.sessions().await.unwrap(),
        listed,
        "{}",
        what("fork")
    );
}

/// With the damage gone, the session goes on as if nothing happened.
async fn still_resumable(
    store: &Damaged,
    agent: &harness::Agent<Count>,
    session: &SessionId,
    interrupt: &InterruptId,
) {
    store.set(Damage::None);
    let out = agent
        .resume(true, session, interrupt)
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!(out.signal, Signal::END);
    assert_eq!(out.state.done, (1..=WORK).collect::<Vec<_>>());
}

/// A log of one snapshot and one update per step (0 ..= WORK): any record
/// dropped, repeated or moved is found, with where.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_log_is_a_typed_gap_on_every_read_and_store() {
    let dir = tempfile::tempdir().unwrap();
    let last = WORK;
    let cases = [
        (Damage::Drop(3), gap(GapKind::Missing, 3, Some(4))),
        (Damage::Drop(last), gap(GapKind::EndsEarly, last, None)),
        (Damage::Drop(0), gap(GapKind::Missing, 0, Some(1))),
        (Damage::Duplicate(2), gap(GapKind::Duplicate, 3, Some(2))),
        (
            Damage::Duplicate(last),
            gap(GapKind::Duplicate, last + 1, Some(last)),
        ),
        (Damage::Swap(2, 3), gap(GapKind::Missing, 2, Some(3))),
        (Damage::Swap(1, last), gap(GapKind::Missing, 1, Some(last))),
        (Damage::Swap(0, 1), gap(GapKind::Missing, 0, Some(1))),
    ];
    for (name, inner) in stores(dir.path()) {
        let store = Damaged::new(inner);
        let agent = agent(store.clone(), SessionConfig::default());
        for (damage, expected) in cases {
            let (session, interrupt) = paused(&agent).await;
            let (head, log) = stored(&store, &session).await;
            assert_eq!((head.last_seq, head.steps, log.len()), (last, WORK, 8));
            store.set(damage);
            let label = format!("{name} store, {damage:?}");
            every_read_fails(&label, &store, &agent, &session, &interrupt, expected).await;
            still_resumable(&store, &agent, &session, &interrupt).await;
        }
    }
}

/// With snapshots, the log has holes where superseded snapshots were
/// removed; they are not gaps. Reading from the latest snapshot needs that
/// snapshot and what follows; the whole history needs every update.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn superseded_snapshots_are_not_gaps_but_a_missing_latest_snapshot_is() {
    let dir = tempfile::tempdir().unwrap();
    for (name, inner) in stores(dir.path()) {
        let store = Damaged::new(inner);
        let agent = agent(store.clone(), snapshotting());
        let (session, interrupt) = paused(&agent).await;
        let (head, log) = stored(&store, &session).await;
        let seqs: Vec<u64> = log.iter().map(|cp| cp.seq).collect();
        let holes = (0..=head.last_seq).filter(|s| !seqs.contains(s)).count();
        assert!(
            head.snapshot_seq > 0 && holes > 0,
            "{name}: the policy must take and supersede snapshots for this test: {seqs:?}"
        );
        // Undamaged, every read works.
        assert_eq!(
            agent.history(&session).await.unwrap().len(),
            1 + WORK as usize
        );
        for i in 0..=WORK {
            let state = agent.state_at(&session, Some(i)).await.unwrap();
            assert_eq!(state.done, (1..=i).collect::<Vec<_>>(), "{name}: step {i}");
        }

        let latest = head.snapshot_seq;
        // The latest snapshot gone: what reads from it fails; the whole
        // history does not need it.
        store.set(Damage::Drop(latest));
        let expected = gap(GapKind::Missing, latest, Some(latest + 1));
        let resumed = agent.resume(true, &session, &interrupt).await;
        assert_eq!(gap_of(resumed, &session, name), expected);
        let now = agent.state_at(&session, None).await;
        assert_eq!(gap_of(now, &session, name), expected);
        assert_eq!(
            agent.history(&session).await.unwrap().len(),
            1 + WORK as usize
        );

        // An update before it gone: the history and time travel to before
        // it fail; the latest state does not need it.
        let early = seqs
            .iter()
            .copied()
            .find(|s| *s > 0 && *s < latest)
            .unwrap();
        store.set(Damage::Drop(early));
        gap_of(agent.history(&session).await, &session, name);
        gap_of(agent.state_at(&session, Some(0)).await, &session, name);
        assert_eq!(
            agent.state_at(&session, None).await.unwrap().done,
            (1..=WORK).collect::<Vec<_>>()
        );

        // The latest snapshot repeated, and the last update dropped.
        store.set(Damage::Duplicate(latest));
        let resumed = agent.resume(true, &session, &interrupt).await;
        assert_eq!(
            gap_of(resumed, &session, name),
            gap(GapKind::Duplicate, latest + 1, Some(latest))
        );
        store.set(Damage::Drop(head.last_seq));
        let resumed = agent.resume(true, &session, &interrupt).await;
        assert_eq!(
            gap_of(resumed, &session, name).kind,
            GapKind::EndsEarly,
            "{name}"
        );
        assert_eq!(stored(&store, &session).await, (head, log), "{name}");
        still_resumable(&store, &agent, &session, &interrupt).await;
    }
}

/// A session whose run completed: a new run on it (`continue_session`)
/// rebuilds the state first, so it is refused too, before anything is
/// committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continuing_a_session_with_a_damaged_log_is_refused_before_any_commit() {
    let dir = tempfile::tempdir().unwrap();
    for (name, inner) in stores(dir.path()) {
        let store = Damaged::new(inner);
        let agent = agent(store.clone(), SessionConfig::default());
        let (session, interrupt) = paused(&agent).await;
        still_resumable(&store, &agent, &session, &interrupt).await;
        let before = stored(&store, &session).await;
        for damage in [
            Damage::Drop(2),
            Damage::Drop(before.0.last_seq),
            Damage::Duplicate(4),
        ] {
            store.set(damage);
            let run = agent
                .continue_session(&session, CountUpdate::new().note("more"))
                .await;
            gap_of(run, &session, &format!("{name}, {damage:?}"));
            assert_eq!(stored(&store, &session).await, before, "{name}, {damage:?}");
        }
    }
}

/// Submitting input for a worker (`submit_input`, queued or not) to a
/// session whose log is broken is refused with the gap, and nothing is
/// committed: the session is not made runnable on a log no run could
/// read. With the damage gone, the same submission is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submitting_input_to_a_session_with_a_damaged_log_is_refused_before_any_commit() {
    let dir = tempfile::tempdir().unwrap();
    for (name, inner) in stores(dir.path()) {
        let store = Damaged::new(inner);
        let agent = agent(store.clone(), SessionConfig::default());
        let (session, interrupt) = paused(&agent).await;
        still_resumable(&store, &agent, &session, &interrupt).await;
        let before = stored(&store, &session).await;
        for damage in [
            Damage::Drop(2),
            Damage::Drop(before.0.last_seq),
            Damage::Duplicate(4),
            Damage::Swap(3, 5),
        ] {
            for busy in [harness::Busy::Queue, harness::Busy::Reject] {
                store.set(damage);
                let what = format!("{name}, {damage:?}, {busy:?}");
                let submitted = agent
                    .submit_input(&session, CountUpdate::new().note("more"), busy)
                    .await;
                gap_of(submitted, &session, &what);
                assert_eq!(stored(&store, &session).await, before, "{what}");
            }
        }
        store.set(Damage::None);
        let submitted = agent
            .submit_input(
                &session,
                CountUpdate::new().note("more"),
                harness::Busy::Queue,
            )
            .await
            .unwrap();
        assert_eq!(submitted, harness::Submitted::Runnable, "{name}");
    }
}

/// A store whose first head read is one version behind and whose first
/// log read lacks the snapshot that head names: what a reader sees when a
/// step of a run under way took a new snapshot (dropping the old one)
/// between its two reads.
#[derive(Debug)]
struct Racing {
    inner: Arc<dyn SessionStore>,
    stale: Mutex<bool>,
    torn: Mutex<bool>,
}

#[async_trait::async_trait]
impl SessionStore for Racing {
    async fn load(&self, session: &SessionId) -> Result<Option<StoredRun>, StoreError> {
        let mut head = self.inner.load(session).await?;
        if std::mem::take(&mut *self.stale.lock().unwrap())
            && let Some(head) = &mut head
        {
            head.version -= 1;
        }
        Ok(head)
    }
    async fn commit(&self, commit: &Commit) -> Result<(), StoreError> {
        self.inner.commit(commit).await
    }
    async fn checkpoints(
        &self,
        session: &SessionId,
        from_seq: u64,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        let mut log = self.inner.checkpoints(session, from_seq).await?;
        if std::mem::take(&mut *self.torn.lock().unwrap()) {
            log.retain(|cp| cp.seq != from_seq);
        }
        Ok(log)
    }
    async fn sessions(&self) -> Result<Vec<SessionId>, StoreError> {
        self.inner.sessions().await
    }
    async fn flush(&self) -> Result<(), StoreError> {
        self.inner.flush().await
    }
}

/// `submit_input` racing a step that moved the session on between its
/// reads of the head and of the log is not a broken log: it reads again,
/// and the submission is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submitting_input_while_a_step_moves_the_snapshot_on_is_no_gap() {
    let racing = Arc::new(Racing {
        inner: Arc::new(MemoryStore::new()),
        stale: Mutex::new(false),
        torn: Mutex::new(false),
    });
    let agent = agent(racing.clone(), SessionConfig::default());
    let (session, interrupt) = paused(&agent).await;
    let out = agent
        .resume(true, &session, &interrupt)
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!(out.signal, Signal::END);
    *racing.stale.lock().unwrap() = true;
    *racing.torn.lock().unwrap() = true;
    let submitted = agent
        .submit_input(
            &session,
            CountUpdate::new().note("more"),
            harness::Busy::Queue,
        )
        .await
        .unwrap();
    assert_eq!(submitted, harness::Submitted::Runnable);
}

/// A checkpoint file deleted from a file store's session directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_file_deleted_on_disk_is_a_gap() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    for (seq, expected) in [
        (0, gap(GapKind::Missing, 0, Some(1))),
        (4, gap(GapKind::Missing, 4, Some(5))),
        (WORK, gap(GapKind::EndsEarly, WORK, None)),
    ] {
        let session = id(&format!("on-disk-{seq}"));
        let interrupt = {
            let store: Arc<dyn SessionStore> = Arc::new(FileStore::open(&root).unwrap());
            let run =
                agent(store, SessionConfig::default()).run_in(session.clone(), Count::default());
            run.await.unwrap().interrupt.unwrap().id
        };
        std::fs::remove_file(checkpoint_path(&root, session.as_str(), seq)).unwrap();
        let head_file = root.join(format!("s-{session}")).join("head.json");
        let head_before = std::fs::read(&head_file).unwrap();
        // A fresh store and agent, as another process would have.
        let store: Arc<dyn SessionStore> = Arc::new(FileStore::open(&root).unwrap());
        let agent = agent(store, SessionConfig::default());
        let resumed = agent.resume(true, &session, &interrupt).await;
        assert_eq!(gap_of(resumed, &session, "file store"), expected);
        gap_of(agent.history(&session).await, &session, "file store");
        assert_eq!(std::fs::read(&head_file).unwrap(), head_before);
    }
}

/// A checkpoint removed from a sled store's trees (snapshots live in one of
/// their own).
#[cfg(feature = "sled")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_removed_from_sled_is_a_gap() {
    let sled = Arc::new(SledStore::temporary().unwrap());
    let store: Arc<dyn SessionStore> = sled.clone();
    let agent = agent(store.clone(), SessionConfig::default());
    for (tree_name, seq, expected) in [
        ("checkpoints", 2, gap(GapKind::Missing, 2, Some(3))),
        ("checkpoints", WORK, gap(GapKind::EndsEarly, WORK, None)),
        ("snapshots", 0, gap(GapKind::Missing, 0, Some(1))),
    ] {
        let (session, interrupt) = paused(&agent).await;
        let head = store.load(&session).await.unwrap().unwrap();
        let removed = tree(&sled, tree_name)
            .remove(checkpoint_key(&session, seq))
            .unwrap();
        assert!(
            removed.is_some(),
            "checkpoint {seq} was stored in {tree_name}"
        );
        let resumed = agent.resume(true, &session, &interrupt).await;
        assert_eq!(gap_of(resumed, &session, "sled store"), expected);
        gap_of(agent.state_at(&session, None).await, &session, "sled");
        assert_eq!(store.load(&session).await.unwrap().unwrap(), head);
    }
}

#[test]
fn gap_kinds_read_as_what_happened() {
    let load = harness::session::StoreLoad::gap(
        id("s-1"),
        "checkpoint 4 (step 4 `work`)",
        "the checkpoint log is broken",
        gap(GapKind::Missing, 3, Some(4)),
    );
    assert_eq!(
        load.to_string(),
        "cannot load session s-1: checkpoint 4 (step 4 `work`): the checkpoint log is broken"
    );
    assert_eq!(GapKind::EndsEarly.to_string(), "the log ends early");
}
