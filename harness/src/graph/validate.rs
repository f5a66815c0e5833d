//! Loop validation: every violation, reported at once.

use super::def::{BranchesDef, Dest, ForkDef, StepDef};
use crate::signal::is_reserved;
use crate::state::{HarnessState, ReducerKind};
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
    /// A step declares that it writes a field the state does not have.
    UnknownField {
        /// The step.
        step: String,
        /// The field it names.
        field: String,
    },
    /// A fork starts no branch, names a branch twice, or starts a branch
    /// at its own join.
    BadFork {
        /// The fork: the step it leaves and how (`plan`, `plan/signal`).
        fork: String,
        /// What is wrong.
        reason: String,
    },
    /// A branch of a fork can end the run, or go on for ever, without
    /// reaching the fork's join.
    BranchNeverJoins {
        /// The fork.
        fork: String,
        /// The step the branch starts at.
        branch: String,
        /// The join it does not reach.
        join: String,
        /// How: `it can end the run at step X`, `no path leads to it`.
        how: String,
    },
    /// Two branches of a fork (or two instances of a fan-out's branch) may
    /// write a field whose reducer keeps only one value.
    ParallelWrite {
        /// The fork.
        fork: String,
        /// The field.
        field: String,
        /// The branches that may write it (a fan-out's: `step#*`).
        branches: Vec<String>,
    },
    /// A fan-out sends items of one type to a step that takes another, or
    /// to a step that takes none.
    InputMismatch {
        /// The fork.
        fork: String,
        /// The step the branches start at.
        step: String,
        /// The type the fan-out sends.
        sends: String,
        /// The type the step takes (`no input` for a step without `run_each`).
        takes: String,
    },
    /// A step that takes an input (`run_each`) is reached otherwise than as
    /// the start of a fan-out's branch, where it would have no input.
    InputStepReached {
        /// The step.
        step: String,
        /// How it is reached: `the start step`, `step X on next`, ….
        from: String,
    },
    /// A step declares `.cache(..)` before its `.run(..)`, or without one:
    /// there is nothing to cache.
    CacheWithoutRun {
        /// The step.
        step: String,
    },
    /// A step declares its body, its router or where it goes after `run`
    /// more than once: the later declaration would replace the earlier one
    /// without a word.
    DeclaredTwice {
        /// The step.
        step: String,
        /// What it declares twice: `.run`, `.route`, or where it goes after
        /// `run` (`.next`, `.end`, `.fork`/`.fan_out` with `.join`).
        what: String,
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
            Violation::UnknownField { step, field } => write!(
                f,
                "step `{step}` declares that it writes `{field}`, but the state has no such field"
            ),
            Violation::BadFork { fork, reason } => write!(f, "the fork at `{fork}` {reason}"),
            Violation::BranchNeverJoins {
                fork,
                branch,
                join,
                how,
            } => write!(
                f,
                "the branch `{branch}` of the fork at `{fork}` never reaches its join `{join}`: {how}"
            ),
            Violation::ParallelWrite {
                fork,
                field,
                branches,
            } => write!(
                f,
                "the branches `{}` of the fork at `{fork}` may each write `{field}`, whose reducer \
                 keeps one value: give it a reducer that merges (append, extend, add, max, min, \
                 a function) or declare what the steps write with .writes([..])",
                branches.join("`, `")
            ),
            Violation::InputMismatch {
                fork,
                step,
                sends,
                takes,
            } => write!(
                f,
                "the fan-out at `{fork}` sends `{sends}` to step `{step}`, which takes {takes}"
            ),
            Violation::InputStepReached { step, from } => write!(
                f,
                "step `{step}` takes an input (run_each) and can only start a fan-out's branch, \
                 but it is reached from {from}"
            ),
            Violation::CacheWithoutRun { step } => write!(
                f,
                "step `{step}` declares .cache(..) without a .run(..) before it: declare the cache after the step's run"
            ),
            Violation::DeclaredTwice { step, what } => write!(
                f,
                "step `{step}` declares {what} more than once: a step has one, and the later \
                 declaration would replace the earlier one"
            ),
            // A setting that quotes a name itself (`limit of the fork at
            // `plan``) is not quoted again.
            Violation::InvalidSetting { setting, reason } if setting.contains('`') => {
                write!(f, "the setting {setting} is invalid: {reason}")
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
    let mut forks: Vec<ForkAt<'_, S>> = Vec::new();
    let edges = Edges {
        steps,
        index: &index,
        nodes: &nodes,
        end,
    };
    // Steps whose own shape already explains why they are stuck.
    let mut shapeless = BTreeSet::new();

    for (i, s) in steps.iter().enumerate() {
        let name = &s.name;
        if !s.has_body() && s.route.is_none() {
            v.push(Violation::NoBehaviour { step: name.clone() });
            shapeless.insert(i);
        }
        if s.route.is_some() && s.on.is_empty() {
            v.push(Violation::RouteWithoutOn { step: name.clone() });
            shapeless.insert(i);
        }
        if s.cache_without_run {
            v.push(Violation::CacheWithoutRun { step: name.clone() });
        }
        for what in &s.twice {
            v.push(Violation::DeclaredTwice {
                step: name.clone(),
                what: (*what).to_string(),
            });
        }
        if s.route.is_none() && !s.on.is_empty() {
            v.push(Violation::OnWithoutRoute { step: name.clone() });
        }
        if s.next.is_some() && !s.on.is_empty() {
            v.push(Violation::NextWithOn { step: name.clone() });
        }
        if s.has_body() && s.route.is_none() && s.next.is_none() && s.on.is_empty() {
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
            edges.add(
                &mut graph,
                &mut v,
                &mut forks,
                (i, &format!("signal `{sig}`"), &format!("{name}/{sig}")),
                dest,
            );
        }
        if let Some(dest) = &s.next {
            edges.add(&mut graph, &mut v, &mut forks, (i, "next", name), dest);
        }
    }
    check_inputs(steps, &index, start_index, &forks, &mut v);

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

    for fork in &forks {
        check_fork(steps, fork, &mut v);
    }

    match (v.is_empty(), start_index) {
        (true, Some(start)) => Ok(start),
        _ => Err(LoopValidationError { violations: v }),
    }
}

/// A fork whose targets all exist: where it is, its branches' first steps
/// and its join.
struct ForkAt<'a, S: HarnessState> {
    id: String,
    def: &'a ForkDef<S>,
    starts: Vec<usize>,
    join: usize,
}

