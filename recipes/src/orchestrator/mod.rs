//! A planning orchestrator of sub-agents: a planner model turns a goal into
//! a [`Plan`] (a DAG of tasks, each naming a sub-agent by role), the tasks
//! whose dependencies are done run in parallel as sub-agents, a failure
//! leads to a replan, and a synthesizer writes the answer from the results.
//!
//! It is an ordinary [`Harness`] built from the public API: a fan-out whose
//! branches [`Dispatch`] to the sub-agent of each task's role, so it is
//! durable and resumable like any loop (see the guide's chapter,
//! [`crate::guide::orchestrator`]).
//!
//! A run tells its story in [`RunEvent::Custom`](harness::RunEvent::Custom)
//! events: `plan`, `wave`, `task` and `replan`, whose payload is a
//! [`ReplanEvent`]: the plan replaced and why, with each problem of the
//! plan (or failure of its tasks) as a sentence, so that a refused plan can
//! be shown as "replan of plan 1: task `b` needs `x`, …".

mod plan;
mod prompt;
#[cfg(test)]
mod tests;

pub use plan::{Plan, PlanProblem, PlanTask, check_plan};

use futures::future::BoxFuture;
use harness::llm::{LanguageModel, ModelRequest};
use harness::slots::NoSlots;
use harness::{
    BranchFailure, Context, Cx, Dispatch, Harness, HarnessBuilder, HarnessState, JsonSchema,
    LoopValidationError, StepError, StepResult, SubAgent, SubOutcome,
};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

/// The signals of the orchestrator's loop.
pub mod signals {
    /// The plan is good: run its ready tasks.
    pub const RUN: &str = "run";
    /// Ask the planner again (a bad plan, or a failed task).
    pub const REPLAN: &str = "replan";
    /// A wave of tasks ended and more are ready.
    pub const MORE: &str = "more";
    /// Every task is done: write the answer.
    pub const SYNTHESIZE: &str = "synthesize";
    /// The answer is written; the run ends with this signal.
    pub const DONE: &str = "done";
    /// The limit of replans was reached; the run ends with this signal and
    /// the state keeps every plan, result and failure.
    pub const GAVE_UP: &str = "gave_up";
}

/// The names of the orchestrator's steps.
pub mod steps {
    /// Asks the planner for a plan and checks it.
    pub const PLAN: &str = "plan";
    /// Starts a wave: one branch per ready task.
    pub const SCHEDULE: &str = "schedule";
    /// A branch: the sub-agent of the task's role.
    pub const TASK: &str = "task";
    /// The join of a wave: records it and decides what comes next.
    pub const COLLECT: &str = "collect";
    /// Writes the answer from the results.
    pub const SYNTHESIZE: &str = "synthesize";
}

/// What a sub-agent is given for its task: the fan-out's item.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TaskInput {
    /// The orchestrator's goal.
    pub goal: String,
    /// The task.
    pub task: PlanTask,
    /// The results of the tasks it needs, by id.
    pub inputs: BTreeMap<String, String>,
    /// The plan it belongs to (1 for the first).
    pub plan: u32,
    /// The wave it runs in (1 for the first).
    pub wave: u32,
}

/// A task's result: durable as soon as its sub-agent is done, in the
/// state's [`results`](OrchestratorState::results) from the wave's join on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TaskResult {
    /// The role of the sub-agent that did it.
    pub agent: String,
    /// What it produced.
    pub output: String,
    /// The plan and the wave it ran in.
    pub plan: u32,
    /// The wave it ran in.
    pub wave: u32,
}

/// A task that failed: its sub-agent's error, or the failure its result
/// reported. Displayed as `task `rhythm` (researcher) failed: {error}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TaskFailure {
    /// The task's id.
    pub task: String,
    /// The role of its sub-agent.
    pub agent: String,
    /// What went wrong.
    pub error: String,
    /// The plan it ran under.
    pub plan: u32,
    /// The wave it ran in.
    pub wave: u32,
    /// Whether the run's deadline cut the task short, rather than the
    /// task failing on its own (a step's timeout, a worker's own deadline,
    /// an error), as the fork said
    /// ([`BranchFailure::deadline`](harness::BranchFailure::deadline)).
    /// `None` in a failure stored before this field was added: then
    /// [`passed_deadline`](Self::passed_deadline) reads the error's text,
    /// as that version did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut_short: Option<bool>,
}

