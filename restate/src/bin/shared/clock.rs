//! The probes' clock: both stamp what they run with it (`PROBE_CLOCK=1`).

/// Microseconds since the epoch.
pub(crate) fn micros_now() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0)
}
