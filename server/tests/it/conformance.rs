//! Conformance to the Agent Protocol: every operation of its OpenAPI spec
//! (langchain-ai/agent-protocol's `openapi.json`, vendored in
//! `tests/agent-protocol/` at the commit [`SPEC_COMMIT`]) is driven over
//! HTTP against a server on a loopback port, with valid requests and bad
//! ones (unknown ids, bodies of the wrong shape), and each answer is
//! checked against the spec: its status is one the operation lists, its
//! media type is the one listed for that status, and its body (each event's
//! data, for a stream the spec describes) validates against the listed
//! schema, with `$ref`s resolved into the spec's components and formats
//! (`date-time`, `uuid`) asserted. At the end every path and method of the
//! spec must have been driven, each to a success and to some other
//! outcome. Where the server knowingly answers otherwise, to keep the
//! LangGraph SDK's clients working on the paths both APIs share, the
//! difference is listed ([`DEVIATIONS`], [`EXTRA_STATUSES`]) and checked
//! as precisely as it allows.

use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

/// The spec, as vendored.
const SPEC: &str = include_str!("../agent-protocol/openapi.json");

/// The commit of langchain-ai/agent-protocol the spec was taken from.
pub const SPEC_COMMIT: &str = "d9fd23d762bf4cffe876890a854fb79bcdd14f1a";

/// Where this server knowingly answers otherwise than the spec says, and
/// why; the test checks each still holds (a fixed one must leave the list).
const DEVIATIONS: [(&str, &str, &str); 2] = [
    (
        "post",
        "/store/namespaces",
        "the LangGraph SDK reads `{\"namespaces\": [...]}` from the same path and body; \
         the list inside validates against ListNamespaceResponse",
    ),
    (
        "get",
        "/runs/{run_id}/stream",
        "the spec lists application/json with an empty schema; the run's events come as \
         server-sent events, as /runs/stream declares",
    ),
];

/// When a stream has been read far enough (the thread stream never ends
/// by itself).
type Enough<'a> = Option<&'a (dyn Fn(&[Value]) -> bool + Sync)>;

/// Statuses this server answers that the operation does not list, and
/// why; the body is still an `ErrorResponse`.
const EXTRA_STATUSES: [(&str, &str, u16, &str); 2] = [
    (
        "post",
        "/store/items/search",
        400,
        "a filter operator other than $eq, $ne, $gt, $gte, $lt, $lte does not parse: \
         the LangGraph SDK raises its BadRequestError for it",
    ),
    (
        "post",
        "/threads/{thread_id}/copy",
        409,
        "a thread with a run in flight cannot be copied: the LangGraph SDK raises its \
         ConflictError for it",
    ),
];

/// The spec's operations, and what was seen of each.
pub struct Conformance {
    spec: Value,
    validators: std::sync::Mutex<BTreeMap<String, Arc<jsonschema::Validator>>>,
    /// (method, path) -> the statuses answered.
    seen: std::sync::Mutex<BTreeMap<(String, String), BTreeSet<u16>>>,
    client: reqwest::Client,
    base: String,
}

/// An answer: its status, media type, and body (JSON, or the events of a
/// stream: their data as JSON).
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub media: String,
    pub json: Value,
    pub events: Vec<Value>,
}

/// Whether `s` is a UUID, or a checkpoint id of this server
/// (`<index>.<session uuid>`, which the spec's `ThreadCheckpoint` calls a
/// UUID; see the report of issue 33).
fn uuid_or_checkpoint(s: &str) -> bool {
    let id = match s.split_once('.') {
        Some((index, session)) if index.parse::<u64>().is_ok() => session,
        _ => s,
    };
    uuid::Uuid::parse_str(id).is_ok() && id.len() == 36
}

impl Conformance {
    pub fn new(base: String) -> Self {
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        Conformance {
            spec: serde_json::from_str(SPEC).unwrap(),
            validators: Default::default(),
            seen: Default::default(),
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .unwrap(),
            base,
        }
    }

