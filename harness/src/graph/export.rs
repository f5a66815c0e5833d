//! Mermaid and Graphviz DOT renderings of a validated loop.

use super::compiled::{Branches, CompiledFork, CompiledStep, Exits, Target};
use crate::state::HarnessState;
use std::fmt::Write;

/// How an edge is drawn.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A transition.
    Plain,
    /// Into a parallel branch.
    Branch,
    /// Into a fan-out's branches (one per item).
    Each,
    /// From the forking step to the join it continues at once every branch
    /// has reached it.
    Join,
}

/// Every edge: (from step, label, target step or the end, kind).
pub(crate) fn edges<S: HarnessState, C>(
    steps: &[CompiledStep<S, C>],
    forks: &[CompiledFork<S>],
) -> Vec<(usize, Option<String>, Option<usize>, Kind)> {
    let mut out = Vec::new();
    let mut push = |i: usize, label: Option<String>, t: Target| match t {
        Target::Step(t) => out.push((i, label, Some(t), Kind::Plain)),
        Target::End => out.push((i, label, None, Kind::Plain)),
        Target::Fork(f) => {
            let fork = &forks[f];
            match &fork.branches {
                Branches::Static(starts) => {
                    for b in starts {
                        out.push((i, label.clone(), Some(*b), Kind::Branch));
                    }
                }
                Branches::Each { step, .. } => {
                    let limit = if fork.limit == usize::MAX {
                        String::new()
                    } else {
                        format!(", {} at once", fork.limit)
                    };
                    let l = match &label {
                        Some(l) => format!("{l}: each{limit}"),
                        None => format!("each{limit}"),
                    };
                    out.push((i, Some(l), Some(*step), Kind::Each));
                }
            }
            out.push((i, Some("join".into()), Some(fork.join), Kind::Join));
        }
    };
    for (i, s) in steps.iter().enumerate() {
        match &s.exits {
            Exits::Next(t) => push(i, None, *t),
            Exits::On(on) => {
                for (sig, t) in on {
                    push(i, Some(sig.to_string()), *t);
                }
            }
        }
    }
    out
}

fn mermaid_text(s: &str) -> String {
    // Mermaid labels are quoted; a quote inside is written as an entity.
    s.replace('"', "#quot;")
}

pub(super) fn mermaid<S: HarnessState, C>(
    steps: &[CompiledStep<S, C>],
    forks: &[CompiledFork<S>],
    start: usize,
) -> String {
    let mut out = String::from("flowchart TD\n");
    let _ = writeln!(out, "    start__([start])");
    let _ = writeln!(out, "    end__([end])");
    for (i, s) in steps.iter().enumerate() {
        let shape = if s.sub.is_some() {
            ("[[\"", "\"]]")
        } else if s.run.is_none() {
            ("{\"", "\"}")
        } else {
            ("[\"", "\"]")
        };
        let _ = writeln!(
            out,
            "    s{i}{}{}{}",
            shape.0,
            mermaid_text(&s.name),
            shape.1
        );
    }
    // Each sub-agent's loop, drawn inside a box of its own (one per role
    // for a step that dispatches by role).
    for (i, s) in steps.iter().enumerate() {
        let Some(sub) = &s.sub else { continue };
        for (k, (role, shape)) in sub.shapes().iter().enumerate() {
            let id = match role {
                Some(_) => format!("s{i}__{k}_"),
                None => format!("s{i}__"),
            };
            let title = match role {
                Some(role) => format!("{}: {role} (sub-agent)", s.name),
                None => format!("{} (sub-agent)", s.name),
            };
            let _ = writeln!(out, "    subgraph {id}sub[\"{}\"]", mermaid_text(&title));
            for (j, name) in shape.steps.iter().enumerate() {
                let _ = writeln!(out, "        {id}c{j}[\"{}\"]", mermaid_text(name));
            }
            let _ = writeln!(out, "        {id}end([end])");
            for (from, label, to) in &shape.edges {
                let to = match to {
                    Some(t) => format!("{id}c{t}"),
                    None => format!("{id}end"),
                };
                match label {
                    Some(l) => {
                        let _ =
                            writeln!(out, "        {id}c{from} -->|\"{}\"| {to}", mermaid_text(l));
                    }
                    None => {
                        let _ = writeln!(out, "        {id}c{from} --> {to}");
                    }
                }
            }
            let _ = writeln!(out, "    end");
            let _ = writeln!(out, "    s{i} -.-o {id}c{}", shape.start);
        }
    }
    let _ = writeln!(out, "    start__ --> s{start}");
    for (from, label, to, kind) in edges(steps, forks) {
        let to = match to {
            Some(t) => format!("s{t}"),
            None => "end__".to_string(),
        };
        let arrow = match kind {
            Kind::Plain => "-->",
            Kind::Branch | Kind::Each => "==>",
            Kind::Join => "-.->",
        };
        match label {
            Some(l) => {
                let _ = writeln!(out, "    s{from} {arrow}|\"{}\"| {to}", mermaid_text(&l));
            }
            None => {
                let _ = writeln!(out, "    s{from} {arrow} {to}");
            }
        }
    }
    out
}

