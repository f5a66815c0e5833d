//! A persistent Python kernel: one `python3` subprocess that runs the cells
//! of a notebook in one namespace, spoken to over JSON lines.
//!
//! The kernel (`kernel.py`, embedded in this crate) needs only the standard
//! library. At start it moves the pipes on its fds 0 and 1 to private
//! descriptors and speaks the protocol only there: fd 0 becomes `/dev/null`
//! and fds 1 and 2 become per-cell capture files, so whatever a cell prints,
//! from Python or from C, never reaches the protocol. Each cell's output is
//! read back up to [`KernelConfig::output_cap`] bytes (the rest is counted,
//! and trimmed from disk while the cell runs), so a cell that prints
//! gigabytes costs neither memory nor disk.
//!
//! Per cell the kernel reports ([`CellResult`]): the exception with its
//! traceback (frames of cell code are in the file `<cell N>` with the cell's
//! own line numbers; the kernel's frames are dropped), captured stdout and
//! stderr, the last expression's repr, a [`ValueSummary`] of each name the
//! cell bound or changed (type, short repr, length or shape, and the SHA-256
//! of its protocol-5 pickle, which is also written to the blob directory),
//! and which names the cell's own code read from the namespace.
//!
//! Faults are typed [`KernelError`]s, after which the kernel has already
//! been restarted (with an empty namespace): a cell running past
//! [`KernelConfig::timeout`] is killed ([`KernelError::Timeout`]); a cell
//! that calls `os._exit`, crashes the interpreter or closes the protocol
//! pipes gives [`KernelError::Died`].
//!
//! Before any cell runs the kernel limits itself (address space with
//! `RLIMIT_AS`, so that a cell over it gets a `MemoryError`; processes
//! with `RLIMIT_NPROC`), drops its capabilities and sets `no_new_privs`.
//! It gets an environment built from an allow-list
//! ([`KernelConfig::pass_env`]) minus anything that looks like a secret
//! ([`KernelConfig::scrub_patterns`],
//! [`KernelConfig::scrub_credential_values`]), and the host makes itself
//! non-dumpable ([`protect_host`]) so that a cell cannot read the host's
//! environment through `/proc`. Modules in the working directory never
//! shadow the standard library or the kernel's own imports: the working
//! directory comes last on `sys.path`. [`KernelConfig::command_prefix`]
//! runs the kernel under a sandbox such as `bwrap` or `nsjail`; the crate
//! docs' trust boundary says what holds without one.
//!
//! On Unix the kernel leads a process group of its own, and wherever it is
//! killed (timeout, protocol error, death, [`Kernel::restart`], a
//! [`Kernel::shutdown`] whatever its outcome, dropping the [`Kernel`]) the
//! whole group is killed with `SIGKILL`: processes a cell started
//! (`subprocess.Popen`, `os.fork`, a `multiprocessing` pool) and everything
//! the [`command_prefix`](KernelConfig::command_prefix) started go with it.
//! A kernel that dies while a forked child still holds its pipes is reported
//! as [`KernelError::Died`] at once, not when the timeout expires. The group
//! is a boundary only for processes that stay in it: a cell can leave it
//! (`os.setsid()` or `os.setpgrp()` in a child, `subprocess.Popen(...,
//! start_new_session=True)` or `process_group=0`, a daemonising tool), and
//! so can a prefix that starts a new session (`setsid`, `bwrap
//! --new-session`). Such processes survive the kernel. To contain them, run
//! the kernel in a PID namespace that dies with it, e.g. a prefix of `bwrap
//! --unshare-pid --die-with-parent ...`. Elsewhere than Unix only the
//! kernel process itself is killed.
//!
//! The kernel also dies with its host: a watchdog process it forks at
//! start, in its group, waits for the host's end of the request pipe to
//! close, which happens however the host ends (`SIGKILL`, Ctrl-C, a
//! panic), and then kills the group. A cell that runs forever is not left
//! behind by a host that was interrupted.
//!
//! ```no_run
//! # async fn demo() -> Result<(), harness_code::kernel::KernelError> {
//! use harness_code::kernel::{Kernel, KernelConfig};
//!
//! let mut kernel = Kernel::spawn(KernelConfig::default()).await?;
//! let result = kernel.execute(0, "xs = [1, 2, 3]\nprint(sum(xs))").await?;
//! assert_eq!(result.stdout.text, "6\n");
//! assert_eq!(result.outputs["xs"].repr, "[1, 2, 3]");
//! # Ok(()) }
//! ```

