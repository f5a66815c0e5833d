//! The step cache: a step whose input is unchanged reuses the update it
//! returned before instead of running again.
//!
//! Opt-in per step, declared after its `run` with
//! [`StepBuilder::cache`] (the key hashes the whole state) or
//! [`StepBuilder::cache_reads`] (the key hashes a projection of the state
//! that the step declares). The cache wraps the step's `run`: on a hit it
//! returns the stored update without calling the step's body, so for the
//! engine a hit is an ordinary step completion (checkpoints, events and
//! observers see it like any other), and the step sends the custom event
//! [`HIT`] (`"cache.hit"`) with the key.
//!
//! # The key
//!
//! A key is the SHA-256 of, in order:
//! - the policy's namespace (which names the harness: two harnesses sharing
//!   one cache give different namespaces),
//! - the Rust type names of the state and of the context,
//! - the step's name,
//! - the policy's version (bump it when the step's code changes),
//! - the canonical JSON of what the step reads: the whole state, or the
//!   projection it declares. Canonical: object keys are sorted, so two equal
//!   states hash equal whatever order their maps were filled in;
//! - and, for the first step of a fan-out's branch
//!   ([`run_each`](StepBuilder::run_each)), the branch's input: branches
//!   over the same state with different inputs key differently, and a
//!   branch whose input was seen before hits, whatever its place.
//!
//! Each part is written with its length, so no two different sets of parts
//! give the same bytes. A step name alone never is a key.
//!
//! # What is stored
//!
//! Only a successful update is stored: a step that fails, times out or
//! pauses for a human (`cx.interrupt`) stores nothing; once its interrupt
//! is answered, the update of the answered visit is stored. A hit does not
//! call the step's body, so it neither asks the step's interrupts again nor
//! runs its `cx.once` effects: the answers and effects of the stored visit
//! stand for every later visit with the same key. A step that swallows the
//! error of `cx.interrupt` and returns `Ok` while pausing stores nothing
//! either: the engine discards that update, and the cache does too.
//!
//! The stored value is an envelope holding the update, the namespace, step
//! and version it was stored for and the SHA-256 of the update; a value
//! that does not read back as such an envelope, whose fields differ or
//! whose digest does not match, or whose update is not the step's update
//! type, is a miss (logged with `tracing::warn!`) and the step runs, never
//! a failed run. A cache that fails to read or write is also logged and
//! skipped. The update is stored before the step completes, so a hit costs
//! one read of the cache and a miss one read and one write.
//!
//! What the step reads from its context (slots, a model, the answers to
//! its interrupts) is not in the key: bump the version when a change there
//! changes what the step returns.

use super::builder::StepBuilder;
use super::def::RunFn;
use crate::error::BoxError;
use crate::ids::SessionId;
use crate::session::{SessionStore, load_value, save_value};
use crate::slots::Context;
use crate::state::HarnessState;
use crate::step::{Cx, StepError};
use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

/// The kind of the custom event ([`RunEvent::Custom`](crate::RunEvent::Custom))
/// a cached step sends on a hit, with the key, namespace and version as
/// its payload: `{"key": "3fa2…", "namespace": "docs-app", "version": 1}`.
pub const HIT: &str = "cache.hit";

/// The version of the cache's key and envelope format; part of every key,
/// so a change of format never reads an old entry.
const FORMAT: u32 = 1;

/// Why a [`StepCache`] could not read or write an entry: what it was doing
/// and the backend's error. The step then runs (or its update is not
/// stored); the run does not fail.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
pub struct StepCacheError {
    what: String,
    #[source]
    source: BoxError,
}

impl StepCacheError {
    /// A failure while doing `what` (say, "reading entry 3fa2…"), caused
    /// by `source`.
    pub fn new(what: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self {
            what: what.into(),
            source: source.into(),
        }
    }
}

/// Where cached step updates are kept: values by key.
///
/// Keys are 64 lowercase hex digits (a SHA-256); values are JSON. An
/// implementation need not check what it returns: the step cache checks
/// every value it reads, and treats one that is not what it stored as a
/// miss. Two implementations ship with harness: [`MemoryCache`] (in the
/// process) and [`StoreCache`] (in a [`SessionStore`], so that a cache
/// survives the process with a durable store).
#[async_trait]
pub trait StepCache: Send + Sync + fmt::Debug {
    /// The value stored under `key`, if any.
    async fn get(&self, key: &str) -> Result<Option<Value>, StepCacheError>;

