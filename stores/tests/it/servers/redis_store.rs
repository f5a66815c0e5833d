//! The Redis store against a real server: the suite, its documented keys,
//! finding work, finished sessions that expire.

use super::{
    block_on, completed, names_of, odd_ids_go_on, runnable_claims, runnable_reads, server_url,
    sessions_of_two_agents, unique, workers_take_each_session_once,
};
use crate::id;
use harness::SessionId;
use harness::session::{Lease, SessionPhase, SessionStore, StoreError, now_millis};
use harness_stores::conformance::{
    self, Record, RoundRobin, advance, create, head, snapshot, update,
};
use harness_stores::{RedisOptions, RedisStore};
use serde_json::json;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the corruption hook writes: not JSON.
const REDIS_GARBAGE: &[u8] = crate::GARBAGE;

/// A key of `session`, as [`RedisStore`] documents them: `P:{id}:head`,
/// `P:{id}:cp`, `P:{id}:seqs`.
fn session_key(store: &RedisStore, session: &SessionId, name: &str) -> String {
    format!("{}:{{{session}}}:{name}", store.prefix())
}

/// The field of checkpoint `seq` in `P:{id}:cp` and `P:{id}:seqs`: the seq
/// as 20 zero-padded digits.
fn checkpoint_field(seq: u64) -> String {
    format!("{seq:020}")
}

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
                // Bytes: a test writes keys that are not UTF-8.
                let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
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
                    .arg(session_key(store, session, "head"))
                    .arg(REDIS_GARBAGE)
                    .arg("XX")
                    .query_async(&mut con)
                    .await
                    .unwrap();
                assert!(set.is_some(), "no head to corrupt: {session:?}");
            }
            Record::Checkpoint(seq) => {
                let key = session_key(store, session, "cp");
                let field = checkpoint_field(seq);
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
    store.commit(&c.clone()).await.unwrap();
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
        .arg(session_key(&store, &id("k"), "seqs"))
        .arg(0)
        .arg(-1)
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(fields, vec![checkpoint_field(0), checkpoint_field(1)]);
    assert_eq!(checkpoint_field(u64::MAX), "18446744073709551615");

    let mut done = advance(&c.head, vec![], vec![0]);
    done.head.phase = completed();
    done.head.lease = None;
    store.commit(&done).await.unwrap();
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
        .arg(session_key(&store, &id("k"), "seqs"))
        .arg(0)
        .arg(-1)
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(fields, vec![checkpoint_field(1)]);
    rd.cleanup().await;
}

/// With a finished TTL, a completed or failed session's keys expire (the
/// log a little after the head); a continued session's keys are permanent
/// again; an expired session is gone from `load` and `sessions`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_finished_sessions_expire() {
    let Some(rd) = Rd::new() else { return };
    // Long enough that no stall of a loaded machine lets a key expire
    // before it is looked at; a second store on the same keys, with a
    // short TTL, finishes the session that is left to expire.
    let long = Duration::from_secs(30);
    let store = rd.store("ttl").await.with_finished_ttl(long);
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
    store.commit(&alive).await.unwrap();
    let c = create(
        head("done"),
        vec![snapshot(0, 0, json!(0)), update(1, 1, "x", json!(1))],
    );
    store.commit(&c.clone()).await.unwrap();
    let done = id("done");
    for key in [
        session_key(&store, &done, "head"),
        session_key(&store, &done, "cp"),
        session_key(&store, &done, "seqs"),
    ] {
        assert_eq!(pttl(key).await, -1, "a running session does not expire");
    }
    let mut finish = advance(&c.head, vec![], vec![]);
    finish.head.phase = completed();
    store.commit(&finish.clone()).await.unwrap();
    let head_ttl = pttl(session_key(&store, &done, "head")).await;
    assert!(head_ttl > 0 && head_ttl <= 30_000, "{head_ttl}");
    for key in [
        session_key(&store, &done, "cp"),
        session_key(&store, &done, "seqs"),
    ] {
        // A second after the head (measured before it).
        let log_ttl = pttl(key).await;
        assert!(
            log_ttl > head_ttl && log_ttl <= 31_000,
            "{log_ttl} against the head's {head_ttl}"
        );
    }
    // Continued: permanent again.
    let mut resume = advance(&finish.head, vec![update(2, 2, "y", json!(2))], vec![]);
    resume.head.phase = SessionPhase::Running;
    store.commit(&resume.clone()).await.unwrap();
    for key in [
        session_key(&store, &done, "head"),
        session_key(&store, &done, "cp"),
        session_key(&store, &done, "seqs"),
    ] {
        assert_eq!(pttl(key).await, -1, "a continued session does not expire");
    }
    // Failed this time, and left to expire.
    let ttl = Duration::from_millis(400);
    let short = rd
        .connect(store.prefix(), RedisOptions::default())
        .await
        .with_finished_ttl(ttl);
    let mut fail = advance(&resume.head, vec![], vec![]);
    fail.head.phase = SessionPhase::Failed { error: "x".into() };
    short.commit(&fail).await.unwrap();
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
        .commit(&create(head("done"), vec![snapshot(0, 0, json!("again"))]))
        .await
        .unwrap();
    rd.cleanup().await;
}

