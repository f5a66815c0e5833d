//! The file store: one directory per session, atomic writes.

use crate::read_only::ReadOnlyError;
use crate::record::{
    checkpoint_from_slice, checkpoint_to_vec, head_from_value, head_to_value, load_error,
};
use async_trait::async_trait;
use harness::SessionId;
use harness::durable::{self, WriteError};
use harness::session::{Checkpoint, Commit, Created, SessionStore, StoreError, StoredRun};
use serde_json::{Value, json};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// The head's file in a session directory.
const HEAD_FILE: &str = "head.json";
/// The lock file in a session directory.
const LOCK_FILE: &str = "lock";
/// The prefix of session directory names.
const DIR_PREFIX: &str = "s-";
/// The longest file name most file systems take.
const NAME_MAX: usize = 255;
/// The feed of created sessions, at the root (see [`FileStore`]).
const FEED_FILE: &str = "created.feed";
/// How much of the feed a reader holds at a time: more than a line this
/// store writes (a directory name and its newline) can hold.
const FEED_TAIL: u64 = 4096;
/// How many sessions a store remembers having cleaned of a crash's
/// temporary files; past this it forgets them all, and cleans each once
/// more (one directory listing) when it next commits to it.
const CLEANED_MAX: usize = 1 << 16;

/// Sessions as files: one directory per session under a root directory.
///
/// Layout, under the root:
/// - `s-{id}/`: a session; the id is kept as is when it is made of `a-z`,
///   `0-9`, `-` and `_`, every other byte is escaped as `%XX` (so `../x`,
///   `a/b` or `A` cannot leave the root nor collide on a case-insensitive
///   file system). The name must fit in 255 bytes: longer ids are refused.
/// - `s-{id}/head.json`: `{"head": <StoredRun>, "removed": [seq…],
///   "synced_seq": n|null}`, replaced atomically with
///   [`harness::durable`] (a temporary file with a unique name, fsync,
///   rename, fsync of the directory);
/// - `s-{id}/cp-{seq:020}.json`: one checkpoint, written the same way;
/// - `s-{id}/lock`: taken exclusively by commits and shared by log reads, so
///   that several processes can share a root.
/// - `created.feed`: the feed of created sessions
///   ([`created_since`](SessionStore::created_since)), one line per
///   creation, the session's directory name; a position is the byte offset
///   after a line. A creation appends its line once its head is written,
///   in one write under the file's exclusive lock, which first ends with a
///   newline a line a crash cut short; readers take whole lines only and
///   skip a line that names no session, with a warning. The feed is never
///   fsynced (a few µs per creation, against about 1.4 ms for the
///   creation): an OS crash may lose its last lines, which only readers
///   the crash also stopped could have followed. A creation whose line
///   cannot be written is left out of the feed, with a warning: the
///   session is created. The feed holds the creations of the versions that
///   keep it, and it is shared by every process on the root where appends
///   are atomic (a local file system; not NFS).
///
/// A commit writes its checkpoints first and the head last, so a crash
/// mid-commit leaves the previous head, which ignores the new files (their
/// seqs are beyond its `last_seq`; the next commit overwrites them). Removed
/// checkpoints are listed in the new head and deleted after it is written,
/// so readers never see a half-applied removal either. The temporary files
/// of a write the crash interrupted (`.head.json.*.tmp`, `.cp-*.json.*.tmp`)
/// are never read, and the first commit to the session from each store
/// handle deletes them.
///
/// On unix, files are created `0600` and directories `0700`.
///
/// With `durable = false` a commit skips every fsync: it survives a crash of
/// the process (the OS has the writes), but an OS crash or power loss may
/// lose it, and on some file systems leave its files empty, which reads then
/// report as [`StoreError::Load`] rather than misread. The next durable
/// commit of the session, or [`flush`](SessionStore::flush), first syncs
/// what earlier non-durable commits wrote, so a durable head never points at
/// unsynced checkpoints.
///
/// ```no_run
/// use harness_stores::FileStore;
///
/// let store = FileStore::open("/var/lib/my-agent/sessions")?;
/// # Ok::<(), harness::session::StoreError>(())
/// ```
#[derive(Clone)]
pub struct FileStore {
    inner: Arc<Inner>,
}

struct Inner {
    root: PathBuf,
    /// Opened with [`FileStore::open_read_only`]: commits are refused.
    read_only: bool,
    /// One lock per session, for commits from this process.
    locks: Mutex<HashMap<SessionId, Arc<tokio::sync::Mutex<()>>>>,
    /// Sessions this process committed without fsync since the last flush.
    unsynced: Mutex<BTreeSet<SessionId>>,
    /// Sessions whose directory this handle has cleaned of temporary files
    /// left by a crash (see [`CLEANED_MAX`]).
    cleaned: Mutex<HashSet<SessionId>>,
}

