//! Integration tests of the recipes.

mod commands;
mod orchestrator;
mod project;
mod project_crash;
mod project_memory;
mod project_ownership;
mod project_secrets;
