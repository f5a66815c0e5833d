//! A server on streamable HTTP, started as its own process.

use std::net::{Ipv4Addr, TcpListener};
use std::process::Stdio;

use harness::llm::ToolCall;
use harness_mcp::{McpClient, McpError};
use serde_json::json;
use tokio::process::Child;

use super::*;

/// The server's process, killed when dropped.
struct Server {
    url: String,
    _child: Child,
}

/// Starts the test server on a free port and waits until it accepts
/// connections.
async fn start() -> Server {
    let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = tokio::process::Command::new(python())
        .arg(server_script())
        .args(["http", &port.to_string()])
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
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
    for name in ["add", "echo", "fail", "unlock", "die"] {
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
}
