#![doc = include_str!("docs/guide.md")]
#![forbid(unsafe_code)]

pub mod approval;
#[cfg(unix)]
pub mod fs;
pub mod memory;
pub mod policy;
pub mod recall;
pub mod recipe;
pub mod schema;
pub mod shell;
pub mod tokens;
pub mod transcript;
pub mod usage;

pub use approval::{
    ApprovalError, ApprovalRequest, CallDecision, Decision, DecisionProblem, Decisions, PendingCall,
};
pub use memory::{AgentMemory, AgentStatus, EvictionPlan, LimitKind, MemoryConfig, plan_eviction};
pub use policy::{Policy, Verdict};
pub use recipe::{
    AgentChat, AgentChatUpdate, AgentContext, AgentLoop, AgentState, DEFAULT_MAX_OUTPUT_TOKENS,
    Exit, Limits, MEMORY_EVICTED, MemoryEvicted, ModelDeps, ModelDepsAgent, signals,
};
pub use tokens::{Calibration, Estimate, TokenCounter};
pub use transcript::{PairingError, Transcript, Turn, Unit, UnitBody, check_pairing};
pub use usage::usage_report;
