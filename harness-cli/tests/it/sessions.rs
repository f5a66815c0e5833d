//! `harness sessions`: the real binary on real stores (a sled database, a
//! file store; PostgreSQL and Redis when built with those features) holding
//! sessions of a real agent, one completed and one paused on an interrupt.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use crate::support::workdir;
use harness::session::SessionStore;
use harness::{Cx, Harness, HarnessState, Signal, StepResult, create_agent};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Ticket {
    #[field(reduce = append)]
    notes: Vec<String>,
    #[field(reduce = add)]
    turns: u32,
}

async fn triage(_: Arc<Ticket>, _: Cx<()>) -> StepResult<TicketUpdate> {
    Ok(TicketUpdate::new().notes(vec!["triaged".into()]).turns(1))
}

async fn ask(_: Arc<Ticket>, cx: Cx<()>) -> StepResult<TicketUpdate> {
    let close: bool = cx.interrupt(json!({"question": "close the ticket?"}))?;
    Ok(TicketUpdate::new()
        .notes(vec![format!("close: {close}")])
        .turns(1))
}

fn opened() -> Ticket {
    Ticket {
        notes: vec!["opened".into()],
        turns: 0,
    }
}

/// The two sessions a real agent leaves in a store.
struct Sessions {
    paused: String,
    interrupt: String,
    completed: String,
}

pub(super) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Runs the agent on `store` twice, on `runtime` (the one the store was
/// opened on, which drives its connections): once until it asks, once to
/// the end.
fn create_sessions(
    runtime: &tokio::runtime::Runtime,
    store: impl SessionStore + 'static,
) -> Sessions {
    runtime.block_on(async {
        let harness = Harness::<Ticket>::builder()
            .step("triage")
            .run(triage)
            .next("ask")
            .step("ask")
            .run(ask)
            .route(|_: &Ticket| "done")
            .on("done")
            .end()
            .start("triage")
            .store(store)
            .build()
            .unwrap();
        let agent = create_agent("tickets", &harness);
        let paused = agent.run(opened()).await.unwrap();
        assert_eq!(paused.signal, Signal::INTERRUPT);
        let mut run = agent.run(opened());
        let asked = (&mut run).await.unwrap();
        run.resume(true, &asked.interrupt.unwrap().id).unwrap();
        let completed = (&mut run).await.unwrap();
        assert_eq!(completed.signal.as_str(), "done");
        Sessions {
            paused: paused.session_id.to_string(),
            interrupt: paused.interrupt.unwrap().id.to_string(),
            completed: completed.session_id.to_string(),
        }
    })
}

fn harness(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(args)
        .output()
        .unwrap()
}

/// Runs `harness sessions ARGS… --store STORE`, which must succeed.
pub(super) fn sessions(store: &str, args: &[&str]) -> String {
    let mut all = vec!["sessions"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--store", store]);
    let out = harness(&all);
    assert!(
        out.status.success(),
        "harness {all:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs `harness ARGS…`, which must fail with `code`; returns its stderr.
pub(super) fn fails(args: &[&str], code: i32) -> String {
    let out = harness(args);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(code), "harness {args:?}: {stderr}");
    assert!(out.stdout.is_empty(), "nothing on stdout: {args:?}");
    stderr
}

/// Runs `harness ARGS…`, which must fail with `code`; returns its stderr.
/// What it printed on stdout before (what could be read) is not checked.
fn fails_after_showing(args: &[&str], code: i32) -> String {
    let out = harness(args);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(code), "harness {args:?}: {stderr}");
    stderr
}

/// The value of `name:` in `show`'s head lines.
pub(super) fn field<'a>(show: &'a str, name: &str) -> &'a str {
    show.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no {name} in {show}"))
        .trim()
}

/// The snapshot `show` prints (pretty JSON) and its header line.
fn snapshot(show: &str) -> (String, Value) {
    let mut lines = show
        .lines()
        .skip_while(|l| !l.starts_with("snapshot after"));
    let header = lines
        .next()
        .unwrap_or_else(|| panic!("no snapshot: {show}"));
    let json: Vec<&str> = lines
        .take_while(|l| !l.starts_with("updates after the snapshot"))
        .collect();
    (
        header.to_owned(),
        serde_json::from_str(&json.join("\n")).unwrap(),
    )
}

/// The updates `show` prints: (index, step, JSON) each.
fn updates(show: &str) -> Vec<(u64, String, Value)> {
    show.lines()
        .filter_map(|l| l.strip_prefix("update of step "))
        .map(|l| {
            let (index, rest) = l.split_once(" (`").unwrap();
            let (step, rest) = rest.split_once("`, checkpoint ").unwrap();
            let (_, json) = rest.split_once("): ").unwrap();
            (
                index.parse().unwrap(),
                step.to_owned(),
                serde_json::from_str(json).unwrap(),
            )
        })
        .collect()
}

fn update(update: TicketUpdate) -> Value {
    serde_json::to_value(update).unwrap()
}

