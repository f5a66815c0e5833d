#![doc = include_str!("../docs/project.md")]

mod agent;
mod env;
mod error;
mod files;
mod git;
mod init;
mod ledger;
mod session;
mod tools;
mod verify;

pub use agent::{ProjectAgent, ProjectAgentBuilder, ProjectStatus, SessionEnd, read_ledger};
pub use env::{ProjectEnv, ProjectRecord, ProjectState, SessionEntry};
pub use error::ProjectError;
pub use files::{
    DECISIONS_PATH, Decision, FileError, LEDGER_PATH, PROGRESS_PATH, ProgressEntry, read_decisions,
    read_progress,
};
pub use git::{CommitInfo, Git, GitError};
pub use init::{InitState, InitStateUpdate};
pub use ledger::{Feature, FeatureSpec, FeatureStatus, Ledger, LedgerError, ProjectPlan};
pub use session::{
    AnswerError, Briefing, COMPLETE, CategoryAgent, Pick, Reflection, SessionDeps,
    SessionDepsAgent, SessionRecord, SessionState, SessionStateUpdate,
};
pub use tools::workspace_tools;
pub use verify::{PASS_ENV, StepOutcome, VerificationRun, VerificationStep, run_steps};
