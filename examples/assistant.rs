//! A terminal assistant built on the agent kit (`harness-kit`): local
//! tools (read a file, list a directory, run a shell command), approval of
//! shell commands on the terminal, a session that survives the process.
//!
//! ```text
//! cargo run -p harness-examples --example assistant
//!     # offline (scripted model); asks before each shell command:
//!     # [y]es [n]o [a]lways [e]dit [c]orrect; end input (Ctrl-D) to stop at a question
//! cargo run -p harness-examples --example assistant -- --resume SESSION
//!     # a new process: answers the question the session stopped at, goes on
//! HARNESS_PROVIDER=anthropic cargo run -p harness-examples --example assistant -- --task "What is in src/?"
//! cargo run -p harness-examples --example assistant -- --prices prices.json
//!     # prices per million tokens by model name: {"claude-sonnet-4-5": {"input": 3, "output": 15}}
//! ```
//!
//! The file tools ([`harness_kit::fs`]) read and list inside the working
//! directory without asking; a path outside it (absolute, or `..` above
//! it) is asked about first, and a link that leads out, `/proc`, devices
//! and FIFOs are refused whatever the answer. A shell command
//! ([`harness_kit::shell`]) is one program with its arguments, run
//! without a shell and without the process's secrets in its environment;
//! every one is asked about. "Always" remembers exactly that command line
//! (`shell: wc -l README.md`; not `wc -w`, and never `wc -l README.md;
//! touch x`, which is refused), in the session's state, so it holds after
//! a resume in another process.
//!
//! Sessions live in a sled database (`--store DIR`, default
//! `.harness/assistant`). Usage per model is printed at the end.
//!
//! The loop (tools, policies, limits, memory budget) is in the examples'
//! library, [`harness_examples::assistant_agent`] (`assistant_agent.rs`),
//! which `serve` serves too; this file is the terminal around it.

use harness::llm::{Expect, ModelResponse, PriceTable, Role, ScriptedModel, ToolCall, Usage};
use harness::session::SessionPhase;
use harness::{RunError, RunEvent, SessionId, create_agent_with};
use harness_examples::args::{self, Args, existing_store, in_store, not_waiting};
use harness_examples::assistant_agent;
use harness_kit::{
    AgentChat, ApprovalRequest, Decision, Decisions, MEMORY_EVICTED, ModelDepsAgent, PendingCall,
    UnitBody, usage_report,
};
use harness_stores::SledStore;
use serde_json::json;
use std::collections::BTreeSet;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

const DEFAULT_TASK: &str =
    "What is in this directory, and how long is README.md (lines and words)?";

/// The offline model's turns, from turn `skip` on (a resumed session has
/// taken the first ones).
fn script(skip: usize) -> ScriptedModel {
    let shell = |id: &str, command: &str| ToolCall::new(id, "shell", json!({ "command": command }));
    let turns = [
        Expect::any().reply(
            ModelResponse::from_tool_calls([
                ToolCall::new("call_1", "list_dir", json!({ "path": "." })),
                shell("call_2", "wc -l README.md"),
            ])
            .with_usage(Usage::new(412, 38)),
        ),
        Expect::any().reply(
            ModelResponse::from_tool_call(shell("call_3", "grep -c agent README.md"))
                .with_usage(Usage::new(530, 21)),
        ),
        // The same command line again: "always" for it lets it run unasked.
        Expect::any().reply(
            ModelResponse::from_tool_call(shell("call_4", "wc -l README.md"))
                .with_usage(Usage::new(601, 19)),
        ),
        Expect::any().reply(
            ModelResponse::from_text(
                "I listed the directory, counted README.md's lines and its mentions of \
                 \"agent\", and counted the lines again: the results are above.",
            )
            .with_usage(Usage::new(668, 33)),
        ),
    ];
    ScriptedModel::new(turns.into_iter().skip(skip))
}

