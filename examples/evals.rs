//! Evals: a calculator agent (the kit's tool loop with `add` and
//! `multiply`) over a dataset of 20 questions, scored on its answer, its
//! tool calls, its steps and its budget; then the same runs re-scored
//! offline and replayed exactly from the report.
//!
//! ```text
//! cargo run -p harness-examples --example evals                  # scripted model
//! HARNESS_PROVIDER=openai OPENAI_BASE_URL=$HARNESS_LLM_URL HARNESS_MODEL=$HARNESS_LLM_MODEL \
//!     cargo run -p harness-examples --example evals                # a real one
//! cargo run -p harness-examples --example evals -- --baseline old.json --threshold 0.05
//! HARNESS_PROVIDER=openai cargo run -p harness-examples --example evals -- --models gpt-4o-mini,gpt-4.1-mini
//! ```
//!
//! It writes `evals-report.json` in the working directory (`--out FILE`
//! elsewhere); `harness-evals show|compare` read it. With `--baseline`, it
//! compares with an earlier report and exits 1 on a regression beyond the
//! threshold. With `--models a,b,…` it runs the same cases on each model of
//! the provider (`scripted` among them runs the script) and prints them side
//! by side, a report per model (`evals-report-{model}.json`).
//!
//! A usage error exits 2 before any case runs: an unknown argument, a
//! `--threshold` that is not a number ≥ 0, a `--baseline` that cannot be
//! read as a report, an `--out` that cannot be written (`--help` prints
//! the usage).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use harness::llm::{Expect, ModelResponse, ScriptedModel, Tool, ToolCall, ToolSet};
use harness::{Harness, create_agent_with};
use harness_evals::{
    Budget, CaseCx, Comparison, Dataset, Evaluators, Experiment, Match, NumericTolerance, Report,
    StepTrajectory, TaskError, ToolTrajectory, side_by_side, task_fn,
};
use harness_examples::args::{Args, Usage};
use harness_examples::providers_select::{model_from_env, select};
use harness_kit::{AgentChat, AgentLoop, Limits, ModelDeps, ModelDepsAgent};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// What a case expects: the answer, and the tool calls on the way.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Expected {
    answer: f64,
    tools: Vec<ExpectedTool>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct ExpectedTool {
    name: String,
    args: Value,
}

#[derive(Deserialize, JsonSchema)]
struct Operands {
    /// The first number.
    a: f64,
    /// The second number.
    b: f64,
}

