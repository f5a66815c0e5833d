//! The model layer: one trait every provider implements, the types it speaks,
//! typed tools, and deterministic models for tests.
//!
//! - [`LanguageModel`]: `complete` a [`ModelRequest`] into a [`ModelResponse`],
//!   or `stream` it as [`StreamEvent`]s. Provider crates (`harness-openai`,
//!   `harness-anthropic`, `harness-gemini`) implement it; so do
//!   [`ScriptedModel`] and [`Replay`], which need no network.
//! - [`Message`], [`ContentPart`], [`ToolCall`], [`ToolResult`]: the
//!   conversation; [`Reasoning`] and [`ProviderSignature`] carry a model's
//!   reasoning back to the provider that produced it, and to no other.
//! - [`Tool`] and [`ToolSet`]: typed tools whose argument schema comes from
//!   schemars, and dispatch of the model's calls to them.
//! - [`LanguageModelExt::complete_typed`]: an answer of any
//!   `T: DeserializeOwned + JsonSchema`, through the provider's native
//!   structured-output mode ([`ResponseFormat`]), validated on arrival and
//!   repaired once.
//! - [`Usage`]: tokens spent (input, output, cache read and write,
//!   reasoning), summed with `+`, per model in [`UsageByModel`];
//!   [`PriceTable`] turns them into cost.
//! - [`ModelError`]: every failure, typed.
//!
//! ```
//! use harness::llm::{Expect, LanguageModel, Message, ModelRequest, ModelResponse, ScriptedModel};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), harness::llm::ModelError> {
//! let model = ScriptedModel::new([Expect::any().reply(ModelResponse::from_text("Hello!"))]);
//! let response = model.complete(&ModelRequest::new([Message::user("Hi")])).await?;
//! assert_eq!(response.text(), "Hello!");
//! # Ok(())
//! # }
//! ```

use std::sync::Arc;

use async_trait::async_trait;

mod embed;
mod error;
mod message;
mod record;
mod request;
mod response;
mod scripted;
mod stream;
mod tool;
mod typed;
mod usage;

pub use embed::{Embedder, Embeddings};
pub use error::{ModelError, ToolError};
pub use message::{
    ContentPart, ImageSource, Message, ProviderSignature, Reasoning, Role, ToolCall, ToolResult,
};
pub use record::{Exchange, Outcome, Recorded, Recording, Replay};
pub use request::{ModelRequest, ModelRequestBuilder, ResponseFormat, ToolChoice};
pub use response::{ModelResponse, StopReason};
pub use scripted::{Expect, ScriptedModel, Turn};
pub use stream::{
    ModelStream, PartialToolCalls, StreamCollector, StreamEvent, collect_stream, tool_arguments,
};
pub use tool::{Tool, ToolSet, ToolSpec};
pub(crate) use typed::typed_answer;
pub use typed::{
    LanguageModelExt, SchemaMismatch, TYPED_ATTEMPTS, TypedAnswer, TypedAnswerError, parse_answer,
};
pub use usage::{Cost, ModelPrice, PriceError, PriceTable, Usage, UsageByModel};

/// A language model: answers a [`ModelRequest`] whole or as a stream.
///
/// Implementations must be cheap to share (`Send + Sync`); loops hold them as
/// `Arc<dyn LanguageModel>`. Only [`complete`](LanguageModel::complete) is
/// required: the default [`stream`](LanguageModel::stream) completes the
/// request and replays the answer as events.
#[async_trait]
pub trait LanguageModel: Send + Sync {
    /// Sends `request` and waits for the whole answer.
    async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError>;

    /// Sends `request` and returns the answer as a stream of events.
    ///
    /// Errors before the first event (authentication, rate limits after
    /// retries, a refused request) are returned here; errors mid-stream
    /// arrive as an `Err` item, which ends the stream. [`collect_stream`]
    /// turns the stream into the [`ModelResponse`] `complete` would give.
    async fn stream(&self, request: &ModelRequest) -> Result<ModelStream, ModelError> {
        Ok(self.complete(request).await?.into_stream())
    }

    /// The provider's name, for logs and traces (e.g. `"openai"`).
    fn provider(&self) -> &str {
        "custom"
    }

    /// The model's name, for logs and traces (e.g. `"gpt-4o-mini"`).
    fn model_name(&self) -> &str {
        "unknown"
    }
}

#[async_trait]
impl<M: LanguageModel + ?Sized> LanguageModel for Arc<M> {
    async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        (**self).complete(request).await
    }

    async fn stream(&self, request: &ModelRequest) -> Result<ModelStream, ModelError> {
        (**self).stream(request).await
    }

    fn provider(&self) -> &str {
        (**self).provider()
    }

    fn model_name(&self) -> &str {
        (**self).model_name()
    }
}

#[async_trait]
impl<M: LanguageModel + ?Sized> LanguageModel for Box<M> {
    async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        (**self).complete(request).await
    }

    async fn stream(&self, request: &ModelRequest) -> Result<ModelStream, ModelError> {
        (**self).stream(request).await
    }

    fn provider(&self) -> &str {
        (**self).provider()
    }

    fn model_name(&self) -> &str {
        (**self).model_name()
    }
}