/// Connection errors say where and what, never the password; bad key
/// prefixes are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_connection_errors_hide_the_password() {
    let rd = RedisStore::connect("redis://someone:s3cret-pw@127.0.0.1:1/").await;
    match rd {
        Err(StoreError::Backend { message }) => {
            assert!(!message.contains("s3cret"), "{message}");
            assert!(message.contains("127.0.0.1"), "{message}");
        }
        other => panic!("expected a backend error, got {other:?}"),
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

/// A read-only store reads what a writable one wrote and writes nothing:
/// not a commit, not a claim, not the index of session ids.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_read_only_store_reads_and_never_writes() {
    let Some(rd) = Rd::new() else { return };
    let prefix = rd.fresh_prefix("ro");
    let writer = rd.connect(&prefix, RedisOptions::default()).await;
    let c = crate::create_sample(&writer, "r", 2).await;
    let reader = rd
        .connect(&prefix, RedisOptions::default().read_only(true))
        .await;
    assert_eq!(reader.load(&id("r")).await.unwrap(), Some(c.head.clone()));
    assert_eq!(reader.checkpoints(&id("r"), 0).await.unwrap(), c.append);
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
    assert_eq!(writer.load(&id("r")).await.unwrap(), Some(c.head));
    // A session whose head is gone (expired): neither lists it, and only
    // the writer forgets its id.
    crate::create_sample(&writer, "gone", 0).await;
    let mut con = reader.connection();
    let _: i64 = redis::cmd("DEL")
        .arg(session_key(&reader, &id("gone"), "head"))
        .query_async(&mut con)
        .await
        .unwrap();
    let members = || {
        let mut con = con.clone();
        let key = format!("{prefix}:sessions");
        async move {
            redis::cmd("SMEMBERS")
                .arg(key)
                .query_async::<BTreeSet<String>>(&mut con)
                .await
                .unwrap()
        }
    };
    assert_eq!(reader.sessions().await.unwrap(), vec![id("r")]);
    assert!(members().await.contains("gone"), "the reader forgot an id");
    assert_eq!(writer.sessions().await.unwrap(), vec![id("r")]);
    assert!(!members().await.contains("gone"));
    // A key of the walk holding another type fails the reader's walk with
    // the key and both types named, each in turn, and is left as it was.
    let before = reader
        .runnable("conformance", now_millis(), 10)
        .await
        .unwrap();
    for (key, kind) in [("leases", "hash"), ("claims", "hash"), ("agents", "hash")] {
        let key = format!("{prefix}:{key}");
        let kept: Vec<(String, String)> = redis::cmd("HGETALL")
            .arg(&key)
            .query_async(&mut con)
            .await
            .unwrap();
        let _: () = redis::cmd("DEL")
            .arg(&key)
            .query_async(&mut con)
            .await
            .unwrap();
        let _: () = redis::cmd("RPUSH")
            .arg(&key)
            .arg("not a hash")
            .query_async(&mut con)
            .await
            .unwrap();
        let refused = reader
            .runnable("conformance", now_millis(), 10)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains(&key) && refused.contains("holds a list") && refused.contains(kind),
            "{refused}"
        );
        let _: () = redis::cmd("DEL")
            .arg(&key)
            .query_async(&mut con)
            .await
            .unwrap();
        for (field, value) in kept {
            let _: () = redis::cmd("HSET")
                .arg(&key)
                .arg(field)
                .arg(value)
                .query_async(&mut con)
                .await
                .unwrap();
        }
    }
    assert_eq!(
        reader
            .runnable("conformance", now_millis(), 10)
            .await
            .unwrap(),
        before
    );
    rd.cleanup().await;
}

/// Running sessions written before the agents hash existed are found by the
/// agent in their head; an unreadable head belongs to no agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_runnable_reads_the_agent_of_sessions_written_before_the_agents_hash() {
    let Some(rd) = Rd::new() else { return };
    let prefix = rd.fresh_prefix("agents");
    let store = rd
        .connect(&prefix, RedisOptions::default().claim_ttl(Duration::ZERO))
        .await;
    sessions_of_two_agents(&store).await;
    let mut con = store.connection();
    let _: () = redis::cmd("DEL")
        .arg(format!("{prefix}:agents"))
        .query_async(&mut con)
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(format!("{prefix}:{{bad}}:head"))
        .arg("{not json")
        .query_async(&mut con)
        .await
        .unwrap();
    let now = now_millis();
    assert_eq!(
        names_of(store.runnable("alpha", now, 10).await.unwrap()),
        ["a-1", "a-2"]
    );
    assert_eq!(
        names_of(store.runnable("beta", now, 10).await.unwrap()),
        ["b-1"]
    );
    assert_eq!(store.runnable("gamma", now, 10).await.unwrap(), vec![]);
    rd.cleanup().await;
}

/// The values `runnable` finds in `P:leases` or `P:claims` that are not an
/// expiry in ms as the store writes one (digits): edits, another tool.
const NOT_AN_EXPIRY: [&str; 10] = [
    "garbage", "", "12ab", "-5", "1e3", " 5", "0x10", "nan", "5.5", "inf",
];

/// A lease or claim value `runnable` cannot read is taken as none: the
/// walk goes on past it and returns every runnable session at once, the
/// damaged one too (taking it is the compare-and-set on its head, whose
/// lease is the one that counts), and claims them all; a live lease still
/// hides its session.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_runnable_takes_a_lease_or_claim_it_cannot_read_as_none() {
    let Some(rd) = Rd::new() else { return };
    let now = now_millis();
    for bad in NOT_AN_EXPIRY {
        for hash in ["leases", "claims"] {
            let prefix = rd.fresh_prefix("unread");
            let store = rd
                .connect(
                    &prefix,
                    RedisOptions::default().claim_ttl(Duration::from_secs(60)),
                )
                .await;
            // Oldest first: a, the damaged one, b, and one with a live
            // lease.
            for (i, name) in ["a", "damaged", "b"].into_iter().enumerate() {
                super::put(
                    &store,
                    name,
                    SessionPhase::Running,
                    None,
                    now - 900 + i as u64,
                )
                .await;
            }
            super::put(
                &store,
                "live",
                SessionPhase::Running,
                Some(now + 3_600_000),
                now - 1_000,
            )
            .await;
            let mut con = store.connection();
            let _: () = redis::cmd("HSET")
                .arg(format!("{prefix}:{hash}"))
                .arg("damaged")
                .arg(bad)
                .query_async(&mut con)
                .await
                .unwrap();
            let found = store.runnable("conformance", now, 10).await;
            let found = found.unwrap_or_else(|e| panic!("{hash} {bad:?}: {e}"));
            assert_eq!(names_of(found), ["a", "damaged", "b"], "{hash} {bad:?}");
            // All three are claimed now (the damaged claim rewritten).
            assert_eq!(
                store.runnable("conformance", now, 10).await.unwrap(),
                vec![],
                "{hash} {bad:?}"
            );
            let claims: std::collections::BTreeMap<String, String> = redis::cmd("HGETALL")
                .arg(format!("{prefix}:claims"))
                .query_async(&mut con)
                .await
                .unwrap();
            assert_eq!(
                claims.keys().map(String::as_str).collect::<Vec<_>>(),
                ["a", "b", "damaged"],
                "{hash} {bad:?}"
            );
            assert!(
                claims.values().all(|v| v.parse::<u64>().is_ok()),
                "{hash} {bad:?}: {claims:?}"
            );
            // Taking the damaged one goes by its head, as for any other.
            let h = store.load(&id("damaged")).await.unwrap().unwrap();
            let mut take = advance(&h, vec![], vec![]);
            take.head.lease = Some(Lease {
                owner: "worker".into(),
                expires_at: now + 60_000,
            });
            store.commit(&take).await.unwrap();
        }
    }
    rd.cleanup().await;
}

