//! Invalidation checked against what the code did: notebooks that use
//! numpy, pandas and matplotlib (Agg) run in a real kernel with the
//! libraries installed (`scripts/notebook-venv`), their traces recorded.
//!
//! For every committed notebook of `tests/notebooks/` and every cell, the
//! graph's downstream of the cell must hold every dependent the recorded
//! traces give (`traced_downstream`): zero missed dependents. And for each
//! kind of effect the static analysis cannot see, a test shows that the
//! analysis alone misses the dependent, the traced graph has it, and an
//! edit of the cell re-runs the dependent with a new result.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::time::Duration;

use crate::support::user;
use harness_code::kernel::{Kernel, KernelConfig};
use harness_code::notebook::Notebook;
use harness_code::{
    AnalysisOptions, CellId, ExecutionStateGraph, split_percent_script, traced_downstream,
};

/// The Python of the venv `scripts/notebook-venv` makes (numpy, pandas,
/// matplotlib): `HARNESS_NOTEBOOK_PYTHON`, else
/// `target/notebook-venv/bin/python`. The tests fail, never skip, when it
/// is missing.
fn python() -> PathBuf {
    let path = std::env::var_os("HARNESS_NOTEBOOK_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/notebook-venv/bin/python")
        });
    assert!(
        path.exists(),
        "no Python with numpy, pandas and matplotlib at {}: run scripts/test (it makes the \
         venv), or `eval \"$(scripts/notebook-venv)\"`, which sets HARNESS_NOTEBOOK_PYTHON",
        path.display()
    );
    path
}

/// A kernel on the Python with numpy, pandas and matplotlib.
pub(crate) fn config() -> KernelConfig {
    KernelConfig {
        python: python(),
        timeout: Some(Duration::from_secs(120)),
        ..KernelConfig::default()
    }
}

const OPTIONS: AnalysisOptions = AnalysisOptions { ipython: true };

/// A notebook in a temporary directory with `cells`, all run once.
async fn run_notebook(cells: &[String]) -> (tempfile::TempDir, Notebook) {
    let dir = tempfile::tempdir().unwrap();
    let mut notebook = Notebook::create_with(dir.path().join("nb"), config(), OPTIONS).unwrap();
    for source in cells {
        notebook.add_cell(source.clone(), user()).unwrap();
    }
    let report = notebook.replay().await.unwrap();
    for entry in &report.entries {
        assert!(
            entry.error.is_none(),
            "cell {} failed: {:?}",
            entry.cell,
            entry.error
        );
    }
    (dir, notebook)
}

/// The graph the static analysis alone gives for `cells`.
fn static_graph(cells: &[String]) -> ExecutionStateGraph {
    let mut graph = ExecutionStateGraph::with_options(OPTIONS);
    for source in cells {
        graph.add_cell(source.clone(), user()).unwrap();
    }
    graph
}

fn downstream(graph: &ExecutionStateGraph, cell: usize) -> Vec<usize> {
    graph
        .downstream(CellId::new(cell as u32))
        .unwrap()
        .cells
        .into_iter()
        .map(|id| id.get() as usize)
        .filter(|&id| id != cell)
        .collect()
}

fn notebook_cells(name: &str) -> Vec<String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/notebooks")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    split_percent_script(&text)
        .into_iter()
        .map(|cell| cell.source)
        .collect()
}

/// Runs a committed notebook and checks every (notebook, edited cell) pair
/// against the traces; returns (missed by the static graph alone, extra
/// re-runs of the traced graph) over all edits.
async fn zero_missed(name: &str) -> (usize, usize) {
    let cells = notebook_cells(name);
    let (_dir, notebook) = run_notebook(&cells).await;
    let traces: Vec<_> = (0..cells.len())
        .map(|i| {
            notebook
                .record(CellId::new(i as u32))
                .and_then(|r| r.trace.as_ref())
        })
        .collect();
    assert!(
        traces.iter().all(Option::is_some),
        "{name}: every cell is traced"
    );
    let statically = static_graph(&cells);
    let (mut static_missed, mut extra) = (0, 0);
    for cell in 0..cells.len() {
        let truth = traced_downstream(&traces, cell);
        let replayed = downstream(notebook.graph(), cell);
        let missed: Vec<_> = truth.iter().filter(|c| !replayed.contains(c)).collect();
        assert!(
            missed.is_empty(),
            "{name}: an edit of cell {cell} misses dependents {missed:?} (replays {replayed:?}, \
             truth {truth:?})"
        );
        extra += replayed.iter().filter(|c| !truth.contains(c)).count();
        let alone = downstream(&statically, cell);
        static_missed += truth.iter().filter(|c| !alone.contains(c)).count();
    }
    (static_missed, extra)
}

