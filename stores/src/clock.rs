//! The clock of a store on a server: leases are judged by the server's clock,
//! which every process sharing the store reads alike, estimated from this
//! machine's clock and an offset measured against the server now and then.

use harness::session::now_millis;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// How long a measured offset is trusted before it is measured again (ms).
const RESAMPLE_AFTER_MS: u64 = 30_000;

/// A server's clock, as this process estimates it.
#[derive(Debug, Default)]
pub(crate) struct ServerClock {
    /// The server's clock minus this machine's, in ms.
    offset_ms: AtomicI64,
    /// This machine's time of the last measure (ms); 0 before the first.
    sampled_at: AtomicU64,
}

impl ServerClock {
    /// The server's time now (ms since the epoch), as last measured.
    pub(crate) fn now(&self) -> u64 {
        now_millis().saturating_add_signed(self.offset_ms.load(Ordering::Relaxed))
    }

    /// Whether the offset is due to be measured (again).
    pub(crate) fn is_stale(&self) -> bool {
        let at = self.sampled_at.load(Ordering::Relaxed);
        at == 0 || now_millis().saturating_sub(at) >= RESAMPLE_AFTER_MS
    }

    /// Records a measure: the server read `server` (ms) between this
    /// machine's `before` and `after`; the estimate takes the midpoint, so
    /// its error is at most half the round trip.
    pub(crate) fn record(&self, before: u64, server: u64, after: u64) {
        let local = before / 2 + after / 2;
        let offset = i128::from(server) - i128::from(local);
        let offset = i64::try_from(offset).unwrap_or(if offset < 0 { i64::MIN } else { i64::MAX });
        self.offset_ms.store(offset, Ordering::Relaxed);
        self.sampled_at.store(after.max(1), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_clock_follows_the_measured_offset() {
        let clock = ServerClock::default();
        assert!(clock.is_stale());
        let before = now_millis();
        let local = clock.now();
        assert!(local >= before && local <= now_millis());

        // A server an hour ahead, then one an hour behind.
        for offset in [3_600_000i64, -3_600_000] {
            let before = now_millis();
            let server = before.saturating_add_signed(offset);
            clock.record(before, server, before);
            assert!(!clock.is_stale());
            let estimate = clock.now();
            let expected = now_millis().saturating_add_signed(offset);
            assert!(
                estimate.abs_diff(expected) < 1_000,
                "{estimate} vs {expected}"
            );
        }
        // Absurd readings saturate rather than wrap.
        clock.record(u64::MAX, 0, u64::MAX);
        assert_eq!(clock.now(), 0);
        clock.record(0, u64::MAX, 0);
        assert!(clock.now() >= i64::MAX as u64);
    }
}
