//! The rule patcher: applies a diagnosis' cheap suggestions to the code.

use async_trait::async_trait;

use crate::diagnose::pysrc::{CellSource, Key, apply_edits};
use crate::diagnose::{Diagnosis, Suggestion};
use crate::patch::{Patch, PatchError, PatchProvenance, Patcher};
use crate::{AnalysisOptions, ExecutionStateGraph, Timestamp, analyze_cell_with};

/// Applies the first suggestion of a [`Diagnosis`] that changes code and
/// yields valid Python that no longer has the problem:
///
/// - [`Suggestion::RenameName`]: renames the module-level name at every
///   load, store and `global` of it in the cell, but not inside functions,
///   lambdas or comprehensions where the name is local, nor attributes,
///   keywords or strings;
/// - [`Suggestion::AddImport`]: inserts the import at the top of the cell
///   (after a docstring and `from __future__` imports);
/// - [`Suggestion::FixImport`]: replaces the module name in the import
///   statement on the given line, and, when that import binds the
///   misspelled name (`import colections`), the name wherever the cell
///   uses it;
/// - [`Suggestion::RenameKey`]: replaces a string-literal subscript key
///   (on the given line, or anywhere in the cell without one);
/// - [`Suggestion::RenameAttribute`]: replaces the attribute name on the
///   given line (or anywhere in the cell without one).
///
/// Advice-only suggestions (install a package, a cell that runs later, a
/// shadowed builtin) are skipped.
#[derive(Debug, Clone, Copy, Default)]
pub struct RulePatcher;

impl RulePatcher {
    /// A rule patcher.
    pub fn new() -> Self {
        Self
    }

    /// The new source of the suggestion's cell with the suggestion applied,
    /// and a description of the change; `None` if the suggestion changes no
    /// code, does not apply to the cell's current source, or the result
    /// would still have the problem.
    ///
    /// # Errors
    ///
    /// [`PatchError::UnknownCell`] for a suggestion about a cell that is not
    /// in the graph; [`PatchError::InvalidRuleOutput`] if the edit produced
    /// code that does not parse.
    pub fn apply(
        &self,
        suggestion: &Suggestion,
        graph: &ExecutionStateGraph,
    ) -> Result<Option<(String, String)>, PatchError> {
        // The cell is parsed and walked on a thread with a large stack.
        crate::parse::on_deep_stack(|| self.apply_here(suggestion, graph))
    }

    fn apply_here(
        &self,
        suggestion: &Suggestion,
        graph: &ExecutionStateGraph,
    ) -> Result<Option<(String, String)>, PatchError> {
        let Some(cell) = suggestion.target() else {
            return Ok(None);
        };
        let node = graph
            .cell(cell)
            .map_err(|_| PatchError::UnknownCell(cell))?;
        let old = node.source();
        let source = CellSource::parse(old);
        let edited = match suggestion {
            Suggestion::RenameName { from, to, .. } => {
                let spots = source.global_name_spots(from);
                edit(old, spots.into_iter().map(|r| (r, to.clone())).collect())
                    .map(|new| (new, format!("rename `{from}` to `{to}`")))
            }
            Suggestion::AddImport {
                name, statement, ..
            } => {
                if node.analysis().writes.contains(name) {
                    None
                } else {
                    let at = source.import_insertion_offset();
                    let mut new = String::with_capacity(old.len() + statement.len() + 1);
                    new.push_str(&old[..at]);
                    if at > 0 && !old[..at].ends_with('\n') {
                        new.push('\n');
                    }
                    new.push_str(statement);
                    new.push('\n');
                    new.push_str(&old[at..]);
                    Some((new, format!("add `{statement}`")))
                }
            }
            Suggestion::FixImport { line, from, to, .. } => {
                let mut spots: Vec<_> = source
                    .import_module_spots(from)
                    .into_iter()
                    .filter(|(_, l)| l == line)
                    .map(|(range, _)| (range, to.clone()))
                    .collect();
                // `import colections` binds the misspelled name, which the
                // cell then uses: it is renamed with the module, where
                // `import pandsa as pd` binds `pd`, left as it is.
                let binds = !spots.is_empty() && node.analysis().writes.contains(from);
                if binds {
                    spots.extend(
                        source
                            .global_name_spots(from)
                            .into_iter()
                            .map(|range| (range, to.clone())),
                    );
                }
                edit(old, spots).map(|new| {
                    let also = if binds {
                        format!(", and use it as `{to}`")
                    } else {
                        String::new()
                    };
                    (new, format!("import `{to}` instead of `{from}`{also}"))
                })
            }
            Suggestion::RenameKey { line, from, to, .. } => {
                let facts = source.facts();
                let spots: Vec<_> = facts
                    .subscripts
                    .iter()
                    .filter(|s| s.key == Some(Key::Str(from.clone())))
                    .filter(|s| source.on_line(s.range, *line))
                    .filter_map(|s| {
                        let literal = source.slice(s.key_range);
                        let quote = literal.chars().next().filter(|q| matches!(q, '\'' | '"'))?;
                        let expected = format!("{quote}{from}{quote}");
                        (literal == expected).then(|| (s.key_range, format!("{quote}{to}{quote}")))
                    })
                    .collect();
                edit(old, spots).map(|new| (new, format!("use key '{to}' instead of '{from}'")))
            }
            Suggestion::RenameAttribute { line, from, to, .. } => {
                let facts = source.facts();
                let spots: Vec<_> = facts
                    .attributes
                    .iter()
                    .filter(|a| &a.attr == from && source.on_line(a.range, *line))
                    .map(|a| (a.attr_range, to.clone()))
                    .collect();
                edit(old, spots)
                    .map(|new| (new, format!("use attribute `{to}` instead of `{from}`")))
            }
            Suggestion::InstallPackage { .. }
            | Suggestion::DefinedLater { .. }
            | Suggestion::ShadowedBuiltin { .. } => None,
        };
        let Some((new, description)) = edited else {
            return Ok(None);
        };
        let analysis =
            analyze_cell_with(&new, AnalysisOptions { ipython: true }).map_err(|source| {
                PatchError::InvalidRuleOutput {
                    cell,
                    rule: description.clone(),
                    source,
                }
            })?;
        let fixed = match suggestion {
            Suggestion::RenameName { from, .. } => {
                !analysis.reads.contains(from) && !analysis.writes.contains(from)
            }
            Suggestion::AddImport { name, .. } => analysis.writes.contains(name),
            _ => true,
        };
        Ok(fixed.then_some((new, description)))
    }
}

