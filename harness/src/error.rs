//! The named errors of runs, session stores and session operations.
//!
//! They live in one module below everything that returns them, so that the
//! step, session, observation and run modules can all name them without
//! importing each other. Each is re-exported where it is used:
//! [`RunError`] and [`NoInterrupt`] from [`run`](crate::run), the store and
//! session errors from [`session`](crate::session).

use crate::ids::{InterruptId, SessionId};
use crate::signal::Signal;
use std::error::Error;
use std::time::Duration;

/// A boxed error from user code.
pub type BoxError = Box<dyn Error + Send + Sync + 'static>;

/// A stored record that cannot be read: corrupt, of another schema version,
/// not this agent's, or missing from the checkpoint log. Nothing is changed
/// in the store.
///
/// Build one with [`StoreLoad::new`] (a store's own records) or
/// [`StoreLoad::gap`] (a break in the checkpoint log).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot load session {session}: {record}: {reason}")]
#[non_exhaustive]
pub struct StoreLoad {
    /// The session.
    pub session: SessionId,
    /// Which record: `head`, `checkpoint 12`, ….
    pub record: String,
    /// What is wrong with it.
    pub reason: String,
    /// Where the checkpoint log breaks, when a record is missing, repeated
    /// or out of order; `None` for a record that is there but unreadable.
    /// (Boxed: errors stay small on the happy path.)
    pub gap: Option<Box<LogGap>>,
}

impl StoreLoad {
    /// A record of `session` that cannot be read, and why.
    ///
    /// ```
    /// use harness::SessionId;
    /// use harness::session::StoreLoad;
    ///
    /// let e = StoreLoad::new(SessionId::from("s-1"), "checkpoint 3", "invalid JSON");
    /// assert_eq!(e.to_string(), "cannot load session s-1: checkpoint 3: invalid JSON");
    /// ```
    pub fn new(session: SessionId, record: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            session,
            record: record.into(),
            reason: reason.into(),
            gap: None,
        }
    }

    /// A break in the checkpoint log of `session`, found at `record`.
    pub fn gap(
        session: SessionId,
        record: impl Into<String>,
        reason: impl Into<String>,
        gap: LogGap,
    ) -> Self {
        Self {
            gap: Some(Box::new(gap)),
            ..Self::new(session, record, reason)
        }
    }
}

/// Where a session's checkpoint log breaks: the record the head and the
/// records before it call for next, and what was read instead.
///
/// A log is read from a snapshot (the first one, or the latest, which the
/// head names) to the head's last checkpoint; each update after the
/// snapshot is the next step, one by one. The only records that may be
/// absent are superseded snapshots, which restate the updates before them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogGap {
    /// What kind of break.
    pub kind: GapKind,
    /// The sequence number expected next (for a missing snapshot, the one
    /// the read starts at).
    pub expected_seq: u64,
    /// The sequence number read instead; `None` when the log ended there.
    pub found_seq: Option<u64>,
}

/// The kind of a [`LogGap`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum GapKind {
    /// Records are missing: the snapshot the read starts at, or updates
    /// between two records.
    Missing,
    /// A record, or a step's update, appears twice.
    Duplicate,
    /// A record comes before one it should follow.
    OutOfOrder,
    /// The log ends before the head's last checkpoint (`last_seq`) or before
    /// the head's step count.
    EndsEarly,
}

impl std::fmt::Display for GapKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            GapKind::Missing => "missing records",
            GapKind::Duplicate => "a duplicated record",
            GapKind::OutOfOrder => "records out of order",
            GapKind::EndsEarly => "the log ends early",
        })
    }
}

/// A value nested too deeply to be stored: JSON readers refuse nesting
/// past a limit (`serde_json` at 128 levels) that they happily write, so a
/// session holding it could never be read back. The commit carrying it was
/// refused and nothing was written. See
/// [`MAX_VALUE_DEPTH`](crate::session::MAX_VALUE_DEPTH).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "session {session}: {what} of step `{step}` nests {depth} levels of arrays and objects, \
     more than the {limit} a session store can read back; nothing was written: store a flatter value \
     (e.g. a list instead of a chain of nested objects, or a string holding the deep part)"
)]
pub struct ValueTooDeep {
    /// The session.
    pub session: SessionId,
    /// The step the value belongs to (`$start` for a run's initial state,
    /// `$input` for a run input).
    pub step: String,
    /// Which value: `the state`, `the update`, `interrupt answer 0`, ….
    pub what: String,
    /// How deeply it nests (an empty array or object is 1).
    pub depth: usize,
    /// The deepest nesting stored.
    pub limit: usize,
}

