//! A session: one harness loop — orient, smoke, pick, work, verify,
//! record, commit — durable in the session store, so a session cut short
//! goes on in another process where it stood.

use super::env::ProjectEnv;
use super::files::{self, DECISIONS_PATH, Decision, LEDGER_PATH};
use super::git::GitError;
use super::ledger::{FeatureStatus, Ledger};
use super::verify::{VerificationRun, VerificationStep, run_steps};
use harness::llm::{LanguageModel, ModelRequest, ToolSet, TypedAnswerError};
use harness::memory::{IndexFields, Memory, MemoryError, Namespace, Op, PutOptions, Search};
use harness::slots::NoSlots;
use harness::{
    Context, Cx, Harness, HarnessState, JsonSchema, StepError, StepResult, SubAgent, SubOutcome,
    schemars,
};
use harness_kit::{
    AgentChat, AgentContext, AgentLoop, AgentMemory, AgentState, Exit, Limits, ModelDeps,
    ModelDepsAgent, Transcript,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The signal a session ends with when no feature is left to work on.
pub const COMPLETE: &str = "complete";

/// What a session's orientation found: the prompt it gives the model, and
/// the ledger at `HEAD` it worked from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Briefing {
    /// The commit the session started from.
    pub head: String,
    /// The ledger at that commit (checked).
    pub ledger: Ledger,
    /// The orientation for the model: progress log, ledger, recent
    /// commits, lessons of earlier sessions.
    pub prompt: String,
    /// The ignored files and directories there were when the session
    /// started (a directory ends in `/`): never the session's, so never
    /// committed or removed by it, even if its work un-ignores them.
    #[serde(default)]
    pub ignored: Vec<String>,
}

/// Whether `path` is one of `entries` or inside one of them that is a
/// directory (ends in `/`).
pub(crate) fn listed(path: &std::path::Path, entries: &[String]) -> bool {
    let path = path.to_string_lossy();
    entries.iter().any(|e| {
        if e.ends_with('/') {
            path.starts_with(e.as_str())
        } else {
            *path == **e
        }
    })
}

/// The feature a session picked (the model's typed answer).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Pick {
    /// The id of the feature to work on now: exactly one.
    pub feature: String,
    /// How you will make it pass.
    pub plan: String,
}

/// What the model reflects after verification (its typed answer).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Reflection {
    /// The situation the decision was made in.
    pub context: String,
    /// The main decision taken in this session.
    pub decision: String,
    /// Why.
    pub reasoning: String,
    /// What later sessions should learn, in one sentence.
    pub lesson: String,
}

/// A model's answer a session cannot use; the session fails at that step
/// and stays resumable (the step asks again when it is recovered).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AnswerError {
    /// The answer is not the JSON of the type asked for, even after a
    /// repair turn.
    #[error(
        "the model's answer in step `{step}` is not a `{type_name}` ({reason}); it wrote: {raw}"
    )]
    Mismatch {
        /// The step.
        step: String,
        /// The type asked for.
        type_name: String,
        /// Where and why it does not fit.
        reason: String,
        /// The answer.
        raw: String,
    },
    /// The model picked a feature that is not open (unknown, passing or
    /// blocked).
    #[error("the model picked feature `{feature}`, which is not open; the open features are: {}", open.join(", "))]
    NotOpen {
        /// The feature picked.
        feature: String,
        /// The open features.
        open: Vec<String>,
    },
}

/// What a session recorded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SessionRecord {
    /// The feature.
    pub feature: String,
    /// Its new status.
    pub status: FeatureStatus,
    /// The verification run behind it.
    pub evidence: String,
    /// The decision, as the decision memory keeps it.
    pub decision: Decision,
    /// Edits of the ledger file made during the work (by a tool), which
    /// were discarded: the committed ledger only changes through this
    /// record.
    pub discarded_ledger_edit: Option<String>,
}

/// A session's state.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
pub struct SessionState {
    /// The session's number, from 1.
    pub number: u32,
    /// The working agent's memory (model turns and tool results).
    #[field(reduce = append)]
    pub agent: AgentMemory,
    /// What orientation found.
    pub briefing: Option<Briefing>,
    /// The smoke check's run.
    pub smoke: Option<VerificationRun>,
    /// The feature picked.
    pub pick: Option<Pick>,
    /// What the work did, in the working agent's words.
    pub work: Option<String>,
    /// The feature's verification run.
    pub verification: Option<VerificationRun>,
    /// What was recorded.
    pub record: Option<SessionRecord>,
    /// The session's commit.
    pub commit: Option<String>,
}

