//! The loop as the page draws it: nodes, edges and sub-agent boxes, either
//! declared (read from the validated harness's DOT export) or observed (the
//! transitions, forks, joins and sub-agents a session's records show), and
//! where a run is now.

use harness::TaskPath;
use harness::session::{Checkpoint, CheckpointKind, SessionPhase, StoredRun};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

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
    /// The sub-agents' boxes: one per step that runs a sub-agent.
    pub(crate) clusters: Vec<Cluster>,
}

/// A step, or the start or end (of the loop, or of a sub-agent's loop).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Node {
    /// The step's name; a step of a sub-agent is `sub/step` (`sub` being
    /// the step that runs the sub-agent), as the DOT export names it.
    pub(crate) id: String,
    /// `start`, `end`, `step`, `router` (a step that only routes), or
    /// `sub-agent` (a step that runs a sub-agent).
    pub(crate) kind: &'static str,
    /// What the node shows: the step's own name.
    pub(crate) label: String,
    /// The sub-agent box it is drawn in, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) parent: Option<String>,
}

/// A transition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Edge {
    pub(crate) from: String,
    pub(crate) to: String,
    /// The signal, when the exit is chosen by one; `each` for a fan-out,
    /// `join` for a fork's join.
    pub(crate) label: Option<String>,
    /// `next` (a transition), `branch` (into a parallel branch), `each`
    /// (into a fan-out's branches), `join` (from the forking step to its
    /// join) or `enter` (from a step into its sub-agent's first step).
    pub(crate) kind: &'static str,
}

/// A sub-agent's box.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Cluster {
    /// The step that runs the sub-agent (its node's id).
    pub(crate) id: String,
    pub(crate) label: String,
}

/// Why a DOT text could not be read.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("the harness's DOT export, line {line}: {why}: {text:?}")]
pub(crate) struct DotError {
    line: usize,
    why: &'static str,
    text: String,
}