#[tokio::test]
async fn frames_notebook_misses_no_dependent() {
    let (static_missed, _) = zero_missed("frames.py").await;
    // The helper that scales its argument and the alias `raw` are not seen
    // by the analysis alone.
    assert!(static_missed > 0);
}

#[tokio::test]
async fn lists_notebook_misses_no_dependent() {
    let (static_missed, _) = zero_missed("lists.py").await;
    assert!(static_missed > 0);
}

#[tokio::test]
async fn arrays_notebook_misses_no_dependent() {
    let (static_missed, _) = zero_missed("arrays.py").await;
    assert!(static_missed > 0);
}

#[tokio::test]
async fn files_notebook_misses_no_dependent() {
    let (static_missed, _) = zero_missed("files.py").await;
    assert!(static_missed > 0);
}

#[tokio::test]
async fn plots_notebook_misses_no_dependent() {
    let (static_missed, _) = zero_missed("plots.py").await;
    assert!(static_missed > 0);
}

/// `cells` run; cell `edited` becomes `new_code`. The static analysis alone
/// must not have `dependent` downstream of `edited` (else the case shows
/// nothing), the traced graph must, and after the edit a replay must run
/// `dependent` again, its output changing from `before` to `after`.
async fn dynamic_catches(
    cells: &[&str],
    edited: usize,
    new_code: &str,
    dependent: usize,
    before: &str,
    after: &str,
) {
    let cells: Vec<String> = cells.iter().map(|c| (*c).to_owned()).collect();
    assert!(
        !downstream(&static_graph(&cells), edited).contains(&dependent),
        "the static analysis alone already links cell {edited} to cell {dependent}"
    );
    let (_dir, mut notebook) = run_notebook(&cells).await;
    let output = |notebook: &Notebook| {
        notebook
            .record(CellId::new(dependent as u32))
            .unwrap()
            .stdout
            .text
            .trim()
            .to_owned()
    };
    assert_eq!(output(&notebook), before);
    assert!(
        downstream(notebook.graph(), edited).contains(&dependent),
        "the traced graph does not link cell {edited} to cell {dependent}"
    );
    notebook
        .replace_cell(CellId::new(edited as u32), new_code, user())
        .unwrap();
    let report = notebook.replay().await.unwrap();
    assert!(report.failed().is_empty(), "{report:?}");
    assert!(
        report.executed().contains(&CellId::new(dependent as u32)),
        "cell {dependent} did not run again: {report:?}"
    );
    assert_eq!(output(&notebook), after);
}

#[tokio::test]
async fn list_append_through_a_helper_is_traced() {
    dynamic_catches(
        &[
            "xs = [1, 2]",
            "def grow(items, value):\n    items.append(value)",
            "grow(xs, 3)",
            "print(sum(xs))",
        ],
        2,
        "grow(xs, 30)",
        3,
        "6",
        "33",
    )
    .await;
}

#[tokio::test]
async fn global_set_by_a_function_called_through_another_is_traced() {
    dynamic_catches(
        &[
            "count = 0",
            "def bump():\n    global count\n    count += 1\n\ndef bump_twice():\n    bump()\n    bump()",
            "bump_twice()",
            "print(count)",
        ],
        2,
        "bump_twice()\nbump()",
        3,
        "2",
        "3",
    )
    .await;
}

#[tokio::test]
async fn change_through_an_alias_from_an_earlier_cell_is_traced() {
    dynamic_catches(
        &["xs = [1]\nys = xs", "ys.append(2)", "print(len(xs))"],
        1,
        "ys.extend([2, 3])",
        2,
        "2",
        "3",
    )
    .await;
}

#[tokio::test]
async fn change_through_a_numpy_view_is_traced() {
    dynamic_catches(
        &[
            "import numpy as np\na = np.zeros(4)\nview = a[:2]",
            "view[:] = 7",
            "print(a.sum())",
        ],
        1,
        "view[:] = 8",
        2,
        "14.0",
        "16.0",
    )
    .await;
}

#[tokio::test]
async fn numpy_shuffle_in_place_is_traced() {
    dynamic_catches(
        &[
            "import numpy as np\nb = np.arange(10)",
            "np.random.seed(0)\nnp.random.shuffle(b)",
            "print(b[:3].tolist())",
        ],
        1,
        "np.random.seed(1)\nnp.random.shuffle(b)",
        2,
        "[2, 8, 4]",
        "[2, 9, 6]",
    )
    .await;
}

