//! A local, offline web studio for harness sessions.
//!
//! It serves one page (HTML, CSS and JavaScript embedded in the binary: no
//! build step, nothing fetched from elsewhere) and a JSON API over axum:
//!
//! - **Graph**: the loop, drawn from the validated harness (its steps,
//!   routers and signals) when the studio serves an agent, or from what a
//!   session's checkpoints show (its steps and the transitions between
//!   them, labelled *observed*) when it only reads a store. Forks are drawn
//!   with their branches side by side and their join marked, a fan-out's
//!   edge is labelled `each`, and each sub-agent is a box holding its own
//!   loop; the steps running or waiting now are highlighted, in every
//!   branch and sub-agent (found by their task's path).
//! - **Sessions**: the sessions of the store with their phase (`running`,
//!   `waiting` for a human, `done`, `failed`), agent, steps and last update,
//!   filtered by phase and searched by text, a page at a time (see
//!   [Sessions, a page at a time](#sessions-a-page-at-a-time)).
//! - **Timeline**: each checkpoint with its step, its task's path (the
//!   run's loop, a branch, a sub-agent, whose records are grouped under
//!   its step), the update as stored and, with the agent's state type,
//!   what it changed in the state (a diff of the merged states: a branch's
//!   step in the branch's own state, the run's state at the join); a fork
//!   or a join lists its branches. It can be filtered by path. It comes a
//!   page at a time, the latest first, and each entry is bounded (a large
//!   value is sent as its beginning, marked with its size): the states are
//!   merged in one pass up to the page, and only the page's records are
//!   diffed, from the fields their updates wrote, so a long session with a
//!   growing state costs its length, not its length times its state.
//!   Checkpoints record updates, not model or tool calls; the page shows
//!   the current step's journal (interrupt answers and `cx.once` results)
//!   as recorded, and nothing it does not have.
//! - **State** at any checkpoint, as a tree: merged through the reducers
//!   with the state type, else the snapshot and the updates after it as
//!   stored. A state is sent whole up to 256 KiB of JSON; a larger one is
//!   cut (see [A large state](#a-large-state)), and the page opens what was
//!   cut on demand.
//! - **Waiting for a human**: the interrupt's payload, where it was asked
//!   (a branch's or a sub-agent's path), and a form to answer it, checked against the answer's type when the application declared
//!   it ([`Studio::expect_answer`], whose step names are checked against
//!   the loop when the studio is bound or mounted); answering resumes the
//!   run through the typed [`Agent`], and the page follows it live. The run
//!   checks the answer again when the step reads it: an answer it refuses
//!   (not of the step's type, or refused by the step's own check) is
//!   answered 422 with the interrupt and the run's reason, nothing of it
//!   kept and the session still waiting (see [`Studio::answer_wait`] for a
//!   step that takes longer to read it). A tool-approval request
//!   of the agent kit (`harness_kit::ApprovalRequest`, raised by its
//!   `AgentLoop`) gets one row per pending call (tool, call id, arguments)
//!   with a decision each: approve, always allow, edit the arguments
//!   (checked against the call's schema), reject or correct with a message
//!   for the model. The answer is checked as the run checks it
//!   (`ApprovalRequest::resolve`: every waiting call decided once, no other
//!   call, edits matching the schema) before anything is resumed; a bad one
//!   is refused with each problem naming its call. The raw JSON form stays
//!   available for any interrupt.
//! - **Fork** from any checkpoint with an edited update
//!   ([`Agent::fork`](harness::Agent::fork)), checked as the state's update
//!   type.
//! - **Memory** (with [`Studio::memory`]): long-term memory
//!   ([`harness::memory::Memory`]), read-only: its namespaces as a tree,
//!   the items under one a page at a time (key, times, expiry, the value
//!   pretty-printed), filtered on their fields, and searched by meaning
//!   when the memory has an index. Values are shown as text, never as
//!   markup, and a large one is cut, marked, with a way to see it whole.
//!
//! The page follows the store live over server-sent events
//! (`/api/events`): the studio looks at the store every
//! [`poll_interval`](Studio::poll_interval) (and at once after its own
//! writes), so on a store it reads in place (memory, file, PostgreSQL,
//! Redis, or an application's own) it sees runs of other processes too. A
//! store read from a copy taken once (a sled database opened with
//! `SledStore::open_read_only`, a log store with
//! `LogStore::open_read_only`) shows that copy, and nothing written after
//! it was taken: declared with [`Studio::snapshot`], the page says
//! *snapshot taken at* its time instead of *live*, and `GET /api/info`
//! answers `"snapshot": {"taken_at": MS}` (else `null`).
//!
//! # Sessions, a page at a time
//!
//! A store may hold a hundred thousand sessions, so `GET /api/sessions`
//! reads them a page at a time, in the store's order
//! ([`SessionStore::sessions_page`]: the ids' byte order, but for
//! PostgreSQL ids holding `%` or a NUL). A page is
//! a JSON array of sessions (newest first within the page); `limit` sets
//! its size (default 100, at most 1000) and `after` the id the page
//! starts after. When more sessions follow, the response's `x-next-after`
//! header holds the `after` of the next page, percent-encoded for the
//! query string; it is absent on the last page. A page costs the heads of
//! the sessions it looks at and their ids (read in a few rounds when a
//! filter keeps few; on sled, PostgreSQL and Redis a range of an index, whatever
//! the store holds besides, and on the other stores a listing of every id
//! per round): `limit` of them, or up to 1000 when filters
//! (`phase`, `agent`, `q`) or hidden agents leave sessions out; a page
//! can then be short, or empty, and still have a next one. Ids are random
//! (UUIDs), so pages do not follow time: the page shows each page's
//! sessions newest first and offers the next page ("load more"). Its
//! search box (once typing pauses for 250 ms) and its phase filter ask
//! the server (`q`, `phase`) from the first page, dropping the sessions
//! loaded, and "load more" goes on with the same filter: a session on a
//! page not loaded yet is found. `q` is matched, case-insensitively, in
//! a session's id, agent, phase, next step and detail as the studio sends
//! them (the process's secrets replaced); while a filter is set, a
//! session the event stream sends is listed only if it passes the same
//! check. An `after` that is no session of the store (a session removed
//! between two pages) is a place in that order all the same: the page
//! starts at the first session after it.
//!
//! A session whose head does not read (a damaged record: the store's
//! [`StoreError::Load`](harness::session::StoreError::Load)) hides no
//! other: the page lists it after its sessions as `{"id", "unreadable":
//! true, "record", "error"}` (the record, `head`, and the store's message
//! naming the session and the record, the process's secrets replaced),
//! whatever the filter (whether it matches cannot be told), counted in
//! `limit` and passed by the cursor like any session looked at; the page
//! shows it first in its list, with its error and nothing to open. The
//! event stream sends it the same way (`sessions`, `session`: once when
//! it turns unreadable, again when it reads). Opening it answers the
//! store's error (500, `{"error": "session …: cannot load session …:
//! head: …"}`). Any other failure of the store (it cannot be reached)
//! fails the page, as ever. The studio writes nothing to the store.
//!
//! A session whose head reads but whose checkpoint log does not add up (a
//! record missing in the middle, its last record missing, one repeated or
//! out of order: what a run and `harness sessions history` refuse too, by
//! the same check, [`harness::session::read_log`]) is listed as its head
//! says, and opening it (its detail, its timeline, its state) answers the
//! damage rather than a shorter timeline: 500, `{"error": "session …:
//! cannot load session …: checkpoint 6 (…): the checkpoint log is broken
//! (missing records): expected checkpoint 5, found checkpoint 6 …", "kind":
//! "damaged", "session", "record", "gap": {"kind", "expected_seq",
//! "found_seq"}}`, the gap's `kind` one of `missing`, `duplicate`,
//! `out_of_order` and `ends_early` (then `found_seq` is null: the log ends
//! there). A head that does not read answers the same `kind`, `session`
//! and `record`, without a `gap`. The page shows the error under the
//! session's id, agent and phase (from its head) and nothing else of it,
//! nor of the session shown before.
//!
//! `GET /api/sessions/{id}/summary` answers one session as the list shows
//! it, from its head alone, or 404 (`{"error": "no session … in the
//! store"}`) when the store holds none: how the page tells whether a run
//! an eval report names is in this store.
//!
//! Every query parameter of the list, of a timeline, of a state, of a
//! summary (it takes none) and of the event stream is read strictly: an unknown one, one given twice, or
//! a value that does not read (a negative, non-numeric or too large
//! number, an empty cursor, a bad task path, text that does not
//! percent-decode) is answered 400 with a body naming it:
//!
//! ```json
//! {"error": "parameter `limit` is \"-1\": negative: …", "kind": "parameter", "parameter": "limit"}
//! ```
//!
//! A session's id or a report's index in a URL's path that does not
//! percent-decode to UTF-8 is answered the same way (`"parameter": "id"`).
//! A timeline's `path` is a task's path: empty for the run's own loop,
//! else segments joined by `/`, each a step's name and for a fan-out's
//! branch `#` and its index (`square#1`, `review/check#0`); a step's name
//! may hold `#` itself, so only an empty or blank segment is refused, the error
//! naming it, and a path no task has keeps nothing. A path
//! under `/api` that no call answers is a 404 naming it: `{"error": "no
//! such API call: /api/…", "kind": "route", "path": "/api/…"}`; one asked
//! with a method it does not take is a 405 naming the methods it takes, in
//! the body (`"kind": "method", "allowed": "GET,HEAD"`) and in `Allow`.
//!
//! # Following the store at a bounded cost
//!
//! The event stream does not reload every head at each look. It follows
//! a bounded set of sessions: the first page of the list (which the first
//! event, `sessions`, carries), each session that appears after it, and
//! those the client names with `watch=ID` (at most 20; the page names the
//! session it shows). A look reads the sessions created since the last
//! from the store's feed of created sessions
//! ([`SessionStore::created_since`]:
//! the memory, log, file, sled, Redis and PostgreSQL stores keep one; on another store, it lists
//! the store's ids and keeps them, a session not in the last listing being
//! new), loads the head of each session followed (at most 200; past it,
//! the one changed least recently is let go, and the page no longer sees
//! it change), and those of at most 100 new sessions (more wait for the
//! next look). So a look costs at most about 320 heads and the ids of the
//! sessions created since the last (a listing of every id on a store with
//! no feed), however many sessions the store holds. It sends `session` for
//! each followed or new session that changed, and `removed` for each
//! followed one gone.
//!
//! # A large state
//!
//! `GET /api/sessions/{id}/state` merges the state (as long as the log,
//! in memory) and sends it whole when its answer is at most 256 KiB of
//! JSON. A larger answer is cut: values up to 2 KiB (the timeline's
//! bound) are kept whole, larger arrays and objects are opened and their
//! first 100 entries kept, larger strings are replaced by `null`, and
//! about 256 KiB are kept in all. The answer's `cuts` lists each cut by
//! its JSON pointer in the whole answer (`/state/log`,
//! `/updates/0/value/text`): a value with the beginning of its JSON
//! (`preview`) and its size (`bytes`), or an array's or object's entries
//! with how many were sent (`offset`, `kept`) of how many (`total`).
//! `?pointer=/state/log` asks for the value there alone, bounded alike
//! (a string up to 256 KiB), and `&offset=100` for an array's or object's
//! entries from there: `{"seq", "pointer", "offset", "value", "cuts"}`.
//!
//! # Safe by default
//!
//! The studio listens on loopback only ([`StudioError::NotLoopback`]
//! otherwise) and makes a random token at start; every API call needs it
//! (the URL [`Serving::url`] prints carries it; the page keeps it in its
//! tab's session storage, takes it out of the address bar and its history,
//! and sends it in the `x-studio-token` header). Answering and forking need
//! the header, a JSON body (`Content-Type: application/json`, else 415) and,
//! when the request names an origin, the studio's own (else 403): a page of
//! another site cannot write through a visitor's browser, even to a
//! mounted studio, which has no token. A read-only studio
//! ([`Studio::read_only`], what `harness studio` runs) has no write action
//! at all.
//!
//! Everything the page shows is text a model or a store wrote: it is set
//! as text, never markup; invisible characters (bidi controls, zero-width
//! ones) are shown as `\uXXXX`, and each element holding such text is
//! isolated from the studio's own words. Every response asks for no
//! `Referer`, and the process's secrets ([`harness::secrets`]) are replaced
//! in every error, JSON body and event the studio sends.
//!
//! # Serving an application's agent
//!
//! ```no_run
//! # #[derive(Clone, Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema, harness::HarnessState)]
//! # struct Claim { approved: Option<bool> }
//! # async fn f(harness: harness::Harness<Claim>, store: std::sync::Arc<dyn harness::session::SessionStore>) -> Result<(), Box<dyn std::error::Error>> {
//! use harness_studio::Studio;
//!
//! // `store` is the store the harness was built with (`.store(Arc::clone(&store))`):
//! // the studio lists `store`'s sessions, and answers them in the harness's.
//! let agent = harness::create_agent("expenses", &harness);
//! let studio = Studio::for_agent(&agent, &harness, store)?
//!     // The `approve` step reads its answer as a `String`.
//!     .expect_answer::<String>("approve");
//! let serving = studio.bind("127.0.0.1:0".parse()?).await?;
//! println!("studio: {}", serving.url());
//! serving.wait().await?;
//! # Ok(()) }
//! ```

