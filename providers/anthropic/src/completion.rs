//! Requests and responses: harness types to the Messages API and back.

use async_trait::async_trait;
use harness::llm::{
    ContentPart, ImageSource, LanguageModel, Message, ModelError, ModelRequest, ModelResponse,
    ModelStream, Reasoning, ResponseFormat, Role, StopReason, ToolCall, ToolChoice,
};
use harness_provider_http::{endpoint, merged_turns, request_body};
use serde_json::{Value, json};

use crate::client::Client;
use crate::streaming::EventDecoder;
use crate::wire;

/// This provider's name: [`LanguageModel::provider`] of its models, and the
/// [`Reasoning::provider`] of the thinking they return. Only reasoning
/// tagged with it is sent to Anthropic.
pub const PROVIDER: &str = "anthropic";

/// `max_tokens` when the request sets none (the API requires one; the
/// bound all providers share).
pub const DEFAULT_MAX_TOKENS: u32 = harness_provider_http::DEFAULT_MAX_TOKENS;

/// An Anthropic model; implements [`LanguageModel`].
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
        Self {
            client,
            model,
            default_max_tokens: DEFAULT_MAX_TOKENS,
        }
    }

    /// `max_tokens` for requests that set none (default [`DEFAULT_MAX_TOKENS`]).
    pub fn default_max_tokens(mut self, max_tokens: u32) -> Self {
        self.default_max_tokens = max_tokens;
        self
    }

    fn body(&self, request: &ModelRequest, stream: bool) -> Result<Value, ModelError> {
        let mut tools: Vec<wire::ToolOut> = request
            .tools
            .iter()
            .map(|tool| wire::ToolOut {
                name: tool.name.clone(),
                description: tool.description.clone(),
                input_schema: input_schema(&tool.parameters),
            })
            .collect();
        let tool_choice = match &request.response_format {
            Some(format) => {
                let answer = AnswerTool::new(format);
                tools.push(wire::ToolOut {
                    name: answer.name().to_owned(),
                    description: ANSWER_TOOL_DESCRIPTION.to_owned(),
                    input_schema: answer.input_schema(),
                });
                Some(match &request.tool_choice {
                    _ if request.tools.is_empty() => {
                        json!({ "type": "tool", "name": answer.name() })
                    }
                    ToolChoice::Tool(name) => json!({ "type": "tool", "name": name }),
                    _ => json!({ "type": "any" }),
                })
            }
            None => (!tools.is_empty()).then(|| tool_choice(&request.tool_choice)),
        };
        let (system, messages) = conversation(&request.messages);
        let wire = wire::MessagesRequest {
            model: &self.model,
            max_tokens: request.max_tokens.unwrap_or(self.default_max_tokens),
            system,
            messages,
            tools,
            tool_choice,
            temperature: request.temperature,
            top_p: request.top_p,
            stop_sequences: request.stop_sequences.clone(),
            stream,
        };
        request_body(&wire, request)
    }

    fn url(&self) -> String {
        endpoint(self.client.base_url(), "v1/messages")
    }
}

/// What the answer tool tells the model.
const ANSWER_TOOL_DESCRIPTION: &str =
    "Give your final answer by calling this tool; its input is the answer.";

/// How a [`ResponseFormat`] is asked for: a tool whose input is the answer
/// (wrapped in an object when it is not one), which the request forces the
/// model to call.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AnswerTool {
    format: ResponseFormat,
}

impl AnswerTool {
    pub(crate) fn new(format: &ResponseFormat) -> Self {
        Self {
            format: format.clone(),
        }
    }

    /// The tool's name: the format's name.
    pub(crate) fn name(&self) -> &str {
        &self.format.name
    }

    fn input_schema(&self) -> Value {
        input_schema(&self.format.object_schema())
    }

    /// The answer's JSON text from the tool's input.
    pub(crate) fn answer(&self, input: &Value) -> String {
        self.format.unwrap_answer(&input.to_string())
    }
}

/// The schema without the meta-schema URI; the API wants an object schema.
fn input_schema(parameters: &Value) -> Value {
    let mut schema = parameters.clone();
    if let Value::Object(map) = &mut schema {
        map.remove("$schema");
        map.entry("type").or_insert_with(|| json!("object"));
    }
    schema
}

fn tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::None => json!({ "type": "none" }),
        ToolChoice::Required => json!({ "type": "any" }),
        ToolChoice::Tool(name) => json!({ "type": "tool", "name": name }),
        _ => json!({ "type": "auto" }),
    }
}

/// The system text and the alternating user/assistant turns.
fn conversation(messages: &[Message]) -> (Option<String>, Vec<wire::MessageOut>) {
    let system: Vec<String> = messages
        .iter()
        .filter(|message| message.role == Role::System)
        .map(Message::text)
        .collect();
    let turns = merged_turns(messages, "assistant", block)
        .into_iter()
        .map(|(role, content)| wire::MessageOut { role, content })
        .collect();
    let system = system.join("\n\n");
    ((!system.is_empty()).then_some(system), turns)
}

