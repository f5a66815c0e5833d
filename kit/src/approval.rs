//! Human approval of tool calls: the interrupt's payload
//! ([`ApprovalRequest`]), the answer ([`Decisions`], one per call id) and
//! what is wrong with an answer ([`ApprovalError`]).

use crate::schema::{self, SchemaError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// The payload of the interrupt the agent's tools step raises: the calls
/// waiting for a decision.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ApprovalRequest {
    /// What the interrupt is, for a client that handles several kinds:
    /// always `"tool_approval"`.
    pub kind: String,
    /// The calls, in the order the model made them.
    pub calls: Vec<PendingCall>,
}

/// A tool call waiting for a person's decision.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PendingCall {
    /// The call's id: decisions name it.
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// The arguments the model proposed.
    pub arguments: Value,
    /// The JSON Schema edited arguments must match.
    pub schema: Value,
    /// What "always allow" would remember for this call.
    pub allow_key: String,
}

/// A person's decision on one call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Decision {
    /// Run it.
    Approve,
    /// Run it, and run later calls with the same allow-list key unasked for
    /// the rest of the session.
    AlwaysAllow,
    /// Run it with these arguments instead (checked against the schema).
    Edit {
        /// The new arguments.
        arguments: Value,
    },
    /// Do not run it; `message` goes to the model as the call's result.
    Reject {
        /// Why, for the model.
        #[serde(default)]
        message: String,
    },
    /// Do not run it; `message` goes to the model as a user message after
    /// the results, to redirect it.
    Correct {
        /// What the model should do instead.
        message: String,
    },
}

/// One decision, naming its call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CallDecision {
    /// The call's id, as in [`PendingCall::call_id`].
    pub call_id: String,
    /// The decision.
    #[serde(flatten)]
    pub decision: Decision,
}

/// The answer to an [`ApprovalRequest`]: one decision per call id, in any
/// order.
///
/// ```
/// use harness_kit::Decisions;
/// use serde_json::json;
///
/// let answer = Decisions::new()
///     .reject("call_2", "not that file")
///     .approve("call_1");
/// assert_eq!(
///     serde_json::to_value(&answer)?,
///     json!({"decisions": [
///         {"call_id": "call_2", "decision": "reject", "message": "not that file"},
///         {"call_id": "call_1", "decision": "approve"},
///     ]})
/// );
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Decisions {
    /// The decisions.
    pub decisions: Vec<CallDecision>,
}

impl Decisions {
    /// No decisions yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `decision` on call `call_id`, builder-style.
    #[must_use]
    pub fn decide(mut self, call_id: impl Into<String>, decision: Decision) -> Self {
        self.decisions.push(CallDecision {
            call_id: call_id.into(),
            decision,
        });
        self
    }

    /// Approves call `call_id`.
    #[must_use]
    pub fn approve(self, call_id: impl Into<String>) -> Self {
        self.decide(call_id, Decision::Approve)
    }

    /// Approves call `call_id` and allows its kind for the session.
    #[must_use]
    pub fn always_allow(self, call_id: impl Into<String>) -> Self {
        self.decide(call_id, Decision::AlwaysAllow)
    }

    /// Runs call `call_id` with `arguments`.
    #[must_use]
    pub fn edit(self, call_id: impl Into<String>, arguments: Value) -> Self {
        self.decide(call_id, Decision::Edit { arguments })
    }

    /// Rejects call `call_id`, telling the model `message`.
    #[must_use]
    pub fn reject(self, call_id: impl Into<String>, message: impl Into<String>) -> Self {
        self.decide(
            call_id,
            Decision::Reject {
                message: message.into(),
            },
        )
    }

    /// Skips call `call_id` and tells the model `message` as the user.
    #[must_use]
    pub fn correct(self, call_id: impl Into<String>, message: impl Into<String>) -> Self {
        self.decide(
            call_id,
            Decision::Correct {
                message: message.into(),
            },
        )
    }
}

