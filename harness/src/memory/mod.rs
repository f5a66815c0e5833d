//! Long-term memory: JSON items shared across sessions, under namespaces,
//! found by key, by filters on their fields, and by meaning.
//!
//! A session remembers one conversation; [`Memory`] remembers across them:
//! a user's preferences, facts learned, past decisions, documents to
//! recall. Items are JSON objects under a [`Namespace`] (a path of labels,
//! `users/u-17/preferences`) and a key, with their created and updated
//! times and an optional time to live. A [`Search`] finds items under a
//! namespace prefix that meet [`Filter`]s on their fields (equality and
//! comparisons), a page at a time; with an index ([`IndexConfig`]: an
//! [`Embedder`] and the fields to embed), it also ranks them by closeness
//! of meaning to a text, with scores.
//!
//! ```
//! use harness::memory::{Filter, Memory, Namespace, Search};
//! use serde_json::json;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let memory = Memory::in_memory();
//! let prefs = Namespace::new(["users", "u-17", "preferences"])?;
//! memory.put(&prefs, "language", json!({"value": "Rust", "weight": 9})).await?;
//! memory.put(&prefs, "editor", json!({"value": "helix", "weight": 4})).await?;
//!
//! let item = memory.get(&prefs, "language").await?.expect("it was put");
//! assert_eq!(item.value["value"], "Rust");
//!
//! let user = Namespace::new(["users", "u-17"])?;
//! let strong = memory.search(&Search::under(user).filter(Filter::gt("weight", 5))).await?;
//! assert_eq!(strong.len(), 1);
//! assert_eq!(strong[0].item.key, "language");
//! # Ok::<(), harness::memory::MemoryError>(())
//! # }).unwrap();
//! ```
//!
//! # Where it is kept
//!
//! A [`MemoryBackend`] keeps the records: [`InMemory`] here, and sled,
//! PostgreSQL and Redis backends in `harness-stores`, every one checked by
//! one conformance suite. Validation, times to live and the semantic index
//! are [`Memory`]'s, the same over every backend.
//!
//! The log store (`harness_stores::LogStore`) is not a memory backend, by
//! choice. Its file is a sequence of frames, each one commit of one
//! session (the checkpoints it appends and removes by sequence number, and
//! the session's head), and its index in memory maps sessions to where
//! their frames are. Memory needs another shape: records keyed by
//! namespace and key, replaced and deleted in place, read in namespace
//! order under a prefix, and TTLs refreshed on read. In that log every
//! replacement, delete and refresh would be a new frame (a read would
//! become a write), a prefix search or a field filter would read every
//! item's JSON back from the file (or keep them all in memory, which
//! [`InMemory`] already does), and a second keyspace beside sessions would
//! change the log's format. sled gives the embedded case all of it (an
//! ordered keyspace, prefix scans, atomic batches), so `SledMemory` is the
//! embedded backend; an application keeping its sessions in a log store
//! keeps its memory in a sled directory beside it.
//!
//! # Times to live
//!
//! An item put with a TTL ([`PutOptions::ttl`]) expires that long after it
//! was put, or last read with a refresh ([`Memory::get_refreshing`],
//! [`Search::refresh_ttl`]). Expiry is judged at every read against the
//! memory's [`Clock`]: an expired item is never returned, whether or not
//! anything has removed it yet, so no sweeper is needed for it to be
//! correct.
//!
//! # Search by meaning
//!
//! With [`Memory::with_index`], each put embeds the item's indexed text
//! (the configured fields, or [`IndexFields`] per put) and the backend keeps
//! the vector beside the item. Only puts embed: an item put through a
//! `Memory` without an index (before one was configured, say), with
//! [`IndexFields::Off`], or without any of the indexed fields has no vector
//! (one embedded by a model of another length has none the index can use),
//! and a search by text never returns it (searches by filter do) until it
//! is put again through an indexed `Memory`. Searching by text embeds the query and ranks
//! the items the search admits (prefix, filters, not expired) by cosine
//! similarity, in an index held in this process ([`VectorIndex`]): built
//! from the backend's vectors at the first search by text and kept up to
//! date with the writes made through this `Memory` and its clones; writes
//! made through another `Memory` (in this process or another one) show
//! once [`Memory::reload_index`] has picked them up, and until then a
//! search by text may return an item as it was before them (with
//! [`Search::refresh_ttl`], every hit is read again from the backend, and
//! one no longer there is not returned). Up to [`EXACT_UP_TO`] items it compares every one; from
//! then on it also keeps an HNSW graph (approximate, with recall@10 of 0.95
//! or more at its default settings on sentence embeddings), and each search
//! takes whichever route, exact or the graph, the index has measured to be
//! cheaper for a search with its filter ([`SearchCosts`];
//! [`IndexConfig::kind`] chooses otherwise).
//!
//! The graph is built on a thread of its own, never inside a search or a
//! put (at 100 000 items of 384 numbers a build takes on the order of a
//! minute or two on a small machine). Until it is ready every search is
//! answered exactly: the right answer, only slower. Items put, replaced or
//! deleted meanwhile are neither lost nor returned stale: a build never
//! reads a vector that changes under it, deleted items are never returned,
//! and the items put during a build are linked in when it finishes. A
//! failed build is logged and reported ([`GraphStatus::Failed`],
//! [`Memory::index_stats`]); searches stay exact. [`Memory::wait_for_graph`]
//! waits for a running build (a warm-up; searches never wait).
//! Embeddings are batched (one call per put or batch) and cached by text
//! (a SHA-256 digest of it is kept, not the text: the cache holds at most
//! [`IndexConfig::cache`] vectors, whatever the texts' length).
//! If the embedder fails or times out, the put fails as a whole and nothing
//! is written. [`HashedWords`] is an embedder without a model (texts are
//! close when they share words), for tests and examples.
//!
//! # Bad input
//!
//! An empty or malformed namespace, an empty, long or control-character
//! key, a value that is not an object, is larger than [`MAX_VALUE_BYTES`]
//! or nests deeper than [`MAX_VALUE_DEPTH`], a filter with an empty path or an ordering on
//! something other than numbers and strings, a vector of the wrong length:
//! each is a [`MemoryError`] naming what and where, and nothing is written.
//! Concurrent puts on one key: the last writer wins.

