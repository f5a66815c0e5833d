//! The sled store: the embedded default.

use crate::record::{
    checkpoint_from_slice, checkpoint_to_vec, head_from_slice, head_to_vec, load_error,
};
use async_trait::async_trait;
use harness::SessionId;
use harness::session::{Checkpoint, Commit, SessionStore, StoreError, StoredRun};
use sled::transaction::{ConflictableTransactionError, TransactionError, Transactional};
use sled::{IVec, Tree};
use std::path::{Path, PathBuf};

/// The tree of heads.
const HEADS: &str = "heads";
/// The tree of checkpoints.
const CHECKPOINTS: &str = "checkpoints";

/// Sessions in a [sled](https://docs.rs/sled) database: the embedded default.
///
/// Two trees:
/// - `heads`: the session id's UTF-8 bytes → the head as JSON;
/// - `checkpoints`: [`SledStore::checkpoint_key`] (the id's length as 8
///   big-endian bytes, the id, the seq as 8 big-endian bytes) → the
///   checkpoint as JSON. The length prefix keeps one session's records
///   apart from another's whose id it prefixes (`a` and `ab`), and the
///   big-endian seq keeps a session's log in order.
///
/// A commit is one sled transaction over both trees, so it is all or
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
    path: Option<PathBuf>,
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
        let db = sled::Config::new()
            .path(path)
            .open()
            .map_err(|e| sled_error(&format!("open {}", path.display()), &e))?;
        Self::with_db(db, Some(path.to_path_buf()))
    }

    /// A database in a temporary place, deleted when the store is dropped:
    /// for tests.
    pub fn temporary() -> Result<Self, StoreError> {
        let db = sled::Config::new()
            .temporary(true)
            .open()
            .map_err(|e| sled_error("open a temporary database", &e))?;
        Self::with_db(db, None)
    }

    fn with_db(db: sled::Db, path: Option<PathBuf>) -> Result<Self, StoreError> {
        let heads = db
            .open_tree(HEADS)
            .map_err(|e| sled_error("open the heads tree", &e))?;
        let checkpoints = db
            .open_tree(CHECKPOINTS)
            .map_err(|e| sled_error("open the checkpoints tree", &e))?;
        Ok(Self {
            db,
            heads,
            checkpoints,
            path,
        })
    }

    /// The database, for inspection and repair tools.
    pub fn db(&self) -> &sled::Db {
        &self.db
    }

    /// The `heads` tree.
    pub fn heads_tree(&self) -> &Tree {
        &self.heads
    }

    /// The `checkpoints` tree.
    pub fn checkpoints_tree(&self) -> &Tree {
        &self.checkpoints
    }

    /// The key of `session`'s head in the `heads` tree.
    pub fn head_key(session: &SessionId) -> Vec<u8> {
        session.as_str().as_bytes().to_vec()
    }

    /// The key of checkpoint `seq` of `session` in the `checkpoints` tree.
    pub fn checkpoint_key(session: &SessionId, seq: u64) -> Vec<u8> {
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

    fn commit_blocking(&self, commit: &Commit) -> Result<(), StoreError> {
        let session = &commit.head.session_id;
        let head_key = Self::head_key(session);
        let head = IVec::from(head_to_vec(&commit.head)?);
        let append: Vec<(Vec<u8>, IVec)> = commit
            .append
            .iter()
            .map(|cp| {
                Ok((
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
        let result = (&self.heads, &self.checkpoints).transaction(|(heads, cps)| {
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
            }
            for (key, value) in &append {
                cps.insert(key.as_slice(), value.clone())?;
            }
            heads.insert(head_key.as_slice(), head.clone())?;
            Ok(())
        });
        match result {
            Ok(()) => {}
            Err(TransactionError::Abort(e)) => return Err(e),
            Err(TransactionError::Storage(e)) => {
                return Err(sled_error(&format!("commit session {session}"), &e));
            }
        }
        if commit.durable {
            self.db
                .flush()
                .map_err(|e| sled_error(&format!("flush session {session}"), &e))?;
        }
        Ok(())
    }

    fn checkpoints_blocking(
        &self,
        session: &SessionId,
        from_seq: u64,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        let start = Self::checkpoint_key(session, from_seq);
        let end = Self::checkpoint_key(session, u64::MAX);
        let mut out = Vec::new();
        for item in self.checkpoints.range(start..=end) {
            let (key, value) =
                item.map_err(|e| sled_error(&format!("read the log of session {session}"), &e))?;
            let seq = seq_of_key(&key).ok_or_else(|| {
                load_error(session, "checkpoint key", format!("malformed key {key:?}"))
            })?;
            out.push(checkpoint_from_slice(session, seq, &value)?);
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
        self.blocking(move |store| store.commit_blocking(&commit))
            .await
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
        self.blocking(|store| {
            store
                .db
                .flush()
                .map(drop)
                .map_err(|e| sled_error("flush", &e))
        })
        .await
    }
}
