//! Invalidation against what the code did, tracing overhead, and replay
//! after a one-cell edit, on notebooks that use numpy, pandas and
//! matplotlib, in one run:
//!
//! ```sh
//! eval "$(scripts/notebook-venv)"      # or benchmarks/scripts/bench-cells
//! cargo bench -p harness-code --bench cells -- [NOTEBOOK.py|.ipynb|DIR ...]
//! ```
//!
//! Without arguments it reads `harness-code/tests/notebooks/`. For each
//! notebook it prints:
//!
//! - **dependents**: over every single-cell edit, the true dependents (by
//!   the recorded traces, [`traced_downstream`]), those the traced graph
//!   misses (must be 0), its extra re-runs, what the static analysis alone
//!   misses, and what re-running every later cell would run;
//! - **overhead**: per cell, kernel time traced (run + fingerprints) over
//!   untraced (tracing and read checks off), best of `REPEATS` runs each:
//!   median and worst ratio, over all cells and over cells of at least
//!   1 ms, and the ratio of the totals; then the same ratio for the whole
//!   request as the host waits for it (the values summarised and pickled
//!   for snapshots, the reply sent and read), which both modes pay;
//! - **replay**: after a one-cell edit (the cell's code changed, its
//!   values not), the notebook's replay (restore, cache keys, early
//!   cut-off) against running every cell again in a fresh namespace;
//! - **restore**: for each cell whose outputs were all snapshotted (blobs,
//!   modules), loading them into a fresh kernel against running the cell.
//!
//! Timings are printed, never asserted; the missed count is the one figure
//! that must be 0.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use harness_code::kernel::{Kernel, KernelConfig, RestoreValue, Stored};
use harness_code::notebook::{Notebook, runnable_source};
use harness_code::{
    AnalysisOptions, CellId, ExecutionStateGraph, Provenance, analyze_cell_with,
    notebook_code_cells, split_percent_script, traced_downstream,
};
use tokio::runtime::Runtime;

const OPTIONS: AnalysisOptions = AnalysisOptions { ipython: true };
const REPEATS: usize = 3;
/// Edits replayed per notebook (evenly spaced cells).
const EDITS: usize = 8;

fn fail(what: &str, error: impl std::fmt::Display) -> ! {
    eprintln!("bench-cells: {what}: {error}");
    std::process::exit(1)
}

fn python() -> PathBuf {
    let path = std::env::var_os("HARNESS_NOTEBOOK_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/notebook-venv/bin/python")
        });
    if !path.exists() {
        fail(
            "no Python with numpy, pandas and matplotlib",
            format!(
                "{} (run `eval \"$(scripts/notebook-venv)\"` or benchmarks/scripts/bench-cells)",
                path.display()
            ),
        );
    }
    path
}

fn config(trace: bool, work: &Path) -> KernelConfig {
    KernelConfig {
        python: python(),
        timeout: Some(Duration::from_secs(600)),
        trace,
        check_reads: trace,
        working_dir: Some(work.to_path_buf()),
        ..KernelConfig::default()
    }
}

fn notebooks(args: &[String]) -> Vec<PathBuf> {
    let roots: Vec<PathBuf> = if args.is_empty() {
        vec![PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/notebooks")]
    } else {
        args.iter().map(PathBuf::from).collect()
    };
    let mut found = Vec::new();
    for root in roots {
        if root.is_dir() {
            let mut entries: Vec<PathBuf> = std::fs::read_dir(&root)
                .unwrap_or_else(|e| fail(&root.display().to_string(), e))
                .filter_map(|entry| entry.ok().map(|e| e.path()))
                .filter(|path| {
                    path.extension()
                        .is_some_and(|ext| ext == "py" || ext == "ipynb")
                })
                .collect();
            entries.sort();
            found.extend(entries);
        } else {
            found.push(root);
        }
    }
    found
}

/// The cells of a notebook that parse (others are left out, as `harness
/// run` would fail on them).
fn cells_of(path: &Path) -> Vec<String> {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| fail(&path.display().to_string(), e));
    let cells = if path.extension().is_some_and(|ext| ext == "ipynb") {
        notebook_code_cells(&text).unwrap_or_else(|e| fail(&path.display().to_string(), e))
    } else {
        split_percent_script(&text)
    };
    cells
        .into_iter()
        .filter(|cell| !cell.skipped && analyze_cell_with(&cell.source, OPTIONS).is_ok())
        .map(|cell| cell.source)
        .collect()
}

fn downstream(graph: &ExecutionStateGraph, cell: usize) -> BTreeSet<usize> {
    graph
        .downstream(CellId::new(cell as u32))
        .map(|sub| sub.cells)
        .unwrap_or_default()
        .into_iter()
        .map(|id| id.get() as usize)
        .filter(|&id| id != cell)
        .collect()
}

fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[derive(Default)]
struct Totals {
    edits: usize,
    truth: usize,
    missed: usize,
    extra: usize,
    static_missed: usize,
    naive: usize,
    ratios: Vec<f64>,
    ratios_long: Vec<f64>,
    /// Whole requests, traced over untraced.
    waited: Vec<f64>,
    traced_us: u64,
    untraced_us: u64,
    replay_us: u64,
    run_all_us: u64,
    replays: usize,
    restore_us: u64,
    recompute_us: u64,
    restored_cells: usize,
    /// The same for cells that ran 10 ms or more.
    restore_long_us: u64,
    recompute_long_us: u64,
    restored_long_cells: usize,
}

/// For each successful cell whose outputs all have a blob or are modules,
/// at least one a blob: (time to load the blobs into a fresh kernel, the
/// cell's own run time). Modules are imported first, untimed: an import is
/// paid once per kernel whichever way the values come back.
async fn restore_times(notebook: &Notebook, cells: usize, work: &Path) -> Vec<(u64, u64)> {
    let mut config = config(false, work);
    config.blob_dir = Some(notebook.blobs().root().to_path_buf());
    let mut kernel = Kernel::spawn(config)
        .await
        .unwrap_or_else(|e| fail("kernel", e));
    let modules: Vec<RestoreValue> = (0..cells)
        .filter_map(|cell| notebook.record(CellId::new(cell as u32)))
        .flat_map(|record| record.outputs.iter())
        .filter_map(|(name, summary)| match &summary.stored {
            Stored::Module { name: module } => Some(RestoreValue::Module {
                name: name.clone(),
                module: module.clone(),
            }),
            _ => None,
        })
        .collect();
    let _ = kernel.restore(&modules).await;
    let mut times = Vec::new();
    for cell in 0..cells {
        let Some(record) = notebook.record(CellId::new(cell as u32)) else {
            continue;
        };
        if !record.is_ok() || record.outputs.is_empty() {
            continue;
        }
        let restorable = record
            .outputs
            .values()
            .all(|summary| match &summary.stored {
                Stored::Blob { hash, .. } => notebook.blobs().contains(hash),
                Stored::Module { .. } => true,
                Stored::Unrestorable { .. } => false,
            });
        // Modules were imported above.
        let values: Vec<RestoreValue> = record
            .outputs
            .iter()
            .filter_map(|(name, summary)| {
                summary.stored.hash().map(|hash| RestoreValue::Blob {
                    name: name.clone(),
                    blob: hash.to_owned(),
                })
            })
            .collect();
        if !restorable || values.is_empty() {
            continue;
        }
        let started = Instant::now();
        match kernel.restore(&values).await {
            Ok(report) if report.failed.is_empty() => {
                let took = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
                times.push((took, record.duration_us));
            }
            _ => {}
        }
    }
    let _ = kernel.shutdown().await;
    times
}

/// Per-cell times of all cells run in a fresh kernel: the kernel's (run +
/// trace overhead with tracing, run time without), and the whole request as
/// the host waits for it (values summarised and snapshotted, the reply
/// read).
async fn cell_times(cells: &[String], trace: bool, work: &Path) -> Vec<(u64, u64)> {
    let mut kernel = Kernel::spawn(config(trace, work))
        .await
        .unwrap_or_else(|e| fail("kernel", e));
    let mut times = Vec::with_capacity(cells.len());
    for (i, source) in cells.iter().enumerate() {
        let analysis = analyze_cell_with(source, OPTIONS).unwrap_or_else(|e| fail("analysis", e));
        let runnable = runnable_source(source, &analysis);
        let started = Instant::now();
        let result = kernel
            .execute(i as u32, &runnable)
            .await
            .unwrap_or_else(|e| fail("kernel", e));
        let waited = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        let overhead = result.trace.as_ref().map_or(0, |t| t.overhead_us);
        times.push((result.duration_us + overhead, waited));
    }
    let _ = kernel.shutdown().await;
    times
}

/// Best of `REPEATS` runs each, untraced and traced runs alternating so
/// that neither gets the warmer caches: (untraced, traced) kernel times,
/// then (untraced, traced) request times.
async fn best_times(cells: &[String], work: &Path) -> [Vec<u64>; 4] {
    let mut best = [(); 4].map(|()| vec![u64::MAX; cells.len()]);
    for _ in 0..REPEATS {
        for trace in [false, true] {
            let times = cell_times(cells, trace, work).await;
            for (i, (kernel, waited)) in times.into_iter().enumerate() {
                let at = usize::from(trace);
                best[at][i] = best[at][i].min(kernel);
                best[2 + at][i] = best[2 + at][i].min(waited);
            }
        }
    }
    best
}

