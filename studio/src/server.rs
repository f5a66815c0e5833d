//! The axum application: the page, the JSON API and the event stream.

use crate::approval;
use crate::error::ApiError;
use crate::evals;
use crate::memory;
use crate::query::{self, Query};
use crate::redact;
use crate::source::{Resumed, Source};
use crate::trim;
use crate::view::{self, Listed, PHASES, Summary, Unreadable};
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequestParts, Path, RawQuery, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::Stream;
use harness::session::SessionPhase;
use harness::step::Interrupt;
use harness::{InterruptId, SessionId};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// The page's files, in the binary.
const INDEX_HTML: &str = include_str!("../assets/index.html");
const STUDIO_JS: &str = include_str!("../assets/studio.js");
const STUDIO_CSS: &str = include_str!("../assets/studio.css");

/// Reads an answer as the declared type; the error is serde's message.
pub(crate) type Check = dyn Fn(&Value) -> Result<(), String> + Send + Sync;

/// A declared answer: its JSON schema and a check that reads it as the
/// type the step reads.
#[derive(Clone)]
pub(crate) struct AnswerShape {
    pub(crate) type_name: String,
    pub(crate) schema: Value,
    pub(crate) check: Arc<Check>,
}

/// What every handler shares.
pub(crate) struct App {
    pub(crate) source: Arc<dyn Source>,
    /// The long-term memory the studio shows, read-only, if any.
    pub(crate) memory: Option<harness::memory::Memory>,
    /// The eval reports the studio shows.
    pub(crate) reports: Arc<Vec<harness_evals::Report>>,
    /// The token every API call needs; `None` when the studio is mounted in
    /// an application's router, whose own middleware decides who may call.
    pub(crate) token: Option<String>,
    /// The page and its script, their URLs under the path the studio is
    /// served at.
    pub(crate) page: Page,
    /// Agents whose sessions are left out of the list (an application's
    /// own records).
    pub(crate) hidden: Vec<String>,
    pub(crate) shapes: BTreeMap<String, AnswerShape>,
    pub(crate) poll: Duration,
    pub(crate) title: String,
    /// Bumped when this studio changed a session, so that event streams
    /// look at the store at once.
    pub(crate) changed: watch::Sender<u64>,
    /// Turns true when the studio stops: event streams end.
    pub(crate) stopping: watch::Receiver<bool>,
    /// How long an answer's request waits to learn whether the run kept
    /// the answer.
    pub(crate) answer_wait: Duration,
    /// The answers runs refused, by session: shown with the session while
    /// it waits on the interrupt answered.
    pub(crate) refused: Arc<Refused>,
    /// When the store is a copy taken once ([`Studio::snapshot`](crate::Studio::snapshot)):
    /// when, in milliseconds since the Unix epoch.
    pub(crate) snapshot: Option<u64>,
}

/// An answer a run refused.
#[derive(Clone, Debug)]
pub(crate) struct Refusal {
    /// The interrupt answered, on which the session still waits.
    pub(crate) interrupt: InterruptId,
    /// Why, as the run said.
    pub(crate) reason: String,
}

/// The most refusals kept (one per session); past it, the oldest goes.
const REFUSALS: usize = 1000;

/// The last answer each session's run refused, while no later answer was
/// kept; at most [`REFUSALS`] sessions, in memory (a studio's own record:
/// a reader never writes it to the store).
#[derive(Default)]
pub(crate) struct Refused {
    by_session: std::sync::Mutex<VecDeque<(SessionId, Refusal)>>,
}

impl Refused {
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(SessionId, Refusal)>> {
        self.by_session
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn record(&self, session: &SessionId, refusal: Option<Refusal>) {
        let mut all = self.lock();
        all.retain(|(s, _)| s != session);
        if let Some(refusal) = refusal {
            if all.len() == REFUSALS {
                all.pop_front();
            }
            all.push_back((session.clone(), refusal));
        }
    }

    /// The refusal of an answer to `interrupt` of `session`, if its run
    /// refused the last one.
    fn of(&self, session: &SessionId, interrupt: &InterruptId) -> Option<Refusal> {
        self.lock()
            .iter()
            .find(|(s, r)| s == session && r.interrupt == *interrupt)
            .map(|(_, r)| r.clone())
    }
}

pub(crate) type Shared = Arc<App>;

pub(crate) fn router(app: App) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/studio.js", get(script))
        .route("/studio.css", get(style))
        .route("/api/info", get(info))
        .route("/api/sessions", get(sessions))
        .route("/api/sessions/{id}", get(session))
        .route("/api/sessions/{id}/summary", get(summary))
        .route("/api/sessions/{id}/timeline", get(timeline))
        .route("/api/sessions/{id}/state", get(state))
        .route("/api/sessions/{id}/answer", post(answer))
        .route("/api/sessions/{id}/fork", post(fork))
        .route("/api/events", get(events))
        .route("/api/memory/namespaces", get(memory::namespaces))
        .route("/api/memory/items", get(memory::items))
        .route("/api/memory/item", get(memory::item))
        .route("/api/memory/search", get(memory::search))
        .route("/api/evals", get(evals::list))
        .route("/api/evals/{index}", get(evals::report))
        .fallback(no_route)
        .layer(axum::middleware::from_fn(wrong_method))
        .layer(axum::extract::DefaultBodyLimit::max(BODY_LIMIT))
        .layer(axum::middleware::from_fn(redact::responses))
        .layer(axum::middleware::map_response(no_referrer))
        .with_state(Arc::new(app))
}

