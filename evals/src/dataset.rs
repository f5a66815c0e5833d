//! Datasets: typed cases, stored as YAML or JSON Lines.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

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
/// after the file). [`Dataset::json_schema`] gives the YAML document's
/// schema for editors.
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
    #[error("dataset file {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The file could not be replaced; the old file, if there was one, is
    /// as it was, and no temporary file is left behind.
    #[error("dataset file {}: {source}", path.display())]
    Save {
        /// The file.
        path: PathBuf,
        /// Which step of the atomic write failed, and on which path.
        source: harness::durable::WriteError,
    },
    /// The file's name does not say its format.
    #[error(
        "dataset file {}: unknown format; name it .yaml, .yml or .jsonl",
        path.display()
    )]
    UnknownFormat {
        /// The file.
        path: PathBuf,
    },
    /// The YAML document does not read as a dataset of these types.
    #[error("dataset {origin}: {message}")]
    Yaml {
        /// Where the text came from (a file name).
        origin: String,
        /// What is wrong and where (line and column).
        message: String,
    },
    /// A line of a JSON Lines dataset does not read as a case of these types.
    #[error("dataset {origin}, line {line}: {message}")]
    JsonLine {
        /// Where the text came from.
        origin: String,
        /// The line, counted from 1.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A case has an empty name.
    #[error("dataset {origin}: case {index} has an empty name; every case needs one")]
    EmptyName {
        /// Where the dataset came from.
        origin: String,
        /// The case's position, counted from 1.
        index: usize,
    },
    /// Two cases have the same name.
    #[error(
        "dataset {origin}: cases {first} and {second} are both named `{name}`; names must be unique"
    )]
    DuplicateName {
        /// Where the dataset came from.
        origin: String,
        /// The name.
        name: String,
        /// The first case with it, counted from 1.
        first: usize,
        /// The second.
        second: usize,
    },
    /// The dataset could not be written in the format asked for.
    #[error("dataset {origin}: cannot write it: {message}")]
    Write {
        /// Where it was to go.
        origin: String,
        /// Why.
        message: String,
    },
}

enum Format {
    Yaml,
    JsonLines,
}

fn format_of(path: &Path) -> Result<Format, DatasetError> {
    match path.extension().and_then(|e| e.to_str()) {
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

    /// Checks that every case has a name and that names are unique.
    pub fn check(&self, origin: &str) -> Result<(), DatasetError> {
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (i, case) in self.cases.iter().enumerate() {
            if case.name.trim().is_empty() {
                return Err(DatasetError::EmptyName {
                    origin: origin.to_owned(),
                    index: i + 1,
                });
            }
            if let Some(first) = seen.insert(&case.name, i + 1) {
                return Err(DatasetError::DuplicateName {
                    origin: origin.to_owned(),
                    name: case.name.clone(),
                    first,
                    second: i + 1,
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
        let text = fs::read_to_string(path).map_err(|source| DatasetError::Io {
            path: path.to_owned(),
            source,
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

    /// Reads a YAML dataset document; `origin` names it in errors.
    pub fn from_yaml(text: &str, origin: &str) -> Result<Self, DatasetError> {
        let dataset: Self = serde_saphyr::from_str(text).map_err(|e| DatasetError::Yaml {
            origin: origin.to_owned(),
            message: e.to_string(),
        })?;
        dataset.check(origin)?;
        Ok(dataset)
    }

    /// Reads JSON Lines, one case per line (blank lines are skipped).
    pub fn from_json_lines(name: &str, text: &str, origin: &str) -> Result<Self, DatasetError> {
        let mut cases = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let case = serde_json::from_str(line).map_err(|e| DatasetError::JsonLine {
                origin: origin.to_owned(),
                line: i + 1,
                message: e.to_string(),
            })?;
            cases.push(case);
        }
        let dataset = Self::new(name, cases);
        dataset.check(origin)?;
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
    /// overwritten.
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
    pub fn to_yaml(&self) -> Result<String, DatasetError> {
        serde_saphyr::to_string(self).map_err(|e| DatasetError::Write {
            origin: self.name.clone(),
            message: e.to_string(),
        })
    }

    /// The dataset as JSON Lines, one case per line.
    pub fn to_json_lines(&self) -> Result<String, DatasetError> {
        let mut out = String::new();
        for case in &self.cases {
            let line = serde_json::to_string(case).map_err(|e| DatasetError::Write {
                origin: self.name.clone(),
                message: e.to_string(),
            })?;
            out.push_str(&line);
            out.push('\n');
        }
        Ok(out)
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
