//! Runs: created in the background, streamed, waited for, joined, cancelled,
//! listed. A run's input (or `command.update`) merges into the thread's
//! state; `command.resume` answers the thread's pending interrupt; a run
//! with `after_seconds` waits for its time.

use crate::app::{Body, Path, QueryPairs, Shared, check_id};
use crate::error::ApiError;
use crate::record::{Mode, RunRecord, RunStatus};
use crate::replica::{self, LaunchDoc, RunDoc, TakenOver};
use crate::served::{Drive, Pause, Recovered, Served};
use crate::stream::{self, Want};
use crate::threads::{self, CheckpointRef, Parent, ThreadRecord};
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use harness::session::{SessionPhase, now_millis};
use harness::{InterruptId, RunId};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::Duration;

/// A stream mode, or several.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

/// `command`: `resume` answers the thread's pending interrupt; `update`
/// merges into the state before the run continues (alone: from the loop's
/// start, as an input; with `resume`: as the interrupt is answered, so the
/// interrupted step runs again on the updated state). `goto` is refused.
#[derive(Debug, Deserialize)]
pub(crate) struct Command {
    resume: Option<Value>,
    update: Option<Value>,
    goto: Option<Value>,
}

/// The body of a run: what the SDK sends (`runs.create`, `runs.stream`,
/// `runs.wait`), or what an Agent Protocol client sends (`agent_id` for
/// `assistant_id`, `thread_id` in the body of a stateless path,
/// `messages`). Fields that change nothing here are read and left.
#[derive(Debug, Deserialize)]
pub(crate) struct RunCreate {
    /// Empty when not given: then `agent_id`, or the only agent.
    #[serde(default)]
    assistant_id: String,
    /// The Agent Protocol's name for `assistant_id`.
    agent_id: Option<String>,
    /// The Agent Protocol's thread of a run created at `/runs`.
    thread_id: Option<String>,
    /// The Agent Protocol's input messages: the state's `messages` field.
    messages: Option<Value>,
    input: Option<Value>,
    command: Option<Command>,
    stream_mode: Option<OneOrMany>,
    stream_subgraphs: Option<bool>,
    stream_resumable: Option<bool>,
    metadata: Option<Map<String, Value>>,
    config: Option<Map<String, Value>>,
    context: Option<Map<String, Value>>,
    checkpoint: Option<CheckpointRef>,
    checkpoint_id: Option<String>,
    interrupt_before: Option<Value>,
    interrupt_after: Option<Value>,
    multitask_strategy: Option<String>,
    if_not_exists: Option<String>,
    on_disconnect: Option<String>,
    on_completion: Option<String>,
    webhook: Option<String>,
    after_seconds: Option<f64>,
    durability: Option<String>,
    feedback_keys: Option<Value>,
    /// Honoured whatever it says: every step is committed before the next.
    #[serde(rename = "checkpoint_during")]
    _checkpoint_during: Option<bool>,
    strict_resume: Option<bool>,
    langsmith_tracer: Option<Value>,
    /// Fields this server does not know: refused unless they ask nothing
    /// (null, false, empty).
    #[serde(flatten)]
    other: Map<String, Value>,
}

/// Whether a value asks for nothing: null, false, or empty.
fn asks_nothing(v: &Value) -> bool {
    match v {
        Value::Null | Value::Bool(false) => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::String(s) => s.is_empty(),
        Value::Number(_) | Value::Bool(true) => false,
    }
}

/// Refuses, with a 422 naming it, every run option this server would not
/// honour (LangGraph's server honours them all; a client must not be left
/// believing it got what it asked for).
fn refuse_unhonoured(body: &RunCreate) -> Result<(), ApiError> {
    for (key, value) in body.config.iter().flatten() {
        if asks_nothing(value) {
            continue;
        }
        let why = match key.as_str() {
            "recursion_limit" => {
                "a run's step limit is its harness's (HarnessBuilder::step_limit): this server \
                 cannot set one per run"
            }
            "configurable" => {
                "a harness agent reads no configurable values: its steps read the state and \
                 the slots of their context, set in code"
            }
            "tags" | "metadata" | "run_name" | "callbacks" => {
                "this server does not trace runs to LangSmith; give run metadata as `metadata`"
            }
            _ => "this server knows no such run configuration",
        };
        return Err(ApiError::unprocessable(
            format!("config.{key}"),
            format!("`config.{key}` is not supported: {why}"),
        ));
    }
    if let Some(context) = &body.context
        && !context.is_empty()
    {
        return Err(ApiError::unprocessable(
            "context",
            "a run `context` is not supported: a harness agent's context is its slots, set in code",
        ));
    }
    if body.durability.as_deref() == Some("exit") {
        return Err(ApiError::unprocessable(
            "durability",
            "durability `exit` is not supported: this server commits every step before the \
             next one (`sync`, which also satisfies `async`)",
        ));
    }
    if body
        .feedback_keys
        .as_ref()
        .is_some_and(|f| !asks_nothing(f))
    {
        return Err(ApiError::unprocessable(
            "feedback_keys",
            "`feedback_keys` is not supported: this server keeps no LangSmith feedback",
        ));
    }
    if body
        .langsmith_tracer
        .as_ref()
        .is_some_and(|f| !asks_nothing(f))
    {
        return Err(ApiError::unprocessable(
            "langsmith_tracer",
            "`langsmith_tracer` is not supported: this server does not trace runs to LangSmith",
        ));
    }
    if body.strict_resume == Some(false) {
        return Err(ApiError::unprocessable(
            "strict_resume",
            "`strict_resume: false` is not supported: this server always refuses an answer to \
             an interrupt that is not waiting",
        ));
    }
    if let Some((key, _)) = body.other.iter().find(|(_, v)| !asks_nothing(v)) {
        return Err(ApiError::unprocessable(
            key.clone(),
            format!("`{key}` is not a run option this server knows"),
        ));
    }
    Ok(())
}

/// A run body, checked.
struct Plan {
    body: RunCreate,
    modes: Vec<Mode>,
    create_thread: bool,
    /// How long the run waits before it starts (`after_seconds`).
    delay: Option<Duration>,
    /// Its breakpoints (`interrupt_before`, `interrupt_after`).
    pause: Pause,
}

/// `interrupt_before` or `interrupt_after`: `"*"` (every step) or a list
/// of the agent's step names; `field` names it in errors.
fn read_steps(agent: &dyn Served, v: Option<Value>, field: &str) -> Result<Vec<String>, ApiError> {
    let names = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::String(s)) if s == "*" => return Ok(agent.steps().to_vec()),
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err(ApiError::unprocessable(
                field,
                format!("`{field}` is \"*\" (every step) or a list of step names; got {other}"),
            ));
        }
    };
    let mut steps = Vec::new();
    for (i, name) in names.into_iter().enumerate() {
        match name {
            Value::String(s) if agent.steps().contains(&s) => steps.push(s),
            other => {
                return Err(ApiError::unprocessable(
                    format!("{field}[{i}]"),
                    format!(
                        "{field}[{i}]: {other} is not a step of agent `{}` (its steps: {})",
                        agent.id(),
                        agent.steps().join(", ")
                    ),
                ));
            }
        }
    }
    Ok(steps)
}

