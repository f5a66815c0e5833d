//! Threads: a thread is a session. Its record (metadata, and which session
//! holds its state now: a fork made by `update_state` moves it) is kept in
//! the session store, beside the sessions, as a saved value of the
//! `harness-server` owner.

use crate::app::{Body, Path, QueryPairs, Shared, check_id};
use crate::error::ApiError;
use crate::served::Served;
use crate::time::iso;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use harness::SessionId;
use harness::session::{SessionPhase, StoredRun, load_value, now_millis, save_value};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::sync::Arc;

/// The owner of the thread records in the session store.
pub(crate) const OWNER: &str = "harness-server";

/// The session id under which thread `id`'s record is kept.
fn record_key(id: &str) -> SessionId {
    SessionId::from(format!("{OWNER}/thread/{id}"))
}

/// The session under which the server marks session `session` as a fork
/// it made for one of its threads: such a session is never a thread of its
/// own (see [`find`]).
fn fork_key(session: &str) -> SessionId {
    SessionId::from(format!("{OWNER}/fork/{session}"))
}

/// A session the thread's state came from: `session` up to checkpoint
/// `index` (a fork at that checkpoint made the session after it, `fork`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Parent {
    pub(crate) session: String,
    pub(crate) index: u64,
    /// The session forked from it (absent in records written before it
    /// was kept: the next newer one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) fork: Option<String>,
}

/// A thread as the store keeps it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct ThreadRecord {
    pub(crate) thread_id: String,
    pub(crate) created_at: u64,
    pub(crate) updated_at: u64,
    pub(crate) metadata: Map<String, Value>,
    /// The session that holds the thread's state now.
    pub(crate) session: String,
    /// Earlier sessions, newest first.
    #[serde(default)]
    pub(crate) parents: Vec<Parent>,
    /// Sessions the thread left for a fork, with the checkpoints they had
    /// reached (`index`): they stay in the thread's history, as LangGraph
    /// keeps a thread's abandoned branches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) abandoned: Vec<Parent>,
    #[serde(default)]
    pub(crate) deleted: bool,
}

impl ThreadRecord {
    pub(crate) fn session_id(&self) -> SessionId {
        SessionId::from(self.session.clone())
    }

    /// Moves the thread to `fork`, made from `from` after `index` steps;
    /// the session it leaves, at `steps`, stays in its history. Saved by
    /// the caller ([`save`]), after [`mark_fork`].
    pub(crate) fn move_to(&mut self, from: &SessionId, index: u64, fork: &SessionId, steps: u64) {
        let left = Parent {
            session: self.session.clone(),
            index: steps,
            fork: None,
        };
        self.abandoned.retain(|p| p.session != left.session);
        self.abandoned.insert(0, left);
        self.parents.insert(
            0,
            Parent {
                session: from.to_string(),
                index,
                fork: Some(fork.to_string()),
            },
        );
        self.session = fork.to_string();
    }
}

/// Marks `fork` as a session the server made for thread `thread` (a fork):
/// it answers as no thread of its own.
pub(crate) async fn mark_fork(
    app: &Shared,
    thread: &str,
    fork: &SessionId,
) -> Result<(), ApiError> {
    save_value(
        &*app.store,
        OWNER,
        &fork_key(fork.as_str()),
        json!({ "thread_id": thread }),
    )
    .await?;
    Ok(())
}

/// The record of thread `id`, if it exists and is not deleted. A session of
/// a registered agent that has no record (made outside the server) is a
/// thread too.
pub(crate) async fn find(app: &Shared, id: &str) -> Result<Option<ThreadRecord>, ApiError> {
    let stored = load_value(&*app.store, OWNER, &record_key(id)).await?;
    if let Some(v) = stored {
        let record: ThreadRecord = serde_json::from_value(v).map_err(|e| {
            ApiError::Internal(format!("the record of thread {id} does not read: {e}"))
        })?;
        return Ok((!record.deleted).then_some(record));
    }
    let session = SessionId::from(id.to_string());
    let Some(head) = app.store.load(&session).await? else {
        return Ok(None);
    };
    if !app.agents.contains_key(&head.agent_id) {
        return Ok(None);
    }
    // A fork the server made for a thread is part of that thread.
    if load_value(&*app.store, OWNER, &fork_key(id))
        .await?
        .is_some()
    {
        return Ok(None);
    }
    Ok(Some(ThreadRecord {
        thread_id: id.to_string(),
        created_at: head.created_at,
        updated_at: head.updated_at,
        metadata: Map::new(),
        session: id.to_string(),
        parents: Vec::new(),
        abandoned: Vec::new(),
        deleted: false,
    }))
}

