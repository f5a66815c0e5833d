//! What long-term memory holds and how it is asked: namespaces, items,
//! filters, queries, and what can be wrong with them.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::cmp::Ordering;
use std::fmt;
use std::time::Duration;

/// The most labels a namespace has.
pub const MAX_NAMESPACE_DEPTH: usize = 16;
/// The longest label of a namespace, in bytes.
pub const MAX_LABEL_BYTES: usize = 256;
/// The longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;
/// The largest value, as compact JSON, in bytes: 1 MiB.
pub const MAX_VALUE_BYTES: usize = 1024 * 1024;
/// The deepest a value nests (objects and arrays in one another, the value
/// itself at depth 1): a stored record holds it a few levels down, and
/// JSON readers stop at 128, so a deeper value could be written and never
/// read back.
pub const MAX_VALUE_DEPTH: usize = 100;

/// What is wrong with a request to long-term memory, or what failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum MemoryError {
    /// A namespace that cannot be used.
    #[error("the namespace {namespace:?} cannot be used: {why}")]
    Namespace {
        /// The namespace's labels as given.
        namespace: Vec<String>,
        /// What is wrong.
        why: String,
    },
    /// A key that cannot be used.
    #[error("the key {key:?} in {namespace} cannot be used: {why}")]
    Key {
        /// The namespace.
        namespace: String,
        /// The key as given.
        key: String,
        /// What is wrong.
        why: String,
    },
    /// A value that cannot be stored.
    #[error("the value of {namespace}/{key} cannot be stored: {why}")]
    Value {
        /// The namespace.
        namespace: String,
        /// The key.
        key: String,
        /// What is wrong (not an object, too large, ...).
        why: String,
    },
    /// A filter that cannot be applied.
    #[error("the filter on {field:?} cannot be applied: {why}")]
    Filter {
        /// The field path.
        field: String,
        /// What is wrong.
        why: String,
    },
    /// A query that cannot be run.
    #[error("the search cannot be run: {why}")]
    Query {
        /// What is wrong.
        why: String,
    },
    /// The embedder failed, timed out or answered wrongly; nothing of the
    /// request was written.
    #[error("the embedder failed for {what}: {why}")]
    Embedding {
        /// What was being embedded and what became of the request ("3
        /// items; nothing was written", "the query").
        what: String,
        /// Why.
        why: String,
    },
    /// A stored record that cannot be read.
    #[error("the stored item {namespace}/{key} cannot be read: {why}")]
    Corrupt {
        /// The namespace.
        namespace: String,
        /// The key.
        key: String,
        /// What is wrong.
        why: String,
    },
    /// The backend failed.
    #[error("the memory store failed: {0}")]
    Backend(String),
    /// The path given to open a memory holds something else: another
    /// program's database, another kind of store, a project's files.
    /// Nothing was written there.
    #[error("{} is not a harness memory: {found}", path.display())]
    NotAStore {
        /// The path given.
        path: std::path::PathBuf,
        /// What the path holds, and what to do.
        found: String,
    },
    /// The memory's files are damaged: a log holds bytes other than those
    /// it wrote before its last records. The memory was not opened, and
    /// nothing was changed: opening it would have lost what follows the
    /// damage (`what` says what to do).
    #[error(
        "the memory {} is damaged: {}{}: {what}",
        store.display(),
        file.display(),
        offset.map(|o| format!(" at offset {o}")).unwrap_or_default()
    )]
    Damaged {
        /// The memory's directory.
        store: std::path::PathBuf,
        /// The damaged file.
        file: std::path::PathBuf,
        /// The first byte of `file` found damaged, when known.
        offset: Option<u64>,
        /// What is wrong, and what to do.
        what: String,
    },
}

impl MemoryError {
    /// A [`MemoryError::Backend`] with `message`.
    pub fn backend(message: impl fmt::Display) -> Self {
        Self::Backend(crate::secrets::redact(&message.to_string()).into_owned())
    }
}

/// Where items live: a path of labels, like a directory (`["users",
/// "u-17", "preferences"]`). Labels are non-empty, at most
/// [`MAX_LABEL_BYTES`] bytes, without control characters; at most
/// [`MAX_NAMESPACE_DEPTH`] of them. A search or a listing takes a prefix,
/// which may be empty (everything).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "Vec<String>", into = "Vec<String>")]
pub struct Namespace(Vec<String>);

