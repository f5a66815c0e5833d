//! harness on [Restate](https://restate.dev), the durable-execution engine.
//!
//! - [`agent`]: harness agents served as a Restate virtual object
//!   ([`Durable`], [`AgentObject`]), one session per key, each effect of a
//!   step journaled with `ctx.run` through the core's effect journal, the
//!   session in the object's state; and [`AgentClient`], which calls it
//!   through the ingress (run, resume, read a session).
//! - [`Admin`] and [`Ingress`], clients of a Restate server's admin API
//!   (health, registering a deployment) and ingress (calling a handler and
//!   waiting for its answer, sending one and attaching to it later), with
//!   typed errors that say what the server answered. Credentials in a base
//!   URL's userinfo go as basic auth and are never shown (not in errors,
//!   not in `Debug`); an answer is read up to [`MAX_ANSWER_BYTES`], and an
//!   error quotes at most [`QUOTED_BYTES`] of it; a virtual object's key is
//!   always one path segment of the URL (percent-encoded).
//! - The `restate-probe` binary: a bare Restate virtual object written with
//!   the official Rust SDK, whose handler makes journaled effects that
//!   append to a file, so that a test counts how often each effect ran: the
//!   engine's floor.
//!
//! The tests (`tests/it/`) run against the real server (`scripts/restate`
//! starts it): an agent's effects run once across a SIGKILL of the service
//! and across a restart of the Restate server, an interrupt is answered from another
//! process, a wrongly shaped answer is refused and the session still waits,
//! two runs on one session go one after the other.
//!
//! # Features
//!
//! - `service` (default): the [`agent`] module, [`nodelay_listener`] and the
//!   probes, on Restate's Rust SDK. Without it the crate is the admin and
//!   ingress clients and [`RestateSessionReader`], with no SDK: what
//!   `harness sessions --store restate://…` (the `harness-cli` feature
//!   `restate`) needs to read sessions.

#![forbid(unsafe_code)]

/// The guide's chapter on Restate (`harness::guide::restate`), whose
/// examples are compiled here, where this crate is a dependency.
#[cfg(all(doctest, feature = "service"))]
#[doc = include_str!("../../harness/src/docs/guide/restate.md")]
pub struct GuideChapter;

use std::time::Duration;

use serde_json::Value;

#[cfg(feature = "service")]
pub mod agent;
pub mod sessions;
#[cfg(feature = "service")]
pub use agent::{
    AgentClient, AgentObject, Answer, Durable, NotDurable, Reply, RestateEffects, RestateSessions,
};
pub use sessions::{BY_REFERENCE_BYTES, OBJECT, RestateSessionReader, Snapshot};

/// What [`agent_object!`] expands to refers to; not part of the API.
#[cfg(feature = "service")]
#[doc(hidden)]
pub mod __private {
    pub use serde_json::Value;
}

/// What went wrong talking to a Restate server.
///
/// No message holds the credentials of a base URL's userinfo (they go as
/// basic auth, apart from the URL shown), nor more than the first
/// [`QUOTED_BYTES`] of what the server answered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RestateError {
    /// The server could not be reached, or did not answer in time.
    #[error("Restate at {url}: {message}")]
    Transport {
        /// What was asked.
        url: String,
        /// What failed.
        message: String,
    },
    /// The server answered with an error status.
    #[error("Restate at {url} answered {status}: {body}")]
    Status {
        /// What was asked.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The server's message: its first [`QUOTED_BYTES`], and how long
        /// it was when it was longer.
        body: String,
    },
    /// The server's answer is not the JSON this client expects.
    #[error("Restate at {url}: unexpected answer: {message}")]
    Answer {
        /// What was asked.
        url: String,
        /// What is wrong with it.
        message: String,
    },
    /// The server's answer is larger than this client reads
    /// ([`MAX_ANSWER_BYTES`]); nothing past the limit was read.
    #[error("Restate at {url}: the answer is larger than the {limit} bytes this client reads")]
    TooLarge {
        /// What was asked.
        url: String,
        /// The limit, in bytes.
        limit: usize,
    },
    /// What the caller gave cannot go into a request: a virtual object's
    /// key that is no path segment (empty, `.` or `..`), an invocation id
    /// that is not one. Nothing was sent.
    #[error("Restate at {url}: {message}")]
    Input {
        /// The server (or the request) it was for.
        url: String,
        /// What is wrong with it.
        message: String,
    },
}

