//! `EmbeddingModel` against a mock speaking Gemini's `batchEmbedContents`:
//! the request it sends, the vectors it hands on in order, and typed errors
//! for HTTP failures, bodies that are not the documented JSON, answers with
//! the wrong number of vectors and vectors of the wrong length. And a
//! `Memory` indexed by it finds items by their words.

use std::sync::Arc;
use std::time::Duration;

use harness::llm::{Embedder, ModelError};
use harness::memory::{IndexConfig, Memory, Namespace, Search};
use harness_gemini::{Client, EmbeddingModel, HttpRetryPolicy};
use serde_json::{Value, json};
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use super::{KEY, requests};

const BATCH: &str = "/v1beta/models/embed-test:batchEmbedContents";

fn embedder(server: &MockServer) -> EmbeddingModel {
    Client::builder()
        .api_key(KEY)
        .base_url(format!("{}/v1beta", server.uri()))
        .timeout(Duration::from_secs(5))
        .retry_policy(HttpRetryPolicy {
            max_attempts: 1,
            initial_backoff: Duration::from_millis(5),
            max_backoff: Duration::from_millis(5),
            max_retry_after: Duration::from_millis(5),
        })
        .build()
        .unwrap()
        .embedding_model("models/embed-test")
}

fn texts(texts: &[&str]) -> Vec<String> {
    texts.iter().map(|t| (*t).to_owned()).collect()
}

fn vectors(rows: &[&[f32]]) -> Value {
    json!({ "embeddings": rows.iter().map(|r| json!({ "values": r })).collect::<Vec<_>>() })
}

async fn answering(body: ResponseTemplate) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(BATCH))
        .respond_with(body)
        .mount(&server)
        .await;
    server
}

/// No error text (display or debug) shows the key.
fn assert_no_key(error: &ModelError) {
    for text in [error.to_string(), format!("{error:?}")] {
        assert!(!text.contains(KEY), "{text}");
    }
}

#[tokio::test]
async fn one_batch_request_in_gemini_s_shape_and_vectors_in_order() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(BATCH))
        .and(header("x-goog-api-key", KEY))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(vectors(&[&[0.1, 0.2, 0.3], &[0.4, 0.5, 0.6]])),
        )
        .expect(1)
        .mount(&server)
        .await;
    let model = embedder(&server)
        .dimensions(3)
        .task_type("RETRIEVAL_DOCUMENT");
    let got = model
        .embed(&texts(&["tides follow the moon", "bees dance"]))
        .await
        .unwrap();
    assert_eq!(got.vectors, vec![vec![0.1, 0.2, 0.3], vec![0.4, 0.5, 0.6]]);
    assert_eq!(model.provider(), "gemini");
    assert_eq!(model.model_name(), "embed-test");
    let sent = requests(&server).await;
    assert_eq!(
        sent,
        vec![json!({ "requests": [
            { "model": "models/embed-test", "content": { "parts": [{ "text": "tides follow the moon" }] },
              "taskType": "RETRIEVAL_DOCUMENT", "outputDimensionality": 3 },
            { "model": "models/embed-test", "content": { "parts": [{ "text": "bees dance" }] },
              "taskType": "RETRIEVAL_DOCUMENT", "outputDimensionality": 3 },
        ]})]
    );
    // The key travels in the header only.
    let raw = server.received_requests().await.unwrap();
    assert!(!raw[0].url.as_str().contains(KEY), "{}", raw[0].url);
    assert!(!String::from_utf8_lossy(&raw[0].body).contains(KEY));
}

#[tokio::test]
async fn without_options_the_request_names_only_model_and_content() {
    let server = answering(ResponseTemplate::new(200).set_body_json(vectors(&[&[1.0, 0.0]]))).await;
    let got = embedder(&server).embed(&texts(&["x"])).await.unwrap();
    assert_eq!(got.dimensions(), Some(2));
    assert_eq!(
        requests(&server).await[0],
        json!({ "requests": [{ "model": "models/embed-test", "content": { "parts": [{ "text": "x" }] } }] })
    );
}

