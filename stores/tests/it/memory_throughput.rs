//! What each memory backend costs, measured (ignored: run by hand, in
//! release, with the servers up):
//!
//! ```text
//! eval "$(scripts/services)"
//! cargo test --release -p harness-stores --features postgres,redis --test it \
//!     memory_throughput -- --ignored --nocapture
//! ```
//!
//! For 10 000 items of about 200 bytes with a 384-number vector: puts one
//! per batch and 100 per batch, then a filtered search of the first 10
//! under a prefix, a search skipping to the middle, and a get.

use harness::memory::{Filter, InMemory, MemoryBackend, Write};
use harness_stores::memory_conformance::{T0, ns, record};
use serde_json::json;
use std::time::Instant;

const ITEMS: usize = 10_000;

fn writes(round: usize) -> Vec<Write> {
    (0..ITEMS)
        .map(|i| {
            let n = ns(&["users", &format!("u{}", i % 20), "notes"]);
            let mut r = record(
                &n,
                &format!("note-{round}-{i:05}"),
                json!({"text": format!("note {i} about something the user said"), "kind": if i % 10 == 0 { "fact" } else { "note" }, "score": i % 100}),
                T0,
            );
            r.vector = Some((0..384).map(|d| ((i * 31 + d) % 97) as f32 / 97.0).collect());
            Write::Put(r)
        })
        .collect()
}

async fn measure(name: &str, backend: &dyn MemoryBackend) {
    let one = writes(0);
    let start = Instant::now();
    for w in one {
        backend.apply(vec![w], T0).await.unwrap();
    }
    let single = ITEMS as f64 / start.elapsed().as_secs_f64();
    let start = Instant::now();
    for chunk in writes(1).chunks(100) {
        backend.apply(chunk.to_vec(), T0).await.unwrap();
    }
    let batched = ITEMS as f64 / start.elapsed().as_secs_f64();
    let prefix = ns(&["users", "u7"]);
    let filters = [Filter::eq("kind", "note"), Filter::gte("score", 50)];
    let queries = 200;
    let start = Instant::now();
    for _ in 0..queries {
        let got = backend.search(&prefix, &filters, 0, 10, T0).await.unwrap();
        assert_eq!(got.len(), 10);
    }
    let search = start.elapsed().as_secs_f64() * 1e3 / f64::from(queries);
    let start = Instant::now();
    for _ in 0..queries {
        let got = backend
            .search(&ns(&["users"]), &[], 5_000, 10, T0)
            .await
            .unwrap();
        assert_eq!(got.len(), 10);
    }
    let deep = start.elapsed().as_secs_f64() * 1e3 / f64::from(queries);
    let start = Instant::now();
    for i in 0..queries {
        let n = ns(&["users", &format!("u{}", i % 20), "notes"]);
        let key = format!("note-0-{:05}", (i * 20 + i % 20) as usize % ITEMS);
        let _ = backend.get(&n, &key, T0).await.unwrap();
    }
    let get = start.elapsed().as_secs_f64() * 1e3 / f64::from(queries);
    println!(
        "{name:>9}: put {single:>8.0}/s one per batch, {batched:>8.0}/s 100 per batch; \
         filtered top-10 search {search:.2} ms; offset 5000 {deep:.2} ms; get {get:.3} ms"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run by hand in release"]
async fn memory_throughput() {
    measure("in-memory", &InMemory::new()).await;
    #[cfg(feature = "sled")]
    {
        let dir = tempfile::tempdir().unwrap();
        let flushed = harness_stores::SledMemory::open(dir.path().join("a")).unwrap();
        measure("sled", &flushed).await;
        let unflushed = harness_stores::SledMemory::open(dir.path().join("b"))
            .unwrap()
            .flush_each_write(false);
        measure("sled (no flush)", &unflushed).await;
    }
    #[cfg(feature = "postgres")]
    if let Ok(url) = std::env::var("HARNESS_TEST_POSTGRES_URL") {
        let schema = format!("t_bench_{}", std::process::id());
        let options = harness_stores::PostgresMemoryOptions::default().schema(&schema);
        let memory = harness_stores::PostgresMemory::connect_with(&url, options)
            .await
            .unwrap();
        measure("postgres", &memory).await;
        let client = memory.pool().get().await.unwrap();
        client
            .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
            .await
            .unwrap();
    }
    #[cfg(feature = "redis")]
    if let Ok(url) = std::env::var("HARNESS_TEST_REDIS_URL") {
        let prefix = format!("t_bench_{}", std::process::id());
        let memory = harness_stores::RedisMemory::connect(&url, &prefix)
            .await
            .unwrap();
        measure("redis", &memory).await;
        let _: () = redis::cmd("DEL")
            .arg(&memory.keys()[..])
            .query_async(&mut memory.connection())
            .await
            .unwrap();
    }
}