/// A member of `P:running` or `P:sessions` that is not UTF-8 (no session
/// id is) is skipped: the other sessions are still found and listed, and
/// those the walk claimed are returned, not dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_runnable_and_sessions_skip_ids_that_are_not_utf8() {
    let Some(rd) = Rd::new() else { return };
    let now = now_millis();
    let foreign: [&[u8]; 3] = [b"\xff", b"a\xfe\xffb", b"\xc3("];
    for bytes in foreign {
        let prefix = rd.fresh_prefix("utf8");
        let store = rd
            .connect(
                &prefix,
                RedisOptions::default().claim_ttl(Duration::from_secs(60)),
            )
            .await;
        super::put(&store, "a", SessionPhase::Running, None, now - 900).await;
        super::put(&store, "b", SessionPhase::Running, None, now - 800).await;
        let mut con = store.connection();
        // Oldest of all, and this agent's; listed, with a head.
        let _: () = redis::pipe()
            .cmd("ZADD")
            .arg(format!("{prefix}:running"))
            .arg(now - 850)
            .arg(bytes)
            .ignore()
            .cmd("HSET")
            .arg(format!("{prefix}:agents"))
            .arg(bytes)
            .arg("conformance")
            .ignore()
            .cmd("SADD")
            .arg(format!("{prefix}:sessions"))
            .arg(bytes)
            .ignore()
            .cmd("SET")
            .arg([format!("{prefix}:{{").as_bytes(), bytes, b"}:head"].concat())
            .arg("{}")
            .ignore()
            .query_async(&mut con)
            .await
            .unwrap();
        let found = store.runnable("conformance", now, 10).await;
        let found = found.unwrap_or_else(|e| panic!("{bytes:?}: {e}"));
        assert_eq!(names_of(found), ["a", "b"], "{bytes:?}");
        let listed = store.sessions().await;
        let listed = listed.unwrap_or_else(|e| panic!("{bytes:?}: {e}"));
        assert_eq!(listed, vec![id("a"), id("b")], "{bytes:?}");
        // A page skips it too, and reads on past it: two ids are asked
        // for, and two are given, whether it sorts between them or after.
        let page = store.sessions_page("", None, 2).await;
        let page = page.unwrap_or_else(|e| panic!("{bytes:?}: {e}"));
        assert_eq!(page, vec![id("a"), id("b")], "{bytes:?}");
    }
    rd.cleanup().await;
}

