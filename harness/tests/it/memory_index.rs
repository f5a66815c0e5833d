//! The vector index behind search by meaning: the HNSW graph's recall
//! against exact search, its updates and deletions, filters during the
//! walk, the fallback to exact search for selective filters, the switch
//! from exact to approximate by size, and `Auto`'s choice of route by
//! measured cost.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use harness::memory::{
    BuildHook, CATCH_UP_INLINE, EXPLORE_EVERY, Filter, GraphBuildError, GraphStatus, HashedWords,
    HnswParams, IndexConfig, IndexKind, Item, Memory, Namespace, Route, Search, SearchCosts,
    VectorIndex, normalized,
};
use serde_json::json;
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// How long a test waits for a graph build: far longer than any takes (a
/// wait ends as soon as the build does).
const WAIT: Duration = Duration::from_secs(300);

/// Deterministic numbers (splitmix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn uniform(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// A standard normal number (Box-Muller).
    fn normal(&mut self) -> f32 {
        let (u, v) = (self.uniform(), self.uniform());
        ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
    }
}

/// `n` unit vectors of `dims` numbers around `clusters` random centres
/// (topics), each `spread` away from its centre on average: like sentence
/// embeddings, whose texts fall into subjects, unlike uniform noise.
fn clustered(n: usize, dims: usize, clusters: usize, spread: f32, seed: u64) -> Vec<Vec<f32>> {
    let mut rng = Rng(seed);
    let centres: Vec<Vec<f32>> = (0..clusters)
        .map(|_| normalized((0..dims).map(|_| rng.normal()).collect()).unwrap())
        .collect();
    let noise = spread / (dims as f32).sqrt();
    (0..n)
        .map(|_| {
            let c = &centres[(rng.next() % clusters as u64) as usize];
            normalized(c.iter().map(|x| x + noise * rng.normal()).collect()).unwrap()
        })
        .collect()
}

fn uniform(n: usize, dims: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut rng = Rng(seed);
    (0..n)
        .map(|_| normalized((0..dims).map(|_| rng.normal()).collect()).unwrap())
        .collect()
}

fn item(i: usize) -> Item {
    Item {
        namespace: Namespace::new(["docs".to_owned(), format!("u{}", i % 3)]).unwrap(),
        key: format!("k{i}"),
        value: json!({"n": i, "cat": i % 10, "rare": i.is_multiple_of(100)}),
        created_at: 0,
        updated_at: 0,
        expires_at: None,
    }
}

fn everything() -> Search {
    Search::under(Namespace::root()).limit(10)
}

fn keys(hits: &[(Arc<Item>, f32)]) -> Vec<String> {
    hits.iter().map(|(i, _)| i.key.clone()).collect()
}

/// The mean fraction of the exact top 10 that the index's top 10 holds,
/// over `queries`, for `search`; and how many went through the graph.
fn recall(index: &VectorIndex, queries: &[Vec<f32>], search: &Search) -> (f64, usize) {
    let mut total = 0.0;
    let mut graph = 0;
    for q in queries {
        let (got, route) = index.nearest_routed(q, search, 0);
        graph += usize::from(route == Route::Graph);
        let truth: HashSet<String> = keys(&index.nearest_exact(q, search, 0))
            .into_iter()
            .collect();
        let hit = keys(&got).iter().filter(|k| truth.contains(*k)).count();
        total += hit as f64 / truth.len().max(1) as f64;
    }
    (total / queries.len() as f64, graph)
}

fn approximate(vectors: &[Vec<f32>], params: HnswParams) -> VectorIndex {
    let mut index = VectorIndex::new(vectors[0].len(), IndexKind::Approximate(params));
    for (i, v) in vectors.iter().enumerate() {
        index.put(item(i), Some(v));
    }
    index
}

/// How many vectors the recall tests index: 20 000 in a release build
/// (`cargo test --release`), a fifth of that in a debug build, where the
/// graph is built by unoptimised code (the whole suite runs in debug).
const RECALL_N: usize = if cfg!(debug_assertions) {
    4_000
} else {
    20_000
};

