//! Long-term memory in sled: the embedded default.

use crate::memory_codec::{
    after_namespace, decode_record, encode_record, live, namespace_of, parse_key, prefix_bytes,
    record_key,
};
use async_trait::async_trait;
use harness::memory::{Filter, MemoryBackend, MemoryError, Namespace, Record, Write};
use sled::Tree;
use sled::transaction::{ConflictableTransactionError, TransactionError};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

/// The tree the records live in.
pub(crate) const TREE: &str = "memory";

/// Long-term memory in a [sled](https://docs.rs/sled) database: the
/// embedded default, for one process.
///
/// **Layout.** One tree, `memory`, in a database of its own
/// ([`SledMemory::open`]) or in one the process already has open
/// ([`SledMemory::in_db`], e.g. a [`SledStore`](crate::SledStore)'s
/// [`db`](crate::SledStore::db): sled lets one process open a database
/// once, so sessions and memory can share it). Its keys are the records'
/// namespaces and keys encoded so that byte order is the core's namespace
/// then key order and a namespace prefix is a key prefix: each label
/// followed by `0x01`, then `0x00`, then the key (labels and keys have no
/// control characters, so `["a"]` is `a\x01` and never a prefix of
/// `["ab"]`'s `ab\x01`). Its values are checksummed records: `0xC6`, a
/// format byte `1`, the CRC32 of the rest (4 bytes, little-endian), the
/// expiry (8 bytes, big-endian, `u64::MAX` for none), then the
/// [`Record`] as JSON (item, TTL, vector: `f32`s as JSON numbers, which
/// read back bit for bit). A record that fails its checksum, or is stored
/// under another record's key, is a [`MemoryError::Corrupt`] naming it.
///
/// **Writes.** [`apply`](MemoryBackend::apply) is one sled transaction,
/// all or nothing, also across a crash; unless
/// [`flush_each_write`](Self::flush_each_write) is turned off, it returns
/// once sled has flushed it to disk. **Reads** judge expiry from the
/// header, without reading the value; a search scans the prefix's key
/// range and applies filters to the values in this process; listing
/// namespaces skips from one namespace to the next once it has found a
/// live record in it. Expired records stay on disk until a put or delete
/// of their key replaces them (never returned meanwhile).
///
/// **Consistency.** Writes and scans of one `SledMemory` (and its clones)
/// take a lock, so a search never sees half a batch; two `SledMemory`
/// values opened separately on one tree do not share it (open one and
/// clone it).
///
/// **Files.** [`SledMemory::open`] creates its directory (and missing
/// parents) `0700` on unix and takes group and other permissions away from
/// sled's own files (nothing else in the directory), like
/// [`SledStore::open`](crate::SledStore::open).
///
/// ```
/// use harness::memory::Memory;
/// use harness_stores::SledMemory;
///
/// let memory = Memory::new(SledMemory::temporary()?);
/// # Ok::<(), harness::memory::MemoryError>(())
/// ```
#[derive(Clone)]
pub struct SledMemory {
    db: sled::Db,
    tree: Tree,
    lock: Arc<RwLock<()>>,
    /// Held while a write's flush runs: one at a time.
    flushing: Arc<std::sync::Mutex<()>>,
    flush: bool,
    path: Option<PathBuf>,
}

impl std::fmt::Debug for SledMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SledMemory")
            .field("path", &self.path)
            .field("flush_each_write", &self.flush)
            .finish_non_exhaustive()
    }
}

fn sled_error(what: &str, e: &sled::Error) -> MemoryError {
    MemoryError::backend(format!("sled memory: cannot {what}: {e}"))
}

