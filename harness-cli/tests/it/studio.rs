//! `harness studio --store …`: the real binary serving the read-only
//! studio on a sled database and a file store holding a session that waits
//! for a human, checked over plain HTTP.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use harness::session::SessionStore;
use harness::{Cx, Harness, HarnessState, StepResult, create_agent};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Order {
    #[field(reduce = append)]
    notes: Vec<String>,
}

async fn pack(_: Arc<Order>, _: Cx<()>) -> StepResult<OrderUpdate> {
    Ok(OrderUpdate::new().notes(vec!["packed".into()]))
}

async fn confirm(_: Arc<Order>, cx: Cx<()>) -> StepResult<OrderUpdate> {
    let ship: bool = cx.interrupt(json!({"question": "ship it?"}))?;
    Ok(OrderUpdate::new().notes(vec![format!("ship: {ship}")]))
}

/// Runs an agent on `store` until it asks; returns the session.
fn waiting_session(store: impl SessionStore + 'static) -> String {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let harness = Harness::<Order>::builder()
            .step("pack")
            .run(pack)
            .next("confirm")
            .step("confirm")
            .run(confirm)
            .end()
            .start("pack")
            .store(store)
            .build()
            .unwrap();
        let paused = create_agent("orders", &harness)
            .run(Order { notes: vec![] })
            .await
            .unwrap();
        paused.session_id.to_string()
    })
}

fn workdir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `harness studio --store STORE`, running; kills it when dropped.
struct Studio {
    child: Child,
    /// `127.0.0.1:PORT`.
    addr: String,
    token: String,
}

impl Drop for Studio {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Studio {
    fn start(store: &Path) -> Studio {
        Self::start_with(store, &[])
    }

