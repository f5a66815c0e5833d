//! The PostgreSQL and Redis stores against real servers: the conformance
//! suite, migrations, finding work, and what each store keeps on the side.
//!
//! The servers' URLs come from `HARNESS_TEST_POSTGRES_URL` and
//! `HARNESS_TEST_REDIS_URL`, which `scripts/services` starts and prints:
//!
//! ```text
//! eval "$(scripts/services)"
//! cargo test -p harness-stores --features postgres,redis --test servers
//! ```
//!
//! A test whose variable is unset fails, unless `HARNESS_SKIP_SERVER_TESTS=1`
//! (for machines without the servers; CI never sets it). Every store gets a
//! schema or key prefix of its own, random per run, dropped at the end.

#![cfg(all(feature = "postgres", feature = "redis"))]
#![allow(clippy::unwrap_used)]

use harness::session::{Lease, SessionPhase, SessionStore, StoreError, now_millis};
use harness::{Interrupt, InterruptId, SessionId, Signal};
use harness_stores::conformance::{
    self, Record, RoundRobin, advance, create, head, snapshot, update,
};
use harness_stores::{PostgresOptions, PostgresStore, RedisOptions, RedisStore};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the corruption hooks write: not JSON. PostgreSQL text cannot hold a
/// NUL byte, so its garbage starts with another control character.
const PG_GARBAGE: &str = "\u{1}garbage{\"not\": json";
const REDIS_GARBAGE: &[u8] = b"\x00garbage{\"not\": json";

fn id(s: &str) -> SessionId {
    SessionId::from(s)
}

/// The URL in `var`; `None` (skip) only when `HARNESS_SKIP_SERVER_TESTS=1`.
fn server_url(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var("HARNESS_SKIP_SERVER_TESTS").as_deref() == Ok("1") => {
            eprintln!("skipped: {var} is not set and HARNESS_SKIP_SERVER_TESTS=1");
            None
        }
        _ => panic!(
            "{var} is not set: start the test servers with `eval \"$(scripts/services)\"` \
             and run the tests again (or set HARNESS_SKIP_SERVER_TESTS=1 to skip the server tests)"
        ),
    }
}

/// A name no other run or test uses.
fn unique(tag: &str) -> String {
    let random = SessionId::random().as_str().replace('-', "");
    format!("t_{tag}_{}", &random[..16])
}

/// Runs `f` to completion from synchronous code inside the (multi-threaded)
/// test runtime: the suite's store factories and hooks are synchronous.
fn block_on<F: Future>(f: F) -> F::Output {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(f))
}

// ---------------------------------------------------------------------------
// PostgreSQL fixtures.

/// Stores on fresh schemas of the test database, dropped by `cleanup`.
struct Pg {
    url: String,
    schemas: Mutex<Vec<String>>,
}

impl Pg {
    fn new() -> Option<Self> {
        Some(Self {
            url: server_url("HARNESS_TEST_POSTGRES_URL")?,
            schemas: Mutex::new(Vec::new()),
        })
    }

    fn fresh_schema(&self, tag: &str) -> String {
        let schema = unique(tag);
        self.schemas.lock().unwrap().push(schema.clone());
        schema
    }

    async fn connect(&self, schema: &str, options: PostgresOptions) -> PostgresStore {
        PostgresStore::connect_with(&self.url, options.schema(schema))
            .await
            .unwrap_or_else(|e| panic!("cannot connect to the test PostgreSQL: {e}"))
    }

    async fn store(&self, tag: &str) -> PostgresStore {
        let schema = self.fresh_schema(tag);
        self.connect(&schema, PostgresOptions::default()).await
    }

    async fn cleanup(&self) {
        let schemas = std::mem::take(&mut *self.schemas.lock().unwrap());
        let store = self
            .connect(&unique("cleanup"), PostgresOptions::default())
            .await;
        let client = store.pool().get().await.unwrap();
        for schema in schemas
            .iter()
            .chain([store.schema_name().to_owned()].iter())
        {
            client
                .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
                .await
                .unwrap();
        }
    }
}

