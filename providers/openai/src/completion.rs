//! Requests and responses: harness types to chat-completions and back.

use async_trait::async_trait;
use harness::llm::{
    ContentPart, ImageSource, LanguageModel, Message, ModelError, ModelRequest, ModelResponse,
    ModelStream, ResponseFormat, Role, StopReason, ToolCall, ToolChoice, Usage,
};
use harness_provider_http::{endpoint, request_body};
use serde_json::{Value, json};

use crate::client::{Client, TokenLimitField};
use crate::schema::strict_schema;
use crate::streaming::ChunkDecoder;
use crate::wire;

/// The bound on generated tokens for requests that set none (the one all
/// providers share); an answer cut here ends with [`StopReason::MaxTokens`].
pub const DEFAULT_MAX_TOKENS: u32 = harness_provider_http::DEFAULT_MAX_TOKENS;

/// An OpenAI chat-completions model; implements [`LanguageModel`].
///
/// Made by [`Client::completion_model`]. Cheap to clone.
#[derive(Debug, Clone)]
pub struct CompletionModel {
    client: Client,
    model: String,
    strict_tools: bool,
    default_max_tokens: u32,
    adapt_schemas: Option<bool>,
}

impl CompletionModel {
    pub(crate) fn new(client: Client, model: String) -> Self {
        Self {
            client,
            model,
            strict_tools: false,
            default_max_tokens: DEFAULT_MAX_TOKENS,
            adapt_schemas: None,
        }
    }

    /// Whether a typed answer's schema is adapted to OpenAI's strict mode
    /// ([`strict_schema`]: keywords it rejects, such as `maxLength`, are
    /// dropped). By default it is for OpenAI's own API and not for other
    /// servers: llama.cpp, vLLM, Ollama and LM Studio turn the whole schema
    /// into a grammar, where `maxLength` and `maxItems` bound what a small
    /// model can write. Set it for a proxy of OpenAI under another URL.
    pub fn strict_schema_adaptation(mut self, adapt: bool) -> Self {
        self.adapt_schemas = Some(adapt);
        self
    }

    /// The bound on generated tokens for requests that set no
    /// [`ModelRequest::max_tokens`] (default [`DEFAULT_MAX_TOKENS`]).
    ///
    /// ```
    /// let model = harness_openai::Client::builder()
    ///     .base_url("http://127.0.0.1:8080/v1")
    ///     .build()?
    ///     .completion_model("local")
    ///     .default_max_tokens(512);
    /// # let _ = model;
    /// # Ok::<(), harness::llm::ModelError>(())
    /// ```
    pub fn default_max_tokens(mut self, max_tokens: u32) -> Self {
        self.default_max_tokens = max_tokens;
        self
    }

    /// Sends tools in strict mode: arguments are then guaranteed to match
    /// the schema, which is adapted with [`strict_schema`]. OpenAI supports
    /// it; many compatible servers do not, so it is off by default.
    pub fn strict_tools(mut self, strict: bool) -> Self {
        self.strict_tools = strict;
        self
    }

    /// The JSON body for `request`.
    fn body(&self, request: &ModelRequest, stream: bool) -> Result<Value, ModelError> {
        let tools: Vec<wire::ToolDefinition> = request
            .tools
            .iter()
            .map(|tool| wire::ToolDefinition {
                kind: "function",
                function: wire::FunctionDefinition {
                    name: tool.name.clone(),
                    description: tool.description.clone(),
                    parameters: if self.strict_tools {
                        strict_schema(&tool.parameters)
                    } else {
                        tool.parameters.clone()
                    },
                    strict: self.strict_tools.then_some(true),
                },
            })
            .collect();
        let tool_choice = (!tools.is_empty() || request.tool_choice != ToolChoice::Auto)
            .then(|| tool_choice(&request.tool_choice));
        let bound = Some(request.max_tokens.unwrap_or(self.default_max_tokens));
        let (max_tokens, max_completion_tokens) = match self.client.inner.token_limit {
            TokenLimitField::MaxTokens => (bound, None),
            TokenLimitField::MaxCompletionTokens => (None, bound),
        };
        let wire = wire::ChatRequest {
            model: &self.model,
            messages: messages(&request.messages)?,
            tools,
            tool_choice,
            temperature: request.temperature,
            top_p: request.top_p,
            max_tokens,
            max_completion_tokens,
            stop: request.stop_sequences.clone(),
            stream,
            stream_options: stream.then_some(wire::StreamOptions {
                include_usage: true,
            }),
            response_format: request.response_format.as_ref().map(|format| {
                let adapt = self.adapt_schemas.unwrap_or(self.client.inner.is_openai);
                response_format(format, adapt)
            }),
        };
        request_body(&wire, request)
    }

