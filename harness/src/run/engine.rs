//! The loop's interpreter: one step after another until a signal ends it.

use super::control::RunControl;
use super::events::RunEvent;
use crate::error::RunError;
use crate::graph::{
    BranchFailure, Branches, CompiledStep, Exits, HarnessInner, SubCall, SubEnd, SubRun, SubStub,
    Target,
};
use crate::ids::{InterruptId, TaskPath};
use crate::session::head::{BranchDone, ChildDone, StepDone};
use crate::session::{
    BranchRecord, BranchStart, CheckpointKind, ChildRecord, ForkRecord, Holder, JoinRecord,
    Journals, SessionConfig, SessionCursor, SessionError, SessionPhase, SessionStore, StoreError,
    StoreLoad, TaskRebuilt,
};
use crate::signal::Signal;
use crate::slots::Context;
use crate::state::HarnessState;
use crate::step::{
    Breakpoint, CallHooks, Cx, CxShared, Emitter, Interrupt, JournalSink, ModelCallInfo, RunInfo,
    StepError, StepInfo, StepJournal, ToolCallInfo,
};
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tracing::Instrument;

/// How a run is tied to a session store.
pub(crate) enum SessionLink {
    /// No store: the run lives in memory only.
    Detached,
    /// A new session, created when the run starts.
    New(Arc<dyn SessionStore>, SessionConfig),
    /// An existing session; `leased` says whether this run holds its lease.
    Attached {
        cursor: Arc<SessionCursor>,
        leased: bool,
    },
}

/// A task: the run's own loop, or a branch of a fork, with what survives
/// a pause.
pub(crate) struct Task<S: HarnessState> {
    /// Where it is in the run (the root for the run's own loop).
    pub(crate) path: TaskPath,
    /// Its state: the run's, or a branch's own (the state at its fork and
    /// its own updates). Shared with the running step, and copied on write
    /// only if the step kept a reference.
    pub(crate) state: Arc<S>,
    /// The step to run next (the join, while its fork is under way).
    pub(crate) at: usize,
    /// The current step's journal.
    pub(crate) journal: StepJournal,
    /// The interrupt whose answer was just given (the last one in the
    /// journal): the task waits on it again if the answer is rejected.
    pub(crate) answering: Option<Interrupt>,
    /// The interrupt whose answer the step was told to have kept
    /// ([`RunEvent::AnswerAccepted`]): a retry of the step reads it untold,
    /// and may still refuse it (on `answering`).
    pub(crate) told: Option<crate::ids::InterruptId>,
    /// A fan-out branch's input, for its first step.
    pub(crate) input: Option<Value>,
    /// For a branch: its join and its updates so far.
    pub(crate) branch: Option<BranchState<S>>,
    /// Its fork under way.
    pub(crate) region: Option<Region<S>>,
    /// The sub-agents its current step runs, paused, by path.
    pub(crate) subs: BTreeMap<TaskPath, Box<dyn SubRun>>,
    /// Resumed from a breakpoint: the step it is at runs without pausing.
    pub(crate) past_breakpoint: bool,
}

/// What a branch carries to its join.
pub(crate) struct BranchState<S: HarnessState> {
    /// The step it joins at.
    pub(crate) join: usize,
    /// Its updates, to merge at the join in branch order.
    pub(crate) updates: Vec<S::Update>,
    /// Whether it has reached the join.
    pub(crate) done: bool,
    /// The session's steps when its fork started plus its own steps: the
    /// visit number of its current step (for idempotency keys).
    pub(crate) visit: u64,
}

/// A fork under way: its branches, in merge order.
pub(crate) struct Region<S: HarnessState> {
    /// The fork (`HarnessInner::forks`).
    pub(crate) fork: usize,
    pub(crate) branches: Vec<Task<S>>,
}

impl<S: HarnessState> Task<S> {
    /// The run's own loop at step `at`.
    pub(crate) fn root(state: S, at: usize, journal: StepJournal) -> Self {
        Self {
            path: TaskPath::root(),
            state: Arc::new(state),
            at,
            journal,
            answering: None,
            told: None,
            input: None,
            branch: None,
            region: None,
            subs: BTreeMap::new(),
            past_breakpoint: false,
        }
    }

    /// Gives `response` to the interrupt at `path`: this task's, a
    /// branch's, or a sub-agent's. Whether such a task was found.
    pub(crate) fn answer(
        &mut self,
        path: &TaskPath,
        response: Value,
        interrupt: Interrupt,
    ) -> bool {
        if self.path == *path {
            self.journal.responses.push(response);
            self.answering = Some(interrupt);
            return true;
        }
        if let Some(region) = &mut self.region
            && let Some(b) = region
                .branches
                .iter_mut()
                .find(|b| path.starts_with(&b.path))
        {
            return b.answer(path, response, interrupt);
        }
        match self.subs.iter_mut().find(|(p, _)| path.starts_with(p)) {
            Some((_, sub)) => {
                sub.answer(path, response, interrupt);
                true
            }
            None => false,
        }
    }

    /// Marks `interrupt` as the one the last answer in the journal of the
    /// task that asked answers (a branch's, a sub-agent's).
    pub(crate) fn mark_answering(&mut self, interrupt: Interrupt) {
        let path = interrupt.path.clone();
        if let Some(task) = self.find_mut(&path) {
            task.answering = Some(interrupt);
            return;
        }
        let task = deepest(self, &path);
        if let Some((_, sub)) = task.subs.iter_mut().find(|(p, _)| path.starts_with(p)) {
            sub.answering(interrupt);
        }
    }

    /// The task at `path`: this one or one of its branches, at any depth.
    pub(crate) fn find_mut(&mut self, path: &TaskPath) -> Option<&mut Task<S>> {
        if self.path == *path {
            return Some(self);
        }
        self.region
            .as_mut()?
            .branches
            .iter_mut()
            .find(|b| path.starts_with(&b.path))?
            .find_mut(path)
    }

    /// The journals of this task and of its branches, by path.
    pub(crate) fn journals(&self, out: &mut Journals) {
        out.insert(self.path.clone(), self.journal.clone());
        for sub in self.subs.values() {
            sub.journals(out);
        }
        if let Some(region) = &self.region {
            for b in &region.branches {
                if !b.branch.as_ref().is_some_and(|b| b.done) {
                    b.journals(out);
                }
            }
        }
    }

    /// Every journal of the run.
    pub(crate) fn all_journals(&self) -> Journals {
        let mut out = Journals::new();
        self.journals(&mut out);
        out
    }
}

impl<S: HarnessState> SubRun for Task<S> {
    fn answer(&mut self, path: &TaskPath, response: Value, interrupt: Interrupt) {
        Task::answer(self, path, response, interrupt);
    }

    fn answering(&mut self, interrupt: Interrupt) {
        self.mark_answering(interrupt);
    }

    fn journals(&self, out: &mut Journals) {
        Task::journals(self, out);
    }

    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any + Send> {
        self
    }
}

/// Rebuilds the task at `path` of a loop from what the log left
/// (`tasks`), at step `at`, with its journal from `journals` and the
/// branches of its fork under way; `branch` for a branch. Journals of
/// sub-agents under it are left in `journals` for the caller.
pub(crate) fn task_from<S: HarnessState, C: Context>(
    harness: &HarnessInner<S, C>,
    session: &crate::ids::SessionId,
    tasks: &mut BTreeMap<TaskPath, TaskRebuilt<S>>,
    journals: &mut Journals,
    path: TaskPath,
    at: usize,
    branch: Option<BranchState<S>>,
) -> Result<Task<S>, SessionError> {
    let bad = |reason: String| {
        SessionError::from(StoreLoad::new(session.clone(), "checkpoint log", reason))
    };
    let Some(rebuilt) = tasks.remove(&path) else {
        return Err(bad(format!("no record of the task `{path}`")));
    };
    let mut task = Task::root(
        rebuilt.state,
        at,
        journals.remove(&path).unwrap_or_default(),
    );
    task.path = path;
    task.input = rebuilt.input;
    task.branch = branch;
    if let Some(b) = &mut task.branch {
        b.updates = rebuilt.updates;
        b.visit += rebuilt.steps;
    }
    if let Some(record) = rebuilt.open {
        let Some(f) = harness.fork_index(&record.fork) else {
            return Err(bad(format!(
                "a fork under way, `{}`, is not a fork of this loop",
                record.fork
            )));
        };
        let join = harness.forks[f].join;
        let mut branches = Vec::with_capacity(record.branches.len());
        for start in &record.branches {
            let next = tasks
                .get(&start.path)
                .map(|t| t.next.clone())
                .ok_or_else(|| bad(format!("no record of the branch `{}`", start.path)))?;
            let (at, done) = match next {
                Some(name) => (
                    harness.step_index(&name).ok_or_else(|| {
                        bad(format!(
                            "the branch `{}` goes on at `{name}`, which is not a step of this loop",
                            start.path
                        ))
                    })?,
                    false,
                ),
                None => (join, true),
            };
            let state = BranchState {
                join,
                updates: Vec::new(),
                done,
                visit: rebuilt.open_at,
            };
            branches.push(task_from(
                harness,
                session,
                tasks,
                journals,
                start.path.clone(),
                at,
                Some(state),
            )?);
        }
        task.region = Some(Region { fork: f, branches });
    }
    Ok(task)
}

