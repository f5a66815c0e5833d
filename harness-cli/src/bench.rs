//! Hidden `harness bench-analyze LIST`: analysis throughput over the files
//! listed (one path per line) in LIST, printed as one JSON object.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use harness_code::{AnalysisOptions, analyze_cell, check_syntax};

/// Arguments of `harness bench-analyze`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// A text file with one Python file path per line (it and each file
    /// it lists: a regular file of at most 64 MiB; a listed file that is
    /// not one is counted as unreadable).
    list: PathBuf,
    /// Timed passes over all files; the fastest one is reported.
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// Time only the parser (no analysis), to see the parser's share.
    #[arg(long)]
    parse_only: bool,
}

pub(crate) fn run(args: &Args) -> ExitCode {
    let list = match crate::input::read_text(&args.list) {
        Ok(list) => list,
        Err(error) => {
            errln!("harness: {error}");
            return ExitCode::from(2);
        }
    };
    // Read everything first so that only analysis is timed.
    let mut sources = Vec::new();
    let mut unreadable = 0_usize;
    for path in list.lines().filter(|l| !l.trim().is_empty()) {
        match crate::input::read_text(std::path::Path::new(path)) {
            Ok(source) => sources.push(source),
            Err(_) => unreadable += 1,
        }
    }
    let bytes: usize = sources.iter().map(String::len).sum();
    let mut best = Duration::MAX;
    let mut errors = 0_usize;
    for _ in 0..args.rounds.max(1) {
        errors = 0;
        let start = Instant::now();
        for source in &sources {
            if args.parse_only {
                if check_syntax(source, AnalysisOptions::default()).is_err() {
                    errors += 1;
                }
                continue;
            }
            match analyze_cell(source) {
                Ok(analysis) => {
                    std::hint::black_box(analysis);
                }
                Err(_) => errors += 1,
            }
        }
        best = best.min(start.elapsed());
    }
    let seconds = best.as_secs_f64();
    let megabytes = bytes as f64 / 1e6;
    outln!(
        "{{\"files\": {}, \"unreadable\": {unreadable}, \"bytes\": {bytes}, \"errors\": {errors}, \"rounds\": {}, \"seconds\": {seconds:.6}, \"mb_per_s\": {:.3}}}",
        sources.len(),
        args.rounds.max(1),
        megabytes / seconds.max(f64::MIN_POSITIVE)
    );
    ExitCode::SUCCESS
}
