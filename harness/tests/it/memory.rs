//! Long-term memory over the in-memory backend: validation, TTLs on a
//! controlled clock, filters, listings, batches, and search by meaning
//! with an embedder of the test's own (words hashed into a vector), its
//! failures and its cache.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use async_trait::async_trait;
use harness::llm::{Embedder, Embeddings, ModelError};
use harness::memory::{
    Filter, HashedWords, IndexConfig, IndexFields, MAX_VALUE_DEPTH, ManualClock, Memory,
    MemoryError, Namespace, NamespaceQuery, Op, OpResult, PutOptions, Search,
};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

fn ns(labels: &[&str]) -> Namespace {
    Namespace::new(labels.iter().copied()).unwrap()
}

/// An embedder that misbehaves: down, answering vectors of the wrong
/// length, or too slow.
enum Misbehaving {
    Down,
    WrongDimension,
    Slow,
}

#[async_trait]
impl Embedder for Misbehaving {
    async fn embed(&self, texts: &[String]) -> Result<Embeddings, ModelError> {
        match self {
            Self::Down => Err(ModelError::malformed("the embedder is down")),
            Self::WrongDimension => HashedWords::new(32).embed(texts).await,
            Self::Slow => {
                tokio::time::sleep(Duration::from_secs(5)).await;
                HashedWords::new(64).embed(texts).await
            }
        }
    }
}

fn indexed(embedder: Arc<HashedWords>) -> Memory {
    Memory::in_memory().with_index(IndexConfig::new(embedder, 64).fields(["text"]))
}

#[tokio::test]
async fn items_round_trip_and_keep_their_created_time() {
    let clock = Arc::new(ManualClock::at(1_000));
    let memory = Memory::in_memory().with_clock(clock.clone());
    let prefs = ns(&["users", "u1", "prefs"]);
    let first = memory
        .put(&prefs, "lang", json!({"v": "rust"}))
        .await
        .unwrap();
    assert_eq!((first.created_at, first.updated_at), (1_000, 1_000));
    clock.advance(Duration::from_secs(5));
    let second = memory
        .put(&prefs, "lang", json!({"v": "ocaml"}))
        .await
        .unwrap();
    assert_eq!((second.created_at, second.updated_at), (1_000, 6_000));
    let got = memory.get(&prefs, "lang").await.unwrap().unwrap();
    assert_eq!(got, second);
    assert_eq!(got.value, json!({"v": "ocaml"}));
    memory.delete(&prefs, "lang").await.unwrap();
    assert_eq!(memory.get(&prefs, "lang").await.unwrap(), None);
    // Deleting what is not there is no error.
    memory.delete(&prefs, "lang").await.unwrap();
}

#[tokio::test]
async fn bad_namespaces_keys_and_values_are_refused_naming_them() {
    let memory = Memory::in_memory();
    for labels in [vec![], vec![""], vec!["a", ""], vec!["a\nb"], vec!["x"; 17]] {
        let err = Namespace::new(labels.clone()).unwrap_err();
        assert!(
            matches!(err, MemoryError::Namespace { .. }),
            "{labels:?}: {err}"
        );
    }
    let long = "x".repeat(300);
    assert!(Namespace::new([long.as_str()]).is_err());
    let good = ns(&["a"]);
    let long_key = "k".repeat(2000);
    for key in ["", "a\u{0}b", "tab\there", long_key.as_str()] {
        let err = memory.put(&good, key, json!({})).await.unwrap_err();
        assert!(matches!(err, MemoryError::Key { .. }), "{key:?}: {err}");
        assert!(memory.get(&good, key).await.is_err());
    }
    let huge = json!({"blob": "x".repeat(1024 * 1024)});
    for value in [
        json!(1),
        json!("text"),
        json!([1, 2]),
        Value::Null,
        json!(true),
        huge,
    ] {
        let err = memory.put(&good, "k", value).await.unwrap_err();
        assert!(matches!(err, MemoryError::Value { .. }), "{err}");
        assert!(err.to_string().contains("a/k"), "{err}");
    }
    // The root prefix is no place for an item: every call on one there is
    // refused the same way, whatever the backend.
    let root = Namespace::root();
    let refusals = [
        memory.put(&root, "k", json!({})).await.map(drop),
        memory.get(&root, "k").await.map(drop),
        memory.get_refreshing(&root, "k").await.map(drop),
        memory.delete(&root, "k").await,
    ];
    for refusal in refusals {
        let err = refusal.unwrap_err();
        assert!(matches!(err, MemoryError::Namespace { .. }), "{err}");
    }
    // Bad filters.
    for filter in [
        Filter::eq("", 1),
        Filter::eq("a..b", 1),
        Filter::gt("n", json!([1])),
        Filter::lt("n", Value::Null),
        Filter::gte("n", json!({"a": 1})),
    ] {
        let err = memory
            .search(&Search::under(Namespace::root()).filter(filter.clone()))
            .await
            .unwrap_err();
        assert!(
            matches!(err, MemoryError::Filter { .. }),
            "{filter:?}: {err}"
        );
    }
    // Nothing of it was written.
    assert!(
        memory
            .list_namespaces(&NamespaceQuery::all())
            .await
            .unwrap()
            .is_empty()
    );
}

