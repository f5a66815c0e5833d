//! Loop validation: every violation, reported at once.

use super::def::{Dest, StepDef};
use crate::signal::is_reserved;
use crate::state::HarnessState;
use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::visit::{Bfs, Reversed};
use std::collections::{BTreeSet, HashMap};
use std::fmt;

/// One thing wrong with a loop.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Violation {
    /// A step has an empty name.
    EmptyName {
        /// The position of the step among the declared steps (0-based).
        position: usize,
    },
    /// Two steps have the same name.
    DuplicateStep {
        /// The name declared twice or more.
        step: String,
    },
    /// A step or signal uses a name reserved for the harness (beginning with `$`).
    ReservedName {
        /// The reserved name.
        name: String,
        /// What used it: `step` or `signal of step X`.
        used_as: String,
    },
    /// No start step was declared.
    NoStart,
    /// The start step does not exist.
    UnknownStart {
        /// The name given to `start`.
        step: String,
    },
    /// A transition leads to a step that does not exist.
    UnknownTarget {
        /// The step the transition leaves.
        from: String,
        /// `next` or the signal's name.
        via: String,
        /// The missing step.
        target: String,
    },
    /// A step cannot be reached from the start step.
    Unreachable {
        /// The unreachable step.
        step: String,
    },
    /// No end can be reached from these steps: one step, or a cycle.
    NoWayOut {
        /// The steps, in declaration order.
        steps: Vec<String>,
    },
    /// A step has neither `run` nor `route`.
    NoBehaviour {
        /// The empty step.
        step: String,
    },
    /// A step has `route` but no `.on(...)` to send its signals to.
    RouteWithoutOn {
        /// The step.
        step: String,
    },
    /// A step has `.on(...)` transitions but no `route` to pick one.
    OnWithoutRoute {
        /// The step.
        step: String,
    },
    /// A step has both `.next(...)` (or `.end()`) and `.on(...)`.
    NextWithOn {
        /// The step.
        step: String,
    },
    /// A step has `run` only, and no transition out of it.
    NoTransition {
        /// The step.
        step: String,
    },
    /// A step declares the same signal twice.
    DuplicateSignal {
        /// The step.
        step: String,
        /// The signal declared twice.
        signal: String,
    },
    /// A setting of the harness has a value no run can work with.
    InvalidSetting {
        /// The setting: `step_limit`, `session_config.lease_ttl`, ….
        setting: String,
        /// Its value and what is wrong with it.
        reason: String,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::EmptyName { position } => {
                write!(f, "step number {} has an empty name", position + 1)
            }
            Violation::DuplicateStep { step } => {
                write!(f, "step `{step}` is declared more than once")
            }
            Violation::ReservedName { name, used_as } => write!(
                f,
                "`{name}` is used as a {used_as}, but names beginning with `$` are reserved for the harness"
            ),
            Violation::NoStart => write!(f, "no start step: call .start(\"step\")"),
            Violation::UnknownStart { step } => {
                write!(f, "the start step `{step}` is not declared")
            }
            Violation::UnknownTarget { from, via, target } => write!(
                f,
                "step `{from}` goes to `{target}` on {via}, but no step `{target}` is declared"
            ),
            Violation::Unreachable { step } => {
                write!(f, "step `{step}` cannot be reached from the start step")
            }
            Violation::NoWayOut { steps } if steps.len() == 1 => write!(
                f,
                "no end can be reached from step `{}`: add a transition that leads to .end()",
                steps[0]
            ),
            Violation::NoWayOut { steps } => write!(
                f,
                "steps `{}` form a cycle with no way out: add a transition that leads to .end()",
                steps.join("`, `")
            ),
            Violation::NoBehaviour { step } => {
                write!(f, "step `{step}` has neither .run(..) nor .route(..)")
            }
            Violation::RouteWithoutOn { step } => write!(
                f,
                "step `{step}` has .route(..) but no .on(signal): its signals go nowhere"
            ),
            Violation::OnWithoutRoute { step } => write!(
                f,
                "step `{step}` has .on(..) transitions but no .route(..) to choose among them"
            ),
            Violation::NextWithOn { step } => write!(
                f,
                "step `{step}` has both .next(..) or .end() and .on(..): use one or the other"
            ),
            Violation::NoTransition { step } => write!(
                f,
                "step `{step}` has no transition out: add .next(step), .end(), or .route(..) with .on(signal)"
            ),
            Violation::DuplicateSignal { step, signal } => {
                write!(f, "step `{step}` declares signal `{signal}` more than once")
            }
            Violation::InvalidSetting { setting, reason } => {
                write!(f, "the setting `{setting}` is invalid: {reason}")
            }
        }
    }
}

/// A loop that is not a valid graph, with every violation found.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct LoopValidationError {
    /// Every violation, in the order: names, start, each step's shape and
    /// targets, then reachability.
    pub violations: Vec<Violation>,
}

impl fmt::Display for LoopValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the loop has {} violation(s):", self.violations.len())?;
        for v in &self.violations {
            write!(f, "\n  - {v}")?;
        }
        Ok(())
    }
}

