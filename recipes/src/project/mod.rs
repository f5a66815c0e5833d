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

pub use agent::{
    ProjectAgent, ProjectAgentBuilder, ProjectStatus, Rollback, SessionEnd, read_ledger,
};
pub use env::{PROJECT_BRANCH, ProjectEnv, ProjectRecord, ProjectState, SessionEntry};
pub use error::ProjectError;
pub use files::{
    DECISIONS_PATH, Decision, FileError, LEDGER_PATH, PROGRESS_PATH, ProgressEntry, read_decisions,
    read_progress,
};
pub use git::{AGENT_EMAIL, AGENT_NAME, CommitDetail, CommitInfo, Git, GitError, StatusEntry};
pub use init::{InitState, InitStateUpdate};
pub use ledger::{Feature, FeatureSpec, FeatureStatus, Ledger, LedgerError, ProjectPlan};
pub use session::{
    AnswerError, Briefing, COMPLETE, CategoryAgent, Pick, Reflection, SessionDeps,
    SessionDepsAgent, SessionRecord, SessionState, SessionStateUpdate,
};
pub use tools::workspace_tools;
pub use verify::{PASS_ENV, StepOutcome, VerificationRun, VerificationStep, run_steps};
