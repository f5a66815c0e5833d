//! Shared pieces of the examples.

pub mod providers_select;