/// An error of a [`SessionStore`](crate::session::SessionStore).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A commit's expected version did not match: another writer changed the
    /// session first. Nothing was written.
    #[error("{}", conflict_text(.session, *.expected, *.found))]
    Conflict {
        /// The session.
        session: SessionId,
        /// The version the commit expected (`None`: no session).
        expected: Option<u64>,
        /// The version found (`None`: no session).
        found: Option<u64>,
    },
    /// A record cannot be read.
    #[error(transparent)]
    Load(#[from] StoreLoad),
    /// A value of the commit nests too deeply to be read back; nothing was
    /// written.
    #[error(transparent)]
    TooDeep(#[from] ValueTooDeep),
    /// The backend failed (I/O, connection, …).
    #[error("session store failed: {message}")]
    Backend {
        /// What failed, with the backend's own message.
        message: String,
    },
    /// The store cannot keep a session of this id (a file store's id too
    /// long for a file name). Nothing was read or written.
    #[error("session id {session:?} cannot be kept by this store: {why}")]
    SessionIdNotKept {
        /// The session.
        session: SessionId,
        /// Why, and the store's limit.
        why: String,
    },
    /// The store's files are damaged: bytes the store wrote are not what
    /// it wrote, or a file is missing. The store was not opened, and
    /// nothing was changed: opening it would have lost what the damage
    /// hides (`what` says what to do).
    #[error(
        "the store {} is damaged: {}{}: {what}",
        store.display(),
        file.display(),
        offset.map(|o| format!(" at offset {o}")).unwrap_or_default()
    )]
    Damaged {
        /// The store (its directory).
        store: std::path::PathBuf,
        /// The damaged (or missing) file.
        file: std::path::PathBuf,
        /// The first byte of `file` found damaged, when known.
        offset: Option<u64>,
        /// What is wrong, and what to do.
        what: String,
    },
    /// The path holds data another program wrote in the store's format (a
    /// sled database without harness's trees): most likely a wrong path.
    /// The store was not opened, and nothing of the store's was written
    /// there.
    #[error("{} is not a harness session store: {found}", path.display())]
    NotAStore {
        /// The path given.
        path: std::path::PathBuf,
        /// What the path holds, and what to do.
        found: String,
    },
}

impl StoreError {
    /// A backend failure with this message.
    pub fn backend(message: impl std::fmt::Display) -> Self {
        StoreError::Backend {
            message: message.to_string(),
        }
    }
}

/// Another run holds the session's lease.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", in_flight_text(self))]
pub struct SessionInFlight {
    /// The session.
    pub session: SessionId,
    /// The lease's owner.
    pub owner: String,
    /// When its lease ends unless renewed.
    pub expires_at: u64,
}

/// A new run was asked on a session that waits for an answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "session {session} waits for an answer to interrupt {interrupt}: answer it (Agent::resume, or the resume call of what serves the agent) before a new run"
)]
pub struct SessionPendingInterrupt {
    /// The session.
    pub session: SessionId,
    /// The interrupt waiting for an answer.
    pub interrupt: InterruptId,
}

/// No session with this id in the store.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("no session {session} in the store")]
pub struct NoSession {
    /// The session asked for.
    pub session: SessionId,
}

/// Why a session operation (resume, continue, recover, time travel) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// The session is not paused on that interrupt.
    #[error(transparent)]
    NoInterrupt(#[from] NoInterrupt),
    /// Another run holds the session.
    #[error(transparent)]
    InFlight(#[from] SessionInFlight),
    /// The session waits for an answer to an interrupt.
    #[error(transparent)]
    PendingInterrupt(#[from] SessionPendingInterrupt),
    /// A stored record cannot be read.
    #[error(transparent)]
    Load(#[from] StoreLoad),
    /// No such session.
    #[error(transparent)]
    NoSession(#[from] NoSession),
    /// The store failed.
    #[error(transparent)]
    Store(StoreError),
    /// The session has nothing to recover: it is not unfinished.
    #[error("session {session} has nothing to recover: {why}")]
    NothingToRecover {
        /// The session.
        session: SessionId,
        /// Its phase, explained.
        why: String,
    },
    /// The session is still running a step and its lease has expired: a
    /// process died mid-run. Continue it with `agent.recover(..)`.
    #[error(
        "session {session} was left unfinished by a run that stopped mid-way; continue it with agent.recover(..)"
    )]
    Unfinished {
        /// The session.
        session: SessionId,
    },
    /// The resumed run failed.
    #[error(transparent)]
    Run(Box<RunError>),
    /// The harness has no session store.
    #[error("this harness has no session store: attach one with Harness::builder().store(..)")]
    NoStore,
    /// No checkpoint with this index.
    #[error("session {session} has no checkpoint {index} (its checkpoints are 0 to {last})")]
    NoCheckpoint {
        /// The session.
        session: SessionId,
        /// The index asked for.
        index: u64,
        /// The last index.
        last: u64,
    },
}

impl From<StoreError> for SessionError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Load(l) => SessionError::Load(l),
            other => SessionError::Store(other),
        }
    }
}

