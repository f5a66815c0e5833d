//! A session whose head does not read (a damaged record) hides no other:
//! the list answers the readable sessions and names the damaged one with
//! its record, filtered or not, a page at a time; opening it is a typed
//! error; the event stream goes on; the page draws it as a row of its own.
//! Nothing is written to the store. Any other failure of the store still
//! fails the list.

use crate::browser::Browser;
use crate::events::Events;
use crate::support::{Doc, Review, TempDir, get, review_harness, temp_dir};
use harness::session::{Checkpoint, Commit, Created, SessionStore, StoreError, StoredRun};
use harness::{Agent, Harness, SessionId, create_agent};
use harness_stores::FileStore;
use harness_studio::{Serving, Studio};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// What a damaged `head.json` holds instead of a head.
const GARBAGE: &[u8] = b"this is no head \x00\xff{";

/// The review agent on a file store (`s-{id}/head.json` per session) with
/// a session waiting, one done and one whose head is garbage.
struct Damaged {
    root: PathBuf,
    store: Arc<dyn SessionStore>,
    harness: Harness<Doc>,
    agent: Agent<Doc>,
    waiting: String,
    interrupt: String,
    done: String,
    broken: String,
    _dir: TempDir,
}

impl Damaged {
    async fn new(name: &str) -> Damaged {
        let dir = temp_dir(name);
        let root = dir.join("sessions");
        Self::on(dir, root.clone(), Arc::new(FileStore::open(&root).unwrap())).await
    }

    /// On `store`, which keeps its sessions as files under `root`.
    async fn on(dir: PathBuf, root: PathBuf, store: Arc<dyn SessionStore>) -> Damaged {
        let harness = review_harness(Arc::clone(&store));
        let agent = create_agent("reviews", &harness);
        let waiting = agent.run(Doc::default()).await.unwrap();
        let done = agent.run(Doc::default()).await.unwrap();
        agent
            .resume(
                json!({"approve": true, "note": "fine"}),
                &done.session_id,
                &done.interrupt.clone().unwrap().id,
            )
            .await
            .unwrap()
            .await
            .unwrap();
        let broken = agent.run(Doc::default()).await.unwrap();
        let d = Damaged {
            root,
            store,
            harness,
            agent,
            waiting: waiting.session_id.to_string(),
            interrupt: waiting.interrupt.unwrap().id.to_string(),
            done: done.session_id.to_string(),
            broken: broken.session_id.to_string(),
            _dir: TempDir(dir),
        };
        d.damage(&d.broken);
        d
    }

    /// The head file of `id`, per the file store's layout.
    fn head_file(&self, id: &str) -> PathBuf {
        self.root.join(format!("s-{id}")).join("head.json")
    }

    /// Writes garbage over the head of `id`; what it held.
    fn damage(&self, id: &str) -> Vec<u8> {
        let path = self.head_file(id);
        let before = std::fs::read(&path).unwrap();
        std::fs::write(&path, GARBAGE).unwrap();
        before
    }

    async fn studio(&self) -> Serving {
        Studio::for_agent(&self.agent, &self.harness, Arc::clone(&self.store))
            .unwrap()
            .expect_answer::<Review>("review")
            .poll_interval(Duration::from_millis(100))
            .bind("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap()
    }
}

/// Every file under `root`, with its bytes.
fn files(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                out.insert(path, bytes);
            }
        }
    }
    out
}

/// The entries of a list, by id.
fn by_id(list: &Value) -> BTreeMap<String, Value> {
    list.as_array()
        .unwrap_or_else(|| panic!("not an array: {list}"))
        .iter()
        .map(|s| (s["id"].as_str().unwrap().to_owned(), s.clone()))
        .collect()
}

