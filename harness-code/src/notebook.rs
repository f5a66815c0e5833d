//! A notebook: the execution-state graph, a Python kernel and a blob
//! store, kept consistent.
//!
//! [`Notebook`] runs cells in a [`Kernel`]. After each cell the values it
//! wrote are pickled into the [`BlobStore`] and summarised in a
//! [`CellRecord`]. Before a cell runs, only the names it needs (its
//! dependencies in the graph) are put back into the kernel, and only those
//! the kernel does not already hold with the right content:
//!
//! - a value with a blob is loaded from it, a module is imported;
//! - a value that cannot be pickled (a function or class defined in a cell,
//!   a generator, a value over the size limit) is recomputed by re-running
//!   the cell that produced it, after restoring *that* cell's inputs the
//!   same way — the minimal set of cells, found by simulating the namespace.
//!
//! This is what makes a kernel restart (after a timeout or crash) cheap, and
//! what lets a notebook saved in one process ([`save`](Notebook::save),
//! [`save_to_store`](Notebook::save_to_store)) be reopened in another
//! with nothing re-run up front.
//!
//! Each run has a *cache key*: the SHA-256 of the cell's code and of the
//! identities of the values it reads or changes in place (blob hashes; for
//! an unpicklable value, the key of the run that produced it and the name;
//! for a file a cell wrote, its content). Runs are cached by key, so
//! [`replay`](Notebook::replay) can reuse a cell whose code and inputs are
//! unchanged instead of running it, as a build system would. A run is
//! cached only if its key held everything its trace shows it depended on
//! and that an earlier cell produced, and reused only while what it read
//! from outside the notebook ([`CellRecord::external`]) still has no
//! producer: a dependency found by the run's own trace (a list changed
//! through a dict holding it, a file linked after the key was made) never
//! lets an older run stand for a new one.
//!
//! # Limits
//!
//! Each run is traced by the kernel ([`CellTrace`]): what the cell read
//! (through the functions it called too), bound, changed in place (found by
//! fingerprinting the namespace's values), the files it opened and the
//! module state it changed. The trace is kept in the [`CellRecord`] and
//! given to the graph ([`ExecutionStateGraph::record_trace`]), so cells
//! are linked by the static analysis *and* by what their last run did: an
//! object changed in place through a call the analysis does not see
//! (`helper(df)` mutating `df`) becomes an output of that cell, a file one
//! cell writes and another reads links the two (the reader's cache key
//! holds the file's content hash), and a random generator or pyplot figure
//! changed through a module links the cells that changed it.
//!
//! Reuse and restore assume cells are deterministic functions of their code
//! and what they read: the clock, the network and files no cell wrote are
//! not seen (declare such a dependency with
//! [`ExecutionStateGraph::add_edge`], or the cell reruns only when its code
//! or inputs change). Names are pickled one by one; names that shared one
//! object at the end of their cell (an alias, a numpy view and its base, a
//! list held by a dict and by a name of its own, a pandas Series and its
//! frame: [`CellTrace::aliases`]) are recomputed by re-running that cell
//! rather than loaded as separate objects (so are a function and the
//! list its default or closure holds); and when one name of such a group
//! is given a new object in the kernel, the others are restored again
//! before a cell that needs them, unless a fresh run has them apart too (a
//! name rebound by a later cell than the one that made the alias). Names a cell reads that the kernel
//! holds but no earlier cell produces (an edit renamed them, or a later
//! cell bound them) are deleted before it runs, as a fresh run would not
//! have them. A cell that failed produces the names it bound before its
//! exception: they are restored by re-running it, which must fail the same
//! way again. Module state (`@numpy.random`, `@matplotlib`) cannot be loaded:
//! a kernel that does not hold it re-runs the cell that made it, which
//! restores it only as far as running that cell again does.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::blobs::{BlobError, BlobStore, Hasher, sha256_hex};
use crate::graph::{
    CellId, CellOutcome, CellRun, CellStatus, ExecutionStateGraph, OutputSummary, Provenance,
    Timestamp,
};
use crate::kernel::{
    CapturedOutput, CellResult, ExecuteOptions, Kernel, KernelConfig, KernelError, PythonError,
    RestoreValue, Stored, ValueSummary,
};
use crate::trace::{CellTrace, FILE_PREFIX};
use crate::{AnalysisOptions, GraphError};
use harness::durable::{self, WriteError, write_atomic_private};
use harness::ids::SessionId;
use harness::session::{SessionError, SessionStore, load_value, save_value};

/// Version of the saved notebook format.
const FORMAT_VERSION: u32 = 1;
/// The notebook file in a notebook directory (the name it had when notebooks
/// were called code sessions, so that those directories still open).
const NOTEBOOK_FILE: &str = "session.json";
/// The owner of the sessions that hold notebooks in a [`SessionStore`]
/// (see [`harness::session::save_value`]).
pub const STORE_OWNER: &str = "harness-code/notebook";
/// Characters of printed output kept in the graph's [`OutputSummary`].
const SUMMARY_TEXT: usize = 2000;

/// Why a notebook operation failed.
#[derive(Debug, thiserror::Error)]
pub enum NotebookError {
    /// A graph operation failed (unknown cell, code that does not parse).
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// The kernel failed while running or preparing a cell (timeout, crash,
    /// cannot start). The cell is recorded as failed; the kernel has been
    /// restarted and later cells restore what they need.
    #[error("{}", kernel_text(*cell, source))]
    Kernel {
        /// The cell that was running or being prepared.
        cell: Option<CellId>,
        /// What the kernel reported.
        #[source]
        source: KernelError,
    },
    /// An input of a cell could not be restored: re-running the cell that
    /// produced it raised.
    #[error("cannot restore the inputs of cell {cell}: re-running cell {producer} raised {error}")]
    Restore {
        /// The cell being prepared.
        cell: CellId,
        /// The cell that was re-run.
        producer: CellId,
        /// What it raised.
        error: Box<PythonError>,
    },
    /// The inputs of a cell could not be put back as a fresh run of the
    /// cells before it has them: restoring some of them parted others, round
    /// after round, or a cell that had failed, re-run for the names it bound
    /// before its exception, now ran through (what it bound may differ).
    /// The cell is recorded as failed; a notebook file is not at fault.
    #[error(
        "cannot restore the inputs of cell {cell}: {} could not be put back as a fresh run of the cells before it has them",
        names.join(", ")
    )]
    Unsettled {
        /// The cell being prepared.
        cell: CellId,
        /// The inputs that were still not in place.
        names: Vec<String>,
    },
    /// The blob store failed.
    #[error(transparent)]
    Blob(#[from] BlobError),
    /// A notebook file or directory could not be read or written.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// What failed, e.g. `read`, `fsync` or `rename into place`.
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// A saved notebook is corrupt or of another format version.
    #[error("saved notebook {location} cannot be read: {detail}")]
    Format {
        /// The file or store record.
        location: String,
        /// What is wrong.
        detail: String,
    },
    /// The session store failed, or its session `id` is not a notebook
    /// (it belongs to another owner: nothing was read or written).
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The session store has no notebook with this id.
    #[error("no notebook {0} in the store")]
    NoNotebook(SessionId),
    /// A notebook file is larger than [`MAX_NOTEBOOK_BYTES`]: refused
    /// before it is read, or, saving, not written.
    #[error(
        "notebook file {} is {bytes} bytes or more, larger than the {limit} bytes a notebook file may be",
        path.display()
    )]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size (at least), or the size it would have.
        bytes: u64,
        /// The most allowed, [`MAX_NOTEBOOK_BYTES`].
        limit: u64,
    },
    /// The file a [`save`](Notebook::save) would replace is not a notebook
    /// of this format (another program's file, a notebook of a newer
    /// format, a link): it is left as it is, and nothing is written.
    #[error(
        "{} is not a notebook of this format ({found}); not replacing it: move it away, or keep the notebook in another directory",
        path.display()
    )]
    NotANotebook {
        /// The file.
        path: PathBuf,
        /// What it is instead.
        found: String,
    },
}

/// What [`NotebookError::Kernel`] says: the cell, unless the kernel's own
/// text names it already ("the kernel died during cell 3").
fn kernel_text(cell: Option<CellId>, source: &KernelError) -> String {
    let text = source.to_string();
    let Some(cell) = cell else {
        return format!("kernel: {text}");
    };
    let named = format!("cell {cell}");
    let names_it = text.match_indices(&named).any(|(at, _)| {
        !text[at + named.len()..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_digit())
    });
    if names_it {
        text
    } else {
        format!("{named}: {text}")
    }
}

/// The largest notebook file read by [`Notebook::open`] and
/// [`Notebook::read_graph`], and written by [`Notebook::save`]: 256 MiB.
/// A cell can write the notebook's file (the directory is usually under
/// the kernel's working directory), so its size is checked before it is
/// read, never trusted. A notebook is far smaller: outputs are kept to
/// [`KernelConfig::output_cap`] per stream and cached runs to a few per
/// cell.
pub const MAX_NOTEBOOK_BYTES: u64 = 256 << 20;

impl From<WriteError> for NotebookError {
    fn from(error: WriteError) -> Self {
        Self::Io {
            action: error.action,
            path: error.path,
            source: error.source,
        }
    }
}

/// The dynamic check of a cell's static analysis: names its own code read
/// from the namespace (before binding them) compared with
/// [`CellAnalysis::reads`](crate::CellAnalysis::reads).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadCheck {
    /// Names the cell's code was seen reading.
    pub observed: BTreeSet<String>,
    /// Read but not predicted by the analysis: a dependency the graph
    /// misses. The notebook adds them to the cell's inputs from then on.
    pub unexpected: BTreeSet<String>,
    /// Predicted but not seen (normal for branches not taken and function
    /// bodies not called; only reported when the cell succeeded).
    pub unobserved: BTreeSet<String>,
}

impl ReadCheck {
    /// Whether the analysis missed no read.
    pub fn is_consistent(&self) -> bool {
        self.unexpected.is_empty()
    }
}

