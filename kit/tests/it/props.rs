//! The two invariants, property-tested:
//! - every tool call gets exactly one result before the next model call,
//!   whatever the policies and decisions (and their order);
//! - no sequence of appends and evictions leaves an orphan result or a call
//!   without its result.

use crate::support::{Add, FakeShell};
use harness::llm::{Expect, ModelResponse, ScriptedModel, ToolCall, ToolResult, ToolSet};
use harness::state::reduce::Appendable;
use harness::{RunError, create_agent_with};
use harness_kit::{
    AgentChat, AgentLoop, ApprovalRequest, Calibration, Decision, Decisions, MemoryConfig,
    ModelDeps, ModelDepsAgent, Policy, Transcript, check_pairing, plan_eviction,
};
use proptest::prelude::*;
use serde_json::{Value, json};
use std::sync::Arc;

// ---- approval ----

#[derive(Debug, Clone, Copy)]
enum CallKind {
    Add,
    Shell,
    Unknown,
    Malformed,
    BadArgs,
}

fn call_kind() -> impl Strategy<Value = CallKind> {
    prop_oneof![
        3 => Just(CallKind::Add),
        3 => Just(CallKind::Shell),
        1 => Just(CallKind::Unknown),
        1 => Just(CallKind::Malformed),
        1 => Just(CallKind::BadArgs),
    ]
}

#[derive(Debug, Clone, Copy)]
enum PolicyKind {
    Allow,
    Ask,
    Deny,
    AskUnlessLs,
}

fn policy_kind() -> impl Strategy<Value = PolicyKind> {
    prop_oneof![
        Just(PolicyKind::Allow),
        Just(PolicyKind::Ask),
        Just(PolicyKind::Deny),
        Just(PolicyKind::AskUnlessLs),
    ]
}

fn policy(kind: PolicyKind) -> Policy {
    match kind {
        PolicyKind::Allow => Policy::allow(),
        PolicyKind::Ask => Policy::ask(),
        PolicyKind::Deny => Policy::deny(),
        PolicyKind::AskUnlessLs => Policy::allow_prefixes("command", ["ls"]),
    }
}

#[derive(Debug, Clone, Copy)]
enum DecisionKind {
    Approve,
    Always,
    Edit,
    Reject,
    Correct,
}

fn decision_kind() -> impl Strategy<Value = DecisionKind> {
    prop_oneof![
        Just(DecisionKind::Approve),
        Just(DecisionKind::Always),
        Just(DecisionKind::Edit),
        Just(DecisionKind::Reject),
        Just(DecisionKind::Correct),
    ]
}

#[derive(Debug, Clone, Copy)]
enum BadFirst {
    None,
    MissingOne,
    UnknownId,
    InvalidEdit,
    Duplicate,
}

fn bad_first() -> impl Strategy<Value = BadFirst> {
    prop_oneof![
        2 => Just(BadFirst::None),
        1 => Just(BadFirst::MissingOne),
        1 => Just(BadFirst::UnknownId),
        1 => Just(BadFirst::InvalidEdit),
        1 => Just(BadFirst::Duplicate),
    ]
}

/// A model call: `kinds` as calls, with ids `call_0..` (repeated across
/// turns, as providers that number calls per answer do).
fn calls(kinds: &[CallKind], salt: usize) -> ModelResponse {
    ModelResponse::from_tool_calls(kinds.iter().enumerate().map(|(i, kind)| {
        let id = format!("call_{i}");
        match kind {
            CallKind::Add => ToolCall::new(id, "add", json!({"a": i, "b": salt})),
            CallKind::Shell if i % 2 == 0 => {
                ToolCall::new(id, "shell", json!({"command": format!("ls {salt}")}))
            }
            CallKind::Shell => ToolCall::new(id, "shell", json!({"command": format!("cat {i}")})),
            CallKind::Unknown => ToolCall::new(id, "nope", json!({})),
            CallKind::Malformed => ToolCall::new(id, "add", json!("{\"a\": ")),
            CallKind::BadArgs => ToolCall::new(id, "shell", json!({"command": 1})),
        }
    }))
}