/// A search with `refresh_ttl` starts again the TTL of the items it
/// returns, and of no other.
#[tokio::test]
async fn a_refreshing_search_extends_the_items_it_finds_only() {
    let clock = Arc::new(ManualClock::at(0));
    let memory = Memory::in_memory().with_clock(clock.clone());
    let n = ns(&["s"]);
    let ttl = PutOptions::default().ttl(Duration::from_secs(10));
    for (key, kind) in [("a", "found"), ("b", "found"), ("c", "other")] {
        memory
            .put_with(&n, key, json!({"kind": kind}), ttl.clone())
            .await
            .unwrap();
    }
    clock.advance(Duration::from_secs(9));
    let search = Search::under(n.clone())
        .filter(Filter::eq("kind", "found"))
        .limit(1)
        .refresh_ttl();
    let hits = memory.search(&search).await.unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].item.key, "a");
    assert_eq!(hits[0].item.expires_at, Some(19_000), "the hit returned");
    clock.advance(Duration::from_secs(2)); // t = 11 s
    let live: Vec<String> = memory
        .search(&Search::under(n))
        .await
        .unwrap()
        .into_iter()
        .map(|h| h.item.key)
        .collect();
    assert_eq!(
        live,
        ["a"],
        "b (found, but past the limit) and c expired at 10 s"
    );
}

#[tokio::test]
async fn an_item_expires_at_its_ttl_and_a_refreshing_read_extends_it() {
    let clock = Arc::new(ManualClock::at(0));
    let memory = Memory::in_memory().with_clock(clock.clone());
    let n = ns(&["s"]);
    let ttl = PutOptions::default().ttl(Duration::from_secs(10));
    memory
        .put_with(&n, "a", json!({"x": 1}), ttl.clone())
        .await
        .unwrap();
    memory
        .put_with(&n, "b", json!({"x": 2}), ttl)
        .await
        .unwrap();
    memory.put(&n, "forever", json!({"x": 3})).await.unwrap();
    clock.advance(Duration::from_secs(9));
    // A refreshing read of `a` starts its 10 s again; `b` is only read.
    assert!(memory.get_refreshing(&n, "a").await.unwrap().is_some());
    assert!(memory.get(&n, "b").await.unwrap().is_some());
    clock.advance(Duration::from_secs(2)); // t = 11 s
    assert!(memory.get(&n, "a").await.unwrap().is_some());
    assert_eq!(
        memory.get(&n, "b").await.unwrap(),
        None,
        "b expired at 10 s"
    );
    let keys: Vec<String> = memory
        .search(&Search::under(n.clone()))
        .await
        .unwrap()
        .into_iter()
        .map(|h| h.item.key)
        .collect();
    assert_eq!(keys, ["a", "forever"]);
    clock.advance(Duration::from_secs(9)); // t = 20 s: a expired at 19 s
    assert_eq!(memory.get(&n, "a").await.unwrap(), None);
    assert!(memory.get(&n, "forever").await.unwrap().is_some());
    // An expired item is replaced afresh: a new created time.
    let again = memory.put(&n, "a", json!({"x": 9})).await.unwrap();
    assert_eq!(again.created_at, 20_000);
    // A namespace whose items all expired is not listed.
    let short = ns(&["short"]);
    memory
        .put_with(
            &short,
            "k",
            json!({}),
            PutOptions::default().ttl(Duration::from_millis(1)),
        )
        .await
        .unwrap();
    clock.advance(Duration::from_millis(1));
    let listed = memory
        .list_namespaces(&NamespaceQuery::all())
        .await
        .unwrap();
    assert_eq!(listed, [n]);
}

