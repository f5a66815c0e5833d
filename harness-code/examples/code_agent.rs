//! A code agent: the model writes Python one cell at a time for a small data
//! task; a failing cell is diagnosed, patched and replayed (only the cells
//! the patch affects run again) until the task's check passes.
//!
//! ```text
//! resume ─▶ propose ─▶ execute ─ok─▶ check ─solved─▶ end
//!              ▲          │ failed      │ not yet
//!              │          ▼             │
//!              │      diagnose ─▶ patch ─▶ replay ─ok─▶ check
//!              └────────────────────────────────────────┘
//! ```
//!
//! Offline, on a scripted transcript (one wrong cell: a misspelled key):
//! `cargo run -p harness-code --example code_agent`. Against a real
//! model: `HARNESS_PROVIDER=openai|anthropic|gemini` (see `providers_select`).

use std::sync::Arc;

use harness::llm::{Expect, ModelResponse, ScriptedModel};
use harness_code::agent::{AgentEvent, Check, CodeAgent, CodeAgentError, latest_value};
use harness_code::kernel::KernelConfig;
use harness_code::notebook::Notebook;
use harness_examples::args::{Args, Usage};
use harness_examples::providers_select::model_from_env;

const USAGE: Usage = Usage {
    synopsis: "usage: code_agent",
    options: "Takes no arguments: runs offline on a scripted transcript, or on the model \
              HARNESS_PROVIDER=openai|anthropic|gemini names.",
};

const TASK: &str = "The CSV text below lists sales per region and product. Parse it into `rows` \
(a list of dicts), compute `totals`, a dict of the total sales per region (as ints), and \
`report`, one line `region: total` per region in alphabetical order, joined by newlines. \
Use only Python's standard library (csv, io): no pandas.\n\n\
region,product,sales\nnorth,apples,10\nsouth,pears,5\nnorth,pears,20\neast,apples,7\nsouth,apples,3";

const CHECK: &str = "totals == {'north': 30, 'south': 8, 'east': 7} \
and report == 'east: 7\\nnorth: 30\\nsouth: 8'";

/// What a model answered, in order: three cells (the second reads a key
/// that does not exist) and the fix the model patcher gets back.
fn transcript() -> ScriptedModel {
    let code = |text: &str| {
        Expect::any().reply(ModelResponse::from_text(format!(
            "```python\n{}\n```",
            text.trim()
        )))
    };
    ScriptedModel::new([
        code(
            r#"
import csv
import io

text = """region,product,sales
north,apples,10
south,pears,5
north,pears,20
east,apples,7
south,apples,3"""
rows = list(csv.DictReader(io.StringIO(text)))
print(len(rows), "rows")
"#,
        ),
        code(
            r#"
totals = {}
for row in rows:
    totals[row["Region"]] = totals.get(row["Region"], 0) + int(row["sales"])
print(totals)
"#,
        ),
        // The model patcher's answer to the diagnosis of the KeyError.
        Expect::any()
            .last_message_contains("KeyError")
            .reply(ModelResponse::from_text(
                "The column is `region`, in lower case:\n```python\ntotals = {}\nfor row in rows:\n    \
                 totals[row[\"region\"]] = totals.get(row[\"region\"], 0) + int(row[\"sales\"])\nprint(totals)\n```",
            )),
        code(
            r#"
report = "\n".join(f"{region}: {total}" for region, total in sorted(totals.items()))
print(report)
"#,
        ),
    ])
}

fn show(index: usize, event: &AgentEvent) {
    println!("[{index}] {event}");
    if let AgentEvent::Diagnosed { report, .. } = event {
        for line in report.trim_end().lines() {
            println!("      | {line}");
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = Args::from_env(USAGE);
    if let Some(arg) = args.next() {
        args.unknown(&arg);
    }
    let model = model_from_env(transcript())?;
    let dir = std::env::temp_dir().join(format!("harness-code-agent-{}", std::process::id()));
    let notebook = Notebook::create(&dir, KernelConfig::default())?;
    let notebook = Arc::new(tokio::sync::Mutex::new(notebook));

    let agent = CodeAgent::new(notebook.clone(), model, Check::python(CHECK))
        .with_max_proposals(6)
        .with_max_patch_attempts(2);
    println!("check: {CHECK}\n");
    let result = agent.run(TASK).await;
    let (state, outcome) = match result {
        Ok(outcome) => (outcome.state, Ok(outcome.loop_steps)),
        Err(
            CodeAgentError::Unfixed { state, .. } | CodeAgentError::OutOfProposals { state, .. },
        ) => {
            let status = state.status;
            (*state, Err(format!("{status:?}")))
        }
        Err(other) => return Err(other.into()),
    };
    for (index, event) in state.events.iter().enumerate() {
        show(index, event);
    }

    let mut notebook = notebook.lock().await;
    println!();
    match outcome {
        Ok(steps) => println!(
            "solved in {steps} loop steps, {} model proposals; totals = {}",
            state.proposals,
            latest_value(&notebook, "totals").map_or_else(String::new, |v| v.repr.clone())
        ),
        Err(status) => println!("not solved: {status}"),
    }
    for node in notebook.graph().cells() {
        println!(
            "cell {} v{} ({:?}): {}",
            node.id(),
            node.current_version().number,
            node.status(),
            node.source().lines().next().unwrap_or_default()
        );
    }
    notebook.shutdown().await;
    drop(notebook);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
