//! Helpers shared by the test modules.

#![allow(dead_code, clippy::unwrap_used)] // each file uses what it needs

use harness_code::kernel::KernelConfig;
use harness_code::{CellId, CellRun, ExecutionStateGraph, Provenance, Timestamp};

/// The kernel configuration of the tests: the defaults, with a 20 s
/// timeout per cell.
pub(crate) fn config() -> KernelConfig {
    KernelConfig {
        timeout: Some(std::time::Duration::from_secs(20)),
        ..KernelConfig::default()
    }
}

/// The provenance of a cell the test (its user) wrote.
pub(crate) fn user() -> Provenance {
    Provenance::now("test", "cell")
}

/// A graph of `cells`, added in order, and their ids.
pub(crate) fn graph_of(cells: &[&str]) -> (ExecutionStateGraph, Vec<CellId>) {
    let mut graph = ExecutionStateGraph::new();
    let ids = cells
        .iter()
        .map(|source| {
            graph
                .add_cell(
                    *source,
                    Provenance::new("test", "cell", Timestamp::from_millis(0)),
                )
                .unwrap()
        })
        .collect();
    (graph, ids)
}

/// Records a successful run of every stale cell, in replay order.
pub(crate) fn run_all(graph: &mut ExecutionStateGraph) {
    for cell in graph.stale_order() {
        graph
            .record_run(cell, CellRun::ok(Timestamp::from_millis(1), 5))
            .unwrap();
    }
}

/// Whether process `pid` is gone: no `/proc/<pid>`, or only its zombie
/// (it was killed; whoever it was reparented to has not reaped it yet).
#[cfg(target_os = "linux")]
pub(crate) fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // `pid (comm) S ...`: the state follows the last `)`.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}