/// The longest `after_seconds` taken: a year.
const MAX_DELAY_SECONDS: f64 = 366.0 * 24.0 * 3600.0;

/// `after_seconds` as a delay (`None` for none): a number of seconds from
/// 0 to a year.
fn read_delay(seconds: Option<f64>) -> Result<Option<Duration>, ApiError> {
    match seconds {
        None => Ok(None),
        Some(s) if !s.is_finite() || s < 0.0 => Err(ApiError::unprocessable(
            "after_seconds",
            format!("`after_seconds` must be a number of seconds, 0 or more; got {s}"),
        )),
        Some(s) if s > MAX_DELAY_SECONDS => Err(ApiError::unprocessable(
            "after_seconds",
            format!(
                "`after_seconds` {s} is beyond this server's longest delay, a year \
                 ({MAX_DELAY_SECONDS} s)"
            ),
        )),
        Some(0.0) => Ok(None),
        Some(s) => Ok(Some(Duration::from_secs_f64(s))),
    }
}

/// `command.update` as an object of state fields: an object as it is, or
/// LangGraph's other shape, a list of `[field, value]` pairs.
fn read_update(update: Value) -> Result<Value, ApiError> {
    match update {
        Value::Object(_) => Ok(update),
        Value::Array(pairs) => {
            let mut fields = Map::new();
            for (i, pair) in pairs.into_iter().enumerate() {
                match pair {
                    Value::Array(mut kv) if kv.len() == 2 && kv[0].is_string() => {
                        let value = kv.pop().unwrap_or(Value::Null);
                        let key = kv.pop().unwrap_or(Value::Null);
                        if let Value::String(key) = key {
                            fields.insert(key, value);
                        }
                    }
                    other => {
                        return Err(ApiError::unprocessable(
                            format!("command.update[{i}]"),
                            format!(
                                "an update given as a list holds `[field, value]` pairs; \
                                 entry {i} is {other}"
                            ),
                        ));
                    }
                }
            }
            Ok(Value::Object(fields))
        }
        other => Err(ApiError::unprocessable(
            "command.update",
            format!(
                "`command.update` must be an object of state fields (or a list of \
                 `[field, value]` pairs); got {other}"
            ),
        )),
    }
}

fn one_of(field: &str, value: Option<&str>, allowed: &[&str]) -> Result<(), ApiError> {
    match value {
        Some(v) if !allowed.contains(&v) => Err(ApiError::bad(
            field,
            format!("`{v}` is none of {}", allowed.join(", ")),
        )),
        _ => Ok(()),
    }
}

fn not_empty(v: &Option<Value>) -> bool {
    match v {
        None | Some(Value::Null) => false,
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::String(s)) => !s.is_empty(),
        Some(_) => true,
    }
}

/// Stream modes by name; `field` names them in errors.
pub(crate) fn read_modes(names: &[&str], field: &str) -> Result<Vec<Mode>, ApiError> {
    let mut modes = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let at = if names.len() == 1 {
            field.to_string()
        } else {
            format!("{field}[{i}]")
        };
        match Mode::parse(name) {
            Some(m) => modes.push(m),
            None => {
                return Err(ApiError::bad(
                    at,
                    format!(
                        "`{name}` is not a stream mode (the modes: {})",
                        Mode::NAMES.join(", ")
                    ),
                ));
            }
        }
    }
    Ok(modes)
}

impl RunCreate {
    /// Whether the body is in the Agent Protocol's shape (it names the
    /// agent as `agent_id`, or gives `thread_id` or `messages`): its
    /// answer is then in that shape too.
    pub(crate) fn is_agent_protocol(&self) -> bool {
        self.agent_id.is_some() || self.thread_id.is_some() || self.messages.is_some()
    }

    /// Whether the run is cancelled when the client that streams it or
    /// waits for it hangs up first (`on_disconnect`): by default, as the
    /// Agent Protocol says (`cancel`) for a body in its shape, as LangGraph
    /// does (`continue`) for the others.
    fn cancels_on_disconnect(&self) -> bool {
        match self.on_disconnect.as_deref() {
            Some(mode) => mode == "cancel",
            None => self.is_agent_protocol(),
        }
    }

    /// Settles the agent (`assistant_id`, else `agent_id`, else the only
    /// agent served) and moves `messages` into the input.
    fn resolve(&mut self, app: &Shared) -> Result<(), ApiError> {
        match (self.assistant_id.is_empty(), self.agent_id.take()) {
            (false, Some(agent)) if agent != self.assistant_id => {
                return Err(ApiError::unprocessable(
                    "agent_id",
                    format!(
                        "`agent_id` `{agent}` and `assistant_id` `{}` name different agents: \
                         give one",
                        self.assistant_id
                    ),
                ));
            }
            (true, Some(agent)) => {
                check_id("agent_id", &agent)?;
                self.assistant_id = agent;
            }
            (true, None) => match app.agents.keys().next() {
                Some(only) if app.agents.len() == 1 => self.assistant_id = only.clone(),
                _ => {
                    return Err(ApiError::bad(
                        "assistant_id",
                        format!(
                            "give the agent to run as `assistant_id` (or `agent_id`): one of {}",
                            app.agents.keys().cloned().collect::<Vec<_>>().join(", ")
                        ),
                    ));
                }
            },
            (false, _) => {}
        }
        if let Some(messages) = self.messages.take().filter(|m| !m.is_null()) {
            match &mut self.input {
                None | Some(Value::Null) => self.input = Some(json!({ "messages": messages })),
                Some(Value::Object(input)) if !input.contains_key("messages") => {
                    input.insert("messages".into(), messages);
                }
                Some(_) => {
                    return Err(ApiError::unprocessable(
                        "messages",
                        "give the messages either in `messages` or in `input.messages`, not both",
                    ));
                }
            }
        }
        Ok(())
    }

    /// The thread of a run posted to a path without one: the body's
    /// `thread_id` (the Agent Protocol's `/runs`), if any.
    fn thread_of(&mut self, path: Option<String>) -> Result<Option<String>, ApiError> {
        match (path, self.thread_id.take()) {
            (Some(p), Some(b)) if p != b => Err(ApiError::unprocessable(
                "thread_id",
                format!("the body's thread_id `{b}` is not the path's thread `{p}`"),
            )),
            (Some(p), _) => Ok(Some(p)),
            (None, b) => Ok(b),
        }
    }
}