/// Expiry is kept in whole milliseconds: a TTL under one is refused, and
/// the value it would have replaced is kept.
#[tokio::test]
async fn a_ttl_under_a_millisecond_is_refused_and_replaces_nothing() {
    let clock = Arc::new(ManualClock::at(0));
    let memory = Memory::in_memory().with_clock(clock.clone());
    let n = ns(&["s"]);
    memory.put(&n, "kept", json!({"x": 1})).await.unwrap();
    for ttl in [
        Duration::ZERO,
        Duration::from_nanos(1),
        Duration::from_micros(500),
        Duration::from_micros(999),
    ] {
        let error = memory
            .put_with(&n, "kept", json!({"x": 2}), PutOptions::default().ttl(ttl))
            .await
            .unwrap_err();
        assert!(
            matches!(error, MemoryError::Value { .. }),
            "{ttl:?}: {error}"
        );
        assert!(error.to_string().contains("1 ms"), "{error}");
        let got = memory.get(&n, "kept").await.unwrap().unwrap();
        assert_eq!(got.value, json!({"x": 1}), "{ttl:?}");
    }
}

#[tokio::test]
async fn searches_filter_page_and_stay_under_their_prefix() {
    let memory = Memory::in_memory();
    for (user, key, kind, score, name) in [
        ("u1", "a", "fact", 1, "alpha"),
        ("u1", "b", "fact", 5, "bravo"),
        ("u1", "c", "pref", 7, "charlie"),
        ("u2", "d", "fact", 9, "delta"),
        ("u10", "e", "fact", 9, "echo"),
    ] {
        let value = json!({"kind": kind, "meta": {"score": score}, "name": name});
        memory.put(&ns(&["users", user]), key, value).await.unwrap();
    }
    let keys =
        |hits: Vec<harness::memory::Hit>| hits.into_iter().map(|h| h.item.key).collect::<Vec<_>>();
    let u1 = Search::under(ns(&["users", "u1"]));
    assert_eq!(keys(memory.search(&u1).await.unwrap()), ["a", "b", "c"]);
    let facts = u1.clone().filter(Filter::eq("kind", "fact"));
    assert_eq!(keys(memory.search(&facts).await.unwrap()), ["a", "b"]);
    let high = Search::under(ns(&["users"])).filter(Filter::gte("meta.score", 7));
    // Namespace then key order: `u1` < `u10` < `u2`.
    assert_eq!(keys(memory.search(&high).await.unwrap()), ["c", "e", "d"]);
    let both = high.clone().filter(Filter::ne("kind", "pref"));
    assert_eq!(keys(memory.search(&both).await.unwrap()), ["e", "d"]);
    let names = Search::under(Namespace::root()).filter(Filter::lt("name", "charlie"));
    assert_eq!(keys(memory.search(&names).await.unwrap()), ["a", "b"]);
    let page = Search::under(Namespace::root()).limit(2).offset(1);
    assert_eq!(keys(memory.search(&page).await.unwrap()), ["b", "c"]);
    // A number compares equal whatever its spelling; a missing field
    // matches nothing, `ne` included.
    assert_eq!(
        keys(
            memory
                .search(&u1.clone().filter(Filter::eq("meta.score", 5.0)))
                .await
                .unwrap()
        ),
        ["b"]
    );
    assert!(
        memory
            .search(&u1.clone().filter(Filter::ne("missing", 1)))
            .await
            .unwrap()
            .is_empty()
    );
    // Listing namespaces.
    let all = memory
        .list_namespaces(&NamespaceQuery::all())
        .await
        .unwrap();
    assert_eq!(
        all,
        [
            ns(&["users", "u1"]),
            ns(&["users", "u10"]),
            ns(&["users", "u2"])
        ]
    );
    let cut = NamespaceQuery {
        max_depth: Some(1),
        ..NamespaceQuery::all()
    };
    assert_eq!(
        memory.list_namespaces(&cut).await.unwrap(),
        [ns(&["users"])]
    );
    let suffix = NamespaceQuery {
        suffix: Some(ns(&["u2"])),
        ..NamespaceQuery::all()
    };
    assert_eq!(
        memory.list_namespaces(&suffix).await.unwrap(),
        [ns(&["users", "u2"])]
    );
    let paged = NamespaceQuery {
        limit: Some(1),
        offset: 1,
        ..NamespaceQuery::all()
    };
    assert_eq!(
        memory.list_namespaces(&paged).await.unwrap(),
        [ns(&["users", "u10"])]
    );
}

