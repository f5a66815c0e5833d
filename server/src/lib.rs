#![doc = include_str!("docs/crate.md")]
#![forbid(unsafe_code)]

// The modules, each using only those above it.
mod error;
mod limits;
mod time;

mod schedule;

mod graph;
mod record;

mod app;
mod served;

mod stream;

mod guard;

mod assistants;
mod threads;

mod webhook;

mod replica;
mod runs;
mod store;

mod protocol;

mod crons;

pub use error::{ApiError, ServeError};
pub use guard::Scope;
pub use replica::Replicas;
pub use webhook::Webhooks;

use app::{App, Runs, Shared};
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use harness::session::{SessionStore, now_millis};
use harness::slots::{Context, NoSlots};
use harness::{Agent, Harness, HarnessState};
use served::{Served, Typed};
use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The address [`Server::serve`] listens on by default: this machine only,
/// on LangGraph's development port.
pub const DEFAULT_ADDR: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 2024);

/// How long a stopping server waits for its runs by default.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(10);

/// The largest request body accepted by default (1 MiB).
pub const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;

/// How long a request that does not wait for a run may take by default
/// (see [`Server::request_timeout`]).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a client may take to send a request's head by default (see
/// [`Server::header_read_timeout`]).
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest [`Server::header_read_timeout`] kept (a year): a longer one,
/// `Duration::MAX` included, is this.
pub const MAX_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(365 * 86_400);

/// How many streams may be open at once by default (see
/// [`Server::max_streams`]).
pub const DEFAULT_MAX_STREAMS: usize = 4096;

/// How many runs may wait to start at once by default (see
/// [`Server::max_waiting_runs`]).
pub const DEFAULT_MAX_WAITING_RUNS: usize = 10_000;

/// Where [`Server::studio`] serves the studio.
#[cfg(feature = "studio")]
pub const DEFAULT_STUDIO_PATH: &str = "/studio";

/// The first segments of the server's own paths, which a studio cannot be
/// mounted under.
#[cfg(feature = "studio")]
const OWN_PATHS: [&str; 7] = [
    "info",
    "ok",
    "assistants",
    "agents",
    "threads",
    "runs",
    "store",
];

/// An HTTP server for a set of agents, speaking the Agent Protocol in its
/// own shape and in the one the LangGraph SDK clients call. See the
/// [crate docs](crate).
pub struct Server {
    agents: Vec<Arc<dyn Served>>,
    store: Option<Arc<dyn SessionStore>>,
    body_limit: usize,
    allow_remote: bool,
    guard: guard::Guard,
    grace: Duration,
    memory: Option<harness::memory::Memory>,
    webhooks: Option<Webhooks>,
    request_timeout: Duration,
    header_read_timeout: Duration,
    max_streams: usize,
    max_waiting_runs: usize,
    replicas: Option<Replicas>,
    runs_kept: usize,
    #[cfg(feature = "studio")]
    studio: Option<(String, harness_studio::Studio)>,
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Server")
            .field(
                "agents",
                &self.agents.iter().map(|a| a.id()).collect::<Vec<_>>(),
            )
            .field("body_limit", &self.body_limit)
            .field("allow_remote", &self.allow_remote)
            .field("keys", &self.guard.keys.len())
            .field("origins", &self.guard.origins)
            .field("request_timeout", &self.request_timeout)
            .field("header_read_timeout", &self.header_read_timeout)
            .field("max_streams", &self.max_streams)
            .field("max_waiting_runs", &self.max_waiting_runs)
            .finish_non_exhaustive()
    }
}

impl Default for Server {
    fn default() -> Self {
        Self::new()
    }
}

