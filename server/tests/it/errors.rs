//! Every client mistake is a 4xx JSON error that names what was wrong and
//! where; never a 500. Requests go to the router in-process.

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

struct Api {
    router: Router,
    _dir: tempfile::TempDir,
}

impl Api {
    fn new() -> Self {
        Self::with(|server| server)
    }

    /// The test server, changed by `setup`.
    fn with(setup: impl FnOnce(harness_server::Server) -> harness_server::Server) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let router = setup(crate::server(dir.path())).router().unwrap();
        Api { router, _dir: dir }
    }

    async fn call(&self, method: Method, path: &str, body: impl Into<Body>) -> (StatusCode, Value) {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", "application/json")
            .body(body.into())
            .unwrap();
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                panic!(
                    "{path}: not JSON ({e}): {}",
                    String::from_utf8_lossy(&bytes)
                )
            })
        };
        (status, value)
    }

    async fn post(&self, path: &str, body: &str) -> (StatusCode, Value) {
        self.call(Method::POST, path, body.to_string()).await
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.call(Method::GET, path, Body::empty()).await
    }

    async fn thread(&self) -> String {
        let (status, thread) = self.post("/threads", "{}").await;
        assert_eq!(status, StatusCode::OK, "{thread}");
        thread["thread_id"].as_str().unwrap().to_string()
    }
}

/// `status`, a JSON error body whose `field` is `field` (when given) and
/// whose message contains `says`.
fn expect(got: (StatusCode, Value), status: StatusCode, field: Option<&str>, says: &str) {
    let (s, body) = got;
    assert_eq!(s, status, "{body}");
    let message = body["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(says),
        "the message `{message}` does not say `{says}`"
    );
    if let Some(field) = field {
        assert_eq!(body["field"], json!(field), "{body}");
    }
}

