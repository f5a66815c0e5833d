//! The integration tests of `harness-code`, one binary: a module per
//! subject. The kernel, replay and agent tests need `python3` on PATH.

mod agent;
mod analyze_scoping;
mod blobs;
mod diagnose;
mod fresh;
mod graph;
mod graph_properties;
mod hostile;
mod kernel;
mod notebooks;
mod patch;
mod patch_checks;
mod replay;
mod restore_state;
mod saved;
mod stdlib_sweep;
mod support;
mod trace_steps;
mod trust_boundary;
