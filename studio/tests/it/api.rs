//! The JSON API over plain HTTP: the token, sessions (filter and search), a
//! session's detail, timeline and state, answering and forking.

use crate::support::{World, eventually, get, post, request};
use harness_studio::{Studio, StudioError};
use serde_json::{Value, json};
use std::sync::Arc;

fn ids(list: &Value) -> Vec<String> {
    let mut ids: Vec<String> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_needs_the_token_and_writes_need_it_in_the_header() {
    let w = World::new("token").await;
    let s = w.studio().await;
    let paths = [
        "/api/info".to_owned(),
        "/api/sessions".to_owned(),
        format!("/api/sessions/{}", w.waiting),
        format!("/api/sessions/{}/timeline", w.waiting),
        format!("/api/sessions/{}/state", w.waiting),
        "/api/events".to_owned(),
    ];
    for path in &paths {
        for headers in [
            vec![],
            vec![("x-studio-token", "wrong")],
            vec![("x-studio-token", "")],
        ] {
            let r = request(&s, "GET", path, &headers, None).await;
            assert_eq!(r.status, 401, "{path} {headers:?}");
            assert!(r.error().contains("token"), "{}", r.body);
        }
        let q = if path.contains('?') { '&' } else { '?' };
        let wrong = request(&s, "GET", &format!("{path}{q}token=nope"), &[], None).await;
        assert_eq!(wrong.status, 401, "{path}");
    }
    // Reads take the token in the URL.
    let by_url = request(
        &s,
        "GET",
        &format!("/api/sessions?token={}", s.token()),
        &[],
        None,
    )
    .await;
    assert_eq!(by_url.status, 200);
    // Writes do not.
    let answer = json!({"interrupt": w.interrupt, "answer": {"approve": true, "note": "x"}});
    let r = request(
        &s,
        "POST",
        &format!("/api/sessions/{}/answer?token={}", w.waiting, s.token()),
        &[("content-type", "application/json")],
        Some(&answer.to_string()),
    )
    .await;
    assert_eq!(r.status, 401);
    assert!(r.error().contains("x-studio-token header"), "{}", r.body);
    let head = w
        .store
        .load(&w.waiting.clone().into())
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(
        head.phase,
        harness::session::SessionPhase::Interrupted { .. }
    ));
    // The page itself has no data and is served without the token, with a
    // policy that loads nothing from elsewhere.
    for path in ["/", "/studio.js", "/studio.css"] {
        let r = request(&s, "GET", path, &[], None).await;
        assert_eq!(r.status, 200, "{path}");
        assert!(!r.body.contains(&w.waiting));
        let csp = r.header("content-security-policy").unwrap();
        assert!(csp.contains("default-src 'self'"), "{csp}");
    }
    let page = request(&s, "GET", "/", &[], None).await.body;
    assert!(
        !page.contains("http://") && !page.contains("https://"),
        "no CDN: {page}"
    );
    s.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binding_anything_but_loopback_is_refused() {
    let w = World::new("loopback").await;
    for addr in ["0.0.0.0:0", "192.0.2.1:0", "[::]:0"] {
        let e = Studio::read_only(Arc::clone(&w.store))
            .bind(addr.parse().unwrap())
            .await
            .expect_err(addr);
        assert!(matches!(e, StudioError::NotLoopback { .. }), "{e}");
        assert!(e.to_string().contains("loopback"), "{e}");
    }
    let taken = w.read_only().await;
    let e = Studio::read_only(Arc::clone(&w.store))
        .bind(taken.local_addr())
        .await
        .expect_err("in use");
    assert!(matches!(e, StudioError::Bind { .. }), "{e}");
    taken.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_listed_with_their_phase_filtered_and_searched() {
    let w = World::new("list").await;
    let s = w.studio().await;
    let all = get(&s, "/api/sessions").await.json();
    assert_eq!(
        ids(&all),
        sorted(vec![w.waiting.clone(), w.done.clone(), w.failed.clone()])
    );
    let by_id = |id: &str| {
        all.as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id)
            .unwrap()
            .clone()
    };
    let waiting = by_id(&w.waiting);
    assert_eq!(waiting["phase"], "waiting");
    assert_eq!(waiting["agent"], "reviews");
    assert_eq!(waiting["steps"], 1);
    assert_eq!(waiting["next_step"], "review");
    assert_eq!(by_id(&w.done)["phase"], "done");
    assert_eq!(by_id(&w.done)["steps"], 3);
    assert_eq!(by_id(&w.failed)["phase"], "failed");
    assert!(
        by_id(&w.failed)["detail"]
            .as_str()
            .unwrap()
            .contains("the printer is on fire")
    );
    for (phase, expected) in [
        ("waiting", vec![w.waiting.clone()]),
        ("done", vec![w.done.clone()]),
        ("failed", vec![w.failed.clone()]),
        ("running", vec![]),
    ] {
        let r = get(&s, &format!("/api/sessions?phase={phase}"))
            .await
            .json();
        assert_eq!(ids(&r), expected, "{phase}");
    }
    for (q, expected) in [
        (w.waiting[..8].to_owned(), vec![w.waiting.clone()]),
        ("BROKEN".to_owned(), vec![w.failed.clone()]),
        ("printer".to_owned(), vec![w.failed.clone()]),
        ("Waiting".to_owned(), vec![w.waiting.clone()]),
        ("no such thing".to_owned(), vec![]),
    ] {
        let r = get(&s, &format!("/api/sessions?q={}", q.replace(' ', "%20")))
            .await
            .json();
        assert_eq!(ids(&r), expected, "{q}");
    }
    let r = get(&s, "/api/sessions?agent=broken&phase=failed")
        .await
        .json();
    assert_eq!(ids(&r), vec![w.failed.clone()]);
    for bad in ["paused", "DONE", "interrupted"] {
        let r = get(&s, &format!("/api/sessions?phase={bad}")).await;
        assert_eq!(r.status, 400, "{bad}");
        assert!(
            r.error().contains(bad) && r.error().contains("waiting"),
            "{}",
            r.body
        );
    }
    for missing in ["nope", "s-0000"] {
        for tail in ["", "/timeline", "/state"] {
            let r = get(&s, &format!("/api/sessions/{missing}{tail}")).await;
            assert_eq!(r.status, 404, "{missing}{tail}");
            assert!(r.error().contains(missing), "{}", r.body);
        }
    }
    s.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_shows_its_graph_timeline_diffs_and_state() {
    let w = World::new("detail").await;
    let s = w.studio().await;
    let d = get(&s, &format!("/api/sessions/{}", w.waiting))
        .await
        .json();
    assert_eq!(d["graph"]["source"], "declared");
    let nodes: Vec<_> = d["graph"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap())
        .collect();
    assert_eq!(nodes, ["$start", "$end", "draft", "review", "publish"]);
    let labels: Vec<_> = d["graph"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["label"].as_str())
        .collect();
    assert_eq!(
        sorted(labels.iter().map(|s| s.to_string()).collect()),
        ["approved", "rejected"]
    );
    assert_eq!(d["current"], "review");
    assert_eq!(d["visited"], json!(["draft"]));
    assert_eq!(d["writable"], true);
    assert_eq!(d["interrupt"]["id"], w.interrupt.as_str());
    assert_eq!(d["interrupt"]["payload"]["question"], "publish this draft?");
    assert_eq!(d["answer_shape"]["type"], "Review");
    assert!(d["answer_shape"]["schema"]["properties"]["approve"].is_object());
    assert!(d["update_schema"]["properties"]["drafts"].is_object());

    let t = get(&s, &format!("/api/sessions/{}/timeline", w.done))
        .await
        .json();
    assert_eq!(t["merged"], true);
    let steps: Vec<_> = t["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["step"].as_str().unwrap())
        .collect();
    assert_eq!(steps, ["$start", "draft", "review", "publish"]);
    let changes = |i: usize| t["entries"][i]["changes"].clone();
    assert_eq!(
        changes(1),
        json!([
            {"path": "/drafts", "op": "changed", "before": 0, "after": 1},
            {"path": "/log", "op": "appended", "after": ["drafted"]},
        ])
    );
    assert_eq!(
        changes(2),
        json!([
            {"path": "/approved", "op": "changed", "before": null, "after": true},
            {"path": "/log", "op": "appended", "after": ["review: fine"]},
        ])
    );
    assert_eq!(t["entries"][3]["value"], json!({"log": ["published"]}));

    let at = |seq: Option<u64>| {
        let path = match seq {
            Some(n) => format!("/api/sessions/{}/state?seq={n}", w.done),
            None => format!("/api/sessions/{}/state", w.done),
        };
        let s = &s;
        async move { get(s, &path).await }
    };
    let first = at(Some(1)).await.json();
    assert_eq!(first["merged"], true);
    assert_eq!(
        first["state"],
        json!({"log": ["drafted"], "drafts": 1, "approved": null})
    );
    let last = at(None).await.json();
    assert_eq!(last["index"], 3);
    assert_eq!(
        last["state"]["log"],
        json!(["drafted", "review: fine", "published"])
    );
    for bad in [4, 99] {
        let r = at(Some(bad)).await;
        assert_eq!(r.status, 404);
        assert!(
            r.error().contains(&format!("no checkpoint {bad}")),
            "{}",
            r.body
        );
    }
    let r = get(&s, &format!("/api/sessions/{}/state?seq=first", w.done)).await;
    assert_eq!(r.status, 400, "{}", r.body);

    // Without the state type: what is stored, said to be unmerged, and the
    // graph as observed.
    let ro = w.read_only().await;
    let t = get(&ro, &format!("/api/sessions/{}/timeline", w.done))
        .await
        .json();
    assert_eq!(t["merged"], false);
    assert!(t["entries"][1]["changes"].is_null());
    assert_eq!(
        t["entries"][1]["value"],
        json!({"log": ["drafted"], "drafts": 1})
    );
    let st = get(&ro, &format!("/api/sessions/{}/state?seq=2", w.done))
        .await
        .json();
    assert_eq!(st["merged"], false);
    assert!(st["state"].is_null());
    assert_eq!(st["snapshot"]["seq"], 0);
    assert_eq!(st["updates"].as_array().unwrap().len(), 2);
    let d = get(&ro, &format!("/api/sessions/{}", w.done)).await.json();
    assert_eq!(d["graph"]["source"], "observed");
    let edges: Vec<_> = d["graph"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            format!(
                "{}>{}",
                e["from"].as_str().unwrap(),
                e["to"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        edges,
        [
            "$start>draft",
            "draft>review",
            "review>publish",
            "publish>$end"
        ]
    );
    assert_eq!(d["writable"], false);
    let waiting = get(&ro, &format!("/api/sessions/{}", w.waiting))
        .await
        .json();
    assert_eq!(waiting["current"], "review");
    assert!(waiting["answer_shape"].is_null());
    ro.shutdown().await.unwrap();
    s.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_is_checked_then_resumes_the_run_to_its_end() {
    let w = World::new("answer").await;
    let s = w.studio().await;
    let path = format!("/api/sessions/{}/answer", w.waiting);
    let good = json!({"interrupt": w.interrupt, "answer": {"approve": true, "note": "ship it"}});

    // A read-only studio has no write action.
    let ro = w.read_only().await;
    let r = post(&ro, &path, &good.to_string()).await;
    assert_eq!(r.status, 403);
    assert!(r.error().contains("read-only"), "{}", r.body);
    let r = post(
        &ro,
        &format!("/api/sessions/{}/fork", w.done),
        r#"{"index": 1}"#,
    )
    .await;
    assert_eq!(r.status, 403);
    ro.shutdown().await.unwrap();

    for (body, status, says) in [
        ("not json".to_owned(), 400, "interrupt"),
        ("{}".to_owned(), 400, "missing field"),
        (json!({"answer": 1}).to_string(), 400, "interrupt"),
        (
            json!({"interrupt": w.interrupt, "answer": 1, "extra": 2}).to_string(),
            400,
            "unknown field",
        ),
        (
            json!({"interrupt": "i-other", "answer": true}).to_string(),
            409,
            "i-other",
        ),
        (
            json!({"interrupt": w.interrupt, "answer": "yes"}).to_string(),
            422,
            "must be",
        ),
        (
            json!({"interrupt": w.interrupt, "answer": {"approve": "maybe", "note": ""}})
                .to_string(),
            422,
            "expected a boolean",
        ),
        (
            json!({"interrupt": w.interrupt, "answer": {"approve": true}}).to_string(),
            422,
            "note",
        ),
    ] {
        let r = post(&s, &path, &body).await;
        assert_eq!(r.status, status, "{body}: {}", r.body);
        assert!(r.error().contains(says), "{body}: {}", r.body);
    }
    // None of them touched the session.
    let d = get(&s, &format!("/api/sessions/{}", w.waiting))
        .await
        .json();
    assert_eq!(d["summary"]["phase"], "waiting");
    assert_eq!(d["summary"]["steps"], 1);

    let r = post(&s, &path, &good.to_string()).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let state = eventually("the resumed run to end", || {
        let s = &s;
        let id = w.waiting.clone();
        async move {
            let d = get(s, &format!("/api/sessions/{id}")).await.json();
            (d["summary"]["phase"] == "done").then_some(())?;
            Some(get(s, &format!("/api/sessions/{id}/state")).await.json())
        }
    })
    .await;
    assert_eq!(
        state["state"]["log"],
        json!(["drafted", "review: ship it", "published"])
    );
    let again = post(&s, &path, &good.to_string()).await;
    assert_eq!(again.status, 409);
    assert!(again.error().contains("not waiting"), "{}", again.body);
    let other = post(
        &s,
        &format!("/api/sessions/{}/answer", w.failed),
        &good.to_string(),
    )
    .await;
    assert_eq!(other.status, 403);
    assert!(other.error().contains("broken"), "{}", other.body);
    s.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_takes_an_edited_update_checked_as_the_state_s_update() {
    let w = World::new("fork").await;
    let s = w.studio().await;
    let path = format!("/api/sessions/{}/fork", w.done);
    for (body, status, says) in [
        (
            json!({"index": 1, "update": {"drafts": "many"}}).to_string(),
            422,
            "update",
        ),
        (
            json!({"index": 1, "update": {"log": "one"}}).to_string(),
            422,
            "update",
        ),
        (
            json!({"index": 1, "update": [1]}).to_string(),
            422,
            "update",
        ),
        (json!({"index": 9}).to_string(), 404, "9"),
        (json!({"update": null}).to_string(), 400, "index"),
        (json!({"index": -1}).to_string(), 400, "index"),
    ] {
        let r = post(&s, &path, &body).await;
        assert_eq!(r.status, status, "{body}: {}", r.body);
        assert!(r.error().contains(says), "{body}: {}", r.body);
    }
    let before = get(&s, "/api/sessions")
        .await
        .json()
        .as_array()
        .unwrap()
        .len();
    let r = post(
        &s,
        &path,
        &json!({"index": 1, "update": {"log": ["edited"], "drafts": 5}}).to_string(),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let fork = r.json()["session"].as_str().unwrap().to_owned();
    let list = get(&s, "/api/sessions").await.json();
    assert_eq!(list.as_array().unwrap().len(), before + 1);
    let state = get(&s, &format!("/api/sessions/{fork}/state")).await.json();
    assert_eq!(
        state["state"],
        json!({"log": ["drafted", "edited"], "drafts": 6, "approved": null})
    );
    let d = get(&s, &format!("/api/sessions/{fork}")).await.json();
    assert_eq!(d["summary"]["phase"], "done");
    assert!(d["summary"]["detail"].as_str().unwrap().contains(&w.done));
    // No update: the state as it was.
    let r = post(&s, &path, &json!({"index": 2}).to_string()).await;
    let plain = r.json()["session"].as_str().unwrap().to_owned();
    let state = get(&s, &format!("/api/sessions/{plain}/state"))
        .await
        .json();
    assert_eq!(state["state"]["approved"], true);
    assert_eq!(state["state"]["log"], json!(["drafted", "review: fine"]));
    s.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_response_asks_for_no_referrer() {
    let w = World::new("referrer").await;
    let s = w.studio().await;
    let timeline = format!("/api/sessions/{}/timeline", w.done);
    let events = format!("/api/events?token={}", s.token());
    for (path, headers, status) in [
        ("/", vec![], 200),
        ("/studio.js", vec![], 200),
        ("/studio.css", vec![], 200),
        ("/api/info", vec![("x-studio-token", s.token())], 200),
        (&timeline, vec![("x-studio-token", s.token())], 200),
        ("/api/sessions", vec![], 401),
        (
            "/api/sessions/nobody",
            vec![("x-studio-token", s.token())],
            404,
        ),
    ] {
        let r = request(&s, "GET", path, &headers, None).await;
        assert_eq!(r.status, status, "{path}: {}", r.body);
        assert_eq!(r.header("referrer-policy"), Some("no-referrer"), "{path}");
    }
    // The event stream's head.
    let mut conn = tokio::net::TcpStream::connect(s.local_addr())
        .await
        .unwrap();
    let req = format!("GET {events} HTTP/1.1\r\nHost: studio\r\n\r\n");
    tokio::io::AsyncWriteExt::write_all(&mut conn, req.as_bytes())
        .await
        .unwrap();
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::io::AsyncReadExt::read(&mut conn, &mut buf)
            .await
            .unwrap();
        assert!(n > 0);
        head.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&head).to_lowercase();
    assert!(head.contains("referrer-policy: no-referrer"), "{head}");
    s.shutdown().await.unwrap();
}