impl Plan {
    fn check(app: &Shared, mut body: RunCreate, stateless: bool) -> Result<Plan, ApiError> {
        body.resolve(app)?;
        check_id("assistant_id", &body.assistant_id)?;
        app.agent(&body.assistant_id)
            .map_err(|_| ApiError::not_found("assistant", body.assistant_id.clone()))?;
        if not_empty(&body.input) && body.command.is_some() {
            return Err(ApiError::bad(
                "command",
                "give either `input` or `command`, not both",
            ));
        }
        if let Some(c) = &mut body.command {
            if let Some(update) = c.update.take().filter(|u| !u.is_null()) {
                let update = read_update(update)?;
                app.agent(&body.assistant_id)?
                    .check_input(&update, "command.update")?;
                c.update = Some(update);
            }
            if not_empty(&c.goto) {
                return Err(ApiError::unprocessable(
                    "command.goto",
                    "`command.goto` is not supported: a harness loop routes by its own signals",
                ));
            }
            if c.resume.is_none() && c.update.is_none() {
                return Err(ApiError::bad(
                    "command.resume",
                    "a command must give `resume` (the answer to the thread's pending \
                     interrupt) or `update` (state fields to merge before the run goes on)",
                ));
            }
        }
        if let Some(input) = &body.input
            && !input.is_null()
        {
            if !input.is_object() {
                return Err(ApiError::unprocessable(
                    "input",
                    "the input must be an object of state fields",
                ));
            }
            app.agent(&body.assistant_id)?.check_input(input, "input")?;
        }
        let agent = app.agent(&body.assistant_id)?;
        let pause = Pause {
            before: read_steps(&**agent, body.interrupt_before.take(), "interrupt_before")?,
            after: read_steps(&**agent, body.interrupt_after.take(), "interrupt_after")?,
        };
        one_of(
            "multitask_strategy",
            body.multitask_strategy.as_deref(),
            &["reject", "interrupt", "rollback", "enqueue"],
        )?;
        one_of(
            "if_not_exists",
            body.if_not_exists.as_deref(),
            &["reject", "create"],
        )?;
        one_of(
            "on_disconnect",
            body.on_disconnect.as_deref(),
            &["cancel", "continue"],
        )?;
        one_of(
            "on_completion",
            body.on_completion.as_deref(),
            &["delete", "keep"],
        )?;
        one_of(
            "durability",
            body.durability.as_deref(),
            &["sync", "async", "exit"],
        )?;
        refuse_unhonoured(&body)?;
        if let Some(url) = body.webhook.as_deref().filter(|w| !w.is_empty()) {
            match &app.webhooks {
                Some(hooks) => {
                    hooks.check(url)?;
                }
                None => {
                    return Err(ApiError::unprocessable(
                        "webhook",
                        "this server calls no webhooks: it was not given Server::webhooks(..)",
                    ));
                }
            }
        }
        let delay = read_delay(body.after_seconds)?;
        if let Some(id) = &body.checkpoint_id {
            check_id("checkpoint_id", id)?;
        }
        if body.command.as_ref().is_some_and(|c| c.resume.is_some())
            && (body.checkpoint_id.is_some()
                || body
                    .checkpoint
                    .as_ref()
                    .is_some_and(|c| c.checkpoint_id.is_some()))
        {
            return Err(ApiError::unprocessable(
                "checkpoint_id",
                "a resume answers the thread's pending interrupt: it cannot start from another checkpoint",
            ));
        }
        let names: Vec<&str> = match &body.stream_mode {
            None => vec!["values"],
            Some(OneOrMany::One(m)) => vec![m.as_str()],
            Some(OneOrMany::Many(ms)) => ms.iter().map(String::as_str).collect(),
        };
        let modes = read_modes(&names, "stream_mode")?;
        let create_thread = stateless || body.if_not_exists.as_deref() == Some("create");
        Ok(Plan {
            body,
            modes,
            create_thread,
            delay,
            pause,
        })
    }
}

/// Checks a run's body as `runs.create` does, starting nothing (a cron's,
/// for the runs of its ticks).
pub(crate) fn check_body(app: &Shared, body: RunCreate, stateless: bool) -> Result<(), ApiError> {
    Plan::check(app, body, stateless).map(|_| ())
}

/// The answer to give the pending interrupt `pending`: `resume` itself, or
/// its entry for `pending` when it maps interrupt ids to answers.
fn answer_for(resume: Value, pending: &InterruptId) -> Result<Value, ApiError> {
    if let Value::Object(map) = &resume
        && !map.is_empty()
        && map.keys().all(|k| uuid::Uuid::parse_str(k).is_ok())
    {
        return match map.get(pending.as_str()) {
            Some(answer) if map.len() == 1 => Ok(answer.clone()),
            Some(_) => Err(ApiError::unprocessable(
                "command.resume",
                format!(
                    "`command.resume` answers {} interrupts; the thread waits on one, {pending}",
                    map.len()
                ),
            )),
            None => Err(ApiError::conflict(format!(
                "`command.resume` answers interrupt {}, but the thread waits on {pending}",
                map.keys().next().map_or("", String::as_str)
            ))),
        };
    }
    Ok(resume)
}

/// What a new run does when its thread is busy (LangGraph's
/// `multitask_strategy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Strategy {
    /// Refused with a 409.
    Reject,
    /// Runs after the runs before it.
    Enqueue,
    /// Stops the runs before it (their progress stays), then runs.
    Interrupt,
    /// Stops the runs before it, takes the thread back to where it stood
    /// before them, forgets them, then runs.
    Rollback,
}

impl Strategy {
    fn read(name: Option<&str>) -> Strategy {
        match name {
            Some("enqueue") => Strategy::Enqueue,
            Some("interrupt") => Strategy::Interrupt,
            Some("rollback") => Strategy::Rollback,
            _ => Strategy::Reject,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Strategy::Reject => "reject",
            Strategy::Enqueue => "enqueue",
            Strategy::Interrupt => "interrupt",
            Strategy::Rollback => "rollback",
        }
    }
}

/// What a run does once its turn comes.
struct Launch {
    agent: Arc<dyn Served>,
    thread: String,
    input: Option<Value>,
    resume: Option<Value>,
    checkpoint: Option<(String, &'static str)>,
    tokens: bool,
    pause: Pause,
}

impl Launch {
    /// As a replica's record keeps it.
    fn to_doc(&self) -> LaunchDoc {
        LaunchDoc {
            input: self.input.clone(),
            resume: self.resume.clone(),
            checkpoint: self
                .checkpoint
                .as_ref()
                .map(|(c, field)| (c.clone(), (*field).to_string())),
            tokens: self.tokens,
            pause: self.pause.clone(),
        }
    }

