//! Tool schemas for OpenAI's strict mode.

use serde_json::{Map, Value, json};

/// String formats strict mode accepts; others are dropped.
const STRICT_FORMATS: &[&str] = &[
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
];

/// Keywords strict mode rejects; they are dropped (the answer is still
/// validated against the Rust type on arrival).
const UNSUPPORTED: &[&str] = &[
    "$schema",
    "default",
    "examples",
    "minLength",
    "maxLength",
    "patternProperties",
    "unevaluatedProperties",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "unevaluatedItems",
    "contains",
    "minContains",
    "maxContains",
    "uniqueItems",
    "not",
    "if",
    "then",
    "else",
    "dependentRequired",
    "dependentSchemas",
];

/// `schema` adapted to OpenAI's strict mode (structured outputs): every
/// object gets `additionalProperties: false` and lists all its properties as
/// required, properties that were optional become nullable instead, `oneOf`
/// becomes `anyOf`, a one-member `allOf` is merged into its parent, and
/// keywords and formats strict mode rejects (`minLength`, `uniqueItems`,
/// `default`, schemars' `int64` format, …) are dropped.
///
/// ```
/// use serde_json::json;
///
/// let strict = harness_openai::strict_schema(&json!({
///     "type": "object",
///     "properties": { "city": { "type": "string" }, "days": { "type": "integer", "format": "uint8" } },
///     "required": ["city"]
/// }));
/// assert_eq!(strict, json!({
///     "type": "object",
///     "properties": { "city": { "type": "string" }, "days": { "type": ["integer", "null"] } },
///     "required": ["city", "days"],
///     "additionalProperties": false
/// }));
/// ```
pub fn strict_schema(schema: &Value) -> Value {
    let mut schema = schema.clone();
    make_strict(&mut schema);
    schema
}

fn make_strict(node: &mut Value) {
    let Value::Object(map) = node else {
        return;
    };
    for key in ["$defs", "definitions", "properties"] {
        if let Some(Value::Object(children)) = map.get_mut(key) {
            children.values_mut().for_each(make_strict);
        }
    }
    for key in UNSUPPORTED {
        map.remove(*key);
    }
    if let Some(Value::Array(parts)) = map.get("allOf")
        && parts.len() == 1
        && let Some(Value::Array(mut parts)) = map.remove("allOf")
        && let Some(Value::Object(part)) = parts.pop()
    {
        for (key, value) in part {
            map.entry(key).or_insert(value);
        }
    }
    if let Some(child) = map.get_mut("items") {
        make_strict(child);
    }
    for key in ["anyOf", "oneOf", "allOf", "prefixItems"] {
        if let Some(Value::Array(children)) = map.get_mut(key) {
            children.iter_mut().for_each(make_strict);
        }
    }
    if let Some(one_of) = map.remove("oneOf") {
        match map.get_mut("anyOf") {
            Some(Value::Array(any_of)) => {
                if let Value::Array(more) = one_of {
                    any_of.extend(more);
                }
            }
            _ => {
                map.insert("anyOf".to_owned(), one_of);
            }
        }
    }
    if let Some(Value::String(format)) = map.get("format")
        && !STRICT_FORMATS.contains(&format.as_str())
    {
        map.remove("format");
    }
    if is_object_schema(map) {
        close_object(map);
    }
}

fn is_object_schema(map: &Map<String, Value>) -> bool {
    map.contains_key("properties") || map.get("type") == Some(&Value::String("object".into()))
}

