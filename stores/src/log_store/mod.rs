//! The log store: every session in one append-only log file, indexed in
//! memory, with group commit.

mod damage;
mod frame;
mod frames;

use crate::feed::Feed;
use crate::group::GroupFlush;
use crate::read_only::{Damage, ReadOnlyError};
use crate::record::{
    checkpoint_from_slice, head_from_slice, head_version, load_error, write_checkpoint, write_head,
};
use async_trait::async_trait;
use damage::Beyond;
use frame::{FRAME_HEAD, Frame, HEADER_LEN, MAX_PAYLOAD};
use frames::{Frames, Pool};
use harness::SessionId;
use harness::session::{
    Checkpoint, CheckpointKind, Commit, Created, SCHEMA_VERSION, SessionStore, StoreError,
    StoredRun,
};
use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{BufReader, BufWriter, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// The lock file: held exclusively by the one process that has the store
/// open.
const LOCK_FILE: &str = "LOCK";
/// Log files are `log.{generation}`.
const LOG_PREFIX: &str = "log.";
/// A compaction writes a session's checkpoints in frames of about this
/// size, the head in the last.
const COMPACT_FRAME: usize = 64 << 20;

/// How a [`LogStore`] reclaims space, and what it does with a log damaged
/// before its end; see [`LogStore::open_with`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogOptions {
    /// The log is rewritten with only what is live once it is larger than
    /// this many bytes *and* more than half of it is dead (heads since
    /// replaced, checkpoints since removed). Default: 64 MiB.
    pub compact_at: u64,
    /// Whether opening a log damaged before its end (a frame that is cut
    /// short, fails its checksum or does not parse, *followed by whole
    /// frames*) moves the damage and everything after it aside instead of
    /// refusing to open. Default: `false`.
    ///
    /// With `false`, such a log is refused as [`StoreError::Damaged`]
    /// (naming the log, the offset of the damaged frame, how many bytes
    /// and whole frames follow it) and nothing is changed. With `true`,
    /// the bytes from the damaged frame to the end of the log, the whole
    /// commits after it among them, are copied into
    /// `log.{generation}.tail-{offset}` and synced, the log is cut where
    /// the damage begins, a `tracing` warning says so and
    /// [`LogStore::set_aside`] names the file: the store then holds the
    /// commits before the damage only, and new commits follow them. The
    /// commits in the moved bytes are not read again; recovering them is
    /// done by hand. A log whose end only is damaged (nothing whole after
    /// it: a commit a crash cut short) is moved aside either way.
    ///
    /// The commits after the damage are not kept in the log (only the
    /// damaged bytes skipped) because what the damaged bytes held cannot
    /// be known: which sessions they committed to (the id is among them),
    /// which checkpoints they appended and which they removed. Keeping the
    /// commits after them would show sessions in states they never had: a
    /// head whose checkpoints are missing from under it, checkpoints a
    /// later snapshot was meant to replace.
    ///
    /// Keep a copy of the store's directory before opening it this way.
    ///
    /// ```
    /// use harness::session::StoreError;
    /// use harness_stores::{LogOptions, LogStore};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let store = match LogStore::open(dir.path()) {
    ///     Err(StoreError::Damaged { .. }) => {
    ///         // After keeping a copy of the directory:
    ///         LogStore::open_with(dir.path(), LogOptions::default().set_aside_damage(true))?
    ///     }
    ///     opened => opened?,
    /// };
    /// assert_eq!(store.set_aside(), None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub set_aside_damage: bool,
}

impl Default for LogOptions {
    fn default() -> Self {
        Self {
            compact_at: 64 << 20,
            set_aside_damage: false,
        }
    }
}

impl LogOptions {
    /// These options with another compaction threshold.
    #[must_use]
    pub fn compact_at(mut self, bytes: u64) -> Self {
        self.compact_at = bytes;
        self
    }

    /// These options with [`set_aside_damage`](Self::set_aside_damage)
    /// set: `true` opens a log damaged before its end by moving the damage
    /// and everything after it aside.
    #[must_use]
    pub fn set_aside_damage(mut self, yes: bool) -> Self {
        self.set_aside_damage = yes;
        self
    }
}

/// Sessions in one append-only log file, indexed in memory: the embedded
/// store built for many sessions committing at once.
///
/// Every commit is one checksummed frame appended to `log.{generation}` in
/// the store's directory (the frame layout is in the crate's source,
/// `log_store/frame.rs`). A commit is checked and indexed in memory on its
/// caller's thread, its frame added to a buffer of frames not yet written;
/// a durable commit then waits for a write of that buffer and an
/// `fdatasync` that started after it was added. One such write and sync
/// covers every commit added before it (group commit), so a thousand
/// sessions stepping at once share each sync rather than queue for one
/// each. Commits that are not durable are written with the next durable
/// one, at [`flush`](SessionStore::flush), once 256 KiB of them wait, and
/// when the last handle to the store is dropped; a crash of the process
/// before then loses them, as the [`SessionStore`] contract allows.
///
/// The index (each session's head, and where each checkpoint is in the
/// file) lives in memory and is rebuilt from the log when the store opens;
/// [`load`](SessionStore::load) reads no disk, and
/// [`checkpoints`](SessionStore::checkpoints) reads each checkpoint with
/// one positioned read. The heads are kept in memory as their JSON.
///
/// **Crashes and damage.** A frame is read whole or not at all: a commit
/// torn by a crash is cut short or fails its checksum, and nothing whole
/// follows it. When the store opens it moves such an end aside into
/// `log.{generation}.tail-{offset}` (a commit acknowledged as durable is
/// never among those bytes: its sync covered everything before it) and says
/// so in a `tracing` warning and in [`LogStore::set_aside`]. A damaged frame
/// that whole frames follow is damage before the end, which a crash of the
/// process does not leave. A power cut can: the disk may have stored some
/// pages of the last unsynced writes and not others, and a page it never
/// stored reads as zeros. Damage holding a page-aligned page of zeros is
/// taken for that, and moved aside as a torn end is, the whole frames
/// after it with it (none was acknowledged: their sync never returned).
/// Any other damage before the end is the disk damaging bytes it had
/// written, or something else writing into the file; the commits after it
/// may have been acknowledged as durable, so the store is not opened and
/// nothing is changed: [`StoreError::Damaged`] names the log, the offset of the
/// damaged frame, how many bytes and whole frames follow, and what to do;
/// [`LogOptions::set_aside_damage`] opens it with the commits before the
/// damage only, moving the rest aside as for a torn end. To tell the two
/// apart, opening looks past the damaged frame, at every byte, for a whole
/// frame (a length that fits, a table that adds up to it, a matching
/// crc32); random bytes form one with a probability below 2^-64 per
/// position. Damage to the last frame alone, with nothing after it,
/// cannot be told from a torn end and is moved aside like one.
///
/// A compaction checks the checksum of every frame of the log it replaces
/// (after copying what is live, so that a body damaged when it was copied
/// is found); on damage it keeps the log as it was, and the store takes no
/// more commits, so that opening it again reports the damage rather than
/// finding commits piled up after it. A write or sync that fails also
/// leaves the store refusing commits until it is opened again, since what
/// reached the disk is then unknown.
///
/// **Space.** Replaced heads and removed checkpoints stay in the file until
/// a compaction rewrites it with only what is live (see [`LogOptions`]):
/// into `log.{generation + 1}.tmp`, synced, renamed into place once every
/// frame of the old file is checked (see above), after which the old file
/// is deleted. It runs on a thread of its own; commits go on
/// meanwhile, and durable ones wait for it only while it copies what was
/// written to the old file since it started and swaps the files (not
/// while it copies the rest). A crash at any point
/// leaves either the old file or the new one whole; the store opens the
/// newest generation.
///
/// One process at a time can open a directory (it locks `LOCK`). On unix,
/// the directory is created `0700` and its files `0600`.
///
/// ```
/// use harness_stores::LogStore;
///
/// let dir = tempfile::tempdir()?;
/// let store = LogStore::open(dir.path())?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct LogStore {
    core: Arc<Core>,
    /// Shared by the handles only (not by compactions): the last one to go
    /// waits for a running compaction, so that the store is closed (its
    /// lock released) once the last handle is dropped.
    _closer: Arc<Closer>,
}

