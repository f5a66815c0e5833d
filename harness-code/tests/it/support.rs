//! Helpers shared by the graph, diagnosis and patch tests.

#![allow(dead_code, clippy::unwrap_used)] // each file uses what it needs

use harness_code::{ExecutionStateGraph, Provenance, RunRecord, StepId, Timestamp};

/// A graph of `steps`, added in order, and their ids.
pub(crate) fn graph_of(steps: &[&str]) -> (ExecutionStateGraph, Vec<StepId>) {
    let mut graph = ExecutionStateGraph::new();
    let ids = steps
        .iter()
        .map(|source| {
            graph
                .add_step(
                    *source,
                    Provenance::new("test", "step", Timestamp::from_millis(0)),
                )
                .unwrap()
        })
        .collect();
    (graph, ids)
}

/// Records a successful run of every stale step, in replay order.
pub(crate) fn run_all(graph: &mut ExecutionStateGraph) {
    for step in graph.stale_order() {
        graph
            .record_run(step, RunRecord::ok(Timestamp::from_millis(1), 5))
            .unwrap();
    }
}