/// Thread `id`'s record, or a 404.
pub(crate) async fn get_record(app: &Shared, id: &str) -> Result<ThreadRecord, ApiError> {
    find(app, id)
        .await?
        .ok_or_else(|| ApiError::not_found("thread", id))
}

pub(crate) async fn save(app: &Shared, record: &ThreadRecord) -> Result<(), ApiError> {
    let value = serde_json::to_value(record).map_err(|e| ApiError::Internal(e.to_string()))?;
    save_value(&*app.store, OWNER, &record_key(&record.thread_id), value).await?;
    Ok(())
}

/// A new thread `id` (a random one when `None`). Its session is named by
/// its id, unless the id was a thread's before (deleted: the store keeps
/// the deleted thread's checkpoints) or names a session already: then a
/// fresh session of its own (a random id, marked as the thread's like a
/// fork), so that the new thread starts empty, none of the old thread's
/// state, history or runs showing.
pub(crate) async fn create_record(
    app: &Shared,
    id: Option<String>,
    metadata: Map<String, Value>,
) -> Result<ThreadRecord, ApiError> {
    // A fresh uuid names no thread nor session yet: only an id the client
    // chose may have been used (a thread deleted and made again).
    let (id, chosen) = match id {
        Some(id) => (id, true),
        None => (uuid::Uuid::new_v4().to_string(), false),
    };
    let used = chosen
        && (load_value(&*app.store, OWNER, &record_key(&id))
            .await?
            .is_some()
            || app
                .store
                .load(&SessionId::from(id.clone()))
                .await?
                .is_some());
    let session = if used {
        let fresh = SessionId::from(uuid::Uuid::new_v4().to_string());
        mark_fork(app, &id, &fresh).await?;
        fresh.to_string()
    } else {
        id.clone()
    };
    let now = now_millis();
    let record = ThreadRecord {
        thread_id: id,
        created_at: now,
        updated_at: now,
        metadata,
        session,
        parents: Vec::new(),
        abandoned: Vec::new(),
        deleted: false,
    };
    save(app, &record).await?;
    Ok(record)
}

/// Marks `record`, made for a request that then failed, deleted (what
/// `DELETE /threads/{id}` leaves): the failed request leaves no thread —
/// unless another request has started a run on it meanwhile. A failure to
/// write it is logged; the request's own error is the answer.
pub(crate) async fn discard(app: &Shared, mut record: ThreadRecord) {
    let busy = !app.runs().unsettled(&record.thread_id).is_empty();
    if busy || !matches!(app.store.load(&record.session_id()).await, Ok(None)) {
        return;
    }
    record.deleted = true;
    record.updated_at = now_millis();
    if let Err(e) = save(app, &record).await {
        tracing::warn!(thread = %record.thread_id, error = %e, "cannot discard the thread of a refused run");
    }
}

/// The session head of a thread and the agent that runs it, if it has one.
pub(crate) async fn head_of(
    app: &Shared,
    record: &ThreadRecord,
) -> Result<Option<(StoredRun, Arc<dyn Served>)>, ApiError> {
    let Some(head) = app.store.load(&record.session_id()).await? else {
        return Ok(None);
    };
    let Some(agent) = app.agents.get(&head.agent_id) else {
        return Err(ApiError::conflict(format!(
            "thread {} is a session of agent `{}`, which this server does not serve",
            record.thread_id, head.agent_id
        )));
    };
    Ok(Some((head, Arc::clone(agent))))
}

fn status(app: &Shared, record: &ThreadRecord, head: Option<&StoredRun>) -> &'static str {
    if app.runs().active(&record.thread_id).is_some() {
        return "busy";
    }
    match head.map(|h| &h.phase) {
        Some(SessionPhase::Interrupted { .. }) => "interrupted",
        Some(SessionPhase::Failed { .. }) => "error",
        Some(SessionPhase::Running) => match &head.and_then(|h| h.lease.as_ref()) {
            Some(lease) if lease.is_live(app.store.now()) => "busy",
            _ => "error",
        },
        _ => "idle",
    }
}

