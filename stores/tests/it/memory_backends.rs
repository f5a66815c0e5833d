//! Long-term memory backends: the memory conformance suite on each (the
//! core's `InMemory`, sled, PostgreSQL and Redis on the servers
//! `scripts/services` starts), a batch failing part way, damaged records,
//! and search by meaning over each backend after a reopen (vectors
//! persisted), with the core's offline `HashedWords` embedder.

use harness::memory::{
    HashedWords, InMemory, IndexConfig, Memory, MemoryBackend, MemoryError, Namespace, Search,
    Write,
};
use harness_stores::memory_conformance::{self, T0, expiring, ns, record};
use serde_json::json;
use std::sync::Arc;

const DIMENSIONS: usize = 64;

fn indexed(backend: Arc<dyn MemoryBackend>, words: Arc<HashedWords>) -> Memory {
    Memory::from_arc(backend).with_index(IndexConfig::new(words, DIMENSIONS).fields(["text"]))
}

const NOTES: &[(&str, &str)] = &[
    ("tea", "the user drinks green tea every morning"),
    ("rust", "the user writes services in rust and likes cargo"),
    ("cat", "the user has a cat called Miso"),
    ("bike", "the user rides a bike to work when it is dry"),
];

/// Puts the notes through `open()`'s memory, then opens it again and
/// searches by meaning: the items are found with the vectors the backend
/// kept (the embedder sees only the queries after the reopen).
async fn search_by_meaning_after_reopen(open: impl Fn() -> Arc<dyn MemoryBackend>) {
    let user = Namespace::new(["users", "u-1"]).unwrap();
    {
        let memory = indexed(open(), Arc::new(HashedWords::new(DIMENSIONS)));
        for (key, text) in NOTES {
            memory
                .put(&user, key, json!({"text": text, "kind": "note"}))
                .await
                .unwrap();
        }
        memory
            .put(
                &user,
                "unindexed",
                json!({"other": "green tea cat bike rust"}),
            )
            .await
            .unwrap();
    }
    let words = Arc::new(HashedWords::new(DIMENSIONS));
    let memory = indexed(open(), Arc::clone(&words));
    let queries = [
        ("which green tea does the user drink", "tea"),
        ("what is the name of the cat", "cat"),
        ("rides a bike to work", "bike"),
        ("services written in rust", "rust"),
    ];
    for (query, expected) in queries {
        let hits = memory
            .search(&Search::under(ns(&["users"])).text(query).limit(2))
            .await
            .unwrap();
        assert_eq!(hits[0].item.key, expected, "{query}: {hits:?}");
        assert!(hits[0].score.unwrap() > hits[1].score.unwrap(), "{hits:?}");
        assert!(hits.iter().all(|h| h.item.key != "unindexed"));
    }
    assert_eq!(
        words.texts(),
        queries.len(),
        "only the queries were embedded after the reopen"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_conformance_in_memory() {
    memory_conformance::run_all(InMemory::new).await;
}

#[cfg(feature = "sled")]
mod sled_memory {
    use super::*;
    use harness_stores::SledMemory;
    use std::sync::Mutex;

    /// A key the sled and Redis backends refuse: it has a control
    /// character (the core refuses it first; a backend must too).
    fn control_key() -> Write {
        Write::Put(record(&ns(&["fail"]), "bad\u{1}key", json!({}), T0))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn memory_conformance_sled_temporary() {
        memory_conformance::run_all_with(|| SledMemory::temporary().unwrap(), Some(&control_key))
            .await;
    }

    /// The suite on databases on disk, each write flushed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn memory_conformance_sled_on_disk() {
        let dirs = Mutex::new(Vec::new());
        memory_conformance::run_all(|| {
            let dir = tempfile::tempdir().unwrap();
            let memory = SledMemory::open(dir.path().join("memory")).unwrap();
            dirs.lock().unwrap().push(dir);
            memory
        })
        .await;
    }

    /// Writers putting at once on a memory that flushes each write all
    /// finish (sled's own `flush_async` hung for good with 8 of them, and
    /// took the runtime's threads with it: the writers run on a runtime of
    /// their own, on a thread the test waits for at most 60 s).
    #[test]
    fn concurrent_flushed_writers_all_finish() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(4)
                .enable_all()
                .build()
                .unwrap();
            let found = runtime.block_on(async move {
                let memory = harness::memory::Memory::new(SledMemory::open(&path).unwrap());
                let space = harness::memory::Namespace::new(["w"]).unwrap();
                for writers in [8_usize, 16] {
                    let tasks: Vec<_> = (0..writers)
                        .map(|w| {
                            let (memory, space) = (memory.clone(), space.clone());
                            tokio::spawn(async move {
                                for i in 0..10 {
                                    let key = format!("{writers}-{w}-{i}");
                                    memory.put(&space, &key, json!({"w": w, "i": i})).await?;
                                }
                                Ok::<_, harness::memory::MemoryError>(())
                            })
                        })
                        .collect();
                    for task in tasks {
                        task.await.unwrap().unwrap();
                    }
                }
                let search = harness::memory::Search::under(space).limit(1000);
                memory.search(&search).await.unwrap().len()
            });
            let _ = done.send(found);
        });
        let found = finished
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("the writers did not finish in 60 s");
        assert_eq!(found, 240);
    }

    /// A touch of a damaged record aborts the sled transaction after the
    /// batch's earlier writes were made in it: none of them is left.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_failing_in_its_transaction_leaves_nothing() {
        let memory = SledMemory::temporary().unwrap();
        let n = ns(&["damaged"]);
        memory
            .apply(vec![Write::Put(record(&n, "bad", json!({"v": 1}), T0))], T0)
            .await
            .unwrap();
        let key = memory.tree().iter().keys().next().unwrap().unwrap();
        let mut bytes = memory.tree().get(&key).unwrap().unwrap().to_vec();
        let last = bytes.len() - 2;
        bytes[last] ^= 0x01;
        memory.tree().insert(&key, bytes).unwrap();
        let touch = Write::Touch {
            namespace: n.clone(),
            key: "bad".into(),
            expires_at: T0 + 5,
            from: T0,
        };
        memory_conformance::failed_batch(&memory, touch)
            .await
            .unwrap();
    }

    /// A damaged record is reported by get and search, naming it; a put
    /// over it repairs it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn damaged_records_are_reported_and_a_put_repairs_them() {
        let memory = SledMemory::temporary().unwrap();
        let n = ns(&["users", "u1"]);
        memory
            .apply(
                vec![Write::Put(expiring(
                    &n,
                    "k",
                    json!({"text": "hello"}),
                    T0,
                    1_000,
                ))],
                T0,
            )
            .await
            .unwrap();
        let key = memory.tree().iter().keys().next().unwrap().unwrap();
        let good = memory.tree().get(&key).unwrap().unwrap().to_vec();
        let mut flipped = good.clone();
        let i = flipped.len() - 3;
        flipped[i] ^= 0x20;
        let mut version = good.clone();
        version[1] = 9;
        let damages: Vec<(Vec<u8>, &str)> = vec![
            (flipped, "checksum"),
            (version, "record format 9"),
            (b"garbage, not a record".to_vec(), "not a stored record"),
            (good[..12].to_vec(), "not a stored record"),
        ];
        for (bytes, expected) in damages {
            memory.tree().insert(&key, bytes).unwrap();
            for err in [
                memory.get(&n, "k", T0).await.unwrap_err(),
                memory.search(&n, &[], 0, 10, T0).await.unwrap_err(),
            ] {
                assert!(
                    matches!(&err, MemoryError::Corrupt { namespace, key, .. }
                        if namespace == "users/u1" && key == "k")
                        && err.to_string().contains(expected),
                    "{err}"
                );
            }
        }
        let created = memory
            .apply(
                vec![Write::Put(record(&n, "k", json!({"v": 2}), T0 + 1))],
                T0 + 1,
            )
            .await
            .unwrap();
        assert_eq!(created, vec![T0 + 1]);
        assert_eq!(
            memory
                .get(&n, "k", T0 + 1)
                .await
                .unwrap()
                .unwrap()
                .item
                .value,
            json!({"v": 2})
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sled_memory_searches_by_meaning_after_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("memory");
        search_by_meaning_after_reopen(|| {
            // One process opens a sled database once: the previous handle
            // is dropped before this runs (sled's threads may hold it for a
            // moment longer).
            Arc::new(crate::reopen(|| SledMemory::open(&path)))
        })
        .await;
    }

    /// Sessions and memory in one database: the memory's tree beside the
    /// session store's.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sled_memory_shares_a_session_store_database() {
        use harness::session::SessionStore;
        let dir = tempfile::tempdir().unwrap();
        let store = harness_stores::SledStore::open(dir.path()).unwrap();
        let memory = SledMemory::in_db(store.db()).unwrap();
        let n = ns(&["a"]);
        memory
            .apply(vec![Write::Put(record(&n, "k", json!({"v": 1}), T0))], T0)
            .await
            .unwrap();
        assert!(store.sessions().await.unwrap().is_empty());
        assert!(memory.get(&n, "k", T0).await.unwrap().is_some());
    }

    /// The directory is 0700 and sled's files 0600, like the session
    /// store's.
    #[cfg(unix)]
    #[test]
    fn sled_memory_files_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("deep").join("memory");
        let memory = SledMemory::open(&path).unwrap();
        drop(memory);
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o700);
        for entry in std::fs::read_dir(&path).unwrap() {
            let entry = entry.unwrap();
            let m = mode(&entry.path());
            assert_eq!(m & 0o077, 0, "{} is {m:o}", entry.path().display());
        }
    }
}

