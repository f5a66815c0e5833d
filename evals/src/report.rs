//! Reports: every case's output, scores and record; summaries and tables.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::evaluator::{Score, unsigned_zero};
use crate::record::CaseRecord;
use crate::redact;

/// The report file format version this crate writes and reads.
pub const REPORT_VERSION: u32 = 1;

/// Why a case has no output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "message")]
pub enum CaseFailure {
    /// The task returned an error (after any retries).
    Error(String),
    /// The task ran past the experiment's timeout per case.
    Timeout(String),
    /// A replay's requests differed from the recording; the message names
    /// the model call and the first difference.
    Diverged(String),
}

impl CaseFailure {
    /// The message.
    pub fn message(&self) -> &str {
        match self {
            CaseFailure::Error(m) | CaseFailure::Timeout(m) | CaseFailure::Diverged(m) => m,
        }
    }
}

/// One evaluator's result on one case: a score, or why there is none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scored {
    /// The evaluator scored the case.
    Score(Score),
    /// The evaluator could not score it (see [`EvalError`](crate::EvalError)).
    Error(String),
}

impl Scored {
    /// The score's value; `0.0` when there is none.
    pub fn value(&self) -> f64 {
        match self {
            Scored::Score(s) => s.value,
            Scored::Error(_) => 0.0,
        }
    }

    /// Whether the case passed.
    pub fn passed(&self) -> bool {
        matches!(self, Scored::Score(s) if s.passed)
    }
}

/// One case in a report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaseReport {
    /// The case's name.
    pub name: String,
    /// Its tags.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Its metadata.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub metadata: Map<String, Value>,
    /// Its input, as JSON.
    pub input: Value,
    /// Its expected output, as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<Value>,
    /// What the task returned, as JSON; `None` when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// Why it failed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<CaseFailure>,
    /// Each evaluator's result, by evaluator name (none when the task
    /// failed).
    #[serde(default)]
    pub scores: BTreeMap<String, Scored>,
    /// What the run left: exchanges, events, metrics.
    pub record: CaseRecord,
}

impl CaseReport {
    /// The evaluator's value for this case: `0.0` when the task failed or
    /// the evaluator could not score it.
    pub fn value(&self, evaluator: &str) -> f64 {
        self.scores.get(evaluator).map_or(0.0, Scored::value)
    }

    /// Whether every evaluator passed (and the task did not fail).
    pub fn passed(&self) -> bool {
        self.failure.is_none() && self.scores.values().all(Scored::passed)
    }
}

/// An experiment's result: one [`CaseReport`] per case, in dataset order.
/// Saved as JSON ([`Report::save`]); re-scored offline with
/// [`Experiment::rescore`](crate::Experiment::rescore).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// File format version.
    pub version: u32,
    /// The experiment's name.
    pub experiment: String,
    /// The dataset's name.
    pub dataset: String,
    /// The model's provider, when the experiment had a model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The model's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The evaluators' names, in column order.
    pub evaluators: Vec<String>,
    /// When it started, in milliseconds since the Unix epoch.
    pub started_ms: u64,
    /// How long the whole experiment took.
    pub elapsed_ms: f64,
    /// The cases.
    pub cases: Vec<CaseReport>,
}