    /// As a replica's record kept it.
    fn from_doc(app: &Shared, doc: &RunDoc) -> Result<Launch, ApiError> {
        let launch = &doc.launch;
        Ok(Launch {
            agent: Arc::clone(app.agent(&doc.assistant_id)?),
            thread: doc.thread_id.clone(),
            input: launch.input.clone(),
            resume: launch.resume.clone(),
            checkpoint: launch.checkpoint.as_ref().map(|(c, field)| {
                let field = if field == "checkpoint.checkpoint_id" {
                    "checkpoint.checkpoint_id"
                } else {
                    "checkpoint_id"
                };
                (c.clone(), field)
            }),
            tokens: launch.tokens,
            pause: launch.pause.clone(),
        })
    }
}

/// Starts a run on `thread_id` (a new thread for a stateless run, when
/// `None`): checks the body, takes its place among the thread's runs per
/// its multitask strategy, and starts it in this process — at once when the
/// thread is free (a refusal is then the response's error), or once the
/// runs before it have settled (a refusal is then the run's error).
pub(crate) async fn start(
    app: &Shared,
    thread_id: Option<String>,
    mut body: RunCreate,
) -> Result<Arc<RunRecord>, ApiError> {
    let thread_id = body.thread_of(thread_id)?;
    if let Some(id) = &thread_id {
        check_id("thread_id", id)?;
    }
    let plan = Plan::check(app, body, thread_id.is_none())?;
    let agent = Arc::clone(app.agent(&plan.body.assistant_id)?);
    let (record, created) = match &thread_id {
        Some(id) => match threads::find(app, id).await? {
            Some(r) => (r, false),
            None if plan.create_thread => (
                threads::create_record(app, Some(id.clone()), Map::new()).await?,
                true,
            ),
            None => return Err(ApiError::not_found("thread", id.clone())),
        },
        None => (threads::create_record(app, None, Map::new()).await?, true),
    };
    let started = start_on(app, &record, thread_id.is_none(), plan, agent).await;
    if started.is_err() && created {
        // A refused run leaves no thread of its own behind.
        threads::discard(app, record).await;
    }
    started
}

/// [`start`] on thread `record`, found or made.
async fn start_on(
    app: &Shared,
    record: &ThreadRecord,
    stateless: bool,
    plan: Plan,
    agent: Arc<dyn Served>,
) -> Result<Arc<RunRecord>, ApiError> {
    let thread = record.thread_id.clone();
    check_assistant(app, record, &*agent).await?;
    let body = plan.body;
    let strategy = Strategy::read(body.multitask_strategy.as_deref());
    let kwargs = json!({
        "input": body.input,
        "command": body.command.as_ref().map(|c| json!({"resume": c.resume, "update": c.update})),
        "config": body.config,
        "context": body.context,
    });
    let mut metadata = body.metadata.clone().unwrap_or_default();
    metadata
        .entry("assistant_id")
        .or_insert_with(|| json!(agent.id()));
    let run = RunRecord::new(
        RunId::random().to_string(),
        thread.clone(),
        agent.id().to_string(),
        Value::Object(metadata),
        kwargs,
        strategy.name(),
        plan.modes.clone(),
    );
    let checkpoint = body
        .checkpoint
        .as_ref()
        .and_then(|c| c.checkpoint_id.clone())
        .map(|c| (c, "checkpoint.checkpoint_id"))
        .or_else(|| body.checkpoint_id.clone().map(|c| (c, "checkpoint_id")));
    let body_webhook = body.webhook.clone().filter(|w| !w.is_empty());
    let on_completion = body.on_completion.clone();
    // An update alone merges into the state as an input does; with a
    // resume, it merges as the interrupt is answered.
    let (input, resume) = match body.command {
        Some(Command { resume, update, .. }) => (update, resume),
        None => (body.input, None),
    };
    let delay = plan.delay;
    let launch = Launch {
        agent,
        thread: thread.clone(),
        input,
        resume,
        checkpoint,
        tokens: Mode::wants_tokens(&plan.modes),
        pause: plan.pause,
    };
    let delete_thread = stateless && on_completion.as_deref() != Some("keep");
    let webhook = match (&app.webhooks, body_webhook) {
        (Some(hooks), Some(url)) => Some((hooks.clone(), hooks.check(&url)?)),
        _ => None,
    };
    let (before, slot) = if app.replica.is_some() {
        // Replicas: the run's record first, then its admission among the
        // thread's runs, which the store decides.
        let not_before = delay
            .map(|d| now_millis().saturating_add(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)));
        let doc = RunDoc::new(
            &run,
            launch.to_doc(),
            not_before,
            webhook.as_ref().map(|(_, url)| url.to_string()),
            delete_thread,
        );
        let keeper = replica::create(app, &run, doc).await?;
        let admitted =
            replica::admit(app, &thread, &run.run_id, strategy == Strategy::Reject).await;
        let ids = match admitted {
            Ok(ids) => ids,
            Err(e) => {
                keeper.refused(app).await;
                return Err(e);
            }
        };
        // Admitted: a failure from here on takes the run out again, so that
        // no replica starts a run whose client was told it failed.
        let placed = async {
            keeper.set_before(app, ids.clone()).await?;
            let mut before = Vec::new();
            for id in &ids {
                if let Some(r) = find_any(app, Some(&thread), id).await? {
                    before.push(r);
                }
            }
            Ok::<_, ApiError>(before)
        };
        let placed = async {
            let before = placed.await?;
            let slot = waits(app, &before, delay)?;
            Ok::<_, ApiError>((before, slot))
        };
        let (before, slot) = match placed.await {
            Ok(placed) => placed,
            Err(e) => {
                keeper.refused(app).await;
                let _ = replica::unlist(app, &thread, std::slice::from_ref(&run.run_id)).await;
                return Err(e);
            }
        };
        if matches!(strategy, Strategy::Interrupt | Strategy::Rollback) {
            for r in &before {
                r.cancel();
            }
        }
        app.runs().add(Arc::clone(&run));
        replica::keep(app, keeper);
        (before, slot)
    } else {
        // The check and the claim under one lock.
        let mut runs = app.runs();
        let before = runs.unsettled(&thread);
        if let Some(active) = before.last()
            && strategy == Strategy::Reject
        {
            return Err(ApiError::conflict(format!(
                "thread {thread} is busy with run {}: wait for it, join it or cancel it, or give \
                 another multitask_strategy (enqueue, interrupt, rollback)",
                active.run_id
            )));
        }
        let slot = waits(app, &before, delay)?;
        if matches!(strategy, Strategy::Interrupt | Strategy::Rollback) {
            for r in &before {
                r.cancel();
            }
        }
        runs.add(Arc::clone(&run));
        (before, slot)
    };
    app.runs_added.send_modify(|n| *n = n.wrapping_add(1));
    if before.is_empty() && delay.is_none() {
        if let Err(e) = launch_run(app, &run, launch).await {
            if app.replica.is_some() {
                run.fail("RunRefused", e.to_string());
                let _ = replica::unlist(app, &thread, std::slice::from_ref(&run.run_id)).await;
            }
            forget(app, &thread, &[Arc::clone(&run)]);
            return Err(e);
        }
        after_settled(app, &run, webhook, delete_thread);
        return Ok(run);
    }
    after_settled(app, &run, webhook, delete_thread);
    tokio::spawn(proceed(
        Arc::clone(app),
        Arc::clone(&run),
        before,
        strategy,
        delay,
        launch,
        slot,
    ));
    Ok(run)
}

