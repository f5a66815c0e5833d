//! A JSON Schema validator for the subset that schemars emits for tool
//! arguments: edited arguments are checked against the tool's schema before
//! the tool runs, and so are the model's own.
//!
//! Supported keywords: `type` (a name or a list), `properties`, `required`,
//! `additionalProperties` (a boolean or a schema), `items`, `prefixItems`,
//! `minItems`, `maxItems`, `enum`, `const`, `minimum`, `maximum`,
//! `exclusiveMinimum`, `exclusiveMaximum`, `minLength`, `maxLength`,
//! `anyOf`, `oneOf`, `allOf`, `not`, and `$ref` into the schema's own
//! `$defs` or `definitions`. Annotations (`description`, `title`,
//! `default`, `format`, `examples`) do not constrain. A keyword outside
//! this list is ignored, so a hand-written schema using one (`pattern`,
//! say) is checked less strictly than it reads: the tool's own argument
//! parsing still refuses what it cannot read.
//!
//! A schema can come from anyone who offers a tool (an MCP server among
//! them), and a small one can describe an exponential amount of work:
//! `{"allOf": [{"$ref": "#"}, {"$ref": "#"}]}` doubles at every level. So a
//! check has a budget: it visits at most [`MAX_STEPS`] schema-and-value
//! pairs and keeps at most [`MAX_VIOLATIONS`] violations; past the budget it
//! stops with [`SchemaError::TooComplex`] instead of running on.

use serde_json::{Map, Value};
use std::fmt;

/// How deep `$ref`s may nest before the schema counts as circular.
const MAX_REF_DEPTH: usize = 64;

/// The most schema-and-value pairs one [`validate`] visits (entries of
/// `enum` and `required` lists count too). Arguments of ten thousand
/// objects of ten fields each stay well within it; a schema that branches
/// exponentially reaches it in a fraction of a second.
pub const MAX_STEPS: usize = 200_000;

/// The most violations one [`validate`] keeps; the others are counted
/// ([`SchemaError::Mismatch::more`]).
pub const MAX_VIOLATIONS: usize = 32;

/// The most entries of an `enum` or of the allowed properties a message
/// lists.
const MAX_LISTED: usize = 20;

/// One way a value does not match a schema: where (a JSON pointer into the
/// value, `""` for the whole value) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaViolation {
    /// JSON pointer to the offending part of the value, e.g. `/command`.
    pub path: String,
    /// What is wrong there.
    pub message: String,
}

impl fmt::Display for SchemaViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = if self.path.is_empty() {
            "/"
        } else {
            &self.path
        };
        write!(f, "at {at}: {}", self.message)
    }
}

/// Why a value was not accepted by [`validate`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SchemaError {
    /// The value does not match the schema.
    Mismatch {
        /// The first [`MAX_VIOLATIONS`] violations found, in order.
        violations: Vec<SchemaViolation>,
        /// How many more were found and not kept.
        more: usize,
    },
    /// The check needed more than [`MAX_STEPS`] steps and was stopped: the
    /// schema branches too much (or the value is too large) to be checked,
    /// so the value is not accepted.
    TooComplex {
        /// The budget that ran out.
        steps: usize,
    },
}

impl SchemaError {
    /// The violations kept (none when the check was stopped).
    pub fn violations(&self) -> &[SchemaViolation] {
        match self {
            Self::Mismatch { violations, .. } => violations,
            Self::TooComplex { .. } => &[],
        }
    }
}

impl fmt::Display for SchemaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Mismatch { violations, more } => {
                f.write_str(&describe(violations))?;
                if *more > 0 {
                    write!(f, "; and {more} more")?;
                }
                Ok(())
            }
            Self::TooComplex { steps } => write!(
                f,
                "the schema is too complex to check a value against (more than {steps} steps)"
            ),
        }
    }
}

impl std::error::Error for SchemaError {}