fn decision(kind: DecisionKind, call: &harness_kit::PendingCall) -> Decision {
    match kind {
        DecisionKind::Approve => Decision::Approve,
        DecisionKind::Always => Decision::AlwaysAllow,
        DecisionKind::Edit => Decision::Edit {
            arguments: match call.tool.as_str() {
                "add" => json!({"a": 40, "b": 2}),
                _ => json!({"command": "echo edited"}),
            },
        },
        DecisionKind::Reject => Decision::Reject {
            message: "no".into(),
        },
        DecisionKind::Correct => Decision::Correct {
            message: "do something else".into(),
        },
    }
}

/// The decisions for `request`: kinds taken in turn, given in an order
/// rotated by `rotate`.
fn decisions(request: &ApprovalRequest, kinds: &[DecisionKind], rotate: usize) -> Decisions {
    let mut list: Vec<harness_kit::CallDecision> = request
        .calls
        .iter()
        .zip(kinds.iter().cycle())
        .map(|(call, kind)| harness_kit::CallDecision {
            call_id: call.call_id.clone(),
            decision: decision(*kind, call),
        })
        .collect();
    if !list.is_empty() {
        let n = rotate % list.len();
        list.rotate_left(n);
    }
    Decisions { decisions: list }
}

fn spoil(answer: &Decisions, how: BadFirst) -> Option<Decisions> {
    let mut bad = answer.clone();
    match how {
        BadFirst::None => return None,
        BadFirst::MissingOne => {
            bad.decisions.pop();
        }
        BadFirst::UnknownId => bad = bad.approve("call_99"),
        BadFirst::InvalidEdit => {
            let first = bad.decisions.first()?.call_id.clone();
            bad.decisions[0].decision = Decision::Edit {
                arguments: json!({"unexpected": [first]}),
            };
        }
        BadFirst::Duplicate => {
            let first = bad.decisions.first()?.clone();
            bad.decisions.push(first);
        }
    }
    Some(bad)
}

#[derive(Debug, Clone)]
struct Case {
    turns: Vec<Vec<CallKind>>,
    add: PolicyKind,
    shell: PolicyKind,
    kinds: Vec<DecisionKind>,
    rotate: usize,
    bad: BadFirst,
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(prop::collection::vec(call_kind(), 1..5), 1..3),
        policy_kind(),
        policy_kind(),
        prop::collection::vec(decision_kind(), 1..5),
        0usize..5,
        bad_first(),
    )
        .prop_map(|(turns, add, shell, kinds, rotate, bad)| Case {
            turns,
            add,
            shell,
            kinds,
            rotate,
            bad,
        })
}

async fn run_case(case: Case) -> Result<(), TestCaseError> {
    let mut script: Vec<_> = case
        .turns
        .iter()
        .enumerate()
        .map(|(salt, kinds)| {
            Expect::any()
                .check("every call answered exactly once", |r| {
                    check_pairing(&r.messages).is_ok()
                })
                .reply(calls(kinds, salt))
        })
        .collect();
    script.push(
        Expect::any()
            .check("every call answered exactly once", |r| {
                check_pairing(&r.messages).is_ok()
            })
            .reply(ModelResponse::from_text("done")),
    );
    let model = Arc::new(ScriptedModel::new(script));
    let harness = AgentLoop::<AgentChat, ModelDeps>::new(
        ToolSet::new()
            .with(Add::default())
            .with(FakeShell::default()),
    )
    .policy("add", policy(case.add))
    .policy("shell", policy(case.shell))
    .builder()
    .build()
    .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let agent = create_agent_with(
        "props",
        &harness,
        ModelDepsAgent {
            model: model.clone(),
            summarizer: None,
        },
    );
    let mut run = agent.run(AgentChat::with_task("go"));
    let mut asked = 0;
    let outcome = loop {
        let outcome = run
            .outcome()
            .await
            .map_err(|e| TestCaseError::fail(format!("the run fails: {e}")))?;
        let Some(interrupt) = outcome.interrupt.clone() else {
            break outcome;
        };
        asked += 1;
        prop_assert!(asked <= case.turns.len(), "asked more than once a turn");
        let request: ApprovalRequest = serde_json::from_value(interrupt.payload.clone())
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(!request.calls.is_empty());
        let answer = decisions(&request, &case.kinds, case.rotate);
        if let Some(bad) = spoil(&answer, case.bad) {
            run.resume(
                serde_json::to_value(&bad).unwrap_or(Value::Null),
                &interrupt.id,
            )
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
            match run.outcome().await {
                Err(RunError::AnswerRejected { interrupt: id, .. }) => {
                    prop_assert_eq!(&id, &interrupt.id)
                }
                other => prop_assert!(false, "{bad:?} was not rejected: {other:?}"),
            }
        }
        run.resume(
            serde_json::to_value(&answer).unwrap_or(Value::Null),
            &interrupt.id,
        )
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    };
    prop_assert_eq!(outcome.signal.as_str(), "answered");
    // The model saw every call answered exactly once before each turn.
    let requests = model.requests();
    prop_assert_eq!(requests.len(), case.turns.len() + 1);
    for request in &requests {
        prop_assert_eq!(check_pairing(&request.messages), Ok(()));
    }
    let transcript = outcome.state.memory.transcript();
    prop_assert!(transcript.pending_calls().is_empty());
    prop_assert_eq!(check_pairing(&transcript.messages()), Ok(()));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn every_call_gets_exactly_one_result_before_the_next_model_call(case in case()) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        runtime.block_on(run_case(case))?;
    }
}

