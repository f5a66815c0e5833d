//! What the `sessions` commands print, the same for the typed and the
//! untyped command.

use crate::ids::SessionId;
use crate::session::{CheckpointInfo, SessionPhase, StoreLoad, StoredRun, now_millis};
use serde::Serialize;
use std::fmt::Write;

/// A session's phase in words.
pub(super) fn phase(head: &StoredRun) -> String {
    match &head.phase {
        SessionPhase::Running => match &head.lease {
            Some(l) if l.is_live(now_millis()) => format!("running ({})", l.owner),
            _ => "runnable (no run holds it: submitted, or its run stopped mid-way; \
                  a worker or recover continues it)"
                .into(),
        },
        other => phase_of(other),
    }
}

/// A phase in words, without the lease a running session's words name.
pub(super) fn phase_of(phase: &SessionPhase) -> String {
    match phase {
        SessionPhase::Running => "running".into(),
        SessionPhase::Interrupted { interrupt } => {
            format!("interrupted at `{}` ({})", interrupt.step, interrupt.id)
        }
        SessionPhase::Completed { signal } => format!("completed with `{signal}`"),
        SessionPhase::Failed { error } => format!("failed: {error}"),
    }
}

/// `text` as one line a terminal shows as it is: its control characters
/// (a new line, an escape sequence from a session id or an error message)
/// written as escapes (`\n`, `\u{1b}`).
fn line(text: impl std::fmt::Display) -> String {
    let text = text.to_string();
    if !text.chars().any(char::is_control) {
        return text;
    }
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// One line per session, oldest first, then one per session whose head
/// does not read.
pub(super) fn list(out: &mut String, mut heads: Vec<StoredRun>, unreadable: &[StoreLoad]) {
    if heads.is_empty() && unreadable.is_empty() {
        out.push_str("no sessions\n");
    }
    heads.sort_by(|a, b| (a.created_at, &a.session_id).cmp(&(b.created_at, &b.session_id)));
    for h in heads {
        let _ = writeln!(
            out,
            "{}  agent {}  {} steps  {}",
            line(&h.session_id),
            line(&h.agent_id),
            h.steps,
            line(phase(&h))
        );
    }
    for load in unreadable {
        let _ = writeln!(
            out,
            "{}  cannot be read: its {} ({})",
            line(&load.session),
            line(&load.record),
            line(&load.reason)
        );
    }
}

/// The head: who, where, what it asks.
pub(super) fn head(out: &mut String, head: &StoredRun) {
    let _ = writeln!(out, "session:   {}", line(&head.session_id));
    let _ = writeln!(out, "agent:     {}", line(&head.agent_id));
    let _ = writeln!(out, "phase:     {}", line(phase(head)));
    if let SessionPhase::Interrupted { interrupt } = &head.phase {
        let _ = writeln!(out, "asks:      {}", interrupt.payload);
    }
    let _ = writeln!(
        out,
        "next step: {}",
        line(head.next_step.as_deref().unwrap_or("(none)"))
    );
    let _ = writeln!(out, "steps:     {}", head.steps);
    let _ = writeln!(out, "updated:   {}", utc(head.updated_at));
}

/// The checkpoints, one per line.
pub(super) fn history(out: &mut String, session: &SessionId, history: &[CheckpointInfo]) {
    let _ = writeln!(
        out,
        "session {}: {} checkpoints",
        line(session),
        history.len()
    );
    let _ = writeln!(out, "{:>6}  {:<24}  step", "after", "written (UTC)");
    for cp in history {
        let _ = writeln!(
            out,
            "{:>6}  {:<24}  {}",
            cp.index,
            utc(cp.time),
            line(&cp.step)
        );
    }
}

/// Pretty JSON of a value.
pub(super) fn pretty(value: &impl Serialize) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|e| format!("(cannot render: {e})"))
}

/// Compact JSON of a value.
pub(super) fn compact(value: &impl Serialize) -> String {
    serde_json::to_string(value).unwrap_or_else(|e| format!("(cannot render: {e})"))
}

/// Milliseconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub(super) fn utc(ms: u64) -> String {
    let (secs, millis) = (ms / 1000, ms % 1000);
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, for days on or after the epoch).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_written_as_escapes() {
        assert_eq!(line("plain id"), "plain id");
        assert_eq!(line("a\nb"), "a\\nb");
        assert_eq!(line("\u{1b}[2Jgone"), "\\u{1b}[2Jgone");
        assert_eq!(line("tab\there\r"), "tab\\there\\r");
        assert_eq!(line("é ünïcode"), "é ünïcode");
    }

    #[test]
    fn times_are_utc_dates() {
        assert_eq!(utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(utc(1_795_406_554_123), "2026-11-23T04:02:34.123Z");
        assert_eq!(utc(4_107_542_399_999), "2100-02-28T23:59:59.999Z");
    }
}
