//! Where `harness run` keeps a script's notebook, and how a run claims that
//! directory.
//!
//! - The default directory is `.harness/code/<name>/` next to the script,
//!   where `<name>` is the file's stem made safe ([`state_name`]): never
//!   `.` or `..`, never a path, at most 255 bytes, one name per stem.
//! - A run claims the directory before it reads or writes anything in it:
//!   it refuses a directory holding anything harness does not write there,
//!   then takes an exclusive lock (`.harness-run.lock`, holding its pid)
//!   for as long as it runs, so a second run on the same directory stops
//!   with [`StateDirError::Locked`] instead of interleaving its writes.
//!   The notebook file itself is always replaced atomically.
//! - A claimed directory is marked with `.harness-run`. `--fresh` deletes
//!   only what a notebook writes (`session.json`, the blob store
//!   `blobs/sha256/<xx>/<hash>` and `blobs/tmp/*`, the temporary files of
//!   atomic writes), one known file at a time, and refuses, deleting
//!   nothing, when the directory holds anything else.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};

use harness::durable::{self, write_atomic};
use harness_code::blobs::{is_valid_hash, sha256_hex};

/// Marks a directory as claimed by `harness run`.
const MARKER: &str = ".harness-run";
/// Locked exclusively by the run using the directory; holds its pid.
const LOCK: &str = ".harness-run.lock";
/// The notebook's own file (`harness_code::notebook`).
const NOTEBOOK_FILE: &str = "session.json";
/// The notebook's blob store.
const BLOBS: &str = "blobs";
/// The longest file name most file systems take.
const NAME_MAX: usize = 255;

/// Why a state directory cannot be used; each names the directory.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StateDirError {
    /// The directory holds something harness did not write there.
    #[error(
        "{}: holds {} ({why}), which harness run did not write; {}; \
         give another --state, or move it away yourself",
        dir.display(), entry.display(),
        if *fresh { "--fresh deletes nothing there" } else { "not using it as the notebook directory" }
    )]
    Foreign {
        /// The state directory.
        dir: PathBuf,
        /// What is there, relative to it.
        entry: PathBuf,
        /// What it is.
        why: &'static str,
        /// Whether `--fresh` was asked.
        fresh: bool,
    },
    /// The path is not a directory.
    #[error("{}: not a directory; give a directory as --state", dir.display())]
    NotADirectory {
        /// The path given.
        dir: PathBuf,
    },
    /// Another run holds the directory's lock.
    #[error(
        "another harness run holds {} (pid {}); wait for it to finish, or give another --state",
        dir.display(),
        pid.map_or_else(|| "unknown".to_owned(), |p| p.to_string())
    )]
    Locked {
        /// The state directory.
        dir: PathBuf,
        /// The pid it wrote into the lock file, if readable.
        pid: Option<u32>,
    },
    /// A file system operation failed.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// What failed.
        action: &'static str,
        /// On what.
        path: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },
}

