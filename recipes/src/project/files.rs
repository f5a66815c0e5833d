//! The project's files in the working directory: the ledger and the
//! decision memory (committed), and the progress log (beside them, not
//! committed: an entry names the commit it describes, so it is written
//! after that commit). Every write replaces a file atomically; one in
//! `.harness/` is made through a handle on that directory, opened without
//! following a link, so that a command of the model's that swaps the
//! directory for a link meanwhile cannot send it out of the project.

use harness::durable::{Sync, WriteError, write_atomic};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The ledger, relative to the working directory (committed).
pub const LEDGER_PATH: &str = ".harness/ledger.json";
/// The decision memory, relative to the working directory (committed).
pub const DECISIONS_PATH: &str = ".harness/decisions.json";
/// The progress log, relative to the working directory (not committed).
pub const PROGRESS_PATH: &str = ".harness/progress.json";

/// The lines the initializer puts in `.gitignore`.
pub(crate) const GITIGNORE: &str = "/.harness/progress.json\n/.harness/store/\n";

/// A project file that cannot be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileError {
    /// It cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// It cannot be removed.
    #[error("cannot remove {}: {source}", path.display())]
    Remove {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// It is not what it should hold.
    #[error("{} is not valid: {reason}", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// The parser's message, with line and column.
        reason: String,
    },
    /// It cannot be replaced.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// One of the agent's own files under `.harness/` (or that directory)
    /// is not one it uses: not a regular file (a FIFO, a device, a link),
    /// too large, or not valid. Nothing is read from it or written through
    /// it; the project goes on once it is repaired or removed.
    #[error("{} cannot be used: {reason}; to go on, {remedy}", path.display())]
    Unusable {
        /// The file (or directory).
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
        /// What a person does to go on.
        remedy: String,
    },
}

/// The most bytes one of the agent's own files may hold.
pub(crate) const MAX_AGENT_FILE: u64 = 16 << 20;

/// The directory of the agent's own files, relative to the working
/// directory.
const AGENT_DIR: &str = ".harness";

/// What a person does to go on when `file` cannot be used.
fn remedy(file: &Path) -> String {
    let shown = file.display();
    if file.ends_with(PROGRESS_PATH) {
        format!(
            "remove {shown} or repair it (it is not committed: removed, the progress log starts anew; \
             what each session did is in the project branch's commits)"
        )
    } else if file.ends_with(LEDGER_PATH) || file.ends_with(DECISIONS_PATH) {
        let relative = if file.ends_with(LEDGER_PATH) {
            LEDGER_PATH
        } else {
            DECISIONS_PATH
        };
        format!("restore it from the last commit (`git checkout HEAD -- {relative}`)")
    } else {
        format!("make {shown} a directory of the project (not a link), holding the agent's files")
    }
}

fn unusable(path: &Path, reason: impl Into<String>) -> FileError {
    FileError::Unusable {
        path: path.to_owned(),
        reason: reason.into(),
        remedy: remedy(path),
    }
}

/// Refuses a `.harness` directory (the parent of `file`, if that is it)
/// that is a link or not a directory: the agent's files are never read or
/// written through it, out of the project. `Ok(false)` if it is absent.
fn check_agent_dir(file: &Path) -> Result<bool, FileError> {
    let Some(parent) = file.parent().filter(|p| p.ends_with(AGENT_DIR)) else {
        return Ok(true);
    };
    match std::fs::symlink_metadata(parent) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(FileError::Read {
            path: parent.to_owned(),
            source,
        }),
        Ok(meta) if meta.file_type().is_symlink() => Err(unusable(parent, "it is a symbolic link")),
        Ok(meta) if !meta.is_dir() => Err(unusable(parent, "it is not a directory")),
        Ok(_) => Ok(true),
    }
}

