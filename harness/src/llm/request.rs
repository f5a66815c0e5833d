//! What is sent to a model.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::llm::message::Message;
use crate::llm::tool::ToolSpec;

/// Whether and which tool the model must call.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", content = "name", rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides (the default).
    #[default]
    Auto,
    /// The model must not call tools.
    None,
    /// The model must call some tool.
    Required,
    /// The model must call the named tool.
    Tool(String),
}

/// The JSON answer a request asks for: a named schema, and whether the
/// provider must hold the model to it exactly (OpenAI's strict mode).
///
/// ```
/// use harness::llm::ResponseFormat;
/// use harness::schemars;
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Weather { city: String, celsius: f64 }
///
/// let format = ResponseFormat::for_type::<Weather>();
/// assert_eq!(format.name, "Weather");
/// assert!(format.strict);
/// assert_eq!(format.schema["properties"]["celsius"]["type"], "number");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ResponseFormat {
    /// A name for the answer: `[a-zA-Z0-9_-]`, at most 64 characters (the
    /// providers' limit; Anthropic uses it as the answer tool's name).
    pub name: String,
    /// JSON Schema of the answer, written for clarity; providers adapt it
    /// to what their API accepts (OpenAI's strict subset, Gemini's subset).
    pub schema: Value,
    /// Whether the provider should enforce the schema strictly where it can
    /// (OpenAI `strict: true`). On by default.
    #[serde(default = "yes")]
    pub strict: bool,
}

fn yes() -> bool {
    true
}

impl ResponseFormat {
    /// A strict format named `name` (cleaned to `[a-zA-Z0-9_-]{1,64}`)
    /// with a hand-written `schema`.
    pub fn new(name: impl AsRef<str>, schema: Value) -> Self {
        Self {
            name: clean_name(name.as_ref()),
            schema,
            strict: true,
        }
    }

    /// A strict format for `T`: its schemars schema (without the meta-schema
    /// URI), named after the type.
    pub fn for_type<T: JsonSchema>() -> Self {
        let mut schema = schemars::schema_for!(T).to_value();
        if let Value::Object(map) = &mut schema {
            map.remove("$schema");
        }
        Self::new(T::schema_name(), schema)
    }

    /// Sets whether the schema is enforced strictly, builder-style.
    pub fn with_strict(mut self, strict: bool) -> Self {
        self.strict = strict;
        self
    }

    /// Whether the schema describes a JSON object (`"type": "object"`, or
    /// `properties` without a type). Tool inputs and OpenAI's strict mode
    /// accept only objects; see [`ResponseFormat::object_schema`].
    pub fn is_object(&self) -> bool {
        match self.schema.get("type") {
            Some(kind) => kind == "object",
            None => self.schema.get("properties").is_some(),
        }
    }

    /// The schema as an object schema, for providers that accept only
    /// objects: the schema itself if [it is one](ResponseFormat::is_object),
    /// else an object whose one required property `value` is the answer
    /// (`$defs` stay at the root, where `$ref`s point).
    /// [`ResponseFormat::unwrap_answer`] takes the answer back out.
    ///
    /// ```
    /// use harness::llm::ResponseFormat;
    ///
    /// let format = ResponseFormat::for_type::<Vec<u32>>();
    /// assert_eq!(format.object_schema()["properties"]["value"]["type"], "array");
    /// assert_eq!(format.unwrap_answer(r#"{"value": [1, 2]}"#), "[1,2]");
    /// ```
    pub fn object_schema(&self) -> Value {
        if self.is_object() {
            return self.schema.clone();
        }
        let mut inner = self.schema.clone();
        let mut wrapper = Map::new();
        wrapper.insert("type".to_owned(), Value::from("object"));
        if let Value::Object(map) = &mut inner {
            for key in ["$defs", "definitions"] {
                if let Some(defs) = map.remove(key) {
                    wrapper.insert(key.to_owned(), defs);
                }
            }
        }
        let mut properties = Map::new();
        properties.insert(WRAPPED.to_owned(), inner);
        wrapper.insert("properties".to_owned(), Value::Object(properties));
        wrapper.insert("required".to_owned(), Value::from(vec![WRAPPED]));
        Value::Object(wrapper)
    }

    /// The answer's JSON text from `text`, an answer shaped by
    /// [`ResponseFormat::object_schema`]: `text` itself when the schema is
    /// an object, else the `value` member. Text that is not such an object
    /// (cut off, not JSON) comes back unchanged, for the caller to report.
    pub fn unwrap_answer(&self, text: &str) -> String {
        if self.is_object() {
            return text.to_owned();
        }
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(mut map)) if map.len() == 1 && map.contains_key(WRAPPED) => map
                .remove(WRAPPED)
                .map_or_else(|| text.to_owned(), |value| value.to_string()),
            _ => text.to_owned(),
        }
    }
}

/// The property a non-object answer is wrapped in; see
/// [`ResponseFormat::object_schema`].
const WRAPPED: &str = "value";

/// `name` with characters providers reject replaced by `_`, cut to 64
/// characters; `answer` if nothing is left.
fn clean_name(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if cleaned.is_empty() {
        "answer".to_owned()
    } else {
        cleaned
    }
}