/// A key of one session holding another type than the store writes (its
/// head a list, a set, a hash or a sorted set; its checkpoint hash or its
/// index of seqs a string or a list) is a load error of that session, naming
/// the key and what it holds, as a head of garbage is: the other sessions
/// are listed and read, and finding work goes on. Before, a wrong-typed
/// head was a backend error ("WRONGTYPE …"), and a listing that reads
/// every head (`harness sessions list`) showed nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_a_key_of_another_type_is_a_load_error_of_its_session_only() {
    let Some(rd) = Rd::new() else { return };
    let cases: [(&str, &str, &str, &str); 8] = [
        ("head", "list", "RPUSH", "x"),
        ("head", "set", "SADD", "x"),
        ("head", "hash", "HSET", "x y"),
        ("head", "zset", "ZADD", "1 x"),
        ("cp", "string", "SET", "x"),
        ("cp", "list", "RPUSH", "x"),
        ("seqs", "string", "SET", "x"),
        ("seqs", "hash", "HSET", "x y"),
    ];
    let mut failures = Vec::new();
    for (name, kind, cmd, args) in cases {
        let case = format!("{name} made a {kind}");
        let store = rd.store("wrongtype").await;
        for s in ["a", "b", "c"] {
            crate::create_sample(&store, s, 2).await;
        }
        let key = session_key(&store, &id("b"), name);
        let mut con = store.connection();
        let _: () = redis::cmd("DEL")
            .arg(&key)
            .query_async(&mut con)
            .await
            .unwrap();
        let mut write = redis::cmd(cmd);
        write.arg(&key);
        for arg in args.split(' ') {
            write.arg(arg);
        }
        let _: () = write.query_async(&mut con).await.unwrap();
        if let Err(failed) = one_session_unreadable(&store, name, kind, &key).await {
            failures.push(format!("{case}: {failed}"));
        }
        // Left as it is.
        let found: String = redis::cmd("TYPE")
            .arg(&key)
            .query_async(&mut con)
            .await
            .unwrap();
        assert_eq!(found, kind, "{case}");
    }
    rd.cleanup().await;
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Whether `store` (sessions `a`, `b`, `c`; `b`'s key `key`, its `name`,
/// made a `kind`) lists the three, reads `a` and `c`, reports `b`'s record
/// as a load error naming the key and its type, and finds `a` and `c` to
/// run; what went otherwise.
async fn one_session_unreadable(
    store: &RedisStore,
    name: &str,
    kind: &str,
    key: &str,
) -> Result<(), String> {
    let listed = store.sessions().await.map_err(|e| e.to_string())?;
    if listed != vec![id("a"), id("b"), id("c")] {
        return Err(format!("listed {listed:?}"));
    }
    for s in ["a", "c"] {
        let head = store.load(&id(s)).await.map_err(|e| format!("{s}: {e}"))?;
        assert!(head.is_some(), "{s}");
        let log = store.checkpoints(&id(s), 0).await;
        let log = log.map_err(|e| format!("{s}: {e}"))?;
        assert_eq!(log.len(), 3, "{s}");
    }
    let damaged = if name == "head" {
        store.load(&id("b")).await.map(|_| ())
    } else {
        let head = store.load(&id("b")).await.map_err(|e| format!("b: {e}"))?;
        assert!(head.is_some(), "b");
        store.checkpoints(&id("b"), 0).await.map(|_| ())
    };
    match damaged {
        Err(StoreError::Load(e)) => {
            let record = if name == "head" { "head" } else { "log" };
            if e.session != id("b")
                || e.record != record
                || !e.reason.contains(key)
                || !e.reason.contains(&format!("a {kind}"))
            {
                return Err(format!("the load error: {e}"));
            }
        }
        other => return Err(format!("expected a load error, got {other:?}")),
    }
    let found = store.runnable("conformance", now_millis(), 10).await;
    let found = found.map_err(|e| format!("runnable: {e}"))?;
    for s in ["a", "c"] {
        if !found.contains(&id(s)) {
            return Err(format!("runnable gave {found:?}"));
        }
    }
    Ok(())
}

/// The ids of `P:ids`, the sorted index pages are read from.
async fn indexed_ids(store: &RedisStore) -> Vec<String> {
    zset(store, &format!("{}:ids", store.prefix()))
        .await
        .into_iter()
        .map(|(id, score)| {
            assert_eq!(score, 0.0, "{id}");
            id
        })
        .collect()
}

/// Whether `key` exists.
async fn exists(store: &RedisStore, key: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(key)
        .query_async(&mut store.connection())
        .await
        .unwrap()
}

/// Pages of ids are read from the sorted index `P:ids`, which commits
/// keep, not from the set `P:sessions`. Data an older version wrote (in
/// `P:sessions` only) is indexed by steps, one per page a writer asks for,
/// the pages answered from the listing of every id meanwhile; a session an
/// older version writes once the index is built is listed within a round
/// of the re-indexing; a reader writes no index; an expired session is
/// skipped by both, and forgotten by the writer only; a key of another
/// type fails the page, naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_pages_read_a_sorted_index_of_the_ids() {
    let Some(rd) = Rd::new() else { return };
    let store = rd.store("pages").await;
    let prefix = store.prefix().to_owned();
    for name in ["b-2", "a-1", "b-1", "c"] {
        crate::create_sample(&store, name, 0).await;
    }
    assert_eq!(indexed_ids(&store).await, ["a-1", "b-1", "b-2", "c"]);
    // With `P:sessions` moved away, the pages are the same and the listing
    // is empty: pages never read the set.
    let mut con = store.connection();
    let rename = |from: String, to: String| {
        let mut con = con.clone();
        async move {
            let _: () = redis::cmd("RENAME")
                .arg(from)
                .arg(to)
                .query_async(&mut con)
                .await
                .unwrap();
        }
    };
    let (set, away) = (format!("{prefix}:sessions"), format!("{prefix}:away"));
    rename(set.clone(), away.clone()).await;
    assert_eq!(store.sessions().await.unwrap(), []);
    let page = |prefix: &'static str, after: Option<&'static str>, limit: usize| {
        let store = store.clone();
        async move {
            let after = after.map(id);
            names_of(
                store
                    .sessions_page(prefix, after.as_ref(), limit)
                    .await
                    .unwrap(),
            )
        }
    };
    assert_eq!(page("b-", None, 10).await, ["b-1", "b-2"]);
    assert_eq!(page("", Some("a-1"), 2).await, ["b-1", "b-2"]);
    assert_eq!(page("", Some("b-2"), 2).await, ["c"]);
    assert_eq!(page("b-", Some("a"), 1).await, ["b-1"]);
    rename(away, set).await;
    // The feed of created sessions holds the four, in creation order; one
    // that expired leaves it (and the index) when a writer's page meets it.
    let created = format!("{prefix}:created");
    let in_feed = || async {
        zset(&store, &created)
            .await
            .into_iter()
            .map(|m| m.0)
            .collect::<Vec<_>>()
    };
    assert_eq!(in_feed().await, ["b-2", "a-1", "b-1", "c"]);
    let _: () = redis::cmd("DEL")
        .arg(session_key(&store, &id("c"), "head"))
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(page("", Some("a-1"), 10).await, ["b-1", "b-2"]);
    assert_eq!(in_feed().await, ["b-2", "a-1", "b-1"]);
    assert_eq!(indexed_ids(&store).await, ["a-1", "b-1", "b-2"]);

    // 5 000 sessions as an older version wrote them: a head each, the ids
    // in `P:sessions` only.
    let legacy = rd.fresh_prefix("pages-legacy");
    let writer = rd.connect(&legacy, RedisOptions::default()).await;
    let reader = rd
        .connect(&legacy, RedisOptions::default().read_only(true))
        .await;
    let put_legacy = |names: Vec<String>| {
        let mut con = writer.connection();
        let legacy = legacy.clone();
        async move {
            let mut pipe = redis::pipe();
            for name in &names {
                pipe.cmd("SET")
                    .arg(format!("{legacy}:{{{name}}}:head"))
                    .arg("{}")
                    .ignore()
                    .cmd("SADD")
                    .arg(format!("{legacy}:sessions"))
                    .arg(name)
                    .ignore();
            }
            let _: () = pipe.query_async(&mut con).await.unwrap();
        }
    };
    put_legacy((0..5_000).map(|i| format!("s-{i:04}")).collect()).await;
    let expect = |from: usize, n: usize| -> Vec<String> {
        (from..from + n).map(|i| format!("s-{i:04}")).collect()
    };
    let page_of = |store: &RedisStore, prefix: &str, after: Option<&str>, limit: usize| {
        let store = store.clone();
        let (prefix, after) = (prefix.to_owned(), after.map(id));
        async move {
            names_of(
                store
                    .sessions_page(&prefix, after.as_ref(), limit)
                    .await
                    .unwrap(),
            )
        }
    };
    // The reader pages through the listing and writes nothing.
    assert_eq!(page_of(&reader, "s-1", None, 3).await, expect(1_000, 3));
    for key in ["ids", "ids-built", "ids-cursor"] {
        assert!(!exists(&reader, &format!("{legacy}:{key}")).await, "{key}");
    }
    // The writer's pages build the index by steps, each page right
    // meanwhile; built, it holds every id.
    let mut pages = 0;
    while !exists(&writer, &format!("{legacy}:ids-built")).await {
        pages += 1;
        assert!(pages <= 8, "not built in {pages} pages");
        let after = format!("s-{:04}", 100 * pages);
        assert_eq!(
            page_of(&writer, "s-", Some(&after), 2).await,
            expect(100 * pages + 1, 2),
            "page {pages}"
        );
    }
    assert!(pages > 1, "5 000 ids were indexed in one step");
    assert_eq!(indexed_ids(&writer).await, expect(0, 5_000));
    assert_eq!(page_of(&reader, "s-4", Some("s-4998"), 5).await, ["s-4999"]);
    // An older version's writer, once the index is built: listed within a
    // round of the re-indexing (the set's 8 192 buckets, 64 a page).
    put_legacy(vec!["s-old".into()]).await;
    let mut pages = 0;
    loop {
        pages += 1;
        assert!(pages <= 8_192 / 64 + 2, "not listed in {pages} pages");
        if page_of(&writer, "s-o", None, 10).await == ["s-old"] {
            break;
        }
    }
    assert_eq!(page_of(&reader, "s-o", None, 10).await, ["s-old"]);
    // An expired session: skipped by both, forgotten by the writer alone.
    let _: () = redis::cmd("DEL")
        .arg(format!("{legacy}:{{s-0001}}:head"))
        .query_async(&mut con)
        .await
        .unwrap();
    let member = |key: &'static str| {
        let store = writer.clone();
        let legacy = legacy.clone();
        async move {
            let key = format!("{legacy}:{key}");
            let (in_set, score): (bool, Option<f64>) = redis::pipe()
                .cmd("SISMEMBER")
                .arg(&key)
                .arg("s-0001")
                .cmd("ZSCORE")
                .arg(format!("{legacy}:ids"))
                .arg("s-0001")
                .query_async(&mut store.connection())
                .await
                .unwrap();
            (in_set, score.is_some())
        }
    };
    let kept = ["s-0000", "s-0002", "s-0003"];
    assert_eq!(page_of(&reader, "s-000", None, 3).await, kept);
    assert_eq!(member("sessions").await, (true, true));
    assert_eq!(page_of(&writer, "s-000", None, 3).await, kept);
    assert_eq!(member("sessions").await, (false, false));

    // Any key a commit writes that it cannot write (another type, a
    // counter that is no number) fails the commit before it wrote
    // anything: no head, no log, no run found (before, a commit that
    // failed on an index after it had set the head left a session no
    // worker would take); the same commit goes through once the key is
    // mended. The head's own key holding another type is refused too.
    for (key, bad) in [
        ("ids", "not a sorted set"),
        ("created", "not a sorted set"),
        ("created-last", "not a number"),
        ("sessions", "not a set"),
        ("running", "not a sorted set"),
        ("leases", "not a hash"),
        ("claims", "not a hash"),
        ("agents", "not a hash"),
        ("ready:conformance", "not a sorted set"),
        ("waiting:conformance", "not a sorted set"),
        ("{s}:cp", "not a hash"),
        ("{s}:seqs", "not a sorted set"),
    ] {
        let damaged = rd.fresh_prefix("commit-damaged");
        let store = rd.connect(&damaged, RedisOptions::default()).await;
        let key = format!("{damaged}:{key}");
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg(bad)
            .query_async(&mut con)
            .await
            .unwrap();
        let commit = conformance::create(conformance::head("s"), vec![snapshot(0, 0, json!(0))]);
        let refused = store.commit(&commit).await.unwrap_err().to_string();
        assert!(refused.contains("commit session s"), "{key}: {refused}");
        assert!(refused.contains(&key), "{key}: {refused}");
        assert!(refused.contains("nothing was written"), "{key}: {refused}");
        let _: () = redis::cmd("DEL")
            .arg(&key)
            .query_async(&mut con)
            .await
            .unwrap();
        // The key mended: nothing of the refused commit is there.
        assert_eq!(store.sessions().await.unwrap(), [], "{key}: listed");
        assert_eq!(store.load(&id("s")).await.unwrap(), None, "{key}");
        assert_eq!(store.checkpoints(&id("s"), 0).await.unwrap(), [], "{key}");
        assert_eq!(
            store
                .runnable("conformance", now_millis(), 10)
                .await
                .unwrap(),
            [],
            "{key}"
        );
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{damaged}:*"))
            .query_async(&mut con)
            .await
            .unwrap();
        assert!(
            keys.iter().all(|k| !k.contains("{s}")),
            "{key}: the session's keys were written: {keys:?}"
        );
        store.commit(&commit).await.unwrap();
        assert_eq!(
            store.load(&id("s")).await.unwrap(),
            Some(commit.head),
            "{key}"
        );
    }

    // A key of another type fails the page and the listing, named, for
    // writer and reader, before either wrote: an expired session they
    // would forget is still in the set of ids.
    for (key, kind) in [("ids", "zset"), ("sessions", "set"), ("created", "zset")] {
        let damaged = rd.fresh_prefix("pages-damaged");
        let writer = rd.connect(&damaged, RedisOptions::default()).await;
        let reader = rd
            .connect(&damaged, RedisOptions::default().read_only(true))
            .await;
        crate::create_sample(&writer, "gone", 0).await;
        let _: () = redis::cmd("DEL")
            .arg(session_key(&writer, &id("gone"), "head"))
            .query_async(&mut con)
            .await
            .unwrap();
        let key = format!("{damaged}:{key}");
        let _: () = redis::cmd("DEL")
            .arg(&key)
            .query_async(&mut con)
            .await
            .unwrap();
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg("not an index")
            .query_async(&mut con)
            .await
            .unwrap();
        for store in [&writer, &reader] {
            for refused in [
                store.sessions_page("", None, 10).await.unwrap_err(),
                store.sessions().await.unwrap_err(),
            ] {
                let refused = refused.to_string();
                assert!(
                    refused.contains(&key)
                        && refused.contains("holds a string")
                        && refused.contains(kind),
                    "{refused}"
                );
            }
        }
        if kind != "set" {
            let kept: bool = redis::cmd("SISMEMBER")
                .arg(format!("{damaged}:sessions"))
                .arg("gone")
                .query_async(&mut con)
                .await
                .unwrap();
            assert!(kept, "{key}: a refused call forgot an id");
        }
    }
    rd.cleanup().await;
}

