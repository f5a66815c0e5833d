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
//! A server is not trusted to be small or well-behaved: its messages
//! ([`McpOptions::max_message_bytes`], over stdio and HTTP alike), the text
//! of a tool's answer ([`McpOptions::max_output_bytes`]), its tool list
//! ([`McpOptions::max_tools`], [`MAX_LIST_PAGES`],
//! [`McpOptions::max_list_bytes`]) and every wait on it are bounded, and
//! each limit reached is an error that names it; what it says in an error
//! is cut like a tool's answer. An answer the client cannot read (too
//! large, not JSON, JSON but not a JSON-RPC message, a result of the wrong
//! shape) fails the call waiting for it at once
//! ([`McpError::BadMessage`]), rather than at its timeout. Tools the model
//! APIs would refuse (a name they do not take, an input schema that is not
//! an object's) are not offered ([`McpClient::refused_tools`]), and
//! [`McpClient::add_to`] never silently replaces a tool already in a set.
//! (The set [`McpClient::tool_set`] returns, and [`ToolSet::register`] with
//! the tools of [`McpClient::tools`], do: `register` replaces a tool of the
//! same name, so a second server's `search` takes the first one's place.)
//! The bearer token, the password, path segments that look like tokens
//! (`/s/<key>/mcp`) and secret-looking query parameters of an HTTP
//! server's URL (`?api_key=…`; see [`McpClient::http_with`]), and
//! the values of secret-looking variables a stdio server's process is
//! given, are registered as secrets ([`harness::secrets`]), so that errors
//! and tool results never show them; errors show such a URL with `***` in
//! their place.
//!
//! # A stdio server's environment
//!
//! A stdio server is a program the host starts, often a third-party package
//! (`uvx …`, `npx …`), so it does not inherit the host's environment, where
//! the host's API keys and tokens are. Its process gets only:
//! - the host's variables named in [`PASS_ENV`] (`PATH`, `HOME`, the
//!   locale, the temporary directory, and what Windows needs to start a
//!   program), what a program needs to find programs and read text;
//! - the host's variables the application names, with
//!   [`McpOptions::pass_env`] (e.g. `GITHUB_TOKEN` for a GitHub server);
//! - the variables set on the command itself (`command.env(…)`), which win
//!   over the host's; one removed with `command.env_remove(…)` stays
//!   removed (`command.env_clear()` does not remove [`PASS_ENV`]: remove
//!   those one by one).
//!
//! [`McpOptions::inherit_env`] gives a server the host's whole environment
//! instead, as [`std::process::Command`] does by default: only for a server
//! trusted as much as the host. A server that fails to start for want of a
//! variable usually says which on its stderr, which it shares with the
//! host.
//!
//! # A stdio server's processes
//!
//! On Unix a stdio server runs in a process group of its own. When the
//! connection ends (the client is dropped or [closed](McpClient::close),
//! or the server closes its output), the server gets a moment (3 s) to exit
//! by itself, its input closed; then the group is killed (`SIGKILL`): the
//! server, if it is still there, and whatever it started and left running
//! (a browser, a language server), unless that left the group (`setsid`).
//! Being in a group of its own, the server does not get the terminal's
//! signals (Ctrl-C) with the host: a host that exits without dropping the
//! client leaves it to see its input close. Elsewhere than on Unix only
//! the server's own process is stopped.
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

use std::collections::BTreeSet;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use harness::llm::{Tool, ToolSet, ToolSpec};
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock, PaginatedRequestParams};
use rmcp::service::{ClientInitializeError, NotificationContext, RunningService};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::{ClientHandler, Peer, RoleClient, ServiceError, ServiceExt};
use serde_json::Value;
use tokio::sync::watch;

mod environment;
mod faults;
mod http;
mod sniff;
mod stdio;
use faults::Faults;

/// How long a tool call may take before it fails with
/// [`McpError::Timeout`], unless [`McpOptions::call_timeout`] says otherwise.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// How long connecting (the handshake and the first listing of tools) may
/// take, and each later listing, unless [`McpOptions::connect_timeout`]
/// says otherwise.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(60);

/// The most pages one listing of a server's tools reads: a server whose
/// every page names a next one would otherwise be listed without end.
pub const MAX_LIST_PAGES: usize = 100;

/// The longest tool name offered to a model, and the characters allowed in
/// one (a letter or `_` first, then letters, digits, `_` and `-`): what
/// OpenAI, Anthropic and Gemini all accept. A tool whose name (with the
/// [prefix](McpClient::with_prefix)) does not fit is not offered, since
/// every request offering it would be refused.
pub const MAX_TOOL_NAME_CHARS: usize = 64;

/// The host's environment variables a stdio server's process gets without
/// being named ([`McpOptions::pass_env`]): what a program needs to find
/// programs, its home and temporary directories, and read text, on Unix and
/// on Windows, and nothing that could hold a secret. Those the host does
/// not have are left out. The kit's `shell::PASS_ENV` has the same Unix
/// variables, `SHELL` aside. See the [crate docs](crate#a-stdio-servers-environment).
pub const PASS_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "LC_MESSAGES",
    "TZ",
    "TMPDIR",
    "USER",
    "LOGNAME",
    "TERM",
    "SHELL",
    // Windows: a program does not start without `SYSTEMROOT`; the rest are
    // the user's directories and how programs are found.
    "SYSTEMROOT",
    "SYSTEMDRIVE",
    "WINDIR",
    "COMSPEC",
    "PATHEXT",
    "TEMP",
    "TMP",
    "USERNAME",
    "USERPROFILE",
    "HOMEDRIVE",
    "HOMEPATH",
    "APPDATA",
    "LOCALAPPDATA",
    "PROCESSOR_ARCHITECTURE",
];

