//! The server lists one kind of its records at a time: the cron scheduler's
//! tick (every 250 ms, on every replica) and a thread search read the ids
//! of crons or threads only, not every session of a store that the
//! agents' own sessions share.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use harness::SessionId;
use harness::session::{Checkpoint, Commit, SessionStore, StoreError, StoredRun};
use harness_stores::{SledStore, conformance};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tower::ServiceExt;

/// A sled store counting the ids its listings return.
#[derive(Debug)]
struct Reads {
    inner: Arc<SledStore>,
    ids: AtomicUsize,
}

#[async_trait::async_trait]
impl SessionStore for Reads {
    async fn load(&self, session: &SessionId) -> Result<Option<StoredRun>, StoreError> {
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
        let ids = self.inner.sessions().await?;
        self.ids.fetch_add(ids.len(), Ordering::SeqCst);
        Ok(ids)
    }
    async fn sessions_page(
        &self,
        prefix: &str,
        after: Option<&SessionId>,
        limit: usize,
    ) -> Result<Vec<SessionId>, StoreError> {
        let ids = self.inner.sessions_page(prefix, after, limit).await?;
        self.ids.fetch_add(ids.len(), Ordering::SeqCst);
        Ok(ids)
    }
    async fn flush(&self) -> Result<(), StoreError> {
        self.inner.flush().await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crons_and_thread_searches_read_only_their_own_ids() {
    const OTHERS: usize = 600;
    let dir = tempfile::tempdir().unwrap();
    let sled = Arc::new(SledStore::open(dir.path().join("store")).unwrap());
    // Sessions of other agents sharing the store, on both sides of the
    // server's own ids in byte order.
    for i in 0..OTHERS {
        let id = if i % 2 == 0 {
            format!("agent/{i:04}")
        } else {
            format!("zz/{i:04}")
        };
        let commit = conformance::create(
            conformance::head(&id),
            vec![conformance::snapshot(0, 0, json!({}))],
        );
        sled.commit(&commit).await.unwrap();
    }
    let reads = Arc::new(Reads {
        inner: Arc::clone(&sled),
        ids: AtomicUsize::new(0),
    });
    let router = crate::server_on(Arc::clone(&sled))
        .store(reads.clone())
        .router()
        .unwrap();
    let call = |method: Method, path: &str, body: serde_json::Value| {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap();
        let router = router.clone();
        async move {
            let response = router.oneshot(request).await.unwrap();
            let status = response.status();
            let bytes = http_body_util::BodyExt::collect(response.into_body())
                .await
                .unwrap()
                .to_bytes();
            (
                status,
                serde_json::from_slice::<serde_json::Value>(&bytes).unwrap(),
            )
        }
    };
    for _ in 0..3 {
        let (status, thread) = call(Method::POST, "/threads", json!({})).await;
        assert_eq!(status, StatusCode::OK, "{thread}");
    }
    // A cron due next year: listed at each tick, never fired.
    let (status, cron) = call(
        Method::POST,
        "/runs/crons",
        json!({"assistant_id": "ticks", "schedule": "0 0 1 1 *"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{cron}");

    // The scheduler ticks every 250 ms: eight ticks or so.
    reads.ids.store(0, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let per_two_seconds = reads.ids.load(Ordering::SeqCst);
    assert!(
        (1..=20).contains(&per_two_seconds),
        "the scheduler read {per_two_seconds} ids in 2 s: its one cron at each tick, \
         not the {OTHERS} other sessions"
    );

    reads.ids.store(0, Ordering::SeqCst);
    let (status, found) = call(Method::POST, "/threads/search", json!({"limit": 100})).await;
    assert_eq!(status, StatusCode::OK, "{found}");
    assert_eq!(found.as_array().map(Vec::len), Some(3), "{found}");
    let read = reads.ids.load(Ordering::SeqCst);
    // The three threads, and what the scheduler read meanwhile.
    assert!(read < 3 + 20, "a thread search read {read} ids");
}
