//! Servers that send what they should not: endless or huge tool lists,
//! answers too large or not JSON, floods of notifications, names the model
//! APIs refuse, and secrets in what they say. Nothing of it may crash, hang
//! or leak; each failure says what happened.

use std::time::Instant;

use harness::llm::{Tool, ToolCall, ToolSet};
use harness_mcp::{McpClient, McpError, McpOptions};
use serde_json::{Value, json};

use super::*;

/// `tests/servers/hostile_server.py`.
fn hostile_script() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/servers/hostile_server.py")
}

fn hostile_command(mode: &str) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(python());
    command.arg(hostile_script()).arg(mode);
    command
}

async fn hostile(mode: &str, options: McpOptions) -> Result<McpClient, McpError> {
    tokio::time::timeout(
        PATIENCE,
        McpClient::stdio_with(format!("hostile-{mode}"), hostile_command(mode), options),
    )
    .await
    .unwrap_or_else(|_| panic!("connecting to the `{mode}` server hangs"))
}

/// No `window` bytes of `secret` in a row are in `text`.
fn assert_no_part_of(secret: &str, text: &str, case: &str) {
    for part in secret.as_bytes().windows(8) {
        let part = std::str::from_utf8(part).unwrap();
        assert!(!text.contains(part), "{case}: {part:?} in {text:?}");
    }
}

#[tokio::test]
async fn tool_lists_past_the_limits_are_refused_naming_the_limit() {
    let options = || McpOptions::default().connect_timeout(Duration::from_secs(30));
    for (mode, max_tools, what, limit) in [
        // Every page full and naming a next one: 1.5 GB in 20 s before.
        ("pages", 1024, "tools", 1024),
        ("pages", 1 << 20, "bytes", 8 << 20),
        // Empty pages without end.
        ("empty-pages", 1024, "pages", harness_mcp::MAX_LIST_PAGES),
        // One page, too many tools.
        ("many", 1024, "tools", 1024),
    ] {
        let error = hostile(mode, options().max_tools(max_tools))
            .await
            .unwrap_err();
        assert_eq!(
            error,
            McpError::ListTooLarge {
                server: format!("hostile-{mode}"),
                what,
                limit
            },
            "{mode}: {error}"
        );
        assert!(
            error.to_string().contains(&format!("{limit} {what}")),
            "{error}"
        );
    }
    // Limits of one's own.
    let error = hostile("normal", options().max_tools(3)).await.unwrap_err();
    assert!(
        matches!(
            error,
            McpError::ListTooLarge {
                what: "tools",
                limit: 3,
                ..
            }
        ),
        "{error}"
    );
    let error = hostile("normal", options().max_list_bytes(100))
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            McpError::ListTooLarge {
                what: "bytes",
                limit: 100,
                ..
            }
        ),
        "{error}"
    );
    assert!(hostile("normal", options().max_tools(5)).await.is_ok());
}

#[tokio::test]
async fn a_listing_too_large_to_read_fails_at_once_saying_so() {
    // One answer of 20 MiB: the SDK dropped it and the connection waited
    // for its whole limit, then said the handshake did not finish.
    let options = McpOptions::default().connect_timeout(Duration::from_secs(20));
    let error = hostile("big-list", options).await.unwrap_err();
    let McpError::List { message, .. } = &error else {
        panic!("{error}");
    };
    assert!(
        message.contains("a message of more than 16777216 bytes") && message.contains("listing"),
        "{error}"
    );
}

#[tokio::test]
async fn a_listing_that_is_never_answered_times_out_naming_the_listing() {
    // Also the connection's limit: Python's start, the handshake and the
    // first listing take it on a loaded machine.
    let limit = Duration::from_secs(5);
    let client = hostile("refresh-hang", McpOptions::default().connect_timeout(limit))
        .await
        .unwrap();
    for _ in 0..2 {
        let error = tokio::time::timeout(PATIENCE, client.refresh())
            .await
            .expect("refresh hangs")
            .unwrap_err();
        assert!(
            matches!(&error, McpError::List { message, .. }
                if message.contains(&format!("did not list its tools within {limit:?}"))),
            "{error}"
        );
    }
    // The tools of the first listing are still there, and work.
    assert_eq!(
        client.call("say", json!({"text": "hi"})).await.unwrap(),
        "hi"
    );
}

