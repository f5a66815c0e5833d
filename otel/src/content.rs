//! Message contents in the GenAI conventions' JSON shapes: input messages,
//! system instructions, output messages.
//!
//! The core records a model call's request messages and response as its own
//! JSON (the serde form of [`Message`] and [`ModelResponse`]); these turn
//! them into the conventions' `{"role", "parts": [{"type", ...}]}` form.
//! Provider signatures and redacted reasoning are opaque data meant for
//! the provider alone and are left out.

use harness::llm::{ContentPart, ImageSource, Message, ModelResponse, Role, StopReason};
use serde_json::{Value, json};

/// The conventions' parts of `content`.
fn parts(content: &[ContentPart]) -> Vec<Value> {
    content
        .iter()
        .filter_map(|part| match part {
            ContentPart::Text { text } => Some(json!({ "type": "text", "content": text })),
            ContentPart::ToolCall(call) => Some(json!({
                "type": "tool_call",
                "id": call.id,
                "name": call.name,
                "arguments": call.arguments,
            })),
            ContentPart::ToolResult(result) => Some(json!({
                "type": "tool_call_response",
                "id": result.call_id,
                "response": result.content,
            })),
            ContentPart::Reasoning(reasoning) if !reasoning.text.is_empty() => {
                Some(json!({ "type": "reasoning", "content": reasoning.text }))
            }
            ContentPart::Image(ImageSource::Url { url }) => {
                Some(json!({ "type": "uri", "modality": "image", "uri": url }))
            }
            ContentPart::Image(ImageSource::Base64 { media_type, data }) => Some(json!({
                "type": "blob",
                "modality": "image",
                "mime_type": media_type,
                "content": data,
            })),
            _ => None,
        })
        .collect()
}

fn role(role: Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

/// The conventions' finish reason for `reason`.
pub(crate) fn finish_reason(reason: &StopReason) -> String {
    match reason {
        StopReason::EndTurn | StopReason::StopSequence => "stop".to_owned(),
        StopReason::ToolUse => "tool_call".to_owned(),
        StopReason::MaxTokens => "length".to_owned(),
        StopReason::Other(other) => other.clone(),
        _ => "_OTHER".to_owned(),
    }
}

/// `gen_ai.input.messages` and `gen_ai.system_instructions` (when the
/// request has system messages) from the request's messages as the core
/// serialized them. `None` if they are not messages.
pub(crate) fn input(messages: &str) -> Option<(String, Option<String>)> {
    let messages: Vec<Message> = serde_json::from_str(messages).ok()?;
    let mut system = Vec::new();
    let mut input = Vec::new();
    for message in &messages {
        if message.role == Role::System {
            system.extend(parts(&message.content));
        } else {
            input.push(json!({ "role": role(message.role), "parts": parts(&message.content) }));
        }
    }
    let system = (!system.is_empty()).then(|| Value::Array(system).to_string());
    Some((Value::Array(input).to_string(), system))
}

/// `gen_ai.output.messages` from the response as the core serialized it.
/// `None` if it is not a response.
pub(crate) fn output(response: &str) -> Option<String> {
    let response: ModelResponse = serde_json::from_str(response).ok()?;
    let message = json!({
        "role": "assistant",
        "parts": parts(&response.content),
        "finish_reason": finish_reason(&response.stop_reason),
    });
    Some(Value::Array(vec![message]).to_string())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use harness::llm::{ToolCall, ToolResult};

    #[test]
    fn system_messages_become_instructions_and_tool_parts_keep_their_ids() {
        let call = ToolCall::new("c1", "add", json!({"a": 1})).with_signature("gemini", "sig");
        let messages = vec![
            Message::system("Be terse."),
            Message::user("add 1"),
            Message::new(Role::Assistant, [ContentPart::ToolCall(call.clone())]),
            Message::tool_result(ToolResult::success(&call, "1")),
        ];
        let (input, system) = input(&serde_json::to_string(&messages).unwrap()).unwrap();
        let input: Value = serde_json::from_str(&input).unwrap();
        assert_eq!(
            input,
            json!([
                { "role": "user", "parts": [{ "type": "text", "content": "add 1" }] },
                { "role": "assistant", "parts": [{ "type": "tool_call", "id": "c1", "name": "add", "arguments": { "a": 1 } }] },
                { "role": "tool", "parts": [{ "type": "tool_call_response", "id": "c1", "response": "1" }] },
            ])
        );
        assert!(!input.to_string().contains("sig"), "signatures stay out");
        let system: Value = serde_json::from_str(&system.unwrap()).unwrap();
        assert_eq!(system, json!([{ "type": "text", "content": "Be terse." }]));
    }

    #[test]
    fn output_has_the_finish_reason_and_what_is_not_json_is_refused() {
        let response = ModelResponse::from_text("hi");
        let out = output(&serde_json::to_string(&response).unwrap()).unwrap();
        let out: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            out,
            json!([{ "role": "assistant", "parts": [{ "type": "text", "content": "hi" }], "finish_reason": "stop" }])
        );
        for bad in [
            "",
            "{",
            "[1, 2]",
            "\"text\"",
            "{\"role\": \"pilot\", \"content\": []}",
        ] {
            assert!(input(bad).is_none(), "{bad}");
        }
        for bad in ["", "[]", "{\"content\": 3}"] {
            assert!(output(bad).is_none(), "{bad}");
        }
    }
}
