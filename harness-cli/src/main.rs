//! The `harness` command line.
//!
//! Each subcommand lives in its own module with an `Args` type and a `run`
//! function returning the process exit code; a new subcommand is a further
//! variant of [`Command`].

/// `print!` to stdout, without panicking when the reader has gone: see
/// [`out::stdout`].
macro_rules! out {
    ($($arg:tt)*) => { $crate::out::stdout(format_args!($($arg)*)) };
}

/// `println!` to stdout, without panicking when the reader has gone.
macro_rules! outln {
    ($($arg:tt)*) => { $crate::out::stdout(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `eprintln!`, without panicking when stderr is closed.
macro_rules! errln {
    ($($arg:tt)*) => { $crate::out::stderr(format_args!("{}\n", format_args!($($arg)*))) };
}

mod analyze;
mod bench;
mod input;
mod out;
mod run;
mod sessions;
mod studio;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Parsing allocates a box per AST node; mimalloc makes analysis about a
/// fifth faster than the system allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// harness: typed agent loops and a dependency-tracking Python executor.
#[derive(Debug, Parser)]
#[command(name = "harness", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Analyse a Python script split at `# %%` markers, or a notebook
    /// (.ipynb), and print each cell's reads, writes, mutations, imports,
    /// definitions, flags and dependencies as JSON.
    Analyze(analyze::Args),
    /// Run a `# %%` script or a notebook in a Python kernel, keeping the
    /// notebook in `.harness/code/<file stem>/` next to the file; later runs
    /// execute only the cells affected by edits and reuse the rest.
    Run(run::Args),
    /// Inspect the sessions of any store, read-only: `list`, `show SESSION`
    /// (the head, and the state as stored), `history SESSION`.
    Sessions(sessions::Args),
    /// Open a local web studio on any store, read-only: the sessions, each
    /// one's graph (as its checkpoints show it), timeline and state. Prints
    /// the URL, with its token, and serves until stopped.
    Studio(studio::Args),
    /// Measure analysis throughput over a list of files (used by
    /// benchmarks/analyze_throughput.py).
    #[command(hide = true)]
    BenchAnalyze(bench::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // On a stack that holds any analysis, so that cells are analysed in
    // place rather than handed to an analysis thread each.
    harness_code::with_analysis_stack(|| match cli.command {
        Command::Analyze(args) => analyze::run(&args),
        Command::Run(args) => run::run(&args),
        Command::Sessions(args) => sessions::run(args),
        Command::Studio(args) => studio::run(&args),
        Command::BenchAnalyze(args) => bench::run(&args),
    })
}
