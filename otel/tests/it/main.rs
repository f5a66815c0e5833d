//! harness-otel's integration tests: runs exported to a real OTLP/HTTP
//! receiver and read back with the OpenTelemetry proto definitions.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod collector;
mod config;
mod evals;
mod provider;
mod queue;
mod secrets;
mod traces;

/// Runs the tests that install `tracing` subscribers one at a time:
/// `tracing` caches each callsite's interest across all subscribers, and a
/// callsite first hit on one thread while another thread installs its
/// subscriber can miss that subscriber (the race a core test sees rarely).
pub(crate) fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}
