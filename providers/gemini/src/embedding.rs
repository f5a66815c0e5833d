//! Embeddings: `POST models/{model}:batchEmbedContents`.

use async_trait::async_trait;
use harness::llm::{Embedder, Embeddings, ModelError, Usage};
use harness_provider_http::endpoint;
use serde::{Deserialize, Serialize};

use crate::client::Client;
use crate::completion::PROVIDER;

/// A Gemini embedding model (e.g. `"gemini-embedding-001"`); implements
/// [`Embedder`], so it can index [`harness::memory::Memory`].
///
/// Made by [`Client::embedding_model`]. Cheap to clone. All the texts of
/// one [`embed`](Embedder::embed) call go in one `batchEmbedContents`
/// request, each as one content of one text part. The answer is checked
/// before it is handed on: one vector per text, each of
/// [`dimensions`](Self::dimensions) numbers when those were asked for (of
/// one length otherwise), every number finite; anything else is a
/// [`ModelError::MalformedResponse`] naming what was wrong.
///
/// ```no_run
/// use harness::llm::Embedder;
///
/// # async fn demo() -> Result<(), harness::llm::ModelError> {
/// let model = harness_gemini::Client::from_env()?
///     .embedding_model("gemini-embedding-001")
///     .dimensions(768)
///     .task_type("RETRIEVAL_DOCUMENT");
/// let texts = ["tides follow the moon".to_owned(), "bees dance".to_owned()];
/// let embeddings = model.embed(&texts).await?;
/// assert_eq!(embeddings.vectors.len(), 2);
/// assert_eq!(embeddings.dimensions(), Some(768));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct EmbeddingModel {
    client: Client,
    model: String,
    dimensions: Option<u32>,
    task_type: Option<String>,
}

impl Client {
    /// An embedding model of this client, e.g. `"gemini-embedding-001"`
    /// (the API's own spelling, `"models/gemini-embedding-001"`, works
    /// too).
    pub fn embedding_model(&self, model: impl Into<String>) -> EmbeddingModel {
        let model = model.into();
        let model = model
            .strip_prefix("models/")
            .map(str::to_owned)
            .unwrap_or(model);
        EmbeddingModel {
            client: self.clone(),
            model,
            dimensions: None,
            task_type: None,
        }
    }
}

impl EmbeddingModel {
    /// Asks for vectors of this length (Gemini's `outputDimensionality`;
    /// `gemini-embedding-001` answers 3 072 numbers by default and takes
    /// 768 or 1 536 too). An answer of another length is then a
    /// [`ModelError::MalformedResponse`].
    pub fn dimensions(mut self, dimensions: u32) -> Self {
        self.dimensions = Some(dimensions);
        self
    }

    /// Tells Gemini what the vectors are for (`taskType`):
    /// `"RETRIEVAL_DOCUMENT"`, `"RETRIEVAL_QUERY"`, `"SEMANTIC_SIMILARITY"`,
    /// `"CLASSIFICATION"`, `"CLUSTERING"`, `"QUESTION_ANSWERING"`,
    /// `"FACT_VERIFICATION"` or `"CODE_RETRIEVAL_QUERY"`. Sent as given.
    /// Memory embeds items and queries with one embedder, so
    /// `"SEMANTIC_SIMILARITY"` (or none) suits it.
    pub fn task_type(mut self, task_type: impl Into<String>) -> Self {
        self.task_type = Some(task_type.into());
        self
    }

    fn url(&self) -> String {
        endpoint(
            self.client.base_url(),
            &format!("models/{}:batchEmbedContents", self.model),
        )
    }
}

#[derive(Serialize)]
struct BatchRequest<'a> {
    requests: Vec<EmbedRequest<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EmbedRequest<'a> {
    /// `models/{model}`: the API wants each request to name the model of
    /// the URL.
    model: &'a str,
    content: Content<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    task_type: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output_dimensionality: Option<u32>,
}

#[derive(Serialize)]
struct Content<'a> {
    parts: [Part<'a>; 1],
}

#[derive(Serialize)]
struct Part<'a> {
    text: &'a str,
}

#[derive(Deserialize)]
struct BatchResponse {
    embeddings: Vec<ContentEmbedding>,
}

#[derive(Deserialize)]
struct ContentEmbedding {
    values: Vec<f32>,
}

#[async_trait]
impl Embedder for EmbeddingModel {
    async fn embed(&self, texts: &[String]) -> Result<Embeddings, ModelError> {
        if texts.is_empty() {
            return Ok(Embeddings::default());
        }
        let model = format!("models/{}", self.model);
        let body = BatchRequest {
            requests: texts
                .iter()
                .map(|text| EmbedRequest {
                    model: &model,
                    content: Content {
                        parts: [Part { text }],
                    },
                    task_type: self.task_type.as_deref(),
                    output_dimensionality: self.dimensions,
                })
                .collect(),
        };
        let wire: BatchResponse = self
            .client
            .inner
            .post_json(&self.model, &self.url(), &body)
            .await?;
        let vectors = wire.embeddings.into_iter().map(|e| e.values).collect();
        // Gemini reports no tokens for embeddings.
        let embeddings = Embeddings::new(vectors, Usage::default())
            .checked(texts.len())
            .map_err(|e| in_answer(&model, e))?;
        if let (Some(want), Some(got)) = (self.dimensions, embeddings.dimensions())
            && got != want as usize
        {
            return Err(ModelError::malformed(format!(
                "the embeddings of {model}:batchEmbedContents have {got} numbers; \
                 {want} were asked for (outputDimensionality)"
            )));
        }
        Ok(embeddings)
    }

    fn provider(&self) -> &str {
        PROVIDER
    }

    fn model_name(&self) -> &str {
        &self.model
    }
}

/// Says which answer a malformed one was.
fn in_answer(model: &str, error: ModelError) -> ModelError {
    match error {
        ModelError::MalformedResponse { message } => ModelError::malformed(format!(
            "{message}, in the answer of {model}:batchEmbedContents"
        )),
        other => other,
    }
}
