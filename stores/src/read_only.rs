//! Opening a store for reading only: a private copy of its files, so that
//! a reader never changes a byte of the store it reads (see
//! [`SledStore::open_read_only`](crate::SledStore::open_read_only) and
//! [`LogStore::open_read_only`](crate::LogStore::open_read_only)).

use harness::session::StoreError;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Why a store could not be opened for reading.
#[derive(Debug)]
#[non_exhaustive]
pub enum ReadOnlyError {
    /// Nothing at the path is a store of this kind: the path is missing,
    /// is a file, is a directory without the store's files, or holds
    /// another program's data in the store's format (a sled database
    /// without harness's trees). Nothing is created there.
    NotAStore {
        /// The path given.
        path: PathBuf,
        /// What is there instead.
        why: String,
    },
    /// Another process has the store open (e.g. the application).
    InUse {
        /// The store.
        path: PathBuf,
    },
    /// The store is damaged: a file is missing or its bytes are not what
    /// the store wrote. Nothing was changed.
    Damaged(Damage),
    /// The store failed otherwise (I/O, ...).
    Store(StoreError),
}

/// Where a store is damaged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// The store's directory.
    pub store: PathBuf,
    /// The damaged (or missing) file.
    pub file: PathBuf,
    /// The first byte of `file` found damaged, when known.
    pub offset: Option<u64>,
    /// What is wrong.
    pub what: String,
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the store {} is damaged: {}",
            self.store.display(),
            self.file.display()
        )?;
        if let Some(offset) = self.offset {
            write!(f, " at offset {offset}")?;
        }
        write!(f, ": {}", self.what)
    }
}

impl std::error::Error for Damage {}

impl std::fmt::Display for ReadOnlyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadOnlyError::NotAStore { path, why } => {
                write!(f, "{}: not a session store: {why}", path.display())
            }
            ReadOnlyError::InUse { path } => write!(
                f,
                "{}: the store is open in another process (its lock is held, e.g. by the \
                 application); stop it to read the store",
                path.display()
            ),
            ReadOnlyError::Damaged(damage) => damage.fmt(f),
            ReadOnlyError::Store(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ReadOnlyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReadOnlyError::Damaged(damage) => Some(damage),
            ReadOnlyError::Store(e) => Some(e),
            _ => None,
        }
    }
}

impl From<StoreError> for ReadOnlyError {
    fn from(e: StoreError) -> Self {
        ReadOnlyError::Store(e)
    }
}

/// A private directory (`0700`) under the system's temporary directory,
/// deleted with what is in it when dropped. A process that ends without
/// dropping it (killed) leaves it behind: the next one made with the same
/// tag deletes those whose process is gone (see [`sweep_stale`]).
#[derive(Debug)]
pub(crate) struct PrivateDir {
    path: PathBuf,
}

impl PrivateDir {
    /// Creates a new one named after `tag`.
    pub(crate) fn new(tag: &str) -> Result<Self, StoreError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let base = std::env::temp_dir();
        sweep_stale(&base, tag);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        for _ in 0..100 {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let path = base.join(format!(
                "harness-{tag}-{}-{nanos:x}-{n}",
                std::process::id()
            ));
            match private_dir_builder().create(&path) {
                Ok(()) => return Ok(Self { path }),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io_error("create the private directory", &path, &e)),
            }
        }
        Err(StoreError::backend(format!(
            "cannot create a private directory under {}",
            base.display()
        )))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// Deletes the private directories of tag `tag` under `base` that a process
