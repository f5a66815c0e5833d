//! What the PostgreSQL and Redis stores share: fixtures, and checks of
//! finding work and of ids that need escaping, run on both.

#[cfg(feature = "postgres")]
mod postgres_store;
#[cfg(feature = "redis")]
mod redis_store;

use crate::id;
use harness::session::{Lease, SessionPhase, SessionStore, StoreError, now_millis};
use harness::{Interrupt, InterruptId, SessionId, Signal};
use harness_stores::conformance::{advance, create, head, snapshot, update};
use serde_json::json;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

/// The URL in `var`; `None` (skip) only when `HARNESS_SKIP_SERVER_TESTS=1`.
fn server_url(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var("HARNESS_SKIP_SERVER_TESTS").as_deref() == Ok("1") => {
            eprintln!("skipped: {var} is not set and HARNESS_SKIP_SERVER_TESTS=1");
            None
        }
        _ => panic!(
            "{var} is not set: start the test servers with `eval \"$(scripts/services)\"` \
             and run the tests again (or set HARNESS_SKIP_SERVER_TESTS=1 to skip the server tests)"
        ),
    }
}

/// A name no other run or test uses.
fn unique(tag: &str) -> String {
    let random = SessionId::random().as_str().replace('-', "");
    format!("t_{tag}_{}", &random[..16])
}

/// Runs `f` to completion from synchronous code inside the (multi-threaded)
/// test runtime: the suite's store factories and hooks are synchronous.
fn block_on<F: Future>(f: F) -> F::Output {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(f))
}

/// A session with this phase, lease and `updated_at`.
async fn put(
    store: &dyn SessionStore,
    name: &str,
    phase: SessionPhase,
    lease: Option<u64>,
    updated_at: u64,
) {
    let mut c = create(head(name), vec![snapshot(0, 0, json!({"n": 0}))]);
    c.head.phase = phase;
    c.head.lease = lease.map(|expires_at| Lease {
        owner: format!("owner-of-{name}"),
        expires_at,
    });
    c.head.updated_at = updated_at;
    store.commit(&c).await.unwrap();
}

fn interrupted() -> SessionPhase {
    SessionPhase::Interrupted {
        interrupt: Interrupt {
            path: Default::default(),
            breakpoint: None,
            id: InterruptId::from("int-1"),
            step: "ask".into(),
            payload: json!({"q": "ok?"}),
        },
    }
}

fn completed() -> SessionPhase {
    SessionPhase::Completed {
        signal: Signal::new("done"),
    }
}

fn names(ids: &[SessionId]) -> Vec<&str> {
    ids.iter().map(SessionId::as_str).collect()
}

/// Sessions of every kind; returns `now` and the runnable ones in order.
async fn runnable_fixture(store: &dyn SessionStore) -> (u64, Vec<&'static str>) {
    let now = now_millis();
    put(
        store,
        "live",
        SessionPhase::Running,
        Some(now + 3_600_000),
        now - 9_000,
    )
    .await;
    put(store, "interrupted", interrupted(), None, now - 8_500).await;
    put(store, "completed", completed(), None, now - 8_400).await;
    let failed = SessionPhase::Failed {
        error: "boom".into(),
    };
    put(store, "failed", failed, None, now - 8_300).await;
    put(store, "submitted", SessionPhase::Running, None, now - 8_000).await;
    put(
        store,
        "expired",
        SessionPhase::Running,
        Some(now - 1),
        now - 7_000,
    )
    .await;
    put(
        store,
        "expires-now",
        SessionPhase::Running,
        Some(now),
        now - 6_000,
    )
    .await;
    put(
        store,
        "live-too",
        SessionPhase::Running,
        Some(now + 1),
        now - 5_500,
    )
    .await;
    put(store, "later", SessionPhase::Running, None, now - 5_000).await;
    // Runnable, but another agent's.
    let mut c = create(head("other-agent"), vec![snapshot(0, 0, json!({"n": 0}))]);
    c.head.agent_id = "another agent".into();
    c.head.updated_at = now - 8_800;
    store.commit(&c).await.unwrap();
    (now, vec!["submitted", "expired", "expires-now", "later"])
}