/// A number as a person writes it: `42`, not `42.0`.
fn show(n: f64) -> String {
    if n == n.trunc() && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

struct Arithmetic {
    name: &'static str,
    description: &'static str,
    op: fn(f64, f64) -> f64,
}

#[async_trait::async_trait]
impl Tool for Arithmetic {
    type Args = Operands;
    type Output = String;
    type Error = std::convert::Infallible;
    fn name(&self) -> &str {
        self.name
    }
    fn description(&self) -> &str {
        self.description
    }
    async fn call(&self, args: Operands) -> Result<String, Self::Error> {
        Ok(show((self.op)(args.a, args.b)))
    }
}

fn calculator() -> Result<Harness<AgentChat, ModelDeps>, Box<dyn std::error::Error>> {
    let tools = ToolSet::new()
        .with(Arithmetic {
            name: "add",
            description: "Adds two numbers: a + b",
            op: |a, b| a + b,
        })
        .with(Arithmetic {
            name: "multiply",
            description: "Multiplies two numbers: a × b",
            op: |a, b| a * b,
        });
    Ok(AgentLoop::<AgentChat, ModelDeps>::new(tools)
        .system(
            "You are a calculator. Use the add and multiply tools for every sum and product, \
             one call at a time. Then answer with the number alone.",
        )
        .limits(Limits::none().turns(6))
        .max_output_tokens(120)
        .builder()
        .build()?)
}

/// Offline, a scripted model plays a careful agent: the expected tool calls
/// in order, then the answer. Cases run one at a time, in dataset order.
fn scripted(dataset: &Dataset<String, Expected>) -> ScriptedModel {
    let mut turns = Vec::new();
    for case in &dataset.cases {
        let Some(expected) = &case.expected else {
            continue;
        };
        for (i, tool) in expected.tools.iter().enumerate() {
            let call = ToolCall::new(format!("{}-{i}", case.name), &tool.name, tool.args.clone());
            turns.push(Expect::any().reply(ModelResponse::from_tool_call(call)));
        }
        turns.push(Expect::any().reply(ModelResponse::from_text(show(expected.answer))));
    }
    ScriptedModel::new(turns)
}

const USAGE: Usage = Usage {
    synopsis: "usage: evals [--out FILE] [--baseline FILE [--threshold X]]
       evals --models A,B,...",
    options: "  --out FILE        where to write the report (default evals-report.json)
  --baseline FILE   compare with this earlier report; exit 1 on a regression
  --threshold X     how far a score may drop before it is a regression: a number
                    ≥ 0 (default 0: any drop)
  --models A,B,...  the same cases on each model of HARNESS_PROVIDER (scripted among
                    them runs the script), side by side; a report per model,
                    evals-report-MODEL.json",
};

struct Options {
    models: Vec<String>,
    out: PathBuf,
    /// The earlier report, read before any case runs.
    baseline: Option<Report>,
    threshold: f64,
}

/// The options; a usage error (an unreadable baseline, an `--out` that
/// cannot be written among them: found before the cases run) exits 2.
fn options() -> Options {
    let (mut models, mut out, mut baseline, mut threshold) = (None, None, None, None);
    let mut args = Args::from_env(USAGE);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--out" => out = Some(PathBuf::from(args.value("--out"))),
            "--models" => {
                let list: Vec<String> = args
                    .value("--models")
                    .split(',')
                    .map(|m| m.trim().to_owned())
                    .filter(|m| !m.is_empty())
                    .collect();
                if list.is_empty() {
                    USAGE.fail("--models needs model names, separated by commas");
                }
                models = Some(list);
            }
            "--baseline" => baseline = Some(PathBuf::from(args.value("--baseline"))),
            "--threshold" => {
                threshold = Some(args.number(
                    "--threshold",
                    "a number ≥ 0, e.g. 0.05",
                    |t: &f64| t.is_finite() && *t >= 0.0,
                ));
            }
            other => args.unknown(other),
        }
    }
    if threshold.is_some() && baseline.is_none() {
        USAGE.fail("--threshold is the drop allowed against --baseline: give --baseline FILE too");
    }
    if let Some(models) = models {
        if out.is_some() || baseline.is_some() {
            USAGE.fail(
                "--models writes a report per model (evals-report-MODEL.json) and compares \
                 with none: it does not go with --out or --baseline",
            );
        }
        // Where the reports go: the working directory.
        if let Err(e) = writable(Path::new("evals-report-MODEL.json")) {
            USAGE.fail(format!("--models: {e}"));
        }
        return Options {
            models,
            out: PathBuf::new(),
            baseline: None,
            threshold: 0.0,
        };
    }
    let out = out.unwrap_or_else(|| PathBuf::from("evals-report.json"));
    if let Err(e) = writable(&out) {
        USAGE.fail(format!("--out: {e}"));
    }
    let baseline = baseline
        .map(|path| Report::load(&path).unwrap_or_else(|e| USAGE.fail(format!("--baseline: {e}"))));
    Options {
        models: Vec::new(),
        out,
        baseline,
        threshold: threshold.unwrap_or(0.0),
    }
}

