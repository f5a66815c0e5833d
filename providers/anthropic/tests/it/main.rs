//! harness-anthropic against a local mock of the Messages API.
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::{Duration, Instant};

use futures::StreamExt;
use harness::llm::{
    ContentPart, LanguageModel, Message, ModelError, ModelRequest, Reasoning, StopReason,
    StreamEvent, ToolCall, ToolChoice, ToolResult, ToolSpec, Usage, collect_stream,
};
use harness_anthropic::{Client, CompletionModel, HttpRetryPolicy};
use serde_json::{Value, json};
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const KEY: &str = "sk-ant-test-secret-5678";

fn model(server: &MockServer) -> CompletionModel {
    Client::builder()
        .api_key(KEY)
        .base_url(server.uri())
        // Far above what the local mock takes on a busy machine: a late
        // answer would be retried, and the tests count requests.
        .timeout(Duration::from_secs(5))
        .stream_idle_timeout(Duration::from_secs(5))
        .retry_policy(HttpRetryPolicy {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(5),
            max_backoff: Duration::from_millis(20),
            max_retry_after: Duration::from_secs(2),
        })
        .build()
        .unwrap()
        .completion_model("claude-test")
}

fn ask(text: &str) -> ModelRequest {
    ModelRequest::builder()
        .system("Be brief.")
        .user(text)
        .build()
}

fn message(content: Value, stop_reason: &str) -> Value {
    json!({
        "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-test",
        "content": content, "stop_reason": stop_reason, "stop_sequence": null,
        "usage": { "input_tokens": 20, "output_tokens": 6, "cache_read_input_tokens": 4 }
    })
}

fn sse(events: &[Value]) -> String {
    events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
        .collect()
}

fn message_start() -> Value {
    json!({ "type": "message_start", "message": {
        "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-test", "content": [],
        "stop_reason": null, "stop_sequence": null, "usage": { "input_tokens": 25, "output_tokens": 1 } } })
}

fn message_end(stop_reason: &str) -> [Value; 2] {
    [
        json!({ "type": "message_delta", "delta": { "stop_reason": stop_reason, "stop_sequence": null },
                "usage": { "output_tokens": 15 } }),
        json!({ "type": "message_stop" }),
    ]
}

async fn requests(server: &MockServer) -> Vec<Value> {
    server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| r.body_json::<Value>().unwrap())
        .collect()
}

fn ok(body: Value) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(body)
}

fn stream_of(events: &[Value]) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_raw(sse(events), "text/event-stream")
}

#[tokio::test]
async fn plain_answer() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .and(header("x-api-key", KEY))
        .and(header("anthropic-version", "2023-06-01"))
        .respond_with(ok(message(
            json!([{ "type": "text", "text": "Hello!" }]),
            "end_turn",
        )))
        .expect(1)
        .mount(&server)
        .await;
    let response = model(&server).complete(&ask("Hi")).await.unwrap();
    assert_eq!(response.text(), "Hello!");
    assert_eq!(response.stop_reason, StopReason::EndTurn);
    assert_eq!(response.usage, Usage::new(24, 6).with_cache_read(4));
    assert_eq!(
        requests(&server).await[0],
        json!({
            "model": "claude-test",
            "max_tokens": 4096,
            "system": "Be brief.",
            "messages": [{ "role": "user", "content": [{ "type": "text", "text": "Hi" }] }]
        })
    );
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct WeatherArgs {
    /// City name.
    city: String,
}

