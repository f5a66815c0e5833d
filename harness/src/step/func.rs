//! [`StepFn`]: the shapes a step's `run` function may take.

use super::cx::Cx;
use super::error::StepResult;
use crate::state::HarnessState;
use futures::FutureExt;
use futures::future::BoxFuture;
use std::future::Future;
use std::sync::Arc;

/// A function that can be a step's `run` in a loop over state `S` with
/// context `C`: an async fn, or a closure returning a future, that takes
/// what it uses and returns the state's update:
///
/// | shape | for a step that reads |
/// |---|---|
/// | `async fn(Arc<S>, Cx<C>) -> StepResult<S::Update>` | the state and the context |
/// | `async fn(Arc<S>) -> StepResult<S::Update>` | the state |
/// | `async fn(Cx<C>) -> StepResult<S::Update>` | the context (slots, interrupts, `once`) |
/// | `async fn() -> StepResult<S::Update>` | nothing |
///
/// `Args` tells the shapes apart; it is inferred, never written. A closure
/// must name its parameter types (`|s: Arc<S>| async move { .. }`): with
/// several shapes possible, Rust cannot infer them.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a step function of a loop over `{S}` with context `{C}`",
    label = "not a step function",
    note = "a step's run is an async fn, or a closure returning a future, taking `(Arc<{S}>, Cx<{C}>)`, `(Arc<{S}>)`, `(Cx<{C}>)` or nothing, and returning `StepResult<{S}Update>` (the state's update type)",
    note = "a closure must name its parameter types: `|state: Arc<{S}>, cx: Cx<{C}>| async move {{ .. }}`; the future must be `Send + 'static` (move what it uses into it)"
)]
pub trait StepFn<S: HarnessState, C, Args>: Send + Sync + 'static {
    /// Calls the function with what its shape takes.
    fn call(&self, state: Arc<S>, cx: Cx<C>) -> BoxFuture<'static, StepResult<S::Update>>;
}

impl<S, C, F, Fut> StepFn<S, C, (Arc<S>, Cx<C>)> for F
where
    S: HarnessState,
    F: Fn(Arc<S>, Cx<C>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = StepResult<S::Update>> + Send + 'static,
{
    fn call(&self, state: Arc<S>, cx: Cx<C>) -> BoxFuture<'static, StepResult<S::Update>> {
        self(state, cx).boxed()
    }
}

impl<S, C, F, Fut> StepFn<S, C, (Arc<S>,)> for F
where
    S: HarnessState,
    F: Fn(Arc<S>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = StepResult<S::Update>> + Send + 'static,
{
    fn call(&self, state: Arc<S>, _: Cx<C>) -> BoxFuture<'static, StepResult<S::Update>> {
        self(state).boxed()
    }
}

impl<S, C, F, Fut> StepFn<S, C, (Cx<C>,)> for F
where
    S: HarnessState,
    F: Fn(Cx<C>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = StepResult<S::Update>> + Send + 'static,
{
    fn call(&self, _: Arc<S>, cx: Cx<C>) -> BoxFuture<'static, StepResult<S::Update>> {
        self(cx).boxed()
    }
}

impl<S, C, F, Fut> StepFn<S, C, ()> for F
where
    S: HarnessState,
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = StepResult<S::Update>> + Send + 'static,
{
    fn call(&self, _: Arc<S>, _: Cx<C>) -> BoxFuture<'static, StepResult<S::Update>> {
        self().boxed()
    }
}
