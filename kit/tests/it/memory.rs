//! Working memory: a token budget, eviction by whole units, summaries,
//! calibration, pluggable counting, eviction events.

use crate::support::tools;
use async_trait::async_trait;
use harness::llm::{
    Expect, LanguageModel, Message, ModelError, ModelRequest, ModelResponse, Role, ScriptedModel,
    ToolCall, ToolResult, ToolSpec, Usage,
};
use harness::state::reduce::Appendable;
use harness::{RunEvent, create_agent_with};
use harness_kit::{
    AgentChat, AgentLoop, AgentMemory, Calibration, MEMORY_EVICTED, MemoryConfig, MemoryEvicted,
    ModelDeps, ModelDepsAgent, TokenCounter, Transcript, UnitBody, check_pairing, plan_eviction,
};
use serde_json::json;
use std::sync::Arc;

/// A transcript: the pinned task, then `n` turns each with one call of
/// about `size` characters of output, each followed by a user message.
fn history(n: usize, size: usize) -> Transcript {
    let mut t = Transcript::new().pinned_user("TASK: count the files");
    for i in 0..n {
        let call = ToolCall::new(format!("c{i}"), "add", json!({"a": i, "b": 1}));
        t = t.message(ModelResponse::from_tool_call(call.clone()).into_message());
        t.append_from(Transcript::results(vec![ToolResult::success(
            &call,
            format!("OUTPUT{i} {}", "x".repeat(size)),
        )]));
        t = t.user(format!("NOTE{i}"));
    }
    t
}

fn contains(request: &ModelRequest, needle: &str) -> bool {
    request.messages.iter().any(|m| {
        m.content.iter().any(|p| match p {
            harness::llm::ContentPart::Text { text } => text.contains(needle),
            harness::llm::ContentPart::ToolResult(r) => r.content.contains(needle),
            _ => false,
        })
    })
}

/// A model under another name, so its usage is counted apart.
struct Named(&'static str, ScriptedModel);

#[async_trait]
impl LanguageModel for Named {
    async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        self.1.complete(request).await
    }
    fn provider(&self) -> &str {
        "test"
    }
    fn model_name(&self) -> &str {
        self.0
    }
}

#[tokio::test]
async fn over_budget_the_oldest_turns_are_dropped_whole_and_the_task_stays() {
    let model = Arc::new(ScriptedModel::new([Expect::any()
        .check("every call answered", |r| {
            check_pairing(&r.messages).is_ok()
        })
        .check("the task stays", |r| contains(r, "TASK"))
        .check("the latest stays", |r| contains(r, "NOTE5"))
        .check("the oldest went", |r| {
            !contains(r, "OUTPUT0") && !contains(r, "NOTE0")
        })
        .reply(ModelResponse::from_text("done"))]));
    let recipe = AgentLoop::<AgentChat, ModelDeps>::new(tools())
        .system("SYSTEM")
        .memory(MemoryConfig::budget(900));
    let harness = recipe
        .builder()
        .build()
        .unwrap_or_else(|e| panic!("the loop builds: {e}"));
    let agent = create_agent_with(
        "memory",
        &harness,
        ModelDepsAgent {
            model: model.clone(),
            summarizer: None,
        },
    );
    let run = agent.run(AgentChat {
        memory: history(6, 800).into(),
    });
    let mut events = run.events();
    let outcome = run
        .await
        .unwrap_or_else(|e| panic!("the run completes: {e}"));
    assert_eq!(outcome.signal.as_str(), "answered");
    let request = &model.requests()[0];
    assert_eq!(request.messages[0], Message::system("SYSTEM"));
    // The state no longer holds what was evicted, and holds no summary.
    let units = outcome.state.memory.transcript().units();
    assert!(
        units
            .iter()
            .all(|u| !matches!(u.body, UnitBody::Summary { .. }))
    );
    assert!(units[0].pinned);
    let evicted = evictions(&mut events);
    assert_eq!(evicted.len(), 1, "one eviction event");
    let event = &evicted[0];
    assert!(!event.summarized);
    assert!(
        event.tokens_before > 900 && event.tokens_after <= 900,
        "{event:?}"
    );
    assert!(
        event
            .units
            .iter()
            .all(|id| units.iter().all(|u| u.id != *id))
    );
}

/// An agent loop with working memory by `memory`, talking to `model` and
/// summarizing with `summarizer`.
fn summarizing(
    memory: MemoryConfig,
    model: Arc<ScriptedModel>,
    summarizer: Arc<Named>,
) -> harness::Agent<AgentChat, ModelDeps> {
    let harness = AgentLoop::<AgentChat, ModelDeps>::new(tools())
        .memory(memory)
        .builder()
        .build()
        .unwrap_or_else(|e| panic!("the loop builds: {e}"));
    create_agent_with(
        "summaries",
        &harness,
        ModelDepsAgent {
            model,
            summarizer: Some(summarizer),
        },
    )
}

