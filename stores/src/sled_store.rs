//! The sled store: the embedded default.

use crate::group::GroupFlush;
use crate::read_only::{self, Damage, PrivateDir, ReadOnlyError};
use crate::record::{
    checkpoint_from_slice, checkpoint_to_vec, frame, head_from_slice, head_to_vec, head_version,
    load_error, unframe,
};
use async_trait::async_trait;
use harness::SessionId;
use harness::session::{
    Checkpoint, CheckpointKind, Commit, Created, SessionStore, StoreError, StoredRun,
};
use sled::transaction::{
    ConflictableTransactionResult, TransactionError, Transactional, TransactionalTree,
};
use sled::{IVec, Tree};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc;
use std::thread::JoinHandle;

/// The tree of heads.
const HEADS: &str = "heads";
/// The tree of update checkpoints.
const CHECKPOINTS: &str = "checkpoints";
/// The tree of snapshot checkpoints.
const SNAPSHOTS: &str = "snapshots";
/// The feed of created sessions: the position (big-endian `u64`) → the id.
const CREATED: &str = "created";

/// The trees harness writes in a sled database: the session store's (the
/// first version wrote `heads` and `checkpoints`, `snapshots` and
/// `created` came later) and the long-term memory's
/// ([`SledMemory`](crate::SledMemory)). One of them marks a database as
/// harness's (see [`foreign_contents`]).
const HARNESS_TREES: [&str; 5] = [
    HEADS,
    CHECKPOINTS,
    SNAPSHOTS,
    CREATED,
    crate::memory_sled::TREE,
];
/// The most tree names the refusal of another program's database lists.
const TREES_SHOWN: usize = 8;
/// The most keys of sled's default tree the refusal of another program's
/// database counts.
const KEYS_COUNTED: usize = 1000;

/// sled's segment size (the unit of its log and of its write buffer) for
/// new databases: 128 KiB rather than sled's 512 KiB.
///
/// sled keeps a value's old versions until it cleans a segment, and cleans
/// only once several segments are mostly dead, so a small database takes a
/// few segments whatever it holds. With 512 KiB segments a 500-step session
/// of 1 KiB steps (513 KB of state) took 4.8 times its state on disk; with
/// 128 KiB, 2.6 times (`tests/it/sessions.rs`). sled runs its own test suite
/// with far smaller segments. The size is fixed when a database is created:
/// an existing database opens with the size it was made with.
const SEGMENT_SIZE: usize = 128 * 1024;

/// The smallest segment size sled 0.34 opens a database with.
const MIN_SEGMENT_SIZE: usize = 256;
/// The largest segment size sled 0.34 opens a database with (16 MiB).
const MAX_SEGMENT_SIZE: usize = 1 << 24;

/// Sessions in a [sled](https://docs.rs/sled) database: the embedded default.
///
/// Three trees:
/// - `heads`: the session id's UTF-8 bytes → the head, a checksummed
///   record;
/// - `checkpoints`: the id's length as 8 big-endian bytes, the id, the seq
///   as 8 big-endian bytes → an update
///   checkpoint, a checksummed record. The length prefix keeps one session's records
///   apart from another's whose id it prefixes (`a` and `ab`), and the
///   big-endian seq keeps a session's log in order;
/// - `snapshots`: the same keys → a snapshot checkpoint, a checksummed
///   record.
///
/// A checksummed record is the byte `0xC5`, a format byte `1`, the CRC32
/// of the JSON as 4 little-endian bytes, then the record as JSON. A record
/// whose checksum does not match is a [`StoreError::Load`] naming the
/// session and the record (`head`, `checkpoint 12`). Records written before
/// checksums (bare JSON, starting with `{`) are still read.
///
/// **Files.** [`SledStore::open`] creates the database's directory (and
/// any missing parent) `0700` on unix, and takes group and other
/// permissions away from sled's own files (sled creates them `0644`): `db`,
/// `conf`, `snap.*` and the `blobs` directory with its blobs. Nothing else
/// in the directory is changed, nor the directory itself if it existed. A
/// directory that holds other files and no database is refused (see
/// [`SledStore::open`]); a database's directory that also holds other
/// files leaves them as they are. Files sled makes later are inside a directory the store
/// created `0700`; in a directory that existed, give it the permissions you
/// want (sled's `snap.*` files made after the open hold page locations, not
/// records, and are restricted at the next open).
///
/// **Reading without writing.** sled has no read-only mode, and opening a
/// database recovers its log: a message that fails sled's checksum ends
/// the log there, and sled zeroes everything after it on disk, then opens
/// as if it had never been written, without an error. Tools that only
/// read use [`SledStore::open_read_only`], which opens a private copy,
/// never the database, and reports such damage instead of showing an older
/// state.
///
/// Snapshots live apart from updates because sled rewrites a whole tree
/// node when it consolidates one (every ten changes to it): a large snapshot
/// sharing a node with the small updates appended after it would be
/// rewritten every few steps. Apart, it is written about once.
///
/// A commit that creates a session also writes its id at the next position
/// of the `created` tree, in the same transaction: the feed of
/// [`created_since`](SessionStore::created_since), in the order the
/// commits were applied (one thread applies them). Sessions created by a
/// version of this store before it are not in it.
///
/// **Another program's database.** [`SledStore::open`] and
/// [`SledStore::open_read_only`] refuse a sled database that holds data but
/// none of harness's trees (`heads`, `checkpoints`, `snapshots`, `created`,
/// or `memory` of a [`SledMemory`](crate::SledMemory)), naming what it
/// holds: a wrong path would otherwise read as a store without sessions,
/// and the open would add harness's trees to that program's database. A
/// database with one of harness's trees is harness's, whatever else it
/// holds (an application may keep trees of its own in it through
/// [`SledStore::db`]); a new or empty one (no tree but sled's default, and
/// that one empty) is used. The layout is recognised by its trees, with no
/// marker of its own: every version of this store created its trees when
/// it opened a database, and a marker could not be required of the stores
/// those versions left. To keep sessions in a database of your own that
/// holds other trees, open it with [`SledStore::with_config`], which takes
/// the database as it is.
///
/// A commit is one sled transaction over the trees it writes, so it is all or
/// nothing, also across a crash; a `durable` commit flushes the database
/// before it returns. One process at a time can open a database (sled
/// locks it).
///
/// ```
/// use harness_stores::SledStore;
///
/// let store = SledStore::temporary()?;
/// # Ok::<(), harness::session::StoreError>(())
/// ```
#[derive(Clone)]
pub struct SledStore {
    db: sled::Db,
    heads: Tree,
    checkpoints: Tree,
    snapshots: Tree,
    created: Tree,
    path: Option<PathBuf>,
    /// sled's log file, synced after each flush (see [`SledStore::flush_db`]);
    /// `None` for a temporary database.
    log_file: Option<Arc<std::fs::File>>,
    /// Durable commits of concurrent sessions share flushes.
    group: Arc<GroupFlush>,
    /// The thread that applies commits.
    applier: Arc<Applier>,
    /// For a store opened with [`SledStore::open_read_only`]: the database
    /// it is a copy of, and the private copy, deleted when the last handle
    /// goes (declared last: dropped after the database is closed).
    copy: Option<Arc<ReadCopy>>,
}