impl std::fmt::Debug for FileStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileStore")
            .field("root", &self.inner.root)
            .finish_non_exhaustive()
    }
}

fn guard<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The guarded maps stay consistent whatever panicked while holding them.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl FileStore {
    /// Opens the store rooted at `dir`, creating the directory (`0700`) if
    /// needed. Blocks briefly; call it before starting work, or inside
    /// `spawn_blocking`.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Self, StoreError> {
        let root = dir.into();
        create_dirs(&root).map_err(|e| io_error(None, "create the store directory", &root, &e))?;
        let meta = fs::metadata(&root).map_err(|e| io_error(None, "open the store", &root, &e))?;
        if !meta.is_dir() {
            return Err(StoreError::backend(format!(
                "file store: {} is not a directory",
                root.display()
            )));
        }
        Ok(Self::with_root(root, false))
    }

    /// Opens the store rooted at `dir` for reading only: for inspection
    /// tools (`harness sessions`, the studio).
    ///
    /// Nothing is created: a path that is missing or not a directory is
    /// [`ReadOnlyError::NotAStore`]. Reading a file store never writes
    /// (a read takes a session's `lock` file shared only if it exists, and
    /// the temporary files a crash left are deleted by commits, not
    /// reads), so the store is read in place; its commits are refused and
    /// [`flush`](SessionStore::flush) does nothing. Records that cannot be
    /// read are reported when read, as [`StoreError::Load`] naming the
    /// session and the record.
    pub fn open_read_only(dir: impl Into<PathBuf>) -> Result<Self, ReadOnlyError> {
        let root = dir.into();
        let meta = fs::metadata(&root).map_err(|e| ReadOnlyError::NotAStore {
            path: root.clone(),
            why: e.to_string(),
        })?;
        if !meta.is_dir() {
            return Err(ReadOnlyError::NotAStore {
                path: root,
                why: "not a directory".into(),
            });
        }
        Ok(Self::with_root(root, true))
    }

    /// Whether the store was opened with [`FileStore::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.inner.read_only
    }

    fn with_root(root: PathBuf, read_only: bool) -> Self {
        Self {
            inner: Arc::new(Inner {
                root,
                read_only,
                locks: Mutex::default(),
                unsynced: Mutex::default(),
                cleaned: Mutex::default(),
            }),
        }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    fn session_lock(&self, session: &SessionId) -> Arc<tokio::sync::Mutex<()>> {
        guard(&self.inner.locks)
            .entry(session.clone())
            .or_default()
            .clone()
    }

    /// Forgets `session`'s lock unless another task holds or awaits it.
    fn release_lock(&self, session: &SessionId, lock: Arc<tokio::sync::Mutex<()>>) {
        let mut locks = guard(&self.inner.locks);
        // Ours and the map's: nobody else has it.
        if Arc::strong_count(&lock) == 2 {
            locks.remove(session);
        }
    }

    /// Runs `f` with `session`'s in-process lock held.
    async fn with_session_lock<T, F>(&self, session: &SessionId, f: F) -> Result<T, StoreError>
    where
        F: FnOnce(&Inner) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        let lock = self.session_lock(session);
        let result = {
            let _held = lock.lock().await;
            self.blocking(f).await
        };
        self.release_lock(session, lock);
        result
    }

    async fn blocking<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        F: FnOnce(&Inner) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || f(&inner))
            .await
            .map_err(|e| StoreError::backend(format!("file store: a disk task failed: {e}")))?
    }
}

#[async_trait]
impl SessionStore for FileStore {
    async fn load(&self, session: &SessionId) -> Result<Option<StoredRun>, StoreError> {
        let session = session.clone();
        self.blocking(move |inner| {
            let dir = session_dir(&inner.root, &session)?;
            Ok(read_head(&session, &dir)?.map(|h| h.head))
        })
        .await
    }

    async fn commit(&self, commit: &Commit) -> Result<(), StoreError> {
        if self.inner.read_only {
            return Err(StoreError::backend(format!(
                "file store {}: opened read-only, commits are refused",
                self.inner.root.display()
            )));
        }
        let session = commit.head.session_id.clone();
        let durable = commit.durable;
        // A copy for the blocking thread, which cannot borrow the caller's.
        let commit = commit.clone();
        self.with_session_lock(&session, move |inner| inner.commit(commit))
            .await?;
        if !durable {
            guard(&self.inner.unsynced).insert(session);
        }
        Ok(())
    }

    async fn checkpoints(
        &self,
        session: &SessionId,
        from_seq: u64,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        let session = session.clone();
        self.blocking(move |inner| inner.checkpoints(&session, from_seq))
            .await
    }

    async fn sessions(&self) -> Result<Vec<SessionId>, StoreError> {
        self.blocking(Inner::sessions).await
    }

