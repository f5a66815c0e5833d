//! Behaviour of `ExecutionStateGraph`: edge inference, ancestry, staleness,
//! replay, runs, versions, serialisation.

#![allow(clippy::unwrap_used)]

use crate::support::{graph_of, run_all};

use std::collections::BTreeMap;

use harness_code::{
    AnalysisError, CellId, CellOutcome, CellRun, CellStatus, ExecutionStateGraph, GraphError,
    MAX_RUN_HISTORY, OutputSummary, Provenance, Timestamp,
};

fn at(ms: u64) -> Provenance {
    Provenance::new("test", "cell", Timestamp::from_millis(ms))
}

/// `consumer`'s dependencies as (producer, names).
fn deps(graph: &ExecutionStateGraph, consumer: CellId) -> Vec<(u32, Vec<String>)> {
    graph
        .dependencies(consumer)
        .unwrap()
        .into_iter()
        .map(|(id, dep)| (id.get(), dep.names.iter().cloned().collect()))
        .collect()
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|n| (*n).to_owned()).collect()
}

fn ids(list: &[u32]) -> Vec<CellId> {
    list.iter().copied().map(CellId::new).collect()
}

#[test]
fn reads_depend_on_last_writer() {
    let (graph, s) = graph_of(&[
        "import pandas as pd\nlimit = 3",
        "df = pd.read_csv('f.csv')",
        "df = df[df.x > limit]",
        "n = len(df)",
    ]);
    assert_eq!(deps(&graph, s[0]), []);
    assert_eq!(deps(&graph, s[1]), [(0, names(&["pd"]))]);
    assert_eq!(
        deps(&graph, s[2]),
        [(0, names(&["limit"])), (1, names(&["df"]))]
    );
    assert_eq!(deps(&graph, s[3]), [(2, names(&["df"]))]);
}

#[test]
fn redefinition_in_a_later_cell_is_normal() {
    let (graph, s) = graph_of(&["x = 1", "x = 2", "y = x"]);
    assert_eq!(deps(&graph, s[1]), []);
    assert_eq!(deps(&graph, s[2]), [(1, names(&["x"]))]);
}

#[test]
fn mutation_is_a_producer_and_depends_on_previous_writer() {
    let (graph, s) = graph_of(&["xs = []", "xs.append(1)", "total = sum(xs)"]);
    assert_eq!(deps(&graph, s[1]), [(0, names(&["xs"]))]);
    assert_eq!(deps(&graph, s[2]), [(1, names(&["xs"]))]);
    assert_eq!(graph.ancestors(s[2], None).unwrap(), ids(&[0, 1]));
}

#[test]
fn conditional_writer_keeps_earlier_producer() {
    let (graph, s) = graph_of(&["x = 1", "if flag:\n    x = 2", "print(x)"]);
    assert_eq!(deps(&graph, s[2]), [(0, names(&["x"])), (1, names(&["x"]))]);
}

#[test]
fn builtins_depend_only_on_cells_that_shadow_them() {
    let (graph, s) = graph_of(&["a = 1", "print(len([a]))"]);
    assert_eq!(deps(&graph, s[1]), [(0, names(&["a"]))]);
    let (graph, s) = graph_of(&["len = 3", "print(len)"]);
    assert_eq!(deps(&graph, s[1]), [(0, names(&["len"]))]);
}

#[test]
fn mutations_of_imported_modules_are_not_data_flow() {
    let (graph, s) = graph_of(&[
        "import pandas as pd",
        "pd.options.display.max_rows = 5",
        "df = pd.DataFrame()",
    ]);
    assert_eq!(deps(&graph, s[1]), [(0, names(&["pd"]))]);
    assert_eq!(deps(&graph, s[2]), [(0, names(&["pd"]))]);
}

