//! Diagnosis of a failed cell: what kind of error it is, which cell is to
//! blame, the least a model needs to see to fix it, and cheap suggestions.
//!
//! An executor reports a failure as a [`CellFailure`]; [`diagnose`] reads it
//! against the [`ExecutionStateGraph`] and returns a [`Diagnosis`]:
//!
//! - the [`ErrorClass`], message and line;
//! - **culprits**, ranked, each with reasons: the cell that produced the
//!   value the failing line choked on (found through the names the line
//!   uses and the graph's dependency edges), the cell that should have
//!   bound a missing name, the failing cell itself for a misspelling or a
//!   bad import;
//! - a **minimal context**: the failing cell, the cells that produced the
//!   names involved, and short reprs of those values when known;
//! - **suggestions** from cheap rules: a close name that exists, a missing
//!   import of a well-known module, a misspelled module, key or attribute.
//!
//! ```
//! use harness_code::diagnose::{ErrorClass, CellFailure, Suggestion, diagnose};
//! use harness_code::{ExecutionStateGraph, Provenance};
//!
//! let mut graph = ExecutionStateGraph::new();
//! let data = graph.add_cell("prices = [3, 4]", Provenance::now("model", "data")).unwrap();
//! let sum = graph.add_cell("total = sum(prices)\nprint(totl)", Provenance::now("model", "sum")).unwrap();
//! let failure = CellFailure::exception(sum, "NameError", "name 'totl' is not defined").at_line(2);
//!
//! let diagnosis = diagnose(&failure, &graph);
//! assert_eq!(diagnosis.class, ErrorClass::Name);
//! assert_eq!(diagnosis.culprits[0].cell, sum);
//! assert!(matches!(&diagnosis.suggestions[0],
//!     Suggestion::RenameName { from, to, .. } if from == "totl" && to == "total"));
//! # let _ = data;
//! ```

mod classify;
mod convert;
pub(crate) mod pysrc;
mod tables;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fmt::Write as _;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use classify::ErrorClass;

use crate::{CellId, CellNode, CellStatus, ExecutionStateGraph, is_builtin, is_mutating_method};
use classify::{AttrOwner, KeyRepr, TypeShape, ValueShape};
use pysrc::{Base, CellSource, Facts, Key};

/// Longest cell source, in bytes, that a [`Diagnosis`] context carries;
/// longer sources are cut at a line break and marked truncated.
pub const MAX_CONTEXT_SOURCE: usize = 4_000;

/// A failed run of a cell, as an executor reports it.
///
/// Built from a kernel's result: the exception type and message (`ename`
/// and `evalue` in Jupyter terms), the line within the cell, the formatted
/// traceback, and short reprs of the names the kernel can see.
///
/// ```
/// use std::time::Duration;
/// use harness_code::CellId;
/// use harness_code::diagnose::{FailureKind, CellFailure};
///
/// let failure = CellFailure::exception(CellId::new(3), "KeyError", "'region'")
///     .at_line(2)
///     .with_value("row", "dict(name='north', sales=10)");
/// assert_eq!(failure.exception_type(), Some("KeyError"));
///
/// let timeout = CellFailure::timeout(CellId::new(1), Duration::from_secs(30));
/// assert!(matches!(timeout.kind, FailureKind::Timeout { after_ms: 30_000 }));
///
/// let parsed = CellFailure::from_traceback(CellId::new(0), "Traceback (most recent call last):\n  File \"<cell 0>\", line 3, in <module>\nZeroDivisionError: division by zero");
/// assert_eq!(parsed.exception_type(), Some("ZeroDivisionError"));
/// assert_eq!(parsed.line, Some(3));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellFailure {
    /// The cell that failed.
    pub cell: CellId,
    /// What happened.
    pub kind: FailureKind,
    /// 1-based line within the cell's source where it failed, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// The formatted traceback, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceback: Option<String>,
    /// Short reprs or type descriptions of names in the namespace, e.g.
    /// `row` → `None` or `df` → `DataFrame(120x4)`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub values: BTreeMap<String, String>,
}

/// How a cell failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FailureKind {
    /// The cell raised an exception.
    Exception {
        /// The exception type, e.g. `NameError` or `json.decoder.JSONDecodeError`.
        exception: String,
        /// The exception message (`str(exc)`), e.g. `name 'x' is not defined`.
        message: String,
    },
    /// The cell ran longer than allowed and was interrupted.
    Timeout {
        /// The time limit it exceeded, in milliseconds.
        after_ms: u64,
    },
    /// The kernel process died while running the cell.
    Crash {
        /// What is known: exit status, signal, last output.
        detail: String,
    },
}

impl CellFailure {
    /// A failure by exception.
    pub fn exception(
        cell: CellId,
        exception: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self::new(
            cell,
            FailureKind::Exception {
                exception: exception.into(),
                message: message.into(),
            },
        )
    }

    /// A failure by exceeding the time limit `after`.
    pub fn timeout(cell: CellId, after: Duration) -> Self {
        Self::new(
            cell,
            FailureKind::Timeout {
                after_ms: u64::try_from(after.as_millis()).unwrap_or(u64::MAX),
            },
        )
    }

    /// A failure by the kernel dying.
    pub fn crash(cell: CellId, detail: impl Into<String>) -> Self {
        Self::new(
            cell,
            FailureKind::Crash {
                detail: detail.into(),
            },
        )
    }

    /// A failure read from a formatted CPython traceback: the exception
    /// and message from its last line, the line from the innermost frame of
    /// the cell's top-level code (`in <module>`). A traceback whose last
    /// line names no exception gives an `Exception` of type `Exception`.
    pub fn from_traceback(cell: CellId, traceback: impl Into<String>) -> Self {
        let traceback = traceback.into();
        let (exception, message) = classify::exception_line(&traceback)
            .unwrap_or_else(|| ("Exception".to_owned(), String::new()));
        let mut failure = Self::exception(cell, exception, message);
        failure.line = module_frame_line(&traceback);
        failure.traceback = Some(traceback);
        failure
    }

    fn new(cell: CellId, kind: FailureKind) -> Self {
        Self {
            cell,
            kind,
            line: None,
            traceback: None,
            values: BTreeMap::new(),
        }
    }

    /// Sets the 1-based line within the cell.
    pub fn at_line(mut self, line: u32) -> Self {
        self.line = Some(line);
        self
    }

    /// Sets the traceback text.
    pub fn with_traceback(mut self, traceback: impl Into<String>) -> Self {
        self.traceback = Some(traceback.into());
        self
    }

    /// Adds a short repr of a name's value.
    pub fn with_value(mut self, name: impl Into<String>, repr: impl Into<String>) -> Self {
        self.values.insert(name.into(), repr.into());
        self
    }

