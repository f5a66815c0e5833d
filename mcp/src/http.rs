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
//! GET stream fails nothing). [`Client`] wraps the SDK's client so that
//! the calls fail saying what the server sent, as over stdio: what is too
//! large on a POST's own answer (its JSON body, or an event of its SSE
//! stream) is that POST's request's answer, and becomes a
//! [stand-in](Faults::stand_in) error answer to that request only (none
//! other fails; if its call gave up, nothing does); what is too large on a
//! GET stream, whose request the client cannot tell, is reported to
//! [`Faults`], and the calls waiting fail. The handshake's answer too large
//! is reported likewise (nothing else waits then, and the SDK needs a
//! session from its answer).
//!
//! Likewise what the SDK cannot read as a message, or would misread: a
//! JSON body that is not JSON, or not a JSON-RPC message (the SDK fails the
//! connection's send for it, as if the server were gone), an error without
//! an `id` (which it drops), a `result` that is not an object (which it
//! reads as an empty result), and an SSE event's data of any of these
//! (which it skips; the call then waits its whole timeout, or, if the
//! stream ends, the SDK closes the client). On a POST's own answer, that
//! is the POST's request's answer, and a stand-in error answer to it takes
//! its place ([`check`], [`check_parsed`]); on a GET stream, one whose
//! request cannot be told is reported to [`Faults`], as over stdio. A
//! `"result": []` in a JSON body is the one case not caught: the SDK reads
//! the body itself, and `[]` then as `{}` (an empty result).
//!
//! [`McpOptions::max_message_bytes`]: crate::McpOptions::max_message_bytes

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{
    ClientJsonRpcMessage, ClientRequest, RequestId, ServerJsonRpcMessage, ServerResult,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::common::client_side_sse::BoxedSseResponse;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpClientTransportConfig, StreamableHttpError,
    StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use serde_json::Value;

use crate::McpOptions;
use crate::faults::{self, Faults};
use crate::sniff::{Owner, Sniffer};
use crate::stdio::{json_rpc_problem, may_answer, quote};

/// How many more bytes than a message an SSE event may take: the SDK
/// counts the event as sent, with the `data: ` before each of its lines and
/// its `id:` and `event:` lines, so that a message of exactly the limit
/// still fits.
pub(crate) const SSE_FIELD_BYTES: usize = 1 << 10;

/// The most redirects followed for one request.
const MAX_REDIRECTS: usize = 10;

/// What a result holds when it is `Ok`.
trait OkOf {
    type Ok;
}

impl<T, E> OkOf for Result<T, E> {
    type Ok = T;
}

/// An SSE event, as the SDK's streams yield them (its type is not
/// exported).
type SseEvent = <<BoxedSseResponse as futures::Stream>::Item as OkOf>::Ok;

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

/// What `***` stands for in a URL the crate shows.
const HIDDEN: &str = "***";

/// A URL's secrets found by [`mask`]: each as written and decoded.
#[derive(Default)]
struct Found {
    /// The values (as written in the URL, percent-decoded, and decoded as
    /// a form's, `+` as a space).
    values: Vec<String>,
    /// Each `name=value` of a secret parameter as written, and as shown.
    pieces: Vec<(String, String)>,
}

impl Found {
    fn value(&mut self, raw: &str) {
        for form in [
            raw.to_owned(),
            harness::secrets::percent_decoded(raw, false),
            harness::secrets::percent_decoded(raw, true),
        ] {
            if !self.values.contains(&form) {
                self.values.push(form);
            }
        }
    }
}

/// `params` (a query or a fragment: `name=value` pieces joined with `&`)
/// with the values of the secret ones ([`is_secret_parameter`](harness::secrets::is_secret_parameter)) replaced by
/// [`HIDDEN`].
fn mask_params(params: &str, found: &mut Found) -> String {
    let pieces: Vec<String> = params
        .split('&')
        .map(|piece| match piece.split_once('=') {
            Some((name, value))
                if !value.is_empty()
                    && harness::secrets::is_secret_parameter(
                        &harness::secrets::percent_decoded(name, true),
                    ) =>
            {
                found.value(value);
                let shown = format!("{name}={HIDDEN}");
                found.pieces.push((piece.to_owned(), shown.clone()));
                shown
            }
            _ => piece.to_owned(),
        })
        .collect();
    pieces.join("&")
}

/// `url` (a URL, or what was given as one) with its password, the path
/// segments that look like tokens ([`is_token_like`](harness::secrets::is_token_like))
/// and the values of its secret-looking query and fragment parameters
/// ([`is_secret_parameter`](harness::secrets::is_secret_parameter)) replaced by [`HIDDEN`].
fn mask(url: &str, found: &mut Found) -> String {
    let (rest, fragment) = match url.split_once('#') {
        Some((rest, fragment)) => (rest, Some(fragment)),
        None => (url, None),
    };
    let (base, query) = match rest.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (rest, None),
    };
    let (mut shown, path) = match base.find("://").map(|i| i + 3) {
        Some(start) => {
            let authority_end = base[start..].find('/').map_or(base.len(), |i| start + i);
            (base[..authority_end].to_owned(), &base[authority_end..])
        }
        None => (String::new(), base),
    };
    // `scheme://user:password@host…`: the password.
    if let Some(start) = shown.find("://").map(|i| i + 3) {
        let authority = &shown[start..];
        if let Some(at) = authority.rfind('@')
            && let Some(colon) = authority[..at].find(':')
            && colon + 1 < at
        {
            found.value(&authority[colon + 1..at]);
            shown = format!(
                "{}{HIDDEN}{}",
                &shown[..start + colon + 1],
                &shown[start + at..]
            );
        }
    }
    // A key written as a segment of the path (`/s/<key>/mcp`).
    let segments: Vec<&str> = path
        .split('/')
        .map(|segment| {
            if harness::secrets::is_token_like(&harness::secrets::percent_decoded(segment, false)) {
                found.value(segment);
                found
                    .pieces
                    .push((format!("/{segment}"), format!("/{HIDDEN}")));
                HIDDEN
            } else {
                segment
            }
        })
        .collect();
    shown.push_str(&segments.join("/"));
    if let Some(query) = query {
        shown.push('?');
        shown.push_str(&mask_params(query, found));
    }
    if let Some(fragment) = fragment {
        shown.push('#');
        shown.push_str(&mask_params(fragment, found));
    }
    shown
}

