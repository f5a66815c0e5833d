//! Many runs in one process: `--runs` concurrent runs (default 10 000) of a
//! loop whose model call is a simulated 20–50 ms latency (a tokio sleep),
//! `--steps` model calls each, every step checkpointed durably on one store
//! (sled unless `--store` says otherwise). Prints the wall time, the latency bound (the longest run's total
//! sleep: no implementation can finish sooner) and the memory per run, and
//! where the time over the bound went: when the runs made their first model
//! call (the burst of starts), and how long each run took beyond its own
//! simulated latency.
//!
//! `many_runs --phase inflight|paused [--runs 10000] [--steps 5] [--store sled|log|memory]`
//!
//! - `inflight`: the runs go to their end; memory per in-flight run is the
//!   peak resident set while they run, less the resident set before, per
//!   run.
//! - `paused`: each run makes one model call and pauses on an interrupt
//!   (a question to a person); memory per paused session is the resident
//!   set once every run has paused and returned, less the one before, per
//!   session (what the process keeps: the store's cache, and the session
//!   and interrupt ids the caller holds to answer later).

use harness::session::SessionStore;
use harness::{Agent, Cx, Harness, HarnessState, InterruptId, SessionId, StepResult, create_agent};
use harness_benchmarks::{
    arg, cpu_time, latency_bound, model_latency_ms, result, rss_bytes, scratch_dir,
};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A conversation: model calls until `steps`, then the end or a question.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Chat {
    run: u64,
    #[field(reduce = add)]
    n: u64,
    steps: u64,
    pause: bool,
    reply: String,
    #[field(reduce = append)]
    answers: Vec<String>,
}

/// When the timed runs started, and when each made its first model call
/// and when it ended, in µs from then plus one (0: not yet): where the time
/// over the bound goes.
static CLOCK: std::sync::OnceLock<(Instant, Vec<AtomicU64>, Vec<AtomicU64>)> =
    std::sync::OnceLock::new();

fn mark(run: u64, first: bool) {
    if let Some((t0, firsts, ends)) = CLOCK.get()
        && let Some(slot) = (if first { firsts } else { ends }).get(run as usize)
    {
        slot.store(t0.elapsed().as_micros() as u64 + 1, Ordering::Relaxed);
    }
}

async fn model(s: Arc<Chat>) -> StepResult<ChatUpdate> {
    if s.n == 0 {
        mark(s.run, true);
    }
    tokio::time::sleep(Duration::from_millis(model_latency_ms(s.run, s.n))).await;
    Ok(ChatUpdate::new()
        .n(1)
        .reply(format!("reply {} of run {}", s.n, s.run)))
}

async fn ask(cx: Cx<()>) -> StepResult<ChatUpdate> {
    let answer: String = cx.interrupt("go on?")?;
    Ok(ChatUpdate::new().answers(vec![answer]))
}

fn agent(store: Arc<dyn SessionStore>) -> Result<Agent<Chat>, Box<dyn std::error::Error>> {
    let harness = Harness::<Chat>::builder()
        .step("model")
        .run(model)
        .route(|s: &Chat| {
            if s.n < s.steps {
                "again"
            } else if s.pause && s.answers.is_empty() {
                "ask"
            } else {
                "done"
            }
        })
        .on("again")
        .to("model")
        .on("ask")
        .to("ask")
        .on("done")
        .end()
        .step("ask")
        .run(ask)
        .route(|_: &Chat| "done")
        .on("done")
        .end()
        .start("model")
        .store(store)
        .build()?;
    Ok(create_agent("many-runs", &harness))
}

