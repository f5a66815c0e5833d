//! A code agent as a typed loop: a model writes Python one cell at a time,
//! failures are diagnosed and patched, and the notebook is replayed until a
//! check passes.
//!
//! The pieces are ordinary loop steps over [`CodeAgentState`] with their
//! dependencies in the slots of [`CodeAgentDeps`], so they can be plugged
//! into a loop of your own built with [`Harness::builder`]:
//!
//! | step | does | routes to |
//! | --- | --- | --- |
//! | [`propose`] | asks the model for the next cell (task, the code so far, its last outputs, feedback) and adds it to the notebook | `execute`, `propose` (unusable answer), `out_of_proposals` |
//! | [`execute`] | runs the new cell; a failure becomes a [`CellFailure`] | `check`, `diagnose` |
//! | [`diagnose`] | [`diagnose`](crate::diagnose::diagnose)s the pending failure against the graph | `patch` |
//! | [`patch`] | asks the [`Patcher`] for a patch and applies it ([`Notebook::apply_patch`]) | `replay`, `patch` (no patch), `unfixed` |
//! | [`replay`] | [`Notebook::replay`]s: only the patched cell and its dependents run, unchanged cells are reused | `check`, `diagnose`, `unfixed` |
//! | [`check`] | evaluates the task's [`Check`] | `solved`, `propose`, `out_of_proposals` |
//!
//! [`code_agent_harness`] wires them (with a `resume` router first, so a
//! saved state resumes where it stopped) and [`CodeAgent`] runs that loop.
//!
//! # The check
//!
//! A [`Check`] says when the task is done. It is either a Python
//! expression ([`Check::python`]), evaluated in a separate short-lived
//! kernel into which the names it reads are loaded from the notebook's blob
//! store (the latest values cells wrote; a value that cannot be pickled,
//! such as a function, cannot be checked this way), or a Rust closure over
//! the [`Notebook`] ([`Check::rust`]), which can read the recorded value
//! summaries with [`latest_value`].
//!
//! # Budgets and persistence
//!
//! [`CodeAgentState::max_proposals`] bounds the model's proposals (usable or
//! not); [`CodeAgentState::max_patch_attempts`] bounds the patches tried for
//! one failure (a patcher error counts as an attempt). The state is serde
//! data: save it with the notebook (the loop steps [`Notebook::save`] it
//! after each change they make), reopen both later and call
//! [`CodeAgent::resume`].

use std::fmt;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

use crate::diagnose::{self as diag, CellFailure, Diagnosis};
use crate::kernel::{Kernel, RestoreValue, Stored, ValueSummary};
use crate::notebook::Notebook;
use crate::patch::{ModelPatcher, Patcher};
use crate::replay::ReplayReport;
use crate::{CellId, CellStatus, Provenance, analyze_cell};
use harness::llm::{LanguageModel, ModelRequest};
use harness::{
    Context, Cx, Harness, HarnessState, LoopValidationError, RunError, StepError, create_agent_with,
};

/// A notebook shared by the steps of a loop.
pub type SharedNotebook = Arc<Mutex<Notebook>>;

/// Result of a loop step of this module.
type Step = Result<CodeAgentStateUpdate, StepError>;

/// Characters of a cell's printed output shown to the model.
const OUTPUT_CHARS: usize = 600;
/// Value summaries per cell shown to the model.
const VALUES_SHOWN: usize = 12;
/// The kernel cell label of a check.
const CHECK_LABEL: u32 = u32::MAX;
/// The name a Python check binds.
const CHECK_NAME: &str = "__harness_check__";

const SYSTEM_PROMPT: &str = "You solve a data task by writing Python, one cell at a time, in a \
notebook. Cells share one namespace and run in order; a cell sees the names earlier \
cells bound. Only the Python standard library is available. Answer with the next cell only, as \
the complete code of that cell in a single ```python fenced block. Do not repeat earlier cells.";

/// A check written in Rust: `Ok(())` when the task is done, else why not.
pub type RustCheck = Arc<dyn Fn(&Notebook) -> Result<(), String> + Send + Sync>;

/// When a task is done: a Python expression or a Rust closure over the
/// notebook. See the [module docs](self#the-check).
#[derive(Clone)]
pub enum Check {
    /// A Python expression that must be true.
    Python(String),
    /// A closure: `Ok(())` when the task is done, else why not.
    Rust {
        /// What the closure checks, shown to the model.
        description: String,
        /// The closure.
        check: RustCheck,
    },
}

impl fmt::Debug for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Python(expression) => f.debug_tuple("Python").field(expression).finish(),
            Self::Rust { description, .. } => f.debug_tuple("Rust").field(description).finish(),
        }
    }
}