/// Recall@10 of the graph against exact search, [`RECALL_N`] vectors of
/// 384 numbers (the size of all-MiniLM-L6-v2's), on clustered vectors
/// (like text embeddings) without and with a filter admitting a tenth of
/// them. The figures are printed (`--nocapture`).
#[test]
fn the_graph_finds_at_least_95_percent_of_the_exact_top_10() {
    let data = clustered(RECALL_N + 200, 384, RECALL_N / 100, 1.5, 34);
    let (vectors, queries) = data.split_at(RECALL_N);
    let index = approximate(vectors, HnswParams::default());
    assert!(index.is_approximate());

    let (plain, through) = recall(&index, queries, &everything());
    let tenth = everything().filter(Filter::eq("cat", 3));
    let (filtered, through_filtered) = recall(&index, queries, &tenth);
    println!(
        "recall@10 over {RECALL_N} clustered vectors of 384: {plain:.4} unfiltered \
         ({through}/200 through the graph), {filtered:.4} with a filter admitting 10% \
         ({through_filtered}/200 through the graph)"
    );
    assert_eq!(
        through,
        queries.len(),
        "every unfiltered search walks the graph"
    );
    assert_eq!(
        through_filtered,
        queries.len(),
        "a 10% filter still walks the graph"
    );
    assert!(plain >= 0.95, "recall@10 {plain}");
    assert!(filtered >= 0.95, "filtered recall@10 {filtered}");
}

/// A page at any offset, through the graph and exactly: the offset a
/// caller asks for sizes nothing (a server passes a client's on), an
/// offset past every item is an empty page, and the last page holds what
/// is left.
#[test]
fn a_page_at_any_offset_is_what_is_left_and_sizes_nothing() {
    let data = uniform(300, 16, 91);
    let index = approximate(&data, HnswParams::default());
    let query = &data[7];
    let full = keys(&index.nearest_exact(query, &everything().limit(300), 0));
    assert_eq!(full.len(), 300);
    for offset in [
        299,
        300,
        301,
        1 << 40,
        100_000_000_000_000,
        usize::MAX / 2,
        usize::MAX - 1,
        usize::MAX,
    ] {
        for limit in [1, 10, 1000, usize::MAX] {
            let search = everything().offset(offset).limit(limit);
            let want: Vec<String> = full.iter().skip(offset).take(limit).cloned().collect();
            assert_eq!(
                keys(&index.nearest_exact(query, &search, 0)),
                want,
                "exact, offset {offset}, limit {limit}"
            );
            let (got, _) = index.nearest_routed(query, &search, 0);
            assert_eq!(keys(&got), want, "routed, offset {offset}, limit {limit}");
        }
    }
    // A page inside the index, through the graph (or its exact fallback).
    let (got, _) = index.nearest_routed(query, &everything().offset(290).limit(50), 0);
    assert_eq!(keys(&got), full[290..].to_vec());
}

/// Uniform random vectors have no structure at all: the hardest case for
/// a graph. A larger `ef_search` buys recall there; the figures are
/// printed, and the larger setting must reach 0.95.
#[test]
fn on_uniform_noise_a_larger_ef_search_buys_recall() {
    let n = RECALL_N / 4;
    let data = uniform(n + 100, 384, 7);
    let (vectors, queries) = data.split_at(n);
    let mut index = approximate(vectors, HnswParams::default());
    let (default_recall, _) = recall(&index, queries, &everything());
    index = approximate(
        vectors,
        HnswParams {
            ef_search: 512,
            ..HnswParams::default()
        },
    );
    let (wide_recall, _) = recall(&index, queries, &everything());
    println!(
        "recall@10 over {n} uniform random vectors of 384: {default_recall:.4} at ef_search 64, \
         {wide_recall:.4} at 512"
    );
    assert!(wide_recall >= default_recall);
    assert!(
        wide_recall >= 0.95,
        "recall@10 {wide_recall} at ef_search 512"
    );
}