impl Server {
    /// A server with no agent yet.
    pub fn new() -> Self {
        Self {
            agents: Vec::new(),
            store: None,
            body_limit: DEFAULT_BODY_LIMIT,
            allow_remote: false,
            guard: guard::Guard::default(),
            grace: DEFAULT_GRACE,
            memory: None,
            webhooks: None,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            max_streams: DEFAULT_MAX_STREAMS,
            max_waiting_runs: DEFAULT_MAX_WAITING_RUNS,
            replicas: None,
            runs_kept: app::DEFAULT_RUNS_KEPT_IN_ALL,
            #[cfg(feature = "studio")]
            studio: None,
        }
    }

    /// Serves `agent` (built from `harness`, whose session store keeps its
    /// threads) as the assistant named by its id, which is also its graph
    /// id.
    #[must_use]
    pub fn agent<S: HarnessState, C: Context>(
        mut self,
        agent: &Agent<S, C>,
        harness: &Harness<S, C>,
    ) -> Self
    where
        C::Run: NoSlots,
    {
        self.agents.push(Arc::new(Typed::new(agent, harness)));
        self
    }

    /// The session store of the agents' harnesses: the server keeps its
    /// thread records there too, beside the sessions.
    #[must_use]
    pub fn store(mut self, store: Arc<dyn SessionStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// How many settled runs the server remembers in memory in all
    /// (default 10 000; each thread's latest 100 at most), with their
    /// streams, for `get`, `join` and `join_stream`: beyond it the oldest
    /// settled ones are forgotten (a 404 then; their threads' state stays
    /// in the store). Runs under way are always kept.
    #[must_use]
    pub fn runs_kept(mut self, runs: usize) -> Self {
        self.runs_kept = runs.max(1);
        self
    }

    /// Makes this server one of several replicas sharing its session store
    /// (PostgreSQL or Redis) behind one address: every run is kept in the
    /// store, so any replica serves any run (`get`, `join`, `join_stream`,
    /// `wait`, `cancel`), the store decides each thread's multitask
    /// strategy, and a run whose replica dies is taken over by another
    /// once its lease lapses and continued from its last checkpoint. See
    /// [`Replicas`] and the crate docs' "Replicas".
    ///
    /// Without it, a server keeps its runs in memory: faster, and right
    /// for one process whose runs waiting to start may be lost when it
    /// stops. A lone server that must keep them across a restart is made a
    /// replica of its own, on a store that persists (sled included).
    #[must_use]
    pub fn replicas(mut self, replicas: Replicas) -> Self {
        self.replicas = Some(replicas);
        self
    }

    /// Serves `memory` at the store endpoints (`put_item`, `get_item`,
    /// `delete_item`, `search_items`, `list_namespaces`): the long-term
    /// memory the agents share, read and written by clients too.
    #[must_use]
    pub fn memory(mut self, memory: harness::memory::Memory) -> Self {
        self.memory = Some(memory);
        self
    }

    /// Lets runs call back when they settle (a run's `webhook`), as
    /// `webhooks` allows and signs; without it, a run with a webhook is
    /// refused with a 422.
    #[must_use]
    pub fn webhooks(mut self, webhooks: Webhooks) -> Self {
        self.webhooks = Some(webhooks);
        self
    }

    /// The largest request body accepted, in bytes (default
    /// [`DEFAULT_BODY_LIMIT`]); a larger one is refused with a 413.
    #[must_use]
    pub fn body_limit(mut self, bytes: usize) -> Self {
        self.body_limit = bytes;
        self
    }

    /// Lets [`bind`](Self::bind) listen on an address other machines can
    /// reach; without it, only loopback addresses are accepted. Such a
    /// server must have an [`api_key`](Self::api_key).
    #[must_use]
    pub fn allow_remote(mut self) -> Self {
        self.allow_remote = true;
        self
    }

    /// Accepts requests with this key (in the `x-api-key` header, as the
    /// LangGraph SDK sends it, or as `Authorization: Bearer <key>`), with
    /// what `scope` allows. Once a key is set, a request without one of
    /// the keys is refused with a 401, and one beyond its key's scope with
    /// a 403 (`GET /ok` stays open, for health checks).
    #[must_use]
    pub fn api_key(mut self, key: impl Into<String>, scope: Scope) -> Self {
        self.guard.keys.push(guard::Key {
            secret: key.into(),
            scope,
        });
        self
    }

    /// Lets pages of the web origin `origin` (`https://app.example.com`)
    /// call the server from a browser (CORS). A request that carries any
    /// other origin is refused with a 403: a page of another site cannot
    /// drive the server.
    #[must_use]
    pub fn cors_origin(mut self, origin: impl Into<String>) -> Self {
        self.guard.origins.push(origin.into());
        self
    }

    /// How long a request may take (default [`DEFAULT_REQUEST_TIMEOUT`],
    /// 30 s); one that takes longer is answered with a 504 whose `error` is
    /// `timeout` and whose message names the limit; what it did may be
    /// partly done. Not timed: the requests that wait for a run by design
    /// (`runs/wait`, `join`, `cancel` with `wait`), and a stream's events
    /// (its response is timed until its run has started; then the events
    /// flow for as long as the run lasts).
    #[must_use]
    pub fn request_timeout(mut self, limit: Duration) -> Self {
        self.request_timeout = limit;
        self
    }

    /// How long a client of [`Bound::serve`] may take to send a request's
    /// head, its request line and headers (default
    /// [`DEFAULT_HEADER_READ_TIMEOUT`], 30 s), timed from when the server
    /// starts reading it: a connection that sends part of a head, or
    /// nothing, is closed then, so that slow or idle clients do not hold
    /// the server's connections. A connection kept alive between requests
    /// is closed when the next request's head does not come in time. The
    /// body and the response are not timed by it (see
    /// [`request_timeout`](Self::request_timeout)). Not applied to a
    /// [`router`](Self::router) served by the application. Kept between a
    /// millisecond and [`MAX_HEADER_READ_TIMEOUT`] (a year: "no limit").
    #[must_use]
    pub fn header_read_timeout(mut self, limit: Duration) -> Self {
        // Kept between a millisecond and a year: zero would close every
        // connection, and `Duration::MAX` ("no limit") overflows the timer.
        self.header_read_timeout = limit.clamp(Duration::from_millis(1), MAX_HEADER_READ_TIMEOUT);
        self
    }

    /// How many run streams (`runs/stream`, `join_stream`) may be open at
    /// once (default [`DEFAULT_MAX_STREAMS`], 4096); one more is refused
    /// with a 429 whose `error` is `too_many_streams` and whose message
    /// names the limit, before its run starts. A stream counts until it
    /// ends or its client goes away. The studio's event stream (one per
    /// open page, with [`studio`](Self::studio)) counts too.
    #[must_use]
    pub fn max_streams(mut self, limit: usize) -> Self {
        self.max_streams = limit;
        self
    }

    /// How many runs may wait to start at once (default
    /// [`DEFAULT_MAX_WAITING_RUNS`], 10 000): runs queued behind the runs
    /// of their thread (`multitask_strategy` `enqueue`, `interrupt`,
    /// `rollback`) or delayed (`after_seconds`), each holding its task and
    /// input in this server's memory until it starts. One more is refused
    /// with a 429 whose `error` is `too_many_runs` and whose message names
    /// the limit, before anything is written. Runs that start at once do
    /// not count.
    #[must_use]
    pub fn max_waiting_runs(mut self, limit: usize) -> Self {
        self.max_waiting_runs = limit;
        self
    }

    /// Serves `studio` (a [`harness_studio::Studio`] over the server's own
    /// store: `Studio::read_only(store)` for every agent's sessions, or
    /// `Studio::for_agent(..)` to answer and fork one agent's) on the
    /// server's port at [`DEFAULT_STUDIO_PATH`] (`/studio`). See
    /// [`studio_at`](Self::studio_at).
    #[cfg(feature = "studio")]
    #[must_use]
    pub fn studio(self, studio: harness_studio::Studio) -> Self {
        self.studio_at(DEFAULT_STUDIO_PATH, studio)
    }

    /// Serves `studio` at `path` (`/studio`: its page at `/studio`, where
    /// `/studio/` leads, its API under `/studio/api/`), behind the server's own rules: the host
    /// names of a loopback server, the CORS origins (a page of the server
    /// itself may call the studio's API), the request timeout, and, once
    /// [`api_key`](Self::api_key)s are set, a key (scope `read` to look,
    /// `run` to answer an interrupt or fork), given as the API takes it or
    /// as the studio's page sends its token: the `x-studio-token` header,
    /// or `?token=KEY` in the URL of a read (the page's URL is
    /// `/studio?token=KEY`; such a URL holds the key: give it to those
    /// who may use it is `/studio?token=KEY`). Without keys the studio is as open as the API (this
    /// machine only, on loopback). [`bind`](Self::bind) refuses a path
    /// that is not plain (`/` then letters, digits, `-`, `_`, `.`) or
    /// that lies under the server's own paths.
    #[cfg(feature = "studio")]
    #[must_use]
    pub fn studio_at(mut self, path: impl Into<String>, studio: harness_studio::Studio) -> Self {
        self.studio = Some((path.into(), studio));
        self
    }

    /// How long [`Bound::serve`] waits, once told to stop, for the runs
    /// under way to stop at their next step boundary (default 10 s).
    #[must_use]
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    fn build(mut self, hosts: Option<Vec<String>>) -> Result<(Router, Shared), ServeError> {
        if self.agents.is_empty() {
            return Err(ServeError::NoAgents);
        }
        let mut agents = BTreeMap::new();
        for agent in self.agents {
            let id = agent.id().to_string();
            if agents.insert(id.clone(), agent).is_some() {
                return Err(ServeError::DuplicateAgent(id));
            }
        }
        let store = self.store.ok_or(ServeError::NoStore)?;
        let app: Shared = Arc::new(App {
            agents,
            store,
            memory: self.memory,
            webhooks: self.webhooks,
            runs: Mutex::new(Runs::with_cap(self.runs_kept)),
            body_limit: self.body_limit,
            streams: limits::Streams::new(self.max_streams),
            waiting: limits::Waiting::new(self.max_waiting_runs),
            started_at: now_millis(),
            stopping: tokio::sync::watch::channel(false).0,
            runs_added: tokio::sync::watch::channel(0).0,
            replica: self.replicas.as_ref().map(replica::Replica::new),
        });
        self.guard.hosts = hosts;
        // Crons fire from every server sharing the store (each tick once).
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(crons::scheduler(Arc::clone(&app)));
            // Replicas take over the runs of those that died.
            if app.replica.is_some() {
                let _enter = runtime.enter();
                replica::reap(&app, runs::go_on);
            }
        }
        let timed = axum::middleware::from_fn_with_state(self.request_timeout, limits::timed);
        #[cfg_attr(not(feature = "studio"), allow(unused_mut))]
        let mut router = routes()
            .route_layer(timed.clone())
            .merge(waiting_routes())
            .fallback(no_route)
            .method_not_allowed_fallback(no_method)
            .layer(DefaultBodyLimit::max(self.body_limit))
            .with_state(Arc::clone(&app));
        #[cfg(feature = "studio")]
        if let Some((path, studio)) = self.studio {
            let first = path
                .trim_start_matches('/')
                .split('/')
                .next()
                .unwrap_or_default();
            if OWN_PATHS.contains(&first) {
                return Err(ServeError::Studio(format!(
                    "the studio cannot be served at `{path}`: `/{first}` is one of the server's \
                     own paths"
                )));
            }
            // The server's thread and cron records are its own.
            let studio = studio
                .hide_agent(threads::OWNER)
                .mount(&path, app.stopping.subscribe())
                .map_err(|e| ServeError::Studio(e.to_string()))?;
            router = router
                .nest(
                    &path,
                    studio
                        .route_layer(timed)
                        .route_layer(axum::middleware::from_fn_with_state(
                            app.streams.clone(),
                            limits::studio_stream,
                        )),
                )
                .route(&format!("{path}/"), get(studio_page));
            self.guard.studio = Some(path);
        }
        let router = router.layer(axum::middleware::from_fn_with_state(
            Arc::new(self.guard),
            guard::check,
        ));
        Ok((router, app))
    }

