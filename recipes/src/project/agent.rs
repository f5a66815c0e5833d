//! The driver: a project's initializer and sessions, run one after
//! another until every feature passes, with pause, resume, abandon,
//! status, a report, and revert.

use super::env::{ProjectEnv, ProjectRecord, ProjectState, SessionEntry};
use super::error::ProjectError;
use super::files::{self, ProgressEntry};
use super::git::{CommitInfo, Git};
use super::init::{InitState, init_loop};
use super::ledger::{FeatureStatus, Ledger};
use super::session::{
    COMPLETE, CategoryAgent, LoopConfig, SessionDeps, SessionDepsAgent, SessionState,
    WORKER_SYSTEM, session_loop,
};
use super::tools::workspace_tools;
use harness::llm::{LanguageModel, ToolSet};
use harness::memory::{Memory, Namespace};
use harness::session::{SessionConfig, SessionError, SessionPhase, SessionStore};
use harness::{Agent, Harness, Run, SessionId, Signal, StopHandle, create_agent_with};
use harness_kit::Limits;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Builds a [`ProjectAgent`]; see [`ProjectAgent::builder`].
pub struct ProjectAgentBuilder {
    name: String,
    dir: PathBuf,
    store: Arc<dyn SessionStore>,
    model: Arc<dyn LanguageModel>,
    tools: Option<ToolSet>,
    system: String,
    limits: Limits,
    categories: BTreeMap<String, CategoryAgent>,
    session_config: SessionConfig,
    verify_timeout: Duration,
    recent_commits: usize,
    lessons: usize,
    decision_memory: Option<(Memory, Namespace)>,
    init_deadline: Duration,
}

impl std::fmt::Debug for ProjectAgentBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProjectAgentBuilder")
            .field("name", &self.name)
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl ProjectAgentBuilder {
    /// The working agent's tools (default: [`workspace_tools`] in the
    /// directory, 60 s a command).
    #[must_use]
    pub fn tools(mut self, tools: ToolSet) -> Self {
        self.tools = Some(tools);
        self
    }

    /// The working agent's system prompt.
    #[must_use]
    pub fn system(mut self, prompt: impl Into<String>) -> Self {
        self.system = prompt.into();
        self
    }

    /// The working agent's limits per session (default: 30 turns).
    #[must_use]
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Features of `category` are worked on by `agent`, a sub-agent.
    #[must_use]
    pub fn category(mut self, category: impl Into<String>, agent: CategoryAgent) -> Self {
        self.categories.insert(category.into(), agent);
        self
    }

    /// The sessions' store configuration (lease, durability).
    #[must_use]
    pub fn session_config(mut self, config: SessionConfig) -> Self {
        self.session_config = config;
        self
    }

    /// The longest the initializer ([`ProjectAgent::initialize`]: the
    /// model's plan, its repair turns and the first commit) may run, from
    /// when it starts or resumes (default
    /// [`DEFAULT_DEADLINE`](harness::DEFAULT_DEADLINE), an hour). Past it,
    /// the initializer fails with the run's
    /// [`RunError::Deadline`](harness::RunError::Deadline) naming the step,
    /// and goes on where it stood when called again. The sessions' own
    /// bound is [`limits`](Self::limits).
    #[must_use]
    pub fn init_deadline(mut self, deadline: Duration) -> Self {
        self.init_deadline = deadline;
        self
    }

    /// The longest a verification or smoke step may run (default 60 s).
    #[must_use]
    pub fn verify_timeout(mut self, timeout: Duration) -> Self {
        self.verify_timeout = timeout;
        self
    }

    /// How many decisions of earlier sessions each session's prompt shows
    /// (default 10).
    #[must_use]
    pub fn lessons(mut self, decisions: usize) -> Self {
        self.lessons = decisions;
        self
    }

    /// Keeps the decision memory in long-term memory too, under
    /// `namespace` (one item per session, key `session-N`, the
    /// [`Decision`](super::Decision) as its value), so that each session's
    /// lessons are the earlier decisions closest in meaning to the features
    /// still open (with an index on `memory`; the latest ones without), and
    /// so that other agents and projects can search them.
    ///
    /// `.harness/decisions.json`, committed with each session, stays the
    /// record: a session's decision is put into memory once it is
    /// committed, and each session first makes the namespace hold exactly
    /// the decisions of the commit it starts from (so a revert removes the
    /// reverted sessions' decisions from memory too, and a crash between
    /// the commit and the put loses nothing).
    #[must_use]
    pub fn decision_memory(mut self, memory: Memory, namespace: Namespace) -> Self {
        self.decision_memory = Some((memory, namespace));
        self
    }

    /// The project agent.
    ///
    /// # Errors
    ///
    /// [`ProjectError::InvalidName`] for a name that is empty or holds
    /// anything but ASCII letters, digits, `-` and `_`;
    /// [`ProjectError::Loop`] if a loop does not validate (a category name
    /// that makes two steps of one name, say).
    pub fn build(self) -> Result<ProjectAgent, ProjectError> {
        check_name(&self.name)?;
        let git = Git::new(self.dir.clone());
        let env = Arc::new(ProjectEnv {
            name: self.name,
            git,
            store: Arc::clone(&self.store),
            verify_timeout: self.verify_timeout,
            recent_commits: self.recent_commits,
            lessons: self.lessons,
            decision_memory: self.decision_memory,
        });
        let config = LoopConfig {
            tools: self
                .tools
                .unwrap_or_else(|| workspace_tools(self.dir.clone(), Duration::from_secs(60))),
            system: self.system,
            limits: self.limits,
            categories: self.categories,
        };
        let sessions = session_loop(&config)?
            .store(Arc::clone(&self.store))
            .session_config(self.session_config.clone())
            .build()?;
        let init = init_loop()
            .store(Arc::clone(&self.store))
            .session_config(self.session_config.clone())
            .deadline(self.init_deadline)
            .build()?;
        let slots = || SessionDepsAgent {
            model: Arc::clone(&self.model),
            env: Arc::clone(&env),
        };
        Ok(ProjectAgent {
            session: create_agent_with(format!("{}-sessions", env.name), &sessions, slots()),
            init: create_agent_with(format!("{}-init", env.name), &init, slots()),
            sessions,
            lease: self.session_config.lease_ttl,
            env,
            running: Arc::new(Mutex::new(None)),
        })
    }
}

