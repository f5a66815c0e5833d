//! The sessions of agents served on Restate, read as a [`SessionStore`]:
//! for `harness sessions`-like tools and the studio
//! (`Studio::read_only(Arc::new(RestateSessionReader::new(admin)))`).

use async_trait::async_trait;
use harness::SessionId;
use harness::session::{
    Checkpoint, CheckpointKind, Commit, SessionStore, StoreError, StoreLoad, StoredRun,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::{Admin, RestateError};

/// The name of the virtual object a deployment serves.
pub const OBJECT: &str = "HarnessAgent";

/// The state key of a session's head.
pub(crate) const HEAD: &str = "head";

/// The state key of the checkpoints a run added, `first..=last`: one key
/// per run, so that a run writes (and journals) only what it adds, in one
/// entry.
#[cfg_attr(not(feature = "service"), allow(dead_code))]
pub(crate) fn checkpoints_key(first: u64, last: u64) -> String {
    format!("cp/{first:020}-{last:020}")
}

/// The sequence numbers `first..=last` a state key's checkpoints lie in, if
/// it holds checkpoints.
pub(crate) fn checkpoints_range(key: &str) -> Option<(u64, u64)> {
    let (first, last) = key.strip_prefix("cp/")?.split_once('-')?;
    Some((first.parse().ok()?, last.parse().ok()?))
}

/// The size (as JSON) from which a field of a checkpoint's state or update
/// is kept by reference: once per session under `val/{sha256}`, whatever
/// the number of checkpoints that hold it, journaled in an entry of its
/// own.
pub const BY_REFERENCE_BYTES: usize = 64 * 1024;

/// The state key of the value whose SHA-256 (hex) is `hash`.
pub(crate) fn value_key(hash: &str) -> String {
    format!("val/{hash}")
}

/// The state key of the values' reference counts (a map from hash to the
/// number of kept checkpoints that hold it).
#[cfg_attr(not(feature = "service"), allow(dead_code))]
pub(crate) const VALUES: &str = "vals";

/// A checkpoint as the object keeps it: the fields of its state or update
/// of [`BY_REFERENCE_BYTES`] or more replaced by `null`, and named in
/// `refs` with the hash of the value kept under [`value_key`]. A key
/// written before values were kept by reference reads as one without
/// `refs`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Kept {
    #[serde(flatten)]
    pub(crate) cp: Checkpoint,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) refs: BTreeMap<String, String>,
}

