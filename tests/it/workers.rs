//! Workers on a shared store: every submitted run completes exactly once,
//! busy sessions reject or queue, and a dead worker's session is taken over.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use harness::session::{SessionConfig, SessionError, SessionPhase};
use harness::worker::{Worker, WorkerReport};
use harness::{Agent, Busy, Harness, HarnessState, StepResult, Submitted, create_agent};
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
    Ok(JobUpdate::new()
        .steps(1)
        .done(vec![format!("step {}", s.steps + 1)]))
}

fn agent(store: Arc<MemoryStore>, lease: Duration) -> Agent<Job> {
    let h = Harness::<Job>::builder()
        .step("work")
        .run(work)
        .route(|s: &Job| {
            if !s.steps.is_multiple_of(s.per_run) {
                "again"
            } else {
                "done"
            }
        })
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_workers_session_is_finished_by_another_without_repeating_steps() {
    let store = Arc::new(MemoryStore::new());
    let agent = agent(store.clone(), Duration::from_millis(200));
    let session = agent
        .submit(Job {
            per_run: 40,
            ..job()
        })
        .await
        .unwrap();
    // The first worker dies mid-run: its task is aborted.
    let doomed = {
        let agent = agent.clone();
        tokio::spawn(async move { Worker::new(agent).run_until(std::future::pending()).await })
    };
    tokio::time::sleep(Duration::from_millis(30)).await;
    doomed.abort();
    let _ = doomed.await;
    let head = agent.session(&session).await.unwrap();
    assert_eq!(head.phase, SessionPhase::Running);
    assert!(
        head.steps > 0 && head.steps < 40,
        "died mid-run at {}",
        head.steps
    );

    let reports = drain(2, &agent, 1).await;
    assert_eq!(reports.iter().map(|r| r.completed).sum::<u64>(), 1);
    let state = agent.state_at(&session, None).await.unwrap();
    let expected: Vec<String> = (1..=40).map(|i| format!("step {i}")).collect();
    assert_eq!(state.done, expected, "no step lost, none applied twice");
}