mod config;
mod host;
mod result;

use std::collections::BTreeSet;
use std::fmt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::task::JoinHandle;

pub use crate::trace::{CellTrace, FILE_PREFIX};
pub use config::{
    DEFAULT_MEMORY_LIMIT, DEFAULT_PASS_ENV, DEFAULT_PROCESS_LIMIT, DEFAULT_SCRUB_PATTERNS,
    KernelConfig,
};
pub use host::protect_host;
pub use result::{
    CapturedOutput, CellResult, PythonError, RestoreFailure, RestoreReport, RestoreValue, Stored,
    TraceFrame, ValueSummary,
};

/// The kernel's Python source.
const KERNEL_SOURCE: &str = include_str!("kernel.py");

/// Bytes of the kernel's own stderr kept for error reports.
const DIAG_TAIL: usize = 8 * 1024;

/// What the kernel was doing when something went wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Activity {
    /// Starting up.
    Startup,
    /// Running a cell.
    Cell(u32),
    /// Restoring values into the namespace.
    Restore,
    /// Another request (`ping`, `reset`, `shutdown`).
    Control(&'static str),
}

impl Activity {
    /// The cell, when running one.
    pub fn cell(&self) -> Option<u32> {
        match self {
            Self::Cell(cell) => Some(*cell),
            _ => None,
        }
    }
}

impl fmt::Display for Activity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Startup => f.write_str("startup"),
            Self::Cell(cell) => write!(f, "cell {cell}"),
            Self::Restore => f.write_str("restoring values"),
            Self::Control(op) => write!(f, "`{op}`"),
        }
    }
}

/// Why a kernel operation failed. After [`Timeout`](Self::Timeout),
/// [`Died`](Self::Died) and [`Protocol`](Self::Protocol) the kernel has
/// been replaced by a fresh one (`restarted`) with an empty namespace, or,
/// if that failed too, is started again by the next request.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// The interpreter (or the command prefix) could not be started.
    #[error("cannot start the kernel with {program}: {source}")]
    Spawn {
        /// The program that was run.
        program: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The kernel's working directory cannot be created.
    #[error("cannot create the kernel's working directory {path}: {source}")]
    WorkingDir {
        /// The directory.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The process started but did not greet in time or properly.
    #[error("the kernel did not start: {detail}{}", tail(stderr))]
    Startup {
        /// What went wrong.
        detail: String,
        /// The end of the process's stderr (e.g. a Python error).
        stderr: String,
    },
    /// The activity ran longer than the configured timeout; the kernel was
    /// killed.
    #[error("{during} timed out after {after:?}; the kernel was killed and {}", restarted_text(*restarted))]
    Timeout {
        /// What was running.
        during: Activity,
        /// The limit that was exceeded.
        after: Duration,
        /// Whether a fresh kernel is running now.
        restarted: bool,
    },
    /// The kernel process exited or closed its pipes (`os._exit`, a
    /// segfault, user code closing the protocol descriptors, being killed).
    #[error("the kernel died during {during} ({status}); it was {}{}", restarted_text(*restarted), tail(stderr))]
    Died {
        /// What was running.
        during: Activity,
        /// The exit status as the OS reports it (`exit status: 1`,
        /// `signal: 11 (SIGSEGV)`), or why it is unknown.
        status: String,
        /// The exit code, if it exited.
        code: Option<i32>,
        /// The signal that killed it, if any (Unix).
        signal: Option<i32>,
        /// The end of the kernel's diagnostic stderr (a fatal-error
        /// traceback from `faulthandler`, for instance).
        stderr: String,
        /// Whether a fresh kernel is running now.
        restarted: bool,
    },
    /// The kernel sent something that is not a valid reply; it was killed.
    #[error("the kernel broke the protocol during {during}: {detail}; it was {}", restarted_text(*restarted))]
    Protocol {
        /// What was running.
        during: Activity,
        /// What was wrong.
        detail: String,
        /// Whether a fresh kernel is running now.
        restarted: bool,
    },
    /// The kernel's own code failed on a request (a bug, not a cell error);
    /// the kernel is still running.
    #[error("the kernel failed internally during {during}: {detail}")]
    Internal {
        /// What was running.
        during: Activity,
        /// The kernel's traceback.
        detail: String,
    },
    /// The kernel was shut down.
    #[error("the kernel has been shut down")]
    Closed,
}

impl KernelError {
    /// Whether the kernel process was lost (and its namespace with it).
    pub fn lost_namespace(&self) -> bool {
        matches!(
            self,
            Self::Timeout { .. } | Self::Died { .. } | Self::Protocol { .. }
        )
    }
}

fn restarted_text(restarted: bool) -> &'static str {
    if restarted {
        "restarted"
    } else {
        "not restarted (it starts again with the next request)"
    }
}

