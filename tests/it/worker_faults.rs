//! Workers under faults: agents sharing a store, sessions that cannot be
//! loaded, a store that fails now and then, leases lost to a database blip,
//! and a store whose clock is not this machine's.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use async_trait::async_trait;
use harness::session::{
    Checkpoint, CheckpointKind, Commit, SessionConfig, SessionPhase, SessionStore, StoreError,
    StoredRun,
};
use harness::worker::{Worker, WorkerReport};
use harness::{Agent, Cx, Harness, HarnessState, RunError, SessionId, StepResult, create_agent};
use harness_stores::{PostgresStore, SledStore};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::HashSet;
use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------
// A store that fails when told to.

/// How commits fail while a blip lasts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Blip {
    /// The backend answers with an error.
    Errors,
    /// The backend does not answer until the blip is over.
    Hangs,
}

/// Wraps a real store; fails some calls on purpose.
#[derive(Debug)]
struct Faulty {
    inner: Arc<dyn SessionStore>,
    /// Sessions whose log cannot be read (a backend error each time).
    unreachable: Mutex<HashSet<SessionId>>,
    /// How many `runnable` calls still fail.
    runnable_failures: AtomicU32,
    /// Commits fail until then.
    blip_until: Mutex<Option<(Instant, Blip)>>,
    /// The store's clock minus this machine's, in ms.
    skew_ms: AtomicI64,
}

impl Faulty {
    fn new(inner: Arc<dyn SessionStore>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            unreachable: Mutex::default(),
            runnable_failures: AtomicU32::new(0),
            blip_until: Mutex::new(None),
            skew_ms: AtomicI64::new(0),
        })
    }

    fn blip(&self, length: Duration, kind: Blip) {
        *self.blip_until.lock().unwrap() = Some((Instant::now() + length, kind));
    }
}

#[async_trait]
impl SessionStore for Faulty {
    async fn load(&self, session: &SessionId) -> Result<Option<StoredRun>, StoreError> {
        self.inner.load(session).await
    }
    async fn commit(&self, commit: &Commit) -> Result<(), StoreError> {
        let blip = *self.blip_until.lock().unwrap();
        if let Some((until, kind)) = blip
            && Instant::now() < until
        {
            match kind {
                Blip::Errors => return Err(StoreError::backend("connection reset by peer")),
                // It answers when the blip is over.
                Blip::Hangs => tokio::time::sleep_until(until.into()).await,
            }
        }
        self.inner.commit(commit).await
    }
    async fn checkpoints(
        &self,
        session: &SessionId,
        from_seq: u64,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        if self.unreachable.lock().unwrap().contains(session) {
            return Err(StoreError::backend("the replica holding this log is down"));
        }
        self.inner.checkpoints(session, from_seq).await
    }
    async fn sessions(&self) -> Result<Vec<SessionId>, StoreError> {
        self.inner.sessions().await
    }
    async fn flush(&self) -> Result<(), StoreError> {
        self.inner.flush().await
    }
    async fn runnable(
        &self,
        agent: &str,
        now: u64,
        limit: usize,
    ) -> Result<Vec<SessionId>, StoreError> {
        let failing = self
            .runnable_failures
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if failing {
            return Err(StoreError::backend("too many connections"));
        }
        self.inner.runnable(agent, now, limit).await
    }
    fn now(&self) -> u64 {
        self.inner
            .now()
            .saturating_add_signed(self.skew_ms.load(Ordering::SeqCst))
    }
}

// ---------------------------------------------------------------------------
// Two agents.

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Job {
    #[field(reduce = append)]
    done: Vec<String>,
}

async fn work(s: Arc<Job>) -> StepResult<JobUpdate> {
    Ok(JobUpdate::new().done(vec![format!("step {}", s.done.len() + 1)]))
}

