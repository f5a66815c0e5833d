//! Slots: the dependencies of a loop's steps, each given in one phase, and
//! checked by the compiler.
//!
//! A context type lists what steps need, field by field; each field is a
//! slot with a phase:
//!
//! - **fixed**: given once to the harness ([`Harness::builder_with`](crate::Harness::builder_with)),
//!   shared by every agent built from it (a system prompt, a tool registry);
//! - **agent**: given to [`create_agent_with`](crate::create_agent_with),
//!   shared by that agent's runs (a model client, a database pool);
//! - **run**: given to [`Agent::with`](crate::Agent::with) for one operation
//!   (a run, a resume), for that run only (the user, a request id).
//!
//! `#[derive(Context)]` generates one struct per phase that has slots,
//! named after the context (`DepsFixed`, `DepsAgent`, `DepsRun`), with the
//! slots of that phase as fields. Slots are given as those structs, so a
//! misspelled slot, a missing one or a value of the wrong type is a compile
//! error, and a phase without slots takes no argument at all
//! (`Harness::builder()`, `create_agent(id, &harness)`, `agent.run(state)`).
//! Steps read slots as plain typed fields of the context, through
//! [`Cx`](crate::Cx)'s `Deref`:
//!
//! ```
//! use harness::Context;
//! use std::sync::Arc;
//!
//! #[derive(Context)]
//! struct Deps {
//!     #[slot(fixed)]
//!     system_prompt: String,
//!     #[slot(agent)]
//!     temperature: f32,
//!     #[slot(run)]
//!     user: Arc<str>,
//! }
//!
//! let fixed = DepsFixed { system_prompt: "Be brief.".to_string() };
//! let agent = DepsAgent { temperature: 0.2 };
//! let run = DepsRun { user: "ada".into() };
//! let deps = Deps::assemble(&fixed, &agent, run);
//! assert_eq!((deps.system_prompt.as_str(), &*deps.user), ("Be brief.", "ada"));
//! ```
//!
//! Fixed and agent slots are shared: each run's context holds a clone of
//! them, so their types are `Clone` (wrap what should not be copied in an
//! `Arc`). The phase structs' `Debug` prints slot names only, since slot
//! values are often clients holding secrets.

/// The dependencies of a loop's steps. Derive it with `#[derive(Context)]`.
///
/// `()` is the context of a loop whose steps need nothing.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a slot context",
    note = "derive it with #[derive(Context)] and mark each field #[slot(fixed)], #[slot(agent)] or #[slot(run)]"
)]
pub trait Context: Sized + Send + Sync + 'static {
    /// The fixed slots, given to [`Harness::builder_with`](crate::Harness::builder_with);
    /// `()` if there are none.
    type Fixed: Send + Sync + 'static;
    /// The agent slots, given to [`create_agent_with`](crate::create_agent_with);
    /// `()` if there are none.
    type Agent: Send + Sync + 'static;
    /// The run slots, given to [`Agent::with`](crate::Agent::with); `()` if
    /// there are none.
    type Run: Send + 'static;

    /// The context of one run: the fixed and agent slots shared (cloned),
    /// the run slots moved in.
    fn assemble(fixed: &Self::Fixed, agent: &Self::Agent, run: Self::Run) -> Self;
}

impl Context for () {
    type Fixed = ();
    type Agent = ();
    type Run = ();

    fn assemble(_: &(), _: &(), (): ()) -> Self {}
}

/// The slots of a phase that has none: `()`. The functions that take no
/// slots (`Harness::builder`, `create_agent`, `agent.run`, ...) require it.
#[diagnostic::on_unimplemented(
    message = "slots must be given here: the context has slots of this phase (`{Self}`)",
    label = "this phase has slots",
    note = "give them as a `{Self}`: fixed slots with `Harness::builder_with(..)`, agent slots with `create_agent_with(id, &harness, ..)`, run slots with `agent.with(..)` before `.run(state)`, `.resume(..)`, `.continue_session(..)` or `.recover(..)`"
)]
pub trait NoSlots: Sized {
    /// The value of a phase without slots.
    fn none() -> Self;
}

impl NoSlots for () {
    fn none() -> Self {}
}

/// A slot value that every run's context gets a copy of: fixed and agent
/// slots. Called by `#[derive(Context)]`.
#[diagnostic::on_unimplemented(
    message = "the slot type `{Self}` cannot be shared between runs",
    label = "not `Clone`",
    note = "fixed and agent slots are shared by every run, which gets a clone: make the type `Clone`, or wrap it in `Arc<..>`"
)]
pub trait Shared: Clone {}

impl<T: Clone> Shared for T {}

/// A copy of a shared slot for one run's context. Called by
/// `#[derive(Context)]`.
#[doc(hidden)]
pub fn share<T: Shared>(value: &T) -> T {
    value.clone()
}