impl Namespace {
    /// A namespace of `labels`, checked; at least one label.
    ///
    /// ```
    /// use harness::memory::Namespace;
    ///
    /// let ns = Namespace::new(["users", "u-17"])?;
    /// assert_eq!(ns.to_string(), "users/u-17");
    /// assert!(Namespace::new(Vec::<String>::new()).is_err());
    /// assert!(Namespace::new(["users", ""]).is_err());
    /// # Ok::<(), harness::memory::MemoryError>(())
    /// ```
    pub fn new<I, S>(labels: I) -> Result<Self, MemoryError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let ns = Self::prefix(labels)?;
        if ns.0.is_empty() {
            return Err(MemoryError::Namespace {
                namespace: Vec::new(),
                why: "a namespace has at least one label".into(),
            });
        }
        Ok(ns)
    }

    /// A prefix of namespaces (for a search or a listing): like
    /// [`new`](Self::new), but it may be empty.
    pub fn prefix<I, S>(labels: I) -> Result<Self, MemoryError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let labels: Vec<String> = labels.into_iter().map(Into::into).collect();
        let refuse = |why: String| MemoryError::Namespace {
            namespace: labels.clone(),
            why,
        };
        if labels.len() > MAX_NAMESPACE_DEPTH {
            return Err(refuse(format!(
                "{} labels, at most {MAX_NAMESPACE_DEPTH}",
                labels.len()
            )));
        }
        for (i, label) in labels.iter().enumerate() {
            if label.is_empty() {
                return Err(refuse(format!("label {i} is empty")));
            }
            if label.len() > MAX_LABEL_BYTES {
                return Err(refuse(format!(
                    "label {i} has {} bytes, at most {MAX_LABEL_BYTES}",
                    label.len()
                )));
            }
            if label.chars().any(char::is_control) {
                return Err(refuse(format!("label {i} has a control character")));
            }
        }
        Ok(Self(labels))
    }

    /// The empty prefix: every namespace.
    pub fn root() -> Self {
        Self(Vec::new())
    }

    /// The labels.
    pub fn labels(&self) -> &[String] {
        &self.0
    }

    /// How many labels.
    pub fn depth(&self) -> usize {
        self.0.len()
    }

    /// Whether this is the empty prefix.
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `prefix`'s labels begin this namespace's.
    pub fn starts_with(&self, prefix: &Namespace) -> bool {
        self.0.starts_with(&prefix.0)
    }

    /// Whether `suffix`'s labels end this namespace's.
    pub fn ends_with(&self, suffix: &Namespace) -> bool {
        self.0.ends_with(&suffix.0)
    }

    /// This namespace with `label` added.
    pub fn child(&self, label: impl Into<String>) -> Result<Self, MemoryError> {
        let mut labels = self.0.clone();
        labels.push(label.into());
        Self::new(labels)
    }

    /// The first `depth` labels (all of them if it has fewer).
    pub fn truncated(&self, depth: usize) -> Self {
        Self(self.0.iter().take(depth).cloned().collect())
    }
}

impl TryFrom<Vec<String>> for Namespace {
    type Error = MemoryError;
    fn try_from(labels: Vec<String>) -> Result<Self, MemoryError> {
        Self::prefix(labels)
    }
}

impl From<Namespace> for Vec<String> {
    fn from(ns: Namespace) -> Self {
        ns.0
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join("/"))
    }
}

/// Checks a key: non-empty, at most [`MAX_KEY_BYTES`], no control
/// characters.
pub(crate) fn check_key(namespace: &Namespace, key: &str) -> Result<(), MemoryError> {
    let why = if key.is_empty() {
        Some("it is empty".to_owned())
    } else if key.len() > MAX_KEY_BYTES {
        Some(format!("{} bytes, at most {MAX_KEY_BYTES}", key.len()))
    } else if key.chars().any(char::is_control) {
        Some("it has a control character".to_owned())
    } else {
        None
    };
    match why {
        Some(why) => Err(MemoryError::Key {
            namespace: namespace.to_string(),
            key: key.chars().take(64).collect(),
            why,
        }),
        None => Ok(()),
    }
}

