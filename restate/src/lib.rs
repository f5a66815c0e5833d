//! harness on [Restate](https://restate.dev), the durable-execution engine.
//!
//! - [`agent`]: harness agents served as a Restate virtual object
//!   ([`Durable`], [`AgentObject`]), one session per key, each effect of a
//!   step journaled with `ctx.run` through the core's effect journal, the
//!   session in the object's state; and [`AgentClient`], which calls it
//!   through the ingress (run, resume, stop a run that waits for an answer
//!   no one gives, read a session).
//! - [`Admin`] and [`Ingress`], clients of a Restate server's admin API
//!   (health, registering a deployment) and ingress (calling a handler and
//!   waiting for its answer, sending one and attaching to it later), with
//!   typed errors that say what the server answered. Credentials in a base
//!   URL's userinfo go as basic auth and are never shown (not in errors,
//!   not in `Debug`), nor are the values of a query or a fragment written
//!   in a base (which is refused); an answer is read up to
//!   [`MAX_ANSWER_BYTES`], and an error quotes at most [`QUOTED_BYTES`] of
//!   it (and of a URL: a longer one is shown cut); a virtual object's key
//!   is always one path segment of the URL (percent-encoded). An agent's
//!   session id takes at most [`MAX_SESSION_ID_BYTES`] as sent: a longer
//!   one is refused before anything is sent.
//! - [`RestateSessionReader`]: the sessions of an agent's virtual object,
//!   read from the admin API as a `SessionStore` (for the studio and
//!   `harness sessions`). A name the server has no virtual object for is a
//!   [`RestateError::NoSuchObject`] naming the object and those the server
//!   has, never an object without sessions (checked before the first read,
//!   and kept once found). A listing reads the sessions' ids, and `load`
//!   the head alone, by its partition key, the heads of listed sessions a
//!   batch at a time ([`HEADS_PER_QUERY`]).
//! - The `restate-probe` binary: a bare Restate virtual object written with
//!   the official Rust SDK, whose handler makes journaled effects that
//!   append to a file, so that a test counts how often each effect ran: the
//!   engine's floor.
//!
//! The tests (`tests/it/`) run against the real server (`scripts/restate`
//! starts it): an agent's effects run once across a SIGKILL of the service
//! and across a restart of the Restate server, an interrupt is answered from another
//! process, a wrongly shaped answer is refused and the session still waits,
//! two runs on one session go one after the other, a run that waits for an
//! answer is stopped (its session then takes a new run, and the late answer
//! is refused), a reader of an object the server does not have is refused
//! naming those it has.
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
    AgentClient, AgentObject, Answer, Durable, MAX_EFFECT_BYTES, NotDurable, Reply, RestateEffects,
    RestateSessions,
};
pub use sessions::{
    BY_REFERENCE_BYTES, HEAD_KEPT_FOR, HEADS_PER_QUERY, OBJECT, RestateSessionReader, Snapshot,
};

/// What [`agent_object!`] expands to refers to; not part of the API.
#[cfg(feature = "service")]
#[doc(hidden)]
pub mod __private {
    pub use serde_json::Value;
}

/// What went wrong talking to a Restate server.
///
/// No message holds the credentials of a base URL's userinfo (they go as
/// basic auth, apart from the URL shown), nor the values of a base URL's
/// query or its fragment (a base has neither: one written with them is
/// refused, and shown as `?name=…`, `#…`), nor more than the first
/// [`QUOTED_BYTES`] of what the server answered. A URL longer than
/// [`QUOTED_BYTES`] (a call whose key is long) is shown cut: its start and
/// its end (the handler), and how long it was; the `url` field holds it
/// whole.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RestateError {
    /// The server could not be reached, or did not answer in time. The
    /// message says which (`connection refused`, `no answer within …`:
    /// the invocation may still be running, Restate does not stop it when
    /// its caller gives up), then the causes of the HTTP client's error.
    #[error("Restate at {}: {message}", shown_url(url))]
    Transport {
        /// What was asked.
        url: String,
        /// What failed.
        message: String,
    },
    /// The server answered with an error status.
    #[error("Restate at {} answered {status}: {body}", shown_url(url))]
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
    #[error("Restate at {}: unexpected answer: {message}", shown_url(url))]
    Answer {
        /// What was asked.
        url: String,
        /// What is wrong with it.
        message: String,
    },
    /// The server's answer is larger than this client reads
    /// ([`MAX_ANSWER_BYTES`]); nothing past the limit was read.
    #[error(
        "Restate at {}: the answer is larger than the {limit} bytes this client reads",
        shown_url(url)
    )]
    TooLarge {
        /// What was asked.
        url: String,
        /// The limit, in bytes.
        limit: usize,
    },
    /// What the caller gave cannot go into a request: a base URL that is
    /// not one ([`BaseUrl`]), a virtual object's key that is no path
    /// segment (empty, `.` or `..`), an invocation id that is not one, a
    /// run's input that is no JSON object. Nothing was sent.
    #[error("Restate at {}: {message}", shown_url(url))]
    Input {
        /// The server (or the request) it was for.
        url: String,
        /// What is wrong with it.
        message: String,
    },
    /// The server has registered no virtual object of the name asked for
    /// (a [`RestateSessionReader`] of an object no deployment serves: a
    /// typo in its name, say, which would otherwise read as an object
    /// without sessions). The message names the object asked for and those
    /// the server has (at most [`QUOTED_BYTES`] of their list).
    #[error(
        "Restate at {}: no virtual object `{}` is registered (its virtual objects: {})",
        shown_url(url),
        excerpt(object),
        listed(objects)
    )]
    NoSuchObject {
        /// The admin API asked.
        url: String,
        /// The object asked for.
        object: String,
        /// The virtual objects the server has, sorted.
        objects: Vec<String>,
    },
    /// A session id longer than a call may carry: more than
    /// [`MAX_SESSION_ID_BYTES`] once percent-encoded as the URL's path
    /// segment. Nothing was sent (Restate would take the call, and then
    /// retry its invocation without end: the service's HTTP server refuses
    /// a request whose headers are that large, and the key would wait
    /// behind it).
    #[error(
        "Restate at {}: the session id `{start}…` is {chars} characters, {bytes} bytes as \
         sent (percent-encoded in the URL), more than the {limit} bytes a session id may \
         take: nothing was sent",
        shown_url(url)
    )]
    SessionIdTooLong {
        /// The virtual object called (`{ingress}/{object}`).
        url: String,
        /// The id's first characters, to tell which it is.
        start: String,
        /// Its length in characters.
        chars: usize,
        /// Its length in bytes as sent (percent-encoded).
        bytes: usize,
        /// The bound, [`MAX_SESSION_ID_BYTES`].
        limit: usize,
    },
}

/// `url` as a message shows it: whole up to [`QUOTED_BYTES`], else its
/// start and its end (the handler a call's URL ends with) around `…`, and
/// how long it was.
fn shown_url(url: &str) -> String {
    if url.len() <= QUOTED_BYTES {
        return url.to_owned();
    }
    let mut head = QUOTED_BYTES / 2;
    while !url.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = url.len() - QUOTED_BYTES / 4;
    while !url.is_char_boundary(tail) {
        tail += 1;
    }
    format!(
        "{}…{} ({} bytes in all)",
        &url[..head],
        &url[tail..],
        url.len()
    )
}

/// The most bytes a session id may take as sent: percent-encoded as one
/// path segment of a call's URL, a byte that is a letter, a digit, `-`,
/// `.`, `_` or `~` takes one, any other three (`/` is `%2F`; `é`, two
/// bytes in UTF-8, takes six). So an id of those ASCII characters may be
/// 4 096 characters long, one of other characters a third of its UTF-8
/// bytes.
///
/// [`AgentClient`] refuses a longer id with
/// [`RestateError::SessionIdTooLong`] before it sends anything. Restate
/// takes a call with a longer key, but past some 15 000 bytes the
/// service's HTTP server (the SDK's) answers Restate's request for the
/// invocation 431 (Request Header Fields Too Large), which Restate retries
/// without end (`RT0012`), holding the key's later calls behind it, while
/// the caller sees only that no answer came in time. An id of 15 000
/// ASCII characters was found to work, one of 16 000 not: the bound keeps
/// well under that, however the id's bytes are encoded on the way.
pub const MAX_SESSION_ID_BYTES: usize = 4096;

/// The most bytes an idempotency key may take ([`Ingress::send`] and the
/// agent client's `submit` calls): 1 KiB. A key goes in a header, as
/// visible ASCII characters (`!` to `~`, no space), at least one.
pub const MAX_IDEMPOTENCY_KEY_BYTES: usize = 1024;