/// A slot among the server's waiting runs for a run that waits (for the
/// runs `before` it, or for its delay); `None` for one that starts at once.
fn waits(
    app: &Shared,
    before: &[Arc<RunRecord>],
    delay: Option<Duration>,
) -> Result<Option<crate::limits::WaitSlot>, ApiError> {
    if before.is_empty() && delay.is_none() {
        return Ok(None);
    }
    app.waiting.take().map(Some)
}

/// Starts `run` once its time has come and the runs before it have
/// settled (unless it is cancelled meanwhile); a rollback first takes the
/// thread back to where it stood before them. `_slot` (of a run a client
/// made) counts it among the server's waiting runs until then.
async fn proceed(
    app: Shared,
    run: Arc<RunRecord>,
    before: Vec<Arc<RunRecord>>,
    strategy: Strategy,
    delay: Option<Duration>,
    launch: Launch,
    _slot: Option<crate::limits::WaitSlot>,
) {
    let thread = launch.thread.clone();
    // A delayed run stays pending until its time (or its cancel).
    if let Some(delay) = delay
        && !run.wait_unless_cancelled(delay).await
    {
        run.cancelled_before_start();
        return;
    }
    for r in &before {
        if !run.wait_for_unless_cancelled(r).await {
            break;
        }
    }
    if run.was_cancelled() {
        run.cancelled_before_start();
        return;
    }
    // Handed to another replica (this one is stopping): it starts it there.
    if run.is_handing_over() {
        return;
    }
    if strategy == Strategy::Rollback
        && let Err(e) = roll_back(&app, &thread, &before).await
    {
        run.fail("RollbackFailed", e.to_string());
        return;
    }
    if let Err(e) = launch_run(&app, &run, launch).await {
        run.fail("RunRefused", e.to_string());
    }
}

/// Goes on with a run this replica took over from one that stopped
/// renewing it: starts it if it had not started, continues its session if
/// it had.
pub(crate) async fn go_on(app: Shared, taken: TakenOver) {
    let (run, doc) = match &taken {
        TakenOver::Start(run, doc) | TakenOver::Continue(run, doc) => {
            (Arc::clone(run), doc.clone())
        }
    };
    let webhook = match (&app.webhooks, &doc.webhook) {
        (Some(hooks), Some(url)) => hooks.check(url).ok().map(|u| (hooks.clone(), u)),
        _ => None,
    };
    after_settled(&app, &run, webhook, doc.delete_thread);
    let launch = match Launch::from_doc(&app, &doc) {
        Ok(l) => l,
        Err(e) => {
            run.fail("RunRefused", e.to_string());
            return;
        }
    };
    if matches!(taken, TakenOver::Start(..)) || !started(&run, &launch).await {
        let mut before = Vec::new();
        for id in &doc.before {
            match find_any(&app, Some(&doc.thread_id), id).await {
                Ok(Some(r)) => before.push(r),
                Ok(None) => {}
                Err(e) => {
                    run.fail("RunRefused", e.to_string());
                    return;
                }
            }
        }
        let delay = doc
            .not_before
            .map(|t| Duration::from_millis(t.saturating_sub(now_millis())));
        let strategy = Strategy::read(Some(&doc.multitask_strategy));
        proceed(app, run, before, strategy, delay, launch, None).await;
        return;
    }
    if let Err(e) = continue_taken(&app, &run, &launch).await {
        run.fail("RunError", e.to_string());
    }
}

/// Whether the run a replica died running had started its session: the
/// session moved on from where it was when the run was launched.
async fn started(run: &RunRecord, launch: &Launch) -> bool {
    let Some((session, seq)) = run.launched() else {
        return false;
    };
    match launch.agent.head(&harness::SessionId::from(session)).await {
        Ok(Some(head)) => head.phase == SessionPhase::Running || Some(head.last_seq) != seq,
        _ => false,
    }
}

/// Continues the session of a run taken over mid-way: from its last
/// checkpoint while it was running (its lease lapses first, if its replica
/// held it), or settles the run from it if it had ended.
async fn continue_taken(
    app: &Shared,
    run: &Arc<RunRecord>,
    launch: &Launch,
) -> Result<(), ApiError> {
    let Some((session, _)) = run.launched() else {
        return Ok(());
    };
    let session = harness::SessionId::from(session);
    let mut stopping = app.stopping.subscribe();
    loop {
        if run.was_cancelled() {
            return launch
                .agent
                .settle_from(&session, Arc::clone(run), true)
                .await;
        }
        match launch
            .agent
            .recover(
                session.clone(),
                Drive {
                    record: Arc::clone(run),
                    tokens: launch.tokens,
                    pause: &launch.pause,
                },
            )
            .await?
        {
            Recovered::Running => return Ok(()),
            // The dead replica's lease on the session has not lapsed yet.
            Recovered::InFlight => {}
            // The run ended before its replica recorded it.
            Recovered::Ended => {
                return launch
                    .agent
                    .settle_from(&session, Arc::clone(run), false)
                    .await;
            }
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(250)) => {}
            _ = stopping.wait_for(|s| *s) => return Ok(()),
        }
    }
}

/// A run of the thread from any replica: this one's, else (with replicas)
/// the store's.
async fn find_any(
    app: &Shared,
    thread: Option<&str>,
    run: &str,
) -> Result<Option<Arc<RunRecord>>, ApiError> {
    let local = match thread {
        Some(t) => app.runs().find(t, run),
        None => app.runs().find_by_id(run),
    };
    if local.is_some() || app.replica.is_none() {
        return Ok(local);
    }
    replica::find(app, thread, run).await
}

/// What follows a started run once it settles: its webhook call, and for
/// a stateless run (unless `on_completion: keep`) the deletion of its
/// thread.
fn after_settled(
    app: &Shared,
    run: &Arc<RunRecord>,
    webhook: Option<(crate::webhook::Webhooks, reqwest::Url)>,
    delete_thread: bool,
) {
    if let Some((hooks, url)) = webhook {
        hooks.deliver_when_settled(url, Arc::clone(run));
    }
    if delete_thread {
        let app = Arc::clone(app);
        let run = Arc::clone(run);
        tokio::spawn(async move {
            run.settled().await;
            if let Ok(mut record) = threads::get_record(&app, &run.thread_id).await {
                record.deleted = true;
                record.updated_at = now_millis();
                if let Err(e) = threads::save(&app, &record).await {
                    tracing::warn!(thread = %run.thread_id, error = %e, "cannot delete a stateless run's thread");
                }
            }
        });
    }
}

/// What becomes of the run a client's request starts if the request's
/// future is dropped (its client hung up) before [`HangUp::disarm`]: with
/// `cancel` (`on_disconnect: cancel`), the run is cancelled, at once if it
/// has started, else as soon as it has.
pub(crate) struct HangUp {
    cancel: bool,
    state: Arc<std::sync::Mutex<HangUpState>>,
}

#[derive(Default)]
struct HangUpState {
    /// The run, once started.
    run: Option<Arc<RunRecord>>,
    /// The request was dropped.
    gone: bool,
    disarmed: bool,
}

