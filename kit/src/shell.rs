//! Commands a model asks to run, as argv rather than shell text:
//! [`CommandLine`] parses one command line (words, quotes, escapes) and
//! refuses everything a shell would do besides running one program — `;`,
//! `&&`, `|`, `&`, redirections, `$( )`, backquotes, variables, newlines —
//! so that what a person approves is exactly what runs. [`Shell`] is the
//! tool that runs it (no shell involved), and [`policy`] the approval
//! policy whose "always allow" remembers the whole argv.
//!
//! ```
//! use harness_kit::shell::CommandLine;
//!
//! let line = CommandLine::parse("grep -c 'an agent' README.md")?;
//! assert_eq!(line.argv(), ["grep", "-c", "an agent", "README.md"]);
//! assert_eq!(line.to_string(), "grep -c 'an agent' README.md");
//! assert!(CommandLine::parse("wc -l README.md; touch PWNED").is_err());
//! assert!(CommandLine::parse("cat $(ls)").is_err());
//! # Ok::<(), harness_kit::shell::CommandLineError>(())
//! ```

use crate::policy::{Policy, Verdict};
use harness::llm::Tool;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// Why a command line is not one plain command.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CommandLineError {
    /// No words.
    #[error("the command line is empty")]
    Empty,
    /// A shell operator or expansion: only one plain command runs.
    #[error(
        "{what} at character {at} of the command line: run one program with its arguments, without `;`, `&&`, `|`, redirections, `$`, backquotes or newlines (make one call per command)"
    )]
    Operator {
        /// What was found, e.g. "`;`".
        what: String,
        /// Its position, counted in characters from 1.
        at: usize,
    },
    /// A quote that is not closed.
    #[error("the {quote} quote at character {at} is not closed")]
    Unclosed {
        /// `single` or `double`.
        quote: &'static str,
        /// Its position, counted in characters from 1.
        at: usize,
    },
    /// A backslash at the very end.
    #[error("the command line ends with a backslash")]
    TrailingBackslash,
}

/// One command as argv: a program and its arguments, as parsed from a
/// command line by [`parse`](Self::parse). Its `Display` is the argv
/// quoted back for a POSIX shell, so it shows exactly what runs.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CommandLine {
    argv: Vec<String>,
}

impl CommandLine {
    /// Parses `line`: words split on blanks; `'…'` literal; `"…"` with `\"`
    /// and `\\` escapes; `\x` outside quotes is `x`. Refuses operators,
    /// redirections, expansions (`$`, backquotes, a word starting with
    /// `~`), and newlines, naming where.
    pub fn parse(line: &str) -> Result<Self, CommandLineError> {
        let mut argv = Vec::new();
        let mut word: Option<String> = None;
        let mut chars = line.chars().enumerate().peekable();
        let operator = |what: &str, at: usize| CommandLineError::Operator {
            what: what.to_owned(),
            at: at + 1,
        };
        while let Some((at, c)) = chars.next() {
            match c {
                ' ' | '\t' => {
                    if let Some(w) = word.take() {
                        argv.push(w);
                    }
                }
                '\'' => {
                    let w = word.get_or_insert_with(String::new);
                    loop {
                        match chars.next() {
                            Some((_, '\'')) => break,
                            Some((_, c)) => w.push(c),
                            None => {
                                return Err(CommandLineError::Unclosed {
                                    quote: "single",
                                    at: at + 1,
                                });
                            }
                        }
                    }
                }
                '"' => {
                    let w = word.get_or_insert_with(String::new);
                    loop {
                        match chars.next() {
                            Some((_, '"')) => break,
                            Some((_, '\\')) => match chars.next() {
                                // `\$` is a literal `$` to a shell too.
                                Some((_, c @ ('"' | '\\' | '$' | '`'))) => w.push(c),
                                Some((i, '\n')) => return Err(operator("a newline", i)),
                                Some((_, c)) => {
                                    w.push('\\');
                                    w.push(c);
                                }
                                None => {
                                    return Err(CommandLineError::Unclosed {
                                        quote: "double",
                                        at: at + 1,
                                    });
                                }
                            },
                            Some((i, '$')) => return Err(operator("`$` (an expansion)", i)),
                            Some((i, '`')) => {
                                return Err(operator("a backquote (command substitution)", i));
                            }
                            Some((_, c)) => w.push(c),
                            None => {
                                return Err(CommandLineError::Unclosed {
                                    quote: "double",
                                    at: at + 1,
                                });
                            }
                        }
                    }
                }
                '\\' => match chars.next() {
                    Some((i, '\n')) => return Err(operator("a newline", i)),
                    Some((_, c)) => word.get_or_insert_with(String::new).push(c),
                    None => return Err(CommandLineError::TrailingBackslash),
                },
                ';' => return Err(operator("`;`", at)),
                '&' => return Err(operator("`&`", at)),
                '|' => return Err(operator("`|`", at)),
                '<' | '>' => return Err(operator("a redirection", at)),
                '(' | ')' => return Err(operator("a parenthesis (a subshell)", at)),
                '$' => return Err(operator("`$` (an expansion)", at)),
                '`' => return Err(operator("a backquote (command substitution)", at)),
                '\n' | '\r' => return Err(operator("a newline", at)),
                '#' if word.is_none() => return Err(operator("`#` (a comment)", at)),
                '~' if word.is_none() => return Err(operator("`~` (home expansion)", at)),
                '*' | '?' | '[' | '{' | '}' => {
                    return Err(operator(&format!("`{c}` (a pattern)"), at));
                }
                c => word.get_or_insert_with(String::new).push(c),
            }
        }
        if let Some(w) = word {
            argv.push(w);
        }
        if argv.is_empty() {
            return Err(CommandLineError::Empty);
        }
        Ok(Self { argv })
    }

