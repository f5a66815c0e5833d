//! Sub-agents: a loop run as a step of another, with its own state type,
//! mapped in and out by code.

use super::control::RunControl;
use super::engine::{Env, Task, TaskEnd, attach_sub_journals, drive_task, task_from};
use super::events::EventHub;
use crate::error::RunError;
use crate::graph::TypeTag;
use crate::graph::{
    Harness, HarnessInner, StepBuilder, SubCall, SubEnd, SubShape, SubStep, SubStub,
};
use crate::session::{CheckpointKind, Journals, Span, child_visit, read_log, replay};
use crate::signal::Signal;
use crate::slots::{Context, NoSlots};
use crate::state::HarnessState;
use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// How a sub-agent's loop ended, as its [`SubAgent`]'s `map_out` gets it.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SubOutcome<CS> {
    /// The signal its loop ended with.
    pub signal: Signal,
    /// Its final state: all of it, so nothing is lost that `map_out` does
    /// not choose to drop.
    pub state: CS,
    /// The steps it took in this visit of its step (since the process last
    /// picked it up).
    pub steps: u64,
}

type MapIn<S, CS> = Arc<dyn Fn(&S, Option<&Value>) -> Result<CS, String> + Send + Sync>;
type MapOut<S, CS> = Arc<
    dyn Fn(&S, Option<&Value>, SubOutcome<CS>) -> Result<<S as HarnessState>::Update, String>
        + Send
        + Sync,
>;
type RunSlots<C, CC> = Arc<dyn Fn(&C) -> <CC as Context>::Run + Send + Sync>;

/// A loop (`Harness<CS, CC>`) run as a step of another loop, whose state is
/// `S`: [`map_in`](Self::new) makes the sub-agent's first state from the
/// parent's, `map_out` makes the parent step's update from the sub-agent's
/// outcome. Both are code, so no field is dropped unless the code drops it.
///
/// Declare it with [`StepBuilder::sub_agent`]. The sub-agent's steps run
/// under the step's path (`research`, `research/approve`): their events come
/// with that path, their checkpoints are kept in the parent's session under
/// it, and an interrupt inside the sub-agent pauses the parent run with an
/// [`Interrupt`](crate::Interrupt) whose `path` says where. Resuming the
/// parent with that interrupt's id — in this process or another, through the
/// session store — goes on inside the sub-agent at the step that asked; its
/// completed steps are not run again.
///
/// A sub-agent made with [`each`](Self::each) takes a fan-out's item `I`
/// as well: its step starts the branches of a
/// [`fan_out`](crate::StepBuilder::fan_out), one sub-agent run per item.
/// [`Dispatch`] picks one of several such sub-agents by the item's role.
///
/// ```
/// use harness::{Cx, Harness, HarnessState, JsonSchema, StepResult, SubAgent, create_agent, schemars};
/// use std::sync::Arc;
/// # use serde::{Deserialize, Serialize};
/// #[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
/// struct Research {
///     question: String,
///     #[field(reduce = append)]
///     notes: Vec<String>,
/// }
///
/// #[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
/// struct Report {
///     topic: String,
///     #[field(reduce = append)]
///     findings: Vec<String>,
/// }
///
/// let research = Harness::<Research>::builder()
///     .step("look").run(async |s: Arc<Research>| {
///         Ok(ResearchUpdate::new().notes(vec![format!("about {}", s.question)]))
///     }).end()
///     .start("look")
///     .build()?;
///
/// let report = Harness::<Report>::builder()
///     .step("research").sub_agent(SubAgent::new(
///         &research,
///         |r: &Report| Research { question: r.topic.clone(), notes: vec![] },
///         |_: &Report, done| ReportUpdate::new().findings(done.state.notes),
///     )).end()
///     .start("research")
///     .build()?;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
/// let agent = create_agent("report", &report);
/// let out = agent.run(Report { topic: "tides".into(), findings: vec![] }).await?;
/// assert_eq!(out.state.findings, ["about tides"]);
/// # Ok::<(), harness::RunError>(()) })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct SubAgent<S: HarnessState, C: Context, CS: HarnessState, CC: Context, I = ()> {
    child: Harness<CS, CC>,
    agent: CC::Agent,
    run: RunSlots<C, CC>,
    map_in: MapIn<S, CS>,
    map_out: MapOut<S, CS>,
    input: Option<TypeTag>,
    item: PhantomData<fn(I)>,
}

