//! harness-openai against a local mock of the chat-completions API.
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::{Duration, Instant};

use futures::StreamExt;
use harness::llm::{
    ContentPart, LanguageModel, Message, ModelError, ModelRequest, StopReason, StreamEvent,
    ToolCall, ToolResult, ToolSpec, Usage, collect_stream,
};
use harness_openai::{Client, CompletionModel, HttpRetryPolicy};
use serde_json::{Value, json};
use wiremock::matchers::{body_partial_json, header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const KEY: &str = "sk-test-secret-1234";

fn model(server: &MockServer) -> CompletionModel {
    Client::builder()
        .api_key(KEY)
        .base_url(format!("{}/v1", server.uri()))
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
        .completion_model("gpt-test")
}

fn ask(text: &str) -> ModelRequest {
    ModelRequest::builder()
        .system("Be brief.")
        .user(text)
        .temperature(0.0)
        .max_tokens(64)
        .build()
}

fn completion(message: Value, finish_reason: &str) -> Value {
    json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "gpt-test",
        "choices": [{ "index": 0, "message": message, "logprobs": null, "finish_reason": finish_reason }],
        "usage": { "prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17 }
    })
}

fn sse(chunks: &[Value], done: bool) -> String {
    let mut body: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    if done {
        body.push_str("data: [DONE]\n\n");
    }
    body
}

fn chunk(delta: Value, finish_reason: Value) -> Value {
    json!({
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1_700_000_000, "model": "gpt-test",
        "choices": [{ "index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason }]
    })
}

fn usage_chunk() -> Value {
    json!({
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1_700_000_000, "model": "gpt-test",
        "choices": [], "usage": { "prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12 }
    })
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

#[tokio::test]
async fn plain_answer() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(header("authorization", format!("Bearer {KEY}").as_str()))
        .respond_with(ResponseTemplate::new(200).set_body_json(completion(
            json!({ "role": "assistant", "content": "Hello there!", "refusal": null }),
            "stop",
        )))
        .expect(1)
        .mount(&server)
        .await;
    let response = model(&server).complete(&ask("Hi")).await.unwrap();
    assert_eq!(response.text(), "Hello there!");
    assert_eq!(response.stop_reason, StopReason::EndTurn);
    assert_eq!(response.usage, Usage::new(12, 5));
    let body = &requests(&server).await[0];
    assert_eq!(
        body,
        &json!({
            "model": "gpt-test",
            "messages": [
                { "role": "system", "content": "Be brief." },
                { "role": "user", "content": "Hi" }
            ],
            "temperature": 0.0,
            "max_tokens": 64
        })
    );
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct WeatherArgs {
    /// City name.
    city: String,
    /// Days ahead.
    days: Option<u8>,
}

#[tokio::test]
async fn tool_call_and_tool_result_round_trip() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(completion(
            json!({
                "role": "assistant",
                "content": null,
                "tool_calls": [{
                    "id": "call_abc",
                    "type": "function",
                    "function": { "name": "get_weather", "arguments": "{\"city\":\"Paris\"}" }
                }]
            }),
            "tool_calls",
        )))
        .mount(&server)
        .await;
    let spec = ToolSpec::from_args::<WeatherArgs>("get_weather", "Weather in a city");
    let mut request = ModelRequest::builder()
        .user("Weather in Paris?")
        .tool(spec)
        .build();
    let model = model(&server).strict_tools(true);
    let response = model.complete(&request).await.unwrap();
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    let call = response.tool_calls().next().unwrap().clone();
    assert_eq!(call.id, "call_abc");
    let args: WeatherArgs = call.parse_arguments().unwrap();
    assert_eq!(args.city, "Paris");
    assert_eq!(args.days, None);

    // Second turn: the assistant's call and the tool's result go back.
    request.messages.push(response.into_message());
    request
        .messages
        .push(Message::tool_result(ToolResult::success(&call, "18°C")));
    model.complete(&request).await.unwrap();

    let bodies = requests(&server).await;
    let tool = &bodies[0]["tools"][0];
    assert_eq!(tool["type"], "function");
    assert_eq!(tool["function"]["name"], "get_weather");
    assert_eq!(tool["function"]["strict"], true);
    let parameters = &tool["function"]["parameters"];
    assert_eq!(parameters["additionalProperties"], false);
    assert_eq!(
        parameters["properties"]["days"]["type"],
        json!(["integer", "null"])
    );
    assert!(parameters["properties"]["days"].get("format").is_none());
    assert_eq!(bodies[0]["tool_choice"], "auto");
    let messages = bodies[1]["messages"].as_array().unwrap();
    assert_eq!(
        messages[1],
        json!({
            "role": "assistant",
            "content": null,
            "tool_calls": [{ "id": "call_abc", "type": "function",
                             "function": { "name": "get_weather", "arguments": "{\"city\":\"Paris\"}" } }]
        })
    );
    assert_eq!(
        messages[2],
        json!({ "role": "tool", "content": "18°C", "tool_call_id": "call_abc" })
    );
}

#[tokio::test]
async fn images_go_as_content_parts() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(completion(
            json!({ "role": "assistant", "content": "A cat." }),
            "stop",
        )))
        .mount(&server)
        .await;
    let request = ModelRequest::new([
        Message::user("What is it?").with(ContentPart::image_base64("image/png", "iVBOR"))
    ]);
    model(&server).complete(&request).await.unwrap();
    assert_eq!(
        requests(&server).await[0]["messages"][0]["content"],
        json!([
            { "type": "text", "text": "What is it?" },
            { "type": "image_url", "image_url": { "url": "data:image/png;base64,iVBOR" } }
        ])
    );
}

