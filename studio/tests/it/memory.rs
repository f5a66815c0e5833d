//! Long-term memory in the studio, over plain HTTP: namespaces, items a page
//! at a time, filters, one item, search by meaning, values sent as JSON
//! text and bounded, the token, and typed errors.

use crate::support::{TempDir, get, request, temp_dir};
use harness::memory::{HashedWords, IndexConfig, Memory, Namespace, PutOptions};
use harness_stores::{ReadOnlyError, SledMemory, SledStore};
use harness_studio::{Serving, Studio};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

pub fn ns(labels: &[&str]) -> Namespace {
    Namespace::new(labels.iter().copied()).unwrap()
}

/// A memory with two users' preferences, notes of an agent (one with a
/// TTL), a label holding a `/`, and 25 numbered facts for paging.
pub async fn fill(memory: &Memory) {
    let prefs = ns(&["users", "ada", "preferences"]);
    memory
        .put(&prefs, "language", json!({"value": "Rust", "weight": 9}))
        .await
        .unwrap();
    memory
        .put(&prefs, "editor", json!({"value": "helix", "weight": 4}))
        .await
        .unwrap();
    memory
        .put(
            &ns(&["users", "bob", "preferences"]),
            "language",
            json!({"value": "OCaml", "weight": 7}),
        )
        .await
        .unwrap();
    memory
        .put_with(
            &ns(&["agents", "planner", "notes"]),
            "deploy",
            json!({"text": "deploys happen on Tuesdays after the review"}),
            PutOptions::default().ttl(Duration::from_secs(3600)),
        )
        .await
        .unwrap();
    memory
        .put(
            &ns(&["agents", "planner", "notes"]),
            "coffee",
            json!({"text": "the team drinks coffee every morning"}),
        )
        .await
        .unwrap();
    memory
        .put(&ns(&["odd", "a/b"]), "k", json!({"slash": true}))
        .await
        .unwrap();
    for i in 0..25 {
        memory
            .put(
                &ns(&["facts"]),
                &format!("fact-{i:02}"),
                json!({"n": i, "even": i % 2 == 0}),
            )
            .await
            .unwrap();
    }
}

/// A read-only studio (on an empty session store) showing `memory`.
pub async fn serve(memory: Memory) -> (Serving, TempDir) {
    let dir = temp_dir("memory-sessions");
    let store = Arc::new(SledStore::open(dir.join("db")).unwrap());
    let serving = Studio::read_only(store)
        .memory(memory)
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    (serving, TempDir(dir))
}

async fn filled() -> (Serving, TempDir) {
    let memory = Memory::in_memory();
    fill(&memory).await;
    serve(memory).await
}

fn labels(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|ns| {
            ns.as_array()
                .unwrap()
                .iter()
                .map(|l| l.as_str().unwrap())
                .collect::<Vec<_>>()
                .join("|")
        })
        .collect()
}