/// Traced over untraced, per cell.
fn ratios(traced: &[u64], untraced: &[u64]) -> Vec<f64> {
    traced
        .iter()
        .zip(untraced)
        .map(|(t, u)| *t as f64 / (*u).max(1) as f64)
        .collect()
}

async fn bench(path: &Path, totals: &mut Totals) {
    let name = path
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let cells = cells_of(path);
    let dir = tempfile::tempdir().unwrap_or_else(|e| fail("tempdir", e));
    let work = dir.path().join("work");
    // Data files beside the notebook are visible to it, as in Jupyter.
    let work = if path.extension().is_some_and(|ext| ext == "ipynb") {
        path.parent().map_or(work.clone(), Path::to_path_buf)
    } else {
        work
    };

    // The traced run: records, traces, graph.
    let mut notebook = Notebook::create_with(dir.path().join("nb"), config(true, &work), OPTIONS)
        .unwrap_or_else(|e| fail("notebook", e));
    for source in &cells {
        notebook
            .add_cell(source.clone(), Provenance::now("bench", "cell"))
            .unwrap_or_else(|e| fail("cell", e));
    }
    let report = notebook.replay().await.unwrap_or_else(|e| fail("run", e));
    let failed = report.failed().len();
    let restores = restore_times(&notebook, cells.len(), &work).await;
    let traces: Vec<_> = (0..cells.len())
        .map(|i| {
            notebook
                .record(CellId::new(i as u32))
                .and_then(|r| r.trace.as_ref())
        })
        .collect();
    let mut statically = ExecutionStateGraph::with_options(OPTIONS);
    for source in &cells {
        statically
            .add_cell(source.clone(), Provenance::now("bench", "cell"))
            .unwrap_or_else(|e| fail("cell", e));
    }
    let (mut truth_n, mut missed, mut extra, mut static_missed, mut naive) = (0, 0, 0, 0, 0);
    for cell in 0..cells.len() {
        let truth = traced_downstream(&traces, cell);
        let replayed = downstream(notebook.graph(), cell);
        let alone = downstream(&statically, cell);
        truth_n += truth.len();
        missed += truth.difference(&replayed).count();
        extra += replayed.difference(&truth).count();
        static_missed += truth.difference(&alone).count();
        naive += cells.len() - 1 - cell;
    }
    println!(
        "{name}: {} cells ({failed} failed); over {} edits: {truth_n} true dependents, \
         {missed} missed, {extra} extra re-runs; static analysis alone misses {static_missed}; \
         re-running every later cell: {naive}",
        cells.len(),
        cells.len()
    );

    // Replay after one-cell edits, against running everything again.
    let step = (cells.len() / EDITS).max(1);
    let mut replay_us = 0;
    let mut executed = 0;
    let mut replays = 0;
    for cell in (0..cells.len()).step_by(step).take(EDITS) {
        let id = CellId::new(cell as u32);
        let edited = format!("{}\n_bench_edit_{replays} = {replays}", cells[cell]);
        if notebook
            .replace_cell(id, edited, Provenance::now("bench", "edit"))
            .is_err()
        {
            continue;
        }
        let report = notebook
            .replay()
            .await
            .unwrap_or_else(|e| fail("replay", e));
        replay_us += report.duration_us;
        executed += report.executed().len();
        replays += 1;
    }
    notebook.shutdown().await;

    let [untraced, traced, untraced_waited, traced_waited] = best_times(&cells, &work).await;
    let run_all: u64 = untraced.iter().sum();
    let ratios = ratios(&traced, &untraced);
    let ratios_long: Vec<f64> = ratios
        .iter()
        .zip(&untraced)
        .filter(|(_, u)| **u >= 1000)
        .map(|(r, _)| *r)
        .collect();
    let waited = self::ratios(&traced_waited, &untraced_waited);
    let worst = ratios.iter().copied().fold(f64::NAN, f64::max);
    println!(
        "  overhead traced/untraced: median {:.2}, worst {:.2} (all {} cells); median {:.2} \
         over {} cells of 1 ms or more; totals {:.1} ms / {:.1} ms = {:.2}",
        median(&mut ratios.clone()),
        worst,
        ratios.len(),
        median(&mut ratios_long.clone()),
        ratios_long.len(),
        traced.iter().sum::<u64>() as f64 / 1000.0,
        run_all as f64 / 1000.0,
        traced.iter().sum::<u64>() as f64 / run_all.max(1) as f64
    );
    println!(
        "  whole request traced/untraced (as the host waits, snapshots included): median {:.2}, \
         worst {:.2}",
        median(&mut waited.clone()),
        waited.iter().copied().fold(f64::NAN, f64::max)
    );
    if replays > 0 {
        println!(
            "  replay after a one-cell edit: {:.1} ms on average ({:.1} cells run of {}); \
             running every cell: {:.1} ms; {:.1}x less",
            replay_us as f64 / replays as f64 / 1000.0,
            executed as f64 / replays as f64,
            cells.len(),
            run_all as f64 / 1000.0,
            run_all as f64 / (replay_us as f64 / replays as f64).max(1.0)
        );
    }
    if !restores.is_empty() {
        let restore: u64 = restores.iter().map(|(r, _)| r).sum();
        let recompute: u64 = restores.iter().map(|(_, c)| c).sum();
        println!(
            "  restore instead of recompute ({} cells with snapshotted outputs): {:.1} ms \
             against {:.1} ms",
            restores.len(),
            restore as f64 / 1000.0,
            recompute as f64 / 1000.0
        );
        totals.restore_us += restore;
        totals.recompute_us += recompute;
        totals.restored_cells += restores.len();
        for (r, c) in restores.iter().filter(|(_, c)| *c >= 10_000) {
            totals.restore_long_us += r;
            totals.recompute_long_us += c;
            totals.restored_long_cells += 1;
        }
    }
    totals.edits += cells.len();
    totals.truth += truth_n;
    totals.missed += missed;
    totals.extra += extra;
    totals.static_missed += static_missed;
    totals.naive += naive;
    totals.ratios.extend(ratios);
    totals.ratios_long.extend(ratios_long);
    totals.waited.extend(waited);
    totals.traced_us += traced.iter().sum::<u64>();
    totals.untraced_us += run_all;
    totals.replay_us += replay_us;
    totals.run_all_us += run_all * replays as u64;
    totals.replays += replays;
}