#[tokio::test]
async fn streamed_answer() {
    let server = MockServer::start().await;
    let body = sse(
        &[
            chunk(json!({ "role": "assistant", "content": "" }), Value::Null),
            chunk(json!({ "content": "Hel" }), Value::Null),
            chunk(json!({ "content": "lo!" }), Value::Null),
            chunk(json!({}), json!("stop")),
            usage_chunk(),
        ],
        true,
    );
    Mock::given(method("POST"))
        .and(body_partial_json(
            json!({ "stream": true, "stream_options": { "include_usage": true } }),
        ))
        .respond_with(ResponseTemplate::new(200).set_body_raw(body, "text/event-stream"))
        .expect(1)
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
            Ok(StreamEvent::Usage(Usage::new(9, 3))),
            Ok(StreamEvent::finish(StopReason::EndTurn)),
        ]
    );
}

#[tokio::test]
async fn streamed_parallel_tool_calls_are_assembled_by_index() {
    let server = MockServer::start().await;
    let call = |index: usize, id: &str, name: &str| {
        json!({ "tool_calls": [{ "index": index, "id": id, "type": "function",
                                 "function": { "name": name, "arguments": "" } }] })
    };
    let args = |index: usize, fragment: &str| json!({ "tool_calls": [{ "index": index, "function": { "arguments": fragment } }] });
    let body = sse(
        &[
            chunk(json!({ "role": "assistant", "content": null }), Value::Null),
            chunk(call(0, "call_a", "get_weather"), Value::Null),
            chunk(args(0, "{\"ci"), Value::Null),
            chunk(call(1, "call_b", "get_time"), Value::Null),
            chunk(args(0, "ty\": \"Paris\"}"), Value::Null),
            chunk(args(1, "{\"tz\": \"CET\"}"), Value::Null),
            chunk(json!({}), json!("tool_calls")),
            usage_chunk(),
        ],
        true,
    );
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(body, "text/event-stream"))
        .mount(&server)
        .await;
    let stream = model(&server)
        .stream(&ask("Weather and time?"))
        .await
        .unwrap();
    let response = collect_stream(stream).await.unwrap();
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    assert_eq!(
        response.tool_calls().cloned().collect::<Vec<_>>(),
        vec![
            ToolCall::new("call_a", "get_weather", json!({ "city": "Paris" })),
            ToolCall::new("call_b", "get_time", json!({ "tz": "CET" })),
        ]
    );
    assert_eq!(response.usage, Usage::new(9, 3));
}