#[test]
fn calling_a_function_inherits_its_effects() {
    let (graph, s) = graph_of(&[
        "log = []",
        "def add(v):\n    log.append(v)",
        "add(1)",
        "print(log)",
    ]);
    assert_eq!(deps(&graph, s[2]), [(1, names(&["add", "log"]))]);
    assert_eq!(deps(&graph, s[3]), [(2, names(&["log"]))]);
    assert_eq!(graph.ancestors(s[3], None).unwrap(), ids(&[0, 1, 2]));
    let effects = graph.cell(s[2]).unwrap().effects();
    assert!(effects.via_calls.contains("log"));
}

#[test]
fn cell_that_defeats_analysis_depends_on_everything_and_may_produce_anything() {
    let (graph, s) = graph_of(&["a = 1", "b = 2", "exec(code)", "print(a)"]);
    let dependencies = graph.dependencies(s[2]).unwrap();
    assert_eq!(dependencies.len(), 2);
    assert!(dependencies.iter().all(|(_, d)| d.conservative));
    // `exec` could bind any name, even shadow the builtin `print`.
    assert_eq!(
        deps(&graph, s[3]),
        [(0, names(&["a"])), (2, names(&["a", "print"]))]
    );
    assert!(graph.cell(s[2]).unwrap().effects().opaque);
}

#[test]
fn ancestors_restricted_to_producers_of_names() {
    let (graph, s) = graph_of(&["a = 1", "b = 2", "base = 0", "c = a + base", "d = c + b"]);
    assert_eq!(
        graph.ancestors(s[4], Some(&["c"])).unwrap(),
        ids(&[0, 2, 3])
    );
    assert_eq!(graph.ancestors(s[4], Some(&["b"])).unwrap(), ids(&[1]));
    assert_eq!(graph.ancestors(s[4], None).unwrap(), ids(&[0, 1, 2, 3]));
    assert_eq!(graph.ancestors(s[4], Some(&["zzz"])).unwrap(), []);
}

#[test]
fn downstream_subgraph() {
    let (graph, s) = graph_of(&["a = 1", "b = a", "c = 1", "d = b + c"]);
    let sub = graph.downstream(s[0]).unwrap();
    assert_eq!(sub.cells, ids(&[0, 1, 3]));
    let edges: Vec<_> = sub
        .edges
        .iter()
        .map(|e| (e.from.get(), e.to.get()))
        .collect();
    assert_eq!(edges, [(0, 1), (1, 3)]);
    assert_eq!(graph.dependents(s[2]).unwrap()[0].0, s[3]);
}

#[test]
fn stale_marking_and_replay_order() {
    let (mut graph, s) = graph_of(&["a = 1", "b = a", "c = 1", "d = b + c"]);
    assert_eq!(graph.stale_order(), ids(&[0, 1, 2, 3]));
    run_all(&mut graph);
    assert_eq!(graph.stale_order(), []);
    assert_eq!(graph.mark_stale(s[1]).unwrap(), ids(&[1, 3]));
    assert_eq!(graph.cell(s[0]).unwrap().status(), CellStatus::Ok);
    assert_eq!(graph.cell(s[1]).unwrap().status(), CellStatus::Stale);
    assert_eq!(graph.stale_order(), ids(&[1, 3]));
    assert_eq!(graph.replay_order(s[1]).unwrap(), ids(&[1, 3]));
    run_all(&mut graph);
    assert_eq!(graph.replay_order(s[2]).unwrap(), ids(&[2, 3]));
}