/// What a [`Check`] found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CheckOutcome {
    /// Whether the task is done.
    pub passed: bool,
    /// What was checked and, when it failed, why.
    pub message: String,
}

impl Check {
    /// A check that the Python expression `expression` is true, e.g.
    /// `totals == {'north': 30, 'south': 12}`.
    pub fn python(expression: impl Into<String>) -> Self {
        Self::Python(expression.into())
    }

    /// A check by a closure over the notebook.
    pub fn rust(
        description: impl Into<String>,
        check: impl Fn(&Notebook) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        Self::Rust {
            description: description.into(),
            check: Arc::new(check),
        }
    }

    /// What the check requires, as told to the model.
    pub fn description(&self) -> String {
        match self {
            Self::Python(expression) => format!("the Python expression `{expression}` is true"),
            Self::Rust { description, .. } => description.clone(),
        }
    }

    /// Evaluates the check against the notebook's current values.
    ///
    /// # Errors
    ///
    /// For a Python check: the expression does not parse, or the check
    /// kernel cannot start. A false expression, one that raises, or a name
    /// that cannot be loaded is a failed [`CheckOutcome`], not an error.
    pub async fn evaluate(&self, notebook: &Notebook) -> Result<CheckOutcome, CodeAgentError> {
        match self {
            Self::Rust { check, description } => Ok(match check(notebook) {
                Ok(()) => CheckOutcome {
                    passed: true,
                    message: format!("passed: {description}"),
                },
                Err(why) => CheckOutcome {
                    passed: false,
                    message: format!("not yet: {description}: {why}"),
                },
            }),
            Self::Python(expression) => python_check(expression, notebook).await,
        }
    }
}

/// The summary of the latest recorded value of `name`: from the last cell,
/// in cell order, whose recorded run wrote it (`None` if no cell did, or
/// the last one to touch it deleted it).
pub fn latest_value<'s>(notebook: &'s Notebook, name: &str) -> Option<&'s ValueSummary> {
    let ids: Vec<CellId> = notebook.graph().cells().map(|s| s.id()).collect();
    for id in ids.into_iter().rev() {
        let Some(record) = notebook.record(id) else {
            continue;
        };
        if let Some(value) = record.outputs.get(name) {
            return Some(value);
        }
        if record.deleted.contains(name) {
            return None;
        }
    }
    None
}

async fn python_check(
    expression: &str,
    notebook: &Notebook,
) -> Result<CheckOutcome, CodeAgentError> {
    let source = format!("{CHECK_NAME} = bool({expression})");
    let analysis = analyze_cell(&source).map_err(|e| CodeAgentError::Check(e.to_string()))?;
    let fail = |message: String| CheckOutcome {
        passed: false,
        message,
    };
    let mut restore = Vec::new();
    let mut shown = Vec::new();
    for name in &analysis.reads {
        let Some(value) = latest_value(notebook, name) else {
            return Ok(fail(format!(
                "not yet: `{expression}`: no cell has defined `{name}`"
            )));
        };
        shown.push(format!("{name} = {}", value.short()));
        match &value.stored {
            Stored::Blob { hash, .. } if notebook.blobs().contains(hash) => {
                restore.push(RestoreValue::Blob {
                    name: name.clone(),
                    blob: hash.clone(),
                });
            }
            Stored::Module { name: module } => restore.push(RestoreValue::Module {
                name: name.clone(),
                module: module.clone(),
            }),
            _ => {
                return Ok(fail(format!(
                    "not yet: `{expression}`: the value of `{name}` cannot be loaded for the check ({})",
                    value.short()
                )));
            }
        }
    }
    // The notebook's own configuration, kernel running or not (a notebook
    // reopened in a new process has none yet): the check unpickles what
    // cells wrote, so it runs under their sandbox, limits and environment.
    let config = notebook.kernel_config().clone();
    let mut kernel = Kernel::spawn(config)
        .await
        .map_err(|e| CodeAgentError::Check(e.to_string()))?;
    let outcome = async {
        let report = kernel.restore(&restore).await?;
        if let Some(failed) = report.failed.first() {
            return Ok(fail(format!(
                "not yet: `{expression}`: cannot load `{}`: {}",
                failed.name, failed.reason
            )));
        }
        let result = kernel.execute(CHECK_LABEL, &source).await?;
        let values = shown.join(", ");
        Ok(match (&result.error, result.outputs.get(CHECK_NAME)) {
            (None, Some(value)) if value.repr == "True" => CheckOutcome {
                passed: true,
                message: format!("passed: `{expression}`"),
            },
            (None, _) => fail(format!("not yet: `{expression}` is false; {values}")),
            (Some(error), _) => fail(format!("not yet: `{expression}` raised {error}; {values}")),
        })
    }
    .await
    .map_err(|e: crate::kernel::KernelError| CodeAgentError::Check(e.to_string()));
    let _ = kernel.shutdown().await;
    outcome
}

