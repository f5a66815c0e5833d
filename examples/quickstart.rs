//! Quickstart: an agent that thinks, calls tools, thinks again and completes.
//!
//! ```text
//! think ──call_tools──▶ call_tools ──▶ think ──complete──▶ end
//! ```
//!
//! Runs offline on a scripted model: `cargo run -p harness-examples --example quickstart`.
//!
//! The agent (its state, steps, weather tool and offline script) is in the
//! examples' library, [`harness_examples::quickstart_agent`]
//! (`quickstart_agent.rs`), which `serve` serves too; this file runs it and
//! prints what it does.

use harness::llm::{ContentPart, Message};
use harness::{RunEvent, create_agent_with};
use harness_examples::args::{Args, Usage};
use harness_examples::quickstart_agent::{self, Chat, DepsAgent};

const USAGE: Usage = Usage {
    synopsis: "usage: quickstart",
    options: "Takes no arguments: runs the agent offline on a scripted model, or on the \
              model HARNESS_PROVIDER=openai|anthropic|gemini names.",
};

#[tokio::main]
async fn main() {
    let mut args = Args::from_env(USAGE);
    if let Some(arg) = args.next() {
        args.unknown(&arg);
    }
    if let Err(e) = run().await {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let harness = quickstart_agent::harness().build()?;
    println!("The loop:\n{}", harness.to_mermaid());

    // HARNESS_PROVIDER=openai|anthropic|gemini runs the same loop on a real model.
    let model = harness_examples::providers_select::model_from_env(quickstart_agent::script())?;
    let agent = create_agent_with("quickstart", &harness, DepsAgent { model });

    let question = "Is it warmer in Paris or in Oslo right now?";
    println!("user: {question}");
    let run = agent.run(Chat {
        messages: vec![Message::user(question)],
        model_calls: 0,
    });
    let mut events = run.events();
    let printer = tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            if let RunEvent::StepFinished {
                step,
                update,
                signal,
                elapsed,
                ..
            } = event
            {
                for m in update.messages.unwrap_or_default() {
                    for call in m.tool_calls() {
                        println!("  [{step}] model calls {}({})", call.name, call.arguments);
                    }
                    for part in &m.content {
                        if let ContentPart::ToolResult(r) = part {
                            println!("  [{step}] {} returns {}", r.name, r.content);
                        }
                    }
                    let text = m.text();
                    if !text.is_empty() {
                        println!("  [{step}] {:?}: {text}", m.role);
                    }
                }
                let to = signal.map(|s| format!(" -> {s}")).unwrap_or_default();
                println!("  [{step}] done in {elapsed:?}{to}");
            }
        }
    });

    let outcome = run.await?;
    printer.await?;
    let answer = outcome
        .state
        .messages
        .last()
        .map(Message::text)
        .unwrap_or_default();
    println!(
        "outcome: {} after {} steps and {} model calls",
        outcome.signal, outcome.steps, outcome.state.model_calls
    );
    println!("assistant: {answer}");
    Ok(())
}