/// Waits for a running compaction when the last handle is dropped.
struct Closer {
    core: Arc<Core>,
}

impl Drop for Closer {
    fn drop(&mut self) {
        let compactor = guard(&self.core.compactor).take();
        if let Some(thread) = compactor {
            let _ = thread.join();
        }
    }
}

impl std::fmt::Debug for LogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogStore")
            .field("dir", &self.core.dir)
            .finish_non_exhaustive()
    }
}

/// A compaction copies the frames written to the old file while it ran in
/// pieces of this size.
const TAIL_PIECE: usize = 1 << 20;

/// How many bytes of commits that are not durable wait in memory before
/// they are written.
const PENDING_MAX: usize = 256 << 10;

/// The most memory of written frames kept to take the next ones, and the
/// largest encoding buffer a thread keeps between commits: a burst larger
/// than this allocates afresh rather than holding its memory.
const BUFFER_KEPT: usize = 8 << 20;

thread_local! {
    /// Where each thread encodes a commit's frame before adding it: kept
    /// between commits, so encoding allocates nothing once warm.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// What the store's handles share.
struct Core {
    dir: PathBuf,
    options: LogOptions,
    shared: Mutex<Shared>,
    /// Held while frames are written to the file (one write at a time, in
    /// order) and through a compaction.
    writing: Mutex<()>,
    /// A compaction is running.
    compacting: AtomicBool,
    /// The thread of the last compaction started.
    compactor: Mutex<Option<std::thread::JoinHandle<()>>>,
    group: GroupFlush,
    /// Where the damaged end of the log went when the store opened.
    set_aside: Option<PathBuf>,
    /// Opened with [`LogStore::open_read_only`]: commits are refused.
    read_only: bool,
    /// Held (locked) for as long as the store is open; `None` for a store
    /// opened read-only, which holds its lock only while it reads the log.
    _lock: Option<File>,
}

/// The log file, the frames not yet in it, and the index, under one lock.
struct Shared {
    file: Arc<File>,
    generation: u64,
    /// The log's length with every frame added: where the next one goes.
    len: u64,
    /// Bytes in the file; the frames after are in `inflight`, then
    /// `pending`.
    written: u64,
    /// Frames being written, from `written` on.
    inflight: Option<Arc<Frames>>,
    /// Frames added and not yet being written.
    pending: Frames,
    /// Chunks of frames written, for `pending` to take next.
    pool: Pool,
    /// Bytes of live bodies (heads and checkpoints in the index).
    live: u64,
    /// Don't try compacting again before the log is this long (after a
    /// compaction, or one that failed).
    next_compaction: u64,
    sessions: HashMap<SessionId, Entry>,
    /// The sessions created since the store opened, in order.
    created: Feed,
    /// Why the store takes no more commits: a failed write or sync.
    broken: Option<String>,
}

#[derive(Default)]
struct Entry {
    /// `None` while only a compaction's checkpoint frames are read.
    head: Option<Head>,
    checkpoints: Seqs,
}

/// A session's checkpoints by seq: a vector sorted by seq. A commit appends
/// seqs above every one there (a push), and removes few (old snapshots),
/// so this beats a tree in time and space.
#[derive(Default)]
struct Seqs(Vec<(u64, Loc)>);

impl Seqs {
    /// Where `seq` is, or would go.
    fn find(&self, seq: u64) -> Result<usize, usize> {
        match self.0.last() {
            Some((last, _)) if *last < seq => Err(self.0.len()),
            None => Err(0),
            _ => self.0.binary_search_by_key(&seq, |(s, _)| *s),
        }
    }

    /// Sets the body of `seq`; returns the one it replaces.
    fn insert(&mut self, seq: u64, loc: Loc) -> Option<Loc> {
        match self.find(seq) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, loc)),
            Err(i) => {
                self.0.insert(i, (seq, loc));
                None
            }
        }
    }

    fn remove(&mut self, seq: u64) -> Option<Loc> {
        self.find(seq).ok().map(|i| self.0.remove(i).1)
    }

    /// The checkpoints from `seq` on, in order.
    fn from(&self, seq: u64) -> &[(u64, Loc)] {
        &self.0[self.0.partition_point(|(s, _)| *s < seq)..]
    }

    fn locs(&self) -> impl Iterator<Item = &Loc> {
        self.0.iter().map(|(_, l)| l)
    }

    fn locs_mut(&mut self) -> impl Iterator<Item = &mut Loc> {
        self.0.iter_mut().map(|(_, l)| l)
    }
}

#[derive(Clone)]
struct Head {
    json: Arc<[u8]>,
    /// The version a commit compares with; `None` when this build cannot
    /// read the head (another schema version), which refuses commits on it.
    version: Option<u64>,
}

/// What a compaction copies of a session: its head and its checkpoints.
type Live = (SessionId, Option<Head>, Vec<(u64, Loc)>);

/// Where a checkpoint's body is in the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Loc {
    offset: u64,
    len: u32,
    snapshot: bool,
}

/// A commit, encoded by its caller.
struct Encoded<'a> {
    bytes: &'a [u8],
    frame: Frame,
    expected: Option<u64>,
    /// The new head's version, `None` if this build could not read it back.
    version: Option<u64>,
}

fn guard<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The index is changed only after each check, with no panic point in
    // between, so it is whole whatever panicked while holding it.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn io_error(what: &str, path: &Path, e: &std::io::Error) -> StoreError {
    StoreError::backend(format!("log store: cannot {what} {}: {e}", path.display()))
}

fn task_error(e: &tokio::task::JoinError) -> StoreError {
    StoreError::backend(format!("log store: a disk task failed: {e}"))
}

