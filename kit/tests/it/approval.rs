//! Human approval: one decision per call id, in any order; bad answers are
//! refused and the session keeps waiting; the allow-list is in the session.

use crate::support::{Add, FakeShell, agent};
use harness::llm::{
    ContentPart, Expect, ModelRequest, ModelResponse, Role, ScriptedModel, ToolCall, ToolResult,
    ToolSet,
};
use harness::{Run, RunError, create_agent_with};
use harness_kit::{
    AgentChat, AgentLoop, ApprovalRequest, Decisions, ModelDeps, ModelDepsAgent, Policy, UnitBody,
    check_pairing,
};
use harness_stores::SledStore;
use serde_json::{Value, json};
use std::sync::Arc;

/// One turn: `ls` and `rm` on the shell (asked about), `add` (allowed).
fn three_calls() -> ModelResponse {
    ModelResponse::from_tool_calls([
        ToolCall::new("ls", "shell", json!({"command": "ls -la"})),
        ToolCall::new("sum", "add", json!({"a": 1, "b": 2})),
        ToolCall::new("rm", "shell", json!({"command": "rm -rf build"})),
    ])
}

fn recipe(shell: &FakeShell) -> AgentLoop<AgentChat, ModelDeps> {
    AgentLoop::new(ToolSet::new().with(shell.clone()).with(Add::default()))
        .policy("shell", Policy::ask())
}

fn results_of(request: &ModelRequest) -> Vec<ToolResult> {
    request
        .messages
        .iter()
        .flat_map(|m| m.content.iter())
        .filter_map(|p| match p {
            ContentPart::ToolResult(r) => Some(r.clone()),
            _ => None,
        })
        .collect()
}

fn result<'a>(results: &'a [ToolResult], id: &str) -> &'a ToolResult {
    results
        .iter()
        .find(|r| r.call_id == id)
        .unwrap_or_else(|| panic!("call {id} has a result in {results:?}"))
}

/// Runs until the approval interrupt; returns the run and its payload.
async fn until_asked(
    run: &mut Run<AgentChat, ModelDeps>,
) -> (harness::InterruptId, ApprovalRequest) {
    let paused = run
        .outcome()
        .await
        .unwrap_or_else(|e| panic!("the run pauses: {e}"));
    let interrupt = paused
        .interrupt
        .unwrap_or_else(|| panic!("the run asks, but ended with {}", paused.signal));
    let request: ApprovalRequest = serde_json::from_value(interrupt.payload.clone())
        .unwrap_or_else(|e| panic!("the payload is an approval request: {e}"));
    (interrupt.id, request)
}

#[tokio::test]
async fn the_interrupt_lists_only_the_calls_that_need_a_person() {
    let shell = FakeShell::default();
    let model = Arc::new(ScriptedModel::new([Expect::any().reply(three_calls())]));
    let agent = agent(recipe(&shell), model);
    let mut run = agent.run(AgentChat::with_task("clean up"));
    let (_, request) = until_asked(&mut run).await;
    assert_eq!(request.kind, "tool_approval");
    let ids: Vec<_> = request.calls.iter().map(|c| c.call_id.as_str()).collect();
    assert_eq!(ids, ["ls", "rm"]);
    assert_eq!(request.calls[0].tool, "shell");
    assert_eq!(request.calls[0].arguments, json!({"command": "ls -la"}));
    assert_eq!(
        request.calls[0].schema["properties"]["command"]["type"],
        "string"
    );
    assert_eq!(request.calls[0].allow_key, "shell");
    // Nothing ran before the person answered.
    assert!(shell.ran().is_empty());
}

/// Answers the three-call turn with `answer` and returns the second model
/// request (what the model sees after the decisions), the final state and
/// what the shell ran.
async fn decide(answer: Value) -> (ModelRequest, AgentChat, Vec<String>) {
    let shell = FakeShell::default();
    let model = Arc::new(ScriptedModel::new([
        Expect::any().reply(three_calls()),
        Expect::any().reply(ModelResponse::from_text("done")),
    ]));
    let agent = agent(recipe(&shell), model.clone());
    let mut run = agent.run(AgentChat::with_task("clean up"));
    let (id, _) = until_asked(&mut run).await;
    run.resume(answer, &id)
        .unwrap_or_else(|e| panic!("the interrupt is pending: {e}"));
    let outcome = run
        .outcome()
        .await
        .unwrap_or_else(|e| panic!("the run completes: {e}"));
    assert_eq!(outcome.signal.as_str(), "answered");
    let request = model.requests()[1].clone();
    assert_eq!(check_pairing(&request.messages), Ok(()));
    (request, outcome.state, shell.ran())
}