impl TaskFailure {
    /// Whether the task was cut short by the run's
    /// [deadline](harness::HarnessBuilder::deadline) rather than failing:
    /// [`cut_short`](Self::cut_short), as the fork reported it
    /// ([`BranchFailure::deadline`](harness::BranchFailure::deadline)).
    /// Such a failure is kept in [`OrchestratorState::failures`] but leads
    /// to no replan: the deadline ends the orchestrator's run (see the
    /// guide's chapter, [`crate::guide::orchestrator`]).
    ///
    /// A failure stored by a version before `cut_short` (`None`) is read as
    /// that version read it: cut short if its error is a
    /// [`RunError::Deadline`](harness::RunError::Deadline), possibly
    /// inside the sub-agent's or the branch's error, by its text.
    ///
    /// ```
    /// use harness_recipes::orchestrator::TaskFailure;
    ///
    /// let stored = |json: serde_json::Value| serde_json::from_value::<TaskFailure>(json).unwrap();
    /// let failure = serde_json::json!({
    ///     "task": "h", "agent": "work", "plan": 1, "wave": 1,
    ///     "error": "sub-agent `task#0/task` failed: the run passed its deadline of 2s in step `w`; \
    ///               raise it with .deadline(..), or remove it with .without_deadline()",
    /// });
    /// assert!(stored(failure.clone()).passed_deadline());
    /// let mut told = failure.clone();
    /// told["cut_short"] = false.into();
    /// assert!(!stored(told).passed_deadline());
    /// let mut other = failure;
    /// other["error"] = "step `w` failed after 1 attempt(s): broke".into();
    /// assert!(!stored(other).passed_deadline());
    /// ```
    pub fn passed_deadline(&self) -> bool {
        self.cut_short
            .unwrap_or_else(|| stored_before_cut_short(&self.error))
    }
}

/// Whether `error`, the text of a failure stored before
/// [`TaskFailure::cut_short`], is the run's deadline, as that version
/// read it: a [`RunError::Deadline`](harness::RunError::Deadline), possibly
/// inside the sub-agent's or the branch's error.
fn stored_before_cut_short(error: &str) -> bool {
    let mut error = error;
    // The sub-agent's and the branch's errors wrap their loop's.
    while let Some(rest) = error
        .strip_prefix("sub-agent `")
        .or_else(|| error.strip_prefix("branch `"))
    {
        match rest.split_once("` failed: ") {
            Some((_, inner)) => error = inner,
            None => return false,
        }
    }
    error.starts_with("the run passed its deadline of ")
}

impl fmt::Display for TaskFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "task `{}` ({}) failed: {}",
            self.task, self.agent, self.error
        )
    }
}

/// Why the planner was asked again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum ReplanReason {
    /// The plan could not run.
    Invalid {
        /// Every problem found.
        problems: Vec<PlanProblem>,
    },
    /// Tasks of the plan failed.
    Failed {
        /// The failures of the wave.
        failures: Vec<TaskFailure>,
    },
}

impl ReplanReason {
    /// Each problem of the plan, or each failure of its tasks, as a
    /// sentence, in order: what a person reading the run is shown.
    ///
    /// ```
    /// use harness_recipes::orchestrator::{PlanProblem, ReplanReason};
    ///
    /// let reason = ReplanReason::Invalid {
    ///     problems: vec![
    ///         PlanProblem::MissingDependency { task: "b".into(), missing: "x".into() },
    ///         PlanProblem::Cycle { cycle: vec!["a".into(), "b".into(), "a".into()] },
    ///     ],
    /// };
    /// assert_eq!(reason.messages(), [
    ///     "task `b` needs `x`, which is neither a task of the plan nor a finished one",
    ///     "tasks need each other in a cycle: a -> b -> a",
    /// ]);
    /// ```
    pub fn messages(&self) -> Vec<String> {
        match self {
            Self::Invalid { problems } => problems.iter().map(ToString::to_string).collect(),
            Self::Failed { failures } => failures.iter().map(ToString::to_string).collect(),
        }
    }
}