/// Where a [`CodeAgent`] stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AgentStatus {
    /// Still working.
    #[default]
    Working,
    /// The check passed.
    Solved,
    /// A failure was not fixed within the patch attempts.
    Unfixed,
    /// The proposal budget ended before the check passed.
    OutOfProposals,
}

/// One thing the agent did, for the log in [`CodeAgentState::events`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum AgentEvent {
    /// The model proposed a cell, now in the notebook.
    Proposed {
        /// The cell.
        cell: u32,
        /// Its code.
        source: String,
    },
    /// The model's answer had no usable code.
    Rejected {
        /// Why.
        reason: String,
    },
    /// A cell ran successfully.
    Ran {
        /// The cell.
        cell: u32,
        /// What it printed and the values it wrote, shortened.
        output: String,
    },
    /// A cell failed.
    Failed {
        /// The cell.
        cell: u32,
        /// The error.
        error: String,
    },
    /// A failure was diagnosed.
    Diagnosed {
        /// The failing cell.
        cell: u32,
        /// The top culprit.
        culprit: Option<u32>,
        /// One line.
        summary: String,
        /// The full report ([`Diagnosis::report`]).
        report: String,
    },
    /// A patch was applied.
    Patched {
        /// The patched cell.
        cell: u32,
        /// The new version.
        version: u32,
        /// The patcher.
        patcher: String,
        /// What the patch does.
        description: String,
        /// The unified diff.
        diff: String,
    },
    /// The patcher gave no patch.
    PatchFailed {
        /// The cell to patch.
        cell: u32,
        /// Why.
        error: String,
    },
    /// The notebook was replayed after a patch.
    Replayed {
        /// Cells executed.
        executed: Vec<u32>,
        /// Cells whose cached run was reused.
        reused: Vec<u32>,
        /// Cells that failed.
        failed: Vec<u32>,
        /// One line per cell: action and reason.
        entries: Vec<String>,
    },
    /// The check was evaluated.
    Checked {
        /// Whether it passed.
        passed: bool,
        /// What it said.
        message: String,
    },
}

impl fmt::Display for AgentEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Proposed { cell, source } => {
                write!(f, "proposed cell {cell}:")?;
                for line in source.lines() {
                    write!(f, "\n    {line}")?;
                }
                Ok(())
            }
            Self::Rejected { reason } => write!(f, "answer rejected: {reason}"),
            Self::Ran { cell, output } => write!(f, "cell {cell} ok: {output}"),
            Self::Failed { cell, error } => write!(f, "cell {cell} FAILED: {error}"),
            Self::Diagnosed {
                cell,
                culprit,
                summary,
                ..
            } => {
                write!(f, "diagnosis of cell {cell}: {summary}")?;
                if let Some(culprit) = culprit {
                    write!(f, " (culprit: cell {culprit})")?;
                }
                Ok(())
            }
            Self::Patched {
                cell,
                version,
                patcher,
                description,
                diff,
            } => {
                write!(
                    f,
                    "patch by {patcher} -> cell {cell} v{version}: {description}\n{}",
                    diff.trim_end()
                )
            }
            Self::PatchFailed { cell, error } => write!(f, "no patch for cell {cell}: {error}"),
            Self::Replayed {
                executed,
                reused,
                failed,
                entries,
            } => {
                write!(
                    f,
                    "replay: executed {executed:?}, reused {reused:?}, failed {failed:?}"
                )?;
                for entry in entries {
                    write!(f, "\n    {entry}")?;
                }
                Ok(())
            }
            Self::Checked { message, .. } => write!(f, "check {message}"),
        }
    }
}

/// A failure being fixed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PendingFailure {
    /// The failure.
    #[schemars(with = "serde_json::Value")]
    pub failure: CellFailure,
    /// Its diagnosis, once made.
    #[schemars(with = "Option<serde_json::Value>")]
    pub diagnosis: Option<Diagnosis>,
    /// Patches tried for this failure (the failure may move to a dependent
    /// cell after a patch; the count goes on).
    pub attempts: u32,
    /// Whether a patch was applied and awaits replay.
    pub patched: bool,
}

/// The state of the code agent loop. Serde data: save it to resume.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
pub struct CodeAgentState {
    /// The task, as told to the model.
    pub task: String,
    /// The most proposals the model may make.
    #[field(default = 8)]
    pub max_proposals: u32,
    /// The most patches tried for one failure.
    #[field(default = 3)]
    pub max_patch_attempts: u32,
    /// Proposals made so far.
    #[field(reduce = add)]
    pub proposals: u32,
    /// What happened, in order.
    #[field(reduce = append)]
    pub events: Vec<AgentEvent>,
    /// The cell proposed and not yet run.
    pub proposed: Option<u32>,
    /// The failure being fixed.
    pub pending: Option<PendingFailure>,
    /// Told to the model with the next proposal: why the check failed, or
    /// why its last answer was unusable.
    pub feedback: Option<String>,
    /// Where the agent stands.
    pub status: AgentStatus,
}

