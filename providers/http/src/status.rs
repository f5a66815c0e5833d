//! HTTP statuses and vendor error bodies as typed errors.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use harness::llm::ModelError;
use reqwest::header::HeaderMap;
use serde_json::Value;

/// The longest provider message kept in an error.
const MESSAGE_LIMIT: usize = 600;

/// The typed error for a failed HTTP response, and how long the provider
/// asked to wait before retrying.
///
/// The three vendors all put a message at `error.message`; servers that
/// speak OpenAI's dialect sometimes send `{"error": "text"}` instead. Both
/// are read; any other body is quoted (shortened).
///
/// | status | error |
/// | --- | --- |
/// | 400, 404, 409, 413, 422, other 4xx | `InvalidRequest` |
/// | 401, 403; Gemini's 400 `API_KEY_INVALID` | `Auth` |
/// | 408 (the server gave up waiting for the request) | `Overloaded` (with its `Retry-After`) |
/// | 429 | `RateLimited` (OpenAI's `insufficient_quota`: `Auth`) |
/// | 500 saying the model's output could not be parsed (llama.cpp) | `MalformedResponse` |
/// | 5xx, 529 | `Overloaded` (with its `Retry-After`, as a 429's) |
/// | 3xx (a redirect not followed: to another origin, or too many) | `Configuration` |
///
/// The message is [redacted](ModelError::redacted): a server that quotes
/// the key it was sent (or text of the request) does not put it in the
/// error.
pub fn error_from_response(
    status: u16,
    headers: &HeaderMap,
    body: &str,
) -> (ModelError, Option<Duration>) {
    if (300..400).contains(&status) {
        return (redirect_error(status, headers).redacted(), None);
    }
    let json: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let message = error_message(&json, body, status);
    let retry_after = parse_retry_after(headers, &json);
    (
        error_of_status(status, &json, message, retry_after).redacted(),
        retry_after,
    )
}

/// The typed error for an error a body reports with an HTTP status as its
/// code, answered with status 200 (OpenRouter's `{"error": {"code": 429,
/// "message": …}}`), by the table of [`error_from_response`];
/// [redacted](ModelError::redacted). A code that is no error status (not
/// 400–599) is read as a failure of the provider's own.
pub fn error_from_code(code: u16, message: impl Into<String>) -> ModelError {
    let message = message.into();
    let error = match code {
        400..=599 => error_of_status(code, &Value::Null, message, None),
        _ => ModelError::other(format!("error code {code}: {message}")),
    };
    error.redacted()
}

fn error_of_status(
    status: u16,
    json: &Value,
    message: String,
    retry_after: Option<Duration>,
) -> ModelError {
    match status {
        401 | 403 => ModelError::Auth { message },
        // Gemini answers a bad key with 400 INVALID_ARGUMENT.
        400 if has_detail_reason(json, "API_KEY_INVALID") => ModelError::Auth { message },
        // The server's own timeout, waiting for the request: not ours
        // (the request's `timeout` was not reached), and worth a retry.
        408 => ModelError::Overloaded {
            status: Some(status),
            message,
            retry_after,
        },
        429 if error_code(json) == Some("insufficient_quota") => ModelError::Auth {
            message: format!(
                "{message} (insufficient_quota: check the account's plan and billing)"
            ),
        },
        429 => ModelError::RateLimited {
            retry_after,
            message,
        },
        500 if unreadable_model_output(&message) => unreadable(status, &message),
        500..=599 => ModelError::Overloaded {
            status: Some(status),
            message,
            retry_after,
        },
        _ => ModelError::InvalidRequest {
            status: Some(status),
            message,
        },
    }
}

/// The typed error for an error reported inside a stream or a 200 body,
/// from the vendor's error type (`overloaded_error`, `rate_limit_exceeded`,
/// `RESOURCE_EXHAUSTED`, …) and message, [redacted](ModelError::redacted).
pub fn error_from_body(kind: &str, message: impl Into<String>) -> ModelError {
    error_of_kind(kind, message.into()).redacted()
}