    /// One listing of the root, with no file read: a head is looked for
    /// only in the directories of the page (a directory with no head, a
    /// first commit that did not complete, is skipped).
    async fn sessions_page(
        &self,
        prefix: &str,
        after: Option<&SessionId>,
        limit: usize,
    ) -> Result<Vec<SessionId>, StoreError> {
        let prefix = prefix.to_owned();
        let after = after.cloned();
        self.blocking(move |inner| inner.sessions_page(&prefix, after.as_ref(), limit))
            .await
    }

    async fn created_since(
        &self,
        since: Option<u64>,
        limit: usize,
    ) -> Result<Option<Created>, StoreError> {
        self.blocking(move |inner| created_page(&inner.root, since, limit))
            .await
            .map(Some)
    }

    async fn flush(&self) -> Result<(), StoreError> {
        let pending = std::mem::take(&mut *guard(&self.inner.unsynced));
        let mut failed = None;
        for session in &pending {
            let id = session.clone();
            if let Err(e) = self
                .with_session_lock(session, move |inner| inner.sync_session(&id))
                .await
            {
                failed = Some(e);
                break;
            }
        }
        if let Some(e) = failed {
            // Keep them for the next flush: they may not be on disk.
            guard(&self.inner.unsynced).extend(pending);
            return Err(e);
        }
        Ok(())
    }
}

/// `head.json`: the head and the store's own bookkeeping.
struct HeadFile {
    head: StoredRun,
    /// Checkpoints removed by the commit that wrote this head: readers skip
    /// them even if a crash left their files.
    removed: Vec<u64>,
    /// Every checkpoint up to this seq, and this head, are on disk (fsynced);
    /// `None` when no commit of the session was durable yet.
    synced_seq: Option<u64>,
}

impl Inner {
    fn commit(&self, commit: Commit) -> Result<(), StoreError> {
        let session = &commit.head.session_id;
        let durable = commit.durable;
        let dir = session_dir(&self.root, session)?;
        let fail = |what: &str, path: &Path, e: io::Error| io_error(Some(session), what, path, &e);
        match create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(fail("create the session directory", &dir, e)),
        }
        let _lock = lock_exclusive(session, &dir)?;
        self.clean_once(session, &dir)?;

        // Compare.
        let old = read_head(session, &dir)?;
        let found = old.as_ref().map(|h| h.head.version);
        if found != commit.expected_version {
            return Err(StoreError::Conflict {
                session: session.clone(),
                expected: commit.expected_version,
                found,
            });
        }
        let old_last = old.as_ref().map(|h| h.head.last_seq);
        check_appends(&commit, old_last)?;
        let encoded: Vec<(u64, Vec<u8>)> = commit
            .append
            .iter()
            .map(|cp| Ok((cp.seq, checkpoint_to_vec(session, cp)?)))
            .collect::<Result<_, StoreError>>()?;
        let head_bytes = render_head(&HeadFile {
            head: commit.head.clone(),
            removed: commit.remove.clone(),
            synced_seq: if durable {
                Some(commit.head.last_seq)
            } else {
                old.as_ref().and_then(|h| h.synced_seq)
            },
        })?;

        // Set: checkpoints first, head last.
        let mut dir_changed = false;
        if durable && let Some(old) = &old {
            dir_changed |= sync_unsynced_checkpoints(session, &dir, old)?;
        }
        if let Some(old) = &old {
            // Normally deleted right after that commit; not if it crashed.
            for &seq in &old.removed {
                dir_changed |= remove_if_exists(session, &dir.join(checkpoint_name(seq)))?;
            }
        }
        dir_changed |= remove_uncovered(session, &dir, &commit, old_last)?;
        // Each file is fsynced on its own and the directory once for all.
        let sync = if durable {
            durable::Sync::File
        } else {
            durable::Sync::None
        };
        for (seq, bytes) in &encoded {
            write_file(session, &dir.join(checkpoint_name(*seq)), bytes, sync)?;
            dir_changed = true;
        }
        if durable && dir_changed {
            // The checkpoints' names must be on disk before the head's.
            sync_dir(session, &dir)?;
        }
        write_file(session, &dir.join(HEAD_FILE), &head_bytes, sync)?;
        if old.is_none() {
            // After the head: a reader who finds the line finds the session.
            if let Err(e) = append_created(&self.root, session) {
                tracing::warn!(
                    %session,
                    "file store: the session is created, but left out of the feed of \
                     created sessions: {e}"
                );
            }
        }
        if durable {
            sync_dir(session, &dir)?;
            if old.as_ref().is_none_or(|h| h.synced_seq.is_none()) {
                // The session directory itself is new on disk.
                sync_dir(session, &self.root)?;
            }
        }

