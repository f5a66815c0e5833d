//! What the API answers: sessions, a session's detail, its timeline and its
//! state at a checkpoint, read from the store (and merged through the
//! agent's reducers when the studio has them).

use crate::diff::{Bound, Change, Cut, bounded};
use crate::error::ApiError;
use crate::graph::{self, Graph};
use crate::redact;
use crate::source::Source;
use harness::session::{
    Checkpoint, CheckpointKind, SessionPhase, SessionStore, Span, StoreError, StoreLoad, StoredRun,
    read_log,
};
use harness::step::{Interrupt, StepJournal};
use harness::{SessionId, TaskPath};
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
    /// detail, lower-cased, as the studio sends them: with the process's
    /// secrets replaced ([`crate::redact`]), so that a search cannot tell
    /// a secret's characters one by one. The page checks a session the
    /// event stream sends against its search the same way.
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
        .any(|s| harness::secrets::redact(s).to_lowercase().contains(q))
    }
}

/// A session in the list whose head does not read (a damaged record,
/// [`StoreError::Load`]): its id and why, so that one damaged session
/// hides no other. Sent as `{"id", "unreadable": true, "record",
/// "error"}`, in the list beside the sessions.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct Unreadable {
    pub(crate) id: SessionId,
    /// Always true: what tells it from a [`Summary`].
    pub(crate) unreadable: bool,
    /// The record that does not read (`head`).
    pub(crate) record: String,
    /// The store's message, naming the session and the record, with the
    /// process's secrets replaced ([`crate::redact`]).
    pub(crate) error: String,
}

impl Unreadable {
    pub(crate) fn of(id: &SessionId, load: &StoreLoad) -> Self {
        Unreadable {
            id: id.clone(),
            unreadable: true,
            record: redact::text(&load.record),
            error: redact::text(&load.to_string()),
        }
    }
}

/// An entry of the list: a session, or one whose head does not read.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub(crate) enum Listed {
    Session(Summary),
    Unreadable(Unreadable),
}

impl Listed {
    pub(crate) fn id(&self) -> &SessionId {
        match self {
            Listed::Session(s) => &s.id,
            Listed::Unreadable(u) => &u.id,
        }
    }

    /// The session's version; `None` when its head does not read.
    pub(crate) fn version(&self) -> Option<u64> {
        match self {
            Listed::Session(s) => Some(s.version),
            Listed::Unreadable(_) => None,
        }
    }
}

/// The session `id` as the list shows it: its summary, [`Unreadable`] when
/// its head does not read, `None` when the store holds no such session.
/// Any other failure of the store (it cannot be reached) is an error.
pub(crate) async fn listed(
    store: &dyn SessionStore,
    id: &SessionId,
    now: u64,
) -> Result<Option<Listed>, ApiError> {
    match store.load(id).await {
        Ok(head) => Ok(head.map(|h| Listed::Session(Summary::of(&h, now)))),
        Err(StoreError::Load(load)) => Ok(Some(Listed::Unreadable(Unreadable::of(id, &load)))),
        Err(source) => Err(ApiError::Store {
            session: id.to_string(),
            source,
        }),
    }
}

/// Sessions the list sends per page unless asked otherwise, and at most.
pub(crate) const SESSIONS_PAGE: (usize, usize) = (100, 1000);

/// The most heads one page of the list loads. A filter (or hidden agents)
/// that few sessions match gives a short page, with a cursor to go on
/// from, rather than a scan of the whole store in one request.
pub(crate) const SCAN_HEADS: usize = 1000;

/// A page of the session list.
#[derive(Debug)]
pub(crate) struct SessionPage {
    /// The sessions kept, newest first.
    pub(crate) sessions: Vec<Summary>,
    /// The sessions looked at whose head does not read, by id: kept
    /// whatever the filter (whether they pass it cannot be told), and
    /// counted in the page's `limit`.
    pub(crate) unreadable: Vec<Unreadable>,
    /// The last session looked at, to ask for the page after it; `None`
    /// when the page reached the end of the store.
    pub(crate) next: Option<SessionId>,
}

