//! A conformance suite any [`SessionStore`] can run against itself
//! (feature `conformance`: enable it for your store's tests, e.g. as a
//! dev-dependency `harness-stores = { version = "…", features =
//! ["conformance"] }`).
//!
//! [`run_all`] runs every check, each on a fresh store from a factory, and
//! panics naming each check that failed; [`run_all_with`] also runs the
//! checks that need to damage a stored record, through a store-specific
//! hook. Each check is also a public function returning
//! `Result<(), Failure>`, and the helpers that build heads and checkpoints
//! ([`head`], [`snapshot`], [`update`], [`create`], [`advance`]) are public
//! for a store's own tests.
//!
//! The concurrency checks spawn tokio tasks: run the suite in a
//! multi-threaded runtime to exercise real parallelism.
//!
//! ```
//! use harness_stores::{MemoryStore, conformance};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! conformance::run_all(MemoryStore::new).await;
//! # });
//! ```

use async_trait::async_trait;
use harness::session::{
    Checkpoint, CheckpointKind, Commit, Created, Lease, MAX_VALUE_DEPTH, SCHEMA_VERSION,
    SessionPhase, SessionStore, StoreError, StoredRun,
};
use harness::{Interrupt, InterruptId, RunId, SessionId, Signal};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;

/// A failed check: which, and what went wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The check's name (its function's name).
    pub check: &'static str,
    /// What was expected and what happened.
    pub message: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "conformance check `{}` failed: {}",
            self.check, self.message
        )
    }
}

impl std::error::Error for Failure {}

/// Which record of a session a corruption hook must damage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record {
    /// The head.
    Head,
    /// The checkpoint with this seq.
    Checkpoint(u64),
}

/// A store-specific hook that overwrites a stored record with bytes that are
/// not JSON (e.g. `b"\x00garbage{"`), bypassing the store's API.
pub type Corrupt<'a, S> = &'a (dyn Fn(&S, &SessionId, Record) + Sync);

/// Runs every check that needs no hook, each on a fresh store from `make`,
/// and panics listing the failed checks.
pub async fn run_all<S, F>(make: F)
where
    S: SessionStore + 'static,
    F: Fn() -> S,
{
    run_all_with(make, None).await;
}

/// Runs every check, each on a fresh store from `make`, those damaging
/// records too when `corrupt` is given, and panics listing the failed checks.
pub async fn run_all_with<S, F>(make: F, corrupt: Option<Corrupt<'_, S>>)
where
    S: SessionStore + 'static,
    F: Fn() -> S,
{
    let failures = check_all(make, corrupt).await;
    if !failures.is_empty() {
        let list: Vec<String> = failures.iter().map(ToString::to_string).collect();
        panic!(
            "{} conformance check(s) failed:\n  {}",
            failures.len(),
            list.join("\n  ")
        );
    }
}

/// Runs every check like [`run_all_with`] and returns the failures instead
/// of panicking.
pub async fn check_all<S, F>(make: F, corrupt: Option<Corrupt<'_, S>>) -> Vec<Failure>
where
    S: SessionStore + 'static,
    F: Fn() -> S,
{
    // One statement per check, so that each store is dropped after its check.
    let mut results = Vec::new();
    results.push(missing_session(&make()).await);
    results.push(round_trip(&make()).await);
    results.push(deepest_values(&make()).await);
    results.push(create_conflict(&make()).await);
    results.push(stale_version(&make()).await);
    results.push(remove(&make()).await);
    results.push(from_seq(&make()).await);
    results.push(sessions(&make()).await);
    results.push(sessions_page(&make()).await);
    results.push(isolation(&make()).await);
    results.push(fork(&make()).await);
    results.push(branches(&make()).await);
    results.push(durability(&make()).await);
    results.push(schema_version(&make()).await);
    results.push(lease_is_data(&make()).await);
    results.push(runnable_by_agent(&make()).await);
    results.push(runnable_leases(&make()).await);
    results.push(takeover_race(Arc::new(make())).await);
    results.push(concurrent_create(Arc::new(make())).await);
    results.push(concurrent_increments(Arc::new(make())).await);
    results.push(created_feed(Arc::new(make())).await);
    if let Some(corrupt) = corrupt {
        let store = make();
        results.push(corrupt_head(&store, &|id, r| corrupt(&store, id, r)).await);
        let store = make();
        results.push(corrupt_checkpoint(&store, &|id, r| corrupt(&store, id, r)).await);
    }
    results.into_iter().filter_map(Result::err).collect()
}

// ---------------------------------------------------------------------------
// Helpers to build records.

/// A fixed time (ms since the epoch) for records, so they compare equal.
const T0: u64 = 1_700_000_000_000;

/// A new session's head (version 1, no lease, one checkpoint: seq 0).
pub fn head(session: &str) -> StoredRun {
    StoredRun {
        schema_version: SCHEMA_VERSION,
        session_id: SessionId::from(session),
        agent_id: "conformance".into(),
        run_id: RunId::from(format!("run-{session}")),
        phase: SessionPhase::Running,
        next_step: Some("think".into()),
        ended_with: None,
        steps: 0,
        journal: Default::default(),
        branch_journals: Default::default(),
        version: 1,
        lease: None,
        snapshot_seq: 0,
        snapshot_index: 0,
        state_bytes: 0,
        bytes_since_snapshot: 0,
        measured_index: 0,
        last_seq: 0,
        created_at: T0,
        updated_at: T0,
        queued: Vec::new(),
        stop_requested: None,
        run_start: None,
    }
}

/// A snapshot checkpoint.
pub fn snapshot(seq: u64, index: u64, state: Value) -> Checkpoint {
    Checkpoint {
        seq,
        index,
        step: if index == 0 { "$start" } else { "think" }.into(),
        time: T0.saturating_add(seq),
        kind: CheckpointKind::Snapshot(state),
    }
}

/// An update checkpoint of `step`.
pub fn update(seq: u64, index: u64, step: &str, update: Value) -> Checkpoint {
    Checkpoint {
        seq,
        index,
        step: step.into(),
        time: T0.saturating_add(seq),
        kind: CheckpointKind::Update(update),
    }
}

/// A commit creating the session of `head` (expected version `None`) with
/// `append`; `head.last_seq` is set to the last appended seq.
pub fn create(mut head: StoredRun, append: Vec<Checkpoint>) -> Commit {
    if let Some(last) = append.iter().map(|cp| cp.seq).max() {
        head.last_seq = last;
    }
    Commit {
        head,
        expected_version: None,
        append,
        remove: Vec::new(),
        durable: true,
    }
}

/// A commit on top of `prev`: the next version, with `append` (the head's
/// `last_seq` and `steps` follow the appended seqs) and `remove`.
pub fn advance(prev: &StoredRun, append: Vec<Checkpoint>, remove: Vec<u64>) -> Commit {
    let mut head = prev.clone();
    head.version += 1;
    head.updated_at = prev.updated_at + 1;
    if let Some(last) = append.iter().map(|cp| cp.seq).max() {
        head.last_seq = head.last_seq.max(last);
    }
    if let Some(index) = append.iter().map(|cp| cp.index).max() {
        head.steps = head.steps.max(index);
    }
    Commit {
        head,
        expected_version: Some(prev.version),
        append,
        remove,
        durable: true,
    }
}

/// A typical new session: a snapshot at 0 then `updates` updates.
fn sample(session: &str, updates: u64) -> Commit {
    let mut append = vec![snapshot(0, 0, json!({"messages": [], "n": 0}))];
    append.extend((1..=updates).map(|i| update(i, i, "think", json!({"n": i}))));
    let mut commit = create(head(session), append);
    commit.head.steps = updates;
    commit
}

// ---------------------------------------------------------------------------
// Plumbing for checks.

type Outcome = Result<(), String>;

async fn run(check: &'static str, body: impl Future<Output = Outcome>) -> Result<(), Failure> {
    body.await.map_err(|message| Failure { check, message })
}

trait Ctx<T> {
    fn ctx(self, what: impl std::fmt::Display) -> Result<T, String>;
}

impl<T> Ctx<T> for Result<T, StoreError> {
    fn ctx(self, what: impl std::fmt::Display) -> Result<T, String> {
        self.map_err(|e| format!("{what} failed: {e}"))
    }
}

macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err(format!($($arg)+));
        }
    };
}