/// The last run of a cell (or the cached run it reused).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellRecord {
    /// The code version that ran.
    pub version: u32,
    /// SHA-256 of the source that ran.
    pub source_hash: String,
    /// The cache key: code plus the identities of the inputs.
    pub cache_key: String,
    /// The inputs: name → identity (`blob:HASH`, `module:NAME`,
    /// `derived:HASH`, `deleted`).
    pub inputs: BTreeMap<String, String>,
    /// What the cell bound or changed.
    pub outputs: BTreeMap<String, ValueSummary>,
    /// Names it deleted.
    pub deleted: BTreeSet<String>,
    /// The exception or kernel failure, rendered; `None` if it succeeded.
    pub error: Option<String>,
    /// Captured stdout.
    pub stdout: CapturedOutput,
    /// Captured stderr.
    pub stderr: CapturedOutput,
    /// The last expression's repr.
    pub display: Option<String>,
    /// The dynamic check of the analysis.
    pub read_check: Option<ReadCheck>,
    /// What the run did, as the kernel traced it (`None` with tracing off
    /// or when the kernel failed); also given to the graph
    /// ([`ExecutionStateGraph::record_trace`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<CellTrace>,
    /// What the run's trace shows it read or changed in place (names,
    /// `file:PATH`, `@` states) that no earlier cell produced when it ran,
    /// so that its cache key does not hold it (a file no cell wrote, a name
    /// it found missing). The run is reused only while none of them has a
    /// producer; every other dependency of the run is in [`inputs`](Self::inputs).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub external: BTreeSet<String>,
    /// Time in the kernel, in microseconds.
    pub duration_us: u64,
    /// When it ran.
    pub ran_at: Timestamp,
}

impl CellRecord {
    /// Whether the run succeeded.
    pub fn is_ok(&self) -> bool {
        self.error.is_none()
    }

    /// The identity of output `name`, as later cells' cache keys see it.
    pub fn identity(&self, name: &str) -> Option<String> {
        if self.deleted.contains(name) {
            return Some(DELETED.to_owned());
        }
        let summary = self.outputs.get(name)?;
        Some(match &summary.stored {
            Stored::Blob { hash, .. } => format!("blob:{hash}"),
            Stored::Module { name } => format!("module:{name}"),
            Stored::Unrestorable { .. } if self.is_ok() => {
                let mut hasher = Hasher::default();
                hasher.part(self.cache_key.as_bytes()).part(name.as_bytes());
                format!("derived:{}", hasher.finish())
            }
            Stored::Unrestorable { .. } => {
                let mut hasher = Hasher::default();
                hasher
                    .part(self.cache_key.as_bytes())
                    .part(name.as_bytes())
                    .part(&self.ran_at.as_millis().to_le_bytes());
                format!("partial:{}", hasher.finish())
            }
        })
    }

    /// Blob hashes this record refers to.
    pub fn blobs(&self) -> impl Iterator<Item = &str> {
        self.outputs.values().filter_map(|v| v.stored.hash())
    }
}

const DELETED: &str = "deleted";

/// What [`Notebook::run_cell`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CellExecution {
    /// The cell.
    pub cell: CellId,
    /// What the kernel reported.
    pub result: CellResult,
    /// Cells re-run first to recompute inputs that have no blob, in order.
    pub recomputed: Vec<CellId>,
    /// Names put back into the kernel before the cell (loaded, imported or
    /// deleted).
    pub restored: Vec<String>,
    /// The dynamic check of the analysis, if read checking is on.
    pub read_check: Option<ReadCheck>,
}

/// Where a value a cell needs comes from.
#[derive(Debug, Clone)]
pub(crate) struct Source {
    pub(crate) producer: CellId,
    pub(crate) identity: String,
    restore: Restore,
}

#[derive(Debug, Clone)]
enum Restore {
    Load(RestoreValue),
    Delete,
    Rerun,
    /// Outside the namespace (a file, module state): identified, not restored.
    External,
}

/// What the kernel had to be given before a cell.
#[derive(Debug, Default)]
struct Prepared {
    recomputed: Vec<CellId>,
    restored: Vec<String>,
}

#[derive(Serialize, Deserialize)]
struct Saved {
    format: u32,
    graph: ExecutionStateGraph,
    records: BTreeMap<CellId, CellRecord>,
    cache: BTreeMap<String, CellRecord>,
}

/// What [`Notebook::sync_sources`] changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncReport {
    /// Cells whose code was replaced.
    pub changed: Vec<CellId>,
    /// Cells appended.
    pub added: Vec<CellId>,
    /// Whether the graph was rebuilt (cells were removed); cached runs are
    /// kept, so unchanged cells are still reused.
    pub rebuilt: bool,
}

/// A notebook: graph + kernel + blob store. See the [module docs](self).
///
/// ```no_run
/// # async fn demo() -> Result<(), harness_code::notebook::NotebookError> {
/// use harness_code::Provenance;
/// use harness_code::kernel::KernelConfig;
/// use harness_code::notebook::Notebook;
///
/// let mut notebook = Notebook::open_or_create(".harness/code/demo", KernelConfig::default())?;
/// let load = notebook.add_cell("xs = list(range(10))", Provenance::now("user", "load"))?;
/// let total = notebook.add_cell("total = sum(xs)", Provenance::now("user", "sum"))?;
/// notebook.replay().await?;
/// notebook.replace_cell(load, "xs = list(range(20))", Provenance::now("user", "more"))?;
/// let report = notebook.replay().await?;
/// assert_eq!(report.executed(), [load, total]);
/// notebook.save()?;
/// # Ok(()) }
/// ```
pub struct Notebook {
    dir: PathBuf,
    graph: ExecutionStateGraph,
    records: BTreeMap<CellId, CellRecord>,
    cache: BTreeMap<String, CellRecord>,
    blobs: BlobStore,
    config: KernelConfig,
    kernel: Option<Kernel>,
    /// What the kernel's namespace holds: name → identity.
    live: BTreeMap<String, String>,
    /// The groups of names sharing an object in the kernel, as the last
    /// cell that ran there left them ([`CellTrace::aliases`]), less the
    /// names restored since.
    groups: Vec<BTreeSet<String>>,
    live_generation: u64,
    /// Blobs the kernel failed to load (missing, unreadable, corrupt: the
    /// kernel checks every blob against its hash before unpickling it);
    /// their values are recomputed instead, until a run writes them again.
    bad_blobs: BTreeSet<String>,
    /// Blobs known to be on disk for good: those of the saved notebook this
    /// one was opened from, and those fsynced by a save since.
    synced: std::sync::Mutex<BTreeSet<String>>,
}

impl std::fmt::Debug for Notebook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notebook")
            .field("dir", &self.dir)
            .field("cells", &self.graph.len())
            .field("cached_runs", &self.cache.len())
            .field("kernel", &self.kernel)
            .finish_non_exhaustive()
    }
}

impl Notebook {
    /// A new, empty notebook kept in `dir` (blobs in `dir/blobs`, the kernel
    /// working in `dir/work` unless `config.working_dir` says otherwise).
    /// Cells are analysed as plain Python. The kernel starts with the first
    /// cell that runs.
    ///
    /// # Errors
    ///
    /// [`NotebookError::Blob`] if the blob store cannot be created.
    pub fn create(dir: impl Into<PathBuf>, config: KernelConfig) -> Result<Self, NotebookError> {
        Self::create_with(dir, config, AnalysisOptions::default())
    }

    /// [`create`](Self::create) with analysis options (IPython syntax for
    /// notebook cells).
    ///
    /// # Errors
    ///
    /// As [`create`](Self::create).
    pub fn create_with(
        dir: impl Into<PathBuf>,
        config: KernelConfig,
        options: AnalysisOptions,
    ) -> Result<Self, NotebookError> {
        Self::assemble(
            dir.into(),
            config,
            ExecutionStateGraph::with_options(options),
            BTreeMap::new(),
            BTreeMap::new(),
        )
    }

    fn assemble(
        dir: PathBuf,
        mut config: KernelConfig,
        graph: ExecutionStateGraph,
        records: BTreeMap<CellId, CellRecord>,
        cache: BTreeMap<String, CellRecord>,
    ) -> Result<Self, NotebookError> {
        let blobs = BlobStore::open(dir.join("blobs"))?;
        config.blob_dir = Some(blobs.root().to_path_buf());
        if config.working_dir.is_none() {
            config.working_dir = Some(dir.join("work"));
        }
        Ok(Self {
            dir,
            graph,
            records,
            cache,
            blobs,
            config,
            kernel: None,
            live: BTreeMap::new(),
            groups: Vec::new(),
            live_generation: 0,
            bad_blobs: BTreeSet::new(),
            synced: std::sync::Mutex::new(BTreeSet::new()),
        })
    }

    /// Reopens the notebook saved in `dir` by [`save`](Self::save), in this
    /// or another process. Nothing runs until a cell does; then only what
    /// that cell needs is restored.
    ///
    /// # Errors
    ///
    /// [`NotebookError::Io`] if there is no readable notebook file,
    /// [`NotebookError::Format`] if it is corrupt.
    pub fn open(dir: impl Into<PathBuf>, config: KernelConfig) -> Result<Self, NotebookError> {
        let dir = dir.into();
        let saved = read_saved(&dir)?;
        let notebook = Self::assemble(dir, config, saved.graph, saved.records, saved.cache)?;
        // A save fsynced these before it wrote the file just read.
        *notebook.synced_guard() = notebook.referenced_blobs();
        Ok(notebook)
    }

    /// The graph of the notebook saved in `dir` by [`save`](Self::save)
    /// (its cells, with the trace of each one's last run), read without
    /// opening the notebook: nothing is created or written in `dir` (no
    /// blob store, unlike [`open`](Self::open)), so a tool that only looks
    /// (`harness analyze --trace`) works on a directory it may not write.
    ///
    /// # Errors
    ///
    /// As [`open`](Self::open): [`NotebookError::Io`] if there is no
    /// readable notebook file (a FIFO or a device in its place is one,
    /// never waited on), [`NotebookError::Format`] if it is corrupt.
    pub fn read_graph(dir: impl AsRef<Path>) -> Result<ExecutionStateGraph, NotebookError> {
        Ok(read_saved(dir.as_ref())?.graph)
    }

    fn synced_guard(&self) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
        self.synced
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The blobs the records and cached runs refer to.
    fn referenced_blobs(&self) -> BTreeSet<String> {
        self.records
            .values()
            .chain(self.cache.values())
            .flat_map(|r| r.blobs().map(str::to_owned))
            .collect()
    }

    /// Fsyncs the blobs the notebook refers to that no save has fsynced yet
    /// (the kernel writes them without fsync, to keep cells fast).
    fn sync_blobs(&self) -> Result<(), NotebookError> {
        let referenced = self.referenced_blobs();
        let mut synced = self.synced_guard();
        let new: Vec<&str> = referenced
            .iter()
            .filter(|h| !synced.contains(*h))
            .map(String::as_str)
            .collect();
        self.blobs.sync(new)?;
        *synced = referenced;
        Ok(())
    }