#[tokio::test]
async fn tool_call_and_tool_result_round_trip() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ok(message(
            json!([
                { "type": "text", "text": "Let me check." },
                { "type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": { "city": "Paris" } }
            ]),
            "tool_use",
        )))
        .mount(&server)
        .await;
    let mut request = ModelRequest::builder()
        .user("Weather in Paris?")
        .tool(ToolSpec::from_args::<WeatherArgs>(
            "get_weather",
            "Weather in a city",
        ))
        .tool_choice(ToolChoice::Required)
        .max_tokens(100)
        .build();
    let model = model(&server);
    let response = model.complete(&request).await.unwrap();
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    assert_eq!(response.text(), "Let me check.");
    let call = response.tool_calls().next().unwrap().clone();
    assert_eq!(call.parse_arguments::<WeatherArgs>().unwrap().city, "Paris");

    request.messages.push(response.into_message());
    request
        .messages
        .push(Message::tool_result(ToolResult::failure(
            &call,
            "service down",
        )));
    request.messages.push(Message::user("Try to guess."));
    model.complete(&request).await.unwrap();

    let bodies = requests(&server).await;
    assert_eq!(bodies[0]["tools"][0]["name"], "get_weather");
    assert_eq!(
        bodies[0]["tools"][0]["input_schema"]["properties"]["city"]["type"],
        "string"
    );
    assert_eq!(bodies[0]["tool_choice"], json!({ "type": "any" }));
    assert_eq!(bodies[0]["max_tokens"], 100);
    let messages = bodies[1]["messages"].as_array().unwrap();
    assert_eq!(
        messages.len(),
        3,
        "the tool result and the next user text share a turn"
    );
    assert_eq!(
        messages[1]["content"][1],
        json!({ "type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": { "city": "Paris" } })
    );
    assert_eq!(
        messages[2],
        json!({ "role": "user", "content": [
            { "type": "tool_result", "tool_use_id": "toolu_01", "content": "service down", "is_error": true },
            { "type": "text", "text": "Try to guess." }
        ] })
    );
}

#[tokio::test]
async fn images_are_sent_as_image_blocks() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ok(message(
            json!([{ "type": "text", "text": "A cat." }]),
            "end_turn",
        )))
        .mount(&server)
        .await;
    let request = ModelRequest::new([Message::user("What is it?")
        .with(ContentPart::image_base64("image/png", "iVBOR"))
        .with(ContentPart::image_url("https://example.com/cat.png"))]);
    model(&server).complete(&request).await.unwrap();
    assert_eq!(
        requests(&server).await[0]["messages"][0]["content"],
        json!([
            { "type": "text", "text": "What is it?" },
            { "type": "image", "source": { "type": "base64", "media_type": "image/png", "data": "iVBOR" } },
            { "type": "image", "source": { "type": "url", "url": "https://example.com/cat.png" } }
        ])
    );
}

#[tokio::test]
async fn streamed_answer() {
    let server = MockServer::start().await;
    let [delta, stop] = message_end("end_turn");
    Mock::given(method("POST"))
        .respond_with(stream_of(&[
            message_start(),
            json!({ "type": "content_block_start", "index": 0, "content_block": { "type": "text", "text": "" } }),
            json!({ "type": "ping" }),
            json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "text_delta", "text": "Hel" } }),
            json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "text_delta", "text": "lo!" } }),
            json!({ "type": "content_block_stop", "index": 0 }),
            delta,
            stop,
        ]))
        .mount(&server)
        .await;
    let events: Vec<_> = model(&server)
        .stream(&ask("Hi"))
        .await
        .unwrap()
        .collect()
        .await;
    assert_eq!(
        events,
        vec![
            Ok(StreamEvent::text("Hel")),
            Ok(StreamEvent::text("lo!")),
            Ok(StreamEvent::Usage(Usage::new(25, 15))),
            Ok(StreamEvent::finish(StopReason::EndTurn)),
        ]
    );
    assert_eq!(requests(&server).await[0]["stream"], true);
}