fn interrupts_of(head: &StoredRun) -> Vec<Value> {
    match &head.phase {
        // A breakpoint is no step's question (its step is in `next`).
        SessionPhase::Interrupted { interrupt } if interrupt.breakpoint.is_none() => {
            vec![json!({"value": interrupt.payload, "id": interrupt.id.as_str()})]
        }
        _ => Vec::new(),
    }
}

/// The thread as the API shows it.
pub(crate) async fn thread_json(app: &Shared, record: &ThreadRecord) -> Result<Value, ApiError> {
    let found = head_of(app, record).await?;
    let (values, interrupts, updated) = match &found {
        Some((head, agent)) => {
            let values = agent.state(&record.session_id(), None).await?;
            let mut by_task = Map::new();
            let list = interrupts_of(head);
            if !list.is_empty() {
                by_task.insert(head.run_id.to_string(), Value::Array(list));
            }
            (values, by_task, head.updated_at.max(record.updated_at))
        }
        None => (json!({}), Map::new(), record.updated_at),
    };
    Ok(json!({
        "thread_id": record.thread_id,
        "created_at": iso(record.created_at),
        "updated_at": iso(updated),
        "metadata": record.metadata,
        "status": status(app, record, found.as_ref().map(|(h, _)| h)),
        "values": values,
        "interrupts": interrupts,
        "config": {},
    }))
}

#[derive(Debug, Deserialize)]
pub(crate) struct CreateThread {
    thread_id: Option<String>,
    #[serde(default)]
    metadata: Option<Map<String, Value>>,
    if_exists: Option<String>,
    supersteps: Option<Value>,
    ttl: Option<Value>,
}

pub(crate) async fn create(
    State(app): State<Shared>,
    Body(body): Body<CreateThread>,
) -> Result<Json<Value>, ApiError> {
    if let Some(id) = &body.thread_id {
        check_id("thread_id", id)?;
    }
    let do_nothing = match body.if_exists.as_deref() {
        None | Some("raise") => false,
        Some("do_nothing") => true,
        Some(other) => {
            return Err(ApiError::bad(
                "if_exists",
                format!("`{other}` is neither `raise` nor `do_nothing`"),
            ));
        }
    };
    if body.supersteps.as_ref().is_some_and(|s| !s.is_null()) {
        return Err(ApiError::unprocessable(
            "supersteps",
            "creating a thread from supersteps is not supported by this server",
        ));
    }
    if body.ttl.as_ref().is_some_and(|s| !s.is_null()) {
        return Err(ApiError::unprocessable(
            "ttl",
            "thread time-to-live is not supported by this server",
        ));
    }
    if let Some(id) = &body.thread_id
        && let Some(existing) = find(&app, id).await?
    {
        if do_nothing {
            return Ok(Json(thread_json(&app, &existing).await?));
        }
        return Err(ApiError::conflict(format!("thread {id} already exists")));
    }
    let record = create_record(&app, body.thread_id, body.metadata.unwrap_or_default()).await?;
    Ok(Json(thread_json(&app, &record).await?))
}

pub(crate) async fn get(
    State(app): State<Shared>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let record = get_record(&app, &id).await?;
    Ok(Json(thread_json(&app, &record).await?))
}

pub(crate) async fn delete(
    State(app): State<Shared>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let mut record = get_record(&app, &id).await?;
    // Its crons go with it, first: none starts a run on it while it is
    // deleted, and a store failing meanwhile leaves the thread there for
    // the client's retry to delete what is left.
    crate::crons::delete_for_thread(&app, &id).await?;
    // As LangGraph deletes a thread's runs with it: those under way are
    // cancelled (at their next step boundary, on the thread's old session)
    // and every run of the thread is forgotten, so that a thread created
    // again under the id lists none and is not busy with them.
    let runs = app.runs().by_thread.remove(&id).unwrap_or_default();
    for run in runs {
        run.cancel();
    }
    record.deleted = true;
    record.updated_at = now_millis();
    save(&app, &record).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Debug, Deserialize)]