/// A plan replaced, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Replan {
    /// The plan's number (1 for the first).
    pub plan: u32,
    /// The plan itself.
    pub tasks: Plan,
    /// Why it was replaced.
    #[serde(flatten)]
    pub reason: ReplanReason,
}

/// The payload of the orchestrator's `replan` event (a
/// [`RunEvent::Custom`](harness::RunEvent::Custom) of kind `"replan"`): the
/// [`Replan`] the state keeps, and [`messages`](Self::messages), each problem
/// of the plan or failure of its tasks as a sentence, in order.
///
/// As JSON, for a plan that could not run (`"reason": "invalid"`, with its
/// `problems`, each tagged by `"problem"` as [`PlanProblem`] is):
///
/// ```json
/// {
///   "plan": 1,
///   "tasks": { "tasks": [{ "id": "b", "agent": "work", "instructions": "…", "needs": ["x"] }] },
///   "reason": "invalid",
///   "problems": [{ "problem": "missing_dependency", "task": "b", "missing": "x" }],
///   "messages": ["task `b` needs `x`, which is neither a task of the plan nor a finished one"]
/// }
/// ```
///
/// and for a plan whose tasks failed, `"reason": "failed"` with the
/// `failures` ([`TaskFailure`]s) in place of the problems:
///
/// ```json
/// {
///   "plan": 1,
///   "tasks": { "tasks": [ … ] },
///   "reason": "failed",
///   "failures": [{ "task": "rhythm", "agent": "researcher", "error": "…", "plan": 1, "wave": 1 }],
///   "messages": ["task `rhythm` (researcher) failed: …"]
/// }
/// ```
///
/// Read it back with `serde_json::from_value::<ReplanEvent>(payload)`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ReplanEvent {
    /// The plan replaced, and why.
    #[serde(flatten)]
    pub replan: Replan,
    /// Why, as sentences: [`ReplanReason::messages`].
    pub messages: Vec<String>,
}

impl ReplanEvent {
    /// The event of `replan`.
    pub fn new(replan: Replan) -> Self {
        let messages = replan.reason.messages();
        Self { replan, messages }
    }
}

/// Where the orchestrator is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Asking the planner (the first time, or again).
    #[default]
    Planning,
    /// Running the plan's tasks.
    Running,
    /// Every task is done; writing the answer.
    Synthesizing,
    /// The answer is written.
    Done,
    /// The limit of replans was reached.
    GaveUp,
}

/// The orchestrator's state: the goal, the current plan, each task's result
/// or failure, the replans and the answer. Every checkpoint keeps it, so
/// time travel shows the plan and each task's state at each step.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
pub struct OrchestratorState {
    /// The goal the plan is for.
    pub goal: String,
    /// The plan being run (the last one the planner gave that checked).
    pub plan: Plan,
    /// How many plans the planner has given.
    #[field(reduce = add)]
    pub plans: u32,
    /// How many waves of tasks have started.
    #[field(reduce = add)]
    pub waves: u32,
    /// The results of the tasks done, by task id, from every plan; a wave's
    /// results are merged in when the whole wave has ended (its join).
    #[field(reduce = extend)]
    pub results: BTreeMap<String, TaskResult>,
    /// Every task failure, in order.
    #[field(reduce = append)]
    pub failures: Vec<TaskFailure>,
    /// Every plan replaced, with why.
    #[field(reduce = append)]
    pub replans: Vec<Replan>,
    /// Where the orchestrator is.
    pub phase: Phase,
    /// The answer, once written.
    pub answer: Option<String>,
}