impl SessionState {
    /// The state session `number` starts from.
    pub fn new(number: u32) -> Self {
        Self {
            number,
            agent: AgentMemory::default(),
            briefing: None,
            smoke: None,
            pick: None,
            work: None,
            verification: None,
            record: None,
            commit: None,
        }
    }
}

impl AgentState for SessionState {
    fn memory(&self) -> &AgentMemory {
        &self.agent
    }

    fn memory_update(update: AgentMemory) -> SessionStateUpdate {
        SessionStateUpdate::new().agent(update)
    }
}

/// The context of the project's loops: the model and the project.
#[derive(Context)]
pub struct SessionDeps {
    /// The model of the initializer and of the sessions' own steps.
    #[slot(agent)]
    pub model: Arc<dyn LanguageModel>,
    /// The project.
    #[slot(agent)]
    pub env: Arc<ProjectEnv>,
}

impl std::fmt::Debug for SessionDeps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionDeps")
            .field("model", &self.model.model_name())
            .field("env", &self.env)
            .finish()
    }
}

impl AgentContext for SessionDeps {
    fn model(&self) -> &dyn LanguageModel {
        &*self.model
    }
}

/// A sub-agent for the features of one category: its model, tools and
/// system prompt. A session routes a feature of that category to it.
#[derive(Clone)]
pub struct CategoryAgent {
    model: Arc<dyn LanguageModel>,
    tools: ToolSet,
    system: Option<String>,
    limits: Limits,
}

impl std::fmt::Debug for CategoryAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CategoryAgent")
            .field("model", &self.model.model_name())
            .field("tools", &self.tools)
            .finish_non_exhaustive()
    }
}

impl CategoryAgent {
    /// A sub-agent on `model` with `tools`, at most 30 turns a session.
    pub fn new(model: Arc<dyn LanguageModel>, tools: ToolSet) -> Self {
        Self {
            model,
            tools,
            system: None,
            limits: Limits::none().turns(30),
        }
    }

    /// Its system prompt.
    #[must_use]
    pub fn system(mut self, prompt: impl Into<String>) -> Self {
        self.system = Some(prompt.into());
        self
    }

    /// Its limits.
    #[must_use]
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }
}

/// How the session loop is made.
#[derive(Clone, Debug)]
pub(crate) struct LoopConfig {
    pub(crate) tools: ToolSet,
    pub(crate) system: String,
    pub(crate) limits: Limits,
    pub(crate) categories: BTreeMap<String, CategoryAgent>,
}

pub(crate) const WORKER_SYSTEM: &str = "You are a careful software engineer working on one feature of a project, \
in a git repository. Use the tools to read, write and run things in the project directory. \
Work on the one feature you are given only; leave the project's own files under .harness alone. \
When you are done, answer with a short summary of what you did.";

