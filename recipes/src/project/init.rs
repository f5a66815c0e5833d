//! The initializer: one harness loop — plan, set up — that turns a
//! project description into the feature ledger, the progress log and the
//! first commit.

use super::files::{self, DECISIONS_PATH, GITIGNORE, LEDGER_PATH};
use super::ledger::{Ledger, ProjectPlan};
use super::session::{SessionDeps, ask_typed};
use harness::llm::{Message, ModelRequest};
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
    /// The branch the project works on, taken before the initializer ran
    /// (see the [module docs](super) for the rule).
    #[serde(default)]
    pub branch: Option<String>,
    /// How the repository was taken, for the progress log.
    #[serde(default)]
    pub taken: Option<String>,
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

/// How many plans the model may give: the first, and repair turns that
/// each say what was wrong with the one before (two ids alike, no
/// verification, …). Real small models get a ledger's rules wrong often
/// enough that failing at once would end most projects before they begin.
pub(crate) const PLAN_ATTEMPTS: u32 = 3;

/// The bound on the planner's answer: a ledger of a dozen features fits
/// well inside it, and a model that rambles is cut off rather than waited
/// for.
const PLAN_MAX_TOKENS: u32 = 2048;

/// Asks the model for the plan, as a typed answer, and checks it; a plan
/// the ledger refuses is sent back with the reason, up to
/// [`PLAN_ATTEMPTS`] plans in all.
async fn plan(state: Arc<InitState>, cx: Cx<SessionDeps>) -> StepResult<InitStateUpdate> {
    let mut request = ModelRequest::builder()
        .system(PLANNER)
        .user(format!("The project:\n{}", state.description))
        .max_tokens(PLAN_MAX_TOKENS)
        .build();
    let mut attempt = 1;
    loop {
        let plan: ProjectPlan = ask_typed(&cx, &*cx.model, request.clone()).await?;
        let refused = match Ledger::from_plan(state.description.clone(), plan.clone()) {
            Ok(ledger) => return Ok(InitStateUpdate::new().ledger(Some(ledger))),
            Err(refused) if attempt < PLAN_ATTEMPTS => refused,
            Err(refused) => {
                return Err(harness::StepError::msg(format!(
                    "the model gave {attempt} plans and none could be used; the last: {refused}"
                )));
            }
        };
        cx.emit(
            "plan_refused",
            serde_json::json!({ "attempt": attempt, "problem": refused.to_string() }),
        );
        let answer = serde_json::to_string(&plan).map_err(harness::StepError::new)?;
        request.messages.push(Message::assistant(answer));
        request.messages.push(Message::user(format!(
            "That plan cannot be used: {refused}. Answer with the whole plan again, fixed, as JSON only."
        )));
        attempt += 1;
    }
}

/// Writes the ledger, the empty decision memory and the lines of
/// `.gitignore`, and commits those three files — once — on the project's
/// branch (taken before the loop ran, with a clean working tree: nothing
/// else is staged).
async fn setup(state: Arc<InitState>, cx: Cx<SessionDeps>) -> StepResult<InitStateUpdate> {
    let ledger = state
        .ledger
        .clone()
        .ok_or_else(|| harness::StepError::msg("the plan step left no ledger"))?;
    let branch = state.branch.clone();
    let env = Arc::clone(&cx.env);
    let commit = cx
        .try_once("commit", async move {
            let trailer = super::session::trailer(&format!("{}-init", env.name));
            if let Some(head) = env.git.head().await?
                && env.git.message(&head).await?.contains(&trailer)
            {
                return Ok(head);
            }
            if let Some(branch) = &branch {
                env.check_branch(branch).await?;
            }
            let dir = env.dir();
            let ignore = files::path(dir, ".gitignore");
            files::add_to_gitignore(&ignore, GITIGNORE)?;
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
            let paths = [".gitignore", LEDGER_PATH, DECISIONS_PATH].map(std::path::PathBuf::from);
            Ok::<String, super::error::ProjectError>(env.git.commit_paths(&message, &paths).await?)
        })
        .await?;
    Ok(InitStateUpdate::new().commit(Some(commit)))
}
