//! `restate-probe`: a bare Restate virtual object, `Probe`, written with the
//! official Rust SDK. Its `run` handler makes `steps` journaled effects
//! (`ctx.run`), each appending a line `effect {i} by {pid}` to the file named
//! after the object's key in `PROBE_DIR` (`{tag}effect {i} by {pid}`); with `PROBE_HANG_AFTER=i` the
//! handler hangs after effect `i` (for a test to kill the process there),
//! once `{key}.hung` is created in `PROBE_DIR`.
//! With `PROBE_CLOCK=1` (the benchmark, `benchmarks/scripts/bench-restate`)
//! an effect writes no file: it returns `{tag}effect {i} at {µs}`, the time
//! it ran in microseconds since the epoch.
//! With `PROBE_NODELAY=1` its connections set `TCP_NODELAY` (the SDK's
//! `listen_and_serve` leaves Nagle's algorithm on).
//!
//! ```text
//! PROBE_DIR=/tmp/probe restate-probe 127.0.0.1:9080
//! ```

// The SDK's `#[object]` macro generates items without docs.
#![allow(missing_docs)]

#[path = "shared/clock.rs"]
mod clock;
use clock::micros_now;

use std::path::PathBuf;
use std::time::Duration;

use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;

/// What `run` is asked.
#[derive(Debug, Serialize, Deserialize)]
struct Input {
    /// How many effects to make.
    steps: u32,
    /// Written on each effect's line, to tell invocations apart.
    #[serde(default)]
    tag: String,
    /// How long each effect takes.
    #[serde(default)]
    pause_ms: u64,
}

/// What `run` answers.
#[derive(Debug, Serialize, Deserialize)]
struct Output {
    /// The value each effect returned, as journaled.
    effects: Vec<String>,
}

struct Probe {
    dir: PathBuf,
    hang_after: Option<u32>,
    /// `PROBE_CLOCK`: effects return the time they ran, and write nothing.
    clock: bool,
}

#[object]
impl Probe {
    #[handler]
    async fn run(
        &self,
        ctx: ObjectContext<'_>,
        input: Json<Input>,
    ) -> Result<Json<Output>, HandlerError> {
        let key = ctx.key().to_owned();
        let file = self.dir.join(format!("{key}.log"));
        let mut effects = Vec::new();
        let Input {
            steps,
            tag,
            pause_ms,
        } = input.0;
        for i in 0..steps {
            let file = file.clone();
            let tag = tag.clone();
            let clock = self.clock;
            let done: String = ctx
                .run(|| async move {
                    if clock {
                        return Ok(format!("{tag}effect {i} at {}", micros_now()));
                    }
                    tokio::time::sleep(Duration::from_millis(pause_ms)).await;
                    let line = format!("{tag}effect {i} by {}\n", std::process::id());
                    let mut f = tokio::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(&file)
                        .await
                        .map_err(|e| TerminalError::new(e.to_string()))?;
                    f.write_all(line.as_bytes())
                        .await
                        .map_err(|e| TerminalError::new(e.to_string()))?;
                    f.sync_all()
                        .await
                        .map_err(|e| TerminalError::new(e.to_string()))?;
                    Ok(line.trim_end().to_owned())
                })
                .name(format!("effect-{i}"))
                .await?;
            effects.push(done);
            if self.hang_after == Some(i) {
                // `{key}.hung`: effect `i` is journaled (`ctx.run` returned
                // once Restate acknowledged it), for a test to kill here.
                let _ = std::fs::File::create(self.dir.join(format!("{key}.hung")));
                tokio::time::sleep(Duration::from_secs(600)).await;
            }
        }
        Ok(Json(Output { effects }))
    }
}

#[tokio::main]
async fn main() {
    let Some(addr) = std::env::args().nth(1).and_then(|a| a.parse().ok()) else {
        eprintln!("usage: PROBE_DIR=DIR restate-probe 127.0.0.1:PORT");
        std::process::exit(2);
    };
    let dir = PathBuf::from(std::env::var("PROBE_DIR").unwrap_or_else(|_| ".".into()));
    let hang_after = std::env::var("PROBE_HANG_AFTER")
        .ok()
        .and_then(|v| v.parse().ok());
    let clock = std::env::var("PROBE_CLOCK").is_ok_and(|v| v == "1");
    let server = HttpServer::new(
        Endpoint::builder()
            .bind(Probe {
                dir,
                hang_after,
                clock,
            })
            .build(),
    );
    if std::env::var("PROBE_NODELAY").is_ok_and(|v| v == "1") {
        match harness_restate::nodelay_listener(addr) {
            Ok(listener) => {
                println!("listening on {addr}");
                server.serve(listener).await;
            }
            Err(e) => {
                eprintln!("restate-probe: cannot listen on {addr}: {e}");
                std::process::exit(1);
            }
        }
    } else {
        println!("listening on {addr}");
        server.listen_and_serve(addr).await;
    }
}