/// The URL in `var`; `None` (skip) only when `HARNESS_SKIP_SERVER_TESTS=1`.
#[cfg(any(feature = "postgres", feature = "redis"))]
fn server_url(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var("HARNESS_SKIP_SERVER_TESTS").as_deref() == Ok("1") => {
            eprintln!("skipped: {var} is not set and HARNESS_SKIP_SERVER_TESTS=1");
            None
        }
        _ => panic!(
            "{var} is not set: start the test servers with `eval \"$(scripts/services)\"` \
             (or set HARNESS_SKIP_SERVER_TESTS=1 to skip the server tests)"
        ),
    }
}

/// A name no other run or test uses.
#[cfg(any(feature = "postgres", feature = "redis"))]
fn unique(tag: &str) -> String {
    let random = harness::SessionId::random().as_str().replace('-', "");
    format!("t_{tag}_{}", &random[..16])
}

/// Runs `f` from the suite's synchronous factory inside the test runtime.
#[cfg(any(feature = "postgres", feature = "redis"))]
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(f))
}

#[cfg(feature = "postgres")]
mod postgres_memory {
    use super::*;
    use harness_stores::{PostgresMemory, PostgresMemoryOptions};
    use std::sync::Mutex;

    async fn connect(url: &str, schema: &str) -> PostgresMemory {
        let options = PostgresMemoryOptions::default().schema(schema).pool_size(4);
        PostgresMemory::connect_with(url, options).await.unwrap()
    }