/// Checks a value: a JSON object of at most [`MAX_VALUE_BYTES`], nested
/// at most [`MAX_VALUE_DEPTH`] deep.
pub(crate) fn check_value(
    namespace: &Namespace,
    key: &str,
    value: &Value,
) -> Result<(), MemoryError> {
    let refuse = |why: String| MemoryError::Value {
        namespace: namespace.to_string(),
        key: key.to_owned(),
        why,
    };
    if !value.is_object() {
        return Err(refuse(format!("it is {}, not a JSON object", kind(value))));
    }
    // Before it is serialized, which recurses as deep as the value goes.
    if deeper_than(value, MAX_VALUE_DEPTH) {
        return Err(refuse(format!(
            "it nests deeper than {MAX_VALUE_DEPTH} levels of objects and arrays"
        )));
    }
    let size = serde_json::to_vec(value).map_or(usize::MAX, |v| v.len());
    if size > MAX_VALUE_BYTES {
        return Err(refuse(format!(
            "{size} bytes as JSON, at most {MAX_VALUE_BYTES}"
        )));
    }
    Ok(())
}

/// Whether `value` nests deeper than `limit` levels, walked without
/// recursion (a value built in code can be deeper than the stack).
fn deeper_than(value: &Value, limit: usize) -> bool {
    let mut stack = vec![(value, 1_usize)];
    while let Some((value, depth)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match value {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(fields) => Box::new(fields.values()),
            _ => continue,
        };
        if depth > limit {
            return true;
        }
        stack.extend(children.map(|child| (child, depth + 1)));
    }
    false
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// An item: a JSON object under a namespace and a key, with its times (ms
/// since the Unix epoch).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Item {
    /// Where it lives.
    pub namespace: Namespace,
    /// Its key, unique in the namespace.
    pub key: String,
    /// The value: a JSON object.
    pub value: Value,
    /// When it was first put.
    pub created_at: u64,
    /// When it was last put.
    pub updated_at: u64,
    /// When it expires, if it has a time to live.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
}

/// A search result: the item and, for a search by text, how close it is
/// (cosine similarity, -1 to 1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hit {
    /// The item.
    pub item: Item,
    /// Its similarity to the query text, for a search by text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<f32>,
}

/// Which fields of a value are embedded for search by text.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IndexFields {
    /// The fields the memory's index is configured with. (Not named
    /// `Default`: a public item of that name makes rustc spell the trait
    /// `std::default::Default` in every diagnostic of a user's crate.)
    #[default]
    Configured,
    /// None: the item is not found by text (filters still find it).
    Off,
    /// These field paths (dotted: `"note.text"`).
    Fields(Vec<String>),
}

/// How an item is put: its time to live and what of it is indexed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PutOptions {
    /// It expires this long after it is put (or last read with a refresh).
    pub ttl: Option<Duration>,
    /// What of it is embedded for search by text.
    pub index: IndexFields,
}

impl PutOptions {
    /// With a time to live.
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// With these fields embedded (dotted paths), or none.
    #[must_use]
    pub fn index(mut self, index: IndexFields) -> Self {
        self.index = index;
        self
    }
}

/// A comparison of a filter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cmp {
    /// Equal (any JSON value).
    Eq,
    /// Not equal (any JSON value; a missing field is not equal).
    Ne,
    /// Greater than (numbers with numbers, strings with strings).
    Gt,
    /// Greater than or equal.
    Gte,
    /// Less than.
    Lt,
    /// Less than or equal.
    Lte,
}

/// A condition on one field of an item's value, by a dotted path
/// (`"kind"`, `"meta.score"`).
///
/// Numbers compare by the exact value of their decimal text, on every
/// backend: `1` equals `1.0`, and integers beyond 2^53 (snowflake ids,
/// nanosecond times) keep every digit. Strings order by their bytes. An
/// ordering between a number and a string, or with a field of another
/// type, holds for no item.
///
/// ```
/// use harness::memory::Filter;
/// use serde_json::json;
///
/// let value = json!({"kind": "fact", "meta": {"score": 7}});
/// assert!(Filter::eq("kind", "fact").matches(&value));
/// assert!(Filter::gt("meta.score", 5).matches(&value));
/// assert!(!Filter::lt("meta.score", 5).matches(&value));
/// assert!(!Filter::eq("missing", "x").matches(&value));
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Filter {
    /// The dotted path of the field.
    pub field: String,
    /// The comparison.
    pub cmp: Cmp,
    /// The value compared with.
    pub value: Value,
}

