//! harness-gemini against a local mock of the Gemini API.
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::{Duration, Instant};

use futures::StreamExt;
use harness::llm::{
    ContentPart, LanguageModel, Message, ModelError, ModelRequest, Reasoning, StopReason,
    StreamEvent, ToolCall, ToolChoice, ToolResult, ToolSpec, Usage, collect_stream,
};
use harness_gemini::{Client, CompletionModel, HttpRetryPolicy};
use serde_json::{Value, json};
use wiremock::matchers::{header, method, path, query_param};
use wiremock::{Mock, MockServer, ResponseTemplate};

const KEY: &str = "AIza-test-secret-9012";
const GENERATE: &str = "/v1beta/models/gemini-test:generateContent";
const STREAM: &str = "/v1beta/models/gemini-test:streamGenerateContent";

fn model(server: &MockServer) -> CompletionModel {
    Client::builder()
        .api_key(KEY)
        .base_url(format!("{}/v1beta", server.uri()))
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
        .completion_model("models/gemini-test")
}

fn ask(text: &str) -> ModelRequest {
    ModelRequest::builder()
        .system("Be brief.")
        .user(text)
        .temperature(0.5)
        .build()
}

fn answer(parts: Value, finish_reason: &str) -> Value {
    json!({
        "candidates": [{ "content": { "role": "model", "parts": parts }, "finishReason": finish_reason, "index": 0 }],
        "usageMetadata": { "promptTokenCount": 11, "candidatesTokenCount": 4, "thoughtsTokenCount": 3, "totalTokenCount": 18 },
        "modelVersion": "gemini-test"
    })
}

fn sse(chunks: &[Value]) -> String {
    chunks
        .iter()
        .map(|c| format!("data: {c}\r\n\r\n"))
        .collect()
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
        .and(path(GENERATE))
        .and(header("x-goog-api-key", KEY))
        .respond_with(ResponseTemplate::new(200).set_body_json(answer(
            json!([{ "text": "Hel" }, { "text": "lo!" }]),
            "STOP",
        )))
        .expect(1)
        .mount(&server)
        .await;
    let model = model(&server);
    let response = model.complete(&ask("Hi")).await.unwrap();
    assert_eq!(response.text(), "Hello!");
    assert_eq!(response.stop_reason, StopReason::EndTurn);
    assert_eq!(response.usage, Usage::new(11, 7).with_reasoning(3));
    assert_eq!(model.model_name(), "gemini-test");
    assert_eq!(
        requests(&server).await[0],
        json!({
            "contents": [{ "role": "user", "parts": [{ "text": "Hi" }] }],
            "systemInstruction": { "parts": [{ "text": "Be brief." }] },
            "generationConfig": { "temperature": 0.5, "maxOutputTokens": 4096 }
        })
    );
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct WeatherArgs {
    /// City name.
    city: String,
    /// Unit.
    unit: Option<Unit>,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
enum Unit {
    Celsius,
    Fahrenheit,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NoArgs {}

#[tokio::test]
async fn tool_call_with_thought_signature_round_trips() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(GENERATE))
        .respond_with(ResponseTemplate::new(200).set_body_json(answer(
            json!([{ "functionCall": { "name": "get_weather", "args": { "city": "Paris" } },
                     "thoughtSignature": "c2lnbmF0dXJl" }]),
            "STOP",
        )))
        .mount(&server)
        .await;
    let mut request = ModelRequest::builder()
        .user("Weather in Paris?")
        .tool(ToolSpec::from_args::<WeatherArgs>(
            "get_weather",
            "Weather in a city",
        ))
        .tool(ToolSpec::from_args::<NoArgs>("now", "The current time"))
        .tool_choice(ToolChoice::Tool("get_weather".into()))
        .build();
    let model = model(&server);
    let response = model.complete(&request).await.unwrap();
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    let call = response.tool_calls().next().unwrap().clone();
    assert_eq!(call.name, "get_weather");
    assert_eq!(call.arguments, json!({ "city": "Paris" }));
    assert_eq!(
        call.id, "gemini_call_0",
        "the signature stays out of the id"
    );
    assert_eq!(call.signature_for("gemini"), Some("c2lnbmF0dXJl"));

    request.messages.push(response.into_message());
    request.messages.push(Message::tool_results([
        ToolResult::success(&call, r#"{"temp_c": 18}"#),
        ToolResult::success(&call, "sunny"),
    ]));
    model.complete(&request).await.unwrap();

    let bodies = requests(&server).await;
    let declarations = &bodies[0]["tools"][0]["functionDeclarations"];
    assert_eq!(declarations[0]["name"], "get_weather");
    let parameters = &declarations[0]["parameters"];
    assert!(parameters.get("$defs").is_none() && parameters.get("$schema").is_none());
    assert!(parameters.get("additionalProperties").is_none());
    assert_eq!(parameters["properties"]["unit"]["nullable"], true);
    assert_eq!(
        parameters["properties"]["unit"]["enum"],
        json!(["Celsius", "Fahrenheit"])
    );
    assert!(
        declarations[1].get("parameters").is_none(),
        "no-argument tools declare none"
    );
    assert_eq!(
        bodies[0]["toolConfig"],
        json!({ "functionCallingConfig": { "mode": "ANY", "allowedFunctionNames": ["get_weather"] } })
    );
    assert_eq!(
        bodies[1]["contents"],
        json!([
            { "role": "user", "parts": [{ "text": "Weather in Paris?" }] },
            { "role": "model", "parts": [{ "functionCall": { "name": "get_weather", "args": { "city": "Paris" } },
                                           "thoughtSignature": "c2lnbmF0dXJl" }] },
            { "role": "user", "parts": [
                { "functionResponse": { "name": "get_weather", "response": { "temp_c": 18 } } },
                { "functionResponse": { "name": "get_weather", "response": { "result": "sunny" } } }
            ] }
        ])
    );
}

#[tokio::test]
async fn images_are_sent_inline() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(answer(json!([{ "text": "A cat." }]), "STOP")),
        )
        .mount(&server)
        .await;
    let request = ModelRequest::new([
        Message::user("What is it?").with(ContentPart::image_base64("image/png", "iVBOR"))
    ]);
    model(&server).complete(&request).await.unwrap();
    assert_eq!(
        requests(&server).await[0]["contents"][0]["parts"][1],
        json!({ "inlineData": { "mimeType": "image/png", "data": "iVBOR" } })
    );
}

