//! The in-process vector index behind search by text: which items are
//! closest to a query's embedding, among those a search admits.

use super::types::{Item, Search};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};

/// Scales `v` to unit length (cosine similarity is then a dot product);
/// `None` for a zero or non-finite vector.
pub fn normalized(mut v: Vec<f32>) -> Option<Vec<f32>> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if !norm.is_finite() || norm == 0.0 {
        return None;
    }
    for x in &mut v {
        *x /= norm;
    }
    Some(v)
}

/// The dot product of two vectors of one length.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    // Sixteen lanes: four independent sums of four, which the compiler
    // keeps in vector registers, so that additions do not wait on each
    // other.
    let mut sums = [0.0f32; 16];
    let (ca, cb) = (a.chunks_exact(16), b.chunks_exact(16));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..16 {
            sums[i] += x[i] * y[i];
        }
    }
    let tail: f32 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    sums.iter().sum::<f32>() + tail
}

/// A scored candidate, ordered so that a max-heap pops the worst first.
struct Scored {
    score: f32,
    slot: usize,
}

impl PartialEq for Scored {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Scored {}
impl PartialOrd for Scored {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scored {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: the lowest score is the "greatest", popped first; ties
        // broken by slot so the order is total.
        other
            .score
            .total_cmp(&self.score)
            .then(self.slot.cmp(&other.slot))
    }
}

/// A node's similarity to a query, ordered so that a max-heap pops the
/// best first.
#[derive(Clone, Copy, Debug)]
struct Near {
    score: f32,
    node: u32,
}

impl PartialEq for Near {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Near {}
impl PartialOrd for Near {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Near {
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then(other.node.cmp(&self.node))
    }
}

/// The settings of the approximate index, a hierarchical navigable small
/// world graph (HNSW: Malkov and Yashunin, 2016).
///
/// Larger `m` and `ef_construction` make a better graph, built slower and
/// larger; larger `ef_search` finds more of the true nearest, slower. The
/// defaults keep recall@10 at 0.95 or more on sentence embeddings (the
/// figures are in `harness/tests/it/memory_index.rs` and the memory
/// benchmark).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HnswParams {
    /// Links per node and layer (twice this on the bottom layer). Default 16.
    pub m: usize,
    /// Candidates weighed when a node is linked in. Default 128.
    pub ef_construction: usize,
    /// Candidates kept during a search (at least the page asked for).
    /// Default 64.
    pub ef_search: usize,
    /// When a search's prefix and filters admit less than this fraction of
    /// the items (estimated from a sample), it is answered exactly instead:
    /// few items to compare, and a graph walk would pass through many it
    /// cannot return. Default 0.05.
    pub exact_below: f32,
    /// The seed of the random layers: the same puts build the same graph.
    pub seed: u64,
}

impl Default for HnswParams {
    fn default() -> Self {
        Self {
            m: 16,
            ef_construction: 128,
            ef_search: 64,
            exact_below: 0.05,
            seed: 0x5eed_0034,
        }
    }
}

/// How search by text finds the closest items.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum IndexKind {
    /// Every admitted item compared with the query: exact, in time
    /// proportional to the number of items.
    Exact,
    /// An HNSW graph, from the first item: approximate (see
    /// [`HnswParams`]), in time growing with the logarithm of the number
    /// of items. Items put one by one are linked in as they come; an index
    /// loaded whole ([`VectorIndex::extend`]) or compacted builds its graph
    /// in the background, searching exactly meanwhile.
    Approximate(HnswParams),
    /// Exact while the index holds fewer than `from` items; the graph is
    /// built when it reaches `from` (once, on a thread of its own, searches
    /// exact until it is ready; then kept up to date with every write).
    /// From then on each search takes the route that the index's
    /// own measurements say is cheaper for it ([`SearchCosts`]): an exact
    /// search costs about the same per item whatever the filter, a graph
    /// walk grows as the filter narrows (it walks through the items the
    /// filter refuses), so with a narrow enough filter exact search wins
    /// even over many items.
    Auto {
        /// The number of items from which the graph is used.
        from: usize,
        /// The graph's settings.
        params: HnswParams,
    },
}

/// Up to this many items, [`IndexKind::default`] searches exactly: below
/// it an exact search of 384-number vectors takes about a millisecond, and
/// building a graph costs more than it saves.
pub const EXACT_UP_TO: usize = 10_000;

/// One search in this many takes the route [`SearchCosts`] did not choose,
/// so that the costs of both stay measured as the index and the machine
/// change.
pub const EXPLORE_EVERY: u64 = 256;

/// What searches of a [`VectorIndex`] have cost, measured as they ran:
/// the basis of [`IndexKind::Auto`]'s choice between exact search and the
/// graph. Each figure is a moving average (the newest search weighs a
/// fifth); `None` until that route has run.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SearchCosts {
    /// An exact search's nanoseconds per item the index holds.
    pub exact_per_item: Option<f64>,
    /// A graph search's nanoseconds times the fraction of the items its
    /// search admitted: what it would cost without a filter.
    pub graph_unfiltered: Option<f64>,
}

impl SearchCosts {
    /// The route expected to be cheaper for a search admitting `fraction`
    /// of `items` items ([`Route::Exact`] or [`Route::Graph`]); `None`
    /// while a route is not measured yet.
    ///
    /// ```
    /// use harness::memory::{Route, SearchCosts};
    ///
    /// // 50 ns an item exactly; a graph walk of 300 µs without a filter.
    /// let costs = SearchCosts { exact_per_item: Some(50.0), graph_unfiltered: Some(300_000.0) };
    /// assert_eq!(costs.cheaper(100_000, 1.0), Some(Route::Graph)); // 5 ms against 0.3 ms
    /// assert_eq!(costs.cheaper(100_000, 0.05), Some(Route::Exact)); // 5 ms against 6 ms
    /// assert_eq!(SearchCosts::default().cheaper(100_000, 1.0), None);
    /// ```
    pub fn cheaper(&self, items: usize, fraction: f32) -> Option<Route> {
        let exact = self.exact_per_item? * items as f64;
        let graph = self.graph_unfiltered? / f64::from(fraction.max(1e-6));
        Some(if graph < exact {
            Route::Graph
        } else {
            Route::Exact
        })
    }

