//! What the project's loops work with: the working directory and its git
//! repository, the session store, and the project's record in it.

use super::error::ProjectError;
use super::files::{self, LEDGER_PATH};
use super::git::Git;
use super::ledger::{FeatureStatus, Ledger};
use super::verify::VerificationRun;
use harness::SessionId;
use harness::session::{SessionStore, load_value, save_value};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

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
}

/// What the project's loops work with; an agent slot of their context.
pub struct ProjectEnv {
    pub(crate) name: String,
    pub(crate) git: Git,
    pub(crate) store: Arc<dyn SessionStore>,
    pub(crate) verify_timeout: Duration,
    pub(crate) recent_commits: usize,
    pub(crate) lessons: usize,
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

    /// Keeps `run` in the store, where the ledger's evidence is looked up.
    pub(crate) async fn save_run(&self, run: &VerificationRun) -> Result<(), ProjectError> {
        let value = serde_json::to_value(run).map_err(|e| ProjectError::Record {
            project: self.name.clone(),
            reason: e.to_string(),
        })?;
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
        let text = std::fs::read_to_string(&path).map_err(|source| files::FileError::Read {
            path: path.clone(),
            source,
        })?;
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

    /// The ledger at `HEAD`, checked.
    pub async fn head_ledger(&self) -> Result<Ledger, ProjectError> {
        let ledger = self.ledger_at("HEAD").await?;
        self.check(&ledger).await?;
        Ok(ledger)
    }
}
