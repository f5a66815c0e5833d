//! A server started as a child process, over its stdin and stdout.

use harness::llm::{ToolCall, ToolError};
use harness_mcp::{McpClient, McpError, McpOptions};
use serde_json::json;

use super::*;

async fn connect() -> McpClient {
    let mut command = tokio::process::Command::new(python());
    command.arg(server_script()).arg("stdio");
    McpClient::stdio("pytest-server", command)
        .await
        .unwrap()
        .with_call_timeout(PATIENCE)
}

#[tokio::test]
async fn the_servers_tools_become_a_tool_set_that_calls_them() {
    let client = connect().await;
    let mut names: Vec<String> = client.specs().into_iter().map(|s| s.name).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "add",
            "die",
            "echo",
            "environment",
            "exit_later",
            "fail",
            "huge",
            "request_url",
            "slow",
            "unlock"
        ]
    );

    let tools = client.tool_set();
    let add = tools.specs().into_iter().find(|s| s.name == "add").unwrap();
    assert_eq!(add.description, "Adds two integers.");
    assert_eq!(add.parameters["properties"]["a"]["type"], "integer");
    assert_eq!(add.parameters["required"], json!(["a", "b"]));

    let result = tools
        .dispatch(&ToolCall::new("c1", "add", json!({ "a": 2, "b": 40 })))
        .await
        .unwrap();
    assert_eq!((result.content.as_str(), result.is_error), ("42", false));
    let echoed = client
        .call("echo", json!({ "text": "multi\nline ✓" }))
        .await
        .unwrap();
    assert_eq!(echoed, "multi\nline ✓");
}

#[tokio::test]
async fn a_tool_error_is_a_failed_result_naming_the_server_and_the_tool() {
    let client = connect().await;
    let call = ToolCall::new("c1", "fail", json!({ "reason": "disk full" }));
    let error = client.tool_set().dispatch(&call).await.unwrap_err();
    let ToolError::Failed { tool, message } = &error else {
        panic!("{error}");
    };
    assert_eq!(tool, "fail");
    assert!(
        message.contains("MCP server `pytest-server`") && message.contains("disk full"),
        "{message}"
    );
    let result = client.tool_set().dispatch_or_report(&call).await;
    assert!(result.is_error);
    assert!(
        result.content.contains("failed on purpose: disk full"),
        "{}",
        result.content
    );

    // Arguments the tool's schema refuses, and a tool the server does not have.
    for (tool, arguments) in [
        ("add", json!({ "a": "two", "b": 1 })),
        ("add", json!({ "a": 1 })),
        ("no_such_tool", json!({})),
    ] {
        let error = client.call(tool, arguments.clone()).await.unwrap_err();
        let message = error.to_string();
        assert!(
            matches!(
                &error,
                McpError::ToolFailed { .. } | McpError::Refused { .. }
            ),
            "{message}"
        );
        assert!(
            message.contains("`pytest-server`") && message.contains(&format!("`{tool}`")),
            "{message}"
        );
    }
}

#[tokio::test]
async fn arguments_that_are_not_an_object_are_refused_before_sending() {
    let client = connect().await;
    for (arguments, found) in [
        (json!([1, 2]), "an array"),
        (json!("a=1"), "a string"),
        (json!(7), "a number"),
    ] {
        let error = client.call("add", arguments).await.unwrap_err();
        assert_eq!(
            error,
            McpError::InvalidArguments {
                server: "pytest-server".into(),
                tool: "add".into(),
                found
            }
        );
    }
    // The connection is still fine.
    assert_eq!(
        client.call("add", json!({ "a": 1, "b": 1 })).await.unwrap(),
        "2"
    );
}

#[tokio::test]
async fn a_changed_tool_list_is_listed_again() {
    let client = connect().await;
    let mut listings = client.listings();
    listings.borrow_and_update();
    assert!(!client.tool_set().contains("bonus"));

    assert_eq!(client.call("unlock", json!({})).await.unwrap(), "unlocked");
    tokio::time::timeout(PATIENCE, listings.changed())
        .await
        .unwrap()
        .unwrap();
    let tools = client.tool_set();
    assert!(tools.contains("bonus"), "{tools:?}");
    let result = tools
        .dispatch(&ToolCall::new("c2", "bonus", json!({ "word": "mcp" })))
        .await
        .unwrap();
    assert_eq!(result.content, "MCP!");
}

#[tokio::test]
async fn a_server_that_dies_mid_call_is_a_typed_error() {
    let client = connect().await;
    let error = client.call("die", json!({})).await.unwrap_err();
    let McpError::Disconnected { server, tool, .. } = &error else {
        panic!("{error}");
    };
    assert_eq!((server.as_str(), tool.as_str()), ("pytest-server", "die"));
    // How the process ended, not a guess: `die` exits with code 3.
    assert!(
        error
            .to_string()
            .contains("the server's process exited (exit status: 3)"),
        "{error}"
    );
    // Closed as soon as a call finds the server gone.
    assert!(client.is_closed());

    // Later calls fail the same way, through a tool set too.
    let error = client
        .call("add", json!({ "a": 1, "b": 2 }))
        .await
        .unwrap_err();
    assert!(matches!(error, McpError::Disconnected { .. }), "{error}");
    let result = client
        .tool_set()
        .dispatch_or_report(&ToolCall::new("c3", "echo", json!({ "text": "hi" })))
        .await;
    assert!(
        result.is_error && result.content.contains("`pytest-server`"),
        "{}",
        result.content
    );
}