    /// Stores `value` under `key`, replacing what was there.
    async fn put(&self, key: &str, value: Value) -> Result<(), StepCacheError>;
}

#[async_trait]
impl<T: StepCache + ?Sized> StepCache for Arc<T> {
    async fn get(&self, key: &str) -> Result<Option<Value>, StepCacheError> {
        (**self).get(key).await
    }

    async fn put(&self, key: &str, value: Value) -> Result<(), StepCacheError> {
        (**self).put(key, value).await
    }
}

/// A [`StepCache`] in memory: entries live as long as the cache.
///
/// Clones share their entries, so one cache can be given to several steps
/// and harnesses.
///
/// ```
/// use harness::MemoryCache;
/// let cache = MemoryCache::new();
/// let shared = cache.clone();
/// assert!(shared.is_empty());
/// ```
#[derive(Clone, Debug, Default)]
pub struct MemoryCache {
    entries: Arc<Mutex<HashMap<String, Value>>>,
}

impl MemoryCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many entries it holds.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether it holds no entry.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// The keys it holds, in no particular order.
    pub fn keys(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    /// Replaces the value under `key` (to inspect or damage an entry).
    pub fn insert(&self, key: impl Into<String>, value: Value) {
        self.lock().insert(key.into(), value);
    }

    /// Drops every entry.
    pub fn clear(&self) {
        self.lock().clear();
    }

    /// Every critical section is one map operation: a panic elsewhere
    /// cannot leave the map half-changed.
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Value>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl StepCache for MemoryCache {
    async fn get(&self, key: &str) -> Result<Option<Value>, StepCacheError> {
        Ok(self.lock().get(key).cloned())
    }

    async fn put(&self, key: &str, value: Value) -> Result<(), StepCacheError> {
        self.lock().insert(key.to_string(), value);
        Ok(())
    }
}

/// A [`StepCache`] kept in a [`SessionStore`], so that it lasts as long as
/// the store: with a durable store (sled, files, PostgreSQL, Redis), cached
/// updates survive the process.
///
/// Each entry is a session of its own, saved with
/// [`save_value`] under the id
/// `harness-cache-{key}` and the owner [`StoreCache::OWNER`]: it is a
/// completed session, which no worker takes, and which the sessions
/// command line lists like any other. The store can be the one the harness
/// keeps its runs in.
#[derive(Clone, Debug)]
pub struct StoreCache {
    store: Arc<dyn SessionStore>,
}

impl StoreCache {
    /// The owner of the sessions that hold cache entries.
    pub const OWNER: &'static str = "$harness-cache";

    /// A cache kept in `store` (an `Arc` of a store works too, to share it).
    pub fn new(store: impl SessionStore + 'static) -> Self {
        Self {
            store: Arc::new(store),
        }
    }

    /// The session that holds the entry under `key`.
    pub fn session_of(key: &str) -> SessionId {
        SessionId::from(format!("harness-cache-{key}"))
    }
}

#[async_trait]
impl StepCache for StoreCache {
    async fn get(&self, key: &str) -> Result<Option<Value>, StepCacheError> {
        load_value(&*self.store, Self::OWNER, &Self::session_of(key))
            .await
            .map_err(|e| StepCacheError::new(format!("reading cache entry {key}"), e))
    }

    async fn put(&self, key: &str, value: Value) -> Result<(), StepCacheError> {
        save_value(&*self.store, Self::OWNER, &Self::session_of(key), value)
            .await
            .map_err(|e| StepCacheError::new(format!("writing cache entry {key}"), e))
    }
}

/// How a step is cached: where, under which namespace, at which version.
/// Give it to [`StepBuilder::cache`] or [`StepBuilder::cache_reads`].
///
/// ```
/// use harness::{CachePolicy, MemoryCache};
/// let cache = MemoryCache::new();
/// let policy = CachePolicy::new(cache.clone(), "docs-app").version(2);
/// assert_eq!(policy.namespace(), "docs-app");
/// assert_eq!(policy.current_version(), 2);
/// ```
#[derive(Clone)]
pub struct CachePolicy {
    cache: Arc<dyn StepCache>,
    namespace: String,
    version: u32,
}

impl fmt::Debug for CachePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachePolicy")
            .field("cache", &self.cache)
            .field("namespace", &self.namespace)
            .field("version", &self.version)
            .finish()
    }
}