impl SledMemory {
    /// Opens (or creates) a database of its own at `path`. Blocks while
    /// sled recovers its log.
    ///
    /// A database of another program (data, but none of harness's trees:
    /// neither `memory` nor a [`SledStore`](crate::SledStore)'s) is refused
    /// as [`MemoryError::NotAStore`], its message naming the path and the
    /// trees found, and nothing of harness's is written to it (no tree, no
    /// key, no permission; sled's own open does its housekeeping, as
    /// [`SledStore::open`](crate::SledStore::open) tells). A database
    /// holding a session store's trees is harness's: the memory joins it.
    /// To keep memory in a database of your own that holds other trees,
    /// open it with sled and use [`SledMemory::in_db`]. A non-empty
    /// directory that holds no sled database is refused the same way. A log
    /// damaged in its middle is refused before sled's recovery would cut it
    /// there, as [`MemoryError::Damaged`] naming the file and the offset
    /// (as `SledStore::open` refuses it), and nothing is changed.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, MemoryError> {
        let path = path.as_ref();
        let not_a_store = |found: String| MemoryError::NotAStore {
            path: path.to_path_buf(),
            found,
        };
        let found = crate::sled_store::foreign_directory(path).map_err(|e| {
            MemoryError::backend(format!("sled memory: cannot list {}: {e}", path.display()))
        })?;
        if let Some(found) = found {
            return Err(not_a_store(format!(
                "{found}. Nothing was written there. Give the directory of a harness memory \
                 or store, or a new or empty one"
            )));
        }
        crate::read_only::private_dir_builder()
            .recursive(true)
            .create(path)
            .map_err(|e| {
                MemoryError::backend(format!(
                    "sled memory: cannot create {}: {e}",
                    path.display()
                ))
            })?;
        let mut config = sled::Config::new().path(path);
        // Before the log is read: another process writing it meanwhile
        // would show as damage.
        if crate::sled_store::held_elsewhere(path) {
            return Err(MemoryError::backend(crate::sled_store::in_use(
                "sled memory",
                path,
            )));
        }
        // An existing database opens with the segment size it was made
        // with (sled refuses any other): a session store's is 128 KiB, a
        // new memory's sled's own 512 KiB.
        match crate::sled_store::stored_segment_size(path) {
            Ok(Some(size)) => {
                let damage = crate::sled_store::damage(path, size, true)
                    .map_err(|e| MemoryError::backend(format!("sled memory: {e}")))?;
                if let Some(found) = damage {
                    return Err(MemoryError::Damaged {
                        store: found.store,
                        file: found.file,
                        offset: found.offset,
                        what: format!(
                            "{}. The memory was not opened and nothing was changed: opening it \
                             would lose the records after the damage. Keep a copy of the \
                             directory first (e.g. `cp -a {dir} {dir}.damaged`). To go on with \
                             what precedes the damage and lose what follows it, open a copy \
                             with sled (`sled::Config::new().path(…).open()`, sled's own \
                             recovery) and use `SledMemory::in_db`",
                            found.what,
                            dir = path.display()
                        ),
                    });
                }
                config = config.segment_size(size);
            }
            Ok(None) => {}
            Err(why) => {
                return Err(MemoryError::backend(format!(
                    "sled memory: cannot open {}: {why}; nothing was changed",
                    path.display()
                )));
            }
        }
        let db = config.open().map_err(|e| {
            if crate::sled_store::lock_refused(&e) {
                MemoryError::backend(crate::sled_store::in_use("sled memory", path))
            } else {
                sled_error(&format!("open {}", path.display()), &e)
            }
        })?;
        // Before anything of harness's is written: its tree, the files'
        // permissions.
        let found = crate::sled_store::foreign_contents(&db)
            .map_err(|e| sled_error(&format!("list the trees of {}", path.display()), &e))?;
        if let Some(found) = found {
            return Err(not_a_store(format!(
                "another program's sled database: {found}. Nothing was written to it (no \
                 tree, no key, no permission). Give the directory of a harness memory or \
                 store, or a new or empty one; to keep memory in a database of your own, \
                 open it with sled and use `SledMemory::in_db`"
            )));
        }
        #[cfg(unix)]
        crate::read_only::restrict_sled_files(path).map_err(|e| {
            MemoryError::backend(format!(
                "sled memory: cannot restrict the permissions of {}: {e}",
                path.display()
            ))
        })?;
        let mut memory = Self::in_db(&db)?;
        memory.path = Some(path.to_path_buf());
        Ok(memory)
    }

    /// A database in a temporary place, deleted when the last handle is
    /// dropped: for tests. Writes are not flushed.
    pub fn temporary() -> Result<Self, MemoryError> {
        let db = sled::Config::new()
            .temporary(true)
            .open()
            .map_err(|e| sled_error("open a temporary database", &e))?;
        Ok(Self::in_db(&db)?.flush_each_write(false))
    }

    /// The tree `memory` of a database the process has open (sessions and
    /// memory in one database: `SledMemory::in_db(store.db())`).
    pub fn in_db(db: &sled::Db) -> Result<Self, MemoryError> {
        let tree = db
            .open_tree(TREE)
            .map_err(|e| sled_error("open the memory tree", &e))?;
        Ok(Self {
            db: db.clone(),
            tree,
            lock: Arc::new(RwLock::new(())),
            flushing: Arc::new(std::sync::Mutex::new(())),
            flush: true,
            path: None,
        })
    }

    /// Whether [`apply`](MemoryBackend::apply) waits for sled to flush its
    /// writes to disk (default yes; no for [`temporary`](Self::temporary)).
    /// Without it a write is on disk within sled's flush interval (500 ms
    /// by default) and a crash may lose the last ones, never half a batch.
    #[must_use]
    pub fn flush_each_write(mut self, flush: bool) -> Self {
        self.flush = flush;
        self
    }

    /// The tree holding the records, for inspection and repair tools.
    pub fn tree(&self) -> &Tree {
        &self.tree
    }

    /// Runs `work` on a blocking thread: sled's calls block.
    async fn blocking<T: Send + 'static>(
        work: impl FnOnce() -> Result<T, MemoryError> + Send + 'static,
    ) -> Result<T, MemoryError> {
        tokio::task::spawn_blocking(work)
            .await
            .map_err(|e| MemoryError::backend(format!("sled memory: a task failed: {e}")))?
    }
}