/// Replaced items are found by their new vectors only, deleted ones never;
/// once tombstones outnumber live items the index is compacted and still
/// answers exactly like exact search on what is left.
#[test]
fn replaced_and_deleted_items_follow_their_writes_through_compaction() {
    let first = clustered(3_000, 64, 30, 0.9, 1);
    let second = clustered(3_000, 64, 30, 0.9, 2);
    let mut index = approximate(&first, HnswParams::default());
    // Replace the first 1 000 with new vectors; delete the next 1 000.
    for (i, v) in second.iter().enumerate().take(1_000) {
        index.put(item(i), Some(v));
    }
    for i in 1_000..2_000 {
        let it = item(i);
        index.remove(it.namespace.labels(), &it.key);
    }
    assert_eq!(index.len(), 2_000);
    for (i, v) in second.iter().enumerate().take(200) {
        let top = index.nearest(v, &everything().limit(1), 0);
        assert_eq!(
            keys(&top),
            [format!("k{i}")],
            "a replaced item by its new vector"
        );
    }
    for v in first.iter().skip(1_000).take(1_000) {
        let found = keys(&index.nearest(v, &everything(), 0));
        assert!(
            found.iter().all(|k| {
                let n: usize = k[1..].parse().unwrap();
                !(1_000..2_000).contains(&n)
            }),
            "a deleted item came back: {found:?}"
        );
    }
    // 1 000 more deletions: 2 000 tombstones against 1 000 live items, so
    // the index compacts (and rebuilds the graph).
    for i in 2_000..3_000 {
        let it = item(i);
        index.remove(it.namespace.labels(), &it.key);
    }
    assert_eq!(index.len(), 1_000);
    assert_eq!(
        index.wait_for_graph(WAIT),
        GraphStatus::Ready,
        "the graph is rebuilt, not dropped"
    );
    let (r, _) = recall(&index, &second[1_000..1_100], &everything());
    assert!(r >= 0.95, "recall@10 after compaction {r}");
    for (i, v) in second.iter().enumerate().take(100) {
        assert_eq!(
            keys(&index.nearest(v, &everything().limit(1), 0)),
            [format!("k{i}")]
        );
    }
}

/// A filter admitting 1% of the items is answered exactly (a graph walk
/// would pass through 99 refused items for each admitted one), so its
/// answers equal exact search's; a filter admitting half walks the graph.
/// Items that expired are never returned, whichever way.
#[test]
fn a_selective_filter_is_answered_exactly_and_expired_items_never() {
    let data = clustered(4_050, 64, 40, 0.9, 3);
    let (vectors, queries) = data.split_at(4_000);
    let mut index = approximate(vectors, HnswParams::default());
    let rare = everything().filter(Filter::eq("rare", true));
    let half = everything().filter(Filter::lt("cat", 5));
    for q in queries {
        let (got, route) = index.nearest_routed(q, &rare, 0);
        assert_eq!(route, Route::Exact);
        assert_eq!(keys(&got), keys(&index.nearest_exact(q, &rare, 0)));
        assert!(got.iter().all(|(i, _)| i.value["rare"] == true));
        let (got, route) = index.nearest_routed(q, &half, 0);
        assert_eq!(route, Route::Graph);
        assert!(
            got.iter()
                .all(|(i, _)| i.value["cat"].as_u64().unwrap() < 5)
        );
    }
    // Prefixes filter too: only u1's items.
    let u1 = Search::under(Namespace::new(["docs", "u1"]).unwrap()).limit(10);
    let got = index.nearest(&queries[0], &u1, 0);
    assert_eq!(got.len(), 10);
    assert!(got.iter().all(|(i, _)| i.namespace.labels()[1] == "u1"));

    // The nearest item of a query expires: it is gone from the answers at
    // and after its expiry, there before.
    let q = &queries[1];
    let (best, _) = index.nearest(q, &everything().limit(1), 0).remove(0);
    let n = best.value["n"].as_u64().unwrap() as usize;
    let mut expiring = (*best).clone();
    expiring.expires_at = Some(1_000);
    index.put(expiring, Some(&vectors[n]));
    assert_eq!(
        keys(&index.nearest(q, &everything().limit(1), 999)),
        std::slice::from_ref(&best.key)
    );
    let after = keys(&index.nearest(q, &everything(), 1_000));
    assert!(
        !after.contains(&best.key),
        "an expired item was returned: {after:?}"
    );
}

