//! Who may call the server: API keys with scopes, the browser origins
//! allowed (CORS), and the host names a loopback server answers to.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use std::fmt;
use std::sync::Arc;

/// What an API key may do. Each scope includes the ones before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// Read assistants, threads, state, history and runs, and stream them.
    Read,
    /// Also create threads, start, cancel and resume runs (joining a run's
    /// stream with `cancel_on_disconnect=true` cancels it when the client
    /// hangs up: that needs this scope too), update state,
    /// create crons, put and delete memory items (`/store/items`: a running
    /// client writes and removes them), send the streaming protocol's
    /// commands (to `/threads/{id}/commands` or over the thread's
    /// WebSocket, which needs this scope).
    Run,
    /// Also delete threads, runs and crons.
    Admin,
}

impl Scope {
    fn name(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Run => "run",
            Scope::Admin => "admin",
        }
    }

    /// The scope a request needs; `query` is its query string, if any (a
    /// run's stream joined with `cancel_on_disconnect=true` cancels the run
    /// when the client hangs up: that needs scope `run`).
    fn needed(method: &Method, path: &str, query: Option<&str>) -> Scope {
        // `/threads/{id}/stream`: the streaming protocol's events (a read)
        // over `POST`; over `GET`, its WebSocket, which also takes commands
        // that start runs.
        let thread_stream = {
            let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
            matches!(parts.as_slice(), ["threads", _, "stream"])
        };
        if thread_stream {
            return if *method == Method::POST {
                Scope::Read
            } else {
                Scope::Run
            };
        }
        if *method == Method::GET || *method == Method::HEAD {
            return if cancels_on_disconnect(path, query) {
                Scope::Run
            } else {
                Scope::Read
            };
        }
        if *method == Method::DELETE {
            // Memory items are written and removed by running clients.
            return if path == "/store/items" {
                Scope::Run
            } else {
                Scope::Admin
            };
        }
        // The searches and reads sent as `POST`, by their whole shape: a
        // client-chosen id is never taken for one (`PATCH /threads/history`
        // changes thread `history`).
        let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let reads = *method == Method::POST
            && matches!(
                parts.as_slice(),
                ["assistants" | "threads" | "agents" | "runs", "search"]
                    | ["runs", "crons", "search"]
                    | ["store", "items", "search"]
                    | ["store", "namespaces"]
                    | ["threads", _, "history"]
                    | ["threads", _, "state", "checkpoint"]
            );
        if reads { Scope::Read } else { Scope::Run }
    }
}

/// Whether a `GET` of `path` joins a run's stream (`join_stream`:
/// `/threads/{id}/runs/{run}/stream`, or `/runs/{run}/stream`) asking to
/// cancel the run when the client hangs up: `cancel_on_disconnect` read as
/// the handler reads it (its last non-empty value, percent-decoded, `true`,
/// `True` or `1`). A query that does not read is refused by the handler.
fn cancels_on_disconnect(path: &str, query: Option<&str>) -> bool {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let joins = matches!(
        parts.as_slice(),
        ["threads", _, "runs", _, "stream"] | ["runs", _, "stream"]
    );
    joins
        && query
            .and_then(|q| crate::app::QueryPairs::parse(q).ok())
            .is_some_and(|q| q.flag("cancel_on_disconnect", false).unwrap_or(false))
}

/// An API key and its scope. Its text never appears in a log, an error or
/// a `Debug` output.
#[derive(Clone)]
pub(crate) struct Key {
    pub(crate) secret: String,
    pub(crate) scope: Scope,
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Key")
            .field("secret", &"(redacted)")
            .field("scope", &self.scope)
            .finish()
    }
}

/// The access rules of a server.
#[derive(Clone, Debug, Default)]
pub(crate) struct Guard {
    /// No key: every request may do everything (a loopback server).
    pub(crate) keys: Vec<Key>,
    /// Browser origins allowed to call (CORS); a request from any other
    /// origin is refused.
    pub(crate) origins: Vec<String>,
    /// Host names (without the port) the server answers to; `None` for any.
    pub(crate) hosts: Option<Vec<String>>,
    /// Where the studio is mounted (`/studio`), if it is.
    pub(crate) studio: Option<String>,
}