/// How a session ended, as [`ProjectAgent::run_session`] reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionEnd {
    /// It worked on a feature, recorded its status and committed.
    Recorded(SessionEntry),
    /// Every feature passes: nothing was left to do.
    Complete,
    /// It was stopped by [`ProjectAgent::pause`] or
    /// [`abandon`](ProjectAgent::abandon); a paused one goes on where it
    /// stood after [`resume`](ProjectAgent::resume).
    Stopped,
}

/// Where a project stands, as [`ProjectAgent::status`] reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProjectStatus {
    /// The project's name.
    pub name: String,
    /// Active, paused, abandoned or complete.
    pub state: ProjectState,
    /// Each feature's id and status (`in-progress` for the feature of a
    /// session under way), in ledger order.
    pub features: Vec<(String, FeatureStatus)>,
    /// Sessions that ended.
    pub sessions: usize,
    /// The session under way or cut short, if any.
    pub current: Option<u32>,
    /// The commit `HEAD` points at.
    pub head: Option<String>,
}

impl ProjectStatus {
    /// How many features have `status`.
    pub fn count(&self, status: FeatureStatus) -> usize {
        self.features.iter().filter(|(_, s)| *s == status).count()
    }
}

/// The long-running project agent: an initializer that plans the project
/// into a [feature ledger](Ledger), then sessions — each a durable harness
/// loop that works on exactly one feature — until every feature passes.
///
/// See the [module docs](super) for the loop drawn and an example.
pub struct ProjectAgent {
    env: Arc<ProjectEnv>,
    sessions: Harness<SessionState, SessionDeps>,
    session: Agent<SessionState, SessionDeps>,
    init: Agent<InitState, SessionDeps>,
    lease: Duration,
    running: Arc<Mutex<Option<StopHandle>>>,
}

impl std::fmt::Debug for ProjectAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProjectAgent")
            .field("env", &self.env)
            .finish_non_exhaustive()
    }
}

fn now_entry(
    session: u32,
    action: String,
    outcome: String,
    commit: Option<String>,
) -> ProgressEntry {
    ProgressEntry {
        session,
        action,
        outcome,
        commit,
    }
}

