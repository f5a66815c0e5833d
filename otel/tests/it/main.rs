//! harness-otel's integration tests: runs exported to a real OTLP/HTTP
//! receiver and read back with the OpenTelemetry proto definitions.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod collector;
mod config;
mod provider;
mod traces;
