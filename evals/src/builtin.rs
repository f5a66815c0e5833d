//! Built-in evaluators over the JSON of the output and the expected output.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use crate::evaluator::{EvalCase, EvalError, Evaluator, Score};

/// A value as text: a JSON string is its content, anything else its JSON.
pub(crate) fn text_of(value: &Value) -> Cow<'_, str> {
    match value {
        Value::String(s) => Cow::Borrowed(s),
        other => Cow::Owned(other.to_string()),
    }
}

/// Shortens `text` for a reason line, with the process's secrets replaced
/// first: a secret cut in two would no longer be found whole by the
/// redaction of the report.
pub(crate) fn brief(text: &str) -> String {
    const MAX: usize = 80;
    let text = crate::redact::shown(text);
    let text = text.as_ref();
    if text.chars().count() <= MAX {
        return text.to_owned();
    }
    let cut: String = text.chars().take(MAX).collect();
    format!("{cut}…")
}

/// JSON equality, numbers compared by value (`17` equals `17.0`: a model
/// may write either).
pub(crate) fn same_json(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x == y || x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_json(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_json(v, w)))
        }
        (x, y) => x == y,
    }
}

fn pointer<'v>(
    value: &'v Value,
    pointer: &str,
    what: &str,
    evaluator: &str,
) -> Result<&'v Value, EvalError> {
    value.pointer(pointer).ok_or_else(|| EvalError::Value {
        evaluator: evaluator.to_owned(),
        message: format!("the {what} has no value at `{pointer}`"),
    })
}

macro_rules! named {
    () => {
        /// Renames the evaluator (to use two of a kind in one experiment).
        pub fn named(mut self, name: impl Into<String>) -> Self {
            self.name = name.into();
            self
        }
    };
}

/// What [`Equals`] compares the output with.
#[derive(Debug, Clone)]
enum Target {
    Expected,
    Value(Value),
}

/// Passes when the output equals the expected output (as JSON, numbers by
/// value: `5` equals `5.0`), or a given value.
#[derive(Debug, Clone)]
pub struct Equals {
    name: String,
    target: Target,
}

impl Equals {
    /// Compares with the case's expected output.
    pub fn expected() -> Self {
        Self {
            name: "equals".into(),
            target: Target::Expected,
        }
    }

    /// Compares with `value`.
    pub fn value(value: impl Serialize) -> Self {
        Self {
            name: "equals".into(),
            target: Target::Value(serde_json::to_value(value).unwrap_or(Value::Null)),
        }
    }

    named!();
}

#[async_trait]
impl<I: Sync, E: Serialize + Sync, O: Serialize + Sync> Evaluator<I, E, O> for Equals {
    fn name(&self) -> &str {
        &self.name
    }

    async fn evaluate(&self, case: &EvalCase<'_, I, E, O>) -> Result<Score, EvalError> {
        let want = match &self.target {
            Target::Expected => case.require_expected(&self.name)?,
            Target::Value(v) => v,
        };
        let got = case.output_json();
        Ok(Score::check(
            same_json(got, want),
            format!(
                "got {}, want {}",
                brief(&got.to_string()),
                brief(&want.to_string())
            ),
        ))
    }
}

/// Passes when the output's text contains a string: a given one, or the
/// expected output's text.
#[derive(Debug, Clone)]
pub struct Contains {
    name: String,
    needle: Option<String>,
    ignore_case: bool,
}

impl Contains {
    /// Looks for `needle`.
    pub fn text(needle: impl Into<String>) -> Self {
        Self {
            name: "contains".into(),
            needle: Some(needle.into()),
            ignore_case: false,
        }
    }

    /// Looks for the expected output's text.
    pub fn expected() -> Self {
        Self {
            name: "contains".into(),
            needle: None,
            ignore_case: false,
        }
    }

    /// Compares without regard to case.
    pub fn ignore_case(mut self) -> Self {
        self.ignore_case = true;
        self
    }

    named!();
}

#[async_trait]
impl<I: Sync, E: Serialize + Sync, O: Serialize + Sync> Evaluator<I, E, O> for Contains {
    fn name(&self) -> &str {
        &self.name
    }

    async fn evaluate(&self, case: &EvalCase<'_, I, E, O>) -> Result<Score, EvalError> {
        let needle = match &self.needle {
            Some(n) => Cow::Borrowed(n.as_str()),
            None => text_of(case.require_expected(&self.name)?),
        };
        let haystack = text_of(case.output_json());
        let found = if self.ignore_case {
            haystack.to_lowercase().contains(&needle.to_lowercase())
        } else {
            haystack.contains(needle.as_ref())
        };
        Ok(Score::check(
            found,
            format!(
                "{} {:?} in {:?}",
                if found { "found" } else { "no" },
                brief(&needle),
                brief(&haystack)
            ),
        ))
    }
}

