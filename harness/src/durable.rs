//! Files that survive a crash: the one way this workspace replaces a file.
//!
//! [`write_atomic`] writes the new bytes to a temporary file with a unique
//! name beside the target, fsyncs it, renames it over the target and fsyncs
//! the directory, so that after a crash a reader finds either the old file
//! or the new one, whole, never a mix or an empty file. Every writer of the
//! workspace uses it: model transcripts, the file session store, code
//! notebooks and their blobs.
//!
//! ```
//! use harness::durable::{Sync, write_atomic};
//! let dir = std::env::temp_dir().join(format!("harness-durable-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir)?;
//! let path = dir.join("state.json");
//! write_atomic(&path, b"{\"n\":1}", Sync::FileAndDir)?;
//! write_atomic(&path, b"{\"n\":2}", Sync::FileAndDir)?;
//! assert_eq!(std::fs::read(&path)?, b"{\"n\":2}");
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// How much of an atomic write must reach the disk before it returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sync {
    /// Rename only: atomic for readers, but a crash may lose the write (and,
    /// on some file systems, leave the file empty). For data that is
    /// fsynced later as a batch.
    None,
    /// The file's content is fsynced before the rename; the rename itself
    /// is durable once the caller fsyncs the directory ([`sync_dir`]),
    /// which lets several writes to one directory share that fsync.
    File,
    /// The file is fsynced, renamed, and its directory fsynced: the write
    /// is durable when this returns.
    FileAndDir,
}

/// An atomic write that failed: what it was doing, and to which path. The
/// target is untouched and the temporary file removed.
#[derive(Debug, thiserror::Error)]
#[error("cannot {action} {}: {source}", path.display())]
pub struct WriteError {
    /// What failed: `create`, `write`, `fsync`, `rename into place`,
    /// `fsync the directory`.
    pub action: &'static str,
    /// The file or directory it failed on.
    pub path: PathBuf,
    /// The operating system's error.
    #[source]
    pub source: io::Error,
}

/// Replaces `path` with `bytes` atomically: a temporary file with a unique
/// name in the same directory (so that two writers never share one), fsynced
/// as `sync` says, renamed over `path`. The directory must exist.
///
/// # Errors
///
/// [`WriteError`] naming the action and the path that failed.
pub fn write_atomic(path: &Path, bytes: &[u8], sync: Sync) -> Result<(), WriteError> {
    write(path, bytes, sync, false)
}

/// [`write_atomic`] for data only its owner may read: on Unix the file is
/// created `0600` (the temporary file already, so the bytes are never
/// readable by others, not even for a moment); elsewhere, as
/// [`write_atomic`].
///
/// # Errors
///
/// [`WriteError`] naming the action and the path that failed.
pub fn write_atomic_private(path: &Path, bytes: &[u8], sync: Sync) -> Result<(), WriteError> {
    write(path, bytes, sync, true)
}

fn write(path: &Path, bytes: &[u8], sync: Sync, private: bool) -> Result<(), WriteError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map_or_else(|| "file".into(), |n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(".{name}.{}.tmp", uuid::Uuid::new_v4().simple()));
    let fail = |action: &'static str, at: &Path| {
        let at = at.to_path_buf();
        move |source| WriteError {
            action,
            path: at,
            source,
        }
    };
    let written = (|| {
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        if private {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        #[cfg(not(unix))]
        let _ = private;
        let mut file = options.open(&tmp).map_err(fail("create", &tmp))?;
        file.write_all(bytes).map_err(fail("write", &tmp))?;
        if sync != Sync::None {
            file.sync_all().map_err(fail("fsync", &tmp))?;
        }
        drop(file);
        fs::rename(&tmp, path).map_err(fail("rename into place", path))
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    if sync == Sync::FileAndDir {
        sync_dir(dir)?;
    }
    Ok(())
}

/// [`write_atomic`] inside the open directory `dir`: the temporary file is
/// created, and renamed to `name`, relative to `dir` itself (`openat`,
/// `renameat`), never through a path. Whatever replaces the directory's
/// path meanwhile (a symbolic link to somewhere else, say, made by a
/// command running beside the write) changes nothing: the file lands in
/// the directory that was opened. `name` is one file name (no `/`), never
/// followed if a link; `shown` is the directory's path, for errors only.
/// The temporary file is created `0600` when `private`, else with the
/// mode [`write_atomic`] gives (`0666` less the umask).
///
/// Open `dir` with [`open_dir`] to refuse a link in its own last
/// component.
///
/// # Errors
///
/// [`WriteError`] naming the action and the file that failed; the
/// temporary file is removed.
#[cfg(unix)]
pub fn write_atomic_in(
    dir: &File,
    shown: &Path,
    name: &std::ffi::OsStr,
    bytes: &[u8],
    sync: Sync,
    private: bool,
) -> Result<(), WriteError> {
    use rustix::fs::{AtFlags, Mode, OFlags};
    let fail = |action: &'static str, at: PathBuf| {
        move |source: io::Error| WriteError {
            action,
            path: at,
            source,
        }
    };
    let target = shown.join(name);
    if name.is_empty() || name.as_encoded_bytes().contains(&b'/') || name == ".." || name == "." {
        return Err(fail("create", target)(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not one file name",
        )));
    }
    let tmp = format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        uuid::Uuid::new_v4().simple()
    );
    let at_tmp = shown.join(&tmp);
    let flags = OFlags::WRONLY
        | OFlags::CREATE
        | OFlags::EXCL
        | OFlags::NOFOLLOW
        | OFlags::CLOEXEC
        | OFlags::NOCTTY;
    let mode = Mode::from_raw_mode(if private { 0o600 } else { 0o666 });
    let fd = rustix::fs::openat(dir, tmp.as_str(), flags, mode)
        .map_err(|e| fail("create", at_tmp.clone())(e.into()))?;
    let written = (|| {
        let mut file = File::from(fd);
        file.write_all(bytes)
            .map_err(fail("write", at_tmp.clone()))?;
        if sync != Sync::None {
            file.sync_all().map_err(fail("fsync", at_tmp.clone()))?;
        }
        drop(file);
        rustix::fs::renameat(dir, tmp.as_str(), dir, name)
            .map_err(|e| fail("rename into place", target.clone())(e.into()))
    })();
    if let Err(e) = written {
        let _ = rustix::fs::unlinkat(dir, tmp.as_str(), AtFlags::empty());
        return Err(e);
    }
    if sync == Sync::FileAndDir {
        dir.sync_all()
            .map_err(fail("fsync the directory", shown.to_path_buf()))?;
    }
    Ok(())
}

