//! Tools the model may call: their specs, the [`Tool`] trait and [`ToolSet`].

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::llm::error::ToolError;
use crate::llm::message::{ToolCall, ToolResult};

/// A tool as offered to the model: its name, what it does, and the JSON
/// Schema of its arguments.
///
/// Providers adapt the schema to what their API accepts (OpenAI's strict
/// mode, Gemini's schema subset), so write it for clarity, not for a vendor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The name the model calls the tool by. Providers accept
    /// `[a-zA-Z0-9_-]`, at most 64 characters.
    pub name: String,
    /// What the tool does and when to use it, for the model.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
}

impl ToolSpec {
    /// A spec with a hand-written argument schema.
    pub fn new(name: impl Into<String>, description: impl Into<String>, parameters: Value) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            parameters,
        }
    }

    /// A spec whose argument schema is derived from `A` with schemars.
    ///
    /// Doc comments on `A`'s fields become property descriptions the model
    /// reads.
    ///
    /// ```
    /// use harness::llm::ToolSpec;
    /// use harness::schemars;
    ///
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct WeatherArgs {
    ///     /// City name, e.g. "Paris".
    ///     city: String,
    /// }
    ///
    /// let spec = ToolSpec::from_args::<WeatherArgs>("get_weather", "Current weather in a city");
    /// assert_eq!(spec.parameters["properties"]["city"]["type"], "string");
    /// ```
    pub fn from_args<A: JsonSchema>(
        name: impl Into<String>,
        description: impl Into<String>,
    ) -> Self {
        Self::new(name, description, args_schema::<A>())
    }
}

/// The JSON Schema of `A` as a tool-argument schema: the meta-schema URI and
/// the Rust type's title are dropped, since they only distract the model.
fn args_schema<A: JsonSchema>() -> Value {
    let mut schema = schemars::schema_for!(A).to_value();
    if let Value::Object(map) = &mut schema {
        map.remove("$schema");
        map.remove("title");
    }
    schema
}

/// A typed tool the model can call.
///
/// ```
/// use harness::llm::{Tool, ToolCall, ToolSet};
/// use harness::schemars;
/// use serde_json::json;
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct AddArgs { a: i64, b: i64 }
///
/// struct Add;
///
/// #[harness::async_trait]
/// impl Tool for Add {
///     type Args = AddArgs;
///     type Output = i64;
///     type Error = std::convert::Infallible;
///     fn name(&self) -> &str { "add" }
///     fn description(&self) -> &str { "Adds two integers" }
///     async fn call(&self, args: AddArgs) -> Result<i64, Self::Error> {
///         Ok(args.a + args.b)
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let tools = ToolSet::new().with(Add);
/// let result = tools
///     .dispatch(&ToolCall::new("call_1", "add", json!({ "a": 2, "b": 3 })))
///     .await
///     .unwrap();
/// assert_eq!(result.content, "5");
/// # }
/// ```
#[async_trait]
pub trait Tool: Send + Sync {
    /// The arguments; their JSON Schema is what the model is shown.
    type Args: DeserializeOwned + JsonSchema + Send;
    /// What the tool returns. A string is sent as is; anything else as JSON.
    type Output: Serialize + Send;
    /// How the tool fails. Its `Display` text is shown to the model.
    type Error: fmt::Display + Send;

    /// The name the model calls the tool by.
    fn name(&self) -> &str;

    /// What the tool does and when to use it, for the model.
    fn description(&self) -> &str;

    /// Runs the tool.
    async fn call(&self, args: Self::Args) -> Result<Self::Output, Self::Error>;

    /// The spec offered to the model. The default derives the schema from
    /// [`Tool::Args`].
    fn spec(&self) -> ToolSpec {
        ToolSpec::from_args::<Self::Args>(self.name(), self.description())
    }
}

/// [`Tool`] with its types erased, so tools of different types share a set.
#[async_trait]
trait ErasedTool: Send + Sync {
    async fn call_json(&self, name: &str, arguments: &Value) -> Result<String, ToolError>;
}

#[async_trait]
impl<T: Tool> ErasedTool for T {
    async fn call_json(&self, name: &str, arguments: &Value) -> Result<String, ToolError> {
        let args: T::Args = super::error::parse_arguments(name, arguments)?;
        let output = self.call(args).await.map_err(|e| ToolError::Failed {
            tool: name.to_owned(),
            message: e.to_string(),
        })?;
        match serde_json::to_value(output) {
            Ok(Value::String(text)) => Ok(text),
            Ok(value) => Ok(value.to_string()),
            Err(e) => Err(ToolError::Failed {
                tool: name.to_owned(),
                message: format!("its output could not be serialized: {e}"),
            }),
        }
    }
}

