//! What every handler shares, and how requests are read: JSON bodies whose
//! errors name the field, query strings, path parameters.

use crate::error::ApiError;
use crate::record::RunRecord;
use crate::served::Served;
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use harness::session::SessionStore;
use serde::de::DeserializeOwned;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// The server's state.
pub(crate) struct App {
    pub(crate) agents: BTreeMap<String, Arc<dyn Served>>,
    pub(crate) store: Arc<dyn SessionStore>,
    /// The long-term memory the store endpoints serve, if any.
    pub(crate) memory: Option<harness::memory::Memory>,
    /// Where runs may call back, if anywhere.
    pub(crate) webhooks: Option<crate::webhook::Webhooks>,
    pub(crate) runs: Mutex<Runs>,
    pub(crate) body_limit: usize,
    /// The streams open now, and how many may be.
    pub(crate) streams: crate::limits::Streams,
    /// The runs waiting to start now, and how many may.
    pub(crate) waiting: crate::limits::Waiting,
    /// When the server started (the assistants' creation time).
    pub(crate) started_at: u64,
    /// Turns true when the server stops: streams and waits end.
    pub(crate) stopping: tokio::sync::watch::Sender<bool>,
    /// Changes whenever a run is added to a thread (the streaming
    /// protocol's thread streams wait on it for the next run).
    pub(crate) runs_added: tokio::sync::watch::Sender<u64>,
    /// With replicas: this server as one of them (its runs are kept in
    /// the store).
    pub(crate) replica: Option<crate::replica::Replica>,
}

pub(crate) type Shared = Arc<App>;

/// How many runs of a thread the server remembers (with their streams, for
/// `join` and `join_stream`); older settled ones are forgotten.
pub(crate) const RUNS_KEPT: usize = 100;

/// How many runs the server remembers in all by default (see
/// [`Server::runs_kept`](crate::Server::runs_kept)).
pub(crate) const DEFAULT_RUNS_KEPT_IN_ALL: usize = 10_000;

/// The runs this server started, by thread.
pub(crate) struct Runs {
    pub(crate) by_thread: HashMap<String, Vec<Arc<RunRecord>>>,
    /// Every run remembered, oldest first: the settled ones at the front
    /// are forgotten first once there are more than `cap`.
    order: VecDeque<Arc<RunRecord>>,
    cap: usize,
}

impl Default for Runs {
    fn default() -> Self {
        Self::with_cap(DEFAULT_RUNS_KEPT_IN_ALL)
    }
}

impl Runs {
    /// Remembering at most `cap` settled runs in all (every unsettled one
    /// besides).
    pub(crate) fn with_cap(cap: usize) -> Self {
        Self {
            by_thread: HashMap::new(),
            order: VecDeque::new(),
            cap: cap.max(1),
        }
    }

    /// The thread's run that has not settled, if any.
    pub(crate) fn active(&self, thread: &str) -> Option<Arc<RunRecord>> {
        self.by_thread
            .get(thread)?
            .iter()
            .rev()
            .find(|r| !r.status().is_done())
            .cloned()
    }

    /// Adds `run` to its thread's runs, forgetting the oldest settled ones
    /// beyond [`RUNS_KEPT`] on the thread, and the oldest settled ones of
    /// any thread beyond the cap in all.
    pub(crate) fn add(&mut self, run: Arc<RunRecord>) {
        self.order.push_back(Arc::clone(&run));
        let list = self.by_thread.entry(run.thread_id.clone()).or_default();
        list.push(run);
        let mut excess = list.len().saturating_sub(RUNS_KEPT);
        list.retain(|r| {
            if excess > 0 && r.status().is_done() {
                excess -= 1;
                false
            } else {
                true
            }
        });
        // Each run is looked at once per pass: unsettled ones go to the
        // back, the order's entries of runs already forgotten are dropped.
        let mut looked = 0;
        while self.order.len() > self.cap && looked < self.order.len() {
            looked += 1;
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            let Some(list) = self.by_thread.get_mut(&oldest.thread_id) else {
                continue;
            };
            let Some(at) = list.iter().position(|r| Arc::ptr_eq(r, &oldest)) else {
                continue;
            };
            if oldest.status().is_done() {
                list.remove(at);
                if list.is_empty() {
                    self.by_thread.remove(&oldest.thread_id);
                }
            } else {
                self.order.push_back(oldest);
            }
        }
    }

