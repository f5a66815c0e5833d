//! A loop as the LangGraph API draws a graph: `{nodes, edges}`, with
//! `__start__` and `__end__`.
//!
//! The core exports a loop as Graphviz DOT ([`harness::Harness::to_dot`]);
//! this reads the top level of that export back (its sub-agent clusters are
//! left out: `xray` is not supported yet).

use serde_json::{Value, json};

/// The graph of the DOT export `dot`.
pub(crate) fn from_dot(dot: &str) -> Value {
    let mut nodes = Vec::new();
    let mut edges = Vec::new();
    let mut depth = 0usize;
    for line in dot.lines() {
        let line = line.trim();
        if line.starts_with("subgraph") {
            depth += 1;
            continue;
        }
        if line == "}" {
            depth = depth.saturating_sub(1);
            continue;
        }
        if depth > 0 || !line.starts_with('"') {
            continue;
        }
        let (first, rest) = match quoted(line) {
            Some(split) => split,
            None => continue,
        };
        let rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix("->") {
            let Some((second, attrs)) = quoted(after.trim_start()) else {
                continue;
            };
            // Dotted edges lead into a sub-agent's cluster.
            if attrs.contains("style=dotted") {
                continue;
            }
            let label = attr(attrs, "label");
            let mut edge = json!({
                "source": node_id(&first),
                "target": node_id(&second),
                "conditional": label.is_some(),
            });
            if let Some(label) = label {
                edge["data"] = json!(label);
            }
            edges.push(edge);
        } else {
            let id = node_id(&first);
            let node = match id.as_str() {
                "__start__" | "__end__" => json!({"id": id, "type": "schema", "data": id}),
                _ => {
                    json!({"id": id, "type": "runnable", "data": {"id": ["harness", "step"], "name": id}})
                }
            };
            nodes.push(node);
        }
    }
    json!({ "nodes": nodes, "edges": edges })
}

fn node_id(name: &str) -> String {
    match name {
        "$start" => "__start__".into(),
        "$end" => "__end__".into(),
        other => other.into(),
    }
}

/// The quoted DOT string at the start of `s`, unescaped, and what follows.
fn quoted(s: &str) -> Option<(String, &str)> {
    let body = s.strip_prefix('"')?;
    let mut out = String::new();
    let mut chars = body.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                if let Some((_, next)) = chars.next() {
                    out.push(next);
                }
            }
            '"' => return Some((out, &body[i + 1..])),
            c => out.push(c),
        }
    }
    None
}

/// The quoted value of attribute `name` in `attrs` (`[label="x", ...]`).
fn attr(attrs: &str, name: &str) -> Option<String> {
    let at = attrs.find(&format!("{name}=\""))?;
    quoted(&attrs[at + name.len() + 1..]).map(|(v, _)| v)
}

#[cfg(test)]
mod tests {
    use super::from_dot;

    #[test]
    fn a_dot_export_reads_as_nodes_and_edges() {
        let dot = "digraph harness {\n    \"$start\" [shape=circle, label=\"start\"];\n    \"$end\" [shape=doublecircle, label=\"end\"];\n    \"ask \\\"boss\\\"\" [shape=box];\n    \"$start\" -> \"ask \\\"boss\\\"\";\n    \"ask \\\"boss\\\"\" -> \"$end\" [label=\"done\"];\n}\n";
        let g = from_dot(dot);
        let nodes: Vec<&str> = g["nodes"]
            .as_array()
            .unwrap_or(&Vec::new())
            .iter()
            .filter_map(|n| n["id"].as_str())
            .map(|s| Box::leak(s.to_string().into_boxed_str()) as &str)
            .collect();
        assert_eq!(nodes, ["__start__", "__end__", "ask \"boss\""]);
        assert_eq!(g["edges"][0]["source"], "__start__");
        assert_eq!(g["edges"][0]["conditional"], false);
        assert_eq!(g["edges"][1]["target"], "__end__");
        assert_eq!(g["edges"][1]["data"], "done");
        assert_eq!(g["edges"][1]["conditional"], true);
    }
}