/// One thing wrong with an answer to an [`ApprovalRequest`], naming the call.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecisionProblem {
    /// A decision names a call that is not waiting.
    #[error("a decision names call `{call_id}`, which is not waiting (waiting: {})", waiting.join(", "))]
    UnknownCall {
        /// The id the decision used.
        call_id: String,
        /// The ids that are waiting.
        waiting: Vec<String>,
    },
    /// A waiting call has no decision.
    #[error("call `{call_id}` ({tool}) has no decision")]
    MissingDecision {
        /// The call.
        call_id: String,
        /// Its tool.
        tool: String,
    },
    /// A call has more than one decision.
    #[error("call `{call_id}` has {count} decisions; give exactly one")]
    DuplicateDecision {
        /// The call.
        call_id: String,
        /// How many it got.
        count: usize,
    },
    /// Edited arguments do not match the tool's schema, or cannot be
    /// checked against it ([`SchemaError::TooComplex`]).
    #[error("{}", invalid_edit(call_id, tool, error))]
    InvalidEdit {
        /// The call.
        call_id: String,
        /// Its tool.
        tool: String,
        /// Where they do not match, or why they could not be checked.
        error: SchemaError,
    },
}

fn invalid_edit(call_id: &str, tool: &str, error: &SchemaError) -> String {
    match error {
        SchemaError::TooComplex { .. } => format!(
            "the edited arguments of call `{call_id}` ({tool}) cannot be checked against its schema: {error}"
        ),
        _ => format!(
            "the edited arguments of call `{call_id}` ({tool}) do not match its schema: {error}"
        ),
    }
}

/// An answer that cannot be applied: every problem found, each naming its
/// call. The session keeps waiting on the same interrupt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApprovalError {
    /// The problems, in the order of the calls, then unknown ids.
    pub problems: Vec<DecisionProblem>,
}

impl fmt::Display for ApprovalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the tool-approval answer cannot be applied: ")?;
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                write!(f, "; ")?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ApprovalError {}

impl ApprovalRequest {
    /// A request for `calls`.
    pub fn new(calls: Vec<PendingCall>) -> Self {
        Self {
            kind: "tool_approval".into(),
            calls,
        }
    }

    /// Checks `answer` against the waiting calls: one decision for each,
    /// none for any other, edited arguments matching the schema. Returns
    /// each call's decision, in the order of the calls.
    ///
    /// A client can call this before answering; the run checks the same
    /// and refuses an answer that fails.
    pub fn resolve(&self, answer: Decisions) -> Result<Vec<CallDecision>, ApprovalError> {
        let waiting: BTreeSet<&str> = self.calls.iter().map(|c| c.call_id.as_str()).collect();
        let mut problems = Vec::new();
        let mut by_call: BTreeMap<String, Vec<Decision>> = BTreeMap::new();
        let mut unknown = Vec::new();
        for CallDecision { call_id, decision } in answer.decisions {
            if waiting.contains(call_id.as_str()) {
                by_call.entry(call_id).or_default().push(decision);
            } else if !unknown.contains(&call_id) {
                unknown.push(call_id);
            }
        }
        let mut resolved = Vec::with_capacity(self.calls.len());
        for call in &self.calls {
            let mut decisions = by_call.remove(&call.call_id).unwrap_or_default();
            match decisions.len() {
                0 => problems.push(DecisionProblem::MissingDecision {
                    call_id: call.call_id.clone(),
                    tool: call.tool.clone(),
                }),
                1 => {
                    let decision = decisions.remove(0);
                    if let Decision::Edit { arguments } = &decision
                        && let Err(error) = schema::validate(&call.schema, arguments)
                    {
                        problems.push(DecisionProblem::InvalidEdit {
                            call_id: call.call_id.clone(),
                            tool: call.tool.clone(),
                            error,
                        });
                        continue;
                    }
                    resolved.push(CallDecision {
                        call_id: call.call_id.clone(),
                        decision,
                    });
                }
                count => problems.push(DecisionProblem::DuplicateDecision {
                    call_id: call.call_id.clone(),
                    count,
                }),
            }
        }
        let waiting: Vec<String> = self.calls.iter().map(|c| c.call_id.clone()).collect();
        problems.extend(
            unknown
                .into_iter()
                .map(|call_id| DecisionProblem::UnknownCall {
                    call_id,
                    waiting: waiting.clone(),
                }),
        );
        if problems.is_empty() {
            Ok(resolved)
        } else {
            Err(ApprovalError { problems })
        }
    }
}

impl From<Decisions> for Value {
    /// The answer as JSON, for `run.resume(decisions, &id)`.
    fn from(decisions: Decisions) -> Self {
        // Only strings, enums and JSON values: serializing cannot fail.
        serde_json::to_value(decisions).unwrap_or(Value::Null)
    }
}