impl SessionPage {
    /// The page as the list sends it: the sessions, newest first, then
    /// those whose head does not read.
    pub(crate) fn entries(self) -> Vec<Listed> {
        let sessions = self.sessions.into_iter().map(Listed::Session);
        sessions
            .chain(self.unreadable.into_iter().map(Listed::Unreadable))
            .collect()
    }
}

/// A store's failure to list its sessions (or a page, or its feed of
/// created sessions).
pub(crate) fn listing_error(source: StoreError) -> ApiError {
    ApiError::Store {
        session: "(listing)".into(),
        source,
    }
}

/// Every session id of the store, sorted: what the event stream compares
/// look after look to find the sessions that appeared, on a store that
/// keeps no feed of created sessions. This costs the store's number of
/// sessions in ids, and no head.
pub(crate) async fn listing(store: &dyn SessionStore) -> Result<Vec<SessionId>, ApiError> {
    let mut ids = store.sessions().await.map_err(listing_error)?;
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}

/// The page of the store's sessions after `after` (in the store's order,
/// [`SessionStore::sessions_page`]; `after` need not exist any more): the
/// heads of the ids that follow it, loaded one by one, until `limit` pass
/// `keep` or [`SCAN_HEADS`] were loaded. The ids are read a page at a
/// time: first as many as the page still needs, then twice as many at
/// each round a filter left it short (so a filter that keeps few costs a
/// few reads, not one per session), each with one more id to know whether
/// the store holds more. Sessions listed then gone are left out. A head
/// that does not read ([`StoreError::Load`]: a damaged record) is no
/// failure of the page: it is listed as [`Unreadable`], whatever `keep`
/// (which cannot judge it), counts among the `limit`, and the page goes
/// on after it; any other failure of the store fails the page.
pub(crate) async fn page(
    store: &dyn SessionStore,
    after: Option<&SessionId>,
    limit: usize,
    keep: impl Fn(&Summary) -> bool,
) -> Result<SessionPage, ApiError> {
    let now = store.now();
    let mut sessions = Vec::new();
    let mut unreadable = Vec::new();
    let mut cursor = after.cloned();
    let mut scanned = 0;
    let mut ask = 0;
    loop {
        let kept =
            |sessions: &[Summary], unreadable: &[Unreadable]| sessions.len() + unreadable.len();
        ask = (limit - kept(&sessions, &unreadable))
            .max(ask * 2)
            .min(SCAN_HEADS - scanned);
        let ids = store
            .sessions_page("", cursor.as_ref(), ask + 1)
            .await
            .map_err(listing_error)?;
        let mut looked = 0;
        for id in ids.iter().take(ask) {
            if kept(&sessions, &unreadable) == limit {
                break;
            }
            looked += 1;
            cursor = Some(id.clone());
            match listed(store, id, now).await? {
                Some(Listed::Session(summary)) if keep(&summary) => sessions.push(summary),
                Some(Listed::Unreadable(u)) => unreadable.push(u),
                Some(Listed::Session(_)) | None => {}
            }
        }
        scanned += looked;
        let next = if looked == ids.len() {
            // The end of the store.
            None
        } else if kept(&sessions, &unreadable) == limit || scanned == SCAN_HEADS {
            cursor
        } else {
            continue;
        };
        sessions.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then(a.id.cmp(&b.id)));
        unreadable.sort_by(|a, b| a.id.cmp(&b.id));
        return Ok(SessionPage {
            sessions,
            unreadable,
            next,
        });
    }
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
/// head's last (records a later commit appended are left out), checked as
/// the core checks it before a run or `harness sessions history` reads it
/// ([`read_log`]). A log that does not add up (a record missing, one
/// repeated or out of order, a log that ends before the head's last
/// checkpoint) is the store's [`StoreError::Load`] naming the break: the
/// session is damaged, and nothing of it is shown as if whole.
pub(crate) async fn log(
    store: &dyn SessionStore,
    head: &StoredRun,
) -> Result<Vec<Checkpoint>, ApiError> {
    read_log(store, head, Span::Whole)
        .await
        .map_err(|source| ApiError::Store {
            session: head.session_id.to_string(),
            source,
        })
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
    /// The nodes of the steps this session's checkpoints show (in every
    /// branch and sub-agent), in order.
    pub(crate) visited: Vec<String>,
    /// The edges this session's checkpoints show taken, as `[from, to]`.
    pub(crate) taken: Vec<[String; 2]>,
    /// The loop's step running or waiting now, if any.
    pub(crate) current: Option<String>,
    /// Every step running or waiting now: the loop's, each branch's, each
    /// sub-agent's, with its task's path and its node.
    pub(crate) positions: Vec<graph::Position>,
    /// The node of the step the interrupt asks from, when waiting.
    pub(crate) interrupt_node: Option<String>,
    /// The JSON schema of an update of the state (for forking), when known.
    pub(crate) update_schema: Option<Value>,
    /// When this studio's last answer to the interrupt waited on was
    /// refused by the run: `{"interrupt", "reason"}` (kept in the studio's
    /// memory, not in the store).
    pub(crate) refused: Option<Value>,
}

