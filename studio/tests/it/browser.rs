//! The page in a real headless Chromium, driven over the Chrome DevTools
//! Protocol: open the studio on a store with a waiting session, see the
//! graph and the timeline, answer the interrupt in the form, and watch the
//! session complete. Fails (never skips) when Chromium is missing:
//! `scripts/test` installs Debian's `chromium`.
//!
//! Screenshots (PNG) of the graph, the answer form and a timeline go to
//! `$STUDIO_SCREENSHOTS` (default: this test's temporary directory);
//! `STUDIO_SCREENSHOTS=docs` writes the README's, in `docs/`.

use crate::support::{TempDir, TripWorld, World, temp_dir};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// The Chromium binary: `$CHROMIUM`, else the first of Debian's names on
/// the `PATH`.
fn chromium() -> PathBuf {
    if let Some(p) = std::env::var_os("CHROMIUM") {
        return p.into();
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        for name in ["chromium", "chromium-browser", "google-chrome"] {
            let p = dir.join(name);
            if p.is_file() {
                return p;
            }
        }
    }
    panic!(
        "Chromium is not installed (no chromium on the PATH, no $CHROMIUM): the studio's browser \
         test needs it; scripts/test installs Debian's `chromium` package"
    );
}

/// A headless browser and one page, attached with a flat session.
pub(crate) struct Browser {
    child: Child,
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    session: String,
    next_id: u64,
    _profile: TempDir,
}

