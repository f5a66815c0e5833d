//! Long-term memory at 100 000 items: put throughput, and filtered top-10
//! search by meaning, queries per second and recall@10 against the exact
//! answer. harness's side of `benchmarks/scripts/bench-memory` (LangGraph's
//! `InMemoryStore` is the other, `benchmarks/scripts/memory_langgraph.py`,
//! on the same file of vectors).
//!
//! `memory_search --vectors FILE [--items 100000] [--queries 1000] [--ef 64]
//! [--kind auto|approximate|exact] [--graph-from 10000] [--no-wait]`
//! (`--graph-from`: the size from which `auto` keeps a graph)
//!
//! FILE holds `items + queries` rows of 384 little-endian `f32`: the items'
//! vectors, then the queries'. Item `i` is `{"text": "item i", "cat": i %
//! 10}` in the namespace `bench/u{i % 7}`; the embedder answers "item i" and
//! "query j" with their rows (precomputed: the benchmark measures the store
//! and its index, not a model). Query `j` asks for the 10 items closest to
//! its vector under `bench` with `cat == j % 10` (a tenth of the items).
//!
//! Figures: `memory_put_per_s` (single puts, the index not loaded: what a
//! put costs before anything searches), `memory_first_search_s` (the first
//! search: the index loaded from the backend and the search answered
//! exactly; the graph, when one is wanted, is built in the background),
//! `memory_index_build_s` (from the first search until the graph is ready:
//! the searches that follow use it; with `--no-wait` they start at once and
//! are answered exactly until it is),
//! `memory_put_live_per_s` (single puts of 10 000 more items while the
//! graph is live: each linked in at once), `memory_search_per_s` and
//! `memory_recall_at_10` (the mean, against an exact index of the same
//! items), `memory_exact_search_per_s` (the same queries answered exactly).

use async_trait::async_trait;
use harness::llm::{Embedder, Embeddings, ModelError, Usage};
use harness::memory::{
    Filter, HnswParams, IndexConfig, IndexKind, Memory, Namespace, Search, VectorIndex,
};
use harness_benchmarks::{arg, result};
use serde_json::json;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

const DIMS: usize = 384;

/// Answers "item i" and "query j" with their precomputed rows.
struct Table {
    vectors: Vec<f32>,
    items: usize,
}

impl Table {
    fn row(&self, text: &str) -> Option<&[f32]> {
        let (kind, n) = text.split_once(' ')?;
        let n: usize = n.parse().ok()?;
        let row = match kind {
            "item" => n,
            "query" => self.items + n,
            _ => return None,
        };
        self.vectors.get(row * DIMS..(row + 1) * DIMS)
    }
}

#[async_trait]
impl Embedder for Table {
    async fn embed(&self, texts: &[String]) -> Result<Embeddings, ModelError> {
        let vectors = texts
            .iter()
            .map(|t| {
                self.row(t)
                    .map(<[f32]>::to_vec)
                    .ok_or_else(|| ModelError::malformed(format!("no row for {t:?}")))
            })
            .collect::<Result<_, _>>()?;
        Ok(Embeddings::new(vectors, Usage::default()))
    }
}

fn item_value(i: usize) -> serde_json::Value {
    json!({"text": format!("item {i}"), "cat": i % 10})
}

fn namespace(i: usize) -> Namespace {
    Namespace::new(["bench".to_owned(), format!("u{}", i % 7)]).expect("a valid namespace")
}

