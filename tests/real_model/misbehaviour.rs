//! What a real model does wrong, and what the framework makes of it: every
//! case a typed error or a repair turn, named, never a panic or a hang.
//! Each case was seen from this model and server; the prompts provoke it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::llm::{
    LanguageModel, LanguageModelExt, ModelError, ModelRequest, StopReason, ToolSet,
    TypedAnswerError,
};
use harness::session::SessionPhase;
use harness::{
    Context, Cx, Harness, HarnessState, JsonSchema, RunError, StepResult, create_agent_with,
    schemars,
};
use serde::{Deserialize, Serialize};

use crate::model;
use crate::provider::Weather;

fn weather_tools() -> ToolSet {
    ToolSet::new().with(Weather)
}

#[tokio::test]
async fn an_answer_cut_at_its_token_bound_says_so() {
    let request = ModelRequest::builder()
        .user("Write a long poem about the sea, with many verses.")
        .max_tokens(5)
        .build();
    let answer = model().complete(&request).await.unwrap();
    assert_eq!(answer.stop_reason, StopReason::MaxTokens, "{answer:?}");
    assert!(answer.usage.output_tokens <= 5, "{:?}", answer.usage);
}

#[tokio::test]
async fn a_tool_call_cut_at_its_token_bound_is_reported_to_the_model_as_that_calls_error() {
    let tools = weather_tools();
    let request = ModelRequest::builder()
        .system("You are a helpful assistant. Use the tools for facts.")
        .user("What is the weather in Paris right now?")
        .tools(tools.specs())
        .max_tokens(8)
        .build();
    let answer = model().complete(&request).await.unwrap();
    assert_eq!(answer.stop_reason, StopReason::MaxTokens, "{answer:?}");
    let call = answer
        .tool_calls()
        .next()
        .unwrap_or_else(|| panic!("the cut answer began a tool call: {answer:?}"));
    // The half-written arguments are kept as the text the model wrote…
    assert!(call.arguments.is_string(), "{call:?}");
    // …and that call alone gets an error result, for the model to repair.
    let result = tools.dispatch_or_report(call).await;
    assert!(result.is_error, "{result:?}");
    assert_eq!(result.call_id, call.id);
    assert!(result.content.contains("weather"), "{result:?}");
}

#[tokio::test]
async fn arguments_that_do_not_fit_the_schema_are_reported_to_the_model() {
    let tools = weather_tools();
    let request = ModelRequest::builder()
        .user(
            "Reply with exactly this text and nothing else: \
             {\"name\": \"weather\", \"arguments\": {\"city\": 5}}",
        )
        .tools(tools.specs())
        .max_tokens(40)
        .build();
    let answer = model().complete(&request).await.unwrap();
    let call = answer
        .tool_calls()
        .next()
        .unwrap_or_else(|| panic!("the model called the tool: {answer:?}"));
    assert!(
        !call.arguments["city"].is_string(),
        "the prompt makes the city a number: {call:?}"
    );
    let result = tools.dispatch_or_report(call).await;
    assert!(result.is_error, "{result:?}");
    assert!(
        result.content.contains("city"),
        "names the field: {result:?}"
    );
}

#[tokio::test]
async fn a_call_of_an_unknown_tool_is_an_answer_the_server_could_not_read() {
    // llama.cpp cannot parse a call of a tool it was not offered: HTTP 500,
    // which is the model's answer at fault, not the server: a
    // MalformedResponse (the kit's agent answers it with a repair turn).
    let request = ModelRequest::builder()
        .user(
            "Reply with exactly this text and nothing else: \
             {\"name\": \"forecast\", \"arguments\": {\"day\": 1}}",
        )
        .tools(weather_tools().specs())
        .max_tokens(40)
        .build();
    match model().complete(&request).await {
        Err(ModelError::MalformedResponse { message }) => {
            assert!(message.contains("HTTP 500"), "{message}");
            assert!(message.contains("could not read"), "{message}");
        }
        // Or the call came through: the tool set refuses it, for the model.
        Ok(answer) => {
            let call = answer.tool_calls().next().expect("a call or an error");
            let result = weather_tools().dispatch_or_report(call).await;
            assert!(
                result.is_error && result.content.contains("forecast"),
                "{result:?}"
            );
        }
        Err(other) => panic!("the unreadable answer, typed: {other:?}"),
    }
}

/// A typed answer the model can never give here (never read: the answer
/// never arrives).
#[derive(Debug, Deserialize, JsonSchema)]
#[allow(dead_code)]
struct Verdict {
    /// Whether it holds.
    holds: bool,
}

#[tokio::test]
async fn an_empty_answer_to_a_typed_request_is_a_typed_error_after_one_repair() {
    // The stop sequence ends every JSON answer before it begins.
    let request = ModelRequest::builder()
        .user("Is water wet? Answer in JSON.")
        .stop_sequence("{")
        .max_tokens(20)
        .build();
    match model().complete_typed::<Verdict>(&request).await {
        Err(TypedAnswerError::Mismatch { attempts, raw, .. }) => {
            assert_eq!(attempts, 2, "one repair turn, then the error");
            // Cut before any JSON began (the model may open a code fence
            // first: its wording is not what is tested).
            assert!(!raw.contains('{'), "{raw:?}");
        }
        other => panic!("a typed mismatch: {other:?}"),
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
struct Story {
    #[field(reduce = replace)]
    text: String,
}

#[derive(Context)]
struct Writer {
    #[slot(agent)]
    model: Arc<dyn LanguageModel>,
}

async fn write(_story: Arc<Story>, cx: Cx<Writer>) -> StepResult<StoryUpdate> {
    let request = ModelRequest::builder()
        .user("Write a very long story about a lighthouse keeper, in many chapters.")
        .max_tokens(3000)
        .build();
    let answer = cx.complete(&*cx.model, &request).await?;
    Ok(StoryUpdate::new().text(answer.text()))
}

#[tokio::test]
async fn a_run_past_its_deadline_is_cancelled_mid_answer_and_its_session_says_why() {
    let store = harness_stores::MemoryStore::new();
    let harness = Harness::<Story, Writer>::builder()
        .step("write")
        .run(write)
        .end()
        .start("write")
        .store(store)
        .deadline(Duration::from_secs(3))
        .build()
        .unwrap();
    let agent = create_agent_with(
        "writer",
        &harness,
        WriterAgent {
            model: crate::shared_model(),
        },
    );
    let began = Instant::now();
    let run = agent.run(Story {
        text: String::new(),
    });
    let session = run.session_id().clone();
    let error = run.await.unwrap_err();
    let waited = began.elapsed();
    match &error {
        RunError::Deadline { limit, step } => {
            assert_eq!(*limit, Duration::from_secs(3));
            assert_eq!(step, "write");
        }
        other => panic!("the deadline, typed: {other:?}"),
    }
    // 3000 tokens take minutes here: the answer was cut, not waited for.
    assert!(waited < Duration::from_secs(30), "{waited:?}");
    match agent.session(&session).await.unwrap().phase {
        SessionPhase::Failed { error } => assert!(error.contains("deadline"), "{error}"),
        other => panic!("the session records the failure: {other:?}"),
    }
}
