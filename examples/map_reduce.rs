//! Map-reduce: one branch per document, a model call in each, two at a
//! time, then a join that combines the summaries.
//!
//! ```text
//! split ══docs: summarise, 2 at a time══▶ summarise#0 … summarise#4 ──▶ combine ──▶ end
//! ```
//!
//! `cargo run -p harness-examples --example map_reduce` runs offline, on a
//! scripted model; `HARNESS_PROVIDER=openai|anthropic|gemini` runs the same
//! loop on a real one. The run's events are printed as they happen, each
//! with the path of the task it comes from (`summarise#2` is the third
//! branch), then the final state: the summaries are in document order,
//! whichever branch finished first. With `--tokens`, the text the model
//! streams to each branch is printed too, as it comes.

use async_trait::async_trait;
use harness::llm::{
    Expect, LanguageModel, ModelError, ModelRequest, ModelResponse, ModelStream, ScriptedModel,
    StopReason, StreamEvent,
};
use harness::{
    Context, Cx, Harness, HarnessState, JsonSchema, RunEvent, StepResult, TaskPath,
    create_agent_with, schemars,
};
use harness_examples::args::{Args, Usage};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

/// A document to summarise: the fan-out's item, one per branch.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
struct Doc {
    title: String,
    text: String,
}

/// The loop's state. The branches all write `summaries` and `model_calls`,
/// so both have reducers that merge (a `replace` field written by parallel
/// branches is refused when the loop is built).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
struct Digest {
    docs: Vec<Doc>,
    /// `title: summary`, one per document, in document order.
    #[field(reduce = append)]
    summaries: Vec<String>,
    #[field(reduce = add)]
    model_calls: u32,
    /// Written by the join alone.
    combined: String,
}

/// What the steps depend on.
#[derive(Context)]
struct Deps {
    /// The model, chosen per agent.
    #[slot(agent)]
    model: Arc<dyn LanguageModel>,
}

/// Branches at once.
const LIMIT: usize = 2;

/// A branch: one document in, its summary out.
async fn summarise(doc: Doc, _: Arc<Digest>, cx: Cx<Deps>) -> StepResult<DigestUpdate> {
    let request = ModelRequest::builder()
        .system("Summarise the document in one short sentence.")
        .user(format!("Document: {}\n\n{}", doc.title, doc.text))
        .build();
    let answer = cx.complete(&*cx.model, &request).await?;
    let summary = answer.text().trim().to_string();
    cx.emit(
        "summary",
        serde_json::json!({ "title": doc.title, "words": summary.split_whitespace().count() }),
    );
    Ok(DigestUpdate::new()
        .summaries(vec![format!("{}: {summary}", doc.title)])
        .model_calls(1))
}

/// The join: runs once, on the state with every branch's update merged.
async fn combine(digest: Arc<Digest>, cx: Cx<Deps>) -> StepResult<DigestUpdate> {
    let request = ModelRequest::builder()
        .system("Combine these summaries into one paragraph of two sentences at most.")
        .user(format!("Summaries:\n{}", digest.summaries.join("\n")))
        .build();
    let answer = cx.complete(&*cx.model, &request).await?;
    Ok(DigestUpdate::new()
        .combined(answer.text().trim().to_string())
        .model_calls(1))
}

fn docs() -> Vec<Doc> {
    [
        (
            "tides",
            "Tides are the rise and fall of sea levels caused by the gravity of the Moon and the Sun acting on the rotating Earth.",
        ),
        (
            "sourdough",
            "Sourdough bread rises thanks to a culture of wild yeast and lactic acid bacteria, which also gives it its sour taste.",
        ),
        (
            "rust",
            "Rust is a programming language whose ownership rules let the compiler rule out data races and use-after-free bugs.",
        ),
        (
            "bees",
            "Honey bees tell each other where flowers are with a waggle dance whose angle and length encode direction and distance.",
        ),
        (
            "glaciers",
            "Glaciers form where more snow falls in winter than melts in summer, compressing over years into flowing ice.",
        ),
    ]
    .into_iter()
    .map(|(title, text)| Doc {
        title: title.into(),
        text: text.into(),
    })
    .collect()
}

/// `text` as a model streams it: a word at a time.
fn words(text: &str) -> Vec<StreamEvent> {
    let mut events: Vec<StreamEvent> = text
        .split_inclusive(' ')
        .map(|word| StreamEvent::TextDelta { text: word.into() })
        .collect();
    events.push(StreamEvent::Finish {
        stop_reason: StopReason::EndTurn,
    });
    events
}

/// Offline answers. The branches ask at the same time, in any order, so
/// each document has a scripted model of its own, picked by the title the
/// request names; every answer comes after a short delay, as a remote
/// model's would, so the branches visibly overlap.
struct Offline {
    by_title: Vec<(String, ScriptedModel)>,
    combine: ScriptedModel,
}

