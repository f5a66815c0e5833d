//! Tokens spent, and what they cost.

use std::collections::BTreeMap;
use std::iter::Sum;
use std::ops::{Add, AddAssign};

use serde::{Deserialize, Serialize};

/// Tokens spent on one call (or, summed, on many).
///
/// `input_tokens` counts the whole prompt, cached or not; `cache_read_tokens`
/// and `cache_write_tokens` are the parts of it read from and written to the
/// provider's prompt cache. `output_tokens` counts everything generated;
/// `reasoning_tokens` is the part of it spent thinking (billed as output).
/// Providers that do not report a kind leave it at zero.
///
/// Usage adds up with `+`, `+=` and `sum()`:
///
/// ```
/// use harness::llm::Usage;
///
/// let calls = [
///     Usage::new(100, 20).with_cache_read(60),
///     Usage::new(150, 30).with_reasoning(12),
/// ];
/// let total: Usage = calls.iter().sum();
/// assert_eq!(total.total(), 300);
/// assert_eq!((total.cache_read_tokens, total.reasoning_tokens), (60, 12));
/// assert_eq!(total.uncached_input_tokens(), 190);
/// ```
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
#[non_exhaustive]
pub struct Usage {
    /// Tokens in the prompt, cached ones included.
    pub input_tokens: u64,
    /// Tokens generated, reasoning included.
    pub output_tokens: u64,
    /// Prompt tokens read from the provider's cache (OpenAI
    /// `cached_tokens`, Anthropic `cache_read_input_tokens`, Gemini
    /// `cachedContentTokenCount`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_read_tokens: u64,
    /// Prompt tokens written to the provider's cache (Anthropic
    /// `cache_creation_input_tokens`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_tokens: u64,
    /// Generated tokens spent on reasoning (OpenAI `reasoning_tokens`,
    /// Gemini `thoughtsTokenCount`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasoning_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Usage {
    /// Usage of `input_tokens` prompt and `output_tokens` generated tokens,
    /// with no cache or reasoning tokens; add those with the `with_` methods.
    pub fn new(input_tokens: u64, output_tokens: u64) -> Self {
        Self {
            input_tokens,
            output_tokens,
            ..Self::default()
        }
    }

    /// Sets the prompt tokens read from the cache, builder-style.
    pub fn with_cache_read(mut self, tokens: u64) -> Self {
        self.cache_read_tokens = tokens;
        self
    }

    /// Sets the prompt tokens written to the cache, builder-style.
    pub fn with_cache_write(mut self, tokens: u64) -> Self {
        self.cache_write_tokens = tokens;
        self
    }

    /// Sets the generated tokens spent on reasoning, builder-style.
    pub fn with_reasoning(mut self, tokens: u64) -> Self {
        self.reasoning_tokens = tokens;
        self
    }

    /// Input plus output tokens.
    pub fn total(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }

    /// Prompt tokens neither read from nor written to the cache.
    pub fn uncached_input_tokens(&self) -> u64 {
        self.input_tokens
            .saturating_sub(self.cache_read_tokens)
            .saturating_sub(self.cache_write_tokens)
    }

    /// What these tokens cost at `price`.
    pub fn cost(&self, price: &ModelPrice) -> f64 {
        price.cost(self)
    }
}

impl Add for Usage {
    type Output = Usage;

    fn add(self, other: Usage) -> Usage {
        Usage {
            input_tokens: self.input_tokens.saturating_add(other.input_tokens),
            output_tokens: self.output_tokens.saturating_add(other.output_tokens),
            cache_read_tokens: self
                .cache_read_tokens
                .saturating_add(other.cache_read_tokens),
            cache_write_tokens: self
                .cache_write_tokens
                .saturating_add(other.cache_write_tokens),
            reasoning_tokens: self.reasoning_tokens.saturating_add(other.reasoning_tokens),
        }
    }
}

impl AddAssign for Usage {
    fn add_assign(&mut self, other: Usage) {
        *self = *self + other;
    }
}

impl Sum for Usage {
    fn sum<I: Iterator<Item = Usage>>(iter: I) -> Usage {
        iter.fold(Usage::default(), Add::add)
    }
}

impl<'a> Sum<&'a Usage> for Usage {
    fn sum<I: Iterator<Item = &'a Usage>>(iter: I) -> Usage {
        iter.copied().sum()
    }
}

