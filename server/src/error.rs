//! The errors of the server: what a client gets back (a JSON body with a
//! status), and what stops a server from starting.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use harness::session::SessionError;
use serde_json::json;

/// A request the server refuses or could not carry out, as the client sees
/// it: a status and a JSON body `{"error", "message", "field"}`. Every
/// mistake of a client is a 4xx that names what was wrong and where; a 5xx
/// is the server's own failure (its store).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApiError {
    /// A field's text does not parse in the little language it is written
    /// in (a cron schedule or time, a store filter's operator): a 400.
    #[error("{message}")]
    BadRequest {
        /// The field, as a path (`command.resume`, `stream_mode[1]`); empty
        /// for the body as a whole.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// The request does not validate (a body that is not JSON, a field
    /// missing or of the wrong type or value, a query parameter that does
    /// not read), or asks for something this server cannot do with it (an
    /// option it does not support, an answer of the wrong shape): a 422,
    /// as LangGraph's server and the Agent Protocol answer it.
    #[error("{message}")]
    Unprocessable {
        /// The field, as a path.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// No such assistant, thread, run or checkpoint.
    #[error("{what} `{id}` was not found")]
    NotFound {
        /// `assistant`, `thread`, `run`, `checkpoint`.
        what: &'static str,
        /// The id the client gave.
        id: String,
    },
    /// The thread is not in a state that allows this (a run in flight, an
    /// interrupt waiting for an answer, a thread that already exists).
    #[error("{message}")]
    Conflict {
        /// Why.
        message: String,
    },
    /// The body is larger than the server accepts.
    #[error("the request body is larger than the limit of {limit} bytes")]
    TooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// The server failed (its session store); the client's request may be
    /// fine.
    #[error("{0}")]
    Internal(String),
    /// The server is stopping.
    #[error("{0}")]
    Unavailable(String),
    /// The request took longer than the server's
    /// [`request_timeout`](crate::Server::request_timeout); what it did may
    /// be partly done (look before trying again).
    #[error(
        "the request took longer than this server's limit of {} ms (Server::request_timeout) \
         and was stopped; what it did may be partly done",
        limit.as_millis()
    )]
    Timeout {
        /// The limit.
        limit: std::time::Duration,
    },
    /// As many streams as the server allows
    /// ([`max_streams`](crate::Server::max_streams)) are open; the stream
    /// was not opened, and a run it would have started (`runs/stream`) was
    /// not started (a run joined goes on).
    #[error(
        "this server already has its limit of {limit} open streams (Server::max_streams); \
         this stream was not opened (a run it would start was not started; a run it would \
         join goes on): close a stream, or try again later"
    )]
    TooManyStreams {
        /// The limit.
        limit: usize,
    },
    /// As many runs as the server allows
    /// ([`max_waiting_runs`](crate::Server::max_waiting_runs)) wait to
    /// start (queued behind other runs of their threads, or delayed); the
    /// run was not created.
    #[error(
        "this server already has its limit of {limit} runs waiting to start \
         (Server::max_waiting_runs); the run was not created: wait for some to start, \
         cancel some, or try again later"
    )]
    TooManyRuns {
        /// The limit.
        limit: usize,
    },
}

impl ApiError {
    /// A field that does not validate: a 422.
    pub(crate) fn bad(field: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError::Unprocessable {
            field: field.into(),
            message: message.into(),
        }
    }

    /// A field whose text does not parse (a cron schedule, a filter
    /// operator): a 400.
    pub(crate) fn syntax(field: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError::BadRequest {
            field: field.into(),
            message: message.into(),
        }
    }

    /// A field asking for what the server cannot do.
    pub(crate) fn unprocessable(field: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError::Unprocessable {
            field: field.into(),
            message: message.into(),
        }
    }

    pub(crate) fn not_found(what: &'static str, id: impl Into<String>) -> Self {
        ApiError::NotFound {
            what,
            id: id.into(),
        }
    }

