//! Notebooks with a real `python3`: selective replay with cached
//! outputs, lazy restore after kernel faults, resume in a new kernel from a
//! directory or a session store, and the dynamic check of the analysis.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::support::{config, user};
use harness::SessionId;
use harness::session::SessionStore;
use harness_code::kernel::{KernelConfig, KernelError};
use harness_code::notebook::{Notebook, NotebookError};
use harness_code::replay::{ReplayAction, ReplayReason};
use harness_code::{CellId, CellStatus};
use harness_stores::MemoryStore;

fn ids(list: &[u32]) -> Vec<CellId> {
    list.iter().map(|&i| CellId::new(i)).collect()
}

fn repr(notebook: &Notebook, cell: u32, name: &str) -> String {
    notebook.record(CellId::new(cell)).unwrap().outputs[name]
        .repr
        .clone()
}

/// A 30-cell pipeline with branches. Cell 12 writes `p` and `q`; the edit
/// changes `p` only, so of its downstream {13..19, 26, 28, 29} the `q`
/// branch (14, 16, 18) sees unchanged inputs.
const PIPELINE: [&str; 30] = [
    "base = list(range(50))",
    "scale = 3",
    "a = [x * scale for x in base]",
    "b = [x + 1 for x in base]",
    "sa = sum(a)",
    "sb = sum(b)",
    "c = [x - 1 for x in b]",
    "sc = sum(c)",
    "mix = sa + sb",
    "d = sorted(a, reverse=True)",
    "top = d[:5]",
    "e = {'total': mix, 'top': top}",
    "p, q = sc * 2, len(base)",
    "pp = p + 1",
    "qq = q * 2",
    "ppp = pp * pp",
    "qqq = qq + sc",
    "r = ppp + mix",
    "s = qqq - 1",
    "t = r + s",
    "u = top[0] + 1",
    "v = u * e['total']",
    "w = [v] * 3",
    "x1 = sum(w)",
    "y = sb * 2",
    "z = y + 1",
    "report = {'t': t, 'x1': x1}",
    "final = z + x1",
    "n_items = len(report)",
    "summary = f'{final}:{t}'",
];
const EDIT_12: &str = "p, q = sc * 3, len(base)";

async fn run_pipeline(dir: &std::path::Path, sources: &[&str]) -> Notebook {
    let mut notebook = Notebook::create(dir, config()).unwrap();
    for source in sources {
        notebook.add_cell(*source, user()).unwrap();
    }
    let report = notebook.replay().await.unwrap();
    assert_eq!(report.executed().len(), sources.len(), "{report:#?}");
    assert!(report.succeeded());
    notebook
}