impl Filter {
    /// A filter `field cmp value`.
    pub fn new(field: impl Into<String>, cmp: Cmp, value: impl Into<Value>) -> Self {
        Self {
            field: field.into(),
            cmp,
            value: value.into(),
        }
    }

    /// `field == value`.
    pub fn eq(field: impl Into<String>, value: impl Into<Value>) -> Self {
        Self::new(field, Cmp::Eq, value)
    }

    /// `field != value`.
    pub fn ne(field: impl Into<String>, value: impl Into<Value>) -> Self {
        Self::new(field, Cmp::Ne, value)
    }

    /// `field > value`.
    pub fn gt(field: impl Into<String>, value: impl Into<Value>) -> Self {
        Self::new(field, Cmp::Gt, value)
    }

    /// `field >= value`.
    pub fn gte(field: impl Into<String>, value: impl Into<Value>) -> Self {
        Self::new(field, Cmp::Gte, value)
    }

    /// `field < value`.
    pub fn lt(field: impl Into<String>, value: impl Into<Value>) -> Self {
        Self::new(field, Cmp::Lt, value)
    }

    /// `field <= value`.
    pub fn lte(field: impl Into<String>, value: impl Into<Value>) -> Self {
        Self::new(field, Cmp::Lte, value)
    }

    /// Refuses an empty path or segment, and an ordering on something other
    /// than a number or a string.
    pub fn check(&self) -> Result<(), MemoryError> {
        let refuse = |why: &str| MemoryError::Filter {
            field: self.field.clone(),
            why: why.to_owned(),
        };
        if self.field.is_empty() || self.field.split('.').any(str::is_empty) {
            return Err(refuse("the path has an empty segment"));
        }
        let ordered = matches!(self.cmp, Cmp::Gt | Cmp::Gte | Cmp::Lt | Cmp::Lte);
        if ordered && !(self.value.is_number() || self.value.is_string()) {
            return Err(refuse("an ordering compares numbers or strings only"));
        }
        Ok(())
    }

    /// Whether `value` (an item's value) meets this filter. A field that is
    /// not there meets no filter, `Ne` included.
    pub fn matches(&self, value: &Value) -> bool {
        let Some(field) = lookup(value, &self.field) else {
            return false;
        };
        match self.cmp {
            Cmp::Eq => json_eq(field, &self.value),
            Cmp::Ne => !json_eq(field, &self.value),
            cmp => match order(field, &self.value) {
                None => false,
                Some(o) => match cmp {
                    Cmp::Gt => o == Ordering::Greater,
                    Cmp::Gte => o != Ordering::Less,
                    Cmp::Lt => o == Ordering::Less,
                    Cmp::Lte => o != Ordering::Greater,
                    Cmp::Eq | Cmp::Ne => false,
                },
            },
        }
    }
}

/// The field at dotted `path` in `value`.
pub fn lookup<'v>(value: &'v Value, path: &str) -> Option<&'v Value> {
    path.split('.').try_fold(value, |v, segment| v.get(segment))
}

/// Equality where numbers compare by value (`1` equals `1.0`).
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => compare_numbers(x, y) == Ordering::Equal,
        _ => a == b,
    }
}

