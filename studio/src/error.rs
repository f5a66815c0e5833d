//! Errors: [`StudioError`] for starting the studio, [`ApiError`] for a
//! request, answered as `{"error": "…"}` with its HTTP status (and, for a
//! bad query parameter, `"kind": "parameter"` and `"parameter": NAME`).

use crate::redact;
use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use harness::SessionId;
use harness::memory::MemoryError;
use harness::session::{GapKind, SessionError, StoreError, StoreLoad};
use std::net::SocketAddr;

/// Why the studio could not start or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StudioError {
    /// The address is not a loopback address: the studio serves this
    /// machine only.
    #[error(
        "studio: {addr} is not a loopback address; the studio only listens on this machine \
         (127.0.0.1 or ::1), where its token keeps other users out"
    )]
    NotLoopback {
        /// The address given.
        addr: SocketAddr,
    },
    /// The address could not be bound (in use, not permitted).
    #[error("studio: cannot listen on {addr}: {source}")]
    Bind {
        /// The address given.
        addr: SocketAddr,
        /// The system's error.
        source: std::io::Error,
    },
    /// Serving failed.
    #[error("studio: serving on {addr} failed: {source}")]
    Serve {
        /// The address served.
        addr: SocketAddr,
        /// The system's error.
        source: std::io::Error,
    },
    /// The harness's graph could not be read from its DOT export (a change
    /// of that format that this crate does not know).
    #[error("studio: {0}")]
    Graph(String),
    /// The path given to [`Studio::mount`](crate::Studio::mount) is not a
    /// plain path below the root.
    #[error("studio: cannot be mounted there: {0}")]
    Base(String),
    /// [`Studio::expect_answer`](crate::Studio::expect_answer) names a step
    /// the agent's loop does not have (a typo would otherwise leave the
    /// answers of the step meant unchecked).
    #[error(
        "studio: expect_answer names step `{step}`, which the agent's loop does not have; \
         its steps are {}",
        known.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
    )]
    UnknownStep {
        /// The name given.
        step: String,
        /// The names a declared answer can take: the loop's steps, each
        /// sub-agent's steps as `sub/step` and by their own name.
        known: Vec<String>,
    },
    /// The agent given to [`Studio::for_agent`](crate::Studio::for_agent)
    /// has no session store: it could answer or fork nothing.
    #[error(
        "studio: agent `{agent}` has no session store; build its harness with \
         .store(..) and give the studio that same store"
    )]
    NoStore {
        /// The agent.
        agent: String,
    },
}

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ApiError {
    #[error(
        "missing or wrong token: open the URL the studio printed at start (it ends in ?token=…)"
    )]
    Unauthorized,
    #[error("write actions send the token in the x-studio-token header, not only in the URL")]
    TokenNotInHeader,
    #[error(
        "this studio is read-only (`harness studio` inspects a store without the agent's \
         state type): answering and forking need the application's own studio \
         (harness_studio::Studio::for_agent)"
    )]
    ReadOnly,
    #[error("no session {0} in the store")]
    NoSession(SessionId),
    #[error("session {session} belongs to agent `{owner}`; this studio serves agent `{agent}`")]
    OtherAgent {
        session: SessionId,
        owner: String,
        agent: String,
    },
    #[error("session {session} has no checkpoint {seq}: its last is {last}")]
    NoCheckpoint {
        session: SessionId,
        seq: u64,
        last: u64,
    },
    #[error("session {session} is not waiting for an answer: it is {phase}")]
    NotWaiting { session: SessionId, phase: String },
    #[error(
        "session {session} waits on interrupt {pending}, not {given} (reload the page: it was \
         answered or asked again)"
    )]
    WrongInterrupt {
        session: SessionId,
        given: String,
        pending: String,
    },
    /// The run read the answer and refused it (a wrong type, or the step's
    /// own check): nothing of it was kept, and the session still waits on
    /// the same interrupt.
    #[error(
        "the run refused the answer to interrupt {interrupt} of step `{step}`: {reason}; \
         nothing was kept and session {session} still waits on that interrupt: answer it again"
    )]
    AnswerRejected {
        session: SessionId,
        interrupt: String,
        step: String,
        reason: String,
    },
    /// The studio's store holds the session, the agent's does not: the
    /// studio was given another store than the one its harness was built
    /// with.
    #[error(
        "session {session} is in the studio's store but not in the store agent `{agent}` was \
         built with: this studio was given another store than its harness's (give \
         Studio::for_agent the store passed to the harness's .store(..)), so it can answer \
         and fork none of the sessions it lists"
    )]
    NotInAgentStore { session: SessionId, agent: String },
    /// A fork's `index` past the session's last checkpoint.
    #[error(
        "`index` {index}: session {session} has no checkpoint after {index} steps to fork from; \
         it has taken {steps} steps, so `index` is 0 (its start) to {steps}"
    )]
    ForkIndex {
        session: SessionId,
        index: u64,
        steps: u64,
    },
    #[error("the answer to step `{step}` must be {expected}: {error}")]
    AnswerShape {
        step: String,
        expected: String,
        error: String,
    },
    #[error(
        "the answer to a tool-approval request must be {{\"decisions\": [{{\"call_id\": ID, \
         \"decision\": \"approve\" | \"always_allow\" | \"edit\" (with \"arguments\") | \
         \"reject\" | \"correct\" (with \"message\")}}]}}: {error}"
    )]
    NotDecisions { error: String },
    /// Decisions that do not fit the waiting calls; `problems` names each
    /// call, for the page.
    #[error("{message}")]
    Decisions {
        message: String,
        problems: Vec<crate::approval::Problem>,
    },
    #[error("the update is not an update of the agent's state: {0}")]
    BadUpdate(String),
    #[error("bad request: {0}")]
    BadRequest(String),
    /// A write's body over the studio's limit (the body's `kind` is
    /// `too_large`, `limit` the limit in bytes).
    #[error("the body is larger than the {limit} bytes a write takes")]
    TooLarge { limit: usize },
    /// A query parameter the call does not take, or cannot read; the
    /// body's `kind` is `parameter` and its `parameter` names it.
    #[error("parameter `{parameter}` is {value:?}: {why}")]
    BadParameter {
        parameter: String,
        value: String,
        why: String,
    },
    #[error("session {session}, checkpoint {seq}: cannot be read as the agent's {what}: {error}")]
    Unreadable {
        session: SessionId,
        seq: u64,
        what: &'static str,
        error: String,
    },
    #[error("session {session}: {source}")]
    Store { session: String, source: StoreError },
    #[error(
        "this studio serves no long-term memory: start it with `harness studio --memory PATH`, \
         or build it with `Studio::memory`"
    )]
    NoMemory,
    #[error("no item {key:?} in namespace {namespace} (or it has expired)")]
    NoItem { namespace: String, key: String },
    /// Long-term memory refused the request or failed; the body's `kind`
    /// says which ([`memory_kind`]).
    #[error("long-term memory: {0}")]
    Memory(MemoryError),
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error("a write sends JSON: Content-Type must be application/json, not {0:?}")]
    NotJson(String),
    #[error(
        "a write comes from the studio's own page: origin {origin:?} is not this studio's \
         ({host:?})"
    )]
    ForeignOrigin { origin: String, host: String },
    /// No route of the API answers this path (the body's `kind` is
    /// `route`, its `path` the path asked).
    #[error(
        "no such API call: {path} (the studio's API is under /api: sessions, events, memory, evals)"
    )]
    NoRoute { path: String },
    /// A path of the API asked with a method it does not take (the body's
    /// `kind` is `method`, `allowed` the methods it takes, as in the
    /// `Allow` header).
    #[error("{path} is not called with {method}: it takes {allowed}")]
    WrongMethod {
        method: String,
        path: String,
        allowed: String,
    },
    /// The work of a request ended without an answer (it panicked).
    #[error("the studio could not answer: {0}")]
    Failed(String),
}

