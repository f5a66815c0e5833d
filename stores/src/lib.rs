//! Session stores for [`harness`]: where runs keep their checkpoints so that
//! they survive the process.
//!
//! - [`MemoryStore`]: in memory, for tests and short-lived processes;
//! - `FileStore`: one directory per session, atomic writes;
//! - `SledStore` (feature `sled`, on by default): the embedded default, a
//!   sled database flushed before a checkpoint counts as durable.
//!
//! [`conformance`] is a suite any [`SessionStore`](harness::session::SessionStore)
//! can run against itself.

mod memory;

pub use memory::MemoryStore;
