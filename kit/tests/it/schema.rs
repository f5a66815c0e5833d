//! The schema validator on the schemas schemars emits.

use harness::llm::ToolSpec;
use harness_kit::schema::validate;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

#[allow(dead_code)] // only its schema is used
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// A path.
    path: String,
    lines: Option<u32>,
    mode: Mode,
    tags: Vec<String>,
    nested: Option<Inner>,
}

#[allow(dead_code)]
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Mode {
    Read,
    Write,
}

#[allow(dead_code)]
#[derive(Deserialize, JsonSchema)]
struct Inner {
    depth: u8,
}

fn schema() -> Value {
    ToolSpec::from_args::<Args>("t", "t").parameters
}

#[test]
fn values_serde_reads_pass() {
    for ok in [
        json!({"path": "a", "mode": "read", "tags": []}),
        json!({"path": "a", "lines": 3, "mode": "write", "tags": ["x"], "nested": {"depth": 255}}),
        json!({"path": "a", "lines": null, "mode": "read", "tags": [], "nested": null}),
    ] {
        assert_eq!(validate(&schema(), &ok), Ok(()), "{ok}");
        assert!(serde_json::from_value::<Args>(ok).is_ok());
    }
}

#[test]
fn values_serde_refuses_fail_with_where_and_why() {
    let cases = [
        (
            json!({"mode": "read", "tags": []}),
            "at /: the required property \"path\" is missing",
        ),
        (
            json!({"path": 1, "mode": "read", "tags": []}),
            "at /path: expected a string, found the number 1",
        ),
        (
            json!({"path": "a", "lines": -1, "mode": "read", "tags": []}),
            "at /lines: expected at least 0, found -1",
        ),
        (
            json!({"path": "a", "lines": 1.5, "mode": "read", "tags": []}),
            "at /lines: expected an integer or null",
        ),
        (
            json!({"path": "a", "mode": "append", "tags": []}),
            "at /mode: ",
        ),
        (
            json!({"path": "a", "mode": "read", "tags": [1]}),
            "at /tags/0: expected a string",
        ),
        (
            json!({"path": "a", "mode": "read", "tags": [], "nested": {"depth": 256}}),
            "at /nested/depth: expected at most 255",
        ),
        (
            json!({"path": "a", "mode": "read", "tags": [], "extra": true}),
            "at /extra: the property \"extra\" is not allowed",
        ),
        (
            json!(["a"]),
            "at /: expected an object, found an array of 1 items",
        ),
    ];
    for (bad, expected) in cases {
        let errors = validate(&schema(), &bad).expect_err(&bad.to_string());
        let text = errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        assert!(
            text.contains(expected),
            "{bad}: {text:?} lacks {expected:?}"
        );
        assert!(serde_json::from_value::<Args>(bad).is_err());
    }
}

#[test]
fn refs_resolve_and_circular_or_missing_ones_are_reported() {
    let missing = json!({"$ref": "#/$defs/Nope"});
    let errors = validate(&missing, &json!(1)).expect_err("a missing definition");
    assert!(errors[0].message.contains("does not define"));
    let circular = json!({"$defs": {"A": {"$ref": "#/$defs/A"}}, "$ref": "#/$defs/A"});
    let errors = validate(&circular, &json!(1)).expect_err("a circular reference");
    assert!(errors[0].message.contains("nest deeper"));
}