// The global generators' states are read straight from their C structs
// (kernel.py, `_numpy_state` and `_random_state`). Each case below changes
// one part of a state only: one that reading misses would fail its case.

#[tokio::test]
async fn numpy_cached_gaussian_taken_by_an_earlier_cell_is_traced() {
    // Cell 1 takes the Gaussian cell 0 left cached: the Mersenne Twister's
    // words and position stay as they were, only `has_gauss` changes.
    traced_truth_catches(
        &[
            "import numpy as np\nnp.random.seed(0)\nfirst = np.random.standard_normal()",
            "second = np.random.standard_normal()",
            "print(round(float(np.random.standard_normal()), 6))",
        ],
        1,
        "np.random.seed(3)\nsecond = np.random.standard_normal()",
        2,
        "0.978738",
        "0.43651",
    )
    .await;
}

#[tokio::test]
async fn numpy_generator_on_another_bit_generator_is_traced() {
    // Not MT19937: the state is read through `get_state`.
    traced_truth_catches(
        &[
            "import numpy as np\nnp.random.set_bit_generator(np.random.PCG64(0))",
            "x = np.random.random()",
            "print(round(float(np.random.random()), 6))",
        ],
        1,
        "np.random.set_bit_generator(np.random.PCG64(0))\nx = np.random.random()\ny = np.random.random()",
        2,
        "0.269787",
        "0.040974",
    )
    .await;
}

#[tokio::test]
async fn random_draw_moving_only_the_index_is_traced() {
    // After cell 0's first draw, one more moves the index, not the words.
    traced_truth_catches(
        &[
            "import random\nrandom.seed(0)\nrandom.random()",
            "x = random.random()",
            "print(round(random.random(), 6))",
        ],
        1,
        "random.seed(1)\nx = random.random()",
        2,
        "0.420572",
        "0.847434",
    )
    .await;
}

#[tokio::test]
async fn random_cached_gaussian_taken_by_an_earlier_cell_is_traced() {
    // Cell 1 takes the Gaussian cell 0 left in `gauss_next`: the generator
    // itself does not move.
    traced_truth_catches(
        &[
            "import random\nrandom.seed(0)\nrandom.gauss(0, 1)",
            "g = random.gauss(0, 1)",
            "print(round(random.gauss(0, 1), 6))",
        ],
        1,
        "random.seed(2)\ng = random.gauss(0, 1)",
        2,
        "-0.679714",
        "-0.662854",
    )
    .await;
}

#[tokio::test]
async fn generator_advanced_by_an_earlier_cell_is_traced() {
    dynamic_catches(
        &[
            "import numpy as np\nrng = np.random.default_rng(1)",
            "first = rng.integers(100)",
            "print(rng.integers(100))",
        ],
        1,
        "first = rng.integers(100)\nextra = rng.integers(100)",
        2,
        "51",
        "75",
    )
    .await;
}

#[tokio::test]
async fn data_frame_scaled_by_a_helper_is_traced() {
    dynamic_catches(
        &[
            "import pandas as pd\ndf = pd.DataFrame({'a': [1.0, 2.0]})",
            "def scale(frame, k):\n    frame['a'] *= k",
            "scale(df, 2)",
            "print(df['a'].sum())",
        ],
        2,
        "scale(df, 3)",
        3,
        "6.0",
        "9.0",
    )
    .await;
}

#[tokio::test]
async fn data_frame_changed_through_a_second_name_is_traced() {
    dynamic_catches(
        &[
            "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2]})\nraw = df",
            "raw.loc[0, 'a'] = 10",
            "print(df['a'].sum())",
        ],
        1,
        "raw.loc[0, 'a'] = 20",
        2,
        "12",
        "22",
    )
    .await;
}

#[tokio::test]
async fn file_written_then_read_links_the_cells() {
    dynamic_catches(
        &[
            "with open('n.txt', 'w') as f:\n    f.write('3')",
            "with open('n.txt') as f:\n    n = int(f.read())",
            "print(n * 2)",
        ],
        0,
        "with open('n.txt', 'w') as f:\n    f.write('5')",
        2,
        "6",
        "10",
    )
    .await;
}

#[tokio::test]
async fn pyplot_drawing_on_the_current_axes_is_traced() {
    dynamic_catches(
        &[
            "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt",
            "fig, ax = plt.subplots()",
            "plt.plot([1, 2, 3])",
            "print(len(ax.lines))",
        ],
        2,
        "plt.plot([1, 2])\nplt.plot([3, 4])",
        3,
        "1",
        "2",
    )
    .await;
}