    /// The program and its arguments.
    pub fn argv(&self) -> &[String] {
        &self.argv
    }

    /// The program.
    pub fn program(&self) -> &str {
        &self.argv[0]
    }
}

/// `word` quoted for a POSIX shell when it needs to be.
fn quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

impl fmt::Display for CommandLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, word) in self.argv.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            f.write_str(&quote(word))?;
        }
        Ok(())
    }
}

/// The arguments of [`Shell`].
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ShellArgs {
    /// One command: a program and its arguments, quoted as for a shell.
    /// No `;`, `&&`, `|`, redirections or `$`: one command per call.
    pub command: String,
}

/// The allow-list key of a shell call with `arguments`: `shell: ` and the
/// parsed argv quoted back, so "always allow" covers exactly that command
/// line, whatever spacing or quoting it came with; a line that does not
/// parse keys as itself (it never runs).
pub fn allow_key(arguments: &Value) -> String {
    let line = arguments
        .get("command")
        .and_then(Value::as_str)
        .unwrap_or("");
    match CommandLine::parse(line) {
        Ok(parsed) => format!("shell: {parsed}"),
        Err(_) => format!("shell (unparsed): {line}"),
    }
}

/// The approval policy for [`Shell`]: every call is asked about unless its
/// exact argv was always-allowed in the session ([`allow_key`]); a line
/// that does not parse is refused before anyone is asked, with the reason
/// for the model.
pub fn policy() -> Policy {
    Policy::when(|arguments: &Value| {
        let line = arguments
            .get("command")
            .and_then(Value::as_str)
            .unwrap_or("");
        match CommandLine::parse(line) {
            Ok(_) => Verdict::Ask,
            Err(e) => Verdict::Deny(e.to_string()),
        }
    })
    .remember_by(allow_key)
}

/// The variables a command inherits from the host: what a program needs
/// to find programs and read text, and nothing that could hold a secret
/// (API keys, tokens, database URLs stay with the host).
pub const PASS_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "LC_MESSAGES",
    "TZ",
    "TMPDIR",
    "USER",
    "LOGNAME",
    "TERM",
];

/// Makes the host process non-dumpable, once, before it runs a command a
/// model wrote: a same-user process can then no longer read its
/// `/proc/<pid>/environ` or memory (where its secrets are). Linux only;
/// elsewhere it is not possible and commands run without it. (A side
/// effect: the process leaves no core dump, and a debugger must be root.)
fn protect_host() -> Result<(), String> {
    static PROTECTED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    PROTECTED
        .get_or_init(|| {
            #[cfg(target_os = "linux")]
            {
                use rustix::process::{DumpableBehavior, set_dumpable_behavior};
                set_dumpable_behavior(DumpableBehavior::NotDumpable).map_err(|e| {
                    format!("cannot make the host non-dumpable ({e}), so a command could read its secrets; not running it")
                })
            }
            #[cfg(not(target_os = "linux"))]
            {
                Ok(())
            }
        })
        .clone()
}

