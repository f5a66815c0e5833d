//! `harness run FILE`: run a `# %%` script or a notebook in a Python kernel,
//! re-executing only the cells affected since the last run.
//!
//! The notebook (graph, cell records, cached runs and blobs) is kept in
//! `.harness/code/<file stem>/` next to the file (the stem made safe: see
//! [`state_dir`]), so a later invocation, in a new process, compares the
//! file with what ran before, runs the changed cells and those whose inputs
//! changed, and reuses the rest. One run at a time uses a notebook
//! directory: a second is refused while the first holds its lock, and a
//! symbolic link at it (a cell can make one) is refused before anything is
//! written. What it prints for people has its control characters escaped
//! ([`escape_controls`]): cell output must not drive the terminal.
//!
//! A file with cells that do not parse is not run: each such cell is
//! reported with the line of the file. Cells that are not Python (`%%bash`)
//! and IPython lines (`!ls`, `%time`) are not run, and the listing says so
//! where they are; a notebook whose kernel runs another language is
//! refused.

pub(crate) mod state_dir;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use harness_code::kernel::KernelConfig;
use harness_code::notebook::Notebook;
use harness_code::replay::{ReplayAction, ReplayEntry, ReplayOptions, ReplayReason};
use harness_code::{
    AnalysisError, AnalysisOptions, CellId, CodeCell, Provenance, notebook_code_cells,
    split_percent_script,
};

/// `outln!` for people: the line with its control characters escaped
/// ([`escape_controls`]). Only `--json` output is printed as it is.
macro_rules! say {
    ($($arg:tt)*) => { outln!("{}", escape_controls(&format!($($arg)*))) };
}

/// `errln!` for people, escaped as `say!` is.
macro_rules! say_err {
    ($($arg:tt)*) => { errln!("{}", escape_controls(&format!($($arg)*))) };
}

/// Arguments of `harness run`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// A `.py` file (split into cells at `# %%` lines) or a `.ipynb` notebook:
    /// a regular file of at most 64 MiB.
    file: PathBuf,
    /// Where the notebook is kept (default: `.harness/code/<file stem>`
    /// next to the file). A directory holding anything else than what
    /// harness writes there is refused.
    #[arg(long)]
    state: Option<PathBuf>,
    /// Per-cell time limit in seconds (0: none); a cell over it is killed
    /// (the kernel restarts and later cells restore what they need).
    #[arg(long, default_value_t = 600.0, value_parser = parse_timeout)]
    timeout: f64,
    /// Memory limit of the kernel in MiB (RLIMIT_AS), from 1 MiB; default
    /// 8192.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=MAX_MEMORY_MB))]
    memory_mb: Option<u64>,
    /// The Python interpreter.
    #[arg(long, default_value = "python3")]
    python: PathBuf,
    /// A command to run the kernel under (split at spaces), e.g.
    /// `--prefix "bwrap --ro-bind / / --dev /dev --"`.
    #[arg(long)]
    prefix: Option<String>,
    /// Run every stale cell even if a cached run with the same code and
    /// inputs exists.
    #[arg(long)]
    no_cache: bool,
    /// Forget the stored notebook and run everything: deletes only the
    /// notebook's own files, and nothing if the directory holds anything
    /// else.
    #[arg(long)]
    fresh: bool,
    /// Do not print the cells' output.
    #[arg(long, short)]
    quiet: bool,
    /// Print the replay report as JSON instead.
    #[arg(long)]
    json: bool,
}

/// The largest memory limit in MiB whose size in bytes fits a `u64`.
const MAX_MEMORY_MB: u64 = u64::MAX >> 20;

/// The longest per-cell time limit: a year. Longer is surely a typo, and
/// `inf` or `NaN` is no number of seconds.
const MAX_TIMEOUT_SECS: f64 = 365.0 * 86_400.0;

/// `--timeout`: a finite number of seconds from 0 (no limit) to a year.
fn parse_timeout(text: &str) -> Result<f64, String> {
    let secs: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a number of seconds"))?;
    if !secs.is_finite() || !(0.0..=MAX_TIMEOUT_SECS).contains(&secs) {
        return Err(format!(
            "`{text}` is out of range: give seconds from 0 (no limit) to {MAX_TIMEOUT_SECS}"
        ));
    }
    Ok(secs)
}

