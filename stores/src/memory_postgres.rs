//! Long-term memory in PostgreSQL.

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime};
use harness::memory::{Cmp, Filter, Item, MemoryBackend, MemoryError, Namespace, Record, Write};
use serde_json::Value;
use std::fmt::{self, Display};
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Config, NoTls, Row};

/// The schema the table lives in unless told otherwise.
const DEFAULT_SCHEMA: &str = "harness";
/// Connections in the pool unless told otherwise.
const DEFAULT_POOL_SIZE: usize = 16;
/// How many times a batch is tried when the server aborts it for a
/// deadlock or a serialization failure.
const ATTEMPTS: usize = 5;

/// How a [`PostgresMemory`] connects: its schema and pool size.
///
/// ```
/// use harness_stores::PostgresMemoryOptions;
///
/// let options = PostgresMemoryOptions::default().schema("agents").pool_size(4);
/// assert_eq!(options.schema_name(), "agents");
/// ```
#[derive(Clone, Debug)]
pub struct PostgresMemoryOptions {
    schema: String,
    pool_size: usize,
    read_only: bool,
}

impl Default for PostgresMemoryOptions {
    fn default() -> Self {
        Self {
            schema: DEFAULT_SCHEMA.into(),
            pool_size: DEFAULT_POOL_SIZE,
            read_only: false,
        }
    }
}

impl PostgresMemoryOptions {
    /// The schema holding the table (default `harness`, the session
    /// store's: the table names differ); created if missing.
    #[must_use]
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// Opens the table without creating anything (no schema, no table, no
    /// lock taken), and refuses a database without it: for tools that
    /// only read memory others wrote (`harness studio --memory`). Writes
    /// through it are not prevented; such a tool makes none.
    #[must_use]
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// The most connections opened (default 16); ignored by
    /// [`PostgresMemory::from_pool`].
    #[must_use]
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size.max(1);
        self
    }

    /// The schema's name.
    pub fn schema_name(&self) -> &str {
        &self.schema
    }
}

/// The SQL of one backend, with its schema in it.
#[derive(Debug)]
struct Sql {
    table: String,
    create: String,
    put: String,
    delete: String,
    touch: String,
    get: String,
    namespaces: String,
}

/// The columns a record is read from, in this order.
const COLUMNS: &str =
    "namespace, key, value::text, created_at, updated_at, expires_at, ttl_ms, vector";

impl Sql {
    fn new(schema: &str) -> Self {
        let table = format!("{schema}.memory_items");
        let live = "(expires_at IS NULL OR expires_at > $3)";
        Self {
            create: format!(
                r#"CREATE SCHEMA IF NOT EXISTS {schema};
CREATE TABLE IF NOT EXISTS {table} (
    namespace  text[] COLLATE "C" NOT NULL CHECK (cardinality(namespace) > 0),
    key        text COLLATE "C" NOT NULL,
    value      jsonb NOT NULL,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL,
    expires_at bigint,
    ttl_ms     bigint,
    vector     real[],
    PRIMARY KEY (namespace, key)
);"#
            ),
            put: format!(
                "INSERT INTO {table} AS t \
                 (namespace, key, value, created_at, updated_at, expires_at, ttl_ms, vector) \
                 VALUES ($1, $2, $3::text::jsonb, $4, $5, $6, $7, $8) \
                 ON CONFLICT (namespace, key) DO UPDATE SET \
                 value = EXCLUDED.value, \
                 created_at = CASE WHEN t.expires_at IS NULL OR t.expires_at > $9 \
                   THEN t.created_at ELSE EXCLUDED.created_at END, \
                 updated_at = EXCLUDED.updated_at, expires_at = EXCLUDED.expires_at, \
                 ttl_ms = EXCLUDED.ttl_ms, vector = EXCLUDED.vector \
                 RETURNING created_at"
            ),
            delete: format!("DELETE FROM {table} WHERE namespace = $1 AND key = $2"),
            touch: format!(
                "UPDATE {table} SET expires_at = $4 \
                 WHERE namespace = $1 AND key = $2 AND {live} AND expires_at = $5"
            ),
            get: format!(
                "SELECT {COLUMNS} FROM {table} WHERE namespace = $1 AND key = $2 AND {live}"
            ),
            namespaces: format!(
                "SELECT DISTINCT namespace FROM {table} \
                 WHERE expires_at IS NULL OR expires_at > $1 ORDER BY namespace"
            ),
            table,
        }
    }
}

