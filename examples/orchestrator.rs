//! The orchestrator recipe: a planner splits a goal into three tasks for
//! two sub-agents (a researcher and a writer), the two research tasks run
//! at once, one of them fails, the planner replans with the failure and
//! what is done, and a synthesizer writes the answer.
//!
//! `cargo run -p harness-examples --example orchestrator` runs offline, on
//! scripted models; `HARNESS_PROVIDER=openai|anthropic|gemini` runs the
//! same loop on a real one (no failure is staged then). The run is kept in
//! a sled store under `.harness/orchestrator`: a process killed mid-plan is
//! continued with `--resume SESSION`, which re-runs only the tasks that had
//! not completed. `--max-replans N` changes how many times the planner may
//! try again (default 3): a small local model's plans are often refused,
//! and each refusal is printed with its reasons. A run that gives up (no
//! answer) exits with status 1.

use async_trait::async_trait;
use harness::llm::{
    Expect, LanguageModel, ModelError, ModelRequest, ModelResponse, ModelStream, ScriptedModel,
};
use harness::session::{SessionConfig, SessionError};
use harness::slots::NoSlots;
use harness::{
    Context, Cx, Harness, HarnessState, JsonSchema, RunEvent, SessionId, StepResult,
    create_agent_with, schemars,
};
use harness_examples::args::{Args, Usage, existing_store, in_store};
use harness_recipes::orchestrator::{
    Orchestrator, OrchestratorDeps, OrchestratorDepsAgent, OrchestratorState, ReplanEvent,
    TaskInput, Worker, worker_with_slots,
};
use harness_stores::SledStore;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

const GOAL: &str = "Write a short explainer on why the sea has tides.";

/// A sub-agent's state: its task, the results it was given, what it wrote.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
struct Note {
    instructions: String,
    inputs: BTreeMap<String, String>,
    text: String,
}

/// What a sub-agent's step depends on: its model.
#[derive(Context)]
struct Model {
    #[slot(agent)]
    model: Arc<dyn LanguageModel>,
}

/// A sub-agent of one model call: `system` says what its role does.
fn one_call(role: &'static str, system: &'static str) -> Result<Harness<Note, Model>, Error> {
    Ok(Harness::<Note, Model>::builder()
        .step(role)
        .run(move |n: Arc<Note>, cx: Cx<Model>| ask(system, n, cx))
        .end()
        .start(role)
        .build()?)
}

async fn ask(system: &'static str, n: Arc<Note>, cx: Cx<Model>) -> StepResult<NoteUpdate> {
    let mut user = format!("Task: {}", n.instructions);
    for (id, text) in &n.inputs {
        user.push_str(&format!("\n\nResult of {id}: {text}"));
    }
    let request = ModelRequest::builder().system(system).user(user).build();
    let answer = cx.complete(&*cx.model, &request).await?;
    Ok(NoteUpdate::new().text(answer.text().trim().to_string()))
}

fn as_worker(child: &Harness<Note, Model>, model: Arc<dyn LanguageModel>) -> Worker<Note, Model> {
    worker_with_slots(
        child,
        ModelAgent { model },
        |_: &OrchestratorDeps| NoSlots::none(),
        |t: &TaskInput| Note {
            instructions: t.task.instructions.clone(),
            inputs: t.inputs.clone(),
            text: String::new(),
        },
        |t, out| {
            if out.state.text.is_empty() {
                Err(format!("{} came back empty", t.task.id))
            } else {
                Ok(out.state.text)
            }
        },
    )
}

fn says(text: &str) -> ModelResponse {
    ModelResponse::from_text(text)
}

const FIRST_PLAN: &str = r#"{"tasks": [
  {"id": "cause", "agent": "researcher", "instructions": "Find what pulls the sea into tides."},
  {"id": "rhythm", "agent": "researcher", "instructions": "Find how often tides come and go."},
  {"id": "explainer", "agent": "writer", "instructions": "Write the explainer in three sentences.", "needs": ["cause", "rhythm"]}
]}"#;

const SECOND_PLAN: &str = r#"{"tasks": [
  {"id": "rhythm", "agent": "researcher", "instructions": "Find how often tides come and go."},
  {"id": "explainer", "agent": "writer", "instructions": "Write the explainer in three sentences.", "needs": ["cause", "rhythm"]}
]}"#;

/// Offline answers. The two research tasks ask at the same time, so each
/// has a script of its own, picked by the task the request names; every
/// answer comes after a short delay, as a remote model's would. In a new
/// run, the `rhythm` task's first call fails, as a provider outage would.
struct Offline {
    by_task: Vec<(&'static str, ScriptedModel)>,
}

impl Offline {
    fn researcher(stage_failure: bool) -> Self {
        let mut rhythm = Vec::new();
        if stage_failure {
            rhythm.push(Expect::any().fail(ModelError::Overloaded {
                status: Some(529),
                message: "overloaded, staged by the example".into(),
                retry_after: None,
            }));
        }
        rhythm.push(Expect::any().reply(says(
            "Most coasts see two high and two low tides a day, about 12 hours 25 minutes apart.",
        )));
        Self {
            by_task: vec![
                (
                    "Task: Find what pulls",
                    ScriptedModel::new([Expect::any().reply(says(
                        "The Moon's gravity pulls the ocean into two bulges; the Sun adds a smaller pull.",
                    ))]),
                ),
                (
                    "Task: Find how often",
                    ScriptedModel::new(rhythm),
                ),
            ],
        }
    }

