//! Embeddings: `POST /embeddings`, which local servers (llama.cpp, vLLM,
//! Ollama, LM Studio) serve too.

use async_trait::async_trait;
use harness::llm::{Embedder, Embeddings, ModelError, Usage};
use harness_provider_http::endpoint;
use serde::{Deserialize, Serialize};

use crate::client::Client;

/// An embedding model of an OpenAI-compatible API; implements [`Embedder`].
///
/// Made by [`Client::embedding_model`]. Cheap to clone.
///
/// ```no_run
/// use harness::llm::Embedder;
///
/// # async fn demo() -> Result<(), harness::llm::ModelError> {
/// let model = harness_openai::Client::from_env()?.embedding_model("text-embedding-3-small");
/// let texts = ["tides follow the moon".to_owned(), "bees dance".to_owned()];
/// let embeddings = model.embed(&texts).await?;
/// assert_eq!(embeddings.vectors.len(), 2);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct EmbeddingModel {
    client: Client,
    model: String,
    dimensions: Option<u32>,
}

impl Client {
    /// An embedding model of this client, e.g. `"text-embedding-3-small"`.
    pub fn embedding_model(&self, model: impl Into<String>) -> EmbeddingModel {
        EmbeddingModel {
            client: self.clone(),
            model: model.into(),
            dimensions: None,
        }
    }
}

impl EmbeddingModel {
    /// Asks for vectors of this length (OpenAI's `dimensions`, which its
    /// `text-embedding-3` models honour; other servers may refuse it).
    pub fn dimensions(mut self, dimensions: u32) -> Self {
        self.dimensions = Some(dimensions);
        self
    }
}

#[derive(Serialize)]
struct EmbeddingRequest<'a> {
    model: &'a str,
    input: &'a [String],
    encoding_format: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    dimensions: Option<u32>,
}

#[derive(Deserialize)]
struct EmbeddingResponse {
    data: Vec<EmbeddingData>,
    #[serde(default)]
    usage: Option<EmbeddingUsage>,
}

#[derive(Deserialize)]
struct EmbeddingData {
    /// Which input this vector is for; servers may answer out of order.
    index: usize,
    embedding: Vec<f32>,
}

#[derive(Deserialize)]
struct EmbeddingUsage {
    #[serde(default)]
    prompt_tokens: u64,
}

#[async_trait]
impl Embedder for EmbeddingModel {
    async fn embed(&self, texts: &[String]) -> Result<Embeddings, ModelError> {
        if texts.is_empty() {
            return Ok(Embeddings::default());
        }
        let body = EmbeddingRequest {
            model: &self.model,
            input: texts,
            encoding_format: "float",
            dimensions: self.dimensions,
        };
        let url = endpoint(self.client.base_url(), "embeddings");
        let wire: EmbeddingResponse = self
            .client
            .inner
            .connection
            .post_json(&self.model, &url, &body)
            .await?;
        let mut slots: Vec<Option<Vec<f32>>> = vec![None; texts.len()];
        for item in wire.data {
            let slot = slots.get_mut(item.index).ok_or_else(|| {
                ModelError::malformed(format!(
                    "an embedding for input {} of {} inputs",
                    item.index,
                    texts.len()
                ))
            })?;
            if slot.replace(item.embedding).is_some() {
                return Err(ModelError::malformed(format!(
                    "two embeddings for input {}",
                    item.index
                )));
            }
        }
        let vectors = slots
            .into_iter()
            .enumerate()
            .map(|(i, v)| {
                v.ok_or_else(|| ModelError::malformed(format!("no embedding for input {i}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let usage = Usage::new(wire.usage.map_or(0, |u| u.prompt_tokens), 0);
        Embeddings::new(vectors, usage).checked(texts.len())
    }

    fn provider(&self) -> &str {
        "openai"
    }

    fn model_name(&self) -> &str {
        &self.model
    }
}