/// Long-term memory in PostgreSQL, shared by any number of processes and
/// machines.
///
/// **Table.** `memory_items` in the schema `harness` (see
/// [`PostgresMemoryOptions::schema`]), created on connect if missing:
///
/// ```sql
/// namespace  text[] COLLATE "C" NOT NULL,   -- the labels
/// key        text COLLATE "C" NOT NULL,
/// value      jsonb NOT NULL,
/// created_at bigint NOT NULL,               -- ms since the epoch
/// updated_at bigint NOT NULL,
/// expires_at bigint,                        -- NULL: no TTL
/// ttl_ms     bigint,
/// vector     real[],                        -- the embedding, if indexed
/// PRIMARY KEY (namespace, key)
/// ```
///
/// The `"C"` collation makes the primary key's order the core's (labels
/// compared byte by byte, a namespace before its children).
///
/// **Writes.** A batch is one transaction (one upsert, delete or update
/// per write, in order), tried again if the server aborts it for a
/// deadlock or a serialization failure; concurrent puts on a key are
/// serialized by its row lock, and the last one wins.
///
/// **Search.** The namespace prefix, expiry and filters are SQL: the
/// prefix as a range of the primary key plus `namespace[1:n] = prefix`;
/// a field as `value -> 'a' -> 'b'` (which, like the core, does not index
/// into arrays); numbers compared as `numeric`, by the exact value of
/// their decimal text (as the core compares them: `1 = 1.0`, and integers
/// beyond 2^53 keep every digit), strings in the `"C"` collation (byte order), and a value
/// of another type matching no ordering. Offset and limit are SQL too,
/// except when a filter compares a field with an array or an object: that
/// filter is applied in this process (the core's equality there, which
/// tells `1` from `1.0` inside arrays, is not jsonb's), and so are offset
/// and limit.
///
/// **Vectors.** pgvector is not packaged for the Debian this project
/// builds on, so vectors are stored as `real[]` (every `f32` bit for bit)
/// and the core's index, in the process, ranks them; the table is read
/// once to build it ([`scan`](MemoryBackend::scan)).
///
/// **Limits.** jsonb cannot hold the character U+0000 in a string: a put
/// of such a value is refused ([`MemoryError::Value`]) and its batch left
/// unapplied. jsonb keeps a number as `numeric`, which has no negative
/// zero: `-0.0` reads back as `0.0` (equal to it in every filter), and a
/// float's exponent is written out (`1e20` reads back as
/// `100000000000000000000`, the same `f64`). Times and TTLs above `i64::MAX` ms are stored as `i64::MAX`.
/// Expired rows stay until a put or delete of their key (never returned);
/// [`purge_expired`](Self::purge_expired) deletes them.
#[derive(Clone)]
pub struct PostgresMemory {
    pool: Pool,
    schema: String,
    sql: Arc<Sql>,
}

impl fmt::Debug for PostgresMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresMemory")
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!(
            "{}: {} (SQLSTATE {})",
            db.severity(),
            db.message(),
            db.code().code()
        );
    }
    let mut s = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        s.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    s
}

fn pg_error(what: impl Display, e: &tokio_postgres::Error) -> MemoryError {
    MemoryError::backend(format!("postgres memory: cannot {what}: {}", describe(e)))
}

fn pool_error(e: &PoolError) -> MemoryError {
    match e {
        PoolError::Backend(e) => pg_error("connect", e),
        other => MemoryError::backend(format!("postgres memory: cannot connect: {other}")),
    }
}