/// Why a report could not be read, written or used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReportError {
    /// The file could not be read.
    #[error(
        "report {}: {}",
        crate::redact::path(path),
        crate::redact::error(source)
    )]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The file could not be replaced; the old file, if there was one, is
    /// as it was, and no temporary file is left behind.
    #[error(
        "report {}: {}",
        crate::redact::path(path),
        crate::redact::error(source)
    )]
    Save {
        /// The file.
        path: PathBuf,
        /// Which step of the atomic write failed, and on which path.
        source: harness::durable::WriteError,
    },
    /// The file is not a report (or not one this version reads).
    #[error(
        "report {}: {}",
        crate::redact::path(path),
        crate::redact::shown(message)
    )]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The file is not UTF-8 text.
    #[error(
        "report {}: it is not UTF-8 text: the byte at offset {offset} (line {line}) is not valid UTF-8",
        crate::redact::path(path)
    )]
    NotUtf8 {
        /// The file.
        path: PathBuf,
        /// The offset of the first byte that is not valid UTF-8, counted
        /// from 0.
        offset: usize,
        /// Its line, counted from 1.
        line: usize,
    },
    /// Two cases have the same name: reports and comparisons match cases by
    /// name.
    #[error(
        "report {}: cases {first} and {second} are both named `{}`; a report's case names must be unique",
        crate::redact::path(path),
        crate::redact::shown(name)
    )]
    DuplicateCase {
        /// The file.
        path: PathBuf,
        /// The name.
        name: String,
        /// The first case with it, counted from 1.
        first: usize,
        /// The second.
        second: usize,
    },
    /// A score's value is not a number in `0.0..=1.0`.
    #[error(
        "report {}: case `{}`: evaluator `{}` has the value {value}; a score's value must be a number in 0.0..=1.0",
        crate::redact::path(path),
        crate::redact::shown(case),
        crate::redact::shown(evaluator)
    )]
    InvalidScore {
        /// The file.
        path: PathBuf,
        /// The case.
        case: String,
        /// The evaluator.
        evaluator: String,
        /// The value.
        value: f64,
    },
}

/// What [`Report::load`] refuses in a report that reads as JSON; saving
/// refuses it too.
enum Invalid {
    Version(u32),
    DuplicateCase {
        name: String,
        first: usize,
        second: usize,
    },
    Score {
        case: String,
        evaluator: String,
        value: f64,
    },
}

impl Invalid {
    fn at(self, path: &Path) -> ReportError {
        let path = path.to_owned();
        match self {
            Invalid::Version(version) => ReportError::Format {
                path,
                message: format!(
                    "it has format version {version}, this crate reads {REPORT_VERSION}"
                ),
            },
            Invalid::DuplicateCase {
                name,
                first,
                second,
            } => ReportError::DuplicateCase {
                path,
                name: redact::owned(name),
                first,
                second,
            },
            Invalid::Score {
                case,
                evaluator,
                value,
            } => ReportError::InvalidScore {
                path,
                case: redact::owned(case),
                evaluator: redact::owned(evaluator),
                value,
            },
        }
    }
}

/// `bytes` as text, or [`ReportError::NotUtf8`] /
/// [`DatasetError::NotUtf8`](crate::DatasetError::NotUtf8) material: the
/// offset and the line of the first byte that is not valid UTF-8.
pub(crate) fn utf8(bytes: Vec<u8>) -> Result<String, (usize, usize)> {
    String::from_utf8(bytes).map_err(|e| {
        let offset = e.utf8_error().valid_up_to();
        let line = 1 + e.as_bytes()[..offset]
            .iter()
            .filter(|b| **b == b'\n')
            .count();
        (offset, line)
    })
}

/// One evaluator's figures over a report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvaluatorSummary {
    /// The evaluator.
    pub name: String,
    /// The mean value over every case (a failed case counts `0.0`).
    pub mean: f64,
    /// Cases that passed.
    pub passed: usize,
    /// Cases it could not score.
    pub errors: usize,
}

/// A report's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Cases in all.
    pub cases: usize,
    /// Cases that passed every evaluator.
    pub passed: usize,
    /// Cases whose task failed.
    pub failed: usize,
    /// Per evaluator.
    pub evaluators: Vec<EvaluatorSummary>,
    /// Mean latency per case.
    pub mean_latency_ms: f64,
    /// Tokens in all.
    pub tokens: u64,
    /// Model calls in all.
    pub model_calls: u64,
    /// Cost in all, when every case's cost is known.
    pub cost: Option<f64>,
}

