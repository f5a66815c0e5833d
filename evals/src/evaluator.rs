//! The evaluator trait, scores, and what an evaluator sees of a case.

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use harness::llm::{Exchange, LanguageModel};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::json::json_form;
use crate::record::{CaseModel, CaseRecord, Journal};

/// An evaluator's verdict on one case.
///
/// `value` is in `0.0..=1.0`: `1.0` or `0.0` for a check that passes or
/// fails, a grade between for graded evaluators (a [`Judge`](crate::Judge)'s
/// score, or one of your own made with [`Score::graded`]). Every other
/// built-in evaluator is a check, [`ToolTrajectory`](crate::ToolTrajectory)
/// and [`StepTrajectory`](crate::StepTrajectory) included: a trajectory
/// matches its reference in the chosen mode or it does not (the reason says
/// where it differs), so they give `1.0` or `0.0`, never a partial overlap.
/// Reports average values and count passes; comparisons subtract values.
///
/// The fields are public, so a score can be made with any value; an
/// experiment (a run, a replay or a re-score) refuses one whose value is
/// NaN, infinite or outside `0.0..=1.0`: the case gets an error for that
/// evaluator instead ([`EvalError::InvalidScore`], naming the evaluator,
/// the case and the value). Use [`Score::graded`] to clamp a grade. A value
/// of `-0.0` is kept as `0.0`, so that no table shows `-0`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Score {
    /// The grade, `0.0..=1.0`.
    pub value: f64,
    /// Whether the case passes this evaluator.
    pub passed: bool,
    /// Why: what was compared with what, or the judge's reason.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

impl Score {
    /// A passing check (`1.0`).
    pub fn pass(reason: impl Into<String>) -> Self {
        Self {
            value: 1.0,
            passed: true,
            reason: reason.into(),
        }
    }

    /// A failing check (`0.0`).
    pub fn fail(reason: impl Into<String>) -> Self {
        Self {
            value: 0.0,
            passed: false,
            reason: reason.into(),
        }
    }

    /// A check: passes when `ok`.
    pub fn check(ok: bool, reason: impl Into<String>) -> Self {
        if ok {
            Self::pass(reason)
        } else {
            Self::fail(reason)
        }
    }

    /// A grade, clamped to `0.0..=1.0`, passing at `threshold` or above (a
    /// NaN grade is `0.0`).
    pub fn graded(value: f64, threshold: f64, reason: impl Into<String>) -> Self {
        let value = if value.is_nan() {
            0.0
        } else {
            unsigned_zero(value.clamp(0.0, 1.0))
        };
        Self {
            value,
            passed: value >= threshold,
            reason: reason.into(),
        }
    }
}

/// `value`, with `-0.0` made `0.0` (`-0.0 + 0.0` is `0.0`; any other value
/// is unchanged), so that a score or a sum is never shown as `-0`.
pub(crate) fn unsigned_zero(value: f64) -> f64 {
    value + 0.0
}

