//! The orchestrator: plans are checked and bad ones replanned, ready tasks
//! run at once, failures lead to a replan that keeps what is done, a
//! correction during one sub-agent's approval steers it alone, and the
//! plan, tasks and replans are in the events and in time travel.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use futures::StreamExt;
use harness::llm::{Expect, ModelResponse, ScriptedModel, Tool, ToolCall, ToolSet};
use harness::slots::NoSlots;
use harness::{
    Harness, HarnessState, JsonSchema, RunError, RunEvent, StepError, create_agent_with,
};
use harness_kit::{AgentChat, AgentLoop, Decision, Decisions, ModelDeps, ModelDepsAgent, Policy};
use harness_recipes::orchestrator::{
    Orchestrator, OrchestratorDeps, OrchestratorDepsAgent, OrchestratorState, Phase, PlanProblem,
    ReplanReason, TaskInput, signals, worker, worker_with_slots,
};
use harness_stores::SledStore;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A plan as the planner writes it: (id, agent, needs).
fn plan(tasks: &[(&str, &str, &[&str])]) -> String {
    let tasks: Vec<Value> = tasks
        .iter()
        .map(|(id, agent, needs)| {
            json!({ "id": id, "agent": agent, "instructions": format!("do {id}"), "needs": needs })
        })
        .collect();
    json!({ "tasks": tasks }).to_string()
}

fn says(text: impl Into<String>) -> ModelResponse {
    ModelResponse::from_text(text)
}

/// A worker's state: its task and what it made.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
struct Job {
    id: String,
    inputs: BTreeMap<String, String>,
    output: String,
}

/// What the workers saw: runs per task, the inputs each got, and how many
/// ran at once.
#[derive(Default)]
struct Seen {
    runs: Mutex<BTreeMap<String, u32>>,
    inputs: Mutex<BTreeMap<String, Vec<String>>>,
    running: AtomicUsize,
    peak: AtomicUsize,
}

impl Seen {
    fn runs(&self, id: &str) -> u32 {
        self.runs.lock().unwrap().get(id).copied().unwrap_or(0)
    }
}

/// A worker loop that takes a while; with `fail_first`, its first run of
/// each task fails.
fn job_loop(seen: Arc<Seen>, fail_first: bool) -> Harness<Job> {
    Harness::<Job>::builder()
        .step("work")
        .run(move |j: Arc<Job>| {
            let seen = Arc::clone(&seen);
            async move {
                let run = {
                    let mut runs = seen.runs.lock().unwrap();
                    let n = runs.entry(j.id.clone()).or_default();
                    *n += 1;
                    *n
                };
                seen.inputs
                    .lock()
                    .unwrap()
                    .insert(j.id.clone(), j.inputs.keys().cloned().collect());
                let now = seen.running.fetch_add(1, Ordering::SeqCst) + 1;
                seen.peak.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(40)).await;
                seen.running.fetch_sub(1, Ordering::SeqCst);
                if fail_first && run == 1 {
                    return Err(StepError::msg(format!("{} broke on its first run", j.id)));
                }
                Ok(JobUpdate::new().output(format!("{} made", j.id)))
            }
        })
        .end()
        .start("work")
        .build()
        .unwrap()
}

fn job_worker(
    seen: &Arc<Seen>,
    fail_first: bool,
) -> harness_recipes::orchestrator::Worker<Job, ()> {
    worker(
        &job_loop(Arc::clone(seen), fail_first),
        |t: &TaskInput| Job {
            id: t.task.id.clone(),
            inputs: t.inputs.clone(),
            output: String::new(),
        },
        |_, out| Ok(out.state.output),
    )
}

fn deps(planner: ScriptedModel, synthesizer: ScriptedModel) -> OrchestratorDepsAgent {
    OrchestratorDepsAgent {
        planner: Arc::new(planner),
        synthesizer: Arc::new(synthesizer),
    }
}

fn synthesizer() -> ScriptedModel {
    ScriptedModel::new([Expect::any().reply(says("the answer"))])
}