/// Every step a transition can lead to, with forks expanded: the step
/// indices, and whether the run can end there.
fn successors<S: HarnessState>(
    dest: &Dest<S>,
    index: &HashMap<&str, usize>,
    out: &mut Vec<Option<usize>>,
) {
    match dest {
        Dest::End => out.push(None),
        Dest::Step(t) => out.extend(index.get(t.as_str()).map(|i| Some(*i))),
        Dest::Fork(fork) => {
            out.extend(index.get(fork.join.as_str()).map(|i| Some(*i)));
            match &fork.branches {
                BranchesDef::Static(names) => {
                    for n in names {
                        out.extend(index.get(n.as_str()).map(|i| Some(*i)));
                    }
                }
                BranchesDef::Each { step, .. } => {
                    out.extend(index.get(step.as_str()).map(|i| Some(*i)));
                }
            }
        }
    }
}

fn step_successors<S: HarnessState, C>(
    step: &StepDef<S, C>,
    index: &HashMap<&str, usize>,
) -> Vec<Option<usize>> {
    let mut out = Vec::new();
    for (_, dest) in &step.on {
        successors(dest, index, &mut out);
    }
    if let Some(dest) = &step.next {
        successors(dest, index, &mut out);
    }
    out
}

/// The steps a branch starting at `start` may run before it reaches
/// `join`, and a step where it can end the run instead, if any.
fn region<S: HarnessState, C>(
    steps: &[StepDef<S, C>],
    index: &HashMap<&str, usize>,
    start: usize,
    join: usize,
) -> (BTreeSet<usize>, bool, Option<usize>) {
    let mut seen = BTreeSet::new();
    let mut joins = false;
    let mut ends_at = None;
    let mut todo = vec![start];
    while let Some(i) = todo.pop() {
        if i == join {
            joins = true;
            continue;
        }
        if !seen.insert(i) {
            continue;
        }
        for next in step_successors(&steps[i], index) {
            match next {
                Some(n) => todo.push(n),
                None => {
                    ends_at.get_or_insert(i);
                }
            }
        }
    }
    (seen, joins, ends_at)
}

/// The fields a step may write: `None` for "any", as far as is known.
fn writes<S: HarnessState, C>(step: &StepDef<S, C>) -> Option<Vec<String>> {
    if !step.has_body() {
        return Some(Vec::new());
    }
    step.writes.clone()
}