    fn record(average: &mut Option<f64>, sample: f64) {
        *average = Some(average.map_or(sample, |a| 0.8 * a + 0.2 * sample));
    }
}

impl Default for IndexKind {
    /// [`IndexKind::Auto`] from [`EXACT_UP_TO`] items, default graph
    /// settings.
    fn default() -> Self {
        Self::Auto {
            from: EXACT_UP_TO,
            params: HnswParams::default(),
        }
    }
}

/// The nodes a search has seen, cleared in constant time by an epoch.
#[derive(Default)]
struct Visited {
    marks: Vec<u32>,
    epoch: u32,
}

impl Visited {
    fn reset(&mut self, nodes: usize) {
        if self.marks.len() < nodes {
            self.marks.resize(nodes, 0);
        }
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.marks.fill(0);
            self.epoch = 1;
        }
    }

    /// Marks `node`; whether it was not marked yet.
    fn insert(&mut self, node: u32) -> bool {
        let mark = &mut self.marks[node as usize];
        let new = *mark != self.epoch;
        *mark = self.epoch;
        new
    }
}

thread_local! {
    static VISITED: std::cell::RefCell<Visited> = std::cell::RefCell::new(Visited::default());
}

/// The vector of `node`.
fn vector_of(vectors: &[f32], dimensions: usize, node: u32) -> &[f32] {
    let at = node as usize * dimensions;
    &vectors[at..at + dimensions]
}

/// A vector as the graph walks it: a scale and one small integer per
/// number (`number ≈ scale × integer`).
#[derive(Clone, Copy, Debug)]
struct Code<'a> {
    ints: &'a [i8],
    scale: f32,
}

/// The nodes' vectors as the graph walks them, a quarter of their size.
///
/// Why: a graph walk reads the vectors of neighbours scattered over the
/// index, and at 100 000 vectors of 384 numbers (150 MB) it spent most of
/// its time waiting for memory; at one byte a number (38 MB) far more of
/// them stay in the processor's caches, and the integer products are
/// cheaper too. A walk's scores are then close but not exact, so the
/// answers it finds are scored again on the full vectors.
#[derive(Clone, Debug, Default)]
struct Codes {
    dimensions: usize,
    ints: Vec<i8>,
    scales: Vec<f32>,
}

impl Codes {
    fn new(dimensions: usize) -> Self {
        Self {
            dimensions,
            ints: Vec::new(),
            scales: Vec::new(),
        }
    }

    /// Appends the code of `vector` (of `dimensions` numbers).
    fn push(&mut self, vector: &[f32]) {
        let scale = quantize(vector, &mut self.ints);
        self.scales.push(scale);
    }

    /// Replaces the code of `node`.
    fn set(&mut self, node: u32, vector: &[f32]) {
        let mut ints = Vec::with_capacity(self.dimensions);
        let scale = quantize(vector, &mut ints);
        let at = node as usize * self.dimensions;
        self.ints[at..at + self.dimensions].copy_from_slice(&ints);
        self.scales[node as usize] = scale;
    }

    /// How many vectors it holds.
    fn len(&self) -> usize {
        self.scales.len()
    }

    fn code(&self, node: u32) -> Code<'_> {
        let at = node as usize * self.dimensions;
        Code {
            ints: &self.ints[at..at + self.dimensions],
            scale: self.scales[node as usize],
        }
    }

    /// The similarity of `query` and `node`, close to the dot product of
    /// their vectors.
    fn score(&self, query: Code<'_>, node: u32) -> f32 {
        let code = self.code(node);
        query.scale * code.scale * dot_i8(query.ints, code.ints) as f32
    }
}

/// Appends `vector`'s integers to `out` (each number over the largest in
/// size, times 127, rounded); returns the scale.
fn quantize(vector: &[f32], out: &mut Vec<i8>) -> f32 {
    let largest = vector.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    if largest == 0.0 || !largest.is_finite() {
        out.extend(std::iter::repeat_n(0, vector.len()));
        return 0.0;
    }
    let k = 127.0 / largest;
    // In range: |x × k| ≤ 127 (the cast saturates anyway).
    out.extend(vector.iter().map(|x| (x * k).round() as i8));
    largest / 127.0
}

/// The dot product of two integer codes of one length (at most 2^17
/// numbers: no overflow).
fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    let mut sums = [0i32; 16];
    let (ca, cb) = (a.chunks_exact(16), b.chunks_exact(16));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..16 {
            sums[i] += i32::from(x[i]) * i32::from(y[i]);
        }
    }
    let tail: i32 = ra
        .iter()
        .zip(rb)
        .map(|(x, y)| i32::from(*x) * i32::from(*y))
        .sum();
    sums.iter().sum::<i32>() + tail
}

/// No node: the end of a chain of copies.
const NO_NODE: u32 = u32::MAX;

/// The HNSW graph over an index's nodes (which it shares the vectors of).
/// Deleted nodes stay in it as stepping stones until the index is
/// compacted.
///
/// A node whose code is the same as a linked node's (one text stored under
/// many keys: a fact copied per user) is not linked itself: it joins that
/// node's group of copies, and a walk reaching the group's node finds all
/// of them. Linked, copies tie with each other and with every candidate,
/// crowd each other's links and the walk's candidates, and cut clusters
/// off: over 12 000 items of 400 distinct texts, recall@10 was 0.61.
#[derive(Debug)]
struct Graph {
    params: HnswParams,
    /// Bottom-layer links, `2m + 1` numbers per node: a count, then links.
    bottom: Vec<u32>,
    /// Upper-layer links: `upper[node][layer - 1]`.
    upper: Vec<Vec<Vec<u32>>>,
    entry: Option<u32>,
    top: usize,
    rng: u64,
    /// The next copy in a linked node's group ([`NO_NODE`]: none): a chain
    /// from the linked node through its copies, in the order they came
    /// (their slots' order, which ties are broken by).
    next_copy: Vec<u32>,
    /// The last copy of each linked node's group (the node itself when it
    /// has none), where the next one is chained; unused for copies.
    last_copy: Vec<u32>,
    /// The linked node of each distinct code, by the code's hash.
    linked: HashMap<u64, u32>,
}

