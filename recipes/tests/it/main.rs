//! Integration tests of the recipes.

mod orchestrator;
mod project;
mod project_crash;