    /// Adds short reprs of names' values.
    pub fn with_values<K: Into<String>, V: Into<String>>(
        mut self,
        values: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        self.values
            .extend(values.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }

    /// The exception type, for an exception.
    pub fn exception_type(&self) -> Option<&str> {
        match &self.kind {
            FailureKind::Exception { exception, .. } => Some(exception),
            _ => None,
        }
    }

    /// The error class.
    pub fn class(&self) -> ErrorClass {
        match &self.kind {
            FailureKind::Exception { exception, .. } => ErrorClass::of_exception(exception),
            FailureKind::Timeout { .. } => ErrorClass::Timeout,
            FailureKind::Crash { .. } => ErrorClass::Crash,
        }
    }

    /// The message: the exception message, or a description of the
    /// timeout or crash.
    pub fn message(&self) -> String {
        match &self.kind {
            FailureKind::Exception { message, .. } => message.clone(),
            FailureKind::Timeout { after_ms } => {
                format!("timed out after {}", format_millis(*after_ms))
            }
            FailureKind::Crash { detail } => format!("the kernel died: {detail}"),
        }
    }

    /// The failing line: [`line`](Self::line), or else the line of the last
    /// `in <module>` frame of the traceback.
    pub fn effective_line(&self) -> Option<u32> {
        self.line
            .or_else(|| self.traceback.as_deref().and_then(module_frame_line))
    }
}

fn module_frame_line(traceback: &str) -> Option<u32> {
    classify::frames(traceback)
        .iter()
        .rev()
        .find(|frame| frame.function == "<module>")
        .map(|frame| frame.line)
}

fn format_millis(millis: u64) -> String {
    if millis.is_multiple_of(1000) {
        format!("{} s", millis / 1000)
    } else {
        format!("{:.1} s", millis as f64 / 1000.0)
    }
}

/// A cell that may be to blame, with why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Culprit {
    /// The cell.
    pub cell: CellId,
    /// The line of that cell that matters, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// The names through which the cell is involved.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// Why the cell is suspected, most telling first.
    pub reasons: Vec<String>,
}

/// A fix that a cheap rule proposes. [`RulePatcher`](crate::patch::RulePatcher)
/// applies the variants that change code; the others are advice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Suggestion {
    /// Rename a misspelled module-level name in a cell.
    RenameName {
        /// The cell to change.
        cell: CellId,
        /// The name as written.
        from: String,
        /// The name it should be.
        to: String,
    },
    /// Add an import of a well-known module or member to a cell.
    AddImport {
        /// The cell to change.
        cell: CellId,
        /// The name the import binds.
        name: String,
        /// The import statement, e.g. `import pandas as pd`.
        statement: String,
    },
    /// Fix a misspelled module in an import statement.
    FixImport {
        /// The cell to change.
        cell: CellId,
        /// The line of the import.
        line: u32,
        /// The module as written.
        from: String,
        /// The well-known module it is close to.
        to: String,
    },
    /// Use a close key that exists in the data instead of a missing one.
    RenameKey {
        /// The cell to change.
        cell: CellId,
        /// The line of the subscript, when known.
        line: Option<u32>,
        /// The missing key.
        from: String,
        /// The close key.
        to: String,
        /// Where the close key was seen: a cell's source, or the value of
        /// the subscripted name.
        seen_in: String,
    },
    /// Use a close attribute of the value's type instead of a missing one.
    RenameAttribute {
        /// The cell to change.
        cell: CellId,
        /// The line of the attribute access, when known.
        line: Option<u32>,
        /// The missing attribute.
        from: String,
        /// The close attribute.
        to: String,
    },
    /// Install the distribution that provides a module (advice only).
    InstallPackage {
        /// The module that could not be imported.
        module: String,
        /// The package to install, e.g. `scikit-learn` for `sklearn`.
        package: String,
    },
    /// A name is bound only by a cell that runs later (advice only).
    DefinedLater {
        /// The name.
        name: String,
        /// The later cell that binds it.
        cell: CellId,
    },
    /// A cell rebinds a builtin that a later cell still uses as the
    /// builtin (advice only).
    ShadowedBuiltin {
        /// The builtin's name.
        name: String,
        /// The cell that rebinds it.
        cell: CellId,
    },
}

impl Suggestion {
    /// The cell whose code the suggestion changes, for those that change code.
    pub fn target(&self) -> Option<CellId> {
        match self {
            Self::RenameName { cell, .. }
            | Self::AddImport { cell, .. }
            | Self::FixImport { cell, .. }
            | Self::RenameKey { cell, .. }
            | Self::RenameAttribute { cell, .. } => Some(*cell),
            Self::InstallPackage { .. }
            | Self::DefinedLater { .. }
            | Self::ShadowedBuiltin { .. } => None,
        }
    }
}

impl fmt::Display for Suggestion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::RenameName { cell, from, to } => {
                write!(f, "rename `{from}` to `{to}` in cell {cell}")
            }
            Self::AddImport {
                cell, statement, ..
            } => write!(f, "add `{statement}` to cell {cell}"),
            Self::FixImport {
                cell,
                line,
                from,
                to,
            } => write!(
                f,
                "import `{to}` instead of `{from}` (cell {cell}, line {line})"
            ),
            Self::RenameKey {
                cell,
                from,
                to,
                seen_in,
                ..
            } => write!(
                f,
                "use key '{to}' instead of '{from}' in cell {cell} ('{to}' appears in {seen_in})"
            ),
            Self::RenameAttribute { cell, from, to, .. } => {
                write!(f, "use attribute `{to}` instead of `{from}` in cell {cell}")
            }
            Self::InstallPackage { module, package } => {
                write!(
                    f,
                    "install the `{package}` package, which provides `{module}`"
                )
            }
            Self::DefinedLater { name, cell } => write!(
                f,
                "`{name}` is bound only in cell {cell}, which runs later: run or move it earlier"
            ),
            Self::ShadowedBuiltin { name, cell } => write!(
                f,
                "cell {cell} rebinds the builtin `{name}`: rename that variable"
            ),
        }
    }
}

/// Why a cell is part of a diagnosis' context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContextRole {
    /// The cell that failed.
    Failing,
    /// A cell that produced a value the failure involves.
    Producer,
    /// Another suspected cell.
    Suspect,
}

/// One cell shown in a diagnosis' context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextCell {
    /// The cell.
    pub cell: CellId,
    /// Why it is shown.
    pub role: ContextRole,
    /// Involved names it produces.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub provides: Vec<String>,
    /// Its current source, cut at [`MAX_CONTEXT_SOURCE`] bytes.
    pub source: String,
    /// Whether `source` was cut.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

/// The least a model needs to see to fix a failure.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiagnosisContext {
    /// The failing cell, its suspects and the producers of the names
    /// involved, in cell order.
    pub cells: Vec<ContextCell>,
    /// Short reprs of the involved names' values, where known (from the
    /// failure, else from the producer's last run).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub values: BTreeMap<String, String>,
}

/// What [`diagnose`] found out about a failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnosis {
    /// The failing cell.
    pub cell: CellId,
    /// The version of the failing cell's code that was diagnosed (`None`
    /// if the cell is not in the graph).
    pub version: Option<u32>,
    /// The error class.
    pub class: ErrorClass,
    /// The exception type, for an exception.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exception: Option<String>,
    /// The exception message, or a description of a timeout or crash.
    pub message: String,
    /// The failing line within the cell, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// The text of the failing line, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line_text: Option<String>,
    /// The namespace names the failure involves.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// Cells to blame, most likely first; never empty for a cell of the
    /// graph (the failing cell is the fallback).
    pub culprits: Vec<Culprit>,
    /// What a model needs to see.
    pub context: DiagnosisContext,
    /// Cheap fixes, most likely first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub suggestions: Vec<Suggestion>,
}

impl Diagnosis {
    /// The most likely culprit.
    pub fn top_culprit(&self) -> Option<&Culprit> {
        self.culprits.first()
    }

    /// One line: error, cell, line and message.
    pub fn summary(&self) -> String {
        let what = self
            .exception
            .clone()
            .unwrap_or_else(|| self.class.as_str().to_owned());
        let line = self
            .line
            .map(|line| format!(", line {line}"))
            .unwrap_or_default();
        format!("{what} in cell {}{line}: {}", self.cell, self.message)
    }