    /// The server as an axum [`Router`], to serve or to mount in an
    /// application's own router.
    pub fn router(self) -> Result<Router, ServeError> {
        Ok(self.build(None)?.0)
    }

    /// Listens on `addr` (a loopback address unless
    /// [`allow_remote`](Self::allow_remote)); port 0 picks a free port.
    /// Serve with [`Bound::serve`]. On a loopback address the server
    /// answers only to this machine's names (`localhost`, `127.0.0.1`,
    /// `[::1]`), so a web page whose name resolves to this machine cannot
    /// reach it.
    pub async fn bind(self, addr: SocketAddr) -> Result<Bound, ServeError> {
        let loopback = addr.ip().is_loopback();
        if !loopback && !self.allow_remote {
            return Err(ServeError::NotLoopback(addr));
        }
        if !loopback && self.guard.keys.is_empty() {
            return Err(ServeError::RemoteWithoutKeys(addr));
        }
        let grace = self.grace;
        let header_read_timeout = self.header_read_timeout;
        let (router, app) = self.build(loopback.then(guard::loopback_hosts))?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| ServeError::Io { addr, source })?;
        let local = listener
            .local_addr()
            .map_err(|source| ServeError::Io { addr, source })?;
        Ok(Bound {
            listener,
            router,
            app,
            grace,
            header_read_timeout,
            addr: local,
        })
    }

    /// Serves on [`DEFAULT_ADDR`] until the process ends.
    pub async fn serve(self) -> Result<(), ServeError> {
        self.bind(DEFAULT_ADDR)
            .await?
            .serve(std::future::pending())
            .await
    }
}