/// `program` as a command a model asked for, confined: the host protected
/// first (non-dumpable, see above), only [`PASS_ENV`] inherited, and, when
/// the host runs as root, through `setpriv` with no capabilities (bounding
/// set included) and `no_new_privs`, since root's `CAP_SYS_PTRACE` would
/// read the host's memory and environment whatever the host does; without
/// `setpriv` (util-linux) a root host runs no command at all.
pub fn confined(program: &str) -> Result<tokio::process::Command, String> {
    protect_host()?;
    #[cfg(unix)]
    let mut command = if rustix::process::geteuid().is_root() {
        let found = std::process::Command::new("setpriv")
            .arg("--version")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            return Err(format!(
                "the host runs as root, and without `setpriv` (util-linux) `{program}` would keep root's capabilities and could read the host's secrets; install util-linux or run as another user"
            ));
        }
        let mut command = tokio::process::Command::new("setpriv");
        command.args([
            "--inh-caps=-all",
            "--ambient-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
            "--",
            program,
        ]);
        command
    } else {
        tokio::process::Command::new(program)
    };
    #[cfg(not(unix))]
    let mut command = tokio::process::Command::new(program);
    command.env_clear().envs(
        PASS_ENV
            .iter()
            .filter_map(|k| std::env::var_os(k).map(|v| (k, v))),
    );
    Ok(command)
}

/// The `shell` tool: runs one command ([`CommandLine`], no shell) in a
/// directory, [`confined`] (only [`PASS_ENV`] in its environment, the host
/// non-dumpable, no capabilities), with no input, a timeout, and its
/// output bounded. The command runs in a process group of its own, killed
/// when the command ends or its time is up: what it started in the
/// background ends with it ([`ProcessGroup`]).
#[derive(Clone, Debug)]
pub struct Shell {
    dir: PathBuf,
    timeout: Duration,
    max_output: usize,
}

impl Shell {
    /// Runs commands in `dir`, each for at most `timeout`, keeping at most
    /// 8 KiB of output.
    pub fn new(dir: impl Into<PathBuf>, timeout: Duration) -> Self {
        Self {
            dir: dir.into(),
            timeout,
            max_output: 8 * 1024,
        }
    }

    /// Keeps at most `bytes` of a command's output.
    #[must_use]
    pub fn max_output(mut self, bytes: usize) -> Self {
        self.max_output = bytes;
        self
    }
}

/// How many bytes of each stream are kept past [`Shell::max_output`]:
/// the text is redacted before it is cut, so that a secret that straddles
/// the cut is still found whole (any secret shorter than this is).
const REDACTION_MARGIN: usize = 64 << 10;