/// The graph to draw for a session: the declared one, or the one its log
/// shows.
pub(crate) fn graph_of(source: &dyn Source, head: &StoredRun, log: &[Checkpoint]) -> Graph {
    match source.graph() {
        Some(g) => g.clone(),
        None => graph::observed(head, log),
    }
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
    let graph = graph_of(source, head, log);
    // What the records show, drawn on the graph.
    let seen = graph::observed(head, log);
    let mut visited: Vec<String> = Vec::new();
    for cp in log {
        if let Some((path, true)) = task_of(&cp.kind)
            && let Some(node) = graph.node_for(&path, &cp.step)
            && !visited.contains(&node)
        {
            visited.push(node);
        }
    }
    let taken = seen
        .edges
        .iter()
        .map(|e| [e.from.clone(), e.to.clone()])
        .collect();
    let positions = graph::positions(head, log, &graph);
    Detail {
        writable: source.agent_id() == Some(head.agent_id.as_str()),
        interrupt_node: interrupt
            .as_ref()
            .and_then(|i| graph.node_for(&i.path, &i.step)),
        graph,
        visited,
        taken,
        current,
        positions,
        update_schema: source.schemas().map(|(_, update)| update),
        summary,
        interrupt,
        answer_shape,
        journal: head.journal.clone(),
        refused: None,
    }
}

/// The task a record belongs to (the run's loop, a branch, a sub-agent's
/// loop or one of its branches), and whether it is a step's.
pub(crate) fn task_of(kind: &CheckpointKind) -> Option<(TaskPath, bool)> {
    Some(match kind {
        CheckpointKind::Snapshot(_) => (TaskPath::root(), false),
        CheckpointKind::Update(_) => (TaskPath::root(), true),
        CheckpointKind::Fork(f) => (f.path.clone(), false),
        CheckpointKind::Branch(b) => (b.path.clone(), true),
        CheckpointKind::Join(j) => (j.path.clone(), false),
        CheckpointKind::Child(c) => match &*c.record {
            CheckpointKind::Update(_) => (c.path.clone(), true),
            CheckpointKind::Snapshot(_) => (c.path.clone(), false),
            CheckpointKind::Child(_) => return None,
            inner => {
                let (path, step) = task_of(inner)?;
                // Paths inside a sub-agent are full; its own loop's is its.
                (if path.is_root() { c.path.clone() } else { path }, step)
            }
        },
    })
}

/// What one timeline entry may carry: each value (the record as stored, a
/// change's before and after, a branch's input) at most this many bytes of
/// compact JSON, and at most this many changes.
pub(crate) const ENTRY_BOUND: Bound = Bound {
    value_bytes: 2048,
    changes: 20,
};

/// The branches a fork's or a join's entry lists at most.
pub(crate) const ENTRY_BRANCHES: usize = 100;

/// Timeline entries sent per page unless asked otherwise, and at most.
pub(crate) const TIMELINE_PAGE: (usize, usize) = (100, 500);

