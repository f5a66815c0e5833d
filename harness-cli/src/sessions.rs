//! `harness sessions list|show|history --store PATH|URL`: the read-only
//! inspector of [`harness::cli`] on any session store, without the
//! application's state type.
//!
//! The store is a sled database directory, a log-store directory or a
//! file-store directory (told apart by what is on disk), or, when built with the `postgres` or `redis`
//! feature, a `postgres://` or `redis://` URL. It is only read: the server
//! stores are opened read-only and nothing is ever committed.
//!
//! With the `restate` feature, `restate://HOST[:PORT][/OBJECT]` (or
//! `restate+https://…`) reads the sessions of an agent served on Restate
//! (`harness-restate`) as the virtual object `OBJECT` (`HarnessAgent`
//! unless named) from the Restate server's admin API, through its SQL
//! introspection: no service needs to be up, and nothing is written.
//! `PORT` is the admin API's, 9070 (Restate's default) when none is
//! written, for `restate+https://` too. An object the server has not
//! registered is refused, naming those it has (a typo would otherwise read
//! as a store without sessions); a URL with no host, or a port that is no
//! number, is refused saying so.
//!
//! Every store on disk is opened read-only: nothing is created, moved,
//! cut or deleted, and a damaged store is reported, never shown as another
//! state.
//!
//! A sled database is never opened itself: sled has no read-only mode, and
//! opening a damaged database zeroes its log after the damage and shows an
//! older state. `harness sessions` and `harness studio` open a private
//! copy instead ([`harness_stores::SledStore::open_read_only`]): no byte of
//! the database changes, and a damaged one (a record or a segment of sled's
//! log failing its checksum, a file cut short, `db` or `conf` missing) is
//! reported, naming the store, the file and the offset (when sled, finding
//! the damage itself, does not say where, the message says so), with exit
//! status 1;
//! a head or checkpoint failing its own checksum is reported naming the
//! session and the record. A path that holds no store is refused, and
//! nothing is created there. The copy is refused while another process (the
//! application) has the database open.
//!
//! A log store is read in place from a file opened for reading only
//! ([`harness_stores::LogStore::open_read_only`]), under a shared lock on
//! its `LOCK` file while its log is read (refused while the application
//! has it open): a log that ends damaged (a frame cut short, failing its
//! checksum or not parsing), a log that is not a log, or a `LOCK` without
//! a log is reported naming the store, the file and the offset, with exit
//! status 1 — where the application's open would move a torn end aside
//! (or refuse damage before the end), the inspector changes nothing. A file store is read in place
//! too ([`harness_stores::FileStore::open_read_only`]): reading one never
//! writes.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::CommandFactory;
use clap::error::ErrorKind;
use harness::cli::{CommandError, InspectCommand};
use harness::session::{SessionStore, StoreError};

/// Arguments of `harness sessions`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The store: a sled database directory, a log-store directory, a
    /// file-store directory, or a
    /// `postgres://…`, `redis://…` or `restate://HOST[:ADMIN_PORT][/OBJECT]`
    /// URL (when built with the `postgres`, `redis` or `restate` feature;
    /// Restate's admin port is 9070 unless written).
    #[arg(long, global = true, value_name = "PATH|URL")]
    store: Option<String>,
    /// The PostgreSQL schema holding the sessions (default `harness`).
    #[arg(long, global = true, value_name = "NAME")]
    schema: Option<String>,
    /// The Redis key prefix of the sessions (default `harness`).
    #[arg(long, global = true, value_name = "NAME")]
    prefix: Option<String>,
    #[command(subcommand)]
    command: InspectCommand,
}

/// The URL schemes of the stores this tool opens.
const KNOWN_SCHEMES: &[&str] = &[
    "postgres",
    "postgresql",
    "redis",
    "rediss",
    "restate",
    "restate+https",
];