macro_rules! ensure_eq {
    ($left:expr, $right:expr, $($arg:tt)+) => {{
        let (l, r) = (&$left, &$right);
        if l != r {
            return Err(format!("{}:\n    got:      {:?}\n    expected: {:?}", format!($($arg)+), l, r));
        }
    }};
}

fn id(s: &str) -> SessionId {
    SessionId::from(s)
}

async fn commit_ok(store: &dyn SessionStore, commit: Commit) -> Outcome {
    let what = format!(
        "commit of session {:?} (expected version {:?})",
        commit.head.session_id, commit.expected_version
    );
    store.commit(&commit).await.ctx(what)
}

async fn load_some(store: &dyn SessionStore, session: &str) -> Result<StoredRun, String> {
    store
        .load(&id(session))
        .await
        .ctx(format!("load({session:?})"))?
        .ok_or_else(|| format!("load({session:?}) found no session after it was committed"))
}

async fn log(
    store: &dyn SessionStore,
    session: &str,
    from: u64,
) -> Result<Vec<Checkpoint>, String> {
    store
        .checkpoints(&id(session), from)
        .await
        .ctx(format!("checkpoints({session:?}, {from})"))
}

fn seqs(log: &[Checkpoint]) -> Vec<u64> {
    log.iter().map(|cp| cp.seq).collect()
}

/// Checks that `result` is a conflict with these versions.
fn expect_conflict(
    result: Result<(), StoreError>,
    session: &str,
    expected: Option<u64>,
    found: Option<u64>,
) -> Outcome {
    match result {
        Err(StoreError::Conflict {
            session: s,
            expected: e,
            found: f,
        }) => {
            ensure_eq!(s.as_str(), session, "the conflict's session");
            ensure_eq!(e, expected, "the conflict's expected version");
            ensure_eq!(f, found, "the conflict's found version");
            Ok(())
        }
        Ok(()) => Err(format!(
            "a commit expecting version {expected:?} of {session:?} succeeded; the stored version was {found:?}, so it must fail with StoreError::Conflict"
        )),
        Err(e) => Err(format!(
            "a commit expecting version {expected:?} of {session:?} (stored: {found:?}) failed with `{e}` instead of StoreError::Conflict"
        )),
    }
}

/// Checks that `result` is a load error about `session`.
fn expect_load<T: std::fmt::Debug>(
    result: Result<T, StoreError>,
    what: &str,
    session: &str,
    record: &str,
) -> Outcome {
    match result {
        Err(StoreError::Load(l)) => {
            ensure_eq!(
                l.session.as_str(),
                session,
                "{what}: the StoreLoad's session"
            );
            ensure!(
                l.record.contains(record),
                "{what}: the StoreLoad names record {:?}, expected one naming {record:?}",
                l.record
            );
            Ok(())
        }
        Ok(v) => Err(format!(
            "{what} succeeded with {v:?} on an unreadable record; it must fail with StoreError::Load"
        )),
        Err(e) => Err(format!(
            "{what} failed with `{e}` on an unreadable record instead of StoreError::Load"
        )),
    }
}

// ---------------------------------------------------------------------------
// The checks.

/// An unknown session has no head, no checkpoints, and is not listed.
pub async fn missing_session(store: &dyn SessionStore) -> Result<(), Failure> {
    run("missing_session", async {
        let head = store
            .load(&id("nobody"))
            .await
            .ctx("load of an unknown session")?;
        ensure!(
            head.is_none(),
            "load of an unknown session returned {head:?}"
        );
        ensure_eq!(
            log(store, "nobody", 0).await?,
            Vec::<Checkpoint>::new(),
            "checkpoints of an unknown session"
        );
        ensure_eq!(
            store.sessions().await.ctx("sessions")?,
            Vec::<SessionId>::new(),
            "sessions of an empty store"
        );
        store.flush().await.ctx("flush of an empty store")?;
        Ok(())
    })
    .await
}

/// `levels` arrays (`objects`: objects) nested in one another around a
/// number: a value of exactly that depth.
pub fn nested(levels: usize, objects: bool) -> Value {
    (0..levels).fold(json!(7), |inner, i| {
        if objects {
            json!({ format!("k{i}"): inner })
        } else {
            Value::Array(vec![inner])
        }
    })
}

/// Values nested [`MAX_VALUE_DEPTH`] deep, the deepest the harness commits,
/// come back from every place a record holds one: a snapshot, an update, a
/// queued input, an interrupt's payload, an interrupt answer and a `once`
/// result in the journal. (A store's own format around them must leave
/// `serde_json`, or whatever reads it, room for them.)
pub async fn deepest_values(store: &dyn SessionStore) -> Result<(), Failure> {
    run("deepest_values", async {
        for objects in [false, true] {
            let deep = || nested(MAX_VALUE_DEPTH, objects);
            let session = if objects { "deep-objects" } else { "deep-arrays" };
            let mut commit = create(
                head(session),
                vec![snapshot(0, 0, deep()), update(1, 1, "think", deep())],
            );
            commit.head.steps = 1;
            commit.head.queued = vec![deep()];
            commit.head.journal.responses = vec![deep()];
            commit.head.journal.once.insert("effect".into(), deep());
            commit.head.phase = SessionPhase::Interrupted {
                interrupt: Interrupt {
                    path: Default::default(),
                    breakpoint: None,
                    id: InterruptId::from("int-deep"),
                    step: "ask".into(),
                    payload: deep(),
                },
            };
            commit_ok(store, commit.clone()).await?;
            ensure!(
                load_some(store, session).await? == commit.head,
                "the head holding values {MAX_VALUE_DEPTH} deep ({}) did not come back as committed",
                if objects { "objects" } else { "arrays" }
            );
            ensure!(
                log(store, session, 0).await? == commit.append,
                "checkpoints holding values {MAX_VALUE_DEPTH} deep ({}) did not come back as committed",
                if objects { "objects" } else { "arrays" }
            );
        }
        Ok(())
    })
    .await
}

/// Heads and checkpoints come back exactly as committed, through several
/// commits and every phase.
pub async fn round_trip(store: &dyn SessionStore) -> Result<(), Failure> {
    run("round_trip", async {
        let mut first = sample("rt", 2);
        first.head.lease = Some(Lease {
            owner: "owner-1".into(),
            expires_at: T0 + 30_000,
        });
        first.head.journal.responses = vec![json!("yes"), json!({"n": 1.5, "s": "é\u{0}\n\"x"})];
        first
            .head
            .journal
            .once
            .insert("tool:1".into(), json!([1, null, true]));
        first.append.push(update(
            3,
            3,
            "act",
            json!({"big": "x".repeat(100_000), "neg": -7, "u": u64::MAX}),
        ));
        first.head.last_seq = 3;
        first.head.steps = 3;
        let expected_log = first.append.clone();
        commit_ok(store, first.clone()).await?;
        ensure_eq!(
            load_some(store, "rt").await?,
            first.head,
            "the head after creation"
        );
        ensure_eq!(
            log(store, "rt", 0).await?,
            expected_log,
            "the log after creation"
        );

        let phases = [
            SessionPhase::Interrupted {
                interrupt: Interrupt {
                    path: Default::default(),
                    breakpoint: None,
                    id: InterruptId::from("int-1"),
                    step: "ask".into(),
                    payload: json!({"question": "ok?"}),
                },
            },
            SessionPhase::Completed {
                signal: Signal::new("done"),
            },
            SessionPhase::Completed {
                signal: Signal::STOPPED,
            },
            SessionPhase::Failed {
                error: "boom: \"quoted\"\nline".into(),
            },
            SessionPhase::Running,
        ];
        let mut prev = first.head;
        let mut expected_log = expected_log;
        for (i, phase) in phases.into_iter().enumerate() {
            let seq = prev.last_seq + 1;
            let cp = update(seq, seq, "step", json!({"i": i}));
            let mut commit = advance(&prev, vec![cp.clone()], vec![]);
            commit.head.phase = phase;
            commit.head.next_step = if i % 2 == 0 {
                None
            } else {
                Some(format!("s{i}"))
            };
            commit.head.lease = None;
            commit.durable = i % 2 == 0;
            commit_ok(store, commit.clone()).await?;
            expected_log.push(cp);
            ensure_eq!(
                load_some(store, "rt").await?,
                commit.head,
                "the head after commit {}",
                i + 2
            );
            prev = commit.head;
        }
        ensure_eq!(
            log(store, "rt", 0).await?,
            expected_log,
            "the log after several commits"
        );
        // A commit with nothing to append changes only the head.
        let commit = advance(&prev, vec![], vec![]);
        commit_ok(store, commit.clone()).await?;
        ensure_eq!(
            load_some(store, "rt").await?,
            commit.head,
            "the head after a head-only commit"
        );
        ensure_eq!(
            log(store, "rt", 0).await?,
            expected_log,
            "the log after a head-only commit"
        );
        Ok(())
    })
    .await
}