    async fn drop_schemas(url: &str, schemas: &[String]) {
        let memory = connect(url, &unique("cleanup")).await;
        let client = memory.pool().get().await.unwrap();
        for schema in schemas
            .iter()
            .map(String::as_str)
            .chain([memory.schema_name()])
        {
            client
                .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
                .await
                .unwrap();
        }
    }

    /// jsonb cannot hold U+0000: the server refuses the put in the
    /// middle of the batch's transaction.
    fn nul_value() -> Write {
        Write::Put(record(&ns(&["fail"]), "nul", json!({"s": "a\u{0}b"}), T0))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn memory_conformance_postgres() {
        let Some(url) = server_url("HARNESS_TEST_POSTGRES_URL") else {
            return;
        };
        let schemas = Mutex::new(Vec::new());
        memory_conformance::run_all_with(
            || {
                let schema = unique("mem");
                schemas.lock().unwrap().push(schema.clone());
                block_on(connect(&url, &schema))
            },
            Some(&nul_value),
        )
        .await;
        let schemas = schemas.into_inner().unwrap();
        drop_schemas(&url, &schemas).await;
    }

    /// The refused value is named in the error; connecting twice to one
    /// schema (the table exists) works; purge removes expired rows only.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_memory_refuses_nul_reopens_and_purges() {
        let Some(url) = server_url("HARNESS_TEST_POSTGRES_URL") else {
            return;
        };
        let schema = unique("mem");
        let memory = connect(&url, &schema).await;
        let err = memory.apply(vec![nul_value()], T0).await.unwrap_err();
        assert!(
            matches!(&err, MemoryError::Value { key, .. } if key == "nul")
                && err.to_string().contains("PostgreSQL cannot store it"),
            "{err}"
        );
        let n = ns(&["p"]);
        memory
            .apply(
                vec![
                    Write::Put(expiring(&n, "old", json!({}), T0, 10)),
                    Write::Put(record(&n, "kept", json!({}), T0)),
                ],
                T0,
            )
            .await
            .unwrap();
        let again = connect(&url, &schema).await;
        assert!(again.get(&n, "kept", T0).await.unwrap().is_some());
        assert_eq!(again.purge_expired(T0 + 10).await.unwrap(), 1);
        assert_eq!(again.search(&n, &[], 0, 10, T0).await.unwrap().len(), 1);
        drop_schemas(&url, &[schema]).await;
    }

