//! What the kernel reports: cell results, value summaries, errors.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

/// Output a cell printed to one stream, bounded by
/// [`KernelConfig::output_cap`](super::KernelConfig::output_cap).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapturedOutput {
    /// The first bytes printed (decoded as UTF-8, invalid bytes replaced).
    pub text: String,
    /// How many bytes were printed in all.
    pub total_bytes: u64,
    /// Whether `text` is only the beginning of the output.
    pub truncated: bool,
}

impl fmt::Display for CapturedOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)?;
        if self.truncated {
            write!(
                f,
                "\n[output truncated: {} of {} bytes shown]",
                self.text.len(),
                self.total_bytes
            )?;
        }
        Ok(())
    }
}

/// How a value written by a cell is kept for restoring it later.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Stored {
    /// Pickled (protocol 5); `hash` is the SHA-256 of the pickle.
    Blob {
        /// SHA-256 of the pickled bytes, the blob's name.
        hash: String,
        /// Size of the pickle.
        bytes: u64,
        /// Whether the blob was written to the store (false when the kernel
        /// has no blob directory or snapshots were off for the cell).
        #[serde(default)]
        written: bool,
    },
    /// A module: restored by importing it.
    Module {
        /// The module's name (`numpy`, `os.path`).
        name: String,
    },
    /// Cannot be restored from a blob (a function or class defined in a
    /// cell, an unpicklable or too large value): restored by re-running the
    /// cell that produced it.
    Unrestorable {
        /// Why, e.g. `cannot pickle: TypeError: cannot pickle 'generator' object`.
        reason: String,
    },
}

impl Stored {
    /// The content hash, for values that were pickled.
    pub fn hash(&self) -> Option<&str> {
        match self {
            Self::Blob { hash, .. } => Some(hash),
            _ => None,
        }
    }
}

/// A summary of one name a cell bound or changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValueSummary {
    /// The value's type, `module.QualName` outside builtins (`int`, `pandas.core.frame.DataFrame`).
    #[serde(rename = "type")]
    pub type_name: String,
    /// A short repr (at most 200 characters).
    pub repr: String,
    /// `len(value)`, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub len: Option<u64>,
    /// `value.shape`, if it is a tuple of ints (arrays, data frames).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<Vec<u64>>,
    /// How it is kept; its hash if it could be pickled.
    pub stored: Stored,
}

impl ValueSummary {
    /// A one-line description, e.g. `list(len 3) [1, 2, 3]`.
    pub fn short(&self) -> String {
        let mut text = self.type_name.clone();
        if let Some(shape) = &self.shape {
            let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
            text.push_str(&format!("({})", dims.join("x")));
        } else if let Some(len) = self.len {
            text.push_str(&format!("(len {len})"));
        }
        text.push(' ');
        text.push_str(&self.repr);
        text
    }
}

/// One frame of a Python traceback.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceFrame {
    /// The file: `<cell N>` for cell code, a path for library code.
    pub file: String,
    /// 1-based line in `file` (in the cell's own source for cell code).
    pub line: Option<u32>,
    /// The function, `<module>` for a cell's top level.
    pub function: String,
    /// The source line, stripped.
    pub text: String,
    /// The cell whose code the frame runs, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cell: Option<u32>,
}

/// An exception raised by a cell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PythonError {
    /// The exception type (`ZeroDivisionError`, `json.decoder.JSONDecodeError`).
    #[serde(rename = "type")]
    pub type_name: String,
    /// `str(exception)`, bounded.
    pub message: String,
    /// The line of the cell where it was raised (the innermost frame of the
    /// cell's own code), 1-based in the cell's source.
    pub line: Option<u32>,
    /// Frames, outermost first, the kernel's own frames removed.
    pub frames: Vec<TraceFrame>,
    /// The formatted traceback, as Python prints it (chained exceptions
    /// included), bounded.
    pub traceback: String,
}

impl fmt::Display for PythonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.type_name)?;
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        if let Some(line) = self.line {
            write!(f, " (line {line})")?;
        }
        Ok(())
    }
}

/// What one cell did in the kernel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellResult {
    /// The cell label the code ran under (its traceback file is `<cell N>`).
    pub cell: u32,
    /// The exception, if the cell raised one.
    pub error: Option<PythonError>,
    /// Captured stdout (Python and C level).
    pub stdout: CapturedOutput,
    /// Captured stderr (Python and C level).
    pub stderr: CapturedOutput,
    /// The repr of the last expression's value, notebook style, if not `None`.
    pub display: Option<String>,
    /// Names the cell bound or changed (new, rebound, or declared written or
    /// mutated by the analysis), with summaries.
    pub outputs: BTreeMap<String, ValueSummary>,
    /// Names the cell removed from the namespace.
    pub deleted: BTreeSet<String>,
    /// Names the cell's own code read from the namespace before binding
    /// them (`None` when read checking is off).
    pub reads: Option<BTreeSet<String>>,
    /// Time spent running the code in the kernel, in microseconds.
    pub duration_us: u64,
    /// What the cell did, as the kernel saw it run (`None` when tracing is
    /// off, [`KernelConfig::trace`](super::KernelConfig::trace)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<crate::trace::CellTrace>,
}

impl CellResult {
    /// Whether the cell ran without raising.
    pub fn is_ok(&self) -> bool {
        self.error.is_none()
    }
}

/// A value to put back into the kernel's namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RestoreValue {
    /// Load a pickled blob.
    Blob {
        /// The name to bind.
        name: String,
        /// The blob's hash.
        blob: String,
    },
    /// Import a module.
    Module {
        /// The name to bind.
        name: String,
        /// The module to import.
        module: String,
    },
    /// Remove a name.
    Delete {
        /// The name to remove.
        name: String,
        /// Always true.
        delete: bool,
    },
}

impl RestoreValue {
    /// The name this restores.
    pub fn name(&self) -> &str {
        match self {
            Self::Blob { name, .. } | Self::Module { name, .. } | Self::Delete { name, .. } => name,
        }
    }
}

/// A value the kernel could not restore.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreFailure {
    /// The name.
    pub name: String,
    /// Why (the exception raised while loading).
    pub reason: String,
}

/// What a restore did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreReport {
    /// Names restored.
    pub restored: Vec<String>,
    /// Names that could not be restored, with the reason.
    pub failed: Vec<RestoreFailure>,
}
