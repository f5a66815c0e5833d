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

/// Registered by the next test only: a password with a quote, a backslash
/// and non-ASCII characters; a secret of non-ASCII characters only; an
/// account number; two numbers that a longer number and a float hold.
const QUOTED: &str = r#"pa"ss\wörd-otel-7731"#;
const UNICODE: &str = "clé-très-secrète-5521";
const ACCOUNT: &str = "98765432101234";
const INSIDE_INT: &str = "31415926535";
const INSIDE_FLOAT: &str = "27182818284";

/// Reports a configuration, as Python's `json.dumps` writes it (non-ASCII
/// characters as `\u` escapes).
struct Config;

#[derive(Deserialize, schemars::JsonSchema)]
struct NoArgs {}

#[async_trait::async_trait]
impl harness::llm::Tool for Config {
    type Args = NoArgs;
    type Output = String;
    type Error = String;
    fn name(&self) -> &str {
        "config"
    }
    fn description(&self) -> &str {
        "prints the configuration"
    }
    async fn call(&self, _: NoArgs) -> Result<String, String> {
        Ok(format!(
            r#"{{"db": {{"password": "{}"}}}}"#,
            python_escaped(UNICODE)
        ))
    }
}

/// `text` escaped as Python's `json.dumps` escapes a string (without the
/// quotes).
fn python_escaped(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_ascii() => out.push(c),
            c => {
                for unit in c.encode_utf16(&mut [0; 2]) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
        }
    }
    out
}

/// `text` escaped as serde_json escapes a string (without the quotes).
fn json_escaped(text: &str) -> String {
    let quoted = serde_json::to_string(text).unwrap();
    quoted[1..quoted.len() - 1].to_owned()
}

