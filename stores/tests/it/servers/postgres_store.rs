//! The PostgreSQL store against a real server: the suite, migrations,
//! the columns beside the head, finding work.

use super::{
    block_on, interrupted, names_of, odd_ids_go_on, runnable_claims, runnable_reads, server_url,
    sessions_of_two_agents, unique, workers_take_each_session_once,
};
use crate::id;
use harness::SessionId;
use harness::session::{Lease, SessionStore, StoreError, now_millis};
use harness_stores::conformance::{
    self, Record, RoundRobin, advance, create, head, snapshot, update,
};
use harness_stores::{PostgresOptions, PostgresStore};
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the corruption hook writes: not JSON. PostgreSQL text cannot hold a
/// NUL byte, so it starts with another control character.
const PG_GARBAGE: &str = "\u{1}garbage{\"not\": json";

/// The value of the `id` columns for a session, as [`PostgresStore`]
/// documents it: the id itself, with `%` written `%25` and NUL `%00`.
fn stored_id(session: &SessionId) -> String {
    session.as_str().replace('%', "%25").replace('\0', "%00")
}

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
        let stored = stored_id(session);
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
        .commit(&create(head("m"), vec![snapshot(0, 0, json!(0))]))
        .await
        .unwrap();
    assert_eq!(stores[3].sessions().await.unwrap(), vec![id("m")]);
    // Again, sequentially: nothing changes, no data is lost.
    let again = pg.connect(&schema, PostgresOptions::default()).await;
    assert_eq!(migrations(again.clone()).await, applied);
    assert_eq!(again.sessions().await.unwrap(), vec![id("m")]);
    // The documented tables are what was created.
    let client = again.pool().get().await.unwrap();
    let tables: Vec<String> = client
        .query(
            "SELECT table_name::text FROM information_schema.tables \
             WHERE table_schema = $1 ORDER BY table_name",
            &[&schema],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        tables,
        ["checkpoints", "created", "schema_migrations", "sessions"]
    );
    // And the SQL the store prints for them says so.
    let sql = again.schema();
    for table in tables {
        assert!(
            sql.contains(&format!("CREATE TABLE \"{schema}\".{table}")),
            "{sql}"
        );
    }
    // A migration this build does not know: refused.
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
                    &[&stored_id(&id(name))],
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
    store.commit(&c.clone()).await.unwrap();
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
    store.commit(&next.clone()).await.unwrap();
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

/// Connection errors say where and what, never the password; bad schema
/// names are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_connection_errors_hide_the_password() {
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
}