fn tail(stderr: &str) -> String {
    let trimmed = stderr.trim();
    if trimmed.is_empty() {
        String::new()
    } else {
        format!("; kernel stderr: {trimmed}")
    }
}

/// Facts about a running kernel.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelInfo {
    /// The Python process id.
    pub pid: u32,
    /// `sys.version`'s first word, e.g. `3.11.7`.
    pub python: String,
    /// Problems at startup that did not stop it: a limit that could not be
    /// set or is not enforced (the process limit for root), privileges
    /// that could not be dropped, a host that could not be protected.
    pub warnings: Vec<String>,
}

/// Options of one [`Kernel::execute_with`].
#[derive(Debug, Clone, Default)]
pub struct ExecuteOptions {
    /// Names to summarise even if the cell did not rebind them: what the
    /// static analysis says it writes or mutates (rebound and new names are
    /// found by the kernel itself). Ignored when the cell raises: its
    /// outputs are then only what it did bind or change.
    pub declared: Vec<String>,
    /// Write the pickles of the outputs to the blob directory (if the
    /// kernel has one); hashes are computed either way.
    pub snapshot: bool,
}

struct Process {
    child: Child,
    group: ProcessGroup,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    diag: Arc<Mutex<Vec<u8>>>,
    diag_task: JoinHandle<()>,
    in_flight: bool,
}

impl Drop for Process {
    // `kill_on_drop` kills only the kernel process; whatever a cell started
    // is in its group.
    fn drop(&mut self) {
        self.group.kill();
    }
}

/// The process group the kernel leads (Unix), killed once: by [`reap`] or,
/// failing that, when the [`Process`] is dropped.
#[derive(Debug)]
struct ProcessGroup {
    /// The group id (the kernel's pid) while the group has not been killed.
    id: Option<u32>,
}

impl ProcessGroup {
    /// Sends `SIGKILL` to every process in the group, the first time only.
    ///
    /// Called before the kernel process is reaped, or after it while the
    /// group may still have members. A group id stays allocated while any
    /// member lives, so until then it names no other group. Once the group
    /// is empty the signal finds no one, unless in the moments since the
    /// kernel process was reaped the system gave its pid to a new process
    /// that also made itself a group leader; Linux hands pids out
    /// cyclically, so that takes a wrap-around of the pid space and does not
    /// happen in practice.
    fn kill(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        #[cfg(unix)]
        {
            let group = i32::try_from(id)
                .ok()
                .and_then(rustix::process::Pid::from_raw);
            if let Some(group) = group
                && let Err(error) =
                    rustix::process::kill_process_group(group, rustix::process::Signal::KILL)
                && error != rustix::io::Errno::SRCH
            {
                tracing::warn!(group = id, "kernel: cannot kill the process group: {error}");
            }
        }
        #[cfg(not(unix))]
        let _ = id;
    }
}

