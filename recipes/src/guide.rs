//! The guide to the recipes: one chapter each, with its loop drawn.

#[doc = include_str!("docs/orchestrator.md")]
pub mod orchestrator {}

/// The long-running project agent: its chapter is the page of
/// [`crate::project`], with its session loop drawn.
pub mod project {}