        // The commit is done; removed files are already skipped by readers,
        // and the next commit deletes any left here.
        for &seq in &commit.remove {
            let _ = fs::remove_file(dir.join(checkpoint_name(seq)));
        }
        Ok(())
    }

    /// Deletes the temporary files a crash left in `dir`, once per session
    /// and handle. Runs under the session's exclusive lock: every write of
    /// the session does too, so none of them is in progress.
    fn clean_once(&self, session: &SessionId, dir: &Path) -> Result<(), StoreError> {
        if guard(&self.cleaned).contains(session) {
            return Ok(());
        }
        let entries = fs::read_dir(dir).map_err(|e| io_error(Some(session), "list", dir, &e))?;
        for entry in entries {
            let entry = entry.map_err(|e| io_error(Some(session), "list", dir, &e))?;
            if entry.file_name().to_str().is_some_and(is_temporary_name) {
                remove_if_exists(session, &entry.path())?;
            }
        }
        let mut cleaned = guard(&self.cleaned);
        if cleaned.len() >= CLEANED_MAX {
            cleaned.clear();
        }
        cleaned.insert(session.clone());
        Ok(())
    }

    fn checkpoints(
        &self,
        session: &SessionId,
        from_seq: u64,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        let dir = session_dir(&self.root, session)?;
        // Shared with other readers, excluded from commits: no half-applied
        // removal is seen.
        let _lock = lock_shared(session, &dir)?;
        let Some(head) = read_head(session, &dir)? else {
            return Ok(Vec::new());
        };
        let last = head.head.last_seq;
        let removed: BTreeSet<u64> = head.removed.iter().copied().collect();
        let seqs: BTreeSet<u64> = checkpoint_seqs(session, &dir)?
            .into_iter()
            .filter(|seq| (from_seq..=last).contains(seq) && !removed.contains(seq))
            .collect();
        let mut out = Vec::with_capacity(seqs.len());
        for seq in seqs {
            let path = dir.join(checkpoint_name(seq));
            match fs::read(&path) {
                Ok(bytes) => out.push(checkpoint_from_slice(session, seq, &bytes)?),
                // Listed, then gone: another process's commit removed it
                // without our lock (a store that does not lock). Report it.
                Err(e) => return Err(io_error(Some(session), "read", &path, &e)),
            }
        }
        Ok(out)
    }

    fn sessions(&self) -> Result<Vec<SessionId>, StoreError> {
        let mut out = Vec::new();
        for (id, dir) in self.session_dirs()? {
            if has_head(&dir)? {
                out.push(SessionId::from(id));
            }
        }
        out.sort_unstable();
        Ok(out)
    }

    fn sessions_page(
        &self,
        prefix: &str,
        after: Option<&SessionId>,
        limit: usize,
    ) -> Result<Vec<SessionId>, StoreError> {
        let mut candidates: Vec<(String, PathBuf)> = self
            .session_dirs()?
            .into_iter()
            .filter(|(id, _)| {
                id.starts_with(prefix) && after.is_none_or(|after| id.as_str() > after.as_str())
            })
            .collect();
        candidates.sort_unstable();
        let mut out = Vec::with_capacity(limit.min(candidates.len()));
        for (id, dir) in candidates {
            if out.len() == limit {
                break;
            }
            if has_head(&dir)? {
                out.push(SessionId::from(id));
            }
        }
        Ok(out)
    }

    /// Every session directory under the root, with its id, in the order
    /// the file system lists them: anything not named by `encode` is not a
    /// session of this store, nor is anything so named that is no
    /// directory (a stray file `s-backup`, a symlink to a file or to
    /// nothing), skipped with a warning and left as it is: one such entry
    /// must not fail the listing of every session.
    fn session_dirs(&self) -> Result<Vec<(String, PathBuf)>, StoreError> {
        let fail = |e: io::Error| io_error(None, "list the store directory", &self.root, &e);
        let mut out = Vec::new();
        for entry in fs::read_dir(&self.root).map_err(fail)? {
            let entry = entry.map_err(fail)?;
            let Some(id) = entry.file_name().to_str().and_then(decode) else {
                continue;
            };
            let path = entry.path();
            // A symlink counts as what it points to.
            let is_dir = match entry.file_type() {
                Ok(kind) if kind.is_symlink() => fs::metadata(&path).is_ok_and(|m| m.is_dir()),
                Ok(kind) => kind.is_dir(),
                Err(_) => fs::metadata(&path).is_ok_and(|m| m.is_dir()),
            };
            if !is_dir {
                tracing::warn!(
                    path = %path.display(),
                    "file store: skipping an entry named like a session's directory that is no \
                     directory (not a session of this store; left as it is)"
                );
                continue;
            }
            out.push((id, path));
        }
        Ok(out)
    }

    /// Syncs what non-durable commits of `session` left unsynced.
    fn sync_session(&self, session: &SessionId) -> Result<(), StoreError> {
        let dir = session_dir(&self.root, session)?;
        let _lock = lock_exclusive(session, &dir)?;
        let Some(head) = read_head(session, &dir)? else {
            return Ok(());
        };
        if head.synced_seq == Some(head.head.last_seq) {
            // Only heads were written since: sync the last one.
            sync_file(session, &dir.join(HEAD_FILE))?;
            return sync_dir(session, &dir);
        }
        sync_unsynced_checkpoints(session, &dir, &head)?;
        sync_file(session, &dir.join(HEAD_FILE))?;
        sync_dir(session, &dir)?;
        if head.synced_seq.is_none() {
            sync_dir(session, &self.root)?;
        }
        Ok(())
    }
}

