//! The clock of a store on a server: leases are judged by the server's clock,
//! which every process sharing the store reads alike. This process reads it
//! now and then and counts the time since on its monotonic clock, never on
//! its wall clock: a wall clock stepped forward (NTP, a VM resumed) would
//! take over leases still live, one stepped back would put off the next
//! reading and let this process's own leases lapse.

use harness::session::now_millis;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// How long a reading of the server's clock is trusted before it is taken
/// again, on the monotonic clock.
const RESAMPLE_AFTER: Duration = Duration::from_secs(30);

/// This machine's clocks: the two a [`ServerClock`] reads.
pub(crate) trait LocalClock: fmt::Debug + Send + Sync {
    /// The wall clock (ms since the epoch): the estimate before the server
    /// has been read at all, and nothing else.
    fn wall_millis(&self) -> u64;

    /// A clock that never steps: it measures the time between readings.
    fn monotonic(&self) -> Instant;
}

/// The operating system's clocks.
#[derive(Debug)]
struct SystemClock;

impl LocalClock for SystemClock {
    fn wall_millis(&self) -> u64 {
        now_millis()
    }

    fn monotonic(&self) -> Instant {
        Instant::now()
    }
}

/// One reading of the server's clock.
#[derive(Clone, Copy, Debug)]
struct Reading {
    /// When, on the monotonic clock, the server read `server_ms`.
    at: Instant,
    /// The server's time then (ms since the epoch).
    server_ms: u64,
}

/// A server's clock, as this process estimates it.
#[derive(Debug)]
pub(crate) struct ServerClock {
    local: Arc<dyn LocalClock>,
    /// The last reading; `None` before the first.
    last: Mutex<Option<Reading>>,
}

impl Default for ServerClock {
    fn default() -> Self {
        Self::with_local(Arc::new(SystemClock))
    }
}

impl ServerClock {
    /// A clock that reads this machine's time from `local`.
    fn with_local(local: Arc<dyn LocalClock>) -> Self {
        Self {
            local,
            last: Mutex::new(None),
        }
    }

    /// The server's time now (ms since the epoch): the last reading plus the
    /// monotonic time since; this machine's wall clock before any reading.
    pub(crate) fn now(&self) -> u64 {
        match self.last() {
            Some(reading) => reading.server_ms.saturating_add(millis(self.age(reading))),
            None => self.local.wall_millis(),
        }
    }

    /// Whether the server's clock is due to be read (again).
    pub(crate) fn is_stale(&self) -> bool {
        self.last()
            .is_none_or(|reading| self.age(reading) >= RESAMPLE_AFTER)
    }

    /// Reads the server's clock with `read`, which yields the server's time
    /// (ms since the epoch). The reading is taken to stand at the midpoint of
    /// the round trip, so its error is at most half of it. A failed read
    /// keeps the last estimate, and the clock stays due to be read.
    pub(crate) async fn measure<E>(
        &self,
        read: impl Future<Output = Result<u64, E>>,
    ) -> Result<(), E> {
        let sent = self.local.monotonic();
        let server_ms = read.await?;
        let received = self.local.monotonic();
        let at = sent + received.saturating_duration_since(sent) / 2;
        *self.lock() = Some(Reading { at, server_ms });
        Ok(())
    }

    /// The monotonic time since `reading`.
    fn age(&self, reading: Reading) -> Duration {
        self.local.monotonic().saturating_duration_since(reading.at)
    }

    fn last(&self) -> Option<Reading> {
        *self.lock()
    }

    fn lock(&self) -> MutexGuard<'_, Option<Reading>> {
        // A reading is one store of a `Copy` value: a panic cannot leave it
        // half written.
        self.last.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Clocks a test moves by hand: time passing moves both, a step moves
    /// the wall clock alone.
    #[derive(Debug)]
    struct HandClock {
        origin: Instant,
        wall_ms: AtomicU64,
        elapsed_ms: AtomicU64,
    }