/// Creating an existing session is a conflict (expected `None`, found its
/// version) and writes nothing.
pub async fn create_conflict(store: &dyn SessionStore) -> Result<(), Failure> {
    run("create_conflict", async {
        let first = sample("dup", 1);
        commit_ok(store, first.clone()).await?;
        let mut second = sample("dup", 3);
        second.head.agent_id = "intruder".into();
        second.append[0] = snapshot(0, 0, json!("intruder"));
        expect_conflict(store.commit(&second).await, "dup", None, Some(1))?;
        ensure_eq!(
            load_some(store, "dup").await?,
            first.head,
            "the head after a refused create"
        );
        ensure_eq!(
            log(store, "dup", 0).await?,
            first.append,
            "the log after a refused create"
        );
        Ok(())
    })
    .await
}

/// A commit expecting another version than the stored one (older, newer, or
/// any on a missing session) is a conflict and writes nothing: no head, no
/// appended checkpoints, no removals.
pub async fn stale_version(store: &dyn SessionStore) -> Result<(), Failure> {
    run("stale_version", async {
        let c1 = sample("stale", 2);
        commit_ok(store, c1.clone()).await?;
        let c2 = advance(
            &c1.head,
            vec![update(3, 3, "think", json!({"n": 3}))],
            vec![],
        );
        commit_ok(store, c2.clone()).await?;
        let expected_log = log(store, "stale", 0).await?;
        ensure_eq!(
            seqs(&expected_log),
            vec![0, 1, 2, 3],
            "the log before stale commits"
        );

        // Stale: built on version 1 again, appending and removing.
        let mut stale = advance(
            &c1.head,
            vec![update(4, 4, "x", json!("stale"))],
            vec![0, 1],
        );
        stale.head.last_seq = 4;
        expect_conflict(store.commit(&stale).await, "stale", Some(1), Some(2))?;
        // From the future.
        let mut future = advance(&c2.head, vec![update(4, 4, "x", json!("future"))], vec![2]);
        future.expected_version = Some(7);
        future.head.version = 8;
        expect_conflict(store.commit(&future).await, "stale", Some(7), Some(2))?;
        // Same version as the new head (a writer that forgot to compare).
        let mut same = advance(&c2.head, vec![update(4, 4, "x", json!("same"))], vec![3]);
        same.expected_version = Some(c2.head.version + 1);
        expect_conflict(store.commit(&same).await, "stale", Some(3), Some(2))?;

        ensure_eq!(
            load_some(store, "stale").await?,
            c2.head,
            "the head after refused commits"
        );
        ensure_eq!(
            log(store, "stale", 0).await?,
            expected_log,
            "the log after refused commits"
        );

        // An expected version on a session that does not exist.
        let mut ghost = advance(&head("ghost"), vec![snapshot(1, 1, json!(null))], vec![]);
        ghost.expected_version = Some(1);
        expect_conflict(store.commit(&ghost).await, "ghost", Some(1), None)?;
        let ghost_head = store.load(&id("ghost")).await.ctx("load(\"ghost\")")?;
        ensure!(
            ghost_head.is_none(),
            "a refused commit created session \"ghost\": {ghost_head:?}"
        );
        ensure_eq!(
            log(store, "ghost", 0).await?,
            Vec::<Checkpoint>::new(),
            "the log of a refused session"
        );
        ensure!(
            !store
                .sessions()
                .await
                .ctx("sessions")?
                .contains(&id("ghost")),
            "a refused commit made session \"ghost\" listed"
        );
        Ok(())
    })
    .await
}

/// `remove` drops exactly the given seqs, in the same commit as an append;
/// removing a seq that is not there is not an error.
pub async fn remove(store: &dyn SessionStore) -> Result<(), Failure> {
    run("remove", async {
        // Snapshots at 0, 3 and 6 like the engine's, updates between.
        let mut append = vec![snapshot(0, 0, json!({"n": 0}))];
        append.push(update(1, 1, "think", json!({"n": 1})));
        append.push(update(2, 2, "think", json!({"n": 2})));
        append.push(snapshot(3, 2, json!({"n": 2})));
        append.push(update(4, 3, "think", json!({"n": 3})));
        let c1 = create(head("rm"), append.clone());
        commit_ok(store, c1.clone()).await?;

        let new = vec![
            update(5, 4, "think", json!({"n": 4})),
            snapshot(6, 4, json!({"n": 4})),
        ];
        let mut c2 = advance(&c1.head, new.clone(), vec![3]);
        c2.head.snapshot_seq = 6;
        c2.head.snapshot_index = 4;
        commit_ok(store, c2.clone()).await?;
        let mut expected: Vec<Checkpoint> = append.into_iter().filter(|cp| cp.seq != 3).collect();
        expected.extend(new);
        ensure_eq!(
            log(store, "rm", 0).await?,
            expected,
            "the log after removing seq 3"
        );
        ensure_eq!(
            load_some(store, "rm").await?,
            c2.head,
            "the head after a removal"
        );

        // Removal alone, of several seqs, one of them absent.
        let c3 = advance(&c2.head, vec![], vec![1, 3, 99, 5]);
        commit_ok(store, c3.clone()).await?;
        expected.retain(|cp| ![1, 5].contains(&cp.seq));
        ensure_eq!(
            log(store, "rm", 0).await?,
            expected,
            "the log after removing 1, 3 (gone), 99 (absent), 5"
        );
        ensure_eq!(
            log(store, "rm", 6).await?,
            expected[expected.len() - 1..].to_vec(),
            "checkpoints from the newest snapshot"
        );
        Ok(())
    })
    .await
}

/// `checkpoints(from_seq)` returns the records with `seq >= from_seq`,
/// ascending, with numeric (not textual) order and sparse, large seqs.
pub async fn from_seq(store: &dyn SessionStore) -> Result<(), Failure> {
    run("from_seq", async {
        let mut all = vec![snapshot(0, 0, json!({"n": 0}))];
        all.extend((1..=12).map(|i| update(i, i, "think", json!({"n": i}))));
        let c1 = create(head("seq"), all.clone());
        commit_ok(store, c1.clone()).await?;
        for from in 0..=14 {
            let got = log(store, "seq", from).await?;
            let want: Vec<Checkpoint> = all.iter().filter(|cp| cp.seq >= from).cloned().collect();
            ensure_eq!(got, want, "checkpoints from {from}");
        }
        // Sparse seqs far apart, up to u64::MAX, appended out of order.
        let far = [255, 256, 65_536, 1 << 40, u64::MAX - 1, u64::MAX];
        let mut appended: Vec<Checkpoint> = far
            .iter()
            .map(|&s| update(s, 13, "far", json!(s.to_string())))
            .collect();
        appended.reverse();
        let c2 = advance(&c1.head, appended, vec![]);
        commit_ok(store, c2).await?;
        let mut want = all.clone();
        want.extend(
            far.iter()
                .map(|&s| update(s, 13, "far", json!(s.to_string()))),
        );
        ensure_eq!(
            seqs(&log(store, "seq", 0).await?),
            seqs(&want),
            "the order of sparse seqs"
        );
        ensure_eq!(
            log(store, "seq", 0).await?,
            want,
            "the log with sparse seqs"
        );
        for from in [13, 256, 257, 1 << 40, u64::MAX - 1, u64::MAX] {
            let got = log(store, "seq", from).await?;
            let w: Vec<u64> = seqs(&want).into_iter().filter(|&s| s >= from).collect();
            ensure_eq!(seqs(&got), w, "checkpoints from {from}");
        }
        Ok(())
    })
    .await
}