impl CodeAgentState {
    /// A fresh state for `task`.
    pub fn new(task: impl Into<String>) -> Self {
        Self {
            task: task.into(),
            ..Self::default()
        }
    }
}

/// The slots of the code agent's steps (all agent slots, given to
/// `create_agent_with` as a [`CodeAgentDepsAgent`]).
#[derive(Context)]
pub struct CodeAgentDeps {
    /// The notebook that runs the cells.
    #[slot(agent)]
    pub notebook: SharedNotebook,
    /// The model that proposes cells.
    #[slot(agent)]
    pub model: Arc<dyn LanguageModel>,
    /// The patcher of failed cells.
    #[slot(agent)]
    pub patcher: Arc<dyn Patcher>,
    /// When the task is done.
    #[slot(agent)]
    pub check: Arc<Check>,
}

impl fmt::Debug for CodeAgentDeps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CodeAgentDeps")
            .field("model", &self.model.model_name())
            .field("patcher", &self.patcher.name())
            .field("check", &self.check)
            .finish_non_exhaustive()
    }
}

fn step_error(error: impl fmt::Display) -> StepError {
    StepError::msg(error)
}

fn save(notebook: &Notebook) -> Result<(), StepError> {
    notebook.save().map_err(step_error)
}

/// The prompt for the next cell: the task, the check, every cell with its
/// status and last outputs, and the feedback.
pub fn proposal_request(
    state: &CodeAgentState,
    notebook: &Notebook,
    check: &Check,
) -> ModelRequest {
    let mut prompt = format!(
        "Task: {}\nThe task is done when {}.\n\n",
        state.task.trim(),
        check.description()
    );
    let mut any = false;
    for node in notebook.graph().cells() {
        any = true;
        let status = match node.status() {
            CellStatus::Ok => "ok".to_owned(),
            other => format!("{other:?}").to_lowercase(),
        };
        prompt.push_str(&format!(
            "Cell {} ({status}):\n```python\n{}\n```\n",
            node.id(),
            node.source().trim_end()
        ));
        if let Some(record) = notebook.record(node.id()) {
            let text = record.stdout.text.trim();
            if !text.is_empty() {
                prompt.push_str(&format!("printed: {}\n", shorten(text, OUTPUT_CHARS)));
            }
            if let Some(error) = &record.error {
                prompt.push_str(&format!("error: {error}\n"));
            }
            for (name, value) in record.outputs.iter().take(VALUES_SHOWN) {
                prompt.push_str(&format!("{name} = {}\n", shorten(&value.short(), 200)));
            }
        }
        prompt.push('\n');
    }
    if !any {
        prompt.push_str("No cells yet.\n\n");
    }
    if let Some(feedback) = &state.feedback {
        prompt.push_str(&format!("Feedback: {feedback}\n\n"));
    }
    prompt.push_str("Write the next cell.");
    ModelRequest::builder()
        .system(SYSTEM_PROMPT)
        .user(prompt)
        .max_tokens(CELL_MAX_TOKENS)
        .build()
}

/// The bound on a proposed cell's answer: a cell is short, and a model
/// that would not stop is cut off rather than waited for.
const CELL_MAX_TOKENS: u32 = 2048;

fn shorten(text: &str, chars: usize) -> String {
    if text.chars().count() <= chars {
        text.to_owned()
    } else {
        let cut: String = text.chars().take(chars).collect();
        format!("{cut}...")
    }
}

/// Loop step: asks the model for the next cell and adds it to the notebook.
///
/// # Errors
///
/// The model call failed, or the notebook rejected the cell.
pub async fn propose(state: Arc<CodeAgentState>, cx: Cx<CodeAgentDeps>) -> Step {
    let update = CodeAgentStateUpdate::new();
    if state.proposals >= state.max_proposals {
        return Ok(update.status(AgentStatus::OutOfProposals));
    }
    let mut notebook = cx.notebook.lock().await;
    let request = proposal_request(&state, &notebook, &cx.check);
    let response = cx.model.complete(&request).await.map_err(step_error)?;
    let update = update.proposals(1);
    match crate::patch::parse_answer(&response.text(), "", notebook.graph().options()) {
        Ok(source) => {
            let author = format!("model:{}", cx.model.model_name());
            let cell = notebook
                .add_cell(
                    source.clone(),
                    Provenance::now(author, "proposed for the task"),
                )
                .map_err(step_error)?;
            save(&notebook)?;
            Ok(update
                .proposed(Some(cell.get()))
                .feedback(None)
                .events(vec![AgentEvent::Proposed {
                    cell: cell.get(),
                    source,
                }]))
        }
        Err(reason) => {
            let reason = reason.to_string();
            Ok(update
                .feedback(Some(format!(
                    "your last answer was unusable ({reason}); answer with one ```python block"
                )))
                .events(vec![AgentEvent::Rejected { reason }]))
        }
    }
}

