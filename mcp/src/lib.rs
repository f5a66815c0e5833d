//! The tools of MCP (Model Context Protocol) servers as harness
//! [`Tool`]s.
//!
//! [`McpClient`] connects to one server, over stdio (a child process it
//! starts) or streamable HTTP, with the official Rust SDK (`rmcp`). It lists
//! the server's tools and hands them out as a [`ToolSet`] whose tools call
//! the server; when the server says its list changed
//! (`notifications/tools/list_changed`) the client lists them again, and
//! the next [`McpClient::tool_set`] has the new list.
//!
//! Failures are typed ([`McpError`]) and name the server and the tool: a
//! result the server marks `isError`, a refused request, a transport that
//! fails or a server that dies mid-call. Through a [`ToolSet`] they become
//! failed tool results the model reads.
//!
//! ```no_run
//! use harness::llm::{ToolCall, ToolSet};
//! use harness_mcp::McpClient;
//! use serde_json::json;
//!
//! # async fn run() -> Result<(), harness_mcp::McpError> {
//! let mut command = tokio::process::Command::new("uvx");
//! command.arg("mcp-server-time");
//! let time = McpClient::stdio("time", command).await?;
//! let tools: ToolSet = time.tool_set();
//! println!("{:?}", tools.names().collect::<Vec<_>>());
//! let result = tools
//!     .dispatch_or_report(&ToolCall::new("c1", "get_current_time", json!({ "timezone": "UTC" })))
//!     .await;
//! println!("{}", result.content);
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use harness::llm::{Tool, ToolSet, ToolSpec};
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, Peer, RoleClient, ServiceError, ServiceExt};
use serde_json::Value;
use tokio::sync::watch;

/// How long a tool call may take before it fails with
/// [`McpError::Timeout`], unless [`McpOptions::call_timeout`] says otherwise.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// How long connecting (the handshake and the first listing of tools) may
/// take, unless [`McpOptions::connect_timeout`] says otherwise.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(60);

/// How to connect to a server; [`McpOptions::default`] for the defaults.
///
/// ```
/// use std::time::Duration;
/// use harness_mcp::McpOptions;
///
/// let options = McpOptions::default()
///     .connect_timeout(Duration::from_secs(10))
///     .prefix("github_")
///     .bearer_token("ghp_…");
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct McpOptions {
    /// Limit on connecting: the handshake and the first listing of tools.
    pub connect_timeout: Duration,
    /// Limit on each tool call.
    pub call_timeout: Duration,
    /// Offer the tools as `{prefix}{name}`; see [`McpClient::with_prefix`].
    pub prefix: String,
    /// A token sent as `Authorization: Bearer …` (streamable HTTP only).
    pub bearer_token: Option<String>,
}

impl Default for McpOptions {
    fn default() -> Self {
        Self {
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            prefix: String::new(),
            bearer_token: None,
        }
    }
}

impl fmt::Debug for McpOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpOptions")
            .field("connect_timeout", &self.connect_timeout)
            .field("call_timeout", &self.call_timeout)
            .field("prefix", &self.prefix)
            .field(
                "bearer_token",
                &self.bearer_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

impl McpOptions {
    /// Sets the limit on connecting.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets the limit on each tool call.
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// Sets the prefix of the tools' names.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Sets the bearer token sent to an HTTP server.
    pub fn bearer_token(mut self, token: impl Into<String>) -> Self {
        self.bearer_token = Some(token.into());
        self
    }
}

/// Why talking to an MCP server failed. Every message names the server,
/// and the tool when there is one.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// The server's process could not be started.
    #[error("could not start MCP server `{server}` ({command}): {message}")]
    Spawn {
        /// The server's name, as given to the client.
        server: String,
        /// The command line.
        command: String,
        /// The operating system's error.
        message: String,
    },
    /// The connection or the `initialize` handshake failed.
    #[error("could not connect to MCP server `{server}`: {message}")]
    Connect {
        /// The server's name.
        server: String,
        /// What failed.
        message: String,
    },
    /// Listing the server's tools failed.
    #[error("could not list the tools of MCP server `{server}`: {message}")]
    List {
        /// The server's name.
        server: String,
        /// What failed.
        message: String,
    },
    /// The tool ran and reported a failure (`isError: true`).
    #[error("tool `{tool}` of MCP server `{server}` failed: {message}")]
    ToolFailed {
        /// The server's name.
        server: String,
        /// The tool's name.
        tool: String,
        /// The tool's own message.
        message: String,
    },
    /// The server refused the call with a JSON-RPC error (unknown tool,
    /// invalid arguments, an internal error).
    #[error("MCP server `{server}` refused the call to `{tool}`: {message} (error {code})")]
    Refused {
        /// The server's name.
        server: String,
        /// The tool's name.
        tool: String,
        /// The JSON-RPC error code.
        code: i32,
        /// The server's message.
        message: String,
    },
    /// The connection failed during the call, or the server went away
    /// (its process exited, the HTTP session ended).
    #[error(
        "lost the connection to MCP server `{server}` while calling `{tool}`: {message}; the server may have exited"
    )]
    Disconnected {
        /// The server's name.
        server: String,
        /// The tool's name.
        tool: String,
        /// What the transport reported.
        message: String,
    },
    /// The call took longer than the client's limit.
    #[error("tool `{tool}` of MCP server `{server}` did not answer within {after:?}")]
    Timeout {
        /// The server's name.
        server: String,
        /// The tool's name.
        tool: String,
        /// The limit.
        after: Duration,
    },
    /// The arguments are not a JSON object, which MCP requires.
    #[error(
        "the arguments for tool `{tool}` of MCP server `{server}` must be a JSON object, not {found}"
    )]
    InvalidArguments {
        /// The server's name.
        server: String,
        /// The tool's name.
        tool: String,
        /// What kind of JSON value was given.
        found: &'static str,
    },
}