/// Ids that a file or key-value store could mix up or escape with.
const TRICKY_IDS: [&str; 12] = [
    "a", "ab", "a/b", "../x", "..", ".", "", "A", "a\0b", "sp ace", "é", "%41",
];

/// `sessions()` lists exactly the sessions with a head, whatever their ids.
pub async fn sessions(store: &dyn SessionStore) -> Result<(), Failure> {
    run("sessions", async {
        for s in TRICKY_IDS {
            commit_ok(store, sample(s, 1)).await?;
        }
        // A refused create adds nothing.
        expect_conflict(store.commit(&sample("a", 0)).await, "a", None, Some(1))?;
        let mut listed: Vec<String> = store
            .sessions()
            .await
            .ctx("sessions")?
            .iter()
            .map(|s| s.as_str().to_owned())
            .collect();
        let n = listed.len();
        listed.sort();
        listed.dedup();
        ensure_eq!(listed.len(), n, "sessions must list each session once");
        let mut want: Vec<String> = TRICKY_IDS.iter().map(|s| (*s).to_owned()).collect();
        want.sort();
        ensure_eq!(listed, want, "the listed sessions");
        for s in TRICKY_IDS {
            let h = load_some(store, s).await?;
            ensure_eq!(
                h.session_id.as_str(),
                s,
                "the session id of the head loaded for {s:?}"
            );
        }
        Ok(())
    })
    .await
}

/// Every page of `prefix` of `limit` ids, from the first to the first
/// empty one; fails if a page is longer than `limit`, or is short and not
/// the last.
async fn all_pages(
    store: &dyn SessionStore,
    prefix: &str,
    limit: usize,
) -> Result<Vec<String>, String> {
    let mut out: Vec<String> = Vec::new();
    let mut after: Option<SessionId> = None;
    let mut short = false;
    loop {
        let page = store
            .sessions_page(prefix, after.as_ref(), limit)
            .await
            .ctx(format!(
                "sessions_page({prefix:?}, after {after:?}, {limit})"
            ))?;
        if page.is_empty() {
            return Ok(out);
        }
        ensure!(
            !short,
            "sessions_page({prefix:?}, {limit}): a page after a short one is not empty: {page:?}"
        );
        ensure!(
            page.len() <= limit,
            "sessions_page({prefix:?}, {limit}) returned {} ids",
            page.len()
        );
        short = page.len() < limit;
        after = page.last().cloned();
        out.extend(page.iter().map(|s| s.as_str().to_owned()));
        ensure!(
            out.len() <= 1000,
            "sessions_page({prefix:?}, {limit}) never ends: {out:?}"
        );
    }
}

/// `sessions_page` lists the sessions under a prefix in pages, each once,
/// in byte order for ids without `%` or NUL (the one order every store
/// agrees on), from after an id that need not exist.
pub async fn sessions_page(store: &dyn SessionStore) -> Result<(), Failure> {
    run("sessions_page", async {
        let prefixed = [
            "run/1",
            "run/2",
            "run/10",
            "run/",
            "run",
            "runs/x",
            "rum/z",
            "run/é",
            "run/%41",
            "run/a\0b",
            "run/\u{10FFFF}",
            "ruo",
            "run/%2541",
        ];
        let all: Vec<&str> = TRICKY_IDS.iter().chain(&prefixed).copied().collect();
        for s in &all {
            commit_ok(store, sample(s, 0)).await?;
        }
        let plain = |ids: &[String]| -> Vec<String> {
            ids.iter()
                .filter(|s| !s.contains(['%', '\0']))
                .cloned()
                .collect()
        };
        for (prefix, limit) in [
            ("", 3),
            ("", 1),
            ("", 100),
            ("run/", 2),
            ("run", 4),
            ("r", 1),
            ("zzz", 5),
            // Stored escaped by some stores: a prefix escaped as the ids are.
            ("run/%", 1),
            ("run/%25", 1),
            ("run/a\0", 1),
            ("a\0", 3),
            ("%", 2),
        ] {
            let listed = all_pages(store, prefix, limit).await?;
            let mut sorted = listed.clone();
            sorted.sort();
            sorted.dedup();
            ensure_eq!(
                sorted.len(),
                listed.len(),
                "pages of {prefix:?} by {limit} list each id once"
            );
            let mut want: Vec<String> = all
                .iter()
                .filter(|s| s.starts_with(prefix))
                .map(|s| (*s).to_owned())
                .collect();
            want.sort();
            ensure_eq!(
                sorted,
                want,
                "the ids listed in pages of {prefix:?} by {limit}"
            );
            ensure_eq!(
                plain(&listed),
                plain(&want),
                "the ids without % or NUL of {prefix:?} by {limit}, in order"
            );
        }
        // After an id that is no session, and after one below the prefix.
        let page = |prefix: &'static str, after: &'static str, limit| async move {
            store
                .sessions_page(prefix, Some(&id(after)), limit)
                .await
                .ctx(format!(
                    "sessions_page({prefix:?}, after {after:?}, {limit})"
                ))
                .map(|ids| {
                    ids.iter()
                        .map(|s| s.as_str().to_owned())
                        .collect::<Vec<_>>()
                })
        };
        let got = page("run/", "run/15", 100).await?;
        ensure_eq!(
            plain(&got),
            ["run/2", "run/é", "run/\u{10FFFF}"]
                .map(String::from)
                .to_vec(),
            "the ids of run/ after run/15, which is no session"
        );
        let got = page("run/", "a", 2).await?;
        ensure_eq!(
            got,
            ["run/", "run/%2541"].map(String::from).to_vec(),
            "the first page of run/ after an id below it"
        );
        ensure_eq!(
            page("run/", "s", 5).await?,
            Vec::<String>::new(),
            "run/ after an id above it"
        );
        ensure_eq!(page("", "a", 0).await?, Vec::<String>::new(), "a page of 0");
        Ok(())
    })
    .await
}

/// Sessions whose ids prefix one another, or look alike, share nothing:
/// their heads, logs, appends and removals stay apart.
pub async fn isolation(store: &dyn SessionStore) -> Result<(), Failure> {
    run("isolation", async {
        for (i, s) in TRICKY_IDS.iter().enumerate() {
            let mut c = sample(s, 2);
            c.head.agent_id = format!("agent-{i}");
            for cp in &mut c.append {
                cp.step = format!("{s}#{}", cp.seq);
            }
            commit_ok(store, c).await?;
        }
        // Change "a" only: append, remove, new head.
        let a = load_some(store, "a").await?;
        let mut c = advance(&a, vec![update(3, 3, "a#3", json!("only a"))], vec![1]);
        c.head.agent_id = "changed".into();
        commit_ok(store, c).await?;
        for (i, s) in TRICKY_IDS.iter().enumerate() {
            let h = load_some(store, s).await?;
            let l = log(store, s, 0).await?;
            ensure!(
                l.iter().all(|cp| cp.step.starts_with(&format!("{s}#"))),
                "the log of {s:?} holds records of another session: {:?}",
                l.iter().map(|cp| &cp.step).collect::<Vec<_>>()
            );
            if *s == "a" {
                ensure_eq!(seqs(&l), vec![0, 2, 3], "the log of \"a\" after its commit");
                ensure_eq!(h.agent_id, "changed", "the head of \"a\"");
            } else {
                ensure_eq!(
                    seqs(&l),
                    vec![0, 1, 2],
                    "the log of {s:?} after a commit to \"a\""
                );
                ensure_eq!(
                    h.agent_id,
                    format!("agent-{i}"),
                    "the head of {s:?} after a commit to \"a\""
                );
                ensure_eq!(h.version, 1, "the version of {s:?} after a commit to \"a\"");
            }
        }
        Ok(())
    })
    .await
}

