//! Unified diffs: writing them for patches, and applying the ones models
//! write, tolerantly (line numbers may be off; trailing whitespace and
//! indentation of context lines may differ).

use similar::TextDiff;

/// Why a unified diff could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiffError {
    /// The text has no `@@` hunk.
    #[error("the diff has no hunk (no line starting with `@@`)")]
    NoHunks,
    /// A hunk header is not `@@ -a,b +c,d @@`.
    #[error("line {line} of the diff is not a valid hunk header: {text:?}")]
    BadHeader {
        /// 1-based line within the diff.
        line: usize,
        /// The header as written.
        text: String,
    },
    /// A hunk's context and removed lines are not in the source.
    #[error(
        "hunk {hunk} does not match the source: its lines (starting {first:?}) are not found at or near line {near}"
    )]
    ContextMismatch {
        /// 1-based number of the hunk.
        hunk: usize,
        /// The 1-based source line the hunk header pointed at.
        near: usize,
        /// The first line the hunk expects to find.
        first: String,
    },
}

/// A unified diff from `old` to `new` with three lines of context, under
/// the header `a/{label}` / `b/{label}`; empty when they are equal.
///
/// ```
/// let diff = harness_code::patch::unified_diff("x = 1\ny = 2\n", "x = 1\ny = 3\n", "cell-0");
/// assert!(diff.contains("-y = 2\n+y = 3\n"));
/// ```
pub fn unified_diff(old: &str, new: &str, label: &str) -> String {
    if old == new {
        return String::new();
    }
    TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{label}"), &format!("b/{label}"))
        .to_string()
}

struct Hunk {
    header_line: usize,
    old_start: Option<usize>,
    old_is_empty: bool,
    /// (kind, text): ' ' context, '-' removed, '+' added.
    lines: Vec<(char, String)>,
}

fn parse_range(text: &str) -> Option<(usize, Option<usize>)> {
    let (start, count) = match text.split_once(',') {
        Some((start, count)) => (start, Some(count.parse().ok()?)),
        None => (text, None),
    };
    Some((start.parse().ok()?, count))
}

fn parse_header(text: &str, line: usize) -> Result<(Option<usize>, bool), DiffError> {
    let bad = || DiffError::BadHeader {
        line,
        text: text.to_owned(),
    };
    let inner = text.trim_start_matches('@').trim_start();
    let inner = inner.split("@@").next().unwrap_or("").trim();
    if inner.is_empty() {
        // `@@ @@`: no position, found by its context.
        return Ok((None, false));
    }
    let old = inner
        .split_whitespace()
        .next()
        .and_then(|part| part.strip_prefix('-'))
        .ok_or_else(bad)?;
    let (start, count) = parse_range(old).ok_or_else(bad)?;
    Ok((Some(start), count == Some(0)))
}

fn parse_hunks(diff: &str) -> Result<Vec<Hunk>, DiffError> {
    let mut hunks: Vec<Hunk> = Vec::new();
    let mut in_hunk = false;
    for (index, line) in diff.lines().enumerate() {
        if line.starts_with("@@") {
            let (old_start, old_is_empty) = parse_header(line, index + 1)?;
            hunks.push(Hunk {
                header_line: index + 1,
                old_start,
                old_is_empty,
                lines: Vec::new(),
            });
            in_hunk = true;
            continue;
        }
        if !in_hunk {
            continue;
        }
        let Some(hunk) = hunks.last_mut() else {
            continue;
        };
        if line.starts_with("--- ") || line.starts_with("+++ ") || line.starts_with("diff ") {
            // The header of another file's diff: end of this hunk.
            in_hunk = false;
            continue;
        }
        match line.chars().next() {
            Some(kind @ (' ' | '-' | '+')) => hunk.lines.push((kind, line[1..].to_owned())),
            // Models often drop the space of an empty context line.
            None => hunk.lines.push((' ', String::new())),
            Some('\\') => {}
            Some(_) => in_hunk = false,
        }
    }
    if hunks.is_empty() {
        return Err(DiffError::NoHunks);
    }
    Ok(hunks)
}

fn matches_at(source: &[String], at: usize, expected: &[&str], loose: bool) -> bool {
    at + expected.len() <= source.len()
        && expected.iter().enumerate().all(|(i, want)| {
            let have = &source[at + i];
            if loose {
                have.trim() == want.trim()
            } else {
                have.trim_end() == want.trim_end()
            }
        })
}