#[tokio::test]
async fn no_texts_no_call() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(500))
        .expect(0)
        .mount(&server)
        .await;
    let got = embedder(&server).embed(&[]).await.unwrap();
    assert!(got.vectors.is_empty());
}

/// Whether an error is of the kind a case expects.
type IsExpected = fn(&ModelError) -> bool;

#[tokio::test]
async fn http_failures_are_typed_and_never_show_the_key() {
    let google = |code: u16, status: &str, message: &str| {
        ResponseTemplate::new(code).set_body_json(json!({
            "error": { "code": code, "message": message, "status": status }
        }))
    };
    let cases: Vec<(&str, ResponseTemplate, IsExpected)> = vec![
        (
            "bad key quoted back",
            google(
                400,
                "INVALID_ARGUMENT",
                &format!("API key not valid: {KEY}"),
            ),
            |e| {
                matches!(
                    e,
                    ModelError::InvalidRequest {
                        status: Some(400),
                        ..
                    } | ModelError::Auth { .. }
                )
            },
        ),
        (
            "unknown model",
            google(
                404,
                "NOT_FOUND",
                "models/embed-test is not found for API version v1beta",
            ),
            |e| {
                matches!(
                    e,
                    ModelError::InvalidRequest {
                        status: Some(404),
                        ..
                    }
                )
            },
        ),
        (
            "forbidden",
            google(
                403,
                "PERMISSION_DENIED",
                "Method doesn't allow unregistered callers",
            ),
            |e| matches!(e, ModelError::Auth { .. }),
        ),
        (
            "quota",
            google(
                429,
                "RESOURCE_EXHAUSTED",
                "Quota exceeded for metric embed_content_requests",
            ),
            |e| matches!(e, ModelError::RateLimited { .. }),
        ),
        (
            "internal",
            google(500, "INTERNAL", "An internal error has occurred"),
            |e| {
                matches!(
                    e,
                    ModelError::Overloaded {
                        status: Some(500),
                        ..
                    }
                )
            },
        ),
    ];
    for (case, response, expected) in cases {
        let server = answering(response).await;
        let error = embedder(&server).embed(&texts(&["a"])).await.unwrap_err();
        assert!(expected(&error), "{case}: {error:?}");
        assert_no_key(&error);
    }
}

#[tokio::test]
async fn bodies_that_are_not_gemini_s_json_are_malformed() {
    for (case, body) in [
        (
            "not JSON",
            ResponseTemplate::new(200).set_body_string("<html>oops</html>"),
        ),
        (
            "no embeddings field",
            ResponseTemplate::new(200).set_body_json(json!({})),
        ),
        (
            "embeddings not a list",
            ResponseTemplate::new(200).set_body_json(json!({ "embeddings": { "values": [1.0] } })),
        ),
        (
            "values misspelt",
            ResponseTemplate::new(200).set_body_json(json!({ "embeddings": [{ "value": [1.0] }] })),
        ),
        (
            "numbers as text",
            ResponseTemplate::new(200)
                .set_body_json(json!({ "embeddings": [{ "values": ["0.1", "0.2"] }] })),
        ),
        (
            "the single-content shape",
            ResponseTemplate::new(200).set_body_json(json!({ "embedding": { "values": [1.0] } })),
        ),
    ] {
        let server = answering(body).await;
        let error = embedder(&server).embed(&texts(&["a"])).await.unwrap_err();
        assert!(
            matches!(error, ModelError::MalformedResponse { .. }),
            "{case}: {error:?}"
        );
    }
}

