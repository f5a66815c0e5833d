//! Trajectories: which tools the model called, which steps the loop ran.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use harness::llm::ToolCall;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::builtin::{brief, same_json};
use crate::evaluator::{EvalCase, EvalError, Evaluator, Score};

/// How a run's trajectory is compared with the reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Match {
    /// The same entries in the same order, nothing more.
    Strict,
    /// The same entries in any order, nothing more.
    Unordered,
    /// Every entry of the run is in the reference (the run did nothing the
    /// reference does not allow; it may leave some out).
    Subset,
    /// Every entry of the reference is in the run (it may do more).
    Superset,
}

impl fmt::Display for Match {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Match::Strict => "strict",
            Match::Unordered => "unordered",
            Match::Subset => "subset",
            Match::Superset => "superset",
        })
    }
}

/// Compares `actual` with `reference` under `mode`; `fits(r, a)` says
/// whether reference entry `r` accepts actual entry `a`. `Err` says why
/// not.
pub(crate) fn compare<A, R>(
    mode: Match,
    actual: &[A],
    reference: &[R],
    fits: impl Fn(&R, &A) -> bool,
    show_a: impl Fn(&A) -> String,
    show_r: impl Fn(&R) -> String,
) -> Result<(), String> {
    if mode == Match::Strict {
        for (i, (r, a)) in reference.iter().zip(actual).enumerate() {
            if !fits(r, a) {
                return Err(format!(
                    "entry {}: got {}, want {}",
                    i + 1,
                    show_a(a),
                    show_r(r)
                ));
            }
        }
        return match actual.len().cmp(&reference.len()) {
            std::cmp::Ordering::Equal => Ok(()),
            std::cmp::Ordering::Less => Err(format!(
                "{}, want {}: missing {}",
                crate::report::count(actual.len(), "entry", "entries"),
                reference.len(),
                show_r(&reference[actual.len()])
            )),
            std::cmp::Ordering::Greater => Err(format!(
                "{}, want {}: extra {}",
                crate::report::count(actual.len(), "entry", "entries"),
                reference.len(),
                show_a(&actual[reference.len()])
            )),
        };
    }
    // A maximum matching between reference and actual entries (augmenting
    // paths: entries can fit several others, so a greedy pass is not enough).
    let mut owner: Vec<Option<usize>> = vec![None; actual.len()];
    fn augment<A, R>(
        r: usize,
        reference: &[R],
        actual: &[A],
        fits: &dyn Fn(&R, &A) -> bool,
        seen: &mut [bool],
        owner: &mut [Option<usize>],
    ) -> bool {
        for a in 0..actual.len() {
            if seen[a] || !fits(&reference[r], &actual[a]) {
                continue;
            }
            seen[a] = true;
            let free = match owner[a] {
                None => true,
                Some(other) => augment(other, reference, actual, fits, seen, owner),
            };
            if free {
                owner[a] = Some(r);
                return true;
            }
        }
        false
    }
    let mut unmatched_reference = Vec::new();
    for r in 0..reference.len() {
        let mut seen = vec![false; actual.len()];
        if !augment(r, reference, actual, &fits, &mut seen, &mut owner) {
            unmatched_reference.push(r);
        }
    }
    let unmatched_actual: Vec<usize> = (0..actual.len()).filter(|a| owner[*a].is_none()).collect();
    let missing = || {
        unmatched_reference
            .iter()
            .map(|r| show_r(&reference[*r]))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let extra = || {
        unmatched_actual
            .iter()
            .map(|a| show_a(&actual[*a]))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let need_all_reference = matches!(mode, Match::Unordered | Match::Superset);
    let need_all_actual = matches!(mode, Match::Unordered | Match::Subset);
    if need_all_reference && !unmatched_reference.is_empty() {
        return Err(format!("missing {}", missing()));
    }
    if need_all_actual && !unmatched_actual.is_empty() {
        return Err(format!("not in the reference: {}", extra()));
    }
    Ok(())
}

/// How a reference tool call judges a call's arguments.
#[derive(Clone)]
pub enum Args {
    /// Any arguments.
    Any,
    /// Exactly these (as JSON; numbers by value, `2` equals `2.0`).
    Exact(Value),
    /// At least these fields with these values (others may be there too).
    Contains(Value),
    /// A check of your own.
    Check(Arc<dyn Fn(&Value) -> bool + Send + Sync>),
}

impl fmt::Debug for Args {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Args::Any => f.write_str("Any"),
            Args::Exact(v) => write!(f, "Exact({v})"),
            Args::Contains(v) => write!(f, "Contains({v})"),
            Args::Check(_) => f.write_str("Check(..)"),
        }
    }
}