/// How to connect to a server, and the limits on what it sends;
/// [`McpOptions::default`] for the defaults.
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
    /// Limit on connecting: the handshake and the first listing of tools;
    /// and on each later listing (on [`McpClient::refresh`], or when the
    /// server says its list changed).
    pub connect_timeout: Duration,
    /// Limit on each tool call.
    pub call_timeout: Duration,
    /// Offer the tools as `{prefix}{name}`; see [`McpClient::with_prefix`].
    pub prefix: String,
    /// A token sent as `Authorization: Bearer …` (streamable HTTP only).
    /// It is registered as a secret when the client connects.
    pub bearer_token: Option<String>,
    /// The largest message read from a server, in bytes (default 16 MiB):
    /// a line from a stdio server; a JSON answer, or an SSE event, from an
    /// HTTP one (an event may take 1 KiB more, for its `data: ` and `id:`
    /// fields). A larger one is dropped once the limit is passed, no more
    /// of it held than the limit and a read buffer (an HTTP answer whose
    /// `Content-Length` says it is larger is not read at all). Then:
    /// - if it is the answer to a request the client can tell, that call
    ///   alone fails, at once, with [`McpError::BadMessage`]; if that call
    ///   gave up already ([timed out](McpError::Timeout), or was dropped),
    ///   the late answer is dropped with a log, and no call fails. The
    ///   client can tell the request of a stdio line that is a JSON object
    ///   with a `result` or an `error` and a number or string `id` (read,
    ///   wherever it is among the fields, as the line is skipped), and of
    ///   anything on an HTTP POST's own answer (its JSON body, or an event
    ///   of its SSE stream), which answers that POST's request;
    /// - if it is a stdio line with a `method` (a notification, or a
    ///   request of the server's), it is no call's answer: dropped with a
    ///   log, and no call fails;
    /// - otherwise (a stdio line that is not a JSON object of either kind;
    ///   an event on an HTTP GET stream, which answers no request the
    ///   client can name; the answer to the handshake), the client cannot
    ///   tell whose answer it was, and every call waiting for an answer
    ///   then fails with [`McpError::BadMessage`] at once (as does the
    ///   handshake, or a listing, waiting then).
    ///
    /// The calls that do not fail go on, each within its own
    /// [`call_timeout`](Self::call_timeout).
    ///
    /// Any limit works, however small, 0 included: a message of the
    /// server's over it fails as above, at once (the error answer the
    /// client puts in the place of an answer is its own, and not held to
    /// the limit). A limit smaller than the server's answer to the
    /// handshake (some 150 bytes or more) fails the connection
    /// ([`McpError::Connect`]), saying so.
    pub max_message_bytes: usize,
    /// The most text a tool call returns, in bytes (default 1 MiB): the
    /// rest of a longer answer is cut, and the text says so. The message
    /// of a server's error ([`McpError::Refused`]; one answering the
    /// handshake or a listing, in [`McpError::Connect`] and
    /// [`McpError::List`]) is cut likewise.
    pub max_output_bytes: usize,
    /// The most tools a server may list (default 1024); more is
    /// [`McpError::ListTooLarge`].
    pub max_tools: usize,
    /// The most bytes a server's tool list may take, names, descriptions
    /// and schemas together as JSON (default 8 MiB); more is
    /// [`McpError::ListTooLarge`].
    pub max_list_bytes: usize,
    /// The host's environment variables a stdio server's process gets
    /// besides [`PASS_ENV`] (default none); see
    /// [`McpOptions::pass_env`].
    pub pass_env: Vec<String>,
    /// Whether a stdio server's process gets the host's whole environment,
    /// API keys included (default `false`); see
    /// [`McpOptions::inherit_env`].
    pub inherit_env: bool,
}

