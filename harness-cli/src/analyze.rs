//! `harness analyze FILE [--dot]`.

use std::path::PathBuf;
use std::process::ExitCode;

use harness_code::{
    AnalysisError, AnalysisOptions, CodeCell, ExecutionStateGraph, GraphError, Provenance,
    StepAnalysis, StepId, notebook_code_cells, split_percent_script,
};
use serde::Serialize;

/// Arguments of `harness analyze`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// A `.py` file (split into steps at `# %%` lines) or a `.ipynb` notebook.
    file: PathBuf,
    /// Print the step graph in Graphviz DOT format instead of JSON.
    #[arg(long)]
    dot: bool,
}

#[derive(Debug, Serialize)]
struct Report<'a> {
    file: String,
    format: &'static str,
    steps: Vec<CellReport<'a>>,
}

#[derive(Debug, Serialize)]
struct CellReport<'a> {
    /// 0-based cell index as the notebook numbers cells.
    cell: usize,
    /// 1-based line of the file where the cell's code starts.
    line: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    step: Option<StepId>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    skipped: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<AnalysisError>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    notes: Vec<String>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    analysis: Option<&'a StepAnalysis>,
    #[serde(skip_serializing_if = "Option::is_none")]
    defeats_analysis: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    depends_on: Option<Vec<DependsOn>>,
}

#[derive(Debug, Serialize)]
struct DependsOn {
    cell: usize,
    step: StepId,
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
            eprintln!("harness: cannot read {}: {error}", args.file.display());
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
                eprintln!("harness: {}: {error}", args.file.display());
                return ExitCode::from(2);
            }
        }
    } else {
        split_percent_script(&text)
    };

    let mut graph = ExecutionStateGraph::with_options(AnalysisOptions { ipython: true });
    // Step ids are assigned to parsed cells only; map them back to cells.
    let mut step_cells: Vec<usize> = Vec::new();
    let mut cell_steps: Vec<Result<Option<StepId>, AnalysisError>> = Vec::new();
    for cell in &cells {
        if cell.skipped {
            cell_steps.push(Ok(None));
            continue;
        }
        let provenance = Provenance::now("harness analyze", format!("cell {}", cell.index));
        match graph.add_step(cell.source.clone(), provenance) {
            Ok(step) => {
                step_cells.push(cell.index);
                cell_steps.push(Ok(Some(step)));
            }
            Err(GraphError::Analysis { source, .. }) => cell_steps.push(Err(source)),
            Err(error) => {
                eprintln!("harness: internal error: {error}");
                return ExitCode::from(2);
            }
        }
    }
    let had_errors = cell_steps.iter().any(Result::is_err);

    if args.dot {
        let dot = graph.to_dot_with_labels(|node| {
            let cell = step_cells
                .get(node.id().get() as usize)
                .copied()
                .unwrap_or(0);
            let first_line = node
                .source()
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty() && !l.starts_with(['#', '%', '!']))
                .unwrap_or("");
            format!("cell {cell}: {first_line}")
        });
        print!("{dot}");
    } else {
        let steps = cells
            .iter()
            .zip(cell_steps)
            .map(|(cell, step)| cell_report(&graph, &step_cells, cell, step))
            .collect();
        let report = Report {
            file: args.file.display().to_string(),
            format: if is_notebook { "ipynb" } else { "percent" },
            steps,
        };
        match serde_json::to_string_pretty(&report) {
            Ok(json) => println!("{json}"),
            Err(error) => {
                eprintln!("harness: cannot serialise the report: {error}");
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
    step_cells: &[usize],
    cell: &CodeCell,
    step: Result<Option<StepId>, AnalysisError>,
) -> CellReport<'a> {
    let mut report = CellReport {
        cell: cell.index,
        line: cell.line,
        step: None,
        skipped: cell.skipped,
        error: None,
        notes: cell.notes.clone(),
        analysis: None,
        defeats_analysis: None,
        depends_on: None,
    };
    let step = match step {
        Ok(Some(step)) => step,
        Ok(None) => return report,
        Err(error) => {
            report.error = Some(error);
            return report;
        }
    };
    let (Ok(node), Ok(dependencies)) = (graph.step(step), graph.dependencies(step)) else {
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
            .push("defeats static analysis: depends on every earlier step".to_owned());
    }
    let via_calls = &node.effects().via_calls;
    if !via_calls.is_empty() {
        let names: Vec<&str> = via_calls.iter().map(String::as_str).collect();
        report.notes.push(format!(
            "calls functions from earlier steps that change: {}",
            names.join(", ")
        ));
    }
    report.step = Some(step);
    report.analysis = Some(analysis);
    report.defeats_analysis = Some(analysis.defeats_analysis());
    report.depends_on = Some(
        dependencies
            .into_iter()
            .map(|(producer, dependency)| DependsOn {
                cell: step_cells
                    .get(producer.get() as usize)
                    .copied()
                    .unwrap_or(0),
                step: producer,
                names: dependency.names.iter().cloned().collect(),
                explicit: dependency.explicit,
                conservative: dependency.conservative,
            })
            .collect(),
    );
    report
}