impl ProjectAgent {
    /// A project named `name` (it names its sessions in `store`, and is
    /// named in the `Project-Session:` trailer of its commits) in the
    /// working directory `dir`, whose model is `model`.
    ///
    /// The name is one or more ASCII letters, digits, `-` and `_`, as a
    /// feature id is; [`build`](ProjectAgentBuilder::build) refuses any
    /// other with [`ProjectError::InvalidName`]. Projects that share a store
    /// need names of their own.
    pub fn builder(
        name: impl Into<String>,
        dir: impl Into<PathBuf>,
        store: Arc<dyn SessionStore>,
        model: Arc<dyn LanguageModel>,
    ) -> ProjectAgentBuilder {
        ProjectAgentBuilder {
            name: name.into(),
            dir: dir.into(),
            store,
            model,
            tools: None,
            system: WORKER_SYSTEM.to_owned(),
            limits: Limits::none().turns(30),
            categories: BTreeMap::new(),
            session_config: SessionConfig::default(),
            verify_timeout: Duration::from_secs(60),
            recent_commits: 5,
            lessons: 10,
            decision_memory: None,
            init_deadline: harness::DEFAULT_DEADLINE,
        }
    }

    /// The project's environment: its directory, repository and store.
    pub fn env(&self) -> &ProjectEnv {
        &self.env
    }

    /// The session loop drawn as a Mermaid flowchart.
    pub fn session_loop_mermaid(&self) -> String {
        self.sessions.to_mermaid()
    }

    /// The session agent (its sessions are `{name}-session-{n}`), to
    /// inspect a session's history or state.
    pub fn session_agent(&self) -> &Agent<SessionState, SessionDeps> {
        &self.session
    }

    async fn record(&self) -> Result<ProjectRecord, ProjectError> {
        self.env
            .record()
            .await?
            .filter(|r| r.init_commit.is_some())
            .ok_or_else(|| ProjectError::NotInitialized {
                project: self.env.name.clone(),
            })
    }

    /// Runs the initializer: the model plans the project from
    /// `description` into the feature ledger, which is committed (the
    /// first commit of a new repository, or one on the project's own branch
    /// of an existing repository: see the ownership rule in the
    /// [module docs](super)) with an empty decision memory; the progress
    /// log gets its first entry. An initializer cut short goes on where it
    /// stood. Returns the commit.
    ///
    /// # Errors
    ///
    /// [`ProjectError::AlreadyInitialized`];
    /// [`ProjectError::UncommittedChanges`] (changes in an existing
    /// repository, each named), [`ProjectError::NotEmpty`] (files in a
    /// directory that is not a repository) or [`ProjectError::NotOwned`],
    /// with nothing changed; or the initializer's failure (a plan the ledger
    /// refuses, as [`ProjectError::Session`]).
    pub async fn initialize(&self, description: &str) -> Result<String, ProjectError> {
        let record = self.env.record().await?;
        if let Some(commit) = record.as_ref().and_then(|r| r.init_commit.clone()) {
            return Err(ProjectError::AlreadyInitialized {
                project: self.env.name.clone(),
                commit,
            });
        }
        let session = self.env.init_session_id();
        let run = match self.init.session(&session).await {
            Err(SessionError::NoSession(_)) => {
                let (branch, taken) = self.env.take_repository().await?;
                self.init.run_in(
                    session,
                    InitState {
                        description: description.to_owned(),
                        ledger: None,
                        commit: None,
                        branch: Some(branch),
                        taken: Some(taken),
                    },
                )
            }
            Err(e) => return Err(e.into()),
            Ok(stored) => match stored.phase {
                SessionPhase::Completed { .. } => {
                    let state = self.init.state_at(&session, None).await?;
                    return self.initialized(state).await;
                }
                _ => self.recover(&self.init, &session).await?,
            },
        };
        let outcome = run.await.map_err(|e| ProjectError::Session {
            project: self.env.name.clone(),
            number: 0,
            source: Box::new(e),
        })?;
        self.initialized(outcome.state).await
    }