/// A path no route answers: under `/api`, a JSON error naming it
/// ([`ApiError::NoRoute`], 404) like every other error of the API, to a
/// caller with the token (else the token's 401, as for every API call);
/// elsewhere a bare 404 (the page is at `/`).
async fn no_route(State(app): State<Shared>, request: axum::extract::Request) -> Response {
    let (mut parts, _) = request.into_parts();
    let path = parts.uri.path().to_owned();
    if path != "/api" && !path.starts_with("/api/") {
        return axum::http::StatusCode::NOT_FOUND.into_response();
    }
    if let Err(e) = Authorized::from_request_parts(&mut parts, &app).await {
        return e.into_response();
    }
    ApiError::NoRoute { path }.into_response()
}

/// A path of the API asked with a method it does not take: a JSON error
/// ([`ApiError::WrongMethod`], 405, with its `Allow` header) rather than
/// axum's empty body.
async fn wrong_method(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let method = request.method().to_string();
    let path = request.uri().path().to_owned();
    let response = next.run(request).await;
    if response.status() != axum::http::StatusCode::METHOD_NOT_ALLOWED
        || !(path == "/api" || path.starts_with("/api/"))
    {
        return response;
    }
    // (axum adds its `Allow` header outside this layer: the router's
    // routes say it here.)
    let allowed = if path.ends_with("/answer") || path.ends_with("/fork") {
        "POST"
    } else {
        "GET,HEAD"
    };
    ApiError::WrongMethod {
        method,
        path,
        allowed: allowed.to_owned(),
    }
    .into_response()
}

/// Every response: a page of the studio names nothing of it (a session's
/// id in its URL, a token) to a site a link leads to.
async fn no_referrer(mut response: Response) -> Response {
    response.headers_mut().insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

/// The page and its script with their absolute URLs (`/studio.css`,
/// `/api/…`) under the path the studio is served at.
pub(crate) struct Page {
    html: String,
    script: String,
}

/// What the assets call their own URLs by: each occurs once, and a mounted
/// studio prefixes them with its path.
const REBASED: [(&str, &str); 4] = [
    ("href=\"/studio.css\"", "href=\"{base}/studio.css\""),
    ("src=\"/studio.js\"", "src=\"{base}/studio.js\""),
    ("fetch(path, ", "fetch('{base}' + path, "),
    (
        "new EventSource('/api/events",
        "new EventSource('{base}/api/events",
    ),
];

impl Page {
    /// The assets served at `base` (`""` for the root; else a path checked
    /// by [`check_base`], which holds no quote).
    pub(crate) fn at(base: &str) -> Self {
        let mut html = INDEX_HTML.to_owned();
        let mut script = STUDIO_JS.to_owned();
        if !base.is_empty() {
            for (from, to) in REBASED {
                let to = to.replace("{base}", base);
                html = html.replace(from, &to);
                script = script.replace(from, &to);
            }
        }
        Page { html, script }
    }
}

/// Checks the path a studio is mounted at: `/` then segments of letters,
/// digits, `-`, `_` and `.`, without a trailing `/`.
pub(crate) fn check_base(base: &str) -> Result<(), String> {
    let Some(rest) = base.strip_prefix('/') else {
        return Err(format!("`{base}` does not start with `/`"));
    };
    if rest.is_empty() || rest.ends_with('/') {
        return Err(format!(
            "`{base}` must name a path below the root, without a trailing `/` (e.g. `/studio`)"
        ));
    }
    if let Some(c) = rest
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/')))
    {
        return Err(format!(
            "`{base}` holds `{c}`: use letters, digits, `-`, `_`, `.` and `/`"
        ));
    }
    if rest
        .split('/')
        .any(|s| s.is_empty() || s == "." || s == "..")
    {
        return Err(format!("`{base}` has an empty, `.` or `..` segment"));
    }
    Ok(())
}

fn asset(body: impl IntoResponse, kind: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(kind)),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
            // The page loads nothing from elsewhere, and no other page may
            // frame it.
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(
                    "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
                ),
            ),
        ],
        body,
    )
        .into_response()
}

async fn index(State(app): State<Shared>) -> Response {
    asset(app.page.html.clone(), "text/html; charset=utf-8")
}

async fn script(State(app): State<Shared>) -> Response {
    asset(app.page.script.clone(), "text/javascript; charset=utf-8")
}

async fn style() -> Response {
    asset(STUDIO_CSS, "text/css; charset=utf-8")
}

