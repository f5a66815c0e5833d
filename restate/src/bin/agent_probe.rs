//! `restate-agent-probe`: a harness agent served as Restate's `HarnessAgent`
//! virtual object, for the tests and the benchmark.
//!
//! Its loop: `work` makes `PROBE_EFFECTS` (3) journaled effects (`cx.once`),
//! each appending `{tag}effect {i} by {pid}` to `{PROBE_DIR}/{session}.log`
//! and taking `PROBE_PAUSE_MS`; then, when the state's `approve` is set,
//! `ask` waits for a yes or no (`bool`) and makes one more effect,
//! `shipped` or `held`. When the state's `parts` is not empty, `work` fans
//! out instead: one `part` branch per entry, each making two effects
//! (`{tag}part {p} effect {i} by {pid}`, after `PROBE_PAUSE_MS`), joined by
//! `gather`; as each starts, it appends how many part effects run in the
//! process (itself too) to `{PROBE_DIR}/{session}.overlap`. With
//! `PROBE_HANG_AFTER=i` the step hangs after effect `i` (for a test to kill
//! the process there); with `PROBE_HANG_PART=p` as well, the hang is in
//! part `p` after its effect `i` instead. Either hangs once per file named
//! by `PROBE_HANG_ONCE` if that is set. `PROBE_KEY_PREFIX` is put before
//! each effect's key: a service restarted with another prefix asks for
//! other effects than its journal holds (a divergence, for the tests);
//! `PROBE_DIVERGE_PART=p` puts `v2-` before part `p`'s keys only (a
//! divergence inside a round).
//! With `PROBE_CLOCK=1` (the
//! benchmark, `benchmarks/scripts/bench-restate`) an effect writes no file
//! and takes no pause: it returns `{tag}effect {i} at {µs}`, the time it ran
//! in microseconds since the epoch.
//! With `PROBE_NODELAY=1` its connections set `TCP_NODELAY` (the SDK's
//! `listen_and_serve` leaves Nagle's algorithm on).
//!
//! ```text
//! PROBE_DIR=/tmp/probe restate-agent-probe 127.0.0.1:9080
//! ```

#[path = "shared/clock.rs"]
mod clock;
use clock::micros_now;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use harness::{Cx, Harness, HarnessState, StepError, StepResult, create_agent};
use harness_restate::Durable;
use restate_sdk::prelude::{Endpoint, HttpServer};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;

/// The probe's state.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Job {
    /// What the effects returned, in order.
    #[field(reduce = append)]
    log: Vec<String>,
    /// Runs of `work` on this session.
    #[field(reduce = add)]
    runs: u32,
    /// Written on each effect's line.
    tag: String,
    /// Whether to ask for approval after `work`.
    approve: bool,
    /// One `part` branch per entry after `work`, when not empty.
    parts: Vec<u32>,
    /// Kept, never read: each run may overwrite it (so that its session
    /// takes snapshots, for the tests).
    note: String,
}

struct Settings {
    dir: PathBuf,
    effects: u32,
    pause: Duration,
    hang_after: Option<u32>,
    hang_once: Option<PathBuf>,
    /// `PROBE_HANG_PART`: the part that hangs (after its effect
    /// `hang_after`), instead of `work`.
    hang_part: Option<u32>,
    key_prefix: String,
    /// `PROBE_DIVERGE_PART`: the part whose effects' keys get `v2-` before
    /// them (a divergence inside a round, for the tests).
    diverge_part: Option<u32>,
    /// `PROBE_CLOCK`: effects return the time they ran, and write nothing.
    clock: bool,
    run_tag: bool,
}

async fn append(file: &Path, line: &str) -> Result<(), StepError> {
    let mut f = tokio::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .await?;
    f.write_all(format!("{line}\n").as_bytes()).await?;
    f.sync_all().await?;
    Ok(())
}

async fn work(s: Arc<Job>, cx: Cx<()>, set: Arc<Settings>) -> StepResult<JobUpdate> {
    let file = set.dir.join(format!("{}.log", cx.session_id()));
    let mut log = Vec::new();
    for i in 0..set.effects {
        if set.clock {
            let tag = &s.tag;
            let done: String = cx
                .once(&format!("effect-{i}"), async {
                    format!("{tag}effect {i} at {}", micros_now())
                })
                .await?;
            log.push(done);
            continue;
        }
        let line = format!("{}effect {i} by {}", s.tag, std::process::id());
        let done: String = cx
            .try_once(&format!("{}effect-{i}", set.key_prefix), async {
                tokio::time::sleep(set.pause).await;
                append(&file, &line).await.map(|()| line.clone())
            })
            .await?;
        log.push(done);
        if set.hang_part.is_none() && set.hang_after == Some(i) {
            hang(&set).await;
        }
    }
    let update = JobUpdate::new().log(log).runs(1);
    if set.run_tag {
        // Made from the run's id, straight into the state (not through
        // `once`): a replay must see the same id.
        return Ok(update.note(format!("run {}", &cx.run_id().as_str()[..8])));
    }
    Ok(update)
}