fn keys(page: &Value) -> Vec<String> {
    page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["key"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_namespaces_are_listed_by_prefix_suffix_and_depth_a_page_at_a_time() {
    let (s, _dir) = filled().await;
    let info = get(&s, "/api/info").await.json();
    assert_eq!(info["memory"], json!(true));

    let all = get(&s, "/api/memory/namespaces").await;
    assert_eq!(all.status, 200, "{}", all.body);
    let all = all.json();
    assert_eq!(
        labels(&all["namespaces"]),
        [
            "agents|planner|notes",
            "facts",
            "odd|a/b",
            "users|ada|preferences",
            "users|bob|preferences"
        ]
    );
    assert_eq!(all["more"], json!(false));

    let top = get(&s, "/api/memory/namespaces?max_depth=1").await.json();
    assert_eq!(
        labels(&top["namespaces"]),
        ["agents", "facts", "odd", "users"]
    );
    let users = get(&s, "/api/memory/namespaces?prefix=users&max_depth=2")
        .await
        .json();
    assert_eq!(labels(&users["namespaces"]), ["users|ada", "users|bob"]);
    // A label holding a `/` is percent-encoded inside the namespace.
    let odd = get(&s, "/api/memory/namespaces?prefix=odd/a%252Fb")
        .await
        .json();
    assert_eq!(labels(&odd["namespaces"]), ["odd|a/b"]);
    let suffix = get(&s, "/api/memory/namespaces?suffix=preferences")
        .await
        .json();
    assert_eq!(
        labels(&suffix["namespaces"]),
        ["users|ada|preferences", "users|bob|preferences"]
    );

    // Pages: two, two, then the last one.
    let mut seen = Vec::new();
    for (offset, more) in [(0, true), (2, true), (4, false)] {
        let page = get(
            &s,
            &format!("/api/memory/namespaces?limit=2&offset={offset}"),
        )
        .await
        .json();
        assert_eq!(page["more"], json!(more), "offset {offset}");
        seen.extend(labels(&page["namespaces"]));
    }
    assert_eq!(seen, labels(&all["namespaces"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_items_under_a_namespace_come_a_page_at_a_time_and_filtered() {
    let (s, _dir) = filled().await;
    let ada = get(&s, "/api/memory/items?namespace=users/ada/preferences").await;
    assert_eq!(ada.status, 200, "{}", ada.body);
    let ada = ada.json();
    assert_eq!(keys(&ada), ["editor", "language"]);
    let language = &ada["items"][1];
    assert_eq!(
        language["namespace"],
        json!(["users", "ada", "preferences"])
    );
    assert_eq!(language["value"], json!({"value": "Rust", "weight": 9}));
    assert!(language["updated_at"].as_u64().unwrap() > 0);
    assert!(language.get("expires_at").is_none());

    // A prefix takes every namespace under it.
    let users = get(&s, "/api/memory/items?namespace=users").await.json();
    assert_eq!(keys(&users), ["editor", "language", "language"]);
    // The item with a TTL says when it expires.
    let notes = get(&s, "/api/memory/items?namespace=agents").await.json();
    let deploy = notes["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["key"] == "deploy")
        .unwrap();
    let expires = deploy["expires_at"].as_u64().unwrap();
    let updated = deploy["updated_at"].as_u64().unwrap();
    assert_eq!(expires - updated, 3_600_000);

    // 25 facts, 10 a page: 10, 10, 5.
    let mut seen = Vec::new();
    for (offset, count, more) in [(0, 10, true), (10, 10, true), (20, 5, false)] {
        let page = get(
            &s,
            &format!("/api/memory/items?namespace=facts&limit=10&offset={offset}"),
        )
        .await
        .json();
        assert_eq!(page["items"].as_array().unwrap().len(), count);
        assert_eq!(page["more"], json!(more));
        assert_eq!(page["offset"], json!(offset));
        seen.extend(keys(&page));
    }
    let expected: Vec<String> = (0..25).map(|i| format!("fact-{i:02}")).collect();
    assert_eq!(seen, expected);
    // The default page is 20.
    let first = get(&s, "/api/memory/items?namespace=facts").await.json();
    assert_eq!(first["items"].as_array().unwrap().len(), 20);
    assert_eq!(first["limit"], json!(20));

    // Filters: a comparison, a boolean, two at once, a string.
    let big = get(&s, "/api/memory/items?namespace=facts&filter=n:gte:22")
        .await
        .json();
    assert_eq!(keys(&big), ["fact-22", "fact-23", "fact-24"]);
    let even_big = get(
        &s,
        "/api/memory/items?namespace=facts&filter=n:gt:19&filter=even:eq:true",
    )
    .await
    .json();
    assert_eq!(keys(&even_big), ["fact-20", "fact-22", "fact-24"]);
    let rust = get(&s, "/api/memory/items?namespace=users&filter=value:eq:Rust")
        .await
        .json();
    assert_eq!(keys(&rust), ["language"]);
    assert_eq!(rust["items"][0]["namespace"][1], "ada");

    // One item; one that is not there.
    let one = get(
        &s,
        "/api/memory/item?namespace=users/bob/preferences&key=language",
    )
    .await;
    assert_eq!(one.status, 200, "{}", one.body);
    assert_eq!(one.json()["value"]["value"], "OCaml");
    let slash = get(&s, "/api/memory/item?namespace=odd/a%252Fb&key=k").await;
    assert_eq!(slash.json()["value"], json!({"slash": true}));
    let missing = get(
        &s,
        "/api/memory/item?namespace=users/bob/preferences&key=nope",
    )
    .await;
    assert_eq!(missing.status, 404);
    assert!(
        missing.error().contains("no item \"nope\""),
        "{}",
        missing.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_holding_markup_comes_back_as_json_text_and_a_large_one_is_cut_and_marked() {
    let memory = Memory::in_memory();
    let markup = "<img src=x onerror=\"alert(1)\"><script>alert(2)</script>";
    let notes = ns(&["notes"]);
    memory
        .put(&notes, "<b>key</b>", json!({"html": markup}))
        .await
        .unwrap();
    let long = "word ".repeat(20_000);
    memory
        .put(&notes, "long", json!({"text": long}))
        .await
        .unwrap();
    let (s, _dir) = serve(memory).await;

    let r = get(&s, "/api/memory/items?namespace=notes").await;
    assert_eq!(r.status, 200);
    assert!(
        r.header("content-type")
            .is_some_and(|t| t.starts_with("application/json")),
        "{:?}",
        r.headers
    );
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    let page = r.json();
    let html = &page["items"][0];
    assert_eq!(html["key"], "<b>key</b>");
    // The markup is a JSON string, byte for byte.
    assert_eq!(html["value"]["html"], markup);
    assert!(r.body.contains(&serde_json::to_string(markup).unwrap()));

    // The long value: cut to the list's bound, marked, its size given.
    let cut = &page["items"][1];
    assert_eq!(cut["key"], "long");
    assert_eq!(cut["truncated"], json!(true));
    assert!(cut.get("value").is_none());
    let whole = json!({"text": long}).to_string().len();
    assert_eq!(cut["value_bytes"], json!(whole));
    let preview = cut["preview"].as_str().unwrap();
    assert_eq!(preview.len(), 16 * 1024);
    assert!(preview.starts_with("{\n  \"text\": \"word word"));
    assert!(r.body.len() < 20 * 1024, "{} bytes sent", r.body.len());
    // A smaller bound when asked; the item alone comes whole.
    let small = get(&s, "/api/memory/items?namespace=notes&max_bytes=1000")
        .await
        .json();
    assert_eq!(small["items"][1]["preview"].as_str().unwrap().len(), 1000);
    assert_eq!(small["items"][0]["value"]["html"], markup);
    let one = get(&s, "/api/memory/item?namespace=notes&key=long")
        .await
        .json();
    assert_eq!(one["value"]["text"], long.as_str());
    assert!(one.get("truncated").is_none());
    // A bound beyond the most a list sends is refused.
    let r = get(&s, "/api/memory/items?namespace=notes&max_bytes=10000000").await;
    assert_eq!(r.status, 400);
    assert!(r.error().contains("max_bytes"), "{}", r.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_calls_need_the_token() {
    let (s, _dir) = filled().await;
    let paths = [
        "/api/memory/namespaces",
        "/api/memory/items?namespace=users",
        "/api/memory/item?namespace=facts&key=fact-01",
        "/api/memory/search?q=coffee",
    ];
    for path in paths {
        for headers in [
            vec![],
            vec![("x-studio-token", "wrong")],
            vec![("x-studio-token", "")],
        ] {
            let r = request(&s, "GET", path, &headers, None).await;
            assert_eq!(r.status, 401, "{path} {headers:?}");
            assert!(r.error().contains("token"), "{}", r.body);
            assert!(!r.body.contains("fact"), "{path}: {}", r.body);
        }
        let q = if path.contains('?') { '&' } else { '?' };
        let wrong = request(&s, "GET", &format!("{path}{q}token=nope"), &[], None).await;
        assert_eq!(wrong.status, 401, "{path}");
    }
    // Reads take the token in the URL, as every other read.
    let by_url = request(
        &s,
        "GET",
        &format!("/api/memory/items?namespace=facts&token={}", s.token()),
        &[],
        None,
    )
    .await;
    assert_eq!(by_url.status, 200, "{}", by_url.body);
    assert_eq!(by_url.json()["items"].as_array().unwrap().len(), 20);
    // And there is no write.
    for method in ["POST", "PUT", "DELETE"] {
        let r = request(
            &s,
            method,
            "/api/memory/item?namespace=facts&key=fact-01",
            &[("x-studio-token", s.token())],
            Some("{}"),
        )
        .await;
        assert_eq!(r.status, 405, "{method}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_by_meaning_needs_an_index_and_ranks_with_scores_when_there_is_one() {
    // Without an index: a typed `query` error, said plainly.
    let (s, _dir) = filled().await;
    let r = get(&s, "/api/memory/search?namespace=agents&q=coffee").await;
    assert_eq!(r.status, 400, "{}", r.body);
    let body = r.json();
    assert_eq!(body["kind"], "query");
    let error = body["error"].as_str().unwrap();
    assert!(error.contains("needs an index"), "{error}");
    assert!(error.contains("list the items"), "{error}");

    // With one.
    let memory = Memory::in_memory()
        .with_index(IndexConfig::new(Arc::new(HashedWords::new(64)), 64).exact());
    fill(&memory).await;
    let (s, _dir) = serve(memory).await;
    let r = get(
        &s,
        "/api/memory/search?namespace=agents&q=when%20do%20deploys%20happen%3F",
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let hits = r.json();
    assert_eq!(keys(&hits), ["deploy", "coffee"]);
    let (first, second) = (
        hits["items"][0]["score"].as_f64().unwrap(),
        hits["items"][1]["score"].as_f64().unwrap(),
    );
    assert!(first > second, "{first} > {second}");
    let coffee = get(&s, "/api/memory/search?q=morning+coffee&limit=1")
        .await
        .json();
    assert_eq!(keys(&coffee), ["coffee"]);
    assert_eq!(coffee["more"], json!(true));
    // Filtered: only the items the filter admits are ranked.
    let filtered = get(
        &s,
        "/api/memory/search?namespace=users&q=language&filter=weight:lt:8",
    )
    .await
    .json();
    assert!(
        filtered["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["value"]["weight"].as_i64().unwrap() < 8),
        "{filtered}"
    );
    // No text: refused.
    for q in ["", "q=", "q=%20%20"] {
        let r = get(&s, &format!("/api/memory/search?{q}")).await;
        assert_eq!(r.status, 400, "{q}");
        assert!(r.error().contains("`q`"), "{}", r.body);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_memory_requests_are_typed_errors_that_say_what_is_wrong() {
    let (s, _dir) = filled().await;
    for (path, kind, says) in [
        (
            "/api/memory/items?namespace=users//ada",
            Some("namespace"),
            "label 1 is empty",
        ),
        (
            "/api/memory/items?namespace=/users",
            Some("namespace"),
            "label 0 is empty",
        ),
        (
            "/api/memory/items?namespace=a/%25zz",
            None,
            "not followed by two hex digits",
        ),
        (
            "/api/memory/items?namespace=%01",
            Some("namespace"),
            "control character",
        ),
        ("/api/memory/items?filter=weight", None, "FIELD:OP:VALUE"),
        (
            "/api/memory/items?filter=weight:like:5",
            None,
            "`like` is not a comparison",
        ),
        (
            "/api/memory/items?filter=a..b:eq:1",
            Some("filter"),
            "empty segment",
        ),
        (
            "/api/memory/items?filter=tags:gt:%5B1%5D",
            Some("filter"),
            "numbers or strings",
        ),
        ("/api/memory/items?limit=0", None, "at least one"),
        ("/api/memory/items?limit=101", None, "at most 100"),
        ("/api/memory/items?offset=-1", None, "whole number"),
        (
            "/api/memory/items?namespace=a&namespace=b",
            None,
            "more than once",
        ),
        (
            "/api/memory/items?nmespace=a",
            None,
            "unknown parameter `nmespace`",
        ),
        (
            "/api/memory/namespaces?max_depth=0",
            None,
            "at least one label",
        ),
        ("/api/memory/namespaces?max_depth=17", None, "at most 16"),
        ("/api/memory/namespaces?limit=5000", None, "at most 1000"),
        (
            "/api/memory/item?key=k",
            None,
            "an item lives in a namespace",
        ),
        ("/api/memory/item?namespace=facts", None, "`key` is missing"),
        (
            "/api/memory/item?namespace=facts&key=",
            Some("key"),
            "it is empty",
        ),
    ] {
        let r = get(&s, path).await;
        assert_eq!(r.status, 400, "{path}: {}", r.body);
        let body = r.json();
        assert!(
            body["error"].as_str().unwrap().contains(says),
            "{path}: {}",
            r.body
        );
        assert_eq!(body.get("kind").and_then(Value::as_str), kind, "{path}");
    }

    // A studio without memory says how to give it one.
    let dir = temp_dir("no-memory");
    let bare = Studio::read_only(Arc::new(SledStore::open(dir.join("db")).unwrap()))
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let _dir = TempDir(dir);
    assert_eq!(get(&bare, "/api/info").await.json()["memory"], json!(false));
    for path in [
        "/api/memory/namespaces",
        "/api/memory/items",
        "/api/memory/item?namespace=a&key=b",
        "/api/memory/search?q=x",
    ] {
        let r = get(&bare, path).await;
        assert_eq!(r.status, 404, "{path}");
        assert!(r.error().contains("--memory"), "{}", r.body);
    }
}

/// Every file under `dir` with its bytes.
fn tree(dir: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(tree(&path));
        } else {
            out.push((path.clone(), std::fs::read(&path).unwrap()));
        }
    }
    out.sort();
    out
}

/// What `harness studio --memory PATH` does: a sled memory read from a
/// private copy (`SledStore::open_read_only`, then the memory's tree in
/// that copy), shown without changing a byte of the database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sled_memory_is_shown_from_a_read_only_copy_without_changing_it() {
    let dir = temp_dir("sled-memory");
    let _guard = TempDir(dir.clone());
    let path = dir.join("memory");
    {
        let memory = Memory::new(SledMemory::open(&path).unwrap());
        fill(&memory).await;
    }
    let before = tree(&path);
    // sled's background threads let go of the database's lock a moment
    // after the last handle is dropped.
    let mut opened = SledStore::open_read_only(&path);
    for _ in 0..200 {
        if !matches!(opened, Err(ReadOnlyError::InUse { .. })) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
        opened = SledStore::open_read_only(&path);
    }
    let copy = opened.unwrap();
    let memory = Memory::new(SledMemory::in_db(copy.db()).unwrap());
    let (s, _sessions) = serve(memory).await;
    let all = get(&s, "/api/memory/namespaces").await.json();
    assert_eq!(all["namespaces"].as_array().unwrap().len(), 5, "{all}");
    let ada = get(&s, "/api/memory/items?namespace=users/ada")
        .await
        .json();
    assert_eq!(keys(&ada), ["editor", "language"]);
    let fact = get(&s, "/api/memory/item?namespace=facts&key=fact-07")
        .await
        .json();
    assert_eq!(fact["value"], json!({"n": 7, "even": false}));
    s.shutdown().await.unwrap();
    drop(copy);
    assert_eq!(
        tree(&path),
        before,
        "showing the memory changed its database"
    );
}