mod approval;
mod diff;
mod error;
mod evals;
mod graph;
mod memory;
mod pick;
mod query;
mod redact;
mod replay;
mod server;
mod source;
mod trim;
mod view;

// Docs only: the guide, an empty module.
#[doc = include_str!("docs/guide.md")]
pub mod guide {}

pub use error::StudioError;

use harness::memory::Memory;
use harness::session::SessionStore;
use harness::slots::NoSlots;
use harness::{Agent, Context, Harness, HarnessState, JsonSchema};
use serde::de::DeserializeOwned;
use server::{AnswerShape, App};
use source::{ReadOnly, Typed};
use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// A studio, ready to [`bind`](Self::bind).
pub struct Studio {
    source: Arc<dyn source::Source>,
    memory: Option<Memory>,
    reports: Vec<harness_evals::Report>,
    shapes: BTreeMap<String, AnswerShape>,
    hidden: Vec<String>,
    poll: Duration,
    answer_wait: Duration,
    title: String,
    /// When the store is a copy taken once: when it was taken, in
    /// milliseconds since the Unix epoch.
    snapshot: Option<u64>,
}

impl fmt::Debug for Studio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Studio")
            .field("agent", &self.source.agent_id())
            .field("answers", &self.shapes.keys().collect::<Vec<_>>())
            .field("poll", &self.poll)
            .field("answer_wait", &self.answer_wait)
            .field("title", &self.title)
            .field("memory", &self.memory.is_some())
            .field("reports", &self.reports.len())
            .field("snapshot", &self.snapshot)
            .finish()
    }
}

