//! Model and tool calls made through the step's context: observers see
//! them, and a run subscribed with tokens gets the model's text live.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use futures::StreamExt;
use harness::llm::{
    Expect, ModelRequest, ScriptedModel, StopReason, StreamEvent, Tool, ToolCall, ToolSet, Turn,
};
use harness::observe::Observer;
use harness::{
    Cx, Harness, HarnessState, ModelCallInfo, RunEvent, RunInfo, StepInfo, ToolCallInfo,
    create_agent,
};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Chat {
    #[field(reduce = append)]
    said: Vec<String>,
}

struct Add;

#[derive(Deserialize, schemars::JsonSchema)]
struct AddArgs {
    a: i64,
    b: i64,
}

#[async_trait::async_trait]
impl Tool for Add {
    type Args = AddArgs;
    type Output = i64;
    type Error = String;
    fn name(&self) -> &str {
        "add"
    }
    fn description(&self) -> &str {
        "adds"
    }
    async fn call(&self, args: AddArgs) -> Result<i64, String> {
        Ok(args.a + args.b)
    }
}

#[derive(Default)]
struct Seen(Mutex<Vec<String>>);

#[async_trait::async_trait]
impl Observer<Chat> for Arc<Seen> {
    async fn model_called(&self, _: &RunInfo, step: &StepInfo, call: &ModelCallInfo<'_>) {
        let result = match call.result {
            Ok(r) => format!("ok {}", r.text()),
            Err(e) => format!("err {e}"),
        };
        self.0
            .lock()
            .unwrap()
            .push(format!("model {} {} {result}", step.name, call.provider));
    }
    async fn tool_called(&self, _: &RunInfo, step: &StepInfo, call: &ToolCallInfo<'_>) {
        self.0.lock().unwrap().push(format!(
            "tool {} {} {} {}",
            step.name, call.call.name, call.result.content, call.result.is_error
        ));
    }
}

fn chat(model: Arc<ScriptedModel>, seen: Arc<Seen>) -> Harness<Chat> {
    Harness::<Chat>::builder()
        .step("talk")
        .run(move |cx: Cx<()>| {
            let model = Arc::clone(&model);
            async move {
                let answer = cx
                    .complete(&*model, &ModelRequest::builder().user("hi").build())
                    .await?;
                let tools = ToolSet::new().with(Add);
                let good = cx
                    .call_tool(
                        &tools,
                        &ToolCall::new("c1", "add", serde_json::json!({"a": 2, "b": 3})),
                    )
                    .await;
                let bad = cx
                    .call_tool(
                        &tools,
                        &ToolCall::new("c2", "add", serde_json::json!({"a": "x"})),
                    )
                    .await;
                let unknown = cx
                    .call_tool(&tools, &ToolCall::new("c3", "mul", serde_json::json!({})))
                    .await;
                Ok(ChatUpdate::new().said(vec![
                    answer.text(),
                    good.content,
                    format!("{} {}", bad.is_error, unknown.is_error),
                ]))
            }
        })
        .end()
        .start("talk")
        .observer(seen)
        .build()
        .unwrap()
}

fn streamed() -> Turn {
    Expect::any().stream([
        StreamEvent::TextDelta { text: "Hel".into() },
        StreamEvent::TextDelta { text: "lo".into() },
        StreamEvent::Finish {
            stop_reason: StopReason::EndTurn,
        },
    ])
}

#[tokio::test]
async fn observers_see_model_and_tool_calls_and_token_subscribers_get_the_text_live() {
    let model = Arc::new(ScriptedModel::new([streamed(), streamed()]));
    let seen = Arc::new(Seen::default());
    let agent = create_agent("chat", &chat(Arc::clone(&model), Arc::clone(&seen)));

    // With tokens.
    let run = agent.run(Chat::default());
    let events = run.events_with_tokens();
    let out = run.await.unwrap();
    assert_eq!(out.state.said, ["Hello", "5", "true true"]);
    let tokens: Vec<String> = events
        .filter_map(|e| async move {
            match e {
                RunEvent::Token { path, step, text } => {
                    assert!(path.is_root());
                    assert_eq!(&*step, "talk");
                    Some(text.to_string())
                }
                _ => None,
            }
        })
        .collect()
        .await;
    assert_eq!(tokens, ["Hel", "lo"]);

    // Without: no token event, the same answer.
    let run = agent.run(Chat::default());
    let events = run.events();
    assert_eq!(run.await.unwrap().state.said[0], "Hello");
    let tokens = events
        .filter(|e| std::future::ready(matches!(e, RunEvent::Token { .. })))
        .count()
        .await;
    assert_eq!(tokens, 0);

    let seen = seen.0.lock().unwrap().clone();
    assert_eq!(seen.len(), 8, "{seen:?}");
    assert_eq!(seen[0], "model talk scripted ok Hello");
    assert_eq!(seen[1], "tool talk add 5 false");
    assert!(
        seen[2].starts_with("tool talk add ") && seen[2].ends_with(" true"),
        "{seen:?}"
    );
    assert!(
        seen[3].starts_with("tool talk mul ") && seen[3].ends_with(" true"),
        "{seen:?}"
    );
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct Point {
    x: i64,
    y: i64,
}

#[tokio::test]
async fn a_typed_answer_through_the_context_is_observed_call_by_call() {
    use harness::llm::{ModelResponse, TypedAnswerError};
    // The first answer does not fit and is repaired; each call is seen.
    let model = Arc::new(ScriptedModel::new([
        Expect::any().reply(ModelResponse::from_text("x is 1")),
        Expect::any()
            .any_message_contains("x is 1")
            .last_message_contains("does not match the required JSON schema `Point`")
            .reply(ModelResponse::from_text(r#"{"x": 1, "y": 2}"#)),
        Expect::any().reply(ModelResponse::from_text("no")),
        Expect::any().reply(ModelResponse::from_text(r#"{"x": "one"}"#)),
    ]));
    let seen = Arc::new(Seen::default());
    let m = Arc::clone(&model);
    let h = Harness::<Chat>::builder()
        .step("ask")
        .run(move |cx: Cx<()>| {
            let model = Arc::clone(&m);
            async move {
                let request = ModelRequest::builder().user("a point").build();
                let point = cx.complete_typed::<Point>(&*model, &request).await.unwrap();
                let failed = cx.complete_typed::<Point>(&*model, &request).await;
                let mismatch =
                    matches!(failed, Err(TypedAnswerError::Mismatch { attempts: 2, .. }));
                Ok(ChatUpdate::new().said(vec![
                    format!("{} {} in {}", point.value.x, point.value.y, point.attempts),
                    format!("mismatch {mismatch}"),
                ]))
            }
        })
        .end()
        .start("ask")
        .observer(Arc::clone(&seen))
        .build()
        .unwrap();
    let out = create_agent("typed", &h)
        .run(Chat::default())
        .await
        .unwrap();
    assert_eq!(out.state.said, ["1 2 in 2", "mismatch true"]);
    let calls = seen.0.lock().unwrap().clone();
    assert_eq!(calls.len(), 4, "{calls:?}");
    assert!(
        calls.iter().all(|c| c.starts_with("model ask scripted ok")),
        "{calls:?}"
    );
    // Each request asked for the type's format.
    assert!(model.requests().iter().all(|r| r.response_format.is_some()));
}
