//! The loop: named steps and the transitions between them, built with
//! [`Harness::builder`], validated as a graph when built, and exportable as
//! Mermaid or Graphviz DOT.
//!
//! A step can
//! - `run`: async, reads the state and the context, returns a partial update
//!   (the only place the state changes);
//! - `route`: pure, reads the state after `run`, returns a [`Signal`](crate::Signal);
//! - or both.
//!
//! Transitions: `.on(signal).to(step)`, `.on(signal).end()`, `.next(step)`,
//! and `.end()` for a step that always ends the run after `run`. This gives
//! the usual shapes: transform + route, transform + next, transform + end,
//! and a decision node (route only).
//!
//! The files follow the life of a loop: `def` holds a loop as
//! declared, `validate` checks it, `compiled` is what runs, `builder` goes
//! from one to the other, `harness` is the user's handle and `export` draws
//! it.

mod builder;
pub mod cache;
mod compiled;
pub(crate) mod def;
mod export;
mod harness;
mod validate;

pub use builder::{
    DEFAULT_DEADLINE, DEFAULT_STEP_LIMIT, ForkBuilder, HarnessBuilder, MIN_LEASE_TTL, OnBuilder,
    StepBuilder,
};
/// The most branches a fan-out starts unless its
/// [`ForkBuilder::max_branches`] says otherwise.
pub const MAX_BRANCHES: usize = 1_000;

pub use cache::{CachePolicy, MemoryCache, StepCache, StepCacheError, StoreCache};
pub(crate) use compiled::{Branches, CompiledStep, Exits, HarnessInner, Target};
pub use def::{BranchFailure, RetryPolicy};
pub(crate) use def::{RunFn, SubCall, SubEnd, SubRun, SubShape, SubStep, SubStub, TypeTag};
pub(crate) use export::edges;
pub use harness::Harness;
pub use validate::{LoopValidationError, Violation};