/// `text` cut to at most `max` bytes, on a character boundary; whether it
/// was cut.
pub(crate) fn cut(text: &mut String, max: usize) -> bool {
    if text.len() <= max {
        return false;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    true
}

/// What a command wrote to one stream: the first bytes, up to a limit, and
/// how many it wrote in all.
#[derive(Default)]
struct Captured {
    kept: Vec<u8>,
    total: u64,
}

impl Captured {
    /// The kept bytes as text with the process's secrets redacted (before
    /// any cut, see [`REDACTION_MARGIN`]).
    fn redacted_text(&self) -> String {
        let mut text = String::from_utf8_lossy(&self.kept).into_owned();
        harness::secrets::redact_string(&mut text);
        text
    }
}

/// Reads `stream` to its end, keeping its first `keep` bytes and counting
/// the rest: a command that writes gigabytes costs the host `keep` bytes,
/// and it still runs to its end (or its timeout) as it would unread.
async fn capture(stream: Option<impl tokio::io::AsyncRead + Unpin>, keep: usize) -> Captured {
    use tokio::io::AsyncReadExt;
    let mut captured = Captured::default();
    let Some(mut stream) = stream else {
        return captured;
    };
    let mut buf = vec![0u8; 16 << 10];
    loop {
        let n = match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        captured.total += n as u64;
        let room = keep.saturating_sub(captured.kept.len());
        captured.kept.extend_from_slice(&buf[..n.min(room)]);
    }
    captured
}

/// How long the output of a command that has ended is still read: a
/// process that left the command's group (`setsid`) may hold its streams
/// open; what came by then is kept.
const OUTPUT_GRACE: Duration = Duration::from_secs(2);

/// A task reading a stream, stopped when dropped (a call dropped while its
/// command runs).
struct Reading(tokio::task::JoinHandle<Captured>);

impl Drop for Reading {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What two reading tasks read, waiting at most [`OUTPUT_GRACE`] in all
/// for their end.
async fn collect(out: &mut Reading, err: &mut Reading) -> (Captured, Captured) {
    async fn read(task: &mut Reading) -> Captured {
        tokio::time::timeout(OUTPUT_GRACE, &mut task.0)
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default()
    }
    tokio::join!(read(out), read(err))
}

/// Kills the process group `group` leads (a command started with
/// `process_group(0)`: the process and whatever it started, unless they
/// left the group), if it is still there. Unix only; elsewhere nothing.
/// See [`ProcessGroup`] to have it done however a call ends.
pub fn kill_group(group: Option<u32>) {
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

/// The process group of a command started with `process_group(0)`, killed
/// once ([`kill_group`]): by [`ProcessGroup::kill`] when the command has
/// ended or its time is up, or when dropped (a call dropped while its
/// command runs), so that what the command started in the background
/// never outlives it. The [`Shell`] tool and the project recipe's
/// commands hold one each.
#[derive(Debug)]
pub struct ProcessGroup(Option<u32>);

impl ProcessGroup {
    /// The group `child` leads (nothing when it has no id: it has been
    /// waited for already).
    pub fn of(child: &tokio::process::Child) -> Self {
        Self(child.id())
    }

    /// Kills the group now, once.
    pub fn kill(&mut self) {
        kill_group(self.0.take());
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
    }
}

#[async_trait::async_trait]
impl Tool for Shell {
    type Args = ShellArgs;
    type Output = String;
    type Error = String;
    fn name(&self) -> &str {
        "shell"
    }
    fn description(&self) -> &str {
        "Runs one command (a program and its arguments; no pipes, `;`, redirections or `$`) in the working directory; returns its standard output."
    }
    async fn call(&self, args: ShellArgs) -> Result<String, String> {
        let line = CommandLine::parse(&args.command).map_err(|e| e.to_string())?;
        let mut command = confined(line.program())?;
        command
            .args(&line.argv()[1..])
            .current_dir(&self.dir)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        command
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        // Its own process group, so that what it starts in the background
        // is stopped with it.
        #[cfg(unix)]
        command.process_group(0);
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot start `{}`: {e}", line.program()))?;
        // Killed however the call ends, a dropped call included.
        let mut group = ProcessGroup::of(&child);
        // Read as it comes, never more than a bound: `output()` would hold
        // everything the command writes until it exits.
        let keep = self.max_output.saturating_add(REDACTION_MARGIN);
        let mut stdout = Reading(tokio::spawn(capture(child.stdout.take(), keep)));
        let mut stderr = Reading(tokio::spawn(capture(child.stderr.take(), keep)));
        let status = tokio::time::timeout(self.timeout, child.wait()).await;
        // The command's end (or its time) is the end of whatever it started
        // in the background too, which would otherwise hold its output
        // open and outlive it.
        group.kill();
        let status = match status {
            Err(_) => {
                let _ = child.kill().await;
                return Err(format!(
                    "`{line}` did not finish within {} s and was stopped",
                    self.timeout.as_secs()
                ));
            }
            Ok(Err(e)) => return Err(format!("`{line}` could not be waited for: {e}")),
            Ok(Ok(status)) => status,
        };
        let (out, err) = collect(&mut stdout, &mut stderr).await;
        let partial = |c: &Captured| c.total > c.kept.len() as u64;
        // A success shows the output; a failure its errors, then its output.
        let (mut text, wrote, partial) = if status.success() {
            let wrote = format!("the command wrote {} bytes", out.total);
            (out.redacted_text(), wrote, partial(&out))
        } else {
            let wrote = format!(
                "the command wrote {} bytes of errors and {} of output",
                err.total, out.total
            );
            let text = format!("{status}: {}{}", err.redacted_text(), out.redacted_text());
            (text, wrote, partial(&out) || partial(&err))
        };
        if cut(&mut text, self.max_output) || partial {
            text.push_str(&format!("\n[cut: {wrote}]"));
        }
        if status.success() {
            Ok(text)
        } else {
            Err(text)
        }
    }
}