fn order(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => Some(compare_numbers(x, y)),
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

/// Two JSON numbers compared by the exact value of their decimal text (as
/// PostgreSQL's `numeric` compares them): `1` equals `1.0`, and integers
/// beyond 2^53 (ids, nanosecond times) keep every digit, where a
/// comparison as `f64` would take `9007199254740993` for
/// `9007199254740992`.
pub(crate) fn compare_numbers(a: &serde_json::Number, b: &serde_json::Number) -> Ordering {
    let int = |n: &serde_json::Number| {
        n.as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
    };
    if let (Some(x), Some(y)) = (int(a), int(b)) {
        return x.cmp(&y);
    }
    // Two floats: their shortest texts (what JSON holds) are ordered as
    // the floats are. serde_json holds no NaN.
    if let (true, true, Some(x), Some(y)) = (a.is_f64(), b.is_f64(), a.as_f64(), b.as_f64())
        && let Some(o) = x.partial_cmp(&y)
    {
        return o;
    }
    Decimal::parse(&a.to_string()).cmp(&Decimal::parse(&b.to_string()))
}

/// A decimal number's exact value: `0.d1d2d3… × 10^exponent`, with no
/// leading or trailing zero digit (zero has no digits and no sign).
#[derive(PartialEq, Eq)]
struct Decimal {
    negative: bool,
    digits: Vec<u8>,
    exponent: i64,
}

impl Decimal {
    /// The value of a JSON number's text (`-12.5e-3`); a text that is not
    /// one reads as zero (serde_json writes only numbers).
    fn parse(text: &str) -> Self {
        let (negative, text) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let (mantissa, exp) = match text.find(['e', 'E']) {
            Some(i) => (&text[..i], text[i + 1..].parse::<i64>().unwrap_or(0)),
            None => (text, 0),
        };
        let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let all: Vec<u8> = whole.bytes().chain(fraction.bytes()).collect();
        let Some(first) = all.iter().position(|d| *d != b'0') else {
            return Self {
                negative: false,
                digits: Vec::new(),
                exponent: 0,
            };
        };
        let last = all.iter().rposition(|d| *d != b'0').unwrap_or(first);
        let whole_len = i64::try_from(whole.len()).unwrap_or(i64::MAX);
        let first_at = i64::try_from(first).unwrap_or(i64::MAX);
        Self {
            negative,
            digits: all[first..=last].to_vec(),
            exponent: exp.saturating_add(whole_len).saturating_sub(first_at),
        }
    }

    fn magnitude(&self, other: &Self) -> Ordering {
        match (self.digits.is_empty(), other.digits.is_empty()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Less,
            (false, true) => Ordering::Greater,
            (false, false) => self
                .exponent
                .cmp(&other.exponent)
                .then_with(|| self.digits.cmp(&other.digits)),
        }
    }
}

impl Ord for Decimal {
    fn cmp(&self, other: &Self) -> Ordering {
        let sign = |d: &Self| match (d.digits.is_empty(), d.negative) {
            (true, _) => 0,
            (false, true) => -1,
            (false, false) => 1,
        };
        match sign(self).cmp(&sign(other)) {
            Ordering::Equal if sign(self) < 0 => other.magnitude(self),
            Ordering::Equal => self.magnitude(other),
            unequal => unequal,
        }
    }
}

impl PartialOrd for Decimal {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A search: items under a namespace prefix, meeting every filter, ranked
/// by closeness to a text when there is one (else in namespace and key
/// order), a page of them.
#[derive(Clone, Debug, PartialEq)]
pub struct Search {
    /// The namespace prefix (empty: everything).
    pub prefix: Namespace,
    /// Conditions every result meets.
    pub filters: Vec<Filter>,
    /// Rank by closeness to this text (needs an index).
    pub text: Option<String>,
    /// At most this many results.
    pub limit: usize,
    /// After skipping this many.
    pub offset: usize,
    /// Whether the results' times to live start again.
    pub refresh_ttl: bool,
}

impl Search {
    /// Everything under `prefix`: the first 10, no filter, no text.
    pub fn under(prefix: Namespace) -> Self {
        Self {
            prefix,
            filters: Vec::new(),
            text: None,
            limit: 10,
            offset: 0,
            refresh_ttl: false,
        }
    }

    /// With a filter.
    #[must_use]
    pub fn filter(mut self, filter: Filter) -> Self {
        self.filters.push(filter);
        self
    }

    /// Ranked by closeness to `text`.
    #[must_use]
    pub fn text(mut self, text: impl Into<String>) -> Self {
        self.text = Some(text.into());
        self
    }

    /// At most `limit` results.
    #[must_use]
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    /// Skipping the first `offset`.
    #[must_use]
    pub fn offset(mut self, offset: usize) -> Self {
        self.offset = offset;
        self
    }

    /// Starting the results' times to live again.
    #[must_use]
    pub fn refresh_ttl(mut self) -> Self {
        self.refresh_ttl = true;
        self
    }

    /// Whether `item` is under the prefix and meets every filter.
    pub fn admits(&self, item: &Item) -> bool {
        item.namespace.starts_with(&self.prefix)
            && self.filters.iter().all(|f| f.matches(&item.value))
    }
}

/// A listing of namespaces: those under `prefix`, ending with `suffix`,
/// cut to `max_depth` labels (and then distinct), sorted, a page of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamespaceQuery {
    /// Only namespaces beginning with these labels.
    pub prefix: Option<Namespace>,
    /// Only namespaces ending with these labels.
    pub suffix: Option<Namespace>,
    /// Namespaces cut to this many labels.
    pub max_depth: Option<usize>,
    /// At most this many (default: all).
    pub limit: Option<usize>,
    /// After skipping this many.
    pub offset: usize,
}

impl NamespaceQuery {
    /// Every namespace.
    pub fn all() -> Self {
        Self::default()
    }

    /// Applies the query to every namespace that holds a live item.
    pub fn apply(&self, namespaces: impl IntoIterator<Item = Namespace>) -> Vec<Namespace> {
        let mut out: Vec<Namespace> = namespaces
            .into_iter()
            .filter(|ns| self.prefix.as_ref().is_none_or(|p| ns.starts_with(p)))
            .filter(|ns| self.suffix.as_ref().is_none_or(|s| ns.ends_with(s)))
            .map(|ns| match self.max_depth {
                Some(depth) => ns.truncated(depth),
                None => ns,
            })
            .collect();
        out.sort();
        out.dedup();
        out.into_iter()
            .skip(self.offset)
            .take(self.limit.unwrap_or(usize::MAX))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use crate::memory::types::compare_numbers;
    use serde_json::{Number, json};
    use std::cmp::Ordering::{self, Equal, Greater, Less};

    fn cmp(a: serde_json::Value, b: serde_json::Value) -> Ordering {
        let (serde_json::Value::Number(a), serde_json::Value::Number(b)) = (a, b) else {
            panic!("numbers only")
        };
        compare_numbers(&a, &b)
    }

    /// Each case compared both ways round.
    fn both_ways(cases: &[(serde_json::Value, serde_json::Value, Ordering)]) {
        for (a, b, expected) in cases {
            assert_eq!(cmp(a.clone(), b.clone()), *expected, "{a} against {b}");
            assert_eq!(
                cmp(b.clone(), a.clone()),
                expected.reverse(),
                "{b} against {a}"
            );
        }
    }

    #[test]
    fn integers_beyond_2_53_keep_every_digit() {
        let cases = [
            (
                json!(9_007_199_254_740_993_u64),
                json!(9_007_199_254_740_992_u64),
                Greater,
            ),
            (
                json!(9_007_199_254_740_993_u64),
                json!(9_007_199_254_740_993_i64),
                Equal,
            ),
            (json!(u64::MAX), json!(u64::MAX - 1), Greater),
            (json!(i64::MIN), json!(i64::MIN + 1), Less),
            (json!(-1), json!(u64::MAX), Less),
            // An integer against a float: the float's exact decimal text.
            (
                json!(9_007_199_254_740_993_u64),
                json!(9_007_199_254_740_992.0),
                Greater,
            ),
            (
                json!(1_152_921_504_606_846_976_u64),
                json!(1_152_921_504_606_846_976.0),
                Less,
            ),
        ];
        both_ways(&cases);
    }

    #[test]
    fn numbers_compare_by_value_across_kinds() {
        let cases = [
            (json!(1), json!(1.0), Equal),
            (json!(0), json!(-0.0), Equal),
            (json!(-0.0), json!(0.0), Equal),
            (json!(2), json!(1.5), Greater),
            (json!(-2), json!(-1.5), Less),
            (json!(0.1), json!(0.10000000000000002), Less),
            (json!(1e20), json!(u64::MAX), Greater),
            (json!(-1e20), json!(i64::MIN), Less),
            (json!(1.5e-300), json!(0), Greater),
            (json!(-1.5e-300), json!(0), Less),
            (json!(100), json!(1e2), Equal),
            (json!(120), json!(1.2e2), Equal),
            (json!(5), json!(0.5e1), Equal),
        ];
        both_ways(&cases);
    }

    /// Against the floats' own order, wherever a float is exact.
    #[test]
    fn small_values_order_as_floats_do() {
        let values: Vec<Number> = [-1000.5, -3.0, -0.25, 0.0, 0.125, 1.0, 2.5, 7.0, 1e6]
            .iter()
            .map(|f| Number::from_f64(*f).unwrap())
            .chain([-1000_i64, -3, 0, 1, 7, 1_000_000].map(Number::from))
            .collect();
        for a in &values {
            for b in &values {
                let expected = a
                    .as_f64()
                    .unwrap()
                    .partial_cmp(&b.as_f64().unwrap())
                    .unwrap();
                assert_eq!(compare_numbers(a, b), expected, "{a} against {b}");
            }
        }
    }
}