/// Passes when a regular expression matches the output's text.
#[derive(Clone)]
pub struct Matches {
    name: String,
    regex: regex::Regex,
}

impl fmt::Debug for Matches {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Matches")
            .field("name", &self.name)
            .field("regex", &self.regex.as_str())
            .finish()
    }
}

impl Matches {
    /// Matches `pattern` (the `regex` crate's syntax); an invalid pattern is
    /// [`EvalError::Config`].
    pub fn new(pattern: &str) -> Result<Self, EvalError> {
        let regex = regex::Regex::new(pattern).map_err(|e| EvalError::Config {
            evaluator: "matches".into(),
            message: format!("invalid regex {pattern:?}: {e}"),
        })?;
        Ok(Self {
            name: "matches".into(),
            regex,
        })
    }

    named!();
}

#[async_trait]
impl<I: Sync, E: Sync, O: Serialize + Sync> Evaluator<I, E, O> for Matches {
    fn name(&self) -> &str {
        &self.name
    }

    async fn evaluate(&self, case: &EvalCase<'_, I, E, O>) -> Result<Score, EvalError> {
        let text = serde_json::to_value(case.output).unwrap_or(Value::Null);
        let text = text_of(&text);
        let found = self.regex.is_match(&text);
        Ok(Score::check(
            found,
            format!(
                "/{}/ {} {:?}",
                self.regex.as_str(),
                if found { "matches" } else { "does not match" },
                brief(&text)
            ),
        ))
    }
}

/// Passes when the output is valid against a JSON schema (a string output
/// can be parsed as JSON first, for a model's text answer).
pub struct JsonSchemaValid {
    name: String,
    validator: jsonschema::Validator,
    parse_text: bool,
}

impl fmt::Debug for JsonSchemaValid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JsonSchemaValid")
            .field("name", &self.name)
            .field("parse_text", &self.parse_text)
            .finish_non_exhaustive()
    }
}

impl JsonSchemaValid {
    /// Validates against `schema`; a schema that is not valid is
    /// [`EvalError::Config`].
    pub fn new(schema: &Value) -> Result<Self, EvalError> {
        let validator = jsonschema::validator_for(schema).map_err(|e| EvalError::Config {
            evaluator: "json_schema".into(),
            message: format!("invalid JSON schema: {e}"),
        })?;
        Ok(Self {
            name: "json_schema".into(),
            validator,
            parse_text: false,
        })
    }

    /// Validates against the schema of `T`.
    pub fn of<T: JsonSchema>() -> Result<Self, EvalError> {
        Self::new(&schemars::schema_for!(T).to_value())
    }

    /// When the output is a string, parses it as JSON and validates that
    /// (text that is not JSON fails).
    pub fn parse_text(mut self) -> Self {
        self.parse_text = true;
        self
    }

    named!();
}

#[async_trait]
impl<I: Sync, E: Serialize + Sync, O: Serialize + Sync> Evaluator<I, E, O> for JsonSchemaValid {
    fn name(&self) -> &str {
        &self.name
    }

    async fn evaluate(&self, case: &EvalCase<'_, I, E, O>) -> Result<Score, EvalError> {
        let output = case.output_json();
        let parsed;
        let instance = match output {
            Value::String(text) if self.parse_text => match serde_json::from_str::<Value>(text) {
                Ok(value) => {
                    parsed = value;
                    &parsed
                }
                Err(e) => return Ok(Score::fail(format!("the output is not JSON: {e}"))),
            },
            other => other,
        };
        let errors: Vec<String> = self
            .validator
            .iter_errors(instance)
            .take(3)
            .map(|e| {
                let at = e.instance_path().to_string();
                format!("at `{}`: {e}", if at.is_empty() { "/" } else { &at })
            })
            .collect();
        Ok(if errors.is_empty() {
            Score::pass("valid")
        } else {
            Score::fail(errors.join("; "))
        })
    }
}

/// Passes when a field of the output (a JSON pointer, `/answer/city`)
/// equals the same field of the expected output, a field elsewhere in it,
/// or a given value.
#[derive(Debug, Clone)]
pub struct FieldMatch {
    name: String,
    field: String,
    want: FieldTarget,
}