/// A running Python kernel. See the [module docs](self).
///
/// One request at a time (`&mut self`). Dropping the kernel kills the
/// process and, on Unix, its process group. If a request future is dropped
/// before it completes, the next request restarts the kernel, since the
/// reply stream is out of sync.
pub struct Kernel {
    config: KernelConfig,
    config_json: String,
    process: Option<Process>,
    generation: u64,
    next_id: u64,
    info: KernelInfo,
    closed: bool,
}

impl fmt::Debug for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kernel")
            .field("info", &self.info)
            .field("generation", &self.generation)
            .field("running", &self.process.is_some())
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct ExecuteReply {
    ok: bool,
    #[serde(default)]
    duration_us: u64,
    stdout: CapturedOutput,
    stderr: CapturedOutput,
    #[serde(default)]
    error: Option<PythonError>,
    #[serde(default)]
    display: Option<String>,
    #[serde(default)]
    outputs: std::collections::BTreeMap<String, ValueSummary>,
    #[serde(default)]
    deleted: BTreeSet<String>,
    #[serde(default)]
    reads: Option<BTreeSet<String>>,
    #[serde(default)]
    trace: Option<CellTrace>,
}

#[derive(Deserialize)]
struct Hello {
    pid: u32,
    python: String,
    #[serde(default)]
    warnings: Vec<String>,
}

impl Kernel {
    /// Starts a kernel and waits for it to greet.
    ///
    /// # Errors
    ///
    /// [`KernelError::Spawn`], [`KernelError::WorkingDir`] or
    /// [`KernelError::Startup`].
    pub async fn spawn(config: KernelConfig) -> Result<Self, KernelError> {
        let config_json = json!({
            "output_cap": config.output_cap,
            "blob_dir": config.blob_dir,
            "max_blob_bytes": config.max_blob_bytes,
            "check_reads": config.check_reads,
            "trace": config.trace,
            "memory_limit": config.memory_limit,
            "process_limit": config.process_limit,
            "drop_privileges": config.drop_privileges,
        })
        .to_string();
        let scrubbed = config.scrubbed_env();
        if !scrubbed.is_empty() {
            tracing::warn!(
                names = ?scrubbed,
                "kernel: variables of KernelConfig::env look like secrets and are not passed \
                 (see KernelConfig::scrub_patterns and scrub_credential_values)"
            );
        }
        let mut kernel = Self {
            config,
            config_json,
            process: None,
            generation: 0,
            next_id: 1,
            info: KernelInfo::default(),
            closed: false,
        };
        kernel.start().await?;
        Ok(kernel)
    }

    /// The configuration the kernel runs with.
    pub fn config(&self) -> &KernelConfig {
        &self.config
    }

    /// Facts about the current process.
    pub fn info(&self) -> &KernelInfo {
        &self.info
    }

    /// Incremented by every (re)start: a namespace is only valid for the
    /// generation that built it.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether a kernel process is running.
    pub fn is_running(&self) -> bool {
        self.process.is_some()
    }