/// What the client and its tools share: the server's name and its current
/// tool list, updated when the server says it changed.
#[derive(Debug)]
struct Shared {
    name: String,
    tools: RwLock<Vec<ToolSpec>>,
    /// Bumped after each listing.
    listed: watch::Sender<u64>,
}

impl Shared {
    fn set_tools(&self, tools: Vec<rmcp::model::Tool>) {
        let specs: Vec<ToolSpec> = tools.into_iter().map(spec).collect();
        match self.tools.write() {
            Ok(mut current) => *current = specs,
            Err(poisoned) => *poisoned.into_inner() = specs,
        }
        self.listed.send_modify(|generation| *generation += 1);
    }

    fn tools(&self) -> Vec<ToolSpec> {
        match self.tools.read() {
            Ok(tools) => tools.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    async fn list(&self, peer: &Peer<RoleClient>) -> Result<(), McpError> {
        let tools = peer.list_all_tools().await.map_err(|e| McpError::List {
            server: self.name.clone(),
            message: e.to_string(),
        })?;
        tracing::debug!(server = %self.name, tools = tools.len(), "listed MCP tools");
        self.set_tools(tools);
        Ok(())
    }
}

/// A tool as the model sees it: its name, description and input schema.
fn spec(tool: rmcp::model::Tool) -> ToolSpec {
    let description = tool
        .description
        .map(|d| d.into_owned())
        .or(tool.title)
        .unwrap_or_default();
    ToolSpec::new(
        tool.name.into_owned(),
        description,
        Value::Object((*tool.input_schema).clone()),
    )
}

/// Answers the server's notifications: a changed tool list is listed again.
#[derive(Debug, Clone)]
struct Handler {
    shared: Arc<Shared>,
}

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, context: NotificationContext<RoleClient>) {
        tracing::debug!(server = %self.shared.name, "MCP tool list changed");
        if let Err(error) = self.shared.list(&context.peer).await {
            tracing::warn!(%error, "could not refresh MCP tools");
        }
    }
}

/// A connection to one MCP server; see the [crate docs](crate).
///
/// Dropping the client (and every [`McpTool`] it handed out) closes the
/// connection; a server it started is stopped.
pub struct McpClient {
    shared: Arc<Shared>,
    service: Arc<RunningService<RoleClient, Handler>>,
    call_timeout: Duration,
    prefix: String,
}

impl fmt::Debug for McpClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpClient")
            .field("server", &self.shared.name)
            .field(
                "tools",
                &self
                    .shared
                    .tools()
                    .iter()
                    .map(|t| t.name.clone())
                    .collect::<Vec<_>>(),
            )
            .field("call_timeout", &self.call_timeout)
            .field("prefix", &self.prefix)
            .finish()
    }
}

impl McpClient {
    /// Starts `command` and talks MCP with it over its stdin and stdout
    /// (its stderr is inherited), with the default [`McpOptions`]. `name`
    /// names the server in errors.
    pub async fn stdio(
        name: impl Into<String>,
        command: tokio::process::Command,
    ) -> Result<Self, McpError> {
        Self::stdio_with(name, command, McpOptions::default()).await
    }