    /// Read-only: a schema without the table is refused, naming it, and
    /// nothing is created there; an existing table is read.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_memory_read_only_creates_nothing_and_reads_what_is_there() {
        let Some(url) = server_url("HARNESS_TEST_POSTGRES_URL") else {
            return;
        };
        let read_only = |schema: &str| {
            PostgresMemoryOptions::default()
                .schema(schema)
                .read_only(true)
        };
        for missing in [unique("none"), unique("none")] {
            let err = PostgresMemory::connect_with(&url, read_only(&missing))
                .await
                .unwrap_err()
                .to_string();
            assert!(err.contains("no table") && err.contains(&missing), "{err}");
            let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(connection);
            let row = client
                .query_one(
                    "SELECT count(*) FROM information_schema.schemata WHERE schema_name = $1",
                    &[&missing],
                )
                .await
                .unwrap();
            assert_eq!(row.get::<_, i64>(0), 0, "schema {missing} was created");
        }
        let schema = unique("mem");
        let written = connect(&url, &schema).await;
        let n = ns(&["r"]);
        written
            .apply(vec![Write::Put(record(&n, "k", json!({"v": 1}), T0))], T0)
            .await
            .unwrap();
        let reader = PostgresMemory::connect_with(&url, read_only(&schema))
            .await
            .unwrap();
        let got = reader.get(&n, "k", T0).await.unwrap().unwrap();
        assert_eq!(got.item.value, json!({"v": 1}));
        drop_schemas(&url, &[schema]).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_memory_searches_by_meaning_after_a_reopen() {
        let Some(url) = server_url("HARNESS_TEST_POSTGRES_URL") else {
            return;
        };
        let schema = unique("mem");
        search_by_meaning_after_reopen(|| Arc::new(block_on(connect(&url, &schema)))).await;
        drop_schemas(&url, &[schema]).await;
    }
}