/// The most of one answer of the server this client reads: 64 MiB. A
/// larger answer (an admin query over sessions whose state is that large,
/// or a server that misbehaves) is a [`RestateError::TooLarge`], and no
/// more of it is read.
pub const MAX_ANSWER_BYTES: usize = 64 << 20;

/// The most of an answer an error quotes: 1 KiB (the start of the answer,
/// then how long it was).
pub const QUOTED_BYTES: usize = 1024;

/// The start of `text`, at most [`QUOTED_BYTES`] long, for an error
/// message: an answer's body may be as long as the server likes.
pub(crate) fn excerpt(text: &str) -> String {
    if text.len() <= QUOTED_BYTES {
        return text.to_owned();
    }
    let mut end = QUOTED_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes in all)", &text[..end], text.len())
}

/// A server's base URL split in two: the URL shown (in errors, in
/// `Debug`), without userinfo, and the userinfo's credentials, sent as
/// basic auth (as the HTTP client would have sent them from the URL) and
/// never shown.
#[derive(Clone)]
struct Server {
    base: String,
    credentials: Option<(String, Option<String>)>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("base", &self.base)
            .field(
                "credentials",
                &self.credentials.as_ref().map(|_| "[hidden]"),
            )
            .finish()
    }
}

impl Server {
    /// `base` (no trailing slash needed). Everything between `://` and the
    /// base's last `@` is its userinfo, `user[:password]`, percent-decoded:
    /// the last `@`, not the first or the end of the host, so that a
    /// password holding `/`, `:`, `?` or `@` never stays in the URL shown.
    /// A base has no query or fragment (paths are added to it).
    fn parse(base: String) -> Self {
        let base = base.trim_end_matches('/');
        let split = base.split_once("://").and_then(|(scheme, rest)| {
            let (userinfo, host) = rest.rsplit_once('@')?;
            let (user, password) = match userinfo.split_once(':') {
                Some((user, password)) => (user, Some(password)),
                None => (userinfo, None),
            };
            Some(Server {
                base: format!("{scheme}://{host}"),
                credentials: Some((percent_decode(user), password.map(percent_decode))),
            })
        });
        split.unwrap_or_else(|| Server {
            base: base.to_owned(),
            credentials: None,
        })
    }

    /// `request` with the credentials, if any.
    fn auth(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.credentials {
            Some((user, password)) => request.basic_auth(user, password.as_ref()),
            None => request,
        }
    }
}