mod backend;
mod hashed;
mod index;
mod types;

pub use backend::{Clock, InMemory, ManualClock, MemoryBackend, Record, SystemClock, Write};
pub use hashed::HashedWords;
pub use index::{
    BuildHook, CATCH_UP_INLINE, EXACT_UP_TO, EXPLORE_EVERY, GraphBuildError, GraphStatus,
    HnswParams, IndexKind, IndexStats, Route, RouteCounts, SearchCosts, VectorIndex, dot,
    normalized,
};
pub use types::{
    Cmp, Filter, Hit, IndexFields, Item, MAX_KEY_BYTES, MAX_LABEL_BYTES, MAX_NAMESPACE_DEPTH,
    MAX_VALUE_BYTES, MAX_VALUE_DEPTH, MemoryError, Namespace, NamespaceQuery, PutOptions, Search,
    lookup,
};

use crate::llm::Embedder;
use serde_json::Value;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How many hits of a search by text with [`Search::refresh_ttl`] are read
/// again from the backend at once.
const REREAD_AT_ONCE: usize = 16;

/// How many locks [`WriteOrder`] spreads keys over.
const WRITE_STRIPES: usize = 64;

/// Keeps the index in the order the backend applied the writes made
/// through one [`Memory`] and its clones: a write holds the locks of its
/// keys' stripes from its backend write until the index has it, so two
/// writes of one key reach the index in the order they reached the
/// backend, while writes of keys on other stripes go on at once.
struct WriteOrder {
    stripes: Box<[tokio::sync::Mutex<()>]>,
    hasher: std::collections::hash_map::RandomState,
}

impl WriteOrder {
    fn new() -> Self {
        Self {
            stripes: (0..WRITE_STRIPES)
                .map(|_| tokio::sync::Mutex::new(()))
                .collect(),
            hasher: std::collections::hash_map::RandomState::new(),
        }
    }

    /// The stripe of `namespace`/`key`.
    fn stripe(&self, namespace: &Namespace, key: &str) -> usize {
        use std::hash::BuildHasher;
        let hash = self.hasher.hash_one((namespace.labels(), key));
        // The remainder is below the stripe count, a usize.
        #[allow(clippy::cast_possible_truncation)]
        let stripe = (hash % self.stripes.len() as u64) as usize;
        stripe
    }