#[tokio::test]
async fn a_batch_is_validated_whole_and_reads_see_the_writes_before_them() {
    let memory = Memory::in_memory();
    let n = ns(&["b"]);
    let put = |key: &str, value: Value| Op::Put {
        namespace: n.clone(),
        key: key.into(),
        value,
        options: PutOptions::default(),
    };
    // One bad put: nothing of the batch is written.
    let err = memory
        .batch(vec![put("ok", json!({"a": 1})), put("bad", json!(5))])
        .await
        .unwrap_err();
    assert!(matches!(err, MemoryError::Value { .. }));
    assert_eq!(memory.get(&n, "ok").await.unwrap(), None);
    let results = memory
        .batch(vec![
            put("x", json!({"v": 1})),
            Op::Get {
                namespace: n.clone(),
                key: "x".into(),
            },
            Op::Delete {
                namespace: n.clone(),
                key: "x".into(),
            },
            Op::Get {
                namespace: n.clone(),
                key: "x".into(),
            },
            Op::ListNamespaces(NamespaceQuery::all()),
        ])
        .await
        .unwrap();
    assert!(matches!(&results[0], OpResult::Put(item) if item.key == "x"));
    assert!(matches!(&results[1], OpResult::Get(Some(item)) if item.value == json!({"v": 1})));
    assert_eq!(results[2], OpResult::Delete);
    assert_eq!(results[3], OpResult::Get(None));
    assert_eq!(results[4], OpResult::ListNamespaces(vec![]));
}

#[tokio::test]
async fn search_by_meaning_ranks_by_closeness_within_filters() {
    let words = Arc::new(HashedWords::new(64));
    let memory = indexed(words.clone());
    let n = ns(&["notes"]);
    for (key, text, kind) in [
        ("cats", "cats purr and chase mice around the barn", "animal"),
        (
            "rust",
            "the rust compiler checks borrows and lifetimes",
            "code",
        ),
        ("dogs", "dogs bark and chase balls in the park", "animal"),
        ("tea", "green tea brewed at eighty degrees", "food"),
    ] {
        memory
            .put(&n, key, json!({"text": text, "kind": kind}))
            .await
            .unwrap();
    }
    let hits = memory
        .search(
            &Search::under(n.clone())
                .text("which animal will chase mice")
                .limit(2),
        )
        .await
        .unwrap();
    assert_eq!(hits[0].item.key, "cats");
    assert_eq!(hits.len(), 2);
    assert!(hits[0].score.unwrap() > hits[1].score.unwrap());
    // Filters apply before ranking.
    let code = memory
        .search(
            &Search::under(n.clone())
                .text("chase mice")
                .filter(Filter::eq("kind", "code")),
        )
        .await
        .unwrap();
    assert_eq!(code.len(), 1);
    assert_eq!(code[0].item.key, "rust");
    // A put replaces the item in the index; a delete removes it.
    memory
        .put(
            &n,
            "cats",
            json!({"text": "green tea again", "kind": "food"}),
        )
        .await
        .unwrap();
    memory.delete(&n, "dogs").await.unwrap();
    let hits = memory
        .search(&Search::under(n.clone()).text("brewed green tea").limit(10))
        .await
        .unwrap();
    let keys: Vec<_> = hits.iter().map(|h| h.item.key.as_str()).collect();
    assert_eq!(keys[..2], ["tea", "cats"]);
    assert!(!keys.contains(&"dogs"));
    // An item put without indexing is not found by text, only by filters.
    memory
        .put_with(
            &n,
            "quiet",
            json!({"text": "cats chase mice"}),
            PutOptions::default().index(IndexFields::Off),
        )
        .await
        .unwrap();
    let hits = memory
        .search(&Search::under(n.clone()).text("cats chase mice").limit(10))
        .await
        .unwrap();
    assert!(hits.iter().all(|h| h.item.key != "quiet"));
    // A memory without an index refuses a search by text.
    let plain = Memory::in_memory();
    assert!(matches!(
        plain.search(&Search::under(n).text("x")).await,
        Err(MemoryError::Query { .. })
    ));
}