impl Report {
    /// Reads a report file.
    ///
    /// It refuses, naming what and where: a file that is not UTF-8 text
    /// ([`ReportError::NotUtf8`]), not a report or of another format
    /// version ([`ReportError::Format`]), with two cases of one name
    /// ([`ReportError::DuplicateCase`]: cases are matched by name), or with
    /// a score whose value is not in `0.0..=1.0` ([`ReportError::InvalidScore`]).
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ReportError> {
        let path = path.as_ref();
        let bytes = fs::read(path).map_err(|source| ReportError::Io {
            path: path.to_owned(),
            source,
        })?;
        let text = utf8(bytes).map_err(|(offset, line)| ReportError::NotUtf8 {
            path: path.to_owned(),
            offset,
            line,
        })?;
        // An editor on Windows may start the file with a byte order mark.
        let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
        // The parser's message quotes the text it could not read.
        let report: Report = serde_json::from_str(text).map_err(|e| ReportError::Format {
            path: path.to_owned(),
            message: redact::owned(format!("it is not a report: {e}")),
        })?;
        report.validate().map_err(|invalid| invalid.at(path))?;
        Ok(report)
    }

    /// What `load` checks beyond the JSON: the version, unique case names,
    /// scores in range.
    fn validate(&self) -> Result<(), Invalid> {
        if self.version != REPORT_VERSION {
            return Err(Invalid::Version(self.version));
        }
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (i, case) in self.cases.iter().enumerate() {
            if let Some(first) = seen.insert(&case.name, i + 1) {
                return Err(Invalid::DuplicateCase {
                    name: case.name.clone(),
                    first,
                    second: i + 1,
                });
            }
            for (evaluator, scored) in &case.scores {
                if let Scored::Score(score) = scored
                    && !(0.0..=1.0).contains(&score.value)
                {
                    return Err(Invalid::Score {
                        case: case.name.clone(),
                        evaluator: evaluator.clone(),
                        value: score.value,
                    });
                }
            }
        }
        Ok(())
    }