const USAGE: args::Usage = args::Usage {
    synopsis: "usage: assistant [--store DIR] [--prices FILE] [--task TEXT]
       assistant [--store DIR] [--prices FILE] --resume SESSION",
    options: "  --store DIR       the sled store of the sessions (default .harness/assistant);
                    a new run creates it, --resume reads an existing one
  --prices FILE     prices per million tokens by model name, as JSON:
                    {\"claude-sonnet-4-5\": {\"input\": 3, \"output\": 15}}
  --task TEXT       what to ask the assistant (a new session)
  --resume SESSION  answer the question SESSION stopped at, and go on",
};

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

type Error = Box<dyn std::error::Error>;

async fn run() -> Result<(), Error> {
    let mut store_dir = PathBuf::from(".harness/assistant");
    let (mut task, mut resume, mut prices) = (None, None, None);
    let mut args = Args::from_env(USAGE);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--store" => store_dir = PathBuf::from(args.value("--store")),
            "--task" => task = Some(args.value("--task")),
            "--resume" => resume = Some(SessionId::from(args.value("--resume"))),
            "--prices" => prices = Some(args.value("--prices")),
            other => args.unknown(other),
        }
    }
    if task.is_some() && resume.is_some() {
        USAGE.fail("--task starts a new session; a resumed one goes on with its own task");
    }
    let task = task.unwrap_or_else(|| DEFAULT_TASK.to_owned());
    // Only a new session may create the store: a resumed one must be in
    // one already.
    if resume.is_some() {
        existing_store(&store_dir)?;
    }

    // A JSON object of model name to prices per million tokens, e.g.
    // {"gpt-4o-mini": {"input": 0.15, "output": 0.6}}.
    let prices: Option<PriceTable> = match prices {
        Some(path) => {
            let text = std::fs::read_to_string(&path)
                .map_err(|e| format!("cannot read the price table {path}: {e}"))?;
            Some(
                serde_json::from_str(&text)
                    .map_err(|e| format!("the price table {path} is not valid: {e}"))?,
            )
        }
        None => None,
    };

    // The working directory is the root: inside it files are read and
    // listed unasked; outside it only with the user's approval.
    let harness = assistant_agent::agent_loop(Path::new("."), "a careful assistant in a terminal")?
        .builder()
        .store(SledStore::open(&store_dir)?)
        .build()?;

    // A resumed session has taken some turns of the offline script.
    let taken = match &resume {
        Some(session) => {
            let probe = create_agent_with("assistant", &harness, slots(script(0))?);
            let state = probe
                .state_at(session, None)
                .await
                .map_err(|e| in_store(e, &store_dir))?;
            state.memory.turns() as usize
        }
        None => 0,
    };
    let agent = create_agent_with("assistant", &harness, slots(script(taken))?);
    let mut shown = Shown::default();

    let mut run = match resume {
        None => agent.run(AgentChat::with_task(task)),
        Some(session) => {
            let stored = agent
                .session(&session)
                .await
                .map_err(|e| in_store(e, &store_dir))?;
            let SessionPhase::Interrupted { interrupt } = stored.phase else {
                return Err(not_waiting(&session, &stored.phase).into());
            };
            let state = agent.state_at(&session, None).await?;
            show(&state, &mut shown);
            let request: ApprovalRequest = serde_json::from_value(interrupt.payload)?;
            let Some(answer) = ask(&request)? else {
                paused(&session, &store_dir);
                return Ok(());
            };
            agent.resume(answer, &session, &interrupt.id).await?
        }
    };

    loop {
        let events = run.events();
        let printer = tokio::spawn(print_evictions(events));
        let settled = run.outcome().await;
        printer.abort();
        let (id, request) = match settled {
            Ok(outcome) => {
                show(&outcome.state, &mut shown);
                let Some(interrupt) = outcome.interrupt else {
                    finish(&outcome.state, outcome.signal.as_str(), prices.as_ref());
                    return Ok(());
                };
                let request: ApprovalRequest = serde_json::from_value(interrupt.payload)?;
                (interrupt.id, request)
            }
            // The answer did not fit (edited arguments against the schema):
            // the session still waits on the same question.
            Err(RunError::AnswerRejected { reason, .. }) => {
                println!("  ! {reason}");
                let interrupt = run
                    .pending_interrupt()
                    .ok_or("a rejected answer leaves the question pending")?;
                let request: ApprovalRequest = serde_json::from_value(interrupt.payload.clone())?;
                (interrupt.id.clone(), request)
            }
            Err(e) => return Err(e.into()),
        };
        let Some(answer) = ask(&request)? else {
            paused(run.session_id(), &store_dir);
            return Ok(());
        };
        run.resume(answer, &id)?;
    }
}

fn slots(script: ScriptedModel) -> Result<ModelDepsAgent, Error> {
    // HARNESS_PROVIDER=openai|anthropic|gemini runs the same loop on a real model.
    let model = harness_examples::providers_select::model_from_env(script)?;
    Ok(ModelDepsAgent {
        model,
        summarizer: None,
    })
}

/// What of the transcript has been printed.
#[derive(Default)]
struct Shown {
    units: BTreeSet<u64>,
    results: BTreeSet<(u64, String)>,
}

