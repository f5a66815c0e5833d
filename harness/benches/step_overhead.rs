//! Per-step overhead of a two-step loop: `work` increments a counter and
//! appends to a list through reducers, `check` routes back until N, then ends.
//!
//! The same loop in LangGraph is `benchmarks/langgraph_loop.py`, which runs
//! this benchmark too and prints the ratio.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use harness::{Agent, Cx, Harness, HarnessState, StepResult, create_agent};
use serde::{Deserialize, Serialize};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Loop iterations per run: each is two steps.
const N: u64 = 1_000;

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

fn check(s: &Loop) -> &'static str {
    if s.count < N { "again" } else { "done" }
}

/// The loop; `deadline`: with the default run deadline (what every harness
/// gets), else `without_deadline()`, to show what the deadline costs.
fn agent(deadline: bool) -> Agent<Loop> {
    let builder = Harness::<Loop>::builder()
        .step("work")
        .run(work)
        .next("check")
        .step("check")
        .route(check)
        .on("again")
        .to("work")
        .on("done")
        .end()
        .start("work")
        .step_limit(10 * N);
    let builder = if deadline {
        builder
    } else {
        builder.without_deadline()
    };
    let harness = builder.build().expect("the benchmark loop is valid");
    create_agent("bench", &harness)
}

fn step_overhead(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let mut group = c.benchmark_group("loop");
    group.throughput(Throughput::Elements(2 * N));
    group.measurement_time(Duration::from_secs(5));
    for (name, deadline) in [
        ("two_step_loop_1000_without_deadline", false),
        ("two_step_loop_1000", true),
    ] {
        let agent = agent(deadline);
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        let run = agent.run(Loop::default());
                        let out = run.await.expect("the loop ends");
                        assert_eq!(out.steps, 2 * N);
                        black_box(out);
                    }
                    start.elapsed()
                })
            });
        });
    }
    group.finish();
}

criterion_group!(benches, step_overhead);
criterion_main!(benches);
