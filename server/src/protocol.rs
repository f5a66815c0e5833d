//! The Agent Protocol's own paths (langchain-ai/agent-protocol's
//! `openapi.json`), as thin mappings onto the LangGraph-shaped handlers:
//! agents are the assistants, a run is found by its id alone, a thread's
//! history is also a `GET`, a thread is patched, and a thread's events and
//! commands speak a subset of the streaming protocol. The paths the two
//! shapes share (`/threads`, `/runs`, `/store`) are served by one handler
//! each, which reads both request shapes (`runs::RunCreate`).

use crate::app::{Body, Path, QueryPairs, Shared, check_id};
use crate::assistants;
use crate::error::ApiError;
use crate::limits::StreamSlot;
use crate::record::{Frame, Mode, RunRecord, RunResult, RunStatus};
use crate::runs;
use crate::threads::{self, CheckpointRef};
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use harness::session::now_millis;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::collections::{HashSet, VecDeque};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

// ---- agents ----

/// An assistant as the Agent Protocol's `Agent`.
fn agent_json(app: &Shared, id: &str) -> Value {
    let assistant = app
        .agents
        .get(id)
        .map(|a| assistants::assistant_json(app, &**a))
        .unwrap_or_default();
    json!({
        "agent_id": id,
        "name": id,
        "description": format!("harness agent `{id}`"),
        "metadata": assistant["metadata"],
        "capabilities": {"ap.io.messages": false, "ap.io.streaming": true},
    })
}

/// `POST /agents/search`: `assistants/search` (name, metadata, limit,
/// offset), as agents.
pub(crate) async fn search_agents(
    State(app): State<Shared>,
    body: Body<assistants::Search>,
) -> Result<Json<Vec<Value>>, ApiError> {
    let Json(found) = assistants::search(State(Arc::clone(&app)), body).await?;
    Ok(Json(
        found
            .iter()
            .filter_map(|a| a["assistant_id"].as_str())
            .map(|id| agent_json(&app, id))
            .collect(),
    ))
}

/// `GET /agents/{agent_id}`.
pub(crate) async fn get_agent(
    State(app): State<Shared>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    app.agent(&id)
        .map_err(|_| ApiError::not_found("agent", &id))?;
    Ok(Json(agent_json(&app, &id)))
}

/// `GET /agents/{agent_id}/schemas`: the assistant's schemas (those it
/// has: an agent without a config has no `config_schema`).
pub(crate) async fn agent_schemas(
    State(app): State<Shared>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let agent = app
        .agent(&id)
        .map_err(|_| ApiError::not_found("agent", &id))?;
    let schemas = agent.schemas();
    let mut out = Map::new();
    out.insert("agent_id".into(), json!(id));
    for key in [
        "input_schema",
        "output_schema",
        "state_schema",
        "config_schema",
    ] {
        if let Some(schema) = schemas.get(key).filter(|s| s.is_object()) {
            out.insert(key.into(), schema.clone());
        }
    }
    Ok(Json(Value::Object(out)))
}

// ---- runs by id ----

/// A run's status as the Agent Protocol names it: a run under way is
/// `pending` there (it has no `running`).
fn status_name(status: RunStatus) -> &'static str {
    match status {
        RunStatus::Running => "pending",
        other => other.as_str(),
    }
}

/// A run as the Agent Protocol's `Run`: the LangGraph run with `agent_id`
/// and the protocol's status.
pub(crate) fn run_json(run: &RunRecord) -> Value {
    let mut json = run.to_json();
    json["agent_id"] = json!(run.assistant_id);
    json["status"] = json!(status_name(run.status()));
    json
}

/// A settled run as the Agent Protocol's `RunWaitResponse`: the run and
/// the thread's values at its end.
pub(crate) fn wait_json(run: &RunRecord, result: &RunResult) -> Value {
    let mut out = json!({ "run": run_json(run) });
    if result.values.is_object() {
        out["values"] = result.values.clone();
    }
    out
}

/// The run `run_id` of any thread, or a 404.
async fn run_by_id(app: &Shared, run_id: &str) -> Result<Arc<RunRecord>, ApiError> {
    check_id("run_id", run_id)?;
    let local = app.runs().find_by_id(run_id);
    match local {
        Some(run) => Ok(run),
        None if app.replica.is_some() => crate::replica::find(app, None, run_id)
            .await?
            .ok_or_else(|| ApiError::not_found("run", run_id)),
        None => Err(ApiError::not_found("run", run_id)),
    }
}

