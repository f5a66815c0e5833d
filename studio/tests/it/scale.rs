//! A store with many sessions, and sessions with large states: the list
//! comes a page at a time, the event stream loads a bounded number of
//! heads per look, and a large state is cut, each cut opening by its
//! pointer. Bad query parameters are refused by name.

use crate::browser::Browser;
use crate::events::Events;
use crate::support::{
    Doc, DocUpdate, Review, TempDir, World, get, review_harness, temp_dir, thousands,
};
use harness::session::{Checkpoint, Commit, Created, SessionStore, StoreError, StoredRun};
use harness::{Agent, SessionId, create_agent};
use harness_stores::SledStore;
use harness_studio::{Serving, Studio};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// A real store, counting the heads loaded, the listings of every id made,
/// the ids read (by listings and pages) and the reads of its feed of
/// created sessions; with `feed` false, it keeps no feed (as a store
/// without one).
#[derive(Debug)]
struct Counting {
    inner: Arc<dyn SessionStore>,
    feed: bool,
    loads: AtomicUsize,
    listings: AtomicUsize,
    ids_read: AtomicUsize,
    pages: AtomicUsize,
    feeds: AtomicUsize,
}

impl Counting {
    fn reset(&self) {
        self.loads.store(0, Ordering::SeqCst);
        self.listings.store(0, Ordering::SeqCst);
        self.ids_read.store(0, Ordering::SeqCst);
        self.pages.store(0, Ordering::SeqCst);
        self.feeds.store(0, Ordering::SeqCst);
    }

    fn feeds(&self) -> usize {
        self.feeds.load(Ordering::SeqCst)
    }

    fn pages(&self) -> usize {
        self.pages.load(Ordering::SeqCst)
    }

    fn ids_read(&self) -> usize {
        self.ids_read.load(Ordering::SeqCst)
    }

    fn loads(&self) -> usize {
        self.loads.load(Ordering::SeqCst)
    }

    fn listings(&self) -> usize {
        self.listings.load(Ordering::SeqCst)
    }
}

#[async_trait::async_trait]
impl SessionStore for Counting {
    async fn load(&self, session: &SessionId) -> Result<Option<StoredRun>, StoreError> {
        self.loads.fetch_add(1, Ordering::SeqCst);
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
        self.listings.fetch_add(1, Ordering::SeqCst);
        let ids = self.inner.sessions().await?;
        self.ids_read.fetch_add(ids.len(), Ordering::SeqCst);
        Ok(ids)
    }

    async fn sessions_page(
        &self,
        prefix: &str,
        after: Option<&SessionId>,
        limit: usize,
    ) -> Result<Vec<SessionId>, StoreError> {
        self.pages.fetch_add(1, Ordering::SeqCst);
        let ids = self.inner.sessions_page(prefix, after, limit).await?;
        self.ids_read.fetch_add(ids.len(), Ordering::SeqCst);
        Ok(ids)
    }

    async fn created_since(
        &self,
        since: Option<u64>,
        limit: usize,
    ) -> Result<Option<Created>, StoreError> {
        if !self.feed {
            return Ok(None);
        }
        self.feeds.fetch_add(1, Ordering::SeqCst);
        let page = self.inner.created_since(since, limit).await?;
        if let Some(page) = &page {
            self.ids_read
                .fetch_add(page.sessions.len(), Ordering::SeqCst);
        }
        Ok(page)
    }

    async fn flush(&self) -> Result<(), StoreError> {
        self.inner.flush().await
    }

    fn now(&self) -> u64 {
        self.inner.now()
    }
}

/// The review agent on a counting sled store holding `n` sessions, each
/// waiting for its review.
struct Crowd {
    counting: Arc<Counting>,
    store: Arc<dyn SessionStore>,
    agent: Agent<Doc>,
    harness: harness::Harness<Doc>,
    /// Each session's id and the interrupt it waits on.
    waiting: Vec<(String, String)>,
    _dir: TempDir,
}

impl Crowd {
    async fn new(name: &str, n: usize) -> Crowd {
        Self::with_feed(name, n, true).await
    }