#[tokio::test]
async fn thirty_cell_pipeline_replays_exactly_the_affected_cells() {
    let dir = tempfile::tempdir().unwrap();
    let mut notebook = run_pipeline(dir.path(), &PIPELINE).await;
    let original_summary = repr(&notebook, 29, "summary");
    notebook.save().unwrap();
    notebook.shutdown().await;
    drop(notebook);

    // Reopen (a new kernel with an empty namespace), edit cell 12, replay.
    let mut notebook = Notebook::open(dir.path(), config()).unwrap();
    let twelve = CellId::new(12);
    let downstream: BTreeSet<CellId> = notebook
        .graph()
        .downstream(twelve)
        .unwrap()
        .cells
        .into_iter()
        .collect();
    assert_eq!(
        downstream,
        ids(&[12, 13, 14, 15, 16, 17, 18, 19, 26, 28, 29])
            .into_iter()
            .collect()
    );
    notebook.replace_cell(twelve, EDIT_12, user()).unwrap();
    let report = notebook.replay().await.unwrap();
    assert!(report.succeeded(), "{report:#?}");

    // Exactly the downstream cells whose inputs changed ran; the rest of the
    // downstream was reused from the cache; everything else was up to date.
    let affected = ids(&[12, 13, 15, 17, 19, 26, 28, 29]);
    assert_eq!(report.executed(), affected);
    assert_eq!(report.reused(), ids(&[14, 16, 18]));
    let executed_or_reused: BTreeSet<CellId> = report
        .executed()
        .into_iter()
        .chain(report.reused())
        .collect();
    assert_eq!(executed_or_reused, downstream);
    for entry in &report.entries {
        if !downstream.contains(&entry.cell) {
            assert_eq!(entry.action, ReplayAction::Skipped);
            assert_eq!(entry.reason, ReplayReason::UpToDate);
        }
    }
    assert_eq!(
        report.entry(twelve).unwrap().reason,
        ReplayReason::CodeChanged {
            from_version: 1,
            to_version: 2
        }
    );
    let ReplayReason::InputsChanged { changes } = &report.entry(CellId::new(13)).unwrap().reason
    else {
        panic!("cell 13 should run for its input");
    };
    assert_eq!(changes[0].name, "p");
    assert_eq!(changes[0].producer, Some(twelve));
    assert!(matches!(
        report.entry(CellId::new(14)).unwrap().reason,
        ReplayReason::CacheHit { .. }
    ));

    // Only what each executed cell needed was restored into the new kernel,
    // and nothing had to be recomputed.
    let restored: BTreeMap<u32, Vec<String>> = report
        .entries
        .iter()
        .filter(|e| e.action == ReplayAction::Executed)
        .map(|e| (e.cell.get(), e.restored.clone()))
        .collect();
    let expected: BTreeMap<u32, Vec<String>> = [
        (12, vec!["base", "sc"]),
        (13, vec![]),
        (15, vec![]),
        (17, vec!["mix"]),
        (19, vec!["s"]),
        (26, vec!["x1"]),
        (28, vec![]),
        (29, vec!["final"]),
    ]
    .into_iter()
    .map(|(k, v)| (k, v.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(restored, expected);
    assert!(report.entries.iter().all(|e| e.recomputed.is_empty()));

    // Same results as running the edited script from scratch.
    let mut edited = PIPELINE;
    edited[12] = EDIT_12;
    let fresh_dir = tempfile::tempdir().unwrap();
    let fresh = run_pipeline(fresh_dir.path(), &edited).await;
    for (cell, name) in [(29, "summary"), (26, "report"), (18, "s"), (27, "final")] {
        assert_eq!(
            repr(&notebook, cell, name),
            repr(&fresh, cell, name),
            "{name}"
        );
    }
    assert!(notebook.graph().stale_order().is_empty());

    // Reverting the edit reuses the first version's runs: nothing executes.
    notebook.replace_cell(twelve, PIPELINE[12], user()).unwrap();
    let report = notebook.replay().await.unwrap();
    assert_eq!(report.executed(), []);
    assert_eq!(report.reused(), downstream.into_iter().collect::<Vec<_>>());
    assert_eq!(repr(&notebook, 29, "summary"), original_summary);
}

#[tokio::test]
async fn timeout_then_next_cell_runs_in_a_restored_namespace() {
    let dir = tempfile::tempdir().unwrap();
    let mut notebook = Notebook::create(
        dir.path(),
        KernelConfig {
            timeout: Some(Duration::from_secs(3)),
            ..config()
        },
    )
    .unwrap();
    let data = notebook
        .execute("data = [1, 2, 3]", user())
        .await
        .unwrap()
        .cell;
    let define = notebook
        .execute("def f(x):\n    return x * 10", user())
        .await
        .unwrap()
        .cell;
    notebook
        .execute("unrelated = 'x' * 10", user())
        .await
        .unwrap();

    let error = notebook
        .execute("while True: pass", user())
        .await
        .unwrap_err();
    let NotebookError::Kernel {
        cell: Some(hung),
        source: KernelError::Timeout { restarted, .. },
    } = &error
    else {
        panic!("expected a timeout, got {error:?}");
    };
    assert!(restarted);
    assert!(error.to_string().contains("timed out"), "{error}");
    assert_eq!(
        notebook.graph().cell(*hung).unwrap().status(),
        CellStatus::Failed
    );

    // The next cell needs `data` (loaded from its blob) and `f` (a function:
    // recomputed by re-running only the cell that defined it).
    let run = notebook
        .execute("result = f(sum(data))\nprint(result)", user())
        .await
        .unwrap();
    assert!(run.result.is_ok(), "{:?}", run.result.error);
    assert_eq!(run.result.stdout.text, "60\n");
    assert_eq!(run.recomputed, [define]);
    assert_eq!(run.restored, ["data"]);
    let _ = data;
}

#[tokio::test]
async fn os_exit_gives_a_typed_error_and_state_is_recovered() {
    let dir = tempfile::tempdir().unwrap();
    let mut notebook = Notebook::create(dir.path(), config()).unwrap();
    notebook
        .execute("import json\ncfg = {'k': [1, 2]}", user())
        .await
        .unwrap();
    let error = notebook
        .execute("import os\nos._exit(1)", user())
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            NotebookError::Kernel {
                source: KernelError::Died {
                    code: Some(1),
                    restarted: true,
                    ..
                },
                ..
            }
        ),
        "{error:?}"
    );
    let run = notebook
        .execute("print(json.dumps(cfg))", user())
        .await
        .unwrap();
    assert_eq!(run.result.stdout.text, "{\"k\": [1, 2]}\n");
    let mut restored = run.restored.clone();
    restored.sort();
    assert_eq!(restored, ["cfg", "json"]);
}

