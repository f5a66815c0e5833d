//! Requests and responses: harness types to `generateContent` and back.

use async_trait::async_trait;
use harness::llm::{
    ContentPart, ImageSource, LanguageModel, Message, ModelError, ModelRequest, ModelResponse,
    ModelStream, Role, StopReason, ToolCall, ToolChoice, ToolResult, Usage,
};
use harness_provider_http::{endpoint, merged_turns, request_body};
use serde_json::{Value, json};

use crate::client::Client;
use crate::schema::gemini_schema;
use crate::streaming::ChunkDecoder;
use crate::wire;

/// Separates a function call's id from its Gemini thought signature inside
/// [`ToolCall::id`], e.g. `gemini_call_0#thought_signature=Cq8B…`.
pub const SIGNATURE_SEPARATOR: &str = "#thought_signature=";

/// Prefix of ids this crate makes up for calls Gemini gave none.
const MADE_UP_ID: &str = "gemini_call_";

/// A Gemini model; implements [`LanguageModel`].
///
/// Made by [`Client::completion_model`]. Cheap to clone.
#[derive(Debug, Clone)]
pub struct CompletionModel {
    client: Client,
    model: String,
}

impl CompletionModel {
    pub(crate) fn new(client: Client, model: String) -> Self {
        // Accept the API's own spelling, `models/gemini-…`, too.
        let model = model
            .strip_prefix("models/")
            .map(str::to_owned)
            .unwrap_or(model);
        Self { client, model }
    }

    fn body(&self, request: &ModelRequest) -> Result<Value, ModelError> {
        let declarations: Vec<wire::FunctionDeclaration> = request
            .tools
            .iter()
            .map(|tool| wire::FunctionDeclaration {
                name: tool.name.clone(),
                description: tool.description.clone(),
                parameters: parameters(&tool.parameters),
            })
            .collect();
        let tool_config = (!declarations.is_empty())
            .then(|| tool_config(&request.tool_choice))
            .flatten();
        let tools = if declarations.is_empty() {
            Vec::new()
        } else {
            vec![wire::ToolOut {
                function_declarations: declarations,
            }]
        };
        let (system_instruction, contents) = contents(&request.messages);
        let generation_config = wire::GenerationConfig {
            temperature: request.temperature,
            top_p: request.top_p,
            max_output_tokens: request.max_tokens,
            stop_sequences: request.stop_sequences.clone(),
        };
        let is_default = generation_config.temperature.is_none()
            && generation_config.top_p.is_none()
            && generation_config.max_output_tokens.is_none()
            && generation_config.stop_sequences.is_empty();
        let wire = wire::GenerateRequest {
            contents,
            system_instruction,
            tools,
            tool_config,
            generation_config: (!is_default).then_some(generation_config),
        };
        request_body(&wire, request)
    }

    fn url(&self, method: &str) -> String {
        endpoint(
            self.client.base_url(),
            &format!("models/{}:{method}", self.model),
        )
    }
}

/// Gemini rejects an object schema without properties: a tool without
/// arguments declares no parameters at all.
fn parameters(schema: &Value) -> Option<Value> {
    let converted = gemini_schema(schema);
    let no_properties = converted
        .get("properties")
        .and_then(Value::as_object)
        .is_none_or(|p| p.is_empty());
    let is_object = converted.get("type").and_then(Value::as_str) == Some("object");
    (!(is_object && no_properties)).then_some(converted)
}

fn tool_config(choice: &ToolChoice) -> Option<Value> {
    let config = match choice {
        ToolChoice::None => json!({ "mode": "NONE" }),
        ToolChoice::Required => json!({ "mode": "ANY" }),
        ToolChoice::Tool(name) => json!({ "mode": "ANY", "allowedFunctionNames": [name] }),
        _ => return None,
    };
    Some(json!({ "functionCallingConfig": config }))
}

/// The system instruction and the user/model turns, consecutive turns of
/// one role merged.
fn contents(messages: &[Message]) -> (Option<wire::ContentOut>, Vec<wire::ContentOut>) {
    let system: Vec<wire::PartOut> = messages
        .iter()
        .filter(|message| message.role == Role::System)
        .map(Message::text)
        .filter(|text| !text.is_empty())
        .map(|text| wire::PartOut {
            text: Some(text),
            ..Default::default()
        })
        .collect();
    let turns = merged_turns(messages, "model", part)
        .into_iter()
        .map(|(role, parts)| wire::ContentOut {
            role: Some(role),
            parts,
        })
        .collect();
    let system = (!system.is_empty()).then_some(wire::ContentOut {
        role: None,
        parts: system,
    });
    (system, turns)
}

fn part(content: &ContentPart) -> Option<wire::PartOut> {
    let mut part = wire::PartOut::default();
    match content {
        ContentPart::Text { text } if text.is_empty() => return None,
        ContentPart::Text { text } => part.text = Some(text.clone()),
        ContentPart::Image(ImageSource::Base64 { media_type, data }) => {
            part.inline_data = Some(wire::Blob {
                mime_type: media_type.clone(),
                data: data.clone(),
            });
        }
        ContentPart::Image(ImageSource::Url { url }) => {
            part.file_data = Some(wire::FileData {
                file_uri: url.clone(),
            });
        }
        ContentPart::ToolCall(call) => {
            let (id, signature) = split_id(&call.id);
            part.function_call = Some(wire::FunctionCallOut {
                id,
                name: call.name.clone(),
                args: call.arguments.clone(),
            });
            part.thought_signature = signature;
        }
        ContentPart::ToolResult(result) => {
            part.function_response = Some(wire::FunctionResponseOut {
                id: split_id(&result.call_id).0,
                name: result.name.clone(),
                response: response_object(result),
            });
        }
        _ => return None,
    }
    Some(part)
}

