//! The same loop on two providers (OpenAI and Anthropic, each against a mock
//! server speaking its wire format) gets the same outcome: swapping the
//! provider changes one line of setup and nothing in the loop.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use harness::llm::{LanguageModel, Message, ToolSet};
use harness::{Outcome, Slots, create_agent};
use harness_tests::{Chat, Counter, chat_loop};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use wiremock::matchers::{body_string_contains, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

async fn run_loop(model: Arc<dyn LanguageModel>) -> (Outcome<Chat>, u32) {
    let counter = Counter::default();
    let harness = chat_loop(ToolSet::new().with(counter.clone()))
        .build()
        .unwrap();
    let agent = create_agent("swap", &harness, Slots::new().with("model", model)).unwrap();
    let chat = Chat {
        messages: vec![Message::user("Add 5 to the counter and tell me the total.")],
    };
    let out = agent.run(chat, Slots::new()).unwrap().await.unwrap();
    (out, counter.0.load(Ordering::SeqCst))
}

async fn openai() -> (MockServer, Arc<dyn LanguageModel>) {
    let server = MockServer::start().await;
    let reply = |message: serde_json::Value, finish: &str| {
        json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1_700_000_000,
            "model": "gpt-test",
            "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 8, "total_tokens": 28}
        })
    };
    // The second turn carries the tool's result; it is matched first.
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(body_string_contains("\"tool_call_id\""))
        .respond_with(ResponseTemplate::new(200).set_body_json(reply(
            json!({"role": "assistant", "content": "The counter is at 5."}),
            "stop",
        )))
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(reply(
            json!({"role": "assistant", "content": null, "tool_calls": [{
                "id": "call_1", "type": "function",
                "function": {"name": "count", "arguments": "{\"by\":5}"}
            }]}),
            "tool_calls",
        )))
        .mount(&server)
        .await;
    let model = harness_openai::Client::builder()
        .api_key("sk-test")
        .base_url(format!("{}/v1", server.uri()))
        .build()
        .unwrap()
        .completion_model("gpt-test");
    (server, Arc::new(model))
}

async fn anthropic() -> (MockServer, Arc<dyn LanguageModel>) {
    let server = MockServer::start().await;
    let reply = |content: serde_json::Value, stop: &str| {
        json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
            "content": content, "stop_reason": stop, "stop_sequence": null,
            "usage": {"input_tokens": 20, "output_tokens": 8}
        })
    };
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .and(body_string_contains("\"tool_result\""))
        .respond_with(ResponseTemplate::new(200).set_body_json(reply(
            json!([{"type": "text", "text": "The counter is at 5."}]),
            "end_turn",
        )))
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(ResponseTemplate::new(200).set_body_json(reply(
            json!([{"type": "tool_use", "id": "toolu_1", "name": "count", "input": {"by": 5}}]),
            "tool_use",
        )))
        .mount(&server)
        .await;
    let model = harness_anthropic::Client::builder()
        .api_key("sk-ant-test")
        .base_url(server.uri())
        .build()
        .unwrap()
        .completion_model("claude-test");
    (server, Arc::new(model))
}

#[tokio::test]
async fn the_same_loop_on_two_providers_has_the_same_outcome() {
    let (openai_server, openai_model) = openai().await;
    let (anthropic_server, anthropic_model) = anthropic().await;
    let (a, count_a) = run_loop(openai_model).await;
    let (b, count_b) = run_loop(anthropic_model).await;

    for (out, count) in [(&a, count_a), (&b, count_b)] {
        assert_eq!(out.signal, "complete");
        assert_eq!(out.steps, 3, "think, call_tools, think");
        assert_eq!(count, 5, "the tool ran once with by=5");
        assert_eq!(
            out.state.messages.last().unwrap().text(),
            "The counter is at 5."
        );
    }
    let shape = |o: &Outcome<Chat>| {
        o.state
            .messages
            .iter()
            .map(|m| {
                (
                    m.role,
                    m.tool_calls()
                        .map(|c| (c.name.clone(), c.arguments.clone()))
                        .collect::<Vec<_>>(),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        shape(&a),
        shape(&b),
        "same conversation, whichever provider"
    );
    assert_eq!(openai_server.received_requests().await.unwrap().len(), 2);
    assert_eq!(anthropic_server.received_requests().await.unwrap().len(), 2);
}
