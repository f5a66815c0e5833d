//! Property tests of `ExecutionStateGraph` over random cell sequences and
//! random operations.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};

use harness_code::{
    CellId, CellOutcome, CellRun, CellStatus, ExecutionStateGraph, OutputSummary, Provenance,
    Timestamp,
};
use proptest::collection::vec;
use proptest::prelude::*;

const NAMES: [&str; 5] = ["a", "b", "c", "d", "e"];

#[derive(Debug, Clone)]
struct CellSpec {
    reads: Vec<usize>,
    mutations: Vec<usize>,
    writes: Vec<usize>,
    conditional: Vec<usize>,
    dynamic: bool,
}

impl CellSpec {
    fn source(&self) -> String {
        let mut lines = Vec::new();
        lines.extend(self.reads.iter().map(|&i| format!("sink({})", NAMES[i])));
        lines.extend(
            self.mutations
                .iter()
                .map(|&i| format!("{}.append(0)", NAMES[i])),
        );
        lines.extend(self.writes.iter().map(|&i| format!("{} = 0", NAMES[i])));
        lines.extend(
            self.conditional
                .iter()
                .map(|&i| format!("if cond:\n    {} = 0", NAMES[i])),
        );
        if self.dynamic {
            lines.push("exec('')".to_owned());
        }
        if lines.is_empty() {
            lines.push("pass".to_owned());
        }
        lines.join("\n")
    }
}

fn cell_spec() -> impl Strategy<Value = CellSpec> {
    (
        vec(0..NAMES.len(), 0..3),
        vec(0..NAMES.len(), 0..2),
        vec(0..NAMES.len(), 0..3),
        vec(0..NAMES.len(), 0..2),
        prop::bool::weighted(0.08),
    )
        .prop_map(
            |(reads, mutations, writes, conditional, dynamic)| CellSpec {
                reads,
                mutations,
                writes,
                conditional,
                dynamic,
            },
        )
}

#[derive(Debug, Clone)]
enum Op {
    MarkStale(usize),
    RunOk(usize),
    RunFailed(usize),
    Replace(usize, CellSpec),
    AddEdge(usize, usize),
    ReplayAll,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => any::<usize>().prop_map(Op::MarkStale),
        3 => any::<usize>().prop_map(Op::RunOk),
        1 => any::<usize>().prop_map(Op::RunFailed),
        2 => (any::<usize>(), cell_spec()).prop_map(|(i, s)| Op::Replace(i, s)),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(i, j)| Op::AddEdge(i, j)),
        1 => Just(Op::ReplayAll),
    ]
}

fn provenance(t: u64) -> Provenance {
    Provenance::new("proptest", "generated", Timestamp::from_millis(t))
}

fn ok_run() -> CellRun {
    CellRun::ok(Timestamp::from_millis(1), 1)
}

fn build(specs: &[CellSpec]) -> ExecutionStateGraph {
    let mut graph = ExecutionStateGraph::new();
    for spec in specs {
        graph.add_cell(spec.source(), provenance(0)).unwrap();
    }
    graph
}

fn apply(graph: &mut ExecutionStateGraph, op: &Op, time: u64) {
    let n = graph.len();
    let id = |i: usize| CellId::new(u32::try_from(i % n).unwrap());
    match op {
        Op::MarkStale(i) => {
            graph.mark_stale(id(*i)).unwrap();
        }
        Op::RunOk(i) => {
            graph.record_run(id(*i), ok_run()).unwrap();
        }
        Op::RunFailed(i) => {
            let run = CellRun {
                outcome: CellOutcome::Failed {
                    error: "boom".into(),
                },
                started_at: Timestamp::from_millis(1),
                duration_ms: 1,
                outputs: OutputSummary::default(),
            };
            graph.record_run(id(*i), run).unwrap();
        }
        Op::Replace(i, spec) => {
            graph
                .replace_code(id(*i), spec.source(), provenance(time))
                .unwrap();
        }
        Op::AddEdge(i, j) => {
            let (a, b) = (id(*i), id(*j));
            if a < b {
                graph.add_edge(a, b).unwrap();
            } else {
                assert!(graph.add_edge(a, b).is_err());
            }
        }
        Op::ReplayAll => replay(graph),
    }
}

fn replay(graph: &mut ExecutionStateGraph) {
    for cell in graph.stale_order() {
        graph.record_run(cell, ok_run()).unwrap();
    }
}

fn edges(graph: &ExecutionStateGraph) -> Vec<(CellId, CellId)> {
    graph
        .cells()
        .flat_map(|node| {
            graph
                .dependents(node.id())
                .unwrap()
                .into_iter()
                .map(move |(to, _)| (node.id(), to))
        })
        .collect()
}

fn downstream(graph: &ExecutionStateGraph, cell: CellId) -> BTreeSet<CellId> {
    graph.downstream(cell).unwrap().cells.into_iter().collect()
}

fn is_topological(graph: &ExecutionStateGraph, order: &[CellId]) -> bool {
    let position: BTreeMap<CellId, usize> =
        order.iter().enumerate().map(|(i, s)| (*s, i)).collect();
    edges(graph)
        .iter()
        .all(|(from, to)| match (position.get(from), position.get(to)) {
            (Some(a), Some(b)) => a < b,
            _ => true,
        })
}

