#![doc = include_str!("docs/recipes.md")]
#![forbid(unsafe_code)]

pub mod guide;
mod ids;
pub mod orchestrator;
pub mod project;