impl Default for McpOptions {
    fn default() -> Self {
        Self {
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            prefix: String::new(),
            bearer_token: None,
            max_message_bytes: 16 << 20,
            max_output_bytes: 1 << 20,
            max_tools: 1024,
            max_list_bytes: 8 << 20,
            pass_env: Vec::new(),
            inherit_env: false,
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
            .field("max_message_bytes", &self.max_message_bytes)
            .field("max_output_bytes", &self.max_output_bytes)
            .field("max_tools", &self.max_tools)
            .field("max_list_bytes", &self.max_list_bytes)
            .field("pass_env", &self.pass_env)
            .field("inherit_env", &self.inherit_env)
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

    /// Sets the bearer token sent to an HTTP server, and registers it as a
    /// secret ([`harness::secrets::register`]): a server's error or a
    /// tool's answer that quotes it shows `[redacted]`.
    pub fn bearer_token(mut self, token: impl Into<String>) -> Self {
        let token = token.into();
        harness::secrets::register(&token);
        self.bearer_token = Some(token);
        self
    }

    /// Sets the largest message read from a server.
    pub fn max_message_bytes(mut self, bytes: usize) -> Self {
        self.max_message_bytes = bytes;
        self
    }

    /// Sets the most text a tool call returns.
    pub fn max_output_bytes(mut self, bytes: usize) -> Self {
        self.max_output_bytes = bytes;
        self
    }

    /// Sets the most tools a server may list.
    pub fn max_tools(mut self, tools: usize) -> Self {
        self.max_tools = tools;
        self
    }

    /// Sets the most bytes a server's tool list may take.
    pub fn max_list_bytes(mut self, bytes: usize) -> Self {
        self.max_list_bytes = bytes;
        self
    }

    /// Passes the host's variable `name` to a stdio server's process, as
    /// well as [`PASS_ENV`] (call it once per variable). If the host does
    /// not have it, the server does not either. Its value is registered as
    /// a secret if the name looks secret
    /// ([`harness::secrets::is_secret_name`]). A name that cannot be a
    /// variable's (empty, or with `=` or NUL) fails the connection with
    /// [`McpError::Spawn`].
    ///
    /// ```no_run
    /// use harness_mcp::{McpClient, McpOptions};
    ///
    /// # async fn run() -> Result<(), harness_mcp::McpError> {
    /// let mut command = tokio::process::Command::new("npx");
    /// command.args(["-y", "@modelcontextprotocol/server-github"]);
    /// // The server reads its token from GITHUB_PERSONAL_ACCESS_TOKEN; the
    /// // host's other keys stay with the host.
    /// let options = McpOptions::default().pass_env("GITHUB_PERSONAL_ACCESS_TOKEN");
    /// let github = McpClient::stdio_with("github", command, options).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn pass_env(mut self, name: impl Into<String>) -> Self {
        self.pass_env.push(name.into());
        self
    }

    /// Whether a stdio server's process gets the host's whole environment,
    /// API keys and tokens included, rather than [`PASS_ENV`] and the
    /// variables named with [`pass_env`](Self::pass_env). Only for a
    /// server trusted as much as the host itself.
    pub fn inherit_env(mut self, inherit: bool) -> Self {
        self.inherit_env = inherit;
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
    #[error("MCP server `{server}` answered the call to `{tool}` with an error: {message}")]
    ToolFailed {
        /// The server's name.
        server: String,
        /// The tool's name.
        tool: String,
        /// The tool's own message.
        message: String,
    },
    /// The server refused the call with a JSON-RPC error (unknown tool,
    /// invalid arguments, an internal error). Its message is redacted, then
    /// cut at [`McpOptions::max_output_bytes`] as a tool's answer is.
    #[error("MCP server `{server}` refused the call to `{tool}`: {message} (error {code})")]
    Refused {
        /// The server's name.
        server: String,
        /// The tool's name.
        tool: String,
        /// The JSON-RPC error code.
        code: i32,
        /// The server's message (`[cut: the message has … bytes]` at its end
        /// when cut).
        message: String,
    },
    /// The connection failed during the call, or is closed: the server
    /// went away (its process exited, the HTTP session ended), or the
    /// client was [closed](McpClient::close).
    #[error("lost the connection to MCP server `{server}` while calling `{tool}`: {message}")]
    Disconnected {
        /// The server's name.
        server: String,
        /// The tool's name.
        tool: String,
        /// What happened: how a stdio server's process ended (`the
        /// server's process exited (exit status: 3)`), what the transport
        /// reported, or that the client was closed.
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
    /// While a call waited, the server sent what the client cannot read
    /// (a message over [`McpOptions::max_message_bytes`], over stdio or
    /// HTTP; a stdio line, an HTTP body or an SSE event that starts as JSON
    /// but is not, or is JSON but not a JSON-RPC message: no `"jsonrpc":
    /// "2.0"`, an `error` without a number `code`, both a `result` and an
    /// `error`, a batch, an error without an `id`), or only text that is
    /// not JSON-RPC until the
    /// call's time ran out (stdio); or it answered the call with what is
    /// not a tool's result (`"result": 5`, a `content` that is not a list
    /// of content blocks MCP has). What it sent was dropped; the connection
    /// stays open. A message the client can tell is another request's
    /// answer (or a notification) fails no other call, and one whose call
    /// gave up fails none (see [`McpOptions::max_message_bytes`]);
    /// otherwise the client cannot tell whose answer a dropped message
    /// was, and every call waiting at the time fails so.
    #[error("MCP server `{server}` sent {problem} while `{tool}` waited for its answer")]
    BadMessage {
        /// The server's name.
        server: String,
        /// The tool's name.
        tool: String,
        /// What the server sent, e.g. "a message of more than 16777216
        /// bytes (…)".
        problem: String,
    },
    /// The server's tool list goes past one of the client's limits
    /// ([`McpOptions::max_tools`], [`McpOptions::max_list_bytes`],
    /// [`MAX_LIST_PAGES`]); the tools were not taken.
    #[error(
        "the tool list of MCP server `{server}` goes past the client's limit of {limit} {what}"
    )]
    ListTooLarge {
        /// The server's name.
        server: String,
        /// What was counted: `tools`, `bytes` or `pages`.
        what: &'static str,
        /// The limit.
        limit: usize,
    },
    /// Tools of the server would replace tools of the same name already in
    /// the set ([`McpClient::add_to`]); none was added.
    #[error(
        "the tool set already has tools named {}; give MCP server `{server}`'s tools a prefix (McpClient::with_prefix)",
        names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
    )]
    NameTaken {
        /// The server's name.
        server: String,
        /// The names already taken.
        names: Vec<String>,
    },
}

impl McpError {
    /// This error with every secret the process holds replaced in its
    /// texts ([`harness::secrets`]): a server's message may quote a token.
    /// Every error this crate returns is already redacted.
    #[must_use]
    pub fn redacted(mut self) -> Self {
        for text in self.texts_mut() {
            harness::secrets::redact_string(text);
        }
        self
    }

    /// This error with the server's URL shown without its secrets
    /// (`?api_key=***`), then [redacted](Self::redacted): the HTTP client's
    /// errors quote the URL, and a key in it may be too short to be
    /// registered as a secret.
    fn hiding(mut self, url: &http::UrlMask) -> Self {
        for text in self.texts_mut() {
            url.hide(text);
        }
        self.redacted()
    }

    /// The texts of this error.
    fn texts_mut(&mut self) -> Vec<&mut String> {
        match self {
            Self::Spawn {
                server,
                command,
                message,
            } => vec![server, command, message],
            Self::Connect { server, message } | Self::List { server, message } => {
                vec![server, message]
            }
            Self::ToolFailed {
                server,
                tool,
                message,
            }
            | Self::Refused {
                server,
                tool,
                message,
                ..
            }
            | Self::Disconnected {
                server,
                tool,
                message,
            } => vec![server, tool, message],
            Self::BadMessage {
                server,
                tool,
                problem,
            } => vec![server, tool, problem],
            Self::Timeout { server, tool, .. } | Self::InvalidArguments { server, tool, .. } => {
                vec![server, tool]
            }
            Self::ListTooLarge { server, .. } => vec![server],
            Self::NameTaken { server, names } => {
                let mut texts = vec![server];
                texts.extend(names.iter_mut());
                texts
            }
        }
    }
}

/// A tool a server listed that is not offered to the model, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedTool {
    /// Its name as offered (with the prefix), quoted and cut to 100
    /// characters when long.
    pub name: String,
    /// Why it is not offered.
    pub reason: String,
}

/// Why `name` cannot be offered to a model, if it cannot.
fn name_problem(name: &str) -> Option<String> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if name.is_empty() {
        Some("the name is empty".into())
    } else if name.chars().count() > MAX_TOOL_NAME_CHARS {
        Some(format!(
            "the name is longer than {MAX_TOOL_NAME_CHARS} characters"
        ))
    } else if !first_ok || !rest_ok {
        Some(
            "the name has characters the model APIs refuse (a letter or `_` first, then letters, digits, `_` or `-`)"
                .into(),
        )
    } else {
        None
    }
}

