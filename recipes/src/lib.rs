#![doc = include_str!("docs/recipes.md")]
#![forbid(unsafe_code)]

pub mod project;
