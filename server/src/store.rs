//! The store endpoints: the long-term [`Memory`] of the server's agents, in
//! the shape of the LangGraph store (items under namespaces, found by key,
//! by filters and by meaning).

use crate::app::{Body, QueryPairs, Shared};
use crate::error::ApiError;
use crate::time::iso;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use harness::memory::{
    Cmp, Filter, Hit, IndexFields, Item, Memory, MemoryError, Namespace, NamespaceQuery,
    PutOptions, Search,
};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::time::Duration;

fn memory(app: &Shared) -> Result<&Memory, ApiError> {
    app.memory.as_ref().ok_or_else(|| {
        ApiError::not_found(
            "store",
            "(this server has no long-term memory: give it one with Server::memory(..))",
        )
    })
}

/// A memory error as the client sees it: what it gave wrong is a 422 naming
/// the field; the backend's or the embedder's failure a 500.
fn from_memory(e: MemoryError) -> ApiError {
    let field = match &e {
        MemoryError::Namespace { .. } => "namespace",
        MemoryError::Key { .. } => "key",
        MemoryError::Value { .. } => "value",
        MemoryError::Filter { .. } => "filter",
        MemoryError::Query { .. } => "query",
        _ => return ApiError::Internal(e.to_string()),
    };
    ApiError::unprocessable(field, e.to_string())
}

/// A namespace (or a prefix of one) from its labels; `field` names it in
/// errors. A label holding a `.` is refused, as both LangGraph SDKs refuse
/// it: `GET /store/items?namespace=a.b` splits at dots, so such an item
/// could never be read back.
fn namespace(labels: Vec<String>, field: &str, prefix: bool) -> Result<Namespace, ApiError> {
    if let Some(label) = labels.iter().find(|l| l.contains('.')) {
        return Err(ApiError::unprocessable(
            field,
            format!(
                "the namespace label `{label}` holds a `.`, which separates the labels of a \
                 namespace in `GET /store/items?namespace=a.b`: give labels without dots"
            ),
        ));
    }
    let made = if prefix {
        Namespace::prefix(labels)
    } else {
        Namespace::new(labels)
    };
    made.map_err(|e| ApiError::unprocessable(field, e.to_string()))
}

fn item_json(item: &Item) -> Value {
    json!({
        "namespace": item.namespace.labels(),
        "key": item.key,
        "value": item.value,
        "created_at": iso(item.created_at),
        "updated_at": iso(item.updated_at),
    })
}

fn hit_json(hit: &Hit) -> Value {
    let mut item = item_json(&hit.item);
    item["score"] = json!(hit.score);
    item
}

/// `index`: `false` (not found by text), a list of field paths, or absent
/// (the memory's configured fields).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum IndexSpec {
    Flag(bool),
    Fields(Vec<String>),
}

#[derive(Debug, Deserialize)]
pub(crate) struct PutItem {
    namespace: Vec<String>,
    key: String,
    value: Value,
    index: Option<IndexSpec>,
    /// Minutes, as the LangGraph store counts them.
    ttl: Option<f64>,
}

