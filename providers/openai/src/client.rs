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
    /// OpenAI itself wants `max_completion_tokens`; compatible servers
    /// mostly know only `max_tokens`.
    pub(crate) legacy_max_tokens: bool,
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
                legacy_max_tokens: !is_openai,
            }),
        })
    }
}
