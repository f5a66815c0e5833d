//! The log store: every session in one append-only log file, indexed in
//! memory, with group commit.

mod frame;

use crate::group::GroupFlush;
use crate::record::{
    checkpoint_from_slice, checkpoint_to_vec, head_from_slice, head_to_vec, head_version,
    load_error,
};
use async_trait::async_trait;
use frame::{FRAME_HEAD, Frame, HEADER_LEN, MAX_PAYLOAD};
use harness::SessionId;
use harness::session::{
    Checkpoint, CheckpointKind, Commit, SCHEMA_VERSION, SessionStore, StoreError, StoredRun,
};
use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::{BufReader, BufWriter, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

/// The lock file: held exclusively by the one process that has the store
/// open.
const LOCK_FILE: &str = "LOCK";
/// Log files are `log.{generation}`.
const LOG_PREFIX: &str = "log.";
/// The most commits written in one `write`.
const MAX_BATCH: usize = 1024;
/// A compaction writes a session's checkpoints in frames of about this
/// size, the head in the last.
const COMPACT_FRAME: usize = 64 << 20;

/// How a [`LogStore`] reclaims space; see [`LogStore::open_with`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogOptions {
    /// The log is rewritten with only what is live once it is larger than
    /// this many bytes *and* more than half of it is dead (heads since
    /// replaced, checkpoints since removed). Default: 64 MiB.
    pub compact_at: u64,
}

impl Default for LogOptions {
    fn default() -> Self {
        Self {
            compact_at: 64 << 20,
        }
    }
}

impl LogOptions {
    /// The default options with another compaction threshold.
    #[must_use]
    pub fn compact_at(mut self, bytes: u64) -> Self {
        self.compact_at = bytes;
        self
    }
}

/// Sessions in one append-only log file, indexed in memory: the embedded
/// store built for many sessions committing at once.
///
/// Every commit is one checksummed frame appended to `log.{generation}` in
/// the store's directory (the frame layout is in the crate's source,
/// `log_store/frame.rs`). One thread appends the commits of every session,
/// every commit waiting when it comes round in one `write`; a durable
/// commit then waits for an `fdatasync` that started after its write, and
/// one such sync covers every commit written before it (group commit), so
/// a thousand sessions stepping at once share each sync rather than queue
/// for one each. A commit that is not durable is written too (it survives
/// the process dying, not the machine).
///
/// The index (each session's head, and where each checkpoint is in the
/// file) lives in memory and is rebuilt from the log when the store opens;
/// [`load`](SessionStore::load) reads no disk, and
/// [`checkpoints`](SessionStore::checkpoints) reads each checkpoint with
/// one positioned read. The heads are kept in memory as their JSON.
///
/// **Crashes.** A frame is read whole or not at all: a commit torn by a
/// crash fails its checksum and is, with everything after it, the end of
/// the log. When the store opens it moves those bytes aside into
/// `log.{generation}.tail-{offset}` (a commit that was acknowledged durable
/// is never among them, short of the disk damaging what it had synced)
/// and says so in a `tracing` warning and in [`LogStore::set_aside`].
///
/// **Space.** Replaced heads and removed checkpoints stay in the file until
/// a compaction rewrites it with only what is live (see [`LogOptions`]):
/// into `log.{generation + 1}.tmp`, synced, renamed into place, after which
/// the old file is deleted. Commits wait while it runs. A crash at any
/// point leaves either the old file or the new one whole; the store opens
/// the newest generation.
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
    writer: Arc<Writer>,
}

impl std::fmt::Debug for LogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogStore")
            .field("dir", &self.core.dir)
            .finish_non_exhaustive()
    }
}

/// What the writer thread and the store's handles share.
struct Core {
    dir: PathBuf,
    options: LogOptions,
    shared: Mutex<Shared>,
    group: GroupFlush,
    /// Where the damaged end of the log went when the store opened.
    set_aside: Option<PathBuf>,
    /// Held (locked) for as long as the store is open.
    _lock: File,
}