#[tokio::test]
async fn an_embedder_that_fails_times_out_or_answers_wrongly_writes_nothing() {
    let n = ns(&["e"]);
    let cases = [
        ("down", Misbehaving::Down),
        ("wrong", Misbehaving::WrongDimension),
        ("slow", Misbehaving::Slow),
    ];
    for (name, words) in cases {
        let memory = Memory::in_memory().with_index(
            IndexConfig::new(Arc::new(words), 64)
                .fields(["text"])
                .timeout(Duration::from_millis(200)),
        );
        let err = memory
            .batch(vec![
                Op::Put {
                    namespace: n.clone(),
                    key: "a".into(),
                    value: json!({"text": "one"}),
                    options: PutOptions::default(),
                },
                Op::Put {
                    namespace: n.clone(),
                    key: "b".into(),
                    value: json!({"text": "two"}),
                    options: PutOptions::default(),
                },
            ])
            .await
            .unwrap_err();
        assert!(
            matches!(err, MemoryError::Embedding { .. }),
            "{name}: {err}"
        );
        assert!(
            err.to_string().contains("2 items; nothing was written"),
            "{name}: {err}"
        );
        assert_eq!(memory.get(&n, "a").await.unwrap(), None, "{name}");
        assert_eq!(memory.get(&n, "b").await.unwrap(), None, "{name}");
        // A search writes nothing, and does not say it did not.
        let err = memory
            .search(&Search::under(n.clone()).text("one"))
            .await
            .unwrap_err();
        assert!(
            matches!(err, MemoryError::Embedding { .. }),
            "{name}: {err}"
        );
        let shown = err.to_string();
        assert!(
            shown.contains("for the query") && !shown.contains("written"),
            "{name}: {shown}"
        );
    }
}

#[tokio::test]
async fn embeddings_are_batched_and_cached_by_text() {
    let words = Arc::new(HashedWords::new(64));
    let memory = indexed(words.clone());
    let n = ns(&["c"]);
    let ops = (0..5)
        .map(|i| Op::Put {
            namespace: n.clone(),
            key: format!("k{i}"),
            value: json!({"text": if i < 3 { "same text" } else { "other text" }}),
            options: PutOptions::default(),
        })
        .collect();
    memory.batch(ops).await.unwrap();
    // One call, for the two distinct texts.
    assert_eq!(words.calls(), 1);
    assert_eq!(words.texts(), 2);
    // Putting a known text again, or searching by it, calls nothing.
    memory
        .put(&n, "k9", json!({"text": "same text"}))
        .await
        .unwrap();
    memory
        .search(&Search::under(n).text("other text"))
        .await
        .unwrap();
    assert_eq!(words.calls(), 1);
}