#[tokio::test]
async fn replay_restores_mutated_values_instead_of_mutating_twice() {
    let dir = tempfile::tempdir().unwrap();
    let mut notebook = Notebook::create(dir.path(), config()).unwrap();
    let s0 = notebook.add_cell("xs = [1]", user()).unwrap();
    let s1 = notebook.add_cell("xs.append(2)", user()).unwrap();
    let s2 = notebook.add_cell("n = len(xs) * 10", user()).unwrap();
    notebook.replay().await.unwrap();
    assert_eq!(repr(&notebook, 2, "n"), "20");

    notebook.replace_cell(s1, "xs.append(3)", user()).unwrap();
    let report = notebook.replay().await.unwrap();
    assert_eq!(report.executed(), [s1, s2]);
    assert_eq!(report.entry(s1).unwrap().restored, ["xs"]);
    assert_eq!(repr(&notebook, 1, "xs"), "[1, 3]");
    assert_eq!(repr(&notebook, 2, "n"), "20");
    let _ = s0;
}

#[tokio::test]
async fn failed_cell_blocks_its_downstream_only() {
    let dir = tempfile::tempdir().unwrap();
    let mut notebook = Notebook::create(dir.path(), config()).unwrap();
    let a = notebook.add_cell("a = 1", user()).unwrap();
    let bad = notebook.add_cell("b = a / 0", user()).unwrap();
    let uses_b = notebook.add_cell("c = b + 1", user()).unwrap();
    let independent = notebook.add_cell("d = a + 1", user()).unwrap();
    let report = notebook.replay().await.unwrap();
    assert_eq!(report.executed(), [a, bad, independent]);
    assert!(
        report
            .entry(bad)
            .unwrap()
            .error
            .as_ref()
            .unwrap()
            .contains("ZeroDivisionError")
    );
    assert!(matches!(
        report.entry(uses_b).unwrap().reason,
        ReplayReason::UpstreamNotOk { cell, status: CellStatus::Failed } if cell == bad
    ));
    assert!(!report.succeeded());

    notebook.replace_cell(bad, "b = a / 2", user()).unwrap();
    let report = notebook.replay().await.unwrap();
    assert_eq!(report.executed(), [bad, uses_b]);
    assert!(report.succeeded());
    assert_eq!(repr(&notebook, 2, "c"), "1.5");
}

#[tokio::test]
async fn dynamic_read_check_reports_and_corrects_missed_reads() {
    let dir = tempfile::tempdir().unwrap();
    let mut notebook = Notebook::create(dir.path(), config()).unwrap();
    let threshold = notebook.add_cell("threshold = 5", user()).unwrap();
    // The analysis cannot see a read through `builtins.globals()`.
    let sneaky = notebook
        .add_cell(
            "import builtins\nlimit = builtins.globals()['threshold'] * 2\nif False:\n    print(never)",
            user(),
        )
        .unwrap();
    assert!(notebook.graph().dependencies(sneaky).unwrap().is_empty());
    notebook.replay().await.unwrap();
    let check = notebook.record(sneaky).unwrap().read_check.clone().unwrap();
    assert_eq!(check.unexpected.iter().collect::<Vec<_>>(), ["threshold"]);
    assert_eq!(check.unobserved.iter().collect::<Vec<_>>(), ["never"]);
    assert!(!check.is_consistent());

    // The mismatch corrected the graph: an explicit edge from the producer.
    let deps = notebook.graph().dependencies(sneaky).unwrap();
    assert_eq!(deps[0].0, threshold);
    assert!(deps[0].1.explicit);
    notebook
        .replace_cell(threshold, "threshold = 7", user())
        .unwrap();
    let report = notebook.replay().await.unwrap();
    assert_eq!(report.executed(), [threshold, sneaky]);
    assert_eq!(repr(&notebook, 1, "limit"), "14");

    // A cell the analysis gets right is consistent.
    let run = notebook
        .execute("total = threshold + limit", user())
        .await
        .unwrap();
    assert!(run.read_check.unwrap().is_consistent());
}