/// Whether the session directory `dir` holds a head: one without is a
/// first commit that did not complete, not a session.
fn has_head(dir: &Path) -> Result<bool, StoreError> {
    let head = dir.join(HEAD_FILE);
    match fs::symlink_metadata(&head) {
        Ok(_) => Ok(true),
        // `dir` is gone, or replaced by a file since it was listed.
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            Ok(false)
        }
        Err(e) => Err(io_error(None, "read", &head, &e)),
    }
}

/// Appends `session`'s line to the feed at `root` (see [`FileStore`]).
fn append_created(root: &Path, session: &SessionId) -> Result<(), StoreError> {
    let path = root.join(FEED_FILE);
    let fail = |what: &str, e: io::Error| io_error(Some(session), what, &path, &e);
    let mut options = OpenOptions::new();
    options.read(true).append(true).create(true);
    set_file_mode(&mut options);
    let mut file = options.open(&path).map_err(|e| fail("open", e))?;
    // Against other processes: the last byte checked is still the last.
    file.lock().map_err(|e| fail("lock", e))?;
    let len = file
        .metadata()
        .map_err(|e| fail("read the size of", e))?
        .len();
    let mut line = String::with_capacity(NAME_MAX + 2);
    if len > 0 {
        let mut last = [0; 1];
        file.seek(SeekFrom::Start(len - 1))
            .and_then(|_| file.read_exact(&mut last))
            .map_err(|e| fail("read", e))?;
        if last[0] != b'\n' {
            line.push('\n');
        }
    }
    line.push_str(&encode(session.as_str()));
    line.push('\n');
    file.write_all(line.as_bytes())
        .map_err(|e| fail("append to", e))?;
    Ok(())
}

/// The feed at `root` after `since` (see [`SessionStore::created_since`]):
/// a feed not made yet is empty; a position past its end or inside a
/// line (another feed's) reads it from its start.
fn created_page(root: &Path, since: Option<u64>, limit: usize) -> Result<Created, StoreError> {
    let path = root.join(FEED_FILE);
    let fail = |what: &str, e: io::Error| io_error(None, what, &path, &e);
    let empty = |next| Created {
        sessions: Vec::new(),
        next,
    };
    let mut file = match File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(empty(0)),
        Err(e) => return Err(fail("open", e)),
    };
    let len = file
        .metadata()
        .map_err(|e| fail("read the size of", e))?
        .len();
    let mut read_at = |at: u64, buf: &mut [u8]| {
        file.seek(SeekFrom::Start(at))
            .and_then(|_| file.read_exact(buf))
            .map_err(|e| fail("read", e))
    };
    let Some(since) = since else {
        // The end of the last whole line, looked for from the end back.
        let mut end = len;
        let mut chunk = Vec::new();
        while end > 0 {
            let from = end.saturating_sub(FEED_TAIL);
            chunk.resize(usize::try_from(end - from).unwrap_or(0), 0);
            read_at(from, &mut chunk)?;
            if let Some(i) = chunk.iter().rposition(|&b| b == b'\n') {
                return Ok(empty(from + i as u64 + 1));
            }
            end = from;
        }
        return Ok(empty(0));
    };
    let since = if since > len {
        0
    } else if since > 0 {
        let mut before = [0; 1];
        read_at(since - 1, &mut before)?;
        if before[0] == b'\n' { since } else { 0 }
    } else {
        since
    };
    let mut page = empty(since);
    file.seek(SeekFrom::Start(since))
        .map_err(|e| fail("read", e))?;
    // What was there when the read began: appends made since wait for the
    // next read.
    let mut lines = io::BufReader::new(file.take(len - since));
    let mut line = Vec::with_capacity(NAME_MAX + 1);
    while page.sessions.len() < limit {
        line.clear();
        // At most `FEED_TAIL` bytes of a line are held: no line this store
        // writes is longer.
        let n = (&mut lines)
            .take(FEED_TAIL)
            .read_until(b'\n', &mut line)
            .map_err(|e| fail("read", e))?;
        let at = page.next;
        let whole = if line.last() == Some(&b'\n') {
            n as u64
        } else if (n as u64) < FEED_TAIL {
            // The end, or a line still cut short.
            break;
        } else {
            match skip_line(&mut lines).map_err(|e| fail("read", e))? {
                Some(rest) => n as u64 + rest,
                None => break,
            }
        };
        page.next += whole;
        let id = (whole == n as u64)
            .then(|| std::str::from_utf8(&line[..n - 1]).ok().and_then(decode))
            .flatten();
        match id {
            Some(id) => page.sessions.push(SessionId::from(id)),
            None => tracing::warn!(
                feed = %path.display(),
                position = at,
                bytes = whole,
                "file store: skipping a line of the feed of created sessions that names no session"
            ),
        }
    }
    Ok(page)
}

