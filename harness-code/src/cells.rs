//! Splitting a notebook (`.ipynb`) or a percent-format script (`# %%`
//! markers, as written by Jupytext and VS Code) into code cells.

use serde_json::Value;

use crate::error::IpynbError;

/// Cell magics whose body is ordinary Python that runs in the notebook
/// namespace; the magic line is dropped and the body analysed.
const PYTHON_BODY_CELL_MAGICS: &[&str] = &["capture", "time", "timeit"];

/// One code cell of a notebook or percent script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeCell {
    /// 0-based index of the cell among all cells (markdown included), as a
    /// notebook front end numbers them.
    pub index: usize,
    /// 1-based line of the file where the cell's code starts (percent
    /// scripts); always 1 for notebooks, whose cells are separate texts.
    pub line: usize,
    /// The code to analyse (empty if the cell is skipped).
    pub source: String,
    /// The cell is not Python (e.g. `%%bash`) and is not added to the graph.
    pub skipped: bool,
    /// What was changed or skipped, for the user.
    pub notes: Vec<String>,
}

impl CodeCell {
    fn new(index: usize, line: usize, source: String) -> Self {
        let mut cell = Self {
            index,
            line,
            source,
            skipped: false,
            notes: Vec::new(),
        };
        cell.apply_cell_magic();
        cell
    }

    fn apply_cell_magic(&mut self) {
        let Some((offset, first)) = self
            .source
            .lines()
            .enumerate()
            .find(|(_, line)| !line.trim().is_empty())
        else {
            return;
        };
        let Some(rest) = first.trim_start().strip_prefix("%%") else {
            return;
        };
        let magic = rest.split_whitespace().next().unwrap_or("");
        let magic_line = first.trim().to_owned();
        if PYTHON_BODY_CELL_MAGICS.contains(&magic) {
            // Blank the magic line rather than removing it so line numbers stay.
            self.source = self
                .source
                .lines()
                .enumerate()
                .map(|(i, line)| if i == offset { "" } else { line })
                .collect::<Vec<_>>()
                .join("\n");
            self.notes.push(format!(
                "cell magic `{magic_line}` skipped; its body was analysed as Python"
            ));
        } else {
            self.source.clear();
            self.skipped = true;
            self.notes.push(format!(
                "cell skipped: cell magic `{magic_line}` does not run Python"
            ));
        }
    }
}

/// Splits a percent-format script into code cells at lines starting with
/// `# %%` (or `#%%`). Text before the first marker is a cell of its own;
/// `# %% [markdown]` and `# %% [raw]` cells are not code; blank cells are
/// left out.
///
/// ```
/// use harness_code::split_percent_script;
///
/// let cells = split_percent_script("import os\n# %%\nx = 1\n# %% [markdown]\n# Title\n# %%\ny = x\n");
/// let sources: Vec<_> = cells.iter().map(|c| (c.index, c.line, c.source.as_str())).collect();
/// assert_eq!(sources, [(0, 1, "import os"), (1, 3, "x = 1"), (3, 7, "y = x")]);
/// ```
pub fn split_percent_script(text: &str) -> Vec<CodeCell> {
    let mut cells = Vec::new();
    let mut index = 0;
    let mut start_line = 1;
    let mut is_code = true;
    let mut current: Vec<&str> = Vec::new();
    let mut flush = |index: usize, start_line: usize, is_code: bool, lines: &mut Vec<&str>| {
        let source = lines.join("\n");
        lines.clear();
        if is_code && !source.trim().is_empty() {
            cells.push(CodeCell::new(index, start_line, source));
        }
    };
    let mut seen_marker = false;
    for (number, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker = trimmed
            .strip_prefix("# %%")
            .or_else(|| trimmed.strip_prefix("#%%"));
        if let Some(rest) = marker {
            if seen_marker || current.iter().any(|l| !l.trim().is_empty()) {
                flush(index, start_line, is_code, &mut current);
                index += 1;
            } else {
                current.clear();
            }
            seen_marker = true;
            let rest = rest.trim_start();
            is_code = !(rest.starts_with("[markdown]")
                || rest.starts_with("[md]")
                || rest.starts_with("[raw]"));
            start_line = number + 2;
        } else {
            current.push(line);
        }
    }
    flush(index, start_line, is_code, &mut current);
    cells
}