/// What the crate shows of a server's URL: every form of it that holds a
/// secret (a password, the value of a secret-looking parameter), as the
/// application wrote it and as the HTTP client writes it, and what is shown
/// instead. Its `Debug` shows none of them.
#[derive(Clone, Default)]
pub(crate) struct UrlMask {
    /// Longest first.
    replacements: Vec<(String, String)>,
}

impl std::fmt::Debug for UrlMask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UrlMask")
            .field("replacements", &self.replacements.len())
            .finish()
    }
}

impl UrlMask {
    /// The mask of `forms` (one URL, written in several ways); registers
    /// its secrets ([`harness::secrets::register`]).
    fn new(forms: &[&str]) -> Self {
        let mut found = Found::default();
        let mut replacements = Vec::new();
        for form in forms {
            replacements.push((form.to_string(), mask(form, &mut found)));
        }
        for value in &found.values {
            harness::secrets::register(value);
        }
        replacements.extend(found.pieces);
        replacements.retain(|(from, to)| from != to);
        replacements.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        replacements.dedup();
        Self { replacements }
    }

    /// The URL `url` as shown (when it is one of the forms masked).
    pub(crate) fn shown(&self, url: &str) -> String {
        let mut text = url.to_owned();
        self.hide(&mut text);
        text
    }

    /// Replaces in `text` every form of the URL, and every secret
    /// parameter of it, with what is shown instead.
    pub(crate) fn hide(&self, text: &mut String) {
        for (from, to) in &self.replacements {
            if text.contains(from.as_str()) {
                *text = text.replace(from.as_str(), to);
            }
        }
    }
}

