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
//!   typed errors that say what the server answered.
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
        /// The server's message.
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
}

/// A listener at `addr` whose connections send without Nagle's delay
/// (`TCP_NODELAY` on the listening socket, which Linux passes on to the
/// sockets it accepts), to hand to the SDK's `HttpServer::serve`.
///
/// Serve a harness agent this way: each effect's `ctx.run` reaches Restate
/// as two small writes (the command, then its completion once the step has
/// run the effect), and with Nagle's algorithm on (the SDK's
/// `listen_and_serve`) the second waits for the server's delayed ACK, about
/// 40 ms per effect at low concurrency (`benchmarks/scripts/bench-restate`).
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
    let response = request.send().await.map_err(|e| RestateError::Transport {
        url: url.to_owned(),
        message: e.to_string(),
    })?;
    let status = response.status();
    let body = response.text().await.map_err(|e| RestateError::Transport {
        url: url.to_owned(),
        message: e.to_string(),
    })?;
    if !status.is_success() {
        return Err(RestateError::Status {
            url: url.to_owned(),
            status: status.as_u16(),
            body,
        });
    }
    Ok(body)
}

fn json(text: &str, url: &str) -> Result<Value, RestateError> {
    if text.trim().is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_str(text).map_err(|e| RestateError::Answer {
        url: url.to_owned(),
        message: format!("{e}: {text}"),
    })
}

/// A Restate server's admin API (`http://host:9070` by default).
#[derive(Debug, Clone)]
pub struct Admin {
    base: String,
    http: reqwest::Client,
}

impl Admin {
    /// The admin API at `base` (no trailing slash needed).
    pub fn new(base: impl Into<String>) -> Result<Self, RestateError> {
        Ok(Self {
            base: base.into().trim_end_matches('/').to_owned(),
            http: client(Duration::from_secs(30))?,
        })
    }

    /// Whether the server says it is healthy.
    pub async fn healthy(&self) -> bool {
        let url = format!("{}/health", self.base);
        send(self.http.get(&url), &url).await.is_ok()
    }

    /// Registers (or, with `force`, re-registers) the service endpoint at
    /// `uri` (an SDK's HTTP server); returns the names of the services the
    /// server discovered there.
    pub async fn register(&self, uri: &str, force: bool) -> Result<Vec<String>, RestateError> {
        let url = format!("{}/deployments", self.base);
        let body = serde_json::json!({ "uri": uri, "force": force });
        let text = send(
            self.http
                .post(&url)
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
                message: format!("no `services` list in {answer}"),
            })?;
        Ok(services
            .iter()
            .filter_map(|s| s["name"].as_str().map(str::to_owned))
            .collect())
    }

    /// The rows of `sql`, a query of the server's introspection tables
    /// (`sys_invocation`, `sys_journal`, `state`, …), as JSON objects.
    pub async fn query(&self, sql: &str) -> Result<Vec<Value>, RestateError> {
        let url = format!("{}/query", self.base);
        let text = send(
            self.http
                .post(&url)
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
                message: format!("no `rows` in {text}"),
            }),
        }
    }

    /// Where the invocation `id` is, or `None` if the server does not know
    /// it (or no longer keeps it).
    pub async fn invocation(&self, id: &str) -> Result<Option<Invocation>, RestateError> {
        let id = invocation_id(id, &self.base)?;
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
        let id = invocation_id(id, &self.base)?;
        let url = format!("{}/invocations/{id}/{op}", self.base);
        send(self.http.patch(&url), &url).await.map(drop)
    }
}

/// An invocation id as the server writes them (`inv_` and base62), checked
/// before it goes into a URL or a query.
fn invocation_id<'a>(id: &'a str, base: &str) -> Result<&'a str, RestateError> {
    if id.starts_with("inv_")
        && id.len() < 100
        && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        Ok(id)
    } else {
        Err(RestateError::Answer {
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
    base: String,
    http: reqwest::Client,
}

impl Ingress {
    /// The ingress at `base`; a call waits for its answer up to `timeout`.
    pub fn new(base: impl Into<String>, timeout: Duration) -> Result<Self, RestateError> {
        Ok(Self {
            base: base.into().trim_end_matches('/').to_owned(),
            http: client(timeout)?,
        })
    }

    fn handler_url(&self, service: &str, key: Option<&str>, handler: &str) -> String {
        match key {
            Some(key) => format!("{}/{service}/{key}/{handler}", self.base),
            None => format!("{}/{service}/{handler}", self.base),
        }
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
        let url = self.handler_url(service, key, handler);
        let request = match input {
            // A handler without input takes an empty body, with no type.
            Value::Null => self.http.post(&url),
            input => self
                .http
                .post(&url)
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
        let url = format!("{}/send", self.handler_url(service, key, handler));
        let mut request = self
            .http
            .post(&url)
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
                message: format!("no `invocationId` in {answer}"),
            })
    }

    /// Waits for the invocation `id` to end and returns its answer.
    pub async fn attach(&self, id: &str) -> Result<Value, RestateError> {
        let url = format!("{}/restate/invocation/{id}/attach", self.base);
        let text = send(self.http.get(&url), &url).await?;
        json(&text, &url)
    }
}
