//! Long-term memory, read-only: its namespaces, the items under one, one
//! item, and a search by meaning when the memory has an index.
//!
//! Namespaces travel in the query string as their labels joined by `/`,
//! each label percent-encoded (`encodeURIComponent`), so that a label may
//! hold a `/` (`a%2Fb` is one label). The empty string is every namespace.
//! Filters are `filter=FIELD:OP:VALUE` (repeatable; `OP` is one of `eq`,
//! `ne`, `gt`, `gte`, `lt`, `lte`; `VALUE` is read as JSON when it reads as
//! JSON, else as a string: `kind:eq:fact`, `weight:gt:5`, `code:eq:"5"`).
//!
//! Values may hold anything a model wrote: they are sent as JSON (never as
//! markup), and one larger than the page's bound (`max_bytes`, as compact
//! JSON) is sent as the beginning of its pretty-printed text, marked
//! `truncated`.

use crate::error::ApiError;
use crate::query::decode;
use crate::server::{Authorized, Shared};
use axum::Json;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use harness::memory::{
    Cmp, Filter, Hit, Item, MAX_VALUE_BYTES, Memory, MemoryError, Namespace, NamespaceQuery, Search,
};
use serde_json::{Value, json};

/// Items sent per page unless asked otherwise, and at most.
const ITEMS_PAGE: (usize, usize) = (20, 100);
/// Namespaces sent per page unless asked otherwise, and at most.
const NAMESPACES_PAGE: (usize, usize) = (200, 1000);
/// Search results sent unless asked otherwise, and at most.
const SEARCH_PAGE: (usize, usize) = (10, 100);
/// The bound of a value in a list (compact JSON bytes) unless asked
/// otherwise, and the most that can be asked: a page of items is at most
/// `ITEMS_PAGE.1 * LIST_VALUE_BYTES.1` of values.
const LIST_VALUE_BYTES: (usize, usize) = (16 * 1024, 64 * 1024);
/// The smallest bound a request may ask for.
const MIN_VALUE_BYTES: usize = 256;

/// The query string's parameters, decoded.
struct Params(Vec<(String, String)>);