    /// The diagnosis as plain text for a model or a person: the error,
    /// culprits with reasons, suggestions, and the context cells with their
    /// sources and the known values.
    pub fn report(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "Error: {}", self.summary());
        if let Some(text) = &self.line_text {
            let _ = writeln!(out, "Failing line: {}", text.trim());
        }
        if !self.culprits.is_empty() {
            let _ = writeln!(out, "\nLikely causes, most likely first:");
            for (rank, culprit) in self.culprits.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "{}. cell {}: {}",
                    rank + 1,
                    culprit.cell,
                    culprit.reasons.join("; ")
                );
            }
        }
        if !self.suggestions.is_empty() {
            let _ = writeln!(out, "\nSuggestions:");
            for suggestion in &self.suggestions {
                let _ = writeln!(out, "- {suggestion}");
            }
        }
        if !self.context.values.is_empty() {
            let _ = writeln!(out, "\nValues:");
            for (name, value) in &self.context.values {
                let _ = writeln!(out, "- {name} = {value}");
            }
        }
        for cell in &self.context.cells {
            let role = match cell.role {
                ContextRole::Failing => "failing cell".to_owned(),
                ContextRole::Producer if !cell.provides.is_empty() => {
                    format!("produces {}", cell.provides.join(", "))
                }
                ContextRole::Producer => "producer".to_owned(),
                ContextRole::Suspect => "suspect".to_owned(),
            };
            let cut = if cell.truncated { " (truncated)" } else { "" };
            let _ = writeln!(
                out,
                "\nCell {} ({role}){cut}:\n```python\n{}\n```",
                cell.cell,
                cell.source.trim_end()
            );
        }
        out
    }
}

/// Diagnoses `failure` against `graph`: classifies it, ranks the cells to
/// blame with reasons, gathers the minimal context and cheap suggestions.
///
/// A failing cell that is not in the graph gets a diagnosis from the
/// message alone, blaming that cell, with an empty context.
///
/// The cells' code is parsed on a thread with a large stack of its own; a
/// cell too large even for it is diagnosed without its syntax tree (from
/// the message and the graph), so no code can exhaust the stack.
pub fn diagnose(failure: &CellFailure, graph: &ExecutionStateGraph) -> Diagnosis {
    crate::parse::on_deep_stack(|| diagnose_here(failure, graph))
}

fn diagnose_here(failure: &CellFailure, graph: &ExecutionStateGraph) -> Diagnosis {
    let class = failure.class();
    let message = failure.message();
    let line = failure.effective_line();
    let Ok(node) = graph.cell(failure.cell) else {
        return Diagnosis {
            cell: failure.cell,
            version: None,
            class,
            exception: failure.exception_type().map(str::to_owned),
            message,
            line,
            line_text: None,
            names: Vec::new(),
            culprits: vec![Culprit {
                cell: failure.cell,
                line,
                names: Vec::new(),
                reasons: vec![format!(
                    "cell {} failed; it is not in the graph, so nothing else is known",
                    failure.cell
                )],
            }],
            context: DiagnosisContext::default(),
            suggestions: Vec::new(),
        };
    };
    let source = CellSource::parse(node.source());
    let line = line.filter(|&l| l >= 1 && l <= source.line_count());
    let facts = source.facts();
    let mut diagnoser = Diagnoser {
        graph,
        failure,
        node,
        source,
        facts,
        line,
        culprits: Vec::new(),
        suggestions: Vec::new(),
        names: Vec::new(),
        import_line: None,
    };
    diagnoser.run(class, &message);
    diagnoser.finish(class, message)
}

struct Diagnoser<'g> {
    graph: &'g ExecutionStateGraph,
    failure: &'g CellFailure,
    node: &'g CellNode,
    source: CellSource<'g>,
    facts: Facts,
    line: Option<u32>,
    culprits: Vec<Culprit>,
    suggestions: Vec<Suggestion>,
    names: Vec<String>,
    /// The line of a failing import, found by the import rule.
    import_line: Option<u32>,
}

/// Methods that work in place and return `None`, although
/// [`is_mutating_method`] lists them (it also lists `pop`, `fit`, ... which
/// return a value).
fn returns_none(method: &str) -> bool {
    is_mutating_method(method)
        && !matches!(
            method,
            "pop"
                | "popitem"
                | "popleft"
                | "setdefault"
                | "fit"
                | "fit_transform"
                | "partial_fit"
                | "set_params"
                | "load_state_dict"
        )
}

impl<'g> Diagnoser<'g> {
    fn failing(&self) -> CellId {
        self.node.id()
    }

    /// The traceback's frames, outermost first (none without one).
    fn frames(&self) -> Vec<classify::Frame> {
        self.failure
            .traceback
            .as_deref()
            .map(classify::frames)
            .unwrap_or_default()
    }

    fn at_line(&self) -> String {
        match self.line {
            Some(line) => format!("line {line} of cell {}", self.failing()),
            None => format!("cell {}", self.failing()),
        }
    }

    fn blame(&mut self, cell: CellId, line: Option<u32>, names: &[&str], reason: String) {
        if let Some(existing) = self.culprits.iter_mut().find(|c| c.cell == cell) {
            if !existing.reasons.contains(&reason) {
                existing.reasons.push(reason);
            }
            for name in names {
                if !existing.names.iter().any(|n| n == name) {
                    existing.names.push((*name).to_owned());
                }
            }
            if existing.line.is_none() {
                existing.line = line;
            }
            return;
        }
        self.culprits.push(Culprit {
            cell,
            line,
            names: names.iter().map(|n| (*n).to_owned()).collect(),
            reasons: vec![reason],
        });
    }

    fn suggest(&mut self, suggestion: Suggestion) {
        if !self.suggestions.contains(&suggestion) {
            self.suggestions.push(suggestion);
        }
    }

    fn involve(&mut self, name: &str) {
        if !self.names.iter().any(|n| n == name) {
            self.names.push(name.to_owned());
        }
    }

    /// Whether `range` starts on a line before the failing line.
    fn before_line(&self, range: rustpython_ruff_text_size::TextRange) -> bool {
        self.line
            .is_some_and(|line| self.source.line_of(range.start()) < line)
    }

    /// The cells whose value of `name` the failing line saw, most likely
    /// first: the failing cell if it bound `name` before that line (or
    /// binds it without reading it), then the producers the graph links
    /// the failing cell to for `name`, latest first.
    fn value_sources(&self, name: &str) -> Vec<CellId> {
        let analysis = self.node.analysis();
        let own = self
            .facts
            .names
            .iter()
            .any(|n| n.store && n.name == name && self.before_line(n.range))
            || (analysis.writes.contains(name)
                && !analysis.reads.contains(name)
                && !analysis.builtins.contains(name));
        let mut out = Vec::new();
        if own {
            out.push(self.failing());
        }
        if let Ok(dependencies) = self.graph.dependencies(self.failing()) {
            out.extend(
                dependencies
                    .iter()
                    .rev()
                    .filter(|(_, dependency)| dependency.names.contains(name))
                    .map(|(cell, _)| *cell),
            );
        }
        out
    }

    /// Whether `name` is a module bound by an import, where the failing
    /// line sees it.
    fn is_module(&self, name: &str) -> bool {
        self.value_sources(name).first().is_some_and(|&cell| {
            self.graph
                .cell(cell)
                .is_ok_and(|node| node.analysis().imports_name(name))
        })
    }