impl CachePolicy {
    /// Caches in `cache`, under `namespace`, at version 0.
    ///
    /// The namespace names the harness the step belongs to (an application
    /// and loop name, say `"support-bot/triage"`): it is part of every key,
    /// so two harnesses that share a cache and have a step of the same name
    /// over the same state never read each other's updates, as long as
    /// their namespaces differ. The same harness built again (in another
    /// process, say) gives the same namespace, and finds its entries.
    pub fn new(cache: impl StepCache + 'static, namespace: impl Into<String>) -> Self {
        Self {
            cache: Arc::new(cache),
            namespace: namespace.into(),
            version: 0,
        }
    }

    /// The version of the step's code: part of every key, so bumping it
    /// when the step changes makes every entry stored before a miss.
    #[must_use]
    pub fn version(mut self, version: u32) -> Self {
        self.version = version;
        self
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The version.
    pub fn current_version(&self) -> u32 {
        self.version
    }
}

/// What a step's key is computed from besides its identity.
type ReadsFn<S> = Arc<dyn Fn(&S) -> Result<Value, serde_json::Error> + Send + Sync>;

impl<S: HarnessState, C: Context> StepBuilder<S, C> {
    /// Caches this step's update by `policy`, keyed by the step's identity
    /// and the whole state: a visit that finds the state as a previous one
    /// left it reuses that visit's update without running the step.
    ///
    /// Declare it after [`run`](Self::run); see the [module](crate::graph::cache)
    /// for the key and what is stored, and [`cache_reads`](Self::cache_reads)
    /// to key by part of the state only.
    ///
    /// A step without `run` (or whose `run` is declared after `.cache`,
    /// which then replaces the cached one) has nothing to cache: `.cache`
    /// declared before `.run` is refused when the loop is built
    /// ([`Violation::CacheWithoutRun`](crate::Violation::CacheWithoutRun)).
    #[must_use]
    pub fn cache(self, policy: CachePolicy) -> Self {
        self.cached(policy, None)
    }

    /// Like [`cache`](Self::cache), keyed by what `reads` returns instead
    /// of the whole state: the part of the state the step reads. A change
    /// elsewhere in the state still hits; a change in the projection misses.
    ///
    /// The projection must cover everything the step's update depends on
    /// (of the state: the context is never part of the key), or a hit
    /// returns an update computed from other input.
    #[must_use]
    pub fn cache_reads<R, F>(self, policy: CachePolicy, reads: F) -> Self
    where
        R: Serialize,
        F: Fn(&S) -> R + Send + Sync + 'static,
    {
        self.cached(
            policy,
            Some(Arc::new(move |s| serde_json::to_value(reads(s)))),
        )
    }