impl Studio {
    fn new(source: Arc<dyn source::Source>, title: String) -> Self {
        Studio {
            source,
            memory: None,
            reports: Vec::new(),
            shapes: BTreeMap::new(),
            hidden: Vec::new(),
            poll: Duration::from_millis(500),
            answer_wait: Duration::from_secs(10),
            title,
            snapshot: None,
        }
    }

    /// A studio that only reads `store`: any store, any agent, without the
    /// state type. It draws the transitions each session's checkpoints
    /// show, shows states as stored (unmerged), and has no write action.
    pub fn read_only(store: Arc<dyn SessionStore>) -> Self {
        Studio::new(Arc::new(ReadOnly { store }), "sessions (read-only)".into())
    }

    /// A studio serving `agent`, whose context has no run slots: it draws
    /// `harness`'s loop, merges states through the reducers, answers
    /// interrupts and forks sessions through the agent.
    ///
    /// `store` must be the store `harness` was built with
    /// (`.store(Arc::clone(&store))`): the studio lists and reads the
    /// sessions of `store`, and answers and forks them through the agent,
    /// in the harness's store. The harness does not let the studio see its
    /// store, so the two cannot be compared here: given another store, the
    /// studio lists that store's sessions, and answering or forking one is
    /// refused (HTTP 500) with a message saying that the session is not in
    /// the agent's store and that the studio was given another store.
    ///
    /// # Errors
    ///
    /// [`StudioError::Graph`] if the harness's DOT export cannot be read,
    /// [`StudioError::NoStore`] if the agent has no session store.
    pub fn for_agent<S: HarnessState, C: Context>(
        agent: &Agent<S, C>,
        harness: &Harness<S, C>,
        store: Arc<dyn SessionStore>,
    ) -> Result<Self, StudioError>
    where
        C::Run: NoSlots,
    {
        Self::for_agent_with(agent, harness, store, C::Run::none)
    }

