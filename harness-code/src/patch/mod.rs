//! Patches for failed cells: proposing a new version of one cell from a
//! [`Diagnosis`], applying it to the graph, and rolling it back.
//!
//! A [`Patcher`] proposes a [`Patch`]: [`RulePatcher`] applies the cheap
//! suggestions of the diagnosis (rename a misspelled name, add a missing
//! import, ...); [`ModelPatcher`] asks a language model to rewrite the cell,
//! accepting a fenced code block, bare code or a unified diff, and retries
//! within a budget when the answer is unusable. [`apply_patch`] makes the
//! patch a new version of the cell (with provenance) and reports which cells
//! are stale; [`rollback_patch`] restores the version before it.
//!
//! ```
//! use harness_code::diagnose::{CellFailure, diagnose};
//! use harness_code::patch::{Patcher, RulePatcher, apply_patch, rollback_patch};
//! use harness_code::{ExecutionStateGraph, Provenance};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let mut graph = ExecutionStateGraph::new();
//! let load = graph.add_cell("rows = [1, 2, 3]", Provenance::now("model", "load")).unwrap();
//! let mean = graph.add_cell("avg = statistics.mean(rows)", Provenance::now("model", "mean")).unwrap();
//! let failure = CellFailure::exception(mean, "NameError", "name 'statistics' is not defined");
//! let diagnosis = diagnose(&failure, &graph);
//!
//! let patch = RulePatcher::new().propose(&diagnosis, &graph).await.unwrap();
//! assert_eq!(patch.new_source, "import statistics\navg = statistics.mean(rows)");
//! let applied = apply_patch(&mut graph, &patch).unwrap();
//! assert_eq!(applied.stale, [mean]);
//! rollback_patch(&mut graph, &applied).unwrap();
//! assert_eq!(graph.cell(mean).unwrap().source(), "avg = statistics.mean(rows)");
//! # let _ = load;
//! # }
//! ```

mod diff;
mod model;
mod rules;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

pub use diff::{DiffError, apply_unified_diff, unified_diff};
pub use model::{
    AnswerError, DEFAULT_MAX_ATTEMPTS, DEFAULT_PATCH_MAX_TOKENS, ModelPatcher, parse_answer,
};
pub use rules::RulePatcher;

use crate::diagnose::{Diagnosis, ErrorClass};
use crate::{AnalysisError, CellId, ExecutionStateGraph, GraphError, Provenance, Timestamp};
use harness::llm::{ModelError, Usage};

/// Who wrote a patch, from what, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PatchProvenance {
    /// The patcher's name, e.g. `rules` or `model`.
    pub patcher: String,
    /// What the patch does, e.g. `rename totl to total`.
    pub description: String,
    /// The model that wrote the code, when a model did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The model's provider, when a model wrote the code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The id of the model call whose answer became the patch (generated
    /// per call by the patcher and logged with it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// Model calls made, including rejected answers (0 for rules).
    #[serde(default)]
    pub attempts: u32,
    /// Tokens spent over all calls, when a model wrote the patch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// The summary of the diagnosis the patch answers.
    pub diagnosis: String,
    /// When the patch was made.
    pub at: Timestamp,
}

/// A proposed new version of one cell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Patch {
    /// The cell to change.
    pub cell: CellId,
    /// The version of the cell the patch was made against.
    pub base_version: u32,
    /// The cell's source at `base_version`.
    pub old_source: String,
    /// The proposed source.
    pub new_source: String,
    /// Unified diff from `old_source` to `new_source`.
    pub diff: String,
    /// Who wrote it, from what, and when.
    pub provenance: PatchProvenance,
}

impl Patch {
    /// A patch of `cell` from `old_source` (version `base_version`) to
    /// `new_source`; the diff is computed.
    pub fn new(
        cell: CellId,
        base_version: u32,
        old_source: impl Into<String>,
        new_source: impl Into<String>,
        provenance: PatchProvenance,
    ) -> Self {
        let old_source = old_source.into();
        let new_source = new_source.into();
        let diff = unified_diff(&old_source, &new_source, &format!("cell-{cell}"));
        Self {
            cell,
            base_version,
            old_source,
            new_source,
            diff,
            provenance,
        }
    }