/// The session loop: `orient → smoke → pick → work → verify → record →
/// commit`, the work done by the agent kit's loop (`work` ⇄ `tools`) or by
/// the sub-agent of the feature's category (`work-{category}`).
pub(crate) fn session_loop(
    config: &LoopConfig,
) -> Result<harness::HarnessBuilder<SessionState, SessionDeps>, harness::LoopValidationError> {
    let categories: Vec<String> = config.categories.keys().cloned().collect();
    let worker = AgentLoop::<SessionState, SessionDeps>::new(config.tools.clone())
        .system(config.system.clone())
        .limits(config.limits.clone())
        .step_names("work", "tools")
        .on_answer(Exit::To("verify".into()))
        .on_limit(Exit::To("verify".into()));
    let routed = categories.clone();
    let mut builder = worker
        .add_to(Harness::builder())
        .step("orient")
        .run(orient)
        .route(|s: &SessionState| {
            let open = s
                .briefing
                .as_ref()
                .is_some_and(|b| b.ledger.open_features().next().is_some());
            if open { "open" } else { COMPLETE }
        })
        .on("open")
        .to("smoke")
        .on(COMPLETE)
        .end()
        .step("smoke")
        .run(smoke)
        .next("pick")
        .step("pick")
        .run(pick)
        .route(move |s: &SessionState| {
            let category = s
                .pick
                .as_ref()
                .zip(s.briefing.as_ref())
                .and_then(|(p, b)| b.ledger.feature(&p.feature))
                .map(|f| f.spec.category.clone());
            match category {
                Some(c) if routed.contains(&c) => format!("work:{c}"),
                _ => "work".to_owned(),
            }
        })
        .on("work")
        .to("work");
    for category in &categories {
        builder = builder
            .on(format!("work:{category}"))
            .to(format!("work-{category}"));
    }
    for (category, sub) in &config.categories {
        let mut recipe = AgentLoop::<AgentChat, ModelDeps>::new(sub.tools.clone())
            .system(
                sub.system
                    .clone()
                    .unwrap_or_else(|| WORKER_SYSTEM.to_owned()),
            )
            .limits(sub.limits.clone());
        recipe = recipe.on_limit(Exit::End);
        let child = recipe.builder().build()?;
        let agent = ModelDepsAgent {
            model: Arc::clone(&sub.model),
            summarizer: None,
        };
        builder = builder
            .step(format!("work-{category}"))
            .sub_agent(SubAgent::with_slots(
                &child,
                agent,
                |_: &SessionDeps| <<ModelDeps as Context>::Run as NoSlots>::none(),
                |s: &SessionState| AgentChat::with_task(work_prompt(s)),
                |_: &SessionState, done: SubOutcome<AgentChat>| {
                    SessionStateUpdate::new()
                        .work(Some(done.state.memory.answer().unwrap_or_default()))
                },
            ))
            .next("verify");
    }
    Ok(builder
        .step("verify")
        .run(verify)
        .next("record")
        .step("record")
        .run(record)
        .next("commit")
        .step("commit")
        .run(commit)
        .end()
        .start("orient"))
}

/// Asks `model` for a `T` on behalf of the step (traced like every model
/// call of a step), with one repair turn if the answer does not fit.
pub(crate) async fn ask_typed<T, C>(
    cx: &Cx<C>,
    model: &dyn LanguageModel,
    request: ModelRequest,
) -> Result<T, StepError>
where
    T: DeserializeOwned + JsonSchema,
    C: Context,
{
    match cx.complete_typed::<T>(model, &request).await {
        Ok(answer) => Ok(answer.value),
        Err(TypedAnswerError::Model { source, .. }) => Err(source.into()),
        Err(TypedAnswerError::Mismatch {
            type_name,
            raw,
            mismatch,
            ..
        }) => Err(StepError::new(AnswerError::Mismatch {
            step: cx.step().to_owned(),
            type_name,
            reason: mismatch.to_string(),
            raw,
        })),
        Err(other) => Err(StepError::new(other)),
    }
}

fn briefing(state: &SessionState) -> Result<&Briefing, StepError> {
    state
        .briefing
        .as_ref()
        .ok_or_else(|| StepError::msg("the session has no briefing: `orient` did not run"))
}

fn picked(state: &SessionState) -> Result<&Pick, StepError> {
    state
        .pick
        .as_ref()
        .ok_or_else(|| StepError::msg("the session picked no feature: `pick` did not run"))
}

/// The key of session `n`'s decision in long-term memory.
fn decision_key(n: u32) -> String {
    format!("session-{n}")
}

/// The decisions a session's prompt shows: with long-term memory, the
/// `env.lessons` closest in meaning to the open features (after making the
/// memory's namespace hold exactly `decisions`, the committed record);
/// without, or without an index, the latest.
async fn lessons<'d>(
    env: &ProjectEnv,
    decisions: &'d [Decision],
    ledger: &Ledger,
) -> Result<Vec<&'d Decision>, StepError> {
    let latest = || decisions.iter().rev().take(env.lessons).rev().collect();
    let Some((memory, namespace)) = &env.decision_memory else {
        return Ok(latest());
    };
    sync_decisions(memory, namespace, decisions)
        .await
        .map_err(|e| StepError::msg(format!("the decision memory: {e}")))?;
    let open: Vec<String> = ledger
        .open_features()
        .map(|f| format!("{}: {}", f.spec.id, f.spec.description))
        .collect();
    if open.is_empty() || env.lessons == 0 {
        return Ok(latest());
    }
    let search = Search::under(namespace.clone())
        .text(open.join("\n"))
        .limit(env.lessons);
    let hits = match memory.search(&search).await {
        Ok(hits) => hits,
        Err(MemoryError::Query { .. }) => return Ok(latest()),
        Err(e) => return Err(StepError::msg(format!("the decision memory: {e}"))),
    };
    let mut chosen: Vec<&Decision> = hits
        .iter()
        .filter_map(|hit| {
            decisions
                .iter()
                .find(|d| decision_key(d.session) == hit.item.key)
        })
        .collect();
    // In the order they were made.
    chosen.sort_by_key(|d| d.session);
    Ok(chosen)
}