/// Why `harness sessions` (or opening the store of `harness studio`)
/// failed; every message names the store, and the session when there is one.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SessionsError {
    /// A URL of a kind no store has.
    #[error(
        "store {store}: `{scheme}://` is no store this tool opens (postgres://, postgresql://, \
         redis://, rediss://, restate://, restate+https://, or a directory)"
    )]
    UnknownScheme {
        /// The store as given (a URL without its password).
        store: Shown,
        /// Its scheme, in lower case.
        scheme: String,
    },
    /// `--store` was given empty.
    #[error(
        "--store is empty: give a store's directory, or a URL (postgres://, redis://, \
         restate://)"
    )]
    EmptyStore,
    /// The path cannot be read (it may well be a store).
    #[error("{}: cannot read it: {source}", Shown::new(&path.display().to_string()))]
    Unreadable {
        /// The path given.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The path is neither kind of store.
    #[error("{}: not a session store: {why}", Shown::new(&path.display().to_string()))]
    NotAStore {
        /// The path given.
        path: PathBuf,
        /// What is there instead.
        why: String,
    },
    /// The store cannot be opened.
    #[error("store {store}: cannot open it: {source}")]
    Open {
        /// The store as given (a URL without its password).
        store: Shown,
        /// The store's error.
        source: StoreError,
    },
    /// A URL of a store this build cannot open.
    #[cfg_attr(
        all(feature = "postgres", feature = "redis", feature = "restate"),
        allow(dead_code)
    )]
    #[error(
        "store {store}: this harness was built without the {feature} store; rebuild it with \
         `cargo install harness-cli --features {feature}` (or `cargo run -p harness-cli \
         --features {feature}`)"
    )]
    Unsupported {
        /// The store as given (a URL without its password).
        store: Shown,
        /// The feature it needs.
        feature: &'static str,
    },
    /// An option that does not fit the store.
    #[error("store {store}: {option} applies to {applies_to} stores only")]
    Option {
        /// The store as given.
        store: Shown,
        /// The option.
        option: &'static str,
        /// The kind of store it is for.
        applies_to: &'static str,
    },
    /// The store is damaged, or in use (the error names the store, the file
    /// and where).
    #[error("{source}")]
    ReadOnly {
        /// Why it cannot be read.
        source: harness_stores::ReadOnlyError,
    },
    /// The command failed on the store (the error names the session).
    #[error("store {store}: {source}")]
    Command {
        /// The store as given.
        store: Shown,
        /// What failed.
        source: CommandError,
    },
}

/// A store's path or URL as shown in messages (and by `harness studio`): a
/// URL loses its password ([`without_password`]).
#[derive(Debug)]
pub(crate) struct Shown(String);

impl Shown {
    pub(crate) fn new(store: &str) -> Self {
        Shown(without_password(store))
    }
}

impl fmt::Display for Shown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `scheme://user:password@host…?password=…` → `scheme://user@host…`: the
/// password of the userinfo and every query parameter naming one
/// (`password`, `sslpassword`, which tokio-postgres reads) are left out.
///
/// The userinfo ends at the last `@` of the authority, as URL parsers read
/// it. But tokio-postgres takes the credentials up to the first `@`
/// anywhere (`postgres://ada:s3/cret@host/x`: the password `s3/cret`), so
/// when an `@` comes after the authority, everything before the last `@`
/// is taken as the userinfo: a URL shown with less than it has is better
/// than a password shown.
fn without_password(store: &str) -> String {
    let Some((scheme, rest)) = store.split_once("://") else {
        // A URL whose `//` is missing (`postgres:ada:pw@host`,
        // `postgres:ada:pw`): what lies between its scheme and its last
        // `@` may be a password, and is not shown; without an `@`, nothing
        // after a known scheme is.
        if let Some((scheme, rest)) = store.split_once(':')
            && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c))
        {
            if let Some(at) = rest.rfind('@') {
                return format!(
                    "{scheme}:…@{}",
                    without_password_parameters(&rest[at + 1..])
                );
            }
            if KNOWN_SCHEMES.contains(&scheme.to_ascii_lowercase().as_str()) {
                return format!("{scheme}:…");
            }
        }
        // Not a URL: a path, or a libpq `key=value` string, shown up to
        // its first `password` (a value may be quoted, spaces and all, or
        // written `password = …`: nothing from there on is shown).
        return match store.to_ascii_lowercase().find("password") {
            Some(at) => format!("{}…", &store[..at]),
            None => store.to_owned(),
        };
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let at = if rest[authority_end..].contains('@') {
        rest.rfind('@')
    } else {
        rest[..authority_end].rfind('@')
    };
    let (user, tail) = match at {
        Some(at) => {
            let userinfo = &rest[..at];
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            (user, &rest[at + 1..])
        }
        None => ("", rest),
    };
    let at = if user.is_empty() { "" } else { "@" };
    format!("{scheme}://{user}{at}{}", without_password_parameters(tail))
}

