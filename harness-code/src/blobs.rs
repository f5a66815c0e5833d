//! A content-addressed blob store in a directory: the pickled values that
//! code cells wrote, keyed by the SHA-256 of their bytes.
//!
//! Layout: `ROOT/sha256/ab/abcdef…` (the first two hex digits name a
//! subdirectory) and `ROOT/tmp/` for the files the kernel is writing. Every
//! blob is renamed into place, so it is either whole or absent.
//! [`BlobStore::put`] is durable: it writes with
//! [`harness::durable::write_atomic`], which fsyncs the file before the
//! rename and its directory after, so a blob it stored survives a crash.
//! The Python kernel writes blobs into
//! the same layout directly (no copy through the protocol pipe) without
//! fsyncing them ([`BlobStore::sync`] does, in one batch, when a notebook is
//! saved). Every read is checked against the hash, on both sides: the
//! kernel hashes a blob's bytes before it unpickles them and removes a
//! blob that does not match (its value is then recomputed and written
//! again); [`BlobStore::get`] returns [`BlobError::Corrupt`].
//!
//! ```
//! use harness_code::blobs::BlobStore;
//!
//! let dir = tempfile::tempdir().unwrap();
//! let store = BlobStore::open(dir.path()).unwrap();
//! let hash = store.put(b"hello").unwrap();
//! assert_eq!(hash, "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824");
//! assert_eq!(store.get(&hash).unwrap(), b"hello");
//! ```

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use harness::durable::{self, WriteError};
use sha2::{Digest, Sha256};

/// Why a blob store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    /// A file or directory of the store could not be read or written.
    #[error("blob store: cannot {action} {path}: {source}")]
    Io {
        /// What was being done, e.g. `fsync` or `rename into place`.
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A blob hash is not 64 lowercase hex digits (e.g. a corrupt notebook file).
    #[error("invalid blob hash {0:?}: expected 64 lowercase hex digits")]
    InvalidHash(String),
    /// No blob with this hash is stored.
    #[error("blob {0} is not in the store")]
    Missing(String),
    /// The stored bytes do not hash to the blob's name.
    #[error("blob {hash} is corrupt: its bytes hash to {actual}")]
    Corrupt {
        /// The blob's name.
        hash: String,
        /// What its bytes hash to.
        actual: String,
    },
}

impl From<WriteError> for BlobError {
    fn from(error: WriteError) -> Self {
        Self::Io {
            action: error.action,
            path: error.path,
            source: error.source,
        }
    }
}

/// The lowercase hex SHA-256 of `bytes`.
///
/// ```
/// assert_eq!(&harness_code::blobs::sha256_hex(b"")[..8], "e3b0c442");
/// ```
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Incremental SHA-256 for keys built from several parts.
#[derive(Debug, Default, Clone)]
pub(crate) struct Hasher(Sha256);

impl Hasher {
    /// Adds a length-prefixed part, so that part boundaries are unambiguous.
    pub(crate) fn part(&mut self, bytes: &[u8]) -> &mut Self {
        self.0.update((bytes.len() as u64).to_le_bytes());
        self.0.update(bytes);
        self
    }

    pub(crate) fn finish(self) -> String {
        hex(&self.0.finalize())
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0xf)]));
    }
    out
}

/// Whether `hash` is a well-formed blob name (64 lowercase hex digits).
pub fn is_valid_hash(hash: &str) -> bool {
    hash.len() == 64 && hash.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Opens `path` for reading if it is a regular file (`None` otherwise:
/// a FIFO, a device, a directory), without waiting for a FIFO's writer;
/// `follow`: through a symbolic link (else a link is an `ELOOP` error).
#[cfg(unix)]
pub(crate) fn open_regular(path: &Path, follow: bool) -> std::io::Result<Option<fs::File>> {
    use rustix::fs::{FileType, Mode, OFlags};

    let mut flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    if !follow {
        flags |= OFlags::NOFOLLOW;
    }
    let fd = rustix::fs::open(path, flags, Mode::empty())?;
    let stat = rustix::fs::fstat(&fd)?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Ok(None);
    }
    Ok(Some(fs::File::from(fd)))
}

/// Opens `path` for reading if it is a regular file (`None` otherwise).
#[cfg(not(unix))]
pub(crate) fn open_regular(path: &Path, follow: bool) -> std::io::Result<Option<fs::File>> {
    let meta = if follow {
        fs::metadata(path)?
    } else {
        fs::symlink_metadata(path)?
    };
    if !meta.is_file() {
        return Ok(None);
    }
    fs::File::open(path).map(Some)
}

/// The bytes of `path` if it is a regular file (see [`open_regular`]).
pub(crate) fn read_regular(path: &Path, follow: bool) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::Read;

    let Some(mut file) = open_regular(path, follow)? else {
        return Ok(None);
    };
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(Some(bytes))
}