    /// The validator of `schema` (a schema of the spec, found at `pointer`),
    /// its `$ref`s resolved against the spec's components.
    fn validator(&self, pointer: &str, schema: &Value) -> Arc<jsonschema::Validator> {
        let mut cache = self.validators.lock().unwrap();
        if let Some(v) = cache.get(pointer) {
            return Arc::clone(v);
        }
        let mut document = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "components": self.spec["components"],
        });
        document["allOf"] = json!([schema]);
        let validator = jsonschema::options()
            .should_validate_formats(true)
            .with_format("uuid", uuid_or_checkpoint)
            .build(&document)
            .unwrap_or_else(|e| panic!("the spec's schema at {pointer} does not compile: {e}"));
        let validator = Arc::new(validator);
        cache.insert(pointer.to_string(), Arc::clone(&validator));
        validator
    }

    /// The schema errors of `value` against the schema at `pointer`.
    fn errors(&self, pointer: &str, schema: &Value, value: &Value) -> Vec<String> {
        self.validator(pointer, schema)
            .iter_errors(value)
            .map(|e| format!("{} at `{}`", e, e.instance_path()))
            .collect()
    }

    /// Checks `answer` to `method` `path` (a path of the spec) against the
    /// spec; a list of what is wrong (empty when it conforms).
    pub fn judge(&self, method: &str, path: &str, answer: &Answer) -> Vec<String> {
        let Some(op) = self.spec["paths"][path].get(method) else {
            return vec![format!("{method} {path} is not an operation of the spec")];
        };
        let deviation = DEVIATIONS
            .iter()
            .find(|(m, p, _)| *m == method && *p == path);
        let status = answer.status.to_string();
        if EXTRA_STATUSES
            .iter()
            .any(|(m, p, st, _)| *m == method && *p == path && *st == answer.status)
        {
            let schema = json!({"$ref": "#/components/schemas/ErrorResponse"});
            if answer.media != "application/json" {
                return vec![format!(
                    "{method} {path} {status}: not JSON: {}",
                    answer.media
                )];
            }
            return self.errors("ErrorResponse", &schema, &answer.json);
        }
        let Some(response) = op["responses"].get(&status) else {
            let listed: Vec<&String> = op["responses"].as_object().unwrap().keys().collect();
            return vec![format!(
                "{method} {path}: status {status} is none of {listed:?} ({})",
                answer.json
            )];
        };
        let Some(content) = response.get("content").and_then(Value::as_object) else {
            return if answer.media.is_empty() && answer.json.is_null() {
                Vec::new()
            } else {
                vec![format!(
                    "{method} {path} {status}: the spec gives no body, the server sent `{}` {}",
                    answer.media, answer.json
                )]
            };
        };
        let media = if deviation.is_some() && path == "/runs/{run_id}/stream" && status == "200" {
            // See DEVIATIONS: the stream's media type.
            if answer.media != "text/event-stream" {
                return vec![format!("{method} {path}: not a stream: {}", answer.media)];
            }
            return self.judge_events(method, path, None, answer);
        } else {
            answer.media.as_str()
        };
        let Some(listed) = content.get(media) else {
            return vec![format!(
                "{method} {path} {status}: media type `{media}` is none of {:?}",
                content.keys().collect::<Vec<_>>()
            )];
        };
        let pointer = format!("{method} {path} {status} {media}");
        let schema = &listed["schema"];
        if media == "text/event-stream" {
            return self.judge_events(method, path, Some(&pointer), answer);
        }
        if deviation.is_some() && path == "/store/namespaces" && answer.status == 200 {
            // See DEVIATIONS: `{"namespaces": <ListNamespaceResponse>}`.
            let Some(inner) = answer.json.get("namespaces") else {
                return vec![format!("{path}: no `namespaces` in {}", answer.json)];
            };
            if answer.json.as_object().unwrap().len() != 1 {
                return vec![format!("{path}: more than `namespaces` in {}", answer.json)];
            }
            return self.errors(&pointer, schema, inner);
        }
        self.errors(&pointer, schema, &answer.json)
            .into_iter()
            .map(|e| format!("{method} {path} {status}: {e} in {}", answer.json))
            .collect()
    }

    /// The events of a stream: each one's data is JSON; on the thread
    /// stream (whose spec says each is a `StreamingEvent`) each validates
    /// against `StreamingEvent`.
    fn judge_events(
        &self,
        method: &str,
        path: &str,
        pointer: Option<&str>,
        answer: &Answer,
    ) -> Vec<String> {
        let mut wrong = Vec::new();
        let streaming = &self.spec["components"]["schemas"]["StreamingEvent"];
        for event in &answer.events {
            if event.is_null() {
                wrong.push(format!("{method} {path}: an event's data is not JSON"));
            }
            if path == "/threads/{thread_id}/stream" {
                let at = format!("{} StreamingEvent", pointer.unwrap_or(path));
                wrong.extend(
                    self.errors(&at, streaming, event)
                        .into_iter()
                        .map(|e| format!("{method} {path} event: {e} in {event}")),
                );
            }
        }
        wrong
    }

    /// Sends `method` `url` (the spec path `path` with its ids filled in)
    /// with `body`, reads the answer (a stream until it ends, or until
    /// `enough` of its events when given), checks it, and records it.
    pub async fn call_until(
        &self,
        method: &str,
        path: &str,
        url: &str,
        body: Option<Value>,
        enough: Enough<'_>,
    ) -> Answer {
        self.call_until_opened(method, path, url, body, enough, None)
            .await
    }

    /// [`call_until`](Self::call_until), saying on `opened` when the
    /// answer's headers have come.
    pub async fn call_until_opened(
        &self,
        method: &str,
        path: &str,
        url: &str,
        body: Option<Value>,
        enough: Enough<'_>,
        opened: Option<tokio::sync::oneshot::Sender<()>>,
    ) -> Answer {
        let m = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let mut request = self.client.request(m, format!("{}{url}", self.base));
        if let Some(body) = &body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        let mut response = request.send().await.unwrap();
        if let Some(opened) = opened {
            let _ = opened.send(());
        }
        let status = response.status().as_u16();
        let media = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_string();
        let mut answer = Answer {
            status,
            media: media.clone(),
            json: Value::Null,
            events: Vec::new(),
        };
        if media == "text/event-stream" {
            let mut text = String::new();
            loop {
                let chunk = tokio::time::timeout(Duration::from_secs(30), response.chunk())
                    .await
                    .unwrap_or_else(|_| panic!("{method} {url}: the stream stalled"))
                    .unwrap();
                let Some(chunk) = chunk else { break };
                text.push_str(&String::from_utf8_lossy(&chunk));
                while let Some(end) = text.find("\n\n") {
                    let block: String = text.drain(..end + 2).collect();
                    let data: Vec<&str> = block
                        .lines()
                        .filter_map(|l| l.strip_prefix("data:"))
                        .map(str::trim_start)
                        .collect();
                    if !data.is_empty() {
                        answer
                            .events
                            .push(serde_json::from_str(&data.join("\n")).unwrap_or(Value::Null));
                    }
                }
                if enough.is_some_and(|f| f(&answer.events)) {
                    break;
                }
            }
        } else {
            let bytes = response.bytes().await.unwrap();
            if !bytes.is_empty() {
                answer.json = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                    panic!(
                        "{method} {url}: not JSON ({e}): {}",
                        String::from_utf8_lossy(&bytes)
                    )
                });
            }
        }
        self.record(method, path, url, &answer);
        answer
    }

    /// Checks `answer` (to `method` `url`, of the spec path `path`) and
    /// records it.
    pub fn record(&self, method: &str, path: &str, url: &str, answer: &Answer) {
        let wrong = self.judge(method, path, answer);
        assert!(
            wrong.is_empty(),
            "{method} {url} does not conform to the Agent Protocol (commit {SPEC_COMMIT}):\n{}",
            wrong.join("\n")
        );
        self.seen
            .lock()
            .unwrap()
            .entry((method.to_string(), path.to_string()))
            .or_default()
            .insert(answer.status);
    }

    /// What is wrong with a message of the thread's WebSocket: an event
    /// must be a `StreamingEvent`, anything else a
    /// `StreamingCommandResponse`.
    pub fn judge_message(&self, message: &Value) -> Vec<String> {
        let name = if message["type"] == "event" {
            "StreamingEvent"
        } else {
            "StreamingCommandResponse"
        };
        let schema = json!({ "$ref": format!("#/components/schemas/{name}") });
        self.errors(&format!("websocket {name}"), &schema, message)
            .into_iter()
            .map(|e| format!("WebSocket message: {e} in {message}"))
            .collect()
    }

    /// [`call_until`](Self::call_until) reading the whole answer, which
    /// must have status `expect`.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        url: &str,
        body: Option<Value>,
        expect: u16,
    ) -> Answer {
        let answer = self.call_until(method, path, url, body, None).await;
        assert_eq!(
            answer.status, expect,
            "{method} {url}: {} {:?}",
            answer.json, answer.events
        );
        answer
    }

    /// Every operation of the spec was driven, each to a success (a 2xx,
    /// or the WebSocket's 101) and to at least one other outcome.
    pub fn assert_covered(&self) {
        let seen = self.seen.lock().unwrap();
        let mut missing = Vec::new();
        for (path, ops) in self.spec["paths"].as_object().unwrap() {
            for (method, op) in ops.as_object().unwrap() {
                if !op.is_object() || method == "parameters" {
                    continue;
                }
                let key = (method.clone(), path.clone());
                let Some(statuses) = seen.get(&key) else {
                    missing.push(format!("{method} {path}: never driven"));
                    continue;
                };
                let succeeded = statuses.iter().any(|s| (200..300).contains(s) || *s == 101);
                if !succeeded {
                    missing.push(format!("{method} {path}: never succeeded ({statuses:?})"));
                }
                if statuses.len() < 2 {
                    missing.push(format!(
                        "{method} {path}: driven with one outcome only ({statuses:?}); \
                         drive a bad request too"
                    ));
                }
            }
        }
        assert!(
            missing.is_empty(),
            "operations of the spec not covered:\n{}",
            missing.join("\n")
        );
    }
}