pub(crate) struct SearchThreads {
    metadata: Option<Map<String, Value>>,
    values: Option<Map<String, Value>>,
    ids: Option<Vec<String>>,
    status: Option<String>,
    limit: Option<usize>,
    offset: Option<usize>,
    sort_by: Option<String>,
    sort_order: Option<String>,
}

const STATUSES: &[&str] = &["idle", "busy", "interrupted", "error"];

pub(crate) async fn search(
    State(app): State<Shared>,
    Body(body): Body<SearchThreads>,
) -> Result<Json<Vec<Value>>, ApiError> {
    if let Some(s) = &body.status
        && !STATUSES.contains(&s.as_str())
    {
        return Err(ApiError::bad(
            "status",
            format!("`{s}` is none of {}", STATUSES.join(", ")),
        ));
    }
    let sort_by = body.sort_by.as_deref().unwrap_or("created_at");
    if !["created_at", "updated_at", "thread_id"].contains(&sort_by) {
        return Err(ApiError::bad(
            "sort_by",
            format!("`{sort_by}` is none of created_at, updated_at, thread_id"),
        ));
    }
    let descending = match body.sort_order.as_deref() {
        None | Some("desc") => true,
        Some("asc") => false,
        Some(other) => {
            return Err(ApiError::bad(
                "sort_order",
                format!("`{other}` is neither `asc` nor `desc`"),
            ));
        }
    };
    let limit = body.limit.unwrap_or(10).min(1000);
    let offset = body.offset.unwrap_or(0);
    let prefix = format!("{OWNER}/thread/");
    let mut records = Vec::new();
    for id in crate::app::ids_under(app.store.as_ref(), &prefix).await? {
        let id = id.as_str();
        if body
            .ids
            .as_ref()
            .is_some_and(|ids| !ids.iter().any(|i| i == id))
        {
            continue;
        }
        let Some(record) = find(&app, id).await? else {
            continue;
        };
        let wanted = body.metadata.iter().flatten();
        if wanted
            .into_iter()
            .any(|(k, v)| record.metadata.get(k) != Some(v))
        {
            continue;
        }
        records.push(record);
    }
    let mut out = Vec::new();
    for record in records {
        let json = thread_json(&app, &record).await?;
        if body.status.as_ref().is_some_and(|s| json["status"] != **s) {
            continue;
        }
        if let Some(values) = &body.values
            && values.iter().any(|(k, v)| json["values"].get(k) != Some(v))
        {
            continue;
        }
        out.push(json);
    }
    // Times are RFC 3339 in UTC with milliseconds: they sort as text. A
    // thread's `updated_at` is its session's (a run does not rewrite the
    // thread's record).
    let field = match sort_by {
        "updated_at" => "updated_at",
        "thread_id" => "thread_id",
        _ => "created_at",
    };
    out.sort_by(|a, b| {
        let order = a[field].as_str().cmp(&b[field].as_str());
        if descending { order.reverse() } else { order }
    });
    Ok(Json(out.into_iter().skip(offset).take(limit).collect()))
}

/// A checkpoint id: `{index}.{session}`.
pub(crate) fn checkpoint_id(session: &str, index: u64) -> String {
    format!("{index}.{session}")
}

/// The session and index a checkpoint id names, if it names one of the
/// thread's sessions; a 404 naming `field` otherwise.
pub(crate) fn read_checkpoint(
    record: &ThreadRecord,
    id: &str,
    field: &str,
) -> Result<(SessionId, u64), ApiError> {
    let parsed = id
        .split_once('.')
        .and_then(|(i, s)| i.parse::<u64>().ok().map(|i| (s, i)));
    let Some((session, index)) = parsed else {
        return Err(ApiError::bad(
            field,
            format!("`{id}` is not a checkpoint id of this server (`<index>.<session>`)"),
        ));
    };
    let known = record.session == session
        || record
            .parents
            .iter()
            .chain(&record.abandoned)
            .any(|p| p.session == session && index <= p.index);
    if !known {
        return Err(ApiError::not_found("checkpoint", id));
    }
    Ok((SessionId::from(session.to_string()), index))
}