/// The private copy a read-only store reads.
struct ReadCopy {
    /// The database it is a copy of.
    original: PathBuf,
    /// The copy's directory.
    _dir: PrivateDir,
}

/// The most commits applied in one transaction.
const MAX_BATCH: usize = 512;

/// A commit for the applier thread, encoded by its caller, and where its
/// ticket goes.
type Job = (
    Encoded,
    tokio::sync::oneshot::Sender<Result<u64, StoreError>>,
);

/// The thread that applies every commit of a store, one at a time.
///
/// A commit's transaction is short CPU work on sled's trees; handing each
/// to a blocking task of its own (tokio's `spawn_blocking`) costs more than
/// the work under many concurrent sessions: up to hundreds of threads
/// contending for sled's locks and its epoch-based reclamation, and a
/// thread switch per commit. One thread fed by a channel applies them,
/// every commit waiting at once in one transaction (see
/// [`Trees::commit_batch`]), with no transaction retried for a conflict, while the group
/// flush (one `fsync` for every commit applied before it started) runs
/// beside it. The thread applies commits of every session, so it is kept
/// to what must be serial: each commit is encoded (its records as JSON,
/// its keys) by its caller before it is handed over, on the caller's
/// thread. Dropping the last handle to the store closes the channel and
/// waits for the thread, so the database is closed when the store is.
struct Applier {
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

impl Applier {
    fn start(mut trees: Trees) -> Result<Self, StoreError> {
        let (jobs, queue) = mpsc::channel::<Job>();
        let thread = std::thread::Builder::new()
            .name("harness-sled-commit".into())
            .spawn(move || {
                // Every commit waiting when the thread comes round is
                // applied in one transaction.
                while let Ok(first) = queue.recv() {
                    let mut batch = vec![first];
                    while batch.len() < MAX_BATCH {
                        match queue.try_recv() {
                            Ok(job) => batch.push(job),
                            Err(_) => break,
                        }
                    }
                    let (commits, replies): (Vec<Encoded>, Vec<_>) = batch.into_iter().unzip();
                    for (reply, result) in replies.into_iter().zip(trees.commit_batch(&commits)) {
                        // The caller may have gone (its future dropped):
                        // the commit stands all the same.
                        let _ = reply.send(result);
                    }
                }
            })
            .map_err(|e| {
                StoreError::backend(format!("sled store: cannot start the commit thread: {e}"))
            })?;
        Ok(Self {
            jobs: Some(jobs),
            thread: Some(thread),
        })
    }
}

impl Drop for Applier {
    fn drop(&mut self) {
        drop(self.jobs.take());
        if let Some(thread) = self.thread.take()
            && thread.thread().id() != std::thread::current().id()
        {
            let _ = thread.join();
        }
    }
}

/// The trees, the feed's last position and the group flush: what applying
/// a commit needs.
#[derive(Clone)]
struct Trees {
    heads: Tree,
    checkpoints: Tree,
    snapshots: Tree,
    created: Tree,
    /// The last position of `created`; only the applier thread moves it.
    last_created: u64,
    group: Arc<GroupFlush>,
}

impl std::fmt::Debug for SledStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SledStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// Whether another open of the database at `path` holds the lock sled
/// takes on its `db` file (another process, or another handle of this
/// one), which makes sled's open fail ("could not acquire lock on …: Os {
/// code: 11, kind: WouldBlock, … }"). Tried without waiting, and released
/// at once.
pub(crate) fn held_elsewhere(path: &Path) -> bool {
    std::fs::File::open(path.join("db"))
        .is_ok_and(|db| matches!(db.try_lock(), Err(std::fs::TryLockError::WouldBlock)))
}

/// Whether sled refused to open a database because another open holds its
/// lock (sled gives the failure as text only).
pub(crate) fn lock_refused(e: &sled::Error) -> bool {
    matches!(e, sled::Error::Io(io) if io.to_string().contains("could not acquire lock"))
}

/// The refusal of a database another process has open, for `kind` (`sled
/// store`, `sled memory`).
pub(crate) fn in_use(kind: &str, path: &Path) -> String {
    format!(
        "{kind}: {} is open in another process (or by a handle of this one not yet closed: \
         the lock sled takes on its `db` file is held); one process at a time can open a sled \
         database: stop the other one, or work in it",
        path.display()
    )
}

fn sled_error(what: &str, e: &sled::Error) -> StoreError {
    StoreError::backend(format!("sled store: cannot {what}: {e}"))
}

impl SledStore {
    /// Opens (or creates) the database at `path`. Blocks while sled
    /// recovers its log; call it before starting work, or inside
    /// `spawn_blocking`.
    ///
    /// A new directory (and any missing parent) is created `0700` on unix,
    /// and sled's own files in the directory lose their group and other
    /// permissions; nothing else in it is changed (see the type's docs).
    ///
    /// Before sled opens an existing database, its log is read once: a log
    /// damaged in its middle (a record that fails sled's checksum followed
    /// by records written after it, or a segment header that fails its
    /// checksum), which sled's recovery would silently cut there, is
    /// refused as [`StoreError::Damaged`], naming the file and the offset,
    /// and nothing is changed. A log whose end only is cut short, as a
    /// crash leaves it, opens (sled's recovery drops that end). The read
    /// costs one sequential read of the log and a scan of it in memory
    /// (measured in a debug build, `writer_open_audit_cost`: 25 ms to open
    /// a store of 1,000 sessions, 2.2 MB, against 16 ms without it; 103 ms
    /// against 63 ms for 5,000 sessions, 10 MB).
    ///
    /// The blob files the log points to are checked too (sled keeps a
    /// value over a quarter of a segment, 32 KiB, in a file of its own in
    /// `blobs`, a CRC32 before it): a blob that fails its checksum, or is
    /// cut short, makes sled's recovery stop at its record, drop every
    /// record written after it and delete their blobs; a missing one makes
    /// it skip the record. A blob of a value the store holds that is
    /// damaged or missing, or a damaged one that recovery reads, is refused
    /// as [`StoreError::Damaged`] naming the blob file, and nothing is
    /// changed. This reads every such blob once (the store's large values).
    ///
    /// A database another process has open (sled locks its `db` file) is
    /// refused, before anything is read, as a [`StoreError::Backend`]
    /// saying it is open in another process and naming the path.
    ///
    /// A directory that is no sled database and not empty (a `LogStore`'s,
    /// a `FileStore`'s, a project's: no `conf` or `db`, and an entry that is
    /// not hidden) is refused as [`StoreError::NotAStore`], naming what it
    /// holds, and nothing is written there: sled would add its files among
    /// them.
    ///
    /// A database of another program (data, but none of harness's trees:
    /// see the type's docs) is refused as [`StoreError::NotAStore`], naming
    /// the path and the trees found, and harness writes
    /// nothing to it: no tree, no key, no permission. sled itself has
    /// opened it by then, to list its trees, and sled's open does its own
    /// housekeeping: the first open after the database's writer closed it
    /// zeroes log space sled had already freed, pads the log to the end of
    /// its segment with zeros and writes sled's page table to a new
    /// `snap.*` file (measured: no byte turned into anything but zero, and
    /// a second open changed nothing), as that program's own next open
    /// would. A log damaged in its middle is refused before sled opens it
    /// (above), whoever wrote it.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let path = path.as_ref();
        let found = foreign_directory(path).map_err(|e| {
            StoreError::backend(format!("sled store: cannot list {}: {e}", path.display()))
        })?;
        if let Some(found) = found {
            return Err(StoreError::NotAStore {
                path: path.to_path_buf(),
                found: format!(
                    "{found}. Nothing was written there. Give the directory of a harness \
                     store, or a new or empty one"
                ),
            });
        }
        read_only::private_dir_builder()
            .recursive(true)
            .create(path)
            .map_err(|e| {
                StoreError::backend(format!("sled store: cannot create {}: {e}", path.display()))
            })?;
        let segment_size = match stored_segment_size(path) {
            Ok(size) => size.unwrap_or(SEGMENT_SIZE),
            Err(why) => {
                return Err(StoreError::Damaged {
                    store: path.to_path_buf(),
                    file: path.join("conf"),
                    offset: None,
                    what: format!(
                        "{why}. The store was not opened and nothing was changed: sled's \
                         `conf` was edited or damaged; put back the size the database was \
                         created with ({SEGMENT_SIZE} for one `SledStore::open` created)"
                    ),
                });
            }
        };
        // Before the log is read: another process writing it meanwhile
        // would show as damage.
        if held_elsewhere(path) {
            return Err(StoreError::backend(in_use("sled store", path)));
        }
        audit_log(path, segment_size)?;
        let db = sled::Config::new()
            .path(path)
            .segment_size(segment_size)
            .open()
            .map_err(|e| {
                if lock_refused(&e) {
                    StoreError::backend(in_use("sled store", path))
                } else {
                    sled_error(&format!("open {}", path.display()), &e)
                }
            })?;
        // Before anything of harness's is written: its trees, the files'
        // permissions.
        let found = foreign_contents(&db)
            .map_err(|e| sled_error(&format!("list the trees of {}", path.display()), &e))?;
        if let Some(found) = found {
            return Err(StoreError::NotAStore {
                path: path.to_path_buf(),
                found: format!(
                    "another program's sled database: {found}. Nothing was written to it (no \
                     tree, no key, no permission). Give the directory of a harness store, or a \
                     new or empty one; to keep sessions in a database of your own, open it \
                     with `SledStore::with_config`"
                ),
            });
        }
        #[cfg(unix)]
        read_only::restrict_sled_files(path).map_err(|e| {
            StoreError::backend(format!(
                "sled store: cannot restrict the permissions of {}: {e}",
                path.display()
            ))
        })?;
        Self::with_db(db, Some(path.to_path_buf()))
    }

