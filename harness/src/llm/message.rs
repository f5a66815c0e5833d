//! Conversation messages and their content parts.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::llm::tool::ToolError;

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
}

impl ToolCall {
    /// A tool call with the given id, tool name and arguments.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            arguments,
        }
    }

    /// Parses the arguments into `T`.
    ///
    /// The error is a [`ToolError::InvalidArguments`], whose message is written
    /// to be shown to the model so it can correct itself.
    pub fn parse_arguments<T: DeserializeOwned>(&self) -> Result<T, ToolError> {
        T::deserialize(&self.arguments).map_err(|e| ToolError::InvalidArguments {
            tool: self.name.clone(),
            message: e.to_string(),
        })
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

    /// The text parts joined together (no separator), ignoring other parts.
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(ContentPart::as_text)
            .collect()
    }

    /// The tool calls in this message, in order.
    pub fn tool_calls(&self) -> impl Iterator<Item = &ToolCall> {
        self.content.iter().filter_map(|part| match part {
            ContentPart::ToolCall(call) => Some(call),
            _ => None,
        })
    }
}