/// The producers of each needed name, computed naively from the analyses.
fn expected_dependencies(
    graph: &ExecutionStateGraph,
    cell: CellId,
) -> BTreeMap<CellId, BTreeSet<String>> {
    let nodes: Vec<_> = graph.cells().collect();
    let analysis = nodes[cell.get() as usize].analysis();
    let needed: BTreeSet<&String> = analysis
        .reads
        .iter()
        .chain(&analysis.builtins)
        .chain(&analysis.mutations)
        .collect();
    let mut expected: BTreeMap<CellId, BTreeSet<String>> = BTreeMap::new();
    for name in needed {
        for earlier in nodes[..cell.get() as usize].iter().rev() {
            let a = earlier.analysis();
            let certain = a.definite_writes().any(|w| w == name)
                || a.deletes.contains(name)
                || a.mutations.contains(name);
            let maybe = a.conditional_writes.contains(name) || a.defeats_analysis();
            if certain || maybe {
                expected
                    .entry(earlier.id())
                    .or_default()
                    .insert(name.clone());
            }
            if certain {
                break;
            }
        }
    }
    expected
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn graph_invariants_hold_under_random_operations(
        specs in vec(cell_spec(), 1..10),
        ops in vec(op(), 0..25),
        probe in any::<usize>(),
    ) {
        let mut graph = build(&specs);
        for (t, op) in ops.iter().enumerate() {
            apply(&mut graph, op, t as u64 + 1);

            // Edges always point forward, so cell order is an execution order.
            for (from, to) in edges(&graph) {
                prop_assert!(from < to);
            }

            // The stale order is a topological order of exactly the cells that
            // need to run and everything downstream of them.
            let order = graph.stale_order();
            prop_assert!(is_topological(&graph, &order));
            let mut expected = BTreeSet::new();
            for node in graph.cells() {
                if node.status().needs_run() {
                    expected.extend(downstream(&graph, node.id()));
                }
            }
            prop_assert_eq!(order.iter().copied().collect::<BTreeSet<_>>(), expected);
        }

        // Inferred edges match the naive last-writer rule.
        for node in graph.cells() {
            let expected = expected_dependencies(&graph, node.id());
            let opaque = node.analysis().defeats_analysis();
            for (producer, dependency) in graph.dependencies(node.id()).unwrap() {
                let names = expected.get(&producer).cloned().unwrap_or_default();
                prop_assert_eq!(&dependency.names, &names);
                prop_assert!(!names.is_empty() || opaque || dependency.explicit);
            }
            let actual: BTreeSet<CellId> = graph
                .dependencies(node.id()).unwrap().into_iter().map(|(p, _)| p).collect();
            for producer in expected.keys() {
                prop_assert!(actual.contains(producer));
            }
        }

        // One replay pass reaches a fixed point.
        replay(&mut graph);
        prop_assert!(graph.stale_order().is_empty());
        prop_assert!(graph.cells().all(|n| n.status() == CellStatus::Ok));

        // Marking a cell stale makes exactly it and its downstream stale;
        // replaying them returns to the fixed point, repeatably.
        let cell = CellId::new(u32::try_from(probe % graph.len()).unwrap());
        let down = downstream(&graph, cell);
        for _ in 0..2 {
            let marked: BTreeSet<CellId> = graph.mark_stale(cell).unwrap().into_iter().collect();
            prop_assert_eq!(&marked, &down);
            let order = graph.stale_order();
            prop_assert_eq!(order.iter().copied().collect::<BTreeSet<_>>(), down.clone());
            prop_assert!(is_topological(&graph, &order));
            prop_assert_eq!(graph.replay_order(cell).unwrap(), order.clone());
            let counts: Vec<u32> = graph.cells().map(|n| n.run_count()).collect();
            replay(&mut graph);
            prop_assert!(graph.stale_order().is_empty());
            for (node, before) in graph.cells().zip(counts) {
                let reran = u32::from(down.contains(&node.id()));
                prop_assert_eq!(node.run_count(), before + reran);
            }
        }

        // The replay from any cell covers its downstream, is topological, and
        // adds nothing when everything else is up to date.
        prop_assert_eq!(
            graph.replay_order(cell).unwrap().into_iter().collect::<BTreeSet<_>>(),
            down
        );

        // Serde round trip.
        let json = serde_json::to_value(&graph).unwrap();
        let back: ExecutionStateGraph = serde_json::from_value(json.clone()).unwrap();
        prop_assert_eq!(serde_json::to_value(&back).unwrap(), json);
    }

    #[test]
    fn replay_order_is_minimal_and_topological(
        specs in vec(cell_spec(), 1..10),
        ops in vec(op(), 0..20),
        probe in any::<usize>(),
    ) {
        let mut graph = build(&specs);
        for (t, op) in ops.iter().enumerate() {
            apply(&mut graph, op, t as u64 + 1);
        }
        let cell = CellId::new(u32::try_from(probe % graph.len()).unwrap());
        let order = graph.replay_order(cell).unwrap();
        prop_assert!(is_topological(&graph, &order));
        prop_assert!(order.windows(2).all(|w| w[0] < w[1]));
        let set: BTreeSet<CellId> = order.iter().copied().collect();
        let down = downstream(&graph, cell);
        prop_assert!(set.is_superset(&down));
        // Anything else in the replay is upstream of the downstream set and
        // either out of date itself or downstream of an out-of-date cell.
        let dirty: BTreeSet<CellId> = graph.stale_order().into_iter().collect();
        for extra in set.difference(&down) {
            prop_assert!(dirty.contains(extra));
            let reaches_down = downstream(&graph, *extra).iter().any(|s| down.contains(s));
            prop_assert!(reaches_down);
        }
        // Every out-of-date ancestor of the downstream set is included.
        for member in &down {
            for ancestor in graph.ancestors(*member, None).unwrap() {
                if graph.cell(ancestor).unwrap().status().needs_run() {
                    prop_assert!(set.contains(&ancestor));
                }
            }
        }
    }
}
