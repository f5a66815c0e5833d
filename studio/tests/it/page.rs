//! The page in Chromium, about what it shows while it loads and what it
//! hides: a session opened shows nothing of the one before while it loads
//! (its state marked loading), and a late answer about a session no
//! longer picked changes nothing; a store read from a copy says
//! "snapshot", not "live"; views the studio does not serve are not
//! displayed; memory labels holding a `/` read apart from a deeper
//! namespace.

use crate::browser::Browser;
use crate::support::{TempDir, World, temp_dir};
use harness_stores::SledStore;
use harness_studio::Studio;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// Holds the page's calls whose URL `window.holdIf(url)` says to hold,
/// until `window.release()` (which answers how many it let go).
const HOLD: &str = "(() => {
    window.holdIf = null;
    let held = [];
    const original = window.fetch;
    window.fetch = (url, options) => {
      const u = String(url);
      if (!window.holdIf || !window.holdIf(u)) return original(url, options);
      return new Promise((resolve, reject) => {
        held.push(() => original(url, options).then(resolve, reject));
      });
    };
    window.release = () => { const h = held; held = []; h.forEach((go) => go()); return h.length; };
})();";

/// The state drawn: loaded, not marked loading.
const STATE_SHOWN: &str = "document.querySelector('#state-tree').childElementCount > 0 && \
     document.querySelector('#state-at').textContent.startsWith('after step') && \
     !document.querySelector('#state-panel').dataset.loading";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_a_session_loading_shows_nothing_of_the_one_before_and_a_late_answer_changes_nothing()
 {
    let w = World::new("page-loading").await;
    let studio = w.studio().await;
    let mut b = Browser::open_with(&studio.url(), HOLD).await;
    b.wait_for(
        "the list",
        &format!(
            "document.querySelector('#sessions tr.row[data-id=\"{}\"]')",
            w.waiting
        ),
    )
    .await;
    b.pick(&w.waiting).await;
    b.wait_for(
        "the waiting session",
        &format!("!document.querySelector('#answer-form').hidden && {STATE_SHOWN}"),
    )
    .await;

    // The done one, its state held: its header and timeline come, its
    // state is marked loading, and nothing of the waiting one stays.
    b.eval(&format!(
        "window.holdIf = (u) => u.startsWith('/api/sessions/{}/state'); true",
        w.done
    ))
    .await;
    b.pick(&w.done).await;
    b.wait_for(
        "the done session's header and timeline",
        &format!(
            "document.querySelector('#session-id').textContent === '{}' && \
             document.querySelector('#phase').dataset.phase === 'done' && \
             document.querySelector('#timeline').childElementCount > 0",
            w.done
        ),
    )
    .await;
    let loading = b
        .eval(
            "({ tree: document.querySelector('#state-tree').childElementCount, \
               at: document.querySelector('#state-at').textContent, \
               marked: document.querySelector('#state-panel').dataset.loading, \
               waiting: document.querySelector('#waiting-panel').hidden, \
               form: document.querySelector('#answer-form').hidden })",
        )
        .await;
    assert_eq!(
        loading,
        json!({"tree": 0, "at": "loading…", "marked": "true", "waiting": true, "form": true})
    );
    assert_eq!(
        b.eval("window.holdIf = null; window.release()").await,
        json!(1)
    );
    b.wait_for("the done session's state", STATE_SHOWN).await;
    assert!(b.text("#state-tree").await.contains("published"));

    // The waiting one asked for and held whole, then the failed one: the
    // waiting one's answers, let go last, change nothing.
    b.eval(&format!(
        "window.holdIf = (u) => u.startsWith('/api/sessions/{}'); true",
        w.waiting
    ))
    .await;
    b.pick(&w.waiting).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        b.eval("document.querySelector('#state-tree').childElementCount")
            .await,
        json!(0),
        "the done session's state went at once"
    );
    b.eval("window.holdIf = null; true").await;
    b.pick(&w.failed).await;
    b.wait_for(
        "the failed session",
        &format!(
            "document.querySelector('#session-id').textContent === '{}' && \
             document.querySelector('#phase').dataset.phase === 'failed' && {STATE_SHOWN}",
            w.failed
        ),
    )
    .await;
    let released = b.eval("window.release()").await;
    assert!(released.as_u64().unwrap() >= 2, "{released}");
    tokio::time::sleep(Duration::from_millis(700)).await;
    let shown = b
        .eval(
            "({ id: document.querySelector('#session-id').textContent, \
               phase: document.querySelector('#phase').dataset.phase, \
               waiting: document.querySelector('#waiting-panel').hidden, \
               form: document.querySelector('#answer-form').hidden })",
        )
        .await;
    assert_eq!(
        shown,
        json!({"id": w.failed, "phase": "failed", "waiting": true, "form": true})
    );
    assert_eq!(b.errors().await, "", "no error on the page");
    b.close().await;
    studio.shutdown().await.unwrap();
}

