//! Files a model may touch: one confinement, [`Root`], for every file tool
//! a model drives, and the tools built on it ([`ReadFile`], [`ListDir`],
//! [`WriteFile`]).
//!
//! A path a model gives is resolved against the root one component at a
//! time, each opened relative to the directory before it and never
//! followed by the kernel (`openat` with `O_NOFOLLOW`). A symbolic link is
//! read and its target walked by the same rules, so a link the model made
//! (`ln -s /proc/self/environ env.txt`, `ln -s ../.. up`) is resolved when
//! the file is opened, inside the root or not at all: there is no window
//! between a check and an open for another process to swap a link in.
//!
//! What a [`Root`] refuses, whatever the path:
//! - leaving the root: an absolute path, `..` above the root, a link whose
//!   target is outside it ([`FsError::Escapes`]), unless the root
//!   [allows outside paths](Root::allow_outside) and a person approved the
//!   call (see [`path_policy`]);
//! - `/proc` and its like (a file on procfs holds a process's environment
//!   and memory maps: [`FsError::Procfs`]);
//! - anything but a regular file to read or write: directories, devices
//!   (`/dev/zero` would never end), FIFOs (opened without blocking, so one
//!   cannot hang the tool), sockets ([`FsError::NotRegular`]);
//! - a file inside the root with other hard links ([`FsError::HardLinked`]):
//!   a hard link is the same file as one that may live anywhere on the
//!   file system, and nothing in the root says where.
//!
//! Reads are bounded before they are read ([`Window`]): the tool reads at
//! most its window, whatever size the file claims. A write replaces the
//! file's entry (a new file renamed over it), so it never writes through a
//! link into another file.
//!
//! ```
//! use harness_kit::fs::{Root, Window};
//!
//! let dir = tempfile::tempdir()?;
//! std::fs::write(dir.path().join("notes.txt"), "hello")?;
//! let root = Root::open(dir.path())?;
//! assert_eq!(root.read("notes.txt", Window::Head(1024))?.text, "hello");
//! assert!(root.read("../etc/passwd", Window::Head(1024)).is_err());
//! assert!(root.read("/etc/passwd", Window::Head(1024)).is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::policy::{Policy, Verdict};
use harness::llm::Tool;
use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The most symbolic links one path may pass through (Linux's own limit).
pub const MAX_LINKS: usize = 40;

/// The most entries [`Root::list`] returns.
pub const MAX_ENTRIES: usize = 1000;

/// A file tool's refusal or failure, naming the path as the model gave it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FsError {
    /// The path leads outside the root.
    #[error("{path:?} leads outside {root}: {why}; give a path inside it")]
    Escapes {
        /// The path as given.
        path: String,
        /// The root.
        root: String,
        /// How it leaves (`..`, an absolute path, a link and its target).
        why: String,
    },
    /// The file is on procfs (`/proc`): never read or written.
    #[error("{path:?} is on /proc, which holds processes' secrets: not read")]
    Procfs {
        /// The path as given.
        path: String,
    },
    /// Not a regular file where one is needed (or not a directory to list).
    #[error("{path:?} is {kind}, not {wanted}")]
    NotRegular {
        /// The path as given.
        path: String,
        /// What it is: "a directory", "a character device", ...
        kind: &'static str,
        /// What the tool needs.
        wanted: &'static str,
    },
    /// A file inside the root that has other hard links.
    #[error(
        "{path:?} has {links} hard links: it is also a file elsewhere, which may be outside the root; not read"
    )]
    HardLinked {
        /// The path as given.
        path: String,
        /// Its link count.
        links: u64,
    },
    /// More links than [`MAX_LINKS`] (a loop).
    #[error("{path:?} passes through more than {MAX_LINKS} symbolic links (a loop?)")]
    TooManyLinks {
        /// The path as given.
        path: String,
    },
    /// The path is empty or names the root itself where a file is needed.
    #[error("{path:?} does not name a file")]
    NoName {
        /// The path as given.
        path: String,
    },
    /// The operating system refused.
    #[error("cannot {op} {path:?}: {source}")]
    Io {
        /// What was being done: "open", "read", "list", "write", ...
        op: &'static str,
        /// The path as given.
        path: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
}