fn error_of_kind(kind: &str, message: String) -> ModelError {
    match kind {
        "authentication_error"
        | "permission_error"
        | "invalid_api_key"
        | "UNAUTHENTICATED"
        | "PERMISSION_DENIED" => ModelError::Auth { message },
        "rate_limit_error" | "rate_limit_exceeded" | "RESOURCE_EXHAUSTED" => {
            ModelError::RateLimited {
                retry_after: None,
                message,
            }
        }
        "server_error" if unreadable_model_output(&message) => unreadable(500, &message),
        "overloaded_error" | "api_error" | "server_error" | "UNAVAILABLE" | "INTERNAL" => {
            ModelError::Overloaded {
                status: None,
                message,
                retry_after: None,
            }
        }
        "invalid_request_error"
        | "not_found_error"
        | "request_too_large"
        | "INVALID_ARGUMENT"
        | "NOT_FOUND"
        | "FAILED_PRECONDITION" => ModelError::InvalidRequest {
            status: None,
            message,
        },
        "" => ModelError::other(message),
        other => ModelError::other(format!("{other}: {message}")),
    }
}

/// Whether a server error says that the model's own output could not be
/// parsed (llama.cpp: "The model produced output that does not match the
/// expected … format", when a model calls a tool it was not offered or
/// writes a call it cannot read). The server is not overloaded: the answer
/// is, and the caller can ask again saying so.
fn unreadable_model_output(message: &str) -> bool {
    message.contains("produced output that does not match")
}

fn unreadable(status: u16, message: &str) -> ModelError {
    ModelError::MalformedResponse {
        message: format!(
            "the server could not read the model's answer as text or a call of an offered tool \
             (HTTP {status}): {message}"
        ),
    }
}

/// How many bytes past what is shown [`excerpt`] redacts: a secret that
/// starts in the part shown is found whole if it is shorter than this.
const REDACTION_MARGIN: usize = 64 << 10;

/// `text` as quoted in an error message: the process's secrets
/// ([`harness::secrets`]) replaced first, then cut to at most `max_chars`
/// characters, ending with `…` when cut.
///
/// In this order because redaction matches a secret whole: cut first, a
/// key that straddles the cut would be left in up to its last characters.
/// Only the start of `text` is looked at (what can be shown, and a margin
/// for a secret that straddles the cut), so a quote of a large body costs
/// what it shows.
///
/// ```
/// let key = "sk-excerpt-doc-0123456789abcdef";
/// harness::secrets::register(key);
/// let body = format!("{} bad key {key}", "x".repeat(90));
/// let quoted = harness_provider_http::excerpt(&body, 110);
/// assert_eq!(quoted, format!("{} bad key [redacted]", "x".repeat(90)));
/// let quoted = harness_provider_http::excerpt(&body, 105);
/// assert!(!quoted.contains("sk-excerpt"), "{quoted}");
/// assert!(quoted.ends_with('…'));
/// ```
pub fn excerpt(text: &str, max_chars: usize) -> String {
    let mut end = max_chars
        .saturating_mul(4)
        .saturating_add(REDACTION_MARGIN)
        .min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let head = harness::secrets::redact(&text[..end]);
    match head.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}…", &head[..cut]),
        // Cut at the margin only: a text of many more bytes than characters.
        None if end < text.len() => format!("{head}…"),
        None => head.into_owned(),
    }
}

/// A redirect the client did not follow: the transport follows them only
/// within the origin the request went to, since the request carries the
/// API key (see `HttpTransport`).
fn redirect_error(status: u16, headers: &HeaderMap) -> ModelError {
    let location = headers
        .get(reqwest::header::LOCATION)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let to = match location {
        Some(location) => format!("to {:?}", excerpt(&location, 200)),
        None => "without saying where".to_owned(),
    };
    ModelError::Configuration {
        message: format!(
            "the server redirected the request (HTTP {status}) {to}, which was not followed: \
             redirects are followed only within the base URL's scheme, host and port (at \
             most 5 in a row), so that the API key goes nowhere else; set the base URL to \
             the address that answers"
        ),
    }
}