/// History-and-fork-shaped use: a fork copies a session's log into a new
/// session, then both go on independently.
pub async fn fork(store: &dyn SessionStore) -> Result<(), Failure> {
    run("fork", async {
        let main = sample("main", 4);
        commit_ok(store, main.clone()).await?;
        // History: the log from the start, as time travel reads it.
        let history = log(store, "main", 0).await?;
        ensure_eq!(history, main.append, "the history of \"main\"");
        // Fork at step 2: snapshot of the state there, new session.
        let mut fork_head = head("main-fork");
        fork_head.steps = 2;
        let fork = create(
            fork_head,
            vec![snapshot(0, 2, json!({"n": 2, "forked": true}))],
        );
        commit_ok(store, fork.clone()).await?;
        // Both advance with the same seqs.
        let m = advance(
            &main.head,
            vec![update(5, 5, "think", json!("main 5"))],
            vec![],
        );
        commit_ok(store, m.clone()).await?;
        let f = advance(
            &fork.head,
            vec![update(1, 3, "think", json!("fork 3"))],
            vec![0],
        );
        let mut f = f;
        f.head.snapshot_seq = 1;
        commit_ok(store, f.clone()).await?;
        ensure_eq!(
            load_some(store, "main").await?,
            m.head,
            "the head of \"main\""
        );
        ensure_eq!(
            load_some(store, "main-fork").await?,
            f.head,
            "the head of the fork"
        );
        let mut main_log = main.append.clone();
        main_log.push(update(5, 5, "think", json!("main 5")));
        ensure_eq!(
            log(store, "main", 0).await?,
            main_log,
            "the log of \"main\" after the fork's commits"
        );
        ensure_eq!(
            log(store, "main-fork", 0).await?,
            vec![update(1, 3, "think", json!("fork 3"))],
            "the log of the fork"
        );
        Ok(())
    })
    .await
}

/// The records of parallel branches (a fork, branch steps, a join) and the
/// branches' journals in the head read back as written.
pub async fn branches(store: &dyn SessionStore) -> Result<(), Failure> {
    use harness::TaskPath;
    use harness::session::{BranchRecord, BranchStart, ForkRecord, JoinRecord};
    run("branches", async {
        let first = sample("par", 1);
        commit_ok(store, first.clone()).await?;
        let cp = |seq: u64, index: u64, step: &str, kind: CheckpointKind| Checkpoint {
            seq,
            index,
            step: step.into(),
            time: T0,
            kind,
        };
        let (a, b) = (TaskPath::from("a#0"), TaskPath::from("a#1"));
        let records = vec![
            cp(
                2,
                1,
                "plan",
                CheckpointKind::Fork(ForkRecord {
                    path: TaskPath::root(),
                    fork: "plan/items".into(),
                    join: "sum".into(),
                    branches: vec![
                        BranchStart {
                            path: a.clone(),
                            step: "a".into(),
                            input: Some(json!({"item": [1, "x"]})),
                        },
                        BranchStart {
                            path: b.clone(),
                            step: "a".into(),
                            input: None,
                        },
                    ],
                }),
            ),
            cp(
                3,
                2,
                "a",
                CheckpointKind::Branch(BranchRecord {
                    path: b.clone(),
                    update: json!({"n": 2}),
                    next: None,
                    failed: Some("no luck: \"quoted\"\n".into()),
                }),
            ),
            cp(
                4,
                3,
                "a",
                CheckpointKind::Branch(BranchRecord {
                    path: a.clone(),
                    update: json!({"n": 1}),
                    next: Some("b".into()),
                    failed: None,
                }),
            ),
        ];
        let mut second = advance(&first.head, records.clone(), vec![]);
        second.head.last_seq = 4;
        second.head.steps = 3;
        second.head.branch_journals.insert(
            a.clone(),
            harness::step::StepJournal {
                responses: vec![json!("yes")],
                once: [("k".to_string(), json!(1))].into(),
            },
        );
        commit_ok(store, second.clone()).await?;
        ensure_eq!(
            load_some(store, "par").await?,
            second.head,
            "the head with a branch's journal"
        );
        let join = cp(
            5,
            3,
            "sum",
            CheckpointKind::Join(JoinRecord {
                path: TaskPath::root(),
                branches: vec![a, b],
            }),
        );
        let mut third = advance(&second.head, vec![join.clone()], vec![]);
        third.head.last_seq = 5;
        third.head.branch_journals.clear();
        commit_ok(store, third.clone()).await?;
        ensure_eq!(
            load_some(store, "par").await?,
            third.head,
            "the head after the join"
        );
        let mut expected = first.append.clone();
        expected.extend(records);
        expected.push(join);
        ensure_eq!(
            log(store, "par", 0).await?,
            expected,
            "the log of the branches"
        );
        Ok(())
    })
    .await
}

/// Durable and non-durable commits read the same; `flush` succeeds after
/// either.
pub async fn durability(store: &dyn SessionStore) -> Result<(), Failure> {
    run("durability", async {
        let mut c = sample("dur", 0);
        c.durable = false;
        commit_ok(store, c.clone()).await?;
        let mut prev = c.head;
        let mut want = c.append;
        for i in 1..=6_u64 {
            let cp = update(i, i, "think", json!(i));
            let mut next = advance(&prev, vec![cp.clone()], vec![]);
            next.durable = i % 3 == 0;
            commit_ok(store, next.clone()).await?;
            want.push(cp);
            prev = next.head;
            if i == 4 {
                store.flush().await.ctx("flush")?;
            }
        }
        store.flush().await.ctx("flush")?;
        ensure_eq!(
            load_some(store, "dur").await?,
            prev,
            "the head after mixed durability"
        );
        ensure_eq!(
            log(store, "dur", 0).await?,
            want,
            "the log after mixed durability"
        );
        Ok(())
    })
    .await
}

/// A head of another schema version (as a newer build writes it) is refused
/// with `StoreError::Load` by `load` and by a commit on top of it, which
/// leaves it in place.
pub async fn schema_version(store: &dyn SessionStore) -> Result<(), Failure> {
    run("schema_version", async {
        let mut c = sample("future", 1);
        c.head.schema_version = 999;
        commit_ok(store, c.clone()).await?;
        expect_load(
            store.load(&id("future")).await,
            "load of a schema-999 head",
            "future",
            "head",
        )?;
        let mut next = advance(&c.head, vec![update(2, 2, "x", json!(2))], vec![]);
        next.head.schema_version = SCHEMA_VERSION;
        expect_load(
            store.commit(&next).await,
            "a commit on top of a schema-999 head",
            "future",
            "head",
        )?;
        // Still there, still refused: neither skipped nor deleted.
        expect_load(
            store.load(&id("future")).await,
            "load after a refused commit",
            "future",
            "head",
        )?;
        ensure!(
            store
                .sessions()
                .await
                .ctx("sessions")?
                .contains(&id("future")),
            "a session with an unreadable head must still be listed"
        );
        Ok(())
    })
    .await
}

/// A head with a live lease is just data to the store: it round-trips, and
/// a commit with the next version takes it over (leases are the engine's
/// business, compare-and-set is the store's).
pub async fn lease_is_data(store: &dyn SessionStore) -> Result<(), Failure> {
    run("lease_is_data", async {
        let mut c = sample("leased", 1);
        c.head.lease = Some(Lease {
            owner: "A".into(),
            expires_at: u64::MAX,
        });
        commit_ok(store, c.clone()).await?;
        ensure_eq!(
            load_some(store, "leased").await?,
            c.head,
            "a head with a live lease"
        );
        let mut take = advance(&c.head, vec![], vec![]);
        take.head.lease = Some(Lease {
            owner: "B".into(),
            expires_at: T0,
        });
        commit_ok(store, take.clone()).await?;
        ensure_eq!(
            load_some(store, "leased").await?,
            take.head,
            "the head after a takeover"
        );
        let mut release = advance(&take.head, vec![], vec![]);
        release.head.lease = None;
        commit_ok(store, release.clone()).await?;
        ensure_eq!(
            load_some(store, "leased").await?,
            release.head,
            "the head after a release"
        );
        Ok(())
    })
    .await
}

