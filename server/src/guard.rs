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
    /// Also create threads, start, cancel and resume runs, update state,
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

    /// The scope a request needs.
    fn needed(method: &Method, path: &str) -> Scope {
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
            return Scope::Read;
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
                HeaderValue::from_static("GET, POST, PATCH, DELETE, OPTIONS"),
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
    let open = request.uri().path() == "/ok"
        || ((request.method() == Method::GET || request.method() == Method::HEAD)
            && guard.studio_file(request.uri().path()));
    if !guard.keys.is_empty() && !open {
        let from_studio = if in_studio {
            studio_key(&request)
        } else {
            None
        };
        let Some(given) = given_key(request.headers())
            .map(str::to_owned)
            .or(from_studio)
        else {
            return refuse(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                if in_studio {
                    "this server needs an API key: open the studio at its URL with \
                     `?token=<key>`, or give the key in the `x-studio-token` or `x-api-key` \
                     header"
                        .into()
                } else {
                    "this server needs an API key: give it in the `x-api-key` header or as \
                     `Authorization: Bearer <key>`"
                        .into()
                },
            );
        };
        // Every key is compared, whichever matches.
        let scope = guard
            .keys
            .iter()
            .filter(|k| same(k.secret.as_bytes(), given.as_bytes()))
            .map(|k| k.scope)
            .fold(None, |best: Option<Scope>, s| {
                Some(best.map_or(s, |b| b.max(s)))
            });
        let Some(scope) = scope else {
            return refuse(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "the API key given is not one of this server's".into(),
            );
        };
        let needed = Scope::needed(request.method(), request.uri().path());
        if scope < needed {
            return refuse(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!(
                    "this key has scope `{}`; {} {} needs scope `{}`",
                    scope.name(),
                    request.method(),
                    request.uri().path(),
                    needed.name()
                ),
            );
        }
    }
    let mut response = next.run(request).await;
    if let Some(origin) = &origin {
        Guard::cors_headers(origin, &mut response);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::{Scope, host_name};
    use axum::http::Method;

    #[test]
    fn each_request_needs_the_least_scope_that_does_it() {
        assert_eq!(Scope::needed(&Method::GET, "/threads/t/state"), Scope::Read);
        assert_eq!(Scope::needed(&Method::POST, "/threads/search"), Scope::Read);
        assert_eq!(
            Scope::needed(&Method::POST, "/threads/t/history"),
            Scope::Read
        );
        assert_eq!(
            Scope::needed(&Method::POST, "/threads/t/runs/stream"),
            Scope::Run
        );
        assert_eq!(Scope::needed(&Method::POST, "/threads/t/state"), Scope::Run);
        assert_eq!(Scope::needed(&Method::DELETE, "/threads/t"), Scope::Admin);
        assert_eq!(Scope::needed(&Method::PUT, "/store/items"), Scope::Run);
        assert_eq!(Scope::needed(&Method::DELETE, "/store/items"), Scope::Run);
        assert_eq!(
            Scope::needed(&Method::POST, "/store/items/search"),
            Scope::Read
        );
        assert_eq!(
            Scope::needed(&Method::POST, "/store/namespaces"),
            Scope::Read
        );
        // The Agent Protocol's own paths.
        assert_eq!(Scope::needed(&Method::POST, "/agents/search"), Scope::Read);
        assert_eq!(Scope::needed(&Method::POST, "/runs/search"), Scope::Read);
        assert_eq!(
            Scope::needed(&Method::GET, "/threads/t/history"),
            Scope::Read
        );
        assert_eq!(
            Scope::needed(&Method::POST, "/threads/t/stream"),
            Scope::Read
        );
        assert_eq!(Scope::needed(&Method::GET, "/threads/t/stream"), Scope::Run);
        // A thread whose id reads like a search or a read path is changed
        // with the run scope, whatever its id.
        for id in ["history", "count", "search", "checkpoint", "namespaces"] {
            assert_eq!(
                Scope::needed(&Method::PATCH, &format!("/threads/{id}")),
                Scope::Run,
                "{id}"
            );
            assert_eq!(
                Scope::needed(&Method::POST, &format!("/threads/{id}/state")),
                Scope::Run,
                "{id}"
            );
        }
        assert_eq!(
            Scope::needed(&Method::PATCH, "/threads/t/state/checkpoint"),
            Scope::Run
        );
        assert_eq!(Scope::needed(&Method::PUT, "/threads/search"), Scope::Run);
        assert_eq!(
            Scope::needed(&Method::POST, "/runs/crons/search"),
            Scope::Read
        );
        assert_eq!(Scope::needed(&Method::POST, "/runs/crons"), Scope::Run);
        assert_eq!(
            Scope::needed(&Method::GET, "/threads/t/runs/r/stream"),
            Scope::Read
        );
        assert_eq!(
            Scope::needed(&Method::POST, "/threads/t/commands"),
            Scope::Run
        );
        assert_eq!(Scope::needed(&Method::PATCH, "/threads/t"), Scope::Run);
        assert_eq!(Scope::needed(&Method::POST, "/runs/r/cancel"), Scope::Run);
        assert_eq!(Scope::needed(&Method::DELETE, "/runs/r"), Scope::Admin);
    }

    #[test]
    fn host_names_lose_their_port() {
        assert_eq!(host_name("127.0.0.1:2024"), "127.0.0.1");
        assert_eq!(host_name("localhost"), "localhost");
        assert_eq!(host_name("[::1]:80"), "[::1]");
        assert_eq!(host_name("[::1]"), "[::1]");
    }
}