    fn cached(mut self, policy: CachePolicy, reads: Option<ReadsFn<S>>) -> Self {
        let step: Arc<str> = Arc::from(self.step.name.as_str());
        let Some(inner) = self.step.run.take() else {
            tracing::warn!(
                step = %step,
                "step `{step}` declares .cache(..) before or without .run(..): declare the cache after the step's run"
            );
            self.step.run = Some(no_run(step));
            self.step.cache_without_run = true;
            return self;
        };
        let cached = Arc::new(Cached {
            identity: identity::<S, C>(&policy, &step),
            policy,
            step,
            reads,
        });
        self.step.run = Some(Arc::new(move |state: Arc<S>, cx: Cx<C>| {
            let cached = Arc::clone(&cached);
            let inner = Arc::clone(&inner);
            Box::pin(async move { cached.run(&inner, state, cx).await })
        }));
        self
    }
}

/// The `run` of a step that declared a cache but no `run` of its own.
fn no_run<S: HarnessState, C: Context>(step: Arc<str>) -> RunFn<S, C> {
    Arc::new(move |_, _| {
        let step = Arc::clone(&step);
        Box::pin(async move {
            Err(StepError::msg(format!(
                "step `{step}` declares .cache(..) but has no .run(..) before it: there is nothing to cache; declare the cache after the step's run"
            )))
        })
    })
}

/// The bytes every key of a step starts with: the format, namespace, the
/// state's and context's types, the step's name and the version, each
/// with its length.
fn identity<S: 'static, C: 'static>(policy: &CachePolicy, step: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let mut part = |bytes: &[u8]| {
        out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        out.extend_from_slice(bytes);
    };
    part(b"harness step cache");
    part(&FORMAT.to_le_bytes());
    part(policy.namespace.as_bytes());
    part(std::any::type_name::<S>().as_bytes());
    part(std::any::type_name::<C>().as_bytes());
    part(step.as_bytes());
    part(&policy.version.to_le_bytes());
    out
}

/// One cached step: its identity and what its key reads.
struct Cached<S> {
    policy: CachePolicy,
    step: Arc<str>,
    identity: Vec<u8>,
    reads: Option<ReadsFn<S>>,
}

/// What the cache stores for one update.
#[derive(Serialize, Deserialize)]
struct Envelope {
    format: u32,
    namespace: String,
    step: String,
    version: u32,
    /// The SHA-256 of the update's canonical JSON, in hex.
    digest: String,
    update: Value,
}

impl<S: HarnessState> Cached<S> {
    async fn run<C>(
        &self,
        inner: &RunFn<S, C>,
        state: Arc<S>,
        cx: Cx<C>,
    ) -> Result<S::Update, StepError> {
        let key = match self.key(&state, cx.shared.input.as_ref()) {
            Ok(key) => Some(key),
            Err(e) => {
                tracing::warn!(
                    step = %self.step,
                    error = %e,
                    "step cache: what the step reads cannot be serialized, so the step runs uncached"
                );
                None
            }
        };
        if let Some(key) = &key
            && let Some(update) = self.lookup(key).await
        {
            tracing::debug!(step = %self.step, key = %key, "step cache hit");
            cx.emit(
                HIT,
                serde_json::json!({
                    "key": key,
                    "namespace": self.policy.namespace,
                    "version": self.policy.version,
                }),
            );
            return Ok(update);
        }
        let shared = Arc::clone(&cx.shared);
        let update = inner(state, cx).await?;
        // A step that swallowed its interrupt's error returns `Ok` while
        // pausing: the engine discards that update, and so does the cache.
        if let Some(key) = &key
            && !shared.pausing()
        {
            self.store(key, &update).await;
        }
        Ok(update)
    }

    /// The key of this step over `state`, and over `input` for the first
    /// step of a fan-out's branch.
    fn key(&self, state: &S, input: Option<&Value>) -> Result<String, serde_json::Error> {
        let read = match &self.reads {
            Some(reads) => reads(state)?,
            None => serde_json::to_value(state)?,
        };
        let mut hash = Sha256::new();
        hash.update(&self.identity);
        canonical(&read, &mut hash);
        match input {
            None => hash.update(b"-"),
            Some(input) => {
                hash.update(b"+");
                canonical(input, &mut hash);
            }
        }
        Ok(hex(&hash.finalize()))
    }

    /// The stored update under `key`, if there is one that reads back as
    /// this step's; anything else is a miss, logged.
    async fn lookup(&self, key: &str) -> Option<S::Update> {
        let stored = match self.policy.cache.get(key).await {
            Ok(Some(stored)) => stored,
            Ok(None) => return None,
            Err(e) => {
                tracing::warn!(step = %self.step, key, error = %e, "step cache: cannot read the cache; the step runs");
                return None;
            }
        };
        match self.unwrap_envelope(stored) {
            Ok(update) => Some(update),
            Err(reason) => {
                tracing::warn!(
                    step = %self.step,
                    key,
                    "step cache: the entry is not an update of this step ({reason}); the step runs and replaces it"
                );
                None
            }
        }
    }

    fn unwrap_envelope(&self, stored: Value) -> Result<S::Update, String> {
        let envelope: Envelope =
            serde_json::from_value(stored).map_err(|e| format!("not a cache entry: {e}"))?;
        if envelope.format != FORMAT {
            return Err(format!("format {} where {FORMAT} is read", envelope.format));
        }
        if envelope.namespace != self.policy.namespace
            || *envelope.step != *self.step
            || envelope.version != self.policy.version
        {
            return Err(format!(
                "stored for step `{}` version {} of namespace `{}`",
                envelope.step, envelope.version, envelope.namespace
            ));
        }
        let digest = digest_of(&envelope.update);
        if digest != envelope.digest {
            return Err(format!(
                "the update's digest is {digest}, the entry says {}",
                envelope.digest
            ));
        }
        read_update::<S::Update>(envelope.update)
    }