/// The text of one of the agent's own files, `None` if it does not exist:
/// read only if it is a regular file (never a FIFO, which is not waited
/// on, a device, or a link, in `.harness/` or as `.harness/` itself), of at
/// most [`MAX_AGENT_FILE`] bytes, in UTF-8.
pub(crate) fn read_agent_file(file: &Path) -> Result<Option<String>, FileError> {
    use std::io::Read;
    if !check_agent_dir(file)? {
        return Ok(None);
    }
    let read_error = |source| FileError::Read {
        path: file.to_owned(),
        source,
    };
    // Looked at before it is opened: a device or FIFO is never opened.
    match std::fs::symlink_metadata(file) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(read_error(e)),
        Ok(meta) if meta.file_type().is_symlink() => {
            return Err(unusable(file, "it is a symbolic link"));
        }
        Ok(meta) if !meta.is_file() => {
            return Err(unusable(
                file,
                "it is not a regular file (a FIFO, a device or a directory)",
            ));
        }
        Ok(_) => {}
    }
    let Some(opened) = open_regular(file).map_err(read_error)? else {
        return Err(unusable(file, "it is not a regular file, or is a link"));
    };
    let mut bytes = Vec::new();
    opened
        .take(MAX_AGENT_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() as u64 > MAX_AGENT_FILE {
        return Err(unusable(
            file,
            format!("it holds more than {MAX_AGENT_FILE} bytes"),
        ));
    }
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|e| unusable(file, format!("it is not UTF-8 text: {e}")))
}

/// `file` opened for reading if it is a regular file (`None` if it is
/// not, or is a link), without waiting for a FIFO's writer and without
/// following a link, in its last component or in `.harness/` before it.
#[cfg(unix)]
fn open_regular(file: &Path) -> std::io::Result<Option<std::fs::File>> {
    use rustix::fs::{CWD, FileType, Mode, OFlags};
    let flags =
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY;
    let (Some(parent), Some(name)) = (file.parent(), file.file_name()) else {
        return Ok(None);
    };
    let parent = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    let parent_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let parent = if parent.ends_with(AGENT_DIR) {
        rustix::fs::open(parent, parent_flags | OFlags::NOFOLLOW, Mode::empty())
    } else {
        rustix::fs::openat(CWD, parent, parent_flags, Mode::empty())
    };
    let fd = match parent.and_then(|dir| rustix::fs::openat(&dir, name, flags, Mode::empty())) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let stat = rustix::fs::fstat(&fd)?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Ok(None);
    }
    Ok(Some(std::fs::File::from(fd)))
}

/// `file` opened for reading if it is a regular file (`None` otherwise).
#[cfg(not(unix))]
fn open_regular(file: &Path) -> std::io::Result<Option<std::fs::File>> {
    if !std::fs::symlink_metadata(file)?.is_file() {
        return Ok(None);
    }
    std::fs::File::open(file).map(Some)
}

/// One entry of the progress log: what a session (or the initializer, as
/// session 0) did, how it went, and the commit it made.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ProgressEntry {
    /// The session's number; 0 for the initializer, and for the project's
    /// own events (pause, revert).
    pub session: u32,
    /// What was done.
    pub action: String,
    /// How it went.
    pub outcome: String,
    /// The commit it made, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
}

/// One decision a session made, with its outcome: fed back into later
/// sessions' prompts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Decision {
    /// The session.
    pub session: u32,
    /// The feature it worked on.
    pub feature: String,
    /// The situation.
    pub context: String,
    /// What it decided.
    pub decision: String,
    /// Why.
    pub reasoning: String,
    /// How it turned out (the feature's status after verification).
    pub outcome: String,
    /// The share of verification steps that passed, 0 to 1.
    pub score: f32,
    /// What later sessions should learn from it.
    pub lesson: String,
}

/// A commit id shortened for people: its first 10 characters (whatever
/// a file that a model may have edited says it is).
pub(crate) fn short(id: &str) -> &str {
    id.char_indices().nth(10).map_or(id, |(i, _)| &id[..i])
}

pub(crate) fn path(dir: &Path, relative: &str) -> PathBuf {
    dir.join(relative)
}

/// A JSON list file of the agent's (see [`read_agent_file`]); empty if
/// it does not exist.
pub(crate) fn read_list<T: DeserializeOwned>(file: &Path) -> Result<Vec<T>, FileError> {
    let Some(text) = read_agent_file(file)? else {
        return Ok(Vec::new());
    };
    serde_json::from_str(&text).map_err(|e| unusable(file, format!("it is not valid: {e}")))
}

/// Makes `file`'s directory if it is not there; a `.harness/` that is a
/// link (out of the project, say) or not a directory is refused, before
/// and after.
fn make_parent(file: &Path) -> Result<(), FileError> {
    check_agent_dir(file)?;
    if let Some(parent) = file.parent() {
        std::fs::create_dir_all(parent).map_err(|source| FileError::Read {
            path: parent.to_owned(),
            source,
        })?;
    }
    check_agent_dir(file)?;
    Ok(())
}

