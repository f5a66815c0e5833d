//! Verification: a feature's steps run as real commands in the working
//! directory, and the run they make — the evidence a passing status refers
//! to.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Duration;

/// Output kept per verification step, at most (the end of it).
const MAX_OUTPUT: usize = 4 * 1024;

/// One check of a feature: a command run with `sh -c` in the working
/// directory; it passes when it exits with 0 and, if `expect_stdout` is
/// given, its standard output contains that text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct VerificationStep {
    /// What the step checks, for people.
    pub description: String,
    /// The command line, for `sh -c`, run in the working directory.
    pub command: String,
    /// Text the command's standard output must contain, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_stdout: Option<String>,
}

impl VerificationStep {
    /// A step that runs `command`.
    pub fn new(description: impl Into<String>, command: impl Into<String>) -> Self {
        Self {
            description: description.into(),
            command: command.into(),
            expect_stdout: None,
        }
    }

    /// The step also requires `text` in the command's standard output.
    #[must_use]
    pub fn expecting(mut self, text: impl Into<String>) -> Self {
        self.expect_stdout = Some(text.into());
        self
    }
}

/// What one verification step did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct StepOutcome {
    /// The step's command.
    pub command: String,
    /// Its exit code; `None` if it could not start, was killed or timed out.
    pub exit_code: Option<i32>,
    /// Whether it passed.
    pub passed: bool,
    /// The end of its standard output and error, or why it did not run.
    pub output: String,
}

/// A run of a feature's verification steps: the evidence a `passing`
/// status refers to by [`id`](Self::id). Kept in the session store, where
/// the agent's tools cannot rewrite it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct VerificationRun {
    /// The run's id (`{session}/verify`), unique in the project.
    pub id: String,
    /// The feature verified.
    pub feature: String,
    /// The session that ran it.
    pub session: String,
    /// Each step's outcome, in order.
    pub steps: Vec<StepOutcome>,
    /// Whether every step passed (and there was at least one).
    pub passed: bool,
}

impl VerificationRun {
    /// The share of steps that passed, from 0 to 1.
    pub fn score(&self) -> f32 {
        if self.steps.is_empty() {
            return 0.0;
        }
        let passed = self.steps.iter().filter(|s| s.passed).count();
        passed as f32 / self.steps.len() as f32
    }