/// A finished TTL longer than Redis can keep as an expiry (`Duration::MAX`
/// and others past 2^63 ms) is taken as 1,000 years: the commit that
/// finishes the session succeeds (before, Redis refused its `PEXPIRE`
/// after the head was written, and the commit was reported failed), the
/// keys expire in 1,000 years, and the session goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_a_finished_ttl_past_what_redis_keeps_is_capped() {
    let Some(rd) = Rd::new() else { return };
    const CAP_MS: i64 = 1_000 * 365 * 24 * 3_600 * 1_000;
    let day = Duration::from_secs(24 * 3600);
    let cases = [
        (Duration::MAX, CAP_MS),
        (Duration::from_millis(u64::MAX), CAP_MS),
        (Duration::from_millis(1 << 63), CAP_MS),
        (Duration::from_millis(i64::MAX as u64), CAP_MS),
        (
            Duration::from_millis(i64::MAX as u64 - 10_000_000_000_000),
            CAP_MS,
        ),
        (Duration::from_millis(CAP_MS as u64 + 1), CAP_MS),
        // Within the cap: as given.
        (day, day.as_millis() as i64),
    ];
    for (i, (ttl, want)) in cases.into_iter().enumerate() {
        // Set either way: on the store, and in the options.
        let prefix = rd.fresh_prefix("bigttl");
        let store = if i % 2 == 0 {
            rd.connect(&prefix, RedisOptions::default())
                .await
                .with_finished_ttl(ttl)
        } else {
            rd.connect(&prefix, RedisOptions::default().finished_ttl(ttl))
                .await
        };
        let c = create(head("done"), vec![snapshot(0, 0, json!(0))]);
        store.commit(&c.clone()).await.unwrap();
        let mut finish = advance(&c.head, vec![update(1, 1, "x", json!(1))], vec![]);
        finish.head.phase = completed();
        let done = store.commit(&finish.clone()).await;
        done.unwrap_or_else(|e| panic!("{ttl:?}: {e}"));
        assert_eq!(
            store.load(&id("done")).await.unwrap(),
            Some(finish.head.clone())
        );
        let con = store.connection();
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
        let head_ttl = pttl(session_key(&store, &id("done"), "head")).await;
        assert!(
            head_ttl <= want && head_ttl > want - 60_000,
            "{ttl:?}: {head_ttl} ms, want {want}"
        );
        let log_ttl = pttl(session_key(&store, &id("done"), "cp")).await;
        assert!(log_ttl > head_ttl, "{ttl:?}: {log_ttl}");
        // The session goes on: the next commit expects the version written.
        let mut resume = advance(&finish.head, vec![update(2, 2, "y", json!(2))], vec![]);
        resume.head.phase = SessionPhase::Running;
        store.commit(&resume).await.unwrap();
        assert_eq!(pttl(session_key(&store, &id("done"), "head")).await, -1);
    }
    rd.cleanup().await;
}

