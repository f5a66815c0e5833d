//! A head's counters (`version`, `steps`, `last_seq`) and a log's step
//! indexes at or near `u64::MAX`, which only an edit or damage makes: every
//! read that would move them on is a load error naming the counter, never
//! an overflow (a panic in debug builds, a wrap in release that writes
//! checkpoint 0 over the first snapshot), and nothing is changed.

use harness::SessionId;
use harness::session::{
    Checkpoint, SessionError, SessionStore, StoredRun, load_saved, load_value, save_value,
};
use harness::{Cx, Harness, HarnessState, JsonSchema, create_agent, schemars};
use harness_stores::conformance::{create, head, snapshot, update};
use harness_stores::{FileStore, MemoryStore};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::sync::Arc;

/// The most a counter reaches (`i64::MAX`): a head past it is refused.
const LIMIT: u64 = i64::MAX as u64;

fn stores(dir: &std::path::Path) -> Vec<(&'static str, Arc<dyn SessionStore>)> {
    let mut stores: Vec<(&'static str, Arc<dyn SessionStore>)> = vec![
        ("memory", Arc::new(MemoryStore::new())),
        ("file", Arc::new(FileStore::open(dir.join("file")).unwrap())),
    ];
    #[cfg(feature = "sled")]
    stores.push((
        "sled",
        Arc::new(harness_stores::SledStore::temporary().unwrap()),
    ));
    stores
}

/// Writes `head` over the stored head of its session, as an edit would.
async fn overwrite(store: &dyn SessionStore, head: StoredRun) {
    let stored = store.load(&head.session_id).await.unwrap().unwrap();
    let commit = harness::session::Commit {
        head,
        expected_version: Some(stored.version),
        append: Vec::new(),
        remove: Vec::new(),
        durable: true,
    };
    store.commit(&commit).await.unwrap();
}

