//! Token usage summed over a run, per model.

use harness::llm::Usage;
use harness::state::reduce::Addable;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// Tokens spent, per model (`provider/model`), summed over every model call
/// of a session: the agent's own turns and the summaries working memory
/// asked for.
///
/// A field of this type takes the `add` reducer (`#[field(reduce = add)]`);
/// [`AgentMemory`](crate::AgentMemory) keeps one.
///
/// ```
/// use harness::llm::Usage;
/// use harness::state::reduce::Addable;
/// use harness_kit::RunUsage;
///
/// let mut total = RunUsage::one("openai/gpt-4o-mini", Usage::new(100, 20));
/// total.add_from(RunUsage::one("openai/gpt-4o-mini", Usage::new(50, 5)));
/// total.add_from(RunUsage::one("anthropic/claude-haiku", Usage::new(10, 1)));
/// assert_eq!(total.get("openai/gpt-4o-mini"), Usage::new(150, 25));
/// assert_eq!(total.total(), Usage::new(160, 26));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct RunUsage {
    by_model: BTreeMap<String, Usage>,
}

impl RunUsage {
    /// Usage of one model.
    pub fn one(model: impl Into<String>, usage: Usage) -> Self {
        Self {
            by_model: BTreeMap::from([(model.into(), usage)]),
        }
    }

    /// What `model` spent (zero if it was not called).
    pub fn get(&self, model: &str) -> Usage {
        self.by_model.get(model).copied().unwrap_or_default()
    }

    /// Each model and what it spent, by name.
    pub fn by_model(&self) -> impl Iterator<Item = (&str, &Usage)> {
        self.by_model.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The sum over every model.
    pub fn total(&self) -> Usage {
        self.by_model
            .values()
            .fold(Usage::default(), |sum, usage| sum + *usage)
    }

    /// Whether no model was called (or none reported usage).
    pub fn is_empty(&self) -> bool {
        self.by_model.is_empty()
    }
}

impl Addable for RunUsage {
    fn add_from(&mut self, other: Self) {
        for (model, usage) in other.by_model {
            *self.by_model.entry(model).or_default() += usage;
        }
    }
}

impl fmt::Display for RunUsage {
    /// One line per model: `model: N in, M out`, then the total.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (model, usage) in &self.by_model {
            writeln!(
                f,
                "{model}: {} input tokens, {} output tokens",
                usage.input_tokens, usage.output_tokens
            )?;
        }
        let total = self.total();
        write!(
            f,
            "total: {} input tokens, {} output tokens",
            total.input_tokens, total.output_tokens
        )
    }
}