    /// The [`Provenance`] of the cell version the patch creates: the model
    /// (`model:NAME`) or the patcher (`patcher:NAME`) as author, and as
    /// reason the description, the diagnosis and the call id.
    pub fn graph_provenance(&self) -> Provenance {
        let p = &self.provenance;
        let author = match &p.model {
            Some(model) => format!("model:{model}"),
            None => format!("patcher:{}", p.patcher),
        };
        let mut reason = format!("{} (fixes {})", p.description, p.diagnosis);
        if let Some(call) = &p.call_id {
            reason.push_str(&format!(" [{} call {call}]", p.patcher));
        }
        Provenance::new(author, reason, p.at)
    }
}

/// Why no patch could be proposed, applied or rolled back.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PatchError {
    /// The cell is not in the graph.
    #[error("cell {0} is not in the graph")]
    UnknownCell(CellId),
    /// None of the diagnosis' suggestions is a rule the [`RulePatcher`]
    /// can apply to the code.
    #[error("no cheap rule fixes the {class} error in cell {cell}")]
    NoRule {
        /// The failing cell.
        cell: CellId,
        /// The error class of the diagnosis.
        class: ErrorClass,
    },
    /// A rule produced code that does not parse (a bug in the rule).
    #[error("the rule '{rule}' produced invalid code for cell {cell}: {source}")]
    InvalidRuleOutput {
        /// The cell.
        cell: CellId,
        /// The rule's description.
        rule: String,
        /// The syntax error.
        #[source]
        source: AnalysisError,
    },
    /// The model call itself failed.
    #[error("the model call for a patch of cell {cell} failed: {source}")]
    Model {
        /// The cell to patch.
        cell: CellId,
        /// The model's error.
        #[source]
        source: ModelError,
    },
    /// Every answer within the budget was unusable.
    #[error(
        "the model gave no usable new code for cell {cell} in {attempts} attempts; the last answer: {last}"
    )]
    BudgetExhausted {
        /// The cell to patch.
        cell: CellId,
        /// Calls made.
        attempts: u32,
        /// What was wrong with the last answer.
        #[source]
        last: AnswerError,
    },
    /// The cell changed since the patch was made, or since it was applied.
    #[error(
        "cell {cell} is at version {found}, but the operation expects version {expected}; it changed in between"
    )]
    Conflict {
        /// The cell.
        cell: CellId,
        /// The version the patch or rollback expects.
        expected: u32,
        /// The cell's current version.
        found: u32,
    },
    /// The cell's code is not the code the patch was made from (or, for a
    /// rollback, not the code the patch made), although its version number
    /// may be the expected one: the graph was rebuilt, or the patch was
    /// written against other code. Nothing was changed.
    #[error(
        "cell {cell} (version {version}) does not have the code the {operation} expects: line {line} is {found:?} where {expected:?} was expected"
    )]
    SourceConflict {
        /// The cell.
        cell: CellId,
        /// The cell's current version.
        version: u32,
        /// `patch` or `rollback`.
        operation: &'static str,
        /// The first line (1-based) where the codes differ.
        line: u32,
        /// That line of the code expected (empty past its end).
        expected: String,
        /// That line of the cell's code (empty past its end).
        found: String,
    },
    /// The graph refused the change.
    #[error("the graph rejected the change of cell {cell}: {source}")]
    Graph {
        /// The cell.
        cell: CellId,
        /// The graph's error.
        #[source]
        source: GraphError,
    },
}

/// Proposes a patch for a diagnosed failure. Dyn-compatible: loops hold
/// patchers as `Box<dyn Patcher>` and try them in turn.
#[async_trait]
pub trait Patcher: Send + Sync {
    /// The patcher's name, recorded in [`PatchProvenance::patcher`].
    fn name(&self) -> &str;

    /// Proposes a new version of one cell that fixes `diagnosis`.
    ///
    /// # Errors
    ///
    /// A [`PatchError`] saying why no patch could be made.
    async fn propose(
        &self,
        diagnosis: &Diagnosis,
        graph: &ExecutionStateGraph,
    ) -> Result<Patch, PatchError>;
}

/// The result of [`apply_patch`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppliedPatch {
    /// The patched cell.
    pub cell: CellId,
    /// The version before the patch.
    pub previous_version: u32,
    /// The version the patch created.
    pub version: u32,
    /// The cells that became stale (the cell and what depends on it before
    /// or after the change), in execution order.
    pub stale: Vec<CellId>,
    /// The minimal replay after the patch ([`ExecutionStateGraph::replay_order`]
    /// of the cell): the stale cells plus out-of-date cells they need.
    pub replay: Vec<CellId>,
    /// The code the patch replaced, which [`rollback_patch`] restores
    /// (`None` in a record serialized before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_source: Option<String>,
    /// The code the patch made current; [`rollback_patch`] refuses a cell
    /// whose code is no longer this (`None` as above).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// [`PatchError::SourceConflict`] if `found` (the code of `cell` at