/// Usage per model name, e.g. a run's totals: a state field with
/// `#[field(reduce = add)]` sums the updates steps return.
///
/// ```
/// use harness::llm::{ModelPrice, PriceTable, Usage, UsageByModel};
///
/// let mut spent = UsageByModel::new();
/// spent.record("gpt-4o", Usage::new(1_000_000, 0));
/// spent += UsageByModel::of("gpt-4o", Usage::new(1_000_000, 500_000));
/// spent.record("local-llama", Usage::new(10, 10));
/// assert_eq!(spent.get("gpt-4o"), Some(Usage::new(2_000_000, 500_000)));
/// assert_eq!(spent.total().total(), 2_500_020);
///
/// let prices = PriceTable::new().with("gpt-4o", ModelPrice::new(2.5, 10.0)?);
/// let cost = spent.cost(&prices);
/// assert_eq!(cost.amount, 10.0);
/// assert_eq!(cost.unpriced, ["local-llama"]);
/// # Ok::<(), harness::llm::PriceError>(())
/// ```
///
/// As a state field, summed by its reducer:
///
/// ```
/// use harness::llm::{Usage, UsageByModel};
/// use harness::{HarnessState, JsonSchema};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
/// struct Chat {
///     #[field(reduce = add)]
///     usage: UsageByModel,
/// }
///
/// // A step that called a model returns its usage as an update.
/// let update = ChatUpdate::new().usage(UsageByModel::of("gpt-4o", Usage::new(12, 3)));
/// # let _ = update;
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(transparent)]
pub struct UsageByModel {
    models: BTreeMap<String, Usage>,
}

impl UsageByModel {
    /// No usage yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// `usage` of `model` alone, e.g. a step's update.
    pub fn of(model: impl Into<String>, usage: Usage) -> Self {
        let mut by_model = Self::new();
        by_model.record(model, usage);
        by_model
    }

    /// Adds `usage` to `model`'s.
    pub fn record(&mut self, model: impl Into<String>, usage: Usage) -> &mut Self {
        *self.models.entry(model.into()).or_default() += usage;
        self
    }

    /// `model`'s usage, if it has any.
    pub fn get(&self, model: &str) -> Option<Usage> {
        self.models.get(model).copied()
    }

    /// Each model's usage, by model name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Usage)> {
        self.models
            .iter()
            .map(|(model, usage)| (model.as_str(), usage))
    }

    /// Whether no usage was recorded.
    pub fn is_empty(&self) -> bool {
        self.models.is_empty()
    }

    /// All models' usage together.
    pub fn total(&self) -> Usage {
        self.models.values().sum()
    }

    /// What the usage costs at `prices`; models the table does not price
    /// are left out of the amount and listed.
    pub fn cost(&self, prices: &PriceTable) -> Cost {
        let mut cost = Cost::default();
        for (model, usage) in &self.models {
            match prices.cost(model, usage) {
                Some(amount) => cost.amount += amount,
                None => cost.unpriced.push(model.clone()),
            }
        }
        cost
    }
}

impl Add for UsageByModel {
    type Output = UsageByModel;

    fn add(mut self, other: UsageByModel) -> UsageByModel {
        self += other;
        self
    }
}

impl AddAssign for UsageByModel {
    fn add_assign(&mut self, other: UsageByModel) {
        for (model, usage) in other.models {
            self.record(model, usage);
        }
    }
}

/// The cost of [`UsageByModel`] at a [`PriceTable`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Cost {
    /// The cost of the models the table prices.
    pub amount: f64,
    /// The models it does not price, whose usage is not in `amount`.
    pub unpriced: Vec<String>,
}

/// A price that is not a finite, non-negative number.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("the {kind} price {value} is not a finite, non-negative number (price per million tokens)")]
pub struct PriceError {
    /// Which price: `input`, `output`, `cache_read` or `cache_write`.
    pub kind: &'static str,
    /// The value given.
    pub value: f64,
}

/// What one model charges, per million tokens of each kind (in whatever
/// currency the table is written in).
///
/// Reasoning tokens are billed as output. Cache reads and writes not priced
/// are billed as input.
///
/// ```
/// use harness::llm::{ModelPrice, Usage};
///
/// let price = ModelPrice::new(3.0, 15.0)?.with_cache_read(0.3)?.with_cache_write(3.75)?;
/// let usage = Usage::new(1_000_000, 100_000).with_cache_read(800_000);
/// // 200k uncached at 3, 800k cached at 0.3, 100k output at 15.
/// assert!((price.cost(&usage) - (0.6 + 0.24 + 1.5)).abs() < 1e-9);
/// # Ok::<(), harness::llm::PriceError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawPrice")]
#[non_exhaustive]
pub struct ModelPrice {
    /// Per million prompt tokens not read from or written to the cache.
    pub input: f64,
    /// Per million generated tokens, reasoning included.
    pub output: f64,
    /// Per million prompt tokens read from the cache; `None` bills them as
    /// input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read: Option<f64>,
    /// Per million prompt tokens written to the cache; `None` bills them as
    /// input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<f64>,
}

