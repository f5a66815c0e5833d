//! Running a task over a dataset: concurrency, retries, timeouts, progress,
//! recording; replaying and re-scoring.

use std::any::Any;
use std::collections::HashMap;
use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::io::{IsTerminal, Write as _};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use futures::{FutureExt, StreamExt};
use harness::llm::{
    Exchange, LanguageModel, ModelError, ModelRequest, ModelResponse, ModelStream, PriceTable,
};
use harness::{Context, HarnessState, Outcome, Run, RunError};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tracing::Instrument;

use crate::dataset::{Case, Dataset};
use crate::evaluator::{EvalCase, EvalError, Evaluators, JudgeMode, Score, unsigned_zero};
use crate::json::json_form;
use crate::record::{CaseModel, CaseRecord, EventRecord, Journal, measure};
use crate::redact;
use crate::report::{CaseFailure, CaseReport, REPORT_VERSION, Report, Scored};

/// A boxed error, as tasks return them.
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// Why a task gave no output. Any error converts into it with `?`.
pub struct TaskError(BoxError);

impl TaskError {
    /// An error with this message.
    pub fn msg(message: impl fmt::Display) -> Self {
        Self(message.to_string().into())
    }

    /// The underlying error.
    pub fn source_error(&self) -> &(dyn StdError + Send + Sync + 'static) {
        self.0.as_ref()
    }

    /// Whether a retry could help: a model error in the chain that is
    /// [retryable](ModelError::is_retryable) (rate limits, overload,
    /// timeouts, dropped connections).
    pub fn is_transient(&self) -> bool {
        self.model_error().is_some_and(ModelError::is_retryable)
    }

    /// The first model error in the chain, if there is one.
    pub fn model_error(&self) -> Option<&ModelError> {
        let mut current: Option<&(dyn StdError + 'static)> = Some(self.0.as_ref());
        while let Some(error) = current {
            if let Some(model) = error.downcast_ref::<ModelError>() {
                return Some(model);
            }
            current = error.source();
        }
        None
    }
}

impl<E: StdError + Send + Sync + 'static> From<E> for TaskError {
    fn from(error: E) -> Self {
        Self(Box::new(error))
    }
}

impl fmt::Debug for TaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for TaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// What a case's task is given besides its input: the model to use (so
/// that its exchanges are recorded or replayed) and a way to record the
/// events of the harness runs it makes.
#[derive(Clone)]
pub struct CaseCx {
    model: Arc<CaseModel>,
    events: Arc<Mutex<Vec<EventRecord>>>,
    sessions: Arc<Mutex<Vec<String>>>,
    case: Arc<str>,
    experiment: Arc<str>,
}

impl fmt::Debug for CaseCx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaseCx")
            .field("case", &redact::shown(&self.case))
            .field("experiment", &redact::shown(&self.experiment))
            .finish_non_exhaustive()
    }
}

impl CaseCx {
    /// The model the task must call (give it to the agent as its model
    /// slot): the experiment's model, recording every exchange, or in a
    /// replay the case's recording.
    pub fn model(&self) -> Arc<dyn LanguageModel> {
        Arc::clone(&self.model) as Arc<dyn LanguageModel>
    }

    /// The case's name.
    pub fn case(&self) -> &str {
        &self.case
    }

    /// The experiment's name.
    pub fn experiment(&self) -> &str {
        &self.experiment
    }

    /// Drives `run` until it settles, recording its events (steps, custom
    /// events, interrupts) and its session with the case. Call it again
    /// after resuming an interrupted run.
    pub async fn observe<S: HarnessState, C: Context>(
        &self,
        run: &mut Run<S, C>,
    ) -> Result<Outcome<S>, RunError> {
        let mut events = run.events();
        self.lock_sessions().push(run.session_id().to_string());
        let outcome = run.outcome().await;
        let mut recorded = Vec::new();
        // Every event was sent before the run settled; `unconstrained`: the
        // task's cooperative budget must not make a queued event look absent.
        while let Some(Some(event)) = tokio::task::unconstrained(events.next()).now_or_never() {
            if let Some(record) = EventRecord::from_event(&event) {
                recorded.push(record);
            }
        }
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(recorded);
        outcome
    }