/// Checks that `url` is an `http://` or `https://` URL, saying what is
/// wrong with it if not (the HTTP client says only "builder error" when it
/// first sends); the mask of the URL for what the client shows later. Its
/// password, the path segments that look like tokens
/// ([`is_token_like`](harness::secrets::is_token_like)) and the values of its
/// secret-looking query and fragment parameters
/// ([`is_secret_parameter`](harness::secrets::is_secret_parameter)) are registered as secrets
/// ([`harness::secrets::register`]), so that what a server or the HTTP
/// client says with them is redacted, and the crate shows the URL without
/// them (`?api_key=***`).
pub(crate) fn check_url(url: &str) -> Result<UrlMask, String> {
    let parsed = match reqwest::Url::parse(url) {
        Ok(parsed) => parsed,
        Err(error) => {
            let mask = UrlMask::new(&[url]);
            let quoted = crate::stdio::quote(mask.shown(url).as_bytes());
            return Err(format!(
                "{quoted} is not a URL ({error}); give the server's endpoint, e.g. `http://127.0.0.1:8000/mcp`"
            ));
        }
    };
    let mut unfragmented = parsed.clone();
    unfragmented.set_fragment(None);
    let mask = UrlMask::new(&[url, parsed.as_str(), unfragmented.as_str()]);
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!(
            "the URL `{}` is not an http:// or https:// URL (its scheme is `{}`)",
            mask.shown(parsed.as_str()),
            parsed.scheme()
        ));
    }
    Ok(mask)
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

/// What a message from the server is, as [`check`] finds it.
#[derive(Debug, PartialEq)]
enum Checked {
    /// A message the SDK reads (or, a notification or a request of the
    /// server's, decides about): passed on.
    Message,
    /// The answer to request `id`, which the SDK would drop or misread: a
    /// [stand-in](Faults::stand_in) takes its place.
    Answer(RequestId, String),
    /// What may have been an answer, whose request cannot be told.
    Dropped(String),
    /// A notification or a request of the server's the SDK cannot read:
    /// no call's answer.
    Notice(String),
    /// Text that is no message and no answer.
    Noise,
}

/// What a message the SDK reads is, when it is one it would misread: an
/// error without an `id`, which the SDK drops (on a POST's answer, the
/// answer to that POST's request, `answers`), or a result that is not an
/// object (`raw`, the result as sent, when known; a custom result's own).
fn check_parsed(
    message: &ServerJsonRpcMessage,
    raw_result: Option<&Value>,
    answers: Option<&RequestId>,
    quoted: impl Fn() -> String,
) -> Checked {
    match message {
        ServerJsonRpcMessage::Error(error) if error.id.is_none() => {
            let what = format!("an error without an `id` ({})", quoted());
            match answers {
                Some(id) => Checked::Answer(id.clone(), what),
                None => Checked::Dropped(what),
            }
        }
        // An MCP result is an object; the SDK reads `[]` as an empty one
        // (and so as a tool's result without content), and a number or a
        // string as a custom one.
        ServerJsonRpcMessage::Response(response) => {
            let result = match (&response.result, raw_result) {
                (ServerResult::EmptyResult(_) | ServerResult::CustomResult(_), Some(raw)) => raw,
                (ServerResult::CustomResult(custom), None) => &custom.0,
                _ => return Checked::Message,
            };
            if result.is_object() {
                Checked::Message
            } else {
                Checked::Answer(
                    response.id.clone(),
                    format!(
                        "an answer that is not a valid MCP message (its `result` is not an object: {})",
                        quoted()
                    ),
                )
            }
        }
        _ => Checked::Message,
    }
}

/// What `text` (an SSE event's data, trimmed, not empty) is: a message
/// the SDK reads; or, if not, what the server sent, in words, and whose
/// answer it was. On a POST's own stream (`answers`, its request), an
/// answer, or what is no message at all, is that request's.
fn check(text: &[u8], answers: Option<&RequestId>) -> Checked {
    let what = |problem: &str| {
        format!(
            "an answer that is not a valid MCP message ({problem}: {})",
            quote(text)
        )
    };
    let value = serde_json::from_slice::<Value>(text);
    if let Ok(message) = serde_json::from_slice::<ServerJsonRpcMessage>(text) {
        let raw_result = value.as_ref().ok().and_then(|v| v.get("result"));
        return check_parsed(&message, raw_result, answers, || quote(text));
    }
    let Ok(value) = value else {
        let what = format!("a message that is not JSON ({})", quote(text));
        return match answers {
            Some(id) => Checked::Answer(id.clone(), what),
            None if text.starts_with(b"{") => Checked::Dropped(what),
            None => Checked::Noise,
        };
    };
    let mut sniffer = Sniffer::default();
    sniffer.feed(text);
    match (sniffer.finish(), answers) {
        (Owner::NoAnswer, _) => Checked::Notice(what(json_rpc_problem(&value))),
        (_, Some(id)) => Checked::Answer(id.clone(), what(json_rpc_problem(&value))),
        (Owner::Answer(id), None) => Checked::Answer(id, what(json_rpc_problem(&value))),
        (Owner::Unknown, None) if may_answer(&value) => {
            Checked::Dropped(what(json_rpc_problem(&value)))
        }
        (Owner::Unknown, None) => Checked::Noise,
    }
}

