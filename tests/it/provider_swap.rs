//! The same loop on two providers (OpenAI and Anthropic, each against a mock
//! server speaking its wire format) gets the same outcome: swapping the
//! provider changes one line of setup and nothing in the loop. A
//! conversation that switches providers midway sends each one only its own
//! reasoning.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use harness::llm::{LanguageModel, Message, ModelRequest, ToolResult, ToolSet};
use harness::{Outcome, create_agent_with};
use harness_tests::{Chat, Counter, DepsAgent, chat_loop};
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
    let agent = create_agent_with("swap", &harness, DepsAgent { model });
    let chat = Chat {
        messages: vec![Message::user("Add 5 to the counter and tell me the total.")],
    };
    let out = agent.run(chat).await.unwrap();
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

const CLAUDE_THOUGHT: &str = "Claude adds five first.";
const CLAUDE_SIGNATURE: &str = "EqQBCkgIClaudeSignature+/z==";
const GEMINI_THOUGHT: &str = "Gemini adds two next.";
const GEMINI_SIGNATURE: &str = "R2VtaW5pU2lnbmF0dXJl";
const GEMINI_THOUGHT_SIGNATURE: &str = "VGhvdWdodFNpZ25hdHVyZQ==";

/// The raw body of the `n`th request `server` received.
async fn body(server: &MockServer, n: usize) -> String {
    String::from_utf8(server.received_requests().await.unwrap()[n].body.clone()).unwrap()
}

#[tokio::test]
async fn reasoning_goes_back_only_to_the_provider_that_produced_it() {
    // Claude thinks and calls the tool, Gemini thinks and calls it again,
    // then the whole conversation goes to each provider.
    let claude_server = MockServer::start().await;
    let claude_reply = |content: serde_json::Value, stop: &str| {
        json!({ "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
                "content": content, "stop_reason": stop, "usage": {"input_tokens": 9, "output_tokens": 9} })
    };
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(claude_reply(
            json!([
                {"type": "thinking", "thinking": CLAUDE_THOUGHT, "signature": CLAUDE_SIGNATURE},
                {"type": "tool_use", "id": "toolu_1", "name": "count", "input": {"by": 5}}
            ]),
            "tool_use",
        )))
        .up_to_n_times(1)
        .mount(&claude_server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(claude_reply(
            json!([{"type": "text", "text": "7."}]),
            "end_turn",
        )))
        .mount(&claude_server)
        .await;
    let gemini_server = MockServer::start().await;
    let gemini_reply = |parts: serde_json::Value| json!({ "candidates": [{ "content": { "role": "model", "parts": parts }, "finishReason": "STOP" }] });
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(gemini_reply(json!([
            {"text": GEMINI_THOUGHT, "thought": true, "thoughtSignature": GEMINI_THOUGHT_SIGNATURE},
            {"functionCall": {"name": "count", "args": {"by": 2}}, "thoughtSignature": GEMINI_SIGNATURE}
        ]))))
        .up_to_n_times(1)
        .mount(&gemini_server)
        .await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(gemini_reply(json!([{"text": "7."}]))),
        )
        .mount(&gemini_server)
        .await;
    let openai_server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1_700_000_000, "model": "gpt-test",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "7."}, "finish_reason": "stop"}]
        })))
        .mount(&openai_server)
        .await;
    let claude = harness_anthropic::Client::builder()
        .api_key("sk-ant-test")
        .base_url(claude_server.uri())
        .build()
        .unwrap()
        .completion_model("claude-test");
    let gemini = harness_gemini::Client::builder()
        .api_key("AIza-test")
        .base_url(format!("{}/v1beta", gemini_server.uri()))
        .build()
        .unwrap()
        .completion_model("gemini-test");
    let openai = harness_openai::Client::builder()
        .api_key("sk-test")
        .base_url(format!("{}/v1", openai_server.uri()))
        .build()
        .unwrap()
        .completion_model("gpt-test");

    let mut request = ModelRequest::new([Message::user("Add 5, then 2.")]);
    for model in [&claude as &dyn LanguageModel, &gemini] {
        let response = model.complete(&request).await.unwrap();
        let call = response.tool_calls().next().unwrap().clone();
        request.messages.push(response.into_message());
        request
            .messages
            .push(Message::tool_result(ToolResult::success(&call, "ok")));
    }
    let gemini_call = request.messages[3].tool_calls().next().unwrap();
    assert_eq!(gemini_call.id, "gemini_call_0", "no signature in the id");
    for model in [&claude as &dyn LanguageModel, &gemini, &openai] {
        assert_eq!(model.complete(&request).await.unwrap().text(), "7.");
    }

    let claude_sees = body(&claude_server, 1).await;
    let gemini_sees = [body(&gemini_server, 0).await, body(&gemini_server, 1).await];
    let openai_sees = body(&openai_server, 0).await;
    assert!(claude_sees.contains(CLAUDE_THOUGHT) && claude_sees.contains(CLAUDE_SIGNATURE));
    for own in [GEMINI_THOUGHT, GEMINI_THOUGHT_SIGNATURE, GEMINI_SIGNATURE] {
        assert!(gemini_sees[1].contains(own), "{own}: {}", gemini_sees[1]);
    }
    for (provider, seen) in [
        ("anthropic", &claude_sees),
        ("gemini", &gemini_sees[0]),
        ("gemini", &gemini_sees[1]),
        ("openai", &openai_sees),
    ] {
        let theirs: &[&str] = match provider {
            "anthropic" => &[GEMINI_THOUGHT, GEMINI_THOUGHT_SIGNATURE, GEMINI_SIGNATURE],
            "gemini" => &[CLAUDE_THOUGHT, CLAUDE_SIGNATURE],
            _ => &[
                CLAUDE_THOUGHT,
                CLAUDE_SIGNATURE,
                GEMINI_THOUGHT,
                GEMINI_THOUGHT_SIGNATURE,
                GEMINI_SIGNATURE,
            ],
        };
        for secret in theirs {
            assert!(
                !seen.contains(secret),
                "{provider} was sent {secret}: {seen}"
            );
        }
    }
    for seen in [&claude_sees, &openai_sees] {
        assert!(
            seen.contains("\"toolu_1\"") && seen.contains("\"gemini_call_0\""),
            "both calls keep their plain ids: {seen}"
        );
    }
}