/// `functionResponse.response` must be an object: JSON object output goes
/// as is, anything else under `result` (or `error` for a failure).
fn response_object(result: &ToolResult) -> Value {
    let value = serde_json::from_str::<Value>(&result.content)
        .unwrap_or_else(|_| Value::String(result.content.clone()));
    match value {
        value if result.is_error => json!({ "error": value }),
        Value::Object(object) => Value::Object(object),
        value => json!({ "result": value }),
    }
}

/// The id to send back (Gemini's own ids only) and the thought signature.
fn split_id(id: &str) -> (Option<String>, Option<String>) {
    let (base, signature) = match id.split_once(SIGNATURE_SEPARATOR) {
        Some((base, signature)) => (base, Some(signature.to_owned())),
        None => (id, None),
    };
    let send = (!base.is_empty() && !base.starts_with(MADE_UP_ID)).then(|| base.to_owned());
    (send, signature)
}

/// The [`ToolCall::id`] for a function call: Gemini's id or a made-up one,
/// with the thought signature appended.
pub(crate) fn call_id(id: Option<String>, index: usize, signature: Option<String>) -> String {
    let base = id
        .filter(|id| !id.is_empty())
        .unwrap_or_else(|| format!("{MADE_UP_ID}{index}"));
    match signature {
        Some(signature) => format!("{base}{SIGNATURE_SEPARATOR}{signature}"),
        None => base,
    }
}

/// The tool call for a `functionCall` part.
pub(crate) fn tool_call(
    call: wire::FunctionCallIn,
    index: usize,
    signature: Option<String>,
) -> ToolCall {
    let arguments = if call.args.is_null() {
        json!({})
    } else {
        call.args
    };
    ToolCall::new(call_id(call.id, index, signature), call.name, arguments)
}

/// The stop reason for a `finishReason`; safety stops are errors.
pub(crate) fn stop_reason(reason: Option<&str>, has_calls: bool) -> Result<StopReason, ModelError> {
    Ok(match reason {
        None | Some("STOP" | "FINISH_REASON_UNSPECIFIED") if has_calls => StopReason::ToolUse,
        None | Some("STOP" | "FINISH_REASON_UNSPECIFIED") => StopReason::EndTurn,
        Some("MAX_TOKENS") => StopReason::MaxTokens,
        Some(
            filtered @ ("SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII"
            | "IMAGE_SAFETY"),
        ) => {
            return Err(ModelError::ContentFiltered {
                reason: filtered.to_owned(),
            });
        }
        Some(other) => StopReason::Other(other.to_owned()),
    })
}

pub(crate) fn usage(metadata: wire::UsageMetadata) -> Usage {
    Usage::new(
        metadata.prompt_token_count,
        metadata.candidates_token_count + metadata.thoughts_token_count,
    )
}

/// A blocked prompt is reported in `promptFeedback`, without candidates.
pub(crate) fn check_blocked(response: &wire::GenerateResponse) -> Result<(), ModelError> {
    match response
        .prompt_feedback
        .as_ref()
        .and_then(|f| f.block_reason.clone())
    {
        Some(reason) => Err(ModelError::ContentFiltered { reason }),
        None => Ok(()),
    }
}

fn response(wire: wire::GenerateResponse) -> Result<ModelResponse, ModelError> {
    check_blocked(&wire)?;
    let usage = wire.usage_metadata.map(usage).unwrap_or_default();
    let candidate = wire
        .candidates
        .into_iter()
        .next()
        .ok_or_else(|| ModelError::malformed("the response has no candidates"))?;
    let mut content = Vec::new();
    let mut calls = 0;
    for part in candidate.content.map(|c| c.parts).unwrap_or_default() {
        if let Some(call) = part.function_call {
            content.push(ContentPart::ToolCall(tool_call(
                call,
                calls,
                part.thought_signature,
            )));
            calls += 1;
        } else if let Some(text) = part.text
            && part.thought != Some(true)
            && !text.is_empty()
        {
            content.push(ContentPart::text(text));
        }
    }
    let stop_reason = stop_reason(candidate.finish_reason.as_deref(), calls > 0)?;
    Ok(ModelResponse::new(content, usage, stop_reason))
}

#[async_trait]
impl LanguageModel for CompletionModel {
    async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        let body = self.body(request)?;
        let wire: wire::GenerateResponse = self
            .client
            .inner
            .post_json(&self.model, &self.url("generateContent"), &body)
            .await?;
        response(wire)
    }

    async fn stream(&self, request: &ModelRequest) -> Result<ModelStream, ModelError> {
        let body = self.body(request)?;
        let url = self.url("streamGenerateContent?alt=sse");
        self.client
            .inner
            .post_stream(&self.model, &url, &body, ChunkDecoder::default())
            .await
    }

    fn provider(&self) -> &str {
        "gemini"
    }

    fn model_name(&self) -> &str {
        &self.model
    }
}