#[tokio::test]
async fn a_server_that_exits_while_idle_is_closed_and_calls_say_how_it_ended() {
    let client = connect().await;
    assert_eq!(
        client.call("exit_later", json!({})).await.unwrap(),
        "exiting"
    );
    let closed = async {
        while !client.is_closed() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(PATIENCE, closed)
        .await
        .expect("is_closed() stays false after the server exited");
    let error = client
        .call("add", json!({ "a": 1, "b": 2 }))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, McpError::Disconnected { message, .. }
            if message == "the server's process exited (exit status: 4)"),
        "{error}"
    );
}

#[tokio::test]
async fn a_server_that_exits_at_start_is_a_connect_error_with_its_exit_status() {
    let mut command = tokio::process::Command::new(python());
    command.args([
        "-c",
        "import sys; sys.stderr.write('fatal: missing TOKEN (test server, on purpose)\\n'); sys.exit(2)",
    ]);
    let error = tokio::time::timeout(PATIENCE, McpClient::stdio("dies", command))
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "could not connect to MCP server `dies`: the server's process exited (exit status: 2) \
         before it answered the `initialize` request (what it wrote to stderr may say why)"
    );
}

#[tokio::test]
async fn a_server_that_cannot_start_or_does_not_speak_mcp_is_a_typed_error() {
    let command = tokio::process::Command::new("/nonexistent/mcp-server");
    let error = McpClient::stdio("ghost", command).await.unwrap_err();
    assert!(
        matches!(&error, McpError::Spawn { server, .. } if server == "ghost"),
        "{error}"
    );
    assert!(
        error.to_string().contains("/nonexistent/mcp-server"),
        "{error}"
    );

    for script in ["import sys; sys.exit(0)", "print('hello, not json-rpc')"] {
        let mut command = tokio::process::Command::new(python());
        command.args(["-c", script]);
        let error = tokio::time::timeout(PATIENCE, McpClient::stdio("mute", command))
            .await
            .unwrap()
            .unwrap_err();
        assert!(
            matches!(&error, McpError::Connect { server, .. } if server == "mute"),
            "{script}: {error}"
        );
    }
}

#[tokio::test]
async fn a_prefix_keeps_two_servers_tools_apart() {
    let first = connect().await.with_prefix("one_");
    let second = connect().await.with_prefix("two_");
    let mut tools = first.tool_set();
    second.add_to(&mut tools).unwrap();
    assert_eq!(tools.len(), 2 * first.tools().len());
    assert!(tools.contains("one_add") && tools.contains("two_add") && !tools.contains("add"));
    let result = tools
        .dispatch(&ToolCall::new("c1", "two_add", json!({ "a": 3, "b": 4 })))
        .await
        .unwrap();
    assert_eq!(result.content, "7");
    // Errors name the server's own tool.
    let result = tools
        .dispatch_or_report(&ToolCall::new("c2", "one_fail", json!({ "reason": "x" })))
        .await;
    assert!(
        result.is_error && result.content.contains("the call to `fail`"),
        "{}",
        result.content
    );
}

#[tokio::test]
async fn a_closed_client_s_tools_fail_as_disconnected() {
    let client = connect().await;
    let tools = client.tool_set();
    assert!(!client.is_closed());
    client.close();
    let error = tools
        .dispatch(&ToolCall::new("c1", "add", json!({ "a": 1, "b": 2 })))
        .await
        .unwrap_err();
    // The client closed it, not the server.
    assert!(
        error.to_string().contains(
            "lost the connection to MCP server `pytest-server` while calling `add`: \
             the client closed the connection (McpClient::close)"
        ) && !error.to_string().contains("exited"),
        "{error}"
    );
    assert!(client.is_closed());
}

#[tokio::test]
async fn a_server_that_never_answers_the_handshake_is_a_connect_error() {
    // The sleeper writes its pid, so that the test can see it stopped.
    let pid_file = std::env::temp_dir().join(format!("harness-mcp-sleeper-{}", std::process::id()));
    let mut command = tokio::process::Command::new(python());
    command.args([
        "-c",
        "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(600)",
    ]);
    command.arg(&pid_file);
    let options = McpOptions::default().connect_timeout(Duration::from_secs(3));
    let error = McpClient::stdio_with("sleeper", command, options)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, McpError::Connect { server, message }
            if server == "sleeper" && message.contains("did not finish the handshake")),
        "{error}"
    );
    // The server it started is stopped, not left behind.
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    let _ = std::fs::remove_file(&pid_file);
    let gone = async {
        while std::path::Path::new(&format!("/proc/{pid}")).exists()
            && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .unwrap_or_default()
                .contains(") Z ")
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(PATIENCE, gone).await.unwrap();
}
