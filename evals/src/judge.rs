//! An LLM judge: a rubric, a typed verdict with a reason, any provider.

use std::sync::Arc;

use async_trait::async_trait;
use harness::llm::{LanguageModel, LanguageModelExt, ModelRequest};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::evaluator::{EvalCase, EvalError, Evaluator, Score, unsigned_zero};
use crate::json::json_text;

/// What a judge answers: a typed answer, validated on arrival (one repair
/// turn when it does not fit).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Verdict {
    /// One or two sentences: why this grade.
    pub reason: String,
    /// Whether the output meets the rubric.
    pub passed: bool,
    /// How well, from 0.0 (not at all) to 1.0 (fully).
    pub score: f64,
}

const SYSTEM: &str = "You grade the output of an AI system against a rubric. \
Read the rubric, the input and the output (and the expected output when one is given), \
then answer with JSON only: {\"reason\": one or two sentences, \"passed\": true or false, \
\"score\": a number from 0.0 to 1.0}.";

/// Asks a model whether the output meets a rubric.
///
/// The judge's requests go through [`EvalCase::model`], so they are recorded
/// with the case, and a report re-scored offline answers them from the
/// record. The score is the verdict's `score` (clamped to `0.0..=1.0`);
/// the case passes when the verdict says `passed`. The secrets the process
/// holds (see [`harness::secrets`]) are replaced in the prompt before it is
/// sent, wherever they appear: rubric, input, expected output or output.
///
/// ```no_run
/// # fn demo(model: std::sync::Arc<dyn harness::llm::LanguageModel>) {
/// use harness_evals::Judge;
///
/// let judge = Judge::new(model, "The answer names the capital city and nothing false.")
///     .with_expected();
/// # let _ = judge; }
/// ```
#[derive(Clone)]
pub struct Judge {
    name: String,
    model: Arc<dyn LanguageModel>,
    rubric: String,
    with_input: bool,
    with_expected: bool,
    max_tokens: u32,
}

impl std::fmt::Debug for Judge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Judge")
            .field("name", &crate::redact::shown(&self.name))
            .field("model", &self.model.model_name())
            .field("rubric", &crate::redact::shown(&self.rubric))
            .finish_non_exhaustive()
    }
}

impl Judge {
    /// A judge asking `model` about `rubric`; it sees the input and the
    /// output.
    pub fn new(model: Arc<dyn LanguageModel>, rubric: impl Into<String>) -> Self {
        Self {
            name: "judge".into(),
            model,
            rubric: rubric.into(),
            with_input: true,
            with_expected: false,
            max_tokens: 200,
        }
    }

    /// Shows the judge the expected output too.
    pub fn with_expected(mut self) -> Self {
        self.with_expected = true;
        self
    }

    /// Hides the input from the judge.
    pub fn without_input(mut self) -> Self {
        self.with_input = false;
        self
    }

    /// The most tokens the verdict may take (200 by default).
    pub fn max_tokens(mut self, n: u32) -> Self {
        self.max_tokens = n;
        self
    }

    /// Renames the evaluator.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    fn request<I: Serialize, E: Serialize, O: Serialize>(
        &self,
        case: &EvalCase<'_, I, E, O>,
    ) -> Result<ModelRequest, EvalError> {
        let mut prompt = format!("Rubric:\n{}\n", self.rubric);
        if self.with_input {
            let input = json_text(case.input)
                .map_err(|message| case.no_json(&self.name, "input", &message))?;
            prompt.push_str(&format!("\nInput:\n{input}\n"));
        }
        if self.with_expected {
            let expected = case.require_expected(&self.name)?;
            prompt.push_str(&format!("\nExpected output:\n{expected}\n"));
        }
        prompt.push_str(&format!("\nOutput:\n{}\n", case.output_json(&self.name)?));
        // The input, the expected output and above all the task's output may
        // quote a key the process holds; the judge is another model provider,
        // so it gets the text with those values replaced. A report re-scored
        // offline builds the same prompt from its already redacted values, so
        // the recorded request still matches.
        let prompt = harness::secrets::redact(&prompt).into_owned();
        Ok(ModelRequest::builder()
            .system(SYSTEM)
            .user(prompt)
            .max_tokens(self.max_tokens)
            .temperature(0.0)
            .build())
    }
}

#[async_trait]
impl<I, E, O> Evaluator<I, E, O> for Judge
where
    I: Serialize + Sync,
    E: Serialize + Sync,
    O: Serialize + Sync,
{
    fn name(&self) -> &str {
        &self.name
    }

    async fn evaluate(&self, case: &EvalCase<'_, I, E, O>) -> Result<Score, EvalError> {
        let request = self.request(case)?;
        let model = case.model(&self.model);
        let answer = model
            .complete_typed::<Verdict>(&request)
            .await
            .map_err(|e| EvalError::Model {
                evaluator: self.name.clone(),
                message: e.to_string(),
            })?;
        let verdict = answer.value;
        let value = if verdict.score.is_nan() {
            0.0
        } else {
            unsigned_zero(verdict.score.clamp(0.0, 1.0))
        };
        Ok(Score {
            value,
            passed: verdict.passed,
            reason: verdict.reason,
        })
    }
}
