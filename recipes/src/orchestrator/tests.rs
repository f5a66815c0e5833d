//! The `replan` event tells why a plan was replaced, in sentences.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use super::*;
use futures::StreamExt;
use harness::llm::{Expect, ModelResponse, ScriptedModel};
use harness::{RunEvent, create_agent_with};
use serde_json::{Value, json};

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
struct Echo {
    text: String,
}

fn echo() -> Harness<Echo> {
    Harness::<Echo>::builder()
        .step("echo")
        .run(async |e: Arc<Echo>| Ok(EchoUpdate::new().text(e.text.clone())))
        .end()
        .start("echo")
        .build()
        .unwrap()
}

/// The payloads of the run's `replan` events, when the planner answers
/// `answers` in turn.
async fn replan_events(answers: &[Value]) -> Vec<Value> {
    let planner = ScriptedModel::new(
        answers
            .iter()
            .map(|a| Expect::any().reply(ModelResponse::from_text(a.to_string()))),
    );
    let synthesizer = ScriptedModel::new([Expect::any().reply(ModelResponse::from_text("done"))]);
    let loop_ = Orchestrator::new()
        .role(
            "work",
            "does work",
            worker(
                &echo(),
                |t| Echo {
                    text: t.task.instructions.clone(),
                },
                |_, out| Ok(out.state.text),
            ),
        )
        .harness()
        .unwrap();
    let agent = create_agent_with(
        "o",
        &loop_,
        OrchestratorDepsAgent {
            planner: Arc::new(planner),
            synthesizer: Arc::new(synthesizer),
        },
    );
    let run = agent.run(OrchestratorState::new("g"));
    let events = run.events();
    let out = run.await.unwrap();
    assert_eq!(out.signal, signals::DONE);
    events
        .filter_map(|e| async move {
            match e {
                RunEvent::Custom { kind, payload, .. } if &*kind == "replan" => Some(payload),
                _ => None,
            }
        })
        .collect()
        .await
}

fn task(id: &str, agent: &str, needs: &[&str]) -> Value {
    json!({ "id": id, "agent": agent, "instructions": format!("do {id}"), "needs": needs })
}

#[tokio::test]
async fn a_refused_plans_replan_event_carries_each_problem_as_a_sentence_in_order() {
    let refused = json!({ "tasks": [
        task("a", "work", &["b"]),
        task("b", "paint", &["a", "x"]),
    ]});
    let good = json!({ "tasks": [task("a", "work", &[])] });
    let events = replan_events(&[refused, good]).await;
    let [payload] = &events[..] else {
        panic!("one replan: {events:?}")
    };
    assert_eq!(payload["plan"], 1);
    assert_eq!(payload["reason"], "invalid");
    assert_eq!(
        payload["messages"],
        json!([
            "task `b` names agent `paint`, which does not exist (agents: work)",
            "task `b` needs `x`, which is neither a task of the plan nor a finished one",
            "tasks need each other in a cycle: a -> b -> a",
        ]),
        "{payload:#}"
    );
    // The structured problems are there too, and the payload reads back.
    assert_eq!(payload["problems"][1]["problem"], "missing_dependency");
    let event: ReplanEvent = serde_json::from_value(payload.clone()).unwrap();
    assert_eq!(event.replan.plan, 1);
    assert_eq!(event.messages, event.replan.reason.messages());
    assert!(matches!(
        &event.replan.reason,
        ReplanReason::Invalid { problems } if problems.len() == 3
    ));
}

#[test]
fn a_failed_plans_messages_name_each_task_its_agent_and_its_error() {
    let failure = |task: &str, error: &str| TaskFailure {
        task: task.into(),
        agent: "researcher".into(),
        error: error.into(),
        plan: 1,
        wave: 1,
        cut_short: Some(false),
    };
    let event = ReplanEvent::new(Replan {
        plan: 1,
        tasks: Plan::default(),
        reason: ReplanReason::Failed {
            failures: vec![failure("rhythm", "overloaded"), failure("cause", "empty")],
        },
    });
    assert_eq!(
        event.messages,
        [
            "task `rhythm` (researcher) failed: overloaded",
            "task `cause` (researcher) failed: empty"
        ]
    );
    let payload = serde_json::to_value(&event).unwrap();
    assert_eq!(payload["reason"], "failed");
    assert_eq!(payload["failures"][0]["task"], "rhythm");
    assert_eq!(
        serde_json::from_value::<ReplanEvent>(payload).unwrap(),
        event
    );
}
