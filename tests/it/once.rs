//! `cx.once` with a store: each result is in the session before `once`
//! returns, results of concurrent calls are all kept, and the idempotency
//! key is the same on every attempt of a visit and new on the next visit.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use harness::session::SessionStore;
use harness::{Cx, Harness, HarnessState, SessionId, StepResult, create_agent};
use harness_stores::SledStore;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Visits {
    #[field(reduce = append)]
    keys: Vec<String>,
}

#[derive(Debug, Default)]
struct Seen {
    effects: AtomicU32,
    /// Each attempt's keys, in order.
    keys: Mutex<Vec<Vec<String>>>,
    store: Mutex<Option<Arc<dyn SessionStore>>>,
    session: Mutex<Option<SessionId>>,
}

#[derive(harness::Context)]
struct Probe {
    #[slot(fixed)]
    seen: Arc<Seen>,
}

async fn visit(s: Arc<Visits>, cx: Cx<Probe>) -> StepResult<VisitsUpdate> {
    let keys: Vec<String> = ["a", "b", "c"]
        .iter()
        .map(|k| cx.idempotency_key(k))
        .collect();
    cx.seen.keys.lock().unwrap().push(keys.clone());
    // Three effects at once.
    let effect = |k: &'static str| {
        let seen = cx.seen.clone();
        async move {
            seen.effects.fetch_add(1, Ordering::SeqCst);
            format!("{k} done")
        }
    };
    let (a, b, c) = tokio::join!(
        cx.once("a", effect("a")),
        cx.once("b", effect("b")),
        cx.once("c", effect("c")),
    );
    let results: Vec<String> = vec![a?, b?, c?];
    assert_eq!(results, ["a done", "b done", "c done"]);
    // Each result is in the session before the step goes on.
    if s.keys.is_empty() {
        let store = cx.seen.store.lock().unwrap().clone().unwrap();
        let session = cx.seen.session.lock().unwrap().clone().unwrap();
        let head = store.load(&session).await.unwrap().unwrap();
        let recorded: Vec<&String> = head.journal.once.keys().collect();
        assert_eq!(recorded, ["a", "b", "c"]);
    }
    let _answer: String = cx.interrupt("go on?")?;
    Ok(VisitsUpdate::new().keys(keys))
}

#[tokio::test]
async fn once_results_are_stored_as_they_happen_and_keys_name_the_visit() {
    let store: Arc<dyn SessionStore> = Arc::new(SledStore::temporary().unwrap());
    let seen = Arc::new(Seen::default());
    *seen.store.lock().unwrap() = Some(store.clone());
    let h = Harness::<Visits, Probe>::builder_with(ProbeFixed { seen: seen.clone() })
        .step("visit")
        .run(visit)
        .route(|s: &Visits| if s.keys.len() < 6 { "again" } else { "done" })
        .on("again")
        .to("visit")
        .on("done")
        .end()
        .start("visit")
        .store(store.clone())
        .build()
        .unwrap();
    let agent = create_agent("visits", &h);
    let session = SessionId::from("visits-1");
    *seen.session.lock().unwrap() = Some(session.clone());
    let mut run = agent.run_in(session.clone(), Visits { keys: vec![] });
    let mut visits = 0;
    loop {
        match (&mut run).await {
            Ok(out) if out.signal.as_str() == "$interrupt" => {
                visits += 1;
                let id = out.interrupt.unwrap().id;
                // Every other answer goes through the store, from scratch.
                run = if visits % 2 == 0 {
                    agent
                        .resume(serde_json::json!("yes"), &session, &id)
                        .await
                        .unwrap()
                } else {
                    run.resume(serde_json::json!("yes"), &id).unwrap();
                    run
                };
            }
            Ok(out) => {
                assert_eq!(out.signal.as_str(), "done");
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    // Two visits, each with three effects run once, though each visit ran
    // twice (before and after its interrupt).
    assert_eq!(seen.effects.load(Ordering::SeqCst), 6);
    let keys = seen.keys.lock().unwrap().clone();
    assert_eq!(keys.len(), 4);
    assert_eq!(keys[0], keys[1], "the same visit, the same keys");
    assert_eq!(keys[2], keys[3], "the same visit, the same keys");
    assert_ne!(keys[0], keys[2], "a new visit, new keys");
    assert_eq!(
        keys[0],
        ["a", "b", "c"].map(|k| format!("harness:visits-1:0:visit:{k}"))
    );
    assert_eq!(keys[2][0], "harness:visits-1:1:visit:a");
}