fn corrupt_pg(store: &PostgresStore, session: &SessionId, record: Record) {
    block_on(async {
        let client = store.pool().get().await.unwrap();
        let s = store.schema_name();
        let stored = PostgresStore::stored_id(session);
        let changed = match record {
            Record::Head => client
                .execute(
                    &format!("UPDATE \"{s}\".sessions SET head = $2 WHERE id = $1"),
                    &[&stored, &PG_GARBAGE],
                )
                .await
                .unwrap(),
            Record::Checkpoint(seq) => client
                .execute(
                    &format!(
                        "UPDATE \"{s}\".checkpoints SET checkpoint = $3 \
                         WHERE session_id = $1 AND seq = $2::text::numeric"
                    ),
                    &[&stored, &seq.to_string(), &PG_GARBAGE],
                )
                .await
                .unwrap(),
        };
        assert_eq!(changed, 1, "no record to corrupt: {session:?} {record:?}");
    });
}

// ---------------------------------------------------------------------------
// Redis fixtures.

/// Stores under fresh key prefixes, whose keys `cleanup` deletes.
struct Rd {
    url: String,
    prefixes: Mutex<Vec<String>>,
}

impl Rd {
    fn new() -> Option<Self> {
        Some(Self {
            url: server_url("HARNESS_TEST_REDIS_URL")?,
            prefixes: Mutex::new(Vec::new()),
        })
    }

    fn fresh_prefix(&self, tag: &str) -> String {
        let prefix = unique(tag);
        self.prefixes.lock().unwrap().push(prefix.clone());
        prefix
    }

    async fn connect(&self, prefix: &str, options: RedisOptions) -> RedisStore {
        RedisStore::connect_with(&self.url, options.prefix(prefix))
            .await
            .unwrap_or_else(|e| panic!("cannot connect to the test Redis: {e}"))
    }

    async fn store(&self, tag: &str) -> RedisStore {
        let prefix = self.fresh_prefix(tag);
        self.connect(&prefix, RedisOptions::default()).await
    }