impl LogStore {
    /// Opens (or creates) the store in directory `dir`, with the default
    /// [`LogOptions`]. Blocks while it reads the log; call it before
    /// starting work, or inside `spawn_blocking`.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(dir, LogOptions::default())
    }

    /// Opens (or creates) the store in `dir` with `options`.
    pub fn open_with(dir: impl AsRef<Path>, options: LogOptions) -> Result<Self, StoreError> {
        let dir = dir.as_ref().to_path_buf();
        create_dir(&dir).map_err(|e| io_error("create the store directory", &dir, &e))?;
        let lock_path = dir.join(LOCK_FILE);
        let lock = create_file(&lock_path, false)
            .map_err(|e| io_error("open the lock file", &lock_path, &e))?;
        lock.try_lock().map_err(|e| match e {
            fs::TryLockError::WouldBlock => StoreError::backend(format!(
                "log store: {} is open in another process (its LOCK file is locked)",
                dir.display()
            )),
            fs::TryLockError::Error(e) => io_error("lock", &lock_path, &e),
        })?;
        let (generation, stale) = generations(&dir)?;
        let (generation, opened) = match generation {
            Some(generation) => (
                generation,
                open_log(&dir, generation, options.set_aside_damage)?,
            ),
            None => (1, create_log(&dir, 1)?),
        };
        let (file, len, sessions, live, set_aside) = opened;
        // Only once the newest generation has been read: an older one is
        // what a compaction left when a crash came before it deleted it.
        for path in stale {
            fs::remove_file(&path).map_err(|e| io_error("delete the stale log", &path, &e))?;
        }
        let core = Arc::new(Core {
            dir,
            options,
            shared: Mutex::new(Shared {
                file: Arc::new(file),
                generation,
                len,
                written: len,
                inflight: None,
                pending: Frames::default(),
                pool: Pool::new(BUFFER_KEPT),
                live,
                next_compaction: 0,
                sessions,
                created: Feed::default(),
                broken: None,
            }),
            writing: Mutex::new(()),
            compacting: AtomicBool::new(false),
            compactor: Mutex::new(None),
            group: GroupFlush::new("log store"),
            set_aside,
            read_only: false,
            _lock: Some(lock),
        });
        Ok(Self {
            _closer: Arc::new(Closer {
                core: Arc::clone(&core),
            }),
            core,
        })
    }

    /// Opens the store in `dir` for reading only, without changing a
    /// byte of it or creating anything: for inspection tools (`harness
    /// sessions`, the studio).
    ///
    /// The newest log is read into an index as [`LogStore::open`] reads
    /// it, from a file opened for reading only, under a shared lock on the
    /// store's `LOCK` file (when there is one) that is released once the
    /// log is read: [`ReadOnlyError::InUse`] while another process (the
    /// application) has the store open. The store shows the log as it was
    /// read; checkpoints are read later from the same file, which the
    /// writer only appends to (a compaction writes a new file and deletes
    /// the old one's name, not its bytes). Commits are refused, and
    /// [`flush`](SessionStore::flush) does nothing.
    ///
    /// Nothing is moved aside, cut or deleted: where [`LogStore::open`]
    /// would move a torn end aside, or refuses a log damaged before its
    /// end, this reports [`ReadOnlyError::Damaged`], naming the log file
    /// and the offset of the first frame that is cut short, fails its
    /// checksum or does not parse (and, for damage before the end, how
    /// many whole frames follow it); a log whose first bytes are not a log
    /// header, and a `LOCK` file without any log, are damage too. Older generations and
    /// interrupted compactions (which [`LogStore::open`] deletes) are left
    /// alone and not read. A log cut exactly between two frames reads as a
    /// shorter log and is not detected.
    ///
    /// A path that is missing, not a directory, or a directory with
    /// neither a `LOCK` file nor a log (`log.N`) is
    /// [`ReadOnlyError::NotAStore`].
    pub fn open_read_only(dir: impl AsRef<Path>) -> Result<Self, ReadOnlyError> {
        let dir = dir.as_ref();
        let not_a_store = |why: String| ReadOnlyError::NotAStore {
            path: dir.to_path_buf(),
            why,
        };
        let damaged = |file: PathBuf, offset: Option<u64>, what: String| {
            ReadOnlyError::Damaged(Damage {
                store: dir.to_path_buf(),
                file,
                offset,
                what,
            })
        };
        let meta = fs::metadata(dir).map_err(|e| not_a_store(e.to_string()))?;
        if !meta.is_dir() {
            return Err(not_a_store("not a directory".into()));
        }
        let lock_path = dir.join(LOCK_FILE);
        let lock = match File::open(&lock_path) {
            Ok(lock) => Some(lock),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(io_error("open the lock file", &lock_path, &e).into()),
        };
        if let Some(lock) = &lock {
            match lock.try_lock_shared() {
                Ok(()) => {}
                Err(fs::TryLockError::WouldBlock) => {
                    return Err(ReadOnlyError::InUse {
                        path: dir.to_path_buf(),
                    });
                }
                Err(fs::TryLockError::Error(e)) => {
                    return Err(io_error("lock", &lock_path, &e).into());
                }
            }
        }
        let (generation, _stale) = generations(dir)?;
        let Some(generation) = generation else {
            return Err(match lock {
                Some(_) => damaged(
                    dir.to_path_buf(),
                    None,
                    format!(
                        "the store's `{LOCK_FILE}` file is there but no log file \
                         (`{LOG_PREFIX}N`): the log was deleted"
                    ),
                ),
                None => not_a_store(format!(
                    "no log store here (no `{LOCK_FILE}` file and no `{LOG_PREFIX}N` log)"
                )),
            });
        };
        let path = log_path(dir, generation);
        let file = File::open(&path).map_err(|e| io_error("open", &path, &e))?;
        let indexed = match index_log(&file, &path) {
            Ok(indexed) => indexed,
            Err(IndexError::Store(e)) => return Err(e.into()),
            Err(IndexError::Header(why)) => {
                return Err(damaged(
                    path,
                    Some(0),
                    format!("not a log this build can read: {why}"),
                ));
            }
        };
        if let Some(why) = indexed.damage {
            let (end, bytes) = (indexed.end, indexed.size - indexed.end);
            let what = match indexed.beyond {
                None => format!(
                    "{why}; the {bytes} bytes from there on cannot be read (nothing was changed; \
                     opening the store to write, as the application does, moves them aside \
                     into `{LOG_PREFIX}{generation}.tail-{end}`)"
                ),
                Some(beyond) => format!(
                    "{why}, and {}: the log is damaged before its end, and the {bytes} bytes \
                     from there on cannot be read (nothing was changed; opening the store to \
                     write, as the application does, refuses it too, unless it is opened with \
                     `LogOptions::set_aside_damage`, which moves those bytes aside into \
                     `{LOG_PREFIX}{generation}.tail-{end}`)",
                    beyond.describe()
                ),
            };
            return Err(damaged(path, Some(end), what));
        }
        // The log is read: its lock is let go (see the docs).
        drop(lock);
        let core = Arc::new(Core {
            dir: dir.to_path_buf(),
            options: LogOptions::default(),
            shared: Mutex::new(Shared {
                file: Arc::new(file),
                generation,
                len: indexed.end,
                written: indexed.end,
                inflight: None,
                pending: Frames::default(),
                pool: Pool::new(0),
                live: indexed.live,
                next_compaction: u64::MAX,
                sessions: indexed.sessions,
                created: Feed::default(),
                broken: None,
            }),
            writing: Mutex::new(()),
            compacting: AtomicBool::new(false),
            compactor: Mutex::new(None),
            group: GroupFlush::new("log store"),
            set_aside: None,
            read_only: true,
            _lock: None,
        });
        Ok(Self {
            _closer: Arc::new(Closer {
                core: Arc::clone(&core),
            }),
            core,
        })
    }

    /// Whether the store was opened with [`LogStore::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.core.read_only
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.core.dir
    }

    /// Where the damaged end of the log was moved when the store opened, if
    /// it had one: a torn end, or damage before the end with
    /// [`LogOptions::set_aside_damage`] (see the type's docs).
    pub fn set_aside(&self) -> Option<&Path> {
        self.core.set_aside.as_deref()
    }

    /// The current log file.
    pub fn log_path(&self) -> PathBuf {
        log_path(&self.core.dir, guard(&self.core.shared).generation)
    }

    /// Writes the frames added so far, and syncs the file when `sync`, off
    /// the async threads; returns the last group-commit ticket it wrote.
    async fn write_out(&self, sync: bool) -> Result<u64, StoreError> {
        let core = Arc::clone(&self.core);
        tokio::task::spawn_blocking(move || Core::write_out(&core, sync))
            .await
            .map_err(|e| task_error(&e))?
    }
}

