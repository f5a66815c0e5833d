#![doc = include_str!("docs/crate.md")]
#![doc = include_str!("docs/analyze.md")]
#![doc = include_str!("docs/running.md")]
#![doc = include_str!("docs/agents.md")]
#![doc = include_str!("docs/testing.md")]

pub mod agent;
mod analyze;
pub mod blobs;
mod cells;
pub mod diagnose;
mod error;
mod graph;
pub mod kernel;
pub mod notebook;
mod parse;
pub mod patch;
pub mod replay;
mod trace;

pub use analyze::{
    AnalysisOptions, CellAnalysis, Definition, DefinitionKind, DynamicFeature, DynamicUse, Import,
    IpythonEscape, analyze_cell, analyze_cell_with, check_syntax, is_builtin, is_mutating_method,
};
pub use cells::{CodeCell, notebook_code_cells, split_percent_script};
pub use error::{AnalysisError, GraphError, IpynbError, NestingKind};
pub use graph::{
    CellId, CellNode, CellOutcome, CellRun, CellStatus, CellSubgraph, CellTiming, CellVersion,
    Dependency, DependencyEdge, Effects, ExecutionStateGraph, MAX_RUN_HISTORY, OutputSummary,
    Provenance, Timestamp,
};
pub use parse::with_analysis_stack;
pub use trace::{CellTrace, FILE_PREFIX, traced_downstream};
