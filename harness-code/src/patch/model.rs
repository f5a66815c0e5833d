//! The model patcher: asks a language model to rewrite one cell.

use async_trait::async_trait;

use crate::diagnose::Diagnosis;
use crate::patch::diff::{DiffError, apply_unified_diff, looks_like_diff};
use crate::patch::{Patch, PatchError, PatchProvenance, Patcher};
use crate::{AnalysisError, AnalysisOptions, CellId, ExecutionStateGraph, Timestamp, check_syntax};
use harness::llm::{LanguageModel, Message, ModelRequest, Usage};

/// Model calls a [`ModelPatcher`] makes for one patch unless told otherwise.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;

/// Why one model answer could not become a patch. The model is told and
/// asked again, within the patcher's budget.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    /// The answer has no text (e.g. only tool calls, or nothing).
    #[error("the answer is empty")]
    Empty,
    /// The answer is a unified diff that does not apply to the cell.
    #[error("the diff does not apply to the cell's current source: {0}")]
    Diff(#[source] DiffError),
    /// The new code is not valid Python.
    #[error("the code is not valid Python: {0}")]
    Syntax(#[source] AnalysisError),
    /// The new code is the cell's current code.
    #[error("the code is identical to the cell's current source")]
    Unchanged,
}

const SYSTEM_PROMPT: &str = "You fix Python code that runs as numbered cells of a \
notebook. Cells share one namespace and run in order; a cell sees the names \
earlier cells bound. You get a diagnosis of a failed cell and rewrite exactly one cell so that \
it works. Keep what the cell is meant to do, and do not copy code that belongs to other cells. \
Answer with the complete new source of the cell in a single ```python fenced block, or with a \
unified diff against its current source in a single ```diff block.";

/// Asks a [`LanguageModel`] for a new version of the top culprit cell of a
/// diagnosis (or of a given cell, with [`propose_for`](Self::propose_for)).
///
/// The prompt is the diagnosis' [`report`](Diagnosis::report) (error,
/// ranked culprits, suggestions, known values, the sources of the context
/// cells) and the cell's current source. The answer is read with
/// [`parse_answer`]; an unusable answer is sent back to the model with the
/// reason, up to [`max_attempts`](Self::with_max_attempts) calls in all
/// ([`DEFAULT_MAX_ATTEMPTS`] by default).
///
/// ```
/// use harness_code::patch::ModelPatcher;
/// use harness::llm::ScriptedModel;
///
/// let patcher = ModelPatcher::new(ScriptedModel::new([])).with_max_attempts(2);
/// assert_eq!(patcher.max_attempts(), 2);
/// ```
#[derive(Debug)]
pub struct ModelPatcher<M> {
    model: M,
    max_attempts: u32,
    temperature: Option<f32>,
    max_tokens: Option<u32>,
    options: Option<AnalysisOptions>,
}

/// The token limit of a patch's answer unless
/// [`ModelPatcher::with_max_tokens`] sets another: room for a cell of a few
/// hundred lines, and a bound on a model that would not stop.
pub const DEFAULT_PATCH_MAX_TOKENS: u32 = 2048;

impl<M: LanguageModel> ModelPatcher<M> {
    /// A patcher asking `model`, with [`DEFAULT_MAX_ATTEMPTS`] and
    /// [`DEFAULT_PATCH_MAX_TOKENS`].
    pub fn new(model: M) -> Self {
        Self {
            model,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            temperature: None,
            max_tokens: Some(DEFAULT_PATCH_MAX_TOKENS),
            options: None,
        }
    }

    /// Sets how many model calls one patch may take (at least 1).
    pub fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// Sets the sampling temperature of the requests.
    pub fn with_temperature(mut self, temperature: f32) -> Self {
        self.temperature = Some(temperature);
        self
    }

    /// Sets the token limit of the answers (default
    /// [`DEFAULT_PATCH_MAX_TOKENS`]).
    pub fn with_max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = Some(max_tokens);
        self
    }

    /// Sets the syntax the answers are checked against. By default, IPython
    /// syntax is accepted when some cell of the graph uses it.
    pub fn with_analysis_options(mut self, options: AnalysisOptions) -> Self {
        self.options = Some(options);
        self
    }

    /// How many model calls one patch may take.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The model.
    pub fn model(&self) -> &M {
        &self.model
    }

    /// The first request sent for a patch of `cell`.
    ///
    /// # Errors
    ///
    /// [`PatchError::UnknownCell`] if `cell` is not in the graph.
    pub fn request(
        &self,
        diagnosis: &Diagnosis,
        graph: &ExecutionStateGraph,
        cell: CellId,
    ) -> Result<ModelRequest, PatchError> {
        let node = graph
            .cell(cell)
            .map_err(|_| PatchError::UnknownCell(cell))?;
        let version = node.current_version().number;
        let prompt = format!(
            "{}\nRewrite cell {cell} to fix the error. Its current source (version {version}):\n```python\n{}\n```",
            diagnosis.report(),
            node.source().trim_end()
        );
        let mut builder = ModelRequest::builder().system(SYSTEM_PROMPT).user(prompt);
        if let Some(temperature) = self.temperature {
            builder = builder.temperature(temperature);
        }
        if let Some(max_tokens) = self.max_tokens {
            builder = builder.max_tokens(max_tokens);
        }
        Ok(builder.build())
    }

    /// Asks for a new version of `cell` (which need not be the top culprit).
    ///
    /// # Errors
    ///
    /// [`PatchError::UnknownCell`]; [`PatchError::Model`] when a call
    /// fails; [`PatchError::BudgetExhausted`] when no answer was usable.
    pub async fn propose_for(
        &self,
        diagnosis: &Diagnosis,
        graph: &ExecutionStateGraph,
        cell: CellId,
    ) -> Result<Patch, PatchError> {
        let node = graph
            .cell(cell)
            .map_err(|_| PatchError::UnknownCell(cell))?;
        let old = node.source();
        let base_version = node.current_version().number;
        let options = self.options.unwrap_or_else(|| AnalysisOptions {
            ipython: graph
                .cells()
                .any(|n| !n.analysis().ipython_escapes.is_empty()),
        });
        let mut request = self.request(diagnosis, graph, cell)?;
        let mut usage = Usage::default();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let call_id = uuid::Uuid::new_v4().to_string();
            tracing::debug!(
                cell = cell.get(),
                attempt,
                call_id = call_id.as_str(),
                model = self.model.model_name(),
                "asking the model for a patch"
            );
            let response = self
                .model
                .complete(&request)
                .await
                .map_err(|source| PatchError::Model { cell, source })?;
            usage += response.usage;
            let text = response.text();
            match parse_answer(&text, old, options) {
                Ok(new) => {
                    return Ok(Patch::new(
                        cell,
                        base_version,
                        old,
                        new,
                        PatchProvenance {
                            patcher: self.name().to_owned(),
                            description: format!("model rewrite of cell {cell}"),
                            model: Some(self.model.model_name().to_owned()),
                            provider: Some(self.model.provider().to_owned()),
                            call_id: Some(call_id),
                            attempts: attempt,
                            usage: Some(usage),
                            diagnosis: diagnosis.summary(),
                            at: Timestamp::now(),
                        },
                    ));
                }
                Err(error) => {
                    tracing::debug!(
                        cell = cell.get(),
                        attempt,
                        call_id = call_id.as_str(),
                        %error,
                        "unusable patch answer"
                    );
                    if attempt >= self.max_attempts {
                        return Err(PatchError::BudgetExhausted {
                            cell,
                            attempts: attempt,
                            last: error,
                        });
                    }
                    request.messages.push(response.to_message());
                    request.messages.push(Message::user(format!(
                        "Your answer could not be used: {error}. Answer again with the complete \
                         new source of cell {cell} in one ```python block."
                    )));
                }
            }
        }
    }
}