    /// The thread's runs that have not settled, oldest first.
    pub(crate) fn unsettled(&self, thread: &str) -> Vec<Arc<RunRecord>> {
        self.by_thread
            .get(thread)
            .map(|l| {
                l.iter()
                    .filter(|r| !r.status().is_done())
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The run `run` of any thread (the Agent Protocol names a run by its
    /// id alone): a scan of the runs this server remembers.
    pub(crate) fn find_by_id(&self, run: &str) -> Option<Arc<RunRecord>> {
        self.by_thread
            .values()
            .flatten()
            .find(|r| r.run_id == run)
            .cloned()
    }

    pub(crate) fn find(&self, thread: &str, run: &str) -> Option<Arc<RunRecord>> {
        self.by_thread
            .get(thread)?
            .iter()
            .find(|r| r.run_id == run)
            .cloned()
    }
}

impl App {
    pub(crate) fn runs(&self) -> MutexGuard<'_, Runs> {
        self.runs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `run`'s result once it settles; an error if the server stops first.
    pub(crate) async fn settled(
        &self,
        run: &RunRecord,
    ) -> Result<crate::record::RunResult, ApiError> {
        let mut stopping = self.stopping.subscribe();
        tokio::select! {
            result = run.settled() => Ok(result),
            _ = stopping.wait_for(|s| *s) => Err(ApiError::Unavailable(
                "the server is stopping; the run was stopped at a step boundary".into(),
            )),
        }
    }

    /// The agent registered as `id`, or a 404 naming it.
    pub(crate) fn agent(&self, id: &str) -> Result<&Arc<dyn Served>, ApiError> {
        self.agents
            .get(id)
            .ok_or_else(|| ApiError::not_found("assistant", id))
    }
}

/// A JSON body read as `T`: an empty body reads as `{}`; a body that is not
/// JSON, or a field of the wrong type, is a 422 that names the field; a body
/// over the limit is a 413.
pub(crate) struct Body<T>(pub(crate) T);

impl<T: DeserializeOwned> FromRequest<Shared> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, app: &Shared) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, app).await.map_err(|e| {
            if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::TooLarge {
                    limit: app.body_limit,
                }
            } else {
                ApiError::bad("", format!("the body cannot be read: {e}"))
            }
        })?;
        let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
            b"{}"
        } else {
            &bytes
        };
        parse(bytes).map(Body)
    }
}

/// The deepest nesting of arrays and objects a body may have, itself
/// included: a session store's limit
/// ([`MAX_VALUE_DEPTH`](harness::session::MAX_VALUE_DEPTH)) less room for
/// the records the server keeps a body's values in (a thread's metadata, a
/// run's arguments, a frame of its stream), so that whatever a body holds
/// can be stored.
pub(crate) const MAX_BODY_DEPTH: usize = harness::session::MAX_VALUE_DEPTH - 10;

/// The path to a value of `value` nested deeper than `room` levels (the
/// top-level field first), if there is one.
pub(crate) fn too_deep(value: &serde_json::Value, room: usize) -> Option<Vec<String>> {
    use serde_json::Value;
    let found = match value {
        Value::Object(_) | Value::Array(_) if room == 0 => return Some(Vec::new()),
        Value::Object(map) => map
            .iter()
            .find_map(|(k, v)| too_deep(v, room - 1).map(|path| (k.clone(), path))),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, v)| too_deep(v, room - 1).map(|path| (format!("[{i}]"), path))),
        _ => None,
    };
    found.map(|(name, mut path)| {
        path.insert(0, name);
        path
    })
}