#[derive(Debug, Clone)]
enum FieldTarget {
    Expected(String),
    Value(Value),
}

impl FieldMatch {
    /// Compares the output's `field` with the expected output's `field`.
    pub fn new(field: impl Into<String>) -> Self {
        let field = field.into();
        Self {
            name: format!("field {field}"),
            want: FieldTarget::Expected(field.clone()),
            field,
        }
    }

    /// Compares with the expected output's value at `pointer` instead.
    pub fn expected_at(mut self, pointer: impl Into<String>) -> Self {
        self.want = FieldTarget::Expected(pointer.into());
        self
    }

    /// Compares with `value` instead.
    pub fn equals(mut self, value: impl Serialize) -> Self {
        self.want = FieldTarget::Value(serde_json::to_value(value).unwrap_or(Value::Null));
        self
    }

    named!();
}

#[async_trait]
impl<I: Sync, E: Serialize + Sync, O: Serialize + Sync> Evaluator<I, E, O> for FieldMatch {
    fn name(&self) -> &str {
        &self.name
    }

    async fn evaluate(&self, case: &EvalCase<'_, I, E, O>) -> Result<Score, EvalError> {
        let want = match &self.want {
            FieldTarget::Expected(at) => pointer(
                case.require_expected(&self.name)?,
                at,
                "expected output",
                &self.name,
            )?,
            FieldTarget::Value(v) => v,
        };
        let Some(got) = case.output_json().pointer(&self.field) else {
            return Ok(Score::fail(format!("the output has no `{}`", self.field)));
        };
        Ok(Score::check(
            same_json(got, want),
            format!(
                "`{}`: got {}, want {}",
                self.field,
                brief(&got.to_string()),
                brief(&want.to_string())
            ),
        ))
    }
}

/// Passes when a number in the output is within a tolerance of the
/// expected number.
///
/// The number is the output itself, a field of it ([`at`](Self::at)), or —
/// when that is text, like a model's answer "12 × 7 = 84" — the last number
/// written in the text.
#[derive(Debug, Clone)]
pub struct NumericTolerance {
    name: String,
    absolute: f64,
    relative: f64,
    field: Option<String>,
    expected_field: Option<String>,
}

impl NumericTolerance {
    /// Within `absolute` of the expected number.
    pub fn new(absolute: f64) -> Self {
        Self {
            name: "numeric".into(),
            absolute: absolute.abs(),
            relative: 0.0,
            field: None,
            expected_field: None,
        }
    }

    /// Also passes within `relative × |expected|`.
    pub fn relative(mut self, relative: f64) -> Self {
        self.relative = relative.abs();
        self
    }

    /// Reads the output's number at `pointer`, and the expected output's at
    /// the same pointer.
    pub fn at(mut self, pointer: impl Into<String>) -> Self {
        let pointer = pointer.into();
        self.field = Some(pointer.clone());
        self.expected_field = Some(pointer);
        self
    }

    /// Reads the expected number at `pointer` in the expected output
    /// (after [`at`](Self::at), which sets both).
    pub fn expected_at(mut self, pointer: impl Into<String>) -> Self {
        self.expected_field = Some(pointer.into());
        self
    }

    named!();
}

/// A number from a JSON value: a number, or the last number in a text.
pub(crate) fn number_in(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        Value::String(text) => last_number(text),
        _ => None,
    }
}

fn last_number(text: &str) -> Option<f64> {
    let bytes = text.as_bytes();
    let mut end = bytes.len();
    while end > 0 {
        // Find the last digit, then the start of its number.
        let last_digit = bytes[..end].iter().rposition(u8::is_ascii_digit)?;
        let mut start = last_digit;
        while start > 0
            && (bytes[start - 1].is_ascii_digit() || matches!(bytes[start - 1], b'.' | b','))
        {
            start -= 1;
        }
        if start > 0 && bytes[start - 1] == b'-' {
            start -= 1;
        }
        let candidate: String = text[start..=last_digit]
            .chars()
            .filter(|c| *c != ',')
            .collect();
        let candidate = candidate.trim_start_matches('.');
        if let Ok(n) = candidate.parse::<f64>() {
            return Some(n);
        }
        end = start;
    }
    None
}

#[async_trait]
impl<I: Sync, E: Serialize + Sync, O: Serialize + Sync> Evaluator<I, E, O> for NumericTolerance {
    fn name(&self) -> &str {
        &self.name
    }

