//! What a step works with: the [`Cx`] handle it gets besides the state
//! (slots, interrupts, journaled side effects), the [`StepError`] it fails
//! with, the shapes its `run` function may take ([`StepFn`]), and the
//! [`Interrupt`] it pauses a run with.
//!
//! A step's `run` is an async function (or a closure returning a future)
//! taking what it uses — the state, the context, both, or nothing — and
//! returning a [`StepResult`] of the state's update:
//!
//! ```
//! use harness::{Cx, HarnessState, JsonSchema, StepResult, schemars};
//! use std::sync::Arc;
//! # use serde::{Deserialize, Serialize};
//! #[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
//! struct Count {
//!     #[field(reduce = add)]
//!     n: u32,
//! }
//!
//! async fn from_state(s: Arc<Count>) -> StepResult<CountUpdate> {
//!     Ok(CountUpdate::new().n(s.n + 1))
//! }
//! async fn from_context(cx: Cx<()>) -> StepResult<CountUpdate> {
//!     Ok(CountUpdate::new().n(u32::try_from(cx.index())?))
//! }
//! async fn from_both(s: Arc<Count>, cx: Cx<()>) -> StepResult<CountUpdate> {
//!     let _ = (s, cx);
//!     Ok(CountUpdate::new())
//! }
//! ```

mod cx;
mod error;
mod func;

pub(crate) use cx::{CallHooks, CxShared, Emitter, JournalSink};
pub use cx::{Cx, StepJournal};
pub use error::{StepError, StepResult};
pub use func::StepFn;

use crate::ids::{InterruptId, RunId, SessionId, TaskPath};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;

/// A pause for a human, asked for by a step with [`Cx::interrupt`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Interrupt {
    /// The id a resume must give.
    pub id: InterruptId,
    /// The step that asked.
    pub step: String,
    /// The task the step runs in: the root, or a branch or sub-agent
    /// (`research/approve`). A resume with this interrupt's id continues
    /// there.
    #[serde(default, skip_serializing_if = "TaskPath::is_root")]
    pub path: TaskPath,
    /// What the step asked, as JSON.
    pub payload: Value,
    /// Set when the run paused at a breakpoint it was given
    /// ([`Run::pause_before`](crate::Run::pause_before),
    /// [`Run::pause_after`](crate::Run::pause_after)) rather than because
    /// a step asked: its answer is not given to any step, and a resume
    /// goes on with the step it names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breakpoint: Option<Breakpoint>,
}

/// Which side of a step a run paused at (see [`Interrupt::breakpoint`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Breakpoint {
    /// Before the step ran ([`Interrupt::step`] is that step).
    Before,
    /// After a step completed ([`Interrupt::step`] is the step to run
    /// next; the payload names the one that completed).
    After,
}

/// A model call made through [`Cx::complete`], as observers see it.
#[derive(Debug)]
#[non_exhaustive]
pub struct ModelCallInfo<'a> {
    /// The provider (`openai`, `anthropic`, …; `custom` for a model that
    /// does not say).
    pub provider: &'a str,
    /// The model's name.
    pub model: &'a str,
    /// What was sent.
    pub request: &'a crate::llm::ModelRequest,
    /// What came back.
    pub result: Result<&'a crate::llm::ModelResponse, &'a crate::llm::ModelError>,
    /// How long it took.
    pub elapsed: std::time::Duration,
}

/// A tool call made through [`Cx::call_tool`], as observers see it.
#[derive(Debug)]
#[non_exhaustive]
pub struct ToolCallInfo<'a> {
    /// The call, as the model made it.
    pub call: &'a crate::llm::ToolCall,
    /// Its result, sent back to the model (`is_error` when the tool failed
    /// or the call was malformed).
    pub result: &'a crate::llm::ToolResult,
    /// How long it took.
    pub elapsed: std::time::Duration,
}

/// A run's deadline: the instant it falls, and the limit it came from (for
/// the error).
#[derive(Clone, Copy, Debug)]
pub(crate) struct RunDeadline {
    pub(crate) at: tokio::time::Instant,
    pub(crate) limit: std::time::Duration,
}

impl RunDeadline {
    /// The deadline of a run starting (or resuming) now.
    pub(crate) fn starting_now(limit: Option<std::time::Duration>) -> Option<Self> {
        limit.map(|limit| Self {
            at: tokio::time::Instant::now() + limit,
            limit,
        })
    }

    /// Whichever of two deadlines falls first.
    pub(crate) fn earliest(a: Option<Self>, b: Option<Self>) -> Option<Self> {
        match (a, b) {
            (Some(a), Some(b)) => Some(if b.at < a.at { b } else { a }),
            (a, b) => a.or(b),
        }
    }
}

/// Identifies a run to observers and spans.
#[derive(Clone, Debug)]
pub struct RunInfo {
    /// The agent running it.
    pub agent_id: Arc<str>,
    /// The run.
    pub run_id: RunId,
    /// Its session.
    pub session_id: SessionId,
}

/// Identifies a step visit to observers.
#[derive(Clone, Debug)]
pub struct StepInfo {
    /// The step's name.
    pub name: Arc<str>,
    /// The task it runs in (the root for the run's own loop).
    pub path: TaskPath,
    /// How many steps the run completed before this one.
    pub index: u64,
}