/// A server listening on its address; [`serve`](Self::serve) it.
pub struct Bound {
    listener: tokio::net::TcpListener,
    router: Router,
    app: Shared,
    grace: Duration,
    header_read_timeout: Duration,
    addr: SocketAddr,
}

impl fmt::Debug for Bound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bound")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Bound {
    /// The address it listens on (with the port picked, for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves until `shutdown` completes; then stops accepting, stops the
    /// runs under way at their next step boundary (waiting for them up to
    /// the [grace](Server::shutdown_grace)), so that their threads go on
    /// with the next run, and ends the streams still open (a stopped run's
    /// stream with an `error` event, `ServerStopping`). Runs waiting to
    /// start (queued or delayed), held in this server's memory, are lost
    /// with it (they settle `interrupted` for the clients still joined),
    /// unless it is a replica, even of its own. A
    /// [replica](Server::replicas) hands its runs over instead: stopped at
    /// a step boundary and released, for another replica to continue.
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        let app = self.app;
        let grace = self.grace;
        let stop = async move {
            shutdown.await;
            if app.replica.is_some() {
                // A replica hands its runs over: stopped at a step
                // boundary, their leases released, for another replica to
                // continue; the runs it follows go on where they run.
                let runs = replica::drain(&app);
                for run in &runs {
                    run.hand_over();
                }
                // Those not started yet are released at once (below).
                let running: Vec<_> = runs
                    .iter()
                    .filter(|r| r.status() == record::RunStatus::Running)
                    .collect();
                let settled = futures::future::join_all(running.iter().map(|r| r.settled()));
                if tokio::time::timeout(grace, settled).await.is_err() {
                    tracing::warn!(
                        "some runs did not reach a step boundary within the shutdown grace"
                    );
                }
                replica::flush_all(&app).await;
                app.stopping.send_replace(true);
                return;
            }
            let runs: Vec<_> = app
                .runs()
                .by_thread
                .values()
                .flatten()
                .filter(|r| !r.status().is_done())
                .cloned()
                .collect();
            for run in &runs {
                run.cancel_for_shutdown();
            }
            let settled = futures::future::join_all(runs.iter().map(|r| r.settled()));
            if tokio::time::timeout(grace, settled).await.is_err() {
                tracing::warn!("some runs did not reach a step boundary within the shutdown grace");
            }
            app.stopping.send_replace(true);
        };
        serve_connections(self.listener, self.router, self.header_read_timeout, stop).await;
        Ok(())
    }
}

