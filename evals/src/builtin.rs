//! Built-in evaluators over the JSON of the output and the expected output.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Number, Value};

use crate::evaluator::{EvalCase, EvalError, Evaluator, Score, unsigned_zero};
use crate::json::json_form;

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
        (Value::Number(x), Value::Number(y)) => same_number(x, y),
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

/// Two JSON numbers equal in value, exactly: two integers as integers (a
/// `u64` or `i64` beyond 2^53 is not rounded to a float first), an integer
/// and a float when the float is that very integer (`1` and `1.0`), two
/// floats as floats.
fn same_number(x: &Number, y: &Number) -> bool {
    fn integer(n: &Number) -> Option<i128> {
        n.as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
    }
    /// Whether `float` is exactly `integer`.
    fn is(float: Option<f64>, integer: i128) -> bool {
        // 2^127: beyond it a float is no i128, and the cast would saturate.
        const LIMIT: f64 = 1.7014118346046923e38;
        float.is_some_and(|f| f.fract() == 0.0 && f.abs() < LIMIT && f as i128 == integer)
    }
    match (integer(x), integer(y)) {
        (Some(a), Some(b)) => a == b,
        (Some(a), None) => is(y.as_f64(), a),
        (None, Some(b)) => is(x.as_f64(), b),
        (None, None) => x.as_f64() == y.as_f64(),
    }
}

/// `value` as JSON for an evaluator's own setting (the value it compares
/// with), kept as the reason it has none until the evaluator is used.
fn setting(value: impl Serialize) -> Result<Value, String> {
    json_form(&value)
}

/// The setting made by [`setting`], or [`EvalError::Config`].
fn read_setting<'v>(
    setting: &'v Result<Value, String>,
    evaluator: &str,
) -> Result<&'v Value, EvalError> {
    setting.as_ref().map_err(|why| EvalError::Config {
        evaluator: evaluator.to_owned(),
        message: format!("the value to compare with has no JSON form: {why}"),
    })
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
    /// The value, or why it has no JSON form.
    Value(Result<Value, String>),
}