/// Servers and proxies that send parallel calls without `index` (or with
/// `index` 0 for each): a new id starts a new call, a delta without one
/// continues the last; each shape gives the same two calls.
#[tokio::test]
async fn streamed_parallel_tool_calls_without_their_own_index_stay_apart() {
    let start = |index: Option<usize>, id: &str, name: &str, args: &str| {
        let mut call = json!({ "id": id, "type": "function",
                               "function": { "name": name, "arguments": args } });
        if let Some(index) = index {
            call["index"] = json!(index);
        }
        json!({ "tool_calls": [call] })
    };
    let more = |index: Option<usize>, id: Option<&str>, args: &str| {
        let mut call = json!({ "function": { "arguments": args } });
        if let Some(index) = index {
            call["index"] = json!(index);
        }
        if let Some(id) = id {
            call["id"] = json!(id);
        }
        json!({ "tool_calls": [call] })
    };
    let shapes: Vec<(&str, Vec<Value>)> = vec![
        (
            "no index, whole calls",
            vec![
                start(None, "call_a", "f", "{\"x\":1}"),
                start(None, "call_b", "g", "{\"y\":2}"),
            ],
        ),
        (
            "no index, arguments in pieces without an id",
            vec![
                start(None, "call_a", "f", "{\"x\""),
                more(None, None, ":1}"),
                start(None, "call_b", "g", ""),
                more(None, None, "{\"y\":2}"),
            ],
        ),
        (
            "no index, pieces naming their call",
            vec![
                start(None, "call_a", "f", ""),
                start(None, "call_b", "g", ""),
                more(None, Some("call_a"), "{\"x\":1}"),
                more(None, Some("call_b"), "{\"y\":2}"),
            ],
        ),
        (
            "index 0 for each call",
            vec![
                start(Some(0), "call_a", "f", "{\"x\":"),
                more(Some(0), None, "1}"),
                start(Some(0), "call_b", "g", "{\"y\":"),
                more(Some(0), Some("call_b"), "2}"),
            ],
        ),
        (
            "an id that changes on a delta without a name (one call)",
            vec![
                start(Some(0), "call_a", "f", "{\"x\""),
                more(Some(0), Some("call_z"), ":1}"),
                start(Some(1), "call_b", "g", ""),
                more(Some(1), Some("call_y"), "{\"y\":2}"),
            ],
        ),
        (
            "two calls in one delta, their pieces by position",
            vec![
                json!({ "tool_calls": [
                    { "id": "call_a", "function": { "name": "f", "arguments": "" } },
                    { "id": "call_b", "function": { "name": "g", "arguments": "{\"y\"" } },
                ] }),
                json!({ "tool_calls": [
                    { "function": { "arguments": "{\"x\":1}" } },
                    { "function": { "arguments": ":2}" } },
                ] }),
            ],
        ),
        (
            "an index each, the id repeated",
            vec![
                start(Some(0), "call_a", "f", "{\"x\":"),
                start(Some(1), "call_b", "g", ""),
                more(Some(0), Some("call_a"), "1}"),
                more(Some(1), Some("call_b"), "{\"y\":2}"),
            ],
        ),
    ];
    // Two calls in one delta with neither index nor id, and a call whose id
    // comes after its first delta: apart, each under an id of its own.
    let more_shapes: Vec<(&str, Vec<Value>, Calls)> = vec![
        (
            "two calls in one delta, no index nor id",
            vec![json!({ "tool_calls": [
                { "function": { "name": "f", "arguments": "{\"x\":1}" } },
                { "function": { "name": "g", "arguments": "{\"y\":2}" } },
            ] })],
            vec![("f", json!({ "x": 1 })), ("g", json!({ "y": 2 }))],
        ),
        (
            "the id after the first delta",
            vec![
                json!({ "tool_calls": [{ "index": 0, "function": { "name": "f", "arguments": "{\"x\"" } }] }),
                more(Some(0), Some("call_late"), ":1}"),
            ],
            vec![("f", json!({ "x": 1 }))],
        ),
    ];
    for (shape, deltas, calls) in more_shapes {
        let server = MockServer::start().await;
        let mut chunks = vec![chunk(
            json!({ "role": "assistant", "content": null }),
            Value::Null,
        )];
        chunks.extend(deltas.into_iter().map(|d| chunk(d, Value::Null)));
        chunks.push(chunk(json!({}), json!("tool_calls")));
        Mock::given(method("POST"))
            .respond_with(
                ResponseTemplate::new(200).set_body_raw(sse(&chunks, true), "text/event-stream"),
            )
            .mount(&server)
            .await;
        let stream = model(&server).stream(&ask("Both?")).await.unwrap();
        let response = collect_stream(stream).await.unwrap();
        let got: Vec<_> = response.tool_calls().cloned().collect();
        let ids: std::collections::BTreeSet<_> = got.iter().map(|c| c.id.clone()).collect();
        assert_eq!(ids.len(), got.len(), "{shape}: {got:?}");
        assert_eq!(
            got.iter()
                .map(|c| (c.name.as_str(), c.arguments.clone()))
                .collect::<Vec<_>>(),
            calls,
            "{shape}"
        );
    }
    for (shape, deltas) in shapes {
        let server = MockServer::start().await;
        let mut chunks = vec![chunk(
            json!({ "role": "assistant", "content": null }),
            Value::Null,
        )];
        chunks.extend(deltas.into_iter().map(|d| chunk(d, Value::Null)));
        chunks.push(chunk(json!({}), json!("tool_calls")));
        Mock::given(method("POST"))
            .respond_with(
                ResponseTemplate::new(200).set_body_raw(sse(&chunks, true), "text/event-stream"),
            )
            .mount(&server)
            .await;
        let stream = model(&server).stream(&ask("Both?")).await.unwrap();
        let response = collect_stream(stream).await.unwrap();
        assert_eq!(
            response.tool_calls().cloned().collect::<Vec<_>>(),
            vec![
                ToolCall::new("call_a", "f", json!({ "x": 1 })),
                ToolCall::new("call_b", "g", json!({ "y": 2 })),
            ],
            "{shape}"
        );
    }
}

