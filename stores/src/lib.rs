//! Session stores for [`harness`]: where runs keep their checkpoints so that
//! they survive the process.
//!
//! - [`MemoryStore`]: in memory, for tests and short-lived processes;
//! - [`FileStore`]: one directory per session, atomic writes, shareable by
//!   several processes;
//! - [`LogStore`]: every session in one append-only log file indexed in
//!   memory, with group commit: the embedded store for many sessions at
//!   once;
//! - `SledStore` (feature `sled`, on by default): the embedded default, a
//!   sled database flushed before a checkpoint counts as durable;
//! - `PostgresStore` (feature `postgres`): sessions in PostgreSQL, shared by
//!   any number of processes and machines, with versioned migrations;
//! - `RedisStore` (feature `redis`): sessions in Redis, each commit one Lua
//!   script; as durable as the server's persistence settings.
//!
//! With the `conformance` feature, `harness_stores::conformance` is a
//! suite any [`SessionStore`](harness::session::SessionStore) can run
//! against itself in its tests.
//!
//! ```
//! use harness::session::SessionStore;
//! use harness_stores::FileStore;
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let dir = std::env::temp_dir().join(format!("harness-doc-{}", std::process::id()));
//! let store = FileStore::open(&dir)?;
//! assert!(store.sessions().await?.is_empty());
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok::<(), harness::session::StoreError>(())
//! # }).unwrap();
//! ```

#[cfg(any(feature = "postgres", feature = "redis"))]
mod clock;
#[cfg(feature = "conformance")]
pub mod conformance;
mod feed;
mod file;
mod group;
mod log_store;
mod memory;
#[cfg(any(feature = "sled", feature = "redis"))]
mod memory_codec;
#[cfg(feature = "conformance")]
pub mod memory_conformance;
#[cfg(feature = "postgres")]
mod memory_postgres;
#[cfg(feature = "redis")]
mod memory_redis;
#[cfg(feature = "sled")]
mod memory_sled;
#[cfg(feature = "postgres")]
mod postgres;
// Its copying and locking helpers serve the sled store only.
#[cfg_attr(not(feature = "sled"), allow(dead_code))]
mod read_only;
mod record;
#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "sled")]
mod sled_audit;
#[cfg(feature = "sled")]
mod sled_store;

/// The sled crate this store is built on, for [`SledStore::with_config`].
#[cfg(feature = "sled")]
pub use ::sled;
pub use file::FileStore;
pub use log_store::{LogOptions, LogStore};
pub use memory::MemoryStore;
#[cfg(feature = "postgres")]
pub use memory_postgres::{PostgresMemory, PostgresMemoryOptions};
#[cfg(feature = "redis")]
pub use memory_redis::RedisMemory;
#[cfg(feature = "sled")]
pub use memory_sled::SledMemory;
#[cfg(feature = "postgres")]
pub use postgres::{PostgresOptions, PostgresStore};
pub use read_only::{Damage, ReadOnlyError};
#[cfg(feature = "redis")]
pub use redis::{MIN_REDIS_VERSION, RedisOptions, RedisStore};
#[cfg(feature = "sled")]
pub use sled_store::SledStore;