    /// Opens the database at `path` for reading only, without changing a
    /// byte of it: for inspection tools (`harness sessions`, the studio).
    ///
    /// sled cannot open a database without writing to it (see the type's
    /// docs), so this copies the database's files into a private directory
    /// (`0700`, under the system's temporary directory, deleted when the
    /// last handle is dropped) and opens the copy; the original is only
    /// read, under a shared lock on its `db` file, which fails while
    /// another process has the database open ([`ReadOnlyError::InUse`]).
    /// The store shows the database as it was when it was copied; its
    /// commits are refused.
    ///
    /// Damage is reported, never shown as another state
    /// ([`ReadOnlyError::Damaged`], naming the file and the offset):
    /// - a `db` or `conf` file missing, or a `db` file too short to be a
    ///   log;
    /// - a log sled's recovery cannot read (an error, or a panic of sled's);
    /// - a log whose recovery stops before its end: the log as it was
    ///   before the open is read from where recovery stopped, and a whole
    ///   record of sled's there (its checksum good, written in the segment
    ///   it is in) means that sled would have dropped it; a record cut
    ///   short by the end of the file (a truncated file, or a write torn by
    ///   a crash) is reported too;
    /// - a segment header that fails its checksum;
    /// - whatever [`SledStore::open`] refuses: a log damaged in its middle,
    ///   a blob file that fails sled's checksum or is missing (named as the
    ///   damaged file).
    ///
    /// What a crash of the writer leaves at the end of the log is not
    /// damage, as [`SledStore::open`] opens it: records no commit was
    /// acknowledged for (a batch, a transaction, whose records were not
    /// all written, followed by bytes never written), or padding with no
    /// data, which sled's recovery drops. The store is read as recovery
    /// leaves it, with a warning (`tracing`) saying so. A log cut short
    /// inside a record is still reported: a crash that tore a write is not
    /// told from a truncated file.
    ///
    /// Comparing the copy's files before and after the open cannot do
    /// this: a clean open rewrites bytes as well (sled zeroes the segments
    /// it had freed and the stale end of its last segment; measured, a
    /// first open of a cleanly closed 1 MB database rewrote 197,595 of its
    /// bytes). A log cut exactly between two records looks like a shorter
    /// log and is not detected.
    ///
    /// A path that is missing, a directory without sled's files, or a
    /// database of another program (data, but none of harness's trees: see
    /// the type's docs; `why` names the trees found) is
    /// [`ReadOnlyError::NotAStore`]: nothing is created. Records that fail
    /// their checksum are reported when read, as [`StoreError::Load`].
    /// Blocks while it copies and opens; the copy costs about the time to
    /// read the database's files once and as much temporary disk. The copy
    /// is in a private directory (`0700`) under the system's temporary
    /// directory, deleted when the store is dropped; the copy of a process
    /// that was killed before is deleted by the next `open_read_only` (of
    /// any database) once that process is gone (on Linux, where `/proc`
    /// tells).
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Self, ReadOnlyError> {
        let path = path.as_ref();
        let not_a_store = |why: String| ReadOnlyError::NotAStore {
            path: path.to_path_buf(),
            why,
        };
        let meta = std::fs::metadata(path).map_err(|e| not_a_store(e.to_string()))?;
        if !meta.is_dir() {
            return Err(not_a_store("not a directory".into()));
        }
        let (db_path, conf_path) = (path.join("db"), path.join("conf"));
        let damaged = |file: &Path, offset: Option<u64>, what: String| {
            ReadOnlyError::Damaged(Damage {
                store: path.to_path_buf(),
                file: file.to_path_buf(),
                offset,
                what,
            })
        };
        match (db_path.is_file(), conf_path.is_file()) {
            (false, false) => {
                return Err(not_a_store(
                    "no sled database here (no `db` and `conf` files)".into(),
                ));
            }
            (true, false) => {
                return Err(damaged(
                    &conf_path,
                    None,
                    "sled's `conf` file is missing".into(),
                ));
            }
            (false, true) => {
                return Err(damaged(
                    &db_path,
                    None,
                    "sled's log file `db` is missing".into(),
                ));
            }
            (true, true) => {}
        }
        let mut db_file =
            std::fs::File::open(&db_path).map_err(|e| read_only::io_error("open", &db_path, &e))?;
        if !read_only::try_lock_shared(&db_file, &db_path)? {
            return Err(ReadOnlyError::InUse {
                path: path.to_path_buf(),
            });
        }
        let dir = PrivateDir::new("sled-read")?;
        let copy = dir.path().join("db");
        // Under the lock: no writer can open the database while it is
        // copied.
        read_only::copy_tree(path, &copy)?;
        let len = db_file
            .metadata()
            .map_err(|e| read_only::io_error("inspect", &db_path, &e))?
            .len();
        if len < 20 {
            return Err(damaged(
                &db_path,
                Some(len),
                format!("the log is {len} bytes long, too short for sled's first segment header"),
            ));
        }
        let segment_size = match stored_segment_size(&copy) {
            Ok(Some(size)) => size,
            Ok(None) => {
                return Err(damaged(
                    &conf_path,
                    None,
                    "no `segment_size` line: not sled's configuration".into(),
                ));
            }
            Err(why) => return Err(damaged(&conf_path, None, why)),
        };
        // What the application's open refuses (a log damaged in its
        // middle, a blob that fails its checksum or is missing), read in
        // the original before sled's recovery cuts the copy there (and
        // deletes the copy's later blobs).
        if let Some(found) = damage(path, segment_size, false)? {
            return Err(ReadOnlyError::Damaged(found));
        }
        let config = sled::Config::new()
            .path(&copy)
            .segment_size(segment_size)
            .flush_every_ms(None);
        let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| config.open()));
        let db = match opened {
            Ok(Ok(db)) => db,
            Ok(Err(e)) => {
                let (offset, why) = sled_open_error(&e);
                return Err(damaged(
                    &db_path,
                    offset,
                    format!("sled cannot open it: {why}"),
                ));
            }
            Err(panic) => {
                let why = panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("(no message)");
                return Err(damaged(
                    &db_path,
                    None,
                    format!("sled failed while recovering its log: {why}"),
                ));
            }
        };
        let stable = crate::sled_audit::stable_lsn(&copy)
            .map_err(|e| read_only::io_error("list", &copy, &e))?;
        std::io::Seek::rewind(&mut db_file)
            .map_err(|e| read_only::io_error("read", &db_path, &e))?;
        let lost = crate::sled_audit::audit(&mut db_file, &db_path, segment_size, stable)
            .map_err(|e| read_only::io_error("read", &db_path, &e))?;
        match lost {
            Some(lost) if lost.unacknowledged => tracing::warn!(
                log = %db_path.display(),
                offset = lost.offset,
                "sled database: {}; the store is read as sled's recovery leaves it",
                lost.what
            ),
            Some(lost) => return Err(damaged(&db_path, Some(lost.offset), lost.what)),
            None => {}
        }
        drop(db_file);
        // Before `with_db` opens harness's trees in the copy.
        let found = foreign_contents(&db).map_err(|e| {
            sled_error(
                &format!("list the trees of the copy of {}", path.display()),
                &e,
            )
        })?;
        if let Some(found) = found {
            return Err(not_a_store(format!(
                "another program's sled database: {found}"
            )));
        }
        let mut store = Self::with_db(db, Some(copy))?;
        store.copy = Some(Arc::new(ReadCopy {
            original: path.to_path_buf(),
            _dir: dir,
        }));
        Ok(store)
    }

    /// The database a store opened with [`SledStore::open_read_only`] is a
    /// copy of; `None` for a store that can commit.
    pub fn read_only_of(&self) -> Option<&Path> {
        self.copy.as_deref().map(|c| c.original.as_path())
    }

    /// A database in a temporary place, deleted when the store is dropped:
    /// for tests.
    pub fn temporary() -> Result<Self, StoreError> {
        let db = sled::Config::new()
            .temporary(true)
            .segment_size(SEGMENT_SIZE)
            .open()
            .map_err(|e| sled_error("open a temporary database", &e))?;
        Self::with_db(db, None)
    }

    /// Opens a database from a sled configuration of your own (cache
    /// size, path, ...), used as it is: sled's own segment size (512 KiB)
    /// unless you set one. sled refuses to open a database with a segment
    /// size other than the one it was created with, so for a database made
    /// by [`SledStore::open`] set `.segment_size(128 * 1024)`, the size
    /// [`SledStore::open`] and [`SledStore::temporary`] create databases
    /// with: sled cleans its log segment by segment, and only once several
    /// are mostly dead, so a small database holds a few whole segments
    /// whatever it stores (a 500-step session of 1 KiB steps took 4.8 times
    /// its state on disk with 512 KiB segments, 2.6 times with 128 KiB).
    /// sled marks that setting as meant for tests; this crate relies on it
    /// for that reason. Blocks like [`SledStore::open`].
    pub fn with_config(config: &sled::Config) -> Result<Self, StoreError> {
        let db = config
            .open()
            .map_err(|e| sled_error("open the configured database", &e))?;
        let path = (!config.temporary).then(|| config.path.clone());
        Self::with_db(db, path)
    }

    fn with_db(db: sled::Db, path: Option<PathBuf>) -> Result<Self, StoreError> {
        // sled keeps its log in the file `db` of its directory.
        let log_file = path
            .as_ref()
            .map(|dir| {
                let file = dir.join("db");
                std::fs::File::open(&file).map(Arc::new).map_err(|e| {
                    StoreError::backend(format!(
                        "sled store: cannot open {} to sync it: {e}",
                        file.display()
                    ))
                })
            })
            .transpose()?;
        let heads = db
            .open_tree(HEADS)
            .map_err(|e| sled_error("open the heads tree", &e))?;
        let checkpoints = db
            .open_tree(CHECKPOINTS)
            .map_err(|e| sled_error("open the checkpoints tree", &e))?;
        let snapshots = db
            .open_tree(SNAPSHOTS)
            .map_err(|e| sled_error("open the snapshots tree", &e))?;
        let created = db
            .open_tree(CREATED)
            .map_err(|e| sled_error("open the created tree", &e))?;
        let last_created = last_position(&created)?;
        let group = Arc::new(GroupFlush::new("sled store"));
        let applier = Applier::start(Trees {
            heads: heads.clone(),
            checkpoints: checkpoints.clone(),
            snapshots: snapshots.clone(),
            created: created.clone(),
            last_created,
            group: Arc::clone(&group),
        })?;
        Ok(Self {
            db,
            heads,
            checkpoints,
            snapshots,
            created,
            path,
            log_file,
            group,
            applier: Arc::new(applier),
            copy: None,
        })
    }

    /// The database, for inspection and repair tools.
    pub fn db(&self) -> &sled::Db {
        &self.db
    }

    /// The key of `session`'s head in the `heads` tree.
    fn head_key(session: &SessionId) -> Vec<u8> {
        session.as_str().as_bytes().to_vec()
    }

    /// The key of checkpoint `seq` of `session` in the `checkpoints` and
    /// `snapshots` trees.
    fn checkpoint_key(session: &SessionId, seq: u64) -> Vec<u8> {
        let mut key = checkpoint_prefix(session);
        key.extend_from_slice(&seq.to_be_bytes());
        key
    }

    async fn blocking<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        F: FnOnce(&SledStore) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        let store = self.clone();
        tokio::task::spawn_blocking(move || f(&store))
            .await
            .map_err(|e| StoreError::backend(format!("sled store: a disk task failed: {e}")))?
    }

    /// Flushes the database, off the async threads: sled writes out its log
    /// buffers, then the log file is synced (`fdatasync`).
    ///
    /// sled 0.34 makes its writes stable on Linux with `sync_file_range`
    /// alone, which waits for the pages to reach the device but neither
    /// flushes the device's write cache nor writes the file's metadata: a
    /// power cut or a crash of the machine could lose what it reported
    /// stable. The sync of the log file that follows is what makes a
    /// durable commit durable; with group commit it is one per group.
    async fn flush_db(&self) -> Result<(), StoreError> {
        self.blocking(|store| {
            store.db.flush().map_err(|e| sled_error("flush", &e))?;
            if let Some(file) = &store.log_file {
                file.sync_data().map_err(|e| {
                    StoreError::backend(format!("sled store: cannot sync the log file: {e}"))
                })?;
            }
            Ok(())
        })
        .await
    }

    fn checkpoints_blocking(
        &self,
        session: &SessionId,
        from_seq: u64,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        let start = Self::checkpoint_key(session, from_seq);
        let end = Self::checkpoint_key(session, u64::MAX);
        let read = |tree: &Tree| -> Result<Vec<Checkpoint>, StoreError> {
            let mut out = Vec::new();
            for item in tree.range(start.as_slice()..=end.as_slice()) {
                let (key, value) = item
                    .map_err(|e| sled_error(&format!("read the log of session {session}"), &e))?;
                let seq = seq_of_key(&key).ok_or_else(|| {
                    load_error(session, "checkpoint key", format!("malformed key {key:?}"))
                })?;
                let json = unframe(session, &format!("checkpoint {seq}"), &value)?;
                out.push(checkpoint_from_slice(session, seq, json)?);
            }
            Ok(out)
        };
        // Snapshots first: a commit may remove a snapshot (superseded by a
        // newer one, written with the updates before it) but never an
        // update, so a reader that raced such a commit still finds every
        // update after the snapshot it found.
        let snapshots = read(&self.snapshots)?;
        let updates = read(&self.checkpoints)?;
        // Both are in seq order: merge them.
        let mut out = Vec::with_capacity(updates.len() + snapshots.len());
        let (mut u, mut s) = (
            updates.into_iter().peekable(),
            snapshots.into_iter().peekable(),
        );
        loop {
            let next = match (u.peek(), s.peek()) {
                (Some(a), Some(b)) if a.seq == b.seq => {
                    return Err(load_error(
                        session,
                        format!("checkpoint {}", a.seq),
                        "stored both as an update and as a snapshot",
                    ));
                }
                (Some(a), Some(b)) if a.seq < b.seq => u.next(),
                (Some(_), Some(_)) | (None, Some(_)) => s.next(),
                (Some(_), None) => u.next(),
                (None, None) => break,
            };
            out.extend(next);
        }
        Ok(out)
    }

    /// The sessions, from the keys of the `heads` tree. A key that is not
    /// UTF-8 (not one this store writes: a `SessionId` is a string) is
    /// skipped with a warning naming it, so that one foreign key does not
    /// hide every other session (from a listing, and from the default
    /// [`runnable`](SessionStore::runnable), which lists first).
    fn sessions_blocking(&self) -> Result<Vec<SessionId>, StoreError> {
        self.ids_blocking(self.heads.iter(), usize::MAX, "list the sessions")
    }

    /// A page of ids: the heads tree is keyed by the ids' bytes, so its
    /// range from `after` (or `prefix`) on, as long as keys start with
    /// `prefix`, is the page in byte order.
    fn sessions_page_blocking(
        &self,
        prefix: &str,
        after: Option<&SessionId>,
        limit: usize,
    ) -> Result<Vec<SessionId>, StoreError> {
        use std::ops::Bound;
        let from = match after {
            Some(after) if after.as_str() >= prefix => Bound::Excluded(after.as_str().as_bytes()),
            _ => Bound::Included(prefix.as_bytes()),
        };
        let range = self
            .heads
            .range::<&[u8], _>((from, Bound::Unbounded))
            .take_while(|entry| {
                entry
                    .as_ref()
                    .map_or(true, |(key, _)| key.starts_with(prefix.as_bytes()))
            });
        self.ids_blocking(range, limit, "list a page of the sessions")
    }

    /// The feed of created sessions after `since` (see
    /// [`SessionStore::created_since`]).
    fn created_since_blocking(
        &self,
        since: Option<u64>,
        limit: usize,
    ) -> Result<Created, StoreError> {
        let Some(since) = since else {
            return Ok(Created {
                sessions: Vec::new(),
                next: last_position(&self.created)?,
            });
        };
        let what = "read the created tree";
        // Past the end: another store's position (see the trait's docs).
        let since = if since > last_position(&self.created)? {
            0
        } else {
            since
        };
        let mut page = Created {
            sessions: Vec::new(),
            next: since,
        };
        let from = std::ops::Bound::Excluded(since.to_be_bytes());
        for entry in self
            .created
            .range::<[u8; 8], _>((from, std::ops::Bound::Unbounded))
        {
            if page.sessions.len() == limit {
                break;
            }
            let (key, id) = entry.map_err(|e| sled_error(what, &e))?;
            page.next = position_of_key(&key)?;
            match String::from_utf8(id.to_vec()) {
                Ok(id) => page.sessions.push(SessionId::from(id)),
                Err(e) => tracing::warn!(
                    store = ?self.path,
                    position = page.next,
                    "sled store: skipping a created session whose id is not UTF-8: {}",
                    e.utf8_error()
                ),
            }
        }
        Ok(page)
    }

    /// The ids of up to `limit` heads of `entries`; a key that is not UTF-8
    /// (never written by this store) is skipped with a warning.
    fn ids_blocking(
        &self,
        entries: impl Iterator<Item = sled::Result<(sled::IVec, sled::IVec)>>,
        limit: usize,
        what: &str,
    ) -> Result<Vec<SessionId>, StoreError> {
        let mut out = Vec::new();
        for entry in entries {
            if out.len() == limit {
                break;
            }
            let (key, _) = entry.map_err(|e| sled_error(what, &e))?;
            match String::from_utf8(key.to_vec()) {
                Ok(id) => out.push(SessionId::from(id)),
                Err(e) => tracing::warn!(
                    store = ?self.path,
                    session = %String::from_utf8_lossy(&key),
                    key = ?key.as_ref(),
                    "sled store: skipping a key of the heads tree that is not UTF-8: {}",
                    e.utf8_error()
                ),
            }
        }
        Ok(out)
    }
}