/// Host names of this machine: what a loopback server answers to (a page
/// of another site whose name resolves to 127.0.0.1 is refused).
pub(crate) fn loopback_hosts() -> Vec<String> {
    ["localhost", "127.0.0.1", "[::1]"]
        .map(String::from)
        .to_vec()
}

fn refuse(status: StatusCode, kind: &str, message: String) -> Response {
    (
        status,
        axum::Json(json!({ "error": kind, "message": message })),
    )
        .into_response()
}

/// Compares every byte whatever differs first.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn given_key(headers: &HeaderMap) -> Option<&str> {
    if let Some(k) = headers.get("x-api-key").and_then(|v| v.to_str().ok()) {
        return Some(k.trim());
    }
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            // The scheme is case-insensitive (RFC 9110, 11.1).
            let (scheme, key) = v.trim_start().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then_some(key)
        })
        .map(str::trim)
}

/// A key given to the studio as its page gives its token: the
/// `x-studio-token` header, or, for a read (the page itself, its event
/// stream, which a browser opens without headers), `?token=` in the URL.
fn studio_key(request: &Request) -> Option<String> {
    if let Some(k) = request
        .headers()
        .get("x-studio-token")
        .and_then(|v| v.to_str().ok())
    {
        return Some(k.trim().to_owned());
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return None;
    }
    request
        .uri()
        .query()?
        .split('&')
        .find_map(|kv| kv.strip_prefix("token="))
        .and_then(crate::app::decode)
}

fn host_name(host: &str) -> &str {
    if host.starts_with('[') {
        return host
            .split_once(']')
            .map_or(host, |(h, _)| &host[..=h.len()]);
    }
    host.rsplit_once(':').map_or(host, |(h, _)| h)
}

impl Guard {
    fn allowed_origin(&self, origin: &str) -> bool {
        self.origins.iter().any(|o| o == origin)
    }

    /// Whether `path` is the studio's (its page, files or API).
    fn in_studio(&self, path: &str) -> bool {
        self.studio.as_deref().is_some_and(|base| {
            path.strip_prefix(base)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        })
    }

    /// Whether `path` is the studio's page or one of its files, which hold
    /// no data and which a browser loads without the page's token (its
    /// script and stylesheet are fetched by the page's own tags, and a
    /// reload finds the token in the tab's storage, not the URL): served
    /// without a key. The studio's API still needs one.
    fn studio_file(&self, path: &str) -> bool {
        self.studio.as_deref().is_some_and(|base| {
            path.strip_prefix(base)
                .is_some_and(|rest| matches!(rest, "" | "/" | "/studio.js" | "/studio.css"))
        })
    }

    /// Whether a studio request from `origin` comes from a page of this
    /// very server (its studio page posting an answer): the origin names
    /// the host the request is addressed to, and that host is one the
    /// server answers to (a loopback server's names), or the server checks
    /// keys (which a page of another site does not have).
    fn same_origin(&self, origin: &str, host: &str) -> bool {
        let vouched = self.hosts.is_some() || !self.keys.is_empty();
        vouched
            && !host.is_empty()
            && [("http://", host), ("https://", host)]
                .iter()
                .any(|(scheme, h)| origin.strip_prefix(scheme) == Some(h))
    }

    fn cors_headers(origin: &HeaderValue, response: &mut Response) {
        let headers = response.headers_mut();
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
        headers.insert(header::VARY, HeaderValue::from_static("Origin"));
        headers.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static("content-location, location"),
        );
    }
}