/// `host/path?query#fragment` without the query parameters whose name
/// (percent-decoded, any case) holds `password`.
fn without_password_parameters(tail: &str) -> String {
    let (before, fragment) = match tail.split_once('#') {
        Some((before, fragment)) => (before, Some(fragment)),
        None => (tail, None),
    };
    // Without a `?`, the pairs after the first `&` are read as a query
    // all the same: an `@` in the query (`?user=ada@server&password=…`)
    // was taken for the end of the userinfo, and what follows it is the
    // rest of the query.
    let (path, query, mark) = match before.split_once('?') {
        Some((path, query)) => (path, query, '?'),
        None => match before.split_once('&') {
            Some((path, query)) => (path, query, '&'),
            None if fragment.is_some() => return format!("{before}#…"),
            None => return tail.to_owned(),
        },
    };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| {
            let name = pair.split_once('=').map_or(*pair, |(name, _)| name);
            let name = harness::secrets::percent_decoded(name, true);
            !name.to_ascii_lowercase().contains("password")
                && !harness::secrets::is_secret_parameter(&name)
        })
        .collect();
    let mut shown = path.to_owned();
    if !kept.is_empty() {
        shown.push(mark);
        shown.push_str(&kept.join("&"));
    }
    // A store's URL means nothing by its fragment, which may hold a key.
    if fragment.is_some() {
        shown.push_str("#…");
    }
    shown
}

pub(crate) fn run(args: Args) -> ExitCode {
    let Some(store) = args.store.clone() else {
        let mut cli = crate::Cli::command();
        cli.build();
        let message = "the store to read was not given: --store <PATH|URL> (a sled database, log-store \
                       directory, a file-store directory, or a postgres://, redis:// or restate:// URL)";
        let error = match cli.find_subcommand_mut("sessions") {
            Some(sessions) => sessions.error(ErrorKind::MissingRequiredArgument, message),
            None => cli.error(ErrorKind::MissingRequiredArgument, message),
        };
        error.exit()
    };
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
    // What is printed has the secrets this process knows replaced (those
    // of its environment, as the studio does): a state kept before a
    // secret was registered by the application may hold it.
    match runtime.block_on(inspect(&store, args)) {
        Ok(text) => {
            out!("{}", harness::secrets::redact(&text));
            ExitCode::SUCCESS
        }
        Err(e) => {
            // What could be read first, then what could not.
            if let SessionsError::Command {
                source: CommandError::Unreadable { shown, .. },
                ..
            } = &e
            {
                out!("{}", harness::secrets::redact(shown));
            }
            // The message may quote the user's own argument (a session
            // id): its control characters must not drive the terminal.
            errln!(
                "error: {}",
                crate::run::escape_controls(&harness::secrets::redact(&e.to_string()))
            );
            ExitCode::FAILURE
        }
    }
}