/// Why `key` cannot be an idempotency key, if it cannot: empty, longer
/// than [`MAX_IDEMPOTENCY_KEY_BYTES`], or holding a character that is not
/// visible ASCII (a line break fails in the HTTP client, an `é` is sent
/// and refused by the server with a message that does not name the key,
/// a space at either end would be trimmed away).
fn bad_idempotency_key(key: &str) -> Option<String> {
    let why = if key.is_empty() {
        "it is empty".to_owned()
    } else if key.len() > MAX_IDEMPOTENCY_KEY_BYTES {
        format!(
            "it is {} bytes, more than the {MAX_IDEMPOTENCY_KEY_BYTES} a key may take",
            key.len()
        )
    } else {
        let c = key.chars().find(|c| !c.is_ascii_graphic())?;
        format!("it holds {c:?}")
    };
    let start: String = key.chars().take(64).collect();
    let shown = if start.len() < key.len() {
        format!("{start:?}… ({} bytes in all)", key.len())
    } else {
        format!("{key:?}")
    };
    Some(format!(
        "the idempotency key {shown} cannot be sent: {why}; a key goes in a header, as 1 to \
         {MAX_IDEMPOTENCY_KEY_BYTES} visible ASCII characters ('!' to '~', no space): nothing \
         was sent"
    ))
}

/// How many bytes `text` takes as one path segment ([`path_segment`]).
#[cfg_attr(not(feature = "service"), allow(dead_code))]
pub(crate) fn segment_len(text: &str) -> usize {
    text.bytes()
        .map(|b| if unreserved(b) { 1 } else { 3 })
        .sum()
}

/// A byte a path segment holds as it is.
fn unreserved(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~')
}

/// `names` for a message: each quoted, at most [`QUOTED_BYTES`] in all;
/// `none` when there are none.
fn listed(names: &[String]) -> String {
    if names.is_empty() {
        return "none".to_owned();
    }
    excerpt(
        &names
            .iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", "),
    )
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
    /// `base`, read as [`BaseUrl::parse`] reads it; its userinfo,
    /// `user[:password]`, percent-decoded.
    fn parse(base: &str) -> Result<Self, RestateError> {
        let url = BaseUrl::parse(base)?;
        let port = url.port.map(|p| format!(":{p}")).unwrap_or_default();
        Ok(Server {
            base: format!(
                "{}://{}{port}{}",
                url.scheme.to_ascii_lowercase(),
                url.host,
                url.path
            ),
            credentials: url.userinfo.map(|userinfo| {
                let (user, password) = match userinfo.split_once(':') {
                    Some((user, password)) => (user, Some(password)),
                    None => (userinfo, None),
                };
                let decoded = |text: &str| harness::secrets::percent_decoded(text, false);
                (decoded(user), password.map(decoded))
            }),
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

/// A server's base URL, `http[s]://[userinfo@]host[:port][/path]`, as
/// [`Admin::new`] and [`Ingress::new`] read it (and `harness sessions
/// --store restate://…`), checked: the scheme is `http` or `https`, there
/// is a host (a name, an IPv4 address or a bracketed IPv6 one), a port is
/// a number (0 to 65535), and there is no query or fragment (paths are
/// added to a base).
///
/// The userinfo ends at the last `@` of the authority (which ends at the
/// first `/`, `?` or `#`), so that an `@` in the path stays in the path.
/// A password holding an unencoded `/`, `?` or `#` (`ops:pa/ss@host`) is
/// still read as one when the text before that character cannot be a
/// host and port (`ops:pa` cannot: `pa` is no port): the userinfo then
/// ends at the last `@`. A base that reads both ways
/// (`http://host:8080/a@b`: a path `/a@b`, or the password `8080/a` of
/// the user `host` at the host `b`) is refused: write the path's `@` as
/// `%40`, or the password's `/` as `%2F`.
///
/// No error quotes what comes before the text's last `@`: a userinfo,
/// whichever way it is read, ends there.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct BaseUrl<'a> {
    /// `http` or `https` (in any case), as written.
    pub scheme: &'a str,
    /// `user[:password]` as written (percent-encoded), if any: the
    /// credentials, never to be shown.
    pub userinfo: Option<&'a str>,
    /// The host: a name, an IPv4 address, or an IPv6 address in brackets.
    pub host: &'a str,
    /// The port, when one is written.
    pub port: Option<u16>,
    /// The path: empty or starting with `/`, without trailing `/`.
    pub path: &'a str,
}

impl std::fmt::Debug for BaseUrl<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BaseUrl")
            .field("scheme", &self.scheme)
            .field("userinfo", &self.userinfo.map(|_| "[hidden]"))
            .field("host", &self.host)
            .field("port", &self.port)
            .field("path", &self.path)
            .finish()
    }
}

impl<'a> BaseUrl<'a> {
    /// `url` checked and split; a text that is no base URL is a
    /// [`RestateError::Input`] saying what is wrong with it (no scheme,
    /// another scheme, no host, a port that is no number, …), quoting
    /// nothing of a userinfo.
    pub fn parse(url: &'a str) -> Result<Self, RestateError> {
        let bad = |why: String| RestateError::Input {
            url: shown_base(url),
            message: format!("not a base URL (`http[s]://host[:port][/path]`): {why}"),
        };
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(bad(if url.trim().is_empty() {
                "it is empty".to_owned()
            } else if url.contains('@') || url.contains(char::is_whitespace) {
                "it has no scheme: write `http://` (or `https://`) before the host, as in \
                 `http://127.0.0.1:8080`"
                    .to_owned()
            } else {
                format!(
                    "it has no scheme: write `http://` (or `https://`) before the host: \
                     `http://{}`",
                    excerpt(&without_query_values(url))
                )
            }));
        };
        if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
            let named = if scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
            {
                format!("the scheme `{scheme}`")
            } else {
                "its scheme".to_owned()
            };
            return Err(bad(format!("{named} is not `http` or `https`")));
        }
        let (userinfo, authority, path) = split_userinfo(rest).map_err(bad)?;
        let (host, port) = host_and_port(authority).map_err(bad)?;
        if path.contains(['?', '#']) {
            return Err(bad(
                "a base has no query or fragment (`?`, `#`): paths are added to it".to_owned(),
            ));
        }
        Ok(BaseUrl {
            scheme,
            userinfo,
            host,
            port,
            path: path.trim_end_matches('/'),
        })
    }
}

/// `url` as an error shows it: nothing before its last `@` (a userinfo,
/// however it is read, ends there), no value of its query nor its
/// fragment ([`without_query_values`]), at most [`QUOTED_BYTES`] of it.
fn shown_base(url: &str) -> String {
    if url.trim().is_empty() {
        return format!("{url:?}");
    }
    let Some(at) = url.rfind('@') else {
        return excerpt(&without_query_values(url));
    };
    let after = excerpt(&without_query_values(&url[at + 1..]));
    match url[..at].split_once("://") {
        Some((scheme, _)) if scheme.chars().all(|c| c.is_ascii_alphanumeric()) => {
            format!("{scheme}://…@{after}")
        }
        _ => format!("…@{after}"),
    }
}

/// `url` with the values of its query and its fragment hidden: a
/// parameter `name=value` shown as `name=…`, one without `=` as `…`, the
/// fragment as `#…` (a token in a query is as secret as a password).
fn without_query_values(url: &str) -> String {
    let (before, fragment) = match url.split_once('#') {
        Some((before, _)) => (before, "#…"),
        None => (url, ""),
    };
    let shown = match before.split_once('?') {
        None => before.to_owned(),
        Some((path, query)) => {
            let parameters: Vec<&str> = query
                .split('&')
                .map(|p| match p.split_once('=') {
                    Some((name, _)) => name,
                    None => "",
                })
                .collect();
            let hidden: Vec<String> = parameters
                .iter()
                .map(|name| {
                    if name.is_empty() {
                        "…".to_owned()
                    } else {
                        format!("{name}=…")
                    }
                })
                .collect();
            format!("{path}?{}", hidden.join("&"))
        }
    };
    format!("{shown}{fragment}")
}

/// `rest` (a URL after its `scheme://`) as its userinfo, its authority
/// (`host[:port]`) and the rest (path, query, fragment); see
/// [`BaseUrl`] for where the userinfo ends. An error quotes nothing.
fn split_userinfo(rest: &str) -> Result<(Option<&str>, &str, &str), String> {
    let end = |s: &str| s.find(['/', '?', '#']).unwrap_or(s.len());
    let authority_end = end(rest);
    let (authority, tail) = rest.split_at(authority_end);
    let strict = match authority.rfind('@') {
        Some(at) => (Some(&rest[..at]), &authority[at + 1..], tail),
        None => (None, authority, tail),
    };
    let Some(at) = rest.rfind('@').filter(|at| *at > authority_end) else {
        return Ok(strict);
    };
    let after = &rest[at + 1..];
    let (host, tail) = after.split_at(end(after));
    let lenient = (Some(&rest[..at]), host, tail);
    match (
        host_and_port(strict.1).is_ok(),
        host_and_port(lenient.1).is_ok(),
    ) {
        (true, true) => Err(
            "it has an `@` after the host's `/`, `?` or `#`, which is either in its path or in a \
             password: write a path's `@` as `%40`, or a password's `/`, `?`, `#` as `%2F`, \
             `%3F`, `%23`"
                .to_owned(),
        ),
        (true, false) => Ok(strict),
        (false, _) => Ok(lenient),
    }
}