/// Passes when the output equals the expected output (as JSON, numbers by
/// value: `5` equals `5.0`), or a given value.
///
/// Numbers compare exactly: two integers as integers (`9007199254740993`
/// is not `9007199254740992`, though both are the same `f64`), an integer
/// and a float when the float is that integer (`5` and `5.0`), two floats
/// as floats. The reason shows both values as written in JSON.
///
/// A value with no JSON form is an error, never `null`: an output or an
/// expected output holding NaN or a map with keys that are not strings
/// is [`EvalError::NoJson`], and a value given to [`Equals::value`] that
/// has none is [`EvalError::Config`] when the evaluator is used.
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

    /// Compares with `value`. A value with no JSON form (NaN, a map with
    /// keys that are not strings) makes every case an
    /// [`EvalError::Config`] naming why.
    pub fn value(value: impl Serialize) -> Self {
        Self {
            name: "equals".into(),
            target: Target::Value(setting(value)),
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
            Target::Value(v) => read_setting(v, &self.name)?,
        };
        let got = case.output_json(&self.name)?;
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
        let haystack = text_of(case.output_json(&self.name)?);
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
        let text = text_of(case.output_json(&self.name)?);
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
        let output = case.output_json(&self.name)?;
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
    /// The value, or why it has no JSON form.
    Value(Result<Value, String>),
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

    /// Compares with `value` instead (a value with no JSON form makes every
    /// case an [`EvalError::Config`], as with [`Equals::value`]).
    pub fn equals(mut self, value: impl Serialize) -> Self {
        self.want = FieldTarget::Value(setting(value));
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
            FieldTarget::Value(v) => read_setting(v, &self.name)?,
        };
        let Some(got) = case.output_json(&self.name)?.pointer(&self.field) else {
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
/// written in the text, read by these rules:
///
/// - A number is digits, with an optional fraction (`.` and digits: `.5`
///   is `0.5`; the dot of `5.` ends a sentence and is not read) and an
///   optional exponent (`e` or `E`, an optional sign, digits: `6.02e23`,
///   `1e3`, `1E-3`).
/// - A `-` (or the minus sign `−`) or a `+` right before it is its sign
///   only when it does not follow a letter or a digit: `x = -3` is `-3`,
///   but `10-12` and `2026-11-29` are ranges and dates whose last number
///   is `12` and `29`. `-0` is `0`.
/// - A comma is a thousands separator only between groups of exactly
///   three digits after a first group of one to three (not starting with
///   `0`): `1,234,567.5` is `1234567.5`; otherwise it separates numbers:
///   the last number of `(3,4)` is `4`, of `1,5` is `5`.
/// - Digits joined by two dots or more (`v1.2.3`, `192.168.0.1`) are a
///   version or an address, not a number: each group counts alone, so the
///   last number of `v1.2.3` is `3`.
/// - A number too large for an `f64` (`1e999`) is not read.
///
/// Two integers (digits with no fraction nor exponent, in the text, or
/// JSON integers) are compared exactly, up to 39 digits (what an `i128`
/// holds, ±1.7×10³⁸; every JSON integer fits): `9007199254740993` is 1
/// away from `9007199254740992`, which an `f64` holds as the same number.
/// Any other pair, and an integer written with more digits, is compared as
/// `f64`s.
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

/// A number read by [`NumericTolerance`]: an integer, kept exactly, or
/// any other number.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Numeral {
    Integer(i128),
    Float(f64),
}

impl Numeral {
    fn as_f64(self) -> f64 {
        match self {
            // (The nearest f64: exact up to 2^53.)
            Numeral::Integer(n) => n as f64,
            Numeral::Float(f) => f,
        }
    }

    /// How far `self` is from `other`: exact between two integers (as
    /// near as an f64 holds it).
    fn distance(self, other: Numeral) -> f64 {
        match (self, other) {
            (Numeral::Integer(a), Numeral::Integer(b)) => a.abs_diff(b) as f64,
            _ => (self.as_f64() - other.as_f64()).abs(),
        }
    }
}

impl fmt::Display for Numeral {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Numeral::Integer(n) => write!(f, "{n}"),
            Numeral::Float(x) => write!(f, "{x}"),
        }
    }
}

/// A number from a JSON value: a number, or the last number in a text.
fn number_in(value: &Value) -> Option<Numeral> {
    match value {
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Some(Numeral::Integer(i.into())),
            (None, Some(u)) => Some(Numeral::Integer(u.into())),
            _ => n.as_f64().map(|f| Numeral::Float(unsigned_zero(f))),
        },
        Value::String(text) => last_number(text),
        _ => None,
    }
}

/// The last number written in `text`, by the rules of [`NumericTolerance`].
fn last_number(text: &str) -> Option<Numeral> {
    let chars: Vec<char> = text.chars().collect();
    let mut last = None;
    let mut at = 0;
    while at < chars.len() {
        match number_at(&chars, at) {
            Some((value, end)) => {
                if let Some(value) = value {
                    last = Some(value);
                }
                at = end;
            }
            None => at += 1,
        }
    }
    last
}