/// A server tool's blocks (web search, code execution, MCP: its call
/// with its input streamed, and its result) are skipped in a stream as in
/// a whole answer; the text and a client tool's call around them stay.
#[tokio::test]
async fn streamed_server_tool_blocks_are_skipped() {
    let server = MockServer::start().await;
    let [delta, stop] = message_end("end_turn");
    let json_delta = |index: usize, fragment: &str| {
        json!({ "type": "content_block_delta", "index": index,
                "delta": { "type": "input_json_delta", "partial_json": fragment } })
    };
    Mock::given(method("POST"))
        .respond_with(stream_of(&[
            message_start(),
            json!({ "type": "content_block_start", "index": 0, "content_block":
                    { "type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search", "input": {} } }),
            json_delta(0, "{\"query\": "),
            json_delta(0, "\"weather\"}"),
            json!({ "type": "content_block_stop", "index": 0 }),
            json!({ "type": "content_block_start", "index": 1, "content_block":
                    { "type": "web_search_tool_result", "tool_use_id": "srvtoolu_01", "content": [] } }),
            json!({ "type": "content_block_delta", "index": 1, "delta": { "type": "citations_delta", "citation": {} } }),
            json!({ "type": "content_block_stop", "index": 1 }),
            json!({ "type": "content_block_start", "index": 2, "content_block": { "type": "text", "text": "" } }),
            json!({ "type": "content_block_delta", "index": 2, "delta": { "type": "text_delta", "text": "Sunny." } }),
            json!({ "type": "content_block_stop", "index": 2 }),
            json!({ "type": "content_block_start", "index": 3, "content_block":
                    { "type": "mcp_tool_use", "id": "mcptoolu_01", "name": "lookup", "server_name": "s", "input": {} } }),
            json_delta(3, "{}"),
            json!({ "type": "content_block_stop", "index": 3 }),
            delta,
            stop,
        ]))
        .mount(&server)
        .await;
    let response = collect_stream(model(&server).stream(&ask("Weather?")).await.unwrap())
        .await
        .unwrap();
    assert_eq!(response.content, vec![ContentPart::text("Sunny.")]);
    assert_eq!(response.stop_reason, StopReason::EndTurn);
    // A delta for a block never started is still malformed.
    let server = MockServer::start().await;
    let [delta, stop] = message_end("end_turn");
    Mock::given(method("POST"))
        .respond_with(stream_of(&[
            message_start(),
            json_delta(5, "{}"),
            delta,
            stop,
        ]))
        .mount(&server)
        .await;
    let error = collect_stream(model(&server).stream(&ask("Weather?")).await.unwrap())
        .await
        .unwrap_err();
    assert!(
        matches!(error, ModelError::MalformedResponse { .. }),
        "{error:?}"
    );
}

#[tokio::test]
async fn streamed_tool_call_assembles_input_json_deltas() {
    let server = MockServer::start().await;
    let [delta, stop] = message_end("tool_use");
    let json_delta = |index: usize, fragment: &str| {
        json!({ "type": "content_block_delta", "index": index,
                "delta": { "type": "input_json_delta", "partial_json": fragment } })
    };
    Mock::given(method("POST"))
        .respond_with(stream_of(&[
            message_start(),
            json!({ "type": "content_block_start", "index": 0, "content_block": { "type": "text", "text": "" } }),
            json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "text_delta", "text": "Checking." } }),
            json!({ "type": "content_block_stop", "index": 0 }),
            json!({ "type": "content_block_start", "index": 1, "content_block":
                    { "type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {} } }),
            json_delta(1, ""),
            json_delta(1, "{\"city\": \"Pa"),
            json_delta(1, "ris\"}"),
            json!({ "type": "content_block_stop", "index": 1 }),
            json!({ "type": "content_block_start", "index": 2, "content_block":
                    { "type": "tool_use", "id": "toolu_02", "name": "get_time", "input": {} } }),
            json!({ "type": "content_block_stop", "index": 2 }),
            delta,
            stop,
        ]))
        .mount(&server)
        .await;
    let mut stream = model(&server).stream(&ask("Weather?")).await.unwrap();
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        events.push(event.unwrap());
    }
    assert!(events.contains(&StreamEvent::ToolCallStart {
        index: 0,
        id: "toolu_01".into(),
        name: "get_weather".into()
    }));
    let response = collect_stream(futures::stream::iter(events.into_iter().map(Ok)))
        .await
        .unwrap();
    assert_eq!(response.text(), "Checking.");
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    assert_eq!(
        response.tool_calls().cloned().collect::<Vec<_>>(),
        vec![
            ToolCall::new("toolu_01", "get_weather", json!({ "city": "Paris" })),
            ToolCall::new("toolu_02", "get_time", json!({})),
        ]
    );
}

