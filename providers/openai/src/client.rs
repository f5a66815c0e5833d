//! The client: credentials, base URL, HTTP options.

use std::sync::Arc;

use harness::llm::ModelError;
use harness_provider_http::Connection;
use harness_provider_http::header::{AUTHORIZATION, HeaderMap};

use crate::completion::CompletionModel;

/// OpenAI's API root, used when neither the builder nor `OPENAI_BASE_URL`
/// gives another.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// A connection to an OpenAI-compatible API. Cheap to clone; make models
/// with [`Client::completion_model`].
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<ClientInner>,
}

pub(crate) struct ClientInner {
    pub(crate) connection: Connection,
    /// Whether the base URL is OpenAI's own API (its strict schemas).
    pub(crate) is_openai: bool,
    /// The field that bounds an answer's length.
    pub(crate) token_limit: TokenLimitField,
}

/// The request field that bounds an answer's length
/// ([`ClientBuilder::token_limit_field`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TokenLimitField {
    /// `max_completion_tokens`: what OpenAI's own API wants (its reasoning
    /// models refuse `max_tokens`); the default for OpenAI's URL.
    MaxCompletionTokens,
    /// `max_tokens`: what most OpenAI-compatible servers (vLLM, llama.cpp,
    /// Ollama, …) know; the default for any other URL.
    MaxTokens,
}

/// Configures a [`Client`]. The key and base URL default to the environment
/// (`OPENAI_API_KEY`, `OPENAI_BASE_URL`).
///
/// ```
/// use std::time::Duration;
///
/// let client = harness_openai::Client::builder()
///     .api_key("sk-test")
///     .base_url("http://localhost:8000/v1")
///     .timeout(Duration::from_secs(60))
///     .max_attempts(5)
///     .build()?;
/// assert_eq!(client.base_url(), "http://localhost:8000/v1");
/// assert!(!format!("{client:?}").contains("sk-test"));
/// # Ok::<(), harness::llm::ModelError>(())
/// ```
#[derive(Clone, Default)]
pub struct ClientBuilder {
    core: harness_provider_http::ClientBuilder,
    token_limit: Option<TokenLimitField>,
}

harness_provider_http::provider_client! {
    Client { inner.connection },
    ClientBuilder { core },
    /// A client configured from the environment: the key from
    /// `OPENAI_API_KEY`, the base URL from `OPENAI_BASE_URL` (else
    /// [`DEFAULT_BASE_URL`]). A key is required only for OpenAI's own URL.
    from_env,
    /// A model of this client, e.g. `"gpt-4o-mini"`.
    completion_model -> CompletionModel,
    /// Uses this API key instead of `OPENAI_API_KEY`.
    api_key,
    /// Sends requests to this API root (e.g. `http://localhost:11434/v1`)
    /// instead of `OPENAI_BASE_URL` or [`DEFAULT_BASE_URL`].
    base_url,
}

impl ClientBuilder {
    /// Bounds answers with this field instead of the one the base URL
    /// implies ([`TokenLimitField::MaxCompletionTokens`] for OpenAI's own
    /// URL, [`TokenLimitField::MaxTokens`] for any other): a gateway or
    /// proxy in front of OpenAI's reasoning models (Azure OpenAI, LiteLLM)
    /// needs `max_completion_tokens` at another URL.
    ///
    /// ```
    /// use harness_openai::{Client, TokenLimitField};
    ///
    /// let client = Client::builder()
    ///     .base_url("https://gateway.example.com/v1")
    ///     .api_key("sk-test")
    ///     .token_limit_field(TokenLimitField::MaxCompletionTokens)
    ///     .build()?;
    /// # Ok::<(), harness::llm::ModelError>(())
    /// ```
    pub fn token_limit_field(mut self, field: TokenLimitField) -> Self {
        self.token_limit = Some(field);
        self
    }

    /// The client. Fails with [`ModelError::Configuration`] for an invalid
    /// base URL, or a missing key when talking to OpenAI itself.
    pub fn build(self) -> Result<Client, ModelError> {
        let base_url = self
            .core
            .resolve_base_url(Some("OPENAI_BASE_URL"), DEFAULT_BASE_URL)?;
        let is_openai = base_url.starts_with("https://api.openai.com");
        let api_key = match self.core.api_key_or_env(&["OPENAI_API_KEY"]) {
            Ok(key) => Some(key),
            Err(error) if is_openai => return Err(error),
            // Local OpenAI-compatible servers usually need no key.
            Err(_) => None,
        };
        let mut headers = HeaderMap::new();
        if let Some(key) = &api_key {
            headers.insert(AUTHORIZATION, key.header_value("Bearer ")?);
        }
        Ok(Client {
            inner: Arc::new(ClientInner {
                connection: self.core.connect("openai", base_url, headers)?,
                is_openai,
                token_limit: self.token_limit.unwrap_or(if is_openai {
                    TokenLimitField::MaxCompletionTokens
                } else {
                    TokenLimitField::MaxTokens
                }),
            }),
        })
    }
}