    /// Stores `update` under `key`; a failure is logged, not the step's.
    async fn store(&self, key: &str, update: &S::Update) {
        let update = match serde_json::to_value(update) {
            Ok(update) => update,
            Err(e) => {
                tracing::warn!(step = %self.step, error = %e, "step cache: the update cannot be serialized, so it is not cached");
                return;
            }
        };
        let envelope = Envelope {
            format: FORMAT,
            namespace: self.policy.namespace.clone(),
            step: self.step.to_string(),
            version: self.policy.version,
            digest: digest_of(&update),
            update,
        };
        let value = match serde_json::to_value(envelope) {
            Ok(value) => value,
            Err(e) => {
                tracing::warn!(step = %self.step, error = %e, "step cache: the entry cannot be serialized");
                return;
            }
        };
        if let Err(e) = self.policy.cache.put(key, value).await {
            tracing::warn!(step = %self.step, key, error = %e, "step cache: cannot write the cache; the update is not cached");
        }
    }
}

fn read_update<U: DeserializeOwned>(update: Value) -> Result<U, String> {
    serde_json::from_value(update).map_err(|e| {
        format!(
            "the update is not a `{}`: {e}",
            crate::short_type_name::<U>()
        )
    })
}

/// The SHA-256 of `value`'s canonical JSON, in hex.
fn digest_of(value: &Value) -> String {
    let mut hash = Sha256::new();
    canonical(value, &mut hash);
    hex(&hash.finalize())
}

/// Feeds `value` to `hash` in one canonical form: a tag per kind, lengths
/// before contents, object keys sorted. Equal values give equal bytes
/// whatever the order their maps were built in, and different values
/// different bytes.
fn canonical(value: &Value, hash: &mut Sha256) {
    fn len(n: usize, hash: &mut Sha256) {
        hash.update((n as u64).to_le_bytes());
    }
    match value {
        Value::Null => hash.update(b"n"),
        Value::Bool(true) => hash.update(b"t"),
        Value::Bool(false) => hash.update(b"f"),
        Value::Number(n) => {
            let text = n.to_string();
            hash.update(b"d");
            len(text.len(), hash);
            hash.update(text.as_bytes());
        }
        Value::String(s) => {
            hash.update(b"s");
            len(s.len(), hash);
            hash.update(s.as_bytes());
        }
        Value::Array(items) => {
            hash.update(b"a");
            len(items.len(), hash);
            for item in items {
                canonical(item, hash);
            }
        }
        Value::Object(map) => {
            hash.update(b"o");
            len(map.len(), hash);
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            for (k, v) in entries {
                len(k.len(), hash);
                hash.update(k.as_bytes());
                canonical(v, hash);
            }
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn digest(v: &Value) -> String {
        digest_of(v)
    }

    #[test]
    fn map_order_does_not_change_the_digest() {
        let mut a = serde_json::Map::new();
        a.insert("x".into(), json!(1));
        a.insert("y".into(), json!({"b": [1, 2], "a": null}));
        let mut b = serde_json::Map::new();
        b.insert("y".into(), json!({"a": null, "b": [1, 2]}));
        b.insert("x".into(), json!(1));
        assert_eq!(digest(&Value::Object(a)), digest(&Value::Object(b)));
    }

    #[test]
    fn different_values_have_different_digests() {
        let values = [
            json!(null),
            json!(false),
            json!(true),
            json!(0),
            json!(1),
            json!(1.5),
            json!("1"),
            json!(""),
            json!([]),
            json!({}),
            json!(["a", "b"]),
            json!(["ab"]),
            json!({"a": "b"}),
            json!({"ab": ""}),
            json!([[]]),
            json!([null]),
        ];
        let digests: std::collections::BTreeSet<_> = values.iter().map(digest).collect();
        assert_eq!(digests.len(), values.len());
    }

    #[test]
    fn the_digest_is_the_same_in_every_process() {
        // Computed by an independent implementation of the canonical form
        // (a few lines of Python over hashlib): no per-process seed, and a
        // change of the format shows here before it orphans stored caches.
        assert_eq!(
            digest(&json!({"b": 1, "a": ["x", null, true]})),
            "3e156f9c7cdc18676e1ff106cad578f29f7a3a5628de58dd02c8ad1f57b87509"
        );
        let mut hash = Sha256::new();
        hash.update(b"abc");
        assert_eq!(
            hex(&hash.finalize()),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