#[tokio::test]
async fn a_plan_that_cannot_run_is_replanned_with_its_problems() {
    // Each bad plan, and a phrase of the problem the planner is shown.
    let bad: Vec<(String, &str)> = vec![
        (
            plan(&[("a", "painter", &[])]),
            "names agent `painter`, which does not exist",
        ),
        (
            plan(&[("a", "work", &["b"]), ("b", "work", &["a"])]),
            "need each other in a cycle",
        ),
        (plan(&[("a", "work", &["ghost"])]), "needs `ghost`"),
        (
            plan(&[("a", "work", &[]), ("a", "work", &[])]),
            "task id `a` is used by more",
        ),
        (plan(&[]), "the plan has no tasks"),
        (
            plan(&[("", "work", &[])]),
            "the id \"\" is not a valid task id: it is empty",
        ),
        (
            plan(&[("x/y", "work", &[])]),
            "the id \"x/y\" is not a valid task id: it holds '/' at byte 1",
        ),
        (
            plan(&[("b", "work", &[""])]),
            "\"\", in the `needs` of task \"b\", is not a valid task id",
        ),
    ];
    for (answer, problem) in bad {
        let seen = Arc::new(Seen::default());
        let planner = ScriptedModel::new([
            Expect::any()
                .last_message_contains("Goal: g")
                .reply(says(answer.clone())),
            Expect::any()
                .last_message_contains("Your last plan could not run")
                .last_message_contains(problem)
                .reply(says(plan(&[("a", "work", &[])]))),
        ]);
        let h = Orchestrator::new()
            .role("work", "does work", job_worker(&seen, false))
            .harness()
            .unwrap();
        let agent = create_agent_with("o", &h, deps(planner, synthesizer()));
        let out = agent.run(OrchestratorState::new("g")).await.unwrap();
        assert_eq!(out.signal, signals::DONE, "after {answer}");
        assert_eq!(out.state.plans, 2);
        let [replan] = &out.state.replans[..] else {
            panic!("{:?}", out.state.replans)
        };
        let ReplanReason::Invalid { problems } = &replan.reason else {
            panic!("{replan:?}")
        };
        assert!(
            problems.iter().any(|p| p.to_string().contains(problem)),
            "{problems:?}"
        );
        assert_eq!(seen.runs("a"), 1, "only the good plan ran");
        assert_eq!(out.state.answer.as_deref(), Some("the answer"));
    }
}

#[tokio::test]
async fn an_unreadable_plan_is_replanned_and_the_limit_of_replans_ends_the_run() {
    let seen = Arc::new(Seen::default());
    // Not a plan, twice (the answer and its repair turn), then cycles.
    let planner = ScriptedModel::new([
        Expect::any().reply(says("first I will think")),
        Expect::any().reply(says("{\"steps\": []}")),
        Expect::any()
            .last_message_contains("is not a plan")
            .reply(says(plan(&[("a", "work", &["a"])]))),
    ]);
    let h = Orchestrator::new()
        .role("work", "does work", job_worker(&seen, false))
        .max_replans(1)
        .harness()
        .unwrap();
    let agent = create_agent_with("o", &h, deps(planner, ScriptedModel::new([])));
    let mut events = Vec::new();
    let run = agent.run(OrchestratorState::new("g"));
    let mut stream = run.events();
    let out = run.await.unwrap();
    while let Some(e) = stream.next().await {
        if let RunEvent::Custom { kind, .. } = e {
            events.push(kind.to_string());
        }
    }
    assert_eq!(out.signal, signals::GAVE_UP);
    assert_eq!(out.state.phase, Phase::GaveUp);
    assert_eq!(out.state.replans.len(), 2);
    assert!(matches!(
        &out.state.replans[0].reason,
        ReplanReason::Invalid { problems } if matches!(problems[..], [PlanProblem::Unreadable { .. }])
    ));
    assert!(matches!(
        &out.state.replans[1].reason,
        ReplanReason::Invalid { problems } if matches!(problems[..], [PlanProblem::Cycle { .. }])
    ));
    assert_eq!(events, ["replan", "replan"]);
    assert_eq!(seen.runs("a"), 0, "nothing ran");
}

