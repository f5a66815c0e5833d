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

mod client;
mod completion;
mod streaming;
mod wire;

pub use client::{ANTHROPIC_VERSION, Client, ClientBuilder, DEFAULT_BASE_URL};
pub use completion::{CompletionModel, DEFAULT_MAX_TOKENS};
pub use harness_provider_http::{ApiKey, HttpOptions, RetryPolicy};
