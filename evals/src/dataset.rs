//! Datasets: typed cases, stored as YAML or JSON Lines.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::redact;

/// One case: an input for the task, what is expected of its output, and
/// labels to select and group cases by.
///
/// In a YAML dataset a case reads:
///
/// ```yaml
/// - name: capital-of-france
///   input: { question: "What is the capital of France?" }
///   expected: { answer: Paris }
///   tags: [geography]
///   metadata: { difficulty: easy }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Case<I, E> {
    /// The case's name, unique in its dataset: reports and comparisons
    /// match cases by it.
    pub name: String,
    /// What the task is given.
    pub input: I,
    /// What its output is compared with, for the evaluators that compare.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected: Option<E>,
    /// Anything else about the case, for evaluators and reports.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub metadata: Map<String, Value>,
    /// Labels, to run a part of a dataset ([`Dataset::tagged`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

impl<I, E> Case<I, E> {
    /// A case with no expected output, metadata or tags.
    pub fn new(name: impl Into<String>, input: I) -> Self {
        Self {
            name: name.into(),
            input,
            expected: None,
            metadata: Map::new(),
            tags: Vec::new(),
        }
    }

    /// Sets what the output is expected to be.
    pub fn expect(mut self, expected: E) -> Self {
        self.expected = Some(expected);
        self
    }

    /// Adds a tag.
    pub fn tag(mut self, tag: impl Into<String>) -> Self {
        self.tags.push(tag.into());
        self
    }

    /// Sets a metadata field.
    pub fn meta(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }
}

/// A named list of cases with unique names.
///
/// A dataset is a file: YAML (`.yaml`, `.yml`: a document with `name` and
/// `cases`) or JSON Lines (`.jsonl`: one case per line, the dataset named
/// after the file); the extension is matched in any case (`.YML`), and a
/// UTF-8 byte order mark at the start of the text is skipped.
/// [`Dataset::json_schema`] gives the YAML document's schema for editors.
///
/// ```
/// use harness_evals::{Case, Dataset};
///
/// let yaml = r#"
/// name: capitals
/// cases:
///   - name: france
///     input: What is the capital of France?
///     expected: Paris
///     tags: [europe]
///   - name: japan
///     input: What is the capital of Japan?
///     expected: Tokyo
/// "#;
/// let dataset: Dataset<String, String> = Dataset::from_yaml(yaml, "capitals.yaml")?;
/// assert_eq!(dataset.cases.len(), 2);
/// assert_eq!(dataset.tagged("europe").cases[0].expected.as_deref(), Some("Paris"));
/// # Ok::<(), harness_evals::DatasetError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Dataset<I, E> {
    /// The dataset's name, shown in reports.
    pub name: String,
    /// The cases, in order.
    pub cases: Vec<Case<I, E>>,
}

/// Why a dataset could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DatasetError {
    /// The file could not be read.
    #[error(
        "dataset file {}: {}",
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
        "dataset file {}: {}",
        crate::redact::path(path),
        crate::redact::error(source)
    )]
    Save {
        /// The file.
        path: PathBuf,
        /// Which step of the atomic write failed, and on which path.
        source: harness::durable::WriteError,
    },
    /// The file's name does not say its format.
    #[error(
        "dataset file {}: unknown format; name it .yaml, .yml or .jsonl",
        crate::redact::path(path)
    )]
    UnknownFormat {
        /// The file.
        path: PathBuf,
    },
    /// The YAML document does not read as a dataset of these types.
    #[error(
        "dataset {}: {}",
        crate::redact::shown(origin),
        crate::redact::shown(message)
    )]
    Yaml {
        /// Where the text came from (a file name).
        origin: String,
        /// What is wrong and where (line and column).
        message: String,
    },
    /// A line of a JSON Lines dataset does not read as a case of these types.
    #[error(
        "dataset {}, line {line}, column {column}: {}",
        crate::redact::shown(origin),
        crate::redact::shown(message)
    )]
    JsonLine {
        /// Where the text came from.
        origin: String,
        /// The line, counted from 1.
        line: usize,
        /// The column in that line where the parser stopped, counted from 1
        /// in characters (`0` when the line ended first).
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// The file is not UTF-8 text.
    #[error(
        "dataset file {}: it is not UTF-8 text: the byte at offset {offset} (line {line}) is not valid UTF-8",
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
    /// A case has an empty name.
    #[error(
        "dataset {}{}: case {index} has an empty name; every case needs one",
        crate::redact::shown(origin),
        line.map(|l| format!(", line {l}")).unwrap_or_default()
    )]
    EmptyName {
        /// Where the dataset came from.
        origin: String,
        /// The case's position among the cases, counted from 1.
        index: usize,
        /// The line where the case starts in the text it was read from,
        /// counted from 1 (`None` for a dataset made in code).
        line: Option<usize>,
    },
    /// Two cases have the same name.
    #[error(
        "dataset {}: {}; names must be unique",
        crate::redact::shown(origin),
        duplicate(&crate::redact::shown(name), *first, *second, *first_line, *second_line)
    )]
    DuplicateName {
        /// Where the dataset came from.
        origin: String,
        /// The name.
        name: String,
        /// The first case with it, its position among the cases, counted
        /// from 1.
        first: usize,
        /// The second.
        second: usize,
        /// The line where the first case starts in the text it was read
        /// from, counted from 1 (`None` for a dataset made in code).
        first_line: Option<usize>,
        /// The line where the second starts.
        second_line: Option<usize>,
    },
    /// The dataset could not be written in the format asked for.
    #[error(
        "dataset {}: cannot write it: {}",
        crate::redact::shown(origin),
        crate::redact::shown(message)
    )]
    Write {
        /// Where it was to go.
        origin: String,
        /// Why.
        message: String,
    },
}