impl Core {
    /// Checks `commit` against its session's head, adds its frame to the
    /// frames to write and indexes it; returns its group-commit ticket.
    fn add(&self, commit: Encoded<'_>) -> Result<(u64, usize), StoreError> {
        let mut shared = guard(&self.shared);
        let shared = &mut *shared;
        if let Some(why) = &shared.broken {
            return Err(StoreError::backend(why.clone()));
        }
        let session = &commit.frame.session;
        let offset = shared.len;
        // One lookup for a session the index has; its id is copied only
        // for one it has not.
        let (dead, added) = match shared.sessions.get_mut(session) {
            Some(entry) => {
                check_head(session, entry.head.as_ref(), commit.expected)?;
                index_frame(entry, offset, &commit.frame, commit.bytes, commit.version)
            }
            None => {
                check_head(session, None, commit.expected)?;
                let mut entry = Entry::default();
                let indexed = index_frame(
                    &mut entry,
                    offset,
                    &commit.frame,
                    commit.bytes,
                    commit.version,
                );
                shared.sessions.insert(session.clone(), entry);
                indexed
            }
        };
        if commit.expected.is_none() {
            shared.created.push(session.clone());
        }
        shared.live = shared.live.saturating_sub(dead) + added;
        shared.pending.extend(commit.bytes, &mut shared.pool);
        shared.len += commit.bytes.len() as u64;
        // Taken once the frame is added: a write that starts later takes it.
        Ok((self.group.ticket(), shared.pending.len()))
    }

    /// Writes the frames added so far to the file, in order, and syncs it
    /// when `sync`; returns the last group-commit ticket among them (tickets
    /// are taken under the index's lock, so the count read with the frames
    /// is exactly theirs). A failure leaves the store refusing commits: what
    /// reached the disk is not known.
    fn write_out(core: &Arc<Core>, sync: bool) -> Result<u64, StoreError> {
        let covered = {
            let _writing = guard(&core.writing);
            let (file, base, frames, generation, covered) = {
                let mut shared = guard(&core.shared);
                if let Some(why) = &shared.broken {
                    return Err(StoreError::backend(why.clone()));
                }
                let frames = Arc::new(std::mem::take(&mut shared.pending));
                shared.inflight = Some(Arc::clone(&frames));
                (
                    Arc::clone(&shared.file),
                    shared.written,
                    frames,
                    shared.generation,
                    core.group.applied(),
                )
            };
            let path = log_path(&core.dir, generation);
            let fail = |what: &str, e: &std::io::Error| {
                let why = format!(
                    "log store: cannot {what} {}: {e}; the store takes no more commits \
                     until it is opened again",
                    path.display()
                );
                guard(&core.shared).broken = Some(why.clone());
                StoreError::backend(why)
            };
            frames
                .write_at(&file, base)
                .map_err(|e| fail("write to", &e))?;
            {
                let mut shared = guard(&core.shared);
                shared.written += frames.len() as u64;
                shared.inflight = None;
                // Its chunks take the next frames (a reader copying from
                // them under the lock is done with them by now).
                if let Ok(written) = Arc::try_unwrap(frames) {
                    shared.pool.put(written);
                }
            }
            if sync {
                file.sync_data().map_err(|e| fail("sync", &e))?;
            }
            covered
        };
        Core::maybe_compact(core);
        Ok(covered)
    }

    /// Starts a compaction on a thread of its own if the log is past the
    /// threshold and mostly dead, and none is running.
    fn maybe_compact(core: &Arc<Core>) {
        {
            let shared = guard(&core.shared);
            if shared.len < core.options.compact_at.max(shared.next_compaction)
                || shared.len < 2 * shared.live + HEADER_LEN
            {
                return;
            }
        }
        if core.compacting.swap(true, Ordering::AcqRel) {
            return;
        }
        let compactor = Arc::clone(core);
        let started = std::thread::Builder::new()
            .name("harness-log-compact".into())
            .spawn(move || {
                if let Err(e) = compactor.compact() {
                    tracing::warn!(dir = %compactor.dir.display(), error = %e, "log store: compaction failed; the log is kept as it was");
                }
                let mut shared = guard(&compactor.shared);
                shared.next_compaction =
                    shared.len.saturating_add(compactor.options.compact_at / 2);
                drop(shared);
                compactor.compacting.store(false, Ordering::Release);
            });
        match started {
            // The previous compaction has ended (`compacting` was false).
            Ok(thread) => drop(guard(&core.compactor).replace(thread)),
            Err(e) => {
                tracing::warn!(error = %e, "log store: cannot start a compaction thread");
                core.compacting.store(false, Ordering::Release);
            }
        }
    }