/// Serves the connections `listener` accepts with `router` over HTTP/1.1
/// (with upgrades: the WebSocket of a thread's stream), each request's head
/// read within `header_read_timeout`, until `stop` completes; then accepts
/// no more, asks each connection to close once its response in flight is
/// sent, and waits for them all (as `axum::serve`'s graceful shutdown,
/// which sets no header read timeout).
async fn serve_connections(
    mut listener: tokio::net::TcpListener,
    router: Router,
    header_read_timeout: Duration,
    stop: impl Future<Output = ()> + Send + 'static,
) {
    use futures::FutureExt;
    use hyper_util::rt::{TokioIo, TokioTimer};
    // Dropped when `stop` completes: the connections are told by its
    // sender's `closed()`.
    let (signal_tx, signal_rx) = tokio::sync::watch::channel(());
    tokio::spawn(async move {
        stop.await;
        drop(signal_rx);
    });
    // Each connection holds a receiver until it ends.
    let (close_tx, close_rx) = tokio::sync::watch::channel(());
    loop {
        // Accept errors (out of file descriptors, ...) are waited out by
        // axum's listener.
        let (io, _) = tokio::select! {
            accepted = axum::serve::Listener::accept(&mut listener) => accepted,
            () = signal_tx.closed() => break,
        };
        let service = hyper_util::service::TowerToHyperService::new(
            router.clone().into_service::<hyper::body::Incoming>(),
        );
        let signal_tx = signal_tx.clone();
        let close_rx = close_rx.clone();
        tokio::spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(header_read_timeout);
            let conn = builder
                .serve_connection(TokioIo::new(io), service)
                .with_upgrades();
            let mut conn = std::pin::pin!(conn);
            let mut stopping = std::pin::pin!(signal_tx.closed().fuse());
            loop {
                tokio::select! {
                    result = conn.as_mut() => {
                        if let Err(e) = result {
                            tracing::trace!(error = %e, "a connection ended with an error");
                        }
                        break;
                    }
                    () = &mut stopping => conn.as_mut().graceful_shutdown(),
                }
            }
            drop(close_rx);
        });
    }
    drop(close_rx);
    drop(listener);
    close_tx.closed().await;
}

