//! The client: credentials, base URL, HTTP options.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use harness::llm::ModelError;
use harness_provider_http::header::{HeaderMap, HeaderName, HeaderValue};
use harness_provider_http::{ApiKey, HttpOptions, HttpTransport, RetryPolicy};

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
    pub(crate) inner: Arc<ClientInner>,
}

pub(crate) struct ClientInner {
    pub(crate) base_url: String,
    pub(crate) headers: HeaderMap,
    pub(crate) transport: HttpTransport,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("base_url", &self.inner.base_url)
            .field("api_key", &"<redacted>")
            .field("options", self.inner.transport.options())
            .finish()
    }
}

impl Client {
    /// A client configured from the environment: the key from
    /// `ANTHROPIC_API_KEY`, the base URL from `ANTHROPIC_BASE_URL` (else
    /// [`DEFAULT_BASE_URL`]).
    pub fn from_env() -> Result<Self, ModelError> {
        Self::builder().build()
    }

    /// A builder; what it is not told it reads as [`Client::from_env`] does.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// A model of this client, e.g. `"claude-sonnet-4-5"`.
    pub fn completion_model(&self, model: impl Into<String>) -> CompletionModel {
        CompletionModel::new(self.clone(), model.into())
    }

    /// The API root requests go to.
    pub fn base_url(&self) -> &str {
        &self.inner.base_url
    }
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
#[derive(Debug, Clone, Default)]
pub struct ClientBuilder {
    api_key: Option<ApiKey>,
    base_url: Option<String>,
    options: HttpOptions,
}

impl ClientBuilder {
    /// Uses this API key instead of `ANTHROPIC_API_KEY`.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(ApiKey::new(key));
        self
    }

    /// Sends requests to this API root instead of `ANTHROPIC_BASE_URL` or
    /// [`DEFAULT_BASE_URL`] (a proxy, or a mock in tests).
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = Some(url.into());
        self
    }

    /// Time limit for one attempt (for a stream: until its headers arrive).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.options.timeout = timeout;
        self
    }

    /// Time limit for the gap between two chunks of a stream.
    pub fn stream_idle_timeout(mut self, timeout: Duration) -> Self {
        self.options.stream_idle_timeout = timeout;
        self
    }

    /// Attempts in all for a request, the first included (1: no retries).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.options.retry.max_attempts = attempts.max(1);
        self
    }

    /// Replaces the retry policy.
    pub fn retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.options.retry = policy;
        self
    }

    /// Replaces all timeouts and the retry policy.
    pub fn http_options(mut self, options: HttpOptions) -> Self {
        self.options = options;
        self
    }

    /// The client. Fails with [`ModelError::Configuration`] without a key
    /// or with an invalid base URL.
    pub fn build(self) -> Result<Client, ModelError> {
        let base_url = match self.base_url {
            Some(url) => url,
            None => std::env::var("ANTHROPIC_BASE_URL")
                .ok()
                .filter(|url| !url.trim().is_empty())
                .unwrap_or_else(|| DEFAULT_BASE_URL.to_owned()),
        };
        let base_url = HttpTransport::check_base_url(base_url.trim())?;
        let api_key = match self.api_key {
            Some(key) => key,
            None => ApiKey::from_env(&["ANTHROPIC_API_KEY"])?,
        };
        let mut headers = HeaderMap::new();
        headers.insert(
            HeaderName::from_static("x-api-key"),
            api_key.header_value("")?,
        );
        headers.insert(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static(ANTHROPIC_VERSION),
        );
        Ok(Client {
            inner: Arc::new(ClientInner {
                base_url,
                headers,
                transport: HttpTransport::new("anthropic", self.options)?,
            }),
        })
    }
}
