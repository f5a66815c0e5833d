//! The sled store: the embedded default.

use crate::group::GroupFlush;
use crate::record::{
    checkpoint_from_slice, checkpoint_to_vec, head_from_slice, head_to_vec, load_error,
};
use async_trait::async_trait;
use harness::SessionId;
use harness::session::{Checkpoint, CheckpointKind, Commit, SessionStore, StoreError, StoredRun};
use sled::transaction::{ConflictableTransactionError, TransactionError, Transactional};
use sled::{IVec, Tree};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The tree of heads.
const HEADS: &str = "heads";
/// The tree of update checkpoints.
const CHECKPOINTS: &str = "checkpoints";
/// The tree of snapshot checkpoints.
const SNAPSHOTS: &str = "snapshots";

/// sled's segment size (the unit of its log and of its write buffer) for
/// new databases: 128 KiB rather than sled's 512 KiB.
///
/// sled keeps a value's old versions until it cleans a segment, and cleans
/// only once several segments are mostly dead, so a small database takes a
/// few segments whatever it holds. With 512 KiB segments a 500-step session
/// of 1 KiB steps (513 KB of state) took 4.8 times its state on disk; with
/// 128 KiB, 2.6 times (`tests/it/sessions.rs`). sled runs its own test suite
/// with far smaller segments. The size is fixed when a database is created:
/// an existing database opens with the size it was made with.
const SEGMENT_SIZE: usize = 128 * 1024;

/// Sessions in a [sled](https://docs.rs/sled) database: the embedded default.
///
/// Three trees:
/// - `heads`: the session id's UTF-8 bytes → the head as JSON;
/// - `checkpoints`: the id's length as 8 big-endian bytes, the id, the seq
///   as 8 big-endian bytes → an update
///   checkpoint as JSON. The length prefix keeps one session's records
///   apart from another's whose id it prefixes (`a` and `ab`), and the
///   big-endian seq keeps a session's log in order;
/// - `snapshots`: the same keys → a snapshot checkpoint as JSON.
///
/// Snapshots live apart from updates because sled rewrites a whole tree
/// node when it consolidates one (every ten changes to it): a large snapshot
/// sharing a node with the small updates appended after it would be
/// rewritten every few steps. Apart, it is written about once.
///
/// A commit is one sled transaction over the three trees, so it is all or
/// nothing, also across a crash; a `durable` commit flushes the database
/// before it returns. One process at a time can open a database (sled
/// locks it).
///
/// ```
/// use harness_stores::SledStore;
///
/// let store = SledStore::temporary()?;
/// # Ok::<(), harness::session::StoreError>(())
/// ```
#[derive(Clone)]
pub struct SledStore {
    db: sled::Db,
    heads: Tree,
    checkpoints: Tree,
    snapshots: Tree,
    path: Option<PathBuf>,
    /// Durable commits of concurrent sessions share flushes.
    group: Arc<GroupFlush>,
}

impl std::fmt::Debug for SledStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SledStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

fn sled_error(what: &str, e: &sled::Error) -> StoreError {
    StoreError::backend(format!("sled store: cannot {what}: {e}"))
}