async fn info() -> axum::Json<serde_json::Value> {
    axum::Json(serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "server": "harness-server",
        "flags": {"assistants": true, "crons": true, "store": true},
    }))
}

/// `/studio/` (with its query) is the studio's page at `/studio`.
#[cfg(feature = "studio")]
async fn studio_page(uri: axum::http::Uri) -> axum::response::Redirect {
    let path = uri.path().trim_end_matches('/');
    match uri.query() {
        Some(query) => axum::response::Redirect::permanent(&format!("{path}?{query}")),
        None => axum::response::Redirect::permanent(path),
    }
}

async fn ok() -> axum::Json<serde_json::Value> {
    axum::Json(serde_json::json!({"ok": true}))
}

/// `METHOD /path` of a request, as an answer names it: the path only (a
/// query may hold a key), the process's secrets redacted.
fn call_of(method: &axum::http::Method, uri: &axum::http::Uri) -> String {
    harness::secrets::redact(&format!("{method} {}", uri.path())).into_owned()
}

async fn no_route(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    (
        StatusCode::NOT_FOUND,
        axum::Json(serde_json::json!({
            "error": "not_found",
            "message": format!(
                "`{}` is not supported by this server: no such path (see the crate docs of \
                 harness-server for what it serves)",
                call_of(&method, &uri)
            ),
        })),
    )
        .into_response()
}