/// Makes `namespace` hold exactly `decisions`: puts what is missing or
/// different, deletes what is not among them (a reverted session's).
pub(crate) async fn sync_decisions(
    memory: &Memory,
    namespace: &Namespace,
    decisions: &[Decision],
) -> Result<(), MemoryError> {
    let stored = memory
        .search(&Search::under(namespace.clone()).limit(usize::MAX))
        .await?;
    let mut ops = Vec::new();
    for d in decisions {
        let key = decision_key(d.session);
        let value = serde_json::to_value(d).map_err(MemoryError::backend)?;
        let same = stored
            .iter()
            .any(|h| h.item.namespace == *namespace && h.item.key == key && h.item.value == value);
        if !same {
            ops.push(Op::Put {
                namespace: namespace.clone(),
                key,
                value,
                options: PutOptions::default().index(IndexFields::Fields(vec![
                    "feature".into(),
                    "context".into(),
                    "decision".into(),
                    "lesson".into(),
                ])),
            });
        }
    }
    for hit in &stored {
        let kept = hit.item.namespace == *namespace
            && decisions
                .iter()
                .any(|d| decision_key(d.session) == hit.item.key);
        if !kept && hit.item.namespace == *namespace {
            ops.push(Op::Delete {
                namespace: namespace.clone(),
                key: hit.item.key.clone(),
            });
        }
    }
    if !ops.is_empty() {
        memory.batch(ops).await?;
    }
    Ok(())
}

/// Reads the progress log, the ledger at `HEAD`, recent commits and the
/// decision memory, and writes the briefing.
async fn orient(state: Arc<SessionState>, cx: Cx<SessionDeps>) -> StepResult<SessionStateUpdate> {
    let env = &cx.env;
    let head = env.git.head().await?.ok_or_else(|| {
        StepError::msg("the repository has no commit; initialize the project first")
    })?;
    let ledger = env.head_ledger().await?;
    let progress = files::read_progress(env.dir())?;
    let commits = env.git.log(env.recent_commits).await?;
    let decisions = files::read_decisions(env.dir())?;

    let mut prompt = format!(
        "# Project\n{}\n\nYou are session {} of a long-running project: each session picks exactly one feature, works on it, and its verification decides its status.\n",
        ledger.project, state.number
    );
    prompt.push_str("\n# Progress log (latest last)\n");
    if progress.is_empty() {
        prompt.push_str("(empty)\n");
    }
    for entry in progress.iter().rev().take(10).rev() {
        prompt.push_str(&format!(
            "- session {}: {} → {}{}\n",
            entry.session,
            entry.action,
            entry.outcome,
            entry
                .commit
                .as_deref()
                .map(|c| format!(" ({})", files::short(c)))
                .unwrap_or_default()
        ));
    }
    prompt.push_str("\n# Feature ledger\n");
    prompt.push_str(&ledger.table());
    prompt.push_str("\n# Recent commits\n");
    for commit in &commits {
        prompt.push_str(&format!(
            "- {} {}\n",
            files::short(&commit.id),
            commit.subject
        ));
    }
    let lessons = lessons(env, &decisions, &ledger).await?;
    if !lessons.is_empty() {
        prompt.push_str("\n# Lessons from earlier sessions\n");
        for d in lessons {
            prompt.push_str(&format!(
                "- session {} on `{}` ({}, score {:.2}): decided {}; lesson: {}\n",
                d.session, d.feature, d.outcome, d.score, d.decision, d.lesson
            ));
        }
    }
    let ignored = env
        .git
        .ignored()
        .await?
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    Ok(SessionStateUpdate::new().briefing(Some(Briefing {
        head,
        ledger,
        prompt,
        ignored,
    })))
}