async fn inspect(store: &str, args: Args) -> Result<String, SessionsError> {
    let opened = open(store, args.schema.as_deref(), args.prefix.as_deref()).await?;
    let text = args
        .command
        .run(&*opened)
        .await
        .map_err(|source| SessionsError::Command {
            store: Shown::new(store),
            source,
        })?;
    // Redis keeps no mark of a store: a prefix with a typo reads as a
    // store with no sessions, so the prefix read is said.
    let redis = ["redis://", "rediss://"]
        .iter()
        .any(|s| store.to_ascii_lowercase().starts_with(s));
    if redis && text == "no sessions\n" {
        let prefix = args.prefix.as_deref().unwrap_or("harness");
        // The prefix read is left out: ids in its set whose sessions are
        // gone would name it as a store.
        let others = redis_prefixes(store).await.map(|found| {
            found
                .into_iter()
                .filter(|p| p != prefix)
                .collect::<Vec<_>>()
        });
        let there = match others {
            Some(others) if others.is_empty() => {
                "; this database holds no other session store".to_owned()
            }
            Some(others) => format!(
                "; this database holds session stores under {}",
                nearest_first(prefix, others)
            ),
            None => String::new(),
        };
        return Ok(format!(
            "no sessions under the Redis key prefix `{}` (--prefix names another; the \
             default is `harness`){there}\n",
            prefix.escape_debug()
        ));
    }
    Ok(text)
}

/// The most prefixes a listing of an empty Redis prefix names.
const PREFIXES_SHOWN: usize = 8;

/// `found`, the nearest to `asked` first (by edit distance, then in byte
/// order), at most [`PREFIXES_SHOWN`] of them, as text.
fn nearest_first(asked: &str, mut found: Vec<String>) -> String {
    found.sort_by_cached_key(|p| (edit_distance(asked, p), p.clone()));
    let shown: Vec<String> = found
        .iter()
        .take(PREFIXES_SHOWN)
        .map(|p| format!("`{}`", p.escape_debug()))
        .collect();
    let more = match found.len().saturating_sub(PREFIXES_SHOWN) {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    let s = if found.len() == 1 { "" } else { "es" };
    format!("the prefix{s} {}{more}", shown.join(", "))
}

/// The Levenshtein distance between `a` and `b`, by characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (diagonal + usize::from(ca != *cb))
                .min(above + 1)
                .min(row[j] + 1);
            diagonal = above;
        }
    }
    row[b.len()]
}

/// The prefixes of the session stores on the Redis database at `url`
/// ([`harness_stores::RedisStore::store_prefixes`], at most 100 000 keys
/// looked at), or `None` when they cannot be read.
#[cfg(feature = "redis")]
async fn redis_prefixes(url: &str) -> Option<Vec<String>> {
    use harness_stores::{RedisOptions, RedisStore};
    let store = RedisStore::connect_with(url, RedisOptions::default().read_only(true))
        .await
        .ok()?;
    store.store_prefixes(100_000).await.ok()
}

#[cfg(not(feature = "redis"))]
async fn redis_prefixes(_url: &str) -> Option<Vec<String>> {
    None
}

/// Opens `store` for reading (`harness sessions` and `harness studio`):
/// `schema` and `prefix` are the `--schema` and `--prefix` options.
pub(crate) async fn open(
    store: &str,
    schema: Option<&str>,
    prefix: Option<&str>,
) -> Result<Box<dyn SessionStore>, SessionsError> {
    if store.is_empty() {
        return Err(SessionsError::EmptyStore);
    }
    // A URL's scheme is read in any case (`Postgres://`); one this tool
    // does not know is refused as such, not looked for as a directory.
    let lowered;
    let store = match store.split_once("://") {
        Some((scheme, rest)) => {
            let scheme = scheme.to_ascii_lowercase();
            if !KNOWN_SCHEMES.contains(&scheme.as_str()) {
                return Err(SessionsError::UnknownScheme {
                    store: Shown::new(store),
                    scheme,
                });
            }
            lowered = format!("{scheme}://{rest}");
            lowered.as_str()
        }
        None => store,
    };
    let is_postgres = store.starts_with("postgres://") || store.starts_with("postgresql://");
    let is_redis = store.starts_with("redis://") || store.starts_with("rediss://");
    let misplaced = |option, applies_to| SessionsError::Option {
        store: Shown::new(store),
        option,
        applies_to,
    };
    if schema.is_some() && !is_postgres {
        return Err(misplaced("--schema", "PostgreSQL"));
    }
    if prefix.is_some() && !is_redis {
        return Err(misplaced("--prefix", "Redis"));
    }
    if is_postgres {
        return open_postgres(store, schema).await;
    }
    if is_redis {
        return open_redis(store, prefix).await;
    }
    if store.starts_with("restate://") || store.starts_with("restate+https://") {
        return open_restate(store).await;
    }
    open_path(Path::new(store))
}