/// Why a tool whose input schema is `schema` cannot be offered to a model,
/// if it cannot: the model APIs take only an object's schema for a tool's
/// arguments (OpenAI's and Anthropic's refuse the whole request otherwise),
/// and MCP's arguments are an object. A schema without a `type` is given
/// `"type": "object"` ([`spec`]) before it is looked at.
fn schema_problem(schema: &Value) -> Option<String> {
    let problem = if let Some(kind) = schema.get("type").filter(|kind| *kind != "object") {
        format!("its `type` is {kind}, not \"object\"")
    } else if schema.get("properties").is_some_and(|p| !p.is_object()) {
        "its `properties` is not an object".to_owned()
    } else if schema.get("required").is_some_and(|r| {
        !r.as_array()
            .is_some_and(|names| names.iter().all(Value::is_string))
    }) {
        "its `required` is not a list of names".to_owned()
    } else {
        return None;
    };
    Some(format!(
        "the input schema is not an object's, which the model APIs require: {problem}"
    ))
}

/// `name` as shown in a [`RefusedTool`]: quoted, at most 100 characters.
fn shown_name(name: &str) -> String {
    match name.char_indices().nth(100) {
        Some((cut, _)) => format!("{:?}…", &name[..cut]),
        None => format!("{name:?}"),
    }
}

/// The limits a client holds a server to, from its [`McpOptions`].
#[derive(Debug, Clone, Copy)]
struct Limits {
    list_timeout: Duration,
    max_tools: usize,
    max_list_bytes: usize,
    max_output_bytes: usize,
}

/// What the client and its tools share: the server's name, its current
/// tool list (updated when the server says it changed) and what its
/// transport could not read.
#[derive(Debug)]
struct Shared {
    name: String,
    tools: RwLock<Vec<ToolSpec>>,
    /// Bumped after each listing.
    listed: watch::Sender<u64>,
    limits: Limits,
    /// Held while the tools are listed: one listing at a time, however many
    /// `list_changed` notifications come.
    listing: tokio::sync::Mutex<()>,
    /// A listing was asked for while one ran: the one running lists again.
    stale: AtomicBool,
    /// A call found the connection closed (over HTTP, the SDK may say so
    /// before its own state does).
    lost: AtomicBool,
    faults: Arc<Faults>,
    /// What is shown of an HTTP server's URL (nothing to hide over stdio).
    url: http::UrlMask,
}

/// Counts the bytes written to it: the size of a value's JSON, without
/// keeping it.
struct Counter(usize);

impl std::io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 = self.0.saturating_add(buf.len());
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Shared {
    /// `error` as the client returns it: the URL shown without its
    /// secrets, and every secret redacted.
    fn finish(&self, error: McpError) -> McpError {
        error.hiding(&self.url)
    }

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

    /// If `error` is the error answer a transport put in place of an
    /// answer it dropped ([`Faults::stand_in`]), what was dropped.
    fn stood_in(&self, error: &ServiceError) -> Option<String> {
        match error {
            ServiceError::McpError(data) => self.faults.stood_in(data),
            _ => None,
        }
    }

    fn list_error(&self, message: String) -> McpError {
        McpError::List {
            server: self.name.clone(),
            message,
        }
    }

    fn too_large(&self, what: &'static str, limit: usize) -> McpError {
        McpError::ListTooLarge {
            server: self.name.clone(),
            what,
            limit,
        }
    }

    /// Every page of the server's tool list, within the limits.
    async fn list_pages(
        &self,
        peer: &Peer<RoleClient>,
    ) -> Result<Vec<rmcp::model::Tool>, McpError> {
        let mut tools = Vec::new();
        let mut bytes = 0usize;
        let mut cursor = None;
        for _ in 0..MAX_LIST_PAGES {
            let params = PaginatedRequestParams::default().with_cursor(cursor);
            let page =
                peer.list_tools(Some(params))
                    .await
                    .map_err(|e| match self.stood_in(&e) {
                        Some(problem) => self.list_error(format!(
                            "the server sent {problem} while listing its tools"
                        )),
                        None => self.list_error(match e {
                            ServiceError::UnexpectedResponse => {
                                "the server answered `tools/list` with what is not a list of tools"
                                    .into()
                            }
                            e => service_error_text(&e, self.limits.max_output_bytes),
                        }),
                    })?;
            for tool in page.tools {
                let mut size = Counter(0);
                // A listed tool is JSON it was read from; it writes.
                let _ = serde_json::to_writer(&mut size, &tool);
                bytes = bytes.saturating_add(size.0);
                if bytes > self.limits.max_list_bytes {
                    return Err(self.too_large("bytes", self.limits.max_list_bytes));
                }
                if tools.len() == self.limits.max_tools {
                    return Err(self.too_large("tools", self.limits.max_tools));
                }
                tools.push(tool);
            }
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(tools),
            }
        }
        Err(self.too_large("pages", MAX_LIST_PAGES))
    }

    /// Lists the tools once, within `limit`, failing at once if the server
    /// sends a message the client cannot read meanwhile.
    async fn list_once(&self, peer: &Peer<RoleClient>, limit: Duration) -> Result<(), McpError> {
        let mut dropped = self.faults.dropped();
        let dropped_error = |problem: String| {
            self.list_error(format!("the server sent {problem} while listing its tools"))
        };
        let tools = tokio::select! {
            listed = tokio::time::timeout(limit, self.list_pages(peer)) => match listed {
                Ok(Ok(tools)) => tools,
                Ok(Err(error @ McpError::List { .. })) => {
                    if let Some(problem) = faults::dropped_since(&mut dropped) {
                        return Err(dropped_error(problem));
                    }
                    return Err(match self.faults.ending(EXIT_WAIT).await {
                        Some(ending) => self.list_error(format!("{ending} while it listed its tools")),
                        None => error,
                    });
                }
                Ok(Err(error)) => return Err(error),
                Err(_) => {
                    return Err(self.list_error(format!(
                        "the server did not list its tools within {limit:?}"
                    )));
                }
            },
            problem = faults::next_dropped(&mut dropped) => return Err(dropped_error(problem)),
        };
        tracing::debug!(server = %self.name, tools = tools.len(), "listed MCP tools");
        self.set_tools(tools);
        Ok(())
    }

    /// Lists the tools again, unless a listing is running: then that one
    /// lists once more when it is done. A flood of `list_changed`
    /// notifications costs one listing at a time.
    async fn relist(&self, peer: &Peer<RoleClient>) {
        self.stale.store(true, Ordering::SeqCst);
        let Ok(_one_at_a_time) = self.listing.try_lock() else {
            return;
        };
        while self.stale.swap(false, Ordering::SeqCst) {
            if let Err(error) = self.list_once(peer, self.limits.list_timeout).await {
                tracing::warn!(error = %self.finish(error), "could not refresh MCP tools");
                break;
            }
        }
    }
}