#[tokio::test]
async fn with_a_summarizer_evicted_turns_are_replaced_by_its_summary() {
    let summarizer = Arc::new(Named(
        "summarizer",
        ScriptedModel::new([Expect::any()
            .last_role(Role::User)
            .last_message_contains("OUTPUT0")
            .reply(
                ModelResponse::from_text("SUMMARY: added numbers; notes 0-2 taken")
                    .with_usage(Usage::new(300, 12)),
            )]),
    ));
    let model = Arc::new(ScriptedModel::new([Expect::any()
        .check("the summary is sent", |r| {
            contains(r, "SUMMARY: added numbers")
        })
        .check("the oldest went", |r| !contains(r, "OUTPUT0"))
        .check("every call answered", |r| {
            check_pairing(&r.messages).is_ok()
        })
        .reply(ModelResponse::from_text("done").with_usage(Usage::new(200, 3)))]));
    let agent = summarizing(MemoryConfig::budget(900), model, summarizer);
    let outcome = agent
        .run(AgentChat {
            memory: history(6, 800).into(),
        })
        .await
        .unwrap_or_else(|e| panic!("the run completes: {e}"));
    let memory = &outcome.state.memory;
    let units = memory.transcript().units();
    assert!(units[0].pinned, "the task stays first");
    match &units[1].body {
        UnitBody::Summary { text, replaced } => {
            assert!(text.starts_with("SUMMARY"));
            assert!(*replaced >= 2, "{replaced}");
        }
        other => panic!("the summary follows the task, found {other:?}"),
    }
    // The summarizer's tokens are counted apart.
    assert_eq!(memory.usage().get("summarizer"), Some(Usage::new(300, 12)));
    assert_eq!(memory.usage().get("scripted"), Some(Usage::new(200, 3)));
}

/// The eviction events of a run.
fn evictions(events: &mut harness::RunEvents<AgentChat>) -> Vec<MemoryEvicted> {
    let mut evicted = Vec::new();
    while let Some(event) = events.try_recv() {
        if let RunEvent::Custom { kind, payload, .. } = event
            && &*kind == MEMORY_EVICTED
        {
            evicted.push(
                serde_json::from_value::<MemoryEvicted>(payload)
                    .unwrap_or_else(|e| panic!("the payload is a MemoryEvicted: {e}")),
            );
        }
    }
    evicted
}

#[tokio::test]
async fn a_summarizer_that_fails_leaves_the_units_dropped_and_the_turn_going() {
    for error in [
        ModelError::Overloaded {
            status: Some(500),
            message: "provider unavailable".into(),
            retry_after: None,
        },
        ModelError::InvalidRequest {
            status: Some(400),
            message: "request exceeds the available context size".into(),
        },
        ModelError::Auth {
            message: "bad key".into(),
        },
    ] {
        let said = error.to_string();
        let summarizer = Arc::new(Named(
            "summarizer",
            ScriptedModel::new([Expect::any().fail(error)]),
        ));
        let model = Arc::new(ScriptedModel::new([Expect::any()
            .check("the oldest went", |r| !contains(r, "OUTPUT0"))
            .check("every call answered", |r| {
                check_pairing(&r.messages).is_ok()
            })
            .reply(ModelResponse::from_text("done"))]));
        let agent = summarizing(MemoryConfig::budget(900), model, summarizer);
        let run = agent.run(AgentChat {
            memory: history(6, 800).into(),
        });
        let mut events = run.events();
        let outcome = run
            .await
            .unwrap_or_else(|e| panic!("{said}: the run completes: {e}"));
        assert_eq!(outcome.signal.as_str(), "answered", "{said}");
        let units = outcome.state.memory.transcript().units();
        assert!(
            units
                .iter()
                .all(|u| !matches!(u.body, UnitBody::Summary { .. })),
            "{said}"
        );
        let evicted = evictions(&mut events);
        assert_eq!(evicted.len(), 1, "{said}");
        assert!(!evicted[0].summarized, "{said}");
        assert_eq!(evicted[0].summary_failed.as_deref(), Some(said.as_str()));
    }
}

#[tokio::test]
async fn what_a_summarizer_is_asked_fits_the_budget() {
    const BUDGET: u64 = 2_000;
    let summarizer = Arc::new(Named(
        "summarizer",
        ScriptedModel::new([Expect::any()
            .check("the request fits the budget", |r| {
                let chars: usize = r
                    .messages
                    .iter()
                    .flat_map(|m| &m.content)
                    .map(|p| match p {
                        harness::llm::ContentPart::Text { text } => text.len(),
                        _ => 0,
                    })
                    .sum();
                // About four characters a token (the default estimate).
                (chars as u64) / 4 <= BUDGET
            })
            .check("it says it was cut", |r| contains(r, "is cut"))
            .check("it starts with the oldest", |r| contains(r, "OUTPUT0"))
            .reply(ModelResponse::from_text("SUMMARY: long outputs"))]),
    ));
    let model = Arc::new(ScriptedModel::new([Expect::any()
        .check("the summary is sent", |r| {
            contains(r, "SUMMARY: long outputs")
        })
        .reply(ModelResponse::from_text("done"))]));
    let agent = summarizing(MemoryConfig::budget(BUDGET), model, summarizer.clone());
    let outcome = agent
        .run(AgentChat {
            memory: history(6, 8_000).into(),
        })
        .await
        .unwrap_or_else(|e| panic!("the run completes: {e}"));
    assert_eq!(outcome.signal.as_str(), "answered");
    assert_eq!(summarizer.1.requests().len(), 1);
}

