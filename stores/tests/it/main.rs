//! The tests of harness-stores, in one binary: the conformance suite
//! against every store, and what each store promises beyond it (its layout,
//! crash leftovers, permissions, migrations, finding work).
//!
//! The layout tests read and damage records through each store's documented
//! layout (its rustdoc), not through the crate's internals: they pin the
//! stored format that existing data depends on.
//!
//! The PostgreSQL and Redis tests (features `postgres` and `redis`) take the
//! servers' URLs from `HARNESS_TEST_POSTGRES_URL` and
//! `HARNESS_TEST_REDIS_URL`, which `scripts/services` starts and prints:
//!
//! ```text
//! eval "$(scripts/services)"
//! cargo test -p harness-stores --features postgres,redis
//! ```
//!
//! A server test whose variable is unset fails, unless
//! `HARNESS_SKIP_SERVER_TESTS=1` (for machines without the servers; CI never
//! sets it). Every store gets a schema or key prefix of its own, random per
//! run, dropped at the end.

#![allow(clippy::unwrap_used)]

mod counters;
mod depth;
mod file;
mod log_gaps;
mod log_read_only;
mod log_store;
mod memory;
mod memory_backends;
mod memory_throughput;
mod permissions;
mod resume;
mod saved_value;
#[cfg(any(feature = "postgres", feature = "redis"))]
mod servers;
#[cfg(feature = "sled")]
mod sled_blobs;
#[cfg(feature = "sled")]
mod sled_crash;
#[cfg(feature = "sled")]
mod sled_damage;
#[cfg(feature = "sled")]
mod sled_foreign;
#[cfg(feature = "sled")]
mod sled_store;

use harness::SessionId;
use harness::session::{Commit, SessionStore};
use harness_stores::conformance::{create, head, snapshot, update};
use serde_json::json;

/// What the corruption hooks write: not JSON.
const GARBAGE: &[u8] = b"\x00garbage{\"not\": json";

fn id(s: &str) -> SessionId {
    SessionId::from(s)
}

/// Opens what `open` opens, retrying for up to 60 seconds while it fails:
/// sled releases a database's lock only when the last handle to it is gone,
/// and some are held for a moment by sled's own threads after the
/// application dropped its last one, so reopening a database in the process
/// that just closed it can fail with "could not acquire lock".
#[cfg(feature = "sled")]
fn reopen<T, E: std::fmt::Debug>(mut open: impl FnMut() -> Result<T, E>) -> T {
    let mut last = None;
    for _ in 0..600 {
        match open() {
            Ok(opened) => return opened,
            Err(e) => last = Some(e),
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("cannot reopen the sled database: {last:?}")
}

/// Creates `session` with a snapshot and `updates` updates.
async fn create_sample(store: &dyn SessionStore, session: &str, updates: u64) -> Commit {
    let mut append = vec![snapshot(0, 0, json!({"n": 0}))];
    append.extend((1..=updates).map(|i| update(i, i, "think", json!({"n": i}))));
    let commit = create(head(session), append);
    store.commit(&commit.clone()).await.unwrap();
    commit
}