/// Hands the journals left in `journals` (those of sub-agents) to the
/// deepest task of `root` they lie under, as paused sub-agents known by
/// their journals.
pub(crate) fn attach_sub_journals<S: HarnessState>(root: &mut Task<S>, journals: Journals) {
    for (path, journal) in journals {
        let task = deepest(root, &path);
        // The sub-agent is the first segment below the task.
        let rest = path
            .as_str()
            .strip_prefix(task.path.as_str())
            .unwrap_or(path.as_str())
            .trim_start_matches('/');
        let first = rest.split('/').next().unwrap_or(rest);
        let sub = task.path.child(first);
        task.subs
            .entry(sub)
            .or_insert_with(|| Box::new(SubStub::default()))
            .keep_journal(path, journal);
    }
}

fn deepest<'a, S: HarnessState>(task: &'a mut Task<S>, path: &TaskPath) -> &'a mut Task<S> {
    // The branches to go down, read first, then followed.
    let mut chain = Vec::new();
    let mut at: &Task<S> = task;
    while let Some((i, b)) = at.region.as_ref().and_then(|r| {
        r.branches
            .iter()
            .enumerate()
            .find(|(_, b)| path.starts_with(&b.path) && b.path != *path)
    }) {
        chain.push(i);
        at = b;
    }
    let mut task = task;
    for i in chain {
        let region = task
            .region
            .as_mut()
            .expect("the chain was read from this tree");
        task = &mut region.branches[i];
    }
    task
}

/// Where a run is: what survives a pause.
pub(crate) struct Execution<S: HarnessState> {
    /// The run's own loop, and through it every branch under way.
    pub(crate) task: Task<S>,
    /// Steps completed by this run (every branch's included).
    pub(crate) steps: u64,
    /// The session store, if any.
    pub(crate) session: SessionLink,
}

impl<S: HarnessState> Execution<S> {
    pub(crate) fn new(state: S, at: usize, journal: StepJournal, session: SessionLink) -> Self {
        Self {
            task: Task::root(state, at, journal),
            steps: 0,
            session,
        }
    }
}

/// How a run settled without error.
pub(crate) enum Settle {
    Ended(Signal),
    Stopped,
    Interrupted(Interrupt),
    /// Paused again on the interrupt it was answered on, whose answer the
    /// step could not read (the reason).
    Rejected(Interrupt, String),
}

/// A finished drive: where the run got to, and how it settled.
pub(crate) struct Driven<S: HarnessState> {
    pub(crate) exec: Execution<S>,
    pub(crate) result: Result<Settle, RunError>,
}

/// How a task stopped without error.
pub(super) enum TaskEnd {
    /// The run's own loop ended with this signal.
    Ended(Signal),
    /// A branch reached its join.
    Joined,
    Stopped,
    Interrupted(Interrupt),
    Rejected(Interrupt, String),
}

/// Why a step did not produce an update.
enum Halt {
    Stopped,
    Interrupt(Interrupt),
    Rejected(Interrupt, String),
    Error(RunError),
}

pub(crate) fn start<S: HarnessState, C: Context>(
    harness: Arc<HarnessInner<S, C>>,
    ctx: Arc<C>,
    control: Arc<RunControl<S>>,
    info: RunInfo,
    mut exec: Execution<S>,
) -> BoxFuture<'static, Driven<S>> {
    // OpenTelemetry GenAI conventions: an in-process agent's invocation is
    // an INTERNAL `invoke_agent {agent}` span, its conversation the session.
    // Everything a sampler reads is set here, at the span's start.
    let span = tracing::info_span!(
        "harness.run",
        otel.name = %format_args!("invoke_agent {}", info.agent_id),
        otel.kind = "internal",
        gen_ai.operation.name = "invoke_agent",
        gen_ai.agent.name = %info.agent_id,
        gen_ai.conversation.id = %info.session_id,
        agent = %info.agent_id,
        run_id = %info.run_id,
        session_id = %info.session_id,
        error.type = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
        otel.status_description = tracing::field::Empty,
    );
    let run_span = span.clone();
    async move {
        let result = match attach(&harness, &info, &mut exec).await {
            Ok(cursor) => {
                if let Some(c) = &cursor {
                    c.forward_stop(Arc::clone(&control.stop));
                }
                let env = Env {
                    harness: &harness,
                    ctx: &ctx,
                    emitter: Arc::clone(&control.events) as Arc<dyn Emitter>,
                    control: &control,
                    info: &info,
                    cursor: cursor.as_ref(),
                    steps: AtomicU64::new(exec.steps),
                    scope: None,
                    deadline: crate::step::RunDeadline::starting_now(harness.deadline),
                    effects: harness.effects.clone(),
                    hooks: (!harness.observers.is_empty()).then(|| {
                        Arc::new(ObserverHooks {
                            observers: harness.observers.clone(),
                            info: info.clone(),
                        }) as Arc<dyn CallHooks>
                    }),
                };
                // The lease is kept alive while a long step runs, beside
                // the drive in this task (no task of its own to start and
                // abort per run); if it is lost, the step is cancelled (its
                // future dropped) before it can commit anything. In a block
                // of its own, so that the settle below can reuse its room
                // in this future.
                let result = {
                    let driving = drive(&env, &mut exec.task);
                    match &cursor {
                        Some(c) => tokio::select! {
                            biased;
                            reason = keep_lease(c) => Err(RunError::LeaseLost {
                                session: info.session_id.clone(),
                                reason,
                            }),
                            result = driving => result,
                        },
                        None => driving.await,
                    }
                };
                exec.steps = env.steps.load(Ordering::SeqCst);
                match cursor {
                    Some(c) => persist_settle(&harness, &c, &mut exec, result).await,
                    None => result,
                }
            }
            Err(e) => Err(e),
        };
        // How the run ended, on its span: a failure is an error there.
        if let Err(e) = &result {
            run_span.record("error.type", error_type(e));
            run_span.record("otel.status_code", "error");
            run_span.record("otel.status_description", tracing::field::display(e));
        }
        Driven { exec, result }
    }
    .instrument(span)
    .boxed()
}

/// The fields the branch starting at step `start` may write before the
/// fork's `join`, as the build's check of parallel writes judged them: what
/// its steps declare (a step without a body writes nothing; a nested fork's
/// branches and join count), `None` when a step of it may write any field.
fn branch_writes<S: HarnessState, C: Context>(
    harness: &HarnessInner<S, C>,
    start: usize,
    join: usize,
) -> Option<std::collections::BTreeSet<&str>> {
    let mut fields = std::collections::BTreeSet::new();
    let mut seen = std::collections::HashSet::new();
    let mut todo = vec![start];
    while let Some(at) = todo.pop() {
        if at == join || !seen.insert(at) {
            continue;
        }
        let step = &harness.steps[at];
        if step.run.is_some() || step.sub.is_some() {
            fields.extend(step.writes.as_ref()?.iter().map(String::as_str));
        }
        let targets: Vec<&Target> = match &step.exits {
            Exits::Next(target) => vec![target],
            Exits::On(on) => on.iter().map(|(_, target)| target).collect(),
        };
        for target in targets {
            match target {
                Target::Step(next) => todo.push(*next),
                Target::End => {}
                Target::Fork(n) => {
                    let nested = &harness.forks[*n];
                    match &nested.branches {
                        Branches::Static(starts) => todo.extend(starts),
                        Branches::Each { step, .. } => todo.push(*step),
                    }
                    todo.push(nested.join);
                }
            }
        }
    }
    Some(fields)
}

