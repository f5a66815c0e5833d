//! An embedder without a model: for tests and examples without a network.

use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;

use crate::llm::{Embedder, Embeddings, ModelError, Usage};

/// An [`Embedder`] that needs no model and no network: each word of a text
/// (lower-cased, split at anything not a letter or digit, of at least
/// [`min_word_len`](Self::min_word_len) characters) adds one to the number
/// its hash picks. It is to embedders what
/// [`ScriptedModel`](crate::llm::ScriptedModel) is to language models: for
/// tests and examples.
///
/// **It is not semantic.** Texts are close when they share words, and only
/// then: "the cat sat" and "a feline rested" are as far apart as any two
/// texts. The hash (64-bit FNV-1a, mixed) is fixed, so a text's vector is the same
/// on every machine and in every run. Every vector has a small constant in
/// its first number, so none is zero (a text with no words is close to
/// other such texts, far from the rest).
///
/// It counts the calls and texts it was asked to embed, so a test can check
/// batching and caching.
///
/// ```
/// use harness::llm::Embedder;
/// use harness::memory::{HashedWords, IndexConfig, Memory, Namespace, Search};
/// use serde_json::json;
/// use std::sync::Arc;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let words = Arc::new(HashedWords::new(64));
/// let memory = Memory::in_memory()
///     .with_index(IndexConfig::new(words.clone(), 64).fields(["text"]));
/// let notes = Namespace::new(["notes"])?;
/// memory.put(&notes, "tea", json!({"text": "green tea every morning"})).await?;
/// memory.put(&notes, "bike", json!({"text": "cycles to work in the rain"})).await?;
///
/// let hits = memory.search(&Search::under(notes).text("morning tea").limit(1)).await?;
/// assert_eq!(hits[0].item.key, "tea");
/// assert_eq!(words.calls(), 3); // two puts, one query
/// # Ok::<(), harness::memory::MemoryError>(())
/// # }).unwrap();
/// ```
#[derive(Debug)]
pub struct HashedWords {
    dimensions: usize,
    min_word_len: usize,
    calls: AtomicUsize,
    texts: AtomicUsize,
}

impl HashedWords {
    /// Vectors of `dimensions` numbers (at least 1), counting words of 3
    /// characters or more.
    pub fn new(dimensions: usize) -> Self {
        Self {
            dimensions: dimensions.max(1),
            min_word_len: 3,
            calls: AtomicUsize::new(0),
            texts: AtomicUsize::new(0),
        }
    }

    /// Counts only words of at least `chars` characters (default 3), so
    /// that short words ("a", "of", "the") do not make texts close.
    #[must_use]
    pub fn min_word_len(mut self, chars: usize) -> Self {
        self.min_word_len = chars;
        self
    }

    /// The vectors' length.
    pub fn dimensions(&self) -> usize {
        self.dimensions
    }

    /// The vector of one text, as [`embed`](Embedder::embed) gives it.
    pub fn vector(&self, text: &str) -> Vec<f32> {
        let mut vector = vec![0.0f32; self.dimensions];
        vector[0] = 0.01;
        for word in text
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| w.chars().count() >= self.min_word_len)
        {
            let hash = hash(&word.to_lowercase());
            // The remainder is below `dimensions`, a usize.
            let at = usize::try_from(hash % self.dimensions as u64).unwrap_or(0);
            vector[at] += 1.0;
        }
        vector
    }

    /// How many times [`embed`](Embedder::embed) was called with texts.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// How many texts it was asked to embed, over all calls.
    pub fn texts(&self) -> usize {
        self.texts.load(Ordering::SeqCst)
    }
}

/// FNV-1a of the bytes, then mixed (MurmurHash3's finalizer) so that its
/// low bits, which pick the number, are spread as well as its high ones.
fn hash(word: &str) -> u64 {
    let mut h = word.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

#[async_trait]
impl Embedder for HashedWords {
    async fn embed(&self, texts: &[String]) -> Result<Embeddings, ModelError> {
        if texts.is_empty() {
            return Ok(Embeddings::default());
        }
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.texts.fetch_add(texts.len(), Ordering::SeqCst);
        let vectors = texts.iter().map(|t| self.vector(t)).collect();
        Ok(Embeddings::new(vectors, Usage::default()))
    }

    fn provider(&self) -> &str {
        "offline"
    }

    fn model_name(&self) -> &str {
        "hashed-words"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cosine(a: &[f32], b: &[f32]) -> f32 {
        let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
        let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
        dot / (norm(a) * norm(b))
    }

    #[test]
    fn shared_words_are_close_and_case_and_punctuation_do_not_matter() {
        let words = HashedWords::new(64);
        assert_eq!(
            words.vector("Green TEA, every morning!"),
            words.vector("green tea every morning")
        );
        let near = cosine(
            &words.vector("green tea every morning"),
            &words.vector("morning tea"),
        );
        let far = cosine(
            &words.vector("green tea every morning"),
            &words.vector("cycles to work in the rain"),
        );
        assert!(near > 0.6 && far < near, "near {near}, far {far}");
    }

    #[test]
    fn the_same_text_has_the_same_vector_everywhere() {
        // Pinned: a change of hash would change every stored test vector.
        let words = HashedWords::new(64);
        let picked = |text: &str| -> Vec<usize> {
            let v = words.vector(text);
            (1..64).filter(|&i| v[i] > 0.0).collect()
        };
        assert_eq!(picked("amber"), vec![24]);
        assert_eq!(picked("basalt"), vec![54]);
        assert_eq!(words.vector("amber")[0], 0.01);
    }

    #[test]
    fn short_words_are_left_out_and_no_vector_is_zero() {
        let words = HashedWords::new(16).min_word_len(4);
        let mut only_first = vec![0.0f32; 16];
        only_first[0] = 0.01;
        assert_eq!(words.vector("a of the"), only_first);
        assert_eq!(words.vector(""), only_first);
        assert_ne!(words.vector("tide"), only_first);
    }

    #[tokio::test]
    async fn it_counts_calls_and_texts_and_makes_no_call_for_no_texts() {
        let words = HashedWords::new(8);
        let got = words
            .embed(&["one".to_owned(), "two".to_owned()])
            .await
            .unwrap();
        assert_eq!(got.vectors.len(), 2);
        assert!(got.checked(2).is_ok());
        words.embed(&[]).await.unwrap();
        assert_eq!((words.calls(), words.texts()), (1, 2));
    }
}