#[tokio::test]
async fn the_wrong_number_of_vectors_is_malformed_and_says_so() {
    for (case, rows, asked) in [
        ("one short", &[&[1.0f32, 0.0][..]][..], 2),
        (
            "one too many",
            &[&[1.0, 0.0][..], &[0.0, 1.0], &[1.0, 1.0]][..],
            2,
        ),
        ("none", &[][..], 3),
    ] {
        let server = answering(ResponseTemplate::new(200).set_body_json(vectors(rows))).await;
        let inputs: Vec<String> = (0..asked).map(|i| format!("text {i}")).collect();
        let error = embedder(&server).embed(&inputs).await.unwrap_err();
        let ModelError::MalformedResponse { message } = &error else {
            panic!("{case}: {error:?}");
        };
        assert!(
            message.contains(&format!(
                "{} embedding vectors for {asked} texts",
                rows.len()
            )),
            "{case}: {message}"
        );
        assert!(message.contains("batchEmbedContents"), "{case}: {message}");
    }
}

#[tokio::test]
async fn vectors_of_the_wrong_length_are_malformed_and_say_so() {
    // Asked for 3 numbers.
    for (case, rows, says) in [
        (
            "both short",
            &[&[1.0f32, 0.0][..], &[0.0, 1.0]][..],
            "have 2 numbers; 3 were asked",
        ),
        (
            "both long",
            &[&[1.0, 0.0, 0.0, 0.0][..], &[0.0, 1.0, 0.0, 0.0]][..],
            "have 4 numbers; 3 were asked",
        ),
        (
            "ragged",
            &[&[1.0, 0.0, 0.0][..], &[0.0, 1.0]][..],
            "vector 1 has 2 numbers, vector 0 has 3",
        ),
        ("empty", &[&[][..], &[]][..], "empty"),
    ] {
        let server = answering(ResponseTemplate::new(200).set_body_json(vectors(rows))).await;
        let error = embedder(&server)
            .dimensions(3)
            .embed(&texts(&["a", "b"]))
            .await
            .unwrap_err();
        let ModelError::MalformedResponse { message } = &error else {
            panic!("{case}: {error:?}");
        };
        assert!(message.contains(says), "{case}: {message}");
    }
    // Not asked: ragged vectors still fail.
    let server = answering(
        ResponseTemplate::new(200).set_body_json(vectors(&[&[1.0, 0.0, 0.0], &[0.0, 1.0]])),
    )
    .await;
    let error = embedder(&server)
        .embed(&texts(&["a", "b"]))
        .await
        .unwrap_err();
    assert!(
        matches!(error, ModelError::MalformedResponse { .. }),
        "{error:?}"
    );
}

/// Answers each content with its words hashed into 8 numbers, the way
/// Gemini answers: one `values` per request, in order.
struct HashedWords;

impl Respond for HashedWords {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = request.body_json().unwrap();
        let rows: Vec<Value> = body["requests"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let text = r["content"]["parts"][0]["text"].as_str().unwrap();
                let mut v = [0.01f32; 8];
                for word in text.split_whitespace() {
                    let h = word.bytes().fold(7usize, |h, b| h * 31 + usize::from(b));
                    v[h % 8] += 1.0;
                }
                json!({ "values": v })
            })
            .collect();
        ResponseTemplate::new(200).set_body_json(json!({ "embeddings": rows }))
    }
}

#[tokio::test]
async fn memory_indexed_by_gemini_finds_items_by_their_words() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(BATCH))
        .respond_with(HashedWords)
        .mount(&server)
        .await;
    let model = embedder(&server).dimensions(8);
    let memory =
        Memory::in_memory().with_index(IndexConfig::new(Arc::new(model), 8).fields(["text"]));
    let ns = Namespace::new(["notes"]).unwrap();
    for (key, text) in [
        ("a", "amber basalt"),
        ("b", "cobalt dune"),
        ("c", "ember fjord"),
    ] {
        memory.put(&ns, key, json!({ "text": text })).await.unwrap();
    }
    let hits = memory
        .search(&Search::under(ns).text("dune cobalt").limit(1))
        .await
        .unwrap();
    assert_eq!(hits[0].item.key, "b");
    // Three puts and one query (a text not seen before): four calls.
    assert_eq!(requests(&server).await.len(), 4);
}
