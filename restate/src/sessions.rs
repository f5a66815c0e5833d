//! The sessions of agents served on Restate, read as a [`SessionStore`]:
//! for `harness sessions`-like tools and the studio
//! (`Studio::read_only(Arc::new(RestateSessionReader::new(admin)))`).

use async_trait::async_trait;
use harness::SessionId;
use harness::session::{Checkpoint, Commit, SessionStore, StoreError, StoredRun};

use serde::{Deserialize, Serialize};

use crate::{Admin, RestateError};

/// The name of the virtual object a deployment serves.
pub const OBJECT: &str = "HarnessAgent";

/// The state key of a session's head.
pub(crate) const HEAD: &str = "head";

/// The state key of the checkpoints a run added, `first..=last`: one key
/// per run, so that a run writes (and journals) only what it adds, in one
/// entry.
pub(crate) fn checkpoints_key(first: u64, last: u64) -> String {
    format!("cp/{first:020}-{last:020}")
}

/// The sequence numbers `first..=last` a state key's checkpoints lie in, if
/// it holds checkpoints.
pub(crate) fn checkpoints_range(key: &str) -> Option<(u64, u64)> {
    let (first, last) = key.strip_prefix("cp/")?.split_once('-')?;
    Some((first.parse().ok()?, last.parse().ok()?))
}

/// A session as the object keeps it: its head and checkpoint log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The head.
    pub head: StoredRun,
    /// The checkpoints, in order.
    pub log: Vec<Checkpoint>,
}

/// Reads the sessions the `HarnessAgent` virtual object keeps, from the
/// admin API's `state` table: no service needs to be up, and no handler
/// runs. Read-only: a commit is refused, for only the object's handlers
/// write its sessions. (Through the ingress, the object's shared `session`
/// handler gives one session too: [`AgentClient::session`](crate::AgentClient::session).)
#[derive(Clone, Debug)]
pub struct RestateSessionReader {
    admin: Admin,
    object: String,
}

/// `text` as an SQL string literal.
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

fn backend(e: RestateError) -> StoreError {
    StoreError::Backend {
        message: e.to_string(),
    }
}

impl RestateSessionReader {
    /// A reader through `admin`, of the sessions of `HarnessAgent`.
    pub fn new(admin: Admin) -> Self {
        Self {
            admin,
            object: OBJECT.to_owned(),
        }
    }

    /// The same reader, of the sessions of the virtual object `name` (an
    /// agent served under a name of its own, `agent_object!`).
    pub fn object(mut self, name: impl Into<String>) -> Self {
        self.object = name.into();
        self
    }

    /// The session `session` as the object keeps it, if it has one.
    pub async fn snapshot(&self, session: &SessionId) -> Result<Option<Snapshot>, RestateError> {
        let rows = self
            .admin
            .query(&format!(
                "SELECT key, value_utf8 FROM state WHERE service_name = {} AND service_key = {}",
                literal(&self.object),
                literal(session.as_str())
            ))
            .await?;
        let bad = |key: &str, e: serde_json::Error| RestateError::Answer {
            url: format!("the state of {}/{session}", self.object),
            message: format!("`{key}` is not part of a session: {e}"),
        };
        let mut head = None;
        let mut log = Vec::new();
        for row in &rows {
            let (Some(key), Some(text)) = (row["key"].as_str(), row["value_utf8"].as_str()) else {
                continue;
            };
            if key == HEAD {
                head = Some(serde_json::from_str::<StoredRun>(text).map_err(|e| bad(key, e))?);
            } else if checkpoints_range(key).is_some() {
                log.extend(serde_json::from_str::<Vec<Checkpoint>>(text).map_err(|e| bad(key, e))?);
            }
        }
        log.sort_by_key(|cp| cp.seq);
        Ok(head.map(|head| Snapshot { head, log }))
    }
}

#[async_trait]
impl SessionStore for RestateSessionReader {
    async fn load(&self, session: &SessionId) -> Result<Option<StoredRun>, StoreError> {
        Ok(self
            .snapshot(session)
            .await
            .map_err(backend)?
            .map(|s| s.head))
    }

    async fn commit(&self, commit: &Commit) -> Result<(), StoreError> {
        Err(StoreError::Backend {
            message: format!(
                "sessions on Restate are read-only here: session {} is written by its `{}` handlers",
                commit.head.session_id, self.object
            ),
        })
    }

    async fn checkpoints(
        &self,
        session: &SessionId,
        from_seq: u64,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        Ok(self
            .snapshot(session)
            .await
            .map_err(backend)?
            .map(|s| s.log.into_iter().filter(|c| c.seq >= from_seq).collect())
            .unwrap_or_default())
    }

    async fn sessions(&self) -> Result<Vec<SessionId>, StoreError> {
        let rows = self
            .admin
            .query(&format!(
                "SELECT service_key FROM state \
                 WHERE service_name = {} AND key = 'head' ORDER BY service_key",
                literal(&self.object)
            ))
            .await
            .map_err(backend)?;
        Ok(rows
            .iter()
            .filter_map(|r| r["service_key"].as_str())
            .map(SessionId::from)
            .collect())
    }

    async fn flush(&self) -> Result<(), StoreError> {
        Ok(())
    }
}