/// `text` with its `%XX` escapes decoded (a `%` not followed by two hex
/// digits stays as it is); bytes that are not UTF-8 become U+FFFD.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(high), Some(low)) => {
                // Two hex digits: below 256.
                out.push(u8::try_from(high * 16 + low).unwrap_or(b'?'));
                i += 3;
            }
            (byte, _, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `text` as one path segment of a URL: every byte but the unreserved ones
/// (letters, digits, `-`, `.`, `_`, `~`) percent-encoded, so that a key's
/// `/`, `?`, `#`, `%` or spaces never make another path (another session,
/// another object). Restate decodes the segment back to the key. Empty,
/// `.` and `..` are refused: a URL parser removes those segments, encoded
/// or not.
fn path_segment(text: &str, what: &str, base: &str) -> Result<String, RestateError> {
    if matches!(text, "" | "." | "..") {
        return Err(RestateError::Input {
            url: base.to_owned(),
            message: format!(
                "{what} {text:?} cannot be sent: an empty, `.` or `..` path segment addresses \
                 nothing (URLs drop it)"
            ),
        });
    }
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    Ok(out)
}

/// A listener at `addr` whose connections send without Nagle's delay
/// (`TCP_NODELAY` on the listening socket, which Linux passes on to the
/// sockets it accepts), to hand to the SDK's `HttpServer::serve`.
///
/// Serve a harness agent this way: the first effect of each attempt of an
/// invocation reaches Restate as two small writes (the `ctx.run` command, then its completion
/// once the step has run the effect; see the [`agent`] module's docs), and
/// with Nagle's algorithm on (the SDK's `listen_and_serve`) the second
/// waits for the server's delayed ACK, about 40 ms at low concurrency
/// (`benchmarks/scripts/bench-restate`). So does any message the service
/// sends while one it sent earlier is not yet acknowledged.
///
/// ```no_run
/// # async fn serve(endpoint: restate_sdk::prelude::Endpoint) -> std::io::Result<()> {
/// use restate_sdk::prelude::HttpServer;
/// let addr = "127.0.0.1:9080".parse().expect("an address");
/// HttpServer::new(endpoint).serve(harness_restate::nodelay_listener(addr)?).await;
/// # Ok(()) }
/// ```
#[cfg(feature = "service")]
pub fn nodelay_listener(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.set_nodelay(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

fn client(timeout: Duration) -> Result<reqwest::Client, RestateError> {
    // reqwest is built without a TLS provider of its own (as the providers
    // build it): the workspace's ring one, installed once.
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race with another thread is fine: a provider is installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    reqwest::Client::builder()
        .timeout(timeout)
        .build()
        .map_err(|e| RestateError::Transport {
            url: String::new(),
            message: e.to_string(),
        })
}

async fn send(request: reqwest::RequestBuilder, url: &str) -> Result<String, RestateError> {
    let transport = |e: reqwest::Error| RestateError::Transport {
        url: url.to_owned(),
        message: e.to_string(),
    };
    let mut response = request.send().await.map_err(transport)?;
    let status = response.status();
    if !status.is_success() {
        // Only what an error quotes is read of an error's body.
        let (body, cut) = read_at_most(&mut response, QUOTED_BYTES)
            .await
            .map_err(transport)?;
        let mut body = String::from_utf8_lossy(&body).into_owned();
        if cut {
            body.push_str("… (cut)");
        }
        return Err(RestateError::Status {
            url: url.to_owned(),
            status: status.as_u16(),
            body,
        });
    }
    let too_large = || RestateError::TooLarge {
        url: url.to_owned(),
        limit: MAX_ANSWER_BYTES,
    };
    // Refused before a byte is read when the server says so up front.
    if response
        .content_length()
        .is_some_and(|n| n > MAX_ANSWER_BYTES as u64)
    {
        return Err(too_large());
    }
    let (body, cut) = read_at_most(&mut response, MAX_ANSWER_BYTES)
        .await
        .map_err(transport)?;
    if cut {
        return Err(too_large());
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// The body of `response` up to `limit` bytes, and whether there was more
/// (left unread).
async fn read_at_most(
    response: &mut reqwest::Response,
    limit: usize,
) -> Result<(Vec<u8>, bool), reqwest::Error> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        let room = limit - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok((body, true));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, false))
}

fn json(text: &str, url: &str) -> Result<Value, RestateError> {
    if text.trim().is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_str(text).map_err(|e| RestateError::Answer {
        url: url.to_owned(),
        message: format!("{e}: {}", excerpt(text)),
    })
}

/// A Restate server's admin API (`http://host:9070` by default).
#[derive(Debug, Clone)]
pub struct Admin {
    server: Server,
    http: reqwest::Client,
}

impl Admin {
    /// The admin API at `base` (no trailing slash needed). Credentials in
    /// its userinfo (`http://user:password@host:9070`, for a proxy in front
    /// of the server) are sent as basic auth and never shown: not in
    /// errors, not in `Debug`.
    pub fn new(base: impl Into<String>) -> Result<Self, RestateError> {
        Ok(Self {
            server: Server::parse(base.into()),
            http: client(Duration::from_secs(30))?,
        })
    }

    /// The admin API's URL as shown, without its credentials.
    pub fn base(&self) -> &str {
        &self.server.base
    }

    /// Whether the server says it is healthy.
    pub async fn healthy(&self) -> bool {
        let url = format!("{}/health", self.server.base);
        send(self.server.auth(self.http.get(&url)), &url)
            .await
            .is_ok()
    }

    /// Registers (or, with `force`, re-registers) the service endpoint at
    /// `uri` (an SDK's HTTP server); returns the names of the services the
    /// server discovered there.
    pub async fn register(&self, uri: &str, force: bool) -> Result<Vec<String>, RestateError> {
        let url = format!("{}/deployments", self.server.base);
        let body = serde_json::json!({ "uri": uri, "force": force });
        let text = send(
            self.server
                .auth(self.http.post(&url))
                .header("content-type", "application/json")
                .body(body.to_string()),
            &url,
        )
        .await?;
        let answer = json(&text, &url)?;
        let services = answer["services"]
            .as_array()
            .ok_or_else(|| RestateError::Answer {
                url: url.clone(),
                message: format!("no `services` list in {}", excerpt(&answer.to_string())),
            })?;
        Ok(services
            .iter()
            .filter_map(|s| s["name"].as_str().map(str::to_owned))
            .collect())
    }

    /// The rows of `sql`, a query of the server's introspection tables
    /// (`sys_invocation`, `sys_journal`, `state`, …), as JSON objects.
    pub async fn query(&self, sql: &str) -> Result<Vec<Value>, RestateError> {
        let url = format!("{}/query", self.server.base);
        let text = send(
            self.server
                .auth(self.http.post(&url))
                .header("content-type", "application/json")
                .header("accept", "application/json")
                .body(serde_json::json!({ "query": sql }).to_string()),
            &url,
        )
        .await?;
        match json(&text, &url)?.get_mut("rows").map(Value::take) {
            Some(Value::Array(rows)) => Ok(rows),
            _ => Err(RestateError::Answer {
                url,
                message: format!("no `rows` in {}", excerpt(&text)),
            }),
        }
    }

    /// Where the invocation `id` is, or `None` if the server does not know
    /// it (or no longer keeps it).
    pub async fn invocation(&self, id: &str) -> Result<Option<Invocation>, RestateError> {
        let id = invocation_id(id, &self.server.base)?;
        let rows = self
            .query(&format!(
                "SELECT id, status, retry_count, last_failure, last_failure_error_code \
                 FROM sys_invocation WHERE id = '{id}'"
            ))
            .await?;
        Ok(rows.into_iter().next().map(|row| Invocation {
            id: id.to_owned(),
            status: row["status"].as_str().unwrap_or_default().to_owned(),
            retry_count: row["retry_count"].as_u64().unwrap_or(0),
            last_failure: row["last_failure"].as_str().map(str::to_owned),
            last_failure_code: row["last_failure_error_code"].as_str().map(str::to_owned),
        }))
    }

    /// Cancels the invocation `id`: its handler sees a terminal error at
    /// its next journaled operation (a harness run: at its next effect).
    pub async fn cancel(&self, id: &str) -> Result<(), RestateError> {
        self.invocation_op(id, "cancel").await
    }

    /// Kills the invocation `id`: it ends at once, without its handler
    /// running again (an invocation whose replay diverges, for one).
    pub async fn kill(&self, id: &str) -> Result<(), RestateError> {
        self.invocation_op(id, "kill").await
    }

    async fn invocation_op(&self, id: &str, op: &str) -> Result<(), RestateError> {
        let id = invocation_id(id, &self.server.base)?;
        let url = format!("{}/invocations/{id}/{op}", self.server.base);
        send(self.server.auth(self.http.patch(&url)), &url)
            .await
            .map(drop)
    }
}

/// An invocation id as the server writes them (`inv_` and base62), checked
/// before it goes into a URL or a query: any other text is a
/// [`RestateError::Input`], and nothing is sent.
fn invocation_id<'a>(id: &'a str, base: &str) -> Result<&'a str, RestateError> {
    if id.starts_with("inv_")
        && id.len() < 100
        && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        Ok(id)
    } else {
        Err(RestateError::Input {
            url: base.to_owned(),
            message: format!("{id:?} is not an invocation id (`inv_…`)"),
        })
    }
}