impl Graph {
    fn new(params: HnswParams) -> Self {
        let params = HnswParams {
            m: params.m.max(2),
            ef_construction: params.ef_construction.max(1),
            ef_search: params.ef_search.max(1),
            ..params
        };
        Self {
            params,
            bottom: Vec::new(),
            upper: Vec::new(),
            entry: None,
            top: 0,
            rng: params.seed,
            next_copy: Vec::new(),
            last_copy: Vec::new(),
            linked: HashMap::new(),
        }
    }

    /// `node`'s copies (not `node` itself): empty unless it is linked and
    /// has some.
    fn copies(&self, node: u32) -> impl Iterator<Item = u32> + '_ {
        let next = |n: u32| Some(self.next_copy[n as usize]).filter(|&c| c != NO_NODE);
        std::iter::successors(next(node), move |&n| next(n))
    }

    /// Whether `admit` accepts `node` or one of its copies. (A walk that
    /// meets a large group refused by its filter reads the whole chain;
    /// but a filter refusing all but a few of the copies of one text, one
    /// user's of a fact stored per user, admits less than
    /// [`HnswParams::exact_below`] of the items, and is answered exactly.)
    fn admits_group(&self, node: u32, admit: &dyn Fn(u32) -> bool) -> bool {
        admit(node) || self.copies(node).any(admit)
    }

    /// How many nodes it links (the first ones of the index).
    fn len(&self) -> usize {
        self.upper.len()
    }

    fn max_links(&self, layer: usize) -> usize {
        if layer == 0 {
            2 * self.params.m
        } else {
            self.params.m
        }
    }

    fn links(&self, node: u32, layer: usize) -> &[u32] {
        if layer == 0 {
            let at = node as usize * (2 * self.params.m + 1);
            let count = self.bottom[at] as usize;
            &self.bottom[at + 1..at + 1 + count]
        } else {
            &self.upper[node as usize][layer - 1]
        }
    }

    fn set_links(&mut self, node: u32, layer: usize, links: &[u32]) {
        if layer == 0 {
            let at = node as usize * (2 * self.params.m + 1);
            self.bottom[at] = links.len() as u32;
            self.bottom[at + 1..at + 1 + links.len()].copy_from_slice(links);
        } else {
            let slot = &mut self.upper[node as usize][layer - 1];
            slot.clear();
            slot.extend_from_slice(links);
        }
    }

    /// A random layer, geometrically distributed (splitmix64).
    fn random_layer(&mut self) -> usize {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        let uniform = ((z >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        let scale = 1.0 / (self.params.m as f64).ln();
        ((-uniform.ln() * scale) as usize).min(16)
    }

    /// The `ef` linked nodes closest to `query` on `layer` of which `admit`
    /// accepts the node or a copy, reached from `entries`, best first.
    /// Nodes `admit` refuses are walked through but not returned.
    #[allow(clippy::too_many_arguments)]
    fn search_layer(
        &self,
        codes: &Codes,
        query: Code<'_>,
        entries: &[Near],
        ef: usize,
        layer: usize,
        admit: &dyn Fn(u32) -> bool,
        visited: &mut Visited,
    ) -> Vec<Near> {
        visited.reset(self.upper.len());
        let mut candidates: BinaryHeap<Near> = BinaryHeap::with_capacity(ef * 2);
        let mut results: BinaryHeap<Scored> = BinaryHeap::with_capacity(ef + 1);
        for e in entries {
            if visited.insert(e.node) {
                candidates.push(*e);
                if self.admits_group(e.node, admit) {
                    results.push(Scored {
                        score: e.score,
                        slot: e.node as usize,
                    });
                    if results.len() > ef {
                        results.pop();
                    }
                }
            }
        }
        while let Some(best) = candidates.pop() {
            if results.len() >= ef && results.peek().is_some_and(|w| best.score < w.score) {
                break;
            }
            for &next in self.links(best.node, layer) {
                if !visited.insert(next) {
                    continue;
                }
                let score = codes.score(query, next);
                if results.len() < ef || results.peek().is_some_and(|w| score > w.score) {
                    candidates.push(Near { score, node: next });
                    if self.admits_group(next, admit) {
                        results.push(Scored {
                            score,
                            slot: next as usize,
                        });
                        if results.len() > ef {
                            results.pop();
                        }
                    }
                }
            }
        }
        let mut out: Vec<Near> = results
            .into_iter()
            .map(|s| Near {
                score: s.score,
                node: s.slot as u32,
            })
            .collect();
        out.sort_by(|a, b| b.cmp(a));
        out
    }

    /// Up to `m` of `candidates` (best first, scored against `base`, the
    /// node they are for): first those that are each closer to that node
    /// than to any chosen before, links in several directions rather than
    /// a clump; then, while slots are left, the best of the rest (the
    /// HNSW paper's "keepPrunedConnections"). A chosen copy of the node
    /// (the same code, as when a text is stored under many keys) hides
    /// nothing but other copies: every other candidate is exactly as close
    /// to it as to the node, and would be dropped on that tie, cutting a
    /// cluster of copies off from the rest of the graph.
    fn select(codes: &Codes, base: Code<'_>, candidates: &[Near], m: usize) -> Vec<u32> {
        let copy = |node: u32| {
            let code = codes.code(node);
            code.scale.to_bits() == base.scale.to_bits() && code.ints == base.ints
        };
        // Each chosen node, and whether it is a copy of `base`.
        let mut chosen: Vec<(u32, bool)> = Vec::with_capacity(m);
        let mut pruned: Vec<u32> = Vec::new();
        for c in candidates {
            if chosen.len() >= m {
                break;
            }
            let v = codes.code(c.node);
            let c_copy = copy(c.node);
            let apart = chosen
                .iter()
                .all(|&(s, s_copy)| (s_copy && !c_copy) || codes.score(v, s) < c.score);
            if apart {
                chosen.push((c.node, c_copy));
            } else {
                pruned.push(c.node);
            }
        }
        let mut links: Vec<u32> = chosen.into_iter().map(|(n, _)| n).collect();
        let room = m.saturating_sub(links.len());
        links.extend(pruned.into_iter().take(room));
        links
    }

    /// Links in `node`, the next node (its vector already in `vectors`),
    /// or adds it to the group of a linked node of the same code.
    fn insert(&mut self, node: u32, codes: &Codes) {
        debug_assert_eq!(node as usize, self.upper.len());
        self.bottom
            .resize(self.bottom.len() + 2 * self.params.m + 1, 0);
        self.next_copy.push(NO_NODE);
        self.last_copy.push(node);
        let query = codes.code(node);
        let hash = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            query.ints.hash(&mut h);
            query.scale.to_bits().hash(&mut h);
            h.finish()
        };
        match self.linked.get(&hash) {
            Some(&first) => {
                let code = codes.code(first);
                if code.scale.to_bits() == query.scale.to_bits() && code.ints == query.ints {
                    self.upper.push(Vec::new());
                    let last = self.last_copy[first as usize];
                    self.next_copy[last as usize] = node;
                    self.last_copy[first as usize] = node;
                    return;
                }
                // Another code of the same hash: linked as any other.
            }
            None => {
                self.linked.insert(hash, node);
            }
        }
        let layer = self.random_layer();
        self.upper.push(vec![Vec::new(); layer]);
        let Some(entry) = self.entry else {
            self.entry = Some(node);
            self.top = layer;
            return;
        };
        let all = |_: u32| true;
        VISITED.with_borrow_mut(|visited| {
            let mut entries = vec![Near {
                score: codes.score(query, entry),
                node: entry,
            }];
            for l in (layer + 1..=self.top).rev() {
                let found = self.search_layer(codes, query, &entries, 1, l, &all, visited);
                entries.truncate(0);
                entries.extend(found.first().copied());
            }
            for l in (0..=layer.min(self.top)).rev() {
                let found = self.search_layer(
                    codes,
                    query,
                    &entries,
                    self.params.ef_construction,
                    l,
                    &all,
                    visited,
                );
                let chosen = Self::select(codes, query, &found, self.params.m);
                self.set_links(node, l, &chosen);
                let max = self.max_links(l);
                for &other in &chosen {
                    let mut links = self.links(other, l).to_vec();
                    if links.len() < max {
                        links.push(node);
                    } else {
                        let base = codes.code(other);
                        let mut scored: Vec<Near> = links
                            .iter()
                            .chain(std::iter::once(&node))
                            .map(|&n| Near {
                                score: codes.score(base, n),
                                node: n,
                            })
                            .collect();
                        scored.sort_by(|a, b| b.cmp(a));
                        links = Self::select(codes, base, &scored, max);
                    }
                    self.set_links(other, l, &links);
                }
                if !found.is_empty() {
                    entries = found;
                }
            }
        });
        if layer > self.top {
            self.top = layer;
            self.entry = Some(node);
        }
    }

    /// The admitted nodes of the `ef` linked nodes closest to `query` whose
    /// groups hold an admitted node (with up to `ef` of each group, in
    /// their slots' order: at least `ef` nodes when there are as many),
    /// best first by their codes' scores. Not more of a group: its copies
    /// score the same, and `ef` is at least the page asked for; a search
    /// costs no more for a text stored 100 000 times.
    fn search(
        &self,
        codes: &Codes,
        query: Code<'_>,
        ef: usize,
        admit: &dyn Fn(u32) -> bool,
    ) -> Vec<Near> {
        let Some(entry) = self.entry else {
            return Vec::new();
        };
        let all = |_: u32| true;
        VISITED.with_borrow_mut(|visited| {
            let mut entries = vec![Near {
                score: codes.score(query, entry),
                node: entry,
            }];
            for l in (1..=self.top).rev() {
                let found = self.search_layer(codes, query, &entries, 1, l, &all, visited);
                entries.truncate(0);
                entries.extend(found.first().copied());
            }
            let found = self.search_layer(codes, query, &entries, ef, 0, admit, visited);
            let mut out = Vec::with_capacity(found.len());
            for near in found {
                let group = std::iter::once(near.node).chain(self.copies(near.node));
                out.extend(
                    group
                        .filter(|&node| admit(node))
                        .take(ef)
                        .map(|node| Near { node, ..near }),
                );
            }
            out
        })
    }
}

