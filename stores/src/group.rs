//! Group commit: durable commits of concurrent sessions share one flush.
//!
//! A commit is applied first (in memory and the log's buffers), then takes a
//! ticket: the number of commits applied so far. It is durable once a flush
//! that *started after* its ticket was taken has finished, since a flush
//! writes everything applied before it starts. One waiter at a time leads:
//! it notes how many commits are applied, flushes, and then acknowledges
//! every ticket up to that number at once; the others wait for it, and the
//! first of them still uncovered leads the next flush. Under load, each
//! flush (one `fsync`) thus covers every commit applied while the previous
//! one ran, and no commit is acknowledged before a flush covers it.

use harness::session::StoreError;
use std::sync::{Mutex, MutexGuard, PoisonError};
use tokio::sync::Notify;

#[derive(Debug, Default)]
struct State {
    /// Commits applied (the last ticket given).
    applied: u64,
    /// Every ticket up to this one is on disk.
    flushed: u64,
    /// A flush is running.
    flushing: bool,
    /// The last failed flush: the tickets it was to cover, and why.
    failed: Option<(u64, String)>,
}

/// Shares flushes between concurrent durable commits.
#[derive(Debug)]
pub(crate) struct GroupFlush {
    /// The store, for errors.
    store: &'static str,
    state: Mutex<State>,
    done: Notify,
}

impl GroupFlush {
    /// Group commit for the store named `store` (in its errors).
    pub(crate) fn new(store: &'static str) -> Self {
        Self {
            store,
            state: Mutex::default(),
            done: Notify::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A ticket for a commit just applied. Take it after the commit is
    /// applied, so that a flush started later covers it.
    pub(crate) fn ticket(&self) -> u64 {
        let mut state = self.state();
        state.applied += 1;
        state.applied
    }

    /// The tickets given so far. A store that takes its tickets under a
    /// lock of its own can read this under that lock to learn exactly
    /// which commits a flush starting then takes.
    pub(crate) fn applied(&self) -> u64 {
        self.state().applied
    }

    /// Returns once `ticket` is on disk, flushing with `flush` when no
    /// flush that covers it is running; a failed flush fails every commit
    /// it was to cover.
    ///
    /// `flush` returns the last ticket it is known to cover (0 if it does
    /// not know): a flush covers at least every ticket given before it was
    /// started, and a store that can tell it took later ones too (added
    /// while the flush was being set off) has them acknowledged by it
    /// rather than by the next.
    pub(crate) async fn durable<F, Fut>(&self, ticket: u64, flush: F) -> Result<(), StoreError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<u64, StoreError>>,
    {
        loop {
            // Registered before the state is read, so that a flush ending
            // in between still wakes this waiter.
            let notified = self.done.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let lead = {
                let mut state = self.state();
                if state.flushed >= ticket {
                    return Ok(());
                }
                if let Some((upto, why)) = &state.failed
                    && *upto >= ticket
                {
                    return Err(StoreError::backend(format!(
                        "{}: the flush covering this commit failed: {why}",
                        self.store
                    )));
                }
                if state.flushing {
                    None
                } else {
                    state.flushing = true;
                    Some(state.applied)
                }
            };
            let Some(target) = lead else {
                notified.await;
                continue;
            };
            // Commits that are ready to run on this thread join the flush
            // before it sets off.
            tokio::task::yield_now().await;
            let result = flush().await;
            {
                let mut state = self.state();
                state.flushing = false;
                match &result {
                    Ok(covered) => state.flushed = state.flushed.max(target).max(*covered),
                    Err(e) => state.failed = Some((target, e.to_string())),
                }
            }
            self.done.notify_waiters();
            return result.map(|_| ());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A flush that records how many commits were applied when it started.
    #[derive(Default)]
    struct Disk {
        flushes: AtomicU64,
        /// Tickets covered by the last flush to finish.
        covered: AtomicU64,
        fail: std::sync::atomic::AtomicBool,
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn every_commit_is_acknowledged_after_a_flush_that_covers_it_and_flushes_are_shared() {
        let group = Arc::new(GroupFlush::new("test store"));
        let disk = Arc::new(Disk::default());
        let mut tasks = Vec::new();
        for _ in 0..200 {
            let (group, disk) = (Arc::clone(&group), Arc::clone(&disk));
            tasks.push(tokio::spawn(async move {
                for _ in 0..5 {
                    let ticket = group.ticket();
                    group
                        .durable(ticket, || {
                            let disk = Arc::clone(&disk);
                            let applied = group.state().applied;
                            async move {
                                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                                disk.flushes.fetch_add(1, Ordering::SeqCst);
                                disk.covered.fetch_max(applied, Ordering::SeqCst);
                                Ok(0)
                            }
                        })
                        .await
                        .unwrap();
                    // Acknowledged only once a finished flush covers it.
                    assert!(disk.covered.load(Ordering::SeqCst) >= ticket);
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let flushes = disk.flushes.load(Ordering::SeqCst);
        assert!(flushes < 1000, "1000 commits took {flushes} flushes");
    }

    /// A commit whose ticket is taken after a flush's leader set off, but
    /// which that flush reports it took, is acknowledged by it: one flush
    /// for both.
    #[tokio::test]
    async fn a_flush_acknowledges_the_later_tickets_it_reports_it_took() {
        let group = Arc::new(GroupFlush::new("test store"));
        let flushes = Arc::new(AtomicU64::new(0));
        let first = group.ticket();
        let second = std::sync::Mutex::new(None);
        group
            .durable(first, || {
                // A commit added while the flush is being set off, and
                // written by it.
                let later = group.ticket();
                *second.lock().unwrap() = Some(later);
                let flushes = Arc::clone(&flushes);
                async move {
                    flushes.fetch_add(1, Ordering::SeqCst);
                    Ok(later)
                }
            })
            .await
            .unwrap();
        let second = second.lock().unwrap().unwrap();
        assert!(second > first);
        group
            .durable(second, || {
                let flushes = Arc::clone(&flushes);
                async move {
                    flushes.fetch_add(1, Ordering::SeqCst);
                    Ok(0)
                }
            })
            .await
            .unwrap();
        assert_eq!(
            flushes.load(Ordering::SeqCst),
            1,
            "the second commit flushed again"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_failed_flush_fails_the_commits_it_was_to_cover_and_the_next_one_recovers() {
        let group = Arc::new(GroupFlush::new("test store"));
        let disk = Arc::new(Disk::default());
        disk.fail.store(true, Ordering::SeqCst);
        let flush = |disk: Arc<Disk>| {
            move || {
                let disk = Arc::clone(&disk);
                async move {
                    if disk.fail.load(Ordering::SeqCst) {
                        Err(StoreError::backend("disk full"))
                    } else {
                        Ok(0)
                    }
                }
            }
        };
        for _ in 0..3 {
            let ticket = group.ticket();
            let err = group.durable(ticket, flush(Arc::clone(&disk))).await;
            assert!(err.unwrap_err().to_string().contains("disk full"));
        }
        disk.fail.store(false, Ordering::SeqCst);
        let ticket = group.ticket();
        group.durable(ticket, flush(disk)).await.unwrap();
    }
}