fn chat(run: u64, steps: u64, pause: bool) -> Chat {
    Chat {
        run,
        n: 0,
        steps,
        pause,
        reply: String::new(),
        answers: Vec::new(),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let phase: String = arg(&args, "--phase", "inflight".to_string());
    let runs: u64 = arg(&args, "--runs", 10_000);
    let steps: u64 = arg(&args, "--steps", 5);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let dir = scratch_dir(&format!("many-runs-{phase}"));
    let agent = agent(harness_benchmarks::store(&args, &dir))?;
    let prefix = harness_benchmarks::figure_prefix(&args);
    rt.block_on(async {
        // Warm up: the store's trees, the runtime's threads.
        agent.run(chat(u64::MAX, 1, false)).await?;
        let before = rss_bytes().unwrap_or(0);
        match phase.as_str() {
            "inflight" => {
                let peak = Arc::new(AtomicU64::new(before));
                let done = Arc::new(AtomicBool::new(false));
                let sampler = {
                    let (peak, done) = (Arc::clone(&peak), Arc::clone(&done));
                    tokio::spawn(async move {
                        while !done.load(Ordering::Relaxed) {
                            peak.fetch_max(rss_bytes().unwrap_or(0), Ordering::Relaxed);
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                    })
                };
                let slots = || (0..runs).map(|_| AtomicU64::new(0)).collect::<Vec<_>>();
                let (firsts, ends) = (slots(), slots());
                let cpu_before = cpu_time();
                let start = Instant::now();
                let _ = CLOCK.set((start, firsts, ends));
                let tasks: Vec<_> = (0..runs)
                    .map(|run| {
                        let agent = agent.clone();
                        tokio::spawn(async move {
                            let out = agent.run(chat(run, steps, false)).await;
                            mark(run, false);
                            out
                        })
                    })
                    .collect();
                for t in tasks {
                    let out = t.await??;
                    if out.state.n != steps {
                        return Err(
                            format!("a run ended after {} of {steps} steps", out.state.n).into(),
                        );
                    }
                }
                let wall = start.elapsed();
                let cpu = cpu_time().zip(cpu_before).map(|(a, b)| a.saturating_sub(b));
                done.store(true, Ordering::Relaxed);
                sampler.await?;
                let bound = latency_bound(runs, steps);
                let per_run =
                    peak.load(Ordering::Relaxed).saturating_sub(before) as f64 / runs as f64;
                println!(
                    "{runs} runs x {steps} steps: {wall:.2?} (latency bound {bound:.2?}, {:.2}x); \
                     {:.1} KiB per in-flight run",
                    wall.as_secs_f64() / bound.as_secs_f64(),
                    per_run / 1024.0
                );
                if let Some((_, firsts, ends)) = CLOCK.get() {
                    let ms = |us: &AtomicU64| {
                        us.load(Ordering::Relaxed).saturating_sub(1) as f64 / 1000.0
                    };
                    let mut first: Vec<f64> = firsts.iter().map(ms).collect();
                    // Each run's time over its own simulated latency.
                    let mut over: Vec<f64> = (0..runs)
                        .zip(ends)
                        .map(|(run, end)| {
                            let own: u64 = (0..steps).map(|s| model_latency_ms(run, s)).sum();
                            ms(end) - own as f64
                        })
                        .collect();
                    first.sort_by(f64::total_cmp);
                    over.sort_by(f64::total_cmp);
                    let at = |v: &[f64], q: f64| v[((v.len() - 1) as f64 * q) as usize];
                    println!(
                        "first model call: median {:.1} ms, last {:.1} ms; time over a run's own \
                         latency: median {:.1} ms, p99 {:.1} ms, max {:.1} ms",
                        at(&first, 0.5),
                        at(&first, 1.0),
                        at(&over, 0.5),
                        at(&over, 0.99),
                        at(&over, 1.0),
                    );
                }
                if let Some(cpu) = cpu {
                    println!(
                        "CPU in that time: {cpu:.2?} ({:.0}% of {} cores)",
                        100.0 * cpu.as_secs_f64()
                            / wall.as_secs_f64()
                            / std::thread::available_parallelism().map_or(1, |n| n.get()) as f64,
                        std::thread::available_parallelism().map_or(1, |n| n.get()),
                    );
                }
                result(&format!("{prefix}many_runs_wall_s"), wall.as_secs_f64());
                result(&format!("{prefix}many_runs_bound_s"), bound.as_secs_f64());
                result(&format!("{prefix}many_runs_bytes_per_inflight"), per_run);
            }
            "paused" => {
                let tasks: Vec<_> = (0..runs)
                    .map(|run| {
                        let agent = agent.clone();
                        tokio::spawn(async move {
                            let session = SessionId::from(format!("paused-{run}"));
                            let out = agent.run_in(session.clone(), chat(run, 1, true)).await?;
                            let id: InterruptId =
                                out.interrupt.ok_or("a run ended without pausing")?.id;
                            Ok::<_, Box<dyn std::error::Error + Send + Sync>>((session, id))
                        })
                    })
                    .collect();
                let mut pending = Vec::with_capacity(tasks.len());
                for t in tasks {
                    pending.push(t.await?.map_err(|e| e.to_string())?);
                }
                let after = rss_bytes().unwrap_or(0);
                let per = after.saturating_sub(before) as f64 / runs as f64;
                println!(
                    "{} sessions paused: {:.1} KiB per paused session",
                    pending.len(),
                    per / 1024.0
                );
                result(&format!("{prefix}many_runs_bytes_per_paused"), per);
                // One answered, to show the pause is a real one.
                if let Some((session, id)) = pending.first() {
                    let out = agent.resume("yes", session, id).await?.await?;
                    if out.state.answers != ["yes"] {
                        return Err("the answered session did not take the answer".into());
                    }
                }
            }
            other => return Err(format!("unknown --phase {other:?}: inflight or paused").into()),
        }
        Ok(())
    })
}
