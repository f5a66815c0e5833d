//! Tool-approval interrupts of the agent kit (`harness-kit`): a payload
//! that is an [`ApprovalRequest`] gets a widget on the page, one decision
//! per call, and its answer is checked here as the run checks it
//! ([`ApprovalRequest::resolve`]) before anything is resumed.
//!
//! The studio reads the payload, never the application's types: any agent
//! built on the kit's `AgentLoop`, whatever its state and tools, is
//! recognized by `kind: "tool_approval"`, and edited arguments are checked
//! against the schema each pending call carries.

use crate::error::ApiError;
use harness_kit::{ApprovalRequest, DecisionProblem, Decisions};
use serde_json::{Value, json};

/// The kind a tool-approval payload names.
const KIND: &str = "tool_approval";

/// The request, if `payload` is the kit's tool-approval request.
pub(crate) fn request_of(payload: &Value) -> Option<ApprovalRequest> {
    if payload.get("kind").and_then(Value::as_str) != Some(KIND) {
        return None;
    }
    serde_json::from_value(payload.clone()).ok()
}

/// The answer's type and schema, for the form.
pub(crate) fn shape() -> Value {
    json!({
        "type": harness::short_type_name::<Decisions>(),
        "schema": schemars::schema_for!(Decisions).to_value(),
    })
}

/// Checks `answer` against the waiting calls: it reads as [`Decisions`],
/// names each waiting call once and no other, and edited arguments match
/// their call's schema.
pub(crate) fn check(request: &ApprovalRequest, answer: &Value) -> Result<(), ApiError> {
    let decisions: Decisions =
        serde_json::from_value(answer.clone()).map_err(|e| ApiError::NotDecisions {
            error: e.to_string(),
        })?;
    request.resolve(decisions).map(|_| ()).map_err(|e| {
        let problems = e
            .problems
            .iter()
            .map(|p| Problem {
                call_id: call_of(p).to_owned(),
                problem: name_of(p),
                message: p.to_string(),
            })
            .collect();
        ApiError::Decisions {
            message: e.to_string(),
            problems,
        }
    })
}

/// One thing wrong with a decision, as the page shows it by its call.
#[derive(Debug, serde::Serialize)]
pub(crate) struct Problem {
    /// The call it is about.
    pub(crate) call_id: String,
    /// `unknown_call`, `missing_decision`, `duplicate_decision` or
    /// `invalid_edit`.
    pub(crate) problem: &'static str,
    /// What is wrong, in words.
    pub(crate) message: String,
}

fn call_of(p: &DecisionProblem) -> &str {
    match p {
        DecisionProblem::UnknownCall { call_id, .. }
        | DecisionProblem::MissingDecision { call_id, .. }
        | DecisionProblem::DuplicateDecision { call_id, .. }
        | DecisionProblem::InvalidEdit { call_id, .. } => call_id,
    }
}

fn name_of(p: &DecisionProblem) -> &'static str {
    match p {
        DecisionProblem::UnknownCall { .. } => "unknown_call",
        DecisionProblem::MissingDecision { .. } => "missing_decision",
        DecisionProblem::DuplicateDecision { .. } => "duplicate_decision",
        DecisionProblem::InvalidEdit { .. } => "invalid_edit",
    }
}
