//! A stdio server that answers with what is not a usable answer: an error
//! whose message is huge, a line that is JSON but not JSON-RPC, a result of
//! the wrong shape, an answer too large for a tiny limit; and tools whose
//! input schemas the model APIs refuse. Each call fails at once saying what
//! the server sent, the connection stays usable, and nothing the server
//! says reaches the model uncut.

use std::time::Instant;

use harness::llm::ToolCall;
use harness_mcp::{McpClient, McpError, McpOptions};
use serde_json::{Value, json};

use super::*;

/// `tests/servers/hostile_server.py`.
fn hostile_command(mode: &str) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(python());
    command
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/servers/hostile_server.py"))
        .arg(mode);
    command
}

async fn connect(
    mode: &str,
    command: tokio::process::Command,
    options: McpOptions,
) -> Result<McpClient, McpError> {
    let options = options.connect_timeout(PATIENCE).call_timeout(PATIENCE);
    tokio::time::timeout(
        PATIENCE,
        McpClient::stdio_with(format!("hostile-{mode}"), command, options),
    )
    .await
    .unwrap_or_else(|_| panic!("connecting to the `{mode}` server hangs"))
}

async fn hostile(mode: &str, options: McpOptions) -> McpClient {
    connect(mode, hostile_command(mode), options).await.unwrap()
}

/// The arguments of the server's `reply` tool: it writes `line` in place of
/// its answer, `"$ID"` replaced by the request's id and `$FILL` by `fill`
/// repeated `times` times.
fn reply(line: &Value, fill: &str, times: usize) -> Value {
    json!({"line": line.to_string(), "fill": fill, "times": times})
}

/// A call that must end well before the client's limit ([`PATIENCE`]): a
/// hang shows as a panic, not as a timeout error.
async fn quick_call(client: &McpClient, tool: &str, arguments: Value) -> Result<String, McpError> {
    let started = Instant::now();
    let answer = tokio::time::timeout(PATIENCE / 2, client.call(tool, arguments.clone()))
        .await
        .unwrap_or_else(|_| panic!("{arguments}: the call waited for the client's limit"));
    assert!(started.elapsed() < PATIENCE / 2, "{:?}", started.elapsed());
    answer
}

/// The connection still works: open, and the next call answered.
async fn still_works(client: &McpClient, case: &str) {
    assert!(!client.is_closed(), "{case}: the client says it is closed");
    assert_eq!(
        quick_call(client, "say", json!({"text": "ok"}))
            .await
            .unwrap(),
        "ok",
        "{case}"
    );
}

/// No 8 bytes of `secret` in a row are in `text`.
fn assert_no_part_of(secret: &str, text: &str, case: &str) {
    for part in secret.as_bytes().windows(8) {
        let part = std::str::from_utf8(part).unwrap();
        assert!(!text.contains(part), "{case}: {part:?} in {text:?}");
    }
}

#[tokio::test]
async fn an_error_s_message_is_cut_at_the_output_limit_after_redaction() {
    // A 5 MB message reached the model whole; a result marked `isError` of
    // the same size was cut to the limit.
    let max = 100;
    let client = hostile("extra", McpOptions::default().max_output_bytes(max)).await;
    let tools = client.tool_set();
    let error_line =
        json!({"jsonrpc": "2.0", "id": "$ID", "error": {"code": -32000, "message": "$FILL"}});
    for (fill, times) in [
        ("E", 5_000_000),
        ("é", 1_000_000),
        ("ab", 200),
        ("x", max + 1),
    ] {
        let bytes = fill.len() * times;
        let case = format!("{fill:?} x {times}");
        let arguments = reply(&error_line, fill, times);
        let error = quick_call(&client, "reply", arguments.clone())
            .await
            .unwrap_err();
        let McpError::Refused { message, code, .. } = &error else {
            panic!("{case}: {error}");
        };
        assert_eq!(*code, -32000);
        let note = format!("\n[cut: the message has {bytes} bytes]");
        assert!(message.ends_with(&note), "{case}: {message}");
        assert!(message.len() <= max + note.len(), "{case}: {message}");
        assert!(message.starts_with(fill), "{case}: {message}");
        // What the model reads.
        let result = tools
            .dispatch_or_report(&ToolCall::new("c1", "reply", arguments))
            .await;
        assert!(result.is_error, "{case}");
        assert!(
            result.content.len() < 400 && result.content.contains(&note),
            "{case}: {} bytes: {}",
            result.content.len(),
            result.content
        );
    }
    // Not cut: within the limit.
    let error = quick_call(&client, "reply", reply(&error_line, "s", max))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, McpError::Refused { message, .. } if *message == "s".repeat(max)),
        "{error}"
    );

    // A secret at the cut is redacted before the message is cut.
    let secret = "mcp-error-secret-Hq27Vn0c4Lx9";
    assert!(harness::secrets::register(secret));
    for start in (max - 40..=max + 3).step_by(3) {
        let message = format!("{}{secret} and after", "p".repeat(start));
        let line = json!({"jsonrpc": "2.0", "id": "$ID", "error": {"code": 1, "message": message}});
        let error = quick_call(&client, "reply", reply(&line, "", 0))
            .await
            .unwrap_err();
        assert!(matches!(error, McpError::Refused { .. }), "{error}");
        assert_no_part_of(secret, &error.to_string(), &format!("start {start}"));
    }
    still_works(&client, "after the errors").await;

    // The error that answers the handshake, or a listing, is cut alike.
    for mode in ["init-error", "list-error"] {
        for bytes in [5_000_000, 10 * max] {
            let mut command = hostile_command(mode);
            command.env("HARNESS_MCP_ERROR_BYTES", bytes.to_string());
            let error = connect(mode, command, McpOptions::default().max_output_bytes(max))
                .await
                .unwrap_err();
            let text = error.to_string();
            assert!(
                matches!(error, McpError::Connect { .. } | McpError::List { .. }),
                "{mode}: {text}"
            );
            assert!(
                text.len() < 400 && text.contains(&format!("[cut: the message has {bytes} bytes]")),
                "{mode} {bytes}: {} bytes: {}",
                text.len(),
                &text[..text.len().min(400)]
            );
        }
    }
}