/// Whether field `name` of `S` merges concurrent writes (its reducer is not
/// `replace`); false when the state does not describe its reducers.
fn merges<S: HarnessState>(name: &str) -> bool {
    S::fields().is_some_and(|fields| {
        fields
            .iter()
            .any(|f| f.name == name && f.reducer != crate::state::ReducerKind::Replace)
    })
}

/// A short name for the kind of a run's error, for traces (`error.type`).
fn error_type(e: &RunError) -> &'static str {
    match e {
        RunError::Step { .. } => "step_failed",
        RunError::Timeout { .. } => "timeout",
        RunError::UndeclaredSignal { .. } => "undeclared_signal",
        RunError::StepLimit { .. } => "step_limit",
        RunError::Deadline { .. } => "deadline",
        RunError::AnswerRejected { .. } => "answer_rejected",
        RunError::LeaseLost { .. } => "lease_lost",
        RunError::Store(_) => "store",
        RunError::Branch { .. } => "branch_failed",
        RunError::SubAgent { .. } => "sub_agent_failed",
        RunError::FanOut { .. } => "fan_out",
        RunError::UndeclaredWrite { .. } | RunError::UndeclaredCollectedWrite { .. } => {
            "undeclared_write"
        }
        _ => "run_error",
    }
}

/// Renews the run's lease every third of its time to live, for as long as
/// it is polled (beside the run's drive, which it outlives only when the
/// lease is lost); returns why the lease is lost: another run took the
/// session over, or renewals failed (the store unreachable) until the lease
/// was about to expire. Failed renewals are retried with backoff; the lease
/// is given up a tenth of its time to live before it expires by the store's
/// clock, so that the step is cancelled before any other worker may take
/// the session.
async fn keep_lease(cursor: &SessionCursor) -> String {
    let ttl = cursor.config.lease_ttl;
    let every = ttl / 3;
    let margin = ttl / 10;
    let margin_ms = u64::try_from(margin.as_millis()).unwrap_or(u64::MAX);
    let first_retry = (ttl / 30).max(Duration::from_millis(5));
    let reason = 'renewing: loop {
        tokio::time::sleep(every).await;
        let mut retry = first_retry;
        let mut last = String::new();
        loop {
            // How long until the lease must be given up.
            let left = cursor
                .lease_expires_at()
                .saturating_sub(margin_ms)
                .saturating_sub(cursor.store.now());
            if left == 0 {
                break 'renewing format!(
                    "its renewals failed until it was about to expire; the last error: {last}"
                );
            }
            let left = Duration::from_millis(left);
            let error = match tokio::time::timeout(left, cursor.renew()).await {
                Ok(Ok(())) => continue 'renewing,
                Ok(Err(StoreError::Conflict { .. })) => {
                    break 'renewing "another run took the session over".to_string();
                }
                Ok(Err(e)) => e.to_string(),
                Err(_) => "renewing it did not finish before it was about to expire".into(),
            };
            tracing::warn!(error = %error, "cannot renew the run's lease; retrying");
            last = error;
            tokio::time::sleep(retry.min(left)).await;
            retry = (retry * 2).min(every);
        }
    };
    tracing::error!(reason = %reason, "the run's lease is lost; cancelling the step");
    reason
}

/// `value` as the JSON the session store is given: serialized, with every
/// secret the process holds redacted (see [`crate::secrets`]), so that a
/// key a step put in its state (a tool's output, a model's answer quoting
/// it) is not written to disk. One pass over the strings when the process
/// holds secrets, none otherwise.
fn stored_json<T: serde::Serialize + ?Sized>(value: &T) -> Result<Value, serde_json::Error> {
    let mut json = serde_json::to_value(value).map_err(|e| {
        // Serialized again, only on failure, to say where: a map whose keys
        // are not strings, a value whose Serialize fails.
        match serde_path_to_error::serialize(value, serde_json::value::Serializer) {
            Err(tracked) if tracked.path().iter().next().is_some() => {
                <serde_json::Error as serde::ser::Error>::custom(format!(
                    "{e} (at `{}`)",
                    tracked.path()
                ))
            }
            _ => e,
        }
    })?;
    crate::secrets::redact_json(&mut json);
    Ok(json)
}

/// `value` as [`stored_json`] makes it, refused if it does not read back as
/// a `T`. JSON has no NaN or infinity (serde_json writes them as `null`), so
/// a float that is one would be stored as something else: a field the
/// session later reads as never set, or cannot read at all. Read back only
/// where the JSON holds a `null`, the one value such a float becomes, so
/// that nothing else pays for the check.
pub(crate) fn stored_checked<T>(value: &T) -> Result<Value, String>
where
    T: serde::Serialize + serde::de::DeserializeOwned,
{
    let json = stored_json(value).map_err(|e| e.to_string())?;
    if holds_null(&json)
        && let Err(e) = T::deserialize(&json)
    {
        let at = match &json {
            Value::Object(fields) => fields
                .iter()
                .filter(|(_, v)| holds_null(v))
                .map(|(k, _)| format!("`{k}`"))
                .collect::<Vec<_>>()
                .join(", "),
            _ => String::new(),
        };
        let at = if at.is_empty() {
            String::new()
        } else {
            format!(", and {at} holds a null")
        };
        return Err(format!(
            "it would not read back as written ({e}): JSON has no NaN or infinite \
             number, and writes one as null{at}"
        ));
    }
    Ok(json)
}

fn holds_null(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Array(items) => items.iter().any(holds_null),
        Value::Object(fields) => fields.values().any(holds_null),
        _ => false,
    }
}

/// A step's error as the run keeps it (`RunError::Step`'s `source`): as the
/// step returned it, unless one of the process's secrets appears in it (in
/// its message, a cause's, or its `Debug`, which a `main` returning the
/// error prints). Then a message with them replaced stands for it: its type
/// is lost, since whoever has the error could print the secret.
fn without_secrets(source: crate::error::BoxError) -> crate::error::BoxError {
    use crate::secrets::contains_secret;
    if !crate::secrets::is_active() {
        return source;
    }
    let mut leaks = contains_secret(&format!("{source:?}"));
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&*source);
    while let Some(c) = cause
        && !leaks
    {
        leaks = contains_secret(&c.to_string());
        cause = c.source();
    }
    if !leaks {
        return source;
    }
    let mut message = source.to_string();
    let mut cause = source.source();
    while let Some(c) = cause {
        message.push_str(": ");
        message.push_str(&c.to_string());
        cause = c.source();
    }
    crate::secrets::redact_string(&mut message);
    message.into()
}

/// Creates or re-leases the run's session, if it has a store.
async fn attach<S: HarnessState, C: Context>(
    harness: &HarnessInner<S, C>,
    info: &RunInfo,
    exec: &mut Execution<S>,
) -> Result<Option<Arc<SessionCursor>>, RunError> {
    let link = std::mem::replace(&mut exec.session, SessionLink::Detached);
    let cursor = match link {
        SessionLink::Detached => return Ok(None),
        SessionLink::New(store, config) => {
            let state = stored_checked(&*exec.task.state).map_err(|e| {
                RunError::Store(StoreError::backend(format!(
                    "the state cannot be stored: {e}"
                )))
            })?;
            let next = &harness.steps[exec.task.at].name;
            Arc::new(
                SessionCursor::create(
                    store,
                    config,
                    &info.agent_id,
                    info.run_id.clone(),
                    info.session_id.clone(),
                    state,
                    next,
                    Holder::ThisRun,
                )
                .await
                .map_err(RunError::Store)?,
            )
        }
        SessionLink::Attached { cursor, leased } => {
            if !leased && let Err(e) = cursor.reacquire(exec.task.all_journals()).await {
                exec.session = SessionLink::Attached {
                    cursor,
                    leased: false,
                };
                return Err(RunError::Store(e));
            }
            cursor
        }
    };
    exec.session = SessionLink::Attached {
        cursor: Arc::clone(&cursor),
        leased: true,
    };
    Ok(Some(cursor))
}

