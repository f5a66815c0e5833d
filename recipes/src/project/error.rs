//! What can go wrong with a project.

use super::files::FileError;
use super::git::{CommitInfo, GitError};
use super::ledger::LedgerError;
use harness::session::SessionError;
use harness::{LoopValidationError, RunError};
use std::path::PathBuf;

fn list(paths: &[String]) -> String {
    paths.join(", ")
}

/// The run that failed, as [`ProjectError::Session`] names it.
fn failed_run(project: &str, number: u32) -> String {
    if number == 0 {
        format!(
            "the initializer (session `{project}-init`; `initialize` again goes on where it stood, in the repository as the initializer took it)"
        )
    } else {
        format!("session {number}")
    }
}

fn commits(commits: &[CommitInfo]) -> String {
    commits
        .iter()
        .map(|c| format!("{} \"{}\"", super::files::short(&c.id), c.subject))
        .collect::<Vec<_>>()
        .join(", ")
}

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
    /// The long-term memory the decisions are kept in failed.
    #[error("project `{project}`: the decision memory: {source}")]
    Memory {
        /// The project.
        project: String,
        /// What failed.
        #[source]
        source: harness::memory::MemoryError,
    },
    /// A session's run failed; the session stays unfinished and
    /// [`run_until_complete`](super::ProjectAgent::run_until_complete)
    /// recovers it. Number 0 is the initializer's run (session
    /// `{project}-init`), which the next
    /// [`initialize`](super::ProjectAgent::initialize) goes on with.
    #[error("{} of project `{project}` failed: {source}", failed_run(project, *number))]
    Session {
        /// The project.
        project: String,
        /// The session's number (0: the initializer).
        number: u32,
        /// The run's error.
        #[source]
        source: Box<RunError>,
    },
    /// The project's name cannot name its sessions and commit trailers
    /// (refused when the agent is built).
    #[error(
        "the project name {name:?} is not valid: {reason}; use ASCII letters, digits, `-` and `_` (the name is part of the project's session ids and of the `Project-Session:` trailer of its commits)"
    )]
    InvalidName {
        /// The name given.
        name: String,
        /// What is wrong with it, and where.
        reason: String,
    },
    /// The project has not been initialized.
    #[error("project `{project}` is not initialized; call `initialize` with its description first")]
    NotInitialized {
        /// The project.
        project: String,
    },
    /// The project was initialized already.
    #[error(
        "project `{project}` was initialized already (commit {commit}); a project of its own needs a name of its own in the store"
    )]
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
    /// The working tree has changes the agent did not make (found before
    /// the initializer or a new session, when every change is the user's):
    /// nothing was committed, reset or deleted.
    #[error(
        "project `{project}`: {} has changes the project agent did not make: {}; commit them, stash them (`git stash --include-untracked`) or add them to .gitignore, then run again (the agent never commits, resets or deletes files it did not write)",
        dir.display(),
        list(paths)
    )]
    UncommittedChanges {
        /// The project.
        project: String,
        /// The working directory.
        dir: PathBuf,
        /// Each path, with what changed (`a.txt (modified)`).
        paths: Vec<String>,
    },
    /// The directory is not a git repository and holds files: the agent
    /// makes a repository only in an empty directory.
    #[error(
        "project `{project}`: {} is not a git repository and holds files the project agent did not write: {}; use an empty directory, or make it a repository and commit them (`git init && git add -A && git commit`), and the agent will work on a branch of its own",
        dir.display(),
        list(paths)
    )]
    NotEmpty {
        /// The project.
        project: String,
        /// The working directory.
        dir: PathBuf,
        /// What it holds.
        paths: Vec<String>,
    },
    /// The repository is not on the project's branch: the agent works and
    /// commits only there.
    #[error(
        "project `{project}`: the repository in {} has {} checked out, not the project's branch `{expected}`; the agent works only on its own branch: commit or stash your changes and run `git switch {expected}`, then run again",
        dir.display(),
        found.as_deref().map_or_else(|| "a detached HEAD".to_owned(), |b| format!("branch `{b}`"))
    )]
    WrongBranch {
        /// The project.
        project: String,
        /// The working directory.
        dir: PathBuf,
        /// The project's branch.
        expected: String,
        /// The branch checked out (`None`: detached `HEAD`).
        found: Option<String>,
    },
    /// The project's branch has commits the agent did not make (or no
    /// longer holds its first commit): the agent never moves a branch over
    /// a commit it did not make, so it stops.
    #[error(
        "project `{project}`: branch `{branch}` has commits the project agent did not make: {}; the agent never moves a branch over someone else's commit: keep them on a branch of your own (`git branch my-work {branch}`) and put `{branch}` back at the agent's last commit ({}), or abandon the project",
        commits(foreign),
        last_own.as_deref().map_or("unknown", super::files::short)
    )]
    ForeignCommits {
        /// The project.
        project: String,
        /// The project's branch.
        branch: String,
        /// The commits the agent did not make, newest first.
        foreign: Vec<CommitInfo>,
        /// The newest commit of the agent below them, if any.
        last_own: Option<String>,
    },
    /// The repository is in a state the agent will not take over.
    #[error("project `{project}`: cannot take over the repository in {}: {reason}", dir.display())]
    NotOwned {
        /// The project.
        project: String,
        /// The working directory.
        dir: PathBuf,
        /// Why, and what to do.
        reason: String,
    },
}