/// Why a run ended without an outcome.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// A step's `run` failed on its last attempt. The message redacts the
    /// process's secrets from the step's error, which can quote what it ran
    /// (a tool's stderr); `source` is the error as the step returned it.
    #[error(
        "step `{step}` failed after {attempts} attempt(s): {}",
        crate::secrets::redact(&source.to_string())
    )]
    Step {
        /// The step.
        step: String,
        /// Attempts made.
        attempts: u32,
        /// The step's error.
        source: BoxError,
    },
    /// A step's `run` took longer than its timeout on its last attempt.
    #[error("step `{step}` timed out after {limit:?} on each of {attempts} attempt(s)")]
    Timeout {
        /// The step.
        step: String,
        /// The step's timeout.
        limit: Duration,
        /// Attempts made.
        attempts: u32,
    },
    /// A step's `route` returned a signal the step does not declare.
    #[error(
        "step `{step}` routed to signal `{signal}`, which it does not declare (declared: {})",
        fmt_signals(.declared)
    )]
    UndeclaredSignal {
        /// The step.
        step: String,
        /// The signal returned.
        signal: Signal,
        /// The signals the step declares with `.on(..)`.
        declared: Vec<Signal>,
    },
    /// The run took as many steps as its limit allows.
    #[error(
        "the run reached its limit of {limit} steps before step `{step}`; \
         raise it with .step_limit(n) if the loop is meant to run that long"
    )]
    StepLimit {
        /// The limit.
        limit: u64,
        /// The step that would have run next.
        step: String,
    },
    /// The run went on past its [deadline](crate::HarnessBuilder::deadline):
    /// the step running then was cancelled, not retried.
    #[error(
        "the run passed its deadline of {limit:?} in step `{step}`; \
         raise it with .deadline(..), or remove it with .without_deadline()"
    )]
    Deadline {
        /// The deadline.
        limit: Duration,
        /// The step that was running, or would have run next.
        step: String,
    },
    /// The answer given to an interrupt does not have the shape the step
    /// reads it as. It was not kept: the run is paused on the same
    /// interrupt, and a resume with a well-formed answer continues it.
    #[error(
        "the answer to interrupt {interrupt} was rejected ({reason}); the run still waits on that interrupt: resume it with an answer of the expected shape"
    )]
    AnswerRejected {
        /// The interrupt, still pending.
        interrupt: InterruptId,
        /// What is wrong with the answer, and the type the step expects.
        reason: String,
    },
    /// The run's lease on its session was lost: it could not be renewed
    /// before it expired (the store was unreachable), or another run took
    /// the session over. The step in progress was cancelled before it could
    /// commit; the session is left for a worker (or
    /// [`Agent::recover`](crate::Agent::recover)) to continue from its last
    /// checkpoint.
    #[error(
        "the run's lease on session {session} was lost ({reason}); the step in progress was cancelled and nothing of it was committed"
    )]
    LeaseLost {
        /// The session.
        session: SessionId,
        /// Why: the renewals' last error, or the run that took over.
        reason: String,
    },
    /// A step updated a field it did not declare with
    /// [`writes`](crate::StepBuilder::writes).
    #[error(
        "step `{step}` set the field `{field}`, which it does not declare in .writes([..]); \
         the loop's check of parallel branches relies on what steps declare"
    )]
    UndeclaredWrite {
        /// The step.
        step: String,
        /// The field it set.
        field: String,
    },
    /// The update a fork's [`collect_errors`](crate::ForkBuilder::collect_errors)
    /// made of a failed branch sets a field that keeps one value (`replace`)
    /// which no step of the branch declares with
    /// [`writes`](crate::StepBuilder::writes): the update stands in the
    /// branch's place, so the loop's check of parallel branches (which
    /// judged the steps' declarations) would not hold.
    #[error(
        "the update collect_errors made of branch `{branch}`'s failure at step `{step}` sets the \
         field `{field}`, which no step of the branch declares in .writes([..]); it stands in the \
         branch's place, and the loop's check of parallel branches relies on what steps declare"
    )]
    UndeclaredCollectedWrite {
        /// The branch that failed (`search`, `summarize#2`).
        branch: String,
        /// The step it failed at.
        step: String,
        /// The field the collected update set.
        field: String,
    },
    /// A fan-out could not make its branches' inputs.
    #[error("the fan-out after step `{step}` cannot start its branches: {reason}")]
    FanOut {
        /// The step that fans out.
        step: String,
        /// Why.
        reason: String,
    },
    /// A branch of a fork failed, and its fork does not collect errors: the
    /// run failed and the other branches were cancelled.
    #[error("branch `{path}` failed: {source}")]
    Branch {
        /// The branch.
        path: crate::ids::TaskPath,
        /// Its error.
        source: Box<RunError>,
    },
    /// A sub-agent's loop, run by a step, failed.
    #[error("sub-agent `{path}` failed: {source}")]
    SubAgent {
        /// The sub-agent: the path of the step that runs it.
        path: crate::ids::TaskPath,
        /// Its error.
        source: Box<RunError>,
    },
    /// A sub-agent's step could not start its loop, or make its update from
    /// the loop's outcome: its fan-out item is not of the type it takes, or
    /// names a role no sub-agent is registered for ([`Dispatch`](crate::Dispatch)).
    #[error("sub-agent step `{path}` cannot run: {reason}")]
    SubAgentStart {
        /// The sub-agent: the path of the step that runs it.
        path: crate::ids::TaskPath,
        /// Why.
        reason: String,
    },
    /// The run is paused on an interrupt and was awaited again without a resume.
    #[error("the run is paused on interrupt {interrupt}; call run.resume(response, id) first")]
    Paused {
        /// The pending interrupt.
        interrupt: InterruptId,
    },
    /// The session store failed, or another run took the session over.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The run already settled; it cannot be awaited again.
    #[error("the run has already settled; start a new run")]
    Settled,
}