/// The number that starts at `chars[start]` (its sign included), and the
/// position after it; `None` when no number starts there. The value is
/// `None` for a number an `f64` cannot hold.
fn number_at(chars: &[char], start: usize) -> Option<(Option<Numeral>, usize)> {
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    let digit = |i: usize| at(i).is_ascii_digit();
    let digits_from = |mut i: usize| {
        while digit(i) {
            i += 1;
        }
        i
    };
    // A number starts with a digit, or a dot followed by one.
    let begins = |i: usize| digit(i) || (at(i) == '.' && digit(i + 1));
    let mut i = start;
    let mut text = String::new();
    if matches!(at(i), '-' | '+' | '−') {
        let after_word = start > 0 && at(start - 1).is_alphanumeric();
        if after_word || !begins(i + 1) {
            return None;
        }
        if at(i) != '+' {
            text.push('-');
        }
        i += 1;
    }
    if !begins(i) || (at(i) == '.' && i > 0 && digit(i - 1)) {
        return None;
    }
    // The whole part, with thousands separators.
    let end = digits_from(i);
    text.extend(&chars[i..end]);
    if end == i {
        text.push('0');
    }
    let grouped = (1..=3).contains(&(end - i)) && at(i) != '0';
    i = end;
    while grouped && at(i) == ',' && digits_from(i + 1) == i + 4 {
        text.extend(&chars[i + 1..i + 4]);
        i += 4;
    }
    // The fraction; two dots or more make a version, whose last group counts.
    let mut integer = true;
    if at(i) == '.' && digit(i + 1) {
        let end = digits_from(i + 1);
        if at(end) == '.' && digit(end + 1) {
            let mut group = end + 1;
            let mut end = digits_from(group);
            while at(end) == '.' && digit(end + 1) {
                group = end + 1;
                end = digits_from(group);
            }
            let last: String = chars[group..end].iter().collect();
            return Some((read_number(&last, true), end));
        }
        text.push('.');
        text.extend(&chars[i + 1..end]);
        integer = false;
        i = end;
    }
    // The exponent.
    if matches!(at(i), 'e' | 'E') {
        let sign = usize::from(matches!(at(i + 1), '-' | '+'));
        if digit(i + 1 + sign) {
            let end = digits_from(i + 1 + sign);
            text.push('e');
            text.extend(&chars[i + 1..end]);
            integer = false;
            i = end;
        }
    }
    Some((read_number(&text, integer), i))
}

