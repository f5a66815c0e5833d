//! A small typed agent on a temporary sled store, and a plain HTTP/1.1
//! client.

use harness::session::{SessionPhase, SessionStore};
use harness::{
    Agent, Cx, Harness, HarnessState, JsonSchema, StepError, StepResult, SubAgent, create_agent,
};
use harness_stores::SledStore;
use harness_studio::{Serving, Studio};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A document going through review.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
pub struct Doc {
    #[field(reduce = append)]
    pub log: Vec<String>,
    #[field(reduce = add)]
    pub drafts: u32,
    pub approved: Option<bool>,
}

/// What the reviewer answers.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct Review {
    pub approve: bool,
    pub note: String,
}

async fn draft(_: Arc<Doc>, _: Cx<()>) -> StepResult<DocUpdate> {
    Ok(DocUpdate::new().drafts(1).log(vec!["drafted".into()]))
}

async fn review(doc: Arc<Doc>, cx: Cx<()>) -> StepResult<DocUpdate> {
    let r: Review = cx.interrupt(json!({
        "question": "publish this draft?",
        "draft": doc.drafts,
    }))?;
    Ok(DocUpdate::new()
        .approved(Some(r.approve))
        .log(vec![format!("review: {}", r.note)]))
}

async fn publish(_: Arc<Doc>, _: Cx<()>) -> StepResult<DocUpdate> {
    Ok(DocUpdate::new().log(vec!["published".into()]))
}

async fn crash(_: Arc<Doc>, _: Cx<()>) -> StepResult<DocUpdate> {
    Err(StepError::msg("the printer is on fire"))
}

/// `draft`, then `review` (which asks a human for a [`Review`]), then
/// `publish` when approved, else `draft` again; on `store`.
pub fn review_harness(store: Arc<dyn SessionStore>) -> Harness<Doc> {
    Harness::<Doc>::builder()
        .step("draft")
        .run(draft)
        .next("review")
        .step("review")
        .run(review)
        .route(|d: &Doc| {
            if d.approved == Some(true) {
                "approved"
            } else {
                "rejected"
            }
        })
        .on("approved")
        .to("publish")
        .on("rejected")
        .to("draft")
        .step("publish")
        .run(publish)
        .end()
        .start("draft")
        .store(store)
        .build()
        .unwrap()
}

