//! A session whose checkpoint log is broken (a record missing in the
//! middle, its last record missing, a fan-out branch's record missing) is
//! reported as damage, as the core reports it (`read_log`), by its detail,
//! its timeline and its state: a typed error naming the session and where
//! the log breaks, never a shorter timeline or a 404 about a checkpoint
//! the head names. Its head still reads, so the list shows it. On the page
//! the session shows its error and nothing of the session shown before.
//! Nothing is written to the store. On the file store (the records are
//! files to delete) and on sled (the records hidden by a wrapper).

use crate::browser::Browser;
use crate::support::{Doc, Review, TempDir, Trip, get, review_harness, temp_dir, trip_harness};
use harness::session::{Checkpoint, Created, SessionStore, Span, StoreError, StoredRun, read_log};
use harness::{Harness, HarnessState, JsonSchema, SessionId, create_agent};
use harness_stores::{FileStore, SledStore};
use harness_studio::{Serving, Studio};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Steps of the counting sessions.
const STEPS: u64 = 12;

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
pub struct Count {
    #[field(reduce = add)]
    pub n: u64,
}

/// `tick` adds one until [`STEPS`].
fn counter(store: Arc<dyn SessionStore>) -> Harness<Count> {
    Harness::<Count>::builder()
        .step("tick")
        .run(async |_: Arc<Count>| Ok(CountUpdate::new().n(1)))
        .route(|c: &Count| if c.n < STEPS { "more" } else { "enough" })
        .on("more")
        .to("tick")
        .on("enough")
        .end()
        .start("tick")
        .store(store)
        .build()
        .unwrap()
}

/// A store whose checkpoints named in `hidden` are not there (as if lost),
/// over any store.
#[derive(Debug)]
struct Hiding {
    inner: Arc<dyn SessionStore>,
    hidden: Mutex<Vec<(SessionId, u64)>>,
}

