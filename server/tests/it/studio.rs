//! The studio on the server's own port: served under `/studio`, reading
//! the server's store, behind the server's host, origin and key rules.

use super::http;
use harness_server::{Scope, Server};
use harness_stores::SledStore;
use harness_studio::Studio;
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const READ_KEY: &str = "key-read-0123456789";
const RUN_KEY: &str = "key-run-0123456789";

/// The status and `Location` of a GET.
async fn redirect(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let location = response
        .lines()
        .find_map(|l| l.strip_prefix("location: "))
        .unwrap_or_default()
        .to_string();
    (status, location)
}

/// Whether the studio itself answered (a read-only studio refusing to
/// fork): the server's guard let the request through.
fn studio_answered(body: &str) -> bool {
    json(body)["error"]
        .as_str()
        .is_some_and(|e| e.contains("read-only"))
}

fn json(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

/// The test agents with a read-only studio over their store, set up by
/// `setup`, served on an ephemeral loopback port until the test ends.
async fn serve(dir: &std::path::Path, setup: impl FnOnce(Server) -> Server) -> SocketAddr {
    let store = Arc::new(SledStore::open(dir.join("store")).unwrap());
    let studio = Studio::read_only(store.clone());
    let bound = setup(crate::server_on(store).studio(studio))
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = bound.addr();
    tokio::spawn(bound.serve(std::future::pending()));
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_studio_is_served_on_the_servers_port_and_lists_the_servers_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let addr = serve(dir.path(), |s| s).await;

    let (status, thread) = http(addr, "POST", "/threads", &[], "{}").await;
    assert_eq!(status, 200, "{thread}");
    let thread = json(&thread)["thread_id"].as_str().unwrap().to_string();
    let (status, out) = http(
        addr,
        "POST",
        &format!("/threads/{thread}/runs/wait"),
        &[],
        r#"{"assistant_id": "ticks", "input": {"limit": 2}}"#,
    )
    .await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(json(&out)["ticks"], 2);

    // The page, at /studio, calls its files and API there; /studio/
    // leads to it, with its query.
    let (status, html) = http(addr, "GET", "/studio", &[], "").await;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("src=\"/studio/studio.js\""), "{html}");
    assert!(html.contains("href=\"/studio/studio.css\""), "{html}");
    let (status, location) = redirect(addr, "/studio/?token=t").await;
    assert_eq!((status, location.as_str()), (308, "/studio?token=t"));
    let (status, script) = http(addr, "GET", "/studio/studio.js", &[], "").await;
    assert_eq!(status, 200);
    assert!(script.contains("fetch('/studio' + path, "));
    assert!(script.contains("new EventSource('/studio/api/events"));

    let (status, info) = http(addr, "GET", "/studio/api/info", &[], "").await;
    assert_eq!(status, 200, "{info}");
    assert_eq!(json(&info)["mode"], "read_only");
    let (status, list) = http(addr, "GET", "/studio/api/sessions", &[], "").await;
    assert_eq!(status, 200, "{list}");
    let list = json(&list);
    let ticks: Vec<&Value> = list
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["agent"] == "ticks")
        .collect();
    assert_eq!(ticks.len(), 1, "{list}");
    // The server's own records (its threads) are not listed.
    assert!(
        list.as_array()
            .unwrap()
            .iter()
            .all(|s| s["agent"] != "harness-server"),
        "{list}"
    );
    assert_eq!(ticks[0]["phase"], "done", "{list}");
    // The session's timeline through the studio: the two ticks.
    let id = ticks[0]["id"].as_str().unwrap();
    let (status, timeline) = http(
        addr,
        "GET",
        &format!("/studio/api/sessions/{id}/timeline"),
        &[],
        "",
    )
    .await;
    assert_eq!(status, 200, "{timeline}");
    assert!(timeline.matches("\"tick\"").count() >= 2, "{timeline}");

    // The server's own paths are unchanged beside it.
    let (status, ok) = http(addr, "GET", "/ok", &[], "").await;
    assert_eq!((status, json(&ok)["ok"].clone()), (200, Value::Bool(true)));
    let (status, missing) = http(addr, "GET", "/studio/api/nothing", &[], "").await;
    assert_eq!(status, 404, "{missing}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_studio_refuses_a_request_without_the_api_key_when_keys_are_set() {
    let dir = tempfile::tempdir().unwrap();
    let addr = serve(dir.path(), |s| {
        s.api_key(READ_KEY, Scope::Read)
            .api_key(RUN_KEY, Scope::Run)
    })
    .await;

    // The page and its files hold no data, and a browser loads the files
    // without the page's token: served without a key.
    for path in ["/studio", "/studio/studio.js", "/studio/studio.css"] {
        let (status, body) = http(addr, "GET", path, &[], "").await;
        assert_eq!(status, 200, "GET {path}: {body}");
        assert!(!body.contains(READ_KEY) && !body.contains(RUN_KEY));
    }
    // No key, a wrong key, a key in the query of a write: 401.
    for (method, path, headers) in [
        ("GET", "/studio/api/sessions", vec![]),
        ("GET", "/studio/api/info", vec![]),
        ("GET", "/studio/api/memory/namespaces", vec![]),
        ("GET", "/studio/studio.js/x", vec![]),
        ("GET", "/studio/api/events", vec![]),
        ("GET", "/studio/api/sessions?token=not-a-key", vec![]),
        (
            "GET",
            "/studio/api/sessions",
            vec![("x-studio-token", "not-a-key")],
        ),
        ("POST", "/studio/api/sessions/s/fork", vec![]),
        (
            "POST",
            &format!("/studio/api/sessions/s/fork?token={RUN_KEY}") as &str,
            vec![],
        ),
    ] {
        let (status, body) = http(addr, method, path, &headers, "{}").await;
        assert_eq!(status, 401, "{method} {path} {headers:?}: {body}");
        assert_eq!(json(&body)["error"], "unauthorized", "{body}");
        assert!(
            !body.contains(READ_KEY) && !body.contains(RUN_KEY),
            "{body}"
        );
    }

    // A key as the page gives its token, or as the API takes it.
    for headers in [
        vec![],
        vec![("x-studio-token", READ_KEY)],
        vec![("x-api-key", READ_KEY)],
    ] {
        let path = if headers.is_empty() {
            format!("/studio/api/sessions?token={READ_KEY}")
        } else {
            "/studio/api/sessions".to_string()
        };
        let (status, body) = http(addr, "GET", &path, &headers, "").await;
        assert_eq!(status, 200, "{headers:?}: {body}");
        assert!(json(&body).is_array(), "{body}");
    }
    let (status, html) = http(addr, "GET", &format!("/studio?token={READ_KEY}"), &[], "").await;
    assert_eq!(status, 200);
    assert!(html.contains("/studio/studio.js"));

    // A write needs scope `run`: the read key is refused with a 403, the
    // run key passes the guard (and the read-only studio says it is).
    let fork = "/studio/api/sessions/s/fork";
    let (status, body) = http(addr, "POST", fork, &[("x-studio-token", READ_KEY)], "{}").await;
    assert_eq!(status, 403, "{body}");
    assert!(json(&body)["message"].as_str().unwrap().contains("`run`"));
    let (_, body) = http(addr, "POST", fork, &[("x-studio-token", RUN_KEY)], "{}").await;
    assert!(studio_answered(&body), "{body}");

    // The studio's header is no key for the API itself.
    let (status, _) = http(
        addr,
        "POST",
        "/threads/search",
        &[("x-studio-token", READ_KEY)],
        "{}",
    )
    .await;
    assert_eq!(status, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_studio_keeps_the_servers_host_and_origin_rules() {
    let dir = tempfile::tempdir().unwrap();
    let addr = serve(dir.path(), |s| s.cors_origin("https://app.example")).await;
    let own = format!("http://{addr}");

    // A name that is not this machine's (a rebinding page): 421.
    for host in [
        "evil.example",
        "evil.example:2024",
        "127.0.0.1.evil.example",
    ] {
        let (status, body) = http(addr, "GET", "/studio/api/sessions", &[("Host", host)], "").await;
        assert_eq!(status, 421, "{host}: {body}");
    }
    // A page of another site: 403, for reads and writes.
    for (method, origin) in [
        ("GET", "https://evil.example"),
        ("POST", "https://evil.example"),
        ("POST", "null"),
        ("POST", "http://localhost:1"),
    ] {
        let (status, body) = http(
            addr,
            method,
            "/studio/api/sessions/s/fork",
            &[("Origin", origin)],
            "{}",
        )
        .await;
        assert_eq!(status, 403, "{method} {origin}: {body}");
        assert_eq!(json(&body)["error"], "origin_not_allowed");
    }
    // The studio's own page posting to it: its origin is the server's.
    let (status, body) = http(
        addr,
        "POST",
        "/studio/api/sessions/s/fork",
        &[("Origin", &own)],
        "{}",
    )
    .await;
    assert!(studio_answered(&body), "{status}: {body}");
    // ... which vouches for the studio only, not for the API.
    let (status, _) = http(addr, "POST", "/threads", &[("Origin", &own)], "{}").await;
    assert_eq!(status, 403);
    // A listed origin gets CORS on the studio too.
    let (status, _) = http(
        addr,
        "GET",
        "/studio/api/info",
        &[("Origin", "https://app.example")],
        "",
    )
    .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_studio_is_mounted_only_at_a_plain_path_beside_the_servers_own() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SledStore::open(dir.path().join("store")).unwrap());
    for path in [
        "/threads", "/runs/x", "/store", "/ok", "/", "studio", "/studio/", "/a b", "/a/../b",
    ] {
        let server =
            crate::server_on(store.clone()).studio_at(path, Studio::read_only(store.clone()));
        let error = server
            .bind("127.0.0.1:0".parse().unwrap())
            .await
            .err()
            .unwrap_or_else(|| panic!("{path} was accepted"));
        assert!(
            error.to_string().contains(path.trim_end_matches('/')) || path == "/",
            "{path}: {error}"
        );
    }
    let server =
        crate::server_on(store.clone()).studio_at("/tools/studio", Studio::read_only(store));
    assert!(server.bind("127.0.0.1:0".parse().unwrap()).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_studios_event_stream_ends_when_the_server_stops() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SledStore::open(dir.path().join("store")).unwrap());
    let bound = crate::server_on(store.clone())
        .studio(Studio::read_only(store))
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = bound.addr();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(bound.serve(async move {
        let _ = stopped.await;
    }));
    let mut events = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET /studio/api/events HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    events.write_all(request.as_bytes()).await.unwrap();
    let mut head = [0u8; 64];
    let n = events.read(&mut head).await.unwrap();
    assert!(
        String::from_utf8_lossy(&head[..n]).starts_with("HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head[..n])
    );

    let _ = stop.send(());
    tokio::time::timeout(std::time::Duration::from_secs(10), serving)
        .await
        .expect("the server waited for the studio's open event stream")
        .unwrap()
        .unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(5),
        events.read_to_end(&mut rest),
    )
    .await
    .expect("the event stream stayed open")
    .unwrap();
}