/// The number `text` (as `number_at` gathered it) writes: an integer
/// when it is one and an `i128` holds it, else an `f64` when one holds it.
fn read_number(text: &str, integer: bool) -> Option<Numeral> {
    if integer && let Ok(n) = text.parse::<i128>() {
        return Some(Numeral::Integer(n));
    }
    text.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
        .map(|v| Numeral::Float(unsigned_zero(v)))
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
        let output = case.output_json(&self.name)?;
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
        let allowed = self.absolute.max(self.relative * want.as_f64().abs());
        let off = got.distance(want);
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
    use serde_json::json;

    use super::*;

    #[test]
    fn last_number_in_text() {
        let table: &[(&str, Option<f64>)] = &[
            ("12 * 7 = 84", Some(84.0)),
            ("The answer is 1,234.5.", Some(1234.5)),
            ("it is -3", Some(-3.0)),
            ("x = -3", Some(-3.0)),
            ("x=-3", Some(-3.0)),
            ("no digits here", None),
            ("version 2. done", Some(2.0)),
            ("", None),
            // A dash after a digit or a letter is no sign.
            ("pages 10-12", Some(12.0)),
            ("on 2026-11-29", Some(29.0)),
            ("COVID-19", Some(19.0)),
            ("between -5 and -7", Some(-7.0)),
            ("(-4)", Some(-4.0)),
            ("it is −8", Some(-8.0)),
            // Commas: thousands only between groups of three.
            ("the point (3,4)", Some(4.0)),
            ("1,5", Some(5.0)),
            ("1,234,567", Some(1_234_567.0)),
            ("-1,234", Some(-1234.0)),
            ("1,2345", Some(2345.0)),
            ("12345,678", Some(678.0)),
            ("1,234,56", Some(56.0)),
            ("0,123", Some(123.0)),
            ("1,234 apples", Some(1234.0)),
            // Exponents.
            ("6.02e23", Some(6.02e23)),
            ("about 1e3", Some(1000.0)),
            ("1E-3", Some(0.001)),
            ("2.5e+2 m", Some(250.0)),
            ("5em", Some(5.0)),
            ("1e999", None),
            ("7 then 1e999", Some(7.0)),
            // Versions and addresses: the last group.
            ("v1.2.3", Some(3.0)),
            ("192.168.0.17", Some(17.0)),
            // Signs, dots and zeros.
            ("+5", Some(5.0)),
            (".5", Some(0.5)),
            ("-.5", Some(-0.5)),
            ("5.", Some(5.0)),
            ("12.375", Some(12.375)),
            ("a+b", None),
            ("- 3", Some(3.0)),
        ];
        for (text, want) in table {
            assert_eq!(last_number(text).map(Numeral::as_f64), *want, "in {text:?}");
        }
        // -0 is 0, not -0.
        for zero in ["-0", "-0.0", "-0e3"] {
            let zero = last_number(zero).unwrap().as_f64();
            assert_eq!(zero, 0.0);
            assert!(zero.is_sign_positive());
        }
    }

    #[test]
    fn integers_are_read_and_compared_exactly() {
        let table: &[(&str, Option<Numeral>)] = &[
            (
                "9007199254740993",
                Some(Numeral::Integer(9_007_199_254_740_993)),
            ),
            (
                "id -9007199254740993",
                Some(Numeral::Integer(-9_007_199_254_740_993)),
            ),
            (
                "9,007,199,254,740,993",
                Some(Numeral::Integer(9_007_199_254_740_993)),
            ),
            (
                "u128 max is 340282366920938463463374607431768211455",
                Some(Numeral::Float(3.402_823_669_209_385e38)),
            ),
            (
                "v1.2.9007199254740993",
                Some(Numeral::Integer(9_007_199_254_740_993)),
            ),
            ("12", Some(Numeral::Integer(12))),
            ("12.0", Some(Numeral::Float(12.0))),
            ("12e0", Some(Numeral::Float(12.0))),
        ];
        for (text, want) in table {
            assert_eq!(last_number(text), *want, "in {text:?}");
        }
        let n = |v: Value| number_in(&v).unwrap();
        assert_eq!(n(json!(u64::MAX)), Numeral::Integer(u64::MAX.into()));
        assert_eq!(n(json!(i64::MIN)), Numeral::Integer(i64::MIN.into()));
        assert_eq!(n(json!(-0.0)), Numeral::Float(0.0));
        // Two integers 1 apart that an f64 holds as one number.
        let (a, b) = (
            n(json!(9_007_199_254_740_993_u64)),
            n(json!("9007199254740992")),
        );
        assert_eq!(a.as_f64(), b.as_f64());
        assert_eq!(a.distance(b), 1.0);
        assert_eq!(
            Numeral::Integer(i128::MIN).distance(Numeral::Integer(i128::MAX)),
            u128::MAX as f64
        );
        // An integer and any other number: as f64s.
        assert_eq!(Numeral::Integer(3).distance(Numeral::Float(2.5)), 0.5);
    }

    #[test]
    fn numbers_compare_exactly() {
        let n = |v: Value| match v {
            Value::Number(n) => n,
            _ => unreachable!(),
        };
        let equal = [
            (json!(1), json!(1.0)),
            (json!(-3), json!(-3.0)),
            (
                json!(9_007_199_254_740_993_u64),
                json!(9_007_199_254_740_993_i64),
            ),
            (json!(u64::MAX), json!(u64::MAX)),
            (json!(0.5), json!(0.5)),
            (
                json!(9_007_199_254_740_992_u64),
                json!(9_007_199_254_740_992.0),
            ),
        ];
        for (a, b) in equal {
            assert!(same_number(&n(a.clone()), &n(b.clone())), "{a} == {b}");
            assert!(same_number(&n(b.clone()), &n(a.clone())), "{b} == {a}");
        }
        let different = [
            (
                json!(9_007_199_254_740_993_u64),
                json!(9_007_199_254_740_992_u64),
            ),
            (
                json!(9_007_199_254_740_993_u64),
                json!(9_007_199_254_740_992.0),
            ),
            (json!(i64::MIN), json!(i64::MIN + 1)),
            (json!(u64::MAX), json!(u64::MAX - 1)),
            (json!(u64::MAX), json!(1.8446744073709552e19)),
            (json!(1), json!(1.5)),
            (json!(-1), json!(u64::MAX)),
            (json!(1), json!(1e300)),
        ];
        for (a, b) in different {
            assert!(!same_number(&n(a.clone()), &n(b.clone())), "{a} != {b}");
            assert!(!same_number(&n(b.clone()), &n(a.clone())), "{b} != {a}");
        }
    }
}