/// The log file and the index, under one lock.
struct Shared {
    file: Arc<File>,
    generation: u64,
    /// Bytes written: where the next frame goes.
    len: u64,
    /// Bytes of live bodies (heads and checkpoints in the index).
    live: u64,
    /// Don't try compacting again before the log is this long (after a
    /// compaction, or one that failed).
    next_compaction: u64,
    sessions: HashMap<SessionId, Entry>,
    /// Why the store takes no more commits: a failed write it could not
    /// undo.
    broken: Option<String>,
}

#[derive(Default)]
struct Entry {
    /// `None` while only a compaction's checkpoint frames are read.
    head: Option<Head>,
    checkpoints: BTreeMap<u64, Loc>,
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

/// Where a checkpoint's body is in the log file.
#[derive(Clone, Copy, Debug)]
struct Loc {
    offset: u64,
    len: u32,
    snapshot: bool,
}

/// A commit for the writer thread, encoded by its caller.
struct Encoded {
    bytes: Vec<u8>,
    frame: Frame,
    expected: Option<u64>,
    /// The new head's version, `None` if this build could not read it back.
    version: Option<u64>,
}

type Job = (
    Encoded,
    tokio::sync::oneshot::Sender<Result<u64, StoreError>>,
);

/// The thread that appends every commit, and its channel. Dropping the last
/// handle closes the channel and waits for the thread.
struct Writer {
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Writer {
    fn drop(&mut self) {
        drop(self.jobs.take());
        if let Some(thread) = self.thread.take()
            && thread.thread().id() != std::thread::current().id()
        {
            let _ = thread.join();
        }
    }
}

fn guard<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The index is changed only after each check, with no panic point in
    // between, so it is whole whatever panicked while holding it.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn io_error(what: &str, path: &Path, e: &std::io::Error) -> StoreError {
    StoreError::backend(format!("log store: cannot {what} {}: {e}", path.display()))
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
            Some(generation) => (generation, open_log(&dir, generation)?),
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
                live,
                next_compaction: 0,
                sessions,
                broken: None,
            }),
            group: GroupFlush::new("log store"),
            set_aside,
            _lock: lock,
        });
        let writer = Writer::start(Arc::clone(&core))?;
        Ok(Self {
            core,
            writer: Arc::new(writer),
        })
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.core.dir
    }

    /// Where the damaged end of the log was moved when the store opened
    /// (see the type's docs), if it had one.
    pub fn set_aside(&self) -> Option<&Path> {
        self.core.set_aside.as_deref()
    }

    /// The current log file.
    pub fn log_path(&self) -> PathBuf {
        log_path(&self.core.dir, guard(&self.core.shared).generation)
    }

    /// Syncs the log file: every commit written before the call is on disk
    /// after it.
    async fn sync(&self) -> Result<(), StoreError> {
        let (file, generation) = {
            let shared = guard(&self.core.shared);
            (Arc::clone(&shared.file), shared.generation)
        };
        let path = log_path(&self.core.dir, generation);
        tokio::task::spawn_blocking(move || {
            file.sync_data()
                .map_err(|e| io_error("sync the log", &path, &e))
        })
        .await
        .map_err(|e| StoreError::backend(format!("log store: a disk task failed: {e}")))?
    }
}

impl Writer {
    fn start(core: Arc<Core>) -> Result<Self, StoreError> {
        let (jobs, queue) = mpsc::channel::<Job>();
        let thread = std::thread::Builder::new()
            .name("harness-log-writer".into())
            .spawn(move || {
                while let Ok(first) = queue.recv() {
                    let mut batch = vec![first];
                    while batch.len() < MAX_BATCH {
                        match queue.try_recv() {
                            Ok(job) => batch.push(job),
                            Err(_) => break,
                        }
                    }
                    let (commits, replies): (Vec<Encoded>, Vec<_>) = batch.into_iter().unzip();
                    for (reply, result) in replies.into_iter().zip(core.append(commits)) {
                        // The caller may have gone: the commit stands.
                        let _ = reply.send(result);
                    }
                    core.maybe_compact();
                }
            })
            .map_err(|e| {
                StoreError::backend(format!("log store: cannot start the writer thread: {e}"))
            })?;
        Ok(Self {
            jobs: Some(jobs),
            thread: Some(thread),
        })
    }
}