/// Why an evaluator could not score a case (as opposed to a case that
/// fails it): reported with the case, counted apart from failures.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum EvalError {
    /// The case has no expected output, and the evaluator compares with it.
    #[error("case `{case}` has no expected output for evaluator `{evaluator}` to compare with")]
    NoExpected {
        /// The case.
        case: String,
        /// The evaluator.
        evaluator: String,
    },
    /// A value the evaluator reads is not there, or not of the kind it needs.
    #[error("evaluator `{evaluator}`: {message}")]
    Value {
        /// The evaluator.
        evaluator: String,
        /// What was missing or wrong, and where.
        message: String,
    },
    /// The evaluator is set up wrongly (an invalid regex, an invalid schema).
    #[error("evaluator `{evaluator}` is misconfigured: {message}")]
    Config {
        /// The evaluator.
        evaluator: String,
        /// What is wrong.
        message: String,
    },
    /// A model the evaluator asked (a judge) failed.
    #[error("evaluator `{evaluator}`: its model failed: {message}")]
    Model {
        /// The evaluator.
        evaluator: String,
        /// The model's error.
        message: String,
    },
    /// The evaluator returned a [`Score`] whose value is not a number in
    /// `0.0..=1.0` (NaN, infinite, or out of range). The score is refused,
    /// not clamped: a value out of range is a bug in the evaluator.
    #[error(
        "evaluator `{evaluator}` gave case `{case}` the value {value}; a score's value must be a number in 0.0..=1.0"
    )]
    InvalidScore {
        /// The evaluator.
        evaluator: String,
        /// The case.
        case: String,
        /// The value it gave.
        value: f64,
    },
    /// The evaluator panicked while scoring the case.
    #[error("evaluator `{evaluator}` panicked on case `{case}`: {message}")]
    Panicked {
        /// The evaluator.
        evaluator: String,
        /// The case.
        case: String,
        /// The panic's message (or a note that its payload is not a string).
        message: String,
    },
    /// The evaluator did not finish scoring the case within the bound set
    /// with [`Evaluators::timeout`] (a judge whose model never answers, an
    /// evaluator that waits forever); it was stopped.
    #[error(
        "evaluator `{evaluator}` did not finish on case `{case}` within {limit:?}; it was stopped"
    )]
    TimedOut {
        /// The evaluator.
        evaluator: String,
        /// The case.
        case: String,
        /// The bound.
        limit: Duration,
    },
    /// A value the evaluator reads (the case's input, expected output or
    /// output) has no JSON form: a float that is NaN or infinite, or a map
    /// whose keys are not strings or numbers. It is not read as `null`.
    #[error("evaluator `{evaluator}` cannot read the {what} of case `{case}` as JSON: {message}")]
    NoJson {
        /// The evaluator.
        evaluator: String,
        /// The case.
        case: String,
        /// `input`, `expected output` or `output`.
        what: &'static str,
        /// Why, and where in the value.
        message: String,
    },
}

/// Whether an evaluator's model calls go to the model or come from the record.
#[derive(Debug, Clone)]
pub(crate) enum JudgeMode {
    /// Call the model; record the exchange with the case.
    Live(Journal),
    /// Answer from the case's recorded judge exchanges (re-scoring offline),
    /// recording them again.
    Offline(Arc<Vec<Exchange>>, Journal),
}

/// What an evaluator sees of one case: the case, the task's output, and its
/// run's record.
pub struct EvalCase<'a, I, E, O> {
    /// The case's name.
    pub name: &'a str,
    /// The input the task was given.
    pub input: &'a I,
    /// The expected output, if the case has one.
    pub expected: Option<&'a E>,
    /// The case's metadata.
    pub metadata: &'a Map<String, Value>,
    /// The case's tags.
    pub tags: &'a [String],
    /// What the task returned.
    pub output: &'a O,
    /// The run's exchanges, events and metrics.
    pub record: &'a CaseRecord,
    pub(crate) judge: JudgeMode,
    pub(crate) output_json: OnceLock<Result<Value, String>>,
    pub(crate) expected_json: OnceLock<Option<Result<Value, String>>>,
}

impl<I, E, O> fmt::Debug for EvalCase<'_, I, E, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EvalCase")
            .field("name", &crate::redact::shown(self.name))
            .finish_non_exhaustive()
    }
}

impl<I, E, O: Serialize> EvalCase<'_, I, E, O> {
    /// The output as JSON (serialized once), or [`EvalError::NoJson`] for
    /// `evaluator` when it has no JSON form (a NaN, a map with keys that
    /// are not strings).
    pub fn output_json(&self, evaluator: &str) -> Result<&Value, EvalError> {
        self.output_json
            .get_or_init(|| json_form(self.output))
            .as_ref()
            .map_err(|message| self.no_json(evaluator, "output", message))
    }
}

