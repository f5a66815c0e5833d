//! `harness studio --store PATH|URL [--memory PATH] [--report FILE]…`: the read-only web
//! studio of [`harness_studio`] on any session store, opened as `harness
//! sessions` opens it, and on long-term memory kept in sled.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use harness::memory::{Memory, MemoryError};
use harness_stores::{ReadOnlyError, SledMemory, SledStore};
use harness_studio::{Studio, StudioError};

use crate::sessions::SessionsError;

/// Arguments of `harness studio`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The store: a sled database directory, a log-store directory, a
    /// file-store directory, or a `postgres://…` or `redis://…` URL (when
    /// built with the `postgres` or `redis` feature). A sled database is
    /// read from a private copy made when the studio starts, a log store
    /// from its log as it was when the studio started; neither changes a
    /// byte of the store, and a damaged one is refused, naming the file and
    /// the offset.
    #[arg(long, value_name = "PATH|URL")]
    store: String,
    /// The PostgreSQL schema holding the sessions (default `harness`).
    #[arg(long, value_name = "NAME")]
    schema: Option<String>,
    /// The Redis key prefix of the sessions (default `harness`).
    #[arg(long, value_name = "NAME")]
    prefix: Option<String>,
    /// Long-term memory to show too: a sled database holding it (a
    /// `SledMemory`'s directory, or a sled store's that keeps memory beside
    /// its sessions; it may be the `--store` directory). Read from a
    /// private copy made when the studio starts, like a sled store: the
    /// database is never changed.
    #[arg(long, value_name = "PATH")]
    memory: Option<PathBuf>,
    /// An eval report to show (a `harness-evals` report file, e.g. the
    /// `evals` example's `evals-report.json`); repeat for several. Each
    /// case links to its run's timeline when the store holds it.
    #[arg(long = "report", value_name = "FILE")]
    reports: Vec<PathBuf>,
    /// The port on 127.0.0.1 (default: any free port).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// How often the page's live view looks at the store, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 500)]
    poll_ms: u64,
}

/// Why `harness studio` stopped.
#[derive(Debug, thiserror::Error)]
enum Error {
    #[error(transparent)]
    Store(#[from] SessionsError),
    #[error(transparent)]
    Studio(#[from] StudioError),
    /// The memory's database cannot be read.
    #[error("memory {}: {source}", path.display())]
    Memory {
        path: PathBuf,
        source: ReadOnlyError,
    },
    /// The database holds no memory, or its memory cannot be opened.
    #[error("memory {}: {why}", path.display())]
    NoMemory { path: PathBuf, why: String },
    /// An eval report cannot be read.
    #[error(transparent)]
    Report(#[from] harness_evals::ReportError),
}

/// The long-term memory in the sled database at `path`, read from a
/// private copy (`SledStore::open_read_only`: the database is only read,
/// and refused when damaged or in use); the store holds the copy and must
/// outlive the memory's use. A database without a `memory` tree is refused
/// rather than shown empty (a wrong path, most likely).
fn open_memory(path: &Path) -> Result<(SledStore, Memory), Error> {
    let copy = SledStore::open_read_only(path).map_err(|source| match source {
        ReadOnlyError::NotAStore { why, .. } => Error::NoMemory {
            path: path.to_path_buf(),
            why: format!("not a sled database holding long-term memory: {why}"),
        },
        source => Error::Memory {
            path: path.to_path_buf(),
            source,
        },
    })?;
    let has_memory = copy
        .db()
        .tree_names()
        .iter()
        // The tree `SledMemory` keeps its records in (its documented layout).
        .any(|name| name.as_ref() == b"memory");
    if !has_memory {
        return Err(Error::NoMemory {
            path: path.to_path_buf(),
            why: "this sled database holds no long-term memory (no `memory` tree): give the \
                  directory a `SledMemory` was opened on"
                .into(),
        });
    }
    let backend = SledMemory::in_db(copy.db()).map_err(|e: MemoryError| Error::NoMemory {
        path: path.to_path_buf(),
        why: e.to_string(),
    })?;
    Ok((copy, Memory::new(backend)))
}

pub(crate) fn run(args: &Args) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            errln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            errln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: &Args) -> Result<(), Error> {
    let store =
        crate::sessions::open(&args.store, args.schema.as_deref(), args.prefix.as_deref()).await?;
    // The copy the memory is read from lives as long as the studio.
    let memory = args.memory.as_deref().map(open_memory).transpose()?;
    let reports = args
        .reports
        .iter()
        .map(harness_evals::Report::load)
        .collect::<Result<Vec<_>, _>>()?;
    let mut studio = Studio::read_only(Arc::from(store))
        .poll_interval(Duration::from_millis(args.poll_ms.max(50)))
        .reports(reports);
    if let Some((_, memory)) = &memory {
        studio = studio.memory(memory.clone());
    }
    let serving = studio
        .bind(SocketAddr::from((Ipv4Addr::LOCALHOST, args.port)))
        .await?;
    outln!("harness studio: {} (read-only)", args.store);
    if let Some(path) = &args.memory {
        outln!("long-term memory: {} (read-only)", path.display());
    }
    for path in &args.reports {
        outln!("eval report: {}", path.display());
    }
    outln!("open {}", serving.url());
    outln!("(the token in the URL is needed; stop with Ctrl-C)");
    serving.wait().await?;
    drop(memory);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use harness::memory::{Namespace, Search};
    use serde_json::json;

    /// A fresh directory under the system's temporary directory.
    fn temp_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("harness-cli-studio-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Every file under `dir` with its bytes.
    fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                out.extend(files(&path));
            } else {
                out.push((path.clone(), std::fs::read(&path).unwrap()));
            }
        }
        out.sort();
        out
    }