impl FsError {
    fn io(op: &'static str, path: &str, source: impl Into<std::io::Error>) -> Self {
        Self::Io {
            op,
            path: path.to_owned(),
            source: source.into(),
        }
    }
}

/// How much of a file a read keeps, read no further than that.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    /// The first `n` bytes.
    Head(u64),
    /// The last `n` bytes.
    Tail(u64),
}

/// What [`Root::read`] read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileText {
    /// The bytes read as text (invalid UTF-8 replaced).
    pub text: String,
    /// The file's size in bytes.
    pub size: u64,
    /// Whether the file holds more than was read.
    pub truncated: bool,
}

/// One entry of [`Root::list`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Its name.
    pub name: String,
    /// Whether it is a directory (a link is not followed to find out).
    pub is_dir: bool,
}

/// A directory that file tools are confined to. Cheap to clone: the
/// directory is held open, so moving or replacing the path later does not
/// move the root.
#[derive(Clone)]
pub struct Root {
    inner: Arc<Inner>,
    /// Whether paths outside the root are opened.
    outside: bool,
}

struct Inner {
    dir: OwnedFd,
    /// The root's canonical path: links whose absolute target lies under it
    /// stay inside.
    path: PathBuf,
}

impl fmt::Debug for Root {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Root")
            .field("path", &self.inner.path)
            .field("outside", &self.outside)
            .finish()
    }
}

/// Whether the directory or file `fd` is on procfs.
fn on_procfs(fd: impl AsFd) -> bool {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        rustix::fs::fstatfs(fd).is_ok_and(|fs| fs.f_type == rustix::fs::PROC_SUPER_MAGIC)
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        let _ = fd;
        false
    }
}

fn kind_of(kind: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_dir() {
        "a directory"
    } else if kind.is_file() {
        "a regular file"
    } else if kind.is_symlink() {
        "a symbolic link"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// What the walk should open at the end of the path.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Want {
    /// A file to read.
    File,
    /// A directory (to list, or as the parent of a write).
    Dir,
}

/// The path split into components to walk, refusing nothing yet.
fn components(path: &Path) -> VecDeque<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name.to_owned()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => None,
        })
        .collect()
}

/// `path` with `.` and `..` folded lexically; `None` if `..` climbs above
/// its start.
fn fold(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    Some(out)
}

static TEMP: AtomicU64 = AtomicU64::new(0);