fn io_error(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> StateDirError {
    let path = path.to_path_buf();
    move |source| StateDirError::Io {
        action,
        path,
        source,
    }
}

/// The name of a script's state directory under `.harness/code/`: its
/// file stem, with `%`, path separators, control characters and bytes that
/// are not UTF-8 escaped as `%XX`, a stem of only dots (`..` from `...py`)
/// escaped whole, and a name past 255 bytes cut and suffixed with a hash of
/// the stem. Distinct stems give distinct names.
pub(crate) fn state_name(file: &Path) -> String {
    let stem = file
        .file_stem()
        .or_else(|| file.file_name())
        .map_or(&b"script"[..], |s| s.as_encoded_bytes());
    let mut name = String::with_capacity(stem.len());
    let escape = |name: &mut String, byte: u8| name.push_str(&format!("%{byte:02X}"));
    if stem.iter().all(|&b| b == b'.') {
        // `.`, `..` (and an empty stem): never a name of its own.
        for &byte in stem {
            escape(&mut name, byte);
        }
        if stem.is_empty() {
            name.push('%');
        }
    } else {
        for chunk in stem.utf8_chunks() {
            for c in chunk.valid().chars() {
                if c == '%' || c == '/' || c == '\\' || c.is_control() {
                    let mut buf = [0; 4];
                    for &byte in c.encode_utf8(&mut buf).as_bytes() {
                        escape(&mut name, byte);
                    }
                } else {
                    name.push(c);
                }
            }
            for &byte in chunk.invalid() {
                escape(&mut name, byte);
            }
        }
    }
    if name.len() > NAME_MAX {
        let mut cut = NAME_MAX - 17;
        while !name.is_char_boundary(cut) {
            cut -= 1;
        }
        name = format!("{}~{}", &name[..cut], &sha256_hex(stem)[..16]);
    }
    name
}

/// A state directory claimed by this run: locked until dropped.
#[derive(Debug)]
pub(crate) struct StateDir {
    /// Held for the lock's sake.
    _lock: File,
}

impl StateDir {
    /// Claims `dir` for a run of `script`: refuses it if it holds anything
    /// harness did not write, creates it, locks it (or fails with
    /// [`StateDirError::Locked`]), with `fresh` deletes the notebook there,
    /// and marks it as harness's.
    pub(crate) fn claim(dir: &Path, fresh: bool, script: &Path) -> Result<Self, StateDirError> {
        // Refused before anything is written into it; a link is no
        // directory of ours, wherever it points (a cell can make one).
        match fs::symlink_metadata(dir) {
            Ok(meta) if !meta.is_dir() => {
                return Err(StateDirError::NotADirectory {
                    dir: dir.to_path_buf(),
                });
            }
            Ok(_) => Contents::of(dir)?.check(dir, fresh)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error("read", dir)(e)),
        }
        fs::create_dir_all(dir).map_err(io_error("create the directory", dir))?;
        let lock = lock(dir)?;
        // Looked at again under the lock: what another run left is final.
        let contents = Contents::of(dir)?;
        contents.check(dir, fresh)?;
        if fresh {
            contents.delete(dir)?;
        }
        if !contents.marked {
            let text = format!(
                "harness run keeps the notebook of {} here.\n\
                 `harness run --fresh` deletes only the files it wrote.\n",
                script.display()
            );
            let path = dir.join(MARKER);
            write_atomic(&path, text.as_bytes(), durable::Sync::FileAndDir).map_err(|e| {
                StateDirError::Io {
                    action: "write",
                    path,
                    source: io::Error::other(e),
                }
            })?;
        }
        Ok(Self { _lock: lock })
    }
}

/// Takes the directory's lock, without waiting, and writes this process's
/// pid into it.
fn lock(dir: &Path) -> Result<File, StateDirError> {
    let path = dir.join(LOCK);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io_error("open the lock file", &path))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => {
            let mut text = String::new();
            let pid = file
                .read_to_string(&mut text)
                .ok()
                .and_then(|_| text.trim().parse().ok());
            return Err(StateDirError::Locked {
                dir: dir.to_path_buf(),
                pid,
            });
        }
        Err(fs::TryLockError::Error(e)) => return Err(io_error("lock", &path)(e)),
    }
    let written = file
        .set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| writeln!(file, "{}", std::process::id()));
    written.map_err(io_error("write", &path))?;
    Ok(file)
}

