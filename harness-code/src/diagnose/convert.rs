//! Turning what a notebook reports into a [`CellFailure`].

use crate::CellId;
use crate::diagnose::CellFailure;
use crate::kernel::{CellResult, KernelError, PythonError};
use crate::notebook::{CellExecution, Notebook, NotebookError};
use crate::replay::ReplayEntry;

impl CellFailure {
    /// A failure from the exception the kernel reported for `cell`: type,
    /// message, line within the cell and formatted traceback.
    pub fn from_python_error(cell: CellId, error: &PythonError) -> Self {
        let mut failure = Self::exception(cell, error.type_name.clone(), error.message.clone());
        failure.line = error.line;
        if !error.traceback.is_empty() {
            failure.traceback = Some(error.traceback.clone());
        }
        failure
    }

    /// The failure of a kernel result, `None` if the cell succeeded. The
    /// values the cell bound before it raised are added as short reprs
    /// ([`ValueSummary::short`](crate::kernel::ValueSummary::short)).
    pub fn from_result(cell: CellId, result: &CellResult) -> Option<Self> {
        let error = result.error.as_ref()?;
        Some(
            Self::from_python_error(cell, error).with_values(
                result
                    .outputs
                    .iter()
                    .map(|(name, value)| (name.clone(), value.short())),
            ),
        )
    }

    /// The failure of [`Notebook::run_cell`]'s result, `None` if the
    /// cell succeeded. See [`from_result`](Self::from_result).
    pub fn from_run(run: &CellExecution) -> Option<Self> {
        Self::from_result(run.cell, &run.result)
    }

    /// The failure a notebook error stands for: a cell that timed out
    /// ([`FailureKind::Timeout`](super::FailureKind::Timeout)), a kernel
    /// that died or broke the protocol
    /// ([`FailureKind::Crash`](super::FailureKind::Crash)), an input that
    /// could not be recomputed (the exception of the producer, which is
    /// the failing cell). `None` for errors that are not a cell's failure
    /// (graph, blob store, files, a kernel that cannot start).
    pub fn from_notebook_error(error: &NotebookError) -> Option<Self> {
        match error {
            NotebookError::Kernel {
                cell: Some(cell),
                source,
            } => match source {
                KernelError::Timeout { after, .. } => Some(Self::timeout(*cell, *after)),
                KernelError::Died { .. } | KernelError::Protocol { .. } => {
                    Some(Self::crash(*cell, source.to_string()))
                }
                _ => None,
            },
            NotebookError::Restore {
                producer, error, ..
            } => Some(Self::from_python_error(*producer, error)),
            _ => None,
        }
    }

    /// The failure of a [`replay`](crate::replay) entry, `None` if
    /// the cell did not fail. A replay keeps only the error's text
    /// (`Type: message (line N)`, or the kernel's error), so the failure
    /// has no traceback: the exception type, message and line are read
    /// back from the text; a timeout or a dead kernel is recognised by its
    /// wording (the timeout's length is not known and is given as zero).
    pub fn from_replay_entry(entry: &ReplayEntry) -> Option<Self> {
        let error = entry.error.as_deref()?;
        let cell = entry.cell;
        if error.contains(" timed out after ") {
            return Some(Self::timeout(cell, std::time::Duration::ZERO));
        }
        if error.contains("the kernel died") || error.contains("broke the protocol") {
            return Some(Self::crash(cell, error));
        }
        let (text, line) = match error.rsplit_once(" (line ") {
            Some((text, rest)) => match rest.strip_suffix(')').and_then(|n| n.parse().ok()) {
                Some(line) => (text, Some(line)),
                None => (error, None),
            },
            None => (error, None),
        };
        let (exception, message) = match text.split_once(": ") {
            Some((exception, message)) if is_exception_name(exception) => (exception, message),
            _ if is_exception_name(text) => (text, ""),
            _ => ("Exception", text),
        };
        let mut failure = Self::exception(cell, exception, message);
        failure.line = line;
        Some(failure)
    }

    /// Adds short reprs of the values the failing cell reads, as the
    /// notebook recorded them when their producers ran (names the failure
    /// already has are kept).
    pub fn with_input_values(mut self, notebook: &Notebook) -> Self {
        let Ok(dependencies) = notebook.graph().dependencies(self.cell) else {
            return self;
        };
        for (producer, dependency) in dependencies {
            let Some(record) = notebook.record(producer) else {
                continue;
            };
            for name in &dependency.names {
                if let Some(value) = record.outputs.get(name) {
                    self.values
                        .entry(name.clone())
                        .or_insert_with(|| value.short());
                }
            }
        }
        self
    }
}

/// Whether `text` looks like a (dotted) Python exception type name.
fn is_exception_name(text: &str) -> bool {
    !text.is_empty()
        && text
            .split('.')
            .all(|part| !part.is_empty() && part.chars().all(|c| c.is_alphanumeric() || c == '_'))
        && text
            .rsplit('.')
            .next()
            .is_some_and(|last| last.chars().next().is_some_and(char::is_uppercase))
}