    fn url(&self) -> String {
        endpoint(self.client.base_url(), "chat/completions")
    }
}

/// Structured outputs: the schema as an object (an answer that is not one
/// travels as `{"value": …}`), made strict-compatible when `strict` and
/// `adapt` (see [`CompletionModel::strict_schema_adaptation`]).
fn response_format(format: &ResponseFormat, adapt: bool) -> wire::ResponseFormatOut {
    let schema = format.object_schema();
    wire::ResponseFormatOut {
        kind: "json_schema",
        json_schema: wire::JsonSchemaOut {
            name: format.name.clone(),
            schema: if format.strict && adapt {
                strict_schema(&schema)
            } else {
                schema
            },
            strict: format.strict,
        },
    }
}

fn tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::None => json!("none"),
        ToolChoice::Required => json!("required"),
        ToolChoice::Tool(name) => json!({ "type": "function", "function": { "name": name } }),
        _ => json!("auto"),
    }
}

/// The conversation in chat-completions form. Tool results become `tool`
/// messages, one per result, as the API requires.
fn messages(conversation: &[Message]) -> Result<Vec<wire::ChatMessage>, ModelError> {
    let mut out = Vec::new();
    for message in conversation {
        let mut parts = Vec::new();
        let mut calls = Vec::new();
        for part in &message.content {
            match part {
                ContentPart::Text { text } => {
                    parts.push(wire::PartOut::Text { text: text.clone() })
                }
                ContentPart::Image(source) => {
                    if message.role != Role::User {
                        return Err(ModelError::InvalidRequest {
                            status: None,
                            message: "OpenAI accepts images only in user messages".to_owned(),
                        });
                    }
                    parts.push(wire::PartOut::ImageUrl {
                        image_url: wire::ImageUrl {
                            url: image_url(source),
                        },
                    });
                }
                ContentPart::ToolCall(call) => calls.push(wire::ToolCallOut {
                    id: call.id.clone(),
                    kind: "function",
                    function: wire::FunctionOut {
                        name: call.name.clone(),
                        arguments: call.arguments.to_string(),
                    },
                }),
                ContentPart::ToolResult(result) => out.push(wire::ChatMessage {
                    role: "tool",
                    content: Some(wire::MessageContent::Text(result.content.clone())),
                    tool_calls: Vec::new(),
                    tool_call_id: Some(result.call_id.clone()),
                }),
                _ => {}
            }
        }
        let role = match message.role {
            Role::System => "system",
            Role::Assistant => "assistant",
            // Stray text in a tool message is shown to the model as the user's.
            Role::User | Role::Tool => "user",
        };
        if parts.is_empty() && calls.is_empty() {
            continue;
        }
        let content = if parts.is_empty() {
            None
        } else if parts
            .iter()
            .all(|p| matches!(p, wire::PartOut::Text { .. }))
        {
            Some(wire::MessageContent::Text(message.text()))
        } else {
            Some(wire::MessageContent::Parts(parts))
        };
        out.push(wire::ChatMessage {
            role,
            content,
            tool_calls: calls,
            tool_call_id: None,
        });
    }
    Ok(out)
}

fn image_url(source: &ImageSource) -> String {
    match source {
        ImageSource::Url { url } => url.clone(),
        ImageSource::Base64 { media_type, data } => format!("data:{media_type};base64,{data}"),
    }
}

