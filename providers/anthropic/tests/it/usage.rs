//! Usage with prompt-cache reads and writes.

use super::*;

#[tokio::test]
async fn cache_reads_and_writes_are_part_of_the_input() {
    let server = MockServer::start().await;
    let mut body = message(json!([{ "type": "text", "text": "Hi" }]), "end_turn");
    body["usage"] = json!({ "input_tokens": 21, "output_tokens": 393,
        "cache_creation_input_tokens": 188086, "cache_read_input_tokens": 1000,
        "cache_creation": { "ephemeral_5m_input_tokens": 188086, "ephemeral_1h_input_tokens": 0 },
        "service_tier": "standard" });
    Mock::given(method("POST"))
        .respond_with(ok(body))
        .mount(&server)
        .await;
    let response = model(&server).complete(&ask("Hi")).await.unwrap();
    assert_eq!(
        response.usage,
        Usage::new(21 + 188_086 + 1000, 393)
            .with_cache_write(188_086)
            .with_cache_read(1000)
    );
    assert_eq!(response.usage.uncached_input_tokens(), 21);
}

#[tokio::test]
async fn streamed_usage_keeps_the_cache_counts_of_message_start() {
    let server = MockServer::start().await;
    let mut start = message_start();
    start["message"]["usage"] = json!({ "input_tokens": 5, "output_tokens": 1,
        "cache_creation_input_tokens": 100, "cache_read_input_tokens": 2000 });
    let [delta, stop] = message_end("end_turn");
    Mock::given(method("POST"))
        .respond_with(stream_of(&[
            start,
            json!({ "type": "content_block_start", "index": 0, "content_block": { "type": "text", "text": "" } }),
            json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "text_delta", "text": "Hi" } }),
            json!({ "type": "content_block_stop", "index": 0 }),
            delta,
            stop,
        ]))
        .mount(&server)
        .await;
    let stream = model(&server).stream(&ask("Hi")).await.unwrap();
    let response = collect_stream(stream).await.unwrap();
    assert_eq!(
        response.usage,
        Usage::new(2105, 15)
            .with_cache_write(100)
            .with_cache_read(2000)
    );
}
