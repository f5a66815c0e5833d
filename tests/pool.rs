//! The pool used by the contention test: a job loop whose every step records
//! which process ran it.

use harness::session::{SessionConfig, SessionStore, StoreError};
use harness::{Agent, Cx, Harness, HarnessState, StepResult, create_agent};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::sync::Arc;

/// Steps in each job.
pub const STEPS_PER_JOB: u32 = 5;

/// A job: each step appends (step number, process id).
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
pub struct Job {
    /// Every step that ran, with the process that ran it.
    #[field(reduce = append)]
    pub ticks: Vec<(u32, u32)>,
    /// How many steps the job runs ([`STEPS_PER_JOB`] unless set).
    #[field(default = STEPS_PER_JOB)]
    pub steps: u32,
}

impl Job {
    /// A job of `steps` steps (`Job::default()` has [`STEPS_PER_JOB`]).
    pub fn with_steps(steps: u32) -> Self {
        Self {
            ticks: Vec::new(),
            steps,
        }
    }
}

async fn tick(s: Arc<Job>, cx: Cx<Announce>) -> StepResult<JobUpdate> {
    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    if cx.announce {
        // The parent counts these to kill a worker mid-run.
        let mut out = std::io::stdout();
        let _ = writeln!(out, "tick");
        let _ = out.flush();
    }
    let n = s.ticks.len() as u32 + 1;
    Ok(JobUpdate::new().ticks(vec![(n, std::process::id())]))
}

/// Whether steps print a line when they run.
#[derive(Debug, harness::Context)]
pub struct Announce {
    /// Print `tick` per step.
    #[slot(fixed)]
    pub announce: bool,
}

/// The job agent on `store`.
pub fn agent_on(
    store: Arc<dyn SessionStore>,
    config: SessionConfig,
    announce: bool,
) -> Result<Agent<Job, Announce>, Box<dyn std::error::Error>> {
    let harness = Harness::<Job, Announce>::builder_with(AnnounceFixed { announce })
        .step("tick")
        .run(tick)
        .route(|s: &Job| {
            if (s.ticks.len() as u32) < s.steps {
                "again"
            } else {
                "done"
            }
        })
        .on("again")
        .to("tick")
        .on("done")
        .end()
        .start("tick")
        .store(store)
        .session_config(config)
        .build()?;
    Ok(create_agent("pool", &harness))
}

/// Connects to the `backend` (`postgres` or `redis`) store at `url`, in
/// `namespace` (a schema or a key prefix).
pub async fn connect(
    backend: &str,
    url: &str,
    namespace: &str,
) -> Result<Arc<dyn SessionStore>, StoreError> {
    Ok(match backend {
        "postgres" => Arc::new(
            harness_stores::PostgresStore::connect_with(
                url,
                harness_stores::PostgresOptions::default().schema(namespace),
            )
            .await?,
        ),
        "redis" => Arc::new(
            harness_stores::RedisStore::connect_with(
                url,
                harness_stores::RedisOptions::default().prefix(namespace),
            )
            .await?,
        ),
        other => return Err(StoreError::backend(format!("unknown backend {other}"))),
    })
}