pub(crate) fn run(args: &Args) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            say_err!("harness: cannot start the async runtime: {error}");
            return ExitCode::from(2);
        }
    };
    runtime.block_on(run_async(args))
}

/// The code cells of `file`, skipped ones (`%%bash`) included; a notebook
/// whose kernel runs another language than Python is refused.
fn cells_of(file: &Path) -> Result<(Vec<CodeCell>, bool), String> {
    let text = crate::input::read_text(file).map_err(|error| error.to_string())?;
    let is_notebook = file
        .extension()
        .is_some_and(|ext| ext.eq_ignore_ascii_case("ipynb"));
    if !is_notebook {
        return Ok((split_percent_script(&text), false));
    }
    let cells =
        notebook_code_cells(&text).map_err(|error| format!("{}: {error}", file.display()))?;
    if let Some(language) = crate::input::notebook_language(&text)
        && !language.eq_ignore_ascii_case("python")
    {
        return Err(format!(
            "{}: the notebook's kernel runs {language}, not Python; harness run runs Python cells only",
            file.display()
        ));
    }
    Ok((cells, true))
}

/// Every cell that does not parse, each said with where it is: a notebook
/// with a syntax error is not run, as a script with one would not be.
fn syntax_errors(file: &Path, cells: &[CodeCell], is_notebook: bool) -> Vec<String> {
    let options = AnalysisOptions { ipython: true };
    cells
        .iter()
        .filter(|cell| !cell.skipped)
        .filter_map(|cell| {
            let error = harness_code::analyze_cell_with(&cell.source, options).err()?;
            // A notebook's cells are texts of their own; a script's cell
            // starts at `cell.line` of the file.
            Some(match (&error, is_notebook) {
                (_, true) => format!("{}: cell {}: {error}", file.display(), cell.index),
                (
                    AnalysisError::Syntax {
                        line,
                        column,
                        message,
                    },
                    false,
                ) => format!(
                    "{}: cell {}: syntax error at line {}, column {column}: {message}",
                    file.display(),
                    cell.index,
                    cell.line + usize::try_from(*line).unwrap_or(1) - 1
                ),
                (_, false) => format!(
                    "{}: cell {} (from line {} of the file): {error}",
                    file.display(),
                    cell.index,
                    cell.line
                ),
            })
        })
        .collect()
}