impl Browser {
    pub(crate) async fn launch() -> Browser {
        let profile = temp_dir("chromium");
        let mut child = Command::new(chromium())
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--remote-debugging-port=0",
                "--hide-scrollbars",
                "--force-color-profile=srgb",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            // Its own temporary files (the singleton's socket) in the
            // profile, deleted with it: a killed Chromium leaves them.
            .env("TMPDIR", &profile)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("chromium starts");
        let stderr = child.stderr.take().unwrap();
        let mut lines = BufReader::new(stderr).lines();
        let ws_url = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if let Some(url) = line.split("DevTools listening on ").nth(1) {
                    return url.trim().to_owned();
                }
            }
            panic!("chromium exited without a DevTools URL");
        })
        .await
        .expect("chromium prints its DevTools URL within 60 s");
        // Keep draining stderr so that the browser never blocks on it.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let (ws, _) = tokio_tungstenite::connect_async(ws_url.as_str())
            .await
            .expect("the DevTools websocket");
        let mut browser = Browser {
            child,
            ws,
            session: String::new(),
            next_id: 0,
            _profile: TempDir(profile),
        };
        let target = browser
            .call("Target.createTarget", json!({"url": "about:blank"}))
            .await;
        let attached = browser
            .call(
                "Target.attachToTarget",
                json!({"targetId": target["targetId"], "flatten": true}),
            )
            .await;
        browser.session = attached["sessionId"].as_str().unwrap().to_owned();
        browser
            .call(
                "Emulation.setDeviceMetricsOverride",
                json!({"width": 1400, "height": 1000, "deviceScaleFactor": 1, "mobile": false}),
            )
            .await;
        browser
    }

    /// A browser showing `url`.
    pub(crate) async fn open(url: &str) -> Browser {
        let mut b = Browser::launch().await;
        b.call("Page.enable", json!({})).await;
        b.call("Page.navigate", json!({"url": url})).await;
        b
    }

    /// A browser showing `url`, with `script` run in the page before the
    /// page's own (to watch or hold what the page asks for).
    pub(crate) async fn open_with(url: &str, script: &str) -> Browser {
        let mut b = Browser::launch().await;
        b.call("Page.enable", json!({})).await;
        b.call(
            "Page.addScriptToEvaluateOnNewDocument",
            json!({ "source": script }),
        )
        .await;
        b.call("Page.navigate", json!({"url": url})).await;
        b
    }

    /// Opens the studio at `url` and picks `session` in its list.
    pub(crate) async fn open_session(url: &str, session: &impl std::fmt::Display) -> Browser {
        let mut b = Browser::open(url).await;
        let row = format!("#sessions tr[data-id=\"{session}\"]");
        b.wait_for("the session", &format!("document.querySelector('{row}')"))
            .await;
        b.pick(session).await;
        b
    }

    /// Picks `session` in the list. The list is drawn again as the event
    /// stream reports, and a press and a release on two drawings of the row
    /// are no click: clicked until the row is picked.
    pub(crate) async fn pick(&mut self, session: &impl std::fmt::Display) {
        let row = format!("#sessions tr[data-id=\"{session}\"]");
        for _ in 0..20 {
            self.click(&row).await;
            for _ in 0..20 {
                if self.has(&format!("{row}.selected")).await {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        let picked = format!("document.querySelector('{row}.selected')");
        self.wait_for("the session picked", &picked).await;
    }

    /// The text of the element (`null`'s text if there is none).
    pub(crate) async fn text(&mut self, selector: &str) -> String {
        let v = self
            .eval(&format!(
                "(document.querySelector({}) || {{}}).textContent",
                json!(selector)
            ))
            .await;
        v.as_str().unwrap_or("null").to_owned()
    }

    /// The value of a form field.
    pub(crate) async fn value(&mut self, selector: &str) -> String {
        let v = self
            .eval(&format!(
                "document.querySelector({}).value",
                json!(selector)
            ))
            .await;
        v.as_str().unwrap_or_default().to_owned()
    }

    /// Whether the element matching `selector` exists.
    pub(crate) async fn has(&mut self, selector: &str) -> bool {
        self.eval(&format!("!!document.querySelector({})", json!(selector)))
            .await
            == json!(true)
    }

    /// Every error the page shows, joined.
    pub(crate) async fn errors(&mut self) -> String {
        let v = self
            .eval("[...document.querySelectorAll('.error')].map(e => e.textContent).filter(t => t).join(' | ')")
            .await;
        v.as_str().unwrap_or_default().to_owned()
    }

    /// Sends a command (to the page once attached) and returns its result.
    pub(crate) async fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if !self.session.is_empty() {
            msg["sessionId"] = json!(self.session);
        }
        self.ws
            .send(Message::Text(msg.to_string().into()))
            .await
            .unwrap();
        loop {
            let frame = tokio::time::timeout(Duration::from_secs(60), self.ws.next())
                .await
                .unwrap_or_else(|_| panic!("no answer to {method} within 60 s"))
                .expect("the websocket is open")
                .unwrap();
            let Message::Text(text) = frame else { continue };
            let v: Value = serde_json::from_str(&text).unwrap();
            if v["id"] == id {
                if let Some(e) = v.get("error") {
                    panic!("{method}: {e}");
                }
                return v["result"].clone();
            }
        }
    }

    /// Evaluates `expr` in the page (promises awaited) and returns its value.
    pub(crate) async fn eval(&mut self, expr: &str) -> Value {
        let r = self
            .call(
                "Runtime.evaluate",
                json!({"expression": expr, "returnByValue": true, "awaitPromise": true}),
            )
            .await;
        if let Some(e) = r.get("exceptionDetails") {
            panic!("{expr}: {e}");
        }
        r["result"]["value"].clone()
    }

    /// Waits until `expr` is truthy in the page; the timeout is a safety
    /// net.
    /// Waits until the open session is done and its waiting panel gone,
    /// as the page follows a resumed run live.
    pub(crate) async fn wait_until_done(&mut self) {
        self.wait_for(
            "the session done",
            "document.querySelector('#phase').dataset.phase === 'done'",
        )
        .await;
        self.wait_for(
            "the waiting panel gone",
            "document.querySelector('#waiting-panel').hidden",
        )
        .await;
    }

    pub(crate) async fn wait_for(&mut self, what: &str, expr: &str) {
        for _ in 0..300 {
            if self.eval(&format!("!!({expr})")).await == json!(true) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let errors = self.errors().await;
        panic!("the page never showed {what} ({expr}); errors on the page: {errors}");
    }

    /// The centre of the element, scrolled into view.
    pub(crate) async fn centre(&mut self, selector: &str) -> (f64, f64) {
        let v = self
            .eval(&format!(
                "(() => {{ const e = document.querySelector({sel}); e.scrollIntoView({{block: 'center'}}); \
                 const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; }})()",
                sel = json!(selector)
            ))
            .await;
        (v[0].as_f64().unwrap(), v[1].as_f64().unwrap())
    }

    /// A real mouse click on the element.
    pub(crate) async fn click(&mut self, selector: &str) {
        let (x, y) = self.centre(selector).await;
        for kind in ["mousePressed", "mouseReleased"] {
            self.call(
                "Input.dispatchMouseEvent",
                json!({"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}),
            )
            .await;
        }
    }

    /// Clicks into a text field, clears it and types `text`.
    pub(crate) async fn type_into(&mut self, selector: &str, text: &str) {
        self.click(selector).await;
        self.eval(&format!(
            "document.querySelector({}).select()",
            json!(selector)
        ))
        .await;
        self.call("Input.insertText", json!({"text": text})).await;
    }

    /// A PNG of the element.
    pub(crate) async fn screenshot(&mut self, selector: &str, name: &str) {
        self.centre(selector).await;
        let r = self
            .eval(&format!(
                "(() => {{ const r = document.querySelector({}).getBoundingClientRect(); \
                 return [r.x + scrollX, r.y + scrollY, r.width, r.height]; }})()",
                json!(selector)
            ))
            .await;
        let clip = json!({"x": r[0], "y": r[1], "width": r[2], "height": r[3], "scale": 1});
        let shot = self
            .call(
                "Page.captureScreenshot",
                json!({"format": "png", "clip": clip, "captureBeyondViewport": true}),
            )
            .await;
        let png = base64(shot["data"].as_str().unwrap());
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "{name} is a PNG");
        assert!(png.len() > 2000, "{name}: a real picture, not an empty one");
        let dir = match std::env::var("STUDIO_SCREENSHOTS") {
            Ok(d) if d == "docs" => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs"),
            Ok(d) => PathBuf::from(d),
            Err(_) => PathBuf::from(env!("CARGO_TARGET_TMPDIR")),
        };
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), png).unwrap();
    }

    /// Closes the browser (`Browser.close`, to the browser itself) and
    /// waits for it to end with its processes, so that its profile can be
    /// deleted whole (killed, its helpers went on writing there); killed
    /// if it has not ended within 10 s.
    pub(crate) async fn close(mut self) {
        self.next_id += 1;
        let msg = json!({"id": self.next_id, "method": "Browser.close"});
        let _ = self.ws.send(Message::Text(msg.to_string().into())).await;
        if tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

/// Standard base64, as CDP sends screenshots.
fn base64(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let bytes: Vec<u8> = text.bytes().filter(|&c| c != b'=').collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut n: u32 = 0;
        for (i, &c) in chunk.iter().enumerate() {
            n |= u32::from(value(c)) << (18 - 6 * i);
        }
        let got = chunk.len() * 6 / 8;
        out.extend_from_slice(&n.to_be_bytes()[1..=got]);
    }
    out
}

#[test]
fn base64_decodes() {
    assert_eq!(base64("aGFybmVzcw=="), b"harness");
    assert_eq!(base64("c3R1ZGlv"), b"studio");
    assert_eq!(base64("YQ=="), b"a");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_a_waiting_session_is_answered_in_the_form_and_completes() {
    let w = World::new("browser").await;
    let studio = w.studio().await;
    let mut b = Browser::open(&studio.url()).await;

    // The list, with every session and its phase.
    b.wait_for(
        "the three sessions",
        "document.querySelectorAll('#sessions tbody tr').length === 3",
    )
    .await;
    let row = format!("#sessions tr[data-id=\"{}\"]", w.waiting);
    assert_eq!(
        b.eval(&format!("document.querySelector('{row}').dataset.phase"))
            .await,
        "waiting"
    );
    // Search narrows the list.
    b.type_into("#search", "broken").await;
    b.wait_for(
        "the search",
        "document.querySelectorAll('#sessions tbody tr').length === 1",
    )
    .await;
    b.type_into("#search", "").await;
    b.eval("document.querySelector('#search').value = ''; document.querySelector('#search').dispatchEvent(new Event('input'))").await;
    b.wait_for(
        "the list again",
        "document.querySelectorAll('#sessions tbody tr').length === 3",
    )
    .await;

    b.click(&row).await;
    // The graph: every step, the signals, the waiting step highlighted.
    b.wait_for(
        "the waiting step highlighted",
        "document.querySelector('#graph .node.current[data-step=\"review\"]')",
    )
    .await;
    let steps = b
        .eval("[...document.querySelectorAll('#graph .node')].map(n => n.dataset.step).sort().join(',')")
        .await;
    assert_eq!(steps, "$end,$start,draft,publish,review");
    let labels = b
        .eval("[...document.querySelectorAll('#graph .edge text')].map(t => t.textContent).sort().join(',')")
        .await;
    assert_eq!(labels, "approved,rejected");
    // The timeline: the start and the draft step, with its diff.
    b.wait_for(
        "the timeline",
        "document.querySelectorAll('#timeline .checkpoint').length === 2",
    )
    .await;
    let draft = b.text("#timeline .checkpoint[data-step=\"draft\"]").await;
    assert!(draft.contains("/drafts: 0 → 1"), "{draft}");
    // The question and the form.
    b.wait_for("the answer form", "!document.querySelector('#waiting-panel').hidden && !document.querySelector('#answer-form').hidden")
        .await;
    let payload = b.text("#interrupt-payload").await;
    assert!(payload.contains("publish this draft?"), "{payload}");
    let shape = b.text("#answer-shape").await;
    assert!(shape.contains("Review"), "{shape}");
    b.screenshot("#graph-panel", "studio-graph.png").await;

    // An answer of the wrong shape is refused, and says why.
    b.type_into("#answer", r#"{"approve": "maybe", "note": "hmm"}"#)
        .await;
    b.click("#answer-submit").await;
    b.wait_for(
        "the refusal",
        "document.querySelector('#answer-error').textContent.includes('must be')",
    )
    .await;
    b.type_into("#answer", "not json").await;
    b.click("#answer-submit").await;
    b.wait_for(
        "the JSON error",
        "document.querySelector('#answer-error').textContent.includes('not JSON')",
    )
    .await;
    b.type_into("#answer", r#"{"approve": true, "note": "ship it"}"#)
        .await;
    b.screenshot("#waiting-panel", "studio-answer.png").await;
    b.click("#answer-submit").await;

    // The run resumes and the page follows it to the end, live.
    b.wait_until_done().await;
    b.wait_for(
        "the whole timeline",
        "[...document.querySelectorAll('#timeline .checkpoint')].map(c => c.dataset.step).join(',') === '$start,draft,review,publish'",
    )
    .await;
    b.wait_for(
        "the row done",
        &format!(
            "document.querySelector('#sessions tr[data-id=\"{}\"]').dataset.phase === 'done'",
            w.waiting
        ),
    )
    .await;
    assert_eq!(
        b.eval("document.querySelector('#graph .node.current')")
            .await,
        Value::Null,
        "nothing runs any more"
    );
    // The state at the review checkpoint, as a tree.
    b.click("#timeline .checkpoint[data-step=\"review\"]").await;
    b.wait_for(
        "the state after review",
        "document.querySelector('#state-at').textContent.includes('review')",
    )
    .await;
    let state = b.text("#state-tree").await;
    assert!(
        state.contains("review: ship it") && !state.contains("published"),
        "{state}"
    );
    b.screenshot(".columns", "studio-timeline.png").await;
    assert_eq!(b.errors().await, "", "no error on the page");
    b.close().await;
    studio.shutdown().await.unwrap();

    // The answer went through the agent: the session is done in the store.
    let head = w
        .store
        .load(&w.waiting.clone().into())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(head.steps, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_a_session_waiting_inside_a_sub_agent_shows_its_forks_and_is_answered() {
    let w = TripWorld::new("browser-composed").await;
    let studio = w.studio().await;
    let mut b = Browser::open_session(&studio.url(), &w.waiting).await;

    // The sub-agent's box holds its own steps; the step asking inside it
    // is highlighted as waiting, and so is the box.
    b.wait_for(
        "the waiting step inside the sub-agent",
        "document.querySelector('#graph .node.cluster.current[data-step=\"review\"] .node.current.waiting[data-step=\"review/ask\"]')",
    )
    .await;
    let inside = b
        .eval("[...document.querySelectorAll('#graph .node.cluster[data-step=\"review\"] .node')].map(n => n.dataset.step).join(',')")
        .await;
    assert_eq!(inside, "review/note,review/ask,review/$end");
    let title = b.text("#graph .node.cluster .cluster-title").await;
    assert_eq!(title, "review (sub-agent)");
    // The fork: two bold branch edges side by side, the dashed join edge
    // to the join, marked; the fan-out's edge labelled `each`.
    let branches = b
        .eval("[...document.querySelectorAll('#graph .edge.kind-branch')].map(e => e.dataset.from + '>' + e.dataset.to).join(',')")
        .await;
    assert_eq!(branches, "plan>left,plan>right");
    let side_by_side = b
        .eval("(() => { const y = (s) => document.querySelector(`#graph .node[data-step=\"${s}\"] rect`).getBBox().y; return y('left') === y('right') && y('left') > y('plan') && y('merge') > y('left'); })()")
        .await;
    assert_eq!(side_by_side, true, "the branches are drawn in parallel");
    let joins = b
        .eval("[...document.querySelectorAll('#graph .edge.kind-join')].map(e => e.dataset.from + '>' + e.dataset.to + ':' + e.textContent).join(',')")
        .await;
    assert_eq!(joins, "plan>merge:join,merge>sum:join");
    assert_eq!(
        b.eval("!!document.querySelector('#graph .node.join[data-step=\"merge\"] .join-bar')")
            .await,
        true
    );
    let each = b
        .text("#graph .edge.kind-each[data-from=\"merge\"][data-to=\"square\"]")
        .await;
    assert_eq!(each, "each");
    assert_eq!(
        b.eval(
            "document.querySelectorAll('#graph .node.fanned[data-step=\"square\"] .stack').length"
        )
        .await,
        2
    );
    b.screenshot("#graph-panel", "studio-composed-graph.png")
        .await;

    // The timeline: each record's path; the fork lists its branches; the
    // sub-agent's record grouped under its step.
    b.wait_for(
        "the timeline",
        "document.querySelectorAll('#timeline .checkpoint').length === 14",
    )
    .await;
    let fan_out = b
        .text("#timeline .checkpoint[data-kind=\"fork\"][data-step=\"merge\"] .branches")
        .await;
    assert!(
        fan_out.contains("square#0 (1), square#1 (2), square#2 (3)")
            && fan_out.contains("join at sum"),
        "{fan_out}"
    );
    let branch = b
        .text("#timeline .checkpoint[data-path=\"square#1\"]")
        .await;
    assert!(
        branch.contains("square#1")
            && branch.contains("own state")
            && branch.contains("/total: 1 → 5"),
        "{branch}"
    );
    let grouped = b
        .eval("[...document.querySelectorAll('#timeline .sub-group[data-sub-agent=\"review\"] .checkpoint')].map(c => c.dataset.step).join(',')")
        .await;
    assert_eq!(grouped, "note");
    // The checkpoint shown is marked on the graph: a branch's step by its
    // node.
    b.click("#timeline .checkpoint[data-path=\"square#1\"]")
        .await;
    b.wait_for(
        "the branch's step marked",
        "document.querySelector('#graph .node.picked[data-step=\"square\"]') && document.querySelector('#state-at').textContent.includes('branch square#1')",
    )
    .await;
    let own = b.text("#state-tree").await;
    assert!(own.contains("square#1\u{2019}s own state"), "{own}");
    // Filtered by path.
    b.eval("{ const f = document.querySelector('#path-filter'); f.value = 'square#2'; f.dispatchEvent(new Event('change')); }")
        .await;
    b.wait_for(
        "the filter",
        "[...document.querySelectorAll('#timeline .checkpoint')].map(c => c.dataset.path).join(',') === 'square#2'",
    )
    .await;
    b.eval("{ const f = document.querySelector('#path-filter'); f.value = '*'; f.dispatchEvent(new Event('change')); }")
        .await;
    // The fan-out's branches, their join and the sub-agent's group.
    b.eval("{ const t = document.querySelector('#timeline'); t.scrollTop = t.scrollHeight; }")
        .await;
    b.screenshot(".columns", "studio-composed-timeline.png")
        .await;

    // The question says where it was asked, and the form answers it.
    b.wait_for(
        "the answer form",
        "!document.querySelector('#waiting-panel').hidden && !document.querySelector('#answer-form').hidden",
    )
    .await;
    assert_eq!(
        b.eval("document.querySelector('#interrupt-path').dataset.path")
            .await,
        "review"
    );
    let where_ = b.text("#interrupt-path").await;
    assert!(where_.contains("sub-agent"), "{where_}");
    let shape = b.text("#answer-shape").await;
    assert!(shape.contains("Verdict"), "{shape}");
    b.type_into("#answer", r#"{"ok": "maybe"}"#).await;
    b.click("#answer-submit").await;
    b.wait_for(
        "the refusal",
        "document.querySelector('#answer-error').textContent.includes('review/ask')",
    )
    .await;
    b.type_into("#answer", r#"{"ok": true}"#).await;
    b.click("#answer-submit").await;
    b.wait_until_done().await;
    b.wait_for(
        "the whole timeline",
        "[...document.querySelectorAll('#timeline .sub-group[data-sub-agent=\"review\"] .checkpoint')].map(c => c.dataset.step).join(',') === 'note,ask' && document.querySelector('#timeline .checkpoint[data-step=\"publish\"]')",
    )
    .await;
    assert_eq!(
        b.eval("document.querySelector('#graph .node.current')")
            .await,
        Value::Null,
        "nothing runs any more"
    );
    assert_eq!(
        b.eval("!!document.querySelector('#graph .node.visited[data-step=\"review/ask\"]')")
            .await,
        true
    );
    assert_eq!(b.errors().await, "", "no error on the page");
    b.close().await;
    studio.shutdown().await.unwrap();
    let head = w
        .store
        .load(&w.waiting.clone().into())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(head.phase, harness::session::SessionPhase::Completed { .. }),
        "{head:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_tool_calls_are_approved_and_rejected_one_by_one_and_the_agent_goes_on() {
    use crate::support_kit::{ApprovalWorld, DELETE, NOTES, WRITE, result_of};
    let w = ApprovalWorld::new("browser-approval").await;
    let studio = w.studio().await;
    let mut b = Browser::open_session(&studio.url(), &w.waiting).await;

    // One row per pending call: its tool, its id, its arguments; the raw
    // JSON form is put away.
    b.wait_for(
        "the two calls",
        "!document.querySelector('#approval').hidden && document.querySelectorAll('#approval-calls .call').length === 2",
    )
    .await;
    let call = |id: &str| format!("#approval-calls .call[data-call-id=\"{id}\"]");
    let calls = b
        .eval("[...document.querySelectorAll('#approval-calls .call')].map(c => c.querySelector('.call-tool').textContent + ' ' + c.querySelector('.call-id').textContent).join(', ')")
        .await;
    assert_eq!(calls, "write_file call_write, delete_file call_delete");
    let args = b.text(&format!("{} .call-args", call(WRITE))).await;
    assert_eq!(
        args,
        "{\n  \"path\": \"summary.txt\",\n  \"text\": \"two notes\"\n}"
    );
    assert!(
        b.eval("document.querySelector('#raw-answer').hidden").await == json!(true),
        "the raw form is behind the advanced toggle"
    );

    // No decision yet: nothing is sent, and the row says so.
    b.click("#answer-submit").await;
    b.wait_for(
        "the missing decisions",
        &format!(
            "document.querySelector('{} .call-error').textContent.includes('choose a decision')",
            call(DELETE)
        ),
    )
    .await;

    // Edited arguments are checked against the tool's schema in the page.
    b.click(&format!("{} input[value=\"edit\"]", call(WRITE)))
        .await;
    b.wait_for(
        "the arguments' editor",
        &format!(
            "!document.querySelector('{} .call-edit-box').hidden",
            call(WRITE)
        ),
    )
    .await;
    b.type_into(&format!("{} .call-edit", call(WRITE)), r#"{"path": 3}"#)
        .await;
    b.click(&format!("{} input[value=\"approve\"]", call(DELETE)))
        .await;
    b.click("#answer-submit").await;
    b.wait_for(
        "the edit refused",
        &format!(
            "document.querySelector('{} .call-error').textContent.includes('schema')",
            call(WRITE)
        ),
    )
    .await;
    let refused = b.text(&format!("{} .call-error", call(WRITE))).await;
    assert!(
        refused.contains("/path") && refused.contains("missing field `text`"),
        "{refused}"
    );
    w.untouched("an edit refused in the page").await;
    // What the page does not check, the studio does: an empty path passes
    // the page's simple check, not the schema's `minLength`; the studio's
    // refusal lands in the call's row.
    b.type_into(
        &format!("{} .call-edit", call(WRITE)),
        r#"{"path": "", "text": "x"}"#,
    )
    .await;
    b.click("#answer-submit").await;
    b.wait_for(
        "the studio's refusal of the edit",
        "document.querySelector('#answer-error').textContent.includes('cannot be applied')",
    )
    .await;
    let refused = b.text(&format!("{} .call-error", call(WRITE))).await;
    assert!(
        refused.contains("call `call_write` (write_file) do not match its schema")
            && refused.contains("/path"),
        "{refused}"
    );
    assert_eq!(b.text(&format!("{} .call-error", call(DELETE))).await, "");
    w.untouched("an edit refused by the studio").await;

    // The studio checks too: in the advanced form, a decision on a call
    // that is not waiting is refused, with the studio's words.
    b.click("#answer-advanced").await;
    b.wait_for(
        "the raw form",
        "!document.querySelector('#raw-answer').hidden && document.querySelector('#approval-calls').hidden",
    )
    .await;
    let draft: Value = serde_json::from_str(&b.value("#answer").await).unwrap();
    assert_eq!(
        draft["decisions"][1],
        json!({"call_id": DELETE, "decision": "approve"}),
        "the raw form starts from the widget's decisions"
    );
    b.type_into(
        "#answer",
        &json!({"decisions": [
            {"call_id": WRITE, "decision": "approve"},
            {"call_id": "call_9", "decision": "approve"},
        ]})
        .to_string(),
    )
    .await;
    b.click("#answer-submit").await;
    b.wait_for(
        "the studio's refusal",
        "document.querySelector('#answer-error').textContent.includes('call_9')",
    )
    .await;
    let error = b.text("#answer-error").await;
    assert!(
        error.contains("not waiting")
            && error.contains("call `call_delete` (delete_file) has no decision"),
        "{error}"
    );
    w.untouched("an answer refused by the studio").await;
    b.click("#answer-advanced").await;
    b.wait_for(
        "the widget again",
        "document.querySelector('#raw-answer').hidden && !document.querySelector('#approval-calls').hidden",
    )
    .await;
    // The studio's problem for the call left out is in its row.
    assert!(
        b.text(&format!("{} .call-error", call(DELETE)))
            .await
            .contains("has no decision")
    );

    // Approve one, reject the other with a message for the model.
    b.click(&format!("{} input[value=\"approve\"]", call(WRITE)))
        .await;
    b.click(&format!("{} input[value=\"reject\"]", call(DELETE)))
        .await;
    b.wait_for(
        "the message field",
        &format!(
            "!document.querySelector('{} .call-message-box').hidden",
            call(DELETE)
        ),
    )
    .await;
    b.type_into(
        &format!("{} .call-message", call(DELETE)),
        "keep notes.txt, it is my only copy",
    )
    .await;
    assert_eq!(b.errors().await, "", "the errors went with the changes");
    b.screenshot("#waiting-panel", "studio-approval.png").await;
    b.click("#answer-submit").await;

    // The agent goes on and the page follows it to the end, live.
    b.wait_until_done().await;
    b.wait_for(
        "the row done",
        &format!(
            "document.querySelector('#sessions tr[data-id=\"{}\"]').dataset.phase === 'done'",
            w.waiting
        ),
    )
    .await;
    assert!(
        !b.has("#graph .node.current").await,
        "nothing runs any more"
    );
    assert_eq!(b.errors().await, "", "no error on the page");
    b.close().await;
    studio.shutdown().await.unwrap();

    // The approved call ran, the rejected one did not, and the model read
    // the message as the rejected call's result.
    assert_eq!(w.file("summary.txt").as_deref(), Some("two notes"));
    assert_eq!(w.file("notes.txt").as_deref(), Some(NOTES));
    let requests = w.model.requests();
    assert_eq!(requests.len(), 2);
    assert!(!result_of(&requests[1], WRITE).is_error);
    let rejected = result_of(&requests[1], DELETE);
    assert!(
        rejected.is_error
            && rejected
                .content
                .contains("keep notes.txt, it is my only copy"),
        "{rejected:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_the_memory_view_shows_namespaces_and_items_as_text_a_page_at_a_time() {
    let memory = harness::memory::Memory::in_memory();
    crate::memory::fill(&memory).await;
    let markup = "<img src=x onerror=\"window.pwned = 1\"><script>window.pwned = 2</script>";
    memory
        .put(
            &crate::memory::ns(&["notes"]),
            "<b>markup</b>",
            json!({"html": markup}),
        )
        .await
        .unwrap();
    let long = format!("{}THE END", "word ".repeat(10_000));
    memory
        .put(
            &crate::memory::ns(&["notes"]),
            "long",
            json!({"text": long}),
        )
        .await
        .unwrap();
    let (studio, _dir) = crate::memory::serve(memory).await;
    let mut b = Browser::open(&studio.url()).await;

    b.wait_for(
        "the memory tab",
        "document.querySelector('#views') && !document.querySelector('#views').hidden",
    )
    .await;
    b.click("#views .tab[data-view=\"memory\"]").await;
    // The tree: every namespace under its parents, `users` holding two.
    b.wait_for(
        "the namespace tree",
        "document.querySelector('#ns-tree .ns[data-ns=\"users/ada/preferences\"]')",
    )
    .await;
    let nodes = b
        .eval("[...document.querySelectorAll('#ns-tree .ns')].map(n => n.dataset.ns).join(',')")
        .await;
    assert_eq!(
        nodes,
        ",agents,agents/planner,agents/planner/notes,facts,notes,odd,odd/a%2Fb,users,users/ada,\
         users/ada/preferences,users/bob,users/bob/preferences"
    );
    assert!(
        b.has("#ns-tree li:has(> .ns[data-ns=\"users\"]) .ns[data-ns=\"users/bob/preferences\"]")
            .await
    );
    assert!(b.has(".ns.holds[data-ns=\"users/ada/preferences\"]").await);
    assert!(!b.has(".ns.holds[data-ns=\"users/ada\"]").await);

    // A namespace's items: key, times, expiry, the value pretty-printed.
    b.click(".ns[data-ns=\"users/ada/preferences\"]").await;
    b.wait_for(
        "ada's two items",
        "document.querySelectorAll('#items .item').length === 2 && \
         document.querySelector('#items-namespace').textContent === 'users / ada / preferences'",
    )
    .await;
    let language = b.text("#items .item[data-key=\"language\"]").await;
    assert!(language.contains("\"value\": \"Rust\""), "{language}");
    assert!(language.contains("\"weight\": 9"), "{language}");
    assert!(language.contains("no expiry"), "{language}");
    assert!(language.contains("updated"), "{language}");
    b.click(".ns[data-ns=\"agents\"]").await;
    b.wait_for(
        "the agent's notes",
        "document.querySelector('#items .item[data-key=\"deploy\"]')",
    )
    .await;
    let deploy = b.text("#items .item[data-key=\"deploy\"]").await;
    assert!(deploy.contains("expires in 60 min"), "{deploy}");

    // Markup in a key or a value is text: no element made, no script run.
    b.click(".ns[data-ns=\"notes\"]").await;
    b.wait_for(
        "the notes",
        "document.querySelector('#items .item[data-key=\"long\"]')",
    )
    .await;
    let note = b.text("#items .item[data-key=\"<b>markup</b>\"]").await;
    assert!(note.contains("<b>markup</b>"), "{note}");
    assert!(note.contains("<img src=x onerror="), "{note}");
    assert!(!b.has("#items img, #items script, #items b").await);
    assert_eq!(b.eval("typeof window.pwned").await, json!("undefined"));
    // A large value is cut and marked, and shown whole on request.
    let cut = b.text("#items .item[data-key=\"long\"] .cut").await;
    assert!(cut.contains("truncated"), "{cut}");
    assert!(cut.contains("50,018 bytes"), "{cut}");
    assert!(
        !b.text("#items .item[data-key=\"long\"] pre")
            .await
            .contains("THE END")
    );
    b.click("#items .item[data-key=\"long\"] .cut button").await;
    b.wait_for(
        "the whole value",
        "document.querySelector('#items .item[data-key=\"long\"] pre').textContent.includes('THE END') && \
         !document.querySelector('#items .item[data-key=\"long\"] .cut')",
    )
    .await;

    // Pages of 20: the facts, then the last five.
    b.click(".ns[data-ns=\"facts\"]").await;
    b.wait_for(
        "a page of facts",
        "document.querySelectorAll('#items .item').length === 20",
    )
    .await;
    assert_eq!(b.text("#items-page").await, "1–20 of more");
    b.click("#items-next").await;
    b.wait_for(
        "the last facts",
        "document.querySelectorAll('#items .item').length === 5",
    )
    .await;
    assert_eq!(b.text("#items-page").await, "21–25");
    assert_eq!(b.text("#items .item:last-child .item-key").await, "fact-24");
    // A filter on a field.
    b.type_into("#memory-filter", "n:gte:23").await;
    b.click("#memory-submit").await;
    b.wait_for(
        "the filtered facts",
        "document.querySelectorAll('#items .item').length === 2",
    )
    .await;

    // Back to every namespace, then a search by meaning: this memory has
    // no index, and the page says so.
    b.type_into("#memory-filter", "").await;
    b.click(".ns[data-ns=\"\"]").await;
    b.wait_for(
        "every item",
        "document.querySelector('#items-namespace').textContent === 'every namespace' && \
         document.querySelectorAll('#items .item').length === 20",
    )
    .await;
    b.screenshot("#memory-view", "studio-memory.png").await;
    b.type_into("#memory-q", "coffee").await;
    b.click("#memory-submit").await;
    b.wait_for(
        "the search's error",
        "document.querySelector('#memory-error').textContent.includes('needs an index')",
    )
    .await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_an_eval_report_shows_each_case_its_scores_and_reasons_and_links_its_run() {
    let (studio, _dir, report) = crate::evals::served().await;
    let mut b = Browser::open(&studio.url()).await;
    b.wait_for(
        "the evals tab",
        "document.querySelector('#views') && !document.querySelector('#views').hidden && \
         !document.querySelector('#views .tab[data-view=\"evals\"]').hidden",
    )
    .await;
    // No memory here: its tab stays hidden.
    assert!(
        b.eval("document.querySelector('#views .tab[data-view=\"memory\"]').hidden")
            .await
            .as_bool()
            .unwrap()
    );
    b.click("#views .tab[data-view=\"evals\"]").await;
    // The first report opens by itself: a row per case, a cell per evaluator.
    b.wait_for(
        "the report's cases",
        "document.querySelectorAll('#report-cases tr.case').length === 3",
    )
    .await;
    assert_eq!(
        b.text("#report-title").await,
        "capitals-v1 on capitals (scripted)"
    );
    let facts = b.text("#report-facts").await;
    assert!(facts.contains("passed 1/3"), "{facts}");
    let japan = b.text("#report-cases tr.case[data-case=\"japan\"]").await;
    assert!(japan.contains("✘ 0"), "{japan}");
    assert!(
        b.has("#report-cases tr.case[data-case=\"france\"] td.score.pass")
            .await
    );

    // A case opened: its input, output, every score with its reason.
    b.click("#report-cases tr.case[data-case=\"japan\"]").await;
    b.wait_for(
        "japan's detail",
        "document.querySelector('tr.case-detail[data-case=\"japan\"]')",
    )
    .await;
    let detail = b.text("tr.case-detail[data-case=\"japan\"]").await;
    for shown in [
        "Capital of Japan?",
        "Osaka",
        "Tokyo",
        "equals: failed 0",
        "steps: ask",
    ] {
        assert!(detail.contains(shown), "{shown:?} in {detail}");
    }
    // Markup a model answered with is text on the page, never markup.
    b.click("#report-cases tr.case[data-case=\"italy\"]").await;
    b.wait_for(
        "italy's detail",
        "document.querySelector('tr.case-detail[data-case=\"italy\"]')",
    )
    .await;
    assert!(
        b.text("tr.case-detail[data-case=\"italy\"]")
            .await
            .contains("onerror")
    );
    assert!(
        b.eval("window.pwned === undefined")
            .await
            .as_bool()
            .unwrap()
    );
    assert!(!b.has("#report-pane img").await);
    b.screenshot("#report-pane", "studio-evals.png").await;

    // The run's link opens its timeline in the sessions view.
    let session = report.cases[1].record.sessions[0].clone();
    b.click(&format!(
        "tr.case-detail[data-case=\"japan\"] a[data-session=\"{session}\"]"
    ))
    .await;
    b.wait_for(
        "the session's timeline",
        &format!(
            "!document.querySelector('#sessions-view').hidden && \
             document.querySelector('#session-id').textContent.includes('{session}') && \
             document.querySelectorAll('#timeline li').length > 0"
        ),
    )
    .await;
    assert!(
        b.eval("document.querySelector('#evals-view').hidden")
            .await
            .as_bool()
            .unwrap()
    );
    assert_eq!(b.errors().await, "");
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_a_report_links_a_run_past_the_list_s_first_page_and_marks_one_not_in_the_store()
 {
    let (studio, _dir, report, elsewhere) = crate::evals::served_past_the_first_page().await;
    let run = report.cases[1].record.sessions[0].clone();
    let mut b = Browser::open(&format!("{}#evals", studio.url())).await;
    // The list's first page is loaded, without the case's run.
    b.wait_for(
        "the list's first page",
        "document.querySelectorAll('#sessions tbody tr').length === 100",
    )
    .await;
    assert!(!b.has(&format!("#sessions tr[data-id=\"{run}\"]")).await);
    b.wait_for(
        "the report's cases",
        "document.querySelectorAll('#report-cases tr.case').length === 3",
    )
    .await;
    b.click("#report-cases tr.case[data-case=\"japan\"]").await;
    let link = |id: &str| format!("tr.case-detail[data-case=\"japan\"] a[data-session=\"{id}\"]");
    let says = |id: &str, what: &str| {
        format!(
            "(document.querySelector('{}') || {{}}).textContent === '{}{what}'",
            link(id),
            &id[..8]
        )
    };
    b.wait_for("the run linked", &says(&run, " (timeline)"))
        .await;
    b.wait_for(
        "the session of another store marked",
        &says(&elsewhere, " (not in this store)"),
    )
    .await;
    // Still not loaded in the list: the server was asked.
    assert!(!b.has(&format!("#sessions tr[data-id=\"{run}\"]")).await);

    // The link opens the run's timeline.
    b.click(&link(&run)).await;
    b.wait_for(
        "the run's timeline",
        &format!(
            "!document.querySelector('#sessions-view').hidden && \
             document.querySelector('#session-id').textContent === '{run}' && \
             document.querySelectorAll('#timeline li').length > 0"
        ),
    )
    .await;
    assert_eq!(b.errors().await, "");
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_the_token_leaves_the_address_bar_and_the_page_still_works() {
    let w = World::new("browser-token").await;
    let studio = w.studio().await;
    let token = studio.token().to_owned();
    assert!(studio.url().contains(&token));
    // Opened on a session's link: the token, then the session.
    let mut b = Browser::open(&format!("{}#session={}", studio.url(), w.done)).await;
    b.wait_for(
        "the session's timeline",
        "document.querySelectorAll('#timeline .checkpoint').length === 4",
    )
    .await;
    b.wait_for(
        "the page live",
        "document.querySelector('#live').classList.contains('on')",
    )
    .await;

    // Out of the address bar (and so of the history and of any link
    // copied), kept for this tab.
    let href = b.eval("location.href").await;
    let href = href.as_str().unwrap();
    assert!(!href.contains(&token) && !href.contains("token"), "{href}");
    assert!(href.ends_with(&format!("/#session={}", w.done)), "{href}");
    assert_eq!(
        b.eval("Object.keys(sessionStorage).map(k => sessionStorage.getItem(k)).join()")
            .await,
        json!(token)
    );
    let carrying = b
        .eval(&format!(
            "[...document.querySelectorAll('[href], [src]')].filter(e => (e.href || e.src).includes({})).length",
            json!(token)
        ))
        .await;
    assert_eq!(carrying, 0, "no link or file of the page names the token");

    // Another session, then a reload: the token comes from the tab's
    // storage, the session from the address.
    b.click(&format!("#sessions tr[data-id=\"{}\"]", w.waiting))
        .await;
    b.wait_for(
        "the waiting session",
        &format!(
            "location.hash === '#session={}' && !document.querySelector('#waiting-panel').hidden",
            w.waiting
        ),
    )
    .await;
    b.eval("window.before_reload = true").await;
    b.call("Page.reload", json!({})).await;
    b.wait_for(
        "the page again, live, with the waiting session",
        &format!(
            "window.before_reload === undefined && document.querySelector('#session-id') && \
             document.querySelector('#session-id').textContent === '{}' && \
             document.querySelectorAll('#timeline .checkpoint').length === 2 && \
             document.querySelector('#live').classList.contains('on')",
            w.waiting
        ),
    )
    .await;
    let href = b.eval("location.href").await;
    assert!(!href.as_str().unwrap().contains("token"), "{href}");
    assert_eq!(b.errors().await, "", "no error on the page");
    b.close().await;
    studio.shutdown().await.unwrap();
}
