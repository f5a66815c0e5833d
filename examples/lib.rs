//! Shared pieces of the examples.

pub mod args;
pub mod assistant_agent;
pub mod providers_select;
pub mod quickstart_agent;