    /// A crowd whose store keeps a feed of created sessions, or not.
    async fn with_feed(name: &str, n: usize, feed: bool) -> Crowd {
        let dir = temp_dir(name);
        let counting = Arc::new(Counting {
            inner: Arc::new(SledStore::open(dir.join("db")).unwrap()),
            feed,
            loads: AtomicUsize::new(0),
            listings: AtomicUsize::new(0),
            ids_read: AtomicUsize::new(0),
            pages: AtomicUsize::new(0),
            feeds: AtomicUsize::new(0),
        });
        let store: Arc<dyn SessionStore> = counting.clone();
        let harness = review_harness(Arc::clone(&store));
        let agent = create_agent("reviews", &harness);
        let mut waiting = Vec::new();
        for _ in 0..n {
            let out = agent.run(Doc::default()).await.unwrap();
            waiting.push((
                out.session_id.to_string(),
                out.interrupt.unwrap().id.to_string(),
            ));
        }
        Crowd {
            counting,
            store,
            agent,
            harness,
            waiting,
            _dir: TempDir(dir),
        }
    }

    /// Approves the review the session `id` waits on (`interrupt`), which
    /// ends it; returns `id`.
    async fn approve(&self, (id, interrupt): (String, String)) -> String {
        self.agent
            .resume(
                json!({"approve": true, "note": "ok"}),
                &id.clone().into(),
                &interrupt.into(),
            )
            .await
            .unwrap()
            .await
            .unwrap();
        id
    }

    async fn studio(&self) -> Serving {
        Studio::for_agent(&self.agent, &self.harness, Arc::clone(&self.store))
            .unwrap()
            .expect_answer::<Review>("review")
            .poll_interval(Duration::from_millis(50))
            .bind("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap()
    }
}

fn ids(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_list_comes_a_page_at_a_time_loading_only_the_page_s_heads() {
    let c = Crowd::new("pages", 250).await;
    let s = c.studio().await;
    let all: BTreeSet<String> = c.waiting.iter().map(|(id, _)| id.clone()).collect();

    // The first page: the default size, and where the next one starts.
    c.counting.reset();
    let r = get(&s, "/api/sessions").await;
    assert_eq!(r.status, 200, "{}", r.body);
    let first = ids(&r.json());
    assert_eq!(first.len(), 100);
    assert!(
        c.counting.loads() <= 100,
        "a page of 100 loaded {} heads",
        c.counting.loads()
    );
    assert!(r.header("x-next-after").is_some(), "{:?}", r.headers);
    // Newest first within the page.
    let times: Vec<u64> = r
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["updated_at"].as_u64().unwrap())
        .collect();
    assert!(times.windows(2).all(|w| w[0] >= w[1]), "{times:?}");

    // Page after page, each session once, up to a last page without a
    // cursor.
    let mut seen: Vec<String> = Vec::new();
    let mut path = "/api/sessions?limit=30".to_owned();
    let mut pages = 0;
    loop {
        c.counting.reset();
        let r = get(&s, &path).await;
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        assert!(
            c.counting.loads() <= 30,
            "{path}: {} heads",
            c.counting.loads()
        );
        // The ids of the page and one more, never a listing of all 250.
        assert!(
            c.counting.ids_read() <= 31 && c.counting.listings() == 0,
            "{path}: {} ids read, {} listings",
            c.counting.ids_read(),
            c.counting.listings()
        );
        let page = ids(&r.json());
        assert!(page.len() <= 30);
        seen.extend(page);
        pages += 1;
        match r.header("x-next-after") {
            Some(after) => path = format!("/api/sessions?limit=30&after={after}"),
            None => break,
        }
    }
    assert_eq!(pages, 9, "250 sessions in pages of 30");
    assert_eq!(seen.len(), 250, "no session twice");
    assert_eq!(seen.iter().cloned().collect::<BTreeSet<_>>(), all);

    // An `after` that is no session (one removed between two pages) is a
    // place in the order all the same: the page goes on after it.
    let sorted: Vec<String> = all.iter().cloned().collect();
    let gone = format!("{}-removed", sorted[99]);
    let r = get(&s, &format!("/api/sessions?limit=5&after={gone}")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let mut page = ids(&r.json());
    page.sort();
    assert_eq!(page, sorted[100..105], "the five after {gone}");
    let r = get(&s, "/api/sessions?after=%7E").await;
    assert_eq!((r.status, ids(&r.json()).len()), (200, 0), "after every id");
    assert!(r.header("x-next-after").is_none());

    // The largest page holds them all, and says there is no more.
    let r = get(&s, "/api/sessions?limit=1000").await;
    assert_eq!(ids(&r.json()).len(), 250);
    assert!(r.header("x-next-after").is_none());

    // A filter that matches few: pages keep their bound, and the cursor
    // goes on from the last session looked at.
    let done = c.approve(c.waiting[7].clone()).await;
    let mut found = Vec::new();
    let mut path = "/api/sessions?phase=done&limit=1".to_owned();
    loop {
        c.counting.reset();
        let r = get(&s, &path).await;
        assert_eq!(r.status, 200, "{}", r.body);
        // The ids of a page a filter leaves short are read in rounds that
        // double: a few reads, not one per session looked at.
        assert!(
            c.counting.pages() <= 10,
            "{path}: {} reads of ids for {} heads",
            c.counting.pages(),
            c.counting.loads()
        );
        found.extend(ids(&r.json()));
        match r.header("x-next-after") {
            Some(after) => path = format!("/api/sessions?phase=done&limit=1&after={after}"),
            None => break,
        }
    }
    assert_eq!(found, [done]);
    s.shutdown().await.unwrap();
}

/// Each look of the event stream loads the heads it follows and no more,
/// and finds new sessions in the store's feed of created sessions, reading
/// no id that was not created since (sled keeps a feed); on a store that
/// keeps none, by a listing of every id at each look.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_loads_a_bounded_number_of_heads_per_look() {
    for feed in [true, false] {
        event_stream_looks(feed).await;
    }
}

async fn event_stream_looks(feed: bool) {
    let c = Crowd::with_feed("stream", 250, feed).await;
    let s = c.studio().await;
    // A session past the first page of the list, named by the client.
    let first = ids(&get(&s, "/api/sessions").await.json());
    let (named, interrupt) = c
        .waiting
        .iter()
        .find(|(id, _)| !first.contains(id))
        .unwrap()
        .clone();
    let (status, head, mut events) = Events::open_with(&s, &format!("&watch={named}")).await;
    assert_eq!(status, 200, "{head}");
    let (name, list) = events.next().await.unwrap();
    assert_eq!(name, "sessions");
    let listed = ids(&list);
    assert_eq!(listed.len(), 101, "the first page and the session named");
    assert!(listed.contains(&named));
    for id in &first {
        assert!(listed.contains(id), "{id}");
    }

    // Looks while nothing changes: a read of the feed each and no id read
    // (or, with no feed, a listing of every id), and the heads of the
    // sessions followed only.
    c.counting.reset();
    // At least 3 looks (about 800 ms; up to 30 s on a loaded machine).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let looks = c.counting.feeds().max(c.counting.listings());
        if looks >= 3 || std::time::Instant::now() > deadline {
            break;
        }
    }
    let (feeds, listings, loads) = (
        c.counting.feeds(),
        c.counting.listings(),
        c.counting.loads(),
    );
    let looks = if feed {
        assert_eq!(listings, 0, "no listing of every id, {feeds} looks");
        assert_eq!(c.counting.ids_read(), 0, "ids read in {feeds} looks");
        feeds
    } else {
        assert_eq!(feeds, 0);
        listings
    };
    assert!(looks >= 3, "{looks} looks");
    // A look under way at the reset may count its heads, not its listing.
    assert!(
        loads <= (looks + 1) * 101,
        "{loads} heads in {looks} looks: more than the 101 followed"
    );