impl<S: HarnessState, C: Context, CS: HarnessState, CC: Context, I> fmt::Debug
    for SubAgent<S, C, CS, CC, I>
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SubAgent")
            .field("child", &self.child)
            .finish_non_exhaustive()
    }
}

impl<S: HarnessState, C: Context, CS: HarnessState, CC: Context> SubAgent<S, C, CS, CC> {
    /// A sub-agent whose context has no agent or run slots (give those with
    /// [`with_slots`](Self::with_slots)).
    pub fn new(
        child: &Harness<CS, CC>,
        map_in: impl Fn(&S) -> CS + Send + Sync + 'static,
        map_out: impl Fn(&S, SubOutcome<CS>) -> S::Update + Send + Sync + 'static,
    ) -> Self
    where
        CC::Agent: NoSlots,
        CC::Run: NoSlots,
    {
        Self::with_slots(
            child,
            CC::Agent::none(),
            |_: &C| CC::Run::none(),
            map_in,
            map_out,
        )
    }

    /// A sub-agent with its context's agent slots, and its run slots made
    /// from the parent's context at each visit of its step.
    pub fn with_slots(
        child: &Harness<CS, CC>,
        agent: CC::Agent,
        run: impl Fn(&C) -> CC::Run + Send + Sync + 'static,
        map_in: impl Fn(&S) -> CS + Send + Sync + 'static,
        map_out: impl Fn(&S, SubOutcome<CS>) -> S::Update + Send + Sync + 'static,
    ) -> Self {
        Self {
            child: child.clone(),
            agent,
            run: Arc::new(run),
            map_in: Arc::new(move |s, _| Ok(map_in(s))),
            map_out: Arc::new(move |s, _, done| Ok(map_out(s, done))),
            input: None,
            item: PhantomData,
        }
    }
}

impl<S, C, CS, CC, I> SubAgent<S, C, CS, CC, I>
where
    S: HarnessState,
    C: Context,
    CS: HarnessState,
    CC: Context,
    I: DeserializeOwned + 'static,
{
    /// A sub-agent run once per item of a fan-out: its step starts the
    /// fan-out's branches (`.fan_out(step, |s| items)`), and `map_in` and
    /// `map_out` get the branch's item as well as its state. The item type
    /// is checked against the fan-out's when the loop is built.
    pub fn each(
        child: &Harness<CS, CC>,
        map_in: impl Fn(&S, &I) -> CS + Send + Sync + 'static,
        map_out: impl Fn(&S, &I, SubOutcome<CS>) -> S::Update + Send + Sync + 'static,
    ) -> Self
    where
        CC::Agent: NoSlots,
        CC::Run: NoSlots,
    {
        Self::each_with_slots(
            child,
            CC::Agent::none(),
            |_: &C| CC::Run::none(),
            map_in,
            map_out,
        )
    }

    /// [`each`](Self::each), with the sub-agent's agent slots, and its run
    /// slots made from the parent's context at each visit of its step.
    pub fn each_with_slots(
        child: &Harness<CS, CC>,
        agent: CC::Agent,
        run: impl Fn(&C) -> CC::Run + Send + Sync + 'static,
        map_in: impl Fn(&S, &I) -> CS + Send + Sync + 'static,
        map_out: impl Fn(&S, &I, SubOutcome<CS>) -> S::Update + Send + Sync + 'static,
    ) -> Self {
        Self {
            child: child.clone(),
            agent,
            run: Arc::new(run),
            map_in: Arc::new(move |s, item| Ok(map_in(s, &item_of::<I>(item)?))),
            map_out: Arc::new(move |s, item, done| Ok(map_out(s, &item_of::<I>(item)?, done))),
            input: Some(TypeTag::of::<I>()),
            item: PhantomData,
        }
    }
}