/// Replaces `file` with `value` as JSON, atomically and durably; every
/// string in it [redacted](harness::secrets) of the process's secrets (the
/// progress log quotes verification output, the decisions a model's words).
pub(crate) fn write_json<T: Serialize>(file: &Path, value: &T) -> Result<(), FileError> {
    let malformed = |e: serde_json::Error| FileError::Malformed {
        path: file.to_owned(),
        reason: e.to_string(),
    };
    let mut text = serde_json::to_string_pretty(value).map_err(malformed)?;
    // Redacted as JSON, string by string, so that the file stays valid
    // whatever a secret holds; only when one is there.
    if harness::secrets::contains_secret(&text) {
        let mut json = serde_json::to_value(value).map_err(malformed)?;
        harness::secrets::redact_json(&mut json);
        text = serde_json::to_string_pretty(&json).map_err(malformed)?;
    }
    text.push('\n');
    write_file(file, text.as_bytes())
}

/// Replaces `file` with `text`, atomically and durably.
pub(crate) fn write_text(file: &Path, text: &str) -> Result<(), FileError> {
    write_file(file, text.as_bytes())
}

/// Replaces `file` with `bytes` as [`write_atomic`] does; one of the
/// agent's files (in `.harness/`) is written inside the directory opened
/// once, without following a link, whatever its path becomes meanwhile.
#[cfg(unix)]
fn write_file(file: &Path, bytes: &[u8]) -> Result<(), FileError> {
    let (Some(dir), Some(name)) = (
        file.parent().filter(|p| p.ends_with(AGENT_DIR)),
        file.file_name(),
    ) else {
        make_parent(file)?;
        write_atomic(file, bytes, Sync::FileAndDir)?;
        return Ok(());
    };
    let opened = open_agent_dir(dir)?;
    meanwhile(Moment::HarnessOpened);
    let opened = std::fs::File::from(opened);
    harness::durable::write_atomic_in(&opened, dir, name, bytes, Sync::FileAndDir, false)?;
    Ok(())
}

/// Replaces `file` with `bytes` as [`write_atomic`] does.
#[cfg(not(unix))]
fn write_file(file: &Path, bytes: &[u8]) -> Result<(), FileError> {
    make_parent(file)?;
    write_atomic(file, bytes, Sync::FileAndDir)?;
    Ok(())
}

/// The `.harness` directory `dir`, made if it is missing (with the
/// project's directory above it, which is the user's and may be reached
/// through links), and opened without following a link: one that is a
/// link or not a directory is refused.
#[cfg(unix)]
fn open_agent_dir(dir: &Path) -> Result<rustix::fd::OwnedFd, FileError> {
    use rustix::fs::{CWD, Mode, OFlags};
    use rustix::io::Errno;
    let failed = |source: Errno| FileError::Read {
        path: dir.to_owned(),
        source: source.into(),
    };
    if let Some(root) = dir.parent().filter(|r| !r.as_os_str().is_empty()) {
        std::fs::create_dir_all(root).map_err(|source| FileError::Read {
            path: root.to_owned(),
            source,
        })?;
    }
    // mkdir never follows a link in its last component: a link there is
    // left alone (EEXIST) and refused when opened.
    match rustix::fs::mkdirat(CWD, dir, Mode::from_raw_mode(0o777)) {
        Ok(()) | Err(Errno::EXIST) => {}
        Err(e) => return Err(failed(e)),
    }
    meanwhile(Moment::HarnessMade);
    let flags =
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
    match rustix::fs::openat(CWD, dir, flags, Mode::empty()) {
        Ok(fd) => Ok(fd),
        Err(Errno::LOOP | Errno::NOTDIR) => {
            let link = std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink());
            Err(unusable(
                dir,
                if link {
                    "it is a symbolic link"
                } else {
                    "it is not a directory"
                },
            ))
        }
        Err(e) => Err(failed(e)),
    }
}

/// A moment of a write at which a model's command, running meanwhile,
/// may change the project's files; tests make one happen there.
#[cfg(unix)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Moment {
    /// `.harness` made (or found), not yet opened.
    HarnessMade,
    /// `.harness` opened, nothing written in it yet.
    HarnessOpened,
    /// The user's ignore file looked at, not yet opened.
    GitignoreLooked,
}