    fn writer() -> Self {
        Self {
            by_task: vec![(
                "Task: Write the explainer",
                ScriptedModel::new([Expect::any()
                    .last_message_contains("Result of cause: The Moon's gravity")
                    .last_message_contains("Result of rhythm: Most coasts")
                    .reply(says(
                        "Tides are the sea answering the Moon: its gravity pulls the ocean into two bulges, with help from the Sun. As Earth turns through both bulges, most coasts get two high tides a day. They arrive about 12 hours 25 minutes apart, because the Moon moves on a little each day.",
                    ))]),
            )],
        }
    }

    fn pick(&self, request: &ModelRequest) -> Result<&ScriptedModel, ModelError> {
        let text = request.last_message().map(|m| m.text()).unwrap_or_default();
        self.by_task
            .iter()
            .find(|(needle, _)| text.starts_with(needle))
            .map(|(_, model)| model)
            .ok_or_else(|| ModelError::other(format!("no offline answer for: {text}")))
    }
}

#[async_trait]
impl LanguageModel for Offline {
    async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        tokio::time::sleep(Duration::from_millis(300)).await;
        self.pick(request)?.complete(request).await
    }

    async fn stream(&self, request: &ModelRequest) -> Result<ModelStream, ModelError> {
        tokio::time::sleep(Duration::from_millis(300)).await;
        self.pick(request)?.stream(request).await
    }

    fn provider(&self) -> &str {
        "scripted"
    }

    fn model_name(&self) -> &str {
        "scripted"
    }
}

/// The offline planner: the first plan, or, asked after a failure, the
/// second (whichever process asks).
struct Planner(ScriptedModel);

#[async_trait]
impl LanguageModel for Planner {
    async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        let text = request.last_message().map(|m| m.text()).unwrap_or_default();
        Ok(if text.contains("These tasks of the last plan failed") {
            says(SECOND_PLAN)
        } else {
            says(FIRST_PLAN)
        })
    }

    async fn stream(&self, request: &ModelRequest) -> Result<ModelStream, ModelError> {
        let answer = self.complete(request).await?;
        self.0.push(Expect::any().reply(answer));
        self.0.stream(request).await
    }

    fn provider(&self) -> &str {
        "scripted"
    }

    fn model_name(&self) -> &str {
        "scripted"
    }
}

type Error = Box<dyn std::error::Error>;

/// How long a run's hold on its session lasts unless renewed.
const LEASE: Duration = Duration::from_secs(3);