impl<I, E: Serialize, O> EvalCase<'_, I, E, O> {
    /// The expected output as JSON, if the case has one, or
    /// [`EvalError::NoJson`] for `evaluator` when it has no JSON form.
    pub fn expected_json(&self, evaluator: &str) -> Result<Option<&Value>, EvalError> {
        match self
            .expected_json
            .get_or_init(|| self.expected.map(|e| json_form(e)))
        {
            None => Ok(None),
            Some(Ok(value)) => Ok(Some(value)),
            Some(Err(message)) => Err(self.no_json(evaluator, "expected output", message)),
        }
    }

    /// The expected output as JSON, or [`EvalError::NoExpected`] (or
    /// [`EvalError::NoJson`]) for `evaluator`.
    pub fn require_expected(&self, evaluator: &str) -> Result<&Value, EvalError> {
        self.expected_json(evaluator)?
            .ok_or_else(|| EvalError::NoExpected {
                case: self.name.to_owned(),
                evaluator: evaluator.to_owned(),
            })
    }
}

impl<I, E, O> EvalCase<'_, I, E, O> {
    /// [`EvalError::NoJson`] for `evaluator` on this case.
    pub(crate) fn no_json(&self, evaluator: &str, what: &'static str, message: &str) -> EvalError {
        EvalError::NoJson {
            evaluator: evaluator.to_owned(),
            case: self.name.to_owned(),
            what,
            // The message can quote a map's key.
            message: crate::redact::owned(message),
        }
    }
}

static NO_METADATA: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);

impl<'a, I, E, O> EvalCase<'a, I, E, O> {
    /// A case to score by hand (to test an evaluator of your own): no
    /// metadata or tags; a judge's calls go to its model.
    pub fn new(
        name: &'a str,
        input: &'a I,
        expected: Option<&'a E>,
        output: &'a O,
        record: &'a CaseRecord,
    ) -> Self {
        Self {
            name,
            input,
            expected,
            metadata: &NO_METADATA,
            tags: &[],
            output,
            record,
            judge: JudgeMode::Live(Journal::default()),
            output_json: OnceLock::new(),
            expected_json: OnceLock::new(),
        }
    }

    /// `model` as an evaluator should call it: its exchanges are recorded
    /// with the case, so that a report re-scored offline answers them from
    /// the record (a request the record does not hold is then an error
    /// naming the first difference).
    pub fn model(&self, model: &Arc<dyn LanguageModel>) -> Arc<dyn LanguageModel> {
        match &self.judge {
            JudgeMode::Live(journal) => {
                Arc::new(CaseModel::live(Arc::clone(model), journal.clone()))
            }
            JudgeMode::Offline(recorded, journal) => Arc::new(CaseModel::replay(
                model.provider(),
                model.model_name(),
                recorded.as_ref().clone(),
                journal.clone(),
            )),
        }
    }
}

/// Scores a case.
///
/// Implement it for checks of your own, or use a closure with
/// [`from_fn`]. An evaluator is generic over the case's types; the
/// built-in ones work on the JSON of the output and the expected output, so
/// they fit any serializable types.
#[async_trait]
pub trait Evaluator<I, E, O>: Send + Sync {
    /// The evaluator's name: a report's column, unique in an experiment.
    fn name(&self) -> &str;

    /// Scores one case, or says why it cannot. A panic here, a score whose
    /// value is not a number in `0.0..=1.0`, or not finishing within
    /// [`Evaluators::timeout`] is reported as this evaluator's error on
    /// this case; the experiment goes on.
    async fn evaluate(&self, case: &EvalCase<'_, I, E, O>) -> Result<Score, EvalError>;
}

/// An evaluator from a closure.
///
/// ```
/// use harness_evals::{Score, from_fn};
///
/// let short = from_fn("short", |case: &harness_evals::EvalCase<'_, String, String, String>| {
///     Ok(Score::check(case.output.len() < 80, format!("{} chars", case.output.len())))
/// });
/// # let _ = short;
/// ```
pub fn from_fn<I, E, O, F>(name: impl Into<String>, f: F) -> FnEvaluator<F>
where
    F: Fn(&EvalCase<'_, I, E, O>) -> Result<Score, EvalError> + Send + Sync,
{
    FnEvaluator {
        name: name.into(),
        f,
    }
}

/// An evaluator made by [`from_fn`].
pub struct FnEvaluator<F> {
    name: String,
    f: F,
}

impl<F> fmt::Debug for FnEvaluator<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnEvaluator")
            .field("name", &crate::redact::shown(&self.name))
            .finish()
    }
}