    /// Records an event of the task's own (for a task that is not a
    /// harness run, or to mark something in the trajectory).
    pub fn record_event(&self, event: EventRecord) {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(event);
    }

    fn lock_sessions(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What an experiment runs on each case's input.
#[async_trait]
pub trait Task<I, O>: Send + Sync {
    /// Runs the case: `cx.model()` is the model to use.
    async fn run(&self, input: I, cx: CaseCx) -> Result<O, TaskError>;
}

/// A task from an async closure: `task_fn(|input, cx| async move { … })`.
pub fn task_fn<I, O, F, Fut>(f: F) -> TaskFn<F>
where
    F: Fn(I, CaseCx) -> Fut + Send + Sync,
    Fut: Future<Output = Result<O, TaskError>> + Send,
{
    TaskFn(f)
}

/// A task made by [`task_fn`].
pub struct TaskFn<F>(F);

impl<F> fmt::Debug for TaskFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TaskFn")
    }
}

#[async_trait]
impl<I, O, F, Fut> Task<I, O> for TaskFn<F>
where
    I: Send + 'static,
    F: Fn(I, CaseCx) -> Fut + Send + Sync,
    Fut: Future<Output = Result<O, TaskError>> + Send,
{
    async fn run(&self, input: I, cx: CaseCx) -> Result<O, TaskError> {
        (self.0)(input, cx).await
    }
}

/// Whether the experiment draws a progress bar on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Progress {
    /// When stderr is a terminal.
    #[default]
    Auto,
    /// Never.
    Off,
    /// Always (a line per update when stderr is not a terminal).
    On,
}

/// Why an experiment could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExperimentError {
    /// Two evaluators have the same name (a report's columns are by name),
    /// or names that are the same once the process's secrets are redacted.
    #[error("two evaluators are named `{0}`; rename one with .named(..)")]
    DuplicateEvaluator(String),
    /// The dataset's names are not unique or empty.
    #[error(transparent)]
    Dataset(#[from] crate::dataset::DatasetError),
    /// A replay was asked for a case the report does not have.
    #[error(
        "case `{case}` is not in the report of `{experiment}`; a replay needs a recording of every case"
    )]
    NotRecorded {
        /// The case.
        case: String,
        /// The report's experiment.
        experiment: String,
    },
    /// A report's values do not read as the types given for re-scoring.
    #[error("case `{case}`: its {what} in the report does not read as the type given: {message}")]
    Type {
        /// The case.
        case: String,
        /// `input`, `expected` or `output`.
        what: &'static str,
        /// The deserializer's message.
        message: String,
    },
}

/// An experiment: a named way to run a task over a dataset and score it.
///
/// ```no_run
/// # use harness_evals::*;
/// # async fn demo(model: std::sync::Arc<dyn harness::llm::LanguageModel>, dataset: Dataset<String, String>) -> Result<(), Box<dyn std::error::Error>> {
/// let task = task_fn(|question: String, cx: CaseCx| async move {
///     let answer = cx.model().complete(&harness::llm::ModelRequest::builder().user(question).build()).await?;
///     Ok::<_, TaskError>(answer.text())
/// });
/// let evaluators = Evaluators::new().with(Contains::expected().ignore_case());
/// let report = Experiment::new("baseline")
///     .model(model)
///     .concurrency(4)
///     .timeout(std::time::Duration::from_secs(60))
///     .run(&dataset, &task, &evaluators)
///     .await?;
/// println!("{}", report.table());
/// report.save("baseline.json")?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Experiment {
    name: String,
    model: Option<Arc<dyn LanguageModel>>,
    concurrency: usize,
    retries: u32,
    backoff: Duration,
    timeout: Option<Duration>,
    progress: Progress,
    prices: PriceTable,
}

