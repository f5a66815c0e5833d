//! Requests and responses: harness types to `generateContent` and back.

use async_trait::async_trait;
use harness::llm::{
    ContentPart, ImageSource, LanguageModel, Message, ModelError, ModelRequest, ModelResponse,
    ModelStream, Reasoning, Role, StopReason, ToolCall, ToolChoice, ToolResult, Usage,
};
use harness_provider_http::{endpoint, merged_turns, request_body};
use serde_json::{Value, json};

use crate::client::Client;
use crate::schema::gemini_schema;
use crate::streaming::ChunkDecoder;
use crate::wire;

/// This provider's name: [`LanguageModel::provider`] of its models, the
/// [`Reasoning::provider`] of the thoughts and signatures they return, and
/// the provider of their [`ToolCall::signature`]s. Only reasoning and
/// signatures tagged with it are sent to Gemini.
pub const PROVIDER: &str = "gemini";

/// Prefix of ids this crate makes up for calls Gemini gave none.
const MADE_UP_ID: &str = "gemini_call_";

/// `maxOutputTokens` for requests that set no
/// [`ModelRequest::max_tokens`] (the bound all providers share): every
/// answer is bounded, so a model cannot generate without end.
pub const DEFAULT_MAX_TOKENS: u32 = harness_provider_http::DEFAULT_MAX_TOKENS;

/// A Gemini model; implements [`LanguageModel`].
///
/// Made by [`Client::completion_model`]. Cheap to clone.
#[derive(Debug, Clone)]
pub struct CompletionModel {
    client: Client,
    model: String,
    default_max_tokens: u32,
}

impl CompletionModel {
    pub(crate) fn new(client: Client, model: String) -> Self {
        // Accept the API's own spelling, `models/gemini-…`, too.
        let model = model
            .strip_prefix("models/")
            .map(str::to_owned)
            .unwrap_or(model);
        Self {
            client,
            model,
            default_max_tokens: DEFAULT_MAX_TOKENS,
        }
    }

    /// `maxOutputTokens` for requests that set no
    /// [`ModelRequest::max_tokens`] (default [`DEFAULT_MAX_TOKENS`]).
    pub fn default_max_tokens(mut self, max_tokens: u32) -> Self {
        self.default_max_tokens = max_tokens;
        self
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
        let structured = request
            .response_format
            .as_ref()
            .filter(|_| request.tools.is_empty());
        let generation_config = wire::GenerationConfig {
            temperature: request.temperature,
            top_p: request.top_p,
            max_output_tokens: Some(request.max_tokens.unwrap_or(self.default_max_tokens)),
            stop_sequences: request.stop_sequences.clone(),
            // Structured output: JSON constrained by the schema, reduced to
            // the subset `responseSchema` accepts. Gemini refuses it together
            // with function calling, so a request with tools goes without
            // (its answer is still validated by `complete_typed`).
            response_mime_type: structured.map(|_| "application/json"),
            response_schema: structured.map(|format| gemini_schema(&format.schema)),
        };
        let is_default = generation_config.temperature.is_none()
            && generation_config.top_p.is_none()
            && generation_config.max_output_tokens.is_none()
            && generation_config.stop_sequences.is_empty()
            && generation_config.response_schema.is_none();
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
            parts: with_text_signatures(parts),
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
            part.function_call = Some(wire::FunctionCallOut {
                id: sent_id(&call.id),
                name: call.name.clone(),
                args: call.arguments.clone(),
            });
            part.thought_signature = call.signature_for(PROVIDER).map(str::to_owned);
        }
        ContentPart::ToolResult(result) => {
            part.function_response = Some(wire::FunctionResponseOut {
                id: sent_id(&result.call_id),
                name: result.name.clone(),
                response: response_object(result),
            });
        }
        ContentPart::Reasoning(reasoning) => return thought_part(reasoning),
        _ => return None,
    }
    Some(part)
}