/// Route of [`propose`]: `execute`, `propose` or `out_of_proposals`.
pub fn route_propose(state: &CodeAgentState) -> &'static str {
    if state.status == AgentStatus::OutOfProposals {
        "out_of_proposals"
    } else if state.proposed.is_some() {
        "execute"
    } else {
        "propose"
    }
}

/// Loop step: runs the proposed cell; a failure becomes the pending
/// failure.
///
/// # Errors
///
/// No cell is proposed, or the notebook failed outside the cell (graph,
/// blob store, a kernel that cannot start).
pub async fn execute(state: Arc<CodeAgentState>, cx: Cx<CodeAgentDeps>) -> Step {
    let cell = state
        .proposed
        .map(CellId::new)
        .ok_or_else(|| StepError::msg("no proposed cell to execute"))?;
    let mut notebook = cx.notebook.lock().await;
    let failure = match notebook.run_cell(cell).await {
        Ok(run) => match CellFailure::from_run(&run) {
            None => {
                save(&notebook)?;
                let output = run_output(&notebook, cell);
                return Ok(CodeAgentStateUpdate::new().proposed(None).events(vec![
                    AgentEvent::Ran {
                        cell: cell.get(),
                        output,
                    },
                ]));
            }
            Some(failure) => failure,
        },
        Err(error) => CellFailure::from_notebook_error(&error).ok_or_else(|| step_error(error))?,
    };
    save(&notebook)?;
    let failure = failure.with_input_values(&notebook);
    let error = failure_text(&failure);
    Ok(CodeAgentStateUpdate::new()
        .proposed(None)
        .pending(Some(PendingFailure {
            failure,
            diagnosis: None,
            attempts: 0,
            patched: false,
        }))
        .events(vec![AgentEvent::Failed {
            cell: cell.get(),
            error,
        }]))
}

/// Route of [`execute`]: `diagnose` or `check`.
pub fn route_execute(state: &CodeAgentState) -> &'static str {
    if state.pending.is_some() {
        "diagnose"
    } else {
        "check"
    }
}

fn failure_text(failure: &CellFailure) -> String {
    let mut text = match failure.exception_type() {
        Some(exception) => format!("{exception}: {}", failure.message()),
        None => failure.message(),
    };
    if let Some(line) = failure.effective_line() {
        text.push_str(&format!(" (line {line})"));
    }
    text
}

fn run_output(notebook: &Notebook, cell: CellId) -> String {
    let Some(record) = notebook.record(cell) else {
        return String::new();
    };
    let mut parts = Vec::new();
    let printed = record.stdout.text.trim();
    if !printed.is_empty() {
        parts.push(format!("printed {:?}", shorten(printed, 200)));
    }
    let values = record
        .outputs
        .iter()
        .filter(|(_, value)| !matches!(value.stored, Stored::Module { .. }));
    for (name, value) in values.take(VALUES_SHOWN) {
        parts.push(format!("{name} = {}", shorten(&value.short(), 100)));
    }
    if parts.is_empty() {
        "no output".to_owned()
    } else {
        parts.join("; ")
    }
}

/// Loop step: diagnoses the pending failure.
///
/// # Errors
///
/// There is no pending failure.
pub async fn diagnose(state: Arc<CodeAgentState>, cx: Cx<CodeAgentDeps>) -> Step {
    let mut pending = state
        .pending
        .clone()
        .ok_or_else(|| StepError::msg("no failure to diagnose"))?;
    let notebook = cx.notebook.lock().await;
    let diagnosis = diag::diagnose(&pending.failure, notebook.graph());
    let event = AgentEvent::Diagnosed {
        cell: diagnosis.cell.get(),
        culprit: diagnosis.top_culprit().map(|c| c.cell.get()),
        summary: diagnosis.summary(),
        report: diagnosis.report(),
    };
    pending.diagnosis = Some(diagnosis);
    pending.patched = false;
    Ok(CodeAgentStateUpdate::new()
        .pending(Some(pending))
        .events(vec![event]))
}

