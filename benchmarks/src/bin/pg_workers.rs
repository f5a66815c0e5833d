//! Workers on PostgreSQL: `--workers` processes (default 4) running
//! harness [`Worker`]s take `--sessions` submitted sessions (default 1 000)
//! of `--steps` durable steps each (default 20) from one PostgreSQL.
//! Prints durable steps per second (from the first step of any session to
//! the last) and the p50 and p99 step latency: the time between
//! two consecutive steps of a session, each step recording when it ran.
//!
//! `pg_workers --url URL [--sessions 1000] [--steps 20] [--workers 4] [--concurrency 16] [--effects 0]`
//!
//! With `--effects E` (E > 0), each step instead makes E journaled effects
//! (`cx.once`, each written to the session in PostgreSQL before it
//! returns), each recording when it ran: the figures are then per effect
//! (`benchmarks/scripts/bench-restate` runs one step of E effects, the loop
//! it runs on Restate too). It also prints the effects per second from the
//! moment the workers start to the moment the driver sees every session
//! completed (`pg_wall_steps_per_s`, to its 10 ms polling).
//!
//! Each worker process runs `--concurrency` workers at once (a worker runs
//! one session at a time). The processes are this program again, started
//! with `--worker`; they begin together at a time the parent gives, once
//! connected, and are killed once every session has completed.

use harness::session::SessionConfig;
use harness::worker::Worker;
use harness::{Agent, Cx, Harness, HarnessState, SessionId, StepResult, create_agent};
use harness_benchmarks::{arg, percentile, result};
use harness_stores::{PostgresOptions, PostgresStore};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A job of `steps` steps, each recording when it ran.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Job {
    steps: u64,
    /// Effects per step (`--effects`); 0: the step records its own tick.
    #[serde(default)]
    effects: u64,
    /// When each step ran, in µs since the epoch.
    #[field(reduce = append)]
    ticks: Vec<u64>,
}

fn micros_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

async fn tick(job: Arc<Job>, cx: Cx<()>) -> StepResult<JobUpdate> {
    if job.effects == 0 {
        return Ok(JobUpdate::new().ticks(vec![micros_now()]));
    }
    let mut ticks = Vec::with_capacity(job.effects as usize);
    for i in 0..job.effects {
        ticks.push(
            cx.once(&format!("effect-{i}"), async { micros_now() })
                .await?,
        );
    }
    Ok(JobUpdate::new().ticks(ticks))
}

/// The ticks a job records: one per step, or one per effect.
fn ticks_of(job: &Job) -> u64 {
    job.steps * job.effects.max(1)
}

fn agent(store: PostgresStore) -> Result<Agent<Job>, Box<dyn std::error::Error>> {
    let harness = Harness::<Job>::builder()
        .step("tick")
        .run(tick)
        .route(|s: &Job| {
            if (s.ticks.len() as u64) < ticks_of(s) {
                "again"
            } else {
                "done"
            }
        })
        .on("again")
        .to("tick")
        .on("done")
        .end()
        .start("tick")
        .store(store)
        .session_config(SessionConfig::default())
        .build()?;
    Ok(create_agent("pg-workers", &harness))
}

async fn connect(
    url: &str,
    schema: &str,
    pool: usize,
) -> Result<PostgresStore, Box<dyn std::error::Error>> {
    Ok(PostgresStore::connect_with(
        url,
        PostgresOptions::default().schema(schema).pool_size(pool),
    )
    .await?)
}

/// Sleeps until `at` (µs since the epoch).
async fn wait_until(at: u64) {
    let now = micros_now();
    if at > now {
        tokio::time::sleep(Duration::from_micros(at - now)).await;
    }
}

async fn worker(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let url: String = arg(args, "--url", String::new());
    let schema: String = arg(args, "--schema", String::new());
    let concurrency: usize = arg(args, "--concurrency", 16);
    let start_at: u64 = arg(args, "--start-at", 0);
    let agent = agent(connect(&url, &schema, concurrency + 2).await?)?;
    wait_until(start_at).await;
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let agent = agent.clone();
            tokio::spawn(async move {
                Worker::new(agent)
                    .poll_interval(Duration::from_millis(5))
                    .run_until(std::future::pending())
                    .await
            })
        })
        .collect();
    for t in tasks {
        t.await??;
    }
    Ok(())
}

