//! The in-process vector index behind search by text: which items are
//! closest to a query's embedding, among those a search admits.

use super::types::{Item, Search};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;

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
    // Four lanes: lets the compiler keep four sums in registers.
    let mut sums = [0.0f32; 4];
    let (ca, cb) = (a.chunks_exact(4), b.chunks_exact(4));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..4 {
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

/// Items with their vectors, searched exactly: every admitted item's
/// similarity computed, the best kept. Holds the items themselves, so
/// that filters are judged without a trip to the backend.
#[derive(Debug, Default)]
pub struct ExactIndex {
    dimensions: usize,
    /// Vectors, `dimensions` numbers per slot.
    vectors: Vec<f32>,
    items: Vec<Option<Arc<Item>>>,
    slots: HashMap<(Vec<String>, String), usize>,
    free: Vec<usize>,
}

impl ExactIndex {
    /// An empty index of vectors of `dimensions` numbers.
    pub fn new(dimensions: usize) -> Self {
        Self {
            dimensions,
            ..Self::default()
        }
    }

    /// How many items it holds.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Puts `item` with its unit `vector` (of the index's length), or
    /// removes the item when `vector` is `None`.
    pub fn put(&mut self, item: Item, vector: Option<&[f32]>) {
        let key = (item.namespace.labels().to_vec(), item.key.clone());
        let Some(vector) = vector.filter(|v| v.len() == self.dimensions) else {
            self.remove_key(&key);
            return;
        };
        let slot = match self.slots.get(&key) {
            Some(&slot) => slot,
            None => {
                let slot = self.free.pop().unwrap_or(self.items.len());
                if slot == self.items.len() {
                    self.items.push(None);
                    self.vectors
                        .resize(self.vectors.len() + self.dimensions, 0.0);
                }
                self.slots.insert(key, slot);
                slot
            }
        };
        let at = slot * self.dimensions;
        self.vectors[at..at + self.dimensions].copy_from_slice(vector);
        self.items[slot] = Some(Arc::new(item));
    }

    /// Removes the item at `namespace`/`key`.
    pub fn remove(&mut self, namespace: &[String], key: &str) {
        self.remove_key(&(namespace.to_vec(), key.to_owned()));
    }

    /// Sets the expiry of the item at `namespace`/`key`, if it is held.
    pub fn touch(&mut self, namespace: &[String], key: &str, expires_at: u64) {
        if let Some(&slot) = self.slots.get(&(namespace.to_vec(), key.to_owned()))
            && let Some(item) = self.items[slot].as_mut()
        {
            Arc::make_mut(item).expires_at = Some(expires_at);
        }
    }

    fn remove_key(&mut self, key: &(Vec<String>, String)) {
        if let Some(slot) = self.slots.remove(key) {
            self.items[slot] = None;
            self.free.push(slot);
        }
    }

    /// The `search.offset + search.limit` items closest to `query` (a unit
    /// vector) among those `search` admits and live at `now`, best first,
    /// with their similarity; then the page asked for.
    pub fn nearest(&self, query: &[f32], search: &Search, now: u64) -> Vec<(Arc<Item>, f32)> {
        let want = search.offset.saturating_add(search.limit);
        if want == 0 || query.len() != self.dimensions {
            return Vec::new();
        }
        let mut heap: BinaryHeap<Scored> = BinaryHeap::with_capacity(want + 1);
        for (slot, item) in self.items.iter().enumerate() {
            let Some(item) = item else { continue };
            if item.expires_at.is_some_and(|at| now >= at) || !search.admits(item) {
                continue;
            }
            let at = slot * self.dimensions;
            let score = dot(query, &self.vectors[at..at + self.dimensions]);
            if heap.len() < want {
                heap.push(Scored { score, slot });
            } else if heap.peek().is_some_and(|worst| score > worst.score) {
                heap.pop();
                heap.push(Scored { score, slot });
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
