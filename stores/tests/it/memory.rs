//! The suite against the memory store, and the suite itself: it notices a
//! store that breaks the contract.

use harness::SessionId;
use harness::session::{SessionStore, StoreError};
use harness_stores::MemoryStore;
use harness_stores::conformance;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_store_conforms() {
    conformance::run_all(MemoryStore::new).await;
}

/// The suite notices a store that breaks the contract.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_suite_catches_a_store_without_compare_and_set() {
    #[derive(Debug, Default)]
    struct Careless(MemoryStore);
    #[async_trait::async_trait]
    impl SessionStore for Careless {
        async fn load(
            &self,
            s: &SessionId,
        ) -> Result<Option<harness::session::StoredRun>, StoreError> {
            self.0.load(s).await
        }
        async fn commit(&self, c: &harness::session::Commit) -> Result<(), StoreError> {
            // Last writer wins.
            let mut c = c.clone();
            c.expected_version = self.0.load(&c.head.session_id).await?.map(|h| h.version);
            self.0.commit(&c).await
        }
        async fn checkpoints(
            &self,
            s: &SessionId,
            from: u64,
        ) -> Result<Vec<harness::session::Checkpoint>, StoreError> {
            self.0.checkpoints(s, from).await
        }
        async fn sessions(&self) -> Result<Vec<SessionId>, StoreError> {
            self.0.sessions().await
        }
        async fn flush(&self) -> Result<(), StoreError> {
            Ok(())
        }
    }
    let failures = conformance::check_all(Careless::default, None).await;
    let names: Vec<&str> = failures.iter().map(|f| f.check).collect();
    for check in [
        "create_conflict",
        "stale_version",
        "takeover_race",
        "concurrent_create",
    ] {
        assert!(
            names.contains(&check),
            "{check} not reported: {failures:#?}"
        );
    }
}

/// The suite notices pages that skip an id, repeat one, or lose their
/// order, each on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_suite_catches_pages_that_skip_repeat_or_reorder() {
    #[derive(Debug, Clone, Copy)]
    enum Fault {
        /// Each page starts one past where it should.
        Skip,
        /// Each page starts at `after` itself.
        Repeat,
        /// Each page is in reverse order.
        Reverse,
    }
    #[derive(Debug)]
    struct Paged(MemoryStore, Fault);
    #[async_trait::async_trait]
    impl SessionStore for Paged {
        async fn load(
            &self,
            s: &SessionId,
        ) -> Result<Option<harness::session::StoredRun>, StoreError> {
            self.0.load(s).await
        }
        async fn commit(&self, c: &harness::session::Commit) -> Result<(), StoreError> {
            self.0.commit(c).await
        }
        async fn checkpoints(
            &self,
            s: &SessionId,
            from: u64,
        ) -> Result<Vec<harness::session::Checkpoint>, StoreError> {
            self.0.checkpoints(s, from).await
        }
        async fn sessions(&self) -> Result<Vec<SessionId>, StoreError> {
            self.0.sessions().await
        }
        async fn sessions_page(
            &self,
            prefix: &str,
            after: Option<&SessionId>,
            limit: usize,
        ) -> Result<Vec<SessionId>, StoreError> {
            let mut all = self.0.sessions_page(prefix, None, usize::MAX).await?;
            let from = after.map_or(0, |a| all.partition_point(|id| id <= a));
            let from = match self.1 {
                Fault::Skip => from + usize::from(after.is_some()),
                Fault::Repeat => from.saturating_sub(1),
                Fault::Reverse => from,
            };
            let mut page: Vec<SessionId> = all.drain(from.min(all.len())..).take(limit).collect();
            if let Fault::Reverse = self.1 {
                page.reverse();
            }
            Ok(page)
        }
        async fn flush(&self) -> Result<(), StoreError> {
            Ok(())
        }
    }
    for fault in [Fault::Skip, Fault::Repeat, Fault::Reverse] {
        let failures = conformance::check_all(|| Paged(MemoryStore::new(), fault), None).await;
        let names: Vec<&str> = failures.iter().map(|f| f.check).collect();
        assert_eq!(names, ["sessions_page"], "{fault:?}: {failures:#?}");
    }
}