/// What a step's segment of a path names: `summarize#2` is an instance of
/// `summarize`.
pub(crate) fn segment_step(segment: &str) -> &str {
    match segment.rsplit_once('#') {
        Some((step, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => step,
        _ => segment,
    }
}

impl Graph {
    fn node(&self, id: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// The names a step can be declared by
    /// ([`Studio::expect_answer`](crate::Studio::expect_answer)): each
    /// step's node (`ask`, `review/ask`) and each sub-agent step's own name
    /// (`ask`).
    pub(crate) fn step_names(&self) -> BTreeSet<String> {
        let mut names = BTreeSet::new();
        for n in &self.nodes {
            if matches!(n.kind, "start" | "end") {
                continue;
            }
            names.insert(n.id.clone());
            if n.parent.is_some() {
                names.insert(n.label.clone());
            }
        }
        names
    }

    /// Whether step `step` of the loop runs a sub-agent.
    fn is_sub_agent(&self, step: &str) -> bool {
        self.node(step).is_some_and(|n| n.kind == "sub-agent")
            || self.clusters.iter().any(|c| c.id == step)
    }

    /// The node of step `step` running in task `path`: a step of the
    /// sub-agent the path is inside (the nearest), else a step of the loop.
    /// A step inside a sub-agent whose box does not draw it has no node:
    /// it is never the loop's step of the same name.
    pub(crate) fn node_for(&self, path: &TaskPath, step: &str) -> Option<String> {
        let segments: Vec<&str> = path.segments().collect();
        for seg in segments.iter().rev() {
            let sub = segment_step(seg);
            let id = format!("{sub}/{step}");
            if self
                .node(&id)
                .is_some_and(|n| n.parent.as_deref() == Some(sub))
            {
                return Some(id);
            }
            // A sub-agent's task is named by the step that runs it (no
            // `#n`): a step asked in it is not drawn. (A branch named by
            // its first step, `review#0` or `review`, runs that step.)
            if sub == *seg
                && sub != step
                && self.is_sub_agent(sub)
                && !self.edges.iter().any(|e| e.kind == "branch" && e.to == sub)
            {
                return None;
            }
        }
        self.node(step).map(|n| n.id.clone())
    }

    /// The first step of the sub-agent run by step `sub`, when drawn.
    fn entry_of(&self, sub: &str) -> Option<&str> {
        self.edges
            .iter()
            .find(|e| e.kind == "enter" && e.from == sub)
            .map(|e| e.to.as_str())
    }

    fn add_node(&mut self, id: &str, kind: &'static str, parent: Option<&str>) {
        if let Some(n) = self.nodes.iter_mut().find(|n| n.id == id) {
            // A step seen running a sub-agent is one.
            if kind == "sub-agent" {
                n.kind = kind;
            }
            return;
        }
        let label = match parent {
            Some(p) => id.strip_prefix(&format!("{p}/")).unwrap_or(id),
            None => id,
        };
        let (kind, label) = match label {
            START => ("start", "start"),
            END => ("end", "end"),
            l => (kind, l),
        };
        self.nodes.push(Node {
            id: id.to_owned(),
            kind,
            label: label.to_owned(),
            parent: parent.map(str::to_owned),
        });
    }

    fn add_edge(&mut self, from: &str, to: &str, label: Option<&str>, kind: &'static str) {
        if !self.edges.iter().any(|e| e.from == from && e.to == to) {
            self.edges.push(Edge {
                from: from.to_owned(),
                to: to.to_owned(),
                label: label.map(str::to_owned),
                kind,
            });
        }
    }
}

/// Reads the DOT that [`harness::Harness::to_dot`] writes: `"name"
/// [shape=…];` nodes, `"a" -> "b" [label="…", style=…];` edges, and each
/// sub-agent's loop in a `subgraph "cluster_<step>" { … }`.
pub(crate) fn from_dot(dot: &str) -> Result<Graph, DotError> {
    let mut graph = Graph {
        source: "declared",
        ..Graph::default()
    };
    let mut cluster: Option<String> = None;
    for (n, raw) in dot.lines().enumerate() {
        let line = raw.trim();
        let err = |why| DotError {
            line: n + 1,
            why,
            text: raw.to_owned(),
        };
        if line.is_empty() || line.starts_with("digraph") {
            continue;
        }
        if line == "}" {
            cluster = None;
            continue;
        }
        if let Some(rest) = line.strip_prefix("subgraph ") {
            if cluster.is_some() {
                return Err(err("a sub-agent box inside another"));
            }
            let (name, rest) = quoted(rest).ok_or_else(|| err("expected a quoted box name"))?;
            let step = name
                .strip_prefix("cluster_")
                .ok_or_else(|| err("a box that is not a sub-agent's"))?;
            if rest.trim() != "{" {
                return Err(err("expected `{` after the box's name"));
            }
            graph.clusters.push(Cluster {
                id: step.to_owned(),
                label: format!("{step} (sub-agent)"),
            });
            cluster = Some(step.to_owned());
            continue;
        }
        if let Some(rest) = line.strip_prefix("label=") {
            let (label, _) = quoted(rest).ok_or_else(|| err("a label that does not end"))?;
            let c = cluster
                .as_ref()
                .and_then(|c| graph.clusters.iter_mut().find(|k| &k.id == c))
                .ok_or_else(|| err("a label outside a sub-agent box"))?;
            c.label = label;
            continue;
        }
        let (first, rest) = quoted(line).ok_or_else(|| err("expected a quoted name"))?;
        let rest = rest.trim_start();
        let label = match attr(rest, "label") {
            Some(Ok(l)) => Some(l),
            Some(Err(())) => return Err(err("a label that does not end")),
            None => None,
        };
        if let Some(after_arrow) = rest.strip_prefix("->") {
            let (second, rest) =
                quoted(after_arrow.trim_start()).ok_or_else(|| err("expected a quoted target"))?;
            let label = match attr(rest, "label") {
                Some(Ok(l)) => Some(l),
                Some(Err(())) => return Err(err("a label that does not end")),
                None => None,
            };
            let kind = match style(rest) {
                None => "next",
                Some("bold") if rest.contains("penwidth") => "each",
                Some("bold") => "branch",
                Some("dashed") => "join",
                Some("dotted") => "enter",
                Some(_) => return Err(err("an edge style the export does not write")),
            };
            graph.edges.push(Edge {
                from: first,
                to: second,
                label,
                kind,
            });
        } else {
            if !rest.starts_with('[') {
                return Err(err("expected `->` or `[` after the name"));
            }
            if let Some(c) = &cluster
                && !first.starts_with(&format!("{c}/"))
            {
                return Err(err("a node of a sub-agent box not named `<step>/…`"));
            }
            let kind = if first == START || (cluster.is_some() && first.ends_with("/$end")) {
                if first == START { "start" } else { "end" }
            } else if first == END {
                "end"
            } else if rest.contains("shape=diamond") {
                "router"
            } else if rest.contains("peripheries=2") {
                "sub-agent"
            } else {
                "step"
            };
            let label = match (label, kind) {
                (_, "start") => "start".to_owned(),
                (_, "end") => "end".to_owned(),
                (Some(l), _) => l,
                (None, _) => first.clone(),
            };
            graph.nodes.push(Node {
                id: first,
                kind,
                label,
                parent: cluster.clone(),
            });
        }
    }
    for e in &graph.edges {
        for end in [&e.from, &e.to] {
            if graph.node(end).is_none() {
                return Err(DotError {
                    line: 0,
                    why: "an edge names a node that is not declared",
                    text: end.clone(),
                });
            }
        }
    }
    for c in &graph.clusters {
        // A step that dispatches to sub-agents by role has a box per role,
        // `<step>:<role>`.
        let declared = graph.node(&c.id).is_some()
            || c.id
                .match_indices(':')
                .any(|(i, _)| graph.node(&c.id[..i]).is_some());
        if !declared {
            return Err(DotError {
                line: 0,
                why: "a sub-agent box of a step that is not declared",
                text: c.id.clone(),
            });
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
    let at = s.find(&format!("{name}=\""))?;
    Some(quoted(&s[at + name.len() + 1..]).map(|(v, _)| v).ok_or(()))
}

/// The value of `style=…` (unquoted) in an attribute list.
fn style(s: &str) -> Option<&str> {
    let at = s.find("style=")?;
    let v = &s[at + "style=".len()..];
    let end = v.find([',', ']', ' ']).unwrap_or(v.len());
    Some(&v[..end])
}

/// Where a run is: a task and the step it runs or waits on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Position {
    /// The task: `""` for the run's own loop, a branch (`square#1`), a
    /// sub-agent (`review`).
    pub(crate) path: TaskPath,
    pub(crate) step: String,
    /// Its node in the graph, when drawn.
    pub(crate) node: Option<String>,
    /// Whether it waits for a human.
    pub(crate) waiting: bool,
}

/// Marks the tasks a record starts, moves or ends.
fn track(tasks: &mut BTreeMap<TaskPath, Option<String>>, kind: &CheckpointKind) {
    match kind {
        CheckpointKind::Fork(f) => {
            for b in &f.branches {
                tasks.insert(b.path.clone(), Some(b.step.clone()));
            }
        }
        CheckpointKind::Branch(b) => {
            tasks.insert(b.path.clone(), b.next.clone());
        }
        CheckpointKind::Join(j) => {
            tasks.retain(|p, _| !j.branches.iter().any(|b| p.starts_with(b)));
        }
        CheckpointKind::Child(c) => match &*c.record {
            CheckpointKind::Update(_) if c.signal.is_some() => {
                tasks.retain(|p, _| !p.starts_with(&c.path));
            }
            CheckpointKind::Update(_) => {
                tasks.insert(c.path.clone(), c.next.clone());
            }
            inner => track(tasks, inner),
        },
        CheckpointKind::Snapshot(_) | CheckpointKind::Update(_) => {}
    }
}

/// The steps running or waiting now, in every task: the loop's next step
/// (unless it waits for its branches), each branch's and each sub-agent's
/// next step (a sub-agent that has recorded nothing yet at its first
/// step, when `graph` draws it), and the step the interrupt asks from.
pub(crate) fn positions(head: &StoredRun, log: &[Checkpoint], graph: &Graph) -> Vec<Position> {
    let interrupt = match &head.phase {
        SessionPhase::Running => None,
        SessionPhase::Interrupted { interrupt } => Some(interrupt),
        _ => return Vec::new(),
    };
    let mut tasks: BTreeMap<TaskPath, Option<String>> = BTreeMap::new();
    for cp in log {
        track(&mut tasks, &cp.kind);
    }
    let root = TaskPath::root();
    let forked = log.iter().rev().find_map(|cp| match &cp.kind {
        CheckpointKind::Fork(f) if f.path.is_root() => Some(true),
        CheckpointKind::Join(j) if j.path.is_root() => Some(false),
        CheckpointKind::Update(_) => Some(false),
        _ => None,
    });
    if forked != Some(true) {
        tasks.insert(root, head.next_step.clone());
    }
    let mut out: Vec<(TaskPath, String)> = tasks
        .into_iter()
        .filter_map(|(p, s)| Some((p, s?)))
        .collect();
    // A sub-agent at its step that has recorded nothing yet is at its
    // first step.
    let mut more = Vec::new();
    for (path, step) in &out {
        let Some(node) = graph.node_for(path, step) else {
            continue;
        };
        let inner = path.child(step);
        if graph.node(&node).is_some_and(|n| n.kind == "sub-agent")
            && !out.iter().any(|(p, _)| p.starts_with(&inner))
            && let Some(entry) = graph.entry_of(&node).and_then(|e| graph.node(e))
        {
            more.push((inner, entry.label.clone()));
        }
    }
    out.extend(more);
    if let Some(i) = interrupt
        && !out.iter().any(|(p, s)| *p == i.path && *s == i.step)
    {
        out.push((i.path.clone(), i.step.clone()));
    }
    out.into_iter()
        .map(|(path, step)| Position {
            node: graph.node_for(&path, &step),
            waiting: interrupt.is_some_and(|i| i.path == path && i.step == step),
            path,
            step,
        })
        .collect()
}

/// What reading a log for its graph keeps track of.
#[derive(Default)]
struct Walk {
    graph: Graph,
    /// The node each task last ran; none for a task just forked (its first
    /// step is drawn by the fork's edge) or a sub-agent not under way.
    last: BTreeMap<TaskPath, String>,
    /// Branches whose first step the fork's edge already draws.
    fresh: BTreeSet<TaskPath>,
    /// The join node each branch goes to.
    joins: BTreeMap<TaskPath, String>,
}

impl Walk {
    /// The node of `step` in the loop (`sub` `None`) or in the sub-agent
    /// run by step `sub`.
    fn node(&mut self, sub: Option<&str>, step: &str) -> String {
        match sub {
            None => {
                self.graph.add_node(step, "step", None);
                step.to_owned()
            }
            Some(sub) => {
                let id = format!("{sub}/{step}");
                self.graph.add_node(&id, "step", Some(sub));
                id
            }
        }
    }

    /// A step of task `path` ran (or runs): the edge from the task's last
    /// step to it.
    fn visit(&mut self, path: &TaskPath, node: &str, sub: Option<&str>) {
        if self.fresh.remove(path) {
            self.last.insert(path.clone(), node.to_owned());
            return;
        }
        match (self.last.get(path).cloned(), sub) {
            (Some(last), _) => self.graph.add_edge(&last, node, None, "next"),
            (None, Some(sub)) => self.graph.add_edge(sub, node, None, "enter"),
            (None, None) if path.is_root() => self.graph.add_edge(START, node, None, "next"),
            (None, None) => {}
        }
        self.last.insert(path.clone(), node.to_owned());
    }

    /// One record, of the loop (`sub` `None`) or of the sub-agent run by
    /// step `sub`; `path` is the sub-agent's.
    fn record(&mut self, step: &str, kind: &CheckpointKind, sub: Option<(&str, &TaskPath)>) {
        let in_sub = sub.map(|(s, _)| s);
        match kind {
            CheckpointKind::Snapshot(_) => {}
            CheckpointKind::Update(_) => {
                let root = TaskPath::root();
                let path = sub.map_or(&root, |(_, p)| p);
                if step == "$input" && sub.is_none() {
                    self.last.remove(path);
                    return;
                }
                let node = self.node(in_sub, step);
                self.visit(path, &node, in_sub);
            }
            CheckpointKind::Fork(f) => {
                let from = self.node(in_sub, step);
                let join = self.node(in_sub, &f.join);
                for b in &f.branches {
                    let to = self.node(in_sub, &b.step);
                    let (label, kind) = match b.input {
                        Some(_) => (Some("each"), "each"),
                        None => (None, "branch"),
                    };
                    self.graph.add_edge(&from, &to, label, kind);
                    self.fresh.insert(b.path.clone());
                    self.last.remove(&b.path);
                    self.joins.insert(b.path.clone(), join.clone());
                }
                self.graph.add_edge(&from, &join, Some("join"), "join");
                // The join runs next in the task that forked.
                let path = if f.path.is_root() {
                    sub.map_or_else(TaskPath::root, |(_, p)| p.clone())
                } else {
                    f.path.clone()
                };
                self.last.insert(path, from);
            }
            CheckpointKind::Branch(b) => {
                let node = self.node(in_sub, step);
                self.visit(&b.path, &node, None);
                if b.next.is_none()
                    && let Some(join) = self.joins.get(&b.path).cloned()
                {
                    self.graph.add_edge(&node, &join, None, "next");
                }
            }
            CheckpointKind::Join(_) => {}
            CheckpointKind::Child(c) => {
                let name = c.path.segments().last().map_or("", segment_step).to_owned();
                self.graph.add_node(&name, "sub-agent", None);
                if !self.graph.clusters.iter().any(|k| k.id == name) {
                    self.graph.clusters.push(Cluster {
                        id: name.clone(),
                        label: format!("{name} (sub-agent)"),
                    });
                }
                self.record(step, &c.record, Some((&name, &c.path)));
                if let Some(signal) = &c.signal {
                    let node = self.node(Some(&name), step);
                    let end = self.node(Some(&name), END);
                    let label = signal.to_string();
                    let label = (label != END).then_some(label.as_str());
                    self.graph.add_edge(&node, &end, label, "next");
                    self.last.retain(|p, _| !p.starts_with(&c.path));
                }
            }
        }
    }
}

/// The graph a session's log shows: `$start` to the first step, each step
/// to the next, forks to their branches (`each` for a fan-out) and to
/// their join, each sub-agent's steps in its box, and the last steps to
/// the steps running or waiting now (or to `$end` when the session is
/// done). A run input (`$input`) starts a new run, from the start step.
pub(crate) fn observed(head: &StoredRun, log: &[Checkpoint]) -> Graph {
    let mut walk = Walk {
        graph: Graph {
            source: "observed",
            ..Graph::default()
        },
        ..Walk::default()
    };
    walk.graph.add_node(START, "start", None);
    for cp in log {
        walk.record(&cp.step, &cp.kind, None);
    }
    let root = TaskPath::root();
    if let SessionPhase::Completed { .. } = head.phase {
        if let Some(last) = walk.last.get(&root).cloned() {
            walk.graph.add_node(END, "end", None);
            walk.graph.add_edge(&last, END, None, "next");
        }
        return walk.graph;
    }
    // A step under way inside a sub-agent that has recorded nothing yet (a
    // sub-agent's first step asking a human): the step that runs it is
    // one, and the step is in its box, never the loop's step so named.
    let branches = branch_paths(log);
    for p in positions(head, log, &walk.graph) {
        if let Some(sub) = sub_agent_of(&p.path, &branches) {
            walk.graph.add_node(sub, "sub-agent", None);
            if !walk.graph.clusters.iter().any(|k| k.id == sub) {
                walk.graph.clusters.push(Cluster {
                    id: sub.to_owned(),
                    label: format!("{sub} (sub-agent)"),
                });
            }
        }
    }
    // The steps under way, from the last step of their task.
    let mut sofar = walk.graph.clone();
    for p in positions(head, log, &sofar) {
        let node = match p.node {
            Some(node) => node,
            None => {
                let segments: Vec<&str> = p.path.segments().map(segment_step).collect();
                let sub = segments
                    .into_iter()
                    .rev()
                    .find(|s| sofar.clusters.iter().any(|c| c.id == *s));
                walk.node(sub, &p.step)
            }
        };
        match walk.last.get(&p.path).cloned() {
            Some(last) if last != node => walk.graph.add_edge(&last, &node, None, "next"),
            Some(_) => {}
            None if p.path.is_root() => walk.graph.add_edge(START, &node, None, "next"),
            None => {
                // A sub-agent's first step: entered from the step running it.
                if let Some(sub) = sub_agent_of(&p.path, &branches)
                    && node.starts_with(&format!("{sub}/"))
                {
                    walk.graph.add_edge(sub, &node, None, "enter");
                }
            }
        }
        sofar = walk.graph.clone();
    }
    walk.graph
}

/// The paths of the branches a log's forks started (in the loop or in a
/// sub-agent).
fn branch_paths(log: &[Checkpoint]) -> BTreeSet<TaskPath> {
    fn of(kind: &CheckpointKind, out: &mut BTreeSet<TaskPath>) {
        match kind {
            CheckpointKind::Fork(f) => out.extend(f.branches.iter().map(|b| b.path.clone())),
            CheckpointKind::Child(c) => of(&c.record, out),
            _ => {}
        }
    }
    let mut out = BTreeSet::new();
    for cp in log {
        of(&cp.kind, &mut out);
    }
    out
}

/// The step of the loop whose sub-agent task `path` is, when `path` is a
/// sub-agent's run by a step of the loop or of one of its branches (not a
/// branch, and not deeper: the observed graph draws one level of boxes).
fn sub_agent_of<'p>(path: &'p TaskPath, branches: &BTreeSet<TaskPath>) -> Option<&'p str> {
    if path.is_root() || branches.contains(path) {
        return None;
    }
    let segments: Vec<&str> = path.segments().collect();
    let (last, outer) = segments.split_last()?;
    // Its task is the loop's, or a branch of it.
    let parent = TaskPath::from(outer.join("/").as_str());
    (outer.is_empty() || branches.contains(&parent)).then_some(*last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_that_dispatches_by_role_reads_back_with_a_box_per_role() {
        use harness::{Dispatch, Harness, HarnessState, SubAgent};
        use std::sync::Arc;
        #[derive(
            Clone, Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema, HarnessState,
        )]
        struct Board {
            #[field(reduce = append)]
            items: Vec<String>,
        }
        let child = |name: &'static str| {
            Harness::<Board>::builder()
                .step(name)
                .run(async |_: Arc<Board>| Ok(BoardUpdate::new()))
                .end()
                .start(name)
                .build()
                .expect("a child loop")
        };
        let each = |h: &Harness<Board>| {
            SubAgent::each(
                h,
                |_: &Board, _: &String| Board::default(),
                |_: &Board, _: &String, _| BoardUpdate::new(),
            )
        };
        let (shout, count) = (child("shout"), child("count"));
        let h = Harness::<Board>::builder()
            .step("plan")
            .run(async |_: Arc<Board>| Ok(BoardUpdate::new()))
            .fan_out("job", |b: &Board| b.items.clone())
            .join("done")
            .step("job")
            .dispatch(
                Dispatch::by(|s: &String| s.clone())
                    .agent("a:loud", each(&shout))
                    .agent("count", each(&count)),
            )
            .writes(["items"])
            .next("done")
            .step("done")
            .run(async |_: Arc<Board>| Ok(BoardUpdate::new()))
            .end()
            .start("plan")
            .build()
            .expect("the loop");
        let g = from_dot(&h.to_dot()).expect("reads");
        let boxes: Vec<&str> = g.clusters.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(boxes, ["job:a:loud", "job:count"]);
        assert!(
            g.node("job:count/count")
                .is_some_and(|n| n.parent.as_deref() == Some("job:count"))
        );
        assert!(
            g.edges
                .iter()
                .any(|e| e.from == "job" && e.to == "job:a:loud/shout" && e.kind == "enter")
        );
        // A box of no declared step is still refused.
        let orphan = h
            .to_dot()
            .replace("\"job\" [shape=box, peripheries=2];", "");
        assert!(from_dot(&orphan).is_err());
    }

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
        assert!(g.edges.iter().all(|e| e.kind == "next"));
        assert!(g.clusters.is_empty());
    }

    const COMPOSED: &str = r#"digraph harness {
    "$start" [shape=circle, label="start"];
    "$end" [shape=doublecircle, label="end"];
    "plan" [shape=box];
    "left" [shape=box];
    "merge" [shape=box];
    "square" [shape=box];
    "review" [shape=box, peripheries=2];
    subgraph "cluster_review" {
        label="review (sub-agent)";
        "review/note" [shape=box, label="note"];
        "review/$end" [shape=doublecircle, label="end"];
        "review/note" -> "review/$end" [label="ok"];
    }
    "review" -> "review/note" [style=dotted];
    "$start" -> "plan";
    "plan" -> "left" [style=bold];
    "plan" -> "merge" [label="join", style=dashed];
    "left" -> "merge";
    "merge" -> "square" [label="each, 2 at once", style=bold, penwidth=2];
    "square" -> "review";
    "review" -> "$end";
}
"#;

    #[test]
    fn forks_joins_fan_outs_and_sub_agent_boxes_read_back() {
        let g = from_dot(COMPOSED).expect("reads");
        let kind = |from: &str, to: &str| {
            let e = g
                .edges
                .iter()
                .find(|e| e.from == from && e.to == to)
                .expect(to);
            (e.kind, e.label.clone())
        };
        assert_eq!(kind("plan", "left"), ("branch", None));
        assert_eq!(kind("plan", "merge"), ("join", Some("join".into())));
        assert_eq!(
            kind("merge", "square"),
            ("each", Some("each, 2 at once".into()))
        );
        assert_eq!(kind("review", "review/note"), ("enter", None));
        assert_eq!(kind("left", "merge"), ("next", None));
        assert_eq!(
            g.clusters,
            [Cluster {
                id: "review".into(),
                label: "review (sub-agent)".into()
            }]
        );
        let node = |id: &str| g.nodes.iter().find(|n| n.id == id).expect(id).clone();
        assert_eq!(node("review").kind, "sub-agent");
        let note = node("review/note");
        assert_eq!(
            (note.kind, note.label.as_str(), note.parent.as_deref()),
            ("step", "note", Some("review"))
        );
        let end = node("review/$end");
        assert_eq!((end.kind, end.parent.as_deref()), ("end", Some("review")));
        assert_eq!(node("plan").parent, None);
        // A step is found by its task's path.
        for (path, step, node) in [
            ("", "plan", Some("plan")),
            ("square#1", "square", Some("square")),
            ("review", "note", Some("review/note")),
            ("left/review", "note", Some("review/note")),
            ("review/x#0", "note", Some("review/note")),
            ("review", "review", Some("review")),
            ("", "nowhere", None),
        ] {
            assert_eq!(
                g.node_for(&TaskPath::from(path), step).as_deref(),
                node,
                "{path} {step}"
            );
        }
        assert_eq!(g.entry_of("review"), Some("review/note"));
    }

    #[test]
    fn dot_that_is_not_the_export_is_refused_with_its_line() {
        for (dot, line) in [
            ("digraph h {\n  a -> b;\n}\n", 2),
            ("digraph h {\n  \"a\" -> b;\n}\n", 2),
            ("  \"a\" [shape=box];\n  \"unterminated", 2),
            ("\"a\" -> \"b\" [label=\"open];", 1),
            ("\"a\" [shape=box];\n\"a\" -> \"a\" [style=wavy];", 2),
            ("subgraph \"cluster_a\" {\n  subgraph \"cluster_b\" {", 2),
            ("subgraph \"other\" {", 1),
            ("subgraph cluster_a {", 1),
            ("subgraph \"cluster_a\" [", 1),
            ("label=\"loose\";", 1),
            ("subgraph \"cluster_a\" {\n  \"b/x\" [shape=box];", 2),
            ("\"a\" shape=box;", 1),
        ] {
            let e = from_dot(dot).expect_err(dot);
            assert_eq!(e.line, line, "{dot}: {e}");
            assert!(e.to_string().contains("DOT export"), "{e}");
        }
        let e = from_dot("\"a\" [shape=box];\n\"a\" -> \"b\";").expect_err("undeclared");
        assert!(e.to_string().contains("not declared"), "{e}");
        let e = from_dot("subgraph \"cluster_a\" {\n\"a/x\" [shape=box];\n}").expect_err("no step");
        assert!(e.to_string().contains("sub-agent box of a step"), "{e}");
    }

    fn head(phase: serde_json::Value, next: &str) -> StoredRun {
        serde_json::from_value(serde_json::json!({
            "schema_version": 1, "session_id": "s", "agent_id": "a", "run_id": "r",
            "phase": phase, "next_step": next, "steps": 1,
            "journal": {"responses": [], "once": {}}, "version": 1, "lease": null,
            "snapshot_seq": 0, "snapshot_index": 0, "last_seq": 1,
            "created_at": 0, "updated_at": 0
        }))
        .expect("a head")
    }

    fn record(seq: u64, step: &str, kind: serde_json::Value) -> Checkpoint {
        serde_json::from_value(serde_json::json!({
            "seq": seq, "index": seq, "step": step, "time": 0, "kind": kind
        }))
        .expect("a checkpoint")
    }

    #[test]
    fn a_running_fork_inside_a_sub_agent_is_observed_with_its_steps_under_way() {
        use serde_json::json;
        let log = [
            record(0, "$start", json!({"kind": "snapshot", "value": {}})),
            record(1, "plan", json!({"kind": "update", "value": {}})),
            record(
                2,
                "note",
                json!({"kind": "child", "value": {"path": "review", "next": "split",
                "record": {"kind": "update", "value": {}}}}),
            ),
            record(
                3,
                "split",
                json!({"kind": "child", "value": {"path": "review",
                "record": {"kind": "update", "value": {}}}}),
            ),
            record(
                4,
                "split",
                json!({"kind": "child", "value": {"path": "review",
                "record": {"kind": "fork", "value": {"path": "review", "fork": "split", "join": "merge",
                    "branches": [{"path": "review/x", "step": "x"}, {"path": "review/y", "step": "y"}]}}}}),
            ),
            record(
                5,
                "x",
                json!({"kind": "child", "value": {"path": "review",
                "record": {"kind": "branch", "value": {"path": "review/x", "update": {}, "next": "x2"}}}}),
            ),
        ];
        let h = head(json!({"phase": "running"}), "review");
        let g = observed(&h, &log);
        let kind = |from: &str, to: &str| {
            g.edges
                .iter()
                .find(|e| e.from == from && e.to == to)
                .map(|e| e.kind)
        };
        assert_eq!(kind("$start", "plan"), Some("next"));
        assert_eq!(
            kind("plan", "review"),
            Some("next"),
            "to the step under way"
        );
        assert_eq!(kind("review", "review/note"), Some("enter"));
        assert_eq!(kind("review/note", "review/split"), Some("next"));
        assert_eq!(kind("review/split", "review/x"), Some("branch"));
        assert_eq!(kind("review/split", "review/y"), Some("branch"));
        assert_eq!(kind("review/split", "review/merge"), Some("join"));
        assert_eq!(kind("review/x", "review/x2"), Some("next"), "{g:?}");
        assert_eq!(g.clusters.len(), 1);
        let under_way: Vec<(String, String, Option<String>)> = positions(&h, &log, &g)
            .into_iter()
            .map(|p| (p.path.to_string(), p.step, p.node))
            .collect();
        assert_eq!(
            under_way,
            [
                ("(root)".into(), "review".into(), Some("review".into())),
                ("review/x".into(), "x2".into(), Some("review/x2".into())),
                ("review/y".into(), "y".into(), Some("review/y".into())),
            ]
        );
        // Done: nothing under way, and the loop's end drawn.
        let done = head(json!({"phase": "completed", "signal": "$end"}), "review");
        assert!(positions(&done, &log, &g).is_empty());
        let g = observed(&done, &log[..2]);
        assert!(g.edges.iter().any(|e| e.from == "plan" && e.to == END));
    }

    #[test]
    fn a_sub_agent_asking_before_its_first_record_is_not_the_loop_s_step_so_named() {
        use serde_json::json;
        // `work`, then `sub` (a sub-agent whose first step, `ask`, asks at
        // once: it has recorded nothing), then the loop's own `ask`.
        let log = [
            record(0, "$start", json!({"kind": "snapshot", "value": {}})),
            record(1, "work", json!({"kind": "update", "value": {}})),
        ];
        let h = head(
            json!({"phase": "interrupted", "interrupt":
                {"id": "i1", "step": "ask", "path": "sub", "payload": "proceed?"}}),
            "sub",
        );
        let g = observed(&h, &log);
        assert!(
            g.node("ask").is_none(),
            "the loop's `ask` has not run: {g:?}"
        );
        assert_eq!(g.node("sub").map(|n| n.kind), Some("sub-agent"));
        assert_eq!(
            g.node("sub/ask").and_then(|n| n.parent.as_deref()),
            Some("sub")
        );
        assert!(g.clusters.iter().any(|c| c.id == "sub"));
        assert!(
            g.edges
                .iter()
                .any(|e| e.from == "sub" && e.to == "sub/ask" && e.kind == "enter"),
            "{g:?}"
        );
        let waiting: Vec<(String, String, Option<String>)> = positions(&h, &log, &g)
            .into_iter()
            .filter(|p| p.waiting)
            .map(|p| (p.path.to_string(), p.step, p.node))
            .collect();
        assert_eq!(
            waiting,
            [("sub".into(), "ask".into(), Some("sub/ask".into()))]
        );
        assert_eq!(
            g.node_for(&TaskPath::from("sub"), "ask").as_deref(),
            Some("sub/ask")
        );

        // A declared graph whose sub-agent box does not draw the step asked
        // in it: no node, never the loop's step of that name.
        let mut declared = from_dot(COMPOSED).expect("reads");
        declared.nodes.push(Node {
            id: "ask".into(),
            kind: "step",
            label: "ask".into(),
            parent: None,
        });
        assert_eq!(declared.node_for(&TaskPath::from("review"), "ask"), None);
        assert_eq!(
            declared.node_for(&TaskPath::root(), "ask").as_deref(),
            Some("ask")
        );
        // A branch is not a sub-agent: its steps are the loop's.
        assert_eq!(
            declared
                .node_for(&TaskPath::from("left"), "merge")
                .as_deref(),
            Some("merge")
        );
    }
}