pub(crate) async fn put(
    State(app): State<Shared>,
    Body(body): Body<PutItem>,
) -> Result<Response, ApiError> {
    let memory = memory(&app)?;
    let ns = namespace(body.namespace, "namespace", false)?;
    let mut options = PutOptions::default();
    match body.index {
        None | Some(IndexSpec::Flag(true)) => {}
        Some(IndexSpec::Flag(false)) => options = options.index(IndexFields::Off),
        Some(IndexSpec::Fields(fields)) => options = options.index(IndexFields::Fields(fields)),
    }
    if let Some(minutes) = body.ttl {
        if !(minutes.is_finite() && minutes > 0.0 && minutes < 1e9) {
            return Err(ApiError::bad(
                "ttl",
                format!(
                    "a time to live is a positive number of minutes below 1e9 (about 1900 \
                     years), not {minutes}"
                ),
            ));
        }
        options = options.ttl(Duration::from_secs_f64(minutes * 60.0));
    }
    memory
        .put_with(&ns, &body.key, body.value, options)
        .await
        .map_err(from_memory)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub(crate) async fn get(
    State(app): State<Shared>,
    query: QueryPairs,
) -> Result<Json<Value>, ApiError> {
    let memory = memory(&app)?;
    // `namespace=a.b` (the LangGraph SDK), or one `namespace=` per label
    // (the Agent Protocol's array).
    let given = query.all("namespace");
    let labels: Vec<String> = match given.as_slice() {
        [one] => one.split('.').map(String::from).collect(),
        many => many.iter().map(|l| l.to_string()).collect(),
    };
    let ns = namespace(labels, "namespace", false)?;
    let Some(key) = query.get("key") else {
        return Err(ApiError::bad("key", "give the item's key"));
    };
    let found = if query.flag("refresh_ttl", false)? {
        memory.get_refreshing(&ns, key).await
    } else {
        memory.get(&ns, key).await
    }
    .map_err(from_memory)?;
    match found {
        Some(item) => Ok(Json(item_json(&item))),
        None => Err(ApiError::not_found("item", format!("{ns}/{key}"))),
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct DeleteItem {
    #[serde(default)]
    namespace: Vec<String>,
    key: String,
}

pub(crate) async fn delete(
    State(app): State<Shared>,
    Body(body): Body<DeleteItem>,
) -> Result<Response, ApiError> {
    let memory = memory(&app)?;
    let ns = namespace(body.namespace, "namespace", false)?;
    memory.delete(&ns, &body.key).await.map_err(from_memory)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Debug, Deserialize)]
pub(crate) struct SearchItems {
    namespace_prefix: Option<Vec<String>>,
    filter: Option<Map<String, Value>>,
    limit: Option<usize>,
    offset: Option<usize>,
    query: Option<String>,
    refresh_ttl: Option<bool>,
}

/// `{"field": value}` (equal) or `{"field": {"$gt": value, ...}}`.
fn filters(given: Map<String, Value>) -> Result<Vec<Filter>, ApiError> {
    let mut out = Vec::new();
    for (field, cond) in given {
        match cond {
            Value::Object(ops) if ops.keys().all(|k| k.starts_with('$')) && !ops.is_empty() => {
                for (op, value) in ops {
                    let cmp = match op.as_str() {
                        "$eq" => Cmp::Eq,
                        "$ne" => Cmp::Ne,
                        "$gt" => Cmp::Gt,
                        "$gte" => Cmp::Gte,
                        "$lt" => Cmp::Lt,
                        "$lte" => Cmp::Lte,
                        other => {
                            return Err(ApiError::syntax(
                                format!("filter.{field}.{other}"),
                                format!("`{other}` is none of $eq, $ne, $gt, $gte, $lt, $lte"),
                            ));
                        }
                    };
                    out.push(Filter::new(field.clone(), cmp, value));
                }
            }
            value => out.push(Filter::eq(field, value)),
        }
    }
    Ok(out)
}

pub(crate) async fn search(
    State(app): State<Shared>,
    Body(body): Body<SearchItems>,
) -> Result<Json<Value>, ApiError> {
    let memory = memory(&app)?;
    let prefix = namespace(
        body.namespace_prefix.unwrap_or_default(),
        "namespace_prefix",
        true,
    )?;
    let mut search = Search::under(prefix)
        .limit(body.limit.unwrap_or(10).min(1000))
        .offset(body.offset.unwrap_or(0));
    for f in filters(body.filter.unwrap_or_default())? {
        search = search.filter(f);
    }
    if let Some(text) = body.query.filter(|q| !q.is_empty()) {
        search = search.text(text);
    }
    if body.refresh_ttl == Some(true) {
        search = search.refresh_ttl();
    }
    let hits = memory.search(&search).await.map_err(from_memory)?;
    Ok(Json(
        json!({ "items": hits.iter().map(hit_json).collect::<Vec<_>>() }),
    ))
}

#[derive(Debug, Deserialize)]
pub(crate) struct ListNamespaces {
    prefix: Option<Vec<String>>,
    suffix: Option<Vec<String>>,
    max_depth: Option<usize>,
    limit: Option<usize>,
    offset: Option<usize>,
}

pub(crate) async fn namespaces(
    State(app): State<Shared>,
    Body(body): Body<ListNamespaces>,
) -> Result<Json<Value>, ApiError> {
    let memory = memory(&app)?;
    let query = NamespaceQuery {
        prefix: body
            .prefix
            .map(|p| namespace(p, "prefix", true))
            .transpose()?,
        suffix: body
            .suffix
            .map(|s| namespace(s, "suffix", true))
            .transpose()?,
        max_depth: body.max_depth,
        limit: Some(body.limit.unwrap_or(100).min(10_000)),
        offset: body.offset.unwrap_or(0),
    };
    let found = memory.list_namespaces(&query).await.map_err(from_memory)?;
    let list: Vec<&[String]> = found.iter().map(Namespace::labels).collect();
    Ok(Json(json!({ "namespaces": list })))
}