#[tokio::test]
async fn ready_tasks_run_at_once_within_the_limit_and_dependents_get_their_results() {
    for parallel in [1, 2, 3] {
        let seen = Arc::new(Seen::default());
        let planner = ScriptedModel::new([Expect::any().reply(says(plan(&[
            ("a", "work", &[]),
            ("b", "work", &[]),
            ("c", "work", &[]),
            ("d", "work", &["a", "b", "c"]),
        ])))]);
        let synth = ScriptedModel::new([Expect::any()
            .last_message_contains("- a (work): a made\n- b (work): b made")
            .last_message_contains("- d (work): d made")
            .reply(says("all made"))]);
        let h = Orchestrator::new()
            .role("work", "does work", job_worker(&seen, false))
            .parallel(parallel)
            .harness()
            .unwrap();
        let agent = create_agent_with("o", &h, deps(planner, synth));
        let run = agent.run(OrchestratorState::new("make things"));
        let events = run.events();
        let out = run.await.unwrap();
        assert_eq!(out.state.answer.as_deref(), Some("all made"));
        assert_eq!(
            seen.peak.load(Ordering::SeqCst),
            parallel,
            "independent tasks ran {parallel} at once"
        );
        assert_eq!(
            seen.inputs.lock().unwrap()["d"],
            ["a", "b", "c"],
            "d got the results it needs"
        );
        assert_eq!(out.state.waves, 2);
        let waves: Vec<Value> = events
            .filter_map(|e| async move {
                match e {
                    RunEvent::Custom { kind, payload, .. } if &*kind == "wave" => Some(payload),
                    _ => None,
                }
            })
            .collect()
            .await;
        assert_eq!(
            waves,
            [
                json!({ "wave": 1, "tasks": ["a", "b", "c"] }),
                json!({ "wave": 2, "tasks": ["d"] })
            ]
        );
    }
}

#[tokio::test]
async fn a_failed_task_is_replanned_with_the_failure_and_what_is_done_and_done_tasks_do_not_rerun()
{
    let dir = tempfile::tempdir().unwrap();
    let seen = Arc::new(Seen::default());
    let planner = ScriptedModel::new([
        Expect::any().reply(says(plan(&[
            ("a", "work", &[]),
            ("b", "flaky", &[]),
            ("c", "work", &["a", "b"]),
        ]))),
        Expect::any()
            .last_message_contains("These tasks of the last plan failed:\n- b (flaky)")
            .last_message_contains("broke on its first run")
            .last_message_contains("Done:\n- a (work): a made")
            .reply(says(plan(&[
                ("b", "flaky", &[]),
                ("c", "work", &["a", "b"]),
            ]))),
    ]);
    let h = Orchestrator::new()
        .role("work", "does work", job_worker(&seen, false))
        .role("flaky", "fails once", job_worker(&seen, true))
        .builder()
        .store(SledStore::open(dir.path().join("store")).unwrap())
        .build()
        .unwrap();
    let agent = create_agent_with("o", &h, deps(planner, synthesizer()));
    let run = agent.run(OrchestratorState::new("g"));
    let session = run.session_id().clone();
    let events = run.events();
    let out = run.await.unwrap();
    assert_eq!(out.signal, signals::DONE);
    assert_eq!((seen.runs("a"), seen.runs("b"), seen.runs("c")), (1, 2, 1));
    let [replan] = &out.state.replans[..] else {
        panic!("{:?}", out.state.replans)
    };
    assert_eq!(replan.plan, 1);
    let ReplanReason::Failed { failures } = &replan.reason else {
        panic!("{replan:?}")
    };
    assert_eq!(failures.len(), 1);
    assert_eq!(
        (failures[0].task.as_str(), failures[0].agent.as_str()),
        ("b", "flaky")
    );
    assert_eq!(
        out.state.results["a"].plan, 1,
        "a's result is from the first plan"
    );
    assert_eq!(out.state.results["b"].plan, 2);

    // The events tell the story: plans, waves, each task's end, the replan.
    let story: Vec<String> = events
        .filter_map(|e| async move {
            match e {
                RunEvent::Custom { kind, payload, .. } => Some(match &*kind {
                    "task" => format!(
                        "task {} {}",
                        payload["task"].as_str()?,
                        payload["status"].as_str()?
                    ),
                    "plan" => format!("plan {}", payload["plan"]),
                    "wave" => format!("wave {}", payload["wave"]),
                    other => other.to_string(),
                }),
                _ => None,
            }
        })
        .collect()
        .await;
    assert_eq!(
        story,
        [
            "plan 1",
            "wave 1",
            "task a done",
            "task b failed",
            "replan",
            "plan 2",
            "wave 2",
            "task b done",
            "wave 3",
            "task c done"
        ]
    );

    // Time travel: each checkpoint's state shows the plan and the tasks.
    let history = agent.history(&session).await.unwrap();
    let collects: Vec<u64> = history
        .iter()
        .filter(|c| c.step == "collect")
        .map(|c| c.index)
        .collect();
    assert_eq!(collects.len(), 3);
    let after_first = agent.state_at(&session, Some(collects[0])).await.unwrap();
    assert_eq!(after_first.plans, 1);
    assert_eq!(after_first.phase, Phase::Planning);
    assert!(after_first.results.contains_key("a") && !after_first.results.contains_key("b"));
    assert_eq!(after_first.failures.len(), 1);
    let branch_steps = history.iter().filter(|c| c.step == "task").count();
    assert_eq!(branch_steps, 4, "a, b, b again, c: {history:?}");
}

