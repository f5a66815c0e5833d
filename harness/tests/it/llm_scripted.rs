//! ScriptedModel: expectations, answers, and typed mismatches.
#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::Arc;

use futures::StreamExt;
use harness::llm::{
    Expect, LanguageModel, Message, ModelError, ModelRequest, ModelResponse, Role, ScriptedModel,
    StopReason, StreamEvent, ToolCall, ToolResult, ToolSpec, collect_stream,
};
use serde_json::json;

fn weather_tool() -> ToolSpec {
    ToolSpec::new("get_weather", "Weather", json!({"type": "object"}))
}

#[tokio::test]
async fn plays_a_two_turn_tool_loop() {
    let call = ToolCall::new("c1", "get_weather", json!({"city": "Paris"}));
    let model = ScriptedModel::new([
        Expect::any()
            .last_role(Role::User)
            .last_message_contains("Paris")
            .offers_tool("get_weather")
            .reply(ModelResponse::from_tool_call(call.clone())),
        Expect::any()
            .last_role(Role::Tool)
            .last_message_contains("18")
            .any_message_contains("Paris")
            .reply(ModelResponse::from_text("It is 18°C.")),
    ]);
    let mut request = ModelRequest::builder()
        .user("Weather in Paris?")
        .tool(weather_tool())
        .build();
    let first = model.complete(&request).await.unwrap();
    assert_eq!(first.tool_calls().next(), Some(&call));
    request.messages.push(first.into_message());
    request
        .messages
        .push(Message::tool_result(ToolResult::success(
            &call,
            "18°C, sunny",
        )));
    let second = model.complete(&request).await.unwrap();
    assert_eq!(second.text(), "It is 18°C.");
    assert_eq!(model.remaining(), 0);
    assert_eq!(model.requests().len(), 2);
}

#[tokio::test]
async fn a_failed_expectation_names_the_turn() {
    let model = ScriptedModel::new([
        Expect::any().reply(ModelResponse::from_text("one")),
        Expect::any()
            .offers_tool("search")
            .reply(ModelResponse::from_text("two")),
    ]);
    let request = ModelRequest::builder()
        .user("hi")
        .tool(weather_tool())
        .build();
    model.complete(&request).await.unwrap();
    let error = model.complete(&request).await.unwrap_err();
    assert_eq!(
        error,
        ModelError::ScriptMismatch {
            turn: 2,
            message: "expected tool \"search\" to be offered, but the tools are [get_weather]"
                .into()
        }
    );
}

#[tokio::test]
async fn last_message_mismatch_quotes_the_message() {
    let model = ScriptedModel::new([Expect::any()
        .last_message_contains("Paris")
        .reply(ModelResponse::from_text("x"))]);
    let error = model
        .complete(&ModelRequest::builder().user("Weather in Rome?").build())
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(text.contains("turn 1"), "{text}");
    assert!(text.contains("Weather in Rome?"), "{text}");
}

#[tokio::test]
async fn custom_checks_name_their_description() {
    let model = ScriptedModel::new([Expect::any()
        .check("a temperature of 0", |r| r.temperature == Some(0.0))
        .reply(ModelResponse::from_text("x"))]);
    let error = model
        .complete(&ModelRequest::builder().user("hi").temperature(1.0).build())
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("expected a temperature of 0"),
        "{error}"
    );
}

#[tokio::test]
async fn a_request_beyond_the_script_is_a_typed_error() {
    let model = ScriptedModel::new([Expect::any().reply(ModelResponse::from_text("only"))]);
    let request = ModelRequest::new([Message::user("hi")]);
    model.complete(&request).await.unwrap();
    let error = model.complete(&request).await.unwrap_err();
    assert!(
        matches!(error, ModelError::ScriptMismatch { turn: 2, .. }),
        "{error}"
    );
    model.push(
        Expect::any()
            .offers_no_tools()
            .reply(ModelResponse::from_text("more")),
    );
    assert_eq!(model.complete(&request).await.unwrap().text(), "more");
}

#[tokio::test]
async fn scripted_errors_are_returned() {
    let model = ScriptedModel::new([
        Expect::any().fail(ModelError::Auth {
            message: "bad key".into(),
        }),
        Expect::any().fail(ModelError::Overloaded {
            status: Some(529),
            message: "busy".into(),
            retry_after: None,
        }),
    ]);
    let request = ModelRequest::new([Message::user("hi")]);
    assert!(matches!(
        model.complete(&request).await,
        Err(ModelError::Auth { .. })
    ));
    assert!(matches!(
        model.stream(&request).await,
        Err(ModelError::Overloaded { .. })
    ));
}

#[tokio::test]
async fn replies_stream_and_streams_complete() {
    let model = ScriptedModel::new([
        Expect::any().reply(ModelResponse::from_text("whole")),
        Expect::any().stream([
            StreamEvent::text("str"),
            StreamEvent::text("eamed"),
            StreamEvent::finish(StopReason::EndTurn),
        ]),
    ]);
    let request = ModelRequest::new([Message::user("hi")]);
    let streamed = collect_stream(model.stream(&request).await.unwrap())
        .await
        .unwrap();
    assert_eq!(streamed.text(), "whole");
    let completed = model.complete(&request).await.unwrap();
    assert_eq!(completed.text(), "streamed");
}

#[tokio::test]
async fn a_stream_can_break_mid_way() {
    let model = ScriptedModel::new([Expect::any().stream_results([
        Ok(StreamEvent::text("par")),
        Err(ModelError::Transport {
            message: "connection reset".into(),
        }),
    ])]);
    let mut stream = model
        .stream(&ModelRequest::new([Message::user("hi")]))
        .await
        .unwrap();
    assert_eq!(stream.next().await, Some(Ok(StreamEvent::text("par"))));
    assert!(matches!(
        stream.next().await,
        Some(Err(ModelError::Transport { .. }))
    ));
    assert_eq!(stream.next().await, None);
}

#[tokio::test]
async fn works_behind_arc_and_box_dyn() {
    let scripted = Arc::new(ScriptedModel::new([
        Expect::any().reply(ModelResponse::from_text("a")),
        Expect::any().reply(ModelResponse::from_text("b")),
    ]));
    let shared: Arc<dyn LanguageModel> = scripted.clone();
    let boxed: Box<dyn LanguageModel> = Box::new(Arc::clone(&shared));
    let request = ModelRequest::new([Message::user("hi")]);
    assert_eq!(shared.complete(&request).await.unwrap().text(), "a");
    assert_eq!(boxed.complete(&request).await.unwrap().text(), "b");
    assert_eq!(boxed.provider(), "scripted");
    assert_eq!(scripted.remaining(), 0);
}