/// The fan-out item a sub-agent made with `each` takes, read as an `I`.
fn item_of<I: DeserializeOwned>(item: Option<&Value>) -> Result<I, String> {
    let item = item.ok_or_else(|| {
        "it takes a fan-out's item, and its step was not started by a fan-out".to_string()
    })?;
    I::deserialize(item)
        .map_err(|e| format!("its item is not a `{}`: {e}", crate::short_type_name::<I>()))
}

type RoleOf = Arc<dyn Fn(&Value) -> Result<String, String> + Send + Sync>;

/// A step that runs one of several sub-agents for each item of a fan-out,
/// chosen by the item's role: an orchestrator's worker pool.
///
/// Each sub-agent is made with [`SubAgent::each`] for the same item type
/// `I`, and has its own state and context types. The role is read from the
/// item by the function given to [`by`](Self::by); an item whose role has
/// no sub-agent fails its branch with [`RunError::SubAgentStart`], which a
/// fork that [collects errors](crate::ForkBuilder::collect_errors) turns
/// into an update like any other failure.
///
/// The chosen sub-agent runs under the step's path in its branch
/// (`task#2/task`), is kept in the session like any sub-agent, and is
/// resumed, after an interrupt or a crash, as the same role: the role is a
/// function of the item, which the branch keeps.
///
/// ```
/// use harness::{Dispatch, Harness, HarnessState, JsonSchema, SubAgent, create_agent, schemars};
/// use std::sync::Arc;
/// # use serde::{Deserialize, Serialize};
/// #[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
/// struct Job { role: String, text: String }
///
/// #[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
/// struct Work { text: String, done: String }
///
/// #[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
/// struct Board {
///     jobs: Vec<Job>,
///     #[field(reduce = append)]
///     results: Vec<String>,
/// }
///
/// let shout = Harness::<Work>::builder()
///     .step("shout").run(async |w: Arc<Work>| Ok(WorkUpdate::new().done(w.text.to_uppercase())))
///     .end().start("shout").build()?;
/// let whisper = Harness::<Work>::builder()
///     .step("whisper").run(async |w: Arc<Work>| Ok(WorkUpdate::new().done(w.text.to_lowercase())))
///     .end().start("whisper").build()?;
/// let worker = |child: &Harness<Work>| SubAgent::each(
///     child,
///     |_: &Board, job: &Job| Work { text: job.text.clone(), done: String::new() },
///     |_: &Board, _: &Job, out| BoardUpdate::new().results(vec![out.state.done]),
/// );
///
/// let board = Harness::<Board>::builder()
///     .step("plan").run(async |_: Arc<Board>| Ok(BoardUpdate::new()))
///     .fan_out("job", |b: &Board| b.jobs.clone()).join("done")
///     .step("job").dispatch(
///         Dispatch::by(|job: &Job| job.role.clone())
///             .agent("shout", worker(&shout))
///             .agent("whisper", worker(&whisper)),
///     ).writes(["results"]).next("done")
///     .step("done").run(async |_: Arc<Board>| Ok(BoardUpdate::new())).end()
///     .start("plan")
///     .build()?;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
/// let jobs = vec![
///     Job { role: "shout".into(), text: "Hi".into() },
///     Job { role: "whisper".into(), text: "Bye".into() },
/// ];
/// let out = create_agent("board", &board).run(Board { jobs, results: vec![] }).await?;
/// assert_eq!(out.state.results, ["HI", "bye"]);
/// # Ok::<(), harness::RunError>(()) })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Dispatch<S: HarnessState, C: Context, I> {
    role_of: RoleOf,
    agents: BTreeMap<String, Arc<dyn SubStep<S, C>>>,
    item: PhantomData<fn(I)>,
}

