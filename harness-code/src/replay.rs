//! Selective replay: bring a [`CodeSession`] up to date by running exactly
//! the stale part of its graph, reusing cached runs where a step's code and
//! inputs are unchanged.
//!
//! [`CodeSession::replay`] walks the steps in execution (topological) order.
//! A step that is up to date is skipped. A stale or pending step gets its
//! cache key (its code plus the content hashes of the values it reads, from
//! the records of their producing steps, which were brought up to date
//! first); if a successful run with that key is cached, its outputs are
//! reused and the step does not run. Otherwise it runs, its inputs restored
//! lazily. So after an edit, only steps whose inputs actually changed run: a
//! step downstream of the edit whose inputs hash the same as before (the
//! edit did not change what it reads) is reused — the early cut-off of a
//! build system. A step whose producer failed is skipped.
//!
//! The [`ReplayReport`] says for every step what happened and why.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::blobs::sha256_hex;
use crate::graph::{StepId, StepStatus};
use crate::session::{CodeSession, CodeSessionError, Source};

/// What replay did with a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplayAction {
    /// The step ran in the kernel.
    Executed,
    /// A cached run with the same code and inputs was reused; the step did
    /// not run.
    Reused,
    /// Nothing was done (up to date, or cannot run).
    Skipped,
}

impl fmt::Display for ReplayAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Executed => "executed",
            Self::Reused => "reused",
            Self::Skipped => "skipped",
        })
    }
}

/// An input whose identity differs from the previous run's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputChange {
    /// The name.
    pub name: String,
    /// The step that produces it now (`None`: no earlier step does any more).
    pub producer: Option<StepId>,
}

/// Why replay did what it did with a step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum ReplayReason {
    /// Executed: the step never ran.
    NeverRan,
    /// Executed: its code changed since its last run.
    CodeChanged {
        /// The version that ran last.
        from_version: u32,
        /// The current version.
        to_version: u32,
    },
    /// Executed: values it reads changed since its last run.
    InputsChanged {
        /// The changed inputs.
        changes: Vec<InputChange>,
    },
    /// Executed: its last run failed (code and inputs unchanged).
    PreviousRunFailed,
    /// Executed: code and inputs are as in the last run, but no successful
    /// run with them is cached (or the cache was not used).
    NotCached,
    /// Reused: a successful run with this cache key exists.
    CacheHit {
        /// The cache key (SHA-256 of code and input hashes).
        key: String,
    },
    /// Skipped: the step is up to date.
    UpToDate,
    /// Skipped: a step it depends on is not up to date after this replay
    /// (it failed, or was skipped itself).
    UpstreamNotOk {
        /// The step it depends on.
        step: StepId,
        /// That step's status.
        status: StepStatus,
    },
    /// Skipped: not part of the requested replay.
    NotRequested,
}

impl fmt::Display for ReplayReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NeverRan => f.write_str("never ran"),
            Self::CodeChanged {
                from_version,
                to_version,
            } => write!(f, "code changed (v{from_version} -> v{to_version})"),
            Self::InputsChanged { changes } => {
                f.write_str("input changed: ")?;
                for (i, change) in changes.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    match change.producer {
                        Some(step) => write!(f, "{} (from step {step})", change.name)?,
                        None => write!(f, "{} (no longer produced)", change.name)?,
                    }
                }
                Ok(())
            }
            Self::PreviousRunFailed => f.write_str("last run failed"),
            Self::NotCached => f.write_str("no cached run for this code and these inputs"),
            Self::CacheHit { key } => write!(
                f,
                "code and inputs unchanged (cache {})",
                &key[..key.len().min(12)]
            ),
            Self::UpToDate => f.write_str("up to date"),
            Self::UpstreamNotOk { step, status } => {
                write!(f, "depends on step {step}, which is {status:?}")
            }
            Self::NotRequested => f.write_str("not part of this replay"),
        }
    }
}

