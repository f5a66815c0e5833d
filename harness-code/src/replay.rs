//! Selective replay: bring a [`Notebook`] up to date by running exactly
//! the stale part of its graph, reusing cached runs where a cell's code and
//! inputs are unchanged.
//!
//! [`Notebook::replay`] walks the cells in execution (topological) order.
//! A cell that is up to date is skipped. A stale or pending cell gets its
//! cache key (its code plus the content hashes of the values it reads, from
//! the records of their producing cells, which were brought up to date
//! first); if a successful run with that key is cached, and its key held
//! everything its trace shows it depended on (see
//! [`CellRecord::external`](crate::notebook::CellRecord::external)), its
//! outputs are reused and the cell does not run. Otherwise it runs, its inputs restored
//! lazily. So after an edit, only cells whose inputs actually changed run: a
//! cell downstream of the edit whose inputs hash the same as before (the
//! edit did not change what it reads) is reused — the early cut-off of a
//! build system. A cell whose producer failed is skipped.
//!
//! The [`ReplayReport`] says for every cell what happened and why.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::blobs::sha256_hex;
use crate::graph::{CellId, CellStatus};
use crate::notebook::{Notebook, NotebookError, Source};

/// What replay did with a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplayAction {
    /// The cell ran in the kernel.
    Executed,
    /// A cached run with the same code and inputs was reused; the cell did
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
    /// The cell that produces it now (`None`: no earlier cell does any more).
    pub producer: Option<CellId>,
}

/// Why replay did what it did with a cell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum ReplayReason {
    /// Executed: the cell never ran.
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
    /// Skipped: the cell is up to date.
    UpToDate,
    /// Skipped: a cell it depends on is not up to date after this replay
    /// (it failed, or was skipped itself).
    UpstreamNotOk {
        /// The cell it depends on.
        cell: CellId,
        /// That cell's status.
        status: CellStatus,
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
                        Some(cell) => write!(f, "{} (from cell {cell})", change.name)?,
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
            Self::UpstreamNotOk { cell, status } => {
                write!(f, "depends on cell {cell}, which is {status:?}")
            }
            Self::NotRequested => f.write_str("not part of this replay"),
        }
    }
}

/// One cell of a [`ReplayReport`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayEntry {
    /// The cell.
    pub cell: CellId,
    /// Executed, reused or skipped.
    pub action: ReplayAction,
    /// Why.
    pub reason: ReplayReason,
    /// For an executed cell that failed: the exception or kernel error.
    pub error: Option<String>,
    /// Cells re-run first to recompute inputs without a blob.
    pub recomputed: Vec<CellId>,
    /// Names restored into the kernel before the cell.
    pub restored: Vec<String>,
    /// Wall time spent on the cell (restore and run), in microseconds.
    pub duration_us: u64,
}

/// What a replay did, cell by cell in execution order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayReport {
    /// One entry per cell of the graph.
    pub entries: Vec<ReplayEntry>,
    /// Wall time of the whole replay, in microseconds.
    pub duration_us: u64,
    /// Part of it spent starting the kernel (0 if it was running or no
    /// cell had to run), in microseconds.
    pub kernel_start_us: u64,
}

impl ReplayReport {
    fn with(&self, action: ReplayAction) -> Vec<CellId> {
        self.entries
            .iter()
            .filter(|e| e.action == action)
            .map(|e| e.cell)
            .collect()
    }

    /// Cells that ran, in order.
    pub fn executed(&self) -> Vec<CellId> {
        self.with(ReplayAction::Executed)
    }

    /// Cells whose cached run was reused.
    pub fn reused(&self) -> Vec<CellId> {
        self.with(ReplayAction::Reused)
    }

    /// Cells skipped (up to date or blocked).
    pub fn skipped(&self) -> Vec<CellId> {
        self.with(ReplayAction::Skipped)
    }

    /// Executed cells that failed.
    pub fn failed(&self) -> Vec<CellId> {
        self.entries
            .iter()
            .filter(|e| e.error.is_some())
            .map(|e| e.cell)
            .collect()
    }

    /// The entry of `cell`.
    pub fn entry(&self, cell: CellId) -> Option<&ReplayEntry> {
        self.entries.iter().find(|e| e.cell == cell)
    }

