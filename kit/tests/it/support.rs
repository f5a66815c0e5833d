//! Tools, models and loops the tests share.

use harness::llm::{LanguageModel, ScriptedModel, Tool, ToolSet, Turn};
use harness::{Agent, Harness, create_agent_with};
use harness_kit::{AgentChat, AgentLoop, ModelDeps, ModelDepsAgent};
use schemars::JsonSchema;
use serde::Deserialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::Barrier;

#[derive(Deserialize, JsonSchema)]
pub(crate) struct AddArgs {
    pub(crate) a: i64,
    pub(crate) b: i64,
}

/// Adds two integers; counts its calls.
#[derive(Default, Clone)]
pub(crate) struct Add {
    pub(crate) calls: Arc<AtomicUsize>,
}

#[async_trait::async_trait]
impl Tool for Add {
    type Args = AddArgs;
    type Output = i64;
    type Error = String;
    fn name(&self) -> &str {
        "add"
    }
    fn description(&self) -> &str {
        "Adds two integers"
    }
    async fn call(&self, args: AddArgs) -> Result<i64, String> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(args.a + args.b)
    }
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct ShellArgs {
    /// The command line.
    pub(crate) command: String,
}

/// Pretends to run a command: echoes it; counts and records its calls.
#[derive(Default, Clone)]
pub(crate) struct FakeShell {
    pub(crate) ran: Arc<std::sync::Mutex<Vec<String>>>,
}

impl FakeShell {
    pub(crate) fn ran(&self) -> Vec<String> {
        self.ran.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

#[async_trait::async_trait]
impl Tool for FakeShell {
    type Args = ShellArgs;
    type Output = String;
    type Error = String;
    fn name(&self) -> &str {
        "shell"
    }
    fn description(&self) -> &str {
        "Runs a shell command"
    }
    async fn call(&self, args: ShellArgs) -> Result<String, String> {
        if let Ok(mut ran) = self.ran.lock() {
            ran.push(args.command.clone());
        }
        if args.command.starts_with("false") {
            return Err("exit status 1".into());
        }
        Ok(format!("ran {}", args.command))
    }
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct NoArgs {}

/// Waits at a barrier shared by its calls, recording how many run at once.
#[derive(Clone)]
pub(crate) struct Gate {
    pub(crate) barrier: Arc<Barrier>,
    pub(crate) in_flight: Arc<AtomicUsize>,
    pub(crate) most: Arc<AtomicUsize>,
}

impl Gate {
    pub(crate) fn new(width: usize) -> Self {
        Self {
            barrier: Arc::new(Barrier::new(width)),
            in_flight: Arc::default(),
            most: Arc::default(),
        }
    }
}

#[async_trait::async_trait]
impl Tool for Gate {
    type Args = NoArgs;
    type Output = String;
    type Error = String;
    fn name(&self) -> &str {
        "gate"
    }
    fn description(&self) -> &str {
        "Waits for its peers"
    }
    async fn call(&self, _: NoArgs) -> Result<String, String> {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        self.barrier.wait().await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        Ok("passed".into())
    }
}

/// An agent over the ready-made state and context.
pub(crate) fn agent(
    recipe: AgentLoop<AgentChat, ModelDeps>,
    model: Arc<dyn LanguageModel>,
) -> Agent<AgentChat, ModelDeps> {
    let harness: Harness<AgentChat, ModelDeps> = recipe
        .builder()
        .build()
        .unwrap_or_else(|e| panic!("the loop builds: {e}"));
    create_agent_with(
        "kit-test",
        &harness,
        ModelDepsAgent {
            model,
            summarizer: None,
        },
    )
}

pub(crate) fn scripted(turns: impl IntoIterator<Item = Turn>) -> Arc<ScriptedModel> {
    Arc::new(ScriptedModel::new(turns))
}

pub(crate) fn tools() -> ToolSet {
    ToolSet::new()
        .with(Add::default())
        .with(FakeShell::default())
}