#[derive(Deserialize)]
struct RawPrice {
    input: f64,
    output: f64,
    #[serde(default)]
    cache_read: Option<f64>,
    #[serde(default)]
    cache_write: Option<f64>,
}

impl TryFrom<RawPrice> for ModelPrice {
    type Error = PriceError;

    fn try_from(raw: RawPrice) -> Result<Self, PriceError> {
        let mut price = ModelPrice::new(raw.input, raw.output)?;
        if let Some(value) = raw.cache_read {
            price = price.with_cache_read(value)?;
        }
        if let Some(value) = raw.cache_write {
            price = price.with_cache_write(value)?;
        }
        Ok(price)
    }
}

fn checked(kind: &'static str, value: f64) -> Result<f64, PriceError> {
    if value.is_finite() && value >= 0.0 {
        Ok(value)
    } else {
        Err(PriceError { kind, value })
    }
}

impl ModelPrice {
    /// A price of `input` per million prompt tokens and `output` per
    /// million generated tokens.
    pub fn new(input: f64, output: f64) -> Result<Self, PriceError> {
        Ok(Self {
            input: checked("input", input)?,
            output: checked("output", output)?,
            cache_read: None,
            cache_write: None,
        })
    }

    /// Sets the price of prompt tokens read from the cache.
    pub fn with_cache_read(mut self, price: f64) -> Result<Self, PriceError> {
        self.cache_read = Some(checked("cache_read", price)?);
        Ok(self)
    }

    /// Sets the price of prompt tokens written to the cache.
    pub fn with_cache_write(mut self, price: f64) -> Result<Self, PriceError> {
        self.cache_write = Some(checked("cache_write", price)?);
        Ok(self)
    }

    /// What `usage` costs at this price.
    pub fn cost(&self, usage: &Usage) -> f64 {
        let per_token = |tokens: u64, price: f64| tokens as f64 * price / 1_000_000.0;
        per_token(usage.uncached_input_tokens(), self.input)
            + per_token(
                usage.cache_read_tokens,
                self.cache_read.unwrap_or(self.input),
            )
            + per_token(
                usage.cache_write_tokens,
                self.cache_write.unwrap_or(self.input),
            )
            + per_token(usage.output_tokens, self.output)
    }
}

/// Prices of several models, by model name, to turn [`Usage`] into cost.
///
/// A model is found by its exact name, else by the longest name in the table
/// that starts it (`gpt-4o` prices `gpt-4o-2024-08-06`). The table is plain
/// data: it serializes as a JSON object of model name to [`ModelPrice`], so
/// it can live in a configuration file.
///
/// ```
/// use harness::llm::{ModelPrice, PriceTable, Usage};
///
/// let prices = PriceTable::new()
///     .with("gpt-4o", ModelPrice::new(2.5, 10.0)?)
///     .with("gpt-4o-mini", ModelPrice::new(0.25, 0.5)?);
/// let usage = Usage::new(2_000_000, 1_000_000);
/// assert_eq!(prices.cost("gpt-4o-mini-2024-07-18", &usage), Some(1.0));
/// assert_eq!(prices.cost("gpt-4o", &usage), Some(15.0));
/// assert_eq!(prices.cost("claude-sonnet", &usage), None);
/// # Ok::<(), harness::llm::PriceError>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PriceTable {
    prices: BTreeMap<String, ModelPrice>,
}