/// Where an invocation is, as the admin API tells.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invocation {
    /// Its id.
    pub id: String,
    /// `pending`, `scheduled`, `ready`, `running`, `backing-off`,
    /// `suspended`, `paused` or `completed`.
    pub status: String,
    /// How often it was retried.
    pub retry_count: u64,
    /// Why its last attempt failed, if one did.
    pub last_failure: Option<String>,
    /// The error code of that failure (Restate's own, e.g. `RT0016`).
    pub last_failure_code: Option<String>,
}

impl Invocation {
    /// The divergence its last attempt failed with: a replay that asked for
    /// other effects than the journal holds, in Restate's words (which name
    /// the effect recorded and the one asked for, each as
    /// `{step}#{visit}.{attempt}:{key}`).
    pub fn divergence(&self) -> Option<&str> {
        self.last_failure
            .as_deref()
            .filter(|f| f.contains("570") || f.to_ascii_lowercase().contains("mismatch"))
    }
}

/// A Restate server's ingress (`http://host:8080` by default): calls
/// handlers of services and virtual objects.
#[derive(Debug, Clone)]
pub struct Ingress {
    server: Server,
    http: reqwest::Client,
}

impl Ingress {
    /// The ingress at `base`; a call waits for its answer up to `timeout`.
    /// Credentials in its userinfo are sent as basic auth and never shown
    /// (see [`Admin::new`]).
    pub fn new(base: impl Into<String>, timeout: Duration) -> Result<Self, RestateError> {
        Ok(Self {
            server: Server::parse(base.into()),
            http: client(timeout)?,
        })
    }