    /// Whether `dir` holds a notebook saved with [`save`](Self::save).
    pub fn exists(dir: impl AsRef<Path>) -> bool {
        dir.as_ref().join(NOTEBOOK_FILE).is_file()
    }

    /// [`open`](Self::open) if `dir` holds a saved notebook, else
    /// [`create`](Self::create).
    ///
    /// # Errors
    ///
    /// As [`open`](Self::open) and [`create`](Self::create).
    pub fn open_or_create(
        dir: impl Into<PathBuf>,
        config: KernelConfig,
    ) -> Result<Self, NotebookError> {
        let dir = dir.into();
        if Self::exists(&dir) {
            Self::open(dir, config)
        } else {
            Self::create(dir, config)
        }
    }

    /// Writes the notebook (graph, records, cached runs) to
    /// `DIR/session.json`, atomically and durably: the blobs it refers to
    /// (in `DIR/blobs`) are fsynced first, then the file is written with
    /// [`write_atomic_private`] (a temporary name, fsynced, renamed into
    /// place, the directory fsynced). When `save` returns, the notebook
    /// survives a crash.
    ///
    /// What cells printed, raised and displayed is in the file, so it is
    /// written readable by its owner alone (`0600`), with every secret
    /// registered with [`harness::secrets`] redacted.
    ///
    /// A file already there is replaced only if it is a notebook of this
    /// format: a notebook just [created](Self::create) in a directory
    /// holding another program's `session.json` does not overwrite it.
    ///
    /// # Errors
    ///
    /// [`NotebookError::Io`] if the file cannot be written,
    /// [`NotebookError::Blob`] if a blob cannot be fsynced,
    /// [`NotebookError::NotANotebook`] if the file there is not a notebook,
    /// [`NotebookError::TooLarge`] if the notebook would be larger than
    /// [`MAX_NOTEBOOK_BYTES`] (a file `open` would refuse).
    pub fn save(&self) -> Result<(), NotebookError> {
        let bytes = self.encode()?;
        let size = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        if size > MAX_NOTEBOOK_BYTES {
            return Err(NotebookError::TooLarge {
                path: self.dir.join(NOTEBOOK_FILE),
                bytes: size,
                limit: MAX_NOTEBOOK_BYTES,
            });
        }
        self.sync_blobs()?;
        std::fs::create_dir_all(&self.dir).map_err(|source| NotebookError::Io {
            action: "create the directory",
            path: self.dir.clone(),
            source,
        })?;
        let path = self.dir.join(NOTEBOOK_FILE);
        check_replaceable(&path)?;
        write_atomic_private(&path, &bytes, durable::Sync::FileAndDir)?;
        Ok(())
    }

    /// The notebook as saved, every registered secret redacted
    /// ([`harness::secrets`]: what cells print, raise and display can hold
    /// a key read from the environment, and the file and the store outlive
    /// the process). Without a secret registered it is encoded directly.
    fn encode(&self) -> Result<Vec<u8>, NotebookError> {
        let fail = |error: serde_json::Error| NotebookError::Format {
            location: self.dir.display().to_string(),
            detail: format!("cannot encode: {error}"),
        };
        if harness::secrets::is_active() {
            // Part by part: the top-level order stays the one the format
            // starts with (`{"format":`).
            serde_json::to_vec(&SavedRef {
                format: FORMAT_VERSION,
                graph: redacted(&self.graph).map_err(fail)?,
                records: redacted(&self.records).map_err(fail)?,
                cache: redacted(&self.cache).map_err(fail)?,
            })
        } else {
            serde_json::to_vec(&SavedRef {
                format: FORMAT_VERSION,
                graph: &self.graph,
                records: &self.records,
                cache: &self.cache,
            })
        }
        .map_err(fail)
    }

    /// Saves the notebook into a [`SessionStore`] as session `id`, with
    /// [`harness::session::save_value`]: the graph, records and cached runs
    /// are one value, replacing the previous one, owned by
    /// [`STORE_OWNER`]; blobs stay in this notebook's directory and are
    /// referred to by hash. Workers never take such a session: it is not a
    /// run.
    ///
    /// # Errors
    ///
    /// [`NotebookError::Session`]: the session belongs to someone else (an
    /// agent's run), or the store failed.
    pub async fn save_to_store(
        &self,
        store: &dyn SessionStore,
        id: &SessionId,
    ) -> Result<(), NotebookError> {
        // The store refers to the blobs by hash: they must be on disk first.
        self.sync_blobs()?;
        let value: serde_json::Value =
            serde_json::from_slice(&self.encode()?).map_err(|error| NotebookError::Format {
                location: format!("store session {id}"),
                detail: error.to_string(),
            })?;
        save_value(store, STORE_OWNER, id, value).await?;
        Ok(())
    }

    /// Reopens a notebook saved with [`save_to_store`](Self::save_to_store)
    /// whose blobs are in `dir/blobs`.
    ///
    /// # Errors
    ///
    /// [`NotebookError::NoNotebook`], [`NotebookError::Session`] (the
    /// session is not a notebook, or the store failed) or
    /// [`NotebookError::Format`].
    pub async fn open_from_store(
        store: &dyn SessionStore,
        id: &SessionId,
        dir: impl Into<PathBuf>,
        config: KernelConfig,
    ) -> Result<Self, NotebookError> {
        let value = load_value(store, STORE_OWNER, id)
            .await?
            .ok_or_else(|| NotebookError::NoNotebook(id.clone()))?;
        let location = format!("store session {id}");
        let bytes = serde_json::to_vec(&value).map_err(|error| NotebookError::Format {
            location: location.clone(),
            detail: error.to_string(),
        })?;
        let saved = decode(&bytes, &location)?;
        Self::assemble(dir.into(), config, saved.graph, saved.records, saved.cache)
    }

    /// The notebook's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The graph of cells.
    pub fn graph(&self) -> &ExecutionStateGraph {
        &self.graph
    }

    /// The blob store.
    pub fn blobs(&self) -> &BlobStore {
        &self.blobs
    }

    /// The last run (or reused run) of `cell`.
    pub fn record(&self, cell: CellId) -> Option<&CellRecord> {
        self.records.get(&cell)
    }

    /// How many runs are cached for reuse.
    pub fn cached_runs(&self) -> usize {
        self.cache.len()
    }

    /// The running kernel, if it has started.
    pub fn kernel(&self) -> Option<&Kernel> {
        self.kernel.as_ref()
    }

    /// The configuration the notebook starts its kernels with: the one it
    /// was created or opened with, its blob store and working directory
    /// filled in. It is there whether or not a kernel runs (a notebook
    /// reopened in a new process has none until a cell runs): start any
    /// other kernel that loads this notebook's blobs with it, so that what
    /// cells pickled is unpickled under the same sandbox
    /// ([`command_prefix`](KernelConfig::command_prefix)), interpreter,
    /// limits and environment as the cells ran.
    pub fn kernel_config(&self) -> &KernelConfig {
        &self.config
    }

    /// Appends a cell (see [`ExecutionStateGraph::add_cell`]); it does not run.
    ///
    /// # Errors
    ///
    /// [`NotebookError::Graph`] if the code does not parse.
    pub fn add_cell(
        &mut self,
        source: impl Into<String>,
        provenance: Provenance,
    ) -> Result<CellId, NotebookError> {
        Ok(self.graph.add_cell(source, provenance)?)
    }

    /// Replaces a cell's code (a new version); the cell and its downstream
    /// become stale. Returns them.
    ///
    /// # Errors
    ///
    /// [`NotebookError::Graph`].
    pub fn replace_cell(
        &mut self,
        cell: CellId,
        source: impl Into<String>,
        provenance: Provenance,
    ) -> Result<Vec<CellId>, NotebookError> {
        Ok(self.graph.replace_code(cell, source, provenance)?)
    }

    /// Applies a patch to the notebook's graph with
    /// [`apply_patch`](crate::patch::apply_patch): the patch becomes
    /// the cell's new version and the cell and its downstream become
    /// stale, ready for [`replay`](Self::replay).
    ///
    /// # Errors
    ///
    /// As [`apply_patch`](crate::patch::apply_patch).
    pub fn apply_patch(
        &mut self,
        patch: &crate::patch::Patch,
    ) -> Result<crate::patch::AppliedPatch, crate::patch::PatchError> {
        crate::patch::apply_patch(&mut self.graph, patch)
    }

    /// Rolls back a patch applied with [`apply_patch`](Self::apply_patch)
    /// (see [`rollback_patch`](crate::patch::rollback_patch)).
    ///
    /// # Errors
    ///
    /// As [`rollback_patch`](crate::patch::rollback_patch).
    pub fn rollback_patch(
        &mut self,
        applied: &crate::patch::AppliedPatch,
    ) -> Result<Vec<CellId>, crate::patch::PatchError> {
        crate::patch::rollback_patch(&mut self.graph, applied)
    }

    /// Makes the cells' code equal to `sources` (e.g. the cells of a file
    /// edited outside): changed cells get a new version, extra sources are
    /// appended. If there are fewer sources than cells the graph is rebuilt;
    /// cached runs survive, so unchanged cells are still reused by
    /// [`replay`](Self::replay).
    ///
    /// # Errors
    ///
    /// [`NotebookError::Graph`] if a source does not parse (the notebook
    /// may then be partly updated).
    pub fn sync_sources(
        &mut self,
        sources: &[String],
        provenance: impl Fn(usize) -> Provenance,
    ) -> Result<SyncReport, NotebookError> {
        let mut report = SyncReport::default();
        if sources.len() < self.graph.len() {
            let mut graph = ExecutionStateGraph::with_options(self.graph.options());
            for (index, source) in sources.iter().enumerate() {
                graph.add_cell(source.clone(), provenance(index))?;
            }
            // Keep records as "previous runs" of cells with the same code, so
            // that replay can say why a cell runs.
            let mut old: Vec<CellRecord> =
                std::mem::take(&mut self.records).into_values().collect();
            for (index, source) in sources.iter().enumerate() {
                let hash = sha256_hex(source.as_bytes());
                if let Some(at) = old.iter().position(|r| r.source_hash == hash) {
                    let id = CellId::new(u32::try_from(index).unwrap_or(u32::MAX));
                    self.records.insert(id, old.swap_remove(at));
                }
            }
            self.graph = graph;
            // What the kept runs did still links their cells.
            let traced: Vec<(CellId, CellTrace)> = self
                .records
                .iter()
                .filter_map(|(id, record)| record.trace.clone().map(|trace| (*id, trace)))
                .collect();
            for (id, trace) in traced {
                self.graph.record_trace(id, trace)?;
            }
            report.rebuilt = true;
            report.added = self.graph.cells().map(|s| s.id()).collect();
            return Ok(report);
        }
        for (index, source) in sources.iter().enumerate() {
            let id = CellId::new(u32::try_from(index).unwrap_or(u32::MAX));
            if index < self.graph.len() {
                if self.graph.cell(id)?.source() != source {
                    self.graph
                        .replace_code(id, source.clone(), provenance(index))?;
                    report.changed.push(id);
                }
            } else {
                report
                    .added
                    .push(self.graph.add_cell(source.clone(), provenance(index))?);
            }
        }
        Ok(report)
    }

