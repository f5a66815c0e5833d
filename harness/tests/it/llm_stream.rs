//! Streaming events, collection into a response, and tool-call assembly.
#![allow(clippy::unwrap_used, missing_docs)]

use harness::llm::{
    ContentPart, ModelError, ModelResponse, PartialToolCalls, Reasoning, StopReason,
    StreamCollector, StreamEvent, ToolCall, Usage, collect_stream,
};
use serde_json::json;

fn items(events: Vec<StreamEvent>) -> impl futures::Stream<Item = Result<StreamEvent, ModelError>> {
    futures::stream::iter(events.into_iter().map(Ok))
}

#[tokio::test]
async fn text_deltas_merge_and_tool_calls_keep_their_place() {
    let call = ToolCall::new("c1", "search", json!({"q": "rust"}));
    let events = vec![
        StreamEvent::text("Let me "),
        StreamEvent::text("search."),
        StreamEvent::ToolCallStart {
            index: 0,
            id: "c1".into(),
            name: "search".into(),
        },
        StreamEvent::text("Meanwhile"),
        StreamEvent::ToolCallDelta {
            index: 0,
            arguments: "{\"q\":".into(),
        },
        StreamEvent::ToolCallDelta {
            index: 0,
            arguments: "\"rust\"}".into(),
        },
        StreamEvent::ToolCallEnd {
            index: 0,
            call: call.clone(),
        },
        StreamEvent::Usage(Usage::new(10, 1)),
        StreamEvent::Usage(Usage::new(10, 5)),
        StreamEvent::finish(StopReason::ToolUse),
    ];
    let response = collect_stream(items(events)).await.unwrap();
    assert_eq!(
        response.content,
        vec![
            ContentPart::text("Let me search."),
            ContentPart::ToolCall(call),
            ContentPart::text("Meanwhile"),
        ]
    );
    assert_eq!(response.usage, Usage::new(10, 5));
    assert_eq!(response.stop_reason, StopReason::ToolUse);
}

#[tokio::test]
async fn reasoning_ends_become_parts_where_they_end() {
    let thinking = Reasoning::new("anthropic", "Let me think.").with_signature("EqQB");
    let signature = Reasoning::new("gemini", "").with_signature("c2ln");
    let events = vec![
        StreamEvent::ReasoningDelta {
            text: "Let me ".into(),
        },
        StreamEvent::ReasoningDelta {
            text: "think.".into(),
        },
        StreamEvent::ReasoningEnd {
            reasoning: thinking.clone(),
        },
        StreamEvent::text("Sun"),
        StreamEvent::text("ny."),
        StreamEvent::ReasoningEnd {
            reasoning: signature.clone(),
        },
        StreamEvent::text("More."),
        StreamEvent::finish(StopReason::EndTurn),
    ];
    let response = collect_stream(items(events)).await.unwrap();
    assert_eq!(
        response.content,
        vec![
            ContentPart::Reasoning(thinking),
            ContentPart::text("Sunny."),
            ContentPart::Reasoning(signature),
            ContentPart::text("More."),
        ],
        "a reasoning part ends the text before it"
    );
    assert_eq!(response.text(), "Sunny.More.");
}

#[tokio::test]
async fn response_to_events_and_back_is_identity() {
    let response = ModelResponse::new(
        vec![
            ContentPart::Reasoning(Reasoning::new("anthropic", "hmm").with_signature("sig")),
            ContentPart::Reasoning(Reasoning::redacted("anthropic", "data")),
            ContentPart::text("thinking"),
            ContentPart::ToolCall(
                ToolCall::new("a", "x", json!({"n": 1})).with_signature("gemini", "s"),
            ),
            ContentPart::ToolCall(ToolCall::new("b", "y", json!({}))),
        ],
        Usage::new(7, 8),
        StopReason::ToolUse,
    );
    assert_eq!(
        collect_stream(response.clone().into_stream())
            .await
            .unwrap(),
        response
    );
}

