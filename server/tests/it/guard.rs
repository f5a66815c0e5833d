//! Who may call the server (web origins, host names), and how it stops.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use harness::SessionId;
use harness::session::{SessionPhase, SessionStore};
use harness_stores::SledStore;
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;

/// One HTTP/1.1 request over a fresh connection with `host` as its
/// `Host`: the status and the body.
async fn raw(addr: SocketAddr, method: &str, path: &str, host: &str, body: &str) -> (u16, String) {
    super::http(addr, method, path, &[("Host", host)], body).await
}

async fn call(router: &axum::Router, request: Request<Body>) -> axum::response::Response {
    router.clone().oneshot(request).await.unwrap()
}

#[tokio::test]
async fn a_bearer_key_is_taken_whatever_the_case_of_its_scheme() {
    let dir = tempfile::tempdir().unwrap();
    let router = crate::server(dir.path())
        .api_key("key-read-0123456789", harness_server::Scope::Read)
        .router()
        .unwrap();
    let with = |value: &str| {
        Request::post("/assistants/search")
            .header(header::AUTHORIZATION, value)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from("{}"))
            .unwrap()
    };
    // The scheme is case-insensitive (RFC 9110, 11.1).
    for value in [
        "Bearer key-read-0123456789",
        "bearer key-read-0123456789",
        "BEARER key-read-0123456789",
    ] {
        assert_eq!(
            call(&router, with(value)).await.status(),
            StatusCode::OK,
            "{value}"
        );
    }
    for value in [
        "bearer wrong-key",
        "Basic key-read-0123456789",
        "key-read-0123456789",
    ] {
        assert_eq!(
            call(&router, with(value)).await.status(),
            StatusCode::UNAUTHORIZED,
            "{value}"
        );
    }
}

#[tokio::test]
async fn pages_of_other_origins_are_refused_and_listed_ones_get_cors() {
    let dir = tempfile::tempdir().unwrap();
    let router = crate::server(dir.path())
        .cors_origin("https://app.example")
        .router()
        .unwrap();
    // A page of another site, even with a body a form could send.
    for origin in ["https://evil.example", "null", "http://localhost:3000"] {
        let response = call(
            &router,
            Request::post("/threads")
                .header(header::ORIGIN, origin)
                .header(header::CONTENT_TYPE, "text/plain")
                .body(Body::from("{}"))
                .unwrap(),
        )
        .await;
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "{origin}");
    }
    // The listed origin: a preflight, then the request, with CORS headers.
    let preflight = call(
        &router,
        Request::builder()
            .method(Method::OPTIONS)
            .uri("/threads")
            .header(header::ORIGIN, "https://app.example")
            .header(header::ACCESS_CONTROL_REQUEST_METHOD, "POST")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(preflight.status(), StatusCode::NO_CONTENT);
    let allowed = preflight.headers()[header::ACCESS_CONTROL_ALLOW_HEADERS]
        .to_str()
        .unwrap();
    assert!(allowed.contains("x-api-key"), "{allowed}");
    let response = call(
        &router,
        Request::post("/threads")
            .header(header::ORIGIN, "https://app.example")
            .body(Body::from("{}"))
            .unwrap(),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()[header::ACCESS_CONTROL_ALLOW_ORIGIN],
        "https://app.example"
    );
    // A client that is not a browser sends no origin: no CORS headers.
    let response = call(
        &router,
        Request::post("/threads").body(Body::from("{}")).unwrap(),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        !response
            .headers()
            .contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN)
    );
}