/// A thought goes back as a thought part; a bare signature (see
/// [`bare_signature`]) as a part with empty text, which
/// [`with_text_signatures`] puts back on the text it followed. Other
/// providers' reasoning is not for Gemini.
fn thought_part(reasoning: &Reasoning) -> Option<wire::PartOut> {
    if !reasoning.is_from(PROVIDER) || (reasoning.text.is_empty() && reasoning.signature.is_none())
    {
        return None;
    }
    Some(wire::PartOut {
        text: Some(reasoning.text.clone()),
        thought: (!reasoning.text.is_empty()).then_some(true),
        thought_signature: reasoning.signature.clone(),
        ..Default::default()
    })
}

/// Moves each bare signature onto the unsigned text part right before it,
/// where Gemini sent it; one that follows no such part stays a part of its
/// own with empty text, as Gemini streams a signature that comes last.
fn with_text_signatures(parts: Vec<wire::PartOut>) -> Vec<wire::PartOut> {
    let mut out: Vec<wire::PartOut> = Vec::with_capacity(parts.len());
    for part in parts {
        let bare = part.text.as_deref() == Some("")
            && part.thought.is_none()
            && part.thought_signature.is_some();
        match out.last_mut() {
            Some(previous)
                if bare
                    && previous
                        .text
                        .as_deref()
                        .is_some_and(|text| !text.is_empty())
                    && previous.thought.is_none()
                    && previous.thought_signature.is_none() =>
            {
                previous.thought_signature = part.thought_signature;
            }
            _ => out.push(part),
        }
    }
    out
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

/// The id to send back: Gemini's own ids only, not the ones made up here.
fn sent_id(id: &str) -> Option<String> {
    (!id.is_empty() && !id.starts_with(MADE_UP_ID)).then(|| id.to_owned())
}

/// The tool call for a `functionCall` part: Gemini's id or a made-up one,
/// and the part's thought signature.
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
    let id = call
        .id
        .filter(|id| !id.is_empty())
        .unwrap_or_else(|| format!("{MADE_UP_ID}{index}"));
    let call = ToolCall::new(id, call.name, arguments);
    match signature {
        Some(signature) => call.with_signature(PROVIDER, signature),
        None => call,
    }
}

/// The reasoning part for a thought (`"thought": true`) part.
pub(crate) fn thought(text: String, signature: Option<String>) -> Reasoning {
    Reasoning {
        signature,
        ..Reasoning::new(PROVIDER, text)
    }
}

/// A `thoughtSignature` on a part that is neither a thought nor a function
/// call (usually text): a reasoning part without text, placed right after
/// that part's text.
pub(crate) fn bare_signature(signature: String) -> Reasoning {
    Reasoning::new(PROVIDER, "").with_signature(signature)
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

/// Thoughts are billed as output, so they count in `output_tokens` too;
/// cached content is part of `promptTokenCount`.
pub(crate) fn usage(metadata: wire::UsageMetadata) -> Usage {
    Usage::new(
        metadata.prompt_token_count,
        metadata.candidates_token_count + metadata.thoughts_token_count,
    )
    .with_cache_read(metadata.cached_content_token_count)
    .with_reasoning(metadata.thoughts_token_count)
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
    if let Some(error) = wire.error {
        return Err(error.into_model_error());
    }
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
        } else if part.thought == Some(true) {
            let text = part.text.unwrap_or_default();
            if !text.is_empty() || part.thought_signature.is_some() {
                content.push(ContentPart::Reasoning(thought(
                    text,
                    part.thought_signature,
                )));
            }
        } else {
            if let Some(text) = part.text.filter(|text| !text.is_empty()) {
                content.push(ContentPart::text(text));
            }
            if let Some(signature) = part.thought_signature {
                content.push(ContentPart::Reasoning(bare_signature(signature)));
            }
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
        // A refusal or an odd answer quoted in an error may carry a secret.
        response(wire).map_err(ModelError::redacted)
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
        PROVIDER
    }

    fn model_name(&self) -> &str {
        &self.model
    }
}
