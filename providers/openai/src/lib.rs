//! OpenAI chat-completions models for harness, and every server that speaks
//! the same API: vLLM, Ollama, llama.cpp's server, LM Studio, and others.
//!
//! ```no_run
//! use harness::llm::{LanguageModel, ModelRequest};
//!
//! # async fn demo() -> Result<(), harness::llm::ModelError> {
//! // Key from OPENAI_API_KEY; base URL from OPENAI_BASE_URL when set.
//! let model = harness_openai::Client::from_env()?.completion_model("gpt-4o-mini");
//! let answer = model.complete(&ModelRequest::builder().user("Hello!").build()).await?;
//! println!("{}", answer.text());
//! # Ok(())
//! # }
//! ```
//!
//! A local server needs no key:
//!
//! ```
//! let model = harness_openai::Client::builder()
//!     .base_url("http://localhost:11434/v1")
//!     .build()?
//!     .completion_model("llama3.2");
//! # Ok::<(), harness::llm::ModelError>(())
//! ```
//!
//! Chat completions neither return reasoning nor take it back:
//! [`Reasoning`](harness::llm::Reasoning) parts and tool-call
//! [`signature`](harness::llm::ToolCall::signature)s from other providers are
//! never sent, so a conversation begun elsewhere continues here.

mod client;
mod completion;
mod embedding;
mod schema;
mod streaming;
mod wire;

pub use client::{Client, ClientBuilder, DEFAULT_BASE_URL, TokenLimitField};
pub use completion::{CompletionModel, DEFAULT_MAX_TOKENS};
pub use embedding::EmbeddingModel;
pub use harness_provider_http::{ApiKey, HttpOptions, HttpRetryPolicy};
pub use schema::strict_schema;
