//! Secrets the process holds never reach the collector, whatever carries
//! them: an attribute with an ordinary name, an event, a span's name, an
//! error's status message, a captured model request.

use crate::collector::{Collector, text};
use harness::llm::{Expect, Message, ModelError, ModelRequest, ScriptedModel};
use harness::{Cx, Harness, HarnessState, create_agent};
use harness_otel::OtelConfig;
use opentelemetry_proto::tonic::trace::v1::Span;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use tracing_subscriber::layer::SubscriberExt;

/// Registered by this test only; no other test of the binary quotes it.
const SECRET: &str = "otel-secret-6f1d2c3b4a59";

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Notes {
    #[field(reduce = append)]
    log: Vec<String>,
}

/// leak (spans and events of the user's own that quote the secret) →
/// ask (a model call whose request quotes it and whose error quotes it).
fn leaky(model: Arc<ScriptedModel>) -> Harness<Notes> {
    Harness::<Notes>::builder()
        .step("leak")
        .run(|_cx: Cx<()>| async move {
            let name = format!("lookup {SECRET}");
            let span = tracing::info_span!(
                "lookup",
                otel.name = %name,
                lookup.note = %format!("config says key={SECRET}"),
                lookup.keys = tracing::field::Empty,
            );
            span.in_scope(|| {
                tracing::info!(found = %format!("{SECRET}{SECRET}"), "read the config");
            });
            drop(span);
            Ok(NotesUpdate::new().log(vec!["leaked".into()]))
        })
        .next("ask")
        .step("ask")
        .run(move |cx: Cx<()>| {
            let model = Arc::clone(&model);
            async move {
                let request = ModelRequest::builder()
                    .message(Message::user(format!("is «{SECRET}» valid?")))
                    .build();
                cx.complete(&*model, &request).await?;
                Ok(NotesUpdate::new())
            }
        })
        .end()
        .start("leak")
        .build()
        .unwrap()
}

fn export(capture_content: bool) -> (Collector, Vec<Span>) {
    assert!(harness::secrets::register(SECRET));
    let collector = Collector::start();
    let _serial = crate::serial();
    let (layer, guard) =
        harness_otel::layer(OtelConfig::new(&collector.endpoint).capture_content(capture_content))
            .unwrap();
    let subscriber = tracing_subscriber::registry().with(layer);
    let model = Arc::new(ScriptedModel::new([Expect::any().fail(ModelError::Auth {
        message: format!("invalid key {SECRET}"),
    })]));
    let result = tracing::subscriber::with_default(subscriber, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(create_agent("leaky", &leaky(model)).run(Notes::default()))
    });
    assert!(result.is_err(), "the model call fails");
    guard.flush().unwrap();
    guard.shutdown().unwrap();
    let spans = collector.spans().into_iter().map(|(_, s)| s).collect();
    (collector, spans)
}

#[test]
fn a_secret_in_any_attribute_event_name_or_status_is_redacted_before_export() {
    for capture in [false, true] {
        let (collector, spans) = export(capture);
        // The whole export, every byte the collector decoded.
        let exported = format!("{:?}", collector.requests());
        assert!(!exported.contains(SECRET), "capture {capture}: {exported}");
        assert!(
            !exported.contains(&SECRET[..SECRET.len() - 1]),
            "no part of it either"
        );

        let lookup = spans
            .iter()
            .find(|s| s.name.starts_with("lookup"))
            .unwrap_or_else(|| panic!("{spans:?}"));
        assert_eq!(lookup.name, "lookup [redacted]");
        assert_eq!(
            text(&lookup.attributes, "lookup.note").as_deref(),
            Some("config says key=[redacted]")
        );
        let event = &lookup.events[0];
        assert_eq!(
            text(&event.attributes, "found").as_deref(),
            Some("[redacted][redacted]")
        );

        let chat = spans.iter().find(|s| s.name == "chat scripted").unwrap();
        let status = chat.status.as_ref().unwrap();
        assert!(
            status.message.contains("invalid key [redacted]"),
            "{status:?}"
        );
        if capture {
            let input = text(&chat.attributes, "gen_ai.input.messages").unwrap();
            assert!(input.contains("is «[redacted]» valid?"), "{input}");
        } else {
            assert!(text(&chat.attributes, "gen_ai.input.messages").is_none());
        }
    }
}

/// Registered by the next test only.
const EVENT_SECRET: &str = "otel-secret-event-name-9c1e47";

#[test]
fn a_secret_in_an_events_message_or_a_links_attribute_is_redacted_before_export() {
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    assert!(harness::secrets::register(EVENT_SECRET));
    let collector = Collector::start();
    let _serial = crate::serial();
    let (layer, guard) = harness_otel::layer(OtelConfig::new(&collector.endpoint)).unwrap();
    let subscriber = tracing_subscriber::registry().with(layer);
    // Messages an event may carry (tracing-opentelemetry names the event
    // by its message), at every level the layer exports by default.
    let messages = [
        format!("tool printed: key={EVENT_SECRET}"),
        format!("{EVENT_SECRET} at the start"),
        format!("twice: {EVENT_SECRET}{EVENT_SECRET}"),
        format!(
            "quoted: \"{EVENT_SECRET}\" (as JSON: {})",
            serde_json::json!(EVENT_SECRET)
        ),
    ];
    tracing::subscriber::with_default(subscriber, || {
        let span = tracing::info_span!("step");
        span.add_link_with_attributes(
            SpanContext::new(
                TraceId::from(7_u128),
                SpanId::from(9_u64),
                TraceFlags::SAMPLED,
                true,
                TraceState::default(),
            ),
            vec![
                opentelemetry::KeyValue::new("link.note", format!("from {EVENT_SECRET}")),
                opentelemetry::KeyValue::new("link.api_key", "looks like a credential"),
            ],
        );
        span.in_scope(|| {
            tracing::info!("{}", messages[0]);
            tracing::warn!("{}", messages[1]);
            tracing::error!(count = 2, "{}", messages[2]);
            tracing::info!(message = %messages[3]);
        });
    });
    guard.flush().unwrap();
    guard.shutdown().unwrap();
    let exported = format!("{:?}", collector.requests());
    assert!(!exported.contains(EVENT_SECRET), "{exported}");
    assert!(
        !exported.contains(&EVENT_SECRET[..EVENT_SECRET.len() - 1]),
        "no part of it either"
    );
    let spans: Vec<Span> = collector.spans().into_iter().map(|(_, s)| s).collect();
    let step = spans.iter().find(|s| s.name == "step").unwrap();
    let names: Vec<&str> = step.events.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "tool printed: key=[redacted]",
            "[redacted] at the start",
            "twice: [redacted][redacted]",
            "quoted: \"[redacted]\" (as JSON: \"[redacted]\")",
        ]
    );
    let link = &step.links[0];
    assert_eq!(
        text(&link.attributes, "link.note").as_deref(),
        Some("from [redacted]")
    );
    assert!(text(&link.attributes, "link.api_key").is_none(), "{link:?}");
}
