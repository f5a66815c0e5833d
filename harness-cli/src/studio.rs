//! `harness studio --store PATH|URL [--memory PATH|URL [--embed-url URL --embed-model NAME]]
//! [--report FILE]…`: the read-only web studio of [`harness_studio`] on any
//! session store, opened as `harness sessions` opens it, and on long-term
//! memory kept in sled, PostgreSQL or Redis, searchable by meaning when an
//! embedder is given.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use harness::llm::Embedder;
use harness::memory::{IndexConfig, Memory, MemoryError};
use harness_stores::{ReadOnlyError, SledMemory, SledStore};
use harness_studio::{Studio, StudioError};

use crate::sessions::{SessionsError, Shown};

/// Arguments of `harness studio`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The store: a sled database directory, a log-store directory, a
    /// file-store directory, or a `postgres://…`, `redis://…` or
    /// `restate://HOST[:ADMIN_PORT][/OBJECT]` URL (when built with the
    /// `postgres`, `redis` or `restate` feature). A sled database is
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
    /// its sessions; it may be the `--store` directory), read from a
    /// private copy made when the studio starts; or a `postgres://…` URL
    /// (a `PostgresMemory`'s table, which must exist: nothing is created)
    /// or a `redis://…` URL (a `RedisMemory`'s keys), when built with the
    /// `postgres` or `redis` feature. Only read.
    #[arg(long, value_name = "PATH|URL")]
    memory: Option<String>,
    /// The PostgreSQL schema of the memory's table (default `harness`).
    #[arg(long, value_name = "NAME")]
    memory_schema: Option<String>,
    /// The Redis key prefix of the memory (default `harness`).
    #[arg(long, value_name = "NAME")]
    memory_prefix: Option<String>,
    /// An OpenAI-compatible API root (e.g. `http://127.0.0.1:8081/v1`)
    /// embedding the memory's search texts, so that the studio searches it
    /// by meaning; with `--embed-model`. Use the model the memory's items
    /// were embedded with.
    #[arg(long, value_name = "URL")]
    embed_url: Option<String>,
    /// The embedding model at `--embed-url`.
    #[arg(long, value_name = "NAME")]
    embed_model: Option<String>,
    /// The environment variable holding the embedding API's key (default:
    /// `OPENAI_API_KEY` if set; a local server needs none). The key is
    /// never printed.
    #[arg(long, value_name = "VAR")]
    embed_key_env: Option<String>,
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
    /// A memory server cannot be reached or holds no memory.
    #[error("--memory {memory}: {source}")]
    #[cfg_attr(not(any(feature = "postgres", feature = "redis")), allow(dead_code))]
    MemoryServer { memory: Shown, source: MemoryError },
    /// This build cannot open that kind of memory.
    #[error(
        "--memory {memory}: this harness was built without the {feature} store; rebuild it with \
         `cargo install harness-cli --features {feature}`"
    )]
    #[cfg_attr(all(feature = "postgres", feature = "redis"), allow(dead_code))]
    Unsupported {
        memory: Shown,
        feature: &'static str,
    },
    /// An option that does not fit the others.
    #[error("{option}: {why}")]
    Option { option: &'static str, why: String },
    /// The embedder cannot be made or does not answer.
    #[error("--embed-url {url} (model {model}): {why}")]
    Embedder {
        url: Shown,
        model: String,
        why: String,
    },
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
            why: format!("not a harness memory: {why}"),
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

/// The memory the studio shows, and what must live as long as it.
struct Opened {
    memory: Memory,
    /// A sled memory's private copy.
    _copy: Option<SledStore>,
}

fn is_postgres(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

fn is_redis(url: &str) -> bool {
    url.starts_with("redis://") || url.starts_with("rediss://")
}

/// Checks that the memory and embedder options fit together, before
/// anything is opened.
fn check_options(args: &Args) -> Result<(), Error> {
    let misplaced = |option, why: &str| Error::Option {
        option,
        why: why.to_owned(),
    };
    let memory = args.memory.as_deref();
    if args.memory_schema.is_some() && !memory.is_some_and(is_postgres) {
        return Err(misplaced(
            "--memory-schema",
            "applies only to a PostgreSQL memory (--memory postgres://…)",
        ));
    }
    if args.memory_prefix.is_some() && !memory.is_some_and(is_redis) {
        return Err(misplaced(
            "--memory-prefix",
            "applies only to a Redis memory (--memory redis://…)",
        ));
    }
    let embedding =
        args.embed_url.is_some() || args.embed_model.is_some() || args.embed_key_env.is_some();
    if embedding && memory.is_none() {
        let option = if args.embed_url.is_some() {
            "--embed-url"
        } else if args.embed_model.is_some() {
            "--embed-model"
        } else {
            "--embed-key-env"
        };
        return Err(misplaced(
            option,
            "embeds the memory's search texts: give the memory too (--memory PATH|URL)",
        ));
    }
    match (&args.embed_url, &args.embed_model) {
        (Some(_), None) => Err(misplaced(
            "--embed-url",
            "needs --embed-model NAME (the model the memory's items were embedded with)",
        )),
        (None, Some(_)) => Err(misplaced(
            "--embed-model",
            "needs --embed-url URL (an OpenAI-compatible API root)",
        )),
        (None, None) if args.embed_key_env.is_some() => Err(misplaced(
            "--embed-key-env",
            "needs --embed-url URL and --embed-model NAME",
        )),
        _ => Ok(()),
    }
}

/// The embedder of `--embed-url`/`--embed-model`, asked once for a vector
/// (so that a wrong URL, model or key is told now, not at the first
/// search); with the length of its vectors.
async fn open_embedder(
    url: &str,
    model: &str,
    key_env: Option<&str>,
) -> Result<IndexConfig, Error> {
    let failed = |why: String| Error::Embedder {
        url: Shown::new(url),
        model: model.to_owned(),
        why,
    };
    let mut builder = harness_openai::Client::builder().base_url(url);
    if let Some(var) = key_env {
        match std::env::var(var) {
            Ok(key) if !key.is_empty() => builder = builder.api_key(key),
            _ => {
                return Err(Error::Option {
                    option: "--embed-key-env",
                    why: format!("the environment variable {var} is not set or empty"),
                });
            }
        }
    }
    let client = builder.build().map_err(|e| failed(e.to_string()))?;
    let embedder = client.embedding_model(model);
    let probe = tokio::time::timeout(
        Duration::from_secs(60),
        embedder.embed(&["harness studio: which length are your vectors?".to_owned()]),
    )
    .await
    .map_err(|_| failed("no answer within 60 s".into()))?
    .map_err(|e| failed(e.to_string()))?;
    let dimensions = probe.vectors.first().map_or(0, Vec::len);
    if dimensions == 0 {
        return Err(failed("it answered no vector, or an empty one".into()));
    }
    Ok(IndexConfig::new(Arc::new(embedder), dimensions))
}

/// The memory of `--memory`, with the embedder if one is given.
async fn open_any_memory(args: &Args) -> Result<Option<Opened>, Error> {
    let Some(location) = args.memory.as_deref() else {
        return Ok(None);
    };
    let index = match (&args.embed_url, &args.embed_model) {
        (Some(url), Some(model)) => {
            Some(open_embedder(url, model, args.embed_key_env.as_deref()).await?)
        }
        _ => None,
    };
    let mut opened = if is_postgres(location) {
        Opened {
            memory: Memory::from_arc(
                open_postgres_memory(location, args.memory_schema.as_deref()).await?,
            ),
            _copy: None,
        }
    } else if is_redis(location) {
        Opened {
            memory: Memory::from_arc(
                open_redis_memory(location, args.memory_prefix.as_deref()).await?,
            ),
            _copy: None,
        }
    } else {
        let (copy, memory) = open_memory(Path::new(location))?;
        Opened {
            memory,
            _copy: Some(copy),
        }
    };
    if let Some(index) = index {
        opened.memory = opened.memory.with_index(index);
    }
    Ok(Some(opened))
}

/// A memory server's error, for `--memory URL`.
#[cfg(any(feature = "postgres", feature = "redis"))]
fn memory_server(url: &str) -> impl FnOnce(MemoryError) -> Error + '_ {
    move |source| Error::MemoryServer {
        memory: Shown::new(url),
        source,
    }
}

#[cfg(feature = "postgres")]
async fn open_postgres_memory(
    url: &str,
    schema: Option<&str>,
) -> Result<Arc<dyn harness::memory::MemoryBackend>, Error> {
    use harness_stores::{PostgresMemory, PostgresMemoryOptions};
    let mut options = PostgresMemoryOptions::default()
        .read_only(true)
        .pool_size(2);
    if let Some(schema) = schema {
        options = options.schema(schema);
    }
    let memory = PostgresMemory::connect_with(url, options)
        .await
        .map_err(memory_server(url))?;
    Ok(Arc::new(memory))
}

#[cfg(not(feature = "postgres"))]
async fn open_postgres_memory(
    url: &str,
    _schema: Option<&str>,
) -> Result<Arc<dyn harness::memory::MemoryBackend>, Error> {
    Err(Error::Unsupported {
        memory: Shown::new(url),
        feature: "postgres",
    })
}

#[cfg(feature = "redis")]
async fn open_redis_memory(
    url: &str,
    prefix: Option<&str>,
) -> Result<Arc<dyn harness::memory::MemoryBackend>, Error> {
    use harness_stores::RedisMemory;
    let memory = RedisMemory::connect(url, prefix.unwrap_or("harness"))
        .await
        .map_err(memory_server(url))?;
    Ok(Arc::new(memory))
}

#[cfg(not(feature = "redis"))]
async fn open_redis_memory(
    url: &str,
    _prefix: Option<&str>,
) -> Result<Arc<dyn harness::memory::MemoryBackend>, Error> {
    Err(Error::Unsupported {
        memory: Shown::new(url),
        feature: "redis",
    })
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
            errln!("error: {}", crate::run::escape_controls(&e.to_string()));
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: &Args) -> Result<(), Error> {
    check_options(args)?;
    let opened_at = harness::session::now_millis();
    let store =
        crate::sessions::open(&args.store, args.schema.as_deref(), args.prefix.as_deref()).await?;
    // A sled memory's copy lives as long as the studio.
    let memory = open_any_memory(args).await?;
    let reports = args
        .reports
        .iter()
        .map(harness_evals::Report::load)
        .collect::<Result<Vec<_>, _>>()?;
    let mut studio = Studio::read_only(Arc::from(store))
        .poll_interval(Duration::from_millis(args.poll_ms.max(50)))
        .reports(reports);
    if let Some(opened) = &memory {
        studio = studio.memory(opened.memory.clone());
    }
    // A sled database or a log store is read as it was when opened: the
    // page says so rather than *live*.
    if crate::sessions::is_snapshot(&args.store) {
        studio = studio.snapshot(opened_at);
    }
    let serving = studio
        .bind(SocketAddr::from((Ipv4Addr::LOCALHOST, args.port)))
        .await?;
    // The store as every message shows it: a URL without its password.
    outln!("harness studio: {} (read-only)", Shown::new(&args.store));
    if let Some(location) = &args.memory {
        let search = match &args.embed_model {
            Some(model) => format!("searched by meaning with {model}"),
            None => "no search by meaning: no --embed-url".to_owned(),
        };
        outln!(
            "long-term memory: {} (read-only; {search})",
            Shown::new(location)
        );
    }
    for path in &args.reports {
        outln!("eval report: {}", path.display());
    }
    outln!("open {}", serving.url());
    outln!("(the token in the URL is needed; stop with Ctrl-C)");
    // Stopped by a signal, the server ends and the store and memory are
    // dropped (with the runtime's tasks, at the latest): a sled copy's
    // private directory is deleted with them.
    serving.until(stop_asked()).await?;
    drop(memory);
    Ok(())
}

/// Ctrl-C (SIGINT) or SIGTERM. Where a signal cannot be listened for, it
/// never completes (the process then ends as the signal's default does).
async fn stop_asked() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut interrupt), Ok(mut terminate)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
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
        // Sled's threads may hold the lock a moment after the drop.
        let mut e = String::new();
        for _ in 0..600 {
            e = open_memory(&sessions).err().unwrap().to_string();
            if !e.contains("open in another process") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
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
            assert!(e.contains("not a harness memory"), "{e}");
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