    async fn cleanup(&self) {
        let prefixes = std::mem::take(&mut *self.prefixes.lock().unwrap());
        let store = self.connect("cleanup", RedisOptions::default()).await;
        let mut con = store.connection();
        for prefix in prefixes {
            let mut cursor: u64 = 0;
            loop {
                let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(format!("{prefix}:*"))
                    .arg("COUNT")
                    .arg(1000)
                    .query_async(&mut con)
                    .await
                    .unwrap();
                if !keys.is_empty() {
                    let _: i64 = redis::cmd("DEL")
                        .arg(&keys)
                        .query_async(&mut con)
                        .await
                        .unwrap();
                }
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
    }
}

fn corrupt_redis(store: &RedisStore, session: &SessionId, record: Record) {
    block_on(async {
        let mut con = store.connection();
        match record {
            Record::Head => {
                let set: Option<String> = redis::cmd("SET")
                    .arg(store.head_key(session))
                    .arg(REDIS_GARBAGE)
                    .arg("XX")
                    .query_async(&mut con)
                    .await
                    .unwrap();
                assert!(set.is_some(), "no head to corrupt: {session:?}");
            }
            Record::Checkpoint(seq) => {
                let key = store.checkpoints_key(session);
                let field = RedisStore::checkpoint_field(seq);
                let existed: bool = redis::cmd("HEXISTS")
                    .arg(&key)
                    .arg(&field)
                    .query_async(&mut con)
                    .await
                    .unwrap();
                assert!(existed, "no checkpoint to corrupt: {session:?} {seq}");
                let _: i64 = redis::cmd("HSET")
                    .arg(&key)
                    .arg(&field)
                    .arg(REDIS_GARBAGE)
                    .query_async(&mut con)
                    .await
                    .unwrap();
            }
        }
    });
}

// ---------------------------------------------------------------------------
// Checks shared by both stores.

/// A session with this phase, lease and `updated_at`.
async fn put(
    store: &dyn SessionStore,
    name: &str,
    phase: SessionPhase,
    lease: Option<u64>,
    updated_at: u64,
) {
    let mut c = create(head(name), vec![snapshot(0, 0, json!({"n": 0}))]);
    c.head.phase = phase;
    c.head.lease = lease.map(|expires_at| Lease {
        owner: format!("owner-of-{name}"),
        expires_at,
    });
    c.head.updated_at = updated_at;
    store.commit(c).await.unwrap();
}

fn interrupted() -> SessionPhase {
    SessionPhase::Interrupted {
        interrupt: Interrupt {
            id: InterruptId::from("int-1"),
            step: "ask".into(),
            payload: json!({"q": "ok?"}),
        },
    }
}

fn completed() -> SessionPhase {
    SessionPhase::Completed {
        signal: Signal::new("done"),
    }
}

fn names(ids: &[SessionId]) -> Vec<&str> {
    ids.iter().map(SessionId::as_str).collect()
}

/// Sessions of every kind; returns `now` and the runnable ones in order.
async fn runnable_fixture(store: &dyn SessionStore) -> (u64, Vec<&'static str>) {
    let now = now_millis();
    put(
        store,
        "live",
        SessionPhase::Running,
        Some(now + 3_600_000),
        now - 9_000,
    )
    .await;
    put(store, "interrupted", interrupted(), None, now - 8_500).await;
    put(store, "completed", completed(), None, now - 8_400).await;
    let failed = SessionPhase::Failed {
        error: "boom".into(),
    };
    put(store, "failed", failed, None, now - 8_300).await;
    put(store, "submitted", SessionPhase::Running, None, now - 8_000).await;
    put(
        store,
        "expired",
        SessionPhase::Running,
        Some(now - 1),
        now - 7_000,
    )
    .await;
    put(
        store,
        "expires-now",
        SessionPhase::Running,
        Some(now),
        now - 6_000,
    )
    .await;
    put(
        store,
        "live-too",
        SessionPhase::Running,
        Some(now + 1),
        now - 5_500,
    )
    .await;
    put(store, "later", SessionPhase::Running, None, now - 5_000).await;
    (now, vec!["submitted", "expired", "expires-now", "later"])
}

/// `runnable` of a store without claims: running sessions without a live
/// lease, oldest first, up to the limit; a plain read.
async fn runnable_reads(store: &dyn SessionStore) {
    let (now, want) = runnable_fixture(store).await;
    for _ in 0..2 {
        assert_eq!(names(&store.runnable(now, 10).await.unwrap()), want);
    }
    assert_eq!(names(&store.runnable(now, 2).await.unwrap()), want[..2]);
    assert_eq!(store.runnable(now, 0).await.unwrap(), vec![]);
    // Later, the short lease has run out too; the live one has not.
    let mut later = vec!["expired", "expires-now", "live-too", "later"];
    later.insert(0, "submitted");
    assert_eq!(names(&store.runnable(now + 1, 10).await.unwrap()), later);

    // Taking a session (a live lease) hides it; releasing it shows it again
    // with its new updated_at, now the newest.
    let h = store.load(&id("submitted")).await.unwrap().unwrap();
    let mut take = advance(&h, vec![], vec![]);
    take.head.lease = Some(Lease {
        owner: "worker".into(),
        expires_at: now + 60_000,
    });
    take.head.updated_at = now;
    store.commit(take.clone()).await.unwrap();
    assert_eq!(names(&store.runnable(now, 10).await.unwrap()), want[1..]);
    let mut release = advance(&take.head, vec![], vec![]);
    release.head.lease = None;
    release.head.updated_at = now;
    store.commit(release.clone()).await.unwrap();
    let mut want2 = want[1..].to_vec();
    want2.push("submitted");
    assert_eq!(names(&store.runnable(now, 10).await.unwrap()), want2);
    // Finishing it removes it for good.
    let mut done = advance(&release.head, vec![], vec![]);
    done.head.phase = completed();
    store.commit(done).await.unwrap();
    assert_eq!(names(&store.runnable(now, 10).await.unwrap()), want[1..]);
}

/// `runnable` of a store with claims of `claim_ms`: what one call returns,
/// the next does not, until the claim runs out or the session is committed.
async fn runnable_claims(store: &dyn SessionStore, claim_ms: u64) {
    let (now, want) = runnable_fixture(store).await;
    assert_eq!(names(&store.runnable(now, 2).await.unwrap()), want[..2]);
    assert_eq!(names(&store.runnable(now, 10).await.unwrap()), want[2..]);
    assert_eq!(store.runnable(now, 10).await.unwrap(), vec![]);
    // A commit clears the claim.
    let h = store.load(&id("later")).await.unwrap().unwrap();
    store.commit(advance(&h, vec![], vec![])).await.unwrap();
    assert_eq!(names(&store.runnable(now, 10).await.unwrap()), ["later"]);
    // Just before the claims run out, only the short lease has.
    assert_eq!(
        names(&store.runnable(now + claim_ms - 1, 10).await.unwrap()),
        ["live-too"]
    );
    // Claims run out (the one just taken has not).
    assert_eq!(
        names(&store.runnable(now + claim_ms, 10).await.unwrap()),
        want
    );
}

/// Workers, each with its own handle on the store (as separate processes
/// would have), find work with `runnable` and take it by compare-and-set;
/// returns the number of conflicts. Every session is taken exactly once.
async fn workers_take_each_session_once(
    stores: Vec<Arc<dyn SessionStore>>,
    sessions: usize,
) -> usize {
    let t0 = now_millis() - 100_000;
    for i in 0..sessions {
        let mut c = create(head(&format!("job-{i:03}")), vec![snapshot(0, 0, json!(i))]);
        c.head.updated_at = t0 + i as u64;
        stores[0].commit(c).await.unwrap();
    }
    let barrier = Arc::new(tokio::sync::Barrier::new(stores.len()));
    let mut tasks = Vec::new();
    for (w, store) in stores.iter().enumerate() {
        let (store, barrier) = (Arc::clone(store), Arc::clone(&barrier));
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let owner = format!("worker-{w}");
            let (mut taken, mut conflicts) = (Vec::new(), 0_usize);
            loop {
                let now = now_millis();
                let ids = store.runnable(now, 5).await.unwrap();
                if ids.is_empty() {
                    break;
                }
                for session in ids {
                    let h = store.load(&session).await.unwrap().unwrap();
                    if h.lease.as_ref().is_some_and(|l| l.is_live(now)) {
                        // Taken by another worker since `runnable`.
                        conflicts += 1;
                        continue;
                    }
                    let mut take = advance(&h, vec![], vec![]);
                    take.head.lease = Some(Lease {
                        owner: owner.clone(),
                        expires_at: now + 3_600_000,
                    });
                    take.head.updated_at = now;
                    match store.commit(take).await {
                        Ok(()) => taken.push(session),
                        Err(StoreError::Conflict { .. }) => conflicts += 1,
                        Err(e) => panic!("{owner}: taking {session:?} failed: {e}"),
                    }
                }
            }
            (owner, taken, conflicts)
        }));
    }
    let mut by_session: BTreeMap<SessionId, Vec<String>> = BTreeMap::new();
    let mut conflicts = 0;
    let mut per_worker = Vec::new();
    for task in tasks {
        let (owner, taken, c) = task.await.unwrap();
        per_worker.push((owner.clone(), taken.len()));
        conflicts += c;
        for session in taken {
            by_session.entry(session).or_default().push(owner.clone());
        }
    }
    let twice: Vec<_> = by_session.iter().filter(|(_, o)| o.len() > 1).collect();
    assert!(twice.is_empty(), "sessions taken more than once: {twice:?}");
    assert_eq!(
        by_session.len(),
        sessions,
        "sessions taken (per worker: {per_worker:?})"
    );
    for (session, owners) in &by_session {
        let h = stores[0].load(session).await.unwrap().unwrap();
        assert_eq!(h.lease.map(|l| l.owner).as_ref(), owners.first());
    }
    assert_eq!(stores[0].runnable(now_millis(), 10).await.unwrap(), vec![]);
    eprintln!(
        "{} workers took {sessions} sessions: {per_worker:?}, {conflicts} conflicts",
        stores.len()
    );
    conflicts
}

