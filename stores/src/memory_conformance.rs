//! A conformance suite any long-term memory backend
//! ([`MemoryBackend`](harness::memory::MemoryBackend)) can run against
//! itself (feature `conformance`), like [`conformance`](crate::conformance)
//! for session stores.
//!
//! [`run_all`] runs every check, each on a fresh backend from a factory,
//! and panics naming each check that failed; [`run_all_with`] also runs
//! the check of a batch that fails part way, with a write the backend
//! refuses (each backend knows what it cannot store). Each check is also a
//! public function returning `Result<(), Failure>`.
//!
//! Times are given to the backend as `now`, so expiry is checked on a
//! controlled clock, to the millisecond. The concurrency checks spawn tokio
//! tasks: run the suite in a multi-threaded runtime.
//!
//! ```
//! use harness::memory::InMemory;
//! use harness_stores::memory_conformance;
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! memory_conformance::run_all(InMemory::new).await;
//! # });
//! ```

use crate::conformance::Failure;
use harness::memory::{Filter, Item, MemoryBackend, MemoryError, Namespace, Record, Write};
use serde_json::{Value, json};
use std::future::Future;
use std::sync::Arc;

/// A fixed time (ms since the epoch) the checks start at.
pub const T0: u64 = 1_700_000_000_000;

/// A factory of writes the backend refuses, for [`run_all_with`].
pub type Refused<'a> = &'a (dyn Fn() -> Write + Sync);

/// Runs every check that needs no hook, each on a fresh backend from
/// `make`, and panics listing the failed checks.
pub async fn run_all<B, F>(make: F)
where
    B: MemoryBackend + 'static,
    F: Fn() -> B,
{
    run_all_with(make, None).await;
}

/// Runs every check, [`failed_batch`] too when `refused` gives a write the
/// backend cannot apply, and panics listing the failed checks.
pub async fn run_all_with<B, F>(make: F, refused: Option<Refused<'_>>)
where
    B: MemoryBackend + 'static,
    F: Fn() -> B,
{
    let failures = check_all(make, refused).await;
    if !failures.is_empty() {
        let list: Vec<String> = failures.iter().map(ToString::to_string).collect();
        panic!(
            "{} memory conformance check(s) failed:\n  {}",
            failures.len(),
            list.join("\n  ")
        );
    }
}

/// Runs every check like [`run_all_with`] and returns the failures.
pub async fn check_all<B, F>(make: F, refused: Option<Refused<'_>>) -> Vec<Failure>
where
    B: MemoryBackend + 'static,
    F: Fn() -> B,
{
    let mut results = Vec::new();
    results.push(round_trip(&make()).await);
    results.push(created_at_kept(&make()).await);
    results.push(delete(&make()).await);
    results.push(touch(&make()).await);
    results.push(expiry_boundary(&make()).await);
    results.push(search_order(&make()).await);
    results.push(prefix_containment(&make()).await);
    results.push(filters(&make()).await);
    results.push(exact_numbers(&make()).await);
    results.push(offset_limit(&make()).await);
    results.push(namespaces(&make()).await);
    results.push(batch_in_order(&make()).await);
    results.push(large_value(&make()).await);
    results.push(unicode(&make()).await);
    results.push(many_records(&make()).await);
    results.push(atomic_for_readers(Arc::new(make())).await);
    results.push(concurrent_puts(Arc::new(make())).await);
    if let Some(refused) = refused {
        results.push(failed_batch(&make(), refused()).await);
    }
    results.into_iter().filter_map(Result::err).collect()
}

// ---------------------------------------------------------------------------
// Helpers.

type Outcome = Result<(), String>;

async fn run(check: &'static str, body: impl Future<Output = Outcome>) -> Result<(), Failure> {
    body.await.map_err(|message| Failure { check, message })
}

trait Ctx<T> {
    fn ctx(self, what: impl std::fmt::Display) -> Result<T, String>;
}

impl<T> Ctx<T> for Result<T, MemoryError> {
    fn ctx(self, what: impl std::fmt::Display) -> Result<T, String> {
        self.map_err(|e| format!("{what} failed: {e}"))
    }
}

macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err(format!($($arg)+));
        }
    };
}

macro_rules! ensure_eq {
    ($left:expr, $right:expr, $($arg:tt)+) => {{
        let (l, r) = (&$left, &$right);
        if l != r {
            return Err(format!("{}:\n    got:      {:?}\n    expected: {:?}", format!($($arg)+), l, r));
        }
    }};
}

/// The namespace of `labels`, which must be valid.
///
/// # Panics
///
/// If the labels do not make a namespace (a bug of the caller).
pub fn ns(labels: &[&str]) -> Namespace {
    Namespace::prefix(labels.iter().copied()).expect("the suite's namespaces are valid")
}

/// A record put at `now`: no TTL, no vector.
pub fn record(namespace: &Namespace, key: &str, value: Value, now: u64) -> Record {
    Record {
        item: Item {
            namespace: namespace.clone(),
            key: key.to_owned(),
            value,
            created_at: now,
            updated_at: now,
            expires_at: None,
        },
        ttl_ms: None,
        vector: None,
    }
}

/// A record put at `now` that lives `ttl` ms.
pub fn expiring(namespace: &Namespace, key: &str, value: Value, now: u64, ttl: u64) -> Record {
    let mut r = record(namespace, key, value, now);
    r.ttl_ms = Some(ttl);
    r.item.expires_at = Some(now + ttl);
    r
}

async fn put(
    backend: &dyn MemoryBackend,
    records: Vec<Record>,
    now: u64,
) -> Result<Vec<u64>, String> {
    let n = records.len();
    backend
        .apply(records.into_iter().map(Write::Put).collect(), now)
        .await
        .ctx(format!("apply of {n} put(s)"))
}