fn lock(state: &std::sync::Mutex<HangUpState>) -> std::sync::MutexGuard<'_, HangUpState> {
    state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl HangUp {
    /// The request goes on: the run is not cancelled by the guard's drop.
    pub(crate) fn disarm(self) {
        lock(&self.state).disarmed = true;
    }
}

impl Drop for HangUp {
    fn drop(&mut self) {
        let mut state = lock(&self.state);
        if state.disarmed || !self.cancel {
            return;
        }
        state.gone = true;
        if let Some(run) = state.run.take() {
            run.cancel();
        }
    }
}

/// [`start`] for a client's request, in a task of its own: a client that
/// hangs up while its run is being started (which drops the request's
/// future) leaves no run half-started, and with `cancel` the run is
/// cancelled once started; the guard returned cancels it if the request
/// is dropped later, until disarmed.
async fn start_for_client(
    app: &Shared,
    thread: Option<String>,
    body: RunCreate,
    cancel: bool,
) -> Result<(Arc<RunRecord>, HangUp), ApiError> {
    let hang_up = HangUp {
        cancel,
        state: Arc::default(),
    };
    let state = Arc::clone(&hang_up.state);
    let app = Arc::clone(app);
    let started = tokio::spawn(async move {
        let run = start(&app, thread, body).await?;
        let mut state = lock(&state);
        if state.gone {
            run.cancel();
        } else {
            state.run = Some(Arc::clone(&run));
        }
        Ok::<_, ApiError>(run)
    });
    let run = started
        .await
        .map_err(|e| ApiError::Internal(format!("the run's start failed: {e}")))??;
    Ok((run, hang_up))
}

/// Starts the run of a cron's tick (on a new thread when `thread` is
/// `None`).
pub(crate) async fn start_for_cron(
    app: &Shared,
    thread: Option<String>,
    body: RunCreate,
) -> Result<(), ApiError> {
    start(app, thread, body).await.map(|_| ())
}

/// A thread whose session is another agent's cannot run this one.
async fn check_assistant(
    app: &Shared,
    record: &ThreadRecord,
    agent: &dyn Served,
) -> Result<(), ApiError> {
    if let Some((head, _)) = threads::head_of(app, record).await?
        && head.agent_id != agent.id()
    {
        return Err(ApiError::conflict(format!(
            "thread {} runs assistant `{}`, not `{}`",
            record.thread_id,
            head.agent_id,
            agent.id()
        )));
    }
    Ok(())
}

/// Removes `runs` from the thread's runs.
fn forget(app: &Shared, thread: &str, runs: &[Arc<RunRecord>]) {
    if let Some(list) = app.runs().by_thread.get_mut(thread) {
        list.retain(|r| !runs.iter().any(|g| Arc::ptr_eq(r, g)));
    }
}

/// Takes the thread back to where it stood before the first of `runs`
/// started (a fork there; a thread that had no state gets a fresh session),
/// and forgets them.
async fn roll_back(app: &Shared, thread: &str, runs: &[Arc<RunRecord>]) -> Result<(), ApiError> {
    let point = runs.iter().find_map(|r| r.start_point());
    if let Some(point) = point {
        let mut record = threads::get_record(app, thread).await?;
        match point {
            Some((session, index)) => {
                let Some((_, agent)) = threads::head_of(app, &record).await? else {
                    return Err(ApiError::Internal(format!(
                        "thread {thread} lost its session during the rollback"
                    )));
                };
                let session = harness::SessionId::from(session);
                let fork = agent.fork(&session, index, None, "").await?;
                threads::mark_fork(app, thread, &fork).await?;
                // The rolled-back steps leave the history: the fork's
                // parent is the session up to where the run started.
                let current = record.session.clone();
                record.parents.retain(|p| p.session != current);
                record.abandoned.retain(|p| p.session != current);
                record.parents.insert(
                    0,
                    Parent {
                        session: session.to_string(),
                        index,
                        fork: Some(fork.to_string()),
                    },
                );
                record.session = fork.to_string();
            }
            None => {
                record.session = uuid::Uuid::new_v4().to_string();
                threads::mark_fork(app, thread, &record.session_id()).await?;
                record.parents.clear();
                record.abandoned.clear();
            }
        }
        record.updated_at = now_millis();
        threads::save(app, &record).await?;
    }
    if app.replica.is_some() {
        let ids: Vec<String> = runs.iter().map(|r| r.run_id.clone()).collect();
        replica::unlist(app, thread, &ids).await?;
    }
    forget(app, thread, runs);
    Ok(())
}

/// Starts `run` on its thread as it stands now: answers its pending
/// interrupt, or merges the input (after forking at the checkpoint, if one
/// is given).
async fn launch_run(app: &Shared, run: &Arc<RunRecord>, launch: Launch) -> Result<(), ApiError> {
    let Launch {
        agent,
        thread,
        input,
        mut resume,
        checkpoint,
        tokens,
        pause,
    } = launch;
    let mut record = threads::get_record(app, &thread).await?;
    check_assistant(app, &record, &*agent).await?;
    let head = threads::head_of(app, &record).await?.map(|(h, _)| h);
    // A thread paused at a breakpoint goes on from it (as LangGraph's run
    // after `interrupt_before`/`after` does), the run's input merged first.
    if resume.is_none()
        && checkpoint.is_none()
        && let Some(SessionPhase::Interrupted { interrupt }) = head.as_ref().map(|h| &h.phase)
        && interrupt.breakpoint.is_some()
    {
        resume = Some(Value::Null);
    }
    if let Some(resume) = resume {
        let Some(head) = &head else {
            return Err(ApiError::conflict(format!(
                "thread {thread} has no interrupt waiting for an answer: it has not run yet"
            )));
        };
        let SessionPhase::Interrupted { interrupt } = &head.phase else {
            return Err(ApiError::conflict(format!(
                "thread {thread} has no interrupt waiting for an answer; `command.resume` \
                 answers one"
            )));
        };
        let answer = answer_for(resume, &interrupt.id)?;
        run.set_start_point(Some((record.session.clone(), head.steps)));
        write_ahead(app, run, &record.session, Some(head.last_seq)).await?;
        agent
            .resume(
                record.session_id(),
                (interrupt.id.clone(), answer),
                input,
                Drive {
                    record: Arc::clone(run),
                    tokens,
                    pause: &pause,
                },
            )
            .await?;
    } else {
        let mut steps = head.as_ref().map(|h| h.steps);
        let mut fork_at = None;
        if let Some((c, field)) = checkpoint {
            // A run from an earlier checkpoint forks the thread there.
            let (session, index) = threads::read_checkpoint(&record, &c, field)?;
            fork_at = Some((session, index, field));
        } else if let Some(h) = head.as_ref().filter(|h| unfinished(app, h)) {
            // The thread's last run stopped mid-way (its process died) and
            // its lease has ended. Without an input the run continues it
            // from its last checkpoint, as LangGraph goes on with a
            // thread's pending tasks on a `None` input; with one, the
            // unfinished rest is left (LangGraph discards a checkpoint's
            // pending tasks on a new input) and the run starts from the
            // last checkpoint, the input merged.
            if input.as_ref().is_none_or(Value::is_null) {
                run.set_start_point(Some((record.session.clone(), h.steps)));
                write_ahead(app, run, &record.session, Some(h.last_seq)).await?;
                let drive = Drive {
                    record: Arc::clone(run),
                    tokens,
                    pause: &pause,
                };
                return match agent.recover(record.session_id(), drive).await? {
                    Recovered::Running => Ok(()),
                    Recovered::InFlight => Err(ApiError::conflict(format!(
                        "thread {thread} is being run by another process: try again when its \
                         run settles"
                    ))),
                    // Its last step had been checkpointed: the end is now
                    // recorded, and the run settles with it.
                    Recovered::Ended => {
                        agent
                            .settle_from(&record.session_id(), Arc::clone(run), false)
                            .await
                    }
                };
            }
            fork_at = Some((record.session_id(), h.steps, ""));
        }
        if let Some((session, index, field)) = fork_at {
            let fork = agent.fork(&session, index, None, field).await?;
            threads::mark_fork(app, &thread, &fork).await?;
            record.move_to(&session, index, &fork, steps.unwrap_or(0));
            threads::save(app, &record).await?;
            steps = agent.head(&fork).await?.map(|h| h.steps);
        }
        run.set_start_point(steps.map(|s| (record.session.clone(), s)));
        let seq = agent.head(&record.session_id()).await?.map(|h| h.last_seq);
        write_ahead(app, run, &record.session, seq).await?;
        agent
            .start(
                record.session_id(),
                input,
                Drive {
                    record: Arc::clone(run),
                    tokens,
                    pause: &pause,
                },
            )
            .await?;
    }
    Ok(())
}