impl fmt::Debug for Experiment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Experiment")
            .field("name", &redact::shown(&self.name))
            .field(
                "model",
                &self.model.as_ref().map(|m| m.model_name().to_owned()),
            )
            .field("concurrency", &self.concurrency)
            .field("retries", &self.retries)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Experiment {
    /// An experiment named `name`: one case at a time, two retries after
    /// transient model errors, no timeout, progress when stderr is a
    /// terminal.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            model: None,
            concurrency: 1,
            retries: 2,
            backoff: Duration::from_millis(500),
            timeout: None,
            progress: Progress::Auto,
            prices: PriceTable::new(),
        }
    }

    /// The model the task gets through [`CaseCx::model`].
    pub fn model(mut self, model: Arc<dyn LanguageModel>) -> Self {
        self.model = Some(model);
        self
    }

    /// Runs up to `n` cases at once (at least 1).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// Retries a case up to `n` times after a transient model error (rate
    /// limit, overload, timeout, dropped connection), waiting `backoff`,
    /// then twice that, … between attempts.
    pub fn retries(mut self, n: u32, backoff: Duration) -> Self {
        self.retries = n;
        self.backoff = backoff;
        self
    }

    /// Fails a case whose attempt runs longer than `limit`. This bounds the
    /// task; each evaluator has a bound of its own on each case
    /// ([`Evaluators::timeout`], five minutes by default).
    pub fn timeout(mut self, limit: Duration) -> Self {
        self.timeout = Some(limit);
        self
    }

    /// Whether to draw a progress bar.
    pub fn progress(mut self, progress: Progress) -> Self {
        self.progress = progress;
        self
    }

    /// Prices per model, for each case's cost (and [`Budget`](crate::Budget)).
    pub fn prices(mut self, prices: PriceTable) -> Self {
        self.prices = prices;
        self
    }

    /// The experiment's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `task` on every case of `dataset` and scores it with
    /// `evaluators`. A case that fails is reported as failed; the
    /// experiment fails only when it cannot start.
    ///
    /// A task that panics fails its case alone, as
    /// [`CaseFailure::Error`] with `the task panicked: {message}`; an
    /// evaluator that panics, or returns a score whose value is not a
    /// number in `0.0..=1.0`, gets an error on that case alone
    /// ([`EvalError::Panicked`], [`EvalError::InvalidScore`]), as does one
    /// that has not finished within [`Evaluators::timeout`]
    /// ([`EvalError::TimedOut`]). The other cases' and evaluators' results
    /// are kept.
    ///
    /// What a report holds is JSON, so a case whose input, expected output
    /// or output has no JSON form (a float that is NaN or infinite, a map
    /// whose keys are not strings or numbers) fails as
    /// [`CaseFailure::Error`], naming the case, the value and where in it;
    /// it is never recorded as `null`. The task is not run for a case
    /// whose input or expected output has none; a case whose output has
    /// none is not scored.
    pub async fn run<I, E, O, T>(
        &self,
        dataset: &Dataset<I, E>,
        task: &T,
        evaluators: &Evaluators<I, E, O>,
    ) -> Result<Report, ExperimentError>
    where
        I: Clone + Serialize + Send + Sync + 'static,
        E: Serialize + Sync,
        O: Serialize + Send + Sync,
        T: Task<I, O> + ?Sized,
    {
        self.execute(dataset, task, evaluators, None).await
    }

    /// Runs the task again on every case with its model answering from the
    /// case's recording in `recorded`, exactly: a run whose model requests
    /// differ from the recording fails with [`CaseFailure::Diverged`],
    /// naming the model call and the first difference.
    pub async fn replay<I, E, O, T>(
        &self,
        dataset: &Dataset<I, E>,
        recorded: &Report,
        task: &T,
        evaluators: &Evaluators<I, E, O>,
    ) -> Result<Report, ExperimentError>
    where
        I: Clone + Serialize + Send + Sync + 'static,
        E: Serialize + Sync,
        O: Serialize + Send + Sync,
        T: Task<I, O> + ?Sized,
    {
        let mut by_name = HashMap::new();
        for case in &recorded.cases {
            by_name.insert(case.name.as_str(), &case.record.exchanges);
        }
        for case in &dataset.cases {
            if !by_name.contains_key(case.name.as_str()) {
                return Err(ExperimentError::NotRecorded {
                    case: redact::owned(&case.name),
                    experiment: redact::owned(&recorded.experiment),
                });
            }
        }
        let source = ReplaySource {
            provider: recorded
                .provider
                .clone()
                .unwrap_or_else(|| "recorded".into()),
            model: recorded.model.clone().unwrap_or_else(|| "recorded".into()),
            exchanges: by_name
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.clone()))
                .collect(),
        };
        self.execute(dataset, task, evaluators, Some(&source)).await
    }

    /// Scores `report` again with `evaluators`, from what it recorded,
    /// without running the task or calling a model: a judge's requests are
    /// answered from the judge exchanges the report holds (a request it
    /// does not hold is an evaluator error naming the difference).
    ///
    /// The returned report keeps every recorded judge exchange, including
    /// those no evaluator asked for this time (a judge left out or given
    /// another rubric), so saving it over the original loses no answer. A
    /// case whose record was [withheld](CaseRecord::withheld) has nothing
    /// to score from: every evaluator's result on it is an error saying so.
    /// Like a run's, the returned report is redacted (see the crate's docs).
    /// Each evaluator is bounded by [`Evaluators::timeout`] on each case, as
    /// in a run.
    pub async fn rescore<I, E, O>(
        report: &Report,
        evaluators: &Evaluators<I, E, O>,
    ) -> Result<Report, ExperimentError>
    where
        I: DeserializeOwned + Sync,
        E: DeserializeOwned + Serialize + Sync,
        O: DeserializeOwned + Serialize + Sync,
    {
        if let Some(name) = evaluators.duplicate() {
            return Err(ExperimentError::DuplicateEvaluator(name));
        }
        let mut out = report.clone();
        out.evaluators = evaluators.names().into_iter().map(str::to_owned).collect();
        for case in &mut out.cases {
            let Some(output) = &case.output else {
                case.scores.clear();
                continue;
            };
            if let Some(withheld) = &case.record.withheld {
                // Scoring an empty record would pass or fail trajectories
                // and budgets on calls that were made but are not there.
                let error = format!("the case's record cannot be re-scored ({withheld})");
                case.scores = evaluators
                    .names()
                    .into_iter()
                    .map(|name| (name.to_owned(), Scored::Error(error.clone())))
                    .collect();
                continue;
            }
            let input: I = read_as(&case.name, "input", &case.input)?;
            let expected: Option<E> = match &case.expected {
                Some(v) => Some(read_as(&case.name, "expected", v)?),
                None => None,
            };
            let output: O = read_as(&case.name, "output", output)?;
            // The recorded judge exchanges stay in the record as they are.
            // Offline, an evaluator can only replay one of them or fail to
            // find its request; it never gets a new answer. So the record
            // already holds every answer worth keeping, and replacing it
            // with what this rescore's evaluators asked would drop the paid
            // answers of judges that were removed or changed, for good once
            // the report is saved over the original.
            let judge = JudgeMode::Offline(
                Arc::new(case.record.judge_exchanges.clone()),
                Journal::default(),
            );
            let scores = score(
                evaluators,
                EvalCase {
                    name: &case.name,
                    input: &input,
                    expected: expected.as_ref(),
                    metadata: &case.metadata,
                    tags: &case.tags,
                    output: &output,
                    record: &case.record,
                    judge,
                    output_json: OnceLock::new(),
                    expected_json: OnceLock::new(),
                },
            )
            .await;
            case.scores = scores;
        }
        redact::report(&mut out);
        Ok(out)
    }

    /// Runs the experiment once per model, for a side-by-side comparison
    /// ([`side_by_side`](crate::side_by_side)); each report is named
    /// `{experiment} [{model}]`.
    pub async fn run_models<I, E, O, T>(
        &self,
        models: impl IntoIterator<Item = Arc<dyn LanguageModel>>,
        dataset: &Dataset<I, E>,
        task: &T,
        evaluators: &Evaluators<I, E, O>,
    ) -> Result<Vec<Report>, ExperimentError>
    where
        I: Clone + Serialize + Send + Sync + 'static,
        E: Serialize + Sync,
        O: Serialize + Send + Sync,
        T: Task<I, O> + ?Sized,
    {
        let mut reports = Vec::new();
        for model in models {
            let name = format!("{} [{}]", self.name, model.model_name());
            let experiment = Experiment {
                name,
                model: Some(model),
                ..self.clone()
            };
            reports.push(experiment.run(dataset, task, evaluators).await?);
        }
        Ok(reports)
    }

    async fn execute<I, E, O, T>(
        &self,
        dataset: &Dataset<I, E>,
        task: &T,
        evaluators: &Evaluators<I, E, O>,
        replay: Option<&ReplaySource>,
    ) -> Result<Report, ExperimentError>
    where
        I: Clone + Serialize + Send + Sync + 'static,
        E: Serialize + Sync,
        O: Serialize + Send + Sync,
        T: Task<I, O> + ?Sized,
    {
        if let Some(name) = evaluators.duplicate() {
            return Err(ExperimentError::DuplicateEvaluator(name));
        }
        dataset.check(&dataset.name)?;
        let started_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let clock = Instant::now();
        let bar = Bar::new(
            self.progress,
            &redact::shown(&self.name),
            dataset.cases.len(),
        );
        let mut cases: Vec<(usize, CaseReport)> =
            futures::stream::iter(dataset.cases.iter().enumerate())
                .map(|(index, case)| {
                    let bar = &bar;
                    async move {
                        let report = self.run_case(case, task, evaluators, replay).await;
                        bar.tick(report.passed());
                        (index, report)
                    }
                })
                .buffer_unordered(self.concurrency)
                .collect()
                .await;
        bar.finish();
        cases.sort_by_key(|(i, _)| *i);
        let (provider, model) = match (replay, &self.model) {
            (Some(r), _) => (Some(r.provider.clone()), Some(r.model.clone())),
            (None, Some(m)) => (
                Some(m.provider().to_owned()),
                Some(m.model_name().to_owned()),
            ),
            (None, None) => (None, None),
        };
        let mut report = Report {
            version: REPORT_VERSION,
            experiment: self.name.clone(),
            dataset: dataset.name.clone(),
            provider,
            model,
            evaluators: evaluators.names().into_iter().map(str::to_owned).collect(),
            started_ms,
            elapsed_ms: clock.elapsed().as_secs_f64() * 1e3,
            cases: cases.into_iter().map(|(_, c)| c).collect(),
        };
        redact::report(&mut report);
        Ok(report)
    }

    async fn run_case<I, E, O, T>(
        &self,
        case: &Case<I, E>,
        task: &T,
        evaluators: &Evaluators<I, E, O>,
        replay: Option<&ReplaySource>,
    ) -> CaseReport
    where
        I: Clone + Serialize + Send + Sync + 'static,
        E: Serialize + Sync,
        O: Serialize + Send + Sync,
        T: Task<I, O> + ?Sized,
    {
        // Spans and logs leave the process as reports do.
        let shown_case = redact::shown(&case.name);
        let span = tracing::info_span!(
            "eval_case",
            otel.name = %format!("eval {shown_case}"),
            harness.eval.experiment = %redact::shown(&self.name),
            harness.eval.case = %shown_case,
            harness.eval.attempts = tracing::field::Empty,
        );
        // What the report cannot hold is a failure, not a `null`; the task
        // is not run for a case that could not be recorded.
        let input = json_form(&case.input);
        let expected = case.expected.as_ref().map(json_form).transpose();
        let (input, expected) = match (input, expected) {
            (Ok(input), Ok(expected)) => (input, expected),
            (input, expected) => {
                let (what, why) = match (&input, &expected) {
                    (Err(why), _) => ("input", why.clone()),
                    (_, Err(why)) => ("expected output", why.clone()),
                    (Ok(_), Ok(_)) => unreachable!("matched above"),
                };
                return CaseReport {
                    name: case.name.clone(),
                    tags: case.tags.clone(),
                    metadata: case.metadata.clone(),
                    input: input.unwrap_or(Value::Null),
                    expected: expected.ok().flatten(),
                    output: None,
                    failure: Some(CaseFailure::Error(format!(
                        "case `{}`: its {what} has no JSON form, so the report cannot hold \
                         it; the task was not run: {why}",
                        case.name
                    ))),
                    scores: Default::default(),
                    record: CaseRecord::default(),
                };
            }
        };
        let mut attempt = 0;
        let (result, record) = loop {
            attempt += 1;
            let journal = Journal::default();
            let model = match (replay, &self.model) {
                (Some(source), _) => CaseModel::replay(
                    &source.provider,
                    &source.model,
                    source
                        .exchanges
                        .get(&case.name)
                        .cloned()
                        .unwrap_or_default(),
                    journal.clone(),
                ),
                (None, Some(model)) => CaseModel::live(Arc::clone(model), journal.clone()),
                (None, None) => CaseModel::live(Arc::new(NoModel), journal.clone()),
            };
            let cx = CaseCx {
                model: Arc::new(model),
                events: Arc::default(),
                sessions: Arc::default(),
                case: Arc::from(case.name.as_str()),
                experiment: Arc::from(self.name.as_str()),
            };
            let clock = Instant::now();
            // A task that panics fails its case alone; the experiment and
            // the other cases go on.
            let running = AssertUnwindSafe(task.run(case.input.clone(), cx.clone()))
                .catch_unwind()
                .map(|caught| match caught {
                    Ok(result) => result.map_err(Failed::Task),
                    Err(payload) => Err(Failed::Panic(panic_message(payload.as_ref()))),
                })
                .instrument(span.clone());
            let result = match self.timeout {
                Some(limit) => match tokio::time::timeout(limit, running).await {
                    Ok(result) => result,
                    Err(_) => Err(Failed::Timeout(limit)),
                },
                None => running.await,
            };
            let latency = clock.elapsed();
            // A replay the run did not use up: the run made fewer model
            // calls than the recording holds, which is a change too.
            let result = match (result, cx.model.unreplayed()) {
                (Ok(_), Some((left, recorded))) if left > 0 => Err(Failed::Unreplayed {
                    replayed: recorded - left,
                    recorded,
                }),
                (result, _) => result,
            };
            let exchanges = journal.take();
            let model_name = cx.model.model_name().to_owned();
            let mut metrics = measure(&exchanges, &model_name, &self.prices);
            metrics.latency_ms = latency.as_secs_f64() * 1e3;
            metrics.attempts = attempt;
            let record = CaseRecord {
                exchanges,
                judge_exchanges: Vec::new(),
                events: std::mem::take(&mut *cx.events.lock().unwrap_or_else(|p| p.into_inner())),
                sessions: std::mem::take(&mut *cx.lock_sessions()),
                metrics,
                withheld: None,
            };
            match result {
                Err(Failed::Task(e))
                    if replay.is_none() && e.is_transient() && attempt <= self.retries =>
                {
                    // A provider's error may quote a key.
                    let error = redact::owned(e.to_string());
                    tracing::warn!(case = %shown_case, attempt, %error, "transient model error; retrying");
                    tokio::time::sleep(self.backoff * attempt).await;
                }
                other => break (other, record),
            }
        };
        span.record("harness.eval.attempts", attempt);
        let mut report = CaseReport {
            name: case.name.clone(),
            tags: case.tags.clone(),
            metadata: case.metadata.clone(),
            input,
            expected,
            output: None,
            failure: None,
            scores: Default::default(),
            record,
        };
        match result {
            Ok(output) => {
                let output_json = match json_form(&output) {
                    Ok(json) => json,
                    Err(why) => {
                        report.failure = Some(CaseFailure::Error(format!(
                            "case `{}`: the task's output has no JSON form, so the report \
                             cannot hold it and it was not scored: {why}",
                            case.name
                        )));
                        return report;
                    }
                };
                report.output = Some(output_json.clone());
                let journal = Journal::default();
                let scores = score(
                    evaluators,
                    EvalCase {
                        name: &case.name,
                        input: &case.input,
                        expected: case.expected.as_ref(),
                        metadata: &case.metadata,
                        tags: &case.tags,
                        output: &output,
                        record: &report.record,
                        judge: JudgeMode::Live(journal.clone()),
                        output_json: OnceLock::from(Ok(output_json)),
                        expected_json: OnceLock::from(report.expected.clone().map(Ok)),
                    },
                )
                .instrument(span)
                .await;
                report.scores = scores;
                report.record.judge_exchanges = journal.take();
            }
            Err(Failed::Timeout(limit)) => {
                report.failure = Some(CaseFailure::Timeout(format!(
                    "the task ran past the timeout of {limit:?}"
                )));
            }
            Err(Failed::Unreplayed { replayed, recorded }) => {
                report.failure = Some(CaseFailure::Diverged(format!(
                    "the run made fewer model calls than the recording: {replayed} of the \
                     {recorded} recorded exchanges were replayed"
                )));
            }
            Err(Failed::Panic(message)) => {
                report.failure = Some(CaseFailure::Error(format!("the task panicked: {message}")));
            }
            Err(Failed::Task(error)) => {
                report.failure = Some(match error.model_error() {
                    Some(ModelError::ReplayMismatch { turn, message }) => CaseFailure::Diverged(
                        format!("model call {turn} differs from the recording: {message}"),
                    ),
                    _ => CaseFailure::Error(error.to_string()),
                });
            }
        }
        report
    }
}

