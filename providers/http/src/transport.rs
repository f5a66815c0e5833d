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
use crate::status::{error_from_response, excerpt};

/// How much of an unparsable answer is decoded to be quoted: the 200
/// characters shown and a margin in which a secret that straddles them is
/// found whole.
const QUOTE_BYTES: usize = 200 * 4 + (64 << 10);

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
/// `provider`, `model`, `streaming` and `attempt` (how many attempts were
/// made, once the request is over); each failed attempt is an event in it
/// with its own `attempt` number, the error and, before a retry, the wait
/// (`delay_ms`). Headers (and so keys) are never recorded.
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

/// `base` and `path` joined with exactly one slash; a query of `base` (an
/// `?api-version=` some deployments require) goes after the path, joined
/// with the path's own.
///
/// ```
/// use harness_provider_http::endpoint;
/// assert_eq!(
///     endpoint("http://localhost:11434/v1/", "/chat/completions"),
///     "http://localhost:11434/v1/chat/completions"
/// );
/// assert_eq!(
///     endpoint("https://example.net/v1?api-version=2", "models/m:stream?alt=sse"),
///     "https://example.net/v1/models/m:stream?alt=sse&api-version=2"
/// );
/// ```
pub fn endpoint(base: &str, path: &str) -> String {
    let (base, base_query) = match base.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (base, None),
    };
    let mut url = format!(
        "{}/{}",
        base.trim_end_matches('/'),
        path.trim_start_matches('/')
    );
    if let Some(query) = base_query.filter(|q| !q.is_empty()) {
        url.push(if url.contains('?') { '&' } else { '?' });
        url.push_str(query);
    }
    url
}

/// `url` as it may be shown (an error, a `Debug`): a user name and
/// password in it, and the values of its query, replaced by `redacted`,
/// since a key is sometimes passed there (`https://user:key@…`, `?key=…`).
/// A text that is not a URL is shown as `<not a URL>`.
///
/// ```
/// use harness_provider_http::shown_url;
/// assert_eq!(
///     shown_url("https://me:sk-1@example.net/v1?key=sk-1&api-version=2"),
///     "https://redacted:redacted@example.net/v1?key=redacted&api-version=redacted"
/// );
/// assert_eq!(shown_url("http://localhost:8080/v1"), "http://localhost:8080/v1");
/// ```
pub fn shown_url(url: &str) -> String {
    let Ok(mut parsed) = reqwest::Url::parse(url) else {
        return "<not a URL>".to_owned();
    };
    if !parsed.username().is_empty() {
        let _ = parsed.set_username("redacted");
    }
    if parsed.password().is_some() {
        let _ = parsed.set_password(Some("redacted"));
    }
    if parsed.query().is_some() {
        let names: Vec<String> = parsed.query_pairs().map(|(k, _)| k.into_owned()).collect();
        let mut pairs = parsed.query_pairs_mut();
        pairs.clear();
        for name in &names {
            pairs.append_pair(name, "redacted");
        }
    }
    parsed.to_string()
}