/// Whether an error opening a blob says it is not one: absent, or a
/// symbolic link put in its place (opened without following).
fn not_a_blob(error: &std::io::Error) -> bool {
    is_link_error(error) || error.kind() == std::io::ErrorKind::NotFound
}

/// Whether opening without following a link failed because of one
/// (`ELOOP`).
pub(crate) fn is_link_error(error: &std::io::Error) -> bool {
    #[cfg(unix)]
    if error.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) {
        return true;
    }
    #[cfg(not(unix))]
    let _ = error;
    false
}

/// Whether `path` is a directory itself, not a link to one.
fn is_real_dir(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok_and(|meta| meta.is_dir())
}

/// A content-addressed store of blobs in a directory.
#[derive(Debug, Clone)]
pub struct BlobStore {
    root: PathBuf,
    /// `root` with its links resolved when the store was opened: what
    /// [`retain`](Self::retain) opens (without following a link), so that
    /// a link put in the store's place since is never walked into.
    resolved: PathBuf,
}

impl BlobStore {
    /// Opens (creating if needed) the store rooted at `root`.
    ///
    /// # Errors
    ///
    /// [`BlobError::Io`] if the directories cannot be created.
    pub fn open(root: impl Into<PathBuf>) -> Result<Self, BlobError> {
        let root = root.into();
        for dir in [root.join("sha256"), root.join("tmp")] {
            create_dir_durable(&dir)?;
        }
        let resolved = fs::canonicalize(&root).unwrap_or_else(|_| root.clone());
        Ok(Self { root, resolved })
    }

    /// The store's directory (what the kernel is given as `blob_dir`).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the blob `hash` is (or would be) stored.
    ///
    /// # Errors
    ///
    /// [`BlobError::InvalidHash`] if `hash` is not a blob name.
    pub fn path(&self, hash: &str) -> Result<PathBuf, BlobError> {
        if !is_valid_hash(hash) {
            return Err(BlobError::InvalidHash(hash.to_owned()));
        }
        Ok(self.root.join("sha256").join(&hash[..2]).join(hash))
    }

    /// Whether the blob `hash` is stored (false for a malformed hash).
    pub fn contains(&self, hash: &str) -> bool {
        self.path(hash)
            .is_ok_and(|path| fs::symlink_metadata(path).is_ok_and(|meta| meta.is_file()))
    }

    /// Stores `bytes` durably and returns their hash: when `put` returns,
    /// the blob survives a crash. A blob already stored with these bytes is
    /// not written again; one that differs (truncated by a crash, corrupted
    /// on disk, even at the same size) is replaced.
    ///
    /// The bytes go to a temporary file beside the blob, which is fsynced
    /// and renamed into place; then the blob's directory is fsynced so that
    /// the new name is on disk too ([`durable::write_atomic`] with
    /// [`durable::Sync::FileAndDir`]).
    ///
    /// # Errors
    ///
    /// [`BlobError::Io`] if the blob cannot be written; no temporary file is
    /// left behind.
    pub fn put(&self, bytes: &[u8]) -> Result<String, BlobError> {
        let hash = sha256_hex(bytes);
        let path = self.path(&hash)?;
        if fs::symlink_metadata(&path)
            .is_ok_and(|meta| meta.is_file() && meta.len() == bytes.len() as u64)
            && read_regular(&path, false).is_ok_and(|stored| stored.as_deref() == Some(bytes))
        {
            return Ok(hash);
        }
        let shard = path.parent().unwrap_or(&self.root);
        create_dir_durable(shard)?;
        durable::write_atomic(&path, bytes, durable::Sync::FileAndDir)?;
        Ok(hash)
    }

