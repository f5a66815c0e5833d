//! `harness studio --store …`: the real binary serving the read-only
//! studio on a sled database and a file store holding a session that waits
//! for a human, and long-term memory in sled, PostgreSQL and Redis searched
//! by meaning with the real local embedding model, checked over plain
//! HTTP; memory and embedder options that do not fit are refused.

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

/// `harness studio --store STORE`, running; stopped when dropped (SIGTERM,
/// then SIGKILL if it has not ended within 5 s).
pub(super) struct Studio {
    child: Child,
    /// `127.0.0.1:PORT`.
    addr: String,
    token: String,
    /// What it printed up to its URL's line (included).
    pub(super) printed: String,
}

impl Drop for Studio {
    fn drop(&mut self) {
        if self.signal("TERM") {
            for _ in 0..100 {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Studio {
    pub(super) fn start(store: &Path) -> Studio {
        Self::start_with(store, &[])
    }

    fn start_with(store: &Path, extra: &[&str]) -> Studio {
        Self::start_in(store, extra, None)
    }

    /// With `tmp` as its TMPDIR, when given.
    fn start_in(store: &Path, extra: &[&str], tmp: Option<&Path>) -> Studio {
        // sled's own threads may still hold the database's lock for a
        // moment after the store that wrote it is dropped: retry then.
        for _ in 0..100 {
            let mut command = Command::new(env!("CARGO_BIN_EXE_harness"));
            if let Some(tmp) = tmp {
                command.env("TMPDIR", tmp);
            }
            let mut child = command
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
                        printed,
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

    /// Sends it signal `name` (`TERM`, `INT`, `KILL`); whether it was sent.
    fn signal(&self, name: &str) -> bool {
        Command::new("kill")
            .args(["-s", name, &self.child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Waits up to 10 s for it to end; its exit status.
    fn ended(&mut self) -> std::process::ExitStatus {
        for _ in 0..200 {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("harness studio did not end within 10 s");
    }

    /// One request; returns the status and the JSON body.
    pub(super) fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: &str,
    ) -> (u16, Value) {
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

    /// A GET with the token, whatever its status.
    pub(super) fn get_any(&self, path: &str) -> (u16, Value) {
        self.call("GET", path, Some(&self.token.clone()), "")
    }

    fn get(&self, path: &str) -> Value {
        let (status, body) = self.get_any(path);
        assert_eq!(status, 200, "{path}: {body}");
        body
    }
}

/// `snapshot`: whether the store is read as it was when the studio
/// started (a sled database's copy), which the page must say.
fn serves_read_only(store: &Path, session: &str, snapshot: bool) {
    let before = harness::session::now_millis();
    let studio = Studio::start(store);
    let banner = format!("harness studio: {} (read-only)", store.display());
    assert!(studio.printed.contains(&banner), "{}", studio.printed);
    let info = studio.get("/api/info");
    if snapshot {
        let taken_at = info["snapshot"]["taken_at"]
            .as_u64()
            .unwrap_or_else(|| panic!("{info}"));
        assert!(
            taken_at >= before && taken_at <= harness::session::now_millis(),
            "{info}"
        );
    } else {
        assert_eq!(info["snapshot"], Value::Null, "{info}");
    }
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
    serves_read_only(&store, &session, true);
}

/// The private copies of sled databases under `tmp`.
fn copies(tmp: &Path) -> Vec<String> {
    std::fs::read_dir(tmp)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("harness-sled-read-"))
        .collect()
}

/// Stopped with Ctrl-C (SIGINT) or SIGTERM, `harness studio` exits 0 and
/// its private copy of the sled database is gone; the copy a killed studio
/// leaves (SIGKILL) is deleted by the next reader.
#[test]
fn a_stopped_studio_leaves_no_copy_of_the_store_behind() {
    let dir = workdir("studio-no-copy-left");
    let store = dir.join("sessions");
    let session = waiting_session(harness_stores::SledStore::open(&store).unwrap());
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    for signal in ["INT", "TERM"] {
        let mut studio = Studio::start_in(&store, &[], Some(&tmp));
        assert_eq!(studio.get("/api/sessions")[0]["id"], session);
        assert_eq!(copies(&tmp).len(), 1, "the copy it serves from");
        assert!(studio.signal(signal));
        let status = studio.ended();
        assert!(status.success(), "SIG{signal}: {status}");
        assert_eq!(copies(&tmp), Vec::<String>::new(), "after SIG{signal}");
    }
    let mut studio = Studio::start_in(&store, &[], Some(&tmp));
    assert!(studio.signal("KILL"));
    studio.ended();
    let left = copies(&tmp);
    assert_eq!(left.len(), 1, "a killed studio cannot delete its copy");
    // The next reader of a sled database deletes it, and only it.
    std::fs::create_dir(tmp.join("harness-sled-read-notes")).unwrap();
    let listed = Command::new(env!("CARGO_BIN_EXE_harness"))
        .env("TMPDIR", &tmp)
        .args(["sessions", "--store"])
        .arg(&store)
        .arg("list")
        .output()
        .unwrap();
    assert!(listed.status.success(), "{listed:?}");
    assert!(String::from_utf8_lossy(&listed.stdout).contains(&session));
    assert_eq!(
        copies(&tmp),
        ["harness-sled-read-notes"],
        "{left:?} was left"
    );
}

#[test]
fn studio_serves_a_file_store_read_only() {
    let dir = workdir("studio-files");
    let store = dir.join("sessions");
    let session = waiting_session(harness_stores::FileStore::open(&store).unwrap());
    serves_read_only(&store, &session, false);
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

/// A test server's URL from `var`; `None` (the test is skipped) only when
/// HARNESS_SKIP_SERVER_TESTS=1.
fn server_url(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var("HARNESS_SKIP_SERVER_TESTS").as_deref() == Ok("1") => None,
        _ => panic!(
            "{var} is not set: start the test servers with `eval \"$(scripts/services)\"` \
             (or set HARNESS_SKIP_SERVER_TESTS=1 to skip the server tests)"
        ),
    }
}

/// A schema or prefix no other run uses.
fn unique(tag: &str) -> String {
    let random = harness::SessionId::random().as_str().replace('-', "");
    format!("t_studio_{tag}_{}", &random[..16])
}

/// Facts about a user, and paraphrased questions each of which one fact
/// answers (sharing no content word with it).
const FACTS: [(&str, &str); 5] = [
    ("diet", "Ada is vegetarian and never eats meat"),
    ("pet", "Ada has a grey cat called Turing"),
    ("city", "Ada lives in Lisbon, near the river"),
    ("job", "Ada works as a compiler engineer"),
    ("sport", "Ada swims in the sea every morning"),
];
const QUESTIONS: [(&str, &str); 4] = [
    ("which food does she refuse", "diet"),
    ("does she own a kitten", "pet"),
    ("which town is she from", "city"),
    ("which exercise does she do", "sport"),
];

/// The local embedding model of scripts/services: (URL, model).
fn embedding_server() -> Option<(String, String)> {
    Some((
        server_url("HARNESS_EMBED_URL")?,
        server_url("HARNESS_EMBED_MODEL")?,
    ))
}

/// Writes [`FACTS`] into `backend`, embedded by the real model, on
/// `runtime` (the one the backend connected on: its connections' tasks
/// run there).
fn remember_facts(
    runtime: &tokio::runtime::Runtime,
    backend: Arc<dyn harness::memory::MemoryBackend>,
    url: &str,
    model: &str,
) {
    use harness::llm::Embedder;
    use harness::memory::{IndexConfig, Memory, Namespace};
    runtime.block_on(async {
        let client = harness_openai::Client::builder()
            .base_url(url)
            .build()
            .unwrap();
        let embedder = client.embedding_model(model);
        let dims = embedder.embed(&["probe".to_owned()]).await.unwrap().vectors[0].len();
        let memory = Memory::from_arc(backend)
            .with_index(IndexConfig::new(Arc::new(embedder), dims).fields(["text"]));
        let facts = Namespace::new(["users", "ada", "facts"]).unwrap();
        for (key, text) in FACTS {
            memory
                .put(&facts, key, json!({"text": text}))
                .await
                .unwrap();
        }
    });
}

/// The studio on `--memory <memory>` with the real embedding model finds,
/// for each paraphrased question, the fact that answers it first; lists
/// the items; and says which model searches.
fn searches_memory_by_meaning(memory: &str, extra: &[&str], url: &str, model: &str, tag: &str) {
    let dir = workdir(&format!("studio-memory-{tag}"));
    let store = dir.join("sessions");
    waiting_session(harness_stores::FileStore::open(&store).unwrap());
    let mut args = vec![
        "--memory",
        memory,
        "--embed-url",
        url,
        "--embed-model",
        model,
    ];
    args.extend_from_slice(extra);
    let studio = Studio::start_with(&store, &args);
    let listed = studio.get("/api/memory/items?namespace=users/ada");
    assert_eq!(
        listed["items"].as_array().unwrap().len(),
        FACTS.len(),
        "{listed}"
    );
    for (question, answer) in QUESTIONS {
        let q = question.replace(' ', "%20");
        let found = studio.get(&format!(
            "/api/memory/search?namespace=users/ada&q={q}&limit=3"
        ));
        let top = &found["items"][0];
        assert_eq!(top["key"], answer, "{question:?}: {found}");
        assert!(top["score"].as_f64().unwrap() > 0.0, "{found}");
    }
}

#[cfg(feature = "postgres")]
#[test]
fn studio_searches_a_postgres_memory_by_meaning() {
    use harness_stores::{PostgresMemory, PostgresMemoryOptions};
    let (Some(pg), Some((url, model))) =
        (server_url("HARNESS_TEST_POSTGRES_URL"), embedding_server())
    else {
        return;
    };
    let schema = unique("pg");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let backend = runtime
        .block_on(PostgresMemory::connect_with(
            &pg,
            PostgresMemoryOptions::default().schema(&schema),
        ))
        .unwrap();
    remember_facts(&runtime, Arc::new(backend.clone()), &url, &model);
    searches_memory_by_meaning(&pg, &["--memory-schema", &schema], &url, &model, "pg");
    runtime.block_on(async {
        let client = backend.pool().get().await.unwrap();
        client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
            .await
            .unwrap();
    });
}

#[cfg(feature = "redis")]
#[test]
fn studio_searches_a_redis_memory_by_meaning() {
    use harness_stores::RedisMemory;
    let (Some(redis), Some((url, model))) =
        (server_url("HARNESS_TEST_REDIS_URL"), embedding_server())
    else {
        return;
    };
    let prefix = unique("redis");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let backend = runtime
        .block_on(RedisMemory::connect(&redis, &prefix))
        .unwrap();
    remember_facts(&runtime, Arc::new(backend.clone()), &url, &model);
    searches_memory_by_meaning(&redis, &["--memory-prefix", &prefix], &url, &model, "redis");
    // Leave nothing behind.
    let memory = harness::memory::Memory::new(backend);
    let facts = harness::memory::Namespace::new(["users", "ada", "facts"]).unwrap();
    runtime.block_on(async {
        for (key, _) in FACTS {
            memory.delete(&facts, key).await.unwrap();
        }
    });
}

/// A sled memory, searched by meaning too.
#[test]
fn studio_searches_a_sled_memory_by_meaning() {
    let Some((url, model)) = embedding_server() else {
        return;
    };
    let dir = workdir("studio-memory-sled-db");
    let path = dir.join("memory");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    remember_facts(
        &runtime,
        Arc::new(harness_stores::SledMemory::open(&path).unwrap()),
        &url,
        &model,
    );
    until_sled_lets_go(&path);
    searches_memory_by_meaning(path.to_str().unwrap(), &[], &url, &model, "sled");
}

/// Waits (up to 60 s) for sled to let go of the lock of the database at
/// `path`, which it does a moment after the last handle is dropped.
fn until_sled_lets_go(path: &Path) {
    let db = std::fs::File::open(path.join("db")).unwrap();
    for _ in 0..3_000 {
        if db.try_lock().is_ok() {
            db.unlock().unwrap();
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!("sled still holds the lock of {} after 60 s", path.display());
}

/// `harness studio` with `args` fails; its stderr.
fn studio_fails(store: &Path, args: &[&str], env: &[(&str, &str)]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(["studio", "--store"])
        .arg(store)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        !out.status.success(),
        "{args:?} was accepted: {stdout}{stderr}"
    );
    assert!(!stdout.contains("open http"), "{args:?} served: {stdout}");
    stderr
}

/// Memory and embedder options that do not fit, an unset key variable, an
/// embedder or a memory server that cannot be used: each refused before
/// serving, naming the option (and never printing a key or a password).
#[test]
fn studio_refuses_bad_memory_and_embedder_options_naming_them() {
    let dir = workdir("studio-memory-bad");
    let store = dir.join("sessions");
    drop(harness_stores::FileStore::open(&store).unwrap());
    let sled = dir.join("memory");
    {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let memory = harness::memory::Memory::new(harness_stores::SledMemory::open(&sled).unwrap());
        let ns = harness::memory::Namespace::new(["n"]).unwrap();
        runtime
            .block_on(memory.put(&ns, "k", json!({"v": 1})))
            .unwrap();
    }
    until_sled_lets_go(&sled);
    let sled = sled.to_str().unwrap();
    let nowhere = "http://127.0.0.1:9/v1";
    let secret = "sk-studio-test-secret-4242";
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (
            vec!["--embed-url", nowhere, "--embed-model", "m"],
            vec!["--embed-url", "--memory"],
        ),
        (
            vec!["--embed-model", "m"],
            vec!["--embed-model", "--memory"],
        ),
        (
            vec!["--memory", sled, "--embed-url", nowhere],
            vec!["--embed-url", "needs --embed-model"],
        ),
        (
            vec!["--memory", sled, "--embed-model", "m"],
            vec!["--embed-model", "needs --embed-url"],
        ),
        (
            vec!["--memory", sled, "--embed-key-env", "K"],
            vec!["--embed-key-env", "needs --embed-url"],
        ),
        (
            vec!["--memory", sled, "--memory-schema", "s"],
            vec!["--memory-schema", "PostgreSQL"],
        ),
        (
            vec![
                "--memory",
                "postgres://u@127.0.0.1:1/x",
                "--memory-prefix",
                "p",
            ],
            vec!["--memory-prefix", "Redis"],
        ),
        (
            vec![
                "--memory",
                sled,
                "--embed-url",
                nowhere,
                "--embed-model",
                "m",
                "--embed-key-env",
                "HARNESS_STUDIO_TEST_UNSET",
            ],
            vec!["--embed-key-env", "HARNESS_STUDIO_TEST_UNSET", "not set"],
        ),
        (
            vec![
                "--memory",
                sled,
                "--embed-url",
                nowhere,
                "--embed-model",
                "m",
                "--embed-key-env",
                "HARNESS_STUDIO_TEST_KEY",
            ],
            vec!["--embed-url http://127.0.0.1:9/v1", "(model m)"],
        ),
        (
            vec!["--memory", "postgres://ada:s3cret@127.0.0.1:1/x"],
            vec!["--memory postgres://ada@127.0.0.1:1/x"],
        ),
    ];
    for (args, says) in cases {
        let stderr = studio_fails(&store, &args, &[("HARNESS_STUDIO_TEST_KEY", secret)]);
        for s in says {
            assert!(stderr.contains(s), "{args:?}: {s:?} not in {stderr}");
        }
        assert!(
            !stderr.contains(secret) && !stderr.contains("s3cret"),
            "{stderr}"
        );
    }
    // The memory is named once, whether the build can open it or not.
    for memory in ["postgres://ada:s3cret@127.0.0.1:1/x", "redis://127.0.0.1:1"] {
        let stderr = studio_fails(&store, &["--memory", memory], &[]);
        assert_eq!(stderr.matches("--memory ").count(), 1, "{stderr}");
    }
    if let Some(pg) = server_url("HARNESS_TEST_POSTGRES_URL").filter(|_| cfg!(feature = "postgres"))
    {
        // A database without the memory's table: refused, nothing created.
        let schema = unique("missing");
        let stderr = studio_fails(&store, &["--memory", &pg, "--memory-schema", &schema], &[]);
        assert!(stderr.contains("--memory postgres://"), "{stderr}");
        assert!(stderr.contains("no table"), "{stderr}");
    }
}