    async fn initialized(&self, state: InitState) -> Result<String, ProjectError> {
        let taken = state.taken.map(|t| format!("; {t}")).unwrap_or_default();
        let branch = state.branch;
        let (Some(commit), Some(ledger)) = (state.commit, state.ledger) else {
            return Err(ProjectError::Record {
                project: self.env.name.clone(),
                reason: "the initializer ended without a commit".into(),
            });
        };
        append_once(
            &self.env,
            now_entry(
                0,
                "initialized the project".into(),
                format!(
                    "{} features planned: {}{taken}",
                    ledger.features.len(),
                    ledger
                        .features
                        .iter()
                        .map(|f| f.spec.id.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                Some(commit.clone()),
            ),
        )?;
        self.env
            .save_record(&ProjectRecord {
                name: self.env.name.clone(),
                state: ProjectState::Active,
                init_commit: Some(commit.clone()),
                sessions: Vec::new(),
                current: None,
                next_number: 1,
                branch,
            })
            .await?;
        Ok(commit)
    }

    /// Takes a session whose process died (waiting out its lease), or one
    /// that was stopped or failed, and goes on with it.
    async fn recover<S: harness::HarnessState>(
        &self,
        agent: &Agent<S, SessionDeps>,
        session: &SessionId,
    ) -> Result<Run<S, SessionDeps>, ProjectError> {
        let deadline = tokio::time::Instant::now() + self.lease * 2 + Duration::from_secs(10);
        loop {
            match agent.recover(session).await {
                Ok(run) => return Ok(run),
                Err(SessionError::InFlight(_)) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    fn refuse(&self, record: &ProjectRecord) -> Result<(), ProjectError> {
        match &record.state {
            ProjectState::Abandoned { reason } => Err(ProjectError::Abandoned {
                project: self.env.name.clone(),
                reason: reason.clone(),
            }),
            ProjectState::Paused => Err(ProjectError::Paused {
                project: self.env.name.clone(),
            }),
            ProjectState::Active | ProjectState::Complete => Ok(()),
        }
    }

    /// Runs one session: the one cut short, if any (recovered where it
    /// stood, in this process), else a new one, which needs a clean working
    /// tree: changes found then are not the agent's, and stop it (nothing
    /// is committed, reset or deleted). Either way the project's branch must
    /// be checked out and hold only the agent's commits since the
    /// initializer's.
    ///
    /// # Errors
    ///
    /// [`ProjectError::Paused`], [`ProjectError::Abandoned`],
    /// [`ProjectError::NotInitialized`];
    /// [`ProjectError::UncommittedChanges`] naming each changed file,
    /// [`ProjectError::WrongBranch`], [`ProjectError::ForeignCommits`] or
    /// [`ProjectError::NotOwned`], with nothing changed; or the session's
    /// failure ([`ProjectError::Session`]): the session stays unfinished,
    /// and the next call recovers it (or [`roll_back`](Self::roll_back)
    /// drops it).
    pub async fn run_session(&self) -> Result<SessionEnd, ProjectError> {
        let mut record = self.record().await?;
        self.refuse(&record)?;
        self.env.check_owned(&record).await?;
        let (number, run) = match record.current.clone() {
            Some((number, id)) => {
                let session = SessionId::from(id);
                match self.session.session(&session).await {
                    Err(SessionError::NoSession(_)) => (
                        number,
                        self.session.run_in(session, SessionState::new(number)),
                    ),
                    Err(e) => return Err(e.into()),
                    Ok(stored) => match stored.phase {
                        SessionPhase::Completed { signal } if signal != Signal::STOPPED => {
                            let state = self.session.state_at(&session, None).await?;
                            return self.finish(&mut record, number, state, &signal).await;
                        }
                        _ => (number, self.recover(&self.session, &session).await?),
                    },
                }
            }
            None => {
                self.env.require_clean().await?;
                let number = record.next_number;
                let id = self.env.session_id(number);
                record.current = Some((number, id.clone()));
                record.next_number += 1;
                self.env.save_record(&record).await?;
                (
                    number,
                    self.session
                        .run_in(SessionId::from(id), SessionState::new(number)),
                )
            }
        };
        *lock(&self.running) = Some(run.stop_handle());
        let settled = run.await;
        *lock(&self.running) = None;
        let outcome = settled.map_err(|e| ProjectError::Session {
            project: self.env.name.clone(),
            number,
            source: Box::new(e),
        })?;
        if outcome.signal == Signal::STOPPED {
            return Ok(SessionEnd::Stopped);
        }
        let mut record = self.record().await?;
        self.finish(&mut record, number, outcome.state, &outcome.signal)
            .await
    }

    /// Records the end of session `number` in the progress log and the
    /// project's record (each once).
    async fn finish(
        &self,
        record: &mut ProjectRecord,
        number: u32,
        state: SessionState,
        signal: &Signal,
    ) -> Result<SessionEnd, ProjectError> {
        let id = self.env.session_id(number);
        let end = if signal.as_str() == COMPLETE {
            append_once(
                &self.env,
                now_entry(
                    number,
                    "oriented".into(),
                    "every feature passes; nothing left to do".into(),
                    self.env.git.head().await?,
                ),
            )?;
            record.state = ProjectState::Complete;
            SessionEnd::Complete
        } else {
            let rec = state.record.as_ref();
            let entry = SessionEntry {
                number,
                session_id: id,
                feature: rec.map(|r| r.feature.clone()),
                status: rec.map(|r| r.status),
                commit: state.commit.clone(),
            };
            let outcome = match (rec, &state.verification) {
                (Some(r), Some(run)) => {
                    let mut text = format!("{} (evidence {})", r.status, r.evidence);
                    if !run.passed {
                        text.push_str(&format!(": {}", run.summary().replace('\n', "; ")));
                    }
                    if let Some(edit) = &r.discarded_ledger_edit {
                        text.push_str(&format!("; discarded an edit of the ledger: {edit}"));
                    }
                    text
                }
                _ => format!("ended with `{signal}` without a record"),
            };
            append_once(
                &self.env,
                now_entry(
                    number,
                    format!(
                        "worked on `{}`",
                        entry.feature.as_deref().unwrap_or("(nothing)")
                    ),
                    outcome,
                    entry.commit.clone(),
                ),
            )?;
            if !record.sessions.iter().any(|s| s.number == number) {
                record.sessions.push(entry.clone());
            }
            // The session's decision, committed, reaches long-term memory
            // at once.
            self.sync_decision_memory().await?;
            if self.env.head_ledger().await?.is_complete() {
                record.state = ProjectState::Complete;
            }
            SessionEnd::Recorded(entry)
        };
        record.current = None;
        self.env.save_record(record).await?;
        Ok(end)
    }

    /// Runs sessions until every feature passes, at most `max_sessions`
    /// of them (a session cut short counts when it is finished), or until
    /// the project is paused or abandoned. Returns where it stands.
    ///
    /// # Errors
    ///
    /// As [`run_session`](Self::run_session), except that a paused project
    /// returns its status.
    pub async fn run_until_complete(
        &self,
        max_sessions: u32,
    ) -> Result<ProjectStatus, ProjectError> {
        for _ in 0..max_sessions {
            let record = self.record().await?;
            match record.state {
                ProjectState::Complete if record.current.is_none() => break,
                ProjectState::Paused => break,
                _ => {}
            }
            match self.run_session().await? {
                SessionEnd::Complete | SessionEnd::Stopped => break,
                SessionEnd::Recorded(_) => {}
            }
        }
        self.status().await
    }

    /// Pauses the project: no new session starts, and a session under way
    /// in this process stops at its next step boundary (it goes on from
    /// there after [`resume`](Self::resume)).
    ///
    /// # Errors
    ///
    /// [`ProjectError::Abandoned`], or the store's error.
    pub async fn pause(&self) -> Result<(), ProjectError> {
        let mut record = self.record().await?;
        if let ProjectState::Abandoned { reason } = record.state {
            return Err(ProjectError::Abandoned {
                project: self.env.name.clone(),
                reason,
            });
        }
        record.state = ProjectState::Paused;
        self.env.save_record(&record).await?;
        if let Some(stop) = lock(&self.running).as_ref() {
            stop.stop();
        }
        Ok(())
    }

    /// Resumes a paused project: the next
    /// [`run_until_complete`](Self::run_until_complete) goes on with the
    /// session the pause stopped, where it stood.
    ///
    /// # Errors
    ///
    /// [`ProjectError::Abandoned`], or the store's error.
    pub async fn resume(&self) -> Result<(), ProjectError> {
        let mut record = self.record().await?;
        if let ProjectState::Abandoned { reason } = record.state {
            return Err(ProjectError::Abandoned {
                project: self.env.name.clone(),
                reason,
            });
        }
        if record.state == ProjectState::Paused {
            record.state = ProjectState::Active;
            self.env.save_record(&record).await?;
        }
        Ok(())
    }

    /// Abandons the project for `reason`: a session under way in this
    /// process stops, and no session runs again.
    ///
    /// # Errors
    ///
    /// The store's error.
    pub async fn abandon(&self, reason: &str) -> Result<(), ProjectError> {
        let mut record = self.record().await?;
        record.state = ProjectState::Abandoned {
            reason: reason.to_owned(),
        };
        self.env.save_record(&record).await?;
        if let Some(stop) = lock(&self.running).as_ref() {
            stop.stop();
        }
        files::append_progress(
            self.env.dir(),
            now_entry(0, "abandoned the project".into(), reason.to_owned(), None),
        )?;
        Ok(())
    }

    /// Where the project stands: its state and each feature's status at
    /// `HEAD` (checked against the sealed ledger and its evidence), the
    /// feature of a session under way shown `in-progress`.
    ///
    /// # Errors
    ///
    /// [`ProjectError::NotInitialized`]; [`ProjectError::NotOwned`] for a
    /// directory without the project's first commit (the project of this
    /// name in the store was initialized in another one); a ledger that
    /// fails its checks, git's or the store's error.
    pub async fn status(&self) -> Result<ProjectStatus, ProjectError> {
        let record = self.record().await?;
        self.env.check_repository(&record).await?;
        let ledger = self.env.head_ledger().await?;
        let mut working = None;
        if let Some((_, id)) = &record.current
            && let Ok(state) = self
                .session
                .state_at(&SessionId::from(id.as_str()), None)
                .await
            && state.commit.is_none()
        {
            working = state.pick.map(|p| p.feature);
        }
        Ok(ProjectStatus {
            name: self.env.name.clone(),
            state: record.state.clone(),
            features: ledger
                .features
                .iter()
                .map(|f| {
                    let status = if working.as_deref() == Some(f.spec.id.as_str()) {
                        FeatureStatus::InProgress
                    } else {
                        f.status
                    };
                    (f.spec.id.clone(), status)
                })
                .collect(),
            sessions: record.sessions.len(),
            current: record.current.map(|(n, _)| n),
            head: self.env.git.head().await?,
        })
    }

    /// The project as a markdown report: its state, the ledger, the
    /// progress log and the decision memory, [redacted](harness::secrets)
    /// of the process's secrets.
    ///
    /// # Errors
    ///
    /// As [`status`](Self::status); a progress log or decision memory that
    /// cannot be read.
    pub async fn report_markdown(&self) -> Result<String, ProjectError> {
        let status = self.status().await?;
        let ledger = self.env.head_ledger().await?;
        let state = match &status.state {
            ProjectState::Active => "active".to_owned(),
            ProjectState::Paused => "paused".to_owned(),
            ProjectState::Abandoned { reason } => format!("abandoned: {reason}"),
            ProjectState::Complete => "complete".to_owned(),
        };
        let mut text = format!(
            "# Project `{}`\n\n{}\n\n**State:** {state}. **Features passing:** {} of {}. **Sessions:** {}.\n\n## Feature ledger\n\n",
            status.name,
            ledger.project,
            status.count(FeatureStatus::Passing),
            status.features.len(),
            status.sessions
        );
        text.push_str(&ledger.table());
        text.push_str(
            "\n## Progress log\n\n| session | action | outcome | commit |\n|---|---|---|---|\n",
        );
        for e in files::read_progress(self.env.dir())? {
            text.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                e.session,
                e.action.replace('|', "\\|"),
                e.outcome.replace('|', "\\|").replace('\n', " "),
                e.commit
                    .as_deref()
                    .map(|c| format!("`{}`", files::short(c)))
                    .unwrap_or_default()
            ));
        }
        let decisions = files::read_decisions(self.env.dir())?;
        if !decisions.is_empty() {
            text.push_str("\n## Decisions\n\n");
            for d in decisions {
                text.push_str(&format!(
                    "- **session {} — `{}`** ({}, score {:.2}): {} *Because* {} *Lesson:* {}\n",
                    d.session, d.feature, d.outcome, d.score, d.decision, d.reasoning, d.lesson
                ));
            }
        }
        // The files are written redacted; a log written before that, or a
        // secret registered since, is redacted here.
        harness::secrets::redact_string(&mut text);
        Ok(text)
    }

    /// Drops the session cut short, if any (a failed or paused one), and
    /// discards its uncommitted work — only its own: see
    /// [`revert_to`](Self::revert_to), here to `HEAD`. What it discarded is
    /// returned and listed in the progress log.
    ///
    /// # Errors
    ///
    /// As [`revert_to`](Self::revert_to).
    pub async fn roll_back(&self) -> Result<Rollback, ProjectError> {
        self.revert_to("HEAD").await
    }

    /// Reverts the project to `commit` (a commit between the initializer's
    /// and `HEAD`): a session cut short is dropped and its uncommitted work
    /// discarded, then the branch goes back to `commit` (`git reset
    /// --keep`), and the progress log lists every file discarded and every
    /// commit moved back past. The ledger at `commit` is checked first.
    ///
    /// Only the agent's own work is rolled back: the branch must hold only
    /// the agent's commits since the initializer's (a user's commit stops
    /// it), uncommitted changes with no session under way are the user's
    /// and stop it, and a session's rollback puts back the tracked files it
    /// changed and removes the files it created, keeping every file that
    /// was there (ignored) when it started. Ignored files are never removed.
    ///
    /// # Errors
    ///
    /// [`ProjectError::NotInHistory`] for a commit outside that range,
    /// [`ProjectError::UncommittedChanges`], [`ProjectError::WrongBranch`],
    /// [`ProjectError::ForeignCommits`] (nothing changes), or the ledger's,
    /// git's or the store's error.
    pub async fn revert_to(&self, commit: &str) -> Result<Rollback, ProjectError> {
        let mut record = self.record().await?;
        self.env.check_owned(&record).await?;
        let refuse = |reason: &str| ProjectError::NotInHistory {
            project: self.env.name.clone(),
            commit: commit.to_owned(),
            reason: reason.to_owned(),
        };
        let git = &self.env.git;
        let target = git
            .resolve(commit)
            .await
            .map_err(|_| refuse("it is not a commit of the repository"))?;
        let init = record.init_commit.clone().unwrap_or_default();
        if !git.is_ancestor(&init, &target).await? {
            return Err(refuse("it is not a descendant of the initializer's commit"));
        }
        let head = git.head().await?.unwrap_or_default();
        if !git.is_ancestor(&target, &head).await? {
            return Err(refuse("it is not an ancestor of HEAD"));
        }
        let ledger = self.env.ledger_at(&target).await?;
        self.env.check(&ledger).await?;

        // The session cut short, if it got as far as its briefing (before
        // that it did no work): its snapshot of the ignored files says what
        // was there before it.
        let mut session = None;
        if let Some((number, id)) = &record.current
            && let Ok(state) = self
                .session
                .state_at(&SessionId::from(id.as_str()), None)
                .await
            && let Some(briefing) = state.briefing
        {
            session = Some((*number, briefing.ignored));
        }
        let mut rollback = Rollback {
            session: session.as_ref().map(|(n, _)| *n),
            ..Rollback::default()
        };
        match &session {
            None => self.env.require_clean().await?,
            Some((_, ignored)) => {
                git.reset_index().await?;
                for change in self.env.changes().await? {
                    let keep = change.is_untracked()
                        && (super::session::listed(&change.path, ignored)
                            || !is_file(&self.env.dir().join(&change.path)));
                    if keep {
                        rollback.kept.push(change.path);
                    } else if change.is_untracked() {
                        rollback.removed.push(change.path);
                    } else {
                        rollback.restored.push(change.path);
                    }
                }
                // What the session created goes first: a link it put where
                // a tracked directory was (`.harness`, `src`) is removed as
                // a link before git puts the directory back in its place.
                for path in &rollback.removed {
                    let file = self.env.dir().join(path);
                    match std::fs::remove_file(&file) {
                        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                            return Err(files::FileError::Remove {
                                path: file,
                                source: e,
                            }
                            .into());
                        }
                        _ => {}
                    }
                }
                git.restore(&rollback.restored).await?;
            }
        }
        rollback.commits = git
            .commits_between(&target, &head)
            .await?
            .iter()
            .map(super::git::CommitDetail::info)
            .collect();
        git.reset_keep(&target).await?;
        record.current = None;
        if record.state == ProjectState::Complete && !ledger.is_complete() {
            record.state = ProjectState::Active;
        }
        self.env.save_record(&record).await?;
        if let Some(number) = rollback.session {
            files::append_progress(
                self.env.dir(),
                now_entry(
                    number,
                    "rolled back the session's uncommitted work".into(),
                    rollback.files_summary(),
                    Some(head.clone()),
                ),
            )?;
        }
        if target != head {
            files::append_progress(
                self.env.dir(),
                now_entry(
                    0,
                    format!("reverted to {}", files::short(&target)),
                    format!(
                        "{} of {} features passing; moved back past the agent's commits: {}",
                        ledger
                            .features
                            .iter()
                            .filter(|f| f.status == FeatureStatus::Passing)
                            .count(),
                        ledger.features.len(),
                        rollback
                            .commits
                            .iter()
                            .map(|c| format!("{} {}", files::short(&c.id), c.subject))
                            .collect::<Vec<_>>()
                            .join("; ")
                    ),
                    Some(target),
                ),
            )?;
        }
        self.sync_decision_memory().await?;
        Ok(rollback)
    }

    /// Makes the long-term memory of [`decision_memory`](ProjectAgentBuilder::decision_memory)
    /// hold exactly the decisions committed in the working tree (nothing
    /// without one). Sessions and [`revert_to`](Self::revert_to) do it
    /// themselves; call it after changing the repository by hand.
    pub async fn sync_decision_memory(&self) -> Result<(), ProjectError> {
        let Some((memory, namespace)) = &self.env.decision_memory else {
            return Ok(());
        };
        let decisions = files::read_decisions(self.env.dir())?;
        super::session::sync_decisions(memory, namespace, &decisions)
            .await
            .map_err(|source| ProjectError::Memory {
                project: self.env.name().to_owned(),
                source,
            })
    }
}

/// Refuses a project name that could not name its sessions and trailers:
/// empty, or with anything but ASCII letters, digits, `-` and `_` (a
/// newline would split the trailer; a space, `/` or `:` would not survive
/// as a session id or trailer value).
fn check_name(name: &str) -> Result<(), ProjectError> {
    match crate::ids::problem(name) {
        None => Ok(()),
        Some(reason) => Err(ProjectError::InvalidName {
            name: name.to_owned(),
            reason,
        }),
    }
}

fn is_file(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| !m.is_dir())
}

/// What [`ProjectAgent::revert_to`] or [`roll_back`](ProjectAgent::roll_back)
/// discarded: the agent's own work only, each file and commit named.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Rollback {
    /// The session cut short whose uncommitted work was discarded, if any.
    pub session: Option<u32>,
    /// Tracked files the session changed, put back as `HEAD` held them.
    pub restored: Vec<PathBuf>,
    /// Files the session created, removed.
    pub removed: Vec<PathBuf>,
    /// Untracked files left in place: ignored when the session started
    /// (so not its own), or directories.
    pub kept: Vec<PathBuf>,
    /// The agent's commits the branch moved back past, newest first.
    pub commits: Vec<CommitInfo>,
}