fn fmt_signals(s: &[Signal]) -> String {
    if s.is_empty() {
        return "none".into();
    }
    s.iter()
        .map(|s| format!("`{s}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A resume that names an interrupt the run is not paused on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", match .pending {
    Some(p) => format!("the run is not paused on interrupt {given}: it is paused on {p}"),
    None => format!("the run is not paused on interrupt {given}: it is not paused at all"),
})]
pub struct NoInterrupt {
    /// The interrupt id given to resume.
    pub given: InterruptId,
    /// The interrupt the run is paused on, if any.
    pub pending: Option<InterruptId>,
}

/// What [`StoreError::Conflict`] says: a session created first by another
/// writer is named as such, as is one removed underneath.
fn conflict_text(session: &SessionId, expected: Option<u64>, found: Option<u64>) -> String {
    match (expected, found) {
        (None, Some(_)) => format!(
            "session {session} already exists (made earlier, or by another writer just \
             now): a new session needs an id of its own, and a run on an existing one \
             `continue_session` or `resume`"
        ),
        (Some(expected), None) => format!(
            "session {session} is gone: it was removed underneath this writer (expected \
             version {expected})"
        ),
        (expected, found) => format!(
            "session {session} changed underneath this writer (expected version {}, found {})",
            version_text(expected),
            version_text(found)
        ),
    }
}

fn version_text(version: Option<u64>) -> String {
    version.map_or_else(|| "none".to_owned(), |v| v.to_string())
}

/// What [`SessionInFlight`] says: when the lease ends, counted from now,
/// since a run whose process died keeps the lease until then (a run
/// dropped in a live process gives it up at once).
fn in_flight_text(e: &SessionInFlight) -> String {
    let SessionInFlight {
        session,
        owner,
        expires_at,
    } = e;
    if *expires_at == 0 {
        return format!("session {session} is being run by {owner}; try again when it settles");
    }
    // The clock as the session's leases read it (ms since the epoch).
    let now = crate::clock::now_millis();
    let left = expires_at.saturating_sub(now);
    format!(
        "session {session} is being run by {owner}, whose lease ends at {expires_at} ms since \
         the epoch (in {}.{:03} s) unless renewed; try again when the run settles, or once \
         the lease has ended if its process died",
        left / 1000,
        left % 1000
    )
}