    fn start_with(store: &Path, extra: &[&str]) -> Studio {
        // sled's own threads may still hold the database's lock for a
        // moment after the store that wrote it is dropped: retry then.
        for _ in 0..100 {
            let mut child = Command::new(env!("CARGO_BIN_EXE_harness"))
                .args(["studio", "--store"])
                .arg(store)
                .args(extra)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
            let mut printed = String::new();
            for line in lines.by_ref() {
                let line = line.unwrap();
                printed.push_str(&line);
                printed.push('\n');
                if let Some(url) = line.strip_prefix("open http://") {
                    let (addr, token) = url.split_once("/?token=").unwrap();
                    assert!(addr.starts_with("127.0.0.1:"), "loopback: {addr}");
                    assert!(printed.contains("read-only"), "{printed}");
                    // Keep reading: the binary ends quietly when its
                    // stdout's reader has gone.
                    std::thread::spawn(move || lines.for_each(drop));
                    return Studio {
                        addr: addr.to_owned(),
                        token: token.to_owned(),
                        child,
                    };
                }
            }
            let mut stderr = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut stderr)
                .unwrap();
            let status = child.wait().unwrap();
            assert!(
                stderr.contains("lock"),
                "harness studio exited ({status}) before serving: {printed}{stderr}"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("the sled database stayed locked");
    }

    /// One request; returns the status and the JSON body.
    fn call(&self, method: &str, path: &str, token: Option<&str>, body: &str) -> (u16, Value) {
        let mut conn = TcpStream::connect(&self.addr).unwrap();
        let token = token.map_or(String::new(), |t| format!("x-studio-token: {t}\r\n"));
        write!(
            conn,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n{token}Content-Type: \
             application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.addr,
            body.len()
        )
        .unwrap();
        let mut raw = String::new();
        conn.read_to_string(&mut raw).unwrap();
        let (head, body) = raw.split_once("\r\n\r\n").unwrap();
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        (status, serde_json::from_str(body).unwrap_or(Value::Null))
    }

    fn get(&self, path: &str) -> Value {
        let (status, body) = self.call("GET", path, Some(&self.token.clone()), "");
        assert_eq!(status, 200, "{path}: {body}");
        body
    }
}

fn serves_read_only(store: &Path, session: &str) {
    let studio = Studio::start(store);
    let list = studio.get("/api/sessions");
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list[0]["id"], session);
    assert_eq!(list[0]["phase"], "waiting");
    assert_eq!(list[0]["agent"], "orders");
    let detail = studio.get(&format!("/api/sessions/{session}"));
    assert_eq!(detail["interrupt"]["payload"]["question"], "ship it?");
    assert_eq!(detail["current"], "confirm");
    assert_eq!(detail["writable"], false);
    assert_eq!(detail["graph"]["source"], "observed");
    let timeline = studio.get(&format!("/api/sessions/{session}/timeline"));
    assert_eq!(timeline["merged"], false);
    assert_eq!(
        timeline["entries"][1]["value"],
        json!({"notes": ["packed"]})
    );
    // No token, no data; and no write action at all, token or not.
    let (status, _) = studio.call("GET", "/api/sessions", None, "");
    assert_eq!(status, 401);
    let interrupt = detail["interrupt"]["id"].as_str().unwrap();
    let answer = json!({"interrupt": interrupt, "answer": true}).to_string();
    let (status, body) = studio.call(
        "POST",
        &format!("/api/sessions/{session}/answer"),
        Some(&studio.token.clone()),
        &answer,
    );
    assert_eq!(status, 403, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("read-only"),
        "{body}"
    );
    let (status, _) = studio.call(
        "POST",
        &format!("/api/sessions/{session}/fork"),
        Some(&studio.token.clone()),
        r#"{"index": 0}"#,
    );
    assert_eq!(status, 403);
    let (status, _) = studio.call("GET", "/", None, "");
    assert_eq!(status, 200);
}

#[test]
fn studio_serves_a_sled_database_read_only() {
    let dir = workdir("studio-sled");
    let store = dir.join("sessions");
    let session = waiting_session(harness_stores::SledStore::open(&store).unwrap());
    serves_read_only(&store, &session);
}

#[test]
fn studio_serves_a_file_store_read_only() {
    let dir = workdir("studio-files");
    let store = dir.join("sessions");
    let session = waiting_session(harness_stores::FileStore::open(&store).unwrap());
    serves_read_only(&store, &session);
}

#[test]
fn studio_refuses_what_is_not_a_store_and_a_missing_store() {
    let dir = workdir("studio-bad");
    let file = dir.join("notes.txt");
    std::fs::write(&file, "hello").unwrap();
    std::fs::create_dir_all(dir.join("other/stuff")).unwrap();
    for (store, says) in [
        (file.display().to_string(), "not a session store"),
        (
            dir.join("other").display().to_string(),
            "neither a sled database",
        ),
        (
            dir.join("absent").display().to_string(),
            "not a session store",
        ),
        ("postgres://ada:s3cret@db/x".to_owned(), "postgres"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_harness"))
            .args(["studio", "--store", &store])
            .output()
            .unwrap();
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(1), "{store}: {stderr}");
        assert!(stderr.contains(says), "{store}: {stderr}");
        assert!(!stderr.contains("s3cret"), "{stderr}");
        assert!(out.stdout.is_empty());
    }
    let out = Command::new(env!("CARGO_BIN_EXE_harness"))
        .arg("studio")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--store"));
}

/// A report of one case, as `harness-evals` writes it.
fn eval_report(session: &str) -> Value {
    json!({
        "version": harness_evals::REPORT_VERSION,
        "experiment": "orders-v2",
        "dataset": "orders",
        "evaluators": ["shipped"],
        "started_ms": 0,
        "elapsed_ms": 5.0,
        "cases": [{
            "name": "one-order",
            "input": "ship order 7",
            "output": "packed",
            "scores": {"shipped": {"score": {"value": 0.0, "passed": false, "reason": "not shipped yet"}}},
            "record": {"exchanges": [], "events": [], "sessions": [session],
                       "metrics": {"latency_ms": 5.0, "model_calls": 0,
                                   "usage": {"input_tokens": 0, "output_tokens": 0}, "attempts": 1}}
        }]
    })
}

#[test]
fn studio_shows_eval_reports_beside_the_store_and_refuses_unreadable_ones() {
    let dir = workdir("studio-evals");
    let store = dir.join("sessions");
    let session = waiting_session(harness_stores::FileStore::open(&store).unwrap());
    let report = dir.join("report.json");
    std::fs::write(&report, eval_report(&session).to_string()).unwrap();
    let studio = Studio::start_with(&store, &["--report", report.to_str().unwrap()]);
    assert_eq!(studio.get("/api/info")["evals"], true);
    let list = studio.get("/api/evals");
    assert_eq!(list[0]["experiment"], "orders-v2");
    let one = studio.get("/api/evals/0");
    assert_eq!(
        one["cases"][0]["scores"]["shipped"]["score"]["reason"],
        "not shipped yet"
    );
    // The case's run is in the store: its link leads to a session.
    assert_eq!(
        studio.get(&format!("/api/sessions/{session}"))["current"],
        "confirm"
    );
    drop(studio);

    let bad = dir.join("bad.json");
    for (file, text, says) in [
        ("missing.json", None, "missing.json"),
        ("bad.json", Some("{\"version\": 1}"), "not a report"),
        ("bad.json", Some("[1, 2]"), "not a report"),
        (
            "bad.json",
            Some("{\"version\": 7, \"experiment\": \"x\"}"),
            "bad.json",
        ),
    ] {
        if let Some(text) = text {
            std::fs::write(&bad, text).unwrap();
        }
        let out = Command::new(env!("CARGO_BIN_EXE_harness"))
            .args(["studio", "--store"])
            .arg(&store)
            .arg("--report")
            .arg(dir.join(file))
            .output()
            .unwrap();
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(1), "{file}: {stderr}");
        assert!(stderr.contains(says), "{file}: {stderr}");
    }
}
