//! The typed error every model call returns.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Why a call to a [`LanguageModel`](crate::llm::LanguageModel) failed.
///
/// Each variant says what went wrong and its message says what to do about it.
/// [`ModelError::is_retryable`] tells the transient failures (rate limits,
/// overload, timeouts, dropped connections) from the ones a retry cannot fix.
///
/// The type is plain data (`Clone`, `PartialEq`, serde) so that scripted and
/// replayed models can hand back the exact error a test expects; causes from
/// lower layers are folded into the `message` text.
#[derive(Debug, Clone, PartialEq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ModelError {
    /// The provider rejected the credentials (HTTP 401 or 403): the API key is
    /// wrong, revoked, or lacks access to the model.
    #[error("authentication failed: {message}; check the API key and that it may use this model")]
    Auth {
        /// What the provider said.
        message: String,
    },

    /// The provider is rate limiting this key (HTTP 429, or a quota error).
    #[error("rate limited: {message}{}", retry_hint(*retry_after))]
    RateLimited {
        /// How long the provider asked us to wait (`Retry-After`), if it said.
        retry_after: Option<Duration>,
        /// What the provider said.
        message: String,
    },

    /// The provider is overloaded or failed internally (HTTP 5xx, Anthropic's
    /// 529, or an overload error event inside a stream), or gave up waiting
    /// for the request (HTTP 408). Usually transient.
    #[error("provider unavailable{}: {message}{}", status_hint(*status), retry_hint(*retry_after))]
    Overloaded {
        /// The HTTP status, when the failure came with one.
        status: Option<u16>,
        /// What the provider said.
        message: String,
        /// How long the provider asked us to wait (`Retry-After` on a 503),
        /// if it said: after the HTTP client's own retries, the caller
        /// still knows when to try again.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after: Option<Duration>,
    },

    /// No answer (or no further stream chunk) arrived in time.
    ///
    /// Made with [`ModelError::timeout`]; the HTTP providers name the model
    /// the request was for (see [`ModelError::for_model`]), so that an agent
    /// calling several can tell which did not answer.
    #[error("the model{} did not answer within {after:?}; retry, or raise the timeout", model_hint(model.as_deref()))]
    Timeout {
        /// The time limit that ran out.
        after: Duration,
        /// The model the request was for, when the caller knew it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
    },

    /// The provider refused the request as malformed (HTTP 400, 404, 413, 422):
    /// unknown model, context too long, a bad tool schema, and the like.
    /// Retrying the same request will fail again.
    #[error("invalid request{}: {message}; fix the request before retrying", status_hint(*status))]
    InvalidRequest {
        /// The HTTP status, when the failure came with one.
        status: Option<u16>,
        /// What the provider said.
        message: String,
    },

    /// The provider answered with something this crate cannot parse: a body
    /// that is not the documented JSON, a stream cut off before its end, tool
    /// arguments that are not JSON.
    #[error("malformed response from the provider: {message}")]
    MalformedResponse {
        /// What could not be parsed, and where.
        message: String,
    },

    /// The answer is larger than the client's limit: a body, or one event
    /// of a stream. Nothing past the limit was read.
    #[error(
        "the provider's {what} is larger than the limit of {limit} bytes; raise it if this is expected"
    )]
    ResponseTooLarge {
        /// What: `response body`, `stream event`, ….
        what: String,
        /// The limit, in bytes.
        limit: u64,
    },

    /// The provider withheld the answer because of its content policy.
    #[error("the provider filtered the content ({reason}); rephrase the request")]
    ContentFiltered {
        /// The provider's reason, e.g. `content_filter` or `SAFETY`.
        reason: String,
    },

    /// The connection failed: DNS, TLS, refused or reset connection, or the
    /// body stopped mid-way. Usually transient.
    #[error("transport error: {message}; check the base URL and the network")]
    Transport {
        /// The failure, with its causes.
        message: String,
    },

    /// The model is configured wrongly: no API key, an unparsable base URL.
    #[error("configuration error: {message}")]
    Configuration {
        /// What is missing or wrong and how to set it.
        message: String,
    },

    /// A [`ScriptedModel`](crate::llm::ScriptedModel) got a request its script
    /// did not expect: one past the end of the script, or one that fails the
    /// turn's expectation.
    #[error("scripted model, turn {turn}: {message}")]
    ScriptMismatch {
        /// Which request it was, counting from 1.
        turn: usize,
        /// What was expected and what came instead.
        message: String,
    },

    /// A [`Replay`](crate::llm::Replay) got a request that differs from the
    /// recorded one, or more requests than were recorded.
    #[error("replay, turn {turn}: {message}; re-record the recording if the change is intended")]
    ReplayMismatch {
        /// Which request it was, counting from 1.
        turn: usize,
        /// Where the request differs from the recording.
        message: String,
    },

    /// Reading or writing a recording file failed: a
    /// [`Recorded`](crate::llm::Recorded) model could not save an exchange, or
    /// a [`Replay`](crate::llm::Replay) could not load its file.
    #[error("recording file {}: {message}", path.display())]
    Recording {
        /// The recording file.
        path: PathBuf,
        /// The I/O or serialization failure.
        message: String,
    },

    /// Any other failure: one a custom [`LanguageModel`](crate::llm::LanguageModel)
    /// reports, or an error a provider's stream sent without a kind the
    /// provider's crate maps to another variant (its message is then the
    /// provider's own).
    #[error("{message}")]
    Other {
        /// What went wrong.
        message: String,
    },
}

