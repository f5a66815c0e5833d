//! The PostgreSQL store.

use crate::clock::ServerClock;
use crate::record::{checkpoint_from_slice, checkpoint_to_vec, head_from_slice, load_error};
use async_trait::async_trait;
use deadpool_postgres::{
    Manager, ManagerConfig, Object, Pool, PoolError, RecyclingMethod, Runtime,
};
use harness::SessionId;
use harness::session::{
    Checkpoint, Commit, Created, SessionPhase, SessionStore, StoreError, StoredRun,
};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Display};
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::{Config, NoTls};

/// The schema the tables live in unless told otherwise.
const DEFAULT_SCHEMA: &str = "harness";
/// Connections in the pool unless told otherwise.
const DEFAULT_POOL_SIZE: usize = 16;
/// How long [`runnable`](SessionStore::runnable) hides the sessions it
/// returns from other callers, unless told otherwise.
const DEFAULT_CLAIM_TTL: Duration = Duration::from_secs(10);

/// The migrations, in order: `(version, name, SQL)`. `{s}` stands for the
/// quoted schema. A migration is applied once, in the transaction that
/// records it in `schema_migrations`; never edit one that has shipped, add
/// the next instead.
const MIGRATIONS: &[(i32, &str, &str)] = &[
    (
        1,
        "sessions and checkpoints",
        r"CREATE TABLE {s}.sessions (
    id               text PRIMARY KEY,
    head             text NOT NULL,
    version          bigint NOT NULL,
    phase            text NOT NULL,
    lease_owner      text,
    lease_expires_at bigint,
    updated_at       bigint NOT NULL,
    claimed_until    bigint
);
CREATE INDEX sessions_runnable ON {s}.sessions (updated_at, id) WHERE phase = 'running';
CREATE TABLE {s}.checkpoints (
    session_id text NOT NULL REFERENCES {s}.sessions (id) ON DELETE CASCADE,
    seq        numeric(20, 0) NOT NULL CHECK (seq >= 0),
    checkpoint text NOT NULL,
    PRIMARY KEY (session_id, seq)
);",
    ),
    (
        2,
        "the agent of each session, for workers",
        r"ALTER TABLE {s}.sessions ADD COLUMN agent_id text;
DO $migrate$
DECLARE r record;
BEGIN
  FOR r IN SELECT id, head FROM {s}.sessions LOOP
    BEGIN
      UPDATE {s}.sessions SET agent_id = (r.head::jsonb) ->> 'agent_id' WHERE id = r.id;
    EXCEPTION WHEN others THEN
      -- An unreadable head: no agent, so no worker takes it.
      NULL;
    END;
  END LOOP;
END
$migrate$;
DROP INDEX {s}.sessions_runnable;
CREATE INDEX sessions_runnable ON {s}.sessions (agent_id, updated_at, id) WHERE phase = 'running';",
    ),
];

/// Indexes that only make reads faster: not migrations, so that a build
/// that does not know one works beside it (a migration makes older builds
/// refuse the schema) and a reader does without it (it reads the same rows,
/// slower). A writer that owns the tables creates each one missing, in its
/// migration transaction: `(name, SQL)`, `{s}` the quoted schema.
const READ_INDEXES: &[(&str, &str)] = &[(
    // `sessions_page`: the ids in byte order, whatever the database's
    // collation.
    "sessions_by_id_bytes",
    r#"CREATE INDEX IF NOT EXISTS sessions_by_id_bytes ON {s}.sessions (id COLLATE "C");"#,
)];

/// The feed of created sessions ([`SessionStore::created_since`]): like
/// the read indexes, no migration (older builds work beside it, leaving
/// their creations out of it), created by a writer whose role owns the
/// sessions table on a server of version 13 or later (`xid8`). Each
/// creation adds a row stamped with its transaction's id. `{s}` the quoted
/// schema.
const FEED_TABLE: &str = "CREATE TABLE {s}.created (\n    \
    xid xid8 NOT NULL,\n    \
    id  text NOT NULL,\n    \
    PRIMARY KEY (xid, id)\n);";

/// The least string above every string that starts with `prefix` (its
/// last char that has a next one, moved to it), in the byte order of UTF-8,
/// which is the order of code points; `None` if there is none (`prefix` is
/// empty, or only `char::MAX`).
fn prefix_end(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        // Past the surrogates, which are no chars.
        let next = match u32::from(last) + 1 {
            0xD800 => 0xE000,
            next => next,
        };
        if let Some(next) = char::from_u32(next) {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

/// How a [`PostgresStore`] connects: its schema, pool size and claim time.
///
/// ```
/// use harness_stores::PostgresOptions;
/// use std::time::Duration;
///
/// let options = PostgresOptions::default()
///     .schema("agents")
///     .pool_size(8)
///     .claim_ttl(Duration::from_secs(5));
/// assert_eq!(options.schema_name(), "agents");
/// ```
#[derive(Clone, Debug)]
pub struct PostgresOptions {
    schema: String,
    pool_size: usize,
    claim_ttl: Duration,
    read_only: bool,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        Self {
            schema: DEFAULT_SCHEMA.into(),
            pool_size: DEFAULT_POOL_SIZE,
            claim_ttl: DEFAULT_CLAIM_TTL,
            read_only: false,
        }
    }
}

impl PostgresOptions {
    /// The schema holding the tables (default `harness`); created if
    /// missing. Stores on different schemas of one database share nothing.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// The most connections the store opens (default 16); ignored by
    /// [`PostgresStore::from_pool`].
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size.max(1);
        self
    }

    /// How long [`runnable`](SessionStore::runnable) hides the sessions it
    /// returns from other callers (default 10 s); zero makes it a plain
    /// read. See [`PostgresStore`], "Finding work".
    pub fn claim_ttl(mut self, ttl: Duration) -> Self {
        self.claim_ttl = ttl;
        self
    }

    /// Opens the store for reading only (default: no), for inspection
    /// tools: connecting creates and migrates nothing (a schema without
    /// this build's tables is refused), every transaction of
    /// [`connect_with`](PostgresStore::connect_with)'s connections is
    /// read-only on the server (`default_transaction_read_only`), commits
    /// are refused before they reach it, [`runnable`](SessionStore::runnable)
    /// claims nothing and [`flush`](SessionStore::flush) does nothing.
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// The schema's name.
    pub fn schema_name(&self) -> &str {
        &self.schema
    }
}

/// A regular expression (PostgreSQL's advanced flavour, with a negative
/// lookahead) matching an `id` column that [`PostgresStore::stored_id`]
/// never writes: one with a `%` not followed by `25` or `00`.
const FOREIGN_ID: &str = "%(?!25|00)";

/// The SQL of one store, with its schema in it.
#[derive(Debug)]
struct Sql {
    select_head: String,
    select_head_for_update: String,
    insert_session: String,
    update_session: String,
    delete_checkpoints: String,
    upsert_checkpoints: String,
    select_checkpoints: String,
    select_sessions: String,
    /// `select_sessions_page[after?][prefix end?]`: see
    /// [`PostgresStore::sessions_page`].
    select_sessions_page: [[String; 2]; 2],
    runnable_read: String,
    runnable_claim: String,
    fast_update: String,
    fast_create: String,
    /// A creation's row in the feed, in the fallback transaction.
    insert_created: String,
    /// The feed's rows after a position, below the oldest transaction
    /// still running.
    select_created: String,
}