/// Reads `lines` past the end of the line it is in, holding none of it:
/// how many bytes that took, or `None` if the line has no end yet.
fn skip_line(lines: &mut impl BufRead) -> io::Result<Option<u64>> {
    let mut skipped = 0;
    loop {
        let buf = lines.fill_buf()?;
        if buf.is_empty() {
            return Ok(None);
        }
        if let Some(i) = buf.iter().position(|&b| b == b'\n') {
            lines.consume(i + 1);
            return Ok(Some(skipped + i as u64 + 1));
        }
        let n = buf.len();
        lines.consume(n);
        skipped += n as u64;
    }
}

/// Appended seqs must be new (beyond the stored `last_seq`: committed
/// checkpoints are never rewritten in place) and within the new head's
/// `last_seq` (readers ignore files beyond it).
fn check_appends(commit: &Commit, old_last: Option<u64>) -> Result<(), StoreError> {
    let session = &commit.head.session_id;
    let new_last = commit.head.last_seq;
    for cp in &commit.append {
        if cp.seq > new_last {
            return Err(StoreError::backend(format!(
                "session {session}: invalid commit: checkpoint {} is beyond the new head's last_seq {new_last}",
                cp.seq
            )));
        }
        if let Some(old_last) = old_last
            && cp.seq <= old_last
        {
            return Err(StoreError::backend(format!(
                "session {session}: invalid commit: checkpoint {} is already committed (last_seq {old_last}); the log is append-only",
                cp.seq
            )));
        }
    }
    Ok(())
}

/// Deletes files a crashed commit left in the seq range this commit makes
/// visible but does not write. Only lists the directory when the commit does
/// not write that whole range itself (the engine always does).
fn remove_uncovered(
    session: &SessionId,
    dir: &Path,
    commit: &Commit,
    old_last: Option<u64>,
) -> Result<bool, StoreError> {
    let start = match old_last {
        None => 0,
        Some(u64::MAX) => return Ok(false),
        Some(last) => last + 1,
    };
    let end = commit.head.last_seq;
    if end < start {
        return Ok(false);
    }
    let written: BTreeSet<u64> = commit.append.iter().map(|cp| cp.seq).collect();
    let span = end - start;
    if u64::try_from(written.len()).is_ok_and(|n| n > 0 && n - 1 == span) {
        return Ok(false);
    }
    let mut changed = false;
    for seq in checkpoint_seqs(session, dir)? {
        if (start..=end).contains(&seq) && !written.contains(&seq) {
            changed |= remove_if_exists(session, &dir.join(checkpoint_name(seq)))?;
        }
    }
    Ok(changed)
}

/// Fsyncs the checkpoint files between the head's `synced_seq` and its
/// `last_seq`. Returns whether there were any.
fn sync_unsynced_checkpoints(
    session: &SessionId,
    dir: &Path,
    head: &HeadFile,
) -> Result<bool, StoreError> {
    let from = match head.synced_seq {
        None => 0,
        Some(u64::MAX) => return Ok(false),
        Some(s) => s + 1,
    };
    let last = head.head.last_seq;
    if from > last {
        return Ok(false);
    }
    let mut any = false;
    for seq in checkpoint_seqs(session, dir)? {
        if (from..=last).contains(&seq) {
            sync_file(session, &dir.join(checkpoint_name(seq)))?;
            any = true;
        }
    }
    Ok(any)
}

fn read_head(session: &SessionId, dir: &Path) -> Result<Option<HeadFile>, StoreError> {
    let path = dir.join(HEAD_FILE);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error(Some(session), "read", &path, &e)),
    };
    parse_head(session, &bytes).map(Some)
}

fn parse_head(session: &SessionId, bytes: &[u8]) -> Result<HeadFile, StoreError> {
    let bad = |reason: String| load_error(session, "head", reason);
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| bad(format!("invalid JSON: {e}")))?;
    let Value::Object(mut map) = value else {
        return Err(bad("not a JSON object".into()));
    };
    let head = map
        .remove("head")
        .ok_or_else(|| bad("no `head` field".into()))?;
    let head = head_from_value(session, head)?;
    let removed = match map.remove("removed") {
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_u64()
                    .ok_or_else(|| bad(format!("bad `removed` entry {v}")))
            })
            .collect::<Result<_, _>>()?,
        other => return Err(bad(format!("bad `removed` field: {other:?}"))),
    };
    let synced_seq = match map.remove("synced_seq") {
        Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .ok_or_else(|| bad(format!("bad `synced_seq` field: {v}")))?,
        ),
        None => return Err(bad("no `synced_seq` field".into())),
    };
    Ok(HeadFile {
        head,
        removed,
        synced_seq,
    })
}