    /// Rewrites the log with only what is live, into the next generation.
    ///
    /// Copies what was live when it started, from the part of the file
    /// written by then (`start`), while commits go on and flushes go on
    /// writing to the old file after it. Then, holding `writing` (no flush
    /// runs), it copies what was written to the old file since `start`;
    /// then, under the index's lock, appends the frames added and not yet
    /// written, moves the index to the new file and swaps the files.
    /// Durable commits wait for it only while it copies those last frames.
    fn compact(&self) -> Result<(), StoreError> {
        let (old, generation, sessions, start) = {
            let shared = guard(&self.shared);
            if shared.broken.is_some() {
                return Ok(());
            }
            let sessions: Vec<Live> = shared
                .sessions
                .iter()
                .map(|(id, e)| {
                    let cps = e.checkpoints.from(0).to_vec();
                    (id.clone(), e.head.clone(), cps)
                })
                .collect();
            // The file up to `written` is whole and no longer changes;
            // what is written after it is copied with the tail.
            (
                Arc::clone(&shared.file),
                shared.generation,
                sessions,
                shared.written,
            )
        };
        let old_path = log_path(&self.dir, generation);
        // A log named `log.18446744073709551615` (renamed by hand) has no
        // next generation: the log is kept as it is, uncompacted.
        let next = generation.checked_add(1).ok_or_else(|| {
            StoreError::backend(format!(
                "log store: {} is the last generation a log can have, so it cannot be \
                 compacted into the next; rename it to `{LOG_PREFIX}1` while no process has \
                 the store open",
                old_path.display()
            ))
        })?;
        let tmp = tmp_path(&self.dir, next);
        // Old offset of each copied checkpoint → its new offset.
        let mut moved: HashMap<u64, u64> = HashMap::new();
        let copied = (|| {
            let file = create_file(&tmp, true).map_err(|e| io_error("create", &tmp, &e))?;
            let mut out = BufWriter::with_capacity(1 << 20, &file);
            let write_err = |e: std::io::Error| io_error("write", &tmp, &e);
            out.write_all(&frame::header()).map_err(write_err)?;
            let mut at = HEADER_LEN;
            for (session, head, cps) in sessions {
                let mut bodies: Vec<(u64, bool, Vec<u8>, u64)> = Vec::new();
                let mut size = 0;
                let mut cps = cps.into_iter().filter(|(_, l)| l.offset < start).peekable();
                loop {
                    if let Some((seq, loc)) = cps.next() {
                        let mut body = vec![0u8; loc.len as usize];
                        old.read_exact_at(&mut body, loc.offset)
                            .map_err(|e| io_error("read", &old_path, &e))?;
                        size += body.len();
                        bodies.push((seq, loc.snapshot, body, loc.offset));
                    }
                    let last = cps.peek().is_none();
                    if !(last || size >= COMPACT_FRAME) {
                        continue;
                    }
                    let refs: Vec<(u64, bool, &[u8])> = bodies
                        .iter()
                        .map(|(s, k, b, _)| (*s, *k, b.as_slice()))
                        .collect();
                    let head_json = if last {
                        head.as_ref().map(|h| &*h.json)
                    } else {
                        None
                    };
                    let (bytes, frame) =
                        frame::encode(&session, &[], &refs, head_json).map_err(|e| {
                            StoreError::backend(format!(
                                "log store: compacting session {session}: {e}"
                            ))
                        })?;
                    out.write_all(&bytes).map_err(write_err)?;
                    for (a, (_, _, _, from)) in frame.append.iter().zip(&bodies) {
                        moved.insert(*from, at + u64::from(a.at));
                    }
                    at += bytes.len() as u64;
                    bodies.clear();
                    size = 0;
                    if last {
                        break;
                    }
                }
            }
            out.flush().map_err(write_err)?;
            drop(out);
            // The old log's frames are checked once what is live has been
            // copied out of them: a body damaged when it was read is found
            // here, where copying it under a new checksum would hide it.
            let mut check = damage::Checker::new(HEADER_LEN);
            let mut piece = vec![0u8; TAIL_PIECE.min((start - HEADER_LEN) as usize)];
            let mut from = HEADER_LEN;
            while from < start {
                let piece = &mut piece[..TAIL_PIECE.min((start - from) as usize)];
                old.read_exact_at(piece, from)
                    .map_err(|e| io_error("read", &old_path, &e))?;
                check
                    .feed(piece)
                    .map_err(|bad| self.damaged(&old_path, bad))?;
                from += piece.len() as u64;
            }
            // Synced before the index's lock is taken: under it, only the
            // frames added meanwhile are left to sync.
            file.sync_data().map_err(|e| io_error("sync", &tmp, &e))?;
            Ok::<_, StoreError>((file, at, check))
        })();
        let (file, copied_len, mut check) = match copied {
            Ok(done) => done,
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                return Err(e);
            }
        };
        #[cfg(test)]
        tests::copied_hook();
        // No flush writes to the old file from here on.
        let _writing = guard(&self.writing);
        let tail = (|| {
            let end = {
                let shared = guard(&self.shared);
                if let Some(why) = &shared.broken {
                    return Err(StoreError::backend(why.clone()));
                }
                shared.written
            };
            // The frames flushed to the old file while copying follow what
            // was copied.
            let mut buf = vec![0u8; TAIL_PIECE.min((end - start) as usize)];
            let mut at = start;
            while at < end {
                let piece = &mut buf[..TAIL_PIECE.min((end - at) as usize)];
                old.read_exact_at(piece, at)
                    .map_err(|e| io_error("read", &old_path, &e))?;
                check
                    .feed(piece)
                    .map_err(|bad| self.damaged(&old_path, bad))?;
                file.write_all_at(piece, copied_len + (at - start))
                    .map_err(|e| io_error("write", &tmp, &e))?;
                at += piece.len() as u64;
            }
            check.finish().map_err(|bad| self.damaged(&old_path, bad))?;
            file.sync_data().map_err(|e| io_error("sync", &tmp, &e))?;
            Ok(end - start)
        })();
        let tail_len = match tail {
            Ok(len) => len,
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                return Err(e);
            }
        };
        let finish = || -> Result<(), StoreError> {
            let mut shared = guard(&self.shared);
            // The frames not yet written follow the tail.
            let added = std::mem::take(&mut shared.pending);
            let shift = |offset: u64| offset - start + copied_len;
            let result = (|| {
                added
                    .write_at(&file, copied_len + tail_len)
                    .and_then(|()| file.sync_all())
                    .map_err(|e| io_error("write", &tmp, &e))?;
                let path = log_path(&self.dir, next);
                fs::rename(&tmp, &path).map_err(|e| io_error("rename into place", &tmp, &e))
            })();
            if let Err(e) = result {
                // Put the frames back: they are still to be written to the
                // old file.
                let later = std::mem::replace(&mut shared.pending, added);
                let shared = &mut *shared;
                shared.pending.append(later, &mut shared.pool);
                return Err(e);
            }
            let mut live = 0;
            for entry in shared.sessions.values_mut() {
                for loc in entry.checkpoints.locs_mut() {
                    loc.offset = if loc.offset < start {
                        moved.get(&loc.offset).copied().unwrap_or(loc.offset)
                    } else {
                        shift(loc.offset)
                    };
                    live += u64::from(loc.len);
                }
                live += entry.head.as_ref().map_or(0, |h| h.json.len() as u64);
            }
            shared.file = Arc::new(file);
            shared.generation = next;
            shared.written = copied_len + tail_len + added.len() as u64;
            shared.len = shared.written;
            shared.live = live;
            shared.pool.put(added);
            // Renamed: the new generation is the log from now on, whatever
            // follows. If its name cannot be made durable, a power cut could
            // bring back the old file without the commits written since, so
            // the store takes no more.
            if let Err(e) = sync_dir(&self.dir) {
                shared.broken = Some(format!(
                    "{e}; after compacting into {}: the store takes no more commits until it \
                     is opened again",
                    log_path(&self.dir, next).display()
                ));
            }
            Ok(())
        };
        if let Err(e) = finish() {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        if let Err(e) = fs::remove_file(&old_path) {
            // The new generation is whole; the old one is deleted when the
            // store next opens.
            tracing::warn!(path = %old_path.display(), error = %e, "log store: cannot delete the compacted log");
        }
        Ok(())
    }

    /// Stops the store taking commits because a compaction found its log
    /// damaged; returns the error saying so.
    fn damaged(&self, path: &Path, bad: damage::Bad) -> StoreError {
        let what = format!(
            "{}; found by a compaction, which kept the log as it was. The store takes no more \
             commits; opening it again reports the damage",
            bad.why
        );
        guard(&self.shared).broken = Some(format!(
            "log store: {} is damaged at offset {}: {what}",
            path.display(),
            bad.offset
        ));
        StoreError::Damaged {
            store: self.dir.clone(),
            file: path.to_path_buf(),
            offset: Some(bad.offset),
            what,
        }
    }
}

impl Drop for Core {
    /// Writes and syncs the commits that are not durable yet, so that
    /// dropping the store loses none.
    fn drop(&mut self) {
        let shared = self
            .shared
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        if shared.pending.is_empty() || shared.broken.is_some() {
            return;
        }
        let path = log_path(&self.dir, shared.generation);
        if let Err(e) = shared
            .pending
            .write_at(&shared.file, shared.written)
            .and_then(|()| shared.file.sync_data())
        {
            tracing::warn!(log = %path.display(), error = %e, "log store: cannot write the last commits when closing");
        }
    }
}

impl Shared {
    /// A copy of the body at `loc` if it is not in the file yet.
    fn in_memory(&self, loc: Loc) -> Option<Vec<u8>> {
        let mut at = usize::try_from(loc.offset.checked_sub(self.written)?).ok()?;
        let len = loc.len as usize;
        if let Some(inflight) = &self.inflight {
            if at < inflight.len() {
                return inflight.get(at, len);
            }
            at -= inflight.len();
        }
        self.pending.get(at, len)
    }
}

/// Checks that a commit expecting its session's head at version
/// `expected` finds it there: `head` is the head the index has.
fn check_head(
    session: &SessionId,
    head: Option<&Head>,
    expected: Option<u64>,
) -> Result<(), StoreError> {
    let found = match head {
        None => None,
        Some(Head {
            version: Some(version),
            ..
        }) => Some(*version),
        // A head this build cannot read is not written over: the error
        // says why it cannot be read.
        Some(Head { json, .. }) => {
            return Err(head_version(session, json)
                .err()
                .unwrap_or_else(|| load_error(session, "head", "unreadable by this build")));
        }
    };
    if found != expected {
        return Err(StoreError::Conflict {
            session: session.clone(),
            expected,
            found,
        });
    }
    Ok(())
}

/// Applies `frame`, written at `offset`, to a session's `entry`: removes
/// what it removes, adds what it appends and its head. Returns the live
/// bytes that went (removed or replaced) and the live bytes added.
fn index_frame(
    entry: &mut Entry,
    offset: u64,
    frame: &Frame,
    bytes: &[u8],
    version: Option<u64>,
) -> (u64, u64) {
    let (mut dead, mut added) = (0, 0);
    for seq in &frame.remove {
        if let Some(loc) = entry.checkpoints.remove(*seq) {
            dead += u64::from(loc.len);
        }
    }
    for a in &frame.append {
        let loc = Loc {
            offset: offset + u64::from(a.at),
            len: a.len,
            snapshot: a.snapshot,
        };
        if let Some(old) = entry.checkpoints.insert(a.seq, loc) {
            dead += u64::from(old.len);
        }
        added += u64::from(a.len);
    }
    if let Some((at, len)) = frame.head {
        let json: Arc<[u8]> = Arc::from(&bytes[at as usize..(at + len) as usize]);
        added += json.len() as u64;
        if let Some(old) = entry.head.replace(Head { json, version }) {
            dead += old.json.len() as u64;
        }
    }
    (dead, added)
}

