//! Durable steps per second with 1, 100 and 1 000 sessions stepping at once
//! on one store (group commit; sled unless `--store` says otherwise), every
//! step flushed before it returns, and this disk's fsync latency, the floor
//! of one durable step. Each level is run once untimed (2 steps a session)
//! before it is measured.
//!
//! Each session takes `--steps-total` divided by the sessions, and at least
//! `--min-steps` (50): the figure is then that of sessions stepping, which
//! is what a service of long conversations does, rather than mostly their
//! start and end (a run's first commit creates its session and its last
//! releases it).
//!
//! `durable_sessions [--levels 1,100,1000] [--steps-total 2000] [--min-steps 50] [--store sled|log|memory]`

use harness::session::SessionStore;
use harness::session::{Durability, SessionConfig};
use harness::{Agent, Harness, HarnessState, StepResult, create_agent};
use harness_benchmarks::{arg, fsync_latency, result, scratch_dir};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Instant;

/// A counter stepped to its limit.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Counter {
    #[field(reduce = add)]
    n: u64,
    limit: u64,
}

async fn step(_: Arc<Counter>) -> StepResult<CounterUpdate> {
    Ok(CounterUpdate::new().n(1))
}

fn agent(store: Arc<dyn SessionStore>) -> Result<Agent<Counter>, Box<dyn std::error::Error>> {
    let harness = Harness::<Counter>::builder()
        .step("step")
        .run(step)
        .route(|s: &Counter| if s.n < s.limit { "again" } else { "done" })
        .on("again")
        .to("step")
        .on("done")
        .end()
        .start("step")
        .store(store)
        .session_config(SessionConfig {
            durability: Durability::EveryStep,
            ..SessionConfig::default()
        })
        .build()?;
    Ok(create_agent("durable-sessions", &harness))
}

/// Runs `sessions` sessions of `steps` durable steps at once; steps/s.
async fn measure(
    agent: &Agent<Counter>,
    sessions: usize,
    steps: u64,
) -> Result<f64, Box<dyn std::error::Error>> {
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(sessions);
    for _ in 0..sessions {
        let agent = agent.clone();
        tasks.push(tokio::spawn(async move {
            agent
                .run(Counter { n: 0, limit: steps })
                .await
                .map(|out| out.state.n)
        }));
    }
    for t in tasks {
        let n = t.await??;
        if n != steps {
            return Err(format!("a session ended at {n} of {steps} steps").into());
        }
    }
    Ok((sessions as u64 * steps) as f64 / start.elapsed().as_secs_f64())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let levels: String = arg(&args, "--levels", "1,100,1000".to_string());
    let total: u64 = arg(&args, "--steps-total", 2000);
    let min_steps: u64 = arg(&args, "--min-steps", 50);
    let dir = scratch_dir("durable-sessions");
    let fsync = fsync_latency(&dir.join("probe"), 200)?;
    result("fsync_us", fsync.as_secs_f64() * 1e6);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let agent = agent(harness_benchmarks::store(&args, &dir.join("db")))?;
    let prefix = harness_benchmarks::figure_prefix(&args);
    rt.block_on(async {
        for sessions in levels.split(',') {
            let sessions: usize = sessions.trim().parse()?;
            // At least `min_steps` each, and enough in all to be measured.
            let steps = (total / sessions as u64).max(min_steps);
            // Warm up at this level first (the runtime's task slots, the
            // store's index and buffers at this size), untimed.
            measure(&agent, sessions, 2).await?;
            let rate = measure(&agent, sessions, steps).await?;
            println!(
                "{} store, {sessions} sessions x {steps} durable steps: {rate:.0} steps/s",
                harness_benchmarks::store_name(&args)
            );
            result(&format!("{prefix}durable_steps_per_s_{sessions}"), rate);
        }
        Ok(())
    })
}