/// What a test makes a command do, and when.
#[cfg(all(unix, test))]
type Meanwhile = Option<(Moment, Box<dyn FnOnce()>)>;

#[cfg(all(unix, test))]
thread_local! {
    static MEANWHILE: std::cell::RefCell<Meanwhile> = const { std::cell::RefCell::new(None) };
}

/// Runs, once, what a test set to happen at `moment` on this thread.
#[cfg(all(unix, test))]
fn meanwhile(moment: Moment) {
    let due = MEANWHILE.with(|set| {
        let mut set = set.borrow_mut();
        match set.take() {
            Some((at, change)) if at == moment => Some(change),
            other => {
                *set = other;
                None
            }
        }
    });
    if let Some(change) = due {
        change();
    }
}

#[cfg(all(unix, not(test)))]
fn meanwhile(_: Moment) {}

/// Adds `lines` to the user's ignore file `file` unless they are there:
/// the file's own bytes are kept as they are (whatever their encoding),
/// and one that cannot be read, or is a link (whose target is not the
/// project's to replace), is a typed error, never an empty file replaced.
pub(crate) fn add_to_gitignore(file: &Path, lines: &str) -> Result<(), FileError> {
    let unusable = |reason: &str| FileError::Unusable {
        path: file.to_owned(),
        reason: reason.to_owned(),
        remedy: format!("add these lines to it yourself: {}", lines.trim_end()),
    };
    let mut bytes = match std::fs::symlink_metadata(file) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(source) => {
            return Err(FileError::Read {
                path: file.to_owned(),
                source,
            });
        }
        Ok(meta) if meta.file_type().is_symlink() => return Err(unusable("it is a link")),
        Ok(meta) if !meta.is_file() => return Err(unusable("it is not a regular file")),
        Ok(_) => read_regular(file)
            .map_err(|source| FileError::Read {
                path: file.to_owned(),
                source,
            })?
            .ok_or_else(|| unusable("it is not a regular file, or is a link"))?,
    };
    if bytes
        .windows(lines.len().max(1))
        .any(|w| w == lines.as_bytes())
    {
        return Ok(());
    }
    if !bytes.is_empty() && !bytes.ends_with(b"\n") {
        bytes.push(b'\n');
    }
    bytes.extend_from_slice(lines.as_bytes());
    write_atomic(file, &bytes, Sync::FileAndDir)?;
    Ok(())
}

/// The bytes of `file` if it is a regular file, `None` if it is not or is
/// a link (which the caller looked for, but which a model's command may
/// have put there since: it is not followed, nor a FIFO waited on).
fn read_regular(file: &Path) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::Read;
    #[cfg(unix)]
    meanwhile(Moment::GitignoreLooked);
    let Some(mut opened) = open_regular(file)? else {
        return Ok(None);
    };
    let mut bytes = Vec::new();
    opened.read_to_end(&mut bytes)?;
    Ok(Some(bytes))
}

/// The text of the ledger file `file` (see [`read_agent_file`]); its
/// absence is an error.
pub(crate) fn read_ledger_file(file: &Path) -> Result<String, FileError> {
    read_agent_file(file)?.ok_or_else(|| FileError::Read {
        path: file.to_owned(),
        source: std::io::ErrorKind::NotFound.into(),
    })
}

/// The progress log of the project in `dir`.
pub fn read_progress(dir: &Path) -> Result<Vec<ProgressEntry>, FileError> {
    read_list(&path(dir, PROGRESS_PATH))
}

/// Appends `entry` to the progress log of the project in `dir`.
pub(crate) fn append_progress(dir: &Path, entry: ProgressEntry) -> Result<(), FileError> {
    let file = path(dir, PROGRESS_PATH);
    let mut log: Vec<ProgressEntry> = read_list(&file)?;
    log.push(entry);
    write_json(&file, &log)
}

/// The decision memory of the project in `dir`.
pub fn read_decisions(dir: &Path) -> Result<Vec<Decision>, FileError> {
    read_list(&path(dir, DECISIONS_PATH))
}

#[cfg(test)]
mod short_tests {
    use super::short;