/// Opens the directory `path` for [`write_atomic_in`] and `*at` calls,
/// refusing a link in its last component (`O_DIRECTORY | O_NOFOLLOW`):
/// a link there fails with `ELOOP`, a file with `ENOTDIR`.
///
/// # Errors
///
/// The [`io::Error`] of the open.
#[cfg(unix)]
pub fn open_dir(path: &Path) -> io::Result<File> {
    open_dir_at(rustix::fs::CWD, path.as_os_str()).map_err(io::Error::from)
}

/// Opens the directory `name` inside the open directory `dir`, without
/// following a link: `None` if it is absent, a link or not a directory.
/// Walking a tree from one handle down this way, and deleting or writing
/// relative to the handles, never follows a directory swapped for a link
/// since it was listed.
///
/// # Errors
///
/// Any other [`io::Error`] of the open (permission denied, say).
#[cfg(unix)]
pub fn open_child_dir(dir: &File, name: &std::ffi::OsStr) -> io::Result<Option<File>> {
    use rustix::io::Errno;
    match open_dir_at(dir, name) {
        Ok(file) => Ok(Some(file)),
        Err(Errno::NOENT | Errno::LOOP | Errno::NOTDIR) => Ok(None),
        Err(error) => Err(error.into()),
    }
}

#[cfg(unix)]
fn open_dir_at(at: impl rustix::fd::AsFd, path: &std::ffi::OsStr) -> rustix::io::Result<File> {
    use rustix::fs::{Mode, OFlags};
    rustix::fs::openat(
        at,
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map(File::from)
}

/// Fsyncs a directory, making the names created, renamed or removed in it
/// durable. A no-op where directories cannot be opened as files (Windows).
///
/// # Errors
///
/// [`WriteError`] with the action `fsync the directory`.
pub fn sync_dir(dir: &Path) -> Result<(), WriteError> {
    #[cfg(unix)]
    {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|source| WriteError {
                action: "fsync the directory",
                path: dir.to_path_buf(),
                source,
            })
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "harness-durable-{tag}-{}",
            uuid::Uuid::new_v4().simple()
        ));
        fs::create_dir_all(&dir).expect("temp dir");
        dir
    }

    #[test]
    fn replaces_the_file_and_leaves_no_temporary_behind() {
        let dir = temp_dir("replace");
        let path = dir.join("a.json");
        for (i, sync) in [Sync::None, Sync::File, Sync::FileAndDir]
            .into_iter()
            .enumerate()
        {
            write_atomic(&path, format!("v{i}").as_bytes(), sync).expect("write");
            assert_eq!(fs::read_to_string(&path).expect("read"), format!("v{i}"));
        }
        let names: Vec<_> = fs::read_dir(&dir)
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["a.json"]);
        fs::remove_dir_all(&dir).expect("clean");
    }

    #[test]
    fn a_failed_write_names_the_path_and_keeps_the_old_file() {
        let dir = temp_dir("fail");
        let path = dir.join("kept.json");
        write_atomic(&path, b"old", Sync::FileAndDir).expect("write");
        // Renaming a file over a directory fails: the old content survives.
        let blocked = dir.join("blocked");
        fs::create_dir_all(blocked.join("inside")).expect("dir");
        let err = write_atomic(&blocked, b"new", Sync::FileAndDir).expect_err("over a directory");
        assert_eq!(err.action, "rename into place");
        assert!(err.to_string().contains("blocked"), "{err}");
        assert_eq!(fs::read(&path).expect("read"), b"old");
        let missing = dir.join("no-such-dir").join("x.json");
        let err = write_atomic(&missing, b"x", Sync::None).expect_err("no directory");
        assert_eq!(err.action, "create");
        let leftovers = fs::read_dir(&dir)
            .expect("list")
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            })
            .count();
        assert_eq!(leftovers, 0);
        fs::remove_dir_all(&dir).expect("clean");
    }

    #[cfg(unix)]
    #[test]
    fn a_write_in_an_open_directory_lands_there_whatever_its_path_becomes() {
        use std::os::unix::fs::PermissionsExt;
        let root = temp_dir("in");
        let real = root.join("real");
        let outside = root.join("outside");
        fs::create_dir_all(&real).expect("dir");
        fs::create_dir_all(&outside).expect("dir");
        let dir = File::open(&real).expect("open");
        write_atomic_in(
            &dir,
            &real,
            "a.json".as_ref(),
            b"one",
            Sync::FileAndDir,
            false,
        )
        .expect("write");
        // The directory's path now leads elsewhere: the write still lands
        // in the directory opened, and nothing appears outside.
        fs::rename(&real, root.join("moved")).expect("move");
        std::os::unix::fs::symlink(&outside, &real).expect("link");
        for (i, sync) in [Sync::None, Sync::File, Sync::FileAndDir]
            .into_iter()
            .enumerate()
        {
            let private = i == 1;
            write_atomic_in(
                &dir,
                &real,
                "a.json".as_ref(),
                format!("v{i}").as_bytes(),
                sync,
                private,
            )
            .expect("write");
            let moved = root.join("moved").join("a.json");
            assert_eq!(fs::read_to_string(&moved).expect("read"), format!("v{i}"));
            if private {
                let mode = fs::metadata(&moved).expect("stat").permissions().mode() & 0o777;
                assert_eq!(mode, 0o600);
            }
        }
        assert_eq!(fs::read_dir(&outside).expect("list").count(), 0);
        let names: Vec<_> = fs::read_dir(root.join("moved"))
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["a.json"], "no temporary left");
        // A name that is not one file name, or a link in the directory.
        for bad in ["", ".", "..", "x/y", "../escape"] {
            let err =
                write_atomic_in(&dir, &real, bad.as_ref(), b"x", Sync::None, false).expect_err(bad);
            assert_eq!(err.action, "create", "{bad:?}");
        }
        std::os::unix::fs::symlink(outside.join("target"), root.join("moved").join("link"))
            .expect("link");
        write_atomic_in(&dir, &real, "link".as_ref(), b"x", Sync::None, false).expect("write");
        assert!(
            !outside.join("target").exists(),
            "the link was replaced, not followed"
        );
        fs::remove_dir_all(&root).expect("clean");
    }

    #[cfg(unix)]
    #[test]
    fn a_private_write_is_readable_by_its_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = temp_dir("private");
        let mode = |p: &Path| fs::metadata(p).expect("stat").permissions().mode() & 0o777;
        let private = dir.join("private.json");
        write_atomic_private(&private, b"secret", Sync::File).expect("write");
        assert_eq!(mode(&private), 0o600);
        // Replacing a shared file with a private one makes it private.
        let shared = dir.join("shared.json");
        fs::write(&shared, b"x").expect("write");
        fs::set_permissions(&shared, fs::Permissions::from_mode(0o644)).expect("chmod");
        write_atomic_private(&shared, b"y", Sync::None).expect("write");
        assert_eq!(mode(&shared), 0o600);
        assert_eq!(fs::read(&shared).expect("read"), b"y");
        fs::remove_dir_all(&dir).expect("clean");
    }

    #[test]
    fn concurrent_writers_of_one_file_never_collide() {
        let dir = temp_dir("race");
        let path = dir.join("shared.json");
        std::thread::scope(|s| {
            for t in 0..4 {
                let path = &path;
                s.spawn(move || {
                    for i in 0..25 {
                        write_atomic(path, format!("{t}:{i}").as_bytes(), Sync::File)
                            .expect("every writer succeeds");
                    }
                });
            }
        });
        let last = fs::read_to_string(&path).expect("read");
        assert!(last.ends_with(":24"), "{last}");
        fs::remove_dir_all(&dir).expect("clean");
    }
}