/// Whether `head` is a session whose run stopped mid-way (its process
/// died) and whose lease has ended: no run holds it, none will finish it.
fn unfinished(app: &Shared, head: &harness::session::StoredRun) -> bool {
    head.phase == SessionPhase::Running
        && !head
            .lease
            .as_ref()
            .is_some_and(|l| l.is_live(app.store.now()))
}

/// With replicas: records in the store that the run is about to start
/// its session (at checkpoint `seq`) before it does, so that a replica
/// taking it over can tell whether it did.
async fn write_ahead(
    app: &Shared,
    run: &RunRecord,
    session: &str,
    seq: Option<u64>,
) -> Result<(), ApiError> {
    run.set_launched(session.to_string(), seq);
    match replica::keeper(app, &run.run_id) {
        Some(keeper) => keeper.sync(app, true).await,
        None => Ok(()),
    }
}

fn location(run: &RunRecord) -> String {
    format!("/threads/{}/runs/{}", run.thread_id, run.run_id)
}

fn with_location(mut response: Response, run: &RunRecord) -> Response {
    if let Ok(v) = HeaderValue::from_str(&location(run)) {
        response.headers_mut().insert(header::CONTENT_LOCATION, v);
    }
    response
}

fn want_of(body_modes: Vec<Mode>, subgraphs: bool, cancel: bool) -> Want {
    Want {
        modes: body_modes,
        subgraphs,
        after: None,
        cancel_on_disconnect: cancel,
    }
}

async fn stream_run(
    app: Shared,
    thread: Option<String>,
    body: RunCreate,
) -> Result<Response, ApiError> {
    let names: Vec<String> = match &body.stream_mode {
        None => vec!["values".into()],
        Some(OneOrMany::One(m)) => vec![m.clone()],
        Some(OneOrMany::Many(ms)) => ms.clone(),
    };
    let modes = read_modes(
        &names.iter().map(String::as_str).collect::<Vec<_>>(),
        "stream_mode",
    )?;
    let subgraphs = body.stream_subgraphs.unwrap_or(false);
    let cancel = body.cancels_on_disconnect();
    let resumable = body.stream_resumable.unwrap_or(false);
    // Before the run starts: a stream refused starts nothing.
    let slot = app.streams.open()?;
    let (run, hang_up) = start_for_client(&app, thread, body, cancel).await?;
    // From here on the stream cancels the run if its client goes away.
    hang_up.disarm();
    let loc = location(&run);
    let mut response = stream::response(
        run,
        want_of(modes, subgraphs, cancel),
        &loc,
        app.stopping.subscribe(),
        slot,
    );
    // A resumable stream says where to reconnect: the SDK comes back there
    // with the last event id it got.
    if resumable && let Ok(v) = HeaderValue::from_str(&format!("{loc}/stream")) {
        response.headers_mut().insert(header::LOCATION, v);
    }
    Ok(response)
}

pub(crate) async fn stream_on_thread(
    State(app): State<Shared>,
    Path(thread): Path<String>,
    Body(body): Body<RunCreate>,
) -> Result<Response, ApiError> {
    stream_run(app, Some(thread), body).await
}

pub(crate) async fn stream_stateless(
    State(app): State<Shared>,
    Body(body): Body<RunCreate>,
) -> Result<Response, ApiError> {
    stream_run(app, None, body).await
}

async fn create_run(
    app: Shared,
    thread: Option<String>,
    body: RunCreate,
) -> Result<Response, ApiError> {
    let shaped = body.is_agent_protocol();
    let (run, hang_up) = start_for_client(&app, thread, body, false).await?;
    hang_up.disarm();
    let json = if shaped {
        crate::protocol::run_json(&run)
    } else {
        run.to_json()
    };
    Ok(with_location(Json(json).into_response(), &run))
}

pub(crate) async fn create_on_thread(
    State(app): State<Shared>,
    Path(thread): Path<String>,
    Body(body): Body<RunCreate>,
) -> Result<Response, ApiError> {
    create_run(app, Some(thread), body).await
}

pub(crate) async fn create_stateless(
    State(app): State<Shared>,
    Body(body): Body<RunCreate>,
) -> Result<Response, ApiError> {
    create_run(app, None, body).await
}

async fn wait_run(
    app: Shared,
    thread: Option<String>,
    body: RunCreate,
) -> Result<Response, ApiError> {
    let shaped = body.is_agent_protocol();
    let cancel = body.cancels_on_disconnect();
    // A client that hangs up before the run settles drops this future:
    // with `on_disconnect: cancel`, the run is cancelled then, as a
    // stream's is.
    let (run, hang_up) = start_for_client(&app, thread, body, cancel).await?;
    let result = replica::settled(&app, &run).await;
    hang_up.disarm();
    let result = result?;
    // An answer the interrupted step cannot read is the client's mistake:
    // the run failed, the interrupt still waits.
    if let Some((kind, message)) = &result.error
        && kind == "AnswerRejected"
    {
        let error = ApiError::unprocessable("command.resume", message.clone());
        return Ok(with_location(error.into_response(), &run));
    }
    let json = if shaped {
        crate::protocol::wait_json(&run, &result)
    } else {
        result.output()
    };
    Ok(with_location(Json(json).into_response(), &run))
}

