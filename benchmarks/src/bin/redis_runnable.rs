//! What a worker's poll costs on Redis as sessions pile up: the time of
//! one `runnable(agent, now, 1)` call that finds this agent's one waiting
//! session, while the store also holds `--others` waiting sessions of
//! another agent (a backlog of theirs) and `--busy` sessions of this agent
//! held by live leases (runs under way). Each size is a fresh key prefix.
//! Prints the median and p99 of `--polls` calls per size, in µs.
//!
//! `redis_runnable --url redis://127.0.0.1:6379/ [--sizes 100,1000,10000] [--polls 200]`

use harness::SessionId;
use harness::session::{Commit, Lease, SessionPhase, SessionStore, StoredRun};
use harness_benchmarks::{arg, percentile, result};
use harness_stores::{RedisOptions, RedisStore};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// A running session of `agent`, written at `at`, with a lease until
/// `lease` if given.
fn running(id: &str, agent: &str, at: u64, lease: Option<u64>) -> Commit {
    let head = StoredRun {
        schema_version: harness::session::SCHEMA_VERSION,
        session_id: SessionId::from(id),
        agent_id: agent.to_owned(),
        run_id: "r".into(),
        phase: SessionPhase::Running,
        next_step: Some("work".into()),
        ended_with: None,
        steps: 0,
        journal: Default::default(),
        branch_journals: Default::default(),
        version: 1,
        lease: lease.map(|until| Lease {
            owner: "w".into(),
            expires_at: until,
        }),
        snapshot_seq: 0,
        snapshot_index: 0,
        state_bytes: 0,
        bytes_since_snapshot: 0,
        measured_index: 0,
        last_seq: 0,
        created_at: at,
        updated_at: at,
        queued: Vec::new(),
        stop_requested: None,
        run_start: None,
    };
    debug_assert_eq!(head.phase, SessionPhase::Running);
    Commit {
        head,
        expected_version: None,
        append: Vec::new(),
        remove: Vec::new(),
        durable: false,
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let url: String = arg(&args, "--url", "redis://127.0.0.1:6379/".to_owned());
    let sizes: String = arg(&args, "--sizes", "100,1000,10000".to_owned());
    let polls: usize = arg(&args, "--polls", 200);
    for size in sizes
        .split(',')
        .map(|s| s.parse::<usize>().expect("--sizes"))
    {
        let prefix = format!("bench-runnable-{}-{size}", std::process::id());
        let options = RedisOptions::default()
            .prefix(&prefix)
            .claim_ttl(Duration::ZERO);
        let store = RedisStore::connect_with(&url, options)
            .await
            .expect("redis");
        let now = now_ms();
        // Oldest first: the other agent's backlog and this agent's busy
        // sessions, then this agent's one waiting session.
        for i in 0..size {
            let at = now - 100_000 + i as u64;
            store
                .commit(&running(&format!("other-{i}"), "other", at, None))
                .await
                .expect("commit");
            store
                .commit(&running(
                    &format!("busy-{i}"),
                    "mine",
                    at,
                    Some(now + 3_600_000),
                ))
                .await
                .expect("commit");
        }
        store
            .commit(&running("waiting", "mine", now - 10, None))
            .await
            .expect("commit");
        let mut times = Vec::with_capacity(polls);
        for _ in 0..polls {
            let started = Instant::now();
            let found = store.runnable("mine", now, 1).await.expect("runnable");
            times.push(started.elapsed().as_secs_f64() * 1e6);
            assert_eq!(found, [SessionId::from("waiting")]);
        }
        times.sort_by(f64::total_cmp);
        result(
            &format!("redis_runnable_{size}_median_us"),
            percentile(&times, 50.0),
        );
        result(
            &format!("redis_runnable_{size}_p99_us"),
            percentile(&times, 99.0),
        );
        // The keys of this size.
        let mut con = store.connection();
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{prefix}:*"))
            .query_async(&mut con)
            .await
            .expect("keys");
        for chunk in keys.chunks(500) {
            let _: () = redis::cmd("DEL")
                .arg(chunk)
                .query_async(&mut con)
                .await
                .expect("del");
        }
    }
}
