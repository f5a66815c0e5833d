//! The key never leaves in an error: a server that quotes it in its 401
//! body, in a stream's error event or in a body that is not JSON gets an
//! error whose text says `[redacted]` instead. And a request that quotes
//! the key is sent with it redacted.

use super::{KEY, ask, message_start, model, requests, stream_of};
use harness::llm::{LanguageModel, Message, ModelError, ModelRequest, collect_stream};
use serde_json::json;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

/// Every text the error shows: `Display`, `Debug` (plain and pretty) and
/// the same of each error in its source chain.
fn texts(error: &ModelError) -> Vec<String> {
    let mut out = vec![
        error.to_string(),
        format!("{error:?}"),
        format!("{error:#?}"),
    ];
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        out.push(cause.to_string());
        out.push(format!("{cause:?}"));
        source = cause.source();
    }
    out
}

/// No text of `error` has the key; its message has `markers` markers.
fn assert_redacted(error: &ModelError, markers: usize, case: &str) {
    for text in texts(error) {
        assert!(!text.contains(KEY), "{case}: {text}");
    }
    let shown = error.to_string();
    assert_eq!(
        shown.matches("[redacted]").count(),
        markers,
        "{case}: {shown}"
    );
}

fn vendor_error(kind: &str, message: String) -> serde_json::Value {
    json!({ "type": "error", "error": { "type": kind, "message": message } })
}

#[tokio::test]
async fn a_401_body_quoting_the_key_gives_an_error_without_it() {
    for (case, body, markers) in [
        (
            "vendor JSON",
            ResponseTemplate::new(401).set_body_json(vendor_error(
                "authentication_error",
                format!("invalid x-api-key: {KEY}"),
            )),
            1,
        ),
        (
            "plain text",
            ResponseTemplate::new(401).set_body_string(format!("x-api-key {KEY} is not valid")),
            1,
        ),
        (
            "inside a longer word",
            ResponseTemplate::new(403).set_body_json(vendor_error(
                "permission_error",
                format!("key-id:{KEY}:org-7 may not use this model"),
            )),
            1,
        ),
        (
            "twice",
            ResponseTemplate::new(401).set_body_string(format!("{KEY}{KEY} (the key, sent twice)")),
            2,
        ),
    ] {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(body)
            .mount(&server)
            .await;
        let model = model(&server);
        let error = model.complete(&ask("Hi")).await.unwrap_err();
        assert!(matches!(error, ModelError::Auth { .. }), "{case}: {error}");
        assert_redacted(&error, markers, case);
        let error = match model.stream(&ask("Hi")).await {
            Err(error) => error,
            Ok(_) => panic!("{case}: a stream of a 401"),
        };
        assert_redacted(&error, markers, case);
    }
}

#[tokio::test]
async fn other_errors_and_streams_quoting_the_key_give_errors_without_it() {
    for (case, status, kind) in [
        ("rate limit", 429, "rate_limit_error"),
        ("overloaded", 529, "overloaded_error"),
        ("bad request", 400, "invalid_request_error"),
    ] {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(
                ResponseTemplate::new(status)
                    .set_body_json(vendor_error(kind, format!("about key {KEY}"))),
            )
            .mount(&server)
            .await;
        let error = model(&server).complete(&ask("Hi")).await.unwrap_err();
        assert_redacted(&error, 1, case);
    }

    // A 200 whose body is not JSON.
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_string(format!("key={KEY}")))
        .mount(&server)
        .await;
    let error = model(&server).complete(&ask("Hi")).await.unwrap_err();
    assert!(
        matches!(error, ModelError::MalformedResponse { .. }),
        "{error}"
    );
    assert_redacted(&error, 1, "not JSON");

    // An error event in the middle of a stream.
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(stream_of(&[
            message_start(),
            vendor_error("authentication_error", format!("{KEY} was revoked")),
        ]))
        .mount(&server)
        .await;
    let error = collect_stream(model(&server).stream(&ask("Hi")).await.unwrap())
        .await
        .unwrap_err();
    assert!(matches!(error, ModelError::Auth { .. }), "{error}");
    assert_redacted(&error, 1, "error event");
}

#[tokio::test]
async fn a_request_quoting_the_key_is_sent_without_it() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(401).set_body_string("no"))
        .mount(&server)
        .await;
    let request = ModelRequest::builder()
        .system(format!("The key is {KEY}."))
        .message(Message::user(format!("{KEY}?")))
        .build();
    let _ = model(&server).complete(&request).await;
    let sent = requests(&server).await[0].to_string();
    assert!(!sent.contains(KEY), "{sent}");
    assert_eq!(sent.matches("[redacted]").count(), 2, "{sent}");
    assert!(
        sent.contains("claude-test"),
        "the rest is as it was: {sent}"
    );
}

#[tokio::test]
async fn a_redirect_to_another_host_does_not_carry_the_key() {
    // Another host: whatever reaches it is a leak of the key and the body.
    let elsewhere = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(404))
        .expect(0)
        .mount(&elsewhere)
        .await;
    let port = elsewhere.address().port();
    for status in [301, 302, 303, 307, 308] {
        for target in [
            format!("{}/v1/anywhere", elsewhere.uri()),
            format!("http://localhost:{port}/v1/anywhere"),
            format!("https://127.0.0.1:{port}/v1/anywhere"),
        ] {
            let server = MockServer::start().await;
            Mock::given(method("POST"))
                .respond_with(
                    ResponseTemplate::new(status).insert_header("location", target.as_str()),
                )
                .mount(&server)
                .await;
            let case = format!("{status} to {target}");
            let error = model(&server).complete(&ask("Hi")).await.unwrap_err();
            assert!(
                matches!(error, ModelError::Configuration { .. }),
                "{case}: {error}"
            );
            assert!(error.to_string().contains(&target), "{case}: {error}");
            assert_redacted(&error, 0, &case);
            let error = match model(&server).stream(&ask("Hi")).await {
                Err(error) => error,
                Ok(_) => panic!("{case}: a stream of a redirect"),
            };
            assert!(
                matches!(error, ModelError::Configuration { .. }),
                "{case}: {error}"
            );
        }
    }
    let leaked = elsewhere.received_requests().await.unwrap_or_default();
    assert!(leaked.is_empty(), "the other host got {leaked:?}");
}

#[tokio::test]
async fn a_stream_event_that_is_not_json_is_quoted_briefly_and_without_the_key() {
    // A broken event of a megabyte, the key at or near the end of what is
    // quoted (before, the whole event was quoted: megabytes, and a key
    // anywhere in it).
    for pad in [0usize, 150, 185, 190, 195, 199, 200, 205] {
        let junk = format!("{{\"x\": \"{}{KEY}{}", "q".repeat(pad), "z".repeat(1 << 20));
        let body = format!(
            "event: message_start\ndata: {}\n\nevent: content_block_delta\ndata: {junk}\n\n",
            message_start()
        );
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(200).set_body_raw(body, "text/event-stream"))
            .mount(&server)
            .await;
        let error = collect_stream(model(&server).stream(&ask("Hi")).await.unwrap())
            .await
            .unwrap_err();
        let case = format!("pad {pad}");
        assert!(
            matches!(error, ModelError::MalformedResponse { .. }),
            "{case}: {error}"
        );
        let text = error.to_string();
        assert!(text.len() < 1024, "{case}: {} bytes", text.len());
        for part in KEY.as_bytes().windows(8) {
            let part = std::str::from_utf8(part).unwrap_or_default();
            assert!(!text.contains(part), "{case}: {part:?} in {text}");
        }
    }
}