    /// Whether `name` is a builtin that no earlier cell rebinds.
    fn is_plain_builtin(&self, name: &str) -> bool {
        is_builtin(name) && self.value_sources(name).is_empty()
    }

    /// The known short repr of `name`'s value.
    fn value_of(&self, name: &str) -> Option<String> {
        if let Some(value) = self.failure.values.get(name) {
            return Some(value.clone());
        }
        self.value_sources(name).into_iter().find_map(|cell| {
            self.graph
                .cell(cell)
                .ok()?
                .outputs()?
                .values
                .get(name)
                .cloned()
        })
    }

    fn on_line(&self, range: rustpython_ruff_text_size::TextRange) -> bool {
        self.source.on_line(range, self.line)
    }

    /// Names loaded on the failing line (the whole cell without a line),
    /// without plain builtins and modules.
    fn names_on_line(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for name in &self.facts.names {
            if !name.store
                && self.on_line(name.range)
                && !out.contains(&name.name)
                && !self.is_plain_builtin(&name.name)
                && !self.is_module(&name.name)
            {
                out.push(name.name.clone());
            }
        }
        out
    }

    /// Blames the sources of `name`'s value, with `why` describing the
    /// value's role; the failing cell is described as binding it itself.
    fn blame_sources(&mut self, name: &str, why: &str, none_hint: bool) {
        if self.is_plain_builtin(name) || self.is_module(name) {
            return;
        }
        self.involve(name);
        let value = self
            .value_of(name)
            .map(|v| format!(" (value: {v})"))
            .unwrap_or_default();
        for cell in self.value_sources(name) {
            let Ok(node) = self.graph.cell(cell) else {
                continue;
            };
            let mut line = None;
            let mut reason = if cell == self.failing() {
                format!("cell {cell} binds `{name}` itself{value}, {why}")
            } else {
                format!("cell {cell} produced `{name}`{value}, {why}")
            };
            let producer = CellSource::parse(node.source());
            if let Some(assign) = producer.call_assignments(name).pop() {
                line = Some(assign.line);
                if none_hint && let Some(hint) = self.none_hint(&assign) {
                    let _ = write!(reason, "; {hint}");
                }
            }
            if node.analysis().conditional_writes.contains(name) {
                let _ = write!(
                    reason,
                    "; it binds `{name}` only conditionally, so an older value may remain"
                );
            }
            if node.status() != CellStatus::Ok && cell != self.failing() {
                let _ = write!(reason, " (status: {})", status_name(node.status()));
            }
            self.blame(cell, line, &[name], reason);
        }
    }

    /// Why `name = callee(...)` may have bound `None`.
    fn none_hint(&self, assign: &pysrc::CallAssign) -> Option<String> {
        if assign.inplace {
            return Some(format!(
                "line {} assigns the result of `{}(..., inplace=True)`, which is None",
                assign.line, assign.callee
            ));
        }
        if let Some(method) = &assign.method
            && returns_none(method)
        {
            return Some(format!(
                "line {} assigns the result of `{}(...)`, which works in place and returns None",
                assign.line, assign.callee
            ));
        }
        if assign.callee == "print" {
            return Some(format!(
                "line {} assigns the result of `print(...)`, which is None",
                assign.line
            ));
        }
        let function = &assign.callee;
        let defining = self.graph.producers_of(function).into_iter().find(|&s| {
            self.graph
                .cell(s)
                .is_ok_and(|n| n.analysis().definition(function).is_some())
        })?;
        let node = self.graph.cell(defining).ok()?;
        let returns = CellSource::parse(node.source()).function_returns_value(function)?;
        (!returns).then(|| {
            format!(
                "line {} assigns the result of `{function}(...)`, and `{function}` (cell {defining}) never returns a value",
                assign.line
            )
        })
    }

    fn run(&mut self, class: ErrorClass, message: &str) {
        let exception = self.failure.exception_type().unwrap_or("").to_owned();
        match class {
            ErrorClass::Name => self.name_error(&exception, message),
            ErrorClass::Attribute => self.attribute_error(message),
            ErrorClass::Type => self.type_error(message),
            ErrorClass::Value => self.value_error(&exception, message),
            ErrorClass::KeyIndex => self.key_error(&exception, message),
            ErrorClass::Import => self.import_error(message),
            ErrorClass::Assertion => {
                for name in self.names_on_line() {
                    let why = format!("checked by the assertion on {}", self.at_line());
                    self.blame_sources(&name, &why, false);
                }
            }
            ErrorClass::Syntax | ErrorClass::Timeout | ErrorClass::Crash | ErrorClass::Other => {}
        }
        self.blame_failing_cell(class, message);
        self.blame_called_cells();
    }

    /// Cells whose functions the failing cell called on its way to the
    /// error (the traceback's frames in `<cell N>` of other cells of the
    /// graph): the error raised in a function another cell defined blames
    /// that cell's code too, and shows it in the context.
    fn blame_called_cells(&mut self) {
        let frames = self.frames();
        let failing = self.failing();
        for (depth, frame) in frames.iter().rev().enumerate() {
            let Some(cell) = frame
                .file
                .strip_prefix("<cell ")
                .and_then(|rest| rest.strip_suffix('>'))
                .and_then(|number| number.parse::<u32>().ok())
                .map(CellId::new)
                .filter(|&cell| cell != failing && self.graph.cell(cell).is_ok())
            else {
                continue;
            };
            let function = frame.function.as_str();
            let reason = if depth == 0 {
                format!(
                    "the error was raised in `{function}`, on line {} of cell {cell}, which cell {failing} called",
                    frame.line
                )
            } else {
                format!(
                    "cell {failing} reached the error through `{function}`, on line {} of cell {cell}",
                    frame.line
                )
            };
            let names: &[&str] = if function.starts_with('<') {
                &[]
            } else {
                &[function]
            };
            self.blame(cell, Some(frame.line), names, reason);
        }
    }

    /// The failing cell is always a candidate; it comes first when no rule
    /// blamed another cell.
    fn blame_failing_cell(&mut self, class: ErrorClass, message: &str) {
        let at = self.at_line();
        let reason = match class {
            ErrorClass::Syntax => format!("cell {} does not compile: {message}", self.failing()),
            ErrorClass::Timeout => {
                let mut reason = format!("cell {} {message} and was interrupted", self.failing());
                if let Some(text) = self.line.and_then(|l| self.source.line(l)) {
                    let _ = write!(reason, " while on {at}: `{}`", text.trim());
                }
                reason
            }
            ErrorClass::Crash => format!("{message} while running cell {}", self.failing()),
            _ => format!("the error was raised on {at}"),
        };
        let names: Vec<String> = if matches!(class, ErrorClass::Other) {
            self.names_on_line()
        } else {
            Vec::new()
        };
        let line = self.import_line.or(self.line);
        let cell = self.failing();
        self.blame(cell, line, &[], reason);
        // For other errors, the values on the line come after the cell itself.
        for name in names {
            let why = format!("used on {}", self.at_line());
            self.blame_sources(&name, &why, false);
        }
    }