    /// Whether every cell is up to date after the replay.
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

/// Options of [`Notebook::replay_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayOptions {
    /// Replay only from this cell ([`ExecutionStateGraph::replay_order`]:
    /// the cell, its downstream, and the out-of-date cells they need);
    /// `None`: every stale, failed or pending cell.
    ///
    /// [`ExecutionStateGraph::replay_order`]: crate::ExecutionStateGraph::replay_order
    pub from: Option<CellId>,
    /// Reuse cached runs (default true); false runs every cell in the set.
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

impl Notebook {
    /// Brings every cell up to date: runs the stale subgraph in execution
    /// order, reusing cached runs whose code and inputs are unchanged. See
    /// the [module docs](crate::replay).
    ///
    /// # Errors
    ///
    /// Only failures outside a cell: an unknown cell, the blob store, a
    /// kernel that cannot be started. A cell that raises, times out or
    /// crashes the kernel is reported in its entry; the replay goes on with
    /// the cells that do not depend on it.
    pub async fn replay(&mut self) -> Result<ReplayReport, NotebookError> {
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
    ) -> Result<ReplayReport, NotebookError> {
        let clock = Instant::now();
        let order: std::collections::BTreeSet<CellId> = match options.from {
            Some(cell) => self.graph().replay_order(cell)?,
            None => self.graph().stale_order(),
        }
        .into_iter()
        .collect();
        let cells: Vec<CellId> = self.graph().cells().map(|s| s.id()).collect();
        let mut report = ReplayReport::default();
        for cell in cells {
            let started = Instant::now();
            let mut entry = ReplayEntry {
                cell,
                action: ReplayAction::Skipped,
                reason: ReplayReason::UpToDate,
                error: None,
                recomputed: Vec::new(),
                restored: Vec::new(),
                duration_us: 0,
            };
            if !order.contains(&cell) {
                if self.status(cell)?.needs_run() {
                    entry.reason = ReplayReason::NotRequested;
                }
                report.entries.push(entry);
                continue;
            }
            if let Some((producer, status)) = self.blocking_producer(cell)? {
                entry.reason = ReplayReason::UpstreamNotOk {
                    cell: producer,
                    status,
                };
                report.entries.push(entry);
                continue;
            }
            let sources = self.sources(cell)?;
            let key = self.cache_key(cell, &sources)?;
            if options.use_cache && self.cached(cell, &key).is_some() {
                self.reuse(cell, &key)?;
                entry.action = ReplayAction::Reused;
                entry.reason = ReplayReason::CacheHit { key };
                entry.duration_us = micros(started.elapsed());
                report.entries.push(entry);
                continue;
            }
            entry.action = ReplayAction::Executed;
            entry.reason = self.why(cell, &sources)?;
            if self.kernel().is_none() {
                let starting = Instant::now();
                self.ensure_kernel().await?;
                report.kernel_start_us += micros(starting.elapsed());
            }
            let started = Instant::now();
            match self.run_prepared(cell, &sources, key).await {
                Ok(run) => {
                    entry.error = run.result.error.as_ref().map(ToString::to_string);
                    entry.recomputed = run.recomputed;
                    entry.restored = run.restored;
                }
                Err(error @ NotebookError::Kernel { cell: Some(_), .. })
                | Err(error @ NotebookError::Restore { .. })
                | Err(error @ NotebookError::Unsettled { .. }) => {
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

    /// The first cell `cell` depends on that is not up to date.
    fn blocking_producer(
        &self,
        cell: CellId,
    ) -> Result<Option<(CellId, CellStatus)>, NotebookError> {
        for (producer, _) in self.graph().dependencies(cell)? {
            let status = self.status(producer)?;
            if status != CellStatus::Ok {
                return Ok(Some((producer, status)));
            }
        }
        Ok(None)
    }

    /// Why `cell` must run, compared with its previous run.
    fn why(
        &self,
        cell: CellId,
        sources: &BTreeMap<String, Source>,
    ) -> Result<ReplayReason, NotebookError> {
        let node = self.graph().cell(cell)?;
        let Some(previous) = self.previous_record(cell) else {
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
