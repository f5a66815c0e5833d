//! Conversation messages and their content parts.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::llm::error::ToolError;

/// Who wrote a [`Message`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Instructions for the model; providers that keep them apart from the
    /// conversation (Anthropic, Gemini) receive them there.
    System,
    /// The person, or the program acting for them.
    User,
    /// The model.
    Assistant,
    /// Results of tool calls, answering the assistant's [`ToolCall`]s.
    Tool,
}

/// Where an image comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum ImageSource {
    /// An image the provider fetches itself (OpenAI and Anthropic accept
    /// `https` URLs; Gemini accepts file URIs it knows).
    Url {
        /// The image URL.
        url: String,
    },
    /// Image bytes inline, base64-encoded.
    Base64 {
        /// The MIME type, e.g. `image/png`.
        media_type: String,
        /// The base64-encoded bytes (standard alphabet, with padding).
        data: String,
    },
}

/// A tool invocation the model asked for.
///
/// ```
/// use harness::llm::ToolCall;
/// use serde_json::json;
///
/// #[derive(serde::Deserialize)]
/// struct Weather { city: String }
///
/// let call = ToolCall::new("call_1", "get_weather", json!({ "city": "Paris" }));
/// let args: Weather = call.parse_arguments().unwrap();
/// assert_eq!(args.city, "Paris");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ToolCall {
    /// The provider's id for this call; the matching [`ToolResult`] repeats it.
    pub id: String,
    /// The name of the tool to run.
    pub name: String,
    /// The arguments, as the JSON object the model produced.
    pub arguments: Value,
    /// An opaque signature the provider attached to this call and wants
    /// back with it (Gemini's `thoughtSignature`). Only the provider that
    /// signed the call sends it back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<ProviderSignature>,
}

impl ToolCall {
    /// A tool call with the given id, tool name and arguments, unsigned.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            arguments,
            signature: None,
        }
    }

    /// Attaches `provider`'s opaque `value` to the call, builder-style.
    ///
    /// ```
    /// use harness::llm::ToolCall;
    /// use serde_json::json;
    ///
    /// let call = ToolCall::new("c1", "now", json!({})).with_signature("gemini", "Cq8B");
    /// assert_eq!(call.signature_for("gemini"), Some("Cq8B"));
    /// assert_eq!(call.signature_for("anthropic"), None);
    /// ```
    pub fn with_signature(mut self, provider: impl Into<String>, value: impl Into<String>) -> Self {
        self.signature = Some(ProviderSignature {
            provider: provider.into(),
            value: value.into(),
        });
        self
    }

    /// The signature's value if `provider` signed this call.
    pub fn signature_for(&self, provider: &str) -> Option<&str> {
        self.signature
            .as_ref()
            .filter(|signature| signature.provider == provider)
            .map(|signature| signature.value.as_str())
    }

    /// Parses the arguments into `T`.
    ///
    /// The error is a [`ToolError::InvalidArguments`], whose message is written
    /// to be shown to the model so it can correct itself.
    pub fn parse_arguments<T: DeserializeOwned>(&self) -> Result<T, ToolError> {
        super::error::parse_arguments(&self.name, &self.arguments)
    }
}

/// An opaque value a provider attached to part of its answer, tagged with
/// the provider's name so that no other provider is sent it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProviderSignature {
    /// The provider that produced it, as its
    /// [`LanguageModel::provider`](crate::llm::LanguageModel::provider)
    /// names itself (e.g. `"gemini"`).
    pub provider: String,
    /// The value, exactly as received.
    pub value: String,
}

/// A model's reasoning, kept in the conversation so that it can go back to
/// the provider that produced it.
///
/// Models that think before they answer return their reasoning (or a
/// summary of it) with the answer, often signed, and some providers require
/// it back unchanged in the next request: Anthropic rejects a conversation
/// whose tool use lost the thinking before it. A loop that appends the
/// model's answer to the conversation as it is (for example with
/// [`ModelResponse::into_message`](crate::llm::ModelResponse::into_message))
/// does that without knowing about it.
///
/// Reasoning is opaque to other providers: each provider sends back only the
/// reasoning whose `provider` is its own name and drops the rest, so a
/// conversation can switch providers midway. It is not part of the answer's
/// text ([`Message::text`] leaves it out).
///
/// ```
/// use harness::llm::{ContentPart, Message, Reasoning, Role};
///
/// let answer = Message::new(Role::Assistant, [
///     ContentPart::Reasoning(Reasoning::new("anthropic", "The user wants…").with_signature("EqQB…")),
///     ContentPart::text("Paris."),
/// ]);
/// assert_eq!(answer.text(), "Paris.");
/// assert_eq!(answer.reasoning().next().unwrap().signature.as_deref(), Some("EqQB…"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Reasoning {
    /// The provider that produced it, as its
    /// [`LanguageModel::provider`](crate::llm::LanguageModel::provider)
    /// names itself (`"anthropic"`, `"gemini"`).
    pub provider: String,
    /// The reasoning text (or the provider's summary of it). Empty when the
    /// provider sent only a signature or redacted data.
    #[serde(default)]
    pub text: String,
    /// The provider's signature over the reasoning, sent back with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// Reasoning the provider withheld, as the encrypted data it sent in its
    /// place (Anthropic's `redacted_thinking`), sent back with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redacted: Option<String>,
}