/// Prints what of the transcript is new: messages, calls, then each call's
/// result once it has one.
fn show(state: &AgentChat, shown: &mut Shown) {
    for unit in state.memory.transcript().units() {
        let new = shown.units.insert(unit.id);
        match &unit.body {
            UnitBody::Message { message } if new => {
                let who = match message.role {
                    Role::User => "user",
                    Role::System => "system",
                    Role::Assistant => "assistant",
                    Role::Tool => "tool",
                };
                println!("{who}: {}", message.text());
            }
            UnitBody::Summary { replaced, .. } if new => {
                println!("  [memory] {replaced} earlier parts summarized")
            }
            UnitBody::Turn(turn) => {
                let text = turn.message.text();
                if new && !text.is_empty() {
                    println!("assistant: {text}");
                }
                for call in turn.calls() {
                    if new {
                        println!("  → {} {}({})", call.id, call.name, call.arguments);
                    }
                    let Some(result) = turn.result(&call.id) else {
                        continue;
                    };
                    if shown.results.insert((unit.id, call.id.clone())) {
                        let mark = if result.is_error { "✗" } else { "←" };
                        println!("  {mark} {}", call.id);
                        for line in result.content.lines().take(12) {
                            println!("      {line}");
                        }
                    }
                }
            }
            _ => {}
        }
    }
}

async fn print_evictions(mut events: harness::RunEvents<AgentChat>) {
    while let Some(event) = events.recv().await {
        if let RunEvent::Custom { kind, payload, .. } = event
            && &*kind == MEMORY_EVICTED
        {
            println!("  [memory] evicted to fit the budget: {payload}");
        }
    }
}

/// Reads a line; `None` at the end of input.
fn line(prompt: &str) -> Result<Option<String>, Error> {
    print!("{prompt}");
    std::io::stdout().flush()?;
    let mut text = String::new();
    if std::io::stdin().lock().read_line(&mut text)? == 0 {
        println!();
        return Ok(None);
    }
    Ok(Some(text.trim().to_owned()))
}

/// Asks about each call; `None` if the input ended.
fn ask(request: &ApprovalRequest) -> Result<Option<Decisions>, Error> {
    let mut decisions = Decisions::new();
    for call in &request.calls {
        let Some(decision) = decide(call)? else {
            return Ok(None);
        };
        decisions = decisions.decide(call.call_id.clone(), decision);
    }
    Ok(Some(decisions))
}

fn decide(call: &PendingCall) -> Result<Option<Decision>, Error> {
    println!(
        "? {} wants to run {}({})",
        call.call_id, call.tool, call.arguments
    );
    loop {
        let prompt = format!(
            "  [y]es [n]o [a]lways allow {} [e]dit [c]orrect > ",
            call.allow_key
        );
        let Some(choice) = line(&prompt)? else {
            return Ok(None);
        };
        let decision = match choice.as_str() {
            "y" | "yes" => Decision::Approve,
            "a" | "always" => Decision::AlwaysAllow,
            "n" | "no" => {
                let Some(message) = line("  why (for the model, optional) > ")? else {
                    return Ok(None);
                };
                Decision::Reject { message }
            }
            "e" | "edit" => {
                let Some(text) = line("  new arguments as JSON > ")? else {
                    return Ok(None);
                };
                match serde_json::from_str(&text) {
                    Ok(arguments) => Decision::Edit { arguments },
                    Err(e) => {
                        println!("  ! not JSON: {e}");
                        continue;
                    }
                }
            }
            "c" | "correct" => {
                let Some(message) = line("  what should it do instead > ")? else {
                    return Ok(None);
                };
                Decision::Correct { message }
            }
            _ => {
                println!("  ! answer y, n, a, e or c");
                continue;
            }
        };
        return Ok(Some(decision));
    }
}

fn paused(session: &SessionId, store: &Path) {
    println!("paused at a question; the session is saved.");
    println!("session: {session}");
    println!(
        "continue in another process:\n  cargo run -p harness-examples --example assistant -- --store {} --resume {session}",
        store.display()
    );
}

fn finish(state: &AgentChat, signal: &str, prices: Option<&PriceTable>) {
    let memory = &state.memory;
    println!(
        "ended: {signal} after {} model turns, {} ms working",
        memory.turns(),
        memory.active_ms()
    );
    if !memory.allowed().is_empty() {
        let allowed: Vec<&str> = memory.allowed().iter().map(String::as_str).collect();
        println!("always allowed in this session: {}", allowed.join(", "));
    }
    println!("usage:\n{}", usage_report(memory.usage(), prices));
}