/// `authority` (`host[:port]`, no userinfo) checked: a host (a name, an
/// IPv4 address, or an IPv6 address in brackets) and a port that is a
/// number.
fn host_and_port(authority: &str) -> Result<(&str, Option<u16>), String> {
    let (host, port) = if let Some(inner) = authority.strip_prefix('[') {
        let Some((address, after)) = inner.split_once(']') else {
            return Err(format!(
                "the IPv6 address `{}` has no closing `]`",
                excerpt(authority)
            ));
        };
        if address.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(format!("`[{}]` is not an IPv6 address", excerpt(address)));
        }
        let port = match after {
            "" => None,
            after => match after.strip_prefix(':') {
                Some(port) => Some(port),
                None => {
                    return Err(format!(
                        "`{}` follows the IPv6 address where a `:PORT` may",
                        excerpt(after)
                    ));
                }
            },
        };
        (&authority[..address.len() + 2], port)
    } else {
        match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    let ipv6_hint = if port.is_some_and(|p| p.contains(':')) {
        " (an IPv6 address goes in brackets: `http://[::1]:8080`)"
    } else {
        ""
    };
    if host.is_empty() {
        return Err(format!("it has no host{ipv6_hint}"));
    }
    let bad_char = |c: &char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'));
    if let Some(c) = host
        .chars()
        .find(bad_char)
        .filter(|_| !host.starts_with('['))
    {
        return Err(format!(
            "the host `{}` holds {c:?}, which no host name has",
            excerpt(host)
        ));
    }
    let port = match port {
        None => None,
        Some("") => return Err(format!("no port follows the `:` after `{host}`")),
        Some(port) => Some(
            port.parse::<u16>()
                .ok()
                .filter(|_| port.bytes().all(|b| b.is_ascii_digit()))
                .ok_or_else(|| {
                    format!(
                        "the port `{}` is not a number from 0 to 65535{ipv6_hint}",
                        excerpt(port)
                    )
                })?,
        ),
    };
    Ok((host, port))
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
        if unreserved(byte) {
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

/// How long a client waits for an answer, and what a caller should know
/// when none came in time.
#[derive(Clone, Copy, Debug)]
struct Wait {
    /// The client's timeout.
    timeout: Duration,
    /// Said after "no answer within {timeout}".
    on_timeout: &'static str,
}

/// What a caller of the admin API is told of a timeout.
const ADMIN_TIMEOUT: &str = "";
/// What a caller of [`Ingress::call`] is told of a timeout (the agent
/// client says more: see `AgentClient`'s calls).
const CALL_TIMEOUT: &str = "; the invocation may still be running: Restate goes on with it (to \
     wait for it without a call held open, send it (`Ingress::send`) and pick it up with \
     `attach`; an agent's run: `submit`, then `outcome`)";
/// What a caller of [`Ingress::send`] is told of a timeout.
const SEND_TIMEOUT: &str = "; the invocation may or may not have been accepted: send it again \
     with the same idempotency key to be sure it runs once";
/// What a caller of [`Ingress::attach`] is told of a timeout.
const ATTACH_TIMEOUT: &str =
    "; the invocation may still be running: `outcome` (attach) again picks it up";

/// A transport error in words: reqwest's own (without the URL, which
/// the error shows already), then each cause of its `source()` chain that
/// it does not already say, first of all whether no answer came in time
/// or the connection was refused.
fn transport_message(e: reqwest::Error, wait: Wait) -> String {
    let timed_out = e.is_timeout();
    let connect = e.is_connect();
    let e = e.without_url();
    let mut causes = e.to_string();
    let mut refused = false;
    let mut source = std::error::Error::source(&e);
    while let Some(cause) = source {
        refused |= cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused);
        let text = cause.to_string();
        if !causes.contains(&text) {
            causes.push_str(": ");
            causes.push_str(&text);
        }
        source = cause.source();
    }
    refused |= causes.to_ascii_lowercase().contains("connection refused");
    if timed_out {
        format!(
            "no answer within {:?}{} ({causes})",
            wait.timeout, wait.on_timeout
        )
    } else if refused {
        format!(
            "connection refused: nothing listens there (is the server up, and is this its \
             port?) ({causes})"
        )
    } else if connect {
        format!("cannot connect: {causes}")
    } else {
        causes
    }
}

async fn send(
    request: reqwest::RequestBuilder,
    url: &str,
    wait: Wait,
) -> Result<String, RestateError> {
    let transport = |e: reqwest::Error| RestateError::Transport {
        url: url.to_owned(),
        message: transport_message(e, wait),
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

/// How long the admin client waits for an answer.
const ADMIN_WAIT: Wait = Wait {
    timeout: Duration::from_secs(30),
    on_timeout: ADMIN_TIMEOUT,
};

impl Admin {
    /// The admin API at `base` (no trailing slash needed). Credentials in
    /// its userinfo (`http://user:password@host:9070`, for a proxy in front
    /// of the server) are sent as basic auth and never shown: not in
    /// errors, not in `Debug`.
    ///
    /// A `base` that is no `http[s]://host[:port][/path]` URL
    /// ([`BaseUrl`]: no scheme, another scheme, no host, a port that is no
    /// number, …) is a [`RestateError::Input`] saying what is wrong with
    /// it; nothing is sent. The port is the URL's (80 for `http`) when
    /// none is written: write the admin API's (9070 by default).
    pub fn new(base: impl Into<String>) -> Result<Self, RestateError> {
        Ok(Self {
            server: Server::parse(&base.into())?,
            http: client(ADMIN_WAIT.timeout)?,
        })
    }

    /// The admin API's URL as shown, without its credentials.
    pub fn base(&self) -> &str {
        &self.server.base
    }

    /// Whether the server says it is healthy.
    pub async fn healthy(&self) -> bool {
        let url = format!("{}/health", self.server.base);
        send(self.server.auth(self.http.get(&url)), &url, ADMIN_WAIT)
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
            ADMIN_WAIT,
        )
        .await?;
        let answer = json(&text, &url)?;
        let services = services_of(&answer, &url)?;
        Ok(services
            .iter()
            .filter_map(|s| s["name"].as_str().map(str::to_owned))
            .collect())
    }

    /// The names of the virtual objects the server has registered (an
    /// agent's, served with `agent_object!` or as `HarnessAgent`, is one), from
    /// its services list, sorted.
    pub async fn virtual_objects(&self) -> Result<Vec<String>, RestateError> {
        let url = format!("{}/services", self.server.base);
        let text = send(
            self.server
                .auth(self.http.get(&url))
                .header("accept", "application/json"),
            &url,
            ADMIN_WAIT,
        )
        .await?;
        let answer = json(&text, &url)?;
        let services = services_of(&answer, &url)?;
        let mut names: Vec<String> = services
            .iter()
            .filter(|s| s["ty"].as_str() == Some("VirtualObject"))
            .filter_map(|s| s["name"].as_str().map(str::to_owned))
            .collect();
        names.sort();
        Ok(names)
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
            ADMIN_WAIT,
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
    /// it (or no longer keeps it). An `id` that is not an invocation id
    /// (`inv_1…`, 38 characters) is a [`RestateError::Input`], and nothing
    /// is sent. When its last attempt diverged from its journal
    /// ([`Invocation::divergence`]), the journal is read too, for the call
    /// it holds where the replay diverged ([`Invocation::journaled_call`]).
    pub async fn invocation(&self, id: &str) -> Result<Option<Invocation>, RestateError> {
        let id = invocation_id(id, &self.server.base)?;
        let rows = match self
            .query(&format!(
                "SELECT id, status, retry_count, last_failure, last_failure_error_code, \
                 last_failure_related_command_index, last_failure_related_command_name, \
                 last_failure_related_command_type FROM sys_invocation WHERE id = '{id}'"
            ))
            .await
        {
            // The server cannot read the id as one of its own (another
            // codec than this client checks): it knows no such invocation.
            Err(RestateError::Status { body, .. }) if body.contains("non valid invocation id") => {
                return Ok(None);
            }
            rows => rows?,
        };
        let Some(row) = rows.into_iter().next() else {
            return Ok(None);
        };
        // A call is shown by its name, or by its type when it has none.
        let call = |name: &Value, ty: &Value| {
            name.as_str()
                .filter(|n| !n.is_empty())
                .or_else(|| ty.as_str().filter(|t| !t.is_empty()))
                .map(str::to_owned)
        };
        let mut invocation = Invocation {
            id: id.to_owned(),
            status: row["status"].as_str().unwrap_or_default().to_owned(),
            retry_count: row["retry_count"].as_u64().unwrap_or(0),
            last_failure: row["last_failure"].as_str().map(str::to_owned),
            last_failure_code: row["last_failure_error_code"].as_str().map(str::to_owned),
            failed_call: call(
                &row["last_failure_related_command_name"],
                &row["last_failure_related_command_type"],
            ),
            journaled_call: None,
        };
        if let (Some(_), Some(index)) = (
            invocation.divergence(),
            row["last_failure_related_command_index"].as_u64(),
        ) {
            // The journal's commands in order (its notifications left
            // out): the index Restate gives counts commands only. Told
            // when it reads; the invocation is told either way.
            let journaled = self
                .query(&format!(
                    "SELECT name, entry_type FROM sys_journal WHERE id = '{id}' \
                     AND entry_type LIKE 'Command:%' ORDER BY index LIMIT 1 OFFSET {index}"
                ))
                .await
                .unwrap_or_default();
            invocation.journaled_call = journaled.first().and_then(|r| {
                let ty = r["entry_type"]
                    .as_str()
                    .map(|t| Value::from(t.trim_start_matches("Command:").trim()));
                call(&r["name"], &ty.unwrap_or(Value::Null))
            });
        }
        Ok(Some(invocation))
    }

    /// Cancels the invocation `id`: its handler sees a terminal error at
    /// its next journaled operation. A harness run sees it at its next
    /// effect, or, past its last effect, at the save of its session when
    /// that save is journaled: either way the run ends failed, saying it
    /// was cancelled, and its session is saved; a cancellation that comes
    /// after a run's last journaled operation leaves it as it ends (see the
    /// [`agent`] module's docs, **Stop**).
    /// An `id` that is not an invocation id is a [`RestateError::Input`];
    /// one the server does not know, its 404 ([`RestateError::Status`]).
    pub async fn cancel(&self, id: &str) -> Result<(), RestateError> {
        self.invocation_op(id, "cancel").await
    }

    /// Kills the invocation `id`: it ends at once, without its handler
    /// running again (an invocation whose replay diverges, for one).
    ///
    /// A harness agent's run killed so (see the [`agent`] module's docs,
    /// **Divergence**) is not saved: its session keeps what it held before
    /// the run (a new session has none: [`AgentClient::session`] answers
    /// `None`), for the run's state writes are its invocation's, dropped
    /// with it. The effects it ran are not undone. The next run on the
    /// session starts afresh from that last saved state, at the start
    /// step, and runs its effects anew (the killed invocation's journal is
    /// gone with it). Its caller, waiting on it (`outcome`), gets a
    /// [`RestateError::Status`] 409 `killed`.
    pub async fn kill(&self, id: &str) -> Result<(), RestateError> {
        self.invocation_op(id, "kill").await
    }

    async fn invocation_op(&self, id: &str, op: &str) -> Result<(), RestateError> {
        let id = invocation_id(id, &self.server.base)?;
        let url = format!("{}/invocations/{id}/{op}", self.server.base);
        send(self.server.auth(self.http.patch(&url)), &url, ADMIN_WAIT)
            .await
            .map(drop)
    }
}

/// An invocation id as the server writes them, checked before it goes into
/// a URL or a query: `inv_`, the codec version `1`, then 33 base62 digits
/// (`0-9a-zA-Z`): 11 of the partition key (a `u64`) and 22 of the
/// invocation's UUID (a `u128`), each at most its type's largest value. Any
/// other text is a [`RestateError::Input`] saying what is wrong with it
/// (quoting at most [`QUOTED_BYTES`] of it), and nothing is sent.
fn invocation_id<'a>(id: &'a str, base: &str) -> Result<&'a str, RestateError> {
    let bad = |why: &str| RestateError::Input {
        url: base.to_owned(),
        message: format!(
            "{:?} is not an invocation id (`inv_1` and 33 letters and digits, as \
             `inv_10jbAz9k9FrW2zeIOlzyPEh5SbPGq9ky7n`): {why}",
            excerpt(id)
        ),
    };
    let Some(digits) = id.strip_prefix("inv_") else {
        return Err(bad("it does not start with `inv_`"));
    };
    if let Some(c) = digits.chars().find(|c| !c.is_ascii_alphanumeric()) {
        return Err(bad(&format!("it holds {c:?}")));
    }
    if digits.len() != 34 {
        return Err(bad(&format!(
            "it has {} digits after `inv_`, not 34",
            digits.len()
        )));
    }
    if !digits.starts_with('1') {
        return Err(bad("its codec version (the first digit) is not `1`"));
    }
    let (key, uuid) = digits[1..].split_at(11);
    if base62(key).is_none_or(|n| n > u128::from(u64::MAX)) || base62(uuid).is_none() {
        return Err(bad("its digits are larger than an invocation id holds"));
    }
    Ok(id)
}

/// `digits` (`0-9a-zA-Z`, the most significant first) as a number, or
/// `None` past `u128::MAX`.
fn base62(digits: &str) -> Option<u128> {
    digits.bytes().try_fold(0_u128, |n, b| {
        let digit = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'z' => b - b'a' + 10,
            b'A'..=b'Z' => b - b'A' + 36,
            _ => return None,
        };
        n.checked_mul(62)?.checked_add(u128::from(digit))
    })
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
    /// The call that failure came at, as the failed attempt made it: its
    /// name (an effect's, `{step}#{visit}.{attempt}:{key}`; a round's;
    /// `save session`), or its type when it has none (`SetState`), as
    /// Restate reports it.
    pub failed_call: Option<String>,
    /// For a [divergence](Self::divergence): the call the journal holds
    /// where the replay diverged, by its name or, when it has none, its
    /// type (read from the journal by [`Admin::invocation`]).
    pub journaled_call: Option<String>,
}

