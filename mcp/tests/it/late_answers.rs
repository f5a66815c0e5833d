//! An answer over [`McpOptions::max_message_bytes`] that comes after its
//! call gave up (timed out) fails no other call, over stdio and HTTP, with
//! the Python SDK's server; an oversized answer to a call that waits still
//! fails that call at once.

use std::time::Instant;

use harness::llm::{ToolCall, ToolSet};
use harness_mcp::{McpClient, McpError, McpOptions};
use serde_json::json;

use super::*;

const LIMIT: usize = 1 << 20;

fn options() -> McpOptions {
    McpOptions::default()
        .max_message_bytes(LIMIT)
        .call_timeout(Duration::from_millis(300))
        .connect_timeout(PATIENCE)
}

/// A call made through a tool set, as a model's is: its text, and whether
/// it failed.
async fn report(tools: &ToolSet, name: &str, arguments: serde_json::Value) -> (bool, String) {
    let result = tools
        .dispatch_or_report(&ToolCall::new("c", name, arguments))
        .await;
    (result.is_error, result.content)
}

async fn the_late_answer_fails_no_other_call(client: McpClient, transport: &str) {
    // The server does nothing for a second, then sends 4 MiB: after the
    // call gave up.
    let error = client
        .call("huge", json!({"n": 4 * LIMIT, "delay": 1.0}))
        .await
        .unwrap_err();
    assert!(
        matches!(error, McpError::Timeout { .. }),
        "{transport}: {error}"
    );
    // Calls made meanwhile wait for the server, and get their answers.
    let client = client.with_call_timeout(PATIENCE);
    let tools = client.tool_set();
    let started = Instant::now();
    let (first, second) = tokio::join!(
        report(&tools, "slow", json!({"seconds": 1.5})),
        report(&tools, "echo", json!({"text": "still here"})),
    );
    assert_eq!(
        first,
        (false, "slept 1.5".to_owned()),
        "{transport}: after {:?}",
        started.elapsed()
    );
    assert_eq!(second, (false, "still here".to_owned()), "{transport}");

    // An oversized answer to a call that waits fails it, at once.
    let started = Instant::now();
    let error = client
        .call("huge", json!({"n": 4 * LIMIT}))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, McpError::BadMessage { tool, problem, .. }
            if tool == "huge" && problem.contains("a message of more than 1048576 bytes")),
        "{transport}: {error}"
    );
    assert!(started.elapsed() < PATIENCE / 2, "{:?}", started.elapsed());
    assert_eq!(
        client.call("echo", json!({"text": "ok"})).await.unwrap(),
        "ok"
    );
}

#[tokio::test]
async fn a_late_oversized_answer_fails_no_other_call_over_stdio() {
    let mut command = tokio::process::Command::new(python());
    command.arg(server_script()).arg("stdio");
    let client = McpClient::stdio_with("late", command, options())
        .await
        .unwrap();
    the_late_answer_fails_no_other_call(client, "stdio").await;
}

#[tokio::test]
async fn a_late_oversized_answer_fails_no_other_call_over_http() {
    let server = super::http::start().await;
    let client = McpClient::http_with("late", &server.url, options())
        .await
        .unwrap();
    the_late_answer_fails_no_other_call(client, "http").await;
}
