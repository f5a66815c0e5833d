//! `harness analyze FILE [--dot]`.

use std::path::PathBuf;
use std::process::ExitCode;

use harness_code::{
    AnalysisError, AnalysisOptions, CellAnalysis, CellId, CodeCell, ExecutionStateGraph,
    GraphError, Provenance, notebook_code_cells, split_percent_script,
};
use serde::Serialize;

/// Arguments of `harness analyze`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// A `.py` file (split into cells at `# %%` lines) or a `.ipynb` notebook.
    file: PathBuf,
    /// Print the cell graph in Graphviz DOT format instead of JSON.
    #[arg(long)]
    dot: bool,
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
}

pub(crate) fn run(args: &Args) -> ExitCode {
    let text = match std::fs::read_to_string(&args.file) {
        Ok(text) => text,
        Err(error) => {
            errln!("harness: cannot read {}: {error}", args.file.display());
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
                errln!("harness: {}: {error}", args.file.display());
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
                errln!("harness: internal error: {error}");
                return ExitCode::from(2);
            }
        }
    }
    let had_errors = ids.iter().any(Result::is_err);
    for (cell, id) in cells.iter().zip(&ids) {
        if let Err(error) = id {
            errln!(
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
                errln!("harness: cannot serialise the report: {error}");
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
            })
            .collect(),
    );
    report
}