/// A branch a fork started, as the timeline lists it.
#[derive(Debug, Serialize)]
pub(crate) struct BranchInfo {
    pub(crate) path: TaskPath,
    /// The step it starts at.
    pub(crate) step: String,
    /// A fan-out branch's input.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) input: Option<Value>,
    /// The input, when too large to send whole.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) input_cut: Option<Cut>,
}

/// One checkpoint on the timeline.
#[derive(Debug, Serialize)]
pub(crate) struct Entry {
    pub(crate) seq: u64,
    pub(crate) index: u64,
    pub(crate) step: String,
    pub(crate) time: u64,
    /// `snapshot`, `update` (a step of the loop or of a sub-agent),
    /// `branch` (a step of a branch), `fork` or `join`.
    pub(crate) kind: &'static str,
    /// The task it belongs to: `""` for the run's own loop, a branch
    /// (`square#1`), a sub-agent (`review`), a branch inside one.
    pub(crate) path: TaskPath,
    /// `root`, `branch` or `sub-agent`: what the task is.
    pub(crate) task: &'static str,
    /// The sub-agent whose record it is (the path of the step running
    /// it), if any.
    pub(crate) sub_agent: Option<TaskPath>,
    /// The step's node in the graph, when drawn.
    pub(crate) node: Option<String>,
    /// For a fork: the branches it started, in merge order; for a join:
    /// the branches it merged, in the order applied (at most
    /// [`ENTRY_BRANCHES`]).
    pub(crate) branches: Option<Vec<BranchInfo>>,
    /// Branches past those listed.
    #[serde(skip_serializing_if = "is_zero")]
    pub(crate) more_branches: usize,
    /// For a fork: the step its branches join at.
    pub(crate) join: Option<String>,
    /// For a sub-agent's update: its next step, or the signal it ended
    /// with.
    pub(crate) next: Option<String>,
    pub(crate) signal: Option<String>,
    /// The record as stored (a sub-agent's record: the record inside);
    /// null when too large to send whole.
    pub(crate) value: Value,
    /// The record, when too large to send whole.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) value_cut: Option<Cut>,
    /// What it changed, merged through the reducers: in the run's state,
    /// or for a branch's record in the branch's own state (`changes_of`).
    /// `None` without the state type, and for a sub-agent's records (in
    /// its own state type).
    pub(crate) changes: Option<Vec<Change>>,
    /// Changes past those listed.
    #[serde(skip_serializing_if = "is_zero")]
    pub(crate) more_changes: usize,
    /// Whose state `changes` is about: `run` or `branch`.
    pub(crate) changes_of: Option<&'static str>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The timeline: a page of the records of the log, with what each changed
/// when the state can be merged.
#[derive(Debug, Serialize)]
pub(crate) struct Timeline {
    /// Whether `changes` are diffs of the merged state (true), or absent
    /// because merging needs the agent's reducers (false).
    pub(crate) merged: bool,
    /// Every task the records show (`""` for the run's own loop), in the
    /// order they first appear: what `?path=` filters on.
    pub(crate) paths: Vec<TaskPath>,
    /// How many records the filter keeps.
    pub(crate) total: usize,
    /// The position of the first entry among them.
    pub(crate) offset: usize,
    /// The most entries a page holds.
    pub(crate) limit: usize,
    pub(crate) entries: Vec<Entry>,
}

/// Which page of the timeline: `limit` entries from `offset`, or the last
/// `limit` without one.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Page {
    pub(crate) offset: Option<usize>,
    pub(crate) limit: usize,
}