/// The SHA-256 of `bytes`, in hex.
#[cfg_attr(not(feature = "service"), allow(dead_code))]
pub(crate) fn sha256(bytes: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The object fields of a checkpoint that may be kept by reference: its
/// snapshot's or update's.
fn fields_of(kind: &mut CheckpointKind) -> Option<&mut serde_json::Map<String, Value>> {
    match kind {
        CheckpointKind::Snapshot(Value::Object(m)) | CheckpointKind::Update(Value::Object(m)) => {
            Some(m)
        }
        _ => None,
    }
}

/// `cp` as the object keeps it, and the values it moved out, by hash.
#[cfg_attr(not(feature = "service"), allow(dead_code))]
pub(crate) fn by_reference(mut cp: Checkpoint) -> (Kept, Vec<(String, Value)>) {
    let mut refs = BTreeMap::new();
    let mut moved = Vec::new();
    if let Some(fields) = fields_of(&mut cp.kind) {
        for (name, value) in fields.iter_mut() {
            let text = value.to_string();
            if text.len() < BY_REFERENCE_BYTES {
                continue;
            }
            let hash = sha256(text.as_bytes());
            refs.insert(name.clone(), hash.clone());
            moved.push((hash, std::mem::take(value)));
        }
    }
    (Kept { cp, refs }, moved)
}

/// `kept` whole again, its fields taken from `values` (by hash); the hash
/// of a value `values` lacks, if one does.
pub(crate) fn restore(
    mut kept: Kept,
    values: &HashMap<String, Value>,
) -> Result<Checkpoint, String> {
    if kept.refs.is_empty() {
        return Ok(kept.cp);
    }
    let Some(fields) = fields_of(&mut kept.cp.kind) else {
        return Err(format!(
            "checkpoint {} names values by reference but holds no fields",
            kept.cp.seq
        ));
    };
    for (name, hash) in &kept.refs {
        let value = values.get(hash).ok_or_else(|| hash.clone())?;
        fields.insert(name.clone(), value.clone());
    }
    Ok(kept.cp)
}

/// The hashes `kept` refers to.
#[cfg_attr(not(feature = "service"), allow(dead_code))]
pub(crate) fn hashes<'a>(kept: impl IntoIterator<Item = &'a Kept>) -> Vec<String> {
    let mut out: Vec<String> = kept
        .into_iter()
        .flat_map(|k| k.refs.values().cloned())
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Counts the references of checkpoints `added` and drops those of
/// `removed` in `counts`: the hashes counted for the first time (values to
/// write) and those no longer counted (values to clear).
#[cfg_attr(not(feature = "service"), allow(dead_code))]
pub(crate) fn account<'a>(
    counts: &mut BTreeMap<String, u64>,
    added: impl IntoIterator<Item = &'a Kept>,
    removed: impl IntoIterator<Item = &'a Kept>,
) -> (Vec<String>, Vec<String>) {
    let before: BTreeSet<String> = counts.keys().cloned().collect();
    for hash in added.into_iter().flat_map(|k| k.refs.values()) {
        *counts.entry(hash.clone()).or_default() += 1;
    }
    for hash in removed.into_iter().flat_map(|k| k.refs.values()) {
        if let Some(n) = counts.get_mut(hash) {
            *n = n.saturating_sub(1);
        }
    }
    let new = counts
        .iter()
        .filter(|(h, n)| **n > 0 && !before.contains(*h))
        .map(|(h, _)| h.clone())
        .collect();
    let gone: Vec<String> = counts
        .iter()
        .filter(|(_, n)| **n == 0)
        .map(|(h, _)| h.clone())
        .collect();
    counts.retain(|_, n| *n > 0);
    (new, gone)
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
///
/// # The object must be one the server has
///
/// The `state` table holds no row for an object the server does not
/// know, so a name no deployment serves (a typo) would read as an object
/// without sessions. Before its first read the reader asks the server for
/// its virtual objects ([`Admin::virtual_objects`]); an object it does not
/// have is a [`RestateError::NoSuchObject`] naming the object asked for and
/// those the server has (through [`SessionStore`], a
/// [`StoreError::Backend`] with that message), and nothing is read.
///
/// The check is made once: once the server has been found to have the
/// object, later reads (of this reader and of its clones) trust it, and
/// cost no more than the query they make. A check that fails (no such
/// object, or the server not answering) is not kept: the next read checks
/// again, so an object registered meanwhile is then found. An object whose
/// deployment is removed after the check reads as the server then keeps
/// it. [`check`](Self::check) makes the check at once (`harness sessions`
/// refuses a `restate://…/OBJECT` URL with it before reading anything).
///
/// # What a read costs
///
/// The server's SQL (Restate 1.7, measured) scans the `state` table's
/// rows of every partition a query does not rule out by its partition
/// key, whatever else it asks, and pays for the values it selects in each
/// row scanned: a query for one session's values that names no partition
/// key costs the values of every session of every object on the server
/// (80 ms on a server of 90 MB of state, where the same query naming the
/// partition key takes 4 ms, and one that selects no value 5 ms). So each
/// read here names the partition keys of the sessions it reads (learnt
/// first from a query that selects no value), and reads no more values
/// than it returns:
///
/// - [`sessions`](SessionStore::sessions) (and the pages of
///   [`sessions_page`](SessionStore::sessions_page), which read it) reads
///   the ids and partition keys of the heads, no value;
/// - [`load`](SessionStore::load) reads the head's key alone (`head`), no
///   checkpoint or value kept by reference. A session the reader's latest
///   listing holds has its head read with those of the sessions listed
///   after it, [`HEADS_PER_QUERY`] in one query, as `harness sessions list`
///   and the studio's pages load them one after the other: each later
///   `load` of one of them, within [`HEAD_KEPT_FOR`] of that query, takes
///   the head it read (once; after that, or later, its own `load` reads
///   it again). Any other session's head costs two queries (its partition
///   key, then its head), or one when it has none;
/// - [`checkpoints`](SessionStore::checkpoints) and
///   [`snapshot`](Self::snapshot) read the session's whole state (its
///   partition key first).
///
/// So a head that `load` returns was read at most [`HEAD_KEPT_FOR`] before
/// the call, by the `load` of a session listed before it; errors are the
/// same as a read of that head alone (a head that does not read fails its
/// own `load`, not the others').
#[derive(Clone, Debug)]
pub struct RestateSessionReader {
    admin: Admin,
    object: String,
    /// Set once the server was found to have `object` (shared by clones).
    found: Arc<AtomicBool>,
    /// The latest listing, and the heads read with others (shared by
    /// clones).
    heads: Arc<Mutex<Heads>>,
}

/// How many heads one query reads when a session of the reader's latest
/// listing is loaded: its own and those of the sessions listed after it.
pub const HEADS_PER_QUERY: usize = 64;

/// How long a head read with others stays for its own `load` (which takes
/// it once); later, that `load` reads it again.
pub const HEAD_KEPT_FOR: Duration = Duration::from_millis(250);

/// The most bytes of session ids one query of several heads names (the
/// rest are read by a later query).
const IDS_PER_QUERY_BYTES: usize = 64 * 1024;

/// What a reader keeps between its reads: the ids of its latest listing,
/// in its order, each with its partition key (when the server gave one),
/// and the heads read with others, not yet taken.
#[derive(Debug, Default)]
struct Heads {
    listed: Vec<(SessionId, Option<u64>)>,
    /// Where each id is in `listed`.
    at: HashMap<SessionId, usize>,
    /// By id: when the query that read the head was made, and its text
    /// (`None`: the session had no head then).
    read: HashMap<SessionId, (Instant, Option<String>)>,
}

impl Heads {
    /// The head read for `session` with others, if one was read within
    /// [`HEAD_KEPT_FOR`] and not taken yet.
    fn take(&mut self, session: &SessionId) -> Option<Option<String>> {
        let (at, text) = self.read.remove(session)?;
        (at.elapsed() < HEAD_KEPT_FOR).then_some(text)
    }

    /// `session` and the sessions listed after it whose heads are not
    /// held, with their partition keys: the heads to read in one query.
    /// Empty when the latest listing does not hold `session`.
    fn batch(&mut self, session: &SessionId) -> Vec<(SessionId, Option<u64>)> {
        self.read.retain(|_, (at, _)| at.elapsed() < HEAD_KEPT_FOR);
        let Some(&at) = self.at.get(session) else {
            return Vec::new();
        };
        let mut bytes = 0;
        let mut batch = Vec::new();
        for (id, key) in &self.listed[at..] {
            if batch.len() == HEADS_PER_QUERY
                || (bytes > 0 && bytes + id.as_str().len() > IDS_PER_QUERY_BYTES)
            {
                break;
            }
            if id != session && self.read.contains_key(id) {
                continue;
            }
            bytes += id.as_str().len();
            batch.push((id.clone(), *key));
        }
        batch
    }
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
            found: Arc::new(AtomicBool::new(false)),
            heads: Arc::default(),
        }
    }

    /// The same reader, of the sessions of the virtual object `name` (an
    /// agent served under a name of its own, `agent_object!`). Nothing is
    /// asked of the server here: its first read checks that the server has
    /// the object (see [above](Self#the-object-must-be-one-the-server-has)),
    /// as [`check`](Self::check) does.
    pub fn object(mut self, name: impl Into<String>) -> Self {
        self.object = name.into();
        self.found = Arc::new(AtomicBool::new(false));
        self.heads = Arc::default();
        self
    }

    /// Checks that the server has registered the virtual object this reader
    /// reads, unless that was found before (by this reader or a clone).
    ///
    /// # Errors
    ///
    /// [`RestateError::NoSuchObject`] naming the object and the virtual
    /// objects the server has; or the admin API's error (it did not answer,
    /// or answered with an error). Neither is kept: the next call asks
    /// again.
    pub async fn check(&self) -> Result<(), RestateError> {
        if self.found.load(Ordering::Acquire) {
            return Ok(());
        }
        let objects = self.admin.virtual_objects().await?;
        if !objects.contains(&self.object) {
            return Err(RestateError::NoSuchObject {
                url: self.admin.base().to_owned(),
                object: self.object.clone(),
                objects,
            });
        }
        self.found.store(true, Ordering::Release);
        Ok(())
    }

    /// The session `session` as the object keeps it, if it has one.
    ///
    /// # Errors
    ///
    /// [`RestateError::NoSuchObject`] if the server has no such object
    /// ([`check`](Self::check)); the admin API's error; a
    /// [`RestateError::Answer`] naming the state key that is not part of a
    /// session.
    pub async fn snapshot(&self, session: &SessionId) -> Result<Option<Snapshot>, RestateError> {
        self.check().await?;
        let Some(partition) = self.partition_key(session).await? else {
            return Ok(None);
        };
        let rows = self
            .admin
            .query(&format!(
                "SELECT key, value_utf8 FROM state WHERE {}service_name = {} AND service_key = {}",
                partitions(&[partition]),
                literal(&self.object),
                literal(session.as_str())
            ))
            .await?;
        let bad = |key: &str, e: serde_json::Error| self.unreadable(session, key, e);
        let mut head = None;
        let mut kept = Vec::new();
        let mut values = HashMap::new();
        for row in &rows {
            let (Some(key), Some(text)) = (row["key"].as_str(), row["value_utf8"].as_str()) else {
                continue;
            };
            if key == HEAD {
                head = Some(serde_json::from_str::<StoredRun>(text).map_err(|e| bad(key, e))?);
            } else if checkpoints_range(key).is_some() {
                kept.extend(serde_json::from_str::<Vec<Kept>>(text).map_err(|e| bad(key, e))?);
            } else if let Some(hash) = key.strip_prefix("val/") {
                values.insert(
                    hash.to_string(),
                    serde_json::from_str::<Value>(text).map_err(|e| bad(key, e))?,
                );
            }
        }
        let mut log = Vec::with_capacity(kept.len());
        for k in kept {
            let seq = k.cp.seq;
            log.push(restore(k, &values).map_err(|hash| RestateError::Answer {
                url: format!("the state of {}/{session}", self.object),
                message: format!(
                    "checkpoint {seq} holds a value by reference whose key `{}` is missing",
                    value_key(&hash)
                ),
            })?);
        }
        log.sort_by_key(|cp| cp.seq);
        Ok(head.map(|head| Snapshot { head, log }))
    }

    /// The error of a state key of `session` that does not read.
    fn unreadable(&self, session: &SessionId, key: &str, e: serde_json::Error) -> RestateError {
        RestateError::Answer {
            url: format!("the state of {}/{session}", self.object),
            message: format!("`{key}` is not part of a session: {e}"),
        }
    }

    /// The partition key of `session`'s state, read with no value (`None`:
    /// the session has no head; `Some(None)`: the server gave no partition
    /// key, and the reads that follow do without).
    async fn partition_key(
        &self,
        session: &SessionId,
    ) -> Result<Option<Option<u64>>, RestateError> {
        let rows = self
            .admin
            .query(&format!(
                "SELECT partition_key FROM state \
                 WHERE service_name = {} AND service_key = {} AND key = '{HEAD}'",
                literal(&self.object),
                literal(session.as_str())
            ))
            .await?;
        Ok(rows.first().map(|row| row["partition_key"].as_u64()))
    }

    /// The head of `session`, read alone: its partition key, then its
    /// `head` key only.
    async fn head(&self, session: &SessionId) -> Result<Option<StoredRun>, StoreError> {
        let Some(partition) = self.partition_key(session).await.map_err(backend)? else {
            return Ok(None);
        };
        let read = self
            .heads_of(&[(session.clone(), partition)])
            .await
            .map_err(backend)?;
        self.head_of(session, read.into_iter().next().and_then(|(_, text)| text))
    }

    /// The texts of the heads of `sessions` (with their partition keys),
    /// in one query that reads the `head` key of each and nothing else:
    /// each session with its head's text, `None` when it has none.
    async fn heads_of(
        &self,
        sessions: &[(SessionId, Option<u64>)],
    ) -> Result<Vec<(SessionId, Option<String>)>, RestateError> {
        let keys: Vec<Option<u64>> = sessions.iter().map(|(_, key)| *key).collect();
        let ids: Vec<String> = sessions
            .iter()
            .map(|(id, _)| literal(id.as_str()))
            .collect();
        let rows = self
            .admin
            .query(&format!(
                "SELECT service_key, value_utf8 FROM state \
                 WHERE {}service_name = {} AND key = '{HEAD}' AND service_key IN ({})",
                partitions(&keys),
                literal(&self.object),
                ids.join(", ")
            ))
            .await?;
        let mut texts: HashMap<&str, String> = HashMap::new();
        for row in &rows {
            if let (Some(id), Some(text)) =
                (row["service_key"].as_str(), row["value_utf8"].as_str())
            {
                texts.insert(id, text.to_owned());
            }
        }
        Ok(sessions
            .iter()
            .map(|(id, _)| (id.clone(), texts.remove(id.as_str())))
            .collect())
    }

    /// The head `text` of `session` read, if it has one. One that is no
    /// session's head is a [`StoreError::Load`] naming the session and the
    /// record, as every store reports a damaged record: the listings show
    /// the other sessions beside it.
    fn head_of(
        &self,
        session: &SessionId,
        text: Option<String>,
    ) -> Result<Option<StoredRun>, StoreError> {
        text.map(|text| {
            serde_json::from_str::<StoredRun>(&text).map_err(|e| {
                StoreError::Load(StoreLoad::new(
                    session.clone(),
                    HEAD,
                    format!(
                        "the state of {}/{session} holds a `{HEAD}` that is not a session's: {e}",
                        self.object
                    ),
                ))
            })
        })
        .transpose()
    }

    /// The head of `session` ([`SessionStore::load`]): read with the heads
    /// of the sessions listed after it when the latest listing holds it
    /// (see [above](Self#what-a-read-costs)), else alone.
    async fn load_head(&self, session: &SessionId) -> Result<Option<StoredRun>, StoreError> {
        self.check().await.map_err(backend)?;
        let (held, batch) = {
            let mut heads = self
                .heads
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match heads.take(session) {
                Some(text) => (Some(text), Vec::new()),
                None => (None, heads.batch(session)),
            }
        };
        if let Some(text) = held {
            return self.head_of(session, text);
        }
        if batch.is_empty() {
            return self.head(session).await;
        }
        let asked = Instant::now();
        let read = match self.heads_of(&batch).await {
            Ok(read) => read,
            // Heads too large to read together: this one alone.
            Err(RestateError::TooLarge { .. }) => return self.head(session).await,
            Err(e) => return Err(backend(e)),
        };
        let mut own = None;
        let mut heads = self
            .heads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (id, text) in read {
            if id == *session {
                own = text;
            } else {
                heads.read.insert(id, (asked, text));
            }
        }
        drop(heads);
        self.head_of(session, own)
    }
}