/// A tool as the model sees it: its name, description and input schema
/// (with `"type": "object"` if it has no `type`: a tool's arguments are an
/// object, and OpenAI's API takes no schema without a type).
fn spec(tool: rmcp::model::Tool) -> ToolSpec {
    let description = tool
        .description
        .map(|d| d.into_owned())
        .or(tool.title)
        .unwrap_or_default();
    let mut schema = (*tool.input_schema).clone();
    schema
        .entry("type")
        .or_insert_with(|| Value::from("object"));
    ToolSpec::new(tool.name.into_owned(), description, Value::Object(schema))
}

/// Answers the server's notifications: a changed tool list is listed again.
#[derive(Debug, Clone)]
struct Handler {
    shared: Arc<Shared>,
}

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, context: NotificationContext<RoleClient>) {
        tracing::debug!(server = %self.shared.name, "MCP tool list changed");
        self.shared.relist(&context.peer).await;
    }
}

/// A connection to one MCP server; see the [crate docs](crate).
///
/// Dropping the client (and every [`McpTool`] it handed out) closes the
/// connection; a server it started is stopped, with what it started (see
/// [the crate docs](crate#a-stdio-servers-processes)).
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

/// `command`'s program and arguments, quoted, with the process's secrets
/// redacted: what an error shows of it. Never its environment (the
/// `Debug` of a `Command` prints the variables set on it, tokens included).
fn command_line(command: &std::process::Command) -> String {
    let mut line = format!("{:?}", command.get_program());
    for arg in command.get_args() {
        line.push(' ');
        line.push_str(&format!("{arg:?}"));
    }
    harness::secrets::redact(&line).into_owned()
}

/// Registers as secrets the values of the variables set on `command` whose
/// names look secret ([`harness::secrets::is_secret_name`], e.g.
/// `GITHUB_PERSONAL_ACCESS_TOKEN`): a server that quotes its token in an
/// error or a result does not show it to the model.
fn register_secrets(command: &std::process::Command) {
    for (name, value) in command.get_envs() {
        if let (Some(name), Some(Some(value))) = (name.to_str(), value.map(|v| v.to_str()))
            && harness::secrets::is_secret_name(name)
        {
            harness::secrets::register(value);
        }
    }
}

impl McpClient {
    /// Starts `command` and talks MCP with it over its stdin and stdout
    /// (its stderr is inherited), with the default [`McpOptions`]. `name`
    /// names the server in errors.
    ///
    /// The process does not inherit the host's environment: it gets
    /// [`PASS_ENV`], the variables named with [`McpOptions::pass_env`] and
    /// those set on `command`; see the
    /// [crate docs](crate#a-stdio-servers-environment). On Unix it runs in
    /// a process group of its own (whatever `command` says), killed when
    /// the connection ends; see
    /// [the crate docs](crate#a-stdio-servers-processes).
    pub async fn stdio(
        name: impl Into<String>,
        command: tokio::process::Command,
    ) -> Result<Self, McpError> {
        Self::stdio_with(name, command, McpOptions::default()).await
    }