/// An error a server answers with status 200 (proxies such as OpenRouter
/// and LiteLLM do), whole or in a stream, is the error it says, not a
/// response without choices: by its type, or its code (a name or a status).
#[tokio::test]
async fn an_error_answered_with_status_200_is_the_error_it_says() {
    let cases: Vec<(Value, Expected)> = vec![
        (
            json!({ "message": "Provider returned error: upstream rate limit", "code": 429 }),
            |e| matches!(e, ModelError::RateLimited { message, .. } if message.contains("upstream rate limit")),
        ),
        (
            json!({ "message": "bad gateway upstream", "code": 502 }),
            |e| {
                matches!(
                    e,
                    ModelError::Overloaded {
                        status: Some(502),
                        ..
                    }
                )
            },
        ),
        (
            json!({ "message": "slow down", "code": "429", "type": "provider_error" }),
            |e| matches!(e, ModelError::RateLimited { .. }),
        ),
        (
            json!({ "message": "try later", "type": "server_error" }),
            |e| matches!(e, ModelError::Overloaded { status: None, .. }),
        ),
        (
            json!({ "message": "no such model", "type": "invalid_request_error", "code": "model_not_found" }),
            |e| matches!(e, ModelError::InvalidRequest { .. }),
        ),
        (
            json!({ "message": "what now", "code": 200 }),
            |e| matches!(e, ModelError::Other { message } if message.contains("what now")),
        ),
    ];
    for (error, expected) in cases {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({ "error": error })))
            .mount(&server)
            .await;
        let got = model(&server).complete(&ask("Hi")).await.unwrap_err();
        assert!(expected(&got), "{error}: {got:?}");

        let server = MockServer::start().await;
        let body = format!("data: {}\n\n", json!({ "error": error }));
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(200).set_body_raw(body, "text/event-stream"))
            .mount(&server)
            .await;
        let stream = model(&server).stream(&ask("Hi")).await.unwrap();
        let got = collect_stream(stream).await.unwrap_err();
        assert!(expected(&got), "streamed {error}: {got:?}");
    }
}

#[tokio::test]
async fn unauthorized_is_an_auth_error_without_retries() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(401).set_body_json(json!({
            "error": { "message": "Incorrect API key provided: sk-test***1234.", "type": "invalid_request_error",
                       "param": null, "code": "invalid_api_key" }
        })))
        .expect(1)
        .mount(&server)
        .await;
    let error = model(&server).complete(&ask("Hi")).await.unwrap_err();
    assert_eq!(
        error,
        ModelError::Auth {
            message: "Incorrect API key provided: sk-test***1234.".into()
        }
    );
}

#[tokio::test]
async fn rate_limit_honours_retry_after_then_succeeds() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(429)
                .insert_header("retry-after-ms", "250")
                .set_body_json(json!({ "error": { "message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded" } })),
        )
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(completion(
            json!({ "role": "assistant", "content": "ok" }),
            "stop",
        )))
        .mount(&server)
        .await;
    let started = Instant::now();
    let response = model(&server).complete(&ask("Hi")).await.unwrap();
    assert_eq!(response.text(), "ok");
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(requests(&server).await.len(), 2);
}

#[tokio::test]
async fn server_error_is_retried_then_succeeds() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(500)
                .set_body_json(json!({ "error": { "message": "boom", "type": "server_error" } })),
        )
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(completion(
            json!({ "role": "assistant", "content": "recovered" }),
            "stop",
        )))
        .mount(&server)
        .await;
    assert_eq!(
        model(&server).complete(&ask("Hi")).await.unwrap().text(),
        "recovered"
    );
    assert_eq!(requests(&server).await.len(), 2);
}