impl Sql {
    /// The statements of the store on schema `s` (quoted); `feed`: whether
    /// creations are written to the feed.
    fn new(s: &str, feed: bool) -> Self {
        // The feed's row of a creation, in the creating statement itself.
        let created = if feed {
            format!(
                "c AS (INSERT INTO {s}.created (xid, id) SELECT pg_current_xact_id(), h.id FROM h), "
            )
        } else {
            String::new()
        };
        Self {
            select_head: format!("SELECT head FROM {s}.sessions WHERE id = $1"),
            select_head_for_update: format!(
                "SELECT head FROM {s}.sessions WHERE id = $1 FOR UPDATE"
            ),
            insert_session: format!(
                "INSERT INTO {s}.sessions \
                 (id, head, version, phase, lease_owner, lease_expires_at, updated_at, agent_id) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (id) DO NOTHING"
            ),
            update_session: format!(
                "UPDATE {s}.sessions SET head = $2, version = $3, phase = $4, lease_owner = $5, \
                 lease_expires_at = $6, updated_at = $7, claimed_until = NULL, agent_id = $8 \
                 WHERE id = $1"
            ),
            delete_checkpoints: format!(
                "DELETE FROM {s}.checkpoints \
                 WHERE session_id = $1 AND seq = ANY ($2::text[]::numeric[])"
            ),
            upsert_checkpoints: format!(
                "INSERT INTO {s}.checkpoints (session_id, seq, checkpoint) \
                 SELECT $1::text, u.seq::numeric, u.doc FROM unnest($2::text[], $3::text[]) AS u (seq, doc) \
                 ON CONFLICT (session_id, seq) DO UPDATE SET checkpoint = EXCLUDED.checkpoint"
            ),
            select_checkpoints: format!(
                "SELECT seq::text AS seq_text, checkpoint FROM {s}.checkpoints \
                 WHERE session_id = $1 AND seq >= $2::text::numeric ORDER BY seq"
            ),
            select_sessions: format!("SELECT id FROM {s}.sessions ORDER BY id"),
            select_sessions_page: [false, true].map(|after| {
                [false, true].map(|end| {
                    // $1: the first id, or the one before the first; $2:
                    // the end of the prefix's ids, or '' when it has none
                    // (still typed, as every parameter must be); $3: the
                    // limit.
                    let from = if after { ">" } else { ">=" };
                    let end = if end {
                        r#"AND id COLLATE "C" < $2 "#
                    } else {
                        "AND $2::text = '' "
                    };
                    format!(
                        r#"SELECT id FROM {s}.sessions WHERE id COLLATE "C" {from} $1 {end}AND id !~ '{FOREIGN_ID}' ORDER BY id COLLATE "C" LIMIT $3"#
                    )
                })
            }),
            // Both finders pass over rows whose id is not one `stored_id`
            // writes (a `%` not followed by `25` or `00`: a row another
            // tool inserted): such a row is no session of this store, so it
            // takes no place in the limit and is never claimed (a write to
            // a row the store did not write).
            runnable_read: format!(
                "SELECT id, updated_at FROM {s}.sessions \
                 WHERE phase = 'running' AND agent_id = $3 \
                   AND (lease_expires_at IS NULL OR lease_expires_at <= $1) \
                   AND (claimed_until IS NULL OR claimed_until <= $1) \
                   AND id !~ '{FOREIGN_ID}' \
                 ORDER BY updated_at, id LIMIT $2"
            ),
            // One statement, so one round trip and one implicit
            // transaction: the compare-and-set on the version column and on
            // the stored head's own version and schema version (a head that
            // is not JSON makes the cast fail, and the commit falls back to
            // the transaction that reports it), the head, the checkpoints
            // removed and written, and `synchronous_commit` for this
            // transaction's commit ($13; NULL leaves it as it is).
            fast_update: format!(
                "WITH h AS (\
                   UPDATE {s}.sessions SET head = $2, version = $3, phase = $4, lease_owner = $5, \
                     lease_expires_at = $6, updated_at = $7, claimed_until = NULL, agent_id = $8 \
                   WHERE id = $1 AND version = $9 \
                     AND (head::jsonb ->> 'version') = $9::bigint::text \
                     AND (head::jsonb ->> 'schema_version') = $14::integer::text \
                   RETURNING id), \
                 d AS (\
                   DELETE FROM {s}.checkpoints AS c USING h \
                   WHERE c.session_id = h.id AND c.seq = ANY ($10::text[]::numeric[])), \
                 i AS (\
                   INSERT INTO {s}.checkpoints (session_id, seq, checkpoint) \
                   SELECT h.id, u.seq::numeric, u.doc FROM h, unnest($11::text[], $12::text[]) AS u (seq, doc) \
                   ON CONFLICT (session_id, seq) DO UPDATE SET checkpoint = EXCLUDED.checkpoint) \
                 SELECT (SELECT count(*) FROM h) AS applied, \
                   set_config('synchronous_commit', \
                     coalesce($13::text, current_setting('synchronous_commit')), true) AS sync"
            ),
            fast_create: format!(
                "WITH h AS (\
                   INSERT INTO {s}.sessions \
                   (id, head, version, phase, lease_owner, lease_expires_at, updated_at, agent_id) \
                   VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (id) DO NOTHING \
                   RETURNING id), \
                 {created}\
                 i AS (\
                   INSERT INTO {s}.checkpoints (session_id, seq, checkpoint) \
                   SELECT h.id, u.seq::numeric, u.doc FROM h, unnest($9::text[], $10::text[]) AS u (seq, doc) \
                   ON CONFLICT (session_id, seq) DO UPDATE SET checkpoint = EXCLUDED.checkpoint) \
                 SELECT (SELECT count(*) FROM h) AS applied, \
                   set_config('synchronous_commit', \
                     coalesce($11::text, current_setting('synchronous_commit')), true) AS sync"
            ),
            insert_created: format!(
                "INSERT INTO {s}.created (xid, id) VALUES (pg_current_xact_id(), $1)"
            ),
            // Whole transactions: the first `$2` of them (one creation
            // each, as this store writes them) and all their rows. Every
            // transaction below the snapshot's xmin has ended, so no row
            // can appear later below the position this read moves to.
            // A position at or above the oldest transaction running is of
            // no transaction of this server's that has ended (the database
            // was restored into another): the feed from its start.
            select_created: format!(
                "WITH bound AS (\
                   SELECT pg_snapshot_xmin(pg_current_snapshot()) AS xmin), \
                 picked AS (\
                   SELECT DISTINCT xid FROM {s}.created, bound \
                   WHERE xid > (CASE WHEN $1::text::xid8 < bound.xmin \
                                     THEN $1::text::xid8 ELSE '0'::xid8 END) \
                     AND xid < bound.xmin \
                   ORDER BY xid LIMIT $2) \
                 SELECT c.xid::text, c.id FROM {s}.created AS c JOIN picked USING (xid) \
                 ORDER BY c.xid, c.id"
            ),
            runnable_claim: format!(
                "WITH picked AS (\
                   SELECT id FROM {s}.sessions \
                   WHERE phase = 'running' AND agent_id = $4 \
                     AND (lease_expires_at IS NULL OR lease_expires_at <= $1) \
                     AND (claimed_until IS NULL OR claimed_until <= $1) \
                     AND id !~ '{FOREIGN_ID}' \
                   ORDER BY updated_at, id LIMIT $2 \
                   FOR UPDATE SKIP LOCKED) \
                 UPDATE {s}.sessions AS s SET claimed_until = $3 FROM picked \
                 WHERE s.id = picked.id RETURNING s.id, s.updated_at"
            ),
        }
    }
}

