//! What the API refuses, and how: a timeline's `path` that is no task's
//! path is a 400 naming the parameter and its bad segment; a path no
//! route answers under `/api` is a JSON 404 naming it; and what
//! `/api/info` says of a store read from a copy.

use crate::support::{TripWorld, World, get, request};
use harness_studio::Studio;
use serde_json::json;
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeline_path_with_an_empty_segment_is_refused_naming_it() {
    let w = TripWorld::new("strict-paths").await;
    let s = w.read_only().await;
    let timeline = format!("/api/sessions/{}/timeline", w.waiting);
    for (path, segment) in [
        ("review%2F", "segment 2 is empty"),
        ("review%2F%2Fnote", "segment 2 is empty"),
        ("%2Freview", "segment 1 is empty"),
        ("%2F", "segment 1 is empty"),
    ] {
        let r = get(&s, &format!("{timeline}?path={path}")).await;
        assert_eq!(r.status, 400, "{path}: {}", r.body);
        let body = r.json();
        assert_eq!(body["kind"], "parameter", "{path}: {body}");
        assert_eq!(body["parameter"], "path", "{path}: {body}");
        let error = r.error();
        assert!(
            error.starts_with("parameter `path` is ") && error.contains(segment),
            "{path}: {error}"
        );
    }
    // A task's path, a branch's with its index, the run's own loop, and a
    // path no task of this session has (a filter that keeps nothing).
    for (path, some) in [
        ("square%231", true),
        ("square%230", true),
        ("review", true),
        ("", true),
        ("square%237", false),
        ("nowhere", false),
        // A step's name may hold `#`: these are paths, of no task here.
        ("square%23x", false),
        ("square%231%232", false),
        ("%23", false),
    ] {
        let r = get(&s, &format!("{timeline}?path={path}")).await;
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        let total = r.json()["total"].as_u64().unwrap();
        assert_eq!(total > 0, some, "{path}: {}", r.body);
    }
    s.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_no_route_answers_under_api_is_a_json_404_naming_it() {
    let w = World::new("strict-routes").await;
    let s = w.read_only().await;
    for path in [
        "/api/nothing",
        "/api/reports/0",
        "/api",
        "/api/",
        &format!("/api/sessions/{}/nothing", w.waiting),
        "/api/memory/nothing",
    ] {
        let r = get(&s, path).await;
        assert_eq!(r.status, 404, "{path}: {}", r.body);
        assert!(
            r.header("content-type")
                .is_some_and(|t| t.starts_with("application/json")),
            "{path}: {:?}",
            r.headers
        );
        let body = r.json();
        assert_eq!(body["kind"], "route", "{path}: {body}");
        assert_eq!(body["path"], path, "{path}: {body}");
        assert!(r.error().contains(path), "{path}: {body}");
        // Without the token: the token's error, as for every API call.
        let r = request(&s, "GET", path, &[], None).await;
        assert_eq!(r.status, 401, "{path}: {}", r.body);
        assert!(r.error().contains("token"), "{path}: {}", r.body);
    }
    // A report that is not there is the report's own error, as before.
    let r = get(&s, "/api/evals/0").await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.error().contains("no eval report"), "{}", r.body);
    // Outside the API: a bare 404.
    let r = get(&s, "/nothing").await;
    assert_eq!(r.status, 404, "{}", r.body);
    // A path of the API with a method it does not take: a JSON 405 naming
    // what it takes.
    for (method, path, allowed) in [
        ("POST", "/api/sessions".to_owned(), "GET"),
        ("DELETE", format!("/api/sessions/{}", w.waiting), "GET"),
        ("PUT", "/api/info".to_owned(), "GET"),
        ("GET", format!("/api/sessions/{}/answer", w.waiting), "POST"),
    ] {
        let r = request(&s, method, &path, &[], Some("{}")).await;
        assert_eq!(r.status, 405, "{method} {path}: {}", r.body);
        let body = r.json();
        assert_eq!(body["kind"], "method", "{method} {path}: {body}");
        assert!(
            body["allowed"]
                .as_str()
                .is_some_and(|a| a.contains(allowed)),
            "{method} {path}: {body}"
        );
        assert!(
            r.error().contains(method) && r.error().contains(&path),
            "{body}"
        );
        assert!(
            r.header("allow").is_some_and(|a| a.contains(allowed)),
            "{method} {path}: {:?}",
            r.headers
        );
    }
    s.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_info_says_whether_the_store_is_a_snapshot_and_when_it_was_taken() {
    let w = World::new("strict-snapshot").await;
    let s = w.read_only().await;
    let r = get(&s, "/api/info").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["snapshot"], json!(null), "{}", r.body);
    s.shutdown().await.unwrap();

    let s = Studio::read_only(Arc::clone(&w.store))
        .snapshot(1_700_000_000_000)
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let r = get(&s, "/api/info").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.json()["snapshot"],
        json!({"taken_at": 1_700_000_000_000u64}),
        "{}",
        r.body
    );
    s.shutdown().await.unwrap();
}