impl<S: HarnessState, C: Context, I> fmt::Debug for Dispatch<S, C, I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dispatch")
            .field("roles", &self.agents.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl<S: HarnessState, C: Context, I: DeserializeOwned + 'static> Dispatch<S, C, I> {
    /// A dispatch on the role `role_of` reads from each item, with no
    /// sub-agents yet.
    pub fn by(role_of: impl Fn(&I) -> String + Send + Sync + 'static) -> Self {
        Self {
            role_of: Arc::new(move |item| Ok(role_of(&item_of::<I>(Some(item))?))),
            agents: BTreeMap::new(),
            item: PhantomData,
        }
    }

    /// Runs `sub` for the items whose role is `role` (a later agent for the
    /// same role replaces an earlier one).
    #[must_use]
    pub fn agent<CS: HarnessState, CC: Context>(
        mut self,
        role: impl Into<String>,
        sub: SubAgent<S, C, CS, CC, I>,
    ) -> Self {
        self.agents.insert(role.into(), Arc::new(sub));
        self
    }

    /// The roles that have a sub-agent, in order: what a planner may name.
    pub fn roles(&self) -> impl Iterator<Item = &str> {
        self.agents.keys().map(String::as_str)
    }
}

impl<S: HarnessState, C: Context, I: 'static> SubStep<S, C> for Dispatch<S, C, I> {
    fn call<'a>(
        &'a self,
        call: SubCall<'a, S, C>,
    ) -> BoxFuture<'a, Result<SubEnd<S::Update>, RunError>> {
        let start = |reason: String| RunError::SubAgentStart {
            path: call.path.clone(),
            reason,
        };
        let role = match call.input {
            Some(item) => (self.role_of)(item).map_err(&start),
            None => Err(start(
                "it dispatches a fan-out's items, and its step was not started by a fan-out".into(),
            )),
        };
        let agent = role.and_then(|role| {
            self.agents.get(&role).ok_or_else(|| {
                start(format!(
                    "no sub-agent is registered for role `{role}` (roles: {})",
                    self.agents.keys().cloned().collect::<Vec<_>>().join(", ")
                ))
            })
        });
        match agent {
            Ok(agent) => agent.call(call),
            Err(e) => Box::pin(async move { Err(e) }),
        }
    }

    fn shapes(&self) -> Vec<(Option<String>, SubShape)> {
        self.agents
            .iter()
            .flat_map(|(role, agent)| {
                agent
                    .shapes()
                    .into_iter()
                    .map(move |(_, shape)| (Some(role.clone()), shape))
            })
            .collect()
    }

    fn input(&self) -> Option<TypeTag> {
        Some(TypeTag::of::<I>())
    }
}

impl<S: HarnessState, C: Context> StepBuilder<S, C> {
    /// The step's body is another loop, run inside the step: see
    /// [`SubAgent`]. The step's update is what the sub-agent's `map_out`
    /// makes of its outcome.
    #[must_use]
    pub fn sub_agent<CS: HarnessState, CC: Context, I: 'static>(
        mut self,
        sub: SubAgent<S, C, CS, CC, I>,
    ) -> Self {
        let already = self.step.run.is_some() || self.step.sub.is_some();
        self.step.again(already, crate::graph::def::BODY);
        self.step.run = None;
        self.step.input = sub.input;
        self.step.sub = Some(Arc::new(sub));
        self
    }

    /// The step runs, for each item of the fan-out that starts its branches,
    /// the sub-agent of the item's role: see [`Dispatch`].
    #[must_use]
    pub fn dispatch<I: 'static>(mut self, dispatch: Dispatch<S, C, I>) -> Self {
        let already = self.step.run.is_some() || self.step.sub.is_some();
        self.step.again(already, crate::graph::def::BODY);
        self.step.run = None;
        self.step.input = dispatch.input();
        self.step.sub = Some(Arc::new(dispatch));
        self
    }
}

/// Where the sub-agent's loop goes on from.
enum Start<CS: HarnessState> {
    Go(Box<Task<CS>>),
    /// It had ended before its step was recorded (the process stopped in
    /// between): its signal and state.
    Ended(Signal, CS),
}

