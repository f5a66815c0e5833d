//! 4 worker processes share one PostgreSQL (and one Redis); one is killed
//! with SIGKILL mid-run. Every session completes exactly once: no step
//! applied twice, none lost.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use harness::session::{SessionConfig, SessionPhase};
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
            .submit(harness_tests::pool::Job { ticks: vec![] })
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
