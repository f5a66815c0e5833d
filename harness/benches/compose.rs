//! Overhead of composition: a map-reduce over 1 000 trivial branches, and a
//! loop whose step is a sub-agent (a one-step child loop), in memory.
//!
//! - `fan_out_1000`: `split` fans out one branch of `work` per item (0 to
//!   999, made from the state's `n`), each adds its item to `total`
//!   through the `add` reducer, and the join `reduce` copies the total.
//!   Per branch: the run's time / 1 000.
//! - `sub_agent_loop_1000`: the parent's `child` step runs a child loop of
//!   one step that adds one to its count; `map_in` gives it the parent's
//!   count, `map_out` takes its count back; the parent routes back to
//!   `child` until the count is 1 000. Per sub-agent step: the run's time /
//!   1 000. `plain_loop_1000` is the same loop with the child's step as the
//!   parent's own, for the cost of nesting alone.
//!
//! The same shapes in LangGraph (`Send`, a compiled subgraph as a node)
//! are in `benchmarks/compose_langgraph.py`; `benchmarks/compose.sh` runs
//! both and prints the ratios.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use harness::{Agent, Cx, Harness, HarnessState, SubAgent, create_agent};
use serde::{Deserialize, Serialize};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Branches of the fan-out; sub-agent steps of the loop.
const N: u64 = 1_000;

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct MapReduce {
    n: u64,
    #[field(reduce = add)]
    total: u64,
    result: u64,
}

fn map_reduce() -> Agent<MapReduce> {
    let harness = Harness::<MapReduce>::builder()
        .step("split")
        .route(|_: &MapReduce| "items")
        .on("items")
        .fan_out("work", |s: &MapReduce| (0..s.n).collect::<Vec<u64>>())
        .join("reduce")
        .step("work")
        .run_each(async |item: u64, _: Arc<MapReduce>, _: Cx<()>| {
            Ok(MapReduceUpdate::new().total(item))
        })
        .writes(["total"])
        .next("reduce")
        .step("reduce")
        .run(async |s: Arc<MapReduce>| Ok(MapReduceUpdate::new().result(s.total)))
        .end()
        .start("split")
        .build()
        .expect("the map-reduce loop is valid");
    create_agent("map_reduce", &harness)
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Count {
    count: u64,
}

fn again(s: &Count) -> &'static str {
    if s.count < N { "again" } else { "done" }
}

async fn add_one(s: Arc<Count>) -> harness::StepResult<CountUpdate> {
    Ok(CountUpdate::new().count(s.count + 1))
}

/// The parent loop; its `child` step is a sub-agent with `nested`, else a
/// plain step.
fn counting(nested: bool) -> Agent<Count> {
    let step = Harness::<Count>::builder().step("child");
    let step = if nested {
        let child = Harness::<Count>::builder()
            .step("work")
            .run(add_one)
            .end()
            .start("work")
            .build()
            .expect("the child loop is valid");
        step.sub_agent(SubAgent::new(
            &child,
            |p: &Count| Count { count: p.count },
            |_: &Count, done| CountUpdate::new().count(done.state.count),
        ))
    } else {
        step.run(add_one)
    };
    let harness = step
        .route(again)
        .on("again")
        .to("child")
        .on("done")
        .end()
        .start("child")
        .step_limit(2 * N)
        .build()
        .expect("the parent loop is valid");
    create_agent("parent", &harness)
}

fn compose(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let mut group = c.benchmark_group("compose");
    group.throughput(Throughput::Elements(N));
    group.measurement_time(Duration::from_secs(5));

    let agent = map_reduce();
    group.bench_function("fan_out_1000", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    let out = agent
                        .run(MapReduce {
                            n: N,
                            ..MapReduce::default()
                        })
                        .await
                        .expect("the map-reduce ends");
                    assert_eq!(out.state.result, N * (N - 1) / 2);
                    black_box(out);
                }
                start.elapsed()
            })
        });
    });

    for (name, nested) in [("sub_agent_loop_1000", true), ("plain_loop_1000", false)] {
        let agent = counting(nested);
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        let out = agent.run(Count::default()).await.expect("the loop ends");
                        assert_eq!((out.state.count, out.steps), (N, N));
                        black_box(out);
                    }
                    start.elapsed()
                })
            });
        });
    }
    group.finish();
}

criterion_group!(benches, compose);
criterion_main!(benches);
