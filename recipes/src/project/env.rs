//! What the project's loops work with: the working directory and its git
//! repository, the session store, and the project's record in it.

use super::error::ProjectError;
use super::files::{self, LEDGER_PATH, PROGRESS_PATH};
use super::git::{AGENT_EMAIL, AGENT_NAME, CommitDetail, Git, StatusEntry};
use super::ledger::{FeatureStatus, Ledger};
use super::verify::VerificationRun;
use harness::SessionId;
use harness::memory::{Memory, Namespace};
use harness::session::{SessionStore, load_value, save_value};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The branch the agent creates, works and commits on in a repository it
/// did not create (see the [module docs](super)).
pub const PROJECT_BRANCH: &str = "harness/project";

const RECORD_OWNER: &str = "harness-recipes.project";
const EVIDENCE_OWNER: &str = "harness-recipes.evidence";

/// Where the project stands as a whole.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum ProjectState {
    /// Sessions may run.
    Active,
    /// Paused by [`ProjectAgent::pause`](super::ProjectAgent::pause) until
    /// [`resume`](super::ProjectAgent::resume).
    Paused,
    /// Given up, for good.
    Abandoned {
        /// Why.
        reason: String,
    },
    /// Every feature passes.
    Complete,
}

/// A session that ended, as the project remembers it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionEntry {
    /// Its number, from 1.
    pub number: u32,
    /// Its session in the store.
    pub session_id: String,
    /// The feature it worked on, if it picked one.
    pub feature: Option<String>,
    /// The status it recorded for it.
    pub status: Option<FeatureStatus>,
    /// The commit it made.
    pub commit: Option<String>,
}

/// The project's record in the session store: its state, its sealed
/// ledger's commit, its sessions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ProjectRecord {
    /// The project's name.
    pub name: String,
    /// Where it stands.
    pub state: ProjectState,
    /// The initializer's commit, whose ledger seals the features.
    pub init_commit: Option<String>,
    /// The sessions that ended, in order.
    pub sessions: Vec<SessionEntry>,
    /// The session under way (or cut short), if any: its number and id.
    pub current: Option<(u32, String)>,
    /// The next session's number.
    pub next_number: u32,
    /// The branch the agent works on: `main` in a repository it made,
    /// [`PROJECT_BRANCH`] in one it did not (`None` in a record written
    /// before branches were recorded: not checked).
    #[serde(default)]
    pub branch: Option<String>,
}

/// What the project's loops work with; an agent slot of their context.
pub struct ProjectEnv {
    pub(crate) name: String,
    pub(crate) git: Git,
    pub(crate) store: Arc<dyn SessionStore>,
    pub(crate) verify_timeout: Duration,
    pub(crate) recent_commits: usize,
    pub(crate) lessons: usize,
    /// Long-term memory the decisions are kept in too, and where.
    pub(crate) decision_memory: Option<(Memory, Namespace)>,
}

impl std::fmt::Debug for ProjectEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProjectEnv")
            .field("name", &self.name)
            .field("dir", &self.git.dir())
            .finish_non_exhaustive()
    }
}

impl ProjectEnv {
    /// The working directory.
    pub fn dir(&self) -> &Path {
        self.git.dir()
    }