/// The server of the tests, on a loopback port; its base URL and a sender
/// that stops it.
async fn serve(dir: &std::path::Path) -> (String, tokio::sync::oneshot::Sender<()>) {
    let bound = crate::server(dir)
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let base = format!("http://{}", bound.addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(bound.serve(async move {
        let _ = stopped.await;
    }));
    (base, stop)
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("no `{key}` in {v}"))
}

fn assert_uuid(id: &str) {
    assert!(uuid::Uuid::parse_str(id).is_ok(), "`{id}` is not a UUID");
}

const UNKNOWN: &str = "00000000-0000-4000-8000-000000000000";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_of_the_agent_protocol_conforms_to_its_spec() {
    let dir = tempfile::tempdir().unwrap();
    let (base, stop) = serve(dir.path()).await;
    let c = Conformance::new(base);

    // Agents: the assistants.
    let found = c
        .call(
            "post",
            "/agents/search",
            "/agents/search",
            Some(json!({})),
            200,
        )
        .await;
    let ids: Vec<&str> = found
        .json
        .as_array()
        .unwrap()
        .iter()
        .map(|a| str_of(a, "agent_id"))
        .collect();
    assert_eq!(ids, ["chat", "ticket", "ticks"]);
    let found = c
        .call(
            "post",
            "/agents/search",
            "/agents/search",
            Some(json!({"name": "tick", "limit": 1})),
            200,
        )
        .await;
    assert_eq!(found.json.as_array().unwrap().len(), 1);
    for bad in [json!({"limit": "ten"}), json!({"name": 7}), json!([1])] {
        c.call("post", "/agents/search", "/agents/search", Some(bad), 422)
            .await;
    }
    let agent = c
        .call("get", "/agents/{agent_id}", "/agents/ticket", None, 200)
        .await;
    assert_eq!(agent.json["agent_id"], "ticket");
    c.call("get", "/agents/{agent_id}", "/agents/nobody", None, 404)
        .await;
    let schemas = c
        .call(
            "get",
            "/agents/{agent_id}/schemas",
            "/agents/ticks/schemas",
            None,
            200,
        )
        .await;
    assert!(schemas.json["state_schema"]["properties"]["limit"].is_object());
    c.call(
        "get",
        "/agents/{agent_id}/schemas",
        "/agents/nobody/schemas",
        None,
        404,
    )
    .await;

    // Threads.
    let t = c
        .call("post", "/threads", "/threads", Some(json!({})), 200)
        .await;
    let thread = str_of(&t.json, "thread_id").to_string();
    assert_uuid(&thread);
    let chosen = uuid::Uuid::new_v4().to_string();
    let body = json!({"thread_id": chosen, "metadata": {"team": "a"}});
    c.call("post", "/threads", "/threads", Some(body.clone()), 200)
        .await;
    c.call("post", "/threads", "/threads", Some(body), 409)
        .await;
    let same = c
        .call(
            "post",
            "/threads",
            "/threads",
            Some(json!({"thread_id": chosen, "if_exists": "do_nothing"})),
            200,
        )
        .await;
    assert_eq!(same.json["metadata"]["team"], "a");
    for bad in [
        json!({"metadata": [1]}),
        json!({"if_exists": "maybe"}),
        json!({"thread_id": 5}),
    ] {
        c.call("post", "/threads", "/threads", Some(bad), 422).await;
    }
    let teams = c
        .call(
            "post",
            "/threads/search",
            "/threads/search",
            Some(json!({"metadata": {"team": "a"}})),
            200,
        )
        .await;
    assert_eq!(teams.json.as_array().unwrap().len(), 1);
    c.call(
        "post",
        "/threads/search",
        "/threads/search",
        Some(json!({"status": "idle", "limit": 5})),
        200,
    )
    .await;
    for bad in [json!({"limit": "ten"}), json!({"metadata": "x"})] {
        c.call("post", "/threads/search", "/threads/search", Some(bad), 422)
            .await;
    }

    // A run to the end, waited for (the Agent Protocol's body).
    let waited = c
        .call(
            "post",
            "/runs/wait",
            "/runs/wait",
            Some(json!({"agent_id": "ticks", "thread_id": thread, "input": {"limit": 2}})),
            200,
        )
        .await;
    assert_eq!(waited.json["values"]["ticks"], 2);
    assert_eq!(waited.json["run"]["status"], "success");
    assert_eq!(waited.json["run"]["agent_id"], "ticks");
    for (bad, status) in [
        (json!({"agent_id": "nobody"}), 404),
        (json!({"agent_id": "ticks", "thread_id": UNKNOWN}), 404),
        (json!({"agent_id": 5}), 422),
        (json!({"agent_id": "ticks", "input": {"limit": "two"}}), 422),
        (json!({"assistant_id": "ticks", "agent_id": "ticket"}), 422),
        (json!({"input": {}}), 422),
    ] {
        c.call("post", "/runs/wait", "/runs/wait", Some(bad), status)
            .await;
    }

    let got = c
        .call(
            "get",
            "/threads/{thread_id}",
            &format!("/threads/{thread}"),
            None,
            200,
        )
        .await;
    assert_eq!(got.json["values"]["ticks"], 2);
    c.call(
        "get",
        "/threads/{thread_id}",
        &format!("/threads/{UNKNOWN}"),
        None,
        404,
    )
    .await;
    let history = format!("/threads/{thread}/history");
    let all = c
        .call("get", "/threads/{thread_id}/history", &history, None, 200)
        .await;
    let states = all.json.as_array().unwrap();
    assert!(states.len() >= 3, "{states:?}");
    let second = str_of(&states[1]["checkpoint"], "checkpoint_id").to_string();
    let older = c
        .call(
            "get",
            "/threads/{thread_id}/history",
            &format!("{history}?limit=1&before={second}"),
            None,
            200,
        )
        .await;
    assert_eq!(older.json.as_array().unwrap().len(), 1);
    assert_eq!(older.json[0]["checkpoint"], states[2]["checkpoint"]);
    for (url, status) in [
        (format!("/threads/{UNKNOWN}/history"), 404),
        (format!("{history}?limit=ten"), 422),
        (format!("{history}?before=not-a-checkpoint"), 422),
    ] {
        c.call("get", "/threads/{thread_id}/history", &url, None, status)
            .await;
    }
    let patched = c
        .call(
            "patch",
            "/threads/{thread_id}",
            &format!("/threads/{thread}"),
            Some(json!({"metadata": {"owner": "ops"}, "values": {"limit": 9}})),
            200,
        )
        .await;
    assert_eq!(patched.json["metadata"]["owner"], "ops");
    assert_eq!(patched.json["values"]["limit"], 9);
    for (url, bad, status) in [
        (thread.as_str(), json!({"metadata": 3}), 422),
        (thread.as_str(), json!({"values": {"limit": "x"}}), 422),
        (UNKNOWN, json!({"metadata": {}}), 404),
    ] {
        c.call(
            "patch",
            "/threads/{thread_id}",
            &format!("/threads/{url}"),
            Some(bad),
            status,
        )
        .await;
    }
    let copy = c
        .call(
            "post",
            "/threads/{thread_id}/copy",
            &format!("/threads/{thread}/copy"),
            None,
            200,
        )
        .await;
    assert_ne!(copy.json["thread_id"], json!(thread));
    assert_eq!(copy.json["values"]["limit"], 9);
    c.call(
        "post",
        "/threads/{thread_id}/copy",
        &format!("/threads/{UNKNOWN}/copy"),
        None,
        404,
    )
    .await;

    // A background run, addressed by its id alone.
    let long = c
        .call(
            "post",
            "/runs",
            "/runs",
            Some(json!({"agent_id": "ticks", "thread_id": thread, "input": {"limit": 400}})),
            200,
        )
        .await;
    let run = str_of(&long.json, "run_id").to_string();
    assert_uuid(&run);
    assert_eq!(long.json["thread_id"], json!(thread));
    let busy = json!({"agent_id": "ticks", "thread_id": thread, "input": {"limit": 1}});
    c.call("post", "/runs", "/runs", Some(busy), 409).await;
    for (bad, status) in [
        (json!({"agent_id": "nobody"}), 404),
        (json!({"agent_id": "ticks", "on_completion": "forget"}), 422),
        (json!({"agent_id": "ticks", "metadata": [1]}), 422),
    ] {
        c.call("post", "/runs", "/runs", Some(bad), status).await;
    }
    // See EXTRA_STATUSES.
    c.call(
        "post",
        "/threads/{thread_id}/copy",
        &format!("/threads/{thread}/copy"),
        None,
        409,
    )
    .await;
    let by_id = format!("/runs/{run}");
    let pending = c.call("get", "/runs/{run_id}", &by_id, None, 200).await;
    assert_eq!(pending.json["status"], "pending");
    c.call("delete", "/runs/{run_id}", &by_id, None, 422).await;
    c.call(
        "post",
        "/runs/{run_id}/cancel",
        &format!("{by_id}/cancel?action=sideways"),
        None,
        422,
    )
    .await;
    c.call(
        "post",
        "/runs/{run_id}/cancel",
        &format!("{by_id}/cancel?wait=true"),
        None,
        204,
    )
    .await;
    c.call(
        "post",
        "/runs/{run_id}/cancel",
        &format!("{by_id}/cancel"),
        None,
        422,
    )
    .await;
    c.call(
        "post",
        "/runs/{run_id}/cancel",
        &format!("/runs/{UNKNOWN}/cancel"),
        None,
        404,
    )
    .await;
    let ended = c
        .call(
            "get",
            "/runs/{run_id}/wait",
            &format!("{by_id}/wait"),
            None,
            200,
        )
        .await;
    assert_eq!(ended.json["run"]["status"], "interrupted");
    c.call(
        "get",
        "/runs/{run_id}/wait",
        &format!("/runs/{UNKNOWN}/wait"),
        None,
        404,
    )
    .await;
    let joined = c
        .call(
            "get",
            "/runs/{run_id}/stream",
            &format!("{by_id}/stream"),
            None,
            200,
        )
        .await;
    assert!(!joined.events.is_empty());
    c.call(
        "get",
        "/runs/{run_id}/stream",
        &format!("/runs/{UNKNOWN}/stream"),
        None,
        404,
    )
    .await;
    let runs = c
        .call(
            "post",
            "/runs/search",
            "/runs/search",
            Some(json!({"agent_id": "ticks", "thread_id": thread})),
            200,
        )
        .await;
    let listed: Vec<&str> = runs
        .json
        .as_array()
        .unwrap()
        .iter()
        .map(|r| str_of(r, "run_id"))
        .collect();
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert_eq!(listed[0], run);
    let succeeded = c
        .call(
            "post",
            "/runs/search",
            "/runs/search",
            Some(json!({"status": "success", "limit": 5})),
            200,
        )
        .await;
    assert!(
        succeeded
            .json
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["status"] == "success")
    );
    for (bad, status) in [
        (json!({"status": "running"}), 422),
        (json!({"limit": 0}), 422),
        (json!({"agent_id": "nobody"}), 404),
    ] {
        c.call("post", "/runs/search", "/runs/search", Some(bad), status)
            .await;
    }
    c.call("delete", "/runs/{run_id}", &by_id, None, 204).await;
    c.call("get", "/runs/{run_id}", &by_id, None, 404).await;
    c.call("delete", "/runs/{run_id}", &by_id, None, 404).await;

    // A stateless run, streamed.
    let streamed = c
        .call(
            "post",
            "/runs/stream",
            "/runs/stream",
            Some(json!({"agent_id": "ticks", "input": {"limit": 2},
                        "stream_mode": ["values", "updates"]})),
            200,
        )
        .await;
    assert!(
        streamed.events.iter().any(|e| e["ticks"] == 2),
        "{:?}",
        streamed.events
    );
    for (bad, status) in [
        (json!({"agent_id": "nobody"}), 404),
        (
            json!({"agent_id": "ticks", "stream_mode": "everything"}),
            422,
        ),
        (json!({"agent_id": "ticks", "thread_id": UNKNOWN}), 404),
    ] {
        c.call("post", "/runs/stream", "/runs/stream", Some(bad), status)
            .await;
    }

    // A client of the Agent Protocol that goes away mid-stream stops its
    // run (its `on_disconnect` defaults to `cancel`).
    let t = c
        .call("post", "/threads", "/threads", Some(json!({})), 200)
        .await;
    let left = str_of(&t.json, "thread_id").to_string();
    let dropped = c
        .call_until(
            "post",
            "/runs/stream",
            "/runs/stream",
            Some(json!({"agent_id": "ticks", "thread_id": left, "input": {"limit": 400}})),
            Some(&|events: &[Value]| events.len() >= 2),
        )
        .await;
    assert_eq!(dropped.status, 200);
    let runs = c
        .call(
            "post",
            "/runs/search",
            "/runs/search",
            Some(json!({"thread_id": left})),
            200,
        )
        .await;
    let run = str_of(&runs.json[0], "run_id");
    let ended = c
        .call(
            "get",
            "/runs/{run_id}/wait",
            &format!("/runs/{run}/wait"),
            None,
            200,
        )
        .await;
    assert_eq!(ended.json["run"]["status"], "interrupted", "{}", ended.json);
    assert!(ended.json["values"]["ticks"].as_u64().unwrap() < 400);

    // The streaming protocol: a thread's events, and commands.
    let t = c
        .call("post", "/threads", "/threads", Some(json!({})), 200)
        .await;
    let review = str_of(&t.json, "thread_id").to_string();
    let stream_url = format!("/threads/{review}/stream");
    let commands = format!("/threads/{review}/commands");
    let events = {
        let c = &c;
        let url = stream_url.clone();
        // The run starts once the stream's headers have come: the server
        // has looked at the thread's runs by then.
        let (opened, is_open) = tokio::sync::oneshot::channel();
        let reading = async move {
            let paused = |events: &[Value]| {
                events.iter().any(|e| {
                    e["method"] == "lifecycle" && e["params"]["data"]["event"] != "running"
                })
            };
            c.call_until_opened(
                "post",
                "/threads/{thread_id}/stream",
                &url,
                Some(json!({"channels": ["values", "updates", "lifecycle"],
                            "namespaces": [[]]})),
                Some(&paused),
                Some(opened),
            )
            .await
        };
        let starting = async {
            is_open.await.unwrap();
            c.call(
                "post",
                "/threads/{thread_id}/commands",
                &commands,
                Some(json!({"id": 1, "method": "run.start",
                            "params": {"assistantId": "ticket", "input": {}}})),
                200,
            )
            .await
        };
        let (events, started) = tokio::join!(reading, starting);
        assert_eq!(started.json["type"], "success", "{}", started.json);
        assert!(started.json["result"]["runId"].is_string());
        events
    };
    assert_eq!(events.status, 200);
    let methods: BTreeSet<&str> = events
        .events
        .iter()
        .map(|e| e["method"].as_str().unwrap())
        .collect();
    assert_eq!(
        methods,
        BTreeSet::from(["lifecycle", "updates", "values"]),
        "{:?}",
        events.events
    );
    let seqs: Vec<u64> = events
        .events
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    let thread_now = c
        .call(
            "get",
            "/threads/{thread_id}",
            &format!("/threads/{review}"),
            None,
            200,
        )
        .await;
    assert_eq!(thread_now.json["status"], "interrupted");
    let interrupt = thread_now.json["interrupts"]
        .as_object()
        .unwrap()
        .values()
        .next()
        .unwrap()[0]["id"]
        .clone();
    let state = c
        .call(
            "post",
            "/threads/{thread_id}/commands",
            &commands,
            Some(json!({"id": 2, "method": "state.get", "params": {"namespace": []}})),
            200,
        )
        .await;
    assert_eq!(state.json["result"]["values"]["drafts"], 1);
    let answered = c
        .call(
            "post",
            "/threads/{thread_id}/commands",
            &commands,
            Some(json!({"id": 3, "method": "input.respond",
                        "params": {"namespace": [], "interruptId": interrupt,
                                   "response": {"approve": true}}})),
            200,
        )
        .await;
    assert_eq!(answered.json["type"], "success", "{}", answered.json);
    // Replayed from the start: the first run's events, then the answer's.
    let replay = c
        .call_until(
            "post",
            "/threads/{thread_id}/stream",
            &stream_url,
            Some(json!({"channels": ["lifecycle"], "since": 0})),
            Some(&|events: &[Value]| {
                events
                    .iter()
                    .any(|e| e["params"]["data"]["event"] == "completed")
            }),
        )
        .await;
    assert!(replay.events.len() >= 3, "{:?}", replay.events);
    for (id, method, code) in [
        (4, "subscription.subscribe", "not_supported"),
        (5, "fly", "unknown_command"),
        (6, "input.respond", "no_such_interrupt"),
    ] {
        let params = if method == "input.respond" {
            json!({"namespace": [], "interruptId": UNKNOWN, "response": 1})
        } else {
            json!({})
        };
        let refused = c
            .call(
                "post",
                "/threads/{thread_id}/commands",
                &commands,
                Some(json!({"id": id, "method": method, "params": params})),
                200,
            )
            .await;
        assert_eq!(refused.json["type"], "error");
        if code != "no_such_interrupt" {
            assert_eq!(refused.json["error"], code, "{}", refused.json);
        }
    }
    for (url, bad, status) in [
        (
            commands.clone(),
            json!({"id": -1, "method": "state.get"}),
            422,
        ),
        (commands.clone(), json!({"method": "state.get"}), 422),
        (
            format!("/threads/{UNKNOWN}/commands"),
            json!({"id": 1, "method": "state.get"}),
            404,
        ),
    ] {
        c.call(
            "post",
            "/threads/{thread_id}/commands",
            &url,
            Some(bad),
            status,
        )
        .await;
    }
    for (url, bad, status) in [
        (stream_url.clone(), json!({"channels": []}), 422),
        (stream_url.clone(), json!({"channels": ["weather"]}), 422),
        (stream_url.clone(), json!({}), 422),
        (
            format!("/threads/{UNKNOWN}/stream"),
            json!({"channels": ["values"]}),
            404,
        ),
    ] {
        c.call(
            "post",
            "/threads/{thread_id}/stream",
            &url,
            Some(bad),
            status,
        )
        .await;
    }
    // The WebSocket: a GET that is not an upgrade is refused.
    c.call("get", "/threads/{thread_id}/stream", &stream_url, None, 422)
        .await;
    websocket(&c).await;
    c.call(
        "get",
        "/threads/{thread_id}/stream",
        &format!("/threads/{UNKNOWN}/stream"),
        None,
        404,
    )
    .await;

    // The store.
    let item = json!({"namespace": ["users", "u1"], "key": "prefs", "value": {"text": "tea"}});
    c.call("put", "/store/items", "/store/items", Some(item), 204)
        .await;
    for bad in [
        json!({"namespace": "users", "key": "k", "value": {}}),
        json!({"namespace": ["users"], "value": {}}),
        json!({"namespace": ["users"], "key": "k", "value": 3}),
    ] {
        c.call("put", "/store/items", "/store/items", Some(bad), 422)
            .await;
    }
    let got = c
        .call(
            "get",
            "/store/items",
            "/store/items?key=prefs&namespace=users&namespace=u1",
            None,
            200,
        )
        .await;
    assert_eq!(got.json["value"]["text"], "tea");
    let dotted = c
        .call(
            "get",
            "/store/items",
            "/store/items?key=prefs&namespace=users.u1",
            None,
            200,
        )
        .await;
    assert_eq!(dotted.json["key"], "prefs");
    c.call(
        "get",
        "/store/items",
        "/store/items?key=nothing&namespace=users&namespace=u1",
        None,
        404,
    )
    .await;
    c.call(
        "get",
        "/store/items",
        "/store/items?namespace=users",
        None,
        422,
    )
    .await;
    let hits = c
        .call(
            "post",
            "/store/items/search",
            "/store/items/search",
            Some(json!({"namespace_prefix": ["users"], "filter": {"text": "tea"}})),
            200,
        )
        .await;
    assert_eq!(hits.json["items"].as_array().unwrap().len(), 1);
    c.call(
        "post",
        "/store/items/search",
        "/store/items/search",
        Some(json!({"namespace_prefix": null, "filter": null})),
        200,
    )
    .await;
    // See EXTRA_STATUSES.
    c.call(
        "post",
        "/store/items/search",
        "/store/items/search",
        Some(json!({"filter": {"text": {"$near": "tea"}}})),
        400,
    )
    .await;
    for bad in [
        json!({"limit": "ten"}),
        json!({"namespace_prefix": "users"}),
    ] {
        c.call(
            "post",
            "/store/items/search",
            "/store/items/search",
            Some(bad),
            422,
        )
        .await;
    }
    let names = c
        .call(
            "post",
            "/store/namespaces",
            "/store/namespaces",
            Some(json!({"prefix": ["users"]})),
            200,
        )
        .await;
    assert_eq!(names.json["namespaces"], json!([["users", "u1"]]));
    for bad in [json!({"max_depth": "two"}), json!({"prefix": "users"})] {
        c.call(
            "post",
            "/store/namespaces",
            "/store/namespaces",
            Some(bad),
            422,
        )
        .await;
    }
    let gone = json!({"namespace": ["users", "u1"], "key": "prefs"});
    c.call("delete", "/store/items", "/store/items", Some(gone), 204)
        .await;
    // An item always lives in a namespace here: none is a 422 naming it.
    for bad in [
        json!({"namespace": ["users"]}),
        json!({"key": 5}),
        json!({"key": "prefs"}),
    ] {
        c.call("delete", "/store/items", "/store/items", Some(bad), 422)
            .await;
    }
    c.call(
        "get",
        "/store/items",
        "/store/items?key=prefs&namespace=users&namespace=u1",
        None,
        404,
    )
    .await;

    // Deleting a thread.
    let copied = str_of(&copy.json, "thread_id");
    c.call(
        "delete",
        "/threads/{thread_id}",
        &format!("/threads/{copied}"),
        None,
        204,
    )
    .await;
    c.call(
        "delete",
        "/threads/{thread_id}",
        &format!("/threads/{copied}"),
        None,
        404,
    )
    .await;

    c.assert_covered();
    let _ = stop.send(());
}