fn read_as<T: DeserializeOwned>(
    case: &str,
    what: &'static str,
    value: &Value,
) -> Result<T, ExperimentError> {
    // The deserializer's message quotes the value it could not read.
    T::deserialize(value).map_err(|e| ExperimentError::Type {
        case: redact::owned(case),
        what,
        message: redact::owned(e.to_string()),
    })
}

enum Failed {
    Task(TaskError),
    Timeout(Duration),
    /// The task panicked; the panic's message.
    Panic(String),
    /// The task finished in a replay without using every recorded
    /// exchange: how many it replayed, of how many.
    Unreplayed {
        replayed: usize,
        recorded: usize,
    },
}

/// The message of a panic: its payload when that is a string (what
/// `panic!` with a message gives), else a sentence saying it is not.
fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(message) = payload.downcast_ref::<&'static str>() {
        (*message).to_owned()
    } else if let Some(message) = payload.downcast_ref::<String>() {
        message.clone()
    } else {
        "(its payload is not a string)".to_owned()
    }
}

struct ReplaySource {
    provider: String,
    model: String,
    exchanges: HashMap<String, Vec<Exchange>>,
}

async fn score<I, E, O>(
    evaluators: &Evaluators<I, E, O>,
    case: EvalCase<'_, I, E, O>,
) -> std::collections::BTreeMap<String, Scored> {
    let mut scores = std::collections::BTreeMap::new();
    for evaluator in &evaluators.list {
        let name = evaluator.name();
        // An evaluator that panics or hangs loses its score on this case
        // alone.
        let evaluating = AssertUnwindSafe(evaluator.evaluate(&case)).catch_unwind();
        let Ok(evaluated) = tokio::time::timeout(evaluators.timeout, evaluating).await else {
            let error = EvalError::TimedOut {
                evaluator: name.to_owned(),
                case: case.name.to_owned(),
                limit: evaluators.timeout,
            };
            scores.insert(name.to_owned(), Scored::Error(error.to_string()));
            continue;
        };
        let scored = match evaluated {
            Ok(Ok(score)) => match check_score(name, case.name, score) {
                Ok(score) => Scored::Score(score),
                Err(error) => Scored::Error(error.to_string()),
            },
            Ok(Err(error)) => Scored::Error(error.to_string()),
            Err(payload) => Scored::Error(
                EvalError::Panicked {
                    evaluator: name.to_owned(),
                    case: case.name.to_owned(),
                    message: panic_message(payload.as_ref()),
                }
                .to_string(),
            ),
        };
        scores.insert(name.to_owned(), scored);
    }
    scores
}

