//! Writes (answering, forking) come as JSON from the studio's own page: a
//! body another site's page could post without a preflight (`text/plain`,
//! a form), or a request naming another origin, is refused before anything
//! is read, in a studio served with its token and in one mounted in an
//! application's router (which has none of its own).

use crate::support::{Review, World, request_to};
use harness_studio::Studio;
use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::sync::watch;

/// The studio of `w` mounted at `/studio` in an application's router,
/// served on loopback until `stop` turns true.
async fn mounted(w: &World) -> (SocketAddr, watch::Sender<bool>) {
    let (stop, stopping) = watch::channel(false);
    let studio = Studio::for_agent(&w.agent, &w.harness, Arc::clone(&w.store))
        .unwrap()
        .expect_answer::<Review>("review")
        .mount("/studio", stopping.clone())
        .unwrap();
    let app = axum::Router::new().nest("/studio", studio);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut stopped = stopping;
    tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stopped.wait_for(|s| *s).await;
            })
            .await
    });
    (addr, stop)
}

/// Checks the rules on the studio at `addr` under `base`, giving `token`
/// (in the header) if it has one.
async fn writes_are_json_from_the_studios_own_origin(
    w: &World,
    addr: SocketAddr,
    base: &str,
    token: Option<&str>,
) {
    let answer_path = format!("{base}/api/sessions/{}/answer", w.waiting);
    let fork_path = format!("{base}/api/sessions/{}/fork", w.done);
    let answer =
        json!({"interrupt": w.interrupt, "answer": {"approve": true, "note": "x"}}).to_string();
    let fork = json!({"index": 1, "update": null}).to_string();
    let post = |path: String, extra: Vec<(&'static str, String)>, body: String| async move {
        let mut headers: Vec<(&str, &str)> = token
            .map(|t| vec![("x-studio-token", t)])
            .unwrap_or_default();
        headers.extend(extra.iter().map(|(n, v)| (*n, v.as_str())));
        request_to(addr, "POST", &path, &headers, Some(&body)).await
    };
    let json_kind = ("content-type", "application/json".to_owned());

    // A body a page of another site can post without asking first: 415.
    for kind in [
        Some("text/plain"),
        Some("text/plain;charset=UTF-8"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        None,
    ] {
        let extra = kind
            .map(|k| vec![("content-type", k.to_owned())])
            .unwrap_or_default();
        let r = post(answer_path.clone(), extra.clone(), answer.clone()).await;
        assert_eq!(r.status, 415, "{kind:?}: {}", r.body);
        assert!(r.error().contains("application/json"), "{}", r.body);
        let r = post(fork_path.clone(), extra, fork.clone()).await;
        assert_eq!(r.status, 415, "{kind:?}: {}", r.body);
    }
    // A request naming another origin: 403, even as JSON.
    for origin in [
        "https://evil.example".to_owned(),
        "null".to_owned(),
        "http://127.0.0.1:1".to_owned(),
        format!("http://{addr}.evil.example"),
        format!("http://evil.example/{addr}"),
    ] {
        let r = post(
            answer_path.clone(),
            vec![json_kind.clone(), ("origin", origin.clone())],
            answer.clone(),
        )
        .await;
        assert_eq!(r.status, 403, "{origin}: {}", r.body);
        assert!(r.error().contains("origin"), "{}", r.body);
    }
    let head = w
        .store
        .load(&w.waiting.clone().into())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(
            head.phase,
            harness::session::SessionPhase::Interrupted { .. }
        ),
        "nothing was answered: {head:?}"
    );

    // The studio's own page (its origin is the address asked), and a
    // client that is no browser (no origin): accepted.
    for extra in [
        vec![json_kind.clone(), ("origin", format!("http://{addr}"))],
        vec![("content-type", "application/json; charset=utf-8".to_owned())],
    ] {
        let r = post(fork_path.clone(), extra.clone(), fork.clone()).await;
        assert_eq!(r.status, 201, "{extra:?}: {}", r.body);
    }
    let r = post(
        answer_path,
        vec![json_kind, ("origin", format!("http://{addr}"))],
        answer,
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_is_not_json_or_names_another_origin_is_refused() {
    let w = World::new("writes").await;
    let s = w.studio().await;
    writes_are_json_from_the_studios_own_origin(&w, s.local_addr(), "", Some(s.token())).await;
    s.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mounted_studio_refuses_writes_that_are_not_json_or_name_another_origin() {
    let w = World::new("writes-mounted").await;
    let (addr, stop) = mounted(&w).await;
    writes_are_json_from_the_studios_own_origin(&w, addr, "/studio", None).await;
    stop.send_replace(true);
}

/// A POST of `body` (JSON) to `path` of a studio mounted in a router,
/// sent to the router itself: a server hangs up on a body over its limit
/// before a socket could write it all.
async fn posted(router: &axum::Router, path: &str, body: Vec<u8>) -> (u16, String) {
    use tower::ServiceExt;
    let request = axum::http::Request::post(path)
        .header("content-type", "application/json")
        .body(axum::body::Body::from(body))
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

/// A write's body over the limit (2 MiB) is refused as JSON naming the
/// limit, as every other error is (axum's own refusal is plain text); one
/// at the limit is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_over_the_body_limit_is_refused_as_json() {
    let w = World::new("writes-large").await;
    let (_stop, stopping) = watch::channel(false);
    let studio = Studio::for_agent(&w.agent, &w.harness, Arc::clone(&w.store))
        .unwrap()
        .expect_answer::<Review>("review")
        .mount("/studio", stopping)
        .unwrap();
    let router = axum::Router::new().nest("/studio", studio);
    let limit = 2 << 20;
    for path in [
        format!("/studio/api/sessions/{}/answer", w.waiting),
        format!("/studio/api/sessions/{}/fork", w.done),
    ] {
        for size in [limit + 1, limit + 4096, 3 * limit] {
            // A JSON string of `size` bytes in all.
            let body = format!("\"{}\"", "x".repeat(size - 2)).into_bytes();
            let (status, body) = posted(&router, &path, body).await;
            assert_eq!(status, 413, "{path} {size}: {body}");
            let json: serde_json::Value = serde_json::from_str(&body)
                .unwrap_or_else(|e| panic!("{path} {size}: not JSON ({e}): {body}"));
            assert_eq!(json["kind"], "too_large", "{body}");
            assert_eq!(json["limit"], limit, "{body}");
            assert!(
                json["error"].as_str().unwrap().contains("2097152 bytes"),
                "{body}"
            );
        }
        // At the limit: read, and refused for what it says (a string is
        // no answer and no fork).
        let body = format!("\"{}\"", "x".repeat(limit - 2)).into_bytes();
        let (status, body) = posted(&router, &path, body).await;
        assert_eq!(status, 400, "{path}: {}", &body[..200.min(body.len())]);
    }
}
