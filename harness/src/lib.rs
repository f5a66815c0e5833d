#![doc = include_str!("docs/crate.md")]

// Lets the derive macros' `::harness::...` paths resolve inside this crate's
// own tests.
#[allow(unused_extern_crates)]
extern crate self as harness;

pub mod agent;
#[cfg(feature = "cli")]
pub mod cli;
pub mod code;
pub mod durable;
pub mod graph;
pub mod ids;
pub mod llm;
pub mod observe;
pub mod run;
pub mod session;
pub mod signal;
pub mod slots;
pub mod state;
pub mod worker;

pub use agent::{Agent, Busy, Submitted, create_agent};
pub use graph::{
    Harness, HarnessBuilder, LoopValidationError, OnBuilder, RetryPolicy, StepBuilder, Violation,
};
pub use harness_macros::{Context, HarnessState};
pub use ids::{InterruptId, RunId, SessionId};
pub use observe::Observer;
pub use run::{
    Cx, Interrupt, NoInterrupt, Outcome, Run, RunError, RunEvent, RunEvents, RunInfo, StepError,
    StepInfo, StepResult, StopHandle,
};
pub use signal::Signal;
pub use slots::{Context, SlotError, Slots};
pub use state::HarnessState;

/// Re-exports for the derive macros' generated code; not a public API.
#[doc(hidden)]
pub mod __private {
    pub use schemars;
    pub use serde;
}