/// Whether a report can be saved at `path`, asked before the cases run:
/// saving writes a new file in its directory and renames it over `path`,
/// so that directory must take a new file, and `path` must not be a
/// directory.
fn writable(path: &Path) -> Result<(), String> {
    if path.file_name().is_none() || path.is_dir() {
        return Err(format!(
            "{} is a directory, not a file to write the report to",
            path.display()
        ));
    }
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let probe = dir.join(format!(".evals-report-probe-{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .map_err(|e| {
            format!(
                "cannot write the report {}: its directory {} takes no new file: {e}",
                path.display(),
                dir.display()
            )
        })?;
    // Only the probe: nothing is left behind.
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    // A usage error exits 2 here, before anything runs.
    let options = options();
    match run(options).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

async fn run(options: Options) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("evals/calculator.yaml");
    let dataset: Dataset<String, Expected> = Dataset::load(&file)?;
    let model = model_from_env(scripted(&dataset))?;
    let offline = model.provider() == "scripted";

    let harness = Arc::new(calculator()?);
    let task = task_fn(move |question: String, cx: CaseCx| {
        let harness = Arc::clone(&harness);
        async move {
            let deps = ModelDepsAgent {
                model: cx.model(),
                summarizer: None,
            };
            let agent = create_agent_with("calculator", &harness, deps);
            let mut run = agent.run(AgentChat::with_task(question));
            let outcome = cx.observe(&mut run).await?;
            Ok::<_, TaskError>(outcome.state.memory.answer().unwrap_or_default())
        }
    });
    let evaluators = Evaluators::new()
        .with(
            NumericTolerance::new(1e-6)
                .expected_at("/answer")
                .named("answer"),
        )
        .with(ToolTrajectory::from_expected(Match::Strict, "/tools").named("tool calls"))
        .with(StepTrajectory::new(Match::Superset, ["model"]).named("steps"))
        .with(Budget::new().max_model_calls(4));

    if !options.models.is_empty() {
        // One command, several models: the same cases on each, side by side.
        let provider = std::env::var("HARNESS_PROVIDER").unwrap_or_default();
        let models = options
            .models
            .iter()
            .map(|name| match name.as_str() {
                "scripted" => select("scripted", None, scripted(&dataset)),
                name => select(&provider, Some(name), scripted(&dataset)),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let reports = Experiment::new("models")
            .concurrency(1)
            .timeout(Duration::from_secs(300))
            .run_models(models, &dataset, &task, &evaluators)
            .await?;
        for report in &reports {
            let name = report
                .model
                .as_deref()
                .unwrap_or("model")
                .replace(['/', ' '], "_");
            report.save(format!("evals-report-{name}.json"))?;
        }
        print!("{}", side_by_side(&reports));
        return Ok(ExitCode::SUCCESS);
    }
    let experiment = Experiment::new("baseline")
        .model(Arc::clone(&model))
        // The script answers in dataset order; a server takes two at once.
        .concurrency(if offline { 1 } else { 2 })
        .timeout(Duration::from_secs(300))
        .retries(1, Duration::from_secs(1));
    let report = experiment.run(&dataset, &task, &evaluators).await?;
    print!("{}", report.table());
    report.save(&options.out)?;
    println!("report: {}", options.out.display());

    // Offline: the same runs scored again from the report alone.
    let rescored = Experiment::rescore::<String, Expected, String>(&report, &evaluators).await?;
    let same_scores = report
        .cases
        .iter()
        .zip(&rescored.cases)
        .filter(|(a, b)| a.scores == b.scores)
        .count();
    println!(
        "re-scored offline: {same_scores}/{} cases scored the same",
        report.cases.len()
    );

    // Exactly: the agent run again on the recorded model answers.
    let replayed = Experiment::new("replay")
        .progress(harness_evals::Progress::Off)
        .replay(&dataset, &report, &task, &evaluators)
        .await?;
    let identical = report
        .cases
        .iter()
        .zip(&replayed.cases)
        .filter(|(a, b)| a.output == b.output && a.scores == b.scores && a.failure == b.failure)
        .count();
    println!(
        "replayed: {identical}/{} cases identical",
        report.cases.len()
    );
    let summary = report.summary();
    println!(
        "{}",
        json!({
            "cases": summary.cases,
            "failed": summary.failed,
            "passed": summary.passed,
            "model_calls": summary.model_calls,
            "means": summary.evaluators.iter().map(|e| (e.name.clone(), json!(e.mean))).collect::<serde_json::Map<_, _>>(),
        })
    );

    if let Some(baseline) = &options.baseline {
        let comparison = Comparison::new(baseline, &report);
        print!("{}", comparison.table());
        if comparison.regressed(options.threshold) {
            eprintln!("regressed beyond {}", options.threshold);
            return Ok(ExitCode::from(1));
        }
    }
    Ok(ExitCode::SUCCESS)
}