async fn get(
    backend: &dyn MemoryBackend,
    namespace: &Namespace,
    key: &str,
    now: u64,
) -> Result<Option<Record>, String> {
    backend
        .get(namespace, key, now)
        .await
        .ctx(format!("get({namespace}, {key:?})"))
}

async fn search(
    backend: &dyn MemoryBackend,
    prefix: &Namespace,
    filters: &[Filter],
    offset: usize,
    limit: usize,
    now: u64,
) -> Result<Vec<Record>, String> {
    backend
        .search(prefix, filters, offset, limit, now)
        .await
        .ctx(format!(
            "search({prefix:?}, {filters:?}, {offset}, {limit})"
        ))
}

/// `(namespace labels joined by '|', key)` of each record, for messages.
fn keys(records: &[Record]) -> Vec<(String, String)> {
    records
        .iter()
        .map(|r| (r.item.namespace.labels().join("|"), r.item.key.clone()))
        .collect()
}

fn pairs(list: &[(&[&str], &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(labels, key)| (labels.join("|"), (*key).to_owned()))
        .collect()
}

fn sorted_namespaces(mut list: Vec<Namespace>) -> Vec<Namespace> {
    list.sort();
    list
}

// ---------------------------------------------------------------------------
// Checks.

/// A record comes back as it was put: its value (nested, numbers of every
/// kind), times, TTL and vector (every `f32` bit for bit, including
/// subnormal and extreme ones); a record without a vector has none.
pub async fn round_trip(backend: &dyn MemoryBackend) -> Result<(), Failure> {
    run("round_trip", async {
        let users = ns(&["users", "u-17"]);
        let value = json!({
            "text": "likes tea",
            "n": 42, "neg": -7, "big": u64::MAX, "f": 0.1, "one": 1.0, "exp": 1.5e300,
            "flag": true, "none": null,
            "nested": {"list": [1, "two", {"three": 3.25}], "empty": {}, "arr": []},
            "quote": "a \"quoted\" \\ back/slash\nnew line\ttab é 日本 🦀"
        });
        let vector = vec![
            0.1_f32,
            -1.0 / 3.0,
            f32::MIN_POSITIVE,
            1e-45,
            f32::MAX,
            f32::MIN,
            0.0,
            -0.0,
            123_456.79,
        ];
        let mut with = expiring(&users, "tea", value.clone(), T0, 60_000);
        with.vector = Some(vector.clone());
        let without = record(&users, "plain", json!({"a": 1}), T0 + 1);
        let created = put(backend, vec![with.clone(), without.clone()], T0 + 1).await?;
        ensure_eq!(
            created,
            vec![T0, T0 + 1],
            "the created times apply returned"
        );
        let got = get(backend, &users, "tea", T0 + 2)
            .await?
            .ok_or("the record put is missing")?;
        ensure_eq!(got.item, with.item, "the item read back");
        ensure_eq!(got.ttl_ms, Some(60_000), "the TTL read back");
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let got_vector = got.vector.ok_or("the vector was not kept")?;
        ensure_eq!(
            bits(&got_vector),
            bits(&vector),
            "the vector's bits read back"
        );
        let plain = get(backend, &users, "plain", T0 + 2)
            .await?
            .ok_or("the record without a vector is missing")?;
        ensure_eq!(plain, without, "the record without a vector or TTL");
        ensure!(
            get(backend, &users, "other", T0 + 2).await?.is_none(),
            "a key never put was found"
        );
        ensure!(
            get(backend, &ns(&["users"]), "tea", T0 + 2)
                .await?
                .is_none(),
            "a record was found under its namespace's parent"
        );
        let scanned = backend.scan(T0 + 2).await.ctx("scan")?;
        ensure_eq!(scanned.len(), 2, "records scanned");
        let scanned_vector = scanned
            .iter()
            .find(|r| r.item.key == "tea")
            .and_then(|r| r.vector.clone())
            .ok_or("scan lost the vector")?;
        ensure_eq!(bits(&scanned_vector), bits(&vector), "the vector scanned");
        Ok(())
    })
    .await
}

/// A put over a live record keeps its `created_at` (returned and stored)
/// and takes the new `updated_at`; over an expired record it starts
/// afresh.
pub async fn created_at_kept(backend: &dyn MemoryBackend) -> Result<(), Failure> {
    run("created_at_kept", async {
        let n = ns(&["facts"]);
        put(backend, vec![record(&n, "k", json!({"v": 1}), T0)], T0).await?;
        let created = put(
            backend,
            vec![record(&n, "k", json!({"v": 2}), T0 + 50)],
            T0 + 50,
        )
        .await?;
        ensure_eq!(created, vec![T0], "created_at returned for a replacing put");
        let got = get(backend, &n, "k", T0 + 60)
            .await?
            .ok_or("the record is missing")?;
        ensure_eq!(
            got.item.created_at,
            T0,
            "created_at stored after a replacing put"
        );
        ensure_eq!(
            got.item.updated_at,
            T0 + 50,
            "updated_at after a replacing put"
        );
        ensure_eq!(
            got.item.value,
            json!({"v": 2}),
            "the value after a replacing put"
        );

        // An expired record: the put starts afresh.
        put(
            backend,
            vec![expiring(&n, "e", json!({"v": 1}), T0, 100)],
            T0,
        )
        .await?;
        let created = put(
            backend,
            vec![record(&n, "e", json!({"v": 2}), T0 + 100)],
            T0 + 100,
        )
        .await?;
        ensure_eq!(
            created,
            vec![T0 + 100],
            "created_at of a put over an expired record"
        );
        let got = get(backend, &n, "e", T0 + 101)
            .await?
            .ok_or("the fresh record is missing")?;
        ensure_eq!(
            got.item.created_at,
            T0 + 100,
            "created_at stored over an expired record"
        );
        ensure_eq!(got.item.expires_at, None, "the fresh record's expiry");
        Ok(())
    })
    .await
}

/// A delete removes the record (and only it); deleting what is not there
/// is no error; a put after a delete starts afresh.
pub async fn delete(backend: &dyn MemoryBackend) -> Result<(), Failure> {
    run("delete", async {
        let n = ns(&["d"]);
        put(
            backend,
            vec![
                record(&n, "a", json!({"v": 1}), T0),
                record(&n, "b", json!({"v": 2}), T0),
            ],
            T0,
        )
        .await?;
        let del = |key: &str| Write::Delete {
            namespace: n.clone(),
            key: key.to_owned(),
        };
        let created = backend
            .apply(vec![del("a"), del("never")], T0 + 1)
            .await
            .ctx("apply of deletes")?;
        ensure!(
            created.is_empty(),
            "deletes returned created times {created:?}"
        );
        ensure!(
            get(backend, &n, "a", T0 + 2).await?.is_none(),
            "a deleted record was read"
        );
        ensure!(
            get(backend, &n, "b", T0 + 2).await?.is_some(),
            "a delete removed another record"
        );
        ensure_eq!(
            keys(&search(backend, &Namespace::root(), &[], 0, 100, T0 + 2).await?),
            pairs(&[(&["d"], "b")]),
            "the records left after a delete"
        );
        let created = put(
            backend,
            vec![record(&n, "a", json!({"v": 3}), T0 + 5)],
            T0 + 5,
        )
        .await?;
        ensure_eq!(created, vec![T0 + 5], "created_at of a put after a delete");
        Ok(())
    })
    .await
}

/// A touch sets a live record's expiry (value and times otherwise kept);
/// it does nothing to an expired record (no revival), a missing one (no
/// creation), or one put again since the read it refreshes (its expiry is
/// no longer the one read).
pub async fn touch(backend: &dyn MemoryBackend) -> Result<(), Failure> {
    run("touch", async {
        let n = ns(&["t"]);
        put(
            backend,
            vec![
                expiring(&n, "live", json!({"v": 1}), T0, 100),
                expiring(&n, "dead", json!({"v": 2}), T0, 100),
            ],
            T0,
        )
        .await?;
        let touch = |key: &str, expires_at: u64| Write::Touch {
            namespace: n.clone(),
            key: key.to_owned(),
            expires_at,
            from: T0 + 100,
        };
        backend
            .apply(vec![touch("live", T0 + 500)], T0 + 50)
            .await
            .ctx("touch of a live record")?;
        let got = get(backend, &n, "live", T0 + 300)
            .await?
            .ok_or("a touched record expired at its old time")?;
        ensure_eq!(got.item.expires_at, Some(T0 + 500), "the touched expiry");
        ensure_eq!(got.item.value, json!({"v": 1}), "the touched value");
        ensure_eq!(got.item.created_at, T0, "the touched created_at");
        ensure_eq!(got.ttl_ms, Some(100), "the touched TTL");
        ensure!(
            get(backend, &n, "live", T0 + 500).await?.is_none(),
            "a touched record outlived its new expiry"
        );
        backend
            .apply(
                vec![touch("dead", T0 + 10_000), touch("missing", T0 + 10_000)],
                T0 + 200,
            )
            .await
            .ctx("touch of an expired and a missing record")?;
        ensure!(
            get(backend, &n, "dead", T0 + 200).await?.is_none(),
            "a touch revived an expired record"
        );
        ensure!(
            get(backend, &n, "missing", T0 + 200).await?.is_none(),
            "a touch created a record"
        );
        // Put again after the read the touch refreshes: without a TTL, or
        // with another one. The touch leaves each as its put made it.
        put(
            backend,
            vec![
                expiring(&n, "permanent", json!({"v": 3}), T0, 100),
                expiring(&n, "other", json!({"v": 4}), T0, 100),
            ],
            T0,
        )
        .await?;
        put(
            backend,
            vec![
                record(&n, "permanent", json!({"v": 5}), T0 + 10),
                expiring(&n, "other", json!({"v": 6}), T0 + 10, 5_000),
            ],
            T0 + 10,
        )
        .await?;
        backend
            .apply(
                vec![touch("permanent", T0 + 300), touch("other", T0 + 300)],
                T0 + 50,
            )
            .await
            .ctx("touch of records put again since the read")?;
        let permanent = get(backend, &n, "permanent", T0 + 100_000)
            .await?
            .ok_or("a touch gave a record put without a TTL an expiry")?;
        ensure_eq!(permanent.item.expires_at, None, "the permanent expiry");
        ensure_eq!(permanent.item.value, json!({"v": 5}), "the permanent value");
        let other = get(backend, &n, "other", T0 + 400)
            .await?
            .ok_or("a touch cut the TTL of a record put again with its own")?;
        ensure_eq!(other.item.expires_at, Some(T0 + 5_010), "the other expiry");
        Ok(())
    })
    .await
}

/// A record is live until the millisecond before `expires_at` and gone
/// from that millisecond on, for get, search, namespaces and scan alike.
pub async fn expiry_boundary(backend: &dyn MemoryBackend) -> Result<(), Failure> {
    run("expiry_boundary", async {
        let n = ns(&["x", "y"]);
        put(
            backend,
            vec![expiring(&n, "k", json!({"v": 1}), T0, 100)],
            T0,
        )
        .await?;
        let before = T0 + 99;
        let at = T0 + 100;
        ensure!(
            get(backend, &n, "k", before).await?.is_some(),
            "gone 1 ms before its expiry"
        );
        ensure!(
            get(backend, &n, "k", at).await?.is_none(),
            "get found it at its expiry"
        );
        ensure_eq!(
            search(backend, &ns(&["x"]), &[], 0, 10, before)
                .await?
                .len(),
            1,
            "search before expiry"
        );
        ensure!(
            search(backend, &ns(&["x"]), &[], 0, 10, at)
                .await?
                .is_empty(),
            "search found it at its expiry"
        );
        ensure_eq!(
            backend.namespaces(before).await.ctx("namespaces")?,
            vec![n.clone()],
            "namespaces before expiry"
        );
        ensure!(
            backend.namespaces(at).await.ctx("namespaces")?.is_empty(),
            "namespaces listed a namespace whose only record expired"
        );
        ensure!(
            backend.scan(at).await.ctx("scan")?.is_empty(),
            "scan found it at its expiry"
        );
        // Expired records are skipped before the offset counts.
        let m = ns(&["o"]);
        let records = (0..10)
            .map(|i| {
                let key = format!("k{i}");
                if i == 1 || i == 3 {
                    expiring(&m, &key, json!({"i": i}), T0, 10)
                } else {
                    record(&m, &key, json!({"i": i}), T0)
                }
            })
            .collect();
        put(backend, records, T0).await?;
        let page = search(backend, &m, &[], 2, 3, T0 + 10).await?;
        ensure_eq!(
            keys(&page),
            pairs(&[(&["o"], "k4"), (&["o"], "k5"), (&["o"], "k6")]),
            "a page after expired records"
        );
        Ok(())
    })
    .await
}

/// Search returns records in namespace then key order, labels compared as
/// strings (bytes): `["users","u1"] < ["users","u1","x"] < ["users","u10"]
/// < ["users","u2"]`, a namespace before its children.
pub async fn search_order(backend: &dyn MemoryBackend) -> Result<(), Failure> {
    run("search_order", async {
        let put_order: &[(&[&str], &str)] = &[
            (&["users", "u2"], "b"),
            (&["users", "u10"], "a"),
            (&["users", "u1"], "z"),
            (&["users", "u1", "x"], "a"),
            (&["users"], "k"),
            (&["users", "u1"], "a"),
            (&["users", "u1"], "B"),
            (&["users", "u1"], "a0"),
            (&["users", "U9"], "a"),
            (&["users", "é"], "a"),
            (&["users", "z"], "a"),
            (&["usersX"], "a"),
            (&["user"], "a"),
        ];
        let records = put_order
            .iter()
            .map(|(labels, key)| record(&ns(labels), key, json!({"k": key}), T0))
            .collect();
        put(backend, records, T0).await?;
        let expected: &[(&[&str], &str)] = &[
            (&["user"], "a"),
            (&["users"], "k"),
            (&["users", "U9"], "a"),
            (&["users", "u1"], "B"),
            (&["users", "u1"], "a"),
            (&["users", "u1"], "a0"),
            (&["users", "u1"], "z"),
            (&["users", "u1", "x"], "a"),
            (&["users", "u10"], "a"),
            (&["users", "u2"], "b"),
            (&["users", "z"], "a"),
            (&["users", "é"], "a"),
            (&["usersX"], "a"),
        ];
        let got = search(backend, &Namespace::root(), &[], 0, 100, T0).await?;
        ensure_eq!(
            keys(&got),
            pairs(expected),
            "the order of a search of everything"
        );
        let scanned = backend.scan(T0).await.ctx("scan")?;
        ensure_eq!(scanned.len(), expected.len(), "records scanned");
        let got = search(backend, &ns(&["users"]), &[], 0, 100, T0).await?;
        ensure_eq!(keys(&got), pairs(&expected[1..12]), "the order under users");
        Ok(())
    })
    .await
}

/// A prefix matches whole labels: `["a"]` finds `["a"]` and `["a","b"]`,
/// never `["ab"]`; `["a","b"]` is not `["a/b"]`.
pub async fn prefix_containment(backend: &dyn MemoryBackend) -> Result<(), Failure> {
    run("prefix_containment", async {
        let all: &[&[&str]] = &[
            &["a"],
            &["ab"],
            &["a", "b"],
            &["a", "bc"],
            &["a/b"],
            &["b", "a"],
            &["a b"],
        ];
        let records = all
            .iter()
            .map(|l| record(&ns(l), "k", json!({}), T0))
            .collect();
        put(backend, records, T0).await?;
        let cases: &[(&[&str], &[&[&str]])] = &[
            (&["a"], &[&["a"], &["a", "b"], &["a", "bc"]]),
            (&["a", "b"], &[&["a", "b"]]),
            (&["ab"], &[&["ab"]]),
            (&["a/b"], &[&["a/b"]]),
            (&["b"], &[&["b", "a"]]),
            (&["a", "b", "c"], &[]),
            (&["c"], &[]),
        ];
        for (prefix, expected) in cases {
            let got = search(backend, &ns(prefix), &[], 0, 100, T0).await?;
            let want: Vec<(String, String)> = expected
                .iter()
                .map(|l| (l.join("|"), "k".to_owned()))
                .collect();
            ensure_eq!(keys(&got), want, "the records under {prefix:?}");
        }
        ensure_eq!(
            search(backend, &Namespace::root(), &[], 0, 100, T0)
                .await?
                .len(),
            all.len(),
            "the records under the empty prefix"
        );
        Ok(())
    })
    .await
}

/// Filters: every comparison on top-level and nested (dotted) fields;
/// numbers compared by value (`1 == 1.0`, `2 > 1.5`); strings ordered by
/// bytes; a missing field, or one of another type, matches nothing (`ne`
/// included); several filters all hold.
pub async fn filters(backend: &dyn MemoryBackend) -> Result<(), Failure> {
    run("filters", async {
        let n = ns(&["f"]);
        let values = [
            ("a", json!({"kind": "fact", "score": 1, "meta": {"level": 3, "tag": "apple"}, "ok": true})),
            ("b", json!({"kind": "fact", "score": 1.0, "meta": {"level": 5, "tag": "banana"}, "ok": false})),
            ("c", json!({"kind": "note", "score": 2.5, "meta": {"level": 7, "tag": "Zebra"}})),
            ("d", json!({"kind": "note", "score": "high", "meta": {"tag": "cherry", "list": [1, 2]}})),
            ("e", json!({"kind": "fact", "meta": 4, "obj": {"x": [1, "y"]}})),
        ];
        let records = values.iter().map(|(k, v)| record(&n, k, v.clone(), T0)).collect();
        put(backend, records, T0).await?;
        let cases: Vec<(Vec<Filter>, &[&str])> = vec![
            (vec![Filter::eq("kind", "fact")], &["a", "b", "e"]),
            (vec![Filter::ne("kind", "fact")], &["c", "d"]),
            (vec![Filter::eq("score", 1)], &["a", "b"]),
            (vec![Filter::eq("score", 1.0)], &["a", "b"]),
            (vec![Filter::ne("score", 1)], &["c", "d"]),
            (vec![Filter::gt("score", 1)], &["c"]),
            (vec![Filter::gte("score", 1)], &["a", "b", "c"]),
            (vec![Filter::lt("score", 2.5)], &["a", "b"]),
            (vec![Filter::lte("score", 2.5)], &["a", "b", "c"]),
            (vec![Filter::gt("score", "a")], &["d"]),
            (vec![Filter::eq("meta.level", 5)], &["b"]),
            (vec![Filter::gt("meta.level", 3)], &["b", "c"]),
            (vec![Filter::gte("meta.level", 3), Filter::lt("meta.level", 7)], &["a", "b"]),
            (vec![Filter::ne("meta.level", 5)], &["a", "c"]),
            (vec![Filter::lt("meta.tag", "apple")], &["c"]),
            (vec![Filter::gt("meta.tag", "apple")], &["b", "d"]),
            (vec![Filter::gte("meta.tag", "banana"), Filter::lte("meta.tag", "cherry")], &["b", "d"]),
            (vec![Filter::eq("ok", true)], &["a"]),
            (vec![Filter::eq("ok", false)], &["b"]),
            (vec![Filter::ne("ok", true)], &["b"]),
            (vec![Filter::eq("meta.list", json!([1, 2]))], &["d"]),
            (vec![Filter::eq("obj", json!({"x": [1, "y"]}))], &["e"]),
            (vec![Filter::eq("meta.level.deeper", 1)], &[]),
            (vec![Filter::eq("missing", "x")], &[]),
            (vec![Filter::ne("missing", "x")], &[]),
            (vec![Filter::gt("missing", 0)], &[]),
            (vec![Filter::eq("meta.list.0", 1)], &[]),
            (vec![Filter::eq("kind", "fact"), Filter::eq("score", 1)], &["a", "b"]),
            (vec![Filter::eq("kind", "note"), Filter::eq("score", 1)], &[]),
            (vec![Filter::gt("kind", 1)], &[]),
        ];
        for (filters, expected) in cases {
            let got = search(backend, &n, &filters, 0, 100, T0).await?;
            let got: Vec<&str> = got.iter().map(|r| r.item.key.as_str()).collect();
            ensure_eq!(got, expected.to_vec(), "the records meeting {filters:?}");
        }
        Ok(())
    })
    .await
}

/// Numbers in filters compare by the exact value of their decimal text:
/// integers beyond 2^53 (snowflake ids, nanosecond times) keep every
/// digit, where a comparison as `f64` would take neighbours for equal.
pub async fn exact_numbers(backend: &dyn MemoryBackend) -> Result<(), Failure> {
    run("exact_numbers", async {
        let n = ns(&["exact"]);
        let big = 9_007_199_254_740_993_u64; // 2^53 + 1
        let values = [
            ("below", json!({"id": big - 1})),
            ("at", json!({"id": big})),
            ("above", json!({"id": big + 1})),
            ("max", json!({"id": u64::MAX})),
            ("min", json!({"id": i64::MIN})),
            ("float", json!({"id": 9_007_199_254_740_992.0})),
        ];
        let records = values
            .iter()
            .map(|(k, v)| record(&n, k, v.clone(), T0))
            .collect();
        put(backend, records, T0).await?;
        let cases: Vec<(Filter, &[&str])> = vec![
            (Filter::eq("id", big), &["at"]),
            (
                Filter::ne("id", big),
                &["above", "below", "float", "max", "min"],
            ),
            (Filter::gt("id", big), &["above", "max"]),
            (Filter::gte("id", big), &["above", "at", "max"]),
            (Filter::lt("id", big), &["below", "float", "min"]),
            (Filter::eq("id", big - 1), &["below", "float"]),
            (
                Filter::eq("id", 9_007_199_254_740_992.0),
                &["below", "float"],
            ),
            (Filter::eq("id", u64::MAX), &["max"]),
            (
                Filter::lt("id", u64::MAX),
                &["above", "at", "below", "float", "min"],
            ),
            (Filter::eq("id", i64::MIN), &["min"]),
            (
                Filter::gt("id", i64::MIN),
                &["above", "at", "below", "float", "max"],
            ),
            (Filter::gt("id", 1e19), &["max"]),
        ];
        for (filter, expected) in cases {
            let got = search(backend, &n, std::slice::from_ref(&filter), 0, 100, T0).await?;
            let got: Vec<&str> = got.iter().map(|r| r.item.key.as_str()).collect();
            ensure_eq!(got, expected.to_vec(), "the records meeting {filter:?}");
        }
        Ok(())
    })
    .await
}

/// Offset and limit page through the records in order; filters apply
/// before the page is cut.
pub async fn offset_limit(backend: &dyn MemoryBackend) -> Result<(), Failure> {
    run("offset_limit", async {
        let n = ns(&["p"]);
        let records = (0..25)
            .map(|i| {
                record(
                    &n,
                    &format!("k{i:02}"),
                    json!({"i": i, "even": i % 2 == 0}),
                    T0,
                )
            })
            .collect();
        put(backend, records, T0).await?;
        let key_list = |r: &[Record]| r.iter().map(|r| r.item.key.clone()).collect::<Vec<_>>();
        let want =
            |range: std::ops::Range<usize>| range.map(|i| format!("k{i:02}")).collect::<Vec<_>>();
        ensure_eq!(
            key_list(&search(backend, &n, &[], 0, 10, T0).await?),
            want(0..10),
            "page 1"
        );
        ensure_eq!(
            key_list(&search(backend, &n, &[], 10, 10, T0).await?),
            want(10..20),
            "page 2"
        );
        ensure_eq!(
            key_list(&search(backend, &n, &[], 20, 10, T0).await?),
            want(20..25),
            "page 3"
        );
        ensure!(
            search(backend, &n, &[], 25, 10, T0).await?.is_empty(),
            "a page past the end"
        );
        ensure!(
            search(backend, &n, &[], 0, 0, T0).await?.is_empty(),
            "limit 0"
        );
        ensure_eq!(
            key_list(&search(backend, &n, &[], 3, usize::MAX, T0).await?),
            want(3..25),
            "no limit"
        );
        let evens = search(backend, &n, &[Filter::eq("even", true)], 2, 3, T0).await?;
        ensure_eq!(
            key_list(&evens),
            vec!["k04".to_owned(), "k06".into(), "k08".into()],
            "a filtered page"
        );
        let evens = search(backend, &n, &[Filter::eq("even", true)], 12, 3, T0).await?;
        ensure_eq!(
            key_list(&evens),
            vec!["k24".to_owned()],
            "the last filtered page"
        );
        Ok(())
    })
    .await
}

/// Namespaces lists each namespace holding a live record once, and no
/// other.
pub async fn namespaces(backend: &dyn MemoryBackend) -> Result<(), Failure> {
    run("namespaces", async {
        ensure!(
            backend.namespaces(T0).await.ctx("namespaces")?.is_empty(),
            "an empty backend lists namespaces"
        );
        put(
            backend,
            vec![
                record(&ns(&["a"]), "1", json!({}), T0),
                record(&ns(&["a"]), "2", json!({}), T0),
                record(&ns(&["a", "b"]), "1", json!({}), T0),
                record(&ns(&["ab"]), "1", json!({}), T0),
                expiring(&ns(&["gone"]), "1", json!({}), T0, 10),
                expiring(&ns(&["mixed"]), "1", json!({}), T0, 10),
                record(&ns(&["mixed"]), "2", json!({}), T0),
                record(&ns(&["z", "y", "x"]), "1", json!({}), T0),
            ],
            T0,
        )
        .await?;
        backend
            .apply(
                vec![Write::Delete {
                    namespace: ns(&["a", "b"]),
                    key: "1".into(),
                }],
                T0,
            )
            .await
            .ctx("delete")?;
        let got = sorted_namespaces(backend.namespaces(T0 + 10).await.ctx("namespaces")?);
        ensure_eq!(
            got,
            vec![
                ns(&["a"]),
                ns(&["ab"]),
                ns(&["mixed"]),
                ns(&["z", "y", "x"])
            ],
            "the namespaces with live records"
        );
        let before = sorted_namespaces(backend.namespaces(T0 + 9).await.ctx("namespaces")?);
        ensure!(
            before.contains(&ns(&["gone"])),
            "a namespace whose record is still live is missing"
        );
        Ok(())
    })
    .await
}

/// The writes of one batch apply in order: a later put of a key replaces
/// an earlier one (keeping its `created_at`), a delete after a put removes
/// it, a touch after a put sets its expiry.
pub async fn batch_in_order(backend: &dyn MemoryBackend) -> Result<(), Failure> {
    run("batch_in_order", async {
        let n = ns(&["b"]);
        put(
            backend,
            vec![record(&n, "old", json!({"v": 0}), T0 - 10)],
            T0 - 10,
        )
        .await?;
        let writes = vec![
            Write::Put(record(&n, "a", json!({"v": 1}), T0)),
            Write::Put(record(&n, "a", json!({"v": 2}), T0)),
            Write::Put(record(&n, "gone", json!({"v": 1}), T0)),
            Write::Delete {
                namespace: n.clone(),
                key: "gone".into(),
            },
            Write::Put(expiring(&n, "t", json!({"v": 1}), T0, 10)),
            Write::Touch {
                namespace: n.clone(),
                key: "t".into(),
                expires_at: T0 + 1_000,
                from: T0 + 10,
            },
            Write::Put(record(&n, "old", json!({"v": 1}), T0)),
        ];
        let created = backend
            .apply(writes, T0)
            .await
            .ctx("apply of a mixed batch")?;
        ensure_eq!(
            created,
            vec![T0, T0, T0, T0, T0 - 10],
            "the created times of the batch's puts"
        );
        let a = get(backend, &n, "a", T0).await?.ok_or("a is missing")?;
        ensure_eq!(a.item.value, json!({"v": 2}), "the later put of a key");
        ensure!(
            get(backend, &n, "gone", T0).await?.is_none(),
            "a key deleted after its put is there"
        );
        let t = get(backend, &n, "t", T0 + 500)
            .await?
            .ok_or("a touch in the batch was lost")?;
        ensure_eq!(
            t.item.expires_at,
            Some(T0 + 1_000),
            "the expiry touched in the batch"
        );
        let old = get(backend, &n, "old", T0).await?.ok_or("old is missing")?;
        ensure_eq!(
            old.item.created_at,
            T0 - 10,
            "created_at kept by a put in a batch"
        );
        Ok(())
    })
    .await
}

/// A value of about 1 MiB (the largest the core accepts) round trips.
pub async fn large_value(backend: &dyn MemoryBackend) -> Result<(), Failure> {
    run("large_value", async {
        let n = ns(&["big"]);
        let text: String = (0..(1024 * 1024 - 64))
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let value = json!({"text": text, "n": 1});
        let mut r = record(&n, "k", value.clone(), T0);
        r.vector = Some((0..384).map(|i| i as f32 / 384.0).collect());
        put(backend, vec![r.clone()], T0).await?;
        let got = get(backend, &n, "k", T0)
            .await?
            .ok_or("the large record is missing")?;
        ensure!(got == r, "the large record read back differs");
        let found = search(backend, &n, &[Filter::eq("n", 1)], 0, 10, T0).await?;
        ensure_eq!(found.len(), 1, "searches finding the large record");
        Ok(())
    })
    .await
}

/// Labels and keys of any non-control characters: accents, scripts, emoji,
/// quotes, separators other stores might use (`/`, `:`, `.`, `,`, `{`,
/// `%`, `*`), and long ones.
pub async fn unicode(backend: &dyn MemoryBackend) -> Result<(), Failure> {
    run("unicode", async {
        let long = "ü".repeat(128);
        let labels: Vec<Vec<&str>> = vec![
            vec!["utilisateurs", "é"],
            vec!["用户", "记忆"],
            vec!["🦀", "👩‍👩‍👧"],
            vec!["a:b", "c.d"],
            vec!["{tag}", "x,y", "%s", "*", "\"quoted'\\"],
            vec!["עברית", "العربية"],
            vec![long.as_str()],
        ];
        let keys_: Vec<String> = vec![
            "clé".into(),
            "键 with space".into(),
            "🦀/🚀".into(),
            "a:b:c".into(),
            "*?[]{}%".into(),
            "\u{202E}rtl".into(),
            "ü".repeat(300),
        ];
        let mut records = Vec::new();
        for (l, k) in labels.iter().zip(&keys_) {
            records.push(record(&ns(l), k, json!({"label": l, "key": k}), T0));
        }
        put(backend, records.clone(), T0).await?;
        for r in &records {
            let got = get(backend, &r.item.namespace, &r.item.key, T0)
                .await?
                .ok_or_else(|| format!("{:?}/{:?} is missing", r.item.namespace, r.item.key))?;
            ensure_eq!(got.item, r.item, "the unicode record read back");
            let under = search(backend, &r.item.namespace, &[], 0, 10, T0).await?;
            ensure_eq!(
                keys(&under),
                keys(std::slice::from_ref(r)),
                "the search under {:?}",
                r.item.namespace
            );
        }
        let mut want: Vec<Namespace> = records.iter().map(|r| r.item.namespace.clone()).collect();
        want.sort();
        ensure_eq!(
            sorted_namespaces(backend.namespaces(T0).await.ctx("namespaces")?),
            want,
            "the unicode namespaces"
        );
        let all = search(backend, &Namespace::root(), &[], 0, 100, T0).await?;
        let mut sorted = records.clone();
        sorted.sort_by(|a, b| {
            (&a.item.namespace, &a.item.key).cmp(&(&b.item.namespace, &b.item.key))
        });
        ensure_eq!(keys(&all), keys(&sorted), "the order of unicode records");
        Ok(())
    })
    .await
}

/// 1 200 records over 12 namespaces: all found, in order, by prefix and in
/// pages; namespaces and scan see them all.
pub async fn many_records(backend: &dyn MemoryBackend) -> Result<(), Failure> {
    run("many_records", async {
        let mut records = Vec::new();
        for g in 0..12 {
            let n = ns(&["many", &format!("g{g}")]);
            for i in 0..100 {
                records.push(record(
                    &n,
                    &format!("item-{i:03}"),
                    json!({"g": g, "i": i}),
                    T0,
                ));
            }
        }
        // Put in several batches, in another order than the stored one.
        for chunk in records.chunks(300).rev() {
            put(backend, chunk.to_vec(), T0).await?;
        }
        let mut sorted = records.clone();
        sorted.sort_by(|a, b| {
            (&a.item.namespace, &a.item.key).cmp(&(&b.item.namespace, &b.item.key))
        });
        let all = search(backend, &ns(&["many"]), &[], 0, usize::MAX, T0).await?;
        ensure_eq!(all.len(), 1200, "records found");
        ensure!(
            keys(&all) == keys(&sorted),
            "1 200 records are not in namespace then key order"
        );
        let page = search(backend, &ns(&["many"]), &[], 650, 100, T0).await?;
        ensure!(
            keys(&page) == keys(&sorted[650..750]),
            "a page in the middle differs"
        );
        let g3 = search(
            backend,
            &ns(&["many", "g3"]),
            &[Filter::gte("i", 90)],
            0,
            100,
            T0,
        )
        .await?;
        ensure_eq!(g3.len(), 10, "filtered records of one namespace");
        ensure_eq!(
            backend.namespaces(T0).await.ctx("namespaces")?.len(),
            12,
            "namespaces"
        );
        ensure_eq!(
            backend.scan(T0).await.ctx("scan")?.len(),
            1200,
            "records scanned"
        );
        Ok(())
    })
    .await
}

/// A batch is all or nothing for readers: while batches each set ten keys
/// to one generation, concurrent searches and gets never see keys of two
/// generations, nor fewer than ten.
pub async fn atomic_for_readers(backend: Arc<dyn MemoryBackend>) -> Result<(), Failure> {
    run("atomic_for_readers", async {
        let n = ns(&["atomic"]);
        let batch = |generation: u64| -> Vec<Write> {
            (0..10)
                .map(|i| {
                    Write::Put(record(
                        &n,
                        &format!("k{i}"),
                        json!({"gen": generation, "i": i}),
                        T0,
                    ))
                })
                .collect()
        };
        backend.apply(batch(0), T0).await.ctx("the first batch")?;
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut readers = Vec::new();
        for _ in 0..3 {
            let backend = Arc::clone(&backend);
            let done = Arc::clone(&done);
            let n = n.clone();
            readers.push(tokio::spawn(async move {
                let mut reads = 0u32;
                while !done.load(std::sync::atomic::Ordering::SeqCst) || reads < 5 {
                    let got = backend
                        .search(&n, &[], 0, 100, T0)
                        .await
                        .map_err(|e| e.to_string())?;
                    let gens: std::collections::BTreeSet<u64> = got
                        .iter()
                        .filter_map(|r| r.item.value["gen"].as_u64())
                        .collect();
                    if got.len() != 10 || gens.len() != 1 {
                        return Err(format!(
                            "a search saw {} records of generations {gens:?}",
                            got.len()
                        ));
                    }
                    reads += 1;
                    tokio::task::yield_now().await;
                }
                Ok::<u32, String>(reads)
            }));
        }
        for generation in 1..=40 {
            backend
                .apply(batch(generation), T0)
                .await
                .ctx(format!("batch {generation}"))?;
            tokio::task::yield_now().await;
        }
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        for reader in readers {
            reader
                .await
                .map_err(|e| format!("a reader panicked: {e}"))??;
        }
        let last = search(&*backend, &n, &[], 0, 100, T0).await?;
        ensure!(
            last.iter().all(|r| r.item.value["gen"] == json!(40)),
            "the last batch is not what is stored"
        );
        Ok(())
    })
    .await
}

/// Concurrent puts on one key: every read sees one writer's record whole
/// (its 64 KiB value and its vector from the same put), the record left is
/// one that was put, and a put after them all wins.
pub async fn concurrent_puts(backend: Arc<dyn MemoryBackend>) -> Result<(), Failure> {
    run("concurrent_puts", async {
        let n = ns(&["race"]);
        let make = |writer: u32, round: u32| {
            let fill: String =
                std::iter::repeat_n(char::from(b'a' + (writer % 26) as u8), 64 * 1024).collect();
            let mut r = record(
                &n,
                "k",
                json!({"writer": writer, "round": round, "fill": fill}),
                T0,
            );
            r.vector = Some(vec![writer as f32; 16]);
            r
        };
        let check = |r: &Record| -> Result<(), String> {
            let writer = r.item.value["writer"]
                .as_u64()
                .ok_or("no writer in the record")? as u32;
            let fill = r.item.value["fill"]
                .as_str()
                .ok_or("no fill in the record")?;
            let expected = char::from(b'a' + (writer % 26) as u8);
            ensure!(
                fill.len() == 64 * 1024 && fill.chars().all(|c| c == expected),
                "a torn record: writer {writer}'s value holds another's bytes"
            );
            ensure!(
                r.vector.as_deref() == Some(&[writer as f32; 16][..]),
                "a torn record: writer {writer}'s value with vector {:?}",
                r.vector.as_ref().map(|v| v.first())
            );
            Ok(())
        };
        let mut tasks = Vec::new();
        for writer in 0..6u32 {
            let backend = Arc::clone(&backend);
            let records: Vec<Record> = (0..10).map(|round| make(writer, round)).collect();
            let n = n.clone();
            tasks.push(tokio::spawn(async move {
                for r in records {
                    backend
                        .apply(vec![Write::Put(r)], T0)
                        .await
                        .map_err(|e| e.to_string())?;
                    if let Some(got) = backend.get(&n, "k", T0).await.map_err(|e| e.to_string())? {
                        check(&got)?;
                    }
                }
                Ok::<(), String>(())
            }));
        }
        for task in tasks {
            task.await
                .map_err(|e| format!("a writer panicked: {e}"))??;
        }
        let left = get(&*backend, &n, "k", T0)
            .await?
            .ok_or("the raced key is missing")?;
        check(&left)?;
        ensure_eq!(left.item.created_at, T0, "created_at after the race");
        let last = make(99, 0);
        put(&*backend, vec![last.clone()], T0 + 1).await?;
        let got = get(&*backend, &n, "k", T0 + 1)
            .await?
            .ok_or("the last put is missing")?;
        ensure!(
            got.item.value == last.item.value,
            "the last writer did not win"
        );
        ensure_eq!(
            search(&*backend, &n, &[], 0, 10, T0 + 1).await?.len(),
            1,
            "records of the raced key"
        );
        Ok(())
    })
    .await
}

/// A batch whose last write the backend refuses fails as a whole: the
/// puts, deletes and touches before it leave nothing, and what was stored
/// before is as it was.
pub async fn failed_batch(backend: &dyn MemoryBackend, refused: Write) -> Result<(), Failure> {
    run("failed_batch", async {
        let n = ns(&["fail"]);
        put(
            backend,
            vec![
                expiring(&n, "kept", json!({"v": 1}), T0, 1_000),
                record(&n, "doomed", json!({"v": 1}), T0),
            ],
            T0,
        )
        .await?;
        let writes = vec![
            Write::Put(record(&n, "new", json!({"v": 2}), T0 + 1)),
            Write::Put(record(&n, "kept", json!({"v": 2}), T0 + 1)),
            Write::Delete {
                namespace: n.clone(),
                key: "doomed".into(),
            },
            Write::Touch {
                namespace: n.clone(),
                key: "kept".into(),
                expires_at: T0 + 99_999,
                from: T0 + 1,
            },
            refused.clone(),
        ];
        if let Ok(created) = backend.apply(writes, T0 + 1).await {
            return Err(format!(
                "the refused write {refused:?} was applied ({created:?})"
            ));
        }
        ensure!(
            get(backend, &n, "new", T0 + 2).await?.is_none(),
            "a put before the refused write stayed"
        );
        let kept = get(backend, &n, "kept", T0 + 2)
            .await?
            .ok_or("a record was lost")?;
        ensure_eq!(
            kept.item.value,
            json!({"v": 1}),
            "a record replaced before the refused write"
        );
        ensure_eq!(
            kept.item.expires_at,
            Some(T0 + 1_000),
            "a record touched before the refused write"
        );
        ensure!(
            get(backend, &n, "doomed", T0 + 2).await?.is_some(),
            "a delete before the refused write stayed"
        );
        ensure_eq!(
            search(backend, &n, &[], 0, 10, T0 + 2).await?.len(),
            2,
            "records after the failed batch"
        );
        Ok(())
    })
    .await
}