fn jobs(store: Arc<dyn SessionStore>, lease: Duration) -> Agent<Job> {
    let h = Harness::<Job>::builder()
        .step("work")
        .run(work)
        .route(|s: &Job| if s.done.len() < 3 { "again" } else { "done" })
        .on("again")
        .to("work")
        .on("done")
        .end()
        .start("work")
        .store(store)
        .session_config(SessionConfig {
            lease_ttl: lease,
            ..SessionConfig::default()
        })
        .build()
        .unwrap();
    create_agent("jobs", &h)
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Note {
    #[field(reduce = append)]
    lines: Vec<String>,
}

async fn write(_: Arc<Note>) -> StepResult<NoteUpdate> {
    Ok(NoteUpdate::new().lines(vec!["written".into()]))
}

fn notes(store: Arc<dyn SessionStore>) -> Agent<Note> {
    let h = Harness::<Note>::builder()
        .step("write")
        .run(write)
        .end()
        .start("write")
        .store(store)
        .build()
        .unwrap();
    create_agent("notes", &h)
}

/// Runs `worker` until every session in `sessions` has left the running
/// phase.
async fn until_settled<S: HarnessState, C: harness::Context>(
    worker: Worker<S, C>,
    agent: Agent<S, C>,
    sessions: Vec<SessionId>,
) -> WorkerReport {
    let settled = async move {
        loop {
            let mut running = 0;
            for s in &sessions {
                if agent.session(s).await.unwrap().phase == SessionPhase::Running {
                    running += 1;
                }
            }
            if running == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(120), worker.run_until(settled))
        .await
        .expect("the workers settle every session")
        .unwrap()
}

/// Rewrites `session`'s head with `change`, as a corrupting writer would.
async fn tamper(
    store: &dyn SessionStore,
    session: &SessionId,
    change: impl FnOnce(&mut StoredRun, &mut Vec<Checkpoint>),
) {
    let head = store.load(session).await.unwrap().unwrap();
    let mut next = head.clone();
    next.version += 1;
    let mut append = Vec::new();
    change(&mut next, &mut append);
    store
        .commit(&Commit {
            head: next,
            expected_version: Some(head.version),
            append,
            remove: vec![],
            durable: true,
        })
        .await
        .unwrap();
}

/// Two agents share `store`; some of one agent's sessions cannot be loaded.
async fn two_agents_and_unreadable_sessions(store: Arc<dyn SessionStore>) {
    let faulty = Faulty::new(store);
    let dyn_store: Arc<dyn SessionStore> = faulty.clone();
    let jobs = jobs(dyn_store.clone(), Duration::from_secs(30));
    let notes = notes(dyn_store.clone());
    let mut good_jobs = Vec::new();
    for _ in 0..6 {
        good_jobs.push(jobs.submit(Job { done: vec![] }).await.unwrap());
    }
    let mut good_notes = Vec::new();
    for _ in 0..4 {
        good_notes.push(notes.submit(Note { lines: vec![] }).await.unwrap());
    }
    // Sessions of `jobs` that cannot be run, each in its own way.
    let wrong_shape = jobs.submit(Job { done: vec![] }).await.unwrap();
    tamper(&*dyn_store, &wrong_shape, |head, append| {
        head.steps += 1;
        head.last_seq += 1;
        append.push(Checkpoint {
            seq: head.last_seq,
            index: head.steps,
            step: "work".into(),
            time: head.updated_at,
            kind: CheckpointKind::Update(json!({"done": 42})),
        });
    })
    .await;
    let renamed_step = jobs.submit(Job { done: vec![] }).await.unwrap();
    tamper(&*dyn_store, &renamed_step, |head, _| {
        head.next_step = Some("a-step-that-was-renamed".into());
    })
    .await;
    let old_schema = jobs.submit(Job { done: vec![] }).await.unwrap();
    tamper(&*dyn_store, &old_schema, |head, append| {
        head.last_seq += 1;
        head.snapshot_seq = head.last_seq;
        append.push(Checkpoint {
            seq: head.last_seq,
            index: 0,
            step: "$start".into(),
            time: head.updated_at,
            kind: CheckpointKind::Snapshot(json!({"done": "one string, not a list"})),
        });
    })
    .await;
    let unreachable = jobs.submit(Job { done: vec![] }).await.unwrap();
    faulty
        .unreachable
        .lock()
        .unwrap()
        .insert(unreachable.clone());
    // The store also fails to list sessions now and then.
    faulty.runnable_failures.store(3, Ordering::SeqCst);

    let all_jobs: Vec<SessionId> = good_jobs
        .iter()
        .chain([&wrong_shape, &renamed_step, &old_schema, &unreachable])
        .cloned()
        .collect();
    let worker = |agent: &Agent<Job>| {
        Worker::new(agent.clone())
            .poll_interval(Duration::from_millis(5))
            .max_backoff(Duration::from_millis(40))
            .max_attempts(3)
            .quarantine_after(Duration::from_millis(100))
    };
    let (a, b, n) = tokio::join!(
        until_settled(worker(&jobs), jobs.clone(), all_jobs.clone()),
        until_settled(worker(&jobs), jobs.clone(), all_jobs.clone()),
        until_settled(
            Worker::new(notes.clone()).poll_interval(Duration::from_millis(5)),
            notes.clone(),
            good_notes.clone(),
        ),
    );

    for s in &good_jobs {
        let state = jobs.state_at(s, None).await.unwrap();
        assert_eq!(state.done, ["step 1", "step 2", "step 3"], "job {s}");
    }
    for s in &good_notes {
        assert_eq!(notes.state_at(s, None).await.unwrap().lines, ["written"]);
    }
    let reason = |s: &SessionId| {
        let jobs = jobs.clone();
        let s = s.clone();
        async move {
            match jobs.session(&s).await.unwrap().phase {
                SessionPhase::Failed { error } => error,
                other => panic!("session {s} should be quarantined, is {other:?}"),
            }
        }
    };
    for (session, why) in [
        (&wrong_shape, "checkpoint 1"),
        (&renamed_step, "a-step-that-was-renamed"),
        (&old_schema, "checkpoint 1"),
        (&unreachable, "the replica holding this log is down"),
    ] {
        let error = reason(session).await;
        assert!(error.starts_with("quarantined by a worker"), "{error}");
        assert!(error.contains(why), "{session}: {error} should say {why:?}");
    }
    assert!(
        reason(&unreachable)
            .await
            .contains(" times in a row, over ")
    );
    let jobs_reports = [&a, &b];
    let sum = |f: fn(&WorkerReport) -> u64| jobs_reports.iter().map(|r| f(r)).sum::<u64>();
    assert_eq!(sum(|r| r.completed), 6, "{a:?} {b:?}");
    assert_eq!(sum(|r| r.quarantined), 4, "{a:?} {b:?}");
    assert!(sum(|r| r.retries) >= 2, "{a:?} {b:?}");
    assert_eq!(
        a.store_errors + b.store_errors + n.store_errors,
        3,
        "{a:?} {b:?} {n:?}"
    );
    // The notes worker saw its own sessions only.
    assert_eq!((n.runs, n.completed), (4, 4), "{n:?}");
    assert_eq!((n.lost_races, n.quarantined, n.retries), (0, 0, 0), "{n:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sled_two_agents_share_a_store_and_unreadable_sessions_are_quarantined() {
    let store: Arc<dyn SessionStore> = Arc::new(SledStore::temporary().unwrap());
    two_agents_and_unreadable_sessions(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_two_agents_share_a_store_and_unreadable_sessions_are_quarantined() {
    let url = std::env::var("HARNESS_TEST_POSTGRES_URL")
        .expect("HARNESS_TEST_POSTGRES_URL: run the suite with ./scripts/test");
    let schema = format!("t_quarantine_{}", &SessionId::random().as_str()[..8]);
    // A session a worker fails to take stays claimed (hidden) for the claim
    // time: short, so that the retries of the unreachable one come quickly.
    let options = harness_stores::PostgresOptions::default()
        .schema(schema)
        .claim_ttl(Duration::from_millis(200));
    let store: Arc<dyn SessionStore> =
        Arc::new(PostgresStore::connect_with(&url, options).await.unwrap());
    two_agents_and_unreadable_sessions(store).await;
}

// ---------------------------------------------------------------------------
// Leases.

/// A step that runs `length` and counts how often it starts and finishes.
#[derive(Debug, Default)]
struct Effects {
    started: AtomicU32,
    finished: AtomicU32,
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Slow {
    #[field(reduce = add)]
    steps: u32,
}

#[derive(harness::Context)]
struct SlowSlots {
    #[slot(fixed)]
    effects: Arc<Effects>,
    #[slot(fixed)]
    length: Duration,
}

async fn slow(cx: Cx<SlowSlots>) -> StepResult<SlowUpdate> {
    cx.effects.started.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(cx.length).await;
    // The side effect: only a step that was not cancelled gets here.
    cx.effects.finished.fetch_add(1, Ordering::SeqCst);
    Ok(SlowUpdate::new().steps(1))
}

fn slow_agent(
    store: Arc<dyn SessionStore>,
    effects: Arc<Effects>,
    length: Duration,
    lease: Duration,
) -> Agent<Slow, SlowSlots> {
    let h = Harness::<Slow, SlowSlots>::builder_with(SlowSlotsFixed { effects, length })
        .step("slow")
        .run(slow)
        .end()
        .start("slow")
        .store(store)
        .session_config(SessionConfig {
            lease_ttl: lease,
            ..SessionConfig::default()
        })
        .build()
        .unwrap();
    create_agent("slow", &h)
}

/// A run of the slow step on `store`, started, its step begun.
struct Started {
    agent: Agent<Slow, SlowSlots>,
    effects: Arc<Effects>,
    session: SessionId,
    driving: tokio::task::JoinHandle<Result<harness::Outcome<Slow>, RunError>>,
}

async fn start_slow(store: Arc<dyn SessionStore>, length: Duration, lease: Duration) -> Started {
    let effects = Arc::new(Effects::default());
    let agent = slow_agent(store, effects.clone(), length, lease);
    let run = agent.run(Slow { steps: 0 });
    let session = run.session_id().clone();
    let driving = tokio::spawn(run);
    while effects.started.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Started {
        agent,
        effects,
        session,
        driving,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_blip_shorter_than_the_lease_does_not_stop_the_step() {
    // Lease 2.4 s, renewed every 800 ms and given up at 2 160 ms; each blip
    // starts 600 ms into the step and ends well before that. A renewal
    // failing at 800 ms is retried at about 880, 1 040, 1 360 and 2 000 ms:
    // the blips end before the 880 or 1 040 ms retry, the 1 360 ms one and
    // the 2 000 ms one (by 400 ms: at a quarter of these times, a blip
    // ending 100 ms before that retry lost it one run in several on a busy
    // machine).
    for (blip, kind) in [
        (Duration::from_millis(240), Blip::Errors),
        (Duration::from_millis(480), Blip::Errors),
        (Duration::from_millis(1_000), Blip::Errors),
        (Duration::from_millis(1_000), Blip::Hangs),
    ] {
        let faulty = Faulty::new(Arc::new(SledStore::temporary().unwrap()));
        let Started {
            agent,
            effects,
            session,
            driving,
        } = start_slow(
            faulty.clone(),
            Duration::from_millis(3_600),
            Duration::from_millis(2_400),
        )
        .await;
        // A worker stands by, ready to take the session should its lease
        // lapse.
        let standby = {
            let agent = agent.clone();
            tokio::spawn(async move {
                Worker::new(agent)
                    .poll_interval(Duration::from_millis(10))
                    .run_until(std::future::pending())
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(600)).await;
        faulty.blip(blip, kind);
        let out = driving.await.unwrap().unwrap_or_else(|e| {
            panic!("a {kind:?} blip of {blip:?} stopped the run: {e}");
        });
        standby.abort();
        assert_eq!(out.state.steps, 1);
        // The step ran once: the lease never lapsed.
        assert_eq!(
            effects.started.load(Ordering::SeqCst),
            1,
            "{kind:?} {blip:?}"
        );
        assert_eq!(effects.finished.load(Ordering::SeqCst), 1);
        let head = faulty.load(&session).await.unwrap().unwrap();
        assert!(matches!(head.phase, SessionPhase::Completed { .. }));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_cancels_the_step_before_it_commits_and_a_worker_finishes_it() {
    for kind in [Blip::Errors, Blip::Hangs] {
        let faulty = Faulty::new(Arc::new(SledStore::temporary().unwrap()));
        let Started {
            agent,
            effects,
            session,
            driving,
        } = start_slow(
            faulty.clone(),
            Duration::from_millis(1_500),
            Duration::from_millis(300),
        )
        .await;
        // The database is gone for longer than the lease.
        faulty.blip(Duration::from_millis(800), kind);
        match driving.await.unwrap() {
            Err(RunError::LeaseLost { session: s, reason }) => {
                assert_eq!(s, session);
                assert!(reason.contains("about to expire"), "{kind:?}: {reason}");
            }
            other => panic!("{kind:?}: expected LeaseLost, got {other:?}"),
        }
        // Cancelled before its side effect, and nothing committed.
        assert_eq!(effects.finished.load(Ordering::SeqCst), 0, "{kind:?}");
        tokio::time::sleep(Duration::from_millis(900)).await;
        let head = faulty.load(&session).await.unwrap().unwrap();
        assert_eq!((head.phase.clone(), head.steps), (SessionPhase::Running, 0));

        // Once the store is back, a worker takes the session over.
        let report = until_settled(
            Worker::new(agent.clone()).poll_interval(Duration::from_millis(10)),
            agent.clone(),
            vec![session.clone()],
        )
        .await;
        assert_eq!(report.completed, 1, "{kind:?}: {report:?}");
        assert_eq!(agent.state_at(&session, None).await.unwrap().steps, 1);
        assert_eq!(effects.finished.load(Ordering::SeqCst), 1, "{kind:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_session_is_taken_over_stops_at_once() {
    let store: Arc<dyn SessionStore> = Arc::new(SledStore::temporary().unwrap());
    let Started {
        agent: _,
        effects,
        session,
        driving,
    } = start_slow(
        store.clone(),
        Duration::from_millis(2_000),
        Duration::from_millis(300),
    )
    .await;
    // Another owner writes the head (as a worker judging the lease expired
    // by a wrong clock would).
    tamper(&*store, &session, |head, _| {
        head.lease = Some(harness::session::Lease {
            owner: "another-worker".into(),
            expires_at: u64::MAX,
        });
    })
    .await;
    match driving.await.unwrap() {
        Err(RunError::LeaseLost { reason, .. }) => {
            assert!(reason.contains("took the session over"), "{reason}");
        }
        other => panic!("expected LeaseLost, got {other:?}"),
    }
    assert_eq!(effects.finished.load(Ordering::SeqCst), 0);
    let head = store.load(&session).await.unwrap().unwrap();
    assert_eq!(head.lease.unwrap().owner, "another-worker");
    assert_eq!(head.steps, 0);
}

#[tokio::test]
async fn leases_are_judged_by_the_stores_clock_not_this_machines() {
    let now = harness::session::now_millis();
    // (the store's clock ahead of this machine's, a lease ending in ms from
    // now by this machine's clock, whether a worker may take it)
    for (skew, ends_in, takes) in [
        (3_600_000, 600_000, true),
        (3_600_000, 7_200_000, false),
        (-3_600_000, -600_000, false),
        (-3_600_000, -7_200_000, true),
        (0, 1_000, false),
        (0, -1, true),
    ] {
        let faulty = Faulty::new(Arc::new(SledStore::temporary().unwrap()));
        faulty.skew_ms.store(skew, Ordering::SeqCst);
        let agent = jobs(faulty.clone(), Duration::from_secs(30));
        let session = agent.submit(Job { done: vec![] }).await.unwrap();
        tamper(&*faulty, &session, |head, _| {
            head.lease = Some(harness::session::Lease {
                owner: "a-worker-elsewhere".into(),
                expires_at: now.saturating_add_signed(ends_in),
            });
        })
        .await;
        let mut report = WorkerReport::default();
        let taken = Worker::new(agent.clone())
            .run_once(&mut report)
            .await
            .unwrap();
        assert_eq!(
            taken == 1,
            takes,
            "skew {skew} ms, lease ending in {ends_in} ms: {report:?}"
        );
        if takes {
            // Its new lease is on the store's clock too.
            let head = agent.session(&session).await.unwrap();
            assert!(matches!(head.phase, SessionPhase::Completed { .. }));
        }
        // A direct recover agrees with the worker.
        if !takes {
            assert!(agent.recover(&session).await.is_err());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_queued_behind_a_running_one_does_not_break_its_lease() {
    let store: Arc<dyn SessionStore> = Arc::new(SledStore::temporary().unwrap());
    let Started {
        agent,
        effects,
        session,
        driving,
    } = start_slow(
        store.clone(),
        Duration::from_secs(3),
        Duration::from_secs(5),
    )
    .await;
    // Written into the head while the running run holds it (and renews it):
    // the step takes 3 s, so that a loaded machine still submits mid-step.
    let queued = agent
        .submit_input(&session, SlowUpdate::new(), harness::Busy::Queue)
        .await
        .unwrap();
    assert_eq!(queued, harness::Submitted::Queued { position: 1 });
    let out = driving.await.unwrap().unwrap();
    assert_eq!(out.state.steps, 1);
    // The queued run starts once the first completes; a worker runs it.
    let report = until_settled(
        Worker::new(agent.clone()).poll_interval(Duration::from_millis(5)),
        agent.clone(),
        vec![session.clone()],
    )
    .await;
    assert_eq!(report.completed, 1, "{report:?}");
    assert_eq!(agent.state_at(&session, None).await.unwrap().steps, 2);
    assert_eq!(effects.finished.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_worker_with_the_longest_backoff_keeps_going_without_overflow() {
    let faulty = Faulty::new(Arc::new(SledStore::temporary().unwrap()));
    faulty.runnable_failures.store(2, Ordering::SeqCst);
    let agent = jobs(faulty.clone(), Duration::from_secs(30));
    let session = agent.submit(Job { done: vec![] }).await.unwrap();
    faulty.unreachable.lock().unwrap().insert(session.clone());
    let worker = Worker::new(agent.clone())
        .poll_interval(Duration::MAX)
        .max_backoff(Duration::MAX)
        .max_attempts(u32::MAX);
    let mut report = WorkerReport::default();
    for _ in 0..2 {
        assert!(worker.run_once(&mut report).await.is_err());
    }
    // A failure to take the session backs off as far as the clock goes.
    assert_eq!(worker.run_once(&mut report).await.unwrap(), 0);
    assert_eq!(worker.run_once(&mut report).await.unwrap(), 0);
    assert_eq!(report.retries, 1, "{report:?}");
    assert_eq!(
        agent.session(&session).await.unwrap().phase,
        SessionPhase::Running
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_the_run_in_progress_finish() {
    let store: Arc<dyn SessionStore> = Arc::new(SledStore::temporary().unwrap());
    let effects = Arc::new(Effects::default());
    let agent = slow_agent(
        store,
        effects.clone(),
        Duration::from_millis(300),
        Duration::from_secs(30),
    );
    let session = agent.submit(Slow { steps: 0 }).await.unwrap();
    let started = {
        let effects = effects.clone();
        async move {
            while effects.started.load(Ordering::SeqCst) == 0 {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    };
    // Shutdown is asked for while the step runs.
    let report = Worker::new(agent.clone())
        .poll_interval(Duration::from_millis(5))
        .run_until(started)
        .await
        .unwrap();
    assert_eq!((report.runs, report.completed), (1, 1), "{report:?}");
    assert_eq!(effects.finished.load(Ordering::SeqCst), 1);
    let head = agent.session(&session).await.unwrap();
    assert!(matches!(head.phase, SessionPhase::Completed { .. }));
}

// ---------------------------------------------------------------------------
// Sessions that fail, or panic, under workers.

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Chore {
    /// 0: waits at the gate, then succeeds; 1: fails; 2: panics.
    kind: u32,
    #[field(reduce = add)]
    done: u32,
}

/// What the chores' step saw: calls of each kind, and the gate the
/// waiting ones wait at.
#[derive(Default)]
struct Chores {
    calls: [AtomicU32; 3],
    gate: tokio::sync::Notify,
    waiting: AtomicU32,
}

fn chores(store: Arc<dyn SessionStore>, seen: Arc<Chores>) -> Agent<Chore> {
    let h = Harness::<Chore>::builder()
        .step("chore")
        .run(move |s: Arc<Chore>| {
            let seen = Arc::clone(&seen);
            async move {
                seen.calls[s.kind as usize].fetch_add(1, Ordering::SeqCst);
                match s.kind {
                    0 => {
                        let open = seen.gate.notified();
                        seen.waiting.fetch_add(1, Ordering::SeqCst);
                        open.await;
                    }
                    1 => return Err(harness::StepError::msg("this chore fails")),
                    _ => panic!("this chore panics"),
                }
                Ok(ChoreUpdate::new().done(1))
            }
        })
        .end()
        .start("chore")
        .store(store)
        .build()
        .unwrap();
    create_agent("chores", &h)
}

/// A worker lists two runnable sessions and runs the first; meanwhile
/// another worker takes the second, which fails. The first worker, reaching
/// it, finds it failed and leaves it: a worker takes only running sessions
/// (before, it recovered the failed one and ran its failing step again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_that_failed_after_it_was_listed_is_not_run_again() {
    for store in [
        Arc::new(SledStore::temporary().unwrap()) as Arc<dyn SessionStore>,
        Arc::new(harness_stores::MemoryStore::new()),
    ] {
        let seen = Arc::new(Chores::default());
        let agent = chores(store, Arc::clone(&seen));
        let waits = agent.submit(Chore { kind: 0, done: 0 }).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let fails = agent.submit(Chore { kind: 1, done: 0 }).await.unwrap();
        let first = {
            let agent = agent.clone();
            tokio::spawn(async move {
                let mut report = WorkerReport::default();
                let worker = Worker::new(agent).batch(2);
                worker.run_once(&mut report).await.unwrap();
                report
            })
        };
        while seen.waiting.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let mut second = WorkerReport::default();
        Worker::new(agent.clone())
            .run_once(&mut second)
            .await
            .unwrap();
        assert_eq!((second.runs, second.failed), (1, 1), "{second:?}");
        assert!(matches!(
            agent.session(&fails).await.unwrap().phase,
            SessionPhase::Failed { .. }
        ));
        seen.gate.notify_one();
        let first = first.await.unwrap();
        assert_eq!((first.runs, first.completed), (1, 1), "{first:?}");
        assert_eq!(first.lost_races, 1, "{first:?}");
        assert_eq!(
            seen.calls[1].load(Ordering::SeqCst),
            1,
            "the failing step ran again"
        );
        assert!(matches!(
            agent.session(&waits).await.unwrap().phase,
            SessionPhase::Completed { .. }
        ));
    }
}

/// A session whose step panics fails as one whose step errs: the worker
/// lives on, reports it failed and takes the next session (before, the
/// panic took the worker down, and the session, still running, took down
/// every worker that picked it up after its lease).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_step_panics_fails_and_the_worker_goes_on() {
    let store: Arc<dyn SessionStore> = Arc::new(SledStore::temporary().unwrap());
    let seen = Arc::new(Chores::default());
    let agent = chores(store, Arc::clone(&seen));
    let panics = agent.submit(Chore { kind: 2, done: 0 }).await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let fails = agent.submit(Chore { kind: 1, done: 0 }).await.unwrap();
    let worker = Worker::new(agent.clone()).poll_interval(Duration::from_millis(5));
    let report = until_settled(worker, agent.clone(), vec![panics.clone(), fails]).await;
    assert_eq!((report.runs, report.failed), (2, 2), "{report:?}");
    assert_eq!(seen.calls[2].load(Ordering::SeqCst), 1);
    let SessionPhase::Failed { error } = agent.session(&panics).await.unwrap().phase else {
        panic!("the panicking session did not fail");
    };
    assert!(
        error.contains("the step panicked: this chore panics"),
        "{error}"
    );
}

/// A store that cannot hand a session over for a while (a failover, a
/// blip) retries it with backoff, many more times than `max_attempts`, and
/// never quarantines it while the errors last less than `quarantine_after`:
/// once the store is back, the session completes (before, five failures in
/// a row, 1.5 s, set a healthy session aside for good).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_store_outage_quarantines_nothing() {
    for (outage, quarantine_after) in [
        (Duration::from_millis(300), None),
        (Duration::from_millis(300), Some(Duration::from_secs(5))),
        (Duration::from_millis(600), Some(Duration::from_secs(2))),
    ] {
        let faulty = Faulty::new(Arc::new(SledStore::temporary().unwrap()));
        let agent = jobs(faulty.clone(), Duration::from_secs(30));
        let session = agent.submit(Job { done: vec![] }).await.unwrap();
        faulty.unreachable.lock().unwrap().insert(session.clone());
        let back = {
            let faulty = faulty.clone();
            tokio::spawn(async move {
                tokio::time::sleep(outage).await;
                faulty.unreachable.lock().unwrap().clear();
            })
        };
        let worker = Worker::new(agent.clone())
            .poll_interval(Duration::from_millis(5))
            .max_backoff(Duration::from_millis(20))
            .max_attempts(3);
        let worker = match quarantine_after {
            Some(after) => worker.quarantine_after(after),
            None => worker,
        };
        let report = until_settled(worker, agent.clone(), vec![session.clone()]).await;
        back.await.unwrap();
        let case = format!("an outage of {outage:?}, quarantine after {quarantine_after:?}");
        assert_eq!(report.quarantined, 0, "{case}: {report:?}");
        assert!(report.retries > 3, "{case}: {report:?}");
        assert_eq!(
            (report.runs, report.completed),
            (1, 1),
            "{case}: {report:?}"
        );
        let head = agent.session(&session).await.unwrap();
        assert!(
            matches!(head.phase, SessionPhase::Completed { .. }),
            "{case}: {:?}",
            head.phase
        );
    }
}

/// Failures of one worker to take a session are "in a row" only while
/// nobody moves it on: after another worker ran it (more steps, another
/// run), a new failure starts a new row, so blips hours apart never add up
/// to a quarantine; and a row that does go on still quarantines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_before_another_worker_ran_the_session_do_not_count_towards_a_quarantine() {
    let faulty = Faulty::new(Arc::new(SledStore::temporary().unwrap()));
    let agent = notes(faulty.clone());
    let tuned = || {
        Worker::new(agent.clone())
            .poll_interval(Duration::from_millis(5))
            .max_backoff(Duration::from_millis(10))
            .max_attempts(3)
            .quarantine_after(Duration::from_millis(200))
    };
    let (a, b) = (tuned(), tuned());
    let session = agent.submit(Note { lines: vec![] }).await.unwrap();
    let blip = |on: bool| {
        let mut unreachable = faulty.unreachable.lock().unwrap();
        if on {
            unreachable.insert(session.clone());
        } else {
            unreachable.remove(&session);
        }
    };
    let mut ra = WorkerReport::default();
    // Each round: A fails to take it twice (under max_attempts), then B
    // runs it; later a new input comes and A fails once more.
    for round in 0..3 {
        blip(true);
        for _ in 0..2 {
            a.run_once(&mut ra).await.unwrap();
            tokio::time::sleep(Duration::from_millis(15)).await;
        }
        blip(false);
        let mut rb = WorkerReport::default();
        let started = Instant::now();
        while rb.completed == 0 {
            let head = agent.session(&session).await.unwrap();
            assert!(
                !matches!(head.phase, SessionPhase::Failed { .. }),
                "round {round}: quarantined after fewer than 3 failures in a row: {:?} {ra:?}",
                head.phase
            );
            assert!(started.elapsed() < Duration::from_secs(30), "{rb:?}");
            b.run_once(&mut rb).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
        agent
            .submit_input(
                &session,
                NoteUpdate::new().lines(vec![format!("round {round}")]),
                harness::session::Busy::Reject,
            )
            .await
            .unwrap();
    }
    blip(true);
    a.run_once(&mut ra).await.unwrap();
    let head = agent.session(&session).await.unwrap();
    assert!(
        matches!(head.phase, SessionPhase::Running),
        "one failure after another worker's run quarantines nothing: {:?} {ra:?}",
        head.phase
    );
    assert_eq!(ra.quarantined, 0, "{ra:?}");
    // A row nobody breaks: quarantined once it is long enough.
    let started = Instant::now();
    while ra.quarantined == 0 {
        assert!(started.elapsed() < Duration::from_secs(30), "{ra:?}");
        a.run_once(&mut ra).await.unwrap();
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    let head = agent.session(&session).await.unwrap();
    assert!(
        matches!(&head.phase, SessionPhase::Failed { error } if error.contains("in a row")),
        "{:?}",
        head.phase
    );
}

/// Shutdown stops a worker between the sessions of a batch: it finishes
/// the run in progress and takes no other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_takes_no_other_session_of_a_batch() {
    let store: Arc<dyn SessionStore> = Arc::new(SledStore::temporary().unwrap());
    let effects = Arc::new(Effects::default());
    let agent = slow_agent(
        store,
        effects.clone(),
        Duration::from_millis(300),
        Duration::from_secs(30),
    );
    for _ in 0..5 {
        agent.submit(Slow { steps: 0 }).await.unwrap();
    }
    let started = {
        let effects = effects.clone();
        async move {
            while effects.started.load(Ordering::SeqCst) == 0 {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    };
    let report = Worker::new(agent.clone())
        .poll_interval(Duration::from_millis(5))
        .batch(5)
        .run_until(started)
        .await
        .unwrap();
    assert_eq!((report.runs, report.completed), (1, 1), "{report:?}");
    assert_eq!(effects.finished.load(Ordering::SeqCst), 1);
}