/// A read-only store reads what a writable one wrote and writes nothing:
/// not a commit, not a claim, not even through its own pool, and not the
/// schema it is pointed at by mistake.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_read_only_store_reads_and_never_writes() {
    let Some(pg) = Pg::new() else { return };
    let schema = pg.fresh_schema("ro");
    let writer = pg.connect(&schema, PostgresOptions::default()).await;
    let c = crate::create_sample(&writer, "r", 2).await;
    let reader = pg
        .connect(&schema, PostgresOptions::default().read_only(true))
        .await;
    assert_eq!(reader.load(&id("r")).await.unwrap(), Some(c.head.clone()));
    assert_eq!(reader.checkpoints(&id("r"), 0).await.unwrap(), c.append);
    assert_eq!(reader.sessions().await.unwrap(), vec![id("r")]);
    // Finding work claims nothing: the writer still finds it after.
    for _ in 0..2 {
        assert_eq!(
            reader
                .runnable("conformance", now_millis(), 10)
                .await
                .unwrap(),
            vec![id("r")]
        );
    }
    assert_eq!(
        writer
            .runnable("conformance", now_millis(), 10)
            .await
            .unwrap(),
        vec![id("r")]
    );
    let next = advance(&c.head, vec![update(3, 3, "x", json!(3))], vec![]);
    match reader.commit(&next).await {
        Err(StoreError::Backend { message }) => {
            assert!(message.contains("read-only"), "{message}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    reader.flush().await.unwrap();
    assert_eq!(writer.load(&id("r")).await.unwrap(), Some(c.head));
    // The server refuses writes on the reader's connections too.
    let client = reader.pool().get().await.unwrap();
    let err = client
        .batch_execute(&format!("DELETE FROM \"{schema}\".checkpoints"))
        .await
        .expect_err("a write in a read-only transaction");
    assert!(format!("{err:?}").contains("read-only"), "{err:?}");
    assert_eq!(writer.checkpoints(&id("r"), 0).await.unwrap().len(), 3);
    // A schema without sessions is refused, and left uncreated.
    let missing = pg.fresh_schema("ro_missing");
    let options = PostgresOptions::default().schema(&missing).read_only(true);
    match PostgresStore::connect_with(&pg.url, options).await {
        Err(StoreError::Backend { message }) => {
            assert!(message.contains("holds no sessions"), "{message}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let created: bool = client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)",
            &[&missing],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!created, "the read-only store created schema {missing}");
    drop(client);
    pg.cleanup().await;
}

/// A database of the first migration (no agent column) is upgraded in
/// place: each session gets its agent from its head, a head that cannot be
/// read gets none (and the migration does not fail on it), and workers find
/// their own agent's sessions only.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_migration_2_gives_old_sessions_their_agent() {
    let Some(pg) = Pg::new() else { return };
    let schema = pg.fresh_schema("mig2");
    let store = pg.connect(&schema, PostgresOptions::default()).await;
    sessions_of_two_agents(&store).await;
    // Back to the first migration's layout, with one unreadable head.
    let client = store.pool().get().await.unwrap();
    let s = format!("\"{schema}\"");
    client
        .batch_execute(&format!(
            "ALTER TABLE {s}.sessions DROP COLUMN agent_id;
             CREATE INDEX sessions_runnable ON {s}.sessions (updated_at, id) WHERE phase = 'running';
             DELETE FROM {s}.schema_migrations WHERE version = 2;
             UPDATE {s}.sessions SET head = '{PG_GARBAGE}' WHERE id = 'bad';"
        ))
        .await
        .unwrap();
    drop(client);
    drop(store);

    let upgraded = pg
        .connect(
            &schema,
            PostgresOptions::default().claim_ttl(Duration::ZERO),
        )
        .await;
    let now = now_millis();
    assert_eq!(
        names_of(upgraded.runnable("alpha", now, 10).await.unwrap()),
        ["a-1", "a-2"]
    );
    assert_eq!(
        names_of(upgraded.runnable("beta", now, 10).await.unwrap()),
        ["b-1"]
    );
    // The unreadable session is still listed, and still refused by name.
    assert!(upgraded.sessions().await.unwrap().contains(&id("bad")));
    assert!(matches!(
        upgraded.load(&id("bad")).await,
        Err(StoreError::Load(_))
    ));
    pg.cleanup().await;
}

/// `id` values this store never writes (a `%` not followed by `25` or
/// `00`), as another tool or a hand edit would insert them.
const FOREIGN_IDS: [&str; 7] = ["100%done", "%", "%2", "%zz", "a%2", "%%25", "x%25%"];

/// A `sessions` row whose id this store never writes, running and of the
/// agent, is no session of the store: `runnable` (claiming or not, any
/// limit) passes over it and never claims it, and `sessions` leaves it
/// out; every other session is found. Before, one such row failed both
/// calls for every session (and the claiming `runnable` had claimed the
/// good rows it then did not return).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_rows_whose_ids_the_store_never_writes_are_passed_over() {
    let Some(pg) = Pg::new() else { return };
    let now = now_millis();
    for claim in [Duration::from_secs(60), Duration::ZERO] {
        let schema = pg.fresh_schema("foreign");
        let store = pg
            .connect(&schema, PostgresOptions::default().claim_ttl(claim))
            .await;
        for (i, name) in ["a", "b%c", "d"].into_iter().enumerate() {
            let mut c = create(head(name), vec![snapshot(0, 0, json!(i))]);
            c.head.updated_at = now - 1_000 + i as u64;
            store.commit(&c).await.unwrap();
        }
        let client = store.pool().get().await.unwrap();
        // The foreign rows are the oldest: first in every walk.
        for (i, bad) in FOREIGN_IDS.into_iter().enumerate() {
            client
                .execute(
                    &format!(
                        "INSERT INTO \"{schema}\".sessions \
                         (id, head, version, phase, updated_at, agent_id) \
                         VALUES ($1, '{{}}', 1, 'running', $2, 'conformance')"
                    ),
                    &[&bad, &((now - 5_000 + i as u64) as i64)],
                )
                .await
                .unwrap();
        }
        let listed = store.sessions().await;
        let listed = listed.unwrap_or_else(|e| panic!("claim {claim:?}: {e}"));
        assert_eq!(names_of(listed), ["a", "b%c", "d"], "claim {claim:?}");
        // One at a time, then the rest: the foreign rows take no place.
        let first = store.runnable("conformance", now, 1).await;
        let first = first.unwrap_or_else(|e| panic!("claim {claim:?}: {e}"));
        assert_eq!(names_of(first), ["a"], "claim {claim:?}");
        let want: &[&str] = if claim.is_zero() {
            &["a", "b%c", "d"]
        } else {
            &["b%c", "d"]
        };
        let rest = store.runnable("conformance", now, 10).await.unwrap();
        assert_eq!(names_of(rest), want, "claim {claim:?}");
        // Never claimed, nor otherwise changed.
        let rows = client
            .query(
                &format!(
                    "SELECT id, claimed_until, head, version FROM \"{schema}\".sessions \
                     WHERE NOT (id = ANY ($1))"
                ),
                &[&vec!["a", "b%25c", "d"]],
            )
            .await
            .unwrap();
        assert_eq!(rows.len(), FOREIGN_IDS.len());
        for row in rows {
            let id: String = row.get(0);
            assert_eq!(row.get::<_, Option<i64>>(1), None, "{id} was claimed");
            assert_eq!(row.get::<_, String>(2), "{}", "{id}");
            assert_eq!(row.get::<_, i64>(3), 1, "{id}");
        }
    }
    pg.cleanup().await;
}

/// The index that serves `sessions_page` is no migration: a writer creates
/// it when it is missing, a reader pages without it (the same pages), and
/// the schema's migrations do not name it (so older builds work beside
/// it).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_pages_use_an_index_a_writer_makes_and_a_reader_does_without() {
    let Some(pg) = Pg::new() else { return };
    let schema = pg.fresh_schema("pages");
    let writer = pg.connect(&schema, PostgresOptions::default()).await;
    for s in ["b/1", "b/2", "b/%3", "a", "c"] {
        crate::create_sample(&writer, s, 0).await;
    }
    let index = format!("\"{schema}\".sessions_by_id_bytes");
    assert!(
        relation_exists(&writer, &index).await,
        "a writer made {index}"
    );
    let names = migration_names(&writer).await;
    assert!(names.iter().all(|n| !n.contains("byte order")), "{names:?}");
    let pages = |store: PostgresStore| async move {
        let mut out = Vec::new();
        let mut after = None;
        loop {
            let page = store.sessions_page("b/", after.as_ref(), 1).await.unwrap();
            let Some(last) = page.last().cloned() else {
                return out;
            };
            out.extend(page);
            after = Some(last);
        }
    };
    let with_index = pages(writer.clone()).await;
    assert_eq!(with_index, [id("b/%3"), id("b/1"), id("b/2")]);
    // Dropped (as by an older build's schema, or a role that cannot make
    // it): a reader pages alike, and makes nothing.
    writer
        .pool()
        .get()
        .await
        .unwrap()
        .batch_execute(&format!("DROP INDEX {index}"))
        .await
        .unwrap();
    let reader = pg
        .connect(&schema, PostgresOptions::default().read_only(true))
        .await;
    assert_eq!(pages(reader.clone()).await, with_index);
    assert!(
        !relation_exists(&reader, &index).await,
        "a reader made nothing"
    );
    // The next writer to open makes it again.
    let again = pg.connect(&schema, PostgresOptions::default()).await;
    assert!(relation_exists(&again, &index).await, "{index} made again");
    assert_eq!(pages(again).await, with_index);
    pg.cleanup().await;
}

/// The feed of created sessions gives a creation only once every
/// transaction begun before it has ended: a creation that commits while an
/// older transaction is still open waits for it, so a reader never moves
/// past a creation that the older transaction commits later (as a reader
/// going by a sequence would), and it gets both, in the order they began.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_feed_never_moves_past_a_creation_still_under_way() {
    let Some(pg) = Pg::new() else { return };
    let store = pg.store("feed-order").await;
    let s = store.schema_name().to_owned();
    let start = store.created_since(None, 10).await.unwrap().unwrap();
    crate::create_sample(&store, "first", 0).await;
    // (Other tests' transactions on the server may hold it back a moment.)
    let first = until_given(&store, start.next).await;
    assert_eq!(first.sessions, [id("first")]);

    // A slow creator: a transaction that has its id and has not committed.
    let mut slow = store.pool().get().await.unwrap();
    let tx = slow.transaction().await.unwrap();
    tx.query_one("SELECT pg_current_xact_id()::text", &[])
        .await
        .unwrap();
    // Creations commit meanwhile: none is given while it is open, however
    // often the reader looks.
    for name in ["later-1", "later-2"] {
        crate::create_sample(&store, name, 0).await;
    }
    for _ in 0..5 {
        let page = store.created_since(Some(first.next), 10).await.unwrap();
        assert_eq!(
            page.unwrap(),
            harness::session::Created {
                sessions: Vec::new(),
                next: first.next
            },
            "nothing given past the open transaction"
        );
    }
    assert!(store.load(&id("later-1")).await.unwrap().is_some());
    // The slow creator writes its feed row (as a creation does) and commits.
    tx.execute(
        &format!("INSERT INTO \"{s}\".created (xid, id) VALUES (pg_current_xact_id(), 'slow')"),
        &[],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    drop(slow);
    let mut seen = Vec::new();
    let mut at = first.next;
    // Up to 60 s: other tests' transactions may hold the feed back.
    for _ in 0..3_000 {
        let page = store.created_since(Some(at), 1).await.unwrap().unwrap();
        assert!(page.next >= at);
        at = page.next;
        seen.extend(page.sessions);
        if seen.len() == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(seen, [id("slow"), id("later-1"), id("later-2")]);
    pg.cleanup().await;
}

/// The feed is no migration: without its table (an older build's schema,
/// a role that could not make it) the store keeps no feed and commits as
/// before; a reader makes nothing and reads the feed a writer made; the
/// schema's migrations do not name it; the fallback commit (a transaction,
/// after the one statement failed) writes the feed too.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_feed_is_made_by_a_writer_and_done_without() {
    let Some(pg) = Pg::new() else { return };
    let schema = pg.fresh_schema("feed-made");
    let writer = pg.connect(&schema, PostgresOptions::default()).await;
    let client = writer.pool().get().await.unwrap();
    let table = format!("\"{schema}\".created");
    let start = writer.created_since(None, 0).await.unwrap().unwrap();
    crate::create_sample(&writer, "a", 0).await;
    let reader = pg
        .connect(&schema, PostgresOptions::default().read_only(true))
        .await;
    let a = until_given(&reader, start.next).await;
    assert_eq!(a.sessions, [id("a")]);
    assert_eq!(until_given(&writer, start.next).await, a);
    let names = migration_names(&writer).await;
    assert!(names.iter().all(|n| !n.contains("feed")), "{names:?}");

    // A creation the one statement cannot make (here a trigger refuses
    // the statement that begins `WITH`) goes through the transaction, which
    // writes the feed as well.
    client
        .batch_execute(&format!(
            "CREATE FUNCTION \"{schema}\".refuse_one_statement() RETURNS trigger LANGUAGE plpgsql AS $f$
             BEGIN
               IF current_query() LIKE 'WITH%' THEN
                 RAISE EXCEPTION 'no one-statement commit here';
               END IF;
               RETURN NEW;
             END $f$;
             CREATE TRIGGER refuse_one_statement BEFORE INSERT ON \"{schema}\".sessions
               FOR EACH ROW EXECUTE FUNCTION \"{schema}\".refuse_one_statement();"
        ))
        .await
        .unwrap();
    crate::create_sample(&writer, "b", 0).await;
    assert_eq!(until_given(&writer, a.next).await.sessions, [id("b")]);

    // Without the table: no feed, and commits go on.
    client
        .batch_execute(&format!("DROP TABLE {table}"))
        .await
        .unwrap();
    let reader = pg
        .connect(&schema, PostgresOptions::default().read_only(true))
        .await;
    assert_eq!(reader.created_since(None, 10).await.unwrap(), None);
    assert!(
        !relation_exists(&reader, &table).await,
        "a reader made nothing"
    );
    // A writer opened before the drop refuses creations, naming the feed,
    // rather than leave them out of it; opened again, it does without.
    let refused = writer
        .commit(&create(head("d"), vec![snapshot(0, 0, json!({"n": 0}))]))
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("feed"), "{refused}");
    assert_eq!(writer.load(&id("d")).await.unwrap(), None);
    let again = pg.connect(&schema, PostgresOptions::default()).await;
    assert!(
        relation_exists(&again, &table).await,
        "a writer that owns the tables makes the feed again"
    );
    let after = again.created_since(None, 0).await.unwrap().unwrap();
    crate::create_sample(&again, "c", 0).await;
    assert_eq!(until_given(&again, after.next).await.sessions, [id("c")]);
    pg.cleanup().await;
}

/// Whether the table or index `name` (schema-qualified) exists.
async fn relation_exists(store: &PostgresStore, name: &str) -> bool {
    store
        .pool()
        .get()
        .await
        .unwrap()
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&name])
        .await
        .unwrap()
        .get::<_, bool>(0)
}

/// The names of the migrations applied to `store`'s schema.
async fn migration_names(store: &PostgresStore) -> Vec<String> {
    let schema = store.schema_name();
    store
        .pool()
        .get()
        .await
        .unwrap()
        .query(
            &format!("SELECT name FROM \"{schema}\".schema_migrations"),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// The feed's first page after `at` that gives a session, read again for
/// up to 60 s (a creation is given once the transactions begun before it
/// have ended, other tests' too, which a loaded server may hold open a
/// while); empty if none came.
async fn until_given(store: &PostgresStore, at: u64) -> harness::session::Created {
    let mut page = store.created_since(Some(at), 10).await.unwrap().unwrap();
    for _ in 0..3_000 {
        if !page.sessions.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        page = store.created_since(Some(at), 10).await.unwrap().unwrap();
    }
    page
}
