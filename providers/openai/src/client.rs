//! The client: credentials, base URL, HTTP options.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use harness::llm::ModelError;
use harness_provider_http::header::{AUTHORIZATION, HeaderMap};
use harness_provider_http::{ApiKey, HttpOptions, HttpTransport, RetryPolicy};

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
    pub(crate) base_url: String,
    pub(crate) headers: HeaderMap,
    pub(crate) transport: HttpTransport,
    /// OpenAI itself wants `max_completion_tokens`; compatible servers
    /// mostly know only `max_tokens`.
    pub(crate) legacy_max_tokens: bool,
    has_key: bool,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("base_url", &self.inner.base_url)
            .field(
                "api_key",
                &if self.inner.has_key {
                    "<redacted>"
                } else {
                    "<none>"
                },
            )
            .field("options", self.inner.transport.options())
            .finish()
    }
}

impl Client {
    /// A client configured from the environment: the key from
    /// `OPENAI_API_KEY`, the base URL from `OPENAI_BASE_URL` (else
    /// [`DEFAULT_BASE_URL`]). A key is required only for OpenAI's own URL.
    pub fn from_env() -> Result<Self, ModelError> {
        Self::builder().build()
    }

    /// A builder; what it is not told it reads as [`Client::from_env`] does.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// A model of this client, e.g. `"gpt-4o-mini"`.
    pub fn completion_model(&self, model: impl Into<String>) -> CompletionModel {
        CompletionModel::new(self.clone(), model.into())
    }

    /// The API root requests go to.
    pub fn base_url(&self) -> &str {
        &self.inner.base_url
    }
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
#[derive(Debug, Clone, Default)]
pub struct ClientBuilder {
    api_key: Option<ApiKey>,
    base_url: Option<String>,
    options: HttpOptions,
}

impl ClientBuilder {
    /// Uses this API key instead of `OPENAI_API_KEY`.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(ApiKey::new(key));
        self
    }

    /// Sends requests to this API root (e.g. `http://localhost:11434/v1`)
    /// instead of `OPENAI_BASE_URL` or [`DEFAULT_BASE_URL`].
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

    /// The client. Fails with [`ModelError::Configuration`] for an invalid
    /// base URL, or a missing key when talking to OpenAI itself.
    pub fn build(self) -> Result<Client, ModelError> {
        let base_url = match self.base_url {
            Some(url) => url,
            None => std::env::var("OPENAI_BASE_URL")
                .ok()
                .filter(|url| !url.trim().is_empty())
                .unwrap_or_else(|| DEFAULT_BASE_URL.to_owned()),
        };
        let base_url = HttpTransport::check_base_url(base_url.trim())?;
        let is_openai = base_url.starts_with("https://api.openai.com");
        let api_key = match self.api_key {
            Some(key) => Some(key),
            None => match ApiKey::from_env(&["OPENAI_API_KEY"]) {
                Ok(key) => Some(key),
                Err(error) if is_openai => return Err(error),
                // Local OpenAI-compatible servers usually need no key.
                Err(_) => None,
            },
        };
        let mut headers = HeaderMap::new();
        if let Some(key) = &api_key {
            headers.insert(AUTHORIZATION, key.header_value("Bearer ")?);
        }
        Ok(Client {
            inner: Arc::new(ClientInner {
                base_url,
                headers,
                transport: HttpTransport::new("openai", self.options)?,
                legacy_max_tokens: !is_openai,
                has_key: api_key.is_some(),
            }),
        })
    }
}