#[tokio::test]
async fn resume_from_a_session_store_restores_only_what_the_next_cell_needs() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemoryStore::new();
    let id = SessionId::from("analysis-1");
    {
        let mut notebook = Notebook::create(dir.path(), config()).unwrap();
        for source in [
            "import statistics",
            "raw = [3, 1, 4, 1, 5, 9, 2, 6]",
            "def normalise(xs):\n    top = max(xs)\n    return [x / top for x in xs]",
            "clean = sorted(set(raw))",
            "mean = statistics.mean(clean)",
            "big = [i * i for i in range(10_000)]",
        ] {
            notebook.add_cell(source, user()).unwrap();
        }
        assert!(notebook.replay().await.unwrap().succeeded());
        notebook.save_to_store(&store, &id).await.unwrap();
        // Saving again replaces the snapshot (compare-and-set on the head).
        notebook.save_to_store(&store, &id).await.unwrap();
        notebook.shutdown().await;
    }
    assert_eq!(store.checkpoints(&id, 0).await.unwrap().len(), 1);

    let mut notebook = Notebook::open_from_store(&store, &id, dir.path(), config())
        .await
        .unwrap();
    assert!(notebook.graph().stale_order().is_empty());
    // Needs only `mean`: one blob loaded, nothing re-run, `big` untouched.
    let run = notebook
        .execute("print(round(mean, 3))", user())
        .await
        .unwrap();
    assert_eq!(run.result.stdout.text, "4.286\n");
    assert_eq!(run.restored, ["mean"]);
    assert!(run.recomputed.is_empty());
    // Needs a function (recomputed from its cell alone) and `clean`.
    let run = notebook
        .execute("scaled = normalise(clean)\nprint(scaled[-1])", user())
        .await
        .unwrap();
    assert_eq!(run.result.stdout.text, "1.0\n");
    assert_eq!(run.recomputed, [CellId::new(2)]);
    assert_eq!(run.restored, ["clean"]);

    let missing = Notebook::open_from_store(&store, &SessionId::from("nope"), dir.path(), config())
        .await
        .unwrap_err();
    assert!(matches!(missing, NotebookError::NoNotebook(_)));

    // A session of someone else (an agent's run, another kind of value) is
    // refused by name, whether read or written, and left as it was.
    let theirs = SessionId::from("an-agents-session");
    harness::session::save_value(
        &store,
        "billing-agent",
        &theirs,
        serde_json::json!({"n": 1}),
    )
    .await
    .unwrap();
    let read = Notebook::open_from_store(&store, &theirs, dir.path(), config())
        .await
        .unwrap_err();
    assert!(read.to_string().contains("billing-agent"), "{read}");
    let write = notebook.save_to_store(&store, &theirs).await.unwrap_err();
    assert!(matches!(write, NotebookError::Session(_)), "{write}");
    let kept = harness::session::load_value(&store, "billing-agent", &theirs)
        .await
        .unwrap();
    assert_eq!(kept, Some(serde_json::json!({"n": 1})));
}

