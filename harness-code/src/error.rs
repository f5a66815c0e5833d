//! Error types of the `code` module, one enum per module boundary.

use serde::{Deserialize, Serialize};

use crate::graph::CellId;

/// Why a Python cell could not be analysed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AnalysisError {
    /// The cell is not valid Python; `line` and `column` are 1-based and point at
    /// the first offending character.
    #[error("syntax error at line {line}, column {column}: {message}")]
    Syntax {
        /// 1-based line of the error.
        line: u32,
        /// 1-based column (in characters) of the error.
        column: u32,
        /// The parser's description of what was wrong.
        message: String,
    },
    /// Brackets or indented blocks nest deeper than CPython accepts (200
    /// bracket levels, 99 block levels), which CPython would refuse too.
    /// Rejected before parsing.
    #[error("{nesting} nested deeper than {limit} levels at line {line}, column {column}")]
    TooDeeplyNested {
        /// What nests too deeply.
        nesting: NestingKind,
        /// 1-based line where the limit is exceeded.
        line: u32,
        /// 1-based column (in characters) where the limit is exceeded.
        column: u32,
        /// The nesting limit.
        limit: u32,
    },
    /// One top-level statement is too long or nests too deeply to be
    /// parsed and walked within the stack the analysis may use (1 GiB): it
    /// has more than `limit` operators, brackets, keywords and lines (a sum
    /// of tens of thousands of terms, a chain of as many `not` or
    /// `a if c else`). Rejected before parsing.
    #[error(
        "the statement at line {line} is too long or too deeply nested to analyse: it counts {units} operators, brackets, keywords and lines, at most {limit} are allowed; split it into smaller statements"
    )]
    TooComplex {
        /// 1-based line where the statement starts.
        line: u32,
        /// Its operators, brackets, keywords and lines (an upper bound of
        /// its nesting).
        units: u64,
        /// The most allowed.
        limit: u64,
    },
    /// The source is larger than the analysis accepts: 4 GiB in any case
    /// (the parser's offsets are 32-bit), 32 MiB for a source that nests more
    /// than one parse may and is parsed in groups of statements.
    #[error("the source is {bytes} bytes long; at most {limit} bytes can be analysed")]
    TooLarge {
        /// Length of the source in bytes.
        bytes: u64,
        /// The largest source accepted.
        limit: u64,
    },
    /// The thread that parses large sources on a stack of its own could not
    /// be started (the system refused the thread or its stack).
    #[error(
        "could not start the thread that analyses this source: {message}; retry with more memory available"
    )]
    AnalysisThread {
        /// The system's error.
        message: String,
    },
    /// The Python parser panicked on this source (a bug in the parser);
    /// the host keeps running.
    #[error("the Python parser failed on this source: {message}")]
    ParserPanic {
        /// The panic message.
        message: String,
    },
}

/// What nests too deeply in [`AnalysisError::TooDeeplyNested`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NestingKind {
    /// Parentheses, brackets and braces.
    Brackets,
    /// Indented blocks (`if`, `for`, `def`, ...).
    Blocks,
}

impl std::fmt::Display for NestingKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Brackets => "brackets",
            Self::Blocks => "indented blocks",
        })
    }
}

/// Why an operation on an [`ExecutionStateGraph`](crate::ExecutionStateGraph) failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GraphError {
    /// The cell id does not belong to this graph.
    #[error("cell {0} does not exist in this graph")]
    UnknownCell(CellId),
    /// The new code of a cell could not be analysed, so nothing was changed.
    #[error("could not analyse the code of {}: {source}", cell.map_or_else(|| "the new cell".to_owned(), |s| format!("cell {s}")))]
    Analysis {
        /// The cell whose code was being replaced, `None` for a new cell.
        cell: Option<CellId>,
        /// What was wrong with the code.
        #[source]
        source: AnalysisError,
    },
    /// Explicit edges must point from an earlier cell to a later one, so that
    /// the cell order stays a valid execution order.
    #[error("an edge from cell {from} to cell {to} would point backwards: {from} runs after {to}")]
    BackwardEdge {
        /// The producing cell.
        from: CellId,
        /// The consuming cell.
        to: CellId,
    },
    /// A cell cannot depend on itself.
    #[error("cell {0} cannot depend on itself")]
    SelfEdge(CellId),
    /// The cell has no version with this number.
    #[error("cell {cell} has no version {version} (it has {available})")]
    UnknownVersion {
        /// The cell asked about.
        cell: CellId,
        /// The version number that was asked for.
        version: u32,
        /// How many versions the cell has.
        available: u32,
    },
}

/// Why a notebook or percent-format script could not be split into cells.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IpynbError {
    /// The `.ipynb` file is not valid JSON.
    #[error("notebook is not valid JSON at line {line}, column {column}: {message}")]
    InvalidJson {
        /// 1-based line of the JSON error.
        line: usize,
        /// 1-based column of the JSON error.
        column: usize,
        /// What the JSON parser reported.
        message: String,
    },
    /// The JSON is valid but is not an nbformat 4 notebook.
    #[error("not an nbformat 4 notebook: {0}")]
    NotANotebook(String),
}
