//! The loop as the page draws it: nodes and edges, either declared (read
//! from the validated harness's DOT export) or observed (the transitions a
//! session's checkpoints show).

use harness::session::{Checkpoint, CheckpointKind, SessionPhase, StoredRun};
use serde::Serialize;

/// The start and end nodes, named as in the DOT export.
pub(crate) const START: &str = "$start";
pub(crate) const END: &str = "$end";

/// A graph to draw.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub(crate) struct Graph {
    /// `declared` (from the harness) or `observed` (from checkpoints).
    pub(crate) source: &'static str,
    pub(crate) nodes: Vec<Node>,
    pub(crate) edges: Vec<Edge>,
}

/// A step, or the start or end.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Node {
    pub(crate) id: String,
    /// `start`, `end`, `step`, or `router` (a step that only routes).
    pub(crate) kind: &'static str,
}

/// A transition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Edge {
    pub(crate) from: String,
    pub(crate) to: String,
    /// The signal, when the exit is chosen by one.
    pub(crate) label: Option<String>,
}

/// Why a DOT text could not be read.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("the harness's DOT export, line {line}: {why}: {text:?}")]
pub(crate) struct DotError {
    line: usize,
    why: &'static str,
    text: String,
}

/// Reads the DOT that [`harness::Harness::to_dot`] writes: `"name"
/// [shape=…];` nodes and `"a" -> "b" [label="…"];` edges.
pub(crate) fn from_dot(dot: &str) -> Result<Graph, DotError> {
    let mut graph = Graph {
        source: "declared",
        ..Graph::default()
    };
    for (n, raw) in dot.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with("digraph") || line == "}" {
            continue;
        }
        let err = |why| DotError {
            line: n + 1,
            why,
            text: raw.to_owned(),
        };
        let (first, rest) = quoted(line).ok_or_else(|| err("expected a quoted name"))?;
        let rest = rest.trim_start();
        if let Some(after_arrow) = rest.strip_prefix("->") {
            let (second, rest) =
                quoted(after_arrow.trim_start()).ok_or_else(|| err("expected a quoted target"))?;
            let label = match attr(rest, "label") {
                Some(Ok(l)) => Some(l),
                Some(Err(())) => return Err(err("a label that does not end")),
                None => None,
            };
            graph.edges.push(Edge {
                from: first,
                to: second,
                label,
            });
        } else {
            let kind = if first == START {
                "start"
            } else if first == END {
                "end"
            } else if rest.contains("shape=diamond") {
                "router"
            } else {
                "step"
            };
            graph.nodes.push(Node { id: first, kind });
        }
    }
    for e in &graph.edges {
        for end in [&e.from, &e.to] {
            if !graph.nodes.iter().any(|n| &n.id == end) {
                return Err(DotError {
                    line: 0,
                    why: "an edge names a node that is not declared",
                    text: end.clone(),
                });
            }
        }
    }
    Ok(graph)
}

/// A DOT quoted string at the start of `s` (with `\"` and `\\` escapes),
/// and what follows it.
fn quoted(s: &str) -> Option<(String, &str)> {
    let body = s.strip_prefix('"')?;
    let mut out = String::new();
    let mut chars = body.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((out, &body[i + 1..])),
            '\\' => out.push(chars.next()?.1),
            c => out.push(c),
        }
    }
    None
}

/// The value of `name="…"` in an attribute list.
fn attr(s: &str, name: &str) -> Option<Result<String, ()>> {
    let at = s.find(&format!("{name}="))?;
    Some(quoted(&s[at + name.len() + 1..]).map(|(v, _)| v).ok_or(()))
}

/// The transitions a session's log shows: `$start` to the first step, each
/// step to the next, the last to the step waiting to run (or to `$end` when
/// the session is done). A run input (`$input`) starts a new run, from the
/// start step.
pub(crate) fn observed(head: &StoredRun, log: &[Checkpoint]) -> Graph {
    let mut graph = Graph {
        source: "observed",
        ..Graph::default()
    };
    let add_node = |graph: &mut Graph, id: &str| {
        if !graph.nodes.iter().any(|n| n.id == id) {
            let kind = match id {
                START => "start",
                END => "end",
                _ => "step",
            };
            graph.nodes.push(Node {
                id: id.to_owned(),
                kind,
            });
        }
    };
    let add_edge = |graph: &mut Graph, from: &str, to: &str| {
        add_node(graph, from);
        add_node(graph, to);
        if !graph.edges.iter().any(|e| e.from == from && e.to == to) {
            graph.edges.push(Edge {
                from: from.to_owned(),
                to: to.to_owned(),
                label: None,
            });
        }
    };
    add_node(&mut graph, START);
    let mut last = START.to_owned();
    for cp in log {
        if !matches!(cp.kind, CheckpointKind::Update(_)) {
            continue;
        }
        let step = if cp.step == "$input" { START } else { &cp.step };
        if step != START {
            add_edge(&mut graph, &last, step);
        }
        last = step.to_owned();
    }
    match (&head.phase, &head.next_step) {
        (SessionPhase::Completed { .. }, _) if last != START => add_edge(&mut graph, &last, END),
        (_, Some(next)) if last != *next || last == START => add_edge(&mut graph, &last, next),
        _ => {}
    }
    graph
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dot_export_reads_back_as_nodes_and_edges() {
        let dot = "digraph harness {\n    \"$start\" [shape=circle, label=\"start\"];\n    \"$end\" [shape=doublecircle, label=\"end\"];\n    \"ask \\\"boss\\\"\" [shape=box];\n    \"route\" [shape=diamond];\n    \"$start\" -> \"ask \\\"boss\\\"\";\n    \"ask \\\"boss\\\"\" -> \"route\";\n    \"route\" -> \"$end\" [label=\"done\"];\n}\n";
        let g = from_dot(dot).expect("reads");
        let kinds: Vec<_> = g.nodes.iter().map(|n| (n.id.as_str(), n.kind)).collect();
        assert_eq!(
            kinds,
            [
                ("$start", "start"),
                ("$end", "end"),
                ("ask \"boss\"", "step"),
                ("route", "router")
            ]
        );
        assert_eq!(g.edges.len(), 3);
        assert_eq!(g.edges[2].label.as_deref(), Some("done"));
        assert_eq!(g.edges[1].from, "ask \"boss\"");
    }

    #[test]
    fn dot_that_is_not_the_export_is_refused_with_its_line() {
        for (dot, line) in [
            ("digraph h {\n  a -> b;\n}\n", 2),
            ("digraph h {\n  \"a\" -> b;\n}\n", 2),
            ("  \"a\" [shape=box];\n  \"unterminated", 2),
            ("\"a\" -> \"b\" [label=\"open];", 1),
        ] {
            let e = from_dot(dot).expect_err(dot);
            assert_eq!(e.line, line, "{dot}: {e}");
            assert!(e.to_string().contains("DOT export"), "{e}");
        }
        let e = from_dot("\"a\" [shape=box];\n\"a\" -> \"b\";").expect_err("undeclared");
        assert!(e.to_string().contains("not declared"), "{e}");
    }
}