/// Restate's code for a journal mismatch (the SDK's `570`): a replay that
/// did not make the calls its journal holds.
pub const JOURNAL_MISMATCH: &str = "RT0016";

impl Invocation {
    /// The divergence its last attempt failed with, in Restate's words: a
    /// replay that made other calls than the journal holds (Restate's
    /// journal mismatch: the code [`JOURNAL_MISMATCH`], `RT0016`; with no
    /// code, a message starting `[570 `). Any other failure is none,
    /// whatever its text holds (a byte count with `570` in it, a step's
    /// `schema mismatch`).
    ///
    /// What it names depends on where the replay left the journal:
    /// - an effect where the journal holds another (its key, or its
    ///   step, changed; a save journaled in an entry of its own, `save
    ///   session`, counts as one): both, as
    ///   `{step}#{visit}.{attempt}:{key}` (`name: work#2.1:effect-0 !=
    ///   work#2.1:v2-effect-0`);
    /// - a round of a fork's effects with another effect anywhere in it:
    ///   both rounds' names, `round of N: first … last #digest`, which
    ///   differ by their digests (the effect that differs is not named);
    /// - a call of another kind than the journal holds: a replay that asks
    ///   for fewer effects than the journal holds and goes on to save as
    ///   plain state where it holds an effect, or one that asks for an
    ///   effect where it holds such a save: the two calls' types only
    ///   (`'run' (index '3')` against `'set state'`). The journal's call is
    ///   then named by [`journaled_call`](Self::journaled_call) (the effect
    ///   `work#0.1:effect-1` the shorter replay no longer asks for), the
    ///   replay's by [`failed_call`](Self::failed_call) (an effect's name,
    ///   or the save's type).
    pub fn divergence(&self) -> Option<&str> {
        let failure = self.last_failure.as_deref()?;
        let mismatch = match self.last_failure_code.as_deref() {
            Some(code) => code == JOURNAL_MISMATCH,
            None => failure
                .strip_prefix("[570")
                .is_some_and(|rest| rest.starts_with([' ', ']'])),
        };
        mismatch.then_some(failure)
    }
}

/// The `services` list of an admin API answer from `url`.
fn services_of<'a>(answer: &'a Value, url: &str) -> Result<&'a Vec<Value>, RestateError> {
    answer["services"]
        .as_array()
        .ok_or_else(|| RestateError::Answer {
            url: url.to_owned(),
            message: format!("no `services` list in {}", excerpt(&answer.to_string())),
        })
}

/// A Restate server's ingress (`http://host:8080` by default): calls
/// handlers of services and virtual objects.
#[derive(Debug, Clone)]
pub struct Ingress {
    server: Server,
    http: reqwest::Client,
    timeout: Duration,
}

impl Ingress {
    /// The ingress at `base`; a call waits for its answer up to `timeout`.
    /// Credentials in its userinfo are sent as basic auth and never shown,
    /// and a `base` that is no URL is refused (see [`Admin::new`]; the
    /// ingress's port is 8080 by default).
    ///
    /// A call that gets no answer within `timeout` is a
    /// [`RestateError::Transport`] saying so: the invocation may still be
    /// running (Restate does not stop it when its caller hangs up).
    pub fn new(base: impl Into<String>, timeout: Duration) -> Result<Self, RestateError> {
        Ok(Self {
            server: Server::parse(&base.into())?,
            http: client(timeout)?,
            timeout,
        })
    }

