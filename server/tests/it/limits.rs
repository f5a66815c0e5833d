//! How long a request may take (`Server::request_timeout`), how long its
//! head may take to come (`Server::header_read_timeout`), what a client
//! hanging up on a wait does, and how many streams may be open at once
//! (`Server::max_streams`).

use async_trait::async_trait;
use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use harness::llm::{Embedder, Embeddings, ModelError};
use harness::memory::{HashedWords, IndexConfig, Memory};
use harness_server::Server;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;

/// An embedder that takes `pause` before each answer: a slow model server.
struct Slow {
    pause: Duration,
    inner: HashedWords,
}

#[async_trait]
impl Embedder for Slow {
    async fn embed(&self, texts: &[String]) -> Result<Embeddings, ModelError> {
        tokio::time::sleep(self.pause).await;
        self.inner.embed(texts).await
    }
}

fn slow_memory(pause: Duration) -> Memory {
    let slow = Slow {
        pause,
        inner: HashedWords::new(64),
    };
    Memory::in_memory().with_index(IndexConfig::new(Arc::new(slow), 64).fields(["text"]))
}

/// `server` served on a loopback port until [`Serving::stop`].
struct Serving {
    addr: std::net::SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), harness_server::ServeError>>,
}

impl Serving {
    async fn start(server: Server) -> Self {
        let bound = server.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = bound.addr();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(bound.serve(async move {
            let _ = stopped.await;
        }));
        Self { addr, stop, task }
    }

    /// Stops it, and waits (at most 20 s) until it has.
    async fn stop(self) {
        let _ = self.stop.send(());
        tokio::time::timeout(Duration::from_secs(20), self.task)
            .await
            .expect("the server did not stop")
            .unwrap()
            .unwrap();
    }
}

fn request(method: Method, path: &str, body: Value) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

async fn call(router: &Router, method: Method, path: &str, body: Value) -> (StatusCode, Value) {
    let response = router
        .clone()
        .oneshot(request(method, path, body))
        .await
        .unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, value)
}

