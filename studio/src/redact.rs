//! What the studio sends, with the process's secrets replaced
//! ([`harness::secrets`]): error messages, JSON bodies and events. A
//! session's states were redacted when they were committed, but not with a
//! secret registered since, and a store's error may quote what it was
//! given (a URL with its password). With no secret registered this costs
//! a check per response.

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;
use harness::secrets;
use serde_json::Value;

/// `text` with every secret replaced.
pub(crate) fn text(text: &str) -> String {
    secrets::redact(text).into_owned()
}

/// Replaces every secret in `value`'s strings and object keys; whether
/// there was one.
pub(crate) fn json(value: &mut Value) -> bool {
    secrets::is_active() && walk(value)
}

fn walk(value: &mut Value) -> bool {
    match value {
        Value::String(s) => secrets::redact_string(s),
        Value::Array(items) => items.iter_mut().fold(false, |found, v| walk(v) | found),
        Value::Object(map) => {
            let mut found = false;
            if map.keys().any(|k| secrets::contains_secret(k)) {
                for (k, v) in std::mem::take(map) {
                    map.insert(text(&k), v);
                }
                found = true;
            }
            map.values_mut().fold(found, |found, v| walk(v) | found)
        }
        _ => false,
    }
}

/// The middleware: a JSON response (an error's included) leaves with its
/// secrets replaced.
pub(crate) async fn responses(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/json"));
    if !is_json || !secrets::is_active() {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        // The body failed while read: nothing of it is sent.
        parts.headers.remove(header::CONTENT_LENGTH);
        return Response::from_parts(parts, Body::empty());
    };
    let bytes = match serde_json::from_slice::<Value>(&bytes) {
        Ok(mut value) => {
            if json(&mut value) {
                serde_json::to_vec(&value).map_or(bytes, Bytes::from)
            } else {
                bytes
            }
        }
        Err(_) => Bytes::from(text(&String::from_utf8_lossy(&bytes))),
    };
    parts
        .headers
        .insert(header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
    Response::from_parts(parts, Body::from(bytes))
}