/// The generations in `dir`: the newest, and the paths of older ones and of
/// compactions a crash interrupted, to delete once the newest is read.
fn generations(dir: &Path) -> Result<(Option<u64>, Vec<PathBuf>), StoreError> {
    let mut found = Vec::new();
    let mut tmps = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| io_error("list", dir, &e))? {
        let entry = entry.map_err(|e| io_error("list", dir, &e))?;
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(LOG_PREFIX)) else {
            continue;
        };
        if let Some(generation) = generation_of(rest) {
            found.push(generation);
        } else if rest.strip_suffix(".tmp").and_then(generation_of).is_some() {
            tmps.push(entry.path());
        }
    }
    found.sort_unstable();
    let newest = found.pop();
    tmps.extend(found.into_iter().map(|g| log_path(dir, g)));
    Ok((newest, tmps))
}

/// The generation a log file name (after `log.`) stands for: only the
/// names the store writes, so `log.02` or `log.+2` is left alone.
fn generation_of(name: &str) -> Option<u64> {
    let generation = name.parse::<u64>().ok()?;
    (generation.to_string() == name).then_some(generation)
}

fn log_path(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("{LOG_PREFIX}{generation}"))
}

fn tmp_path(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("{LOG_PREFIX}{generation}.tmp"))
}

type Opened = (File, u64, HashMap<SessionId, Entry>, u64, Option<PathBuf>);

/// A new, empty log of `generation`: written beside it and renamed into
/// place, so that a crash never leaves a log without its header.
fn create_log(dir: &Path, generation: u64) -> Result<Opened, StoreError> {
    let tmp = tmp_path(dir, generation);
    let file = create_file(&tmp, true).map_err(|e| io_error("create", &tmp, &e))?;
    file.write_all_at(&frame::header(), 0)
        .and_then(|()| file.sync_all())
        .map_err(|e| io_error("write", &tmp, &e))?;
    let path = log_path(dir, generation);
    fs::rename(&tmp, &path).map_err(|e| io_error("rename into place", &tmp, &e))?;
    sync_dir(dir)?;
    Ok((file, HEADER_LEN, HashMap::new(), 0, None))
}

/// A log read into an index: how far it reads whole, its size, the
/// sessions and their live bytes, why it stops before its end, if it
/// does, and the whole frames after that point, if there are any (damage
/// before the end rather than a torn end).
struct Indexed {
    end: u64,
    size: u64,
    sessions: HashMap<SessionId, Entry>,
    live: u64,
    damage: Option<String>,
    beyond: Option<Beyond>,
}

/// Why a log could not be indexed.
enum IndexError {
    /// Its first bytes are not a log header this build reads.
    Header(String),
    /// Reading it failed.
    Store(StoreError),
}

impl From<StoreError> for IndexError {
    fn from(e: StoreError) -> Self {
        IndexError::Store(e)
    }
}

/// Reads the log `file` (at `path`) into an index, frame by frame, to its
/// end or to the first frame that is cut short, fails its checksum or does
/// not parse (`damage` says which; `end` is where that frame starts; and
/// `beyond` finds the whole frames after it, if any). Reads only.
fn index_log(file: &File, path: &Path) -> Result<Indexed, IndexError> {
    let size = file
        .metadata()
        .map_err(|e| io_error("read the size of", path, &e))?
        .len();
    let read_err = |e: std::io::Error| io_error("read", path, &e);
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut header = [0u8; HEADER_LEN as usize];
    let got = read_up_to(&mut reader, &mut header).map_err(read_err)?;
    frame::check_header(&header[..got]).map_err(IndexError::Header)?;
    let mut sessions: HashMap<SessionId, Entry> = HashMap::new();
    let mut live = 0u64;
    let mut at = HEADER_LEN;
    // One frame at a time, its length and checksum first: the offsets a
    // frame gives its bodies count from its first byte.
    let mut bytes = Vec::new();
    let damage = loop {
        if at == size {
            break None;
        }
        let mut head = [0u8; FRAME_HEAD];
        if read_up_to(&mut reader, &mut head).map_err(read_err)? < FRAME_HEAD {
            break Some("the log ends inside a frame's length".to_string());
        }
        let (len, crc) = frame::frame_head(&head);
        if len > MAX_PAYLOAD || (len as u64) > size - at - FRAME_HEAD as u64 {
            break Some(format!(
                "a frame of {len} bytes runs past the end of the log"
            ));
        }
        bytes.clear();
        bytes.extend_from_slice(&head);
        bytes.resize(FRAME_HEAD + len, 0);
        reader
            .read_exact(&mut bytes[FRAME_HEAD..])
            .map_err(read_err)?;
        let payload = &bytes[FRAME_HEAD..];
        if crc32fast::hash(payload) != crc {
            break Some("a frame fails its checksum".to_string());
        }
        let frame = match frame::decode(payload) {
            Ok(frame) => frame,
            Err(why) => break Some(format!("a frame does not parse: {why}")),
        };
        let version = frame.head.and_then(|(h, l)| {
            head_version(&frame.session, &bytes[h as usize..(h + l) as usize]).ok()
        });
        let entry = sessions.entry(frame.session.clone()).or_default();
        let (dead, added) = index_frame(entry, at, &frame, &bytes, version);
        live = live.saturating_sub(dead) + added;
        at += (FRAME_HEAD + len) as u64;
    };
    // A compaction writes a large session's checkpoints in frames before the
    // one with its head. If damage cut the log between them, those
    // checkpoints belong to no head: they are dropped from the index (their
    // bytes are in the file, and the damaged end in the set-aside file), so
    // that a session created anew under that id does not inherit them.
    sessions.retain(|_, entry| {
        if entry.head.is_none() {
            let bytes: u64 = entry.checkpoints.locs().map(|l| u64::from(l.len)).sum();
            live = live.saturating_sub(bytes);
        }
        entry.head.is_some()
    });
    let beyond = match damage {
        Some(_) => damage::whole_frames_after(file, at + 1, size).map_err(read_err)?,
        None => None,
    };
    Ok(Indexed {
        end: at,
        size,
        sessions,
        live,
        damage,
        beyond,
    })
}