impl Reasoning {
    /// Reasoning `text` from `provider`, unsigned.
    pub fn new(provider: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            provider: provider.into(),
            text: text.into(),
            signature: None,
            redacted: None,
        }
    }

    /// Reasoning `provider` withheld, as the opaque `data` it sent instead.
    pub fn redacted(provider: impl Into<String>, data: impl Into<String>) -> Self {
        Self {
            redacted: Some(data.into()),
            ..Self::new(provider, "")
        }
    }

    /// Sets the signature, builder-style.
    pub fn with_signature(mut self, signature: impl Into<String>) -> Self {
        self.signature = Some(signature.into());
        self
    }

    /// Whether `provider` produced this reasoning (and so may be sent it).
    pub fn is_from(&self, provider: &str) -> bool {
        self.provider == provider
    }
}

/// The outcome of running a tool, sent back to the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ToolResult {
    /// The id of the [`ToolCall`] this answers.
    pub call_id: String,
    /// The name of the tool that ran (Gemini matches results by name).
    pub name: String,
    /// The output: plain text, or JSON text for structured output.
    pub content: String,
    /// Whether the tool failed; `content` then explains why.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
}

impl ToolResult {
    /// A successful result answering `call`.
    pub fn success(call: &ToolCall, content: impl Into<String>) -> Self {
        Self {
            call_id: call.id.clone(),
            name: call.name.clone(),
            content: content.into(),
            is_error: false,
        }
    }

    /// A failed result answering `call`; `message` is shown to the model.
    pub fn failure(call: &ToolCall, message: impl Into<String>) -> Self {
        Self {
            call_id: call.id.clone(),
            name: call.name.clone(),
            content: message.into(),
            is_error: true,
        }
    }
}

/// One piece of a message's content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ContentPart {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// An image (user messages only, for the providers in this workspace).
    Image(ImageSource),
    /// A tool invocation (assistant messages).
    ToolCall(ToolCall),
    /// A tool's outcome (tool messages).
    ToolResult(ToolResult),
    /// The model's reasoning (assistant messages), sent back only to the
    /// provider that produced it; see [`Reasoning`].
    Reasoning(Reasoning),
}

impl ContentPart {
    /// A text part.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text { text: text.into() }
    }

    /// An image part fetched from `url`.
    pub fn image_url(url: impl Into<String>) -> Self {
        Self::Image(ImageSource::Url { url: url.into() })
    }

    /// An inline image part from base64 `data` of type `media_type`.
    pub fn image_base64(media_type: impl Into<String>, data: impl Into<String>) -> Self {
        Self::Image(ImageSource::Base64 {
            media_type: media_type.into(),
            data: data.into(),
        })
    }

    /// The text, if this is a text part.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Self::Text { text } => Some(text),
            _ => None,
        }
    }

    /// The tool call, if this is a tool call part.
    pub fn as_tool_call(&self) -> Option<&ToolCall> {
        match self {
            Self::ToolCall(call) => Some(call),
            _ => None,
        }
    }

    /// The reasoning, if this is a reasoning part.
    pub fn as_reasoning(&self) -> Option<&Reasoning> {
        match self {
            Self::Reasoning(reasoning) => Some(reasoning),
            _ => None,
        }
    }
}

/// One turn of a conversation.
///
/// ```
/// use harness::llm::{Message, Role};
///
/// let m = Message::user("What is the weather in Paris?");
/// assert_eq!(m.role, Role::User);
/// assert_eq!(m.text(), "What is the weather in Paris?");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// What it says, in order.
    pub content: Vec<ContentPart>,
}

impl Message {
    /// A message from `role` with the given parts.
    pub fn new(role: Role, content: impl IntoIterator<Item = ContentPart>) -> Self {
        Self {
            role,
            content: content.into_iter().collect(),
        }
    }

    /// A system message with the given text.
    pub fn system(text: impl Into<String>) -> Self {
        Self::new(Role::System, [ContentPart::text(text)])
    }

    /// A user message with the given text.
    pub fn user(text: impl Into<String>) -> Self {
        Self::new(Role::User, [ContentPart::text(text)])
    }

    /// An assistant message with the given text.
    pub fn assistant(text: impl Into<String>) -> Self {
        Self::new(Role::Assistant, [ContentPart::text(text)])
    }

    /// A tool message carrying one result.
    pub fn tool_result(result: ToolResult) -> Self {
        Self::new(Role::Tool, [ContentPart::ToolResult(result)])
    }

    /// A tool message carrying several results (answering parallel calls).
    pub fn tool_results(results: impl IntoIterator<Item = ToolResult>) -> Self {
        Self::new(Role::Tool, results.into_iter().map(ContentPart::ToolResult))
    }

    /// Appends a part, builder-style.
    ///
    /// ```
    /// use harness::llm::{ContentPart, Message};
    ///
    /// let m = Message::user("What is in this picture?")
    ///     .with(ContentPart::image_url("https://example.com/cat.png"));
    /// assert_eq!(m.content.len(), 2);
    /// ```
    pub fn with(mut self, part: ContentPart) -> Self {
        self.content.push(part);
        self
    }

    /// The text parts joined together (no separator); other parts, reasoning
    /// among them, are left out.
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(ContentPart::as_text)
            .collect()
    }

    /// The tool calls in this message, in order.
    pub fn tool_calls(&self) -> impl Iterator<Item = &ToolCall> {
        self.content.iter().filter_map(ContentPart::as_tool_call)
    }

    /// The reasoning parts in this message, in order.
    pub fn reasoning(&self) -> impl Iterator<Item = &Reasoning> {
        self.content.iter().filter_map(ContentPart::as_reasoning)
    }
}