/// `IndexKind::Auto` searches exactly below its threshold and builds the
/// graph when the index reaches it; `Exact` never builds one.
#[test]
fn auto_builds_the_graph_at_its_threshold_and_exact_never() {
    let vectors = clustered(1_200, 32, 10, 0.9, 4);
    let mut auto = VectorIndex::new(
        32,
        IndexKind::Auto {
            from: 1_000,
            params: HnswParams::default(),
        },
    );
    let mut exact = VectorIndex::exact(32);
    for (i, v) in vectors.iter().enumerate() {
        if i < 1_000 {
            assert_eq!(auto.graph_status(), GraphStatus::Off, "after {i} items");
        } else {
            assert_ne!(auto.graph_status(), GraphStatus::Off, "after {i} items");
        }
        auto.put(item(i), Some(v));
        exact.put(item(i), Some(v));
    }
    assert_eq!(auto.wait_for_graph(WAIT), GraphStatus::Ready);
    assert!(auto.is_approximate());
    assert_eq!(exact.graph_status(), GraphStatus::Off);
    assert!(!exact.is_approximate());
    let (r, _) = recall(&auto, &vectors[..50], &everything());
    assert!(r >= 0.95, "recall@10 {r}");
    assert_eq!(
        exact.nearest_routed(&vectors[0], &everything(), 0).1,
        Route::Exact
    );
}

/// Once `Auto` has its graph, each search takes the route its measured
/// costs say is cheaper: exact first (not measured yet), the graph next,
/// then the cheaper by [`SearchCosts::cheaper`], except one search in
/// [`EXPLORE_EVERY`], which takes the other route so that both stay
/// measured. Both costs are recorded.
#[test]
fn auto_routes_each_search_by_the_costs_it_measured() {
    let vectors = clustered(1_200, 32, 10, 0.9, 5);
    let mut auto = VectorIndex::new(
        32,
        IndexKind::Auto {
            from: 1_000,
            params: HnswParams::default(),
        },
    );
    for (i, v) in vectors.iter().enumerate() {
        auto.put(item(i), Some(v));
    }
    assert_eq!(auto.wait_for_graph(WAIT), GraphStatus::Ready);
    assert_eq!(auto.search_costs(), SearchCosts::default());
    let tenth = everything().filter(Filter::eq("cat", 3));
    let searches = usize::try_from(EXPLORE_EVERY).unwrap() + 20;
    let mut routes = Vec::new();
    for n in 0..searches {
        let search = if n % 2 == 0 {
            everything()
        } else {
            tenth.clone()
        };
        let fraction = auto.admitted_fraction(&search, 0);
        let before = auto.search_costs();
        let (got, route) = auto.nearest_routed(&vectors[n % 1_200], &search, 0);
        assert_eq!(got.len(), 10);
        let chosen = before.cheaper(auto.len(), fraction);
        let expected = match chosen {
            None if before.exact_per_item.is_none() => Route::Exact,
            None => Route::Graph,
            Some(_) if n as u64 % EXPLORE_EVERY == EXPLORE_EVERY - 1 => {
                if chosen == Some(Route::Exact) {
                    Route::Graph
                } else {
                    Route::Exact
                }
            }
            Some(route) => route,
        };
        assert_eq!(route, expected, "search {n}, costs before it {before:?}");
        routes.push(route);
    }
    assert_eq!(routes[..2], [Route::Exact, Route::Graph]);
    let costs = auto.search_costs();
    assert!(
        costs.exact_per_item.is_some_and(|c| c > 0.0)
            && costs.graph_unfiltered.is_some_and(|c| c > 0.0),
        "{costs:?}"
    );
}

/// The choice between the routes: the graph's cost grows as the filter
/// narrows, exact search's does not.
#[test]
fn a_narrower_filter_tips_the_choice_to_exact_search() {
    let costs = SearchCosts {
        exact_per_item: Some(40.0),
        graph_unfiltered: Some(200_000.0),
    };
    // 100 000 items: exact 4 ms; the graph 0.2 ms unfiltered, 2 ms at a
    // tenth, 10 ms at a fiftieth.
    assert_eq!(costs.cheaper(100_000, 1.0), Some(Route::Graph));
    assert_eq!(costs.cheaper(100_000, 0.1), Some(Route::Graph));
    assert_eq!(costs.cheaper(100_000, 0.02), Some(Route::Exact));
    // Fewer items: exact wins sooner.
    assert_eq!(costs.cheaper(4_000, 1.0), Some(Route::Exact));
    let half = SearchCosts {
        graph_unfiltered: None,
        ..costs
    };
    assert_eq!(half.cheaper(100_000, 1.0), None);
}