    /// The URL of `handler` of `service` (of the virtual object `key`).
    /// Each name is one path segment, percent-encoded: a key is any text
    /// (a session id a user gave), and `bob/../alice` must address the
    /// object `bob/../alice`, not `alice`. A key that cannot be a segment
    /// (empty, `.`, `..`) is a [`RestateError::Input`].
    fn handler_url(
        &self,
        service: &str,
        key: Option<&str>,
        handler: &str,
    ) -> Result<String, RestateError> {
        let base = &self.server.base;
        let service = path_segment(service, "the service name", base)?;
        let handler = path_segment(handler, "the handler name", base)?;
        Ok(match key {
            Some(key) => {
                let key = path_segment(key, &format!("the key of a `{service}` object"), base)?;
                format!("{base}/{service}/{key}/{handler}")
            }
            None => format!("{base}/{service}/{handler}"),
        })
    }

    /// Calls `handler` of `service` (with `key` for a virtual object) with
    /// `input` as JSON (`null`: no input at all), and waits for its answer.
    pub async fn call(
        &self,
        service: &str,
        key: Option<&str>,
        handler: &str,
        input: &Value,
    ) -> Result<Value, RestateError> {
        let url = self.handler_url(service, key, handler)?;
        let post = self.server.auth(self.http.post(&url));
        let request = match input {
            // A handler without input takes an empty body, with no type.
            Value::Null => post,
            input => post
                .header("content-type", "application/json")
                .body(input.to_string()),
        };
        json(&send(request, &url).await?, &url)
    }

    /// Sends the call without waiting; returns its invocation id. The
    /// `idempotency_key`, if given, makes a repeated send the same
    /// invocation.
    pub async fn send(
        &self,
        service: &str,
        key: Option<&str>,
        handler: &str,
        input: &Value,
        idempotency_key: Option<&str>,
    ) -> Result<String, RestateError> {
        let url = format!("{}/send", self.handler_url(service, key, handler)?);
        let mut request = self
            .server
            .auth(self.http.post(&url))
            .header("content-type", "application/json")
            .body(input.to_string());
        if let Some(idem) = idempotency_key {
            request = request.header("idempotency-key", idem);
        }
        let answer = json(&send(request, &url).await?, &url)?;
        answer["invocationId"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| RestateError::Answer {
                url,
                message: format!("no `invocationId` in {}", excerpt(&answer.to_string())),
            })
    }

    /// Waits for the invocation `id` to end and returns its answer. An id
    /// that is not an invocation id (`inv_…`) is a [`RestateError::Input`],
    /// and nothing is sent.
    pub async fn attach(&self, id: &str) -> Result<Value, RestateError> {
        let id = invocation_id(id, &self.server.base)?;
        let url = format!("{}/restate/invocation/{id}/attach", self.server.base);
        let text = send(self.server.auth(self.http.get(&url)), &url).await?;
        json(&text, &url)
    }
}

#[cfg(test)]
mod tests {
    //! The clients against a fake HTTP server on 127.0.0.1 (no Restate
    //! server needed): what they send, and what their errors show.
    #![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

    use super::*;
    use serde_json::json;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::{Arc, Mutex};
    use std::time::Instant;

    /// What the fake server answers a request with.
    enum Reply {
        /// These bytes, then the connection closes.
        Raw(Vec<u8>),
        /// A 200 whose chunked body never ends (until the client hangs up).
        Endless,
    }

    /// A complete answer with `status` and `body`.
    fn http(status: &str, body: &str) -> Reply {
        Reply::Raw(
            format!(
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                 connection: close\r\n\r\n{body}",
                body.len()
            )
            .into_bytes(),
        )
    }

    /// A request as the fake server saw it.
    #[derive(Clone, Debug)]
    struct Seen {
        path: String,
        authorization: Option<String>,
    }