#[tokio::test]
async fn unauthorized_is_an_auth_error_without_retries() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(401).set_body_json(json!({
            "type": "error", "error": { "type": "authentication_error", "message": "invalid x-api-key" }
        })))
        .expect(1)
        .mount(&server)
        .await;
    let error = model(&server).complete(&ask("Hi")).await.unwrap_err();
    assert_eq!(
        error,
        ModelError::Auth {
            message: "invalid x-api-key".into()
        }
    );
}

#[tokio::test]
async fn rate_limit_honours_retry_after_then_succeeds() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(429)
                .insert_header("retry-after", "0.25")
                .set_body_json(json!({ "type": "error", "error": { "type": "rate_limit_error", "message": "slow down" } })),
        )
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ok(message(
            json!([{ "type": "text", "text": "ok" }]),
            "end_turn",
        )))
        .mount(&server)
        .await;
    let started = Instant::now();
    assert_eq!(
        model(&server).complete(&ask("Hi")).await.unwrap().text(),
        "ok"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(requests(&server).await.len(), 2);
}

#[tokio::test]
async fn overloaded_529_is_retried_then_succeeds() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(529).set_body_json(
            json!({ "type": "error", "error": { "type": "overloaded_error", "message": "Overloaded" } }),
        ))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(500).set_body_json(
            json!({ "type": "error", "error": { "type": "api_error", "message": "Internal server error" } }),
        ))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ok(message(
            json!([{ "type": "text", "text": "recovered" }]),
            "end_turn",
        )))
        .mount(&server)
        .await;
    assert_eq!(
        model(&server).complete(&ask("Hi")).await.unwrap().text(),
        "recovered"
    );
    assert_eq!(requests(&server).await.len(), 3);
}

#[tokio::test]
async fn slow_answers_time_out() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ok(message(
                json!([{ "type": "text", "text": "late" }]),
                "end_turn",
            ))
            .set_delay(Duration::from_millis(600)),
        )
        .mount(&server)
        .await;
    let model = Client::builder()
        .api_key(KEY)
        .base_url(server.uri())
        .timeout(Duration::from_millis(100))
        .max_attempts(1)
        .build()
        .unwrap()
        .completion_model("claude-test");
    let error = model.complete(&ask("Hi")).await.unwrap_err();
    assert_eq!(
        error,
        ModelError::Timeout {
            after: Duration::from_millis(100),
            model: Some("claude-test".into()),
        }
    );
}

#[tokio::test]
async fn malformed_json_is_a_typed_error() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200).set_body_raw("{\"content\": 7}", "application/json"),
        )
        .mount(&server)
        .await;
    let error = model(&server).complete(&ask("Hi")).await.unwrap_err();
    assert!(
        matches!(error, ModelError::MalformedResponse { .. }),
        "{error}"
    );
}

#[tokio::test]
async fn truncated_stream_is_a_typed_error() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(stream_of(&[
            message_start(),
            json!({ "type": "content_block_start", "index": 0, "content_block": { "type": "text", "text": "" } }),
            json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "text_delta", "text": "Hel" } }),
        ]))
        .mount(&server)
        .await;
    let events: Vec<_> = model(&server)
        .stream(&ask("Hi"))
        .await
        .unwrap()
        .collect()
        .await;
    assert_eq!(events[0], Ok(StreamEvent::text("Hel")));
    assert!(
        matches!(&events[1], Err(ModelError::MalformedResponse { message }) if message.contains("message_stop")),
        "{events:?}"
    );
    assert_eq!(events.len(), 2);
}