/// `old` with the edits applied, or `None` without edits or change.
fn edit(old: &str, edits: Vec<(rustpython_ruff_text_size::TextRange, String)>) -> Option<String> {
    if edits.is_empty() {
        return None;
    }
    let new = apply_edits(old, edits);
    (new != old).then_some(new)
}

#[async_trait]
impl Patcher for RulePatcher {
    fn name(&self) -> &str {
        "rules"
    }

    async fn propose(
        &self,
        diagnosis: &Diagnosis,
        graph: &ExecutionStateGraph,
    ) -> Result<Patch, PatchError> {
        for suggestion in &diagnosis.suggestions {
            let Some(cell) = suggestion.target() else {
                continue;
            };
            let Some((new, description)) = self.apply(suggestion, graph)? else {
                continue;
            };
            let node = graph
                .cell(cell)
                .map_err(|_| PatchError::UnknownCell(cell))?;
            return Ok(Patch::new(
                cell,
                node.current_version().number,
                node.source(),
                new,
                PatchProvenance {
                    patcher: self.name().to_owned(),
                    description,
                    model: None,
                    provider: None,
                    call_id: None,
                    attempts: 0,
                    usage: None,
                    diagnosis: diagnosis.summary(),
                    at: Timestamp::now(),
                },
            ));
        }
        Err(PatchError::NoRule {
            cell: diagnosis.cell,
            class: diagnosis.class,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Provenance;

    /// The cell's source after the rule patcher applied `suggestion` to
    /// cell 0 of a graph of `source`.
    fn fixed(source: &str, line: u32, from: &str, to: &str) -> Option<(String, String)> {
        let mut graph = ExecutionStateGraph::with_options(AnalysisOptions { ipython: true });
        let cell = graph
            .add_cell(source.to_owned(), Provenance::now("test", "cell"))
            .unwrap();
        let suggestion = Suggestion::FixImport {
            cell,
            line,
            from: from.into(),
            to: to.into(),
        };
        RulePatcher::new().apply(&suggestion, &graph).unwrap()
    }

    #[test]
    fn a_misspelled_module_is_fixed_where_the_cell_uses_the_name_it_binds() {
        let cases = [
            // The import binds the misspelled name: every use is renamed.
            (
                "import colections\nc = colections.Counter('abc')",
                1,
                "import collections\nc = collections.Counter('abc')",
            ),
            (
                "import os, colections\n\ndef f():\n    return colections.deque()\nd = colections.OrderedDict()",
                1,
                "import os, collections\n\ndef f():\n    return collections.deque()\nd = collections.OrderedDict()",
            ),
            (
                "import colections.abc\nok = isinstance([], colections.abc.Sequence)",
                1,
                "import collections.abc\nok = isinstance([], collections.abc.Sequence)",
            ),
            // An alias is bound instead: only the module's name changes.
            (
                "import colections as co\nc = co.Counter('abc')",
                1,
                "import collections as co\nc = co.Counter('abc')",
            ),
            (
                "from colections import Counter\nc = Counter('abc')",
                1,
                "from collections import Counter\nc = Counter('abc')",
            ),
        ];
        for (source, line, expected) in cases {
            let (new, description) = fixed(source, line, "colections", "collections")
                .unwrap_or_else(|| panic!("no patch for {source:?}"));
            assert_eq!(new, expected, "{description}");
        }
    }

    #[test]
    fn a_name_local_to_a_function_is_not_taken_for_the_module() {
        let source = "import colections\n\ndef f(colections):\n    return colections\nx = colections.deque()";
        let (new, _) = fixed(source, 1, "colections", "collections").unwrap();
        assert_eq!(
            new,
            "import collections\n\ndef f(colections):\n    return colections\nx = collections.deque()"
        );
    }
}