/// The admin API's port when a `restate://` URL names none: Restate's
/// default (its ingress is 8080).
#[cfg(feature = "restate")]
const RESTATE_ADMIN_PORT: u16 = 9070;

/// `restate://[USER:PASSWORD@]HOST[:PORT][/OBJECT]` (the admin API over
/// HTTP, at port [`RESTATE_ADMIN_PORT`] unless one is written) or
/// `restate+https://…`. The URL is read as the admin client reads a base
/// URL ([`harness_restate::BaseUrl`]): the userinfo ends within the
/// authority (an `@` after it is refused where it could be read either
/// way), and its password is never shown. The object must be one of the
/// virtual objects the server has registered: a name it does not have is
/// refused before anything is read, naming those it has, where it would
/// read as a store without sessions (the reader's check,
/// [`RestateSessionReader::check`](harness_restate::RestateSessionReader::check),
/// made at once).
#[cfg(feature = "restate")]
async fn open_restate(url: &str) -> Result<Box<dyn SessionStore>, SessionsError> {
    use harness_restate::{Admin, BaseUrl, RestateError, RestateSessionReader};
    let (scheme, rest) = match url.strip_prefix("restate+https://") {
        Some(rest) => ("https", rest),
        None => ("http", url.trim_start_matches("restate://")),
    };
    let failed = |message: String| SessionsError::Open {
        store: Shown::new(url),
        source: StoreError::Backend { message },
    };
    let http = format!("{scheme}://{rest}");
    let parsed = BaseUrl::parse(&http).map_err(|e| {
        // What is wrong with it, without the client's `http://…` form of
        // the URL (the store is named as given).
        let why = match &e {
            RestateError::Input { message, .. } => message
                .split_once("): ")
                .map_or(message.as_str(), |(_, why)| why)
                .to_owned(),
            other => other.to_string(),
        };
        failed(format!(
            "not a Restate URL (`restate://[USER:PASSWORD@]HOST[:PORT][/OBJECT]`): {why}"
        ))
    })?;
    // `/OBJECT`: the object an agent is served as, `HarnessAgent` unless
    // named.
    let object = parsed.path.trim_start_matches('/');
    let object = if object.is_empty() {
        harness_restate::OBJECT
    } else if object
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        object
    } else {
        return Err(failed(format!(
            "`{object}` is not the name of a virtual object (letters, digits, `_`, `-` and `.`)"
        )));
    };
    // The admin client sends the userinfo as basic auth, and keeps it out
    // of every URL it shows (its errors reach `harness sessions` and the
    // studio's pages).
    let port = parsed.port.unwrap_or(RESTATE_ADMIN_PORT);
    let authority = format!("{}:{port}", parsed.host);
    let base = match parsed.userinfo {
        Some(userinfo) => format!("{scheme}://{userinfo}@{authority}"),
        None => format!("{scheme}://{authority}"),
    };
    let admin = Admin::new(base).map_err(|e| failed(e.to_string()))?;
    if !admin.healthy().await {
        return Err(failed(format!(
            "no Restate admin API answers at {}",
            admin.base()
        )));
    }
    // The reader's own check, made now rather than at the first read: the
    // studio then refuses to start, as `list` does, rather than show an
    // error on each page.
    let reader = RestateSessionReader::new(admin).object(object);
    reader.check().await.map_err(|e| failed(e.to_string()))?;
    Ok(Box::new(reader))
}