/// The middleware: host, origin, then key and scope.
pub(crate) async fn check(
    State(guard): State<Arc<Guard>>,
    request: Request,
    next: Next,
) -> Response {
    if let Some(hosts) = &guard.hosts {
        let host = request
            .headers()
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        if !hosts
            .iter()
            .any(|h| h.eq_ignore_ascii_case(host_name(host)))
        {
            return refuse(
                StatusCode::MISDIRECTED_REQUEST,
                "wrong_host",
                format!(
                    "this server answers to {} only, not to host `{host}`",
                    hosts.join(", ")
                ),
            );
        }
    }
    let in_studio = guard.in_studio(request.uri().path());
    let origin = request.headers().get(header::ORIGIN).cloned();
    if let Some(origin) = &origin {
        let text = origin.to_str().unwrap_or_default();
        let host = request
            .headers()
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let allowed = guard.allowed_origin(text) || (in_studio && guard.same_origin(text, host));
        if !allowed {
            return refuse(
                StatusCode::FORBIDDEN,
                "origin_not_allowed",
                format!(
                    "requests from the web origin `{text}` are not allowed: list it with \
                     Server::cors_origin(..)"
                ),
            );
        }
        if request.method() == Method::OPTIONS {
            let mut response = StatusCode::NO_CONTENT.into_response();
            Guard::cors_headers(origin, &mut response);
            let headers = response.headers_mut();
            headers.insert(
                header::ACCESS_CONTROL_ALLOW_METHODS,
                HeaderValue::from_static("GET, POST, PUT, PATCH, DELETE, OPTIONS"),
            );
            headers.insert(
                header::ACCESS_CONTROL_ALLOW_HEADERS,
                HeaderValue::from_static("content-type, x-api-key, authorization, last-event-id"),
            );
            headers.insert(
                header::ACCESS_CONTROL_MAX_AGE,
                HeaderValue::from_static("600"),
            );
            return response;
        }
    }
    // A refusal of the key or its scope carries the CORS headers too, so
    // that a page of an allowed origin reads the JSON error (not a network
    // error).
    let mut response = match guard.refusal(&request) {
        None => next.run(request).await,
        Some(refused) => refused,
    };
    if let Some(origin) = &origin {
        Guard::cors_headers(origin, &mut response);
    }
    response
}