    /// Makes blobs written by someone else (the kernel writes its snapshots
    /// itself, without fsync) durable: fsyncs each blob of `hashes` that
    /// exists, then each directory holding them and the directories above
    /// up to the store's root (the kernel may have created them). Blobs
    /// that do not exist are skipped: a value whose blob is missing is
    /// recomputed, not read. [`Notebook::save`](crate::notebook::Notebook::save)
    /// calls it for the blobs the notebook refers to.
    ///
    /// # Errors
    ///
    /// [`BlobError::InvalidHash`] for a malformed hash, [`BlobError::Io`]
    /// if a blob or directory cannot be fsynced.
    pub fn sync<'a>(&self, hashes: impl IntoIterator<Item = &'a str>) -> Result<(), BlobError> {
        let mut dirs = BTreeSet::new();
        for hash in hashes {
            let path = self.path(hash)?;
            // Not a regular file (a FIFO, a link, made by a cell): not a
            // blob, skipped as a missing one is.
            let file = match open_regular(&path, false) {
                Ok(Some(file)) => file,
                Ok(None) => continue,
                Err(e) if not_a_blob(&e) => continue,
                Err(source) => {
                    return Err(BlobError::Io {
                        action: "open",
                        path,
                        source,
                    });
                }
            };
            file.sync_all().map_err(|source| BlobError::Io {
                action: "fsync",
                path: path.clone(),
                source,
            })?;
            if let Some(dir) = path.parent() {
                dirs.insert(dir.to_path_buf());
            }
        }
        if !dirs.is_empty() {
            dirs.insert(self.root.join("sha256"));
            dirs.insert(self.root.clone());
        }
        for dir in &dirs {
            sync_dir(dir)?;
        }
        Ok(())
    }

    /// The bytes of blob `hash`, checked against the hash.
    ///
    /// # Errors
    ///
    /// [`BlobError::Missing`], [`BlobError::Corrupt`], [`BlobError::InvalidHash`]
    /// or [`BlobError::Io`].
    pub fn get(&self, hash: &str) -> Result<Vec<u8>, BlobError> {
        let path = self.path(hash)?;
        // Not a regular file (a FIFO, a link, made by a cell) is no blob.
        let bytes = match read_regular(&path, false) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => return Err(BlobError::Missing(hash.to_owned())),
            Err(source) if not_a_blob(&source) => {
                return Err(BlobError::Missing(hash.to_owned()));
            }
            Err(source) => {
                return Err(BlobError::Io {
                    action: "read",
                    path,
                    source,
                });
            }
        };
        let actual = sha256_hex(&bytes);
        if actual != hash {
            return Err(BlobError::Corrupt {
                hash: hash.to_owned(),
                actual,
            });
        }
        Ok(bytes)
    }

    /// Every stored blob's hash.
    ///
    /// # Errors
    ///
    /// [`BlobError::Io`] if the store cannot be listed.
    pub fn list(&self) -> Result<BTreeSet<String>, BlobError> {
        let mut found = BTreeSet::new();
        let base = self.root.join("sha256");
        if !is_real_dir(&base) && fs::symlink_metadata(&base).is_ok() {
            // A link or a file in the store's place: none of its blobs.
            return Ok(found);
        }
        let read = |path: &Path| {
            fs::read_dir(path).map_err(|source| BlobError::Io {
                action: "list",
                path: path.to_path_buf(),
                source,
            })
        };
        for shard in read(&base)? {
            let shard = shard.map_err(|source| BlobError::Io {
                action: "list",
                path: base.clone(),
                source,
            })?;
            // A shard directory itself, not a link a cell put in its place.
            if !shard.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            for entry in read(&shard.path())? {
                let entry = entry.map_err(|source| BlobError::Io {
                    action: "list",
                    path: shard.path(),
                    source,
                })?;
                if let Some(name) = entry.file_name().to_str()
                    && is_valid_hash(name)
                {
                    found.insert(name.to_owned());
                }
            }
        }
        Ok(found)
    }

    /// Deletes every blob not in `keep`, and leftover temporary files (of
    /// the kernel in `ROOT/tmp/`, of an interrupted [`put`](Self::put) in a
    /// blob directory). Returns how many blobs were deleted.
    ///
    /// Only the store's own directories are walked, and each is walked
    /// through a handle opened without following a link (`O_NOFOLLOW`):
    /// every name is read and deleted relative to that handle (`unlinkat`),
    /// never through a path. `tmp`, `sha256` or a shard that is a link (a
    /// cell can make one) is skipped, and one swapped for a link while it
    /// is being emptied (by a process that outlived its kernel) changes
    /// nothing: the deletions stay in the directory that was opened.
    ///
    /// # Errors
    ///
    /// [`BlobError::Io`] if the store cannot be opened or listed or a blob
    /// removed.
    pub fn retain(&self, keep: &BTreeSet<String>) -> Result<usize, BlobError> {
        #[cfg(unix)]
        return self.retain_at(keep);
        #[cfg(not(unix))]
        return self.retain_by_path(keep);
    }

    #[cfg(unix)]
    fn retain_at(&self, keep: &BTreeSet<String>) -> Result<usize, BlobError> {
        use harness::durable::{open_child_dir, open_dir};
        use rustix::fs::AtFlags;
        use std::os::unix::ffi::OsStrExt;

        let io = |action: &'static str, path: PathBuf| {
            move |source: std::io::Error| BlobError::Io {
                action,
                path,
                source,
            }
        };
        let root = open_dir(&self.resolved).map_err(io("open", self.root.clone()))?;
        let mut removed = 0;
        let base = self.root.join("sha256");
        if let Some(sha) =
            open_child_dir(&root, "sha256".as_ref()).map_err(io("open", base.clone()))?
        {
            for (shard, _) in dir_entries(&sha).map_err(io("list", base.clone()))? {
                let shard = std::ffi::OsStr::from_bytes(shard.as_bytes());
                let shard_path = base.join(shard);
                let Some(shard_dir) =
                    open_child_dir(&sha, shard).map_err(io("open", shard_path.clone()))?
                else {
                    continue;
                };
                for (entry, _) in dir_entries(&shard_dir).map_err(io("list", shard_path.clone()))? {
                    let Ok(name) = entry.to_str() else {
                        continue;
                    };
                    if is_valid_hash(name) && !keep.contains(name) {
                        match rustix::fs::unlinkat(&shard_dir, &entry, AtFlags::empty()) {
                            Ok(()) => removed += 1,
                            Err(rustix::io::Errno::NOENT) => {}
                            Err(error) => {
                                return Err(io("remove", shard_path.join(name))(error.into()));
                            }
                        }
                    } else if name.starts_with('.') && name.ends_with(".tmp") {
                        // The temporary names of `durable::write_atomic`;
                        // best effort, as a writer may still be renaming.
                        let _ = rustix::fs::unlinkat(&shard_dir, &entry, AtFlags::empty());
                    }
                }
            }
        }
        // Best effort: a file another writer is still filling may already
        // be gone.
        if let Ok(Some(tmp)) = open_child_dir(&root, "tmp".as_ref())
            && let Ok(entries) = dir_entries(&tmp)
        {
            for (entry, kind) in entries {
                if kind != rustix::fs::FileType::Directory {
                    let _ = rustix::fs::unlinkat(&tmp, &entry, AtFlags::empty());
                }
            }
        }
        Ok(removed)
    }

    #[cfg(not(unix))]
    fn retain_by_path(&self, keep: &BTreeSet<String>) -> Result<usize, BlobError> {
        let mut removed = 0;
        for hash in self.list()? {
            if !keep.contains(&hash) {
                let path = self.path(&hash)?;
                fs::remove_file(&path).map_err(|source| BlobError::Io {
                    action: "remove",
                    path,
                    source,
                })?;
                removed += 1;
            }
        }
        let tmp = self.root.join("tmp");
        if is_real_dir(&tmp)
            && let Ok(entries) = fs::read_dir(&tmp)
        {
            for entry in entries.flatten() {
                let _ = fs::remove_file(entry.path());
            }
        }
        let base = self.root.join("sha256");
        if is_real_dir(&base)
            && let Ok(shards) = fs::read_dir(&base)
        {
            let shards = shards
                .flatten()
                .filter(|shard| shard.file_type().is_ok_and(|t| t.is_dir()))
                .flat_map(|shard| fs::read_dir(shard.path()));
            for entry in shards.flatten().flatten() {
                let name = entry.file_name();
                let name = name.to_string_lossy();
                if name.starts_with('.') && name.ends_with(".tmp") {
                    let _ = fs::remove_file(entry.path());
                }
            }
        }
        Ok(removed)
    }
}