/// A conflict of a path whose spec lists no 409 (the run's state does
/// not allow it): a 422 naming `field`.
fn conflict_as_422(e: ApiError, field: &str) -> ApiError {
    match e {
        ApiError::Conflict { message } => ApiError::unprocessable(field, message),
        other => other,
    }
}

/// `GET /runs/{run_id}`.
pub(crate) async fn get_run(
    State(app): State<Shared>,
    Path(run_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let run = run_by_id(&app, &run_id).await?;
    Ok(Json(run_json(&run)))
}

/// `DELETE /runs/{run_id}`: a settled run is forgotten; one under way is
/// a 422 (cancel it first).
pub(crate) async fn delete_run(
    State(app): State<Shared>,
    Path(run_id): Path<String>,
) -> Result<Response, ApiError> {
    let run = run_by_id(&app, &run_id).await?;
    runs::delete(State(app), Path((run.thread_id.clone(), run_id)))
        .await
        .map_err(|e| conflict_as_422(e, "run_id"))
}

/// `GET /runs/{run_id}/wait`: the run's end, as a `RunWaitResponse`.
pub(crate) async fn wait_run(
    State(app): State<Shared>,
    Path(run_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let run = run_by_id(&app, &run_id).await?;
    let result = crate::replica::settled(&app, &run).await?;
    Ok(Json(wait_json(&run, &result)))
}

/// `GET /runs/{run_id}/stream`: `join_stream` (its events as server-sent
/// events, from `Last-Event-ID` on).
pub(crate) async fn stream_run(
    State(app): State<Shared>,
    Path(run_id): Path<String>,
    headers: HeaderMap,
    query: QueryPairs,
) -> Result<Response, ApiError> {
    let run = run_by_id(&app, &run_id).await?;
    runs::join_stream(
        State(app),
        Path((run.thread_id.clone(), run_id)),
        headers,
        query,
    )
    .await
}

/// `POST /runs/{run_id}/cancel`: `cancel` (`wait`, `action`); a run that
/// has settled already is a 422.
pub(crate) async fn cancel_run(
    State(app): State<Shared>,
    Path(run_id): Path<String>,
    query: QueryPairs,
) -> Result<Response, ApiError> {
    let run = run_by_id(&app, &run_id).await?;
    runs::cancel(State(app), Path((run.thread_id.clone(), run_id)), query)
        .await
        .map_err(|e| conflict_as_422(e, "run_id"))
}

/// The body of `POST /runs/search`.
#[derive(Debug, Deserialize)]
pub(crate) struct SearchRuns {
    metadata: Option<Map<String, Value>>,
    status: Option<String>,
    thread_id: Option<String>,
    agent_id: Option<String>,
    limit: Option<usize>,
    offset: Option<usize>,
}

const AP_RUN_STATUSES: [&str; 5] = ["pending", "error", "success", "timeout", "interrupted"];

/// `POST /runs/search`: the runs this server remembers (with replicas,
/// every run the store keeps, whichever replica ran it), newest first.
pub(crate) async fn search_runs(
    State(app): State<Shared>,
    Body(body): Body<SearchRuns>,
) -> Result<Json<Vec<Value>>, ApiError> {
    if let Some(s) = body.status.as_deref()
        && !AP_RUN_STATUSES.contains(&s)
    {
        return Err(ApiError::bad(
            "status",
            format!("`{s}` is none of {}", AP_RUN_STATUSES.join(", ")),
        ));
    }
    let limit = match body.limit {
        None => 10,
        Some(n @ 1..=1000) => n,
        Some(n) => {
            return Err(ApiError::bad(
                "limit",
                format!("`{n}` is not from 1 to 1000"),
            ));
        }
    };
    if let Some(agent) = &body.agent_id {
        app.agent(agent)
            .map_err(|_| ApiError::not_found("agent", agent))?;
    }
    let mut all: Vec<Arc<RunRecord>> = if app.replica.is_some() {
        crate::replica::records(&app, body.thread_id.as_deref()).await?
    } else {
        app.runs().by_thread.values().flatten().cloned().collect()
    };
    all.sort_by(|a, b| {
        b.created_at
            .cmp(&a.created_at)
            .then_with(|| b.run_id.cmp(&a.run_id))
    });
    let out = all
        .iter()
        .filter(|r| body.thread_id.as_ref().is_none_or(|t| *t == r.thread_id))
        .filter(|r| body.agent_id.as_ref().is_none_or(|a| *a == r.assistant_id))
        .filter(|r| {
            body.status
                .as_deref()
                .is_none_or(|s| status_name(r.status()) == s)
        })
        .filter(|r| {
            body.metadata
                .iter()
                .flatten()
                .all(|(k, v)| r.metadata.get(k) == Some(v))
        })
        .skip(body.offset.unwrap_or(0))
        .take(limit)
        .map(|r| run_json(r))
        .collect();
    Ok(Json(out))
}

// ---- threads ----

/// `GET /threads/{thread_id}/history?limit&before`: the LangGraph
/// `POST` history, newest first.
pub(crate) async fn history(
    State(app): State<Shared>,
    Path(id): Path<String>,
    query: QueryPairs,
) -> Result<Json<Vec<Value>>, ApiError> {
    let body = threads::History {
        limit: Some(query.count("limit", 10, 1000)?),
        before: query
            .get("before")
            .map(|b| threads::Before::Id(b.to_string())),
        metadata: None,
        checkpoint: None,
    };
    threads::history(State(app), Path(id), Body(body)).await
}

/// The body of `PATCH /threads/{thread_id}`.
#[derive(Debug, Deserialize)]
pub(crate) struct PatchThread {
    checkpoint: Option<CheckpointRef>,
    metadata: Option<Map<String, Value>>,
    values: Option<Value>,
    messages: Option<Value>,
}

/// `PATCH /threads/{thread_id}`: `metadata` merges into the thread's;
/// `values` is `update_state` (a fork at `checkpoint`, the latest by
/// default). Messages live in the agents' state here: give them in
/// `values`.
pub(crate) async fn patch_thread(
    State(app): State<Shared>,
    Path(id): Path<String>,
    Body(body): Body<PatchThread>,
) -> Result<Json<Value>, ApiError> {
    threads::get_record(&app, &id).await?;
    if body.messages.as_ref().is_some_and(|m| !m.is_null()) {
        return Err(ApiError::unprocessable(
            "messages",
            "this server's agents keep their messages in their state: give them in `values`",
        ));
    }
    if let Some(values) = body.values.filter(|v| !v.is_null()) {
        let update = threads::UpdateState {
            values: Some(values),
            checkpoint_id: None,
            checkpoint: body.checkpoint,
            as_node: None,
        };
        let Json(_) =
            threads::update_state(State(Arc::clone(&app)), Path(id.clone()), Body(update))
                .await
                .map_err(|e| conflict_as_422(e, "values"))?;
    }
    let mut record = threads::get_record(&app, &id).await?;
    if let Some(metadata) = body.metadata {
        record.metadata.extend(metadata);
        record.updated_at = now_millis();
        threads::save(&app, &record).await?;
    }
    Ok(Json(threads::thread_json(&app, &record).await?))
}

// ---- the streaming protocol: commands ----

/// The body of `POST /threads/{thread_id}/commands`.
#[derive(Debug, Deserialize)]
pub(crate) struct Command {
    id: u64,
    method: String,
    #[serde(default)]
    params: Map<String, Value>,
}

/// The commands of the streaming protocol this server answers; the others
/// it knows are answered `not_supported`, unknown ones `unknown_command`.
const SUPPORTED: [&str; 3] = ["run.start", "input.respond", "state.get"];
/// Over HTTP; a WebSocket also answers `subscription.subscribe` and
/// `subscription.unsubscribe`.
const KNOWN: [&str; 10] = [
    "run.input",
    "subscription.subscribe",
    "subscription.unsubscribe",
    "subscription.reconnect",
    "agent.getTree",
    "input.inject",
    "state.listCheckpoints",
    "state.fork",
    "run.cancel",
    "run.get",
];

fn command_error(id: u64, code: &str, message: impl Into<String>) -> Value {
    json!({"type": "error", "id": id, "error": code, "message": message.into()})
}

/// An API error as a command's error code.
fn code_of(e: &ApiError) -> &'static str {
    match e {
        ApiError::NotFound { what: "run", .. } => "no_such_run",
        ApiError::NotFound {
            what: "checkpoint", ..
        } => "no_such_checkpoint",
        ApiError::NotFound { .. }
        | ApiError::BadRequest { .. }
        | ApiError::Unprocessable { .. } => "invalid_argument",
        ApiError::Conflict { .. } => "invalid_argument",
        _ => "unknown_error",
    }
}

/// A run body from a command's parameters.
fn run_body(params: &Map<String, Value>, input: Option<Value>, resume: Option<Value>) -> Value {
    let mut body = json!({
        "stream_mode": ["values", "updates", "custom", "messages-tuple"],
        "multitask_strategy": "reject",
    });
    for (from, to) in [("assistantId", "assistant_id"), ("agentId", "agent_id")] {
        if let Some(v) = params.get(from) {
            body[to] = v.clone();
        }
    }
    for key in ["config", "metadata"] {
        if let Some(v) = params.get(key) {
            body[key] = v.clone();
        }
    }
    if let Some(input) = input {
        body["input"] = input;
    }
    if let Some(resume) = resume {
        body["command"] = json!({ "resume": resume });
    }
    body
}

/// `POST /threads/{thread_id}/commands`: `run.start` (`assistantId`,
/// `input`, `config`, `metadata`: a run in the background, which the
/// thread's event streams show), `input.respond` (`interruptId`,
/// `response`: the run that answers the pending interrupt), `state.get`
/// (the thread's values). A command that fails is a `200` whose body is
/// the protocol's error response; an unknown thread is a 404.
pub(crate) async fn command(
    State(app): State<Shared>,
    Path(thread): Path<String>,
    Body(body): Body<Command>,
) -> Result<Json<Value>, ApiError> {
    threads::get_record(&app, &thread).await?;
    Ok(Json(answer(&app, &thread, body).await))
}

/// The response to a command on `thread` (which exists): success, or the
/// protocol's error response.
async fn answer(app: &Shared, thread: &str, command: Command) -> Value {
    let Command { id, method, params } = command;
    if !SUPPORTED.contains(&method.as_str()) {
        let (code, message) = if KNOWN.contains(&method.as_str()) {
            (
                "not_supported",
                format!(
                    "`{method}` is not supported by this server: it answers {}",
                    SUPPORTED.join(", ")
                ),
            )
        } else {
            ("unknown_command", format!("`{method}` is not a command"))
        };
        return command_error(id, code, message);
    }
    let outcome = match method.as_str() {
        "state.get" => match threads::get_record(app, thread).await {
            Ok(record) => threads::thread_json(app, &record)
                .await
                .map(|t| json!({"values": t["values"]})),
            Err(e) => Err(e),
        },
        "run.start" => {
            let input = params.get("input").cloned();
            start_command(app, thread, run_body(&params, input, None)).await
        }
        _ => {
            let Some(response) = params.get("response").cloned() else {
                return command_error(
                    id,
                    "invalid_argument",
                    "`input.respond` takes `interruptId` and `response` (one interrupt at a time)",
                );
            };
            let resume = match params.get("interruptId").and_then(Value::as_str) {
                Some(interrupt) => json!({ interrupt: response }),
                None => response,
            };
            let head = match threads::get_record(app, thread).await {
                Ok(record) => threads::head_of(app, &record).await,
                Err(e) => Err(e),
            };
            let agent = match head {
                Ok(Some((_, agent))) => agent.id().to_string(),
                Ok(None) => {
                    return command_error(
                        id,
                        "no_such_interrupt",
                        format!("thread {thread} has not run yet"),
                    );
                }
                Err(e) => return command_error(id, code_of(&e), e.to_string()),
            };
            let mut with_agent = params.clone();
            with_agent.insert("assistantId".into(), json!(agent));
            start_command(app, thread, run_body(&with_agent, None, Some(resume))).await
        }
    };
    match outcome {
        Ok(result) => json!({"type": "success", "id": id, "result": result}),
        Err(e) => command_error(id, code_of(&e), e.to_string()),
    }
}

async fn start_command(app: &Shared, thread: &str, body: Value) -> Result<Value, ApiError> {
    let body: runs::RunCreate = crate::app::parse(body.to_string().as_bytes())?;
    let run = runs::start(app, Some(thread.to_string()), body).await?;
    Ok(json!({ "runId": run.run_id }))
}

// ---- the streaming protocol: a thread's events ----

/// The body of `POST /threads/{thread_id}/stream`.
#[derive(Debug, Deserialize)]
pub(crate) struct EventStream {
    channels: Vec<String>,
    namespaces: Option<Vec<Vec<String>>>,
    depth: Option<usize>,
    since: Option<u64>,
}

/// The channels of the streaming protocol; this server sends `values`,
/// `updates`, `messages`, `custom` and `lifecycle`, and nothing on the
/// others.
const CHANNELS: [&str; 9] = [
    "values",
    "updates",
    "messages",
    "tools",
    "lifecycle",
    "input",
    "checkpoints",
    "tasks",
    "custom",
];

/// What a connection asked for.
struct Filter {
    channels: Vec<String>,
    namespaces: Option<Vec<Vec<String>>>,
    depth: Option<usize>,
}

impl Filter {
    fn shows(&self, channel: &str, namespace: &[String]) -> bool {
        if !self.channels.iter().any(|c| c == channel) {
            return false;
        }
        match &self.namespaces {
            None => self.depth.is_none_or(|d| namespace.len() <= d),
            Some(prefixes) => prefixes.iter().any(|p| {
                namespace.starts_with(p)
                    && self.depth.is_none_or(|d| namespace.len() - p.len() <= d)
            }),
        }
    }
}

/// A frame's channel and the data it carries there, if it has one.
fn channel_of(frame: &Frame) -> Option<(&'static str, Value)> {
    Some(match frame.mode {
        Mode::Values => ("values", frame.data.clone()),
        Mode::Updates => ("updates", frame.data.clone()),
        Mode::Messages => ("messages", frame.data.clone()),
        Mode::Custom => ("custom", frame.data.clone()),
        Mode::Always if frame.event == "metadata" => (
            "lifecycle",
            json!({"event": "running", "run_id": frame.data["run_id"]}),
        ),
        Mode::Always => ("lifecycle", json!({"event": "failed", "error": frame.data})),
        Mode::Debug | Mode::Events | Mode::MessagesFull => return None,
    })
}

/// One event of the protocol.
fn protocol_event(seq: u64, channel: &str, namespace: &[String], data: Value) -> (u64, Value) {
    (
        seq,
        json!({
            "type": "event",
            "eventId": seq.to_string(),
            "seq": seq,
            "method": channel,
            "params": {"namespace": namespace, "timestamp": now_millis(), "data": data},
        }),
    )
}

/// Where a connection stands: the run it reads, and the runs it has read.
struct Follow {
    app: Shared,
    thread: String,
    filter: Filter,
    since: Option<u64>,
    /// The run being read and the thread sequence number of its frame 0.
    current: Option<(Arc<RunRecord>, u64)>,
    after: Option<u64>,
    /// The last run read (its id and creation time), or, before the first,
    /// the run the connection waits after.
    last: Option<(String, u64)>,
    started: bool,
    queue: VecDeque<(u64, Value)>,
    stopping: tokio::sync::watch::Receiver<bool>,
    /// Changes when a run is added to any thread.
    added: tokio::sync::watch::Receiver<u64>,
    /// With replicas: the thread's runs looked for in the store so far.
    adopted: HashSet<String>,
    _slot: StreamSlot,
}

impl Follow {
    /// The thread's remembered runs with the sequence number of each one's
    /// first frame (each run counts its frames and its end).
    fn runs(&self) -> Vec<(Arc<RunRecord>, u64)> {
        let list = self
            .app
            .runs()
            .by_thread
            .get(&self.thread)
            .cloned()
            .unwrap_or_default();
        let mut base = 0;
        list.into_iter()
            .map(|r| {
                let at = base;
                base += r.frame_count() + 1;
                (r, at)
            })
            .collect()
    }

    /// Picks the run to read next, if there is one yet.
    fn pick(&mut self) {
        let runs = self.runs();
        if !self.started {
            self.started = true;
            if self.since.is_some() {
                self.current = runs.first().cloned();
                if self.current.is_none() {
                    self.last = None;
                }
                return;
            }
            if let Some(active) = runs.iter().find(|(r, _)| !r.status().is_done()) {
                self.current = Some(active.clone());
                return;
            }
            self.last = runs.last().map(|(r, _)| (r.run_id.clone(), r.created_at));
            return;
        }
        self.current = match &self.last {
            None => runs.first().cloned(),
            Some((id, created)) => match runs.iter().position(|(r, _)| r.run_id == *id) {
                Some(i) => runs.get(i + 1).cloned(),
                None => runs.into_iter().find(|(r, _)| r.created_at > *created),
            },
        };
    }

    fn push(&mut self, seq: u64, channel: &str, namespace: Vec<String>, data: Value) {
        if self.since.is_some_and(|s| seq <= s) || !self.filter.shows(channel, &namespace) {
            return;
        }
        self.queue
            .push_back(protocol_event(seq, channel, &namespace, data));
    }

    /// Reads the current run's new frames; `true` once it has ended.
    fn read(&mut self) -> bool {
        let Some((run, base)) = self.current.clone() else {
            return false;
        };
        let (frames, done) = run.frames_after(self.after);
        if let Some(last) = frames.last() {
            self.after = Some(last.seq);
        }
        for frame in &frames {
            if let Some((channel, data)) = channel_of(frame) {
                let namespace: Vec<String> = frame
                    .ns
                    .as_deref()
                    .map(|ns| ns.split('|').map(String::from).collect())
                    .unwrap_or_default();
                self.push(base + frame.seq, channel, namespace, data);
            }
        }
        if done {
            let total = run.frame_count();
            let status = run.status();
            self.push(
                base + total,
                "lifecycle",
                Vec::new(),
                json!({"event": match status {
                    RunStatus::Success => "completed",
                    RunStatus::Error => "failed",
                    _ => "interrupted",
                }, "run_id": run.run_id, "status": status.as_str()}),
            );
            self.last = Some((run.run_id.clone(), run.created_at));
            self.current = None;
            self.after = None;
        }
        done
    }
}

/// A connection's view of `thread`'s events, once its request is checked
/// (the thread exists, the channels are the protocol's) and a stream place
/// is taken. The thread's runs are looked at here, before the response is
/// sent: a run started once the client has the response's headers is
/// followed, however soon it ends (looked at when the stream is first
/// read, a run that had ended by then was taken for one before the
/// connection).
async fn follow(app: &Shared, thread: &str, body: EventStream) -> Result<Follow, ApiError> {
    threads::get_record(app, thread).await?;
    if body.channels.is_empty() {
        return Err(ApiError::bad("channels", "name at least one channel"));
    }
    for (i, c) in body.channels.iter().enumerate() {
        if !CHANNELS.contains(&c.as_str()) && c.strip_prefix("custom:").is_none_or(str::is_empty) {
            return Err(ApiError::bad(
                format!("channels[{i}]"),
                format!(
                    "`{c}` is not a channel (the channels: {}, custom:<name>)",
                    CHANNELS.join(", ")
                ),
            ));
        }
    }
    let slot = app.streams.open()?;
    let mut adopted = HashSet::new();
    if app.replica.is_some() {
        // The runs other replicas ran or run, known before the first look.
        crate::replica::adopt(app, thread, &mut adopted).await?;
    }
    let mut follow = Follow {
        adopted,
        stopping: app.stopping.subscribe(),
        added: app.runs_added.subscribe(),
        app: Arc::clone(app),
        thread: thread.to_string(),
        filter: Filter {
            channels: body.channels,
            namespaces: body.namespaces,
            depth: body.depth,
        },
        since: body.since,
        current: None,
        after: None,
        last: None,
        started: false,
        queue: VecDeque::new(),
        _slot: slot,
    };
    follow.added.borrow_and_update();
    follow.pick();
    Ok(follow)
}

/// The protocol's events a connection follows, with their sequence
/// numbers, until the server stops.
fn events(follow: Follow) -> impl futures::Stream<Item = (u64, Value)> + Send {
    futures::stream::unfold(follow, |mut f| async move {
        loop {
            if let Some(event) = f.queue.pop_front() {
                return Some((event, f));
            }
            if *f.stopping.borrow() {
                return None;
            }
            if f.current.is_none() {
                // Marks the runs seen before looking, so that a run added
                // after the look wakes the wait below.
                f.added.borrow_and_update();
                f.pick();
            }
            match f.current.clone() {
                Some((run, _)) => {
                    let mut ticks = run.ticks();
                    ticks.borrow_and_update();
                    if !f.read() && f.queue.is_empty() {
                        tokio::select! {
                            _ = ticks.changed() => {}
                            _ = f.stopping.changed() => {}
                        }
                    }
                }
                // No run yet: wait for one, here or, with replicas, on
                // another replica (looked for in the store now and then).
                None => {
                    let replicas = f.app.replica.is_some();
                    if replicas {
                        match crate::replica::adopt(&f.app, &f.thread, &mut f.adopted).await {
                            Ok(true) => continue,
                            Ok(false) => {}
                            Err(e) => tracing::warn!(
                                thread = %f.thread,
                                error = %e,
                                "cannot look for the thread's runs in the store"
                            ),
                        }
                    }
                    let look_again = if replicas {
                        crate::replica::poll(&f.app)
                    } else {
                        Duration::ZERO
                    };
                    tokio::select! {
                        _ = f.added.changed() => {}
                        _ = f.stopping.changed() => {}
                        () = tokio::time::sleep(look_again), if replicas => {}
                    }
                }
            }
        }
    })
}

/// `POST /threads/{thread_id}/stream`: the thread's events as the
/// streaming protocol's events (`values`, `updates`, `messages`, `custom`,
/// `lifecycle`), filtered by channel, namespace and depth: the run under
/// way and every later one, until the client goes away or the server
/// stops; with `since`, first the events after it of the runs the server
/// remembers for the thread (a sequence number counts their events).
pub(crate) async fn thread_stream(
    State(app): State<Shared>,
    Path(thread): Path<String>,
    Body(body): Body<EventStream>,
) -> Result<Response, ApiError> {
    use futures::StreamExt;
    let follow = follow(&app, &thread, body).await?;
    let sse = events(follow).map(|(seq, event)| {
        Ok::<_, Infallible>(
            Event::default()
                .id(seq.to_string())
                .event(event["method"].as_str().unwrap_or("event"))
                .data(event.to_string()),
        )
    });
    Ok(Sse::new(sse)
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// `GET /threads/{thread_id}/stream`: the streaming protocol over a
/// WebSocket. After the upgrade the client sends commands as text
/// messages and gets their responses, and the events of its
/// subscriptions: `subscription.subscribe` (`channels`, `namespaces`,
/// `depth`, as the SSE stream's body; each subscription counts as a
/// stream), `subscription.unsubscribe` (`subscriptionId`), and the
/// commands of `/commands`. A message is held to the server's body
/// limit; the socket needs an API key of scope `run` once keys are set.
/// A `GET` that is not a WebSocket upgrade is a 422; an unknown thread a
/// 404.
pub(crate) async fn thread_websocket(
    State(app): State<Shared>,
    Path(thread): Path<String>,
    request: axum::extract::Request,
) -> Result<Response, ApiError> {
    use axum::http::header;
    threads::get_record(&app, &thread).await?;
    let has = |name: header::HeaderName, token: &str| {
        request
            .headers()
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|v| v.trim().eq_ignore_ascii_case(token))
    };
    if !has(header::UPGRADE, "websocket") || !has(header::CONNECTION, "upgrade") {
        return Err(ApiError::unprocessable(
            "upgrade",
            "GET /threads/{thread_id}/stream is the streaming protocol's WebSocket: send a \
             WebSocket upgrade, or open the thread's events with POST \
             /threads/{thread_id}/stream and send commands to POST /threads/{thread_id}/commands",
        ));
    }
    if request
        .headers()
        .get(header::SEC_WEBSOCKET_VERSION)
        .is_none_or(|v| v != "13")
    {
        return Err(ApiError::unprocessable(
            "sec-websocket-version",
            "this server speaks WebSocket version 13",
        ));
    }
    let Some(key) = request.headers().get(header::SEC_WEBSOCKET_KEY) else {
        return Err(ApiError::unprocessable(
            "sec-websocket-key",
            "a WebSocket upgrade must give its key",
        ));
    };
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    let upgrade = hyper::upgrade::on(request);
    // A message is held to the server's body limit.
    let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
        .max_message_size(Some(app.body_limit))
        .max_frame_size(Some(app.body_limit));
    tokio::spawn(async move {
        match upgrade.await {
            Ok(upgraded) => {
                let socket = tokio_tungstenite::WebSocketStream::from_raw_socket(
                    hyper_util::rt::TokioIo::new(upgraded),
                    tokio_tungstenite::tungstenite::protocol::Role::Server,
                    Some(config),
                )
                .await;
                websocket(app, thread, socket).await;
            }
            Err(e) => tracing::warn!(error = %e, "a WebSocket upgrade failed"),
        }
    });
    let mut response = StatusCode::SWITCHING_PROTOCOLS.into_response();
    let headers = response.headers_mut();
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    if let Ok(v) = HeaderValue::from_str(&accept) {
        headers.insert(header::SEC_WEBSOCKET_ACCEPT, v);
    }
    Ok(response)
}

/// The parameters of `subscription.unsubscribe`.
#[derive(Debug, Deserialize)]
struct Unsubscribe {
    #[serde(rename = "subscriptionId")]
    subscription_id: String,
}

/// A thread's WebSocket: commands in, responses and events out, until
/// the client closes it or the server stops.
async fn websocket<S>(app: Shared, thread: String, socket: tokio_tungstenite::WebSocketStream<S>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let (mut sink, mut incoming) = socket.split();
    let (out, mut outgoing) = tokio::sync::mpsc::channel::<Value>(1024);
    let writer = tokio::spawn(async move {
        while let Some(message) = outgoing.recv().await {
            if sink
                .send(Message::Text(message.to_string().into()))
                .await
                .is_err()
            {
                break;
            }
        }
        let _ = sink.close().await;
    });
    let mut subscriptions: std::collections::HashMap<String, tokio::task::JoinHandle<()>> =
        std::collections::HashMap::new();
    let mut stopping = app.stopping.subscribe();
    loop {
        let message = tokio::select! {
            m = incoming.next() => m,
            _ = stopping.wait_for(|s| *s) => None,
        };
        let text = match message {
            Some(Ok(Message::Text(text))) => text,
            Some(Ok(Message::Binary(_))) => {
                let refused = command_error(0, "invalid_argument", "send commands as text");
                if out.send(json!(refused)).await.is_err() {
                    break;
                }
                continue;
            }
            Some(Ok(Message::Close(_)) | Err(_)) | None => break,
            Some(Ok(_)) => continue,
        };
        let reply = match crate::app::parse::<Command>(text.as_bytes()) {
            Err(e) => {
                let id = serde_json::from_str::<Value>(&text)
                    .ok()
                    .and_then(|v| v["id"].as_u64());
                json!({"type": "error", "id": id, "error": "invalid_argument",
                       "message": e.to_string()})
            }
            Ok(command) if command.method == "subscription.subscribe" => {
                let id = command.id;
                let body = serde_json::from_value::<EventStream>(Value::Object(command.params))
                    .map_err(|e| ApiError::bad("params", e.to_string()));
                let followed = match body {
                    Ok(body) => follow(&app, &thread, body).await,
                    Err(e) => Err(e),
                };
                match followed {
                    Ok(follow) => {
                        let subscription = uuid::Uuid::new_v4().to_string();
                        let out = out.clone();
                        let task = tokio::spawn(async move {
                            let mut stream = std::pin::pin!(events(follow));
                            while let Some((_, event)) = stream.next().await {
                                if out.send(event).await.is_err() {
                                    break;
                                }
                            }
                        });
                        subscriptions.insert(subscription.clone(), task);
                        json!({"type": "success", "id": id,
                               "result": {"subscriptionId": subscription}})
                    }
                    Err(e) => command_error(id, code_of(&e), e.to_string()),
                }
            }
            Ok(command) if command.method == "subscription.unsubscribe" => {
                let id = command.id;
                match serde_json::from_value::<Unsubscribe>(Value::Object(command.params)) {
                    Ok(u) => match subscriptions.remove(&u.subscription_id) {
                        Some(task) => {
                            task.abort();
                            json!({"type": "success", "id": id, "result": {}})
                        }
                        None => command_error(
                            id,
                            "no_such_subscription",
                            format!("no subscription `{}` on this connection", u.subscription_id),
                        ),
                    },
                    Err(e) => command_error(id, "invalid_argument", e.to_string()),
                }
            }
            Ok(command) => answer(&app, &thread, command).await,
        };
        if out.send(reply).await.is_err() {
            break;
        }
    }
    for task in subscriptions.into_values() {
        task.abort();
    }
    drop(out);
    let _ = writer.await;
}