/// What the SDK's error for a JSON body it could not read as a message
/// (`could not parse JSON response as ServerJsonRpcMessage: <serde's
/// error>: <the body's first bytes>`) says the server sent, in words.
fn unreadable_body(error: &str) -> Option<String> {
    let rest = error.strip_prefix("could not parse JSON response as ServerJsonRpcMessage: ")?;
    let splits = || {
        rest.match_indices(": ")
            .map(|(at, _)| (&rest[..at], &rest[at + 2..]))
    };
    // JSON that is not a message: the first split after which the rest is
    // JSON (serde's error may quote the body, or a part of it).
    if let Some((_, body, value)) = splits().find_map(|(reason, body)| {
        serde_json::from_str::<Value>(body)
            .ok()
            .map(|value| (reason, body, value))
    }) {
        return Some(format!(
            "an answer that is not a valid MCP message ({}: {})",
            json_rpc_problem(&value),
            quote(body.as_bytes())
        ));
    }
    // Not JSON: serde's error ends with `at line L column C`.
    let (reason, body) = splits()
        .find(|(reason, _)| {
            reason
                .rsplit_once(" column ")
                .is_some_and(|(_, c)| !c.is_empty() && c.bytes().all(|b| b.is_ascii_digit()))
        })
        .unwrap_or((rest, ""));
    Some(if body == "<empty>" {
        "an empty answer where a JSON-RPC message was due".to_owned()
    } else {
        format!(
            "a message that is not JSON ({}: {reason})",
            quote(body.as_bytes())
        )
    })
}

impl Client {
    /// `stream`, with what the SDK cannot read dealt with. The event that
    /// ends it for its size: if the stream is the answer to request
    /// `answers`, it becomes a [stand-in](Faults::stand_in) error answer to
    /// it, and the stream ends; otherwise it is reported to [`Faults`]. An
    /// event whose data is not a message the SDK reads (which the SDK
    /// would skip): if it is an answer (on a POST's stream, or anything but
    /// a notification or a request of the server's), a stand-in error
    /// answer takes its place; otherwise it is reported to [`Faults`]
    /// ([`check`]), and skipped.
    fn watched(&self, stream: BoxedSseResponse, answers: Option<RequestId>) -> BoxedSseResponse {
        let faults = Arc::clone(&self.faults);
        let limit = self.limit;
        stream
            .scan(false, move |ended, event| {
                if *ended {
                    return futures::future::ready(None);
                }
                let event = match event {
                    Err(error) if is_event_too_large(&error) => {
                        let what = faults::too_large(limit);
                        match &answers {
                            Some(id) => {
                                *ended = true;
                                let stand_in = faults.stand_in(id.clone(), &what);
                                Ok(SseEvent {
                                    data: Some(String::from_utf8_lossy(&stand_in).into_owned()),
                                    ..SseEvent::default()
                                })
                            }
                            None => {
                                faults.drop_message(what);
                                Err(error)
                            }
                        }
                    }
                    Ok(event) => Ok(checked_event(&faults, event, answers.as_ref())),
                    other => other,
                };
                futures::future::ready(Some(event))
            })
            .boxed()
    }
}

/// `event`, if the SDK reads it as it is (an event of another type than a
/// message's, one without data, one whose data is a message the SDK
/// reads); else with its data replaced by a [stand-in](Faults::stand_in)
/// answer, or taken out (reported to `faults`), as [`check`] finds it.
fn checked_event(faults: &Faults, mut event: SseEvent, answers: Option<&RequestId>) -> SseEvent {
    // Only these events carry messages for the SDK; it skips an event
    // without data, or whose data is empty (a priming event).
    if !matches!(event.event.as_deref(), None | Some("") | Some("message")) {
        return event;
    }
    let Some(data) = &event.data else {
        return event;
    };
    let text = data.as_bytes().trim_ascii();
    if text.is_empty() {
        return event;
    }
    event.data = match check(text, answers) {
        Checked::Message => return event,
        Checked::Answer(id, what) => {
            Some(String::from_utf8_lossy(&faults.stand_in(id, &what)).into_owned())
        }
        Checked::Dropped(what) => {
            faults.drop_message(what);
            None
        }
        Checked::Notice(what) => {
            faults.drop_notice(&what);
            None
        }
        Checked::Noise => {
            faults.note_noise(quote(text));
            None
        }
    };
    event
}