#[cfg(feature = "redis")]
mod redis_memory {
    use super::*;
    use harness_stores::RedisMemory;
    use std::sync::Mutex;

    async fn drop_prefixes(url: &str, prefixes: &[String]) {
        let memory = RedisMemory::connect(url, "cleanup").await.unwrap();
        for prefix in prefixes {
            let memory = RedisMemory::from_manager(memory.connection(), prefix).unwrap();
            let keys = memory.keys();
            let _: () = redis::cmd("DEL")
                .arg(&keys[..])
                .query_async(&mut memory.connection())
                .await
                .unwrap();
        }
    }

    fn control_key() -> Write {
        Write::Put(record(&ns(&["fail"]), "bad\u{1}key", json!({}), T0))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn memory_conformance_redis() {
        let Some(url) = server_url("HARNESS_TEST_REDIS_URL") else {
            return;
        };
        let prefixes = Mutex::new(Vec::new());
        memory_conformance::run_all_with(
            || {
                let prefix = unique("mem");
                prefixes.lock().unwrap().push(prefix.clone());
                block_on(RedisMemory::connect(&url, &prefix)).unwrap()
            },
            Some(&control_key),
        )
        .await;
        drop_prefixes(&url, &prefixes.into_inner().unwrap()).await;
    }

    /// A key of the wrong type is found before the script writes anything:
    /// the batch fails whole, naming the key.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_memory_refuses_a_key_of_another_type_before_writing() {
        let Some(url) = server_url("HARNESS_TEST_REDIS_URL") else {
            return;
        };
        let prefix = unique("mem");
        let memory = RedisMemory::connect(&url, &prefix).await.unwrap();
        let [_, _, meta] = memory.keys();
        let _: () = redis::cmd("SET")
            .arg(&meta)
            .arg("not a hash")
            .query_async(&mut memory.connection())
            .await
            .unwrap();
        let n = ns(&["a"]);
        let err = memory
            .apply(vec![Write::Put(record(&n, "k", json!({}), T0))], T0)
            .await
            .unwrap_err();
        assert!(err.to_string().contains(&meta), "{err}");
        let idx_len: usize = redis::cmd("ZCARD")
            .arg(&memory.keys()[0])
            .query_async(&mut memory.connection())
            .await
            .unwrap();
        assert_eq!(idx_len, 0);
        drop_prefixes(&url, &[prefix]).await;
    }

