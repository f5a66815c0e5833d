//! Cron schedules: five fields (minute hour day-of-month month day-of-week)
//! as LangGraph takes them, or six with seconds first; times in UTC.

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
