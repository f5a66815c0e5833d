//! Shared pieces of the examples: the model an example talks to, chosen from
//! the environment.

use harness::llm::{LanguageModel, ScriptedModel};
use std::sync::Arc;

/// The model named by `HARNESS_PROVIDER` (`scripted` when unset).
///
/// `scripted` answers from `script`, so the example runs offline. Any other
/// value is an error naming the providers this build knows.
pub fn model_from_env(script: ScriptedModel) -> Result<Arc<dyn LanguageModel>, String> {
    let provider = std::env::var("HARNESS_PROVIDER").unwrap_or_else(|_| "scripted".into());
    match provider.as_str() {
        "scripted" => Ok(Arc::new(script)),
        other => Err(format!(
            "HARNESS_PROVIDER={other} is not a provider this build knows; use `scripted`"
        )),
    }
}
