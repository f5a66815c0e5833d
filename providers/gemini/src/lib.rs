//! Google Gemini models for harness, over the Gemini API
//! (`generateContent`, `streamGenerateContent?alt=sse`), and its
//! embeddings (`batchEmbedContents`) as an
//! [`Embedder`](harness::llm::Embedder): [`EmbeddingModel`].
//!
//! ```no_run
//! use harness::llm::{LanguageModel, ModelRequest};
//!
//! # async fn demo() -> Result<(), harness::llm::ModelError> {
//! // Key from GEMINI_API_KEY, else GOOGLE_API_KEY.
//! let model = harness_gemini::Client::from_env()?.completion_model("gemini-2.5-flash");
//! let answer = model.complete(&ModelRequest::builder().user("Hello!").build()).await?;
//! println!("{}", answer.text());
//! # Ok(())
//! # }
//! ```
//!
//! Notes on the mapping:
//! - System messages become `systemInstruction`; tool results become
//!   `functionResponse` parts in user turns, matched by tool name.
//! - Gemini gives function calls no id unless it wants one back; this crate
//!   then makes one up (`gemini_call_N`) and does not send it back.
//! - Gemini 3 requires each function call's `thoughtSignature` to be sent
//!   back with the conversation. It becomes the call's
//!   [`ToolCall::signature`](harness::llm::ToolCall::signature), tagged
//!   [`PROVIDER`], so a loop that keeps the assistant's message unchanged
//!   sends it back without knowing about it; the id stays Gemini's own.
//! - Thought summaries (`"thought": true` parts, asked for with
//!   `{"generationConfig": {"thinkingConfig": {"includeThoughts": true}}}`
//!   in [`ModelRequest::extra`](harness::llm::ModelRequest::extra), merged
//!   into the `generationConfig` made from the request) become
//!   [`Reasoning`](harness::llm::Reasoning) parts with their text and
//!   signature; a streamed thought's pieces are joined into one part. A
//!   `thoughtSignature` on a text part becomes a `Reasoning` part with no
//!   text right after that text. Both go back where they came from; a
//!   signature that followed no text goes back as a part with empty text.
//!   Reasoning and signatures from other providers are not sent.
//! - Tool schemas are reduced to the subset Gemini accepts, see
//!   [`gemini_schema`].

mod client;
mod completion;
mod embedding;
mod schema;
mod streaming;
mod wire;

pub use client::{Client, ClientBuilder, DEFAULT_BASE_URL};
pub use completion::{CompletionModel, DEFAULT_MAX_TOKENS, PROVIDER};
pub use embedding::EmbeddingModel;
pub use harness_provider_http::{ApiKey, HttpOptions, HttpRetryPolicy};
pub use schema::gemini_schema;
