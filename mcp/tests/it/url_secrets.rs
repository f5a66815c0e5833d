//! Keys in an HTTP server's URL: in its query (`?api_key=…`, as hosted MCP
//! servers often take them), its fragment or its userinfo. None may reach
//! an error, a tool result the model reads, or a `Debug` output; the URL's
//! other parameters are still shown.

use std::net::{Ipv4Addr, TcpListener};

use harness::llm::ToolCall;
use harness_mcp::{McpClient, McpError, McpOptions};
use serde_json::json;

use super::*;

/// A local port nothing listens on.
fn closed_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The texts an error shows.
fn texts_of(error: &McpError) -> [String; 2] {
    [error.to_string(), format!("{error:?}")]
}

fn assert_hidden(texts: &[String], hidden: &[&str], case: &str) {
    for text in texts {
        for secret in hidden {
            assert!(!text.contains(secret), "{case}: {secret:?} in {text}");
        }
    }
}

#[tokio::test]
async fn keys_in_a_url_s_query_or_fragment_are_in_no_error() {
    let base = format!("http://127.0.0.1:{}/mcp", closed_port());
    // (what follows the path, with `{K}` for the key; what must not be
    // shown besides the key; what must be).
    let cases: &[(&str, &[&str], &[&str])] = &[
        ("?api_key={K}", &[], &["api_key=***"]),
        (
            "?version=2&token={K}&lang=en",
            &[],
            &["version=2", "lang=en"],
        ),
        // Names compared case-insensitively and percent-decoded.
        ("?Api%5FKey={K}", &[], &["Api%5FKey=***"]),
        ("?%74oken={K}", &[], &[]),
        ("?APIKEY={K}&api-key={K}", &[], &[]),
        ("?key={K}", &[], &[]),
        ("?access_token={K}", &[], &[]),
        ("?auth={K}", &[], &[]),
        ("?Authorization={K}", &[], &[]),
        ("?secret={K}&client_secret={K}", &[], &[]),
        ("?password={K}&passwd={K}", &[], &[]),
        ("?sig={K}", &[], &[]),
        (
            "?X-Amz-Date=20250101T000000Z&X-Amz-Signature={K}",
            &[],
            &["X-Amz-Date=20250101T000000Z"],
        ),
        ("?code={K}&state=abc", &[], &["state=abc"]),
        // In the fragment too (never sent, but shown), and in both.
        ("#access_token={K}", &[], &[]),
        ("?api_key={K}#api_key={K}", &[], &[]),
        // Odd forms: empty pieces, a parameter without a value, `;`.
        ("?&&flag&token={K}&=x", &[], &["flag"]),
        // A key shorter than harness::secrets::MIN_SECRET_LEN is not
        // registered, but the crate's texts still show the URL without it.
        ("?key=Zq7x&v=1", &["Zq7x"], &["v=1"]),
    ];
    for (i, (tail, also_hidden, shown)) in cases.iter().enumerate() {
        let key = format!("sk-url-{i}-0123456789abcdef");
        let url = format!("{base}{}", tail.replace("{K}", &key));
        let options = McpOptions::default().connect_timeout(Duration::from_secs(10));
        let error = McpClient::http_with("hosted", &url, options.clone())
            .await
            .unwrap_err();
        let texts = texts_of(&error);
        let mut hidden = vec![key.as_str()];
        hidden.extend(also_hidden.iter());
        assert_hidden(&texts, &hidden, tail);
        for part in *shown {
            assert!(
                texts[0].contains(part),
                "{tail}: {part:?} not in {}",
                texts[0]
            );
        }
        assert!(matches!(error, McpError::Connect { .. }), "{tail}: {error}");
        assert!(!format!("{options:?}").contains(&key));
        if also_hidden.is_empty() {
            // Registered, so a server that echoes it does not show it.
            assert!(harness::secrets::contains_secret(&key), "{tail}");
        }
    }

    // A key percent-encoded in the URL: hidden in both forms.
    let decoded = "sk-url-pct/0123456789+abc def";
    let encoded = "sk-url-pct%2F0123456789%2Babc%20def";
    let url = format!("{base}?token={encoded}&version=2");
    let error = McpClient::http_with("hosted", &url, McpOptions::default())
        .await
        .unwrap_err();
    let texts = texts_of(&error);
    assert_hidden(&texts, &[encoded, decoded, "0123456789"], "percent-encoded");
    assert!(texts[0].contains("version=2"), "{}", texts[0]);
    assert!(harness::secrets::contains_secret(decoded));

    // In the crate's own errors: a URL that is not http(s), or not a URL.
    for (url, key) in [
        (
            "ftp://127.0.0.1/mcp?version=2&token={K}",
            "sk-url-ftp-0123456789abcdef",
        ),
        (
            "127.0.0.1:8000/mcp?api_key={K}",
            "sk-url-noscheme-0123456789ab",
        ),
        (
            "not a url?version=2&api_key={K}",
            "sk-url-nourl-0123456789abcd",
        ),
    ] {
        let url = url.replace("{K}", key);
        let error = McpClient::http("hosted", &url).await.unwrap_err();
        let texts = texts_of(&error);
        assert_hidden(&texts, &[key], &url);
        assert!(texts[0].contains("=***"), "{url}: {}", texts[0]);
        if url.contains("version=2") {
            assert!(texts[0].contains("version=2"), "{url}: {}", texts[0]);
        }
    }
    // A password in the userinfo, as before.
    let url = format!(
        "http://bob:sk-url-userinfo-0123456789@127.0.0.1:{}/mcp",
        closed_port()
    );
    let error = McpClient::http("hosted", &url).await.unwrap_err();
    assert_hidden(
        &texts_of(&error),
        &["sk-url-userinfo-0123456789"],
        "userinfo",
    );
}

#[tokio::test]
async fn a_key_in_the_query_reaches_no_tool_result_when_the_server_dies() {
    let server = super::http::start().await;
    let key = "sk-url-live-0123456789abcdef";
    let url = format!("{}?version=2&api_key={key}", server.url);
    let options = McpOptions::default().call_timeout(PATIENCE);
    let client = McpClient::http_with("hosted", &url, options.clone())
        .await
        .unwrap();
    assert_hidden(
        &[format!("{client:?}"), format!("{options:?}")],
        &[key],
        "debug",
    );
    let tools = client.tool_set();
    let report = async |name: &str| {
        tools
            .dispatch_or_report(&ToolCall::new("c", name, json!({})))
            .await
    };

    // The server saw the key (it is in the URL it was sent); the model
    // does not, though it sees the rest of the URL.
    let echoed = report("request_url").await;
    assert!(!echoed.is_error, "{}", echoed.content);
    assert!(echoed.content.contains("version=2"), "{}", echoed.content);
    assert_hidden(std::slice::from_ref(&echoed.content), &[key], "echoed");

    // The server dies in the call, then is not there for the next ones.
    let died = report("die").await;
    assert!(died.is_error);
    let mut seen = vec![died.content];
    for _ in 0..2 {
        let after = tools
            .dispatch_or_report(&ToolCall::new("c", "echo", json!({"text": "hi"})))
            .await;
        assert!(after.is_error, "{}", after.content);
        seen.push(after.content);
        let error = client
            .call("echo", json!({"text": "hi"}))
            .await
            .unwrap_err();
        seen.extend(texts_of(&error));
    }
    seen.push(format!("{client:?}"));
    assert_hidden(&seen, &[key], "after the server died");
    assert!(
        seen.iter().any(|text| text.contains("version=2")),
        "the URL is shown: {seen:?}"
    );
}
