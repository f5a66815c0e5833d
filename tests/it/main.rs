//! The cross-crate integration tests, one binary: each module is one area.
//! The helper processes some of them start (`crash_worker`, `pool_worker`)
//! are this package's binaries.

mod agent_loop;
mod compose_examples;
mod contention;
mod crash;
mod example_args;
mod once;
mod parallel_sessions;
mod provider_swap;
mod recipe_examples;
mod sessions;
mod step_cache;
mod stored_values;
mod worker_faults;
mod workers;
