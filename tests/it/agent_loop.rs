//! A model-driven loop end to end: scripted model, typed tools, retries and
//! model errors, through the public API only.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use harness::llm::LanguageModel;
use harness::llm::{Expect, ModelError, ModelResponse, Role, ScriptedModel, ToolCall, ToolSet};
use harness::{RetryPolicy, RunError, create_agent_with};
use harness_tests::{Chat, Counter, DepsAgent, chat_loop, chat_loop_with};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

fn chat(question: &str) -> Chat {
    Chat {
        messages: vec![harness::llm::Message::user(question)],
    }
}

#[tokio::test]
async fn model_calls_a_tool_then_answers_with_its_result() {
    let counter = Counter::default();
    let model = Arc::new(ScriptedModel::new([
        Expect::any()
            .offers_tool("count")
            .reply(ModelResponse::from_tool_call(ToolCall::new(
                "c1",
                "count",
                json!({"by": 5}),
            ))),
        Expect::any()
            .last_role(Role::Tool)
            .last_message_contains("5")
            .reply(ModelResponse::from_text("The counter is at 5.")),
    ]));
    let harness = chat_loop(ToolSet::new().with(counter.clone()))
        .build()
        .unwrap();
    let agent = create_agent_with(
        "a",
        &harness,
        DepsAgent {
            model: model.clone(),
        },
    );
    let out = agent.run(chat("count to 5")).await.unwrap();
    assert_eq!(out.signal, "complete");
    assert_eq!(out.steps, 3);
    assert_eq!(counter.0.load(Ordering::SeqCst), 5);
    assert_eq!(
        out.state.messages.last().unwrap().text(),
        "The counter is at 5."
    );
    assert_eq!(model.remaining(), 0);
}

#[tokio::test]
async fn unknown_tool_and_bad_arguments_are_reported_to_the_model() {
    let counter = Counter::default();
    let model = Arc::new(ScriptedModel::new([
        Expect::any().reply(ModelResponse::from_tool_calls([
            ToolCall::new("c1", "teleport", json!({})),
            ToolCall::new("c2", "count", json!({"by": "five"})),
        ])),
        Expect::any()
            .last_message_contains("teleport")
            .reply(ModelResponse::from_text("Sorry, I cannot do that.")),
    ]));
    let harness = chat_loop(ToolSet::new().with(counter.clone()))
        .build()
        .unwrap();
    let agent = create_agent_with("a", &harness, DepsAgent { model });
    let out = agent.run(chat("go")).await.unwrap();
    let tool_message = &out.state.messages[2];
    assert_eq!(tool_message.role, Role::Tool);
    let results: Vec<_> = tool_message
        .content
        .iter()
        .filter_map(|p| match p {
            harness::llm::ContentPart::ToolResult(r) => Some(r.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 2);
    assert!(results.iter().all(|r| r.is_error), "{results:?}");
    assert!(
        results[0].content.contains("teleport"),
        "{}",
        results[0].content
    );
    assert!(
        results[1].content.contains("count") && results[1].content.contains("five"),
        "{}",
        results[1].content
    );
    assert_eq!(counter.0.load(Ordering::SeqCst), 0, "no tool ran");
}

#[tokio::test]
async fn a_rate_limited_model_call_is_retried_by_the_step_policy() {
    let model = Arc::new(ScriptedModel::new([
        Expect::any().fail(ModelError::RateLimited {
            retry_after: Some(Duration::from_millis(1)),
            message: "slow down".into(),
        }),
        Expect::any().reply(ModelResponse::from_text("hello")),
    ]));
    let model_dyn: Arc<dyn LanguageModel> = model.clone();
    let harness = chat_loop_with(
        ToolSet::new(),
        RetryPolicy::attempts(2).backoff(Duration::from_millis(1)),
    )
    .build()
    .unwrap();
    let agent = create_agent_with("a", &harness, DepsAgent { model: model_dyn });
    let out = agent.run(chat("hi")).await.unwrap();
    assert_eq!(out.state.messages.last().unwrap().text(), "hello");
    assert_eq!(model.requests().len(), 2);
}

#[tokio::test]
async fn a_model_error_without_retry_fails_the_run_with_the_typed_error() {
    let model: Arc<dyn LanguageModel> =
        Arc::new(ScriptedModel::new([Expect::any().fail(ModelError::Auth {
            message: "bad key".into(),
        })]));
    let harness = chat_loop(ToolSet::new()).build().unwrap();
    let agent = create_agent_with("a", &harness, DepsAgent { model });
    let err = agent.run(chat("hi")).await.unwrap_err();
    let RunError::Step { step, source, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(step, "think");
    assert!(
        matches!(
            source.downcast_ref::<ModelError>(),
            Some(ModelError::Auth { .. })
        ),
        "{source}"
    );
}