/// `Memory` with an approximate index: searches by text find what exact
/// search finds on these items, within filters, and follow deletes.
#[tokio::test]
async fn memory_searches_through_the_approximate_index() {
    let config = IndexConfig::new(Arc::new(HashedWords::new(64)), 64)
        .fields(["text"])
        .approximate(HnswParams::default());
    let memory = Memory::in_memory().with_index(config);
    let ns = Namespace::new(["notes"]).unwrap();
    let words = [
        "amber", "basalt", "cobalt", "dune", "ember", "fjord", "garnet", "heron",
    ];
    for i in 0..300 {
        let text = format!(
            "{} {} {}",
            words[i % 8],
            words[(i / 8) % 8],
            words[(i / 64) % 8]
        );
        memory
            .put(&ns, &format!("n{i}"), json!({"text": text, "cat": i % 3}))
            .await
            .unwrap();
    }
    let hits = memory
        .search(
            &Search::under(ns.clone())
                .text("cobalt cobalt cobalt")
                .limit(5),
        )
        .await
        .unwrap();
    assert_eq!(hits.len(), 5);
    let top = &hits[0].item.value["text"];
    assert_eq!(top, "cobalt cobalt cobalt", "the exact text ranks first");
    let filtered = memory
        .search(
            &Search::under(ns.clone())
                .text("cobalt cobalt cobalt")
                .filter(Filter::eq("cat", 1))
                .limit(5),
        )
        .await
        .unwrap();
    assert_eq!(filtered.len(), 5);
    assert!(filtered.iter().all(|h| h.item.value["cat"] == 1));
    let key = hits[0].item.key.clone();
    memory.delete(&ns, &key).await.unwrap();
    let again = memory
        .search(&Search::under(ns).text("cobalt cobalt cobalt").limit(5))
        .await
        .unwrap();
    assert!(
        again.iter().all(|h| h.item.key != key),
        "a deleted item was found"
    );
}

/// A [`BuildHook`] that holds the first build round until it is opened and
/// counts the rounds.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    opened: Condvar,
    rounds: AtomicUsize,
}