impl<S: HarnessState, C: Context, CS: HarnessState, CC: Context, I> SubAgent<S, C, CS, CC, I> {
    /// The error a sub-agent that cannot start (or end) its loop fails with.
    fn cannot(call: &SubCall<'_, S, C>, reason: String) -> RunError {
        RunError::SubAgentStart {
            path: call.path.clone(),
            reason,
        }
    }

    /// The parent step's update from the sub-agent's outcome.
    fn finish(
        &self,
        call: &SubCall<'_, S, C>,
        outcome: SubOutcome<CS>,
    ) -> Result<SubEnd<S::Update>, RunError> {
        crate::panics::caught("its map_out", || {
            (self.map_out)(&call.state, call.input, outcome)
        })
        .and_then(|update| update)
        .map(SubEnd::Done)
        .map_err(|reason| Self::cannot(call, reason))
    }

    /// The sub-agent's loop as its step's visit left it: fresh, or rebuilt
    /// from the session's log with `journals`.
    async fn start(&self, call: &SubCall<'_, S, C>, stub: SubStub) -> Result<Start<CS>, RunError> {
        let SubStub {
            mut journals,
            answering,
        } = stub;
        let inner: &HarnessInner<CS, CC> = &self.child.inner;
        let initial =
            crate::panics::caught("its map_in", || (self.map_in)(&call.state, call.input))
                .and_then(|initial| initial)
                .map_err(|r| Self::cannot(call, r))?;
        let fresh =
            |initial: CS, mut journals: Journals, answering: Option<crate::step::Interrupt>| {
                let mut root = Task::root(
                    initial,
                    inner.start,
                    journals.remove(&call.path).unwrap_or_default(),
                );
                root.path = call.path.clone();
                attach_sub_journals(&mut root, journals);
                if let Some(interrupt) = answering {
                    root.mark_answering(interrupt);
                }
                Start::Go(Box::new(root))
            };
        let Some(cursor) = call.cursor else {
            return Ok(fresh(initial, journals, answering));
        };
        let head = cursor.head().await;
        if journals.is_empty() {
            journals.extend(
                head.branch_journals
                    .iter()
                    .filter(|(p, _)| p.starts_with(&call.path))
                    .map(|(p, j)| (p.clone(), j.clone())),
            );
        }
        let log = read_log(&*cursor.store, &head, Span::Latest).await?;
        let visit = child_visit(&log, &call.parent, &call.path);
        if visit.is_empty() {
            return Ok(fresh(initial, journals, answering));
        }
        // The sub-agent's own last update, if it ended the loop.
        let ended = visit.iter().rev().find_map(|(_, kind, next)| match kind {
            CheckpointKind::Update(_) => Some(next.clone().flatten().is_none()),
            _ => None,
        });
        let mut tasks = replay::<CS>(
            &head.session_id,
            call.path.clone(),
            initial,
            visit.into_iter(),
        )?;
        let own = tasks.get(&call.path);
        if ended == Some(true) && own.is_some_and(|t| t.open.is_none()) {
            let signal = log
                .iter()
                .rev()
                .find_map(|cp| match &cp.kind {
                    CheckpointKind::Child(c) if c.path == call.path => Some(c.signal.clone()),
                    _ => None,
                })
                .flatten()
                .unwrap_or(Signal::END);
            let state = tasks
                .remove(&call.path)
                .map(|t| t.state)
                .unwrap_or_default();
            return Ok(Start::Ended(signal, state));
        }
        let at = match own.and_then(|t| t.next.clone()) {
            Some(name) => inner.step_index(&name).ok_or_else(|| {
                RunError::Store(crate::error::StoreError::backend(format!(
                    "the sub-agent `{}` goes on at `{name}`, which is not a step of its loop",
                    call.path
                )))
            })?,
            None => inner.start,
        };
        let mut root = task_from(
            inner,
            &head.session_id,
            &mut tasks,
            &mut journals,
            call.path.clone(),
            at,
            None,
        )
        .map_err(|e| RunError::Store(crate::error::StoreError::backend(e.to_string())))?;
        attach_sub_journals(&mut root, journals);
        if let Some(interrupt) = answering {
            root.mark_answering(interrupt);
        }
        Ok(Start::Go(Box::new(root)))
    }
}

