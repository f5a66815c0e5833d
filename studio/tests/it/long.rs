//! A long session whose state grows at every step: the timeline comes a
//! page at a time, each entry bounded, and neither it nor a state at a
//! checkpoint costs the whole state at every checkpoint (counted by the
//! items' own serializations).

use crate::support::{TempDir, get, temp_dir, thousands};
use harness::session::SessionStore;
use harness::{Agent, Harness, HarnessState, JsonSchema, create_agent};
use harness_stores::SledStore;
use harness_studio::{Serving, Studio};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Steps the session runs.
const STEPS: u64 = 1000;

/// How often an [`Item`] was serialized, by anyone.
static SERIALIZED: AtomicUsize = AtomicUsize::new(0);

/// Held by each test here: one long session at a time, as the count is
/// the process's.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// One item of the growing state; it counts its own serializations.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct Item(u64);

impl Serialize for Item {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        SERIALIZED.fetch_add(1, Ordering::SeqCst);
        s.serialize_u64(self.0)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
pub struct Growing {
    #[field(reduce = append)]
    pub items: Vec<Item>,
    #[field(reduce = add)]
    pub steps: u64,
}

struct Long {
    store: Arc<dyn SessionStore>,
    harness: Harness<Growing>,
    agent: Agent<Growing>,
    session: String,
    _dir: TempDir,
}

impl Long {
    /// A session of [`STEPS`] steps, each appending one item.
    async fn new() -> Long {
        let dir = temp_dir("long");
        let store: Arc<dyn SessionStore> = Arc::new(SledStore::open(dir.join("db")).unwrap());
        let harness = Harness::<Growing>::builder()
            .step("grow")
            .run(async |g: Arc<Growing>| {
                Ok(GrowingUpdate::new().items(vec![Item(g.steps)]).steps(1))
            })
            .route(|g: &Growing| if g.steps < STEPS { "more" } else { "enough" })
            .on("more")
            .to("grow")
            .on("enough")
            .end()
            .start("grow")
            .step_limit(STEPS + 10)
            .store(Arc::clone(&store))
            .build()
            .unwrap();
        let agent = create_agent("long", &harness);
        let out = agent.run(Growing::default()).await.unwrap();
        assert_eq!(out.state.steps, STEPS);
        Long {
            store,
            harness,
            agent,
            session: out.session_id.to_string(),
            _dir: TempDir(dir),
        }
    }

    async fn studio(&self) -> Serving {
        Studio::for_agent(&self.agent, &self.harness, Arc::clone(&self.store))
            .unwrap()
            .bind("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_session_with_a_growing_state_costs_its_length_not_its_square() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let w = Long::new().await;
    let s = w.studio().await;
    let n = usize::try_from(STEPS).unwrap();
    let count = || SERIALIZED.load(Ordering::SeqCst);

    // The timeline's last page: the latest records, each with what it
    // changed.
    let before = count();
    let r = get(&s, &format!("/api/sessions/{}/timeline", w.session)).await;
    let spent = count() - before;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        spent <= 4 * n,
        "the timeline serialized {spent} items for {n} steps"
    );
    assert!(r.body.len() < 200_000, "{} bytes", r.body.len());
    let t = r.json();
    let entries = t["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 100);
    let total = t["total"].as_u64().unwrap();
    assert!(total > STEPS, "every step, and the snapshots: {total}");
    assert_eq!(t["offset"].as_u64().unwrap(), total - 100);
    let last = entries.last().unwrap();
    assert_eq!(last["index"], STEPS);
    assert_eq!(
        last["changes"],
        json!([
            {"path": "/items", "op": "appended", "after": [STEPS - 1]},
            {"path": "/steps", "op": "changed", "before": STEPS - 1, "after": STEPS},
        ])
    );

    // An earlier page, asked for.
    let before = count();
    let page = get(
        &s,
        &format!("/api/sessions/{}/timeline?offset=1&limit=3", w.session),
    )
    .await
    .json();
    assert!(count() - before <= 4 * n);
    let indexes: Vec<u64> = page["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["index"].as_u64().unwrap())
        .collect();
    assert_eq!(indexes, [1, 2, 3]);
    assert_eq!(
        page["entries"][0]["changes"],
        json!([
            {"path": "/items", "op": "appended", "after": [0]},
            {"path": "/steps", "op": "changed", "before": 0, "after": 1},
        ])
    );

    // The state after step 500: its 500 items, serialized once.
    let around = get(
        &s,
        &format!("/api/sessions/{}/timeline?offset=495&limit=10", w.session),
    )
    .await
    .json();
    let seq = around["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["index"] == 500 && e["kind"] == "update")
        .unwrap()["seq"]
        .as_u64()
        .unwrap();
    let before = count();
    let st = get(&s, &format!("/api/sessions/{}/state?seq={seq}", w.session))
        .await
        .json();
    let spent = count() - before;
    assert!(spent <= 2 * n, "the state serialized {spent} items");
    assert_eq!(st["index"], 500);
    assert_eq!(st["state"]["steps"], 500);
    let items = st["state"]["items"].as_array().unwrap();
    assert_eq!(items.len(), 500);
    assert_eq!(items[499], 499);
    s.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_a_long_timeline_comes_a_page_at_a_time_from_the_latest() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let w = Long::new().await;
    let s = w.studio().await;
    let total = get(&s, &format!("/api/sessions/{}/timeline?limit=1", w.session))
        .await
        .json()["total"]
        .as_u64()
        .unwrap();
    let mut b = crate::browser::Browser::open_session(&s.url(), &w.session).await;
    let page = |from: u64, to: u64| {
        let range = format!(
            "{}\u{2013}{} of {}",
            thousands(from),
            thousands(to),
            thousands(total)
        );
        format!(
            "document.querySelectorAll('#timeline .checkpoint').length === {} && \
             !document.querySelector('#timeline-pager').hidden && \
             document.querySelector('#timeline-range').textContent === {}",
            to - from + 1,
            json!(range)
        )
    };
    // The last page first, its last checkpoint picked.
    b.wait_for("the last page", &page(total - 99, total)).await;
    let last = b
        .eval("document.querySelector('#timeline .checkpoint:last-child').dataset.step + ' ' + document.querySelector('#timeline .checkpoint:last-child').classList.contains('selected')")
        .await;
    assert_eq!(last, "grow true");
    assert!(
        b.eval("document.querySelector('#timeline-later').disabled")
            .await
            == json!(true)
    );
    // Earlier, then back.
    b.click("#timeline-earlier").await;
    b.wait_for("the page before", &page(total - 199, total - 100))
        .await;
    assert!(!b.has("#timeline .checkpoint.selected").await);
    b.click("#timeline-later").await;
    b.wait_for("the last page again", &page(total - 99, total))
        .await;
    assert_eq!(b.errors().await, "", "no error on the page");
    b.close().await;
    s.shutdown().await.unwrap();
}
