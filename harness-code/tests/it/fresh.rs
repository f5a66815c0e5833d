//! A selective replay never leaves a cell stale: after each edit and
//! replay, every cell's values, output and error are what a fresh run of
//! the current cells gives (an oracle: the same cells in a new notebook).
//! The cases are those where restoring or reusing values cell by cell
//! could part what a fresh run shares, or keep what it would not have.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use crate::notebooks::config;
use crate::support::user;
use harness_code::CellId;
use harness_code::kernel::KernelConfig;
use harness_code::notebook::Notebook;
use harness_code::replay::{ReplayAction, ReplayReport};

/// What a cell shows: its values' reprs (not those naming an address,
/// such as a generator's), its output and its error.
type Seen = (BTreeMap<String, String>, String, Option<String>);

fn seen(notebook: &Notebook) -> Vec<Seen> {
    notebook
        .graph()
        .cells()
        .map(|cell| match notebook.record(cell.id()) {
            None => (BTreeMap::new(), String::new(), Some("never ran".to_owned())),
            Some(record) => (
                record
                    .outputs
                    .iter()
                    .filter(|(name, value)| {
                        !name.starts_with("__") && !value.repr.contains(" at 0x")
                    })
                    .map(|(name, value)| (name.clone(), value.repr.clone()))
                    .collect(),
                record.stdout.text.clone(),
                record.error.clone(),
            ),
        })
        .collect()
}

/// `cells` run in a notebook of their own; then each edit (cell, new code)
/// is made and replayed, after `restart` a kernel restart first, and every
/// cell must show what a fresh run of the current cells shows. Returns the
/// notebook and the report of each replay.
async fn agrees_with_a_fresh_run(
    cells: &[&str],
    edits: &[(u32, &str)],
    restart: bool,
) -> (tempfile::TempDir, Notebook, Vec<ReplayReport>) {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let config = KernelConfig {
        working_dir: Some(work),
        ..config()
    };
    let mut notebook = Notebook::create(dir.path().join("nb"), config.clone()).unwrap();
    let mut current: Vec<String> = cells.iter().map(|c| (*c).to_owned()).collect();
    for source in &current {
        notebook.add_cell(source.clone(), user()).unwrap();
    }
    let report = notebook.replay().await.unwrap();
    assert!(report.succeeded(), "{report:#?}");
    let mut reports = Vec::new();
    for (step, (cell, source)) in edits.iter().enumerate() {
        current[*cell as usize] = (*source).to_owned();
        notebook
            .replace_cell(CellId::new(*cell), *source, user())
            .unwrap();
        if restart {
            notebook.shutdown().await;
        }
        let report = notebook.replay().await.unwrap();
        let fresh_dir = dir.path().join(format!("fresh-{step}"));
        let mut fresh = Notebook::create(&fresh_dir, config.clone()).unwrap();
        for source in &current {
            fresh.add_cell(source.clone(), user()).unwrap();
        }
        fresh.replay().await.unwrap();
        fresh.shutdown().await;
        let (replayed, expected) = (seen(&notebook), seen(&fresh));
        for (index, (got, want)) in replayed.iter().zip(&expected).enumerate() {
            assert_eq!(
                got, want,
                "edit {step}: cell {index} `{}` differs from a fresh run; replay: {report:#?}",
                current[index]
            );
        }
        reports.push(report);
    }
    notebook.shutdown().await;
    (dir, notebook, reports)
}

fn action(report: &ReplayReport, cell: u32) -> ReplayAction {
    report.entry(CellId::new(cell)).unwrap().action
}

/// A cell changed a dict through a list it holds (`inner`), a name its
/// cache key held; the dict itself was not in its key. An edit that
/// changes the dict but not the list must not reuse that run: its stored
/// dict is the old one.
#[tokio::test]
async fn a_run_is_not_reused_when_what_it_changed_through_a_shared_object_differs() {
    let (_dir, _notebook, reports) = agrees_with_a_fresh_run(
        &[
            "outer = {'n': 1, 'inner': [0]}",
            "inner = outer['inner']",
            "inner.append(9)",
            "seen = repr(outer)",
        ],
        &[(0, "outer = {'n': 2, 'inner': [0]}")],
        false,
    )
    .await;
    assert_eq!(action(&reports[0], 2), ReplayAction::Executed);
}

/// The same through a numpy view: the cell scales the view, which changes
/// its base; an edit that makes a longer base must not bring back the old
/// one from the cache.
#[tokio::test]
async fn a_run_that_changed_a_base_through_its_view_is_not_reused_for_another_base() {
    let (_dir, _notebook, reports) = agrees_with_a_fresh_run(
        &[
            "import numpy as np\nbase = np.arange(10.0)",
            "v = base[2:5]",
            "v *= 2",
            "total = float(base.sum())",
        ],
        &[
            (2, "v *= 3"),
            (0, "import numpy as np\nbase = np.arange(20.0)"),
        ],
        false,
    )
    .await;
    assert_eq!(action(&reports[1], 2), ReplayAction::Executed);
}

/// A list held by a dict under a name of its own: the cell that changes it
/// through the dict is edited, and a later reader of the list sees the
/// change, in the same kernel and after a restart.
#[tokio::test]
async fn names_sharing_a_list_through_a_dict_are_restored_together() {
    let cells = [
        "xs = [1]",
        "d = {'k': xs}",
        "d['k'].append(2)",
        "n = len(xs)",
    ];
    let edits = [(2, "d['k'].extend([2, 3, 4])"), (0, "xs = []")];
    agrees_with_a_fresh_run(&cells, &edits, false).await;
    agrees_with_a_fresh_run(&cells, &edits, true).await;
}