#[tokio::test]
async fn a_flood_of_list_changed_notifications_lists_one_at_a_time() {
    let client = hostile("normal", McpOptions::default()).await.unwrap();
    assert_eq!(
        client.call("flood", json!({"n": 500})).await.unwrap(),
        "flooded"
    );
    // Wait until the listings it set off are over.
    let mut last = 0;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let count: u64 = client
            .call("count", json!({}))
            .await
            .unwrap()
            .parse()
            .unwrap();
        // Settled: two looks alike, once listings have begun (a loaded
        // machine may not have begun the first 200 ms on).
        if count == last && count >= 2 {
            break;
        }
        last = count;
    }
    // One listing per notification was 500 (and as many at once).
    assert!(last < 50, "{last} listings for 500 notifications");
    assert!(last >= 2, "the change was listed: {last}");
}

#[tokio::test]
async fn answers_too_large_or_not_json_fail_the_call_at_once_saying_what() {
    // Calls that used to wait their whole limit and report a timeout.
    let limit = Duration::from_secs(30);
    let cases: Vec<(McpOptions, &str, Value, &str)> = vec![
        (
            McpOptions::default(),
            "big",
            json!({"bytes": 17 << 20}),
            "a message of more than 16777216 bytes",
        ),
        (
            McpOptions::default().max_message_bytes(1 << 20),
            "big",
            json!({"bytes": 2 << 20}),
            "a message of more than 1048576 bytes",
        ),
        (
            McpOptions::default(),
            "raw",
            json!({"lines": ["{not json"]}),
            "a message that is not JSON (\"{not json\")",
        ),
        (
            McpOptions::default(),
            "raw",
            json!({"lines": ["{\"jsonrpc\": \"2.0\", \"id\": 3, \"result\": {\"content\": [{\"type\": \"te"]}),
            "a message that is not JSON",
        ),
    ];
    for (options, tool, arguments, said) in cases {
        let client = hostile("normal", options.call_timeout(limit))
            .await
            .unwrap();
        let error = tokio::time::timeout(limit / 2, client.call(tool, arguments.clone()))
            .await
            .unwrap_or_else(|_| panic!("{arguments}: the call waited"))
            .unwrap_err();
        assert!(
            matches!(&error, McpError::BadMessage { tool: t, problem, .. }
                if t == tool && problem.contains(said)),
            "{arguments}: {error}"
        );
        assert!(error.to_string().contains("while `"), "{error}");
        // The connection still works.
        assert_eq!(
            client.call("say", json!({"text": "ok"})).await.unwrap(),
            "ok"
        );
    }

    // Lines of text that are not JSON-RPC (a banner, a stray print) do not
    // fail a call that is answered…
    let client = hostile("normal", McpOptions::default()).await.unwrap();
    let answer = client
        .call(
            "raw",
            json!({"lines": ["Server ready", "debug: x=1", ""], "answer": true}),
        )
        .await
        .unwrap();
    assert_eq!(answer, "after");
    // …and a call never answered says what came instead at its timeout.
    let client = client.with_call_timeout(Duration::from_secs(2));
    for (lines, said) in [
        (
            json!(["hello"]),
            "a line of text that is not JSON-RPC (the last: \"hello\")",
        ),
        (
            json!(["one", "two", "three"]),
            "3 lines of text that is not JSON-RPC (the last: \"three\")",
        ),
    ] {
        let error = client
            .call("raw", json!({"lines": lines}))
            .await
            .unwrap_err();
        assert!(
            matches!(&error, McpError::BadMessage { problem, .. } if problem.contains(said)),
            "{error}"
        );
    }
    // A call without any of that is a plain timeout.
    let error = client.call("raw", json!({"lines": []})).await.unwrap_err();
    assert!(matches!(error, McpError::Timeout { .. }), "{error}");
}