#[tokio::test]
async fn a_loopback_server_answers_only_to_this_machines_names() {
    let dir = tempfile::tempdir().unwrap();
    let bound = crate::server(dir.path())
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = bound.addr();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(bound.serve(async move {
        let _ = stopped.await;
    }));
    for host in ["evil.example", "evil.example:2024", "10.0.0.8", ""] {
        let (status, body) = raw(addr, "GET", "/assistants/ticks", host, "").await;
        assert_eq!(status, 421, "{host}: {body}");
    }
    for host in [
        format!("127.0.0.1:{}", addr.port()),
        format!("localhost:{}", addr.port()),
        "LOCALHOST".to_string(),
    ] {
        let (status, body) = raw(addr, "GET", "/assistants/ticks", &host, "").await;
        assert_eq!(status, 200, "{host}: {body}");
    }
    let _ = stop.send(());
    serving.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_remote_server_needs_an_api_key() {
    let dir = tempfile::tempdir().unwrap();
    let err = crate::server(dir.path())
        .allow_remote()
        .bind("0.0.0.0:0".parse().unwrap())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no API key"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_server_stops_its_runs_at_a_step_boundary_and_its_threads_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SledStore::open(dir.path().join("store")).unwrap());
    let bound = crate::server_on(Arc::clone(&store))
        .shutdown_grace(Duration::from_secs(20))
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = bound.addr();
    let host = format!("127.0.0.1:{}", addr.port());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(bound.serve(async move {
        let _ = stopped.await;
    }));
    let (status, body) = raw(addr, "POST", "/threads", &host, r#"{"thread_id": "long"}"#).await;
    assert_eq!(status, 200, "{body}");
    // The run is streamed: its stream is read to its end, which the
    // server's stop brings.
    let streamed = tokio::spawn({
        let host = host.clone();
        async move {
            raw(
                addr,
                "POST",
                "/threads/long/runs/stream",
                &host,
                r#"{"assistant_id": "ticks", "input": {"limit": 100000}, "stream_mode": ["custom"]}"#,
            )
            .await
        }
    });
    // Stopped once the run has made a step (up to 30 s on a loaded machine).
    let session = SessionId::from("long".to_string());
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while store
        .load(&session)
        .await
        .unwrap()
        .is_none_or(|head| head.steps == 0)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the run made no step in 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(30), serving)
        .await
        .expect("the server did not stop")
        .unwrap()
        .unwrap();
    // The stream's last event says the server stopped the run.
    let (status, body) = streamed.await.unwrap();
    assert_eq!(status, 200, "{body}");
    let last = body
        .rsplit("event: ")
        .next()
        .expect("the stream has events");
    assert!(
        last.starts_with("error") && last.contains("ServerStopping"),
        "the stream's last event: {last}\n(the whole stream: {body})"
    );
    let head = store
        .load(&SessionId::from("long".to_string()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        head.phase,
        SessionPhase::Completed {
            signal: harness::Signal::STOPPED
        }
    );
    assert!(head.steps > 0 && head.steps < 100_000, "{}", head.steps);
    assert!(head.lease.is_none(), "{:?}", head.lease);
    // A new server on the same store goes on with the thread.
    let router = crate::server_on(store).router().unwrap();
    let response = router
        .oneshot(
            Request::post("/threads/long/runs/wait")
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(
                    r#"{"assistant_id": "ticks", "input": {"limit": 0}}"#,
                ))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let bytes = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    let out: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(out["ticks"].as_u64(), Some(head.steps + 1), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_on_one_store_fire_each_cron_tick_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SledStore::open(dir.path().join("store")).unwrap());
    let a = crate::server_on(Arc::clone(&store)).router().unwrap();
    let _b = crate::server_on(Arc::clone(&store)).router().unwrap();
    let started = std::time::Instant::now();
    // Each tick runs on a new thread (kept): one thread per tick fired.
    let response = call(
        &a,
        Request::post("/runs/crons")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(
                r#"{"assistant_id": "ticks", "schedule": "* * * * * *", "input": {"limit": 0},
                    "on_run_completed": "keep"}"#,
            ))
            .unwrap(),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    let bytes = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    let cron: Value = serde_json::from_slice(&bytes).unwrap();
    let ticks = || async {
        store
            .sessions()
            .await
            .unwrap()
            .iter()
            .filter(|s| s.as_str().starts_with("harness-server/thread/"))
            .count() as u64
    };
    // At least 3 s, and until two ticks have fired (30 s at most).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while ticks().await < 2 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let path = format!("/runs/crons/{}", cron["cron_id"].as_str().unwrap());
    let response = call(
        &a,
        Request::delete(path.as_str()).body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    let elapsed = started.elapsed().as_secs() + 1;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let threads = ticks().await;
    // One tick per second fired, by one of the two servers: never both.
    assert!(threads >= 2, "{threads} ticks");
    assert!(threads <= elapsed, "{threads} ticks in {elapsed} s");
}

/// The status, headers and body of `request` on `router`, the body read
/// whole.
async fn answer(
    router: &axum::Router,
    request: Request<Body>,
) -> (StatusCode, axum::http::HeaderMap, String) {
    let response = call(router, request).await;
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    (
        status,
        headers,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_key_cannot_join_a_stream_that_cancels_the_run_on_disconnect() {
    const READ: &str = "key-read-0123456789";
    const RUN: &str = "key-run-0123456789";
    let dir = tempfile::tempdir().unwrap();
    let router = crate::server(dir.path())
        .api_key(READ, harness_server::Scope::Read)
        .api_key(RUN, harness_server::Scope::Run)
        .router()
        .unwrap();
    let post = |path: &str, body: &str| {
        Request::post(path)
            .header("x-api-key", RUN)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string()))
            .unwrap()
    };
    let (status, _, body) = answer(&router, post("/threads", r#"{"thread_id": "t"}"#)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, _, body) = answer(
        &router,
        post(
            "/threads/t/runs",
            r#"{"assistant_id": "ticks", "input": {"limit": 100000}}"#,
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let run: Value = serde_json::from_str(&body).unwrap();
    let run = run["run_id"].as_str().unwrap().to_string();
    let join = |path: &str, key: &str| {
        Request::get(path)
            .header("x-api-key", key)
            .body(Body::empty())
            .unwrap()
    };
    for path in [
        format!("/threads/t/runs/{run}/stream"),
        format!("/runs/{run}/stream"),
    ] {
        for query in [
            "cancel_on_disconnect=true",
            "cancel_on_disconnect=1",
            "stream_mode=values&cancel_on_disconnect=%74rue",
        ] {
            // Refused before the stream opens: the hang-up cancels nothing.
            let (status, _, body) = answer(&router, join(&format!("{path}?{query}"), READ)).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{path}?{query}: {body}");
            let err: Value = serde_json::from_str(&body).unwrap();
            let message = err["message"].as_str().unwrap();
            assert!(
                message.contains("scope `run`") && message.contains("cancel_on_disconnect"),
                "{message}"
            );
        }
        // A read key joins without cancelling; the stream, let go of at
        // once, leaves the run going.
        for query in ["", "?cancel_on_disconnect=false"] {
            let response = call(&router, join(&format!("{path}{query}"), READ)).await;
            assert_eq!(response.status(), StatusCode::OK, "{path}{query}");
            drop(response);
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (status, _, body) = answer(&router, join(&format!("/threads/t/runs/{run}"), READ)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let got: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(got["status"], "running", "{got}");
    // A run key may ask for the cancel: letting go of its stream cancels
    // the run.
    let path = format!("/runs/{run}/stream?cancel_on_disconnect=true");
    let response = call(&router, join(&path, RUN)).await;
    assert_eq!(response.status(), StatusCode::OK);
    drop(response);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, _, body) = answer(&router, join(&format!("/threads/t/runs/{run}"), READ)).await;
        let got: Value = serde_json::from_str(&body).unwrap();
        if got["status"] != "running" && got["status"] != "pending" {
            assert_eq!(got["status"], "interrupted", "{got}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not cancelled: {got}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_listed_page_may_put_memory_items_and_reads_its_refusals() {
    const ORIGIN: &str = "https://app.example";
    let dir = tempfile::tempdir().unwrap();
    let router = crate::server(dir.path())
        .cors_origin(ORIGIN)
        .api_key("key-read-0123456789", harness_server::Scope::Read)
        .api_key("key-run-0123456789", harness_server::Scope::Run)
        .router()
        .unwrap();
    // The preflight of a `PUT /store/items` allows it.
    let (status, headers, _) = answer(
        &router,
        Request::builder()
            .method(Method::OPTIONS)
            .uri("/store/items")
            .header(header::ORIGIN, ORIGIN)
            .header(header::ACCESS_CONTROL_REQUEST_METHOD, "PUT")
            .header(
                header::ACCESS_CONTROL_REQUEST_HEADERS,
                "content-type, x-api-key",
            )
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let methods = headers[header::ACCESS_CONTROL_ALLOW_METHODS]
        .to_str()
        .unwrap();
    assert!(methods.split(", ").any(|m| m == "PUT"), "{methods}");
    let put = |key: Option<&str>| {
        let mut request = Request::put("/store/items")
            .header(header::ORIGIN, ORIGIN)
            .header(header::CONTENT_TYPE, "application/json");
        if let Some(key) = key {
            request = request.header("x-api-key", key);
        }
        request
            .body(Body::from(
                r#"{"namespace": ["users", "u1"], "key": "k", "value": {"text": "hi"}}"#,
            ))
            .unwrap()
    };
    // No key, a wrong one, too small a scope: the page reads the refusal.
    for (key, refused, kind) in [
        (None, StatusCode::UNAUTHORIZED, "unauthorized"),
        (Some("nope"), StatusCode::UNAUTHORIZED, "unauthorized"),
        (
            Some("key-read-0123456789"),
            StatusCode::FORBIDDEN,
            "forbidden",
        ),
    ] {
        let (status, headers, body) = answer(&router, put(key)).await;
        assert_eq!(status, refused, "{key:?}: {body}");
        assert_eq!(
            headers
                .get(header::ACCESS_CONTROL_ALLOW_ORIGIN)
                .map(|v| v.to_str().unwrap()),
            Some(ORIGIN),
            "{key:?}"
        );
        let err: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(err["error"], kind, "{body}");
    }
    let (status, headers, body) = answer(&router, put(Some("key-run-0123456789"))).await;
    assert!(status.is_success(), "{status}: {body}");
    assert_eq!(headers[header::ACCESS_CONTROL_ALLOW_ORIGIN], ORIGIN);
    // A page of another origin still gets no CORS headers.
    let (status, headers, _) = answer(
        &router,
        Request::put("/store/items")
            .header(header::ORIGIN, "https://evil.example")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(!headers.contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN));
}