#[tokio::test]
async fn an_error_event_mid_stream_is_typed() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(stream_of(&[
            message_start(),
            json!({ "type": "error", "error": { "type": "overloaded_error", "message": "Overloaded" } }),
        ]))
        .mount(&server)
        .await;
    let error = collect_stream(model(&server).stream(&ask("Hi")).await.unwrap())
        .await
        .unwrap_err();
    assert_eq!(
        error,
        ModelError::Overloaded {
            status: None,
            message: "Overloaded".into(),
            retry_after: None,
        }
    );
}

#[tokio::test]
async fn a_refusal_is_content_filtered() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ok(message(json!([]), "refusal")))
        .mount(&server)
        .await;
    let error = model(&server).complete(&ask("Hi")).await.unwrap_err();
    assert_eq!(
        error,
        ModelError::ContentFiltered {
            reason: "refusal".into()
        }
    );
}

#[tokio::test]
async fn the_key_never_shows_in_debug_output_or_errors() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(400).set_body_json(
            json!({ "type": "error", "error": { "type": "invalid_request_error", "message": "bad" } }),
        ))
        .mount(&server)
        .await;
    let client = Client::builder()
        .api_key(KEY)
        .base_url(server.uri())
        .build()
        .unwrap();
    let model = client.completion_model("claude-test");
    let builder = Client::builder().api_key(KEY);
    let error = model.complete(&ask("Hi")).await.unwrap_err();
    assert!(matches!(
        error,
        ModelError::InvalidRequest {
            status: Some(400),
            ..
        }
    ));
    for text in [
        format!("{client:?}"),
        format!("{model:#?}"),
        format!("{builder:?}"),
        error.to_string(),
    ] {
        assert!(!text.contains(KEY), "{text}");
        assert!(!text.contains("secret"), "{text}");
    }
}

/// A signature as the API sends them: long base64 with `+`, `/` and `=`.
const SIGNATURE: &str = "EqQBCkgIARABGAIiQL+0eZ/ozMBs3K8x1yJZp+3rq7Z0iT9T4gXWb9r1/hYw==";

fn thinking_request() -> ModelRequest {
    ModelRequest::builder()
        .user("Weather in Paris?")
        .tool(ToolSpec::from_args::<WeatherArgs>(
            "get_weather",
            "Weather in a city",
        ))
        .max_tokens(3000)
        .extra(
            "thinking",
            json!({ "type": "enabled", "budget_tokens": 2048 }),
        )
        .build()
}

#[tokio::test]
async fn thinking_before_tool_use_is_kept_in_order_and_sent_back_signed() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ok(message(
            json!([
                { "type": "thinking", "thinking": "The user wants the weather.", "signature": SIGNATURE },
                { "type": "text", "text": "Let me check." },
                { "type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": { "city": "Paris" } },
                { "type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search", "input": {} }
            ]),
            "tool_use",
        )))
        .mount(&server)
        .await;
    let mut request = thinking_request();
    let model = model(&server);
    let response = model.complete(&request).await.unwrap();
    let call = ToolCall::new("toolu_01", "get_weather", json!({ "city": "Paris" }));
    assert_eq!(
        response.content,
        vec![
            ContentPart::Reasoning(
                Reasoning::new("anthropic", "The user wants the weather.")
                    .with_signature(SIGNATURE)
            ),
            ContentPart::text("Let me check."),
            ContentPart::ToolCall(call.clone()),
        ],
        "thinking first, unknown blocks ignored"
    );
    assert_eq!(response.text(), "Let me check.");

    request.messages.push(response.into_message());
    request
        .messages
        .push(Message::tool_result(ToolResult::success(&call, "18°C")));
    model.complete(&request).await.unwrap();

    let bodies = requests(&server).await;
    assert_eq!(
        bodies[0]["thinking"],
        json!({ "type": "enabled", "budget_tokens": 2048 })
    );
    assert_eq!(
        bodies[1]["messages"][1],
        json!({ "role": "assistant", "content": [
            { "type": "thinking", "thinking": "The user wants the weather.", "signature": SIGNATURE },
            { "type": "text", "text": "Let me check." },
            { "type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": { "city": "Paris" } }
        ] })
    );
    let raw = String::from_utf8(server.received_requests().await.unwrap()[1].body.clone()).unwrap();
    assert!(
        raw.contains(&format!("\"signature\":\"{SIGNATURE}\"")),
        "the signature goes back byte for byte: {raw}"
    );
}