    /// One line per step: `✓ command` or `✗ command: output`.
    pub fn summary(&self) -> String {
        self.steps
            .iter()
            .map(|s| {
                if s.passed {
                    format!("✓ {}", s.command)
                } else {
                    format!("✗ {} ({})", s.command, s.output.trim())
                }
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Runs `steps` in `dir`, each with at most `timeout`, and returns their
/// outcomes. A step that cannot start or times out fails; the others still
/// run.
///
/// Each outcome's output and command are [redacted](harness::secrets) of
/// the process's secrets before they are returned (a step that prints a
/// configuration file holding a provider key, say): the outcome is what
/// the session's state, the evidence kept in the store, the progress log,
/// the report and the model's prompts are made from. Whether a step passed
/// (`expect_stdout`) is decided on its output as it came.
pub async fn run_steps(
    dir: &Path,
    steps: &[VerificationStep],
    timeout: Duration,
) -> Vec<StepOutcome> {
    let mut outcomes = Vec::with_capacity(steps.len());
    for step in steps {
        let mut outcome = run_step(dir, step, timeout).await;
        harness::secrets::redact_string(&mut outcome.output);
        harness::secrets::redact_string(&mut outcome.command);
        outcomes.push(outcome);
    }
    outcomes
}

/// The variables a command inherits from the host: the agent kit's
/// (see [`harness_kit::shell::PASS_ENV`]).
pub use harness_kit::shell::PASS_ENV;

/// `program`, confined as every command run in the project directory is
/// (a model's, and the host's own `git`, which runs what the repository's
/// config says): as the agent kit's shell tool confines its commands, see
/// [`harness_kit::shell::confined`] (the host non-dumpable, only
/// [`PASS_ENV`] inherited, no capabilities when run by root).
pub(crate) fn confined(program: &str) -> Result<tokio::process::Command, String> {
    harness_kit::shell::confined(program)
}

async fn run_step(dir: &Path, step: &VerificationStep, timeout: Duration) -> StepOutcome {
    let fail = |output: String| StepOutcome {
        command: step.command.clone(),
        exit_code: None,
        passed: false,
        output,
    };
    let mut command = match confined("sh") {
        Ok(command) => command,
        Err(e) => return fail(e),
    };
    command
        .arg("-c")
        .arg(&step.command)
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    // Its own process group, so that what it starts in the background is
    // killed with it.
    #[cfg(unix)]
    command.process_group(0);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => return fail(format!("cannot start sh: {e}")),
    };
    // Killed however this ends, a dropped call included.
    let mut group = harness_kit::shell::ProcessGroup::of(&child);
    // Each stream is read as it comes and only its end is kept: a command
    // that writes gigabytes costs the host `MAX_OUTPUT` bytes a stream.
    let needle = step.expect_stdout.clone().map(String::into_bytes);
    let stdout = tokio::spawn(capture(child.stdout.take(), needle));
    let stderr = tokio::spawn(capture(child.stderr.take(), None));
    let status = tokio::time::timeout(timeout, child.wait()).await;
    // The command's end (or its time) is the end of whatever it started in
    // the background too, which would otherwise hold its output open.
    group.kill();
    let status = match status {
        Err(_) => {
            let _ = child.kill().await;
            stdout.abort();
            stderr.abort();
            return fail(format!("timed out after {} s", timeout.as_secs()));
        }
        Ok(Err(e)) => {
            stdout.abort();
            stderr.abort();
            return fail(format!("sh failed: {e}"));
        }
        Ok(Ok(status)) => status,
    };
    // A process that left the group may still hold the pipes: read what
    // came within a grace period, then stop reading.
    let grace = Duration::from_secs(2);
    let collect = |mut task: tokio::task::JoinHandle<Captured>| async move {
        let captured = tokio::time::timeout(grace, &mut task)
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        task.abort();
        captured
    };
    let out = collect(stdout).await;
    let err = collect(stderr).await;
    let expected = step.expect_stdout.is_none() || out.found;
    let mut text = format!("{}{}", out.text(), err.text());
    if status.success() && !expected {
        text.push_str(&format!(
            "\n[expected the output to contain {:?}]",
            step.expect_stdout.as_deref().unwrap_or_default()
        ));
    }
    let mut text = tail(text);
    if (out.cut || err.cut) && !text.starts_with(ELIDED) {
        text.insert_str(0, ELIDED);
    }
    StepOutcome {
        command: step.command.clone(),
        exit_code: status.code(),
        passed: status.success() && expected,
        output: text,
    }
}

/// What a command wrote to one stream: its last `MAX_OUTPUT` bytes (at
/// most), whether anything came before them, and whether a text looked
/// for appeared anywhere in it.
#[derive(Debug, Default)]
struct Captured {
    kept: Vec<u8>,
    cut: bool,
    found: bool,
}

impl Captured {
    /// The kept bytes as text; a cut mid-character drops that character's
    /// rest.
    fn text(&self) -> String {
        let mut start = 0;
        if self.cut {
            while self.kept.get(start).is_some_and(|b| b & 0xC0 == 0x80) {
                start += 1;
            }
        }
        String::from_utf8_lossy(&self.kept[start..]).into_owned()
    }
}

/// Reads `stream` to its end (or an error), keeping its last `MAX_OUTPUT`
/// bytes and looking for `needle` in all of it, across reads: it holds at
/// most about `2 * MAX_OUTPUT` bytes plus `needle`'s length, whatever the
/// stream's size.
async fn capture(
    stream: Option<impl tokio::io::AsyncRead + Unpin>,
    needle: Option<Vec<u8>>,
) -> Captured {
    use tokio::io::AsyncReadExt;
    let mut captured = Captured {
        found: needle.as_ref().is_some_and(Vec::is_empty),
        ..Captured::default()
    };
    let Some(mut stream) = stream else {
        return captured;
    };
    // The end of what came, as long as `needle` less one byte: a match
    // that straddles two reads is found in it and the next read.
    let mut window: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 16 << 10];
    loop {
        let n = match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        if let Some(needle) = needle.as_deref().filter(|_| !captured.found) {
            window.extend_from_slice(chunk);
            captured.found = window.windows(needle.len()).any(|w| w == needle);
            let keep = needle.len() - 1;
            if window.len() > keep {
                window.drain(..window.len() - keep);
            }
        }
        captured.kept.extend_from_slice(chunk);
        if captured.kept.len() > 2 * MAX_OUTPUT {
            let drop = captured.kept.len() - MAX_OUTPUT;
            captured.kept.drain(..drop);
            captured.cut = true;
        }
    }
    if captured.kept.len() > MAX_OUTPUT {
        let drop = captured.kept.len() - MAX_OUTPUT;
        captured.kept.drain(..drop);
        captured.cut = true;
    }
    captured
}

/// The mark before output whose beginning was dropped.
const ELIDED: &str = "[…]";

/// The last `MAX_OUTPUT` bytes of `text`, on a character boundary.
pub(crate) fn tail(text: String) -> String {
    if text.len() <= MAX_OUTPUT {
        return text;
    }
    let mut start = text.len() - MAX_OUTPUT;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("{ELIDED}{}", &text[start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream of `0` that gives at most `1` bytes a read.
    struct Chunked(Vec<u8>, usize);

    impl tokio::io::AsyncRead for Chunked {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            let n = self.1.min(self.0.len()).min(buf.remaining());
            buf.put_slice(&self.0[..n]);
            self.0.drain(..n);
            std::task::Poll::Ready(Ok(()))
        }
    }

    fn chunked(text: &[u8], size: usize) -> Chunked {
        Chunked(text.to_vec(), size)
    }

    #[tokio::test]
    async fn capture_finds_a_needle_across_reads_and_keeps_only_the_end() {
        let mut text = vec![b'a'; 3 * MAX_OUTPUT + 17];
        text.extend_from_slice(b"needle");
        text.extend(std::iter::repeat_n(b'b', 3 * MAX_OUTPUT));
        for size in [1, 2, 3, 5, 7, 4096, 100_000] {
            for (needle, found) in [
                ("needle", true),
                ("aneedleb", true),
                ("ab", false),
                ("", true),
            ] {
                let got = capture(Some(chunked(&text, size)), Some(needle.into())).await;
                assert_eq!(got.found, found, "{needle:?} in reads of {size}");
                assert!(got.cut);
                assert_eq!(got.kept, vec![b'b'; MAX_OUTPUT]);
            }
        }
        let short = capture(Some(chunked(b"short", 2)), None).await;
        assert!(!short.cut && !short.found);
        assert_eq!(short.text(), "short");
    }

    #[tokio::test]
    async fn a_cut_mid_character_drops_the_characters_rest() {
        let text = "é".repeat(MAX_OUTPUT) + "x";
        let got = capture(Some(chunked(text.as_bytes(), 1000)), None).await;
        assert!(got.cut);
        let shown = got.text();
        assert!(!shown.contains('\u{FFFD}'), "{shown}");
        assert!(shown.ends_with("éx"));
    }
}