#[tokio::test]
async fn malformed_bodies_are_422s_naming_the_field() {
    let api = Api::new();
    let t = api.thread().await;
    let runs = format!("/threads/{t}/runs");
    // Not JSON at all, cut short, trailing garbage, the wrong top-level type.
    for body in [
        "{",
        "not json",
        "{\"assistant_id\": \"ticket\"} x",
        "[1, 2]",
    ] {
        let (status, err) = api.post(&runs, body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {err}");
        assert!(err["message"].as_str().unwrap().contains("body"), "{err}");
    }
    // A field of the wrong type, named by its path.
    expect(
        api.post(&runs, r#"{"assistant_id": 7}"#).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("assistant_id"),
        "assistant_id",
    );
    expect(
        api.post(&runs, r#"{"assistant_id": "ticket", "metadata": [1]}"#)
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("metadata"),
        "metadata",
    );
    expect(
        api.post(
            &runs,
            r#"{"assistant_id": "ticket", "stream_subgraphs": "yes"}"#,
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("stream_subgraphs"),
        "stream_subgraphs",
    );
    expect(
        api.post("/threads/search", r#"{"limit": -1}"#).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("limit"),
        "limit",
    );
    // A missing required field.
    expect(
        api.post(&runs, r#"{"input": {}}"#).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        None,
        "assistant_id",
    );
}

#[tokio::test]
async fn unknown_assistants_threads_runs_and_checkpoints_are_404s() {
    let api = Api::new();
    let t = api.thread().await;
    for path in [
        "/assistants/nobody",
        "/assistants/nobody/graph",
        "/assistants/nobody/schemas",
        "/threads/no-such-thread",
        "/threads/no-such-thread/state",
        "/threads/no-such-thread/runs",
    ] {
        let (status, err) = api.get(path).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {err}");
        assert!(
            err["message"].as_str().unwrap().contains("nobody")
                || err["message"].as_str().unwrap().contains("no-such-thread"),
            "{path}: {err}"
        );
    }
    expect(
        api.get(&format!("/threads/{t}/runs/no-such-run")).await,
        StatusCode::NOT_FOUND,
        None,
        "run `no-such-run`",
    );
    expect(
        api.post(
            &format!("/threads/{t}/runs"),
            r#"{"assistant_id": "nobody"}"#,
        )
        .await,
        StatusCode::NOT_FOUND,
        None,
        "assistant `nobody`",
    );
    expect(
        api.post(
            "/threads/no-such-thread/runs/wait",
            r#"{"assistant_id": "ticks"}"#,
        )
        .await,
        StatusCode::NOT_FOUND,
        None,
        "thread `no-such-thread`",
    );
    // An unknown route is a JSON 404 too; a wrong method a JSON 405.
    // Both name the call and say it is not supported.
    let (status, body) = api.get("/nowhere").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"], "not_found");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("`GET /nowhere` is not supported"),
        "{message}"
    );
    let (status, body) = api.call(Method::PUT, "/threads", Body::empty()).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(body["error"], "method_not_allowed");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("`PUT /threads` is not supported"),
        "{message}"
    );
    // The SDK's `threads.count` (a path the server has for another method).
    let (status, body) = api.post("/threads/count", "{}").await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("`POST /threads/count` is not supported"),
        "{message}"
    );
    // A checkpoint id that is not one, or not this thread's.
    let (_, _) = api
        .post(
            &format!("/threads/{t}/runs/wait"),
            r#"{"assistant_id": "ticks", "input": {"limit": 1}}"#,
        )
        .await;
    expect(
        api.get(&format!("/threads/{t}/state/not-a-checkpoint"))
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("checkpoint_id"),
        "not a checkpoint id",
    );
    expect(
        api.get(&format!("/threads/{t}/state/0.someone-else")).await,
        StatusCode::NOT_FOUND,
        None,
        "checkpoint",
    );
}

#[tokio::test]
async fn inputs_that_do_not_fit_the_state_are_422s_naming_the_field() {
    let api = Api::new();
    let t = api.thread().await;
    let wait = format!("/threads/{t}/runs/wait");
    expect(
        api.post(
            &wait,
            r#"{"assistant_id": "ticks", "input": {"limit": "ten"}}"#,
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("input.limit"),
        "input.limit",
    );
    expect(
        api.post(&wait, r#"{"assistant_id": "ticks", "input": {"limt": 3}}"#)
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("input.limt"),
        "not a field",
    );
    expect(
        api.post(&wait, r#"{"assistant_id": "ticks", "input": [1]}"#)
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("input"),
        "object",
    );
    expect(
        api.post(
            &wait,
            r#"{"assistant_id": "ticks", "stream_mode": "bogus"}"#,
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("stream_mode"),
        "not a stream mode",
    );
    expect(
        api.post(
            &wait,
            r#"{"assistant_id": "ticks", "stream_mode": ["values", "messages", "tokens"]}"#,
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("stream_mode[2]"),
        "not a stream mode",
    );
    // Options this server does not support are refused, never ignored.
    for (body, field) in [
        // Breakpoints name steps of the agent, as a list or `"*"`.
        (
            r#"{"assistant_id": "ticks", "interrupt_before": ["tock"]}"#,
            "interrupt_before[0]",
        ),
        (
            r#"{"assistant_id": "ticks", "interrupt_after": ["tick", 3]}"#,
            "interrupt_after[1]",
        ),
        (
            r#"{"assistant_id": "ticks", "interrupt_after": "tick"}"#,
            "interrupt_after",
        ),
        (
            r#"{"assistant_id": "ticks", "interrupt_before": {"tick": true}}"#,
            "interrupt_before",
        ),
        (
            r#"{"assistant_id": "ticks", "webhook": "http://10.1.2.3/x"}"#,
            "webhook",
        ),
        (
            r#"{"assistant_id": "ticks", "command": {"goto": "tick"}}"#,
            "command.goto",
        ),
    ] {
        expect(
            api.post(&wait, body).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            Some(field),
            field,
        );
    }
    // Values that are none of the allowed ones.
    for (body, field) in [
        (
            r#"{"assistant_id": "ticks", "multitask_strategy": "sometimes"}"#,
            "multitask_strategy",
        ),
        (
            r#"{"assistant_id": "ticks", "on_disconnect": "explode"}"#,
            "on_disconnect",
        ),
        (
            r#"{"assistant_id": "ticks", "if_not_exists": "maybe"}"#,
            "if_not_exists",
        ),
    ] {
        expect(
            api.post(&wait, body).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            Some(field),
            "none of",
        );
    }
    // Input and command together.
    expect(
        api.post(
            &wait,
            r#"{"assistant_id": "ticks", "input": {"limit": 1}, "command": {"resume": 1}}"#,
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("command"),
        "not both",
    );
}

#[tokio::test]
async fn resumes_that_do_not_match_the_thread_are_refused() {
    let api = Api::new();
    let t = api.thread().await;
    let wait = format!("/threads/{t}/runs/wait");
    // Nothing to answer yet.
    expect(
        api.post(
            &wait,
            r#"{"assistant_id": "ticket", "command": {"resume": {"approve": true}}}"#,
        )
        .await,
        StatusCode::CONFLICT,
        None,
        "no interrupt waiting",
    );
    // Pause it.
    let (status, out) = api
        .post(
            &wait,
            r#"{"assistant_id": "ticket", "input": {"log": ["x"]}}"#,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{out}");
    let pending = out["__interrupt__"][0]["id"].as_str().unwrap().to_string();
    // An answer by the id of another interrupt.
    let other = "00000000-0000-4000-8000-000000000000";
    expect(
        api.post(
            &wait,
            &format!(r#"{{"assistant_id": "ticket", "command": {{"resume": {{"{other}": 1}}}}}}"#),
        )
        .await,
        StatusCode::CONFLICT,
        None,
        &pending,
    );
    // Answers to several interrupts when one waits.
    expect(
        api.post(
            &wait,
            &format!(
                r#"{{"assistant_id": "ticket", "command": {{"resume": {{"{pending}": 1, "{other}": 2}}}}}}"#
            ),
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("command.resume"),
        "answers 2 interrupts",
    );
    // A command without resume.
    expect(
        api.post(&wait, r#"{"assistant_id": "ticket", "command": {}}"#)
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("command.resume"),
        "resume",
    );
    // A run of another assistant on this thread.
    expect(
        api.post(&wait, r#"{"assistant_id": "ticks", "input": {"limit": 1}}"#)
            .await,
        StatusCode::CONFLICT,
        None,
        "runs assistant `ticket`",
    );
    // The interrupt is still there, and the right answer goes through.
    let (status, out) = api
        .post(
            &wait,
            &format!(r#"{{"assistant_id": "ticket", "command": {{"resume": {{"{pending}": {{"approve": false}}}}}}}}"#),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{out}");
    assert_eq!(out["decision"], "rejected");
}

#[tokio::test]
async fn bodies_over_the_limit_are_413s_and_ids_are_checked() {
    let api = Api::new();
    let big = format!(r#"{{"metadata": {{"x": "{}"}}}}"#, "a".repeat(100 * 1024));
    let (status, err) = api.post("/threads", &big).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{err}");
    assert!(err["message"].as_str().unwrap().contains("65536"), "{err}");
    let long = "t".repeat(300);
    expect(
        api.post("/threads", &format!(r#"{{"thread_id": "{long}"}}"#))
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("thread_id"),
        "at most 256",
    );
    expect(
        api.post("/threads", r#"{"thread_id": ""}"#).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("thread_id"),
        "empty",
    );
    expect(
        api.post("/threads", r#"{"thread_id": "a\nb"}"#).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("thread_id"),
        "control",
    );
    // The same id twice.
    let (status, _) = api.post("/threads", r#"{"thread_id": "t1"}"#).await;
    assert_eq!(status, StatusCode::OK);
    expect(
        api.post("/threads", r#"{"thread_id": "t1"}"#).await,
        StatusCode::CONFLICT,
        None,
        "already exists",
    );
    let (status, _) = api
        .post(
            "/threads",
            r#"{"thread_id": "t1", "if_exists": "do_nothing"}"#,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    // Query values.
    expect(
        api.get("/threads/t1/runs?limit=many").await,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("limit"),
        "whole number",
    );
    expect(
        api.get("/threads/t1/runs?status=sleeping").await,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("status"),
        "none of",
    );
}

#[tokio::test]
async fn the_server_listens_on_loopback_unless_told_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    let err = crate::server(dir.path())
        .bind("0.0.0.0:0".parse().unwrap())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not a loopback address"), "{err}");
    let err = harness_server::Server::new().router().unwrap_err();
    assert!(err.to_string().contains("no agent"), "{err}");
}

#[tokio::test]
async fn the_process_secrets_never_leave_in_streams_results_or_state() {
    let secret = "sk-server-test-7f3a9c1e5b2d4680";
    harness::secrets::register(secret);
    let api = Api::new();
    let t = api.thread().await;
    let input = format!(
        r#"{{"assistant_id": "ticket", "input": {{"log": ["key {secret}"]}}, "stream_mode": ["values", "updates", "debug", "events"]}}"#
    );
    let request = Request::builder()
        .method(Method::POST)
        .uri(format!("/threads/{t}/runs/stream"))
        .header("content-type", "application/json")
        .body(Body::from(input))
        .unwrap();
    let response = api.router.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.contains("event: values"), "{text}");
    assert!(text.contains("key "), "{text}");
    assert!(!text.contains(secret), "{text}");
    let (status, state) = api.get(&format!("/threads/{t}/state")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!state.to_string().contains(secret), "{state}");
    let (_, waited) = api
        .post(
            &format!("/threads/{t}/runs/wait"),
            r#"{"assistant_id": "ticket", "command": {"resume": {"approve": true}}}"#,
        )
        .await;
    assert_eq!(waited["decision"], "approved", "{waited}");
    assert!(!waited.to_string().contains(secret), "{waited}");
}

#[tokio::test]
async fn a_resumable_stream_says_where_to_reconnect_and_names_its_run() {
    let api = Api::new();
    let t = api.thread().await;
    for (resumable, located) in [(true, true), (false, false)] {
        let body = format!(
            r#"{{"assistant_id": "ticks", "input": {{"limit": 1}}, "stream_resumable": {resumable}}}"#
        );
        let request = Request::builder()
            .method(Method::POST)
            .uri(format!("/threads/{t}/runs/stream"))
            .header("content-type", "application/json")
            .body(Body::from(body))
            .unwrap();
        let response = api.router.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let run = response.headers()["content-location"]
            .to_str()
            .unwrap()
            .to_string();
        assert!(run.starts_with(&format!("/threads/{t}/runs/")), "{run}");
        assert_eq!(
            response
                .headers()
                .get("location")
                .map(|v| v.to_str().unwrap().to_string()),
            located.then(|| format!("{run}/stream"))
        );
        // Read it to the end: the thread is free for the next one.
        response.into_body().collect().await.unwrap();
    }
}

impl Api {
    async fn call_with(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &[u8])],
        body: &str,
    ) -> (StatusCode, Value) {
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", "application/json");
        for (name, value) in headers {
            request = request.header(*name, axum::http::HeaderValue::from_bytes(value).unwrap());
        }
        let response = self
            .router
            .clone()
            .oneshot(request.body(Body::from(body.to_string())).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let value = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            panic!(
                "{path}: not JSON ({e}): {}",
                String::from_utf8_lossy(&bytes)
            )
        });
        (status, value)
    }

    /// The ids of every thread `/threads/search` lists.
    async fn thread_ids(&self) -> Vec<String> {
        let (status, found) = self.post("/threads/search", r#"{"limit": 1000}"#).await;
        assert_eq!(status, StatusCode::OK, "{found}");
        let mut ids: Vec<String> = found
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["thread_id"].as_str().unwrap().to_string())
            .collect();
        ids.sort();
        ids
    }
}

/// `{"a": {"a": ... {}}}`, `levels` deep.
fn nested(levels: usize) -> String {
    let mut text = "{}".to_string();
    for _ in 1..levels {
        text = format!(r#"{{"a": {text}}}"#);
    }
    text
}

#[tokio::test]
async fn a_store_search_at_any_offset_answers_and_the_server_lives_on() {
    let api = Api::new();
    let (status, put) = api
        .call(
            Method::PUT,
            "/store/items",
            r#"{"namespace": ["docs"], "key": "k1", "value": {"text": "a note on tides"}}"#,
        )
        .await;
    assert!(status.is_success(), "{put}");
    for offset in [
        "1",
        "9007199254740993",
        "100000000000000",
        "1000000000000000000",
        "18446744073709551615",
    ] {
        let body = format!(r#"{{"query": "tides", "offset": {offset}, "limit": 1000}}"#);
        let (status, found) = api.post("/store/items/search", &body).await;
        assert_eq!(status, StatusCode::OK, "offset {offset}: {found}");
        assert_eq!(found["items"], json!([]), "offset {offset}");
    }
    let (_, found) = api
        .post("/store/items/search", r#"{"query": "tides"}"#)
        .await;
    assert_eq!(found["items"][0]["key"], "k1", "{found}");
}

#[tokio::test]
async fn cron_end_times_that_do_not_read_are_400s_naming_end_time() {
    let api = Api::new();
    for end in [
        "2030-01-01T00:00:00.\u{e9}\u{e9}Z",
        "2030-01-01T99999999999999999:00:00Z",
        "9000000000000000000-01-01T00:00:00Z",
        "2030-01-01T99:99:99Z",
        "2030-02-30T00:00:00Z",
        "2030-01-01T00:00:00",
        "1969-07-20T20:17:00Z",
        "soon",
    ] {
        let body = json!({"assistant_id": "ticks", "schedule": "0 * * * *", "end_time": end});
        expect(
            api.post("/runs/crons", &body.to_string()).await,
            StatusCode::BAD_REQUEST,
            Some("end_time"),
            end,
        );
    }
    let (status, none) = api.post("/runs/crons/search", "{}").await;
    assert_eq!((status, none), (StatusCode::OK, json!([])));
    // With another offset than UTC: the same instant.
    let body = json!({"assistant_id": "ticks", "schedule": "0 * * * *",
                      "end_time": "2030-01-01T02:00:00+02:00"});
    let (status, cron) = api.post("/runs/crons", &body.to_string()).await;
    assert_eq!(status, StatusCode::OK, "{cron}");
    assert_eq!(cron["end_time"], "2030-01-01T00:00:00.000+00:00", "{cron}");
}

#[tokio::test]
async fn ids_in_the_servers_own_part_of_the_store_are_refused() {
    let api = Api::new();
    let t = api.thread().await;
    for id in [
        "harness-server/cron/zz".to_string(),
        format!("harness-server/thread/{t}"),
        "harness-server/run/r1".to_string(),
        format!("harness-server/runs-of/{t}"),
        "harness-server/".to_string(),
    ] {
        expect(
            api.post("/threads", &json!({ "thread_id": id }).to_string())
                .await,
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("thread_id"),
            "harness-server/",
        );
        let path = format!("/threads/{}/runs", id.replace('/', "%2F"));
        expect(
            api.post(
                &path,
                r#"{"assistant_id": "ticks", "input": {"limit": 1}, "if_not_exists": "create"}"#,
            )
            .await,
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("thread_id"),
            "harness-server/",
        );
    }
    // Nothing was written: the lists read as before.
    assert_eq!(api.thread_ids().await, vec![t]);
    let (status, crons) = api.post("/runs/crons/search", "{}").await;
    assert_eq!((status, crons), (StatusCode::OK, json!([])));
    // Ids merely holding the words are fine.
    let (status, made) = api
        .post("/threads", r#"{"thread_id": "my/harness-server/cron"}"#)
        .await;
    assert_eq!(status, StatusCode::OK, "{made}");
}

#[tokio::test]
async fn bodies_nested_past_the_limit_are_422s_and_change_nothing() {
    let api = Api::new();
    let t = api.thread().await;
    let (_, before) = api.get(&format!("/threads/{t}/state")).await;
    // 2 levels for the body and `metadata`, then `a`'s.
    for levels in [89, 95, 110, 120] {
        let deep = nested(levels);
        expect(
            api.post("/threads", &format!(r#"{{"metadata": {{"a": {deep}}}}}"#))
                .await,
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("metadata"),
            "at most 90 levels",
        );
        expect(
            api.call(
                Method::PATCH,
                &format!("/threads/{t}"),
                format!(r#"{{"values": {{"drafts": 100}}, "metadata": {{"a": {deep}}}}}"#),
            )
            .await,
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("metadata"),
            "at most 90 levels",
        );
        let cron = format!(
            r#"{{"assistant_id": "ticks", "schedule": "0 * * * *", "metadata": {{"a": {deep}}}}}"#
        );
        expect(
            api.post("/runs/crons", &cron).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("metadata"),
            "at most 90 levels",
        );
        expect(
            api.post(
                &format!("/threads/{t}/runs/wait"),
                &format!(r#"{{"assistant_id": "ticket", "input": {{"log": [{deep}]}}}}"#),
            )
            .await,
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("input"),
            "at most 90 levels",
        );
    }
    // The thread is as it was, and the only one.
    let (_, after) = api.get(&format!("/threads/{t}/state")).await;
    assert_eq!(after, before);
    assert_eq!(api.thread_ids().await, vec![t.clone()]);
    // At the limit, metadata is kept and reads back.
    let deep = nested(88);
    let (status, made) = api
        .post("/threads", &format!(r#"{{"metadata": {{"a": {deep}}}}}"#))
        .await;
    assert_eq!(status, StatusCode::OK, "{made}");
    let id = made["thread_id"].as_str().unwrap();
    let (status, read) = api.get(&format!("/threads/{id}")).await;
    assert_eq!(status, StatusCode::OK, "{read}");
    assert_eq!(
        read["metadata"]["a"],
        serde_json::from_str::<Value>(&deep).unwrap()
    );
}

#[tokio::test]
async fn a_refused_run_leaves_no_thread_behind() {
    let api = Api::new();
    let t = api.thread().await;
    let bad_checkpoint = r#"{"assistant_id": "ticks", "input": {"limit": 1}, "checkpoint_id": "1.nope", "if_not_exists": "create"}"#;
    for path in [
        "/runs",
        "/runs/wait",
        "/threads/fresh/runs",
        "/threads/fresh/runs/wait",
    ] {
        let (status, err) = api.post(path, bad_checkpoint).await;
        assert!(status.is_client_error(), "{path}: {status} {err}");
    }
    // Refused by the thread's agent: another assistant's checkpoint.
    let (status, err) = api
        .post(
            "/threads/fresh2/runs",
            r#"{"assistant_id": "ticks", "input": {"limit": 1}, "checkpoint_id": "0.elsewhere", "if_not_exists": "create"}"#,
        )
        .await;
    assert!(status.is_client_error(), "{status} {err}");
    assert_eq!(api.thread_ids().await, vec![t]);
    for id in ["fresh", "fresh2"] {
        let (status, _) = api.get(&format!("/threads/{id}")).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{id}");
    }
    // The id is free for a run that is not refused.
    let (status, run) = api
        .post(
            "/threads/fresh/runs/wait",
            r#"{"assistant_id": "ticks", "input": {"limit": 1}, "if_not_exists": "create"}"#,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{run}");
    assert_eq!(run["ticks"], 1, "{run}");
}

#[tokio::test]
async fn path_and_header_values_that_are_not_text_are_json_errors_naming_them() {
    let api = Api::new();
    for path in ["/threads/%FF", "/threads/%C3%28/state", "/assistants/%80"] {
        let (status, err) = api.call_with(Method::GET, path, &[], "").await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {err}");
        assert!(!err["field"].as_str().unwrap().is_empty(), "{path}: {err}");
        assert!(err["message"].as_str().unwrap().contains("UTF-8"), "{err}");
    }
    let t = api.thread().await;
    let (_, run) = api
        .post(
            &format!("/threads/{t}/runs/wait"),
            r#"{"assistant_id": "ticks", "input": {"limit": 1}}"#,
        )
        .await;
    assert_eq!(run["ticks"], 1, "{run}");
    let (_, runs) = api.get(&format!("/threads/{t}/runs")).await;
    let run_id = runs[0]["run_id"].as_str().unwrap();
    let stream = format!("/threads/{t}/runs/{run_id}/stream");
    for id in [&b"\xff\xfe"[..], b"1\x80", b"\xe9"] {
        let (status, err) = api
            .call_with(Method::GET, &stream, &[("last-event-id", id)], "")
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
        assert_eq!(err["field"], "Last-Event-ID", "{err}");
    }
}

#[tokio::test]
async fn runs_waiting_to_start_are_bounded_and_a_cancelled_one_settles_at_once() {
    let api = Api::with(|server| server.max_waiting_runs(2));
    let t = api.thread().await;
    let runs = format!("/threads/{t}/runs");
    // 2 000 ticks of 50 ms: under way for the whole test (which cancels it).
    let (status, active) = api
        .post(
            &runs,
            r#"{"assistant_id": "ticks", "input": {"limit": 2000}}"#,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{active}");
    let enqueue =
        r#"{"assistant_id": "ticks", "input": {"limit": 1}, "multitask_strategy": "enqueue"}"#;
    let mut queued = Vec::new();
    for _ in 0..2 {
        let (status, run) = api.post(&runs, enqueue).await;
        assert_eq!(status, StatusCode::OK, "{run}");
        assert_eq!(run["status"], "pending", "{run}");
        queued.push(run["run_id"].as_str().unwrap().to_string());
    }
    let (status, err) = api.post(&runs, enqueue).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{err}");
    assert_eq!(err["error"], "too_many_runs", "{err}");
    assert!(
        err["message"].as_str().unwrap().contains("limit of 2"),
        "{err}"
    );
    // A delayed run waits too; one that starts at once does not count.
    let other = api.thread().await;
    let (status, err) = api
        .post(
            &format!("/threads/{other}/runs"),
            r#"{"assistant_id": "ticks", "input": {"limit": 1}, "after_seconds": 60}"#,
        )
        .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{err}");
    let (status, run) = api
        .post(
            &format!("/threads/{other}/runs/wait"),
            r#"{"assistant_id": "ticks", "input": {"limit": 1}}"#,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{run}");
    // The refused runs were not recorded.
    let (_, listed) = api.get(&runs).await;
    assert_eq!(listed.as_array().unwrap().len(), 3, "{listed}");
    // A queued run cancelled settles at once, and frees its place.
    let (status, _) = api.post(&format!("{runs}/{}/cancel", queued[0]), "").await;
    assert!(status.is_success());
    let mut settled = false;
    for _ in 0..1_500 {
        let (_, run) = api.get(&format!("{runs}/{}", queued[0])).await;
        if run["status"] == "interrupted" {
            settled = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(settled, "the cancelled run did not settle in 30 s");
    // ... while the run before it goes on.
    let (_, still) = api
        .get(&format!("{runs}/{}", active["run_id"].as_str().unwrap()))
        .await;
    assert_eq!(
        still["status"], "running",
        "the cancelled run waited for the run before it"
    );
    let (status, run) = api.post(&runs, enqueue).await;
    assert_eq!(status, StatusCode::OK, "{run}");
    let (status, _) = api
        .post(
            &format!("{runs}/{}/cancel", active["run_id"].as_str().unwrap()),
            "",
        )
        .await;
    assert!(status.is_success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_created_again_under_a_deleted_id_starts_empty() {
    let api = Api::new();
    // A thread that ran, deleted, then created again under its id.
    let (status, thread) = api.post("/threads", r#"{"thread_id": "t"}"#).await;
    assert_eq!(status, StatusCode::OK, "{thread}");
    let (status, out) = api
        .post(
            "/threads/t/runs/wait",
            r#"{"assistant_id": "ticks", "input": {"limit": 2}}"#,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{out}");
    assert_eq!(out["ticks"], 2, "{out}");
    let (status, _) = api.call(Method::DELETE, "/threads/t", Body::empty()).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = api.get("/threads/t").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, thread) = api.post("/threads", r#"{"thread_id": "t"}"#).await;
    assert_eq!(status, StatusCode::OK, "{thread}");
    assert_eq!(thread["values"], json!({}), "{thread}");
    assert_eq!(thread["status"], "idle", "{thread}");
    let (status, state) = api.get("/threads/t/state").await;
    assert_eq!(status, StatusCode::OK, "{state}");
    assert_eq!(state["values"], json!({}), "{state}");
    let (status, history) = api.post("/threads/t/history", "{}").await;
    assert_eq!(status, StatusCode::OK, "{history}");
    assert_eq!(history, json!([]), "{history}");
    let (status, runs) = api.get("/threads/t/runs").await;
    assert_eq!(status, StatusCode::OK, "{runs}");
    assert_eq!(runs, json!([]), "{runs}");
    // Its first run starts from nothing.
    let (status, out) = api
        .post(
            "/threads/t/runs/wait",
            r#"{"assistant_id": "ticks", "input": {"limit": 1}}"#,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{out}");
    assert_eq!(out["ticks"], 1, "{out}");

    // Its crons are deleted with it: none is listed, none fires on the
    // thread created again.
    let (status, cron) = api
        .post(
            "/threads/t/runs/crons",
            r#"{"assistant_id": "ticks", "schedule": "* * * * *", "input": {"limit": 1}}"#,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{cron}");
    let (status, _) = api.call(Method::DELETE, "/threads/t", Body::empty()).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, crons) = api
        .post("/runs/crons/search", r#"{"thread_id": "t"}"#)
        .await;
    assert_eq!((status, crons), (StatusCode::OK, json!([])));
    let (status, thread) = api.post("/threads", r#"{"thread_id": "t"}"#).await;
    assert_eq!(status, StatusCode::OK, "{thread}");
    let (status, crons) = api.post("/runs/crons/search", "{}").await;
    assert_eq!((status, crons), (StatusCode::OK, json!([])));

    // A busy thread: its run is cancelled with it, and the thread created
    // again is neither busy nor lists it.
    let (status, run) = api
        .post(
            "/threads/b/runs",
            r#"{"assistant_id": "ticks", "input": {"limit": 100000}, "if_not_exists": "create"}"#,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{run}");
    let run_id = run["run_id"].as_str().unwrap().to_string();
    let (_, thread) = api.get("/threads/b").await;
    assert_eq!(thread["status"], "busy", "{thread}");
    let (status, _) = api.call(Method::DELETE, "/threads/b", Body::empty()).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, thread) = api.post("/threads", r#"{"thread_id": "b"}"#).await;
    assert_eq!(status, StatusCode::OK, "{thread}");
    assert_eq!(thread["status"], "idle", "{thread}");
    assert_eq!(thread["values"], json!({}), "{thread}");
    let (status, runs) = api.get("/threads/b/runs").await;
    assert_eq!(status, StatusCode::OK, "{runs}");
    assert_eq!(runs, json!([]), "{runs}");
    let (status, _) = api.get(&format!("/threads/b/runs/{run_id}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // A run on it is not queued behind the old one, and starts from nothing.
    let (status, out) = api
        .post(
            "/threads/b/runs/wait",
            r#"{"assistant_id": "ticks", "input": {"limit": 1}}"#,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{out}");
    assert_eq!(out["ticks"], 1, "{out}");
    let (status, history) = api.post("/threads/b/history", "{}").await;
    assert_eq!(status, StatusCode::OK, "{history}");
    assert!(
        history.as_array().unwrap().len() <= 3,
        "only the new run's checkpoints: {history}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crons_refuse_what_a_run_refuses_and_keep_what_it_honours() {
    let api = Api::new();
    let t = api.thread().await;
    let for_thread = format!("/threads/{t}/runs/crons");
    let cron = |extra: Value| {
        let mut body = json!({"assistant_id": "ticks", "schedule": "0 * * * *",
                              "input": {"limit": 0}});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body.to_string()
    };
    for path in [for_thread.as_str(), "/runs/crons"] {
        for (extra, status, field) in [
            (json!({"context": {"user": "u1"}}), 422, "context"),
            (
                json!({"config": {"recursion_limit": 5}}),
                422,
                "config.recursion_limit",
            ),
            (
                json!({"config": {"configurable": {"a": 1}}}),
                422,
                "config.configurable",
            ),
            (json!({"durability": "exit"}), 422, "durability"),
            (json!({"durability": "later"}), 422, "durability"),
            (json!({"stream_mode": "everything"}), 422, "stream_mode"),
            (json!({"stream_subgraphs": "yes"}), 422, "stream_subgraphs"),
            (json!({"feedback_keys": ["k"]}), 422, "feedback_keys"),
            (json!({"no_such_option": 1}), 422, "no_such_option"),
            (json!({"input": {"limit": "many"}}), 422, "input.limit"),
            (json!({"thread_id": "elsewhere"}), 422, "thread_id"),
            (json!({"thread_id": ""}), 422, "thread_id"),
            (json!({"on_completion": "keep"}), 422, "on_completion"),
            (
                json!({"multitask_strategy": "reject"}),
                422,
                "multitask_strategy",
            ),
            (json!({"interrupt_before": "*"}), 422, "interrupt_before"),
        ] {
            let (got, err) = api.post(path, &cron(extra.clone())).await;
            assert_eq!(got.as_u16(), status, "{path} {extra}: {err}");
            assert_eq!(err["field"], field, "{path} {extra}: {err}");
        }
    }
    let (status, none) = api.post("/runs/crons/search", "{}").await;
    assert_eq!((status, none), (StatusCode::OK, json!([])));
    // What a run honours is kept, and given to each tick's run; what asks
    // for nothing passes.
    let kept = json!({"schedule": "* * * * * *", "durability": "sync",
                      "stream_mode": ["updates"], "checkpoint_during": true,
                      "config": {}, "context": {}, "stream_resumable": false,
                      "feedback_keys": null});
    let (status, made) = api.post(&for_thread, &cron(kept)).await;
    assert_eq!(status, StatusCode::OK, "{made}");
    assert_eq!(made["payload"]["stream_mode"], json!(["updates"]), "{made}");
    assert_eq!(made["payload"]["durability"], "sync", "{made}");
    assert_eq!(made["payload"]["input"], json!({"limit": 0}), "{made}");
    // Its first tick's run, settled, streams in the cron's modes.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let run = loop {
        let (_, runs) = api.get(&format!("/threads/{t}/runs")).await;
        if let Some(run) = runs
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["status"] == "success")
        {
            break run["run_id"].as_str().unwrap().to_string();
        }
        assert!(std::time::Instant::now() < deadline, "no tick ran: {runs}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let (status, _) = api
        .call(
            Method::DELETE,
            &format!("/runs/crons/{}", made["cron_id"].as_str().unwrap()),
            Body::empty(),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let response = api
        .router
        .clone()
        .oneshot(
            Request::get(format!("/threads/{t}/runs/{run}/stream"))
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&bytes);
    let events: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    assert!(events.contains(&"updates"), "{text}");
    assert!(!events.contains(&"values"), "{text}");
}

#[tokio::test]
async fn namespace_labels_with_a_dot_are_refused_on_every_store_path() {
    let api = Api::new();
    let put = r#"{"namespace": ["users", "a.b"], "key": "k", "value": {"text": "hi"}}"#;
    expect(
        api.call(Method::PUT, "/store/items", put.to_string()).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("namespace"),
        "`a.b`",
    );
    expect(
        api.call(
            Method::DELETE,
            "/store/items",
            r#"{"namespace": ["users", "a.b"], "key": "k"}"#.to_string(),
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("namespace"),
        "`a.b`",
    );
    expect(
        api.get("/store/items?namespace=users&namespace=a.b&key=k")
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("namespace"),
        "`a.b`",
    );
    expect(
        api.post(
            "/store/items/search",
            r#"{"namespace_prefix": ["users", "a.b"]}"#,
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("namespace_prefix"),
        "`a.b`",
    );
    for field in ["prefix", "suffix"] {
        expect(
            api.post(
                "/store/namespaces",
                &json!({ field: ["users", "a.b"] }).to_string(),
            )
            .await,
            StatusCode::UNPROCESSABLE_ENTITY,
            Some(field),
            "`a.b`",
        );
    }
    // Nothing was stored; labels without dots go in and come back, the
    // dotted form of the query splitting them.
    let (status, found) = api.post("/store/items/search", "{}").await;
    assert_eq!(status, StatusCode::OK, "{found}");
    assert_eq!(found["items"], json!([]), "{found}");
    let put = r#"{"namespace": ["users", "a"], "key": "k", "value": {"text": "hi"}}"#;
    let (status, _) = api.call(Method::PUT, "/store/items", put.to_string()).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, item) = api.get("/store/items?namespace=users.a&key=k").await;
    assert_eq!(status, StatusCode::OK, "{item}");
    assert_eq!(item["namespace"], json!(["users", "a"]), "{item}");
    // A time to live past the limit says what the limit is.
    let put = r#"{"namespace": ["users"], "key": "k", "value": {}, "ttl": 1e10}"#;
    let (status, err) = api.call(Method::PUT, "/store/items", put.to_string()).await;
    assert!(status.is_client_error(), "{err}");
    assert_eq!(err["field"], "ttl", "{err}");
    assert!(
        err["message"].as_str().unwrap().contains("below 1e9"),
        "{err}"
    );
}