#[test]
fn eviction_never_takes_pinned_recent_or_unanswered_units() {
    let mut t = history(4, 400);
    // The last unit: a turn still waiting for its result.
    t = t.message(
        ModelResponse::from_tool_call(ToolCall::new("open", "add", json!({"a": 1, "b": 2})))
            .into_message(),
    );
    let config = MemoryConfig::budget(10).keep_recent(2);
    let plan = plan_eviction(&t, &[], &[], &config, Calibration::default())
        .unwrap_or_else(|| panic!("over budget"));
    let units = t.units();
    let kept_recent: Vec<u64> = units[units.len() - 2..].iter().map(|u| u.id).collect();
    for id in &plan.units {
        let unit = units
            .iter()
            .find(|u| u.id == *id)
            .unwrap_or_else(|| panic!("{id}"));
        assert!(!unit.pinned);
        assert!(!kept_recent.contains(id));
    }
    // Too much is pinned or recent to reach the budget: the plan says so.
    assert!(plan.tokens_after > plan.budget);
}

#[test]
fn calibration_scales_the_estimate() {
    let t = history(3, 400);
    let config = MemoryConfig::budget(1000);
    assert!(plan_eviction(&t, &[], &[], &config, Calibration::default()).is_none());
    let learnt = Calibration::observed(1000, 4000);
    let plan = plan_eviction(&t, &[], &[], &config, learnt)
        .unwrap_or_else(|| panic!("four times the estimate is over budget"));
    assert!(plan.tokens_before > 1000);
}

#[tokio::test]
async fn the_loop_learns_the_ratio_from_reported_usage() {
    let model = Arc::new(ScriptedModel::new([Expect::any().reply(
        // The conversation is a few dozen estimated tokens; the provider says 3000.
        ModelResponse::from_text("ok").with_usage(Usage::new(3000, 1)),
    )]));
    let harness = AgentLoop::<AgentChat, ModelDeps>::new(tools())
        .builder()
        .build()
        .unwrap_or_else(|e| panic!("the loop builds: {e}"));
    let agent = create_agent_with(
        "calibration",
        &harness,
        ModelDepsAgent {
            model,
            summarizer: None,
        },
    );
    let outcome = agent
        .run(AgentChat::with_task("hi"))
        .await
        .unwrap_or_else(|e| panic!("the run completes: {e}"));
    let calibration = outcome.state.memory.calibration();
    assert_eq!(calibration.reported, 3000);
    assert!(calibration.estimated > 0 && calibration.estimated < 3000);
    // Clamped: one odd report cannot scale estimates without bound.
    assert_eq!(calibration.ratio(), 4.0);
}

/// Counts one token per message, exactly.
#[derive(Debug)]
struct PerMessage;

impl TokenCounter for PerMessage {
    fn message(&self, _: &Message) -> u64 {
        1
    }
    fn tool(&self, _: &ToolSpec) -> u64 {
        0
    }
    fn is_exact(&self) -> bool {
        true
    }
}

#[test]
fn an_exact_counter_is_used_as_it_is() {
    let t = history(3, 10_000); // 1 + 3 × (2 + 1) = 10 messages
    let config = MemoryConfig::budget(10).counter(PerMessage);
    // Calibration does not apply to an exact counter.
    assert!(plan_eviction(&t, &[], &[], &config, Calibration::observed(1, 4)).is_none());
    let config = MemoryConfig::budget(7).counter(PerMessage);
    let plan = plan_eviction(&t, &[], &[], &config, Calibration::default())
        .unwrap_or_else(|| panic!("10 messages are over 7"));
    assert_eq!((plan.tokens_before, plan.tokens_after), (10, 7));
    // A turn (assistant + results) is 2 messages, a note 1: turn 0 and note 0.
    assert_eq!(plan.units, [1, 2]);
}

#[test]
fn memory_is_its_own_update() {
    let mut memory = AgentMemory::with_task("task");
    memory.append_from(Transcript::new().user("more").into());
    let texts: Vec<String> = memory
        .transcript()
        .messages()
        .iter()
        .map(Message::text)
        .collect();
    assert_eq!(texts, ["task", "more"]);
}