impl Trees {
    /// Applies `commits` in order, in one sled transaction; returns each
    /// one's group-commit ticket or why it was refused.
    ///
    /// Each commit is checked against the heads as the commits before it in
    /// the batch left them, and one refused (a version conflict, a head that
    /// cannot be read) leaves no trace and does not stop the others (a
    /// commit that cannot be encoded never gets here). One transaction for many commits matters:
    /// sled writes out its log buffer at the start and the end of every
    /// transaction (one write and one `sync_file_range` each), which for a
    /// transaction per commit cost more than the commits themselves.
    fn commit_batch(&mut self, commits: &[Encoded]) -> Vec<Result<u64, StoreError>> {
        let last = self.last_created;
        // The created tree joins the transaction only when a commit of the
        // batch may create a session: a batch of steps costs what it did
        // before the feed.
        let result = if commits.iter().any(|c| c.expected.is_none()) {
            (
                &self.heads,
                &self.checkpoints,
                &self.snapshots,
                &self.created,
            )
                .transaction(|(heads, cps, snaps, created)| {
                    apply_batch(commits, (heads, cps, snaps), Some(created), last)
                })
        } else {
            (&self.heads, &self.checkpoints, &self.snapshots).transaction(|(heads, cps, snaps)| {
                apply_batch(commits, (heads, cps, snaps), None, last)
            })
        };
        match result {
            Ok((out, last_created)) => {
                self.last_created = last_created;
                // Taken once the whole batch is applied: a flush that
                // starts later covers every commit of it.
                let ticket = self.group.ticket();
                out.into_iter()
                    .map(|why| match why {
                        Some(e) => Err(e),
                        None => Ok(ticket),
                    })
                    .collect()
            }
            // The closure never aborts; kept for completeness.
            Err(TransactionError::Abort(e)) => commits
                .iter()
                .map(|_| Err(StoreError::backend(e.to_string())))
                .collect(),
            Err(TransactionError::Storage(e)) => {
                // sled may have applied part of the batch: the next
                // position is past whatever the feed now holds.
                if let Ok(last) = last_position(&self.created) {
                    self.last_created = self.last_created.max(last);
                }
                commits
                    .iter()
                    .map(|c| Err(sled_error(&format!("commit session {}", c.session), &e)))
                    .collect()
            }
        }
    }
}

