//! Shared pieces of the benchmark programs behind `benchmarks/run`.
//!
//! Each program prints its figures as lines `RESULT <name> <value>`, which
//! `benchmarks/run` collects into one table beside LangGraph's; any other
//! line is commentary for a person reading the output.

/// Every benchmark program allocates through mimalloc, as the `harness`
/// CLI does, and as a service running thousands of sessions on one tokio
/// runtime would choose. With glibc's allocator, tasks that move between
/// the runtime's threads free memory another thread allocated, and each such
/// free takes the lock of that thread's arena: in the 10 000-run figure on
/// the log store, about 45% of the CPU went to `malloc` and `free` and
/// their lock, and the wall time was 2.8-3.0x the latency bound against
/// 1.6-2.0x with mimalloc, runs interleaved (see the performance guide).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// Prints one figure for `benchmarks/run`.
pub fn result(name: &str, value: f64) {
    println!("RESULT {name} {value}");
    let _ = std::io::stdout().flush();
}

/// The simulated model latency of step `step` of run `run`, in ms: spread
/// over 20..=50 ms by a fixed hash, the same in the LangGraph script
/// (`benchmarks/langgraph_scale.py`), so that both sides sleep alike.
pub fn model_latency_ms(run: u64, step: u64) -> u64 {
    20 + (run
        .wrapping_mul(7919)
        .wrapping_add(step.wrapping_mul(104_729)))
        % 31
}

/// The wall time no implementation can beat for `runs` concurrent runs of
/// `steps` model calls each: the longest run's total simulated latency.
pub fn latency_bound(runs: u64, steps: u64) -> Duration {
    let longest = (0..runs)
        .map(|r| (0..steps).map(|s| model_latency_ms(r, s)).sum::<u64>())
        .max()
        .unwrap_or(0);
    Duration::from_millis(longest)
}

/// This process's resident set size in bytes, from `/proc/self/status`
/// (`VmRSS`); `None` where that file is not there or not readable.
pub fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The CPU time (user and system) this process has used so far, from
/// `/proc/self/stat`, to the kernel's 10 ms tick; `None` where that file is
/// not there or not readable.
pub fn cpu_time() -> Option<Duration> {
    cpu_time_of("self")
}

/// The CPU time (user and system) process `pid` (a number, or `self`) has
/// used so far, from `/proc/{pid}/stat`, to the kernel's 10 ms tick; `None`
/// where that file is not there or not readable.
pub fn cpu_time_of(pid: &str) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name (which may hold spaces), from the
    // third on: utime and stime are the 14th and 15th.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    // USER_HZ is 100 on every Linux architecture the kernel exports it on.
    Some(Duration::from_millis((utime + stime) * 10))
}

/// The median time of writing 4 KiB and calling `fsync` on a file in
/// `dir`, over `samples` writes: the floor of one durable step on this
/// disk.
pub fn fsync_latency(dir: &Path, samples: usize) -> std::io::Result<Duration> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join("fsync-probe");
    let mut file = std::fs::File::create(&path)?;
    let block = [7u8; 4096];
    let mut times = Vec::with_capacity(samples);
    for _ in 0..samples.max(1) {
        let start = Instant::now();
        file.write_all(&block)?;
        file.sync_data()?;
        times.push(start.elapsed());
    }
    drop(file);
    std::fs::remove_file(&path)?;
    times.sort();
    Ok(times[times.len() / 2])
}

/// The bytes of every file under `dir`, recursively.
pub fn bytes_on_disk(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => bytes_on_disk(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// The `p`-th percentile (0..=100) of `sorted`, nearest rank; 0 when empty.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The value after `--name` in `args`, parsed; `default` when absent.
///
/// # Panics
///
/// When the value is there but does not parse: a benchmark run with a
/// mistyped size should stop, not run another size.
pub fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    match args.iter().position(|a| a == name) {
        Some(at) => match args.get(at + 1).map(|v| v.parse()) {
            Some(Ok(v)) => v,
            _ => panic!("{name} needs a value of the right kind"),
        },
        None => default,
    }
}

/// A fresh directory for a benchmark's database under `target/harness-bench` (or
/// `$HARNESS_BENCH_DIR`), emptied first.
pub fn scratch_dir(name: &str) -> std::path::PathBuf {
    let base = std::env::var_os("HARNESS_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from("target/harness-bench"));
    let dir = base.join(name);
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The store a benchmark program runs on, from `--store`: `sled` (the
/// embedded default, at `dir`), `log` (the log store, at `dir`) or
/// `memory` (no disk at all: the engine's own ceiling, for comparison).
///
/// # Panics
///
/// On another name, or when the database cannot be opened.
pub fn store(args: &[String], dir: &Path) -> std::sync::Arc<dyn harness::session::SessionStore> {
    match store_name(args).as_str() {
        "sled" => std::sync::Arc::new(
            harness_stores::SledStore::open(dir).expect("the sled database opens"),
        ),
        "log" => {
            std::sync::Arc::new(harness_stores::LogStore::open(dir).expect("the log store opens"))
        }
        "memory" => std::sync::Arc::new(harness_stores::MemoryStore::new()),
        other => panic!("unknown --store {other:?}: sled, log or memory"),
    }
}

/// The `--store` a program was given (default `sled`).
pub fn store_name(args: &[String]) -> String {
    arg(args, "--store", "sled".to_string())
}

/// The prefix of a program's figures on the store it was given: none for
/// sled (the figures the table has always had), `log_` for the log store,
/// `memory_` for the memory store.
pub fn figure_prefix(args: &[String]) -> String {
    match store_name(args).as_str() {
        "sled" => String::new(),
        other => format!("{other}_"),
    }
}
