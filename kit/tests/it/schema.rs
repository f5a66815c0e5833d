//! The schema validator on the schemas schemars emits.

use harness::llm::ToolSpec;
use harness_kit::schema::{MAX_STEPS, MAX_VIOLATIONS, SchemaError, validate};
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
        let text = validate(&schema(), &bad)
            .expect_err(&bad.to_string())
            .to_string();
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
    assert!(errors.violations()[0].message.contains("does not define"));
    let circular = json!({"$defs": {"A": {"$ref": "#/$defs/A"}}, "$ref": "#/$defs/A"});
    let errors = validate(&circular, &json!(1)).expect_err("a circular reference");
    assert!(errors.violations()[0].message.contains("nest deeper"));
}

/// `{"$defs": {"l0": {<combinator>: [{"$ref": "#/$defs/l1"}, {"$ref": "#/$defs/l1"}]}, …,
/// "l<levels>": <leaf>}, "$ref": "#/$defs/l0"}`: 2^levels leaves from a
/// schema of a few hundred bytes.
fn doubling(combinator: &str, levels: usize, leaf: Value) -> Value {
    let mut defs = serde_json::Map::new();
    for level in 0..levels {
        let next = json!({"$ref": format!("#/$defs/l{}", level + 1)});
        defs.insert(
            format!("l{level}"),
            json!({ combinator: [next.clone(), next] }),
        );
    }
    defs.insert(format!("l{levels}"), leaf);
    json!({"$defs": defs, "$ref": "#/$defs/l0"})
}

#[test]
fn schemas_that_branch_exponentially_stop_at_the_budget() {
    // Each would take 2^20 to 2^64 steps (the self-referential ones: until
    // the reference depth limit, 64 levels); before the budget, `allOf`
    // kept one violation per leaf until memory ran out, and `anyOf`,
    // `oneOf` and `not` spun.
    let cases = [
        (json!({"allOf": [{"$ref": "#"}, {"$ref": "#"}]}), json!({})),
        (json!({"anyOf": [{"$ref": "#"}, {"$ref": "#"}]}), json!({})),
        (json!({"oneOf": [{"$ref": "#"}, {"$ref": "#"}]}), json!("x")),
        (
            json!({"not": {"allOf": [{"$ref": "#"}, {"$ref": "#"}]}}),
            json!(1),
        ),
        (
            json!({"allOf": [{"$ref": "#"}, {"$ref": "#"}, {"$ref": "#"}], "type": "object"}),
            json!({"a": 1}),
        ),
        (doubling("allOf", 20, json!({"type": "string"})), json!(1)),
        (doubling("allOf", 24, json!(false)), json!(null)),
        (doubling("anyOf", 24, json!({"type": "string"})), json!([1])),
        (doubling("oneOf", 24, json!({"type": "integer"})), json!(2)),
        // Through the value: every item of a long array re-enters it.
        (
            json!({"type": "array", "items": {"anyOf": [{"$ref": "#"}, {"$ref": "#"}]}}),
            (0..24).fold(json!(1), |inner, _| json!([inner])),
        ),
    ];
    for (schema, value) in cases {
        let error = validate(&schema, &value).expect_err(&schema.to_string());
        assert_eq!(
            error,
            SchemaError::TooComplex { steps: MAX_STEPS },
            "{schema}"
        );
        assert!(
            error.to_string().contains("too complex"),
            "{schema}: {error}"
        );
    }
}

#[test]
fn violations_are_kept_up_to_the_limit_and_the_rest_counted() {
    // 2^14 failing leaves: within the step budget, over the violation limit.
    for (schema, value, found) in [
        (
            doubling("allOf", 14, json!({"type": "string"})),
            json!(1),
            1usize << 14,
        ),
        // Many wrong items of an array.
        (
            json!({"items": {"type": "string"}}),
            Value::Array(vec![json!(1); 5000]),
            5000,
        ),
        // Many properties that are not allowed.
        (
            json!({"type": "object", "additionalProperties": false}),
            Value::Object((0..300).map(|i| (format!("p{i}"), json!(i))).collect()),
            300,
        ),
    ] {
        let error = validate(&schema, &value).expect_err(&schema.to_string());
        let SchemaError::Mismatch { violations, more } = &error else {
            panic!("{schema}: {error}");
        };
        assert_eq!(violations.len(), MAX_VIOLATIONS, "{schema}");
        assert_eq!(violations.len() + more, found, "{schema}");
        assert!(
            error.to_string().ends_with(&format!("; and {more} more")),
            "{error}"
        );
    }
}

#[test]
fn long_lists_in_messages_are_cut() {
    let allowed: Vec<Value> = (0..1000).map(|i| json!(format!("v{i}"))).collect();
    let error = validate(&json!({"enum": allowed}), &json!("nope")).unwrap_err();
    let text = error.to_string();
    assert!(text.contains("(1000 in all)"), "{text}");
    assert!(text.len() < 600, "{} bytes: {text}", text.len());
    let properties: serde_json::Map<String, Value> =
        (0..1000).map(|i| (format!("p{i}"), json!({}))).collect();
    let schema = json!({"properties": properties, "additionalProperties": false});
    let text = validate(&schema, &json!({"zzz": 1}))
        .unwrap_err()
        .to_string();
    assert!(text.contains("(1000 in all)"), "{text}");
    assert!(text.len() < 600, "{} bytes: {text}", text.len());
}

#[test]
fn large_ordinary_values_are_checked_within_the_budget() {
    // Ten thousand objects of five fields: about 60 000 steps.
    let schema = json!({
        "type": "object",
        "properties": {"rows": {"type": "array", "items": {
            "type": "object",
            "properties": {
                "a": {"type": "integer"}, "b": {"type": "string"}, "c": {"enum": ["x", "y"]},
                "d": {"anyOf": [{"type": "null"}, {"type": "number"}]}, "e": {"type": "boolean"},
            },
            "required": ["a", "b"],
        }}},
    });
    let row = json!({"a": 1, "b": "two", "c": "x", "d": null, "e": true});
    let value = json!({"rows": vec![row; 10_000]});
    assert_eq!(validate(&schema, &value), Ok(()));
}