    /// [`McpClient::stdio`] with `options`.
    pub async fn stdio_with(
        name: impl Into<String>,
        mut command: tokio::process::Command,
        options: McpOptions,
    ) -> Result<Self, McpError> {
        let name = name.into();
        // The SDK kills the process from a task it spawns when the
        // transport is dropped; a runtime shutting down drops that task, so
        // the process is also killed when its handle is dropped.
        command.kill_on_drop(true);
        let line = format!("{:?}", command.as_std());
        let transport = TokioChildProcess::new(command).map_err(|e| McpError::Spawn {
            server: name.clone(),
            command: line,
            message: e.to_string(),
        })?;
        Self::connect(name, transport, options).await
    }

    /// Connects to a server's streamable-HTTP endpoint, e.g.
    /// `http://127.0.0.1:8000/mcp`, with the default [`McpOptions`]. `name`
    /// names the server in errors.
    pub async fn http(name: impl Into<String>, url: &str) -> Result<Self, McpError> {
        Self::http_with(name, url, McpOptions::default()).await
    }

    /// [`McpClient::http`] with `options` (a bearer token among them).
    pub async fn http_with(
        name: impl Into<String>,
        url: &str,
        options: McpOptions,
    ) -> Result<Self, McpError> {
        // reqwest is built without a default TLS crypto provider (see the
        // providers); install ring's unless one is installed already.
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_owned());
        if let Some(token) = &options.bearer_token {
            config = config.auth_header(token.clone());
        }
        let transport = StreamableHttpClientTransport::from_config(config);
        Self::connect(name.into(), transport, options).await
    }

    async fn connect<T, E, A>(
        name: String,
        transport: T,
        options: McpOptions,
    ) -> Result<Self, McpError>
    where
        T: rmcp::transport::IntoTransport<RoleClient, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let (listed, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            name: name.clone(),
            tools: RwLock::new(Vec::new()),
            listed,
        });
        let handler = Handler {
            shared: Arc::clone(&shared),
        };
        let limit = options.connect_timeout;
        let connecting = async {
            let service = handler
                .serve(transport)
                .await
                .map_err(|e| McpError::Connect {
                    server: name.clone(),
                    message: e.to_string(),
                })?;
            shared.list(service.peer()).await?;
            Ok(service)
        };
        let service = tokio::time::timeout(limit, connecting)
            .await
            .map_err(|_| McpError::Connect {
                server: name.clone(),
                message: format!("the server did not finish the handshake within {limit:?}"),
            })??;
        Ok(Self {
            shared,
            service: Arc::new(service),
            call_timeout: options.call_timeout,
            prefix: options.prefix,
        })
    }

    /// Offers the tools to the model as `{prefix}{name}`, builder-style, so
    /// that two servers' tools of the same name can share a [`ToolSet`]
    /// (e.g. `github_search` and `docs_search`). Calls still use the
    /// server's own names, and errors name them.
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Closes the connection (a server this client started is stopped).
    /// Calls made afterwards, through tools handed out before too, fail
    /// with [`McpError::Disconnected`].
    pub fn close(&self) {
        self.service.cancellation_token().cancel();
    }

    /// Whether the connection is closed: by [`close`](Self::close), or
    /// because the server went away.
    pub fn is_closed(&self) -> bool {
        self.service.is_closed()
    }

    /// Sets how long a tool call may take, builder-style (default
    /// [`DEFAULT_CALL_TIMEOUT`]).
    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// The server's name, as given when connecting.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The server's tools as last listed, as offered to the model (with
    /// the [prefix](Self::with_prefix), if any).
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools().into_iter().map(|tool| tool.spec).collect()
    }

    /// The server's tools as last listed, each calling the server.
    pub fn tools(&self) -> Vec<McpTool> {
        self.shared
            .tools()
            .into_iter()
            .map(|mut spec| {
                let remote = spec.name.clone();
                spec.name = format!("{}{remote}", self.prefix);
                McpTool {
                    shared: Arc::clone(&self.shared),
                    service: Arc::clone(&self.service),
                    spec,
                    remote,
                    call_timeout: self.call_timeout,
                }
            })
            .collect()
    }

    /// The server's tools as last listed, as a new [`ToolSet`].
    pub fn tool_set(&self) -> ToolSet {
        let mut set = ToolSet::new();
        self.add_to(&mut set);
        set
    }

    /// Adds the server's tools as last listed to `set` (replacing tools of
    /// the same name).
    pub fn add_to(&self, set: &mut ToolSet) {
        for tool in self.tools() {
            set.register(tool);
        }
    }

    /// Lists the server's tools again now.
    pub async fn refresh(&self) -> Result<(), McpError> {
        self.shared.list(self.service.peer()).await
    }

    /// A receiver whose value changes each time the tools are listed (on
    /// connecting, on [`refresh`](Self::refresh), and when the server says
    /// its list changed); `changed().await` on it waits for the next time.
    pub fn listings(&self) -> watch::Receiver<u64> {
        self.shared.listed.subscribe()
    }

    /// Calls the server's tool `tool` (its own name, without the prefix)
    /// with `arguments` (a JSON object) and
    /// returns its output as text; see [`McpTool`] for how content becomes
    /// text.
    pub async fn call(&self, tool: &str, arguments: Value) -> Result<String, McpError> {
        call(
            &self.shared,
            &self.service,
            tool,
            arguments,
            self.call_timeout,
        )
        .await
    }
}