    /// Times in the meta hash that a batch cannot read as the backend
    /// writes them (`created expires`, each a u64 in digits; damaged,
    /// edited, or past u64) are taken as no record there, as the sled
    /// backend takes a record it cannot read: the batch is applied whole
    /// (before, the script failed part way and kept the writes before the
    /// damaged one, or returned a created time the backend then could not
    /// read), a put replaces the damaged times, a touch leaves them, and
    /// a read reports them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_memory_batches_apply_whole_over_times_they_cannot_read() {
        let Some(url) = server_url("HARNESS_TEST_REDIS_URL") else {
            return;
        };
        let n = ns(&["m"]);
        let put = |key: &str, v: u64, at: u64| Write::Put(record(&n, key, json!({"v": v}), at));
        let bad_times = [
            "garbage",
            "",
            "5",
            "5 x",
            " 5 ",
            "+5 ",
            "5 +6",
            "5 5 5",
            "99999999999999999999 ",
            "18446744073709551616 ",
            "5 18446744073709551616",
            "5 99999999999999999999",
        ];
        let mut prefixes = Vec::new();
        for bad in bad_times {
            let prefix = unique("meta");
            prefixes.push(prefix.clone());
            let memory = RedisMemory::connect(&url, &prefix).await.unwrap();
            memory.apply(vec![put("b", 0, T0)], T0).await.unwrap();
            let [_, _, meta] = memory.keys();
            let mut con = memory.connection();
            let members: Vec<Vec<u8>> = redis::cmd("HKEYS")
                .arg(&meta)
                .query_async(&mut con)
                .await
                .unwrap();
            let [member] = <[Vec<u8>; 1]>::try_from(members).unwrap();
            let damage = || {
                let mut con = con.clone();
                let (meta, member) = (meta.clone(), member.clone());
                async move {
                    let _: () = redis::cmd("HSET")
                        .arg(&meta)
                        .arg(&member)
                        .arg(bad)
                        .query_async(&mut con)
                        .await
                        .unwrap();
                }
            };

            // A put, then a put over the damaged times: both applied, the
            // damaged record replaced with its new created time.
            damage().await;
            let created = memory
                .apply(vec![put("a", 1, T0 + 1), put("b", 1, T0 + 1)], T0 + 1)
                .await;
            let created = created.unwrap_or_else(|e| panic!("{bad:?}: {e}"));
            assert_eq!(created, vec![T0 + 1, T0 + 1], "{bad:?}");
            for key in ["a", "b"] {
                let got = memory.get(&n, key, T0 + 1).await.unwrap().unwrap();
                assert_eq!(got.item.value, json!({"v": 1}), "{bad:?} {key}");
                assert_eq!(got.item.created_at, T0 + 1, "{bad:?} {key}");
            }

            // A put, then a touch of damaged times: the put applied, the
            // damaged times left as they are, and reported by a read.
            damage().await;
            let touch = Write::Touch {
                namespace: n.clone(),
                key: "b".into(),
                expires_at: T0 + 100,
                from: T0 + 1,
            };
            let created = memory.apply(vec![put("c", 2, T0 + 2), touch], T0 + 2).await;
            let created = created.unwrap_or_else(|e| panic!("{bad:?}: {e}"));
            assert_eq!(created, vec![T0 + 2], "{bad:?}");
            assert!(memory.get(&n, "c", T0 + 2).await.unwrap().is_some());
            let left: Vec<u8> = redis::cmd("HGET")
                .arg(&meta)
                .arg(&member)
                .query_async(&mut con)
                .await
                .unwrap();
            assert_eq!(left, bad.as_bytes(), "{bad:?}");
            let err = memory.get(&n, "b", T0 + 2).await.unwrap_err();
            assert!(
                matches!(&err, MemoryError::Corrupt { namespace, key, .. }
                    if namespace == "m" && key == "b"),
                "{bad:?}: {err}"
            );
        }
        // Times written oddly but readable (leading zeros) are read, by a
        // batch as by a read: the created time is kept.
        let prefix = unique("meta");
        prefixes.push(prefix.clone());
        let memory = RedisMemory::connect(&url, &prefix).await.unwrap();
        memory.apply(vec![put("b", 0, T0)], T0).await.unwrap();
        let [_, _, meta] = memory.keys();
        let mut con = memory.connection();
        let members: Vec<Vec<u8>> = redis::cmd("HKEYS")
            .arg(&meta)
            .query_async(&mut con)
            .await
            .unwrap();
        let odd = format!("{:0>30} ", T0 - 7);
        let _: () = redis::cmd("HSET")
            .arg(&meta)
            .arg(&members[0])
            .arg(&odd)
            .query_async(&mut con)
            .await
            .unwrap();
        let created = memory
            .apply(vec![put("b", 1, T0 + 1)], T0 + 1)
            .await
            .unwrap();
        assert_eq!(created, vec![T0 - 7]);
        drop_prefixes(&url, &prefixes).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_memory_searches_by_meaning_after_a_reopen() {
        let Some(url) = server_url("HARNESS_TEST_REDIS_URL") else {
            return;
        };
        let prefix = unique("mem");
        search_by_meaning_after_reopen(|| {
            Arc::new(block_on(RedisMemory::connect(&url, &prefix)).unwrap())
        })
        .await;
        drop_prefixes(&url, &[prefix]).await;
    }
}