fn checkpoint_json(thread: &str, id: Option<String>) -> Value {
    json!({"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": id, "checkpoint_map": {}})
}

/// The state of a thread at a checkpoint (the latest when `at` is `None`),
/// as the API's `ThreadState`.
pub(crate) async fn state_json(
    app: &Shared,
    record: &ThreadRecord,
    at: Option<(SessionId, u64)>,
) -> Result<Value, ApiError> {
    let thread = &record.thread_id;
    let Some((head, agent)) = head_of(app, record).await? else {
        if at.is_some() {
            return Err(ApiError::not_found(
                "checkpoint",
                "(the thread has none yet)",
            ));
        }
        return Ok(json!({
            "values": {}, "next": [], "tasks": [], "interrupts": [], "metadata": {},
            "created_at": null, "parent_checkpoint": null,
            "checkpoint": checkpoint_json(thread, None),
        }));
    };
    let (session, index) = at.unwrap_or_else(|| (record.session_id(), head.steps));
    let latest = session.as_str() == record.session && index == head.steps;
    let values = agent.state(&session, Some(index)).await?;
    let history = agent.history(&session).await?;
    let entry = history.iter().rev().find(|c| c.index == index);
    let time = entry.map_or(head.updated_at, |c| c.time);
    let (next, tasks, interrupts) = if latest {
        let interrupts = interrupts_of(&head);
        let next: Vec<&str> = match (&head.phase, head.next_step.as_deref()) {
            (SessionPhase::Interrupted { .. } | SessionPhase::Running, Some(step)) => vec![step],
            _ => Vec::new(),
        };
        let tasks: Vec<Value> = match &head.phase {
            SessionPhase::Interrupted { interrupt } => vec![json!({
                "id": head.run_id.as_str(), "name": interrupt.step, "path": interrupt.path.as_str(),
                "error": null, "interrupts": interrupts, "checkpoint": null,
                "state": null, "result": null,
            })],
            _ => Vec::new(),
        };
        (next, tasks, interrupts)
    } else {
        (Vec::new(), Vec::new(), Vec::new())
    };
    let parent = if index > 0 {
        Some(checkpoint_json(
            thread,
            Some(checkpoint_id(session.as_str(), index - 1)),
        ))
    } else {
        parent_of(record, session.as_str())
            .map(|p| checkpoint_json(thread, Some(checkpoint_id(&p.session, p.index))))
    };
    Ok(json!({
        "values": values,
        "next": next,
        "tasks": tasks,
        "interrupts": interrupts,
        "metadata": {
            "step": index,
            "source": if index == 0 { "input" } else { "loop" },
            "writes": entry.map(|c| json!({ c.step.clone(): null })),
            "run_id": if latest { Some(head.run_id.as_str()) } else { None },
            "thread_id": thread,
            "graph_id": agent.id(),
            "assistant_id": agent.id(),
        },
        "created_at": iso(time),
        "checkpoint": checkpoint_json(thread, Some(checkpoint_id(session.as_str(), index))),
        "parent_checkpoint": parent,
    }))
}

/// The session `session` was forked from, if it was.
fn parent_of<'a>(record: &'a ThreadRecord, session: &str) -> Option<&'a Parent> {
    if let Some(p) = record
        .parents
        .iter()
        .find(|p| p.fork.as_deref() == Some(session))
    {
        return Some(p);
    }
    // Records written before a parent named its fork: the chain.
    if record.session == session {
        return record.parents.first().filter(|p| p.fork.is_none());
    }
    let at = record.parents.iter().position(|p| p.session == session)?;
    record.parents.get(at + 1).filter(|p| p.fork.is_none())
}

pub(crate) async fn get_state(
    State(app): State<Shared>,
    Path(id): Path<String>,
    query: QueryPairs,
) -> Result<Json<Value>, ApiError> {
    let record = get_record(&app, &id).await?;
    query.flag("subgraphs", false)?;
    Ok(Json(state_json(&app, &record, None).await?))
}