#[async_trait]
impl<I, E, O, F> Evaluator<I, E, O> for FnEvaluator<F>
where
    I: Sync,
    E: Sync,
    O: Sync,
    F: Fn(&EvalCase<'_, I, E, O>) -> Result<Score, EvalError> + Send + Sync,
{
    fn name(&self) -> &str {
        &self.name
    }

    async fn evaluate(&self, case: &EvalCase<'_, I, E, O>) -> Result<Score, EvalError> {
        (self.f)(case)
    }
}

/// The evaluators of an experiment, in report order, and how long each
/// may take on a case.
///
/// An evaluator that has not finished scoring a case within the bound (by
/// default [`Evaluators::DEFAULT_TIMEOUT`], five minutes; set it with
/// [`Evaluators::timeout`]) is stopped and loses its score on that case
/// alone ([`EvalError::TimedOut`]); the other evaluators and cases go on.
/// The bound holds in a run, a replay and a re-score alike, which is why it
/// belongs to the evaluators rather than to the [`Experiment`](crate::Experiment)
/// ([`Experiment::rescore`](crate::Experiment::rescore) has none). It is
/// checked when the evaluator awaits: one that blocks its thread without
/// awaiting (a busy loop in a closure) cannot be stopped.
pub struct Evaluators<I, E, O> {
    pub(crate) list: Vec<Box<dyn Evaluator<I, E, O>>>,
    pub(crate) timeout: Duration,
}

impl<I, E, O> fmt::Debug for Evaluators<I, E, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Evaluators")
            .field(
                "names",
                &self
                    .list
                    .iter()
                    .map(|e| crate::redact::shown(e.name()))
                    .collect::<Vec<_>>(),
            )
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl<I, E, O> Default for Evaluators<I, E, O> {
    fn default() -> Self {
        Self {
            list: Vec::new(),
            timeout: Self::DEFAULT_TIMEOUT,
        }
    }
}

impl<I, E, O> Evaluators<I, E, O> {
    /// How long an evaluator may take on one case unless
    /// [`timeout`](Self::timeout) says otherwise: five minutes, long enough
    /// for a judge's model call and its retries, short enough that an
    /// evaluator that hangs does not hang a CI job.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

    /// No evaluators yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Stops an evaluator that has not finished scoring a case within
    /// `limit` (see [`Evaluators`]): its result on that case is
    /// [`EvalError::TimedOut`].
    pub fn timeout(mut self, limit: Duration) -> Self {
        self.timeout = limit;
        self
    }

    /// Adds an evaluator.
    pub fn with(mut self, evaluator: impl Evaluator<I, E, O> + 'static) -> Self {
        self.list.push(Box::new(evaluator));
        self
    }

    /// The evaluators' names, in order.
    pub fn names(&self) -> Vec<&str> {
        self.list.iter().map(|e| e.name()).collect()
    }

    /// The first name used twice, if one is, as a report would hold it:
    /// two names that redaction makes equal (`judge-{key}` and
    /// `judge-{token}`) count as one used twice, since a case's scores are
    /// kept by name.
    pub(crate) fn duplicate(&self) -> Option<String> {
        let names: Vec<String> = self.names().into_iter().map(crate::redact::owned).collect();
        names
            .iter()
            .enumerate()
            .find(|(i, n)| names[..*i].contains(n))
            .map(|(_, n)| n.clone())
    }
}
