//! `harness analyze FILE [--dot] [--trace]`.

use std::path::PathBuf;
use std::process::ExitCode;

use harness_code::notebook::Notebook;
use harness_code::{
    AnalysisError, AnalysisOptions, CellAnalysis, CellId, CellTrace, CodeCell, ExecutionStateGraph,
    GraphError, Provenance, notebook_code_cells, split_percent_script,
};
use serde::Serialize;

/// Arguments of `harness analyze`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// A `.py` file (split into cells at `# %%` lines) or a `.ipynb` notebook:
    /// a regular file of at most 64 MiB.
    file: PathBuf,
    /// Print the cell graph in Graphviz DOT format instead of JSON.
    #[arg(long)]
    dot: bool,
    /// Add what each cell did in its last run by `harness run` (read from
    /// the notebook it keeps, see `--state`): the trace is shown with each
    /// cell whose code is unchanged since, and dependencies are those of
    /// the static analysis and the traces together.
    #[arg(long)]
    trace: bool,
    /// With `--trace`: the notebook directory `harness run --state` used
    /// (default: `.harness/code/<file stem>` next to the file).
    #[arg(long, requires = "trace")]
    state: Option<PathBuf>,
}

#[derive(Debug, Serialize)]
struct Report<'a> {
    file: String,
    format: &'static str,
    cells: Vec<CellReport<'a>>,
}

#[derive(Debug, Serialize)]
struct CellReport<'a> {
    /// 0-based cell index as the notebook numbers cells.
    cell: usize,
    /// 1-based line of the file where the cell's code starts.
    line: usize,
    /// The cell's id in the graph; parsed cells only.
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<CellId>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    skipped: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<AnalysisError>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    notes: Vec<String>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    analysis: Option<&'a CellAnalysis>,
    #[serde(skip_serializing_if = "Option::is_none")]
    defeats_analysis: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    depends_on: Option<Vec<DependsOn>>,
    /// What the cell did in its last run (`--trace`).
    #[serde(skip_serializing_if = "Option::is_none")]
    trace: Option<&'a CellTrace>,
}

#[derive(Debug, Serialize)]
struct DependsOn {
    cell: usize,
    id: CellId,
    names: Vec<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    explicit: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    conservative: bool,
    /// Names on the edge that only a trace gives.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    traced: Vec<String>,
}

/// `errln!` with the control characters of the text escaped
/// ([`crate::run::escape_controls`]): an error can quote the cell's source
/// or a trace file, which a model or a cell wrote.
macro_rules! say_err {
    ($($arg:tt)*) => { errln!("{}", crate::run::escape_controls(&format!($($arg)*))) };
}

