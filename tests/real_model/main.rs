//! The real-model group: harness against a real model behind a real
//! OpenAI-compatible server (llama.cpp with Qwen2.5-Coder-0.5B-Instruct,
//! started by `scripts/local-model`, which `./scripts/test` runs).
//!
//! The tests assert what the framework does with a real model's answers
//! (the steps taken, tool results fed back, sessions stored and resumable,
//! usage counted, a typed error where the model fails), never the model's
//! wording: a small model's words change with its sampling, its behaviour
//! through the loop must not.
//!
//! They need `HARNESS_LLM_URL` and `HARNESS_LLM_MODEL` (the memory tests,
//! `HARNESS_EMBED_URL` and `HARNESS_EMBED_MODEL`: all-MiniLM-L6-v2 from
//! `scripts/local-embedder`) and fail (never skip) without them:
//!
//! ```sh
//! eval "$(scripts/local-model)"
//! cargo test -p harness-tests --test real_model
//! ```

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod code;
mod examples;
mod memory;
mod misbehaviour;
mod provider;

use std::sync::Arc;

use harness::llm::LanguageModel;

/// The local server's API root and model name, from the environment that
/// `scripts/local-model` prints.
pub(crate) fn server() -> (String, String) {
    let var = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| {
            panic!(
                "{name} is not set: start the local model with `eval \"$(scripts/local-model)\"`, \
                 or run the whole suite with ./scripts/test"
            )
        })
    };
    (var("HARNESS_LLM_URL"), var("HARNESS_LLM_MODEL"))
}

/// The local model through harness-openai, as a user would configure it
/// for any OpenAI-compatible server.
pub(crate) fn model() -> harness_openai::CompletionModel {
    let (url, name) = server();
    harness_openai::Client::builder()
        .base_url(url)
        // The server is local and slow (a CPU): no retry hides a failure,
        // and a request gets the time a long prompt needs.
        .max_attempts(1)
        .timeout(std::time::Duration::from_secs(240))
        .build()
        .unwrap()
        .completion_model(name)
}

/// The same model as a shared trait object.
pub(crate) fn shared_model() -> Arc<dyn LanguageModel> {
    Arc::new(model())
}