/// One step of a [`ReplayReport`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayEntry {
    /// The step.
    pub step: StepId,
    /// Executed, reused or skipped.
    pub action: ReplayAction,
    /// Why.
    pub reason: ReplayReason,
    /// For an executed step that failed: the exception or kernel error.
    pub error: Option<String>,
    /// Steps re-run first to recompute inputs without a blob.
    pub recomputed: Vec<StepId>,
    /// Names restored into the kernel before the step.
    pub restored: Vec<String>,
    /// Wall time spent on the step (restore and run), in microseconds.
    pub duration_us: u64,
}

/// What a replay did, step by step in execution order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayReport {
    /// One entry per step of the graph.
    pub entries: Vec<ReplayEntry>,
    /// Wall time of the whole replay, in microseconds.
    pub duration_us: u64,
    /// Part of it spent starting the kernel (0 if it was running or no
    /// step had to run), in microseconds.
    pub kernel_start_us: u64,
}

impl ReplayReport {
    fn with(&self, action: ReplayAction) -> Vec<StepId> {
        self.entries
            .iter()
            .filter(|e| e.action == action)
            .map(|e| e.step)
            .collect()
    }

    /// Steps that ran, in order.
    pub fn executed(&self) -> Vec<StepId> {
        self.with(ReplayAction::Executed)
    }

    /// Steps whose cached run was reused.
    pub fn reused(&self) -> Vec<StepId> {
        self.with(ReplayAction::Reused)
    }

    /// Steps skipped (up to date or blocked).
    pub fn skipped(&self) -> Vec<StepId> {
        self.with(ReplayAction::Skipped)
    }

    /// Executed steps that failed.
    pub fn failed(&self) -> Vec<StepId> {
        self.entries
            .iter()
            .filter(|e| e.error.is_some())
            .map(|e| e.step)
            .collect()
    }

    /// The entry of `step`.
    pub fn entry(&self, step: StepId) -> Option<&ReplayEntry> {
        self.entries.iter().find(|e| e.step == step)
    }

    /// Whether every step is up to date after the replay.
    pub fn succeeded(&self) -> bool {
        self.entries.iter().all(|e| {
            e.error.is_none()
                && !matches!(
                    e.reason,
                    ReplayReason::UpstreamNotOk { .. } | ReplayReason::NotRequested
                )
        })
    }
}

/// Options of [`CodeSession::replay_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayOptions {
    /// Replay only from this step ([`ExecutionStateGraph::replay_order`]:
    /// the step, its downstream, and the out-of-date steps they need);
    /// `None`: every stale, failed or pending step.
    ///
    /// [`ExecutionStateGraph::replay_order`]: crate::ExecutionStateGraph::replay_order
    pub from: Option<StepId>,
    /// Reuse cached runs (default true); false runs every step in the set.
    pub use_cache: bool,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        Self {
            from: None,
            use_cache: true,
        }
    }
}

impl CodeSession {
    /// Brings every step up to date: runs the stale subgraph in execution
    /// order, reusing cached runs whose code and inputs are unchanged. See
    /// the [module docs](crate::replay).
    ///
    /// # Errors
    ///
    /// Only failures outside a step: an unknown step, the blob store, a
    /// kernel that cannot be started. A step that raises, times out or
    /// crashes the kernel is reported in its entry; the replay goes on with
    /// the steps that do not depend on it.
    pub async fn replay(&mut self) -> Result<ReplayReport, CodeSessionError> {
        self.replay_with(ReplayOptions::default()).await
    }

