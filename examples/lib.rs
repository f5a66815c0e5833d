//! Shared pieces of the examples, and the README's snippets as doctests.

pub mod providers_select;

// The README's snippets compile (and run, unless marked `no_run`) as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