fn main() {
    // `cargo bench` passes `--bench`; everything else names notebooks.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with("--"))
        .collect();
    let runtime: Runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| fail("runtime", e));
    let mut totals = Totals::default();
    let clock = Instant::now();
    for path in notebooks(&args) {
        runtime.block_on(bench(&path, &mut totals));
    }
    let worst = totals.ratios.iter().copied().fold(f64::NAN, f64::max);
    println!(
        "ALL: {} edits, {} true dependents: {} MISSED (must be 0), {} extra re-runs; static \
         analysis alone misses {}; re-running every later cell: {}",
        totals.edits, totals.truth, totals.missed, totals.extra, totals.static_missed, totals.naive
    );
    println!(
        "ALL: tracing overhead per cell: median {:.2}, worst {:.2} ({} cells); median {:.2} over \
         {} cells of 1 ms or more; total {:.2}",
        median(&mut totals.ratios),
        worst,
        totals.ratios.len(),
        median(&mut totals.ratios_long),
        totals.ratios_long.len(),
        totals.traced_us as f64 / totals.untraced_us.max(1) as f64
    );
    println!(
        "ALL: whole request traced/untraced (as the host waits, snapshots included): median \
         {:.2}, worst {:.2}",
        median(&mut totals.waited),
        totals.waited.iter().copied().fold(f64::NAN, f64::max)
    );
    if totals.replays > 0 {
        println!(
            "ALL: replay after a one-cell edit {:.1} ms against running everything {:.1} ms \
             (averages over {} edits); {:.1}s in all",
            totals.replay_us as f64 / totals.replays as f64 / 1000.0,
            totals.run_all_us as f64 / totals.replays as f64 / 1000.0,
            totals.replays,
            clock.elapsed().as_secs_f64()
        );
    }
    if totals.restored_cells > 0 {
        println!(
            "ALL: restoring the snapshotted outputs of {} cells took {:.1} ms, running them \
             {:.1} ms (restore/run {:.2})",
            totals.restored_cells,
            totals.restore_us as f64 / 1000.0,
            totals.recompute_us as f64 / 1000.0,
            totals.restore_us as f64 / totals.recompute_us.max(1) as f64
        );
        println!(
            "ALL: of those, the {} cells that ran 10 ms or more: restore {:.1} ms, run {:.1} ms \
             (restore/run {:.2})",
            totals.restored_long_cells,
            totals.restore_long_us as f64 / 1000.0,
            totals.recompute_long_us as f64 / 1000.0,
            totals.restore_long_us as f64 / totals.recompute_long_us.max(1) as f64
        );
    }
    if totals.missed > 0 {
        std::process::exit(1);
    }
}