    // The session named changes elsewhere: the stream says so.
    c.agent
        .resume(
            json!({"approve": true, "note": "from elsewhere"}),
            &named.clone().into(),
            &interrupt.into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    // A new session appears.
    let new = c
        .agent
        .run(Doc::default())
        .await
        .unwrap()
        .session_id
        .to_string();
    // A look may meet the new session mid-run and send it again once it
    // stops: wait for the version it stopped at.
    let last = c
        .store
        .load(&new.clone().into())
        .await
        .unwrap()
        .unwrap()
        .version;
    let (mut named_done, mut new_seen) = (false, false);
    while !(named_done && new_seen) {
        let (name, data) = events.next().await.expect("the stream goes on");
        assert_eq!(name, "session", "{data}");
        let id = data["id"].as_str().unwrap();
        if id == named && data["phase"] == "done" {
            named_done = true;
        } else if id == new {
            let version = data["version"].as_u64().unwrap();
            assert!(version <= last, "{data}");
            new_seen = version == last;
        } else {
            assert!(id == named, "only the changed sessions: {data}");
        }
    }

    // 120 new sessions at once: each sent once, over two looks (at most
    // 100 new heads a look), reading from the feed their ids and no other.
    c.counting.reset();
    let mut created = BTreeSet::new();
    for _ in 0..120 {
        let out = c.agent.run(Doc::default()).await.unwrap();
        created.insert(out.session_id.to_string());
    }
    // A session a look met mid-run is sent again when it changes, never
    // twice at one version.
    let mut sent = std::collections::BTreeMap::new();
    while sent.len() < created.len() {
        let (name, data) = events.next().await.expect("the stream goes on");
        assert_eq!(name, "session", "{data}");
        let id = data["id"].as_str().unwrap().to_owned();
        assert!(created.contains(&id), "only the new sessions: {data}");
        let version = data["version"].as_u64().unwrap();
        if let Some(before) = sent.insert(id, version) {
            assert!(version > before, "sent again unchanged: {data}");
        }
    }
    if feed {
        assert_eq!(c.counting.listings(), 0);
        assert_eq!(c.counting.ids_read(), 120, "ids read for 120 new sessions");
    }
    s.shutdown().await.unwrap();
}

/// `text` percent-encoded for a query string.
fn enc(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_state_is_cut_and_each_cut_opens_by_its_pointer() {
    let w = World::new("large-state").await;
    let big = "word ".repeat(200_000);
    let items: Vec<String> = (0..3000).map(|i| format!("{i:0>100}")).collect();
    let mut log = vec![big.clone()];
    log.extend(items.iter().cloned());
    let fork = w
        .agent
        .fork(&w.done.clone().into(), 1, Some(DocUpdate::new().log(log)))
        .await
        .unwrap()
        .to_string();
    let s = w.studio().await;
    let r = get(&s, &format!("/api/sessions/{fork}/state")).await;
    assert_eq!(r.status, 200, "{}", &r.body[..r.body.len().min(500)]);
    assert!(
        r.body.len() < 300 * 1024,
        "a state of 1.3 MB sent as {} bytes",
        r.body.len()
    );
    let st = r.json();
    assert_eq!(st["merged"], true);
    // The log: "drafted", the large one, then the items.
    assert_eq!(st["state"]["log"][0], "drafted");
    assert!(st["state"]["log"][1].is_null());
    assert_eq!(st["state"]["log"][2], items[0].as_str());
    assert_eq!(st["state"]["log"].as_array().unwrap().len(), 100);
    assert_eq!(st["state"]["drafts"], 1);
    let cuts = st["cuts"].as_array().unwrap();
    let cut = |pointer: &str| {
        cuts.iter()
            .find(|c| c["pointer"] == pointer)
            .unwrap_or_else(|| panic!("no cut at {pointer}: {cuts:?}"))
            .clone()
    };
    let text = cut("/state/log/1");
    assert_eq!(text["kind"], "value");
    assert_eq!(text["bytes"], big.len() + 2);
    assert_eq!(text["preview"].as_str().unwrap().len(), 2048);
    assert!(text["preview"].as_str().unwrap().starts_with("\"word word"));
    let entries = cut("/state/log");
    assert_eq!(
        entries,
        json!({"kind": "entries", "pointer": "/state/log", "offset": 0, "kept": 100, "total": 3002})
    );

    // The large string by its pointer: a longer beginning.
    let seq = st["seq"].as_u64().unwrap();
    let at = |q: String| {
        let s = &s;
        let path = format!("/api/sessions/{fork}/state?seq={seq}&{q}");
        async move { get(s, &path).await }
    };
    let r = at(format!("pointer={}", enc("/state/log/1"))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let one = r.json();
    assert!(one["value"].is_null());
    assert_eq!(one["cuts"][0]["pointer"], "/state/log/1");
    assert_eq!(
        one["cuts"][0]["preview"].as_str().unwrap().len(),
        256 * 1024
    );
    // The items from an offset: the last ones, numbered in the whole log.
    let tail = at(format!("pointer={}&offset=2950", enc("/state/log")))
        .await
        .json();
    assert_eq!(tail["offset"], 2950);
    assert_eq!(tail["value"].as_array().unwrap().len(), 52);
    assert_eq!(tail["value"][0], items[2948].as_str());
    assert_eq!(
        tail["cuts"],
        json!([{"kind": "entries", "pointer": "/state/log", "offset": 2950, "kept": 52, "total": 3002}])
    );
    // A small value by its pointer: whole.
    let one = at(format!("pointer={}", enc("/state/log/2"))).await.json();
    assert_eq!(one["value"], items[0].as_str());
    assert_eq!(one["cuts"], json!([]));

    // Read-only, the state as stored is cut alike, and each cut opens.
    let ro = w.read_only().await;
    let r = get(&ro, &format!("/api/sessions/{fork}/state")).await;
    assert_eq!(r.status, 200);
    assert!(r.body.len() < 300 * 1024, "{} bytes", r.body.len());
    let st = r.json();
    assert_eq!(st["merged"], false);
    let cuts = st["cuts"].as_array().unwrap();
    assert!(!cuts.is_empty());
    for c in cuts {
        let pointer = c["pointer"].as_str().unwrap();
        let path = format!(
            "/api/sessions/{fork}/state?seq={}&pointer={}",
            st["seq"],
            enc(pointer)
        );
        let r = get(&ro, &path).await;
        assert_eq!(r.status, 200, "{pointer}: {}", r.body);
        assert!(
            r.body.len() < 300 * 1024,
            "{pointer}: {} bytes",
            r.body.len()
        );
    }
    ro.shutdown().await.unwrap();
    s.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_query_parameters_are_refused_with_a_typed_error_naming_each() {
    let w = World::new("bad-query").await;
    let s = w.studio().await;
    let state = format!("/api/sessions/{}/state", w.done);
    let cases = [
        ("/api/sessions?limit=0".to_owned(), "limit", "out of range"),
        ("/api/sessions?limit=-1".to_owned(), "limit", "negative"),
        (
            "/api/sessions?limit=ten".to_owned(),
            "limit",
            "not a number",
        ),
        (
            "/api/sessions?limit=1001".to_owned(),
            "limit",
            "from 1 to 1000",
        ),
        (
            "/api/sessions?limit=99999999999999999999999".to_owned(),
            "limit",
            "too large",
        ),
        ("/api/sessions?limit=".to_owned(), "limit", "empty"),
        (
            "/api/sessions?limit=5&limit=6".to_owned(),
            "limit",
            "more than once",
        ),
        ("/api/sessions?after=".to_owned(), "after", "empty"),
        (
            "/api/sessions?limt=5".to_owned(),
            "limt",
            "no such parameter",
        ),
        ("/api/sessions?phase=paused".to_owned(), "phase", "waiting"),
        (format!("{state}?seq=-1"), "seq", "negative"),
        (format!("{state}?seq=first"), "seq", "not a number"),
        (
            format!("{state}?pointer=state"),
            "pointer",
            "starts with `/`",
        ),
        (
            format!("{state}?pointer=%2Fnope"),
            "pointer",
            "no value there",
        ),
        (format!("{state}?offset=3"), "offset", "`pointer`"),
        (
            format!("{state}?pointer=%2Fstate%2Flog&offset=-3"),
            "offset",
            "negative",
        ),
        (
            format!("{state}?pointer=%2Fstate%2Flog&offset=9"),
            "offset",
            "3 entries",
        ),
        (
            format!("{state}?pointer=%2Fstate%2Fdrafts&offset=0"),
            "offset",
            "no array",
        ),
        ("/api/events?watch=".to_owned(), "watch", "empty"),
        ("/api/events?wtch=x".to_owned(), "wtch", "no such parameter"),
        (
            format!(
                "/api/events?{}",
                (0..21)
                    .map(|i| format!("watch=s{i}"))
                    .collect::<Vec<_>>()
                    .join("&")
            ),
            "watch",
            "at most 20",
        ),
    ];
    for (path, parameter, says) in cases {
        let r = get(&s, &path).await;
        assert_eq!(r.status, 400, "{path}: {}", r.body);
        let body = r.json();
        assert_eq!(body["kind"], "parameter", "{path}: {}", r.body);
        assert_eq!(body["parameter"], parameter, "{path}: {}", r.body);
        assert!(r.error().contains(says), "{path}: {}", r.body);
    }
    // The token is no parameter of the calls: given in the URL, it is read.
    let r = get(&s, &format!("/api/sessions?limit=2&token={}", s.token())).await;
    assert_eq!(r.status, 200, "{}", r.body);
    s.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_timeline_query_values_are_refused_with_a_typed_error_naming_each() {
    let w = World::new("bad-timeline").await;
    let s = w.studio().await;
    let timeline = format!("/api/sessions/{}/timeline", w.done);
    let cases = [
        ("limit=0", "limit", "out of range"),
        ("limit=501", "limit", "from 1 to 500"),
        ("limit=-1", "limit", "negative"),
        ("limit=ten", "limit", "not a number"),
        ("limit=", "limit", "empty"),
        ("limit=5&limit=6", "limit", "more than once"),
        ("offset=-3", "offset", "negative"),
        ("offset=first", "offset", "not a number"),
        ("offset=99999999999999999999999", "offset", "too large"),
        ("offset=1&limit=1.5", "limit", "not a number"),
        ("path=a//b", "path", "task's path"),
        ("path=%2Freview", "path", "task's path"),
        ("path=%20", "path", "task's path"),
        ("path=a&path=b", "path", "more than once"),
        ("path=%zz", "path", "two hex digits"),
        ("path=%FF", "path", "not UTF-8"),
        ("task=review", "task", "no such parameter"),
        ("seq=1", "seq", "no such parameter"),
    ];
    for (query, parameter, says) in cases {
        let path = format!("{timeline}?{query}");
        let r = get(&s, &path).await;
        assert_eq!(r.status, 400, "{path}: {}", r.body);
        assert!(
            r.header("content-type")
                .is_some_and(|t| t.starts_with("application/json")),
            "{path}: {:?}",
            r.headers
        );
        let body = r.json();
        assert_eq!(body["kind"], "parameter", "{path}: {}", r.body);
        assert_eq!(body["parameter"], parameter, "{path}: {}", r.body);
        assert!(r.error().contains(says), "{path}: {}", r.body);
    }

    // Good values read as before; the token may come in the URL.
    let all = get(&s, &timeline).await.json();
    let total = all["total"].as_u64().unwrap();
    assert!(total >= 3, "{all}");
    assert_eq!(all["limit"], 100);
    for (query, offset, entries) in [
        ("limit=1".to_owned(), total - 1, 1),
        ("offset=0&limit=2".to_owned(), 0, 2),
        ("offset=1&limit=500".to_owned(), 1, total - 1),
        ("offset=999999".to_owned(), total, 0),
        ("path=".to_owned(), total.saturating_sub(100), total),
        (format!("limit=1&token={}", s.token()), total - 1, 1),
    ] {
        let r = get(&s, &format!("{timeline}?{query}")).await;
        assert_eq!(r.status, 200, "{query}: {}", r.body);
        let t = r.json();
        assert_eq!(t["offset"], offset, "{query}: {t}");
        assert_eq!(
            t["entries"].as_array().unwrap().len() as u64,
            entries,
            "{query}: {t}"
        );
    }
    s.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_search_and_the_phase_filter_find_sessions_past_the_first_page() {
    let c = Crowd::new("browser-filter", 150).await;
    let s = c.studio().await;
    let first = ids(&get(&s, "/api/sessions").await.json());
    assert_eq!(first.len(), 100);
    let beyond: Vec<(String, String)> = c
        .waiting
        .iter()
        .filter(|(id, _)| !first.contains(id))
        .cloned()
        .collect();
    let within: Vec<(String, String)> = c
        .waiting
        .iter()
        .filter(|(id, _)| first.contains(id))
        .cloned()
        .collect();
    assert_eq!(beyond.len(), 50);
    // Done: one session of the first page, two past it.
    let mut done = vec![
        c.approve(within[0].clone()).await,
        c.approve(beyond[0].clone()).await,
        c.approve(beyond[1].clone()).await,
    ];
    let sought = beyond[2].0.clone();

    let mut b = Browser::open(&s.url()).await;
    let rows = "document.querySelectorAll('#sessions tbody tr').length";
    let row = |id: &str| format!("document.querySelector('#sessions tr[data-id=\"{id}\"]')");
    b.wait_for(
        "the first page",
        &format!("{rows} === 100 && !document.querySelector('#list-more').hidden"),
    )
    .await;
    assert!(!b.has(&format!("#sessions tr[data-id=\"{sought}\"]")).await);
    // Every URL the page asks for, from here on.
    b.eval(
        "window.asked = []; const f = window.fetch; \
         window.fetch = (url, options) => { window.asked.push(String(url)); return f(url, options); }; true",
    )
    .await;

    // A session only on the second page, found by searching its id.
    b.type_into("#search", &sought).await;
    b.wait_for(
        "the session searched for",
        &format!("{rows} === 1 && {}", row(&sought)),
    )
    .await;
    let asked = b.eval("window.asked.join(' ')").await;
    assert!(
        asked.as_str().unwrap().contains(&format!("q={sought}")),
        "{asked}"
    );
    // Part of its id, in capitals: the server's search, case-insensitive.
    b.type_into("#search", &sought[..13].to_uppercase()).await;
    b.wait_for("the part searched for", &row(&sought)).await;
    // The search cleared: the first page again.
    b.eval(
        "document.querySelector('#search').value = ''; \
         document.querySelector('#search').dispatchEvent(new Event('input'))",
    )
    .await;
    b.wait_for(
        "the first page again",
        &format!("{rows} === 100 && !document.querySelector('#list-more').hidden"),
    )
    .await;

    // The phase filter: the done sessions past the first page too.
    let phase = |p: &str| {
        format!(
            "(() => {{ const f = document.querySelector('#phase-filter'); f.value = '{p}'; \
             f.dispatchEvent(new Event('change')); return true; }})()"
        )
    };
    b.eval(&phase("done")).await;
    let every_done = format!(
        "{rows} === {} && {} && document.querySelector('#list-more').hidden",
        done.len(),
        done.iter()
            .map(|id| row(id))
            .collect::<Vec<_>>()
            .join(" && ")
    );
    b.wait_for("the three done sessions", &every_done).await;

    // Live, under the filter: a session done elsewhere comes in; a new
    // waiting one does not.
    let new = c
        .agent
        .run(Doc::default())
        .await
        .unwrap()
        .session_id
        .to_string();
    done.push(c.approve(within[1].clone()).await);
    let every_done = format!(
        "{rows} === {} && {}",
        done.len(),
        done.iter()
            .map(|id| row(id))
            .collect::<Vec<_>>()
            .join(" && ")
    );
    b.wait_for("the session done elsewhere", &every_done).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(b.eval(rows).await, json!(done.len()));
    assert!(!b.has(&format!("#sessions tr[data-id=\"{new}\"]")).await);
    assert_eq!(
        b.eval("[...document.querySelectorAll('#sessions tbody tr')].every(r => r.dataset.phase === 'done')")
            .await,
        json!(true)
    );

    // Waiting: a first page, then "load more" with the same filter.
    let waiting = 150 + 1 - done.len();
    b.eval(&phase("waiting")).await;
    b.wait_for(
        "the first page of those waiting",
        &format!("{rows} === 100 && !document.querySelector('#list-more').hidden"),
    )
    .await;
    b.click("#list-more").await;
    b.wait_for(
        "every session waiting",
        &format!("{rows} === {waiting} && document.querySelector('#list-more').hidden"),
    )
    .await;
    let more = b
        .eval("window.asked.filter(u => u.includes('after=')).join(' ')")
        .await;
    let more = more.as_str().unwrap();
    assert!(more.contains("phase=waiting&after="), "{more}");
    assert_eq!(
        b.eval("[...document.querySelectorAll('#sessions tbody tr')].every(r => r.dataset.phase === 'waiting')")
            .await,
        json!(true)
    );
    assert!(b.has(&format!("#sessions tr[data-id=\"{new}\"]")).await);
    assert_eq!(b.errors().await, "");
    b.close().await;
    s.shutdown().await.unwrap();
}

/// Run in the page before its own script: records every URL the page
/// asks for (`window.asked`), and holds the answer of the first timeline
/// it asks for until the event stream's first report has been handled.
/// The page then has the stream's report of the session it opened with
/// before it has that session loaded: the order that, under load, had it
/// load the session a second time, the second load rebuilding the state
/// tree after the reader had opened its cuts.
const HOLD_FIRST_LOAD: &str = "(() => {
    // In a function: a global `const fetch` would hide the wrapper from the
    // page's script.
    window.asked = [];
    let reported;
    const firstReport = new Promise((resolve) => { reported = resolve; });
    const Source = window.EventSource;
    window.EventSource = function (url) {
      const events = new Source(url);
      // Registered first: released once the page's own handlers have run.
      events.addEventListener('sessions', () => setTimeout(reported, 0), { once: true });
      return events;
    };
    const original = window.fetch;
    let held = false;
    window.fetch = (url, options) => {
      const u = String(url);
      window.asked.push(u);
      const answer = original(url, options);
      if (held || !(u.startsWith('/api/sessions/') && u.includes('/timeline'))) return answer;
      held = true;
      return firstReport.then(() => answer);
    };
})();";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_more_sessions_load_on_demand_and_a_cut_state_opens_where_cut() {
    let c = Crowd::new("browser-pages", 130).await;
    let big = "word ".repeat(100_000);
    let medium = "x".repeat(10_000);
    let items: Vec<String> = (0..3000).map(|i| format!("{i:0>100}")).collect();
    let mut log = vec![big.clone(), medium.clone()];
    log.extend(items.iter().cloned());
    let (first, _) = &c.waiting[0];
    let fork = c
        .agent
        .fork(&first.clone().into(), 1, Some(DocUpdate::new().log(log)))
        .await
        .unwrap();
    let s = c.studio().await;
    // Linked to the fork: the page shows it, and the first page of the list.
    let mut b = Browser::open_with(&format!("{}#session={fork}", s.url()), HOLD_FIRST_LOAD).await;
    let rows = "document.querySelectorAll('#sessions tbody tr').length";
    b.wait_for(
        "the first page and the fork",
        &format!(
            "{rows} >= 100 && document.querySelector('#sessions tr[data-id=\"{fork}\"]') && \
             !document.querySelector('#list-more').hidden"
        ),
    )
    .await;
    b.click("#list-more").await;
    b.wait_for(
        "every session",
        &format!("{rows} === 131 && document.querySelector('#list-more').hidden"),
    )
    .await;

    // The fork's state is cut: the two long texts ("drafted" comes
    // first) and the log's entries past the first hundred.
    let entries = "#state-tree li.cut[data-pointer=\"/state/log\"]";
    let text = "#state-tree span.cut[data-pointer=\"/state/log/1\"]";
    let shorter = "#state-tree span.cut[data-pointer=\"/state/log/2\"]";
    b.wait_for(
        "the cuts",
        &format!(
            "document.querySelector('{entries}') && document.querySelector('{text}') && \
             document.querySelector('{shorter}')"
        ),
    )
    .await;
    let total = items.len() + 3;
    assert!(
        b.text(entries)
            .await
            .contains(&format!("2,903 more of {}", thousands(total as u64))),
        "{}",
        b.text(entries).await
    );
    assert!(
        b.text(text)
            .await
            .contains(&format!("{} bytes, cut", thousands((big.len() + 2) as u64)))
    );
    let log = format!("document.querySelector('{entries}').parentElement");
    let count = format!("({log}).querySelectorAll(':scope > li:not(.cut)').length");
    assert_eq!(b.eval(&count).await, json!(100));

    // The next hundred entries, numbered in the whole log.
    b.eval(&format!(
        "document.querySelector('{entries} button').click()"
    ))
    .await;
    b.wait_for("the next hundred", &format!("{count} === 200"))
        .await;
    assert!(
        b.text(entries)
            .await
            .contains(&format!("2,803 more of {}", thousands(total as u64)))
    );
    let entry =
        |i: usize| format!("({log}).querySelectorAll(':scope > li:not(.cut)')[{i}].textContent");
    assert_eq!(
        b.eval(&entry(100)).await,
        json!(format!("100: {:?}", items[97]))
    );
    assert_eq!(
        b.eval(&entry(199)).await,
        json!(format!("199: {:?}", items[196]))
    );

    // The large text: a longer beginning, still marked as cut.
    b.eval(&format!("document.querySelector('{text} button').click()"))
        .await;
    b.wait_for(
        "a longer beginning",
        &format!(
            "document.querySelector('{text} .preview').textContent.length > 200000 && \
             !document.querySelector('{text} button')"
        ),
    )
    .await;
    let preview = format!("document.querySelector('{text} .preview').textContent");
    let shown = b.eval(&preview).await;
    let shown = shown.as_str().unwrap();
    // 256 KiB of its JSON, and the ellipsis.
    assert_eq!(shown.chars().count(), 256 * 1024 + 1);
    assert!(shown.starts_with("\"word word "), "{}", &shown[..40]);
    assert!(big.starts_with(&shown[1..shown.len() - "…".len()]));
    assert!(
        b.text(text)
            .await
            .contains(&format!("{} bytes, cut", thousands((big.len() + 2) as u64)))
    );

    // The shorter text, within what an opened value sends: whole.
    b.eval(&format!(
        "document.querySelector('{shorter}').parentElement.dataset.opened = 'log-2'; \
         document.querySelector('{shorter} button').click()"
    ))
    .await;
    let whole = "#state-tree li[data-opened=\"log-2\"] > span.t-string";
    b.wait_for(
        "the shorter text whole",
        &format!("document.querySelector('{whole}') && !document.querySelector('{shorter}')"),
    )
    .await;
    assert_eq!(b.text(whole).await, format!("{medium:?}"));

    // What was opened stays open while the event stream goes on reporting,
    // and the session was loaded once: its first load was under way when
    // the stream first reported it, at the version that load got.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(b.eval(&count).await, json!(200));
    assert!(!b.has(&format!("{text} button")).await);
    assert!(b.has(whole).await);
    let loads = b
        .eval(&format!(
            "window.asked.filter(u => u === '/api/sessions/{fork}').length"
        ))
        .await;
    assert_eq!(
        loads,
        json!(1),
        "{}",
        b.eval("window.asked.join(' ')").await
    );
    assert_eq!(b.errors().await, "");
    b.close().await;
    s.shutdown().await.unwrap();
}
