//! Resume cost: a session of `--steps` steps (default 1 000) on sled (or
//! the `--store` given),
//! paused on an interrupt, is answered and resumed, `--samples` times.
//! Prints the median time of `agent.resume(..)` until it returns the run
//! (the head and the log read, the state rebuilt from the latest snapshot
//! and the updates after it, the lease taken with a durable commit), the
//! median time until the resumed run is paused again (what LangGraph's one
//! call does), and the bytes the database takes on disk.
//!
//! `resume [--steps 1000] [--samples 50] [--snapshot-every N] [--store sled|log|memory]` (`N`: the
//! session's [`SessionConfig::snapshot_every`], default its default; the
//! figures are then named `resume_every_N_...`; on another store than
//! sled they start with its name, `log_resume_...`).

use harness::session::{SessionConfig, SessionStore};
use harness::{Agent, Cx, Harness, HarnessState, SessionId, StepResult, create_agent};
use harness_benchmarks::{arg, bytes_on_disk, result, scratch_dir};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A long session: `n` counts steps, `last` is replaced at each.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Notes {
    limit: u64,
    #[field(reduce = add)]
    n: u64,
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

fn agent(
    store: Arc<dyn SessionStore>,
    config: SessionConfig,
) -> Result<Agent<Notes>, Box<dyn std::error::Error>> {
    let harness = Harness::<Notes>::builder()
        .step("work")
        .run(work)
        .route(|s: &Notes| if s.n < s.limit { "again" } else { "ask" })
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
        .session_config(config)
        .build()?;
    Ok(create_agent("resume-bench", &harness))
}

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v.get(v.len() / 2).map_or(0.0, |d| d.as_secs_f64() * 1e3)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let steps: u64 = arg(&args, "--steps", 1000);
    let samples: usize = arg(&args, "--samples", 50);
    let every: Option<u64> = args
        .iter()
        .any(|a| a == "--snapshot-every")
        .then(|| arg(&args, "--snapshot-every", 0));
    let mut config = SessionConfig::default();
    let prefix = match every {
        Some(n) => {
            config.snapshot_every = n;
            format!("resume_every_{n}_")
        }
        None => "resume_".to_string(),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let dir = scratch_dir(&format!("{prefix}db"));
    let store = harness_benchmarks::store(&args, &dir);
    let name = harness_benchmarks::store_name(&args);
    let prefix = format!("{}{prefix}", harness_benchmarks::figure_prefix(&args));
    let agent = agent(store.clone(), config)?;
    let session = SessionId::from("long");
    rt.block_on(async {
        let state = Notes {
            limit: steps,
            n: 0,
            last: String::new(),
            answers: vec![],
        };
        let out = agent.run_in(session.clone(), state).await?;
        let mut pending = out.interrupt.ok_or("the session did not pause")?.id;
        let (mut resumed, mut paused, mut rebuilt) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..samples {
            let start = Instant::now();
            let run = agent.resume("yes", &session, &pending).await?;
            resumed.push(start.elapsed());
            let out = run.await?;
            paused.push(start.elapsed());
            pending = out.interrupt.ok_or("the session did not pause again")?.id;
            let start = Instant::now();
            let state = agent.state_at(&session, None).await?;
            rebuilt.push(start.elapsed());
            if state.n != steps {
                return Err("the state was not rebuilt".into());
            }
        }
        let bytes = bytes_on_disk(&dir);
        // The session's own records, as the store keeps them: sled's
        // segments make the bytes on disk move in 128 KiB steps.
        let log: usize = SessionStore::checkpoints(&*store, &session, 0)
            .await?
            .iter()
            .map(|cp| serde_json::to_vec(cp).map_or(0, |v| v.len()))
            .sum();
        let (resumed, paused, rebuilt) = (median(resumed), median(paused), median(rebuilt));
        println!(
            "{steps}-step session on {name}: resume {resumed:.3} ms (of which reading and \
             rebuilding the state {rebuilt:.3} ms), until paused again {paused:.3} ms; \
             {bytes} bytes on disk, {log} bytes of checkpoints"
        );
        result(&format!("{prefix}ms"), resumed);
        result(&format!("{prefix}state_ms"), rebuilt);
        result(&format!("{prefix}to_pause_ms"), paused);
        result(&format!("{prefix}bytes"), bytes as f64);
        result(&format!("{prefix}log_bytes"), log as f64);
        Ok(())
    })
}
