//! Embeddings against a mock speaking OpenAI's `/embeddings` format.

use harness::llm::{Embedder, ModelError};

use super::*;

fn texts(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("text {i}")).collect()
}

fn embedder(server: &MockServer) -> harness_openai::EmbeddingModel {
    Client::builder()
        .api_key(KEY)
        .base_url(format!("{}/v1", server.uri()))
        .max_attempts(1)
        .build()
        .unwrap()
        .embedding_model("text-embedding-test")
}

async fn answering(body: Value) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/embeddings"))
        .respond_with(ResponseTemplate::new(200).set_body_json(body))
        .mount(&server)
        .await;
    server
}

#[tokio::test]
async fn vectors_come_back_in_the_order_of_the_texts_whatever_the_order_of_the_answer() {
    let server = answering(json!({
        "object": "list",
        "data": [
            { "object": "embedding", "index": 1, "embedding": [0.0, 1.0] },
            { "object": "embedding", "index": 0, "embedding": [1.0, 0.0] }
        ],
        "model": "text-embedding-test",
        "usage": { "prompt_tokens": 4, "total_tokens": 4 }
    }))
    .await;
    let embeddings = embedder(&server).embed(&texts(2)).await.unwrap();
    assert_eq!(embeddings.vectors, [vec![1.0, 0.0], vec![0.0, 1.0]]);
    assert_eq!(embeddings.usage.input_tokens, 4);
    assert_eq!(embeddings.dimensions(), Some(2));
    let body = &requests(&server).await[0];
    assert_eq!(
        body,
        &json!({
            "model": "text-embedding-test",
            "input": ["text 0", "text 1"],
            "encoding_format": "float"
        })
    );
}

#[tokio::test]
async fn no_texts_make_no_request() {
    let server = MockServer::start().await;
    let embeddings = embedder(&server).embed(&[]).await.unwrap();
    assert!(embeddings.vectors.is_empty());
    assert!(requests(&server).await.is_empty());
}

#[tokio::test]
async fn an_answer_that_does_not_match_the_texts_is_a_malformed_response() {
    let item =
        |index: usize, v: Value| json!({ "object": "embedding", "index": index, "embedding": v });
    // (answer's data, what the error says)
    let cases = [
        (
            json!([item(0, json!([1.0, 0.0]))]),
            "no embedding for input 1",
        ),
        (
            json!([
                item(0, json!([1.0])),
                item(1, json!([1.0])),
                item(2, json!([1.0]))
            ]),
            "input 2 of 2",
        ),
        (
            json!([item(0, json!([1.0, 0.0])), item(0, json!([1.0, 0.0]))]),
            "two embeddings for input 0",
        ),
        (
            json!([item(0, json!([1.0, 0.0])), item(1, json!([1.0]))]),
            "vector 1 has 1",
        ),
        (json!([item(0, json!([])), item(1, json!([]))]), "empty"),
        (json!([item(0, json!("abc")), item(1, json!([1.0]))]), ""),
    ];
    for (data, expected) in cases {
        let server = answering(json!({ "object": "list", "data": data })).await;
        match embedder(&server).embed(&texts(2)).await.unwrap_err() {
            ModelError::MalformedResponse { message } => {
                assert!(message.contains(expected), "{data}: {message}");
            }
            other => panic!("{data}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn the_key_is_sent_and_never_shown() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(header("authorization", format!("Bearer {KEY}").as_str()))
        .respond_with(ResponseTemplate::new(401).set_body_json(json!({
            "error": { "message": "Incorrect API key provided", "type": "invalid_request_error" }
        })))
        .mount(&server)
        .await;
    let model = embedder(&server);
    let error = model.embed(&texts(1)).await.unwrap_err();
    assert!(matches!(error, ModelError::Auth { .. }), "{error:?}");
    for text in [format!("{model:?}"), error.to_string()] {
        assert!(!text.contains(KEY), "{text}");
    }
}