/// Records how the run settled in its session and releases the lease.
async fn persist_settle<S: HarnessState, C: Context>(
    harness: &HarnessInner<S, C>,
    cursor: &SessionCursor,
    exec: &mut Execution<S>,
    result: Result<Settle, RunError>,
) -> Result<Settle, RunError> {
    let here = harness.steps.get(exec.task.at).map(|s| &*s.name);
    let (phase, next, journals) = match &result {
        Ok(Settle::Ended(signal)) => (
            SessionPhase::Completed {
                signal: signal.clone(),
            },
            None,
            Journals::new(),
        ),
        Ok(Settle::Stopped) => (
            SessionPhase::Completed {
                signal: Signal::STOPPED,
            },
            here,
            exec.task.all_journals(),
        ),
        Ok(Settle::Interrupted(interrupt) | Settle::Rejected(interrupt, _)) => (
            SessionPhase::Interrupted {
                interrupt: interrupt.clone(),
            },
            here,
            exec.task.all_journals(),
        ),
        // A value too deep to store was refused before it was written: the
        // session is still ours, and records the failure.
        Err(e @ RunError::Store(StoreError::TooDeep(_))) => (
            SessionPhase::Failed {
                error: e.to_string(),
            },
            here,
            exec.task.all_journals(),
        ),
        // The session is no longer ours to write.
        Err(RunError::Store(_) | RunError::LeaseLost { .. }) => return result,
        Err(RunError::Branch { source, .. })
            if matches!(**source, RunError::Store(_) | RunError::LeaseLost { .. }) =>
        {
            return result;
        }
        Err(e) => (
            SessionPhase::Failed {
                error: e.to_string(),
            },
            here,
            exec.task.all_journals(),
        ),
    };
    if let SessionLink::Attached { leased, .. } = &mut exec.session {
        *leased = false;
    }
    match cursor
        .settle(phase, next, journals, harness.start_name())
        .await
    {
        Ok(()) => result,
        // What the settle would store (an interrupt's payload, a journal
        // value) is too deep: the session records the failure instead,
        // without them, rather than stay leased by a run that is over.
        Err(StoreError::TooDeep(too_deep)) => {
            let failed = SessionPhase::Failed {
                error: too_deep.to_string(),
            };
            // Boxed: this rare path would otherwise double the room the
            // settle takes in every run's future.
            let _ =
                Box::pin(cursor.settle(failed, next, Journals::new(), harness.start_name())).await;
            Err(RunError::Store(StoreError::TooDeep(too_deep)))
        }
        Err(e) => Err(RunError::Store(e)),
    }
}

/// The run's observers, as the model and tool calls of its steps reach
/// them.
struct ObserverHooks<S: HarnessState> {
    observers: Vec<Arc<dyn crate::observe::Observer<S>>>,
    info: RunInfo,
}

impl<S: HarnessState> CallHooks for ObserverHooks<S> {
    fn model_called<'a>(
        &'a self,
        step: &'a StepInfo,
        call: &'a ModelCallInfo<'a>,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            for o in &self.observers {
                o.model_called(&self.info, step, call).await;
            }
        })
    }

    fn tool_called<'a>(
        &'a self,
        step: &'a StepInfo,
        call: &'a ToolCallInfo<'a>,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            for o in &self.observers {
                o.tool_called(&self.info, step, call).await;
            }
        })
    }
}

/// What every task of one drive shares.
pub(super) struct Env<'a, S: HarnessState, C: Context> {
    pub(super) harness: &'a HarnessInner<S, C>,
    pub(super) ctx: &'a Arc<C>,
    pub(super) control: &'a Arc<RunControl<S>>,
    pub(super) emitter: Arc<dyn Emitter>,
    pub(super) info: &'a RunInfo,
    pub(super) cursor: Option<&'a Arc<SessionCursor>>,
    /// Steps completed by this run, every task's.
    pub(super) steps: AtomicU64,
    /// For a sub-agent's loop: its path, under which its records are kept.
    pub(super) scope: Option<TaskPath>,
    /// The run's observers, for model and tool calls (none without any).
    pub(super) hooks: Option<Arc<dyn CallHooks>>,
    /// The run's effect journal, if it has one besides the session.
    pub(super) effects: Option<Arc<dyn crate::effect::EffectJournal>>,
    /// When the run must have settled, if it has a deadline.
    pub(super) deadline: Option<crate::step::RunDeadline>,
}

async fn drive<S: HarnessState, C: Context>(
    env: &Env<'_, S, C>,
    root: &mut Task<S>,
) -> Result<Settle, RunError> {
    let observers = &env.harness.observers;
    let info = env.info;
    for o in observers {
        o.run_started(info).await;
    }
    env.control.events.send(RunEvent::Started {
        run_id: info.run_id.clone(),
        session_id: info.session_id.clone(),
    });
    let settled = match drive_task(env, root).await {
        Ok(TaskEnd::Ended(signal)) => Ok(Settle::Ended(signal)),
        Ok(TaskEnd::Stopped) => Ok(Settle::Stopped),
        Ok(TaskEnd::Interrupted(i)) => Ok(Settle::Interrupted(i)),
        Ok(TaskEnd::Rejected(i, reason)) => Ok(Settle::Rejected(i, reason)),
        // Only a branch joins.
        Ok(TaskEnd::Joined) => Ok(Settle::Ended(Signal::END)),
        Err(e) => Err(e),
    };
    let steps = env.steps.load(Ordering::SeqCst);
    let control = env.control;
    match &settled {
        Ok(Settle::Ended(signal)) => {
            finished(observers, control, info, signal, steps).await;
        }
        Ok(Settle::Stopped) => {
            finished(observers, control, info, &Signal::STOPPED, steps).await;
        }
        Ok(Settle::Interrupted(interrupt) | Settle::Rejected(interrupt, _)) => {
            if let Ok(Settle::Rejected(_, reason)) = &settled {
                control.events.send(RunEvent::AnswerRejected {
                    path: interrupt.path.clone(),
                    interrupt: interrupt.id.clone(),
                    reason: reason.clone(),
                });
            }
            for o in observers {
                o.interrupted(info, interrupt).await;
            }
            control
                .events
                .send(RunEvent::Interrupted(interrupt.clone()));
        }
        Err(e) => {
            tracing::warn!(error = %e, "run failed");
            for o in observers {
                o.run_failed(info, e).await;
            }
            control.events.send(RunEvent::Failed {
                error: e.to_string(),
            });
        }
    }
    settled
}

/// The name a step's commit gives as the task's next step: the step, the
/// join of a fork, or none when the run ends.
fn next_name<S: HarnessState, C: Context>(
    harness: &HarnessInner<S, C>,
    next: Target,
) -> Option<&str> {
    match next {
        Target::Step(i) => Some(&*harness.steps[i].name),
        Target::Fork(f) => Some(&*harness.steps[harness.forks[f].join].name),
        Target::End => None,
    }
}