    /// An HTTP server on 127.0.0.1 answering each request (one a
    /// connection) with what `answer` gives for its path; it records each
    /// request.
    struct Fake {
        base: String,
        seen: Arc<Mutex<Vec<Seen>>>,
    }

    impl Fake {
        fn start(answer: impl Fn(&str) -> Reply + Send + Sync + 'static) -> Fake {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let base = format!("http://{}", listener.local_addr().unwrap());
            let seen = Arc::new(Mutex::new(Vec::new()));
            let (record, answer) = (Arc::clone(&seen), Arc::new(answer));
            std::thread::spawn(move || {
                for stream in listener.incoming().flatten() {
                    let (record, answer) = (Arc::clone(&record), Arc::clone(&answer));
                    std::thread::spawn(move || serve(stream, &record, &*answer));
                }
            });
            Fake { base, seen }
        }

        /// Its base URL with `userinfo` in it.
        fn with(&self, userinfo: &str) -> String {
            self.base
                .replacen("http://", &format!("http://{userinfo}@"), 1)
        }

        fn seen(&self) -> Vec<Seen> {
            self.seen.lock().unwrap().clone()
        }
    }

    fn serve(mut stream: TcpStream, record: &Mutex<Vec<Seen>>, answer: &dyn Fn(&str) -> Reply) {
        let mut head = Vec::new();
        let mut byte = [0_u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if stream.read(&mut byte).unwrap_or(0) == 0 {
                return;
            }
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        let mut lines = head.lines();
        let path = lines
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .unwrap_or_default()
            .to_owned();
        let header = |name: &str| {
            head.lines()
                .filter_map(|l| l.split_once(':'))
                .find(|(n, _)| n.trim().eq_ignore_ascii_case(name))
                .map(|(_, v)| v.trim().to_owned())
        };
        let length: usize = header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; length];
        let _ = stream.read_exact(&mut body);
        record.lock().unwrap().push(Seen {
            path: path.clone(),
            authorization: header("authorization"),
        });
        match answer(&path) {
            Reply::Raw(bytes) => {
                let _ = stream.write_all(&bytes);
            }
            Reply::Endless => {
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                      transfer-encoding: chunked\r\n\r\n",
                );
                let chunk = format!("{:x}\r\n{}\r\n", 1 << 16, " ".repeat(1 << 16));
                while stream.write_all(chunk.as_bytes()).is_ok() {}
            }
        }
    }

    fn base64(bytes: &[u8]) -> String {
        const DIGITS: &[u8; 64] =
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::new();
        for group in bytes.chunks(3) {
            let n = group
                .iter()
                .enumerate()
                .fold(0_u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
            for i in 0..4 {
                if i <= group.len() {
                    out.push(char::from(DIGITS[(n >> (18 - 6 * i) & 63) as usize]));
                } else {
                    out.push('=');
                }
            }
        }
        out
    }

    fn closed_port() -> u16 {
        TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    /// Each userinfo, the basic auth it makes, and the texts that must
    /// never be shown.
    const USERINFOS: [(&str, &str, &[&str]); 6] = [
        ("ops:hunter2", "ops:hunter2", &["hunter2"]),
        (
            "ops:hun%2Fter2",
            "ops:hun/ter2",
            &["hun%2Fter2", "hun/ter2"],
        ),
        ("ops:hun/ter2", "ops:hun/ter2", &["hun/ter2", "ter2"]),
        ("ops:hu@nter2", "ops:hu@nter2", &["hu@nter2", "nter2"]),
        ("ops:hu:nter2?x", "ops:hu:nter2?x", &["hu:nter2"]),
        ("tok-hunter2-token", "tok-hunter2-token:", &["hunter2"]),
    ];

    fn shows_none(what: &str, shown: &str, hidden: &[&str]) {
        for secret in hidden {
            assert!(!shown.contains(secret), "{what} shows {secret:?}: {shown}");
        }
        assert!(
            shown.contains("127.0.0.1"),
            "{what} names the server: {shown}"
        );
    }

    #[tokio::test]
    async fn credentials_in_a_base_url_go_as_basic_auth_and_are_never_shown() {
        let refusing = Fake::start(|path| match path {
            "/health" => http("200 OK", "ok"),
            _ => http("401 Unauthorized", "denied"),
        });
        let not_json = Fake::start(|_| http("200 OK", "not json"));
        let no_rows = Fake::start(|_| http("200 OK", "{\"x\": 1}"));
        let closed = format!("http://127.0.0.1:{}", closed_port());
        for (userinfo, auth, hidden) in USERINFOS {
            let expected = format!("Basic {}", base64(auth.as_bytes()));
            for fake in [&refusing, &not_json, &no_rows] {
                let admin = Admin::new(fake.with(userinfo)).unwrap();
                shows_none("the admin's Debug", &format!("{admin:?}"), hidden);
                shows_none("the admin's base", admin.base(), hidden);
                let e = admin.query("SELECT 1").await.unwrap_err();
                shows_none("a query's error", &e.to_string(), hidden);
                shows_none("a query's error's Debug", &format!("{e:?}"), hidden);
                let ingress = Ingress::new(fake.with(userinfo), Duration::from_secs(10)).unwrap();
                shows_none("the ingress's Debug", &format!("{ingress:?}"), hidden);
                // `{"x": 1}` is an answer a call takes.
                if let Err(e) = ingress.call("Svc", Some("k"), "run", &json!({})).await {
                    shows_none("a call's error", &e.to_string(), hidden);
                }
                let e = ingress
                    .send("Svc", Some("k"), "run", &json!({}), None)
                    .await
                    .unwrap_err();
                shows_none("a send's error", &e.to_string(), hidden);
                for seen in fake.seen.lock().unwrap().drain(..) {
                    assert_eq!(
                        seen.authorization.as_deref(),
                        Some(expected.as_str()),
                        "{userinfo}: {seen:?}"
                    );
                }
            }
            let admin = Admin::new(refusing.with(userinfo)).unwrap();
            assert!(admin.healthy().await, "{userinfo}");
            let health = refusing.seen.lock().unwrap().pop().unwrap();
            assert_eq!(health.path, "/health");
            assert_eq!(health.authorization, Some(expected), "{userinfo}");
            // Nothing listening.
            let gone = closed.replacen("http://", &format!("http://{userinfo}@"), 1);
            let e = Admin::new(gone.clone())
                .unwrap()
                .register("http://x", false)
                .await
                .unwrap_err();
            shows_none("a transport error", &e.to_string(), hidden);
            let e = Ingress::new(gone, Duration::from_secs(10))
                .unwrap()
                .attach("inv_1")
                .await
                .unwrap_err();
            shows_none("a transport error", &e.to_string(), hidden);
        }
    }

    #[tokio::test]
    async fn a_key_is_one_path_segment_and_never_addresses_another_object() {
        let fake = Fake::start(|_| http("200 OK", "{}"));
        let ingress = Ingress::new(fake.base.clone(), Duration::from_secs(10)).unwrap();
        let last_path = || fake.seen().last().map(|s| s.path.clone());
        for (key, segment) in [
            ("bob/../alice", "bob%2F..%2Falice"),
            ("../Refunds/alice", "..%2FRefunds%2Falice"),
            ("x?y", "x%3Fy"),
            ("a#b", "a%23b"),
            ("50%", "50%25"),
            ("%2e%2e", "%252e%252e"),
            ("with space", "with%20space"),
            ("é", "%C3%A9"),
            ("a\\b", "a%5Cb"),
            ("line\nbreak", "line%0Abreak"),
            ("...", "..."),
            ("plain-key_1.~", "plain-key_1.~"),
        ] {
            ingress
                .call("HarnessAgent", Some(key), "run", &json!({}))
                .await
                .unwrap();
            let path = format!("/HarnessAgent/{segment}/run");
            assert_eq!(last_path().as_deref(), Some(path.as_str()), "{key:?}");
            // `{}` has no invocation id: refused after it was sent.
            let _ = ingress
                .send("HarnessAgent", Some(key), "run", &json!({}), None)
                .await;
            assert_eq!(last_path(), Some(format!("{path}/send")), "{key:?}");
            #[cfg(feature = "service")]
            {
                let client = AgentClient::new(ingress.clone());
                let _ = client
                    .session(&harness::SessionId::from(key))
                    .await
                    .unwrap_err();
                let path = format!("/HarnessAgent/{segment}/session");
                assert_eq!(last_path().as_deref(), Some(path.as_str()), "{key:?}");
            }
        }
        let sent = fake.seen().len();
        for key in ["", ".", ".."] {
            let e = ingress
                .call("HarnessAgent", Some(key), "run", &json!({}))
                .await
                .unwrap_err();
            assert!(matches!(e, RestateError::Input { .. }), "{key:?}: {e:?}");
            assert!(e.to_string().contains("path segment"), "{e}");
            let e = ingress
                .send("HarnessAgent", Some(key), "run", &json!({}), None)
                .await
                .unwrap_err();
            assert!(matches!(e, RestateError::Input { .. }), "{key:?}: {e:?}");
        }
        for id in [
            "",
            "../../deployments",
            "inv_a/b",
            "inv_x?y",
            "inv_1#x",
            "inv_ 1",
        ] {
            let e = ingress.attach(id).await.unwrap_err();
            assert!(matches!(e, RestateError::Input { .. }), "{id:?}: {e:?}");
            assert!(e.to_string().contains("not an invocation id"), "{e}");
        }
        assert_eq!(fake.seen().len(), sent, "nothing refused was sent");
        ingress.attach("inv_1abcXYZ").await.unwrap();
        assert_eq!(
            last_path().as_deref(),
            Some("/restate/invocation/inv_1abcXYZ/attach")
        );
    }

    #[tokio::test]
    async fn answers_are_read_up_to_a_limit_and_errors_quote_only_their_start() {
        let big = format!("{{\"x\": \"{}\"}}", "y".repeat(1 << 20));
        let (quoted, refused) = (big.clone(), big.clone());
        // Says it is larger than the limit, sends a little, hangs up.
        let announced = Fake::start(|_| {
            Reply::Raw(
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{{\"rows\": [",
                    MAX_ANSWER_BYTES + 1
                )
                .into_bytes(),
            )
        });
        let endless = Fake::start(|_| Reply::Endless);
        let long_error = Fake::start(move |_| http("401 Unauthorized", &refused));
        let long_answer = Fake::start(move |_| http("200 OK", &quoted));
        let long_text = Fake::start(|_| http("200 OK", &"z".repeat(1 << 20)));

        for fake in [&announced, &endless] {
            let began = Instant::now();
            let e = Admin::new(fake.base.clone())
                .unwrap()
                .query("SELECT 1")
                .await
                .unwrap_err();
            assert!(
                matches!(e, RestateError::TooLarge { limit, .. } if limit == MAX_ANSWER_BYTES),
                "{e:?}"
            );
            assert!(
                began.elapsed() < Duration::from_secs(20),
                "{:?}",
                began.elapsed()
            );
            assert!(e.to_string().contains("larger than"), "{e}");
        }
        let admin = |fake: &Fake| Admin::new(fake.base.clone()).unwrap();
        let ingress =
            |fake: &Fake| Ingress::new(fake.base.clone(), Duration::from_secs(10)).unwrap();
        let errors = [
            admin(&long_error).query("SELECT 1").await.unwrap_err(),
            admin(&long_answer).query("SELECT 1").await.unwrap_err(),
            admin(&long_answer)
                .register("http://x", false)
                .await
                .unwrap_err(),
            admin(&long_text).query("SELECT 1").await.unwrap_err(),
            ingress(&long_answer)
                .send("Svc", Some("k"), "run", &json!({}), None)
                .await
                .unwrap_err(),
            ingress(&long_text)
                .call("Svc", Some("k"), "run", &json!({}))
                .await
                .unwrap_err(),
        ];
        for e in errors {
            let shown = e.to_string();
            assert!(
                shown.len() < 2 * QUOTED_BYTES,
                "{} bytes: {e:?}",
                shown.len()
            );
        }
        #[cfg(feature = "service")]
        {
            let e = AgentClient::new(ingress(&long_answer))
                .run(&harness::SessionId::from("s"), &json!({}))
                .await
                .unwrap_err();
            let shown = e.to_string();
            assert!(shown.len() < 2 * QUOTED_BYTES, "{} bytes", shown.len());
            assert!(shown.contains("bytes in all"), "{shown}");
        }
    }

    #[test]
    fn an_excerpt_is_cut_on_a_character_boundary_and_says_how_long_the_text_was() {
        assert_eq!(excerpt("short"), "short");
        let text = "é".repeat(QUOTED_BYTES);
        let cut = excerpt(&text);
        assert!(cut.len() < QUOTED_BYTES + 40, "{}", cut.len());
        assert!(
            cut.ends_with(&format!("({} bytes in all)", text.len())),
            "{cut}"
        );
    }
}