fn error_message(json: &Value, body: &str, status: u16) -> String {
    let found = match json.get("error") {
        Some(Value::String(text)) => Some(text.as_str()),
        Some(error) => error.get("message").and_then(Value::as_str),
        None => json.get("message").and_then(Value::as_str),
    };
    let text = found.unwrap_or(body).trim();
    if text.is_empty() {
        return format!("HTTP {status} with an empty body");
    }
    excerpt(text, MESSAGE_LIMIT)
}

fn has_detail_reason(json: &Value, reason: &str) -> bool {
    json.pointer("/error/details")
        .and_then(Value::as_array)
        .is_some_and(|details| {
            details
                .iter()
                .any(|d| d.get("reason").and_then(Value::as_str) == Some(reason))
        })
}

fn error_code(json: &Value) -> Option<&str> {
    let error = json.get("error")?;
    error
        .get("code")
        .and_then(Value::as_str)
        .or_else(|| error.get("type").and_then(Value::as_str))
}

/// How long the provider asked to wait: `retry-after-ms` (OpenAI),
/// `retry-after` in seconds or as an HTTP date, or Google's
/// `error.details[].retryDelay` (`"1.5s"`).
pub fn parse_retry_after(headers: &HeaderMap, body: &Value) -> Option<Duration> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        return seconds(ms / 1000.0);
    }
    if let Some(value) = header("retry-after") {
        if let Ok(secs) = value.parse::<f64>() {
            return seconds(secs);
        }
        if let Some(at) = parse_http_date(value) {
            // A date in the past means now; one years away is capped like
            // a number of seconds is.
            return Some(
                at.duration_since(SystemTime::now())
                    .unwrap_or(Duration::ZERO)
                    .min(Duration::from_secs(MAX_RETRY_AFTER_SECS)),
            );
        }
    }
    body.pointer("/error/details")
        .and_then(Value::as_array)?
        .iter()
        .filter_map(|detail| detail.get("retryDelay").and_then(Value::as_str))
        .find_map(|delay| delay.strip_suffix('s')?.parse::<f64>().ok())
        .and_then(seconds)
}

/// The longest wait a provider's hint is read as (a day); the retry policy
/// caps it further (`HttpRetryPolicy::max_retry_after`).
const MAX_RETRY_AFTER_SECS: u64 = 86_400;

fn seconds(secs: f64) -> Option<Duration> {
    (secs.is_finite() && secs >= 0.0)
        .then(|| Duration::from_secs_f64(secs.min(MAX_RETRY_AFTER_SECS as f64)))
}

/// Parses an IMF-fixdate such as `Sun, 06 Nov 1994 08:49:37 GMT`.
fn parse_http_date(text: &str) -> Option<SystemTime> {
    let mut fields = text.split_whitespace();
    let _weekday = fields.next()?;
    let day: u64 = fields.next()?.parse().ok()?;
    let month = match fields.next()? {
        "Jan" => 1,
        "Feb" => 2,
        "Mar" => 3,
        "Apr" => 4,
        "May" => 5,
        "Jun" => 6,
        "Jul" => 7,
        "Aug" => 8,
        "Sep" => 9,
        "Oct" => 10,
        "Nov" => 11,
        "Dec" => 12,
        _ => return None,
    };
    let year: u64 = fields.next()?.parse().ok()?;
    let mut clock = fields.next()?.split(':').map(|n| n.parse::<u64>().ok());
    let (hour, minute, second) = (clock.next()??, clock.next()??, clock.next()??);
    // Fields out of range are not a date: a server that sends one gets its
    // hint ignored, never an overflow (years are four digits in the format).
    if fields.next()? != "GMT"
        || !(1970..=9999).contains(&year)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let secs = days_since_epoch(year, month, day)
        .checked_mul(86_400)?
        .checked_add(hour * 3600 + minute * 60 + second)?;
    UNIX_EPOCH.checked_add(Duration::from_secs(secs))
}