/// Checks the branches of one fork: each reaches the join without ending
/// the run, and no two may write a field whose reducer keeps one value.
fn check_fork<S: HarnessState, C>(
    steps: &[StepDef<S, C>],
    fork: &ForkAt<'_, S>,
    v: &mut Vec<Violation>,
) {
    let index: HashMap<&str, usize> = steps
        .iter()
        .enumerate()
        .rev()
        .map(|(i, s)| (s.name.as_str(), i))
        .collect();
    let join_name = steps[fork.join].name.clone();
    let fields = S::fields();
    // Per branch: the fields it may write, `None` for any.
    let mut written: Vec<(String, Option<BTreeSet<String>>)> = Vec::new();
    // A branch named twice is one violation of its own (`BadFork`), not a
    // branch competing with itself.
    let mut seen = BTreeSet::new();
    for &start in &fork.starts {
        if !seen.insert(start) {
            continue;
        }
        let (region, joins, ends_at) = region(steps, &index, start, fork.join);
        let branch = steps[start].name.clone();
        if let Some(at) = ends_at {
            v.push(Violation::BranchNeverJoins {
                fork: fork.id.clone(),
                branch: branch.clone(),
                join: join_name.clone(),
                how: format!("it can end the run at step `{}`", steps[at].name),
            });
        } else if !joins {
            v.push(Violation::BranchNeverJoins {
                fork: fork.id.clone(),
                branch: branch.clone(),
                join: join_name.clone(),
                how: "no path from it leads to the join".into(),
            });
        }
        let mut set = Some(BTreeSet::new());
        for i in &region {
            match (writes(&steps[*i]), &mut set) {
                (Some(w), Some(set)) => set.extend(w),
                _ => set = None,
            }
        }
        written.push((branch, set));
    }
    if let BranchesDef::Each { .. } = fork.def.branches {
        // One branch, run many times: it competes with itself.
        let (name, set) = written[0].clone();
        written = vec![
            (format!("{name}#*"), set.clone()),
            (format!("{name}#*"), set),
        ];
    }
    // A field may be written by these branches.
    let mut by_field: Vec<(String, Vec<String>)> = Vec::new();
    let kept_one: Vec<String> = match fields {
        Some(fields) => fields
            .iter()
            .filter(|f| f.reducer == ReducerKind::Replace)
            .map(|f| f.name.to_string())
            .collect(),
        None => vec!["(every field: the state does not describe its reducers)".to_string()],
    };
    for field in kept_one {
        let mut branches: Vec<String> = Vec::new();
        for (branch, set) in &written {
            let may = match set {
                None => true,
                Some(set) => fields.is_none() && !set.is_empty() || set.contains(&field),
            };
            if may {
                branches.push(branch.clone());
            }
        }
        if branches.len() >= 2 {
            branches.dedup();
            by_field.push((field, branches));
        }
    }
    for (field, branches) in by_field {
        v.push(Violation::ParallelWrite {
            fork: fork.id.clone(),
            field,
            branches,
        });
    }
}

/// Checks what steps take inputs: a fan-out sends its step the type it
/// takes, and a step that takes one is only ever a fan-out's first step.
/// Also checks declared writes against the state's fields.
fn check_inputs<S: HarnessState, C>(
    steps: &[StepDef<S, C>],
    index: &HashMap<&str, usize>,
    start: Option<usize>,
    forks: &[ForkAt<'_, S>],
    v: &mut Vec<Violation>,
) {
    if let Some(fields) = S::fields() {
        for s in steps {
            for w in s.writes.iter().flatten() {
                if !fields.iter().any(|f| f.name == w) {
                    v.push(Violation::UnknownField {
                        step: s.name.clone(),
                        field: w.clone(),
                    });
                }
            }
        }
    }
    for fork in forks {
        match &fork.def.branches {
            BranchesDef::Each { step, input, .. } => {
                let Some(&i) = index.get(step.as_str()) else {
                    continue;
                };
                let takes = steps[i].input;
                if takes.is_none_or(|t| t.id != input.id) {
                    v.push(Violation::InputMismatch {
                        fork: fork.id.clone(),
                        step: step.clone(),
                        sends: input.name.to_string(),
                        takes: takes.map_or("no input".to_string(), |t| format!("`{}`", t.name)),
                    });
                }
            }
            BranchesDef::Static(_) => {
                for &b in &fork.starts {
                    if steps[b].input.is_some() {
                        v.push(Violation::InputStepReached {
                            step: steps[b].name.clone(),
                            from: format!("the fork at `{}` as a branch", fork.id),
                        });
                    }
                }
            }
        }
    }
    if let Some(start) = start
        && steps[start].input.is_some()
    {
        v.push(Violation::InputStepReached {
            step: steps[start].name.clone(),
            from: "the start".into(),
        });
    }
    for s in steps {
        let direct =
            s.on.iter()
                .map(|(sig, d)| (format!("signal `{sig}`"), d))
                .chain(s.next.iter().map(|d| ("next".to_string(), d)));
        for (via, dest) in direct {
            let targets: Vec<&String> = match dest {
                Dest::Step(t) => vec![t],
                Dest::Fork(f) => vec![&f.join],
                Dest::End => vec![],
            };
            for t in targets {
                if let Some(&i) = index.get(t.as_str())
                    && steps[i].input.is_some()
                {
                    v.push(Violation::InputStepReached {
                        step: t.clone(),
                        from: format!("step `{}` on {via}", s.name),
                    });
                }
            }
        }
    }
}

/// What adding a transition's edges needs to know.
struct Edges<'a, S: HarnessState, C> {
    steps: &'a [StepDef<S, C>],
    index: &'a HashMap<&'a str, usize>,
    nodes: &'a [NodeIndex],
    end: NodeIndex,
}