/// How a search was answered, for tests and measurements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Every admitted item compared.
    Exact,
    /// Through the graph.
    Graph,
    /// Through the graph, which found fewer than the page: then exactly.
    GraphThenExact,
}

/// How many searches of a [`VectorIndex`] took each [`Route`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RouteCounts {
    /// Answered by comparing every admitted item.
    pub exact: u64,
    /// Answered through the graph.
    pub graph: u64,
    /// Tried through the graph, which found too few: then exactly.
    pub graph_then_exact: u64,
}

/// Where a [`VectorIndex`]'s HNSW graph stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GraphStatus {
    /// None is wanted: [`IndexKind::Exact`], or [`IndexKind::Auto`] below
    /// its threshold.
    Off,
    /// Being built on a thread of its own. Until it is ready every search
    /// is answered exactly: the right answer, only slower.
    Building,
    /// Built and kept up to date with every write; searches may take it.
    Ready,
    /// The last build failed (it was also logged). Searches are answered
    /// exactly; the next compaction, or a new index
    /// ([`Memory::reload_index`](super::Memory::reload_index)), builds
    /// again.
    Failed(GraphBuildError),
}

/// Why a build of a [`VectorIndex`]'s graph failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GraphBuildError {
    /// No thread could be started for it.
    #[error("the memory index's graph of {nodes} items: no thread to build it on: {why}")]
    Spawn {
        /// The items it was to link.
        nodes: usize,
        /// The system's reason.
        why: String,
    },
    /// The build panicked.
    #[error("the memory index's graph of {nodes} items: the build panicked: {why}")]
    Panicked {
        /// The items it was to link.
        nodes: usize,
        /// The panic's message.
        why: String,
    },
    /// The [`BuildHook`] refused it.
    #[error("the memory index's graph of {nodes} items: its build hook refused: {why}")]
    Refused {
        /// The items it was to link.
        nodes: usize,
        /// The hook's reason.
        why: String,
    },
}

/// Called on the build thread before each round of a graph build, with the
/// number of items the round will have linked when done. It may block,
/// holding the build (tests use this to search while a build is pending),
/// or refuse it (the build fails with [`GraphBuildError::Refused`]). Set
/// with [`VectorIndex::with_build_hook`] or
/// [`IndexConfig::build_hook`](super::IndexConfig::build_hook).
pub type BuildHook = Arc<dyn Fn(usize) -> Result<(), String> + Send + Sync>;