fn retry_hint(retry_after: Option<Duration>) -> String {
    match retry_after {
        Some(wait) => format!("; retry after {wait:?}"),
        None => "; retry later".to_owned(),
    }
}

fn model_hint(model: Option<&str>) -> String {
    model.map_or_else(String::new, |model| format!(" {model:?}"))
}

fn status_hint(status: Option<u16>) -> String {
    match status {
        Some(code) => format!(" (HTTP {code})"),
        None => String::new(),
    }
}

impl ModelError {
    /// Whether retrying the same request later may succeed: rate limits,
    /// overload, timeouts and transport failures.
    ///
    /// ```
    /// use harness::llm::ModelError;
    /// let busy = ModelError::Overloaded { status: Some(503), message: "busy".into(), retry_after: None };
    /// assert!(busy.is_retryable());
    /// assert!(!ModelError::Auth { message: "bad key".into() }.is_retryable());
    /// ```
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::RateLimited { .. }
                | Self::Overloaded { .. }
                | Self::Timeout { .. }
                | Self::Transport { .. }
        )
    }

    /// How long the provider asked to wait before retrying, if it said.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::RateLimited { retry_after, .. } | Self::Overloaded { retry_after, .. } => {
                *retry_after
            }
            _ => None,
        }
    }

    /// This error with every secret the process holds replaced in its
    /// texts (see [`crate::secrets`]): what a provider said may quote the
    /// key it was sent, or text the request carried. Free when the process
    /// holds no secret.
    ///
    /// ```
    /// use harness::llm::ModelError;
    ///
    /// harness::secrets::register("sk-live-0000111122223333");
    /// let error = ModelError::Auth { message: "bad key sk-live-0000111122223333".into() };
    /// assert_eq!(
    ///     error.redacted(),
    ///     ModelError::Auth { message: "bad key [redacted]".into() }
    /// );
    /// ```
    #[must_use]
    pub fn redacted(mut self) -> Self {
        if !crate::secrets::is_active() {
            return self;
        }
        match &mut self {
            Self::Auth { message }
            | Self::RateLimited { message, .. }
            | Self::Overloaded { message, .. }
            | Self::InvalidRequest { message, .. }
            | Self::MalformedResponse { message }
            | Self::Transport { message }
            | Self::Configuration { message }
            | Self::ScriptMismatch { message, .. }
            | Self::ReplayMismatch { message, .. }
            | Self::Recording { message, .. }
            | Self::Other { message } => {
                crate::secrets::redact_string(message);
            }
            Self::ResponseTooLarge { what, .. } => {
                crate::secrets::redact_string(what);
            }
            Self::ContentFiltered { reason } => {
                crate::secrets::redact_string(reason);
            }
            Self::Timeout { model, .. } => {
                if let Some(model) = model {
                    crate::secrets::redact_string(model);
                }
            }
        }
        self
    }

    /// A [`ModelError::Timeout`] after `after`, naming no model.
    ///
    /// ```
    /// use harness::llm::ModelError;
    /// use std::time::Duration;
    ///
    /// let error = ModelError::timeout(Duration::from_secs(60)).for_model("qwen3-4b");
    /// assert_eq!(
    ///     error.to_string(),
    ///     "the model \"qwen3-4b\" did not answer within 60s; retry, or raise the timeout"
    /// );
    /// ```
    pub fn timeout(after: Duration) -> Self {
        Self::Timeout { after, model: None }
    }

    /// This error naming `model` where its variant has room for it and
    /// names none yet ([`ModelError::Timeout`]); any other error as it is
    /// (a provider's own message usually names the model).
    #[must_use]
    pub fn for_model(mut self, name: &str) -> Self {
        if let Self::Timeout {
            model: model @ None,
            ..
        } = &mut self
            && !name.is_empty()
        {
            *model = Some(name.to_owned());
        }
        self
    }

    /// A [`ModelError::MalformedResponse`] with the given message.
    pub fn malformed(message: impl Into<String>) -> Self {
        Self::MalformedResponse {
            message: message.into(),
        }
    }

    /// A [`ModelError::Other`] with the given message.
    pub fn other(message: impl Into<String>) -> Self {
        Self::Other {
            message: message.into(),
        }
    }
}