impl Rollback {
    /// The files, as the progress log lists them.
    pub fn files_summary(&self) -> String {
        let list = |paths: &[PathBuf]| {
            if paths.is_empty() {
                "none".to_owned()
            } else {
                paths
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        };
        let mut text = format!(
            "restored: {}; removed: {}",
            list(&self.restored),
            list(&self.removed)
        );
        if !self.kept.is_empty() {
            text.push_str(&format!("; kept (not the session's): {}", list(&self.kept)));
        }
        text
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// Appends `entry` unless the log already has it (a repeat after a crash).
fn append_once(env: &ProjectEnv, entry: ProgressEntry) -> Result<(), ProjectError> {
    let log = files::read_progress(env.dir())?;
    if log
        .iter()
        .any(|e| e.session == entry.session && e.commit == entry.commit && e.action == entry.action)
    {
        return Ok(());
    }
    files::append_progress(env.dir(), entry)?;
    Ok(())
}

/// The ledger of the project in `dir` as its working tree holds it (not
/// checked); for tests and tools.
pub fn read_ledger(dir: impl Into<PathBuf>) -> Result<Ledger, ProjectError> {
    let dir: PathBuf = dir.into();
    let path = files::path(&dir, files::LEDGER_PATH);
    let text = files::read_ledger_file(&path)?;
    Ok(Ledger::parse(&text, &path.display().to_string())?)
}