/// Whether `actual` has every field of `wanted` with the same value
/// (recursively for objects; other values compare equal).
fn contains_json(actual: &Value, wanted: &Value) -> bool {
    match (actual, wanted) {
        (Value::Object(a), Value::Object(w)) => w
            .iter()
            .all(|(k, wv)| a.get(k).is_some_and(|av| contains_json(av, wv))),
        (a, w) => same_json(a, w),
    }
}

impl Args {
    fn accepts(&self, arguments: &Value) -> bool {
        match self {
            Args::Any => true,
            Args::Exact(v) => same_json(v, arguments),
            Args::Contains(v) => contains_json(arguments, v),
            Args::Check(f) => f(arguments),
        }
    }
}

/// A tool call the reference expects: a tool name and an argument check.
#[derive(Debug, Clone)]
pub struct ExpectedCall {
    /// The tool.
    pub name: String,
    /// What its arguments must be.
    pub args: Args,
}

/// A reference call to `name`, with any arguments until
/// [`args`](ExpectedCall::args) or [`args_contain`](ExpectedCall::args_contain).
pub fn call(name: impl Into<String>) -> ExpectedCall {
    ExpectedCall {
        name: name.into(),
        args: Args::Any,
    }
}

impl ExpectedCall {
    /// Exactly these arguments.
    pub fn args(mut self, args: Value) -> Self {
        self.args = Args::Exact(args);
        self
    }

    /// At least these argument fields.
    pub fn args_contain(mut self, args: Value) -> Self {
        self.args = Args::Contains(args);
        self
    }

    /// Arguments that pass `check`.
    pub fn args_check(mut self, check: impl Fn(&Value) -> bool + Send + Sync + 'static) -> Self {
        self.args = Args::Check(Arc::new(check));
        self
    }

    fn show(&self) -> String {
        match &self.args {
            Args::Any => self.name.clone(),
            Args::Exact(v) | Args::Contains(v) => {
                format!("{}({})", self.name, brief(&v.to_string()))
            }
            Args::Check(_) => format!("{}(…)", self.name),
        }
    }
}

fn show_call(call: &ToolCall) -> String {
    format!("{}({})", call.name, brief(&call.arguments.to_string()))
}

#[derive(Debug, Clone)]
enum Reference<T> {
    Given(Vec<T>),
    /// An array in the expected output at this JSON pointer.
    Expected(String),
}

/// Compares the tool calls the model asked for (from the case's recorded
/// exchanges) with a reference trajectory.
///
/// The reference is given, or read from the expected output at a JSON
/// pointer: an array of `{"name": …, "args": …}` objects (`args` absent:
/// any arguments; present: compared as [`args_mode_contains`](Self::args_mode_contains)
/// says, exactly by default).
///
/// ```
/// use harness_evals::{Match, ToolTrajectory, call};
/// use serde_json::json;
///
/// let trajectory = ToolTrajectory::new(Match::Strict, [
///     call("capital_of").args(json!({"country": "France"})),
///     call("weather").args_contain(json!({"city": "Paris"})),
/// ]);
/// # let _ = trajectory;
/// ```
#[derive(Debug, Clone)]
pub struct ToolTrajectory {
    name: String,
    mode: Match,
    reference: Reference<ExpectedCall>,
    contains: bool,
}

impl ToolTrajectory {
    /// Compares with `reference` under `mode`.
    pub fn new(mode: Match, reference: impl IntoIterator<Item = ExpectedCall>) -> Self {
        Self {
            name: format!("tools ({mode})"),
            mode,
            reference: Reference::Given(reference.into_iter().collect()),
            contains: false,
        }
    }

    /// Compares with the array at `pointer` in the expected output.
    pub fn from_expected(mode: Match, pointer: impl Into<String>) -> Self {
        Self {
            name: format!("tools ({mode})"),
            mode,
            reference: Reference::Expected(pointer.into()),
            contains: false,
        }
    }

    /// For a reference read from the expected output: `args` given there
    /// must be contained in the call's arguments, not equal to them.
    pub fn args_mode_contains(mut self) -> Self {
        self.contains = true;
        self
    }

    /// Renames the evaluator.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    fn reference_from(&self, expected: &Value, at: &str) -> Result<Vec<ExpectedCall>, EvalError> {
        let bad = |message: String| EvalError::Value {
            evaluator: self.name.clone(),
            message,
        };
        let list = expected
            .pointer(at)
            .and_then(Value::as_array)
            .ok_or_else(|| bad(format!("the expected output has no array at `{at}`")))?;
        list.iter()
            .enumerate()
            .map(|(i, entry)| {
                let name = entry
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| bad(format!("`{at}/{i}` has no string `name`")))?;
                let args = match entry.get("args") {
                    None => Args::Any,
                    Some(v) if self.contains => Args::Contains(v.clone()),
                    Some(v) => Args::Exact(v.clone()),
                };
                Ok(ExpectedCall {
                    name: name.to_owned(),
                    args,
                })
            })
            .collect()
    }
}

