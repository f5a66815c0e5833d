//! Values saved outside any run (`save_value`, `load_saved`,
//! `save_commit`), read and written by several tasks at once, as the
//! server's replicas do with their thread and cron records.

use harness::SessionId;
use harness::session::{
    Saved, SessionError, SessionStore, StoreError, load_saved, load_value, save_commit, save_value,
};
use harness_stores::MemoryStore;
use serde_json::json;
use std::sync::Arc;

fn stores() -> Vec<(&'static str, Arc<dyn SessionStore>)> {
    let mut stores: Vec<(&'static str, Arc<dyn SessionStore>)> =
        vec![("memory", Arc::new(MemoryStore::new()))];
    #[cfg(feature = "sled")]
    stores.push((
        "sled",
        Arc::new(harness_stores::SledStore::temporary().unwrap()),
    ));
    stores
}

/// A reader never sees a saved value's snapshot missing while writers keep
/// replacing it: the snapshot a head names may be removed between the two
/// reads, and the head is then read again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readers_see_whole_values_while_writers_replace_them() {
    for (name, store) in stores() {
        let id = SessionId::from("record");
        save_value(&*store, "notes", &id, json!({"n": 0}))
            .await
            .unwrap();
        let writers: Vec<_> = (0..2)
            .map(|w| {
                let (store, id) = (Arc::clone(&store), id.clone());
                tokio::spawn(async move {
                    for n in 1..=300 {
                        save_value(&*store, "notes", &id, json!({"n": n, "by": w}))
                            .await
                            .unwrap();
                    }
                })
            })
            .collect();
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (store, id) = (Arc::clone(&store), id.clone());
                tokio::spawn(async move {
                    for read in 0..600 {
                        let value = load_value(&*store, "notes", &id).await;
                        let value = value.unwrap_or_else(|e| panic!("read {read}: {e}"));
                        assert!(value.unwrap()["n"].is_u64());
                    }
                })
            })
            .collect();
        for task in writers.into_iter().chain(readers) {
            task.await.unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
}

/// Read, decide, write with `save_commit`: a writer that lost the race gets
/// a conflict and decides again, so no increment is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_read_decide_write_loses_no_update() {
    for (name, store) in stores() {
        let id = SessionId::from("counter");
        let tasks: Vec<_> = (0..3)
            .map(|_| {
                let (store, id) = (Arc::clone(&store), id.clone());
                tokio::spawn(async move {
                    let mut conflicts = 0;
                    for _ in 0..50 {
                        loop {
                            let saved = load_saved(&*store, "counter", &id).await.unwrap();
                            let (prev, n) = match &saved {
                                Some(Saved { head, value, .. }) => {
                                    (Some(head), value["n"].as_u64().unwrap())
                                }
                                None => (None, 0),
                            };
                            let commit = save_commit(prev, "counter", &id, json!({"n": n + 1}));
                            match store.commit(&commit).await {
                                Ok(()) => break,
                                Err(StoreError::Conflict { .. }) => conflicts += 1,
                                Err(e) => panic!("{e}"),
                            }
                        }
                    }
                    conflicts
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        let total = load_value(&*store, "counter", &id).await.unwrap().unwrap();
        assert_eq!(total["n"], 150, "{name}");
    }
}

/// A saved value of another owner is refused by name, for reading and for
/// writing, and left as it was.
#[tokio::test]
async fn another_owners_value_is_refused_and_left_alone() {
    for (name, store) in stores() {
        let id = SessionId::from("theirs");
        save_value(&*store, "theirs", &id, json!({"keep": true}))
            .await
            .unwrap();
        for refused in [
            load_saved(&*store, "mine", &id).await.map(|_| ()),
            load_value(&*store, "mine", &id).await.map(|_| ()),
            save_value(&*store, "mine", &id, json!({"keep": false})).await,
        ] {
            let e = refused.expect_err(name);
            assert!(matches!(e, SessionError::Load(_)), "{name}: {e}");
            assert!(e.to_string().contains("`theirs`"), "{name}: {e}");
        }
        let kept = load_value(&*store, "theirs", &id).await.unwrap().unwrap();
        assert_eq!(kept, json!({"keep": true}), "{name}");
        assert!(
            load_saved(&*store, "mine", &SessionId::from("none"))
                .await
                .unwrap()
                .is_none(),
            "{name}"
        );
    }
}