impl Core {
    /// Appends `commits` in one write, each checked against the heads as
    /// the commits before it left them; returns each one's group-commit
    /// ticket or why it was refused. The index changes only once the write
    /// has succeeded, so a reader never sees a checkpoint that is not in
    /// the file.
    fn append(&self, commits: Vec<Encoded>) -> Vec<Result<u64, StoreError>> {
        let mut out: Vec<Result<u64, StoreError>> = Vec::with_capacity(commits.len());
        let mut buf = Vec::with_capacity(commits.iter().map(|c| c.bytes.len()).sum());
        let (file, base) = {
            let shared = guard(&self.shared);
            if let Some(why) = &shared.broken {
                let why = why.clone();
                return commits
                    .iter()
                    .map(|_| Err(StoreError::backend(why.clone())))
                    .collect();
            }
            // The heads this batch has written so far.
            let mut written: HashMap<&SessionId, (Option<u64>, &[u8])> = HashMap::new();
            for commit in &commits {
                let session = &commit.frame.session;
                let current = match written.get(session) {
                    Some(&(version, json)) => Some((version, json)),
                    None => shared
                        .sessions
                        .get(session)
                        .and_then(|e| e.head.as_ref())
                        .map(|h| (h.version, &*h.json)),
                };
                let found = match current {
                    None => None,
                    Some((Some(version), _)) => Some(version),
                    // A head this build cannot read is not written over:
                    // the error says why it cannot be read.
                    Some((None, json)) => {
                        out.push(Err(head_version(session, json).err().unwrap_or_else(
                            || load_error(session, "head", "unreadable by this build"),
                        )));
                        continue;
                    }
                };
                if found != commit.expected {
                    out.push(Err(StoreError::Conflict {
                        session: session.clone(),
                        expected: commit.expected,
                        found,
                    }));
                    continue;
                }
                if let Some((at, len)) = commit.frame.head {
                    let json = &commit.bytes[at as usize..(at + len) as usize];
                    written.insert(session, (commit.version, json));
                }
                out.push(Ok(base_offset(shared.len, &buf)));
                buf.extend_from_slice(&commit.bytes);
            }
            (Arc::clone(&shared.file), shared.len)
        };
        if buf.is_empty() {
            return out;
        }
        if let Err(e) = file.write_all_at(&buf, base) {
            let path = log_path(&self.dir, guard(&self.shared).generation);
            let why = format!("log store: cannot write to {}: {e}", path.display());
            // Cut whatever part of the write landed, so that the next
            // frame follows the last whole one.
            if let Err(cut) = file.set_len(base) {
                guard(&self.shared).broken = Some(format!(
                    "{why}; and cannot cut the log back to {base} bytes ({cut}): \
                     the store takes no more commits; reopen it"
                ));
            }
            return out
                .into_iter()
                .map(|r| r.and_then(|_| Err(StoreError::backend(why.clone()))))
                .collect();
        }
        let ticket = {
            let mut shared = guard(&self.shared);
            for (commit, result) in commits.iter().zip(&out) {
                if let Ok(offset) = result {
                    shared.index(*offset, &commit.frame, &commit.bytes, commit.version);
                }
            }
            shared.len = base + buf.len() as u64;
            // Taken once the batch is written: a sync that starts later
            // covers all of it.
            self.group.ticket()
        };
        out.into_iter().map(|r| r.map(|_| ticket)).collect()
    }