/// Runs one task, step after step, until it ends, reaches its join, stops,
/// pauses or fails. A fork runs its branches (each a task) and goes on at
/// its join.
pub(super) fn drive_task<'a, S: HarnessState, C: Context>(
    env: &'a Env<'a, S, C>,
    task: &'a mut Task<S>,
) -> BoxFuture<'a, Result<TaskEnd, RunError>> {
    async move {
        let harness = env.harness;
        let observers = &harness.observers;
        let control = env.control;
        loop {
            if task.region.is_some()
                && let Some(end) = Box::pin(run_region(env, task)).await?
            {
                return Ok(end);
            }
            if control.stop.load(Ordering::Acquire) {
                return Ok(TaskEnd::Stopped);
            }
            let step = &harness.steps[task.at];
            let here = task.at;
            let own_loop = task.path.is_root() && task.branch.is_none() && env.scope.is_none();
            // A breakpoint before the step: only where the step is entered
            // afresh (not resumed, not retried from its journal).
            if own_loop
                && !std::mem::take(&mut task.past_breakpoint)
                && task.answering.is_none()
                && task.journal.responses.is_empty()
                && task.journal.once.is_empty()
                && breakpoint_at(control, here, true)
            {
                return Ok(TaskEnd::Interrupted(breakpoint(
                    Breakpoint::Before,
                    &step.name,
                    serde_json::json!({"breakpoint": "before", "step": &*step.name}),
                )));
            }
            let taken = env.steps.load(Ordering::SeqCst);
            if taken >= harness.step_limit {
                return Err(RunError::StepLimit {
                    limit: harness.step_limit,
                    step: step.name.to_string(),
                });
            }
            let step_info = StepInfo {
                name: Arc::clone(&step.name),
                path: task.path.clone(),
                index: taken,
            };
            for o in observers {
                o.step_started(env.info, &step_info).await;
            }
            control.events.send(RunEvent::StepStarted {
                path: task.path.clone(),
                step: Arc::clone(&step.name),
                index: taken,
            });
            let began = Instant::now();

            // No GenAI operation describes a loop step: an INTERNAL span
            // named after the step, in the run's conversation.
            let span = tracing::info_span!(
                "harness.step",
                otel.name = %format_args!("step {}", step.name),
                otel.kind = "internal",
                gen_ai.conversation.id = %env.info.session_id,
                step = %step.name,
                path = %task.path,
                // i64: OpenTelemetry has no unsigned integers.
                index = i64::try_from(taken).unwrap_or(i64::MAX),
            );
            let body = match (&step.run, &step.sub) {
                (Some(run), _) => Some(run_step(env, run, step, task).instrument(span).await),
                (None, Some(sub)) => Some(
                    Box::pin(run_sub(env, sub.as_ref(), step, task))
                        .instrument(span)
                        .await,
                ),
                (None, None) => None,
            };
            let update = match body {
                None => None,
                Some(Ok(update)) => Some(update),
                Some(Err(Halt::Stopped)) => return Ok(TaskEnd::Stopped),
                Some(Err(Halt::Interrupt(interrupt))) => {
                    return Ok(TaskEnd::Interrupted(interrupt));
                }
                Some(Err(Halt::Rejected(interrupt, reason))) => {
                    return Ok(TaskEnd::Rejected(interrupt, reason));
                }
                Some(Err(Halt::Error(e))) => return Err(e),
            };
            if let (Some(update), Some(writes)) = (&update, &step.writes)
                && let Some(field) = S::written(update)
                    .into_iter()
                    .find(|f| !writes.iter().any(|w| w == f))
            {
                return Err(RunError::UndeclaredWrite {
                    step: step.name.to_string(),
                    field: field.to_string(),
                });
            }
            if let Some(update) = &update {
                // Observers see the update before it is merged, by
                // reference, so observing costs no copy of it.
                for o in observers {
                    o.step_finished(env.info, &step_info, update, began.elapsed())
                        .await;
                }
            }
            let event_update = if control.events.active() {
                update.clone()
            } else {
                None
            };
            // Serialized before it is merged: the stored update is the step's own.
            let stored_update = match env.cursor {
                Some(_) => Some(match &update {
                    Some(u) => stored_checked(u).map_err(|e| {
                        RunError::Store(StoreError::backend(format!(
                            "the update of step `{}` cannot be stored: {e}",
                            step.name
                        )))
                    })?,
                    None => Value::Object(serde_json::Map::new()),
                }),
                None => None,
            };
            if let Some(update) = update {
                let state = Arc::make_mut(&mut task.state);
                match &mut task.branch {
                    Some(branch) => {
                        guarded(&step.name, "reducer", || state.apply(update.clone()))?;
                        branch.updates.push(update);
                    }
                    None => guarded(&step.name, "reducer", || state.apply(update))?,
                }
            }

            let (next, signal) = match &step.exits {
                Exits::Next(t) => (*t, None),
                Exits::On(on) => {
                    let Some(route) = &step.route else {
                        // Validation guarantees a route wherever there is `.on`.
                        return Err(RunError::UndeclaredSignal {
                            step: step.name.to_string(),
                            signal: Signal::new(""),
                            declared: on.iter().map(|(s, _)| s.clone()).collect(),
                        });
                    };
                    let signal = guarded(&step.name, "route", || route(&task.state))?;
                    match on.iter().find(|(s, _)| *s == signal) {
                        Some((_, t)) => (*t, Some(signal)),
                        None => {
                            return Err(RunError::UndeclaredSignal {
                                step: step.name.to_string(),
                                signal,
                                declared: on.iter().map(|(s, _)| s.clone()).collect(),
                            });
                        }
                    }
                }
            };
            let steps_this_run = env.steps.fetch_add(1, Ordering::SeqCst) + 1;
            task.journal = StepJournal::default();
            task.answering = None;
            task.told = None;
            task.input = None;
            // Where the fork's branches count their visits from: the
            // session's steps once this one is recorded.
            let base = match env.cursor {
                Some(c) => c.steps() + 1,
                None => steps_this_run,
            };
            let fork = match next {
                Target::Fork(f) => Some(start_region(env, task, f, base)?),
                _ => None,
            };
            let joins = matches!(
                (next, &task.branch),
                (Target::Step(i), Some(b)) if b.join == i
            );
            if let Some(b) = &mut task.branch {
                b.visit += 1;
            }
            if let (Some(cursor), Some(stored)) = (env.cursor, stored_update) {
                let committed = match (&env.scope, &task.branch) {
                    // A sub-agent's loop: its records, under its path.
                    (Some(scope), branch) => {
                        let own = match branch {
                            None => CheckpointKind::Update(stored),
                            Some(_) => CheckpointKind::Branch(BranchRecord {
                                path: task.path.clone(),
                                update: stored,
                                next: if joins {
                                    None
                                } else {
                                    next_name(harness, next).map(str::to_string)
                                },
                                failed: None,
                            }),
                        };
                        let ends = branch.is_none() && next == Target::End;
                        let mut records = vec![ChildRecord {
                            path: scope.clone(),
                            next: match branch {
                                None => next_name(harness, next).map(str::to_string),
                                Some(_) => None,
                            },
                            signal: if ends {
                                Some(signal.clone().unwrap_or(Signal::END))
                            } else {
                                None
                            },
                            record: Box::new(own),
                        }];
                        if let Some(fork) = &fork {
                            records.push(ChildRecord {
                                path: scope.clone(),
                                next: None,
                                signal: None,
                                record: Box::new(CheckpointKind::Fork(fork.clone())),
                            });
                        }
                        cursor
                            .child_done(ChildDone {
                                step: &step.name,
                                records,
                                is_step: true,
                                clear: vec![task.path.clone()],
                                steps_this_run,
                            })
                            .await
                    }
                    (None, None) => {
                        let state = &task.state;
                        let measure = || crate::session::head::json_len(&**state);
                        let snapshot = || {
                            stored_checked(&**state).map_err(|e| {
                                StoreError::backend(format!("the state cannot be stored: {e}"))
                            })
                        };
                        cursor
                            .step_done(
                                StepDone {
                                    step: &step.name,
                                    update: stored,
                                    next_step: next_name(harness, next),
                                    signal: signal.as_ref(),
                                    steps_this_run,
                                    fork: fork.clone(),
                                },
                                measure,
                                snapshot,
                            )
                            .await
                    }
                    (None, Some(_)) => {
                        cursor
                            .branch_done(BranchDone {
                                step: &step.name,
                                record: BranchRecord {
                                    path: task.path.clone(),
                                    update: stored,
                                    next: if joins {
                                        None
                                    } else {
                                        next_name(harness, next).map(str::to_string)
                                    },
                                    failed: None,
                                },
                                steps_this_run,
                                fork: fork.clone(),
                            })
                            .await
                    }
                };
                if let Err(e) = committed {
                    return Err(match e {
                        StoreError::Conflict { .. } => RunError::LeaseLost {
                            session: env.info.session_id.clone(),
                            reason: "another run took the session over".into(),
                        },
                        e => RunError::Store(e),
                    });
                }
            }
            if control.events.active() {
                control.events.send(RunEvent::StepFinished {
                    path: task.path.clone(),
                    step: Arc::clone(&step.name),
                    index: step_info.index,
                    elapsed: began.elapsed(),
                    update: event_update.unwrap_or_default(),
                    signal: signal.clone(),
                });
                if let Some(fork) = &fork {
                    control.events.send(RunEvent::Forked {
                        path: task.path.clone(),
                        step: Arc::clone(&step.name),
                        branches: fork.branches.iter().map(|b| b.path.clone()).collect(),
                    });
                }
            }
            match next {
                Target::Step(i) => {
                    if joins {
                        if let Some(b) = &mut task.branch {
                            b.done = true;
                        }
                        return Ok(TaskEnd::Joined);
                    }
                    task.at = i;
                    if own_loop && breakpoint_at(control, here, false) {
                        let next = &harness.steps[i].name;
                        return Ok(TaskEnd::Interrupted(breakpoint(
                            Breakpoint::After,
                            next,
                            serde_json::json!({"breakpoint": "after", "step": &*step.name,
                                               "next": &**next}),
                        )));
                    }
                }
                Target::Fork(f) => task.at = harness.forks[f].join,
                Target::End => {
                    if task.branch.is_some() {
                        // Validation refuses a branch that can end the run.
                        return Err(RunError::Step {
                            step: step.name.to_string(),
                            attempts: 1,
                            source: format!("branch `{}` ended the run", task.path).into(),
                        });
                    }
                    return Ok(TaskEnd::Ended(signal.unwrap_or(Signal::END)));
                }
            }
        }
    }
    .boxed()
}