/// Sessions whose ids need escaping (NUL, `%`, braces, key-like text) go
/// through several commits and read back whole.
async fn odd_ids_go_on(store: &dyn SessionStore) {
    let ids = [
        "a\0b",
        "%41",
        "%",
        "é",
        "",
        "}x{",
        "a}:head",
        "{a}",
        "x:sessions",
    ];
    for s in ids {
        let c = create(head(s), vec![snapshot(0, 0, json!(s))]);
        store.commit(c.clone()).await.unwrap();
        let mut prev = c.head.clone();
        for i in 1..=3 {
            let next = advance(&prev, vec![update(i, i, s, json!(i))], vec![]);
            store.commit(next.clone()).await.unwrap();
            prev = next.head;
        }
        let stale = advance(&c.head, vec![], vec![]);
        match store.commit(stale).await {
            Err(StoreError::Conflict { found, .. }) => assert_eq!(found, Some(4), "{s:?}"),
            other => panic!("{s:?}: expected a conflict, got {other:?}"),
        }
        assert_eq!(store.load(&id(s)).await.unwrap(), Some(prev), "{s:?}");
        let log = store.checkpoints(&id(s), 1).await.unwrap();
        assert_eq!(
            log.iter().map(|cp| cp.seq).collect::<Vec<_>>(),
            [1, 2, 3],
            "{s:?}"
        );
        assert!(log.iter().all(|cp| cp.step == s), "{s:?}");
    }
    let mut listed = store.sessions().await.unwrap();
    listed.sort();
    let mut want: Vec<SessionId> = ids.iter().map(|s| id(s)).collect();
    want.sort();
    assert_eq!(listed, want);
}