    /// Deletes blobs no record or cached run refers to; returns how many.
    /// Call it while no kernel of this notebook is writing.
    ///
    /// # Errors
    ///
    /// [`NotebookError::Blob`].
    pub fn collect_garbage(&self) -> Result<usize, NotebookError> {
        Ok(self.blobs.retain(&self.referenced_blobs())?)
    }

    /// Stops the kernel (it restarts with the next cell that runs).
    pub async fn shutdown(&mut self) {
        if let Some(kernel) = self.kernel.take() {
            let _ = kernel.shutdown().await;
        }
        self.live.clear();
        self.groups.clear();
    }

    /// Runs `cell` now, whatever its status: restores what it needs, runs it,
    /// records the run (in the graph, the cell's record and the cache).
    ///
    /// A Python exception is a normal result (see
    /// [`CellResult::error`]); the cell is then recorded as failed.
    ///
    /// # Errors
    ///
    /// [`NotebookError::Kernel`] if the kernel timed out or died (the cell
    /// is recorded as failed, the kernel restarted),
    /// [`NotebookError::Restore`] if an input could not be recomputed
    /// (re-running its cell raised, or raised otherwise than its last run
    /// did: a cell that failed is re-run for the names it bound before the
    /// failure, and the same failure is accepted),
    /// [`NotebookError::Unsettled`] if the inputs could not be put back
    /// together as a fresh run has them,
    /// [`NotebookError::Graph`] for an unknown cell.
    pub async fn run_cell(&mut self, cell: CellId) -> Result<CellExecution, NotebookError> {
        let sources = self.sources(cell)?;
        let key = self.cache_key(cell, &sources)?;
        self.run_prepared(cell, &sources, key).await
    }

    /// Appends `source` as a cell and runs it (what an agent does with each
    /// piece of code it writes).
    ///
    /// # Errors
    ///
    /// As [`add_cell`](Self::add_cell) and [`run_cell`](Self::run_cell).
    pub async fn execute(
        &mut self,
        source: impl Into<String>,
        provenance: Provenance,
    ) -> Result<CellExecution, NotebookError> {
        let cell = self.add_cell(source, provenance)?;
        self.run_cell(cell).await
    }

    // -- inputs and keys ------------------------------------------------------

    /// The names `cell` needs: those on its dependency edges, all names of
    /// producers on edges without names (explicit or conservative), every
    /// name if the cell defeats analysis, and reads the kernel saw that the
    /// analysis missed in an earlier run of the same code.
    fn needed_names(&self, cell: CellId) -> Result<BTreeSet<String>, NotebookError> {
        let node = self.graph.cell(cell)?;
        let mut names = BTreeSet::new();
        if node.effects().opaque {
            for (_, record) in self.records.range(..cell) {
                names.extend(record.outputs.keys().cloned());
                names.extend(record.deleted.iter().cloned());
            }
            return Ok(names);
        }
        for (producer, dependency) in self.graph.dependencies(cell)? {
            if dependency.names.is_empty() {
                if let Some(record) = self.records.get(&producer) {
                    names.extend(record.outputs.keys().cloned());
                    names.extend(record.deleted.iter().cloned());
                }
            } else {
                names.extend(dependency.names.iter().cloned());
            }
        }
        if let Some(record) = self.records.get(&cell)
            && record.source_hash == sha256_hex(node.source().as_bytes())
            && let Some(check) = &record.read_check
        {
            names.extend(check.unexpected.iter().cloned());
        }
        Ok(names)
    }

    /// For each needed name, the latest earlier cell whose record wrote or
    /// deleted it, and how to restore it. A value that shared its object
    /// with other names at the end of that cell ([`CellTrace::aliases`]) is
    /// recomputed by re-running the cell, so that the names share it again.
    /// A file (`file:PATH`) a traced cell wrote is identified by its
    /// content now (and not restored); module state (`@...`) by the run of
    /// the cell that last changed it, which is re-run when the kernel does
    /// not hold that state.
    pub(crate) fn sources(&self, cell: CellId) -> Result<BTreeMap<String, Source>, NotebookError> {
        self.sources_with(cell, &mut FileIdentities::default())
    }

    /// [`sources`](Self::sources), identifying files through `files`, which
    /// identifies each file once.
    fn sources_with(
        &self,
        cell: CellId,
        files: &mut FileIdentities,
    ) -> Result<BTreeMap<String, Source>, NotebookError> {
        let wanted = self.needed_names(cell)?;
        Ok(self.sources_of(cell, wanted, files))
    }

    /// Whether a cell before `cell` produced `name` (a value, a `file:`
    /// path or an `@` state) in its last run, as [`sources`](Self::sources)
    /// would find it.
    fn has_producer(&self, cell: CellId, name: &str) -> bool {
        self.records.range(..cell).rev().any(|(_, record)| {
            if let Some(path) = name.strip_prefix(FILE_PREFIX) {
                record
                    .trace
                    .as_ref()
                    .is_some_and(|t| t.files_written.contains(path))
            } else if name.starts_with('@') {
                record
                    .trace
                    .as_ref()
                    .is_some_and(|t| t.mutated.contains(name))
            } else {
                record.identity(name).is_some()
            }
        })
    }

    /// The sources of the names in `wanted` (see [`sources`](Self::sources)).
    fn sources_of(
        &self,
        cell: CellId,
        mut wanted: BTreeSet<String>,
        files: &mut FileIdentities,
    ) -> BTreeMap<String, Source> {
        let mut found = BTreeMap::new();
        for (&producer, record) in self.records.range(..cell).rev() {
            if wanted.is_empty() {
                break;
            }
            wanted.retain(|name| {
                if let Some(path) = name.strip_prefix(FILE_PREFIX) {
                    let wrote = record
                        .trace
                        .as_ref()
                        .is_some_and(|t| t.files_written.contains(path));
                    if wrote {
                        found.insert(
                            name.clone(),
                            Source {
                                producer,
                                identity: files.identity(path),
                                restore: Restore::External,
                            },
                        );
                    }
                    return !wrote;
                }
                if name.starts_with('@') {
                    let changed = record
                        .trace
                        .as_ref()
                        .is_some_and(|t| t.mutated.contains(name));
                    if changed {
                        // Module state cannot be loaded: the kernel that
                        // lost it (restarted, or moved on) runs the cell
                        // that made it again.
                        found.insert(
                            name.clone(),
                            Source {
                                producer,
                                identity: state_identity(record, name),
                                restore: Restore::Rerun,
                            },
                        );
                    }
                    return !changed;
                }
                let Some(identity) = record.identity(name) else {
                    return true;
                };
                let aliased = record.trace.as_ref().is_some_and(|t| t.aliased(name));
                let restore = if identity == DELETED {
                    Restore::Delete
                } else {
                    match record.outputs.get(name).map(|v| &v.stored) {
                        Some(Stored::Blob { hash, .. })
                            if !aliased
                                && !self.bad_blobs.contains(hash)
                                && self.blobs.contains(hash) =>
                        {
                            Restore::Load(RestoreValue::Blob {
                                name: name.clone(),
                                blob: hash.clone(),
                            })
                        }
                        Some(Stored::Module { name: module }) => {
                            Restore::Load(RestoreValue::Module {
                                name: name.clone(),
                                module: module.clone(),
                            })
                        }
                        _ => Restore::Rerun,
                    }
                };
                found.insert(
                    name.clone(),
                    Source {
                        producer,
                        identity,
                        restore,
                    },
                );
                false
            });
        }
        found
    }

    /// SHA-256 of the cell's code and its inputs' identities.
    pub(crate) fn cache_key(
        &self,
        cell: CellId,
        sources: &BTreeMap<String, Source>,
    ) -> Result<String, NotebookError> {
        let node = self.graph.cell(cell)?;
        let mut hasher = Hasher::default();
        // The domain keeps the bytes it had when cells were called steps, so
        // that notebooks saved before the rename keep their cached runs.
        hasher
            .part(b"harness code step v1")
            .part(node.source().as_bytes());
        for (name, source) in sources {
            hasher
                .part(name.as_bytes())
                .part(source.identity.as_bytes());
        }
        Ok(hasher.finish())
    }

    /// The cached successful run of `cell` with cache key `key`, if it can
    /// stand for a run now: everything its trace shows it read or changed
    /// in place was in its key, or had no producer then and still has none
    /// (a run whose key missed a dependency, found only by its trace, is
    /// never reused).
    pub(crate) fn cached(&self, cell: CellId, key: &str) -> Option<&CellRecord> {
        let record = self.cache.get(key).filter(|record| record.is_ok())?;
        let complete = record.trace.as_ref().is_none_or(|trace| {
            trace_dependencies(trace).all(|name| {
                record.inputs.contains_key(&name)
                    || (record.external.contains(&name) && !self.has_producer(cell, &name))
            })
        });
        complete.then_some(record)
    }

    pub(crate) fn previous_record(&self, cell: CellId) -> Option<&CellRecord> {
        self.records.get(&cell)
    }

    /// Marks `cell` as reusing the cached run `key`.
    pub(crate) fn reuse(&mut self, cell: CellId, key: &str) -> Result<(), NotebookError> {
        let Some(mut record) = self.cached(cell, key).cloned() else {
            return Ok(());
        };
        let node = self.graph.cell(cell)?;
        record.version = node.current_version().number;
        let summary = output_summary(&record);
        if let Some(trace) = &record.trace {
            self.graph.record_trace(cell, trace.clone())?;
        }
        self.graph.record_reuse(cell, summary)?;
        self.records.insert(cell, record);
        Ok(())
    }

    // -- running ----------------------------------------------------------

    pub(crate) async fn ensure_kernel(&mut self) -> Result<(), NotebookError> {
        if self.kernel.is_none() {
            let kernel = Kernel::spawn(self.config.clone())
                .await
                .map_err(|source| NotebookError::Kernel { cell: None, source })?;
            self.kernel = Some(kernel);
        }
        self.sync_generation();
        Ok(())
    }

