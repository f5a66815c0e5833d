//! The agent kit's tests, one binary.

mod approval;
mod example;
mod memory;
mod props;
mod recipe;
mod schema;
mod support;