fn block(part: &ContentPart) -> Option<wire::BlockOut> {
    Some(match part {
        // The API rejects empty text blocks.
        ContentPart::Text { text } if text.is_empty() => return None,
        ContentPart::Text { text } => wire::BlockOut::Text { text: text.clone() },
        ContentPart::Image(ImageSource::Url { url }) => wire::BlockOut::Image {
            source: wire::ImageSourceOut::Url { url: url.clone() },
        },
        ContentPart::Image(ImageSource::Base64 { media_type, data }) => wire::BlockOut::Image {
            source: wire::ImageSourceOut::Base64 {
                media_type: media_type.clone(),
                data: data.clone(),
            },
        },
        ContentPart::ToolCall(call) => wire::BlockOut::ToolUse {
            id: call.id.clone(),
            name: call.name.clone(),
            input: call.arguments.clone(),
        },
        ContentPart::ToolResult(result) => wire::BlockOut::ToolResult {
            tool_use_id: result.call_id.clone(),
            content: result.content.clone(),
            is_error: result.is_error,
        },
        ContentPart::Reasoning(reasoning) => return thinking_block(reasoning),
        _ => return None,
    })
}

/// A thinking block to send back unchanged. Other providers' reasoning is
/// not for Anthropic, and the API rejects thinking without its signature
/// (e.g. from a stream cut off mid-block), so both are left out.
fn thinking_block(reasoning: &Reasoning) -> Option<wire::BlockOut> {
    if !reasoning.is_from(PROVIDER) {
        return None;
    }
    if let Some(data) = &reasoning.redacted {
        return Some(wire::BlockOut::RedactedThinking { data: data.clone() });
    }
    Some(wire::BlockOut::Thinking {
        thinking: reasoning.text.clone(),
        signature: reasoning.signature.clone()?,
    })
}

/// The reasoning part for a `thinking` block.
pub(crate) fn thinking(text: String, signature: Option<String>) -> Reasoning {
    Reasoning {
        signature: signature.filter(|s| !s.is_empty()),
        ..Reasoning::new(PROVIDER, text)
    }
}

/// The stop reason for a `stop_reason`; a refusal is an error.
pub(crate) fn stop_reason(reason: Option<&str>) -> Result<StopReason, ModelError> {
    Ok(match reason {
        Some("end_turn") | None => StopReason::EndTurn,
        Some("tool_use") => StopReason::ToolUse,
        Some("max_tokens") => StopReason::MaxTokens,
        Some("stop_sequence") => StopReason::StopSequence,
        Some("refusal") => {
            return Err(ModelError::ContentFiltered {
                reason: "refusal".to_owned(),
            });
        }
        Some(other) => StopReason::Other(other.to_owned()),
    })
}

fn response(
    wire: wire::MessageResponse,
    answer: Option<&AnswerTool>,
) -> Result<ModelResponse, ModelError> {
    let mut stop_reason = stop_reason(wire.stop_reason.as_deref())?;
    let content: Vec<ContentPart> = wire
        .content
        .into_iter()
        .filter_map(|block| match block {
            wire::BlockIn::Text { text } => Some(ContentPart::text(text)),
            wire::BlockIn::ToolUse { name, input, .. }
                if answer.is_some_and(|answer| answer.name() == name) =>
            {
                answer.map(|answer| ContentPart::text(answer.answer(&input)))
            }
            wire::BlockIn::ToolUse { id, name, input } => {
                let input = if input.is_null() { json!({}) } else { input };
                Some(ContentPart::ToolCall(ToolCall::new(id, name, input)))
            }
            wire::BlockIn::Thinking {
                thinking: text,
                signature,
            } => Some(ContentPart::Reasoning(thinking(text, signature))),
            wire::BlockIn::RedactedThinking { data } => {
                Some(ContentPart::Reasoning(Reasoning::redacted(PROVIDER, data)))
            }
            wire::BlockIn::Other => None,
        })
        .collect();
    if answer.is_some()
        && stop_reason == StopReason::ToolUse
        && !content.iter().any(|part| part.as_tool_call().is_some())
    {
        stop_reason = StopReason::EndTurn;
    }
    Ok(ModelResponse::new(content, wire.usage.usage(), stop_reason))
}

#[async_trait]
impl LanguageModel for CompletionModel {
    async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        let body = self.body(request, false)?;
        let wire: wire::MessageResponse = self
            .client
            .inner
            .post_json(&self.model, &self.url(), &body)
            .await?;
        let answer = request.response_format.as_ref().map(AnswerTool::new);
        // A refusal or an odd answer quoted in an error may carry a secret.
        response(wire, answer.as_ref()).map_err(ModelError::redacted)
    }

    async fn stream(&self, request: &ModelRequest) -> Result<ModelStream, ModelError> {
        let body = self.body(request, true)?;
        self.client
            .inner
            .post_stream(
                &self.model,
                &self.url(),
                &body,
                EventDecoder::new(request.response_format.as_ref().map(AnswerTool::new)),
            )
            .await
    }

    fn provider(&self) -> &str {
        PROVIDER
    }

    fn model_name(&self) -> &str {
        &self.model
    }
}
