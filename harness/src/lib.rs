#![doc = include_str!("docs/crate.md")]

// Lets the derive macros' `::harness::...` paths resolve inside this crate's
// own tests.
#[allow(unused_extern_crates)]
extern crate self as harness;

// The modules, in the order they depend on each other: each uses only the
// ones above it (checked by the `module_order` test). `durable`, `secrets`,
// `llm` and `memory` are leaves: any module may use them, and they use none
// of the others (`llm` uses `durable` and `secrets`; `memory` uses `llm`
// and `secrets`). One layer per group, so
// that rustfmt keeps the order.

// Names.
pub mod ids;
pub mod signal;

// What a loop is made of.
pub mod state;

pub mod slots;

// Run-time types and errors.
pub mod error;

// The seam for durable-execution engines: what a step's effects go through.
pub mod effect;

pub mod step;

// Durable runs.
pub mod session;

// Hooks.
pub mod observe;

// The loop.
pub mod graph;

// Executing it.
pub mod run;

// Agents and their sessions.
pub mod agent;

// Pools of workers.
pub mod worker;

// The sessions command line.
#[cfg(feature = "cli")]
pub mod cli;

// Leaves.
pub mod durable;

pub mod secrets;

pub mod llm;

mod clock;
pub mod memory;
mod panics;
mod type_name;

// Docs only: the guide's chapters, each an empty module.
#[doc = include_str!("docs/guide.md")]
pub mod guide {
    // The examples of `sessions`, `distributed` and the provider half of
    // `models` use crates that depend on this one (`harness-stores`, the
    // provider crates), so they cannot be doctests here: `cfg(doctest)`
    // leaves them out, and `harness-tests`, which depends on every crate,
    // runs them.

    #[doc = include_str!("docs/guide/state.md")]
    pub mod state {}

    #[doc = include_str!("docs/guide/loops.md")]
    pub mod loops {}

    #[doc = include_str!("docs/guide/slots.md")]
    pub mod slots {}

    #[doc = include_str!("docs/guide/runs.md")]
    pub mod runs {}

    #[doc = include_str!("docs/guide/composition.md")]
    pub mod composition {}

    #[doc = include_str!("docs/guide/observation.md")]
    pub mod observation {}

    #[cfg_attr(not(doctest), doc = include_str!("docs/guide/traces.md"))]
    #[cfg_attr(doctest, doc = "Traces (doctested by `harness-otel`).")]
    pub mod traces {}

    #[cfg_attr(not(doctest), doc = include_str!("docs/guide/sessions.md"))]
    #[cfg_attr(doctest, doc = "Sessions (doctested by `harness-tests`).")]
    pub mod sessions {}

    #[cfg_attr(not(doctest), doc = include_str!("docs/guide/distributed.md"))]
    #[cfg_attr(doctest, doc = "Beyond one machine (doctested by `harness-tests`).")]
    pub mod distributed {}

    #[cfg_attr(not(doctest), doc = include_str!("docs/guide/restate.md"))]
    #[cfg_attr(doctest, doc = "On Restate (doctested by `harness-restate`).")]
    pub mod restate {}

    #[cfg_attr(not(doctest), doc = include_str!("docs/guide/models.md"))]
    #[doc = include_str!("docs/guide/models_offline.md")]
    pub mod models {}

    #[doc = include_str!("docs/guide/performance.md")]
    pub mod performance {}
}

pub use agent::{Agent, AgentWith, create_agent, create_agent_with};
/// The attribute that an implementation of [`Tool`](llm::Tool),
/// [`LanguageModel`](llm::LanguageModel), [`Observer`]
/// or [`SessionStore`](session::SessionStore) takes (`#[harness::async_trait]`),
/// re-exported so that an application need not depend on `async-trait`.
pub use async_trait::async_trait;
pub use graph::{
    BranchFailure, DEFAULT_DEADLINE, ForkBuilder, Harness, HarnessBuilder, LoopValidationError,
    MAX_BRANCHES, MIN_LEASE_TTL, OnBuilder, RetryPolicy, StepBuilder, Violation,
};
pub use graph::{CachePolicy, MemoryCache, StepCache, StepCacheError, StoreCache};
pub use harness_macros::{Context, HarnessState};
pub use ids::{InterruptId, RunId, SessionId, TaskPath};
pub use observe::Observer;
pub use run::{
    Dispatch, NoInterrupt, Outcome, Run, RunError, RunEvent, RunEvents, StopHandle, SubAgent,
    SubOutcome, UnknownStep,
};
pub use schemars::{self, JsonSchema};
pub use session::{Busy, Stopping, Submitted};
pub use signal::Signal;
pub use slots::Context;
pub use state::HarnessState;
pub use step::{
    Breakpoint, Cx, Interrupt, ModelCallInfo, RunInfo, StepError, StepFn, StepInfo, StepResult,
    ToolCallInfo,
};
pub use type_name::{short_type_name, shorten_type_name};

/// Re-exports for the derive macros' generated code; not a public API.
#[doc(hidden)]
pub mod __private {
    pub use schemars;
    pub use serde;

    /// An update field that is present, whatever it holds: `null` too, so
    /// that an `Option` field set to `None` reads back as set (`Some(None)`)
    /// rather than as absent, and a `null` where the field's type has no
    /// null (a NaN or an infinity that JSON wrote as `null`) is an error,
    /// not an update that silently leaves the field as it was.
    ///
    /// # Errors
    ///
    /// The field's own deserialization error.
    pub fn present<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
    where
        D: serde::Deserializer<'de>,
        T: serde::Deserialize<'de>,
    {
        T::deserialize(deserializer).map(Some)
    }
}
