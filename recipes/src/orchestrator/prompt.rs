//! What the planner and the synthesizer are asked.

use super::plan::Lines;
use super::{OrchestratorState, ReplanReason, Role};
use harness::llm::ModelRequest;
use std::fmt::Write as _;

const PLANNER: &str = "You are the planner of a team of agents. Split the goal into tasks, \
each for one agent of the team, named by its role. A task lists in `needs` the ids of the \
tasks whose results it uses; tasks that need nothing from each other run at the same time. \
Tasks already done are listed with their results: do not plan them again, but a task may need \
them. Answer with the plan as JSON only.";

/// The bound on the planner's answer: a plan of a dozen tasks fits well
/// inside it; a small model once wrote 1 800 tokens of plan and went on.
const PLAN_MAX_TOKENS: u32 = 1024;

/// The bound on the synthesizer's answer.
const ANSWER_MAX_TOKENS: u32 = 1024;

/// The planner's request: the goal, the team, what is done, and why the
/// last plan was replaced.
pub(super) fn planning(s: &OrchestratorState, roles: &[Role]) -> ModelRequest {
    let mut user = format!("Goal: {}\n\nAgents:\n", s.goal);
    for r in roles {
        let _ = writeln!(user, "- {}: {}", r.name, r.description);
    }
    if !s.results.is_empty() {
        user.push_str("\nDone:\n");
        for (id, r) in &s.results {
            let _ = writeln!(user, "- {id} ({}): {}", r.agent, r.output);
        }
    }
    if let Some(last) = s.replans.last().filter(|r| r.plan == s.plans) {
        match &last.reason {
            ReplanReason::Invalid { problems } => {
                let _ = write!(user, "\nYour last plan could not run:\n{}", Lines(problems));
            }
            ReplanReason::Failed { failures } => {
                user.push_str("\nThese tasks of the last plan failed:\n");
                for f in failures {
                    let _ = writeln!(user, "- {} ({}): {}", f.task, f.agent, f.error);
                }
            }
        }
        user.push_str("Write a new plan.\n");
    }
    ModelRequest::builder()
        .system(PLANNER)
        .user(user)
        .max_tokens(PLAN_MAX_TOKENS)
        .build()
}

/// The synthesizer's request: the goal and every result of the plan, in
/// plan order.
pub(super) fn synthesis(s: &OrchestratorState) -> ModelRequest {
    let mut user = format!("Goal: {}\n\nResults:\n", s.goal);
    for t in &s.plan.tasks {
        if let Some(r) = s.results.get(&t.id) {
            let _ = writeln!(user, "- {} ({}): {}", t.id, r.agent, r.output);
        }
    }
    ModelRequest::builder()
        .system("Write the answer to the goal from the results of the team's tasks.")
        .user(user)
        .max_tokens(ANSWER_MAX_TOKENS)
        .build()
}