impl OrchestratorState {
    /// A state for `goal`, nothing planned yet.
    pub fn new(goal: impl Into<String>) -> Self {
        Self {
            goal: goal.into(),
            ..Self::default()
        }
    }

    /// The tasks of the plan not done yet whose dependencies all are: what
    /// the next wave runs, as its sub-agents are given them.
    pub fn ready(&self) -> Vec<TaskInput> {
        self.plan
            .tasks
            .iter()
            .filter(|t| !self.results.contains_key(&t.id))
            .filter(|t| t.needs.iter().all(|n| self.results.contains_key(n)))
            .map(|t| TaskInput {
                goal: self.goal.clone(),
                task: t.clone(),
                inputs: t
                    .needs
                    .iter()
                    .filter_map(|n| self.results.get(n).map(|r| (n.clone(), r.output.clone())))
                    .collect(),
                plan: self.plans,
                wave: self.waves,
            })
            .collect()
    }

    /// The failures of the current plan, but for tasks cut short by the
    /// run's deadline ([`TaskFailure::passed_deadline`]): those did not
    /// fail, and run again when the run is recovered.
    pub fn current_failures(&self) -> Vec<TaskFailure> {
        self.failures
            .iter()
            .filter(|f| f.plan == self.plans && !f.passed_deadline())
            .cloned()
            .collect()
    }

    /// Whether every task of the current plan has a result.
    pub fn plan_done(&self) -> bool {
        !self.plan.tasks.is_empty()
            && self
                .plan
                .tasks
                .iter()
                .all(|t| self.results.contains_key(&t.id))
    }
}

/// What the orchestrator's own steps depend on: the planner's and the
/// synthesizer's models (they may be the same), as agent slots.
#[derive(Context)]
pub struct OrchestratorDeps {
    /// The model that writes plans.
    #[slot(agent)]
    pub planner: Arc<dyn LanguageModel>,
    /// The model that writes the answer from the results.
    #[slot(agent)]
    pub synthesizer: Arc<dyn LanguageModel>,
}

impl fmt::Debug for OrchestratorDeps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OrchestratorDeps")
            .field("planner", &self.planner.model_name())
            .field("synthesizer", &self.synthesizer.model_name())
            .finish()
    }
}

/// A sub-agent that does one task, as the orchestrator runs it.
pub type Worker<CS, CC> = SubAgent<OrchestratorState, OrchestratorDeps, CS, CC, TaskInput>;

type Outcome<CS> = Arc<dyn Fn(&TaskInput, SubOutcome<CS>) -> Result<String, String> + Send + Sync>;

/// The update a finished sub-agent's outcome makes: its result, or a
/// failure when `result` says the task failed.
fn record<CS: HarnessState>(
    result: &Outcome<CS>,
    t: &TaskInput,
    out: SubOutcome<CS>,
) -> OrchestratorStateUpdate {
    match result(t, out) {
        Ok(output) => OrchestratorStateUpdate::new().results(BTreeMap::from([(
            t.task.id.clone(),
            TaskResult {
                agent: t.task.agent.clone(),
                output,
                plan: t.plan,
                wave: t.wave,
            },
        )])),
        Err(error) => OrchestratorStateUpdate::new().failures(vec![TaskFailure {
            task: t.task.id.clone(),
            agent: t.task.agent.clone(),
            error,
            plan: t.plan,
            wave: t.wave,
            cut_short: Some(false),
        }]),
    }
}

/// A worker from a loop whose context needs no slots: `map_in` makes its
/// first state from the task, `result` reads the task's result from its
/// final state (`Err` for a task it could not do, which leads to a
/// replan).
pub fn worker<CS: HarnessState, CC: Context>(
    child: &Harness<CS, CC>,
    map_in: impl Fn(&TaskInput) -> CS + Send + Sync + 'static,
    result: impl Fn(&TaskInput, SubOutcome<CS>) -> Result<String, String> + Send + Sync + 'static,
) -> Worker<CS, CC>
where
    CC::Agent: NoSlots,
    CC::Run: NoSlots,
{
    worker_with_slots(
        child,
        CC::Agent::none(),
        |_| CC::Run::none(),
        map_in,
        result,
    )
}

