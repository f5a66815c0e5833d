//! Observation: the [`Observer`] trait for programmatic hooks, and the
//! `tracing` spans every run emits.
//!
//! Spans (usable with any `tracing` subscriber; `harness-otel` exports them
//! to OpenTelemetry with the GenAI semantic conventions, see
//! [traces](crate::guide::traces)):
//! - `harness.run` (OpenTelemetry name `invoke_agent {agent}`, kind
//!   internal) with `agent`, `run_id`, `session_id`,
//!   `gen_ai.operation.name`, `gen_ai.agent.name` and
//!   `gen_ai.conversation.id` (the session id), around a run (and again
//!   around each resume);
//! - `harness.step` (`step {step}`) with `step`, `path`, `index` and
//!   `gen_ai.conversation.id`, around each step's `run`;
//! - `gen_ai.chat` (`chat {model}`, kind client) around each model call a
//!   step makes through [`Cx::complete`](crate::Cx::complete), with the
//!   GenAI semantic conventions' attributes (provider, model, conversation,
//!   token usage, finish reasons, `error.type`);
//! - `gen_ai.execute_tool` (`execute_tool {tool}`) around each tool call
//!   made through [`Cx::call_tool`](crate::Cx::call_tool), with the tool's
//!   name and the call's id;
//! - message contents, as TRACE events under the target
//!   `harness::gen_ai::content` inside those two spans, emitted (and
//!   serialized) only when a subscriber enables that target.
//!
//! Observers are attached to a harness with
//! [`HarnessBuilder::observer`](crate::HarnessBuilder::observer) and see every
//! run of every agent created from it. Two observers compose into one with
//! [`Observer::and`].

use crate::error::RunError;
use crate::signal::Signal;
use crate::state::HarnessState;
use crate::step::{Interrupt, ModelCallInfo, RunInfo, StepInfo, ToolCallInfo};
use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;

/// Hooks called as a run goes. Every method has an empty default.
///
/// Hooks are awaited in line with the run, so a slow observer slows the run:
/// hand heavy work to a channel.
///
/// ```
/// use harness::observe::Observer;
/// use harness::{HarnessState, RunInfo, StepInfo};
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::time::Duration;
///
/// #[derive(Default)]
/// struct CountSteps(AtomicU64);
///
/// #[async_trait::async_trait]
/// impl<S: HarnessState> Observer<S> for CountSteps {
///     async fn step_finished(&self, _: &RunInfo, _: &StepInfo, _: &S::Update, _: Duration) {
///         self.0.fetch_add(1, Ordering::Relaxed);
///     }
/// }
/// ```
#[async_trait]
pub trait Observer<S: HarnessState>: Send + Sync {
    /// A run started, or resumed after an interrupt.
    async fn run_started(&self, run: &RunInfo) {
        let _ = run;
    }

    /// A step is about to run.
    async fn step_started(&self, run: &RunInfo, step: &StepInfo) {
        let _ = (run, step);
    }

    /// A step's `run` returned `update`, which is about to be merged.
    /// Route-only steps have no update and are not reported here.
    async fn step_finished(
        &self,
        run: &RunInfo,
        step: &StepInfo,
        update: &S::Update,
        elapsed: Duration,
    ) {
        let _ = (run, step, update, elapsed);
    }

    /// A step called a model through [`Cx::complete`](crate::Cx::complete).
    async fn model_called(&self, run: &RunInfo, step: &StepInfo, call: &ModelCallInfo<'_>) {
        let _ = (run, step, call);
    }

    /// A step ran a tool call through [`Cx::call_tool`](crate::Cx::call_tool).
    async fn tool_called(&self, run: &RunInfo, step: &StepInfo, call: &ToolCallInfo<'_>) {
        let _ = (run, step, call);
    }

    /// The run paused for a human.
    async fn interrupted(&self, run: &RunInfo, interrupt: &Interrupt) {
        let _ = (run, interrupt);
    }

    /// The run ended with `signal` after `steps` steps.
    async fn run_finished(&self, run: &RunInfo, signal: &Signal, steps: u64) {
        let _ = (run, signal, steps);
    }

    /// The run failed.
    async fn run_failed(&self, run: &RunInfo, error: &RunError) {
        let _ = (run, error);
    }

    /// This observer, then `other`.
    fn and<O: Observer<S>>(self, other: O) -> Both<Self, O>
    where
        Self: Sized,
    {
        Both(self, other)
    }
}

/// Two observers in one, called in order; see [`Observer::and`].
#[derive(Debug, Clone)]
pub struct Both<A, B>(pub A, pub B);

#[async_trait]
impl<S: HarnessState, A: Observer<S>, B: Observer<S>> Observer<S> for Both<A, B> {
    async fn run_started(&self, run: &RunInfo) {
        self.0.run_started(run).await;
        self.1.run_started(run).await;
    }
    async fn step_started(&self, run: &RunInfo, step: &StepInfo) {
        self.0.step_started(run, step).await;
        self.1.step_started(run, step).await;
    }
    async fn step_finished(
        &self,
        run: &RunInfo,
        step: &StepInfo,
        update: &S::Update,
        elapsed: Duration,
    ) {
        self.0.step_finished(run, step, update, elapsed).await;
        self.1.step_finished(run, step, update, elapsed).await;
    }
    async fn model_called(&self, run: &RunInfo, step: &StepInfo, call: &ModelCallInfo<'_>) {
        self.0.model_called(run, step, call).await;
        self.1.model_called(run, step, call).await;
    }
    async fn tool_called(&self, run: &RunInfo, step: &StepInfo, call: &ToolCallInfo<'_>) {
        self.0.tool_called(run, step, call).await;
        self.1.tool_called(run, step, call).await;
    }
    async fn interrupted(&self, run: &RunInfo, interrupt: &Interrupt) {
        self.0.interrupted(run, interrupt).await;
        self.1.interrupted(run, interrupt).await;
    }
    async fn run_finished(&self, run: &RunInfo, signal: &Signal, steps: u64) {
        self.0.run_finished(run, signal, steps).await;
        self.1.run_finished(run, signal, steps).await;
    }
    async fn run_failed(&self, run: &RunInfo, error: &RunError) {
        self.0.run_failed(run, error).await;
        self.1.run_failed(run, error).await;
    }
}

#[async_trait]
impl<S: HarnessState, O: Observer<S> + ?Sized> Observer<S> for Arc<O> {
    async fn run_started(&self, run: &RunInfo) {
        (**self).run_started(run).await;
    }
    async fn step_started(&self, run: &RunInfo, step: &StepInfo) {
        (**self).step_started(run, step).await;
    }
    async fn step_finished(
        &self,
        run: &RunInfo,
        step: &StepInfo,
        update: &S::Update,
        elapsed: Duration,
    ) {
        (**self).step_finished(run, step, update, elapsed).await;
    }
    async fn model_called(&self, run: &RunInfo, step: &StepInfo, call: &ModelCallInfo<'_>) {
        (**self).model_called(run, step, call).await;
    }
    async fn tool_called(&self, run: &RunInfo, step: &StepInfo, call: &ToolCallInfo<'_>) {
        (**self).tool_called(run, step, call).await;
    }
    async fn interrupted(&self, run: &RunInfo, interrupt: &Interrupt) {
        (**self).interrupted(run, interrupt).await;
    }
    async fn run_finished(&self, run: &RunInfo, signal: &Signal, steps: u64) {
        (**self).run_finished(run, signal, steps).await;
    }
    async fn run_failed(&self, run: &RunInfo, error: &RunError) {
        (**self).run_failed(run, error).await;
    }
}