/// `runnable` returns the sessions of the agent asked for, and never
/// another agent's: workers of several agents share one store.
pub async fn runnable_by_agent(store: &dyn SessionStore) -> Result<(), Failure> {
    run("runnable_by_agent", async {
        let agents = [
            ("a-1", "alpha", 1),
            ("b-1", "beta", 2),
            ("a-2", "alpha", 3),
            ("g-1", "alpha-2", 4),
            ("b-2", "beta", 5),
            ("a-3", "alpha", 6),
        ];
        for (name, agent, t) in agents {
            let mut c = create(head(name), vec![snapshot(0, 0, json!({"n": t}))]);
            c.head.agent_id = agent.into();
            c.head.updated_at = T0 + t;
            commit_ok(store, c).await?;
        }
        let now = T0 + 1_000;
        let found = |ids: Vec<SessionId>| {
            ids.iter()
                .map(|id| id.as_str().to_string())
                .collect::<Vec<_>>()
        };
        ensure_eq!(
            found(
                store
                    .runnable("alpha", now, 10)
                    .await
                    .ctx("runnable alpha")?
            ),
            ["a-1", "a-2", "a-3"],
            "alpha's runnable sessions, oldest first"
        );
        ensure_eq!(
            found(store.runnable("beta", now, 1).await.ctx("runnable beta")?),
            ["b-1"],
            "beta's oldest runnable session"
        );
        ensure_eq!(
            found(
                store
                    .runnable("alpha-2", now, 10)
                    .await
                    .ctx("runnable alpha-2")?
            ),
            ["g-1"],
            "an agent whose id extends another's"
        );
        ensure_eq!(
            found(
                store
                    .runnable("gamma", now, 10)
                    .await
                    .ctx("runnable gamma")?
            ),
            Vec::<String>::new(),
            "an agent with no session"
        );
        ensure_eq!(
            found(
                store
                    .runnable("", now, 10)
                    .await
                    .ctx("runnable of the empty id")?
            ),
            Vec::<String>::new(),
            "the empty agent id"
        );
        Ok(())
    })
    .await
}

/// What workers rely on from `runnable`: a running session is runnable
/// when it has no lease or its lease has ended (`expires_at <= now`), never
/// while a lease is live, never when it paused, completed or failed; oldest
/// `updated_at` first, up to the limit. Taking it (a commit with a live
/// lease) hides it; releasing it (a commit without one) shows it again,
/// now the newest; finishing it removes it. A store may hide what it has
/// just returned from the calls that follow (a claim, as PostgreSQL's and
/// Redis's do), so each later call is checked for what it must and must
/// not hold, not for all of it.
pub async fn runnable_leases(store: &dyn SessionStore) -> Result<(), Failure> {
    run("runnable_leases", async {
        let now = T0 + 10_000;
        let paused = SessionPhase::Interrupted {
            interrupt: harness::Interrupt {
                id: "i-1".into(),
                step: "ask".into(),
                path: Default::default(),
                payload: json!({"q": "ok?"}),
                breakpoint: None,
            },
        };
        let sessions = [
            ("paused", paused, None, 1),
            (
                "completed",
                SessionPhase::Completed {
                    signal: harness::Signal::END,
                },
                None,
                2,
            ),
            (
                "failed",
                SessionPhase::Failed { error: "e".into() },
                None,
                3,
            ),
            ("submitted", SessionPhase::Running, None, 4),
            ("expired", SessionPhase::Running, Some(now - 1), 5),
            ("expires-now", SessionPhase::Running, Some(now), 6),
            ("live-for-1ms", SessionPhase::Running, Some(now + 1), 7),
            ("live", SessionPhase::Running, Some(now + 3_600_000), 8),
            ("later", SessionPhase::Running, None, 9),
        ];
        for (name, phase, lease, t) in sessions {
            let mut c = create(head(name), vec![snapshot(0, 0, json!({"n": t}))]);
            c.head.phase = phase;
            c.head.lease = lease.map(|expires_at| Lease {
                owner: format!("owner-of-{name}"),
                expires_at,
            });
            c.head.updated_at = T0 + t;
            commit_ok(store, c).await?;
        }
        let names = |ids: Vec<SessionId>| {
            ids.iter()
                .map(|id| id.as_str().to_string())
                .collect::<Vec<_>>()
        };
        ensure_eq!(
            names(
                store
                    .runnable("conformance", now, 0)
                    .await
                    .ctx("runnable, limit 0")?
            ),
            Vec::<String>::new(),
            "a limit of 0"
        );
        ensure_eq!(
            names(
                store
                    .runnable("conformance", now, 2)
                    .await
                    .ctx("runnable, limit 2")?
            ),
            ["submitted", "expired"],
            "the two oldest runnable sessions"
        );
        let found = names(
            store
                .runnable("conformance", now, 10)
                .await
                .ctx("runnable")?,
        );
        let rest = ["submitted", "expired", "expires-now", "later"];
        ensure!(
            found == rest || found == rest[2..],
            "the runnable sessions at {now}, oldest first (a store that claims \
             returns the two it did not return before): got {found:?}"
        );
        // A millisecond later, the short lease has ended too; the long one
        // has not.
        let later = names(
            store
                .runnable("conformance", now + 1, 10)
                .await
                .ctx("runnable later")?,
        );
        ensure!(
            later.contains(&"live-for-1ms".to_string()) && !later.contains(&"live".to_string()),
            "a lease ending at {} is over at {}, one an hour later is not: got {later:?}",
            now + 1,
            now + 1
        );
        ensure!(
            later
                .iter()
                .all(|n| !["paused", "completed", "failed"].contains(&n.as_str())),
            "a session that is not running is never runnable: got {later:?}"
        );
        // Taken (a live lease), it is hidden; released, it is back, newest.
        let h = load_some(store, "submitted").await?;
        let mut take = advance(&h, vec![], vec![]);
        take.head.lease = Some(Lease {
            owner: "worker".into(),
            expires_at: now + 60_000,
        });
        take.head.updated_at = now;
        commit_ok(store, take.clone()).await?;
        let found = names(
            store
                .runnable("conformance", now + 1, 10)
                .await
                .ctx("runnable")?,
        );
        ensure!(
            !found.contains(&"submitted".to_string()),
            "a session taken (a live lease) is not runnable: got {found:?}"
        );
        let mut release = advance(&take.head, vec![], vec![]);
        release.head.lease = None;
        release.head.updated_at = now + 1;
        commit_ok(store, release.clone()).await?;
        let found = names(
            store
                .runnable("conformance", now + 1, 10)
                .await
                .ctx("runnable")?,
        );
        ensure!(
            found.last().map(String::as_str) == Some("submitted"),
            "a session released is runnable again, the newest: got {found:?}"
        );
        let mut done = advance(&release.head, vec![], vec![]);
        done.head.phase = SessionPhase::Completed {
            signal: harness::Signal::END,
        };
        commit_ok(store, done).await?;
        let found = names(
            store
                .runnable("conformance", now + 2, 10)
                .await
                .ctx("runnable")?,
        );
        ensure!(
            !found.contains(&"submitted".to_string()),
            "a finished session is not runnable: got {found:?}"
        );
        Ok(())
    })
    .await
}

/// Two writers racing to take over the same head with the same expected
/// version: exactly one succeeds, the other gets a conflict, and the head is
/// the winner's. Repeated over several rounds.
pub async fn takeover_race(store: Arc<dyn SessionStore>) -> Result<(), Failure> {
    run("takeover_race", async {
        for round in 0..20 {
            let name = format!("takeover-{round}");
            let mut c = sample(&name, 1);
            c.head.lease = Some(Lease {
                owner: "crashed".into(),
                expires_at: T0,
            });
            commit_ok(&*store, c.clone()).await?;
            let barrier = Arc::new(tokio::sync::Barrier::new(2));
            let mut tasks = Vec::new();
            for who in ["B", "C"] {
                let mut take = advance(&c.head, vec![update(2, 2, who, json!(who))], vec![]);
                take.head.lease = Some(Lease {
                    owner: who.into(),
                    expires_at: u64::MAX,
                });
                let (store, barrier) = (Arc::clone(&store), Arc::clone(&barrier));
                tasks.push(tokio::spawn(async move {
                    barrier.wait().await;
                    let head = take.head.clone();
                    (head, store.commit(&take).await)
                }));
            }
            let mut winners = Vec::new();
            for task in tasks {
                let (head, result) = task
                    .await
                    .map_err(|e| format!("a writer task failed: {e}"))?;
                match result {
                    Ok(()) => winners.push(head),
                    Err(e) => expect_conflict(Err(e), &name, Some(1), Some(2))?,
                }
            }
            ensure_eq!(
                winners.len(),
                1,
                "round {round}: the number of successful takeovers"
            );
            let winner = &winners[0];
            ensure_eq!(
                load_some(&*store, &name).await?,
                *winner,
                "round {round}: the head after the race"
            );
            let l = log(&*store, &name, 2).await?;
            ensure_eq!(
                l.len(),
                1,
                "round {round}: the checkpoints appended by the race"
            );
            let owner = winner
                .lease
                .as_ref()
                .map(|l| l.owner.clone())
                .unwrap_or_default();
            ensure_eq!(
                l[0].step,
                owner,
                "round {round}: the appended checkpoint is the winner's"
            );
        }
        Ok(())
    })
    .await
}

