//! Durable steps per second with many sessions stepping at once on one
//! sled store, every step's checkpoint flushed before the step returns.
//!
//! `cargo bench -p harness-stores --bench concurrent_durable [-- SESSIONS...]`
//! prints one line per concurrency: sessions, steps, seconds, steps/s, and
//! the ratio to one session alone. `-- --smoke` runs a tiny version.

use harness::session::{Durability, SessionConfig};
use harness::{Agent, Harness, HarnessState, StepResult, create_agent};
use harness_stores::SledStore;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Instant;

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Counter {
    #[field(reduce = add)]
    n: u64,
    limit: u64,
}

async fn step(_: Arc<Counter>) -> StepResult<CounterUpdate> {
    Ok(CounterUpdate::new().n(1))
}

fn agent(store: SledStore) -> Agent<Counter> {
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
        .build()
        .expect("a valid loop");
    create_agent("bench", &harness)
}

/// Runs `sessions` sessions of `steps` durable steps at once; steps/s.
async fn measure(agent: &Agent<Counter>, sessions: usize, steps: u64) -> (f64, f64) {
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(sessions);
    for _ in 0..sessions {
        let agent = agent.clone();
        tasks.push(tokio::spawn(async move {
            let out = agent
                .run(Counter { n: 0, limit: steps })
                .await
                .expect("the loop ends");
            assert_eq!(out.state.n, steps);
        }));
    }
    for t in tasks {
        t.await.expect("a session task");
    }
    let secs = start.elapsed().as_secs_f64();
    (secs, (sessions as u64 * steps) as f64 / secs)
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let smoke = args.iter().any(|a| a == "--smoke");
    let mut levels: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    if levels.is_empty() {
        levels = if smoke {
            vec![1, 4]
        } else {
            vec![1, 10, 100, 1000]
        };
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("concurrent-durable-bench");
    let _ = std::fs::remove_dir_all(&dir);
    let agent = agent(SledStore::open(&dir).expect("a sled database"));
    rt.block_on(async {
        let mut alone = None;
        println!("sessions  steps   seconds  durable steps/s  vs one session");
        for sessions in levels {
            let steps = if smoke {
                5
            } else {
                (2000 / sessions as u64).clamp(20, 200)
            };
            let (secs, rate) = measure(&agent, sessions, steps).await;
            let base = *alone.get_or_insert(rate);
            println!(
                "{sessions:>8}  {:>5}  {secs:>8.2}  {rate:>15.0}  {:>13.1}x",
                sessions as u64 * steps,
                rate / base
            );
        }
    });
}
