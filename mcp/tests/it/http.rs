//! A server on streamable HTTP, started as its own process.

use std::net::{Ipv4Addr, TcpListener};
use std::process::Stdio;

use harness::llm::ToolCall;
use harness_mcp::{McpClient, McpError, McpOptions};
use serde_json::json;
use tokio::process::Child;

use super::*;

/// The server's process, killed when dropped.
pub(super) struct Server {
    pub(super) url: String,
    _child: Child,
}

/// Starts the test server on a free port and waits until it accepts
/// connections.
pub(super) async fn start() -> Server {
    start_with_token(None).await
}

/// [`start`], the server requiring `token` as a bearer token if given.
async fn start_with_token(token: Option<&str>) -> Server {
    let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut command = tokio::process::Command::new(python());
    command
        .arg(server_script())
        .args(["http", &port.to_string()])
        .stdout(Stdio::null())
        .kill_on_drop(true);
    if let Some(token) = token {
        command.env("HARNESS_MCP_TOKEN", token);
    }
    let mut child = command.spawn().unwrap();
    let ready = async {
        loop {
            if tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port))
                .await
                .is_ok()
            {
                return;
            }
            if let Some(status) = child.try_wait().unwrap() {
                panic!("the MCP test server exited before listening: {status}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(PATIENCE, ready).await.unwrap();
    Server {
        url: format!("http://127.0.0.1:{port}/mcp"),
        _child: child,
    }
}

async fn connect(server: &Server) -> McpClient {
    McpClient::http("http-server", &server.url)
        .await
        .unwrap()
        .with_call_timeout(PATIENCE)
}

#[tokio::test]
async fn tools_are_listed_and_called_over_streamable_http() {
    let server = start().await;
    let client = connect(&server).await;
    let tools = client.tool_set();
    for name in [
        "add",
        "echo",
        "fail",
        "unlock",
        "die",
        "exit_later",
        "environment",
    ] {
        assert!(tools.contains(name), "{name}: {tools:?}");
    }
    let result = tools
        .dispatch(&ToolCall::new("c1", "add", json!({ "a": -2, "b": 5 })))
        .await
        .unwrap();
    assert_eq!(result.content, "3");

    let error = client
        .call("fail", json!({ "reason": "quota" }))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, McpError::ToolFailed { server, tool, message }
            if server == "http-server" && tool == "fail" && message.contains("quota")),
        "{error}"
    );
}

#[tokio::test]
async fn a_changed_tool_list_is_listed_again_over_http() {
    let server = start().await;
    let client = connect(&server).await;
    let mut listings = client.listings();
    listings.borrow_and_update();
    assert_eq!(client.call("unlock", json!({})).await.unwrap(), "unlocked");
    tokio::time::timeout(PATIENCE, listings.changed())
        .await
        .unwrap()
        .unwrap();
    assert!(client.specs().iter().any(|s| s.name == "bonus"));
    assert_eq!(
        client.call("bonus", json!({ "word": "ok" })).await.unwrap(),
        "OK!"
    );
}

#[tokio::test]
async fn a_server_that_dies_mid_call_is_a_typed_error_over_http() {
    let server = start().await;
    let client = connect(&server).await;
    let error = client.call("die", json!({})).await.unwrap_err();
    assert!(
        matches!(&error, McpError::Disconnected { server, tool, .. }
            if server == "http-server" && tool == "die"),
        "{error}"
    );
    let result = client
        .tool_set()
        .dispatch_or_report(&ToolCall::new("c2", "add", json!({ "a": 1, "b": 1 })))
        .await;
    assert!(result.is_error, "{}", result.content);
    assert!(
        result.content.contains("`http-server`"),
        "{}",
        result.content
    );
    // The client knows: it is closed.
    let closed = async {
        while !client.is_closed() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(PATIENCE, closed)
        .await
        .expect("is_closed() stays false after the server exited");
}

#[tokio::test]
async fn nothing_listening_is_a_connect_error() {
    let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let error = tokio::time::timeout(PATIENCE, McpClient::http("nobody", &url))
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(&error, McpError::Connect { server, .. } if server == "nobody"),
        "{error}"
    );
    // What failed, down to the operating system's word for it, and not
    // the SDK's type names.
    let message = error.to_string();
    assert!(
        message.contains(&format!("error sending request for url ({url})"))
            && message.contains("Connection refused")
            && !message.contains("rmcp::"),
        "{message}"
    );
}

#[tokio::test]
async fn a_url_that_is_not_http_is_refused_saying_so() {
    for (url, expected) in [
        (
            "not a url",
            "\"not a url\" is not a URL (relative URL without a base); give the server's endpoint, e.g. `http://127.0.0.1:8000/mcp`",
        ),
        (
            "ftp://x/mcp",
            "the URL `ftp://x/mcp` is not an http:// or https:// URL (its scheme is `ftp`)",
        ),
        (
            "ftp://user:pa55word-SECRET@x/mcp",
            "the URL `ftp://user:***@x/mcp` is not an http:// or https:// URL (its scheme is `ftp`)",
        ),
    ] {
        let error = tokio::time::timeout(PATIENCE, McpClient::http("bad-url", url))
            .await
            .unwrap()
            .unwrap_err();
        assert_eq!(
            error,
            McpError::Connect {
                server: "bad-url".into(),
                message: expected.into()
            },
            "{url}"
        );
    }
}

#[tokio::test]
async fn a_bearer_token_is_sent_and_a_refused_one_is_a_connect_error() {
    let server = start_with_token(Some("s3cret")).await;
    let options = McpOptions::default().call_timeout(PATIENCE);
    for wrong in [None, Some("guess")] {
        let mut options = options.clone();
        if let Some(token) = wrong {
            options = options.bearer_token(token);
        }
        let error = tokio::time::timeout(
            PATIENCE,
            McpClient::http_with("guarded", &server.url, options),
        )
        .await
        .unwrap()
        .unwrap_err();
        assert!(
            matches!(&error, McpError::Connect { server, .. } if server == "guarded"),
            "{wrong:?}: {error}"
        );
    }
    let client = McpClient::http_with("guarded", &server.url, options.bearer_token("s3cret"))
        .await
        .unwrap();
    assert_eq!(
        client
            .call("add", json!({ "a": 20, "b": 22 }))
            .await
            .unwrap(),
        "42"
    );
    assert!(!format!("{:?}", McpOptions::default().bearer_token("s3cret")).contains("s3cret"));
}
