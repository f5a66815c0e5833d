//! What the API answers: sessions, a session's detail, its timeline and its
//! state at a checkpoint, read from the store (and merged through the
//! agent's reducers when the studio has them).

use crate::diff::{Change, diff};
use crate::error::ApiError;
use crate::graph::{self, Graph};
use crate::source::Source;
use harness::SessionId;
use harness::session::{Checkpoint, CheckpointKind, SessionPhase, SessionStore, StoredRun};
use harness::step::{Interrupt, StepJournal};
use serde::Serialize;
use serde_json::Value;

/// The four phases the page filters on.
pub(crate) const PHASES: [&str; 4] = ["running", "waiting", "done", "failed"];

/// A session in the list.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct Summary {
    pub(crate) id: SessionId,
    pub(crate) agent: String,
    /// `running`, `waiting` (for a human), `done` or `failed`.
    pub(crate) phase: &'static str,
    /// The final signal when done, the error when failed.
    pub(crate) detail: Option<String>,
    pub(crate) steps: u64,
    pub(crate) next_step: Option<String>,
    /// Whether a run holds the session now (a running session without one
    /// waits for a worker, or its process died).
    pub(crate) lease_live: bool,
    pub(crate) created_at: u64,
    pub(crate) updated_at: u64,
    /// Changes with every commit.
    pub(crate) version: u64,
}

impl Summary {
    pub(crate) fn of(head: &StoredRun, now: u64) -> Self {
        let (phase, detail) = match &head.phase {
            SessionPhase::Running => ("running", None),
            SessionPhase::Interrupted { .. } => ("waiting", None),
            SessionPhase::Completed { signal } => ("done", Some(signal.to_string())),
            SessionPhase::Failed { error } => ("failed", Some(error.clone())),
        };
        Summary {
            id: head.session_id.clone(),
            agent: head.agent_id.clone(),
            phase,
            detail,
            steps: head.steps,
            next_step: head.next_step.clone(),
            lease_live: head.lease.as_ref().is_some_and(|l| l.is_live(now)),
            created_at: head.created_at,
            updated_at: head.updated_at,
            version: head.version,
        }
    }

    /// Whether `q` (lower case) is in its id, agent, phase, next step or
    /// detail.
    pub(crate) fn matches(&self, q: &str) -> bool {
        [
            Some(self.id.as_str()),
            Some(self.agent.as_str()),
            Some(self.phase),
            self.next_step.as_deref(),
            self.detail.as_deref(),
        ]
        .into_iter()
        .flatten()
        .any(|s| s.to_lowercase().contains(q))
    }
}

/// Every session's head, newest first; sessions listed then gone are left
/// out.
pub(crate) async fn heads(store: &dyn SessionStore) -> Result<Vec<StoredRun>, ApiError> {
    let store_err = |source| ApiError::Store {
        session: "(listing)".into(),
        source,
    };
    let mut heads = Vec::new();
    for id in store.sessions().await.map_err(store_err)? {
        if let Some(head) = store.load(&id).await.map_err(|source| ApiError::Store {
            session: id.to_string(),
            source,
        })? {
            heads.push(head);
        }
    }
    heads.sort_by(|a, b| {
        b.updated_at
            .cmp(&a.updated_at)
            .then(a.session_id.cmp(&b.session_id))
    });
    Ok(heads)
}

/// A session's head.
pub(crate) async fn head(store: &dyn SessionStore, id: &SessionId) -> Result<StoredRun, ApiError> {
    store
        .load(id)
        .await
        .map_err(|source| ApiError::Store {
            session: id.to_string(),
            source,
        })?
        .ok_or_else(|| ApiError::NoSession(id.clone()))
}

/// The session's log as the head knows it: from its first record to the
/// head's last (records a later commit appended are left out).
pub(crate) async fn log(
    store: &dyn SessionStore,
    head: &StoredRun,
) -> Result<Vec<Checkpoint>, ApiError> {
    let mut log = store
        .checkpoints(&head.session_id, 0)
        .await
        .map_err(|source| ApiError::Store {
            session: head.session_id.to_string(),
            source,
        })?;
    log.retain(|cp| cp.seq <= head.last_seq);
    Ok(log)
}

/// A session in full, for its page.
#[derive(Debug, Serialize)]
pub(crate) struct Detail {
    pub(crate) summary: Summary,
    /// What it waits on, when waiting.
    pub(crate) interrupt: Option<Interrupt>,
    /// The expected answer, when the application declared it.
    pub(crate) answer_shape: Option<Value>,
    /// The current step's journal: interrupt answers and `cx.once`
    /// results, as recorded.
    pub(crate) journal: StepJournal,
    /// Whether this studio can answer and fork it.
    pub(crate) writable: bool,
    /// The loop: declared, or observed in this session's checkpoints.
    pub(crate) graph: Graph,
    /// The steps this session's checkpoints show, in order.
    pub(crate) visited: Vec<String>,
    /// The step running or waiting now, if any.
    pub(crate) current: Option<String>,
    /// The JSON schema of an update of the state (for forking), when known.
    pub(crate) update_schema: Option<Value>,
}