#[tokio::test]
async fn persistent_server_errors_give_up_after_the_last_attempt() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(503).set_body_string("upstream down"))
        .expect(3)
        .mount(&server)
        .await;
    let error = model(&server).stream(&ask("Hi")).await.err().unwrap();
    assert_eq!(
        error,
        ModelError::Overloaded {
            status: Some(503),
            message: "upstream down".into(),
            retry_after: None,
        }
    );
}

#[tokio::test]
async fn a_server_still_unavailable_after_the_last_attempt_says_when_to_come_back() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(503)
                .insert_header("retry-after-ms", "30")
                .set_body_string("warming up"),
        )
        .expect(3)
        .mount(&server)
        .await;
    let error = model(&server).complete(&ask("Hi")).await.err().unwrap();
    assert_eq!(
        error,
        ModelError::Overloaded {
            status: Some(503),
            message: "warming up".into(),
            retry_after: Some(Duration::from_millis(30)),
        }
    );
    assert_eq!(error.retry_after(), Some(Duration::from_millis(30)));
}

#[tokio::test]
async fn slow_answers_time_out() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_delay(Duration::from_secs(30))
                .set_body_json(completion(
                    json!({ "role": "assistant", "content": "late" }),
                    "stop",
                )),
        )
        .mount(&server)
        .await;
    let model = Client::builder()
        .api_key(KEY)
        .base_url(format!("{}/v1", server.uri()))
        .timeout(Duration::from_millis(100))
        .max_attempts(1)
        .build()
        .unwrap()
        .completion_model("gpt-test");
    let started = Instant::now();
    let error = model.complete(&ask("Hi")).await.unwrap_err();
    assert_eq!(
        error,
        ModelError::Timeout {
            after: Duration::from_millis(100),
            model: Some("gpt-test".into()),
        }
    );
    // Long before the answer's 30 s.
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn malformed_json_is_a_typed_error() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200).set_body_raw("{\"choices\": [", "application/json"),
        )
        .mount(&server)
        .await;
    let error = model(&server).complete(&ask("Hi")).await.unwrap_err();
    assert!(
        matches!(&error, ModelError::MalformedResponse { message } if message.contains("not the expected JSON")),
        "{error}"
    );
}

#[tokio::test]
async fn truncated_stream_is_a_typed_error() {
    let server = MockServer::start().await;
    let body = sse(
        &[
            chunk(json!({ "content": "Hel" }), Value::Null),
            chunk(
                json!({ "tool_calls": [{ "index": 0, "id": "c", "function": { "name": "f", "arguments": "{\"a\"" } }] }),
                Value::Null,
            ),
        ],
        false,
    );
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(body, "text/event-stream"))
        .mount(&server)
        .await;
    let mut stream = model(&server).stream(&ask("Hi")).await.unwrap();
    assert_eq!(stream.next().await, Some(Ok(StreamEvent::text("Hel"))));
    let mut last = None;
    while let Some(item) = stream.next().await {
        last = Some(item);
    }
    assert!(
        matches!(&last, Some(Err(ModelError::MalformedResponse { message })) if message.contains("cut off")),
        "{last:?}"
    );
}

#[tokio::test]
async fn an_error_chunk_mid_stream_is_typed() {
    let server = MockServer::start().await;
    let body = sse(
        &[
            chunk(json!({ "content": "Hel" }), Value::Null),
            json!({ "error": { "message": "The server had an error", "type": "server_error" } }),
        ],
        false,
    );
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(body, "text/event-stream"))
        .mount(&server)
        .await;
    let error = collect_stream(model(&server).stream(&ask("Hi")).await.unwrap())
        .await
        .unwrap_err();
    assert!(
        matches!(error, ModelError::Overloaded { status: None, .. }),
        "{error}"
    );
}

#[tokio::test]
async fn content_filter_is_a_typed_error() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(completion(
            json!({ "role": "assistant", "content": "" }),
            "content_filter",
        )))
        .mount(&server)
        .await;
    let error = model(&server).complete(&ask("Hi")).await.unwrap_err();
    assert_eq!(
        error,
        ModelError::ContentFiltered {
            reason: "content_filter".into()
        }
    );
}

