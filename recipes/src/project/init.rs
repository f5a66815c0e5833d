//! The initializer: one harness loop — plan, set up — that turns a
//! project description into the feature ledger, the progress log and the
//! first commit.

use super::files::{self, DECISIONS_PATH, GITIGNORE, LEDGER_PATH};
use super::ledger::{Ledger, ProjectPlan};
use super::session::{SessionDeps, ask_typed};
use harness::llm::ModelRequest;
use harness::{Cx, Harness, HarnessState, JsonSchema, StepResult, schemars};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The initializer's state.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
pub struct InitState {
    /// The project's description.
    pub description: String,
    /// The ledger planned.
    pub ledger: Option<Ledger>,
    /// The first commit.
    pub commit: Option<String>,
}

const PLANNER: &str = "You turn a project description into a feature ledger for a long-running coding agent. \
Each feature is small enough for one session, has an id (letters, digits, - and _), a category, a priority \
(lower first) and verification steps: shell commands run in the project directory that exit with 0 when the \
feature works (optionally with text their output must contain). Also give a quick smoke check (may be empty). \
Answer with JSON only.";

/// The initializer loop: `plan → setup`.
pub(crate) fn init_loop() -> harness::HarnessBuilder<InitState, SessionDeps> {
    Harness::builder()
        .step("plan")
        .run(plan)
        .next("setup")
        .step("setup")
        .run(setup)
        .end()
        .start("plan")
}

/// Asks the model for the plan, as a typed answer, and checks it.
async fn plan(state: Arc<InitState>, cx: Cx<SessionDeps>) -> StepResult<InitStateUpdate> {
    let request = ModelRequest::builder()
        .system(PLANNER)
        .user(format!("The project:\n{}", state.description))
        .build();
    let plan: ProjectPlan = ask_typed(&cx, &*cx.model, request).await?;
    let ledger = Ledger::from_plan(state.description.clone(), plan)?;
    Ok(InitStateUpdate::new().ledger(Some(ledger)))
}

/// Makes the repository, writes the ledger, the empty decision memory and
/// `.gitignore`, and commits them — once.
async fn setup(state: Arc<InitState>, cx: Cx<SessionDeps>) -> StepResult<InitStateUpdate> {
    let ledger = state
        .ledger
        .clone()
        .ok_or_else(|| harness::StepError::msg("the plan step left no ledger"))?;
    let env = Arc::clone(&cx.env);
    let commit = cx
        .try_once("commit", async move {
            env.git.init().await?;
            let trailer = super::session::trailer(&format!("{}-init", env.name));
            if let Some(head) = env.git.head().await?
                && env.git.message(&head).await?.contains(&trailer)
            {
                return Ok(head);
            }
            let dir = env.dir();
            let ignore = files::path(dir, ".gitignore");
            let mut text = std::fs::read_to_string(&ignore).unwrap_or_default();
            if !text.contains(GITIGNORE) {
                text.push_str(GITIGNORE);
                files::write_text(&ignore, &text)?;
            }
            files::write_text(&files::path(dir, LEDGER_PATH), &ledger.to_json())?;
            files::write_json(
                &files::path(dir, DECISIONS_PATH),
                &Vec::<files::Decision>::new(),
            )?;
            let message = format!(
                "initialize the project: {} features\n\n{}\n",
                ledger.features.len(),
                trailer
            );
            Ok::<String, super::error::ProjectError>(env.git.commit_all(&message).await?)
        })
        .await?;
    Ok(InitStateUpdate::new().commit(Some(commit)))
}