/// Whether the run was given a breakpoint before (`before`) or after step
/// `at`.
fn breakpoint_at<S: HarnessState>(control: &RunControl<S>, at: usize, before: bool) -> bool {
    let points = control
        .breakpoints
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if before {
        points.before.contains(&at)
    } else {
        points.after.contains(&at)
    }
}

/// The interrupt of a breakpoint of the run's own loop, at step `step`.
fn breakpoint(side: Breakpoint, step: &str, payload: Value) -> Interrupt {
    Interrupt {
        id: InterruptId::random(),
        step: step.to_string(),
        path: TaskPath::root(),
        payload,
        breakpoint: Some(side),
    }
}

/// Starts fork `f` of `task`: its branches, as a region of the task, and
/// the record that the step's commit stores with it. `base`: the session's
/// steps once the forking step is recorded.
fn start_region<S: HarnessState, C: Context>(
    env: &Env<'_, S, C>,
    task: &mut Task<S>,
    f: usize,
    base: u64,
) -> Result<ForkRecord, RunError> {
    let harness = env.harness;
    let fork = &harness.forks[f];
    let starts: Vec<(TaskPath, usize, Option<Value>)> = match &fork.branches {
        Branches::Static(starts) => starts
            .iter()
            .map(|&s| (task.path.child(&harness.steps[s].name), s, None))
            .collect(),
        Branches::Each { step, inputs, max } => {
            let name = &harness.steps[*step].name;
            let fan_out = |reason| RunError::FanOut {
                step: harness.steps[task.at].name.to_string(),
                reason,
            };
            let inputs = guarded(&harness.steps[task.at].name, "fan-out's items", || {
                inputs(&task.state)
            })?
            .map_err(fan_out)?;
            if inputs.len() > *max {
                return Err(fan_out(format!(
                    "{} inputs, more than the {max} branches a fan-out may start \
                     (ForkBuilder::max_branches raises it)",
                    inputs.len()
                )));
            }
            inputs
                .into_iter()
                .enumerate()
                .map(|(i, input)| (task.path.child(&format!("{name}#{i}")), *step, Some(input)))
                .collect()
        }
    };
    let record = ForkRecord {
        path: task.path.clone(),
        fork: fork.id.clone(),
        join: harness.steps[fork.join].name.to_string(),
        branches: starts
            .iter()
            .map(|(path, at, input)| BranchStart {
                path: path.clone(),
                step: harness.steps[*at].name.to_string(),
                // Kept in the session: without the process's secrets, as
                // the state is (the branch itself runs on the input whole).
                input: input.clone().map(|mut input| {
                    crate::secrets::redact_json(&mut input);
                    input
                }),
            })
            .collect(),
    };
    task.region = Some(Region {
        fork: f,
        branches: starts
            .into_iter()
            .map(|(path, at, input)| Task {
                path,
                state: Arc::clone(&task.state),
                at,
                journal: StepJournal::default(),
                answering: None,
                told: None,
                input,
                branch: Some(BranchState {
                    join: fork.join,
                    updates: Vec::new(),
                    done: false,
                    visit: base,
                }),
                region: None,
                subs: BTreeMap::new(),
                past_breakpoint: false,
            })
            .collect(),
    });
    Ok(record)
}

/// Whether a branch's error is its own (a step failed) rather than the
/// run's (the store, the lease), so that a fork may collect it.
fn collectable(e: &RunError) -> bool {
    match e {
        RunError::Store(_) | RunError::LeaseLost { .. } => false,
        RunError::Branch { source, .. } => collectable(source),
        _ => true,
    }
}

/// Whether `e` is a [`RunError::Deadline`], in the branch or in a
/// sub-agent (or a nested fork's branch) it ran.
fn is_deadline(e: &RunError) -> bool {
    match e {
        RunError::Deadline { .. } => true,
        RunError::Branch { source, .. } | RunError::SubAgent { source, .. } => is_deadline(source),
        _ => false,
    }
}