async fn no_method(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        axum::Json(serde_json::json!({
            "error": "method_not_allowed",
            "message": format!(
                "`{}` is not supported by this server: this path does not take {method}",
                call_of(&method, &uri)
            ),
        })),
    )
        .into_response()
}

/// The routes that wait for a run by design: not timed.
fn waiting_routes() -> Router<Shared> {
    Router::new()
        .route("/threads/{id}/runs/wait", post(runs::wait_on_thread))
        .route("/threads/{id}/runs/{run}/join", get(runs::join))
        .route("/threads/{id}/runs/{run}/cancel", post(runs::cancel))
        .route("/runs/wait", post(runs::wait_stateless))
        .route("/runs/{run}/wait", get(protocol::wait_run))
        .route("/runs/{run}/cancel", post(protocol::cancel_run))
}

/// The routes timed by [`Server::request_timeout`].
fn routes() -> Router<Shared> {
    Router::new()
        .route("/info", get(info))
        .route("/ok", get(ok))
        .route("/assistants/search", post(assistants::search))
        .route("/assistants/{id}", get(assistants::get))
        .route("/assistants/{id}/graph", get(assistants::graph))
        .route("/assistants/{id}/schemas", get(assistants::schemas))
        .route("/threads", post(threads::create))
        .route("/threads/search", post(threads::search))
        .route(
            "/threads/{id}",
            get(threads::get)
                .delete(runs::delete_thread)
                .patch(protocol::patch_thread),
        )
        .route(
            "/threads/{id}/state",
            get(threads::get_state).post(threads::update_state),
        )
        .route(
            "/threads/{id}/state/checkpoint",
            post(threads::post_state_at),
        )
        .route(
            "/threads/{id}/state/{checkpoint}",
            get(threads::get_state_at),
        )
        .route(
            "/threads/{id}/history",
            post(threads::history).get(protocol::history),
        )
        .route(
            "/threads/{id}/stream",
            post(protocol::thread_stream).get(protocol::thread_websocket),
        )
        .route("/threads/{id}/commands", post(protocol::command))
        .route("/threads/{id}/copy", post(threads::copy))
        .route(
            "/threads/{id}/runs",
            get(runs::list).post(runs::create_on_thread),
        )
        .route("/threads/{id}/runs/stream", post(runs::stream_on_thread))
        .route(
            "/threads/{id}/runs/{run}",
            get(runs::get).delete(runs::delete),
        )
        .route("/threads/{id}/runs/{run}/stream", get(runs::join_stream))
        .route(
            "/store/items",
            get(store::get).put(store::put).delete(store::delete),
        )
        .route("/store/items/search", post(store::search))
        .route("/store/namespaces", post(store::namespaces))
        .route("/threads/{id}/runs/crons", post(crons::create_for_thread))
        .route("/runs/crons", post(crons::create_stateless))
        .route("/runs/crons/search", post(crons::search))
        .route("/runs/crons/{cron}", axum::routing::delete(crons::delete))
        .route("/runs", post(runs::create_stateless))
        .route("/runs/stream", post(runs::stream_stateless))
        // The Agent Protocol's own paths.
        .route("/agents/search", post(protocol::search_agents))
        .route("/agents/{id}", get(protocol::get_agent))
        .route("/agents/{id}/schemas", get(protocol::agent_schemas))
        .route("/runs/search", post(protocol::search_runs))
        .route(
            "/runs/{run}",
            get(protocol::get_run).delete(protocol::delete_run),
        )
        .route("/runs/{run}/stream", get(protocol::stream_run))
}