    /// Holds the stripes of the keys `writes` touch, taken in ascending
    /// order (so that writes of several keys never wait on each other in
    /// a circle).
    async fn lock(&self, writes: &[Write]) -> Vec<tokio::sync::MutexGuard<'_, ()>> {
        let mut stripes: Vec<usize> = writes
            .iter()
            .map(|w| match w {
                Write::Put(record) => self.stripe(&record.item.namespace, &record.item.key),
                Write::Delete { namespace, key } | Write::Touch { namespace, key, .. } => {
                    self.stripe(namespace, key)
                }
            })
            .collect();
        stripes.sort_unstable();
        stripes.dedup();
        let mut guards = Vec::with_capacity(stripes.len());
        for stripe in stripes {
            guards.push(self.stripes[stripe].lock().await);
        }
        guards
    }
}

/// How items are embedded for search by meaning.
#[derive(Clone)]
pub struct IndexConfig {
    embedder: Arc<dyn Embedder>,
    dimensions: usize,
    fields: Vec<String>,
    timeout: Duration,
    cache: usize,
    kind: IndexKind,
    hook: Option<BuildHook>,
}

impl fmt::Debug for IndexConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IndexConfig")
            .field("embedder", &self.embedder.model_name())
            .field("dimensions", &self.dimensions)
            .field("fields", &self.fields)
            .field("timeout", &self.timeout)
            .field("kind", &self.kind)
            .field("build_hook", &self.hook.is_some())
            .finish()
    }
}

impl IndexConfig {
    /// Items embedded by `embedder`, whose vectors have `dimensions`
    /// numbers; the whole value is embedded (as JSON text) unless
    /// [`fields`](Self::fields) says otherwise; each embedding call may
    /// take 30 s.
    pub fn new(embedder: Arc<dyn Embedder>, dimensions: usize) -> Self {
        Self {
            embedder,
            dimensions,
            fields: Vec::new(),
            timeout: Duration::from_secs(30),
            cache: 10_000,
            kind: IndexKind::default(),
            hook: None,
        }
    }

    /// Finds the closest items as `kind` says. The default,
    /// [`IndexKind::Auto`], searches exactly up to [`EXACT_UP_TO`] items;
    /// from then on it keeps an HNSW graph too (built once, in the
    /// background, when the index reaches that size, then kept up to date;
    /// searches are exact until it is ready) and each search takes the
    /// route measured to be cheaper for it ([`SearchCosts`]); a search whose
    /// filters admit less than [`HnswParams::exact_below`] of the items is
    /// answered exactly at any size.
    #[must_use]
    pub fn kind(mut self, kind: IndexKind) -> Self {
        self.kind = kind;
        self
    }

    /// Searches through an HNSW graph of `params` at any size
    /// ([`IndexKind::Approximate`]).
    #[must_use]
    pub fn approximate(self, params: HnswParams) -> Self {
        self.kind(IndexKind::Approximate(params))
    }

    /// Calls `hook` on the build thread before each round of a graph build
    /// ([`BuildHook`]): to watch builds, or in tests to hold one while
    /// searches run, or to make one fail.
    #[must_use]
    pub fn build_hook(mut self, hook: BuildHook) -> Self {
        self.hook = Some(hook);
        self
    }

    /// Compares every item at any size ([`IndexKind::Exact`]).
    #[must_use]
    pub fn exact(self) -> Self {
        self.kind(IndexKind::Exact)
    }

    /// Embeds these fields (dotted paths; a string field as its text, any
    /// other as JSON), joined by new lines.
    #[must_use]
    pub fn fields<I, S>(mut self, fields: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.fields = fields.into_iter().map(Into::into).collect();
        self
    }

    /// Gives up on an embedding call after `timeout`.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Keeps the vectors of at most this many texts (default 10 000), each
    /// under a 32-byte digest of its text: the cache holds at most
    /// `texts × (4 × dimensions + 32)` bytes of vectors and digests,
    /// however long the texts. When it is full it is emptied, then filled
    /// again by the texts embedded next; `0` keeps none.
    #[must_use]
    pub fn cache(mut self, texts: usize) -> Self {
        self.cache = texts;
        self
    }
}

/// The vectors of texts embedded in this process, under a digest of each
/// text (a text's length costs the cache nothing), at most
/// [`IndexConfig::cache`] of them.
#[derive(Default)]
struct EmbeddingCache {
    vectors: HashMap<[u8; 32], Arc<[f32]>>,
}