/// The thread's WebSocket, as the test drives it.
type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The next text message of `socket` (checked against the spec) that is
/// an event when `event`, a command response otherwise; the messages of
/// the other kind met on the way are kept in `skipped`.
async fn receive(
    c: &Conformance,
    socket: &mut Socket,
    event: bool,
    skipped: &mut Vec<Value>,
) -> Value {
    use futures::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    loop {
        let message = tokio::time::timeout(Duration::from_secs(30), socket.next())
            .await
            .expect("the WebSocket stalled")
            .expect("the WebSocket closed")
            .unwrap();
        let Message::Text(text) = message else {
            continue;
        };
        let value: Value = serde_json::from_str(&text).unwrap();
        let wrong = c.judge_message(&value);
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
        if (value["type"] == "event") == event {
            return value;
        }
        skipped.push(value);
    }
}

/// The streaming protocol over the thread's WebSocket: subscribe, start a
/// run, read its events to its end, unsubscribe, and a few bad commands;
/// each message checked.
async fn websocket(c: &Conformance) {
    use futures::SinkExt;
    use tokio_tungstenite::tungstenite::Message;
    let t = c
        .call("post", "/threads", "/threads", Some(json!({})), 200)
        .await;
    let thread = str_of(&t.json, "thread_id");
    let path = format!("/threads/{thread}/stream");
    let url = format!("{}{path}", c.base.replacen("http://", "ws://", 1));
    let (mut socket, response) = tokio_tungstenite::connect_async(url).await.unwrap();
    let upgraded = Answer {
        status: response.status().as_u16(),
        media: String::new(),
        json: Value::Null,
        events: Vec::new(),
    };
    c.record("get", "/threads/{thread_id}/stream", &path, &upgraded);
    assert_eq!(upgraded.status, 101);
    let send = async |socket: &mut Socket, command: Value| {
        socket
            .send(Message::Text(command.to_string().into()))
            .await
            .unwrap();
    };
    let mut events = Vec::new();
    send(
        &mut socket,
        json!({"id": 1, "method": "subscription.subscribe",
               "params": {"channels": ["values", "lifecycle"]}}),
    )
    .await;
    let subscribed = receive(c, &mut socket, false, &mut events).await;
    assert_eq!(subscribed["type"], "success", "{subscribed}");
    let subscription = subscribed["result"]["subscriptionId"].clone();
    send(
        &mut socket,
        json!({"id": 2, "method": "run.start",
               "params": {"assistantId": "ticks", "input": {"limit": 2}}}),
    )
    .await;
    let mut replies = Vec::new();
    while !events
        .iter()
        .any(|e: &Value| e["params"]["data"]["event"] == "completed")
    {
        let event = receive(c, &mut socket, true, &mut replies).await;
        events.push(event);
    }
    assert!(
        replies
            .iter()
            .any(|r| r["id"] == 2 && r["type"] == "success"),
        "{replies:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| e["method"] == "values" && e["params"]["data"]["ticks"] == 2),
        "{events:?}"
    );
    for (command, wanted) in [
        (
            json!({"id": 3, "method": "subscription.unsubscribe",
                   "params": {"subscriptionId": subscription}}),
            "success",
        ),
        (
            json!({"id": 4, "method": "subscription.unsubscribe",
                   "params": {"subscriptionId": "nope"}}),
            "no_such_subscription",
        ),
        (
            json!({"id": 5, "method": "subscription.subscribe",
                   "params": {"channels": []}}),
            "invalid_argument",
        ),
        (json!({"id": "six"}), "invalid_argument"),
        (json!({"id": 7, "method": "fly"}), "unknown_command"),
    ] {
        send(&mut socket, command.clone()).await;
        let reply = receive(c, &mut socket, false, &mut Vec::new()).await;
        let got = if reply["type"] == "success" {
            &reply["type"]
        } else {
            &reply["error"]
        };
        assert_eq!(*got, json!(wanted), "{command}: {reply}");
    }
    socket.close(None).await.unwrap();
}