    /// [`McpClient::stdio`] with `options`: their limits, and the
    /// environment the process gets ([`McpOptions::pass_env`],
    /// [`McpOptions::inherit_env`]).
    pub async fn stdio_with(
        name: impl Into<String>,
        mut command: tokio::process::Command,
        options: McpOptions,
    ) -> Result<Self, McpError> {
        let name = name.into();
        let confined = environment::confine(&mut command, &options);
        register_secrets(command.as_std());
        let line = command_line(command.as_std());
        let spawn_error = |message: String| {
            McpError::Spawn {
                server: name.clone(),
                command: line.clone(),
                message,
            }
            .redacted()
        };
        confined.map_err(spawn_error)?;
        // The process is killed when the task reading its output ends (the
        // connection closes, or the runtime shuts down) and drops it; with
        // what it started, in its own process group (see the crate docs).
        command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true);
        #[cfg(unix)]
        command.process_group(0);
        let mut child = command.spawn().map_err(|e| spawn_error(e.to_string()))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(spawn_error(
                "its standard input or output is not a pipe".into(),
            ));
        };
        let faults = Arc::new(Faults::new());
        let limit = options.max_message_bytes;
        let reader = stdio::start(child, stdout, Arc::clone(&faults), limit);
        // Every line that reaches the SDK is within the limit already, or
        // is the client's own stand-in for one that was not, which may be
        // longer than a small limit.
        let sdk_limit = limit.max(faults::STAND_IN_MAX_BYTES).saturating_add(1);
        let transport = AsyncRwTransport::<RoleClient, _, _>::new(reader, stdin)
            .with_max_line_length(sdk_limit);
        Self::connect(name, transport, options, faults, http::UrlMask::default()).await
    }

    /// Connects to a server's streamable-HTTP endpoint, e.g.
    /// `http://127.0.0.1:8000/mcp`, with the default [`McpOptions`]. `name`
    /// names the server in errors.
    pub async fn http(name: impl Into<String>, url: &str) -> Result<Self, McpError> {
        Self::http_with(name, url, McpOptions::default()).await
    }

    /// [`McpClient::http`] with `options` (a bearer token among them).
    ///
    /// A key in the URL is kept from what the client shows: its password,
    /// the segments of its path that look like tokens rather than names
    /// ([`harness::secrets::is_token_like`]: `…/s/<key>/mcp`), and the
    /// values of its query's (and fragment's) parameters whose names look
    /// secret (`?api_key=…`, `?token=…`, `?sig=…`; the rule is
    /// [below](#a-key-in-the-url)), are registered as secrets
    /// ([`harness::secrets`]), so that an error, or a tool result, that
    /// quotes them shows `[redacted]`; and the client's errors show the URL
    /// with `***` in their place (`…/mcp?version=2&api_key=***`).
    ///
    /// # A key in the URL
    ///
    /// A parameter's value is taken as a secret when its name,
    /// percent-decoded (`+` as a space), is one
    /// [`harness::secrets::is_secret_name`] finds secret (`key`,
    /// `api_key`, `apikey`, `api-key`, `token`, `access_token`, `secret`,
    /// `client_secret`, `password`, `passwd`, `X-Amz-Credential`, …), or has
    /// a word (split at `_`, `-`, `.` and spaces, case ignored) that ends
    /// with `KEY` or is `AUTH`, `AUTHORIZATION`, `SIG`, `SIGNATURE`, `CODE`,
    /// `PWD`, `JWT`, `SESSION` or `SESSIONID`; unless its last word is
    /// `FILE`, `PATH` or `DIR`. Parameters are `name=value` pieces split at
    /// `&`, in the query and in the fragment alike. A value shorter than
    /// [`harness::secrets::MIN_SECRET_LEN`] is hidden in the client's
    /// errors but not registered (so a server that quotes it shows it).
    ///
    /// A segment of the path is taken as a secret when it looks like a
    /// token ([`harness::secrets::is_token_like`]: 16 characters or more,
    /// letters, digits and `-_.~=+` only, with upper- and lower-case letters
    /// and digits, or switching between letters and digits at least four
    /// times), so a UUID or a hash in the path is hidden too. A key that
    /// does not look so (`/mcp/my-secret-word`, or a short key with no
    /// digit, a few in a hundred of random 16-character keys) is not found:
    /// register it yourself ([`harness::secrets::register`]).
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
        let name = name.into();
        if let Some(token) = &options.bearer_token {
            // Also when the field was set directly rather than through
            // `McpOptions::bearer_token`.
            harness::secrets::register(token);
        }
        let connect_error = |message: String| {
            McpError::Connect {
                server: name.clone(),
                message,
            }
            .redacted()
        };
        let shown = http::check_url(url).map_err(connect_error)?;
        let faults = Arc::new(Faults::new());
        let transport = http::transport(url, &options, Arc::clone(&faults))
            .map_err(|message| connect_error(shown.shown(&message)))?;
        Self::connect(name, transport, options, faults, shown).await
    }

    async fn connect<T, E, A>(
        name: String,
        transport: T,
        options: McpOptions,
        faults: Arc<Faults>,
        url: http::UrlMask,
    ) -> Result<Self, McpError>
    where
        T: rmcp::transport::IntoTransport<RoleClient, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let limit = options.connect_timeout;
        let (listed, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            name: name.clone(),
            tools: RwLock::new(Vec::new()),
            listed,
            limits: Limits {
                list_timeout: limit,
                max_tools: options.max_tools,
                max_list_bytes: options.max_list_bytes,
                max_output_bytes: options.max_output_bytes,
            },
            listing: tokio::sync::Mutex::new(()),
            stale: AtomicBool::new(false),
            lost: AtomicBool::new(false),
            faults,
            url,
        });
        let handler = Handler {
            shared: Arc::clone(&shared),
        };
        let connect_error = |message: String| {
            shared.finish(McpError::Connect {
                server: name.clone(),
                message,
            })
        };
        let started = tokio::time::Instant::now();
        let mut dropped = shared.faults.dropped();
        let dropped_error = |problem: String| {
            connect_error(format!("the server sent {problem} during the handshake"))
        };
        let service = tokio::select! {
            served = tokio::time::timeout(limit, handler.serve(transport)) => match served {
                Ok(Ok(service)) => service,
                Ok(Err(error)) => {
                    if let Some(problem) = faults::dropped_since(&mut dropped) {
                        return Err(dropped_error(problem));
                    }
                    if let ClientInitializeError::JsonRpcError(data) = &error
                        && let Some(problem) = shared.faults.stood_in(data)
                    {
                        return Err(dropped_error(problem));
                    }
                    return Err(connect_error(match shared.faults.ending(EXIT_WAIT).await {
                        Some(ending) => format!(
                            "{ending} before it answered the `initialize` request (what it wrote to stderr may say why)"
                        ),
                        None => initialize_error_text(&error, options.max_output_bytes),
                    }));
                }
                Err(_) => {
                    return Err(connect_error(format!(
                        "the server did not finish the handshake within {limit:?}"
                    )));
                }
            },
            problem = faults::next_dropped(&mut dropped) => return Err(dropped_error(problem)),
        };
        // The first listing has what is left of the same limit.
        let left = limit.saturating_sub(started.elapsed());
        let first = {
            let _one_at_a_time = shared.listing.lock().await;
            shared.stale.store(false, Ordering::SeqCst);
            shared.list_once(service.peer(), left).await
        };
        first.map_err(|error| shared.finish(error))?;
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

    /// Closes the connection (a server this client started is stopped, with
    /// what it started: see [the crate docs](crate#a-stdio-servers-processes)).
    /// Calls made afterwards, through tools handed out before too, fail
    /// with [`McpError::Disconnected`].
    pub fn close(&self) {
        self.service.cancellation_token().cancel();
    }

    /// Whether the connection is closed: by [`close`](Self::close), or
    /// because the server went away (a stdio server closed its output, as
    /// when its process exits; an HTTP server's connection ended, which the
    /// client may learn only when a call fails). A closed client stays
    /// closed: connect again to go on.
    pub fn is_closed(&self) -> bool {
        self.service.is_closed()
            || self.service.peer().is_transport_closed()
            || self.shared.faults.has_ended()
            || self.shared.lost.load(Ordering::SeqCst)
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

    /// The tools of the last listing offered to the model, and those that
    /// are not ([`refused_tools`](Self::refused_tools)).
    fn sorted(&self) -> (Vec<McpTool>, Vec<RefusedTool>) {
        let mut offered = Vec::new();
        let mut refused = Vec::new();
        let mut seen = BTreeSet::new();
        for mut spec in self.shared.tools() {
            let remote = spec.name.clone();
            let name = format!("{}{remote}", self.prefix);
            let problem = name_problem(&name)
                .or_else(|| {
                    (!seen.insert(name.clone()))
                        .then(|| "the server lists two tools of this name".to_owned())
                })
                .or_else(|| schema_problem(&spec.parameters));
            if let Some(reason) = problem {
                refused.push(RefusedTool {
                    name: shown_name(&name),
                    reason,
                });
                continue;
            }
            spec.name = name;
            offered.push(McpTool {
                shared: Arc::clone(&self.shared),
                service: Arc::clone(&self.service),
                spec,
                remote,
                call_timeout: self.call_timeout,
            });
        }
        (offered, refused)
    }

    /// The server's tools as last listed, each calling the server. A tool
    /// whose name the model APIs would refuse (see [`MAX_TOOL_NAME_CHARS`]),
    /// or that the server lists twice, is left out, as is one whose input
    /// schema is not an object's (its `type` is not `"object"`, or its
    /// `properties` is not an object, or its `required` not a list of
    /// names), which the model APIs refuse for a tool's parameters: see
    /// [`refused_tools`](Self::refused_tools). A schema without a `type`
    /// is offered with `"type": "object"`, which MCP's arguments are.
    pub fn tools(&self) -> Vec<McpTool> {
        self.sorted().0
    }

    /// The tools of the last listing that are not offered, and why.
    pub fn refused_tools(&self) -> Vec<RefusedTool> {
        self.sorted().1
    }

    /// The server's tools as last listed, as a new [`ToolSet`].
    pub fn tool_set(&self) -> ToolSet {
        let mut set = ToolSet::new();
        for tool in self.tools() {
            set.register(tool);
        }
        set
    }

    /// Adds the server's tools as last listed to `set`. If any has the name
    /// of a tool already in the set, none is added
    /// ([`McpError::NameTaken`]): a server listing `read_file` or `shell`
    /// does not silently replace the host's own. A
    /// [prefix](Self::with_prefix) keeps names apart.
    pub fn add_to(&self, set: &mut ToolSet) -> Result<(), McpError> {
        let tools = self.tools();
        let taken: Vec<String> = tools
            .iter()
            .filter(|tool| set.contains(&tool.spec.name))
            .map(|tool| tool.spec.name.clone())
            .collect();
        if !taken.is_empty() {
            return Err(McpError::NameTaken {
                server: self.shared.name.clone(),
                names: taken,
            }
            .redacted());
        }
        for tool in tools {
            set.register(tool);
        }
        Ok(())
    }

    /// Lists the server's tools again now, within
    /// [`McpOptions::connect_timeout`] (after a listing that is running, if
    /// one is).
    pub async fn refresh(&self) -> Result<(), McpError> {
        let listed = {
            let _one_at_a_time = self.shared.listing.lock().await;
            self.shared.stale.store(false, Ordering::SeqCst);
            self.shared
                .list_once(self.service.peer(), self.shared.limits.list_timeout)
                .await
        };
        // A change announced meanwhile found the lock taken: list it now,
        // in the background, as the notification would have.
        if self.shared.stale.load(Ordering::SeqCst) {
            let (shared, peer) = (Arc::clone(&self.shared), self.service.peer().clone());
            tokio::spawn(async move { shared.relist(&peer).await });
        }
        listed.map_err(|error| self.shared.finish(error))
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
/// blocks, and structured content when there is no text, as JSON), cut at
/// [`McpOptions::max_output_bytes`].
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
    call_unredacted(shared, service, tool, arguments, timeout)
        .await
        .map_err(|error| shared.finish(error))
}

async fn call_unredacted(
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
    let bad_message = |problem: String| McpError::BadMessage {
        server: shared.name.clone(),
        tool: tool.to_owned(),
        problem,
    };
    let dropped_answer = |problem: String| {
        bad_message(format!(
            "{problem}, which was dropped (it may have been the answer)"
        ))
    };
    let mut dropped = shared.faults.dropped();
    let (noise_before, _) = shared.faults.noise();
    let answered = tokio::select! {
        answered = tokio::time::timeout(timeout, service.peer().call_tool(params)) => answered,
        // The answer may be the message dropped: waiting on would only
        // end in a timeout that says nothing of it.
        problem = faults::next_dropped(&mut dropped) => return Err(dropped_answer(problem)),
    };
    // The answer to this call, dropped, and an error answer of the
    // transport's in its place (over stdio and HTTP alike).
    if let Ok(Err(error)) = &answered
        && let Some(problem) = shared.stood_in(error)
    {
        return Err(bad_message(format!(
            "{problem}, which was dropped (it was the answer)"
        )));
    }
    // Over HTTP, the SDK fails the call whose answer was dropped itself,
    // saying nothing of why, just after the drop is reported.
    if !matches!(answered, Ok(Ok(_)))
        && let Some(problem) = faults::dropped_since(&mut dropped)
    {
        return Err(dropped_answer(problem));
    }
    let result = match answered {
        Ok(Ok(result)) => result,
        Ok(Err(error)) => return Err(call_error(shared, service, tool, error).await),
        Err(_) => {
            let (noise, last) = shared.faults.noise();
            if noise > noise_before {
                let lines = match noise - noise_before {
                    1 => "a line".to_owned(),
                    n => format!("{n} lines"),
                };
                return Err(bad_message(format!(
                    "{lines} of text that is not JSON-RPC (the last: {last}) and no answer within {timeout:?}"
                )));
            }
            return Err(McpError::Timeout {
                server: shared.name.clone(),
                tool: tool.to_owned(),
                after: timeout,
            });
        }
    };
    let text = content_text(&result, shared.limits.max_output_bytes);
    if result.is_error == Some(true) {
        return Err(McpError::ToolFailed {
            server: shared.name.clone(),
            tool: tool.to_owned(),
            message: text,
        });
    }
    Ok(text)
}

/// How long an error waits for a stdio server whose output ended to exit,
/// to say how it did: a process that closed its output is exiting, or will
/// be when the client closes its input.
const EXIT_WAIT: Duration = Duration::from_secs(2);

async fn call_error(
    shared: &Shared,
    service: &RunningService<RoleClient, Handler>,
    tool: &str,
    error: ServiceError,
) -> McpError {
    let max = shared.limits.max_output_bytes;
    let bad_message = |problem: String| McpError::BadMessage {
        server: shared.name.clone(),
        tool: tool.to_owned(),
        problem,
    };
    let message = match error {
        ServiceError::McpError(data) => {
            return McpError::Refused {
                server: shared.name.clone(),
                tool: tool.to_owned(),
                code: data.code.0,
                message: server_text(&data.message, max),
            };
        }
        // The answer came, and the connection is fine: its result is not
        // one the SDK reads as a tool's (or is one the client does not
        // take: a task, a request for input).
        ServiceError::UnexpectedResponse => {
            return bad_message(
                "an answer that is not a tool's result (MCP's `CallToolResult`: a `content` list of text, image, audio, resource or resource-link blocks, `structuredContent` or `isError`)".into(),
            );
        }
        ServiceError::InputRequiredRoundsExceeded { max_rounds } => {
            return bad_message(format!(
                "{max_rounds} answers that asked for input and no result"
            ));
        }
        ServiceError::Timeout { timeout } => {
            return McpError::Timeout {
                server: shared.name.clone(),
                tool: tool.to_owned(),
                after: timeout,
            };
        }
        _ if service.is_closed() => "the client closed the connection (McpClient::close)".into(),
        error @ (ServiceError::TransportClosed | ServiceError::TransportSend(_)) => {
            if matches!(error, ServiceError::TransportClosed) {
                shared.lost.store(true, Ordering::SeqCst);
            }
            match shared.faults.ending(EXIT_WAIT).await {
                Some(ending) => ending,
                None => format!(
                    "{}; the server may have exited",
                    service_error_text(&error, max)
                ),
            }
        }
        other => service_error_text(&other, max),
    };
    McpError::Disconnected {
        server: shared.name.clone(),
        tool: tool.to_owned(),
        message,
    }
}

/// `error` and its sources, each said once (an error often repeats its
/// source's text in its own): the HTTP client's error wraps the
/// connection's, which wraps the operating system's (`Connection
/// refused`).
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        let part = inner.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = inner.source();
    }
    text
}