/// One tool of an MCP server, as a harness [`Tool`]: its spec is the one the
/// server listed, its arguments are passed through as JSON, and its output
/// is the result's content as text (text blocks joined by newlines; other
/// blocks, and structured content when there is no text, as JSON).
#[derive(Clone)]
pub struct McpTool {
    shared: Arc<Shared>,
    service: Arc<RunningService<RoleClient, Handler>>,
    /// As offered to the model.
    spec: ToolSpec,
    /// The server's name for it.
    remote: String,
    call_timeout: Duration,
}

impl fmt::Debug for McpTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpTool")
            .field("server", &self.shared.name)
            .field("tool", &self.remote)
            .field("offered_as", &self.spec.name)
            .finish()
    }
}

impl McpTool {
    /// The name of the server the tool belongs to.
    pub fn server(&self) -> &str {
        &self.shared.name
    }
}

#[async_trait]
impl Tool for McpTool {
    type Args = Value;
    type Output = String;
    type Error = McpError;

    fn name(&self) -> &str {
        &self.spec.name
    }

    fn description(&self) -> &str {
        &self.spec.description
    }

    async fn call(&self, args: Value) -> Result<String, McpError> {
        call(
            &self.shared,
            &self.service,
            &self.remote,
            args,
            self.call_timeout,
        )
        .await
    }

    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }
}

async fn call(
    shared: &Shared,
    service: &RunningService<RoleClient, Handler>,
    tool: &str,
    arguments: Value,
    timeout: Duration,
) -> Result<String, McpError> {
    let arguments = match arguments {
        Value::Object(map) => map,
        Value::Null => serde_json::Map::new(),
        other => {
            return Err(McpError::InvalidArguments {
                server: shared.name.clone(),
                tool: tool.to_owned(),
                found: kind(&other),
            });
        }
    };
    let mut params = CallToolRequestParams::new(tool.to_owned());
    params.arguments = Some(arguments);
    let result = tokio::time::timeout(timeout, service.peer().call_tool(params))
        .await
        .map_err(|_| McpError::Timeout {
            server: shared.name.clone(),
            tool: tool.to_owned(),
            after: timeout,
        })?
        .map_err(|error| call_error(shared, tool, error))?;
    let text = content_text(&result);
    if result.is_error == Some(true) {
        return Err(McpError::ToolFailed {
            server: shared.name.clone(),
            tool: tool.to_owned(),
            message: text,
        });
    }
    Ok(text)
}

fn call_error(shared: &Shared, tool: &str, error: ServiceError) -> McpError {
    match error {
        ServiceError::McpError(data) => McpError::Refused {
            server: shared.name.clone(),
            tool: tool.to_owned(),
            code: data.code.0,
            message: data.message.into_owned(),
        },
        other => McpError::Disconnected {
            server: shared.name.clone(),
            tool: tool.to_owned(),
            message: other.to_string(),
        },
    }
}

/// The result's content as text: text blocks joined by newlines, other
/// blocks as their JSON; the structured content if there is nothing else.
fn content_text(result: &CallToolResult) -> String {
    let parts: Vec<String> = result
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Text(text) => text.text.clone(),
            other => serde_json::to_string(other).unwrap_or_default(),
        })
        .collect();
    if parts.is_empty()
        && let Some(structured) = &result.structured_content
    {
        return structured.to_string();
    }
    parts.join("\n")
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