    /// [`for_agent`](Self::for_agent) for a context with run slots:
    /// `slots` makes those of each run the studio resumes. `store` must be
    /// the store `harness` was built with, as for
    /// [`for_agent`](Self::for_agent).
    ///
    /// # Errors
    ///
    /// [`StudioError::Graph`] if the harness's DOT export cannot be read,
    /// [`StudioError::NoStore`] if the agent has no session store.
    pub fn for_agent_with<S: HarnessState, C: Context>(
        agent: &Agent<S, C>,
        harness: &Harness<S, C>,
        store: Arc<dyn SessionStore>,
        slots: impl Fn() -> C::Run + Send + Sync + 'static,
    ) -> Result<Self, StudioError> {
        if !agent.has_store() {
            return Err(StudioError::NoStore {
                agent: agent.id().to_owned(),
            });
        }
        let graph =
            graph::from_dot(&harness.to_dot()).map_err(|e| StudioError::Graph(e.to_string()))?;
        let title = format!("agent {}", agent.id());
        Ok(Studio::new(
            Arc::new(Typed {
                agent: agent.clone(),
                store,
                graph,
                slots: Arc::new(slots),
            }),
            title,
        ))
    }

    /// Declares that step `step` reads its answer as `R`
    /// (`cx.interrupt::<_, R>(…)`): the form shows `R`'s JSON schema, and an
    /// answer that does not read as `R` is refused (HTTP 422, with serde's
    /// message) before the run is resumed.
    ///
    /// A step of a sub-agent is named as the graph names it: `review/ask`
    /// for step `ask` of the sub-agent run by step `review`. That name is
    /// looked up first, then the step's own name (`ask`), which stands for
    /// every step so named.
    ///
    /// The run checks the answer too, when the step reads it: an answer it
    /// refuses (not of the step's type, or refused by the step's own check,
    /// `cx.interrupt_with`) is answered as refused (HTTP 422 with the run's
    /// reason, see [Waiting for a human](crate#waiting-for-a-human)), so an
    /// undeclared step's answers are checked all the same, only later.
    ///
    /// On a studio serving an agent ([`for_agent`](Self::for_agent)),
    /// [`bind`](Self::bind) and [`mount`](Self::mount) refuse a `step` the
    /// agent's loop does not have ([`StudioError::UnknownStep`], naming the
    /// steps it has): a typo would leave the step meant unchecked. The
    /// loop's steps and its sub-agents' are known, not those of a sub-agent
    /// run inside a sub-agent. A read-only studio does not know the steps
    /// and checks no name (it answers nothing).
    #[must_use]
    pub fn expect_answer<R: DeserializeOwned + JsonSchema>(
        mut self,
        step: impl Into<String>,
    ) -> Self {
        let check = |v: &serde_json::Value| {
            serde_json::from_value::<R>(v.clone())
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        self.shapes.insert(
            step.into(),
            AnswerShape {
                type_name: harness::short_type_name::<R>(),
                schema: schemars::schema_for!(R).to_value(),
                check: Arc::new(check),
            },
        );
        self
    }

    /// How long answering an interrupt (`POST /api/sessions/{id}/answer`)
    /// waits to learn whether the run kept the answer (default 10 s): until
    /// the step that asked has read it and kept it
    /// ([`RunEvent::AnswerAccepted`](harness::RunEvent::AnswerAccepted)),
    /// or the run settles. A run
    /// that refuses the answer within that time makes the request fail
    /// (HTTP 422); past it, the request is answered 202 with `"kept":
    /// false`, and a refusal that comes later shows with the session
    /// (`refused` in `GET /api/sessions/{id}`).
    #[must_use]
    pub fn answer_wait(mut self, wait: Duration) -> Self {
        self.answer_wait = wait;
        self
    }

    /// How often the event stream looks at the store for changes made
    /// elsewhere (default 500 ms).
    #[must_use]
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.poll = every;
        self
    }

