//! Assistants: one per registered agent, named by the agent's id (which is
//! also its graph id).

use crate::app::{Body, Path, Shared};
use crate::error::ApiError;
use crate::served::Served;
use crate::time::iso;
use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use serde_json::{Map, Value, json};

pub(crate) fn assistant_json(app: &Shared, agent: &dyn Served) -> Value {
    let at = iso(app.started_at);
    json!({
        "assistant_id": agent.id(),
        "graph_id": agent.id(),
        "name": agent.id(),
        "description": null,
        "config": {},
        "context": {},
        "metadata": {"created_by": "system"},
        "version": 1,
        "created_at": at,
        "updated_at": at,
    })
}

#[derive(Debug, Deserialize)]
pub(crate) struct Search {
    metadata: Option<Map<String, Value>>,
    graph_id: Option<String>,
    name: Option<String>,
    limit: Option<usize>,
    offset: Option<usize>,
}

pub(crate) async fn search(
    State(app): State<Shared>,
    Body(body): Body<Search>,
) -> Result<Json<Vec<Value>>, ApiError> {
    let name = body.name.as_deref().map(str::to_lowercase);
    let limit = body.limit.unwrap_or(10).min(1000);
    let list = app
        .agents
        .values()
        .filter(|a| body.graph_id.as_deref().is_none_or(|g| g == a.id()))
        .filter(|a| {
            name.as_deref()
                .is_none_or(|n| a.id().to_lowercase().contains(n))
        })
        .map(|a| assistant_json(&app, &**a))
        .filter(|j| {
            body.metadata
                .iter()
                .flatten()
                .all(|(k, v)| j["metadata"].get(k) == Some(v))
        })
        .skip(body.offset.unwrap_or(0))
        .take(limit)
        .collect();
    Ok(Json(list))
}

pub(crate) async fn get(
    State(app): State<Shared>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let agent = app.agent(&id)?;
    Ok(Json(assistant_json(&app, &**agent)))
}

pub(crate) async fn graph(
    State(app): State<Shared>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(app.agent(&id)?.graph().clone()))
}

pub(crate) async fn schemas(
    State(app): State<Shared>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let agent = app.agent(&id)?;
    let mut schemas = agent.schemas().clone();
    schemas["graph_id"] = json!(agent.id());
    Ok(Json(schemas))
}