    /// The project's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn session_id(&self, number: u32) -> String {
        format!("{}-session-{number}", self.name)
    }

    pub(crate) fn init_session_id(&self) -> SessionId {
        SessionId::from(format!("{}-init", self.name))
    }

    fn record_id(&self) -> SessionId {
        SessionId::from(format!("{}-project", self.name))
    }

    /// The project's record; `None` before it is initialized.
    pub async fn record(&self) -> Result<Option<ProjectRecord>, ProjectError> {
        let Some(value) = load_value(&*self.store, RECORD_OWNER, &self.record_id()).await? else {
            return Ok(None);
        };
        serde_json::from_value(value)
            .map(Some)
            .map_err(|e| ProjectError::Record {
                project: self.name.clone(),
                reason: e.to_string(),
            })
    }

    pub(crate) async fn save_record(&self, record: &ProjectRecord) -> Result<(), ProjectError> {
        let value = serde_json::to_value(record).map_err(|e| ProjectError::Record {
            project: self.name.clone(),
            reason: e.to_string(),
        })?;
        save_value(&*self.store, RECORD_OWNER, &self.record_id(), value).await?;
        Ok(())
    }

    fn evidence_id(&self, run: &str) -> SessionId {
        SessionId::from(format!("{}-evidence-{run}", self.name))
    }

    /// Keeps `run` in the store, where the ledger's evidence is looked up;
    /// [redacted](harness::secrets) of the process's secrets first, as the
    /// engine redacts what it commits (`save_value` does not).
    pub(crate) async fn save_run(&self, run: &VerificationRun) -> Result<(), ProjectError> {
        let mut value = serde_json::to_value(run).map_err(|e| ProjectError::Record {
            project: self.name.clone(),
            reason: e.to_string(),
        })?;
        harness::secrets::redact_json(&mut value);
        save_value(
            &*self.store,
            EVIDENCE_OWNER,
            &self.evidence_id(&run.id),
            value,
        )
        .await?;
        Ok(())
    }

    /// The verification run `id`, if the project has one.
    pub async fn run(&self, id: &str) -> Result<Option<VerificationRun>, ProjectError> {
        let Some(value) = load_value(&*self.store, EVIDENCE_OWNER, &self.evidence_id(id)).await?
        else {
            return Ok(None);
        };
        serde_json::from_value(value)
            .map(Some)
            .map_err(|e| ProjectError::Record {
                project: self.name.clone(),
                reason: format!("verification run {id}: {e}"),
            })
    }

    /// The ledger as committed at `commit`.
    pub async fn ledger_at(&self, commit: &str) -> Result<Ledger, ProjectError> {
        let text = self.git.show(commit, LEDGER_PATH).await?;
        Ok(Ledger::parse(&text, &format!("{commit}:{LEDGER_PATH}"))?)
    }

    /// The ledger as the working directory holds it now.
    pub fn ledger_on_disk(&self) -> Result<Ledger, ProjectError> {
        let path = files::path(self.dir(), LEDGER_PATH);
        let text = files::read_ledger_file(&path)?;
        Ok(Ledger::parse(&text, &path.display().to_string())?)
    }

    /// The initializer's ledger, which seals the features.
    pub async fn sealed(&self) -> Result<Ledger, ProjectError> {
        let record = self.record().await?;
        let Some(init) = record.and_then(|r| r.init_commit) else {
            return Err(ProjectError::NotInitialized {
                project: self.name.clone(),
            });
        };
        self.ledger_at(&init).await
    }

    /// Checks `ledger` against the sealed one and its statuses against
    /// their verification runs.
    pub async fn check(&self, ledger: &Ledger) -> Result<(), ProjectError> {
        ledger.check_sealed(&self.sealed().await?)?;
        let mut runs = BTreeMap::new();
        for id in ledger.evidence_ids() {
            if let Some(run) = self.run(id).await? {
                runs.insert(id.to_owned(), run);
            }
        }
        ledger.check_evidence(&runs)?;
        Ok(())
    }

    /// Whether `path` is a file the agent keeps beside the project without
    /// committing it (the progress log, a session store under `.harness/`).
    pub(crate) fn agent_uncommitted(path: &Path) -> bool {
        path == Path::new(PROGRESS_PATH) || path.starts_with(".harness/store")
    }

    /// The changes in the working tree that are not the agent's own
    /// uncommitted files.
    pub(crate) async fn changes(&self) -> Result<Vec<StatusEntry>, ProjectError> {
        Ok(self
            .git
            .status()
            .await?
            .into_iter()
            .filter(|e| !Self::agent_uncommitted(&e.path))
            .collect())
    }

    /// Refuses a working tree with changes: called where every change is
    /// the user's (before the initializer, before a new session).
    pub(crate) async fn require_clean(&self) -> Result<(), ProjectError> {
        let changes = self.changes().await?;
        if changes.is_empty() {
            return Ok(());
        }
        Err(ProjectError::UncommittedChanges {
            project: self.name.clone(),
            dir: self.dir().to_owned(),
            paths: changes.iter().map(ToString::to_string).collect(),
        })
    }

    /// Takes the repository for the initializer, by the ownership rule of
    /// the [module docs](super): an empty (or missing) directory becomes a
    /// new repository (branch `main`); a repository without commits is taken as
    /// it is; a repository with commits and a clean working tree gets
    /// [`PROJECT_BRANCH`] at its `HEAD`, checked out. Anything else is
    /// refused and nothing is changed. Returns the branch and a sentence for
    /// the progress log.
    pub(crate) async fn take_repository(&self) -> Result<(String, String), ProjectError> {
        let git = &self.git;
        let dir = self.dir();
        if !git.is_repository() {
            std::fs::create_dir_all(dir).map_err(|source| files::FileError::Read {
                path: dir.to_owned(),
                source,
            })?;
            let mut held: Vec<String> = std::fs::read_dir(dir)
                .map_err(|source| files::FileError::Read {
                    path: dir.to_owned(),
                    source,
                })?
                .filter_map(Result::ok)
                .map(|e| e.file_name())
                .filter(|name| name != ".harness")
                .map(|name| name.to_string_lossy().into_owned())
                .collect();
            if !held.is_empty() {
                held.sort();
                return Err(ProjectError::NotEmpty {
                    project: self.name.clone(),
                    dir: dir.to_owned(),
                    paths: held,
                });
            }
            git.init().await?;
            return Ok((
                "main".to_owned(),
                "made a new git repository (branch `main`)".to_owned(),
            ));
        }
        let refuse = |reason: String| ProjectError::NotOwned {
            project: self.name.clone(),
            dir: dir.to_owned(),
            reason,
        };
        let Some(head) = git.head().await? else {
            if git.has_refs().await? {
                return Err(refuse(
                    "HEAD is on a branch without commits while the repository has others; check out a branch with commits first".to_owned(),
                ));
            }
            self.require_clean().await?;
            let branch = git.branch().await?.unwrap_or_else(|| "main".to_owned());
            return Ok((
                branch.clone(),
                format!(
                    "took the repository without commits; its first commit starts branch `{branch}`"
                ),
            ));
        };
        self.require_clean().await?;
        let current = git.branch().await?;
        if current.as_deref() == Some(PROJECT_BRANCH) {
            return Ok((
                PROJECT_BRANCH.to_owned(),
                format!(
                    "works on branch `{PROJECT_BRANCH}`, checked out at {}",
                    files::short(&head)
                ),
            ));
        }
        if git.branch_exists(PROJECT_BRANCH).await? {
            return Err(refuse(format!(
                "a branch `{PROJECT_BRANCH}` exists already; check it out to let the agent go on with it, or rename it (`git branch -m {PROJECT_BRANCH} other`), then run again"
            )));
        }
        git.create_branch(PROJECT_BRANCH).await?;
        let back = current.map_or_else(
            || format!("`git switch --detach {}`", files::short(&head)),
            |b| format!("`git switch {b}`"),
        );
        Ok((
            PROJECT_BRANCH.to_owned(),
            format!(
                "created branch `{PROJECT_BRANCH}` at {} and switched to it; the agent commits only there, your branches are untouched ({back} goes back)",
                files::short(&head)
            ),
        ))
    }

    /// Whether the agent made `commit`: its identity, and a trailer of this
    /// project's initializer or sessions, exactly: `{name}-init` or
    /// `{name}-session-{number}` (not `{name}-session-x-session-1`, a
    /// session of the project `{name}-session-x`).
    pub(crate) fn is_agent_commit(&self, commit: &CommitDetail) -> bool {
        let init = super::session::trailer(&format!("{}-init", self.name));
        let session = super::session::trailer(&format!("{}-session-", self.name));
        let ours = |line: &str| {
            line == init
                || line.strip_prefix(&session).is_some_and(|number| {
                    !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit())
                })
        };
        commit.author == AGENT_NAME
            && commit.email == AGENT_EMAIL
            && commit.message.lines().any(|l| ours(l.trim()))
    }

    /// Refuses unless the project's branch is checked out.
    pub(crate) async fn check_branch(&self, expected: &str) -> Result<(), ProjectError> {
        let found = self.git.branch().await?;
        if found.as_deref() == Some(expected) {
            return Ok(());
        }
        Err(ProjectError::WrongBranch {
            project: self.name.clone(),
            dir: self.dir().to_owned(),
            expected: expected.to_owned(),
            found,
        })
    }

    /// Refuses a directory that does not hold the initializer's commit at
    /// all (not a git repository, or no such commit): the project of this
    /// name in the store was initialized in another directory, or its
    /// repository was removed. Said so, rather than as git's error or a
    /// wrong branch.
    pub(crate) async fn check_repository(
        &self,
        record: &ProjectRecord,
    ) -> Result<(), ProjectError> {
        let Some(init) = &record.init_commit else {
            return Ok(());
        };
        let missing = if !self.git.is_repository() {
            "it is not a git repository"
        } else if self.git.resolve(init).await.is_err() {
            "its repository has no such commit"
        } else {
            return Ok(());
        };
        Err(ProjectError::NotOwned {
            project: self.name.clone(),
            dir: self.dir().to_owned(),
            reason: format!(
                "{missing}, while project `{}` in this store was initialized with commit {}: it was initialized in another directory, or its repository was removed; projects that share a store need names of their own",
                self.name,
                files::short(init)
            ),
        })
    }

    /// Refuses unless the repository is still the project's: it holds the
    /// initializer's commit, its branch is checked out and holds that
    /// commit, and every commit since is the agent's.
    pub(crate) async fn check_owned(&self, record: &ProjectRecord) -> Result<(), ProjectError> {
        let Some(init) = &record.init_commit else {
            return Ok(());
        };
        self.check_repository(record).await?;
        if let Some(branch) = &record.branch {
            self.check_branch(branch).await?;
        }
        let branch = record.branch.clone().unwrap_or_else(|| "HEAD".to_owned());
        let refuse = |reason: String| ProjectError::NotOwned {
            project: self.name.clone(),
            dir: self.dir().to_owned(),
            reason,
        };
        let Some(head) = self.git.head().await? else {
            return Err(refuse(format!(
                "branch `{branch}` has no commit; the project's first commit {} is gone",
                files::short(init)
            )));
        };
        if !self.git.is_ancestor(init, &head).await? {
            return Err(refuse(format!(
                "branch `{branch}` no longer holds the project's first commit {}; check out the branch that does, or abandon the project",
                files::short(init)
            )));
        }
        let commits = self.git.commits_between(init, &head).await?;
        let Some(oldest_foreign) = commits.iter().rposition(|c| !self.is_agent_commit(c)) else {
            return Ok(());
        };
        let last_own = commits[oldest_foreign..]
            .iter()
            .find(|c| self.is_agent_commit(c))
            .map_or_else(|| init.clone(), |c| c.id.clone());
        Err(ProjectError::ForeignCommits {
            project: self.name.clone(),
            branch,
            foreign: commits
                .iter()
                .filter(|c| !self.is_agent_commit(c))
                .map(CommitDetail::info)
                .collect(),
            last_own: Some(last_own),
        })
    }

    /// The ledger at `HEAD`, checked.
    pub async fn head_ledger(&self) -> Result<Ledger, ProjectError> {
        let ledger = self.ledger_at("HEAD").await?;
        self.check(&ledger).await?;
        Ok(ledger)
    }
}
