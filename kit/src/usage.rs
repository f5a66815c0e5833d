//! Usage and cost, for people: a report of a session's
//! [`UsageByModel`].

use harness::llm::{PriceTable, Usage, UsageByModel};
use std::fmt::Write;

/// One line per model, then the total: tokens of each kind reported, and
/// the cost when `prices` prices the model.
///
/// ```
/// use harness::llm::{ModelPrice, PriceTable, Usage, UsageByModel};
/// use harness_kit::usage_report;
///
/// let usage = UsageByModel::of("gpt-4o-mini", Usage::new(2_000_000, 1_000_000).with_cache_read(500_000));
/// let prices = PriceTable::new().with("gpt-4o-mini", ModelPrice::new(0.15, 0.6)?);
/// assert_eq!(
///     usage_report(&usage, Some(&prices)),
///     "gpt-4o-mini: 2000000 input (500000 cached), 1000000 output; cost 0.900000\n\
///      total: 2000000 input (500000 cached), 1000000 output; cost 0.900000"
/// );
/// # Ok::<(), harness::llm::PriceError>(())
/// ```
pub fn usage_report(usage: &UsageByModel, prices: Option<&PriceTable>) -> String {
    let mut out = String::new();
    for (model, spent) in usage.iter() {
        let cost = prices.and_then(|p| p.cost(model, spent));
        let _ = writeln!(out, "{model}: {}", line(spent, cost));
    }
    let total = usage.total();
    let cost = prices.map(|p| usage.cost(p));
    let amount = cost.as_ref().map(|c| c.amount);
    let _ = write!(out, "total: {}", line(&total, amount));
    if let Some(cost) = cost
        && !cost.unpriced.is_empty()
    {
        let _ = write!(out, " (not priced: {})", cost.unpriced.join(", "));
    }
    out
}

fn line(usage: &Usage, cost: Option<f64>) -> String {
    let mut text = format!("{} input", usage.input_tokens);
    let mut notes = Vec::new();
    if usage.cache_read_tokens > 0 {
        notes.push(format!("{} cached", usage.cache_read_tokens));
    }
    if usage.cache_write_tokens > 0 {
        notes.push(format!("{} written to the cache", usage.cache_write_tokens));
    }
    if !notes.is_empty() {
        let _ = write!(text, " ({})", notes.join(", "));
    }
    let _ = write!(text, ", {} output", usage.output_tokens);
    if usage.reasoning_tokens > 0 {
        let _ = write!(text, " ({} reasoning)", usage.reasoning_tokens);
    }
    if let Some(cost) = cost {
        let _ = write!(text, "; cost {cost:.6}");
    }
    text
}