/// `runnable` of a store without claims: running sessions without a live
/// lease, oldest first, up to the limit; a plain read.
async fn runnable_reads(store: &dyn SessionStore) {
    let (now, want) = runnable_fixture(store).await;
    for _ in 0..2 {
        assert_eq!(
            names(&store.runnable("conformance", now, 10).await.unwrap()),
            want
        );
    }
    assert_eq!(
        names(&store.runnable("conformance", now, 2).await.unwrap()),
        want[..2]
    );
    assert_eq!(store.runnable("conformance", now, 0).await.unwrap(), vec![]);
    // Later, the short lease has run out too; the live one has not.
    let mut later = vec!["expired", "expires-now", "live-too", "later"];
    later.insert(0, "submitted");
    assert_eq!(
        names(&store.runnable("conformance", now + 1, 10).await.unwrap()),
        later
    );

    // Taking a session (a live lease) hides it; releasing it shows it again
    // with its new updated_at, now the newest.
    let h = store.load(&id("submitted")).await.unwrap().unwrap();
    let mut take = advance(&h, vec![], vec![]);
    take.head.lease = Some(Lease {
        owner: "worker".into(),
        expires_at: now + 60_000,
    });
    take.head.updated_at = now;
    store.commit(&take.clone()).await.unwrap();
    assert_eq!(
        names(&store.runnable("conformance", now, 10).await.unwrap()),
        want[1..]
    );
    let mut release = advance(&take.head, vec![], vec![]);
    release.head.lease = None;
    release.head.updated_at = now;
    store.commit(&release.clone()).await.unwrap();
    let mut want2 = want[1..].to_vec();
    want2.push("submitted");
    assert_eq!(
        names(&store.runnable("conformance", now, 10).await.unwrap()),
        want2
    );
    // Finishing it removes it for good.
    let mut done = advance(&release.head, vec![], vec![]);
    done.head.phase = completed();
    store.commit(&done).await.unwrap();
    assert_eq!(
        names(&store.runnable("conformance", now, 10).await.unwrap()),
        want[1..]
    );
}

/// `runnable` of a store with claims of `claim_ms`: what one call returns,
/// the next does not, until the claim runs out or the session is committed.
async fn runnable_claims(store: &dyn SessionStore, claim_ms: u64) {
    let (now, want) = runnable_fixture(store).await;
    assert_eq!(
        names(&store.runnable("conformance", now, 2).await.unwrap()),
        want[..2]
    );
    assert_eq!(
        names(&store.runnable("conformance", now, 10).await.unwrap()),
        want[2..]
    );
    assert_eq!(
        store.runnable("conformance", now, 10).await.unwrap(),
        vec![]
    );
    // A commit clears the claim.
    let h = store.load(&id("later")).await.unwrap().unwrap();
    store.commit(&advance(&h, vec![], vec![])).await.unwrap();
    assert_eq!(
        names(&store.runnable("conformance", now, 10).await.unwrap()),
        ["later"]
    );
    // Just before the claims run out, only the short lease has.
    assert_eq!(
        names(
            &store
                .runnable("conformance", now + claim_ms - 1, 10)
                .await
                .unwrap()
        ),
        ["live-too"]
    );
    // Claims run out (the one just taken has not).
    assert_eq!(
        names(
            &store
                .runnable("conformance", now + claim_ms, 10)
                .await
                .unwrap()
        ),
        want
    );
}