#[tokio::test]
async fn a_line_restyled_through_pyplot_is_traced() {
    // Nothing the figure's old fingerprint read moves (its artists' count,
    // titles, labels, data limits): the change is seen by the figure's count
    // of changes.
    dynamic_catches(
        &[
            "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt",
            "fig, ax = plt.subplots()\nline, = ax.plot([1, 2])",
            "plt.gca().lines[0].set_color('red')",
            "print(line.get_color())",
        ],
        2,
        "plt.gca().lines[0].set_color('blue')",
        3,
        "red",
        "blue",
    )
    .await;
}

#[tokio::test]
async fn drawing_on_the_oldest_of_many_figures_is_traced() {
    // Figure 1 is the oldest of 18 that pyplot keeps: every one is looked at.
    // (The cell that makes them closes those of its last run, as it may run
    // again to remake `ax1` for the edited cell.)
    dynamic_catches(
        &[
            "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt",
            "plt.close('all')\nfirst = plt.figure(1)\nax1 = first.add_subplot()\nfor i in range(2, 19):\n    plt.figure(i)",
            "ax1.set_title('a')",
            "print(plt.figure(1).axes[0].get_title())",
        ],
        2,
        "ax1.set_title('b')",
        3,
        "a",
        "b",
    )
    .await;
}

/// A figure is changed by what draws on it, through any name or none, and
/// not by saving it (drawing computes ticks, which pyplot does not count as
/// a change either) or by reading it. A cell that reaches one of its
/// artists may have changed them all; one that reaches none changes
/// pyplot's state, which every cell that reads a matplotlib value reads.
#[tokio::test]
async fn a_figure_is_changed_by_drawing_not_by_saving_or_reading() {
    let dir = tempfile::tempdir().unwrap();
    let mut kernel = Kernel::spawn(config()).await.unwrap();
    let png = dir.path().join("f.png");
    let all: &[&str] = &["@matplotlib", "ax", "fig", "line"];
    let pyplot: &[&str] = &["@matplotlib"];
    let cells: [(String, &[&str]); 8] = [
        (
            "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt".into(),
            &[],
        ),
        (
            "fig, ax = plt.subplots()\nline, = ax.plot([1, 2])".into(),
            &[],
        ),
        (format!("fig.savefig({png:?})"), &[]),
        (
            "n = (len(ax.lines), ax.get_title(), line.get_color())".into(),
            &[],
        ),
        ("line.set_linestyle('--')".into(), all),
        ("plt.gca().set_xlabel('x')".into(), pyplot),
        ("fig.suptitle('t')".into(), all),
        (format!("plt.savefig({png:?})"), &[]),
    ];
    for (cell, (source, changed)) in cells.iter().enumerate() {
        let result = kernel.execute(cell as u32, source).await.unwrap();
        assert!(result.is_ok(), "{source}: {:?}", result.error);
        if cell > 1 {
            let mutated = &result.trace.as_ref().unwrap().mutated;
            let seen: Vec<&str> = all
                .iter()
                .copied()
                .filter(|name| mutated.contains(*name))
                .collect();
            assert_eq!(seen, *changed, "{source}: {mutated:?}");
        }
    }
    kernel.shutdown().await.unwrap();
}

#[tokio::test]
async fn rcparams_change_is_traced() {
    dynamic_catches(
        &[
            "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt",
            "plt.rcParams['lines.linewidth'] = 3.0",
            "line, = plt.plot([1])\nprint(line.get_linewidth())",
        ],
        1,
        "plt.rcParams['lines.linewidth'] = 5.0",
        2,
        "3.0",
        "5.0",
    )
    .await;
}

#[tokio::test]
async fn global_read_by_a_function_at_call_time_is_traced() {
    dynamic_catches(
        &[
            "rate = 2",
            "def price(x):\n    return x * rate",
            "rate = 3",
            "print(price(10))",
        ],
        2,
        "rate = 4",
        3,
        "30",
        "40",
    )
    .await;
}

#[tokio::test]
async fn eval_inside_a_helper_is_traced() {
    dynamic_catches(
        &[
            "k = 1",
            "def lookup(expression):\n    return eval(expression)",
            "k = 5",
            "print(lookup('k + 1'))",
        ],
        2,
        "k = 7",
        3,
        "6",
        "8",
    )
    .await;
}

#[tokio::test]
async fn statement_of_a_time_magic_runs_and_is_traced() {
    dynamic_catches(
        &["xs = [3, 1, 2]", "%time ys = sorted(xs)", "print(ys)"],
        0,
        "xs = [9, 8]",
        2,
        "[1, 2, 3]",
        "[8, 9]",
    )
    .await;
}

