//! Per-step overhead with a durable checkpoint: the two-step loop of the
//! core benchmark, on a sled store flushed (fsync) at every step.
//!
//! `benchmarks/langgraph_loop.py` runs this beside LangGraph's SqliteSaver
//! (durability "sync") and this machine's fsync latency.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use harness::session::{Durability, SessionConfig};
use harness::{Agent, Cx, Harness, HarnessState, StepResult, create_agent};
use harness_stores::SledStore;
use serde::{Deserialize, Serialize};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Loop iterations per run: each is two steps, each step a flushed checkpoint.
const N: u64 = 100;

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Loop {
    #[field(reduce = add)]
    count: u64,
    #[field(reduce = append)]
    items: Vec<u64>,
}

async fn work(s: Arc<Loop>, _: Cx<()>) -> StepResult<LoopUpdate> {
    Ok(LoopUpdate::new().count(1).items(vec![s.count + 1]))
}

fn agent(store: SledStore) -> Agent<Loop> {
    let harness = Harness::<Loop>::builder()
        .step("work")
        .run(work)
        .next("check")
        .step("check")
        .route(|s: &Loop| if s.count < N { "again" } else { "done" })
        .on("again")
        .to("work")
        .on("done")
        .end()
        .start("work")
        .store(store)
        .session_config(SessionConfig {
            durability: Durability::EveryStep,
            ..SessionConfig::default()
        })
        .build()
        .expect("the benchmark loop is valid");
    create_agent("bench", &harness)
}

fn durable_step(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    // On disk next to the build, like a user's database: not on tmpfs.
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("durable-step-bench");
    let _ = std::fs::remove_dir_all(&dir);
    let agent = agent(SledStore::open(&dir).expect("a sled database"));
    let mut group = c.benchmark_group("durable");
    group.throughput(Throughput::Elements(2 * N));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    group.bench_function("two_step_loop_100_sled_flush_every_step", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    let run = agent.run(Loop {
                        count: 0,
                        items: vec![],
                    });
                    let out = run.await.expect("the loop ends");
                    assert_eq!(out.steps, 2 * N);
                    black_box(out);
                }
                start.elapsed()
            })
        });
    });
    group.finish();
}

criterion_group!(benches, durable_step);
criterion_main!(benches);