/// A request that gave the studio's token: in the `x-studio-token` header,
/// or (for reads, and the event stream, which a browser opens without
/// headers) as `?token=` in the URL. Writes need the header, which a page
/// of another origin cannot send without a preflight the studio refuses.
pub(crate) struct Authorized;

fn same(a: &str, b: &str) -> bool {
    // Compares every byte whatever differs first.
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

impl FromRequestParts<Shared> for Authorized {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &Shared) -> Result<Self, ApiError> {
        let Some(token) = &app.token else {
            // Mounted: the application's middleware has let the request in.
            return Ok(Authorized);
        };
        let header = parts
            .headers
            .get("x-studio-token")
            .and_then(|v| v.to_str().ok());
        if header.is_some_and(|t| same(t, token)) {
            return Ok(Authorized);
        }
        let in_query = parts
            .uri
            .query()
            .into_iter()
            .flat_map(|q| q.split('&'))
            .any(|kv| kv.strip_prefix("token=").is_some_and(|t| same(t, token)));
        match (in_query, parts.method == Method::GET) {
            (true, true) => Ok(Authorized),
            (true, false) => Err(ApiError::TokenNotInHeader),
            (false, _) => Err(ApiError::Unauthorized),
        }
    }
}

/// The one parameter of a route's path (a session's `id`, a report's
/// `index`), percent-decoded. One that does not decode (not UTF-8) is a
/// 400 naming it, as JSON like every error of the API (`"kind":
/// "parameter"`), not axum's plain text.
pub(crate) struct PathParam(pub(crate) String);

impl FromRequestParts<Shared> for PathParam {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &Shared) -> Result<Self, ApiError> {
        match Path::<String>::from_request_parts(parts, app).await {
            Ok(Path(value)) => Ok(PathParam(value)),
            Err(rejection) => {
                use axum::extract::path::ErrorKind;
                use axum::extract::rejection::PathRejection;
                let name = match &rejection {
                    PathRejection::FailedToDeserializePathParams(e) => match e.kind() {
                        ErrorKind::InvalidUtf8InPathParam { key }
                        | ErrorKind::ParseErrorAtKey { key, .. } => key.clone(),
                        _ => String::new(),
                    },
                    _ => String::new(),
                };
                // Every route's parameter is its path's third segment
                // (`/api/sessions/{id}…`, `/api/evals/{index}`), as sent.
                let raw = parts.uri.path().split('/').nth(3).unwrap_or_default();
                Err(query::bad(&name, raw, rejection.body_text()))
            }
        }
    }
}

/// A write a browser could only have sent from the studio's own page: its
/// body is JSON (which a page of another site cannot post without a
/// preflight, which the studio does not answer), and the origin it names,
/// if any, is the one the request is addressed to. A client that is no
/// browser names no origin. A mounted studio has no token of its own, so
/// this is what keeps another site's page from writing through a
/// visitor's browser.
pub(crate) struct SameOriginJson;

impl FromRequestParts<Shared> for SameOriginJson {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &Shared) -> Result<Self, ApiError> {
        let text = |name| {
            parts
                .headers
                .get(name)
                .map(|v| v.to_str().unwrap_or("(not text)").trim().to_owned())
        };
        let kind = text(header::CONTENT_TYPE).unwrap_or_default();
        let mime = kind.split(';').next().unwrap_or_default().trim();
        if !mime.eq_ignore_ascii_case("application/json") {
            return Err(ApiError::NotJson(kind));
        }
        if let Some(origin) = text(header::ORIGIN) {
            let host = text(header::HOST)
                .or_else(|| parts.uri.authority().map(|a| a.to_string()))
                .unwrap_or_default();
            let own = !host.is_empty()
                && ["http://", "https://"].iter().any(|scheme| {
                    origin
                        .get(..scheme.len())
                        .is_some_and(|s| s.eq_ignore_ascii_case(scheme))
                        && origin[scheme.len()..].eq_ignore_ascii_case(&host)
                });
            if !own {
                return Err(ApiError::ForeignOrigin { origin, host });
            }
        }
        Ok(SameOriginJson)
    }
}

async fn info(State(app): State<Shared>, _: Authorized) -> Json<Value> {
    Json(json!({
        "title": app.title,
        "mode": if app.source.agent_id().is_some() { "agent" } else { "read_only" },
        "agent": app.source.agent_id(),
        "writable": app.source.agent_id().is_some(),
        "graph": app.source.graph().map(|g| g.source),
        "phases": PHASES,
        "memory": app.memory.is_some(),
        "evals": !app.reports.is_empty(),
        // A copy taken once shows nothing written after: not live.
        "snapshot": app.snapshot.map(|at| json!({ "taken_at": at })),
    }))
}

/// The name of the header saying how to ask for the next page of
/// `GET /api/sessions`: the `after` to send, percent-encoded.
pub(crate) const NEXT_AFTER: &str = "x-next-after";

