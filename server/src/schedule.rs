//! Cron schedules: five fields (minute hour day-of-month month day-of-week)
//! as LangGraph takes them, or six with seconds first; times in UTC, or in
//! an IANA time zone.

use std::fmt;

/// A parsed schedule.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Schedule {
    seconds: Vec<u32>,
    minutes: Vec<u32>,
    hours: Vec<u32>,
    days: Vec<u32>,
    months: Vec<u32>,
    weekdays: Vec<u32>,
    /// Whether day-of-month and day-of-week were both restricted (then a
    /// day matches either, as cron has it).
    either_day: bool,
}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Schedule").finish_non_exhaustive()
    }
}

/// Reads one field: `*`, `n`, `a-b`, with `/step`, in lists.
fn field(text: &str, name: &str, min: u32, max: u32) -> Result<(Vec<u32>, bool), String> {
    let mut values = Vec::new();
    let any = text == "*";
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => (
                r,
                s.parse::<u32>()
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| format!("the {name} step `{s}` is not a positive number"))?,
            ),
            None => (part, 1),
        };
        let number = |s: &str| {
            s.parse::<u32>()
                .ok()
                .filter(|n| (min..=max).contains(n))
                .ok_or_else(|| format!("the {name} `{s}` is not a number from {min} to {max}"))
        };
        let (from, to) = if range == "*" {
            (min, max)
        } else if let Some((a, b)) = range.split_once('-') {
            let (a, b) = (number(a)?, number(b)?);
            if a > b {
                return Err(format!("the {name} range `{range}` runs backwards"));
            }
            (a, b)
        } else {
            let n = number(range)?;
            (n, if part.contains('/') { max } else { n })
        };
        values.extend((from..=to).step_by(step as usize));
    }
    values.sort_unstable();
    values.dedup();
    Ok((values, any))
}

impl Schedule {
    /// Reads `text`; the error says which field is wrong and why.
    pub(crate) fn parse(text: &str) -> Result<Schedule, String> {
        let fields: Vec<&str> = text.split_whitespace().collect();
        let (seconds, rest) = match fields.len() {
            5 => ("0", &fields[..]),
            6 => (fields[0], &fields[1..]),
            n => {
                return Err(format!(
                    "a schedule has 5 fields (minute hour day month weekday), or 6 with seconds \
                     first; `{text}` has {n}"
                ));
            }
        };
        let (seconds, _) = field(seconds, "second", 0, 59)?;
        let (minutes, _) = field(rest[0], "minute", 0, 59)?;
        let (hours, _) = field(rest[1], "hour", 0, 23)?;
        let (days, any_day) = field(rest[2], "day of month", 1, 31)?;
        let (months, _) = field(rest[3], "month", 1, 12)?;
        let (mut weekdays, any_weekday) = field(rest[4], "day of week", 0, 7)?;
        // 7 is Sunday too.
        if weekdays.contains(&7) {
            weekdays.retain(|d| *d != 7);
            if !weekdays.contains(&0) {
                weekdays.insert(0, 0);
            }
        }
        Ok(Schedule {
            seconds,
            minutes,
            hours,
            days,
            months,
            weekdays,
            either_day: !any_day && !any_weekday,
        })
    }

    fn day_matches(&self, day: u32, month: u32, weekday: u32) -> bool {
        if !self.months.contains(&month) {
            return false;
        }
        let by_date = self.days.contains(&day);
        let by_weekday = self.weekdays.contains(&weekday);
        if self.either_day {
            by_date || by_weekday
        } else {
            by_date && by_weekday
        }
    }

