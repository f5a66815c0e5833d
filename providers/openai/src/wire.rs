//! Chat-completions wire types: only the fields this crate reads or writes.

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Serialize)]
pub(crate) struct ChatRequest<'a> {
    pub(crate) model: &'a str,
    pub(crate) messages: Vec<ChatMessage>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) tools: Vec<ToolDefinition>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tool_choice: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) top_p: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) stop: Vec<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) stream_options: Option<StreamOptions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) response_format: Option<ResponseFormatOut>,
}

/// `{"type": "json_schema", "json_schema": {…}}`.
#[derive(Debug, Serialize)]
pub(crate) struct ResponseFormatOut {
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    pub(crate) json_schema: JsonSchemaOut,
}

#[derive(Debug, Serialize)]
pub(crate) struct JsonSchemaOut {
    pub(crate) name: String,
    pub(crate) schema: Value,
    pub(crate) strict: bool,
}

#[derive(Debug, Serialize)]
pub(crate) struct StreamOptions {
    pub(crate) include_usage: bool,
}

#[derive(Debug, Serialize)]
pub(crate) struct ChatMessage {
    pub(crate) role: &'static str,
    /// `null` is meaningful: an assistant turn that only calls tools.
    pub(crate) content: Option<MessageContent>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) tool_calls: Vec<ToolCallOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tool_call_id: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(crate) enum MessageContent {
    Text(String),
    Parts(Vec<PartOut>),
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum PartOut {
    Text { text: String },
    ImageUrl { image_url: ImageUrl },
}

#[derive(Debug, Serialize)]
pub(crate) struct ImageUrl {
    pub(crate) url: String,
}

#[derive(Debug, Serialize)]
pub(crate) struct ToolCallOut {
    pub(crate) id: String,
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    pub(crate) function: FunctionOut,
}

#[derive(Debug, Serialize)]
pub(crate) struct FunctionOut {
    pub(crate) name: String,
    /// OpenAI sends and expects arguments as JSON text.
    pub(crate) arguments: String,
}

#[derive(Debug, Serialize)]
pub(crate) struct ToolDefinition {
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    pub(crate) function: FunctionDefinition,
}

#[derive(Debug, Serialize)]
pub(crate) struct FunctionDefinition {
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) parameters: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) strict: Option<bool>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ChatResponse {
    #[serde(default)]
    pub(crate) choices: Vec<Choice>,
    #[serde(default)]
    pub(crate) usage: Option<UsageIn>,
    /// An error answered with status 200 (proxies such as OpenRouter and
    /// LiteLLM do), as in a stream.
    #[serde(default)]
    pub(crate) error: Option<ErrorIn>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Choice {
    pub(crate) message: ResponseMessage,
    #[serde(default)]
    pub(crate) finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ResponseMessage {
    #[serde(default)]
    pub(crate) content: Option<String>,
    #[serde(default)]
    pub(crate) tool_calls: Option<Vec<ToolCallIn>>,
    #[serde(default)]
    pub(crate) refusal: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ToolCallIn {
    #[serde(default)]
    pub(crate) id: Option<String>,
    pub(crate) function: FunctionIn,
}

#[derive(Debug, Deserialize)]
pub(crate) struct FunctionIn {
    pub(crate) name: String,
    /// JSON text from OpenAI; some compatible servers send an object.
    #[serde(default)]
    pub(crate) arguments: Value,
}

#[derive(Debug, Clone, Copy, Deserialize)]
pub(crate) struct UsageIn {
    #[serde(default)]
    pub(crate) prompt_tokens: u64,
    #[serde(default)]
    pub(crate) completion_tokens: u64,
    #[serde(default)]
    pub(crate) prompt_tokens_details: Option<PromptDetails>,
    #[serde(default)]
    pub(crate) completion_tokens_details: Option<CompletionDetails>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
pub(crate) struct PromptDetails {
    #[serde(default)]
    pub(crate) cached_tokens: Option<u64>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
pub(crate) struct CompletionDetails {
    #[serde(default)]
    pub(crate) reasoning_tokens: Option<u64>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ChatChunk {
    #[serde(default)]
    pub(crate) choices: Vec<ChunkChoice>,
    #[serde(default)]
    pub(crate) usage: Option<UsageIn>,
    #[serde(default)]
    pub(crate) error: Option<ErrorIn>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ErrorIn {
    #[serde(default)]
    pub(crate) message: String,
    #[serde(default, rename = "type")]
    pub(crate) kind: Option<String>,
    #[serde(default)]
    pub(crate) code: Option<Value>,
}

impl ErrorIn {
    /// The typed error: by its type, or its code when that is a name
    /// (`rate_limit_exceeded`) or an HTTP status (`429`, as proxies send).
    pub(crate) fn into_model_error(self) -> harness::llm::ModelError {
        let status = self
            .code
            .as_ref()
            .and_then(|c| c.as_u64().or_else(|| c.as_str()?.parse().ok()))
            .and_then(|c| u16::try_from(c).ok());
        let kind = self
            .kind
            .or_else(|| self.code.and_then(|c| c.as_str().map(str::to_owned)))
            .unwrap_or_default();
        // A type this crate does not know says less than a status.
        let known = harness_provider_http::error_from_body(&kind, self.message.clone());
        match (status, &known) {
            (Some(status), harness::llm::ModelError::Other { .. }) => {
                harness_provider_http::error_from_code(status, self.message)
            }
            _ => known,
        }
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct ChunkChoice {
    #[serde(default)]
    pub(crate) delta: Option<Delta>,
    #[serde(default)]
    pub(crate) finish_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct Delta {
    #[serde(default)]
    pub(crate) content: Option<String>,
    #[serde(default)]
    pub(crate) tool_calls: Option<Vec<ToolCallDelta>>,
    #[serde(default)]
    pub(crate) refusal: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ToolCallDelta {
    #[serde(default)]
    pub(crate) index: Option<usize>,
    #[serde(default)]
    pub(crate) id: Option<String>,
    #[serde(default)]
    pub(crate) function: Option<FunctionDelta>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct FunctionDelta {
    #[serde(default)]
    pub(crate) name: Option<String>,
    #[serde(default)]
    pub(crate) arguments: Option<String>,
}