/// `GET /api/sessions?q=&phase=&agent=&limit=&after=`: a page of the
/// sessions (see [`view::page`]), newest first, as a JSON array, then
/// each session looked at whose head does not read, as `{"id",
/// "unreadable": true, "record", "error"}` ([`Unreadable`]); when more
/// follow, the `x-next-after` header holds the `after` of the next page
/// (percent-encoded, ready for the query string).
async fn sessions(
    State(app): State<Shared>,
    _: Authorized,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let query = Query::parse(
        raw.as_deref(),
        &["q", "phase", "agent", "limit", "after"],
        &[],
    )?;
    let phase = match query.get("phase").filter(|p| !p.is_empty()) {
        Some(p) if !PHASES.contains(&p) => {
            return Err(query::bad(
                "phase",
                p,
                format!("a phase is one of {}", PHASES.join(", ")),
            ));
        }
        other => other,
    };
    let limit = query.limit(view::SESSIONS_PAGE)?;
    let after = match query.get("after") {
        Some("") => {
            return Err(query::bad(
                "after",
                "",
                "empty: a cursor is the `x-next-after` of an earlier page".into(),
            ));
        }
        other => other.map(SessionId::from),
    };
    let q = query.get("q").unwrap_or_default().trim().to_lowercase();
    let agent = query.get("agent").filter(|a| !a.is_empty());
    let page = view::page(app.source.store(), after.as_ref(), limit, |s| {
        !app.hidden.contains(&s.agent)
            && phase.is_none_or(|p| s.phase == p)
            && agent.is_none_or(|a| s.agent == a)
            && (q.is_empty() || s.matches(&q))
    })
    .await?;
    let next = page.next.clone();
    let mut response = Json(page.entries()).into_response();
    if let Some(next) = next
        && let Ok(value) = HeaderValue::from_str(&query::encode(next.as_str()))
    {
        response.headers_mut().insert(NEXT_AFTER, value);
    }
    Ok(response)
}

async fn session(
    State(app): State<Shared>,
    _: Authorized,
    PathParam(id): PathParam,
) -> Result<Response, ApiError> {
    let id = SessionId::from(id);
    let head = view::head(app.source.store(), &id).await?;
    let log = view::log(app.source.store(), &head).await?;
    let shape = match &head.phase {
        SessionPhase::Interrupted { interrupt } => shape_for(&app, interrupt)
            .map(|(_, s)| json!({ "type": s.type_name, "schema": s.schema }))
            .or_else(|| approval::request_of(&interrupt.payload).map(|_| approval::shape())),
        _ => None,
    };
    let mut detail = view::detail(&*app.source, &head, &log, shape);
    if let SessionPhase::Interrupted { interrupt } = &head.phase {
        detail.refused = app
            .refused
            .of(&id, &interrupt.id)
            .map(|r| json!({ "interrupt": r.interrupt, "reason": r.reason }));
    }
    Ok(Json(detail).into_response())
}

/// `GET /api/sessions/{id}/summary`: the session as the list shows it,
/// from its head alone (not its log), or a 404 when the store holds no
/// such session: how the page tells whether a session named elsewhere (a
/// run of an eval report) is in this store, wherever it is in the list.
/// It takes no parameter (a 400 names one given).
async fn summary(
    State(app): State<Shared>,
    _: Authorized,
    PathParam(id): PathParam,
    RawQuery(raw): RawQuery,
) -> Result<Json<Summary>, ApiError> {
    Query::parse(raw.as_deref(), &[], &[])?;
    let store = app.source.store();
    let head = view::head(store, &SessionId::from(id)).await?;
    Ok(Json(Summary::of(&head, store.now())))
}

/// The answer declared for the step an interrupt asks from: by its node
/// (`review/ask` for step `ask` of the sub-agent run by step `review`),
/// else by the step's name.
fn shape_for<'a>(app: &'a App, interrupt: &Interrupt) -> Option<(String, &'a AnswerShape)> {
    let node = app
        .source
        .graph()
        .and_then(|g| g.node_for(&interrupt.path, &interrupt.step));
    node.into_iter()
        .chain([interrupt.step.clone()])
        .find_map(|key| app.shapes.get(&key).map(|s| (key, s)))
}

/// Runs `work` (merging a session's states: as long as its log) on a
/// thread that may block, not on the server's own.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ApiError::Failed(e.to_string()))?
}

/// `GET /api/sessions/{id}/timeline?path=&offset=&limit=`: a page of the
/// session's records (see [`view::timeline`]). `path` keeps a task's
/// records and those of the tasks inside it (empty: the run's own loop
/// alone; a path that is no task's path is refused, [`query::task_path`]); `offset` is the position of the page's first record among
/// those kept (without it, the last page); `limit` the records per page
/// (default and most: [`view::TIMELINE_PAGE`]). Each is read strictly, as
/// [`Query::parse`] says: a bad one is a 400 naming it.
async fn timeline(
    State(app): State<Shared>,
    _: Authorized,
    PathParam(id): PathParam,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let query = Query::parse(raw.as_deref(), &["path", "offset", "limit"], &[])?;
    let only = query
        .get("path")
        .map(|p| query::task_path("path", p))
        .transpose()?;
    let offset = query
        .whole("offset", 0, u64::MAX)?
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    let page = view::Page {
        offset,
        limit: query.limit(view::TIMELINE_PAGE)?,
    };
    let id = SessionId::from(id);
    let head = view::head(app.source.store(), &id).await?;
    let log = view::log(app.source.store(), &head).await?;
    let source = Arc::clone(&app.source);
    let timeline =
        blocking(move || view::timeline(&*source, &head, &log, only.as_ref(), page)).await?;
    Ok(Json(timeline).into_response())
}