    async fn start(&mut self) -> Result<(), KernelError> {
        if self.closed {
            return Err(KernelError::Closed);
        }
        let config = &self.config;
        let mut host_warnings = Vec::new();
        if config.protect_host
            && let Err(error) = protect_host()
        {
            host_warnings.push(format!(
                "the host process could not be made non-dumpable, so the kernel may read its \
                 environment through /proc: {error}"
            ));
        }
        let (program, prefix_args) = match config.command_prefix.split_first() {
            Some((program, rest)) => (program.clone(), rest.to_vec()),
            None => (config.python.clone().into_os_string(), Vec::new()),
        };
        let mut command = Command::new(&program);
        command.args(&prefix_args);
        if !config.command_prefix.is_empty() {
            command.arg(&config.python);
        }
        command
            .args(["-s", "-u", "-c", KERNEL_SOURCE])
            .arg(&self.config_json)
            .env_clear()
            .envs(config.kernel_env())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        // A group of its own, so that killing the group kills what the
        // cells (and the command prefix) started, and nothing else.
        #[cfg(unix)]
        command.process_group(0);
        if let Some(dir) = &config.working_dir {
            std::fs::create_dir_all(dir).map_err(|source| KernelError::WorkingDir {
                path: dir.clone(),
                source,
            })?;
            command.current_dir(dir);
        }
        let mut child = command.spawn().map_err(|source| KernelError::Spawn {
            program: program.to_string_lossy().into_owned(),
            source,
        })?;
        let mut group = ProcessGroup { id: child.id() };
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            group.kill();
            let _ = child.start_kill();
            return Err(KernelError::Startup {
                detail: "the process has no stdio pipes".to_owned(),
                stderr: String::new(),
            });
        };
        let diag = Arc::new(Mutex::new(Vec::new()));
        let diag_task = tokio::spawn(drain_tail(stderr, Arc::clone(&diag)));
        let mut process = Process {
            child,
            group,
            stdin,
            stdout: BufReader::new(stdout),
            diag,
            diag_task,
            in_flight: false,
        };
        let max = self.config.max_message_bytes;
        let greeting =
            tokio::time::timeout(config.startup_timeout, read_line(&mut process.stdout, max)).await;
        let failure = match greeting {
            Err(_) => format!("no greeting within {:?}", config.startup_timeout),
            Ok(Err(error)) => format!("reading its greeting failed: {error}"),
            Ok(Ok(None)) => "it exited before greeting".to_owned(),
            Ok(Ok(Some(line))) => match parse_hello(&line) {
                Ok(hello) => {
                    host_warnings.extend(hello.warnings);
                    self.info = KernelInfo {
                        pid: hello.pid,
                        python: hello.python,
                        warnings: host_warnings,
                    };
                    for warning in &self.info.warnings {
                        tracing::warn!(pid = self.info.pid, "kernel: {warning}");
                    }
                    self.process = Some(process);
                    self.generation += 1;
                    tracing::debug!(
                        pid = self.info.pid,
                        generation = self.generation,
                        "kernel started"
                    );
                    return Ok(());
                }
                Err(detail) => detail,
            },
        };
        let (_, stderr) = reap(process).await;
        Err(KernelError::Startup {
            detail: failure,
            stderr,
        })
    }

    /// Kills the process (if any) and starts a fresh one with an empty
    /// namespace.
    ///
    /// # Errors
    ///
    /// As [`spawn`](Self::spawn).
    pub async fn restart(&mut self) -> Result<(), KernelError> {
        if let Some(process) = self.process.take() {
            reap(process).await;
        }
        self.start().await
    }

    /// Asks the kernel to exit and waits for it (killing it if it does not
    /// exit within a second); then kills what remains of its process group
    /// (Unix), the processes its cells started.
    ///
    /// # Errors
    ///
    /// None in practice; a kernel that does not answer is killed.
    pub async fn shutdown(mut self) -> Result<(), KernelError> {
        self.closed = true;
        if let Some(mut process) = self.process.take() {
            let line = b"{\"id\":0,\"op\":\"shutdown\"}\n";
            let polite = async {
                process.stdin.write_all(line).await.ok()?;
                process.stdin.flush().await.ok()?;
                process.child.wait().await.ok()
            };
            if tokio::time::timeout(Duration::from_secs(1), polite)
                .await
                .is_err()
            {
                reap(process).await;
            }
        }
        Ok(())
    }

    /// Runs `source` as cell `cell` (its traceback file is `<cell N>`),
    /// snapshotting outputs if the kernel has a blob directory.
    ///
    /// A Python exception is a normal result ([`CellResult::error`]); an
    /// `Err` means the kernel itself failed (timeout, death).
    ///
    /// # Errors
    ///
    /// [`KernelError::Timeout`], [`KernelError::Died`],
    /// [`KernelError::Protocol`], [`KernelError::Internal`], or a start
    /// error if the kernel had to be started.
    pub async fn execute(&mut self, cell: u32, source: &str) -> Result<CellResult, KernelError> {
        let options = ExecuteOptions {
            declared: Vec::new(),
            snapshot: true,
        };
        self.execute_with(cell, source, &options).await
    }

    /// [`execute`](Self::execute) with options.
    ///
    /// # Errors
    ///
    /// As [`execute`](Self::execute).
    pub async fn execute_with(
        &mut self,
        cell: u32,
        source: &str,
        options: &ExecuteOptions,
    ) -> Result<CellResult, KernelError> {
        let mut message = Map::new();
        message.insert("op".into(), "execute".into());
        message.insert("cell".into(), cell.into());
        message.insert("source".into(), source.into());
        message.insert("declared".into(), json!(options.declared));
        message.insert("snapshot".into(), options.snapshot.into());
        let during = Activity::Cell(cell);
        let reply = self
            .request(message, during.clone(), self.config.timeout)
            .await?;
        let reply: ExecuteReply = match serde_json::from_slice(&reply) {
            Ok(reply) => reply,
            Err(error) => {
                return Err(self
                    .replace(during, format!("malformed execute reply: {error}"))
                    .await);
            }
        };
        // A hash names a file of the blob store: one that is not a hash
        // was not written by the kernel's own code.
        if let Some((name, hash)) = reply.outputs.iter().find_map(|(name, summary)| {
            summary
                .stored
                .hash()
                .filter(|h| !crate::blobs::is_valid_hash(h))
                .map(|h| (name, h))
        }) {
            let detail = format!(
                "execute reply: output `{name}` is stored under {hash:?}, which is not a SHA-256"
            );
            return Err(self.replace(during, detail).await);
        }
        let error = match (reply.ok, reply.error) {
            (true, _) => None,
            (false, Some(error)) => Some(error),
            (false, None) => Some(PythonError {
                type_name: "UnknownError".to_owned(),
                message: "the kernel reported a failure without an exception".to_owned(),
                line: None,
                frames: Vec::new(),
                traceback: String::new(),
            }),
        };
        Ok(CellResult {
            cell,
            error,
            stdout: reply.stdout,
            stderr: reply.stderr,
            display: reply.display,
            outputs: reply.outputs,
            deleted: reply.deleted,
            reads: reply.reads,
            trace: reply.trace,
            duration_us: reply.duration_us,
        })
    }

    /// Puts values back into the namespace: loads blobs from the blob
    /// directory, imports modules, deletes names.
    ///
    /// # Errors
    ///
    /// As [`execute`](Self::execute); values that cannot be loaded are
    /// reported in [`RestoreReport::failed`], not as errors.
    pub async fn restore(&mut self, values: &[RestoreValue]) -> Result<RestoreReport, KernelError> {
        let mut message = Map::new();
        message.insert("op".into(), "restore".into());
        message.insert("values".into(), json!(values));
        let reply = self
            .request(message, Activity::Restore, self.config.timeout)
            .await?;
        match serde_json::from_slice(&reply) {
            Ok(report) => Ok(report),
            Err(error) => Err(self
                .replace(
                    Activity::Restore,
                    format!("malformed restore reply: {error}"),
                )
                .await),
        }
    }

    /// A reply that does not read, or reads as what the kernel's own code
    /// never sends: the process (whose namespace may hold what the cell did
    /// before it broke the protocol) is replaced by a fresh one, as after
    /// any other protocol error.
    async fn replace(&mut self, during: Activity, detail: String) -> KernelError {
        if let Some(process) = self.process.take() {
            reap(process).await;
        }
        let restarted = self.start().await.is_ok();
        KernelError::Protocol {
            during,
            detail,
            restarted,
        }
    }

    /// Clears the namespace without restarting the process.
    ///
    /// # Errors
    ///
    /// As [`execute`](Self::execute).
    pub async fn reset(&mut self) -> Result<(), KernelError> {
        let mut message = Map::new();
        message.insert("op".into(), "reset".into());
        self.request(message, Activity::Control("reset"), self.config.timeout)
            .await
            .map(|_| ())
    }

    /// One empty round trip; returns how long it took.
    ///
    /// # Errors
    ///
    /// As [`execute`](Self::execute).
    pub async fn ping(&mut self) -> Result<Duration, KernelError> {
        let started = Instant::now();
        let mut message = Map::new();
        message.insert("op".into(), "ping".into());
        self.request(message, Activity::Control("ping"), self.config.timeout)
            .await?;
        Ok(started.elapsed())
    }

    async fn request(
        &mut self,
        mut message: Map<String, Value>,
        during: Activity,
        timeout: Option<Duration>,
    ) -> Result<Vec<u8>, KernelError> {
        if self.process.as_ref().is_some_and(|p| p.in_flight) {
            tracing::warn!("kernel: an earlier request was abandoned; restarting the kernel");
            self.restart().await?;
        }
        if self.process.is_none() {
            self.start().await?;
        }
        let id = self.next_id;
        self.next_id += 1;
        message.insert("id".into(), id.into());
        let mut line = serde_json::to_vec(&message).map_err(|error| KernelError::Protocol {
            during: during.clone(),
            detail: format!("cannot encode the request: {error}"),
            restarted: false,
        })?;
        line.push(b'\n');
        let max = self.config.max_message_bytes;
        let Some(process) = self.process.as_mut() else {
            return Err(KernelError::Closed);
        };
        process.in_flight = true;
        let Process {
            child,
            stdin,
            stdout,
            ..
        } = process;
        let exchange = async {
            let reply = async {
                stdin.write_all(&line).await?;
                stdin.flush().await?;
                read_line(stdout, max).await
            };
            // A process the kernel forked keeps the pipes open after the
            // kernel dies, so the end of the pipe cannot be waited for.
            tokio::select! {
                biased;
                reply = reply => reply,
                _ = child.wait() => Ok(None),
            }
        };
        let outcome = match timeout {
            Some(limit) => tokio::time::timeout(limit, exchange).await.ok(),
            None => Some(exchange.await),
        };
        match outcome {
            None => {
                if let Some(process) = self.process.take() {
                    reap(process).await;
                }
                let restarted = self.start().await.is_ok();
                Err(KernelError::Timeout {
                    during,
                    after: timeout.unwrap_or_default(),
                    restarted,
                })
            }
            Some(Err(_)) | Some(Ok(None)) => {
                let (status, stderr) = match self.process.take() {
                    Some(process) => reap(process).await,
                    None => (ExitInfo::default(), String::new()),
                };
                let restarted = self.start().await.is_ok();
                Err(KernelError::Died {
                    during,
                    status: status.text,
                    code: status.code,
                    signal: status.signal,
                    stderr,
                    restarted,
                })
            }
            Some(Ok(Some(bytes))) => {
                process.in_flight = false;
                // Its id and error only: the rest is read by the caller
                // straight into its reply type, never as a tree of
                // `Value`s, whose size a cell's forged line would set.
                #[derive(Deserialize)]
                struct Envelope {
                    id: Option<u64>,
                    kernel_error: Option<String>,
                }
                let parsed = serde_json::from_slice::<Envelope>(&bytes)
                    .map_err(|error| format!("reply does not read: {error}"))
                    .and_then(|envelope| {
                        if envelope.id == Some(id) {
                            Ok(envelope.kernel_error)
                        } else {
                            Err(format!("reply has id {:?}, expected {id}", envelope.id))
                        }
                    });
                match parsed {
                    Ok(Some(detail)) => Err(KernelError::Internal { during, detail }),
                    Ok(None) => Ok(bytes),
                    Err(detail) => Err(self.replace(during, detail).await),
                }
            }
        }
    }
}

