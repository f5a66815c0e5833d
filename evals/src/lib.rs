//! Evals for harness agents: know whether a change to a prompt, a model or a
//! tool made an agent better or worse.
//!
//! - A [`Dataset`] holds typed [`Case`]s (input, expected output, metadata,
//!   tags), stored as YAML or JSON Lines, with a JSON schema from the types.
//! - An [`Experiment`] runs a [`Task`] — usually "run this agent on the
//!   input" — on every case, concurrently up to a limit, with retries after
//!   transient model errors, a timeout per case and a progress bar.
//! - Every case's run is recorded in the [`Report`]: the model exchanges
//!   (through the model the task gets from [`CaseCx::model`]), the run's
//!   events (through [`CaseCx::observe`]), latency, tokens, cost. A report
//!   can be [re-scored](Experiment::rescore) offline with other
//!   evaluators, and [replayed](Experiment::replay) exactly: a run whose
//!   requests diverge from the recording fails as
//!   [`CaseFailure::Diverged`], naming the model call and the first
//!   difference. The secrets the process holds are replaced in everything
//!   this crate keeps, saves or prints (see [Secrets](#secrets)).
//! - [`Evaluator`]s score cases: [`Equals`], [`Contains`], [`Matches`]
//!   (regex), [`JsonSchemaValid`], [`FieldMatch`], [`NumericTolerance`],
//!   [`ToolTrajectory`] and [`StepTrajectory`] (strict, unordered, subset,
//!   superset), an LLM [`Judge`] with a typed [`Verdict`], a [`Budget`]
//!   (latency, tokens, cost, model calls), and closures ([`from_fn`]).
//! - Reports print as a [table](Report::table), save as JSON, and compare:
//!   a [`Comparison`] of a baseline and a candidate lists improved and
//!   regressed cases and says whether the candidate
//!   [regressed](Comparison::regressed): lost a case or an evaluator, or
//!   dropped beyond a threshold; the `harness-evals compare` command exits
//!   1 when it did, for CI, and says why.
//!   [`side_by_side`] shows several models' reports in one table.
//! - A case that fails is reported as failed and the others run on: a task
//!   that returns an error, runs past the timeout or **panics** fails its
//!   case ([`CaseFailure::Error`] says `the task panicked: {message}`); an
//!   evaluator that returns an error, panics ([`EvalError::Panicked`]),
//!   does not finish within its bound ([`EvalError::TimedOut`]; see
//!   [`Evaluators::timeout`], five minutes by default) or gives a value
//!   that is not a number in `0.0..=1.0` ([`EvalError::InvalidScore`]:
//!   refused, not clamped) loses its score on that case alone. A value a
//!   report cannot hold as JSON (a NaN, a map whose keys are not strings)
//!   is never scored as `null`: a case whose input, expected output or
//!   output is one fails, naming why and where (its report then holds
//!   `null` for that input and no expected output, beside the failure),
//!   and an evaluator reading one gets [`EvalError::NoJson`]. A panic is caught only where panics unwind (not under
//!   `panic = "abort"`), and the panic hook still prints it.
//!   [`Report::save`] never writes a file that [`Report::load`] refuses: it
//!   refuses a report holding a NaN or infinite number, naming the case and
//!   the field, and gives `load`'s own error for one of another version,
//!   with a case name twice or with a score out of `0.0..=1.0`.
//! - Each case runs in a `tracing` span named `eval {case}` with the
//!   attributes `harness.eval.experiment` and `harness.eval.case` (names
//!   redacted); the agent's spans (`invoke_agent`, `chat`, `execute_tool`)
//!   are its children, so an OpenTelemetry backend shows which case a
//!   trace belongs to.
//!
//! # An experiment
//!
//! ```
//! use harness::llm::{Expect, ModelRequest, ModelResponse, ScriptedModel};
//! use harness_evals::{Case, CaseCx, Contains, Dataset, Evaluators, Experiment, NumericTolerance,
//!     Progress, TaskError, task_fn};
//! use std::sync::Arc;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dataset = Dataset::new("arithmetic", [
//!     Case::new("add", "What is 2 + 3?".to_owned()).expect("5".to_owned()),
//!     Case::new("mul", "What is 6 × 7?".to_owned()).expect("42".to_owned()),
//! ]);
//! // The task: ask the model the case's question.
//! let task = task_fn(|question: String, cx: CaseCx| async move {
//!     let request = ModelRequest::builder().user(question).build();
//!     Ok::<_, TaskError>(cx.model().complete(&request).await?.text())
//! });
//! let evaluators = Evaluators::new()
//!     .with(Contains::expected())
//!     .with(NumericTolerance::new(0.0));
//! // A scripted model, so that this runs offline; any provider's model fits.
//! let model = Arc::new(ScriptedModel::new([
//!     Expect::any().reply(ModelResponse::from_text("2 + 3 = 5")),
//!     Expect::any().reply(ModelResponse::from_text("6 × 7 = 48")),
//! ]));
//! let report = Experiment::new("baseline")
//!     .model(model)
//!     .progress(Progress::Off)
//!     .run(&dataset, &task, &evaluators)
//!     .await?;
//! assert!(report.case("add").unwrap().passed());
//! assert!(!report.case("mul").unwrap().passed());
//! println!("{}", report.table());
//!
//! // Later, offline: score the same runs with another evaluator.
//! let stricter = Evaluators::new().with(NumericTolerance::new(0.0).named("exact"));
//! let rescored = Experiment::rescore::<String, String, String>(&report, &stricter).await?;
//! assert_eq!(rescored.summary().evaluators[0].passed, 1);
//! # Ok(()) }
//! ```
//!
//! # An agent as the task
//!
//! Give the agent the case's model, and let the case observe its run, so
//! that its steps are recorded for [`StepTrajectory`] and its model calls
//! for [`ToolTrajectory`]:
//!
//! ```no_run
//! # use harness::Harness;
//! # use harness_kit::{AgentChat, ModelDeps, ModelDepsAgent};
//! # use harness_evals::{CaseCx, TaskError, task_fn};
//! # use std::sync::Arc;
//! # fn demo(harness: Arc<Harness<AgentChat, ModelDeps>>) {
//! let task = task_fn(move |question: String, cx: CaseCx| {
//!     let harness = Arc::clone(&harness);
//!     async move {
//!         let agent = harness::create_agent_with(
//!             "calculator",
//!             &harness,
//!             ModelDepsAgent { model: cx.model(), summarizer: None },
//!         );
//!         let mut run = agent.run(AgentChat::with_task(question));
//!         let outcome = cx.observe(&mut run).await?;
//!         Ok::<_, TaskError>(outcome.state.memory.answer().unwrap_or_default())
//!     }
//! });
//! # let _ = task; }
//! ```
//!
//! # Datasets in files
//!
//! A YAML dataset is a document with a `name` and a list of `cases`; a
//! JSON Lines dataset has one case per line. Unknown fields, empty and
//! duplicate case names are errors that name the file and the line (for a
//! case name, the line where each case concerned starts; for a JSON line,
//! the line and the column); a file that is not UTF-8 text is an error
//! naming the offset and the line of its first invalid byte.
//! [`Dataset::json_schema`] gives the schema for an editor.
//!
//! # In CI
//!
//! ```text
//! harness-evals show report.json                   # the table
//! harness-evals compare baseline.json report.json --threshold 0.05
//! harness-evals side-by-side qwen.json llama.json  # several models
//! ```
//!
//! `compare` exits 0 when the candidate is within the threshold, 1 when it
//! regressed, 2 when it could not read a report. A candidate regressed when
//! it lacks a case or an evaluator the baseline has (whatever the
//! threshold: dropping a failing case does not pass the gate), or when an
//! evaluator's mean or a case's value dropped by more than the threshold;
//! it prints each reason on stderr (see [`Comparison`] and [`Shortfall`]).
//! `compare --json` prints the [`Comparison`] as JSON with the verdict
//! added: `threshold`, `regressed` (whether it exits 1), `shortfalls` (each
//! a [`Shortfall`], tagged by `kind`) and `reasons` (the sentences of
//! stderr). A `--threshold` given twice is a usage error (exit 2).
//! The means in its table, and in `side-by-side`, are each report's own,
//! over all its cases (`-` for a report with none).
//!
//! # Secrets
//!
//! Text leaves the process through this crate in reports, datasets,
//! tables, comparisons, logs and judges' prompts, and any of it may quote
//! a key the process holds (see [`harness::secrets`]): a task's output, a
//! model's answer or error, a case name or metadata copied from an
//! environment. Each of those values is replaced by `[redacted]`:
//!
//! - In a [`Report`] made by [`Experiment::run`], [`replay`](Experiment::replay)
//!   or [`rescore`](Experiment::rescore): the experiment, dataset,
//!   provider, model and evaluator names; in every case its name, tags,
//!   metadata (keys and values, however nested), input, expected output,
//!   output, failure, the scores' reasons and errors, and its whole
//!   [`CaseRecord`]: the task's and the judges' model exchanges (requests,
//!   answers, stream events, errors), events and sessions.
//! - In files: [`Report::save`] writes a report that still holds a secret
//!   (one built or changed by hand) redacted the same way;
//!   [`Dataset::save`] (and [`Dataset::to_yaml`], [`Dataset::to_json_lines`])
//!   writes a dataset's names, tags, metadata, inputs and expected outputs
//!   redacted.
//! - In what is printed: [`Report::table`], [`Comparison`] (its names, its
//!   table, its JSON) and [`side_by_side`] redact every cell, so a report
//!   read from an older file is shown redacted too; a reason shortened for
//!   a table is redacted before it is cut, so no part of a secret is left
//!   at the cut. The `eval {case}` span and its attributes, the retry log
//!   line, the progress bar, the errors that quote a name or a value, and
//!   the `Debug` of an [`Experiment`], a [`CaseCx`], an [`EvalCase`] or a
//!   [`Judge`] show names redacted; a judge's prompt is redacted before it
//!   is sent.
//!
//! Redaction fails closed. A case's record is redacted by walking its typed
//! fields (not by a round trip through JSON, which can fail), then
//! serialized and searched once more. A record that still holds a secret
//! (in a field or a kind of `harness::llm` this crate does not know yet, or
//! as a name such as a role, which cannot be replaced without breaking the
//! format) or that cannot be serialized is **withheld**: its exchanges,
//! events and sessions are dropped, its metrics kept, and
//! [`CaseRecord::withheld`] says why. Its scores stand (they were made from
//! the run); a replay of the case diverges at its first model call, and a
//! re-score reports an error for every evaluator. A report or a dataset
//! whose text would still hold a secret is not written
//! ([`ReportError::Format`], [`DatasetError::Write`]).
//!
//! Redaction can make two case names equal (`with-{key}` and
//! `with-{token}` both read `with-[redacted]`), and cases are matched by
//! name. So in a report a name that held a secret and, redacted, is the
//! name of another case gets the suffix ` (2)` (or ` (3)`, …: the smallest
//! that no case has); the first such case keeps the plain redacted name,
//! and names that held no secret are never changed. The rule depends only
//! on the cases' order, so the same dataset run again gets the same names.
//! [`Report::load`] refuses a report with a case name twice.
//!
//! What is redacted no longer matches the original: a replay of a request
//! that carried a secret diverges at that call, and one of a case whose
//! name holds a secret finds no recording for it
//! ([`ExperimentError::NotRecorded`]). The task itself and the evaluators
//! see the case and the output as they are.
//!
//! When the process holds no secret ([`harness::secrets::is_active`]),
//! none of this changes anything, and each step is one check.

#![forbid(unsafe_code)]

mod builtin;
mod compare;
mod dataset;
mod evaluator;
mod json;
mod judge;
mod record;
mod redact;
mod report;
mod run;
mod trajectory;

pub use builtin::{
    Budget, Contains, Equals, FieldMatch, JsonSchemaValid, Matches, NumericTolerance,
};
pub use compare::{
    CaseDelta, Change, Comparison, InvalidThreshold, MeanDelta, Shortfall, side_by_side,
};
pub use dataset::{Case, Dataset, DatasetError};
pub use evaluator::{EvalCase, EvalError, Evaluator, Evaluators, FnEvaluator, Score, from_fn};
pub use judge::{Judge, Verdict};
pub use record::{CaseRecord, EventRecord, Metrics};
pub use report::{
    CaseFailure, CaseReport, EvaluatorSummary, REPORT_VERSION, Report, ReportError, Scored, Summary,
};
pub use run::{
    BoxError, CaseCx, Experiment, ExperimentError, Progress, Task, TaskError, TaskFn, task_fn,
};
pub use trajectory::{Args, ExpectedCall, Match, StepTrajectory, ToolTrajectory, call};
