//! Integration tests of the recipes.