/// Up to this many items written while a graph was being built are linked
/// into it by whichever search or write first finds the build finished;
/// when more were, another round on the build thread links them (the graph
/// is not used until it holds every item).
pub const CATCH_UP_INLINE: usize = 256;

/// A graph build running on its own thread.
#[derive(Debug, Default)]
struct BuildJob {
    /// The graph, or why there is none; `None` while it runs, or when it
    /// was cancelled.
    outcome: Mutex<Option<Result<Graph, GraphBuildError>>>,
    /// Set, under `outcome`'s lock, when the thread is done.
    done: AtomicBool,
    finished: Condvar,
    /// Set when the index is dropped: the thread stops.
    cancel: AtomicBool,
}

#[derive(Debug)]
enum GraphState {
    Off,
    Building(Arc<BuildJob>),
    Ready(Graph),
    Failed(GraphBuildError),
}

/// The message of a caught panic.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    crate::panics::panic_message(panic)
        .map_or_else(|| "a panic without a message".into(), str::to_owned)
}

/// Links nodes `graph.len()..codes.len()` into `graph`; `None` if
/// cancelled.
fn build_graph(
    mut graph: Graph,
    codes: &Codes,
    hook: Option<&BuildHook>,
    cancel: &AtomicBool,
) -> Option<Result<Graph, GraphBuildError>> {
    let nodes = codes.len();
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        if let Some(hook) = hook {
            hook(nodes).map_err(|why| GraphBuildError::Refused { nodes, why })?;
        }
        for node in graph.len()..nodes {
            if cancel.load(AtomicOrdering::Relaxed) {
                return Ok(None);
            }
            // `nodes` fits a u32: the index numbers its nodes so.
            graph.insert(node as u32, codes);
        }
        Ok(Some(graph))
    }));
    match run {
        Ok(Ok(Some(graph))) => Some(Ok(graph)),
        Ok(Ok(None)) => None,
        Ok(Err(refused)) => Some(Err(refused)),
        Err(panic) => Some(Err(GraphBuildError::Panicked {
            nodes,
            why: panic_message(panic.as_ref()),
        })),
    }
}

/// Starts linking the nodes of `codes` that `graph` lacks, on a thread of
/// its own.
fn spawn_build(graph: Graph, codes: Codes, hook: Option<BuildHook>) -> GraphState {
    let nodes = codes.len();
    let job = Arc::new(BuildJob::default());
    let shared = Arc::clone(&job);
    let spawned = std::thread::Builder::new()
        .name("harness-memory-graph".into())
        .spawn(move || {
            let outcome = build_graph(graph, &codes, hook.as_ref(), &shared.cancel);
            let mut slot = shared.outcome.lock().unwrap_or_else(|e| e.into_inner());
            *slot = outcome;
            shared.done.store(true, AtomicOrdering::Release);
            drop(slot);
            shared.finished.notify_all();
        });
    match spawned {
        Ok(_) => {
            tracing::debug!(nodes, "memory index: building the graph in the background");
            GraphState::Building(job)
        }
        Err(e) => {
            let error = GraphBuildError::Spawn {
                nodes,
                why: e.to_string(),
            };
            tracing::warn!(%error, "memory index: searches stay exact");
            GraphState::Failed(error)
        }
    }
}

/// What a [`VectorIndex`] holds and how its searches went.
#[derive(Clone, Debug, PartialEq)]
pub struct IndexStats {
    /// Items held.
    pub items: usize,
    /// Where its graph stands.
    pub graph: GraphStatus,
    /// Graph build rounds finished (a build that caught up with many
    /// writes takes more than one).
    pub graph_builds: u64,
    /// Searches by route.
    pub routes: RouteCounts,
    /// What searches cost.
    pub costs: SearchCosts,
}

/// The in-process index behind search by text: items with their unit
/// vectors, searched exactly, or through an HNSW graph as its
/// [`IndexKind`] says. It holds the items themselves, so that a search's
/// prefix and filters are judged without a trip to the backend, during the
/// search (a graph search walks through the items a filter refuses and
/// returns only those it admits). A replaced or deleted item leaves a
/// tombstone in the graph; once tombstones outnumber the live items the
/// index is compacted (the graph rebuilt from the live items).
///
/// A whole graph (when [`IndexKind::Auto`] reaches its threshold, when the
/// index is compacted, or after [`extend`](Self::extend)) is built on a
/// thread of its own, never inside a search or a write: until it is ready
/// ([`graph_status`](Self::graph_status)), searches are answered exactly.
/// Items put or deleted meanwhile are not lost: a node's vector never
/// changes while a build reads it (a replaced item gets a new node),
/// deleted items are tombstones the search never returns, and the items
/// put during the build are linked in when it finishes (by another round
/// on the build thread if there are more than [`CATCH_UP_INLINE`]). One
/// build runs per index at a time; a failed one is logged and reported as
/// [`GraphStatus::Failed`], and searches stay exact.
pub struct VectorIndex {
    dimensions: usize,
    kind: IndexKind,
    /// Vectors, `dimensions` numbers per node.
    vectors: Vec<f32>,
    /// The same, as the graph walks them.
    codes: Codes,
    /// Items per node; `None`: deleted (a tombstone).
    items: Vec<Option<Arc<Item>>>,
    nodes: HashMap<(Vec<String>, String), u32>,
    dead: usize,
    graph: RwLock<GraphState>,
    hook: Option<BuildHook>,
    costs: Mutex<SearchCosts>,
    searches: AtomicU64,
    routes: [AtomicU64; 3],
    builds: AtomicU64,
}

impl fmt::Debug for VectorIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VectorIndex")
            .field("dimensions", &self.dimensions)
            .field("kind", &self.kind)
            .field("items", &self.nodes.len())
            .field("tombstones", &self.dead)
            .field("graph", &self.status_now())
            .finish()
    }
}

impl Drop for VectorIndex {
    fn drop(&mut self) {
        if let GraphState::Building(job) = &*self.read_state() {
            job.cancel.store(true, AtomicOrdering::Relaxed);
        }
    }
}