/// The condition on the partition keys `keys` that lets the server read
/// their partitions' rows alone, followed by ` AND `.
fn partitions(keys: &[Option<u64>]) -> String {
    let keys: Option<Vec<String>> = keys.iter().map(|k| k.map(|k| k.to_string())).collect();
    match keys {
        Some(keys) if !keys.is_empty() => format!("partition_key IN ({}) AND ", keys.join(", ")),
        _ => String::new(),
    }
}

#[async_trait]
impl SessionStore for RestateSessionReader {
    async fn load(&self, session: &SessionId) -> Result<Option<StoredRun>, StoreError> {
        self.load_head(session).await
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
        self.check().await.map_err(backend)?;
        let rows = self
            .admin
            .query(&format!(
                "SELECT service_key, partition_key FROM state \
                 WHERE service_name = {} AND key = '{HEAD}' ORDER BY service_key",
                literal(&self.object)
            ))
            .await
            .map_err(backend)?;
        let listed: Vec<(SessionId, Option<u64>)> = rows
            .iter()
            .filter_map(|r| {
                let id = r["service_key"].as_str()?;
                Some((SessionId::from(id), r["partition_key"].as_u64()))
            })
            .collect();
        let ids: Vec<SessionId> = listed.iter().map(|(id, _)| id.clone()).collect();
        let at = ids
            .iter()
            .enumerate()
            .map(|(i, id)| (id.clone(), i))
            .collect();
        let mut heads = self
            .heads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        heads.listed = listed;
        heads.at = at;
        drop(heads);
        Ok(ids)
    }

