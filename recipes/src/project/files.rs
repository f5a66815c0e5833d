//! The project's files in the working directory: the ledger and the
//! decision memory (committed), and the progress log (beside them, not
//! committed: an entry names the commit it describes, so it is written
//! after that commit). Every write replaces a file atomically.

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

/// A JSON list file; empty if it does not exist.
pub(crate) fn read_list<T: DeserializeOwned>(file: &Path) -> Result<Vec<T>, FileError> {
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(FileError::Read {
                path: file.to_owned(),
                source,
            });
        }
    };
    serde_json::from_str(&text).map_err(|e| FileError::Malformed {
        path: file.to_owned(),
        reason: e.to_string(),
    })
}

/// Replaces `file` with `value` as JSON, atomically and durably.
pub(crate) fn write_json<T: Serialize>(file: &Path, value: &T) -> Result<(), FileError> {
    if let Some(parent) = file.parent() {
        std::fs::create_dir_all(parent).map_err(|source| FileError::Read {
            path: parent.to_owned(),
            source,
        })?;
    }
    let text = serde_json::to_string_pretty(value).map_err(|e| FileError::Malformed {
        path: file.to_owned(),
        reason: e.to_string(),
    })? + "\n";
    write_atomic(file, text.as_bytes(), Sync::FileAndDir)?;
    Ok(())
}

/// Replaces `file` with `text`, atomically and durably.
pub(crate) fn write_text(file: &Path, text: &str) -> Result<(), FileError> {
    if let Some(parent) = file.parent() {
        std::fs::create_dir_all(parent).map_err(|source| FileError::Read {
            path: parent.to_owned(),
            source,
        })?;
    }
    write_atomic(file, text.as_bytes(), Sync::FileAndDir)?;
    Ok(())
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