#[async_trait::async_trait]
impl SessionStore for Hiding {
    async fn load(&self, session: &SessionId) -> Result<Option<StoredRun>, StoreError> {
        self.inner.load(session).await
    }
    async fn commit(&self, commit: &harness::session::Commit) -> Result<(), StoreError> {
        self.inner.commit(commit).await
    }
    async fn checkpoints(
        &self,
        session: &SessionId,
        from_seq: u64,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        let mut log = self.inner.checkpoints(session, from_seq).await?;
        let hidden = self.hidden.lock().unwrap().clone();
        log.retain(|cp| !hidden.contains(&(session.clone(), cp.seq)));
        Ok(log)
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

/// How a test loses a checkpoint of a session.
enum Loss {
    /// Deletes its file from a file store rooted there.
    File(PathBuf),
    /// Hides it in the wrapper.
    Hide(Arc<Hiding>),
}

impl Loss {
    fn lose(&self, id: &str, seq: u64) {
        match self {
            Loss::File(root) => {
                let path = root
                    .join(format!("s-{id}"))
                    .join(format!("cp-{seq:020}.json"));
                std::fs::remove_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            }
            Loss::Hide(store) => store
                .hidden
                .lock()
                .unwrap()
                .push((SessionId::from(id), seq)),
        }
    }
}

/// Sessions on `store`: three counting ones (one to keep whole) and a trip
/// (waiting in its sub-agent after its fan-out).
struct Sessions {
    store: Arc<dyn SessionStore>,
    middle: String,
    last: String,
    whole: String,
    trip: String,
}

impl Sessions {
    async fn on(store: Arc<dyn SessionStore>) -> Sessions {
        let agent = create_agent("counts", &counter(Arc::clone(&store)));
        let mut ids = Vec::new();
        for _ in 0..3 {
            let out = agent.run(Count::default()).await.unwrap();
            assert_eq!(out.state.n, STEPS);
            ids.push(out.session_id.to_string());
        }
        let trip = create_agent("trips", &trip_harness(Arc::clone(&store)))
            .run(Trip {
                log: vec![],
                total: 0,
                items: vec![1, 2, 3],
                verdict: None,
            })
            .await
            .unwrap();
        Sessions {
            store,
            middle: ids[0].clone(),
            last: ids[1].clone(),
            whole: ids[2].clone(),
            trip: trip.session_id.to_string(),
        }
    }

    async fn head(&self, id: &str) -> StoredRun {
        self.store
            .load(&SessionId::from(id))
            .await
            .unwrap()
            .unwrap()
    }
}

/// Checks that `r` reports session `id`'s log broken as the core does:
/// 500, `kind` `damaged`, the session, and the gap the core finds.
fn reports_the_break(r: &crate::support::Response, id: &str, core: &Value, what: &str) {
    assert_eq!(r.status, 500, "{what}: {}", r.body);
    let body = r.json();
    assert_eq!(body["kind"], "damaged", "{what}: {body}");
    assert_eq!(body["session"], id, "{what}: {body}");
    assert_eq!(body["gap"], *core, "{what}: {body}");
    let error = r.error();
    assert!(
        error.contains(id) && error.contains("the checkpoint log is broken"),
        "{what}: {error}"
    );
    assert!(!error.contains("has no checkpoint"), "{what}: {error}");
}

/// The gap the core's own check finds in `id`'s log, as the API writes
/// it.
async fn core_gap(store: &dyn SessionStore, s: &Sessions, id: &str) -> Value {
    let head = s.head(id).await;
    match read_log(store, &head, Span::Whole).await {
        Err(StoreError::Load(load)) => {
            let gap = load.gap.expect("a break of the log");
            let kind = match gap.kind {
                harness::session::GapKind::Missing => "missing",
                harness::session::GapKind::EndsEarly => "ends_early",
                other => panic!("{other:?}"),
            };
            json!({"kind": kind, "expected_seq": gap.expected_seq, "found_seq": gap.found_seq})
        }
        other => panic!("the core reads {id}'s log: {other:?}"),
    }
}

/// Breaks the logs of `s` with `loss`, then checks every call about each.
async fn breaks_are_reported(s: &Sessions, loss: &Loss, studio: &Serving) {
    // Where the records are: the trip's record of branch `square#1`.
    let r = get(
        studio,
        &format!("/api/sessions/{}/timeline?path=square%231", s.trip),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let branch: Vec<u64> = r.json()["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "branch")
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(branch.len(), 1, "{}", r.body);
    let trip_before = get(studio, &format!("/api/sessions/{}/timeline", s.trip))
        .await
        .json()["total"]
        .as_u64()
        .unwrap();
    let last = s.head(&s.last).await.last_seq;
    assert!(last > 6, "{last}");

    loss.lose(&s.middle, 5);
    loss.lose(&s.last, last);
    loss.lose(&s.trip, branch[0]);

    let cases = [
        (
            &s.middle,
            json!({"kind": "missing", "expected_seq": 5, "found_seq": 6}),
        ),
        (
            &s.last,
            json!({"kind": "ends_early", "expected_seq": last, "found_seq": null}),
        ),
        (
            &s.trip,
            json!({"kind": "missing", "expected_seq": branch[0], "found_seq": branch[0] + 1}),
        ),
    ];
    for (id, gap) in &cases {
        // The studio finds what the core finds.
        assert_eq!(core_gap(&*s.store, s, id).await, *gap, "{id}");
        for path in [
            format!("/api/sessions/{id}"),
            format!("/api/sessions/{id}/timeline"),
            format!("/api/sessions/{id}/timeline?path="),
            format!("/api/sessions/{id}/timeline?offset=0&limit=1"),
            format!("/api/sessions/{id}/state"),
            format!("/api/sessions/{id}/state?seq=0"),
            format!("/api/sessions/{id}/state?seq=1&pointer=/state"),
        ] {
            let r = get(studio, &path).await;
            reports_the_break(&r, id, gap, &path);
        }
        // Its head reads: the list and the summary show it.
        let r = get(studio, &format!("/api/sessions/{id}/summary")).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    // Not the trip's timeline less one branch: an error, for every task.
    for path in ["square%230", "square%231", "review"] {
        let r = get(
            studio,
            &format!("/api/sessions/{}/timeline?path={path}", s.trip),
        )
        .await;
        reports_the_break(&r, &s.trip, &cases[2].1, path);
    }
    assert!(trip_before > 0);
    // A whole session reads as ever.
    for path in [
        format!("/api/sessions/{}", s.whole),
        format!("/api/sessions/{}/timeline", s.whole),
        format!("/api/sessions/{}/state", s.whole),
    ] {
        let r = get(studio, &path).await;
        assert_eq!(r.status, 200, "{path}: {}", r.body);
    }
    let r = get(studio, "/api/sessions").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json().as_array().unwrap().len(), 4, "{}", r.body);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_missing_from_a_file_store_is_reported_as_damage_not_shown_short() {
    let dir = temp_dir("broken-log-file");
    let _dir = TempDir(dir.clone());
    let root = dir.join("sessions");
    let store: Arc<dyn SessionStore> = Arc::new(FileStore::open(&root).unwrap());
    let s = Sessions::on(Arc::clone(&store)).await;
    let studio = Studio::read_only(Arc::clone(&store))
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let loss = Loss::File(root.clone());
    // The files after the loss are left as they are.
    let before = {
        breaks_are_reported(&s, &loss, &studio).await;
        files(&root)
    };
    // Asked again, the same, and nothing written.
    let r = get(&studio, &format!("/api/sessions/{}/state", s.last)).await;
    assert_eq!(r.status, 500, "{}", r.body);
    studio.shutdown().await.unwrap();
    assert!(before == files(&root), "a file of the store changed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_missing_from_a_sled_store_is_reported_as_damage_not_shown_short() {
    let dir = temp_dir("broken-log-sled");
    let _dir = TempDir(dir.clone());
    let sled: Arc<dyn SessionStore> = Arc::new(SledStore::open(dir.join("db")).unwrap());
    let hiding = Arc::new(Hiding {
        inner: sled,
        hidden: Mutex::new(Vec::new()),
    });
    let store: Arc<dyn SessionStore> = hiding.clone();
    let s = Sessions::on(Arc::clone(&store)).await;
    let studio = Studio::read_only(Arc::clone(&store))
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    breaks_are_reported(&s, &Loss::Hide(hiding), &studio).await;
    studio.shutdown().await.unwrap();
}

/// Whether every panel of a session is empty on the page, and the
/// question and its form hidden.
const NOTHING_DRAWN: &str = "document.querySelector('#waiting-panel').hidden && \
     document.querySelector('#answer-form').hidden && \
     document.querySelector('#interrupt-payload').childElementCount === 0 && \
     document.querySelector('#graph').childElementCount === 0 && \
     document.querySelector('#timeline').childElementCount === 0 && \
     document.querySelector('#state-tree').childElementCount === 0 && \
     document.querySelector('#journal').childElementCount === 0 && \
     document.querySelector('#fork-form').hidden";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_a_session_with_a_broken_log_shows_its_damage_and_nothing_of_the_one_before() {
    let dir = temp_dir("broken-log-browser");
    let _dir = TempDir(dir.clone());
    let root = dir.join("sessions");
    let store: Arc<dyn SessionStore> = Arc::new(FileStore::open(&root).unwrap());
    let harness = review_harness(Arc::clone(&store));
    let agent = create_agent("reviews", &harness);
    let waiting = agent
        .run(Doc::default())
        .await
        .unwrap()
        .session_id
        .to_string();
    let broken = agent.run(Doc::default()).await.unwrap();
    agent
        .resume(
            json!({"approve": true, "note": "fine"}),
            &broken.session_id,
            &broken.interrupt.clone().unwrap().id,
        )
        .await
        .unwrap()
        .await
        .unwrap();
    let broken = broken.session_id.to_string();
    Loss::File(root.clone()).lose(&broken, 1);
    let before = files(&root);
    let studio = Studio::for_agent(&agent, &harness, Arc::clone(&store))
        .unwrap()
        .expect_answer::<Review>("review")
        .poll_interval(Duration::from_millis(100))
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();

    // The waiting session, with its question and the form to answer it.
    let mut b = Browser::open_session(&studio.url(), &waiting).await;
    b.wait_for(
        "the answer form",
        "!document.querySelector('#answer-form').hidden && \
         document.querySelector('#state-tree').childElementCount > 0",
    )
    .await;
    b.type_into("#answer", "{\"approve\": true}").await;

    // The broken one: its damage, and nothing of the waiting one.
    b.pick(&broken).await;
    b.wait_for(
        "the damage",
        "document.querySelector('#session-error').textContent.includes('the checkpoint log is broken')",
    )
    .await;
    let error = b.text("#session-error").await;
    assert!(
        error.contains(&broken) && error.contains("expected checkpoint 1"),
        "{error}"
    );
    assert_eq!(b.text("#session-id").await, broken);
    assert_eq!(
        b.eval("document.querySelector('#session-pane').dataset.damaged")
            .await,
        json!("true")
    );
    assert_eq!(b.eval(&format!("!!({NOTHING_DRAWN})")).await, json!(true));
    // What its head says, which reads: the agent, the phase.
    assert_eq!(b.text("#session-agent").await, "reviews");
    assert_eq!(
        b.eval("document.querySelector('#phase').dataset.phase")
            .await,
        json!("done")
    );
    assert_eq!(b.value("#answer").await, "", "the answer typed is gone");
    // It stays so as the event stream goes on (here with a session that
    // appears), asked for once: an event does not load again a session whose
    // load failed at the version it brings (each load blanked its error while
    // under way).
    let other = agent
        .run(Doc::default())
        .await
        .unwrap()
        .session_id
        .to_string();
    b.wait_for(
        "the new session listed",
        &format!("document.querySelector('#sessions tr[data-id=\"{other}\"]')"),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(b.eval(&format!("!!({NOTHING_DRAWN})")).await, json!(true));
    assert_eq!(b.text("#session-id").await, broken);
    assert!(
        b.text("#session-error")
            .await
            .contains("the checkpoint log is broken")
    );
    let detail = format!("/api/sessions/{broken}");
    assert_eq!(
        b.eval(&format!(
            "performance.getEntriesByType('resource').filter(e => new URL(e.name).pathname === '{detail}').length"
        ))
        .await,
        json!(1),
        "the damaged session's detail is asked for once"
    );

    // Back to the waiting one: all of it again.
    b.pick(&waiting).await;
    b.wait_for(
        "the waiting session again",
        "!document.querySelector('#answer-form').hidden && \
         document.querySelector('#session-error').textContent === '' && \
         document.querySelector('#state-tree').childElementCount > 0 && \
         document.querySelector('#timeline').childElementCount > 0",
    )
    .await;
    b.close().await;
    studio.shutdown().await.unwrap();
    // What the store held is as it was; the run of the other session (not
    // the studio) added its own files and a line to the store's feed.
    let mut after = files(&root);
    let feed = root.join("created.feed");
    let (fed, was_fed) = (after.remove(&feed), before.get(&feed));
    assert!(
        fed.is_some_and(|f| f.starts_with(was_fed.map_or(&[][..], Vec::as_slice))),
        "the feed was rewritten"
    );
    after.retain(|path, _| !path.to_string_lossy().contains(&other));
    let mut before = before;
    before.remove(&feed);
    assert!(before == after, "a file of the store changed");
}
