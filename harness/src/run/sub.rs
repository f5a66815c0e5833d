//! Sub-agents: a loop run as a step of another, with its own state type,
//! mapped in and out by code.

use super::control::RunControl;
use super::engine::{Env, Task, TaskEnd, attach_sub_journals, drive_task, task_from};
use super::events::EventHub;
use crate::error::RunError;
use crate::graph::{
    Branches, Exits, Harness, HarnessInner, StepBuilder, SubCall, SubEnd, SubShape, SubStep, Target,
};
use crate::session::{CheckpointKind, Journals, Span, child_visit, read_log, replay};
use crate::signal::Signal;
use crate::slots::{Context, NoSlots};
use crate::state::HarnessState;
use futures::future::BoxFuture;
use std::fmt;
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

type MapIn<S, CS> = Arc<dyn Fn(&S) -> CS + Send + Sync>;
type MapOut<S, CS> = Arc<dyn Fn(&S, SubOutcome<CS>) -> <S as HarnessState>::Update + Send + Sync>;
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
pub struct SubAgent<S: HarnessState, C: Context, CS: HarnessState, CC: Context> {
    child: Harness<CS, CC>,
    agent: CC::Agent,
    run: RunSlots<C, CC>,
    map_in: MapIn<S, CS>,
    map_out: MapOut<S, CS>,
}

impl<S: HarnessState, C: Context, CS: HarnessState, CC: Context> fmt::Debug
    for SubAgent<S, C, CS, CC>
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
            map_in: Arc::new(map_in),
            map_out: Arc::new(map_out),
        }
    }
}

impl<S: HarnessState, C: Context> StepBuilder<S, C> {
    /// The step's body is another loop, run inside the step: see
    /// [`SubAgent`]. The step's update is what the sub-agent's `map_out`
    /// makes of its outcome.
    #[must_use]
    pub fn sub_agent<CS: HarnessState, CC: Context>(mut self, sub: SubAgent<S, C, CS, CC>) -> Self {
        self.step.run = None;
        self.step.sub = Some(Arc::new(sub));
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

impl<S: HarnessState, C: Context, CS: HarnessState, CC: Context> SubAgent<S, C, CS, CC> {
    /// The sub-agent's loop as its step's visit left it: fresh, or rebuilt
    /// from the session's log with `journals`.
    async fn start(
        &self,
        call: &SubCall<'_, S, C>,
        mut journals: Journals,
    ) -> Result<Start<CS>, RunError> {
        let inner: &HarnessInner<CS, CC> = &self.child.inner;
        let initial = (self.map_in)(&call.state);
        let fresh = |initial: CS, mut journals: Journals| {
            let mut root = Task::root(
                initial,
                inner.start,
                journals.remove(&call.path).unwrap_or_default(),
            );
            root.path = call.path.clone();
            attach_sub_journals(&mut root, journals);
            Start::Go(Box::new(root))
        };
        let Some(cursor) = call.cursor else {
            return Ok(fresh(initial, journals));
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
            return Ok(fresh(initial, journals));
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
        Ok(Start::Go(Box::new(root)))
    }
}

impl<S: HarnessState, C: Context, CS: HarnessState, CC: Context> SubStep<S, C>
    for SubAgent<S, C, CS, CC>
{
    fn call<'a>(
        &'a self,
        call: SubCall<'a, S, C>,
    ) -> BoxFuture<'a, Result<SubEnd<S::Update>, RunError>> {
        Box::pin(async move {
            let mut call = call;
            let held = call.held.take();
            let start = match held {
                None => self.start(&call, Journals::new()).await?,
                Some(held) => match held.into_any().downcast::<Task<CS>>() {
                    Ok(task) => Start::Go(task),
                    Err(other) => {
                        let journals = other.downcast::<Journals>().map(|j| *j).unwrap_or_default();
                        self.start(&call, journals).await?
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
                    return Ok(SubEnd::Done((self.map_out)(&call.state, outcome)));
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
                    SubEnd::Done((self.map_out)(&call.state, outcome))
                }
                TaskEnd::Joined => {
                    let outcome = SubOutcome {
                        signal: Signal::END,
                        state: Arc::unwrap_or_clone(root.state),
                        steps,
                    };
                    SubEnd::Done((self.map_out)(&call.state, outcome))
                }
                TaskEnd::Interrupted(interrupt) => SubEnd::Paused(interrupt, Box::new(root)),
                TaskEnd::Rejected(interrupt, reason) => {
                    SubEnd::Rejected(interrupt, reason, Box::new(root))
                }
                TaskEnd::Stopped => SubEnd::Stopped(Box::new(root)),
            })
        })
    }

    fn shape(&self) -> SubShape {
        let inner = &self.child.inner;
        let mut edges = Vec::new();
        for (i, s) in inner.steps.iter().enumerate() {
            let mut push = |label: Option<String>, t: Target| match t {
                Target::Step(t) => edges.push((i, label, Some(t))),
                Target::End => edges.push((i, label, None)),
                Target::Fork(f) => {
                    let fork = &inner.forks[f];
                    match &fork.branches {
                        Branches::Static(starts) => {
                            for b in starts {
                                edges.push((i, label.clone(), Some(*b)));
                            }
                        }
                        Branches::Each { step, .. } => {
                            edges.push((i, Some("each".into()), Some(*step)));
                        }
                    }
                    edges.push((i, Some("join".into()), Some(fork.join)));
                }
            };
            match &s.exits {
                Exits::Next(t) => push(None, *t),
                Exits::On(on) => {
                    for (sig, t) in on {
                        push(Some(sig.to_string()), *t);
                    }
                }
            }
        }
        SubShape {
            steps: inner.steps.iter().map(|s| s.name.to_string()).collect(),
            start: inner.start,
            edges,
        }
    }
}