impl EmbeddingCache {
    fn digest(text: &str) -> [u8; 32] {
        use sha2::{Digest, Sha256};
        Sha256::digest(text.as_bytes()).into()
    }

    fn get(&self, text: &str) -> Option<Vec<f32>> {
        self.vectors.get(&Self::digest(text)).map(|v| v.to_vec())
    }

    /// Keeps `vector` for `text`; a full cache is emptied first.
    fn insert(&mut self, text: &str, vector: Vec<f32>, capacity: usize) {
        if capacity == 0 {
            return;
        }
        let key = Self::digest(text);
        if self.vectors.len() >= capacity && !self.vectors.contains_key(&key) {
            self.vectors.clear();
        }
        self.vectors.insert(key, Arc::from(vector));
    }
}

/// The index in this process: the configuration, the vectors of texts
/// seen, and the items with vectors (once loaded).
struct Semantic {
    config: IndexConfig,
    cache: Mutex<EmbeddingCache>,
    index: tokio::sync::RwLock<Option<VectorIndex>>,
}

/// Long-term memory over a [`MemoryBackend`]: see the [module docs](self).
/// Cheap to clone (shared).
#[derive(Clone)]
pub struct Memory {
    backend: Arc<dyn MemoryBackend>,
    clock: Arc<dyn Clock>,
    semantic: Option<Arc<Semantic>>,
    order: Arc<WriteOrder>,
}

impl fmt::Debug for Memory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Memory")
            .field("backend", &self.backend)
            .field("index", &self.semantic.as_ref().map(|s| &s.config))
            .finish()
    }
}

/// One operation of a [`Memory::batch`].
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// [`Memory::put_with`].
    Put {
        /// The namespace.
        namespace: Namespace,
        /// The key.
        key: String,
        /// The value.
        value: Value,
        /// TTL and indexing.
        options: PutOptions,
    },
    /// [`Memory::get`].
    Get {
        /// The namespace.
        namespace: Namespace,
        /// The key.
        key: String,
    },
    /// [`Memory::delete`].
    Delete {
        /// The namespace.
        namespace: Namespace,
        /// The key.
        key: String,
    },
    /// [`Memory::search`].
    Search(Search),
    /// [`Memory::list_namespaces`].
    ListNamespaces(NamespaceQuery),
}

/// The result of one [`Op`].
#[derive(Clone, Debug, PartialEq)]
pub enum OpResult {
    /// A put's item.
    Put(Item),
    /// A get's item, if any.
    Get(Option<Item>),
    /// A delete.
    Delete,
    /// A search's hits.
    Search(Vec<Hit>),
    /// A listing's namespaces.
    ListNamespaces(Vec<Namespace>),
}

/// The text of `value` to embed: `fields` joined by new lines, or the whole
/// value as JSON; `None` when none of the fields is there.
fn text_of(value: &Value, fields: &[String]) -> Option<String> {
    if fields.is_empty() {
        return Some(value.to_string());
    }
    let parts: Vec<String> = fields
        .iter()
        .filter_map(|f| lookup(value, f))
        .map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join("\n"))
}

impl Memory {
    /// Memory kept by `backend`, on this machine's clock, without an index.
    pub fn new(backend: impl MemoryBackend + 'static) -> Self {
        Self::from_arc(Arc::new(backend))
    }

    /// Memory kept by a shared backend.
    pub fn from_arc(backend: Arc<dyn MemoryBackend>) -> Self {
        Self {
            backend,
            clock: Arc::new(SystemClock),
            semantic: None,
            order: Arc::new(WriteOrder::new()),
        }
    }

    /// Memory in this process only ([`InMemory`]).
    pub fn in_memory() -> Self {
        Self::new(InMemory::new())
    }

