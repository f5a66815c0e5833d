//! Picks the model provider from the environment, so one example runs
//! offline (scripted) or against OpenAI, Anthropic or Gemini unchanged.
//!
//! - `HARNESS_PROVIDER`: `openai`, `anthropic`, `gemini` or `scripted`
//!   (the default when unset).
//! - `HARNESS_MODEL`: the model name; each provider has a default.
//! - Keys and base URLs come from each provider's own variables
//!   (`OPENAI_API_KEY`, `OPENAI_BASE_URL`, `ANTHROPIC_API_KEY`,
//!   `GEMINI_API_KEY` or `GOOGLE_API_KEY`).

use std::sync::Arc;

use harness::llm::{LanguageModel, ModelError, ScriptedModel};

/// The model `HARNESS_PROVIDER` and `HARNESS_MODEL` name; `scripted` is the
/// model used when the provider is `scripted` or unset.
///
/// ```
/// use harness::llm::{Expect, ModelResponse, ScriptedModel};
///
/// let script = ScriptedModel::new([Expect::any().reply(ModelResponse::from_text("hi"))]);
/// let model = harness_examples::providers_select::select("scripted", None, script)?;
/// assert_eq!(model.provider(), "scripted");
/// # Ok::<(), harness::llm::ModelError>(())
/// ```
///
/// Says on standard error which model the example runs on, and, offline,
/// how to run it on a real one (a local OpenAI-compatible server included).
pub fn model_from_env(scripted: ScriptedModel) -> Result<Arc<dyn LanguageModel>, ModelError> {
    let provider = std::env::var("HARNESS_PROVIDER").unwrap_or_default();
    let model = std::env::var("HARNESS_MODEL")
        .ok()
        .filter(|name| !name.trim().is_empty());
    let chosen = select(&provider, model.as_deref(), scripted)?;
    // Once, though an example may choose several models this way.
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| eprintln!("{}", describe(&*chosen)));
    Ok(chosen)
}

/// One line on the model an example runs on; offline, how to choose a real
/// one.
///
/// ```
/// use harness::llm::ScriptedModel;
///
/// let offline = harness_examples::providers_select::select("scripted", None, ScriptedModel::new([]))?;
/// let line = harness_examples::providers_select::describe(&*offline);
/// assert!(line.contains("OPENAI_BASE_URL"), "{line}");
/// # Ok::<(), harness::llm::ModelError>(())
/// ```
pub fn describe(model: &dyn LanguageModel) -> String {
    if model.provider() == "scripted" {
        "model: scripted (offline). On a real one: HARNESS_PROVIDER=openai|anthropic|gemini \
         with its key; on a local OpenAI-compatible server (llama.cpp, vLLM, Ollama, LM Studio): \
         HARNESS_PROVIDER=openai OPENAI_BASE_URL=http://127.0.0.1:PORT/v1 HARNESS_MODEL=NAME \
         (eval \"$(scripts/local-model)\" starts one; its URL is $HARNESS_LLM_URL)"
            .to_owned()
    } else {
        format!("model: {} ({})", model.model_name(), model.provider())
    }
}

/// The model of `provider` (`openai`, `anthropic`, `gemini`, `scripted`;
/// empty means `scripted`) named `model`, or the provider's default model.
pub fn select(
    provider: &str,
    model: Option<&str>,
    scripted: ScriptedModel,
) -> Result<Arc<dyn LanguageModel>, ModelError> {
    Ok(match provider.trim().to_ascii_lowercase().as_str() {
        "openai" => Arc::new(
            harness_openai::Client::from_env()?.completion_model(model.unwrap_or("gpt-4o-mini")),
        ),
        "anthropic" => Arc::new(
            harness_anthropic::Client::from_env()?
                .completion_model(model.unwrap_or("claude-sonnet-4-5")),
        ),
        "gemini" => Arc::new(
            harness_gemini::Client::from_env()?
                .completion_model(model.unwrap_or("gemini-2.5-flash")),
        ),
        "scripted" | "" => Arc::new(scripted),
        other => {
            return Err(ModelError::Configuration {
                message: format!(
                    "HARNESS_PROVIDER is {other:?}; use openai, anthropic, gemini or scripted"
                ),
            });
        }
    })
}