    fn sync_generation(&mut self) {
        let generation = self.kernel.as_ref().map_or(0, Kernel::generation);
        if generation != self.live_generation {
            self.live.clear();
            self.groups.clear();
            self.live_generation = generation;
        }
    }

    /// The cell's source as the kernel runs it ([`runnable_source`]).
    fn kernel_source(&self, cell: CellId) -> Result<String, NotebookError> {
        let node = self.graph.cell(cell)?;
        Ok(runnable_source(node.source(), node.analysis()))
    }

    /// The names the kernel reports as outputs of `cell` even if it did not
    /// see them change, when the cell succeeds: those it binds or changes in
    /// place by its analysis (rebinding a name to the object it held, or a
    /// change the kernel's fingerprints may miss), directly or through the
    /// functions of earlier cells it calls. Not what only the last run
    /// wrote (`traced`): a name an earlier version of the cell bound (before
    /// an edit renamed it) is no output of this one.
    fn declared(&self, cell: CellId) -> Result<Vec<String>, NotebookError> {
        let node = self.graph.cell(cell)?;
        let analysis = node.analysis();
        let effects = node.effects();
        // Not the `file:` and `@` entries a trace adds: they name no value.
        let names: BTreeSet<&String> = analysis
            .writes
            .iter()
            .chain(&analysis.mutations)
            .chain(&effects.produces)
            .chain(
                effects
                    .may_produce
                    .iter()
                    .filter(|name| !effects.traced.contains(*name)),
            )
            .filter(|name| !name.starts_with('@') && !name.starts_with(FILE_PREFIX))
            .collect();
        Ok(names.into_iter().cloned().collect())
    }

    async fn kernel_run(
        &mut self,
        cell: CellId,
        snapshot: bool,
    ) -> Result<CellResult, KernelError> {
        // Callers have checked that the cell exists; an unknown one runs as
        // an empty cell rather than failing here.
        let (source, declared) = match (self.kernel_source(cell), self.declared(cell)) {
            (Ok(source), Ok(declared)) => (source, declared),
            _ => (String::new(), Vec::new()),
        };
        let options = ExecuteOptions { declared, snapshot };
        let Some(kernel) = self.kernel.as_mut() else {
            return Err(KernelError::Closed);
        };
        let result = kernel.execute_with(cell.get(), &source, &options).await;
        self.sync_generation();
        if let Ok(result) = &result {
            self.groups = result
                .trace
                .as_ref()
                .map(|trace| trace.aliases.clone())
                .unwrap_or_default();
        }
        result
    }

    /// The cells to re-run (ascending, each with its sources) so that every
    /// source of `cell` can be loaded: simulates the namespace, adding the
    /// producer of each value that is neither live nor loadable.
    #[allow(clippy::type_complexity)]
    fn plan(
        &self,
        sources: &BTreeMap<String, Source>,
    ) -> Result<Vec<(CellId, BTreeMap<String, Source>)>, NotebookError> {
        let mut reruns: BTreeSet<CellId> = BTreeSet::new();
        // Nothing runs while planning: the sources of a cell (and the files
        // they identify) found once hold for every round.
        let mut files = FileIdentities::default();
        let mut found: BTreeMap<CellId, BTreeMap<String, Source>> = BTreeMap::new();
        loop {
            let mut live = self.live.clone();
            let mut missing = BTreeSet::new();
            let mut plan = Vec::new();
            for &rerun in &reruns {
                let rerun_sources = match found.get(&rerun) {
                    Some(sources) => sources.clone(),
                    None => {
                        let sources = self.sources_with(rerun, &mut files)?;
                        found.insert(rerun, sources.clone());
                        sources
                    }
                };
                simulate(&mut live, &rerun_sources, &mut missing);
                if let Some(record) = self.records.get(&rerun) {
                    apply_record(&mut live, record);
                }
                plan.push((rerun, rerun_sources));
            }
            simulate(&mut live, sources, &mut missing);
            missing.retain(|cell| !reruns.contains(cell));
            if missing.is_empty() {
                return Ok(plan);
            }
            reruns.extend(missing);
        }
    }

    /// Loads, imports or deletes the sources the kernel does not hold.
    /// Returns the names put back and the sources that failed to load.
    async fn load(
        &mut self,
        cell: CellId,
        sources: &BTreeMap<String, Source>,
        disturbed: &mut BTreeSet<String>,
    ) -> Result<(Vec<String>, Vec<String>), NotebookError> {
        let mut values = Vec::new();
        let absent = self.unproduced(cell, sources)?;
        for name in &absent {
            values.push(RestoreValue::Delete {
                name: name.clone(),
                delete: true,
            });
        }
        for (name, source) in sources {
            if self.live.get(name) == Some(&source.identity) {
                continue;
            }
            match &source.restore {
                Restore::Load(value) => values.push(value.clone()),
                Restore::Delete if self.live.contains_key(name) => {
                    values.push(RestoreValue::Delete {
                        name: name.clone(),
                        delete: true,
                    });
                }
                Restore::Delete | Restore::Rerun | Restore::External => {}
            }
        }
        if values.is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        let Some(kernel) = self.kernel.as_mut() else {
            return Err(NotebookError::Kernel {
                cell: Some(cell),
                source: KernelError::Closed,
            });
        };
        let report = kernel.restore(&values).await;
        self.sync_generation();
        let report = report.map_err(|source| NotebookError::Kernel {
            cell: Some(cell),
            source,
        })?;
        // A name given a new object no longer shares it with the names
        // of its group in the kernel: they are no longer known to hold
        // their values as a fresh run would (a change through one would
        // not show on the other), so a cell that needs them restores them.
        // Not a name this cell takes from a cell before the one `name` comes
        // from: a blob is loaded only for a name that shared nothing at the
        // end of its cell, so a fresh run has them apart too (`b = a` then
        // `a = [5]`: loading `a` must not send `b` back to be recomputed).
        for name in &report.restored {
            let producer = sources.get(name).map(|source| source.producer);
            for group in &mut self.groups {
                if group.remove(name) {
                    for other in group.iter() {
                        if producer.is_some_and(|producer| earlier(sources, other, producer)) {
                            continue;
                        }
                        if self.live.remove(other).is_some() {
                            disturbed.insert(other.clone());
                        }
                    }
                }
            }
        }
        for name in &report.restored {
            if absent.contains(name) {
                self.live.remove(name);
                disturbed.insert(name.clone());
            } else if let Some(source) = sources.get(name) {
                if source.identity == DELETED {
                    self.live.remove(name);
                } else {
                    self.live.insert(name.clone(), source.identity.clone());
                }
            }
        }
        let mut failed = Vec::new();
        for failure in report.failed {
            tracing::warn!(
                cell = cell.get(),
                name = failure.name,
                "cannot load a stored value, recomputing it: {}",
                failure.reason
            );
            self.live.remove(&failure.name);
            if let Some(Source {
                restore: Restore::Load(RestoreValue::Blob { blob, .. }),
                ..
            }) = sources.get(&failure.name)
            {
                self.bad_blobs.insert(blob.clone());
            }
            failed.push(failure.name);
        }
        Ok((report.restored, failed))
    }

    /// Names the kernel holds that `cell` may read (by its analysis or its
    /// last run) but that no cell before it produces: left there by a later
    /// cell, or by an earlier version of a cell (a name an edit renamed). A
    /// fresh run of the cells would not have them: they are deleted before
    /// the cell runs, so that reading one raises `NameError` (or finds the
    /// builtin it shadowed). For a cell that defeats the analysis
    /// (`globals()`, `exec`), every such name the kernel holds.
    fn unproduced(
        &self,
        cell: CellId,
        sources: &BTreeMap<String, Source>,
    ) -> Result<BTreeSet<String>, NotebookError> {
        let node = self.graph.cell(cell)?;
        let candidates: Vec<&String> = if node.effects().opaque {
            self.live.keys().collect()
        } else {
            let analysis = node.analysis();
            analysis
                .reads
                .iter()
                .chain(&analysis.builtins)
                .chain(&analysis.mutations)
                .chain(
                    node.trace()
                        .into_iter()
                        .flat_map(|trace| trace.reads.iter().chain(&trace.mutated)),
                )
                .collect()
        };
        Ok(candidates
            .into_iter()
            .filter(|name| {
                !name.starts_with('@')
                    && !name.starts_with(FILE_PREFIX)
                    && self.live.contains_key(*name)
                    && !sources.contains_key(*name)
                    && !self.has_producer(cell, name)
            })
            .cloned()
            .collect())
    }

    /// Whether a source in `sources` was `disturbed` (taken out of `live`)
    /// and is not back as it should be.
    fn unsettled(&self, sources: &BTreeMap<String, Source>, disturbed: &BTreeSet<String>) -> bool {
        sources.iter().any(|(name, source)| {
            disturbed.contains(name)
                && match source.restore {
                    Restore::Delete => self.live.contains_key(name),
                    Restore::External => false,
                    Restore::Load(_) | Restore::Rerun => {
                        self.live.get(name) != Some(&source.identity)
                    }
                }
        })
    }

    /// Blobs the kernel has just written are whole again: no longer bad.
    fn forget_rewritten(&mut self, result: &CellResult) {
        for summary in result.outputs.values() {
            if let Stored::Blob {
                hash,
                written: true,
                ..
            } = &summary.stored
            {
                self.bad_blobs.remove(hash);
            }
        }
    }