/// A directory removed (best effort) when dropped.
pub struct TempDir(pub PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `n` as the page writes it (`toLocaleString` in Chromium's default
/// locale): thousands separated by commas (`1,234`).
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A fresh directory under the system's temporary directory.
pub fn temp_dir(name: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "harness-studio-{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The review agent and its store, with sessions in each phase.
pub struct World {
    pub store: Arc<dyn SessionStore>,
    pub harness: Harness<Doc>,
    pub agent: Agent<Doc>,
    /// Waits on `review`.
    pub waiting: String,
    pub interrupt: String,
    /// Approved and published.
    pub done: String,
    /// Of agent `broken`, failed.
    pub failed: String,
    _dir: TempDir,
}

impl World {
    pub async fn new(name: &str) -> World {
        let dir = temp_dir(name);
        let store: Arc<dyn SessionStore> = Arc::new(SledStore::open(dir.join("db")).unwrap());
        let harness = review_harness(Arc::clone(&store));
        let agent = create_agent("reviews", &harness);

        let waiting = agent.run(Doc::default()).await.unwrap();
        let interrupt = waiting.interrupt.clone().unwrap().id;
        let done = agent.run(Doc::default()).await.unwrap();
        let done_iid = done.interrupt.clone().unwrap().id;
        let finished = agent
            .resume(
                json!({"approve": true, "note": "fine"}),
                &done.session_id,
                &done_iid,
            )
            .await
            .unwrap()
            .await
            .unwrap();
        assert_eq!(
            finished.state.log.last().map(String::as_str),
            Some("published")
        );

        let broken = Harness::<Doc>::builder()
            .step("crash")
            .run(crash)
            .end()
            .start("crash")
            .store(Arc::clone(&store))
            .build()
            .unwrap();
        let failed = create_agent("broken", &broken).run(Doc::default()).await;
        assert!(failed.is_err());
        let failed_id = store
            .sessions()
            .await
            .unwrap()
            .into_iter()
            .find(|id| *id != waiting.session_id && *id != done.session_id)
            .unwrap();
        let head = store.load(&failed_id).await.unwrap().unwrap();
        assert!(
            matches!(head.phase, SessionPhase::Failed { .. }),
            "{head:?}"
        );

        World {
            store,
            harness,
            agent,
            waiting: waiting.session_id.to_string(),
            interrupt: interrupt.to_string(),
            done: done.session_id.to_string(),
            failed: failed_id.to_string(),
            _dir: TempDir(dir),
        }
    }

    /// The agent's studio, declaring the `review` answer, on loopback.
    pub async fn studio(&self) -> Serving {
        Studio::for_agent(&self.agent, &self.harness, Arc::clone(&self.store))
            .unwrap()
            .expect_answer::<Review>("review")
            .poll_interval(Duration::from_millis(100))
            .bind("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap()
    }

    /// A read-only studio on the same store.
    pub async fn read_only(&self) -> Serving {
        Studio::read_only(Arc::clone(&self.store))
            .poll_interval(Duration::from_millis(100))
            .bind("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap()
    }
}

/// A response: status, headers (lower-case names) and body.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The error message of an error response.
    pub fn error(&self) -> String {
        self.json()["error"].as_str().unwrap_or_default().to_owned()
    }
}

/// Decodes a chunked body; `None` while incomplete.
pub fn dechunk(mut raw: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = raw.windows(2).position(|w| w == b"\r\n")?;
        let size = std::str::from_utf8(&raw[..line_end]).ok()?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        raw = &raw[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        if raw.len() < size + 2 {
            return None;
        }
        out.extend_from_slice(&raw[..size]);
        raw = &raw[size + 2..];
    }
}

fn split_head(raw: &[u8]) -> (u16, Vec<(String, String)>, usize) {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a complete head");
    let head = std::str::from_utf8(&raw[..end]).unwrap();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_lowercase(), v.trim().to_owned()))
        .collect();
    (status, headers, end + 4)
}

/// One request on a new connection (`Connection: close`).
pub async fn request(
    serving: &Serving,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Response {
    request_to(serving.local_addr(), method, path, headers, body).await
}

/// One request to `addr` on a new connection (`Connection: close`), with
/// `Host: addr` unless `headers` name one.
pub async fn request_to(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Response {
    let mut conn = TcpStream::connect(addr).await.unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: {addr}\r\n"));
    }
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    let body = body.unwrap_or("");
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    conn.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    conn.read_to_end(&mut raw).await.unwrap();
    let (status, headers, at) = split_head(&raw);
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked {
        dechunk(&raw[at..]).expect("a complete chunked body")
    } else {
        raw[at..].to_vec()
    };
    Response {
        status,
        headers,
        body: String::from_utf8(body).unwrap(),
    }
}

/// A GET with the studio's token in the header.
pub async fn get(serving: &Serving, path: &str) -> Response {
    request(
        serving,
        "GET",
        path,
        &[("x-studio-token", serving.token())],
        None,
    )
    .await
}

/// A POST of JSON with the studio's token in the header.
pub async fn post(serving: &Serving, path: &str, body: &str) -> Response {
    request(
        serving,
        "POST",
        path,
        &[
            ("x-studio-token", serving.token()),
            ("content-type", "application/json"),
        ],
        Some(body),
    )
    .await
}

/// Polls `check` until it returns `Some`; the timeout is a safety net.
pub async fn eventually<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    mut check: impl FnMut() -> F,
) -> T {
    for _ in 0..600 {
        if let Some(v) = check().await {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

/// A trip planned in parallel: two branches, a fan-out over the trip's
/// items and a sub-agent that asks a human.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
pub struct Trip {
    #[field(reduce = append)]
    pub log: Vec<String>,
    #[field(reduce = add)]
    pub total: u64,
    pub items: Vec<u64>,
    pub verdict: Option<String>,
}

/// The sub-agent's own state.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
pub struct Check {
    pub question: String,
    #[field(reduce = append)]
    pub notes: Vec<String>,
    pub ok: Option<bool>,
}

/// What the human answers inside the sub-agent.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct Verdict {
    pub ok: bool,
}

/// The sub-agent: `note`, then `ask` (an interrupt), then the end.
pub fn checker() -> Harness<Check> {
    Harness::<Check>::builder()
        .step("note")
        .run(async |c: Arc<Check>| {
            Ok(CheckUpdate::new().notes(vec![format!("checked {}", c.question)]))
        })
        .next("ask")
        .step("ask")
        .run(async |c: Arc<Check>, cx: Cx<()>| {
            let v: Verdict =
                cx.interrupt(json!({ "question": "is the total right?", "notes": c.notes }))?;
            Ok(CheckUpdate::new().ok(Some(v.ok)))
        })
        .end()
        .start("note")
        .build()
        .unwrap()
}

/// `plan` forks `left` and `right`, joined at `merge`, which fans out
/// `square` over the items, joined at `sum`; then the sub-agent `review`
/// (which asks), then `publish`.
pub fn trip_harness(store: Arc<dyn SessionStore>) -> Harness<Trip> {
    Harness::<Trip>::builder()
        .step("plan")
        .run(async |_: Arc<Trip>| Ok(TripUpdate::new().log(vec!["plan".into()])))
        .fork(["left", "right"])
        .join("merge")
        .step("left")
        .run(async |_: Arc<Trip>| Ok(TripUpdate::new().log(vec!["left".into()])))
        .writes(["log"])
        .next("merge")
        .step("right")
        .run(async |_: Arc<Trip>| Ok(TripUpdate::new().log(vec!["right".into()]).total(1)))
        .writes(["log", "total"])
        .next("merge")
        .step("merge")
        .run(async |_: Arc<Trip>| Ok(TripUpdate::new().log(vec!["merged".into()])))
        .fan_out("square", |t: &Trip| t.items.clone())
        .join("sum")
        .step("square")
        .run_each(async |item: u64, _: Arc<Trip>, _: Cx<()>| {
            Ok(TripUpdate::new()
                .total(item * item)
                .log(vec![format!("{item}²")]))
        })
        .writes(["total", "log"])
        .next("sum")
        .step("sum")
        .run(async |t: Arc<Trip>| Ok(TripUpdate::new().log(vec![format!("sum {}", t.total)])))
        .next("review")
        .step("review")
        .sub_agent(SubAgent::new(
            &checker(),
            |t: &Trip| Check {
                question: format!("total {}", t.total),
                notes: vec![],
                ok: None,
            },
            |_: &Trip, done| {
                TripUpdate::new()
                    .verdict(Some(format!("{:?} ({})", done.state.ok, done.signal)))
                    .log(done.state.notes)
            },
        ))
        .next("publish")
        .step("publish")
        .run(async |_: Arc<Trip>| Ok(TripUpdate::new().log(vec!["published".into()])))
        .end()
        .start("plan")
        .store(store)
        .build()
        .unwrap()
}

/// The trip agent on a fresh store, with one session waiting inside its
/// sub-agent.
pub struct TripWorld {
    pub store: Arc<dyn SessionStore>,
    pub harness: Harness<Trip>,
    pub agent: Agent<Trip>,
    pub waiting: String,
    pub interrupt: String,
    _dir: TempDir,
}

impl TripWorld {
    pub async fn new(name: &str) -> TripWorld {
        let dir = temp_dir(name);
        let store: Arc<dyn SessionStore> = Arc::new(SledStore::open(dir.join("db")).unwrap());
        let harness = trip_harness(Arc::clone(&store));
        let agent = create_agent("trips", &harness);
        let out = agent
            .run(Trip {
                log: vec![],
                total: 0,
                items: vec![1, 2, 3],
                verdict: None,
            })
            .await
            .unwrap();
        let interrupt = out.interrupt.clone().unwrap();
        assert_eq!(interrupt.path.as_str(), "review");
        TripWorld {
            store,
            harness,
            agent,
            waiting: out.session_id.to_string(),
            interrupt: interrupt.id.to_string(),
            _dir: TempDir(dir),
        }
    }

    /// The agent's studio, declaring the sub-agent's answer.
    pub async fn studio(&self) -> Serving {
        Studio::for_agent(&self.agent, &self.harness, Arc::clone(&self.store))
            .unwrap()
            .expect_answer::<Verdict>("review/ask")
            .poll_interval(Duration::from_millis(100))
            .bind("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap()
    }

    /// A read-only studio on the same store.
    pub async fn read_only(&self) -> Serving {
        Studio::read_only(Arc::clone(&self.store))
            .poll_interval(Duration::from_millis(100))
            .bind("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap()
    }
}
