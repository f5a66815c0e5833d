//! The streamable-HTTP transport: the SDK's own reqwest client, held to
//! [`McpOptions::max_message_bytes`], with every message it refuses for its
//! size reported ([`Faults`]).
//!
//! The SDK's client reads a JSON answer only up to a limit (its
//! `Content-Length` first, then the bytes as they come) and an SSE event
//! only up to another (a line that never ends included), both 16 MiB
//! unless it is told otherwise; it never holds more of one. [`transport`]
//! sets both limits to the client's. What the SDK does with a message over
//! them says nothing of why, though: the request whose JSON answer is too
//! large fails with a transport error, and one whose SSE event is too large
//! fails as "closed before its final response" (an event on the standing
//! GET stream fails nothing). [`Client`] wraps the SDK's client to report
//! each refusal to [`Faults`] as it happens, before the SDK fails the
//! request, so that the calls waiting fail saying what the server sent, as
//! over stdio.
//!
//! [`McpOptions::max_message_bytes`]: crate::McpOptions::max_message_bytes

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::common::client_side_sse::BoxedSseResponse;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpClientTransportConfig, StreamableHttpError,
    StreamableHttpPostResponse, StreamableHttpResponseLimits,
};

use crate::McpOptions;
use crate::faults::{self, Faults};

/// How many more bytes than a message an SSE event may take: the SDK
/// counts the event as sent, with the `data: ` before each of its lines and
/// its `id:` and `event:` lines, so that a message of exactly the limit
/// still fits.
pub(crate) const SSE_FIELD_BYTES: usize = 1 << 10;

/// The most redirects followed for one request.
const MAX_REDIRECTS: usize = 10;

/// The SDK's reqwest client, reporting to [`Faults`] each message it
/// refuses for its size.
#[derive(Clone, Debug)]
pub(crate) struct Client {
    inner: reqwest::Client,
    faults: Arc<Faults>,
    /// [`McpOptions::max_message_bytes`](crate::McpOptions::max_message_bytes).
    limit: usize,
    /// The limits given to the SDK's client when the transport gives none.
    limits: StreamableHttpResponseLimits,
}

/// The HTTP client's error inside `error`, if it is the SDK's wrapping of
/// one: the SDK's `Client error: …` does not give it as its source, so an
/// error's sources stop before the reason (`Connection refused`).
pub(crate) fn client_error<'e>(
    error: &'e (dyn std::error::Error + Send + Sync + 'static),
) -> Option<&'e (dyn std::error::Error + 'static)> {
    match error.downcast_ref::<StreamableHttpError<reqwest::Error>>()? {
        StreamableHttpError::Client(error) => Some(error),
        _ => None,
    }
}

/// Checks that `url` is an `http://` or `https://` URL, saying what is
/// wrong with it if not (the HTTP client says only "builder error" when it
/// first sends). A password in it is registered as a secret, and never
/// shown.
pub(crate) fn check_url(url: &str) -> Result<(), String> {
    let parsed = match reqwest::Url::parse(url) {
        Ok(parsed) => parsed,
        Err(error) => {
            let quoted = crate::stdio::quote(url.as_bytes());
            return Err(format!(
                "{quoted} is not a URL ({error}); give the server's endpoint, e.g. `http://127.0.0.1:8000/mcp`"
            ));
        }
    };
    let mut shown = parsed.clone();
    if let Some(password) = parsed.password() {
        harness::secrets::register(password);
        let _ = shown.set_password(Some("***"));
    }
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!(
            "the URL `{shown}` is not an http:// or https:// URL (its scheme is `{}`)",
            parsed.scheme()
        ));
    }
    Ok(())
}

/// The streamable-HTTP transport to `url`, held to `options`' limits and
/// sending its bearer token, if any; what it refuses is reported to
/// `faults`. Fails if the HTTP client cannot be built (no TLS backend).
pub(crate) fn transport(
    url: &str,
    options: &McpOptions,
    faults: Arc<Faults>,
) -> Result<StreamableHttpClientTransport<Client>, String> {
    let limit = options.max_message_bytes;
    let sse_limit = limit.saturating_add(SSE_FIELD_BYTES);
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_owned())
        .max_json_response_size(limit)
        .max_sse_event_size(sse_limit);
    if let Some(token) = &options.bearer_token {
        config = config.auth_header(token.clone());
    }
    let mut limits = StreamableHttpResponseLimits::default();
    limits.max_json_response_size = limit;
    limits.max_sse_event_size = sse_limit;
    // As the SDK builds its own: no idle connections kept (a reused one
    // whose last answer was not read to its end stalls), and redirects
    // followed only within the origin.
    let inner = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .redirect(same_origin_redirects())
        .build()
        .map_err(|e| format!("could not build the HTTP client: {e}"))?;
    let client = Client {
        inner,
        faults,
        limit,
        limits,
    };
    Ok(StreamableHttpClientTransport::with_client(client, config))
}

/// Follows a redirect only if it keeps the request whole and where it was
/// sent: a 307 or 308 to the same origin (scheme, host and port), at most
/// [`MAX_REDIRECTS`] in a row. Any other comes back as the answer, and so
/// fails the request: a 301, 302 or 303 would turn the POST into a GET
/// without its message, and another origin would be sent the session id
/// and the headers.
fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let keeps_request = matches!(attempt.status().as_u16(), 307 | 308);
        let same_origin = attempt
            .previous()
            .first()
            .is_some_and(|first| first.origin() == attempt.url().origin());
        if !keeps_request || !same_origin {
            attempt.stop()
        } else if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
        } else {
            attempt.follow()
        }
    })
}

/// Whether `error` ended an SSE stream because an event went past the
/// limit. The SDK's error for it has no type outside the SDK, only this
/// text (its other stream errors are the HTTP client's, or the SSE
/// parser's own variants); the tests of oversize events hold it to it.
fn is_event_too_large(error: &SseError) -> bool {
    matches!(error, SseError::Body(error) if error.to_string().contains("SSE event exceeded the maximum size"))
}

impl Client {
    /// `stream`, reporting the event that ends it for its size.
    fn watched(&self, stream: BoxedSseResponse) -> BoxedSseResponse {
        let faults = Arc::clone(&self.faults);
        let limit = self.limit;
        stream
            .inspect(move |event| {
                if let Err(error) = event
                    && is_event_too_large(error)
                {
                    faults.drop_message(faults::too_large(limit));
                }
            })
            .boxed()
    }
}

impl StreamableHttpClient for Client {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            self.limits,
        )
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let mut limits = self.limits;
        limits.max_sse_event_size = max_sse_event_size;
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let response = self
            .inner
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await;
        match response {
            Err(StreamableHttpError::ResponseBodyTooLarge { max_size }) => {
                self.faults.drop_message(faults::too_large(self.limit));
                Err(StreamableHttpError::ResponseBodyTooLarge { max_size })
            }
            Ok(StreamableHttpPostResponse::Sse(stream, session)) => Ok(
                StreamableHttpPostResponse::Sse(self.watched(stream), session),
            ),
            other => other,
        }
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.inner
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxedSseResponse, StreamableHttpError<Self::Error>> {
        self.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth_header,
            custom_headers,
            self.limits.max_sse_event_size,
        )
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxedSseResponse, StreamableHttpError<Self::Error>> {
        let stream = self
            .inner
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await?;
        Ok(self.watched(stream))
    }
}