// ---------------------------------------------------------------------------
// PostgreSQL.

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_odd_ids_go_on() {
    let Some(pg) = Pg::new() else { return };
    odd_ids_go_on(&pg.store("ids").await).await;
    pg.cleanup().await;
}

/// On a server (here: a session) with `synchronous_commit = off`, durable
/// commits set it back on; everything still reads the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_store_on_an_asynchronous_server_conforms() {
    let Some(pg) = Pg::new() else { return };
    let sep = if pg.url.contains('?') { '&' } else { '?' };
    let url = format!("{}{sep}options=-c%20synchronous_commit%3Doff", pg.url);
    let make = || {
        block_on(async {
            let schema = pg.fresh_schema("async");
            PostgresStore::connect_with(&url, PostgresOptions::default().schema(schema))
                .await
                .unwrap()
        })
    };
    let probe = make();
    let client = probe.pool().get().await.unwrap();
    let setting: String = client
        .query_one("SHOW synchronous_commit", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(setting, "off", "the connection string's options apply");
    drop(client);
    for check in [
        conformance::round_trip(&make()).await,
        conformance::durability(&make()).await,
        conformance::stale_version(&make()).await,
    ] {
        check.unwrap();
    }
    pg.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_store_conforms() {
    let Some(pg) = Pg::new() else { return };
    let make = || block_on(pg.store("conf"));
    conformance::run_all_with(make, Some(&corrupt_pg)).await;
    pg.cleanup().await;
}

/// Two stores (two pools) on one schema, as two processes would have.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_postgres_stores_on_one_schema_conform() {
    let Some(pg) = Pg::new() else { return };
    let make = || {
        block_on(async {
            let schema = pg.fresh_schema("rr");
            RoundRobin::new(vec![
                pg.connect(&schema, PostgresOptions::default().pool_size(4))
                    .await,
                pg.connect(&schema, PostgresOptions::default().pool_size(4))
                    .await,
            ])
        })
    };
    let corrupt = |rr: &RoundRobin<PostgresStore>, s: &SessionId, r: Record| {
        corrupt_pg(&rr.stores()[0], s, r);
    };
    conformance::run_all_with(make, Some(&corrupt)).await;
    pg.cleanup().await;
}

