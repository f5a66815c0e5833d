//! One replica of a server on PostgreSQL, for the replica tests (and to
//! try replicas by hand): it serves the `steps` agent (three steps, each
//! appending its name to the state's `trail` and a line to the effect log
//! `DIR/effects`, `STEP PID`, as it begins; step `two` then takes `TWO_MS`
//! milliseconds) and prints `{"addr": …}` once it listens.
//!
//! ```text
//! cargo run -p harness-server --example replica -- \
//!     --store postgres://postgres@127.0.0.1:55432/harness --schema replicas --dir /tmp/r
//! ```
//!
//! Leases are short (1 s), so that a replica killed mid-run is taken over
//! quickly. With `--single`, it is a server of its own (no
//! [`Replicas`]): its runs are kept in its memory, its threads in the store.
//! A `--store` that is not a `postgres://` URL is the directory of a sled
//! store (`--schema` is then not used): one process at a time, whose runs,
//! as a replica's, are kept in the store and outlive it.

use harness::session::SessionConfig;
use harness::session::SessionStore;
use harness::{Cx, Harness, HarnessState, JsonSchema, StepResult, create_agent, schemars};
use harness_server::{Replicas, Server};
use harness_stores::{PostgresOptions, PostgresStore, SledStore};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// The steps a run went through.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
struct Steps {
    #[field(reduce = append)]
    trail: Vec<String>,
}

static DIR: OnceLock<PathBuf> = OnceLock::new();

/// How long step `two` takes (`TWO_MS`, default 1 500 ms).
fn two_ms() -> u64 {
    std::env::var("TWO_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1500)
}

/// Appends `line` to the effect log.
fn effect(line: &str) {
    let dir = DIR.get().expect("the directory is set at start");
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("effects"))
        .expect("the effect log opens");
    writeln!(log, "{line}").expect("the effect log takes a line");
}

fn step(name: &'static str) -> impl Fn(Arc<Steps>, Cx<()>) -> StepFuture + Clone {
    move |_, _| {
        Box::pin(async move {
            let pid = std::process::id();
            effect(&format!("{name} {pid}"));
            if name == "two" {
                tokio::time::sleep(Duration::from_millis(two_ms())).await;
            }
            Ok(StepsUpdate::new().trail(vec![name.to_string()]))
        })
    }
}

type StepFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = StepResult<StepsUpdate>> + Send>>;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (mut url, mut schema, mut dir) = (None, None, None);
    let mut single = false;
    while let Some(flag) = args.next() {
        if flag == "--single" {
            single = true;
            continue;
        }
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--store" => url = Some(value),
            "--schema" => schema = Some(value),
            "--dir" => dir = Some(PathBuf::from(value)),
            other => return Err(format!("unknown option {other}").into()),
        }
    }
    let url = url.ok_or("--store postgres://… (or a sled directory) is required")?;
    let dir = dir.ok_or("--dir is required")?;
    DIR.set(dir).map_err(|_| "the directory is set once")?;
    if !url.starts_with("postgres") && url.contains("://") {
        return Err(format!("--store {url}: a postgres:// URL or a sled directory").into());
    }
    if schema.is_some() && !url.starts_with("postgres") {
        return Err("--schema applies to a PostgreSQL store only".into());
    }
    let store: Arc<dyn SessionStore> = if url.starts_with("postgres") {
        let options = PostgresOptions::default()
            .schema(schema.unwrap_or_else(|| "harness".into()))
            .claim_ttl(Duration::from_millis(500));
        Arc::new(PostgresStore::connect_with(&url, options).await?)
    } else {
        Arc::new(SledStore::open(&url)?)
    };
    let harness = Harness::<Steps>::builder()
        .step("one")
        .run(step("one"))
        .next("two")
        .step("two")
        .run(step("two"))
        .next("three")
        .step("three")
        .run(step("three"))
        .end()
        .start("one")
        .store(Arc::clone(&store))
        .session_config(SessionConfig {
            lease_ttl: Duration::from_secs(1),
            ..SessionConfig::default()
        })
        .build()?;
    let agent = create_agent("steps", &harness);
    let mut server = Server::new().agent(&agent, &harness).store(store);
    if !single {
        server = server.replicas(
            Replicas::new()
                .lease(Duration::from_secs(1))
                .poll(Duration::from_millis(50)),
        );
    }
    let bound = server.bind("127.0.0.1:0".parse()?).await?;
    println!(
        "{}",
        serde_json::json!({ "addr": bound.addr().to_string() })
    );
    bound
        .serve(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
