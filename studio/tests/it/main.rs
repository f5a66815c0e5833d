//! The studio's tests: the JSON API and the event stream over plain HTTP,
//! and the page in a real headless Chromium.

#![allow(clippy::unwrap_used, unreachable_pub, missing_docs)]

mod api;
mod approval;
mod broken_log;
mod browser;
mod composed;
mod cuts;
mod evals;
mod events;
mod hostile;
mod long;
mod memory;
mod page;
mod refused;
mod scale;
mod secrets;
mod strict;
mod support;
mod support_kit;
mod unreadable;
mod writes;