/// The members of the sorted set `key`, with their scores.
async fn zset(store: &RedisStore, key: &str) -> Vec<(String, f64)> {
    redis::cmd("ZRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(&mut store.connection())
        .await
        .unwrap()
}

/// Workers find work in their agent's own index: its ready set (no lease
/// nor claim, by `updated_at`) and its waiting set (by when the lease or
/// claim ends), which commits keep; never in another agent's. The index is
/// built from `P:running` the first time, and a session an older version
/// of the store wrote without it (a rolling deploy) is found within a few
/// calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_runnable_finds_work_in_its_agents_own_index() {
    let Some(rd) = Rd::new() else { return };
    let prefix = rd.fresh_prefix("index");
    let store = rd
        .connect(&prefix, RedisOptions::default().claim_ttl(Duration::ZERO))
        .await;
    let now = now_millis();
    super::put(&store, "free", SessionPhase::Running, None, now - 900).await;
    super::put(
        &store,
        "held",
        SessionPhase::Running,
        Some(now + 60_000),
        now - 800,
    )
    .await;
    super::put(&store, "done", completed(), None, now - 700).await;
    let ready = format!("{prefix}:ready:conformance");
    let waiting = format!("{prefix}:waiting:conformance");
    assert_eq!(
        zset(&store, &ready).await,
        [("free".into(), (now - 900) as f64)]
    );
    assert_eq!(
        zset(&store, &waiting).await,
        [("held".into(), (now + 60_000) as f64)]
    );
    // Another agent's index is never read: damaged, it fails only its own
    // agent's calls.
    let _: () = redis::cmd("SET")
        .arg(format!("{prefix}:ready:another agent"))
        .arg("not a sorted set")
        .query_async(&mut store.connection())
        .await
        .unwrap();
    assert_eq!(
        names_of(store.runnable("conformance", now, 10).await.unwrap()),
        ["free"]
    );
    let refused = store.runnable("another agent", now, 10).await.unwrap_err();
    assert!(refused.to_string().contains("not a zset"), "{refused}");
    // The held session's lease ends: it moves to the ready set.
    assert_eq!(
        names_of(
            store
                .runnable("conformance", now + 60_000, 10)
                .await
                .unwrap()
        ),
        ["free", "held"]
    );
    assert_eq!(zset(&store, &waiting).await, []);
    // Finished, it leaves the index.
    let h = store.load(&id("free")).await.unwrap().unwrap();
    let mut done = advance(&h, vec![], vec![]);
    done.head.phase = completed();
    store.commit(&done).await.unwrap();
    assert_eq!(
        zset(&store, &ready)
            .await
            .into_iter()
            .map(|m| m.0)
            .collect::<Vec<_>>(),
        ["held"]
    );

    // An older version's writer: a running session in `P:running` and
    // `P:agents`, not in the index. Found within a few rounds of the
    // re-indexing (32 sessions a call).
    for i in 0..100 {
        super::put(
            &store,
            &format!("more-{i:03}"),
            SessionPhase::Running,
            Some(now + 3_600_000),
            now - 600 + i,
        )
        .await;
    }
    super::put(
        &store,
        "old-writer",
        SessionPhase::Running,
        None,
        now - 1_000,
    )
    .await;
    let _: () = redis::cmd("ZREM")
        .arg(&ready)
        .arg("old-writer")
        .query_async(&mut store.connection())
        .await
        .unwrap();
    let mut calls = 0;
    loop {
        calls += 1;
        let found = names_of(
            store
                .runnable("conformance", now + 60_000, 1)
                .await
                .unwrap(),
        );
        if found == ["old-writer"] {
            break;
        }
        assert!(calls <= 5, "not found in {calls} calls: {found:?}");
    }

    // Data written before the index existed: built from `P:running` at
    // the first call, in `updated_at` order, other agents' left out.
    let legacy = rd.fresh_prefix("legacy");
    let store = rd
        .connect(&legacy, RedisOptions::default().claim_ttl(Duration::ZERO))
        .await;
    sessions_of_two_agents(&store).await;
    super::put(
        &store,
        "leased",
        SessionPhase::Running,
        Some(now + 60_000),
        now - 500,
    )
    .await;
    let mut con = store.connection();
    for key in [
        "ready:alpha",
        "ready:beta",
        "waiting:conformance",
        "ready:conformance",
    ] {
        let _: () = redis::cmd("DEL")
            .arg(format!("{legacy}:{key}"))
            .query_async(&mut con)
            .await
            .unwrap();
    }
    assert_eq!(
        names_of(store.runnable("alpha", now, 10).await.unwrap()),
        ["a-1", "a-2", "bad"]
    );
    assert_eq!(
        names_of(store.runnable("beta", now, 10).await.unwrap()),
        ["b-1"]
    );
    assert_eq!(
        zset(&store, &format!("{legacy}:waiting:conformance")).await,
        [("leased".into(), (now + 60_000) as f64)]
    );
    rd.cleanup().await;
}