#[tokio::test]
async fn a_tool_s_answer_is_cut_at_the_output_limit_after_redaction() {
    let client = hostile("normal", McpOptions::default()).await.unwrap();
    let answer = client
        .call("say", json!({"text": "abc", "repeat": 1 << 20}))
        .await
        .unwrap();
    assert!(answer.len() <= (1 << 20) + 100, "{} bytes", answer.len());
    assert!(
        answer.ends_with("[cut: the answer has 3145728 bytes]"),
        "{}",
        &answer[answer.len() - 60..]
    );

    let secret = "mcp-output-secret-Zq81Kx0w5Pf3";
    assert!(harness::secrets::register(secret));
    let max = 300;
    let client = hostile("normal", McpOptions::default().max_output_bytes(max))
        .await
        .unwrap();
    for start in (max - 40..=max + 3).step_by(3) {
        let text = format!("{}{secret} and after", "p".repeat(start));
        let answer = client.call("say", json!({"text": text})).await.unwrap();
        assert_no_part_of(secret, &answer, &format!("start {start}"));
        assert!(answer.len() <= max + 60, "{answer}");
    }
}

#[tokio::test]
async fn a_server_that_cannot_start_shows_no_environment_in_its_error() {
    let secret_arg = "arg-secret-0f9e8d7c6b5a";
    harness::secrets::register(secret_arg);
    for (name, value) in [
        (
            "GITHUB_PERSONAL_ACCESS_TOKEN",
            "ghp_R3alLookingT0kenValue0123456789",
        ),
        ("OPENAI_API_KEY", "sk-proj-spawn-test-abcdef0123456789"),
        ("DATABASE_URL", "postgres://user:pw-0123456789@db/x"),
        ("PLAIN", "a-plain-value-given-to-the-server"),
    ] {
        let mut command = tokio::process::Command::new("/nonexistent/mcp-server");
        command.env(name, value).args(["--flag", secret_arg]);
        let error = McpClient::stdio("github", command).await.unwrap_err();
        assert!(matches!(error, McpError::Spawn { .. }), "{error}");
        for text in [error.to_string(), format!("{error:?}")] {
            assert!(!text.contains(value), "{name}: {text}");
            assert!(!text.contains(name), "{name}: {text}");
            assert!(!text.contains(secret_arg), "{name}: {text}");
            assert!(
                text.contains("/nonexistent/mcp-server") && text.contains("--flag"),
                "{text}"
            );
        }
    }
}

#[tokio::test]
async fn secret_looking_variables_given_to_a_server_are_redacted_from_what_it_says() {
    for (name, value) in [
        ("SERVICE_TOKEN", "svc-token-value-7c1d2e3f4a5b"),
        ("X_API_KEY", "x-api-key-value-9a8b7c6d5e4f"),
        ("DB_PASSWORD", "db-password-value-1q2w3e4r"),
    ] {
        let mut command = hostile_command("normal");
        command.env(name, value);
        let client = McpClient::stdio("secretive", command).await.unwrap();
        let call = ToolCall::new(
            "c1",
            "say",
            json!({"text": format!("my {name} is {value}")}),
        );
        let result = client.tool_set().dispatch_or_report(&call).await;
        assert!(
            !result.content.contains(value),
            "{name}: {}",
            result.content
        );
        assert!(result.content.contains("[redacted]"), "{}", result.content);
    }
}

/// A streamable-HTTP endpoint that answers every request with `status`
/// and a body quoting the `Authorization` header it got.
async fn quoting_server(status: u16) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&seen).into_owned();
                let auth = head
                    .lines()
                    .find_map(|l| {
                        l.strip_prefix("authorization: ")
                            .or_else(|| l.strip_prefix("Authorization: "))
                    })
                    .unwrap_or("none")
                    .to_owned();
                let body = format!("bad credentials: {auth}");
                let response = format!(
                    "HTTP/1.1 {status} Nope\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(response.as_bytes()).await;
            });
        }
    });
    format!("http://{addr}/mcp")
}