impl Root {
    /// The directory `path` as a root. Fails if it is not a directory, or
    /// is on procfs.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, FsError> {
        let path = path.as_ref();
        let shown = path.display().to_string();
        let canonical = std::fs::canonicalize(path).map_err(|e| FsError::io("open", &shown, e))?;
        let dir = rustix::fs::open(
            &canonical,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| FsError::io("open", &shown, e))?;
        if on_procfs(&dir) {
            return Err(FsError::Procfs { path: shown });
        }
        Ok(Self {
            inner: Arc::new(Inner {
                dir,
                path: canonical,
            }),
            outside: false,
        })
    }

    /// Also opens paths outside the root (absolute, or `..` above it),
    /// as the user's own shell would, still refusing procfs, devices and
    /// FIFOs and bounding reads. Pair it with [`path_policy`], which asks a
    /// person before any such call runs: on its own this lets a model read
    /// whatever the user can.
    #[must_use]
    pub fn allow_outside(self) -> Self {
        Self {
            outside: true,
            ..self
        }
    }

    /// The root's canonical path.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Whether `requested` names a place inside the root by its spelling
    /// alone (relative without climbing above it, or absolute under it).
    /// Links are not looked at: a path inside by spelling may still be
    /// refused when it is opened.
    pub fn is_inside(&self, requested: &str) -> bool {
        self.relative(requested).is_some()
    }

    /// `requested` as a path relative to the root, if its spelling stays
    /// inside.
    fn relative(&self, requested: &str) -> Option<PathBuf> {
        let path = Path::new(requested);
        if path.is_absolute() {
            let folded = fold(path)?;
            folded
                .strip_prefix(&self.inner.path)
                .ok()
                .map(Path::to_path_buf)
        } else {
            let mut depth = 0usize;
            for c in path.components() {
                match c {
                    Component::ParentDir if depth == 0 => return None,
                    Component::ParentDir => depth -= 1,
                    Component::Normal(_) => depth += 1,
                    _ => {}
                }
            }
            Some(path.to_path_buf())
        }
    }

    fn escapes(&self, path: &str, why: impl Into<String>) -> FsError {
        FsError::Escapes {
            path: path.to_owned(),
            root: self.inner.path.display().to_string(),
            why: why.into(),
        }
    }

    /// Walks `relative` from the root, one component at a time, never
    /// letting the kernel follow a link; returns the opened end.
    fn walk(&self, shown: &str, relative: &Path, want: Want) -> Result<OwnedFd, FsError> {
        let root = &self.inner.dir;
        let dup = |fd: &OwnedFd| fd.try_clone().map_err(|e| FsError::io("open", shown, e));
        let mut stack: Vec<OwnedFd> = vec![dup(root)?];
        let mut queue = components(relative);
        let mut links = 0usize;
        if queue.is_empty() {
            return match want {
                Want::Dir => dup(root),
                Want::File => Err(FsError::NoName {
                    path: shown.to_owned(),
                }),
            };
        }
        while let Some(name) = queue.pop_front() {
            if name == ".." {
                if stack.len() == 1 {
                    return Err(self.escapes(shown, "`..` climbs above the root"));
                }
                stack.pop();
                if queue.is_empty() {
                    // The path ends at a directory reached by `..`.
                    return match want {
                        Want::Dir => dup(stack.last().unwrap_or(root)),
                        Want::File => Err(FsError::NotRegular {
                            path: shown.to_owned(),
                            kind: "a directory",
                            wanted: "a regular file",
                        }),
                    };
                }
                continue;
            }
            let here = stack.last().unwrap_or(root);
            let last = queue.is_empty();
            // A link is read, never followed: its target is walked here.
            match rustix::fs::readlinkat(here, name.as_os_str(), Vec::new()) {
                Ok(target) => {
                    links += 1;
                    if links > MAX_LINKS {
                        return Err(FsError::TooManyLinks {
                            path: shown.to_owned(),
                        });
                    }
                    let target = PathBuf::from(OsStr::from_bytes(target.as_bytes()));
                    let mut rest = if target.is_absolute() {
                        let inside = fold(&target).and_then(|t| {
                            t.strip_prefix(&self.inner.path).ok().map(Path::to_path_buf)
                        });
                        let Some(inside) = inside else {
                            return Err(self.escapes(
                                shown,
                                format!(
                                    "{} is a link to {}",
                                    name.to_string_lossy(),
                                    target.display()
                                ),
                            ));
                        };
                        stack.truncate(1);
                        components(&inside)
                    } else {
                        components(&target)
                    };
                    rest.append(&mut queue);
                    queue = rest;
                    if queue.is_empty() {
                        // A link to the root itself.
                        return match want {
                            Want::Dir => dup(stack.last().unwrap_or(root)),
                            Want::File => Err(FsError::NotRegular {
                                path: shown.to_owned(),
                                kind: "a directory",
                                wanted: "a regular file",
                            }),
                        };
                    }
                    continue;
                }
                Err(Errno::INVAL) => {}
                Err(Errno::NOENT) => {
                    return Err(FsError::io("open", shown, std::io::ErrorKind::NotFound));
                }
                Err(e) => return Err(FsError::io("open", shown, e)),
            }
            let flags = if last && want == Want::File {
                // Without blocking: a FIFO opened for reading would wait
                // for a writer.
                OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK
            } else {
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
            };
            match rustix::fs::openat(here, name.as_os_str(), flags, Mode::empty()) {
                Ok(fd) => {
                    if last {
                        return Ok(fd);
                    }
                    stack.push(fd);
                }
                // Made a link since it was read: walk it again.
                Err(Errno::LOOP) => queue.push_front(name),
                Err(Errno::NOTDIR) => {
                    return Err(FsError::NotRegular {
                        path: shown.to_owned(),
                        kind: "a path through something that is not a directory",
                        wanted: "a directory",
                    });
                }
                Err(e) => return Err(FsError::io("open", shown, e)),
            }
        }
        Err(FsError::NoName {
            path: shown.to_owned(),
        })
    }

    /// Opens `requested` (inside the root, or outside when allowed) as a
    /// file or a directory, checked against procfs.
    fn open_at(&self, requested: &str, want: Want) -> Result<OwnedFd, FsError> {
        let fd = match self.relative(requested) {
            Some(relative) => self.walk(requested, &relative, want)?,
            None if self.outside => {
                let flags = match want {
                    Want::File => OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK,
                    Want::Dir => OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                };
                let path = if Path::new(requested).is_absolute() {
                    PathBuf::from(requested)
                } else {
                    self.inner.path.join(requested)
                };
                rustix::fs::open(&path, flags, Mode::empty())
                    .map_err(|e| FsError::io("open", requested, e))?
            }
            None => {
                let why = if Path::new(requested).is_absolute() {
                    "an absolute path outside the root"
                } else {
                    "`..` climbs above the root"
                };
                return Err(self.escapes(requested, why));
            }
        };
        if on_procfs(&fd) {
            return Err(FsError::Procfs {
                path: requested.to_owned(),
            });
        }
        Ok(fd)
    }

    /// Reads `requested`: a regular file, no more of it than `window`.
    pub fn read(&self, requested: &str, window: Window) -> Result<FileText, FsError> {
        let fd = self.open_at(requested, Want::File)?;
        let inside = self.is_inside(requested);
        let mut file = std::fs::File::from(fd);
        let meta = file
            .metadata()
            .map_err(|e| FsError::io("read", requested, e))?;
        if !meta.is_file() {
            return Err(FsError::NotRegular {
                path: requested.to_owned(),
                kind: kind_of(meta.file_type()),
                wanted: "a regular file",
            });
        }
        if inside && meta.nlink() > 1 {
            return Err(FsError::HardLinked {
                path: requested.to_owned(),
                links: meta.nlink(),
            });
        }
        let size = meta.len();
        let keep = match window {
            Window::Head(n) | Window::Tail(n) => n,
        };
        if let Window::Tail(n) = window {
            file.seek(SeekFrom::Start(size.saturating_sub(n)))
                .map_err(|e| FsError::io("read", requested, e))?;
        }
        // One byte more than kept tells a file that grew from one that fits.
        let mut bytes = Vec::new();
        (&mut file)
            .take(keep.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| FsError::io("read", requested, e))?;
        let truncated = match window {
            Window::Head(_) => bytes.len() as u64 > keep,
            Window::Tail(_) => size > keep,
        };
        bytes.truncate(usize::try_from(keep).unwrap_or(usize::MAX));
        if truncated {
            // A character cut by the window is left out, not shown as a
            // replacement character.
            match window {
                Window::Head(_) => {
                    if let Err(e) = std::str::from_utf8(&bytes)
                        && e.error_len().is_none()
                    {
                        bytes.truncate(e.valid_up_to());
                    }
                }
                Window::Tail(_) => {
                    let cut = bytes
                        .iter()
                        .take(3)
                        .take_while(|b| (**b & 0b1100_0000) == 0b1000_0000)
                        .count();
                    bytes.drain(..cut);
                }
            }
        }
        let text = String::from_utf8_lossy(&bytes).into_owned();
        Ok(FileText {
            text,
            size,
            truncated,
        })
    }

    /// Lists the directory `requested`: at most [`MAX_ENTRIES`] entries,
    /// sorted by name; the second value is how many more there were.
    pub fn list(&self, requested: &str) -> Result<(Vec<Entry>, usize), FsError> {
        let fd = self.open_at(requested, Want::Dir)?;
        let dir = rustix::fs::Dir::read_from(&fd).map_err(|e| FsError::io("list", requested, e))?;
        let mut entries = Vec::new();
        let mut more = 0usize;
        for entry in dir {
            let entry = entry.map_err(|e| FsError::io("list", requested, e))?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            if entries.len() == MAX_ENTRIES {
                more += 1;
                continue;
            }
            entries.push(Entry {
                name: String::from_utf8_lossy(name).into_owned(),
                is_dir: entry.file_type() == rustix::fs::FileType::Directory,
            });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok((entries, more))
    }

    /// Writes `bytes` as the whole of `requested`, inside the root only
    /// (never outside, whatever [`allow_outside`](Self::allow_outside)
    /// says), creating its directories. The new content is written to a
    /// new file renamed over the old entry: a link there is replaced, not
    /// written through, and an existing file keeps its permissions.
    pub fn write(&self, requested: &str, bytes: &[u8]) -> Result<(), FsError> {
        let Some(relative) = self.relative(requested) else {
            return Err(self.escapes(requested, "files are written only inside the root"));
        };
        let folded = fold(&relative).unwrap_or_default();
        let Some(name) = folded.file_name().map(OsStr::to_owned) else {
            return Err(FsError::NoName {
                path: requested.to_owned(),
            });
        };
        let parent_path = folded.parent().unwrap_or(Path::new(""));
        let parent = self.make_dirs(requested, parent_path)?;
        if on_procfs(&parent) {
            return Err(FsError::Procfs {
                path: requested.to_owned(),
            });
        }
        // An existing file keeps its permissions; a new one gets 0644 less
        // the umask, as any editor would make it.
        let existing =
            match rustix::fs::statat(&parent, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(stat) => {
                    let kind = rustix::fs::FileType::from_raw_mode(stat.st_mode);
                    match kind {
                        rustix::fs::FileType::RegularFile => Some(stat.st_mode & 0o7777),
                        rustix::fs::FileType::Symlink => None,
                        rustix::fs::FileType::Directory => {
                            return Err(FsError::NotRegular {
                                path: requested.to_owned(),
                                kind: "a directory",
                                wanted: "a regular file",
                            });
                        }
                        _ => {
                            return Err(FsError::NotRegular {
                                path: requested.to_owned(),
                                kind: "a special file",
                                wanted: "a regular file",
                            });
                        }
                    }
                }
                Err(Errno::NOENT) => None,
                Err(e) => return Err(FsError::io("write", requested, e)),
            };
        let temp = format!(
            ".{}.harness-{}-{}",
            name.to_string_lossy(),
            std::process::id(),
            TEMP.fetch_add(1, Ordering::Relaxed)
        );
        let fd = rustix::fs::openat(
            &parent,
            temp.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )
        .map_err(|e| FsError::io("write", requested, e))?;
        let mut file = std::fs::File::from(fd);
        let written = file.write_all(bytes).and_then(|()| match existing {
            Some(mode) => file.set_permissions(std::fs::Permissions::from_mode(mode)),
            None => Ok(()),
        });
        let renamed = written
            .map_err(|e| FsError::io("write", requested, e))
            .and_then(|()| {
                rustix::fs::renameat(&parent, temp.as_str(), &parent, name.as_os_str())
                    .map_err(|e| FsError::io("write", requested, e))
            });
        if renamed.is_err() {
            let _ = rustix::fs::unlinkat(&parent, temp.as_str(), AtFlags::empty());
        }
        renamed
    }

    /// Opens (creating what is missing) the directory `relative` under the
    /// root, by the same walk as reads.
    fn make_dirs(&self, shown: &str, relative: &Path) -> Result<OwnedFd, FsError> {
        let mut done = PathBuf::new();
        for c in relative.components() {
            done.push(c);
            match self.walk(shown, &done, Want::Dir) {
                Ok(_) => {}
                Err(FsError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound =>
                {
                    let parent =
                        self.walk(shown, done.parent().unwrap_or(Path::new("")), Want::Dir)?;
                    let name = done.file_name().unwrap_or_default();
                    match rustix::fs::mkdirat(&parent, name, Mode::from_raw_mode(0o755)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => return Err(FsError::io("create the directory of", shown, e)),
                    }
                }
                Err(e) => return Err(e),
            }
        }
        self.walk(shown, relative, Want::Dir)
    }
}

/// A policy for a file tool whose path is in the argument `field`: calls
/// whose path stays inside `root` by its spelling run; others are asked
/// about, and "always allow" remembers the exact path
/// (`read_file:/etc/hosts`). Use it with a root that
/// [allows outside paths](Root::allow_outside).
pub fn path_policy(root: &Root, tool: &str, field: &str) -> Policy {
    let (judge_root, field_judge) = (root.clone(), field.to_owned());
    let (tool, field_key) = (tool.to_owned(), field.to_owned());
    Policy::when(
        move |args: &Value| match args.get(&field_judge).and_then(Value::as_str) {
            Some(path) if judge_root.is_inside(path) => Verdict::Allow,
            _ => Verdict::Ask,
        },
    )
    .remember_by(move |args: &Value| {
        format!(
            "{tool}:{}",
            args.get(&field_key).and_then(Value::as_str).unwrap_or("")
        )
    })
}

/// The arguments of the file tools.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct PathArgs {
    /// A path relative to the working directory.
    pub path: String,
}