#[tokio::test]
async fn the_embedding_cache_keeps_at_most_its_capacity() {
    // (capacity, distinct texts in one batch): the batch embeds every text
    // once; putting them all again embeds those the cache could not keep.
    for (capacity, count) in [(0, 3), (1, 4), (3, 5), (3, 3), (4, 9)] {
        let words = Arc::new(HashedWords::new(64));
        let memory = Memory::in_memory().with_index(
            IndexConfig::new(words.clone(), 64)
                .fields(["text"])
                .cache(capacity),
        );
        let n = ns(&["c"]);
        let batch = |round: usize| {
            (0..count)
                .map(|i| Op::Put {
                    namespace: n.clone(),
                    key: format!("k{round}-{i}"),
                    // Long texts: the cache's cost does not grow with them.
                    value: json!({"text": format!("text {i} {}", "word ".repeat(20_000))}),
                    options: PutOptions::default(),
                })
                .collect::<Vec<_>>()
        };
        memory.batch(batch(0)).await.unwrap();
        assert_eq!(words.texts(), count, "capacity {capacity}");
        memory.batch(batch(1)).await.unwrap();
        let again = words.texts() - count;
        assert!(
            again >= count.saturating_sub(capacity),
            "capacity {capacity}, {count} texts: only {again} embedded again, so more than \
             {capacity} were kept"
        );
        if capacity >= count {
            assert_eq!(again, 0, "capacity {capacity}: every text fits");
        }
    }
}

#[tokio::test]
async fn the_index_is_built_from_what_the_backend_holds() {
    // Two memories over one backend: the second builds its index from the
    // first's vectors, and reload picks up later writes.
    let backend: Arc<dyn harness::memory::MemoryBackend> =
        Arc::new(harness::memory::InMemory::new());
    let words = Arc::new(HashedWords::new(64));
    let config = IndexConfig::new(words.clone(), 64).fields(["text"]);
    let writer = Memory::from_arc(backend.clone()).with_index(config.clone());
    let reader = Memory::from_arc(backend).with_index(config);
    let n = ns(&["shared"]);
    writer
        .put(&n, "a", json!({"text": "sailing boats on the lake"}))
        .await
        .unwrap();
    let hits = reader
        .search(&Search::under(n.clone()).text("boats lake"))
        .await
        .unwrap();
    assert_eq!(hits.len(), 1);
    writer
        .put(&n, "b", json!({"text": "boats boats lake lake"}))
        .await
        .unwrap();
    assert_eq!(
        reader
            .search(&Search::under(n.clone()).text("boats lake"))
            .await
            .unwrap()
            .len(),
        1
    );
    reader.reload_index().await.unwrap();
    assert_eq!(
        reader
            .search(&Search::under(n).text("boats lake"))
            .await
            .unwrap()
            .len(),
        2
    );
}

/// A step reaches memory through a slot of its context (here an agent
/// slot, shared by every run), namespaced per user by a run slot: what one
/// run (session) puts, the next one reads.
mod through_a_slot {
    use super::ns;
    use harness::memory::Memory;
    use harness::{Context, Cx, Harness, HarnessState, StepResult, create_agent_with};
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};
    use serde_json::json;

    #[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
    struct Visit {
        greeting: String,
    }

    #[derive(Context)]
    struct Deps {
        #[slot(agent)]
        memory: Memory,
        #[slot(run)]
        user: String,
    }

    async fn greet(cx: Cx<Deps>) -> StepResult<VisitUpdate> {
        let user = ns(&["users", cx.user.as_str()]);
        let seen = cx.memory.get(&user, "visits").await?;
        let count = seen
            .as_ref()
            .and_then(|i| i.value["count"].as_u64())
            .unwrap_or(0)
            + 1;
        cx.memory
            .put(&user, "visits", json!({ "count": count }))
            .await?;
        Ok(VisitUpdate::new().greeting(format!("visit {count} of {}", cx.user)))
    }

    #[tokio::test]
    async fn what_one_run_remembers_the_next_reads() {
        let harness = Harness::<Visit, Deps>::builder()
            .step("greet")
            .run(greet)
            .end()
            .start("greet")
            .build()
            .unwrap();
        let memory = Memory::in_memory();
        let agent = create_agent_with(
            "greeter",
            &harness,
            DepsAgent {
                memory: memory.clone(),
            },
        );
        let run = |user: &str| {
            agent
                .with(DepsRun { user: user.into() })
                .run(Visit::default())
        };
        assert_eq!(run("ana").await.unwrap().state.greeting, "visit 1 of ana");
        assert_eq!(run("ana").await.unwrap().state.greeting, "visit 2 of ana");
        assert_eq!(run("bo").await.unwrap().state.greeting, "visit 1 of bo");
        let ana = memory.get(&ns(&["users", "ana"]), "visits").await.unwrap();
        assert_eq!(ana.map(|i| i.value), Some(json!({"count": 2})));
    }
}

