//! 4 worker processes share one PostgreSQL (and one Redis); one is killed
//! with SIGKILL mid-run. Every session completes exactly once: no step
//! applied twice, none lost.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use harness::session::{SessionConfig, SessionPhase};
use harness::{Signal, Stopping};
use harness_tests::pool::{STEPS_PER_JOB, agent_on, connect};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn url(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(u) => Some(u),
        Err(_) if std::env::var("HARNESS_SKIP_SERVER_TESTS").as_deref() == Ok("1") => None,
        Err(_) => {
            panic!("{var} is not set: run `eval \"$(scripts/services)\"` first (or ./scripts/test)")
        }
    }
}

async fn contention(backend: &str, url: &str, sessions: usize, workers: usize) {
    let namespace = format!(
        "pool_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
    );
    let store = connect(backend, url, &namespace).await.unwrap();
    let agent = agent_on(store, SessionConfig::default(), false).unwrap();
    for _ in 0..sessions {
        agent
            .submit(harness_tests::pool::Job::default())
            .await
            .unwrap();
    }

    let bin = env!("CARGO_BIN_EXE_pool_worker");
    let spawn = || -> Child {
        Command::new(bin)
            .args([backend, url, &namespace, "1000"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let started = Instant::now();
    let mut children: Vec<Child> = (0..workers).map(|_| spawn()).collect();
    // Kill the first worker once it has run some steps.
    let victim_pid = children[0].id();
    let mut lines = BufReader::new(children[0].stdout.take().unwrap()).lines();
    let mut seen = 0;
    while seen < 10 {
        match lines.next() {
            Some(Ok(_)) => seen += 1,
            _ => break,
        }
    }
    children[0].kill().unwrap(); // SIGKILL
    children[0].wait().unwrap();

    let deadline = Instant::now() + Duration::from_secs(120);
    let heads = loop {
        let heads = agent.sessions().await.unwrap();
        let done = heads
            .iter()
            .filter(|h| matches!(h.phase, SessionPhase::Completed { .. }))
            .count();
        if done == sessions {
            break heads;
        }
        assert!(
            Instant::now() < deadline,
            "only {done} of {sessions} sessions completed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let elapsed = started.elapsed();
    for c in children.iter_mut().skip(1) {
        c.kill().unwrap();
        c.wait().unwrap();
    }

    let (mut duplicates, mut lost, mut by_victim, mut taken_over) = (0, 0, 0, 0);
    let mut per_pid: BTreeMap<u32, usize> = BTreeMap::new();
    for head in &heads {
        let state = agent.state_at(&head.session_id, None).await.unwrap();
        let numbers: Vec<u32> = state.ticks.iter().map(|t| t.0).collect();
        let expected: Vec<u32> = (1..=STEPS_PER_JOB).collect();
        if numbers.len() > expected.len() {
            duplicates += numbers.len() - expected.len();
        }
        if numbers != expected {
            lost += 1;
        }
        let pids: Vec<u32> = state.ticks.iter().map(|t| t.1).collect();
        if pids.contains(&victim_pid) {
            by_victim += 1;
            if pids.iter().any(|p| *p != victim_pid) {
                taken_over += 1;
            }
        }
        for p in pids {
            *per_pid.entry(p).or_default() += 1;
        }
    }
    let steps = sessions * STEPS_PER_JOB as usize;
    println!(
        "{backend}: {sessions} sessions, {workers} worker processes, 1 killed (SIGKILL after {seen} steps); \
         completed {}, duplicates {duplicates}, lost {lost}; sessions touched by the killed worker {by_victim}, \
         of which finished by another {taken_over}; steps per process {per_pid:?}; \
         {steps} durable steps in {elapsed:.2?} = {:.0} steps/s",
        heads.len(),
        steps as f64 / elapsed.as_secs_f64()
    );
    assert_eq!(heads.len(), sessions);
    assert_eq!((duplicates, lost), (0, 0));
    assert!(per_pid.len() >= 2, "the work was shared: {per_pid:?}");
}

/// A run in a worker process is stopped from this one, through the store
/// alone: it stops at its next step boundary, with `$stopped`, its steps
/// kept, and the worker goes on.
async fn stop_from_another_process(backend: &str, url: &str) {
    let namespace = format!("stop_{}_{backend}", std::process::id());
    let store = connect(backend, url, &namespace).await.unwrap();
    let agent = agent_on(store, SessionConfig::default(), false).unwrap();
    let long = agent
        .submit(harness_tests::pool::Job::with_steps(100_000))
        .await
        .unwrap();
    let mut worker = Command::new(env!("CARGO_BIN_EXE_pool_worker"))
        .args([backend, url, &namespace, "1000"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(worker.stdout.take().unwrap()).lines();
    for _ in 0..5 {
        lines.next().unwrap().unwrap();
    }
    let asked = agent.stop_session(&long).await.unwrap();
    assert!(matches!(asked, Stopping::Asked { .. }), "{asked:?}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let head = loop {
        let head = agent.session(&long).await.unwrap();
        if head.phase != SessionPhase::Running {
            break head;
        }
        assert!(Instant::now() < deadline, "not stopped: {head:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        head.phase,
        SessionPhase::Completed {
            signal: Signal::STOPPED
        }
    );
    assert_eq!(head.stop_requested, None);
    assert!(head.lease.is_none());
    let state = agent.state_at(&long, None).await.unwrap();
    let numbers: Vec<u32> = state.ticks.iter().map(|t| t.0).collect();
    assert!(
        numbers.len() >= 5 && numbers.len() < 100_000,
        "{}",
        numbers.len()
    );
    assert_eq!(numbers, (1..=numbers.len() as u32).collect::<Vec<_>>());
    // The worker is alive and takes the next session.
    let next = agent
        .submit(harness_tests::pool::Job::default())
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !matches!(
        agent.session(&next).await.unwrap().phase,
        SessionPhase::Completed { .. }
    ) {
        assert!(
            Instant::now() < deadline,
            "the worker took no other session"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    worker.kill().unwrap();
    worker.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_in_a_worker_process_is_stopped_from_another_process_on_postgres() {
    let Some(url) = url("HARNESS_TEST_POSTGRES_URL") else {
        return;
    };
    stop_from_another_process("postgres", &url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_in_a_worker_process_is_stopped_from_another_process_on_redis() {
    let Some(url) = url("HARNESS_TEST_REDIS_URL") else {
        return;
    };
    stop_from_another_process("redis", &url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_worker_processes_on_postgres_complete_every_session_exactly_once_despite_a_kill() {
    let Some(url) = url("HARNESS_TEST_POSTGRES_URL") else {
        return;
    };
    contention("postgres", &url, 200, 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_worker_processes_on_redis_complete_every_session_exactly_once_despite_a_kill() {
    let Some(url) = url("HARNESS_TEST_REDIS_URL") else {
        return;
    };
    contention("redis", &url, 50, 4).await;
}