/// The stop reason for a `finish_reason`; a content filter is an error.
pub(crate) fn stop_reason(finish: Option<&str>, has_calls: bool) -> Result<StopReason, ModelError> {
    Ok(match finish {
        Some("length") => StopReason::MaxTokens,
        Some("tool_calls" | "function_call") => StopReason::ToolUse,
        Some("content_filter") => {
            return Err(ModelError::ContentFiltered {
                reason: "content_filter".to_owned(),
            });
        }
        // Some compatible servers say "stop" after tool calls.
        Some("stop") | None if has_calls => StopReason::ToolUse,
        Some("stop") | None => StopReason::EndTurn,
        Some(other) => StopReason::Other(other.to_owned()),
    })
}

/// Usage with its details: cached prompt tokens (part of `prompt_tokens`)
/// and reasoning tokens (part of `completion_tokens`).
pub(crate) fn usage(usage: Option<wire::UsageIn>) -> Usage {
    usage
        .map(|u| {
            Usage::new(u.prompt_tokens, u.completion_tokens)
                .with_cache_read(
                    u.prompt_tokens_details
                        .and_then(|d| d.cached_tokens)
                        .unwrap_or(0),
                )
                .with_reasoning(
                    u.completion_tokens_details
                        .and_then(|d| d.reasoning_tokens)
                        .unwrap_or(0),
                )
        })
        .unwrap_or_default()
}

/// The request's format if its answer travels wrapped (see
/// [`ResponseFormat::object_schema`]) and must be unwrapped.
pub(crate) fn wrapped(request: &ModelRequest) -> Option<ResponseFormat> {
    request
        .response_format
        .as_ref()
        .filter(|format| !format.is_object())
        .cloned()
}

fn response(
    wire: wire::ChatResponse,
    wrapped: Option<&ResponseFormat>,
) -> Result<ModelResponse, ModelError> {
    if let Some(error) = wire.error {
        return Err(error.into_model_error());
    }
    let choice = wire
        .choices
        .into_iter()
        .next()
        .ok_or_else(|| ModelError::malformed("the response has no choices"))?;
    let message = choice.message;
    if let Some(refusal) = message.refusal.filter(|r| !r.is_empty()) {
        return Err(ModelError::ContentFiltered { reason: refusal });
    }
    let mut content = Vec::new();
    if let Some(text) = message.content.filter(|t| !t.is_empty()) {
        content.push(ContentPart::text(match wrapped {
            Some(format) => format.unwrap_answer(&text),
            None => text,
        }));
    }
    for (index, call) in message
        .tool_calls
        .unwrap_or_default()
        .into_iter()
        .enumerate()
    {
        // Arguments that are not JSON stay as the text the model wrote, to
        // be reported to the model for this call alone.
        let arguments = match call.function.arguments {
            Value::String(text) => harness::llm::tool_arguments(&text),
            Value::Null => json!({}),
            object => object,
        };
        let id = call.id.unwrap_or_else(|| format!("call_{index}"));
        content.push(ContentPart::ToolCall(ToolCall::new(
            id,
            call.function.name,
            arguments,
        )));
    }
    let has_calls = content
        .iter()
        .any(|p| matches!(p, ContentPart::ToolCall(_)));
    let stop_reason = stop_reason(choice.finish_reason.as_deref(), has_calls)?;
    Ok(ModelResponse::new(content, usage(wire.usage), stop_reason))
}

#[async_trait]
impl LanguageModel for CompletionModel {
    async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        let body = self.body(request, false)?;
        let wire: wire::ChatResponse = self
            .client
            .inner
            .connection
            .post_json(&self.model, &self.url(), &body)
            .await?;
        // A refusal or an odd answer quoted in an error may carry a secret.
        response(wire, wrapped(request).as_ref()).map_err(ModelError::redacted)
    }

    async fn stream(&self, request: &ModelRequest) -> Result<ModelStream, ModelError> {
        let body = self.body(request, true)?;
        self.client
            .inner
            .connection
            .post_stream(
                &self.model,
                &self.url(),
                &body,
                ChunkDecoder::new(wrapped(request)),
            )
            .await
    }

    fn provider(&self) -> &str {
        "openai"
    }

    fn model_name(&self) -> &str {
        &self.model
    }
}