#[tokio::test]
async fn streamed_answer() {
    let server = MockServer::start().await;
    let chunk = |text: &str| json!({ "candidates": [{ "content": { "role": "model", "parts": [{ "text": text }] }, "index": 0 }] });
    Mock::given(method("POST"))
        .and(path(STREAM))
        .and(query_param("alt", "sse"))
        .and(header("x-goog-api-key", KEY))
        .respond_with(ResponseTemplate::new(200).set_body_raw(
            sse(&[
                chunk("Hel"),
                json!({ "candidates": [{ "content": { "role": "model", "parts": [{ "text": "thinking…", "thought": true }] } }] }),
                chunk("lo"),
                answer(json!([{ "text": "!" }]), "STOP"),
            ]),
            "text/event-stream",
        ))
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
            Ok(StreamEvent::ReasoningDelta {
                text: "thinking…".into()
            }),
            Ok(StreamEvent::ReasoningEnd {
                reasoning: Reasoning::new("gemini", "thinking…")
            }),
            Ok(StreamEvent::text("lo")),
            Ok(StreamEvent::text("!")),
            Ok(StreamEvent::Usage(Usage::new(11, 7).with_reasoning(3))),
            Ok(StreamEvent::finish(StopReason::EndTurn)),
        ]
    );
}