/// The body of [`Trees::commit_batch`]'s transaction: each commit checked
/// against the heads as the commits before it left them, and applied
/// unless refused; a commit that creates a session is written at the next
/// position of `created` (given when a commit of the batch may create
/// one), after `last`. Returns why each commit was refused (`None` for
/// those applied) and the last position written.
fn apply_batch(
    commits: &[Encoded],
    (heads, cps, snaps): (&TransactionalTree, &TransactionalTree, &TransactionalTree),
    created: Option<&TransactionalTree>,
    mut last: u64,
) -> ConflictableTransactionResult<(Vec<Option<StoreError>>, u64), StoreError> {
    let mut out = Vec::with_capacity(commits.len());
    for commit in commits {
        let session = &commit.session;
        let found = match heads.get(&commit.head_key)? {
            None => None,
            Some(bytes) => {
                match unframe(session, "head", &bytes).and_then(|json| head_version(session, json))
                {
                    Ok(version) => Some(version),
                    Err(e) => {
                        out.push(Some(e));
                        continue;
                    }
                }
            }
        };
        if found != commit.expected {
            out.push(Some(StoreError::Conflict {
                session: session.clone(),
                expected: commit.expected,
                found,
            }));
            continue;
        }
        for key in &commit.remove {
            cps.remove(key.as_slice())?;
            snaps.remove(key.as_slice())?;
        }
        for (snapshot, key, value) in &commit.append {
            let tree = if *snapshot { snaps } else { cps };
            tree.insert(key.as_slice(), value.clone())?;
        }
        heads.insert(commit.head_key.as_slice(), commit.head.clone())?;
        // `found` is `None` only where `expected` is, so `created` is given.
        if let (None, Some(created)) = (found, created) {
            last += 1;
            created.insert(&last.to_be_bytes(), commit.head_key.as_slice())?;
        }
        out.push(None);
    }
    Ok((out, last))
}