    /// Writes the report as JSON, replacing the file atomically: a crash
    /// leaves the old report or the new one, whole, and the write is on disk
    /// when this returns.
    ///
    /// The temporary file has a unique hidden name beside `path` (see
    /// [`harness::durable::write_atomic`]), so no file of the user's, such
    /// as `report.json.tmp`, is overwritten, and two saves never share one.
    ///
    /// No secret the process holds is written (see [`harness::secrets`]): a
    /// report made by [`Experiment`](crate::Experiment) is redacted already,
    /// and one that still holds a secret (built or changed by hand) is
    /// written redacted as a run's would be. If a secret is still in the
    /// text after that (where replacing it would break the format), the
    /// file is not written: [`ReportError::Format`].
    ///
    /// What is written reads back with [`Report::load`]: nothing is written,
    /// and the error is the one `load` would give, for a report of another
    /// [`version`](Report::version) ([`ReportError::Format`]), with two cases
    /// of one name ([`ReportError::DuplicateCase`]) or with a score out of
    /// `0.0..=1.0` ([`ReportError::InvalidScore`]). Only a report built or
    /// changed by hand can be one of those, as can one that holds a number
    /// JSON cannot carry (a NaN or infinite score value, latency or cost):
    /// that is not written either, and the error names the case and the
    /// field; nor is one whose text would not read back as a report for any
    /// other reason. (Two case names that redaction makes equal are kept
    /// apart, as in a run: see the crate's docs on secrets.)
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), ReportError> {
        let path = path.as_ref();
        let format = |message: String| ReportError::Format {
            path: path.to_owned(),
            message: redact::owned(message),
        };
        if let Some(place) = self.non_finite() {
            return Err(format(format!(
                "{place}, which JSON cannot hold; the report was not written"
            )));
        }
        let to_text = |report: &Report| {
            serde_json::to_string_pretty(report).map_err(|e| format(e.to_string()))
        };
        let mut text = to_text(self)?;
        // The text is searched first, to keep the usual save to one pass;
        // its numbers may match a numeric secret by chance, so the
        // report's strings decide.
        if harness::secrets::contains_secret(&text) {
            let mut redacted = self.clone();
            redact::report(&mut redacted);
            let json = serde_json::to_value(&redacted).map_err(|e| format(e.to_string()))?;
            if redact::holds_secret(&json) {
                return Err(format(
                    "it holds one of the process's secrets where replacing it would break the \
                     report's format (a field name or a kind); it was not written"
                        .to_owned(),
                ));
            }
            text = to_text(&redacted)?;
        }
        // Never write a file that `load` refuses.
        match serde_json::from_str::<Report>(&text) {
            Err(e) => {
                return Err(format(format!(
                    "it would not read back as a report ({e}); it was not written"
                )));
            }
            Ok(back) => back.validate().map_err(|invalid| invalid.at(path))?,
        }
        text.push('\n');
        harness::durable::write_atomic(path, text.as_bytes(), harness::durable::Sync::FileAndDir)
            .map_err(|source| ReportError::Save {
                path: path.to_owned(),
                source,
            })
    }

    /// Where the report holds a number that JSON cannot carry (NaN or
    /// infinite), described for an error, if it does.
    fn non_finite(&self) -> Option<String> {
        if !self.elapsed_ms.is_finite() {
            return Some(format!("its elapsed_ms is {}", self.elapsed_ms));
        }
        for case in &self.cases {
            let metrics = &case.record.metrics;
            if !metrics.latency_ms.is_finite() {
                return Some(format!(
                    "case `{}`: its latency_ms is {}",
                    case.name, metrics.latency_ms
                ));
            }
            if let Some(cost) = metrics.cost.filter(|c| !c.is_finite()) {
                return Some(format!("case `{}`: its cost is {cost}", case.name));
            }
            for (evaluator, scored) in &case.scores {
                if let Scored::Score(score) = scored
                    && !score.value.is_finite()
                {
                    return Some(format!(
                        "case `{}`: the value of evaluator `{evaluator}` is {}",
                        case.name, score.value
                    ));
                }
            }
        }
        None
    }

    /// The case named `name`. Names are unique in a report that an
    /// experiment made or [`Report::load`] read; in one built by hand with
    /// a name twice, this is the first.
    pub fn case(&self, name: &str) -> Option<&CaseReport> {
        self.cases.iter().find(|c| c.name == name)
    }

    /// The report's figures.
    pub fn summary(&self) -> Summary {
        let n = self.cases.len();
        let evaluators = self
            .evaluators
            .iter()
            .map(|name| EvaluatorSummary {
                name: name.clone(),
                mean: mean(self.cases.iter().map(|c| c.value(name)), n),
                passed: self
                    .cases
                    .iter()
                    .filter(|c| c.scores.get(name).is_some_and(Scored::passed))
                    .count(),
                errors: self
                    .cases
                    .iter()
                    .filter(|c| matches!(c.scores.get(name), Some(Scored::Error(_))))
                    .count(),
            })
            .collect();
        let costs: Option<Vec<f64>> = self.cases.iter().map(|c| c.record.metrics.cost).collect();
        Summary {
            cases: n,
            passed: self.cases.iter().filter(|c| c.passed()).count(),
            failed: self.cases.iter().filter(|c| c.failure.is_some()).count(),
            evaluators,
            mean_latency_ms: mean(self.cases.iter().map(|c| c.record.metrics.latency_ms), n),
            tokens: self
                .cases
                .iter()
                .map(|c| c.record.metrics.usage.input_tokens + c.record.metrics.usage.output_tokens)
                .sum(),
            model_calls: self
                .cases
                .iter()
                .map(|c| u64::from(c.record.metrics.model_calls))
                .sum(),
            // An empty sum of floats is -0.0.
            cost: costs.map(|c| unsigned_zero(c.iter().sum())),
        }
    }

    /// The report as a terminal table: a row per case (each evaluator's
    /// value, ✔ or ✘, latency, tokens, the failure), then the means.
    pub fn table(&self) -> String {
        let mut header = vec!["case".to_owned()];
        header.extend(self.evaluators.iter().cloned());
        header.extend(["ms".to_owned(), "tokens".to_owned(), "".to_owned()]);
        let mut rows = Vec::new();
        for case in &self.cases {
            let mut row = vec![case.name.clone()];
            for name in &self.evaluators {
                row.push(match case.scores.get(name) {
                    Some(Scored::Score(s)) => {
                        format!("{} {}", if s.passed { "✔" } else { "✘" }, short(s.value))
                    }
                    Some(Scored::Error(_)) => "error".to_owned(),
                    None => "-".to_owned(),
                });
            }
            let m = &case.record.metrics;
            row.push(format!("{:.0}", m.latency_ms));
            row.push((m.usage.input_tokens + m.usage.output_tokens).to_string());
            row.push(match &case.failure {
                Some(f) => {
                    let mut f = f.clone();
                    redact::failure(&mut f);
                    crate::builtin::brief(&format!("{f:?}"))
                }
                None => String::new(),
            });
            rows.push(row);
        }
        let summary = self.summary();
        let mut total = vec![format!("mean ({})", count(summary.cases, "case", "cases"))];
        for e in &summary.evaluators {
            total.push(format!(
                "{} ({}/{})",
                short(e.mean),
                e.passed,
                summary.cases
            ));
        }
        total.push(format!("{:.0}", summary.mean_latency_ms));
        total.push(summary.tokens.to_string());
        total.push(if summary.failed > 0 {
            format!("{} failed", summary.failed)
        } else {
            String::new()
        });
        let title = format!(
            "{} on {}{}",
            self.experiment,
            self.dataset,
            self.model
                .as_ref()
                .map(|m| format!(" ({m})"))
                .unwrap_or_default()
        );
        render(&title, &header, &rows, Some(&total))
    }
}