/// A reader following the feed of created sessions goes on when the
/// server loses its data (here: every key of the store deleted, as a
/// restart without persistence would): the counter begins again below the
/// reader's position, and the sessions created after are given from the
/// feed's start, rather than passed over until the counter caught up.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_feed_read_past_its_end_begins_again() {
    let Some(rd) = Rd::new() else { return };
    let store = rd.store("feed-lost").await;
    let mut at = store.created_since(None, 0).await.unwrap().unwrap().next;
    for i in 0..5 {
        crate::create_sample(&store, &format!("before-{i}"), 0).await;
    }
    let page = store.created_since(Some(at), 10).await.unwrap().unwrap();
    assert_eq!(page.sessions.len(), 5);
    at = page.next;
    assert_eq!(at, 5);
    // The server's data is lost.
    let mut con = store.connection();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}:*", store.prefix()))
        .query_async(&mut con)
        .await
        .unwrap();
    assert!(!keys.is_empty());
    let _: i64 = redis::cmd("DEL")
        .arg(&keys)
        .query_async(&mut con)
        .await
        .unwrap();
    // Nothing yet: the feed, from its start, is empty.
    let empty = store.created_since(Some(at), 10).await.unwrap().unwrap();
    assert!(empty.sessions.is_empty(), "{empty:?}");
    at = empty.next;
    for i in 0..2 {
        crate::create_sample(&store, &format!("after-{i}"), 0).await;
    }
    let mut seen = Vec::new();
    for _ in 0..3 {
        let page = store.created_since(Some(at), 1).await.unwrap().unwrap();
        seen.extend(page.sessions);
        at = page.next;
    }
    assert_eq!(seen, [id("after-0"), id("after-1")]);
    // Lost again, with sessions already created past the reader's
    // position by then: the page reads them from the start.
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}:*", store.prefix()))
        .query_async(&mut con)
        .await
        .unwrap();
    let _: i64 = redis::cmd("DEL")
        .arg(&keys)
        .query_async(&mut con)
        .await
        .unwrap();
    crate::create_sample(&store, "again", 0).await;
    let page = store.created_since(Some(at), 10).await.unwrap().unwrap();
    assert_eq!(page.sessions, [id("again")]);
    assert_eq!(page.next, 1);
    rd.cleanup().await;
}