// ---- working memory ----

#[derive(Debug, Clone)]
enum Op {
    User(bool),
    /// A turn with calls whose ids come from a small pool.
    Turn(Vec<u8>),
    /// Results for ids, some unknown, some repeated.
    Results(Vec<u8>),
    /// Evict units by id, with or without a summary.
    Evict(Vec<u64>, bool),
    /// Evict what working memory plans for a budget.
    Budget(u64, usize),
    Pin(u64, bool),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => any::<bool>().prop_map(Op::User),
        3 => prop::collection::vec(0u8..4, 0..4).prop_map(Op::Turn),
        3 => prop::collection::vec(0u8..6, 0..5).prop_map(Op::Results),
        2 => (prop::collection::vec(0u64..30, 0..6), any::<bool>()).prop_map(|(ids, s)| Op::Evict(ids, s)),
        2 => (0u64..400, 1usize..3).prop_map(|(b, k)| Op::Budget(b, k)),
        1 => (0u64..30, any::<bool>()).prop_map(|(id, p)| Op::Pin(id, p)),
    ]
}

fn id(n: u8) -> String {
    format!("call_{n}")
}

fn apply(t: &mut Transcript, op: &Op) {
    let update = match op {
        Op::User(pinned) if *pinned => Transcript::new().pinned_user("pinned"),
        Op::User(_) => Transcript::new().user("text"),
        Op::Turn(ids) => Transcript::new().message(
            ModelResponse::from_tool_calls(
                ids.iter()
                    .map(|n| ToolCall::new(id(*n), "t", json!({"n": n}))),
            )
            .into_message(),
        ),
        Op::Results(ids) => Transcript::results(
            ids.iter()
                .map(|n| ToolResult::success(&ToolCall::new(id(*n), "t", json!({})), "ok"))
                .collect(),
        ),
        Op::Evict(ids, summary) => {
            Transcript::evict(ids.clone(), summary.then(|| "summary".to_owned()))
        }
        Op::Budget(budget, keep) => {
            let config = MemoryConfig::budget(*budget).keep_recent(*keep);
            match plan_eviction(t, &[], &[], &config, Calibration::default()) {
                Some(plan) => Transcript::evict(plan.units, None),
                None => return,
            }
        }
        Op::Pin(unit, pinned) => Transcript::pin(*unit, *pinned),
    };
    t.append_from(update);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn no_appends_and_evictions_leave_an_orphan_result_or_an_unanswered_call(
        ops in prop::collection::vec(op(), 0..40)
    ) {
        let mut t = Transcript::new();
        for op in &ops {
            let before = t.units().len();
            apply(&mut t, op);
            if let Op::Budget(..) = op {
                // Budget eviction never takes a unit with a call still waiting.
                prop_assert!(t.units().len() <= before);
            }
            // What waits is exactly what has no result: answering it leaves
            // a conversation any provider accepts.
            let mut answered = t.clone();
            let pending: Vec<ToolResult> = t
                .pending_calls()
                .into_iter()
                .map(|call| ToolResult::success(call, "late"))
                .collect();
            answered.append_from(Transcript::results(pending));
            prop_assert!(answered.pending_calls().is_empty());
            prop_assert_eq!(check_pairing(&answered.messages()), Ok(()), "after {:?}", op);
            if t.pending_calls().is_empty() {
                prop_assert_eq!(check_pairing(&t.messages()), Ok(()));
            }
        }
    }
}
