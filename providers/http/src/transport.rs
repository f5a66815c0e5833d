//! JSON and SSE requests with timeouts and retries.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use harness::llm::ModelError;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::Instrument;

use crate::retry::HttpOptions;
use crate::sse::{SseEvents, error_chain, sse_events};
use crate::status::error_from_response;

/// A failed attempt: the error and the wait the provider asked for.
struct Failure {
    error: ModelError,
    retry_after: Option<Duration>,
}

impl From<ModelError> for Failure {
    fn from(error: ModelError) -> Self {
        Self {
            error,
            retry_after: None,
        }
    }
}

/// Sends provider requests: JSON in, JSON or server-sent events out, with
/// the timeouts and retries of its [`HttpOptions`]. Cloning shares the
/// connection pool.
///
/// Each request runs in a `model_request` tracing span with the fields
/// `provider`, `model`, `streaming` and `attempt`; headers (and so keys) are
/// never recorded.
#[derive(Clone)]
pub struct HttpTransport {
    client: reqwest::Client,
    options: HttpOptions,
    provider: &'static str,
}

impl fmt::Debug for HttpTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpTransport")
            .field("provider", &self.provider)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// `base` and `path` joined with exactly one slash.
///
/// ```
/// assert_eq!(
///     harness_provider_http::endpoint("http://localhost:11434/v1/", "/chat/completions"),
///     "http://localhost:11434/v1/chat/completions"
/// );
/// ```
pub fn endpoint(base: &str, path: &str) -> String {
    format!(
        "{}/{}",
        base.trim_end_matches('/'),
        path.trim_start_matches('/')
    )
}

impl HttpTransport {
    /// A transport for `provider` (a name for traces, e.g. `"openai"`).
    pub fn new(provider: &'static str, options: HttpOptions) -> Result<Self, ModelError> {
        install_crypto_provider();
        let client = reqwest::Client::builder()
            .connect_timeout(options.connect_timeout)
            .build()
            .map_err(|e| ModelError::Configuration {
                message: format!("cannot build the HTTP client: {}", error_chain(&e)),
            })?;
        Ok(Self {
            client,
            options,
            provider,
        })
    }

    /// The timeouts and retry policy.
    pub fn options(&self) -> &HttpOptions {
        &self.options
    }