async fn run_async(args: &Args) -> ExitCode {
    let (all, is_notebook) = match cells_of(&args.file) {
        Ok(found) => found,
        Err(message) => {
            say_err!("harness: {message}");
            return ExitCode::from(2);
        }
    };
    let errors = syntax_errors(&args.file, &all, is_notebook);
    if !errors.is_empty() {
        for error in &errors {
            say_err!("harness: {error}");
        }
        say_err!(
            "harness: nothing was run: fix the {} above first",
            if errors.len() == 1 {
                "cell".to_owned()
            } else {
                format!("{} cells", errors.len())
            }
        );
        return ExitCode::from(1);
    }
    let cells: Vec<CodeCell> = all.iter().filter(|c| !c.skipped).cloned().collect();
    let file = std::path::absolute(&args.file).unwrap_or_else(|_| args.file.clone());
    // The script's directory as the file system resolves it (`a/../b.py`
    // is next to `b.py`).
    let base = file
        .parent()
        .map(|dir| std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf()))
        .unwrap_or_default();
    let state = args.state.clone().unwrap_or_else(|| {
        base.join(".harness")
            .join("code")
            .join(state_dir::state_name(&file))
    });
    if let Some(link) = linked_state(&base, &state, args.state.is_none()) {
        say_err!(
            "harness: {} is a symbolic link; harness run does not follow a link to its notebook \
             directory (a cell can make one): remove it, or give a real directory as --state",
            link.display()
        );
        return ExitCode::from(2);
    }
    // Held until the run is saved: no other run uses the directory.
    let _claimed = match state_dir::StateDir::claim(&state, args.fresh, &file) {
        Ok(claimed) => claimed,
        Err(error) => {
            say_err!("harness: {error}");
            return ExitCode::from(2);
        }
    };
    let config = KernelConfig {
        python: args.python.clone(),
        timeout: (args.timeout > 0.0).then(|| Duration::from_secs_f64(args.timeout)),
        // The parser bounds it, so the product fits.
        memory_limit: args
            .memory_mb
            .map(|mb| mb.saturating_mul(1 << 20))
            .or(KernelConfig::default().memory_limit),
        working_dir: Some(base.clone()),
        command_prefix: args
            .prefix
            .as_deref()
            .map(|p| p.split_whitespace().map(Into::into).collect())
            .unwrap_or_default(),
        ..KernelConfig::default()
    };
    let opened = if Notebook::exists(&state) {
        Notebook::open(&state, config)
    } else {
        Notebook::create_with(&state, config, AnalysisOptions { ipython: true })
    };
    let mut notebook = match opened {
        Ok(notebook) => notebook,
        Err(error) => {
            say_err!("harness: {error}");
            return ExitCode::from(2);
        }
    };
    let sources: Vec<String> = cells.iter().map(|c| c.source.clone()).collect();
    let sync = notebook.sync_sources(&sources, |index| {
        let cell = cells.get(index).map_or(index, |c| c.index);
        Provenance::now("harness run", format!("cell {cell} of {}", file.display()))
    });
    if let Err(error) = sync {
        say_err!("harness: {}: {error}", args.file.display());
        return ExitCode::from(1);
    }
    let options = ReplayOptions {
        from: None,
        use_cache: !args.no_cache,
    };
    let report = match notebook.replay_with(options).await {
        Ok(report) => report,
        Err(error) => {
            say_err!("harness: {error}");
            notebook.shutdown().await;
            return ExitCode::from(2);
        }
    };
    // What the kernel could not set up (a limit root is not held to, say)
    // is the user's to know.
    let warnings = notebook
        .kernel()
        .map(|kernel| kernel.info().warnings.clone())
        .unwrap_or_default();
    notebook.shutdown().await;
    for warning in &warnings {
        say_err!("harness: warning: the kernel: {warning}");
    }
    if let Err(error) = notebook.save() {
        say_err!("harness: cannot save the notebook: {error}");
    }

    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(json) => outln!("{json}"),
            Err(error) => say_err!("harness: cannot serialise the report: {error}"),
        }
    } else {
        let shown_state = shown_path(&state, args.file.is_relative());
        let skipped = all.len() - cells.len();
        say!(
            "harness run {} ({} cells{}, notebook in {})",
            args.file.display(),
            all.len(),
            if skipped > 0 {
                format!(", {skipped} not Python")
            } else {
                String::new()
            },
            shown_state.display()
        );
        let cell_of: BTreeMap<CellId, &CodeCell> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| (CellId::new(u32::try_from(i).unwrap_or(u32::MAX)), c))
            .collect();
        // In the file's order: the cells that ran or were reused, and those
        // skipped because they are not Python.
        let mut entries = report.entries.iter().peekable();
        for cell in &all {
            if cell.skipped {
                say!(
                    "cell {:<3} line {:<4} skipped   {}",
                    cell.index,
                    cell.line,
                    cell.notes.join("; ")
                );
                continue;
            }
            while let Some(entry) =
                entries.next_if(|e| cell_of.get(&e.cell).is_some_and(|c| c.index <= cell.index))
            {
                print_entry(&notebook, entry, &cell_of, args.quiet);
            }
        }
        for entry in entries {
            print_entry(&notebook, entry, &cell_of, args.quiet);
        }
        let count = |action| report.entries.iter().filter(|e| e.action == action).count();
        let up_to_date = report
            .entries
            .iter()
            .filter(|e| e.reason == ReplayReason::UpToDate)
            .count();
        let blocked = count(ReplayAction::Skipped) - up_to_date;
        let mut summary = format!(
            "{} executed, {} reused ({up_to_date} up to date, {} from the cache)",
            count(ReplayAction::Executed),
            up_to_date + count(ReplayAction::Reused),
            count(ReplayAction::Reused),
        );
        if blocked > 0 {
            summary.push_str(&format!(", {blocked} not run"));
        }
        summary.push_str(&format!(
            ", {} failed; {:.1} ms",
            report.failed().len(),
            report.duration_us as f64 / 1000.0
        ));
        if report.kernel_start_us > 0 {
            summary.push_str(&format!(
                " (kernel start {:.1} ms)",
                report.kernel_start_us as f64 / 1000.0
            ));
        }
        say!("{summary}");
    }
    if report.succeeded() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// The first symbolic link among the notebook directory `state` and, for
