//! The step cache kept in a session store: with sled, cached updates
//! survive closing and reopening the database; a damaged entry, or a
//! session of that id owned by someone else, is a miss and never fails the
//! run.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use harness::session::{SessionStore, load_value, save_value};
use harness::{CachePolicy, Harness, HarnessState, StepResult, StoreCache, create_agent};
use harness_stores::SledStore;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Page {
    url: String,
    summary: String,
    #[field(reduce = add)]
    fetched: u32,
}

fn page(url: &str) -> Page {
    Page {
        url: url.into(),
        summary: String::new(),
        fetched: 0,
    }
}

/// A loop whose one step counts its executions; its runs and its cache are
/// both kept in `store`.
fn summarize_loop(store: &SledStore, calls: &Arc<AtomicUsize>) -> Harness<Page> {
    let calls = Arc::clone(calls);
    Harness::<Page>::builder()
        .step("summarize")
        .run(move |p: Arc<Page>| {
            calls.fetch_add(1, Ordering::SeqCst);
            async move {
                let update: StepResult<PageUpdate> = Ok(PageUpdate::new()
                    .summary(format!("summary of {}", p.url))
                    .fetched(1));
                update
            }
        })
        .cache_reads(
            CachePolicy::new(StoreCache::new(store.clone()), "crawler").version(1),
            |p| p.url.clone(),
        )
        .end()
        .start("summarize")
        .store(store.clone())
        .build()
        .unwrap()
}

/// Opens the sled database at `path`, retrying while the threads of a
/// closed handle still hold its lock.
fn open(path: &Path) -> SledStore {
    let mut last = None;
    for _ in 0..600 {
        match SledStore::open(path) {
            Ok(store) => return store,
            Err(e) => last = Some(e),
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("cannot reopen the sled store: {last:?}")
}

async fn cache_sessions(store: &SledStore) -> Vec<harness::SessionId> {
    store
        .sessions()
        .await
        .unwrap()
        .into_iter()
        .filter(|s| s.as_str().starts_with("harness-cache-"))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cache_in_a_sled_store_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let first = {
        let store = open(dir.path());
        let h = summarize_loop(&store, &calls);
        let out = create_agent("crawler", &h)
            .run(page("https://a.example"))
            .await
            .unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(cache_sessions(&store).await.len(), 1);
        store.flush().await.unwrap();
        out.state
    };

    let store = open(dir.path());
    let h = summarize_loop(&store, &calls);
    let agent = create_agent("crawler", &h);
    let again = agent.run(page("https://a.example")).await.unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the reopened cache hits");
    assert_eq!(again.state, first);
    // The hit is a completed step of the stored run like any other.
    let history = agent.history(&again.session_id).await.unwrap();
    assert!(history.iter().any(|c| c.step == "summarize"), "{history:?}");
    // Another page misses.
    agent.run(page("https://b.example")).await.unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(cache_sessions(&store).await.len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_damaged_entry_in_the_store_is_a_miss_and_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let calls = Arc::new(AtomicUsize::new(0));
    let h = summarize_loop(&store, &calls);
    let agent = create_agent("crawler", &h);
    let good = agent.run(page("https://a.example")).await.unwrap().state;
    let session = cache_sessions(&store).await.pop().unwrap();
    let entry = load_value(&store, StoreCache::OWNER, &session)
        .await
        .unwrap()
        .unwrap();
    let mut forged = entry.clone();
    forged["update"]["summary"] = json!("forged");
    let damaged = [
        json!("garbage"),
        json!([1, 2, 3]),
        json!({"update": {"summary": "forged"}}),
        forged,
    ];
    for (i, bad) in damaged.into_iter().enumerate() {
        save_value(&store, StoreCache::OWNER, &session, bad.clone())
            .await
            .unwrap();
        let out = agent.run(page("https://a.example")).await.unwrap();
        assert_eq!(out.state, good, "{bad}");
        assert_eq!(calls.load(Ordering::SeqCst), i + 2, "{bad} is a miss");
        let now = load_value(&store, StoreCache::OWNER, &session)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(now, entry, "{bad} is replaced by the step's update");
    }
    agent.run(page("https://a.example")).await.unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 5, "the replaced entry hits");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_of_another_owner_under_an_entrys_id_is_a_miss_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let calls = Arc::new(AtomicUsize::new(0));
    let h = summarize_loop(&store, &calls);
    let agent = create_agent("crawler", &h);
    agent.run(page("https://a.example")).await.unwrap();
    let session = cache_sessions(&store).await.pop().unwrap();

    // Someone else's session under the entry's id, in a fresh database.
    let other_dir = tempfile::tempdir().unwrap();
    let other = open(other_dir.path());
    save_value(&other, "notebook", &session, json!({"cells": []}))
        .await
        .unwrap();
    let h = summarize_loop(&other, &calls);
    let agent = create_agent("crawler", &h);
    for n in 2..=3 {
        let out = agent.run(page("https://a.example")).await.unwrap();
        assert_eq!(out.state.summary, "summary of https://a.example");
        assert_eq!(calls.load(Ordering::SeqCst), n);
    }
    assert_eq!(
        load_value(&other, "notebook", &session)
            .await
            .unwrap()
            .unwrap(),
        json!({"cells": []}),
        "the other owner's session is not overwritten"
    );
}