    #[test]
    fn a_commit_id_is_cut_at_ten_characters_whatever_its_bytes() {
        assert_eq!(short("0123456789abcdef"), "0123456789");
        assert_eq!(short("abc"), "abc");
        assert_eq!(short(""), "");
        // What a model's edit of the progress log could hold: cutting at
        // byte 10 would split a character (and panic).
        assert_eq!(short("aéééééééééé"), "aééééééééé");
        assert_eq!(short("🦀🦀🦀🦀🦀🦀🦀🦀🦀🦀🦀"), "🦀🦀🦀🦀🦀🦀🦀🦀🦀🦀");
    }
}

#[cfg(all(test, unix))]
mod agent_file_tests {
    #![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

    use super::*;
    use std::time::Duration;

    /// The user's ignore file keeps its own bytes, whatever they are, and
    /// gains the lines once; one that is a link or not a file is refused
    /// and left as it is.
    #[test]
    fn the_users_gitignore_gains_the_lines_and_keeps_its_own() {
        let lines = ".harness/progress.json\n";
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(".gitignore");
        for (before, after) in [
            (None, lines.as_bytes().to_vec()),
            (
                Some(&b"# caf\xe9\n*.o"[..]),
                b"# caf\xe9\n*.o\n.harness/progress.json\n".to_vec(),
            ),
            (
                Some(b"target/\n"),
                b"target/\n.harness/progress.json\n".to_vec(),
            ),
            (
                Some(b"\xff\xfe\x00x\n"),
                b"\xff\xfe\x00x\n.harness/progress.json\n".to_vec(),
            ),
            (
                Some(b"a\n.harness/progress.json\nb\n"),
                b"a\n.harness/progress.json\nb\n".to_vec(),
            ),
        ] {
            let _ = std::fs::remove_file(&file);
            if let Some(bytes) = before {
                std::fs::write(&file, bytes).unwrap();
            }
            add_to_gitignore(&file, lines).unwrap();
            assert_eq!(std::fs::read(&file).unwrap(), after, "{before:?}");
        }
        // A link (its target is not the project's) and a directory.
        let target = dir.path().join("shared-ignore");
        std::fs::write(&target, b"mine\n").unwrap();
        std::fs::remove_file(&file).unwrap();
        std::os::unix::fs::symlink(&target, &file).unwrap();
        let error = add_to_gitignore(&file, lines).unwrap_err();
        assert!(matches!(error, FileError::Unusable { .. }), "{error}");
        assert!(error.to_string().contains("add these lines"), "{error}");
        assert_eq!(std::fs::read(&target).unwrap(), b"mine\n");
        std::fs::remove_file(&file).unwrap();
        std::fs::create_dir(&file).unwrap();
        assert!(matches!(
            add_to_gitignore(&file, lines),
            Err(FileError::Unusable { .. })
        ));
    }