/// The timeline; with `only`, the records of that task and of the tasks
/// inside it (the run's loop alone for the root), a page of them. The
/// state is merged up to the page's last record, and only the page's
/// records say what they changed.
pub(crate) fn timeline(
    source: &dyn Source,
    head: &StoredRun,
    log: &[Checkpoint],
    only: Option<&TaskPath>,
    page: Page,
) -> Result<Timeline, ApiError> {
    let mut paths: Vec<TaskPath> = Vec::new();
    let mut kept = Vec::new();
    for (i, cp) in log.iter().enumerate() {
        let (path, _) = task_of(&cp.kind).unwrap_or((TaskPath::root(), false));
        let keep = match only {
            None => true,
            Some(p) if p.is_root() => path.is_root(),
            Some(p) => path.starts_with(p),
        };
        if !paths.contains(&path) {
            paths.push(path);
        }
        if keep {
            kept.push(i);
        }
    }
    let total = kept.len();
    let offset = page
        .offset
        .unwrap_or(total.saturating_sub(page.limit))
        .min(total);
    let shown = &kept[offset..total.min(offset.saturating_add(page.limit))];
    // A sub-agent's records change its own state, of another type.
    let asked: Vec<usize> = shown
        .iter()
        .copied()
        .filter(|&i| !matches!(log[i].kind, CheckpointKind::Child(_)))
        .collect();
    let changed = source
        .changes(&head.session_id, log, &asked, ENTRY_BOUND)
        .transpose()?;
    let merged = changed.is_some();
    let mut changed = changed.map(Vec::into_iter);
    let graph = graph_of(source, head, log);
    let max = ENTRY_BOUND.value_bytes;
    let mut entries = Vec::with_capacity(shown.len());
    for &i in shown {
        let cp = &log[i];
        let (path, is_step) = task_of(&cp.kind).unwrap_or((TaskPath::root(), false));
        let (sub_agent, next, signal, inner) = match &cp.kind {
            CheckpointKind::Child(c) => (
                Some(c.path.clone()),
                c.next.clone(),
                c.signal.as_ref().map(|s| s.to_string()),
                &*c.record,
            ),
            kind => (None, None, None, kind),
        };
        let (changes, more_changes, changes_of) = match (&mut changed, &sub_agent) {
            (Some(changed), None) => match changed.next() {
                Some(c) => (Some(c.changes.list), c.changes.more, Some(c.of)),
                None => (None, 0, None),
            },
            _ => (None, 0, None),
        };
        let (branches, more_branches, join) = match inner {
            CheckpointKind::Fork(f) => (
                Some(
                    f.branches
                        .iter()
                        .take(ENTRY_BRANCHES)
                        .map(|b| {
                            let (input, input_cut) = match b.input.as_ref().map(|v| bounded(v, max))
                            {
                                None => (None, None),
                                Some(Ok(v)) => (Some(v), None),
                                Some(Err(cut)) => (None, Some(cut)),
                            };
                            BranchInfo {
                                path: b.path.clone(),
                                step: b.step.clone(),
                                input,
                                input_cut,
                            }
                        })
                        .collect(),
                ),
                f.branches.len().saturating_sub(ENTRY_BRANCHES),
                Some(f.join.clone()),
            ),
            CheckpointKind::Join(j) => (
                Some(
                    j.branches
                        .iter()
                        .take(ENTRY_BRANCHES)
                        .map(|b| BranchInfo {
                            path: b.clone(),
                            step: b
                                .segments()
                                .last()
                                .map(graph::segment_step)
                                .unwrap_or_default()
                                .to_owned(),
                            input: None,
                            input_cut: None,
                        })
                        .collect(),
                ),
                j.branches.len().saturating_sub(ENTRY_BRANCHES),
                None,
            ),
            _ => (None, 0, None),
        };
        let task = if sub_agent.is_some() {
            "sub-agent"
        } else if path.is_root() {
            "root"
        } else {
            "branch"
        };
        let (kind, record) = record_of(inner);
        let (value, value_cut) = match bounded(&record, max) {
            Ok(v) => (v, None),
            Err(cut) => (Value::Null, Some(cut)),
        };
        entries.push(Entry {
            seq: cp.seq,
            index: cp.index,
            node: if is_step {
                graph.node_for(&path, &cp.step)
            } else {
                None
            },
            step: cp.step.clone(),
            time: cp.time,
            kind,
            path,
            task,
            sub_agent,
            branches,
            more_branches,
            join,
            next,
            signal,
            value,
            value_cut,
            changes,
            more_changes,
            changes_of,
        });
    }
    Ok(Timeline {
        merged,
        paths,
        total,
        offset,
        limit: page.limit,
        entries,
    })
}