    fn name_error(&mut self, exception: &str, message: &str) {
        let (message, hint) = classify::split_hint(message);
        let Some(name) = classify::quoted(message).into_iter().next() else {
            return;
        };
        let name = name.to_owned();
        self.involve(&name);
        let failing = self.failing();

        if exception.ends_with("UnboundLocalError") {
            self.unbound_local(&name);
            return;
        }

        // Earlier cells that should have bound it.
        let mut bound_earlier = false;
        for cell in self.value_sources(&name) {
            if cell == failing {
                continue;
            }
            let Ok(node) = self.graph.cell(cell) else {
                continue;
            };
            bound_earlier = true;
            let analysis = node.analysis();
            let reason = if analysis.deletes.contains(&name) {
                format!("cell {cell} deletes `{name}` (`del {name}`)")
            } else if analysis.conditional_writes.contains(&name) {
                format!(
                    "cell {cell} binds `{name}` only conditionally (in a branch, loop or `try`), and the path that binds it did not run"
                )
            } else if node.effects().via_calls.contains(&name) {
                format!(
                    "cell {cell} binds `{name}` only through a function call that may not have run"
                )
            } else if node.effects().opaque {
                format!(
                    "cell {cell} uses exec/eval or a star import and was expected to bind `{name}`"
                )
            } else if node.status() != CellStatus::Ok {
                format!(
                    "cell {cell} binds `{name}` but has not run successfully (status: {})",
                    status_name(node.status())
                )
            } else {
                format!(
                    "cell {cell} binds `{name}`, but the kernel no longer has it (restarted, or the cell ran before a change)"
                )
            };
            self.blame(cell, None, &[&name], reason);
        }

        // Later cells that bind it.
        let later: Vec<CellId> = self
            .graph
            .cells()
            .filter(|n| n.id() > failing && n.analysis().writes.contains(&name))
            .map(CellNode::id)
            .collect();
        for &cell in &later {
            self.blame(
                cell,
                None,
                &[&name],
                format!("cell {cell} binds `{name}` but runs after cell {failing}"),
            );
        }
        if let Some(&cell) = later.first() {
            self.suggest(Suggestion::DefinedLater {
                name: name.clone(),
                cell,
            });
        }

        // A well-known module or member that is not imported.
        let attributes: Vec<&str> = self
            .facts
            .attributes
            .iter()
            .filter(|a| a.base == Base::Name(name.clone()))
            .map(|a| a.attr.as_str())
            .collect();
        let called = self.facts.calls.iter().any(|c| c.callee == name);
        let known_import = if bound_earlier {
            None
        } else {
            tables::known_import(&name, &attributes, called)
        };
        if let Some(statement) = &known_import {
            self.blame(
                failing,
                self.line,
                &[&name],
                format!(
                    "cell {failing} uses `{name}` without importing it; no cell imports it (`{statement}`)"
                ),
            );
            self.suggest(Suggestion::AddImport {
                cell: failing,
                name: name.clone(),
                statement: statement.clone(),
            });
        }

        // A close name that exists.
        if !bound_earlier {
            self.close_names(&name, hint);
        }

        if self.culprits.is_empty() {
            let reason = format!("cell {failing} reads `{name}`, which no cell binds");
            self.blame(failing, self.line, &[&name], reason);
        }
    }

    /// `UnboundLocalError`: a function assigns the name somewhere, making
    /// it local, and reads it before. Blame the cell defining the function
    /// named by the traceback's innermost frame.
    fn unbound_local(&mut self, name: &str) {
        let frames = self.frames();
        let Some(function) = frames
            .iter()
            .rev()
            .map(|f| f.function.as_str())
            .find(|f| !f.starts_with('<'))
        else {
            return;
        };
        let failing = self.failing();
        let defining = if self.node.analysis().definition(function).is_some() {
            Some(failing)
        } else {
            self.value_sources(function).into_iter().find(|&s| {
                self.graph
                    .cell(s)
                    .is_ok_and(|n| n.analysis().definition(function).is_some())
            })
        };
        if let Some(cell) = defining {
            let line = self
                .graph
                .cell(cell)
                .ok()
                .and_then(|n| n.analysis().definition(function))
                .map(|d| d.line);
            self.blame(
                cell,
                line,
                &[name, function],
                format!(
                    "function `{function}` (cell {cell}) assigns `{name}` in its body, which makes `{name}` local to it, and reads it before that assignment (declare `global {name}` or pass it in)"
                ),
            );
        }
    }

    fn close_names(&mut self, name: &str, hint: Option<&str>) {
        let failing = self.failing();
        // (candidate, defining cell or None for builtins and kernel names)
        let mut candidates: Vec<(String, Option<CellId>)> = Vec::new();
        let mut push = |candidate: &str, cell: Option<CellId>| {
            if !candidates.iter().any(|(c, _)| c == candidate) {
                candidates.push((candidate.to_owned(), cell));
            }
        };
        for written in &self.node.analysis().writes {
            push(written, Some(failing));
        }
        let earlier: Vec<&CellNode> = self.graph.cells().filter(|n| n.id() < failing).collect();
        for node in earlier.iter().rev() {
            for written in &node.analysis().writes {
                push(written, Some(node.id()));
            }
        }
        for known in self.failure.values.keys() {
            push(known, None);
        }
        for builtin in tables::COMMON_BUILTINS {
            push(builtin, None);
        }
        let mut close: Vec<(usize, usize, String, Option<CellId>)> = candidates
            .into_iter()
            .enumerate()
            .filter_map(|(order, (candidate, cell))| {
                let distance = if hint == Some(candidate.as_str()) {
                    Some(0)
                } else {
                    tables::closeness(name, &candidate)
                }?;
                Some((distance, order, candidate, cell))
            })
            .collect();
        close.sort();
        close.truncate(3);
        // Close names for the failing cell's reason, and the definers to
        // blame after it.
        let mut mentions: Vec<String> = Vec::new();
        let mut definers: Vec<(CellId, String)> = Vec::new();
        for (rank, (_, _, candidate, cell)) in close.into_iter().enumerate() {
            match cell {
                Some(definer) if definer != failing => {
                    if rank == 0 && self.definition_is_typo(name, &candidate, definer) {
                        self.blame(
                            definer,
                            None,
                            &[&candidate, name],
                            format!(
                                "cell {definer} binds `{candidate}`, which no cell reads, probably a misspelling of `{name}` that other cells read"
                            ),
                        );
                        self.suggest(Suggestion::RenameName {
                            cell: definer,
                            from: candidate.clone(),
                            to: name.to_owned(),
                        });
                        continue;
                    }
                    mentions.push(format!("`{candidate}` (bound by cell {definer})"));
                    definers.push((definer, candidate.clone()));
                }
                Some(_) => {
                    mentions.push(format!("`{candidate}` (bound earlier in cell {failing})"))
                }
                None if is_builtin(&candidate) => {
                    mentions.push(format!("`{candidate}` (a builtin)"))
                }
                None => mentions.push(format!("`{candidate}` (in the kernel's namespace)")),
            }
            self.suggest(Suggestion::RenameName {
                cell: failing,
                from: name.to_owned(),
                to: candidate,
            });
        }
        let mut reason = format!("cell {failing} reads `{name}`, which no cell binds");
        if !mentions.is_empty() {
            let _ = write!(reason, "; close names: {}", mentions.join(", "));
        }
        self.blame(failing, self.line, &[name], reason);
        for (definer, candidate) in definers {
            self.blame(
                definer,
                None,
                &[&candidate],
                format!("cell {definer} binds `{candidate}`, close to the missing `{name}`"),
            );
        }
    }

    /// Whether `definer`'s `candidate` is the misspelling rather than the
    /// failing cell's `missing`: nobody reads `candidate`, and another cell
    /// besides the failing one reads `missing` too.
    fn definition_is_typo(&self, missing: &str, candidate: &str, definer: CellId) -> bool {
        let failing = self.failing();
        let candidate_read = self.graph.cells().any(|n| {
            n.id() != definer && n.id() > definer && n.analysis().reads.contains(candidate)
        });
        let missing_read_elsewhere = self
            .graph
            .cells()
            .any(|n| n.id() != failing && n.id() > definer && n.analysis().reads.contains(missing));
        !candidate_read && missing_read_elsewhere
    }

