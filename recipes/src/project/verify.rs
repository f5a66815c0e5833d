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
pub async fn run_steps(
    dir: &Path,
    steps: &[VerificationStep],
    timeout: Duration,
) -> Vec<StepOutcome> {
    let mut outcomes = Vec::with_capacity(steps.len());
    for step in steps {
        outcomes.push(run_step(dir, step, timeout).await);
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
    let group = child.id();
    let read = |pipe: Option<Box<dyn tokio::io::AsyncRead + Send + Unpin>>| {
        tokio::spawn(async move {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = tokio::io::AsyncReadExt::read_to_end(&mut pipe, &mut bytes).await;
            }
            bytes
        })
    };
    let stdout = read(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = read(child.stderr.take().map(|p| Box::new(p) as _));
    let status = tokio::time::timeout(timeout, child.wait()).await;
    // The command's end (or its time) is the end of whatever it started in
    // the background too, which would otherwise hold its output open.
    kill_group(group);
    let status = match status {
        Err(_) => {
            let _ = child.kill().await;
            return fail(format!("timed out after {} s", timeout.as_secs()));
        }
        Ok(Err(e)) => return fail(format!("sh failed: {e}")),
        Ok(Ok(status)) => status,
    };
    // A process that left the group may still hold the pipes: read what
    // came within a grace period.
    let grace = Duration::from_secs(2);
    let collect = |task: tokio::task::JoinHandle<Vec<u8>>| async move {
        tokio::time::timeout(grace, task)
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default()
    };
    let output = std::process::Output {
        status,
        stdout: collect(stdout).await,
        stderr: collect(stderr).await,
    };
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let expected = step
        .expect_stdout
        .as_deref()
        .is_none_or(|text| stdout.contains(text));
    let mut text = format!("{stdout}{stderr}");
    if output.status.success() && !expected {
        text.push_str(&format!(
            "\n[expected the output to contain {:?}]",
            step.expect_stdout.as_deref().unwrap_or_default()
        ));
    }
    StepOutcome {
        command: step.command.clone(),
        exit_code: output.status.code(),
        passed: output.status.success() && expected,
        output: tail(text),
    }
}

/// Kills the process group a command ran in (its `sh` and whatever it
/// started), if it is still there.
fn kill_group(group: Option<u32>) {
    #[cfg(unix)]
    if let Some(pid) = group
        .and_then(|g| i32::try_from(g).ok())
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
    #[cfg(not(unix))]
    let _ = group;
}

/// The last `MAX_OUTPUT` bytes of `text`, on a character boundary.
pub(crate) fn tail(text: String) -> String {
    if text.len() <= MAX_OUTPUT {
        return text;
    }
    let mut start = text.len() - MAX_OUTPUT;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("[…]{}", &text[start..])
}