/// A commit as the records it writes.
struct Encoded {
    session: SessionId,
    head_key: Vec<u8>,
    head: IVec,
    /// (is a snapshot, key, record)
    append: Vec<(bool, Vec<u8>, IVec)>,
    remove: Vec<Vec<u8>>,
    expected: Option<u64>,
}

impl Encoded {
    fn new(commit: &Commit) -> Result<Self, StoreError> {
        let session = &commit.head.session_id;
        let append = commit
            .append
            .iter()
            .map(|cp| {
                Ok((
                    matches!(cp.kind, CheckpointKind::Snapshot(_)),
                    SledStore::checkpoint_key(session, cp.seq),
                    IVec::from(frame(&checkpoint_to_vec(session, cp)?)),
                ))
            })
            .collect::<Result<_, StoreError>>()?;
        Ok(Self {
            session: session.clone(),
            head_key: SledStore::head_key(session),
            head: IVec::from(frame(&head_to_vec(&commit.head)?)),
            append,
            remove: commit
                .remove
                .iter()
                .map(|&seq| SledStore::checkpoint_key(session, seq))
                .collect(),
            expected: commit.expected_version,
        })
    }
}

/// Reads the log of the database at `path` (if it has one) before sled
/// opens it: a log damaged in its middle is refused as
/// [`StoreError::Damaged`], since sled's recovery would drop what follows
/// the damage and zero it on disk. A log whose end only is cut short (a
/// crash) opens: recovery drops that end, as it should.
pub(crate) fn audit_log(path: &Path, segment_size: usize) -> Result<(), StoreError> {
    match damage(path, segment_size, true)? {
        None => Ok(()),
        Some(found) => Err(StoreError::Damaged {
            store: found.store,
            file: found.file,
            offset: found.offset,
            what: format!(
                "{}. The store was not opened and nothing was changed: opening it would lose \
                 the records after the damage. Keep a copy of the directory first (e.g. `cp -a \
                 {dir} {dir}.damaged`); `harness sessions list --store {dir}` reports the same \
                 damage without changing a byte. To go on with what precedes the damage and \
                 lose what follows it, open a copy with `SledStore::with_config` (sled's own \
                 recovery)",
                found.what,
                dir = path.display()
            ),
        }),
    }
}