async fn thread(router: &Router) -> String {
    let (status, thread) = call(router, Method::POST, "/threads", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{thread}");
    thread["thread_id"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_slower_than_the_timeout_gets_a_504_naming_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let router = crate::server(dir.path())
        // Far apart, so that the requests meant to be fast (a thread
        // written to sled among them) are, on a busy machine too.
        .memory(slow_memory(Duration::from_millis(3_000)))
        .request_timeout(Duration::from_millis(1_000))
        .router()
        .unwrap();
    let slow = [
        (
            Method::PUT,
            "/store/items",
            json!({"namespace": ["a"], "key": "k", "value": {"text": "slow to index"}}),
        ),
        (
            Method::POST,
            "/store/items/search",
            json!({"namespace_prefix": ["a"], "query": "slow"}),
        ),
    ];
    for (method, path, body) in slow.clone() {
        let (status, error) = call(&router, method.clone(), path, body).await;
        assert_eq!(
            status,
            StatusCode::GATEWAY_TIMEOUT,
            "{method} {path}: {error}"
        );
        assert_eq!(error["error"], "timeout", "{error}");
        assert!(
            error["message"].as_str().unwrap().contains("1000 ms"),
            "{error}"
        );
    }
    // What is fast under the same limit is answered.
    let (status, _) = call(&router, Method::GET, "/info", Value::Null).await;
    assert_eq!(status, StatusCode::OK);
    thread(&router).await;
    let (status, _) = call(
        &router,
        Method::PUT,
        "/store/items",
        json!({"namespace": ["a"], "key": "k2", "value": {"text": "not indexed"}, "index": false}),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);

    // A limit above the pause lets the same requests through.
    let dir = tempfile::tempdir().unwrap();
    let router = crate::server(dir.path())
        .memory(slow_memory(Duration::from_millis(100)))
        .request_timeout(Duration::from_secs(20))
        .router()
        .unwrap();
    for (method, path, body) in slow {
        let (status, answer) = call(&router, method.clone(), path, body).await;
        assert!(status.is_success(), "{method} {path}: {status} {answer}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_a_run_and_streaming_it_outlast_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let router = crate::server(dir.path())
        .request_timeout(Duration::from_millis(1_000))
        .router()
        .unwrap();
    let input = json!({"assistant_id": "ticks", "input": {"limit": 30}});
    // Thirty ticks of 50 ms: longer than the limit, which is far above what
    // the requests meant to be fast take, on a busy machine too.
    let t = thread(&router).await;
    let (status, out) = call(
        &router,
        Method::POST,
        &format!("/threads/{t}/runs/wait"),
        input.clone(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{out}");
    assert_eq!(out["ticks"], 30);
    let (status, out) = call(&router, Method::POST, "/runs/wait", input.clone()).await;
    assert_eq!(status, StatusCode::OK, "{out}");
    assert_eq!(out["ticks"], 30);

    // A background run, joined.
    let t = thread(&router).await;
    let (status, run) = call(
        &router,
        Method::POST,
        &format!("/threads/{t}/runs"),
        input.clone(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{run}");
    let run = run["run_id"].as_str().unwrap();
    let (status, out) = call(
        &router,
        Method::GET,
        &format!("/threads/{t}/runs/{run}/join"),
        Value::Null,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{out}");
    assert_eq!(out["ticks"], 30);

    // A stream: every event, to the end.
    let t = thread(&router).await;
    let response = router
        .clone()
        .oneshot(request(
            Method::POST,
            &format!("/threads/{t}/runs/stream"),
            json!({"assistant_id": "ticks", "input": {"limit": 30}, "stream_mode": "values"}),
        ))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.contains("\"ticks\":30"), "{text}");
}

/// Opens a stream and returns its response (its body unread, so the
/// stream stays open until the response is dropped).
async fn open(router: &Router, path: &str, body: Value) -> axum::response::Response {
    let method = if body.is_null() {
        Method::GET
    } else {
        Method::POST
    };
    router
        .clone()
        .oneshot(request(method, path, body))
        .await
        .unwrap()
}

async fn error_of(response: axum::response::Response) -> Value {
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_over_the_cap_are_refused_with_a_429_before_their_run_starts() {
    let dir = tempfile::tempdir().unwrap();
    let router = crate::server(dir.path()).max_streams(2).router().unwrap();
    let long =
        json!({"assistant_id": "ticks", "input": {"limit": 100000}, "stream_mode": "values"});

    let a = thread(&router).await;
    let first = open(&router, &format!("/threads/{a}/runs/stream"), long.clone()).await;
    assert_eq!(first.status(), StatusCode::OK);
    let run_a = first.headers()["content-location"]
        .to_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_string();
    // A second stream of the same run (join_stream) counts too.
    let second = open(
        &router,
        &format!("/threads/{a}/runs/{run_a}/stream"),
        Value::Null,
    )
    .await;
    assert_eq!(second.status(), StatusCode::OK);

    // Over the cap: a stream on a thread, a stateless one, a join.
    let b = thread(&router).await;
    for (path, body) in [
        (format!("/threads/{b}/runs/stream"), long.clone()),
        ("/runs/stream".to_string(), long.clone()),
        (format!("/threads/{a}/runs/{run_a}/stream"), Value::Null),
    ] {
        let refused = open(&router, &path, body).await;
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS, "{path}");
        let error = error_of(refused).await;
        assert_eq!(error["error"], "too_many_streams", "{error}");
        // A join's run is under way: the message does not say it was not
        // started.
        assert!(
            error["message"]
                .as_str()
                .unwrap()
                .contains("this stream was not opened"),
            "{error}"
        );
        assert!(
            error["message"]
                .as_str()
                .unwrap()
                .contains("limit of 2 open streams"),
            "{error}"
        );
    }
    // The refused stream started no run.
    let (status, runs) = call(
        &router,
        Method::GET,
        &format!("/threads/{b}/runs"),
        Value::Null,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(runs, json!([]), "a refused stream started a run");
    // Other requests go on.
    let (status, _) = call(
        &router,
        Method::GET,
        &format!("/threads/{a}/runs/{run_a}"),
        Value::Null,
    )
    .await;
    assert_eq!(status, StatusCode::OK);

    // A client that goes away frees its place.
    drop(second);
    let third = open(
        &router,
        &format!("/threads/{a}/runs/{run_a}/stream"),
        Value::Null,
    )
    .await;
    assert_eq!(third.status(), StatusCode::OK);
    let refused = open(&router, &format!("/threads/{b}/runs/stream"), long.clone()).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);

    // A stream that ends frees its place too: the run cancelled, both end.
    let (status, _) = call(
        &router,
        Method::POST,
        &format!("/threads/{a}/runs/{run_a}/cancel?wait=true"),
        Value::Null,
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    for stream in [first, third] {
        tokio::time::timeout(Duration::from_secs(10), stream.into_body().collect())
            .await
            .expect("a cancelled run's stream did not end")
            .unwrap();
    }
    let short = json!({"assistant_id": "ticks", "input": {"limit": 1}, "stream_mode": "values"});
    for _ in 0..3 {
        let stream = open(&router, "/runs/stream", short.clone()).await;
        assert_eq!(stream.status(), StatusCode::OK);
        stream.into_body().collect().await.unwrap();
    }
}

#[tokio::test]
async fn a_server_without_stream_places_refuses_every_stream_and_still_waits() {
    let dir = tempfile::tempdir().unwrap();
    let router = crate::server(dir.path()).max_streams(0).router().unwrap();
    let t = thread(&router).await;
    let body = json!({"assistant_id": "ticks", "input": {"limit": 1}});
    let refused = open(&router, &format!("/threads/{t}/runs/stream"), body.clone()).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(
        error_of(refused).await["message"]
            .as_str()
            .unwrap()
            .contains("limit of 0")
    );
    let (status, out) = call(
        &router,
        Method::POST,
        &format!("/threads/{t}/runs/wait"),
        body,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{out}");
    assert_eq!(out["ticks"], 1);
}

#[cfg(feature = "studio")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_studios_event_stream_counts_among_the_open_streams() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(harness_stores::SledStore::open(dir.path().join("store")).unwrap());
    let router = crate::server_on(Arc::clone(&store))
        .studio(harness_studio::Studio::read_only(store))
        .max_streams(1)
        .router()
        .unwrap();
    let short = json!({"assistant_id": "ticks", "input": {"limit": 1}, "stream_mode": "values"});

    // An open studio page holds the only place.
    let page = open(&router, "/studio/api/events", Value::Null).await;
    assert_eq!(page.status(), StatusCode::OK);
    for (path, body) in [
        ("/runs/stream", short.clone()),
        ("/studio/api/events", Value::Null),
    ] {
        let refused = open(&router, path, body).await;
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS, "{path}");
        let error = error_of(refused).await;
        assert_eq!(error["error"], "too_many_streams", "{error}");
        assert!(
            error["message"]
                .as_str()
                .unwrap()
                .contains("limit of 1 open streams"),
            "{error}"
        );
    }
    // The studio's other reads are no streams: they go on.
    let (status, _) = call(&router, Method::GET, "/studio/api/sessions", Value::Null).await;
    assert_eq!(status, StatusCode::OK);

    // The page goes away: its place is free, for a run's stream, then for
    // a page again once that stream has ended.
    drop(page);
    let stream = open(&router, "/runs/stream", short).await;
    assert_eq!(stream.status(), StatusCode::OK);
    stream.into_body().collect().await.unwrap();
    let page = open(&router, "/studio/api/events", Value::Null).await;
    assert_eq!(page.status(), StatusCode::OK);
}

#[test]
fn the_defaults_are_documented_values() {
    assert_eq!(
        harness_server::DEFAULT_REQUEST_TIMEOUT,
        Duration::from_secs(30)
    );
    assert_eq!(harness_server::DEFAULT_MAX_STREAMS, 4096);
    let debug = format!("{:?}", Server::new());
    assert!(
        debug.contains("request_timeout: 30s") && debug.contains("max_streams: 4096"),
        "{debug}"
    );
}

/// Sends `body` to `path` over a connection of its own and hangs up once
/// `started` says the run is under way.
async fn hang_up_on(
    addr: std::net::SocketAddr,
    path: &str,
    body: Value,
    started: impl AsyncFn() -> bool,
) {
    use tokio::io::AsyncWriteExt;
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let body = body.to_string();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !started().await {
        assert!(
            std::time::Instant::now() < deadline,
            "{path}: the run did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(stream);
}

/// The statuses of the runs `/runs/search` lists.
async fn statuses(addr: std::net::SocketAddr) -> Vec<String> {
    let (status, body) = crate::http(addr, "POST", "/runs/search", &[], "{}").await;
    assert_eq!(status, 200, "{body}");
    let runs: Value = serde_json::from_str(&body).unwrap();
    runs.as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_whose_client_hangs_up_cancels_its_run_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let serving = Serving::start(crate::server(dir.path())).await;
    let addr = serving.addr;
    let long = json!({"limit": 100_000});
    // `on_disconnect: cancel` on a thread; the Agent Protocol's shape,
    // whose default is `cancel`; a stateless run with `cancel`. Each run
    // is cancelled (`interrupted`) once its client hangs up.
    for (path, body) in [
        (
            "/threads/w1/runs/wait",
            json!({"assistant_id": "ticks", "input": long, "on_disconnect": "cancel",
                   "if_not_exists": "create"}),
        ),
        (
            "/runs/wait",
            json!({"agent_id": "ticks", "thread_id": "w2", "input": long}),
        ),
        (
            "/runs/wait",
            json!({"assistant_id": "ticks", "input": long, "on_disconnect": "cancel"}),
        ),
    ] {
        if body["thread_id"] == "w2" {
            let (status, out) =
                crate::http(addr, "POST", "/threads", &[], r#"{"thread_id": "w2"}"#).await;
            assert_eq!(status, 200, "{out}");
        }
        hang_up_on(addr, path, body.clone(), async || {
            statuses(addr).await.iter().any(|s| s == "pending")
        })
        .await;
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let now = statuses(addr).await;
            if !now.iter().any(|s| s == "pending") {
                assert!(now.iter().all(|s| s == "interrupted"), "{body}: {now:?}");
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{body}: the run goes on after its client hung up: {now:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // LangGraph's default, `continue`: the run goes on to its end.
    hang_up_on(
        addr,
        "/threads/w3/runs/wait",
        json!({"assistant_id": "ticks", "input": {"limit": 10}, "if_not_exists": "create"}),
        async || statuses(addr).await.iter().any(|s| s == "pending"),
    )
    .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while statuses(addr).await.iter().any(|s| s == "pending") {
        assert!(std::time::Instant::now() < deadline, "the run did not end");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, out) = crate::http(addr, "GET", "/threads/w3/state", &[], "").await;
    assert_eq!(status, 200, "{out}");
    let state: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(state["values"]["ticks"], 10, "{state}");
    serving.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_slow_to_send_its_request_head_is_hung_up_on() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let limit = Duration::from_millis(500);
    let serving = Serving::start(crate::server(dir.path()).header_read_timeout(limit)).await;
    let addr = serving.addr;
    // Part of a request line; part of the headers; nothing at all.
    for sent in [
        "GET /threads/sea",
        "GET /ok HTTP/1.1\r\nHost: 127.0.0.1\r\n",
        "",
    ] {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(sent.as_bytes()).await.unwrap();
        let started = std::time::Instant::now();
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut rest))
            .await
            .unwrap_or_else(|_| panic!("{sent:?}: the connection is still open after 20 s"));
        // Closed (a reset counts too), and not before the limit.
        let _ = read;
        assert!(
            started.elapsed() >= limit - Duration::from_millis(50),
            "{sent:?}"
        );
        assert!(
            !String::from_utf8_lossy(&rest).contains("200 OK"),
            "{sent:?}: {}",
            String::from_utf8_lossy(&rest)
        );
    }
    // A whole request is answered.
    let (status, body) = crate::http(addr, "GET", "/ok", &[], "").await;
    assert_eq!(status, 200, "{body}");
    serving.stop().await;
}

#[tokio::test]
async fn a_header_read_timeout_of_no_limit_or_zero_still_serves() {
    // `Duration::MAX` ("no limit") overflowed the timer of each connection,
    // which then answered nothing; zero would close them all.
    for limit in [Duration::MAX, Duration::ZERO] {
        let dir = tempfile::tempdir().unwrap();
        let serving = Serving::start(crate::server(dir.path()).header_read_timeout(limit)).await;
        let (status, body) = crate::http(serving.addr, "GET", "/ok", &[], "").await;
        assert_eq!(status, 200, "{limit:?}: {body}");
        serving.stop().await;
    }
}