/// Runs the branches of `task`'s fork that have not reached the join, at
/// most the fork's limit at once, and merges them at the join when all
/// have: `None`, and the task goes on at the join. A branch that pauses or
/// stops pauses the task (the other branches finish what they are doing
/// first); a branch that fails fails the run and cancels the others,
/// unless the fork collects errors.
async fn run_region<S: HarnessState, C: Context>(
    env: &Env<'_, S, C>,
    task: &mut Task<S>,
) -> Result<Option<TaskEnd>, RunError> {
    let Some(mut region) = task.region.take() else {
        return Ok(None);
    };
    let harness = env.harness;
    let fork = &harness.forks[region.fork];
    let mut paused: Vec<(usize, TaskEnd)> = Vec::new();
    let mut failed: Vec<(usize, RunError, bool)> = Vec::new();
    let outcome: Result<(), RunError> = async {
        // A journal that replays effects by their order needs the branches'
        // effects in an order a replay repeats: the branches run side by
        // side, and their effects take turns (`effect::turns`), at most the
        // fork's limit running at once. A fork inside such a branch is part
        // of the branch's own sequence: its branches run one after another.
        let ordered = env.effects.as_ref().is_some_and(|j| j.ordered());
        let ended: Vec<bool> = region
            .branches
            .iter()
            .map(|b| b.branch.as_ref().is_some_and(|b| b.done))
            .collect();
        let turns = (ordered && !crate::effect::turns::taking_turns()).then(|| {
            let batched = env.effects.as_ref().is_some_and(|j| j.batches());
            crate::effect::turns::Turns::new(ended.len(), &ended, fork.limit, batched)
        });
        let limit = match (&turns, ordered) {
            (Some(_), _) => ended.len().max(1),
            (None, true) => 1,
            (None, false) => fork.limit.max(1),
        };
        let mut todo = Vec::new();
        for (i, b) in region.branches.iter_mut().enumerate() {
            if !ended[i] {
                todo.push(match &turns {
                    Some(turns) => turns.branch(i, drive_branch(env, i, b)).boxed(),
                    None => drive_branch(env, i, b),
                });
            }
        }
        let mut running = futures::stream::iter(todo).buffer_unordered(limit);
        while let Some((i, path, result)) = running.next().await {
            match result {
                Ok(TaskEnd::Joined) => {}
                Ok(end) => paused.push((i, end)),
                Err(e) if fork.collect.is_some() && collectable(&e) => {
                    // Judged when the branch fails: a branch that failed
                    // before the deadline fell failed on its own.
                    let cut = is_deadline(&e)
                        && env
                            .deadline
                            .is_some_and(|d| tokio::time::Instant::now() >= d.at);
                    failed.push((i, e, cut));
                }
                // Dropping `running` cancels the other branches.
                Err(e) => {
                    return Err(RunError::Branch {
                        path,
                        source: Box::new(e),
                    });
                }
            }
        }
        Ok(())
    }
    .await;
    if let Err(e) = outcome {
        task.region = Some(region);
        return Err(e);
    }
    // Failed branches, collected as values: each reaches the join with the
    // update its error makes (after the updates of its completed steps).
    failed.sort_by_key(|(i, _, _)| *i);
    for (i, error, cut) in failed {
        let Some(collect) = &fork.collect else {
            break;
        };
        let b = &mut region.branches[i];
        let failure = BranchFailure {
            path: b.path.clone(),
            step: harness.steps[b.at].name.to_string(),
            error: error.to_string(),
            input: b.input.clone(),
            deadline: cut,
        };
        let update = match guarded(&harness.steps[b.at].name, "collect_errors", || {
            collect(failure)
        }) {
            Ok(update) => update,
            Err(error) => {
                task.region = Some(region);
                return Err(error);
            }
        };
        // It stands in the branch's place: a field that keeps one value it
        // may set only when a step of the branch declares it (the build's
        // check of parallel writes judged what the branch's steps declare);
        // one that merges, freely.
        let failed_step = &harness.steps[b.at];
        // A static branch by its name (the last part of its path), not its
        // position: a region rebuilt from a session of an older loop may
        // list other branches; one the loop no longer has is not judged.
        let start = match &fork.branches {
            Branches::Static(starts) => starts
                .iter()
                .copied()
                .find(|&s| b.path.as_str().rsplit('/').next() == Some(&*harness.steps[s].name)),
            Branches::Each { step, .. } => Some(*step),
        };
        if let Some(writes) = start.and_then(|start| branch_writes(harness, start, fork.join))
            && let Some(field) = S::written(&update)
                .into_iter()
                .find(|f| !writes.contains(*f) && !merges::<S>(f))
        {
            let error = RunError::UndeclaredCollectedWrite {
                branch: b.path.to_string(),
                step: failed_step.name.to_string(),
                field: field.to_string(),
            };
            task.region = Some(region);
            return Err(error);
        }
        if let Some(cursor) = env.cursor {
            let stored = stored_json(&update).map_err(|e| {
                RunError::Store(StoreError::backend(format!(
                    "the update made of branch `{}`'s error cannot be serialized: {e}",
                    b.path
                )))
            })?;
            let steps_this_run = env.steps.load(Ordering::SeqCst);
            let record = BranchRecord {
                path: b.path.clone(),
                update: stored,
                next: None,
                failed: Some(error.to_string()),
            };
            let step = &harness.steps[b.at].name;
            match &env.scope {
                Some(scope) => {
                    cursor
                        .child_done(ChildDone {
                            step,
                            records: vec![ChildRecord {
                                path: scope.clone(),
                                next: None,
                                signal: None,
                                record: Box::new(CheckpointKind::Branch(record)),
                            }],
                            is_step: true,
                            clear: vec![b.path.clone()],
                            steps_this_run,
                        })
                        .await
                }
                None => {
                    cursor
                        .branch_done(BranchDone {
                            step,
                            record,
                            steps_this_run,
                            fork: None,
                        })
                        .await
                }
            }
            .map_err(RunError::Store)?;
            env.steps.fetch_add(1, Ordering::SeqCst);
        }
        b.journal = StepJournal::default();
        b.region = None;
        if let Some(state) = &mut b.branch {
            state.updates.push(update);
            state.done = true;
        }
    }
    if !paused.is_empty() {
        // The first branch (in branch order) that asked a human is the
        // run's interrupt; the others ask again when resumed.
        paused.sort_by_key(|(i, end)| {
            (
                !matches!(end, TaskEnd::Interrupted(_) | TaskEnd::Rejected(..)),
                *i,
            )
        });
        task.region = Some(region);
        return Ok(paused.into_iter().next().map(|(_, end)| end));
    }
    // Every branch reached the join: merge in branch order.
    let join_name = &harness.steps[fork.join].name;
    let mut order = Vec::with_capacity(region.branches.len());
    for b in region.branches {
        order.push(b.path);
        let Some(branch) = b.branch else { continue };
        for update in branch.updates {
            let state = Arc::make_mut(&mut task.state);
            match &mut task.branch {
                Some(parent) => {
                    guarded(join_name, "reducer", || state.apply(update.clone()))?;
                    parent.updates.push(update);
                }
                None => guarded(join_name, "reducer", || state.apply(update))?,
            }
        }
    }
    let join = &harness.steps[fork.join].name;
    if let Some(cursor) = env.cursor {
        let record = JoinRecord {
            path: task.path.clone(),
            branches: order.clone(),
        };
        let steps_this_run = env.steps.load(Ordering::SeqCst);
        match &env.scope {
            Some(scope) => {
                cursor
                    .child_done(ChildDone {
                        step: join,
                        records: vec![ChildRecord {
                            path: scope.clone(),
                            next: None,
                            signal: None,
                            record: Box::new(CheckpointKind::Join(record)),
                        }],
                        is_step: false,
                        clear: order.clone(),
                        steps_this_run,
                    })
                    .await
            }
            None => cursor.joined(join, record, steps_this_run).await,
        }
        .map_err(|e| match e {
            StoreError::Conflict { .. } => RunError::LeaseLost {
                session: env.info.session_id.clone(),
                reason: "another run took the session over".into(),
            },
            e => RunError::Store(e),
        })?;
    }
    env.control.events.send(RunEvent::Joined {
        path: task.path.clone(),
        join: Arc::clone(join),
        branches: order,
    });
    task.at = fork.join;
    Ok(None)
}

/// One branch driven, with its position and path.
fn drive_branch<'a, S: HarnessState, C: Context>(
    env: &'a Env<'a, S, C>,
    i: usize,
    branch: &'a mut Task<S>,
) -> BoxFuture<'a, (usize, TaskPath, Result<TaskEnd, RunError>)> {
    let path = branch.path.clone();
    drive_task(env, branch)
        .map(move |result| (i, path, result))
        .boxed()
}

async fn finished<S: HarnessState>(
    observers: &[Arc<dyn crate::observe::Observer<S>>],
    control: &RunControl<S>,
    info: &RunInfo,
    signal: &Signal,
    steps: u64,
) {
    for o in observers {
        o.run_finished(info, signal, steps).await;
    }
    control.events.send(RunEvent::Finished {
        signal: signal.clone(),
        steps,
    });
}

/// Runs a step whose body is a sub-agent: its loop goes on from where it
/// paused (in this process, or as the session's log left it) and its
/// outcome becomes the step's update.
async fn run_sub<S: HarnessState, C: Context>(
    env: &Env<'_, S, C>,
    sub: &dyn crate::graph::SubStep<S, C>,
    step: &CompiledStep<S, C>,
    task: &mut Task<S>,
) -> Result<S::Update, Halt> {
    let path = task.path.child(&step.name);
    let held = task.subs.remove(&path);
    let span = tracing::info_span!(
        "harness.sub_agent",
        otel.name = %format_args!("invoke_agent {}", step.name),
        otel.kind = "internal",
        gen_ai.operation.name = "invoke_agent",
        gen_ai.agent.name = %step.name,
        gen_ai.conversation.id = %env.info.session_id,
        path = %path,
    );
    // The step's timeout bounds its sub-agent's run as a deadline: each of
    // the sub-agent's steps is cut at it, as at the run's own.
    let timeout = crate::step::RunDeadline::starting_now(step.timeout);
    let deadline = crate::step::RunDeadline::earliest(env.deadline, timeout);
    let timed = timeout.is_some() && deadline.map(|d| d.at) == timeout.map(|t| t.at);
    let call = SubCall {
        state: Arc::clone(&task.state),
        input: task.input.as_ref(),
        ctx: env.ctx,
        parent: task.path.clone(),
        path: path.clone(),
        held,
        cursor: env.cursor,
        info: env.info,
        stop: Arc::clone(&env.control.stop),
        emitter: Arc::clone(&env.emitter),
        hooks: env.hooks.clone(),
        effects: env.effects.clone(),
        deadline,
    };
    match sub.call(call).instrument(span).await {
        // The step's timeout fell (not the run's deadline): the step timed
        // out, once (a sub-agent step is not retried; its own steps retry
        // as they declare).
        Err(RunError::Deadline { .. }) if timed => Err(Halt::Error(RunError::Timeout {
            step: step.name.to_string(),
            limit: step.timeout.unwrap_or_default(),
            attempts: 1,
        })),
        Ok(SubEnd::Done(update)) => Ok(update),
        Ok(SubEnd::Paused(interrupt, held)) => {
            task.subs.insert(path, held);
            Err(Halt::Interrupt(interrupt))
        }
        Ok(SubEnd::Rejected(interrupt, reason, held)) => {
            task.subs.insert(path, held);
            Err(Halt::Rejected(interrupt, reason))
        }
        Ok(SubEnd::Stopped(held)) => {
            task.subs.insert(path, held);
            Err(Halt::Stopped)
        }
        // A step that cannot start its sub-agent names its own path.
        Err(
            e @ (RunError::Store(_) | RunError::LeaseLost { .. } | RunError::SubAgentStart { .. }),
        ) => Err(Halt::Error(e)),
        Err(e) => Err(Halt::Error(RunError::SubAgent {
            path,
            source: Box::new(e),
        })),
    }
}