#[tokio::test]
async fn redacted_thinking_round_trips_as_its_data() {
    let server = MockServer::start().await;
    let data = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP";
    Mock::given(method("POST"))
        .respond_with(ok(message(
            json!([
                { "type": "redacted_thinking", "data": data },
                { "type": "thinking", "thinking": "", "signature": SIGNATURE },
                { "type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": { "city": "Oslo" } }
            ]),
            "tool_use",
        )))
        .mount(&server)
        .await;
    let mut request = thinking_request();
    let model = model(&server);
    let response = model.complete(&request).await.unwrap();
    assert_eq!(
        response.reasoning().cloned().collect::<Vec<_>>(),
        vec![
            Reasoning::redacted("anthropic", data),
            Reasoning::new("anthropic", "").with_signature(SIGNATURE),
        ]
    );
    let call = response.tool_calls().next().unwrap().clone();
    request.messages.push(response.into_message());
    request
        .messages
        .push(Message::tool_result(ToolResult::success(&call, "2°C")));
    model.complete(&request).await.unwrap();
    assert_eq!(
        requests(&server).await[1]["messages"][1]["content"],
        json!([
            { "type": "redacted_thinking", "data": data },
            { "type": "thinking", "thinking": "", "signature": SIGNATURE },
            { "type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": { "city": "Oslo" } }
        ])
    );
}

