//! A sub-agent as a step: the parent writes a brief, its `research` step
//! runs a research loop of its own (its own state type, mapped in and out
//! by code), which asks a human to approve its notes. The question pauses
//! the parent; another process answers it and the run goes on inside the
//! sub-agent, at the step that asked, without running its completed steps
//! again.
//!
//! ```text
//! plan ──▶ research ─────────────────────────────────────────────▶ write ──▶ end
//!          └ search ──▶ approve (asks) ──kept──▶ summarise ──▶ end
//!                                      └─dropped──▶ end
//! ```
//!
//! ```text
//! cargo run -p harness-examples --example sub_agent
//!     # runs until the sub-agent's approve step asks; prints the session and interrupt ids, exits
//! cargo run -p harness-examples --example sub_agent -- --resume SESSION --answer yes
//!     # a new process: loads the session, answers, goes on inside the sub-agent
//! ```
//!
//! Sessions live in a sled database (`--store DIR`, default
//! `.harness/sub_agent`). Each step prints `ran PATH/STEP` when it runs, so
//! the output of the second process shows what it ran: not `research/search`.

use harness::llm::{Expect, LanguageModel, ModelRequest, ModelResponse, ScriptedModel};
use harness::session::SessionPhase;
use harness::{
    Context, Cx, Harness, HarnessState, InterruptId, JsonSchema, SessionId, Signal, StepResult,
    SubAgent, SubOutcome, create_agent, schemars,
};
use harness_examples::args::{Args, Usage, existing_store, in_store, not_waiting};
use harness_stores::SledStore;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::Arc;

/// The parent's state: a brief on a topic.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
struct Brief {
    topic: String,
    #[field(reduce = append)]
    log: Vec<String>,
    /// What the research kept, one line per note.
    findings: Vec<String>,
    text: String,
}

/// The sub-agent's state: a research task. The parent has no field for
/// `sources`; `map_out` gets it all the same and decides what to keep.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
struct Research {
    question: String,
    #[field(reduce = append)]
    notes: Vec<String>,
    #[field(reduce = add)]
    sources: u32,
    approved: Option<bool>,
    summary: String,
}

/// What the research loop's steps depend on: the model that finds notes,
/// given when the sub-agent is made.
#[derive(Context)]
struct Researcher {
    #[slot(agent)]
    model: Arc<dyn LanguageModel>,
}

/// The notes the model finds, as a typed answer.
#[derive(Debug, Deserialize, JsonSchema)]
struct Found {
    /// Three short factual notes, one sentence each. The bounds are part of
    /// the schema, so a server that constrains its output to the schema
    /// (llama.cpp's grammar) cannot ramble past them.
    #[schemars(length(min = 1, max = 3), inner(length(min = 1, max = 160)))]
    notes: Vec<String>,
}

/// What the offline model answers: the notes a real model gave.
fn script() -> ScriptedModel {
    ScriptedModel::new([Expect::any().reply(ModelResponse::from_text(
        serde_json::json!({ "notes": [
            "tides: caused by the Moon's and the Sun's gravity",
            "tides: two highs and two lows a day on most coasts",
            "tides: spring tides at new and full moon"
        ]})
        .to_string(),
    ))])
}

/// Prints which step ran, and where, so the output shows what each process
/// ran.
fn ran<C>(cx: &Cx<C>, what: &str) {
    let at = if cx.path().is_root() {
        cx.step().to_string()
    } else {
        format!("{}/{}", cx.path(), cx.step())
    };
    println!("  ran {at}{what} (process {})", std::process::id());
}

async fn plan(brief: Arc<Brief>, cx: Cx<()>) -> StepResult<BriefUpdate> {
    ran(&cx, "");
    Ok(BriefUpdate::new().log(vec![format!("plan a brief on {}", brief.topic)]))
}