/// Loop step: asks the patcher for a patch of the diagnosed failure and
/// applies it to the notebook. A patcher error counts as an attempt.
///
/// # Errors
///
/// There is no diagnosed failure, or the notebook cannot be saved.
pub async fn patch(state: Arc<CodeAgentState>, cx: Cx<CodeAgentDeps>) -> Step {
    let mut pending = state
        .pending
        .clone()
        .ok_or_else(|| StepError::msg("no failure to patch"))?;
    let diagnosis = pending
        .diagnosis
        .clone()
        .ok_or_else(|| StepError::msg("the failure has no diagnosis"))?;
    let mut notebook = cx.notebook.lock().await;
    pending.attempts = pending.attempts.saturating_add(1);
    let proposed = cx.patcher.propose(&diagnosis, notebook.graph()).await;
    let applied = proposed.and_then(|patch| {
        let applied = notebook.apply_patch(&patch)?;
        Ok((patch, applied))
    });
    let mut update = CodeAgentStateUpdate::new();
    let event = match applied {
        Ok((patch, applied)) => {
            save(&notebook)?;
            pending.patched = true;
            AgentEvent::Patched {
                cell: patch.cell.get(),
                version: applied.version,
                patcher: patch.provenance.patcher.clone(),
                description: patch.provenance.description.clone(),
                diff: patch.diff.clone(),
            }
        }
        Err(error) => {
            if pending.attempts >= state.max_patch_attempts {
                update = update.status(AgentStatus::Unfixed);
            }
            AgentEvent::PatchFailed {
                cell: diagnosis
                    .top_culprit()
                    .map_or(diagnosis.cell, |c| c.cell)
                    .get(),
                error: error.to_string(),
            }
        }
    };
    Ok(update.pending(Some(pending)).events(vec![event]))
}

/// Route of [`patch`]: `replay`, `patch` (try again) or `unfixed`.
pub fn route_patch(state: &CodeAgentState) -> &'static str {
    match &state.pending {
        _ if state.status == AgentStatus::Unfixed => "unfixed",
        Some(pending) if pending.patched => "replay",
        _ => "patch",
    }
}

fn replay_event(report: &ReplayReport) -> AgentEvent {
    let ids = |cells: Vec<CellId>| cells.into_iter().map(CellId::get).collect::<Vec<_>>();
    AgentEvent::Replayed {
        executed: ids(report.executed()),
        reused: ids(report.reused()),
        failed: ids(report.failed()),
        entries: report
            .entries
            .iter()
            .map(|e| {
                let mut line = format!("cell {}: {} ({})", e.cell, e.action, e.reason);
                if let Some(error) = &e.error {
                    line.push_str(&format!(": {error}"));
                }
                line
            })
            .collect(),
    }
}

/// Loop step: replays the notebook after a patch (only stale cells run;
/// unchanged ones are reused). A cell that still fails becomes the pending
/// failure, with the attempts counted so far.
///
/// # Errors
///
/// The replay failed outside a cell.
pub async fn replay(state: Arc<CodeAgentState>, cx: Cx<CodeAgentDeps>) -> Step {
    let mut notebook = cx.notebook.lock().await;
    let report = notebook.replay().await.map_err(step_error)?;
    save(&notebook)?;
    let mut events = vec![replay_event(&report)];
    let update = CodeAgentStateUpdate::new();
    if report.succeeded() {
        return Ok(update.pending(None).events(events));
    }
    let attempts = state.pending.as_ref().map_or(0, |p| p.attempts);
    let failure = report
        .entries
        .iter()
        .find_map(CellFailure::from_replay_entry)
        .ok_or_else(|| StepError::msg("the replay left cells out of date without a failure"))?
        .with_input_values(&notebook);
    events.push(AgentEvent::Failed {
        cell: failure.cell.get(),
        error: failure_text(&failure),
    });
    let update = if attempts >= state.max_patch_attempts {
        update.status(AgentStatus::Unfixed)
    } else {
        update
    };
    Ok(update
        .pending(Some(PendingFailure {
            failure,
            diagnosis: None,
            attempts,
            patched: false,
        }))
        .events(events))
}

/// Route of [`replay`]: `check`, `diagnose` or `unfixed`.
pub fn route_replay(state: &CodeAgentState) -> &'static str {
    if state.status == AgentStatus::Unfixed {
        "unfixed"
    } else if state.pending.is_some() {
        "diagnose"
    } else {
        "check"
    }
}

/// Loop step: evaluates the check.
///
/// # Errors
///
/// The check could not be evaluated ([`Check::evaluate`]).
pub async fn check(state: Arc<CodeAgentState>, cx: Cx<CodeAgentDeps>) -> Step {
    let notebook = cx.notebook.lock().await;
    let outcome = cx.check.evaluate(&notebook).await.map_err(step_error)?;
    let update = CodeAgentStateUpdate::new().events(vec![AgentEvent::Checked {
        passed: outcome.passed,
        message: outcome.message.clone(),
    }]);
    Ok(if outcome.passed {
        update.status(AgentStatus::Solved).feedback(None)
    } else if state.proposals >= state.max_proposals {
        update
            .status(AgentStatus::OutOfProposals)
            .feedback(Some(outcome.message))
    } else {
        update.feedback(Some(outcome.message))
    })
}