/// Why a tool call could not be answered.
///
/// The messages are addressed to the model: a loop can send
/// `error.to_string()` back as a failed [`ToolResult`](crate::llm::ToolResult) (see
/// [`ToolSet::dispatch_or_report`](crate::llm::ToolSet::dispatch_or_report)) and the model can correct itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ToolError {
    /// The model called a tool that is not in the set.
    #[error("unknown tool `{name}`; the available tools are: {}", available.join(", "))]
    UnknownTool {
        /// The name the model used.
        name: String,
        /// The names it could have used.
        available: Vec<String>,
    },
    /// The arguments do not match the tool's schema.
    #[error(
        "invalid arguments for tool `{tool}`: {message}; call it again with arguments matching its schema"
    )]
    InvalidArguments {
        /// The tool's name.
        tool: String,
        /// What is wrong with them.
        message: String,
    },
    /// The tool ran and failed.
    #[error("tool `{tool}` failed: {message}")]
    Failed {
        /// The tool's name.
        tool: String,
        /// The tool's own error message.
        message: String,
    },
}

impl ToolError {
    /// This error with every secret the process holds replaced in its
    /// texts (see [`crate::secrets`]): a tool's failure may quote what it
    /// read. [`ToolSet::dispatch`](crate::llm::ToolSet::dispatch) returns
    /// its errors redacted.
    #[must_use]
    pub fn redacted(mut self) -> Self {
        match &mut self {
            Self::UnknownTool { name, .. } => {
                crate::secrets::redact_string(name);
            }
            Self::InvalidArguments { message, .. } | Self::Failed { message, .. } => {
                crate::secrets::redact_string(message);
            }
        }
        self
    }
}

/// A tool's arguments as `T`, or a [`ToolError::InvalidArguments`] naming
/// the argument that does not fit (`` `city`: invalid type: integer `5`,
/// expected a string ``, `` `items[2].qty`: … ``), so that the model knows
/// which one to fix.
pub(crate) fn parse_arguments<T: serde::de::DeserializeOwned>(
    tool: &str,
    arguments: &serde_json::Value,
) -> Result<T, ToolError> {
    serde_path_to_error::deserialize(arguments).map_err(|e| {
        let path = e.path().to_string();
        let message = if path == "." {
            e.inner().to_string()
        } else {
            format!("`{path}`: {}", e.inner())
        };
        ToolError::InvalidArguments {
            tool: tool.to_owned(),
            message,
        }
    })
}
