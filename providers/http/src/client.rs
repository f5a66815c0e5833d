//! What every provider's client and client builder have in common.

use std::fmt;
use std::time::Duration;

use harness::llm::{ModelError, ModelStream};
use reqwest::header::HeaderMap;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::key::ApiKey;
use crate::retry::{HttpOptions, HttpRetryPolicy};
use crate::sse::{SseDecoder, decode_events};
use crate::transport::HttpTransport;

/// The part of a provider's `ClientBuilder` that is the same for every
/// provider: the key and base URL it was given, and the HTTP options.
///
/// A provider's builder wraps one and gets its setters (and a `Debug` that
/// keeps the key redacted) from [`provider_client!`](crate::provider_client!); its `build`
/// reads what it was not told from the provider's environment variables
/// ([`ClientBuilder::resolve_base_url`], [`ClientBuilder::api_key_or_env`])
/// and ends with [`ClientBuilder::connect`].
///
/// ```
/// use harness_provider_http::ClientBuilder;
///
/// let builder = ClientBuilder::default().api_key("sk-secret").max_attempts(0);
/// assert_eq!(builder.options().retry.max_attempts, 1);
/// assert!(!format!("{builder:?}").contains("sk-secret"));
/// ```
#[derive(Debug, Clone, Default)]
pub struct ClientBuilder {
    api_key: Option<ApiKey>,
    base_url: Option<String>,
    options: HttpOptions,
}

impl ClientBuilder {
    /// Uses this API key instead of the provider's environment variable.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(ApiKey::new(key));
        self
    }

    /// Sends requests to this API root instead of the provider's default.
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = Some(url.into());
        self
    }

    /// Time limit for one attempt (for a stream: until its headers arrive).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.options.timeout = timeout;
        self
    }

    /// Time limit for the gap between two chunks of a stream.
    pub fn stream_idle_timeout(mut self, timeout: Duration) -> Self {
        self.options.stream_idle_timeout = timeout;
        self
    }

    /// Attempts in all for a request, the first included (1: no retries).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.options.retry.max_attempts = attempts.max(1);
        self
    }

    /// Replaces the retry policy.
    pub fn retry_policy(mut self, policy: HttpRetryPolicy) -> Self {
        self.options.retry = policy;
        self
    }

    /// Replaces all timeouts and the retry policy.
    pub fn http_options(mut self, options: HttpOptions) -> Self {
        self.options = options;
        self
    }

    /// The timeouts and retry policy so far.
    pub fn options(&self) -> &HttpOptions {
        &self.options
    }

    /// The base URL: the one given to [`ClientBuilder::base_url`], else the
    /// value of `env_var` when that is set and not blank, else `default`.
    /// Checked with [`HttpTransport::check_base_url`] (trimmed, without a
    /// trailing slash).
    pub fn resolve_base_url(
        &self,
        env_var: Option<&str>,
        default: &str,
    ) -> Result<String, ModelError> {
        let base_url = match &self.base_url {
            Some(url) => url.clone(),
            None => env_var
                .and_then(|name| std::env::var(name).ok())
                .filter(|url| !url.trim().is_empty())
                .unwrap_or_else(|| default.to_owned()),
        };
        HttpTransport::check_base_url(base_url.trim())
    }

    /// The key given to [`ClientBuilder::api_key`], else the first of
    /// `variables` that is set (see [`ApiKey::from_env`]).
    pub fn api_key_or_env(&self, variables: &[&str]) -> Result<ApiKey, ModelError> {
        match &self.api_key {
            Some(key) => Ok(key.clone()),
            None => ApiKey::from_env(variables),
        }
    }

    /// The client's [`Connection`]: requests go to `base_url` with `headers`
    /// (which carry the key, made with [`ApiKey::header_value`]), through a
    /// transport for `provider` with these options.
    pub fn connect(
        self,
        provider: &'static str,
        base_url: String,
        headers: HeaderMap,
    ) -> Result<Connection, ModelError> {
        Ok(Connection {
            has_key: headers.values().any(|value| value.is_sensitive()),
            base_url,
            headers,
            transport: HttpTransport::new(provider, self.options)?,
        })
    }
}

