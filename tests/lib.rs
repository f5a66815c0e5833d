//! Fixtures shared by the cross-crate tests: a tool-calling chat loop over
//! any [`LanguageModel`], and running the examples as a user does.

use harness::llm::{LanguageModel, Message, ModelRequest, Tool, ToolSet};
use harness::{Context, Cx, Harness, HarnessState, RetryPolicy, StepResult};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

mod cargo_command;
pub use cargo_command::{SUITE_FEATURES, cargo, example};

/// The workspace's `Cargo.toml`, for `cargo run --manifest-path` of an
/// example from any directory.
pub fn workspace_manifest() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits in the workspace")
        .join("Cargo.toml")
}

/// Standard output of an example's run that must succeed; panics (failing
/// the test) with its status, output and errors otherwise.
pub fn stdout_of(out: &Output) -> String {
    assert!(
        out.status.success(),
        "the example failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).expect("the example prints UTF-8")
}

/// A conversation.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
pub struct Chat {
    /// Every message so far.
    #[field(reduce = append)]
    pub messages: Vec<Message>,
}

/// The chat loop's dependencies.
#[allow(missing_debug_implementations)] // models and tool sets need not be Debug
#[derive(Context)]
pub struct Deps {
    /// The tools.
    #[slot(fixed)]
    pub tools: Arc<ToolSet>,
    /// The model.
    #[slot(agent)]
    pub model: Arc<dyn LanguageModel>,
}

async fn think(chat: Arc<Chat>, cx: Cx<Deps>) -> StepResult<ChatUpdate> {
    let request = ModelRequest::builder()
        .messages(chat.messages.iter().cloned())
        .tools(cx.tools.specs())
        .build();
    let answer = cx.model.complete(&request).await?;
    Ok(ChatUpdate::new().messages(vec![answer.into_message()]))
}

async fn call_tools(chat: Arc<Chat>, cx: Cx<Deps>) -> StepResult<ChatUpdate> {
    let mut results = Vec::new();
    for call in chat
        .messages
        .last()
        .into_iter()
        .flat_map(Message::tool_calls)
    {
        results.push(cx.tools.dispatch_or_report(call).await);
    }
    Ok(ChatUpdate::new().messages(vec![Message::tool_results(results)]))
}

/// think → call_tools → think → … → complete.
pub fn chat_loop(tools: ToolSet) -> harness::HarnessBuilder<Chat, Deps> {
    chat_loop_with(tools, RetryPolicy::default())
}

/// [`chat_loop`] with a retry policy on the model call.
pub fn chat_loop_with(tools: ToolSet, retry: RetryPolicy) -> harness::HarnessBuilder<Chat, Deps> {
    let fixed = DepsFixed {
        tools: Arc::new(tools),
    };
    Harness::<Chat, Deps>::builder_with(fixed)
        .step("think")
        .run(think)
        .retry(retry)
        .route(|c: &Chat| match c.messages.last() {
            Some(m) if m.tool_calls().next().is_some() => "call_tools",
            _ => "complete",
        })
        .on("call_tools")
        .to("call_tools")
        .on("complete")
        .end()
        .step("call_tools")
        .run(call_tools)
        .next("think")
        .start("think")
}

/// Arguments of [`Counter`].
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct CounterArgs {
    /// How much to add.
    pub by: u32,
}

/// A tool with a side effect: adds to a shared counter and returns the total.
#[derive(Clone, Debug, Default)]
pub struct Counter(pub Arc<AtomicU32>);

#[async_trait::async_trait]
impl Tool for Counter {
    type Args = CounterArgs;
    type Output = u32;
    type Error = String;

    fn name(&self) -> &str {
        "count"
    }

    fn description(&self) -> &str {
        "Adds `by` to a counter and returns the new total."
    }

    async fn call(&self, args: CounterArgs) -> Result<u32, String> {
        Ok(self.0.fetch_add(args.by, Ordering::SeqCst) + args.by)
    }
}

pub mod pool;

/// Recovers `session` for a worker process started after another was
/// killed: the killed worker's lease has not expired yet, so this waits
/// for it (any other error is returned).
pub async fn recover_when_free<S: harness::HarnessState, C: harness::Context>(
    agent: &harness::Agent<S, C>,
    session: &harness::SessionId,
) -> Result<harness::Run<S, C>, harness::session::SessionError>
where
    C::Run: harness::slots::NoSlots,
{
    loop {
        match agent.recover(session).await {
            Err(harness::session::SessionError::InFlight(_)) => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await
            }
            other => return other,
        }
    }
}

// The README's snippets compile (and run, unless marked `no_run`) as doctests
// of this crate, which depends on every crate they use.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

// Guide chapters whose examples use the stores and providers, which the core
// crate cannot depend on: they are doctested here (see `harness::guide`).
#[cfg(doctest)]
#[doc = include_str!("../harness/src/docs/guide/sessions.md")]
struct GuideSessions;
#[cfg(doctest)]
#[doc = include_str!("../harness/src/docs/guide/distributed.md")]
struct GuideDistributed;
#[cfg(doctest)]
#[doc = include_str!("../harness/src/docs/guide/models.md")]
struct GuideModels;