async fn driver(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let url: String = arg(args, "--url", String::new());
    let sessions: usize = arg(args, "--sessions", 1000);
    let steps: u64 = arg(args, "--steps", 20);
    let workers: usize = arg(args, "--workers", 4);
    let concurrency: usize = arg(args, "--concurrency", 16);
    let effects: u64 = arg(args, "--effects", 0);
    let schema = format!("bench_{}_{}", std::process::id(), micros_now() % 1_000_000);
    let store = connect(&url, &schema, 8).await?;
    let agent = agent(store.clone())?;
    let mut ids: Vec<SessionId> = Vec::with_capacity(sessions);
    for _ in 0..sessions {
        ids.push(
            agent
                .submit(Job {
                    steps,
                    effects,
                    ticks: Vec::new(),
                })
                .await?,
        );
    }
    let start_at = micros_now() + 2_000_000;
    let me = std::env::current_exe()?;
    let mut children = Vec::with_capacity(workers);
    for _ in 0..workers {
        children.push(
            std::process::Command::new(&me)
                .args(["--worker", "--url", &url, "--schema", &schema])
                .args(["--concurrency", &concurrency.to_string()])
                .args(["--start-at", &start_at.to_string()])
                .spawn()?,
        );
    }
    let client = store.pool().get().await?;
    let count = format!("SELECT count(*) FROM \"{schema}\".sessions WHERE phase = 'completed'");
    let deadline = std::time::Instant::now() + Duration::from_secs(600);
    loop {
        let done: i64 = client.query_one(&count, &[]).await?.get(0);
        if done as usize >= sessions {
            break;
        }
        for c in &mut children {
            if let Some(status) = c.try_wait()? {
                return Err(format!("a worker process exited: {status}").into());
            }
        }
        if std::time::Instant::now() > deadline {
            return Err(
                format!("only {done} of {sessions} sessions completed in 10 minutes").into(),
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let done_at = micros_now();
    for c in &mut children {
        let _ = c.kill();
        let _ = c.wait();
    }
    let per_session = steps * effects.max(1);
    let mut gaps = Vec::with_capacity(sessions * steps as usize);
    let (mut first, mut last) = (u64::MAX, 0);
    for id in &ids {
        let state = agent.state_at(id, None).await?;
        if state.ticks.len() as u64 != per_session {
            return Err(format!(
                "session {id} recorded {} of {per_session} ticks",
                state.ticks.len()
            )
            .into());
        }
        first = first.min(*state.ticks.first().unwrap_or(&u64::MAX));
        last = last.max(*state.ticks.last().unwrap_or(&0));
        gaps.extend(
            state
                .ticks
                .windows(2)
                .map(|w| w[1].saturating_sub(w[0]) as f64 / 1000.0),
        );
    }
    // From the first step anywhere to the last (as LangGraph's side is
    // measured), which the polling above only bounds.
    gaps.sort_by(f64::total_cmp);
    let secs = last.saturating_sub(first).max(1) as f64 / 1e6;
    let rate = (sessions as u64 * per_session) as f64 / secs;
    let wall = done_at.saturating_sub(start_at).max(1) as f64 / 1e6;
    let what = if effects == 0 {
        format!("{steps} steps")
    } else {
        format!("{steps} steps of {effects} effects")
    };
    println!(
        "{sessions} sessions x {what}, {workers} processes x {concurrency} workers: \
         {secs:.2} s, {rate:.0} ticks/s, latency between ticks p50 {:.2} ms p99 {:.2} ms",
        percentile(&gaps, 50.0),
        percentile(&gaps, 99.0)
    );
    result("pg_steps_per_s", rate);
    result(
        "pg_wall_steps_per_s",
        (sessions as u64 * per_session) as f64 / wall,
    );
    result("pg_p50_ms", percentile(&gaps, 50.0));
    result("pg_p99_ms", percentile(&gaps, 99.0));
    client
        .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--worker") {
        worker(&args).await
    } else {
        driver(&args).await
    }
}