    /// The first time strictly after `after` (ms since the epoch) that the
    /// schedule names, within the next five years.
    pub(crate) fn next_after(&self, after: u64) -> Option<u64> {
        let after_s = after / 1000;
        let start_day = i64::try_from(after_s / 86_400).ok()?;
        for day in start_day..start_day + 5 * 366 {
            let (_, month, dom) = crate::time::civil(day);
            // 1970-01-01 was a Thursday (4).
            let weekday = u32::try_from((day + 4).rem_euclid(7)).ok()?;
            if !self.day_matches(dom, month, weekday) {
                continue;
            }
            let base = u64::try_from(day).ok()? * 86_400;
            for h in &self.hours {
                for m in &self.minutes {
                    for s in &self.seconds {
                        let t = base + u64::from(*h) * 3600 + u64::from(*m) * 60 + u64::from(*s);
                        if t > after_s {
                            return Some(t * 1000);
                        }
                    }
                }
            }
        }
        None
    }

    /// The first time strictly after `after` (ms since the epoch) that the
    /// schedule names on the clocks of `zone`, within the next five years.
    /// A time the clocks skip (a daylight-saving gap) fires when the gap
    /// ends, shifted by its length; a time they show twice (a fold) fires
    /// once, the first time.
    pub(crate) fn next_after_in(&self, after: u64, zone: &jiff::tz::TimeZone) -> Option<u64> {
        use jiff::{SignedDuration, Timestamp};
        if zone.iana_name().is_some_and(|n| n == "UTC") {
            return self.next_after(after);
        }
        let after_ts = Timestamp::from_millisecond(i64::try_from(after).ok()?).ok()?;
        // From the day before, in case the zone's day began before `after`'s.
        let mut day = zone.to_datetime(after_ts).date().yesterday().ok()?;
        // Shifted times (in a gap) can come later than the next civil
        // times: once a time is found, the next hours are looked at too.
        let window = SignedDuration::from_hours(3);
        let mut best: Option<(Timestamp, jiff::civil::DateTime)> = None;
        for _ in 0..5 * 366 + 2 {
            let weekday = u32::try_from(day.weekday().to_sunday_zero_offset()).ok()?;
            let month = u32::try_from(day.month()).ok()?;
            let dom = u32::try_from(day.day()).ok()?;
            if self.day_matches(dom, month, weekday) {
                for h in &self.hours {
                    for m in &self.minutes {
                        for s in &self.seconds {
                            let civil = day.at(
                                i8::try_from(*h).ok()?,
                                i8::try_from(*m).ok()?,
                                i8::try_from(*s).ok()?,
                                0,
                            );
                            if let Some((ts, first)) = best
                                && first.checked_add(window).is_ok_and(|end| civil > end)
                            {
                                return u64::try_from(ts.as_millisecond()).ok();
                            }
                            let Ok(ts) = zone.to_ambiguous_timestamp(civil).compatible() else {
                                continue;
                            };
                            if ts > after_ts {
                                best = match best {
                                    Some((b, first)) if b <= ts => Some((b, first)),
                                    Some((_, first)) => Some((ts, first)),
                                    None => Some((ts, civil)),
                                };
                            }
                        }
                    }
                }
            }
            day = day.tomorrow().ok()?;
        }
        best.and_then(|(ts, _)| u64::try_from(ts.as_millisecond()).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::Schedule;

    const T0: u64 = 1_709_210_096_789; // 2024-02-29T12:34:56.789Z, a Thursday

    fn next(s: &str, after: u64) -> String {
        crate::time::iso(Schedule::parse(s).unwrap().next_after(after).unwrap())
    }

    #[test]
    fn schedules_name_the_next_time_after_now() {
        assert_eq!(next("* * * * *", T0), "2024-02-29T12:35:00.000+00:00");
        assert_eq!(next("*/15 * * * *", T0), "2024-02-29T12:45:00.000+00:00");
        assert_eq!(next("0 9 * * 1-5", T0), "2024-03-01T09:00:00.000+00:00");
        assert_eq!(next("0 0 29 2 *", T0), "2028-02-29T00:00:00.000+00:00");
        assert_eq!(next("30 8 * * 0", T0), "2024-03-03T08:30:00.000+00:00");
        assert_eq!(next("30 8 * * 7", T0), "2024-03-03T08:30:00.000+00:00");
        // Six fields: seconds first.
        assert_eq!(next("*/2 * * * * *", T0), "2024-02-29T12:34:58.000+00:00");
        // Day of month or day of week, when both are given.
        assert_eq!(next("0 0 1 * 5", T0), "2024-03-01T00:00:00.000+00:00");
    }

    fn next_in(s: &str, after: u64, zone: &str) -> String {
        let zone = jiff::tz::TimeZone::get(zone).unwrap();
        crate::time::iso(
            Schedule::parse(s)
                .unwrap()
                .next_after_in(after, &zone)
                .unwrap(),
        )
    }

    #[test]
    fn schedules_in_a_zone_follow_its_clocks() {
        // 12:34:56Z is 07:34:56 in New York (EST, UTC-5) and 21:34:56 in
        // Tokyo (UTC+9).
        assert_eq!(
            next_in("0 9 * * *", T0, "America/New_York"),
            "2024-02-29T14:00:00.000+00:00"
        );
        assert_eq!(
            next_in("0 9 * * *", T0, "Asia/Tokyo"),
            "2024-03-01T00:00:00.000+00:00"
        );
        // Tokyo's next day has begun: 00:00 there is 15:00Z.
        assert_eq!(
            next_in("0 0 * * *", T0, "Asia/Tokyo"),
            "2024-02-29T15:00:00.000+00:00"
        );
        // Friday in Tokyo starts on Thursday in UTC.
        assert_eq!(
            next_in("30 8 * * 5", T0, "Asia/Tokyo"),
            "2024-02-29T23:30:00.000+00:00"
        );
        // Summer time: 9:00 in New York is 13:00Z from 2024-03-10.
        let march_11 = 1_710_115_200_000; // 2024-03-11T00:00:00Z
        assert_eq!(
            next_in("0 9 * * *", march_11, "America/New_York"),
            "2024-03-11T13:00:00.000+00:00"
        );
        // 02:30 does not exist on 2024-03-10 in New York: it fires at 03:30
        // EDT (07:30Z).
        let march_10 = 1_710_028_800_000; // 2024-03-10T00:00:00Z
        assert_eq!(
            next_in("30 2 * * *", march_10, "America/New_York"),
            "2024-03-10T07:30:00.000+00:00"
        );
        // 01:30 comes twice on 2024-11-03: it fires once, at the first
        // (05:30Z), then the next day (06:30Z, EST).
        let nov_3 = 1_730_592_000_000; // 2024-11-03T00:00:00Z
        let first = next_in("30 1 * * *", nov_3, "America/New_York");
        assert_eq!(first, "2024-11-03T05:30:00.000+00:00");
        let zone = jiff::tz::TimeZone::get("America/New_York").unwrap();
        let after_first = Schedule::parse("30 1 * * *")
            .unwrap()
            .next_after_in(1_730_611_800_000, &zone)
            .unwrap();
        assert_eq!(
            crate::time::iso(after_first),
            "2024-11-04T06:30:00.000+00:00"
        );
        // UTC by name is the UTC schedule.
        assert_eq!(next_in("0 9 * * 1-5", T0, "UTC"), next("0 9 * * 1-5", T0));
    }

    #[test]
    fn malformed_schedules_say_which_field() {
        for (s, says) in [
            ("* * * *", "5 fields"),
            ("61 * * * *", "minute `61`"),
            ("* 24 * * *", "hour `24`"),
            ("* * 0 * *", "day of month `0`"),
            ("* * * 13 *", "month `13`"),
            ("* * * * 8", "day of week `8`"),
            ("*/0 * * * *", "step `0`"),
            ("5-1 * * * *", "backwards"),
            ("a * * * *", "minute `a`"),
        ] {
            let err = Schedule::parse(s).unwrap_err();
            assert!(err.contains(says), "{s}: {err}");
        }
    }
}