/// Finds `expected` in `source` at or after `from`, nearest to `near` first.
fn locate(source: &[String], expected: &[&str], near: usize, from: usize) -> Option<usize> {
    if expected.is_empty() {
        return Some(near.clamp(from, source.len()));
    }
    let last = source.len().checked_sub(expected.len())?;
    if from > last {
        return None;
    }
    let near = near.clamp(from, last);
    for loose in [false, true] {
        for distance in 0..=last {
            let below = near.checked_sub(distance).filter(|&at| at >= from);
            let above = near.checked_add(distance).filter(|&at| at <= last);
            if below.is_none() && above.is_none() {
                break;
            }
            for at in [below, above].into_iter().flatten() {
                if matches_at(source, at, expected, loose) {
                    return Some(at);
                }
            }
        }
    }
    None
}

/// Applies a unified diff to `old`. Headers (`---`, `+++`) are optional,
/// hunks are located by their context and removed lines nearest to the
/// position their header gives (so wrong line numbers and `@@ @@` headers
/// work), comparing lines without trailing whitespace, and then without
/// any surrounding whitespace. Context lines keep the source's text.
///
/// ```
/// use harness_code::patch::apply_unified_diff;
///
/// let old = "xs = [1, 2]\nprint(totl)\n";
/// let diff = "@@ -2 +2 @@\n-print(totl)\n+print(sum(xs))\n";
/// assert_eq!(apply_unified_diff(old, diff).unwrap(), "xs = [1, 2]\nprint(sum(xs))\n");
/// ```
///
/// # Errors
///
/// [`DiffError::NoHunks`], [`DiffError::BadHeader`], or
/// [`DiffError::ContextMismatch`] when a hunk's lines are not in `old`.
pub fn apply_unified_diff(old: &str, diff: &str) -> Result<String, DiffError> {
    let hunks = parse_hunks(diff)?;
    let mut lines: Vec<String> = old.lines().map(str::to_owned).collect();
    // Where the next hunk may start, in `lines` (already shifted).
    let mut cursor = 0_usize;
    // Lines added minus lines removed so far, to shift later headers.
    let mut shift: isize = 0;
    for (number, hunk) in hunks.iter().enumerate() {
        let expected: Vec<&str> = hunk
            .lines
            .iter()
            .filter(|(kind, _)| *kind != '+')
            .map(|(_, text)| text.as_str())
            .collect();
        let near = match hunk.old_start {
            // `-a,0` inserts after line a; `-a,b` starts at line a.
            Some(start) if hunk.old_is_empty => start,
            Some(start) => start.saturating_sub(1),
            None => cursor,
        };
        let near_shifted = near.saturating_add_signed(shift);
        let at = locate(&lines, &expected, near_shifted, cursor).ok_or_else(|| {
            DiffError::ContextMismatch {
                hunk: number + 1,
                near: hunk.old_start.unwrap_or(hunk.header_line),
                first: expected
                    .first()
                    .map_or_else(String::new, |s| (*s).to_owned()),
            }
        })?;
        let mut replacement = Vec::new();
        let mut offset = 0;
        for (kind, text) in &hunk.lines {
            match kind {
                ' ' => {
                    replacement.push(lines[at + offset].clone());
                    offset += 1;
                }
                '-' => offset += 1,
                _ => replacement.push(text.clone()),
            }
        }
        let added = replacement.len();
        lines.splice(at..at + expected.len(), replacement);
        cursor = at + added;
        shift += isize::try_from(added).unwrap_or(0) - isize::try_from(expected.len()).unwrap_or(0);
    }
    let mut out = lines.join("\n");
    if old.ends_with('\n') || (old.is_empty() && !out.is_empty()) {
        out.push('\n');
    }
    Ok(out)
}

/// Whether `text` looks like a unified diff: it has a hunk header and
/// changed lines.
pub(crate) fn looks_like_diff(text: &str) -> bool {
    let mut hunk = false;
    let mut changes = false;
    for line in text.lines() {
        if line.starts_with("@@") {
            hunk = true;
        } else if hunk && (line.starts_with('+') || line.starts_with('-')) {
            changes = true;
        }
    }
    hunk && changes
}
