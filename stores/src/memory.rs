//! The in-memory store.

use crate::feed::Feed;
use crate::record::check_head;
use async_trait::async_trait;
use harness::SessionId;
use harness::session::{Checkpoint, Commit, Created, SessionStore, StoreError, StoredRun};
use std::collections::BTreeMap;
use std::sync::Mutex;

#[derive(Debug, Default)]
struct Session {
    head: Option<StoredRun>,
    log: BTreeMap<u64, Checkpoint>,
    /// Its position in the feed of created sessions, if a commit created it.
    created: Option<u64>,
}

/// Sessions in memory: gone with the process. Every commit is atomic and
/// compare-and-set like in the durable stores, and a head of another
/// [`SCHEMA_VERSION`](harness::session::SCHEMA_VERSION) is refused with
/// [`StoreError::Load`] like there, so tests on it mean the same.
///
/// ```
/// use harness_stores::MemoryStore;
/// use harness::session::SessionStore;
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let store = MemoryStore::new();
/// assert!(store.sessions().await.unwrap().is_empty());
/// # });
/// ```
#[derive(Debug, Default)]
pub struct MemoryStore {
    sessions: Mutex<BTreeMap<SessionId, Session>>,
    /// Taken while `sessions` is held, so in the commits' order.
    feed: Mutex<Feed>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The head and log of `session`, as stored (the log in order), or
    /// `None` if there is no such session: to carry a session to another
    /// store or engine (`harness-restate` keeps it in Restate's state).
    pub fn export(&self, session: &SessionId) -> Option<(StoredRun, Vec<Checkpoint>)> {
        let sessions = self.lock();
        let stored = sessions.get(session)?;
        let head = stored.head.clone()?;
        Some((head, stored.log.values().cloned().collect()))
    }

    /// Puts `head` and its `log` in place of whatever the store holds for
    /// that session (the head's): the inverse of [`export`](Self::export).
    pub fn import(&self, head: StoredRun, log: Vec<Checkpoint>) {
        let id = head.session_id.clone();
        let mut sessions = self.lock();
        let session = Session {
            log: log.into_iter().map(|cp| (cp.seq, cp)).collect(),
            head: Some(head),
            // Not a creation: an imported session keeps the place in the
            // feed of created sessions it had, if any, and takes none.
            created: sessions.get(&id).and_then(|s| s.created),
        };
        sessions.insert(id, session);
    }

    /// Forgets `session`, head and log.
    pub fn remove(&self, session: &SessionId) {
        let mut sessions = self.lock();
        if let Some(position) = sessions.remove(session).and_then(|s| s.created) {
            self.feed().remove(position);
        }
    }

    fn feed(&self) -> std::sync::MutexGuard<'_, Feed> {
        self.feed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<SessionId, Session>> {
        // A panic elsewhere cannot leave a half-applied commit: commits are
        // applied after all checks, without a panic point in between.
        self.sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait]
impl SessionStore for MemoryStore {
    async fn load(&self, session: &SessionId) -> Result<Option<StoredRun>, StoreError> {
        let head = self.lock().get(session).and_then(|s| s.head.clone());
        if let Some(head) = &head {
            check_head(session, head)?;
        }
        Ok(head)
    }

    async fn commit(&self, commit: &Commit) -> Result<(), StoreError> {
        let mut sessions = self.lock();
        let id = commit.head.session_id.clone();
        let stored = sessions.get(&id).and_then(|s| s.head.as_ref());
        if let Some(head) = stored {
            // A head this build cannot read is not overwritten either.
            check_head(&id, head)?;
        }
        let found = stored.map(|h| h.version);
        if found != commit.expected_version {
            return Err(StoreError::Conflict {
                session: id,
                expected: commit.expected_version,
                found,
            });
        }
        let session = sessions.entry(id).or_default();
        for seq in &commit.remove {
            session.log.remove(seq);
        }
        for cp in &commit.append {
            session.log.insert(cp.seq, cp.clone());
        }
        session.head = Some(commit.head.clone());
        if found.is_none() {
            let mut feed = self.feed();
            let position = feed.push(commit.head.session_id.clone());
            if let Some(old) = session.created.replace(position) {
                feed.remove(old);
            }
        }
        Ok(())
    }

    async fn checkpoints(
        &self,
        session: &SessionId,
        from_seq: u64,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        Ok(self
            .lock()
            .get(session)
            .map(|s| s.log.range(from_seq..).map(|(_, cp)| cp.clone()).collect())
            .unwrap_or_default())
    }

    async fn sessions(&self) -> Result<Vec<SessionId>, StoreError> {
        Ok(self
            .lock()
            .iter()
            .filter(|(_, s)| s.head.is_some())
            .map(|(id, _)| id.clone())
            .collect())
    }

    async fn created_since(
        &self,
        since: Option<u64>,
        limit: usize,
    ) -> Result<Option<Created>, StoreError> {
        Ok(Some(self.feed().page(since, limit)))
    }

    async fn flush(&self) -> Result<(), StoreError> {
        Ok(())
    }
}
