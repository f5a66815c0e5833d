//! Bad configurations get a typed error naming what is wrong.

use harness_otel::{OtelConfig, OtelError};

fn endpoint_error(endpoint: &str) -> String {
    match OtelConfig::new(endpoint).traces_url() {
        Err(OtelError::Endpoint {
            endpoint: given,
            reason,
        }) => {
            assert_eq!(given, endpoint);
            reason
        }
        other => panic!("{endpoint:?} gave {other:?}"),
    }
}

#[test]
fn endpoints_get_the_traces_path_unless_they_have_a_path() {
    for (given, url) in [
        ("http://localhost:4318", "http://localhost:4318/v1/traces"),
        ("http://localhost:4318/", "http://localhost:4318/v1/traces"),
        ("HTTP://127.0.0.1:4318", "HTTP://127.0.0.1:4318/v1/traces"),
        ("http://[::1]:4318", "http://[::1]:4318/v1/traces"),
        ("http://[::1]", "http://[::1]/v1/traces"),
        ("http://collector", "http://collector/v1/traces"),
        (
            "http://collector:4318/otlp/v1/traces",
            "http://collector:4318/otlp/v1/traces",
        ),
    ] {
        assert_eq!(OtelConfig::new(given).traces_url().unwrap(), url, "{given}");
    }
}

#[test]
fn endpoints_that_are_not_plain_http_urls_are_refused_with_the_reason() {
    for (endpoint, says) in [
        ("", "empty"),
        ("localhost:4318", "not a URL"),
        ("collector", "not a URL"),
        ("https://collector:4318", "without TLS"),
        ("HTTPS://collector", "without TLS"),
        ("grpc://collector:4317", "`grpc` is not supported"),
        ("ftp://collector", "`ftp` is not supported"),
        ("http://", "no host"),
        ("http:///v1/traces", "no host"),
        ("http://:4318", "no host"),
        ("http://collector:43x8", "port `43x8`"),
        ("http://collector:70000", "port `70000`"),
        ("http://collector :4318", "spaces"),
        ("http://collector\n", "spaces"),
        ("http://user:pw@collector", "credentials"),
        ("http://collector/#x", "fragment"),
    ] {
        let reason = endpoint_error(endpoint);
        assert!(reason.contains(says), "{endpoint:?}: {reason}");
    }
}

#[test]
fn bad_service_names_and_headers_are_refused_before_anything_starts() {
    for name in ["", "   ", "bot\n", "a\u{7}b"] {
        let err = harness_otel::layer::<tracing_subscriber::Registry>(
            OtelConfig::new("http://127.0.0.1:4318").service_name(name),
        )
        .err()
        .unwrap();
        assert!(
            matches!(&err, OtelError::ServiceName { name: n, .. } if n == name),
            "{name:?}: {err}"
        );
    }
    for (name, value, says) in [
        ("", "v", "name is empty"),
        ("x api key", "v", "characters a header name cannot have"),
        ("x-key:", "v", "characters a header name cannot have"),
        ("clé", "v", "characters a header name cannot have"),
        ("x-key", "line\nbreak", "control characters"),
        ("x-key", "nul\0", "control characters"),
    ] {
        let err = harness_otel::layer::<tracing_subscriber::Registry>(
            OtelConfig::new("http://127.0.0.1:4318").header(name, value),
        )
        .err()
        .unwrap();
        let message = err.to_string();
        assert!(
            matches!(&err, OtelError::Header { name: n, .. } if n == name),
            "{name:?}: {message}"
        );
        assert!(message.contains(says), "{name:?}: {message}");
        assert!(
            value.len() < 2 || !message.contains(value),
            "a header's value is never shown: {message}"
        );
    }
}

#[test]
fn a_config_shows_header_names_but_never_their_values() {
    let config = OtelConfig::new("http://127.0.0.1:4318").header("authorization", "Bearer k-123");
    let shown = format!("{config:?}");
    assert!(shown.contains("authorization"), "{shown}");
    assert!(!shown.contains("k-123"), "{shown}");
}

#[test]
fn init_refuses_a_second_global_subscriber() {
    let _serial = crate::serial();
    let collector = crate::collector::Collector::start();
    let first = harness_otel::init(OtelConfig::new(&collector.endpoint)).unwrap();
    let second = harness_otel::init(OtelConfig::new(&collector.endpoint));
    assert!(
        matches!(second, Err(OtelError::SubscriberAlreadySet(_))),
        "{second:?}"
    );
    first.shutdown().unwrap();
}