/// Workers, each with its own handle on the store (as separate processes
/// would have), find work with `runnable` and take it by compare-and-set;
/// returns the number of conflicts. Every session is taken exactly once.
async fn workers_take_each_session_once(
    stores: Vec<Arc<dyn SessionStore>>,
    sessions: usize,
) -> usize {
    let t0 = now_millis() - 100_000;
    for i in 0..sessions {
        let mut c = create(head(&format!("job-{i:03}")), vec![snapshot(0, 0, json!(i))]);
        c.head.updated_at = t0 + i as u64;
        stores[0].commit(&c).await.unwrap();
    }
    let barrier = Arc::new(tokio::sync::Barrier::new(stores.len()));
    let mut tasks = Vec::new();
    for (w, store) in stores.iter().enumerate() {
        let (store, barrier) = (Arc::clone(store), Arc::clone(&barrier));
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let owner = format!("worker-{w}");
            let (mut taken, mut conflicts) = (Vec::new(), 0_usize);
            loop {
                let now = now_millis();
                let ids = store.runnable("conformance", now, 5).await.unwrap();
                if ids.is_empty() {
                    break;
                }
                for session in ids {
                    let h = store.load(&session).await.unwrap().unwrap();
                    if h.lease.as_ref().is_some_and(|l| l.is_live(now)) {
                        // Taken by another worker since `runnable`.
                        conflicts += 1;
                        continue;
                    }
                    let mut take = advance(&h, vec![], vec![]);
                    take.head.lease = Some(Lease {
                        owner: owner.clone(),
                        expires_at: now + 3_600_000,
                    });
                    take.head.updated_at = now;
                    match store.commit(&take).await {
                        Ok(()) => taken.push(session),
                        Err(StoreError::Conflict { .. }) => conflicts += 1,
                        Err(e) => panic!("{owner}: taking {session:?} failed: {e}"),
                    }
                }
            }
            (owner, taken, conflicts)
        }));
    }
    let mut by_session: BTreeMap<SessionId, Vec<String>> = BTreeMap::new();
    let mut conflicts = 0;
    let mut per_worker = Vec::new();
    for task in tasks {
        let (owner, taken, c) = task.await.unwrap();
        per_worker.push((owner.clone(), taken.len()));
        conflicts += c;
        for session in taken {
            by_session.entry(session).or_default().push(owner.clone());
        }
    }
    let twice: Vec<_> = by_session.iter().filter(|(_, o)| o.len() > 1).collect();
    assert!(twice.is_empty(), "sessions taken more than once: {twice:?}");
    assert_eq!(
        by_session.len(),
        sessions,
        "sessions taken (per worker: {per_worker:?})"
    );
    for (session, owners) in &by_session {
        let h = stores[0].load(session).await.unwrap().unwrap();
        assert_eq!(h.lease.map(|l| l.owner).as_ref(), owners.first());
    }
    assert_eq!(
        stores[0]
            .runnable("conformance", now_millis(), 10)
            .await
            .unwrap(),
        vec![]
    );
    eprintln!(
        "{} workers took {sessions} sessions: {per_worker:?}, {conflicts} conflicts",
        stores.len()
    );
    conflicts
}

/// Sessions whose ids need escaping (NUL, `%`, braces, key-like text) go
/// through several commits and read back whole.
async fn odd_ids_go_on(store: &dyn SessionStore) {
    let ids = [
        "a\0b",
        "%41",
        "%",
        "é",
        "",
        "}x{",
        "a}:head",
        "{a}",
        "x:sessions",
    ];
    for s in ids {
        let c = create(head(s), vec![snapshot(0, 0, json!(s))]);
        store.commit(&c.clone()).await.unwrap();
        let mut prev = c.head.clone();
        for i in 1..=3 {
            let next = advance(&prev, vec![update(i, i, s, json!(i))], vec![]);
            store.commit(&next.clone()).await.unwrap();
            prev = next.head;
        }
        let stale = advance(&c.head, vec![], vec![]);
        match store.commit(&stale).await {
            Err(StoreError::Conflict { found, .. }) => assert_eq!(found, Some(4), "{s:?}"),
            other => panic!("{s:?}: expected a conflict, got {other:?}"),
        }
        assert_eq!(store.load(&id(s)).await.unwrap(), Some(prev), "{s:?}");
        let log = store.checkpoints(&id(s), 1).await.unwrap();
        assert_eq!(
            log.iter().map(|cp| cp.seq).collect::<Vec<_>>(),
            [1, 2, 3],
            "{s:?}"
        );
        assert!(log.iter().all(|cp| cp.step == s), "{s:?}");
    }
    let mut listed = store.sessions().await.unwrap();
    listed.sort();
    let mut want: Vec<SessionId> = ids.iter().map(|s| id(s)).collect();
    want.sort();
    assert_eq!(listed, want);
}

/// Running sessions `a-1`, `b-1`, `a-2` and `bad` (oldest first) of agents
/// `alpha` and `beta` (`bad` is `alpha`'s).
async fn sessions_of_two_agents(store: &dyn SessionStore) {
    let t0 = now_millis() - 10_000;
    let sessions = [
        ("a-1", "alpha"),
        ("b-1", "beta"),
        ("a-2", "alpha"),
        ("bad", "alpha"),
    ];
    for (i, (name, agent)) in sessions.into_iter().enumerate() {
        let mut c = create(head(name), vec![snapshot(0, 0, json!({"n": i}))]);
        c.head.agent_id = agent.into();
        c.head.updated_at = t0 + i as u64;
        store.commit(&c).await.unwrap();
    }
}

/// The ids, as strings.
fn names_of(ids: Vec<SessionId>) -> Vec<String> {
    ids.iter().map(|i| i.as_str().to_owned()).collect()
}