impl HttpTransport {
    /// A transport for `provider` (a name for traces, e.g. `"openai"`).
    pub fn new(provider: &'static str, options: HttpOptions) -> Result<Self, ModelError> {
        options.check()?;
        install_crypto_provider();
        let client = reqwest::Client::builder()
            .connect_timeout(options.connect_timeout)
            .redirect(same_origin_redirects())
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
        let shown = shown_url(url);
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(ModelError::Configuration {
                message: format!("the base URL {shown:?} must start with http:// or https://"),
            });
        }
        if parsed.fragment().is_some() {
            return Err(ModelError::Configuration {
                message: format!(
                    "the base URL {shown:?} has a fragment (`#…`), which is never sent to the \
                     server: leave it out"
                ),
            });
        }
        // Without a trailing slash on the path; a query stays as written.
        Ok(match url.split_once('?') {
            Some((base, query)) => format!("{}?{query}", base.trim_end_matches('/')),
            None => url.trim_end_matches('/').to_owned(),
        })
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
                    let ok = (200..300).contains(&status);
                    let bytes = self.read_body(response, ok).await?;
                    if !ok {
                        let text = String::from_utf8_lossy(&bytes);
                        let (error, retry_after) =
                            error_from_response(status, &response_headers, &text);
                        let error = naming_a_missing_url(error, url);
                        return Err(Failure { error, retry_after });
                    }
                    Ok(bytes)
                };
                self.within_timeout(attempt).await
            })
            .await?;
        serde_json::from_slice(&bytes).map_err(|e| {
            // Only the start is quoted, and so only the start is decoded;
            // `excerpt` redacts it before cutting it to 200 characters.
            let head = &bytes[..bytes.len().min(QUOTE_BYTES)];
            ModelError::malformed(format!(
                "the response is not the expected JSON ({e}); it begins {:?}",
                excerpt(&String::from_utf8_lossy(head), 200)
            ))
            .redacted()
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
                        if is_event_stream(&response) {
                            return Ok(response);
                        }
                        // An answer that is not a stream (a server that
                        // ignores `stream: true`, a proxy's page): said as
                        // such, not as a stream cut off.
                        let kind = response
                            .headers()
                            .get(CONTENT_TYPE)
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("no content type")
                            .to_owned();
                        let bytes = self.read_body(response, false).await?;
                        let head = &bytes[..bytes.len().min(QUOTE_BYTES)];
                        return Err(Failure::from(
                            ModelError::malformed(format!(
                                "the response to a streaming request is not an event stream \
                                 ({kind}, not text/event-stream); it begins {:?}",
                                excerpt(&String::from_utf8_lossy(head), 200)
                            ))
                            .redacted(),
                        ));
                    }
                    let response_headers = response.headers().clone();
                    let text = match self.read_body(response, false).await {
                        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
                        Err(_) => String::new(),
                    };
                    let (error, retry_after) =
                        error_from_response(status, &response_headers, &text);
                    let error = naming_a_missing_url(error, url);
                    Err(Failure { error, retry_after })
                };
                self.within_timeout(attempt).await
            })
            .await?;
        Ok(sse_events(response, &self.options, model))
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

    /// Reads a body up to [`HttpOptions::max_body_bytes`]: an answer over
    /// it is [`ModelError::ResponseTooLarge`] (told by its length when it
    /// has one, before reading); an error body (`answer` false) is read up
    /// to 64 KiB, the rest dropped.
    async fn read_body(
        &self,
        mut response: reqwest::Response,
        answer: bool,
    ) -> Result<Vec<u8>, Failure> {
        const ERROR_BODY_BYTES: u64 = 64 << 10;
        let limit = if answer {
            self.options.max_body_bytes
        } else {
            self.options.max_body_bytes.min(ERROR_BODY_BYTES)
        };
        let too_large = || {
            Failure::from(ModelError::ResponseTooLarge {
                what: format!("{} response body", self.provider),
                limit,
            })
        };
        if answer && response.content_length().is_some_and(|n| n > limit) {
            return Err(too_large());
        }
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| self.transport_error(&e))?
        {
            let room = usize::try_from(limit)
                .unwrap_or(usize::MAX)
                .saturating_sub(body.len());
            if chunk.len() > room {
                if !answer {
                    body.extend_from_slice(&chunk[..room]);
                    break;
                }
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    async fn within_timeout<T>(
        &self,
        attempt: impl Future<Output = Result<T, Failure>>,
    ) -> Result<T, Failure> {
        tokio::time::timeout(self.options.timeout, attempt)
            .await
            .unwrap_or_else(|_| Err(Failure::from(ModelError::timeout(self.options.timeout))))
    }

    fn transport_error(&self, error: &reqwest::Error) -> ModelError {
        if error.is_timeout() {
            ModelError::timeout(self.options.timeout)
        } else {
            // reqwest names the URL: shown without what may be a key.
            let mut message = error_chain(error);
            if let Some(url) = error.url() {
                message = message.replace(url.as_str(), &shown_url(url.as_str()));
            }
            ModelError::Transport { message }
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
            // Recorded once, when the request is over: a field recorded
            // again is exported again (OpenTelemetry keeps every value, as
            // attributes of one name), not replaced.
            let made = |number: u32| {
                tracing::Span::current().record("attempt", number);
            };
            let mut number = 0u32;
            loop {
                number += 1;
                let Failure { error, retry_after } = match attempt().await {
                    Ok(value) => {
                        made(number);
                        return Ok(value);
                    }
                    Err(failure) => failure,
                };
                // Before it is logged or returned: whatever built it, a
                // server's text in it may quote a secret.
                let error = error.for_model(model).redacted();
                match self
                    .options
                    .retry
                    .delay_before_retry(number, &error, retry_after)
                {
                    Some(delay) => {
                        tracing::warn!(%error, attempt = number, delay_ms = delay.as_millis() as u64, "model request failed; retrying");
                        tokio::time::sleep(delay).await;
                    }
                    None => {
                        tracing::debug!(%error, attempt = number, "model request failed");
                        made(number);
                        return Err(error);
                    }
                }
            }
        }
        .instrument(span)
        .await
    }
}

/// The request as JSON bytes, with every secret the process holds redacted
/// from its strings (see [`harness::secrets`]): a tool result or a user
/// message that quotes a key does not send it to the provider. The bytes
/// are searched once; only a body that contains a secret is parsed,
/// redacted string by string and written again.
fn serialize(body: &impl Serialize) -> Result<Vec<u8>, ModelError> {
    let cannot = |e: serde_json::Error| ModelError::InvalidRequest {
        status: None,
        message: format!("the request cannot be serialized as JSON: {e}"),
    };
    let bytes = serde_json::to_vec(body).map_err(cannot)?;
    // serde_json writes UTF-8.
    let has_secret = std::str::from_utf8(&bytes).is_ok_and(harness::secrets::contains_secret);
    if !has_secret {
        return Ok(bytes);
    }
    let mut value: serde_json::Value = serde_json::from_slice(&bytes).map_err(cannot)?;
    harness::secrets::redact_json(&mut value);
    serde_json::to_vec(&value).map_err(cannot)
}

/// The most redirects followed for one request.
const MAX_REDIRECTS: usize = 5;

/// Redirects within the origin the request went to (same scheme, host and
/// port) are followed, at most [`MAX_REDIRECTS`]; any other is not, and its
/// 3xx answer becomes an error ([`error_from_response`]). reqwest's default
/// follows a redirect anywhere, stripping only `Authorization` and cookies:
/// Anthropic's `x-api-key` and Gemini's `x-goog-api-key` would go to the
/// other host (or over plain http) with the request body.
fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let same_origin = attempt
            .previous()
            .first()
            .is_some_and(|first| first.origin() == attempt.url().origin());
        if same_origin && attempt.previous().len() <= MAX_REDIRECTS {
            attempt.follow()
        } else {
            attempt.stop()
        }
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

/// Whether `response` says it is server-sent events, or says nothing of
/// its type (some servers send a stream without one).
fn is_event_stream(response: &reqwest::Response) -> bool {
    match response.headers().get(CONTENT_TYPE) {
        None => true,
        Some(value) => value.to_str().is_ok_and(|v| {
            v.split(';')
                .next()
                .is_some_and(|t| t.trim().eq_ignore_ascii_case("text/event-stream"))
        }),
    }
}

/// `error`, and when it is the server's 404 for the URL itself, the URL
/// named (as [`shown_url`] shows it): a wrong base URL is the usual cause,
/// and the server's own text ("Not Found") does not say which was asked.
fn naming_a_missing_url(error: ModelError, url: &str) -> ModelError {
    match error {
        ModelError::InvalidRequest {
            status: Some(404),
            message,
        } => ModelError::InvalidRequest {
            status: Some(404),
            message: format!(
                "{message} (nothing at POST {}: check the base URL and the model's name)",
                shown_url(url)
            ),
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    //! The size and time limits against a real HTTP server on loopback
    //! that answers as a hostile or broken provider would.

    use super::*;
    use crate::retry::HttpRetryPolicy;
    use futures::StreamExt;
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    type Handler = Arc<dyn Fn(TcpStream) -> futures::future::BoxFuture<'static, ()> + Send + Sync>;

    /// Serves every connection with `handler`, once the request is read.
    async fn serve(handler: Handler) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let handler = Arc::clone(&handler);
                tokio::spawn(async move {
                    if read_request(&mut socket).await.is_some() {
                        handler(socket).await;
                    }
                });
            }
        });
        format!("http://{addr}")
    }

    /// Reads one request from `socket`: its headers, then as many body
    /// bytes as they announce. Its head (request line and headers), or
    /// `None` if the connection ended first.
    async fn read_request(socket: &mut TcpStream) -> Option<String> {
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        let (head, body_len) = loop {
            let n = socket.read(&mut buf).await.unwrap_or(0);
            if n == 0 {
                return None;
            }
            seen.extend_from_slice(&buf[..n]);
            if let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&seen[..end]).into_owned();
                let len: usize = head
                    .to_lowercase()
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:").map(str::to_owned))
                    .map_or(0, |v| v.trim().parse().unwrap_or(0));
                break (head, end + 4 + len);
            }
        };
        while seen.len() < body_len {
            let n = socket.read(&mut buf).await.unwrap_or(0);
            if n == 0 {
                return None;
            }
            seen.extend_from_slice(&buf[..n]);
        }
        Some(head)
    }

    /// A handler writing `head` then each of `chunks` (HTTP chunked).
    fn chunked(status: &'static str, content_type: &'static str, chunks: Vec<Vec<u8>>) -> Handler {
        let chunks = Arc::new(chunks);
        Arc::new(move |mut socket| {
            let chunks = Arc::clone(&chunks);
            Box::pin(async move {
                let head = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ntransfer-encoding: chunked\r\n\r\n"
                );
                if socket.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                for chunk in chunks.iter() {
                    let framed =
                        [format!("{:x}\r\n", chunk.len()).as_bytes(), chunk, b"\r\n"].concat();
                    if socket.write_all(&framed).await.is_err() {
                        return;
                    }
                }
                let _ = socket.write_all(b"0\r\n\r\n").await;
            })
        })
    }

    fn transport(options: HttpOptions) -> HttpTransport {
        HttpTransport::new(
            "test",
            HttpOptions {
                retry: HttpRetryPolicy {
                    max_attempts: 1,
                    ..HttpRetryPolicy::default()
                },
                ..options
            },
        )
        .unwrap()
    }

    fn small(limit: u64) -> HttpOptions {
        HttpOptions {
            max_body_bytes: limit,
            max_event_bytes: limit,
            ..HttpOptions::default()
        }
    }

    async fn post_json(base: &str, options: HttpOptions) -> Result<serde_json::Value, ModelError> {
        transport(options)
            .post_json(
                "m",
                &format!("{base}/x"),
                &HeaderMap::new(),
                &serde_json::json!({}),
            )
            .await
    }

    /// Every event of a stream, or the error that ended it.
    async fn post_sse(base: &str, options: HttpOptions) -> (usize, Option<ModelError>) {
        let mut events = transport(options)
            .post_sse(
                "m",
                &format!("{base}/x"),
                &HeaderMap::new(),
                &serde_json::json!({}),
            )
            .await
            .unwrap();
        let mut n = 0;
        while let Some(event) = events.next().await {
            match event {
                Ok(_) => n += 1,
                Err(e) => return (n, Some(e)),
            }
        }
        (n, None)
    }

    fn json_of(len: usize) -> Vec<u8> {
        // `{"a":"xxx…"}` of exactly `len` bytes.
        format!("{{\"a\":\"{}\"}}", "x".repeat(len - 8)).into_bytes()
    }

    #[tokio::test]
    async fn answer_bodies_over_the_limit_are_refused_however_they_come() {
        let over = |e: &ModelError| matches!(e, ModelError::ResponseTooLarge { limit: 1024, .. });
        // With a length: refused before the body is read.
        let sized: Handler = Arc::new(|mut socket: TcpStream| {
            Box::pin(async move {
                let body = json_of(2000);
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                    body.len()
                );
                let _ = socket.write_all(head.as_bytes()).await;
                let _ = socket.write_all(&body).await;
            })
        });
        let err = post_json(&serve(sized).await, small(1024))
            .await
            .unwrap_err();
        assert!(over(&err), "{err}");
        // Without a length: in one chunk, in many small ones, far over.
        for chunks in [
            vec![json_of(1025)],
            json_of(5000).chunks(100).map(<[u8]>::to_vec).collect(),
            vec![vec![b' '; 1 << 20]; 8],
        ] {
            let base = serve(chunked("200 OK", "application/json", chunks)).await;
            let err = post_json(&base, small(1024)).await.unwrap_err();
            assert!(over(&err), "{err}");
            assert!(err.to_string().contains("1024 bytes"), "{err}");
        }
        // At the limit exactly: read.
        let base = serve(chunked("200 OK", "application/json", vec![json_of(1024)])).await;
        assert!(post_json(&base, small(1024)).await.is_ok());
    }

    #[tokio::test]
    async fn an_error_body_is_read_only_in_part() {
        let huge = vec![b'e'; 4 << 20];
        let base = serve(chunked(
            "500 Internal Server Error",
            "text/plain",
            vec![huge],
        ))
        .await;
        let err = post_json(&base, HttpOptions::default()).await.unwrap_err();
        let ModelError::Overloaded { message, .. } = &err else {
            panic!("expected Overloaded, got {err:?}");
        };
        assert!(message.len() <= 64 << 10, "{} bytes kept", message.len());
    }

    #[tokio::test]
    async fn stream_lines_and_events_over_the_limit_end_the_stream() {
        let event = |data: usize| format!("data: {}\n\n", "d".repeat(data)).into_bytes();
        for chunks in [
            // One endless line.
            vec![b"data: ".to_vec(), vec![b'x'; 5000]],
            // A long line, ended.
            vec![event(2000)],
            // A long line cut across chunks, CRLF.
            vec![
                b"data: ".to_vec(),
                vec![b'y'; 700],
                vec![b'y'; 700],
                b"\r\n\r\n".to_vec(),
            ],
            // Many short data lines, no blank line: one growing event.
            vec![b"data: abcdefghij\n".repeat(300)],
        ] {
            let base = serve(chunked("200 OK", "text/event-stream", chunks)).await;
            let (_, error) = post_sse(&base, small(1024)).await;
            assert!(
                matches!(
                    error,
                    Some(ModelError::ResponseTooLarge { limit: 1024, .. })
                ),
                "{error:?}"
            );
        }
        // Many events under the limit, LF and CRLF: all read.
        let mut many: Vec<Vec<u8>> = (0..200).map(|_| event(900)).collect();
        many.push(b"data: crlf\r\n\r\ndata: cr\r\r".to_vec());
        let base = serve(chunked("200 OK", "text/event-stream", many)).await;
        // The longest times there are: no overflow.
        let unbounded = HttpOptions {
            stream_deadline: Duration::MAX,
            stream_idle_timeout: Duration::MAX,
            ..small(1024)
        };
        let (n, error) = post_sse(&base, unbounded).await;
        assert!(error.is_none(), "{error:?}");
        assert_eq!(n, 202);
    }

    #[tokio::test]
    async fn a_stream_that_never_ends_or_stalls_is_cut_off() {
        let trickle: Handler = Arc::new(|mut socket: TcpStream| {
            Box::pin(async move {
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
                let _ = socket.write_all(head.as_bytes()).await;
                let event = b"data: more\n\n";
                let framed = [format!("{:x}\r\n", event.len()).as_bytes(), event, b"\r\n"].concat();
                while socket.write_all(&framed).await.is_ok() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        });
        let base = serve(trickle).await;
        // Long enough that events arrive first on a loaded machine too.
        let deadline = Duration::from_secs(2);
        let (n, error) = post_sse(
            &base,
            HttpOptions {
                stream_deadline: deadline,
                ..HttpOptions::default()
            },
        )
        .await;
        assert!(n > 0, "events arrived before the deadline");
        assert!(
            matches!(&error, Some(ModelError::Timeout { after, model }) if *after == deadline && model.as_deref() == Some("m")),
            "{error:?}"
        );

        let stall: Handler = Arc::new(|mut socket: TcpStream| {
            Box::pin(async move {
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
                let _ = socket.write_all(head.as_bytes()).await;
                let event = b"data: one\n\n";
                let framed = [format!("{:x}\r\n", event.len()).as_bytes(), event, b"\r\n"].concat();
                let _ = socket.write_all(&framed).await;
                tokio::time::sleep(Duration::from_secs(60)).await;
            })
        });
        let base = serve(stall).await;
        let idle = Duration::from_secs(1);
        let (n, error) = post_sse(
            &base,
            HttpOptions {
                stream_idle_timeout: idle,
                ..HttpOptions::default()
            },
        )
        .await;
        assert_eq!(n, 1);
        assert!(
            matches!(&error, Some(ModelError::Timeout { after, model }) if *after == idle && model.as_deref() == Some("m")),
            "{error:?}"
        );
    }

    #[tokio::test]
    async fn the_largest_limits_mean_no_limit_and_never_panic() {
        let unlimited = HttpOptions {
            timeout: Duration::MAX,
            stream_idle_timeout: Duration::MAX,
            stream_deadline: Duration::MAX,
            connect_timeout: Duration::MAX,
            max_body_bytes: u64::MAX,
            max_event_bytes: u64::MAX,
            max_stream_bytes: u64::MAX,
            retry: HttpRetryPolicy {
                max_attempts: u32::MAX,
                initial_backoff: Duration::MAX,
                max_backoff: Duration::MAX,
                max_retry_after: Duration::MAX,
            },
        };
        assert_eq!(unlimited.check(), Ok(()));
        let events = vec![b"data: {\"a\": 1}\n\n".to_vec(); 3];
        let base = serve(chunked("200 OK", "text/event-stream", events)).await;
        let (n, error) = post_sse(&base, unlimited.clone()).await;
        assert!(error.is_none(), "{error:?}");
        assert_eq!(n, 3);
        let body = vec![b"{\"answer\": 42}".to_vec()];
        let base = serve(chunked("200 OK", "application/json", body)).await;
        let answer = post_json(&base, unlimited).await.unwrap();
        assert_eq!(answer["answer"], 42);
    }

    #[test]
    fn zero_limits_are_refused_by_name() {
        for (options, name) in [
            (
                HttpOptions {
                    timeout: Duration::ZERO,
                    ..HttpOptions::default()
                },
                "timeout",
            ),
            (
                HttpOptions {
                    stream_deadline: Duration::ZERO,
                    ..HttpOptions::default()
                },
                "stream_deadline",
            ),
            (
                HttpOptions {
                    connect_timeout: Duration::ZERO,
                    ..HttpOptions::default()
                },
                "connect_timeout",
            ),
            (
                HttpOptions {
                    max_body_bytes: 0,
                    ..HttpOptions::default()
                },
                "max_body_bytes",
            ),
            (
                HttpOptions {
                    max_event_bytes: 0,
                    ..HttpOptions::default()
                },
                "max_event_bytes",
            ),
            (
                HttpOptions {
                    max_stream_bytes: 0,
                    ..HttpOptions::default()
                },
                "max_stream_bytes",
            ),
        ] {
            let err = HttpTransport::new("test", options).unwrap_err();
            assert!(
                matches!(&err, ModelError::Configuration { message } if message.contains(name)),
                "{name}: {err}"
            );
        }
    }

    /// A server that answers each request by what `answer` makes of its
    /// head (request line and headers), recording every head it reads.
    async fn serve_heads(
        answer: impl Fn(&str) -> String + Send + Sync + 'static,
    ) -> (String, Arc<std::sync::Mutex<Vec<String>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let answer = Arc::new(answer);
        let log = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let (answer, log) = (Arc::clone(&answer), Arc::clone(&log));
                tokio::spawn(async move {
                    while let Some(head) = read_request(&mut socket).await {
                        log.lock().unwrap().push(head.clone());
                        if socket.write_all(answer(&head).as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (format!("http://{addr}"), seen)
    }

    fn response(status: &str, extra: &str, content_type: &str, body: &str) -> String {
        format!(
            "HTTP/1.1 {status}\r\n{extra}content-type: {content_type}\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
    }

    #[tokio::test]
    async fn redirects_to_another_origin_are_not_followed_and_say_where() {
        const KEY: &str = "sk-ant-api03-REDIRECTED-0123456789";
        // Host B: whatever reaches it is a leak.
        let (b, b_seen) = serve_heads(|_| response("200 OK", "", "application/json", "{}")).await;
        let b_port = b.rsplit(':').next().unwrap().to_owned();
        let mut headers = HeaderMap::new();
        headers.insert("x-api-key", HeaderValue::from_static(KEY));
        headers.insert("x-goog-api-key", HeaderValue::from_static(KEY));
        for status in [
            "301 Moved Permanently",
            "302 Found",
            "303 See Other",
            "307 Temporary Redirect",
            "308 Permanent Redirect",
        ] {
            for target in [
                // Another port.
                format!("{b}/v1/messages"),
                // Another name for the same address: another host.
                format!("http://localhost:{b_port}/v1/messages"),
                // Another scheme (nothing listens there for TLS).
                format!("https://127.0.0.1:{b_port}/v1/messages"),
            ] {
                let location = format!("location: {target}\r\n");
                let (a, a_seen) =
                    serve_heads(move |_| response(status, &location, "text/plain", "")).await;
                for streaming in [false, true] {
                    let t = transport(HttpOptions::default());
                    let error = if streaming {
                        t.post_sse(
                            "m",
                            &format!("{a}/v1/messages"),
                            &headers,
                            &serde_json::json!({}),
                        )
                        .await
                        .err()
                        .unwrap()
                    } else {
                        t.post_json::<serde_json::Value>(
                            "m",
                            &format!("{a}/v1/messages"),
                            &headers,
                            &serde_json::json!({}),
                        )
                        .await
                        .unwrap_err()
                    };
                    let text = error.to_string();
                    assert!(
                        matches!(error, ModelError::Configuration { .. }),
                        "{status} to {target}: {text}"
                    );
                    assert!(
                        text.contains(&target) && text.contains(&status[..3]),
                        "{text}"
                    );
                    assert!(!text.contains(KEY), "{text}");
                }
                assert_eq!(a_seen.lock().unwrap().len(), 2, "{status} to {target}");
            }
        }
        assert!(
            b_seen.lock().unwrap().is_empty(),
            "host B got {:?}",
            b_seen.lock().unwrap()
        );
    }

    #[tokio::test]
    async fn redirects_within_the_origin_are_followed_a_few_times() {
        // `/v1/old` moves to `/v1/new`, which answers.
        let (a, seen) = serve_heads(|head| {
            if head.starts_with("POST /v1/old") {
                response(
                    "308 Permanent Redirect",
                    "location: /v1/new\r\n",
                    "text/plain",
                    "",
                )
            } else {
                response("200 OK", "", "application/json", r#"{"answer": 42}"#)
            }
        })
        .await;
        let answer: serde_json::Value = transport(HttpOptions::default())
            .post_json(
                "m",
                &format!("{a}/v1/old"),
                &HeaderMap::new(),
                &serde_json::json!({}),
            )
            .await
            .unwrap();
        assert_eq!(answer["answer"], 42);
        assert!(
            seen.lock()
                .unwrap()
                .iter()
                .any(|h| h.starts_with("POST /v1/new"))
        );
        // A loop within the origin stops after a few, as an error.
        let (a, seen) = serve_heads(|_| {
            response(
                "307 Temporary Redirect",
                "location: /again\r\n",
                "text/plain",
                "",
            )
        })
        .await;
        let error = transport(HttpOptions::default())
            .post_json::<serde_json::Value>(
                "m",
                &format!("{a}/start"),
                &HeaderMap::new(),
                &serde_json::json!({}),
            )
            .await
            .unwrap_err();
        assert!(matches!(error, ModelError::Configuration { .. }), "{error}");
        assert_eq!(seen.lock().unwrap().len(), MAX_REDIRECTS + 1);
    }

    #[tokio::test]
    async fn an_unparsable_answer_quoting_a_key_at_the_cut_keeps_none_of_it() {
        const KEY: &str = "sk-proj-UNPARSABLE-STRADDLE-0123456789abcdef";
        harness::secrets::register(KEY);
        for pad in (170..=205).step_by(5) {
            let body = format!("{}{KEY} and more", "<".repeat(pad));
            let (a, _) = serve_heads(move |_| response("200 OK", "", "text/html", &body)).await;
            let error = post_json(&a, HttpOptions::default()).await.unwrap_err();
            let text = error.to_string();
            assert!(
                matches!(error, ModelError::MalformedResponse { .. }),
                "{text}"
            );
            for part in KEY.as_bytes().windows(8) {
                let part = std::str::from_utf8(part).unwrap();
                assert!(!text.contains(part), "pad {pad}: {part:?} in {text:?}");
            }
        }
    }

    #[tokio::test]
    async fn a_stream_over_its_total_limit_ends_there() {
        let event = |data: usize| format!("data: {}\n\n", "d".repeat(data)).into_bytes();
        let limit = 64 * 1024;
        for chunks in [
            // Many small events.
            (0..2000).map(|_| event(50)).collect::<Vec<_>>(),
            // A few events just under the event limit.
            (0..10).map(|_| event(30_000)).collect(),
            // Many events in one chunk.
            vec![event(10).repeat(10_000)],
            // CRLF, comments and blank lines count too.
            vec![b": keep-alive\r\n\r\n".repeat(10_000)],
        ] {
            let base = serve(chunked("200 OK", "text/event-stream", chunks)).await;
            let options = HttpOptions {
                max_event_bytes: 32 * 1024,
                max_stream_bytes: limit,
                ..HttpOptions::default()
            };
            let mut events = transport(options)
                .post_sse(
                    "m",
                    &format!("{base}/x"),
                    &HeaderMap::new(),
                    &serde_json::json!({}),
                )
                .await
                .unwrap();
            let mut received = 0u64;
            let error = loop {
                match events.next().await {
                    Some(Ok(event)) => received += event.data.len() as u64,
                    Some(Err(e)) => break Some(e),
                    None => break None,
                }
            };
            assert!(
                matches!(&error, Some(ModelError::ResponseTooLarge { limit: l, what }) if *l == limit && what.contains("stream")),
                "{error:?}"
            );
            assert!(received <= limit, "{received} bytes of data passed");
        }
        // Under the limit: all read.
        let base = serve(chunked(
            "200 OK",
            "text/event-stream",
            (0..100).map(|_| event(50)).collect(),
        ))
        .await;
        let options = HttpOptions {
            max_stream_bytes: limit,
            ..HttpOptions::default()
        };
        let (n, error) = post_sse(&base, options).await;
        assert!(error.is_none(), "{error:?}");
        assert_eq!(n, 100);
    }
}