/// the default one, `.harness` and `.harness/code` above it in `base`.
/// The directory is under the kernel's working directory, so a cell can
/// put a link there, and the run would then write its lock, blobs and
/// notebook wherever it points.
fn linked_state(base: &Path, state: &Path, default: bool) -> Option<PathBuf> {
    let harness = base.join(".harness");
    let mut paths = vec![state.to_path_buf()];
    if default {
        paths.extend([harness.join("code"), harness]);
    }
    paths.into_iter().rev().find(|path| {
        std::fs::symlink_metadata(path).is_ok_and(|meta| meta.file_type().is_symlink())
    })
}

fn cell_name(cell_of: &BTreeMap<CellId, &CodeCell>, cell: CellId) -> String {
    cell_of
        .get(&cell)
        .map_or_else(|| format!("cell {cell}"), |c| format!("cell {}", c.index))
}

fn reason_text(reason: &ReplayReason, cell_of: &BTreeMap<CellId, &CodeCell>) -> String {
    match reason {
        ReplayReason::InputsChanged { changes } => {
            let parts: Vec<String> = changes
                .iter()
                .map(|change| match change.producer {
                    Some(cell) => format!("{} (from {})", change.name, cell_name(cell_of, cell)),
                    None => format!("{} (no longer produced)", change.name),
                })
                .collect();
            format!("input changed: {}", parts.join(", "))
        }
        ReplayReason::UpstreamNotOk { cell, status } => format!(
            "not run: depends on {}, which is {status:?}",
            cell_name(cell_of, *cell)
        )
        .to_lowercase(),
        ReplayReason::UpToDate => "code and inputs unchanged since it last ran".to_owned(),
        other => other.to_string(),
    }
}

fn print_entry(
    notebook: &Notebook,
    entry: &ReplayEntry,
    cell_of: &BTreeMap<CellId, &CodeCell>,
    quiet: bool,
) {
    let (index, line) = cell_of
        .get(&entry.cell)
        .map_or((0, 0), |c| (c.index, c.line));
    let action = match (entry.action, &entry.reason) {
        (ReplayAction::Skipped, ReplayReason::UpToDate) => "reused",
        (ReplayAction::Skipped, _) => "skipped",
        (ReplayAction::Executed, _) if entry.error.is_some() => "FAILED",
        (action, _) => match action {
            ReplayAction::Executed => "executed",
            ReplayAction::Reused => "reused",
            ReplayAction::Skipped => "skipped",
        },
    };
    let timing = if entry.action == ReplayAction::Executed {
        format!("  [{:.1} ms]", entry.duration_us as f64 / 1000.0)
    } else {
        String::new()
    };
    say!(
        "cell {index:<3} line {line:<4} {action:<9} {}{timing}",
        reason_text(&entry.reason, cell_of)
    );
    if let Some(cell) = cell_of.get(&entry.cell) {
        for note in &cell.notes {
            say!("                    note: {note}");
        }
    }
    if let Ok(node) = notebook.graph().cell(entry.cell) {
        for escape in &node.analysis().ipython_escapes {
            say!(
                "                    note: IPython command on line {} not run: {}",
                escape.line,
                escape.command
            );
        }
    }
    if !entry.restored.is_empty() || !entry.recomputed.is_empty() {
        let mut parts = Vec::new();
        if !entry.restored.is_empty() {
            parts.push(format!("restored {}", entry.restored.join(", ")));
        }
        if !entry.recomputed.is_empty() {
            let cells: Vec<String> = entry
                .recomputed
                .iter()
                .map(|s| cell_name(cell_of, *s))
                .collect();
            parts.push(format!("re-ran {} to recompute inputs", cells.join(", ")));
        }
        say!("                    ({})", parts.join("; "));
    }
    if entry.action != ReplayAction::Executed {
        return;
    }
    let Some(record) = notebook.record(entry.cell) else {
        return;
    };
    if let Some(check) = &record.read_check
        && !check.is_consistent()
    {
        let names: Vec<&str> = check.unexpected.iter().map(String::as_str).collect();
        say!(
            "                    note: read {} that the static analysis did not predict; now a dependency",
            names.join(", ")
        );
    }
    if let Some(trace) = &record.trace {
        let analysis = notebook.graph().cell(entry.cell).ok().map(|n| n.analysis());
        for text in trace_lines(trace, analysis) {
            say!("                    {text}");
        }
    }
    if quiet {
        return;
    }
    let mut shown = record.stdout.to_string();
    let stderr = record.stderr.to_string();
    // A truncated stdout ends with its note, not a line break: stderr
    // starts on a line of its own.
    if record.stdout.truncated && !stderr.is_empty() {
        shown.push('\n');
    }
    shown.push_str(&stderr);
    if let Some(display) = &record.display {
        if !shown.is_empty() && !shown.ends_with('\n') {
            shown.push('\n');
        }
        shown.push_str(display);
    }
    if let Some(error) = &entry.error {
        if !shown.is_empty() && !shown.ends_with('\n') {
            shown.push('\n');
        }
        shown.push_str(error);
    }
    for text_line in shown.lines() {
        say!("    | {text_line}");
    }
}