/// The protobuf varint of `n`: how an integer attribute is encoded.
fn varint(n: i64) -> Vec<u8> {
    let mut n = n as u64;
    let mut out = Vec::new();
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

/// Every attribute of every span, event and link, its value as text.
fn every_attribute(spans: &[Span]) -> Vec<(String, String)> {
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
    fn shown(value: Option<&Any>) -> String {
        match value {
            Some(Any::StringValue(s)) => s.clone(),
            Some(Any::IntValue(n)) => n.to_string(),
            Some(Any::DoubleValue(x)) => x.to_string(),
            Some(Any::BoolValue(b)) => b.to_string(),
            Some(Any::ArrayValue(array)) => array
                .values
                .iter()
                .map(|v| shown(v.value.as_ref()))
                .collect::<Vec<_>>()
                .join(","),
            other => format!("{other:?}"),
        }
    }
    let mut out = Vec::new();
    for span in spans {
        let attributes = span
            .attributes
            .iter()
            .chain(span.events.iter().flat_map(|e| e.attributes.iter()))
            .chain(span.links.iter().flat_map(|l| l.attributes.iter()));
        for kv in attributes {
            out.push((
                kv.key.clone(),
                shown(kv.value.as_ref().and_then(|v| v.value.as_ref())),
            ));
        }
    }
    out
}

#[test]
fn secrets_in_json_escaped_forms_and_in_numbers_are_redacted_before_export() {
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    for secret in [QUOTED, UNICODE, ACCOUNT, INSIDE_INT, INSIDE_FLOAT] {
        assert!(harness::secrets::register(secret), "{secret}");
    }
    // The model writes the password inside JSON in its answer (the answer
    // is JSON again in `gen_ai.output.messages`: the password is escaped
    // twice there), and passes the Python-escaped secret in a tool call's
    // arguments, inside a JSON text (escaped twice in the arguments).
    let config = serde_json::json!({ "password": QUOTED }).to_string();
    let nested = format!(r#"{{"key": "{}"}}"#, python_escaped(UNICODE));
    let call = harness::llm::ToolCall::new(
        "c1",
        "config",
        serde_json::json!({ "settings": nested, "password": QUOTED }),
    );
    let model = Arc::new(ScriptedModel::new([Expect::any().reply(
        harness::llm::ModelResponse::from_text(format!(
            "here is the config: {config}; and {}",
            python_escaped(UNICODE)
        )),
    )]));
    let collector = Collector::start();
    let _serial = crate::serial();
    let (layer, guard) =
        harness_otel::layer(OtelConfig::new(&collector.endpoint).capture_content(true)).unwrap();
    let subscriber = tracing_subscriber::registry().with(layer);
    let harness = Harness::<Notes>::builder()
        .step("leak")
        .run(move |cx: Cx<()>| {
            let model = Arc::clone(&model);
            let call = call.clone();
            async move {
                let span = tracing::info_span!("ledger", account = 98_765_432_101_234_u64);
                span.set_attribute(
                    "ledger.accounts",
                    opentelemetry::Value::Array(vec![1_i64, 98_765_432_101_234].into()),
                );
                span.add_link_with_attributes(
                    SpanContext::new(
                        TraceId::from(7_u128),
                        SpanId::from(9_u64),
                        TraceFlags::SAMPLED,
                        true,
                        TraceState::default(),
                    ),
                    vec![opentelemetry::KeyValue::new(
                        "link.account",
                        98_765_432_101_234_i64,
                    )],
                );
                span.in_scope(|| {
                    tracing::info!(
                        account = 98_765_432_101_234_i64,
                        longer = 9_931_415_926_535_i64,
                        ratio = 27_182_818_284.5_f64,
                        plain = 12_345_678_901_i64,
                        small = 42_i64,
                        "numbers"
                    );
                });
                drop(span);
                let answer = cx
                    .complete(&*model, &ModelRequest::builder().user("config?").build())
                    .await?;
                let tools = harness::llm::ToolSet::new().with(Config);
                let result = cx.call_tool(&tools, &call).await;
                Ok(NotesUpdate::new().log(vec![answer.text(), result.content]))
            }
        })
        .end()
        .start("leak")
        .build()
        .unwrap();
    let result = tracing::subscriber::with_default(subscriber, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(create_agent("leaky-json", &harness).run(Notes::default()))
    });
    let done = result.unwrap();
    // In memory the answer is as the model wrote it (redaction is at the
    // edges): the export below is what must not hold it.
    assert!(done.state.log[0].contains(&json_escaped(QUOTED)));
    guard.flush().unwrap();
    guard.shutdown().unwrap();

    // Every byte the collector was sent.
    let bodies = collector.bodies();
    assert!(!bodies.is_empty());
    let contains = |needle: &[u8]| {
        bodies
            .iter()
            .any(|b| b.windows(needle.len()).any(|w| w == needle))
    };
    let mut forms = Vec::new();
    for secret in [QUOTED, UNICODE] {
        let once = [json_escaped(secret), python_escaped(secret)];
        for form in &once {
            forms.push(json_escaped(form));
            forms.push(python_escaped(form));
        }
        forms.extend(once);
        forms.push(secret.to_owned());
    }
    forms.extend([ACCOUNT, INSIDE_INT, INSIDE_FLOAT].map(String::from));
    for form in &forms {
        assert!(!contains(form.as_bytes()), "{form} was exported");
    }
    for fragment in [
        "wörd-otel",
        "w\\u00f6rd-otel",
        "-secr\\u00e8te-5521",
        "secrète-5521",
    ] {
        assert!(!contains(fragment.as_bytes()), "{fragment} was exported");
    }
    for number in [98_765_432_101_234, 9_931_415_926_535] {
        assert!(
            !contains(&varint(number)),
            "{number} was exported as an integer"
        );
    }
    assert!(
        !contains(&27_182_818_284.5_f64.to_le_bytes()),
        "the float was exported"
    );

    let spans: Vec<Span> = collector.spans().into_iter().map(|(_, s)| s).collect();
    let attributes = every_attribute(&spans);
    for (key, value) in &attributes {
        for secret in [
            ACCOUNT,
            INSIDE_INT,
            INSIDE_FLOAT,
            "wörd-otel",
            "secrète-5521",
        ] {
            assert!(!value.contains(secret), "{key} = {value}");
        }
    }
    // What was redacted, and what was not.
    let shown = |key: &str| -> Vec<&str> {
        attributes
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    };
    assert_eq!(shown("account"), ["[redacted]", "[redacted]"]);
    assert_eq!(shown("link.account"), ["[redacted]"]);
    assert_eq!(shown("ledger.accounts"), ["1,[redacted]"]);
    assert_eq!(shown("longer"), ["99[redacted]"]);
    assert_eq!(shown("ratio"), ["[redacted].5"]);
    let ledger = spans.iter().find(|s| s.name == "ledger").unwrap();
    let numbers = &ledger.events[0];
    // Numbers holding no secret stay numbers.
    assert_eq!(
        crate::collector::int(&numbers.attributes, "plain"),
        Some(12_345_678_901)
    );
    assert_eq!(
        crate::collector::int(&numbers.attributes, "small"),
        Some(42)
    );
    let chat = spans.iter().find(|s| s.name == "chat scripted").unwrap();
    let output = text(&chat.attributes, "gen_ai.output.messages").unwrap();
    assert!(
        output.contains(r#"here is the config: {\"password\":\"[redacted]\"}; and [redacted]"#),
        "{output}"
    );
    let tool = spans
        .iter()
        .find(|s| s.name == "execute_tool config")
        .unwrap();
    let arguments = text(&tool.attributes, "gen_ai.tool.call.arguments").unwrap();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&arguments).unwrap(),
        serde_json::json!({ "settings": r#"{"key": "[redacted]"}"#, "password": "[redacted]" })
    );
    let result = text(&tool.attributes, "gen_ai.tool.call.result").unwrap();
    assert!(result.contains(r#""password": "[redacted]""#), "{result}");
}