/// What a state directory holds, sorted into what a notebook writes there
/// and the first thing it does not.
#[derive(Debug, Default)]
struct Contents {
    /// Whether it has the marker.
    marked: bool,
    /// Whether it has any entry besides the marker and the lock.
    occupied: bool,
    /// Whether `session.json` is there and is not a notebook.
    foreign_notebook: bool,
    /// The notebook's files, to delete on `--fresh`, relative to the
    /// directory.
    files: Vec<PathBuf>,
    /// Its directories, children before parents, relative to it.
    dirs: Vec<PathBuf>,
    /// The first entry harness does not write, relative to the directory.
    foreign: Option<(PathBuf, &'static str)>,
    /// The first symbolic link, relative to the directory: harness writes
    /// none, and follows none out of it.
    link: Option<PathBuf>,
}

impl Contents {
    fn of(dir: &Path) -> Result<Self, StateDirError> {
        let mut found = Self::default();
        for (name, path, kind) in entries(dir)? {
            if kind != Kind::Dir && kind != Kind::File {
                found.foreign(&name, kind.what());
                continue;
            }
            let file = kind == Kind::File;
            match name.to_str() {
                Some(MARKER) if file => found.marked = true,
                Some(LOCK) if file => {}
                Some(NOTEBOOK_FILE) if file => {
                    found.occupied = true;
                    found.foreign_notebook = !is_notebook(&path)?;
                    found.files.push(name);
                }
                Some(n) if file && is_temporary(n, &[NOTEBOOK_FILE, MARKER]) => {
                    found.occupied = true;
                    found.files.push(name);
                }
                Some(BLOBS) if !file => {
                    found.occupied = true;
                    found.blobs(&path, Path::new(BLOBS))?;
                }
                _ => found.foreign(&name, kind.what()),
            }
        }
        Ok(found)
    }

    fn foreign(&mut self, entry: &Path, why: &'static str) {
        self.occupied = true;
        if why == Kind::Link.what() && self.link.is_none() {
            self.link = Some(entry.to_path_buf());
        }
        if self.foreign.is_none() {
            self.foreign = Some((entry.to_path_buf(), why));
        }
    }

    /// `blobs/`: `sha256/<xx>/<hash>` (and the temporary files of their
    /// atomic writes) and the kernel's files being written in `tmp/`.
    fn blobs(&mut self, path: &Path, rel: &Path) -> Result<(), StateDirError> {
        for (name, child, kind) in entries(path)? {
            let rel_child = rel.join(&name);
            match (name.to_str(), kind) {
                (Some("sha256"), Kind::Dir) => {
                    for (shard, shard_path, kind) in entries(&child)? {
                        let rel_shard = rel_child.join(&shard);
                        let is_shard = shard.to_str().is_some_and(|s| {
                            s.len() == 2 && s.bytes().all(|b| b.is_ascii_hexdigit())
                        });
                        if kind != Kind::Dir || !is_shard {
                            self.foreign(&rel_shard, "not a blob shard directory");
                            continue;
                        }
                        for (blob, _, kind) in entries(&shard_path)? {
                            let ok = kind == Kind::File
                                && blob
                                    .to_str()
                                    .is_some_and(|b| is_valid_hash(b) || is_temporary_blob(b));
                            if ok {
                                self.files.push(rel_shard.join(&blob));
                            } else {
                                self.foreign(&rel_shard.join(&blob), "not a blob");
                            }
                        }
                        self.dirs.push(rel_shard);
                    }
                    self.dirs.push(rel_child);
                }
                (Some("tmp"), Kind::Dir) => {
                    for (file, _, kind) in entries(&child)? {
                        if kind == Kind::File {
                            self.files.push(rel_child.join(&file));
                        } else {
                            self.foreign(&rel_child.join(&file), kind.what());
                        }
                    }
                    self.dirs.push(rel_child);
                }
                _ => self.foreign(&rel_child, kind.what()),
            }
        }
        self.dirs.push(rel.to_path_buf());
        Ok(())
    }

    /// Whether `dir` may be used (and, with `fresh`, emptied): it holds no
    /// symbolic link, and it is marked, or holds nothing, or holds only a
    /// notebook (as directories made before the marker existed do); with
    /// `fresh`, it also holds nothing else.
    fn check(&self, dir: &Path, fresh: bool) -> Result<(), StateDirError> {
        let refuse = |entry: &Path, why| StateDirError::Foreign {
            dir: dir.to_path_buf(),
            entry: entry.to_path_buf(),
            why,
            fresh,
        };
        if let Some(link) = &self.link {
            return Err(refuse(link, Kind::Link.what()));
        }
        let owned = self.marked || !self.occupied;
        if self.foreign_notebook && (fresh || !owned) {
            return Err(refuse(Path::new(NOTEBOOK_FILE), "not a notebook"));
        }
        match &self.foreign {
            Some((entry, why)) if fresh || !owned => Err(refuse(entry, why)),
            _ => Ok(()),
        }
    }