/// An error Google sends inside a stream (or in a 200 body) is the error
/// it says, by its status or its code: not a stream cut short.
#[tokio::test]
async fn an_error_inside_a_stream_or_a_200_body_is_the_error_it_says() {
    let chunk = json!({ "candidates": [{ "content": { "role": "model", "parts": [{ "text": "Hel" }] }, "index": 0 }] });
    let cases: Vec<(Value, Expected)> = vec![
        (
            json!({ "code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE" }),
            |e| matches!(e, ModelError::Overloaded { message, .. } if message.contains("overloaded")),
        ),
        (
            json!({ "code": 429, "message": "Quota exceeded.", "status": "RESOURCE_EXHAUSTED" }),
            |e| matches!(e, ModelError::RateLimited { .. }),
        ),
        (json!({ "code": 500, "message": "Internal error." }), |e| {
            matches!(
                e,
                ModelError::Overloaded {
                    status: Some(500),
                    ..
                }
            )
        }),
        (
            json!({ "code": 400, "message": "Bad part.", "status": "INVALID_ARGUMENT" }),
            |e| matches!(e, ModelError::InvalidRequest { .. }),
        ),
    ];
    for (error, expected) in cases {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path(STREAM))
            .respond_with(ResponseTemplate::new(200).set_body_raw(
                sse(&[chunk.clone(), json!({ "error": error })]),
                "text/event-stream",
            ))
            .mount(&server)
            .await;
        let events: Vec<_> = model(&server)
            .stream(&ask("Hi"))
            .await
            .unwrap()
            .collect()
            .await;
        assert_eq!(events[0], Ok(StreamEvent::text("Hel")), "{error}");
        let got = events.last().unwrap().clone().unwrap_err();
        assert!(expected(&got), "streamed {error}: {got:?}");

        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({ "error": error })))
            .mount(&server)
            .await;
        let got = model(&server).complete(&ask("Hi")).await.unwrap_err();
        assert!(expected(&got), "{error}: {got:?}");
    }
}

#[tokio::test]
async fn parallel_calls_keep_gemini_ids_and_the_first_call_signature() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(GENERATE))
        .respond_with(ResponseTemplate::new(200).set_body_json(answer(
            json!([
                { "functionCall": { "id": "fc_1", "name": "get_weather", "args": { "city": "Paris" } },
                  "thoughtSignature": "Cq8BAdHtim9+/z==" },
                { "functionCall": { "id": "fc_2", "name": "get_weather", "args": { "city": "Rome" } } }
            ]),
            "STOP",
        )))
        .mount(&server)
        .await;
    let model = model(&server);
    let mut request = ask("Weather in Paris and Rome?");
    let response = model.complete(&request).await.unwrap();
    let calls: Vec<ToolCall> = response.tool_calls().cloned().collect();
    assert_eq!(
        calls,
        vec![
            ToolCall::new("fc_1", "get_weather", json!({ "city": "Paris" }))
                .with_signature("gemini", "Cq8BAdHtim9+/z=="),
            ToolCall::new("fc_2", "get_weather", json!({ "city": "Rome" })),
        ]
    );
    request.messages.push(response.into_message());
    request.messages.push(Message::tool_results([
        ToolResult::success(&calls[0], "18"),
        ToolResult::success(&calls[1], "24"),
    ]));
    model.complete(&request).await.unwrap();
    let bodies = requests(&server).await;
    assert_eq!(
        bodies[1]["contents"][1],
        json!({ "role": "model", "parts": [
            { "functionCall": { "id": "fc_1", "name": "get_weather", "args": { "city": "Paris" } },
              "thoughtSignature": "Cq8BAdHtim9+/z==" },
            { "functionCall": { "id": "fc_2", "name": "get_weather", "args": { "city": "Rome" } } }
        ] })
    );
    assert_eq!(
        bodies[1]["contents"][2]["parts"][0]["functionResponse"]["id"],
        "fc_1"
    );
}

#[tokio::test]
async fn thoughts_and_text_signatures_go_back_where_they_came_from() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(GENERATE))
        .respond_with(ResponseTemplate::new(200).set_body_json(answer(
            json!([
                { "text": "**Planning** the answer.", "thought": true },
                { "text": "It is sunny.", "thoughtSignature": "dGV4dA==" }
            ]),
            "STOP",
        )))
        .mount(&server)
        .await;
    let model = model(&server);
    let mut request = ask("Weather?");
    let response = model.complete(&request).await.unwrap();
    assert_eq!(
        response.content,
        vec![
            ContentPart::Reasoning(Reasoning::new("gemini", "**Planning** the answer.")),
            ContentPart::text("It is sunny."),
            ContentPart::Reasoning(Reasoning::new("gemini", "").with_signature("dGV4dA==")),
        ]
    );
    assert_eq!(response.text(), "It is sunny.");
    request.messages.push(response.into_message());
    request.messages.push(Message::user("Thanks."));
    model.complete(&request).await.unwrap();
    assert_eq!(
        requests(&server).await[1]["contents"][1],
        json!({ "role": "model", "parts": [
            { "text": "**Planning** the answer.", "thought": true },
            { "text": "It is sunny.", "thoughtSignature": "dGV4dA==" }
        ] })
    );
}