/// The sub-agent's first step: asks the model for notes. Its work (a
/// model call) would be lost if resuming ran it again.
async fn search(research: Arc<Research>, cx: Cx<Researcher>) -> StepResult<ResearchUpdate> {
    ran(&cx, "");
    let request = ModelRequest::builder()
        .system("You are a researcher. Answer with three short factual notes, as JSON.")
        .user(format!("Notes on: {}", research.question))
        .max_tokens(400)
        .build();
    let found = cx.complete_typed::<Found>(&*cx.model, &request).await?;
    let notes = found.value.notes;
    Ok(ResearchUpdate::new()
        .sources(u32::try_from(notes.len()).unwrap_or(u32::MAX))
        .notes(notes))
}

/// Asks a human whether to keep the notes: `yes` or `no`, anything else is
/// refused and the question stays open.
async fn approve(research: Arc<Research>, cx: Cx<Researcher>) -> StepResult<ResearchUpdate> {
    ran(&cx, "");
    let keep: bool = cx.interrupt_with(
        serde_json::json!({
            "question": format!("keep these {} notes?", research.notes.len()),
            "notes": research.notes,
        }),
        |answer: String| match answer.trim().to_ascii_lowercase().as_str() {
            "yes" | "y" => Ok(true),
            "no" | "n" => Ok(false),
            other => Err(format!("answer yes or no, not {other:?}")),
        },
    )?;
    Ok(ResearchUpdate::new().approved(Some(keep)))
}

async fn summarise(research: Arc<Research>, cx: Cx<Researcher>) -> StepResult<ResearchUpdate> {
    ran(&cx, "");
    Ok(ResearchUpdate::new().summary(format!(
        "{} notes from {} sources",
        research.notes.len(),
        research.sources
    )))
}

async fn write(brief: Arc<Brief>, cx: Cx<()>) -> StepResult<BriefUpdate> {
    ran(&cx, "");
    let text = if brief.findings.is_empty() {
        format!("{}: nothing approved to report.", brief.topic)
    } else {
        format!("{}: {}", brief.topic, brief.findings.join("; "))
    };
    Ok(BriefUpdate::new().text(text).log(vec!["write".into()]))
}

/// The research loop, a harness of its own.
fn research() -> Result<Harness<Research, Researcher>, harness::LoopValidationError> {
    Harness::<Research, Researcher>::builder()
        .step("search")
        .run(search)
        .next("approve")
        .step("approve")
        .run(approve)
        .route(|r: &Research| {
            if r.approved == Some(true) {
                "kept"
            } else {
                "dropped"
            }
        })
        .on("kept")
        .to("summarise")
        .on("dropped")
        .end()
        .step("summarise")
        .run(summarise)
        .end()
        .start("search")
        .build()
}

/// The parent: its `research` step is the research loop, mapped in from
/// the brief and out into an update of it.
fn brief(
    store: SledStore,
    model: Arc<dyn LanguageModel>,
) -> Result<Harness<Brief>, harness::LoopValidationError> {
    let sub = SubAgent::with_slots(
        &research()?,
        ResearcherAgent { model },
        |_: &()| (),
        |b: &Brief| Research {
            question: b.topic.clone(),
            ..Research::default()
        },
        |_: &Brief, done: SubOutcome<Research>| {
            let research = done.state;
            let kept = research.approved == Some(true);
            let line = if kept {
                research.summary
            } else {
                format!("{} notes dropped", research.notes.len())
            };
            BriefUpdate::new()
                .findings(if kept { research.notes } else { vec![] })
                .log(vec![format!(
                    "research ended with `{}`: {line}",
                    done.signal
                )])
        },
    );
    Harness::<Brief>::builder()
        .step("plan")
        .run(plan)
        .next("research")
        .step("research")
        .sub_agent(sub)
        .next("write")
        .step("write")
        .run(write)
        .end()
        .start("plan")
        .store(store)
        .build()
}

const USAGE: Usage = Usage {
    synopsis: "usage: sub_agent [--store DIR]
       sub_agent [--store DIR] --resume SESSION --answer yes|no [--interrupt ID]",
    options: "  --store DIR       the sled store of the sessions (default .harness/sub_agent);
                    a new run creates it, --resume reads an existing one
  --resume SESSION  answer the question SESSION waits on, in this process
  --answer yes|no   whether the sub-agent keeps its notes
  --interrupt ID    the question answered (default: the one SESSION waits on)",
};

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// An answer to a stored session's question.
struct Resume {
    session: SessionId,
    answer: String,
    interrupt: Option<InterruptId>,
}