/// What bounds a worker's task, besides the orchestrator's deadline.
#[derive(Clone, Copy)]
enum Bound {
    Nothing,
    /// A timeout on the worker's step.
    StepTimeout(Duration),
    /// The worker's own deadline.
    OwnDeadline(Duration),
}

/// A worker whose task `h` waits for an hour while `hang` is set; the
/// others are quick. Counts runs in `seen`. `bound` bounds its task.
fn hanging_worker(
    seen: &Arc<Seen>,
    hang: &Arc<AtomicBool>,
    bound: Bound,
) -> harness_recipes::orchestrator::Worker<Job, ()> {
    let (seen, hang) = (Arc::clone(seen), Arc::clone(hang));
    let step = Harness::<Job>::builder()
        .step("work")
        .run(move |j: Arc<Job>| {
            let (seen, hang) = (Arc::clone(&seen), Arc::clone(&hang));
            async move {
                *seen.runs.lock().unwrap().entry(j.id.clone()).or_default() += 1;
                if j.id == "h" && hang.load(Ordering::SeqCst) {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                }
                Ok(JobUpdate::new().output(format!("{} made", j.id)))
            }
        });
    let job = match bound {
        Bound::Nothing => step.end().start("work"),
        Bound::StepTimeout(limit) => step.timeout(limit).end().start("work"),
        Bound::OwnDeadline(limit) => step.end().start("work").deadline(limit),
    }
    .build()
    .unwrap();
    worker(
        &job,
        |t: &TaskInput| Job {
            id: t.task.id.clone(),
            inputs: t.inputs.clone(),
            output: String::new(),
        },
        |_, out| Ok(out.state.output),
    )
}

/// The run's deadline cuts a hanging task short: the run ends with
/// `RunError::Deadline`, the planner and the synthesizer are not asked
/// again, the wave's finished result is kept in the store, and a recovered
/// run runs the cut task again (only it) and finishes.
#[tokio::test]
async fn the_deadline_ends_the_run_without_a_replan_and_keeps_what_is_done() {
    let dir = tempfile::tempdir().unwrap();
    let seen = Arc::new(Seen::default());
    let hang = Arc::new(AtomicBool::new(true));
    // One plan only: a second request would find the script empty.
    let planner = Arc::new(ScriptedModel::new([
        Expect::any().reply(says(plan(&[("q", "work", &[]), ("h", "work", &[])])))
    ]));
    let synthesizer = Arc::new(ScriptedModel::new([Expect::any()
        .last_message_contains("h made")
        .reply(says("the answer"))]));
    let limit = Duration::from_millis(700);
    let h = Orchestrator::new()
        .role(
            "work",
            "does work",
            hanging_worker(&seen, &hang, Bound::Nothing),
        )
        .builder()
        .store(SledStore::open(dir.path().join("store")).unwrap())
        .deadline(limit)
        .build()
        .unwrap();
    let agent = create_agent_with(
        "o",
        &h,
        OrchestratorDepsAgent {
            planner: Arc::clone(&planner) as _,
            synthesizer: Arc::clone(&synthesizer) as _,
        },
    );
    let run = agent.run(OrchestratorState::new("g"));
    let session = run.session_id().clone();
    let events = run.events();
    let ended = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("the deadline ends the run");
    match ended {
        Err(RunError::Deadline { limit: l, step }) => {
            assert_eq!(l, limit);
            assert_eq!(step, "collect");
        }
        Err(other) => panic!("expected the run's deadline, got: {other}"),
        Ok(out) => panic!(
            "expected the run's deadline, the run ended with `{}`: {:?}",
            out.signal, out.state.failures
        ),
    }
    assert_eq!(planner.requests().len(), 1, "no replan after the deadline");
    assert_eq!(synthesizer.requests().len(), 0);
    let kinds: Vec<String> = events
        .filter_map(|e| async move {
            match e {
                RunEvent::Custom { kind, .. } => Some(kind.to_string()),
                _ => None,
            }
        })
        .collect()
        .await;
    assert!(!kinds.iter().any(|k| k == "replan"), "{kinds:?}");

    // What was done is kept: q's result; h, cut short, is not a failure
    // that asks for a replan.
    let kept = agent.state_at(&session, None).await.unwrap();
    assert_eq!(kept.results.keys().collect::<Vec<_>>(), ["q"]);
    let [cut] = &kept.failures[..] else {
        panic!("{:?}", kept.failures)
    };
    assert_eq!(cut.task, "h");
    assert!(cut.passed_deadline(), "{cut:?}");
    assert!(kept.current_failures().is_empty());
    assert!(kept.replans.is_empty());

    // Recovered (with a deadline of its own), the run does h again, not
    // q, and finishes without a replan.
    hang.store(false, Ordering::SeqCst);
    let out = agent.recover(&session).await.unwrap().await.unwrap();
    assert_eq!(out.signal, signals::DONE);
    assert_eq!(out.state.answer.as_deref(), Some("the answer"));
    assert_eq!((seen.runs("q"), seen.runs("h")), (1, 2));
    assert_eq!(planner.requests().len(), 1);
    assert!(out.state.replans.is_empty());
}

