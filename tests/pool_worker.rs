//! A worker process for the pool contention test: takes runnable sessions
//! from a shared PostgreSQL or Redis store until it is killed.
//!
//! `pool_worker postgres|redis URL NAMESPACE LEASE_MS`

use harness::session::SessionConfig;
use harness::worker::Worker;
use harness_tests::pool::{agent_on, connect};
use std::time::Duration;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, backend, url, namespace, lease_ms] = args.as_slice() else {
        return Err("usage: pool_worker postgres|redis URL NAMESPACE LEASE_MS".into());
    };
    let store = connect(backend, url, namespace).await?;
    let config = SessionConfig {
        lease_ttl: Duration::from_millis(lease_ms.parse()?),
        ..SessionConfig::default()
    };
    let agent = agent_on(store, config, true)?;
    Worker::new(agent)
        .poll_interval(Duration::from_millis(20))
        .run_until(std::future::pending())
        .await?;
    Ok(())
}
