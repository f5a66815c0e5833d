//! The files a user names on the command line (`harness analyze FILE`,
//! `harness run FILE`, `harness bench-analyze LIST` and the files it lists),
//! read as text: a regular file of at most [`MAX_INPUT_BYTES`], else a
//! typed error naming the path. A FIFO, a device (`/dev/zero`) or a
//! directory is refused before a byte is read: it is opened without
//! waiting on a FIFO's writer, and what was opened is looked at, so
//! reading never waits nor grows without end; never more than the limit
//! is read (a file that grows as it is read, or a `/proc` file whose size
//! says 0, included).

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// The largest file read: 64 MiB. A script, a notebook (outputs and
/// images included) or a list of files is far smaller; more is most likely
/// a wrong path, and would be held in memory whole.
pub(crate) const MAX_INPUT_BYTES: u64 = 64 << 20;

/// Why an input file cannot be read; each names the path.
#[derive(Debug, thiserror::Error)]
pub(crate) enum InputError {
    /// The file system refused (missing, no permission, …).
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The path given.
        path: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },
    /// Not a regular file.
    #[error("cannot read {}: {what}, not a regular file", path.display())]
    NotAFile {
        /// The path given.
        path: PathBuf,
        /// What it is.
        what: &'static str,
    },
    /// Larger than [`MAX_INPUT_BYTES`].
    #[error(
        "cannot read {}: it is larger than the {} MiB harness reads",
        path.display(),
        MAX_INPUT_BYTES >> 20
    )]
    TooLarge {
        /// The path given.
        path: PathBuf,
    },
    /// Not UTF-8 text.
    #[error("cannot read {}: not UTF-8 text ({source})", path.display())]
    NotText {
        /// The path given.
        path: PathBuf,
        /// Where the first bad byte is.
        source: std::string::FromUtf8Error,
    },
}

/// What a file that is not a regular file is.
fn what(kind: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return "a FIFO";
        }
        if kind.is_char_device() || kind.is_block_device() {
            return "a device";
        }
        if kind.is_socket() {
            return "a socket";
        }
    }
    if kind.is_dir() {
        "a directory"
    } else {
        "not a file"
    }
}

/// Opens `path` for reading without waiting: a FIFO opens at once (and is
/// then refused as what it is), never blocking for a writer.
#[cfg(unix)]
fn open(path: &Path) -> io::Result<File> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    Ok(File::from(rustix::fs::open(path, flags, Mode::empty())?))
}

/// Opens `path` for reading, after checking that it is a regular file.
#[cfg(not(unix))]
fn open(path: &Path) -> io::Result<File> {
    if !std::fs::metadata(path)?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    File::open(path)
}

/// The text of the file at `path` (through symbolic links); see the
/// [module docs](self).
pub(crate) fn read_text(path: &Path) -> Result<String, InputError> {
    let io = |source| InputError::Io {
        path: path.to_path_buf(),
        source,
    };
    // Looked at before it is opened: opening a FIFO waits for a writer.
    let checked = |meta: std::fs::Metadata| {
        if !meta.is_file() {
            return Err(InputError::NotAFile {
                path: path.to_path_buf(),
                what: what(meta.file_type()),
            });
        }
        if meta.len() > MAX_INPUT_BYTES {
            return Err(InputError::TooLarge {
                path: path.to_path_buf(),
            });
        }
        Ok(())
    };
    let file = open(path).map_err(io)?;
    // What was opened is looked at before a byte is read.
    checked(file.metadata().map_err(io)?)?;
    let mut bytes = Vec::new();
    file.take(MAX_INPUT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        return Err(InputError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    String::from_utf8(bytes).map_err(|source| InputError::NotText {
        path: path.to_path_buf(),
        source,
    })
}

/// The language a notebook's kernel runs, as its metadata says
/// (`language_info.name`, else `kernelspec.language`); `None` when it says
/// none, or the text is not a JSON object.
pub(crate) fn notebook_language(text: &str) -> Option<String> {
    let notebook: serde_json::Value = serde_json::from_str(text).ok()?;
    let metadata = notebook.get("metadata")?;
    [
        metadata.pointer("/language_info/name"),
        metadata.pointer("/kernelspec/language"),
    ]
    .into_iter()
    .flatten()
    .find_map(|v| v.as_str())
    .map(str::to_owned)
}