    /// Checks that `url` is an absolute http(s) URL; returns it without a
    /// trailing slash.
    pub fn check_base_url(url: &str) -> Result<String, ModelError> {
        let parsed = reqwest::Url::parse(url).map_err(|e| ModelError::Configuration {
            message: format!("the base URL {url:?} is not a valid URL: {e}"),
        })?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(ModelError::Configuration {
                message: format!("the base URL {url:?} must start with http:// or https://"),
            });
        }
        Ok(url.trim_end_matches('/').to_owned())
    }

    /// POSTs `body` as JSON to `url` and parses the JSON answer as `T`,
    /// retrying retryable failures.
    pub async fn post_json<T: DeserializeOwned>(
        &self,
        model: &str,
        url: &str,
        headers: &HeaderMap,
        body: &impl Serialize,
    ) -> Result<T, ModelError> {
        let body = serialize(body)?;
        let bytes = self
            .with_retries(model, false, || async {
                let attempt = async {
                    let response = self.send(url, headers, body.clone(), false).await?;
                    let status = response.status().as_u16();
                    let response_headers = response.headers().clone();
                    let bytes = response
                        .bytes()
                        .await
                        .map_err(|e| self.transport_error(&e))?;
                    if !(200..300).contains(&status) {
                        let text = String::from_utf8_lossy(&bytes);
                        let (error, retry_after) = error_from_response(
                            status,
                            &response_headers,
                            &text,
                            self.options.timeout,
                        );
                        return Err(Failure { error, retry_after });
                    }
                    Ok(bytes)
                };
                self.within_timeout(attempt).await
            })
            .await?;
        serde_json::from_slice(&bytes).map_err(|e| {
            ModelError::malformed(format!(
                "the response is not the expected JSON ({e}); it begins {:?}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
            ))
        })
    }

    /// POSTs `body` as JSON to `url` and returns the server-sent events of a
    /// successful answer. Failures before the first byte of the body are
    /// retried; a stream that stalls for the idle timeout ends with
    /// [`ModelError::Timeout`].
    pub async fn post_sse(
        &self,
        model: &str,
        url: &str,
        headers: &HeaderMap,
        body: &impl Serialize,
    ) -> Result<SseEvents, ModelError> {
        let body = serialize(body)?;
        let response = self
            .with_retries(model, true, || async {
                let attempt = async {
                    let response = self.send(url, headers, body.clone(), true).await?;
                    let status = response.status().as_u16();
                    if (200..300).contains(&status) {
                        return Ok(response);
                    }
                    let response_headers = response.headers().clone();
                    let text = response.text().await.unwrap_or_default();
                    let (error, retry_after) =
                        error_from_response(status, &response_headers, &text, self.options.timeout);
                    Err(Failure { error, retry_after })
                };
                self.within_timeout(attempt).await
            })
            .await?;
        Ok(sse_events(response, self.options.stream_idle_timeout))
    }

    async fn send(
        &self,
        url: &str,
        headers: &HeaderMap,
        body: Vec<u8>,
        streaming: bool,
    ) -> Result<reqwest::Response, Failure> {
        let accept = if streaming {
            "text/event-stream"
        } else {
            "application/json"
        };
        self.client
            .post(url)
            .headers(headers.clone())
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .header(ACCEPT, HeaderValue::from_static(accept))
            .body(body)
            .send()
            .await
            .map_err(|e| Failure::from(self.transport_error(&e)))
    }

    async fn within_timeout<T>(
        &self,
        attempt: impl Future<Output = Result<T, Failure>>,
    ) -> Result<T, Failure> {
        tokio::time::timeout(self.options.timeout, attempt)
            .await
            .unwrap_or_else(|_| {
                Err(Failure::from(ModelError::Timeout {
                    after: self.options.timeout,
                }))
            })
    }

    fn transport_error(&self, error: &reqwest::Error) -> ModelError {
        if error.is_timeout() {
            ModelError::Timeout {
                after: self.options.timeout,
            }
        } else {
            ModelError::Transport {
                message: error_chain(error),
            }
        }
    }

    async fn with_retries<T, F, Fut>(
        &self,
        model: &str,
        streaming: bool,
        mut attempt: F,
    ) -> Result<T, ModelError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Failure>>,
    {
        let span = tracing::info_span!(
            "model_request",
            provider = self.provider,
            model,
            streaming,
            attempt = tracing::field::Empty,
        );
        async {
            let mut number = 0u32;
            loop {
                number += 1;
                tracing::Span::current().record("attempt", number);
                let Failure { error, retry_after } = match attempt().await {
                    Ok(value) => return Ok(value),
                    Err(failure) => failure,
                };
                match self
                    .options
                    .retry
                    .delay_before_retry(number, &error, retry_after)
                {
                    Some(delay) => {
                        tracing::warn!(%error, delay_ms = delay.as_millis() as u64, "model request failed; retrying");
                        tokio::time::sleep(delay).await;
                    }
                    None => {
                        tracing::debug!(%error, "model request failed");
                        return Err(error);
                    }
                }
            }
        }
        .instrument(span)
        .await
    }
}

fn serialize(body: &impl Serialize) -> Result<Vec<u8>, ModelError> {
    serde_json::to_vec(body).map_err(|e| ModelError::InvalidRequest {
        status: None,
        message: format!("the request cannot be serialized as JSON: {e}"),
    })
}

/// reqwest is built without a default TLS crypto provider (the default would
/// be aws-lc, which needs cmake); install ring unless the application
/// installed one.
fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race with another thread is fine: a provider is installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}
