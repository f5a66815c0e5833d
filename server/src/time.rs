//! Times as the LangGraph API writes them: RFC 3339 in UTC.

/// `ms` (milliseconds since the Unix epoch) as `2024-07-25T15:35:42.598+00:00`.
pub(crate) fn iso(ms: u64) -> String {
    let secs = ms / 1000;
    let millis = ms % 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX / 2);
    let rem = secs % 86_400;
    let (y, m, d) = civil(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}+00:00",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard
/// Hinnant's algorithm).
pub(crate) fn civil(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (
        y,
        u32::try_from(m).unwrap_or(1),
        u32::try_from(d).unwrap_or(1),
    )
}

#[cfg(test)]
mod tests {
    use super::iso;

    #[test]
    fn times_are_rfc3339_in_utc() {
        assert_eq!(iso(0), "1970-01-01T00:00:00.000+00:00");
        // 2024-02-29T12:34:56.789Z, a leap day.
        assert_eq!(iso(1_709_210_096_789), "2024-02-29T12:34:56.789+00:00");
        assert_eq!(iso(951_782_400_000), "2000-02-29T00:00:00.000+00:00");
    }
}