#[async_trait]
impl<M: LanguageModel> Patcher for ModelPatcher<M> {
    fn name(&self) -> &str {
        "model"
    }

    async fn propose(
        &self,
        diagnosis: &Diagnosis,
        graph: &ExecutionStateGraph,
    ) -> Result<Patch, PatchError> {
        let cell = diagnosis
            .top_culprit()
            .map_or(diagnosis.cell, |culprit| culprit.cell);
        self.propose_for(diagnosis, graph, cell).await
    }
}

/// A fenced block: its info string (language) and content.
struct Fence<'a> {
    info: &'a str,
    content: String,
}

fn fences(text: &str) -> Vec<Fence<'_>> {
    let mut out = Vec::new();
    let mut current: Option<(&str, &str, Vec<&str>)> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        match current.take() {
            None => {
                for marker in ["```", "~~~"] {
                    if let Some(info) = trimmed.strip_prefix(marker) {
                        let info = info.trim_start_matches(marker.chars().next().unwrap_or('`'));
                        current = Some((marker, info.trim(), Vec::new()));
                        break;
                    }
                }
            }
            Some((marker, info, mut lines)) => {
                if trimmed.starts_with(marker)
                    && trimmed
                        .trim_start_matches(marker.chars().next().unwrap_or('`'))
                        .trim()
                        .is_empty()
                {
                    out.push(Fence {
                        info,
                        content: lines.join("\n"),
                    });
                } else {
                    lines.push(line);
                    current = Some((marker, info, lines));
                }
            }
        }
    }
    // An unterminated block (the answer was cut off) still counts.
    if let Some((_, info, lines)) = current {
        out.push(Fence {
            info,
            content: lines.join("\n"),
        });
    }
    out
}