impl SledStore {
    /// Opens (or creates) the database at `path`. Blocks while sled
    /// recovers its log; call it before starting work, or inside
    /// `spawn_blocking`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let path = path.as_ref();
        let segment_size = stored_segment_size(path).unwrap_or(SEGMENT_SIZE);
        let db = sled::Config::new()
            .path(path)
            .segment_size(segment_size)
            .open()
            .map_err(|e| sled_error(&format!("open {}", path.display()), &e))?;
        Self::with_db(db, Some(path.to_path_buf()))
    }

    /// A database in a temporary place, deleted when the store is dropped:
    /// for tests.
    pub fn temporary() -> Result<Self, StoreError> {
        let db = sled::Config::new()
            .temporary(true)
            .segment_size(SEGMENT_SIZE)
            .open()
            .map_err(|e| sled_error("open a temporary database", &e))?;
        Self::with_db(db, None)
    }

    /// Opens a database from a sled configuration of your own (cache
    /// size, path, ...), used as it is: sled's own segment size (512 KiB)
    /// unless you set one. sled refuses to open a database with a segment
    /// size other than the one it was created with, so for a database made
    /// by [`SledStore::open`] set `.segment_size(128 * 1024)`, the size
    /// [`SledStore::open`] and [`SledStore::temporary`] create databases
    /// with: sled cleans its log segment by segment, and only once several
    /// are mostly dead, so a small database holds a few whole segments
    /// whatever it stores (a 500-step session of 1 KiB steps took 4.8 times
    /// its state on disk with 512 KiB segments, 2.6 times with 128 KiB).
    /// sled marks that setting as meant for tests; this crate relies on it
    /// for that reason. Blocks like [`SledStore::open`].
    pub fn with_config(config: &sled::Config) -> Result<Self, StoreError> {
        let db = config
            .open()
            .map_err(|e| sled_error("open the configured database", &e))?;
        let path = (!config.temporary).then(|| config.path.clone());
        Self::with_db(db, path)
    }

    fn with_db(db: sled::Db, path: Option<PathBuf>) -> Result<Self, StoreError> {
        let heads = db
            .open_tree(HEADS)
            .map_err(|e| sled_error("open the heads tree", &e))?;
        let checkpoints = db
            .open_tree(CHECKPOINTS)
            .map_err(|e| sled_error("open the checkpoints tree", &e))?;
        let snapshots = db
            .open_tree(SNAPSHOTS)
            .map_err(|e| sled_error("open the snapshots tree", &e))?;
        Ok(Self {
            db,
            heads,
            checkpoints,
            snapshots,
            path,
            group: Arc::new(GroupFlush::default()),
        })
    }

    /// The database, for inspection and repair tools.
    pub fn db(&self) -> &sled::Db {
        &self.db
    }

    /// The key of `session`'s head in the `heads` tree.
    fn head_key(session: &SessionId) -> Vec<u8> {
        session.as_str().as_bytes().to_vec()
    }

    /// The key of checkpoint `seq` of `session` in the `checkpoints` and
    /// `snapshots` trees.
    fn checkpoint_key(session: &SessionId, seq: u64) -> Vec<u8> {
        let mut key = checkpoint_prefix(session);
        key.extend_from_slice(&seq.to_be_bytes());
        key
    }

    async fn blocking<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        F: FnOnce(&SledStore) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        let store = self.clone();
        tokio::task::spawn_blocking(move || f(&store))
            .await
            .map_err(|e| StoreError::backend(format!("sled store: a disk task failed: {e}")))?
    }

    /// Applies `commit` atomically; returns its group-commit ticket.
    fn commit_blocking(&self, commit: &Commit) -> Result<u64, StoreError> {
        let session = &commit.head.session_id;
        let head_key = Self::head_key(session);
        let head = IVec::from(head_to_vec(&commit.head)?);
        // (is a snapshot, key, record)
        let append: Vec<(bool, Vec<u8>, IVec)> = commit
            .append
            .iter()
            .map(|cp| {
                Ok((
                    matches!(cp.kind, CheckpointKind::Snapshot(_)),
                    Self::checkpoint_key(session, cp.seq),
                    IVec::from(checkpoint_to_vec(session, cp)?),
                ))
            })
            .collect::<Result<_, StoreError>>()?;
        let remove: Vec<Vec<u8>> = commit
            .remove
            .iter()
            .map(|&seq| Self::checkpoint_key(session, seq))
            .collect();
        let expected = commit.expected_version;
        let trees = (&self.heads, &self.checkpoints, &self.snapshots);
        let result = trees.transaction(|(heads, cps, snaps)| {
            let found = match heads.get(&head_key)? {
                None => None,
                Some(bytes) => Some(
                    head_from_slice(session, &bytes)
                        .map_err(ConflictableTransactionError::Abort)?
                        .version,
                ),
            };
            if found != expected {
                return Err(ConflictableTransactionError::Abort(StoreError::Conflict {
                    session: session.clone(),
                    expected,
                    found,
                }));
            }
            for key in &remove {
                cps.remove(key.as_slice())?;
                snaps.remove(key.as_slice())?;
            }
            for (snapshot, key, value) in &append {
                let tree = if *snapshot { snaps } else { cps };
                tree.insert(key.as_slice(), value.clone())?;
            }
            heads.insert(head_key.as_slice(), head.clone())?;
            Ok(())
        });
        match result {
            Ok(()) => Ok(self.group.ticket()),
            Err(TransactionError::Abort(e)) => Err(e),
            Err(TransactionError::Storage(e)) => {
                Err(sled_error(&format!("commit session {session}"), &e))
            }
        }
    }

    /// Flushes the database (one `fsync` of its log), off the async threads.
    async fn flush_db(&self) -> Result<(), StoreError> {
        self.blocking(|store| {
            store
                .db
                .flush()
                .map(drop)
                .map_err(|e| sled_error("flush", &e))
        })
        .await
    }

    fn checkpoints_blocking(
        &self,
        session: &SessionId,
        from_seq: u64,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        let start = Self::checkpoint_key(session, from_seq);
        let end = Self::checkpoint_key(session, u64::MAX);
        let read = |tree: &Tree| -> Result<Vec<Checkpoint>, StoreError> {
            let mut out = Vec::new();
            for item in tree.range(start.as_slice()..=end.as_slice()) {
                let (key, value) = item
                    .map_err(|e| sled_error(&format!("read the log of session {session}"), &e))?;
                let seq = seq_of_key(&key).ok_or_else(|| {
                    load_error(session, "checkpoint key", format!("malformed key {key:?}"))
                })?;
                out.push(checkpoint_from_slice(session, seq, &value)?);
            }
            Ok(out)
        };
        // Snapshots first: a commit may remove a snapshot (superseded by a
        // newer one, written with the updates before it) but never an
        // update, so a reader that raced such a commit still finds every
        // update after the snapshot it found.
        let snapshots = read(&self.snapshots)?;
        let updates = read(&self.checkpoints)?;
        // Both are in seq order: merge them.
        let mut out = Vec::with_capacity(updates.len() + snapshots.len());
        let (mut u, mut s) = (
            updates.into_iter().peekable(),
            snapshots.into_iter().peekable(),
        );
        loop {
            let next = match (u.peek(), s.peek()) {
                (Some(a), Some(b)) if a.seq == b.seq => {
                    return Err(load_error(
                        session,
                        format!("checkpoint {}", a.seq),
                        "stored both as an update and as a snapshot",
                    ));
                }
                (Some(a), Some(b)) if a.seq < b.seq => u.next(),
                (Some(_), Some(_)) | (None, Some(_)) => s.next(),
                (Some(_), None) => u.next(),
                (None, None) => break,
            };
            out.extend(next);
        }
        Ok(out)
    }

    fn sessions_blocking(&self) -> Result<Vec<SessionId>, StoreError> {
        let mut out = Vec::new();
        for key in self.heads.iter().keys() {
            let key = key.map_err(|e| sled_error("list the sessions", &e))?;
            match String::from_utf8(key.to_vec()) {
                Ok(id) => out.push(SessionId::from(id)),
                Err(e) => {
                    return Err(load_error(
                        &SessionId::from(String::from_utf8_lossy(&key).into_owned()),
                        "head key",
                        format!("the session id is not UTF-8: {e}"),
                    ));
                }
            }
        }
        Ok(out)
    }
}