#[tokio::test]
async fn the_key_never_shows_in_debug_output_or_errors() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(400).set_body_json(json!({ "error": { "message": "bad" } })),
        )
        .mount(&server)
        .await;
    let client = Client::builder()
        .api_key(KEY)
        .base_url(server.uri())
        .build()
        .unwrap();
    let model = client.completion_model("gpt-test");
    let builder = Client::builder().api_key(KEY);
    for text in [
        format!("{client:?}"),
        format!("{client:#?}"),
        format!("{model:?}"),
        format!("{builder:?}"),
        model.complete(&ask("Hi")).await.unwrap_err().to_string(),
    ] {
        assert!(!text.contains(KEY), "{text}");
        assert!(!text.contains("secret"), "{text}");
    }
    assert!(format!("{client:?}").contains("<redacted>"));
}

#[tokio::test]
async fn a_local_server_needs_no_key() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(completion(
            json!({ "role": "assistant", "content": "local" }),
            "stop",
        )))
        .mount(&server)
        .await;
    // Whatever OPENAI_API_KEY holds, an explicit local URL works without one.
    let model = Client::builder()
        .base_url(format!("{}/v1/", server.uri()))
        .build()
        .unwrap()
        .completion_model("llama3.2");
    assert_eq!(model.complete(&ask("Hi")).await.unwrap().text(), "local");
    assert_eq!(model.provider(), "openai");
    assert_eq!(model.model_name(), "llama3.2");
}

#[test]
fn an_invalid_base_url_is_a_configuration_error() {
    let error = Client::builder()
        .base_url("localhost:8000")
        .build()
        .unwrap_err();
    assert!(matches!(error, ModelError::Configuration { .. }), "{error}");
}

/// Runs this test binary again with `vars` set, executing only `test`.
fn run_child(test: &str, vars: &[(&str, &str)]) -> std::process::Output {
    let mut command = std::process::Command::new(std::env::current_exe().unwrap());
    command
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env("HARNESS_TEST_CHILD", "1");
    for (name, value) in vars {
        command.env(name, value);
    }
    command.output().unwrap()
}

#[test]
fn environment_supplies_key_and_base_url() {
    let output = run_child(
        "child_reads_the_environment",
        &[
            ("OPENAI_API_KEY", KEY),
            ("OPENAI_BASE_URL", "http://127.0.0.1:9/v1"),
        ],
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    let output = run_child("child_without_a_key_for_openai_fails", &[]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
}

#[test]
fn child_reads_the_environment() {
    if std::env::var_os("HARNESS_TEST_CHILD").is_none() {
        return;
    }
    let client = Client::from_env().unwrap();
    assert_eq!(client.base_url(), "http://127.0.0.1:9/v1");
    assert!(format!("{client:?}").contains("<redacted>"));
}

#[test]
fn child_without_a_key_for_openai_fails() {
    if std::env::var_os("HARNESS_TEST_CHILD").is_none() {
        return;
    }
    let error = Client::from_env().unwrap_err();
    assert!(error.to_string().contains("OPENAI_API_KEY"), "{error}");
}

/// JSON has no NaN or infinity: such a sampling setting would be sent as
/// `null` and silently ignored, so it is refused before any request.
#[tokio::test]
async fn sampling_settings_that_are_not_finite_numbers_are_refused_before_sending() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(completion(
            json!({ "role": "assistant", "content": "hi" }),
            "stop",
        )))
        .expect(0)
        .mount(&server)
        .await;
    let model = model(&server);
    for (temperature, top_p, name) in [
        (Some(f32::NAN), None, "temperature is NaN"),
        (Some(f32::INFINITY), None, "temperature is inf"),
        (None, Some(f32::NEG_INFINITY), "top_p is -inf"),
        (Some(0.5), Some(f32::NAN), "top_p is NaN"),
    ] {
        let mut request = ask("hello");
        request.temperature = temperature;
        request.top_p = top_p;
        let error = model.complete(&request).await.unwrap_err();
        assert!(
            matches!(error, ModelError::InvalidRequest { status: None, .. }),
            "{error:?}"
        );
        assert!(error.to_string().contains(name), "{error}");
        assert!(model.stream(&request).await.is_err());
    }
}

mod embed;
mod secrets;
mod typed;
mod usage;