/// Migrations: several processes connecting at once to a new schema all
/// succeed and apply each migration once; connecting again changes nothing;
/// a schema migrated by a newer build is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_migrations_are_idempotent_and_safe_concurrently() {
    let Some(pg) = Pg::new() else { return };
    let pg = Arc::new(pg);
    let schema = pg.fresh_schema("mig");
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (pg, schema) = (Arc::clone(&pg), schema.clone());
        tasks.push(tokio::spawn(async move {
            PostgresStore::connect_with(&pg.url, PostgresOptions::default().schema(&schema)).await
        }));
    }
    let mut stores = Vec::new();
    for task in tasks {
        stores.push(
            task.await
                .unwrap()
                .unwrap_or_else(|e| panic!("a concurrent connect failed: {e}")),
        );
    }
    let migrations = |store: PostgresStore| async move {
        let client = store.pool().get().await.unwrap();
        let rows = client
            .query(
                &format!(
                    "SELECT version, name FROM \"{}\".schema_migrations ORDER BY version",
                    store.schema_name()
                ),
                &[],
            )
            .await
            .unwrap();
        rows.iter()
            .map(|r| (r.get::<_, i32>(0), r.get::<_, String>(1)))
            .collect::<Vec<_>>()
    };
    let applied = migrations(stores[0].clone()).await;
    assert_eq!(
        applied.iter().map(|m| m.0).collect::<Vec<_>>(),
        (1..=applied.len() as i32).collect::<Vec<_>>(),
        "each migration once, in order: {applied:?}"
    );
    assert!(!applied.is_empty());
    // The stores work, and see each other's sessions.
    stores[1]
        .commit(create(head("m"), vec![snapshot(0, 0, json!(0))]))
        .await
        .unwrap();
    assert_eq!(stores[3].sessions().await.unwrap(), vec![id("m")]);
    // Again, sequentially: nothing changes, no data is lost.
    let again = pg.connect(&schema, PostgresOptions::default()).await;
    assert_eq!(migrations(again.clone()).await, applied);
    assert_eq!(again.sessions().await.unwrap(), vec![id("m")]);
    // The documented schema is what was applied.
    let sql = again.schema();
    for table in ["schema_migrations", "sessions", "checkpoints"] {
        assert!(
            sql.contains(&format!("CREATE TABLE \"{schema}\".{table}")),
            "{sql}"
        );
    }
    // A migration this build does not know: refused.
    let client = again.pool().get().await.unwrap();
    client
        .execute(
            &format!(
                "INSERT INTO \"{schema}\".schema_migrations (version, name) VALUES (999, 'future')"
            ),
            &[],
        )
        .await
        .unwrap();
    match PostgresStore::connect_with(&pg.url, PostgresOptions::default().schema(&schema)).await {
        Err(StoreError::Backend { message }) => {
            assert!(
                message.contains("migration 999") && message.contains("newer build"),
                "{message}"
            )
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    drop(client);
    pg.cleanup().await;
}

/// The extracted columns follow the head at every commit; ids are stored
/// as they are but for `%` and NUL.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_columns_follow_the_head() {
    let Some(pg) = Pg::new() else { return };
    let store = pg.store("cols").await;
    let columns = |name: &'static str| {
        let store = store.clone();
        async move {
            let client = store.pool().get().await.unwrap();
            let row = client
                .query_one(
                    &format!(
                        "SELECT version, phase, lease_owner, lease_expires_at, updated_at, \
                         head::jsonb ->> 'agent_id' FROM \"{}\".sessions WHERE id = $1",
                        store.schema_name()
                    ),
                    &[&PostgresStore::stored_id(&id(name))],
                )
                .await
                .unwrap();
            (
                row.get::<_, i64>(0),
                row.get::<_, String>(1),
                row.get::<_, Option<String>>(2),
                row.get::<_, Option<i64>>(3),
                row.get::<_, i64>(4),
                row.get::<_, String>(5),
            )
        }
    };
    let mut c = create(head("c%1"), vec![snapshot(0, 0, json!(0))]);
    c.head.lease = Some(Lease {
        owner: "w1".into(),
        expires_at: u64::MAX,
    });
    store.commit(c.clone()).await.unwrap();
    assert_eq!(
        columns("c%1").await,
        (
            1,
            "running".into(),
            Some("w1".into()),
            Some(i64::MAX),
            c.head.updated_at as i64,
            "conformance".into()
        )
    );
    let mut next = advance(&c.head, vec![update(1, 1, "x", json!(1))], vec![]);
    next.head.phase = interrupted();
    next.head.lease = None;
    store.commit(next.clone()).await.unwrap();
    assert_eq!(
        columns("c%1").await,
        (
            2,
            "interrupted".into(),
            None,
            None,
            next.head.updated_at as i64,
            "conformance".into()
        )
    );
    let client = store.pool().get().await.unwrap();
    let ids: Vec<String> = client
        .query(
            &format!("SELECT id FROM \"{}\".sessions", store.schema_name()),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ids, vec!["c%251".to_owned()]);
    drop(client);
    pg.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_runnable_returns_sessions_without_a_live_lease() {
    let Some(pg) = Pg::new() else { return };
    let schema = pg.fresh_schema("run");
    let store = pg
        .connect(
            &schema,
            PostgresOptions::default().claim_ttl(Duration::ZERO),
        )
        .await;
    runnable_reads(&store).await;
    let store = pg
        .connect(
            &pg.fresh_schema("claim"),
            PostgresOptions::default().claim_ttl(Duration::from_secs(30)),
        )
        .await;
    runnable_claims(&store, 30_000).await;
    pg.cleanup().await;
}

/// 4 workers × 50 sessions: with claims, each session is taken exactly once
/// and no worker ever loses a race; without claims, still exactly once (the
/// compare-and-set), at the cost of conflicts.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_workers_take_each_session_once() {
    let Some(pg) = Pg::new() else { return };
    for claim in [Duration::from_secs(60), Duration::ZERO] {
        let schema = pg.fresh_schema("work");
        let mut stores: Vec<Arc<dyn SessionStore>> = Vec::new();
        for _ in 0..4 {
            let options = PostgresOptions::default().pool_size(2).claim_ttl(claim);
            stores.push(Arc::new(pg.connect(&schema, options).await));
        }
        let conflicts = workers_take_each_session_once(stores, 200).await;
        if !claim.is_zero() {
            assert_eq!(conflicts, 0, "with claims, workers get disjoint sessions");
        }
    }
    pg.cleanup().await;
}

