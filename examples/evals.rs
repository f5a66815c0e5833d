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

struct Options {
    models: Vec<String>,
    out: PathBuf,
    baseline: Option<PathBuf>,
    threshold: f64,
}

fn options() -> Result<Options, String> {
    let mut options = Options {
        models: Vec::new(),
        out: PathBuf::from("evals-report.json"),
        baseline: None,
        threshold: 0.0,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--out" => options.out = value()?.into(),
            "--models" => {
                options.models = value()?
                    .split(',')
                    .map(|m| m.trim().to_owned())
                    .filter(|m| !m.is_empty())
                    .collect();
            }
            "--baseline" => options.baseline = Some(value()?.into()),
            "--threshold" => {
                let v = value()?;
                options.threshold = v
                    .parse()
                    .map_err(|_| format!("--threshold {v:?}: give a number, e.g. 0.05"))?;
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(options)
}

#[tokio::main]
async fn main() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let options = options()?;
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

    if let Some(baseline) = options.baseline {
        let comparison = Comparison::new(&Report::load(baseline)?, &report);
        print!("{}", comparison.table());
        if comparison.regressed(options.threshold) {
            eprintln!("regressed beyond {}", options.threshold);
            return Ok(ExitCode::from(1));
        }
    }
    Ok(ExitCode::SUCCESS)
}