/// `list`, `show` and `history` on a store holding [`create_sessions`]'s.
fn check_store(store: &str, s: &Sessions) {
    let list = sessions(store, &["list"]);
    let line = |id: &str| {
        list.lines()
            .find(|l| l.starts_with(id))
            .unwrap_or_else(|| panic!("{id} not listed: {list}"))
            .to_owned()
    };
    assert_eq!(list.lines().count(), 2, "{list}");
    let paused = line(&s.paused);
    assert!(paused.contains("agent tickets"), "{paused}");
    assert!(paused.contains("1 steps"), "{paused}");
    assert!(paused.contains("interrupted at `ask`"), "{paused}");
    assert!(paused.contains(&s.interrupt), "{paused}");
    let completed = line(&s.completed);
    assert!(completed.contains("2 steps"), "{completed}");
    assert!(completed.contains("completed with `done`"), "{completed}");

    let show = sessions(store, &["show", &s.paused]);
    assert_eq!(field(&show, "session"), s.paused);
    assert_eq!(field(&show, "agent"), "tickets");
    assert_eq!(
        field(&show, "phase"),
        format!("interrupted at `ask` ({})", s.interrupt)
    );
    let asks: Value = serde_json::from_str(field(&show, "asks")).unwrap();
    assert_eq!(asks, json!({"question": "close the ticket?"}));
    assert_eq!(field(&show, "next step"), "ask");
    assert_eq!(field(&show, "steps"), "1");
    assert!(show.contains("as stored, not merged"), "{show}");
    let (header, state) = snapshot(&show);
    assert_eq!(header, "snapshot after step 0 (`$start`, checkpoint 0):");
    assert_eq!(state, serde_json::to_value(opened()).unwrap());
    assert_eq!(
        updates(&show),
        [(
            1,
            "triage".to_owned(),
            update(TicketUpdate::new().notes(vec!["triaged".into()]).turns(1))
        )]
    );
    assert!(show.contains("updates after the snapshot: 1"), "{show}");

    let show = sessions(store, &["show", &s.completed]);
    assert_eq!(field(&show, "phase"), "completed with `done`");
    assert_eq!(field(&show, "next step"), "(none)");
    assert!(!show.contains("asks:"), "{show}");
    assert_eq!(snapshot(&show).1, serde_json::to_value(opened()).unwrap());
    assert_eq!(
        updates(&show),
        [
            (
                1,
                "triage".to_owned(),
                update(TicketUpdate::new().notes(vec!["triaged".into()]).turns(1))
            ),
            (
                2,
                "ask".to_owned(),
                update(
                    TicketUpdate::new()
                        .notes(vec!["close: true".into()])
                        .turns(1)
                )
            ),
        ]
    );

    let history = sessions(store, &["history", &s.completed]);
    let steps: Vec<(&str, &str)> = history
        .lines()
        .skip(2)
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            (cols[0], cols[2])
        })
        .collect();
    assert_eq!(steps, [("0", "$start"), ("1", "triage"), ("2", "ask")]);
}

/// Every file under `dir`, with its bytes.
fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else {
                out.insert(path.clone(), std::fs::read(&path).unwrap());
            }
        }
    }
    out
}

fn file_store(dir: &Path) -> Sessions {
    create_sessions(&runtime(), harness_stores::FileStore::open(dir).unwrap())
}

/// A sled database without a flusher thread, so that dropping the store
/// releases the database's lock at once for the binary to take.
fn sled_store(dir: &Path) -> Sessions {
    let config = harness_stores::sled::Config::new()
        .path(dir)
        .segment_size(128 * 1024)
        .flush_every_ms(None);
    let store = harness_stores::SledStore::with_config(&config).unwrap();
    create_sessions(&runtime(), store)
}

#[test]
fn lists_shows_and_histories_the_sessions_of_a_sled_database() {
    let dir = workdir("sessions-sled").join("db");
    let s = sled_store(&dir);
    check_store(dir.to_str().unwrap(), &s);
}

#[test]
fn lists_shows_and_histories_the_sessions_of_a_log_store_without_writing() {
    let dir = workdir("sessions-log").join("store");
    let s = create_sessions(&runtime(), harness_stores::LogStore::open(&dir).unwrap());
    let before = tree(&dir);
    check_store(dir.to_str().unwrap(), &s);
    assert_eq!(tree(&dir), before, "the inspector changed the store");
}

#[test]
fn lists_shows_and_histories_the_sessions_of_a_file_store_without_writing() {
    let dir = workdir("sessions-files").join("store");
    let s = file_store(&dir);
    let before = tree(&dir);
    check_store(dir.to_str().unwrap(), &s);
    assert_eq!(tree(&dir), before, "the inspector changed the store");
}

#[test]
fn an_empty_file_store_has_no_sessions() {
    let dir = workdir("sessions-empty");
    harness_stores::FileStore::open(&dir).unwrap();
    assert_eq!(sessions(dir.to_str().unwrap(), &["list"]), "no sessions\n");
}