fn close_object(map: &mut Map<String, Value>) {
    let required: Vec<String> = map
        .get("required")
        .and_then(Value::as_array)
        .map(|names| {
            names
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let properties = map
        .entry("properties")
        .or_insert_with(|| Value::Object(Map::new()));
    let mut all = Vec::new();
    if let Value::Object(properties) = properties {
        for (name, schema) in properties.iter_mut() {
            if !required.contains(name) {
                make_nullable(schema);
            }
            all.push(Value::String(name.clone()));
        }
    }
    map.insert("required".to_owned(), Value::Array(all));
    map.insert("additionalProperties".to_owned(), Value::Bool(false));
}

/// Lets `schema` also accept `null`, the strict-mode way to be optional.
fn make_nullable(schema: &mut Value) {
    let Value::Object(map) = schema else {
        return;
    };
    let null = Value::String("null".into());
    match map.get_mut("type") {
        Some(Value::String(kind)) if kind != "null" => {
            let kind = Value::String(std::mem::take(kind));
            map.insert("type".to_owned(), Value::Array(vec![kind, null.clone()]));
            add_null_to_enum(map);
        }
        Some(Value::Array(kinds)) => {
            if !kinds.contains(&null) {
                kinds.push(null);
                add_null_to_enum(map);
            }
        }
        Some(_) => {}
        None => match map.get_mut("anyOf") {
            Some(Value::Array(options)) => {
                let null_option = json!({ "type": "null" });
                if !options.contains(&null_option) {
                    options.push(null_option);
                }
            }
            _ => {
                let description = map.remove("description");
                let inner = Value::Object(std::mem::take(map));
                map.insert(
                    "anyOf".to_owned(),
                    Value::Array(vec![inner, json!({ "type": "null" })]),
                );
                if let Some(description) = description {
                    map.insert("description".to_owned(), description);
                }
            }
        },
    }
}

fn add_null_to_enum(map: &mut Map<String, Value>) {
    if let Some(Value::Array(values)) = map.get_mut("enum")
        && !values.contains(&Value::Null)
    {
        values.push(Value::Null);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_objects_refs_and_enums_are_closed() {
        let schema = json!({
            "type": "object",
            "properties": {
                "unit": { "$ref": "#/$defs/Unit", "description": "Unit" },
                "tags": { "type": "array", "items": { "type": "object", "properties": { "k": { "type": "string" } } } },
                "kind": { "oneOf": [{ "const": "a" }, { "const": "b" }] }
            },
            "$defs": { "Unit": { "type": "string", "enum": ["c", "f"] } }
        });
        let strict = strict_schema(&schema);
        assert_eq!(
            strict["properties"]["unit"],
            json!({ "anyOf": [{ "$ref": "#/$defs/Unit" }, { "type": "null" }], "description": "Unit" })
        );
        assert_eq!(
            strict["properties"]["tags"]["type"],
            json!(["array", "null"])
        );
        let item = &strict["properties"]["tags"]["items"];
        assert_eq!(item["additionalProperties"], json!(false));
        assert_eq!(item["properties"]["k"]["type"], json!(["string", "null"]));
        assert_eq!(
            strict["properties"]["kind"],
            json!({ "anyOf": [{ "const": "a" }, { "const": "b" }, { "type": "null" }] })
        );
        assert_eq!(
            strict["$defs"]["Unit"],
            json!({ "type": "string", "enum": ["c", "f"] })
        );
        let mut required: Vec<_> = strict["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        required.sort_unstable();
        assert_eq!(required, ["kind", "tags", "unit"]);
    }

    #[test]
    fn keywords_strict_mode_rejects_are_dropped_everywhere() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "name": { "type": "string", "minLength": 1, "maxLength": 9, "pattern": "^a" },
                "tags": { "type": "array", "items": { "type": "string", "default": "x" }, "uniqueItems": true, "maxItems": 3 },
                "meta": { "type": "object", "properties": {}, "minProperties": 1, "propertyNames": { "pattern": "^k" } },
                "inner": { "allOf": [{ "$ref": "#/$defs/Inner" }], "description": "Inner" }
            },
            "required": ["name", "tags", "meta", "inner"],
            "$defs": { "Inner": { "type": "object", "properties": { "n": { "type": "integer", "format": "int64", "minimum": 0, "not": { "const": 3 } } }, "required": ["n"] } }
        });
        assert_eq!(
            strict_schema(&schema),
            json!({
                "type": "object",
                "properties": {
                    "name": { "type": "string", "pattern": "^a" },
                    "tags": { "type": "array", "items": { "type": "string" }, "maxItems": 3 },
                    "meta": { "type": "object", "properties": {}, "required": [], "additionalProperties": false },
                    "inner": { "$ref": "#/$defs/Inner", "description": "Inner" }
                },
                "required": ["inner", "meta", "name", "tags"],
                "additionalProperties": false,
                "$defs": { "Inner": { "type": "object", "properties": { "n": { "type": "integer", "minimum": 0 } }, "required": ["n"], "additionalProperties": false } }
            })
        );
    }

    #[test]
    fn nullable_enums_accept_null() {
        let mut schema = json!({ "type": "string", "enum": ["a"] });
        make_nullable(&mut schema);
        assert_eq!(
            schema,
            json!({ "type": ["string", "null"], "enum": ["a", null] })
        );
    }
}