/// Whether a write may change a node in place, and whether it links new
/// nodes into the graph.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// No graph, and none being built.
    Loose,
    /// A build reads the nodes' vectors.
    Building,
    /// A graph to keep up to date.
    Ready,
}

impl VectorIndex {
    /// An empty index of vectors of `dimensions` numbers, searched as
    /// `kind` says.
    pub fn new(dimensions: usize, kind: IndexKind) -> Self {
        let graph = match kind {
            IndexKind::Approximate(params) => GraphState::Ready(Graph::new(params)),
            IndexKind::Exact | IndexKind::Auto { .. } => GraphState::Off,
        };
        Self {
            dimensions,
            kind,
            vectors: Vec::new(),
            codes: Codes::new(dimensions),
            items: Vec::new(),
            nodes: HashMap::new(),
            dead: 0,
            graph: RwLock::new(graph),
            hook: None,
            costs: Mutex::default(),
            searches: AtomicU64::new(0),
            routes: Default::default(),
            builds: AtomicU64::new(0),
        }
    }

    /// An exact index ([`IndexKind::Exact`]).
    pub fn exact(dimensions: usize) -> Self {
        Self::new(dimensions, IndexKind::Exact)
    }

    /// Calls `hook` on the build thread before each round of a graph build:
    /// see [`BuildHook`].
    #[must_use]
    pub fn with_build_hook(mut self, hook: BuildHook) -> Self {
        self.hook = Some(hook);
        self
    }

    /// How many items it holds.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Whether its graph is ready, so that searches may go through it
    /// (unless a filter is selective, or, with [`IndexKind::Auto`], exact
    /// search is measured to be cheaper).
    pub fn is_approximate(&self) -> bool {
        self.graph_status() == GraphStatus::Ready
    }

    /// Where its graph stands (a finished build is taken in first).
    pub fn graph_status(&self) -> GraphStatus {
        self.poll();
        self.status_now()
    }

    /// Waits up to `timeout` for a graph build to finish (taking it in);
    /// where the graph then stands.
    pub fn wait_for_graph(&self, timeout: Duration) -> GraphStatus {
        let deadline = Instant::now() + timeout;
        loop {
            self.poll();
            let job = match &*self.read_state() {
                GraphState::Building(job) => Arc::clone(job),
                _ => return self.status_now(),
            };
            let mut slot = job.outcome.lock().unwrap_or_else(|e| e.into_inner());
            while !job.done.load(AtomicOrdering::Acquire) {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return GraphStatus::Building;
                }
                slot = job
                    .finished
                    .wait_timeout(slot, left)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        }
    }

    /// What it holds and how its searches went.
    pub fn stats(&self) -> IndexStats {
        IndexStats {
            items: self.len(),
            graph: self.graph_status(),
            graph_builds: self.builds.load(AtomicOrdering::Relaxed),
            routes: self.route_counts(),
            costs: self.search_costs(),
        }
    }

    /// How many searches took each route.
    pub fn route_counts(&self) -> RouteCounts {
        let [exact, graph, graph_then_exact] = self
            .routes
            .each_ref()
            .map(|c| c.load(AtomicOrdering::Relaxed));
        RouteCounts {
            exact,
            graph,
            graph_then_exact,
        }
    }

    /// What its searches have cost so far.
    pub fn search_costs(&self) -> SearchCosts {
        *self.costs.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn read_state(&self) -> std::sync::RwLockReadGuard<'_, GraphState> {
        self.graph.read().unwrap_or_else(|e| e.into_inner())
    }

    fn status_now(&self) -> GraphStatus {
        match &*self.read_state() {
            GraphState::Off => GraphStatus::Off,
            GraphState::Building(_) => GraphStatus::Building,
            GraphState::Ready(_) => GraphStatus::Ready,
            GraphState::Failed(e) => GraphStatus::Failed(e.clone()),
        }
    }

    fn mode(&mut self) -> Mode {
        match self.graph.get_mut().unwrap_or_else(|e| e.into_inner()) {
            GraphState::Off | GraphState::Failed(_) => Mode::Loose,
            GraphState::Building(_) => Mode::Building,
            GraphState::Ready(_) => Mode::Ready,
        }
    }

    /// Takes in a finished build, if there is one.
    fn poll(&self) {
        let job = match &*self.read_state() {
            GraphState::Building(job) if job.done.load(AtomicOrdering::Acquire) => Arc::clone(job),
            _ => return,
        };
        let mut state = self.graph.write().unwrap_or_else(|e| e.into_inner());
        // Another search may have taken it in meanwhile.
        if matches!(&*state, GraphState::Building(j) if Arc::ptr_eq(j, &job)) {
            *state = self.finish(&job);
        }
    }

    /// [`poll`](Self::poll) without locking.
    fn poll_mut(&mut self) {
        let job = match self.graph.get_mut().unwrap_or_else(|e| e.into_inner()) {
            GraphState::Building(job) if job.done.load(AtomicOrdering::Acquire) => Arc::clone(job),
            _ => return,
        };
        let next = self.finish(&job);
        *self.graph.get_mut().unwrap_or_else(|e| e.into_inner()) = next;
    }

    /// The state after `job`, which is done: its graph with the nodes put
    /// since linked in (or another round started to link them), or why
    /// there is none.
    fn finish(&self, job: &BuildJob) -> GraphState {
        let outcome = job.outcome.lock().unwrap_or_else(|e| e.into_inner()).take();
        match outcome {
            Some(Ok(graph)) => {
                self.builds.fetch_add(1, AtomicOrdering::Relaxed);
                self.resume(graph)
            }
            Some(Err(error)) => {
                tracing::warn!(%error, "memory index: searches stay exact");
                GraphState::Failed(error)
            }
            None => GraphState::Off,
        }
    }

    /// `graph` with the nodes it lacks linked in now, if they are few, or
    /// by another round on a build thread.
    fn resume(&self, mut graph: Graph) -> GraphState {
        let behind = self.codes.len().saturating_sub(graph.len());
        if behind > CATCH_UP_INLINE {
            return spawn_build(graph, self.codes.clone(), self.hook.clone());
        }
        for node in graph.len()..self.codes.len() {
            graph.insert(node as u32, &self.codes);
        }
        GraphState::Ready(graph)
    }