    /// `read` on another thread: its result, or `None` if it still waits
    /// after 5 s.
    pub(super) fn within<T: Send + 'static>(
        read: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        let (send, receive) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = send.send(read());
        });
        receive.recv_timeout(Duration::from_secs(5)).ok()
    }

    pub(super) fn mkfifo(path: &Path) {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            path,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
    }

    /// What a model's commands can leave in place of the agent's files: each
    /// refused at once with an error naming the file and what to do.
    #[test]
    fn the_agents_files_are_read_only_if_regular_bounded_and_inside() {
        let outside = tempfile::tempdir().unwrap();
        let secret = outside.path().join("secret.json");
        std::fs::write(&secret, "[]").unwrap();
        for relative in [PROGRESS_PATH, DECISIONS_PATH, LEDGER_PATH] {
            for (case, reason) in [
                ("fifo", "not a regular file"),
                ("link outside", "symbolic link"),
                ("directory", "not a regular file"),
                ("too large", "more than"),
                ("not utf-8", "not UTF-8"),
            ] {
                let dir = tempfile::tempdir().unwrap();
                let file = path(dir.path(), relative);
                std::fs::create_dir_all(file.parent().unwrap()).unwrap();
                match case {
                    "fifo" => mkfifo(&file),
                    "link outside" => std::os::unix::fs::symlink(&secret, &file).unwrap(),
                    "directory" => std::fs::create_dir(&file).unwrap(),
                    "too large" => {
                        let f = std::fs::File::create(&file).unwrap();
                        f.set_len(MAX_AGENT_FILE + 1).unwrap();
                    }
                    _ => std::fs::write(&file, b"[\"\xff\"]").unwrap(),
                }
                let read = file.clone();
                let got = within(move || read_agent_file(&read)).expect("waited on the file");
                let e = got.unwrap_err();
                let text = e.to_string();
                assert!(
                    matches!(&e, FileError::Unusable { path, .. } if *path == file),
                    "{relative} {case}: {text}"
                );
                assert!(text.contains(reason), "{relative} {case}: {text}");
                assert!(text.contains("to go on"), "{relative} {case}: {text}");
            }
        }
    }

    /// The same through the public readers, and a progress log that is not
    /// valid JSON: an error that says what to do.
    #[test]
    fn the_public_readers_refuse_a_fifo_and_say_what_to_do_with_a_broken_log() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".harness")).unwrap();
        mkfifo(&path(dir.path(), PROGRESS_PATH));
        let d = dir.path().to_owned();
        let got = within(move || read_progress(&d)).expect("waited on the FIFO");
        assert!(matches!(got, Err(FileError::Unusable { .. })), "{got:?}");
        mkfifo(&path(dir.path(), LEDGER_PATH));
        let d = dir.path().to_owned();
        let got = within(move || crate::project::read_ledger(d)).expect("waited on the FIFO");
        assert!(
            got.unwrap_err()
                .to_string()
                .contains("ledger.json cannot be used")
        );

        std::fs::remove_file(path(dir.path(), PROGRESS_PATH)).unwrap();
        for broken in ["", "[{\"session\": 1}", "{}", "[1, 2]"] {
            std::fs::write(path(dir.path(), PROGRESS_PATH), broken).unwrap();
            let e = read_progress(dir.path()).unwrap_err().to_string();
            assert!(
                e.contains("progress.json cannot be used"),
                "{broken:?}: {e}"
            );
            assert!(e.contains("remove"), "{broken:?}: {e}");
        }
        // Absent: an empty log.
        std::fs::remove_file(path(dir.path(), PROGRESS_PATH)).unwrap();
        assert!(read_progress(dir.path()).unwrap().is_empty());
    }

    /// A `.harness` that is a link out of the project: nothing is read
    /// through it, nor written.
    #[test]
    fn a_linked_harness_directory_is_neither_read_nor_written_through() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("progress.json"), "[]").unwrap();
        std::fs::write(outside.path().join("decisions.json"), "[]").unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join(".harness")).unwrap();
        assert!(matches!(
            read_progress(dir.path()),
            Err(FileError::Unusable { .. })
        ));
        assert!(matches!(
            read_decisions(dir.path()),
            Err(FileError::Unusable { .. })
        ));
        let entry = ProgressEntry {
            session: 1,
            action: "a".into(),
            outcome: "b".into(),
            commit: None,
        };
        assert!(append_progress(dir.path(), entry).is_err());
        let ledger = path(dir.path(), LEDGER_PATH);
        let e = write_text(&ledger, "{}").unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        assert!(write_json(&path(dir.path(), DECISIONS_PATH), &Vec::<Decision>::new()).is_err());
        assert_eq!(
            std::fs::read_to_string(outside.path().join("progress.json")).unwrap(),
            "[]"
        );
        assert!(!outside.path().join("ledger.json").exists());
        // A file in its place: refused too.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(".harness"), "").unwrap();
        assert!(matches!(
            read_progress(dir.path()),
            Err(FileError::Unusable { .. })
        ));
        // A real directory: read and written.
        let dir = tempfile::tempdir().unwrap();
        write_text(&path(dir.path(), LEDGER_PATH), "{}").unwrap();
        assert_eq!(
            read_agent_file(&path(dir.path(), LEDGER_PATH))
                .unwrap()
                .as_deref(),
            Some("{}")
        );
    }

    /// A link to an endless device: refused, not read (not run against the
    /// old reader, which fills memory).
    #[test]
    fn a_link_to_an_endless_device_is_refused() {
        for target in ["/dev/zero", "/dev/urandom", "/proc/self/environ"] {
            let dir = tempfile::tempdir().unwrap();
            std::fs::create_dir(dir.path().join(".harness")).unwrap();
            std::os::unix::fs::symlink(target, path(dir.path(), PROGRESS_PATH)).unwrap();
            let e = read_progress(dir.path()).unwrap_err().to_string();
            assert!(e.contains("symbolic link"), "{target}: {e}");
        }
    }
}

