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
//!
//! Waiters are woken one by one: when a flush ends, those it covers, and
//! the first of the others to lead the next; a commit is woken once for
//! its acknowledgement (twice if it leads), however many flushes it waits
//! through. A waiter chosen to lead that goes away (its commit's future
//! dropped) hands the lead on.

use harness::session::StoreError;
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::task::{Poll, Waker};

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
    /// Waiters for a flush, by ticket and then by a number of their own.
    waiting: BTreeMap<(u64, u64), Waker>,
    /// The waiter woken to lead the next flush, until it does (or goes).
    next_leader: Option<(u64, u64)>,
    /// The number the next waiter takes.
    waiters: u64,
}

impl State {
    /// Chooses the first waiter to lead the next flush, if one waits;
    /// returns its waker, to wake once the lock is released (so that no
    /// executor runs a task inside `wake` while it is held).
    fn next_leader(&mut self) -> Option<Waker> {
        let (key, waker) = self.waiting.first_key_value()?;
        self.next_leader = Some(*key);
        Some(waker.clone())
    }
}

/// Shares flushes between concurrent durable commits.
#[derive(Debug)]
pub(crate) struct GroupFlush {
    /// The store, for errors.
    store: &'static str,
    state: Mutex<State>,
}

/// What a waiter for a ticket is to do.
enum Turn {
    /// Its ticket is on disk.
    Covered,
    /// The flush that was to cover it failed, for this reason.
    Failed(String),
    /// Flush: every ticket up to this one is to be covered.
    Lead(u64),
}

/// A commit waiting for a flush: takes itself out of the waiters when it
/// goes, handing on the lead of the next flush if it was woken to take it.
struct Waiter<'a> {
    group: &'a GroupFlush,
    key: (u64, u64),
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        let mut state = self.group.state();
        state.waiting.remove(&self.key);
        if state.next_leader == Some(self.key) {
            state.next_leader = None;
            let leader = state.next_leader();
            drop(state);
            if let Some(leader) = leader {
                leader.wake();
            }
        }
    }
}