/// Connection errors say where and what, never the password.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn connection_errors_hide_the_password() {
    let pg =
        PostgresStore::connect("postgres://someone:s3cret-pw@127.0.0.1:1/db?connect_timeout=5")
            .await;
    match pg {
        Err(StoreError::Backend { message }) => {
            assert!(!message.contains("s3cret"), "{message}");
            assert!(message.contains("127.0.0.1"), "{message}");
        }
        other => panic!("expected a backend error, got {other:?}"),
    }
    let rd = RedisStore::connect("redis://someone:s3cret-pw@127.0.0.1:1/").await;
    match rd {
        Err(StoreError::Backend { message }) => {
            assert!(!message.contains("s3cret"), "{message}");
            assert!(message.contains("127.0.0.1"), "{message}");
        }
        other => panic!("expected a backend error, got {other:?}"),
    }
    let Some(pg) = Pg::new() else { return };
    let long = "s".repeat(64);
    for bad in ["", "x\0y", long.as_str()] {
        let err =
            PostgresStore::connect_with(&pg.url, PostgresOptions::default().schema(bad)).await;
        assert!(
            matches!(err, Err(StoreError::Backend { .. })),
            "{bad:?}: {err:?}"
        );
    }
    let Some(rd) = Rd::new() else { return };
    for bad in ["", "a{b", "a}"] {
        let err = RedisStore::connect_with(&rd.url, RedisOptions::default().prefix(bad)).await;
        assert!(
            matches!(err, Err(StoreError::Backend { .. })),
            "{bad:?}: {err:?}"
        );
    }
}

// ---------------------------------------------------------------------------
// Redis.

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_store_conforms() {
    let Some(rd) = Rd::new() else { return };
    let make = || block_on(rd.store("conf"));
    conformance::run_all_with(make, Some(&corrupt_redis)).await;
    rd.cleanup().await;
}