#[tokio::test]
async fn streamed_thoughts_are_joined_and_signatures_kept() {
    let server = MockServer::start().await;
    let chunk = |parts: Value| json!({ "candidates": [{ "content": { "role": "model", "parts": parts }, "index": 0 }] });
    Mock::given(method("POST"))
        .and(path(STREAM))
        .respond_with(ResponseTemplate::new(200).set_body_raw(
            sse(&[
                chunk(json!([{ "text": "Plan", "thought": true }])),
                chunk(json!([{ "text": "ning.", "thought": true, "thoughtSignature": "c2ln" }])),
                chunk(json!([{ "text": "Sun" }])),
                chunk(json!([{ "text": "ny." }])),
                answer(
                    json!([{ "text": "", "thoughtSignature": "dGV4dA==" }]),
                    "STOP",
                ),
            ]),
            "text/event-stream",
        ))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(GENERATE))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(answer(json!([{ "text": "ok" }]), "STOP")),
        )
        .mount(&server)
        .await;
    let model = model(&server);
    let mut request = ask("Weather?");
    let response = collect_stream(model.stream(&request).await.unwrap())
        .await
        .unwrap();
    assert_eq!(
        response.content,
        vec![
            ContentPart::Reasoning(Reasoning::new("gemini", "Planning.").with_signature("c2ln")),
            ContentPart::text("Sunny."),
            ContentPart::Reasoning(Reasoning::new("gemini", "").with_signature("dGV4dA==")),
        ]
    );
    request.messages.push(response.into_message());
    request.messages.push(Message::user("Thanks."));
    model.complete(&request).await.unwrap();
    assert_eq!(
        requests(&server).await[1]["contents"][1]["parts"],
        json!([
            { "text": "Planning.", "thought": true, "thoughtSignature": "c2ln" },
            { "text": "Sunny.", "thoughtSignature": "dGV4dA==" }
        ])
    );
}

#[tokio::test]
async fn a_signature_after_no_text_goes_back_alone_and_others_reasoning_not_at_all() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(answer(json!([{ "text": "ok" }]), "STOP")),
        )
        .mount(&server)
        .await;
    let request = ModelRequest::new([
        Message::user("Hi"),
        Message::new(
            harness::llm::Role::Assistant,
            [
                ContentPart::Reasoning(
                    Reasoning::new("anthropic", "Claude's thinking").with_signature("EqQB"),
                ),
                ContentPart::ToolCall(
                    ToolCall::new("toolu_01", "now", json!({})).with_signature("anthropic", "EqQB"),
                ),
                ContentPart::Reasoning(Reasoning::new("gemini", "").with_signature("c2ln")),
            ],
        ),
    ]);
    model(&server).complete(&request).await.unwrap();
    assert_eq!(
        requests(&server).await[0]["contents"][1],
        json!({ "role": "model", "parts": [
            { "functionCall": { "id": "toolu_01", "name": "now", "args": {} } },
            { "text": "", "thoughtSignature": "c2ln" }
        ] })
    );
}

#[tokio::test]
async fn streamed_tool_calls() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(STREAM))
        .respond_with(ResponseTemplate::new(200).set_body_raw(
            sse(&[
                json!({ "candidates": [{ "content": { "role": "model", "parts": [
                    { "functionCall": { "id": "fc_1", "name": "get_weather", "args": { "city": "Paris" } } }
                ] } }] }),
                answer(json!([{ "functionCall": { "name": "get_time", "args": {} } }]), "STOP"),
            ]),
            "text/event-stream",
        ))
        .mount(&server)
        .await;
    let response = collect_stream(
        model(&server)
            .stream(&ask("Weather and time?"))
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    assert_eq!(
        response.tool_calls().cloned().collect::<Vec<_>>(),
        vec![
            ToolCall::new("fc_1", "get_weather", json!({ "city": "Paris" })),
            ToolCall::new("gemini_call_1", "get_time", json!({})),
        ]
    );
}