#[test]
fn replay_order_pulls_in_out_of_date_ancestors() {
    let (mut graph, s) = graph_of(&["a = 1", "b = a", "c = b", "x = 0"]);
    run_all(&mut graph);
    let failed = CellRun {
        outcome: CellOutcome::Failed {
            error: "ZeroDivisionError".into(),
        },
        started_at: Timestamp::from_millis(2),
        duration_ms: 1,
        outputs: OutputSummary::default(),
    };
    // Re-running `a` and failing makes `b` and `c` stale.
    assert_eq!(graph.record_run(s[0], failed).unwrap(), ids(&[1, 2]));
    assert_eq!(graph.cell(s[0]).unwrap().error(), Some("ZeroDivisionError"));
    assert_eq!(graph.replay_order(s[2]).unwrap(), ids(&[0, 1, 2]));
    // A cell that ran while its input was out of date still needs a rerun.
    graph
        .record_run(s[2], CellRun::ok(Timestamp::from_millis(3), 1))
        .unwrap();
    assert_eq!(graph.stale_order(), ids(&[0, 1, 2]));
}

#[test]
fn record_run_tracks_count_timings_and_outputs() {
    let (mut graph, s) = graph_of(&["a = 1"]);
    let mut values = BTreeMap::new();
    values.insert("a".to_owned(), "int".to_owned());
    let run = CellRun {
        outcome: CellOutcome::Ok,
        started_at: Timestamp::from_millis(100),
        duration_ms: 7,
        outputs: OutputSummary {
            text: "done".into(),
            values,
        },
    };
    for _ in 0..MAX_RUN_HISTORY + 3 {
        graph.record_run(s[0], run.clone()).unwrap();
    }
    let node = graph.cell(s[0]).unwrap();
    assert_eq!(
        node.run_count(),
        u32::try_from(MAX_RUN_HISTORY + 3).unwrap()
    );
    assert_eq!(node.timings().len(), MAX_RUN_HISTORY);
    assert_eq!(node.timings()[0].duration_ms, 7);
    assert_eq!(node.timings()[0].version, 1);
    assert_eq!(node.outputs().unwrap().text, "done");
    assert_eq!(node.status(), CellStatus::Ok);
}

#[test]
fn explicit_edges() {
    let (mut graph, s) = graph_of(&[
        "open('f', 'w').write('x')",
        "y = 1",
        "data = open('f').read()",
    ]);
    run_all(&mut graph);
    graph.add_edge(s[0], s[2]).unwrap();
    let dependencies = graph.dependencies(s[2]).unwrap();
    assert_eq!(dependencies.len(), 1);
    assert!(dependencies[0].1.explicit);
    assert_eq!(
        graph.add_edge(s[2], s[0]),
        Err(GraphError::BackwardEdge {
            from: s[2],
            to: s[0]
        })
    );
    assert_eq!(graph.add_edge(s[1], s[1]), Err(GraphError::SelfEdge(s[1])));
    assert_eq!(
        graph.add_edge(s[0], CellId::new(9)),
        Err(GraphError::UnknownCell(CellId::new(9)))
    );
    // Explicit edges survive re-inference.
    graph.replace_code(s[1], "y = 2", at(5)).unwrap();
    assert!(graph.dependencies(s[2]).unwrap()[0].1.explicit);
    // An edge from a cell that needs to run makes the consumer stale.
    graph.mark_stale(s[1]).unwrap();
    run_all(&mut graph);
    graph.mark_stale(s[1]).unwrap();
    graph.add_edge(s[1], s[2]).unwrap();
    assert_eq!(graph.cell(s[2]).unwrap().status(), CellStatus::Stale);
}