/// The arguments of [`WriteFile`].
#[derive(Debug, Deserialize, JsonSchema)]
pub struct WriteArgs {
    /// A path relative to the working directory.
    pub path: String,
    /// The file's whole new content.
    pub content: String,
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, FsError> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| format!("the file operation did not finish: {e}"))?
        .map_err(|e| e.to_string())
}

/// The `read_file` tool: a text file under a [`Root`], at most a window of
/// it, with a line saying when it was cut.
#[derive(Clone, Debug)]
pub struct ReadFile {
    root: Root,
    window: Window,
}

impl ReadFile {
    /// Reads files under `root`, at most `window` of each.
    pub fn new(root: Root, window: Window) -> Self {
        Self { root, window }
    }
}

#[async_trait::async_trait]
impl Tool for ReadFile {
    type Args = PathArgs;
    type Output = String;
    type Error = String;
    fn name(&self) -> &str {
        "read_file"
    }
    fn description(&self) -> &str {
        match self.window {
            Window::Head(_) => "Reads a text file (its beginning, if it is long).",
            Window::Tail(_) => "Reads a text file (its end, if it is long).",
        }
    }
    async fn call(&self, args: PathArgs) -> Result<String, String> {
        let (root, window) = (self.root.clone(), self.window);
        let read = blocking(move || root.read(&args.path, window)).await?;
        Ok(if read.truncated {
            match window {
                Window::Head(n) => {
                    format!("{}\n[cut: the first {n} of {} bytes]", read.text, read.size)
                }
                Window::Tail(n) => {
                    format!("[cut: the last {n} of {} bytes]\n{}", read.size, read.text)
                }
            }
        } else {
            read.text
        })
    }
}