/// Sessions in PostgreSQL, shared by any number of processes.
///
/// Built on `tokio-postgres` with a `deadpool` pool; nothing is needed at
/// build time. [`connect`](Self::connect) brings the schema up to date
/// before it returns (see "Migrations").
///
/// # Tables
///
/// In the schema `harness` (see [`PostgresOptions::schema`]);
/// [`schema`](Self::schema) gives the SQL:
///
/// - `sessions`: one row per session. `head` is the head
///   ([`StoredRun`]) as JSON, exactly as serialized; the other columns are
///   extracted from it at every commit for queries, so a new field of the
///   head needs no migration:
///   `id` (text, primary key), `version` (bigint), `phase` (`running`,
///   `interrupted`, `completed` or `failed`), `lease_owner`,
///   `lease_expires_at` and `updated_at` (bigint, ms since the epoch; values
///   past `i64::MAX` are stored as `i64::MAX`), and `claimed_until` (see
///   "Finding work"), which is not part of the head. A partial index on
///   `(agent_id, updated_at, id) WHERE phase = 'running'` serves
///   [`runnable`](SessionStore::runnable), and an index on
///   `(id COLLATE "C")` (the ids in byte order, whatever the database's
///   collation) serves [`sessions_page`](SessionStore::sessions_page).
///   That index is no migration: a writer whose role owns the table
///   creates it when missing (at its first open after an upgrade, in the
///   migration transaction, which holds commits while it builds), older
///   builds work beside it, and without it a page scans the table.
/// - `checkpoints`: one row per checkpoint: `session_id` (references
///   `sessions`, deleting a session deletes its log), `seq`
///   (`numeric(20,0)`: every `u64`), `checkpoint` (the [`Checkpoint`] as
///   JSON); primary key `(session_id, seq)`.
/// - `created`: the feed of created sessions (see below): `xid` (`xid8`,
///   the creating transaction's id) and `id`, primary key `(xid, id)`. No
///   migration either, made by the same rule as the index above on
///   PostgreSQL 13 or later.
/// - `schema_migrations`: `version`, `name`, `applied_at` of each applied
///   migration.
///
/// JSON is kept as `text`, not `jsonb`: `jsonb` cannot hold `\u0000` in a
/// string and reorders keys, and the store must give back what it was
/// given. Cast to `jsonb` to query inside (`head::jsonb -> 'journal'`; the
/// cast fails on a document holding `\u0000`).
/// Session ids are stored as they are, except that `%` is stored as `%25`
/// and the NUL character (which PostgreSQL text cannot hold) as `%00`.
///
/// # Commits
///
/// A commit is first sent as one statement, one round trip and one
/// implicit transaction: the head is updated only where its `version`
/// column and the stored head's own `version` and `schema_version` are the
/// expected ones, the superseded checkpoints deleted and the new ones
/// upserted in the same statement (`WITH … UPDATE … RETURNING`, the
/// checkpoint statements joined to its result, so nothing is written when
/// the head is not), and `synchronous_commit` set for that transaction
/// alone (see "Durability"). A new session is inserted the same way. When
/// that statement applies nothing or fails (a conflict, a head that is not
/// JSON or of another schema version), the commit is made again as below,
/// which finds and reports why.
///
/// That full commit is one transaction: the stored head is locked
/// (`SELECT … FOR UPDATE`), read and checked (an unreadable head or one of
/// another schema version is a [`StoreError::Load`], and is never
/// overwritten), its version compared with the expected one (else
/// [`StoreError::Conflict`] with the version found), then the head is
/// updated and the checkpoints deleted and upserted. Creating a session is
/// `INSERT … ON CONFLICT DO NOTHING`; when a row is already there, the
/// commit reads it to report the version found.
///
/// # Durability
///
/// A `durable` commit returns once PostgreSQL has committed it, which with
/// the default `synchronous_commit = on` means its WAL is flushed to disk
/// (and, with synchronous replication, to the standbys the server waits
/// for). If the server is configured with `synchronous_commit = off`, the
/// store sets it `on` for its durable commits. A commit with
/// `durable = false` is sent with `synchronous_commit = off`: still atomic,
/// visible to every reader at once, but a crash of the server (not of this
/// process) may lose the last few hundred milliseconds of such commits.
/// [`flush`](SessionStore::flush) commits a small synchronous transaction,
/// which flushes the WAL of every earlier commit.
///
/// # Feed of created sessions
///
/// [`created_since`](SessionStore::created_since) reads `created`, which
/// every creation writes in its own transaction (the one statement, or the
/// transaction after it), stamped with `pg_current_xact_id()`. Positions
/// are transaction ids. Transactions commit in another order than they
/// began, so a read gives only the rows of transactions older than the
/// oldest one still running on the server (`pg_snapshot_xmin`): every such
/// transaction has ended, so no creation can appear later behind the
/// position a reader moves to, and a creation waits for the transactions
/// begun before it, whatever they do, to end. A transaction anywhere on the
/// server that has written and stays open (a long batch update, a client
/// idle in a transaction after a write) holds new sessions back from the
/// feed until it ends; one that only reads holds nothing back, as it has
/// no transaction id. The store's own transactions are one statement or a
/// few. The position of `None` is just below that
/// oldest transaction, so a creation committed just before it, but after
/// it began, is given again after it. Asked from a position no ended
/// transaction of the server has (at or above the oldest one running: the
/// database was restored into another server, whose ids are lower), the
/// feed is read from its start. A read takes whole transactions, so
/// a page may pass its limit if a writer other than this store created
/// several sessions in one.
///
/// A store finds the table when it opens: without it (a server before 13,
/// a schema whose owner has not opened it since, a role without the
/// rights to read it, or to write it unless read-only) the store keeps no
/// feed, and readers list every id instead. A writer opened while the
/// table was there refuses creations, with an error naming the feed, if
/// it is dropped. Sessions a build before this one creates beside it are
/// not in the feed.
///
/// # Finding work
///
/// [`runnable`](SessionStore::runnable) selects running sessions with no
/// live lease, oldest `updated_at` first, `FOR UPDATE SKIP LOCKED`. The row
/// locks alone would not keep two workers apart: they last only as long as
/// the transaction, which ends when `runnable` returns, well before the
/// worker's compare-and-set commit that takes the session, so every worker
/// would get the same oldest sessions and all but one would lose the race.
/// The store therefore also sets a short claim, `claimed_until = now +
/// claim_ttl` (default 10 s), in the same statement, and skips claimed rows:
/// concurrent callers get disjoint sessions, `SKIP LOCKED` makes that so
/// without waiting even while their statements overlap, and a caller that
/// never takes what it got (it crashed, or chose not to) only hides those
/// sessions for the claim time. Any commit of a session clears its claim.
/// The claim is a hint, not a lock: taking a session is still the
/// compare-and-set on its head, so a claim that ran out (a slow worker)
/// costs a conflict, never a double run. With
/// [`claim_ttl`](PostgresOptions::claim_ttl) zero, `runnable` is a plain
/// read and changes nothing.
///
/// A row whose `id` this store never writes (a `%` not followed by `25` or
/// `00`: inserted by another tool or by hand) is no session of the store:
/// `runnable` passes over it (it is neither returned nor claimed), and
/// [`sessions`](SessionStore::sessions) leaves it out with a warning naming
/// it, so that one such row does not hide every other session.
///
/// # Migrations
///
/// [`connect`](Self::connect) creates the schema and tables if needed and
/// applies the migrations not yet recorded in `schema_migrations`, all in
/// one transaction holding `pg_advisory_xact_lock` on a key derived from
/// the schema's name, so several processes can start at once: one migrates,
/// the others wait for it and find nothing left to do. A database migrated
/// by a newer build (a version this build does not know) is refused rather
/// than misused. A store opened [read-only](PostgresOptions::read_only)
/// migrates nothing and refuses a schema that is not up to date.
///
/// Connections are made without TLS; for TLS, build a `deadpool_postgres`
/// pool with a TLS connector and use [`from_pool`](Self::from_pool).
///
/// ```no_run
/// use harness_stores::PostgresStore;
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let store = PostgresStore::connect("postgres://agent@localhost/agents").await?;
/// # Ok::<(), harness::session::StoreError>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    schema: String,
    sql: Arc<Sql>,
    claim_ttl: Duration,
    /// The server's `synchronous_commit` is `off`: durable commits set it.
    force_sync: bool,
    /// Opened with [`PostgresOptions::read_only`].
    read_only: bool,
    /// The server's clock, by which leases are judged.
    clock: Arc<ServerClock>,
    /// The schema has the feed of created sessions, and this role may use
    /// it (write it, unless read-only, and read it).
    feed: bool,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("schema", &self.schema)
            .field("claim_ttl", &self.claim_ttl)
            .field("read_only", &self.read_only)
            .finish_non_exhaustive()
    }
}