/// `score`, unless its value is not a number in `0.0..=1.0`: such a value
/// would make means meaningless and a report that cannot be saved as JSON
/// and read back (JSON has no NaN or infinity). A value of `-0.0` is made
/// `0.0`.
fn check_score(evaluator: &str, case: &str, mut score: Score) -> Result<Score, EvalError> {
    if (0.0..=1.0).contains(&score.value) {
        score.value = unsigned_zero(score.value);
        Ok(score)
    } else {
        Err(EvalError::InvalidScore {
            evaluator: evaluator.to_owned(),
            case: case.to_owned(),
            value: score.value,
        })
    }
}

/// The model of an experiment that has none.
#[derive(Debug)]
struct NoModel;

impl NoModel {
    fn error() -> ModelError {
        ModelError::Configuration {
            message: "this experiment has no model; give it one with Experiment::model".into(),
        }
    }
}

#[async_trait]
impl LanguageModel for NoModel {
    async fn complete(&self, _: &ModelRequest) -> Result<ModelResponse, ModelError> {
        Err(Self::error())
    }

    async fn stream(&self, _: &ModelRequest) -> Result<ModelStream, ModelError> {
        Err(Self::error())
    }

    fn provider(&self) -> &str {
        "none"
    }

    fn model_name(&self) -> &str {
        "none"
    }
}