#[tokio::test]
async fn a_bearer_token_a_server_quotes_is_redacted_from_the_error() {
    for (status, token) in [
        (400, "mcp-tok-9f8e7d6c5b4a39281706"),
        (403, "mcp-tok-forbidden-5a4b3c2d1e0f"),
        (404, "mcp-tok-notfound-0a1b2c3d4e5f"),
        (500, "mcp-tok-internal-6f7e8d9c0b1a"),
    ] {
        let url = quoting_server(status).await;
        let options = McpOptions::default()
            .connect_timeout(Duration::from_secs(10))
            .bearer_token(token);
        assert!(
            harness::secrets::contains_secret(token),
            "{token} is registered"
        );
        let error = McpClient::http_with("quoting", &url, options)
            .await
            .unwrap_err();
        for text in [error.to_string(), format!("{error:?}")] {
            assert!(!text.contains(token), "{status}: {text}");
        }
    }
    // Set on the field rather than through the builder: registered too.
    let token = "mcp-tok-field-3c4d5e6f7a8b9c0d";
    let url = quoting_server(400).await;
    let mut options = McpOptions::default().connect_timeout(Duration::from_secs(10));
    options.bearer_token = Some(token.to_owned());
    let error = McpClient::http_with("quoting", &url, options)
        .await
        .unwrap_err();
    assert!(!error.to_string().contains(token), "{error}");
    assert!(harness::secrets::contains_secret(token));
}

/// A host tool named `read_file`.
#[derive(Clone)]
struct ReadFile;

#[async_trait::async_trait]
impl Tool for ReadFile {
    type Args = Value;
    type Output = String;
    type Error = String;
    fn name(&self) -> &str {
        "read_file"
    }
    fn description(&self) -> &str {
        "The host's own, confined"
    }
    async fn call(&self, _: Value) -> Result<String, String> {
        Ok("host".into())
    }
}

#[tokio::test]
async fn names_the_model_apis_refuse_are_not_offered_and_none_replaces_a_host_tool() {
    let client = hostile("names", McpOptions::default()).await.unwrap();
    let mut offered: Vec<String> = client.specs().into_iter().map(|s| s.name).collect();
    offered.sort();
    assert_eq!(
        offered,
        ["big", "count", "dup", "flood", "raw", "read_file", "say"]
    );
    let refused = client.refused_tools();
    let names: Vec<&str> = refused.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "\"has space\"",
            &format!("{:?}", "x".repeat(65)),
            "\"\"",
            "\"1starts_with_digit\"",
            "\"dot.ted\"",
            "\"ünïcode\"",
            "\"dup\"",
        ]
    );
    assert!(
        refused[1].reason.contains("longer than 64"),
        "{:?}",
        refused[1]
    );
    assert!(refused[2].reason.contains("empty"), "{:?}", refused[2]);
    assert!(refused[6].reason.contains("two tools"), "{:?}", refused[6]);

    // `read_file` would replace the host's: refused, and nothing added.
    let mut set = ToolSet::new().with(ReadFile);
    let error = client.add_to(&mut set).unwrap_err();
    assert_eq!(
        error,
        McpError::NameTaken {
            server: "hostile-names".into(),
            names: vec!["read_file".into()]
        }
    );
    assert!(error.to_string().contains("with_prefix"), "{error}");
    assert_eq!(set.len(), 1);
    let result = set
        .dispatch(&ToolCall::new("c", "read_file", json!({})))
        .await
        .unwrap();
    assert_eq!(result.content, "host");
    // With a prefix, both are there.
    let client = client.with_prefix("srv_");
    client.add_to(&mut set).unwrap();
    assert!(set.contains("srv_read_file") && set.contains("read_file"));
    // A prefix that makes a name too long leaves that tool out.
    let long = hostile("normal", McpOptions::default())
        .await
        .unwrap()
        .with_prefix("p".repeat(60));
    let offered: Vec<String> = long.specs().into_iter().map(|s| s.name).collect();
    assert_eq!(offered.len(), 3, "{offered:?}");
    assert_eq!(long.refused_tools().len(), 2);
}

