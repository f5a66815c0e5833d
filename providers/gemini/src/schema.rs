//! Tool schemas reduced to the subset Gemini accepts.

use serde_json::{Map, Value, json};

/// How deep `$ref`s are inlined; deeper (recursive) types become a bare
/// object.
const MAX_REF_DEPTH: usize = 8;

/// Keywords Gemini's `Schema` accepts and that carry over unchanged.
const KEPT: &[&str] = &[
    "description",
    "title",
    "nullable",
    "required",
    "enum",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "minProperties",
    "maxProperties",
    "default",
    "example",
    "propertyOrdering",
];

/// Formats Gemini accepts; others are dropped.
const FORMATS: &[&str] = &["int32", "int64", "float", "double", "date-time", "enum"];

/// `schema` rewritten for Gemini: `$ref`s are inlined from `$defs`, `oneOf`
/// becomes `anyOf`, `"type": ["T", "null"]` becomes `"type": "T"` with
/// `"nullable": true`, a `const` becomes a one-value `enum`, and keywords
/// Gemini rejects (`$schema`, `$defs`, `additionalProperties`, unknown
/// formats, …) are dropped.
///
/// ```
/// use serde_json::json;
///
/// let schema = json!({
///     "$schema": "https://json-schema.org/draft/2020-12/schema",
///     "type": "object",
///     "properties": {
///         "unit": { "$ref": "#/$defs/Unit" },
///         "note": { "type": ["string", "null"] }
///     },
///     "additionalProperties": false,
///     "$defs": { "Unit": { "type": "string", "enum": ["c", "f"] } }
/// });
/// assert_eq!(harness_gemini::gemini_schema(&schema), json!({
///     "type": "object",
///     "properties": {
///         "unit": { "type": "string", "enum": ["c", "f"] },
///         "note": { "type": "string", "nullable": true }
///     }
/// }));
/// ```
pub fn gemini_schema(schema: &Value) -> Value {
    let defs = schema
        .get("$defs")
        .or_else(|| schema.get("definitions"))
        .cloned()
        .unwrap_or(Value::Null);
    convert(schema, &defs, 0)
}

fn convert(node: &Value, defs: &Value, depth: usize) -> Value {
    let Value::Object(map) = node else {
        // `true` (anything) has no Gemini spelling; a bare object is closest.
        return json!({});
    };
    if let Some(Value::String(reference)) = map.get("$ref") {
        let name = reference.rsplit('/').next().unwrap_or_default();
        let mut resolved = match defs.get(name) {
            Some(target) if depth < MAX_REF_DEPTH => convert(target, defs, depth + 1),
            _ => json!({ "type": "object" }),
        };
        if let Value::Object(resolved) = &mut resolved {
            for (key, value) in map {
                if key != "$ref" && KEPT.contains(&key.as_str()) {
                    resolved.insert(key.clone(), value.clone());
                }
            }
        }
        return resolved;
    }
    let mut out = Map::new();
    for (key, value) in map {
        match key.as_str() {
            "type" => set_type(&mut out, value),
            "properties" => {
                if let Value::Object(properties) = value {
                    let converted = properties
                        .iter()
                        .map(|(name, schema)| (name.clone(), convert(schema, defs, depth)))
                        .collect();
                    out.insert(key.clone(), Value::Object(converted));
                }
            }
            "items" => {
                out.insert(key.clone(), convert(value, defs, depth));
            }
            "anyOf" | "oneOf" => {
                if let Value::Array(options) = value {
                    add_options(&mut out, options, defs, depth);
                }
            }
            "allOf" => {
                if let Value::Array(parts) = value {
                    for part in parts {
                        if let Value::Object(part) = convert(part, defs, depth) {
                            out.extend(part);
                        }
                    }
                }
            }
            "const" => {
                out.insert("enum".to_owned(), Value::Array(vec![value.clone()]));
            }
            "format" if value.as_str().is_some_and(|f| FORMATS.contains(&f)) => {
                out.insert(key.clone(), value.clone());
            }
            "format" => {}
            _ if KEPT.contains(&key.as_str()) => {
                out.insert(key.clone(), value.clone());
            }
            _ => {}
        }
    }
    if out.contains_key("enum") && !out.contains_key("type") {
        out.insert("type".to_owned(), json!("string"));
    }
    Value::Object(out)
}

