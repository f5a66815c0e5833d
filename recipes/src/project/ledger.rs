//! The feature ledger: what the project must do, feature by feature, and
//! where each stands. Its descriptions and verification steps are sealed
//! when the initializer commits it; afterwards only statuses change, and a
//! feature becomes passing only with the verification run that proves it.

use super::verify::{VerificationRun, VerificationStep};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Where a feature stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum FeatureStatus {
    /// No session has worked on it.
    NotStarted,
    /// A session is working on it (shown while the session runs; the
    /// committed ledger records where sessions left it).
    InProgress,
    /// Its verification run passed; the ledger names that run.
    Passing,
    /// A session worked on it and its verification failed.
    Failing,
    /// It cannot be done now (set by a person, or by a session's record).
    Blocked,
}

impl FeatureStatus {
    /// The status as the ledger writes it (`not-started`, `passing`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotStarted => "not-started",
            Self::InProgress => "in-progress",
            Self::Passing => "passing",
            Self::Failing => "failing",
            Self::Blocked => "blocked",
        }
    }
}

impl std::fmt::Display for FeatureStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A feature as the initializer plans it: everything but its status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FeatureSpec {
    /// A short id: letters, digits, `-` and `_` (`count-words`).
    pub id: String,
    /// Its category; a session routes the work to the sub-agent registered
    /// for it, if any (`cli`, `tests`, `docs`).
    pub category: String,
    /// Lower is first.
    pub priority: u32,
    /// What the feature does, for the agent and for people.
    pub description: String,
    /// How to check it: at least one step.
    pub verification: Vec<VerificationStep>,
}

/// What the initializer's model answers: the project's features and the
/// smoke check every session runs first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ProjectPlan {
    /// The features.
    pub features: Vec<FeatureSpec>,
    /// Quick checks that the project still works at all (may be empty).
    #[serde(default)]
    pub smoke: Vec<VerificationStep>,
}

/// One line of the ledger.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Feature {
    /// The feature as planned; sealed.
    #[serde(flatten)]
    pub spec: FeatureSpec,
    /// Where it stands.
    pub status: FeatureStatus,
    /// The id of the verification run behind its status (required for
    /// `passing`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<String>,
}

/// The feature ledger, as `.harness/ledger.json` holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Ledger {
    /// The project's description; sealed.
    pub project: String,
    /// The smoke check; sealed.
    #[serde(default)]
    pub smoke: Vec<VerificationStep>,
    /// The features, in priority order; their specs are sealed.
    pub features: Vec<Feature>,
}

/// A ledger that cannot be used, or a change it refuses. Each names the
/// feature and what is wrong.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum LedgerError {
    /// The ledger file is not a ledger.
    #[error("the ledger {origin} is not valid JSON of a ledger: {reason}")]
    Malformed {
        /// Where it was read from (a path, or `commit:path`).
        origin: String,
        /// The parser's message, with line and column.
        reason: String,
    },
    /// The plan has no features.
    #[error("the plan has no features; a project needs at least one")]
    EmptyPlan,
    /// Two features share an id.
    #[error("the plan has two features with the id `{feature}`; ids must be unique")]
    DuplicateFeature {
        /// The id.
        feature: String,
    },
    /// A feature id that is empty or has other characters than letters,
    /// digits, `-` and `_`.
    #[error("the feature id `{feature}` is not valid: use letters, digits, `-` and `_`")]
    BadId {
        /// The id.
        feature: String,
    },
    /// A feature without verification steps: nothing could prove it.
    #[error("feature `{feature}` has no verification steps; it could never be proven passing")]
    NoVerification {
        /// The feature.
        feature: String,
    },
    /// A sealed field of a feature differs from the initializer's ledger.
    #[error(
        "feature `{feature}`: its `{field}` was edited after initialization; only statuses change"
    )]
    Edited {
        /// The feature.
        feature: String,
        /// The field (`description`, `verification`, `category`, `priority`).
        field: &'static str,
    },
    /// The project's description or smoke check differs from the
    /// initializer's ledger.
    #[error("the ledger's `{field}` was edited after initialization; only statuses change")]
    ProjectEdited {
        /// `project` or `smoke`.
        field: &'static str,
    },
    /// A feature the initializer did not plan.
    #[error("feature `{feature}` was added after initialization; the features are sealed")]
    Added {
        /// The feature.
        feature: String,
    },
    /// A planned feature is missing.
    #[error("feature `{feature}` was removed after initialization; the features are sealed")]
    Removed {
        /// The feature.
        feature: String,
    },
    /// No feature has this id.
    #[error("there is no feature `{feature}` in the ledger")]
    UnknownFeature {
        /// The id asked for.
        feature: String,
    },
    /// A passing status without a verification run.
    #[error(
        "feature `{feature}` is passing without evidence: name the verification run that passed"
    )]
    NoEvidence {
        /// The feature.
        feature: String,
    },
    /// The verification run a status names does not exist.
    #[error("feature `{feature}` refers to verification run `{run}`, which does not exist")]
    EvidenceMissing {
        /// The feature.
        feature: String,
        /// The run id.
        run: String,
    },
    /// A passing status whose verification run failed.
    #[error("feature `{feature}` cannot be passing: verification run `{run}` failed")]
    EvidenceFailed {
        /// The feature.
        feature: String,
        /// The run id.
        run: String,
    },
    /// The verification run is of another feature.
    #[error("feature `{feature}` refers to verification run `{run}`, which verified `{other}`")]
    EvidenceOfOtherFeature {
        /// The feature.
        feature: String,
        /// The run id.
        run: String,
        /// The feature the run verified.
        other: String,
    },
}

fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

impl Ledger {
    /// The ledger of a plan, every feature not started, in priority order
    /// (ties keep the plan's order). Refuses a plan without features, with
    /// duplicate or malformed ids, or with a feature that has no
    /// verification steps.
    pub fn from_plan(project: impl Into<String>, plan: ProjectPlan) -> Result<Self, LedgerError> {
        if plan.features.is_empty() {
            return Err(LedgerError::EmptyPlan);
        }
        let mut seen = BTreeSet::new();
        for spec in &plan.features {
            if !valid_id(&spec.id) {
                return Err(LedgerError::BadId {
                    feature: spec.id.clone(),
                });
            }
            if !seen.insert(spec.id.as_str()) {
                return Err(LedgerError::DuplicateFeature {
                    feature: spec.id.clone(),
                });
            }
            if spec.verification.is_empty() {
                return Err(LedgerError::NoVerification {
                    feature: spec.id.clone(),
                });
            }
        }
        let mut features: Vec<Feature> = plan
            .features
            .into_iter()
            .map(|spec| Feature {
                spec,
                status: FeatureStatus::NotStarted,
                evidence: None,
            })
            .collect();
        features.sort_by_key(|f| f.spec.priority);
        Ok(Self {
            project: project.into(),
            smoke: plan.smoke,
            features,
        })
    }

    /// Reads a ledger from its JSON; `origin` names where it came from in
    /// the error.
    pub fn parse(text: &str, origin: &str) -> Result<Self, LedgerError> {
        serde_json::from_str(text).map_err(|e| LedgerError::Malformed {
            origin: origin.to_owned(),
            reason: e.to_string(),
        })
    }

    /// The ledger as JSON, the way the file holds it.
    pub fn to_json(&self) -> String {
        // A ledger is strings, numbers and enums: it always serializes.
        serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
    }

    /// The feature `id`.
    pub fn feature(&self, id: &str) -> Option<&Feature> {
        self.features.iter().find(|f| f.spec.id == id)
    }

    /// Whether every feature is passing.
    pub fn is_complete(&self) -> bool {
        self.features
            .iter()
            .all(|f| f.status == FeatureStatus::Passing)
    }

    /// The features a session may pick: not passing and not blocked.
    pub fn open_features(&self) -> impl Iterator<Item = &Feature> {
        self.features
            .iter()
            .filter(|f| !matches!(f.status, FeatureStatus::Passing | FeatureStatus::Blocked))
    }