#[test]
fn a_path_that_is_no_store_is_refused_by_name() {
    let dir = workdir("sessions-nostore");
    std::fs::write(dir.join("notes.txt"), "not a store").unwrap();
    let missing = dir.join("missing");
    let file = dir.join("notes.txt");
    for path in [&dir, &missing, &file] {
        let p = path.to_str().unwrap();
        let stderr = fails(&["sessions", "list", "--store", p], 1);
        assert!(
            stderr.contains(&format!("{p}: not a session store")),
            "{stderr}"
        );
    }
    assert!(!missing.exists(), "the inspector created {missing:?}");
}

/// A sled database another program wrote (trees and keys of its own, none
/// of harness's) is refused as no session store, naming what it holds,
/// never listed as a store without sessions; the inspector and the studio
/// change no byte of it.
#[test]
fn another_programs_sled_database_is_refused_naming_its_trees() {
    let dir = workdir("sessions-sled-foreign").join("db");
    let db = harness_stores::sled::Config::new()
        .path(&dir)
        .flush_every_ms(None)
        .open()
        .unwrap();
    db.open_tree("users")
        .unwrap()
        .insert("ada", "lovelace")
        .unwrap();
    db.open_tree("orders").unwrap();
    db.insert("version", "3").unwrap();
    db.flush().unwrap();
    drop(db);
    // sled's threads let go of the lock a moment after the last handle.
    let log = std::fs::File::open(dir.join("db")).unwrap();
    let mut unlocked = false;
    for _ in 0..600 {
        if log.try_lock().is_ok() {
            log.unlock().unwrap();
            unlocked = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(unlocked, "sled still holds {}", dir.display());
    let before = tree(&dir);
    let p = dir.to_str().unwrap();
    for args in [
        vec!["sessions", "list", "--store", p],
        vec!["sessions", "show", "s-1", "--store", p],
        vec!["studio", "--store", p],
    ] {
        let stderr = fails(&args, 1);
        assert!(
            stderr.contains(&format!(
                "{p}: not a session store: another program's sled database: it holds the \
                 trees `orders`, `users` and 1 key in sled's default tree, but none of \
                 harness's trees"
            )),
            "{args:?}: {stderr}"
        );
        assert_eq!(tree(&dir), before, "{args:?} changed the database");
    }
    // Given to the studio as its long-term memory, beside a store.
    let store = workdir("sessions-sled-foreign-store");
    harness_stores::FileStore::open(&store).unwrap();
    let args = ["studio", "--store", store.to_str().unwrap(), "--memory", p];
    let stderr = fails(&args, 1);
    assert!(
        stderr.contains(&format!(
            "memory {p}: not a harness memory: another program's sled database: it holds the \
             trees `orders`, `users`"
        )),
        "{stderr}"
    );
    assert_eq!(tree(&dir), before, "the studio changed the database");
}

/// A store given in a form this tool does not read is refused saying so,
/// and its password is never shown: a URL of an unknown scheme (or of a
/// known one written in capitals, which is read), a libpq `key=value`
/// string taken for a path.
#[test]
fn a_store_in_a_form_not_read_is_refused_without_its_password() {
    for (store, says) in [
        ("Postgres://ada:pw-sk-4821@127.0.0.1:1/x", "cannot open it"),
        (
            "POSTGRESQL://ada:pw-sk-4821@127.0.0.1:1/x",
            "cannot open it",
        ),
        (
            "redis+unix://:pw-sk-4821@/tmp/redis.sock",
            "`redis+unix://` is no store",
        ),
        (
            "postgress://ada:pw-sk-4821@host/x",
            "`postgress://` is no store",
        ),
        (
            "mysql://root:pw-sk-4821@localhost/db",
            "`mysql://` is no store",
        ),
        (
            "host=localhost password=pw-sk-4821 dbname=x",
            "a `key=value` connection string is not read",
        ),
        (
            "postgres:/ada:pw-sk-4821@host/x",
            "a postgres URL is written `postgres://…`",
        ),
        (
            "Redis:pw-sk-4821@host",
            "a redis URL is written `redis://…`",
        ),
    ] {
        let stderr = fails(&["sessions", "list", "--store", store], 1);
        assert!(stderr.contains(says), "{store}: {stderr}");
        assert!(!stderr.contains("pw-sk-4821"), "{store}: {stderr}");
    }
}

#[test]
fn an_unknown_session_is_an_error_naming_the_store_and_the_session() {
    let dir = workdir("sessions-unknown").join("store");
    file_store(&dir);
    let store = dir.to_str().unwrap();
    for sub in ["show", "history"] {
        let stderr = fails(&["sessions", sub, "no-such-session", "--store", store], 1);
        assert!(
            stderr.contains(&format!("store {store}: no session no-such-session")),
            "{stderr}"
        );
    }
}

#[test]
fn a_session_id_given_with_control_characters_is_echoed_escaped() {
    let dir = workdir("sessions-controls").join("store");
    file_store(&dir);
    let store = dir.to_str().unwrap();
    for (id, shown) in [
        ("\u{1b}[2Jgone", "\\x1b[2Jgone"),
        ("two\rlines", "two\\x0dlines"),
        ("bell\u{7}\u{9b}31m", "bell\\x07\\u{9b}31m"),
    ] {
        for sub in ["show", "history"] {
            let stderr = fails(&["sessions", sub, id, "--store", store], 1);
            assert!(
                stderr.contains(&format!("no session {shown}")),
                "{sub} {id:?}: {stderr:?}"
            );
            assert!(
                !stderr.contains(['\u{1b}', '\r', '\u{7}', '\u{9b}']),
                "{sub} {id:?}: {stderr:?}"
            );
        }
    }
}

#[test]
fn a_corrupt_record_is_an_error_naming_the_session_and_the_record() {
    let dir = workdir("sessions-corrupt").join("store");
    let s = file_store(&dir);
    let store = dir.to_str().unwrap();
    // The documented layout of the file store: `s-{id}/head.json`,
    // `s-{id}/cp-{seq:020}.json`.
    std::fs::write(
        dir.join(format!("s-{}", s.completed))
            .join(format!("cp-{:020}.json", 1)),
        b"{\"seq\": 1, \"torn",
    )
    .unwrap();
    for sub in ["show", "history"] {
        let stderr = fails_after_showing(&["sessions", sub, &s.completed, "--store", store], 1);
        assert!(
            stderr.contains(&format!(
                "store {store}: cannot load session {}: checkpoint 1",
                s.completed
            )),
            "{stderr}"
        );
    }
    // `show` still shows the head, which reads: its phase, its step.
    let out = harness(&["sessions", "show", &s.completed, "--store", store]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("session:   {}", s.completed)) && stdout.contains("phase:"),
        "{stdout}"
    );
    assert!(!stdout.contains("state:"), "{stdout}");
    std::fs::write(
        dir.join(format!("s-{}", s.paused)).join("head.json"),
        b"\0garbage",
    )
    .unwrap();
    let before = tree(&dir);
    let head_error = format!("store {store}: cannot load session {}: head", s.paused);
    for args in [vec!["show", s.paused.as_str()], vec!["list"]] {
        let mut all = vec!["sessions"];
        all.extend(args);
        all.extend(["--store", store]);
        let stderr = fails_after_showing(&all, 1);
        assert!(stderr.contains(&head_error), "{stderr}");
    }
    // `list` lists the session whose head reads, and a line for the one
    // whose head does not; it fails, and changes nothing.
    let out = harness(&["sessions", "list", "--store", store]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert!(lines[0].starts_with(s.completed.as_str()), "{stdout}");
    assert!(
        lines[1].starts_with(&format!("{}  cannot be read: its head", s.paused)),
        "{stdout}"
    );
    assert_eq!(tree(&dir), before, "the inspector changed the store");
}

/// A checkpoint file deleted from the log (in the middle, or the last one)
/// is reported as a gap, with the checkpoint expected and the one found,
/// not shown as a shorter history.
#[test]
fn a_checkpoint_missing_from_the_log_is_an_error_naming_the_gap() {
    let dir = workdir("sessions-gap").join("store");
    let s = file_store(&dir);
    let store = dir.to_str().unwrap();
    let checkpoint = |session: &str, seq: u64| {
        dir.join(format!("s-{session}"))
            .join(format!("cp-{seq:020}.json"))
    };
    // Completed: 0 the snapshot, 1 triage, 2 ask. Paused: 0, 1.
    std::fs::remove_file(checkpoint(&s.completed, 1)).unwrap();
    std::fs::remove_file(checkpoint(&s.paused, 1)).unwrap();
    let before = tree(&dir);
    for (session, expected) in [
        (&s.completed, "expected checkpoint 1, found checkpoint 2"),
        (&s.paused, "expected checkpoint 1, the log ends there"),
    ] {
        for sub in ["show", "history"] {
            let stderr = fails_after_showing(&["sessions", sub, session, "--store", store], 1);
            assert!(
                stderr.contains(&format!("store {store}: cannot load session {session}"))
                    && stderr.contains("the checkpoint log is broken")
                    && stderr.contains(expected),
                "{sub} {session}: {stderr}"
            );
        }
    }
    assert_eq!(tree(&dir), before, "the inspector changed the store");
}

#[test]
fn a_bad_command_line_is_a_usage_error() {
    let dir = workdir("sessions-usage");
    let store = dir.to_str().unwrap();
    let stderr = fails(&["sessions", "list"], 2);
    assert!(stderr.contains("--store <PATH|URL>"), "{stderr}");
    assert!(stderr.contains("Usage: harness sessions"), "{stderr}");
    for args in [
        &["sessions", "bogus", "--store", store][..],
        &["sessions", "show", "--store", store],
        // The inspector only reads: resuming needs the application.
        &["sessions", "resume", "s", "yes", "--store", store],
    ] {
        let stderr = fails(args, 2);
        assert!(
            stderr.contains("Usage: harness sessions"),
            "{args:?}: {stderr}"
        );
    }
    let stderr = fails(&["sessions", "list", "--store", store, "--schema", "x"], 1);
    assert!(
        stderr.contains("--schema applies to PostgreSQL stores only"),
        "{stderr}"
    );
}

#[cfg(not(feature = "postgres"))]
#[test]
fn a_postgres_url_needs_the_postgres_feature_and_its_password_stays_hidden() {
    let stderr = fails(
        &[
            "sessions",
            "list",
            "--store",
            "postgres://ada:s3cret@db/agents",
        ],
        1,
    );
    assert!(
        stderr.contains(
            "store postgres://ada@db/agents: this harness was built without the postgres store"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("s3cret"), "{stderr}");
}

#[test]
fn a_stores_password_is_never_shown_whatever_form_it_takes() {
    // Each store, with an option that does not fit it: refused before
    // anything is opened, with the store named in the message.
    for (store, option, shown, hidden) in [
        (
            "postgres://ada@127.0.0.1:1/x?password=s3cret",
            "--prefix",
            "postgres://ada@127.0.0.1:1/x",
            &["s3cret", "password"][..],
        ),
        (
            "postgres://ada@127.0.0.1:1/x?sslmode=disable&PassWord=s3cret&application_name=a",
            "--prefix",
            "postgres://ada@127.0.0.1:1/x?sslmode=disable&application_name=a",
            &["s3cret"],
        ),
        (
            "postgresql://127.0.0.1:1/x?pass%77ord=s3cret",
            "--prefix",
            "postgresql://127.0.0.1:1/x",
            &["s3cret"],
        ),
        (
            "postgres://ada:s3/cret@127.0.0.1:1/x",
            "--prefix",
            "postgres://ada@127.0.0.1:1/x",
            &["s3/cret", "cret"],
        ),
        (
            "postgres://ada:s3cr@et@127.0.0.1:1/x",
            "--prefix",
            "postgres://ada@127.0.0.1:1/x",
            &["s3cr", "et@"],
        ),
        (
            "redis://:s3/cret@127.0.0.1:1/0",
            "--schema",
            "redis://127.0.0.1:1/0",
            &["s3/cret", "cret"],
        ),
        (
            "restate://ops:s3/cret@127.0.0.1:1/Orders",
            "--schema",
            "restate://ops@127.0.0.1:1/Orders",
            &["s3/cret", "cret"],
        ),
    ] {
        let err = fails(&["sessions", "list", "--store", store, option, "x"], 1);
        assert!(
            err.contains(&format!("store {shown}: {option}")),
            "{store}: {err}"
        );
        for secret in hidden {
            assert!(!err.contains(secret), "{store} shows {secret:?}: {err}");
        }
    }
}

/// The server's URL from `var` (see `scripts/services`); `None` only when
/// `HARNESS_SKIP_SERVER_TESTS=1`.
#[cfg(any(feature = "postgres", feature = "redis"))]
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
#[cfg(any(feature = "postgres", feature = "redis"))]
fn unique(tag: &str) -> String {
    let random = harness::SessionId::random().as_str().replace('-', "");
    format!("t_cli_{tag}_{}", &random[..16])
}

#[cfg(feature = "postgres")]
#[test]
fn lists_shows_and_histories_the_sessions_of_a_postgres_store() {
    use harness_stores::{PostgresOptions, PostgresStore};
    let Some(url) = server_url("HARNESS_TEST_POSTGRES_URL") else {
        return;
    };
    let schema = unique("pg");
    let runtime = runtime();
    let connect = |options: PostgresOptions| {
        runtime
            .block_on(PostgresStore::connect_with(&url, options.schema(&schema)))
            .unwrap()
    };
    let s = create_sessions(&runtime, connect(PostgresOptions::default()));
    let store = url.as_str();
    let list = sessions(store, &["list", "--schema", &schema]);
    assert!(
        list.contains(&s.paused) && list.contains(&s.completed),
        "{list}"
    );
    let show = sessions(store, &["show", &s.paused, "--schema", &schema]);
    assert_eq!(field(&show, "next step"), "ask");
    assert_eq!(snapshot(&show).1, serde_json::to_value(opened()).unwrap());
    // A schema without sessions: refused, and not created.
    let missing = unique("pg_missing");
    let stderr = fails(
        &["sessions", "list", "--store", store, "--schema", &missing],
        1,
    );
    assert!(stderr.contains("holds no sessions"), "{stderr}");
    let probe = connect(PostgresOptions::default());
    runtime.block_on(async {
        let client = probe.pool().get().await.unwrap();
        let created: bool = client
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)",
                &[&missing],
            )
            .await
            .unwrap()
            .get(0);
        assert!(!created, "the inspector created schema {missing}");
        client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
            .await
            .unwrap();
    });
}

#[cfg(feature = "redis")]
#[test]
fn lists_shows_and_histories_the_sessions_of_a_redis_store() {
    use harness_stores::{RedisOptions, RedisStore};
    let Some(url) = server_url("HARNESS_TEST_REDIS_URL") else {
        return;
    };
    let prefix = unique("rd");
    let runtime = runtime();
    let store = runtime
        .block_on(RedisStore::connect_with(
            &url,
            RedisOptions::default().prefix(&prefix),
        ))
        .unwrap();
    let s = create_sessions(&runtime, store);
    let list = sessions(&url, &["list", "--prefix", &prefix]);
    assert!(
        list.contains(&s.paused) && list.contains(&s.completed),
        "{list}"
    );
    let show = sessions(&url, &["show", &s.completed, "--prefix", &prefix]);
    assert_eq!(field(&show, "phase"), "completed with `done`");
    assert_eq!(updates(&show).len(), 2, "{show}");
    // A prefix with a typo finds nothing, says which prefix it read, and
    // names the stores there are, the nearest first.
    let typo = format!("{prefix}x");
    let none = sessions(&url, &["list", "--prefix", &typo]);
    assert!(
        none.starts_with("no sessions") && none.contains(&format!("`{typo}`")),
        "{none}"
    );
    assert!(
        none.contains(&format!("session stores under the prefix `{prefix}`"))
            || none.contains(&format!("session stores under the prefixes `{prefix}`")),
        "{none}"
    );
    // The keys stay under their unique prefix: the test Redis keeps
    // nothing on disk (`scripts/services`).
}

/// Damages a store in the directory it is given.
type DamageFn = Box<dyn Fn(&Path)>;

/// A sled database damaged in many ways after a real agent wrote it (bits
/// flipped across the log, among them inside a record's JSON, random
/// bytes, truncations, `conf` deleted): `list`, `show` and `history` fail
/// with a message naming the store, the file and where, never show a
/// session (so never another phase than the true one), and change no byte
/// of any file of the store. The intact database is listed as it is and
/// left byte-identical too.
#[test]
fn a_damaged_sled_database_is_reported_never_shown_and_never_changed() {
    let work = workdir("sessions-sled-damage");
    let pristine = work.join("db");
    let s = sled_store(&pristine);
    let store = pristine.to_str().unwrap();
    let before = tree(&pristine);
    check_store(store, &s);
    assert_eq!(tree(&pristine), before, "the inspector changed the store");

    let db = std::fs::read(pristine.join("db")).unwrap();
    let len = db.len();
    let mut damages: Vec<(String, DamageFn)> = Vec::new();
    let flip = |at: usize| -> Box<dyn Fn(&Path)> {
        Box::new(move |p: &Path| {
            let mut bytes = std::fs::read(p.join("db")).unwrap();
            bytes[at] ^= 0x01;
            std::fs::write(p.join("db"), bytes).unwrap();
        })
    };
    for at in [0, 5, len / 7, len / 3, len / 2, len * 2 / 3, len - 2] {
        damages.push((format!("bit flipped at {at}"), flip(at)));
    }
    // Inside the records' JSON: the interrupt's question and the phase
    // (`interrupted` → another phase would read as valid JSON).
    for text in [&b"close the ticket?"[..], b"interrupted", b"completed"] {
        let at = db
            .windows(text.len())
            .position(|w| w == text)
            .unwrap_or_else(|| panic!("{} not in the log", String::from_utf8_lossy(text)));
        damages.push((
            format!("bit flipped in `{}`", String::from_utf8_lossy(text)),
            flip(at + 2),
        ));
    }
    damages.push((
        "random bytes".into(),
        Box::new(move |p: &Path| {
            let mut x = 0x2545_F491_4F6C_DD1Du64;
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            std::fs::write(p.join("db"), bytes).unwrap();
        }),
    ));
    for cut in [0, len / 2, len - 1] {
        damages.push((
            format!("cut to {cut} bytes"),
            Box::new(move |p: &Path| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(p.join("db"))
                    .unwrap()
                    .set_len(cut as u64)
                    .unwrap();
            }),
        ));
    }
    damages.push((
        "conf deleted".into(),
        Box::new(|p: &Path| std::fs::remove_file(p.join("conf")).unwrap()),
    ));

    for (i, (name, damage)) in damages.iter().enumerate() {
        let case = work.join(format!("case-{i}"));
        std::fs::create_dir(&case).unwrap();
        for (path, bytes) in &before {
            std::fs::write(case.join(path.file_name().unwrap()), bytes).unwrap();
        }
        damage(&case);
        let store = case.to_str().unwrap();
        let damaged = tree(&case);
        for args in [
            vec!["list"],
            vec!["show", s.paused.as_str()],
            vec!["history", s.completed.as_str()],
        ] {
            let mut all = vec!["sessions"];
            all.extend(&args);
            all.extend(["--store", store]);
            let out = harness(&all);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{name}: {args:?}: {stderr}");
            assert!(out.stdout.is_empty(), "{name}: {args:?} showed something");
            assert!(
                stderr.contains(&format!("the store {store} is damaged: {store}/")),
                "{name}: {args:?}: {stderr}"
            );
            assert_eq!(tree(&case), damaged, "{name}: {args:?} changed the store");
        }
    }
}