/// A backend error: what failed, and PostgreSQL's own message (never the
/// connection string).
fn pg_error(what: impl Display, e: &tokio_postgres::Error) -> StoreError {
    StoreError::backend(format!("postgres store: cannot {what}: {}", describe(e)))
}

fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut s = format!(
            "{}: {} (SQLSTATE {})",
            db.severity(),
            db.message(),
            db.code().code()
        );
        if let Some(detail) = db.detail() {
            s.push_str(&format!("; {detail}"));
        }
        return s;
    }
    let mut s = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        s.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    s
}

fn pool_error(what: impl Display, e: &PoolError) -> StoreError {
    match e {
        PoolError::Backend(e) => pg_error(what, e),
        other => StoreError::backend(format!("postgres store: cannot {what}: {other}")),
    }
}

/// Where a connection goes, for messages: hosts, ports and database, never
/// the user's password.
fn target(config: &Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    let ports: Vec<String> = config.get_ports().iter().map(ToString::to_string).collect();
    format!(
        "{} port {} database {}",
        if hosts.is_empty() {
            "localhost".into()
        } else {
            hosts.join(",")
        },
        if ports.is_empty() {
            "5432".into()
        } else {
            ports.join(",")
        },
        config.get_dbname().unwrap_or("(default)")
    )
}

/// `name` quoted as an SQL identifier.
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A stable 64-bit FNV-1a hash: the advisory lock key of a schema's
/// migrations, the same in every build and process.
fn lock_key(schema: &str) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in "harness-stores migrations\0".bytes().chain(schema.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    i64::from_ne_bytes(h.to_ne_bytes())
}

fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn phase_name(phase: &SessionPhase) -> &'static str {
    match phase {
        SessionPhase::Running => "running",
        SessionPhase::Interrupted { .. } => "interrupted",
        SessionPhase::Completed { .. } => "completed",
        SessionPhase::Failed { .. } => "failed",
    }
}

/// A checkpoint's seq as the text the `numeric` column is written from.
fn seq_text(seq: u64) -> String {
    seq.to_string()
}