#[cfg(not(feature = "restate"))]
async fn open_restate(url: &str) -> Result<Box<dyn SessionStore>, SessionsError> {
    Err(SessionsError::Unsupported {
        store: Shown::new(url),
        feature: "restate",
    })
}

#[cfg(feature = "postgres")]
async fn open_postgres(
    url: &str,
    schema: Option<&str>,
) -> Result<Box<dyn SessionStore>, SessionsError> {
    use harness_stores::{PostgresOptions, PostgresStore};
    let mut options = PostgresOptions::default().read_only(true).pool_size(2);
    if let Some(schema) = schema {
        options = options.schema(schema);
    }
    match PostgresStore::connect_with(url, options).await {
        Ok(store) => Ok(Box::new(store)),
        Err(source) => Err(SessionsError::Open {
            store: Shown::new(url),
            source,
        }),
    }
}

#[cfg(not(feature = "postgres"))]
async fn open_postgres(
    url: &str,
    _schema: Option<&str>,
) -> Result<Box<dyn SessionStore>, SessionsError> {
    Err(SessionsError::Unsupported {
        store: Shown::new(url),
        feature: "postgres",
    })
}

#[cfg(feature = "redis")]
async fn open_redis(
    url: &str,
    prefix: Option<&str>,
) -> Result<Box<dyn SessionStore>, SessionsError> {
    use harness_stores::{RedisOptions, RedisStore};
    let mut options = RedisOptions::default().read_only(true);
    if let Some(prefix) = prefix {
        options = options.prefix(prefix);
    }
    match RedisStore::connect_with(url, options).await {
        Ok(store) => Ok(Box::new(store)),
        Err(source) => Err(SessionsError::Open {
            store: Shown::new(url),
            source,
        }),
    }
}

#[cfg(not(feature = "redis"))]
async fn open_redis(
    url: &str,
    _prefix: Option<&str>,
) -> Result<Box<dyn SessionStore>, SessionsError> {
    Err(SessionsError::Unsupported {
        store: Shown::new(url),
        feature: "redis",
    })
}

/// What kind of store a directory holds.
#[derive(Debug, PartialEq, Eq)]
enum OnDisk {
    /// sled's `conf` and `db` files.
    Sled,
    /// A log store's `LOCK` and `log.N` files.
    Log,
    /// `s-…` session directories, or nothing yet.
    Files,
}

/// Tells a sled database from a file store by what is on disk.
fn on_disk(path: &Path) -> Result<OnDisk, SessionsError> {
    let not_a_store = |why: String| SessionsError::NotAStore {
        path: path.to_path_buf(),
        why,
    };
    let unreadable = |source: std::io::Error| SessionsError::Unreadable {
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::PermissionDenied => unreadable(e),
        _ => not_a_store(missing(path, &e)),
    })?;
    if !meta.is_dir() {
        return Err(not_a_store(
            "a file; a store is a sled database, log-store or file-store directory".into(),
        ));
    }
    // Either of sled's files: a database, whole or damaged (the other
    // file missing is reported as damage when it is opened).
    if path.join("conf").is_file() || path.join("db").is_file() {
        return Ok(OnDisk::Sled);
    }
    // A log store's lock or any of its logs: a store, whole or damaged
    // (a lock without a log is reported as damage when it is opened).
    let is_log = |name: &str| {
        name.strip_prefix("log.")
            .is_some_and(|g| !g.is_empty() && g.bytes().all(|b| b.is_ascii_digit()))
    };
    let has_log = std::fs::read_dir(path)
        .map_err(unreadable)?
        .flatten()
        .any(|e| e.file_name().to_str().is_some_and(is_log));
    if has_log || path.join("LOCK").is_file() {
        return Ok(OnDisk::Log);
    }
    let mut entries = 0;
    for entry in std::fs::read_dir(path).map_err(unreadable)? {
        let entry = entry.map_err(unreadable)?;
        entries += 1;
        let is_session = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with("s-"))
            && entry.file_type().is_ok_and(|t| t.is_dir());
        if is_session {
            return Ok(OnDisk::Files);
        }
    }
    if entries == 0 {
        // What `FileStore::open` leaves before the first session.
        return Ok(OnDisk::Files);
    }
    Err(not_a_store(
        "neither a sled database (no `conf` and `db` files), a log store (no `LOCK` and `log.N` \
         files) nor a file store (no `s-…` session directories)"
            .into(),
    ))
}