/// [`worker`], for a loop whose context has agent slots (given once) and
/// run slots (made from the orchestrator's context at each task).
pub fn worker_with_slots<CS: HarnessState, CC: Context>(
    child: &Harness<CS, CC>,
    agent: CC::Agent,
    run: impl Fn(&OrchestratorDeps) -> CC::Run + Send + Sync + 'static,
    map_in: impl Fn(&TaskInput) -> CS + Send + Sync + 'static,
    result: impl Fn(&TaskInput, SubOutcome<CS>) -> Result<String, String> + Send + Sync + 'static,
) -> Worker<CS, CC> {
    let result: Outcome<CS> = Arc::new(result);
    SubAgent::each_with_slots(
        child,
        agent,
        run,
        move |_: &OrchestratorState, t: &TaskInput| map_in(t),
        move |_: &OrchestratorState, t: &TaskInput, out| record(&result, t, out),
    )
}

/// A role the planner may give tasks to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Role {
    /// The role's name, as tasks name it.
    pub name: String,
    /// What its sub-agent does, for the planner.
    pub description: String,
}

/// Writes the synthesizer's request from the state; the default asks for
/// the answer to the goal from the results in plan order.
type Synthesis = Arc<dyn Fn(&OrchestratorState) -> ModelRequest + Send + Sync>;

/// The orchestrator's loop, being declared: its roles and their
/// sub-agents, its limits.
///
/// ```
/// use harness::llm::{Expect, LanguageModel, ModelResponse, ScriptedModel};
/// use harness::{Harness, HarnessState, JsonSchema, create_agent_with, schemars};
/// use harness_recipes::orchestrator::{Orchestrator, OrchestratorDepsAgent, OrchestratorState, signals, worker};
/// use serde::{Deserialize, Serialize};
/// use std::sync::Arc;
///
/// #[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
/// struct Echo { text: String }
///
/// let echo = Harness::<Echo>::builder()
///     .step("echo").run(async |e: Arc<Echo>| Ok(EchoUpdate::new().text(e.text.to_uppercase())))
///     .end().start("echo").build()?;
/// let loop_ = Orchestrator::new()
///     .role("echo", "Repeats its instructions loudly", worker(
///         &echo,
///         |t| Echo { text: t.task.instructions.clone() },
///         |_, out| Ok(out.state.text),
///     ))
///     .harness()?;
///
/// let planner = ScriptedModel::new([Expect::any().reply(ModelResponse::from_text(
///     r#"{"tasks": [{"id": "a", "agent": "echo", "instructions": "hi"}]}"#,
/// ))]);
/// let synthesizer = ScriptedModel::new([Expect::any()
///     .last_message_contains("HI")
///     .reply(ModelResponse::from_text("They said HI."))]);
/// let agent = create_agent_with("orchestrator", &loop_, OrchestratorDepsAgent {
///     planner: Arc::new(planner),
///     synthesizer: Arc::new(synthesizer),
/// });
/// # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
/// let out = agent.run(OrchestratorState::new("say hi")).await?;
/// assert_eq!(out.signal, signals::DONE);
/// assert_eq!(out.state.answer.as_deref(), Some("They said HI."));
/// # Ok::<(), harness::RunError>(()) })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Orchestrator {
    roles: Vec<Role>,
    dispatch: Dispatch<OrchestratorState, OrchestratorDeps, TaskInput>,
    max_replans: usize,
    parallel: usize,
    synthesis: Option<Synthesis>,
}

impl fmt::Debug for Orchestrator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Orchestrator")
            .field("roles", &self.roles)
            .field("max_replans", &self.max_replans)
            .field("parallel", &self.parallel)
            .finish_non_exhaustive()
    }
}

