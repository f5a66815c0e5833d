//! The agent kit's tests, one binary.

mod approval;
mod confine;
mod example;
mod hostile;
mod memory;
mod props;
mod recall;
mod recipe;
mod schema;
mod shell;
mod support;