    /// Puts into the kernel what `cell` needs, re-running producers of
    /// values that have no blob.
    async fn prepare(
        &mut self,
        cell: CellId,
        sources: &BTreeMap<String, Source>,
    ) -> Result<Prepared, NotebookError> {
        let mut prepared = Prepared::default();
        let mut sources = sources.clone();
        // Names taken out of `live` meanwhile (deleted as unproduced, or
        // parted from the object they shared): a plan that counted on them
        // is made again.
        let mut disturbed = BTreeSet::new();
        // A blob that fails to load is marked bad and the plan is made again
        // (its producer is re-run instead); bounded, as each round marks one.
        for _ in 0..8 {
            let plan = self.plan(&sources)?;
            let mut retry = false;
            for (rerun, rerun_sources) in plan {
                let (restored, failed) = self.load(rerun, &rerun_sources, &mut disturbed).await?;
                prepared.restored.extend(restored);
                if !failed.is_empty() || self.unsettled(&rerun_sources, &disturbed) {
                    retry = true;
                    break;
                }
                let groups = self.groups.clone();
                // Snapshots are skipped for a recomputation unless a blob of
                // the producer is missing (or was found corrupt and removed):
                // writing the value again heals the store.
                let heal = self.records.get(&rerun).is_some_and(|record| {
                    record
                        .blobs()
                        .any(|hash| self.bad_blobs.contains(hash) || !self.blobs.contains(hash))
                });
                let result =
                    self.kernel_run(rerun, heal)
                        .await
                        .map_err(|source| NotebookError::Kernel {
                            cell: Some(cell),
                            source,
                        })?;
                self.forget_rewritten(&result);
                // A cell whose last run failed binds what it bound before
                // the failure, as sequential Python does: re-running it
                // restores those names if it fails the same way again. If
                // it now runs through, what it bound may differ from what
                // it had bound when it failed (a name bound before and after
                // the failing line).
                let recorded = self.records.get(&rerun).and_then(|r| r.error.clone());
                if result.error.is_none() && recorded.is_some() {
                    let names = self
                        .records
                        .get(&rerun)
                        .map(|record| record.outputs.keys().cloned().collect())
                        .unwrap_or_default();
                    return Err(NotebookError::Unsettled { cell, names });
                }
                if let Some(error) = result.error
                    && recorded != Some(error.to_string())
                {
                    return Err(NotebookError::Restore {
                        cell,
                        producer: rerun,
                        error: Box::new(error),
                    });
                }
                prepared.recomputed.push(rerun);
                // A cell re-run out of order rebinds names that other names
                // of the kernel shared objects with: those are parted from
                // them, and restored again when needed.
                let rebound: BTreeSet<&String> = match &result.trace {
                    Some(trace) => trace.bound.iter().chain(&trace.deleted).collect(),
                    None => result.outputs.keys().chain(&result.deleted).collect(),
                };
                for group in &groups {
                    if group.iter().any(|name| rebound.contains(name)) {
                        for other in group.iter().filter(|name| !rebound.contains(name)) {
                            // As in `load`: a name the cell takes from a cell
                            // before this one is apart from what this one
                            // binds in a fresh run too, unless this run's
                            // own sharing says otherwise (and that it makes).
                            if earlier(&sources, other, rerun) {
                                continue;
                            }
                            if self.live.remove(other).is_some() {
                                disturbed.insert(other.clone());
                            }
                        }
                    }
                }
                let record = self.records.get(&rerun).cloned();
                for name in result.outputs.keys() {
                    match record.as_ref().and_then(|r| r.identity(name)) {
                        Some(identity) => self.live.insert(name.clone(), identity),
                        None => self.live.remove(name),
                    };
                }
                for name in &result.deleted {
                    self.live.remove(name);
                }
                if let Some(record) = &record {
                    apply_states(&mut self.live, record);
                }
            }
            if retry {
                sources = self.sources(cell)?;
                continue;
            }
            let (restored, failed) = self.load(cell, &sources, &mut disturbed).await?;
            prepared.restored.extend(restored);
            if failed.is_empty() && !self.unsettled(&sources, &disturbed) {
                return Ok(prepared);
            }
            sources = self.sources(cell)?;
        }
        let names = sources
            .iter()
            .filter(|(name, source)| match source.restore {
                Restore::Delete => self.live.contains_key(*name),
                Restore::External => false,
                Restore::Load(_) | Restore::Rerun => self.live.get(*name) != Some(&source.identity),
            })
            .map(|(name, _)| name.clone())
            .collect();
        Err(NotebookError::Unsettled { cell, names })
    }

    pub(crate) async fn run_prepared(
        &mut self,
        cell: CellId,
        sources: &BTreeMap<String, Source>,
        key: String,
    ) -> Result<CellExecution, NotebookError> {
        let node = self.graph.cell(cell)?;
        let version = node.current_version().number;
        let source_hash = sha256_hex(node.source().as_bytes());
        let inputs: BTreeMap<String, String> = sources
            .iter()
            .map(|(name, source)| (name.clone(), source.identity.clone()))
            .collect();
        let started_at = Timestamp::now();
        let clock = Instant::now();
        let failed_record = |error: String| CellRecord {
            version,
            source_hash: source_hash.clone(),
            cache_key: key.clone(),
            inputs: inputs.clone(),
            outputs: BTreeMap::new(),
            deleted: BTreeSet::new(),
            error: Some(error),
            stdout: CapturedOutput::default(),
            stderr: CapturedOutput::default(),
            display: None,
            read_check: None,
            trace: None,
            external: BTreeSet::new(),
            duration_us: 0,
            ran_at: started_at,
        };

        let outcome = match self.ensure_kernel().await {
            Ok(()) => self.prepare(cell, sources).await,
            Err(error) => Err(error),
        };
        let prepared = match outcome {
            Ok(prepared) => prepared,
            Err(error) => {
                let message = format!("could not prepare the cell: {error}");
                self.fail(cell, failed_record(message), started_at, clock)?;
                return Err(error);
            }
        };
        let result = match self.kernel_run(cell, true).await {
            Ok(result) => {
                self.forget_rewritten(&result);
                result
            }
            Err(source) => {
                self.fail(cell, failed_record(source.to_string()), started_at, clock)?;
                return Err(NotebookError::Kernel {
                    cell: Some(cell),
                    source,
                });
            }
        };
        let read_check = result.reads.as_ref().map(|observed| {
            let analysis = self.graph.cell(cell).map(|n| n.analysis().clone());
            read_check(observed, analysis.ok().as_ref(), result.is_ok())
        });
        if let Some(check) = &read_check
            && !check.is_consistent()
        {
            tracing::info!(
                cell = cell.get(),
                unexpected = ?check.unexpected,
                "the cell read names its static analysis did not predict"
            );
            // Correct the graph: the producers of those names become explicit
            // dependencies, so that changing them makes this cell stale.
            for name in &check.unexpected {
                let producer = self
                    .records
                    .range(..cell)
                    .rev()
                    .find(|(_, record)| record.identity(name).is_some())
                    .map(|(&id, _)| id);
                if let Some(producer) = producer {
                    self.graph.add_edge(producer, cell)?;
                }
            }
        }
        // What the run depended on beyond its key: with no producer, outside
        // the notebook (kept, so that a producer appearing later is seen);
        // with one, the key was incomplete (the dependency was found by
        // this very trace) and the run is not cached under it.
        let mut external = BTreeSet::new();
        let mut complete = true;
        if let Some(trace) = &result.trace {
            for name in trace_dependencies(trace) {
                if inputs.contains_key(&name) {
                    continue;
                }
                if self.has_producer(cell, &name) {
                    complete = false;
                } else {
                    external.insert(name);
                }
            }
        }
        let record = CellRecord {
            version,
            source_hash,
            cache_key: key.clone(),
            inputs,
            outputs: result.outputs.clone(),
            deleted: result.deleted.clone(),
            error: result.error.as_ref().map(ToString::to_string),
            stdout: result.stdout.clone(),
            stderr: result.stderr.clone(),
            display: result.display.clone(),
            read_check: read_check.clone(),
            trace: result.trace.clone(),
            external,
            duration_us: result.duration_us,
            ran_at: started_at,
        };
        apply_record(&mut self.live, &record);
        if let Some(trace) = &result.trace {
            // Before `record_run`, so that cells the run newly links to this
            // one are made stale with the others downstream.
            self.graph.record_trace(cell, trace.clone())?;
        }
        let run = CellRun {
            outcome: match &record.error {
                None => CellOutcome::Ok,
                Some(error) => CellOutcome::Failed {
                    error: error.clone(),
                },
            },
            started_at,
            duration_ms: millis(clock),
            outputs: output_summary(&record),
        };
        self.graph.record_run(cell, run)?;
        if record.is_ok() && complete {
            self.cache.insert(key, record.clone());
            self.trim_cache();
        }
        self.records.insert(cell, record);
        Ok(CellExecution {
            cell,
            result,
            recomputed: prepared.recomputed,
            restored: prepared.restored,
            read_check,
        })
    }

    fn fail(
        &mut self,
        cell: CellId,
        record: CellRecord,
        started_at: Timestamp,
        clock: Instant,
    ) -> Result<(), NotebookError> {
        let run = CellRun {
            outcome: CellOutcome::Failed {
                error: record.error.clone().unwrap_or_default(),
            },
            started_at,
            duration_ms: millis(clock),
            outputs: OutputSummary::default(),
        };
        self.graph.record_run(cell, run)?;
        self.records.insert(cell, record);
        Ok(())
    }

    /// Keeps at most max(256, 4 × cells) cached runs, dropping the oldest.
    fn trim_cache(&mut self) {
        let limit = (self.graph.len() * 4).max(256);
        if self.cache.len() <= limit {
            return;
        }
        let mut by_age: Vec<(Timestamp, String)> = self
            .cache
            .iter()
            .map(|(key, record)| (record.ran_at, key.clone()))
            .collect();
        by_age.sort();
        let excess = self.cache.len() - limit;
        for (_, key) in by_age.into_iter().take(excess) {
            self.cache.remove(&key);
        }
    }

    /// The status of `cell` in the graph.
    pub(crate) fn status(&self, cell: CellId) -> Result<CellStatus, NotebookError> {
        Ok(self.graph.cell(cell)?.status())
    }
}

/// A notebook as written: its parts borrowed, or redacted as JSON.
#[derive(Serialize)]
struct SavedRef<G, R, C> {
    format: u32,
    graph: G,
    records: R,
    cache: C,
}

/// `part` as JSON with every registered secret redacted.
fn redacted(part: &impl Serialize) -> Result<serde_json::Value, serde_json::Error> {
    let mut value = serde_json::to_value(part)?;
    harness::secrets::redact_json(&mut value);
    Ok(value)
}