impl Params {
    /// Reads `raw`: `name=value` pairs joined by `&`, `+` for a space,
    /// percent-encoded. Only `allowed` names (and `token`) are taken; only
    /// `filter` may come more than once.
    fn parse(raw: Option<&str>, allowed: &[&str]) -> Result<Self, ApiError> {
        let mut pairs: Vec<(String, String)> = Vec::new();
        for part in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (name, value) = part.split_once('=').unwrap_or((part, ""));
            let name = decode(&name.replace('+', " "), "a parameter's name")?;
            let value = decode(&value.replace('+', " "), &format!("parameter `{name}`"))?;
            if name == "token" {
                continue;
            }
            if !allowed.contains(&name.as_str()) {
                return Err(ApiError::BadRequest(format!(
                    "unknown parameter `{name}`: this call takes {}",
                    allowed
                        .iter()
                        .map(|a| format!("`{a}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            if name != "filter" && pairs.iter().any(|(n, _)| *n == name) {
                return Err(ApiError::BadRequest(format!(
                    "parameter `{name}` is given more than once"
                )));
            }
            pairs.push((name, value));
        }
        Ok(Params(pairs))
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// A count: `default` when absent, at most `max`.
    fn count(&self, name: &str, default: usize, max: usize) -> Result<usize, ApiError> {
        let Some(text) = self.get(name) else {
            return Ok(default);
        };
        let n: usize = text.parse().map_err(|_| {
            ApiError::BadRequest(format!(
                "parameter `{name}` is {text:?}: a whole number from 0 is expected"
            ))
        })?;
        if n > max {
            return Err(ApiError::BadRequest(format!(
                "parameter `{name}` is {n}: at most {max}"
            )));
        }
        Ok(n)
    }

    /// A page's size: from 1 to `max`, `default` when absent.
    fn limit(&self, (default, max): (usize, usize)) -> Result<usize, ApiError> {
        let n = self.count("limit", default, max)?;
        if n == 0 {
            return Err(ApiError::BadRequest(
                "parameter `limit` is 0: a page holds at least one".into(),
            ));
        }
        Ok(n)
    }

    /// How many to skip: 0 when absent.
    fn offset(&self) -> Result<usize, ApiError> {
        self.count("offset", 0, usize::MAX)
    }

    /// The bound of each value sent, from [`MIN_VALUE_BYTES`] to `max`.
    fn max_bytes(&self, default: usize, max: usize) -> Result<usize, ApiError> {
        let n = self.count("max_bytes", default, max)?;
        if n < MIN_VALUE_BYTES {
            return Err(ApiError::BadRequest(format!(
                "parameter `max_bytes` is {n}: at least {MIN_VALUE_BYTES}"
            )));
        }
        Ok(n)
    }

    /// The namespace (or prefix) in parameter `name`; the empty prefix when
    /// absent.
    fn namespace(&self, name: &str) -> Result<Namespace, ApiError> {
        namespace(self.get(name).unwrap_or(""), name)
    }

    /// Every `filter=FIELD:OP:VALUE`.
    fn filters(&self) -> Result<Vec<Filter>, ApiError> {
        self.0
            .iter()
            .filter(|(n, _)| n == "filter")
            .map(|(_, v)| filter(v))
            .collect()
    }
}

/// A namespace written as its labels joined by `/`, each percent-encoded;
/// the empty string is the empty prefix.
fn namespace(text: &str, param: &str) -> Result<Namespace, ApiError> {
    if text.is_empty() {
        return Ok(Namespace::root());
    }
    let labels = text
        .split('/')
        .enumerate()
        .map(|(i, label)| decode(label, &format!("parameter `{param}`, label {i}")))
        .collect::<Result<Vec<_>, _>>()?;
    Namespace::prefix(labels).map_err(ApiError::Memory)
}

/// `FIELD:OP:VALUE`.
fn filter(text: &str) -> Result<Filter, ApiError> {
    let bad = |why: &str| {
        ApiError::BadRequest(format!(
            "filter {text:?}: {why}; a filter is FIELD:OP:VALUE with OP one of eq, ne, gt, gte, \
             lt, lte (`kind:eq:fact`, `weight:gt:5`)"
        ))
    };
    let mut parts = text.splitn(3, ':');
    let (Some(field), Some(op), Some(value)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(bad("it has fewer than three parts"));
    };
    let cmp = match op {
        "eq" => Cmp::Eq,
        "ne" => Cmp::Ne,
        "gt" => Cmp::Gt,
        "gte" => Cmp::Gte,
        "lt" => Cmp::Lt,
        "lte" => Cmp::Lte,
        _ => return Err(bad(&format!("`{op}` is not a comparison"))),
    };
    let value = serde_json::from_str::<Value>(value).unwrap_or_else(|_| Value::from(value));
    let filter = Filter::new(field, cmp, value);
    filter.check().map_err(ApiError::Memory)?;
    Ok(filter)
}

/// `text` cut to at most `max` bytes, at a character's boundary.
fn cut(text: &str, max: usize) -> &str {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// An item as the page gets it: its value whole when its compact JSON is
/// at most `max_bytes`, else the beginning of its pretty-printed JSON as
/// text (`preview`), marked `truncated`. `value_bytes` is the whole
/// value's size as compact JSON.
fn item_view(item: &Item, score: Option<f32>, max_bytes: usize) -> Value {
    let compact = item.value.to_string();
    let mut out = json!({
        "namespace": item.namespace,
        "key": item.key,
        "created_at": item.created_at,
        "updated_at": item.updated_at,
        "value_bytes": compact.len(),
    });
    if let Some(at) = item.expires_at {
        out["expires_at"] = json!(at);
    }
    if let Some(score) = score {
        out["score"] = json!(score);
    }
    if compact.len() <= max_bytes {
        out["value"] = item.value.clone();
    } else {
        let pretty = serde_json::to_string_pretty(&item.value).unwrap_or(compact);
        out["truncated"] = json!(true);
        out["preview"] = json!(cut(&pretty, max_bytes));
    }
    out
}

fn memory(app: &Shared) -> Result<&Memory, ApiError> {
    app.memory.as_ref().ok_or(ApiError::NoMemory)
}

/// JSON that a browser must not read as anything else.
fn respond(body: Value) -> Response {
    (
        [(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        )],
        Json(body),
    )
        .into_response()
}

/// A page of items asked for by `items` and `search`: under `namespace`,
/// with `filter`s, `limit` of them after `offset`, each value bound by
/// `max_bytes`.
struct ItemPage {
    prefix: Namespace,
    limit: usize,
    offset: usize,
    max_bytes: usize,
    /// The search, asking for one more than the page, to tell whether
    /// there are more.
    search: Search,
}

impl ItemPage {
    /// The page `params` ask for, of `sizes` (default, most) items, closest
    /// in meaning to `text` if given.
    fn parse(params: &Params, sizes: (usize, usize), text: Option<&str>) -> Result<Self, ApiError> {
        let prefix = params.namespace("namespace")?;
        let limit = params.limit(sizes)?;
        let offset = params.offset()?;
        let max_bytes = params.max_bytes(LIST_VALUE_BYTES.0, LIST_VALUE_BYTES.1)?;
        let mut search = Search::under(prefix.clone())
            .limit(limit + 1)
            .offset(offset);
        if let Some(text) = text {
            search = search.text(text);
        }
        search.filters = params.filters()?;
        Ok(Self {
            prefix,
            limit,
            offset,
            max_bytes,
            search,
        })
    }

    /// The answer: at most `limit` of the hits, and whether there are more.
    fn answer(&self, hits: Vec<Hit>) -> Response {
        let more = hits.len() > self.limit;
        let items: Vec<Value> = hits
            .iter()
            .take(self.limit)
            .map(|h| item_view(&h.item, h.score, self.max_bytes))
            .collect();
        respond(json!({
            "namespace": self.prefix,
            "offset": self.offset,
            "limit": self.limit,
            "more": more,
            "items": items,
        }))
    }
}

/// `GET /api/memory/namespaces?prefix=&suffix=&max_depth=&limit=&offset=`:
/// the namespaces holding live items, sorted, as arrays of labels.
pub(crate) async fn namespaces(
    State(app): State<Shared>,
    _: Authorized,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let memory = memory(&app)?;
    let params = Params::parse(
        raw.as_deref(),
        &["prefix", "suffix", "max_depth", "limit", "offset"],
    )?;
    let limit = params.limit(NAMESPACES_PAGE)?;
    let offset = params.offset()?;
    let max_depth = match params.get("max_depth") {
        None => None,
        Some(_) => match params.count("max_depth", 0, harness::memory::MAX_NAMESPACE_DEPTH)? {
            0 => {
                return Err(ApiError::BadRequest(
                    "parameter `max_depth` is 0: a namespace has at least one label".into(),
                ));
            }
            d => Some(d),
        },
    };
    let prefix = params.namespace("prefix")?;
    let suffix = params.namespace("suffix")?;
    let query = NamespaceQuery {
        prefix: (!prefix.is_root()).then(|| prefix.clone()),
        suffix: (!suffix.is_root()).then_some(suffix),
        max_depth,
        limit: Some(limit + 1),
        offset,
    };
    let mut list = memory
        .list_namespaces(&query)
        .await
        .map_err(ApiError::Memory)?;
    let more = list.len() > limit;
    list.truncate(limit);
    Ok(respond(json!({
        "prefix": prefix,
        "offset": offset,
        "limit": limit,
        "more": more,
        "namespaces": list,
    })))
}

/// `GET /api/memory/items?namespace=&filter=&limit=&offset=&max_bytes=`:
/// the live items under a namespace prefix, in namespace then key order.
pub(crate) async fn items(
    State(app): State<Shared>,
    _: Authorized,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let memory = memory(&app)?;
    let params = Params::parse(
        raw.as_deref(),
        &["namespace", "filter", "limit", "offset", "max_bytes"],
    )?;
    let page = ItemPage::parse(&params, ITEMS_PAGE, None)?;
    let hits = memory
        .search(&page.search)
        .await
        .map_err(ApiError::Memory)?;
    Ok(page.answer(hits))
}

/// `GET /api/memory/search?namespace=&q=&filter=&limit=&offset=&max_bytes=`:
/// the items closest in meaning to `q`, with their scores. A memory
/// without an index answers a `query` error.
pub(crate) async fn search(
    State(app): State<Shared>,
    _: Authorized,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let memory = memory(&app)?;
    let params = Params::parse(
        raw.as_deref(),
        &["namespace", "q", "filter", "limit", "offset", "max_bytes"],
    )?;
    let text = params.get("q").map(str::trim).unwrap_or("");
    if text.is_empty() {
        return Err(ApiError::BadRequest(
            "parameter `q` is missing or empty: a search by meaning needs a text".into(),
        ));
    }
    let page = ItemPage::parse(&params, SEARCH_PAGE, Some(text))?;
    let hits = memory.search(&page.search).await.map_err(|e| match e {
        MemoryError::Query { why } => ApiError::Memory(MemoryError::Query {
            why: format!(
                "{why} (the memory this studio serves has none: list the items, or filter them)"
            ),
        }),
        e => ApiError::Memory(e),
    })?;
    Ok(page.answer(hits))
}

/// `GET /api/memory/item?namespace=&key=&max_bytes=`: one item, its value
/// whole unless `max_bytes` is asked (any stored value is at most
/// [`MAX_VALUE_BYTES`]).
pub(crate) async fn item(
    State(app): State<Shared>,
    _: Authorized,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let memory = memory(&app)?;
    let params = Params::parse(raw.as_deref(), &["namespace", "key", "max_bytes"])?;
    let namespace = params.namespace("namespace")?;
    if namespace.is_root() {
        return Err(ApiError::BadRequest(
            "parameter `namespace` is missing or empty: an item lives in a namespace".into(),
        ));
    }
    let Some(key) = params.get("key") else {
        return Err(ApiError::BadRequest("parameter `key` is missing".into()));
    };
    let max_bytes = params.max_bytes(MAX_VALUE_BYTES, MAX_VALUE_BYTES)?;
    match memory
        .get(&namespace, key)
        .await
        .map_err(ApiError::Memory)?
    {
        Some(item) => Ok(respond(item_view(&item, None, max_bytes))),
        None => Err(ApiError::NoItem {
            namespace: namespace.to_string(),
            key: key.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(e: ApiError) -> String {
        e.to_string()
    }

    #[test]
    fn namespaces_read_labels_joined_by_slashes_each_percent_encoded() {
        assert_eq!(namespace("", "n").unwrap(), Namespace::root());
        assert_eq!(
            namespace("users/u-17", "n").unwrap().labels(),
            ["users", "u-17"]
        );
        assert_eq!(
            namespace("a%2Fb/c%20d", "n").unwrap().labels(),
            ["a/b", "c d"]
        );
        for bad in ["a//b", "/a", "a/", "a/%zz", "a/%4", "%ff"] {
            assert!(namespace(bad, "n").is_err(), "{bad}");
        }
        assert!(message(namespace("a/%zz", "namespace").unwrap_err()).contains("label 1"));
        assert!(message(namespace("a//b", "namespace").unwrap_err()).contains("label 1 is empty"));
    }

    #[test]
    fn filters_read_field_op_value_with_json_values() {
        let f = filter("weight:gt:5").unwrap();
        assert_eq!(
            (f.field.as_str(), f.cmp, f.value),
            ("weight", Cmp::Gt, json!(5))
        );
        assert_eq!(filter("kind:eq:fact").unwrap().value, json!("fact"));
        assert_eq!(filter("code:eq:\"5\"").unwrap().value, json!("5"));
        assert_eq!(filter("url:eq:http://x").unwrap().value, json!("http://x"));
        for (bad, says) in [
            ("weight", "fewer than three"),
            ("weight:gt", "fewer than three"),
            ("weight:like:5", "not a comparison"),
            (":eq:5", "empty segment"),
            ("a..b:eq:5", "empty segment"),
            ("tags:gt:[1]", "numbers or strings"),
        ] {
            let e = message(filter(bad).unwrap_err());
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn parameters_are_decoded_known_and_given_once() {
        let p = Params::parse(
            Some("namespace=a%2Fb&q=two+words&filter=x:eq:1&filter=y:eq:2&token=t"),
            &["namespace", "q", "filter"],
        )
        .unwrap();
        assert_eq!(p.get("namespace"), Some("a/b"));
        assert_eq!(p.get("q"), Some("two words"));
        assert_eq!(p.filters().unwrap().len(), 2);
        for (raw, says) in [
            ("limt=3", "unknown parameter `limt`"),
            ("q=a&q=b", "more than once"),
            ("q=%e2%28", "not UTF-8"),
        ] {
            let e = Params::parse(Some(raw), &["q"]).err().map(message);
            assert!(
                e.as_deref().is_some_and(|e| e.contains(says)),
                "{raw}: {e:?}"
            );
        }
        let p = Params::parse(
            Some("limit=0&offset=x&max_bytes=3"),
            &["limit", "offset", "max_bytes"],
        )
        .unwrap();
        assert!(message(p.limit((10, 100)).unwrap_err()).contains("at least one"));
        assert!(message(p.count("offset", 0, 9).unwrap_err()).contains("whole number"));
        assert!(message(p.max_bytes(1024, 4096).unwrap_err()).contains("at least 256"));
        let p = Params::parse(Some("limit=101"), &["limit"]).unwrap();
        assert!(message(p.limit((10, 100)).unwrap_err()).contains("at most 100"));
    }

    #[test]
    fn a_large_value_is_cut_at_a_character_and_marked() {
        let item = Item {
            namespace: Namespace::new(["n"]).unwrap(),
            key: "k".into(),
            value: json!({"text": "é".repeat(2000)}),
            created_at: 1,
            updated_at: 2,
            expires_at: Some(3),
        };
        let whole = item_view(&item, None, MAX_VALUE_BYTES);
        assert_eq!(whole["value"], item.value);
        assert!(whole.get("truncated").is_none());
        let cut = item_view(&item, Some(0.5), 1001);
        assert_eq!(cut["truncated"], json!(true));
        assert!(cut.get("value").is_none());
        let preview = cut["preview"].as_str().unwrap();
        assert!(
            preview.len() <= 1001 && preview.len() >= 999,
            "{}",
            preview.len()
        );
        assert!(preview.starts_with("{\n  \"text\": \"éé"));
        assert_eq!(cut["value_bytes"], json!(item.value.to_string().len()));
        assert_eq!(cut["expires_at"], json!(3));
        assert_eq!(cut["score"], json!(0.5));
    }
}