impl Default for Orchestrator {
    fn default() -> Self {
        Self::new()
    }
}

impl Orchestrator {
    /// The replans allowed by default.
    pub const MAX_REPLANS: usize = 3;
    /// The tasks run at once by default.
    pub const PARALLEL: usize = 4;

    /// An orchestrator with no roles yet, [`MAX_REPLANS`](Self::MAX_REPLANS)
    /// replans and [`PARALLEL`](Self::PARALLEL) tasks at once.
    pub fn new() -> Self {
        Self {
            roles: Vec::new(),
            dispatch: Dispatch::by(|t: &TaskInput| t.task.agent.clone()),
            max_replans: Self::MAX_REPLANS,
            parallel: Self::PARALLEL,
            synthesis: None,
        }
    }

    /// Registers a role: tasks that name it run `worker` (see [`worker`]).
    /// `description` tells the planner what it does. A role registered
    /// again replaces the earlier one.
    #[must_use]
    pub fn role<CS: HarnessState, CC: Context>(
        mut self,
        name: impl Into<String>,
        description: impl Into<String>,
        worker: Worker<CS, CC>,
    ) -> Self {
        let name = name.into();
        self.roles.retain(|r| r.name != name);
        self.roles.push(Role {
            name: name.clone(),
            description: description.into(),
        });
        self.dispatch = self.dispatch.agent(name, worker);
        self
    }

    /// How many times the planner may be asked again, for bad plans and
    /// failed tasks together, before the run ends with
    /// [`signals::GAVE_UP`].
    #[must_use]
    pub fn max_replans(mut self, n: usize) -> Self {
        self.max_replans = n;
        self
    }

    /// How many tasks run at once (at least 1).
    #[must_use]
    pub fn parallel(mut self, n: usize) -> Self {
        self.parallel = n.max(1);
        self
    }

    /// Replaces the synthesizer's request: `f` writes it from the state.
    #[must_use]
    pub fn synthesis(
        mut self,
        f: impl Fn(&OrchestratorState) -> ModelRequest + Send + Sync + 'static,
    ) -> Self {
        self.synthesis = Some(Arc::new(f));
        self
    }

    /// The roles, in the order registered.
    pub fn roles(&self) -> &[Role] {
        &self.roles
    }

    /// The loop, declared, for the caller to add a store, observers or
    /// limits before building it.
    pub fn builder(self) -> HarnessBuilder<OrchestratorState, OrchestratorDeps> {
        let roles = Arc::new(self.roles);
        let names: Arc<Vec<String>> = Arc::new(roles.iter().map(|r| r.name.clone()).collect());
        let max_replans = self.max_replans;
        let synthesis = self
            .synthesis
            .unwrap_or_else(|| Arc::new(prompt::synthesis));
        let (plan_roles, plan_names) = (Arc::clone(&roles), Arc::clone(&names));
        Harness::<OrchestratorState, OrchestratorDeps>::builder()
            .step(steps::PLAN)
            .run(move |s: Arc<OrchestratorState>, cx: Cx<OrchestratorDeps>| {
                plan_step(
                    s,
                    cx,
                    Arc::clone(&plan_roles),
                    Arc::clone(&plan_names),
                    max_replans,
                )
            })
            .route(|s: &OrchestratorState| match s.phase {
                Phase::Running => signals::RUN,
                Phase::GaveUp => signals::GAVE_UP,
                _ => signals::REPLAN,
            })
            .on(signals::RUN)
            .to(steps::SCHEDULE)
            .on(signals::REPLAN)
            .to(steps::PLAN)
            .on(signals::GAVE_UP)
            .end()
            .step(steps::SCHEDULE)
            .run(schedule_step)
            .fan_out(steps::TASK, OrchestratorState::ready)
            .limit(self.parallel)
            .collect_errors(branch_failed)
            .join(steps::COLLECT)
            .step(steps::TASK)
            .dispatch(self.dispatch)
            .writes(["results", "failures"])
            .next(steps::COLLECT)
            .step(steps::COLLECT)
            .run(move |s: Arc<OrchestratorState>, cx: Cx<OrchestratorDeps>| {
                collect_step(s, cx, max_replans)
            })
            .route(|s: &OrchestratorState| match s.phase {
                Phase::Planning => signals::REPLAN,
                Phase::Synthesizing => signals::SYNTHESIZE,
                Phase::GaveUp => signals::GAVE_UP,
                _ => signals::MORE,
            })
            .on(signals::REPLAN)
            .to(steps::PLAN)
            .on(signals::MORE)
            .to(steps::SCHEDULE)
            .on(signals::SYNTHESIZE)
            .to(steps::SYNTHESIZE)
            .on(signals::GAVE_UP)
            .end()
            .step(steps::SYNTHESIZE)
            .run(move |s: Arc<OrchestratorState>, cx: Cx<OrchestratorDeps>| {
                let request = synthesis(&s);
                synthesize_step(request, cx)
            })
            .route(|_: &OrchestratorState| signals::DONE)
            .on(signals::DONE)
            .end()
            .start(steps::PLAN)
    }