/// A server that answers `INFO` with `info` and every other command `+OK`
/// (a stand-in for an old Redis, which cannot run here); its address.
async fn fake_redis(info: &'static str) -> String {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (read, mut write) = socket.into_split();
                let mut read = BufReader::new(read);
                loop {
                    // A command: an array of bulk strings.
                    let mut line = String::new();
                    if read.read_line(&mut line).await.unwrap_or(0) == 0 {
                        return;
                    }
                    let n: usize = line.trim().trim_start_matches('*').parse().unwrap_or(0);
                    let mut words = Vec::new();
                    for _ in 0..n {
                        line.clear();
                        read.read_line(&mut line).await.unwrap();
                        let len: usize = line.trim().trim_start_matches('$').parse().unwrap();
                        let mut word = vec![0; len + 2];
                        read.read_exact(&mut word).await.unwrap();
                        word.truncate(len);
                        words.push(String::from_utf8_lossy(&word).to_uppercase());
                    }
                    let reply = if words.first().map(String::as_str) == Some("INFO") {
                        format!("${}\r\n{info}\r\n", info.len())
                    } else {
                        "+OK\r\n".to_owned()
                    };
                    if write.write_all(reply.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    format!("redis://{addr}/")
}

/// A server older than 5.0 (by the version it reports) is refused when the
/// store connects, with an error naming the versions; a newer one, or one
/// that does not say, is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_servers_older_than_5_are_refused() {
    for old in [
        "# Server\r\nredis_version:4.0.14\r\nredis_mode:standalone\r\n",
        "# Server\r\nredis_version:3.2.12\r\n",
        "redis_version:2.8.24",
    ] {
        let url = fake_redis(old).await;
        let error = RedisStore::connect(&url).await.unwrap_err().to_string();
        assert!(
            error.contains("needs 5.0 or later") && error.contains(&url[8..url.len() - 1]),
            "{error}"
        );
    }
    for fine in [
        "# Server\r\nredis_version:5.0.0\r\n",
        "# Server\r\nredis_version:7.2.4\r\n",
        "# Server\r\nredis_mode:standalone\r\n",
    ] {
        let url = fake_redis(fine).await;
        if let Err(e) = RedisStore::connect(&url).await {
            panic!("{fine:?}: {e}");
        }
    }
}

/// A key of the feed of created sessions that cannot be written fails
/// creations only: the sessions under way go on committing their steps.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_a_damaged_feed_fails_creations_not_the_sessions_under_way() {
    let Some(rd) = Rd::new() else { return };
    for (key, bad) in [("created-last", "x"), ("created", "not a sorted set")] {
        let prefix = rd.fresh_prefix("feed-damaged");
        let store = rd.connect(&prefix, RedisOptions::default()).await;
        let created = create(head("s"), vec![snapshot(0, 0, json!(0))]);
        store.commit(&created).await.unwrap();
        let mut con = store.connection();
        let _: () = redis::cmd("DEL")
            .arg(format!("{prefix}:{key}"))
            .query_async(&mut con)
            .await
            .unwrap();
        let _: () = redis::cmd("SET")
            .arg(format!("{prefix}:{key}"))
            .arg(bad)
            .query_async(&mut con)
            .await
            .unwrap();
        let step = advance(&created.head, vec![update(1, 1, "work", json!(1))], vec![]);
        store.commit(&step).await.unwrap();
        assert_eq!(
            store.load(&id("s")).await.unwrap(),
            Some(step.head),
            "{key}"
        );
        let refused = store
            .commit(&create(head("t"), vec![snapshot(0, 0, json!(0))]))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains(&format!("{prefix}:{key}")) && refused.contains("nothing was written"),
            "{key}: {refused}"
        );
        assert_eq!(store.load(&id("t")).await.unwrap(), None, "{key}");
    }
    rd.cleanup().await;
}

/// A database whose only `…:sessions` keys are no sets, or sets of no
/// session, holds no store: `store_prefixes` says so, where it failed on
/// the empty pipeline it then sent ("empty command"). On a database of
/// its own (index 13 of the test server), emptied first.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_store_prefixes_of_a_database_without_stores_are_none() {
    let Some(rd) = Rd::new() else { return };
    // The server's URL with its database (the path) replaced.
    let authority = rd.url.find("://").map_or(0, |i| i + 3);
    let end = rd.url[authority..]
        .find(['/', '?'])
        .map_or(rd.url.len(), |i| authority + i);
    let url = format!("{}/13", &rd.url[..end]);
    let store = RedisStore::connect(&url).await.unwrap();
    let mut con = store.connection();
    let _: () = redis::cmd("FLUSHDB").query_async(&mut con).await.unwrap();
    assert_eq!(
        store.store_prefixes(usize::MAX).await.unwrap(),
        Vec::<String>::new()
    );
    let _: () = redis::cmd("SET")
        .arg("text:sessions")
        .arg("not a set")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(
        store.store_prefixes(usize::MAX).await.unwrap(),
        Vec::<String>::new()
    );
    let _: i64 = redis::cmd("SADD")
        .arg("app:sessions")
        .arg("token-1")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(
        store.store_prefixes(usize::MAX).await.unwrap(),
        Vec::<String>::new()
    );
    store
        .commit(&create(head("s"), vec![snapshot(0, 0, json!(0))]))
        .await
        .unwrap();
    assert_eq!(store.store_prefixes(usize::MAX).await.unwrap(), ["harness"]);
    let _: () = redis::cmd("FLUSHDB").query_async(&mut con).await.unwrap();
}

/// `store_prefixes` names the stores on the database, not the keys that
/// only look like one: a string `…:sessions`, an application's set of that
/// name whose members have no head.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_store_prefixes_are_those_with_sessions() {
    let Some(rd) = Rd::new() else { return };
    let (a, b) = (rd.store("pa").await, rd.store("pb").await);
    for store in [&a, &b] {
        store
            .commit(&create(head("s"), vec![snapshot(0, 0, json!(0))]))
            .await
            .unwrap();
    }
    let (text, app) = (rd.fresh_prefix("ps"), rd.fresh_prefix("papp"));
    let mut con = a.connection();
    let _: () = redis::cmd("SET")
        .arg(format!("{text}:sessions"))
        .arg("not a set")
        .query_async(&mut con)
        .await
        .unwrap();
    let _: i64 = redis::cmd("SADD")
        .arg(format!("{app}:sessions"))
        .arg("token-1")
        .query_async(&mut con)
        .await
        .unwrap();
    let found = a.store_prefixes(usize::MAX).await.unwrap();
    for store in [&a, &b] {
        assert!(found.iter().any(|p| p == store.prefix()), "{found:?}");
    }
    for other in [&text, &app] {
        assert!(!found.contains(other), "{other} in {found:?}");
    }
    let mut sorted = found.clone();
    sorted.sort();
    assert_eq!(found, sorted);
    rd.cleanup().await;
}