/// The damage in the database at `path` that sled's recovery would cut or
/// skip, if any: in its log (the log file and where), or a blob file the
/// log points to that fails sled's checksum or is missing (see
/// [`crate::sled_audit::audit_blobs`]). A log whose end only is cut short
/// is no damage (logged as a warning if `warn_torn_end`: what the
/// application's open does).
pub(crate) fn damage(
    path: &Path,
    segment_size: usize,
    warn_torn_end: bool,
) -> Result<Option<Damage>, StoreError> {
    let db_path = path.join("db");
    let mut file = match std::fs::File::open(&db_path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(read_only::io_error("open", &db_path, &e)),
    };
    let mut pages = crate::sled_audit::Pages::default();
    let lost = crate::sled_audit::audit_before_open(&mut file, &db_path, segment_size, &mut pages)
        .map_err(|e| read_only::io_error("read", &db_path, &e))?;
    match lost {
        // The reader reports it by itself (`audit`).
        Some(lost) if lost.torn_end && warn_torn_end => {
            tracing::warn!(
                log = %db_path.display(),
                offset = lost.offset,
                "sled database: {}; sled's recovery drops that end (a commit a crash cut short)",
                lost.what
            );
        }
        Some(lost) if !lost.torn_end => {
            return Ok(Some(Damage {
                store: path.to_path_buf(),
                file: db_path,
                offset: Some(lost.offset),
                what: lost.what,
            }));
        }
        Some(_) | None => {}
    }
    let blobs = path.join("blobs");
    let bad = crate::sled_audit::audit_blobs(path, &db_path, segment_size, &pages)
        .map_err(|e| read_only::io_error("read the blobs in", &blobs, &e))?;
    Ok(bad.map(|bad| Damage {
        store: path.to_path_buf(),
        file: bad.file,
        offset: None,
        what: bad.what,
    }))
}

/// The segment size an existing database at `path` was created with, from
/// the `conf` file sled keeps beside it (`segment_size: N` on a line, the
/// lines followed by a binary checksum): `Ok(None)` when there is no such
/// file or line, `Err` saying why when the value is one sled never writes
/// nor opens (not a number, not a power of two, below 256 bytes or above
/// 16 MiB).
///
/// The file is read here without sled's checksum, before sled has checked
/// anything, and the size read sizes the buffer the audit of the log
/// allocates: an edited `conf` (`segment_size: 1099511627776`) would
/// otherwise abort the process on that allocation.
pub(crate) fn stored_segment_size(path: &Path) -> Result<Option<usize>, String> {
    let Ok(conf) = std::fs::read(path.join("conf")) else {
        return Ok(None);
    };
    let text = String::from_utf8_lossy(&conf);
    let Some(value) = text
        .lines()
        .find_map(|line| line.strip_prefix("segment_size:"))
        .map(str::trim)
    else {
        return Ok(None);
    };
    let size: usize = value
        .parse()
        .map_err(|_| format!("its segment size {value:?} is not a number"))?;
    if !size.is_power_of_two() || !(MIN_SEGMENT_SIZE..=MAX_SEGMENT_SIZE).contains(&size) {
        return Err(format!(
            "its segment size {size} is not a power of two from {MIN_SEGMENT_SIZE} to \
             {MAX_SEGMENT_SIZE} bytes, as sled requires"
        ));
    }
    Ok(Some(size))
}

/// What `db` holds, when harness did not write it: `None` for a database
/// holding one of harness's trees ([`HARNESS_TREES`]), whatever else it
/// holds, or holding nothing (no tree but sled's default, and that one
/// empty: a new database); otherwise what it holds, for the message of its
/// refusal (the trees, the keys of sled's default tree). Reads only.
pub(crate) fn foreign_contents(db: &sled::Db) -> sled::Result<Option<String>> {
    let default = db.name();
    let names = db.tree_names();
    let mut others: Vec<&IVec> = names.iter().filter(|name| **name != default).collect();
    others.sort();
    let harness = |name: &IVec| HARNESS_TREES.iter().any(|t| name.as_ref() == t.as_bytes());
    if others.iter().any(|name| harness(name)) {
        return Ok(None);
    }
    let mut keys = 0;
    for key in db.iter().keys().take(KEYS_COUNTED) {
        key?;
        keys += 1;
    }
    if others.is_empty() && keys == 0 {
        return Ok(None);
    }
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    let mut held = Vec::new();
    if !others.is_empty() {
        let shown: Vec<String> = others
            .iter()
            .take(TREES_SHOWN)
            .map(|name| format!("`{}`", String::from_utf8_lossy(name).escape_debug()))
            .collect();
        let more = match others.len().saturating_sub(TREES_SHOWN) {
            0 => String::new(),
            more => format!(" and {more} more"),
        };
        held.push(format!(
            "the tree{} {}{more}",
            plural(others.len()),
            shown.join(", ")
        ));
    }
    if keys > 0 {
        let at_least = if keys == KEYS_COUNTED {
            "at least "
        } else {
            ""
        };
        held.push(format!(
            "{at_least}{keys} key{} in sled's default tree",
            plural(keys)
        ));
    }
    let ours: Vec<String> = HARNESS_TREES.iter().map(|t| format!("`{t}`")).collect();
    Ok(Some(format!(
        "it holds {}, but none of harness's trees ({})",
        held.join(" and "),
        ours.join(", ")
    )))
}

/// What the existing, non-empty directory `path` holds when it is not a
/// sled database (neither sled's `conf` nor its `db`, and an entry sled
/// does not write: a `LogStore`'s or a `FileStore`'s directory, a
/// project's), said for an error; `None` when sled may open it: it does
/// not exist, it is empty (hidden entries aside, such as `.gitkeep`, and
/// what a file system or a desktop puts anywhere: `lost+found` at a
/// volume's root, `Thumbs.db`, `desktop.ini`), or it holds sled's files.
/// sled would otherwise add its own files among the user's.
pub(crate) fn foreign_directory(path: &Path) -> std::io::Result<Option<String>> {
    let entries = match std::fs::read_dir(path) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let sled = |name: &str| matches!(name, "conf" | "db" | "blobs") || name.starts_with("snap.");
    // What a file system or a desktop puts in any directory: the root of a
    // volume (a container's mount) has `lost+found`.
    let incidental = |name: &str| matches!(name, "lost+found" | "Thumbs.db" | "desktop.ini");
    let mut names = Vec::new();
    let mut has_sled_files = false;
    for entry in entries {
        let name = entry?.file_name().to_string_lossy().into_owned();
        has_sled_files |= name == "conf" || name == "db";
        if !name.starts_with('.') && !sled(&name) && !incidental(&name) {
            names.push(name);
        }
    }
    if has_sled_files || names.is_empty() {
        return Ok(None);
    }
    names.sort();
    let has = |name: &str| names.iter().any(|n| n == name);
    if has("LOCK") && names.iter().any(|n| n.starts_with("log.")) {
        return Ok(Some(
            "a harness `LogStore`'s directory (its `LOCK` and `log.*` files); open it with \
             `LogStore::open`"
                .into(),
        ));
    }
    if has("created.feed") || names.iter().any(|n| n.starts_with("s-")) {
        return Ok(Some(
            "a harness `FileStore`'s directory (`created.feed`, `s-*` session directories); \
             open it with `FileStore::open`"
                .into(),
        ));
    }
    let shown: Vec<String> = names
        .iter()
        .take(TREES_SHOWN)
        .map(|name| format!("`{}`", name.escape_debug()))
        .collect();
    let more = match names.len().saturating_sub(TREES_SHOWN) {
        0 => String::new(),
        more => format!(" and {more} more"),
    };
    Ok(Some(format!(
        "a directory that is not a sled database: it holds {}{more}, and neither sled's \
         `conf` nor its `db`",
        shown.join(", ")
    )))
}