    /// [`replay`](Self::replay) with options.
    ///
    /// # Errors
    ///
    /// As [`replay`](Self::replay).
    pub async fn replay_with(
        &mut self,
        options: ReplayOptions,
    ) -> Result<ReplayReport, CodeSessionError> {
        let clock = Instant::now();
        let order: std::collections::BTreeSet<StepId> = match options.from {
            Some(step) => self.graph().replay_order(step)?,
            None => self.graph().stale_order(),
        }
        .into_iter()
        .collect();
        let steps: Vec<StepId> = self.graph().steps().map(|s| s.id()).collect();
        let mut report = ReplayReport::default();
        for step in steps {
            let started = Instant::now();
            let mut entry = ReplayEntry {
                step,
                action: ReplayAction::Skipped,
                reason: ReplayReason::UpToDate,
                error: None,
                recomputed: Vec::new(),
                restored: Vec::new(),
                duration_us: 0,
            };
            if !order.contains(&step) {
                if self.status(step)?.needs_run() {
                    entry.reason = ReplayReason::NotRequested;
                }
                report.entries.push(entry);
                continue;
            }
            if let Some((producer, status)) = self.blocking_producer(step)? {
                entry.reason = ReplayReason::UpstreamNotOk {
                    step: producer,
                    status,
                };
                report.entries.push(entry);
                continue;
            }
            let sources = self.sources(step)?;
            let key = self.cache_key(step, &sources)?;
            if options.use_cache && self.cached(&key).is_some() {
                self.reuse(step, &key)?;
                entry.action = ReplayAction::Reused;
                entry.reason = ReplayReason::CacheHit { key };
                entry.duration_us = micros(started.elapsed());
                report.entries.push(entry);
                continue;
            }
            entry.action = ReplayAction::Executed;
            entry.reason = self.why(step, &sources)?;
            if self.kernel().is_none() {
                let starting = Instant::now();
                self.ensure_kernel().await?;
                report.kernel_start_us += micros(starting.elapsed());
            }
            let started = Instant::now();
            match self.run_prepared(step, &sources, key).await {
                Ok(run) => {
                    entry.error = run.result.error.as_ref().map(ToString::to_string);
                    entry.recomputed = run.recomputed;
                    entry.restored = run.restored;
                }
                Err(error @ CodeSessionError::Kernel { step: Some(_), .. })
                | Err(error @ CodeSessionError::Restore { .. }) => {
                    entry.error = Some(error.to_string());
                }
                Err(error) => return Err(error),
            }
            entry.duration_us = micros(started.elapsed());
            report.entries.push(entry);
        }
        report.duration_us = micros(clock.elapsed());
        Ok(report)
    }

    /// The first step `step` depends on that is not up to date.
    fn blocking_producer(
        &self,
        step: StepId,
    ) -> Result<Option<(StepId, StepStatus)>, CodeSessionError> {
        for (producer, _) in self.graph().dependencies(step)? {
            let status = self.status(producer)?;
            if status != StepStatus::Ok {
                return Ok(Some((producer, status)));
            }
        }
        Ok(None)
    }

    /// Why `step` must run, compared with its previous run.
    fn why(
        &self,
        step: StepId,
        sources: &BTreeMap<String, Source>,
    ) -> Result<ReplayReason, CodeSessionError> {
        let node = self.graph().step(step)?;
        let Some(previous) = self.previous_record(step) else {
            return Ok(ReplayReason::NeverRan);
        };
        if previous.source_hash != sha256_hex(node.source().as_bytes()) {
            return Ok(ReplayReason::CodeChanged {
                from_version: previous.version,
                to_version: node.current_version().number,
            });
        }
        let mut changes = Vec::new();
        for (name, source) in sources {
            if previous.inputs.get(name) != Some(&source.identity) {
                changes.push(InputChange {
                    name: name.clone(),
                    producer: Some(source.producer),
                });
            }
        }
        for name in previous.inputs.keys() {
            if !sources.contains_key(name) {
                changes.push(InputChange {
                    name: name.clone(),
                    producer: None,
                });
            }
        }
        if !changes.is_empty() {
            return Ok(ReplayReason::InputsChanged { changes });
        }
        if !previous.is_ok() {
            return Ok(ReplayReason::PreviousRunFailed);
        }
        Ok(ReplayReason::NotCached)
    }
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}