impl<'a, S: HarnessState, C> Edges<'a, S, C> {
    /// An edge from step `i` to the step named `target`, if declared.
    fn to(
        &self,
        graph: &mut DiGraph<(), ()>,
        v: &mut Vec<Violation>,
        i: usize,
        target: &str,
        via: &str,
    ) -> Option<usize> {
        match self.index.get(target) {
            Some(t) => {
                graph.add_edge(self.nodes[i], self.nodes[*t], ());
                Some(*t)
            }
            None => {
                v.push(Violation::UnknownTarget {
                    from: self.steps[i].name.clone(),
                    via: via.to_string(),
                    target: target.to_string(),
                });
                // Taken as a way to the end: whether the step meant can end
                // is unknown, and a `NoWayOut` would only repeat this.
                graph.add_edge(self.nodes[i], self.end, ());
                None
            }
        }
    }

    /// Adds the edges of one transition of step `i`, checking its targets.
    fn add(
        &self,
        graph: &mut DiGraph<(), ()>,
        v: &mut Vec<Violation>,
        forks: &mut Vec<ForkAt<'a, S>>,
        (i, via, id): (usize, &str, &str),
        dest: &'a Dest<S>,
    ) {
        match dest {
            Dest::End => {
                graph.add_edge(self.nodes[i], self.end, ());
            }
            Dest::Step(target) => {
                self.to(graph, v, i, target, via);
            }
            Dest::Fork(fork) => {
                let join = self.to(graph, v, i, &fork.join, &format!("{via} (join)"));
                let names: Vec<&String> = match &fork.branches {
                    BranchesDef::Static(names) => names.iter().collect(),
                    BranchesDef::Each { step, .. } => vec![step],
                };
                let starts: Vec<Option<usize>> = names
                    .iter()
                    .map(|n| self.to(graph, v, i, n, &format!("{via} (branch)")))
                    .collect();
                if names.is_empty() {
                    v.push(Violation::BadFork {
                        fork: id.to_string(),
                        reason: "starts no branch".into(),
                    });
                }
                let distinct: BTreeSet<&&String> = names.iter().collect();
                if distinct.len() < names.len() {
                    v.push(Violation::BadFork {
                        fork: id.to_string(),
                        reason: "names a branch more than once".into(),
                    });
                }
                if names.iter().any(|n| **n == fork.join) {
                    v.push(Violation::BadFork {
                        fork: id.to_string(),
                        reason: format!(
                            "starts a branch at its own join `{}`: the join runs once, after \
                             the branches, and cannot be one of them",
                            fork.join
                        ),
                    });
                }
                if fork.limit == Some(0) {
                    v.push(Violation::InvalidSetting {
                        setting: format!("limit of the fork at `{id}`"),
                        reason: "0: no branch could run".into(),
                    });
                }
                match (&fork.branches, fork.max_branches) {
                    (BranchesDef::Each { .. }, Some(0)) => v.push(Violation::InvalidSetting {
                        setting: format!("max_branches of the fan-out at `{id}`"),
                        reason: "0: any input would fail the run".into(),
                    }),
                    (BranchesDef::Static(_), Some(_)) => v.push(Violation::InvalidSetting {
                        setting: format!("max_branches of the fork at `{id}`"),
                        reason: "a fork's branches are the steps it names: max_branches bounds \
                                 a fan-out's inputs"
                            .into(),
                    }),
                    _ => {}
                }
                if let (Some(join), Some(starts)) =
                    (join, starts.into_iter().collect::<Option<Vec<usize>>>())
                    && !names.is_empty()
                {
                    forks.push(ForkAt {
                        id: id.to_string(),
                        def: fork,
                        starts,
                        join,
                    });
                }
            }
        }
    }
}