/// The segment size an existing database at `path` was created with, from
/// the `conf` file sled keeps beside it (`segment_size: N` on a line, the
/// lines followed by a binary checksum).
fn stored_segment_size(path: &Path) -> Option<usize> {
    let conf = std::fs::read(path.join("conf")).ok()?;
    String::from_utf8_lossy(&conf)
        .lines()
        .find_map(|line| line.strip_prefix("segment_size:"))
        .and_then(|n| n.trim().parse().ok())
}

fn checkpoint_prefix(session: &SessionId) -> Vec<u8> {
    let id = session.as_str().as_bytes();
    let mut key = Vec::with_capacity(8 + id.len() + 8);
    key.extend_from_slice(&(id.len() as u64).to_be_bytes());
    key.extend_from_slice(id);
    key
}

fn seq_of_key(key: &[u8]) -> Option<u64> {
    let tail = key.len().checked_sub(8).map(|at| &key[at..])?;
    Some(u64::from_be_bytes(tail.try_into().ok()?))
}

#[async_trait]
impl SessionStore for SledStore {
    async fn load(&self, session: &SessionId) -> Result<Option<StoredRun>, StoreError> {
        let session = session.clone();
        self.blocking(move |store| {
            let bytes = store
                .heads
                .get(SledStore::head_key(&session))
                .map_err(|e| sled_error(&format!("read the head of session {session}"), &e))?;
            bytes.map(|b| head_from_slice(&session, &b)).transpose()
        })
        .await
    }

    async fn commit(&self, commit: Commit) -> Result<(), StoreError> {
        let durable = commit.durable;
        let ticket = self
            .blocking(move |store| store.commit_blocking(&commit))
            .await?;
        if durable {
            self.group.durable(ticket, || self.flush_db()).await?;
        }
        Ok(())
    }

    async fn checkpoints(
        &self,
        session: &SessionId,
        from_seq: u64,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        let session = session.clone();
        self.blocking(move |store| store.checkpoints_blocking(&session, from_seq))
            .await
    }

    async fn sessions(&self) -> Result<Vec<SessionId>, StoreError> {
        self.blocking(SledStore::sessions_blocking).await
    }

    async fn flush(&self) -> Result<(), StoreError> {
        self.flush_db().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One session's records never show in another's whose id prefixes it,
    /// also at the key level, and a session's keys sort by seq.
    #[test]
    fn keys_keep_sessions_apart_and_in_order() {
        let id = SessionId::from;
        let a = SledStore::checkpoint_key(&id("a"), u64::MAX);
        let ab = SledStore::checkpoint_key(&id("ab"), 0);
        assert!(!ab.starts_with(&a[..a.len() - 8]));
        let a0 = SledStore::checkpoint_key(&id("a"), 0);
        let a1 = SledStore::checkpoint_key(&id("a"), 1);
        let a256 = SledStore::checkpoint_key(&id("a"), 256);
        assert!(a0 < a1 && a1 < a256 && a256 < a);
        assert_eq!(seq_of_key(&a256), Some(256));
    }
}