#[derive(Clone)]
struct Entry {
    spec: ToolSpec,
    tool: Arc<dyn ErasedTool>,
}

/// A set of tools: offers their specs to the model and runs the calls it makes.
///
/// Cloning is cheap (the tools are shared). See [`Tool`] for an example.
#[derive(Clone, Default)]
pub struct ToolSet {
    entries: Vec<Entry>,
}

impl fmt::Debug for ToolSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolSet")
            .field("tools", &self.names().collect::<Vec<_>>())
            .finish()
    }
}

impl ToolSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `tool`, builder-style. A tool with the same name is replaced.
    pub fn with(mut self, tool: impl Tool + 'static) -> Self {
        self.register(tool);
        self
    }

    /// Adds `tool`. A tool with the same name is replaced, keeping its place.
    pub fn register(&mut self, tool: impl Tool + 'static) -> &mut Self {
        let entry = Entry {
            spec: tool.spec(),
            tool: Arc::new(tool),
        };
        match self
            .entries
            .iter_mut()
            .find(|e| e.spec.name == entry.spec.name)
        {
            Some(existing) => *existing = entry,
            None => self.entries.push(entry),
        }
        self
    }

    /// The specs to offer the model, in registration order.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.entries.iter().map(|e| e.spec.clone()).collect()
    }

    /// The tools' names, in registration order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|e| e.spec.name.as_str())
    }

    /// Whether a tool named `name` is in the set.
    pub fn contains(&self, name: &str) -> bool {
        self.entries.iter().any(|e| e.spec.name == name)
    }

    /// How many tools the set holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Runs the tool `call` names with its arguments.
    ///
    /// An unknown name, arguments that do not fit the tool's `Args`, and the
    /// tool's own failure (a panic too) are [`ToolError`]s whose messages
    /// suit the model.
    ///
    /// The output and the error messages are redacted (see
    /// [`crate::secrets`]): a tool that reads `/proc/self/environ`, runs
    /// `env` or prints a configuration file hands the model, the state and
    /// the session store `[redacted]` instead of the keys the process holds.
    pub async fn dispatch(&self, call: &ToolCall) -> Result<ToolResult, ToolError> {
        let entry = self
            .entries
            .iter()
            .find(|e| e.spec.name == call.name)
            .ok_or_else(|| {
                ToolError::UnknownTool {
                    name: call.name.clone(),
                    available: self.names().map(str::to_owned).collect(),
                }
                .redacted()
            })?;
        // A tool that panics fails its own call, as a tool that returns an
        // error does: the model is told, and the other calls of its turn
        // still run.
        let called = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(
            entry.tool.call_json(&call.name, &call.arguments),
        ))
        .await;
        let mut content = match called {
            Ok(result) => result.map_err(ToolError::redacted)?,
            Err(panic) => {
                let message = match crate::panics::panic_message(&*panic) {
                    Some(message) => format!("the tool panicked: {message}"),
                    None => "the tool panicked".to_owned(),
                };
                return Err(ToolError::Failed {
                    tool: call.name.clone(),
                    message,
                }
                .redacted());
            }
        };
        crate::secrets::redact_string(&mut content);
        Ok(ToolResult::success(call, content))
    }

    /// Like [`ToolSet::dispatch`], but a failure becomes a failed
    /// [`ToolResult`] carrying the error message (redacted like the output),
    /// ready to send to the model.
    pub async fn dispatch_or_report(&self, call: &ToolCall) -> ToolResult {
        match self.dispatch(call).await {
            Ok(result) => result,
            Err(error) => {
                // The error's text is what the model is told, a tool's
                // output: content, which traces carry only when asked to
                // (`harness-otel`'s `capture_content`). Its kind is not.
                let reason = match &error {
                    ToolError::UnknownTool { .. } => "unknown_tool",
                    ToolError::InvalidArguments { .. } => "invalid_arguments",
                    ToolError::Failed { .. } => "failed",
                };
                tracing::debug!(tool = %call.name, reason, "tool call failed");
                ToolResult::failure(call, error.to_string())
            }
        }
    }
}
