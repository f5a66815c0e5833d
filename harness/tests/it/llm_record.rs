//! Recorded and Replay: record exchanges to a file, answer from it.
#![allow(clippy::unwrap_used, missing_docs)]

use std::path::PathBuf;

use futures::StreamExt;
use harness::llm::{
    Expect, LanguageModel, Message, ModelError, ModelRequest, ModelResponse, Outcome, Recorded,
    Recording, Replay, ScriptedModel, StopReason, StreamEvent, Usage, collect_stream,
};

/// A fresh path under the target directory's temp area, unique per test.
fn temp_file(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("harness-llm-record-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn ask(text: &str) -> ModelRequest {
    ModelRequest::builder().user(text).temperature(0.2).build()
}

#[tokio::test]
async fn records_then_replays_complete_stream_and_errors() {
    let path = temp_file("mixed.json");
    let scripted = ScriptedModel::new([
        Expect::any().reply(ModelResponse::from_text("one").with_usage(Usage::new(3, 1))),
        Expect::any().stream([
            StreamEvent::text("tw"),
            StreamEvent::text("o"),
            StreamEvent::finish(StopReason::EndTurn),
        ]),
        Expect::any().fail(ModelError::RateLimited {
            retry_after: None,
            message: "slow".into(),
        }),
    ]);
    let recorded = Recorded::new(scripted, &path);
    assert_eq!(recorded.complete(&ask("1")).await.unwrap().text(), "one");
    let streamed = collect_stream(recorded.stream(&ask("2")).await.unwrap())
        .await
        .unwrap();
    assert_eq!(streamed.text(), "two");
    assert!(recorded.complete(&ask("3")).await.is_err());
    assert_eq!(recorded.recording().exchanges.len(), 3);

    let on_disk = Recording::load(&path).unwrap();
    assert_eq!(on_disk, recorded.recording());
    assert_eq!(on_disk.provider, "scripted");
    assert!(
        matches!(on_disk.exchanges[1].outcome, Outcome::Stream { ref events, error: None } if events.len() == 3)
    );

    let replay = Replay::from_file(&path).unwrap();
    assert_eq!(replay.remaining(), 3);
    let first = replay.complete(&ask("1")).await.unwrap();
    assert_eq!(first.usage, Usage::new(3, 1));
    // A recorded stream replays event for event.
    let events: Vec<_> = replay.stream(&ask("2")).await.unwrap().collect().await;
    assert_eq!(events.len(), 3);
    assert_eq!(events[0], Ok(StreamEvent::text("tw")));
    assert!(matches!(
        replay.complete(&ask("3")).await,
        Err(ModelError::RateLimited { .. })
    ));
    let beyond = replay.complete(&ask("4")).await.unwrap_err();
    assert!(
        matches!(beyond, ModelError::ReplayMismatch { turn: 4, .. }),
        "{beyond}"
    );
}

#[tokio::test]
async fn a_different_request_is_a_typed_mismatch_pointing_at_the_difference() {
    let mut recording = Recording::new("p", "m");
    recording.exchanges.push(harness::llm::Exchange {
        request: ask("Weather in Paris?"),
        outcome: Outcome::Response(ModelResponse::from_text("sunny")),
    });
    let replay = Replay::new(recording);
    let error = replay.complete(&ask("Weather in Rome?")).await.unwrap_err();
    match &error {
        ModelError::ReplayMismatch { turn, message } => {
            assert_eq!(*turn, 1);
            assert!(
                message.contains("at messages[0].content[0].text: recorded \"Weather in Paris?\", got \"Weather in Rome?\""),
                "{message}"
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(error.to_string().contains("re-record"));
}

#[tokio::test]
async fn concurrent_requests_may_arrive_in_another_order() {
    let mut recording = Recording::new("p", "m");
    for text in ["a", "b"] {
        recording.exchanges.push(harness::llm::Exchange {
            request: ask(text),
            outcome: Outcome::Response(ModelResponse::from_text(text.to_uppercase())),
        });
    }
    let replay = Replay::new(recording);
    assert_eq!(replay.complete(&ask("b")).await.unwrap().text(), "B");
    assert_eq!(replay.complete(&ask("a")).await.unwrap().text(), "A");
    assert_eq!(replay.remaining(), 0);
}

#[tokio::test]
async fn a_stream_dropped_early_is_still_recorded() {
    let path = temp_file("dropped.json");
    let scripted = ScriptedModel::new([Expect::any().stream([
        StreamEvent::text("a"),
        StreamEvent::text("b"),
        StreamEvent::finish(StopReason::EndTurn),
    ])]);
    let recorded = Recorded::new(scripted, &path);
    let mut stream = recorded.stream(&ask("x")).await.unwrap();
    assert_eq!(stream.next().await, Some(Ok(StreamEvent::text("a"))));
    drop(stream);
    let recording = Recording::load(&path).unwrap();
    assert_eq!(
        recording.exchanges[0].outcome,
        Outcome::Stream {
            events: vec![StreamEvent::text("a")],
            error: None
        }
    );
}

#[tokio::test]
async fn an_unwritable_recording_fails_the_call() {
    let path = temp_file("no-such-dir").join("deeper").join("r.json");
    let scripted = ScriptedModel::new([Expect::any().reply(ModelResponse::from_text("x"))]);
    let recorded = Recorded::new(scripted, &path);
    let error = recorded
        .complete(&ModelRequest::new([Message::user("hi")]))
        .await
        .unwrap_err();
    assert!(matches!(error, ModelError::Recording { .. }), "{error}");
}

#[test]
fn loading_a_broken_file_is_a_typed_error() {
    let missing = Replay::from_file(temp_file("missing.json")).unwrap_err();
    assert!(matches!(missing, ModelError::Recording { .. }), "{missing}");
    let path = temp_file("broken.json");
    std::fs::write(&path, "{not json").unwrap();
    let broken = Replay::from_file(&path).unwrap_err();
    assert!(broken.to_string().contains("not a recording"), "{broken}");
    std::fs::write(
        &path,
        r#"{"version": 99, "provider": "p", "model": "m", "exchanges": []}"#,
    )
    .unwrap();
    let future = Replay::from_file(&path).unwrap_err();
    assert!(future.to_string().contains("version 99"), "{future}");
}

#[test]
fn saving_replaces_the_file_whole_and_leaves_nothing_beside_it() {
    let dir = temp_file("save-dir");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("r.json");
    Recording::new("p", "first").save(&path).unwrap();
    Recording::new("p", "second").save(&path).unwrap();
    assert_eq!(Recording::load(&path).unwrap().model, "second");
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["r.json"], "no temporary file is left");
}