/// Checks `value` against `schema`: the violations found (the first
/// [`MAX_VIOLATIONS`]), or [`SchemaError::TooComplex`] when the check
/// needs more than [`MAX_STEPS`] steps.
///
/// ```
/// use harness_kit::schema::validate;
/// use serde_json::json;
///
/// let schema = json!({
///     "type": "object",
///     "properties": { "command": { "type": "string" } },
///     "required": ["command"],
/// });
/// assert!(validate(&schema, &json!({ "command": "ls" })).is_ok());
/// let error = validate(&schema, &json!({ "command": 7 })).unwrap_err();
/// assert_eq!(error.to_string(), "at /command: expected a string, found the number 7");
/// ```
pub fn validate(schema: &Value, value: &Value) -> Result<(), SchemaError> {
    let mut checker = Checker {
        root: schema,
        errors: Vec::new(),
        more: 0,
        steps: 0,
    };
    checker.check(schema, value, &mut String::new(), 0);
    if checker.steps > MAX_STEPS {
        Err(SchemaError::TooComplex { steps: MAX_STEPS })
    } else if checker.errors.is_empty() && checker.more == 0 {
        Ok(())
    } else {
        Err(SchemaError::Mismatch {
            violations: checker.errors,
            more: checker.more,
        })
    }
}

/// The violations joined into one sentence, for a message to a model or a
/// person.
pub fn describe(violations: &[SchemaViolation]) -> String {
    violations
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

struct Checker<'s> {
    root: &'s Value,
    /// At most [`MAX_VIOLATIONS`].
    errors: Vec<SchemaViolation>,
    /// Violations found past [`MAX_VIOLATIONS`].
    more: usize,
    /// Work done, shared by every probe of the check; once past
    /// [`MAX_STEPS`] every check returns at once.
    steps: usize,
}

/// `items` as a comma-separated list of at most [`MAX_LISTED`], saying how
/// many there are in all when cut.
fn listing<'a>(items: impl ExactSizeIterator<Item = String> + 'a) -> String {
    let total = items.len();
    let mut list = items.take(MAX_LISTED).collect::<Vec<_>>().join(", ");
    if total > MAX_LISTED {
        list.push_str(&format!(", … ({total} in all)"));
    }
    list
}

fn kind(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) if s.chars().count() > 40 => {
            let head: String = s.chars().take(40).collect();
            format!("the string {head:?}…")
        }
        Value::String(s) => format!("the string {s:?}"),
        Value::Array(a) => format!("an array of {} items", a.len()),
        Value::Object(_) => "an object".into(),
    }
}

fn type_matches(name: &str, value: &Value) -> bool {
    match name {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "number" => value.is_number(),
        "integer" => value.is_i64() || value.is_u64(),
        _ => true,
    }
}

fn article(name: &str) -> String {
    match name {
        "object" | "array" | "integer" => format!("an {name}"),
        "null" => "null".into(),
        other => format!("a {other}"),
    }
}