/// Reads the log of `generation` into an index. A torn end (a frame that
/// is cut short, fails its checksum or does not parse, and nothing whole
/// after it) is moved aside and cut off. Damage before the end (whole
/// frames after it) is refused as [`StoreError::Damaged`], the log left
/// as it is, unless `set_aside_damage`, which moves it aside as a torn
/// end.
fn open_log(dir: &Path, generation: u64, set_aside_damage: bool) -> Result<Opened, StoreError> {
    let path = log_path(dir, generation);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| io_error("open", &path, &e))?;
    let indexed = match index_log(&file, &path) {
        Ok(indexed) => indexed,
        Err(IndexError::Store(e)) => return Err(e),
        Err(IndexError::Header(why)) => {
            return Err(StoreError::backend(format!(
                "log store: {} is not a log this build can read: {why}; nothing was changed",
                path.display()
            )));
        }
    };
    let Indexed {
        end,
        size,
        sessions,
        live,
        damage,
        beyond,
    } = indexed;
    let bytes = size - end;
    // A page of zeros in the damage: pages a power cut kept from the disk
    // (see `damage`), whose whole frames after them were never acknowledged.
    let power_cut = match beyond {
        Some(beyond) if damage.is_some() => damage::zero_page_between(&file, end, beyond.first)
            .map_err(|e| io_error("read", &path, &e))?,
        _ => false,
    };
    let set_aside = match (damage, beyond) {
        (None, _) => None,
        (Some(why), None) => {
            let aside = set_aside(dir, &path, &file, generation, end, size)?;
            tracing::warn!(
                log = %path.display(),
                offset = end,
                bytes,
                moved_to = %aside.display(),
                "log store: {why}, and no whole frame follows it; the log now ends there, and \
                 the {bytes} bytes from there on were moved aside: a commit a crash cut short \
                 before it was acknowledged as durable (or damage to the last commit alone)"
            );
            Some(aside)
        }
        (Some(why), Some(beyond)) if power_cut || set_aside_damage => {
            let aside = set_aside(dir, &path, &file, generation, end, size)?;
            let what = if power_cut {
                "past a page of zeros: the pages a power cut kept from the disk, whose commits \
                 were never acknowledged as durable"
            } else {
                "the log was damaged before its end. As `LogOptions::set_aside_damage` asks, \
                 the commits among the bytes moved aside are no longer in the store, to \
                 recover by hand"
            };
            tracing::warn!(
                log = %path.display(),
                offset = end,
                bytes,
                whole_frames = beyond.frames,
                moved_to = %aside.display(),
                "log store: {why}, and {}, {what}. The log now ends there, and the {bytes} \
                 bytes from there on were moved aside",
                beyond.describe()
            );
            Some(aside)
        }
        (Some(why), Some(beyond)) => {
            return Err(StoreError::Damaged {
                store: dir.to_path_buf(),
                file: path.clone(),
                offset: Some(end),
                what: format!(
                    "{why}, and {}: the log is damaged before its end ({bytes} bytes from \
                     offset {end} on). The store was not opened and nothing was changed: a \
                     crash of the process only cuts the end of the log, so the disk damaged \
                     bytes it had written, or something else wrote into the file (a power \
                     cut leaves a page of zeros, and this damage holds none); the commits \
                     after the damage may have been acknowledged as durable, and opening the store \
                     would drop them. Keep a copy of the directory first (e.g. `cp -a {dir} \
                     {dir}.damaged`); `harness sessions list --store {dir}` reports the same \
                     damage without changing a byte. To open the store with the commits \
                     before offset {end} only, moving the bytes from there on (the commits \
                     after the damage among them, to recover by hand) aside into \
                     `{LOG_PREFIX}{generation}.tail-{end}`, open it with \
                     `LogOptions::default().set_aside_damage(true)`",
                    beyond.describe(),
                    dir = dir.display()
                ),
            });
        }
    };
    Ok((file, end, sessions, live, set_aside))
}

/// Moves the bytes of `file` from `at` to `size` into a file of their own
/// (a new name, never one an earlier damage was set aside to), synced,
/// then cuts the log at `at`. The caller says why in a warning.
fn set_aside(
    dir: &Path,
    path: &Path,
    file: &File,
    generation: u64,
    at: u64,
    size: u64,
) -> Result<PathBuf, StoreError> {
    let mut n = 0u32;
    let (aside, mut out) = loop {
        let name = match n {
            0 => format!("{LOG_PREFIX}{generation}.tail-{at}"),
            n => format!("{LOG_PREFIX}{generation}.tail-{at}-{n}"),
        };
        let aside = dir.join(name);
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        match options.open(&aside) {
            Ok(out) => break (aside, out),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => n += 1,
            Err(e) => return Err(io_error("create", &aside, &e)),
        }
    };
    let mut tail = std::io::BufReader::new(file).take(size - at);
    std::io::Seek::seek(tail.get_mut().get_mut(), std::io::SeekFrom::Start(at))
        .map_err(|e| io_error("read", path, &e))?;
    let copied = std::io::copy(&mut tail, &mut out)
        .map_err(|e| io_error("copy the damaged end of", path, &e))?;
    if copied != size - at {
        return Err(StoreError::backend(format!(
            "log store: {} shrank while its damaged end was copied; nothing was cut",
            path.display()
        )));
    }
    out.sync_all().map_err(|e| io_error("write", &aside, &e))?;
    sync_dir(dir)?;
    file.set_len(at)
        .and_then(|()| file.sync_all())
        .map_err(|e| io_error("cut the damaged end of", path, &e))?;
    Ok(aside)
}

/// Reads until `buf` is full or the end; returns how much was read.
fn read_up_to(reader: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match reader.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

fn create_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// Opens `path` for reading and writing, created `0600` if new; `truncate`
/// empties it.
fn create_file(path: &Path, truncate: bool) -> std::io::Result<File> {
    let mut options = OpenOptions::new();
    options
        .read(true)
        .write(true)
        .create(true)
        .truncate(truncate);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_error("sync the directory", dir, &e))
}

impl<'a> Encoded<'a> {
    /// Encodes `commit`'s frame into `out` (cleared first).
    fn new(out: &'a mut Vec<u8>, commit: &Commit) -> Result<Self, StoreError> {
        let session = &commit.head.session_id;
        out.clear();
        let frame = frame::encode_into(
            out,
            session,
            &commit.remove,
            commit
                .append
                .iter()
                .map(|cp| (cp.seq, matches!(cp.kind, CheckpointKind::Snapshot(_)))),
            true,
            |body, out| match body {
                Some(i) => write_checkpoint(out, &commit.append[i]),
                None => write_head(out, &commit.head),
            },
        )
        .map_err(|why| StoreError::backend(format!("log store: session {session}: {why}")))?;
        Ok(Self {
            bytes: out,
            frame,
            expected: commit.expected_version,
            version: (commit.head.schema_version == SCHEMA_VERSION).then_some(commit.head.version),
        })
    }
}

#[async_trait]
impl SessionStore for LogStore {
    async fn load(&self, session: &SessionId) -> Result<Option<StoredRun>, StoreError> {
        let head = guard(&self.core.shared)
            .sessions
            .get(session)
            .and_then(|e| e.head.as_ref())
            .map(|h| Arc::clone(&h.json));
        head.map(|json| head_from_slice(session, &json)).transpose()
    }

    async fn commit(&self, commit: &Commit) -> Result<(), StoreError> {
        if self.core.read_only {
            return Err(StoreError::backend(format!(
                "log store {}: opened read-only, commits are refused",
                self.core.dir.display()
            )));
        }
        let durable = commit.durable;
        let (ticket, pending) = SCRATCH.with(|scratch| {
            // A fresh buffer if this thread's is in use (it never is: no
            // commit starts while one encodes).
            let mut fresh = Vec::new();
            let mut kept = scratch.try_borrow_mut();
            let out = kept.as_deref_mut().unwrap_or(&mut fresh);
            let added = Encoded::new(out, commit).and_then(|e| self.core.add(e));
            if out.capacity() > BUFFER_KEPT {
                *out = Vec::new();
            }
            added
        })?;
        if durable {
            self.core
                .group
                .durable(ticket, || self.write_out(true))
                .await?;
        } else if pending >= PENDING_MAX {
            self.write_out(false).await?;
        }
        Ok(())
    }