impl PriceTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) `model`'s price, builder-style.
    pub fn with(mut self, model: impl Into<String>, price: ModelPrice) -> Self {
        self.insert(model, price);
        self
    }

    /// Adds (or replaces) `model`'s price.
    pub fn insert(&mut self, model: impl Into<String>, price: ModelPrice) -> &mut Self {
        self.prices.insert(model.into(), price);
        self
    }

    /// The price of `model`: its own, else that of the longest model name
    /// in the table that is a prefix of it.
    pub fn price(&self, model: &str) -> Option<&ModelPrice> {
        self.prices.get(model).or_else(|| {
            self.prices
                .iter()
                .filter(|(name, _)| model.starts_with(name.as_str()))
                .max_by_key(|(name, _)| name.len())
                .map(|(_, price)| price)
        })
    }

    /// What `usage` of `model` costs, if the table prices it.
    pub fn cost(&self, model: &str, usage: &Usage) -> Option<f64> {
        self.price(model).map(|price| price.cost(usage))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn every_kind_adds_up() {
        let a = Usage::new(10, 5)
            .with_cache_read(4)
            .with_cache_write(3)
            .with_reasoning(2);
        let b = Usage::new(1, 1).with_cache_read(1);
        let mut c = a;
        c += b;
        assert_eq!(c, a + b);
        assert_eq!(
            c,
            Usage::new(11, 6)
                .with_cache_read(5)
                .with_cache_write(3)
                .with_reasoning(2)
        );
        assert_eq!([a, b].into_iter().sum::<Usage>(), c);
        assert_eq!(std::iter::empty::<Usage>().sum::<Usage>(), Usage::default());
        assert_eq!(
            (Usage::new(u64::MAX, 0) + Usage::new(1, 0)).input_tokens,
            u64::MAX
        );
    }

    #[test]
    fn old_records_without_the_new_kinds_still_read() {
        let old: Usage =
            serde_json::from_str(r#"{"input_tokens": 3, "output_tokens": 1}"#).unwrap();
        assert_eq!(old, Usage::new(3, 1));
        assert_eq!(
            serde_json::to_value(Usage::new(3, 1).with_cache_read(2)).unwrap(),
            serde_json::json!({"input_tokens": 3, "output_tokens": 1, "cache_read_tokens": 2})
        );
    }

    #[test]
    fn cost_prices_each_kind() {
        let price = ModelPrice::new(2.0, 8.0)
            .unwrap()
            .with_cache_read(0.5)
            .unwrap()
            .with_cache_write(2.5)
            .unwrap();
        let usage = Usage::new(1_000_000, 500_000)
            .with_cache_read(400_000)
            .with_cache_write(100_000)
            .with_reasoning(200_000);
        // 500k uncached at 2, 400k read at 0.5, 100k written at 2.5, 500k out at 8.
        let expected = 1.0 + 0.2 + 0.25 + 4.0;
        assert!((usage.cost(&price) - expected).abs() < 1e-9);
        // Without cache prices, cached tokens are billed as input.
        let plain = ModelPrice::new(2.0, 8.0).unwrap();
        assert!((usage.cost(&plain) - (2.0 + 4.0)).abs() < 1e-9);
    }

    #[test]
    fn bad_prices_are_refused_where_they_are_given() {
        for (input, output) in [(-1.0, 1.0), (1.0, f64::NAN), (f64::INFINITY, 1.0)] {
            assert!(ModelPrice::new(input, output).is_err(), "{input} {output}");
        }
        let error = ModelPrice::new(1.0, 1.0)
            .unwrap()
            .with_cache_read(-0.1)
            .unwrap_err();
        assert_eq!(error.kind, "cache_read");
        for (bad, says) in [
            (
                r#"{"gpt": {"input": -1, "output": 1}}"#,
                "input price -1 is not",
            ),
            (
                r#"{"gpt": {"input": 1, "output": 1, "cache_write": -3}}"#,
                "cache_write price -3 is not",
            ),
            (r#"{"gpt": {"input": 1}}"#, "missing field `output`"),
            (
                r#"{"gpt": {"input": "cheap", "output": 1}}"#,
                "invalid type: string",
            ),
        ] {
            let error = serde_json::from_str::<PriceTable>(bad).unwrap_err();
            assert!(error.to_string().contains(says), "{bad}: {error}");
        }
    }

    #[test]
    fn usage_by_model_merges_as_a_reducer_and_round_trips() {
        let mut state = UsageByModel::of("a", Usage::new(1, 1));
        state += UsageByModel::of("b", Usage::new(2, 2).with_cache_read(1));
        state += UsageByModel::of("a", Usage::new(3, 0).with_reasoning(4));
        assert_eq!(state.get("a"), Some(Usage::new(4, 1).with_reasoning(4)));
        assert_eq!(state.get("b"), Some(Usage::new(2, 2).with_cache_read(1)));
        assert_eq!(state.get("c"), None);
        assert_eq!(
            state.total(),
            Usage::new(6, 3).with_cache_read(1).with_reasoning(4)
        );
        let json = serde_json::to_value(&state).unwrap();
        assert_eq!(json["a"]["reasoning_tokens"], 4);
        assert_eq!(serde_json::from_value::<UsageByModel>(json).unwrap(), state);
        let mut plain = Usage::new(1, 0);
        plain += Usage::new(1, 0);
        assert_eq!(plain, Usage::new(2, 0));
        assert!(UsageByModel::new().cost(&PriceTable::new()) == Cost::default());
    }

    #[test]
    fn a_table_reads_from_json_and_matches_by_longest_prefix() {
        let table: PriceTable = serde_json::from_str(
            r#"{"claude": {"input": 1, "output": 2}, "claude-opus": {"input": 10, "output": 20, "cache_read": 1}}"#,
        )
        .unwrap();
        assert_eq!(table.price("claude-opus-4").unwrap().input, 10.0);
        assert_eq!(table.price("claude-haiku").unwrap().input, 1.0);
        assert!(table.price("gpt").is_none());
        let usage = Usage::new(1_000_000, 0);
        assert_eq!(table.cost("claude-opus-4", &usage), Some(10.0));
    }
}