/// no longer running left behind (`harness-{tag}-{pid}-{nanos}-{n}`, a
/// directory, owned by this user, whose process is gone): a reader killed
/// mid-way leaves its copy of a store, which only a later reader can
/// delete. Nothing else is touched: another name, a file, a directory of
/// another user, one whose process runs (or whose process's state cannot
/// be known: on a system without `/proc`, nothing is deleted). Errors are
/// ignored: a copy left is no reason to refuse a reader.
pub(crate) fn sweep_stale(base: &Path, tag: &str) {
    let proc = Path::new("/proc");
    if !proc.join("self").exists() {
        return;
    }
    let Ok(entries) = fs::read_dir(base) else {
        return;
    };
    let prefix = format!("harness-{tag}-");
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(&prefix)) else {
            continue;
        };
        let mut parts = rest.split('-');
        let (Some(pid), Some(nanos), Some(n), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let well_formed = pid.parse::<u32>().is_ok()
            && u32::from_str_radix(nanos, 16).is_ok()
            && n.parse::<u64>().is_ok();
        if !well_formed || proc.join(pid).exists() {
            continue;
        }
        let Ok(meta) = fs::symlink_metadata(entry.path()) else {
            continue;
        };
        if meta.is_dir() && owned_by_me(&meta) {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

#[cfg(unix)]
fn owned_by_me(meta: &fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    // The owner of a directory this process makes is its effective user;
    // /proc/self is owned by it too.
    fs::metadata("/proc/self").is_ok_and(|me| me.uid() == meta.uid())
}

#[cfg(not(unix))]
fn owned_by_me(_: &fs::Metadata) -> bool {
    false
}

/// A builder of directories `0700` (on unix).
pub(crate) fn private_dir_builder() -> fs::DirBuilder {
    #[allow(unused_mut)]
    let mut builder = fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder
}

/// Copies `from` (already open) to the new file `to`, created `0600`.
pub(crate) fn copy_open_file(from: &mut File, source: &Path, to: &Path) -> Result<u64, StoreError> {
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut out = options
        .open(to)
        .map_err(|e| io_error("create the copy", to, &e))?;
    io::copy(from, &mut out).map_err(|e| io_error("copy", source, &e))
}

/// Copies the file `from` to the new file `to` (`0600`).
pub(crate) fn copy_file(from: &Path, to: &Path) -> Result<u64, StoreError> {
    let mut file = File::open(from).map_err(|e| io_error("open", from, &e))?;
    copy_open_file(&mut file, from, to)
}

/// Copies the directory tree `from` into the new directory `to` (`0700`),
/// following no symbolic link.
pub(crate) fn copy_tree(from: &Path, to: &Path) -> Result<(), StoreError> {
    private_dir_builder()
        .create(to)
        .map_err(|e| io_error("create the copy", to, &e))?;
    for entry in fs::read_dir(from).map_err(|e| io_error("list", from, &e))? {
        let entry = entry.map_err(|e| io_error("list", from, &e))?;
        let kind = entry
            .file_type()
            .map_err(|e| io_error("inspect", &entry.path(), &e))?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else if kind.is_file() {
            copy_file(&entry.path(), &target)?;
        }
    }
    Ok(())
}

/// Takes a shared lock on `file` without waiting: `Ok(false)` when another
/// process holds it exclusively.
pub(crate) fn try_lock_shared(file: &File, path: &Path) -> Result<bool, StoreError> {
    match file.try_lock_shared() {
        Ok(()) => Ok(true),
        Err(fs::TryLockError::WouldBlock) => Ok(false),
        Err(fs::TryLockError::Error(e)) => Err(io_error("lock", path, &e)),
    }
}

/// Removes group and other permissions from sled's own entries in the
/// database directory `dir`: its log `db`, its `conf`, its snapshots
/// (`snap.` and 16 hex digits, with `.generating` while one is written),
/// and its `blobs` directory with the blob files (named by number) in it.
///
/// Nothing else is touched: not `dir` itself (a directory the store
/// creates is made `0700`, one that existed is the user's), not another
/// file or directory in it (a database opened in a directory shared with
/// other software must not change that software's files), not a symbolic
/// link.
#[cfg(unix)]
pub(crate) fn restrict_sled_files(dir: &Path) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        // `file_type` does not follow a symbolic link: a link is neither.
        let kind = entry.file_type()?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        if kind.is_file() && is_sled_file(name) {
            restrict(&entry.path())?;
        } else if kind.is_dir() && name == "blobs" {
            restrict(&entry.path())?;
            for blob in fs::read_dir(entry.path())? {
                let blob = blob?;
                let is_blob = blob
                    .file_name()
                    .to_str()
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
                if is_blob && blob.file_type()?.is_file() {
                    restrict(&blob.path())?;
                }
            }
        }
    }
    Ok(())
}

