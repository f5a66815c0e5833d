//! Gemini API wire types: only the fields this crate reads or writes.

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GenerateRequest {
    pub(crate) contents: Vec<ContentOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) system_instruction: Option<ContentOut>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) tools: Vec<ToolOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tool_config: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) generation_config: Option<GenerationConfig>,
}

#[derive(Debug, Serialize)]
pub(crate) struct ContentOut {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) role: Option<&'static str>,
    pub(crate) parts: Vec<PartOut>,
}

/// A part holds exactly one of its data fields (and maybe a signature).
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PartOut {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) text: Option<String>,
    /// Set on thought-summary parts sent back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) thought: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) inline_data: Option<Blob>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) file_data: Option<FileData>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) function_call: Option<FunctionCallOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) function_response: Option<FunctionResponseOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) thought_signature: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Blob {
    pub(crate) mime_type: String,
    pub(crate) data: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FileData {
    pub(crate) file_uri: String,
}

#[derive(Debug, Serialize)]
pub(crate) struct FunctionCallOut {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) id: Option<String>,
    pub(crate) name: String,
    pub(crate) args: Value,
}

#[derive(Debug, Serialize)]
pub(crate) struct FunctionResponseOut {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) id: Option<String>,
    pub(crate) name: String,
    pub(crate) response: Value,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ToolOut {
    pub(crate) function_declarations: Vec<FunctionDeclaration>,
}

#[derive(Debug, Serialize)]
pub(crate) struct FunctionDeclaration {
    pub(crate) name: String,
    pub(crate) description: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) parameters: Option<Value>,
}

#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GenerationConfig {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) top_p: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) max_output_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) stop_sequences: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) response_mime_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) response_schema: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GenerateResponse {
    #[serde(default)]
    pub(crate) candidates: Vec<Candidate>,
    #[serde(default)]
    pub(crate) prompt_feedback: Option<PromptFeedback>,
    #[serde(default)]
    pub(crate) usage_metadata: Option<UsageMetadata>,
    /// An error sent inside a stream (or a 200 body) instead of a chunk.
    #[serde(default)]
    pub(crate) error: Option<ErrorIn>,
}

/// Google's error object: `{"code": 503, "message": …, "status":
/// "UNAVAILABLE"}`.
#[derive(Debug, Deserialize)]
pub(crate) struct ErrorIn {
    #[serde(default)]
    pub(crate) code: Option<u16>,
    #[serde(default)]
    pub(crate) message: String,
    #[serde(default)]
    pub(crate) status: Option<String>,
}

impl ErrorIn {
    /// The typed error: by its status (`UNAVAILABLE`,
    /// `RESOURCE_EXHAUSTED`, …), else by its code as an HTTP status.
    pub(crate) fn into_model_error(self) -> harness::llm::ModelError {
        let status = self.status.unwrap_or_default();
        let known = harness_provider_http::error_from_body(&status, self.message.clone());
        match (self.code, &known) {
            (Some(code), harness::llm::ModelError::Other { .. }) => {
                harness_provider_http::error_from_code(code, self.message)
            }
            _ => known,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Candidate {
    #[serde(default)]
    pub(crate) content: Option<ContentIn>,
    #[serde(default)]
    pub(crate) finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ContentIn {
    #[serde(default)]
    pub(crate) parts: Vec<PartIn>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PartIn {
    #[serde(default)]
    pub(crate) text: Option<String>,
    /// Set on thought-summary parts, which are not part of the answer.
    #[serde(default)]
    pub(crate) thought: Option<bool>,
    #[serde(default)]
    pub(crate) function_call: Option<FunctionCallIn>,
    #[serde(default)]
    pub(crate) thought_signature: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct FunctionCallIn {
    #[serde(default)]
    pub(crate) id: Option<String>,
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) args: Value,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PromptFeedback {
    #[serde(default)]
    pub(crate) block_reason: Option<String>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct UsageMetadata {
    #[serde(default)]
    pub(crate) prompt_token_count: u64,
    #[serde(default)]
    pub(crate) candidates_token_count: u64,
    #[serde(default)]
    pub(crate) thoughts_token_count: u64,
    #[serde(default)]
    pub(crate) cached_content_token_count: u64,
}