impl Gate {
    fn hook(self: &Arc<Self>) -> BuildHook {
        let gate = Arc::clone(self);
        Arc::new(move |_nodes| {
            if gate.rounds.fetch_add(1, Ordering::SeqCst) == 0 {
                let mut open = gate.open.lock().unwrap();
                while !*open {
                    open = gate.opened.wait(open).unwrap();
                }
            }
            Ok(())
        })
    }

    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }

    /// Waits until the first round has called the hook (so it is held).
    fn wait_held(&self) {
        while self.rounds.load(Ordering::SeqCst) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

fn auto_from(from: usize) -> IndexKind {
    IndexKind::Auto {
        from,
        params: HnswParams::default(),
    }
}

/// While the graph is being built (held by the hook), searches are
/// answered exactly (route and answer equal to exact search's) and puts,
/// replacements and deletions go on; when the build is let go, the graph
/// takes them all in: new items are found by their vectors, replaced ones
/// with their new value, deleted ones never, and searches go through the
/// graph (the route and the route counters say so).
#[test]
fn searches_are_exact_while_the_graph_builds_and_writes_meanwhile_are_kept() {
    let first = clustered(500, 32, 10, 0.9, 11);
    let second = clustered(500, 32, 10, 0.9, 12);
    let gate = Arc::new(Gate::default());
    let mut index = VectorIndex::new(32, auto_from(400)).with_build_hook(gate.hook());
    for (i, v) in first.iter().enumerate().take(400) {
        index.put(item(i), Some(v));
    }
    gate.wait_held();
    assert_eq!(index.graph_status(), GraphStatus::Building);
    for q in first.iter().take(20) {
        let (got, route) = index.nearest_routed(q, &everything(), 0);
        assert_eq!(route, Route::Exact, "no graph to walk yet");
        assert_eq!(keys(&got), keys(&index.nearest_exact(q, &everything(), 0)));
    }
    // Meanwhile: 100 new items, 50 replaced with new vectors and values,
    // 50 deleted.
    for (i, v) in first.iter().enumerate().skip(400) {
        index.put(item(i), Some(v));
    }
    for (i, v) in second.iter().enumerate().take(50) {
        let mut replaced = item(i);
        replaced.value["new"] = json!(true);
        index.put(replaced, Some(v));
    }
    for i in 50..100 {
        let it = item(i);
        index.remove(it.namespace.labels(), &it.key);
    }
    assert_eq!(index.graph_status(), GraphStatus::Building);
    assert_eq!(index.len(), 450);
    // Still exact, and already right about the writes.
    let (got, route) = index.nearest_routed(&first[450], &everything().limit(1), 0);
    assert_eq!((keys(&got), route), (vec!["k450".to_owned()], Route::Exact));

    gate.open();
    assert_eq!(index.wait_for_graph(WAIT), GraphStatus::Ready);
    assert_eq!(
        gate.rounds.load(Ordering::SeqCst),
        1,
        "150 behind: caught up inline"
    );
    const { assert!(150 <= CATCH_UP_INLINE) };
    assert_eq!(index.stats().graph_builds, 1);
    let before = index.route_counts();
    let (_, route) = index.nearest_routed(&first[0], &everything(), 0);
    assert_eq!(route, Route::Graph, "the graph is used once ready");
    assert_eq!(index.route_counts().graph, before.graph + 1);

    // Every write made during the build shows, whichever route `Auto`
    // takes (it chooses by the costs it measures, so by timing).
    for (i, v) in first.iter().enumerate().skip(400) {
        let (got, _) = index.nearest_routed(v, &everything().limit(1), 0);
        assert_eq!(
            keys(&got),
            [format!("k{i}")],
            "an item put during the build"
        );
    }
    for (i, v) in second.iter().enumerate().take(50) {
        let got = index.nearest(v, &everything().limit(1), 0);
        assert_eq!(
            keys(&got),
            [format!("k{i}")],
            "an item replaced during the build"
        );
        assert_eq!(
            got[0].0.value["new"], true,
            "its new value, not the stale one"
        );
    }
    for v in first.iter().skip(50).take(50) {
        let found = keys(&index.nearest(v, &everything(), 0));
        assert!(
            found.iter().all(|k| {
                let n: usize = k[1..].parse().unwrap();
                !(50..100).contains(&n)
            }),
            "an item deleted during the build came back: {found:?}"
        );
    }
    let (r, _) = recall(&index, &second[100..150], &everything());
    assert!(r >= 0.95, "recall@10 after the catch-up {r}");
}

/// More items put during a build than are linked in inline: another round
/// on the build thread links them (the hook sees two rounds), and the graph
/// is used only once it holds every item.
#[test]
fn many_puts_during_a_build_are_linked_in_by_another_round() {
    let vectors = clustered(300 + 2 * CATCH_UP_INLINE, 32, 10, 0.9, 13);
    let gate = Arc::new(Gate::default());
    let mut index = VectorIndex::new(32, auto_from(300)).with_build_hook(gate.hook());
    for (i, v) in vectors.iter().enumerate().take(300) {
        index.put(item(i), Some(v));
    }
    gate.wait_held();
    for (i, v) in vectors.iter().enumerate().skip(300) {
        index.put(item(i), Some(v));
    }
    gate.open();
    assert_eq!(index.wait_for_graph(WAIT), GraphStatus::Ready);
    assert_eq!(gate.rounds.load(Ordering::SeqCst), 2);
    assert_eq!(index.stats().graph_builds, 2);
    for (i, v) in vectors.iter().enumerate().skip(300).step_by(7) {
        assert_eq!(
            keys(&index.nearest(v, &everything().limit(1), 0)),
            [format!("k{i}")]
        );
    }
    // Answered through the graph or exactly, as `Auto` measures (timing):
    // either way, as good as exact.
    let (r, _) = recall(&index, &vectors[..60], &everything());
    assert!(r >= 0.95, "recall@10 {r}");
}

/// A build that fails (its hook refuses, or it panics) is reported as a
/// typed error naming the number of items and why; searches stay exact and
/// right, and writes go on.
#[test]
fn a_failed_build_is_reported_and_searches_stay_exact() {
    let vectors = clustered(260, 16, 5, 0.9, 14);
    let refuse: BuildHook = Arc::new(|_| Err("no room for a graph today".into()));
    let panics: BuildHook = Arc::new(|n| panic!("a build of {n} broke"));
    for (hook, expected) in [
        (
            refuse,
            GraphBuildError::Refused {
                nodes: 200,
                why: "no room for a graph today".into(),
            },
        ),
        (
            panics,
            GraphBuildError::Panicked {
                nodes: 200,
                why: "a build of 200 broke".into(),
            },
        ),
    ] {
        let mut index = VectorIndex::new(16, auto_from(200)).with_build_hook(hook);
        for (i, v) in vectors.iter().enumerate().take(200) {
            index.put(item(i), Some(v));
        }
        let status = index.wait_for_graph(WAIT);
        assert_eq!(status, GraphStatus::Failed(expected.clone()));
        let message = expected.to_string();
        assert!(message.contains("200 items"), "{message}");
        for (i, v) in vectors.iter().enumerate().skip(200) {
            index.put(item(i), Some(v));
        }
        assert_eq!(index.len(), 260);
        for q in vectors.iter().step_by(13) {
            let (got, route) = index.nearest_routed(q, &everything(), 0);
            assert_eq!(route, Route::Exact);
            assert_eq!(keys(&got), keys(&index.nearest_exact(q, &everything(), 0)));
        }
        assert!(matches!(index.graph_status(), GraphStatus::Failed(_)));
        assert_eq!(index.stats().graph_builds, 0);
    }
}

/// Through `Memory`: the first search by text over a large enough memory
/// is answered exactly while the graph builds in the background (held
/// here), with the same hits as an exact index; a put and a delete made
/// meanwhile show once the graph is ready, and searches then go through
/// it ([`Memory::index_stats`]).
#[tokio::test]
async fn memory_answers_exactly_until_its_graph_is_built() {
    let gate = Arc::new(Gate::default());
    let embedder = Arc::new(HashedWords::new(64));
    let gated = IndexConfig::new(embedder.clone(), 64)
        .fields(["text"])
        .kind(auto_from(150))
        .build_hook(gate.hook());
    let memory = Memory::in_memory().with_index(gated);
    let exact =
        Memory::in_memory().with_index(IndexConfig::new(embedder, 64).fields(["text"]).exact());
    let ns = Namespace::new(["notes"]).unwrap();
    let words = [
        "amber", "basalt", "cobalt", "dune", "ember", "fjord", "garnet", "heron",
    ];
    for i in 0..200 {
        let text = format!(
            "{} {} {}",
            words[i % 8],
            words[(i / 8) % 8],
            words[(i / 64) % 8]
        );
        for m in [&memory, &exact] {
            m.put(&ns, &format!("n{i}"), json!({"text": text, "cat": i % 3}))
                .await
                .unwrap();
        }
    }
    assert!(
        memory.index_stats().await.is_none(),
        "loaded at the first search"
    );
    let query = Search::under(ns.clone())
        .text("garnet heron amber")
        .limit(8);
    let got = memory.search(&query).await.unwrap();
    gate.wait_held();
    let stats = memory.index_stats().await.unwrap();
    assert_eq!(stats.graph, GraphStatus::Building);
    assert_eq!((stats.routes.exact, stats.routes.graph), (1, 0));
    let want = exact.search(&query).await.unwrap();
    // The two memories were written a moment apart: their items' times
    // may differ by a millisecond; what is found, and how well, may not.
    let found = |hits: &[harness::memory::Hit]| -> Vec<(String, serde_json::Value, Option<f32>)> {
        hits.iter()
            .map(|h| (h.item.key.clone(), h.item.value.clone(), h.score))
            .collect()
    };
    assert_eq!(
        found(&got),
        found(&want),
        "the exact answer while the graph builds"
    );

    memory
        .put(&ns, "new", json!({"text": "quartz quartz zircon"}))
        .await
        .unwrap();
    memory.delete(&ns, "n0").await.unwrap();
    gate.open();
    assert_eq!(memory.wait_for_graph(WAIT).await, Some(GraphStatus::Ready));
    let found = memory
        .search(&Search::under(ns.clone()).text("quartz zircon").limit(1))
        .await
        .unwrap();
    assert_eq!(found[0].item.key, "new");
    let all = memory
        .search(
            &Search::under(ns.clone())
                .text("amber amber amber")
                .limit(200),
        )
        .await
        .unwrap();
    assert!(
        all.iter().all(|h| h.item.key != "n0"),
        "a deleted item came back"
    );
    assert_eq!(all.len(), 200);
    let stats = memory.index_stats().await.unwrap();
    assert!(stats.routes.graph >= 1, "{stats:?}");
}

/// Recall@10 through the graph when the same vectors are stored under
/// many keys (a text kept once per user): a copy ties with every other
/// copy, and must not starve its node of links to the rest of the graph.
/// Recall is judged by score (any of several copies will do).
#[test]
fn copies_of_one_vector_under_many_keys_keep_the_graph_recall() {
    let distinct = uniform(300, 24, 35);
    let vectors: Vec<Vec<f32>> = (0..3_000).map(|i| distinct[i % 300].clone()).collect();
    let index = approximate(&vectors, HnswParams::default());
    let queries = uniform(100, 24, 36);
    let (mut found, mut wanted, mut through) = (0, 0, 0);
    for q in &queries {
        let (got, route) = index.nearest_routed(q, &everything(), 0);
        through += usize::from(route == Route::Graph);
        let truth = index.nearest_exact(q, &everything(), 0);
        let kth = truth.last().unwrap().1;
        wanted += truth.len();
        found += got
            .iter()
            .filter(|(_, score)| *score >= kth - 1e-4)
            .count()
            .min(truth.len());
    }
    let r = found as f64 / wanted as f64;
    println!("recall@10 (by score) over 3 000 copies of 300 vectors: {r:.4}");
    assert_eq!(through, queries.len(), "every search walks the graph");
    assert!(r >= 0.99, "recall@10 {r}");
}

/// A copy stands for its group in the graph: when a filter refuses it, or
/// it is deleted, the walk still reaches the group's other copies, and
/// never returns the refused or deleted one.
#[test]
fn a_refused_or_deleted_copy_does_not_hide_its_group() {
    let distinct = uniform(300, 24, 37);
    let vectors: Vec<Vec<f32>> = (0..3_000).map(|i| distinct[i % 300].clone()).collect();
    let mut index = approximate(&vectors, HnswParams::default());
    let queries = uniform(60, 24, 38);
    // The first copy of each vector (n < 300) is the one put first.
    let later = everything().filter(Filter::gte("n", 300));
    let check = |index: &VectorIndex, search: &Search, what: &str| {
        for q in &queries {
            let (got, route) = index.nearest_routed(q, search, 0);
            assert_eq!(route, Route::Graph, "{what}: walks the graph");
            let truth = index.nearest_exact(q, search, 0);
            let scores =
                |hits: &[(Arc<Item>, f32)]| -> Vec<f32> { hits.iter().map(|(_, s)| *s).collect() };
            assert_eq!(scores(&got), scores(&truth), "{what}: the exact top 10");
            // Copies tie; both take the first put.
            assert_eq!(keys(&got), keys(&truth), "{what}: the exact top 10");
            for (item, _) in &got {
                assert!(
                    item.value["n"].as_u64().unwrap() >= 300,
                    "{what}: {}",
                    item.key
                );
            }
        }
    };
    check(&index, &later, "the first copies refused by a filter");
    for i in 0..300 {
        let item = item(i);
        index.remove(item.namespace.labels(), &item.key);
    }
    check(&index, &everything(), "the first copies deleted");
}