/// Days from 1970-01-01 to the given civil date (proleptic Gregorian).
fn days_since_epoch(year: u64, month: u64, day: u64) -> u64 {
    let (y, m) = if month <= 2 {
        (year - 1, month + 9)
    } else {
        (year, month - 3)
    };
    let era = y / 400;
    let year_of_era = y - era * 400;
    let day_of_year = (153 * m + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use reqwest::header::HeaderValue;
    use serde_json::json;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn a_500_that_says_the_models_output_was_unreadable_is_a_malformed_answer() {
        let parse = |body: &str| error_from_response(500, &HeaderMap::new(), body).0;
        let llama = r#"{"error":{"code":500,"message":"The model produced output that does not match the expected peg-native format","type":"server_error"}}"#;
        match parse(llama) {
            ModelError::MalformedResponse { message } => {
                assert!(message.contains("HTTP 500"), "{message}");
                assert!(message.contains("peg-native"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        // Inside a stream, as the same server reports it there.
        assert!(matches!(
            error_from_body(
                "server_error",
                "The model produced output that does not match the expected format"
            ),
            ModelError::MalformedResponse { .. }
        ));
        // Any other server error stays one (and is retried).
        for body in [
            r#"{"error":{"code":500,"message":"CUDA out of memory","type":"server_error"}}"#,
            "",
            "<html>Internal Server Error</html>",
        ] {
            let error = parse(body);
            assert!(
                matches!(
                    error,
                    ModelError::Overloaded {
                        status: Some(500),
                        ..
                    }
                ),
                "{body}: {error:?}"
            );
        }
        assert!(matches!(
            error_from_body("server_error", "busy"),
            ModelError::Overloaded { .. }
        ));
    }

    #[test]
    fn http_dates_parse() {
        let at = parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        assert_eq!(
            at.duration_since(UNIX_EPOCH).unwrap().as_secs(),
            784_111_777
        );
        assert!(parse_http_date("yesterday").is_none());
    }

    #[test]
    fn retry_after_sources() {
        let none = Value::Null;
        assert_eq!(
            parse_retry_after(&headers(&[("retry-after-ms", "250")]), &none),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            parse_retry_after(&headers(&[("retry-after", "3")]), &none),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            parse_retry_after(
                &headers(&[("retry-after", "Sun, 06 Nov 1994 08:49:37 GMT")]),
                &none
            ),
            Some(Duration::ZERO),
            "a date in the past means now"
        );
        let google = json!({"error": {"details": [
            {"@type": "type.googleapis.com/google.rpc.Help"},
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1.5s"}
        ]}});
        assert_eq!(
            parse_retry_after(&HeaderMap::new(), &google),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(parse_retry_after(&HeaderMap::new(), &none), None);
        // Dates far ahead are capped at a day; impossible ones are ignored;
        // none of them overflows.
        for far in [
            "Fri, 31 Dec 9999 23:59:59 GMT",
            "Mon, 01 Jan 5000 00:00:00 GMT",
        ] {
            assert_eq!(
                parse_retry_after(&headers(&[("retry-after", far)]), &none),
                Some(Duration::from_secs(86_400)),
                "{far}"
            );
        }
        for bad in [
            "Sun, 06 Nov 18446744073709551615 08:49:37 GMT",
            "Sun, 06 Nov 99999 08:49:37 GMT",
            "Sun, 06 Nov 2030 99:99:99 GMT",
            "Sun, 06 Nov 2030 24:00:00 GMT",
            "Sun, 32 Nov 2030 08:49:37 GMT",
            "Sun, 00 Nov 2030 08:49:37 GMT",
            "Sun, 06 Nov 1969 08:49:37 GMT",
            "Sun, 06 Foo 2030 08:49:37 GMT",
            "Sun, 06 Nov 2030 08:49:37 UTC",
            "Sun, 06 Nov 2030 8:49",
        ] {
            assert_eq!(
                parse_retry_after(&headers(&[("retry-after", bad)]), &none),
                None,
                "{bad}"
            );
        }
        for huge in ["1e308", "inf", "NaN", "-5", "18446744073709551616"] {
            let got = parse_retry_after(&headers(&[("retry-after", huge)]), &none);
            assert!(
                got.is_none_or(|d| d <= Duration::from_secs(86_400)),
                "{huge}: {got:?}"
            );
            let got = parse_retry_after(&headers(&[("retry-after-ms", huge)]), &none);
            assert!(
                got.is_none_or(|d| d <= Duration::from_secs(86_400)),
                "{huge}: {got:?}"
            );
        }
    }

    #[test]
    fn statuses_map_to_typed_errors() {
        let none = HeaderMap::new();
        let body = r#"{"error": {"message": "bad key", "type": "invalid_request_error"}}"#;
        assert_eq!(
            error_from_response(401, &none, body).0,
            ModelError::Auth {
                message: "bad key".into()
            }
        );
        let (limited, wait) = error_from_response(429, &headers(&[("retry-after", "2")]), "{}");
        assert_eq!(wait, Some(Duration::from_secs(2)));
        assert!(matches!(
            limited,
            ModelError::RateLimited {
                retry_after: Some(_),
                ..
            }
        ));
        let quota = r#"{"error": {"message": "You exceeded your current quota", "code": "insufficient_quota"}}"#;
        assert!(matches!(
            error_from_response(429, &none, quota).0,
            ModelError::Auth { .. }
        ));
        assert_eq!(
            error_from_response(529, &none, "").0,
            ModelError::Overloaded {
                status: Some(529),
                message: "HTTP 529 with an empty body".into(),
                retry_after: None,
            }
        );
        assert_eq!(
            error_from_response(404, &none, r#"{"error": "model 'x' not found"}"#).0,
            ModelError::InvalidRequest {
                status: Some(404),
                message: "model 'x' not found".into()
            }
        );
        assert_eq!(
            error_from_response(408, &none, "").0,
            ModelError::Overloaded {
                status: Some(408),
                message: "HTTP 408 with an empty body".into(),
                retry_after: None,
            }
        );
        assert!(error_from_response(408, &none, "").0.is_retryable());
    }

    #[test]
    fn an_unavailable_server_keeps_the_wait_it_asked_for() {
        let none = HeaderMap::new();
        for (status, pairs, wait) in [
            (
                503,
                &[("retry-after", "3")][..],
                Some(Duration::from_secs(3)),
            ),
            (
                529,
                &[("retry-after-ms", "250")][..],
                Some(Duration::from_millis(250)),
            ),
            (
                502,
                &[("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")][..],
                Some(Duration::ZERO),
            ),
            (504, &[("retry-after", "soon")][..], None),
            (
                408,
                &[("retry-after", "1")][..],
                Some(Duration::from_secs(1)),
            ),
            (500, &[][..], None),
        ] {
            let (error, asked) = error_from_response(status, &headers(pairs), "busy");
            assert!(
                matches!(&error, ModelError::Overloaded { status: Some(s), .. } if *s == status),
                "{status}: {error:?}"
            );
            assert_eq!(error.retry_after(), wait, "{status}: {error:?}");
            assert_eq!(asked, wait, "{status}");
            if let Some(wait) = wait {
                assert!(
                    error.to_string().contains(&format!("retry after {wait:?}")),
                    "{error}"
                );
            }
        }
        let (error, _) = error_from_response(503, &none, "busy");
        assert!(error.to_string().ends_with("; retry later"), "{error}");
    }

    #[test]
    fn error_codes_in_a_body_map_as_statuses() {
        assert!(matches!(
            error_from_code(429, "slow down"),
            ModelError::RateLimited {
                retry_after: None,
                ..
            }
        ));
        assert!(matches!(
            error_from_code(503, "busy"),
            ModelError::Overloaded {
                status: Some(503),
                ..
            }
        ));
        assert!(matches!(
            error_from_code(401, "who"),
            ModelError::Auth { .. }
        ));
        assert!(matches!(
            error_from_code(404, "no model"),
            ModelError::InvalidRequest {
                status: Some(404),
                ..
            }
        ));
        assert_eq!(
            error_from_code(200, "odd"),
            ModelError::other("error code 200: odd")
        );
        assert_eq!(
            error_from_code(302, "odd"),
            ModelError::other("error code 302: odd")
        );
    }

    #[test]
    fn body_error_kinds_map_to_typed_errors() {
        assert!(matches!(
            error_from_body("overloaded_error", "Overloaded"),
            ModelError::Overloaded { status: None, .. }
        ));
        assert!(matches!(
            error_from_body("RESOURCE_EXHAUSTED", "quota"),
            ModelError::RateLimited { .. }
        ));
        assert_eq!(
            error_from_body("mystery", "m"),
            ModelError::other("mystery: m")
        );
    }

    /// No `window` bytes of `key` in a row are in `text`.
    fn assert_no_part_of(key: &str, text: &str, window: usize, case: &str) {
        for part in key.as_bytes().windows(window) {
            let part = std::str::from_utf8(part).unwrap();
            assert!(!text.contains(part), "{case}: {part:?} is in {text:?}");
        }
    }

    #[test]
    fn a_key_at_the_cut_of_a_quoted_message_is_redacted_whole() {
        let key = "sk-ant-api03-STRADDLE-AAAABBBBCCCCDDDDEEEEFFFF";
        harness::secrets::register(key);
        // The key starting before, across and right at the 600-character
        // cut, in the vendor's JSON and in a plain body, with ASCII and
        // multi-byte padding.
        for pad in (540..=605).step_by(3) {
            for filler in ["x", "é"] {
                let message = format!("{}{key} trailing text", filler.repeat(pad));
                let json = json!({"error": {"type": "authentication_error", "message": message}});
                for body in [json.to_string(), message.clone()] {
                    for status in [401, 400, 429, 500, 404] {
                        let (error, _) = error_from_response(status, &HeaderMap::new(), &body);
                        let case = format!("pad {pad} of {filler:?}, status {status}");
                        assert_no_part_of(key, &error.to_string(), 8, &case);
                    }
                }
            }
        }
        // The quote itself: at most the characters asked for, then `…`.
        for max in [0, 1, 10, 45, 46, 47, 100] {
            let text = format!("{}{key}{}", "y".repeat(30), "z".repeat(30));
            let quoted = excerpt(&text, max);
            assert_no_part_of(key, &quoted, 8, &format!("max {max}"));
            assert!(
                quoted.trim_end_matches('…').chars().count() <= max,
                "{quoted}"
            );
        }
        assert_eq!(excerpt("short", 10), "short");
        assert_eq!(excerpt("", 10), "");
        // A huge text is quoted from its start only.
        let huge = format!("{key}{}", "w".repeat(8 << 20));
        assert_eq!(excerpt(&huge, 15), "[redacted]wwwww…");
    }

    #[test]
    fn a_redirect_not_followed_is_a_configuration_error_naming_where() {
        for status in [301, 302, 303, 307, 308, 300, 399] {
            for (location, shown) in [
                (
                    Some("http://elsewhere.example/v1/messages"),
                    "elsewhere.example",
                ),
                (Some("/v1/other"), "/v1/other"),
                (None, "without saying where"),
            ] {
                let mut map = HeaderMap::new();
                if let Some(location) = location {
                    map.insert("location", HeaderValue::from_static(location));
                }
                let (error, retry) = error_from_response(status, &map, "moved");
                let text = error.to_string();
                assert!(
                    matches!(error, ModelError::Configuration { .. }),
                    "{status}: {text}"
                );
                assert!(retry.is_none());
                assert!(
                    text.contains(&format!("HTTP {status}")) && text.contains(shown),
                    "{status}: {text}"
                );
                assert!(!error.is_retryable(), "{status}");
            }
        }
        // A location that quotes a key, or goes on and on.
        let key = "sk-loc-QWERTYzxcvb-0123456789";
        harness::secrets::register(key);
        let long = format!("http://x.example/{key}/{}", "p".repeat(100_000));
        let mut map = HeaderMap::new();
        map.insert("location", HeaderValue::from_str(&long).unwrap());
        let (error, _) = error_from_response(307, &map, "");
        let text = error.to_string();
        assert_no_part_of(key, &text, 8, "location");
        assert!(text.len() < 1000, "{} bytes", text.len());
    }
}