/// The request `message` is, if it is one whose answer over the limit is
/// stood in for ([`Faults::stand_in`]): any but the handshake's.
fn request_answered(message: &ClientJsonRpcMessage) -> Option<RequestId> {
    match message {
        ClientJsonRpcMessage::Request(request)
            if !matches!(
                request.request,
                ClientRequest::InitializeRequest(_) | ClientRequest::DiscoverRequest(_)
            ) =>
        {
            Some(request.id.clone())
        }
        _ => None,
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
        let answers = request_answered(&message);
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
                let what = faults::too_large(self.limit);
                match answers {
                    Some(id) => Ok(StreamableHttpPostResponse::Json(
                        self.faults.stand_in_message(id, &what),
                        None,
                    )),
                    None => {
                        self.faults.drop_message(what);
                        Err(StreamableHttpError::ResponseBodyTooLarge { max_size })
                    }
                }
            }
            Ok(StreamableHttpPostResponse::Sse(stream, session)) => Ok(
                StreamableHttpPostResponse::Sse(self.watched(stream, answers), session),
            ),
            // A JSON body the SDK reads, but would drop or misread.
            Ok(StreamableHttpPostResponse::Json(message, session)) => {
                let checked = check_parsed(&message, None, answers.as_ref(), || {
                    quote(&serde_json::to_vec(&message).unwrap_or_default())
                });
                match checked {
                    Checked::Answer(id, what) => Ok(StreamableHttpPostResponse::Json(
                        self.faults.stand_in_message(id, &what),
                        session,
                    )),
                    _ => Ok(StreamableHttpPostResponse::Json(message, session)),
                }
            }
            // A JSON body that is not a message the SDK reads: the SDK
            // fails the connection's send, and so the call, as if the
            // server were gone; it is this request's answer.
            Err(StreamableHttpError::UnexpectedServerResponse(error)) => {
                match (answers, unreadable_body(&error)) {
                    (Some(id), Some(what)) => Ok(StreamableHttpPostResponse::Json(
                        self.faults.stand_in_message(id, &what),
                        None,
                    )),
                    _ => Err(StreamableHttpError::UnexpectedServerResponse(error)),
                }
            }
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
        Ok(self.watched(stream, None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_shown_without_their_secrets() {
        let cases = [
            (
                "http://h/mcp?version=2&api_key=s1&x=y",
                "http://h/mcp?version=2&api_key=***&x=y",
                &["s1"][..],
            ),
            (
                "https://bob:p%40ss@h:8/mcp?Api%5FKey=a+b%2F#token=t1",
                "https://bob:***@h:8/mcp?Api%5FKey=***#token=***",
                &["p%40ss", "p@ss", "a+b%2F", "a+b/", "a b/", "t1"][..],
            ),
            // The last `@` ends the userinfo; a query without secrets.
            (
                "http://u:p@ss@h/mcp?flag&=x&token=",
                "http://u:***@h/mcp?flag&=x&token=",
                &["p@ss"][..],
            ),
            ("not a url?sig=zz", "not a url?sig=***", &["zz"][..]),
            ("http://h/mcp#section", "http://h/mcp#section", &[][..]),
            // A key as a segment of the path, plain or percent-encoded.
            (
                "https://mcp.example.com/api/mcp/s/ZjM2NDc1YjAtYjA3Mi00OGRh/mcp",
                "https://mcp.example.com/api/mcp/s/***/mcp",
                &["ZjM2NDc1YjAtYjA3Mi00OGRh"][..],
            ),
            (
                "http://u:pw@h/hooks/550e8400-e29b-41d4-a716-446655440000/a1b2c3d4e5f6g7h8%3D?key=k",
                "http://u:***@h/hooks/***/***?key=***",
                &[
                    "pw",
                    "550e8400-e29b-41d4-a716-446655440000",
                    "a1b2c3d4e5f6g7h8%3D",
                    "a1b2c3d4e5f6g7h8=",
                    "k",
                ][..],
            ),
            // Names stay.
            (
                "http://h:8000/v1/my-long-service-name-v2/2025-06-18/mcp",
                "http://h:8000/v1/my-long-service-name-v2/2025-06-18/mcp",
                &[][..],
            ),
            (
                "h/s/a1b2c3d4e5f6g7h8/mcp",
                "h/s/***/mcp",
                &["a1b2c3d4e5f6g7h8"][..],
            ),
        ];
        for (url, shown, secrets) in cases {
            let mut found = Found::default();
            assert_eq!(mask(url, &mut found), shown, "{url}");
            for secret in secrets {
                assert!(
                    found.values.iter().any(|v| v == secret),
                    "{url}: {secret:?} in {:?}",
                    found.values
                );
            }
        }
    }

    #[test]
    fn unreadable_json_bodies_are_said_as_sent() {
        let said = |error: &str| unreadable_body(error).unwrap();
        let prefix = "could not parse JSON response as ServerJsonRpcMessage: ";
        assert_eq!(
            said(&format!(
                r#"{prefix}unrecognized JSON-RPC message: {{"id":2,"result":{{}}}}: {{"id":2,"result":{{}}}}"#
            )),
            r#"an answer that is not a valid MCP message (it has no `jsonrpc`: "{\"id\":2,\"result\":{}}")"#
        );
        assert_eq!(
            said(&format!(
                "{prefix}expected value at line 1 column 1: <html>a: b</html>"
            )),
            r#"a message that is not JSON ("<html>a: b</html>": expected value at line 1 column 1)"#
        );
        assert_eq!(
            said(&format!(
                "{prefix}EOF while parsing a value at line 1 column 0: <empty>"
            )),
            "an empty answer where a JSON-RPC message was due"
        );
        assert_eq!(unreadable_body("HTTP 500: oops"), None);
    }

    #[test]
    fn sse_data_is_checked_as_the_answer_of_its_stream() {
        let request = RequestId::Number(7);
        let kind = |text: &str, answers: Option<&RequestId>| match check(text.as_bytes(), answers) {
            Checked::Answer(id, _) => format!("answer {id}"),
            Checked::Dropped(_) => "dropped".into(),
            Checked::Notice(_) => "notice".into(),
            Checked::Message => "message".into(),
            Checked::Noise => "noise".into(),
        };
        for (text, on_post, on_get) in [
            (
                r#"{"jsonrpc":"2.0","id":7,"result":{}}"#,
                "message",
                "message",
            ),
            (
                r#"{"jsonrpc":"2.0","method":"notifications/x"}"#,
                "message",
                "message",
            ),
            (
                r#"{"jsonrpc":"1.0","id":4,"result":{}}"#,
                "answer 7",
                "answer 4",
            ),
            (
                r#"{"jsonrpc":"2.0","id":4,"result":[]}"#,
                "answer 4",
                "answer 4",
            ),
            (
                r#"{"jsonrpc":"2.0","error":{"code":1,"message":"x"}}"#,
                "answer 7",
                "dropped",
            ),
            (
                r#"{"jsonrpc":"1.0","method":"notifications/x"}"#,
                "notice",
                "notice",
            ),
            (
                r#"{"jsonrpc":"2.0","id":4,"result":{"#,
                "answer 7",
                "dropped",
            ),
            ("plain text", "answer 7", "noise"),
            (r#"{"level":"info"}"#, "answer 7", "noise"),
        ] {
            assert_eq!(kind(text, Some(&request)), on_post, "{text}");
            assert_eq!(kind(text, None), on_get, "{text}");
        }
    }

    #[test]
    fn a_mask_hides_every_form_of_the_url_and_shows_the_rest() {
        let mask = UrlMask::new(&["http://h/mcp?v=1&key=abc", "http://h/mcp?v=1&key=abc#frag"]);
        let mut text = "GET http://h/mcp?v=1&key=abc#frag failed; /mcp?v=1&key=abc".to_owned();
        mask.hide(&mut text);
        assert_eq!(
            text,
            "GET http://h/mcp?v=1&key=***#frag failed; /mcp?v=1&key=***"
        );
        assert!(!format!("{mask:?}").contains("abc"));
        // A key in the path is hidden wherever the text quotes it.
        let mask = UrlMask::new(&["http://h/s/a1b2c3d4e5f6g7h8/mcp"]);
        let mut text =
            "POST /s/a1b2c3d4e5f6g7h8/mcp: 401 at http://h/s/a1b2c3d4e5f6g7h8/mcp".to_owned();
        mask.hide(&mut text);
        assert_eq!(text, "POST /s/***/mcp: 401 at http://h/s/***/mcp");
    }
}