/// Checks that `entry` names the damaged session `id` and its record.
fn names_the_damage(entry: &Value, id: &str) {
    assert_eq!(entry["unreadable"], true, "{entry}");
    assert_eq!(entry["record"], "head", "{entry}");
    let error = entry["error"].as_str().unwrap();
    assert!(
        error.contains(id) && error.contains("head") && error.contains("invalid JSON"),
        "{error}"
    );
    // Nothing a readable session carries.
    assert!(
        entry.get("phase").is_none() && entry.get("agent").is_none(),
        "{entry}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_head_does_not_read_hides_no_other_in_the_list() {
    let d = Damaged::new("unreadable-list").await;
    let before = files(&d.root);
    let s = d.studio().await;

    // The list: both readable sessions, and the damaged one named with its
    // record.
    let r = get(&s, "/api/sessions").await;
    assert_eq!(r.status, 200, "{}", r.body);
    let list = by_id(&r.json());
    assert_eq!(list.len(), 3, "{}", r.body);
    assert_eq!(list[&d.waiting]["phase"], "waiting");
    assert_eq!(list[&d.done]["phase"], "done");
    assert!(list[&d.waiting].get("unreadable").is_none());
    names_the_damage(&list[&d.broken], &d.broken);
    assert!(r.header("x-next-after").is_none());
    // After the readable ones.
    assert_eq!(r.json()[2]["id"], d.broken.as_str(), "{}", r.body);

    // Filtered: the sessions that pass, and the damaged one, which cannot
    // be judged.
    for (query, kept) in [
        ("phase=done", vec![&d.done]),
        ("phase=waiting", vec![&d.waiting]),
        ("agent=reviews", vec![&d.done, &d.waiting]),
        ("agent=other", vec![]),
        ("q=waiting", vec![&d.waiting]),
    ] {
        let r = get(&s, &format!("/api/sessions?{query}")).await;
        assert_eq!(r.status, 200, "{query}: {}", r.body);
        let list = by_id(&r.json());
        let mut expected: Vec<&String> = kept.clone();
        expected.push(&d.broken);
        expected.sort();
        assert_eq!(list.keys().collect::<Vec<_>>(), expected, "{query}");
        names_the_damage(&list[&d.broken], &d.broken);
    }

    // A page at a time: the damaged one is a session looked at, counted in
    // the page and passed by the cursor; each once, then no cursor.
    let mut seen = Vec::new();
    let mut path = "/api/sessions?limit=1".to_owned();
    for _ in 0..10 {
        let r = get(&s, &path).await;
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        let page = by_id(&r.json());
        assert!(page.len() <= 1, "{path}: {}", r.body);
        seen.extend(page.into_keys());
        match r.header("x-next-after") {
            Some(after) => path = format!("/api/sessions?limit=1&after={after}"),
            None => break,
        }
    }
    seen.sort();
    let mut all = vec![d.waiting.clone(), d.done.clone(), d.broken.clone()];
    all.sort();
    assert_eq!(seen, all);

    // Opening it: the store's error, typed, naming the session and the
    // record; each call about it the same.
    for path in [
        format!("/api/sessions/{}", d.broken),
        format!("/api/sessions/{}/summary", d.broken),
        format!("/api/sessions/{}/timeline", d.broken),
        format!("/api/sessions/{}/state", d.broken),
    ] {
        let r = get(&s, &path).await;
        assert_eq!(r.status, 500, "{path}: {}", r.body);
        let error = r.error();
        assert!(
            error.contains(&d.broken) && error.contains("head") && error.contains("invalid JSON"),
            "{path}: {error}"
        );
    }
    // The readable ones open as ever.
    let r = get(&s, &format!("/api/sessions/{}", d.waiting)).await;
    assert_eq!(r.status, 200, "{}", r.body);

    // The event stream starts with the same list.
    let (status, head, mut events) = Events::open_with(&s, "").await;
    assert_eq!(status, 200, "{head}");
    let (name, first) = events.next().await.unwrap();
    assert_eq!(name, "sessions", "{first}");
    let list = by_id(&first);
    assert_eq!(list.len(), 3, "{first}");
    assert_eq!(list[&d.done]["phase"], "done");
    names_the_damage(&list[&d.broken], &d.broken);
    // Named with `watch=`, the same.
    let (_, _, mut watched) = Events::open_with(&s, &format!("&watch={}", d.broken)).await;
    let (name, first) = watched.next().await.unwrap();
    assert_eq!(name, "sessions", "{first}");
    names_the_damage(&by_id(&first)[&d.broken], &d.broken);

    s.shutdown().await.unwrap();
    // Nothing was written: every file as it was, none added or removed.
    let after = files(&d.root);
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>()
    );
    assert!(before == after, "a file of the store changed");
    assert_eq!(std::fs::read(d.head_file(&d.broken)).unwrap(), GARBAGE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_goes_on_past_a_head_that_turns_unreadable() {
    let d = Damaged::new("unreadable-events").await;
    let s = d.studio().await;
    let (_, _, mut events) = Events::open_with(&s, "").await;
    let (name, first) = events.next().await.unwrap();
    assert_eq!(name, "sessions");
    assert_eq!(by_id(&first).len(), 3, "{first}");

    // A session followed turns unreadable: sent once as such.
    let head = d.damage(&d.done);
    let (name, data) = events.next().await.unwrap();
    assert_eq!(name, "session", "{data}");
    assert_eq!(data["id"], d.done.as_str(), "{data}");
    names_the_damage(&data, &d.done);

    // The others are followed still: the waiting one, answered, is sent
    // until done (and nothing more about the damaged ones).
    d.agent
        .resume(
            json!({"approve": true, "note": "live"}),
            &SessionId::from(d.waiting.clone()),
            &d.interrupt.clone().into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    loop {
        let (name, data) = events.next().await.unwrap();
        assert_eq!(name, "session", "{data}");
        assert_eq!(data["id"], d.waiting.as_str(), "{data}");
        if data["phase"] == "done" {
            break;
        }
    }

    // Repaired, it is sent readable again.
    std::fs::write(d.head_file(&d.done), head).unwrap();
    let (name, data) = events.next().await.unwrap();
    assert_eq!(name, "session", "{data}");
    assert_eq!(data["id"], d.done.as_str(), "{data}");
    assert_eq!(data["phase"], "done", "{data}");
    s.shutdown().await.unwrap();
}

/// How a load fails.
type Failure = fn(&SessionId) -> StoreError;

/// A file store whose loads of one session fail as told: as a store that
/// cannot be reached, or as a damaged record.
#[derive(Debug)]
struct Failing {
    inner: FileStore,
    failing: std::sync::Mutex<Option<(SessionId, Failure)>>,
}

impl Failing {
    fn fail(&self, id: &str, how: Failure) {
        *self.failing.lock().unwrap() = Some((id.to_owned().into(), how));
    }
}

#[async_trait::async_trait]
impl SessionStore for Failing {
    async fn load(&self, session: &SessionId) -> Result<Option<StoredRun>, StoreError> {
        if let Some((id, how)) = &*self.failing.lock().unwrap()
            && id == session
        {
            return Err(how(session));
        }
        self.inner.load(session).await
    }
    async fn commit(&self, commit: &Commit) -> Result<(), StoreError> {
        self.inner.commit(commit).await
    }
    async fn checkpoints(
        &self,
        session: &SessionId,
        from_seq: u64,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        self.inner.checkpoints(session, from_seq).await
    }
    async fn sessions(&self) -> Result<Vec<SessionId>, StoreError> {
        self.inner.sessions().await
    }
    async fn sessions_page(
        &self,
        prefix: &str,
        after: Option<&SessionId>,
        limit: usize,
    ) -> Result<Vec<SessionId>, StoreError> {
        self.inner.sessions_page(prefix, after, limit).await
    }
    async fn created_since(
        &self,
        since: Option<u64>,
        limit: usize,
    ) -> Result<Option<Created>, StoreError> {
        self.inner.created_since(since, limit).await
    }
    async fn flush(&self) -> Result<(), StoreError> {
        self.inner.flush().await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_cannot_be_reached_still_fails_the_list() {
    let dir = temp_dir("unreadable-unreachable");
    let root = dir.join("sessions");
    let store = Arc::new(Failing {
        inner: FileStore::open(&root).unwrap(),
        failing: std::sync::Mutex::new(None),
    });
    let d = Damaged::on(dir, root, store.clone()).await;
    store.fail(&d.waiting, |_| StoreError::backend("connection refused"));
    let s = d.studio().await;
    let r = get(&s, "/api/sessions").await;
    assert_eq!(r.status, 500, "{}", r.body);
    let error = r.error();
    assert!(
        error.contains(&d.waiting) && error.contains("connection refused"),
        "{error}"
    );
    // Reached again: the list, with the damaged one named.
    *store.failing.lock().unwrap() = None;
    let r = get(&s, "/api/sessions").await;
    assert_eq!(r.status, 200, "{}", r.body);
    names_the_damage(&by_id(&r.json())[&d.broken], &d.broken);
    s.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_a_session_whose_head_does_not_read_is_a_row_of_its_own() {
    let d = Damaged::new("unreadable-browser").await;
    let before = files(&d.root);
    let s = d.studio().await;
    let mut b = Browser::open(&s.url()).await;
    let row = format!("#sessions tr.unreadable[data-id=\"{}\"]", d.broken);
    b.wait_for(
        "the readable sessions and the unreadable one",
        &format!(
            "document.querySelectorAll('#sessions tr.row').length === 2 && \
             !!document.querySelector('{row}')"
        ),
    )
    .await;
    // Once the event stream has sent its list too.
    b.wait_for(
        "the page live",
        "document.querySelector('#live').classList.contains('on')",
    )
    .await;
    assert!(b.has(&row).await);
    assert!(
        b.has(&format!("#sessions tr.row[data-id=\"{}\"]", d.waiting))
            .await
    );
    assert!(
        b.has(&format!("#sessions tr.row[data-id=\"{}\"]", d.done))
            .await
    );
    let text = b.text(&row).await;
    assert!(
        text.starts_with(&d.broken[..8])
            && text.contains("unreadable")
            && text.contains(&format!(
                "cannot load session {}: head: invalid JSON",
                d.broken
            )),
        "{text}"
    );
    // First in the list, and nothing to open.
    assert_eq!(
        b.eval("document.querySelector('#sessions tbody tr').dataset.id")
            .await,
        json!(d.broken)
    );
    b.click(&row).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!b.has("#sessions tr.selected").await);
    assert_eq!(
        b.eval("document.querySelector('#session-pane').hidden")
            .await,
        json!(true)
    );
    // A filter keeps it, and the sessions that pass.
    b.eval("document.querySelector('#phase-filter').value = 'done'; document.querySelector('#phase-filter').dispatchEvent(new Event('change'))")
        .await;
    b.wait_for(
        "the done session and the unreadable one",
        &format!(
            "document.querySelectorAll('#sessions tbody tr').length === 2 && \
             !!document.querySelector('#sessions tr.row[data-id=\"{}\"]') && \
             !!document.querySelector('{row}')",
            d.done
        ),
    )
    .await;
    assert_eq!(b.errors().await, "", "no error on the page");
    b.close().await;
    s.shutdown().await.unwrap();
    assert!(before == files(&d.root), "a file of the store changed");
}

/// A secret a damaged record's error quotes.
const SECRET: &str = "studio-unreadable-secret-3b9e17a0c4";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_the_error_of_an_unreadable_head_quotes_is_redacted() {
    assert!(harness::secrets::register(SECRET));
    let dir = temp_dir("unreadable-secret");
    let root = dir.join("sessions");
    let store = Arc::new(Failing {
        inner: FileStore::open(&root).unwrap(),
        failing: std::sync::Mutex::new(None),
    });
    let d = Damaged::on(dir, root, store.clone()).await;
    store.fail(&d.waiting, |id| {
        StoreError::Load(harness::session::StoreLoad::new(
            id.clone(),
            "head",
            format!("invalid JSON near \"token={SECRET}\""),
        ))
    });
    let s = d.studio().await;
    let r = get(&s, "/api/sessions").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(!r.body.contains(SECRET), "{}", r.body);
    let list = by_id(&r.json());
    names_the_damage(&list[&d.waiting], &d.waiting);
    assert!(
        list[&d.waiting]["error"]
            .as_str()
            .unwrap()
            .contains("token=[redacted]"),
        "{}",
        r.body
    );
    names_the_damage(&list[&d.broken], &d.broken);
    let (_, _, mut events) = Events::open_with(&s, "").await;
    let (name, first) = events.next().await.unwrap();
    assert_eq!(name, "sessions");
    assert!(!first.to_string().contains(SECRET), "{first}");
    assert_eq!(by_id(&first).len(), 3, "{first}");
    s.shutdown().await.unwrap();
}
