//! Usage with cached content and thoughts.

use super::*;

fn metadata() -> Value {
    json!({ "promptTokenCount": 4000, "candidatesTokenCount": 50, "thoughtsTokenCount": 700,
            "cachedContentTokenCount": 3500, "totalTokenCount": 4750,
            "promptTokensDetails": [{ "modality": "TEXT", "tokenCount": 4000 }] })
}

#[tokio::test]
async fn cached_content_and_thoughts_are_counted() {
    let server = MockServer::start().await;
    let mut body = answer(json!([{ "text": "Hi" }]), "STOP");
    body["usageMetadata"] = metadata();
    Mock::given(method("POST"))
        .and(path(GENERATE))
        .respond_with(ResponseTemplate::new(200).set_body_json(body))
        .mount(&server)
        .await;
    let response = model(&server).complete(&ask("Hi")).await.unwrap();
    let expected = Usage::new(4000, 750)
        .with_cache_read(3500)
        .with_reasoning(700);
    assert_eq!(response.usage, expected);

    let mut last = answer(json!([{ "text": "!" }]), "STOP");
    last["usageMetadata"] = metadata();
    Mock::given(method("POST"))
        .and(path(STREAM))
        .respond_with(ResponseTemplate::new(200).set_body_raw(
            sse(&[
                json!({ "candidates": [{ "content": { "role": "model", "parts": [{ "text": "Hi" }] } }] }),
                last,
            ]),
            "text/event-stream",
        ))
        .mount(&server)
        .await;
    let stream = model(&server).stream(&ask("Hi")).await.unwrap();
    let response = collect_stream(stream).await.unwrap();
    assert_eq!(response.text(), "Hi!");
    assert_eq!(response.usage, expected);
}
