#![doc = include_str!("docs/crate.md")]

pub mod agent;
mod analyze;
pub mod blobs;
mod cells;
pub mod diagnose;
mod error;
mod graph;
pub mod kernel;
pub mod patch;
pub mod replay;
pub mod session;

pub use analyze::{
    AnalysisOptions, Definition, DefinitionKind, DynamicFeature, DynamicUse, Import, IpythonEscape,
    StepAnalysis, analyze_step, analyze_step_with, check_syntax, is_builtin, is_mutating_method,
};
pub use cells::{CodeCell, notebook_code_cells, split_percent_script};
pub use error::{AnalysisError, GraphError, NestingKind, NotebookError};
pub use graph::{
    Dependency, DependencyEdge, Effects, ExecutionStateGraph, MAX_RUN_HISTORY, OutputSummary,
    Provenance, RunOutcome, RunRecord, RunTiming, StepId, StepNode, StepStatus, StepSubgraph,
    StepVersion, Timestamp,
};