    /// The graph's settings if one is wanted at the index's size.
    fn wanted_graph(&self) -> Option<HnswParams> {
        match self.kind {
            IndexKind::Exact => None,
            IndexKind::Approximate(params) => Some(params),
            IndexKind::Auto { from, params } => (self.nodes.len() >= from).then_some(params),
        }
    }

    /// Starts a build if a graph is wanted and there is none, or links in
    /// what a ready graph lacks.
    fn build_if_due(&mut self) {
        let state = std::mem::replace(
            self.graph.get_mut().unwrap_or_else(|e| e.into_inner()),
            GraphState::Off,
        );
        let next = match state {
            GraphState::Ready(graph) if graph.len() < self.codes.len() => self.resume(graph),
            GraphState::Off => match self.wanted_graph() {
                Some(params) if self.codes.len() == 0 => GraphState::Ready(Graph::new(params)),
                Some(params) => {
                    spawn_build(Graph::new(params), self.codes.clone(), self.hook.clone())
                }
                None => GraphState::Off,
            },
            other => other,
        };
        *self.graph.get_mut().unwrap_or_else(|e| e.into_inner()) = next;
    }

    /// [`nearest_exact`](Self::nearest_exact), its cost recorded.
    fn timed_exact(&self, query: &[f32], search: &Search, now: u64) -> Vec<(Arc<Item>, f32)> {
        let start = Instant::now();
        let found = self.nearest_exact(query, search, now);
        let per_item = start.elapsed().as_nanos() as f64 / self.items.len().max(1) as f64;
        let mut costs = self.costs.lock().unwrap_or_else(|e| e.into_inner());
        SearchCosts::record(&mut costs.exact_per_item, per_item);
        found
    }

    /// Puts `item` with its unit `vector` (of the index's length), or
    /// removes the item when `vector` is `None` or of another length.
    pub fn put(&mut self, item: Item, vector: Option<&[f32]>) {
        self.put_one(item, vector, false);
    }

    /// Puts many items (as [`put`](Self::put)), then builds or extends the
    /// graph once, in the background, rather than linking each item in as
    /// it comes: how an index is loaded.
    pub fn extend<I>(&mut self, items: I)
    where
        I: IntoIterator<Item = (Item, Option<Vec<f32>>)>,
    {
        for (item, vector) in items {
            self.put_one(item, vector.as_deref(), true);
        }
        self.build_if_due();
    }

    fn put_one(&mut self, item: Item, vector: Option<&[f32]>, defer: bool) {
        self.poll_mut();
        let key = (item.namespace.labels().to_vec(), item.key.clone());
        let Some(vector) = vector.filter(|v| v.len() == self.dimensions) else {
            self.remove_key(&key);
            return;
        };
        if let Some(&node) = self.nodes.get(&key) {
            let at = node as usize * self.dimensions;
            let same = self.vectors[at..at + self.dimensions] == *vector;
            if same || self.mode() == Mode::Loose {
                // Neither a graph nor a build reads this node's vector: the
                // item is replaced where it is.
                self.vectors[at..at + self.dimensions].copy_from_slice(vector);
                self.codes.set(node, vector);
                self.items[node as usize] = Some(Arc::new(item));
                return;
            }
            self.remove_key(&key);
        }
        let Ok(node) = u32::try_from(self.items.len()) else {
            return;
        };
        self.vectors.extend_from_slice(vector);
        self.codes.push(vector);
        self.items.push(Some(Arc::new(item)));
        self.nodes.insert(key, node);
        if defer {
            return;
        }
        if let GraphState::Ready(graph) = self.graph.get_mut().unwrap_or_else(|e| e.into_inner())
            && graph.len() == node as usize
        {
            graph.insert(node, &self.codes);
        } else {
            self.build_if_due();
        }
    }

    /// Removes the item at `namespace`/`key`.
    pub fn remove(&mut self, namespace: &[String], key: &str) {
        self.poll_mut();
        self.remove_key(&(namespace.to_vec(), key.to_owned()));
    }

    /// Sets the expiry of the item at `namespace`/`key` to `expires_at`, if
    /// it is held and still expires at `from` (see
    /// [`Write::Touch`](super::backend::Write::Touch)).
    pub fn touch(&mut self, namespace: &[String], key: &str, expires_at: u64, from: u64) {
        if let Some(&node) = self.nodes.get(&(namespace.to_vec(), key.to_owned()))
            && let Some(item) = self.items[node as usize].as_mut()
            && item.expires_at == Some(from)
        {
            Arc::make_mut(item).expires_at = Some(expires_at);
        }
    }

    fn remove_key(&mut self, key: &(Vec<String>, String)) {
        let Some(node) = self.nodes.remove(key) else {
            return;
        };
        self.items[node as usize] = None;
        self.dead += 1;
        // Not while a build reads the nodes: compaction renumbers them.
        if self.dead > 1024 && self.dead > self.nodes.len() && self.mode() != Mode::Building {
            self.compact();
        }
    }

    /// Drops the tombstones; the graph, if one is wanted, is built anew in
    /// the background.
    fn compact(&mut self) {
        let d = self.dimensions;
        let mut vectors = Vec::with_capacity(self.nodes.len() * d);
        let mut items = Vec::with_capacity(self.nodes.len());
        for (node, item) in self.items.drain(..).enumerate() {
            if let Some(item) = item {
                vectors.extend_from_slice(&self.vectors[node * d..(node + 1) * d]);
                items.push(Some(item));
            }
        }
        self.nodes = items
            .iter()
            .enumerate()
            .filter_map(|(node, item)| {
                let item = item.as_ref()?;
                let key = (item.namespace.labels().to_vec(), item.key.clone());
                Some((key, u32::try_from(node).ok()?))
            })
            .collect();
        self.codes = Codes::new(d);
        for vector in vectors.chunks_exact(d.max(1)) {
            self.codes.push(vector);
        }
        self.vectors = vectors;
        self.items = items;
        self.dead = 0;
        *self.graph.get_mut().unwrap_or_else(|e| e.into_inner()) = GraphState::Off;
        self.build_if_due();
    }

    /// Whether node `node` is live at `now` and admitted by `search`.
    fn admits(&self, node: usize, search: &Search, now: u64) -> bool {
        self.items[node]
            .as_ref()
            .is_some_and(|item| item.expires_at.is_none_or(|at| now < at) && search.admits(item))
    }