fn render_head(file: &HeadFile) -> Result<Vec<u8>, StoreError> {
    let value = json!({
        "head": head_to_value(&file.head)?,
        "removed": file.removed,
        "synced_seq": file.synced_seq,
    });
    serde_json::to_vec_pretty(&value).map_err(|e| {
        StoreError::backend(format!(
            "session {}: cannot encode the head: {e}",
            file.head.session_id
        ))
    })
}

/// The seqs of the checkpoint files in `dir`, unordered.
fn checkpoint_seqs(session: &SessionId, dir: &Path) -> Result<Vec<u64>, StoreError> {
    let entries = fs::read_dir(dir).map_err(|e| io_error(Some(session), "list", dir, &e))?;
    let mut seqs = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| io_error(Some(session), "list", dir, &e))?;
        if let Some(seq) = entry.file_name().to_str().and_then(parse_checkpoint_name) {
            seqs.push(seq);
        }
    }
    Ok(seqs)
}

fn checkpoint_name(seq: u64) -> String {
    format!("cp-{seq:020}.json")
}

fn parse_checkpoint_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("cp-")?.strip_suffix(".json")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Whether `name` is the temporary file of one of the store's own writes:
/// `.NAME.HEX.tmp` ([`harness::durable`]'s unique names) or `.NAME.tmp`
/// (earlier versions of this store), where NAME is the head's or a
/// checkpoint's file name. Nothing else is ever deleted as one.
fn is_temporary_name(name: &str) -> bool {
    let Some(inner) = name.strip_prefix('.').and_then(|n| n.strip_suffix(".tmp")) else {
        return false;
    };
    let target = match inner.rsplit_once('.') {
        Some((target, unique))
            if unique.len() == 32 && unique.bytes().all(|b| b.is_ascii_hexdigit()) =>
        {
            target
        }
        _ => inner,
    };
    target == HEAD_FILE || parse_checkpoint_name(target).is_some()
}

/// Replaces the file at `path` atomically with `bytes` (owner-only), fsynced
/// as `sync` says; the caller fsyncs the directory when the rename must be
/// durable.
fn write_file(
    session: &SessionId,
    path: &Path,
    bytes: &[u8],
    sync: durable::Sync,
) -> Result<(), StoreError> {
    durable::write_atomic_private(path, bytes, sync).map_err(|e| write_error(session, &e))
}

fn write_error(session: &SessionId, e: &WriteError) -> StoreError {
    StoreError::backend(format!("file store, session {session}: {e}"))
}

fn remove_if_exists(session: &SessionId, path: &Path) -> Result<bool, StoreError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_error(Some(session), "remove", path, &e)),
    }
}

fn sync_file(session: &SessionId, path: &Path) -> Result<(), StoreError> {
    match File::open(path) {
        Ok(f) => f
            .sync_all()
            .map_err(|e| io_error(Some(session), "fsync", path, &e)),
        // Removed since: nothing to sync.
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_error(Some(session), "open", path, &e)),
    }
}

/// Fsyncs a directory, making the names in it durable.
fn sync_dir(session: &SessionId, dir: &Path) -> Result<(), StoreError> {
    durable::sync_dir(dir).map_err(|e| write_error(session, &e))
}

/// Takes `dir/lock` exclusively, creating it; released when dropped.
fn lock_exclusive(session: &SessionId, dir: &Path) -> Result<File, StoreError> {
    let path = dir.join(LOCK_FILE);
    let mut options = OpenOptions::new();
    options.read(true).write(true).create(true).truncate(false);
    set_file_mode(&mut options);
    let file = options
        .open(&path)
        .map_err(|e| io_error(Some(session), "open the lock file", &path, &e))?;
    file.lock()
        .map_err(|e| io_error(Some(session), "lock", &path, &e))?;
    Ok(file)
}

/// Takes `dir/lock` shared, if it exists (no commit yet otherwise).
fn lock_shared(session: &SessionId, dir: &Path) -> Result<Option<File>, StoreError> {
    let path = dir.join(LOCK_FILE);
    let file = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error(Some(session), "open the lock file", &path, &e)),
    };
    file.lock_shared()
        .map_err(|e| io_error(Some(session), "lock", &path, &e))?;
    Ok(Some(file))
}

fn set_file_mode(options: &mut OpenOptions) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = options;
}

fn dir_builder() -> fs::DirBuilder {
    #[allow(unused_mut)]
    let mut builder = fs::DirBuilder::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder
}

fn create_dirs(path: &Path) -> io::Result<()> {
    dir_builder().recursive(true).create(path)
}