/// Two stores (two connections) on one prefix, as two processes would have.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_redis_stores_on_one_prefix_conform() {
    let Some(rd) = Rd::new() else { return };
    let make = || {
        block_on(async {
            let prefix = rd.fresh_prefix("rr");
            RoundRobin::new(vec![
                rd.connect(&prefix, RedisOptions::default()).await,
                rd.connect(&prefix, RedisOptions::default()).await,
            ])
        })
    };
    let corrupt = |rr: &RoundRobin<RedisStore>, s: &SessionId, r: Record| {
        corrupt_redis(&rr.stores()[0], s, r);
    };
    conformance::run_all_with(make, Some(&corrupt)).await;
    rd.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_runnable_returns_sessions_without_a_live_lease() {
    let Some(rd) = Rd::new() else { return };
    let store = rd
        .connect(
            &rd.fresh_prefix("run"),
            RedisOptions::default().claim_ttl(Duration::ZERO),
        )
        .await;
    runnable_reads(&store).await;
    let store = rd
        .connect(
            &rd.fresh_prefix("claim"),
            RedisOptions::default().claim_ttl(Duration::from_secs(30)),
        )
        .await;
    runnable_claims(&store, 30_000).await;
    rd.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_workers_take_each_session_once() {
    let Some(rd) = Rd::new() else { return };
    for claim in [Duration::from_secs(60), Duration::ZERO] {
        let prefix = rd.fresh_prefix("work");
        let mut stores: Vec<Arc<dyn SessionStore>> = Vec::new();
        for _ in 0..4 {
            stores.push(Arc::new(
                rd.connect(&prefix, RedisOptions::default().claim_ttl(claim))
                    .await,
            ));
        }
        let conflicts = workers_take_each_session_once(stores, 200).await;
        if !claim.is_zero() {
            assert_eq!(conflicts, 0, "with claims, workers get disjoint sessions");
        }
    }
    rd.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_odd_ids_go_on() {
    let Some(rd) = Rd::new() else { return };
    odd_ids_go_on(&rd.store("ids").await).await;
    rd.cleanup().await;
}

/// The indexes follow the head: the session set, the running set scored by
/// `updated_at`, the leases.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_keys_follow_the_head() {
    let Some(rd) = Rd::new() else { return };
    let store = rd.store("keys").await;
    let p = store.prefix().to_owned();
    let mut con = store.connection();
    let mut c = create(
        head("k"),
        vec![snapshot(0, 0, json!(0)), update(1, 1, "x", json!(1))],
    );
    c.head.lease = Some(Lease {
        owner: "w".into(),
        expires_at: 1234,
    });
    c.head.updated_at = 777;
    store.commit(c.clone()).await.unwrap();
    let members: BTreeSet<String> = redis::cmd("SMEMBERS")
        .arg(format!("{p}:sessions"))
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(members, BTreeSet::from(["k".to_owned()]));
    let score: Option<f64> = redis::cmd("ZSCORE")
        .arg(format!("{p}:running"))
        .arg("k")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(score, Some(777.0));
    let lease: Option<String> = redis::cmd("HGET")
        .arg(format!("{p}:leases"))
        .arg("k")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(lease.as_deref(), Some("1234"));
    let fields: Vec<String> = redis::cmd("ZRANGE")
        .arg(store.seqs_key(&id("k")))
        .arg(0)
        .arg(-1)
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(
        fields,
        vec![
            RedisStore::checkpoint_field(0),
            RedisStore::checkpoint_field(1)
        ]
    );
    assert_eq!(
        RedisStore::checkpoint_field(u64::MAX),
        "18446744073709551615"
    );

    let mut done = advance(&c.head, vec![], vec![0]);
    done.head.phase = completed();
    done.head.lease = None;
    store.commit(done).await.unwrap();
    let score: Option<f64> = redis::cmd("ZSCORE")
        .arg(format!("{p}:running"))
        .arg("k")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(score, None);
    let lease: Option<String> = redis::cmd("HGET")
        .arg(format!("{p}:leases"))
        .arg("k")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(lease, None);
    let fields: Vec<String> = redis::cmd("ZRANGE")
        .arg(store.seqs_key(&id("k")))
        .arg(0)
        .arg(-1)
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(fields, vec![RedisStore::checkpoint_field(1)]);
    rd.cleanup().await;
}

/// With a finished TTL, a completed or failed session's keys expire (the
/// log a little after the head); a continued session's keys are permanent
/// again; an expired session is gone from `load` and `sessions`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_finished_sessions_expire() {
    let Some(rd) = Rd::new() else { return };
    let ttl = Duration::from_millis(400);
    let store = rd.store("ttl").await.with_finished_ttl(ttl);
    let mut con = store.connection();
    let pttl = |key: String| {
        let mut con = con.clone();
        async move {
            redis::cmd("PTTL")
                .arg(key)
                .query_async::<i64>(&mut con)
                .await
                .unwrap()
        }
    };
    let alive = create(head("alive"), vec![snapshot(0, 0, json!(0))]);
    store.commit(alive).await.unwrap();
    let c = create(
        head("done"),
        vec![snapshot(0, 0, json!(0)), update(1, 1, "x", json!(1))],
    );
    store.commit(c.clone()).await.unwrap();
    let done = id("done");
    for key in [
        store.head_key(&done),
        store.checkpoints_key(&done),
        store.seqs_key(&done),
    ] {
        assert_eq!(pttl(key).await, -1, "a running session does not expire");
    }
    let mut finish = advance(&c.head, vec![], vec![]);
    finish.head.phase = completed();
    store.commit(finish.clone()).await.unwrap();
    let head_ttl = pttl(store.head_key(&done)).await;
    assert!(head_ttl > 0 && head_ttl <= 400, "{head_ttl}");
    for key in [store.checkpoints_key(&done), store.seqs_key(&done)] {
        let log_ttl = pttl(key).await;
        assert!(log_ttl > 400 && log_ttl <= 1_400, "{log_ttl}");
    }
    // Continued: permanent again.
    let mut resume = advance(&finish.head, vec![update(2, 2, "y", json!(2))], vec![]);
    resume.head.phase = SessionPhase::Running;
    store.commit(resume.clone()).await.unwrap();
    for key in [
        store.head_key(&done),
        store.checkpoints_key(&done),
        store.seqs_key(&done),
    ] {
        assert_eq!(pttl(key).await, -1, "a continued session does not expire");
    }
    // Failed this time, and left to expire.
    let mut fail = advance(&resume.head, vec![], vec![]);
    fail.head.phase = SessionPhase::Failed { error: "x".into() };
    store.commit(fail).await.unwrap();
    tokio::time::sleep(ttl + Duration::from_millis(1_300)).await;
    assert_eq!(store.load(&done).await.unwrap(), None);
    assert_eq!(store.checkpoints(&done, 0).await.unwrap(), vec![]);
    assert_eq!(store.sessions().await.unwrap(), vec![id("alive")]);
    let members: Vec<String> = redis::cmd("SMEMBERS")
        .arg(format!("{}:sessions", store.prefix()))
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(
        members,
        vec!["alive".to_owned()],
        "the expired id is forgotten"
    );
    // And the id can be used again.
    store
        .commit(create(head("done"), vec![snapshot(0, 0, json!("again"))]))
        .await
        .unwrap();
    rd.cleanup().await;
}