impl Offline {
    fn new() -> Self {
        let summaries = [
            (
                "tides",
                "The Moon's and Sun's gravity make the seas rise and fall.",
            ),
            (
                "sourdough",
                "Wild yeast and bacteria leaven sourdough and make it sour.",
            ),
            (
                "rust",
                "Rust's ownership rules let its compiler prevent memory and data-race bugs.",
            ),
            (
                "bees",
                "Bees dance to tell each other the direction and distance of flowers.",
            ),
            (
                "glaciers",
                "Glaciers are years of unmelted snow compressed into moving ice.",
            ),
        ];
        let by_title = summaries
            .into_iter()
            .map(|(title, summary)| {
                let turn = Expect::any()
                    .last_message_contains(format!("Document: {title}"))
                    .stream(words(summary));
                (title.to_string(), ScriptedModel::new([turn]))
            })
            .collect();
        let combine = ScriptedModel::new([Expect::any()
            .last_message_contains("Summaries:\ntides: ")
            .last_message_contains("glaciers: ")
            .stream(words(
                "Natural forces shape tides and glaciers, and living things from yeast to bees work in concert. Rust brings the same discipline to software.",
            ))]);
        Self { by_title, combine }
    }

    fn pick(&self, request: &ModelRequest) -> &ScriptedModel {
        let text = request.last_message().map(|m| m.text()).unwrap_or_default();
        self.by_title
            .iter()
            .find(|(title, _)| text.starts_with(&format!("Document: {title}\n")))
            .map_or(&self.combine, |(_, model)| model)
    }
}

#[async_trait]
impl LanguageModel for Offline {
    async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        tokio::time::sleep(Duration::from_millis(50)).await;
        self.pick(request).complete(request).await
    }

    async fn stream(&self, request: &ModelRequest) -> Result<ModelStream, ModelError> {
        tokio::time::sleep(Duration::from_millis(50)).await;
        self.pick(request).stream(request).await
    }

    fn provider(&self) -> &str {
        "scripted"
    }

    fn model_name(&self) -> &str {
        "scripted"
    }
}

/// `main` for the run's own loop, else the task's path.
fn at(path: &TaskPath) -> String {
    if path.is_root() {
        "main".into()
    } else {
        path.to_string()
    }
}

const USAGE: Usage = Usage {
    synopsis: "usage: map_reduce [--tokens]",
    options: "  --tokens  print the text the model streams to each branch, as it comes",
};

#[tokio::main]
async fn main() {
    // The arguments first: `--help` or a wrong one prints nothing else.
    let mut tokens = false;
    let mut args = Args::from_env(USAGE);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--tokens" => tokens = true,
            other => args.unknown(other),
        }
    }
    if let Err(e) = run(tokens).await {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

async fn run(tokens: bool) -> Result<(), Box<dyn std::error::Error>> {
    let harness = Harness::<Digest, Deps>::builder()
        .step("split")
        .route(|_: &Digest| "docs")
        .on("docs")
        .fan_out("summarise", |d: &Digest| d.docs.clone())
        .limit(LIMIT)
        .join("combine")
        .step("summarise")
        .run_each(summarise)
        .writes(["summaries", "model_calls"])
        .next("combine")
        .step("combine")
        .run(combine)
        .end()
        .start("split")
        .build()?;
    println!("The loop:\n{}", harness.to_mermaid());

    // HARNESS_PROVIDER=openai|anthropic|gemini runs the same loop on a real model.
    let model = harness_examples::providers_select::model_from_env(ScriptedModel::default())?;
    let model: Arc<dyn LanguageModel> = if model.provider() == "scripted" {
        Arc::new(Offline::new())
    } else {
        model
    };
    let agent = create_agent_with("map_reduce", &harness, DepsAgent { model });

    let docs = docs();
    println!("{} documents, {LIMIT} branches at a time", docs.len());
    let run = agent.run(Digest {
        docs,
        ..Digest::default()
    });
    // The model's text comes as `Token` events only to those who ask.
    let mut events = if tokens {
        run.events_with_tokens()
    } else {
        run.events()
    };
    let printer = tokio::spawn(async move {
        let (mut in_flight, mut peak) = (0u32, 0u32);
        while let Some(event) = events.recv().await {
            match event {
                RunEvent::Forked { path, branches, .. } => {
                    let names: Vec<String> = branches.iter().map(ToString::to_string).collect();
                    println!("[{}] forked: {}", at(&path), names.join(" "));
                }
                RunEvent::StepStarted { path, step, .. } if !path.is_root() => {
                    in_flight += 1;
                    peak = peak.max(in_flight);
                    println!("[{}] {step} started ({in_flight} in flight)", at(&path));
                }
                RunEvent::Custom {
                    path,
                    kind,
                    payload,
                    ..
                } => println!("[{}] {kind} {payload}", at(&path)),
                RunEvent::StepFinished {
                    path,
                    step,
                    elapsed,
                    ..
                } => {
                    if !path.is_root() {
                        in_flight -= 1;
                    }
                    println!("[{}] {step} finished in {elapsed:.0?}", at(&path));
                }
                RunEvent::Joined {
                    path,
                    join,
                    branches,
                } => println!(
                    "[{}] joined {} branches at {join}",
                    at(&path),
                    branches.len()
                ),
                RunEvent::Token { path, text, .. } => {
                    println!("[{}] token {text:?}", at(&path));
                }
                RunEvent::StepFailed {
                    path, step, error, ..
                } => {
                    println!("[{}] {step} failed: {error}", at(&path));
                }
                _ => {}
            }
        }
        peak
    });

    let outcome = run.await?;
    let peak = printer.await?;
    println!("at most {peak} branches ran at once");
    println!(
        "outcome: {} after {} steps and {} model calls",
        outcome.signal, outcome.steps, outcome.state.model_calls
    );
    for summary in &outcome.state.summaries {
        println!("  summary: {summary}");
    }
    println!("combined: {}", outcome.state.combined);
    Ok(())
}