pub(crate) async fn wait_on_thread(
    State(app): State<Shared>,
    Path(thread): Path<String>,
    Body(body): Body<RunCreate>,
) -> Result<Response, ApiError> {
    wait_run(app, Some(thread), body).await
}

pub(crate) async fn wait_stateless(
    State(app): State<Shared>,
    Body(body): Body<RunCreate>,
) -> Result<Response, ApiError> {
    wait_run(app, None, body).await
}

/// A run of a thread, or a 404 naming what is missing.
pub(crate) async fn find_run(
    app: &Shared,
    thread: &str,
    run: &str,
) -> Result<Arc<RunRecord>, ApiError> {
    if let Some(found) = find_any(app, Some(thread), run).await? {
        return Ok(found);
    }
    if threads::find(app, thread).await?.is_none() {
        return Err(ApiError::not_found("thread", thread));
    }
    Err(ApiError::not_found("run", run))
}

pub(crate) async fn list(
    State(app): State<Shared>,
    Path(thread): Path<String>,
    query: QueryPairs,
) -> Result<Json<Vec<Value>>, ApiError> {
    threads::get_record(&app, &thread).await?;
    let limit = query.count("limit", 10, 1000)?;
    let offset = query.count("offset", 0, usize::MAX)?;
    let status = query.get("status");
    if let Some(s) = status
        && !RunStatus::NAMES.contains(&s)
    {
        return Err(ApiError::bad(
            "status",
            format!("`{s}` is none of {}", RunStatus::NAMES.join(", ")),
        ));
    }
    let all: Vec<Value> = if app.replica.is_some() {
        replica::list_json(&app, &thread).await?
    } else {
        let runs = app
            .runs()
            .by_thread
            .get(&thread)
            .cloned()
            .unwrap_or_default();
        runs.iter().rev().map(|r| r.to_json()).collect()
    };
    Ok(Json(
        all.into_iter()
            .filter(|r| status.is_none_or(|s| r["status"] == s))
            .skip(offset)
            .take(limit)
            .collect(),
    ))
}

pub(crate) async fn get(
    State(app): State<Shared>,
    Path((thread, run)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    // With replicas, a run of another replica is read from the store
    // (without following it).
    let local = app.runs().find(&thread, &run).filter(|r| !r.is_mirror());
    if local.is_none()
        && app.replica.is_some()
        && let Some(json) = replica::run_json(&app, Some(&thread), &run).await?
    {
        return Ok(Json(json));
    }
    Ok(Json(find_run(&app, &thread, &run).await?.to_json()))
}

pub(crate) async fn join(
    State(app): State<Shared>,
    Path((thread, run)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let run = find_run(&app, &thread, &run).await?;
    Ok(Json(replica::settled(&app, &run).await?.output()))
}

/// `join_stream`: the run's events from `Last-Event-ID` on (from the start
/// without it), in the modes asked (all the run's, by default).
pub(crate) async fn join_stream(
    State(app): State<Shared>,
    Path((thread, run)): Path<(String, String)>,
    headers: HeaderMap,
    query: QueryPairs,
) -> Result<Response, ApiError> {
    let run = find_run(&app, &thread, &run).await?;
    let names = query.all("stream_mode");
    let modes = if names.is_empty() {
        // The modes the run was created with: what a client reconnecting
        // to its stream (the SDK, after `stream_resumable`) asked for.
        run.modes.clone()
    } else {
        read_modes(&names, "stream_mode")?
    };
    let after = match headers.get("last-event-id") {
        None => None,
        Some(v) => {
            let text = v.to_str().map_err(|_| {
                ApiError::bad(
                    "Last-Event-ID",
                    "the header is not text (visible ASCII): an event id of this server is a \
                     whole number",
                )
            })?;
            if text.is_empty() {
                None
            } else {
                Some(text.parse::<u64>().map_err(|_| {
                    ApiError::bad(
                        "Last-Event-ID",
                        format!("`{text}` is not an event id of this server (a whole number)"),
                    )
                })?)
            }
        }
    };
    let want = Want {
        modes,
        subgraphs: true,
        after,
        cancel_on_disconnect: query.flag("cancel_on_disconnect", false)?,
    };
    let slot = app.streams.open()?;
    let loc = location(&run);
    Ok(stream::response(
        run,
        want,
        &loc,
        app.stopping.subscribe(),
        slot,
    ))
}

pub(crate) async fn cancel(
    State(app): State<Shared>,
    Path((thread, run)): Path<(String, String)>,
    query: QueryPairs,
) -> Result<Response, ApiError> {
    let run = find_run(&app, &thread, &run).await?;
    let wait = query.flag("wait", false)?;
    match query.get("action") {
        None | Some("interrupt") => {}
        Some("rollback") => {
            return Err(ApiError::unprocessable(
                "action",
                "cancel action `rollback` is not supported by this server yet: use `interrupt`",
            ));
        }
        Some(other) => {
            return Err(ApiError::bad(
                "action",
                format!("`{other}` is neither `interrupt` nor `rollback`"),
            ));
        }
    }
    if !run.cancel() {
        return Err(ApiError::conflict(format!(
            "run {} has already settled ({})",
            run.run_id,
            run.status().as_str()
        )));
    }
    if wait {
        replica::settled(&app, &run).await?;
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `DELETE /threads/{thread_id}`: with replicas, the thread's runs under
/// way on other replicas are cancelled through the store first (those of
/// this replica are cancelled by the thread's deletion itself), and every
/// run of the thread is taken out of its index, so that a thread created
/// again under the id has none of them.
pub(crate) async fn delete_thread(
    State(app): State<Shared>,
    Path(thread): Path<String>,
) -> Result<Response, ApiError> {
    if app.replica.is_some() && threads::find(&app, &thread).await?.is_some() {
        let ids = replica::list(&app, &thread).await?;
        for id in &ids {
            let under_way = replica::run_json(&app, Some(&thread), id)
                .await?
                .and_then(|r| r["status"].as_str().and_then(RunStatus::parse))
                .is_some_and(|s| !s.is_done());
            if under_way
                && let Some(run) = find_any(&app, Some(&thread), id).await?
                && run.is_mirror()
            {
                run.cancel();
            }
        }
        let response = threads::delete(State(Arc::clone(&app)), Path(thread.clone())).await?;
        replica::unlist(&app, &thread, &ids).await?;
        return Ok(response);
    }
    threads::delete(State(app), Path(thread)).await
}

pub(crate) async fn delete(
    State(app): State<Shared>,
    Path((thread, run)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let found = find_run(&app, &thread, &run).await?;
    if !found.status().is_done() {
        return Err(ApiError::conflict(format!(
            "run {run} is still {}: cancel it first",
            found.status().as_str()
        )));
    }
    if app.replica.is_some() {
        replica::unlist(&app, &thread, std::slice::from_ref(&run)).await?;
    }
    if let Some(list) = app.runs().by_thread.get_mut(&thread) {
        list.retain(|r| r.run_id != run);
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}