/// Runs the smoke check.
async fn smoke(state: Arc<SessionState>, cx: Cx<SessionDeps>) -> StepResult<SessionStateUpdate> {
    let steps = briefing(&state)?.ledger.smoke.clone();
    let env = Arc::clone(&cx.env);
    let outcomes = cx
        .once("smoke", async move {
            run_steps(env.dir(), &steps, env.verify_timeout).await
        })
        .await?;
    let passed = outcomes.iter().all(|o| o.passed);
    Ok(SessionStateUpdate::new().smoke(Some(VerificationRun {
        id: format!("{}-smoke", cx.session_id()),
        feature: "(smoke)".into(),
        session: cx.session_id().to_string(),
        steps: outcomes,
        passed,
    })))
}

/// Asks the model for exactly one open feature, and gives the working
/// agent its task.
async fn pick(state: Arc<SessionState>, cx: Cx<SessionDeps>) -> StepResult<SessionStateUpdate> {
    let briefing = briefing(&state)?;
    let smoke = match &state.smoke {
        Some(run) if run.steps.is_empty() => "The project has no smoke check.".to_owned(),
        Some(run) if run.passed => format!("The smoke check passed:\n{}", run.summary()),
        Some(run) => format!(
            "The smoke check FAILED — the project is broken; consider fixing that first:\n{}",
            run.summary()
        ),
        None => String::new(),
    };
    let open: Vec<&str> = briefing
        .ledger
        .open_features()
        .map(|f| f.spec.id.as_str())
        .collect();
    let request = ModelRequest::builder()
        .system("You plan the next session of a long-running project. Answer with JSON only.")
        .user(format!(
            "{}\n# Smoke check\n{smoke}\n\nPick exactly one feature to work on now, among: {}. Answer with its id and your plan.",
            briefing.prompt,
            open.join(", ")
        ))
        .build();
    let pick: Pick = ask_typed(&cx, &*cx.model, request).await?;
    if !open.contains(&pick.feature.as_str()) {
        return Err(StepError::new(AnswerError::NotOpen {
            feature: pick.feature,
            open: open.iter().map(|id| (*id).to_owned()).collect(),
        }));
    }
    let mut update = SessionStateUpdate::new().pick(Some(pick.clone()));
    let with_pick = SessionState {
        pick: Some(pick),
        ..(*state).clone()
    };
    update = update.agent(AgentMemory::from(
        Transcript::new().pinned_user(work_prompt(&with_pick)),
    ));
    Ok(update)
}

/// The working agent's task: the briefing, the feature, its checks, the plan.
fn work_prompt(state: &SessionState) -> String {
    let (Some(briefing), Some(pick)) = (&state.briefing, &state.pick) else {
        return String::new();
    };
    let Some(feature) = briefing.ledger.feature(&pick.feature) else {
        return String::new();
    };
    let checks: Vec<String> = feature
        .spec
        .verification
        .iter()
        .map(|s: &VerificationStep| format!("- {}: `{}`", s.description, s.command))
        .collect();
    format!(
        "{}\n# Your feature: `{}` ({})\n{}\n\nIt will be verified, after you finish, by running:\n{}\n\nYour plan: {}\n\nWork on this feature only. When done, answer with a short summary.",
        briefing.prompt,
        feature.spec.id,
        feature.spec.category,
        feature.spec.description,
        checks.join("\n"),
        pick.plan
    )
}

/// Runs the feature's verification steps; keeps the run as evidence.
async fn verify(state: Arc<SessionState>, cx: Cx<SessionDeps>) -> StepResult<SessionStateUpdate> {
    let pick = picked(&state)?;
    let feature = briefing(&state)?
        .ledger
        .feature(&pick.feature)
        .ok_or_else(|| {
            StepError::msg(format!("feature `{}` is not in the ledger", pick.feature))
        })?;
    let steps = feature.spec.verification.clone();
    let env = Arc::clone(&cx.env);
    let outcomes = cx
        .once("verify", async move {
            run_steps(env.dir(), &steps, env.verify_timeout).await
        })
        .await?;
    let passed = !outcomes.is_empty() && outcomes.iter().all(|o| o.passed);
    let run = VerificationRun {
        id: format!("{}-verify", cx.session_id()),
        feature: pick.feature.clone(),
        session: cx.session_id().to_string(),
        steps: outcomes,
        passed,
    };
    cx.env.save_run(&run).await?;
    let work = state
        .work
        .clone()
        .or_else(|| state.agent.answer())
        .unwrap_or_default();
    Ok(SessionStateUpdate::new()
        .verification(Some(run))
        .work(Some(work)))
}