/// A request to a model: the conversation so far, the tools on offer and
/// sampling settings. Build one with [`ModelRequest::builder`] or
/// [`ModelRequest::new`].
///
/// The model's name is not part of the request: it belongs to the provider's
/// configuration, so the same loop runs unchanged against any provider.
///
/// ```
/// use harness::llm::{Message, ModelRequest};
///
/// let request = ModelRequest::builder()
///     .system("You are terse.")
///     .message(Message::user("Hi"))
///     .temperature(0.2)
///     .max_tokens(256)
///     .build();
/// assert_eq!(request.messages.len(), 2);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ModelRequest {
    /// The conversation, oldest first. System messages may appear anywhere;
    /// providers with a separate system field collect them there.
    pub messages: Vec<Message>,
    /// Tools the model may call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
    /// Whether and which tool the model must call.
    #[serde(default, skip_serializing_if = "is_auto")]
    pub tool_choice: ToolChoice,
    /// Sampling temperature; `None` keeps the provider's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Nucleus sampling mass; `None` keeps the provider's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    /// Upper bound on generated tokens; `None` keeps the provider's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Sequences that end generation when produced.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop_sequences: Vec<String>,
    /// The shape the answer must take: a JSON value matching a schema. Each
    /// provider maps it to its native structured-output mode (OpenAI's
    /// `response_format`, a forced answer tool on Anthropic, Gemini's
    /// `responseSchema`); models without one ignore it. Usually set by
    /// [`LanguageModelExt::complete_typed`](crate::llm::LanguageModelExt::complete_typed),
    /// which also validates the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<ResponseFormat>,
    /// Provider-specific fields merged into the JSON body as a JSON merge
    /// patch (RFC 7386: objects merge field by field, `null` removes a
    /// field, anything else replaces it), e.g. `{"seed": 7}` or, for Gemini,
    /// `{"generationConfig": {"thinkingConfig": {"includeThoughts": true}}}`
    /// alongside the `generationConfig` made from the request. Using it ties
    /// the request to one provider's API.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub extra: Map<String, Value>,
}

fn is_auto(choice: &ToolChoice) -> bool {
    *choice == ToolChoice::Auto
}

impl ModelRequest {
    /// A request with the given messages and default settings.
    pub fn new(messages: impl IntoIterator<Item = Message>) -> Self {
        Self {
            messages: messages.into_iter().collect(),
            ..Self::default()
        }
    }

    /// A builder for a request.
    pub fn builder() -> ModelRequestBuilder {
        ModelRequestBuilder::default()
    }

    /// The last message, if any.
    pub fn last_message(&self) -> Option<&Message> {
        self.messages.last()
    }
}

/// Builds a [`ModelRequest`]; see there for an example.
#[derive(Debug, Clone, Default)]
pub struct ModelRequestBuilder {
    request: ModelRequest,
}

impl ModelRequestBuilder {
    /// Appends a system message.
    pub fn system(mut self, text: impl Into<String>) -> Self {
        self.request.messages.push(Message::system(text));
        self
    }

    /// Appends a user message with the given text.
    pub fn user(mut self, text: impl Into<String>) -> Self {
        self.request.messages.push(Message::user(text));
        self
    }

    /// Appends a message.
    pub fn message(mut self, message: Message) -> Self {
        self.request.messages.push(message);
        self
    }

    /// Appends messages.
    pub fn messages(mut self, messages: impl IntoIterator<Item = Message>) -> Self {
        self.request.messages.extend(messages);
        self
    }

    /// Offers a tool.
    pub fn tool(mut self, tool: ToolSpec) -> Self {
        self.request.tools.push(tool);
        self
    }

    /// Offers tools, e.g. `ToolSet::specs()`.
    pub fn tools(mut self, tools: impl IntoIterator<Item = ToolSpec>) -> Self {
        self.request.tools.extend(tools);
        self
    }

    /// Sets whether and which tool the model must call.
    pub fn tool_choice(mut self, choice: ToolChoice) -> Self {
        self.request.tool_choice = choice;
        self
    }

    /// Sets the sampling temperature.
    pub fn temperature(mut self, temperature: f32) -> Self {
        self.request.temperature = Some(temperature);
        self
    }

    /// Sets the nucleus sampling mass.
    pub fn top_p(mut self, top_p: f32) -> Self {
        self.request.top_p = Some(top_p);
        self
    }

    /// Sets the upper bound on generated tokens.
    pub fn max_tokens(mut self, max_tokens: u32) -> Self {
        self.request.max_tokens = Some(max_tokens);
        self
    }

    /// Adds a stop sequence.
    pub fn stop_sequence(mut self, stop: impl Into<String>) -> Self {
        self.request.stop_sequences.push(stop.into());
        self
    }

    /// Requires the answer to be JSON matching `format`'s schema; see
    /// [`ModelRequest::response_format`].
    pub fn response_format(mut self, format: ResponseFormat) -> Self {
        self.request.response_format = Some(format);
        self
    }

    /// Sets a provider-specific top-level body field; see [`ModelRequest::extra`].
    pub fn extra(mut self, key: impl Into<String>, value: Value) -> Self {
        self.request.extra.insert(key.into(), value);
        self
    }

    /// The finished request.
    pub fn build(self) -> ModelRequest {
        self.request
    }
}
