//! Errors of session stores and of session operations.

use crate::ids::{InterruptId, SessionId};
use crate::run::NoInterrupt;
use crate::slots::SlotError;

/// A stored record that cannot be read: corrupt, of another schema version,
/// or not this agent's. Nothing is changed in the store.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot load session {session}: {record}: {reason}")]
pub struct StoreLoad {
    /// The session.
    pub session: SessionId,
    /// Which record: `head`, `checkpoint 12`, ….
    pub record: String,
    /// What is wrong with it.
    pub reason: String,
}

/// An error of a [`SessionStore`](super::SessionStore).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A commit's expected version did not match: another writer changed the
    /// session first. Nothing was written.
    #[error(
        "session {session} changed underneath this writer (expected version {expected:?}, found {found:?})"
    )]
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
    /// The backend failed (I/O, connection, …).
    #[error("session store failed: {message}")]
    Backend {
        /// What failed, with the backend's own message.
        message: String,
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
#[error(
    "session {session} is being run by {owner} (lease until {expires_at} ms since the epoch); try again when it settles"
)]
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
    "session {session} waits for an answer to interrupt {interrupt}: answer it with agent.resume(..)"
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
    /// The run slots do not fit the context.
    #[error(transparent)]
    Slots(#[from] SlotError),
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
    Run(Box<crate::RunError>),
    /// The harness has no session store.
    #[error("this harness has no session store: attach one with Harness::builder().store(..)")]
    NoStore,
    /// No checkpoint with this index.
    #[error("session {session} has no checkpoint {index} (it has {last} steps)")]
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