    /// The loop, built.
    pub fn harness(
        self,
    ) -> Result<Harness<OrchestratorState, OrchestratorDeps>, LoopValidationError> {
        self.builder().build()
    }
}

/// The update that starts a new plan, or records a rejected one.
fn plan_step(
    s: Arc<OrchestratorState>,
    cx: Cx<OrchestratorDeps>,
    roles: Arc<Vec<Role>>,
    names: Arc<Vec<String>>,
    max_replans: usize,
) -> BoxFuture<'static, StepResult<OrchestratorStateUpdate>> {
    Box::pin(async move {
        past_deadline().await;
        let request = prompt::planning(&s, &roles);
        let number = s.plans + 1;
        let done: BTreeSet<String> = s.results.keys().cloned().collect();
        let (plan, problems) = match cx.complete_typed::<Plan>(&*cx.planner, &request).await {
            Ok(answer) => {
                let problems = check_plan(&answer.value, &names, &done);
                (answer.value, problems)
            }
            Err(e @ harness::llm::TypedAnswerError::Model { .. }) => {
                return Err(StepError::msg(e.to_string()));
            }
            Err(e) => (
                Plan::default(),
                vec![PlanProblem::Unreadable {
                    reason: e.to_string(),
                }],
            ),
        };
        let update = OrchestratorStateUpdate::new().plans(1);
        if problems.is_empty() {
            cx.emit(
                "plan",
                serde_json::json!({ "plan": number, "tasks": plan.tasks }),
            );
            return Ok(update.plan(plan).phase(Phase::Running));
        }
        let event = ReplanEvent::new(Replan {
            plan: number,
            tasks: plan,
            reason: ReplanReason::Invalid { problems },
        });
        cx.emit("replan", &event);
        let phase = if s.replans.len() < max_replans {
            Phase::Planning
        } else {
            Phase::GaveUp
        };
        Ok(update.replans(vec![event.replan]).phase(phase))
    })
}

/// Starts a wave: counts it and says which tasks it runs.
async fn schedule_step(
    s: Arc<OrchestratorState>,
    cx: Cx<OrchestratorDeps>,
) -> StepResult<OrchestratorStateUpdate> {
    let wave = s.waves + 1;
    let tasks: Vec<String> = s.ready().into_iter().map(|t| t.task.id).collect();
    cx.emit("wave", serde_json::json!({ "wave": wave, "tasks": tasks }));
    Ok(OrchestratorStateUpdate::new().waves(1))
}

