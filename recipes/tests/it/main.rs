//! Integration tests of the recipes.

mod orchestrator;
