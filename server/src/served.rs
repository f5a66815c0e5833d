//! A registered agent behind one object-safe trait: the only code that knows
//! the agent's state type. It reads and writes JSON, starts and resumes runs,
//! and turns their [`RunEvent`]s into the frames of the stream modes.

use crate::error::ApiError;
use crate::record::{Mode, RunRecord, RunResult, RunStatus};
use crate::time::iso;
use async_trait::async_trait;
use harness::session::{CheckpointInfo, SessionError, SessionPhase, StoredRun, now_millis};
use harness::slots::{Context, NoSlots};
use harness::{
    Agent, Harness, HarnessState, InterruptId, RunError, RunEvent, SessionId, Signal, TaskPath,
};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The breakpoints a run is given (`interrupt_before`, `interrupt_after`):
/// step names of its agent.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Pause {
    pub(crate) before: Vec<String>,
    pub(crate) after: Vec<String>,
}

/// Where a run's events go and how it runs: the record it is driven into,
/// whether it streams tokens (`messages-tuple`), and its breakpoints.
#[derive(Debug)]
pub(crate) struct Drive<'a> {
    pub(crate) record: Arc<RunRecord>,
    pub(crate) tokens: bool,
    pub(crate) pause: &'a Pause,
}

/// What came of continuing a session whose run a replica died running.
pub(crate) enum Recovered {
    /// The run goes on, driven into the record.
    Running,
    /// A run still holds the session (its lease has not lapsed).
    InFlight,
    /// The session's run had ended: nothing to continue.
    Ended,
}