/// Whether `name` is one of the files sled 0.34 keeps in a database's
/// directory (besides `blobs`).
#[cfg(unix)]
fn is_sled_file(name: &str) -> bool {
    if name == "db" || name == "conf" {
        return true;
    }
    let Some(rest) = name.strip_prefix("snap.") else {
        return false;
    };
    let lsn = rest.strip_suffix(".generating").unwrap_or(rest);
    lsn.len() == 16 && lsn.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Takes group and other permissions away from `path` (not following a
/// link), if it has any.
#[cfg(unix)]
fn restrict(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let meta = fs::symlink_metadata(path)?;
    let mode = meta.permissions().mode();
    if !meta.file_type().is_symlink() && mode & 0o077 != 0 {
        fs::set_permissions(path, fs::Permissions::from_mode(mode & 0o700))?;
    }
    Ok(())
}

pub(crate) fn io_error(what: &str, path: &Path, e: &io::Error) -> StoreError {
    StoreError::backend(format!("cannot {what} {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Above any pid Linux gives (`pid_max` is at most 2^22).
    const GONE: u32 = 4_194_305;

    #[cfg(target_os = "linux")]
    #[test]
    fn only_copies_whose_process_is_gone_are_swept() {
        let base = tempfile::tempdir().unwrap();
        let make_dir = |name: &str| {
            let dir = base.path().join(name);
            fs::create_dir(&dir).unwrap();
            fs::write(dir.join("db"), b"a copy").unwrap();
            dir
        };
        let stale = [
            make_dir(&format!("harness-sled-read-{GONE}-1a2b-0")),
            make_dir(&format!("harness-sled-read-{}-0-17", GONE + 1)),
        ];
        let kept = [
            // Its process runs: this one.
            make_dir(&format!("harness-sled-read-{}-1a2b-0", std::process::id())),
            // Another tag.
            make_dir(&format!("harness-log-read-{GONE}-1a2b-0")),
            // Not a name this module makes.
            make_dir(&format!("harness-sled-read-{GONE}-zz-0")),
            make_dir(&format!("harness-sled-read-{GONE}-1a2b")),
            make_dir(&format!("harness-sled-read-{GONE}-1a2b-0-x")),
            make_dir("harness-sled-read-x-1a2b-0"),
            make_dir(&format!("my-harness-sled-read-{GONE}-1a2b-0")),
        ];
        // A file and a link named as a stale copy: not directories.
        let file = base.path().join(format!("harness-sled-read-{GONE}-1a2b-1"));
        fs::write(&file, b"not ours").unwrap();
        let target = make_dir("linked");
        let link = base.path().join(format!("harness-sled-read-{GONE}-1a2b-2"));
        std::os::unix::fs::symlink(&target, &link).unwrap();

        sweep_stale(base.path(), "sled-read");

        for dir in &stale {
            assert!(!dir.exists(), "{} was left", dir.display());
        }
        for dir in &kept {
            assert!(dir.join("db").exists(), "{} was deleted", dir.display());
        }
        assert!(file.is_file());
        assert!(link.exists() && target.join("db").exists());
    }

    /// sled's own names, and names that only look like them.
    #[cfg(unix)]
    #[test]
    fn only_sleds_own_file_names_are_sleds() {
        for name in [
            "db",
            "conf",
            "snap.000000000000ABCD",
            "snap.00000000000abcde",
            "snap.0000000000001000.generating",
        ] {
            assert!(is_sled_file(name), "{name}");
        }
        for name in [
            "db.bak",
            "dbx",
            "database",
            "conf.d",
            "config",
            "snap.",
            "snap.txt",
            "snap.000000000000ABC",
            "snap.000000000000ABCDE",
            "snap.000000000000ABCG",
            "snap.000000000000ABCD.old",
            "snapshot",
            "notes.txt",
        ] {
            assert!(!is_sled_file(name), "{name}");
        }
    }

    #[test]
    fn a_private_dir_is_deleted_when_dropped() {
        let dir = PrivateDir::new("sweep-test").unwrap();
        let path = dir.path().to_path_buf();
        fs::write(path.join("db"), b"a copy").unwrap();
        drop(dir);
        assert!(!path.exists());
    }
}