impl Guard {
    /// Checks the request's API key and its scope (when the server has
    /// keys): the refusal if they do not do, a 401 or a 403.
    fn refusal(&self, request: &Request) -> Option<Response> {
        let in_studio = self.in_studio(request.uri().path());
        let open = request.uri().path() == "/ok"
            || ((request.method() == Method::GET || request.method() == Method::HEAD)
                && self.studio_file(request.uri().path()));
        if !self.keys.is_empty() && !open {
            let from_studio = if in_studio { studio_key(request) } else { None };
            let Some(given) = given_key(request.headers())
                .map(str::to_owned)
                .or(from_studio)
            else {
                return Some(refuse(
                    StatusCode::UNAUTHORIZED,
                    "unauthorized",
                    if in_studio {
                        "this server needs an API key: open the studio at its URL with \
                         `?token=<key>`, or give the key in the `x-studio-token` or \
                         `x-api-key` header"
                            .into()
                    } else {
                        "this server needs an API key: give it in the `x-api-key` header or \
                         as `Authorization: Bearer <key>`"
                            .into()
                    },
                ));
            };
            // Every key is compared, whichever matches.
            let scope = self
                .keys
                .iter()
                .filter(|k| same(k.secret.as_bytes(), given.as_bytes()))
                .map(|k| k.scope)
                .fold(None, |best: Option<Scope>, s| {
                    Some(best.map_or(s, |b| b.max(s)))
                });
            let Some(scope) = scope else {
                return Some(refuse(
                    StatusCode::UNAUTHORIZED,
                    "unauthorized",
                    "the API key given is not one of this server's".into(),
                ));
            };
            let needed = Scope::needed(
                request.method(),
                request.uri().path(),
                request.uri().query(),
            );
            if scope < needed {
                return Some(refuse(
                    StatusCode::FORBIDDEN,
                    "forbidden",
                    format!(
                        "this key has scope `{}`; {} {}{} needs scope `{}`",
                        scope.name(),
                        request.method(),
                        request.uri().path(),
                        if cancels_on_disconnect(request.uri().path(), request.uri().query()) {
                            " with `cancel_on_disconnect=true` (which cancels the run)"
                        } else {
                            ""
                        },
                        needed.name()
                    ),
                ));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::{Scope, host_name};
    use axum::http::Method;

    #[test]
    fn each_request_needs_the_least_scope_that_does_it() {
        assert_eq!(
            Scope::needed(&Method::GET, "/threads/t/state", None),
            Scope::Read
        );
        assert_eq!(
            Scope::needed(&Method::POST, "/threads/search", None),
            Scope::Read
        );
        assert_eq!(
            Scope::needed(&Method::POST, "/threads/t/history", None),
            Scope::Read
        );
        assert_eq!(
            Scope::needed(&Method::POST, "/threads/t/runs/stream", None),
            Scope::Run
        );
        assert_eq!(
            Scope::needed(&Method::POST, "/threads/t/state", None),
            Scope::Run
        );
        assert_eq!(
            Scope::needed(&Method::DELETE, "/threads/t", None),
            Scope::Admin
        );
        assert_eq!(
            Scope::needed(&Method::PUT, "/store/items", None),
            Scope::Run
        );
        assert_eq!(
            Scope::needed(&Method::DELETE, "/store/items", None),
            Scope::Run
        );
        assert_eq!(
            Scope::needed(&Method::POST, "/store/items/search", None),
            Scope::Read
        );
        assert_eq!(
            Scope::needed(&Method::POST, "/store/namespaces", None),
            Scope::Read
        );
        // The Agent Protocol's own paths.
        assert_eq!(
            Scope::needed(&Method::POST, "/agents/search", None),
            Scope::Read
        );
        assert_eq!(
            Scope::needed(&Method::POST, "/runs/search", None),
            Scope::Read
        );
        assert_eq!(
            Scope::needed(&Method::GET, "/threads/t/history", None),
            Scope::Read
        );
        assert_eq!(
            Scope::needed(&Method::POST, "/threads/t/stream", None),
            Scope::Read
        );
        assert_eq!(
            Scope::needed(&Method::GET, "/threads/t/stream", None),
            Scope::Run
        );
        // A thread whose id reads like a search or a read path is changed
        // with the run scope, whatever its id.
        for id in ["history", "count", "search", "checkpoint", "namespaces"] {
            assert_eq!(
                Scope::needed(&Method::PATCH, &format!("/threads/{id}"), None),
                Scope::Run,
                "{id}"
            );
            assert_eq!(
                Scope::needed(&Method::POST, &format!("/threads/{id}/state"), None),
                Scope::Run,
                "{id}"
            );
        }
        assert_eq!(
            Scope::needed(&Method::PATCH, "/threads/t/state/checkpoint", None),
            Scope::Run
        );
        assert_eq!(
            Scope::needed(&Method::PUT, "/threads/search", None),
            Scope::Run
        );
        assert_eq!(
            Scope::needed(&Method::POST, "/runs/crons/search", None),
            Scope::Read
        );
        assert_eq!(
            Scope::needed(&Method::POST, "/runs/crons", None),
            Scope::Run
        );
        assert_eq!(
            Scope::needed(&Method::GET, "/threads/t/runs/r/stream", None),
            Scope::Read
        );
        assert_eq!(
            Scope::needed(&Method::POST, "/threads/t/commands", None),
            Scope::Run
        );
        assert_eq!(
            Scope::needed(&Method::PATCH, "/threads/t", None),
            Scope::Run
        );
        assert_eq!(
            Scope::needed(&Method::POST, "/runs/r/cancel", None),
            Scope::Run
        );
        assert_eq!(
            Scope::needed(&Method::DELETE, "/runs/r", None),
            Scope::Admin
        );
        // Joining a run's stream reads it, unless the join cancels the run
        // when the client hangs up.
        for path in ["/threads/t/runs/r/stream", "/runs/r/stream"] {
            for (query, scope) in [
                (None, Scope::Read),
                (Some("cancel_on_disconnect=false"), Scope::Read),
                (Some("cancel_on_disconnect=true"), Scope::Run),
                (Some("cancel_on_disconnect=1"), Scope::Run),
                (
                    Some("stream_mode=values&cancel_on_disconnect=True"),
                    Scope::Run,
                ),
                (Some("cancel_on_disconnect=%74rue"), Scope::Run),
                (
                    Some("cancel_on_disconnect=true&cancel_on_disconnect="),
                    Scope::Run,
                ),
            ] {
                assert_eq!(
                    Scope::needed(&Method::GET, path, query),
                    scope,
                    "{path}?{query:?}"
                );
            }
        }
    }

    #[test]
    fn host_names_lose_their_port() {
        assert_eq!(host_name("127.0.0.1:2024"), "127.0.0.1");
        assert_eq!(host_name("localhost"), "localhost");
        assert_eq!(host_name("[::1]:80"), "[::1]");
        assert_eq!(host_name("[::1]"), "[::1]");
    }
}
