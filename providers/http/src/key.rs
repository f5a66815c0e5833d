//! API keys that stay out of logs.

use std::fmt;

use harness::llm::ModelError;
use reqwest::header::HeaderValue;

/// A provider API key. Its `Debug` output is redacted, it has no `Display`,
/// and the header made from it is marked sensitive, so it is never logged.
///
/// Its value is also redacted wherever it turns up in text: making a key
/// [registers](harness::secrets::register) it as a secret of the process,
/// so a server's error that quotes the key, a tool output that prints the
/// environment, the state written to a session store and the traces carry
/// `[redacted]` in its place (see [`harness::secrets`]; a key shorter than
/// [`MIN_SECRET_LEN`](harness::secrets::MIN_SECRET_LEN) bytes is not, as
/// replacing it would mangle ordinary text).
///
/// ```
/// use harness_provider_http::ApiKey;
/// let key = ApiKey::new("sk-secret-0123456789");
/// assert_eq!(format!("{key:?}"), "ApiKey(<redacted>)");
/// assert_eq!(
///     harness::secrets::redact("invalid key: sk-secret-0123456789"),
///     "invalid key: [redacted]"
/// );
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

impl ApiKey {
    /// A key with the given value, registered as a secret of the process
    /// (see the type's docs).
    pub fn new(key: impl Into<String>) -> Self {
        let key = key.into();
        harness::secrets::register(&key);
        Self(key)
    }

    /// The key from the first of `variables` that is set and not empty.
    ///
    /// The error, a [`ModelError::Configuration`], names the variables.
    pub fn from_env(variables: &[&str]) -> Result<Self, ModelError> {
        variables
            .iter()
            .find_map(|name| {
                std::env::var(name)
                    .ok()
                    .map(|value| value.trim().to_owned())
                    .filter(|value| !value.is_empty())
            })
            .map(Self::new)
            .ok_or_else(|| ModelError::Configuration {
                message: format!(
                    "no API key: set {} in the environment, or pass a key to the client builder",
                    variables.join(" or ")
                ),
            })
    }

    /// The secret itself. Do not log it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// A sensitive header value `{prefix}{key}`, e.g. with prefix `"Bearer "`.
    pub fn header_value(&self, prefix: &str) -> Result<HeaderValue, ModelError> {
        let mut value = HeaderValue::from_str(&format!("{prefix}{}", self.0)).map_err(|_| {
            ModelError::Configuration {
                message: "the API key contains characters that cannot go in an HTTP header"
                    .to_owned(),
            }
        })?;
        value.set_sensitive(true);
        Ok(value)
    }
}
