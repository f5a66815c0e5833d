//! Integration tests of the recipes.

mod project;
mod project_crash;