/// `version`) is not `expected`.
fn check_source(
    cell: CellId,
    version: u32,
    operation: &'static str,
    expected: &str,
    found: &str,
) -> Result<(), PatchError> {
    if expected == found {
        return Ok(());
    }
    let mut expected_lines = expected.split('\n');
    let mut found_lines = found.split('\n');
    let mut line: u32 = 1;
    loop {
        match (expected_lines.next(), found_lines.next()) {
            (Some(a), Some(b)) if a == b => line = line.saturating_add(1),
            (a, b) => {
                return Err(PatchError::SourceConflict {
                    cell,
                    version,
                    operation,
                    line,
                    expected: a.unwrap_or_default().to_owned(),
                    found: b.unwrap_or_default().to_owned(),
                });
            }
        }
    }
}

/// Makes `patch` the new version of its cell, with provenance from the
/// patch, and marks the cell and its downstream stale.
///
/// # Errors
///
/// [`PatchError::UnknownCell`]; [`PatchError::Conflict`] if the cell is no
/// longer at the patch's base version; [`PatchError::SourceConflict`] if
/// its code is not the patch's [`old_source`](Patch::old_source) (a graph
/// rebuilt since, such as by
/// [`Notebook::sync_sources`](crate::notebook::Notebook::sync_sources),
/// numbers versions anew, so the version alone does not tell);
/// [`PatchError::Graph`] if the graph rejects the new source (it does not
/// parse with the graph's options, or CPython would not compile it). The
/// graph is unchanged on error.
pub fn apply_patch(
    graph: &mut ExecutionStateGraph,
    patch: &Patch,
) -> Result<AppliedPatch, PatchError> {
    let cell = patch.cell;
    let node = graph
        .cell(cell)
        .map_err(|_| PatchError::UnknownCell(cell))?;
    let previous_version = node.current_version().number;
    if previous_version != patch.base_version {
        return Err(PatchError::Conflict {
            cell,
            expected: patch.base_version,
            found: previous_version,
        });
    }
    let previous_source = node.source().to_owned();
    check_source(
        cell,
        previous_version,
        "patch",
        &patch.old_source,
        &previous_source,
    )?;
    let stale = graph
        .replace_code(cell, patch.new_source.clone(), patch.graph_provenance())
        .map_err(|source| PatchError::Graph { cell, source })?;
    let replay = graph
        .replay_order(cell)
        .map_err(|source| PatchError::Graph { cell, source })?;
    let version = graph
        .cell(cell)
        .map_err(|_| PatchError::UnknownCell(cell))?
        .current_version()
        .number;
    tracing::debug!(
        cell = cell.get(),
        version,
        stale = stale.len(),
        "applied patch"
    );
    Ok(AppliedPatch {
        cell,
        previous_version,
        version,
        stale,
        replay,
        previous_source: Some(previous_source),
        source: Some(patch.new_source.clone()),
    })
}

/// Restores the code the cell had before `applied`, as a new version (the
/// graph never rewrites history). Returns the cells that became stale, in
/// execution order.
///
/// # Errors
///
/// [`PatchError::UnknownCell`]; [`PatchError::Conflict`] if the cell
/// changed after the patch was applied; [`PatchError::SourceConflict`] if
/// its code is not the code the patch made (the graph was rebuilt);
/// [`PatchError::Graph`]. The graph is unchanged on error.
pub fn rollback_patch(
    graph: &mut ExecutionStateGraph,
    applied: &AppliedPatch,
) -> Result<Vec<CellId>, PatchError> {
    let cell = applied.cell;
    let node = graph
        .cell(cell)
        .map_err(|_| PatchError::UnknownCell(cell))?;
    let current = node.current_version().number;
    if current != applied.version {
        return Err(PatchError::Conflict {
            cell,
            expected: applied.version,
            found: current,
        });
    }
    if let Some(source) = &applied.source {
        check_source(cell, current, "rollback", source, node.source())?;
    }
    let provenance = Provenance::now(
        "patcher:rollback",
        format!(
            "roll back the patch that made version {} (restore version {})",
            applied.version, applied.previous_version
        ),
    );
    // The code the patch replaced, rather than the graph's version of that
    // number, which a rebuilt graph would give other code for.
    match &applied.previous_source {
        Some(previous) => graph.replace_code(cell, previous.clone(), provenance),
        None => graph.rollback(cell, applied.previous_version, provenance),
    }
    .map_err(|source| PatchError::Graph { cell, source })
}
