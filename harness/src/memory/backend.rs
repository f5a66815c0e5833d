//! What a backend of long-term memory implements ([`MemoryBackend`]), the
//! records it keeps, the clock TTLs are judged by, and the in-memory
//! backend ([`InMemory`]).

use super::types::{Filter, Item, MemoryError, Namespace};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// What a backend keeps for an item: the item, its time to live (to
/// refresh it), and the vector of its indexed text (unit length), if it is
/// indexed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The item.
    pub item: Item,
    /// Its time to live in ms, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// The embedding of its indexed text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vector: Option<Vec<f32>>,
}

impl Record {
    /// Whether it has not expired at `now`.
    pub fn is_live(&self, now: u64) -> bool {
        self.item.expires_at.is_none_or(|at| now < at)
    }
}

/// A change a backend applies.
#[derive(Clone, Debug, PartialEq)]
pub enum Write {
    /// Puts the record at its namespace and key. If a live record is
    /// there, the new one keeps its `created_at`.
    Put(Record),
    /// Deletes the record at `namespace`/`key`, if any.
    Delete {
        /// The namespace.
        namespace: Namespace,
        /// The key.
        key: String,
    },
    /// Sets a live record's expiry (a TTL refreshed by a read) if it still
    /// expires at `from`, the expiry the read saw; nothing if there is no
    /// live record, or if it was put again since (a put without a TTL made
    /// it permanent, or one with another TTL gave it its own expiry: a
    /// refresh of what was read must change neither).
    Touch {
        /// The namespace.
        namespace: Namespace,
        /// The key.
        key: String,
        /// The new expiry, ms since the epoch.
        expires_at: u64,
        /// The expiry the record had when it was read, ms since the epoch.
        from: u64,
    },
}

/// Where long-term memory is kept: one per kind of store. A backend keeps
/// records and finds them by namespace, key and filters; the semantic
/// index, validation and TTLs are the [`Memory`](super::Memory)'s above
/// it. Expired records (`expires_at <= now`) are never returned, whether
/// or not anything has removed them: expiry needs no sweeper to be
/// correct.
///
/// The conformance suite of `harness-stores` (`memory_conformance`)
/// checks a backend against this contract.
#[async_trait]
pub trait MemoryBackend: Send + Sync + fmt::Debug {
    /// Applies `writes` in order, all or nothing; `now` tells which records
    /// are live (a put over an expired record starts it afresh). Returns,
    /// for each [`Write::Put`] in order, the `created_at` the stored item
    /// has (the replaced live item's, or the put's own).
    async fn apply(&self, writes: Vec<Write>, now: u64) -> Result<Vec<u64>, MemoryError>;

    /// The live record at `namespace`/`key`.
    async fn get(
        &self,
        namespace: &Namespace,
        key: &str,
        now: u64,
    ) -> Result<Option<Record>, MemoryError>;

    /// The live records under `prefix` that every filter admits, in
    /// namespace then key order, after skipping `offset`, at most `limit`.
    async fn search(
        &self,
        prefix: &Namespace,
        filters: &[Filter],
        offset: usize,
        limit: usize,
        now: u64,
    ) -> Result<Vec<Record>, MemoryError>;

    /// Every namespace that holds a live record, each once.
    async fn namespaces(&self, now: u64) -> Result<Vec<Namespace>, MemoryError>;

    /// Every live record, with its vector: what the semantic index is
    /// built from when it is first used.
    async fn scan(&self, now: u64) -> Result<Vec<Record>, MemoryError> {
        self.search(&Namespace::root(), &[], 0, usize::MAX, now)
            .await
    }
}

/// The clock that times to live are judged by, in ms since the Unix epoch.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Now.
    fn now(&self) -> u64;
}

/// This machine's clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> u64 {
        crate::clock::now_millis()
    }
}