/// `name` quoted as an SQL identifier.
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn unclamp(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// Whether the server aborted a transaction that may succeed if tried
/// again.
fn retryable(e: &tokio_postgres::Error) -> bool {
    e.as_db_error().is_some_and(|db| {
        let code = db.code().code();
        code == "40001" || code == "40P01"
    })
}

/// A record from a row of [`COLUMNS`].
fn record_of(row: &Row) -> Result<Record, MemoryError> {
    let labels: Vec<String> = row.try_get(0).map_err(|e| pg_error("read a row", &e))?;
    let key: String = row.try_get(1).map_err(|e| pg_error("read a row", &e))?;
    let corrupt = |why: String| MemoryError::Corrupt {
        namespace: labels.join("/"),
        key: key.clone(),
        why,
    };
    let namespace = Namespace::new(labels.clone()).map_err(|e| corrupt(e.to_string()))?;
    let value: String = row.try_get(2).map_err(|e| pg_error("read a row", &e))?;
    let value: Value =
        serde_json::from_str(&value).map_err(|e| corrupt(format!("invalid JSON: {e}")))?;
    let get_i64 = |i: usize| -> Result<Option<i64>, MemoryError> {
        row.try_get(i).map_err(|e| pg_error("read a row", &e))
    };
    let created_at = get_i64(3)?.map_or(0, unclamp);
    let updated_at = get_i64(4)?.map_or(0, unclamp);
    let expires_at = get_i64(5)?.map(unclamp);
    let ttl_ms = get_i64(6)?.map(unclamp);
    let vector: Option<Vec<f32>> = row.try_get(7).map_err(|e| pg_error("read a row", &e))?;
    Ok(Record {
        item: Item {
            namespace,
            key,
            value,
            created_at,
            updated_at,
            expires_at,
        },
        ttl_ms,
        vector,
    })
}

/// A search's SQL and parameters, and the filters left to this process.
struct Query {
    sql: String,
    params: Vec<Box<dyn ToSql + Sync + Send>>,
    in_process: Vec<Filter>,
}

impl Query {
    fn param(&mut self, value: impl ToSql + Sync + Send + 'static) -> String {
        self.params.push(Box::new(value));
        format!("${}", self.params.len())
    }

    /// The SQL condition of `filter`, or `None` if it is left to this
    /// process.
    fn filter(&mut self, filter: &Filter) -> Option<String> {
        if matches!(filter.cmp, Cmp::Eq | Cmp::Ne)
            && matches!(filter.value, Value::Array(_) | Value::Object(_))
        {
            return None;
        }
        let mut field = "value".to_owned();
        for segment in filter.field.split('.') {
            let p = self.param(segment.to_owned());
            field = format!("({field} -> {p}::text)");
        }
        let x = field;
        let eq = |q: &mut Self| -> Option<String> {
            Some(match &filter.value {
                Value::Number(n) => {
                    let p = q.param(n.to_string());
                    format!(
                        "CASE WHEN jsonb_typeof({x}) = 'number' \
                         THEN ({x} #>> '{{}}')::numeric = {p}::text::numeric ELSE FALSE END"
                    )
                }
                Value::String(s) => {
                    let p = q.param(s.clone());
                    format!(
                        "CASE WHEN jsonb_typeof({x}) = 'string' \
                         THEN ({x} #>> '{{}}') = {p}::text ELSE FALSE END"
                    )
                }
                Value::Bool(_) | Value::Null => {
                    let p = q.param(filter.value.to_string());
                    format!("COALESCE({x} = {p}::text::jsonb, FALSE)")
                }
                Value::Array(_) | Value::Object(_) => return None,
            })
        };
        let ordered = |q: &mut Self, op: &str| -> String {
            match &filter.value {
                Value::Number(n) => {
                    let p = q.param(n.to_string());
                    format!(
                        "CASE WHEN jsonb_typeof({x}) = 'number' \
                         THEN ({x} #>> '{{}}')::numeric {op} {p}::text::numeric ELSE FALSE END"
                    )
                }
                Value::String(s) => {
                    let p = q.param(s.clone());
                    format!(
                        "CASE WHEN jsonb_typeof({x}) = 'string' \
                         THEN ({x} #>> '{{}}') COLLATE \"C\" {op} {p}::text ELSE FALSE END"
                    )
                }
                _ => "FALSE".into(),
            }
        };
        match filter.cmp {
            Cmp::Eq => eq(self),
            Cmp::Ne => eq(self).map(|e| format!("({x} IS NOT NULL AND NOT ({e}))")),
            Cmp::Gt => Some(ordered(self, ">")),
            Cmp::Gte => Some(ordered(self, ">=")),
            Cmp::Lt => Some(ordered(self, "<")),
            Cmp::Lte => Some(ordered(self, "<=")),
        }
    }
}

impl PostgresMemory {
    /// Connects to `url` (`postgres://user:password@host:port/database`)
    /// with the default options and creates the table if needed.
    pub async fn connect(url: &str) -> Result<Self, MemoryError> {
        Self::connect_with(url, PostgresMemoryOptions::default()).await
    }

    /// Connects to `url` with `options` and creates the table if needed.
    pub async fn connect_with(
        url: &str,
        options: PostgresMemoryOptions,
    ) -> Result<Self, MemoryError> {
        let config: Config = url.parse().map_err(|e: tokio_postgres::Error| {
            MemoryError::backend(format!(
                "postgres memory: the connection string cannot be parsed: {}",
                describe(&e)
            ))
        })?;
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
                MemoryError::backend(format!("postgres memory: cannot build the pool: {e}"))
            })?;
        Self::from_pool(pool, options).await
    }

    /// Memory on an existing pool (e.g. the session store's
    /// [`PostgresStore::pool`](crate::PostgresStore::pool)); creates the
    /// table if needed.
    pub async fn from_pool(
        pool: Pool,
        options: PostgresMemoryOptions,
    ) -> Result<Self, MemoryError> {
        let schema = options.schema;
        if schema.is_empty() || schema.len() > 63 || schema.contains('\0') {
            return Err(MemoryError::backend(format!(
                "postgres memory: invalid schema name {schema:?}: it must have 1 to 63 bytes and no NUL"
            )));
        }
        let sql = Sql::new(&quote_ident(&schema));
        let mut client = pool.get().await.map_err(|e| pool_error(&e))?;
        if options.read_only {
            let row = client
                .query_one("SELECT to_regclass($1) IS NOT NULL", &[&sql.table])
                .await
                .map_err(|e| pg_error(format_args!("look for {}", sql.table), &e))?;
            if !row.get::<_, bool>(0) {
                return Err(MemoryError::backend(format!(
                    "postgres memory: no table {} in this database: nothing keeps long-term \
                     memory in schema {schema:?} here",
                    sql.table
                )));
            }
            drop(client);
            return Ok(Self {
                pool,
                schema,
                sql: Arc::new(sql),
            });
        }
        let tx = client
            .transaction()
            .await
            .map_err(|e| pg_error("begin creating the table", &e))?;
        // Processes starting at once: one creates, the others wait.
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtext($1))",
            &[&format!("harness memory {schema}")],
        )
        .await
        .map_err(|e| pg_error("lock the schema", &e))?;
        tx.batch_execute(&sql.create)
            .await
            .map_err(|e| pg_error(format_args!("create {}", sql.table), &e))?;
        tx.commit()
            .await
            .map_err(|e| pg_error(format_args!("create {}", sql.table), &e))?;
        drop(client);
        Ok(Self {
            pool,
            schema,
            sql: Arc::new(sql),
        })
    }

    /// The pool, for inspection and repair tools.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The name of the schema holding the table.
    pub fn schema_name(&self) -> &str {
        &self.schema
    }

    /// Deletes the rows expired at `now` (ms since the epoch); how many.
    /// Never needed for correctness: it reclaims space.
    pub async fn purge_expired(&self, now: u64) -> Result<u64, MemoryError> {
        let client = self.pool.get().await.map_err(|e| pool_error(&e))?;
        client
            .execute(
                &format!("DELETE FROM {} WHERE expires_at <= $1", self.sql.table),
                &[&clamp(now)],
            )
            .await
            .map_err(|e| pg_error("purge expired rows", &e))
    }

    async fn apply_once(
        &self,
        writes: &[Write],
        now: u64,
    ) -> Result<Vec<u64>, (MemoryError, bool)> {
        let fail = |what: &str, e: tokio_postgres::Error| {
            let again = retryable(&e);
            (pg_error(what, &e), again)
        };
        let mut client = self.pool.get().await.map_err(|e| (pool_error(&e), false))?;
        let tx = client
            .transaction()
            .await
            .map_err(|e| fail("begin a batch", e))?;
        let mut created = Vec::new();
        for write in writes {
            match write {
                Write::Put(r) => {
                    let item = &r.item;
                    let labels = item.namespace.labels().to_vec();
                    let value = serde_json::to_string(&item.value).map_err(|e| {
                        (
                            MemoryError::Value {
                                namespace: item.namespace.to_string(),
                                key: item.key.clone(),
                                why: format!("it cannot be encoded: {e}"),
                            },
                            false,
                        )
                    })?;
                    let stmt = tx
                        .prepare_cached(&self.sql.put)
                        .await
                        .map_err(|e| fail("prepare a put", e))?;
                    let row = tx
                        .query_one(
                            &stmt,
                            &[
                                &labels,
                                &item.key,
                                &value,
                                &clamp(item.created_at),
                                &clamp(item.updated_at),
                                &item.expires_at.map(clamp),
                                &r.ttl_ms.map(clamp),
                                &r.vector,
                                &clamp(now),
                            ],
                        )
                        .await
                        .map_err(|e| {
                            let code = e.as_db_error().map(|db| db.code().code().to_owned());
                            if matches!(code.as_deref(), Some("22P05" | "22021")) {
                                let why = format!("PostgreSQL cannot store it: {}", describe(&e));
                                let err = MemoryError::Value {
                                    namespace: item.namespace.to_string(),
                                    key: item.key.clone(),
                                    why,
                                };
                                (err, false)
                            } else {
                                fail("put a record", e)
                            }
                        })?;
                    let at: i64 = row.try_get(0).map_err(|e| fail("read a put's reply", e))?;
                    created.push(unclamp(at));
                }
                Write::Delete { namespace, key } => {
                    let stmt = tx
                        .prepare_cached(&self.sql.delete)
                        .await
                        .map_err(|e| fail("prepare a delete", e))?;
                    tx.execute(&stmt, &[&namespace.labels(), key])
                        .await
                        .map_err(|e| fail("delete a record", e))?;
                }
                Write::Touch {
                    namespace,
                    key,
                    expires_at,
                    from,
                } => {
                    let stmt = tx
                        .prepare_cached(&self.sql.touch)
                        .await
                        .map_err(|e| fail("prepare a touch", e))?;
                    tx.execute(
                        &stmt,
                        &[
                            &namespace.labels(),
                            key,
                            &clamp(now),
                            &clamp(*expires_at),
                            &clamp(*from),
                        ],
                    )
                    .await
                    .map_err(|e| fail("touch a record", e))?;
                }
            }
        }
        tx.commit().await.map_err(|e| fail("commit a batch", e))?;
        Ok(created)
    }
}