/// The studio reads a sled database from a copy: starting it changes no
/// byte, and a damaged database is refused naming the file.
#[test]
fn the_studio_opens_a_sled_database_without_changing_it_and_refuses_a_damaged_one() {
    let work = workdir("studio-sled-damage");
    let dir = work.join("db");
    sled_store(&dir);
    let before = tree(&dir);
    let mut child = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(["studio", "--store", dir.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
    let serving = lines.any(|l| l.unwrap().starts_with("open http://"));
    let _ = child.kill();
    let _ = child.wait();
    assert!(serving, "the studio did not serve");
    assert_eq!(tree(&dir), before, "the studio changed the store");

    let mut bytes = std::fs::read(dir.join("db")).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x01;
    std::fs::write(dir.join("db"), &bytes).unwrap();
    let damaged = tree(&dir);
    let out = harness(&["studio", "--store", dir.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("is damaged: {}", dir.join("db").display())),
        "{stderr}"
    );
    assert_eq!(tree(&dir), damaged, "the studio changed the damaged store");
}

/// Where each frame of a log store's log starts and ends (a 16-byte
/// header, then frames: a u32 length, a u32 checksum, the payload).
fn log_frames(bytes: &[u8]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut at = 16;
    while at < bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        out.push(at..at + 8 + len);
        at += 8 + len;
    }
    assert_eq!(at, bytes.len(), "whole frames");
    out
}

/// A log store damaged in any of many ways (bits flipped in the header,
/// in a frame's length, in the records' JSON — the question, the phase —
/// in the last byte; the log cut inside frames; bytes after the last
/// frame; a log of random bytes; a newer generation of garbage; the log
/// deleted) makes `list`, `show` and `history` fail with status 1, naming
/// the store, the file and (for a log) the offset of the frame where
/// reading stops; nothing is shown, and no byte of any file changes (the
/// application's open would move the damaged end aside; the inspector
/// moves nothing). The intact store is listed and left byte-identical.
#[test]
fn a_damaged_log_store_is_reported_never_shown_and_never_changed() {
    let work = workdir("sessions-log-damage");
    let pristine = work.join("store");
    let s = create_sessions(
        &runtime(),
        harness_stores::LogStore::open(&pristine).unwrap(),
    );
    let before = tree(&pristine);
    let store = pristine.to_str().unwrap();
    check_store(store, &s);
    assert_eq!(tree(&pristine), before, "the inspector changed the store");

    let log = std::fs::read(pristine.join("log.1")).unwrap();
    let len = log.len();
    let frames = log_frames(&log);
    assert!(frames.len() >= 4, "{} frames", frames.len());
    let frame_of = |at: usize| frames.iter().find(|f| f.contains(&at)).unwrap().start;
    let mid = frames[frames.len() / 2].clone();
    let last = frames.last().unwrap().clone();
    // (what, the damage, the file named, the offset named)
    let mut damages: Vec<(String, DamageFn, &str, Option<usize>)> = Vec::new();
    let flip = |at: usize| -> DamageFn {
        Box::new(move |p: &Path| {
            let mut bytes = std::fs::read(p.join("log.1")).unwrap();
            bytes[at] ^= 0x01;
            std::fs::write(p.join("log.1"), bytes).unwrap();
        })
    };
    for at in [0, 13] {
        damages.push((format!("bit flipped at {at}"), flip(at), "log.1", Some(0)));
    }
    for at in [mid.start + 1, mid.start + 6, len / 2, len - 1] {
        damages.push((
            format!("bit flipped at {at}"),
            flip(at),
            "log.1",
            Some(frame_of(at)),
        ));
    }
    for text in [&b"close the ticket?"[..], b"interrupted", b"completed"] {
        let at = log
            .windows(text.len())
            .position(|w| w == text)
            .unwrap_or_else(|| panic!("{} not in the log", String::from_utf8_lossy(text)))
            + 2;
        damages.push((
            format!("bit flipped in `{}`", String::from_utf8_lossy(text)),
            flip(at),
            "log.1",
            Some(frame_of(at)),
        ));
    }
    let cut = |to: usize| -> DamageFn {
        Box::new(move |p: &Path| {
            std::fs::OpenOptions::new()
                .write(true)
                .open(p.join("log.1"))
                .unwrap()
                .set_len(to as u64)
                .unwrap();
        })
    };
    for to in [last.start + 3, last.end - 1, mid.start + 9, 10] {
        let offset = if to < 16 { 0 } else { frame_of(to) };
        damages.push((format!("cut to {to} bytes"), cut(to), "log.1", Some(offset)));
    }
    damages.push((
        "bytes after the last frame".into(),
        Box::new(|p: &Path| {
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(p.join("log.1"))
                .unwrap();
            std::io::Write::write_all(&mut f, b"\x07\x00\x00\x00garbage").unwrap();
        }),
        "log.1",
        Some(len),
    ));
    let random = |n: usize, mut x: u64| -> Vec<u8> {
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    };
    let noise = random(len, 0x2545_F491_4F6C_DD1D);
    damages.push((
        "random bytes".into(),
        Box::new(move |p: &Path| std::fs::write(p.join("log.1"), &noise).unwrap()),
        "log.1",
        Some(0),
    ));
    let noise = random(300, 77);
    damages.push((
        "a newer generation of garbage".into(),
        Box::new(move |p: &Path| std::fs::write(p.join("log.2"), &noise).unwrap()),
        "log.2",
        Some(0),
    ));
    damages.push((
        "the log deleted".into(),
        Box::new(|p: &Path| std::fs::remove_file(p.join("log.1")).unwrap()),
        "",
        None,
    ));

    for (i, (name, damage, file, offset)) in damages.iter().enumerate() {
        let case = work.join(format!("case-{i}"));
        std::fs::create_dir(&case).unwrap();
        for (path, bytes) in &before {
            std::fs::write(case.join(path.file_name().unwrap()), bytes).unwrap();
        }
        damage(&case);
        let store = case.to_str().unwrap();
        let named = if file.is_empty() {
            store.to_owned()
        } else {
            format!("{store}/{file}")
        };
        let damaged = tree(&case);
        for args in [
            vec!["list"],
            vec!["show", s.paused.as_str()],
            vec!["history", s.completed.as_str()],
        ] {
            let mut all = vec!["sessions"];
            all.extend(&args);
            all.extend(["--store", store]);
            let out = harness(&all);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{name}: {args:?}: {stderr}");
            assert!(out.stdout.is_empty(), "{name}: {args:?} showed something");
            assert!(
                stderr.contains(&format!("the store {store} is damaged: {named}")),
                "{name}: {args:?}: {stderr}"
            );
            if let Some(offset) = offset {
                assert!(
                    stderr.contains(&format!("{named} at offset {offset}:")),
                    "{name}: {args:?}: {stderr}"
                );
            }
            assert_eq!(tree(&case), damaged, "{name}: {args:?} changed the store");
        }
    }
}

/// The studio reads a log store without changing it (and without keeping
/// the application out: the store opens for writing while the studio
/// runs), and refuses a damaged one naming the file and the offset.
#[test]
fn the_studio_reads_a_log_store_without_changing_it_and_refuses_a_damaged_one() {
    let work = workdir("studio-log-damage");
    let dir = work.join("store");
    create_sessions(&runtime(), harness_stores::LogStore::open(&dir).unwrap());
    let before = tree(&dir);
    let mut child = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(["studio", "--store", dir.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
    let serving = lines.any(|l| l.unwrap().starts_with("open http://"));
    let after = tree(&dir);
    let writer = harness_stores::LogStore::open(&dir);
    let _ = child.kill();
    let _ = child.wait();
    assert!(serving, "the studio did not serve");
    assert_eq!(after, before, "the studio changed the store");
    assert!(writer.is_ok(), "the studio kept the application out");
    drop(writer);

    let mut bytes = std::fs::read(dir.join("log.1")).unwrap();
    let at = bytes.len() - 5;
    bytes[at] ^= 0x01;
    std::fs::write(dir.join("log.1"), &bytes).unwrap();
    let damaged = tree(&dir);
    let out = harness(&["studio", "--store", dir.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "is damaged: {} at offset",
            dir.join("log.1").display()
        )),
        "{stderr}"
    );
    assert_eq!(tree(&dir), damaged, "the studio changed the damaged store");
}

/// Reading a file store leaves what a crash left alone (the temporary
/// files that commits clean up) and creates nothing: the store and every
/// file in it are byte-identical after `list`, `show` and `history`.
#[test]
fn reading_a_file_store_leaves_a_crashs_temporary_files_alone() {
    let dir = workdir("sessions-files-leftovers").join("store");
    let s = file_store(&dir);
    let session = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.is_dir())
        .unwrap();
    for name in [
        ".head.json.0123456789abcdef.tmp",
        ".cp-00000000000000000009.json.tmp",
    ] {
        std::fs::write(session.join(name), b"{\"torn").unwrap();
    }
    let before = tree(&dir);
    check_store(dir.to_str().unwrap(), &s);
    assert_eq!(tree(&dir), before, "the inspector changed the store");
}

/// An empty `--store` is said to be empty; a directory that cannot be read
/// is said to be unreadable (it may well be a store), not "not a store".
#[test]
fn an_empty_or_unreadable_store_is_said_to_be_so() {
    for args in [
        &["sessions", "list", "--store", ""][..],
        &["sessions", "--store", "", "show", "s"][..],
    ] {
        let stderr = fails(args, 1);
        assert!(stderr.contains("--store is empty"), "{args:?}: {stderr}");
    }
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::os::unix::process::CommandExt;
    let dir = workdir("sessions-unreadable").join("store");
    harness_stores::FileStore::open(&dir).unwrap();
    // Root reads any directory: the inspector runs as nobody on one only
    // its owner reads; anyone else, on one of mode 000.
    let root = std::fs::metadata("/proc/self").unwrap().uid() == 0;
    let mode = if root { 0o700 } else { 0o000 };
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_harness"));
    command.args(["sessions", "list", "--store", dir.to_str().unwrap()]);
    if root {
        command.uid(65534).gid(65534);
    }
    let out = command.output().unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("{}: cannot read it:", dir.display()))
            && stderr.contains("ermission denied")
            && !stderr.contains("not a session store"),
        "{stderr}"
    );
}