pub(crate) fn mean(values: impl Iterator<Item = f64>, n: usize) -> f64 {
    if n == 0 {
        0.0
    } else {
        unsigned_zero(values.sum::<f64>() / n as f64)
    }
}

/// `n` and the noun for it: `1 case`, `2 cases`.
pub(crate) fn count(n: impl std::fmt::Display, one: &str, many: &str) -> String {
    let n = n.to_string();
    let noun = if n == "1" { one } else { many };
    format!("{n} {noun}")
}

pub(crate) fn short(value: f64) -> String {
    let value = unsigned_zero(value);
    if value == value.trunc() {
        format!("{value:.0}")
    } else {
        format!("{value:.2}")
    }
}

/// `text` with its control characters escaped as Rust writes them in a
/// string (`\n`, `\u{1b}`): a name read from a report must not move the
/// cursor, clear the screen or break a table's line on a terminal.
pub(crate) fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// A plain text table with aligned columns, every cell redacted (a report
/// read from a file may hold what a run today would have redacted).
pub(crate) fn render(
    title: &str,
    header: &[String],
    rows: &[Vec<String>],
    footer: Option<&Vec<String>>,
) -> String {
    let shown = |cells: &[String]| -> Vec<String> {
        cells
            .iter()
            .map(|c| printable(&redact::shown(c)).into_owned())
            .collect()
    };
    let title = printable(&redact::shown(title)).into_owned();
    let header = shown(header);
    let rows: Vec<Vec<String>> = rows.iter().map(|r| shown(r)).collect();
    let footer = footer.map(|f| shown(f));
    let footer = footer.as_ref();
    let width = |s: &str| s.chars().count();
    let mut widths: Vec<usize> = header.iter().map(|h| width(h)).collect();
    for row in rows.iter().chain(footer) {
        for (i, cell) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(width(cell));
            }
        }
    }
    let line = |row: &[String]| {
        let mut out = String::new();
        for (i, cell) in row.iter().enumerate() {
            let w = widths.get(i).copied().unwrap_or(0);
            if i > 0 {
                out.push_str("  ");
            }
            out.push_str(cell);
            if i + 1 < row.len() {
                out.push_str(&" ".repeat(w.saturating_sub(width(cell))));
            }
        }
        out.trim_end().to_owned()
    };
    let mut out = String::new();
    let _ = writeln!(out, "{title}");
    let _ = writeln!(out, "{}", line(&header));
    let rule: usize = widths.iter().sum::<usize>() + 2 * widths.len().saturating_sub(1);
    let _ = writeln!(out, "{}", "─".repeat(rule));
    for row in &rows {
        let _ = writeln!(out, "{}", line(row));
    }
    if let Some(footer) = footer {
        let _ = writeln!(out, "{}", "─".repeat(rule));
        let _ = writeln!(out, "{}", line(footer));
    }
    out
}