/// `GET /api/sessions/{id}/state?seq=&pointer=&offset=`: the state after
/// checkpoint `seq` (the last without it), bounded as [`trim`] says: whole
/// within 256 KiB, else cut, each cut listed in `cuts` by its JSON pointer
/// in the whole answer (`/state/log`, `/updates/0/value/text`). With
/// `pointer`, the value there alone, as `{pointer, offset, value, cuts}`
/// (a string previewed up to 256 KiB); with `offset` too, an array's or
/// object's entries from there.
async fn state(
    State(app): State<Shared>,
    _: Authorized,
    PathParam(id): PathParam,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let query = Query::parse(raw.as_deref(), &["seq", "pointer", "offset"], &[])?;
    let seq = query.whole("seq", 0, u64::MAX)?;
    let pointer = query.get("pointer").map(str::to_owned);
    if let Some(p) = &pointer
        && !p.starts_with('/')
    {
        return Err(query::bad(
            "pointer",
            p,
            "a JSON pointer starts with `/` (`/state/log/3`), as a cut's `pointer` does".into(),
        ));
    }
    let offset = query
        .whole("offset", 0, u64::MAX)?
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    if offset.is_some() && pointer.is_none() {
        return Err(query::bad(
            "offset",
            query.get("offset").unwrap_or_default(),
            "an offset is into the array or object at `pointer`, which is missing".into(),
        ));
    }
    let id = SessionId::from(id);
    let head = view::head(app.source.store(), &id).await?;
    let log = view::log(app.source.store(), &head).await?;
    let source = Arc::clone(&app.source);
    let body = blocking(move || {
        let state = view::state_at(&*source, &head, &log, seq)?;
        let document = serde_json::to_value(&state).map_err(|e| ApiError::Failed(e.to_string()))?;
        drop(state);
        let Some(pointer) = pointer else {
            let trimmed = trim::document(document);
            let mut body = trimmed.value;
            body["cuts"] = json!(trimmed.cuts);
            return Ok(body);
        };
        let at = seq.unwrap_or(head.last_seq);
        let trimmed = trim::at(document, &pointer, offset).map_err(|missing| match missing {
            trim::Missing::Pointer => query::bad(
                "pointer",
                &pointer,
                format!("the state after checkpoint {at} has no value there"),
            ),
            trim::Missing::Offset(Some(len)) => query::bad(
                "offset",
                &offset.unwrap_or_default().to_string(),
                format!("the value at {pointer:?} has {len} entries"),
            ),
            trim::Missing::Offset(None) => query::bad(
                "offset",
                &offset.unwrap_or_default().to_string(),
                format!("the value at {pointer:?} is no array or object"),
            ),
        })?;
        Ok(json!({
            "seq": at,
            "pointer": pointer,
            "offset": offset.unwrap_or(0),
            "value": trimmed.value,
            "cuts": trimmed.cuts,
        }))
    })
    .await?;
    Ok(Json(body).into_response())
}

/// A JSON body, refused with a typed error that says what is wrong.
/// The largest body a write takes (an answer, a fork's update): 2 MiB.
const BODY_LIMIT: usize = 2 << 20;

/// A write's body read as `T`: a body over [`BODY_LIMIT`] or cut off is
/// refused as JSON like every other error (axum's own refusal is plain
/// text).
fn body<T: serde::de::DeserializeOwned>(
    raw: Result<axum::body::Bytes, BytesRejection>,
    what: &str,
) -> Result<T, ApiError> {
    let raw = raw.map_err(|rejection| {
        if rejection.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::TooLarge { limit: BODY_LIMIT }
        } else {
            ApiError::BadRequest(format!("{what}: the body could not be read: {rejection}"))
        }
    })?;
    serde_json::from_slice(&raw).map_err(|e| ApiError::BadRequest(format!("{what}: {e}")))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AnswerBody {
    interrupt: String,
    answer: Value,
}

