//! Embeddings: texts turned into vectors, for semantic search.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

use super::{ModelError, Usage};

/// Vectors for texts, in the order of the texts, and the tokens spent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Embeddings {
    /// One vector per text, each of the same length.
    pub vectors: Vec<Vec<f32>>,
    /// Tokens read (embeddings generate none).
    #[serde(default)]
    pub usage: Usage,
}

impl Embeddings {
    /// Embeddings with the given vectors and usage.
    pub fn new(vectors: Vec<Vec<f32>>, usage: Usage) -> Self {
        Self { vectors, usage }
    }

    /// The vectors' length; `None` when there are none.
    pub fn dimensions(&self) -> Option<usize> {
        self.vectors.first().map(Vec::len)
    }

    /// Checks what a provider answered for `texts` texts: one vector per
    /// text, all of one length, none empty, every number finite. A
    /// provider calls it before handing the vectors on, so that a short or
    /// ragged answer is a [`ModelError::MalformedResponse`], never a wrong
    /// match between a text and a vector.
    ///
    /// ```
    /// use harness::llm::{Embeddings, Usage};
    ///
    /// let ok = Embeddings::new(vec![vec![0.1, 0.2], vec![0.3, 0.4]], Usage::default());
    /// assert!(ok.checked(2).is_ok());
    /// let ragged = Embeddings::new(vec![vec![0.1, 0.2], vec![0.3]], Usage::default());
    /// assert!(ragged.checked(2).unwrap_err().to_string().contains("vector 1 has 1"));
    /// ```
    pub fn checked(self, texts: usize) -> Result<Self, ModelError> {
        if self.vectors.len() != texts {
            return Err(ModelError::malformed(format!(
                "{} embedding vectors for {texts} texts",
                self.vectors.len()
            )));
        }
        let Some(dimensions) = self.dimensions() else {
            return Ok(self);
        };
        if dimensions == 0 {
            return Err(ModelError::malformed("an embedding vector is empty"));
        }
        for (i, vector) in self.vectors.iter().enumerate() {
            if vector.len() != dimensions {
                return Err(ModelError::malformed(format!(
                    "embedding vector {i} has {} numbers, vector 0 has {dimensions}",
                    vector.len()
                )));
            }
            if let Some(at) = vector.iter().position(|x| !x.is_finite()) {
                return Err(ModelError::malformed(format!(
                    "embedding vector {i} has a number that is not finite at {at}"
                )));
            }
        }
        Ok(self)
    }
}

/// A model that turns texts into vectors, whose closeness (cosine) stands
/// for closeness of meaning. Implemented by the providers that have
/// embeddings (`harness_openai::EmbeddingModel` serves OpenAI and local
/// OpenAI-compatible servers); held as `Arc<dyn Embedder>`.
#[async_trait]
pub trait Embedder: Send + Sync {
    /// The vectors of `texts`, one per text, in order. No texts, no call.
    async fn embed(&self, texts: &[String]) -> Result<Embeddings, ModelError>;

    /// The provider's name, for logs and traces (e.g. `"openai"`).
    fn provider(&self) -> &str {
        "custom"
    }

    /// The model's name, for logs and traces.
    fn model_name(&self) -> &str {
        "unknown"
    }
}

#[async_trait]
impl<E: Embedder + ?Sized> Embedder for Arc<E> {
    async fn embed(&self, texts: &[String]) -> Result<Embeddings, ModelError> {
        (**self).embed(texts).await
    }

    fn provider(&self) -> &str {
        (**self).provider()
    }

    fn model_name(&self) -> &str {
        (**self).model_name()
    }
}