    fn attribute_error(&mut self, message: &str) {
        let Some((owner, attr)) = classify::attribute_error(message) else {
            return;
        };
        let failing = self.failing();
        let mut uses: Vec<pysrc::AttrUse> = self
            .facts
            .attributes
            .iter()
            .filter(|a| a.attr == attr && self.on_line(a.range))
            .cloned()
            .collect();
        if uses.is_empty() {
            uses = self
                .facts
                .attributes
                .iter()
                .filter(|a| a.attr == attr)
                .cloned()
                .collect();
        }
        let line = uses
            .first()
            .map(|a| self.source.line_of(a.range.start()))
            .or(self.line);
        match &owner {
            AttrOwner::Module(module) => {
                // The kernel names the module's closest attribute.
                let hint = classify::split_hint(message).1.map(str::to_owned);
                let close = hint
                    .as_deref()
                    .map_or_else(String::new, |h| format!("; `{h}` is close"));
                self.blame(
                    failing,
                    line,
                    &[],
                    format!("cell {failing} reads `{attr}` of module `{module}`, which has no such attribute{close}"),
                );
                if let Some(to) = hint {
                    self.suggest(Suggestion::RenameAttribute {
                        cell: failing,
                        line,
                        from: attr.clone(),
                        to,
                    });
                }
            }
            AttrOwner::Object(type_name) | AttrOwner::Type(type_name) => {
                // A misspelled attribute of a well-known type: the failing cell.
                let close = tables::known_attributes(type_name)
                    .iter()
                    .filter_map(|known| Some((tables::closeness(&attr, known)?, *known)))
                    .min();
                if let Some((_, known)) = close {
                    self.blame(
                        failing,
                        line,
                        &[],
                        format!(
                            "cell {failing} reads `.{attr}` of a {type_name}, which has no such attribute; `{known}` is close"
                        ),
                    );
                    self.suggest(Suggestion::RenameAttribute {
                        cell: failing,
                        line,
                        from: attr.clone(),
                        to: known.to_owned(),
                    });
                }
                let none = type_name == "NoneType";
                for use_ in &uses {
                    match &use_.base {
                        Base::Name(name) => {
                            let why = format!(
                                "the {type_name} value whose attribute `.{attr}` failed on {}",
                                self.at_line()
                            );
                            self.blame_sources(&name.clone(), &why, none);
                        }
                        Base::Call { callee, root } => {
                            let returns = if none { "returned None" } else { "returned a " }
                                .to_owned()
                                + if none { "" } else { type_name };
                            self.blame(
                                failing,
                                line,
                                &[],
                                format!(
                                    "`{}` on {} {returns}, which has no attribute `.{attr}`",
                                    use_.base_text,
                                    self.at_line()
                                ),
                            );
                            if let Some(root) = root.clone()
                                && !self.is_module(&root)
                                && !self.is_plain_builtin(&root)
                            {
                                let why = format!("the callee or receiver of `{callee}(...)`");
                                self.blame_sources(&root, &why, false);
                            }
                        }
                        Base::Other => {}
                    }
                }
            }
        }
    }

    fn type_error(&mut self, message: &str) {
        let failing = self.failing();
        match classify::type_error(message) {
            TypeShape::Operator { op, left, right } => {
                let ops: Vec<pysrc::OpUse> = self
                    .facts
                    .ops
                    .iter()
                    .filter(|o| o.op == op && self.on_line(o.range))
                    .cloned()
                    .collect();
                let mut sides: Vec<(String, String, String)> = Vec::new();
                for o in &ops {
                    for name in &o.left {
                        sides.push((name.clone(), left.clone(), right.clone()));
                    }
                    for name in &o.right {
                        sides.push((name.clone(), right.clone(), left.clone()));
                    }
                }
                // The odd one out first: None, then a str next to a number.
                let suspicion = |own: &str, other: &str| -> u8 {
                    match own {
                        "NoneType" => 0,
                        "str" if matches!(other, "int" | "float") => 1,
                        _ => 2,
                    }
                };
                sides.sort_by_key(|(_, own, other)| suspicion(own, other));
                for (name, own, other) in sides {
                    let why = format!(
                        "a {own} used with `{op}` and a {other} on {}",
                        self.at_line()
                    );
                    self.blame_sources(&name, &why, own == "NoneType");
                }
            }
            TypeShape::Subscript(type_name) => {
                let subscripts: Vec<pysrc::SubscriptUse> = self
                    .facts
                    .subscripts
                    .iter()
                    .filter(|s| self.on_line(s.range))
                    .cloned()
                    .collect();
                let what = type_name.unwrap_or_else(|| "value".to_owned());
                for s in subscripts {
                    if let Some(root) = s.base.root() {
                        let why = format!("the {what} subscripted on {}", self.at_line());
                        self.blame_sources(root, &why, what == "NoneType");
                    }
                }
            }
            TypeShape::Call(type_name) => {
                let calls: Vec<pysrc::CallUse> = self
                    .facts
                    .calls
                    .iter()
                    .filter(|c| self.on_line(c.range))
                    .cloned()
                    .collect();
                for call in calls {
                    let Some(root) = call.func.root().map(str::to_owned) else {
                        continue;
                    };
                    if is_builtin(&root) && call.callee == root {
                        let shadowing: Vec<CellId> = self
                            .value_sources(&root)
                            .into_iter()
                            .filter(|&s| s != failing)
                            .collect();
                        for cell in shadowing {
                            self.involve(&root);
                            self.blame(
                                cell,
                                None,
                                &[&root],
                                format!(
                                    "cell {cell} rebinds the builtin `{root}` to a {type_name}, so `{root}(...)` on {} calls that {type_name}",
                                    self.at_line()
                                ),
                            );
                            self.suggest(Suggestion::ShadowedBuiltin {
                                name: root.clone(),
                                cell,
                            });
                        }
                        continue;
                    }
                    let why = format!("called as `{}(...)` on {}", call.callee, self.at_line());
                    self.blame_sources(&root, &why, type_name == "NoneType");
                }
            }
            TypeShape::Iterate(type_name) => {
                let mut names: Vec<String> = self
                    .facts
                    .iters
                    .iter()
                    .filter(|i| self.on_line(i.range))
                    .flat_map(|i| i.names.clone())
                    .collect();
                if names.is_empty() {
                    names = self.names_on_line();
                }
                for name in names {
                    let why = format!(
                        "iterated or unpacked as a {type_name} on {}",
                        self.at_line()
                    );
                    self.blame_sources(&name, &why, type_name == "NoneType");
                }
            }
            TypeShape::Len(type_name) => {
                let names: Vec<String> = self
                    .facts
                    .calls
                    .iter()
                    .filter(|c| c.callee == "len" && self.on_line(c.range))
                    .flat_map(|c| c.arg_names.clone())
                    .collect();
                for name in names {
                    let why = format!("a {type_name} passed to `len()` on {}", self.at_line());
                    self.blame_sources(&name, &why, type_name == "NoneType");
                }
            }
            TypeShape::Signature(function) => {
                self.involve(&function);
                let at = self.at_line();
                self.blame(
                    failing,
                    self.line,
                    &[&function],
                    format!(
                        "the call of `{function}` on {at} does not match its signature: {message}"
                    ),
                );
                let defining: Vec<CellId> = self
                    .value_sources(&function)
                    .into_iter()
                    .filter(|&s| {
                        self.graph
                            .cell(s)
                            .is_ok_and(|n| n.analysis().definition(&function).is_some())
                    })
                    .collect();
                for cell in defining {
                    let line = self
                        .graph
                        .cell(cell)
                        .ok()
                        .and_then(|n| n.analysis().definition(&function))
                        .map(|d| d.line);
                    self.blame(
                        cell,
                        line,
                        &[&function],
                        format!("cell {cell} defines `{function}` with the signature the call does not match"),
                    );
                }
            }
            TypeShape::Unknown(types) => {
                let mut names = self.names_on_line();
                // Names whose known value mentions a type from the message first.
                names.sort_by_key(|name| {
                    let mentions = self
                        .value_of(name)
                        .is_some_and(|v| types.iter().any(|t| v.contains(t.as_str())));
                    !mentions
                });
                for name in names {
                    let why = format!("used on {}", self.at_line());
                    self.blame_sources(&name, &why, false);
                }
            }
        }
    }

