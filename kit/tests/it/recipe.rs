//! The agent loop: turns, concurrency, bad model output, limits, extension.

use crate::support::{Add, FakeShell, Gate, agent, scripted, tools};
use async_trait::async_trait;
use harness::llm::{
    ContentPart, Expect, LanguageModel, Message, ModelError, ModelRequest, ModelResponse, Role,
    Tool, ToolCall, ToolResult, ToolSet, Usage,
};
use harness::state::reduce::Appendable;
use harness::{
    Context, Cx, Harness, HarnessState, JsonSchema, StepResult, create_agent_with, schemars,
};
use harness_kit::{
    AgentChat, AgentContext, AgentLoop, AgentMemory, AgentState, AgentStatus, Exit, LimitKind,
    Limits, Policy, Transcript, check_pairing,
};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// The tool results of the last tool message of `request`, by call id.
fn results_of(request: &ModelRequest) -> Vec<ToolResult> {
    request
        .messages
        .iter()
        .rev()
        .find(|m| m.role == Role::Tool)
        .map(|m| {
            m.content
                .iter()
                .filter_map(|p| match p {
                    ContentPart::ToolResult(r) => Some(r.clone()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn the_loop_runs_tools_until_the_model_answers_and_sums_usage() {
    let model = scripted([
        Expect::any()
            .last_role(Role::User)
            .offers_tool("add")
            .reply(
                ModelResponse::from_tool_calls([ToolCall::new(
                    "c1",
                    "add",
                    json!({"a": 2, "b": 3}),
                )])
                .with_usage(Usage::new(100, 10)),
            ),
        Expect::any()
            .last_role(Role::Tool)
            .last_message_contains("5")
            .reply(ModelResponse::from_text("2 + 3 = 5").with_usage(Usage::new(130, 7))),
    ]);
    let add = Add::default();
    let recipe = AgentLoop::new(ToolSet::new().with(add.clone())).system("Use the tools.");
    let agent = agent(recipe, model.clone());
    let outcome = agent
        .run(AgentChat::with_task("What is 2 + 3?"))
        .await
        .unwrap_or_else(|e| panic!("the run completes: {e}"));
    assert_eq!(outcome.signal.as_str(), "answered");
    let memory = &outcome.state.memory;
    assert_eq!(memory.answer().as_deref(), Some("2 + 3 = 5"));
    assert_eq!(memory.turns(), 2);
    assert_eq!(add.calls.load(Ordering::SeqCst), 1);
    assert_eq!(memory.usage().get("scripted"), Some(Usage::new(230, 17)));
    assert_eq!(memory.status(), Some(&AgentStatus::Answered));
    // The system prompt goes first in every request.
    for request in model.requests() {
        assert_eq!(request.messages[0], Message::system("Use the tools."));
    }
    assert_eq!(check_pairing(&memory.transcript().messages()), Ok(()));
}

#[tokio::test]
async fn the_calls_of_one_turn_run_concurrently() {
    // Three calls wait at a barrier of three: they pass only if all three
    // run at once.
    let gate = Gate::new(3);
    let calls = (0..3).map(|i| ToolCall::new(format!("g{i}"), "gate", json!({})));
    let model = scripted([
        Expect::any().reply(ModelResponse::from_tool_calls(calls)),
        Expect::any()
            .check("three results", |r| results_of(r).len() == 3)
            .reply(ModelResponse::from_text("all passed")),
    ]);
    let recipe = AgentLoop::new(ToolSet::new().with(gate.clone())).tool_concurrency(3);
    let run = agent(recipe, model).run(AgentChat::with_task("go"));
    let outcome = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .unwrap_or_else(|_| panic!("the calls did not run at once"))
        .unwrap_or_else(|e| panic!("the run completes: {e}"));
    assert_eq!(outcome.signal.as_str(), "answered");
    assert_eq!(gate.most.load(Ordering::SeqCst), 3);
}

#[derive(Deserialize, JsonSchema)]
struct Empty {}

/// Yields a few times while counting how many calls are in flight.
#[derive(Clone, Default)]
struct Yielder {
    in_flight: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
}

#[async_trait]
impl Tool for Yielder {
    type Args = Empty;
    type Output = String;
    type Error = String;
    fn name(&self) -> &str {
        "yielder"
    }
    fn description(&self) -> &str {
        "Yields"
    }
    async fn call(&self, _: Empty) -> Result<String, String> {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        for _ in 0..5 {
            tokio::task::yield_now().await;
        }
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        Ok("done".into())
    }
}

#[tokio::test]
async fn no_more_calls_run_at_once_than_the_limit() {
    for limit in [1usize, 2, 5] {
        let tool = Yielder::default();
        let calls = (0..6).map(|i| ToolCall::new(format!("y{i}"), "yielder", json!({})));
        let model = scripted([
            Expect::any().reply(ModelResponse::from_tool_calls(calls)),
            Expect::any()
                .check("six results", |r| results_of(r).len() == 6)
                .reply(ModelResponse::from_text("done")),
        ]);
        let recipe = AgentLoop::new(ToolSet::new().with(tool.clone())).tool_concurrency(limit);
        let outcome = agent(recipe, model)
            .run(AgentChat::with_task("go"))
            .await
            .unwrap_or_else(|e| panic!("the run completes: {e}"));
        assert_eq!(outcome.signal.as_str(), "answered");
        // Every call yields before finishing, so the stream starts as many
        // as it may: exactly the limit.
        assert_eq!(tool.most.load(Ordering::SeqCst), limit, "limit {limit}");
    }
}

#[tokio::test]
async fn bad_model_output_is_reported_to_the_model_for_each_call() {
    let shell = FakeShell::default();
    let add = Add::default();
    let model = scripted([
        Expect::any().reply(ModelResponse::from_tool_calls([
            // The tool fails.
            ToolCall::new("fails", "shell", json!({"command": "false"})),
            // What the model wrote is not JSON.
            ToolCall::new("malformed", "add", json!("{\"a\": 1, \"b\":")),
            // JSON, but not an object.
            ToolCall::new("array", "add", json!("[1, 2]")),
            // An object that does not match the schema.
            ToolCall::new("wrong_type", "add", json!({"a": "one", "b": 2})),
            ToolCall::new("missing", "add", json!({"a": 1})),
            // A tool that does not exist.
            ToolCall::new("unknown", "delete_everything", json!({})),
            // Arguments encoded twice are read.
            ToolCall::new("twice", "add", json!("{\"a\": 20, \"b\": 22}")),
        ])),
        Expect::any().reply(ModelResponse::from_text("I see the errors.")),
    ]);
    let recipe = AgentLoop::new(ToolSet::new().with(shell.clone()).with(add.clone()));
    let outcome = agent(recipe, model.clone())
        .run(AgentChat::with_task("go"))
        .await
        .unwrap_or_else(|e| panic!("bad calls do not fail the run: {e}"));
    assert_eq!(outcome.signal.as_str(), "answered");
    let requests = model.requests();
    let results = results_of(&requests[1]);
    let by_id = |id: &str| {
        results
            .iter()
            .find(|r| r.call_id == id)
            .cloned()
            .unwrap_or_else(|| panic!("call {id} has a result"))
    };
    let expect_error = |id: &str, needles: &[&str]| {
        let r = by_id(id);
        assert!(r.is_error, "{id} is an error: {r:?}");
        for needle in needles {
            assert!(
                r.content.contains(needle),
                "{id}: {:?} lacks {needle:?}",
                r.content
            );
        }
    };
    expect_error("fails", &["shell", "exit status 1"]);
    expect_error("malformed", &["not valid JSON", "add"]);
    expect_error("array", &["not a JSON object"]);
    expect_error("wrong_type", &["/a", "expected an integer"]);
    expect_error("missing", &["\"b\" is missing"]);
    expect_error(
        "unknown",
        &["unknown tool `delete_everything`", "add", "shell"],
    );
    let twice = by_id("twice");
    assert!(!twice.is_error);
    assert_eq!(twice.content, "42");
    assert_eq!(results.len(), 7);
    // Only the valid calls ran.
    assert_eq!(add.calls.load(Ordering::SeqCst), 1);
    assert_eq!(shell.ran(), ["false"]);
    assert_eq!(check_pairing(&requests[1].messages), Ok(()));
    // Arguments that were text are objects in the conversation sent back,
    // which every provider accepts; the text is kept as proposed.
    let sent: Vec<ToolCall> = requests[1]
        .messages
        .iter()
        .flat_map(|m| m.tool_calls().cloned().collect::<Vec<_>>())
        .collect();
    assert!(sent.iter().all(|c| c.arguments.is_object()), "{sent:?}");
    let twice_call = sent.iter().find(|c| c.id == "twice");
    assert_eq!(
        twice_call.map(|c| &c.arguments),
        Some(&json!({"a": 20, "b": 22}))
    );
    let turn = outcome
        .state
        .memory
        .transcript()
        .units()
        .iter()
        .find_map(|u| match &u.body {
            harness_kit::UnitBody::Turn(turn) if turn.calls().any(|c| c.id == "malformed") => {
                Some(turn.clone())
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("the turn is kept"));
    assert_eq!(turn.proposed["malformed"], json!("{\"a\": 1, \"b\":"));
}

#[tokio::test]
async fn the_turn_limit_stops_the_loop_before_the_next_model_call() {
    let model = scripted([
        Expect::any().reply(ModelResponse::from_tool_call(ToolCall::new(
            "c1",
            "add",
            json!({"a": 1, "b": 1}),
        ))),
    ]);
    let recipe = AgentLoop::new(tools()).limits(Limits::none().turns(1));
    let outcome = agent(recipe, model.clone())
        .run(AgentChat::with_task("go"))
        .await
        .unwrap_or_else(|e| panic!("the run completes: {e}"));
    assert_eq!(outcome.signal.as_str(), "limit");
    assert_eq!(
        outcome.state.memory.status(),
        Some(&AgentStatus::LimitReached {
            limit: LimitKind::Turns { max: 1 }
        })
    );
    assert_eq!(model.requests().len(), 1);
    // The call made in the last turn still got its result.
    assert!(outcome.state.memory.transcript().pending_calls().is_empty());
}

#[tokio::test]
async fn the_token_limit_counts_every_turn() {
    let call = |id: &str| {
        ModelResponse::from_tool_call(ToolCall::new(id, "add", json!({"a": 1, "b": 1})))
            .with_usage(Usage::new(80, 20))
    };
    let model = scripted([
        Expect::any().reply(call("c1")),
        Expect::any().reply(call("c2")),
        Expect::any().reply(call("c3")),
    ]);
    let recipe = AgentLoop::new(tools()).limits(Limits::none().tokens(150));
    let outcome = agent(recipe, model.clone())
        .run(AgentChat::with_task("go"))
        .await
        .unwrap_or_else(|e| panic!("the run completes: {e}"));
    assert_eq!(outcome.signal.as_str(), "limit");
    assert_eq!(
        outcome.state.memory.status(),
        Some(&AgentStatus::LimitReached {
            limit: LimitKind::Tokens {
                max: 150,
                used: 200
            }
        })
    );
    assert_eq!(model.requests().len(), 2);
}

#[tokio::test]
async fn the_token_limit_counts_what_the_users_own_steps_spent() {
    // A step of the user's own spent 900 tokens of a model of its own
    // before the agent loop: the loop's limit of 1 000 leaves it one turn.
    let mut chat = AgentChat::with_task("go");
    chat.memory
        .append_from(AgentMemory::default().spending("classifier", Usage::new(850, 50)));
    let call = ModelResponse::from_tool_call(ToolCall::new("c1", "add", json!({"a": 1, "b": 1})))
        .with_usage(Usage::new(80, 20));
    let model = scripted([Expect::any().reply(call)]);
    let recipe = AgentLoop::new(tools()).limits(Limits::none().tokens(1_000));
    let outcome = agent(recipe, model.clone())
        .run(chat)
        .await
        .unwrap_or_else(|e| panic!("the run completes: {e}"));
    assert_eq!(
        outcome.state.memory.status(),
        Some(&AgentStatus::LimitReached {
            limit: LimitKind::Tokens {
                max: 1_000,
                used: 1_000
            }
        })
    );
    assert_eq!(model.requests().len(), 1);
    let usage = outcome.state.memory.usage();
    assert_eq!(usage.get("classifier"), Some(Usage::new(850, 50)));
    assert_eq!(usage.total(), Usage::new(930, 70));
}

/// A model that takes its time.
struct Slow(Duration);

#[async_trait]
impl LanguageModel for Slow {
    async fn complete(&self, _: &ModelRequest) -> Result<ModelResponse, ModelError> {
        tokio::time::sleep(self.0).await;
        Ok(ModelResponse::from_text("late"))
    }
}

#[tokio::test]
async fn the_time_limit_cuts_a_model_call_short() {
    let recipe = AgentLoop::new(tools()).limits(Limits::none().time(Duration::from_millis(20)));
    let outcome = agent(recipe, Arc::new(Slow(Duration::from_secs(60))))
        .run(AgentChat::with_task("go"))
        .await
        .unwrap_or_else(|e| panic!("the run completes: {e}"));
    assert_eq!(outcome.signal.as_str(), "limit");
    assert!(matches!(
        outcome.state.memory.status(),
        Some(AgentStatus::LimitReached {
            limit: LimitKind::Time { max_ms: 20, .. }
        })
    ));
    assert_eq!(outcome.state.memory.answer(), None);
}

#[tokio::test]
async fn time_waiting_for_a_person_does_not_count() {
    // Room for two model turns and a tool call on a loaded machine.
    let limit = Duration::from_secs(3);
    let model = scripted([
        Expect::any().reply(ModelResponse::from_tool_call(ToolCall::new(
            "c1",
            "shell",
            json!({"command": "ls"}),
        ))),
        Expect::any().reply(ModelResponse::from_text("listed")),
    ]);
    let recipe = AgentLoop::new(tools())
        .policy("shell", Policy::ask())
        .limits(Limits::none().time(limit));
    let agent = agent(recipe, model);
    let mut run = agent.run(AgentChat::with_task("go"));
    let paused = run
        .outcome()
        .await
        .unwrap_or_else(|e| panic!("the run pauses: {e}"));
    let interrupt = paused
        .interrupt
        .unwrap_or_else(|| panic!("the shell call is asked about"));
    // The person takes longer than the whole limit.
    tokio::time::sleep(limit * 2).await;
    run.resume(
        json!({"decisions": [{"call_id": "c1", "decision": "approve"}]}),
        &interrupt.id,
    )
    .unwrap_or_else(|e| panic!("the interrupt is pending: {e}"));
    let outcome = run
        .outcome()
        .await
        .unwrap_or_else(|e| panic!("the run completes: {e}"));
    assert_eq!(outcome.signal.as_str(), "answered");
    assert!(outcome.state.memory.active_ms() < limit.as_millis() as u64);
}

/// A user's own state: the agent's memory and a field of its own.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
struct Reviewed {
    #[field(reduce = append)]
    agent: AgentMemory,
    #[field(reduce = add)]
    reviews: u32,
}

impl AgentState for Reviewed {
    fn memory(&self) -> &AgentMemory {
        &self.agent
    }
    fn memory_update(update: AgentMemory) -> ReviewedUpdate {
        ReviewedUpdate::new().agent(update)
    }
}

/// A user's own context.
#[derive(Context)]
struct Deps {
    #[slot(agent)]
    model: Arc<dyn LanguageModel>,
    #[slot(fixed)]
    max_words: usize,
}

impl AgentContext for Deps {
    fn model(&self) -> &dyn LanguageModel {
        &*self.model
    }
}

/// A step of the user's: sends the answer back once if it is too long.
async fn review(state: Arc<Reviewed>, cx: Cx<Deps>) -> StepResult<ReviewedUpdate> {
    let words = state
        .agent
        .answer()
        .unwrap_or_default()
        .split_whitespace()
        .count();
    let mut update = ReviewedUpdate::new().reviews(1);
    if words > cx.max_words {
        update = update.agent(Transcript::new().user("Shorter, please.").into());
    }
    Ok(update)
}

#[tokio::test]
async fn users_add_their_own_steps_and_routes_to_the_recipe() {
    let model = scripted([
        Expect::any().reply(ModelResponse::from_text(
            "The answer is four, as two and two make four.",
        )),
        Expect::any()
            .last_message_contains("Shorter")
            .reply(ModelResponse::from_text("Four.")),
    ]);
    let recipe = AgentLoop::<Reviewed, Deps>::new(tools()).on_answer(Exit::To("review".into()));
    let harness = recipe
        .add_to(Harness::builder_with(DepsFixed { max_words: 3 }))
        .step("review")
        .run(review)
        .route(|s: &Reviewed| {
            if s.agent.transcript().units().last().is_some_and(|u| {
                matches!(&u.body, harness_kit::UnitBody::Message { message } if message.role == Role::User)
            }) {
                "again"
            } else {
                "done"
            }
        })
        .on("again")
        .to("model")
        .on("done")
        .end()
        .start("model")
        .build()
        .unwrap_or_else(|e| panic!("the loop builds: {e}"));
    let agent = create_agent_with("reviewed", &harness, DepsAgent { model });
    let outcome = agent
        .run(Reviewed {
            agent: AgentMemory::with_task("What is 2 + 2?"),
            reviews: 0,
        })
        .await
        .unwrap_or_else(|e| panic!("the run completes: {e}"));
    assert_eq!(outcome.signal.as_str(), "done");
    assert_eq!(outcome.state.reviews, 2);
    assert_eq!(outcome.state.agent.answer().as_deref(), Some("Four."));
}

#[tokio::test]
async fn calls_a_users_route_skips_still_get_results_before_the_next_model_call() {
    let model = scripted([
        Expect::any().reply(ModelResponse::from_tool_calls([
            ToolCall::new("c1", "add", json!({"a": 1, "b": 2})),
            ToolCall::new("c2", "add", json!({"a": 3, "b": 4})),
        ])),
        Expect::any()
            .check("every call answered", |r| {
                check_pairing(&r.messages).is_ok()
            })
            .reply(ModelResponse::from_text("ok")),
    ]);
    let recipe = AgentLoop::<AgentChat, harness_kit::ModelDeps>::new(tools());
    // The user's loop sends tool calls to a step of its own that runs none.
    let harness = Harness::builder()
        .step("model")
        .run(recipe.model_step())
        .route(recipe.model_route())
        .on("tools")
        .to("skip")
        .on("answered")
        .end()
        .on("limit")
        .end()
        .step("skip")
        .run(|| async { Ok(harness_kit::AgentChatUpdate::new()) })
        .next("model")
        .start("model")
        .build()
        .unwrap_or_else(|e| panic!("the loop builds: {e}"));
    let agent = create_agent_with(
        "skip",
        &harness,
        harness_kit::ModelDepsAgent {
            model: model.clone(),
            summarizer: None,
        },
    );
    let outcome = agent
        .run(AgentChat::with_task("go"))
        .await
        .unwrap_or_else(|e| panic!("the run completes: {e}"));
    assert_eq!(outcome.signal.as_str(), "answered");
    let results = results_of(&model.requests()[1]);
    assert_eq!(results.len(), 2);
    assert!(
        results
            .iter()
            .all(|r| r.is_error && r.content.contains("not run"))
    );
}

#[tokio::test]
async fn a_failed_model_call_is_retried_by_the_model_retry_policy() {
    let flaky = || {
        scripted([
            // (An answer the server could not read gets a repair turn in
            // the step instead: see the test after the empty answer's.)
            Expect::any().fail(ModelError::Overloaded {
                status: Some(503),
                message: "the model is loading".into(),
                retry_after: None,
            }),
            Expect::any().reply(ModelResponse::from_text("second try")),
        ])
    };
    // Without a policy the run fails with the model's error.
    let error = agent(AgentLoop::new(tools()), flaky())
        .run(AgentChat::with_task("go"))
        .await
        .expect_err("one attempt");
    assert!(error.to_string().contains("model"), "{error}");
    let outcome = agent(
        AgentLoop::new(tools()).model_retry(harness::RetryPolicy::attempts(2)),
        flaky(),
    )
    .run(AgentChat::with_task("go"))
    .await
    .unwrap_or_else(|e| panic!("the second attempt answers: {e}"));
    assert_eq!(outcome.state.memory.answer().as_deref(), Some("second try"));
    assert_eq!(outcome.state.memory.turns(), 1);
}

#[test]
fn configuring_the_recipe_after_taking_a_step_from_it_is_allowed() {
    let recipe = AgentLoop::<AgentChat, harness_kit::ModelDeps>::new(tools());
    let _taken = recipe.model_step();
    let recipe = recipe.policy("shell", Policy::deny()).tool_concurrency(2);
    assert!(recipe.builder().build().is_ok());
}

/// Records the model and tool calls observers are told about.
#[derive(Clone, Default)]
struct Calls(Arc<std::sync::Mutex<Vec<String>>>);

#[async_trait]
impl harness::Observer<AgentChat> for Calls {
    async fn model_called(
        &self,
        _: &harness::RunInfo,
        step: &harness::StepInfo,
        call: &harness::ModelCallInfo<'_>,
    ) {
        if let Ok(mut calls) = self.0.lock() {
            calls.push(format!(
                "{} model {}/{}",
                step.name, call.provider, call.model
            ));
        }
    }
    async fn tool_called(
        &self,
        _: &harness::RunInfo,
        step: &harness::StepInfo,
        call: &harness::ToolCallInfo<'_>,
    ) {
        if let Ok(mut calls) = self.0.lock() {
            calls.push(format!(
                "{} tool {} {}",
                step.name, call.call.id, call.result.content
            ));
        }
    }
}

#[tokio::test]
async fn the_loops_model_and_tool_calls_are_reported_to_observers() {
    let model = scripted([
        Expect::any().reply(ModelResponse::from_tool_call(ToolCall::new(
            "c1",
            "add",
            json!({"a": 2, "b": 2}),
        ))),
        Expect::any().reply(ModelResponse::from_text("4")),
    ]);
    let calls = Calls::default();
    let harness = AgentLoop::<AgentChat, harness_kit::ModelDeps>::new(tools())
        .builder()
        .observer(calls.clone())
        .build()
        .unwrap_or_else(|e| panic!("the loop builds: {e}"));
    let agent = create_agent_with(
        "observed",
        &harness,
        harness_kit::ModelDepsAgent {
            model,
            summarizer: None,
        },
    );
    agent
        .run(AgentChat::with_task("2 + 2?"))
        .await
        .unwrap_or_else(|e| panic!("the run completes: {e}"));
    let seen = calls.0.lock().map(|c| c.clone()).unwrap_or_default();
    assert_eq!(
        seen,
        [
            "model model scripted/scripted",
            "tools tool c1 4",
            "model model scripted/scripted"
        ]
    );
}

#[tokio::test]
async fn an_empty_answer_gets_one_repair_turn() {
    let empty = || ModelResponse::new(Vec::new(), Usage::new(50, 0), Default::default());
    // (what the model answers, in order; whether the run answers)
    let cases = [
        (
            vec![
                empty(),
                ModelResponse::from_text("5").with_usage(Usage::new(60, 1)),
            ],
            true,
        ),
        (
            vec![
                ModelResponse::from_text("  \n"),
                ModelResponse::from_text("5"),
            ],
            true,
        ),
        (vec![empty(), empty()], false),
        (vec![ModelResponse::from_text(" "), empty()], false),
    ];
    for (answers, answered) in cases {
        let spent = answers
            .iter()
            .map(|a| a.usage)
            .fold(Usage::default(), |a, b| a + b);
        let model = scripted(answers.into_iter().map(|a| Expect::any().reply(a)));
        let result = agent(AgentLoop::new(tools()), model.clone())
            .run(AgentChat::with_task("What is 2 + 3?"))
            .await;
        let requests = model.requests();
        assert_eq!(requests.len(), 2, "one repair turn, no more");
        assert_eq!(
            requests[1].messages.last().map(Message::text).as_deref(),
            Some("Your last answer was empty. Answer the user, or call one of the tools.")
        );
        if answered {
            let outcome = result.unwrap_or_else(|e| panic!("the repair is answered: {e}"));
            let memory = &outcome.state.memory;
            assert_eq!(memory.answer().as_deref(), Some("5"));
            // Only the repaired answer is kept; the empty one is not in the
            // conversation, and the nudge is not either.
            assert_eq!(memory.transcript().messages().len(), 2);
            // Two model calls, both calls' tokens.
            assert_eq!(memory.turns(), 2);
            assert_eq!(memory.usage().get("scripted"), Some(spent));
        } else {
            let error = result.unwrap_err().to_string();
            assert!(
                error.contains("answered with nothing after a repair turn"),
                "{error}"
            );
        }
    }
}

/// Answers with nothing at once, then takes its time.
struct EmptyThenSlow(AtomicUsize);

#[async_trait]
impl LanguageModel for EmptyThenSlow {
    async fn complete(&self, _: &ModelRequest) -> Result<ModelResponse, ModelError> {
        if self.0.fetch_add(1, Ordering::SeqCst) > 0 {
            tokio::time::sleep(Duration::from_secs(60)).await;
        }
        Ok(ModelResponse::new(
            Vec::new(),
            Usage::new(50, 0),
            Default::default(),
        ))
    }
}

#[tokio::test]
async fn a_repair_turn_is_a_model_call_counted_and_held_to_the_limits() {
    let empty = || ModelResponse::new(Vec::new(), Usage::new(50, 0), Default::default());
    // A turn limit of 1 leaves no room for the repair: the loop stops
    // there; 2 leaves room for it.
    for max in [1, 2] {
        let model = scripted([
            Expect::any().reply(empty()),
            Expect::any().reply(ModelResponse::from_text("5")),
        ]);
        let recipe = AgentLoop::new(tools()).limits(Limits::none().turns(max));
        let outcome = agent(recipe, model.clone())
            .run(AgentChat::with_task("go"))
            .await
            .unwrap_or_else(|e| panic!("the run completes: {e}"));
        let memory = &outcome.state.memory;
        if max == 1 {
            assert_eq!(outcome.signal.as_str(), "limit");
            assert_eq!(
                memory.status(),
                Some(&AgentStatus::LimitReached {
                    limit: LimitKind::Turns { max: 1 }
                })
            );
            assert_eq!(model.requests().len(), 1);
            assert_eq!(memory.turns(), 1);
            assert_eq!(memory.usage().get("scripted"), Some(Usage::new(50, 0)));
            assert_eq!(memory.answer(), None);
        } else {
            assert_eq!(model.requests().len(), 2);
            assert_eq!(memory.turns(), 2);
            assert_eq!(memory.answer().as_deref(), Some("5"));
        }
    }
    // The time limit holds the repair call too.
    let recipe = AgentLoop::new(tools()).limits(Limits::none().time(Duration::from_millis(300)));
    let model = Arc::new(EmptyThenSlow(AtomicUsize::new(0)));
    let outcome = tokio::time::timeout(
        Duration::from_secs(30),
        agent(recipe, model.clone()).run(AgentChat::with_task("go")),
    )
    .await
    .unwrap_or_else(|_| panic!("the repair call was not cut short"))
    .unwrap_or_else(|e| panic!("the run completes: {e}"));
    assert!(
        matches!(
            outcome.state.memory.status(),
            Some(AgentStatus::LimitReached {
                limit: LimitKind::Time { max_ms: 300, .. }
            })
        ),
        "{:?}",
        outcome.state.memory.status()
    );
    assert_eq!(model.0.load(Ordering::SeqCst), 2);
    assert_eq!(outcome.state.memory.turns(), 2);
}

#[tokio::test]
async fn an_answer_the_server_could_not_read_gets_one_repair_turn_naming_the_tools() {
    let unreadable = || {
        ModelError::malformed(
            "the server could not read the model's answer (HTTP 500): The model produced output \
             that does not match the expected peg-native format",
        )
    };
    // (the first call's outcome is unreadable; the second's, then whether
    // the run answers)
    let cases = [
        (Expect::any().reply(ModelResponse::from_text("5")), true),
        (
            Expect::any().reply(ModelResponse::from_tool_call(ToolCall::new(
                "c1",
                "add",
                json!({"a": 2, "b": 3}),
            ))),
            true,
        ),
        (Expect::any().fail(unreadable()), false),
    ];
    for (second, answered) in cases {
        let mut turns = vec![Expect::any().fail(unreadable()), second];
        if answered {
            turns.push(Expect::any().reply(ModelResponse::from_text("5")));
        }
        let model = scripted(turns);
        let result = agent(AgentLoop::new(tools()), model.clone())
            .run(AgentChat::with_task("What is 2 + 3?"))
            .await;
        let requests = model.requests();
        let repair = requests[1].messages.last().map(Message::text).unwrap();
        assert!(repair.contains("could not be read"), "{repair}");
        assert!(
            repair.contains("peg-native"),
            "says what the server said: {repair}"
        );
        assert!(repair.contains("add"), "names the tools: {repair}");
        if answered {
            let outcome = result.unwrap_or_else(|e| panic!("the repair is answered: {e}"));
            assert_eq!(outcome.state.memory.answer().as_deref(), Some("5"));
            // The repair turn's note is not kept in the conversation.
            assert!(
                outcome
                    .state
                    .memory
                    .transcript()
                    .messages()
                    .iter()
                    .all(|m| !m.text().contains("could not be read"))
            );
        } else {
            assert_eq!(requests.len(), 2, "one repair turn, no more");
            let error = result.unwrap_err().to_string();
            assert!(error.contains("could not read"), "{error}");
        }
    }
}

/// A tool offering a schema of its own (as an MCP server's tool does);
/// counts its calls.
#[derive(Clone)]
struct Schemed {
    schema: serde_json::Value,
    calls: Arc<AtomicUsize>,
}

#[async_trait]
impl Tool for Schemed {
    type Args = serde_json::Value;
    type Output = String;
    type Error = String;
    fn name(&self) -> &str {
        "schemed"
    }
    fn description(&self) -> &str {
        "Has a schema of its own"
    }
    async fn call(&self, _: serde_json::Value) -> Result<String, String> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok("ran".into())
    }
    fn spec(&self) -> harness::llm::ToolSpec {
        harness::llm::ToolSpec::new(self.name(), self.description(), self.schema.clone())
    }
}

#[tokio::test]
async fn a_tool_whose_schema_cannot_be_checked_is_not_run() {
    // Schemas of a few dozen bytes that would take 2^20 and more steps to
    // check (before the budget, the first ran the host out of memory).
    for schema in [
        json!({"allOf": [{"$ref": "#"}, {"$ref": "#"}]}),
        json!({"anyOf": [{"$ref": "#"}, {"$ref": "#"}]}),
        json!({"type": "object", "oneOf": [{"$ref": "#"}, {"$ref": "#"}]}),
    ] {
        let calls = Arc::new(AtomicUsize::new(0));
        let tool = Schemed {
            schema: schema.clone(),
            calls: Arc::clone(&calls),
        };
        let model = scripted([
            Expect::any().reply(ModelResponse::from_tool_calls([ToolCall::new(
                "c1",
                "schemed",
                json!({"x": 1}),
            )])),
            Expect::any().reply(ModelResponse::from_text("done")),
        ]);
        let outcome = agent(AgentLoop::new(ToolSet::new().with(tool)), model.clone())
            .run(AgentChat::with_task("go"))
            .await
            .unwrap_or_else(|e| panic!("{schema}: the run completes: {e}"));
        assert_eq!(outcome.signal.as_str(), "answered", "{schema}");
        assert_eq!(calls.load(Ordering::SeqCst), 0, "{schema}: the tool ran");
        let results = results_of(&model.requests()[1]);
        assert!(
            results[0].is_error
                && results[0].content.contains("cannot be checked")
                && results[0].content.contains("too complex"),
            "{schema}: {:?}",
            results[0].content
        );
    }
}

#[tokio::test]
async fn a_repair_turn_quotes_a_long_unreadable_answer_briefly_and_without_secrets() {
    let secret = "sk-repair-quote-secret-7y6t5r4e3w";
    assert!(harness::secrets::register(secret));
    // Megabytes of what could not be read (a provider that quotes a whole
    // event), a secret at the cut or far past it.
    for (pad, tail) in [(985, 4 << 20), (995, 10), (999, 0), (3, 4 << 20)] {
        let message = format!("{}{secret}{}", "m".repeat(pad), "t".repeat(tail));
        let model = scripted([
            Expect::any().fail(ModelError::malformed(message)),
            Expect::any().reply(ModelResponse::from_text("5")),
        ]);
        agent(AgentLoop::new(tools()), model.clone())
            .run(AgentChat::with_task("What is 2 + 3?"))
            .await
            .unwrap_or_else(|e| panic!("the repair is answered: {e}"));
        let repair = model.requests()[1]
            .messages
            .last()
            .map(Message::text)
            .unwrap_or_default();
        assert!(repair.contains("could not be read"), "{repair}");
        assert!(
            repair.len() < 1500 + 200,
            "pad {pad}: {} bytes",
            repair.len()
        );
        for part in secret.as_bytes().windows(8) {
            let part = std::str::from_utf8(part).unwrap_or_default();
            assert!(!repair.contains(part), "pad {pad}: {part:?} in {repair}");
        }
    }
}