#[async_trait]
impl MemoryBackend for PostgresMemory {
    async fn apply(&self, writes: Vec<Write>, now: u64) -> Result<Vec<u64>, MemoryError> {
        if let Some(Write::Put(r)) = writes
            .iter()
            .find(|w| matches!(w, Write::Put(r) if r.item.namespace.is_root()))
        {
            return Err(MemoryError::Namespace {
                namespace: r.item.namespace.labels().to_vec(),
                why: "an item's namespace has at least one label".into(),
            });
        }
        let mut attempt = 1;
        loop {
            match self.apply_once(&writes, now).await {
                Ok(created) => return Ok(created),
                Err((e, true)) if attempt < ATTEMPTS => {
                    tracing::debug!(error = %e, attempt, "postgres memory: a batch is tried again");
                    attempt += 1;
                }
                Err((e, _)) => return Err(e),
            }
        }
    }

    async fn get(
        &self,
        namespace: &Namespace,
        key: &str,
        now: u64,
    ) -> Result<Option<Record>, MemoryError> {
        let client = self.pool.get().await.map_err(|e| pool_error(&e))?;
        let stmt = client
            .prepare_cached(&self.sql.get)
            .await
            .map_err(|e| pg_error("prepare a get", &e))?;
        let row = client
            .query_opt(&stmt, &[&namespace.labels(), &key, &clamp(now)])
            .await
            .map_err(|e| pg_error("get a record", &e))?;
        row.as_ref().map(record_of).transpose()
    }