/// Route of [`check`]: `solved`, `propose` or `out_of_proposals`.
pub fn route_check(state: &CodeAgentState) -> &'static str {
    match state.status {
        AgentStatus::Solved => "solved",
        AgentStatus::OutOfProposals => "out_of_proposals",
        _ => "propose",
    }
}

/// Route of the first step, `resume`: where a saved state goes on.
pub fn route_resume(state: &CodeAgentState) -> &'static str {
    match state.status {
        AgentStatus::Solved => "solved",
        AgentStatus::Unfixed => "unfixed",
        AgentStatus::OutOfProposals => "out_of_proposals",
        AgentStatus::Working => match &state.pending {
            Some(pending) if pending.patched => "replay",
            Some(pending) if pending.diagnosis.is_some() => "patch",
            Some(_) => "diagnose",
            None if state.proposed.is_some() => "execute",
            None if state.proposals > 0 => "check",
            None => "propose",
        },
    }
}

/// The code agent loop: `resume` → `propose` → `execute` → (`diagnose` →
/// `patch` → `replay`)* → `check` → …, ending with the signal `solved`,
/// `unfixed` or `out_of_proposals`.
///
/// # Errors
///
/// Never in practice (the loop is fixed); the builder's validation error.
pub fn code_agent_harness() -> Result<Harness<CodeAgentState, CodeAgentDeps>, LoopValidationError> {
    Harness::<CodeAgentState, CodeAgentDeps>::builder()
        .step("resume")
        .route(route_resume)
        .on("propose")
        .to("propose")
        .on("execute")
        .to("execute")
        .on("diagnose")
        .to("diagnose")
        .on("patch")
        .to("patch")
        .on("replay")
        .to("replay")
        .on("check")
        .to("check")
        .on("solved")
        .end()
        .on("unfixed")
        .end()
        .on("out_of_proposals")
        .end()
        .step("propose")
        .run(propose)
        .route(route_propose)
        .on("execute")
        .to("execute")
        .on("propose")
        .to("propose")
        .on("out_of_proposals")
        .end()
        .step("execute")
        .run(execute)
        .route(route_execute)
        .on("diagnose")
        .to("diagnose")
        .on("check")
        .to("check")
        .step("diagnose")
        .run(diagnose)
        .next("patch")
        .step("patch")
        .run(patch)
        .route(route_patch)
        .on("replay")
        .to("replay")
        .on("patch")
        .to("patch")
        .on("unfixed")
        .end()
        .step("replay")
        .run(replay)
        .route(route_replay)
        .on("check")
        .to("check")
        .on("diagnose")
        .to("diagnose")
        .on("unfixed")
        .end()
        .step("check")
        .run(check)
        .route(route_check)
        .on("solved")
        .end()
        .on("propose")
        .to("propose")
        .on("out_of_proposals")
        .end()
        .start("resume")
        .build()
}

/// Why a [`CodeAgent`] run did not solve the task.
#[derive(Debug, thiserror::Error)]
pub enum CodeAgentError {
    /// A failure was not fixed within the patch attempts.
    #[error("cell {cell} still fails after {attempts} patch attempt(s): {error}")]
    Unfixed {
        /// The failing cell.
        cell: CellId,
        /// Patches tried.
        attempts: u32,
        /// The last error.
        error: String,
        /// The final state.
        state: Box<CodeAgentState>,
    },
    /// The proposals ran out before the check passed.
    #[error("the check did not pass within {proposals} proposal(s){}", last_check.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    OutOfProposals {
        /// Proposals made.
        proposals: u32,
        /// What the last check said.
        last_check: Option<String>,
        /// The final state.
        state: Box<CodeAgentState>,
    },
    /// A check could not be evaluated.
    #[error("the check could not be evaluated: {0}")]
    Check(String),
    /// The loop failed (a model call, the notebook).
    #[error(transparent)]
    Run(#[from] RunError),
    /// The loop is invalid (a bug).
    #[error(transparent)]
    Loop(#[from] LoopValidationError),
}

/// What a solved [`CodeAgent`] run ends with.
#[derive(Debug, Clone)]
pub struct CodeAgentOutcome {
    /// The final state (its `events` are the log of the run).
    pub state: CodeAgentState,
    /// Loop steps taken.
    pub loop_steps: u64,
}

/// The ready-made code agent: [`code_agent_harness`] with its slots.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use harness_code::agent::{Check, CodeAgent};
/// use harness_code::kernel::KernelConfig;
/// use harness_code::notebook::Notebook;
/// use harness::llm::ScriptedModel;
///
/// let notebook = Notebook::open_or_create(".harness/code/totals", KernelConfig::default())?;
/// let agent = CodeAgent::new(
///     Arc::new(tokio::sync::Mutex::new(notebook)),
///     Arc::new(ScriptedModel::new([])),
///     Check::python("totals == {'north': 30}"),
/// );
/// let outcome = agent.run("sum the sales per region into `totals`").await?;
/// for event in &outcome.state.events {
///     println!("{event}");
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct CodeAgent {
    notebook: SharedNotebook,
    model: Arc<dyn LanguageModel>,
    patcher: Arc<dyn Patcher>,
    check: Arc<Check>,
    max_proposals: u32,
    max_patch_attempts: u32,
}

impl fmt::Debug for CodeAgent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CodeAgent")
            .field("patcher", &self.patcher.name())
            .field("check", &self.check)
            .field("max_proposals", &self.max_proposals)
            .field("max_patch_attempts", &self.max_patch_attempts)
            .finish_non_exhaustive()
    }
}