#[tokio::test]
async fn an_answer_that_is_json_but_not_json_rpc_fails_the_call_at_once_saying_what() {
    // The SDK dropped each of these lines without a word, and the call
    // waited for its whole limit, then said the server did not answer.
    let client = hostile("extra", McpOptions::default()).await;
    let ok = json!({"content": [{"type": "text", "text": "fine"}]});
    let cases = [
        // No `jsonrpc`.
        (json!({"id": "$ID", "result": ok}), "no `jsonrpc`"),
        // A JSON-RPC 1.0 answer.
        (
            json!({"jsonrpc": "1.0", "id": "$ID", "result": ok}),
            r#"\"jsonrpc\":\"1.0\""#,
        ),
        // An error whose code is a string and whose message is a number.
        (
            json!({"jsonrpc": "2.0", "id": "$ID", "error": {"code": "bad", "message": 1}}),
            r#"\"code\":\"bad\""#,
        ),
        // An error that is a string.
        (
            json!({"jsonrpc": "2.0", "id": "$ID", "error": "boom"}),
            r#"\"error\":\"boom\""#,
        ),
        // Both a result and an error.
        (
            json!({"jsonrpc": "2.0", "id": "$ID", "result": ok, "error": {"code": 1, "message": "x"}}),
            "both a `result` and an `error`",
        ),
        // The answer in a batch (MCP has none).
        (
            json!([{"jsonrpc": "2.0", "id": "$ID", "result": ok}]),
            "a batch",
        ),
        // An error without an id: the answer to a request the server could
        // not read, which the SDK drops as no request's.
        (
            json!({"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid request"}}),
            "an error without an `id`",
        ),
    ];
    for (line, said) in cases {
        let error = quick_call(&client, "reply", reply(&line, "", 0))
            .await
            .unwrap_err();
        assert!(
            matches!(&error, McpError::BadMessage { tool, problem, .. }
                if tool == "reply" && problem.contains(said)),
            "{line}: {error}"
        );
        still_works(&client, &line.to_string()).await;
    }

    // JSON that is no message at all (a log line on stdout), and messages
    // that are no answer, fail no call: the answer still comes.
    let lines = [
        json!({"level": "info", "msg": "server starting"}).to_string(),
        "42".to_owned(),
        json!(["a", "b"]).to_string(),
        json!({"jsonrpc": "2.0", "method": "notifications/bogus", "params": {"a": 1}}).to_string(),
        json!({"jsonrpc": "2.0", "method": "notifications/message", "params": "bad"}).to_string(),
    ];
    let answer = quick_call(&client, "raw", json!({"lines": lines, "answer": true}))
        .await
        .unwrap();
    assert_eq!(answer, "after");
    // A call never answered says at its limit what came instead.
    let client = client.with_call_timeout(Duration::from_secs(2));
    let error = client
        .call("raw", json!({"lines": [lines[0]]}))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, McpError::BadMessage { problem, .. }
            if problem.contains("a line of text that is not JSON-RPC") && problem.contains("server starting")),
        "{error}"
    );
}

