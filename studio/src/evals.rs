//! Eval reports (harness-evals) in the studio: the list, and one report
//! case by case: input, expected and actual output, every score with its
//! reason, the steps and tool calls, and the run's sessions (a link to the
//! timeline when the store holds them).

use crate::error::ApiError;
use crate::server::{Authorized, PathParam, Shared};
use axum::Json;
use axum::extract::State;
use harness_evals::Report;
use serde_json::{Value, json};

fn summary(index: usize, report: &Report) -> Value {
    let s = report.summary();
    json!({
        "index": index,
        "experiment": report.experiment,
        "dataset": report.dataset,
        "model": report.model,
        "provider": report.provider,
        "started_ms": report.started_ms,
        "elapsed_ms": report.elapsed_ms,
        "cases": s.cases,
        "passed": s.passed,
        "failed": s.failed,
        "tokens": s.tokens,
        "model_calls": s.model_calls,
        "cost": s.cost,
        "mean_latency_ms": s.mean_latency_ms,
        "evaluators": s.evaluators,
    })
}

/// `GET /api/evals`: every report's summary, in the order given.
pub(crate) async fn list(State(app): State<Shared>, _: Authorized) -> Json<Value> {
    Json(json!(
        app.reports
            .iter()
            .enumerate()
            .map(|(i, r)| summary(i, r))
            .collect::<Vec<_>>()
    ))
}

/// `GET /api/evals/{index}`: one report, case by case (without the model
/// exchanges themselves: their tool calls, steps and figures).
pub(crate) async fn report(
    State(app): State<Shared>,
    _: Authorized,
    PathParam(index): PathParam,
) -> Result<Json<Value>, ApiError> {
    let n = app.reports.len();
    let (i, report) = index
        .parse::<usize>()
        .ok()
        .and_then(|i| Some((i, app.reports.get(i)?)))
        .ok_or_else(|| {
            ApiError::BadRequest(match n {
                0 => format!("no eval report {index:?}: this studio shows no eval report"),
                1 => format!("no eval report {index:?}: this studio has 1, report 0"),
                n => format!(
                    "no eval report {index:?}: this studio has {n}, reports 0 to {}",
                    n - 1
                ),
            })
        })?;
    let mut body = summary(i, report);
    body["evaluator_names"] = json!(report.evaluators);
    body["cases"] = report
        .cases
        .iter()
        .map(|case| {
            json!({
                "name": case.name,
                "tags": case.tags,
                "input": case.input,
                "expected": case.expected,
                "output": case.output,
                "failure": case.failure,
                "passed": case.passed(),
                "scores": case.scores,
                "metrics": case.record.metrics,
                "sessions": case.record.sessions,
                "steps": case.record.steps(),
                "tool_calls": case.record.tool_calls().iter()
                    .map(|c| json!({"name": c.name, "arguments": c.arguments}))
                    .collect::<Vec<_>>(),
            })
        })
        .collect();
    Ok(Json(body))
}
