//! The client: credentials, base URL, HTTP options.

use std::sync::Arc;

use harness::llm::ModelError;
use harness_provider_http::Connection;
use harness_provider_http::header::{HeaderMap, HeaderName};

use crate::completion::CompletionModel;

/// The Gemini API root (with its version), used unless the builder gives
/// another.
pub const DEFAULT_BASE_URL: &str = "https://generativelanguage.googleapis.com/v1beta";

/// A connection to the Gemini API. Cheap to clone; make models with
/// [`Client::completion_model`].
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Connection>,
}

/// Configures a [`Client`]. The key defaults to the environment
/// (`GEMINI_API_KEY`, else `GOOGLE_API_KEY`).
///
/// ```
/// let client = harness_gemini::Client::builder()
///     .api_key("AIza-test")
///     .base_url("http://127.0.0.1:8080")
///     .max_attempts(5)
///     .build()?;
/// assert!(!format!("{client:?}").contains("AIza-test"));
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
    /// `GEMINI_API_KEY`, else `GOOGLE_API_KEY`; the base URL is
    /// [`DEFAULT_BASE_URL`].
    from_env,
    /// A model of this client, e.g. `"gemini-2.5-flash"`.
    completion_model -> CompletionModel,
    /// Uses this API key instead of `GEMINI_API_KEY` / `GOOGLE_API_KEY`.
    api_key,
    /// Sends requests to this API root, version included, instead of
    /// [`DEFAULT_BASE_URL`] (a proxy, or a mock in tests).
    base_url,
}

impl ClientBuilder {
    /// The client. Fails with [`ModelError::Configuration`] without a key
    /// or with an invalid base URL.
    pub fn build(self) -> Result<Client, ModelError> {
        // No environment variable: the root carries the API version.
        let base_url = self.core.resolve_base_url(None, DEFAULT_BASE_URL)?;
        let api_key = self
            .core
            .api_key_or_env(&["GEMINI_API_KEY", "GOOGLE_API_KEY"])?;
        let mut headers = HeaderMap::new();
        headers.insert(
            HeaderName::from_static("x-goog-api-key"),
            api_key.header_value("")?,
        );
        let connection = self.core.connect("gemini", base_url, headers)?;
        Ok(Client {
            inner: Arc::new(connection),
        })
    }
}