/// A saved value whose head's `version`, `last_seq` or `steps` is past the
/// limit is refused by `save_value`, `load_value` and `load_saved` with a
/// load error naming the counter; the head stays as it was. At the limit
/// itself, one more save goes through (and the next is refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_value_whose_counters_cannot_be_moved_on_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let id = SessionId::from("nb");
    for (name, store) in stores(dir.path()) {
        for (counter, value) in [
            ("version", u64::MAX),
            ("version", u64::MAX - 1),
            ("version", LIMIT + 1),
            ("last_seq", u64::MAX),
            ("last_seq", LIMIT + 1),
            ("steps", u64::MAX),
        ] {
            let case = format!("{name}: {counter} = {value}");
            save_value(&*store, "owner", &id, json!({"a": 1}))
                .await
                .unwrap();
            let mut edited = store.load(&id).await.unwrap().unwrap();
            match counter {
                "version" => edited.version = value,
                "last_seq" => edited.last_seq = value,
                _ => edited.steps = value,
            }
            overwrite(&*store, edited).await;
            let before = store.load(&id).await.unwrap().unwrap();
            let saved = save_value(&*store, "owner", &id, json!({"a": 2})).await;
            let loaded = load_value(&*store, "owner", &id).await;
            let read = load_saved(&*store, "owner", &id).await.map(|_| ());
            for (what, result) in [
                ("save_value", saved),
                ("load_value", loaded.map(|_| ())),
                ("load_saved", read),
            ] {
                match result {
                    Err(SessionError::Load(e)) => {
                        let text = e.to_string();
                        assert!(
                            text.contains(&format!("`{counter}` is {value}")),
                            "{case}: {what}: {text}"
                        );
                        assert_eq!(e.record, "head", "{case}: {what}");
                    }
                    other => panic!("{case}: {what}: expected a load error, got {other:?}"),
                }
            }
            assert_eq!(store.load(&id).await.unwrap().unwrap(), before, "{case}");
            // Put back as the framework would have left it, for the next case.
            let mut back = before.clone();
            back.version = 1;
            back.last_seq = back.snapshot_seq;
            back.steps = 0;
            overwrite(&*store, back).await;
        }
        // At the limit: one more.
        let mut edited = store.load(&id).await.unwrap().unwrap();
        edited.version = LIMIT;
        overwrite(&*store, edited).await;
        save_value(&*store, "owner", &id, json!({"a": 3}))
            .await
            .unwrap();
        let now = store.load(&id).await.unwrap().unwrap();
        assert_eq!(now.version, LIMIT + 1, "{name}");
        assert_eq!(
            load_value(&*store, "owner", &id)
                .await
                .err()
                .map(|e| e.to_string().contains("`version`")),
            Some(true),
            "{name}"
        );
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
struct Count {
    n: u64,
}

fn agent(store: Arc<dyn SessionStore>) -> harness::Agent<Count> {
    let h = Harness::<Count>::builder()
        .step("think")
        .run(|c: Arc<Count>, _: Cx<()>| async move { Ok(CountUpdate::new().n(c.n + 1)) })
        .end()
        .start("think")
        .store(store)
        .build()
        .unwrap();
    create_agent("conformance", &h)
}

/// Logs whose step indexes run into `u64::MAX` (a snapshot at step
/// `u64::MAX` followed by an update, as an edited file store holds it) and
/// heads whose counters are past the limit: the agent's reads and its
/// recovery fail with a load error, and change nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_refuses_counters_at_their_end_with_a_load_error() {
    let dir = tempfile::tempdir().unwrap();
    let cases: Vec<(&str, StoredRun, Vec<Checkpoint>)> = {
        let mut out = Vec::new();
        // The review's case: the snapshot at step u64::MAX, then a step.
        let mut h = head("snapshot-at-max");
        h.snapshot_index = u64::MAX;
        h.steps = u64::MAX;
        out.push((
            "a step after a snapshot at step u64::MAX",
            h,
            vec![
                snapshot(0, u64::MAX, json!({"n": 0})),
                update(1, 5, "think", json!({"n": 1})),
            ],
        ));
        let mut h = head("steps-to-max");
        h.snapshot_index = u64::MAX - 1;
        h.steps = u64::MAX;
        out.push((
            "two steps from a snapshot at step u64::MAX - 1",
            h,
            vec![
                snapshot(0, u64::MAX - 1, json!({"n": 0})),
                update(1, u64::MAX, "think", json!({"n": 1})),
                update(2, 0, "think", json!({"n": 2})),
            ],
        ));
        // A log whose last record is at seq u64::MAX, short of the head's
        // steps.
        let mut h = head("seq-at-max");
        h.snapshot_seq = u64::MAX;
        h.steps = 3;
        out.push((
            "a log ending at seq u64::MAX before the head's steps",
            h,
            vec![snapshot(u64::MAX, 0, json!({"n": 0}))],
        ));
        let mut h = head("version-max");
        h.version = u64::MAX;
        out.push((
            "a version at u64::MAX",
            h,
            vec![snapshot(0, 0, json!({"n": 0}))],
        ));
        out
    };
    for (name, store) in stores(dir.path()) {
        let agent = agent(Arc::clone(&store));
        for (case, h, log) in &cases {
            let case = format!("{name}: {case}");
            let mut c = create(h.clone(), log.clone());
            c.head.version = h.version;
            store.commit(&c).await.unwrap();
            let session = h.session_id.clone();
            let before = store.load(&session).await.unwrap().unwrap();
            match agent.state_at(&session, None).await {
                Err(SessionError::Load(_)) => {}
                other => panic!("{case}: state_at: expected a load error, got {other:?}"),
            }
            match agent.recover(&session).await {
                Err(SessionError::Load(_)) => {}
                Err(other) => panic!("{case}: recover: expected a load error, got {other}"),
                Ok(_) => panic!("{case}: recover: it ran"),
            }
            assert_eq!(
                store.load(&session).await.unwrap().unwrap(),
                before,
                "{case}"
            );
        }
    }
}