    /// Leaves the sessions of agent `agent` out of the list and the live
    /// updates: records an application keeps in the store beside its
    /// agents' sessions (`harness-server` hides its own, agent
    /// `harness-server`, in the studio it serves).
    #[must_use]
    pub fn hide_agent(mut self, agent: impl Into<String>) -> Self {
        self.hidden.push(agent.into());
        self
    }

    /// The page's title (default: the agent, or "sessions (read-only)").
    #[must_use]
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = title.into();
        self
    }

    /// Shows `memory` (long-term memory: its namespaces, its items, and a
    /// search by meaning when it has an index), read-only: the studio only
    /// lists, gets and searches, never refreshing a time to live. Give it a
    /// memory opened for reading (what `harness studio --memory` does).
    #[must_use]
    pub fn memory(mut self, memory: Memory) -> Self {
        self.memory = Some(memory);
        self
    }

    /// Says that the store is a copy of the user's store taken once, at
    /// `taken_at` (milliseconds since the Unix epoch,
    /// [`now_millis`](harness::session::now_millis) when the copy was
    /// made): what a sled database opened with
    /// `SledStore::open_read_only` or a log store opened with
    /// `LogStore::open_read_only` reads. Such a store never shows what
    /// other processes write after it was taken, so the page does not say
    /// *live*: it says *snapshot taken at* that time, and `GET /api/info`
    /// answers `"snapshot": {"taken_at": MS}` (`null` for a store read in
    /// place). To see later writes, start the studio again on a new copy.
    #[must_use]
    pub fn snapshot(mut self, taken_at: u64) -> Self {
        self.snapshot = Some(taken_at);
        self
    }

    /// Shows eval reports ([`harness_evals::Report`]): each one case by
    /// case, with its inputs, outputs, scores and their reasons, and a link
    /// to the timeline of each case's run when this studio's store holds
    /// its session (the page asks the server about each session of a case
    /// it opens, `GET /api/sessions/{id}/summary`, so a session on a page
    /// of the list not loaded is linked too; a 404 is shown as "not in this
    /// store").
    #[must_use]
    pub fn reports(mut self, reports: impl IntoIterator<Item = harness_evals::Report>) -> Self {
        self.reports.extend(reports);
        self
    }

    fn app(
        self,
        token: Option<String>,
        base: &str,
        stopping: watch::Receiver<bool>,
    ) -> axum::Router {
        let (changed, _) = watch::channel(0);
        server::router(App {
            source: self.source,
            memory: self.memory,
            reports: Arc::new(self.reports),
            token,
            page: server::Page::at(base),
            hidden: self.hidden,
            shapes: self.shapes,
            poll: self.poll,
            title: self.title,
            changed,
            stopping,
            answer_wait: self.answer_wait,
            refused: Arc::default(),
            snapshot: self.snapshot,
        })
    }

    /// Refuses an answer declared for a step the agent's loop does not
    /// have, when the studio knows the loop.
    fn check_answers(&self) -> Result<(), StudioError> {
        let Some(graph) = self.source.graph() else {
            return Ok(());
        };
        let known = graph.step_names();
        match self.shapes.keys().find(|step| !known.contains(*step)) {
            Some(step) => Err(StudioError::UnknownStep {
                step: step.clone(),
                known: known.into_iter().collect(),
            }),
            None => Ok(()),
        }
    }

    /// The studio as an axum router to [`nest`](axum::Router::nest) at
    /// `base` (`/studio`) in an application's own router: the page calls
    /// its files and its API under `base`. It has no token of its own:
    /// the application's middleware decides who may call (as
    /// `harness-server` does with its keys, hosts and origins), so mount
    /// it only behind such a middleware. Its event streams end when
    /// `stopping` turns true (let the server's graceful shutdown finish).
    ///
    /// # Errors
    ///
    /// [`StudioError::Base`] if `base` is not a plain path below the root
    /// (`/` then segments of letters, digits, `-`, `_`, `.`),
    /// [`StudioError::UnknownStep`] if [`expect_answer`](Self::expect_answer)
    /// names a step the agent's loop does not have.
    pub fn mount(
        self,
        base: &str,
        stopping: watch::Receiver<bool>,
    ) -> Result<axum::Router, StudioError> {
        server::check_base(base).map_err(StudioError::Base)?;
        self.check_answers()?;
        Ok(self.app(None, base, stopping))
    }

    /// Listens on `addr` (a loopback address; port 0 for any free port)
    /// and serves until [`Serving::shutdown`].
    ///
    /// # Errors
    ///
    /// [`StudioError::NotLoopback`] for another address,
    /// [`StudioError::UnknownStep`] if [`expect_answer`](Self::expect_answer)
    /// names a step the agent's loop does not have,
    /// [`StudioError::Bind`] if it cannot be bound.
    pub async fn bind(self, addr: SocketAddr) -> Result<Serving, StudioError> {
        if !addr.ip().is_loopback() {
            return Err(StudioError::NotLoopback { addr });
        }
        self.check_answers()?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| StudioError::Bind { addr, source })?;
        let local = listener
            .local_addr()
            .map_err(|source| StudioError::Bind { addr, source })?;
        let token = uuid::Uuid::new_v4().simple().to_string();
        let (stop, mut stopping) = watch::channel(false);
        let router = self.app(Some(token.clone()), "", stop.subscribe());
        let task = tokio::spawn(async move {
            axum::serve(listener, router)
                .with_graceful_shutdown(async move {
                    let _ = stopping.wait_for(|s| *s).await;
                })
                .await
        });
        Ok(Serving {
            addr: local,
            token,
            stop,
            task,
        })
    }
}