/// `bytes` as a JSON object read as `T`, with the failing field's path.
pub(crate) fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let value: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad("", format!("the body is not valid JSON: {e}")))?;
    if !value.is_object() {
        return Err(ApiError::bad("", "the body must be a JSON object"));
    }
    if let Some(path) = too_deep(&value, MAX_BODY_DEPTH) {
        let field = path.first().cloned().unwrap_or_default();
        return Err(ApiError::bad(
            field.clone(),
            format!(
                "field `{field}` nests deeper than this server takes: at most {MAX_BODY_DEPTH} \
                 levels of arrays and objects, the body itself included (a session store reads \
                 back {}); send a flatter value",
                harness::session::MAX_VALUE_DEPTH
            ),
        ));
    }
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." {
            ApiError::bad("", format!("the body does not read: {inner}"))
        } else {
            ApiError::bad(path.clone(), format!("field `{path}`: {inner}"))
        }
    })
}

/// A route's path parameters, read as axum's `Path` reads them, with a
/// parameter that does not read (not UTF-8 once percent-decoded, not of
/// its type) a JSON 400 naming it, like every other client mistake.
pub(crate) struct Path<T>(pub(crate) T);

impl<T, S> FromRequestParts<S> for Path<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        use axum::extract::path::ErrorKind;
        use axum::extract::rejection::PathRejection;
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(value)) => Ok(Path(value)),
            Err(PathRejection::FailedToDeserializePathParams(e)) => {
                let field = match e.kind() {
                    ErrorKind::InvalidUtf8InPathParam { key }
                    | ErrorKind::ParseErrorAtKey { key, .. } => key.clone(),
                    _ => String::new(),
                };
                Err(ApiError::syntax(field, e.body_text()))
            }
            Err(e) => Err(ApiError::syntax("", e.body_text())),
        }
    }
}

/// A query string as its pairs, percent-decoded, in order (a key may come
/// more than once: `stream_mode=values&stream_mode=updates`).
#[derive(Debug, Default)]
pub(crate) struct QueryPairs(pub(crate) Vec<(String, String)>);

impl<S: Send + Sync> FromRequestParts<S> for QueryPairs {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        match parts.uri.query() {
            None => Ok(QueryPairs::default()),
            Some(query) => QueryPairs::parse(query),
        }
    }
}

impl QueryPairs {
    /// The pairs of a query string (without its `?`).
    pub(crate) fn parse(query: &str) -> Result<Self, ApiError> {
        let mut pairs = Vec::new();
        for kv in query.split('&').filter(|s| !s.is_empty()) {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            let key = decode(k).ok_or_else(|| ApiError::bad(k, "the query key is not UTF-8"))?;
            let value = decode(v)
                .ok_or_else(|| ApiError::bad(key.clone(), "the query value is not UTF-8"))?;
            pairs.push((key, value));
        }
        Ok(QueryPairs(pairs))
    }

    /// Every non-empty value of `key`.
    pub(crate) fn all(&self, key: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, v)| k == key && !v.is_empty())
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The last non-empty value of `key`.
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.all(key).pop()
    }

    /// `key` as a boolean (`true`/`false`/`1`/`0`), `default` when absent.
    pub(crate) fn flag(&self, key: &str, default: bool) -> Result<bool, ApiError> {
        match self.get(key) {
            None => Ok(default),
            Some("true" | "True" | "1") => Ok(true),
            Some("false" | "False" | "0") => Ok(false),
            Some(other) => Err(ApiError::bad(
                key,
                format!("`{other}` is not a boolean (true, false, 1 or 0)"),
            )),
        }
    }

    /// `key` as a count, `default` when absent, at most `max`.
    pub(crate) fn count(&self, key: &str, default: usize, max: usize) -> Result<usize, ApiError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => match v.parse::<usize>() {
                Ok(n) if n <= max => Ok(n),
                _ => Err(ApiError::bad(
                    key,
                    format!("`{v}` is not a whole number from 0 to {max}"),
                )),
            },
        }
    }
}

/// Percent-decoding, with `+` as a space; `None` if the bytes are not UTF-8.
pub(crate) fn decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = s
                    .get(i + 1..i + 3)
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// The ids under `prefix` with it taken off: one kind of the server's
/// records (threads, runs, crons), in one
/// [`SessionStore::sessions_page`] (the caller reads each of them), so
/// that on sled, PostgreSQL and Redis listing one kind reads no id of the
/// others nor of the agents' own sessions sharing the store; another store
/// lists every id once, as before.
pub(crate) async fn ids_under(
    store: &dyn SessionStore,
    prefix: &str,
) -> Result<Vec<String>, harness::session::StoreError> {
    Ok(store
        .sessions_page(prefix, None, usize::MAX)
        .await?
        .iter()
        .filter_map(|s| s.as_str().strip_prefix(prefix).map(str::to_owned))
        .collect())
}