/// A write with its stored key.
type Keyed = (Vec<u8>, Write);

/// The `created_at` of a stored record, without building its value.
fn created_at(key: &[u8], bytes: &[u8]) -> Result<u64, MemoryError> {
    #[derive(serde::Deserialize)]
    struct Times {
        created_at: u64,
    }
    #[derive(serde::Deserialize)]
    struct Head {
        item: Times,
    }
    // Only the times are built; a record this cannot read is read in full,
    // for the error.
    match serde_json::from_slice::<Head>(bytes.get(14..).unwrap_or_default()) {
        Ok(head) => Ok(head.item.created_at),
        Err(_) => decode_record(key, bytes).map(|r| r.item.created_at),
    }
}

fn apply_in(tree: &Tree, writes: &[Keyed], now: u64) -> Result<Vec<u64>, MemoryError> {
    let result = tree.transaction(|tx| {
        let mut created = Vec::new();
        for (key, write) in writes {
            let old = tx.get(key)?;
            let live_old = old.filter(|b| live(b, now).unwrap_or(false));
            match write {
                Write::Put(record) => {
                    let mut record = record.clone();
                    // An unreadable old record is replaced as if it were
                    // not there: a put repairs it.
                    if let Some(at) = live_old.and_then(|b| created_at(key, &b).ok()) {
                        record.item.created_at = at;
                    }
                    created.push(record.item.created_at);
                    let bytes =
                        encode_record(&record).map_err(ConflictableTransactionError::Abort)?;
                    tx.insert(key.as_slice(), bytes)?;
                }
                Write::Delete { .. } => {
                    tx.remove(key.as_slice())?;
                }
                Write::Touch {
                    expires_at, from, ..
                } => {
                    let read = live_old
                        .map(|bytes| decode_record(key, &bytes))
                        .transpose()
                        .map_err(ConflictableTransactionError::Abort)?;
                    // Only the record the refresh read (see `Write::Touch`).
                    if let Some(mut record) = read.filter(|r| r.item.expires_at == Some(*from)) {
                        record.item.expires_at = Some(*expires_at);
                        let bytes =
                            encode_record(&record).map_err(ConflictableTransactionError::Abort)?;
                        tx.insert(key.as_slice(), bytes)?;
                    }
                }
            }
        }
        Ok(created)
    });
    result.map_err(|e| match e {
        TransactionError::Abort(e) => e,
        TransactionError::Storage(e) => sled_error("apply a batch", &e),
    })
}

fn search_in(
    tree: &Tree,
    prefix: &Namespace,
    filters: &[Filter],
    offset: usize,
    limit: usize,
    now: u64,
) -> Result<Vec<Record>, MemoryError> {
    let mut out = Vec::new();
    let mut skipped = 0;
    if limit == 0 {
        return Ok(out);
    }
    for entry in tree.scan_prefix(prefix_bytes(prefix)) {
        let (key, bytes) = entry.map_err(|e| sled_error("read the memory tree", &e))?;
        if !live(&bytes, now).map_err(|why| corrupt(&key, why))? {
            continue;
        }
        let record = decode_record(&key, &bytes)?;
        if !filters.iter().all(|f| f.matches(&record.item.value)) {
            continue;
        }
        if skipped < offset {
            skipped += 1;
            continue;
        }
        out.push(record);
        if out.len() >= limit {
            break;
        }
    }
    Ok(out)
}