enum Failure {
    Error(StepError),
    Timeout(Duration),
    /// The run's deadline fell while the step ran; never retried.
    Deadline(Duration),
}

/// A step's future with a limit: `None` once `at` has passed. Made after
/// the step's first poll was pending (`polled`): its own first poll then
/// only starts the timer, so that the step is not polled twice before the
/// task yields (a step that yields to the scheduler must really yield).
/// The timer is boxed, as the retry's sleep, so that it does not make every
/// step's future larger.
struct Limited<F> {
    fut: F,
    at: tokio::time::Instant,
    timer: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    polled: bool,
}

impl<F: std::future::Future + Unpin> std::future::Future for Limited<F> {
    type Output = Option<F::Output>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let this = self.get_mut();
        if std::mem::take(&mut this.polled) {
            // The step was polled just now, with this task's waker.
        } else if let std::task::Poll::Ready(out) = std::pin::Pin::new(&mut this.fut).poll(cx) {
            return std::task::Poll::Ready(Some(out));
        }
        let at = this.at;
        let timer = this
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
        timer.as_mut().poll(cx).map(|()| None)
    }
}

/// `f`, a piece of the user's code the loop calls beside a step's body
/// (`what`: its route, a reducer, a fan-out's items, …); a panic in it is
/// step `step`'s error, as a panic in the body is, rather than the run's
/// task's.
fn guarded<T>(step: &str, what: &str, f: impl FnOnce() -> T) -> Result<T, RunError> {
    crate::panics::caught(&format!("its {what}"), f).map_err(|message| RunError::Step {
        step: step.to_owned(),
        attempts: 1,
        source: message.into(),
    })
}

/// The error of a step that panicked, with the panic's message when it
/// has one (redacted, as a step's error is).
fn panicked(panic: &(dyn std::any::Any + Send)) -> StepError {
    StepError::msg(crate::panics::said("the step", panic))
}

/// Runs a step's `run`, with its timeout and retry policy.
async fn run_step<S: HarnessState, C: Context>(
    env: &Env<'_, S, C>,
    run: &crate::graph::RunFn<S, C>,
    step: &CompiledStep<S, C>,
    task: &mut Task<S>,
) -> Result<S::Update, Halt> {
    let info = env.info;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let visit = match (&task.branch, env.cursor) {
            (Some(b), _) => b.visit,
            (None, Some(cursor)) => cursor.steps(),
            (None, None) => env.steps.load(Ordering::SeqCst),
        };
        let sink = env
            .cursor
            .map(|cursor| Arc::clone(cursor) as Arc<dyn JournalSink>);
        let shared = Arc::new(
            CxShared::new(
                info.run_id.clone(),
                info.session_id.clone(),
                Arc::clone(&step.name),
                env.steps.load(Ordering::SeqCst),
                visit,
                attempt,
                std::mem::take(&mut task.journal),
                sink,
            )
            .within(
                task.path.clone(),
                task.input.clone(),
                Some(Arc::clone(&env.emitter)),
            )
            .observed(env.hooks.clone())
            .journaled(env.effects.clone())
            .answering(
                task.answering
                    .as_ref()
                    .map(|a| a.id.clone())
                    .filter(|id| task.told.as_ref() != Some(id)),
            ),
        );
        let cx = Cx {
            ctx: Arc::clone(env.ctx),
            shared: Arc::clone(&shared),
        };
        // A step that panics fails as if it had returned an error (its
        // retries included), rather than taking the run, and the worker or
        // server that drives it, down with it: a session whose step panics
        // would otherwise take down every worker that picks it up.
        let state = Arc::clone(&task.state);
        let fut = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(state, cx))) {
            Ok(fut) => fut,
            Err(panic) => Box::pin(std::future::ready(Err(panicked(&*panic)))),
        };
        let mut fut = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(fut));
        let settled = |r: std::thread::Result<Result<S::Update, StepError>>| match r {
            Ok(r) => r.map_err(Failure::Error),
            Err(panic) => Err(Failure::Error(panicked(&*panic))),
        };
        // The step's own timeout or the run's deadline, whichever falls
        // first.
        let first = step
            .timeout
            .map(|limit| (tokio::time::Instant::now() + limit, Failure::Timeout(limit)))
            .into_iter()
            .chain(env.deadline.map(|d| (d.at, Failure::Deadline(d.limit))))
            .min_by_key(|(at, _)| *at);
        let result = match first {
            None => settled(fut.await),
            // A step that only computes is done at its first poll: it needs
            // no timer (none could have cut it short anyway).
            Some((at, failure)) => match futures::poll!(&mut fut) {
                std::task::Poll::Ready(r) => settled(r),
                // Boxed: held across the await, it would make every
                // step's future larger, with or without a limit.
                std::task::Poll::Pending => match Box::pin(Limited {
                    fut,
                    at,
                    timer: None,
                    polled: true,
                })
                .await
                {
                    Some(r) => settled(r),
                    None => Err(failure),
                },
            },
        };
        let visit = shared.finish();
        task.journal = visit.journal;
        if visit.accepted {
            // Told once: a retry of the step reads the answer untold.
            task.told = task.answering.as_ref().map(|a| a.id.clone());
        }
        if let Some(rejected) = visit.rejected {
            // The unreadable answer is dropped, never replayed, and the run
            // waits on the interrupt it answered. Without that interrupt (a
            // journal written before answers were checked), the step runs
            // again without the answer and asks anew.
            task.journal.responses.truncate(rejected.index);
            match task.answering.take() {
                Some(interrupt) => return Err(Halt::Rejected(interrupt, rejected.reason)),
                None => {
                    attempt -= 1;
                    continue;
                }
            }
        }
        // An interrupt wins over the step's own result: the step asked to
        // pause, even if it swallowed the error.
        if let Some(interrupt) = visit.pending {
            return Err(Halt::Interrupt(interrupt));
        }
        let failure = match result {
            Ok(update) => return Ok(update),
            Err(f) => f,
        };
        let will_retry =
            attempt < step.retry.max_attempts() && !matches!(failure, Failure::Deadline(_));
        let rendered = match &failure {
            // A step's own error can quote what it ran (a tool's stderr):
            // redacted before the log and the event carry it.
            Failure::Error(e) => crate::secrets::redact(&e.to_string()).into_owned(),
            Failure::Timeout(limit) => format!("timed out after {limit:?}"),
            Failure::Deadline(limit) => {
                format!("cancelled: the run passed its deadline of {limit:?}")
            }
        };
        tracing::debug!(step = %step.name, attempt, will_retry, error = %rendered, "step attempt failed");
        env.control.events.send(RunEvent::StepFailed {
            path: task.path.clone(),
            step: Arc::clone(&step.name),
            attempt,
            error: rendered,
            will_retry,
        });
        if will_retry {
            let delay = step.retry.delay_before(attempt + 1);
            if !delay.is_zero() {
                Box::pin(tokio::time::sleep(delay)).await;
            }
            continue;
        }
        return Err(Halt::Error(match failure {
            Failure::Error(e) => RunError::Step {
                step: step.name.to_string(),
                attempts: attempt,
                source: without_secrets(e.into_source()),
            },
            Failure::Timeout(limit) => RunError::Timeout {
                step: step.name.to_string(),
                limit,
                attempts: attempt,
            },
            Failure::Deadline(limit) => RunError::Deadline {
                step: step.name.to_string(),
                limit,
            },
        }));
    }
}