/// [`dynamic_catches`], and the recorded traces themselves (the truth the
/// zero-missed checks hold the graph to) link `edited` to `dependent`, and
/// the graph misses no dependent the traces give for `edited`: the effect
/// is in the trace, not only in the graph.
async fn traced_truth_catches(
    cells: &[&str],
    edited: usize,
    new_code: &str,
    dependent: usize,
    before: &str,
    after: &str,
) {
    let owned: Vec<String> = cells.iter().map(|c| (*c).to_owned()).collect();
    let (_dir, notebook) = run_notebook(&owned).await;
    let traces: Vec<_> = (0..owned.len())
        .map(|i| {
            notebook
                .record(CellId::new(i as u32))
                .and_then(|r| r.trace.as_ref())
        })
        .collect();
    let truth = traced_downstream(&traces, edited);
    assert!(
        truth.contains(&dependent),
        "the traces do not link cell {edited} to cell {dependent}: {traces:#?}"
    );
    let replayed = downstream(notebook.graph(), edited);
    let missed: Vec<_> = truth.iter().filter(|c| !replayed.contains(c)).collect();
    assert!(
        missed.is_empty(),
        "an edit of cell {edited} misses {missed:?}"
    );
    dynamic_catches(cells, edited, new_code, dependent, before, after).await;
}

#[tokio::test]
async fn sparse_change_to_a_large_array_is_traced() {
    // One element of an 8 MB array, at an index no sample of a sampled
    // fingerprint looks at, changed by a numpy function writing in place.
    traced_truth_catches(
        &[
            "import numpy as np\na = np.zeros(1_000_000)",
            "np.add.at(a, [123457], 1.0)",
            "print(a.sum())",
        ],
        1,
        "np.add.at(a, [123457, 654321], 1.0)",
        2,
        "1.0",
        "2.0",
    )
    .await;
}

#[tokio::test]
async fn sparse_change_through_a_view_of_a_large_array_is_traced() {
    traced_truth_catches(
        &[
            "import numpy as np\na = np.zeros(1_000_000)\ntail = a[500_000:]",
            "def poke(array, value):\n    array[12345] = value",
            "poke(tail, 3.0)",
            "print(a.sum())",
        ],
        2,
        "poke(tail, 5.0)",
        3,
        "3.0",
        "5.0",
    )
    .await;
}

#[tokio::test]
async fn class_body_read_at_call_time_is_traced() {
    // The class body runs when `make` is called, in the later cell, and
    // reads `rate` there (by name, past the namespace's own lookup).
    traced_truth_catches(
        &[
            "rate = 2",
            "def make():\n    class Priced:\n        value = rate * 10\n    return Priced",
            "rate = 3",
            "print(make().value)",
        ],
        2,
        "rate = 4",
        3,
        "30",
        "40",
    )
    .await;
}

#[tokio::test]
async fn class_body_and_method_reads_are_traced() {
    // A class body reading a global through eval-free code in a cell, and
    // a method reading one when a later cell calls it.
    traced_truth_catches(
        &[
            "unit = 'kg'\nrate = 2",
            "def label():\n    return unit\n\nclass Item:\n    tag = label()\n    def cost(self, n):\n        return n * rate",
            "rate = 3",
            "print(Item().cost(10), Item.tag)",
        ],
        2,
        "rate = 5",
        3,
        "30 kg",
        "50 kg",
    )
    .await;
}

#[tokio::test]
async fn series_changed_in_a_large_frame_changes_the_frame() {
    traced_truth_catches(
        &[
            "import numpy as np\nimport pandas as pd\n\
             big = pd.DataFrame({'a': np.zeros(100_000), 'b': np.ones(100_000)})\n\
             col = big['a']",
            "col[54321] = 1.0",
            "print(big['a'].sum())",
        ],
        1,
        "col[54321] = 2.0",
        2,
        "1.0",
        "2.0",
    )
    .await;
}

#[tokio::test]
async fn frame_changed_by_loc_changes_its_series() {
    traced_truth_catches(
        &[
            "import numpy as np\nimport pandas as pd\n\
             big = pd.DataFrame({'a': np.zeros(100_000), 'b': np.ones(100_000)})\n\
             col = big['a']",
            "big.loc[23456, 'a'] = 7.0",
            "print(col.sum())",
        ],
        1,
        "big.loc[23456, 'a'] = 9.0",
        2,
        "7.0",
        "9.0",
    )
    .await;
}

#[tokio::test]
async fn large_notebook_misses_no_dependent() {
    let (static_missed, _) = zero_missed("large.py").await;
    // The numpy function writing in place, the view, the Series sharing
    // the frame's memory and the class made at call time.
    assert!(static_missed > 0);
}