    /// Deletes the notebook's files in `dir`, then its directories, which
    /// must then be empty: anything that appeared meanwhile stays, and is
    /// reported.
    ///
    /// Each is deleted relative to its directory, opened from `dir` down
    /// without following a link (`openat` with `O_NOFOLLOW`, `unlinkat`),
    /// never through a path: a directory swapped for a link since it was
    /// listed (by a process that outlived its kernel) is not walked into,
    /// and the link itself is reported as a directory that cannot be
    /// deleted.
    #[cfg(unix)]
    fn delete(&self, dir: &Path) -> Result<(), StateDirError> {
        let mut tree = OpenTree::open(dir)?;
        for file in &self.files {
            tree.remove(file, false)?;
        }
        for sub in &self.dirs {
            tree.remove(sub, true)?;
        }
        Ok(())
    }

    /// Deletes the notebook's files in `dir`, then its directories, which
    /// must then be empty: anything that appeared meanwhile stays, and is
    /// reported.
    #[cfg(not(unix))]
    fn delete(&self, dir: &Path) -> Result<(), StateDirError> {
        for file in &self.files {
            let file = dir.join(file);
            match fs::remove_file(&file) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_error("delete", &file)(e)),
            }
        }
        for sub in &self.dirs {
            let sub = dir.join(sub);
            match fs::remove_dir(&sub) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_error("delete the directory", &sub)(e)),
            }
        }
        Ok(())
    }
}

/// The directories of a state directory being emptied, each opened once,
/// from the state directory down, without following a link.
#[cfg(unix)]
struct OpenTree {
    root: PathBuf,
    /// Relative path (empty: the state directory) → its handle; `None`:
    /// gone, or a link or a file now.
    opened: std::collections::BTreeMap<PathBuf, Option<fs::File>>,
}

#[cfg(unix)]
impl OpenTree {
    fn open(root: &Path) -> Result<Self, StateDirError> {
        let dir = harness::durable::open_dir(root).map_err(io_error("open the directory", root))?;
        let mut opened = std::collections::BTreeMap::new();
        opened.insert(PathBuf::new(), Some(dir));
        Ok(Self {
            root: root.to_path_buf(),
            opened,
        })
    }

    /// The handle of `rel`, opening it (and what is above it) if needed.
    fn handle(&mut self, rel: &Path) -> Result<Option<&fs::File>, StateDirError> {
        if !self.opened.contains_key(rel) {
            let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
                return Ok(None);
            };
            let opened = match self.handle(parent)? {
                None => None,
                Some(parent) => harness::durable::open_child_dir(parent, name)
                    .map_err(io_error("open the directory", &self.root.join(rel)))?,
            };
            self.opened.insert(rel.to_path_buf(), opened);
        }
        Ok(self.opened.get(rel).and_then(Option::as_ref))
    }

    /// Deletes the file (or, with `dir`, the empty directory) `rel`, in
    /// its directory's handle. One whose directory is gone or was
    /// replaced by a link is not there to delete.
    fn remove(&mut self, rel: &Path, dir: bool) -> Result<(), StateDirError> {
        use rustix::fs::AtFlags;

        let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
            return Ok(());
        };
        let path = self.root.join(rel);
        let Some(parent) = self.handle(parent)? else {
            return Ok(());
        };
        let flags = if dir {
            AtFlags::REMOVEDIR
        } else {
            AtFlags::empty()
        };
        match rustix::fs::unlinkat(parent, name, flags) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
            Err(e) if dir => Err(io_error("delete the directory", &path)(e.into())),
            Err(e) => Err(io_error("delete", &path)(e.into())),
        }
    }
}

/// An entry's kind, without following symbolic links.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    File,
    Dir,
    Link,
    Other,
}