/// Refuses to replace `path` unless it is absent or a notebook of this
/// format (as [`Notebook::encode`] writes it: `{"format":1,` first).
fn check_replaceable(path: &Path) -> Result<(), NotebookError> {
    use std::io::Read;

    let refuse = |found: &str| {
        Err(NotebookError::NotANotebook {
            path: path.to_path_buf(),
            found: found.to_owned(),
        })
    };
    let file = match crate::blobs::open_regular(path, false) {
        Ok(Some(file)) => file,
        Ok(None) => return refuse("not a regular file"),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) if crate::blobs::is_link_error(&error) => {
            return refuse("a symbolic link");
        }
        Err(source) => {
            return Err(NotebookError::Io {
                action: "read",
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let mut head = Vec::new();
    file.take(32)
        .read_to_end(&mut head)
        .map_err(|source| NotebookError::Io {
            action: "read",
            path: path.to_path_buf(),
            source,
        })?;
    let ours = format!("{{\"format\":{FORMAT_VERSION}");
    if head.starts_with(ours.as_bytes()) && matches!(head.get(ours.len()), Some(b',' | b'}')) {
        Ok(())
    } else if head.starts_with(b"{\"format\":") {
        refuse("a notebook of another format version")
    } else if head.is_empty() {
        refuse("an empty file")
    } else {
        refuse("not a notebook file")
    }
}

/// The notebook saved in `dir`, read from its file. The file is opened
/// without waiting: a FIFO or a device in its place is an error, not a read
/// that never ends. One over [`MAX_NOTEBOOK_BYTES`] is refused by its size
/// before it is read, and never read past the limit (it may grow).
fn read_saved(dir: &Path) -> Result<Saved, NotebookError> {
    use std::io::Read;

    let path = dir.join(NOTEBOOK_FILE);
    let io = |source| NotebookError::Io {
        action: "read",
        path: path.clone(),
        source,
    };
    let too_large = |bytes: u64| NotebookError::TooLarge {
        path: path.clone(),
        bytes,
        limit: MAX_NOTEBOOK_BYTES,
    };
    let file = crate::blobs::open_regular(&path, true)
        .map_err(io)?
        .ok_or_else(|| {
            io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a regular file",
            ))
        })?;
    let size = file.metadata().map_err(io)?.len();
    if size > MAX_NOTEBOOK_BYTES {
        return Err(too_large(size));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    file.take(MAX_NOTEBOOK_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    let read = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    if read > MAX_NOTEBOOK_BYTES {
        return Err(too_large(read));
    }
    decode(&bytes, &path.display().to_string())
}

fn decode(bytes: &[u8], location: &str) -> Result<Saved, NotebookError> {
    #[derive(Deserialize)]
    struct Version {
        format: u32,
    }
    let version: Version =
        serde_json::from_slice(bytes).map_err(|error| NotebookError::Format {
            location: location.to_owned(),
            detail: error.to_string(),
        })?;
    if version.format != FORMAT_VERSION {
        return Err(NotebookError::Format {
            location: location.to_owned(),
            detail: format!(
                "format version {} (this build reads {FORMAT_VERSION})",
                version.format
            ),
        });
    }
    let saved: Saved = serde_json::from_slice(bytes).map_err(|error| NotebookError::Format {
        location: location.to_owned(),
        detail: error.to_string(),
    })?;
    // The graph checked its own shape as it was read (see
    // `ExecutionStateGraph`'s `Deserialize`); records belong to its cells.
    if let Some(cell) = saved
        .records
        .keys()
        .find(|&&cell| saved.graph.cell(cell).is_err())
    {
        return Err(NotebookError::Format {
            location: location.to_owned(),
            detail: format!(
                "a record of cell {cell}, which the graph of {} cells does not have",
                saved.graph.len()
            ),
        });
    }
    for record in saved.records.values().chain(saved.cache.values()) {
        if let Some(bad) = record.blobs().find(|h| !crate::blobs::is_valid_hash(h)) {
            return Err(NotebookError::Format {
                location: location.to_owned(),
                detail: format!("invalid blob hash {bad:?}"),
            });
        }
    }
    Ok(saved)
}

/// Whether `sources` takes `name` from a cell before `producer`.
fn earlier(sources: &BTreeMap<String, Source>, name: &str, producer: CellId) -> bool {
    sources
        .get(name)
        .is_some_and(|source| source.producer < producer)
}

/// Applies `sources` to a simulated namespace; producers of values that are
/// neither live nor loadable go to `missing`.
fn simulate(
    live: &mut BTreeMap<String, String>,
    sources: &BTreeMap<String, Source>,
    missing: &mut BTreeSet<CellId>,
) {
    for (name, source) in sources {
        if live.get(name) == Some(&source.identity) {
            continue;
        }
        match source.restore {
            Restore::Load(_) => {
                live.insert(name.clone(), source.identity.clone());
            }
            Restore::Delete => {
                live.remove(name);
            }
            Restore::Rerun => {
                missing.insert(source.producer);
            }
            Restore::External => {}
        }
    }
}

/// Updates a namespace model with what a run wrote and deleted.
fn apply_record(live: &mut BTreeMap<String, String>, record: &CellRecord) {
    for name in record.outputs.keys() {
        match record.identity(name) {
            Some(identity) => live.insert(name.clone(), identity),
            None => live.remove(name),
        };
    }
    for name in &record.deleted {
        live.remove(name);
    }
    apply_states(live, record);
}

/// Updates a namespace model with the module states (`@...`) a run changed.
fn apply_states(live: &mut BTreeMap<String, String>, record: &CellRecord) {
    if let Some(trace) = &record.trace {
        for name in trace.mutated.iter().filter(|name| name.starts_with('@')) {
            live.insert(name.clone(), state_identity(record, name));
        }
    }
}

/// What a run's trace shows it depended on: the names (and `@` states) it
/// read, those it changed in place (their new value depends on the old),
/// and the files it read, as `file:PATH`.
fn trace_dependencies(trace: &CellTrace) -> impl Iterator<Item = String> + '_ {
    trace.inputs().chain(trace.mutated.iter().cloned())
}

/// The identity of module state `name` as the run of `record` left it.
fn state_identity(record: &CellRecord, name: &str) -> String {
    let mut hasher = Hasher::default();
    hasher
        .part(record.cache_key.as_bytes())
        .part(name.as_bytes());
    format!("state:{}", hasher.finish())
}

fn read_check(
    observed: &BTreeSet<String>,
    analysis: Option<&crate::CellAnalysis>,
    succeeded: bool,
) -> ReadCheck {
    let Some(analysis) = analysis else {
        return ReadCheck {
            observed: observed.clone(),
            ..ReadCheck::default()
        };
    };
    let unexpected = observed
        .iter()
        .filter(|name| !analysis.reads.contains(*name) && !analysis.builtins.contains(*name))
        .cloned()
        .collect();
    let unobserved = if succeeded {
        analysis.reads.difference(observed).cloned().collect()
    } else {
        BTreeSet::new()
    };
    ReadCheck {
        observed: observed.clone(),
        unexpected,
        unobserved,
    }
}

/// A cell's source as the kernel runs it: IPython escape lines (which the
/// analysis, with [`AnalysisOptions::ipython`], skipped) become `pass`,
/// except the timing magics (`%time`, `%timeit`, `%prun`), whose statement
/// runs once, so that what it reads and binds is in the namespace and in
/// the trace.
///
/// ```
/// use harness_code::{AnalysisOptions, analyze_cell_with};
/// use harness_code::notebook::runnable_source;
///
/// let source = "%matplotlib inline\n%timeit -n 3 total = sum(xs)";
/// let analysis = analyze_cell_with(source, AnalysisOptions { ipython: true }).unwrap();
/// assert_eq!(
///     runnable_source(source, &analysis),
///     "pass  # harness: IPython command skipped\ntotal = sum(xs)\n"
/// );
/// ```
pub fn runnable_source(source: &str, analysis: &crate::CellAnalysis) -> String {
    let escapes = &analysis.ipython_escapes;
    if escapes.is_empty() {
        return source.to_owned();
    }
    let timed: BTreeMap<u32, &str> = escapes
        .iter()
        .filter_map(|e| timed_statement(&e.command).map(|statement| (e.line, statement)))
        .collect();
    let lines: BTreeSet<u32> = escapes.iter().map(|e| e.line).collect();
    let mut out = String::with_capacity(source.len());
    for (index, line) in source.lines().enumerate() {
        let number = u32::try_from(index + 1).unwrap_or(u32::MAX);
        let indent = &line[..line.len() - line.trim_start().len()];
        if let Some(statement) = timed.get(&number) {
            out.push_str(indent);
            out.push_str(statement);
        } else if lines.contains(&number) {
            out.push_str(indent);
            out.push_str("pass  # harness: IPython command skipped");
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

/// The Python statement of a timing line magic (`%time x = f()`,
/// `%timeit -n 10 f(xs)`, `%prun -l 5 f()`), without the magic and its
/// options; `None` for other commands.
fn timed_statement(command: &str) -> Option<&str> {
    let rest = command.trim_start().strip_prefix('%')?;
    let (magic, mut rest) = rest.split_once(char::is_whitespace)?;
    // Options that take a value as the next word.
    let with_value: &[&str] = match magic {
        "time" => &[],
        "timeit" => &["-n", "-r", "-p"],
        "prun" => &["-s", "-l", "-D", "-T"],
        _ => return None,
    };
    loop {
        rest = rest.trim_start();
        if !rest.starts_with('-') || magic == "time" {
            break;
        }
        let (option, after) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        rest = after;
        if with_value.contains(&option) {
            rest = rest.trim_start();
            rest = rest
                .split_once(char::is_whitespace)
                .map_or("", |(_, after)| after);
        }
    }
    let statement = rest.trim();
    (!statement.is_empty()).then_some(statement)
}

/// Files past this size are identified by size and modification time
/// rather than read whole: the host reads what cells wrote, and a cell
/// can write many large files.
const HASHED_FILE_BYTES: u64 = 32 << 20;

/// Bytes of files read to identify them for one cell's sources or one
/// plan of re-runs; past it, files are identified by size and
/// modification time (a cell's trace names at most 256 files, and a plan
/// covers many cells).
const HASHED_BYTES_PER_PLAN: u64 = 256 << 20;

/// The identities of the files cells wrote ([`file_identity_within`]), each file
/// identified once, and at most [`HASHED_BYTES_PER_PLAN`] bytes read in all.
/// One lives as long as nothing runs (the sources of one cell, one plan).
#[derive(Debug, Default)]
pub(crate) struct FileIdentities {
    known: BTreeMap<String, String>,
    read: u64,
}

impl FileIdentities {
    /// The identity of the file at `path` (as the kernel reported it).
    pub(crate) fn identity(&mut self, path: &str) -> String {
        if let Some(known) = self.known.get(path) {
            return known.clone();
        }
        let budget = HASHED_BYTES_PER_PLAN.saturating_sub(self.read);
        let (identity, read) = file_identity_within(Path::new(path), budget);
        self.read = self.read.saturating_add(read);
        self.known.insert(path.to_owned(), identity.clone());
        identity
    }
}

/// The identity of a file a cell wrote and a later cell reads
/// ([`file_identity_within`] with the whole budget).
#[cfg(test)]
fn file_identity(path: &Path) -> String {
    file_identity_within(path, HASHED_BYTES_PER_PLAN).0
}

/// The identity of a file a cell wrote and a later cell reads, and how
/// many bytes were read for it: the SHA-256 of its content (of its size
/// and modification time past [`HASHED_FILE_BYTES`] or `budget`),
/// `file:absent`, `file:link:…` (a symbolic link, identified by where it
/// points, never followed), or `file:special`, never read: what is not a
/// regular file (a FIFO, a device), and anything of the host's kernel
/// interfaces (`/proc`, `/sys`, `/dev`, and file systems of their kinds
/// mounted elsewhere), whose content is the host's, not a cell's.
///
/// The path comes from the kernel, so a cell can forge it: its directory
/// is resolved first (a link a cell made to `/proc/self` is seen as
/// `/proc`), then the file is opened without following any link
/// (`openat2` with `RESOLVE_NO_SYMLINKS` on Linux, else `O_NOFOLLOW` on
/// the last component) and without waiting on a FIFO, and checked with
/// `fstat` before a byte is read.
fn file_identity_within(path: &Path, budget: u64) -> (String, u64) {
    use std::io::Read;

    let special = || ("file:special".to_owned(), 0);
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return special();
    };
    if !path.is_absolute() {
        return special();
    }
    let real = match std::fs::canonicalize(parent) {
        Ok(parent) => parent.join(name),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return ("file:absent".to_owned(), 0);
        }
        Err(error) => return (format!("file:unreadable:{:?}", error.kind()), 0),
    };
    if ["/proc", "/sys", "/dev"]
        .iter()
        .any(|system| real.starts_with(system))
    {
        return special();
    }
    let file = match open_written(&real) {
        Ok(Some(file)) => file,
        Ok(None) => return special(),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return ("file:absent".to_owned(), 0);
        }
        Err(error) if crate::blobs::is_link_error(&error) => {
            let target = std::fs::read_link(&real).unwrap_or_default();
            let mut hasher = Hasher::default();
            hasher.part(target.as_os_str().as_encoded_bytes());
            return (format!("file:link:{}", hasher.finish()), 0);
        }
        Err(error) => return (format!("file:unreadable:{:?}", error.kind()), 0),
    };
    if is_kernel_interface(&file) {
        return special();
    }
    let mut hasher = Hasher::default();
    let metadata = file.metadata();
    let size = metadata.as_ref().map_or(0, std::fs::Metadata::len);
    if size > HASHED_FILE_BYTES || size > budget {
        let modified = metadata
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        hasher
            .part(&size.to_le_bytes())
            .part(&modified.to_le_bytes());
        return (format!("file:large:{}", hasher.finish()), 0);
    }
    let mut content = Vec::new();
    match file.take(size.min(budget)).read_to_end(&mut content) {
        Ok(read) => {
            hasher.part(&content);
            (
                format!("file:{}", hasher.finish()),
                u64::try_from(read).unwrap_or(u64::MAX),
            )
        }
        Err(error) => (format!("file:unreadable:{:?}", error.kind()), 0),
    }
}

/// Opens `path` (whose directories have been resolved) for reading if it
/// is a regular file, following no link at all and not waiting on a FIFO.
#[cfg(target_os = "linux")]
fn open_written(path: &Path) -> std::io::Result<Option<std::fs::File>> {
    use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};

    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    let resolve = ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    let fd = match rustix::fs::openat2(rustix::fs::CWD, path, flags, Mode::empty(), resolve) {
        // Kernels before 5.6 (or a seccomp filter) have no `openat2`.
        Err(rustix::io::Errno::NOSYS | rustix::io::Errno::PERM) => {
            return crate::blobs::open_regular(path, false);
        }
        other => other?,
    };
    let stat = rustix::fs::fstat(&fd)?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Ok(None);
    }
    Ok(Some(std::fs::File::from(fd)))
}

