//! Counting tokens for working memory: a [`TokenCounter`] trait, and an
//! [`Estimate`] calibrated by what providers report.

use harness::llm::{ContentPart, ImageSource, Message, ToolSpec};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::AddAssign;

/// Counts the tokens a message or a tool spec takes in a request.
///
/// Implement it with the tokenizer of your model for exact counts (and say
/// so with [`is_exact`](TokenCounter::is_exact)); the default, [`Estimate`],
/// needs no tokenizer.
pub trait TokenCounter: Send + Sync + fmt::Debug {
    /// Tokens `message` takes.
    fn message(&self, message: &Message) -> u64;

    /// Tokens `tool` takes when offered.
    fn tool(&self, tool: &ToolSpec) -> u64;

    /// Whether the counts are exact: exact counts are used as they are,
    /// estimates are scaled by the [`Calibration`] learnt from the input
    /// tokens providers report.
    fn is_exact(&self) -> bool {
        false
    }
}

/// The default counter: about four characters per token, plus a few tokens
/// per message for its framing. Estimates are scaled by [`Calibration`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Estimate;

/// Framing tokens a provider adds around each message.
const PER_MESSAGE: u64 = 4;
/// What an image costs, roughly, whatever its size.
const PER_IMAGE: u64 = 800;

fn chars_to_tokens(chars: usize) -> u64 {
    (chars as u64).div_ceil(4)
}

impl TokenCounter for Estimate {
    fn message(&self, message: &Message) -> u64 {
        let mut chars = 0usize;
        let mut tokens = PER_MESSAGE;
        for part in &message.content {
            match part {
                ContentPart::Text { text } => chars += text.len(),
                ContentPart::ToolCall(call) => {
                    chars += call.id.len() + call.name.len() + call.arguments.to_string().len()
                }
                ContentPart::ToolResult(result) => {
                    chars += result.call_id.len() + result.name.len() + result.content.len()
                }
                ContentPart::Reasoning(reasoning) => {
                    chars += reasoning.text.len()
                        + reasoning.signature.as_ref().map_or(0, String::len)
                        + reasoning.redacted.as_ref().map_or(0, String::len)
                }
                ContentPart::Image(ImageSource::Url { .. } | ImageSource::Base64 { .. }) => {
                    tokens += PER_IMAGE
                }
                _ => {}
            }
        }
        tokens + chars_to_tokens(chars)
    }

    fn tool(&self, tool: &ToolSpec) -> u64 {
        PER_MESSAGE
            + chars_to_tokens(
                tool.name.len() + tool.description.len() + tool.parameters.to_string().len(),
            )
    }
}

/// What providers reported against what was estimated, summed over a
/// session's model calls: the ratio scales later estimates.
///
/// ```
/// use harness_kit::Calibration;
///
/// let mut c = Calibration::default();
/// assert_eq!(c.ratio(), 1.0);
/// c += Calibration::observed(1000, 1300); // estimated 1000, the provider said 1300
/// assert!((c.ratio() - 1.3).abs() < 1e-9);
/// assert_eq!(c.scale(100), 130);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Calibration {
    /// Input tokens estimated, summed over the calls that reported usage.
    pub estimated: u64,
    /// Input tokens the providers reported for those calls.
    pub reported: u64,
}

impl Calibration {
    /// The ratio never leaves this range, so one odd report (a provider
    /// counting a cached prefix apart, say) cannot make memory evict all
    /// or nothing.
    const RANGE: (f64, f64) = (0.25, 4.0);

    /// One call's observation: `estimated` input tokens, `reported` by the
    /// provider. A call whose provider reports no usage observes nothing.
    pub fn observed(estimated: u64, reported: u64) -> Self {
        if estimated == 0 || reported == 0 {
            Self::default()
        } else {
            Self {
                estimated,
                reported,
            }
        }
    }

    /// Reported over estimated tokens, within `[0.25, 4]`; 1 before any
    /// observation.
    pub fn ratio(&self) -> f64 {
        if self.estimated == 0 {
            return 1.0;
        }
        (self.reported as f64 / self.estimated as f64).clamp(Self::RANGE.0, Self::RANGE.1)
    }

    /// An estimate scaled by the ratio.
    pub fn scale(&self, estimate: u64) -> u64 {
        (estimate as f64 * self.ratio()).ceil() as u64
    }
}

impl AddAssign for Calibration {
    fn add_assign(&mut self, other: Self) {
        self.estimated = self.estimated.saturating_add(other.estimated);
        self.reported = self.reported.saturating_add(other.reported);
    }
}