async fn answer(
    State(app): State<Shared>,
    _: Authorized,
    _: SameOriginJson,
    PathParam(id): PathParam,
    raw: Result<axum::body::Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    if app.source.agent_id().is_none() {
        return Err(ApiError::ReadOnly);
    }
    let request: AnswerBody = body(raw, "an answer is {\"interrupt\": ID, \"answer\": JSON}")?;
    let id = SessionId::from(id);
    let head = view::head(app.source.store(), &id).await?;
    check_agent(&app, &head)?;
    let SessionPhase::Interrupted { interrupt } = &head.phase else {
        return Err(ApiError::NotWaiting {
            session: id,
            phase: Summary::of(&head, 0).phase.to_owned(),
        });
    };
    if interrupt.id.as_str() != request.interrupt {
        return Err(ApiError::WrongInterrupt {
            session: id,
            given: request.interrupt,
            pending: interrupt.id.to_string(),
        });
    }
    if let Some((step, shape)) = shape_for(&app, interrupt) {
        (shape.check)(&request.answer).map_err(|error| ApiError::AnswerShape {
            step,
            expected: shape.type_name.clone(),
            error,
        })?;
    }
    // The kit's tool-approval request: one decision per waiting call,
    // checked as the run checks it, so that a bad answer resumes nothing.
    if let Some(approval) = approval::request_of(&interrupt.payload) {
        approval::check(&approval, &request.answer)?;
    }
    let interrupt = interrupt.clone();
    let resumed = app.source.answer(&id, &interrupt, request.answer).await?;
    // The run reads the answer when the step that asked runs again: the
    // request waits (at most `answer_wait`) for whether it kept it, so that
    // a refused answer is answered as one, never as accepted.
    let (verdict, told) = tokio::sync::oneshot::channel::<Option<String>>();
    let changed = app.changed.clone();
    let refused = Arc::clone(&app.refused);
    let (session, answered) = (id.clone(), interrupt.id.clone());
    tokio::spawn(async move {
        let Resumed { mut run, kept } = resumed;
        let mut verdict = Some(verdict);
        let rejected = tokio::select! {
            rejected = &mut run => rejected,
            () = kept => {
                refused.record(&session, None);
                if let Some(v) = verdict.take() {
                    let _ = v.send(None);
                }
                run.await
            }
        };
        refused.record(
            &session,
            rejected.clone().map(|reason| Refusal {
                interrupt: answered,
                reason,
            }),
        );
        if let Some(v) = verdict.take() {
            let _ = v.send(rejected);
        }
        changed.send_modify(|n| *n += 1);
    });
    app.changed.send_modify(|n| *n += 1);
    let kept = match tokio::time::timeout(app.answer_wait, told).await {
        Ok(Ok(Some(reason))) => {
            return Err(ApiError::AnswerRejected {
                session: id,
                interrupt: interrupt.id.to_string(),
                step: interrupt.step.clone(),
                reason,
            });
        }
        Ok(Ok(None)) => true,
        // Still working on it (or its task ended without a word): a
        // refusal shows with the session (`refused`) when it comes.
        Ok(Err(_)) | Err(_) => false,
    };
    Ok((
        axum::http::StatusCode::ACCEPTED,
        Json(json!({ "session": id, "resumed": true, "kept": kept })),
    )
        .into_response())
}