/// Asks the model to reflect, then writes the feature's new status (with
/// its evidence) and the decision: from the committed files, so a repeat
/// after a crash writes the same, and an edit a tool made to the ledger is
/// discarded (and reported).
async fn record(state: Arc<SessionState>, cx: Cx<SessionDeps>) -> StepResult<SessionStateUpdate> {
    let briefing = briefing(&state)?;
    let pick = picked(&state)?;
    let run = state
        .verification
        .as_ref()
        .ok_or_else(|| StepError::msg("the session has no verification run"))?;
    let status = if run.passed {
        FeatureStatus::Passing
    } else {
        FeatureStatus::Failing
    };
    let request = ModelRequest::builder()
        .system("You keep the decision memory of a long-running project. Answer with JSON only.")
        .user(format!(
            "Session {} worked on feature `{}` with the plan: {}\n\nWhat the work did: {}\n\nVerification ({}):\n{}\n\nRecord the main decision of this session: its context, the decision, your reasoning, and one lesson for later sessions.",
            state.number,
            pick.feature,
            pick.plan,
            state.work.as_deref().unwrap_or_default(),
            status,
            run.summary()
        ))
        .build();
    let reflection: Reflection = ask_typed(&cx, &*cx.model, request).await?;

    let env = &cx.env;
    let discarded = match env.ledger_on_disk() {
        Err(e) => Some(e.to_string()),
        Ok(disk) => disk
            .check_sealed(&briefing.ledger)
            .err()
            .map(|e| e.to_string())
            .or_else(|| {
                disk.features
                .iter()
                .zip(&briefing.ledger.features)
                .find(|(a, b)| a.status != b.status || a.evidence != b.evidence)
                .map(|(a, _)| {
                    format!(
                        "feature `{}`: its status was changed to `{}` outside the session's record",
                        a.spec.id, a.status
                    )
                })
            }),
    };
    let mut ledger = briefing.ledger.clone();
    ledger.set_status(&pick.feature, status, Some(run))?;
    let decision = Decision {
        session: state.number,
        feature: pick.feature.clone(),
        context: reflection.context,
        decision: reflection.decision,
        reasoning: reflection.reasoning,
        outcome: status.to_string(),
        score: run.score(),
        lesson: reflection.lesson,
    };
    let mut decisions: Vec<Decision> = match env.git.show(&briefing.head, DECISIONS_PATH).await {
        Ok(text) => serde_json::from_str(&text).map_err(|e| {
            StepError::msg(format!(
                "{}:{DECISIONS_PATH} is not valid: {e}",
                briefing.head
            ))
        })?,
        // Only a commit without the file has none; any other failure of
        // git (an index lock, a process that could not start) is an error,
        // retried: read as "none", it would rewrite the file with this
        // session's decision alone, and the decisions before it would be
        // deleted from memory.
        Err(e) if not_in_commit(&e) => Vec::new(),
        Err(e) => {
            return Err(StepError::msg(format!(
                "cannot read {}:{DECISIONS_PATH}: {e}; nothing was written",
                briefing.head
            )));
        }
    };
    decisions.push(decision.clone());
    files::write_json(&files::path(env.dir(), DECISIONS_PATH), &decisions)?;
    files::write_text(&files::path(env.dir(), LEDGER_PATH), &ledger.to_json())?;
    Ok(SessionStateUpdate::new().record(Some(SessionRecord {
        feature: pick.feature.clone(),
        status,
        evidence: run.id.clone(),
        decision,
        discarded_ledger_edit: discarded,
    })))
}