impl PostgresStore {
    /// Connects to `url` (`postgres://user:password@host:port/database`, or
    /// `key=value` pairs) with the default [`PostgresOptions`] and brings the
    /// schema up to date.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_with(url, PostgresOptions::default()).await
    }

    /// Connects to `url` with `options` and brings the schema up to date.
    pub async fn connect_with(url: &str, options: PostgresOptions) -> Result<Self, StoreError> {
        let mut config: Config = url.parse().map_err(|e: tokio_postgres::Error| {
            StoreError::backend(format!(
                "postgres store: the connection string cannot be parsed: {}",
                describe(&e)
            ))
        })?;
        if options.read_only {
            // The server refuses every write of these connections.
            let read_only = "-c default_transaction_read_only=on";
            let merged = match config.get_options() {
                Some(given) if !given.trim().is_empty() => format!("{given} {read_only}"),
                _ => read_only.to_owned(),
            };
            config.options(&merged);
        }
        let where_ = target(&config);
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.pool_size)
            .runtime(Runtime::Tokio1)
            .create_timeout(Some(Duration::from_secs(30)))
            .build()
            .map_err(|e| {
                StoreError::backend(format!("postgres store: cannot build the pool: {e}"))
            })?;
        Self::from_pool_at(pool, options, &where_).await
    }

    /// A store on an existing pool (e.g. one with a TLS connector); brings
    /// the schema of `options` up to date. The pool size of `options` is
    /// ignored.
    pub async fn from_pool(pool: Pool, options: PostgresOptions) -> Result<Self, StoreError> {
        Self::from_pool_at(pool, options, "the pool's server").await
    }

    async fn from_pool_at(
        pool: Pool,
        options: PostgresOptions,
        where_: &str,
    ) -> Result<Self, StoreError> {
        let schema = options.schema;
        if schema.is_empty() || schema.len() > 63 || schema.contains('\0') {
            return Err(StoreError::backend(format!(
                "postgres store: invalid schema name {schema:?}: it must have 1 to 63 bytes and no NUL"
            )));
        }
        let quoted = quote_ident(&schema);
        let mut client = pool
            .get()
            .await
            .map_err(|e| pool_error(format_args!("connect to {where_}"), &e))?;
        if options.read_only {
            check_migrated(&client, &schema, &quoted).await?;
        } else {
            migrate(&mut client, &schema, &quoted).await?;
        }
        let sync: String = client
            .query_one("SELECT current_setting('synchronous_commit')", &[])
            .await
            .and_then(|row| row.try_get(0))
            .map_err(|e| pg_error("read synchronous_commit", &e))?;
        let feed = has_feed(&client, &schema, &quoted, options.read_only).await?;
        let clock = Arc::new(ServerClock::default());
        refresh_clock(&clock, &client).await;
        drop(client);
        Ok(Self {
            clock,
            pool,
            feed,
            sql: Arc::new(Sql::new(&quoted, feed)),
            schema,
            claim_ttl: if options.read_only {
                Duration::ZERO
            } else {
                options.claim_ttl
            },
            force_sync: sync == "off",
            read_only: options.read_only,
        })
    }

    /// The pool, for inspection and repair tools.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The name of the schema holding the tables.
    pub fn schema_name(&self) -> &str {
        &self.schema
    }

    /// The SQL that creates this store's tables: every migration, in order,
    /// with the schema's name in it.
    pub fn schema(&self) -> String {
        schema_sql(&quote_ident(&self.schema))
    }

    /// The value of the `id` columns for `session`: the id itself, with `%`
    /// written `%25` and NUL written `%00`.
    fn stored_id(session: &SessionId) -> String {
        let id = session.as_str();
        if !id.contains(['%', '\0']) {
            return id.to_owned();
        }
        let mut out = String::with_capacity(id.len() + 4);
        for c in id.chars() {
            match c {
                '%' => out.push_str("%25"),
                '\0' => out.push_str("%00"),
                c => out.push(c),
            }
        }
        out
    }

    /// The session of an `id` column's value; `None` if it is not one
    /// [`stored_id`](Self::stored_id) writes.
    fn session_of(stored: &str) -> Option<SessionId> {
        if !stored.contains('%') {
            return (!stored.contains('\0')).then(|| SessionId::from(stored));
        }
        let mut out = String::with_capacity(stored.len());
        let mut rest = stored;
        while let Some(at) = rest.find('%') {
            out.push_str(&rest[..at]);
            match rest.get(at + 1..at + 3) {
                Some("25") => out.push('%'),
                Some("00") => out.push('\0'),
                _ => return None,
            }
            rest = &rest[at + 3..];
        }
        out.push_str(rest);
        Some(SessionId::from(out))
    }

    /// The session of an `id` column's value, or `None` with a warning
    /// naming the row: a row whose id this store never writes (inserted by
    /// another tool or by hand) is no session of this store, and must not
    /// fail a listing of all the others.
    fn session_or_warn(&self, stored: &str) -> Option<SessionId> {
        let session = Self::session_of(stored);
        if session.is_none() {
            tracing::warn!(
                schema = %self.schema,
                id = stored,
                "postgres store: skipping a sessions row whose id this store never writes \
                 (a % not followed by 25 or 00)"
            );
        }
        session
    }

    /// The sessions of rows whose first column is an id, those the store
    /// never writes passed over (with a warning).
    fn sessions_of(
        &self,
        rows: &[tokio_postgres::Row],
        what: &str,
    ) -> Result<Vec<SessionId>, StoreError> {
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let id: String = row.try_get(0).map_err(|e| pg_error(what, &e))?;
            out.extend(self.session_or_warn(&id));
        }
        Ok(out)
    }

    async fn client(&self, what: impl Display) -> Result<Object, StoreError> {
        self.pool.get().await.map_err(|e| pool_error(what, &e))
    }

    async fn commit_inner(&self, commit: &Commit) -> Result<(), StoreError> {
        let head = &commit.head;
        let session = &head.session_id;
        let id = Self::stored_id(session);
        let what = |op: &str| format!("{op} (commit of session {session})");
        let doc = String::from_utf8(crate::record::head_to_vec(head)?).map_err(|e| {
            StoreError::backend(format!(
                "session {session}: the head's JSON is not UTF-8: {e}"
            ))
        })?;
        let version = i64::try_from(head.version).map_err(|_| {
            StoreError::backend(format!(
                "postgres store: session {session}: version {} is beyond what the store keeps (i64::MAX)",
                head.version
            ))
        })?;
        let phase = phase_name(&head.phase);
        let lease_owner = head.lease.as_ref().map(|l| l.owner.as_str());
        let lease_expires = head.lease.as_ref().map(|l| clamp(l.expires_at));
        let updated = clamp(head.updated_at);
        // Appends overwrite, last one wins; a seq both removed and appended
        // ends appended, as when the removal is applied first.
        let mut append: BTreeMap<u64, String> = BTreeMap::new();
        for cp in &commit.append {
            let json = String::from_utf8(checkpoint_to_vec(session, cp)?).map_err(|e| {
                StoreError::backend(format!(
                    "session {session}: checkpoint {} is not UTF-8: {e}",
                    cp.seq
                ))
            })?;
            append.insert(cp.seq, json);
        }
        let remove: BTreeSet<u64> = commit
            .remove
            .iter()
            .copied()
            .filter(|seq| !append.contains_key(seq))
            .collect();
        let append_seqs: Vec<String> = append.keys().copied().map(seq_text).collect();
        let append_docs: Vec<String> = append.into_values().collect();
        let remove_seqs: Vec<String> = remove.into_iter().map(seq_text).collect();

        let mut client = self.client(what("connect")).await?;
        if self.clock.is_stale() {
            refresh_clock(&self.clock, &client).await;
        }
        // The commit in one statement; when it applies nothing (a conflict,
        // a head this build cannot judge by its columns) or fails, the
        // transaction below does it again step by step and says why.
        let sync_value: Option<&str> = if !commit.durable {
            Some("off")
        } else if self.force_sync {
            Some("on")
        } else {
            None
        };
        let sql = &*self.sql;
        let fast = match commit.expected_version {
            Some(expected) => {
                let expected = clamp(expected);
                let schema_version =
                    i32::try_from(harness::session::SCHEMA_VERSION).unwrap_or(i32::MAX);
                match client.prepare_cached(&sql.fast_update).await {
                    Ok(stmt) => {
                        client
                            .query_one(
                                &stmt,
                                &[
                                    &id,
                                    &doc,
                                    &version,
                                    &phase,
                                    &lease_owner,
                                    &lease_expires,
                                    &updated,
                                    &head.agent_id,
                                    &expected,
                                    &remove_seqs,
                                    &append_seqs,
                                    &append_docs,
                                    &sync_value,
                                    &schema_version,
                                ],
                            )
                            .await
                    }
                    Err(e) => Err(e),
                }
            }
            None => match client.prepare_cached(&sql.fast_create).await {
                Ok(stmt) => {
                    client
                        .query_one(
                            &stmt,
                            &[
                                &id,
                                &doc,
                                &version,
                                &phase,
                                &lease_owner,
                                &lease_expires,
                                &updated,
                                &head.agent_id,
                                &append_seqs,
                                &append_docs,
                                &sync_value,
                            ],
                        )
                        .await
                }
                Err(e) => Err(e),
            },
        };
        match fast.and_then(|row| row.try_get::<_, i64>(0)) {
            Ok(1) => return Ok(()),
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(session = %session, error = %describe(&e), "postgres store: the one-statement commit failed; committing step by step");
            }
        }
        let sync = if !commit.durable {
            Some("SET LOCAL synchronous_commit TO off")
        } else if self.force_sync {
            Some("SET LOCAL synchronous_commit TO on")
        } else {
            None
        };
        let tx = client
            .transaction()
            .await
            .map_err(|e| pg_error(what("begin"), &e))?;
        if let Some(sync) = sync {
            tx.batch_execute(sync)
                .await
                .map_err(|e| pg_error(what("set synchronous_commit"), &e))?;
        }
        match commit.expected_version {
            None => {
                let insert = tx
                    .prepare_cached(&sql.insert_session)
                    .await
                    .map_err(|e| pg_error(what("prepare"), &e))?;
                let inserted = tx
                    .execute(
                        &insert,
                        &[
                            &id,
                            &doc,
                            &version,
                            &phase,
                            &lease_owner,
                            &lease_expires,
                            &updated,
                            &head.agent_id,
                        ],
                    )
                    .await
                    .map_err(|e| pg_error(what("insert the head"), &e))?;
                if inserted == 0 {
                    // Already there: report what is there.
                    let row = tx
                        .query_opt(&sql.select_head, &[&id])
                        .await
                        .map_err(|e| pg_error(what("read the existing head"), &e))?;
                    let found = match row {
                        Some(row) => {
                            let stored: String = row
                                .try_get(0)
                                .map_err(|e| pg_error(what("read the existing head"), &e))?;
                            Some(head_from_slice(session, stored.as_bytes())?.version)
                        }
                        None => None,
                    };
                    return Err(StoreError::Conflict {
                        session: session.clone(),
                        expected: None,
                        found,
                    });
                }
                if self.feed {
                    let insert = tx
                        .prepare_cached(&sql.insert_created)
                        .await
                        .map_err(|e| pg_error(what("prepare"), &e))?;
                    tx.execute(&insert, &[&id])
                        .await
                        .map_err(|e| pg_error(what("add the session to the feed"), &e))?;
                }
            }
            Some(expected) => {
                let select = tx
                    .prepare_cached(&sql.select_head_for_update)
                    .await
                    .map_err(|e| pg_error(what("prepare"), &e))?;
                let row = tx
                    .query_opt(&select, &[&id])
                    .await
                    .map_err(|e| pg_error(what("lock the head"), &e))?;
                let found = match row {
                    Some(row) => {
                        let stored: String = row
                            .try_get(0)
                            .map_err(|e| pg_error(what("read the head"), &e))?;
                        Some(head_from_slice(session, stored.as_bytes())?.version)
                    }
                    None => None,
                };
                if found != Some(expected) {
                    return Err(StoreError::Conflict {
                        session: session.clone(),
                        expected: Some(expected),
                        found,
                    });
                }
                let update = tx
                    .prepare_cached(&sql.update_session)
                    .await
                    .map_err(|e| pg_error(what("prepare"), &e))?;
                tx.execute(
                    &update,
                    &[
                        &id,
                        &doc,
                        &version,
                        &phase,
                        &lease_owner,
                        &lease_expires,
                        &updated,
                        &head.agent_id,
                    ],
                )
                .await
                .map_err(|e| pg_error(what("update the head"), &e))?;
            }
        }
        if !remove_seqs.is_empty() {
            let delete = tx
                .prepare_cached(&sql.delete_checkpoints)
                .await
                .map_err(|e| pg_error(what("prepare"), &e))?;
            tx.execute(&delete, &[&id, &remove_seqs])
                .await
                .map_err(|e| pg_error(what("delete checkpoints"), &e))?;
        }
        if !append_seqs.is_empty() {
            let upsert = tx
                .prepare_cached(&sql.upsert_checkpoints)
                .await
                .map_err(|e| pg_error(what("prepare"), &e))?;
            tx.execute(&upsert, &[&id, &append_seqs, &append_docs])
                .await
                .map_err(|e| pg_error(what("write checkpoints"), &e))?;
        }
        tx.commit()
            .await
            .map_err(|e| pg_error(what("commit the transaction"), &e))
    }
}