/// The entries of the open directory `dir` (not `.` and `..`), with their
/// kinds as the directory reports them.
#[cfg(unix)]
fn dir_entries(dir: &fs::File) -> std::io::Result<Vec<(std::ffi::CString, rustix::fs::FileType)>> {
    let mut list = rustix::fs::Dir::read_from(dir)?;
    let mut entries = Vec::new();
    while let Some(entry) = list.read() {
        let entry = entry?;
        let name = entry.file_name();
        if name != c"." && name != c".." {
            entries.push((name.to_owned(), entry.file_type()));
        }
    }
    Ok(entries)
}

/// Creates `dir` and its missing ancestors, fsyncing the parent of each
/// directory created so that it survives a crash.
fn create_dir_durable(dir: &Path) -> Result<(), BlobError> {
    if dir.is_dir() {
        return Ok(());
    }
    let parent = match dir.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    create_dir_durable(parent)?;
    match fs::create_dir(dir) {
        Ok(()) => {}
        // Created by another writer, which may not have fsynced the parent
        // yet: do it here too.
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => {}
        Err(source) => {
            return Err(BlobError::Io {
                action: "create the directory",
                path: dir.to_path_buf(),
                source,
            });
        }
    }
    sync_dir(parent)
}

/// Fsyncs a directory ([`durable::sync_dir`]), making the names in it
/// durable.
fn sync_dir(dir: &Path) -> Result<(), BlobError> {
    Ok(durable::sync_dir(dir)?)
}