impl CodeAgent {
    /// An agent over `notebook` with `model`, done when `check` passes.
    /// Failures are patched by a [`ModelPatcher`] over the same model
    /// unless [`with_patcher`](Self::with_patcher) says otherwise.
    pub fn new(notebook: SharedNotebook, model: Arc<dyn LanguageModel>, check: Check) -> Self {
        let defaults = CodeAgentState::default();
        Self {
            patcher: Arc::new(ModelPatcher::new(model.clone())),
            notebook,
            model,
            check: Arc::new(check),
            max_proposals: defaults.max_proposals,
            max_patch_attempts: defaults.max_patch_attempts,
        }
    }

    /// Patches failures with `patcher`.
    #[must_use]
    pub fn with_patcher(mut self, patcher: Arc<dyn Patcher>) -> Self {
        self.patcher = patcher;
        self
    }

    /// At most `proposals` proposals per run.
    #[must_use]
    pub fn with_max_proposals(mut self, proposals: u32) -> Self {
        self.max_proposals = proposals;
        self
    }

    /// At most `attempts` patches per failure.
    #[must_use]
    pub fn with_max_patch_attempts(mut self, attempts: u32) -> Self {
        self.max_patch_attempts = attempts;
        self
    }

    /// The shared notebook.
    pub fn notebook(&self) -> &SharedNotebook {
        &self.notebook
    }

    /// The agent slots of [`CodeAgentDeps`], for `create_agent_with`.
    pub fn slots(&self) -> CodeAgentDepsAgent {
        CodeAgentDepsAgent {
            notebook: self.notebook.clone(),
            model: self.model.clone(),
            patcher: self.patcher.clone(),
            check: self.check.clone(),
        }
    }

    /// Works on `task` from a fresh state.
    ///
    /// # Errors
    ///
    /// [`CodeAgentError::Unfixed`], [`CodeAgentError::OutOfProposals`], or the
    /// loop's own failure.
    pub async fn run(&self, task: impl Into<String>) -> Result<CodeAgentOutcome, CodeAgentError> {
        let mut state = CodeAgentState::new(task);
        state.max_proposals = self.max_proposals;
        state.max_patch_attempts = self.max_patch_attempts;
        self.resume(state).await
    }

    /// Goes on from a saved state (its own budgets apply), e.g. after the
    /// process stopped: the notebook is reopened from its directory and the
    /// state deserialised.
    ///
    /// # Errors
    ///
    /// As [`run`](Self::run).
    pub async fn resume(&self, state: CodeAgentState) -> Result<CodeAgentOutcome, CodeAgentError> {
        let harness = code_agent_harness()?;
        let agent = create_agent_with("code-agent", &harness, self.slots());
        let outcome = agent.run(state).await?;
        let state = outcome.state;
        match state.status {
            AgentStatus::Solved => Ok(CodeAgentOutcome {
                state,
                loop_steps: outcome.steps,
            }),
            AgentStatus::Unfixed => {
                let (cell, attempts, error) = state.pending.as_ref().map_or_else(
                    || (CellId::new(0), 0, String::new()),
                    |p| (p.failure.cell, p.attempts, failure_text(&p.failure)),
                );
                Err(CodeAgentError::Unfixed {
                    cell,
                    attempts,
                    error,
                    state: Box::new(state),
                })
            }
            AgentStatus::OutOfProposals | AgentStatus::Working => {
                Err(CodeAgentError::OutOfProposals {
                    proposals: state.proposals,
                    last_check: state.feedback.clone(),
                    state: Box::new(state),
                })
            }
        }
    }
}