    impl HandClock {
        fn at_wall(wall_ms: u64) -> Arc<Self> {
            Arc::new(Self {
                origin: Instant::now(),
                wall_ms: AtomicU64::new(wall_ms),
                elapsed_ms: AtomicU64::new(0),
            })
        }

        /// `ms` pass: both clocks move on.
        fn pass(&self, ms: u64) {
            self.elapsed_ms.fetch_add(ms, Ordering::SeqCst);
            self.wall_ms.fetch_add(ms, Ordering::SeqCst);
        }

        /// The wall clock is stepped by `ms`; no time passes.
        fn step_wall(&self, ms: i64) {
            let wall = self.wall_ms.load(Ordering::SeqCst);
            self.wall_ms
                .store(wall.saturating_add_signed(ms), Ordering::SeqCst);
        }
    }

    impl LocalClock for HandClock {
        fn wall_millis(&self) -> u64 {
            self.wall_ms.load(Ordering::SeqCst)
        }

        fn monotonic(&self) -> Instant {
            self.origin + Duration::from_millis(self.elapsed_ms.load(Ordering::SeqCst))
        }
    }

    const WALL: u64 = 1_700_000_000_000;
    const SERVER: u64 = 1_700_000_500_000;
    const HOUR: i64 = 3_600_000;
    const AGE_MS: u64 = RESAMPLE_AFTER.as_millis() as u64;

    fn clock() -> (ServerClock, Arc<HandClock>) {
        let hand = HandClock::at_wall(WALL);
        (ServerClock::with_local(hand.clone()), hand)
    }

    /// Reads `server_ms` off the server in a round trip of `rtt_ms`.
    async fn read_server(clock: &ServerClock, hand: &HandClock, server_ms: u64, rtt_ms: u64) {
        clock
            .measure(async {
                // The server reads its clock half way through the round trip.
                hand.pass(rtt_ms / 2);
                hand.pass(rtt_ms - rtt_ms / 2);
                Ok::<_, ()>(server_ms)
            })
            .await
            .expect("the read succeeds");
    }

    #[test]
    fn before_any_reading_the_estimate_is_the_wall_clock_and_a_reading_is_due() {
        let (clock, hand) = clock();
        assert_eq!(clock.now(), WALL);
        assert!(clock.is_stale());
        hand.pass(10);
        hand.step_wall(HOUR);
        assert_eq!(clock.now(), WALL + 10 + HOUR as u64);
        assert!(clock.is_stale());
    }

    #[tokio::test]
    async fn the_estimate_advances_by_exactly_the_monotonic_time_since_the_reading() {
        let (clock, hand) = clock();
        read_server(&clock, &hand, SERVER, 0).await;
        assert_eq!(clock.now(), SERVER);
        let mut passed = 0;
        for ms in [1, 999, 12_345, 7] {
            hand.pass(ms);
            passed += ms;
            assert_eq!(clock.now(), SERVER + passed);
        }
    }

    #[tokio::test]
    async fn a_wall_clock_stepped_forward_changes_neither_the_estimate_nor_the_next_reading() {
        let (clock, hand) = clock();
        read_server(&clock, &hand, SERVER, 0).await;
        hand.step_wall(HOUR);
        assert_eq!(clock.now(), SERVER, "a lease still live would be taken");
        assert!(!clock.is_stale());
        hand.pass(1_000);
        assert_eq!(clock.now(), SERVER + 1_000);
        assert!(!clock.is_stale());
    }

    #[tokio::test]
    async fn a_wall_clock_stepped_back_changes_neither_the_estimate_nor_the_next_reading() {
        let (clock, hand) = clock();
        read_server(&clock, &hand, SERVER, 0).await;
        hand.step_wall(-HOUR);
        assert_eq!(clock.now(), SERVER, "leases written would have lapsed");
        assert!(!clock.is_stale());
        hand.pass(AGE_MS);
        assert_eq!(clock.now(), SERVER + AGE_MS);
        assert!(clock.is_stale(), "the next reading is put off");
    }

