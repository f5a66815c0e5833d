//! Bad configurations get a typed error naming what is wrong.

use harness_otel::{OtelConfig, OtelError};

fn endpoint_error(endpoint: &str) -> String {
    match OtelConfig::new(endpoint).traces_url() {
        Err(OtelError::Endpoint {
            endpoint: given,
            reason,
        }) => {
            // As given, unless it has credentials (see below).
            if !endpoint.contains('@') {
                assert_eq!(given, endpoint);
            }
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
fn an_endpoints_credentials_are_shown_neither_in_its_error_nor_in_the_configs_debug() {
    // Each endpoint, the texts of it that must never be shown, and what is
    // shown in their place.
    for (endpoint, hidden, shown) in [
        (
            "http://tenant:sk-collector-key@collector:4318",
            &["sk-collector-key", "tenant"][..],
            "http://[redacted]@collector:4318",
        ),
        (
            "http://sk-collector-key@collector",
            &["sk-collector-key"],
            "http://[redacted]@collector",
        ),
        // A `/`, `?`, `:` or `@` in the password: all before the last `@`.
        (
            "http://tenant:sk/collector-key@collector:4318/v1/traces",
            &["sk/collector-key", "collector-key", "tenant"],
            "http://[redacted]@collector:4318/v1/traces",
        ),
        (
            "http://tenant:sk?collector:key@collector",
            &["collector:key", "sk?"],
            "http://[redacted]@collector",
        ),
        (
            "http://tenant:sk@collector-key@collector:4318",
            &["sk@collector-key", "tenant"],
            "http://[redacted]@collector:4318",
        ),
        // Refused for another reason first, still not shown.
        (
            "https://tenant:sk-collector-key@collector",
            &["sk-collector-key"],
            "https://[redacted]@collector",
        ),
        (
            "grpc://tenant:sk-collector-key@collector:4317",
            &["sk-collector-key"],
            "grpc://[redacted]@collector:4317",
        ),
        (
            "tenant:sk-collector-key@collector:4318",
            &["sk-collector-key"],
            "[redacted]@collector:4318",
        ),
        (
            "http://tenant:sk-collector-key@collector:43x8",
            &["sk-collector-key"],
            "http://[redacted]@collector:43x8",
        ),
        (
            "http://tenant:sk collector-key@collector",
            &["collector-key"],
            "http://[redacted]@collector",
        ),
        // A key in the query of an endpoint refused for its port.
        (
            "http://collector:43x8/v1/traces?api_key=sk-collector-key&tenant=t1",
            &["sk-collector-key"],
            "http://collector:43x8/v1/traces?api_key=[redacted]&tenant=t1",
        ),
    ] {
        let config = OtelConfig::new(endpoint);
        let e = config.traces_url().unwrap_err();
        let OtelError::Endpoint {
            endpoint: given, ..
        } = &e
        else {
            panic!("{endpoint}: {e:?}")
        };
        assert_eq!(given, shown, "{endpoint}");
        for text in [e.to_string(), format!("{e:?}"), format!("{config:?}")] {
            for secret in hidden {
                assert!(!text.contains(secret), "{endpoint}: {secret:?} in {text}");
            }
        }
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

#[test]
fn a_queue_or_a_batch_of_zero_spans_is_refused() {
    for (config, said) in [
        (
            OtelConfig::new("http://127.0.0.1:4318").max_queue_size(0),
            "from the code",
        ),
        (
            OtelConfig::new("http://127.0.0.1:4318").max_export_batch_size(0),
            "from the code",
        ),
    ] {
        match harness_otel::layer::<tracing_subscriber::Registry>(config) {
            Err(OtelError::Queue(reason)) => {
                assert!(reason.contains("0") && reason.contains(said), "{reason}");
            }
            Err(other) => panic!("{other:?}"),
            Ok(_) => panic!("a size of 0 was taken"),
        }
    }
}