#[tokio::test]
async fn sync_sources_follows_an_edited_file() {
    let dir = tempfile::tempdir().unwrap();
    let cells = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let mut notebook = Notebook::create(dir.path(), config()).unwrap();
    notebook
        .sync_sources(&cells(&["a = 1", "b = a + 1", "c = b * 2"]), |_| user())
        .unwrap();
    notebook.replay().await.unwrap();

    // Edit the middle cell and append one.
    let sync = notebook
        .sync_sources(
            &cells(&["a = 1", "b = a + 2", "c = b * 2", "d = c"]),
            |_| user(),
        )
        .unwrap();
    assert_eq!(sync.changed, ids(&[1]));
    assert_eq!(sync.added, ids(&[3]));
    let report = notebook.replay().await.unwrap();
    assert_eq!(report.executed(), ids(&[1, 2, 3]));
    assert_eq!(report.skipped(), ids(&[0]));

    // Remove a cell: the graph is rebuilt, unchanged cells are reused.
    let sync = notebook
        .sync_sources(&cells(&["a = 1", "b = a + 2", "d = b"]), |_| user())
        .unwrap();
    assert!(sync.rebuilt);
    let report = notebook.replay().await.unwrap();
    assert_eq!(report.reused(), ids(&[0, 1]));
    assert_eq!(report.executed(), ids(&[2]));
    assert_eq!(repr(&notebook, 2, "d"), "3");
}

/// Corruptions of a blob: each keeps or breaks the pickle, and the first
/// two keep its size, so that only the hash tells them apart. The first
/// replaces `genuine` with `forged`, a value of the same pickled size.
fn corruptions(pickle: &[u8], genuine: &[u8], forged: &[u8]) -> Vec<(&'static str, Vec<u8>)> {
    let at = pickle
        .windows(genuine.len())
        .position(|w| w == genuine)
        .unwrap();
    let mut another_value = pickle.to_vec();
    another_value[at..at + forged.len()].copy_from_slice(forged);
    let mut flipped = pickle.to_vec();
    flipped[pickle.len() / 2] ^= 0x40;
    vec![
        ("same size, another value", another_value),
        ("a flipped bit", flipped),
        ("truncated", pickle[..pickle.len() - 3].to_vec()),
        ("emptied", Vec::new()),
    ]
}

#[tokio::test]
async fn a_corrupt_blob_is_never_read_as_a_value_but_recomputed_and_written_again() {
    for case in 0..4 {
        let dir = tempfile::tempdir().unwrap();
        let mut notebook = Notebook::create(dir.path(), config()).unwrap();
        for source in [
            "text = 'abcdef' * 3",
            // Small ints pickle as `K` and one byte.
            "nums = list(range(10))",
            "label = 'unrelated'",
        ] {
            notebook.add_cell(source, user()).unwrap();
        }
        assert!(notebook.replay().await.unwrap().succeeded());
        notebook.save().unwrap();
        notebook.shutdown().await;
        let hash = |cell: u32, name: &str| {
            notebook.record(CellId::new(cell)).unwrap().outputs[name]
                .stored
                .hash()
                .unwrap()
                .to_owned()
        };
        let blobs = [
            (hash(0, "text"), &b"abcdef"[..], &b"abcxef"[..]),
            (hash(1, "nums"), b"K\x05", b"K\x63"),
        ];
        let store = notebook.blobs().clone();
        let mut what = "";
        for (hash, genuine, forged) in &blobs {
            let pickle = store.get(hash).unwrap();
            let (name, bytes) = corruptions(&pickle, genuine, forged).swap_remove(case);
            what = name;
            std::fs::write(store.path(hash).unwrap(), bytes).unwrap();
        }
        drop(notebook);

        let mut notebook = Notebook::open(dir.path(), config()).unwrap();
        let run = notebook
            .execute("print(text[:6], sum(nums))", user())
            .await
            .unwrap();
        assert!(run.result.is_ok(), "{what}: {:?}", run.result.error);
        assert_eq!(run.result.stdout.text, "abcdef 45\n", "{what}");
        assert_eq!(run.recomputed, ids(&[0, 1]), "{what}");
        // Healed: the recomputed values were written again, whole.
        for (hash, _, _) in &blobs {
            assert!(store.get(hash).is_ok(), "{what}: {:?}", store.get(hash));
        }
        // So a new kernel loads them instead of recomputing them.
        notebook.shutdown().await;
        let run = notebook
            .execute("print(text[-6:], max(nums))", user())
            .await
            .unwrap();
        assert_eq!(run.result.stdout.text, "abcdef 9\n", "{what}");
        assert!(run.recomputed.is_empty(), "{what}: {:?}", run.recomputed);
        assert_eq!(run.restored, ["nums", "text"], "{what}");
        notebook.shutdown().await;
    }
}