/// Whether `error`, from `git show COMMIT:PATH`, says only that the commit
/// has no such file (git's own words, in English: `Git` runs it with
/// `LC_ALL=C`).
fn not_in_commit(error: &GitError) -> bool {
    matches!(error, GitError::Failed { stderr, .. }
        if stderr.contains("does not exist in") || stderr.contains("exists on disk, but not in"))
}

/// The trailer that names a session in its commit's message.
pub(crate) fn trailer(session: &str) -> String {
    format!("Project-Session: {session}")
}

/// Commits the work with its ledger entry — once: a repeat after a crash
/// finds the commit by its trailer. The session started from a clean
/// working tree, so what changed is its own; each changed file is staged by
/// name, except the agent's uncommitted files and files that were ignored
/// when the session started (which a `.gitignore` edit could have
/// un-ignored: they stay out of every commit). It commits only on the
/// project's branch, on top of the commit the session started from.
async fn commit(state: Arc<SessionState>, cx: Cx<SessionDeps>) -> StepResult<SessionStateUpdate> {
    let record = state
        .record
        .as_ref()
        .ok_or_else(|| StepError::msg("the session recorded nothing"))?;
    let briefing = briefing(&state)?.clone();
    let session = cx.session_id().to_string();
    let message = format!(
        "session {}: {} is {}\n\n{}\n",
        state.number,
        record.feature,
        record.status,
        trailer(&session)
    );
    let env = Arc::clone(&cx.env);
    let id = cx
        .try_once("commit", async move {
            let git = &env.git;
            let head = git.head().await?;
            if let Some(head) = &head
                && git.message(head).await?.contains(&trailer(&session))
            {
                return Ok::<String, super::error::ProjectError>(head.clone());
            }
            if let Some(branch) = env.record().await?.and_then(|r| r.branch) {
                env.check_branch(&branch).await?;
            }
            if head.as_deref() != Some(briefing.head.as_str()) {
                return Err(super::error::ProjectError::NotOwned {
                    project: env.name.clone(),
                    dir: env.dir().to_owned(),
                    reason: format!(
                        "HEAD moved from {} to {} during session {session} (a commit the agent did not make); the session's work is left uncommitted",
                        files::short(&briefing.head),
                        head.as_deref().map_or("nothing", files::short)
                    ),
                });
            }
            let paths: Vec<std::path::PathBuf> = env
                .changes()
                .await?
                .into_iter()
                .filter(|e| !(e.is_untracked() && listed(&e.path, &briefing.ignored)))
                .map(|e| e.path)
                .collect();
            Ok(git.commit_paths(&message, &paths).await?)
        })
        .await?;
    Ok(SessionStateUpdate::new().commit(Some(id)))
}

#[cfg(test)]
mod show_tests {
    #![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

    use super::{GitError, not_in_commit};
    use crate::project::git::Git;

    /// Only "no such file in the commit" reads as no decisions: any other
    /// failure of git is an error, so the decisions are never rewritten
    /// from nothing.
    #[tokio::test]
    async fn only_a_file_missing_from_the_commit_reads_as_none() {
        let dir = tempfile::tempdir().unwrap();
        let git = |args: &[&str]| {
            let status = std::process::Command::new("git")
                .args(args)
                .current_dir(dir.path())
                .env("LC_ALL", "C")
                .status()
                .unwrap();
            assert!(status.success(), "{args:?}");
        };
        git(&["init", "-q"]);
        std::fs::write(dir.path().join("a.txt"), "a").unwrap();
        git(&["add", "a.txt"]);
        git(&[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@e",
            "commit",
            "-q",
            "-m",
            "one",
        ]);
        std::fs::write(dir.path().join("new.txt"), "on disk only").unwrap();
        let repo = Git::new(dir.path());
        for (commit, path, missing) in [
            ("HEAD", "nothing.json", true),
            ("HEAD", "new.txt", true),
            ("no-such-commit", "a.txt", false),
            ("HEAD~5", "a.txt", false),
        ] {
            let error = repo.show(commit, path).await.unwrap_err();
            assert_eq!(not_in_commit(&error), missing, "{commit}:{path}: {error}");
        }
        let spawn = GitError::Spawn {
            args: "show".into(),
            dir: dir.path().into(),
            source: std::io::ErrorKind::NotFound.into(),
        };
        assert!(!not_in_commit(&spawn));
    }
}