    async fn flush(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{BY_REFERENCE_BYTES, Kept, account, by_reference, hashes, restore};
    use harness::session::{Checkpoint, CheckpointKind};
    use serde_json::{Value, json};
    use std::collections::{BTreeMap, HashMap};

    fn cp(seq: u64, kind: CheckpointKind) -> Checkpoint {
        Checkpoint {
            seq,
            index: seq,
            step: "s".into(),
            time: 1,
            kind,
        }
    }

    #[test]
    fn large_fields_go_by_reference_and_come_back_whole() {
        let big = "x".repeat(BY_REFERENCE_BYTES);
        let other = json!({"list": vec![7; BY_REFERENCE_BYTES / 2]});
        for kind in [
            CheckpointKind::Snapshot(json!({"note": big, "small": 1, "other": other})),
            CheckpointKind::Update(json!({"note": big, "small": "y"})),
        ] {
            let whole = cp(3, kind);
            let (kept, moved) = by_reference(whole.clone());
            // Only the large fields moved; in their place a null.
            assert!(!kept.refs.is_empty());
            assert_eq!(kept.refs.len(), moved.len());
            let text = serde_json::to_string(&kept).unwrap();
            assert!(text.len() < 1024, "{} bytes kept", text.len());
            // The same value has the same hash wherever it is.
            assert_eq!(
                kept.refs["note"],
                by_reference(whole.clone()).0.refs["note"]
            );
            // As stored and read back, then made whole.
            let read: Kept = serde_json::from_str(&text).unwrap();
            let values: HashMap<String, Value> = moved.into_iter().collect();
            assert_eq!(restore(read.clone(), &values).unwrap(), whole);
            // A value missing: its hash is named.
            let missing = restore(read, &HashMap::new()).unwrap_err();
            assert_eq!(missing.len(), 64);
        }
        // Small fields, non-objects and other kinds stay as they are.
        for kind in [
            CheckpointKind::Update(json!({"note": "short"})),
            CheckpointKind::Snapshot(Value::String("x".repeat(BY_REFERENCE_BYTES))),
            CheckpointKind::Update(json!([1, 2])),
        ] {
            let whole = cp(1, kind);
            let (kept, moved) = by_reference(whole.clone());
            assert!(moved.is_empty() && kept.refs.is_empty());
            assert_eq!(kept.cp, whole);
        }
    }

    #[test]
    fn a_checkpoint_stored_before_values_went_by_reference_reads_as_it_was() {
        let old = cp(2, CheckpointKind::Update(json!({"note": "n"})));
        let text = serde_json::to_string(&vec![old.clone()]).unwrap();
        let read: Vec<Kept> = serde_json::from_str(&text).unwrap();
        assert!(read[0].refs.is_empty());
        assert_eq!(restore(read[0].clone(), &HashMap::new()).unwrap(), old);
    }

    #[test]
    fn values_are_written_when_first_held_and_cleared_when_last_let_go() {
        let kept = |seq, refs: &[(&str, &str)]| Kept {
            cp: cp(seq, CheckpointKind::Update(json!({}))),
            refs: refs
                .iter()
                .map(|(f, h)| (f.to_string(), h.to_string()))
                .collect(),
        };
        let mut counts = BTreeMap::new();
        let first = [
            kept(1, &[("a", "h1")]),
            kept(2, &[("a", "h1"), ("b", "h2")]),
        ];
        let (new, gone) = account(&mut counts, &first, []);
        assert_eq!((new, gone), (vec!["h1".into(), "h2".into()], vec![]));
        assert_eq!(counts, BTreeMap::from([("h1".into(), 2), ("h2".into(), 1)]));
        assert_eq!(hashes(&first), ["h1", "h2"]);
        // A later run holds h1 again and h3; checkpoint 2 is removed.
        let later = [kept(3, &[("a", "h1"), ("c", "h3")])];
        let (new, gone) = account(&mut counts, &later, [&first[1]]);
        assert_eq!(
            (new, gone),
            (vec!["h3".to_string()], vec!["h2".to_string()])
        );
        assert_eq!(counts, BTreeMap::from([("h1".into(), 2), ("h3".into(), 1)]));
    }
}