/// A registered agent, whatever its state type.
#[async_trait]
pub(crate) trait Served: Send + Sync {
    /// The agent's id: the assistant id and the graph id.
    fn id(&self) -> &str;
    /// `{nodes, edges}`.
    fn graph(&self) -> &Value;
    /// The schemas of `get_schemas`, without the graph id.
    fn schemas(&self) -> &Value;
    /// The names of the loop's steps.
    fn steps(&self) -> &[String];
    /// The session's head, if it exists.
    async fn head(&self, session: &SessionId) -> Result<Option<StoredRun>, ApiError>;
    /// The state after `index` steps (the latest when `None`), as JSON.
    async fn state(&self, session: &SessionId, index: Option<u64>) -> Result<Value, ApiError>;
    /// The session's checkpoints.
    async fn history(&self, session: &SessionId) -> Result<Vec<CheckpointInfo>, ApiError>;
    /// A new session from `session` after `index` steps with `values` merged
    /// in (read as the state's update type; `field` names it in errors).
    async fn fork(
        &self,
        session: &SessionId,
        index: u64,
        values: Option<Value>,
        field: &str,
    ) -> Result<SessionId, ApiError>;
    /// [`fork`](Self::fork), keeping the interrupt `session` waits on at
    /// `index` ([`harness::Agent::fork_waiting`]).
    async fn fork_waiting(
        &self,
        session: &SessionId,
        index: u64,
        values: Option<Value>,
        field: &str,
    ) -> Result<SessionId, ApiError>;
    /// Checks that `input` reads as an update of the state; `field` names it.
    fn check_input(&self, input: &Value, field: &str) -> Result<(), ApiError>;
    /// Starts a run on `session` with `input` merged in, driven as `to`
    /// says.
    async fn start(
        &self,
        session: SessionId,
        input: Option<Value>,
        to: Drive<'_>,
    ) -> Result<(), ApiError>;
    /// Continues `session` from its last checkpoint (its run's process
    /// died), driven as `to` says.
    async fn recover(&self, session: SessionId, to: Drive<'_>) -> Result<Recovered, ApiError>;
    /// Settles `record` from where `session` stands (a run that ended
    /// before its replica recorded it; `stopped`: one cancelled before it
    /// went on).
    async fn settle_from(
        &self,
        session: &SessionId,
        record: Arc<RunRecord>,
        stopped: bool,
    ) -> Result<(), ApiError>;
    /// Answers the pending interrupt `interrupt` of `session` with `answer`
    /// (with `update`, read as the state's update type, merged first) and
    /// drives the continued run as `to` says.
    async fn resume(
        &self,
        session: SessionId,
        (interrupt, answer): (InterruptId, Value),
        update: Option<Value>,
        to: Drive<'_>,
    ) -> Result<(), ApiError>;
}

/// An agent whose context has no run slots, with what the API shows of it.
pub(crate) struct Typed<S: HarnessState, C: Context> {
    agent: Agent<S, C>,
    graph: Value,
    schemas: Value,
    fields: Option<Vec<String>>,
    steps: Vec<String>,
}

impl<S: HarnessState, C: Context> Typed<S, C>
where
    C::Run: NoSlots,
{
    pub(crate) fn new(agent: &Agent<S, C>, harness: &Harness<S, C>) -> Self {
        let state = serde_json::to_value(S::state_schema()).unwrap_or(Value::Null);
        let update = serde_json::to_value(S::update_schema()).unwrap_or(Value::Null);
        let fields = update
            .get("properties")
            .and_then(Value::as_object)
            .filter(|_| update.get("additionalProperties") != Some(&Value::Bool(true)))
            .map(|p| p.keys().cloned().collect());
        Self {
            agent: agent.clone(),
            graph: crate::graph::from_dot(&harness.to_dot()),
            schemas: json!({
                "input_schema": update,
                "output_schema": state,
                "state_schema": state,
                "config_schema": null,
                "context_schema": null,
            }),
            fields,
            steps: harness.step_names().map(str::to_string).collect(),
        }
    }

    fn read_update(&self, input: Value, field: &str) -> Result<S::Update, ApiError> {
        if let (Value::Object(map), Some(fields)) = (&input, &self.fields)
            && let Some(unknown) = map.keys().find(|k| !fields.contains(k))
        {
            return Err(ApiError::unprocessable(
                format!("{field}.{unknown}"),
                format!(
                    "`{unknown}` is not a field of agent `{}`'s state (its fields: {})",
                    self.agent.id(),
                    fields.join(", ")
                ),
            ));
        }
        serde_path_to_error::deserialize::<_, S::Update>(input).map_err(|e| {
            let path = e.path().to_string();
            let at = if path == "." {
                field.to_string()
            } else {
                format!("{field}.{path}")
            };
            ApiError::unprocessable(
                at.clone(),
                format!(
                    "{at} does not read as an update of agent `{}`'s state: {}",
                    self.agent.id(),
                    e.inner()
                ),
            )
        })
    }

    /// `values`, if given, read as [`read_update`](Self::read_update) does.
    fn update_of(&self, values: Option<Value>, field: &str) -> Result<Option<S::Update>, ApiError> {
        values.map(|v| self.read_update(v, field)).transpose()
    }

    /// The state of `session` now, or the default if it has none yet.
    async fn current(&self, session: &SessionId) -> Result<S, ApiError> {
        match self.agent.state_at(session, None).await {
            Ok(s) => Ok(s),
            Err(SessionError::NoSession(_)) => Ok(S::default()),
            Err(e) => Err(e.into()),
        }
    }

    /// Drives `run`, with the breakpoints of `to` (names the server
    /// checked), into `to`'s record, from `state`.
    fn drive(&self, run: harness::Run<S, C>, state: S, to: Drive<'_>) -> Result<(), ApiError> {
        let Drive {
            record,
            tokens,
            pause,
        } = to;
        let bad =
            |e: harness::UnknownStep| ApiError::unprocessable("interrupt_before", e.to_string());
        let run = run
            .pause_before(&pause.before)
            .map_err(bad)?
            .pause_after(&pause.after)
            .map_err(bad)?;
        let events = if tokens {
            run.events_with_tokens()
        } else {
            run.events()
        };
        record.running(run.stop_handle());
        let mut frames = Frames::<S> {
            record: Arc::clone(&record),
            run_id: record.run_id.clone(),
            state,
            pending: BTreeMap::new(),
            index: 0,
            full_messages: record.modes.contains(&Mode::MessagesFull),
            messages: BTreeMap::new(),
        };
        frames.values(None);
        tokio::spawn(async move {
            let mut events = events;
            let handle = tokio::spawn(async move {
                let mut run = run;
                (&mut run).await
            });
            while let Some(event) = events.recv().await {
                frames.event(event);
            }
            let settled = match handle.await {
                Ok(settled) => settled,
                Err(join) => Err(RunError::Step {
                    step: "(the run's task)".into(),
                    attempts: 1,
                    // A panic's message may quote a secret: `Debug`
                    // prints the source as it is.
                    source: harness::secrets::redact(&join.to_string())
                        .into_owned()
                        .into(),
                }),
            };
            frames.settle(settled);
        });
        Ok(())
    }
}

#[async_trait]
impl<S: HarnessState, C: Context> Served for Typed<S, C>
where
    C::Run: NoSlots,
{
    fn id(&self) -> &str {
        self.agent.id()
    }

    fn graph(&self) -> &Value {
        &self.graph
    }

    fn schemas(&self) -> &Value {
        &self.schemas
    }

    fn steps(&self) -> &[String] {
        &self.steps
    }

    async fn head(&self, session: &SessionId) -> Result<Option<StoredRun>, ApiError> {
        match self.agent.session(session).await {
            Ok(head) => Ok(Some(head)),
            Err(SessionError::NoSession(_)) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    async fn state(&self, session: &SessionId, index: Option<u64>) -> Result<Value, ApiError> {
        let state = self.agent.state_at(session, index).await?;
        serde_json::to_value(state).map_err(|e| ApiError::Internal(e.to_string()))
    }

    async fn history(&self, session: &SessionId) -> Result<Vec<CheckpointInfo>, ApiError> {
        Ok(self.agent.history(session).await?)
    }

    async fn fork(
        &self,
        session: &SessionId,
        index: u64,
        values: Option<Value>,
        field: &str,
    ) -> Result<SessionId, ApiError> {
        let update = self.update_of(values, field)?;
        Ok(self.agent.fork(session, index, update).await?)
    }

    async fn fork_waiting(
        &self,
        session: &SessionId,
        index: u64,
        values: Option<Value>,
        field: &str,
    ) -> Result<SessionId, ApiError> {
        let update = self.update_of(values, field)?;
        Ok(self.agent.fork_waiting(session, index, update).await?)
    }

    fn check_input(&self, input: &Value, field: &str) -> Result<(), ApiError> {
        self.read_update(input.clone(), field).map(|_| ())
    }

    async fn start(
        &self,
        session: SessionId,
        input: Option<Value>,
        to: Drive<'_>,
    ) -> Result<(), ApiError> {
        let update = match input {
            Some(v) if !v.is_null() => self.read_update(v, "input")?,
            _ => S::Update::default(),
        };
        let mut state = self.current(&session).await?;
        let run = self
            .agent
            .continue_session(&session, update.clone())
            .await?;
        state.apply(update);
        self.drive(run, state, to)
    }

    async fn recover(&self, session: SessionId, to: Drive<'_>) -> Result<Recovered, ApiError> {
        let state = self.current(&session).await?;
        match self.agent.recover(&session).await {
            Ok(run) => {
                self.drive(run, state, to)?;
                Ok(Recovered::Running)
            }
            Err(SessionError::InFlight(_)) => Ok(Recovered::InFlight),
            Err(SessionError::NothingToRecover { .. }) => Ok(Recovered::Ended),
            Err(e) => Err(e.into()),
        }
    }

    async fn settle_from(
        &self,
        session: &SessionId,
        record: Arc<RunRecord>,
        stopped: bool,
    ) -> Result<(), ApiError> {
        let head = self.agent.session(session).await?;
        let values = serde_json::to_value(self.current(session).await?)
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        let (status, interrupts, error) = match &head.phase {
            SessionPhase::Interrupted { interrupt } => (
                RunStatus::Interrupted,
                interrupt
                    .breakpoint
                    .is_none()
                    .then(|| interrupt_json(interrupt))
                    .into_iter()
                    .collect(),
                None,
            ),
            SessionPhase::Completed { signal } if *signal != Signal::STOPPED && !stopped => {
                (RunStatus::Success, Vec::new(), None)
            }
            SessionPhase::Failed { error } => (
                RunStatus::Error,
                Vec::new(),
                Some(("RunError".to_string(), error.clone())),
            ),
            _ => (RunStatus::Interrupted, Vec::new(), None),
        };
        if let Some((kind, message)) = &error {
            record.push(
                Mode::Always,
                "error",
                None,
                json!({"error": kind, "message": message}),
            );
        }
        record.finish(
            status,
            RunResult {
                values,
                interrupts,
                error,
            },
        );
        Ok(())
    }

    async fn resume(
        &self,
        session: SessionId,
        (interrupt, answer): (InterruptId, Value),
        update: Option<Value>,
        to: Drive<'_>,
    ) -> Result<(), ApiError> {
        let mut state = self.current(&session).await?;
        let run = match update.filter(|u| !u.is_null()) {
            Some(update) => {
                let update = self.read_update(update, "command.update")?;
                let run = self
                    .agent
                    .resume_with_update(answer, &session, &interrupt, update.clone())
                    .await?;
                state.apply(update);
                run
            }
            None => self.agent.resume(answer, &session, &interrupt).await?,
        };
        self.drive(run, state, to)
    }
}

/// Turns a run's events into frames: keeps the run's state to send it whole
/// (`values`) after each step.
struct Frames<S: HarnessState> {
    record: Arc<RunRecord>,
    run_id: String,
    state: S,
    /// Updates of parallel branches, applied at their join in branch order.
    pending: BTreeMap<TaskPath, Vec<S::Update>>,
    /// Steps completed so far (LangGraph's `step`).
    index: u64,
    /// Whether the run streams whole messages (`messages` mode) besides
    /// tokens (`messages-tuple`).
    full_messages: bool,
    /// The message each streaming step has sent so far, by its task and
    /// step: `(id, text)`.
    messages: BTreeMap<(TaskPath, Arc<str>), (String, String)>,
}

/// An update as JSON with only the fields the step wrote (as LangGraph's
/// `updates` show them), when the state says which those are.
fn written_json<S: HarnessState>(update: &S::Update) -> Value {
    let mut json = serde_json::to_value(update).unwrap_or(Value::Null);
    if S::fields().is_some()
        && let Value::Object(map) = &mut json
    {
        let written = S::written(update);
        map.retain(|k, _| written.contains(&k.as_str()));
    }
    json
}

fn interrupt_json(i: &harness::Interrupt) -> Value {
    json!({ "value": i.payload, "id": i.id.as_str() })
}

fn task_id(run: &str, path: &TaskPath, index: u64) -> String {
    if path.is_root() {
        format!("{run}:{index}")
    } else {
        format!("{run}:{path}:{index}")
    }
}

impl<S: HarnessState> Frames<S> {
    fn push(&self, mode: Mode, event: &'static str, data: Value) {
        self.record.push(mode, event, None, data);
    }

    fn state_json(&self) -> Value {
        serde_json::to_value(&self.state).unwrap_or(Value::Null)
    }

    fn values(&self, interrupt: Option<&harness::Interrupt>) {
        let mut values = self.state_json();
        if let (Some(i), Value::Object(map)) = (interrupt, &mut values) {
            map.insert("__interrupt__".into(), json!([interrupt_json(i)]));
        }
        self.push(Mode::Values, "values", values);
    }

    /// The metadata LangGraph gives a streamed message.
    fn message_metadata(&self, path: &TaskPath, step: &str) -> Value {
        json!({"langgraph_node": step, "langgraph_step": self.index + 1,
               "langgraph_path": path.as_str(), "run_id": self.run_id})
    }

    /// `messages` mode: the message of `step` so far, with `text` added
    /// (its metadata first, at its first token).
    fn partial_message(&mut self, path: &TaskPath, step: &Arc<str>, id: &str, text: &str) {
        let key = (path.clone(), Arc::clone(step));
        if !self.messages.contains_key(&key) {
            let mut by_id = Map::new();
            by_id.insert(
                id.to_string(),
                json!({ "metadata": self.message_metadata(path, step) }),
            );
            self.push(
                Mode::MessagesFull,
                "messages/metadata",
                Value::Object(by_id),
            );
        }
        let (id, so_far) = self
            .messages
            .entry(key)
            .or_insert_with(|| (id.to_string(), String::new()));
        so_far.push_str(text);
        let data = json!([{"type": "ai", "content": &*so_far, "id": &*id}]);
        self.push(Mode::MessagesFull, "messages/partial", data);
    }

    /// `messages` mode: the whole message of `step`, once it has ended.
    fn complete_message(&mut self, path: &TaskPath, step: &Arc<str>) {
        if let Some((id, text)) = self.messages.remove(&(path.clone(), Arc::clone(step))) {
            self.push(
                Mode::MessagesFull,
                "messages/complete",
                json!([{"type": "ai", "content": text, "id": id}]),
            );
        }
    }

    fn event(&mut self, event: RunEvent<S>) {
        let now = iso(now_millis());
        match event {
            RunEvent::StepStarted { path, step, index } => {
                let id = task_id(&self.run_id, &path, index);
                self.push(
                    Mode::Debug,
                    "debug",
                    json!({"type": "task", "step": index + 1, "timestamp": now,
                           "payload": {"id": id, "name": &*step, "input": null, "triggers": []}}),
                );
                self.push(
                    Mode::Events,
                    "events",
                    json!({"event": "on_chain_start", "name": &*step, "run_id": id, "tags": [],
                           "metadata": {"langgraph_node": &*step, "langgraph_step": index + 1,
                                        "langgraph_path": path.as_str()},
                           "data": {}}),
                );
            }
            RunEvent::StepFinished {
                path,
                step,
                index,
                update,
                signal,
                ..
            } => {
                self.complete_message(&path, &step);
                let update_json = written_json::<S>(&update);
                let id = task_id(&self.run_id, &path, index);
                let result: Vec<Value> = match &update_json {
                    Value::Object(m) => m
                        .iter()
                        .filter(|(_, v)| !v.is_null())
                        .map(|(k, v)| json!([k, v]))
                        .collect(),
                    _ => Vec::new(),
                };
                self.push(
                    Mode::Debug,
                    "debug",
                    json!({"type": "task_result", "step": index + 1, "timestamp": now,
                           "payload": {"id": id, "name": &*step, "error": null,
                                       "result": result, "interrupts": []}}),
                );
                self.push(
                    Mode::Events,
                    "events",
                    json!({"event": "on_chain_end", "name": &*step, "run_id": id, "tags": [],
                           "metadata": {"langgraph_node": &*step, "langgraph_step": index + 1,
                                        "langgraph_path": path.as_str(),
                                        "signal": signal.as_ref().map(Signal::as_str)},
                           "data": {"output": update_json}}),
                );
                let mut by_step = Map::new();
                by_step.insert(step.to_string(), update_json);
                self.push(Mode::Updates, "updates", Value::Object(by_step));
                self.index = index + 1;
                if path.is_root() {
                    self.state.apply(update);
                    self.values(None);
                } else {
                    self.pending.entry(path).or_default().push(update);
                }
            }
            RunEvent::StepFailed {
                path,
                step,
                attempt,
                error,
                will_retry,
            } => {
                // A step tried again streams its message anew.
                self.messages.remove(&(path.clone(), Arc::clone(&step)));
                let id = task_id(&self.run_id, &path, self.index);
                self.push(
                    Mode::Debug,
                    "debug",
                    json!({"type": "task_result", "step": self.index + 1, "timestamp": now,
                           "payload": {"id": id, "name": &*step, "error": error,
                                       "result": [], "interrupts": [],
                                       "attempt": attempt, "will_retry": will_retry}}),
                );
            }
            RunEvent::Joined { path, branches, .. } => {
                let merged: Vec<S::Update> = branches
                    .iter()
                    .flat_map(|b| self.pending.remove(b).unwrap_or_default())
                    .collect();
                if path.is_root() {
                    for u in merged {
                        self.state.apply(u);
                    }
                    self.values(None);
                } else {
                    self.pending.entry(path).or_default().extend(merged);
                }
            }
            // A sub-agent's step: its update, under its path.
            RunEvent::Child {
                path,
                step,
                kind,
                detail,
            } if &*kind == "step_finished" => {
                let mut by_step = Map::new();
                by_step.insert(step.to_string(), detail["update"].clone());
                self.record.push(
                    Mode::Updates,
                    "updates",
                    Some(path.to_string()),
                    Value::Object(by_step),
                );
            }
            RunEvent::Custom {
                path,
                step,
                kind,
                payload,
            } => {
                self.push(
                    Mode::Custom,
                    "custom",
                    json!({"kind": &*kind, "step": &*step, "payload": payload}),
                );
                self.push(
                    Mode::Events,
                    "events",
                    json!({"event": "on_custom_event", "name": &*kind, "run_id": self.run_id,
                           "tags": [], "metadata": {"langgraph_node": &*step,
                                                    "langgraph_path": path.as_str()},
                           "data": payload}),
                );
            }
            RunEvent::Token { path, step, text } => {
                let id = format!("run-{}-{}", self.run_id, self.index);
                if self.full_messages {
                    self.partial_message(&path, &step, &id, &text);
                }
                self.push(
                    Mode::Messages,
                    "messages",
                    json!([{"type": "AIMessageChunk", "content": &*text, "id": id},
                           {"langgraph_node": &*step, "langgraph_step": self.index + 1,
                            "langgraph_path": path.as_str(), "run_id": self.run_id}]),
                );
                self.push(
                    Mode::Events,
                    "events",
                    json!({"event": "on_chat_model_stream", "name": &*step, "run_id": self.run_id,
                           "tags": [], "metadata": {"langgraph_node": &*step},
                           "data": {"chunk": {"type": "AIMessageChunk", "content": &*text, "id": id}}}),
                );
            }
            // A breakpoint is no step's question: LangGraph shows none.
            RunEvent::Interrupted(interrupt) if interrupt.breakpoint.is_some() => {
                self.values(None);
            }
            RunEvent::Interrupted(interrupt) => {
                self.push(
                    Mode::Updates,
                    "updates",
                    json!({"__interrupt__": [interrupt_json(&interrupt)]}),
                );
                self.values(Some(&interrupt));
            }
            // The end is reported from the run's outcome.
            _ => {}
        }
    }

    fn settle(self, settled: Result<harness::Outcome<S>, RunError>) {
        let (status, result) = match settled {
            Ok(outcome) => {
                let values = serde_json::to_value(&outcome.state).unwrap_or(Value::Null);
                let interrupts: Vec<Value> = outcome
                    .interrupt
                    .iter()
                    .filter(|i| i.breakpoint.is_none())
                    .map(interrupt_json)
                    .collect();
                let status =
                    if outcome.signal == Signal::INTERRUPT || outcome.signal == Signal::STOPPED {
                        RunStatus::Interrupted
                    } else {
                        RunStatus::Success
                    };
                (
                    status,
                    RunResult {
                        values,
                        interrupts,
                        error: None,
                    },
                )
            }
            Err(e) => {
                let kind = match &e {
                    RunError::AnswerRejected { .. } => "AnswerRejected",
                    RunError::Timeout { .. } => "Timeout",
                    _ => "RunError",
                };
                let message = e.to_string();
                self.push(
                    Mode::Always,
                    "error",
                    json!({"error": kind, "message": message}),
                );
                (
                    RunStatus::Error,
                    RunResult {
                        values: self.state_json(),
                        interrupts: Vec::new(),
                        error: Some((kind.to_string(), message)),
                    },
                )
            }
        };
        self.record.finish(status, result);
    }
}