/// Checks the declared steps; returns the start step's index.
pub(super) fn validate<S: HarnessState, C>(
    steps: &[StepDef<S, C>],
    start: Option<&str>,
) -> Result<usize, LoopValidationError> {
    let mut v = Vec::new();

    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut reported_dup = BTreeSet::new();
    for (i, s) in steps.iter().enumerate() {
        if s.name.is_empty() {
            v.push(Violation::EmptyName { position: i });
        } else if is_reserved(&s.name) {
            v.push(Violation::ReservedName {
                name: s.name.clone(),
                used_as: "step name".into(),
            });
        }
        if seen.insert(&s.name, i).is_some() && reported_dup.insert(&s.name) {
            v.push(Violation::DuplicateStep {
                step: s.name.clone(),
            });
        }
    }
    // The first declaration of a name wins, for the graph checks below.
    let index: HashMap<&str, usize> = steps
        .iter()
        .enumerate()
        .rev()
        .map(|(i, s)| (s.name.as_str(), i))
        .collect();

    let start_index = match start {
        None => {
            v.push(Violation::NoStart);
            None
        }
        Some(name) => match index.get(name) {
            Some(i) => Some(*i),
            None => {
                v.push(Violation::UnknownStart { step: name.into() });
                None
            }
        },
    };

    // Graph: one node per step, plus the end.
    let mut graph: DiGraph<(), ()> = DiGraph::new();
    let nodes: Vec<NodeIndex> = steps.iter().map(|_| graph.add_node(())).collect();
    let end = graph.add_node(());
    // Steps whose own shape already explains why they are stuck.
    let mut shapeless = BTreeSet::new();

    for (i, s) in steps.iter().enumerate() {
        let name = &s.name;
        if s.run.is_none() && s.route.is_none() {
            v.push(Violation::NoBehaviour { step: name.clone() });
            shapeless.insert(i);
        }
        if s.route.is_some() && s.on.is_empty() {
            v.push(Violation::RouteWithoutOn { step: name.clone() });
            shapeless.insert(i);
        }
        if s.route.is_none() && !s.on.is_empty() {
            v.push(Violation::OnWithoutRoute { step: name.clone() });
        }
        if s.next.is_some() && !s.on.is_empty() {
            v.push(Violation::NextWithOn { step: name.clone() });
        }
        if s.run.is_some() && s.route.is_none() && s.next.is_none() && s.on.is_empty() {
            v.push(Violation::NoTransition { step: name.clone() });
            shapeless.insert(i);
        }
        let mut signals = BTreeSet::new();
        for (sig, dest) in &s.on {
            if sig.is_reserved() {
                v.push(Violation::ReservedName {
                    name: sig.to_string(),
                    used_as: format!("signal of step `{name}`"),
                });
            }
            if !signals.insert(sig.as_str()) {
                v.push(Violation::DuplicateSignal {
                    step: name.clone(),
                    signal: sig.to_string(),
                });
            }
            match dest {
                Dest::End => {
                    graph.add_edge(nodes[i], end, ());
                }
                Dest::Step(target) => match index.get(target.as_str()) {
                    Some(t) => {
                        graph.add_edge(nodes[i], nodes[*t], ());
                    }
                    None => v.push(Violation::UnknownTarget {
                        from: name.clone(),
                        via: format!("signal `{sig}`"),
                        target: target.clone(),
                    }),
                },
            }
        }
        match &s.next {
            None => {}
            Some(Dest::End) => {
                graph.add_edge(nodes[i], end, ());
            }
            Some(Dest::Step(target)) => match index.get(target.as_str()) {
                Some(t) => {
                    graph.add_edge(nodes[i], nodes[*t], ());
                }
                None => v.push(Violation::UnknownTarget {
                    from: name.clone(),
                    via: "next".into(),
                    target: target.clone(),
                }),
            },
        }
    }

    if let Some(start) = start_index {
        let mut reachable = vec![false; steps.len()];
        let mut bfs = Bfs::new(&graph, nodes[start]);
        while let Some(n) = bfs.next(&graph) {
            if n != end {
                reachable[n.index()] = true;
            }
        }
        for (i, s) in steps.iter().enumerate() {
            if !reachable[i] && index.get(s.name.as_str()) == Some(&i) {
                v.push(Violation::Unreachable {
                    step: s.name.clone(),
                });
            }
        }
    }

    // Steps from which the end can be reached: a search backwards from it.
    let mut can_end = vec![false; steps.len()];
    let reversed = Reversed(&graph);
    let mut bfs = Bfs::new(reversed, end);
    while let Some(n) = bfs.next(reversed) {
        if n != end {
            can_end[n.index()] = true;
        }
    }
    let stuck: Vec<usize> = (0..steps.len())
        .filter(|i| !can_end[*i] && !shapeless.contains(i))
        .filter(|i| index.get(steps[*i].name.as_str()) == Some(i))
        .collect();
    if !stuck.is_empty() {
        // Group stuck steps into cycles, so a cycle is one violation.
        let sub = graph.filter_map(
            |n, _| stuck.contains(&n.index()).then_some(n.index()),
            |_, _| Some(()),
        );
        let mut groups: Vec<Vec<usize>> = petgraph::algo::tarjan_scc(&sub)
            .into_iter()
            .map(|scc| {
                let mut g: Vec<usize> = scc.iter().map(|n| sub[*n]).collect();
                g.sort_unstable();
                g
            })
            .collect();
        groups.sort();
        for g in groups {
            v.push(Violation::NoWayOut {
                steps: g.iter().map(|i| steps[*i].name.clone()).collect(),
            });
        }
    }

    match (v.is_empty(), start_index) {
        (true, Some(start)) => Ok(start),
        _ => Err(LoopValidationError { violations: v }),
    }
}