    /// Compacts the log if it is past the threshold and mostly dead; a
    /// compaction that fails leaves the log as it was and is retried once
    /// the log has grown by half the threshold again.
    fn maybe_compact(&self) {
        let (len, live, next) = {
            let shared = guard(&self.shared);
            (shared.len, shared.live, shared.next_compaction)
        };
        if len < self.options.compact_at.max(next) || len < 2 * live + HEADER_LEN {
            return;
        }
        if let Err(e) = self.compact() {
            tracing::warn!(dir = %self.dir.display(), error = %e, "log store: compaction failed; the log is kept as it was");
        }
        let mut shared = guard(&self.shared);
        shared.next_compaction = shared.len + self.options.compact_at / 2;
    }

    /// Rewrites the log with only what is live, into the next generation.
    /// Runs on the writer thread, so no commit changes the index meanwhile.
    fn compact(&self) -> Result<(), StoreError> {
        let (old, generation, sessions) = {
            let shared = guard(&self.shared);
            let sessions: Vec<Live> = shared
                .sessions
                .iter()
                .map(|(id, e)| {
                    let cps = e.checkpoints.iter().map(|(s, l)| (*s, *l)).collect();
                    (id.clone(), e.head.clone(), cps)
                })
                .collect();
            (Arc::clone(&shared.file), shared.generation, sessions)
        };
        let next = generation + 1;
        let tmp = tmp_path(&self.dir, next);
        let result = (|| {
            let file = create_file(&tmp, true).map_err(|e| io_error("create", &tmp, &e))?;
            let mut out = BufWriter::with_capacity(1 << 20, &file);
            let write_err = |e: std::io::Error| io_error("write", &tmp, &e);
            out.write_all(&frame::header()).map_err(write_err)?;
            let mut at = HEADER_LEN;
            let mut index: HashMap<SessionId, Entry> = HashMap::with_capacity(sessions.len());
            let mut live = 0;
            let old_path = log_path(&self.dir, generation);
            for (session, head, cps) in sessions {
                let mut bodies: Vec<(u64, bool, Vec<u8>)> = Vec::new();
                let mut size = 0;
                let mut chunks = cps.into_iter().peekable();
                loop {
                    let next = chunks.next();
                    if let Some((seq, loc)) = next {
                        let mut body = vec![0u8; loc.len as usize];
                        old.read_exact_at(&mut body, loc.offset)
                            .map_err(|e| io_error("read", &old_path, &e))?;
                        size += body.len();
                        bodies.push((seq, loc.snapshot, body));
                    }
                    let last = chunks.peek().is_none();
                    if !(last || size >= COMPACT_FRAME) {
                        continue;
                    }
                    let refs: Vec<(u64, bool, &[u8])> = bodies
                        .iter()
                        .map(|(s, k, b)| (*s, *k, b.as_slice()))
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
                    let entry = index.entry(session.clone()).or_default();
                    let version = head.as_ref().and_then(|h| h.version);
                    live += index_frame(entry, at, &frame, &bytes, version).1;
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
            file.sync_all().map_err(|e| io_error("sync", &tmp, &e))?;
            let path = log_path(&self.dir, next);
            fs::rename(&tmp, &path).map_err(|e| io_error("rename into place", &tmp, &e))?;
            sync_dir(&self.dir)?;
            Ok((file, at, index, live))
        })();
        let (file, len, index, live) = match result {
            Ok(done) => done,
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                return Err(e);
            }
        };
        {
            let mut shared = guard(&self.shared);
            shared.file = Arc::new(file);
            shared.generation = next;
            shared.len = len;
            shared.live = live;
            shared.sessions = index;
        }
        let old_path = log_path(&self.dir, generation);
        if let Err(e) = fs::remove_file(&old_path) {
            // The new generation is whole; the old one is deleted when the
            // store next opens.
            tracing::warn!(path = %old_path.display(), error = %e, "log store: cannot delete the compacted log");
        }
        Ok(())
    }
}

/// Where the next frame of the batch goes.
fn base_offset(len: u64, buf: &[u8]) -> u64 {
    len + buf.len() as u64
}

impl Shared {
    /// Indexes a frame written at `offset`.
    fn index(&mut self, offset: u64, frame: &Frame, bytes: &[u8], version: Option<u64>) {
        let entry = self.sessions.entry(frame.session.clone()).or_default();
        let (dead, added) = index_frame(entry, offset, frame, bytes, version);
        self.live = self.live.saturating_sub(dead) + added;
    }
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
        if let Some(loc) = entry.checkpoints.remove(seq) {
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
        if let Ok(generation) = rest.parse::<u64>() {
            found.push(generation);
        } else if rest
            .strip_suffix(".tmp")
            .is_some_and(|g| g.parse::<u64>().is_ok())
        {
            tmps.push(entry.path());
        }
    }
    found.sort_unstable();
    let newest = found.pop();
    tmps.extend(found.into_iter().map(|g| log_path(dir, g)));
    Ok((newest, tmps))
}

fn log_path(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("{LOG_PREFIX}{generation}"))
}

