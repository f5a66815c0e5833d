//! The client: credentials, base URL, HTTP options.

use std::sync::Arc;

use harness::llm::ModelError;
use harness_provider_http::Connection;
use harness_provider_http::header::{HeaderMap, HeaderName, HeaderValue};

use crate::completion::CompletionModel;

/// Anthropic's API root, used when neither the builder nor
/// `ANTHROPIC_BASE_URL` gives another.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// The `anthropic-version` header sent with every request.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// A connection to the Anthropic API. Cheap to clone; make models with
/// [`Client::completion_model`].
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Connection>,
}

/// Configures a [`Client`]. The key and base URL default to the environment
/// (`ANTHROPIC_API_KEY`, `ANTHROPIC_BASE_URL`).
///
/// ```
/// let client = harness_anthropic::Client::builder()
///     .api_key("sk-ant-test")
///     .base_url("http://127.0.0.1:8080")
///     .max_attempts(5)
///     .build()?;
/// assert!(!format!("{client:?}").contains("sk-ant-test"));
/// # Ok::<(), harness::llm::ModelError>(())
/// ```
#[derive(Clone, Default)]
pub struct ClientBuilder {
    core: harness_provider_http::ClientBuilder,
}

harness_provider_http::provider_client! {
    Client { inner },
    ClientBuilder { core },
    /// A client configured from the environment: the key from
    /// `ANTHROPIC_API_KEY`, the base URL from `ANTHROPIC_BASE_URL` (else
    /// [`DEFAULT_BASE_URL`]).
    from_env,
    /// A model of this client, e.g. `"claude-sonnet-4-5"`.
    completion_model -> CompletionModel,
    /// Uses this API key instead of `ANTHROPIC_API_KEY`.
    api_key,
    /// Sends requests to this API root instead of `ANTHROPIC_BASE_URL` or
    /// [`DEFAULT_BASE_URL`] (a proxy, or a mock in tests).
    base_url,
}

impl ClientBuilder {
    /// The client. Fails with [`ModelError::Configuration`] without a key
    /// or with an invalid base URL.
    pub fn build(self) -> Result<Client, ModelError> {
        let base_url = self
            .core
            .resolve_base_url(Some("ANTHROPIC_BASE_URL"), DEFAULT_BASE_URL)?;
        let api_key = self.core.api_key_or_env(&["ANTHROPIC_API_KEY"])?;
        let mut headers = HeaderMap::new();
        headers.insert(
            HeaderName::from_static("x-api-key"),
            api_key.header_value("")?,
        );
        headers.insert(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static(ANTHROPIC_VERSION),
        );
        let connection = self.core.connect("anthropic", base_url, headers)?;
        Ok(Client {
            inner: Arc::new(connection),
        })
    }
}