pub(crate) fn detail(
    source: &dyn Source,
    head: &StoredRun,
    log: &[Checkpoint],
    answer_shape: Option<Value>,
) -> Detail {
    let summary = Summary::of(head, source.store().now());
    let interrupt = match &head.phase {
        SessionPhase::Interrupted { interrupt } => Some(interrupt.clone()),
        _ => None,
    };
    let current = match head.phase {
        SessionPhase::Running | SessionPhase::Interrupted { .. } => head.next_step.clone(),
        _ => None,
    };
    Detail {
        writable: source.agent_id() == Some(head.agent_id.as_str()),
        graph: match source.graph() {
            Some(g) => g.clone(),
            None => graph::observed(head, log),
        },
        visited: log
            .iter()
            .filter(|cp| matches!(cp.kind, CheckpointKind::Update(_)))
            .map(|cp| cp.step.clone())
            .collect(),
        current,
        update_schema: source.schemas().map(|(_, update)| update),
        summary,
        interrupt,
        answer_shape,
        journal: head.journal.clone(),
    }
}

/// One checkpoint on the timeline.
#[derive(Debug, Serialize)]
pub(crate) struct Entry {
    pub(crate) seq: u64,
    pub(crate) index: u64,
    pub(crate) step: String,
    pub(crate) time: u64,
    /// `snapshot` or `update`.
    pub(crate) kind: &'static str,
    /// The record as stored.
    pub(crate) value: Value,
    /// What it changed in the merged state; `None` without the state type.
    pub(crate) changes: Option<Vec<Change>>,
}

/// The timeline: every record of the log, with what it changed when the
/// state can be merged.
#[derive(Debug, Serialize)]
pub(crate) struct Timeline {
    /// Whether `changes` are diffs of the merged state (true), or absent
    /// because merging needs the agent's reducers (false).
    pub(crate) merged: bool,
    pub(crate) entries: Vec<Entry>,
}

pub(crate) fn timeline(
    source: &dyn Source,
    head: &StoredRun,
    log: Vec<Checkpoint>,
) -> Result<Timeline, ApiError> {
    let states = source.merge(&head.session_id, &log).transpose()?;
    let mut entries = Vec::with_capacity(log.len());
    for (i, cp) in log.into_iter().enumerate() {
        let changes = states.as_ref().map(|s| match i {
            0 => Vec::new(),
            _ => diff(&s[i - 1], &s[i]),
        });
        let (kind, value) = record_value(cp.kind);
        entries.push(Entry {
            seq: cp.seq,
            index: cp.index,
            step: cp.step,
            time: cp.time,
            kind,
            value,
            changes,
        });
    }
    Ok(Timeline {
        merged: states.is_some(),
        entries,
    })
}

/// A record as shown under an unmerged state.
#[derive(Debug, Serialize)]
pub(crate) struct Record {
    pub(crate) seq: u64,
    pub(crate) index: u64,
    pub(crate) step: String,
    pub(crate) value: Value,
}

/// The state after a checkpoint.
#[derive(Debug, Serialize)]
pub(crate) struct StateAt {
    pub(crate) seq: u64,
    pub(crate) index: u64,
    pub(crate) step: String,
    /// Whether `state` is merged through the reducers. When not, the state
    /// is the latest snapshot at or before the checkpoint plus the updates
    /// after it, as stored.
    pub(crate) merged: bool,
    pub(crate) state: Option<Value>,
    pub(crate) snapshot: Option<Record>,
    pub(crate) updates: Vec<Record>,
}

pub(crate) fn state_at(
    source: &dyn Source,
    head: &StoredRun,
    log: Vec<Checkpoint>,
    seq: Option<u64>,
) -> Result<StateAt, ApiError> {
    let seq = seq.unwrap_or(head.last_seq);
    let Some(at) = log.iter().position(|cp| cp.seq == seq) else {
        return Err(ApiError::NoCheckpoint {
            session: head.session_id.clone(),
            seq,
            last: head.last_seq,
        });
    };
    let (index, step) = (log[at].index, log[at].step.clone());
    if let Some(states) = source.merge(&head.session_id, &log) {
        let mut states = states?;
        return Ok(StateAt {
            seq,
            index,
            step,
            merged: true,
            state: Some(states.swap_remove(at)),
            snapshot: None,
            updates: Vec::new(),
        });
    }
    let record = |cp: &Checkpoint| {
        let value = record_value(cp.kind.clone()).1;
        Record {
            seq: cp.seq,
            index: cp.index,
            step: cp.step.clone(),
            value,
        }
    };
    let base = log[..=at]
        .iter()
        .rposition(|cp| matches!(cp.kind, CheckpointKind::Snapshot(_)));
    Ok(StateAt {
        seq,
        index,
        step,
        merged: false,
        state: None,
        snapshot: base.map(|b| record(&log[b])),
        updates: log[base.map_or(0, |b| b + 1)..=at]
            .iter()
            .map(record)
            .collect(),
    })
}

/// What a record is called in the timeline, and the value it shows: a
/// state, an update (a branch's or a sub-agent's too), or the branches of a
/// fork or a join.
fn record_value(kind: CheckpointKind) -> (&'static str, Value) {
    match kind {
        CheckpointKind::Snapshot(v) => ("snapshot", v),
        CheckpointKind::Update(v) => ("update", v),
        CheckpointKind::Branch(b) => (
            "branch",
            serde_json::json!({ "path": b.path, "update": b.update, "failed": b.failed }),
        ),
        CheckpointKind::Fork(f) => (
            "fork",
            serde_json::json!({ "path": f.path, "join": f.join, "branches": f.branches.iter().map(|b| &b.path).collect::<Vec<_>>() }),
        ),
        CheckpointKind::Join(j) => (
            "join",
            serde_json::json!({ "path": j.path, "branches": j.branches }),
        ),
        CheckpointKind::Child(c) => (
            "sub-agent",
            serde_json::json!({ "path": c.path, "record": record_value(*c.record).1 }),
        ),
    }
}
