//! Anthropic (Claude) models for harness, over the Messages API.
//!
//! ```no_run
//! use harness::llm::{LanguageModel, ModelRequest};
//!
//! # async fn demo() -> Result<(), harness::llm::ModelError> {
//! // Key from ANTHROPIC_API_KEY; base URL from ANTHROPIC_BASE_URL when set.
//! let model = harness_anthropic::Client::from_env()?.completion_model("claude-sonnet-4-5");
//! let answer = model.complete(&ModelRequest::builder().user("Hello!").build()).await?;
//! println!("{}", answer.text());
//! # Ok(())
//! # }
//! ```
//!
//! System messages anywhere in the conversation are sent as the request's
//! `system` text; tool results travel in user turns, and consecutive turns of
//! one role are merged, as the API requires. Usage counts cached prompt
//! tokens (written or read) as input tokens.
//!
//! Extended thinking (turn it on with
//! [`ModelRequest::extra`](harness::llm::ModelRequest::extra), e.g.
//! `{"thinking": {"type": "enabled", "budget_tokens": 2048}}`): `thinking`
//! and `redacted_thinking` blocks, streamed or not, become
//! [`Reasoning`](harness::llm::Reasoning) parts tagged [`PROVIDER`], in the
//! order they came, with their signature or redacted data. They are sent
//! back as the same blocks, unchanged, as the API requires when the turn
//! used tools; reasoning from other providers, and thinking that lost its
//! signature, is left out.

mod client;
mod completion;
mod streaming;
mod wire;

pub use client::{ANTHROPIC_VERSION, Client, ClientBuilder, DEFAULT_BASE_URL};
pub use completion::{CompletionModel, DEFAULT_MAX_TOKENS, PROVIDER};
pub use harness_provider_http::{ApiKey, HttpOptions, HttpRetryPolicy};