/// What a transport's error says: the HTTP client's own error and its
/// sources when there is one (the SDK keeps those out of its error's
/// sources).
fn transport_error_text(error: &rmcp::transport::DynamicTransportError) -> String {
    match http::client_error(error.error.as_ref()) {
        Some(client) => error_chain(client),
        None => error_chain(error.error.as_ref()),
    }
}

/// What a request's failure says, without the SDK's type names; what the
/// server said in it cut at `max` bytes ([`server_text`]).
fn service_error_text(error: &ServiceError, max: usize) -> String {
    match error {
        ServiceError::McpError(data) => format!(
            "the server answered with an error: {} (error {})",
            server_text(&data.message, max),
            data.code.0
        ),
        ServiceError::UnexpectedResponse => {
            "the server's answer is not of the kind asked for".into()
        }
        // Bounded by the SDK, and not cut: the URL in it is hidden whole
        // only (Shared::finish).
        ServiceError::TransportSend(error) => transport_error_text(error),
        ServiceError::TransportClosed => "the connection is closed".into(),
        other => server_text(&error_chain(other), max),
    }
}

/// What a failed handshake says, without the SDK's type names; what the
/// server said in it cut at `max` bytes ([`server_text`]).
fn initialize_error_text(error: &ClientInitializeError, max: usize) -> String {
    match error {
        ClientInitializeError::TransportError { error, context } => {
            format!("{} (when trying to {context})", transport_error_text(error))
        }
        ClientInitializeError::ConnectionClosed(context) => {
            format!(
                "the server closed the connection before the handshake was done (waiting for the {context})"
            )
        }
        ClientInitializeError::JsonRpcError(data) => format!(
            "the server answered the `initialize` request with an error: {} (error {})",
            server_text(&data.message, max),
            data.code.0
        ),
        other => server_text(&error_chain(other), max),
    }
}