#[cfg(not(target_os = "linux"))]
fn open_written(path: &Path) -> std::io::Result<Option<std::fs::File>> {
    crate::blobs::open_regular(path, false)
}

/// Whether `file` is on a file system of the kernel's interfaces (procfs,
/// sysfs and the like, wherever mounted): its "regular files" are the
/// host's state.
#[cfg(target_os = "linux")]
fn is_kernel_interface(file: &std::fs::File) -> bool {
    // From linux/magic.h.
    const KINDS: [i128; 11] = [
        0x9fa0,      // proc
        0x6265_6572, // sysfs
        0x6462_6720, // debugfs
        0x7472_6163, // tracefs
        0x7363_6673, // securityfs
        0x0027_e0eb, // cgroup
        0x6367_7270, // cgroup2
        0xcafe_4a11, // bpf
        0xde5e_81e4, // efivarfs
        0x6265_6570, // configfs
        0x6165_676c, // pstore
    ];
    rustix::fs::fstatfs(file).is_ok_and(|fs| KINDS.contains(&i128::from(fs.f_type)))
}

#[cfg(not(target_os = "linux"))]
fn is_kernel_interface(_file: &std::fs::File) -> bool {
    false
}

fn output_summary(record: &CellRecord) -> OutputSummary {
    let mut text: String = record.stdout.text.chars().take(SUMMARY_TEXT).collect();
    if let Some(display) = &record.display {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(display);
    }
    OutputSummary {
        text,
        values: record
            .outputs
            .iter()
            .map(|(name, value)| (name.clone(), value.short()))
            .collect(),
    }
}

fn millis(clock: Instant) -> u64 {
    u64::try_from(clock.elapsed().as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::{FileIdentities, HASHED_BYTES_PER_PLAN, file_identity, timed_statement};

    #[test]
    fn a_kernel_error_names_its_cell_once() {
        use crate::kernel::{Activity, KernelError};
        let died = |during| KernelError::Died {
            during,
            status: "exit status: 3".into(),
            code: Some(3),
            signal: None,
            stderr: String::new(),
            restarted: true,
        };
        let text = |cell: Option<u32>, source| {
            super::NotebookError::Kernel {
                cell: cell.map(crate::CellId::new),
                source,
            }
            .to_string()
        };
        let said = text(Some(1), died(Activity::Cell(1)));
        assert_eq!(said.matches("cell 1").count(), 1, "{said}");
        assert!(said.starts_with("the kernel died during cell 1"), "{said}");
        // Cell 1 while restoring for it; cell 1 while cell 12 ran.
        for (cell, during) in [(1, Activity::Restore), (1, Activity::Cell(12))] {
            let said = text(Some(cell), died(during));
            assert!(said.starts_with("cell 1: the kernel died"), "{said}");
        }
        assert!(text(None, died(Activity::Startup)).starts_with("kernel: "));
    }

    /// Files of the host's kernel interfaces are identified without being
    /// read (their content is the host's, not something a cell wrote):
    /// named directly, or through a directory link a cell made.
    #[cfg(target_os = "linux")]
    #[test]
    fn files_of_the_hosts_kernel_interfaces_are_never_hashed() {
        let dir = tempfile::tempdir().unwrap();
        let linked = dir.path().join("proc-self");
        std::os::unix::fs::symlink("/proc/self", &linked).unwrap();
        let mut paths = vec![
            Path::new("/proc/self/environ").to_path_buf(),
            Path::new("/proc/self/status").to_path_buf(),
            Path::new("/proc/version").to_path_buf(),
            linked.join("environ"),
            linked.join("cmdline"),
            Path::new("/dev/null").to_path_buf(),
        ];
        let sys = Path::new("/sys/kernel/uevent_seqnum");
        if sys.exists() {
            paths.push(sys.to_path_buf());
        }
        for path in paths {
            assert_eq!(file_identity(&path), "file:special", "{}", path.display());
        }
    }

    /// A link a cell put where it wrote a file is not followed: the host
    /// never hashes what the link points at.
    #[cfg(unix)]
    #[test]
    fn a_link_in_place_of_a_written_file_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("host-only.txt");
        std::fs::write(&secret, b"the host's data").unwrap();
        let plain = file_identity(&secret);
        assert!(plain.starts_with("file:") && plain.len() > 60, "{plain}");
        let link = dir.path().join("written.txt");
        std::os::unix::fs::symlink(&secret, &link).unwrap();
        let linked = file_identity(&link);
        assert!(linked.starts_with("file:link:"), "{linked}");
        // A link in a directory of the path is resolved, the file's own
        // link is not followed.
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        std::os::unix::fs::symlink(&secret, sub.join("written.txt")).unwrap();
        let via = dir.path().join("via");
        std::os::unix::fs::symlink(&sub, &via).unwrap();
        assert!(file_identity(&via.join("written.txt")).starts_with("file:link:"));
        assert_eq!(file_identity(&via.join("nothing")), "file:absent");
    }

    /// Within one plan a file is read once, and the bytes read in all are
    /// bounded: past the budget a file is identified by size and time.
    #[test]
    fn a_plan_reads_each_file_once_and_within_its_budget() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data.csv");
        std::fs::write(&path, b"a,b\n1,2\n").unwrap();
        let path = path.to_str().unwrap();
        let mut files = FileIdentities::default();
        let first = files.identity(path);
        assert!(first.starts_with("file:") && !first.starts_with("file:large:"));
        assert_eq!(files.read, 8);
        std::fs::write(path, b"changed\n").unwrap();
        assert_eq!(files.identity(path), first, "read again");
        assert_eq!(files.read, 8);
        // A fresh plan sees the change.
        assert_ne!(FileIdentities::default().identity(path), first);

        let mut spent = FileIdentities {
            read: HASHED_BYTES_PER_PLAN - 3,
            ..FileIdentities::default()
        };
        assert!(spent.identity(path).starts_with("file:large:"));
        assert_eq!(spent.read, HASHED_BYTES_PER_PLAN - 3);
    }

    #[test]
    fn timing_magics_give_their_statement() {
        assert_eq!(
            timed_statement("%time total = sum(xs)"),
            Some("total = sum(xs)")
        );
        assert_eq!(timed_statement("%timeit -n 10 -r 3 f(xs)"), Some("f(xs)"));
        assert_eq!(timed_statement("%timeit -n10 -q f(xs)"), Some("f(xs)"));
        assert_eq!(
            timed_statement("%prun -l 5 -s cumtime run()"),
            Some("run()")
        );
        assert_eq!(timed_statement("%time -x"), Some("-x"));
    }

    #[test]
    fn other_commands_give_nothing() {
        for command in [
            "%matplotlib inline",
            "!ls",
            "%timeit",
            "%timeit -n 10",
            "%who",
            "time x",
        ] {
            assert_eq!(timed_statement(command), None, "{command}");
        }
    }
}