#[tokio::test]
async fn streamed_thinking_gathers_its_deltas_and_signature() {
    let server = MockServer::start().await;
    let [delta, stop] = message_end("tool_use");
    let block_delta = |index: usize, delta: Value| json!({ "type": "content_block_delta", "index": index, "delta": delta });
    let (first, second) = SIGNATURE.split_at(20);
    Mock::given(method("POST"))
        .respond_with(stream_of(&[
            message_start(),
            json!({ "type": "content_block_start", "index": 0, "content_block": { "type": "thinking", "thinking": "" } }),
            block_delta(0, json!({ "type": "thinking_delta", "thinking": "The user " })),
            block_delta(0, json!({ "type": "thinking_delta", "thinking": "wants the weather." })),
            block_delta(0, json!({ "type": "signature_delta", "signature": first })),
            block_delta(0, json!({ "type": "signature_delta", "signature": second })),
            json!({ "type": "content_block_stop", "index": 0 }),
            json!({ "type": "content_block_start", "index": 1, "content_block": { "type": "redacted_thinking", "data": "EmwK" } }),
            json!({ "type": "content_block_stop", "index": 1 }),
            json!({ "type": "content_block_start", "index": 2, "content_block": { "type": "text", "text": "" } }),
            block_delta(2, json!({ "type": "text_delta", "text": "Checking." })),
            json!({ "type": "content_block_stop", "index": 2 }),
            json!({ "type": "content_block_start", "index": 3, "content_block":
                    { "type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {} } }),
            block_delta(3, json!({ "type": "input_json_delta", "partial_json": "{\"city\": \"Paris\"}" })),
            json!({ "type": "content_block_stop", "index": 3 }),
            delta,
            stop,
        ]))
        .mount(&server)
        .await;
    let model = model(&server);
    let mut request = thinking_request();
    let events: Vec<StreamEvent> = model
        .stream(&request)
        .await
        .unwrap()
        .map(Result::unwrap)
        .collect()
        .await;
    let thinking =
        Reasoning::new("anthropic", "The user wants the weather.").with_signature(SIGNATURE);
    assert_eq!(
        events[..5],
        [
            StreamEvent::ReasoningDelta {
                text: "The user ".into()
            },
            StreamEvent::ReasoningDelta {
                text: "wants the weather.".into()
            },
            StreamEvent::ReasoningEnd {
                reasoning: thinking.clone()
            },
            StreamEvent::ReasoningEnd {
                reasoning: Reasoning::redacted("anthropic", "EmwK")
            },
            StreamEvent::text("Checking."),
        ]
    );
    let response = collect_stream(futures::stream::iter(events.into_iter().map(Ok)))
        .await
        .unwrap();
    let call = ToolCall::new("toolu_01", "get_weather", json!({ "city": "Paris" }));
    assert_eq!(
        response.content,
        vec![
            ContentPart::Reasoning(thinking),
            ContentPart::Reasoning(Reasoning::redacted("anthropic", "EmwK")),
            ContentPart::text("Checking."),
            ContentPart::ToolCall(call.clone()),
        ]
    );

    // The collected answer goes back like a non-streamed one.
    Mock::given(method("POST"))
        .respond_with(ok(message(
            json!([{ "type": "text", "text": "18°C." }]),
            "end_turn",
        )))
        .with_priority(1)
        .mount(&server)
        .await;
    request.messages.push(response.into_message());
    request
        .messages
        .push(Message::tool_result(ToolResult::success(&call, "18°C")));
    model.complete(&request).await.unwrap();
    assert_eq!(
        requests(&server).await[1]["messages"][1]["content"]
            .as_array()
            .unwrap()[..2],
        [
            json!({ "type": "thinking", "thinking": "The user wants the weather.", "signature": SIGNATURE }),
            json!({ "type": "redacted_thinking", "data": "EmwK" }),
        ]
    );
}

#[tokio::test]
async fn a_signature_delta_outside_a_thinking_block_is_malformed() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(stream_of(&[
            message_start(),
            json!({ "type": "content_block_start", "index": 0, "content_block": { "type": "text", "text": "" } }),
            json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "signature_delta", "signature": "x" } }),
        ]))
        .mount(&server)
        .await;
    let error = collect_stream(model(&server).stream(&ask("Hi")).await.unwrap())
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ModelError::MalformedResponse { message } if message.contains("signature_delta for content block 0")),
        "{error}"
    );
}

#[tokio::test]
async fn only_signed_anthropic_reasoning_is_sent() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ok(message(
            json!([{ "type": "text", "text": "ok" }]),
            "end_turn",
        )))
        .mount(&server)
        .await;
    let request = ModelRequest::new([
        Message::user("Hi"),
        Message::new(
            harness::llm::Role::Assistant,
            [
                ContentPart::Reasoning(
                    Reasoning::new("gemini", "Gemini's thought").with_signature("Z2Vt"),
                ),
                ContentPart::Reasoning(Reasoning::new("anthropic", "cut off before its signature")),
                ContentPart::Reasoning(
                    Reasoning::new("anthropic", "kept").with_signature(SIGNATURE),
                ),
                ContentPart::ToolCall(
                    ToolCall::new("toolu_01", "now", json!({})).with_signature("gemini", "Z2Vt"),
                ),
            ],
        ),
    ]);
    model(&server).complete(&request).await.unwrap();
    assert_eq!(
        requests(&server).await[0]["messages"][1]["content"],
        json!([
            { "type": "thinking", "thinking": "kept", "signature": SIGNATURE },
            { "type": "tool_use", "id": "toolu_01", "name": "now", "input": {} }
        ])
    );
}

mod secrets;
mod typed;
mod usage;