    fn value_error(&mut self, exception: &str, message: &str) {
        let names: Vec<(String, String)> = match classify::value_error(exception, message) {
            ValueShape::DivisionByZero => self
                .facts
                .ops
                .iter()
                .filter(|o| matches!(o.op, "/" | "//" | "%") && self.on_line(o.range))
                .flat_map(|o| o.right.clone())
                .map(|n| (n, "the divisor".to_owned()))
                .collect(),
            ValueShape::Conversion(function) => self
                .facts
                .calls
                .iter()
                .filter(|c| {
                    c.short_name.as_deref() == Some(function.as_str()) && self.on_line(c.range)
                })
                .flat_map(|c| c.arg_names.clone())
                .map(|n| (n, format!("converted with `{function}()`")))
                .collect(),
            ValueShape::MathDomain => self
                .facts
                .calls
                .iter()
                .filter(|c| c.callee.starts_with("math.") && self.on_line(c.range))
                .flat_map(|c| c.arg_names.clone())
                .map(|n| (n, "passed to a `math` function".to_owned()))
                .collect(),
            ValueShape::Unpack | ValueShape::Unknown => Vec::new(),
        };
        let names = if names.is_empty() {
            self.names_on_line()
                .into_iter()
                .map(|n| (n, "used".to_owned()))
                .collect()
        } else {
            names
        };
        for (name, role) in names {
            let why = format!("{role} on {} ({message})", self.at_line());
            self.blame_sources(&name, &why, false);
        }
    }

    fn key_error(&mut self, exception: &str, message: &str) {
        let failing = self.failing();
        let key = if exception.ends_with("KeyError") {
            classify::key_error(message)
        } else {
            None
        };
        let on_line: Vec<pysrc::SubscriptUse> = self
            .facts
            .subscripts
            .iter()
            .filter(|s| self.on_line(s.range))
            .cloned()
            .collect();
        let matching: Vec<pysrc::SubscriptUse> = match &key {
            Some(KeyRepr::Str(k)) => on_line
                .iter()
                .filter(|s| s.key == Some(Key::Str(k.clone())))
                .cloned()
                .collect(),
            Some(KeyRepr::Int(k)) => on_line
                .iter()
                .filter(|s| s.key == Some(Key::Int(k.clone())))
                .cloned()
                .collect(),
            None => Vec::new(),
        };
        let mut chosen = if matching.is_empty() {
            on_line
        } else {
            matching
        };
        if chosen.is_empty()
            && let Some(KeyRepr::Str(k)) = &key
        {
            // The line may be off; look for the literal key anywhere in the cell.
            chosen = self
                .facts
                .subscripts
                .iter()
                .filter(|s| s.key == Some(Key::Str(k.clone())))
                .cloned()
                .collect();
        }
        let line = chosen
            .first()
            .map(|s| self.source.line_of(s.range.start()))
            .or(self.line);
        let mut roots: Vec<String> = Vec::new();
        for s in &chosen {
            if let Some(root) = s.base.root()
                && !roots.iter().any(|r| r == root)
            {
                roots.push(root.to_owned());
            }
        }

        // A close key seen in the data or in the producers' code.
        let close = match &key {
            Some(KeyRepr::Str(k)) => self.close_key(k, &roots),
            _ => None,
        };
        if let (Some((to, seen_in)), Some(KeyRepr::Str(from))) = (&close, &key) {
            self.blame(
                failing,
                line,
                &[],
                format!("cell {failing} uses the key '{from}'; '{to}' exists in {seen_in}"),
            );
            self.suggest(Suggestion::RenameKey {
                cell: failing,
                line,
                from: from.clone(),
                to: to.clone(),
                seen_in: seen_in.clone(),
            });
        }
        for root in roots {
            let why = match &key {
                Some(KeyRepr::Str(k)) => {
                    format!("which has no key '{k}' (looked up on {})", self.at_line())
                }
                Some(KeyRepr::Int(k)) => {
                    format!("which has no key {k} (looked up on {})", self.at_line())
                }
                None => format!(
                    "which is shorter than the index used on {} ({message})",
                    self.at_line()
                ),
            };
            self.blame_sources(&root, &why, false);
        }
    }

    /// A key close to `key`: among the quoted strings of the subscripted
    /// values' reprs, then the string literals of their producers. A loop
    /// variable of the cell (`row` in `for row in rows`) stands for the
    /// items of its iterable, so the iterable's names count too (`rows`):
    /// its repr shows the items' keys, its producer wrote them, and the
    /// loop variable may have no recorded value of its own (a re-run that
    /// rebinds it to the same object does not report it).
    fn close_key(&self, key: &str, roots: &[String]) -> Option<(String, String)> {
        let roots = self.with_iterables(roots);
        let roots = roots.as_slice();
        let mut best: Option<(usize, String, String)> = None;
        let mut consider = |candidate: &str, seen_in: String| {
            if let Some(distance) = tables::closeness(key, candidate)
                && best.as_ref().is_none_or(|(d, _, _)| distance < *d)
            {
                best = Some((distance, candidate.to_owned(), seen_in));
            }
        };
        for root in roots {
            if let Some(value) = self.value_of(root) {
                for candidate in classify::quoted(&value) {
                    consider(candidate, format!("the value of `{root}`"));
                }
            }
        }
        for root in roots {
            for cell in self.value_sources(root) {
                let Ok(node) = self.graph.cell(cell) else {
                    continue;
                };
                for candidate in CellSource::parse(node.source()).facts().strings {
                    consider(&candidate, format!("cell {cell}"));
                }
            }
        }
        best.map(|(_, key, seen_in)| (key, seen_in))
    }

    /// `names`, then the names of the iterables the failing cell binds
    /// them from as loop targets, and so on for nested loops (`group` in
    /// `for group in groups`, then `groups`), without repeats.
    fn with_iterables(&self, names: &[String]) -> Vec<String> {
        let mut out: Vec<String> = names.to_vec();
        let mut next = 0;
        while next < out.len() {
            let name = out[next].clone();
            next += 1;
            for iter in &self.facts.iters {
                if iter.targets.contains(&name) {
                    for source in &iter.names {
                        if !out.contains(source) {
                            out.push(source.clone());
                        }
                    }
                }
            }
        }
        out
    }