/// The SQL of every migration for the quoted schema `s`.
fn schema_sql(s: &str) -> String {
    let mut out = format!(
        "CREATE SCHEMA IF NOT EXISTS {s};\n\
         CREATE TABLE {s}.schema_migrations (\n    \
         version    integer PRIMARY KEY,\n    \
         name       text NOT NULL,\n    \
         applied_at timestamptz NOT NULL DEFAULT now()\n);\n"
    );
    for (version, name, sql) in MIGRATIONS {
        out.push_str(&format!(
            "-- migration {version}: {name}\n{}\n",
            sql.replace("{s}", s)
        ));
    }
    for (name, sql) in READ_INDEXES {
        out.push_str(&format!(
            "-- read index {name} (no migration)\n{}\n",
            sql.replace("{s}", s)
        ));
    }
    out.push_str(&format!(
        "-- the feed of created sessions (no migration; PostgreSQL 13 or later)\n{}\n",
        FEED_TABLE.replace("{s}", s)
    ));
    out
}

/// Whether the schema has the feed of created sessions and this role may
/// read it and, unless `read_only`, write it.
async fn has_feed(
    client: &Object,
    schema: &str,
    quoted: &str,
    read_only: bool,
) -> Result<bool, StoreError> {
    let table = format!("{quoted}.created");
    let row = client
        .query_one(
            "SELECT to_regclass($1) IS NOT NULL \
               AND has_table_privilege(to_regclass($1), 'SELECT') \
               AND ($2 OR has_table_privilege(to_regclass($1), 'INSERT'))",
            &[&table, &read_only],
        )
        .await
        .map_err(|e| pg_error(format!("look for the feed of schema {schema:?}"), &e))?;
    row.try_get::<_, Option<bool>>(0)
        .map(|found| found.unwrap_or(false))
        .map_err(|e| pg_error(format!("look for the feed of schema {schema:?}"), &e))
}

/// Refuses a schema migrated by a newer build (a migration this build does
/// not know).
fn refuse_newer(schema: &str, applied: &BTreeSet<i32>) -> Result<(), StoreError> {
    let known = MIGRATIONS.iter().map(|m| m.0).max().unwrap_or(0);
    match applied.iter().next_back() {
        Some(&newest) if newest > known => Err(StoreError::backend(format!(
            "postgres store: schema {schema:?} has migration {newest} applied, and this build knows \
             migrations up to {known} only: it was migrated by a newer build; upgrade this one"
        ))),
        _ => Ok(()),
    }
}

/// For a read-only store: the schema must have every migration this build
/// knows, and none it does not; nothing is created.
async fn check_migrated(client: &Object, schema: &str, quoted: &str) -> Result<(), StoreError> {
    let what = |op: &str| format!("{op} (migrations of schema {schema:?})");
    let table = format!("{quoted}.schema_migrations");
    let table_exists = client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
        .await
        .and_then(|row| row.try_get::<_, bool>(0))
        .map_err(|e| pg_error(what("look for schema_migrations"), &e))?;
    if !table_exists {
        return Err(StoreError::backend(format!(
            "postgres store: schema {schema:?} holds no sessions (it has no schema_migrations \
             table); a store opened read-only creates nothing"
        )));
    }
    let applied: BTreeSet<i32> = client
        .query(&format!("SELECT version FROM {table}"), &[])
        .await
        .map_err(|e| pg_error(what("read schema_migrations"), &e))?
        .iter()
        .map(|row| row.try_get::<_, i32>(0))
        .collect::<Result<_, _>>()
        .map_err(|e| pg_error(what("read schema_migrations"), &e))?;
    refuse_newer(schema, &applied)?;
    if let Some((version, name, _)) = MIGRATIONS.iter().find(|m| !applied.contains(&m.0)) {
        return Err(StoreError::backend(format!(
            "postgres store: schema {schema:?} lacks migration {version} ({name}); a store \
             opened read-only does not migrate: connect once without read_only"
        )));
    }
    Ok(())
}