/// The `list_dir` tool: a directory under a [`Root`], one entry per line,
/// directories ending with `/`.
#[derive(Clone, Debug)]
pub struct ListDir {
    root: Root,
}

impl ListDir {
    /// Lists directories under `root`.
    pub fn new(root: Root) -> Self {
        Self { root }
    }
}

#[async_trait::async_trait]
impl Tool for ListDir {
    type Args = PathArgs;
    type Output = String;
    type Error = String;
    fn name(&self) -> &str {
        "list_dir"
    }
    fn description(&self) -> &str {
        "Lists a directory: one entry per line, directories ending with /."
    }
    async fn call(&self, args: PathArgs) -> Result<String, String> {
        let root = self.root.clone();
        let (entries, more) = blocking(move || root.list(&args.path)).await?;
        let mut lines: Vec<String> = entries
            .into_iter()
            .map(|e| {
                if e.is_dir {
                    format!("{}/", e.name)
                } else {
                    e.name
                }
            })
            .collect();
        if more > 0 {
            lines.push(format!("[{more} more entries not shown]"));
        }
        Ok(lines.join("\n"))
    }
}

/// The `write_file` tool: replaces a file under a [`Root`] (never outside
/// it), creating its directories.
#[derive(Clone, Debug)]
pub struct WriteFile {
    root: Root,
}

impl WriteFile {
    /// Writes files under `root`.
    pub fn new(root: Root) -> Self {
        Self { root }
    }
}

#[async_trait::async_trait]
impl Tool for WriteFile {
    type Args = WriteArgs;
    type Output = String;
    type Error = String;
    fn name(&self) -> &str {
        "write_file"
    }
    fn description(&self) -> &str {
        "Writes a file (creating its directories), replacing its content."
    }
    async fn call(&self, args: WriteArgs) -> Result<String, String> {
        let root = self.root.clone();
        let len = args.content.len();
        let path = args.path.clone();
        blocking(move || root.write(&args.path, args.content.as_bytes())).await?;
        Ok(format!("wrote {len} bytes to {path}"))
    }
}