fn tmp_path(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("{LOG_PREFIX}{generation}.tmp"))
}

type Opened = (File, u64, HashMap<SessionId, Entry>, u64, Option<PathBuf>);

/// A new, empty log of `generation`.
fn create_log(dir: &Path, generation: u64) -> Result<Opened, StoreError> {
    let path = log_path(dir, generation);
    let file = create_file(&path, true).map_err(|e| io_error("create", &path, &e))?;
    file.write_all_at(&frame::header(), 0)
        .and_then(|()| file.sync_all())
        .map_err(|e| io_error("write", &path, &e))?;
    sync_dir(dir)?;
    Ok((file, HEADER_LEN, HashMap::new(), 0, None))
}

/// Reads the log of `generation` into an index. A damaged end (a frame
/// that is cut short, fails its checksum or does not parse, and all after
/// it) is moved aside and cut off.
fn open_log(dir: &Path, generation: u64) -> Result<Opened, StoreError> {
    let path = log_path(dir, generation);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| io_error("open", &path, &e))?;
    let size = file
        .metadata()
        .map_err(|e| io_error("read the size of", &path, &e))?
        .len();
    let read_err = |e: std::io::Error| io_error("read", &path, &e);
    let mut reader = BufReader::with_capacity(1 << 20, &file);
    let mut header = [0u8; HEADER_LEN as usize];
    let got = read_up_to(&mut reader, &mut header).map_err(read_err)?;
    frame::check_header(&header[..got]).map_err(|why| {
        StoreError::backend(format!(
            "log store: {} is not a log this build can read: {why}; nothing was changed",
            path.display()
        ))
    })?;
    let mut sessions: HashMap<SessionId, Entry> = HashMap::new();
    let mut live = 0u64;
    let mut at = HEADER_LEN;
    let mut payload = Vec::new();
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
        payload.resize(len, 0);
        reader.read_exact(&mut payload).map_err(read_err)?;
        if crc32fast::hash(&payload) != crc {
            break Some("a frame fails its checksum".to_string());
        }
        let frame = match frame::decode(&payload) {
            Ok(frame) => frame,
            Err(why) => break Some(format!("a frame does not parse: {why}")),
        };
        let mut bytes = Vec::with_capacity(FRAME_HEAD + len);
        bytes.extend_from_slice(&head);
        bytes.extend_from_slice(&payload);
        let version = frame.head.and_then(|(h, l)| {
            head_version(&frame.session, &bytes[h as usize..(h + l) as usize]).ok()
        });
        let entry = sessions.entry(frame.session.clone()).or_default();
        let (dead, added) = index_frame(entry, at, &frame, &bytes, version);
        live = live.saturating_sub(dead) + added;
        at += (FRAME_HEAD + len) as u64;
    };
    drop(reader);
    // A compaction's checkpoint frames whose head frame was never written
    // cannot be: the compaction renames its file only once whole. Entries
    // without a head are left out of `sessions()` all the same.
    let set_aside = match damage {
        None => None,
        Some(why) => Some(set_aside(dir, &path, &file, generation, at, size, &why)?),
    };
    Ok((file, at, sessions, live, set_aside))
}