    async fn evaluate(&self, case: &EvalCase<'_, I, E, O>) -> Result<Score, EvalError> {
        let expected = case.require_expected(&self.name)?;
        let expected = match &self.expected_field {
            Some(at) => pointer(expected, at, "expected output", &self.name)?,
            None => expected,
        };
        let want = number_in(expected).ok_or_else(|| EvalError::Value {
            evaluator: self.name.clone(),
            message: format!(
                "the expected output {} is not a number",
                brief(&expected.to_string())
            ),
        })?;
        let output = case.output_json();
        let output = match &self.field {
            Some(at) => match output.pointer(at) {
                Some(v) => v,
                None => return Ok(Score::fail(format!("the output has no `{at}`"))),
            },
            None => output,
        };
        let Some(got) = number_in(output) else {
            return Ok(Score::fail(format!(
                "no number in the output {}",
                brief(&text_of(output))
            )));
        };
        let allowed = self.absolute.max(self.relative * want.abs());
        let off = (got - want).abs();
        Ok(Score::check(
            off <= allowed,
            format!("got {got}, want {want} ± {allowed}"),
        ))
    }
}

/// Passes when the case stayed within its limits: latency, tokens, cost,
/// model calls (from the run's record).
#[derive(Debug, Clone, Default)]
pub struct Budget {
    name: String,
    latency: Option<Duration>,
    tokens: Option<u64>,
    cost: Option<f64>,
    model_calls: Option<u32>,
}

impl Budget {
    /// No limits yet.
    pub fn new() -> Self {
        Self {
            name: "budget".into(),
            ..Self::default()
        }
    }

    /// At most this long.
    pub fn max_latency(mut self, limit: Duration) -> Self {
        self.latency = Some(limit);
        self
    }

    /// At most this many tokens (input and output).
    pub fn max_tokens(mut self, limit: u64) -> Self {
        self.tokens = Some(limit);
        self
    }

    /// At most this cost (needs the experiment's prices; a case whose cost
    /// is unknown cannot be scored).
    pub fn max_cost(mut self, limit: f64) -> Self {
        self.cost = Some(limit);
        self
    }

    /// At most this many model calls.
    pub fn max_model_calls(mut self, limit: u32) -> Self {
        self.model_calls = Some(limit);
        self
    }

    named!();
}

#[async_trait]
impl<I: Sync, E: Sync, O: Sync> Evaluator<I, E, O> for Budget {
    fn name(&self) -> &str {
        &self.name
    }

    async fn evaluate(&self, case: &EvalCase<'_, I, E, O>) -> Result<Score, EvalError> {
        let m = &case.record.metrics;
        let mut over = Vec::new();
        let mut within = Vec::new();
        if let Some(limit) = self.latency {
            let ms = limit.as_secs_f64() * 1e3;
            let line = format!("latency {:.0} ms of {ms:.0}", m.latency_ms);
            if m.latency_ms > ms {
                over.push(line)
            } else {
                within.push(line)
            }
        }
        if let Some(limit) = self.tokens {
            let used = m.usage.input_tokens + m.usage.output_tokens;
            let line = format!(
                "{} of {limit}",
                crate::report::count(used, "token", "tokens")
            );
            if used > limit {
                over.push(line)
            } else {
                within.push(line)
            }
        }
        if let Some(limit) = self.cost {
            let Some(cost) = m.cost else {
                return Err(EvalError::Value {
                    evaluator: self.name.clone(),
                    message: "the case's cost is unknown: give the experiment prices for its model"
                        .into(),
                });
            };
            let line = format!("cost {cost:.6} of {limit:.6}");
            if cost > limit {
                over.push(line)
            } else {
                within.push(line)
            }
        }
        if let Some(limit) = self.model_calls {
            let line = format!(
                "{} of {limit}",
                crate::report::count(m.model_calls, "model call", "model calls")
            );
            if m.model_calls > limit {
                over.push(line)
            } else {
                within.push(line)
            }
        }
        Ok(if over.is_empty() {
            Score::pass(within.join(", "))
        } else {
            Score::fail(format!("over: {}", over.join(", ")))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_number_in_text() {
        assert_eq!(last_number("12 * 7 = 84"), Some(84.0));
        assert_eq!(last_number("The answer is 1,234.5."), Some(1234.5));
        assert_eq!(last_number("it is -3"), Some(-3.0));
        assert_eq!(last_number("no digits here"), None);
        assert_eq!(last_number("version 2. done"), Some(2.0));
        assert_eq!(last_number(""), None);
    }
}