#[tokio::test]
async fn a_stream_without_finish_was_cut_off() {
    let error = collect_stream(items(vec![StreamEvent::text("partial")]))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ModelError::MalformedResponse { message } if message.contains("without a finish")),
        "{error}"
    );
}

#[tokio::test]
async fn a_stream_ending_inside_a_tool_call_was_cut_off() {
    let error = collect_stream(items(vec![
        StreamEvent::ToolCallStart {
            index: 0,
            id: "c".into(),
            name: "t".into(),
        },
        StreamEvent::finish(StopReason::ToolUse),
    ]))
    .await
    .unwrap_err();
    assert!(
        matches!(&error, ModelError::MalformedResponse { message } if message.contains("still open")),
        "{error}"
    );
}

#[tokio::test]
async fn the_first_error_ends_collection() {
    let stream = futures::stream::iter(vec![
        Ok(StreamEvent::text("a")),
        Err(ModelError::timeout(std::time::Duration::from_millis(5))),
        Ok(StreamEvent::finish(StopReason::EndTurn)),
    ]);
    assert!(matches!(
        collect_stream(stream).await,
        Err(ModelError::Timeout { .. })
    ));
}

#[test]
fn contradictory_events_are_rejected() {
    let mut collector = StreamCollector::new();
    let delta = StreamEvent::ToolCallDelta {
        index: 3,
        arguments: "{}".into(),
    };
    assert!(collector.push(delta).is_err());
    let start = StreamEvent::ToolCallStart {
        index: 0,
        id: "c".into(),
        name: "t".into(),
    };
    collector.push(start.clone()).unwrap();
    assert!(collector.push(start).is_err());
}

#[test]
fn partial_tool_calls_assemble_fragments_by_index() {
    let mut calls = PartialToolCalls::new();
    assert!(calls.start(1, "b", "second"));
    assert!(calls.start(0, "a", "first"));
    assert!(!calls.start(0, "a", "first"), "a call starts once");
    assert!(calls.append(0, "{\"x\":"));
    assert!(calls.append(1, ""));
    assert!(calls.append(0, " 1}"));
    assert!(!calls.append(7, "{}"));
    let first = calls.finish(0).unwrap().unwrap();
    assert_eq!(first, ToolCall::new("a", "first", json!({"x": 1})));
    assert!(calls.finish(0).is_none());
    let rest = calls.finish_all();
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].0, 1);
    assert_eq!(
        rest[0].1.as_ref().unwrap().arguments,
        json!({}),
        "empty arguments are {{}}"
    );
}

#[test]
fn partial_tool_calls_with_broken_json_keep_the_text_for_that_call_alone() {
    for broken in ["{\"x\": ", "{x: 1}", "[1, 2", "not json", "{\"a\": 1}}"] {
        let mut calls = PartialToolCalls::new();
        calls.start(0, "a", "f");
        calls.append(0, broken);
        calls.start(1, "b", "g");
        calls.append(1, "{\"y\": 2}");
        let done = calls.finish_all();
        let first = done[0].1.as_ref().unwrap();
        assert_eq!(first.arguments, json!(broken), "{broken}");
        let second = done[1].1.as_ref().unwrap();
        assert_eq!(
            second.arguments,
            json!({"y": 2}),
            "the other call is untouched"
        );
    }
}

#[test]
fn stream_events_serialize_with_an_event_tag() {
    assert_eq!(
        serde_json::to_value(StreamEvent::text("hi")).unwrap(),
        json!({"event": "text_delta", "text": "hi"})
    );
    assert_eq!(
        serde_json::to_value(StreamEvent::Usage(Usage::new(1, 2))).unwrap(),
        json!({"event": "usage", "input_tokens": 1, "output_tokens": 2})
    );
    assert_eq!(
        serde_json::to_value(StreamEvent::finish(StopReason::Other("weird".into()))).unwrap(),
        json!({"event": "finish", "stop_reason": {"reason": "other", "detail": "weird"}})
    );
}