    pub(crate) fn conflict(message: impl Into<String>) -> Self {
        ApiError::Conflict {
            message: message.into(),
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            ApiError::Unprocessable { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::NotFound { .. } => StatusCode::NOT_FOUND,
            ApiError::Conflict { .. } => StatusCode::CONFLICT,
            ApiError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Timeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            ApiError::TooManyStreams { .. } | ApiError::TooManyRuns { .. } => {
                StatusCode::TOO_MANY_REQUESTS
            }
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            ApiError::BadRequest { .. } => "bad_request",
            ApiError::Unprocessable { .. } => "unprocessable",
            ApiError::NotFound { .. } => "not_found",
            ApiError::Conflict { .. } => "conflict",
            ApiError::TooLarge { .. } => "too_large",
            ApiError::Internal(_) => "internal",
            ApiError::Unavailable(_) => "unavailable",
            ApiError::Timeout { .. } => "timeout",
            ApiError::TooManyStreams { .. } => "too_many_streams",
            ApiError::TooManyRuns { .. } => "too_many_runs",
        }
    }

    fn field(&self) -> Option<&str> {
        match self {
            ApiError::BadRequest { field, .. } | ApiError::Unprocessable { field, .. } => {
                Some(field)
            }
            _ => None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // Text from a store can hold what it was opened with (a URL with a
        // password): the process's secrets are redacted from every message.
        let message = harness::secrets::redact(&self.to_string()).into_owned();
        if let ApiError::Internal(_) = &self {
            tracing::error!(error = %message, "request failed");
        }
        let mut body = json!({
            "error": self.kind(),
            "message": message,
        });
        if let Some(field) = self.field() {
            body["field"] = json!(field);
        }
        (self.status(), Json(body)).into_response()
    }
}

/// A session operation's error, as the client sees it: what the client can
/// change is a 4xx, what the store did is a 500.
impl From<SessionError> for ApiError {
    fn from(e: SessionError) -> Self {
        match e {
            SessionError::NoInterrupt(e) => ApiError::conflict(e.to_string()),
            // A thread's session may be a fork the client never saw: the
            // messages speak of the thread.
            SessionError::InFlight(e) => ApiError::conflict(in_flight(e.expires_at)),
            SessionError::PendingInterrupt(e) => ApiError::conflict(format!(
                "the thread waits for an answer to interrupt {}: answer it with \
                 `command: {{\"resume\": ...}}`",
                e.interrupt
            )),
            SessionError::NoSession(_) => ApiError::conflict(
                "the thread's session is missing from the store (removed outside the server)",
            ),
            SessionError::NoCheckpoint { session, index, .. } => {
                ApiError::not_found("checkpoint", format!("{index}.{session}"))
            }
            SessionError::Unfinished { .. } => ApiError::conflict(
                "the thread's last run stopped mid-way (its process ended): a run with no \
                 input continues it; a run with an input starts from its last checkpoint",
            ),
            SessionError::NothingToRecover { why, .. } => {
                ApiError::conflict(format!("the thread has no unfinished run: {why}"))
            }
            // A value nested deeper than a store reads back: what a client
            // sent (a body is held to less, so this is one made from it).
            SessionError::Store(harness::session::StoreError::TooDeep(e)) => {
                ApiError::unprocessable("", e.to_string())
            }
            // An id the client chose that this store cannot keep.
            SessionError::Store(e @ harness::session::StoreError::SessionIdNotKept { .. }) => {
                ApiError::unprocessable("thread_id", e.to_string())
            }
            other => ApiError::Internal(other.to_string()),
        }
    }
}

/// What a 409 says of a thread another run holds until `expires_at` (ms
/// since the epoch; 0: no end).
fn in_flight(expires_at: u64) -> String {
    if expires_at == 0 {
        return "the thread is being run by another run: try again when it settles".into();
    }
    let left = expires_at.saturating_sub(harness::session::now_millis());
    format!(
        "the thread is being run by another run, whose lease ends in {}.{:03} s unless \
         renewed: try again when the run settles, or once the lease has ended if its \
         process died",
        left / 1000,
        left % 1000
    )
}

impl From<harness::session::StoreError> for ApiError {
    fn from(e: harness::session::StoreError) -> Self {
        SessionError::from(e).into()
    }
}

/// What stops a server from being built or started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// No agent was registered.
    #[error("no agent to serve: register one with Server::agent(..)")]
    NoAgents,
    /// Two agents have the same id.
    #[error("two agents are named `{0}`: an assistant id names one agent")]
    DuplicateAgent(String),
    /// No session store for the server's own records.
    #[error(
        "no session store: give the server the store its agents' harnesses use, with Server::store(..)"
    )]
    NoStore,
    /// The address is not a loopback address and the server was not told to
    /// accept other machines.
    #[error(
        "{0} is not a loopback address: the server listens only on this machine unless told \
         otherwise with Server::allow_remote()"
    )]
    NotLoopback(std::net::SocketAddr),
    /// A server other machines can reach must check API keys.
    #[error(
        "{0} is reachable from other machines, and no API key is set: give one with \
         Server::api_key(..)"
    )]
    RemoteWithoutKeys(std::net::SocketAddr),
    /// The studio cannot be mounted at the path given.
    #[error("{0}")]
    Studio(String),
    /// Listening or serving failed.
    #[error("cannot serve on {addr}: {source}")]
    Io {
        /// The address.
        addr: std::net::SocketAddr,
        /// What failed.
        source: std::io::Error,
    },
}