/// Why `path` cannot be read, with what it may have been meant as when it
/// does not exist: a URL whose `//` is missing (`postgres:/db`), a libpq
/// `key=value` connection string.
fn missing(path: &Path, e: &std::io::Error) -> String {
    if e.kind() != std::io::ErrorKind::NotFound {
        return e.to_string();
    }
    let text = path.to_string_lossy();
    if let Some((scheme, _)) = text.split_once(':') {
        let scheme = scheme.to_ascii_lowercase();
        if KNOWN_SCHEMES.contains(&scheme.as_str()) {
            return format!(
                "no such directory; a {scheme} URL is written `{scheme}://…`, with its `//`"
            );
        }
    }
    if text.contains('=') {
        return "no such directory; a `key=value` connection string is not read: give the \
                store as a postgres:// URL"
            .into();
    }
    e.to_string()
}

/// Whether `store`, as given to [`open`], is read from what it held when it
/// was opened (a sled database's private copy, a log store's log as it
/// was), so that what other processes write later is not seen.
pub(crate) fn is_snapshot(store: &str) -> bool {
    !store.contains("://") && matches!(on_disk(Path::new(store)), Ok(OnDisk::Sled | OnDisk::Log))
}

fn open_path(path: &Path) -> Result<Box<dyn SessionStore>, SessionsError> {
    use harness_stores::{FileStore, LogStore, SledStore};
    let opened = match on_disk(path)? {
        OnDisk::Sled => SledStore::open_read_only(path).map(|s| Box::new(s) as Box<_>),
        OnDisk::Log => LogStore::open_read_only(path).map(|s| Box::new(s) as Box<_>),
        OnDisk::Files => FileStore::open_read_only(path).map(|s| Box::new(s) as Box<_>),
    };
    opened.map_err(|e| read_only_error(path, e))
}