impl<S: HarnessState, C: Context, CS: HarnessState, CC: Context, I> SubStep<S, C>
    for SubAgent<S, C, CS, CC, I>
{
    fn call<'a>(
        &'a self,
        call: SubCall<'a, S, C>,
    ) -> BoxFuture<'a, Result<SubEnd<S::Update>, RunError>> {
        Box::pin(async move {
            let mut call = call;
            let held = call.held.take();
            let start = match held {
                None => self.start(&call, SubStub::default()).await?,
                Some(held) => match held.into_any().downcast::<Task<CS>>() {
                    Ok(task) => Start::Go(task),
                    Err(other) => {
                        let stub = other.downcast::<SubStub>().map(|j| *j).unwrap_or_default();
                        self.start(&call, stub).await?
                    }
                },
            };
            let mut root = match start {
                Start::Go(root) => *root,
                Start::Ended(signal, state) => {
                    let outcome = SubOutcome {
                        signal,
                        state,
                        steps: 0,
                    };
                    return self.finish(&call, outcome);
                }
            };
            let inner = &self.child.inner;
            let ctx = Arc::new(CC::assemble(
                &inner.fixed,
                &self.agent,
                (self.run)(call.ctx),
            ));
            let control = Arc::new(RunControl {
                stop: Arc::clone(&call.stop),
                events: Arc::new(EventHub::forwarding(Arc::clone(&call.emitter))),
                // A sub-agent's loop has no breakpoints of its own.
                breakpoints: std::sync::Mutex::default(),
            });
            let env = Env {
                harness: inner,
                ctx: &ctx,
                control: &control,
                emitter: Arc::clone(&call.emitter),
                info: call.info,
                cursor: call.cursor,
                steps: AtomicU64::new(0),
                scope: Some(call.path.clone()),
                hooks: call.hooks.clone(),
                effects: call.effects.clone(),
                // The child's own deadline, from when it starts (or
                // resumes), where it falls before its parent's.
                deadline: crate::step::RunDeadline::earliest(
                    call.deadline,
                    crate::step::RunDeadline::starting_now(inner.deadline),
                ),
            };
            let end = drive_task(&env, &mut root).await?;
            let steps = env.steps.load(Ordering::SeqCst);
            Ok(match end {
                TaskEnd::Ended(signal) => {
                    let outcome = SubOutcome {
                        signal,
                        state: Arc::unwrap_or_clone(root.state),
                        steps,
                    };
                    self.finish(&call, outcome)?
                }
                TaskEnd::Joined => {
                    let outcome = SubOutcome {
                        signal: Signal::END,
                        state: Arc::unwrap_or_clone(root.state),
                        steps,
                    };
                    self.finish(&call, outcome)?
                }
                TaskEnd::Interrupted(interrupt) => SubEnd::Paused(interrupt, Box::new(root)),
                TaskEnd::Rejected(interrupt, reason) => {
                    SubEnd::Rejected(interrupt, reason, Box::new(root))
                }
                TaskEnd::Stopped => SubEnd::Stopped(Box::new(root)),
            })
        })
    }

    fn input(&self) -> Option<TypeTag> {
        self.input
    }

    fn shapes(&self) -> Vec<(Option<String>, SubShape)> {
        let inner = &self.child.inner;
        let edges = crate::graph::edges(&inner.steps, &inner.forks)
            .into_iter()
            .map(|(from, label, to, _)| (from, label, to))
            .collect();
        vec![(
            None,
            SubShape {
                steps: inner.steps.iter().map(|s| s.name.to_string()).collect(),
                start: inner.start,
                edges,
            },
        )]
    }
}