fn answer(decisions: Decisions) -> Value {
    serde_json::to_value(decisions).unwrap_or_else(|e| panic!("decisions serialize: {e}"))
}

#[tokio::test]
async fn approve_runs_the_call() {
    let (request, _, ran) = decide(answer(Decisions::new().approve("ls").approve("rm"))).await;
    assert_eq!(ran, ["ls -la", "rm -rf build"]);
    let results = results_of(&request);
    assert_eq!(result(&results, "ls").content, "ran ls -la");
    assert_eq!(result(&results, "sum").content, "3");
    assert_eq!(result(&results, "rm").content, "ran rm -rf build");
}

#[tokio::test]
async fn reject_sends_the_message_to_the_model_as_the_calls_result() {
    let (request, _, ran) = decide(answer(
        Decisions::new()
            .approve("ls")
            .reject("rm", "keep the build directory"),
    ))
    .await;
    assert_eq!(ran, ["ls -la"]);
    let rm = result(&results_of(&request), "rm").clone();
    assert!(rm.is_error);
    assert!(rm.content.contains("rejected"), "{rm:?}");
    assert!(rm.content.contains("keep the build directory"), "{rm:?}");
}

#[tokio::test]
async fn edit_runs_the_call_with_the_new_arguments_and_keeps_the_proposed_ones() {
    let (request, state, ran) = decide(answer(
        Decisions::new()
            .approve("ls")
            .edit("rm", json!({"command": "rm -rf build/tmp"})),
    ))
    .await;
    assert_eq!(ran, ["ls -la", "rm -rf build/tmp"]);
    // The model sees the call as it ran.
    let calls: Vec<ToolCall> = request
        .messages
        .iter()
        .flat_map(|m| m.tool_calls().cloned().collect::<Vec<_>>())
        .collect();
    let rm = calls
        .iter()
        .find(|c| c.id == "rm")
        .unwrap_or_else(|| panic!("the rm call is in the request"));
    assert_eq!(rm.arguments, json!({"command": "rm -rf build/tmp"}));
    let turn = state
        .memory
        .transcript()
        .units()
        .iter()
        .find_map(|u| match &u.body {
            UnitBody::Turn(turn) if turn.calls().any(|c| c.id == "rm") => Some(turn.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("the turn is in the transcript"));
    assert_eq!(turn.proposed["rm"], json!({"command": "rm -rf build"}));
}

#[tokio::test]
async fn a_correction_reaches_the_model_as_a_user_message_after_every_result() {
    let (request, _, ran) = decide(answer(
        Decisions::new()
            .correct("rm", "Do not delete anything; list build/ instead.")
            .approve("ls"),
    ))
    .await;
    assert_eq!(ran, ["ls -la"]);
    let last = request
        .messages
        .last()
        .unwrap_or_else(|| panic!("the request has messages"));
    assert_eq!(last.role, Role::User);
    assert_eq!(last.text(), "Do not delete anything; list build/ instead.");
    let rm = result(&results_of(&request), "rm").clone();
    assert!(rm.is_error && rm.content.contains("correction"), "{rm:?}");
}

#[tokio::test]
async fn always_allow_adds_the_call_to_the_sessions_allow_list() {
    let shell = FakeShell::default();
    let model = Arc::new(ScriptedModel::new([
        Expect::any().reply(three_calls()),
        Expect::any().reply(ModelResponse::from_tool_call(ToolCall::new(
            "again",
            "shell",
            json!({"command": "pwd"}),
        ))),
        Expect::any().reply(ModelResponse::from_text("done")),
    ]));
    let agent = agent(recipe(&shell), model);
    let mut run = agent.run(AgentChat::with_task("clean up"));
    let (id, _) = until_asked(&mut run).await;
    run.resume(
        answer(Decisions::new().always_allow("ls").approve("rm")),
        &id,
    )
    .unwrap_or_else(|e| panic!("the interrupt is pending: {e}"));
    // The second shell call is not asked about.
    let outcome = run
        .outcome()
        .await
        .unwrap_or_else(|e| panic!("the run completes: {e}"));
    assert_eq!(outcome.signal.as_str(), "answered");
    assert_eq!(shell.ran(), ["ls -la", "rm -rf build", "pwd"]);
    assert!(outcome.state.memory.allowed().contains("shell"));
}

#[tokio::test]
async fn decisions_for_the_calls_of_one_turn_apply_in_any_order() {
    let mut seen = Vec::new();
    let orders: [[&str; 2]; 2] = [["ls", "rm"], ["rm", "ls"]];
    for order in orders {
        let mut decisions = Decisions::new();
        for id in order {
            decisions = match id {
                "ls" => decisions.reject("ls", "no listing"),
                _ => decisions.edit("rm", json!({"command": "rm -r tmp"})),
            };
        }
        let (request, _, ran) = decide(answer(decisions)).await;
        assert_eq!(ran, ["rm -r tmp"]);
        seen.push(request.messages);
    }
    assert_eq!(seen[0], seen[1]);
}

/// Answers that cannot be applied, each with what the error must name.
fn bad_answers() -> Vec<(Value, Vec<&'static str>)> {
    vec![
        // A decision for a call that is not waiting (the allowed one, or none).
        (
            answer(Decisions::new().approve("ls").approve("rm").approve("sum")),
            vec!["`sum`", "not waiting"],
        ),
        (
            answer(
                Decisions::new()
                    .approve("ls")
                    .approve("rm")
                    .approve("call_9"),
            ),
            vec!["`call_9`"],
        ),
        // A missing decision.
        (
            answer(Decisions::new().approve("ls")),
            vec!["`rm`", "no decision"],
        ),
        (answer(Decisions::new()), vec!["`ls`", "`rm`"]),
        // Two decisions for one call.
        (
            answer(
                Decisions::new()
                    .approve("ls")
                    .approve("rm")
                    .reject("rm", ""),
            ),
            vec!["`rm`", "2 decisions"],
        ),
        // Edited arguments that do not match the schema.
        (
            answer(
                Decisions::new()
                    .approve("ls")
                    .edit("rm", json!({"command": 7})),
            ),
            vec!["`rm`", "/command", "expected a string"],
        ),
        (
            answer(Decisions::new().approve("ls").edit("rm", json!({}))),
            vec!["`rm`", "\"command\" is missing"],
        ),
        (
            answer(Decisions::new().approve("ls").edit("rm", json!("rm -rf /"))),
            vec!["`rm`", "expected an object"],
        ),
        // Not decisions at all.
        (json!("yes"), vec!["Decisions"]),
        (
            json!({"decisions": [{"call_id": "ls", "decision": "maybe"}]}),
            vec!["maybe"],
        ),
    ]
}

#[tokio::test]
async fn a_bad_answer_names_the_call_and_the_run_keeps_waiting_on_the_same_interrupt() {
    let shell = FakeShell::default();
    let model = Arc::new(ScriptedModel::new([
        Expect::any().reply(three_calls()),
        Expect::any().reply(ModelResponse::from_text("done")),
    ]));
    let agent = agent(recipe(&shell), model);
    let mut run = agent.run(AgentChat::with_task("clean up"));
    let (id, _) = until_asked(&mut run).await;
    for (bad, needles) in bad_answers() {
        run.resume(bad.clone(), &id)
            .unwrap_or_else(|e| panic!("the interrupt is still pending: {e}"));
        match run.outcome().await {
            Err(RunError::AnswerRejected { interrupt, reason }) => {
                assert_eq!(interrupt, id);
                for needle in &needles {
                    assert!(
                        reason.contains(needle),
                        "{bad}: {reason:?} lacks {needle:?}"
                    );
                }
            }
            other => panic!("{bad} must be rejected, got {other:?}"),
        }
        assert_eq!(run.pending_interrupt().map(|i| &i.id), Some(&id));
        assert!(shell.ran().is_empty(), "nothing runs on a rejected answer");
    }
    run.resume(answer(Decisions::new().approve("rm").approve("ls")), &id)
        .unwrap_or_else(|e| panic!("the interrupt is still pending: {e}"));
    let outcome = run
        .outcome()
        .await
        .unwrap_or_else(|e| panic!("the run completes: {e}"));
    assert_eq!(outcome.signal.as_str(), "answered");
    assert_eq!(shell.ran(), ["ls -la", "rm -rf build"]);
}

#[test]
fn a_client_can_check_its_answer_before_sending_it() {
    let request = ApprovalRequest::new(vec![harness_kit::PendingCall {
        call_id: "c1".into(),
        tool: "shell".into(),
        arguments: json!({"command": "ls"}),
        schema: json!({"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}),
        allow_key: "shell".into(),
    }]);
    let error = request
        .resolve(
            Decisions::new()
                .edit("c1", json!({"command": ["ls"]}))
                .approve("c2"),
        )
        .unwrap_err();
    assert_eq!(error.problems.len(), 2);
    let text = error.to_string();
    assert!(text.contains("`c1`") && text.contains("`c2`"), "{text}");
    assert!(request.resolve(Decisions::new().approve("c1")).is_ok());
}

#[test]
fn an_edit_against_a_schema_too_complex_to_check_is_refused_saying_so() {
    for schema in [
        json!({"allOf": [{"$ref": "#"}, {"$ref": "#"}]}),
        json!({"anyOf": [{"$ref": "#"}, {"$ref": "#"}]}),
        json!({
            "type": "object",
            "properties": {"x": {"$ref": "#/$defs/a"}},
            "$defs": {"a": {"oneOf": [{"$ref": "#/$defs/a"}, {"$ref": "#/$defs/a"}]}},
        }),
    ] {
        let request = ApprovalRequest::new(vec![harness_kit::PendingCall {
            call_id: "c1".into(),
            tool: "remote".into(),
            arguments: json!({"x": {}}),
            schema: schema.clone(),
            allow_key: "remote".into(),
        }]);
        let error = request
            .resolve(Decisions::new().edit("c1", json!({"x": {"y": 1}})))
            .unwrap_err();
        let [harness_kit::DecisionProblem::InvalidEdit { error: found, .. }] =
            error.problems.as_slice()
        else {
            panic!("{schema}: {error}");
        };
        assert!(
            matches!(found, harness_kit::schema::SchemaError::TooComplex { .. }),
            "{schema}: {found}"
        );
        let text = error.to_string();
        assert!(
            text.contains("cannot be checked against its schema") && text.contains("too complex"),
            "{schema}: {text}"
        );
    }
}

fn sled_agent(
    path: &std::path::Path,
    shell: &FakeShell,
    model: Arc<ScriptedModel>,
) -> harness::Agent<AgentChat, ModelDeps> {
    // Sled releases a database's lock only once its own threads have let go
    // of it too, a moment after the previous agent was dropped: retry.
    let mut tries = 0;
    let store = loop {
        match SledStore::open(path) {
            Ok(store) => break store,
            Err(_) if tries < 600 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            Err(e) => panic!("the store opens: {e}"),
        }
    };
    let harness = AgentLoop::new(ToolSet::new().with(shell.clone()))
        .policy("shell", harness_kit::shell::policy())
        .builder()
        .store(store)
        .build()
        .unwrap_or_else(|e| panic!("the loop builds: {e}"));
    create_agent_with(
        "allow-list",
        &harness,
        ModelDepsAgent {
            model,
            summarizer: None,
        },
    )
}

#[tokio::test]
async fn the_allow_list_survives_a_resume_from_a_fresh_store() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("a temporary directory: {e}"));
    let shell_call = |id: &str, command: &str| {
        ModelResponse::from_tool_call(ToolCall::new(id, "shell", json!({"command": command})))
    };
    // First agent: `git status` always allowed (that command line exactly),
    // then `make` is asked about.
    let shell = FakeShell::default();
    let model = Arc::new(ScriptedModel::new([
        Expect::any().reply(shell_call("c1", "git status")),
        Expect::any().reply(shell_call("c2", "make")),
    ]));
    let (session, second) = {
        let agent = sled_agent(dir.path(), &shell, model);
        let mut run = agent.run(AgentChat::with_task("build it"));
        let (id, _) = until_asked(&mut run).await;
        run.resume(answer(Decisions::new().always_allow("c1")), &id)
            .unwrap_or_else(|e| panic!("pending: {e}"));
        let (second, request) = until_asked(&mut run).await;
        assert_eq!(request.calls[0].allow_key, "shell: make");
        (run.session_id().clone(), second)
    };
    assert_eq!(shell.ran(), ["git status"]);
    // Second agent, store opened afresh: `git  status` (the same argv,
    // spelt otherwise) runs unasked.
    let shell = FakeShell::default();
    let model = Arc::new(ScriptedModel::new([
        Expect::any().reply(shell_call("c3", "git  'status'")),
        Expect::any().reply(ModelResponse::from_text("built")),
    ]));
    let agent = sled_agent(dir.path(), &shell, model);
    let outcome = agent
        .resume(answer(Decisions::new().approve("c2")), &session, &second)
        .await
        .unwrap_or_else(|e| panic!("the session resumes: {e}"))
        .await
        .unwrap_or_else(|e| panic!("the run completes: {e}"));
    assert_eq!(outcome.signal.as_str(), "answered");
    assert_eq!(shell.ran(), ["make", "git  'status'"]);
    assert!(outcome.state.memory.allowed().contains("shell: git status"));
}