/// As the guide says, a timeout on a worker's step bounds its task: the
/// task fails (it is not cut short by the deadline) and is replanned.
#[tokio::test]
async fn a_timeout_on_a_workers_step_bounds_its_task_and_leads_to_a_replan() {
    let error = a_bounded_task_is_replanned(Bound::StepTimeout(Duration::from_millis(200))).await;
    assert!(error.contains("timed out"), "{error}");
}

/// So does a worker's own deadline: the worker's loop passed it, not the
/// orchestrator's run.
#[tokio::test]
async fn a_workers_own_deadline_bounds_its_task_and_leads_to_a_replan() {
    let error = a_bounded_task_is_replanned(Bound::OwnDeadline(Duration::from_millis(200))).await;
    assert!(error.contains("deadline of 200ms"), "{error}");
}

/// Runs a plan whose one task hangs past `bound`: the task fails, is not
/// taken as cut short by the run's deadline, and the planner's second
/// plan runs. The task's error.
async fn a_bounded_task_is_replanned(bound: Bound) -> String {
    let seen = Arc::new(Seen::default());
    let hang = Arc::new(AtomicBool::new(true));
    let planner = ScriptedModel::new([
        Expect::any().reply(says(plan(&[("h", "work", &[])]))),
        Expect::any()
            .last_message_contains("These tasks of the last plan failed:\n- h (work)")
            .reply(says(plan(&[("q", "work", &[])]))),
    ]);
    let h = Orchestrator::new()
        .role("work", "does work", hanging_worker(&seen, &hang, bound))
        .harness()
        .unwrap();
    let agent = create_agent_with("o", &h, deps(planner, synthesizer()));
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        agent.run(OrchestratorState::new("g")),
    )
    .await
    .expect("the bound ends the task")
    .unwrap();
    assert_eq!(out.signal, signals::DONE);
    let [failure] = &out.state.failures[..] else {
        panic!("{:?}", out.state.failures)
    };
    assert_eq!(failure.task, "h");
    assert!(!failure.passed_deadline(), "{failure:?}");
    assert_eq!(out.state.replans.len(), 1);
    assert_eq!(seen.runs("q"), 1);
    failure.error.clone()
}

#[tokio::test]
async fn a_result_that_reports_failure_is_a_failure() {
    let seen = Arc::new(Seen::default());
    let refuse = worker(
        &job_loop(Arc::clone(&seen), false),
        |t: &TaskInput| Job {
            id: t.task.id.clone(),
            ..Job::default()
        },
        |t, _| Err(format!("{} has no evidence", t.task.id)),
    );
    let planner = ScriptedModel::new([
        Expect::any().reply(says(plan(&[("a", "judge", &[])]))),
        Expect::any()
            .last_message_contains("a (judge): a has no evidence")
            .reply(says(plan(&[("a2", "work", &[])]))),
    ]);
    let h = Orchestrator::new()
        .role("judge", "judges", refuse)
        .role("work", "does work", job_worker(&seen, false))
        .harness()
        .unwrap();
    let out = create_agent_with("o", &h, deps(planner, synthesizer()))
        .run(OrchestratorState::new("g"))
        .await
        .unwrap();
    assert_eq!(out.signal, signals::DONE);
    assert!(!out.state.results.contains_key("a"));
    assert_eq!(out.state.failures[0].error, "a has no evidence");
}

// --- A correction during one sub-agent's approval ---

#[derive(Deserialize, JsonSchema)]
struct Query {
    q: String,
}

struct Search(Arc<AtomicUsize>);

