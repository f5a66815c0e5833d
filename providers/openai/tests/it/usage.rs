//! Usage details: cached prompt tokens and reasoning tokens.

use super::*;

fn detailed_usage() -> Value {
    json!({
        "prompt_tokens": 2006, "completion_tokens": 300, "total_tokens": 2306,
        "prompt_tokens_details": { "cached_tokens": 1920, "audio_tokens": 0 },
        "completion_tokens_details": { "reasoning_tokens": 192, "audio_tokens": 0,
            "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0 }
    })
}

#[tokio::test]
async fn cached_and_reasoning_tokens_are_read_from_the_details() {
    let server = MockServer::start().await;
    let mut body = completion(
        json!({ "role": "assistant", "content": "Hi", "refusal": null }),
        "stop",
    );
    body["usage"] = detailed_usage();
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(body))
        .mount(&server)
        .await;
    let response = model(&server).complete(&ask("Hi")).await.unwrap();
    assert_eq!(
        response.usage,
        Usage::new(2006, 300)
            .with_cache_read(1920)
            .with_reasoning(192)
    );
    assert_eq!(response.usage.uncached_input_tokens(), 86);
}

#[tokio::test]
async fn streamed_usage_carries_the_details_and_null_details_read_as_zero() {
    let server = MockServer::start().await;
    let mut last = usage_chunk();
    last["usage"] = detailed_usage();
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(
            sse(
                &[
                    chunk(json!({ "role": "assistant", "content": "Hi" }), Value::Null),
                    chunk(json!({}), json!("stop")),
                    last,
                ],
                true,
            ),
            "text/event-stream",
        ))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    let stream = model(&server).stream(&ask("Hi")).await.unwrap();
    let response = collect_stream(stream).await.unwrap();
    assert_eq!(
        response.usage,
        Usage::new(2006, 300)
            .with_cache_read(1920)
            .with_reasoning(192)
    );

    // Compatible servers send the details as null, or not at all.
    let mut body = completion(
        json!({ "role": "assistant", "content": "Hi", "refusal": null }),
        "stop",
    );
    body["usage"] = json!({ "prompt_tokens": 7, "completion_tokens": 2,
        "prompt_tokens_details": null, "completion_tokens_details": { "reasoning_tokens": null } });
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(body))
        .mount(&server)
        .await;
    let response = model(&server).complete(&ask("Hi")).await.unwrap();
    assert_eq!(response.usage, Usage::new(7, 2));
}