/// The code cells of an nbformat 4 notebook (`.ipynb` JSON). Markdown and
/// raw cells are left out but counted in [`CodeCell::index`].
///
/// ```
/// use harness_code::notebook_code_cells;
///
/// let notebook = r##"{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
///   {"cell_type": "markdown", "metadata": {}, "source": ["# Title"]},
///   {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": null,
///    "source": ["x = 1\n", "y = x"]}]}"##;
/// let cells = notebook_code_cells(notebook).unwrap();
/// assert_eq!(cells[0].index, 1);
/// assert_eq!(cells[0].source, "x = 1\ny = x");
/// ```
///
/// # Errors
///
/// [`IpynbError::InvalidJson`] or [`IpynbError::NotANotebook`].
pub fn notebook_code_cells(json: &str) -> Result<Vec<CodeCell>, IpynbError> {
    let value: Value = serde_json::from_str(json).map_err(|e| {
        // The parser's text ends with the position, given apart here.
        let text = e.to_string();
        let position = format!(" at line {} column {}", e.line(), e.column());
        IpynbError::InvalidJson {
            line: e.line(),
            column: e.column(),
            message: text.strip_suffix(&position).unwrap_or(&text).to_owned(),
        }
    })?;
    match value.get("nbformat").and_then(Value::as_u64) {
        Some(4) => {}
        Some(other) => {
            return Err(IpynbError::NotANotebook(format!(
                "nbformat is {other}; only version 4 is supported"
            )));
        }
        None => {
            return Err(IpynbError::NotANotebook(
                "missing the integer field `nbformat`".to_owned(),
            ));
        }
    }
    let cells = value
        .get("cells")
        .and_then(Value::as_array)
        .ok_or_else(|| IpynbError::NotANotebook("missing the array `cells`".to_owned()))?;
    let mut out = Vec::new();
    for (index, cell) in cells.iter().enumerate() {
        if cell.get("cell_type").and_then(Value::as_str) != Some("code") {
            continue;
        }
        let source = match cell.get("source") {
            Some(Value::String(text)) => text.clone(),
            Some(Value::Array(parts)) => {
                let mut text = String::new();
                for part in parts {
                    let part = part.as_str().ok_or_else(|| {
                        IpynbError::NotANotebook(format!(
                            "cell {index}: `source` array holds a non-string"
                        ))
                    })?;
                    text.push_str(part);
                }
                text
            }
            _ => {
                return Err(IpynbError::NotANotebook(format!(
                    "cell {index}: `source` must be a string or an array of strings"
                )));
            }
        };
        out.push(CodeCell::new(index, 1, source));
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn python_cell_magic_keeps_body() {
        let cells = split_percent_script("%%time\nx = 1\n");
        assert_eq!(cells.len(), 1);
        assert!(!cells[0].skipped);
        assert_eq!(cells[0].source, "\nx = 1");
        assert_eq!(cells[0].notes.len(), 1);
    }

    #[test]
    fn other_cell_magic_skips_cell() {
        let cells = split_percent_script("%%bash\nls -l\n");
        assert!(cells[0].skipped);
        assert!(cells[0].source.is_empty());
    }

    #[test]
    fn rejects_other_nbformat() {
        let error = notebook_code_cells(r#"{"nbformat": 3, "worksheets": []}"#).unwrap_err();
        assert!(matches!(error, IpynbError::NotANotebook(_)));
        let error = notebook_code_cells("{").unwrap_err();
        assert!(matches!(error, IpynbError::InvalidJson { line: 1, .. }));
        // The position is said once.
        for bad in ["{", "{1: 2}", "[1,\n 2,,]", "{\"cells\": [} "] {
            let text = notebook_code_cells(bad).unwrap_err().to_string();
            assert_eq!(text.matches("line").count(), 1, "{text}");
            assert!(
                text.starts_with("notebook is not valid JSON at line "),
                "{text}"
            );
        }
    }
}
