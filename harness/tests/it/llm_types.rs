//! Shared model-layer types: construction, serde shape, typed parsing.
#![allow(clippy::unwrap_used, missing_docs)]

use harness::llm::{
    ContentPart, ImageSource, Message, ModelError, ModelRequest, ModelResponse, ProviderSignature,
    Reasoning, Role, StopReason, ToolCall, ToolChoice, ToolError, ToolResult, ToolSpec, Usage,
};
use serde_json::json;

#[derive(Debug, serde::Deserialize, schemars::JsonSchema, PartialEq)]
struct WeatherArgs {
    /// City name.
    city: String,
    /// Temperature unit.
    unit: Option<Unit>,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema, PartialEq)]
#[serde(rename_all = "lowercase")]
enum Unit {
    Celsius,
    Fahrenheit,
}

#[test]
fn tool_spec_schema_comes_from_the_args_type() {
    let spec = ToolSpec::from_args::<WeatherArgs>("get_weather", "Weather in a city");
    assert_eq!(spec.name, "get_weather");
    let schema = &spec.parameters;
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["properties"]["city"]["type"], "string");
    assert_eq!(schema["properties"]["city"]["description"], "City name.");
    assert_eq!(schema["required"], json!(["city"]));
    assert!(
        schema.get("$schema").is_none(),
        "meta-schema URI is dropped"
    );
    assert!(schema.get("title").is_none(), "Rust type name is dropped");
}

#[test]
fn tool_call_parses_typed_arguments() {
    let call = ToolCall::new(
        "c1",
        "get_weather",
        json!({"city": "Oslo", "unit": "celsius"}),
    );
    let args: WeatherArgs = call.parse_arguments().unwrap();
    assert_eq!(
        args,
        WeatherArgs {
            city: "Oslo".into(),
            unit: Some(Unit::Celsius)
        }
    );
}

#[test]
fn tool_call_with_bad_arguments_is_a_typed_error_for_the_model() {
    let call = ToolCall::new("c1", "get_weather", json!({"town": "Oslo"}));
    let error = call.parse_arguments::<WeatherArgs>().unwrap_err();
    assert!(matches!(&error, ToolError::InvalidArguments { tool, .. } if tool == "get_weather"));
    let text = error.to_string();
    assert!(text.contains("missing field `city`"), "{text}");
    assert!(text.contains("call it again"), "{text}");
}

#[test]
fn message_constructors_and_accessors() {
    let call = ToolCall::new("c1", "add", json!({"a": 1}));
    let m = Message::new(
        Role::Assistant,
        [
            ContentPart::text("Let me "),
            ContentPart::text("add."),
            ContentPart::ToolCall(call.clone()),
        ],
    );
    assert_eq!(m.text(), "Let me add.");
    assert_eq!(m.tool_calls().collect::<Vec<_>>(), vec![&call]);

    let result = ToolResult::success(&call, "2");
    assert_eq!(result.call_id, "c1");
    assert_eq!(result.name, "add");
    let tool_message = Message::tool_result(result);
    assert_eq!(tool_message.role, Role::Tool);
    assert!(ToolResult::failure(&call, "boom").is_error);
}

#[test]
fn content_serializes_with_explicit_tags() {
    let m = Message::user("What is this?").with(ContentPart::image_base64("image/png", "iVBOR"));
    let value = serde_json::to_value(&m).unwrap();
    assert_eq!(
        value,
        json!({
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image", "source": "base64", "media_type": "image/png", "data": "iVBOR"}
            ]
        })
    );
    let back: Message = serde_json::from_value(value).unwrap();
    assert_eq!(back, m);
    assert_eq!(
        ContentPart::image_url("https://x/y.png"),
        ContentPart::Image(ImageSource::Url {
            url: "https://x/y.png".into()
        })
    );
}

#[test]
fn reasoning_is_kept_in_order_but_is_not_text() {
    let thinking = Reasoning::new("anthropic", "The user wants 1 + 1.").with_signature("EqQB");
    let m = Message::new(
        Role::Assistant,
        [
            ContentPart::Reasoning(thinking.clone()),
            ContentPart::text("Adding."),
            ContentPart::Reasoning(Reasoning::redacted("anthropic", "EmwK")),
        ],
    );
    assert_eq!(m.text(), "Adding.");
    assert_eq!(
        m.reasoning().collect::<Vec<_>>(),
        vec![&thinking, &Reasoning::redacted("anthropic", "EmwK")]
    );
    let response = ModelResponse::new(m.content.clone(), Usage::default(), StopReason::EndTurn);
    assert_eq!(response.text(), "Adding.");
    assert_eq!(response.reasoning().count(), 2);
    assert!(thinking.is_from("anthropic") && !thinking.is_from("gemini"));
}