/// `{"a": {"a": ... {"a": 1}}}`, `depth` objects deep.
fn nested(depth: usize) -> Value {
    let mut value = json!(1);
    for _ in 0..depth {
        value = json!({ "a": value });
    }
    value
}

#[tokio::test]
async fn a_value_nested_deeper_than_the_limit_is_refused_and_nothing_is_written() {
    let memory = Memory::in_memory();
    let space = Namespace::new(["deep"]).unwrap();
    // At the limit: kept, read back, found.
    memory
        .put(&space, "ok", nested(MAX_VALUE_DEPTH))
        .await
        .unwrap();
    assert_eq!(
        memory.get(&space, "ok").await.unwrap().unwrap().value,
        nested(MAX_VALUE_DEPTH)
    );
    // Past it, by objects or by arrays, or far past it: refused by name.
    let mut arrays = json!(0);
    for _ in 0..MAX_VALUE_DEPTH {
        arrays = json!([arrays]);
    }
    for (key, value) in [
        ("one-more", nested(MAX_VALUE_DEPTH + 1)),
        ("arrays", json!({ "list": arrays })),
        ("far", nested(1_000)),
    ] {
        let err = memory.put(&space, key, value).await.unwrap_err();
        assert!(matches!(err, MemoryError::Value { .. }), "{key}: {err}");
        assert!(err.to_string().contains(&format!("deep/{key}")), "{err}");
        assert!(err.to_string().contains("deeper than 100"), "{err}");
        assert!(memory.get(&space, key).await.unwrap().is_none(), "{key}");
    }
    let all = memory.search(&Search::under(space)).await.unwrap();
    assert_eq!(all.len(), 1);
}

#[tokio::test]
async fn a_search_by_text_that_reads_its_hits_again_drops_those_deleted_elsewhere() {
    // Two memories over one backend: the reader's index still holds what
    // the writer deleted and changed, until it reloads.
    let backend: Arc<dyn harness::memory::MemoryBackend> =
        Arc::new(harness::memory::InMemory::new());
    let config = IndexConfig::new(Arc::new(HashedWords::new(64)), 64).fields(["text"]);
    let writer = Memory::from_arc(backend.clone()).with_index(config.clone());
    let reader = Memory::from_arc(backend).with_index(config);
    let n = ns(&["notes"]);
    for (key, text) in [
        ("bike", "a red bike"),
        ("tea", "green tea"),
        ("trip", "a bike trip"),
    ] {
        writer.put(&n, key, json!({"text": text})).await.unwrap();
    }
    let query = Search::under(n.clone()).text("bike");
    assert_eq!(reader.search(&query).await.unwrap().len(), 3);
    writer.delete(&n, "bike").await.unwrap();
    writer
        .put(&n, "tea", json!({"text": "green tea", "cups": 2}))
        .await
        .unwrap();
    // Read again from the backend: the deleted item is gone, the changed
    // one is as it is now, the scores kept with their items.
    let hits = reader.search(&query.clone().refresh_ttl()).await.unwrap();
    let keys: Vec<&str> = hits.iter().map(|h| h.item.key.as_str()).collect();
    assert!(!keys.contains(&"bike"), "{keys:?}");
    assert_eq!(keys.len(), 2, "{keys:?}");
    let tea = hits.iter().find(|h| h.item.key == "tea").unwrap();
    assert_eq!(tea.item.value["cups"], 2);
    assert!(hits.iter().all(|h| h.score.is_some()));
    assert_eq!(hits[0].item.key, "trip", "the closest first, as before");
    // Reloaded, the index agrees without reading again.
    reader.reload_index().await.unwrap();
    assert_eq!(reader.search(&query).await.unwrap().len(), 2);
}

/// The in-memory backend, but each write pauses a pseudo-random while
/// after it is applied (a store's round trip), so that concurrent writers
/// can overtake one another between the backend and the index.
#[derive(Debug)]
struct Jittery {
    inner: harness::memory::InMemory,
    turn: std::sync::atomic::AtomicU64,
}