/// Goes on with `session` where its last checkpoint left it. A process
/// that was killed still holds the session until its lease expires: wait
/// for that (a running process renews it, so this gives up after a while).
async fn recover(
    agent: &harness::Agent<OrchestratorState, OrchestratorDeps>,
    session: &SessionId,
    store_dir: &Path,
) -> Result<harness::Run<OrchestratorState, OrchestratorDeps>, Error> {
    let give_up = tokio::time::Instant::now() + 4 * LEASE;
    let mut said = false;
    loop {
        match agent.recover(session).await {
            Ok(run) => return Ok(run),
            Err(SessionError::InFlight(busy)) if tokio::time::Instant::now() < give_up => {
                if !said {
                    println!(
                        "waiting for the previous process's hold on the session to expire ({busy})"
                    );
                    said = true;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(in_store(e, store_dir)),
        }
    }
}

/// The real model `HARNESS_PROVIDER` names, else `offline`.
fn model(offline: impl LanguageModel + 'static) -> Result<Arc<dyn LanguageModel>, Error> {
    let real = harness_examples::providers_select::model_from_env(ScriptedModel::default())?;
    Ok(if real.provider() == "scripted" {
        Arc::new(offline)
    } else {
        real
    })
}

const USAGE: Usage = Usage {
    synopsis: "usage: orchestrator [--store DIR] [--resume SESSION] [--max-replans N]",
    options: "  --store DIR        the sled store of the runs (default .harness/orchestrator);
                     a new run creates it, --resume reads an existing one
  --resume SESSION   go on with a run killed mid-plan, where it stopped
  --max-replans N    how many times the planner may try again (default 3)",
};

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), Error> {
    let mut store_dir = PathBuf::from(".harness/orchestrator");
    let mut resume = None;
    let mut max_replans = Orchestrator::MAX_REPLANS;
    let mut args = Args::from_env(USAGE);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--store" => store_dir = PathBuf::from(args.value("--store")),
            "--resume" => resume = Some(SessionId::from(args.value("--resume"))),
            "--max-replans" => {
                max_replans =
                    args.number("--max-replans", "a whole number ≥ 0", |_: &usize| true);
            }
            other => args.unknown(other),
        }
    }
    // Only a new run may create the store: a resumed one must be in one
    // already.
    if resume.is_some() {
        existing_store(&store_dir)?;
    }

    let researcher = one_call(
        "research",
        "You are a researcher. Answer the task with two short factual sentences.",
    )?;
    let writer = one_call(
        "write",
        "You are a writer. Do the task using the results you are given.",
    )?;
    let harness = Orchestrator::new()
        .role(
            "researcher",
            "Finds facts; give it one question per task.",
            as_worker(&researcher, model(Offline::researcher(resume.is_none()))?),
        )
        .role(
            "writer",
            "Writes prose from the results of other tasks.",
            as_worker(&writer, model(Offline::writer())?),
        )
        .parallel(2)
        .max_replans(max_replans)
        .builder()
        .store(SledStore::open(&store_dir)?)
        // A run holds its session for this long past its last sign of
        // life: a process killed mid-plan is resumable this soon after.
        .session_config(SessionConfig {
            lease_ttl: LEASE,
            ..SessionConfig::default()
        })
        .build()?;
    println!("The loop:\n{}", harness.to_mermaid());

    let planner = Planner(ScriptedModel::new([
        Expect::any().reply(says(FIRST_PLAN)),
        Expect::any().reply(says(SECOND_PLAN)),
    ]));
    let synthesizer = ScriptedModel::new([Expect::any()
        .last_message_contains("- explainer (writer): Tides are")
        .reply(says(
            "Tides are the sea answering the Moon: its gravity (helped by the Sun's) pulls the ocean into two bulges, and as Earth turns, most coasts pass through both, so high tide comes about every 12 hours 25 minutes.",
        ))]);
    let agent = create_agent_with(
        "orchestrator",
        &harness,
        OrchestratorDepsAgent {
            planner: model(planner)?,
            synthesizer: harness_examples::providers_select::model_from_env(synthesizer)?,
        },
    );

    let run = match resume {
        None => agent.run(OrchestratorState::new(GOAL)),
        Some(session) => recover(&agent, &session, &store_dir).await?,
    };
    let session = run.session_id().clone();
    println!("session: {session}");
    let mut events = run.events();
    let printer = tokio::spawn(async move {
        while let Some(e) = events.recv().await {
            if let RunEvent::Custom { kind, payload, .. } = e {
                match &*kind {
                    "plan" => {
                        let tasks = payload["tasks"].as_array().cloned().unwrap_or_default();
                        let tasks: Vec<String> = tasks
                            .iter()
                            .map(|t| {
                                format!(
                                    "{} ({})",
                                    t["id"].as_str().unwrap_or("?"),
                                    t["agent"].as_str().unwrap_or("?")
                                )
                            })
                            .collect();
                        println!("plan {}: {}", payload["plan"], tasks.join(", "));
                    }
                    "wave" => println!("wave {}: {}", payload["wave"], payload["tasks"]),
                    "task" => match payload["status"].as_str() {
                        Some("failed") => println!(
                            "task {} failed: {}",
                            payload["task"].as_str().unwrap_or("?"),
                            payload["error"].as_str().unwrap_or("?")
                        ),
                        status => println!(
                            "task {} {}",
                            payload["task"].as_str().unwrap_or("?"),
                            status.unwrap_or("?")
                        ),
                    },
                    // Why the plan was replaced: each problem of a refused
                    // plan (a cycle, a dependency no task defines, an
                    // unknown agent) or each failed task, in order.
                    "replan" => match serde_json::from_value::<ReplanEvent>(payload) {
                        Ok(replan) => println!(
                            "replan of plan {}: {}",
                            replan.replan.plan,
                            replan.messages.join("; ")
                        ),
                        Err(e) => println!("replan (its event cannot be read: {e})"),
                    },
                    _ => {}
                }
            }
        }
    });
    let outcome = run.await?;
    printer.await?;
    println!("ended with: {}", outcome.signal);
    println!(
        "plans: {}, replans: {}",
        outcome.state.plans,
        outcome.state.replans.len()
    );
    for (id, r) in &outcome.state.results {
        println!("result {id} ({}, plan {}): {}", r.agent, r.plan, r.output);
    }
    println!(
        "see it: cargo run -p harness-cli -- studio --store {}",
        store_dir.display()
    );
    match outcome.state.answer {
        Some(answer) => {
            println!("answer: {answer}");
            Ok(())
        }
        // Given up (replans exhausted, or no answer): a failure for the
        // shell too, so a script that runs the example sees it.
        None => {
            println!("no answer (see the replans above)");
            Err(format!(
                "the orchestrator gave up (`{}`) after {} plans and {} replans, with no answer",
                outcome.signal,
                outcome.state.plans,
                outcome.state.replans.len()
            )
            .into())
        }
    }
}