fn is_python(info: &str) -> bool {
    matches!(
        info.split_whitespace()
            .next()
            .unwrap_or("")
            .to_ascii_lowercase()
            .as_str(),
        "python" | "py" | "python3" | "ipython" | "ipython3"
    )
}

fn is_diff(info: &str) -> bool {
    matches!(
        info.split_whitespace()
            .next()
            .unwrap_or("")
            .to_ascii_lowercase()
            .as_str(),
        "diff" | "patch" | "udiff"
    )
}

/// Reads a model's answer as the new source of a cell whose current source
/// is `old`:
///
/// - fenced blocks: the last one tagged `python` (or `py`, `ipython`); else
///   a block tagged `diff`/`patch` or whose content is a unified diff,
///   applied to `old`; else the last untagged block as code;
/// - no fence: a unified diff if the text has `@@` hunks, else the whole
///   answer as bare code.
///
/// The code is checked with [`check_syntax`]; leading and trailing blank
/// lines are dropped, and the result ends with a line break exactly when
/// `old` does.
///
/// ```
/// use harness_code::AnalysisOptions;
/// use harness_code::patch::parse_answer;
///
/// let answer = "The name was misspelled:\n```python\nprint(total)\n```";
/// let new = parse_answer(answer, "print(totl)", AnalysisOptions::default()).unwrap();
/// assert_eq!(new, "print(total)");
/// ```
///
/// # Errors
///
/// An [`AnswerError`] saying why the answer is unusable.
pub fn parse_answer(
    answer: &str,
    old: &str,
    options: AnalysisOptions,
) -> Result<String, AnswerError> {
    if answer.trim().is_empty() {
        return Err(AnswerError::Empty);
    }
    let blocks = fences(answer);
    let code = if blocks.is_empty() {
        if looks_like_diff(answer) {
            apply_unified_diff(old, answer).map_err(AnswerError::Diff)?
        } else {
            answer.to_owned()
        }
    } else if let Some(block) = blocks.iter().rev().find(|b| is_python(b.info)) {
        block.content.clone()
    } else if let Some(block) = blocks
        .iter()
        .rev()
        .find(|b| is_diff(b.info) || looks_like_diff(&b.content))
    {
        apply_unified_diff(old, &block.content).map_err(AnswerError::Diff)?
    } else {
        blocks
            .iter()
            .rev()
            .find(|b| b.info.is_empty())
            .or(blocks.last())
            .map(|b| b.content.clone())
            .unwrap_or_default()
    };
    let mut code = normalize(&code);
    if code.is_empty() {
        return Err(AnswerError::Empty);
    }
    check_syntax(&code, options).map_err(AnswerError::Syntax)?;
    if normalize(old) == code {
        return Err(AnswerError::Unchanged);
    }
    if old.ends_with('\n') {
        code.push('\n');
    }
    Ok(code)
}

/// Without leading blank lines and trailing whitespace.
fn normalize(code: &str) -> String {
    let mut start = 0;
    for line in code.split_inclusive('\n') {
        if !line.trim().is_empty() {
            break;
        }
        start += line.len();
    }
    code[start..].trim_end().to_owned()
}