/// A progress bar on stderr.
struct Bar {
    on: bool,
    terminal: bool,
    name: String,
    total: usize,
    done: AtomicUsize,
    passed: AtomicUsize,
}

impl Bar {
    fn new(progress: Progress, name: &str, total: usize) -> Self {
        let terminal = std::io::stderr().is_terminal();
        Self {
            on: match progress {
                Progress::Auto => terminal,
                Progress::Off => false,
                Progress::On => true,
            },
            terminal,
            name: name.to_owned(),
            total,
            done: AtomicUsize::new(0),
            passed: AtomicUsize::new(0),
        }
    }

    fn tick(&self, passed: bool) {
        let done = self.done.fetch_add(1, Ordering::Relaxed) + 1;
        let passed = self
            .passed
            .fetch_add(usize::from(passed), Ordering::Relaxed)
            + usize::from(passed);
        if !self.on {
            return;
        }
        const WIDTH: usize = 24;
        let filled = (done * WIDTH).checked_div(self.total).unwrap_or(WIDTH);
        let line = format!(
            "{} [{}{}] {done}/{} ✔ {passed}",
            self.name,
            "█".repeat(filled),
            "·".repeat(WIDTH - filled.min(WIDTH)),
            self.total
        );
        let mut err = std::io::stderr().lock();
        let _ = if self.terminal {
            write!(err, "\r{line}")
        } else {
            writeln!(err, "{line}")
        };
        let _ = err.flush();
    }

    fn finish(&self) {
        if self.on && self.terminal {
            let _ = writeln!(std::io::stderr());
        }
    }
}