#[tokio::test]
async fn tool_arguments_that_are_not_json_stay_with_their_call_not_fail_the_turn() {
    for broken in ["{\"city\": ", "{city: Paris}", "Paris"] {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(200).set_body_json(completion(
                json!({
                    "role": "assistant",
                    "content": null,
                    "tool_calls": [
                        { "id": "bad", "type": "function",
                          "function": { "name": "get_weather", "arguments": broken } },
                        { "id": "good", "type": "function",
                          "function": { "name": "get_weather", "arguments": "{\"city\":\"Rome\"}" } }
                    ]
                }),
                "tool_calls",
            )))
            .mount(&server)
            .await;
        let response = model(&server).complete(&ask("Weather?")).await.unwrap();
        let calls: Vec<&ToolCall> = response.tool_calls().collect();
        assert_eq!(calls[0].arguments, json!(broken), "{broken}");
        assert_eq!(calls[1].arguments, json!({"city": "Rome"}));
        // Dispatched, the broken call is an error result for that call.
        let tools = harness::llm::ToolSet::new();
        let result = tools.dispatch_or_report(calls[0]).await;
        assert!(result.is_error);
        assert_eq!(result.call_id, "bad");
    }
}

#[tokio::test]
async fn a_request_without_a_bound_is_sent_with_the_default_one() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(completion(
            json!({ "role": "assistant", "content": "ok" }),
            "stop",
        )))
        .mount(&server)
        .await;
    let unbounded = ModelRequest::builder().user("Hi").build();
    assert_eq!(unbounded.max_tokens, None);
    // A compatible server (not api.openai.com) reads `max_tokens`.
    model(&server).complete(&unbounded).await.unwrap();
    model(&server)
        .default_max_tokens(300)
        .complete(&unbounded)
        .await
        .unwrap();
    // The request's own bound wins over the default.
    model(&server)
        .default_max_tokens(300)
        .complete(&ask("Hi"))
        .await
        .unwrap();
    let sent: Vec<Value> = requests(&server)
        .await
        .iter()
        .map(|b| b["max_tokens"].clone())
        .collect();
    assert_eq!(
        sent,
        [
            json!(harness_openai::DEFAULT_MAX_TOKENS),
            json!(300),
            json!(64)
        ]
    );
}

#[tokio::test]
async fn the_token_limit_field_is_the_one_asked_for_whatever_the_url() {
    use harness_openai::TokenLimitField;
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(completion(
            json!({ "role": "assistant", "content": "ok" }),
            "stop",
        )))
        .mount(&server)
        .await;
    let at = |field: Option<TokenLimitField>| {
        let builder = Client::builder()
            .api_key(KEY)
            .base_url(format!("{}/v1", server.uri()));
        let builder = match field {
            Some(field) => builder.token_limit_field(field),
            None => builder,
        };
        builder.build().unwrap().completion_model("gpt-test")
    };
    for field in [
        None,
        Some(TokenLimitField::MaxCompletionTokens),
        Some(TokenLimitField::MaxTokens),
    ] {
        at(field).complete(&ask("Hi")).await.unwrap();
    }
    // One field each, never both: a server that knows one may refuse the
    // other.
    let sent: Vec<(Value, Value)> = requests(&server)
        .await
        .iter()
        .map(|b| (b["max_tokens"].clone(), b["max_completion_tokens"].clone()))
        .collect();
    assert_eq!(
        sent,
        [
            (json!(64), Value::Null),
            (Value::Null, json!(64)),
            (json!(64), Value::Null),
        ]
    );
}

#[tokio::test]
async fn a_base_url_with_a_query_keeps_it_after_the_path() {
    use wiremock::matchers::query_param;
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(query_param("api-version", "2024-10-21"))
        .respond_with(ResponseTemplate::new(200).set_body_json(completion(
            json!({ "role": "assistant", "content": "ok", "refusal": null }),
            "stop",
        )))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(query_param("api-version", "2024-10-21"))
        .and(body_partial_json(json!({ "stream": true })))
        .respond_with(ResponseTemplate::new(200).set_body_raw(
            sse(&[chunk(json!({ "content": "ok" }), json!("stop"))], true),
            "text/event-stream",
        ))
        .expect(1)
        .with_priority(1)
        .mount(&server)
        .await;
    for base in [
        format!("{}/v1?api-version=2024-10-21", server.uri()),
        format!("{}/v1/?api-version=2024-10-21", server.uri()),
    ] {
        let model = Client::builder()
            .api_key(KEY)
            .base_url(base.clone())
            .build()
            .unwrap()
            .completion_model("gpt-test");
        if base.contains("/v1/?") {
            let events: Vec<_> = model.stream(&ask("Hi")).await.unwrap().collect().await;
            assert!(events.iter().all(Result::is_ok), "{base}: {events:?}");
        } else {
            let answer = model.complete(&ask("Hi")).await.unwrap();
            assert_eq!(answer.text(), "ok", "{base}");
        }
    }
}