/// Brings the schema up to date, in one transaction under an advisory lock.
async fn migrate(client: &mut Object, schema: &str, quoted: &str) -> Result<(), StoreError> {
    let what = |op: &str| format!("{op} (migrations of schema {schema:?})");
    let tx = client
        .transaction()
        .await
        .map_err(|e| pg_error(what("begin"), &e))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&lock_key(schema)])
        .await
        .map_err(|e| pg_error(what("take the migration lock"), &e))?;
    // Create only what is missing, so that a role without CREATE rights can
    // use a schema made for it.
    let schema_exists = tx
        .query_opt("SELECT 1 FROM pg_namespace WHERE nspname = $1", &[&schema])
        .await
        .map_err(|e| pg_error(what("look for the schema"), &e))?
        .is_some();
    if !schema_exists {
        tx.batch_execute(&format!("CREATE SCHEMA {quoted}"))
            .await
            .map_err(|e| pg_error(what("create the schema"), &e))?;
    }
    let table = format!("{quoted}.schema_migrations");
    let table_exists = tx
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
        .await
        .and_then(|row| row.try_get::<_, bool>(0))
        .map_err(|e| pg_error(what("look for schema_migrations"), &e))?;
    if !table_exists {
        tx.batch_execute(&format!(
            "CREATE TABLE {table} (version integer PRIMARY KEY, name text NOT NULL, \
             applied_at timestamptz NOT NULL DEFAULT now())"
        ))
        .await
        .map_err(|e| pg_error(what("create schema_migrations"), &e))?;
    }
    let applied: BTreeSet<i32> = tx
        .query(&format!("SELECT version FROM {table}"), &[])
        .await
        .map_err(|e| pg_error(what("read schema_migrations"), &e))?
        .iter()
        .map(|row| row.try_get::<_, i32>(0))
        .collect::<Result<_, _>>()
        .map_err(|e| pg_error(what("read schema_migrations"), &e))?;
    refuse_newer(schema, &applied)?;
    for (version, name, sql) in MIGRATIONS {
        if applied.contains(version) {
            continue;
        }
        tx.batch_execute(&sql.replace("{s}", quoted))
            .await
            .map_err(|e| pg_error(what(&format!("apply migration {version} ({name})")), &e))?;
        tx.execute(
            &format!("INSERT INTO {table} (version, name) VALUES ($1, $2)"),
            &[version, name],
        )
        .await
        .map_err(|e| pg_error(what(&format!("record migration {version}")), &e))?;
    }
    // The read indexes missing, when this role owns the sessions table (as
    // creating an index asks); otherwise reads go on without them.
    let owner = tx
        .query_one(
            "SELECT pg_has_role(c.relowner, 'USAGE') FROM pg_class c \
             WHERE c.oid = to_regclass($1)",
            &[&format!("{quoted}.sessions")],
        )
        .await
        .and_then(|row| row.try_get::<_, bool>(0))
        .map_err(|e| pg_error(what("look up the owner of the sessions table"), &e))?;
    for (name, sql) in READ_INDEXES {
        let exists = tx
            .query_one(
                "SELECT to_regclass($1) IS NOT NULL",
                &[&format!("{quoted}.{}", quote_ident(name))],
            )
            .await
            .and_then(|row| row.try_get::<_, bool>(0))
            .map_err(|e| pg_error(what(&format!("look for index {name}")), &e))?;
        if exists {
            continue;
        }
        if owner {
            tx.batch_execute(&sql.replace("{s}", quoted))
                .await
                .map_err(|e| pg_error(what(&format!("create index {name}")), &e))?;
        } else {
            tracing::info!(
                schema,
                index = name,
                "postgres store: this role does not own the sessions table, so it does not \
                 create the index; reads that would use it scan the table instead"
            );
        }
    }
    // The feed of created sessions, by the same rule; `xid8` is new in 13.
    let version: i32 = tx
        .query_one("SELECT current_setting('server_version_num')::integer", &[])
        .await
        .and_then(|row| row.try_get(0))
        .map_err(|e| pg_error(what("read the server's version"), &e))?;
    let exists = tx
        .query_one(
            "SELECT to_regclass($1) IS NOT NULL",
            &[&format!("{quoted}.created")],
        )
        .await
        .and_then(|row| row.try_get::<_, bool>(0))
        .map_err(|e| pg_error(what("look for the feed of created sessions"), &e))?;
    if !exists && owner && version >= 130_000 {
        tx.batch_execute(&FEED_TABLE.replace("{s}", quoted))
            .await
            .map_err(|e| pg_error(what("create the feed of created sessions"), &e))?;
    } else if !exists {
        tracing::info!(
            schema,
            server_version = version,
            "postgres store: no feed of created sessions (it needs PostgreSQL 13 or later and \
             the role that owns the sessions table); readers that follow new sessions list \
             every id instead"
        );
    }
    tx.commit().await.map_err(|e| pg_error(what("commit"), &e))
}

/// Measures the server's clock against this machine's. A failure keeps the
/// last estimate (this machine's clock before the first): the clock is
/// measured again at the next chance.
async fn refresh_clock(clock: &ServerClock, client: &Object) {
    let read = clock.measure(async {
        let server: i64 = client
            .query_one(
                "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint",
                &[],
            )
            .await
            .and_then(|row| row.try_get(0))?;
        Ok::<_, tokio_postgres::Error>(u64::try_from(server).unwrap_or(0))
    });
    if let Err(e) = read.await {
        tracing::warn!(error = %describe(&e), "postgres store: cannot read the server's clock");
    }
}

#[async_trait]
impl SessionStore for PostgresStore {
    fn now(&self) -> u64 {
        self.clock.now()
    }

    async fn load(&self, session: &SessionId) -> Result<Option<StoredRun>, StoreError> {
        let what = format!("read the head of session {session}");
        let client = self.client(&what).await?;
        let stmt = client
            .prepare_cached(&self.sql.select_head)
            .await
            .map_err(|e| pg_error(&what, &e))?;
        let row = client
            .query_opt(&stmt, &[&Self::stored_id(session)])
            .await
            .map_err(|e| pg_error(&what, &e))?;
        match row {
            None => Ok(None),
            Some(row) => {
                let doc: String = row.try_get(0).map_err(|e| pg_error(&what, &e))?;
                head_from_slice(session, doc.as_bytes()).map(Some)
            }
        }
    }

    async fn commit(&self, commit: &Commit) -> Result<(), StoreError> {
        if self.read_only {
            return Err(StoreError::backend(format!(
                "postgres store (schema {:?}): opened read-only, it refuses the commit of session {}",
                self.schema, commit.head.session_id
            )));
        }
        self.commit_inner(commit).await
    }