/// The parser's message without the ` at line L column C` it ends with
/// (the error gives the position once, in its own words).
fn without_position(error: &serde_json::Error) -> String {
    let message = error.to_string();
    let position = format!(" at line {} column {}", error.line(), error.column());
    match message.strip_suffix(&position) {
        Some(message) => message.to_owned(),
        None => message,
    }
}

/// The column in characters of the parser's column in bytes (1-based: the
/// byte it stopped at) in `line`.
fn char_column(line: &str, byte_column: usize) -> usize {
    line.char_indices()
        .take_while(|(at, _)| *at < byte_column)
        .count()
}

/// The line where each case of a YAML dataset document starts, in order
/// (`None` where the parser gives none).
fn yaml_case_lines(text: &str) -> Vec<Option<usize>> {
    #[derive(Deserialize)]
    struct Lines {
        cases: Vec<serde_saphyr::Spanned<serde::de::IgnoredAny>>,
    }
    serde_saphyr::from_str::<Lines>(text)
        .map(|doc| {
            doc.cases
                .iter()
                .map(|case| {
                    usize::try_from(case.referenced.line())
                        .ok()
                        .filter(|l| *l > 0)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Where two cases share `name`: their lines when they are known, else
/// their positions.
fn duplicate(
    name: &str,
    first: usize,
    second: usize,
    first_line: Option<usize>,
    second_line: Option<usize>,
) -> String {
    match (first_line, second_line) {
        (Some(first_line), Some(second_line)) => format!(
            "line {second_line}: case {second} is named `{name}`, as is case {first} on line \
             {first_line}"
        ),
        _ => format!("cases {first} and {second} are both named `{name}`"),
    }
}

/// `text` without the byte order mark an editor may put at its start.
fn without_bom(text: &str) -> &str {
    text.strip_prefix('\u{feff}').unwrap_or(text)
}

enum Format {
    Yaml,
    JsonLines,
}

/// The format a file's extension names, in any case (`.YAML`, `.Jsonl`).
fn format_of(path: &Path) -> Result<Format, DatasetError> {
    let extension = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match extension.as_deref() {
        Some("yaml" | "yml") => Ok(Format::Yaml),
        Some("jsonl") => Ok(Format::JsonLines),
        _ => Err(DatasetError::UnknownFormat {
            path: path.to_owned(),
        }),
    }
}

impl<I, E> Dataset<I, E> {
    /// A dataset of `cases`; names are checked by [`Dataset::check`].
    pub fn new(name: impl Into<String>, cases: impl IntoIterator<Item = Case<I, E>>) -> Self {
        Self {
            name: name.into(),
            cases: cases.into_iter().collect(),
        }
    }

    /// Checks that every case has a name and that names are unique. The
    /// error's names are redacted (see the crate's docs on secrets). It
    /// gives the cases' positions (counted from 1); the errors of
    /// [`Dataset::load`], [`Dataset::from_yaml`] and
    /// [`Dataset::from_json_lines`] give their lines too.
    pub fn check(&self, origin: &str) -> Result<(), DatasetError> {
        self.check_at(origin, |_| None)
    }

    /// [`Dataset::check`], with `line(i)` the line where case `i` (counted
    /// from 0) starts, when it is known.
    fn check_at(
        &self,
        origin: &str,
        line: impl Fn(usize) -> Option<usize>,
    ) -> Result<(), DatasetError> {
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (i, case) in self.cases.iter().enumerate() {
            if case.name.trim().is_empty() {
                return Err(DatasetError::EmptyName {
                    origin: redact::owned(origin),
                    index: i + 1,
                    line: line(i),
                });
            }
            if let Some(first) = seen.insert(&case.name, i) {
                return Err(DatasetError::DuplicateName {
                    origin: redact::owned(origin),
                    name: redact::owned(&case.name),
                    first: first + 1,
                    second: i + 1,
                    first_line: line(first),
                    second_line: line(i),
                });
            }
        }
        Ok(())
    }

    /// The cases carrying `tag`, as a dataset of their own.
    pub fn tagged(&self, tag: &str) -> Self
    where
        I: Clone,
        E: Clone,
    {
        Self {
            name: format!("{} [{tag}]", self.name),
            cases: self
                .cases
                .iter()
                .filter(|c| c.tags.iter().any(|t| t == tag))
                .cloned()
                .collect(),
        }
    }
}

impl<I: DeserializeOwned, E: DeserializeOwned> Dataset<I, E> {
    /// Reads a dataset file: YAML or JSON Lines, by its extension.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, DatasetError> {
        let path = path.as_ref();
        let format = format_of(path)?;
        let bytes = fs::read(path).map_err(|source| DatasetError::Io {
            path: path.to_owned(),
            source,
        })?;
        let text = crate::report::utf8(bytes).map_err(|(offset, line)| DatasetError::NotUtf8 {
            path: path.to_owned(),
            offset,
            line,
        })?;
        let origin = path.display().to_string();
        match format {
            Format::Yaml => Self::from_yaml(&text, &origin),
            Format::JsonLines => {
                let name = path
                    .file_stem()
                    .and_then(|s| s.to_str())
                    .unwrap_or("dataset");
                Self::from_json_lines(name, &text, &origin)
            }
        }
    }

    /// Reads a YAML dataset document; `origin` names it in errors. An
    /// empty or duplicate case name is an error naming the line where each
    /// case concerned starts (its `- ` item).
    pub fn from_yaml(text: &str, origin: &str) -> Result<Self, DatasetError> {
        let text = without_bom(text);
        // The parser's message quotes the value it could not read (whole,
        // so redacted whole); its snippet of the text is left out: it is
        // cropped at a width, which can cut a secret so that redaction no
        // longer finds it.
        let dataset: Self = serde_saphyr::from_str(text).map_err(|e| DatasetError::Yaml {
            origin: redact::owned(origin),
            message: redact::owned(e.render_with_options(serde_saphyr::render_options! {
                snippets: serde_saphyr::SnippetMode::Off,
            })),
        })?;
        if dataset.check(origin).is_err() {
            // Read again for the cases' lines, only when they are needed.
            let lines = yaml_case_lines(text);
            dataset.check_at(origin, |i| lines.get(i).copied().flatten())?;
        }
        Ok(dataset)
    }

    /// Reads JSON Lines, one case per line (blank lines are skipped, and
    /// errors give the line in the text, blank lines counted).
    pub fn from_json_lines(name: &str, text: &str, origin: &str) -> Result<Self, DatasetError> {
        let mut cases = Vec::new();
        let mut lines = Vec::new();
        for (i, line) in without_bom(text).lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let case = serde_json::from_str(line).map_err(|e| DatasetError::JsonLine {
                origin: redact::owned(origin),
                line: i + 1,
                column: char_column(line, e.column()),
                message: redact::owned(without_position(&e)),
            })?;
            cases.push(case);
            lines.push(i + 1);
        }
        let dataset = Self::new(name, cases);
        dataset.check_at(origin, |i| lines.get(i).copied())?;
        Ok(dataset)
    }
}

impl<I: Serialize, E: Serialize> Dataset<I, E> {
    /// Writes the dataset, YAML or JSON Lines by the file's extension,
    /// replacing the file atomically: a crash or a full disk leaves the old
    /// dataset or the new one, whole, never a truncated file.
    ///
    /// The temporary file has a unique hidden name beside `path` (see
    /// [`harness::durable::write_atomic`]), so no file of the user's is
    /// overwritten. The text is redacted as [`Dataset::to_yaml`] says.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), DatasetError> {
        let path = path.as_ref();
        let text = match format_of(path)? {
            Format::Yaml => self.to_yaml()?,
            Format::JsonLines => self.to_json_lines()?,
        };
        harness::durable::write_atomic(path, text.as_bytes(), harness::durable::Sync::FileAndDir)
            .map_err(|source| DatasetError::Save {
                path: path.to_owned(),
                source,
            })
    }

    /// The dataset as a YAML document.
    ///
    /// No secret the process holds is written (see [`harness::secrets`]):
    /// a case can quote one (a task's output kept as an expected value, a
    /// name or metadata copied from an environment). When the dataset holds
    /// one (in a name, a tag, metadata keys or values, the input or the
    /// expected output), every case is written from its JSON form with the
    /// secrets replaced; a dataset that holds none is written as it is. A
    /// case whose input or expected output has no JSON form then cannot be
    /// checked and is an error, as is a secret left where replacing it
    /// would break the format: nothing is written unchecked.
    pub fn to_yaml(&self) -> Result<String, DatasetError> {
        let text = match self.redacted()? {
            Some(redacted) => redacted.yaml(),
            None => self.yaml(),
        }?;
        self.checked(text)
    }

    /// The dataset as JSON Lines, one case per line, redacted as
    /// [`Dataset::to_yaml`] says.
    pub fn to_json_lines(&self) -> Result<String, DatasetError> {
        let text = match self.redacted()? {
            Some(redacted) => redacted.json_lines(),
            None => self.json_lines(),
        }?;
        self.checked(text)
    }

    fn yaml(&self) -> Result<String, DatasetError> {
        serde_saphyr::to_string(self).map_err(|e| self.write_error(e.to_string()))
    }

    fn json_lines(&self) -> Result<String, DatasetError> {
        let mut out = String::new();
        for case in &self.cases {
            let line = serde_json::to_string(case).map_err(|e| self.write_error(e.to_string()))?;
            out.push_str(&line);
            out.push('\n');
        }
        Ok(out)
    }

    /// The dataset as JSON with the process's secrets replaced, or `None`
    /// when there was nothing to replace.
    fn redacted(&self) -> Result<Option<Dataset<Value, Value>>, DatasetError> {
        if !harness::secrets::is_active() {
            return Ok(None);
        }
        let mut redacted = Dataset {
            name: self.name.clone(),
            cases: Vec::with_capacity(self.cases.len()),
        };
        let mut changed = redact::text(&mut redacted.name);
        for case in &self.cases {
            let mut case = Case {
                name: case.name.clone(),
                input: self.to_json(&case.name, "input", &case.input)?,
                expected: match &case.expected {
                    Some(e) => Some(self.to_json(&case.name, "expected output", e)?),
                    None => None,
                },
                metadata: case.metadata.clone(),
                tags: case.tags.clone(),
            };
            changed |= redact::dataset_case(&mut case);
            redacted.cases.push(case);
        }
        Ok(changed.then_some(redacted))
    }

    /// `text`, unless it still holds a secret.
    fn checked(&self, text: String) -> Result<String, DatasetError> {
        if harness::secrets::contains_secret(&text) {
            return Err(self.write_error(
                "it holds one of the process's secrets where replacing it would break the \
                 format (a field name); it was not written"
                    .to_owned(),
            ));
        }
        Ok(text)
    }
}

impl<I, E> Dataset<I, E> {
    fn to_json<T: Serialize>(
        &self,
        case: &str,
        what: &str,
        value: &T,
    ) -> Result<Value, DatasetError> {
        serde_json::to_value(value).map_err(|e| {
            self.write_error(format!(
                "cannot look for secrets in the {what} of case `{case}`: {e}"
            ))
        })
    }

    fn write_error(&self, message: String) -> DatasetError {
        DatasetError::Write {
            origin: redact::owned(&self.name),
            message: redact::owned(message),
        }
    }
}

impl<I: JsonSchema, E: JsonSchema> Dataset<I, E> {
    /// The JSON schema of a YAML dataset document of these types (for an
    /// editor's `# yaml-language-server: $schema=…`); a JSON Lines line is
    /// a case, its `$defs` entry.
    pub fn json_schema() -> Value {
        schemars::schema_for!(Dataset<I, E>).to_value()
    }
}