/// Moves the bytes of `file` from `at` to `size` into a file of their own,
/// synced, then cuts the log at `at`.
fn set_aside(
    dir: &Path,
    path: &Path,
    file: &File,
    generation: u64,
    at: u64,
    size: u64,
    why: &str,
) -> Result<PathBuf, StoreError> {
    let aside = dir.join(format!("{LOG_PREFIX}{generation}.tail-{at}"));
    let mut tail = vec![0u8; usize::try_from(size - at).unwrap_or(usize::MAX)];
    file.read_exact_at(&mut tail, at)
        .map_err(|e| io_error("read", path, &e))?;
    let out = create_file(&aside, true).map_err(|e| io_error("create", &aside, &e))?;
    out.write_all_at(&tail, 0)
        .and_then(|()| out.sync_all())
        .map_err(|e| io_error("write", &aside, &e))?;
    sync_dir(dir)?;
    file.set_len(at)
        .and_then(|()| file.sync_all())
        .map_err(|e| io_error("cut the damaged end of", path, &e))?;
    tracing::warn!(
        log = %path.display(),
        offset = at,
        bytes = size - at,
        moved_to = %aside.display(),
        "log store: {why}; the log ends there and the {} bytes from there on were moved aside \
         (a commit cut short by a crash, not yet acknowledged as durable)",
        size - at
    );
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

impl Encoded {
    fn new(commit: &Commit) -> Result<Self, StoreError> {
        let session = &commit.head.session_id;
        let bodies = commit
            .append
            .iter()
            .map(|cp| {
                Ok((
                    cp.seq,
                    matches!(cp.kind, CheckpointKind::Snapshot(_)),
                    checkpoint_to_vec(session, cp)?,
                ))
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        let refs: Vec<(u64, bool, &[u8])> = bodies
            .iter()
            .map(|(s, k, b)| (*s, *k, b.as_slice()))
            .collect();
        let head = head_to_vec(&commit.head)?;
        let (bytes, frame) = frame::encode(session, &commit.remove, &refs, Some(&head))
            .map_err(|why| StoreError::backend(format!("log store: session {session}: {why}")))?;
        Ok(Self {
            bytes,
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

    async fn commit(&self, commit: Commit) -> Result<(), StoreError> {
        let durable = commit.durable;
        let commit = Encoded::new(&commit)?;
        let (reply, ticket) = tokio::sync::oneshot::channel();
        let gone = || StoreError::backend("log store: the writer thread has stopped");
        self.writer
            .jobs
            .as_ref()
            .ok_or_else(gone)?
            .send((commit, reply))
            .map_err(|_| gone())?;
        let ticket = ticket.await.map_err(|_| gone())??;
        if durable {
            self.core.group.durable(ticket, || self.sync()).await?;
        }
        Ok(())
    }

    async fn checkpoints(
        &self,
        session: &SessionId,
        from_seq: u64,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        let (file, generation, locs) = {
            let shared = guard(&self.core.shared);
            let locs: Vec<(u64, Loc)> = shared
                .sessions
                .get(session)
                .map(|e| {
                    e.checkpoints
                        .range(from_seq..)
                        .map(|(s, l)| (*s, *l))
                        .collect()
                })
                .unwrap_or_default();
            (Arc::clone(&shared.file), shared.generation, locs)
        };
        if locs.is_empty() {
            return Ok(Vec::new());
        }
        let path = log_path(&self.core.dir, generation);
        let session = session.clone();
        tokio::task::spawn_blocking(move || {
            let mut out = Vec::with_capacity(locs.len());
            let mut body = Vec::new();
            for (seq, loc) in locs {
                body.resize(loc.len as usize, 0);
                file.read_exact_at(&mut body, loc.offset).map_err(|e| {
                    io_error(
                        &format!("read checkpoint {seq} of session {session} from"),
                        &path,
                        &e,
                    )
                })?;
                out.push(checkpoint_from_slice(&session, seq, &body)?);
            }
            Ok(out)
        })
        .await
        .map_err(|e| StoreError::backend(format!("log store: a disk task failed: {e}")))?
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

    async fn flush(&self) -> Result<(), StoreError> {
        self.sync().await
    }
}