fn parse_hello(line: &[u8]) -> Result<Hello, String> {
    #[derive(Deserialize)]
    struct Greeting {
        hello: Hello,
    }
    serde_json::from_slice::<Greeting>(line)
        .map(|g| g.hello)
        .map_err(|error| {
            format!(
                "unexpected greeting {:?}: {error}",
                String::from_utf8_lossy(&line[..line.len().min(200)])
            )
        })
}

/// Reads one `\n`-terminated line (without the newline); `None` at EOF.
async fn read_line(
    reader: &mut BufReader<ChildStdout>,
    max: usize,
) -> std::io::Result<Option<Vec<u8>>> {
    let mut line = Vec::new();
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(None);
        }
        if let Some(end) = available.iter().position(|&b| b == b'\n') {
            line.extend_from_slice(&available[..end]);
            reader.consume(end + 1);
            return Ok(Some(line));
        }
        let n = available.len();
        line.extend_from_slice(available);
        reader.consume(n);
        if line.len() > max {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("a protocol line is longer than {max} bytes"),
            ));
        }
    }
}

/// Keeps the last [`DIAG_TAIL`] bytes of the kernel's stderr.
async fn drain_tail(mut stderr: tokio::process::ChildStderr, tail: Arc<Mutex<Vec<u8>>>) {
    let mut buffer = vec![0u8; 4096];
    loop {
        match stderr.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let mut kept = tail.lock().unwrap_or_else(PoisonError::into_inner);
                kept.extend_from_slice(&buffer[..n]);
                if kept.len() > DIAG_TAIL {
                    let excess = kept.len() - DIAG_TAIL;
                    kept.drain(..excess);
                }
            }
        }
    }
}