/// Hangs (for a test to kill the process), once per `PROBE_HANG_ONCE` file.
async fn hang(set: &Settings) {
    let first = match &set.hang_once {
        Some(marker) => std::fs::File::create_new(marker).is_ok(),
        None => true,
    };
    if first {
        tokio::time::sleep(Duration::from_secs(600)).await;
    }
}

/// The `part` effects running in this process now.
static PARTS_RUNNING: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

async fn part(p: u32, s: Arc<Job>, cx: Cx<()>, set: Arc<Settings>) -> StepResult<JobUpdate> {
    let file = set.dir.join(format!("{}.log", cx.session_id()));
    let overlap = set.dir.join(format!("{}.overlap", cx.session_id()));
    let mut log = Vec::new();
    for i in 0..2 {
        let line = format!("{}part {p} effect {i} by {}", s.tag, std::process::id());
        let done: String = cx
            .try_once(
                &format!(
                    "{}part-{p}-effect-{i}",
                    if set.diverge_part == Some(p) {
                        "v2-"
                    } else {
                        ""
                    }
                ),
                async {
                    use std::sync::atomic::Ordering::SeqCst;
                    // How many part effects run as this one starts (itself too).
                    let now = PARTS_RUNNING.fetch_add(1, SeqCst) + 1;
                    let ran = async {
                        append(&overlap, &now.to_string()).await?;
                        tokio::time::sleep(set.pause).await;
                        append(&file, &line).await.map(|()| line.clone())
                    }
                    .await;
                    PARTS_RUNNING.fetch_sub(1, SeqCst);
                    ran
                },
            )
            .await?;
        log.push(done);
        if set.hang_part == Some(p) && set.hang_after == Some(i) {
            hang(&set).await;
        }
    }
    Ok(JobUpdate::new().log(log))
}

async fn ask(_: Arc<Job>, cx: Cx<()>, set: Arc<Settings>) -> StepResult<JobUpdate> {
    let ship: bool = cx.interrupt("ship it?")?;
    let file = set.dir.join(format!("{}.log", cx.session_id()));
    let line = if ship { "shipped" } else { "held" };
    let done: String = cx
        .try_once("ship", async {
            append(&file, line).await.map(|()| line.to_string())
        })
        .await?;
    Ok(JobUpdate::new().log(vec![done]))
}

fn env_num(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Some(addr) = std::env::args().nth(1).and_then(|a| a.parse().ok()) else {
        eprintln!("usage: PROBE_DIR=DIR restate-agent-probe 127.0.0.1:PORT");
        std::process::exit(2);
    };
    let set = Arc::new(Settings {
        dir: PathBuf::from(std::env::var("PROBE_DIR").unwrap_or_else(|_| ".".into())),
        effects: env_num("PROBE_EFFECTS").map_or(3, |n| u32::try_from(n).unwrap_or(3)),
        pause: Duration::from_millis(env_num("PROBE_PAUSE_MS").unwrap_or(0)),
        hang_after: env_num("PROBE_HANG_AFTER").and_then(|n| u32::try_from(n).ok()),
        hang_once: std::env::var("PROBE_HANG_ONCE").ok().map(PathBuf::from),
        hang_part: env_num("PROBE_HANG_PART").and_then(|n| u32::try_from(n).ok()),
        key_prefix: std::env::var("PROBE_KEY_PREFIX").unwrap_or_default(),
        diverge_part: env_num("PROBE_DIVERGE_PART").and_then(|n| u32::try_from(n).ok()),
        clock: std::env::var("PROBE_CLOCK").is_ok_and(|v| v == "1"),
        run_tag: std::env::var("PROBE_RUN_TAG").is_ok_and(|v| v == "1"),
    });
    let durable = Durable::new();
    let (a, b, c) = (Arc::clone(&set), Arc::clone(&set), Arc::clone(&set));
    let harness = Harness::<Job>::builder()
        .step("work")
        .run(move |s: Arc<Job>, cx: Cx<()>| work(s, cx, Arc::clone(&a)))
        .route(|s: &Job| {
            if !s.parts.is_empty() {
                "spread"
            } else if s.approve {
                "ask"
            } else {
                "done"
            }
        })
        .on("spread")
        .fan_out("part", |s: &Job| s.parts.clone())
        .join("gather")
        .on("ask")
        .to("ask")
        .on("done")
        .end()
        .step("part")
        .run_each(move |p: u32, s: Arc<Job>, cx: Cx<()>| part(p, s, cx, Arc::clone(&c)))
        .writes(["log"])
        .next("gather")
        .step("gather")
        .run(async |_: Arc<Job>| Ok(JobUpdate::new()))
        .end()
        .step("ask")
        .run(move |s: Arc<Job>, cx: Cx<()>| ask(s, cx, Arc::clone(&b)))
        .end()
        .start("work")
        .store(durable.store())
        .effects(durable.effects())
        .build()?;
    let object = durable.object(create_agent("probe", &harness))?;
    let server = HttpServer::new(Endpoint::builder().bind(object).build());
    if std::env::var("PROBE_NODELAY").is_ok_and(|v| v == "1") {
        let listener = harness_restate::nodelay_listener(addr)?;
        println!("listening on {addr}");
        server.serve(listener).await;
    } else {
        println!("listening on {addr}");
        server.listen_and_serve(addr).await;
    }
    Ok(())
}