#[async_trait]
impl<I: Sync, E: Serialize + Sync, O: Serialize + Sync> Evaluator<I, E, O> for ToolTrajectory {
    fn name(&self) -> &str {
        &self.name
    }

    async fn evaluate(&self, case: &EvalCase<'_, I, E, O>) -> Result<Score, EvalError> {
        let read;
        let reference: &[ExpectedCall] = match &self.reference {
            Reference::Given(list) => list,
            Reference::Expected(at) => {
                read = self.reference_from(case.require_expected(&self.name)?, at)?;
                &read
            }
        };
        let calls = case.record.tool_calls();
        let result = compare(
            self.mode,
            &calls,
            reference,
            |r, a| r.name == a.name && r.args.accepts(&a.arguments),
            show_call,
            ExpectedCall::show,
        );
        let shown: Vec<String> = calls.iter().map(show_call).collect();
        Ok(match result {
            Ok(()) => Score::pass(format!("[{}]", shown.join(", "))),
            Err(why) => Score::fail(format!("{why}; calls: [{}]", shown.join(", "))),
        })
    }
}

/// Compares the steps the run finished (from its events: `step` in the
/// run's own loop, `path/step` in a branch or a sub-agent, in order) with a
/// reference list, or with the array of strings at a JSON pointer in the
/// expected output.
///
/// ```
/// use harness_evals::{Match, StepTrajectory};
///
/// let steps = StepTrajectory::new(Match::Superset, ["model", "tools", "model"]);
/// # let _ = steps;
/// ```
#[derive(Debug, Clone)]
pub struct StepTrajectory {
    name: String,
    mode: Match,
    reference: Reference<String>,
    unqualified: bool,
}

impl StepTrajectory {
    /// Compares with `steps` under `mode`.
    pub fn new(mode: Match, steps: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            name: format!("steps ({mode})"),
            mode,
            reference: Reference::Given(steps.into_iter().map(Into::into).collect()),
            unqualified: false,
        }
    }

    /// Compares with the array of step names at `pointer` in the expected
    /// output.
    pub fn from_expected(mode: Match, pointer: impl Into<String>) -> Self {
        Self {
            name: format!("steps ({mode})"),
            mode,
            reference: Reference::Expected(pointer.into()),
            unqualified: false,
        }
    }

    /// Compares step names only, whatever task ran them.
    pub fn unqualified(mut self) -> Self {
        self.unqualified = true;
        self
    }

    /// Renames the evaluator.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }
}

#[async_trait]
impl<I: Sync, E: Serialize + Sync, O: Serialize + Sync> Evaluator<I, E, O> for StepTrajectory {
    fn name(&self) -> &str {
        &self.name
    }

    async fn evaluate(&self, case: &EvalCase<'_, I, E, O>) -> Result<Score, EvalError> {
        let read: Vec<String>;
        let reference: &[String] = match &self.reference {
            Reference::Given(list) => list,
            Reference::Expected(at) => {
                let list = case
                    .require_expected(&self.name)?
                    .pointer(at)
                    .and_then(Value::as_array)
                    .ok_or_else(|| EvalError::Value {
                        evaluator: self.name.clone(),
                        message: format!("the expected output has no array at `{at}`"),
                    })?;
                read = list
                    .iter()
                    .map(|v| {
                        v.as_str()
                            .map(str::to_owned)
                            .ok_or_else(|| EvalError::Value {
                                evaluator: self.name.clone(),
                                message: format!("`{at}` holds {v}, not a step name"),
                            })
                    })
                    .collect::<Result<_, _>>()?;
                &read
            }
        };
        let steps: Vec<String> = if self.unqualified {
            case.record
                .events
                .iter()
                .filter(|e| e.kind == "step_finished")
                .filter_map(|e| e.step.clone())
                .collect()
        } else {
            case.record.steps()
        };
        let result = compare(
            self.mode,
            &steps,
            reference,
            |r, a| r == a,
            Clone::clone,
            Clone::clone,
        );
        Ok(match result {
            Ok(()) => Score::pass(steps.join(" → ")),
            Err(why) => Score::fail(format!("{why}; steps: {}", steps.join(" → "))),
        })
    }
}
