//! Python kernel and selective replay (needs `python3`).
//!
//! - `kernel/ping` and `kernel/trivial_cell`: one protocol round trip, and
//!   one cell `x = 1` through the whole path a notebook uses (capture, read
//!   tracking, summary, pickle + SHA-256 + blob write).
//! - `replay50/*`: a 50-cell script (6 branches of 8 cells over 20 000-float
//!   lists, plus a setup cell and a final aggregate). After a one-cell edit,
//!   `selective_*` is the notebook's replay (restore, cache keys, snapshots
//!   included); `run_all` is running all 50 cells again in a fresh namespace
//!   of an already started kernel ("restart and run all" without the
//!   restart). Compare the two for the ratio.
//!
//! `cargo bench -p harness-code --bench kernel`

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use harness_code::CellId;
use harness_code::Provenance;
use harness_code::kernel::{ExecuteOptions, Kernel, KernelConfig};
use harness_code::notebook::Notebook;
use tokio::runtime::Runtime;

const BRANCHES: usize = 6;
const DEPTH: usize = 8;

fn runtime() -> Runtime {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => panic!("runtime: {error}"),
    }
}

/// The 50 cells; `bump` changes the constant of cell (`branch`, `depth`).
fn script(edit: Option<(usize, usize, u64)>) -> Vec<String> {
    let mut cells = vec!["N = 20_000\nimport math".to_owned()];
    for b in 0..BRANCHES {
        cells.push(format!(
            "b{b}_0 = [float((i * {}) % 97) for i in range(N)]",
            b + 3
        ));
        for d in 1..DEPTH {
            let bump = match edit {
                Some((eb, ed, k)) if eb == b && ed == d => k,
                _ => 0,
            };
            cells.push(format!(
                "b{b}_{d} = [math.sqrt(v * v + {d}.0 + {bump}) for v in b{b}_{}]",
                d - 1
            ));
        }
    }
    let last: Vec<String> = (0..BRANCHES)
        .map(|b| format!("sum(b{b}_{})", DEPTH - 1))
        .collect();
    cells.push(format!("total = {}", last.join(" + ")));
    assert_eq!(cells.len(), 50);
    cells
}

fn cell_index(branch: usize, depth: usize) -> u32 {
    u32::try_from(1 + branch * DEPTH + depth).unwrap_or(0)
}

fn kernel_benches(c: &mut Criterion) {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let config = KernelConfig {
        blob_dir: Some(dir.path().join("blobs")),
        ..KernelConfig::default()
    };
    let mut kernel = rt
        .block_on(Kernel::spawn(config))
        .unwrap_or_else(|e| panic!("kernel: {e}"));
    let options = ExecuteOptions {
        declared: vec!["x".to_owned()],
        snapshot: true,
    };
    let mut group = c.benchmark_group("kernel");
    group.bench_function("ping", |b| {
        b.iter(|| rt.block_on(kernel.ping()).unwrap_or_else(|e| panic!("{e}")))
    });
    group.bench_function("trivial_cell", |b| {
        b.iter(|| {
            rt.block_on(kernel.execute_with(0, "x = 1", &options))
                .unwrap_or_else(|e| panic!("{e}"))
        })
    });
    group.finish();
}

fn replay_benches(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("replay50");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(8));

    // Baseline: every cell again, fresh namespace, kernel already running.
    let mut kernel = rt
        .block_on(Kernel::spawn(KernelConfig::default()))
        .unwrap_or_else(|e| panic!("kernel: {e}"));
    let cells = script(None);
    let plain = ExecuteOptions::default();
    group.bench_function("run_all", |b| {
        b.iter(|| {
            rt.block_on(async {
                kernel.reset().await.unwrap_or_else(|e| panic!("{e}"));
                for (i, cell) in cells.iter().enumerate() {
                    let id = u32::try_from(i).unwrap_or(0);
                    let result = kernel
                        .execute_with(id, cell, &plain)
                        .await
                        .unwrap_or_else(|e| panic!("{e}"));
                    assert!(result.is_ok(), "{:?}", result.error);
                }
            })
        })
    });

    for (name, branch, depth) in [
        ("selective_mid_branch", 2, 4),
        ("selective_branch_head", 3, 1),
    ] {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let mut notebook = Notebook::create(dir.path(), KernelConfig::default())
            .unwrap_or_else(|e| panic!("notebook: {e}"));
        for cell in script(None) {
            notebook
                .add_cell(cell, Provenance::now("bench", "cell"))
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let first = rt
            .block_on(notebook.replay())
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(first.succeeded());
        let cell = CellId::new(cell_index(branch, depth));
        let mut bump = 0;
        let mut executed = 0;
        group.bench_function(name, |b| {
            b.iter_custom(|iterations| {
                let mut total = Duration::ZERO;
                for _ in 0..iterations {
                    bump += 1;
                    let source = script(Some((branch, depth, bump)))[cell.get() as usize].clone();
                    let started = Instant::now();
                    notebook
                        .replace_cell(cell, source, Provenance::now("bench", "edit"))
                        .unwrap_or_else(|e| panic!("{e}"));
                    let report = rt
                        .block_on(notebook.replay())
                        .unwrap_or_else(|e| panic!("{e}"));
                    total += started.elapsed();
                    assert!(report.succeeded());
                    executed = report.executed().len();
                }
                total
            })
        });
        println!("{name}: {executed} of 50 cells executed per edit");
    }
    group.finish();
}

criterion_group!(benches, kernel_benches, replay_benches);
criterion_main!(benches);
