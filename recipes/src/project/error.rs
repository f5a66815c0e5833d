//! What can go wrong with a project.

use super::files::FileError;
use super::git::GitError;
use super::ledger::LedgerError;
use harness::session::SessionError;
use harness::{LoopValidationError, RunError};

/// Why a project operation failed. Nothing stored is lost by a failure:
/// the session that failed can be resumed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProjectError {
    /// The ledger is not valid, or refused a change.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// A git command failed.
    #[error(transparent)]
    Git(#[from] GitError),
    /// A project file cannot be read or written.
    #[error(transparent)]
    File(#[from] FileError),
    /// The session store failed, or refused the operation.
    #[error(transparent)]
    Store(#[from] SessionError),
    /// A loop of the recipe is not valid (a category's loop, say).
    #[error(transparent)]
    Loop(#[from] LoopValidationError),
    /// A session's run failed; the session stays unfinished and
    /// [`run_until_complete`](super::ProjectAgent::run_until_complete)
    /// recovers it.
    #[error("session {number} of project `{project}` failed: {source}")]
    Session {
        /// The project.
        project: String,
        /// The session's number (0: the initializer).
        number: u32,
        /// The run's error.
        #[source]
        source: Box<RunError>,
    },
    /// The project has not been initialized.
    #[error("project `{project}` is not initialized; call `initialize` with its description first")]
    NotInitialized {
        /// The project.
        project: String,
    },
    /// The project was initialized already.
    #[error("project `{project}` was initialized already (commit {commit})")]
    AlreadyInitialized {
        /// The project.
        project: String,
        /// The initializer's commit.
        commit: String,
    },
    /// The project was abandoned.
    #[error("project `{project}` was abandoned: {reason}")]
    Abandoned {
        /// The project.
        project: String,
        /// Why.
        reason: String,
    },
    /// The project is paused.
    #[error("project `{project}` is paused; call `resume` first")]
    Paused {
        /// The project.
        project: String,
    },
    /// A commit that is not in the project's history since the
    /// initializer's commit.
    #[error("cannot revert project `{project}` to {commit}: {reason}")]
    NotInHistory {
        /// The project.
        project: String,
        /// The commit asked for.
        commit: String,
        /// Why it is refused.
        reason: String,
    },
    /// The project's record in the store is not readable.
    #[error("the record of project `{project}` is not valid: {reason}")]
    Record {
        /// The project.
        project: String,
        /// What is wrong.
        reason: String,
    },
}