    async fn search(
        &self,
        prefix: &Namespace,
        filters: &[Filter],
        offset: usize,
        limit: usize,
        now: u64,
    ) -> Result<Vec<Record>, MemoryError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut q = Query {
            sql: String::new(),
            params: Vec::new(),
            in_process: Vec::new(),
        };
        let p_now = q.param(clamp(now));
        let mut conditions = vec![format!("(expires_at IS NULL OR expires_at > {p_now})")];
        if let Some((last, _)) = prefix.labels().split_last() {
            let labels = prefix.labels().to_vec();
            let mut upper = labels.clone();
            if let Some(l) = upper.last_mut() {
                *l = format!("{last}\u{10FFFF}");
            }
            let depth = labels.len();
            let lo = q.param(labels);
            let hi = q.param(upper);
            conditions.push(format!(
                "namespace >= {lo}::text[] AND namespace < {hi}::text[] \
                 AND namespace[1:{depth}] = {lo}::text[]"
            ));
        }
        for filter in filters {
            match q.filter(filter) {
                Some(c) => conditions.push(c),
                None => q.in_process.push(filter.clone()),
            }
        }
        let mut sql = format!(
            "SELECT {COLUMNS} FROM {} WHERE {} ORDER BY namespace, key",
            self.sql.table,
            conditions.join(" AND ")
        );
        if q.in_process.is_empty() {
            let lim = q.param(i64::try_from(limit).ok());
            let off = q.param(clamp(offset as u64));
            sql.push_str(&format!(" LIMIT {lim} OFFSET {off}"));
        }
        q.sql = sql;
        let client = self.pool.get().await.map_err(|e| pool_error(&e))?;
        let params: Vec<&(dyn ToSql + Sync)> = q
            .params
            .iter()
            .map(|p| p.as_ref() as &(dyn ToSql + Sync))
            .collect();
        let rows = client
            .query(&q.sql, &params)
            .await
            .map_err(|e| pg_error("search", &e))?;
        let records = rows.iter().map(record_of);
        if q.in_process.is_empty() {
            return records.collect();
        }
        let mut out = Vec::new();
        let mut skipped = 0;
        for record in records {
            let record = record?;
            if !q.in_process.iter().all(|f| f.matches(&record.item.value)) {
                continue;
            }
            if skipped < offset {
                skipped += 1;
                continue;
            }
            out.push(record);
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }

    async fn namespaces(&self, now: u64) -> Result<Vec<Namespace>, MemoryError> {
        let client = self.pool.get().await.map_err(|e| pool_error(&e))?;
        let rows = client
            .query(&self.sql.namespaces, &[&clamp(now)])
            .await
            .map_err(|e| pg_error("list namespaces", &e))?;
        rows.iter()
            .map(|row| {
                let labels: Vec<String> = row.try_get(0).map_err(|e| pg_error("read a row", &e))?;
                Namespace::new(labels.clone()).map_err(|e| MemoryError::Corrupt {
                    namespace: labels.join("/"),
                    key: String::new(),
                    why: e.to_string(),
                })
            })
            .collect()
    }
}
