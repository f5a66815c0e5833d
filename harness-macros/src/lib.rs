//! Derive macros for [`harness`](https://docs.rs/harness).
//!
//! - `#[derive(HarnessState)]` turns a struct into a loop state: defaults per
//!   field, a reducer per field, and a generated partial-update type.
//! - `#[derive(Context)]` turns a struct into the dependencies of a loop's
//!   steps: each field is a slot with a phase (fixed, agent or run).
//!
//! The macros are re-exported by `harness`; depend on that crate, not on this
//! one.

use proc_macro::TokenStream;
use syn::{DeriveInput, parse_macro_input};

mod context;
mod state;

/// Derives `harness::HarnessState` for a struct with named fields.
///
/// See the `harness` crate's documentation of `HarnessState` for the
/// attributes (`#[field(default = EXPR, reduce = REDUCER)]`).
#[proc_macro_derive(HarnessState, attributes(field, harness))]
pub fn derive_harness_state(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    state::expand(&input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Derives `harness::Context` for a struct whose fields are slots.
///
/// Every field carries `#[slot(fixed)]`, `#[slot(agent)]` or `#[slot(run)]`.
/// For each phase with slots the derive generates a struct of that phase's
/// slots (`<Name>Fixed`, `<Name>Agent`, `<Name>Run`; rename them with
/// `#[context(fixed = A, agent = B, run = C)]`), which is how they are given.
#[proc_macro_derive(Context, attributes(slot, context))]
pub fn derive_context(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    context::expand(&input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}
