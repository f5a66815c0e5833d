//! Text a model wrote, on the page in a real headless Chromium: the page's
//! own files served beside an API whose every string is hostile (markup,
//! bidi overrides and isolates, zero-width characters). The page shows
//! them as text, with each invisible character as a visible `\uXXXX`, in
//! elements isolated from the studio's own words, so that none can
//! reorder what the page says, the tool-approval widget's included.

use crate::browser::Browser;
use axum::Json;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use serde_json::{Value, json};

const INDEX_HTML: &str = include_str!("../../assets/index.html");
const STUDIO_JS: &str = include_str!("../../assets/studio.js");
const STUDIO_CSS: &str = include_str!("../../assets/studio.css");

/// A right-to-left override, a left-to-right isolate, a zero-width space
/// and a right-to-left mark.
const INVISIBLE: &str = "\u{202E}evil\u{2066}\u{200B}\u{200F}";
/// How the page shows them.
const SHOWN: &str = "\\u202Eevil\\u2066\\u200B\\u200F";
const MARKUP: &str = "<img src=x onerror=\"window.pwned=1\">";

fn hostile(text: &str) -> String {
    format!("{text}{INVISIBLE}")
}

fn api() -> axum::Router {
    let step = hostile("review");
    let summary = json!({
        "id": "s1", "agent": hostile("agent"), "phase": "waiting",
        "detail": null, "steps": 2, "next_step": step, "lease_live": false,
        "created_at": 0, "updated_at": 0, "version": 1,
    });
    let payload = json!({
        "kind": "tool_approval",
        "calls": [{
            "call_id": hostile("call_1"),
            "tool": hostile("shell"),
            "arguments": {"cmd": hostile("rm -rf ~"), "note": MARKUP},
            "allow_key": hostile("shell:*"),
            "schema": {"type": "object"},
        }],
    });
    let detail = json!({
        "summary": summary,
        "interrupt": {"id": hostile("interrupt"), "step": step, "path": "", "payload": payload},
        "answer_shape": null,
        "journal": {"responses": [hostile("said")]},
        "writable": true,
        "graph": {
            "source": "observed",
            "nodes": [
                {"id": "$start", "label": "start", "kind": "start"},
                {"id": step, "label": step, "kind": "step"},
                {"id": "$end", "label": "end", "kind": "end"},
            ],
            "edges": [
                {"from": "$start", "to": step, "kind": "next", "label": hostile("edge")},
                {"from": step, "to": "$end", "kind": "next"},
            ],
            "clusters": [],
        },
        "visited": [step], "taken": [["$start", step]], "current": step,
        "positions": [{"path": "", "node": step, "waiting": true}],
        "interrupt_node": step, "update_schema": null,
    });
    let entry = |seq: u64, kind: &str, changes: Value| {
        json!({
            "seq": seq, "index": seq, "step": step, "time": 0, "kind": kind,
            "path": "", "task": "root", "sub_agent": null, "node": step,
            "branches": null, "join": null, "next": null, "signal": null,
            "value": {"log": [hostile("entry")]}, "changes": changes, "changes_of": "run",
        })
    };
    let timeline = json!({
        "merged": true, "paths": [""], "total": 2, "offset": 0, "limit": 100,
        "entries": [
            entry(0, "snapshot", json!([])),
            entry(1, "update", json!([
                {"path": format!("/{}", hostile("log")), "op": "changed",
                 "before": hostile("was"), "after": hostile("is")},
                {"path": "/big", "op": "changed", "before": 1,
                 "after_cut": {"preview": hostile("[\"large"), "bytes": 123_456}},
            ])),
        ],
    });
    // The second entry: more changes than sent.
    let mut timeline = timeline;
    timeline["entries"][1]["more_changes"] = json!(3);
    let state = json!({
        "seq": 1, "index": 1, "step": step, "path": "", "sub_agent": null,
        "merged": true, "state": {hostile("key"): hostile("value")},
        "task_state": null, "snapshot": null, "updates": [],
    });
    let info = json!({
        "title": hostile("title"), "mode": "agent", "agent": "a", "writable": true,
        "graph": "observed", "phases": ["running", "waiting", "done", "failed"],
        "memory": false, "evals": false,
    });
    let events = format!("event: sessions\ndata: {}\n\n", json!([summary]));
    let asset = |body: &'static str, kind: &'static str| {
        get(move || async move { ([(header::CONTENT_TYPE, kind)], body).into_response() })
    };
    let data = |v: Value| get(move || async move { Json(v) });
    axum::Router::new()
        .route("/", asset(INDEX_HTML, "text/html; charset=utf-8"))
        .route("/studio.js", asset(STUDIO_JS, "text/javascript"))
        .route("/studio.css", asset(STUDIO_CSS, "text/css"))
        .route("/api/info", data(info))
        .route("/api/sessions", data(json!([summary])))
        .route("/api/sessions/s1", data(detail))
        .route("/api/sessions/s1/timeline", data(timeline))
        .route("/api/sessions/s1/state", data(state))
        .route(
            "/api/events",
            get(move || {
                let events = events.clone();
                async move { ([(header::CONTENT_TYPE, "text/event-stream")], events) }
            }),
        )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_invisible_characters_a_model_wrote_are_shown_and_cannot_reorder_the_page() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, api()).await });
    let mut b = Browser::open_session(&format!("http://{addr}/"), &"s1").await;
    b.wait_for(
        "the approval widget and the timeline",
        "document.querySelector('#approval-calls .call .call-args') && \
         document.querySelectorAll('#timeline .checkpoint').length === 2 && \
         document.querySelector('#state-tree li')",
    )
    .await;

    // Nothing on the page holds an invisible character: each is shown.
    let found = b
        .eval(
            "[...document.body.textContent.matchAll(/[\\p{Cf}\\u2028\\u2029]/gu)]\
             .map(m => m[0].codePointAt(0).toString(16)).join(',')",
        )
        .await;
    assert_eq!(found, "", "invisible characters on the page");
    let shown = |what: &str| format!("{what}{SHOWN}");
    // The approval: the tool, its call, its arguments, "always allow (…)".
    let call = b.text("#approval-calls .call").await;
    for part in [shown("shell"), shown("call_1"), shown("rm -rf ~")] {
        assert!(call.contains(&part), "{part:?} in {call:?}");
    }
    let always = b
        .text("#approval-calls .choice:has(input[value=\"always_allow\"])")
        .await;
    assert_eq!(always, format!(" always allow ({})", shown("shell:*")));
    assert!(
        call.contains("<img src=x onerror="),
        "markup is text: {call}"
    );
    // The timeline's step, its change; the state; the question's step.
    let cp = b.text("#timeline .checkpoint[data-seq=\"1\"]").await;
    for part in [
        shown("review"),
        format!(
            "/{}: \"{}\" → \"{}\"",
            shown("log"),
            shown("was"),
            shown("is")
        ),
    ] {
        assert!(cp.contains(&part), "{part:?} in {cp:?}");
    }
    // A value too large to send whole: its beginning, and its size.
    assert!(
        cp.contains(&format!("/big: 1 → {}… (123,456 bytes)", shown("[\"large"))),
        "{cp}"
    );
    assert!(cp.contains("… and 3 more changes"), "{cp}");
    assert!(b.text("#state-tree").await.contains(&shown("key")));
    assert!(b.text("#interrupt-step").await.contains(&shown("review")));
    assert!(b.text("#graph").await.contains(&shown("review")));

    // Each element holding such text is isolated from the words around it.
    let isolated = b
        .eval(
            "['#approval-calls .call-tool', '#approval-calls .call-id', '#approval-calls .call-args', \
              '#approval-calls .choice bdi', '#timeline .checkpoint .step', '#timeline .change bdi', \
              '#interrupt-step bdi', '#state-tree .k', '#session-agent']\
             .map(s => [s, document.querySelector(s) && getComputedStyle(document.querySelector(s)).unicodeBidi])\
             .filter(([, u]) => u !== 'isolate').map(([s, u]) => s + ': ' + u).join('; ')",
        )
        .await;
    assert_eq!(isolated, "", "not isolated");
    assert_eq!(b.eval("typeof window.pwned").await, json!("undefined"));
    assert!(!b.has("#approval-calls img").await);
    b.close().await;
    server.abort();
}