fn corrupt(key: &[u8], why: String) -> MemoryError {
    match parse_key(key) {
        Ok((ns, key)) => MemoryError::Corrupt {
            namespace: ns.to_string(),
            key,
            why,
        },
        Err(bad) => MemoryError::Corrupt {
            namespace: String::from_utf8_lossy(key).into_owned(),
            key: String::new(),
            why: format!("a key that is not a record's ({bad}); {why}"),
        },
    }
}

fn namespaces_in(tree: &Tree, now: u64) -> Result<Vec<Namespace>, MemoryError> {
    let mut out = Vec::new();
    let mut start = Vec::new();
    'namespaces: loop {
        for entry in tree.range(start.clone()..) {
            let (key, bytes) = entry.map_err(|e| sled_error("read the memory tree", &e))?;
            if live(&bytes, now).map_err(|why| corrupt(&key, why))? {
                let (namespace, _) = parse_key(&key).map_err(|why| corrupt(&key, why))?;
                out.push(namespace);
                let ns = namespace_of(&key).ok_or_else(|| corrupt(&key, "no namespace".into()))?;
                start = after_namespace(ns);
                continue 'namespaces;
            }
        }
        return Ok(out);
    }
}

#[async_trait]
impl MemoryBackend for SledMemory {
    async fn apply(&self, writes: Vec<Write>, now: u64) -> Result<Vec<u64>, MemoryError> {
        let keyed: Vec<Keyed> = writes
            .into_iter()
            .map(|w| {
                let key = match &w {
                    Write::Put(r) => record_key(&r.item.namespace, &r.item.key),
                    Write::Delete { namespace, key } | Write::Touch { namespace, key, .. } => {
                        record_key(namespace, key)
                    }
                }?;
                Ok((key, w))
            })
            .collect::<Result<_, MemoryError>>()?;
        let (tree, lock) = (self.tree.clone(), Arc::clone(&self.lock));
        let created = Self::blocking(move || {
            let _guard = lock
                .write()
                .map_err(|_| MemoryError::backend("sled memory: the lock is poisoned"))?;
            apply_in(&tree, &keyed, now)
        })
        .await?;
        if self.flush {
            // sled's own `flush_async` can hang for good when several run
            // at once (sled 0.34): the flush is sled's blocking one, on a
            // blocking thread, one at a time (each covers every write
            // applied before it started).
            let (db, flushing) = (self.db.clone(), Arc::clone(&self.flushing));
            Self::blocking(move || {
                let _one = flushing
                    .lock()
                    .map_err(|_| MemoryError::backend("sled memory: the flush lock is poisoned"))?;
                db.flush().map_err(|e| sled_error("flush", &e))?;
                Ok(())
            })
            .await?;
        }
        Ok(created)
    }

    async fn get(
        &self,
        namespace: &Namespace,
        key: &str,
        now: u64,
    ) -> Result<Option<Record>, MemoryError> {
        let stored = record_key(namespace, key)?;
        let Some(bytes) = self
            .tree
            .get(&stored)
            .map_err(|e| sled_error("read the memory tree", &e))?
        else {
            return Ok(None);
        };
        if !live(&bytes, now).map_err(|why| corrupt(&stored, why))? {
            return Ok(None);
        }
        decode_record(&stored, &bytes).map(Some)
    }

    async fn search(
        &self,
        prefix: &Namespace,
        filters: &[Filter],
        offset: usize,
        limit: usize,
        now: u64,
    ) -> Result<Vec<Record>, MemoryError> {
        let (tree, lock) = (self.tree.clone(), Arc::clone(&self.lock));
        let (prefix, filters) = (prefix.clone(), filters.to_vec());
        Self::blocking(move || {
            let _guard = lock
                .read()
                .map_err(|_| MemoryError::backend("sled memory: the lock is poisoned"))?;
            search_in(&tree, &prefix, &filters, offset, limit, now)
        })
        .await
    }

    async fn namespaces(&self, now: u64) -> Result<Vec<Namespace>, MemoryError> {
        let (tree, lock) = (self.tree.clone(), Arc::clone(&self.lock));
        Self::blocking(move || {
            let _guard = lock
                .read()
                .map_err(|_| MemoryError::backend("sled memory: the lock is poisoned"))?;
            namespaces_in(&tree, now)
        })
        .await
    }
}