/// At most this many names of a list are printed; the rest are counted.
const SHOWN_NAMES: usize = 8;

fn name_list<'a>(names: impl IntoIterator<Item = &'a String>) -> String {
    let names: Vec<&str> = names.into_iter().map(String::as_str).collect();
    let mut text = names
        .iter()
        .take(SHOWN_NAMES)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > SHOWN_NAMES {
        text.push_str(&format!(" (+{} more)", names.len() - SHOWN_NAMES));
    }
    text
}

/// What a traced run did, in one line, and a note for what the static
/// analysis did not predict (the graph now links those through the trace).
pub(crate) fn trace_lines(
    trace: &harness_code::CellTrace,
    analysis: Option<&harness_code::CellAnalysis>,
) -> Vec<String> {
    let mut parts = Vec::new();
    for (label, names) in [
        ("read", &trace.reads),
        ("bound", &trace.bound),
        ("deleted", &trace.deleted),
        ("changed in place", &trace.mutated),
        ("read files", &trace.files_read),
        ("wrote files", &trace.files_written),
        ("imported", &trace.imports),
    ] {
        if !names.is_empty() {
            parts.push(format!("{label} {}", name_list(names)));
        }
    }
    let mut lines = Vec::new();
    if !parts.is_empty() {
        lines.push(format!("did: {}", parts.join("; ")));
    }
    if let Some(analysis) = analysis {
        let unseen: Vec<&String> = trace
            .mutated
            .iter()
            .filter(|name| {
                !analysis.mutations.contains(*name)
                    && !analysis.writes.contains(*name)
                    && !analysis.deletes.contains(*name)
            })
            .collect();
        if !unseen.is_empty() {
            lines.push(format!(
                "note: changed {} in place, which the static analysis did not see; later readers now depend on this cell",
                name_list(unseen)
            ));
        }
    }
    if trace.dropped > 0 {
        lines.push(format!(
            "note: the trace is incomplete ({} entries over its bounds)",
            trace.dropped
        ));
    }
    lines
}

/// `text` with every control character but newline and tab (C0, DEL, C1)
/// shown as text: `\x1b`, `\x0d`, `\u{9b}`. What `harness run` prints for
/// people holds text a cell chose (its output, its error, the names of the
/// files it wrote): on a terminal, control sequences in it would clear the
/// screen, move the cursor to overwrite earlier lines or the summary, set
/// the window title or the clipboard (OSC 52).
pub(crate) fn escape_controls(text: &str) -> Cow<'_, str> {
    let escaped = |c: char| c.is_control() && c != '\n' && c != '\t';
    if !text.chars().any(escaped) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if !escaped(c) {
            out.push(c);
        } else if u32::from(c) < 0x80 {
            let _ = write!(out, "\\x{:02x}", u32::from(c));
        } else {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        }
    }
    Cow::Owned(out)
}

/// `path` as the user reaches it: as it is when absolute and the user
/// wrote absolute paths (`relative` false), else relative to the current
/// directory when under it (a relative `--state` as given).
fn shown_path(path: &Path, relative: bool) -> PathBuf {
    if path.is_relative() || !relative {
        return path.to_path_buf();
    }
    std::env::current_dir()
        .and_then(std::fs::canonicalize)
        .ok()
        .and_then(|cwd| path.strip_prefix(cwd).ok().map(Path::to_path_buf))
        .filter(|rel| !rel.as_os_str().is_empty())
        .unwrap_or_else(|| path.to_path_buf())
}