#[tokio::test]
async fn an_answer_of_the_wrong_shape_is_a_bad_message_not_a_lost_connection() {
    let client = hostile("extra", McpOptions::default()).await;
    for (result, said) in [
        (json!(5), "its `result` is not an object"),
        (json!("text"), "its `result` is not an object"),
        (json!([]), "its `result` is not an object"),
        (json!(null), "its `result` is not an object"),
        (json!({"content": "oops"}), "not a tool's result"),
        (
            json!({"content": [{"type": "weird", "x": 1}]}),
            "not a tool's result",
        ),
        (
            json!({"content": [{"type": "text"}]}),
            "not a tool's result",
        ),
        (
            json!({"content": [{"type": "image", "data": 7}]}),
            "not a tool's result",
        ),
    ] {
        let line = json!({"jsonrpc": "2.0", "id": "$ID", "result": result});
        let error = match quick_call(&client, "reply", reply(&line, "", 0)).await {
            Ok(answer) => panic!("{result}: answered {answer:?}"),
            Err(error) => error,
        };
        assert!(
            matches!(&error, McpError::BadMessage { tool, problem, .. }
                if tool == "reply" && problem.contains(said)),
            "{result}: {error}"
        );
        still_works(&client, &result.to_string()).await;
    }
}

#[tokio::test]
async fn a_message_limit_smaller_than_the_client_s_own_error_answer_still_fails_at_once() {
    // The server's messages: its handshake 134 bytes, its listing 92, its
    // answer to `say "ok"` 91. The error answer the client puts in
    // place of an answer too large has some 200 bytes: the SDK's own limit
    // dropped it, and the call or the handshake waited for its whole limit.
    for limit in [140, 180, 200, 229] {
        let client = hostile("compact", McpOptions::default().max_message_bytes(limit)).await;
        let error = quick_call(&client, "say", json!({"text": "y".repeat(1000)}))
            .await
            .unwrap_err();
        assert!(
            matches!(&error, McpError::BadMessage { problem, .. }
                if problem.contains(&format!("a message of more than {limit} bytes"))),
            "{limit}: {error}"
        );
        still_works(&client, &format!("limit {limit}")).await;
    }
    for limit in [0, 1, 50, 100, 133] {
        let started = Instant::now();
        let error = connect(
            "compact",
            hostile_command("compact"),
            McpOptions::default().max_message_bytes(limit),
        )
        .await
        .unwrap_err();
        assert!(started.elapsed() < PATIENCE / 2, "{:?}", started.elapsed());
        assert!(
            matches!(&error, McpError::Connect { message, .. }
                if message.contains(&format!("a message of more than {limit} bytes"))),
            "{limit}: {error}"
        );
    }
}

#[tokio::test]
async fn tools_whose_input_schema_is_not_an_object_s_are_not_offered() {
    let client = hostile("schemas", McpOptions::default()).await;
    let mut offered: Vec<String> = client.specs().into_iter().map(|s| s.name).collect();
    offered.sort();
    assert_eq!(offered, ["big", "count", "flood", "raw", "say", "untyped"]);
    let refused = client.refused_tools();
    let reasons: Vec<(&str, &str)> = refused
        .iter()
        .map(|r| (r.name.as_str(), r.reason.as_str()))
        .collect();
    let expected = [
        ("\"string_schema\"", "its `type` is \"string\""),
        ("\"array_schema\"", "its `type` is \"array\""),
        ("\"nullable_schema\"", "its `type` is [\"object\",\"null\"]"),
        ("\"true_properties\"", "its `properties` is not an object"),
        ("\"list_properties\"", "its `properties` is not an object"),
        (
            "\"string_required\"",
            "its `required` is not a list of names",
        ),
    ];
    assert_eq!(reasons.len(), expected.len(), "{reasons:?}");
    for ((name, reason), (want_name, want)) in reasons.iter().zip(expected) {
        assert_eq!(*name, want_name);
        assert!(
            reason.contains("input schema") && reason.contains(want),
            "{name}: {reason}"
        );
    }
    // A schema with properties and no `type` is an object's: offered, as
    // one.
    let untyped = client
        .specs()
        .into_iter()
        .find(|s| s.name == "untyped")
        .unwrap();
    assert_eq!(untyped.parameters["type"], "object");
    assert_eq!(untyped.parameters["properties"]["a"]["type"], "string");
    // And a prefix does not change why.
    let client = client.with_prefix("p_");
    assert_eq!(client.refused_tools().len(), expected.len());
    assert!(client.refused_tools()[0].name.contains("p_string_schema"));
}