#[async_trait]
impl harness::memory::MemoryBackend for Jittery {
    async fn apply(
        &self,
        writes: Vec<harness::memory::Write>,
        now: u64,
    ) -> Result<Vec<u64>, MemoryError> {
        let created = self.inner.apply(writes, now).await?;
        let turn = self
            .turn
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            >> 58;
        if turn.is_multiple_of(2) {
            tokio::time::sleep(Duration::from_micros(turn * 50)).await;
        } else {
            for _ in 0..turn {
                tokio::task::yield_now().await;
            }
        }
        Ok(created)
    }

    async fn get(
        &self,
        namespace: &Namespace,
        key: &str,
        now: u64,
    ) -> Result<Option<harness::memory::Record>, MemoryError> {
        self.inner.get(namespace, key, now).await
    }

    async fn search(
        &self,
        prefix: &Namespace,
        filters: &[Filter],
        offset: usize,
        limit: usize,
        now: u64,
    ) -> Result<Vec<harness::memory::Record>, MemoryError> {
        self.inner.search(prefix, filters, offset, limit, now).await
    }

    async fn namespaces(&self, now: u64) -> Result<Vec<Namespace>, MemoryError> {
        self.inner.namespaces(now).await
    }
}

/// What a search by `text` under `namespace` finds at `key`: its value
/// and score.
async fn found_at(
    memory: &Memory,
    namespace: &Namespace,
    key: &str,
    text: &str,
) -> Option<(Value, f32)> {
    let hits = memory
        .search(&Search::under(namespace.clone()).text(text).limit(1_000))
        .await
        .unwrap();
    hits.into_iter()
        .find(|h| h.item.key == key)
        .map(|h| (h.item.value, h.score.unwrap()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writes_of_one_key_leave_the_index_as_the_backend() {
    let backend = Jittery {
        inner: harness::memory::InMemory::new(),
        turn: std::sync::atomic::AtomicU64::new(1),
    };
    let memory = Memory::new(backend)
        .with_index(IndexConfig::new(Arc::new(HashedWords::new(64)), 64).fields(["text"]));
    let space = ns(&["race"]);
    memory
        .put(&space, "seed", json!({"text": "seed"}))
        .await
        .unwrap();
    // Load the index, so that the writes below update it.
    memory
        .search(&Search::under(space.clone()).text("seed"))
        .await
        .unwrap();
    let (mut stale_deletes, mut stale_puts) = (0, 0);
    for round in 0..150 {
        // A put and a delete race.
        let key = format!("d{round}");
        let text = format!("secret number {round}");
        let put = {
            let (m, space, key, text) = (memory.clone(), space.clone(), key.clone(), text.clone());
            tokio::spawn(async move { m.put(&space, &key, json!({"text": text})).await })
        };
        let delete = {
            let (m, space, key) = (memory.clone(), space.clone(), key.clone());
            tokio::spawn(async move { m.delete(&space, &key).await })
        };
        put.await.unwrap().unwrap();
        delete.await.unwrap().unwrap();
        let stored = memory.get(&space, &key).await.unwrap().map(|i| i.value);
        let found = found_at(&memory, &space, &key, &text).await.map(|(v, _)| v);
        if stored != found {
            stale_deletes += 1;
        }

        // Puts race.
        let key = format!("p{round}");
        let mut tasks = Vec::new();
        for i in 0..4 {
            let (m, space, key) = (memory.clone(), space.clone(), key.clone());
            let text = format!("word{round} other{i}");
            tasks.push(tokio::spawn(async move {
                m.put(&space, &key, json!({"text": text})).await
            }));
        }
        for task in tasks {
            task.await.unwrap().unwrap();
        }
        let stored = memory.get(&space, &key).await.unwrap().unwrap().value;
        let text = stored["text"].as_str().unwrap().to_owned();
        match found_at(&memory, &space, &key, &text).await {
            Some((value, score)) if value == stored && score > 0.99 => {}
            _ => stale_puts += 1,
        }
    }
    assert_eq!(
        (stale_deletes, stale_puts),
        (0, 0),
        "rounds where search disagreed with get: (put/delete, put/put)"
    );
}
