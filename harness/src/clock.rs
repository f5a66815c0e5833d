//! The wall clock every part of the core reads, in one place.

/// Milliseconds since the Unix epoch, by this machine's clock (0 before
/// the epoch, `u64::MAX` past what fits).
pub(crate) fn now_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