/// Eight writers racing to create the same session: exactly one wins, the
/// others get `Conflict { expected: None, found: Some(1) }`, and the session
/// holds the winner's head and checkpoints only.
pub async fn concurrent_create(store: Arc<dyn SessionStore>) -> Result<(), Failure> {
    run("concurrent_create", async {
        const WRITERS: usize = 8;
        for round in 0..10 {
            let name = format!("create-{round}");
            let barrier = Arc::new(tokio::sync::Barrier::new(WRITERS));
            let mut tasks = Vec::new();
            for w in 0..WRITERS {
                let mut c = sample(&name, 1);
                c.head.agent_id = format!("writer-{w}");
                c.append = vec![
                    snapshot(0, 0, json!({"writer": w})),
                    update(1, 1, "think", json!({"writer": w})),
                ];
                c.durable = w % 2 == 0;
                let (store, barrier) = (Arc::clone(&store), Arc::clone(&barrier));
                tasks.push(tokio::spawn(async move {
                    barrier.wait().await;
                    let expected = (c.head.clone(), c.append.clone());
                    (expected, store.commit(&c).await)
                }));
            }
            let mut winners = Vec::new();
            for task in tasks {
                let (expected, result) = task
                    .await
                    .map_err(|e| format!("a writer task failed: {e}"))?;
                match result {
                    Ok(()) => winners.push(expected),
                    Err(e) => expect_conflict(Err(e), &name, None, Some(1))?,
                }
            }
            ensure_eq!(
                winners.len(),
                1,
                "round {round}: the number of writers that created the session"
            );
            let (head, append) = &winners[0];
            ensure_eq!(
                load_some(&*store, &name).await?,
                *head,
                "round {round}: the head is the winner's"
            );
            ensure_eq!(
                log(&*store, &name, 0).await?,
                *append,
                "round {round}: the log is the winner's only"
            );
        }
        Ok(())
    })
    .await
}

/// How often, and how long apart, [`created_feed`] reads the feed again
/// for creations it has not given yet.
const FEED_WAITS: usize = 100;
const FEED_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

/// The feed of created sessions, in a store that keeps one
/// ([`SessionStore::created_since`]; a store that keeps none passes): from
/// the position `None` gives, each session created later once, in the
/// order of creation, by pages of any size (a store may hold a creation
/// back until the ones begun before it have ended: the check waits up to
/// 5 s for it); a commit that only advances a session, or a refused
/// creation, adds nothing; from the position `None` gives after them, none
/// of them; the feed is ordered whatever the concurrency: a reader that
/// follows it while eight writers create sessions sees each once, and none
/// it had not seen before the position it reached.
pub async fn created_feed(store: Arc<dyn SessionStore>) -> Result<(), Failure> {
    run("created_feed", async {
        let Some(start) = store
            .created_since(None, 10)
            .await
            .map_err(|e| format!("created_since(None): {e}"))?
        else {
            return Ok(());
        };
        ensure!(
            start.sessions.is_empty(),
            "created_since(None) gives no session: {:?}",
            start.sessions
        );
        let feed = |since: u64, limit: usize| {
            let store = Arc::clone(&store);
            async move {
                store
                    .created_since(Some(since), limit)
                    .await
                    .map_err(|e| format!("created_since({since}, {limit}): {e}"))?
                    .ok_or_else(|| format!("created_since({since}, {limit}): no feed, after one"))
            }
        };
        let names = |page: &Created| -> Vec<String> {
            page.sessions
                .iter()
                .map(|s| s.as_str().to_owned())
                .collect()
        };
        for s in ["feed-b", "feed-a", "feed-c"] {
            commit_ok(&*store, sample(s, 0)).await?;
        }
        let a = load_some(&*store, "feed-a").await?;
        commit_ok(
            &*store,
            advance(&a, vec![update(1, 1, "think", json!(1))], vec![]),
        )
        .await?;
        expect_conflict(
            store.commit(&sample("feed-b", 0)).await,
            "feed-b",
            None,
            Some(1),
        )?;
        // A store may give a creation only once every one before it has
        // ended (PostgreSQL's waits for the transactions of other clients
        // of the server): what it gives, it gives in order.
        let mut all = feed(start.next, 10).await?;
        for _ in 0..FEED_WAITS {
            if all.sessions.len() >= 3 {
                break;
            }
            tokio::time::sleep(FEED_WAIT).await;
            all = feed(start.next, 10).await?;
        }
        ensure_eq!(
            names(&all),
            ["feed-b", "feed-a", "feed-c"],
            "the feed from the start, in the order of creation"
        );
        ensure!(all.next > start.next, "the position did not move: {all:?}");
        let tip = store
            .created_since(None, 10)
            .await
            .map_err(|e| format!("created_since(None): {e}"))?
            .ok_or("created_since(None): no feed, after one")?;
        ensure!(
            tip.sessions.is_empty() && tip.next >= all.next,
            "the position now, after the last creation seen ({}): {tip:?}",
            all.next
        );
        let after_tip = feed(tip.next, 10).await?;
        ensure!(
            after_tip.sessions.is_empty() && after_tip.next == tip.next,
            "from the position now, the feed gave {after_tip:?}"
        );
        let mut one_by_one = Vec::new();
        let mut at = start.next;
        for _ in 0..4 {
            let page = feed(at, 1).await?;
            ensure!(page.sessions.len() <= 1, "a page of 1 gave {page:?}");
            ensure!(
                page.next >= at && page.sessions.is_empty() == (page.next == at),
                "from {at}, a page of 1 gave {page:?}"
            );
            one_by_one.extend(names(&page));
            at = page.next;
        }
        ensure_eq!(one_by_one, names(&all), "the feed a session at a time");
        ensure_eq!(at, all.next, "the position after the last page");
        // A position past the feed's end (its data was lost, or restored
        // elsewhere, and it began again below): the feed from its start.
        let past = feed(all.next.saturating_add(1 << 40), 10).await?;
        ensure_eq!(
            past,
            all,
            "the feed asked from past its end (begun again below)"
        );
        let none = feed(all.next, 0).await?;
        ensure!(
            none.sessions.is_empty() && none.next == all.next,
            "a page of 0 gave {none:?}"
        );

        // Eight writers create 80 sessions while a reader follows.
        const WRITERS: usize = 8;
        let mut writers = Vec::new();
        for w in 0..WRITERS {
            let store = Arc::clone(&store);
            writers.push(tokio::spawn(async move {
                for i in 0..10 {
                    let mut c = sample(&format!("feed-{w}-{i}"), 0);
                    c.durable = i % 3 == 0;
                    store.commit(&c).await?;
                    tokio::task::yield_now().await;
                }
                Ok::<_, StoreError>(())
            }));
        }
        let mut seen: Vec<String> = Vec::new();
        let mut at = all.next;
        let follow = async |seen: &mut Vec<String>, at: &mut u64| -> Result<(), String> {
            let page = feed(*at, 7).await?;
            ensure!(page.next >= *at, "the position went back: {at} → {page:?}");
            seen.extend(names(&page));
            *at = page.next;
            Ok(())
        };
        while !writers.iter().all(|w| w.is_finished()) {
            follow(&mut seen, &mut at).await?;
            tokio::task::yield_now().await;
        }
        for w in writers {
            w.await
                .map_err(|e| format!("a writer task failed: {e}"))?
                .map_err(|e| format!("a writer's commit: {e}"))?;
        }
        for _ in 0..20 {
            follow(&mut seen, &mut at).await?;
        }
        for _ in 0..FEED_WAITS {
            if seen.len() >= WRITERS * 10 {
                break;
            }
            tokio::time::sleep(FEED_WAIT).await;
            follow(&mut seen, &mut at).await?;
        }
        let mut expected: Vec<String> = (0..WRITERS)
            .flat_map(|w| (0..10).map(move |i| format!("feed-{w}-{i}")))
            .collect();
        expected.sort();
        let mut sorted = seen.clone();
        sorted.sort();
        ensure_eq!(
            sorted,
            expected,
            "the sessions a reader following the feed saw (each once)"
        );
        // Each writer's sessions in the order it created them.
        for w in 0..WRITERS {
            let own: Vec<&String> = seen
                .iter()
                .filter(|s| s.starts_with(&format!("feed-{w}-")))
                .collect();
            let mut ordered = own.clone();
            ordered.sort_by_key(|s| s.rsplit('-').next().and_then(|i| i.parse::<u32>().ok()));
            ensure_eq!(own, ordered, "writer {w}'s sessions in the feed");
        }
        Ok(())
    })
    .await
}