    async fn checkpoints(
        &self,
        session: &SessionId,
        from_seq: u64,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        let what = format!("read the log of session {session}");
        let client = self.client(&what).await?;
        let stmt = client
            .prepare_cached(&self.sql.select_checkpoints)
            .await
            .map_err(|e| pg_error(&what, &e))?;
        let rows = client
            .query(&stmt, &[&Self::stored_id(session), &seq_text(from_seq)])
            .await
            .map_err(|e| pg_error(&what, &e))?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let seq: String = row.try_get(0).map_err(|e| pg_error(&what, &e))?;
            let doc: String = row.try_get(1).map_err(|e| pg_error(&what, &e))?;
            let seq: u64 = seq.parse().map_err(|_| {
                load_error(session, format!("checkpoint {seq}"), "the seq is not a u64")
            })?;
            out.push(checkpoint_from_slice(session, seq, doc.as_bytes())?);
        }
        Ok(out)
    }

    async fn sessions(&self) -> Result<Vec<SessionId>, StoreError> {
        let what = "list the sessions";
        let client = self.client(what).await?;
        let rows = client
            .query(&self.sql.select_sessions, &[])
            .await
            .map_err(|e| pg_error(what, &e))?;
        self.sessions_of(&rows, what)
    }

    /// In the byte order of the stored ids (the index
    /// `sessions_by_id_bytes`): the ids' own order, but that `%` and NUL
    /// are stored escaped (`%25`, `%00`), so an id holding one sorts as its
    /// escaped form.
    async fn sessions_page(
        &self,
        prefix: &str,
        after: Option<&SessionId>,
        limit: usize,
    ) -> Result<Vec<SessionId>, StoreError> {
        let what = "list a page of the sessions";
        let prefix = Self::stored_id(&SessionId::from(prefix));
        // Escaping is char by char, so an id starts with the prefix if and
        // only if its stored form starts with the prefix's.
        let after = after
            .map(Self::stored_id)
            .filter(|after| after.as_str() >= prefix.as_str());
        let end = prefix_end(&prefix);
        let sql = &self.sql.select_sessions_page[usize::from(after.is_some())]
            [usize::from(end.is_some())];
        let from = after.as_deref().unwrap_or(&prefix);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let client = self.client(what).await?;
        // Prepared once per connection: a listing of pages asks many.
        let statement = client
            .prepare_cached(sql)
            .await
            .map_err(|e| pg_error(what, &e))?;
        let rows = client
            .query(&statement, &[&from, &end.as_deref().unwrap_or(""), &limit])
            .await
            .map_err(|e| pg_error(what, &e))?;
        self.sessions_of(&rows, what)
    }

    /// From the table `created` (see "Feed of created sessions"):
    /// positions are transaction ids.
    async fn created_since(
        &self,
        since: Option<u64>,
        limit: usize,
    ) -> Result<Option<Created>, StoreError> {
        if !self.feed {
            return Ok(None);
        }
        let what = "read the feed of created sessions";
        let client = self.client(what).await?;
        let Some(since) = since else {
            // Every transaction below the oldest one running has ended: a
            // creation not yet visible has a later id.
            let xmin: String = client
                .query_one("SELECT pg_snapshot_xmin(pg_current_snapshot())::text", &[])
                .await
                .and_then(|row| row.try_get(0))
                .map_err(|e| pg_error(what, &e))?;
            let xmin: u64 = xmin.parse().map_err(|_| {
                StoreError::backend(format!("postgres store: {what}: xmin {xmin:?} is no u64"))
            })?;
            return Ok(Some(Created {
                sessions: Vec::new(),
                next: xmin.saturating_sub(1),
            }));
        };
        if limit == 0 {
            return Ok(Some(Created {
                sessions: Vec::new(),
                next: since,
            }));
        }
        let statement = client
            .prepare_cached(&self.sql.select_created)
            .await
            .map_err(|e| pg_error(what, &e))?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = client
            .query(&statement, &[&since.to_string(), &limit])
            .await
            .map_err(|e| pg_error(what, &e))?;
        let mut page = Created {
            sessions: Vec::with_capacity(rows.len()),
            next: since,
        };
        for row in &rows {
            let xid: String = row.try_get(0).map_err(|e| pg_error(what, &e))?;
            let id: String = row.try_get(1).map_err(|e| pg_error(what, &e))?;
            page.next = xid.parse().map_err(|_| {
                StoreError::backend(format!(
                    "postgres store: {what}: transaction id {xid:?} is no u64"
                ))
            })?;
            page.sessions.extend(self.session_or_warn(&id));
        }
        Ok(Some(page))
    }

    async fn flush(&self) -> Result<(), StoreError> {
        if self.read_only {
            // Nothing was written.
            return Ok(());
        }
        // A synchronous commit that writes WAL (a transaction id) flushes
        // the WAL up to it, so every earlier asynchronous commit too.
        let what = "flush";
        let client = self.client(what).await?;
        client
            .batch_execute(
                "BEGIN; SET LOCAL synchronous_commit TO on; SELECT txid_current(); COMMIT",
            )
            .await
            .map_err(|e| pg_error(what, &e))
    }

    async fn runnable(
        &self,
        agent: &str,
        now: u64,
        limit: usize,
    ) -> Result<Vec<SessionId>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let what = "find runnable sessions";
        let client = self.client(what).await?;
        if self.clock.is_stale() {
            refresh_clock(&self.clock, &client).await;
        }
        let now_i = clamp(now);
        let limit_i = i64::try_from(limit).unwrap_or(i64::MAX);
        let claim_ms = u64::try_from(self.claim_ttl.as_millis()).unwrap_or(u64::MAX);
        let rows = if claim_ms == 0 {
            let stmt = client
                .prepare_cached(&self.sql.runnable_read)
                .await
                .map_err(|e| pg_error(what, &e))?;
            client.query(&stmt, &[&now_i, &limit_i, &agent]).await
        } else {
            let until = clamp(now.saturating_add(claim_ms));
            let stmt = client
                .prepare_cached(&self.sql.runnable_claim)
                .await
                .map_err(|e| pg_error(what, &e))?;
            client
                .query(&stmt, &[&now_i, &limit_i, &until, &agent])
                .await
        }
        .map_err(|e| pg_error(what, &e))?;
        let mut found = Vec::with_capacity(rows.len());
        for row in rows {
            let id: String = row.try_get(0).map_err(|e| pg_error(what, &e))?;
            let updated: i64 = row.try_get(1).map_err(|e| pg_error(what, &e))?;
            found.push((updated, id));
        }
        // RETURNING has no order of its own.
        found.sort();
        Ok(found
            .into_iter()
            .filter_map(|(_, id)| self.session_or_warn(&id))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_ends_at_the_least_string_above_its_strings() {
        for (prefix, end) in [
            ("", None),
            ("a", Some("b")),
            ("harness-server/cron/", Some("harness-server/cron0")),
            ("a\u{D7FF}", Some("a\u{E000}")),
            ("a\u{10FFFF}", Some("b")),
            ("\u{10FFFF}\u{10FFFF}", None),
            ("é", Some("ê")),
        ] {
            let got = prefix_end(prefix);
            assert_eq!(got.as_deref(), end, "{prefix:?}");
            if let Some(end) = got {
                for under in [prefix.to_owned(), format!("{prefix}\u{10FFFF}\u{10FFFF}")] {
                    assert!(under.as_bytes() < end.as_bytes(), "{under:?} < {end:?}");
                }
            }
        }
    }

    #[test]
    fn stored_ids_round_trip() {
        for id in ["a", "", "%", "%25", "a\0b", "%00", "é%\0", "100%", "%2"] {
            let stored = PostgresStore::stored_id(&SessionId::from(id));
            assert!(!stored.contains('\0'));
            assert_eq!(
                PostgresStore::session_of(&stored)
                    .as_ref()
                    .map(SessionId::as_str),
                Some(id),
                "{id:?} stored as {stored:?}"
            );
        }
        assert_eq!(
            PostgresStore::stored_id(&SessionId::from("plain-id")),
            "plain-id"
        );
        assert_eq!(PostgresStore::session_of("%zz"), None);
        assert_eq!(PostgresStore::session_of("%2"), None);
    }

    #[test]
    fn lock_keys_are_stable_and_per_schema() {
        assert_eq!(lock_key("harness"), lock_key("harness"));
        assert_ne!(lock_key("harness"), lock_key("harness2"));
    }

    #[test]
    fn the_schema_sql_names_the_schema() {
        let sql = schema_sql(&quote_ident("my \"x\""));
        assert!(
            sql.contains("CREATE TABLE \"my \"\"x\"\"\".sessions"),
            "{sql}"
        );
        assert!(!sql.contains("{s}"));
    }
}