/// A task whose sub-agent failed (its loop's error): a failure, merged at
/// the wave's join like a result.
fn branch_failed(f: BranchFailure) -> OrchestratorStateUpdate {
    let input: Option<TaskInput> = f
        .input
        .as_ref()
        .and_then(|v| serde_json::from_value(v.clone()).ok());
    let (task, agent, plan, wave) = match input {
        Some(t) => (t.task.id, t.task.agent, t.plan, t.wave),
        None => (f.path.to_string(), String::new(), 0, 0),
    };
    OrchestratorStateUpdate::new().failures(vec![TaskFailure {
        task,
        agent,
        error: f.error,
        plan,
        wave,
        cut_short: Some(f.deadline),
    }])
}

/// Gives the engine a moment to end the run if it is past its deadline.
///
/// The engine cancels a step that is waiting when the run's deadline falls
/// (with [`RunError::Deadline`](harness::RunError::Deadline)), and one that
/// starts waiting after it at once; a step that never waits is never cut
/// short. Awaited where the orchestrator must not go on past the deadline:
/// before it asks a model, and at a join where a task was cut short by it.
/// Without a deadline, or before it, this only yields to the scheduler.
async fn past_deadline() {
    tokio::task::yield_now().await;
}

/// The join of a wave: reports each task's end and decides what is next.
///
/// A task of the wave cut short by the run's deadline ends the run with
/// [`RunError::Deadline`](harness::RunError::Deadline) here (the results
/// merged at the join are kept); in a recovered run, whose deadline
/// starts again, such tasks run again with the next wave.
async fn collect_step(
    s: Arc<OrchestratorState>,
    cx: Cx<OrchestratorDeps>,
    max_replans: usize,
) -> StepResult<OrchestratorStateUpdate> {
    for (id, r) in s.results.iter().filter(|(_, r)| r.wave == s.waves) {
        cx.emit(
            "task",
            serde_json::json!({ "task": id, "agent": r.agent, "status": "done" }),
        );
    }
    let cut: Vec<&TaskFailure> = s
        .failures
        .iter()
        .filter(|f| f.plan == s.plans && f.wave == s.waves && f.passed_deadline())
        .collect();
    if !cut.is_empty() {
        // Past the deadline, the run ends here: no replan, no new wave.
        past_deadline().await;
        // Still going: a recovered run, with a deadline of its own. The
        // tasks cut short run again with the next wave.
        for f in cut {
            cx.emit(
                "task",
                serde_json::json!({ "task": f.task, "agent": f.agent, "status": "cut_short", "error": f.error }),
            );
        }
    }
    let failures = s.current_failures();
    for f in failures.iter().filter(|f| f.wave == s.waves) {
        cx.emit(
            "task",
            serde_json::json!({ "task": f.task, "agent": f.agent, "status": "failed", "error": f.error }),
        );
    }
    let update = OrchestratorStateUpdate::new();
    if !failures.is_empty() {
        let event = ReplanEvent::new(Replan {
            plan: s.plans,
            tasks: s.plan.clone(),
            reason: ReplanReason::Failed { failures },
        });
        cx.emit("replan", &event);
        let phase = if s.replans.len() < max_replans {
            Phase::Planning
        } else {
            Phase::GaveUp
        };
        return Ok(update.replans(vec![event.replan]).phase(phase));
    }
    if s.plan_done() {
        return Ok(update.phase(Phase::Synthesizing));
    }
    if s.ready().is_empty() {
        // Cannot happen for a plan that checked; said plainly if it does.
        return Err(StepError::msg(format!(
            "plan {} has tasks left but none is ready: {:?}",
            s.plans,
            s.plan
                .tasks
                .iter()
                .filter(|t| !s.results.contains_key(&t.id))
                .map(|t| &t.id)
                .collect::<Vec<_>>()
        )));
    }
    Ok(update.phase(Phase::Running))
}

/// Writes the answer.
async fn synthesize_step(
    request: ModelRequest,
    cx: Cx<OrchestratorDeps>,
) -> StepResult<OrchestratorStateUpdate> {
    past_deadline().await;
    let answer = cx.complete(&*cx.synthesizer, &request).await?;
    Ok(OrchestratorStateUpdate::new()
        .answer(Some(answer.text().trim().to_string()))
        .phase(Phase::Done))
}
