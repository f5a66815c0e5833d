//! Mermaid and Graphviz DOT renderings of a validated loop.

use super::compiled::{CompiledStep, Exits, Target};
use crate::state::HarnessState;
use std::fmt::Write;

/// Every edge: (from step, label, target).
fn edges<S: HarnessState, C>(steps: &[CompiledStep<S, C>]) -> Vec<(usize, Option<String>, Target)> {
    let mut out = Vec::new();
    for (i, s) in steps.iter().enumerate() {
        match &s.exits {
            Exits::Next(t) => out.push((i, None, *t)),
            Exits::On(on) => {
                for (sig, t) in on {
                    out.push((i, Some(sig.to_string()), *t));
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

pub(super) fn mermaid<S: HarnessState, C>(steps: &[CompiledStep<S, C>], start: usize) -> String {
    let mut out = String::from("flowchart TD\n");
    let _ = writeln!(out, "    start__([start])");
    let _ = writeln!(out, "    end__([end])");
    for (i, s) in steps.iter().enumerate() {
        let shape = if s.run.is_none() {
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
    let _ = writeln!(out, "    start__ --> s{start}");
    for (from, label, to) in edges(steps) {
        let to = match to {
            Target::Step(t) => format!("s{t}"),
            Target::End => "end__".to_string(),
        };
        match label {
            Some(l) => {
                let _ = writeln!(out, "    s{from} -->|\"{}\"| {to}", mermaid_text(&l));
            }
            None => {
                let _ = writeln!(out, "    s{from} --> {to}");
            }
        }
    }
    out
}

fn dot_text(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

pub(super) fn dot<S: HarnessState, C>(steps: &[CompiledStep<S, C>], start: usize) -> String {
    let mut out = String::from("digraph harness {\n");
    out.push_str("    \"$start\" [shape=circle, label=\"start\"];\n");
    out.push_str("    \"$end\" [shape=doublecircle, label=\"end\"];\n");
    for s in steps {
        let shape = if s.run.is_none() { "diamond" } else { "box" };
        let _ = writeln!(out, "    \"{}\" [shape={shape}];", dot_text(&s.name));
    }
    let _ = writeln!(
        out,
        "    \"$start\" -> \"{}\";",
        dot_text(&steps[start].name)
    );
    for (from, label, to) in edges(steps) {
        let to = match to {
            Target::Step(t) => dot_text(&steps[t].name),
            Target::End => "$end".to_string(),
        };
        let from = dot_text(&steps[from].name);
        match label {
            Some(l) => {
                let _ = writeln!(
                    out,
                    "    \"{from}\" -> \"{to}\" [label=\"{}\"];",
                    dot_text(&l)
                );
            }
            None => {
                let _ = writeln!(out, "    \"{from}\" -> \"{to}\";");
            }
        }
    }
    out.push_str("}\n");
    out
}
