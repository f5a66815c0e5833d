//! The guide to the recipes: one chapter each, with its loop drawn.

#[doc = include_str!("docs/orchestrator.md")]
pub mod orchestrator {}