#[cfg(all(test, unix))]
mod agent_write_tests {
    #![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

    use super::agent_file_tests::{mkfifo, within};
    use super::*;

    /// Makes `change` happen at `moment` of the next write on this thread,
    /// as a model's command running meanwhile would.
    fn at(moment: Moment, change: impl FnOnce() + 'static) {
        MEANWHILE.with(|set| *set.borrow_mut() = Some((moment, Box::new(change))));
    }

    /// `act` on a thread of its own with `change` made to happen at
    /// `moment`: its result, or `None` if it still waits (on a FIFO) after
    /// 5 s.
    fn racing<T: Send + 'static>(
        moment: Moment,
        change: impl FnOnce() + Send + 'static,
        act: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        within(move || {
            at(moment, change);
            act()
        })
    }

    fn listing(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// A project whose `.harness` holds a ledger, and a directory outside
    /// it holding a file of the user's.
    fn project_and_outside() -> (tempfile::TempDir, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        write_text(&path(dir.path(), LEDGER_PATH), "old").unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("notes"), "mine").unwrap();
        (dir, outside)
    }

    /// What a command does to swap `.harness` for a link out of the
    /// project: the real directory moved aside, a link in its place.
    fn swap_for_link(dir: &Path, outside: &Path) -> impl FnOnce() + 'static {
        let (dir, outside) = (dir.to_owned(), outside.to_owned());
        move || {
            std::fs::rename(dir.join(".harness"), dir.join("moved")).unwrap();
            std::os::unix::fs::symlink(&outside, dir.join(".harness")).unwrap();
        }
    }

    /// `.harness` swapped after it was looked at but before it is opened:
    /// the write is refused with a typed error, nothing lands outside and
    /// the real directory keeps its file.
    #[test]
    fn a_harness_swapped_for_a_link_before_the_write_is_refused_and_nothing_lands_outside() {
        let (dir, outside) = project_and_outside();
        at(
            Moment::HarnessMade,
            swap_for_link(dir.path(), outside.path()),
        );
        let error = write_text(&path(dir.path(), LEDGER_PATH), "new").unwrap_err();
        assert!(
            matches!(&error, FileError::Unusable { path, .. } if path.ends_with(".harness")),
            "{error}"
        );
        assert!(error.to_string().contains("symbolic link"), "{error}");
        assert_eq!(listing(outside.path()), ["notes"]);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("moved/ledger.json")).unwrap(),
            "old"
        );
        // The progress log, through its own writer: refused the same way.
        let (dir, outside) = project_and_outside();
        at(
            Moment::HarnessMade,
            swap_for_link(dir.path(), outside.path()),
        );
        let entry = ProgressEntry {
            session: 1,
            action: "a".into(),
            outcome: "b".into(),
            commit: None,
        };
        let error = append_progress(dir.path(), entry).unwrap_err();
        assert!(matches!(error, FileError::Unusable { .. }), "{error}");
        assert_eq!(listing(outside.path()), ["notes"]);
    }

    /// `.harness` replaced by a file (or a FIFO, never waited on) before
    /// it is opened: refused as not a directory, the file left as it is.
    #[test]
    fn a_harness_replaced_by_a_file_or_fifo_before_the_write_is_refused() {
        for fifo in [false, true] {
            let (dir, _outside) = project_and_outside();
            let harness = dir.path().join(".harness");
            let replaced = harness.clone();
            let file = path(dir.path(), DECISIONS_PATH);
            let got = racing(
                Moment::HarnessMade,
                move || {
                    std::fs::rename(&replaced, replaced.with_file_name("moved")).unwrap();
                    if fifo {
                        mkfifo(&replaced);
                    } else {
                        std::fs::write(&replaced, "a file").unwrap();
                    }
                },
                move || write_json(&file, &Vec::<Decision>::new()),
            )
            .expect("waited on the FIFO");
            let error = got.unwrap_err();
            assert!(
                matches!(&error, FileError::Unusable { path, .. } if *path == harness),
                "fifo {fifo}: {error}"
            );
            assert!(
                error.to_string().contains("not a directory"),
                "fifo {fifo}: {error}"
            );
            if !fifo {
                assert_eq!(std::fs::read_to_string(&harness).unwrap(), "a file");
            }
        }
    }

    /// `.harness` swapped for a link once it is open: the write lands in
    /// the real directory (wherever it was moved), whole, with no temporary
    /// file left, and nothing in the link's target.
    #[test]
    fn a_harness_swapped_for_a_link_during_the_write_keeps_it_in_the_real_directory() {
        let (dir, outside) = project_and_outside();
        at(
            Moment::HarnessOpened,
            swap_for_link(dir.path(), outside.path()),
        );
        write_text(&path(dir.path(), LEDGER_PATH), "new").unwrap();
        assert_eq!(listing(outside.path()), ["notes"]);
        assert_eq!(listing(&dir.path().join("moved")), ["ledger.json"]);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("moved/ledger.json")).unwrap(),
            "new"
        );
    }

    /// An ordinary write makes the project's directory and `.harness` if
    /// they are missing, replaces the file by a new one (a reader holding
    /// the old one still reads it whole), with the mode a plain write
    /// gives, and leaves no temporary file.
    #[test]
    fn an_ordinary_write_lands_replaces_atomically_and_leaves_no_temporary() {
        use std::io::Read;
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("new-project");
        let ledger = path(&dir, LEDGER_PATH);
        write_text(&ledger, "old").unwrap();
        let mut held = std::fs::File::open(&ledger).unwrap();
        write_text(&ledger, "new").unwrap();
        write_json(&path(&dir, DECISIONS_PATH), &Vec::<Decision>::new()).unwrap();
        assert_eq!(std::fs::read_to_string(&ledger).unwrap(), "new");
        let mut before = String::new();
        held.read_to_string(&mut before).unwrap();
        assert_eq!(before, "old");
        assert_eq!(
            listing(&dir.join(".harness")),
            ["decisions.json", "ledger.json"]
        );
        assert_eq!(
            read_decisions(&dir).unwrap(),
            Vec::<Decision>::new(),
            "read back"
        );
        let plain = root.path().join("plain");
        std::fs::write(&plain, "").unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&ledger), mode(&plain));
    }

    /// A write that cannot be renamed into place (a directory holds the
    /// name) fails naming the file, and removes its temporary file.
    #[test]
    fn a_failed_write_names_the_file_and_removes_its_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = path(dir.path(), LEDGER_PATH);
        std::fs::create_dir_all(ledger.join("inside")).unwrap();
        let error = write_text(&ledger, "new").unwrap_err();
        assert!(
            matches!(&error, FileError::Write(w) if w.action == "rename into place" && w.path == ledger),
            "{error}"
        );
        assert_eq!(listing(&dir.path().join(".harness")), ["ledger.json"]);
    }

    /// The user's ignore file swapped, after it was looked at, for a link
    /// to a file of theirs outside (or for a FIFO): refused, the outside
    /// file neither copied into the project nor changed, nothing waited on.
    #[test]
    fn a_gitignore_swapped_for_a_link_or_fifo_is_not_read_through() {
        for fifo in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let outside = tempfile::tempdir().unwrap();
            let secret = outside.path().join("secret");
            std::fs::write(&secret, "a secret\n").unwrap();
            let file = dir.path().join(".gitignore");
            std::fs::write(&file, "target/\n").unwrap();
            let (swapped, target, adding) = (file.clone(), secret.clone(), file.clone());
            let got = racing(
                Moment::GitignoreLooked,
                move || {
                    std::fs::remove_file(&swapped).unwrap();
                    if fifo {
                        mkfifo(&swapped);
                    } else {
                        std::os::unix::fs::symlink(&target, &swapped).unwrap();
                    }
                },
                move || add_to_gitignore(&adding, "/.harness/progress.json\n"),
            )
            .expect("waited on the FIFO");
            let error = got.unwrap_err();
            assert!(
                matches!(error, FileError::Unusable { .. }),
                "fifo {fifo}: {error}"
            );
            assert!(error.to_string().contains("add these lines"), "{error}");
            assert_eq!(std::fs::read_to_string(&secret).unwrap(), "a secret\n");
            let meta = std::fs::symlink_metadata(&file).unwrap();
            assert!(
                !meta.is_file(),
                "fifo {fifo}: the swapped name was replaced"
            );
        }
    }
}