#[tokio::test]
async fn unauthorized_is_an_auth_error_without_retries() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(401).set_body_json(json!({
            "error": { "code": 401, "message": "Request had invalid authentication credentials.", "status": "UNAUTHENTICATED" }
        })))
        .up_to_n_times(1)
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(400).set_body_json(json!({
            "error": { "code": 400, "message": "API key not valid. Please pass a valid API key.", "status": "INVALID_ARGUMENT",
                       "details": [{ "@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID",
                                     "domain": "googleapis.com" }] }
        })))
        .expect(1)
        .mount(&server)
        .await;
    let model = model(&server);
    let error = model.complete(&ask("Hi")).await.unwrap_err();
    assert_eq!(
        error,
        ModelError::Auth {
            message: "Request had invalid authentication credentials.".into()
        }
    );
    let error = model.complete(&ask("Hi")).await.unwrap_err();
    assert!(matches!(error, ModelError::Auth { .. }), "{error}");
}

#[tokio::test]
async fn rate_limit_honours_retry_delay_then_succeeds() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(429).set_body_json(json!({
            "error": { "code": 429, "message": "Resource has been exhausted (e.g. check quota).", "status": "RESOURCE_EXHAUSTED",
                       "details": [{ "@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "0.25s" }] }
        })))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(answer(json!([{ "text": "ok" }]), "STOP")),
        )
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
async fn server_error_is_retried_then_succeeds() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(500).set_body_json(json!({
            "error": { "code": 500, "message": "An internal error has occurred.", "status": "INTERNAL" }
        })))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(
            sse(&[answer(json!([{ "text": "recovered" }]), "STOP")]),
            "text/event-stream",
        ))
        .mount(&server)
        .await;
    let response = collect_stream(model(&server).stream(&ask("Hi")).await.unwrap())
        .await
        .unwrap();
    assert_eq!(response.text(), "recovered");
    assert_eq!(requests(&server).await.len(), 2);
}

#[tokio::test]
async fn slow_answers_time_out() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(answer(json!([{ "text": "late" }]), "STOP"))
                .set_delay(Duration::from_millis(600)),
        )
        .mount(&server)
        .await;
    let model = Client::builder()
        .api_key(KEY)
        .base_url(format!("{}/v1beta", server.uri()))
        .timeout(Duration::from_millis(100))
        .max_attempts(2)
        .retry_policy(HttpRetryPolicy {
            max_attempts: 2,
            initial_backoff: Duration::from_millis(1),
            ..HttpRetryPolicy::default()
        })
        .build()
        .unwrap()
        .completion_model("gemini-test");
    let error = model.complete(&ask("Hi")).await.unwrap_err();
    assert_eq!(
        error,
        ModelError::Timeout {
            after: Duration::from_millis(100),
            model: Some("gemini-test".into()),
        }
    );
    assert_eq!(requests(&server).await.len(), 2, "a timeout is retried");
}

#[tokio::test]
async fn malformed_json_is_a_typed_error() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_raw("<html>oops</html>", "text/html"))
        .mount(&server)
        .await;
    let error = model(&server).complete(&ask("Hi")).await.unwrap_err();
    assert!(
        matches!(&error, ModelError::MalformedResponse { message } if message.contains("<html>")),
        "{error}"
    );
}

#[tokio::test]
async fn truncated_stream_is_a_typed_error() {
    let server = MockServer::start().await;
    let mut body = sse(&[
        json!({ "candidates": [{ "content": { "role": "model", "parts": [{ "text": "Hel" }] } }] }),
    ]);
    body.push_str("data: {\"candidates\": [{\"content\"");
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(body, "text/event-stream"))
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
        matches!(&events[1], Err(ModelError::MalformedResponse { message }) if message.contains("cut off")),
        "{events:?}"
    );
}

