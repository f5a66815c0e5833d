//! harness-evals' side of `benchmarks/scripts/bench-evals`: the framework's
//! own time per case over a dataset of trivial cases with three evaluators.
//!
//! ```text
//! eval_overhead CASES REPEAT
//! ```
//!
//! The task is a harness agent with one step that upper-cases its input,
//! run through `CaseCx::observe` (so its events are recorded, as an eval
//! records them). Prints `RESULT name value` lines: the best of REPEAT
//! experiments (all cases at once, no progress bar), the best of REPEAT
//! runs of the same agent on every case without the experiment, and their
//! difference per case (the framework's overhead), in microseconds.

use std::sync::Arc;
use std::time::Instant;

use harness::{Harness, HarnessState, StepResult, create_agent};
use harness_evals::{
    Case, CaseCx, Contains, Dataset, Equals, Evaluators, Experiment, Matches, Progress, TaskError,
    task_fn,
};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Text {
    text: String,
}

async fn upper(state: Arc<Text>) -> StepResult<TextUpdate> {
    Ok(TextUpdate::new().text(state.text.to_uppercase()))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().unwrap_or_else(|| "1000".into()).parse()?;
    let repeat: usize = args.next().unwrap_or_else(|| "3".into()).parse()?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let harness = Arc::new(
            Harness::<Text>::builder()
                .step("upper")
                .run(upper)
                .end()
                .start("upper")
                .build()?,
        );
        let dataset = Dataset::new(
            "trivial",
            (0..n).map(|i| {
                Case::new(format!("case-{i}"), format!("case {i}")).expect(format!("CASE {i}"))
            }),
        );
        let evaluators = Evaluators::new()
            .with(Equals::expected())
            .with(Contains::text("CASE"))
            .with(Matches::new(r"^CASE \d+$")?);
        let h = Arc::clone(&harness);
        let task = task_fn(move |input: String, cx: CaseCx| {
            let harness = Arc::clone(&h);
            async move {
                let agent = create_agent("upper", &harness);
                let mut run = agent.run(Text { text: input });
                let outcome = cx.observe(&mut run).await?;
                Ok::<_, TaskError>(outcome.state.text)
            }
        });
        let experiment = Experiment::new("overhead")
            .concurrency(n)
            .progress(Progress::Off);
        let (mut best_eval, mut best_bare) = (f64::INFINITY, f64::INFINITY);
        for _ in 0..repeat {
            let began = Instant::now();
            let outputs = futures::future::join_all(dataset.cases.iter().map(|case| {
                let harness = Arc::clone(&harness);
                let input = case.input.clone();
                async move {
                    let agent = create_agent("upper", &harness);
                    agent.run(Text { text: input }).await.map(|o| o.state.text)
                }
            }))
            .await;
            best_bare = best_bare.min(began.elapsed().as_secs_f64());
            assert!(outputs.iter().all(Result::is_ok));
            let began = Instant::now();
            let report = experiment.run(&dataset, &task, &evaluators).await?;
            best_eval = best_eval.min(began.elapsed().as_secs_f64());
            let passed = report.summary().passed;
            assert_eq!(passed, n, "{passed} of {n} cases passed");
        }
        let per = |s: f64| s / n as f64 * 1e6;
        println!("RESULT harness_evaluate_us_per_case {:.3}", per(best_eval));
        println!("RESULT harness_task_us_per_case {:.3}", per(best_bare));
        println!(
            "RESULT harness_overhead_us_per_case {:.3}",
            per(best_eval - best_bare)
        );
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}