    #[test]
    fn memory_is_read_from_a_copy_and_a_path_without_memory_is_refused() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let base = temp_dir("memory");
        let path = base.join("memory");
        runtime.block_on(async {
            let users = Namespace::new(["users", "ada"]).unwrap();
            let written = Memory::new(SledMemory::open(&path).unwrap());
            written
                .put(&users, "language", json!({"value": "Rust"}))
                .await
                .unwrap();
            written
                .put(&users, "editor", json!({"value": "helix"}))
                .await
                .unwrap();

            // In use by the application: refused, naming it.
            let e = open_memory(&path).err().unwrap().to_string();
            assert!(e.starts_with(&format!("memory {}", path.display())), "{e}");
            assert!(e.contains("open in another process"), "{e}");
            drop(written);

            let before = files(&path);
            // sled's background threads let go of the database's lock a
            // moment after the last handle is dropped.
            let mut opened = open_memory(&path);
            for _ in 0..200 {
                if !matches!(
                    &opened,
                    Err(Error::Memory {
                        source: ReadOnlyError::InUse { .. },
                        ..
                    })
                ) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
                opened = open_memory(&path);
            }
            let (copy, memory) = opened.unwrap();
            let hits = memory
                .search(&Search::under(Namespace::root()))
                .await
                .unwrap();
            let keys: Vec<&str> = hits.iter().map(|h| h.item.key.as_str()).collect();
            assert_eq!(keys, ["editor", "language"]);
            drop((copy, memory));
            assert_eq!(files(&path), before, "reading the memory changed it");
        });

        // A sled store of sessions only: no memory there.
        let sessions = base.join("sessions");
        drop(SledStore::open(&sessions).unwrap());
        let e = open_memory(&sessions).err().unwrap().to_string();
        assert!(e.contains("no `memory` tree"), "{e}");
        assert!(e.contains(&sessions.display().to_string()), "{e}");
        // Nothing there, or a file.
        for bad in [base.join("missing"), {
            let f = base.join("file");
            std::fs::write(&f, b"x").unwrap();
            f
        }] {
            let e = open_memory(&bad).err().unwrap().to_string();
            assert!(e.contains(&bad.display().to_string()), "{e}");
            assert!(e.contains("not a sled database"), "{e}");
            assert!(!e.contains("session"), "{e}");
            assert!(
                !bad.join("db").exists(),
                "nothing is created at {}",
                bad.display()
            );
        }
        let _ = std::fs::remove_dir_all(&base);
    }
}
