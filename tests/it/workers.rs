//! Workers on a shared store: every submitted run completes exactly once,
//! busy sessions reject or queue, and a dead worker's session is taken over.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use harness::session::{SessionConfig, SessionError, SessionPhase, SessionStore};
use harness::worker::{Worker, WorkerReport};
use harness::{
    Agent, Busy, Harness, HarnessState, Signal, StepResult, Stopping, Submitted, create_agent,
};
use harness_stores::MemoryStore;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Job {
    #[field(reduce = append)]
    done: Vec<String>,
    #[field(reduce = add)]
    steps: u32,
    #[field(default = 3)]
    per_run: u32,
}

async fn work(s: Arc<Job>) -> StepResult<JobUpdate> {
    tokio::time::sleep(Duration::from_millis(1)).await;
    if s.done.last().is_some_and(|d| d == "boom") {
        return Err(harness::StepError::msg("the input says boom"));
    }
    Ok(JobUpdate::new()
        .steps(1)
        .done(vec![format!("step {}", s.steps + 1)]))
}

/// Another step until the run has made `per_run` steps.
fn again_or_done(s: &Job) -> &'static str {
    if s.steps.is_multiple_of(s.per_run) {
        "done"
    } else {
        "again"
    }
}

fn agent(store: Arc<MemoryStore>, lease: Duration) -> Agent<Job> {
    let h = Harness::<Job>::builder()
        .step("work")
        .run(work)
        .route(again_or_done)
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

/// The agent `name` whose runs make one step of `work` on `store`.
fn one_step_agent(name: &str, store: Arc<dyn SessionStore>) -> Agent<Job> {
    let h = Harness::<Job>::builder()
        .step("work")
        .run(work)
        .end()
        .start("work")
        .store(store)
        .build()
        .unwrap();
    create_agent(name, &h)
}

fn job() -> Job {
    Job {
        done: vec![],
        steps: 0,
        per_run: 3,
    }
}

async fn drain(workers: usize, agent: &Agent<Job>, until_done: usize) -> Vec<WorkerReport> {
    let mut tasks = Vec::new();
    for _ in 0..workers {
        let agent = agent.clone();
        tasks.push(tokio::spawn(async move {
            let worker = Worker::new(agent.clone()).poll_interval(Duration::from_millis(5));
            let finished = async {
                loop {
                    let heads = agent.sessions().await.unwrap();
                    let n = heads
                        .iter()
                        .filter(|h| matches!(h.phase, SessionPhase::Completed { .. }))
                        .count();
                    if n >= until_done {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            };
            worker.run_until(finished).await.unwrap()
        }));
    }
    let mut reports = Vec::new();
    for t in tasks {
        reports.push(t.await.unwrap());
    }
    reports
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_of_workers_runs_every_submitted_session_exactly_once() {
    let store = Arc::new(MemoryStore::new());
    let agent = agent(store.clone(), Duration::from_secs(30));
    let mut sessions = Vec::new();
    for _ in 0..30 {
        sessions.push(agent.submit(job()).await.unwrap());
    }
    let reports = drain(3, &agent, 30).await;
    let runs: u64 = reports.iter().map(|r| r.runs).sum();
    let completed: u64 = reports.iter().map(|r| r.completed).sum();
    assert_eq!((runs, completed), (30, 30), "{reports:?}");
    for s in &sessions {
        let state = agent.state_at(s, None).await.unwrap();
        assert_eq!(state.done, ["step 1", "step 2", "step 3"], "session {s}");
    }
}

#[tokio::test]
async fn a_second_run_on_a_busy_session_is_rejected_or_queued() {
    let store = Arc::new(MemoryStore::new());
    let agent = agent(store.clone(), Duration::from_secs(30));
    let session = agent.submit(job()).await.unwrap();
    // Runnable but not yet taken: busy.
    let err = agent
        .submit_input(&session, JobUpdate::new(), Busy::Reject)
        .await
        .unwrap_err();
    assert!(matches!(err, SessionError::InFlight(_)), "{err}");
    let queued = agent
        .submit_input(
            &session,
            JobUpdate::new().done(vec!["second input".into()]),
            Busy::Queue,
        )
        .await
        .unwrap();
    assert_eq!(queued, Submitted::Queued { position: 1 });

    drain(1, &agent, 1).await;
    let state = agent.state_at(&session, None).await.unwrap();
    assert_eq!(
        state.done,
        [
            "step 1",
            "step 2",
            "step 3",
            "second input",
            "step 4",
            "step 5",
            "step 6"
        ],
        "the queued run started after the first completed"
    );
    // A completed session takes a new run at once.
    let again = agent
        .submit_input(
            &session,
            JobUpdate::new().done(vec!["third".into()]),
            Busy::Reject,
        )
        .await
        .unwrap();
    assert_eq!(again, Submitted::Runnable);
}

/// A run that fails does not strand the runs queued behind it: each
/// starts in turn from the state the one before left, as LangGraph's
/// `enqueue` does.
#[tokio::test]
async fn the_runs_queued_behind_a_failed_run_still_run_in_order() {
    let store = Arc::new(MemoryStore::new());
    let agent = agent(store.clone(), Duration::from_secs(30));
    let session = agent.submit(job()).await.unwrap();
    for (input, position) in [("boom", 1), ("after", 2), ("boom", 3), ("last", 4)] {
        let queued = agent
            .submit_input(
                &session,
                JobUpdate::new().done(vec![input.into()]),
                Busy::Queue,
            )
            .await
            .unwrap();
        assert_eq!(queued, Submitted::Queued { position });
    }
    let reports = tokio::time::timeout(Duration::from_secs(20), drain(1, &agent, 1))
        .await
        .expect("the queued runs ran");
    assert_eq!(
        (reports[0].completed, reports[0].failed),
        (3, 2),
        "{reports:?}"
    );
    let head = agent.session(&session).await.unwrap();
    assert!(head.queued.is_empty());
    let state = agent.state_at(&session, None).await.unwrap();
    assert_eq!(
        state.done,
        [
            "step 1", "step 2", "step 3", "boom", "after", "step 4", "step 5", "step 6", "boom",
            "last", "step 7", "step 8", "step 9"
        ],
    );
}

fn stopped() -> SessionPhase {
    SessionPhase::Completed {
        signal: Signal::STOPPED,
    }
}

/// The head of `session` once its run is no longer running.
async fn settled(agent: &Agent<Job>, session: &harness::SessionId) -> harness::session::StoredRun {
    loop {
        let head = agent.session(session).await.unwrap();
        if head.phase != SessionPhase::Running {
            return head;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// A stop for a session no run holds ends its run at once; the run queued
/// behind it starts; a session that is not running is left as it is.
#[tokio::test]
async fn a_stop_ends_a_run_waiting_for_a_worker_at_once() {
    let store = Arc::new(MemoryStore::new());
    let agent = agent(store.clone(), Duration::from_secs(30));
    let session = agent.submit(job()).await.unwrap();
    agent
        .submit_input(
            &session,
            JobUpdate::new().done(vec!["queued".into()]),
            Busy::Queue,
        )
        .await
        .unwrap();
    assert_eq!(
        agent.stop_session(&session).await.unwrap(),
        Stopping::Stopped
    );
    let head = agent.session(&session).await.unwrap();
    assert_eq!(head.phase, SessionPhase::Running, "the queued run started");
    assert!(head.queued.is_empty());
    // Without a queue it stays stopped, and no worker runs it.
    assert_eq!(
        agent.stop_session(&session).await.unwrap(),
        Stopping::Stopped
    );
    let head = agent.session(&session).await.unwrap();
    assert_eq!(head.phase, stopped());
    let mut report = WorkerReport::default();
    assert_eq!(
        Worker::new(agent.clone())
            .run_once(&mut report)
            .await
            .unwrap(),
        0
    );
    let state = agent.state_at(&session, None).await.unwrap();
    assert_eq!(state.done, ["queued"], "no step ran");
    // Stopped, completed: not running, nothing written.
    let version = head.version;
    assert_eq!(
        agent.stop_session(&session).await.unwrap(),
        Stopping::NotRunning(stopped())
    );
    assert_eq!(agent.session(&session).await.unwrap().version, version);
    // No such session; another agent's.
    let none = harness::SessionId::from("no-such-session");
    assert!(matches!(
        agent.stop_session(&none).await,
        Err(SessionError::NoSession(_))
    ));
    let other = one_step_agent("other jobs", store.clone());
    assert!(other.stop_session(&session).await.is_err());
}

/// A run held by a worker (of another agent handle, as another process
/// would be) stops at its next step boundary when asked through the store;
/// its steps are kept; one whose worker died after the stop was asked is
/// stopped by the worker that takes it over, before it runs a step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_asked_through_the_store_stops_a_workers_run_at_its_next_step() {
    let store = Arc::new(MemoryStore::new());
    let here = agent(store.clone(), Duration::from_secs(30));
    let there = agent(store.clone(), Duration::from_secs(30));
    let session = here
        .submit(Job {
            per_run: 1_000_000,
            ..job()
        })
        .await
        .unwrap();
    let worker = tokio::spawn(async move {
        Worker::new(there)
            .poll_interval(Duration::from_millis(5))
            .run_until(tokio::time::sleep(Duration::from_secs(30)))
            .await
    });
    while here.session(&session).await.unwrap().steps < 5 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let asked = here.stop_session(&session).await.unwrap();
    assert!(matches!(asked, Stopping::Asked { .. }), "{asked:?}");
    let head = settled(&here, &session).await;
    worker.abort();
    assert_eq!(head.phase, stopped());
    assert_eq!(
        (head.stop_requested.clone(), head.lease.clone()),
        (None, None)
    );
    let state = here.state_at(&session, None).await.unwrap();
    let n = state.done.len();
    assert!((5..1_000_000).contains(&n), "{n}");
    let expected: Vec<String> = (1..=n).map(|i| format!("step {i}")).collect();
    assert_eq!(state.done, expected, "every step's update kept, none twice");

    // A worker that dies after the stop was asked: the next one stops the
    // run before its first step.
    let store = Arc::new(MemoryStore::new());
    let here = agent(store.clone(), Duration::from_millis(300));
    let session = here
        .submit(Job {
            per_run: 1_000_000,
            ..job()
        })
        .await
        .unwrap();
    // It runs on a runtime of its own, on one thread; it "dies" when that
    // thread stops for good: nothing of it is dropped (a run dropped in a
    // live process gives its lease up), nothing of it is polled again, its
    // lease is not renewed.
    let (die, dying) = tokio::sync::oneshot::channel::<()>();
    let (dead, died) = tokio::sync::oneshot::channel::<()>();
    {
        let there = agent(store.clone(), Duration::from_millis(300));
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                tokio::spawn(async move {
                    let _ = dying.await;
                    let _ = dead.send(());
                    loop {
                        std::thread::park();
                    }
                });
                Worker::new(there).run_until(std::future::pending()).await
            })
        });
    }
    while here.session(&session).await.unwrap().steps < 3 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let _ = die.send(());
    died.await.unwrap();
    let asked = here.stop_session(&session).await.unwrap();
    assert!(matches!(asked, Stopping::Asked { .. }), "{asked:?}");
    let steps = here.session(&session).await.unwrap().steps;
    let reports = tokio::time::timeout(Duration::from_secs(10), drain(1, &here, 1))
        .await
        .expect("taken over and stopped");
    assert_eq!(reports[0].completed, 1, "{reports:?}");
    let head = here.session(&session).await.unwrap();
    assert_eq!(head.phase, stopped());
    assert_eq!(head.steps, steps, "no step ran after the stop was asked");
}

/// `sessions stop SESSION`, the application binary's command: a run a
/// worker holds is asked and stops at its next step; one waiting for a
/// worker stops at once; a session not running, another agent's, an
/// unknown one and a bad command line are each told apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sessions_command_stops_a_run_wherever_it_runs() {
    use harness::cli::{CommandError, sessions_command};
    let store = Arc::new(MemoryStore::new());
    let here = agent(store.clone(), Duration::from_secs(30));
    let there = agent(store.clone(), Duration::from_secs(30));
    let long = Job {
        per_run: 1_000_000,
        ..job()
    };
    let held = here.submit(long.clone()).await.unwrap();
    let worker = tokio::spawn(async move {
        Worker::new(there)
            .poll_interval(Duration::from_millis(5))
            .run_until(tokio::time::sleep(Duration::from_secs(30)))
            .await
    });
    let owner = loop {
        let head = here.session(&held).await.unwrap();
        if head.steps >= 3 {
            break head.lease.map(|l| l.owner).expect("held by the worker");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    let out = sessions_command(&here, ["stop", held.as_str()], || ())
        .await
        .unwrap();
    assert!(
        out.contains("asked to stop") && out.contains(&owner),
        "{out}"
    );
    let head = settled(&here, &held).await;
    worker.abort();
    assert_eq!(head.phase, stopped());
    let steps = head.steps;
    assert!(steps < 1_000_000, "{steps}");

    // Waiting for a worker: stopped at once, and no worker runs it.
    let waiting = here.submit(long).await.unwrap();
    let out = sessions_command(&here, ["stop", waiting.as_str()], || ())
        .await
        .unwrap();
    assert!(out.contains("stopped (no run held it"), "{out}");
    assert_eq!(here.session(&waiting).await.unwrap().phase, stopped());
    let mut report = WorkerReport::default();
    let ran = Worker::new(here.clone())
        .run_once(&mut report)
        .await
        .unwrap();
    assert_eq!(ran, 0);
    assert_eq!(here.session(&waiting).await.unwrap().steps, 0);

    // Not running: said so, nothing written.
    let version = here.session(&held).await.unwrap().version;
    let out = sessions_command(&here, ["stop", held.as_str()], || ())
        .await
        .unwrap();
    assert!(
        out.contains("not running, nothing to stop") && out.contains("completed with `$stopped`"),
        "{out}"
    );
    assert_eq!(here.session(&held).await.unwrap().version, version);
    assert_eq!(here.session(&held).await.unwrap().steps, steps);

    // Unknown, another agent's, a bad command line.
    match sessions_command(&here, ["stop", "no-such-session"], || ()).await {
        Err(CommandError::Session(SessionError::NoSession(e))) => {
            assert_eq!(e.session.as_str(), "no-such-session")
        }
        other => panic!("expected NoSession, got {other:?}"),
    }
    let other = one_step_agent("other jobs", store.clone());
    let fresh = here.submit(job()).await.unwrap();
    match sessions_command(&other, ["stop", fresh.as_str()], || ()).await {
        Err(CommandError::Session(SessionError::Load(e))) => {
            assert!(e.to_string().contains("belongs to"), "{e}")
        }
        other => panic!("expected a refusal of another agent's session, got {other:?}"),
    }
    assert_eq!(
        here.session(&fresh).await.unwrap().phase,
        SessionPhase::Running,
        "another agent's stop changed nothing"
    );
    for bad in [&["stop"][..], &["stop", "a", "b"]] {
        assert!(matches!(
            sessions_command(&here, bad, || ()).await,
            Err(CommandError::Usage(_))
        ));
    }
}

async fn prepare(_s: Arc<Job>) -> StepResult<JobUpdate> {
    Ok(JobUpdate::new().done(vec!["prepared".into()]))
}

/// A rolling deploy: a worker of the old version cannot load a session the
/// new version wrote (it starts at a step the old one does not have). It
/// backs off from it and never quarantines it; a worker of the new version
/// runs it.
#[tokio::test]
async fn an_old_worker_leaves_a_session_of_a_newer_version_to_a_new_one() {
    let store = Arc::new(MemoryStore::new());
    let old = agent(store.clone(), Duration::from_secs(30));
    let h = Harness::<Job>::builder()
        .step("prepare")
        .run(prepare)
        .next("work")
        .step("work")
        .run(work)
        .route(again_or_done)
        .on("again")
        .to("work")
        .on("done")
        .end()
        .start("prepare")
        .store(store.clone())
        .build()
        .unwrap();
    let new = create_agent("jobs", &h);
    let session = new.submit(job()).await.unwrap();
    let report = Worker::new(old.clone())
        .poll_interval(Duration::from_millis(5))
        .max_backoff(Duration::from_millis(20))
        .max_attempts(2)
        .run_until(tokio::time::sleep(Duration::from_millis(300)))
        .await
        .unwrap();
    assert_eq!((report.runs, report.quarantined), (0, 0), "{report:?}");
    assert!(report.retries >= 2, "it tried, and backed off: {report:?}");
    assert_eq!(
        new.session(&session).await.unwrap().phase,
        SessionPhase::Running
    );
    drain(1, &new, 1).await;
    let state = new.state_at(&session, None).await.unwrap();
    assert_eq!(state.done, ["prepared", "step 1", "step 2", "step 3"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_workers_session_is_finished_by_another_without_repeating_steps() {
    let store = Arc::new(MemoryStore::new());
    let agent = agent(store.clone(), Duration::from_millis(200));
    let session = agent
        .submit(Job {
            per_run: 1_000,
            ..job()
        })
        .await
        .unwrap();
    // The first worker dies mid-run, once it has made a step: its task is
    // aborted (1 000 steps of a millisecond or more: a loaded machine that
    // is late to abort it still finds it mid-run).
    let doomed = {
        let agent = agent.clone();
        tokio::spawn(async move { Worker::new(agent).run_until(std::future::pending()).await })
    };
    while agent.session(&session).await.unwrap().steps == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    doomed.abort();
    let _ = doomed.await;
    let head = agent.session(&session).await.unwrap();
    assert_eq!(head.phase, SessionPhase::Running);
    assert!(
        head.steps > 0 && head.steps < 1_000,
        "died mid-run at {}",
        head.steps
    );

    let reports = drain(2, &agent, 1).await;
    assert_eq!(reports.iter().map(|r| r.completed).sum::<u64>(), 1);
    let state = agent.state_at(&session, None).await.unwrap();
    let expected: Vec<String> = (1..=1_000).map(|i| format!("step {i}")).collect();
    assert_eq!(state.done, expected, "no step lost, none applied twice");
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Review {
    #[field(reduce = append)]
    log: Vec<String>,
}

async fn review_plan(_: Arc<Review>) -> StepResult<ReviewUpdate> {
    Ok(ReviewUpdate::new().log(vec!["plan".into()]))
}

/// Fails in a session's first run, which no input has followed yet.
async fn review_a(s: Arc<Review>) -> StepResult<ReviewUpdate> {
    if !s.log.iter().any(|l| l == "second run") {
        return Err(harness::StepError::msg("branch a fails in the first run"));
    }
    Ok(ReviewUpdate::new().log(vec!["a".into()]))
}

async fn review_b(_: Arc<Review>) -> StepResult<ReviewUpdate> {
    Ok(ReviewUpdate::new().log(vec!["b".into()]))
}

async fn review_publish(_: Arc<Review>) -> StepResult<ReviewUpdate> {
    Ok(ReviewUpdate::new().log(vec!["publish".into()]))
}

/// A run that fails with a fork under way (one branch failed, the other
/// done) ends the fork with it: the next run, queued or submitted after,
/// starts from the state the fork started from, and the session still
/// loads (before, the new run's input in the middle of the fork made it
/// unloadable for good).
#[tokio::test]
async fn a_run_that_fails_in_a_fork_leaves_the_next_run_a_session_that_loads() {
    let store = Arc::new(MemoryStore::new());
    let h = Harness::<Review>::builder()
        .step("plan")
        .run(review_plan)
        .fork(["a", "b"])
        .join("publish")
        .step("a")
        .run(review_a)
        .writes(["log"])
        .next("publish")
        .step("b")
        .run(review_b)
        .writes(["log"])
        .next("publish")
        .step("publish")
        .run(review_publish)
        .end()
        .start("plan")
        .store(store.clone())
        .build()
        .unwrap();
    let agent = create_agent("review", &h);
    let second = || ReviewUpdate::new().log(vec!["second run".into()]);
    let expected = ["plan", "second run", "plan", "a", "b", "publish"];

    // Queued behind the run that fails.
    let queued = agent.submit(Review::default()).await.unwrap();
    agent
        .submit_input(&queued, second(), Busy::Queue)
        .await
        .unwrap();
    let mut report = WorkerReport::default();
    let worker = Worker::new(agent.clone());
    while worker.run_once(&mut report).await.unwrap() > 0 {}
    assert_eq!(
        (report.failed, report.completed, report.quarantined),
        (1, 1, 0),
        "{report:?}"
    );
    assert_eq!(agent.state_at(&queued, None).await.unwrap().log, expected);

    // Submitted after the run failed.
    let later = agent.submit(Review::default()).await.unwrap();
    while worker.run_once(&mut report).await.unwrap() > 0 {}
    assert!(matches!(
        agent.session(&later).await.unwrap().phase,
        SessionPhase::Failed { .. }
    ));
    agent
        .submit_input(&later, second(), Busy::Reject)
        .await
        .unwrap();
    while worker.run_once(&mut report).await.unwrap() > 0 {}
    assert_eq!(agent.state_at(&later, None).await.unwrap().log, expected);
    let head = agent.session(&later).await.unwrap();
    assert!(
        matches!(head.phase, SessionPhase::Completed { .. }),
        "{head:?}"
    );
    assert!(head.branch_journals.is_empty());

    // In this process: a run that fails in the fork, then a new run on
    // its session. The new run starts afresh as the loaded one would,
    // never finishing the old fork's branches in memory.
    let run = agent.run(Review::default());
    let in_process = run.session_id().clone();
    assert!(run.await.is_err(), "branch a fails in the first run");
    let outcome = agent
        .continue_session(&in_process, second())
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!(outcome.state.log, expected);
    assert_eq!(
        agent.state_at(&in_process, None).await.unwrap().log,
        expected
    );
    let head = agent.session(&in_process).await.unwrap();
    assert!(
        matches!(head.phase, SessionPhase::Completed { .. }),
        "{head:?}"
    );
    assert!(head.branch_journals.is_empty());
}

/// A store on which the run going ends, and the next one starts, between
/// a stop's read of the session and its write.
#[derive(Debug)]
struct Racing {
    inner: MemoryStore,
    raced: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl SessionStore for Racing {
    async fn load(
        &self,
        s: &harness::SessionId,
    ) -> Result<Option<harness::session::StoredRun>, harness::session::StoreError> {
        self.inner.load(s).await
    }
    async fn commit(
        &self,
        c: &harness::session::Commit,
    ) -> Result<(), harness::session::StoreError> {
        if c.head.stop_requested.is_some()
            && !self.raced.swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            let current = self.inner.load(&c.head.session_id).await?.unwrap();
            let mut next = current.clone();
            next.version += 1;
            next.run_id = harness::RunId::from("the next run");
            next.lease = None;
            self.inner
                .commit(&harness::session::Commit {
                    head: next,
                    expected_version: Some(current.version),
                    append: vec![],
                    remove: vec![],
                    durable: true,
                })
                .await?;
        }
        self.inner.commit(c).await
    }
    async fn checkpoints(
        &self,
        s: &harness::SessionId,
        from: u64,
    ) -> Result<Vec<harness::session::Checkpoint>, harness::session::StoreError> {
        self.inner.checkpoints(s, from).await
    }
    async fn sessions(&self) -> Result<Vec<harness::SessionId>, harness::session::StoreError> {
        self.inner.sessions().await
    }
    async fn flush(&self) -> Result<(), harness::session::StoreError> {
        Ok(())
    }
}

/// A stop is for the run going when it is asked: if that run ends and the
/// next starts before the stop is written, the next run is not stopped.
#[tokio::test]
async fn a_stop_that_races_the_end_of_its_run_does_not_stop_the_next() {
    let store = Arc::new(Racing {
        inner: MemoryStore::new(),
        raced: Default::default(),
    });
    let agent = one_step_agent("jobs", store.clone());
    let session = agent.submit(job()).await.unwrap();
    // A worker holds it.
    let current = store.inner.load(&session).await.unwrap().unwrap();
    let mut held = current.clone();
    held.version += 1;
    held.lease = Some(harness::session::Lease {
        owner: "a worker".into(),
        expires_at: u64::MAX / 2,
    });
    store
        .inner
        .commit(&harness::session::Commit {
            head: held,
            expected_version: Some(current.version),
            append: vec![],
            remove: vec![],
            durable: true,
        })
        .await
        .unwrap();
    assert_eq!(agent.stop_session(&session).await.unwrap(), Stopping::Ended);
    let head = agent.session(&session).await.unwrap();
    assert_eq!(head.run_id, harness::RunId::from("the next run"));
    assert_eq!(
        (head.phase, head.stop_requested),
        (SessionPhase::Running, None)
    );
}