pub(crate) fn run(args: &Args) -> ExitCode {
    let text = match crate::input::read_text(&args.file) {
        Ok(text) => text,
        Err(error) => {
            say_err!("harness: {error}");
            return ExitCode::from(2);
        }
    };
    let is_notebook = args
        .file
        .extension()
        .is_some_and(|ext| ext.eq_ignore_ascii_case("ipynb"));
    let cells = if is_notebook {
        match notebook_code_cells(&text) {
            Ok(cells) => cells,
            Err(error) => {
                say_err!("harness: {}: {error}", args.file.display());
                return ExitCode::from(2);
            }
        }
    } else {
        split_percent_script(&text)
    };

    let mut graph = ExecutionStateGraph::with_options(AnalysisOptions { ipython: true });
    // Graph ids are assigned to parsed cells only; map them back to cells.
    let mut index_of: Vec<usize> = Vec::new();
    let mut ids: Vec<Result<Option<CellId>, AnalysisError>> = Vec::new();
    for cell in &cells {
        if cell.skipped {
            ids.push(Ok(None));
            continue;
        }
        let provenance = Provenance::now("harness analyze", format!("cell {}", cell.index));
        match graph.add_cell(cell.source.clone(), provenance) {
            Ok(id) => {
                index_of.push(cell.index);
                ids.push(Ok(Some(id)));
            }
            Err(GraphError::Analysis { source, .. }) => ids.push(Err(source)),
            Err(error) => {
                say_err!("harness: internal error: {error}");
                return ExitCode::from(2);
            }
        }
    }
    if args.trace {
        match add_traces(args, &mut graph) {
            Ok(()) => {}
            Err(message) => {
                say_err!("harness: {message}");
                return ExitCode::from(2);
            }
        }
    }
    let had_errors = ids.iter().any(Result::is_err);
    for (cell, id) in cells.iter().zip(&ids) {
        if let Err(error) = id {
            say_err!(
                "harness: {}: cell {} (line {} of the file): {error}",
                args.file.display(),
                cell.index,
                cell.line
            );
        }
    }

    if args.dot {
        let dot = graph.to_dot_with_labels(|node| {
            let cell = index_of.get(node.id().get() as usize).copied().unwrap_or(0);
            let first_line = node
                .source()
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty() && !l.starts_with(['#', '%', '!']))
                .unwrap_or("");
            format!("cell {cell}: {first_line}")
        });
        out!("{dot}");
    } else {
        let reports = cells
            .iter()
            .zip(ids)
            .map(|(cell, id)| cell_report(&graph, &index_of, cell, id))
            .collect();
        let report = Report {
            file: args.file.display().to_string(),
            format: if is_notebook { "ipynb" } else { "percent" },
            cells: reports,
        };
        match serde_json::to_string_pretty(&report) {
            Ok(json) => outln!("{json}"),
            Err(error) => {
                say_err!("harness: cannot serialise the report: {error}");
                return ExitCode::from(2);
            }
        }
    }
    if had_errors {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

fn cell_report<'a>(
    graph: &'a ExecutionStateGraph,
    index_of: &[usize],
    cell: &CodeCell,
    id: Result<Option<CellId>, AnalysisError>,
) -> CellReport<'a> {
    let mut report = CellReport {
        cell: cell.index,
        line: cell.line,
        id: None,
        skipped: cell.skipped,
        error: None,
        notes: cell.notes.clone(),
        analysis: None,
        defeats_analysis: None,
        depends_on: None,
        trace: None,
    };
    let id = match id {
        Ok(Some(id)) => id,
        Ok(None) => return report,
        Err(error) => {
            report.error = Some(error);
            return report;
        }
    };
    let (Ok(node), Ok(dependencies)) = (graph.cell(id), graph.dependencies(id)) else {
        return report;
    };
    let analysis = node.analysis();
    for escape in &analysis.ipython_escapes {
        report.notes.push(format!(
            "skipped IPython command on line {}: {}",
            escape.line, escape.command
        ));
    }
    if analysis.defeats_analysis() {
        report
            .notes
            .push("defeats static analysis: depends on every earlier cell".to_owned());
    }
    let via_calls = &node.effects().via_calls;
    if !via_calls.is_empty() {
        let names: Vec<&str> = via_calls.iter().map(String::as_str).collect();
        report.notes.push(format!(
            "calls functions from earlier cells that change: {}",
            names.join(", ")
        ));
    }
    report.id = Some(id);
    report.trace = node.trace();
    report.analysis = Some(analysis);
    report.defeats_analysis = Some(analysis.defeats_analysis());
    report.depends_on = Some(
        dependencies
            .into_iter()
            .map(|(producer, dependency)| DependsOn {
                cell: index_of.get(producer.get() as usize).copied().unwrap_or(0),
                id: producer,
                names: dependency.names.iter().cloned().collect(),
                explicit: dependency.explicit,
                conservative: dependency.conservative,
                traced: dependency.traced.iter().cloned().collect(),
            })
            .collect(),
    );
    report
}

/// Gives each cell of `graph` the trace of its last run in the notebook
/// `harness run` keeps for the file, when that run was of the same code.
fn add_traces(args: &Args, graph: &mut ExecutionStateGraph) -> Result<(), String> {
    let state = match &args.state {
        Some(state) => state.clone(),
        None => {
            let file = std::path::absolute(&args.file).unwrap_or_else(|_| args.file.clone());
            let base = file
                .parent()
                .map(|dir| std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf()))
                .unwrap_or_default();
            base.join(".harness")
                .join("code")
                .join(crate::run::state_dir::state_name(&file))
        }
    };
    if !Notebook::exists(&state) {
        return Err(format!(
            "--trace: no notebook in {} (run the file with `harness run` first)",
            state.display()
        ));
    }
    // Only the graph is read: analyze never writes in the directory it
    // reads (opening the notebook would create its blob store).
    let stored_graph = Notebook::read_graph(&state).map_err(|error| format!("--trace: {error}"))?;
    let ids: Vec<CellId> = graph.cells().map(|node| node.id()).collect();
    for id in ids {
        let Ok(node) = graph.cell(id) else { continue };
        let source = node.source().to_owned();
        let stored = stored_graph.cell(id).ok();
        let Some(trace) = stored
            .filter(|stored| stored.source() == source)
            .and_then(|stored| stored.trace())
            .cloned()
        else {
            continue;
        };
        graph
            .record_trace(id, trace)
            .map_err(|error| format!("--trace: {error}"))?;
    }
    Ok(())
}