/// A pandas Series taken from a frame shares the frame's block: a change
/// through the Series shows in the frame after an edit, as in a fresh run.
#[tokio::test]
async fn a_series_and_its_frame_are_restored_together() {
    let cells = [
        "import pandas as pd\ndf = pd.DataFrame({'a': [1.0, 2.0, 3.0]})",
        "col = df['a']",
        "col.iloc[0] = 100.0",
        "m = float(df['a'].max())",
    ];
    let edits = [(2, "col.iloc[0] = 500.0")];
    agrees_with_a_fresh_run(&cells, &edits, false).await;
    agrees_with_a_fresh_run(&cells, &edits, true).await;
}

/// An edit renames what a cell binds: a later reader of the old name fails
/// with `NameError`, as in a fresh run, and the edited cell's record no
/// longer lists the old name.
#[tokio::test]
async fn a_name_an_edit_no_longer_binds_is_gone_from_the_kernel() {
    let (_dir, notebook, _) =
        agrees_with_a_fresh_run(&["old = 1", "y = old + 1"], &[(0, "new = 1")], false).await;
    let error = notebook.record(CellId::new(1)).unwrap().error.clone();
    assert!(error.unwrap().contains("NameError"));
    assert!(
        !notebook
            .record(CellId::new(0))
            .unwrap()
            .outputs
            .contains_key("old")
    );

    let (_dir, notebook, _) = agrees_with_a_fresh_run(
        &["def helper():\n    return 1", "y = helper()"],
        &[(0, "def helper2():\n    return 1")],
        false,
    )
    .await;
    let error = notebook.record(CellId::new(1)).unwrap().error.clone();
    assert!(error.unwrap().contains("NameError"));
}

/// Cell 1 reads a file cell 0 writes. Its first run was keyed before that
/// link was known; once cell 0 writes something else and then nothing at
/// all, that first run must not come back from the cache.
#[tokio::test]
async fn a_run_keyed_before_its_file_was_linked_is_not_reused() {
    let (_dir, notebook, reports) = agrees_with_a_fresh_run(
        &[
            "with open('g.txt', 'w') as f:\n    f.write('abc')",
            "with open('g.txt') as f:\n    size = len(f.read())",
        ],
        &[
            (0, "with open('g.txt', 'w') as f:\n    f.write('abcdefgh')"),
            (0, "pass"),
        ],
        false,
    )
    .await;
    assert_eq!(action(&reports[1], 1), ReplayAction::Executed);
    assert_eq!(
        notebook.record(CellId::new(1)).unwrap().outputs["size"].repr,
        "8"
    );
}

/// A generator that later cells advance: editing the first reader starts
/// again from a new generator, and the later reader runs again after it.
#[tokio::test]
async fn a_generator_consumed_by_later_cells_is_recomputed() {
    let (_dir, notebook, reports) = agrees_with_a_fresh_run(
        &[
            "gen = (i * i for i in range(5))",
            "first = next(gen)",
            "second = next(gen)",
        ],
        &[(1, "first = next(gen) + 0")],
        false,
    )
    .await;
    assert_eq!(
        notebook.record(CellId::new(1)).unwrap().outputs["first"].repr,
        "0"
    );
    assert_eq!(
        notebook.record(CellId::new(2)).unwrap().outputs["second"].repr,
        "1"
    );
    assert_eq!(action(&reports[0], 2), ReplayAction::Executed);
    // The same with an iterator that cannot be pickled.
    agrees_with_a_fresh_run(
        &[
            "it = map(lambda v: v * 2, range(10))",
            "a = next(it)",
            "b = next(it)",
        ],
        &[(1, "a = next(it) * 10")],
        false,
    )
    .await;
}

/// A cell forks and the child goes on, back into the kernel: only the
/// kernel answers. The cell's result is the parent's, and the next cell is
/// not blamed for a reply the child sent, whichever of the two is slower.
#[cfg(unix)]
#[tokio::test]
async fn a_cell_that_forks_gets_the_parents_result_and_blames_no_later_cell() {
    for slower in ["pid == 0", "pid != 0"] {
        let dir = tempfile::tempdir().unwrap();
        let mut notebook = Notebook::create(dir.path(), config()).unwrap();
        notebook.add_cell("base = 1", user()).unwrap();
        let fork = format!(
            "import os, time\npid = os.fork()\nwho = 'child' if pid == 0 else 'parent'\n\
             if {slower}:\n    time.sleep(0.5)"
        );
        let forked = notebook.add_cell(fork, user()).unwrap();
        let after = notebook.add_cell("after = base + 1", user()).unwrap();
        let again = notebook.add_cell("again = after + 1", user()).unwrap();
        let report = notebook.replay().await.unwrap();
        assert!(report.succeeded(), "{slower}: {report:#?}");
        let record = notebook.record(forked).unwrap();
        assert_eq!(record.outputs["who"].repr, "'parent'", "{slower}");
        assert_ne!(record.outputs["pid"].repr, "0", "{slower}");
        // The slower child has had time to come back meanwhile.
        tokio::time::sleep(std::time::Duration::from_millis(700)).await;
        notebook
            .replace_cell(again, "again = after + 2", user())
            .unwrap();
        let report = notebook.replay().await.unwrap();
        assert!(report.succeeded(), "{slower}: {report:#?}");
        assert_eq!(notebook.record(after).unwrap().outputs["after"].repr, "2");
        assert_eq!(notebook.record(again).unwrap().outputs["again"].repr, "4");
        notebook.shutdown().await;
    }
}
