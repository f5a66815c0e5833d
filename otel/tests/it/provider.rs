//! A real provider client (OpenAI's, against a local server speaking its
//! wire format) under a traced run: its key never reaches the collector,
//! contents captured or not.

use crate::collector::{Collector, Server, int, strings, text};
use axum::Router;
use axum::http::header;
use axum::routing::post;
use harness::llm::{LanguageModel, ModelRequest};
use harness::{Cx, Harness, HarnessState, create_agent};
use harness_otel::OtelConfig;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use tracing_subscriber::layer::SubscriberExt;

const KEY: &str = "sk-live-very-secret-0042";

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Answer {
    text: String,
}

/// OpenAI's answer "Bonjour.", as JSON text.
fn bonjour() -> String {
    serde_json::json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1_700_000_000,
        "model": "gpt-test",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Bonjour."},
                     "logprobs": null, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 8, "total_tokens": 28}
    })
    .to_string()
}

/// A local server answering `POST /v1/chat/completions` as OpenAI does.
fn openai() -> Server {
    let reply = bonjour();
    Server::start(Router::new().route(
        "/v1/chat/completions",
        post(move || {
            let body = reply.clone();
            async move { ([(header::CONTENT_TYPE, "application/json")], body) }
        }),
    ))
}

#[test]
fn a_providers_key_never_reaches_the_collector() {
    let _serial = crate::serial();
    let server = openai();
    for capture in [false, true] {
        let collector = Collector::start();
        let model: Arc<dyn LanguageModel> = Arc::new(
            harness_openai::Client::builder()
                .api_key(KEY)
                .base_url(format!("{}/v1", server.endpoint))
                .build()
                .unwrap()
                .completion_model("gpt-test"),
        );
        let (layer, guard) =
            harness_otel::layer(OtelConfig::new(&collector.endpoint).capture_content(capture))
                .unwrap();
        let subscriber = tracing_subscriber::registry().with(layer);
        let out = tracing::subscriber::with_default(subscriber, || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(async {
                    let harness = Harness::<Answer>::builder()
                        .step("greet")
                        .run(move |cx: Cx<()>| {
                            let model = Arc::clone(&model);
                            async move {
                                let request =
                                    ModelRequest::builder().user("Say hello in French.").build();
                                let answer = cx.complete(&*model, &request).await?;
                                Ok(AnswerUpdate::new().text(answer.text()))
                            }
                        })
                        .end()
                        .start("greet")
                        .build()
                        .unwrap();
                    create_agent("greeter", &harness)
                        .run(Answer::default())
                        .await
                        .unwrap()
                })
        });
        assert_eq!(out.state.text, "Bonjour.");
        guard.shutdown().unwrap();

        let spans: Vec<_> = collector.spans().into_iter().map(|(_, s)| s).collect();
        let chat = spans.iter().find(|s| s.name == "chat gpt-test").unwrap();
        assert_eq!(
            text(&chat.attributes, "gen_ai.provider.name").as_deref(),
            Some("openai")
        );
        assert_eq!(
            text(&chat.attributes, "gen_ai.request.model").as_deref(),
            Some("gpt-test")
        );
        assert_eq!(int(&chat.attributes, "gen_ai.usage.input_tokens"), Some(20));
        assert_eq!(int(&chat.attributes, "gen_ai.usage.output_tokens"), Some(8));
        assert_eq!(
            strings(&chat.attributes, "gen_ai.response.finish_reasons"),
            Some(vec!["stop".to_owned()])
        );
        // The provider's own span nests under the model call.
        let request = spans.iter().find(|s| s.name == "model_request").unwrap();
        assert_eq!(request.parent_span_id, chat.span_id);

        let everything = format!("{:?}", collector.requests());
        assert!(
            !everything.contains(KEY),
            "capture {capture}: the key was exported"
        );
        assert!(!everything.contains("very-secret"), "capture {capture}");
        assert!(
            !everything.to_ascii_lowercase().contains("bearer"),
            "capture {capture}"
        );
        assert_eq!(everything.contains("Say hello in French."), capture);
    }
}

/// A provider's HTTP retries show on its `model_request` span: one WARN
/// event per failed attempt, each with its own attempt number and the
/// wait, and the span's `attempt` the number of attempts made.
#[test]
fn each_retried_attempt_is_an_event_with_its_own_number() {
    use std::sync::atomic::{AtomicU32, Ordering};
    let _serial = crate::serial();
    let calls = Arc::new(AtomicU32::new(0));
    let reply = bonjour();
    let counted = Arc::clone(&calls);
    let server = Server::start(Router::new().route(
        "/v1/chat/completions",
        post(move || {
            let call = counted.fetch_add(1, Ordering::SeqCst);
            let reply = reply.clone();
            async move {
                if call < 2 {
                    (
                        axum::http::StatusCode::SERVICE_UNAVAILABLE,
                        [("retry-after-ms", "1")],
                        "warming up".to_owned(),
                    )
                } else {
                    (
                        axum::http::StatusCode::OK,
                        [("content-type", "application/json")],
                        reply,
                    )
                }
            }
        }),
    ));
    let collector = Collector::start();
    let model = harness_openai::Client::builder()
        .api_key(KEY)
        .base_url(format!("{}/v1", server.endpoint))
        .max_attempts(3)
        .build()
        .unwrap()
        .completion_model("gpt-test");
    let (layer, guard) = harness_otel::layer(OtelConfig::new(&collector.endpoint)).unwrap();
    let subscriber = tracing_subscriber::registry().with(layer);
    let answer = tracing::subscriber::with_default(subscriber, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(model.complete(&ModelRequest::builder().user("Hi").build()))
            .unwrap()
    });
    assert_eq!(answer.text(), "Bonjour.");
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    guard.shutdown().unwrap();

    let spans: Vec<_> = collector.spans().into_iter().map(|(_, s)| s).collect();
    let request = spans.iter().find(|s| s.name == "model_request").unwrap();
    // tracing-opentelemetry records unsigned integers as text.
    assert_eq!(text(&request.attributes, "attempt").as_deref(), Some("3"));
    let failed: Vec<_> = request
        .events
        .iter()
        .filter(|e| e.name == "model request failed; retrying")
        .collect();
    assert_eq!(failed.len(), 2, "{:?}", request.events);
    for (event, number) in failed.iter().zip(["1", "2"]) {
        assert_eq!(text(&event.attributes, "attempt").as_deref(), Some(number));
        assert_eq!(text(&event.attributes, "delay_ms").as_deref(), Some("1"));
        assert!(
            text(&event.attributes, "error").is_some_and(|e| e.contains("warming up")),
            "{:?}",
            event.attributes
        );
    }
}