/// The longest id (thread, run, assistant) the server accepts.
pub(crate) const MAX_ID: usize = 256;

/// Checks an id a client gave: not empty, not too long, no control
/// characters, and not in the server's own part of the store: a thread's
/// session is named by its id, and the server keeps its records (threads,
/// crons, runs) in sessions under `harness-server/`.
pub(crate) fn check_id(field: &str, id: &str) -> Result<(), ApiError> {
    let reserved = format!("{}/", crate::threads::OWNER);
    if id.starts_with(&reserved) {
        return Err(ApiError::bad(
            field,
            format!("ids starting with `{reserved}` name the server's own records"),
        ));
    }
    if id.is_empty() {
        return Err(ApiError::bad(field, "an id cannot be empty"));
    }
    if id.len() > MAX_ID {
        return Err(ApiError::bad(
            field,
            format!("an id is at most {MAX_ID} bytes; this one is {}", id.len()),
        ));
    }
    if id.chars().any(char::is_control) {
        return Err(ApiError::bad(field, "an id cannot hold control characters"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{RUNS_KEPT, Runs, decode};
    use crate::record::{RunRecord, RunResult, RunStatus};
    use serde_json::Value;

    #[test]
    fn a_thread_keeps_its_latest_runs_and_every_unsettled_one() {
        let mut runs = Runs::default();
        let unsettled = RunRecord::new(
            "r-0".into(),
            "t".into(),
            "a".into(),
            Value::Null,
            Value::Null,
            "reject",
            Vec::new(),
        );
        runs.add(unsettled);
        for i in 1..=RUNS_KEPT + 10 {
            let run = RunRecord::new(
                format!("r-{i}"),
                "t".into(),
                "a".into(),
                Value::Null,
                Value::Null,
                "reject",
                Vec::new(),
            );
            run.finish(RunStatus::Success, RunResult::default());
            runs.add(run);
        }
        let kept = &runs.by_thread["t"];
        assert_eq!(kept.len(), RUNS_KEPT);
        assert!(
            runs.find("t", "r-0").is_some(),
            "the unsettled run was forgotten"
        );
        assert!(runs.find("t", "r-1").is_none());
        assert!(runs.find("t", &format!("r-{}", RUNS_KEPT + 10)).is_some());
    }

    #[test]
    fn the_server_forgets_the_oldest_settled_runs_of_any_thread_beyond_its_cap() {
        let run = |id: &str, thread: &str, settled: bool| {
            let r = RunRecord::new(
                id.into(),
                thread.into(),
                "a".into(),
                Value::Null,
                Value::Null,
                "reject",
                Vec::new(),
            );
            if settled {
                r.finish(RunStatus::Success, RunResult::default());
            }
            r
        };
        let mut runs = Runs::with_cap(3);
        runs.add(run("u", "a", false));
        for t in ["b", "c", "d", "e", "f"] {
            runs.add(run(t, t, true));
        }
        let mut kept: Vec<&str> = runs
            .by_thread
            .values()
            .flatten()
            .map(|r| r.run_id.as_str())
            .collect();
        kept.sort_unstable();
        assert_eq!(kept, ["e", "f", "u"], "the unsettled run stays");
        assert!(!runs.by_thread.contains_key("b"), "an emptied thread goes");
        // Unsettled runs beyond the cap are all kept.
        let mut busy = Runs::with_cap(2);
        for i in 0..5 {
            busy.add(run(&format!("r{i}"), "t", false));
        }
        assert_eq!(busy.by_thread["t"].len(), 5);
    }

    #[test]
    fn query_values_are_percent_decoded() {
        assert_eq!(decode("a%20b+c").as_deref(), Some("a b c"));
        assert_eq!(decode("100%").as_deref(), Some("100%"));
        assert_eq!(decode("%zz").as_deref(), Some("%zz"));
        assert_eq!(decode("%ff"), None);
    }
}