    fn import_error(&mut self, message: &str) {
        let failing = self.failing();
        let Some((module, member)) = classify::import_error(message) else {
            return;
        };
        let top = module.split('.').next().unwrap_or(&module).to_owned();
        let mut spots = self.source.import_module_spots(&module);
        if spots.is_empty() && top != module {
            spots = self.source.import_module_spots(&top);
        }
        let line = spots.first().map(|(_, line)| *line).or(self.line);
        self.import_line = line;
        let at = match line {
            Some(line) => format!("on line {line}"),
            None => "somewhere".to_owned(),
        };
        let reason = match &member {
            Some(member) => format!(
                "cell {failing} imports `{member}` from `{module}` {at}, which does not provide it"
            ),
            None => format!(
                "cell {failing} imports `{module}` {at}, and no module of that name is installed"
            ),
        };
        self.blame(failing, line, &[], reason);
        if member.is_some() {
            return;
        }
        let close = tables::known_modules()
            .filter_map(|known| Some((tables::closeness(&top, known)?, known)))
            .min();
        if let Some((_, known)) = close
            && let Some(line) = line
        {
            self.suggest(Suggestion::FixImport {
                cell: failing,
                line,
                from: top.clone(),
                to: known.to_owned(),
            });
        } else if let Some(package) = tables::package_for_module(&top) {
            self.suggest(Suggestion::InstallPackage {
                module: top.clone(),
                package: package.to_owned(),
            });
        }
    }

    fn finish(self, class: ErrorClass, message: String) -> Diagnosis {
        let failing = self.failing();
        let mut roles: BTreeMap<CellId, (ContextRole, BTreeSet<String>)> = BTreeMap::new();
        roles.insert(failing, (ContextRole::Failing, BTreeSet::new()));
        for culprit in &self.culprits {
            roles
                .entry(culprit.cell)
                .or_insert((ContextRole::Suspect, BTreeSet::new()));
        }
        let mut values = BTreeMap::new();
        for name in &self.names {
            for cell in self.value_sources(name) {
                let entry = roles
                    .entry(cell)
                    .or_insert((ContextRole::Producer, BTreeSet::new()));
                if entry.0 == ContextRole::Suspect {
                    entry.0 = ContextRole::Producer;
                }
                entry.1.insert(name.clone());
            }
            if let Some(value) = self.value_of(name) {
                values.insert(name.clone(), value);
            }
        }
        let cells = roles
            .into_iter()
            .filter_map(|(cell, (role, provides))| {
                let node = self.graph.cell(cell).ok()?;
                let (source, truncated) = truncate(node.source());
                Some(ContextCell {
                    cell,
                    role,
                    provides: provides.into_iter().collect(),
                    source,
                    truncated,
                })
            })
            .collect();
        let line = self.import_line.or(self.line);
        Diagnosis {
            cell: failing,
            version: Some(self.node.current_version().number),
            class,
            exception: self.failure.exception_type().map(str::to_owned),
            message,
            line,
            line_text: line.and_then(|l| self.source.line(l)).map(str::to_owned),
            names: self.names,
            culprits: self.culprits,
            context: DiagnosisContext { cells, values },
            suggestions: self.suggestions,
        }
    }
}

fn status_name(status: CellStatus) -> &'static str {
    match status {
        CellStatus::Pending => "pending",
        CellStatus::Ok => "ok",
        CellStatus::Failed => "failed",
        CellStatus::Stale => "stale",
    }
}

/// `source` cut at the last line break before [`MAX_CONTEXT_SOURCE`] bytes.
fn truncate(source: &str) -> (String, bool) {
    if source.len() <= MAX_CONTEXT_SOURCE {
        return (source.to_owned(), false);
    }
    let mut end = MAX_CONTEXT_SOURCE;
    while !source.is_char_boundary(end) {
        end -= 1;
    }
    let cut = source[..end].rfind('\n').unwrap_or(end);
    (format!("{}\n# ... (truncated)", &source[..cut]), true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Provenance;

    fn graph_of(sources: &[&str]) -> (ExecutionStateGraph, Vec<CellId>) {
        let mut graph = ExecutionStateGraph::new();
        let cells = sources
            .iter()
            .map(|s| {
                graph
                    .add_cell((*s).to_owned(), Provenance::now("test", "cell"))
                    .unwrap()
            })
            .collect();
        (graph, cells)
    }

    /// A traceback as the kernel formats it, its frames outermost first.
    fn traceback(frames: &[(&str, u32, &str)], last: &str) -> String {
        let mut text = String::from("Traceback (most recent call last):\n");
        for (file, line, function) in frames {
            text.push_str(&format!("  File \"{file}\", line {line}, in {function}\n"));
        }
        text.push_str(last);
        text
    }

    #[test]
    fn an_error_raised_in_a_function_of_another_cell_blames_that_cell_too() {
        let (graph, s) = graph_of(&[
            "def f(d):\n    return d['kee']",
            "def g(d):\n    return f(d)",
            "r = g({'key': 1})",
        ]);
        let failure = CellFailure::exception(s[2], "KeyError", "'kee'")
            .at_line(1)
            .with_traceback(traceback(
                &[
                    ("<cell 2>", 1, "<module>"),
                    ("<cell 1>", 2, "g"),
                    ("<cell 0>", 2, "f"),
                ],
                "KeyError: 'kee'",
            ));
        let d = diagnose(&failure, &graph);
        let blamed: Vec<(CellId, Option<u32>)> =
            d.culprits.iter().map(|c| (c.cell, c.line)).collect();
        assert!(blamed.contains(&(s[0], Some(2))), "{blamed:?}");
        assert!(blamed.contains(&(s[1], Some(2))), "{blamed:?}");
        let raised = d.culprits.iter().find(|c| c.cell == s[0]).unwrap();
        assert!(
            raised.reasons.iter().any(|r| r.contains("raised in `f`")),
            "{:?}",
            raised.reasons
        );
        let shown: Vec<CellId> = d.context.cells.iter().map(|c| c.cell).collect();
        assert!(shown.contains(&s[0]) && shown.contains(&s[1]), "{shown:?}");
    }

    #[test]
    fn frames_that_are_not_cells_of_the_graph_blame_nothing_more() {
        let (graph, s) = graph_of(&["import json", "v = json.loads('{')"]);
        for frames in [
            // A library's frames, a cell unknown to the graph, the failing
            // cell itself (recursion), a file named like a cell.
            vec![
                ("<cell 1>", 1, "<module>"),
                ("/usr/lib/python3/json/__init__.py", 346, "loads"),
            ],
            vec![("<cell 1>", 1, "<module>"), ("<cell 7>", 3, "h")],
            vec![("<cell 1>", 1, "<module>"), ("<cell 1>", 1, "<module>")],
            vec![
                ("<cell 1>", 1, "<module>"),
                ("<cell x>", 1, "k"),
                ("<cell 0", 1, "k"),
            ],
        ] {
            let failure = CellFailure::exception(s[1], "ValueError", "bad")
                .at_line(1)
                .with_traceback(traceback(&frames, "ValueError: bad"));
            let d = diagnose(&failure, &graph);
            let blamed: Vec<CellId> = d.culprits.iter().map(|c| c.cell).collect();
            assert!(!blamed.contains(&CellId::new(7)), "{frames:?}: {blamed:?}");
            assert_eq!(blamed.first(), Some(&s[1]), "{frames:?}: {blamed:?}");
            assert!(
                d.culprits
                    .iter()
                    .all(|c| c.reasons.iter().all(|r| !r.contains("raised in"))),
                "{frames:?}: {:?}",
                d.culprits
            );
        }
    }
}