impl GroupFlush {
    /// Group commit for the store named `store` (in its errors).
    pub(crate) fn new(store: &'static str) -> Self {
        Self {
            store,
            state: Mutex::default(),
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

    /// Waits until `ticket` is covered, has failed, or is to lead a flush.
    async fn turn(&self, ticket: u64) -> Turn {
        let waiter = {
            let mut state = self.state();
            state.waiters += 1;
            Waiter {
                group: self,
                key: (ticket, state.waiters),
            }
        };
        std::future::poll_fn(|cx| {
            let mut state = self.state();
            let key = waiter.key;
            if state.flushed >= ticket {
                return Poll::Ready(Turn::Covered);
            }
            if let Some((upto, why)) = &state.failed
                && *upto >= ticket
            {
                return Poll::Ready(Turn::Failed(why.clone()));
            }
            if !state.flushing && state.next_leader.is_none_or(|k| k == key) {
                state.flushing = true;
                state.next_leader = None;
                state.waiting.remove(&key);
                return Poll::Ready(Turn::Lead(state.applied));
            }
            match state.waiting.get_mut(&key) {
                Some(waker) => waker.clone_from(cx.waker()),
                None => {
                    state.waiting.insert(key, cx.waker().clone());
                }
            }
            Poll::Pending
        })
        .await
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
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<u64, StoreError>>,
    {
        let target = match self.turn(ticket).await {
            Turn::Covered => return Ok(()),
            Turn::Failed(why) => {
                return Err(StoreError::backend(format!(
                    "{}: the flush covering this commit failed: {why}",
                    self.store
                )));
            }
            Turn::Lead(target) => target,
        };
        // Ends the flush however it ends (a leader whose future is dropped
        // mid-flush included): the flush is no longer running, the commits
        // it covers are woken, and the first other waiter leads the next.
        struct Lead<'a> {
            group: &'a GroupFlush,
            target: u64,
            result: Option<Result<u64, String>>,
        }
        impl Drop for Lead<'_> {
            fn drop(&mut self) {
                let mut state = self.group.state();
                state.flushing = false;
                match self.result.take() {
                    Some(Ok(covered)) => {
                        state.flushed = state.flushed.max(self.target).max(covered);
                    }
                    Some(Err(why)) => state.failed = Some((self.target, why)),
                    // Not known to be on disk: the next flush covers them.
                    None => {}
                }
                let done = match &state.failed {
                    Some((upto, _)) => state.flushed.max(*upto),
                    None => state.flushed,
                };
                let later = state.waiting.split_off(&(done + 1, 0));
                let covered = std::mem::replace(&mut state.waiting, later);
                let leader = state.next_leader();
                drop(state);
                covered.into_values().chain(leader).for_each(Waker::wake);
            }
        }
        let mut lead = Lead {
            group: self,
            target,
            result: None,
        };
        // Commits that are ready to run on this thread join the flush
        // before it sets off.
        tokio::task::yield_now().await;
        let result = flush().await;
        lead.result = Some(result.as_ref().map(|c| *c).map_err(ToString::to_string));
        drop(lead);
        result.map(|_| ())
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

    /// Flushes that finish only once the gate is open (polled by hand),
    /// counted.
    #[derive(Default)]
    struct Gate {
        open: std::sync::atomic::AtomicBool,
        flushes: AtomicU64,
    }

    impl Gate {
        async fn flush(&self) -> Result<u64, StoreError> {
            std::future::poll_fn(|_| {
                if self.open.load(Ordering::SeqCst) {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            })
            .await;
            self.flushes.fetch_add(1, Ordering::SeqCst);
            Ok(0)
        }

        fn open(&self) {
            self.open.store(true, Ordering::SeqCst);
        }

        fn flushes(&self) -> u64 {
            self.flushes.load(Ordering::SeqCst)
        }
    }

    type Durable<'a> = std::pin::Pin<Box<dyn Future<Output = Result<(), StoreError>> + 'a>>;

    /// A durable commit flushing through `gate`, not yet polled.
    fn commit<'a>(group: &'a GroupFlush, gate: &'a Gate) -> Durable<'a> {
        Box::pin(group.durable(group.ticket(), || gate.flush()))
    }

    fn poll(fut: &mut Durable<'_>) -> Poll<Result<(), StoreError>> {
        fut.as_mut()
            .poll(&mut std::task::Context::from_waker(Waker::noop()))
    }

    /// Polls a leader through its yield up to its flush, which waits.
    fn into_flush(fut: &mut Durable<'_>) {
        assert!(poll(fut).is_pending());
        assert!(poll(fut).is_pending());
    }

    /// A waiter woken to lead the next flush whose commit goes away (its
    /// future dropped) hands the lead to the next waiter, which flushes:
    /// no commit is left waiting for a leader that is gone.
    #[test]
    fn a_waiter_chosen_to_lead_that_goes_away_hands_the_lead_on() {
        let (group, gate) = (GroupFlush::new("test store"), Gate::default());
        let mut a = commit(&group, &gate);
        into_flush(&mut a);
        let mut b = commit(&group, &gate);
        let mut c = commit(&group, &gate);
        assert!(poll(&mut b).is_pending());
        assert!(poll(&mut c).is_pending());
        gate.open();
        assert!(matches!(poll(&mut a), Poll::Ready(Ok(()))));
        // `b` was woken to lead; it goes before it does.
        assert_eq!(group.state().next_leader.map(|k| k.0), Some(2));
        drop(b);
        assert_eq!(group.state().next_leader.map(|k| k.0), Some(3));
        assert!(poll(&mut c).is_pending(), "c leads: it yields first");
        assert!(matches!(poll(&mut c), Poll::Ready(Ok(()))));
        assert_eq!(gate.flushes(), 2);
        assert!(group.state().waiting.is_empty());
    }

    /// A leader whose future is dropped in the middle of its flush ends the
    /// flush: the commits it was to cover are not acknowledged by it, and
    /// the next waiter leads a flush that covers them.
    #[test]
    fn a_leader_that_goes_away_mid_flush_leaves_the_next_waiter_to_flush() {
        let (group, gate) = (GroupFlush::new("test store"), Gate::default());
        let mut a = commit(&group, &gate);
        into_flush(&mut a);
        let mut b = commit(&group, &gate);
        assert!(poll(&mut b).is_pending());
        drop(a);
        assert_eq!(
            group.state().flushed,
            0,
            "a flush that did not end covers nothing"
        );
        into_flush(&mut b);
        gate.open();
        assert!(matches!(poll(&mut b), Poll::Ready(Ok(()))));
        assert_eq!(group.state().flushed, 2);
        assert_eq!(gate.flushes(), 1);
    }
}