#[derive(Debug, Default)]
struct ExitInfo {
    text: String,
    code: Option<i32>,
    signal: Option<i32>,
}

/// Kills the process if it still runs, waits for it, kills its process
/// group, and returns its exit status and the end of its stderr.
async fn reap(mut process: Process) -> (ExitInfo, String) {
    let status = match process.child.try_wait() {
        Ok(Some(status)) => Some(status),
        _ => {
            // Give a dying process a moment to finish exiting on its own, so
            // that its real status is reported rather than our SIGKILL.
            match tokio::time::timeout(Duration::from_millis(50), process.child.wait()).await {
                Ok(Ok(status)) => Some(status),
                _ => {
                    process.group.kill();
                    let _ = process.child.start_kill();
                    tokio::time::timeout(Duration::from_secs(5), process.child.wait())
                        .await
                        .ok()
                        .and_then(Result::ok)
                }
            }
        }
    };
    // What the kernel started dies with it; until then it may hold the
    // stderr pipe open.
    process.group.kill();
    // The stderr pipe closes when the process is gone; wait briefly for the
    // drain task to see the last bytes.
    let _ = tokio::time::timeout(Duration::from_millis(200), &mut process.diag_task).await;
    process.diag_task.abort();
    let stderr = {
        let kept = process.diag.lock().unwrap_or_else(PoisonError::into_inner);
        String::from_utf8_lossy(&kept).into_owned()
    };
    let info = match status {
        Some(status) => ExitInfo {
            text: status.to_string(),
            code: status.code(),
            signal: exit_signal(&status),
        },
        None => ExitInfo {
            text: "exit status unknown".to_owned(),
            ..ExitInfo::default()
        },
    };
    (info, stderr)
}

#[cfg(unix)]
fn exit_signal(status: &std::process::ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.signal()
}

#[cfg(not(unix))]
fn exit_signal(_: &std::process::ExitStatus) -> Option<i32> {
    None
}