#[test]
fn replacing_code_keeps_versions_and_rewires() {
    let (mut graph, s) = graph_of(&["x = 1", "y = 2", "z = x"]);
    run_all(&mut graph);
    let stale = graph
        .replace_code(
            s[1],
            "x = 5",
            Provenance::new("model:m", "use 5", Timestamp::from_millis(50)),
        )
        .unwrap();
    assert_eq!(stale, ids(&[1, 2]));
    assert_eq!(deps(&graph, s[2]), [(1, names(&["x"]))]);
    assert_eq!(graph.cell(s[0]).unwrap().status(), CellStatus::Ok);

    let node = graph.cell(s[1]).unwrap();
    assert_eq!(node.current_version().number, 2);
    assert_eq!(node.current_version().provenance.author, "model:m");
    let sources: Vec<_> = node.versions().map(|v| v.source.as_str()).collect();
    assert_eq!(sources, ["y = 2", "x = 5"]);
    let t = Timestamp::from_millis;
    assert_eq!(graph.version_at(s[1], t(10)).unwrap().unwrap().number, 1);
    assert_eq!(graph.version_at(s[1], t(50)).unwrap().unwrap().number, 2);

    // Rolling back restores the old code as version 3, and the old edges.
    run_all(&mut graph);
    let stale = graph
        .rollback(s[1], 1, Provenance::new("user", "revert", t(60)))
        .unwrap();
    assert_eq!(stale, ids(&[1, 2]));
    assert_eq!(deps(&graph, s[2]), [(0, names(&["x"]))]);
    let node = graph.cell(s[1]).unwrap();
    assert_eq!(node.source(), "y = 2");
    assert_eq!(node.current_version().number, 3);
    assert_eq!(node.current_version().provenance.reason, "revert");
    assert_eq!(graph.version_at(s[1], t(55)).unwrap().unwrap().number, 2);
    assert_eq!(
        graph.rollback(s[1], 7, at(70)),
        Err(GraphError::UnknownVersion {
            cell: s[1],
            version: 7,
            available: 3
        })
    );
}

#[test]
fn version_before_creation_is_none() {
    let mut graph = ExecutionStateGraph::new();
    let cell = graph
        .add_cell(
            "x = 1",
            Provenance::new("u", "r", Timestamp::from_millis(100)),
        )
        .unwrap();
    assert_eq!(
        graph.version_at(cell, Timestamp::from_millis(99)).unwrap(),
        None
    );
}

#[test]
fn invalid_code_is_rejected_and_graph_unchanged() {
    let (mut graph, s) = graph_of(&["x = 1"]);
    let error = graph.replace_code(s[0], "x = (", at(1)).unwrap_err();
    assert!(matches!(
        error,
        GraphError::Analysis {
            cell: Some(_),
            source: AnalysisError::Syntax { line: 1, .. }
        }
    ));
    assert_eq!(graph.cell(s[0]).unwrap().source(), "x = 1");
    assert_eq!(graph.cell(s[0]).unwrap().versions().count(), 1);
    assert!(graph.add_cell("def", at(1)).is_err());
    assert_eq!(graph.len(), 1);
    assert!(graph.cell(CellId::new(3)).is_err());
}

#[test]
fn graph_round_trips_through_json() {
    let (mut graph, s) = graph_of(&[
        "import os\nxs = []",
        "def f():\n    xs.append(1)",
        "f()",
        "exec('')",
        "print(xs)",
    ]);
    run_all(&mut graph);
    graph.replace_code(s[2], "f(); f()", at(9)).unwrap();
    graph.add_edge(s[0], s[2]).unwrap();
    let json = serde_json::to_value(&graph).unwrap();
    let back: ExecutionStateGraph = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(serde_json::to_value(&back).unwrap(), json);
    assert_eq!(back.stale_order(), graph.stale_order());
    assert_eq!(
        back.ancestors(s[4], None).unwrap(),
        graph.ancestors(s[4], None).unwrap()
    );
    for (a, b) in graph.cells().zip(back.cells()) {
        assert_eq!(a, b);
    }
}

#[test]
fn dot_output() {
    let (graph, _) = graph_of(&["a = \"q\"", "b = a", "exec('')"]);
    let dot = graph.to_dot();
    assert!(dot.starts_with("digraph cells {"));
    assert!(dot.contains(r#"s0 [label="cell 0: a = \"q\""];"#), "{dot}");
    assert!(dot.contains(r#"s0 -> s1 [label="a"];"#), "{dot}");
    assert!(
        dot.contains(r#"s1 -> s2 [label="", style=dashed];"#),
        "{dot}"
    );
}