fn query(j: usize) -> Search {
    Search::under(Namespace::new(["bench"]).expect("a valid namespace"))
        .filter(Filter::eq("cat", j % 10))
        .text(format!("query {j}"))
        .limit(10)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let path: String = arg(&args, "--vectors", String::new());
    let items: usize = arg(&args, "--items", 100_000);
    let queries: usize = arg(&args, "--queries", 1_000);
    let ef: usize = arg(&args, "--ef", HnswParams::default().ef_search);
    let kind: String = arg(&args, "--kind", "auto".to_owned());
    let extra = items / 10;

    let bytes =
        std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read --vectors {path:?}: {e}"));
    let vectors: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let rows = vectors.len() / DIMS;
    assert!(
        rows >= items + queries,
        "{path} has {rows} rows, the run needs {} (items, then queries)",
        items + queries
    );
    // The items past `items` in the file are not there: the extra puts
    // reuse rows from the start, under other keys.
    let table = Arc::new(Table { vectors, items });
    let params = HnswParams {
        ef_search: ef,
        ..HnswParams::default()
    };
    let kind = match kind.as_str() {
        "auto" => IndexKind::Auto {
            from: arg(&args, "--graph-from", harness::memory::EXACT_UP_TO),
            params,
        },
        "approximate" => IndexKind::Approximate(params),
        "exact" => IndexKind::Exact,
        other => panic!("--kind auto|approximate|exact, not {other}"),
    };
    let config = IndexConfig::new(table.clone(), DIMS)
        .fields(["text"])
        .kind(kind);
    let memory = Memory::in_memory().with_index(config);

    let start = Instant::now();
    for i in 0..items {
        memory
            .put(&namespace(i), &format!("k{i}"), item_value(i))
            .await
            .expect("a put");
    }
    let put_s = start.elapsed().as_secs_f64();
    println!("{items} puts in {put_s:.2} s");
    result("memory_put_per_s", items as f64 / put_s);

    let start = Instant::now();
    memory.search(&query(0)).await.expect("the first search");
    let first_s = start.elapsed().as_secs_f64();
    println!("the first search (the index loaded from {items} items) in {first_s:.2} s");
    result("memory_first_search_s", first_s);
    if !args.iter().any(|a| a == "--no-wait") {
        let status = memory
            .wait_for_graph(std::time::Duration::from_secs(3_600))
            .await;
        let build_s = start.elapsed().as_secs_f64();
        println!("the graph ({status:?}) ready {build_s:.2} s after the first search began");
        result("memory_index_build_s", build_s);
    }

    // The exact answers, from an exact index of the same items.
    let mut exact = VectorIndex::exact(DIMS);
    for i in 0..items {
        let item = memory
            .get(&namespace(i), &format!("k{i}"))
            .await
            .expect("a get")
            .expect("the item is there");
        exact.put(item, table.row(&format!("item {i}")));
    }

    let start = Instant::now();
    let mut found: Vec<Vec<String>> = Vec::with_capacity(queries);
    for j in 0..queries {
        let hits = memory.search(&query(j)).await.expect("a search");
        found.push(hits.into_iter().map(|h| h.item.key).collect());
    }
    let search_s = start.elapsed().as_secs_f64();

    let start = Instant::now();
    let mut recall = 0.0;
    for (j, got) in found.iter().enumerate() {
        let q = table.row(&format!("query {j}")).expect("a query row");
        let truth: HashSet<String> = exact
            .nearest_exact(q, &query(j), 0)
            .into_iter()
            .map(|(item, _)| item.key.clone())
            .collect();
        let hit = got.iter().filter(|k| truth.contains(*k)).count();
        recall += hit as f64 / truth.len().max(1) as f64;
    }
    let exact_s = start.elapsed().as_secs_f64();
    recall /= queries as f64;
    println!(
        "{queries} filtered top-10 searches in {search_s:.2} s; recall@10 {recall:.4}; \
         exact: {exact_s:.2} s"
    );
    result("memory_search_per_s", queries as f64 / search_s);
    result("memory_recall_at_10", recall);
    result("memory_exact_search_per_s", queries as f64 / exact_s);

    let start = Instant::now();
    for i in 0..extra {
        memory
            .put(&namespace(i), &format!("x{i}"), item_value(i))
            .await
            .expect("a put");
    }
    let live_s = start.elapsed().as_secs_f64();
    println!("{extra} more puts, the index live, in {live_s:.2} s");
    result("memory_put_live_per_s", extra as f64 / live_s);
}