impl Kind {
    fn what(self) -> &'static str {
        match self {
            Kind::File => "a file",
            Kind::Dir => "a directory",
            Kind::Link => "a symbolic link",
            Kind::Other => "a special file",
        }
    }
}

/// The entries of `dir`: name, path, kind.
fn entries(dir: &Path) -> Result<Vec<(PathBuf, PathBuf, Kind)>, StateDirError> {
    let list = fs::read_dir(dir).map_err(io_error("list", dir))?;
    let mut out = Vec::new();
    for entry in list {
        let entry = entry.map_err(io_error("list", dir))?;
        let kind = entry.file_type().map_err(io_error("read", &entry.path()))?;
        let kind = if kind.is_symlink() {
            Kind::Link
        } else if kind.is_dir() {
            Kind::Dir
        } else if kind.is_file() {
            Kind::File
        } else {
            Kind::Other
        };
        out.push((PathBuf::from(entry.file_name()), entry.path(), kind));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Whether the file at `path` starts as a saved notebook does.
fn is_notebook(path: &Path) -> Result<bool, StateDirError> {
    const START: &[u8] = b"{\"format\":";
    let mut head = [0; START.len()];
    let mut file = File::open(path).map_err(io_error("read", path))?;
    let read = file.read(&mut head).map_err(io_error("read", path))?;
    Ok(head[..read] == *START)
}

/// `.NAME.HEX.tmp`: the temporary file of an atomic write of one of
/// `names` ([`harness::durable`]).
fn is_temporary(name: &str, names: &[&str]) -> bool {
    let Some(inner) = name.strip_prefix('.').and_then(|n| n.strip_suffix(".tmp")) else {
        return false;
    };
    inner.rsplit_once('.').is_some_and(|(target, hex)| {
        names.contains(&target) && !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit())
    })
}

/// The temporary file of a blob's atomic write.
fn is_temporary_blob(name: &str) -> bool {
    let Some(inner) = name.strip_prefix('.').and_then(|n| n.strip_suffix(".tmp")) else {
        return false;
    };
    inner.rsplit_once('.').is_some_and(|(target, hex)| {
        is_valid_hash(target) && !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(file: &str) -> String {
        state_name(Path::new(file))
    }

    #[test]
    fn plain_stems_keep_their_names() {
        assert_eq!(name("weather.py"), "weather");
        assert_eq!(name("/x/y/my script.py"), "my script");
        assert_eq!(name("données é.ipynb"), "données é");
        assert_eq!(name(".py"), ".py");
        assert_eq!(name("a.b.py"), "a.b");
        assert_eq!(name("...."), "%2E%2E%2E");
    }

    #[test]
    fn dot_stems_and_separators_never_name_a_parent_or_a_path() {
        for file in ["...py", "..py", "x/...py", "x/..py"] {
            let n = name(file);
            assert!(
                !n.is_empty() && n != "." && n != ".." && !n.contains('/'),
                "{file}: {n}"
            );
        }
        assert_eq!(name("...py"), "%2E%2E");
        assert_eq!(name("..py"), "%2E");
        assert_eq!(name("a\\b.py"), "a%5Cb");
        assert_eq!(name("tab\there.py"), "tab%09here");
    }

    #[test]
    fn distinct_stems_get_distinct_names() {
        let stems = ["%41", "A", "%2E", ".", "%2E%2E", "..", "a%5Cb", "a\\b"];
        let names: std::collections::BTreeSet<String> =
            stems.iter().map(|s| name(&format!("{s}.py"))).collect();
        assert_eq!(names.len(), stems.len(), "{names:?}");
    }

    #[cfg(unix)]
    #[test]
    fn bytes_that_are_not_utf8_are_escaped() {
        use std::os::unix::ffi::OsStrExt;
        let file = Path::new(std::ffi::OsStr::from_bytes(b"caf\xe9.py"));
        assert_eq!(state_name(file), "caf%E9");
    }

    #[test]
    fn long_names_are_cut_with_a_hash() {
        let long = format!("{}.py", "%".repeat(250));
        let n = name(&long);
        assert!(n.len() <= NAME_MAX, "{}", n.len());
        assert_ne!(n, name(&format!("{}.py", "%".repeat(249))));
    }

    /// A directory of the notebook swapped for a link between the listing
    /// and the deletion of `--fresh` is not walked into: what the link
    /// points at stays, and the link is reported.
    #[cfg(unix)]
    #[test]
    fn fresh_deletes_nothing_through_a_directory_swapped_for_a_link_after_the_listing() {
        let top =
            std::env::temp_dir().join(format!("harness-state-dir-swap-{}", std::process::id()));
        let _ = fs::remove_dir_all(&top);
        let dir = top.join("state");
        let hash = sha256_hex(b"x");
        for sub in ["blobs/tmp", &format!("blobs/sha256/{}", &hash[..2])] {
            fs::create_dir_all(dir.join(sub)).unwrap();
        }
        fs::write(dir.join(MARKER), b"").unwrap();
        fs::write(dir.join(NOTEBOOK_FILE), b"{\"format\":1}").unwrap();
        fs::write(dir.join("blobs/tmp/leftover"), b"kernel").unwrap();
        fs::write(dir.join("blobs/sha256").join(&hash[..2]).join(&hash), b"x").unwrap();
        let victim = top.join("victim");
        fs::create_dir_all(victim.join(&hash[..2])).unwrap();
        fs::write(victim.join("leftover"), b"mine").unwrap();
        fs::write(victim.join(&hash[..2]).join(&hash), b"mine").unwrap();

        let contents = Contents::of(&dir).unwrap();
        contents.check(&dir, true).unwrap();
        // Swapped after the listing, before the deletion.
        fs::rename(dir.join("blobs/tmp"), top.join("tmp-moved")).unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("blobs/tmp")).unwrap();
        fs::rename(dir.join("blobs/sha256"), top.join("sha256-moved")).unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("blobs/sha256")).unwrap();
        let error = contents.delete(&dir).unwrap_err();
        assert!(error.to_string().contains("blobs"), "{error}");

        assert_eq!(fs::read(victim.join("leftover")).unwrap(), b"mine");
        assert_eq!(
            fs::read(victim.join(&hash[..2]).join(&hash)).unwrap(),
            b"mine"
        );
        assert!(!dir.join(NOTEBOOK_FILE).exists());
        fs::remove_dir_all(&top).unwrap();
    }

    /// A link in place of the state directory is refused before anything is
    /// written, wherever it points.
    #[cfg(unix)]
    #[test]
    fn a_state_directory_that_is_a_link_is_refused() {
        let top =
            std::env::temp_dir().join(format!("harness-state-dir-link-{}", std::process::id()));
        let _ = fs::remove_dir_all(&top);
        let elsewhere = top.join("elsewhere");
        fs::create_dir_all(&elsewhere).unwrap();
        let link = top.join("state");
        std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
        let error = StateDir::claim(&link, false, Path::new("s.py")).unwrap_err();
        assert!(
            matches!(error, StateDirError::NotADirectory { .. }),
            "{error}"
        );
        assert_eq!(fs::read_dir(&elsewhere).unwrap().count(), 0);
        fs::remove_dir_all(&top).unwrap();
    }

    #[test]
    fn temporary_names_are_only_those_of_atomic_writes() {
        assert!(is_temporary(
            ".session.json.0123abcd.tmp",
            &[NOTEBOOK_FILE, MARKER]
        ));
        assert!(is_temporary(
            "..harness-run.ff.tmp",
            &[NOTEBOOK_FILE, MARKER]
        ));
        assert!(!is_temporary(".notes.txt.ff.tmp", &[NOTEBOOK_FILE, MARKER]));
        assert!(!is_temporary(".session.json.tmp", &[NOTEBOOK_FILE]));
        assert!(!is_temporary("session.json", &[NOTEBOOK_FILE]));
    }
}
