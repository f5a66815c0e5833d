//! End-to-end tests of the `harness` binary, one module per subcommand,
//! in one test binary.

#![allow(clippy::unwrap_used)]

mod analyze;
mod closed_output;
#[cfg(feature = "restate")]
mod restate;
mod run;
mod run_interrupt;
mod run_saved;
mod run_state;
mod run_state_links;
mod run_terminal;
mod sessions;
mod studio;
mod support;