    #[tokio::test]
    async fn a_wall_clock_stepped_during_the_round_trip_changes_nothing() {
        let (clock, hand) = clock();
        let read = clock.measure(async {
            hand.pass(100);
            hand.step_wall(HOUR);
            hand.pass(100);
            Ok::<_, ()>(SERVER)
        });
        read.await.expect("the read succeeds");
        assert_eq!(clock.now(), SERVER + 100);
        assert!(!clock.is_stale());
    }

    #[tokio::test]
    async fn the_server_is_taken_to_read_at_the_midpoint_of_the_round_trip() {
        let (clock, hand) = clock();
        read_server(&clock, &hand, SERVER, 200).await;
        assert_eq!(clock.now(), SERVER + 100);
        hand.pass(50);
        assert_eq!(clock.now(), SERVER + 150);
    }

    #[tokio::test]
    async fn a_reading_is_due_once_the_last_is_as_old_as_the_set_age_and_not_before() {
        let (clock, hand) = clock();
        read_server(&clock, &hand, SERVER, 0).await;
        hand.pass(AGE_MS - 1);
        assert!(!clock.is_stale());
        hand.pass(1);
        assert!(clock.is_stale());

        // A second reading replaces the first and restarts the count.
        read_server(&clock, &hand, SERVER + 10_000_000, 0).await;
        assert_eq!(clock.now(), SERVER + 10_000_000);
        assert!(!clock.is_stale());
        hand.pass(AGE_MS - 1);
        assert!(!clock.is_stale());
        hand.pass(1);
        assert!(clock.is_stale());
    }

    #[tokio::test]
    async fn no_wall_clock_step_puts_off_the_next_reading() {
        for step in [-10 * 24 * HOUR, -HOUR, -1, 1, HOUR, 10 * 24 * HOUR] {
            let (clock, hand) = clock();
            read_server(&clock, &hand, SERVER, 0).await;
            hand.pass(AGE_MS / 2);
            hand.step_wall(step);
            assert!(!clock.is_stale(), "step {step}: due early");
            hand.pass(AGE_MS - AGE_MS / 2);
            assert!(clock.is_stale(), "step {step}: reading put off");
            assert_eq!(clock.now(), SERVER + AGE_MS, "step {step}");
        }
    }

    #[tokio::test]
    async fn a_failed_read_keeps_the_last_estimate_and_the_clock_due() {
        let (clock, hand) = clock();
        read_server(&clock, &hand, SERVER, 0).await;
        hand.pass(AGE_MS);
        let failed = clock.measure(async {
            hand.pass(100);
            Err::<u64, _>("connection reset")
        });
        assert_eq!(failed.await, Err("connection reset"));
        assert_eq!(clock.now(), SERVER + AGE_MS + 100);
        assert!(clock.is_stale());
    }

    #[tokio::test]
    async fn absurd_readings_saturate_rather_than_wrap() {
        let (clock, hand) = clock();
        read_server(&clock, &hand, u64::MAX, 0).await;
        hand.pass(5);
        assert_eq!(clock.now(), u64::MAX);
        read_server(&clock, &hand, 0, 0).await;
        hand.pass(5);
        assert_eq!(clock.now(), 5);
    }

    #[tokio::test]
    async fn the_system_clock_follows_a_server_an_hour_off() {
        let clock = ServerClock::default();
        assert!(clock.is_stale());
        for offset in [HOUR, -HOUR] {
            clock
                .measure(async { Ok::<_, ()>(now_millis().saturating_add_signed(offset)) })
                .await
                .expect("the read succeeds");
            assert!(!clock.is_stale());
            let estimate = clock.now();
            let expected = now_millis().saturating_add_signed(offset);
            assert!(
                estimate.abs_diff(expected) < 1_000,
                "{estimate} vs {expected}"
            );
        }
    }
}