fn dot_text(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

pub(super) fn dot<S: HarnessState, C>(
    steps: &[CompiledStep<S, C>],
    forks: &[CompiledFork<S>],
    start: usize,
) -> String {
    let mut out = String::from("digraph harness {\n");
    out.push_str("    \"$start\" [shape=circle, label=\"start\"];\n");
    out.push_str("    \"$end\" [shape=doublecircle, label=\"end\"];\n");
    for s in steps {
        let shape = if s.sub.is_some() {
            "box, peripheries=2"
        } else if s.run.is_none() {
            "diamond"
        } else {
            "box"
        };
        let _ = writeln!(out, "    \"{}\" [shape={shape}];", dot_text(&s.name));
        let Some(sub) = &s.sub else { continue };
        // Each sub-agent's loop, as a cluster; its steps are named by their
        // path (`step/child`, or `step:role/child` for a dispatch by role).
        let name = dot_text(&s.name);
        for (role, shape) in sub.shapes() {
            let (prefix, title) = match &role {
                Some(role) => (
                    format!("{name}:{}", dot_text(role)),
                    format!("{name}: {} (sub-agent)", dot_text(role)),
                ),
                None => (name.clone(), format!("{name} (sub-agent)")),
            };
            let _ = writeln!(out, "    subgraph \"cluster_{prefix}\" {{");
            let _ = writeln!(out, "        label=\"{title}\";");
            for step in &shape.steps {
                let _ = writeln!(
                    out,
                    "        \"{prefix}/{}\" [shape=box, label=\"{}\"];",
                    dot_text(step),
                    dot_text(step)
                );
            }
            let _ = writeln!(
                out,
                "        \"{prefix}/$end\" [shape=doublecircle, label=\"end\"];"
            );
            for (from, label, to) in &shape.edges {
                let to = match to {
                    Some(t) => dot_text(&shape.steps[*t]),
                    None => "$end".to_string(),
                };
                let from = dot_text(&shape.steps[*from]);
                match label {
                    Some(l) => {
                        let _ = writeln!(
                            out,
                            "        \"{prefix}/{from}\" -> \"{prefix}/{to}\" [label=\"{}\"];",
                            dot_text(l)
                        );
                    }
                    None => {
                        let _ = writeln!(out, "        \"{prefix}/{from}\" -> \"{prefix}/{to}\";");
                    }
                }
            }
            let _ = writeln!(out, "    }}");
            let _ = writeln!(
                out,
                "    \"{name}\" -> \"{prefix}/{}\" [style=dotted];",
                dot_text(&shape.steps[shape.start])
            );
        }
    }
    let _ = writeln!(
        out,
        "    \"$start\" -> \"{}\";",
        dot_text(&steps[start].name)
    );
    for (from, label, to, kind) in edges(steps, forks) {
        let to = match to {
            Some(t) => dot_text(&steps[t].name),
            None => "$end".to_string(),
        };
        let from = dot_text(&steps[from].name);
        let mut attrs = Vec::new();
        if let Some(l) = label {
            attrs.push(format!("label=\"{}\"", dot_text(&l)));
        }
        match kind {
            Kind::Plain => {}
            Kind::Branch => attrs.push("style=bold".into()),
            Kind::Each => attrs.push("style=bold, penwidth=2".into()),
            Kind::Join => attrs.push("style=dashed".into()),
        }
        if attrs.is_empty() {
            let _ = writeln!(out, "    \"{from}\" -> \"{to}\";");
        } else {
            let _ = writeln!(out, "    \"{from}\" -> \"{to}\" [{}];", attrs.join(", "));
        }
    }
    out.push_str("}\n");
    out
}