/// Sets `type`, turning a `null` member of a type list into `nullable`.
fn set_type(out: &mut Map<String, Value>, value: &Value) {
    match value {
        Value::Array(kinds) => {
            let mut concrete = kinds.iter().filter(|k| k.as_str() != Some("null"));
            if kinds.iter().any(|k| k.as_str() == Some("null")) {
                out.insert("nullable".to_owned(), Value::Bool(true));
            }
            if let Some(kind) = concrete.next() {
                out.insert("type".to_owned(), kind.clone());
            }
        }
        Value::String(kind) if kind == "null" => {
            out.insert("nullable".to_owned(), Value::Bool(true));
        }
        other => {
            out.insert("type".to_owned(), other.clone());
        }
    }
}

/// `anyOf`/`oneOf`: a `null` option becomes `nullable`; a single remaining
/// option is merged in place.
fn add_options(out: &mut Map<String, Value>, options: &[Value], defs: &Value, depth: usize) {
    let is_null = |o: &Value| o.get("type").and_then(Value::as_str) == Some("null");
    if options.iter().any(is_null) {
        out.insert("nullable".to_owned(), Value::Bool(true));
    }
    let mut converted: Vec<Value> = options
        .iter()
        .filter(|o| !is_null(o))
        .map(|o| convert(o, defs, depth))
        .collect();
    if converted.len() == 1 {
        if let Some(Value::Object(single)) = converted.pop() {
            for (key, value) in single {
                out.entry(key).or_insert(value);
            }
        }
    } else if !converted.is_empty() {
        out.insert("anyOf".to_owned(), Value::Array(converted));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nullable_refs_and_tagged_enums() {
        let schema = json!({
            "type": "object",
            "properties": {
                "unit": { "anyOf": [{ "$ref": "#/$defs/Unit" }, { "type": "null" }], "description": "Unit" },
                "shape": { "oneOf": [
                    { "type": "object", "properties": { "kind": { "const": "circle" }, "r": { "type": "number", "format": "double" } } },
                    { "type": "object", "properties": { "kind": { "const": "square" }, "side": { "type": "integer", "format": "uint32", "minimum": 0 } } }
                ] },
                "tags": { "type": "array", "items": { "type": "string" }, "uniqueItems": true }
            },
            "required": ["shape"],
            "$defs": { "Unit": { "type": "string", "enum": ["c", "f"] } }
        });
        assert_eq!(
            gemini_schema(&schema),
            json!({
                "type": "object",
                "properties": {
                    "unit": { "type": "string", "enum": ["c", "f"], "nullable": true, "description": "Unit" },
                    "shape": { "anyOf": [
                        { "type": "object", "properties": { "kind": { "type": "string", "enum": ["circle"] }, "r": { "type": "number", "format": "double" } } },
                        { "type": "object", "properties": { "kind": { "type": "string", "enum": ["square"] }, "side": { "type": "integer", "minimum": 0 } } }
                    ] },
                    "tags": { "type": "array", "items": { "type": "string" } }
                },
                "required": ["shape"]
            })
        );
    }

    #[test]
    fn recursive_types_stop_at_a_bare_object() {
        let schema = json!({
            "type": "object",
            "properties": { "child": { "$ref": "#/$defs/Node" } },
            "$defs": { "Node": { "type": "object", "properties": { "child": { "$ref": "#/$defs/Node" } } } }
        });
        let mut node = &gemini_schema(&schema);
        for _ in 0..=MAX_REF_DEPTH {
            node = &node["properties"]["child"];
        }
        assert_eq!(node, &json!({ "type": "object" }));
    }
}