/// What the server task of a studio served at `addr` ended with.
fn served(
    addr: SocketAddr,
    joined: Result<std::io::Result<()>, tokio::task::JoinError>,
) -> Result<(), StudioError> {
    match joined {
        Ok(result) => result.map_err(|source| StudioError::Serve { addr, source }),
        Err(e) => Err(StudioError::Serve {
            addr,
            source: std::io::Error::other(e.to_string()),
        }),
    }
}

/// A studio being served; dropping it stops the server, like
/// [`shutdown`](Self::shutdown) without waiting.
#[derive(Debug)]
pub struct Serving {
    addr: SocketAddr,
    token: String,
    /// Set when stopping: the server stops accepting and event streams end.
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Serving {
    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The token every API call needs.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The page's URL, with the token: `http://127.0.0.1:PORT/?token=…`.
    pub fn url(&self) -> String {
        format!("http://{}/?token={}", self.addr, self.token)
    }

    /// Serves until the server fails (it does not stop by itself).
    ///
    /// # Errors
    ///
    /// [`StudioError::Serve`] when serving fails.
    pub async fn wait(self) -> Result<(), StudioError> {
        let addr = self.addr;
        served(addr, self.task.await)
    }

    /// Serves until `stop` completes (Ctrl-C, say), then shuts down as
    /// [`shutdown`](Self::shutdown) does; returns earlier if serving
    /// fails. `harness studio` serves so, and drops its store after: a
    /// store's private copy is deleted then.
    ///
    /// # Errors
    ///
    /// [`StudioError::Serve`] when serving fails.
    pub async fn until(mut self, stop: impl Future<Output = ()>) -> Result<(), StudioError> {
        let ended = tokio::select! {
            joined = &mut self.task => Some(joined),
            () = stop => None,
        };
        match ended {
            Some(joined) => served(self.addr, joined),
            None => self.shutdown().await,
        }
    }

    /// Stops accepting requests and waits for those under way (an open
    /// event stream ends when the server stops).
    ///
    /// # Errors
    ///
    /// [`StudioError::Serve`] if serving had failed.
    pub async fn shutdown(self) -> Result<(), StudioError> {
        self.stop.send_replace(true);
        self.wait().await
    }
}