    /// Checks that this ledger changes nothing of `sealed` (the
    /// initializer's) but statuses and evidence: the same features, the
    /// same descriptions, categories, priorities and verification steps,
    /// the same project and smoke check.
    pub fn check_sealed(&self, sealed: &Ledger) -> Result<(), LedgerError> {
        if self.project != sealed.project {
            return Err(LedgerError::ProjectEdited { field: "project" });
        }
        if self.smoke != sealed.smoke {
            return Err(LedgerError::ProjectEdited { field: "smoke" });
        }
        let mine: BTreeMap<&str, &Feature> = self
            .features
            .iter()
            .map(|f| (f.spec.id.as_str(), f))
            .collect();
        if mine.len() != self.features.len() {
            let mut seen = BTreeSet::new();
            let twice = self
                .features
                .iter()
                .find(|f| !seen.insert(f.spec.id.as_str()))
                .map(|f| f.spec.id.clone())
                .unwrap_or_default();
            return Err(LedgerError::Added { feature: twice });
        }
        for original in &sealed.features {
            let id = original.spec.id.as_str();
            let Some(now) = mine.get(id) else {
                return Err(LedgerError::Removed {
                    feature: id.to_owned(),
                });
            };
            let (a, b) = (&now.spec, &original.spec);
            let field = if a.description != b.description {
                Some("description")
            } else if a.verification != b.verification {
                Some("verification")
            } else if a.category != b.category {
                Some("category")
            } else if a.priority != b.priority {
                Some("priority")
            } else {
                None
            };
            if let Some(field) = field {
                return Err(LedgerError::Edited {
                    feature: id.to_owned(),
                    field,
                });
            }
        }
        if let Some(extra) = self
            .features
            .iter()
            .find(|f| sealed.feature(&f.spec.id).is_none())
        {
            return Err(LedgerError::Added {
                feature: extra.spec.id.clone(),
            });
        }
        Ok(())
    }

    /// The verification runs this ledger's statuses refer to.
    pub fn evidence_ids(&self) -> impl Iterator<Item = &str> {
        self.features.iter().filter_map(|f| f.evidence.as_deref())
    }

    /// Checks every status against its evidence: a passing feature names
    /// a run, found in `runs`, of this feature, that passed; any other
    /// named run exists and is of its feature.
    pub fn check_evidence(
        &self,
        runs: &BTreeMap<String, VerificationRun>,
    ) -> Result<(), LedgerError> {
        for feature in &self.features {
            let id = &feature.spec.id;
            let run = match (&feature.evidence, feature.status) {
                (None, FeatureStatus::Passing) => {
                    return Err(LedgerError::NoEvidence {
                        feature: id.clone(),
                    });
                }
                (None, _) => continue,
                (Some(run), _) => run,
            };
            check_run(id, feature.status, run, runs.get(run))?;
        }
        Ok(())
    }

    /// Sets the status of `feature` to `status`, with `evidence` (the
    /// verification run behind it). `passing` requires a run of this
    /// feature that passed; any run given must be of this feature.
    pub fn set_status(
        &mut self,
        feature: &str,
        status: FeatureStatus,
        evidence: Option<&VerificationRun>,
    ) -> Result<(), LedgerError> {
        let Some(line) = self.features.iter_mut().find(|f| f.spec.id == feature) else {
            return Err(LedgerError::UnknownFeature {
                feature: feature.to_owned(),
            });
        };
        match evidence {
            None if status == FeatureStatus::Passing => {
                return Err(LedgerError::NoEvidence {
                    feature: feature.to_owned(),
                });
            }
            None => {}
            Some(run) => check_run(feature, status, &run.id, Some(run))?,
        }
        line.status = status;
        line.evidence = evidence.map(|r| r.id.clone());
        Ok(())
    }

    /// A table of the features, for prompts and reports (markdown).
    pub fn table(&self) -> String {
        let mut text = String::from(
            "| id | category | priority | status | description |\n|---|---|---|---|---|\n",
        );
        for f in &self.features {
            text.push_str(&format!(
                "| {} | {} | {} | {} | {} |\n",
                f.spec.id,
                f.spec.category,
                f.spec.priority,
                f.status,
                f.spec.description.replace('|', "\\|").replace('\n', " ")
            ));
        }
        text
    }
}

fn check_run(
    feature: &str,
    status: FeatureStatus,
    id: &str,
    run: Option<&VerificationRun>,
) -> Result<(), LedgerError> {
    let Some(run) = run else {
        return Err(LedgerError::EvidenceMissing {
            feature: feature.to_owned(),
            run: id.to_owned(),
        });
    };
    if run.feature != feature {
        return Err(LedgerError::EvidenceOfOtherFeature {
            feature: feature.to_owned(),
            run: id.to_owned(),
            other: run.feature.clone(),
        });
    }
    if status == FeatureStatus::Passing && !run.passed {
        return Err(LedgerError::EvidenceFailed {
            feature: feature.to_owned(),
            run: id.to_owned(),
        });
    }
    Ok(())
}