    /// Judges times to live by `clock`.
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Embeds items for search by meaning ([`Search::text`]).
    #[must_use]
    pub fn with_index(mut self, config: IndexConfig) -> Self {
        self.semantic = Some(Arc::new(Semantic {
            config,
            cache: Mutex::new(EmbeddingCache::default()),
            index: tokio::sync::RwLock::new(None),
        }));
        self
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn MemoryBackend> {
        &self.backend
    }

    /// Puts `value` (a JSON object) at `namespace`/`key`, replacing what is
    /// there; the item as stored.
    pub async fn put(
        &self,
        namespace: &Namespace,
        key: &str,
        value: Value,
    ) -> Result<Item, MemoryError> {
        self.put_with(namespace, key, value, PutOptions::default())
            .await
    }

    /// [`put`](Self::put) with a TTL or indexing of its own.
    pub async fn put_with(
        &self,
        namespace: &Namespace,
        key: &str,
        value: Value,
        options: PutOptions,
    ) -> Result<Item, MemoryError> {
        let op = Op::Put {
            namespace: namespace.clone(),
            key: key.to_owned(),
            value,
            options,
        };
        match self.batch(vec![op]).await?.pop() {
            Some(OpResult::Put(item)) => Ok(item),
            _ => Err(MemoryError::backend("a put gave no item")),
        }
    }

    /// The item at `namespace`/`key`, unless it is missing or expired.
    /// The root namespace holds no item: asking there is an error, as a put
    /// or a delete there is.
    pub async fn get(&self, namespace: &Namespace, key: &str) -> Result<Option<Item>, MemoryError> {
        check_namespace(namespace)?;
        types::check_key(namespace, key)?;
        let now = self.clock.now();
        Ok(self.backend.get(namespace, key, now).await?.map(|r| r.item))
    }

    /// [`get`](Self::get), starting the item's time to live again.
    pub async fn get_refreshing(
        &self,
        namespace: &Namespace,
        key: &str,
    ) -> Result<Option<Item>, MemoryError> {
        check_namespace(namespace)?;
        types::check_key(namespace, key)?;
        let now = self.clock.now();
        let Some(record) = self.backend.get(namespace, key, now).await? else {
            return Ok(None);
        };
        Ok(Some(self.refresh(vec![record], now).await?.remove(0)))
    }

    /// Deletes the item at `namespace`/`key` (nothing if there is none).
    pub async fn delete(&self, namespace: &Namespace, key: &str) -> Result<(), MemoryError> {
        let op = Op::Delete {
            namespace: namespace.clone(),
            key: key.to_owned(),
        };
        self.batch(vec![op]).await.map(drop)
    }

    /// The items `search` finds: see [`Search`].
    pub async fn search(&self, search: &Search) -> Result<Vec<Hit>, MemoryError> {
        for filter in &search.filters {
            filter.check()?;
        }
        let now = self.clock.now();
        let hits = match &search.text {
            None => self
                .backend
                .search(
                    &search.prefix,
                    &search.filters,
                    search.offset,
                    search.limit,
                    now,
                )
                .await?
                .into_iter()
                .map(|r| (r, None))
                .collect::<Vec<_>>(),
            Some(text) => {
                let Some(semantic) = &self.semantic else {
                    return Err(MemoryError::Query {
                        why: "a search by text needs an index: build the memory with `with_index`"
                            .into(),
                    });
                };
                let query = self
                    .embed(semantic, vec![text.clone()], "the query")
                    .await?
                    .remove(0);
                self.load_index(semantic).await?;
                let index = semantic.index.read().await;
                let nearest = index
                    .as_ref()
                    .map(|i| i.nearest(&query, search, now))
                    .unwrap_or_default();
                nearest
                    .into_iter()
                    .map(|(item, score)| {
                        let record = Record {
                            item: (*item).clone(),
                            ttl_ms: None,
                            vector: None,
                        };
                        (record, Some(score))
                    })
                    .collect()
            }
        };
        if search.refresh_ttl {
            let (live, scores): (Vec<Record>, Vec<Option<f32>>) = if search.text.is_some() {
                // The index keeps no TTL: the backend's records say which
                // items have one, read again a few at a time. An item the
                // backend no longer holds (deleted or expired meanwhile, by
                // another `Memory` or process) is not returned.
                use futures::{StreamExt as _, TryStreamExt as _};
                let reads: Vec<_> = hits
                    .iter()
                    .map(|(r, _)| {
                        let backend = Arc::clone(&self.backend);
                        let (namespace, key) = (r.item.namespace.clone(), r.item.key.clone());
                        async move { backend.get(&namespace, &key, now).await }
                    })
                    .collect();
                let stored: Vec<Option<Record>> = futures::stream::iter(reads)
                    .buffered(REREAD_AT_ONCE)
                    .try_collect()
                    .await?;
                stored
                    .into_iter()
                    .zip(hits.into_iter().map(|(_, score)| score))
                    .filter_map(|(stored, score)| Some((stored?, score)))
                    .unzip()
            } else {
                // The backend's own records, read just now.
                hits.into_iter().unzip()
            };
            let items = self.refresh(live, now).await?;
            return Ok(items
                .into_iter()
                .zip(scores)
                .map(|(item, score)| Hit { item, score })
                .collect());
        }
        Ok(hits
            .into_iter()
            .map(|(r, score)| Hit {
                item: r.item,
                score,
            })
            .collect())
    }

    /// The namespaces that hold live items, as `query` asks.
    pub async fn list_namespaces(
        &self,
        query: &NamespaceQuery,
    ) -> Result<Vec<Namespace>, MemoryError> {
        let now = self.clock.now();
        Ok(query.apply(self.backend.namespaces(now).await?))
    }

    /// Runs `ops` in order: each run of consecutive puts and deletes is
    /// validated and embedded first, then written all or nothing; reads see
    /// the writes before them. One result per operation.
    pub async fn batch(&self, ops: Vec<Op>) -> Result<Vec<OpResult>, MemoryError> {
        let mut results = Vec::with_capacity(ops.len());
        let mut pending: Vec<Op> = Vec::new();
        for op in ops {
            match op {
                Op::Put { .. } | Op::Delete { .. } => pending.push(op),
                read => {
                    if !pending.is_empty() {
                        results.extend(self.write(std::mem::take(&mut pending)).await?);
                    }
                    results.push(match read {
                        Op::Get { namespace, key } => {
                            OpResult::Get(self.get(&namespace, &key).await?)
                        }
                        Op::Search(search) => OpResult::Search(self.search(&search).await?),
                        Op::ListNamespaces(query) => {
                            OpResult::ListNamespaces(self.list_namespaces(&query).await?)
                        }
                        Op::Put { .. } | Op::Delete { .. } => unreachable!("writes are pending"),
                    });
                }
            }
        }
        if !pending.is_empty() {
            results.extend(self.write(pending).await?);
        }
        Ok(results)
    }

    /// Validates, embeds and writes puts and deletes, all or nothing.
    async fn write(&self, ops: Vec<Op>) -> Result<Vec<OpResult>, MemoryError> {
        let now = self.clock.now();
        // Validate every operation before anything is embedded or written.
        let mut texts: Vec<Option<String>> = Vec::with_capacity(ops.len());
        for op in &ops {
            match op {
                Op::Put {
                    namespace,
                    key,
                    value,
                    options,
                } => {
                    check_namespace(namespace)?;
                    types::check_key(namespace, key)?;
                    types::check_value(namespace, key, value)?;
                    // Expiry is kept in whole milliseconds: a shorter TTL
                    // would expire the item as it is written, and replace
                    // the value before it with nothing.
                    if options.ttl.is_some_and(|t| t < Duration::from_millis(1)) {
                        return Err(MemoryError::Value {
                            namespace: namespace.to_string(),
                            key: key.clone(),
                            why: format!(
                                "its TTL of {:?} is under 1 ms, the least an expiry \
                                 is kept to (it would expire as it is written)",
                                options.ttl.unwrap_or_default()
                            ),
                        });
                    }
                    let text = match (&self.semantic, &options.index) {
                        (None, _) | (_, IndexFields::Off) => None,
                        (Some(s), IndexFields::Configured) => text_of(value, &s.config.fields),
                        (Some(_), IndexFields::Fields(fields)) => {
                            if fields.is_empty() {
                                None
                            } else {
                                text_of(value, fields)
                            }
                        }
                    };
                    texts.push(text);
                }
                Op::Delete { namespace, key } => {
                    check_namespace(namespace)?;
                    types::check_key(namespace, key)?;
                    texts.push(None);
                }
                _ => texts.push(None),
            }
        }
        let wanted: Vec<String> = texts.iter().flatten().cloned().collect();
        let mut vectors = match &self.semantic {
            Some(semantic) if !wanted.is_empty() => {
                let what = match wanted.len() {
                    1 => "1 item; nothing was written".to_owned(),
                    n => format!("{n} items; nothing was written"),
                };
                self.embed(semantic, wanted, &what).await?.into_iter()
            }
            _ => Vec::new().into_iter(),
        };
        let mut writes = Vec::with_capacity(ops.len());
        let mut results = Vec::with_capacity(ops.len());
        for (op, text) in ops.into_iter().zip(&texts) {
            match op {
                Op::Put {
                    namespace,
                    key,
                    value,
                    options,
                } => {
                    let ttl_ms = options
                        .ttl
                        .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX));
                    let item = Item {
                        namespace,
                        key,
                        value,
                        created_at: now,
                        updated_at: now,
                        expires_at: ttl_ms.map(|t| now.saturating_add(t)),
                    };
                    let vector = text.as_ref().and_then(|_| vectors.next());
                    results.push(OpResult::Put(item.clone()));
                    writes.push(Write::Put(Record {
                        item,
                        ttl_ms,
                        vector,
                    }));
                }
                Op::Delete { namespace, key } => {
                    results.push(OpResult::Delete);
                    writes.push(Write::Delete { namespace, key });
                }
                _ => {}
            }
        }
        // The index takes these writes in the order the backend does.
        let _order = self.order.lock(&writes).await;
        let created = self.backend.apply(writes.clone(), now).await?;
        // A put keeps the created time of the item it replaced.
        let mut created = created.into_iter();
        for (result, write) in results.iter_mut().zip(writes.iter_mut()) {
            if let (OpResult::Put(item), Write::Put(record)) = (result, write)
                && let Some(at) = created.next()
            {
                item.created_at = at;
                record.item.created_at = at;
            }
        }
        self.index_writes(&writes).await;
        Ok(results)
    }

    /// Starts the TTL of `records` again; their items as stored.
    async fn refresh(&self, records: Vec<Record>, now: u64) -> Result<Vec<Item>, MemoryError> {
        let mut writes = Vec::new();
        let items: Vec<Item> = records
            .into_iter()
            .map(|mut r| {
                if let (Some(ttl), Some(from)) = (r.ttl_ms, r.item.expires_at) {
                    let expires_at = now.saturating_add(ttl);
                    r.item.expires_at = Some(expires_at);
                    writes.push(Write::Touch {
                        namespace: r.item.namespace.clone(),
                        key: r.item.key.clone(),
                        expires_at,
                        from,
                    });
                }
                r.item
            })
            .collect();
        if !writes.is_empty() {
            let _order = self.order.lock(&writes).await;
            self.backend.apply(writes.clone(), now).await?;
            self.index_writes(&writes).await;
        }
        Ok(items)
    }

    /// Embeds `texts` (from the cache where it can), checked and made unit
    /// length.
    async fn embed(
        &self,
        semantic: &Semantic,
        texts: Vec<String>,
        what: &str,
    ) -> Result<Vec<Vec<f32>>, MemoryError> {
        // The embedder's errors can quote its request or its key.
        let failed = |why: String| MemoryError::Embedding {
            what: what.to_owned(),
            why: crate::secrets::redact(&why).into_owned(),
        };
        let mut out: Vec<Option<Vec<f32>>> = {
            let cache = semantic
                .cache
                .lock()
                .map_err(|_| failed("the cache's lock is poisoned".into()))?;
            texts.iter().map(|t| cache.get(t)).collect()
        };
        // Each text embedded once, in the order first seen (a set, not a
        // scan of the list: a batch of many texts is linear, not quadratic).
        let mut missing: Vec<String> = Vec::new();
        let mut seen: std::collections::HashSet<&str> = std::collections::HashSet::new();
        for (text, got) in texts.iter().zip(&out) {
            if got.is_none() && seen.insert(text.as_str()) {
                missing.push(text.clone());
            }
        }
        if !missing.is_empty() {
            let call = semantic.config.embedder.embed(&missing);
            let embeddings = tokio::time::timeout(semantic.config.timeout, call)
                .await
                .map_err(|_| failed(format!("no answer within {:?}", semantic.config.timeout)))?
                .map_err(|e| failed(e.to_string()))?
                .checked(missing.len())
                .map_err(|e| failed(e.to_string()))?;
            let mut fresh: HashMap<&str, Vec<f32>> = HashMap::new();
            for (text, vector) in missing.iter().zip(embeddings.vectors) {
                if vector.len() != semantic.config.dimensions {
                    return Err(failed(format!(
                        "a vector of {} numbers; the index takes {}",
                        vector.len(),
                        semantic.config.dimensions
                    )));
                }
                let unit = normalized(vector).ok_or_else(|| failed("a zero vector".into()))?;
                fresh.insert(text.as_str(), unit);
            }
            for (text, got) in texts.iter().zip(out.iter_mut()) {
                if got.is_none()
                    && let Some(v) = fresh.get(text.as_str())
                {
                    *got = Some(v.clone());
                }
            }
            let mut cache = semantic
                .cache
                .lock()
                .map_err(|_| failed("the cache's lock is poisoned".into()))?;
            for (text, v) in fresh {
                cache.insert(text, v, semantic.config.cache);
            }
        }
        out.into_iter()
            .map(|v| v.ok_or_else(|| failed("a text got no vector".into())))
            .collect()
    }

    /// Builds the index from the backend's vectors, once.
    async fn load_index(&self, semantic: &Semantic) -> Result<(), MemoryError> {
        if semantic.index.read().await.is_some() {
            return Ok(());
        }
        let mut slot = semantic.index.write().await;
        if slot.is_none() {
            *slot = Some(self.build_index(semantic).await?);
        }
        Ok(())
    }

    /// The index of the backend's items; its graph, if one is wanted, is
    /// built in the background.
    async fn build_index(&self, semantic: &Semantic) -> Result<VectorIndex, MemoryError> {
        let now = self.clock.now();
        let mut index = VectorIndex::new(semantic.config.dimensions, semantic.config.kind);
        if let Some(hook) = &semantic.config.hook {
            index = index.with_build_hook(Arc::clone(hook));
        }
        let records = self.backend.scan(now).await?;
        index.extend(
            records
                .into_iter()
                .map(|r| (r.item, r.vector.and_then(normalized))),
        );
        Ok(index)
    }

    /// What the index of search by text holds and how its searches went;
    /// `None` without an index, or before the first search by text loaded
    /// it.
    pub async fn index_stats(&self) -> Option<IndexStats> {
        let semantic = self.semantic.as_ref()?;
        let index = semantic.index.read().await;
        index.as_ref().map(VectorIndex::stats)
    }

    /// Waits up to `timeout` for the index's graph build, if one is
    /// running, to finish; where the graph then stands (`None` without a
    /// loaded index). Searches never wait for it: this is for tests,
    /// benchmarks and warm-ups.
    pub async fn wait_for_graph(&self, timeout: Duration) -> Option<GraphStatus> {
        let semantic = self.semantic.as_ref()?;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let status = semantic.index.read().await.as_ref()?.graph_status();
            if status != GraphStatus::Building || tokio::time::Instant::now() >= deadline {
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Rebuilds the index from the backend: picks up what other processes
    /// wrote since it was built. Searches by text and writes through this
    /// `Memory` wait while the backend is read.
    pub async fn reload_index(&self) -> Result<(), MemoryError> {
        let Some(semantic) = &self.semantic else {
            return Ok(());
        };
        // The index held while the backend is read: a write of this
        // process meanwhile (which reaches the index after the backend)
        // waits for the new index, rather than going to the old one and
        // being lost with it (a deleted item found again).
        let mut slot = semantic.index.write().await;
        *slot = Some(self.build_index(semantic).await?);
        Ok(())
    }

    /// Brings a loaded index up to date with `writes` (made by this
    /// process).
    async fn index_writes(&self, writes: &[Write]) {
        let Some(semantic) = &self.semantic else {
            return;
        };
        let mut slot = semantic.index.write().await;
        let Some(index) = slot.as_mut() else {
            return;
        };
        for write in writes {
            match write {
                Write::Put(record) => index.put(record.item.clone(), record.vector.as_deref()),
                Write::Delete { namespace, key } => index.remove(namespace.labels(), key),
                Write::Touch {
                    namespace,
                    key,
                    expires_at,
                    from,
                } => index.touch(namespace.labels(), key, *expires_at, *from),
            }
        }
    }
}

/// An item's namespace has at least one label.
fn check_namespace(namespace: &Namespace) -> Result<(), MemoryError> {
    if namespace.is_root() {
        return Err(MemoryError::Namespace {
            namespace: Vec::new(),
            why: "an item's namespace has at least one label".into(),
        });
    }
    Ok(())
}