/// How many bytes past [`McpOptions::max_output_bytes`] a tool's text is
/// kept until it is redacted: a secret that straddles the cut is found
/// whole if shorter than this.
const REDACTION_MARGIN: usize = 64 << 10;

/// `text`, the first bytes (at most `max` + [`REDACTION_MARGIN`]) of
/// what the server sent, `total` bytes in all, redacted, then cut to `max`
/// bytes (in this order, so that a secret at the cut is still found
/// whole), ending with `[cut: {what} has {total} bytes]` when cut.
fn redacted_and_cut(mut text: String, total: usize, max: usize, what: &str) -> String {
    harness::secrets::redact_string(&mut text);
    if text.len() > max || total > max.saturating_add(REDACTION_MARGIN) {
        text = cut_at(&text, max).to_owned();
        text.push_str(&format!("\n[cut: {what} has {total} bytes]"));
    }
    text
}

/// A text the server sent (an error's message) as the client shows it:
/// redacted, then cut to `max` bytes, as [`content_text`] does.
fn server_text(text: &str, max: usize) -> String {
    let keep = max.saturating_add(REDACTION_MARGIN);
    redacted_and_cut(
        cut_at(text, keep).to_owned(),
        text.len(),
        max,
        "the message",
    )
}

/// The result's content as text: text blocks joined by newlines, other
/// blocks as their JSON; the structured content if there is nothing else.
/// Redacted, then cut to `max` bytes (in this order, so that a secret at
/// the cut is still found whole), saying so when cut.
fn content_text(result: &CallToolResult, max: usize) -> String {
    let keep = max.saturating_add(REDACTION_MARGIN);
    let mut text = String::new();
    let mut total = 0usize;
    let mut push = |part: &str, text: &mut String| {
        total = total.saturating_add(part.len());
        if text.len() < keep {
            let room = keep - text.len();
            text.push_str(cut_at(part, room));
        }
    };
    for (i, block) in result.content.iter().enumerate() {
        if i > 0 {
            push("\n", &mut text);
        }
        match block {
            ContentBlock::Text(block) => push(&block.text, &mut text),
            other => push(&serde_json::to_string(other).unwrap_or_default(), &mut text),
        }
    }
    if result.content.is_empty()
        && let Some(structured) = &result.structured_content
    {
        push(&structured.to_string(), &mut text);
    }
    redacted_and_cut(text, total, max, "the answer")
}

/// The longest start of `text` of at most `max` bytes that ends on a
/// character boundary.
fn cut_at(text: &str, max: usize) -> &str {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
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
