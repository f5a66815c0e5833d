//! HTTP plumbing shared by the harness model providers (`harness-openai`,
//! `harness-anthropic`, `harness-gemini`), written once:
//!
//! - [`HttpTransport`]: JSON POSTs and server-sent-event streams over reqwest
//!   (rustls with the `ring` provider), with timeouts and bounded retries.
//! - [`RetryPolicy`]: exponential backoff with jitter that honours the
//!   provider's `Retry-After`.
//! - [`error_from_response`]: HTTP status and vendor error bodies to typed
//!   [`ModelError`](harness::llm::ModelError)s.
//! - [`ApiKey`]: a secret that never shows in `Debug` output or logs.
//! - [`SseDecoder`] and [`decode_events`]: turn a provider's SSE events into
//!   a [`ModelStream`](harness::llm::ModelStream).
//!
//! Applications do not use this crate directly; they use a provider crate.

mod key;
mod retry;
mod sse;
mod status;
mod transport;

pub use key::ApiKey;
pub use retry::{HttpOptions, RetryPolicy};
pub use sse::{Flow, SseDecoder, SseEvent, SseEvents, decode_events};
pub use status::{error_from_body, error_from_response, parse_retry_after};
pub use transport::{HttpTransport, endpoint};

/// Re-exported so providers name header types without their own reqwest dependency.
pub use reqwest::header;

/// Merges [`ModelRequest::extra`](harness::llm::ModelRequest::extra) into
/// the top level of a provider's JSON body; its fields win.
pub fn merge_extra(
    body: &mut serde_json::Value,
    extra: &serde_json::Map<String, serde_json::Value>,
) {
    if let serde_json::Value::Object(fields) = body {
        for (key, value) in extra {
            fields.insert(key.clone(), value.clone());
        }
    }
}