/// Writes what a provider's `Client` and `ClientBuilder` share: the client's
/// `from_env`, `builder`, `completion_model` and `base_url`, the builder's
/// setters (forwarded to the [`ClientBuilder`] in one of its fields), and
/// both `Debug`s, which keep the key redacted.
///
/// The provider declares the two structs, `CompletionModel::new(Client,
/// String)` and `ClientBuilder::build`; it names the path from its client to
/// the [`Connection`] (`Client { inner }` for a field `inner: Arc<Connection>`)
/// and its builder's wrapped field, and writes the doc comments of the items
/// that name its environment variables, defaults and models.
///
/// ```
/// use std::sync::Arc;
///
/// use harness::llm::ModelError;
///
/// /// A provider's client.
/// #[derive(Clone)]
/// pub struct Client {
///     inner: Arc<harness_provider_http::Connection>,
/// }
///
/// /// A provider's builder.
/// #[derive(Clone, Default)]
/// pub struct ClientBuilder {
///     core: harness_provider_http::ClientBuilder,
/// }
///
/// /// A provider's model.
/// #[derive(Debug)]
/// pub struct CompletionModel(Client, String);
///
/// impl CompletionModel {
///     fn new(client: Client, model: String) -> Self {
///         Self(client, model)
///     }
/// }
///
/// impl ClientBuilder {
///     /// The client.
///     pub fn build(self) -> Result<Client, ModelError> {
///         let base_url = self.core.resolve_base_url(None, "https://example.com/v1")?;
///         let key = self.core.api_key_or_env(&["EXAMPLE_API_KEY"])?;
///         let mut headers = harness_provider_http::header::HeaderMap::new();
///         headers.insert("x-api-key", key.header_value("")?);
///         let inner = Arc::new(self.core.connect("example", base_url, headers)?);
///         Ok(Client { inner })
///     }
/// }
///
/// harness_provider_http::provider_client! {
///     Client { inner },
///     ClientBuilder { core },
///     /// A client configured from `EXAMPLE_API_KEY`.
///     from_env,
///     /// A model of this client, e.g. `"example-1"`.
///     completion_model -> CompletionModel,
///     /// Uses this API key instead of `EXAMPLE_API_KEY`.
///     api_key,
///     /// Sends requests to this API root instead of the default.
///     base_url,
/// }
///
/// let client = Client::builder().api_key("sk-secret").max_attempts(5).build()?;
/// assert_eq!(client.base_url(), "https://example.com/v1");
/// assert!(!format!("{client:?}").contains("sk-secret"));
/// assert!(!format!("{:?}", Client::builder().api_key("sk-secret")).contains("sk-secret"));
/// # Ok::<(), ModelError>(())
/// ```
#[macro_export]
macro_rules! provider_client {
    (
        $client:ident { $($connection:ident).+ },
        $builder:ident { $core:ident },
        $(#[$from_env_doc:meta])*
        from_env,
        $(#[$completion_model_doc:meta])*
        completion_model -> $model:ident,
        $(#[$api_key_doc:meta])*
        api_key,
        $(#[$base_url_doc:meta])*
        base_url $(,)?
    ) => {
        impl ::std::fmt::Debug for $client {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                ::std::fmt::Debug::fmt(&self.$($connection).+, f)
            }
        }

        impl $client {
            $(#[$from_env_doc])*
            pub fn from_env() -> ::std::result::Result<Self, $crate::__private::ModelError> {
                Self::builder().build()
            }

            #[doc = ::std::concat!(
                "A builder; what it is not told it reads as [`",
                ::std::stringify!($client),
                "::from_env`] does."
            )]
            pub fn builder() -> $builder {
                <$builder as ::std::default::Default>::default()
            }

            $(#[$completion_model_doc])*
            pub fn completion_model(
                &self,
                model: impl ::std::convert::Into<::std::string::String>,
            ) -> $model {
                $model::new(self.clone(), model.into())
            }

            /// The API root requests go to.
            pub fn base_url(&self) -> &str {
                self.$($connection).+.base_url()
            }
        }

        impl ::std::fmt::Debug for $builder {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                ::std::fmt::Debug::fmt(&self.$core, f)
            }
        }

        impl $builder {
            $(#[$api_key_doc])*
            pub fn api_key(mut self, key: impl ::std::convert::Into<::std::string::String>) -> Self {
                self.$core = self.$core.api_key(key);
                self
            }

            $(#[$base_url_doc])*
            pub fn base_url(mut self, url: impl ::std::convert::Into<::std::string::String>) -> Self {
                self.$core = self.$core.base_url(url);
                self
            }

            /// Time limit for one attempt (for a stream: until its headers arrive).
            pub fn timeout(mut self, timeout: ::std::time::Duration) -> Self {
                self.$core = self.$core.timeout(timeout);
                self
            }

            /// Time limit for the gap between two chunks of a stream.
            pub fn stream_idle_timeout(mut self, timeout: ::std::time::Duration) -> Self {
                self.$core = self.$core.stream_idle_timeout(timeout);
                self
            }

            /// Attempts in all for a request, the first included (1: no retries).
            pub fn max_attempts(mut self, attempts: u32) -> Self {
                self.$core = self.$core.max_attempts(attempts);
                self
            }

            /// Replaces the retry policy.
            pub fn retry_policy(mut self, policy: $crate::HttpRetryPolicy) -> Self {
                self.$core = self.$core.retry_policy(policy);
                self
            }

            /// Replaces all timeouts and the retry policy.
            pub fn http_options(mut self, options: $crate::HttpOptions) -> Self {
                self.$core = self.$core.http_options(options);
                self
            }
        }
    };
}

/// What a built provider client holds: the base URL, the headers that carry
/// the key, and the [`HttpTransport`]. Made by [`ClientBuilder::connect`].
///
/// Its `Debug` output reads `Client { base_url, api_key, options }`, the key
/// shown as `"<redacted>"` (or `"<none>"` when the headers carry none) and
/// the base URL as [`shown_url`](crate::shown_url) shows it (a key in its
/// user info or query redacted too), so a provider's `Client` can use it as
/// its own.
pub struct Connection {
    base_url: String,
    headers: HeaderMap,
    transport: HttpTransport,
    has_key: bool,
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("base_url", &crate::shown_url(&self.base_url))
            .field(
                "api_key",
                &if self.has_key { "<redacted>" } else { "<none>" },
            )
            .field("options", self.transport.options())
            .finish()
    }
}

impl Connection {
    /// The API root requests go to.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// POSTs `body` to `url` with the client's headers and parses the JSON
    /// answer as `T` (see [`HttpTransport::post_json`]).
    pub async fn post_json<T: DeserializeOwned>(
        &self,
        model: &str,
        url: &str,
        body: &impl Serialize,
    ) -> Result<T, ModelError> {
        self.transport
            .post_json(model, url, &self.headers, body)
            .await
    }

    /// POSTs `body` to `url` with the client's headers and decodes the
    /// server-sent events with `decoder` (see [`HttpTransport::post_sse`]
    /// and [`decode_events`]).
    pub async fn post_stream<D: SseDecoder>(
        &self,
        model: &str,
        url: &str,
        body: &impl Serialize,
        decoder: D,
    ) -> Result<ModelStream, ModelError> {
        let events = self
            .transport
            .post_sse(model, url, &self.headers, body)
            .await?;
        Ok(decode_events(events, decoder))
    }
}