    async fn checkpoints(
        &self,
        session: &SessionId,
        from_seq: u64,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        // Bodies still in memory are copied under the lock; the others are
        // read from the file after.
        let (file, generation, bodies) = {
            let shared = guard(&self.core.shared);
            let bodies: Vec<(u64, Loc, Option<Vec<u8>>)> = shared
                .sessions
                .get(session)
                .map(|e| {
                    e.checkpoints
                        .from(from_seq)
                        .iter()
                        .map(|(s, l)| (*s, *l, shared.in_memory(*l)))
                        .collect()
                })
                .unwrap_or_default();
            (Arc::clone(&shared.file), shared.generation, bodies)
        };
        let on_disk = bodies.iter().filter(|(_, _, b)| b.is_none()).count();
        let session = session.clone();
        let path = log_path(&self.core.dir, generation);
        let read = move || {
            let mut out = Vec::with_capacity(bodies.len());
            for (seq, loc, body) in bodies {
                let body = match body {
                    Some(body) => body,
                    None => {
                        let mut body = vec![0u8; loc.len as usize];
                        file.read_exact_at(&mut body, loc.offset).map_err(|e| {
                            io_error(
                                &format!("read checkpoint {seq} of session {session} from"),
                                &path,
                                &e,
                            )
                        })?;
                        body
                    }
                };
                out.push(checkpoint_from_slice(&session, seq, &body)?);
            }
            Ok(out)
        };
        if on_disk == 0 {
            read()
        } else {
            tokio::task::spawn_blocking(read)
                .await
                .map_err(|e| task_error(&e))?
        }
    }

    async fn sessions(&self) -> Result<Vec<SessionId>, StoreError> {
        let mut out: Vec<SessionId> = guard(&self.core.shared)
            .sessions
            .iter()
            .filter(|(_, e)| e.head.is_some())
            .map(|(id, _)| id.clone())
            .collect();
        out.sort();
        Ok(out)
    }

    /// The sessions created since the store opened (positions begin
    /// again at each open; a store opened read-only, a snapshot, has
    /// none).
    async fn created_since(
        &self,
        since: Option<u64>,
        limit: usize,
    ) -> Result<Option<Created>, StoreError> {
        Ok(Some(guard(&self.core.shared).created.page(since, limit)))
    }

    async fn flush(&self) -> Result<(), StoreError> {
        if self.core.read_only {
            // Nothing was written.
            return Ok(());
        }
        self.write_out(true).await.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Set by a test to stop compactions once they have copied what was
    /// live, before they take `writing`.
    static HOLD: AtomicBool = AtomicBool::new(false);
    /// A compaction has copied what was live and waits while `HOLD` is set.
    static AT_GATE: AtomicBool = AtomicBool::new(false);

    pub(super) fn copied_hook() {
        AT_GATE.store(true, Ordering::SeqCst);
        while HOLD.load(Ordering::SeqCst) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Holds compactions at the hook until dropped (a failing test too).
    struct Hold;

    impl Hold {
        fn new() -> Self {
            HOLD.store(true, Ordering::SeqCst);
            Hold
        }
    }

    impl Drop for Hold {
        fn drop(&mut self) {
            HOLD.store(false, Ordering::SeqCst);
        }
    }

    /// Durable commits go on while a compaction copies the live log: they
    /// are flushed to the old file, and the compaction, once let go,
    /// carries them (and those added after) into the new one.
    #[cfg(feature = "conformance")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn durable_commits_do_not_wait_for_a_compaction_to_copy_the_log() {
        use crate::conformance::{advance, create, head, snapshot};
        use std::time::Duration;
        let dir = tempfile::tempdir().unwrap();
        let store =
            LogStore::open_with(dir.path(), LogOptions::default().compact_at(64 << 10)).unwrap();
        AT_GATE.store(false, Ordering::SeqCst);
        let gate = Hold::new();
        // One session rewritten until the log is past the threshold and
        // mostly dead: a compaction starts and stops at the gate.
        let big = serde_json::json!("x".repeat(2_000));
        let mut prev = head("busy");
        store
            .commit(&create(prev.clone(), vec![snapshot(0, 0, big.clone())]))
            .await
            .unwrap();
        let first = store.log_path();
        let mut seq = 0;
        while !AT_GATE.load(Ordering::SeqCst) {
            seq += 1;
            assert!(seq < 10_000, "no compaction started");
            let next = advance(&prev, vec![snapshot(seq, seq, big.clone())], vec![seq - 1]);
            tokio::time::timeout(Duration::from_secs(20), store.commit(&next))
                .await
                .expect("a durable commit waited for the compaction")
                .unwrap();
            prev = next.head;
        }
        // Stopped mid-compaction: durable commits still complete.
        let during = create(head("during"), vec![snapshot(0, 0, serde_json::json!(1))]);
        tokio::time::timeout(Duration::from_secs(20), store.commit(&during))
            .await
            .expect("a durable commit waited for the compaction")
            .unwrap();
        let next = advance(
            &prev,
            vec![snapshot(seq + 1, seq + 1, big.clone())],
            vec![seq],
        );
        tokio::time::timeout(Duration::from_secs(20), store.commit(&next))
            .await
            .expect("a durable commit waited for the compaction")
            .unwrap();
        prev = next.head;
        assert_eq!(
            store.log_path(),
            first,
            "the compaction has not swapped the files"
        );
        // A commit that is not durable: added, not written, when it is let go.
        let mut later = advance(&prev, vec![], vec![]);
        later.durable = false;
        store.commit(&later).await.unwrap();
        prev = later.head;
        drop(gate);
        for _ in 0..2_000 {
            if store.log_path() != first {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_ne!(store.log_path(), first, "the compaction did not finish");
        let check = |store: LogStore| {
            let (prev, big, during) = (prev.clone(), big.clone(), during.clone());
            async move {
                assert_eq!(
                    store.load(&prev.session_id).await.unwrap(),
                    Some(prev.clone())
                );
                let cps = store.checkpoints(&prev.session_id, 0).await.unwrap();
                assert_eq!(cps.iter().map(|c| c.seq).collect::<Vec<_>>(), [seq + 1]);
                assert_eq!(cps[0].kind, CheckpointKind::Snapshot(big.clone()));
                assert_eq!(
                    store.load(&during.head.session_id).await.unwrap(),
                    Some(during.head.clone())
                );
                assert_eq!(
                    store.checkpoints(&during.head.session_id, 0).await.unwrap(),
                    during.append
                );
            }
        };
        check(store.clone()).await;
        let path = store.log_path();
        drop(store);
        let store = LogStore::open(dir.path()).unwrap();
        assert_eq!(store.log_path(), path);
        assert_eq!(store.set_aside(), None);
        check(store).await;
    }

    fn loc(offset: u64) -> Loc {
        Loc {
            offset,
            len: 1,
            snapshot: false,
        }
    }

    fn seqs(s: &Seqs) -> Vec<(u64, u64)> {
        s.from(0).iter().map(|(seq, l)| (*seq, l.offset)).collect()
    }

    /// The sorted vector behaves as a map by seq whatever order seqs come
    /// in: appended, inserted below the last, replaced, removed, read from
    /// a seq that is or is not there.
    #[test]
    fn seqs_keep_every_checkpoint_in_order_by_seq() {
        let mut s = Seqs::default();
        assert_eq!(s.remove(3), None);
        assert!(s.from(0).is_empty());
        for seq in [2, 5, 9] {
            assert_eq!(s.insert(seq, loc(seq * 10)), None);
        }
        assert_eq!(s.insert(0, loc(1)), None);
        assert_eq!(s.insert(7, loc(70)), None);
        assert_eq!(s.insert(5, loc(55)).map(|l| l.offset), Some(50));
        assert_eq!(seqs(&s), [(0, 1), (2, 20), (5, 55), (7, 70), (9, 90)]);
        assert_eq!(s.remove(2).map(|l| l.offset), Some(20));
        assert_eq!(s.remove(2), None);
        assert_eq!(s.remove(10), None);
        let from = |seq| s.from(seq).iter().map(|(q, _)| *q).collect::<Vec<_>>();
        assert_eq!(from(3), [5, 7, 9]);
        assert_eq!(from(7), [7, 9]);
        assert_eq!(from(10), Vec::<u64>::new());
        assert_eq!(s.locs().count(), 4);
        for l in s.locs_mut() {
            l.offset += 1;
        }
        assert_eq!(seqs(&s), [(0, 2), (5, 56), (7, 71), (9, 91)]);
    }
}