/// Escapes a property name for a JSON pointer (RFC 6901).
fn pointer_token(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

impl<'s> Checker<'s> {
    fn fail(&mut self, path: &str, message: String) {
        if self.errors.len() < MAX_VIOLATIONS {
            self.errors.push(SchemaViolation {
                path: path.to_owned(),
                message,
            });
        } else {
            self.more += 1;
        }
    }

    /// Counts `n` steps of work; false once the budget is spent.
    fn spend(&mut self, n: usize) -> bool {
        self.steps = self.steps.saturating_add(n);
        self.steps <= MAX_STEPS
    }

    fn exhausted(&self) -> bool {
        self.steps > MAX_STEPS
    }

    /// Whether `value` matches `schema`, without reporting. The probe
    /// spends from the same budget as the check it is part of, so that
    /// nested `anyOf`s cannot multiply the work unseen.
    fn matches(&mut self, schema: &'s Value, value: &Value, depth: usize) -> bool {
        let (errors, more) = (self.errors.len(), self.more);
        self.check(schema, value, &mut String::new(), depth);
        let matched = self.errors.len() == errors && self.more == more;
        self.errors.truncate(errors);
        self.more = more;
        // A stopped check matched nothing: the caller's verdict no longer
        // counts (the whole validation fails as too complex).
        matched && !self.exhausted()
    }

    fn resolve(&mut self, reference: &str, path: &str) -> Option<&'s Value> {
        let target = reference.strip_prefix('#').and_then(|pointer| {
            if pointer.is_empty() {
                Some(self.root)
            } else {
                self.root.pointer(pointer)
            }
        });
        if target.is_none() {
            self.fail(
                path,
                format!("the schema refers to {reference:?}, which it does not define"),
            );
        }
        target
    }

    fn check(&mut self, schema: &'s Value, value: &Value, path: &mut String, depth: usize) {
        if !self.spend(1) {
            return;
        }
        let map = match schema {
            Value::Bool(true) => return,
            Value::Bool(false) => {
                self.fail(path, "no value is allowed here".into());
                return;
            }
            Value::Object(map) => map,
            _ => return,
        };
        if let Some(Value::String(reference)) = map.get("$ref") {
            if depth >= MAX_REF_DEPTH {
                self.fail(
                    path,
                    format!("the schema's references nest deeper than {MAX_REF_DEPTH} levels"),
                );
                return;
            }
            if let Some(target) = self.resolve(reference, path) {
                self.check(target, value, path, depth + 1);
            }
        }
        if !self.check_type(map, value, path) {
            // The other keywords would only repeat the type error.
            return;
        }
        self.check_values(map, value, path);
        self.check_combinators(map, value, path, depth);
        match value {
            Value::Object(object) => self.check_object(map, object, path, depth),
            Value::Array(items) => self.check_array(map, items, path, depth),
            Value::String(text) => self.check_string(map, text, path),
            Value::Number(_) => self.check_number(map, value, path),
            _ => {}
        }
    }

    fn check_type(&mut self, map: &Map<String, Value>, value: &Value, path: &str) -> bool {
        let names: Vec<&str> = match map.get("type") {
            Some(Value::String(name)) => vec![name],
            Some(Value::Array(names)) => names.iter().filter_map(Value::as_str).collect(),
            _ => return true,
        };
        if names.iter().any(|name| type_matches(name, value)) {
            return true;
        }
        let expected = names
            .iter()
            .map(|n| article(n))
            .collect::<Vec<_>>()
            .join(" or ");
        self.fail(path, format!("expected {expected}, found {}", kind(value)));
        false
    }

    fn check_values(&mut self, map: &Map<String, Value>, value: &Value, path: &str) {
        if let Some(Value::Array(allowed)) = map.get("enum")
            && self.spend(allowed.len())
            && !allowed.contains(value)
        {
            let list = listing(allowed.iter().map(Value::to_string));
            self.fail(
                path,
                format!("expected one of {list}, found {}", kind(value)),
            );
        }
        if let Some(expected) = map.get("const")
            && expected != value
        {
            self.fail(path, format!("expected {expected}, found {}", kind(value)));
        }
    }

    fn check_combinators(
        &mut self,
        map: &'s Map<String, Value>,
        value: &Value,
        path: &mut String,
        depth: usize,
    ) {
        if let Some(Value::Array(all)) = map.get("allOf") {
            for schema in all {
                self.check(schema, value, path, depth + 1);
            }
        }
        if let Some(Value::Array(any)) = map.get("anyOf")
            && !any.iter().any(|s| self.matches(s, value, depth + 1))
            && !self.exhausted()
        {
            self.fail_alternatives(any, value, path, depth, "none of the allowed forms");
        }
        if let Some(Value::Array(one)) = map.get("oneOf") {
            let matching = one
                .iter()
                .filter(|s| self.matches(s, value, depth + 1))
                .count();
            if self.exhausted() {
                return;
            }
            match matching {
                1 => {}
                0 => self.fail_alternatives(one, value, path, depth, "none of the forms"),
                n => self.fail(
                    path,
                    format!("matches {n} of the forms where exactly one is allowed"),
                ),
            }
        }
        if let Some(not) = map.get("not")
            && self.matches(not, value, depth + 1)
        {
            self.fail(path, "matches a form that is not allowed".into());
        }
    }

    /// Reports a value that matches no alternative: with one alternative
    /// close enough to be meant (its type fits), that one's errors.
    fn fail_alternatives(
        &mut self,
        alternatives: &'s [Value],
        value: &Value,
        path: &mut String,
        depth: usize,
        what: &str,
    ) {
        let typed: Vec<&'s Value> = alternatives
            .iter()
            .filter(|s| {
                let mut probe = Checker {
                    root: self.root,
                    errors: Vec::new(),
                    more: 0,
                    steps: 0,
                };
                let map = match s {
                    Value::Object(map) => map,
                    _ => return false,
                };
                probe.check_type(map, value, "")
            })
            .collect();
        if let [only] = typed.as_slice() {
            self.check(only, value, path, depth + 1);
        } else {
            self.fail(path, format!("{} matches {what}", kind(value)));
        }
    }

    fn check_object(
        &mut self,
        map: &'s Map<String, Value>,
        object: &Map<String, Value>,
        path: &mut String,
        depth: usize,
    ) {
        let properties = map.get("properties").and_then(Value::as_object);
        if let Some(Value::Array(required)) = map.get("required")
            && self.spend(required.len())
        {
            for name in required.iter().filter_map(Value::as_str) {
                if !object.contains_key(name) {
                    self.fail(path, format!("the required property {name:?} is missing"));
                }
            }
        }
        for (name, item) in object {
            if self.exhausted() {
                break;
            }
            let len = path.len();
            path.push('/');
            path.push_str(&pointer_token(name));
            match properties.and_then(|p| p.get(name)) {
                Some(schema) => self.check(schema, item, path, depth + 1),
                None => match map.get("additionalProperties") {
                    Some(Value::Bool(false)) => {
                        let known = properties
                            .map(|p| listing(p.keys().map(|k| format!("{k:?}"))))
                            .unwrap_or_default();
                        self.fail(
                            path,
                            format!("the property {name:?} is not allowed (allowed: {known})"),
                        );
                    }
                    Some(schema @ Value::Object(_)) => self.check(schema, item, path, depth + 1),
                    _ => {}
                },
            }
            path.truncate(len);
        }
    }

    fn check_array(
        &mut self,
        map: &'s Map<String, Value>,
        items: &[Value],
        path: &mut String,
        depth: usize,
    ) {
        if let Some(min) = map.get("minItems").and_then(Value::as_u64)
            && (items.len() as u64) < min
        {
            self.fail(
                path,
                format!("expected at least {min} items, found {}", items.len()),
            );
        }
        if let Some(max) = map.get("maxItems").and_then(Value::as_u64)
            && (items.len() as u64) > max
        {
            self.fail(
                path,
                format!("expected at most {max} items, found {}", items.len()),
            );
        }
        let prefix = map
            .get("prefixItems")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        for (i, item) in items.iter().enumerate() {
            if self.exhausted() {
                break;
            }
            let schema = match prefix.get(i) {
                Some(schema) => Some(schema),
                None => map.get("items"),
            };
            if let Some(schema) = schema {
                let len = path.len();
                path.push('/');
                path.push_str(&i.to_string());
                self.check(schema, item, path, depth + 1);
                path.truncate(len);
            }
        }
    }

    fn check_string(&mut self, map: &Map<String, Value>, text: &str, path: &str) {
        let chars = text.chars().count() as u64;
        if let Some(min) = map.get("minLength").and_then(Value::as_u64)
            && chars < min
        {
            self.fail(
                path,
                format!("expected at least {min} characters, found {chars}"),
            );
        }
        if let Some(max) = map.get("maxLength").and_then(Value::as_u64)
            && chars > max
        {
            self.fail(
                path,
                format!("expected at most {max} characters, found {chars}"),
            );
        }
    }

    fn check_number(&mut self, map: &Map<String, Value>, value: &Value, path: &str) {
        let Some(x) = value.as_f64() else { return };
        let bound = |key: &str| map.get(key).and_then(Value::as_f64);
        if let Some(min) = bound("minimum")
            && x < min
        {
            self.fail(path, format!("expected at least {min}, found {value}"));
        }
        if let Some(max) = bound("maximum")
            && x > max
        {
            self.fail(path, format!("expected at most {max}, found {value}"));
        }
        if let Some(min) = bound("exclusiveMinimum")
            && x <= min
        {
            self.fail(path, format!("expected more than {min}, found {value}"));
        }
        if let Some(max) = bound("exclusiveMaximum")
            && x >= max
        {
            self.fail(path, format!("expected less than {max}, found {value}"));
        }
    }
}
