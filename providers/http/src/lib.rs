//! HTTP plumbing shared by the harness model providers (`harness-openai`,
//! `harness-anthropic`, `harness-gemini`), written once:
//!
//! - [`HttpTransport`]: JSON POSTs and server-sent-event streams over reqwest
//!   (rustls with the `ring` provider), with timeouts and bounded retries.
//! - [`HttpRetryPolicy`]: exponential backoff with jitter that honours the
//!   provider's `Retry-After`.
//! - [`error_from_response`]: HTTP status and vendor error bodies to typed
//!   [`ModelError`](harness::llm::ModelError)s.
//! - [`ApiKey`]: a secret that never shows in `Debug` output or logs.
//! - [`SseDecoder`] and [`decode_events`]: turn a provider's SSE events into
//!   a [`ModelStream`](harness::llm::ModelStream).
//! - [`ClientBuilder`], [`Connection`] and [`provider_client!`]: the builder
//!   options, the built client state and the client API every provider
//!   shares.
//! - [`request_body`] and [`merged_turns`]: request conversions that are the
//!   same across providers.
//!
//! Applications do not use this crate directly; they use a provider crate.

mod client;
mod key;
mod retry;
mod sse;
mod status;
mod transport;
mod turns;

pub use client::{ClientBuilder, Connection};

/// The bound on generated tokens that every provider sends when a request
/// sets no [`ModelRequest::max_tokens`](harness::llm::ModelRequest::max_tokens):
/// a model left unbounded may generate until its context runs out (a small
/// local model was seen writing 1 800 tokens of a plan in nine minutes and
/// going on). Each provider's models change it with `default_max_tokens`.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;
pub use key::ApiKey;
pub use retry::{HttpOptions, HttpRetryPolicy};
pub use sse::{Flow, SseDecoder, SseEvent, SseEvents, decode_events};
pub use status::{
    error_from_body, error_from_code, error_from_response, excerpt, parse_retry_after,
};
pub use transport::{HttpTransport, endpoint, shown_url};
pub use turns::merged_turns;

/// What [`provider_client!`] expands to names; not part of the API.
#[doc(hidden)]
pub mod __private {
    pub use harness::llm::ModelError;
}

/// Re-exported so providers name header types without their own reqwest dependency.
pub use reqwest::header;

/// The JSON body for a provider's `wire` request, with
/// [`ModelRequest::extra`](harness::llm::ModelRequest::extra) merged in (see
/// [`merge_extra`]).
///
/// # Errors
///
/// [`ModelError::InvalidRequest`](harness::llm::ModelError::InvalidRequest)
/// for a `temperature` or `top_p` that is not a finite number (JSON has no
/// NaN or infinity: the setting would silently become `null`), or a body
/// that does not serialize.
///
/// ```
/// use harness::llm::{ModelError, ModelRequest};
///
/// let mut request = ModelRequest::new([]);
/// request.temperature = Some(f32::NAN);
/// let error = harness_provider_http::request_body(&serde_json::json!({}), &request).unwrap_err();
/// assert!(matches!(error, ModelError::InvalidRequest { status: None, .. }));
/// assert!(error.to_string().contains("temperature is NaN"));
/// ```
pub fn request_body(
    wire: &impl serde::Serialize,
    request: &harness::llm::ModelRequest,
) -> Result<serde_json::Value, harness::llm::ModelError> {
    for (name, value) in [
        ("temperature", request.temperature),
        ("top_p", request.top_p),
    ] {
        if let Some(value) = value
            && !value.is_finite()
        {
            return Err(harness::llm::ModelError::InvalidRequest {
                status: None,
                message: format!("{name} is {value}: it must be a finite number"),
            });
        }
    }
    let mut body =
        serde_json::to_value(wire).map_err(|e| harness::llm::ModelError::InvalidRequest {
            status: None,
            message: format!("cannot serialize the request: {e}"),
        })?;
    merge_extra(&mut body, &request.extra);
    Ok(body)
}

/// Merges [`ModelRequest::extra`](harness::llm::ModelRequest::extra) into a
/// provider's JSON body as a JSON merge patch (RFC 7386): an object merges
/// into the body's object of the same name field by field, so
/// `{"generationConfig": {"seed": 7}}` keeps the temperature the request
/// set there; `null` removes a field; anything else replaces it.
///
/// ```
/// use serde_json::json;
///
/// let mut body = json!({"model": "m", "config": {"temperature": 0.2, "topK": 4}});
/// let extra = json!({"config": {"seed": 7, "topK": null}, "stream": true});
/// harness_provider_http::merge_extra(&mut body, extra.as_object().unwrap());
/// assert_eq!(
///     body,
///     json!({"model": "m", "config": {"temperature": 0.2, "seed": 7}, "stream": true})
/// );
/// ```
pub fn merge_extra(
    body: &mut serde_json::Value,
    extra: &serde_json::Map<String, serde_json::Value>,
) {
    if !body.is_object() {
        *body = serde_json::Value::Object(serde_json::Map::new());
    }
    if let serde_json::Value::Object(fields) = body {
        for (key, patch) in extra {
            match patch {
                serde_json::Value::Null => {
                    fields.remove(key);
                }
                serde_json::Value::Object(inner) => merge_extra(
                    fields.entry(key.clone()).or_insert(serde_json::Value::Null),
                    inner,
                ),
                other => {
                    fields.insert(key.clone(), other.clone());
                }
            }
        }
    }
}