pub(crate) async fn get_state_at(
    State(app): State<Shared>,
    Path((id, checkpoint)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let record = get_record(&app, &id).await?;
    let at = read_checkpoint(&record, &checkpoint, "checkpoint_id")?;
    Ok(Json(state_json(&app, &record, Some(at)).await?))
}

/// A checkpoint as a body gives it: `{"checkpoint_id": ...}`.
#[derive(Debug, Deserialize)]
pub(crate) struct CheckpointRef {
    pub(crate) checkpoint_id: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct StateAt {
    checkpoint: CheckpointRef,
}

pub(crate) async fn post_state_at(
    State(app): State<Shared>,
    Path(id): Path<String>,
    Body(body): Body<StateAt>,
) -> Result<Json<Value>, ApiError> {
    let record = get_record(&app, &id).await?;
    let at = match &body.checkpoint.checkpoint_id {
        Some(c) => Some(read_checkpoint(&record, c, "checkpoint.checkpoint_id")?),
        None => None,
    };
    Ok(Json(state_json(&app, &record, at).await?))
}

/// `before` in a history request: a checkpoint id, or `{"checkpoint_id"}`
/// (the SDK's `str | Checkpoint`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum Before {
    Id(String),
    Checkpoint(CheckpointRef),
}

impl Before {
    fn checkpoint_id(&self) -> Option<&str> {
        match self {
            Before::Id(id) => Some(id),
            Before::Checkpoint(c) => c.checkpoint_id.as_deref(),
        }
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct History {
    pub(crate) limit: Option<usize>,
    pub(crate) before: Option<Before>,
    pub(crate) metadata: Option<Map<String, Value>>,
    pub(crate) checkpoint: Option<CheckpointRef>,
}

/// The thread's checkpoints, newest first, across the sessions it was
/// forked from and those it left for a fork, each once.
pub(crate) async fn history(
    State(app): State<Shared>,
    Path(id): Path<String>,
    Body(body): Body<History>,
) -> Result<Json<Vec<Value>>, ApiError> {
    let record = get_record(&app, &id).await?;
    let limit = body.limit.unwrap_or(10).min(1000);
    let before = match &body.before {
        Some(Before::Id(c)) => Some(read_checkpoint(&record, c, "before")?),
        Some(b) => match b.checkpoint_id() {
            Some(c) => Some(read_checkpoint(&record, c, "before.checkpoint_id")?),
            None => None,
        },
        None => None,
    };
    if let Some(c) = body
        .checkpoint
        .as_ref()
        .and_then(|b| b.checkpoint_id.as_ref())
    {
        read_checkpoint(&record, c, "checkpoint.checkpoint_id")?;
    }
    let Some((head, agent)) = head_of(&app, &record).await? else {
        return Ok(Json(Vec::new()));
    };
    // Each session of the thread, up to the furthest checkpoint of it the
    // thread has had.
    let mut upto: Vec<(String, u64)> = vec![(record.session.clone(), head.steps)];
    for p in record.parents.iter().chain(&record.abandoned) {
        match upto.iter_mut().find(|(s, _)| *s == p.session) {
            Some((_, i)) => *i = (*i).max(p.index),
            None => upto.push((p.session.clone(), p.index)),
        }
    }
    // Every (time, session, index), newest first: a fork's checkpoints
    // are newer than those it was made from.
    let mut points: Vec<(u64, SessionId, u64)> = Vec::new();
    for (session, upto) in upto {
        let session = SessionId::from(session);
        let mut seen = std::collections::BTreeMap::new();
        for c in agent.history(&session).await? {
            if c.index <= upto {
                // The latest record of an index is its checkpoint.
                seen.insert(c.index, c.time);
            }
        }
        points.extend(seen.into_iter().map(|(i, t)| (t, session.clone(), i)));
    }
    points.sort_by_key(|p| std::cmp::Reverse((p.0, p.2)));
    let mut points: Vec<(SessionId, u64)> = points.into_iter().map(|(_, s, i)| (s, i)).collect();
    if let Some(b) = &before {
        match points.iter().position(|p| p == b) {
            Some(at) => {
                points.drain(..=at);
            }
            None => points.clear(),
        }
    }
    let mut out = Vec::new();
    for at in points {
        if out.len() >= limit {
            break;
        }
        let state = state_json(&app, &record, Some(at)).await?;
        if let Some(wanted) = &body.metadata
            && wanted
                .iter()
                .any(|(k, v)| state["metadata"].get(k) != Some(v))
        {
            continue;
        }
        out.push(state);
    }
    Ok(Json(out))
}

#[derive(Debug, Deserialize)]
pub(crate) struct UpdateState {
    pub(crate) values: Option<Value>,
    pub(crate) checkpoint_id: Option<String>,
    pub(crate) checkpoint: Option<CheckpointRef>,
    pub(crate) as_node: Option<String>,
}

/// `update_state`: a fork of the thread's session at the checkpoint (the
/// latest by default) with `values` merged in through the reducers; the
/// thread goes on from the fork.
pub(crate) async fn update_state(
    State(app): State<Shared>,
    Path(id): Path<String>,
    Body(body): Body<UpdateState>,
) -> Result<Json<Value>, ApiError> {
    let mut record = get_record(&app, &id).await?;
    if let Some(active) = app.runs().active(&id) {
        return Err(ApiError::conflict(format!(
            "thread {id} has run {} in flight: wait for it or cancel it before updating the state",
            active.run_id
        )));
    }
    let Some((head, agent)) = head_of(&app, &record).await? else {
        return Err(ApiError::conflict(format!(
            "thread {id} has no state yet: start a run on it first"
        )));
    };
    if let Some(node) = &body.as_node
        && !agent.graph()["nodes"]
            .as_array()
            .is_some_and(|n| n.iter().any(|n| n["id"] == **node))
    {
        return Err(ApiError::unprocessable(
            "as_node",
            format!("`{node}` is not a step of agent `{}`", agent.id()),
        ));
    }
    let given = body
        .checkpoint
        .as_ref()
        .and_then(|c| c.checkpoint_id.clone())
        .map(|c| (c, "checkpoint.checkpoint_id"))
        .or_else(|| body.checkpoint_id.clone().map(|c| (c, "checkpoint_id")));
    let (session, index) = match given {
        Some((c, field)) => read_checkpoint(&record, &c, field)?,
        None => (record.session_id(), head.steps),
    };
    let values = body.values.filter(|v| !v.is_null());
    // The thread still waits on its interrupt, as with LangGraph, unless
    // the update is made as a step's (which moves the loop on).
    let fork = if body.as_node.is_none() {
        agent
            .fork_waiting(&session, index, values, "values")
            .await?
    } else {
        agent.fork(&session, index, values, "values").await?
    };
    mark_fork(&app, &id, &fork).await?;
    record.move_to(&session, index, &fork, head.steps);
    record.updated_at = now_millis();
    save(&app, &record).await?;
    let steps = agent.head(&fork).await?.map_or(0, |h| h.steps);
    Ok(Json(json!({
        "checkpoint": checkpoint_json(&id, Some(checkpoint_id(fork.as_str(), steps))),
    })))
}

/// `copy`: a new thread whose state is a fork of this one's latest
/// checkpoint, with the same metadata and history.
pub(crate) async fn copy(
    State(app): State<Shared>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let record = get_record(&app, &id).await?;
    if let Some(active) = app.runs().active(&id) {
        return Err(ApiError::conflict(format!(
            "thread {id} has run {} in flight: wait for it or cancel it before copying",
            active.run_id
        )));
    }
    let mut copy = ThreadRecord {
        thread_id: uuid::Uuid::new_v4().to_string(),
        created_at: now_millis(),
        updated_at: now_millis(),
        metadata: record.metadata.clone(),
        session: String::new(),
        parents: Vec::new(),
        abandoned: record.abandoned.clone(),
        deleted: false,
    };
    match head_of(&app, &record).await? {
        None => copy.session = copy.thread_id.clone(),
        Some((head, agent)) => {
            // A copy of a thread waiting on an interrupt waits on it too.
            let fork = agent
                .fork_waiting(&record.session_id(), head.steps, None, "")
                .await?;
            mark_fork(&app, &copy.thread_id, &fork).await?;
            copy.session = fork.to_string();
            copy.parents.push(Parent {
                session: record.session.clone(),
                index: head.steps,
                fork: Some(fork.to_string()),
            });
            copy.parents.extend(record.parents.iter().cloned());
        }
    }
    save(&app, &copy).await?;
    Ok(Json(thread_json(&app, &copy).await?))
}