fn check_agent(app: &App, head: &harness::session::StoredRun) -> Result<(), ApiError> {
    match app.source.agent_id() {
        Some(agent) if agent != head.agent_id => Err(ApiError::OtherAgent {
            session: head.session_id.clone(),
            owner: head.agent_id.clone(),
            agent: agent.to_owned(),
        }),
        _ => Ok(()),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ForkBody {
    index: u64,
    #[serde(default)]
    update: Value,
}

async fn fork(
    State(app): State<Shared>,
    _: Authorized,
    _: SameOriginJson,
    PathParam(id): PathParam,
    raw: Result<axum::body::Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    if app.source.agent_id().is_none() {
        return Err(ApiError::ReadOnly);
    }
    let request: ForkBody = body(raw, "a fork is {\"index\": STEPS, \"update\": JSON}")?;
    let id = SessionId::from(id);
    let head = view::head(app.source.store(), &id).await?;
    check_agent(&app, &head)?;
    if request.index > head.steps {
        return Err(ApiError::ForkIndex {
            session: id,
            index: request.index,
            steps: head.steps,
        });
    }
    let fork = app.source.fork(&id, request.index, request.update).await?;
    app.changed.send_modify(|n| *n += 1);
    Ok((
        axum::http::StatusCode::CREATED,
        Json(json!({ "session": fork, "from": id, "index": request.index })),
    )
        .into_response())
}

/// The most sessions an event stream follows: the heads it loads at each
/// look, besides new sessions and those the client names.
pub(crate) const FOLLOWED: usize = 200;

/// The most new sessions an event stream loads at one look; those past it
/// are new at the next look.
pub(crate) const NEW_PER_LOOK: usize = 100;

/// The most sessions a client names with `watch=`.
pub(crate) const WATCH_IDS: usize = 20;

/// A session an event stream follows: the version it last sent (`None`:
/// it sent the session as [`Unreadable`], its head not reading), and when
/// the session last changed (the least recently changed are let go first;
/// an unreadable one first of all).
struct Followed {
    version: Option<u64>,
    updated_at: u64,
}

/// How an event stream finds the sessions that appeared since its last look.
enum NewSessions {
    /// Not known before the first look.
    Unknown,
    /// From this position of the store's feed of created sessions
    /// ([`SessionStore::created_since`](harness::session::SessionStore::created_since)):
    /// a look costs the sessions created since the last.
    Feed(u64),
    /// The store keeps no feed: the store's ids at the last look, a session
    /// not among them new (a look costs a listing of every id).
    Listed(HashSet<SessionId>),
}

impl NewSessions {
    /// From now on: the feed's position, or the store's ids.
    async fn start(store: &dyn harness::session::SessionStore) -> Result<Self, ApiError> {
        let feed = store
            .created_since(None, 0)
            .await
            .map_err(view::listing_error)?;
        Ok(match feed {
            Some(feed) => Self::Feed(feed.next),
            None => Self::Listed(view::listing(store).await?.into_iter().collect()),
        })
    }
}

/// The event stream's position: where new sessions are found from, and
/// the sessions it follows.
struct Watch {
    app: Shared,
    changed: watch::Receiver<u64>,
    stopping: watch::Receiver<bool>,
    new: NewSessions,
    /// At most [`FOLLOWED`], besides `pinned`.
    followed: HashMap<SessionId, Followed>,
    /// The sessions the client named (`watch=`): followed while they exist,
    /// never let go.
    pinned: Vec<SessionId>,
    first: bool,
    queue: VecDeque<Event>,
}

fn event(name: &str, data: &impl serde::Serialize) -> Event {
    let mut data = match serde_json::to_value(data) {
        Ok(data) => data,
        Err(e) => return Event::default().event("error").data(e.to_string()),
    };
    redact::json(&mut data);
    Event::default()
        .event(name)
        .json_data(data)
        .unwrap_or_else(|e| Event::default().event("error").data(e.to_string()))
}

impl Watch {
    /// Looks at the store and queues what changed: on the first look the
    /// first page of the list and the sessions named (`sessions`), then
    /// each followed session that changed, each new one (`session`) and
    /// each followed one gone (`removed`).
    async fn look(&mut self) {
        if let Err(e) = self.try_look().await {
            self.queue
                .push_back(event("error", &json!({ "error": e.to_string() })));
        }
    }

    /// A session as the list shows it, unless gone or hidden; one whose
    /// head does not read is [`Unreadable`] (whose agent cannot be told,
    /// so never hidden), not a failure of the look.
    async fn load(&self, id: &SessionId, now: u64) -> Result<Option<Listed>, ApiError> {
        Ok(view::listed(self.app.source.store(), id, now)
            .await?
            .filter(|l| match l {
                Listed::Session(s) => !self.app.hidden.contains(&s.agent),
                Listed::Unreadable(_) => true,
            }))
    }

    /// The version the stream last sent of the session `id`: `Some(None)`
    /// when it sent it unreadable, `None` when it follows it not.
    fn sent(&self, id: &SessionId) -> Option<Option<u64>> {
        self.followed.get(id).map(|f| f.version)
    }

    fn follow(&mut self, entry: &Listed) {
        let (id, followed) = match entry {
            Listed::Session(s) => (
                &s.id,
                Followed {
                    version: Some(s.version),
                    updated_at: s.updated_at,
                },
            ),
            Listed::Unreadable(Unreadable { id, .. }) => (
                id,
                Followed {
                    version: None,
                    updated_at: 0,
                },
            ),
        };
        self.followed.insert(id.clone(), followed);
    }

    async fn try_look(&mut self) -> Result<(), ApiError> {
        let app = Arc::clone(&self.app);
        let store = app.source.store();
        let now = store.now();
        if self.first {
            self.first = false;
            // Before the first page, so that a session created meanwhile
            // is new at the next look (and sent once: it is followed).
            self.new = NewSessions::start(store).await?;
            let hidden = &app.hidden;
            let page = view::page(store, None, view::SESSIONS_PAGE.0, |s| {
                !hidden.contains(&s.agent)
            })
            .await?;
            let mut list = page.entries();
            for id in self.pinned.clone() {
                if !list.iter().any(|l| l.id() == &id)
                    && let Some(l) = self.load(&id, now).await?
                {
                    list.push(l);
                }
            }
            for s in &list {
                self.follow(s);
            }
            self.queue.push_back(event("sessions", &list));
            return Ok(());
        }
        // The sessions followed, and those named that were not there yet.
        let mut known: Vec<SessionId> = self.followed.keys().cloned().collect();
        known.extend(
            self.pinned
                .iter()
                .filter(|id| !self.followed.contains_key(*id))
                .cloned(),
        );
        for id in known {
            match self.load(&id, now).await? {
                Some(l) => {
                    // Sent when it changed, or turned unreadable (once),
                    // or readable again.
                    if self.sent(&id) != Some(l.version()) {
                        self.queue.push_back(event("session", &l));
                    }
                    self.follow(&l);
                }
                None => {
                    if self.followed.remove(&id).is_some() {
                        self.queue.push_back(event("removed", &json!({ "id": id })));
                    }
                }
            }
        }
        // New sessions, a bounded number per look; where the next look
        // finds them from is kept only once they are sent.
        let (new, then) = match &self.new {
            NewSessions::Feed(at) => {
                let page = store
                    .created_since(Some(*at), NEW_PER_LOOK)
                    .await
                    .map_err(view::listing_error)?
                    .ok_or_else(|| {
                        view::listing_error(harness::session::StoreError::backend(
                            "the store's feed of created sessions is gone",
                        ))
                    })?;
                (page.sessions, NewSessions::Feed(page.next))
            }
            NewSessions::Listed(before) => {
                let ids = view::listing(store).await?;
                let mut listed = HashSet::with_capacity(ids.len());
                let mut new = Vec::new();
                for id in ids {
                    if !before.contains(&id) {
                        if new.len() == NEW_PER_LOOK {
                            // Left unlisted: new again at the next look.
                            continue;
                        }
                        new.push(id.clone());
                    }
                    listed.insert(id);
                }
                (new, NewSessions::Listed(listed))
            }
            // The first look failed before it knew: from now on.
            NewSessions::Unknown => (Vec::new(), NewSessions::start(store).await?),
        };
        for id in new {
            if !self.followed.contains_key(&id)
                && let Some(l) = self.load(&id, now).await?
            {
                self.queue.push_back(event("session", &l));
                self.follow(&l);
            }
        }
        self.new = then;
        // Lets go of the least recently changed past the bound.
        while self.followed.len() > FOLLOWED + self.pinned.len() {
            let oldest = self
                .followed
                .iter()
                .filter(|(id, _)| !self.pinned.contains(id))
                .min_by_key(|(id, f)| (f.updated_at, (*id).clone()))
                .map(|(id, _)| id.clone());
            match oldest {
                Some(id) => self.followed.remove(&id),
                None => break,
            };
        }
        Ok(())
    }
}

/// `GET /api/events?watch=ID&watch=ID`: the event stream. It follows a
/// bounded set of sessions (see the crate's docs): the first page of the
/// list, the sessions that appear after, and those named by `watch` (at
/// most [`WATCH_IDS`]), so that a look costs a bounded number of heads
/// however many sessions the store holds, and the ids created since the
/// last look (a listing of every id on a store that keeps no feed of
/// created sessions).
async fn events(
    State(app): State<Shared>,
    _: Authorized,
    RawQuery(raw): RawQuery,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let query = Query::parse(raw.as_deref(), &["watch"], &["watch"])?;
    let mut pinned: Vec<SessionId> = Vec::new();
    for id in query.all("watch") {
        if id.is_empty() {
            return Err(query::bad(
                "watch",
                id,
                "empty: name a session by its id".into(),
            ));
        }
        if pinned.len() == WATCH_IDS {
            return Err(query::bad(
                "watch",
                id,
                format!("a stream follows at most {WATCH_IDS} sessions named by `watch`"),
            ));
        }
        let id = SessionId::from(id);
        if !pinned.contains(&id) {
            pinned.push(id);
        }
    }
    let watch = Watch {
        changed: app.changed.subscribe(),
        stopping: app.stopping.clone(),
        app,
        new: NewSessions::Unknown,
        followed: HashMap::new(),
        pinned,
        first: true,
        queue: VecDeque::new(),
    };
    let stream = futures::stream::unfold(watch, |mut w| async move {
        loop {
            // Stopped, or the `Serving` dropped (which stops the server).
            if *w.stopping.borrow() || w.stopping.has_changed().is_err() {
                return None;
            }
            if let Some(e) = w.queue.pop_front() {
                return Some((Ok(e), w));
            }
            if !w.first {
                let poll = w.app.poll;
                tokio::select! {
                    _ = tokio::time::sleep(poll) => {}
                    _ = w.changed.changed() => {}
                    _ = w.stopping.changed() => {}
                }
            }
            w.look().await;
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

#[cfg(test)]
mod tests {
    use super::{INDEX_HTML, Page, REBASED, STUDIO_JS, check_base};

    #[test]
    fn each_url_the_assets_call_their_own_occurs_once() {
        for (from, _) in REBASED {
            let found = INDEX_HTML.matches(from).count() + STUDIO_JS.matches(from).count();
            assert_eq!(found, 1, "`{from}` is in the assets {found} times");
        }
    }

    #[test]
    fn a_mounted_page_calls_every_url_under_its_path() {
        let root = Page::at("");
        assert_eq!(root.html, INDEX_HTML);
        assert_eq!(root.script, STUDIO_JS);
        let mounted = Page::at("/tools/studio");
        assert!(mounted.html.contains("href=\"/tools/studio/studio.css\""));
        assert!(mounted.html.contains("src=\"/tools/studio/studio.js\""));
        assert!(mounted.script.contains("fetch('/tools/studio' + path, "));
        assert!(
            mounted
                .script
                .contains("new EventSource('/tools/studio/api/events")
        );
        assert!(!mounted.script.contains("EventSource('/api/"));
    }

    #[test]
    fn a_mount_path_is_a_plain_path_below_the_root() {
        for good in ["/studio", "/a/b-c_d.e", "/S2"] {
            assert!(check_base(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "/",
            "studio",
            "/studio/",
            "//studio",
            "/a//b",
            "/a/../b",
            "/st'udio",
            "/st\"udio",
            "/st udio",
            "/é",
        ] {
            assert!(check_base(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