/// Eight writers each doing fifty compare-and-set increments of one session
/// (each appending a checkpoint), retrying on conflict: the final version is
/// 1 + 400, and no increment or checkpoint is lost or doubled.
pub async fn concurrent_increments(store: Arc<dyn SessionStore>) -> Result<(), Failure> {
    run("concurrent_increments", async {
        const WRITERS: u64 = 8;
        const EACH: u64 = 50;
        const MAX_ATTEMPTS: u32 = 100_000;
        commit_ok(&*store, sample("counter", 0)).await?;
        let mut tasks = Vec::new();
        for w in 0..WRITERS {
            let store = Arc::clone(&store);
            tasks.push(tokio::spawn(async move {
                for i in 0..EACH {
                    let mut attempts = 0;
                    loop {
                        attempts += 1;
                        if attempts > MAX_ATTEMPTS {
                            return Err(format!("writer {w}: increment {i} still conflicts after {MAX_ATTEMPTS} attempts"));
                        }
                        let h = load_some(&*store, "counter").await?;
                        let seq = h.last_seq + 1;
                        let mut c = advance(&h, vec![update(seq, seq, &format!("w{w}-{i}"), json!([w, i]))], vec![]);
                        c.durable = i % 10 == 0;
                        match store.commit(&c).await {
                            Ok(()) => break,
                            Err(StoreError::Conflict { expected, found, .. }) => {
                                ensure_eq!(expected, Some(h.version), "writer {w}: the conflict's expected version");
                                ensure!(
                                    found.is_some_and(|f| f > h.version),
                                    "writer {w}: a conflict on version {} found {found:?}; versions only grow",
                                    h.version
                                );
                                tokio::task::yield_now().await;
                            }
                            Err(e) => return Err(format!("writer {w}: increment {i} failed: {e}")),
                        }
                    }
                }
                Ok(())
            }));
        }
        for task in tasks {
            task.await.map_err(|e| format!("a writer task failed: {e}"))??;
        }
        let h = load_some(&*store, "counter").await?;
        let n = WRITERS * EACH;
        ensure_eq!(h.version, 1 + n, "the final version");
        ensure_eq!(h.steps, n, "the final step count (lost updates?)");
        ensure_eq!(h.last_seq, n, "the final last_seq");
        let l = log(&*store, "counter", 1).await?;
        ensure_eq!(seqs(&l), (1..=n).collect::<Vec<_>>(), "the seqs of the appended checkpoints");
        let steps: BTreeSet<String> = l.iter().map(|cp| cp.step.clone()).collect();
        let want: BTreeSet<String> =
            (0..WRITERS).flat_map(|w| (0..EACH).map(move |i| format!("w{w}-{i}"))).collect();
        ensure!(steps == want, "every increment appears exactly once in the log ({} distinct of {n})", steps.len());
        Ok(())
    })
    .await
}

/// A head overwritten with garbage (by `corrupt`) fails `load` and commits
/// with `StoreError::Load`, stays listed, and stays unreadable (it is
/// neither skipped nor deleted); other sessions are unaffected.
pub async fn corrupt_head(
    store: &dyn SessionStore,
    corrupt: &(dyn Fn(&SessionId, Record) + Sync),
) -> Result<(), Failure> {
    run("corrupt_head", async {
        let c = sample("bad", 2);
        commit_ok(store, c.clone()).await?;
        let other = sample("good", 1);
        commit_ok(store, other.clone()).await?;
        corrupt(&id("bad"), Record::Head);
        expect_load(
            store.load(&id("bad")).await,
            "load of a corrupt head",
            "bad",
            "head",
        )?;
        let next = advance(&c.head, vec![update(3, 3, "x", json!(3))], vec![]);
        expect_load(
            store.commit(&next).await,
            "a commit on a corrupt head",
            "bad",
            "head",
        )?;
        expect_load(
            store.commit(&sample("bad", 0)).await,
            "a create over a corrupt head",
            "bad",
            "head",
        )?;
        expect_load(
            store.load(&id("bad")).await,
            "load of a corrupt head, again",
            "bad",
            "head",
        )?;
        let listed = store.sessions().await.ctx("sessions")?;
        ensure!(
            listed.contains(&id("bad")),
            "a session with a corrupt head must still be listed: {listed:?}"
        );
        ensure_eq!(
            load_some(store, "good").await?,
            other.head,
            "another session's head"
        );
        ensure_eq!(
            log(store, "good", 0).await?,
            other.append,
            "another session's log"
        );
        Ok(())
    })
    .await
}

/// A checkpoint overwritten with garbage (by `corrupt`) fails
/// `checkpoints` with `StoreError::Load` naming it, whenever it is in the
/// asked range, and only then.
pub async fn corrupt_checkpoint(
    store: &dyn SessionStore,
    corrupt: &(dyn Fn(&SessionId, Record) + Sync),
) -> Result<(), Failure> {
    run("corrupt_checkpoint", async {
        let c = sample("badlog", 3);
        commit_ok(store, c.clone()).await?;
        corrupt(&id("badlog"), Record::Checkpoint(1));
        for from in [0, 1] {
            expect_load(
                store.checkpoints(&id("badlog"), from).await,
                &format!("checkpoints from {from} over a corrupt checkpoint 1"),
                "badlog",
                "checkpoint 1",
            )?;
        }
        ensure_eq!(
            log(store, "badlog", 2).await?,
            c.append[2..].to_vec(),
            "checkpoints after the corrupt one"
        );
        ensure_eq!(
            load_some(store, "badlog").await?,
            c.head,
            "the head of a session with a corrupt checkpoint"
        );
        Ok(())
    })
    .await
}

/// A store that sends each call to the next of several stores in turn:
/// for checking that several handles on the same data (e.g. two
/// `FileStore`s on one directory, as two processes would have) behave as
/// one store.
#[derive(Debug)]
pub struct RoundRobin<S> {
    stores: Vec<S>,
    next: std::sync::atomic::AtomicUsize,
}

impl<S> RoundRobin<S> {
    /// Takes turns over `stores`, which must not be empty.
    pub fn new(stores: Vec<S>) -> Self {
        assert!(!stores.is_empty(), "RoundRobin needs at least one store");
        Self {
            stores,
            next: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// The stores it takes turns over.
    pub fn stores(&self) -> &[S] {
        &self.stores
    }

    fn pick(&self) -> &S {
        let i = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        &self.stores[i % self.stores.len()]
    }
}

#[async_trait]
impl<S: SessionStore> SessionStore for RoundRobin<S> {
    async fn load(&self, session: &SessionId) -> Result<Option<StoredRun>, StoreError> {
        self.pick().load(session).await
    }
    async fn commit(&self, commit: &Commit) -> Result<(), StoreError> {
        self.pick().commit(commit).await
    }
    async fn checkpoints(
        &self,
        session: &SessionId,
        from_seq: u64,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        self.pick().checkpoints(session, from_seq).await
    }
    async fn sessions(&self) -> Result<Vec<SessionId>, StoreError> {
        self.pick().sessions().await
    }
    async fn sessions_page(
        &self,
        prefix: &str,
        after: Option<&SessionId>,
        limit: usize,
    ) -> Result<Vec<SessionId>, StoreError> {
        self.pick().sessions_page(prefix, after, limit).await
    }
    async fn created_since(
        &self,
        since: Option<u64>,
        limit: usize,
    ) -> Result<Option<Created>, StoreError> {
        self.pick().created_since(since, limit).await
    }
    async fn flush(&self) -> Result<(), StoreError> {
        for store in &self.stores {
            store.flush().await?;
        }
        Ok(())
    }
}