#[async_trait::async_trait]
impl Tool for Search {
    type Args = Query;
    type Output = String;
    type Error = String;
    fn name(&self) -> &str {
        "search"
    }
    fn description(&self) -> &str {
        "Searches the web."
    }
    async fn call(&self, args: Query) -> Result<String, String> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(format!("results for {}", args.q))
    }
}

fn chat_worker(
    loop_: &Harness<AgentChat, ModelDeps>,
    model: Arc<ScriptedModel>,
) -> harness_recipes::orchestrator::Worker<AgentChat, ModelDeps> {
    worker_with_slots(
        loop_,
        ModelDepsAgent {
            model,
            summarizer: None,
        },
        |_: &OrchestratorDeps| NoSlots::none(),
        |t: &TaskInput| AgentChat::with_task(t.task.instructions.clone()),
        |t, out| {
            out.state
                .memory
                .answer()
                .ok_or_else(|| format!("{} ended without an answer", t.task.id))
        },
    )
}

#[tokio::test]
async fn a_correction_during_one_sub_agents_approval_steers_that_sub_agent_only() {
    const CORRECTION: &str = "search the archive instead";
    let searches = Arc::new(AtomicUsize::new(0));
    let researcher =
        AgentLoop::<AgentChat, ModelDeps>::new(ToolSet::new().with(Search(Arc::clone(&searches))))
            .policy("search", Policy::ask())
            .builder()
            .build()
            .unwrap();
    let writer = AgentLoop::<AgentChat, ModelDeps>::new(ToolSet::new())
        .builder()
        .build()
        .unwrap();
    let research_model = Arc::new(ScriptedModel::new([
        Expect::any().reply(ModelResponse::from_tool_calls([ToolCall::new(
            "call_1",
            "search",
            json!({ "q": "tides" }),
        )])),
        Expect::any()
            .any_message_contains(CORRECTION)
            .reply(says("the archive says: the Moon")),
    ]));
    let writer_model = Arc::new(ScriptedModel::new([Expect::any().reply(says("a draft"))]));
    let h = Orchestrator::new()
        .role(
            "research",
            "finds facts",
            chat_worker(&researcher, Arc::clone(&research_model)),
        )
        .role(
            "write",
            "writes",
            chat_worker(&writer, Arc::clone(&writer_model)),
        )
        .harness()
        .unwrap();
    let planner = ScriptedModel::new([Expect::any().reply(says(plan(&[
        ("facts", "research", &[]),
        ("draft", "write", &[]),
    ])))]);
    let agent = create_agent_with("o", &h, deps(planner, synthesizer()));
    let mut run = agent.run(OrchestratorState::new("explain tides"));
    let interrupt = (&mut run).await.unwrap().interrupt.unwrap();
    assert_eq!(interrupt.path.to_string(), "task#0/task");
    assert_eq!(interrupt.payload["calls"][0]["call_id"], "call_1");
    let answer = Decisions::new().decide(
        "call_1",
        Decision::Correct {
            message: CORRECTION.into(),
        },
    );
    run.resume(answer, &interrupt.id).unwrap();
    let out = run.await.unwrap();
    assert_eq!(out.signal, signals::DONE);
    assert_eq!(
        out.state.results["facts"].output,
        "the archive says: the Moon"
    );
    assert_eq!(out.state.results["draft"].output, "a draft");
    assert_eq!(
        searches.load(Ordering::SeqCst),
        0,
        "the corrected call did not run"
    );
    let seen_by = |m: &ScriptedModel| {
        m.requests()
            .iter()
            .any(|r| serde_json::to_string(r).unwrap().contains(CORRECTION))
    };
    assert!(seen_by(&research_model), "the researcher was steered");
    assert!(
        !seen_by(&writer_model),
        "the writer never saw the correction"
    );
    assert_eq!(writer_model.requests().len(), 1);
}

#[test]
fn the_loop_draws_each_role_nested_in_the_task_step() {
    let seen = Arc::new(Seen::default());
    let h = Orchestrator::new()
        .role("work", "does work", job_worker(&seen, false))
        .role("flaky", "fails once", job_worker(&seen, true))
        .harness()
        .unwrap();
    let mermaid = h.to_mermaid();
    for needle in [
        "\"task: flaky (sub-agent)\"",
        "\"task: work (sub-agent)\"",
        "|\"replan\"|",
        "|\"gave_up\"|",
        "|\"synthesize\"|",
    ] {
        assert!(mermaid.contains(needle), "{needle} in {mermaid}");
    }
}