#[test]
fn reasoning_and_signatures_serialize_with_explicit_tags() {
    let call = ToolCall::new("c1", "now", json!({})).with_signature("gemini", "Cq8B");
    assert_eq!(
        call.signature,
        Some(ProviderSignature {
            provider: "gemini".into(),
            value: "Cq8B".into()
        })
    );
    let m = Message::new(
        Role::Assistant,
        [
            ContentPart::Reasoning(Reasoning::new("gemini", "Plan.").with_signature("c2ln")),
            ContentPart::ToolCall(call),
        ],
    );
    let value = serde_json::to_value(&m).unwrap();
    assert_eq!(
        value,
        json!({
            "role": "assistant",
            "content": [
                {"type": "reasoning", "provider": "gemini", "text": "Plan.", "signature": "c2ln"},
                {"type": "tool_call", "id": "c1", "name": "now", "arguments": {},
                 "signature": {"provider": "gemini", "value": "Cq8B"}}
            ]
        })
    );
    assert_eq!(serde_json::from_value::<Message>(value).unwrap(), m);
    // Calls stored before signatures existed read back unsigned.
    let unsigned: ToolCall =
        serde_json::from_value(json!({"id": "c2", "name": "now", "arguments": {}})).unwrap();
    assert_eq!(unsigned, ToolCall::new("c2", "now", json!({})));
    assert!(
        serde_json::to_value(&unsigned)
            .unwrap()
            .get("signature")
            .is_none()
    );
}

#[test]
fn request_builder_sets_every_field() {
    let spec = ToolSpec::new("t", "d", json!({"type": "object"}));
    let request = ModelRequest::builder()
        .system("sys")
        .user("hi")
        .message(Message::assistant("hello"))
        .tool(spec.clone())
        .tool_choice(ToolChoice::Tool("t".into()))
        .temperature(0.5)
        .top_p(0.9)
        .max_tokens(100)
        .stop_sequence("END")
        .extra("seed", json!(7))
        .build();
    assert_eq!(request.messages.len(), 3);
    assert_eq!(request.messages[0].role, Role::System);
    assert_eq!(request.tools, vec![spec]);
    assert_eq!(request.tool_choice, ToolChoice::Tool("t".into()));
    assert_eq!(request.temperature, Some(0.5));
    assert_eq!(request.top_p, Some(0.9));
    assert_eq!(request.max_tokens, Some(100));
    assert_eq!(request.stop_sequences, vec!["END".to_owned()]);
    assert_eq!(request.extra["seed"], 7);
    let text = serde_json::to_string(&request).unwrap();
    let back: ModelRequest = serde_json::from_str(&text).unwrap();
    assert_eq!(back, request);
}

#[test]
fn default_request_serializes_compactly() {
    let request = ModelRequest::new([Message::user("hi")]);
    assert_eq!(
        serde_json::to_value(&request).unwrap(),
        json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]})
    );
}

#[test]
fn response_helpers() {
    let call = ToolCall::new("c1", "add", json!({}));
    let response = ModelResponse::from_tool_call(call.clone()).with_usage(Usage::new(3, 4));
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    assert!(response.has_tool_calls());
    assert_eq!(response.usage.total(), 7);
    let message = response.into_message();
    assert_eq!(message.role, Role::Assistant);
    assert_eq!(message.tool_calls().next(), Some(&call));
}

#[test]
fn model_errors_say_what_to_do_and_round_trip() {
    let error = ModelError::RateLimited {
        retry_after: Some(std::time::Duration::from_millis(1500)),
        message: "slow down".into(),
    };
    assert!(error.is_retryable());
    assert_eq!(
        error.retry_after(),
        Some(std::time::Duration::from_millis(1500))
    );
    assert!(error.to_string().contains("retry after 1.5s"), "{error}");
    let back: ModelError = serde_json::from_str(&serde_json::to_string(&error).unwrap()).unwrap();
    assert_eq!(back, error);

    let auth = ModelError::Auth {
        message: "invalid x-api-key".into(),
    };
    assert!(!auth.is_retryable());
    assert!(auth.to_string().contains("check the API key"));
    let script = ModelError::ScriptMismatch {
        turn: 3,
        message: "m".into(),
    };
    assert!(script.to_string().contains("turn 3"));
}