/// Every element with the `hidden` attribute that is displayed anyway.
const HIDDEN_SHOWN: &str = "[...document.querySelectorAll('[hidden]')]\
     .filter((e) => getComputedStyle(e).display !== 'none')\
     .map((e) => e.tagName + '#' + e.id + '.' + e.className)";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_a_snapshot_says_so_and_views_not_served_are_not_displayed() {
    let w = World::new("page-snapshot").await;
    // A copy of the store taken at a known time (2023-11-14 22:13:20 UTC).
    let taken_at = 1_700_000_000_000u64;
    let studio = Studio::read_only(Arc::clone(&w.store))
        .snapshot(taken_at)
        .poll_interval(Duration::from_millis(100))
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let mut b = Browser::open(&studio.url()).await;
    b.wait_for(
        "the list and the badge",
        "document.querySelectorAll('#sessions tr.row').length === 3 && \
         document.querySelector('#live').classList.contains('snapshot')",
    )
    .await;
    // Once the event stream is open and has sent its list, still no
    // "live".
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let badge = b.text("#live").await;
    assert!(badge.starts_with("snapshot taken at "), "{badge}");
    assert!(badge.contains("2023"), "{badge}");
    assert_eq!(
        b.eval("document.querySelector('#live').classList.contains('on')")
            .await,
        json!(false)
    );
    assert_eq!(
        b.eval("document.querySelector('#live').dataset.takenAt")
            .await,
        json!(taken_at.to_string())
    );
    assert!(
        b.eval("document.querySelector('#live').title")
            .await
            .as_str()
            .unwrap()
            .contains("2023-11-14T22:13:20.000Z")
    );

    // No memory, no reports: neither view, nor their tabs, is displayed.
    assert_eq!(b.eval(HIDDEN_SHOWN).await, json!([]));
    for view in ["#memory-view", "#evals-view", "#views"] {
        assert_eq!(
            b.eval(&format!(
                "getComputedStyle(document.querySelector('{view}')).display"
            ))
            .await,
            json!("none"),
            "{view}"
        );
    }
    assert_eq!(
        b.eval("getComputedStyle(document.querySelector('#sessions-view')).display")
            .await,
        json!("grid")
    );
    b.close().await;
    studio.shutdown().await.unwrap();

    // A studio reading its store in place says "live".
    let studio = w.read_only().await;
    let mut b = Browser::open(&studio.url()).await;
    b.wait_for(
        "live",
        "document.querySelector('#live') && \
         document.querySelector('#live').classList.contains('on') && \
         document.querySelector('#live').textContent === 'live'",
    )
    .await;
    assert!(!b.has("#live.snapshot").await);
    b.close().await;
    studio.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_a_label_holding_a_slash_reads_apart_from_a_deeper_namespace() {
    let memory = harness::memory::Memory::in_memory();
    memory
        .put(
            &crate::memory::ns(&["a/b", "c"]),
            "one",
            json!({"in": "a/b, c"}),
        )
        .await
        .unwrap();
    memory
        .put(
            &crate::memory::ns(&["a", "b", "c"]),
            "two",
            json!({"in": "a, b, c"}),
        )
        .await
        .unwrap();
    let dir = temp_dir("page-labels");
    let _dir = TempDir(dir.clone());
    let studio = Studio::read_only(Arc::new(SledStore::open(dir.join("db")).unwrap()))
        .memory(memory)
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let mut b = Browser::open(&studio.url()).await;
    b.wait_for(
        "the memory tab",
        "document.querySelector('#views') && !document.querySelector('#views').hidden",
    )
    .await;
    // Memory is served, reports are not: the evals tab and view stay
    // undisplayed.
    assert_eq!(b.eval(HIDDEN_SHOWN).await, json!([]));
    assert_eq!(
        b.eval(
            "getComputedStyle(document.querySelector('#views .tab[data-view=\"evals\"]')).display"
        )
        .await,
        json!("none")
    );
    b.click("#views .tab[data-view=\"memory\"]").await;
    b.wait_for(
        "both namespaces",
        "document.querySelector('#ns-tree .ns[data-ns=\"a%2Fb/c\"]') && \
         document.querySelector('#ns-tree .ns[data-ns=\"a/b/c\"]')",
    )
    .await;
    assert_eq!(b.eval(HIDDEN_SHOWN).await, json!([]));
    // The label `a/b` is one node, written as the API reads it.
    assert_eq!(b.text("#ns-tree .ns[data-ns=\"a%2Fb\"]").await, "a%2Fb");
    assert_eq!(b.text("#ns-tree .ns[data-ns=\"a\"]").await, "a");

    // Every item: their namespaces read apart.
    b.wait_for(
        "every item",
        "document.querySelectorAll('#items .item').length === 2",
    )
    .await;
    let tags = b
        .eval(
            "Object.fromEntries([...document.querySelectorAll('#items .item')]\
             .map((i) => [i.dataset.key, i.querySelector('.path-tag').textContent]))",
        )
        .await;
    assert_eq!(tags, json!({"one": "a%2Fb/c", "two": "a/b/c"}));

    // Each namespace opens alone, its heading telling them apart.
    b.click("#ns-tree .ns[data-ns=\"a%2Fb/c\"]").await;
    b.wait_for(
        "the namespace a/b, c",
        "document.querySelector('#items-namespace').textContent === 'a%2Fb / c' && \
         document.querySelectorAll('#items .item').length === 1 && \
         document.querySelector('#items .item[data-key=\"one\"]')",
    )
    .await;
    b.click("#ns-tree .ns[data-ns=\"a/b/c\"]").await;
    b.wait_for(
        "the namespace a, b, c",
        "document.querySelector('#items-namespace').textContent === 'a / b / c' && \
         document.querySelectorAll('#items .item').length === 1 && \
         document.querySelector('#items .item[data-key=\"two\"]')",
    )
    .await;
    assert_eq!(b.errors().await, "", "no error on the page");
    b.close().await;
    studio.shutdown().await.unwrap();
}