/// The checks refuse answers that drift from the spec: a field missing, of
/// the wrong type or format, a status or media type the operation does not
/// list, a stream event that is not a `StreamingEvent`.
#[test]
fn answers_that_drift_from_the_spec_are_refused() {
    let c = Conformance::new(String::new());
    let answer = |status: u16, media: &str, json: Value| Answer {
        status,
        media: media.into(),
        json,
        events: Vec::new(),
    };
    let agent = json!({"agent_id": "a", "name": "a", "capabilities": {}});
    assert!(
        c.judge(
            "get",
            "/agents/{agent_id}",
            &answer(200, "application/json", agent.clone())
        )
        .is_empty()
    );
    let at = "2026-01-01T00:00:00.000+00:00";
    let thread = json!({"thread_id": UNKNOWN, "created_at": at, "updated_at": at,
                        "metadata": {}, "status": "idle", "values": {}});
    assert!(
        c.judge(
            "get",
            "/threads/{thread_id}",
            &answer(200, "application/json", thread.clone())
        )
        .is_empty()
    );
    let mut drifted: Vec<(&str, &str, Answer)> = Vec::new();
    let mut no_caps = agent.clone();
    no_caps.as_object_mut().unwrap().remove("capabilities");
    drifted.push((
        "get",
        "/agents/{agent_id}",
        answer(200, "application/json", no_caps),
    ));
    let mut named = agent.clone();
    named["name"] = json!(7);
    drifted.push((
        "get",
        "/agents/{agent_id}",
        answer(200, "application/json", named),
    ));
    for (field, value) in [
        ("status", json!("running")),
        ("created_at", json!("yesterday")),
        ("thread_id", json!("t-1")),
        ("metadata", json!([])),
    ] {
        let mut t = thread.clone();
        t[field] = value;
        drifted.push((
            "get",
            "/threads/{thread_id}",
            answer(200, "application/json", t),
        ));
    }
    drifted.push((
        "get",
        "/threads/{thread_id}",
        answer(400, "application/json", json!({})),
    ));
    drifted.push((
        "post",
        "/store/items/search",
        answer(400, "application/json", json!({"message": 7})),
    ));
    drifted.push((
        "get",
        "/threads/{thread_id}",
        answer(200, "text/plain", thread.clone()),
    ));
    drifted.push((
        "delete",
        "/threads/{thread_id}",
        answer(204, "application/json", json!({})),
    ));
    drifted.push((
        "post",
        "/store/namespaces",
        answer(200, "application/json", json!([["users"]])),
    ));
    let mut stream = answer(200, "text/event-stream", Value::Null);
    stream.events = vec![json!({"type": "event", "method": "values"})];
    drifted.push(("post", "/threads/{thread_id}/stream", stream));
    drifted.push((
        "get",
        "/nowhere",
        answer(200, "application/json", json!({})),
    ));
    for (method, path, answer) in &drifted {
        assert!(
            !c.judge(method, path, answer).is_empty(),
            "{method} {path} {answer:?} passed"
        );
    }
    assert!(!SPEC_COMMIT.is_empty() && SPEC.contains("\"Agent Protocol\""));
}