impl ApiError {
    fn status(&self) -> StatusCode {
        match self {
            ApiError::Unauthorized | ApiError::TokenNotInHeader => StatusCode::UNAUTHORIZED,
            ApiError::ReadOnly | ApiError::OtherAgent { .. } | ApiError::ForeignOrigin { .. } => {
                StatusCode::FORBIDDEN
            }
            ApiError::NotJson(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::NoSession(_)
            | ApiError::NoCheckpoint { .. }
            | ApiError::ForkIndex { .. }
            | ApiError::NoMemory
            | ApiError::NoItem { .. }
            | ApiError::NoRoute { .. } => StatusCode::NOT_FOUND,
            ApiError::WrongMethod { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Memory(e) => match e {
                MemoryError::Namespace { .. }
                | MemoryError::Key { .. }
                | MemoryError::Value { .. }
                | MemoryError::Filter { .. }
                | MemoryError::Query { .. } => StatusCode::BAD_REQUEST,
                MemoryError::Embedding { .. } => StatusCode::BAD_GATEWAY,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            },
            ApiError::NotWaiting { .. } | ApiError::WrongInterrupt { .. } => StatusCode::CONFLICT,
            ApiError::AnswerShape { .. }
            | ApiError::AnswerRejected { .. }
            | ApiError::NotDecisions { .. }
            | ApiError::Decisions { .. }
            | ApiError::BadUpdate(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::BadRequest(_) | ApiError::BadParameter { .. } => StatusCode::BAD_REQUEST,
            ApiError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Session(SessionError::NoSession(_) | SessionError::NoCheckpoint { .. }) => {
                StatusCode::NOT_FOUND
            }
            ApiError::Session(
                SessionError::InFlight(_)
                | SessionError::NoInterrupt(_)
                | SessionError::PendingInterrupt(_),
            ) => StatusCode::CONFLICT,
            ApiError::Unreadable { .. }
            | ApiError::NotInAgentStore { .. }
            | ApiError::Store { .. }
            | ApiError::Session(_)
            | ApiError::Failed(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        // A message may quote what a store or a model wrote.
        let mut body = serde_json::json!({ "error": redact::text(&self.to_string()) });
        if let ApiError::Decisions { problems, .. } = &self {
            body["problems"] = serde_json::json!(problems);
            redact::json(&mut body["problems"]);
        }
        if let ApiError::Memory(e) = &self {
            body["kind"] = serde_json::json!(memory_kind(e));
        }
        if let ApiError::AnswerRejected {
            interrupt, reason, ..
        } = &self
        {
            body["kind"] = serde_json::json!("answer_rejected");
            body["field"] = serde_json::json!("answer");
            body["interrupt"] = serde_json::json!(redact::text(interrupt));
            body["reason"] = serde_json::json!(redact::text(reason));
        }
        if let ApiError::TooLarge { limit } = &self {
            body["kind"] = serde_json::json!("too_large");
            body["limit"] = serde_json::json!(limit);
        }
        if let ApiError::ForkIndex { .. } = &self {
            body["field"] = serde_json::json!("index");
        }
        if let ApiError::BadParameter { parameter, .. } = &self {
            body["kind"] = serde_json::json!("parameter");
            body["parameter"] = serde_json::json!(redact::text(parameter));
        }
        if let ApiError::Store {
            source: StoreError::Load(load),
            ..
        } = &self
        {
            damaged(&mut body, load);
        }
        if let ApiError::NoRoute { path } = &self {
            body["kind"] = serde_json::json!("route");
            body["path"] = serde_json::json!(redact::text(path));
        }
        if let ApiError::WrongMethod { allowed, .. } = &self {
            body["kind"] = serde_json::json!("method");
            body["allowed"] = serde_json::json!(allowed);
            let mut response = (status, Json(body)).into_response();
            if let Ok(value) = axum::http::HeaderValue::from_str(allowed) {
                response
                    .headers_mut()
                    .insert(axum::http::header::ALLOW, value);
            }
            return response;
        }
        (status, Json(body)).into_response()
    }
}

/// A damaged record's error body: `"kind": "damaged"`, the session and
/// the record, and where its checkpoint log breaks when it does (`"gap":
/// {"kind", "expected_seq", "found_seq"}`, `found_seq` null when the log
/// ends there), so that a client tells damage from a failure to reach the
/// store without reading the message.
fn damaged(body: &mut serde_json::Value, load: &StoreLoad) {
    body["kind"] = serde_json::json!("damaged");
    body["session"] = serde_json::json!(redact::text(load.session.as_str()));
    body["record"] = serde_json::json!(redact::text(&load.record));
    if let Some(gap) = &load.gap {
        body["gap"] = serde_json::json!({
            "kind": gap_kind(gap.kind),
            "expected_seq": gap.expected_seq,
            "found_seq": gap.found_seq,
        });
    }
}

/// A break of a checkpoint log, as a body's `gap.kind` names it.
fn gap_kind(kind: GapKind) -> &'static str {
    match kind {
        GapKind::Missing => "missing",
        GapKind::Duplicate => "duplicate",
        GapKind::OutOfOrder => "out_of_order",
        GapKind::EndsEarly => "ends_early",
        _ => "broken",
    }
}

/// The kind of a memory error, as the body's `kind` names it: `namespace`,
/// `key`, `value`, `filter`, `query` (a search by text without an index,
/// ...), `embedding`, `corrupt` or `backend`.
pub(crate) fn memory_kind(e: &MemoryError) -> &'static str {
    match e {
        MemoryError::Namespace { .. } => "namespace",
        MemoryError::Key { .. } => "key",
        MemoryError::Value { .. } => "value",
        MemoryError::Filter { .. } => "filter",
        MemoryError::Query { .. } => "query",
        MemoryError::Embedding { .. } => "embedding",
        MemoryError::Corrupt { .. } => "corrupt",
        _ => "backend",
    }
}