#[tokio::test]
async fn a_stream_whose_headers_are_late_times_out() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_raw(
                    sse(&[answer(json!([{ "text": "x" }]), "STOP")]),
                    "text/event-stream",
                )
                .set_delay(Duration::from_millis(600)),
        )
        .mount(&server)
        .await;
    let model = Client::builder()
        .api_key(KEY)
        .base_url(format!("{}/v1beta", server.uri()))
        .timeout(Duration::from_millis(100))
        .max_attempts(1)
        .build()
        .unwrap()
        .completion_model("gemini-test");
    assert_eq!(
        model.stream(&ask("Hi")).await.err(),
        Some(ModelError::Timeout {
            after: Duration::from_millis(100),
            model: Some("gemini-test".into()),
        })
    );
}

#[tokio::test]
async fn safety_blocks_are_content_filtered() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "promptFeedback": { "blockReason": "SAFETY" },
            "usageMetadata": { "promptTokenCount": 5 }
        })))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "candidates": [{ "finishReason": "SAFETY", "index": 0 }]
        })))
        .mount(&server)
        .await;
    let model = model(&server);
    assert_eq!(
        model.complete(&ask("Hi")).await.unwrap_err(),
        ModelError::ContentFiltered {
            reason: "SAFETY".into()
        }
    );
    assert_eq!(
        model.complete(&ask("Hi")).await.unwrap_err(),
        ModelError::ContentFiltered {
            reason: "SAFETY".into()
        }
    );
}

#[tokio::test]
async fn the_key_never_shows_in_debug_output_or_errors() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(404).set_body_json(json!({
            "error": { "code": 404, "message": "models/gemini-test is not found", "status": "NOT_FOUND" }
        })))
        .mount(&server)
        .await;
    let client = Client::builder()
        .api_key(KEY)
        .base_url(server.uri())
        .build()
        .unwrap();
    let model = client.completion_model("gemini-test");
    let error = model.complete(&ask("Hi")).await.unwrap_err();
    assert!(
        matches!(
            error,
            ModelError::InvalidRequest {
                status: Some(404),
                ..
            }
        ),
        "{error}"
    );
    for text in [
        format!("{client:?}"),
        format!("{model:#?}"),
        format!("{:?}", Client::builder().api_key(KEY)),
        error.to_string(),
    ] {
        assert!(!text.contains(KEY), "{text}");
    }
}

#[tokio::test]
async fn extra_fields_merge_into_the_generation_config_made_from_the_request() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(GENERATE))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(answer(json!([{ "text": "ok" }]), "STOP")),
        )
        .mount(&server)
        .await;
    let mut request = ask("Hi");
    request.max_tokens = Some(64);
    request.extra.insert(
        "generationConfig".into(),
        json!({ "thinkingConfig": { "includeThoughts": true }, "maxOutputTokens": null }),
    );
    model(&server).complete(&request).await.unwrap();
    let config = &requests(&server).await[0]["generationConfig"];
    // The request's temperature stays; the patch adds thinking and removes
    // the token limit.
    assert_eq!(config["temperature"], json!(0.5));
    assert_eq!(config["thinkingConfig"], json!({ "includeThoughts": true }));
    assert!(config.get("maxOutputTokens").is_none(), "{config}");
}

mod embedding;
mod secrets;
mod typed;
mod usage;

#[tokio::test]
async fn a_request_without_a_bound_is_sent_with_the_default_one() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(GENERATE))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(answer(json!([{ "text": "ok" }]), "STOP")),
        )
        .mount(&server)
        .await;
    let unbounded = ask("Hi");
    assert_eq!(unbounded.max_tokens, None);
    model(&server).complete(&unbounded).await.unwrap();
    model(&server)
        .default_max_tokens(300)
        .complete(&unbounded)
        .await
        .unwrap();
    let mut bounded = ask("Hi");
    bounded.max_tokens = Some(64);
    model(&server)
        .default_max_tokens(300)
        .complete(&bounded)
        .await
        .unwrap();
    let sent: Vec<Value> = requests(&server)
        .await
        .iter()
        .map(|b| b["generationConfig"]["maxOutputTokens"].clone())
        .collect();
    assert_eq!(
        sent,
        [
            json!(harness_gemini::DEFAULT_MAX_TOKENS),
            json!(300),
            json!(64)
        ]
    );
}

/// Whether an error is the one a case expects.
type Expected = fn(&ModelError) -> bool;