/// The last position of the feed of created sessions (0 when empty).
fn last_position(created: &Tree) -> Result<u64, StoreError> {
    match created
        .last()
        .map_err(|e| sled_error("read the created tree", &e))?
    {
        None => Ok(0),
        Some((key, _)) => position_of_key(&key),
    }
}

/// The position a key of the `created` tree holds.
fn position_of_key(key: &[u8]) -> Result<u64, StoreError> {
    key.try_into().map(u64::from_be_bytes).map_err(|_| {
        StoreError::backend(format!(
            "sled store: the created tree holds a key that is not a position: {key:?}"
        ))
    })
}

/// What sled's error `e` says, and the offset in its log where it found
/// damage when it says (its own text reads "file offset None backtrace
/// ()" when it does not).
fn sled_open_error(e: &sled::Error) -> (Option<u64>, String) {
    match e {
        sled::Error::Corruption { at, .. } => {
            let offset = at.map(|ptr| ptr.lid());
            let why = match offset {
                Some(_) => "its log holds corrupted data".to_string(),
                None => "its log holds corrupted data (sled does not say where)".to_string(),
            };
            (offset, why)
        }
        other => (None, other.to_string()),
    }
}

fn checkpoint_prefix(session: &SessionId) -> Vec<u8> {
    let id = session.as_str().as_bytes();
    let mut key = Vec::with_capacity(8 + id.len() + 8);
    key.extend_from_slice(&(id.len() as u64).to_be_bytes());
    key.extend_from_slice(id);
    key
}

fn seq_of_key(key: &[u8]) -> Option<u64> {
    let tail = key.len().checked_sub(8).map(|at| &key[at..])?;
    Some(u64::from_be_bytes(tail.try_into().ok()?))
}

#[async_trait]
impl SessionStore for SledStore {
    async fn load(&self, session: &SessionId) -> Result<Option<StoredRun>, StoreError> {
        let session = session.clone();
        self.blocking(move |store| {
            let bytes = store
                .heads
                .get(SledStore::head_key(&session))
                .map_err(|e| sled_error(&format!("read the head of session {session}"), &e))?;
            bytes
                .map(|b| head_from_slice(&session, unframe(&session, "head", &b)?))
                .transpose()
        })
        .await
    }

    async fn commit(&self, commit: &Commit) -> Result<(), StoreError> {
        if let Some(copy) = &self.copy {
            return Err(StoreError::backend(format!(
                "sled store {}: opened read-only, commits are refused",
                copy.original.display()
            )));
        }
        let durable = commit.durable;
        // Encoded here, on the caller's thread, rather than on the commit
        // thread that every session shares.
        let commit = Encoded::new(commit)?;
        let (reply, ticket) = tokio::sync::oneshot::channel();
        let gone = || StoreError::backend("sled store: the commit thread has stopped");
        self.applier
            .jobs
            .as_ref()
            .ok_or_else(gone)?
            .send((commit, reply))
            .map_err(|_| gone())?;
        let ticket = ticket.await.map_err(|_| gone())??;
        if durable {
            // A sled flush covers what was applied before it started: no
            // more is known.
            self.group
                .durable(ticket, || async { self.flush_db().await.map(|()| 0) })
                .await?;
        }
        Ok(())
    }

    async fn checkpoints(
        &self,
        session: &SessionId,
        from_seq: u64,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        let session = session.clone();
        self.blocking(move |store| store.checkpoints_blocking(&session, from_seq))
            .await
    }

    async fn sessions(&self) -> Result<Vec<SessionId>, StoreError> {
        self.blocking(SledStore::sessions_blocking).await
    }

    async fn sessions_page(
        &self,
        prefix: &str,
        after: Option<&SessionId>,
        limit: usize,
    ) -> Result<Vec<SessionId>, StoreError> {
        let (prefix, after) = (prefix.to_owned(), after.cloned());
        self.blocking(move |store| store.sessions_page_blocking(&prefix, after.as_ref(), limit))
            .await
    }

    async fn created_since(
        &self,
        since: Option<u64>,
        limit: usize,
    ) -> Result<Option<Created>, StoreError> {
        self.blocking(move |store| store.created_since_blocking(since, limit).map(Some))
            .await
    }

    async fn flush(&self) -> Result<(), StoreError> {
        self.flush_db().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sled's corruption error, which its own text shows as "Read corrupted
    /// data at file offset None backtrace ()", is told in words (seen from
    /// `harness sessions` on a database with a snapshot, 4 bytes of its
    /// log overwritten at offset 20: damage sled finds itself on opening).
    #[test]
    fn sled_s_errors_are_told_in_words() {
        let (offset, why) = sled_open_error(&sled::Error::Corruption { at: None, bt: () });
        assert_eq!(offset, None);
        assert_eq!(
            why,
            "its log holds corrupted data (sled does not say where)"
        );
        let (offset, why) =
            sled_open_error(&sled::Error::Unsupported("a segment size of 3".into()));
        assert_eq!(offset, None);
        assert!(why.contains("a segment size of 3"), "{why}");
    }

    /// One session's records never show in another's whose id prefixes it,
    /// also at the key level, and a session's keys sort by seq.
    #[test]
    fn keys_keep_sessions_apart_and_in_order() {
        let id = SessionId::from;
        let a = SledStore::checkpoint_key(&id("a"), u64::MAX);
        let ab = SledStore::checkpoint_key(&id("ab"), 0);
        assert!(!ab.starts_with(&a[..a.len() - 8]));
        let a0 = SledStore::checkpoint_key(&id("a"), 0);
        let a1 = SledStore::checkpoint_key(&id("a"), 1);
        let a256 = SledStore::checkpoint_key(&id("a"), 256);
        assert!(a0 < a1 && a1 < a256 && a256 < a);
        assert_eq!(seq_of_key(&a256), Some(256));
    }
}