/// The error of a store opened read-only (see the module's docs).
fn read_only_error(path: &Path, e: harness_stores::ReadOnlyError) -> SessionsError {
    use harness_stores::ReadOnlyError;
    match e {
        ReadOnlyError::NotAStore { path, why } => SessionsError::NotAStore { path, why },
        ReadOnlyError::Store(source) => SessionsError::Open {
            store: Shown(path.display().to_string()),
            source,
        },
        source => SessionsError::ReadOnly { source },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefixes_of_an_empty_listing_come_nearest_first() {
        assert_eq!(edit_distance("harness", "harness"), 0);
        assert_eq!(edit_distance("harnes", "harness"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("prod", "harness"), 6);
        let found = ["zeta", "prod", "harness", "harness-eu"].map(String::from);
        assert_eq!(
            nearest_first("harnes", found.to_vec()),
            "the prefixes `harness`, `harness-eu`, `prod`, `zeta`"
        );
        assert_eq!(
            nearest_first("x", vec!["a\u{1b}[2J".to_owned()]),
            "the prefix `a\\u{1b}[2J`"
        );
        let many: Vec<String> = (0..11).map(|i| format!("p{i:02}")).collect();
        let shown = nearest_first("p00", many);
        assert!(shown.starts_with("the prefixes `p00`, `p01`"), "{shown}");
        assert!(shown.ends_with("`p07` and 3 more"), "{shown}");
    }

    #[test]
    fn urls_in_messages_lose_their_password() {
        for (given, shown) in [
            (
                "postgres://ada:s3cret@db:5432/agents?sslmode=disable",
                "postgres://ada@db:5432/agents?sslmode=disable",
            ),
            ("redis://:s3cret@cache:6379/0", "redis://cache:6379/0"),
            ("redis://cache:6379/", "redis://cache:6379/"),
            ("postgres://ada@db/x", "postgres://ada@db/x"),
            ("/var/lib/sessions", "/var/lib/sessions"),
            // A URL without its `//`: nothing between the scheme and the
            // last `@` is shown.
            ("postgres:/ada:s3cret@db/x", "postgres:…@db/x"),
            ("Redis::s3cret@cache:6379", "Redis:…@cache:6379"),
            ("redis:s3cret@cache", "redis:…@cache"),
            ("postgres:ada:s3/cr@et@db/x?password=p", "postgres:…@db/x"),
            ("/home/ada@work/sessions", "/home/ada@work/sessions"),
            ("postgres:ada:s3cret", "postgres:…"),
            // Any parameter named like a secret, and the fragment.
            (
                "restate://127.0.0.1:9070?token=s3cret&object=Orders#s3cret",
                "restate://127.0.0.1:9070?object=Orders#…",
            ),
            ("redis://cache:6379/0#s3cret", "redis://cache:6379/0#…"),
            (
                "postgres://host/x?api_key=s3cret&sslmode=require",
                "postgres://host/x?sslmode=require",
            ),
            // An `@` in the query (Azure's `user@server`): the password
            // after it is left out all the same.
            (
                "postgres://host/db?user=ada@server&password=s3cret",
                "postgres://host/db?user=ada@server",
            ),
            (
                "postgres://host/db?user=ada@server&sslmode=require&password=s3cret",
                "postgres://host/db?user=ada@server&sslmode=require",
            ),
            (
                "postgres:/db?user=ada@server&password=s3cret",
                "postgres:…@server",
            ),
            // libpq: a quoted value, spaces and all, or `password = …`.
            ("host=db password='s3 cret' dbname=x", "host=db …"),
            ("host=db password = s3cret", "host=db …"),
            ("host=db dbname=x", "host=db dbname=x"),
            // A `password` query parameter (tokio-postgres reads it), in
            // any place, case or escape; other parameters stay.
            (
                "postgres://ada@host/x?password=s3cret",
                "postgres://ada@host/x",
            ),
            (
                "postgres://ada@host/x?sslmode=disable&password=s3cret&application_name=a",
                "postgres://ada@host/x?sslmode=disable&application_name=a",
            ),
            (
                "postgres://host/x?user=ada&PassWord=s3cret#f",
                "postgres://host/x?user=ada#…",
            ),
            ("postgres://host/x?pass%77ord=s3cret", "postgres://host/x"),
            (
                "postgres://host/x?sslpassword=s3cret&sslmode=require",
                "postgres://host/x?sslmode=require",
            ),
            ("postgres://host/x?password", "postgres://host/x"),
            // A password holding `/`, `?`, `#`, `:` or `@`: everything up
            // to the last `@` is the userinfo.
            ("postgres://ada:s3/cret@host/x", "postgres://ada@host/x"),
            ("postgres://ada:s3?cret@host/x", "postgres://ada@host/x"),
            ("postgres://ada:s3#cret@host/x", "postgres://ada@host/x"),
            ("postgres://ada:s3:cr@et@host/x", "postgres://ada@host/x"),
            ("redis://:s3/cret@cache:6379/0", "redis://cache:6379/0"),
            (
                "restate://ops:s3/cret@127.0.0.1:9070/Orders",
                "restate://ops@127.0.0.1:9070/Orders",
            ),
            (
                "http://key:s3cret@127.0.0.1:8081/v1",
                "http://key@127.0.0.1:8081/v1",
            ),
        ] {
            let got = without_password(given);
            assert_eq!(got, shown, "{given}");
            for secret in ["s3cret", "s3/cret", "s3?cret", "s3#cret", "cr@et"] {
                assert!(!got.contains(secret), "{given} shows {got}");
            }
        }
    }
}