/// The store's directory, and the answer to give (none: a new run); a
/// usage error exits.
fn options() -> (PathBuf, Option<Resume>) {
    let mut store_dir = PathBuf::from(".harness/sub_agent");
    let (mut resume, mut answer, mut interrupt) = (None, None, None);
    let mut args = Args::from_env(USAGE);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--store" => store_dir = PathBuf::from(args.value("--store")),
            "--resume" => resume = Some(SessionId::from(args.value("--resume"))),
            "--answer" => answer = Some(args.value("--answer")),
            "--interrupt" => interrupt = Some(InterruptId::from(args.value("--interrupt"))),
            other => args.unknown(other),
        }
    }
    let resume = match (resume, answer) {
        (None, None) if interrupt.is_none() => None,
        (Some(session), Some(answer)) => {
            // The approve step refuses anything else too; checking here
            // refuses it before the session is touched.
            if !["yes", "y", "no", "n"].contains(&answer.trim().to_ascii_lowercase().as_str()) {
                USAGE.fail(format!("answer yes or no, not {answer:?}"));
            }
            Some(Resume {
                session,
                answer,
                interrupt,
            })
        }
        (Some(_), None) => USAGE.fail("--resume needs --answer yes|no"),
        (None, _) => USAGE.fail("--answer and --interrupt go with --resume SESSION"),
    };
    (store_dir, resume)
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let (store_dir, resume) = options();
    // Only a new run may create the store: a resumed session must be in
    // one already.
    if resume.is_some() {
        existing_store(&store_dir)?;
    }

    // HARNESS_PROVIDER=openai|anthropic|gemini: the research on a real model.
    let model = harness_examples::providers_select::model_from_env(script())?;
    let harness = brief(SledStore::open(&store_dir)?, model)?;
    let agent = create_agent("brief", &harness);
    let outcome = match resume {
        None => {
            println!("The loop:\n{}", harness.to_mermaid());
            agent
                .run(Brief {
                    topic: "tides".into(),
                    ..Brief::default()
                })
                .await?
        }
        Some(Resume {
            session,
            answer,
            interrupt,
        }) => {
            // The session knows what it waits for.
            let head = agent
                .session(&session)
                .await
                .map_err(|e| in_store(e, &store_dir))?;
            let id = match (interrupt, head.phase) {
                (Some(id), SessionPhase::Interrupted { .. }) => id,
                (None, SessionPhase::Interrupted { interrupt }) => interrupt.id,
                (_, other) => return Err(not_waiting(&session, &other).into()),
            };
            println!("resuming session {session} with answer {answer:?}");
            agent.resume(answer, &session, &id).await?.await?
        }
    };

    if outcome.signal == Signal::INTERRUPT {
        let i = outcome
            .interrupt
            .as_ref()
            .ok_or("an interrupt outcome carries its interrupt")?;
        println!("paused inside {}/{}: {}", i.path, i.step, i.payload);
        println!("session:   {}", outcome.session_id);
        println!("interrupt: {}", i.id);
        println!(
            "continue in another process:\n  cargo run -p harness-examples --example sub_agent -- --store {} --resume {} --answer yes",
            store_dir.display(),
            outcome.session_id
        );
    } else {
        println!(
            "completed with `{}` after {} steps in this process",
            outcome.signal, outcome.steps
        );
        for line in &outcome.state.log {
            println!("  log: {line}");
        }
        println!("brief: {}", outcome.state.text);
        let history = agent.history(&outcome.session_id).await?;
        let steps: Vec<String> = history
            .iter()
            .map(|c| {
                if c.path.is_root() {
                    c.step.clone()
                } else {
                    format!("{}/{}", c.path, c.step)
                }
            })
            .collect();
        println!("checkpoints: {}", steps.join(" → "));
    }
    Ok(())
}