#[tokio::test]
async fn an_oversized_late_answer_to_a_call_that_gave_up_fails_no_other_call() {
    // The server reads nothing while it prepares an answer, so the calls
    // made meanwhile wait for it: the late answer comes while they wait.
    let limit = 1 << 20;
    let options = McpOptions::default()
        .max_message_bytes(limit)
        .call_timeout(Duration::from_millis(300));
    let client = hostile("normal", options).await.unwrap();
    let error = client
        .call("big", json!({"bytes": 4 * limit, "delay": 1.0}))
        .await
        .unwrap_err();
    assert!(matches!(error, McpError::Timeout { .. }), "{error}");
    // This call waits for the server, which first sends the answer of 4 MiB
    // to the call that gave up: the SDK drops it; this call goes on.
    let client = client.with_call_timeout(PATIENCE);
    let answer = client.call("say", json!({"text": "still here"})).await;
    assert_eq!(answer.unwrap(), "still here");

    // An oversized answer to a call that waits fails that call, at once,
    // and only it: the call made after it, answered after it, goes on.
    let started = Instant::now();
    let big = client.call("big", json!({"bytes": 4 * limit, "delay": 0.5}));
    let say = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        client
            .call("say", json!({"text": "after the big one"}))
            .await
    };
    let (big, say) = tokio::join!(big, say);
    let error = big.unwrap_err();
    assert!(
        matches!(&error, McpError::BadMessage { tool, problem, .. }
            if tool == "big" && problem.contains("a message of more than 1048576 bytes")),
        "{error}"
    );
    assert!(started.elapsed() < PATIENCE / 2, "{:?}", started.elapsed());
    assert_eq!(say.unwrap(), "after the big one");
}

#[tokio::test]
async fn an_oversized_message_no_call_can_own_is_told_apart() {
    let limit = 1 << 20;
    let options = McpOptions::default()
        .max_message_bytes(limit)
        .call_timeout(PATIENCE);
    let client = hostile("normal", options).await.unwrap();
    // A notification (a method, no id) is nobody's answer: dropped, and the
    // call waiting is answered.
    let notification = format!(
        r#"{{"jsonrpc": "2.0", "method": "notifications/message", "params": {{"level": "info", "data": "{}"}}}}"#,
        "n".repeat(2 * limit)
    );
    // Nor is a request of the server's (a method and an id).
    let request = format!(
        r#"{{"jsonrpc": "2.0", "id": 7, "method": "sampling/createMessage", "params": {{"messages": [{{"role": "user", "content": {{"type": "text", "text": "{}"}}}}], "maxTokens": 1}}}}"#,
        "r".repeat(2 * limit)
    );
    let answer = client
        .call(
            "raw",
            json!({"lines": [notification, request], "answer": true}),
        )
        .await
        .unwrap();
    assert_eq!(answer, "after");
    // A line that is no JSON object, or an answer without an id (or with an
    // id that is not a number or a string), could be anyone's: the calls
    // waiting fail at once, as before.
    let answer = |id: &str| {
        format!(
            r#"{{"jsonrpc": "2.0", {id}"result": {{"content": [{{"type": "text", "text": "{}"}}]}}}}"#,
            "a".repeat(2 * limit)
        )
    };
    for line in [
        "z".repeat(2 * limit),
        format!("[{}]", answer(r#""id": 1, "#)),
        answer(""),
        answer(r#""id": null, "#),
        answer(r#""id": {"n": 1}, "#),
        // Cut before its end.
        answer(r#""id": 1, "#)[..(3 * limit / 2)].to_owned(),
    ] {
        let started = Instant::now();
        let error = client
            .call("raw", json!({"lines": [line]}))
            .await
            .unwrap_err();
        assert!(
            matches!(&error, McpError::BadMessage { tool, problem, .. }
                if tool == "raw" && problem.contains("a message of more than 1048576 bytes")),
            "{error}"
        );
        assert!(started.elapsed() < PATIENCE / 2, "{:?}", started.elapsed());
    }
    assert_eq!(
        client.call("say", json!({"text": "ok"})).await.unwrap(),
        "ok"
    );
}