    /// The `search.offset + search.limit` items closest to `query` (a unit
    /// vector) among those `search` admits and live at `now`, best first,
    /// with their similarity; then the page asked for. Exact, or through
    /// the graph: see [`IndexKind`].
    pub fn nearest(&self, query: &[f32], search: &Search, now: u64) -> Vec<(Arc<Item>, f32)> {
        self.nearest_routed(query, search, now).0
    }

    /// [`nearest`](Self::nearest), and how it was answered.
    pub fn nearest_routed(
        &self,
        query: &[f32],
        search: &Search,
        now: u64,
    ) -> (Vec<(Arc<Item>, f32)>, Route) {
        self.poll();
        let (found, route) = self.routed(query, search, now);
        let counter = match route {
            Route::Exact => &self.routes[0],
            Route::Graph => &self.routes[1],
            Route::GraphThenExact => &self.routes[2],
        };
        counter.fetch_add(1, AtomicOrdering::Relaxed);
        (found, route)
    }

    fn routed(&self, query: &[f32], search: &Search, now: u64) -> (Vec<(Arc<Item>, f32)>, Route) {
        let want = self.wanted(search);
        if want == 0 || query.len() != self.dimensions {
            return (Vec::new(), Route::Exact);
        }
        let state = self.read_state();
        let GraphState::Ready(graph) = &*state else {
            return (self.timed_exact(query, search, now), Route::Exact);
        };
        let fraction = self.admitted_fraction(search, now);
        if fraction < graph.params.exact_below {
            return (self.timed_exact(query, search, now), Route::Exact);
        }
        if let IndexKind::Auto { .. } = self.kind {
            let n = self.searches.fetch_add(1, AtomicOrdering::Relaxed);
            let costs = self.search_costs();
            let route = match costs.cheaper(self.items.len(), fraction) {
                // Not measured yet: exact first, then the graph.
                None if costs.exact_per_item.is_none() => Route::Exact,
                None => Route::Graph,
                Some(Route::Exact) if n % EXPLORE_EVERY == EXPLORE_EVERY - 1 => Route::Graph,
                Some(Route::Graph) if n % EXPLORE_EVERY == EXPLORE_EVERY - 1 => Route::Exact,
                Some(route) => route,
            };
            if route == Route::Exact {
                return (self.timed_exact(query, search, now), Route::Exact);
            }
        }
        let start = Instant::now();
        let ef = graph.params.ef_search.max(want);
        let admit = |node: u32| self.admits(node as usize, search, now);
        let mut ints = Vec::with_capacity(self.dimensions);
        let scale = quantize(query, &mut ints);
        let code = Code { ints: &ints, scale };
        let mut found = graph.search(&self.codes, code, ef, &admit);
        // Scored again on the full vectors: the walk's scores are close,
        // these are exact.
        for near in &mut found {
            near.score = dot(query, vector_of(&self.vectors, self.dimensions, near.node));
        }
        found.sort_by(|a, b| b.cmp(a));
        if found.len() < want {
            // The graph reached too few admitted items (a filter stricter
            // than its sample said, or a part of the graph cut off by
            // deletions): the exact answer, which is never short.
            return (
                self.nearest_exact(query, search, now),
                Route::GraphThenExact,
            );
        }
        {
            let unfiltered = start.elapsed().as_nanos() as f64 * f64::from(fraction.max(1e-6));
            let mut costs = self.costs.lock().unwrap_or_else(|e| e.into_inner());
            SearchCosts::record(&mut costs.graph_unfiltered, unfiltered);
        }
        let page = found
            .into_iter()
            .take(want)
            .skip(search.offset)
            .filter_map(|n| {
                self.items[n.node as usize]
                    .clone()
                    .map(|item| (item, n.score))
            })
            .collect();
        (page, Route::Graph)
    }

    /// The fraction of its items that `search` admits at `now`, estimated
    /// from up to 512 of them scattered over the index: what the choice of
    /// route weighs.
    pub fn admitted_fraction(&self, search: &Search, now: u64) -> f32 {
        const SAMPLE: usize = 512;
        let nodes = self.items.len();
        if nodes == 0 {
            return 0.0;
        }
        let seen = nodes.min(SAMPLE);
        let mut admitted = 0u32;
        for k in 0..seen {
            // Scattered by a multiplicative hash rather than a stride, which
            // a field cycling with the put order (`i % 10`) would alias.
            let node = if seen == nodes {
                k
            } else {
                ((k as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 11) as usize % nodes
            };
            if self.admits(node, search, now) {
                admitted += 1;
            }
        }
        admitted as f32 / seen as f32
    }

    /// How many of the nearest items a page of `search` needs: its offset
    /// and limit, at most every item the index holds (what the heaps and
    /// the walk are sized by, whatever offset a caller asks for), and none
    /// when the offset is past them all.
    fn wanted(&self, search: &Search) -> usize {
        if search.offset >= self.items.len() {
            return 0;
        }
        search
            .offset
            .saturating_add(search.limit)
            .min(self.items.len())
    }

    /// [`nearest`](Self::nearest) by comparing every admitted item: the
    /// true answer, which the graph's is measured against.
    pub fn nearest_exact(&self, query: &[f32], search: &Search, now: u64) -> Vec<(Arc<Item>, f32)> {
        let want = self.wanted(search);
        if want == 0 || query.len() != self.dimensions {
            return Vec::new();
        }
        let mut heap: BinaryHeap<Scored> = BinaryHeap::with_capacity(want + 1);
        for node in 0..self.items.len() {
            if !self.admits(node, search, now) {
                continue;
            }
            let score = dot(
                query,
                vector_of(&self.vectors, self.dimensions, node as u32),
            );
            if heap.len() < want {
                heap.push(Scored { score, slot: node });
            } else if heap.peek().is_some_and(|worst| score > worst.score) {
                heap.pop();
                heap.push(Scored { score, slot: node });
            }
        }
        let mut best = heap.into_vec();
        best.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.slot.cmp(&b.slot)));
        best.into_iter()
            .skip(search.offset)
            .filter_map(|s| self.items[s.slot].clone().map(|item| (item, s.score)))
            .collect()
    }
}