    fn wait(&self, on_timeout: &'static str) -> Wait {
        Wait {
            timeout: self.timeout,
            on_timeout,
        }
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

    /// The URL of `service` (a virtual object's, without a key), for an
    /// error about a call to it.
    #[cfg_attr(not(feature = "service"), allow(dead_code))]
    pub(crate) fn service_url(&self, service: &str) -> Result<String, RestateError> {
        let base = &self.server.base;
        Ok(format!(
            "{base}/{}",
            path_segment(service, "the service name", base)?
        ))
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
        self.call_advising(service, key, handler, input, CALL_TIMEOUT)
            .await
    }

    /// [`call`](Self::call), whose timeout says `on_timeout` after "no
    /// answer within …".
    pub(crate) async fn call_advising(
        &self,
        service: &str,
        key: Option<&str>,
        handler: &str,
        input: &Value,
        on_timeout: &'static str,
    ) -> Result<Value, RestateError> {
        let url = self.handler_url(service, key, handler)?;
        let request = with_input(self.server.auth(self.http.post(&url)), input);
        json(&send(request, &url, self.wait(on_timeout)).await?, &url)
    }

    /// Sends the call without waiting; returns its invocation id. The
    /// `idempotency_key`, if given, makes a repeated send the same
    /// invocation. `input` is sent as [`call`](Self::call) sends it
    /// (`null`: no input at all).
    ///
    /// An `idempotency_key` that is empty, longer than
    /// [`MAX_IDEMPOTENCY_KEY_BYTES`] or not all visible ASCII (`!` to `~`)
    /// is a [`RestateError::Input`] naming it, and nothing is sent.
    pub async fn send(
        &self,
        service: &str,
        key: Option<&str>,
        handler: &str,
        input: &Value,
        idempotency_key: Option<&str>,
    ) -> Result<String, RestateError> {
        let url = format!("{}/send", self.handler_url(service, key, handler)?);
        if let Some(message) = idempotency_key.and_then(bad_idempotency_key) {
            return Err(RestateError::Input { url, message });
        }
        let mut request = with_input(self.server.auth(self.http.post(&url)), input);
        if let Some(idem) = idempotency_key {
            request = request.header("idempotency-key", idem);
        }
        let answer = json(&send(request, &url, self.wait(SEND_TIMEOUT)).await?, &url)?;
        answer["invocationId"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| RestateError::Answer {
                url,
                message: format!("no `invocationId` in {}", excerpt(&answer.to_string())),
            })
    }

    /// Waits for the invocation `id` to end and returns its answer. An id
    /// that is not an invocation id (`inv_1…`, 38 characters) is a
    /// [`RestateError::Input`], and nothing is sent; one the server does
    /// not know is its 404 ([`RestateError::Status`]).
    pub async fn attach(&self, id: &str) -> Result<Value, RestateError> {
        let id = invocation_id(id, &self.server.base)?;
        let url = format!("{}/restate/invocation/{id}/attach", self.server.base);
        let text = send(
            self.server.auth(self.http.get(&url)),
            &url,
            self.wait(ATTACH_TIMEOUT),
        )
        .await?;
        json(&text, &url)
    }
}

/// `post` with `input` as its JSON body; `null` as no body, with no type
/// (a handler without input takes that).
fn with_input(post: reqwest::RequestBuilder, input: &Value) -> reqwest::RequestBuilder {
    match input {
        Value::Null => post,
        input => post
            .header("content-type", "application/json")
            .body(input.to_string()),
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
        /// Nothing, for a minute: the connection stays open.
        Silent,
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
        // Read by the agent client's tests (the `service` feature).
        #[cfg_attr(not(feature = "service"), allow(dead_code))]
        content_type: Option<String>,
        #[cfg_attr(not(feature = "service"), allow(dead_code))]
        body: String,
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
            Fake::reading(move |path, _| answer(path))
        }

        /// [`start`](Self::start), answering each request by its path and
        /// its body.
        fn reading(answer: impl Fn(&str, &str) -> Reply + Send + Sync + 'static) -> Fake {
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

    fn serve(
        mut stream: TcpStream,
        record: &Mutex<Vec<Seen>>,
        answer: &dyn Fn(&str, &str) -> Reply,
    ) {
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
        let body = String::from_utf8_lossy(&body).into_owned();
        record.lock().unwrap().push(Seen {
            path: path.clone(),
            authorization: header("authorization"),
            content_type: header("content-type"),
            body: body.clone(),
        });
        match answer(&path, &body) {
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
            Reply::Silent => std::thread::sleep(Duration::from_secs(60)),
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
                .attach(REAL_ID)
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
        ingress.attach(REAL_ID).await.unwrap();
        assert_eq!(
            last_path(),
            Some(format!("/restate/invocation/{REAL_ID}/attach"))
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

    /// An id as the test server printed it (`sys_invocation`).
    const REAL_ID: &str = "inv_10jbAz9k9FrW2zeIOlzyPEh5SbPGq9ky7n";

    /// The message of an [`RestateError::Input`], or a panic naming what
    /// came instead.
    fn input_message<T: std::fmt::Debug>(result: Result<T, RestateError>, what: &str) -> String {
        match result {
            Err(e @ RestateError::Input { .. }) => e.to_string(),
            other => panic!("{what}: {other:?}"),
        }
    }

    /// A base URL's query and fragment are refused, and no message (nor
    /// `Debug`) shows their values: a token in a query is as secret as a
    /// password.
    #[test]
    fn a_base_urls_query_values_and_fragment_are_never_shown() {
        for (base, shown) in [
            (
                "http://127.0.0.1:8080?token=s3cr3tPW",
                "http://127.0.0.1:8080?token=…",
            ),
            (
                "http://127.0.0.1:8080/base?token=s3cr3tPW&user=s3cr3tUSER#s3cr3tFRAG",
                "http://127.0.0.1:8080/base?token=…&user=…#…",
            ),
            (
                "http://ops:pw@127.0.0.1:8080?token=s3cr3tPW",
                "http://…@127.0.0.1:8080?token=…",
            ),
            ("http://127.0.0.1:8080?s3cr3tPW", "http://127.0.0.1:8080?…"),
            (
                "http://127.0.0.1:8080/#s3cr3tFRAG",
                "http://127.0.0.1:8080/#…",
            ),
            ("HTTPS://h?a=s3cr3t1&&b=s3cr3t2", "HTTPS://h?a=…&…&b=…"),
            // No scheme: the message's suggestion hides them too.
            (
                "127.0.0.1:8080?token=s3cr3tPW",
                "`http://127.0.0.1:8080?token=…`",
            ),
        ] {
            let errors = [
                Ingress::new(base, Duration::from_secs(1)).unwrap_err(),
                Admin::new(base).unwrap_err(),
                BaseUrl::parse(base).unwrap_err(),
            ];
            for e in errors {
                let (text, debug) = (e.to_string(), format!("{e:?}"));
                assert!(matches!(e, RestateError::Input { .. }), "{debug}");
                assert!(
                    !text.contains("s3cr3t") && !debug.contains("s3cr3t"),
                    "{debug}"
                );
                assert!(text.contains(shown), "{base}: {text}");
            }
        }
    }

    /// A URL longer than an error quotes (a call whose key is long) is
    /// shown cut, its start and its end (the handler) kept; the error's
    /// field holds it whole.
    #[tokio::test]
    async fn a_long_url_is_shown_cut_in_a_message() {
        let fake = Fake::start(|_| http("404 Not Found", r#"{"message": "no"}"#));
        let ingress = Ingress::new(fake.base.clone(), Duration::from_secs(10)).unwrap();
        let key = "k".repeat(20_000);
        let e = ingress
            .call("Svc", Some(&key), "run", &json!({}))
            .await
            .unwrap_err();
        let RestateError::Status { url, status, .. } = &e else {
            panic!("{e:?}")
        };
        assert_eq!(*status, 404);
        assert!(
            url.contains(&key) && url.ends_with("/run"),
            "the field: whole"
        );
        let shown = e.to_string();
        assert!(shown.len() < 2 * QUOTED_BYTES, "{} bytes", shown.len());
        assert!(
            shown.starts_with(&format!("Restate at {}/Svc/kkk", fake.base)),
            "{shown}"
        );
        assert!(
            shown.contains(&format!(
                "kkk/run ({} bytes in all) answered 404",
                url.len()
            )),
            "{shown}"
        );
        // Cut on characters' boundaries.
        let wide = format!("the state of X/{}", "é".repeat(3 * QUOTED_BYTES));
        let cut = shown_url(&wide);
        assert!(
            cut.len() < QUOTED_BYTES + 40 && cut.contains("é…é"),
            "{cut}"
        );
        assert_eq!(shown_url("http://h/x"), "http://h/x");
    }

    #[test]
    fn a_base_url_that_is_not_one_is_refused_saying_what_is_wrong() {
        for (base, says) in [
            ("", "it is empty"),
            ("   ", "it is empty"),
            ("not a url", "no scheme"),
            (
                "127.0.0.1:58180",
                "no scheme: write `http://` (or `https://`) before the host: `http://127.0.0.1:58180`",
            ),
            ("localhost", "no scheme"),
            (
                "ftp://127.0.0.1:21",
                "the scheme `ftp` is not `http` or `https`",
            ),
            ("ws://host", "the scheme `ws`"),
            ("http://", "no host"),
            ("https://:8080", "no host"),
            ("http:///base", "no host"),
            ("http://[::1:1", "no closing `]`"),
            ("http://[not-v6]:80", "not an IPv6 address"),
            ("http://[::1]x", "follows the IPv6 address"),
            ("http://::1:8080", "IPv6 address goes in brackets"),
            ("http://host:", "no port follows"),
            ("http://host:80a", "the port `80a` is not a number"),
            (
                "http://host:99999",
                "the port `99999` is not a number from 0 to 65535",
            ),
            ("http://host:-1", "the port `-1`"),
            ("http://host:+80", "the port `+80`"),
            ("http://ho st:8080", "the host `ho st` holds ' '"),
            ("http://host:8080?x=1", "no query or fragment"),
            ("http://host:8080/base#frag", "no query or fragment"),
        ] {
            let admin = input_message(Admin::new(base), base);
            assert!(admin.contains(says), "{base:?}: {admin}");
            assert!(admin.contains("not a base URL"), "{base:?}: {admin}");
            let ingress = input_message(Ingress::new(base, Duration::from_secs(1)), base);
            assert_eq!(ingress, admin, "{base:?}");
        }
        // A bad base with credentials: said what is wrong, never them.
        for base in [
            "ops:hunter2@127.0.0.1:9070",
            "ftp://ops:hunter2@host",
            "http://ops:hunter2@",
            "http://ops:hunter2@:9070",
            "http://ops:hunter2@host:port",
            "http://ops:hun/ter2@",
            "http://ops:hunter2@[::1",
        ] {
            let e = input_message(Admin::new(base), base);
            assert!(!e.contains("hunter2") && !e.contains("ter2"), "{e}");
            assert!(e.contains("not a base URL"), "{base:?}: {e}");
        }
        // Bases that are ones.
        for (base, shown) in [
            ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
            ("https://restate.example.com", "https://restate.example.com"),
            ("HTTP://host:9070/", "http://host:9070"),
            ("http://[::1]:9070", "http://[::1]:9070"),
            ("http://[::1]", "http://[::1]"),
            (
                "http://host:8080/proxy/restate/",
                "http://host:8080/proxy/restate",
            ),
            (
                "http://ops:pw@host_1.internal:8080",
                "http://host_1.internal:8080",
            ),
        ] {
            assert_eq!(Admin::new(base).unwrap().base(), shown, "{base}");
        }
    }

    #[tokio::test]
    async fn an_at_in_a_base_urls_path_never_sends_the_requests_to_another_host() {
        let fake = Fake::start(|_| http("200 OK", "{}"));
        let port = fake.base.rsplit(':').next().unwrap().to_owned();
        // Read both ways (a path with `@`, or a password with `/`): refused,
        // saying how to write either.
        for base in [
            format!("http://127.0.0.1:{port}/base@evil"),
            format!("http://127.0.0.1:{port}/base@evil:80/x"),
            format!("http://ops:pw@127.0.0.1:{port}/base@evil"),
            format!("http://127.0.0.1:{port}?q@evil"),
        ] {
            let e = input_message(Ingress::new(base.clone(), Duration::from_secs(1)), &base);
            assert!(e.contains("%40") && e.contains("%2F"), "{base}: {e}");
            assert!(!e.contains("127.0.0.1"), "nothing before the `@`: {e}");
            let e = input_message(Admin::new(base.clone()), &base);
            assert!(e.contains("%40"), "{base}: {e}");
        }
        // An `@` in a path that cannot be read as a userinfo's: the path's.
        let base = format!("http://127.0.0.1:{port}/base@");
        let parsed = BaseUrl::parse(&base).unwrap();
        assert_eq!(
            (parsed.userinfo, parsed.host, parsed.port, parsed.path),
            (None, "127.0.0.1", port.parse().ok(), "/base@")
        );
        // Encoded, it is a path, and the requests go to the host.
        let ingress = Ingress::new(
            format!("http://127.0.0.1:{port}/base%40x"),
            Duration::from_secs(10),
        )
        .unwrap();
        assert!(format!("{ingress:?}").contains("127.0.0.1"), "{ingress:?}");
        ingress
            .call("Svc", Some("k"), "run", &json!({}))
            .await
            .unwrap();
        let seen = fake.seen().pop().unwrap();
        assert_eq!(seen.path, "/base%40x/Svc/k/run");
        assert_eq!(seen.authorization, None);
        // A password with a `/` whose text before it is no host and port
        // (`ops:pa`): still the password.
        let parsed = BaseUrl::parse("http://ops:pa/ss@host:8080/base").unwrap();
        assert_eq!(
            (parsed.userinfo, parsed.host, parsed.port, parsed.path),
            (Some("ops:pa/ss"), "host", Some(8080), "/base")
        );
        assert!(!format!("{parsed:?}").contains("pa/ss"), "{parsed:?}");
    }

    #[tokio::test]
    async fn a_transport_error_says_whether_the_server_refused_or_did_not_answer_in_time() {
        let closed = format!("http://127.0.0.1:{}", closed_port());
        let admin = Admin::new(closed.clone()).unwrap();
        let ingress = Ingress::new(closed, Duration::from_secs(10)).unwrap();
        let errors = [
            admin.query("SELECT 1").await.unwrap_err(),
            admin.register("http://x", false).await.unwrap_err(),
            ingress
                .call("Svc", Some("k"), "run", &json!({}))
                .await
                .unwrap_err(),
            ingress.attach(REAL_ID).await.unwrap_err(),
        ];
        for e in errors {
            assert!(matches!(e, RestateError::Transport { .. }), "{e:?}");
            let shown = e.to_string();
            assert!(shown.contains("connection refused"), "{shown}");
            assert!(shown.contains("is the server up"), "{shown}");
            assert!(!shown.contains("no answer within"), "{shown}");
        }

        let silent = Fake::start(|_| Reply::Silent);
        let ingress = Ingress::new(silent.base.clone(), Duration::from_millis(300)).unwrap();
        let began = Instant::now();
        let call = ingress
            .call("Svc", Some("k"), "run", &json!({}))
            .await
            .unwrap_err();
        assert!(began.elapsed() < Duration::from_secs(20));
        let send = ingress
            .send("Svc", Some("k"), "run", &json!({}), Some("idem"))
            .await
            .unwrap_err();
        let attach = ingress.attach(REAL_ID).await.unwrap_err();
        for (e, then) in [
            (&call, "may still be running"),
            (&call, "`outcome`"),
            (&send, "same idempotency key"),
            (&attach, "`outcome` (attach) again picks it up"),
        ] {
            assert!(matches!(e, RestateError::Transport { .. }), "{e:?}");
            let shown = e.to_string();
            assert!(shown.contains("no answer within 300ms"), "{shown}");
            assert!(shown.contains(then), "{shown}");
            assert!(!shown.contains("refused"), "{shown}");
        }
    }

    #[tokio::test]
    async fn an_invocation_id_of_another_shape_is_refused_before_anything_is_sent() {
        let unknown = Fake::start(|path| {
            if path.contains("/query") {
                http("200 OK", r#"{"rows": []}"#)
            } else {
                http("404 Not Found", r#"{"message": "not found"}"#)
            }
        });
        let admin = Admin::new(unknown.base.clone()).unwrap();
        let ingress = Ingress::new(unknown.base.clone(), Duration::from_secs(10)).unwrap();
        for (id, says) in [
            ("inv_nope", "has 4 digits"),
            ("inv_1234", "has 4 digits after `inv_`, not 34"),
            ("inv_doesnotexist123", "has 15 digits"),
            ("inv_../../deployments", "holds '.'"),
            ("inv_20jbAz9k9FrW2zeIOlzyPEh5SbPGq9ky7n", "codec version"),
            ("inv_10jbAz9k9FrW2zeIOlzyPEh5SbPGq9ky7", "33 digits"),
            ("inv_10jbAz9k9FrW2zeIOlzyPEh5SbPGq9ky7nn", "35 digits"),
            ("inv_1zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz", "larger than"),
            ("inv_1zzzzzzzzzzz0000000000000000000000", "larger than"),
            ("INV_10jbAz9k9FrW2zeIOlzyPEh5SbPGq9ky7n", "`inv_`"),
            ("inv_10jbAz9k9FrW2zeIOlzyPEh5SbPGq9ky7_", "holds '_'"),
            ("inv_10jbAz9k9FrW2zeIOlzyPEh5SbPGq9kyé", "holds 'é'"),
        ] {
            let results = [
                input_message(admin.invocation(id).await, id),
                input_message(admin.cancel(id).await, id),
                input_message(admin.kill(id).await, id),
                input_message(ingress.attach(id).await, id),
            ];
            for e in results {
                assert!(e.contains(says), "{id}: {e}");
                assert!(e.contains("is not an invocation id"), "{id}: {e}");
            }
        }
        assert!(unknown.seen().is_empty(), "{:?}", unknown.seen());

        // Well-formed and unknown: `None`, whether the server finds no row
        // or cannot read the id as one of its own.
        let no_id = "inv_1000000000000000000000000000000000";
        assert_eq!(admin.invocation(no_id).await.unwrap(), None);
        assert_eq!(admin.invocation(REAL_ID).await.unwrap(), None);
        let unreadable = Fake::start(|_| {
            http(
                "500 Internal Server Error",
                r#"{"message": "Datafusion error: External error: non valid invocation id"}"#,
            )
        });
        let admin = Admin::new(unreadable.base.clone()).unwrap();
        assert_eq!(admin.invocation(REAL_ID).await.unwrap(), None);
        // Any other error of the server is still one.
        let failing = Fake::start(|_| http("500 Internal Server Error", "disk full"));
        let e = Admin::new(failing.base.clone())
            .unwrap()
            .invocation(REAL_ID)
            .await
            .unwrap_err();
        assert!(
            matches!(e, RestateError::Status { status: 500, .. }),
            "{e:?}"
        );
    }

    #[tokio::test]
    async fn the_virtual_objects_are_the_services_of_that_type() {
        let fake = Fake::start(|_| {
            http(
                "200 OK",
                r#"{"services": [{"name": "Orders", "ty": "VirtualObject"},
                    {"name": "Greeter", "ty": "Service"},
                    {"name": "HarnessAgent", "ty": "VirtualObject"}]}"#,
            )
        });
        let admin = Admin::new(fake.base.clone()).unwrap();
        assert_eq!(
            admin.virtual_objects().await.unwrap(),
            ["HarnessAgent", "Orders"]
        );
        assert_eq!(fake.seen().pop().unwrap().path, "/services");
        let wrong = Fake::start(|_| http("200 OK", r#"{"rows": []}"#));
        let e = Admin::new(wrong.base.clone())
            .unwrap()
            .virtual_objects()
            .await
            .unwrap_err();
        assert!(e.to_string().contains("no `services` list"), "{e}");
    }

    /// A reader asks for the server's virtual objects before its first
    /// read, once: an object the server has is not asked about again (by
    /// the reader or its clones); one it does not have is refused on every
    /// read, naming it and those the server has, and nothing is queried.
    #[tokio::test]
    async fn a_reader_checks_once_that_the_server_has_its_object() {
        use harness::session::SessionStore;
        let fake = Fake::start(|path| {
            if path == "/services" {
                http(
                    "200 OK",
                    r#"{"services": [{"name": "Orders", "ty": "VirtualObject"},
                        {"name": "Greeter", "ty": "Service"},
                        {"name": "HarnessAgent", "ty": "VirtualObject"}]}"#,
                )
            } else {
                http("200 OK", r#"{"rows": []}"#)
            }
        });
        let paths = |fake: &Fake| -> Vec<String> {
            fake.seen
                .lock()
                .unwrap()
                .drain(..)
                .map(|s| s.path)
                .collect()
        };
        let admin = Admin::new(fake.base.clone()).unwrap();
        let session = harness::SessionId::from("s1");
        let reader = RestateSessionReader::new(admin.clone()).object("Orders");
        assert!(reader.sessions().await.unwrap().is_empty());
        assert!(reader.load(&session).await.unwrap().is_none());
        let clone = reader.clone();
        assert!(clone.checkpoints(&session, 0).await.unwrap().is_empty());
        assert_eq!(paths(&fake), ["/services", "/query", "/query", "/query"]);
        // Another object: checked afresh.
        let other = reader.object("HarnessAgent");
        assert!(other.snapshot(&session).await.unwrap().is_none());
        assert_eq!(paths(&fake), ["/services", "/query"]);

        // Not a virtual object the server has: a typo, or a service that
        // is no virtual object.
        for missing in ["Ordres", "Greeter"] {
            let reader = RestateSessionReader::new(admin.clone()).object(missing);
            for _ in 0..2 {
                let e = reader.snapshot(&session).await.unwrap_err();
                let RestateError::NoSuchObject {
                    url,
                    object,
                    objects,
                } = &e
                else {
                    panic!("{e:?}")
                };
                assert_eq!(
                    (url.as_str(), object.as_str()),
                    (fake.base.as_str(), missing)
                );
                assert_eq!(objects, &["HarnessAgent", "Orders"]);
                let message = e.to_string();
                assert!(
                    message.contains(&format!("no virtual object `{missing}` is registered"))
                        && message.contains("`HarnessAgent`, `Orders`")
                        && message.contains(&fake.base),
                    "{message}"
                );
                let e = reader.sessions().await.unwrap_err().to_string();
                assert!(
                    e.contains(&format!("`{missing}`")) && e.contains("`Orders`"),
                    "{e}"
                );
                let e = reader
                    .checkpoints(&session, 0)
                    .await
                    .unwrap_err()
                    .to_string();
                assert!(e.contains(&format!("`{missing}`")), "{e}");
            }
            // Asked each time, and nothing read.
            assert_eq!(paths(&fake), ["/services"; 6]);
        }
    }

    /// A head as the object keeps it, of `session`.
    fn head_text(session: &str) -> String {
        json!({
            "schema_version": 1, "session_id": session, "agent_id": "probe",
            "run_id": "b7166644-28a3-9472-9a59-7672bcf1332e",
            "phase": {"phase": "completed", "signal": "$end"}, "next_step": null,
            "steps": 4, "journal": {"responses": [], "once": {}}, "version": 3,
            "lease": null, "snapshot_seq": 0, "snapshot_index": 0, "last_seq": 4,
            "created_at": 1, "updated_at": 2
        })
        .to_string()
    }

    /// `harness sessions list` lists, then loads each session: the heads
    /// are read a batch at a time, each query naming the partition keys
    /// the listing gave and reading the `head` key alone; a head that does
    /// not read fails its own load with the error a read of it alone
    /// gives, and no other; a head read with others is given once, and
    /// only while fresh.
    #[tokio::test]
    async fn a_listing_reads_the_heads_a_batch_at_a_time_and_nothing_else() {
        use harness::session::SessionStore;
        let ids: Vec<String> = (0..150).map(|i| format!("s{i:03}")).collect();
        // Partition keys past 2^53, as the server's are: read as u64.
        let partition = |i: usize| u64::MAX - i as u64;
        let known = ids.clone();
        let fake = Fake::reading(move |path, body| {
            if path == "/services" {
                return http(
                    "200 OK",
                    r#"{"services": [{"name": "HarnessAgent", "ty": "VirtualObject"}]}"#,
                );
            }
            let sql: Value = serde_json::from_str(body).unwrap();
            let sql = sql["query"].as_str().unwrap();
            let rows: Vec<Value> = if sql.starts_with("SELECT service_key, partition_key") {
                (0..known.len())
                    .map(|i| json!({"service_key": known[i], "partition_key": partition(i)}))
                    .collect()
            } else if sql.starts_with("SELECT partition_key") {
                (0..known.len())
                    .filter(|i| sql.contains(&format!("service_key = '{}'", known[*i])))
                    .map(|i| json!({"partition_key": partition(i)}))
                    .collect()
            } else if sql.starts_with("SELECT service_key, value_utf8") {
                (0..known.len())
                    .filter(|i| sql.contains(&format!("'{}'", known[*i])))
                    .map(|i| {
                        let text = if known[i] == "s077" {
                            r#"{"nope": 1}"#.to_owned()
                        } else {
                            head_text(&known[i])
                        };
                        json!({"service_key": known[i], "value_utf8": text})
                    })
                    .collect()
            } else {
                panic!("unexpected query: {sql}")
            };
            http("200 OK", &json!({ "rows": rows }).to_string())
        });
        let queries = |fake: &Fake| -> Vec<String> {
            fake.seen
                .lock()
                .unwrap()
                .drain(..)
                .filter(|s| s.path == "/query")
                .map(|s| {
                    let body: Value = serde_json::from_str(&s.body).unwrap();
                    body["query"].as_str().unwrap().to_owned()
                })
                .collect()
        };
        let admin = Admin::new(fake.base.clone()).unwrap();
        let alone = RestateSessionReader::new(admin.clone());
        let bad = harness::SessionId::from("s077");
        let bad_alone = alone.load(&bad).await.unwrap_err();
        assert!(
            matches!(&bad_alone, harness::session::StoreError::Load(load) if load.session == bad),
            "a damaged record, not a failure of the server: {bad_alone:?}"
        );
        let bad_alone = bad_alone.to_string();
        assert!(
            bad_alone.contains("a `head` that is not a session's") && bad_alone.contains("s077"),
            "{bad_alone}"
        );
        // Alone: its partition key, then its head by that key.
        let read = queries(&fake);
        assert_eq!(read.len(), 2, "{read:?}");
        assert!(read[1].contains(&format!("partition_key IN ({})", partition(77))));
        // Not there: one query.
        let none = alone.load(&harness::SessionId::from("t1")).await.unwrap();
        assert!(none.is_none());
        assert_eq!(queries(&fake).len(), 1);

        let reader = RestateSessionReader::new(admin.clone());
        let listed = reader.sessions().await.unwrap();
        assert_eq!(listed.len(), 150);
        assert_eq!(queries(&fake).len(), 1, "the listing: one query");
        for id in &listed {
            match reader.load(id).await {
                Ok(Some(head)) => assert_eq!(head.session_id, *id),
                Ok(None) => panic!("{id}: no head"),
                Err(e) => {
                    assert_eq!(id.as_str(), "s077");
                    assert_eq!(e.to_string(), bad_alone, "the same error as alone");
                }
            }
        }
        let read = queries(&fake);
        assert_eq!(read.len(), 3, "150 heads, 64 a query: {read:?}");
        for (n, sql) in read.iter().enumerate() {
            assert!(sql.contains("key = 'head'"), "{sql}");
            assert!(!sql.contains("SELECT key"), "{sql}");
            // The partition keys of the batch's sessions, exactly.
            let first = n * HEADS_PER_QUERY;
            let last = (first + HEADS_PER_QUERY).min(150) - 1;
            for i in [first, last] {
                assert!(sql.contains(&format!("{}", partition(i))), "{i}: {sql}");
                assert!(sql.contains(&format!("'{}'", ids[i])), "{i}: {sql}");
            }
            assert!(
                !sql.contains(&format!("'{}'", ids[(last + 1) % 150])),
                "{sql}"
            );
        }
        // Each head read with others is given once: loaded again, read
        // again (with those listed after it).
        reader.load(&listed[3]).await.unwrap().unwrap();
        reader.load(&listed[4]).await.unwrap().unwrap();
        assert_eq!(queries(&fake).len(), 1);
        // Given only while fresh: past that, read again.
        tokio::time::sleep(HEAD_KEPT_FOR + Duration::from_millis(50)).await;
        reader.load(&listed[5]).await.unwrap().unwrap();
        assert_eq!(queries(&fake).len(), 1);
        // A session the listing does not hold: alone.
        assert!(
            reader
                .load(&harness::SessionId::from("t2"))
                .await
                .unwrap()
                .is_none()
        );
        assert_eq!(queries(&fake).len(), 1);
    }

    #[test]
    fn a_missing_objects_message_names_none_or_at_most_what_an_error_quotes() {
        let none = RestateError::NoSuchObject {
            url: "http://h:9070".into(),
            object: "Orders".into(),
            objects: vec![],
        };
        assert_eq!(
            none.to_string(),
            "Restate at http://h:9070: no virtual object `Orders` is registered (its virtual \
             objects: none)"
        );
        let many = RestateError::NoSuchObject {
            url: "http://h:9070".into(),
            object: "x".repeat(4 * QUOTED_BYTES),
            objects: (0..1000).map(|i| format!("Object{i}")).collect(),
        };
        let message = many.to_string();
        assert!(message.len() < 3 * QUOTED_BYTES, "{} bytes", message.len());
        assert!(message.contains("`Object0`, `Object1`"), "{message}");
        assert!(message.contains("bytes in all"), "{message}");
    }

    /// An agent call that gets no answer in time says what the caller can
    /// do for that call: the invocation goes on, the session shows where it
    /// is, and the call that sends it without waiting (there is one for a
    /// run, an answer and a stop).
    #[cfg(feature = "service")]
    #[tokio::test]
    async fn an_agent_call_that_times_out_says_what_goes_on_and_what_to_do() {
        let silent = Fake::start(|_| Reply::Silent);
        let client = AgentClient::new(
            Ingress::new(silent.base.clone(), Duration::from_millis(300)).unwrap(),
        );
        let session = harness::SessionId::from("s1");
        let interrupt = harness::InterruptId::from("i");
        for (e, says, not) in [
            (
                client.run(&session, &json!({})).await.map(drop),
                &[
                    "run may still be under way",
                    "(`session`)",
                    "with `submit` and pick it up with `outcome`",
                ][..],
                "submit_",
            ),
            (
                client
                    .resume(&session, &interrupt, json!(1))
                    .await
                    .map(drop),
                &[
                    "answer may have been taken",
                    "(`session`)",
                    "`submit_resume`",
                    "`outcome`",
                ][..],
                "(`submit`)",
            ),
            (
                client.stop(&session).await.map(drop),
                &[
                    "stop may still be under way",
                    "(`session`)",
                    "`submit_stop`",
                    "`outcome`",
                ][..],
                "(`submit`)",
            ),
            (
                client.session(&session).await.map(drop),
                &["changes nothing: read it again"][..],
                "submit",
            ),
        ] {
            let e = e.unwrap_err();
            assert!(matches!(e, RestateError::Transport { .. }), "{e:?}");
            let shown = e.to_string();
            assert!(shown.contains("no answer within 300ms"), "{shown}");
            for says in says {
                assert!(shown.contains(says), "{says}: {shown}");
            }
            assert!(!shown.contains(not), "{not}: {shown}");
        }
    }

    /// Every call of the agent client that names a session refuses an id
    /// longer than `MAX_SESSION_ID_BYTES` as sent (percent-encoded), naming
    /// its length and the bound, and sends nothing; an id at the bound
    /// goes.
    #[cfg(feature = "service")]
    #[tokio::test]
    async fn an_agent_call_refuses_a_session_id_longer_than_the_bound() {
        let fake = Fake::start(|path| {
            if path.ends_with("/send") {
                http("200 OK", &format!(r#"{{"invocationId": "{REAL_ID}"}}"#))
            } else {
                http("200 OK", "null")
            }
        });
        let client =
            AgentClient::new(Ingress::new(fake.base.clone(), Duration::from_secs(10)).unwrap())
                .object("Orders");
        let interrupt = harness::InterruptId::from("i");
        let calls = |id: harness::SessionId| {
            let client = client.clone();
            let interrupt = interrupt.clone();
            async move {
                vec![
                    client.run(&id, &json!({})).await.map(drop),
                    client.submit(&id, &json!({}), None).await.map(drop),
                    client.resume(&id, &interrupt, json!(1)).await.map(drop),
                    client
                        .submit_resume(&id, &interrupt, json!(1), None)
                        .await
                        .map(drop),
                    client.stop(&id).await.map(drop),
                    client.submit_stop(&id, None).await.map(drop),
                    client.session(&id).await.map(drop),
                ]
            }
        };
        for (id, chars, bytes) in [
            ("a".repeat(MAX_SESSION_ID_BYTES + 1), 4097, 4097),
            (
                format!("{}/", "a".repeat(MAX_SESSION_ID_BYTES - 2)),
                4095,
                4097,
            ),
            ("é".repeat(683), 683, 4098),
            ("x".repeat(20_000), 20_000, 20_000),
        ] {
            for e in calls(harness::SessionId::from(id.as_str())).await {
                let e = e.unwrap_err();
                let RestateError::SessionIdTooLong {
                    url,
                    start,
                    chars: c,
                    bytes: b,
                    limit,
                } = &e
                else {
                    panic!("{e:?}")
                };
                assert_eq!((*c, *b, *limit), (chars, bytes, MAX_SESSION_ID_BYTES));
                assert_eq!(url, &format!("{}/Orders", fake.base));
                assert_eq!(start, &id.chars().take(32).collect::<String>());
                let shown = e.to_string();
                assert!(
                    shown.contains(&format!(
                        "is {chars} characters, {bytes} bytes as sent (percent-encoded in the \
                         URL), more than the 4096 bytes a session id may take"
                    )),
                    "{shown}"
                );
                assert!(shown.len() < 400, "{shown}");
            }
        }
        assert!(fake.seen().is_empty(), "{:?}", fake.seen().len());
        // At the bound, whatever its characters: sent, by every call.
        for id in [
            "a".repeat(MAX_SESSION_ID_BYTES),
            format!("{}/", "a".repeat(MAX_SESSION_ID_BYTES - 3)),
            "é".repeat(682) + "abcd",
        ] {
            let key = path_segment(&id, "key", "").unwrap();
            assert_eq!(key.len(), MAX_SESSION_ID_BYTES);
            for result in calls(harness::SessionId::from(id.as_str())).await {
                assert!(
                    !matches!(result, Err(RestateError::SessionIdTooLong { .. })),
                    "{result:?}"
                );
            }
            let seen = fake.seen.lock().unwrap().drain(..).collect::<Vec<_>>();
            assert_eq!(seen.len(), 7);
            assert!(seen.iter().all(|s| s.path.contains(&key)), "{seen:?}");
        }
    }

    #[cfg(feature = "service")]
    #[tokio::test]
    async fn run_and_submit_read_an_input_alike_and_refuse_what_is_no_update() {
        let fake = Fake::start(|path| {
            if path.ends_with("/send") {
                http("200 OK", &format!(r#"{{"invocationId": "{REAL_ID}"}}"#))
            } else {
                http(
                    "200 OK",
                    r#"{"Completed": {"state": {}, "terminal": "done"}}"#,
                )
            }
        });
        let client =
            AgentClient::new(Ingress::new(fake.base.clone(), Duration::from_secs(10)).unwrap());
        let session = harness::SessionId::from("s1");
        for (input, sent) in [
            (json!(null), "{}"),
            (json!({}), "{}"),
            (json!({"n": 1}), r#"{"n":1}"#),
        ] {
            // What the run's answer is does not matter here: what was sent.
            let _ = client.run(&session, &input).await;
            let _ = client.submit(&session, &input, None).await;
            let seen = fake.seen.lock().unwrap().drain(..).collect::<Vec<_>>();
            assert_eq!(seen.len(), 2, "{input}: {seen:?}");
            for request in seen {
                assert_eq!(request.body, sent, "{input}: {request:?}");
                assert_eq!(
                    request.content_type.as_deref(),
                    Some("application/json"),
                    "{input}: {request:?}"
                );
            }
        }
        for (input, what) in [
            (json!([1, 2]), "not an array"),
            (json!("charge"), "not a string"),
            (json!(5), "not a number"),
            (json!(true), "not a boolean"),
        ] {
            for e in [
                input_message(client.run(&session, &input).await, "run"),
                input_message(client.submit(&session, &input, None).await, "submit"),
            ] {
                assert!(e.contains(what), "{input}: {e}");
                assert!(e.contains("a JSON object"), "{input}: {e}");
                assert!(e.contains("`{}` for none"), "{input}: {e}");
                assert!(e.contains("/HarnessAgent/s1/run"), "{input}: {e}");
            }
        }
        assert!(fake.seen().is_empty(), "nothing refused was sent");
    }
}
