//! Resume cost: a session of 1 000 steps on the sled store, paused on an
//! interrupt, is answered and resumed. Timed: `agent.resume(..)` until it
//! returns the run (the head and the log read, the state rebuilt from the
//! latest snapshot and the updates after it, the lease taken with a
//! durable commit). The run then goes to the next interrupt, untimed.

use criterion::{Criterion, criterion_group, criterion_main};
use harness::session::SessionConfig;
use harness::{Agent, Cx, Harness, HarnessState, SessionId, StepResult, create_agent};
use harness_stores::SledStore;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Steps before the first interrupt.
const STEPS: u64 = 1_000;

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Notes {
    #[field(reduce = add)]
    n: u64,
    /// Each step replaces it: a session that snapshots now and then.
    last: String,
    #[field(reduce = append)]
    answers: Vec<String>,
}

async fn work(s: Arc<Notes>) -> StepResult<NotesUpdate> {
    Ok(NotesUpdate::new()
        .n(1)
        .last(format!("note {} {}", s.n, "x".repeat(200))))
}

async fn ask(cx: Cx<()>) -> StepResult<NotesUpdate> {
    let answer: String = cx.interrupt("more?")?;
    Ok(NotesUpdate::new().answers(vec![answer]))
}

fn agent(store: SledStore) -> Agent<Notes> {
    let harness = Harness::<Notes>::builder()
        .step("work")
        .run(work)
        .route(|s: &Notes| if s.n < STEPS { "again" } else { "ask" })
        .on("again")
        .to("work")
        .on("ask")
        .to("ask")
        .step("ask")
        .run(ask)
        .route(|s: &Notes| {
            if s.answers.last().is_some_and(|a| a == "stop") {
                "done"
            } else {
                "more"
            }
        })
        .on("more")
        .to("ask")
        .on("done")
        .end()
        .start("work")
        .store(store)
        .session_config(SessionConfig::default())
        .build()
        .expect("the benchmark loop is valid");
    create_agent("resume-bench", &harness)
}

fn resume(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("resume-bench");
    let _ = std::fs::remove_dir_all(&dir);
    let agent = agent(SledStore::open(&dir).expect("a sled database"));
    let session = SessionId::from("long");
    let mut pending = rt.block_on(async {
        let out = agent
            .run_in(
                session.clone(),
                Notes {
                    n: 0,
                    last: String::new(),
                    answers: vec![],
                },
            )
            .await
            .expect("the session pauses");
        assert_eq!(out.state.n, STEPS);
        out.interrupt.expect("paused on an interrupt").id
    });
    let mut group = c.benchmark_group("resume");
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(10));
    group.bench_function("sled_1000_step_session", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut timed = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    let run = agent
                        .resume("yes", &session, &pending)
                        .await
                        .expect("the session resumes");
                    timed += start.elapsed();
                    let out = run.await.expect("the run pauses again");
                    pending = out.interrupt.expect("paused again").id;
                }
                timed
            })
        });
    });
    // Of which: reading the head and the log and rebuilding the state.
    group.bench_function("sled_1000_step_session_state_only", |b| {
        b.iter(|| {
            rt.block_on(agent.state_at(&session, None))
                .expect("the state")
        });
    });
    group.finish();
}

criterion_group!(benches, resume);
criterion_main!(benches);