/// A record as shown under an unmerged state.
#[derive(Debug, Serialize)]
pub(crate) struct Record {
    pub(crate) seq: u64,
    pub(crate) index: u64,
    pub(crate) step: String,
    /// The task it belongs to (`""`: the run's own loop).
    pub(crate) path: TaskPath,
    pub(crate) value: Value,
}

/// The state after a checkpoint.
#[derive(Debug, Serialize)]
pub(crate) struct StateAt {
    pub(crate) seq: u64,
    pub(crate) index: u64,
    pub(crate) step: String,
    /// The task the checkpoint belongs to (`""`: the run's own loop).
    pub(crate) path: TaskPath,
    /// The sub-agent whose record it is, if any.
    pub(crate) sub_agent: Option<TaskPath>,
    /// Whether `state` is merged through the reducers. When not, the state
    /// is the latest snapshot at or before the checkpoint plus the updates
    /// after it, as stored.
    pub(crate) merged: bool,
    pub(crate) state: Option<Value>,
    /// For a branch's checkpoint, merged: the branch's own state after it
    /// (the run's state gets the branch's updates at the join).
    pub(crate) task_state: Option<Value>,
    pub(crate) snapshot: Option<Record>,
    pub(crate) updates: Vec<Record>,
}

pub(crate) fn state_at(
    source: &dyn Source,
    head: &StoredRun,
    log: &[Checkpoint],
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
    let path = task_of(&log[at].kind).map_or_else(TaskPath::root, |(p, _)| p);
    let sub_agent = match &log[at].kind {
        CheckpointKind::Child(c) => Some(c.path.clone()),
        _ => None,
    };
    if let Some(states) = source.states_at(&head.session_id, log, at) {
        let states = states?;
        return Ok(StateAt {
            seq,
            index,
            step,
            path,
            sub_agent,
            merged: true,
            state: Some(states.run),
            task_state: states.task,
            snapshot: None,
            updates: Vec::new(),
        });
    }
    let record = |cp: &Checkpoint| {
        let value = serde_json::to_value(record_of(&cp.kind).1).unwrap_or_default();
        Record {
            seq: cp.seq,
            index: cp.index,
            step: cp.step.clone(),
            path: task_of(&cp.kind).map_or_else(TaskPath::root, |(p, _)| p),
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
        path,
        sub_agent,
        merged: false,
        state: None,
        task_state: None,
        snapshot: base.map(|b| record(&log[b])),
        updates: log[base.map_or(0, |b| b + 1)..=at]
            .iter()
            .map(record)
            .collect(),
    })
}

/// What a record is called in the timeline, and the value it shows: a
/// state, an update (a branch's, with its error if it failed, or a
/// sub-agent's), or the branches of a fork or a join.
fn record_of(kind: &CheckpointKind) -> (&'static str, Shown<'_>) {
    match kind {
        CheckpointKind::Snapshot(v) => ("snapshot", Shown::Value(v)),
        CheckpointKind::Update(v) => ("update", Shown::Value(v)),
        CheckpointKind::Branch(b) => match &b.failed {
            None => ("branch", Shown::Value(&b.update)),
            Some(error) => (
                "branch",
                Shown::Failed {
                    failed: error,
                    update: &b.update,
                },
            ),
        },
        CheckpointKind::Fork(f) => (
            "fork",
            Shown::Fork {
                path: &f.path,
                join: &f.join,
                branches: f.branches.iter().map(|b| &b.path).collect(),
            },
        ),
        CheckpointKind::Join(j) => (
            "join",
            Shown::Join {
                path: &j.path,
                branches: &j.branches,
            },
        ),
        CheckpointKind::Child(c) => record_of(&c.record),
    }
}

/// A record's value, borrowed from the log.
#[derive(Serialize)]
#[serde(untagged)]
enum Shown<'a> {
    Value(&'a Value),
    Failed {
        failed: &'a str,
        update: &'a Value,
    },
    Fork {
        path: &'a TaskPath,
        join: &'a str,
        branches: Vec<&'a TaskPath>,
    },
    Join {
        path: &'a TaskPath,
        branches: &'a [TaskPath],
    },
}
