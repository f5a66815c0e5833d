//! `harness-evals`: show, compare and line up eval reports.
//!
//! ```text
//! harness-evals show REPORT.json
//! harness-evals compare BASELINE.json CANDIDATE.json [--threshold X] [--json]
//! harness-evals side-by-side REPORT.json REPORT.json...
//! ```
//!
//! `compare` exits 1 when the candidate regressed: it lacks a case or an
//! evaluator the baseline has, or an evaluator's mean or a case's value
//! dropped by more than the threshold (default 0: any drop); it says why on
//! stderr, one line per reason. It exits 2 on a usage error (an unknown
//! option, `--threshold` given twice or not a number ≥ 0) or an unreadable
//! report.
//!
//! With `--json`, `compare` prints the comparison as JSON instead of its
//! table: the fields of `harness_evals::Comparison` (`baseline`,
//! `candidate`, `cases`, `means`, `missing_evaluators`) and the verdict
//! the exit status gives:
//!
//! ```text
//! {
//!   "baseline": "…", "candidate": "…", "cases": […], "means": […],
//!   "missing_evaluators": […],
//!   "threshold": 0.05,
//!   "regressed": true,
//!   "shortfalls": [{"kind": "case_dropped", "case": "…", "evaluator": "…",
//!                   "baseline": 1.0, "candidate": 0.0}, …],
//!   "reasons": ["case `…` dropped from 1 to 0 on evaluator `…`", …]
//! }
//! ```
//!
//! `regressed` is whether it exits 1; `shortfalls` are the reasons as
//! `harness_evals::Shortfall`s (tagged by `kind`), `reasons` the same as
//! the sentences printed on stderr.
//!
//! A reader that goes away early (`harness-evals compare a b | head -1`)
//! is no error: what is left of the output is dropped quietly and the
//! command exits as it would have (0, or 1 for a regressed comparison, so
//! that the verdict is not lost to the pipe). Any other failure to write to
//! stdout (a full disk) ends it with a message on stderr and status 2. A
//! failure to write to stderr is ignored: there is nowhere left to say it.

use std::fmt;
use std::io::{self, Write};
use std::process::{self, ExitCode};
use std::sync::atomic::{AtomicBool, Ordering};

use harness_evals::{Comparison, Report, side_by_side};

const USAGE: &str = "usage:
  harness-evals show REPORT.json
  harness-evals compare BASELINE.json CANDIDATE.json [--threshold X] [--json]
  harness-evals side-by-side REPORT.json REPORT.json...";

/// Whether stdout's reader has gone (a closed pipe): nothing more is
/// written to it.
static STDOUT_GONE: AtomicBool = AtomicBool::new(false);

/// Writes to stdout; see the module's docs for a failure.
fn stdout(text: fmt::Arguments<'_>) {
    if STDOUT_GONE.load(Ordering::Relaxed) {
        return;
    }
    let mut out = io::stdout().lock();
    if let Err(e) = out.write_fmt(text).and_then(|()| out.flush()) {
        if e.kind() == io::ErrorKind::BrokenPipe {
            STDOUT_GONE.store(true, Ordering::Relaxed);
            return;
        }
        stderr(format_args!("harness-evals: cannot write to stdout: {e}\n"));
        process::exit(2);
    }
}

/// Writes to stderr; a failure is ignored.
fn stderr(text: fmt::Arguments<'_>) {
    let mut err = io::stderr().lock();
    let _ = err.write_fmt(text).and_then(|()| err.flush());
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(code) => code,
        Err(message) => {
            stderr(format_args!("harness-evals: {message}\n"));
            ExitCode::from(2)
        }
    }
}

fn load(path: &str) -> Result<Report, String> {
    Report::load(path).map_err(|e| e.to_string())
}

fn run(args: &[String]) -> Result<ExitCode, String> {
    let Some((command, rest)) = args.split_first() else {
        return Err(USAGE.to_owned());
    };
    match command.as_str() {
        "show" => {
            let [path] = rest else {
                return Err(USAGE.to_owned());
            };
            stdout(format_args!("{}", load(path)?.table()));
            Ok(ExitCode::SUCCESS)
        }
        "compare" => {
            let mut files = Vec::new();
            let mut threshold = None;
            let mut json = false;
            let mut it = rest.iter();
            while let Some(arg) = it.next() {
                match arg.as_str() {
                    "--threshold" => {
                        let value = it
                            .next()
                            .ok_or("--threshold needs a value, e.g. --threshold 0.05")?;
                        if threshold.is_some() {
                            return Err(format!(
                                "--threshold is given twice; give it once\n{USAGE}"
                            ));
                        }
                        threshold = value
                            .parse::<f64>()
                            .ok()
                            .filter(|t| t.is_finite() && *t >= 0.0)
                            .ok_or_else(|| {
                                format!("--threshold {value:?}: give a number ≥ 0, e.g. 0.05")
                            })
                            .map(Some)?;
                    }
                    "--json" => json = true,
                    other if other.starts_with("--") => {
                        return Err(format!("unknown option {other}\n{USAGE}"));
                    }
                    file => files.push(file),
                }
            }
            let [baseline, candidate] = files[..] else {
                return Err(USAGE.to_owned());
            };
            let threshold = threshold.unwrap_or(0.0);
            let comparison = Comparison::new(&load(baseline)?, &load(candidate)?);
            let shortfalls = comparison
                .shortfalls(threshold)
                .map_err(|e| e.to_string())?;
            if json {
                let mut out = serde_json::to_value(&comparison).map_err(|e| e.to_string())?;
                if let serde_json::Value::Object(fields) = &mut out {
                    fields.insert("threshold".into(), threshold.into());
                    fields.insert("regressed".into(), (!shortfalls.is_empty()).into());
                    fields.insert(
                        "shortfalls".into(),
                        serde_json::to_value(&shortfalls).map_err(|e| e.to_string())?,
                    );
                    fields.insert(
                        "reasons".into(),
                        shortfalls.iter().map(|s| s.to_string()).collect(),
                    );
                }
                stdout(format_args!(
                    "{}\n",
                    serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?
                ));
            } else {
                stdout(format_args!("{}", comparison.table()));
            }
            if shortfalls.is_empty() {
                Ok(ExitCode::SUCCESS)
            } else {
                stderr(format_args!(
                    "harness-evals: the candidate regressed (threshold {threshold}):\n"
                ));
                for shortfall in &shortfalls {
                    stderr(format_args!("  - {shortfall}\n"));
                }
                Ok(ExitCode::from(1))
            }
        }
        "side-by-side" => {
            if rest.is_empty() {
                return Err(USAGE.to_owned());
            }
            let reports = rest
                .iter()
                .map(|p| load(p))
                .collect::<Result<Vec<_>, _>>()?;
            stdout(format_args!("{}", side_by_side(&reports)));
            Ok(ExitCode::SUCCESS)
        }
        "-h" | "--help" | "help" => {
            stdout(format_args!("{USAGE}\n"));
            Ok(ExitCode::SUCCESS)
        }
        other => Err(format!("unknown command {other:?}\n{USAGE}")),
    }
}