/// A clock that moves only when told: for tests of expiry.
///
/// ```
/// use harness::memory::{Clock, ManualClock};
///
/// let clock = ManualClock::at(1_000);
/// clock.advance(std::time::Duration::from_secs(2));
/// assert_eq!(clock.now(), 3_000);
/// ```
#[derive(Debug, Default)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    /// A clock at `ms`.
    pub fn at(ms: u64) -> Self {
        Self(AtomicU64::new(ms))
    }

    /// Moves it forward.
    pub fn advance(&self, by: std::time::Duration) {
        let ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.0.fetch_add(ms, Ordering::SeqCst);
    }

    /// Sets it.
    pub fn set(&self, ms: u64) {
        self.0.store(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

impl<C: Clock + ?Sized> Clock for std::sync::Arc<C> {
    fn now(&self) -> u64 {
        (**self).now()
    }
}

type Key = (Namespace, String);

/// Long-term memory in this process only, gone when it ends: for tests,
/// examples and short-lived agents. Expired records are dropped as writes
/// come by.
#[derive(Debug, Default)]
pub struct InMemory {
    records: Mutex<BTreeMap<Key, Record>>,
}

impl InMemory {
    /// An empty memory.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, BTreeMap<Key, Record>>, MemoryError> {
        self.records
            .lock()
            .map_err(|_| MemoryError::backend("the in-memory backend's lock is poisoned"))
    }
}

/// Applies `writes` to `records`; the created times of the puts.
fn apply_to(records: &mut BTreeMap<Key, Record>, writes: Vec<Write>, now: u64) -> Vec<u64> {
    let mut created = Vec::new();
    for write in writes {
        match write {
            Write::Put(mut record) => {
                let key = (record.item.namespace.clone(), record.item.key.clone());
                if let Some(old) = records.get(&key).filter(|old| old.is_live(now)) {
                    record.item.created_at = old.item.created_at;
                }
                created.push(record.item.created_at);
                records.insert(key, record);
            }
            Write::Delete { namespace, key } => {
                records.remove(&(namespace, key));
            }
            Write::Touch {
                namespace,
                key,
                expires_at,
                from,
            } => {
                if let Some(record) = records
                    .get_mut(&(namespace, key))
                    .filter(|r| r.is_live(now) && r.item.expires_at == Some(from))
                {
                    record.item.expires_at = Some(expires_at);
                }
            }
        }
    }
    created
}

#[async_trait]
impl MemoryBackend for InMemory {
    async fn apply(&self, writes: Vec<Write>, now: u64) -> Result<Vec<u64>, MemoryError> {
        let mut records = self.lock()?;
        // Nothing here fails half way: the writes are applied in place.
        Ok(apply_to(&mut records, writes, now))
    }

    async fn get(
        &self,
        namespace: &Namespace,
        key: &str,
        now: u64,
    ) -> Result<Option<Record>, MemoryError> {
        let records = self.lock()?;
        Ok(records
            .get(&(namespace.clone(), key.to_owned()))
            .filter(|r| r.is_live(now))
            .cloned())
    }

    async fn search(
        &self,
        prefix: &Namespace,
        filters: &[Filter],
        offset: usize,
        limit: usize,
        now: u64,
    ) -> Result<Vec<Record>, MemoryError> {
        let records = self.lock()?;
        Ok(records
            .range((prefix.clone(), String::new())..)
            .take_while(|((ns, _), _)| ns.starts_with(prefix))
            .map(|(_, r)| r)
            .filter(|r| r.is_live(now) && filters.iter().all(|f| f.matches(&r.item.value)))
            .skip(offset)
            .take(limit)
            .cloned()
            .collect())
    }

    async fn namespaces(&self, now: u64) -> Result<Vec<Namespace>, MemoryError> {
        let records = self.lock()?;
        let mut out: Vec<Namespace> = Vec::new();
        for ((ns, _), record) in records.iter() {
            if record.is_live(now) && out.last() != Some(ns) {
                out.push(ns.clone());
            }
        }
        Ok(out)
    }
}