#[tokio::test]
async fn a_key_in_the_base_url_is_shown_neither_in_debug_nor_in_errors() {
    const IN_URL: &str = "sk-in-the-url-5e6f7a";
    for base in [
        format!("http://me:{IN_URL}@127.0.0.1:9/v1"),
        format!("http://127.0.0.1:9/v1?key={IN_URL}"),
        format!("http://{IN_URL}@127.0.0.1:9/v1?api-version=1&key={IN_URL}"),
    ] {
        let client = Client::builder()
            .api_key(KEY)
            .base_url(base.clone())
            .max_attempts(1)
            .build()
            .unwrap();
        let shown = format!("{client:?}");
        assert!(!shown.contains(IN_URL) && !shown.contains(KEY), "{shown}");
        assert!(shown.contains("127.0.0.1:9"), "{shown}");
        // Nothing listens on port 9: the transport error names the URL.
        let error = client
            .completion_model("gpt-test")
            .complete(&ask("Hi"))
            .await
            .unwrap_err();
        let text = format!("{error} {error:?}");
        assert!(matches!(error, ModelError::Transport { .. }), "{text}");
        assert!(!text.contains(IN_URL), "{text}");
    }
}

#[test]
fn a_base_url_with_a_fragment_is_refused() {
    for base in [
        "https://example.net/v1#part",
        "https://example.net/v1?api-version=2#x",
        "https://example.net/#",
    ] {
        let error = Client::builder()
            .api_key(KEY)
            .base_url(base)
            .build()
            .unwrap_err();
        assert!(
            matches!(&error, ModelError::Configuration { message } if message.contains("fragment")),
            "{base}: {error}"
        );
    }
}

#[tokio::test]
async fn a_stream_answered_with_something_else_is_said_to_be_so() {
    for (body, kind, begins) in [
        (
            completion(json!({ "role": "assistant", "content": "whole" }), "stop").to_string(),
            "application/json",
            "choices",
        ),
        (
            "<html><body>502 Bad Gateway</body></html>".to_owned(),
            "text/html",
            "502 Bad Gateway",
        ),
        (
            "plain words".to_owned(),
            "text/plain; charset=utf-8",
            "plain words",
        ),
    ] {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(200).set_body_raw(body.clone(), kind))
            .expect(1)
            .mount(&server)
            .await;
        let error = match model(&server).stream(&ask("Hi")).await {
            Err(e) => e,
            Ok(stream) => {
                let events: Vec<_> = stream.collect().await;
                panic!("{kind}: a stream of {events:?}")
            }
        };
        let text = error.to_string();
        assert!(
            matches!(error, ModelError::MalformedResponse { .. }),
            "{kind}: {text}"
        );
        assert!(text.contains("not an event stream"), "{kind}: {text}");
        assert!(
            text.contains(kind.split(';').next().unwrap()),
            "{kind}: {text}"
        );
        assert!(text.contains(begins), "{kind}: {text}");
    }
}

#[tokio::test]
async fn a_404_names_the_url_asked_so_that_a_wrong_base_url_shows() {
    // Nothing is mounted: the mock answers every request with a 404.
    let server = MockServer::start().await;
    let model = Client::builder()
        .api_key(KEY)
        .base_url(format!("{}/wrong/v1?key={KEY}", server.uri()))
        .max_attempts(1)
        .build()
        .unwrap()
        .completion_model("gpt-test");
    let complete = model.complete(&ask("Hi")).await.unwrap_err();
    let stream = match model.stream(&ask("Hi")).await {
        Err(e) => e,
        Ok(_) => panic!("a stream from a 404"),
    };
    for error in [complete, stream] {
        let text = error.to_string();
        assert!(
            matches!(
                error,
                ModelError::InvalidRequest {
                    status: Some(404),
                    ..
                }
            ),
            "{text}"
        );
        assert!(text.contains("/wrong/v1/chat/completions"), "{text}");
        assert!(text.contains("check the base URL"), "{text}");
        assert!(!text.contains(KEY), "{text}");
    }
}

/// Whether an error is the one a case expects.
type Expected = fn(&ModelError) -> bool;

/// The calls a stream must give: each one's name and arguments.
type Calls = Vec<(&'static str, Value)>;