fn create_dir(path: &Path) -> io::Result<()> {
    dir_builder().create(path)
}

fn io_error(session: Option<&SessionId>, what: &str, path: &Path, e: &io::Error) -> StoreError {
    match session {
        Some(s) => StoreError::backend(format!(
            "file store, session {s}: cannot {what} {}: {e}",
            path.display()
        )),
        None => StoreError::backend(format!("file store: cannot {what} {}: {e}", path.display())),
    }
}

fn session_dir(root: &Path, session: &SessionId) -> Result<PathBuf, StoreError> {
    let name = encode(session.as_str());
    if name.len() > NAME_MAX {
        return Err(StoreError::SessionIdNotKept {
            session: session.clone(),
            why: format!(
                "a file store keeps a session in a directory named by its id, with each byte \
                 other than a-z, 0-9, - and _ written as three; this id makes {} bytes, at most \
                 {NAME_MAX}",
                name.len()
            ),
        });
    }
    Ok(root.join(name))
}

/// Whether `b` is kept as is in a directory name.
fn is_plain(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_'
}

/// The directory name of a session id: `s-` then the id's bytes, each kept
/// if plain and `%XX` (upper-case hex) otherwise. Injective, and still so
/// when case is ignored; never `.`, `..`, empty, nor containing a separator.
fn encode(id: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(DIR_PREFIX.len() + id.len());
    out.push_str(DIR_PREFIX);
    for &b in id.as_bytes() {
        if is_plain(b) {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        }
    }
    out
}

/// The session id of a directory name made by [`encode`], if it is one.
fn decode(name: &str) -> Option<String> {
    fn hex(b: u8) -> Option<u8> {
        match b {
            b'0'..=b'9' => Some(b - b'0'),
            b'A'..=b'F' => Some(b - b'A' + 10),
            _ => None,
        }
    }
    let rest = name.strip_prefix(DIR_PREFIX)?.as_bytes();
    let mut bytes = Vec::with_capacity(rest.len());
    let mut i = 0;
    while i < rest.len() {
        let b = rest[i];
        if b == b'%' {
            let hi = hex(*rest.get(i + 1)?)?;
            let lo = hex(*rest.get(i + 2)?)?;
            let byte = (hi << 4) | lo;
            if is_plain(byte) {
                // Not canonical: `encode` keeps it as is.
                return None;
            }
            bytes.push(byte);
            i += 3;
        } else if is_plain(b) {
            bytes.push(b);
            i += 1;
        } else {
            return None;
        }
    }
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_stay_single_components() {
        let ids = [
            "",
            "a",
            "ab",
            "A",
            "../x",
            "..",
            ".",
            "a/b",
            "/abs",
            "a\\b",
            "a\0b",
            "é",
            "CON",
            "%41",
            "s-x",
            "0f8c-uuid_like",
        ];
        let mut seen = BTreeSet::new();
        for id in ids {
            let name = encode(id);
            assert_eq!(decode(&name).as_deref(), Some(id), "{name}");
            assert!(!name.contains('/') && !name.contains('\\') && !name.contains('.'));
            assert!(name.starts_with(DIR_PREFIX));
            assert!(seen.insert(name.to_ascii_lowercase()), "collision: {id:?}");
        }
    }

    #[test]
    fn foreign_names_are_not_sessions() {
        for name in [
            "x", "s-A", "s-%61", "s-%4", "s-%zz", "s-%ff", "s-a.b", "s-%FF",
        ] {
            assert_eq!(decode(name), None, "{name}");
        }
    }

    #[test]
    fn checkpoint_names() {
        for seq in [0, 1, 10, u64::MAX] {
            assert_eq!(parse_checkpoint_name(&checkpoint_name(seq)), Some(seq));
        }
        for name in [
            "cp-1.json",
            ".cp-00000000000000000001.json.tmp",
            "cp-99999999999999999999.json",
        ] {
            assert_eq!(parse_checkpoint_name(name), None, "{name}");
        }
    }

    #[test]
    fn only_the_stores_own_temporary_files_count_as_leftovers() {
        let unique = "0123456789abcdef0123456789ABCDEF";
        for name in [
            format!(".head.json.{unique}.tmp"),
            format!(".cp-00000000000000000007.json.{unique}.tmp"),
            ".head.json.tmp".to_owned(),
            ".cp-00000000000000000007.json.tmp".to_owned(),
        ] {
            assert!(is_temporary_name(&name), "{name}");
        }
        for name in [
            "head.json",
            "cp-00000000000000000007.json",
            "lock",
            ".notes.tmp",
            ".head.json",
            "head.json.tmp",
            ".head.json.abc.tmp",
            ".cp-1.json.tmp",
            &format!(".notes.{unique}.tmp"),
        ] {
            assert!(!is_temporary_name(name), "{name}");
        }
    }
}
