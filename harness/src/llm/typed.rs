//! Typed answers: ask any model for a JSON value of a Rust type, validate it
//! on arrival, and repair it once.

use std::fmt;
use std::future::Future;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;

use crate::llm::LanguageModel;
use crate::llm::error::ModelError;
use crate::llm::message::Message;
use crate::llm::request::{ModelRequest, ResponseFormat};
use crate::llm::response::{ModelResponse, StopReason};
use crate::llm::usage::Usage;

/// How many calls [`LanguageModelExt::complete_typed`] makes at most: the
/// request, and one repair turn.
pub const TYPED_ATTEMPTS: u32 = 2;

/// A typed answer and what it cost.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TypedAnswer<T> {
    /// The answer, deserialized.
    pub value: T,
    /// The answer's text as the model sent it.
    pub raw: String,
    /// Tokens spent on every call made for it (the repair turn included).
    pub usage: Usage,
    /// How many calls it took: 1, or 2 when the first answer was repaired.
    pub attempts: u32,
}

/// Where and why an answer does not fit the type it was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SchemaMismatch {
    /// The JSON path of the offending value (`items[2].price`), or `.` for
    /// the whole answer (not JSON, cut off, wrong type at the top).
    pub path: String,
    /// What is wrong there.
    pub reason: String,
}

impl fmt::Display for SchemaMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at `{}`: {}", self.path, self.reason)
    }
}

/// Why [`LanguageModelExt::complete_typed`] gave no answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum TypedAnswerError {
    /// A call to the model failed (the request, or the repair turn).
    #[error("asking the model for a `{type_name}` failed: {source}")]
    Model {
        /// The Rust type asked for.
        type_name: String,
        /// The model's error.
        #[source]
        source: ModelError,
    },
    /// The model called tools instead of answering (the request offered
    /// some). Run them, append the results and ask again, or ask without
    /// tools.
    #[error(
        "the model called tools ({}) instead of giving a `{type_name}`; run them and ask again, or ask without tools",
        tool_names(response)
    )]
    ToolCalls {
        /// The Rust type asked for.
        type_name: String,
        /// The model's answer, with its tool calls.
        response: Box<ModelResponse>,
        /// Tokens spent on the calls made.
        usage: Usage,
    },
    /// The answer still did not fit the type after the repair turn.
    #[error(
        "the model's answer is not a valid `{type_name}` after {attempts} attempts, {mismatch}; its answer was: {}",
        excerpt(raw)
    )]
    Mismatch {
        /// The Rust type asked for.
        type_name: String,
        /// The last answer's text, as the model sent it.
        raw: String,
        /// Where and why it does not fit.
        mismatch: SchemaMismatch,
        /// How many calls were made.
        attempts: u32,
        /// Tokens spent on them.
        usage: Usage,
    },
}

fn tool_names(response: &ModelResponse) -> String {
    response
        .tool_calls()
        .map(|call| format!("`{}`", call.name))
        .collect::<Vec<_>>()
        .join(", ")
}

/// At most 300 characters of `raw`, for error messages.
fn excerpt(raw: &str) -> String {
    const LIMIT: usize = 300;
    match raw.char_indices().nth(LIMIT) {
        Some((end, _)) => format!("{:?}… ({} bytes)", &raw[..end], raw.len()),
        None => format!("{raw:?}"),
    }
}

/// Parses a model's answer as `T`.
///
/// Leading and trailing white space and a Markdown code fence around the
/// whole answer (```` ```json … ``` ````) are ignored, since models without
/// a native structured-output mode often add them. The error names the JSON
/// path of the value that does not fit.
///
/// ```
/// use harness::llm::parse_answer;
///
/// #[derive(Debug, serde::Deserialize)]
/// struct Point { x: i32, y: i32 }
///
/// let point: Point = parse_answer("```json\n{\"x\": 1, \"y\": 2}\n```").unwrap();
/// assert_eq!((point.x, point.y), (1, 2));
///
/// let error = parse_answer::<Point>("{\"x\": 1, \"y\": \"two\"}").unwrap_err();
/// assert_eq!(error.path, "y");
/// ```
pub fn parse_answer<T: DeserializeOwned>(raw: &str) -> Result<T, SchemaMismatch> {
    let text = strip_fence(raw.trim());
    if text.is_empty() {
        return Err(SchemaMismatch {
            path: ".".to_owned(),
            reason: "the answer is empty; expected a JSON value".to_owned(),
        });
    }
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let value: T = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        // A JSON object cut off before its next key ends in `?`.
        let path = error.path().to_string();
        let path = match path.strip_suffix(".?") {
            Some(parent) => parent.to_owned(),
            None if path == "?" => ".".to_owned(),
            None => path,
        };
        let inner = error.into_inner();
        let reason = if inner.is_eof() {
            format!("the JSON ends too early, it was cut off ({inner})")
        } else if inner.is_syntax() {
            format!("the answer is not valid JSON ({inner})")
        } else {
            inner.to_string()
        };
        SchemaMismatch { path, reason }
    })?;
    deserializer.end().map_err(|e| SchemaMismatch {
        path: ".".to_owned(),
        reason: format!("there is more after the JSON value ({e})"),
    })?;
    Ok(value)
}

/// The body of a Markdown code fence that wraps all of `text`, else `text`.
fn strip_fence(text: &str) -> &str {
    let Some(rest) = text.strip_prefix("```") else {
        return text;
    };
    let Some(body) = rest.strip_suffix("```") else {
        return text;
    };
    // Skip the info string (`json`) on the opening line.
    match body.find('\n') {
        Some(newline) => body[newline + 1..].trim(),
        None => body.trim(),
    }
}

/// The user message of the repair turn.
fn repair_prompt(format: &ResponseFormat, mismatch: &SchemaMismatch, cut_off: bool) -> String {
    let mut prompt = format!(
        "Your answer does not match the required JSON schema `{}`: {mismatch}.",
        format.name
    );
    if cut_off {
        prompt.push_str(" It was cut off at the token limit; answer more briefly.");
    }
    prompt.push_str(&format!(
        " Answer again with only a JSON value (no prose, no code fence) that matches this schema:\n{}",
        format.schema
    ));
    prompt
}

/// Typed answers for every [`LanguageModel`].
///
/// ```
/// use harness::llm::{Expect, LanguageModelExt, ModelRequest, ModelResponse, ScriptedModel};
/// use harness::schemars;
///
/// #[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
/// struct Weather { city: String, celsius: f64 }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), harness::llm::TypedAnswerError> {
/// let model = ScriptedModel::new([
///     // The first answer misses a field; the repair turn fixes it.
///     Expect::any().reply(ModelResponse::from_text(r#"{"city": "Paris"}"#)),
///     Expect::any().reply(ModelResponse::from_text(r#"{"city": "Paris", "celsius": 21.5}"#)),
/// ]);
/// let request = ModelRequest::builder().user("Weather in Paris, as JSON?").build();
/// let answer = model.complete_typed::<Weather>(&request).await?;
/// assert_eq!(answer.value.celsius, 21.5);
/// assert_eq!(answer.attempts, 2);
/// # Ok(())
/// # }
/// ```
pub trait LanguageModelExt: LanguageModel {
    /// Asks for an answer of type `T` and validates it.
    ///
    /// The request is sent with [`ModelRequest::response_format`] set to
    /// [`ResponseFormat::for_type::<T>()`](ResponseFormat::for_type) (unless
    /// it already has one), so providers with a native structured-output
    /// mode constrain the model. The answer's text is parsed with
    /// [`parse_answer`]; if it does not fit, one repair turn sends the
    /// answer and the mismatch back to the model, and if that answer does
    /// not fit either the result is [`TypedAnswerError::Mismatch`]. An
    /// answer that calls tools (when the request offers some) is
    /// [`TypedAnswerError::ToolCalls`].
    fn complete_typed<T>(
        &self,
        request: &ModelRequest,
    ) -> impl Future<Output = Result<TypedAnswer<T>, TypedAnswerError>> + Send
    where
        T: DeserializeOwned + JsonSchema + Send,
    {
        typed_answer(request, move |r: ModelRequest| async move {
            self.complete(&r).await
        })
    }
}

/// The typed-answer loop of [`LanguageModelExt::complete_typed`] over any
/// way of calling a model (`call`): the request with its response format,
/// one repair turn when the answer does not fit.
pub(crate) async fn typed_answer<T, F, Fut>(
    request: &ModelRequest,
    mut call: F,
) -> Result<TypedAnswer<T>, TypedAnswerError>
where
    T: DeserializeOwned + JsonSchema,
    F: FnMut(ModelRequest) -> Fut,
    Fut: Future<Output = Result<ModelResponse, ModelError>>,
{
    let type_name = crate::short_type_name::<T>();
    let mut request = request.clone();
    let format = request
        .response_format
        .get_or_insert_with(ResponseFormat::for_type::<T>)
        .clone();
    let mut usage = Usage::default();
    let mut attempts = 0;
    loop {
        attempts += 1;
        let response = call(request.clone())
            .await
            .map_err(|source| TypedAnswerError::Model {
                type_name: type_name.clone(),
                source,
            })?;
        usage += response.usage;
        if response.has_tool_calls() {
            return Err(TypedAnswerError::ToolCalls {
                type_name,
                response: Box::new(response),
                usage,
            });
        }
        let raw = response.text();
        let mismatch = match parse_answer::<T>(&raw) {
            Ok(value) => {
                return Ok(TypedAnswer {
                    value,
                    raw,
                    usage,
                    attempts,
                });
            }
            Err(mismatch) => mismatch,
        };
        tracing::debug!(%type_name, attempts, %mismatch, "typed answer does not fit");
        if attempts >= TYPED_ATTEMPTS {
            return Err(TypedAnswerError::Mismatch {
                type_name,
                raw,
                mismatch,
                attempts,
                usage,
            });
        }
        let cut_off = response.stop_reason == StopReason::MaxTokens;
        request.messages.push(Message::assistant(raw));
        request
            .messages
            .push(Message::user(repair_prompt(&format, &mismatch, cut_off)));
    }
}

impl<M: LanguageModel + ?Sized> LanguageModelExt for M {}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::llm::{Expect, ModelResponse, ScriptedModel};

    #[derive(Debug, PartialEq, serde::Deserialize, schemars::JsonSchema)]
    struct Item {
        name: String,
        price: f64,
    }

    #[derive(Debug, PartialEq, serde::Deserialize, schemars::JsonSchema)]
    struct Order {
        id: u32,
        items: Vec<Item>,
        note: Option<String>,
    }

    const GOOD: &str = r#"{"id": 7, "items": [{"name": "tea", "price": 2.5}], "note": null}"#;

    fn request() -> ModelRequest {
        ModelRequest::builder().user("The order, as JSON").build()
    }

    #[test]
    fn each_kind_of_bad_answer_names_where_and_why() {
        let cases: &[(&str, &str, &str)] = &[
            (
                r#"{"id": "7", "items": []}"#,
                "id",
                "invalid type: string \"7\", expected u32",
            ),
            (r#"{"items": []}"#, ".", "missing field `id`"),
            (
                r#"{"id": 7, "items": [{"name": "tea"}]}"#,
                "items[0]",
                "missing field `price`",
            ),
            (
                r#"{"id": 7, "items": [{"name": "tea", "price": "cheap"}]}"#,
                "items[0].price",
                "expected f64",
            ),
            ("Sure! Here is the order.", ".", "not valid JSON"),
            (
                r#"{"id": 7, "items": [{"name": "te"#,
                "items[0].name",
                "cut off",
            ),
            (
                r#"{"order": {"id": 7, "items": []}}"#,
                ".",
                "missing field `id`",
            ),
            ("", ".", "empty"),
            (r#"{"id": 7, "items": []} and more"#, ".", "more after"),
        ];
        for (raw, path, reason) in cases {
            let error = parse_answer::<Order>(raw).unwrap_err();
            assert_eq!(&error.path, path, "{raw}: {error}");
            assert!(error.reason.contains(reason), "{raw}: {error}");
        }
    }

    #[test]
    fn fences_and_white_space_are_ignored() {
        for raw in [
            format!("```json\n{GOOD}\n```"),
            format!("```\n{GOOD}\n```"),
            format!("  \n{GOOD}\n "),
        ] {
            assert_eq!(parse_answer::<Order>(&raw).unwrap().id, 7, "{raw}");
        }
    }

    #[test]
    fn format_names_are_cleaned_for_providers() {
        assert_eq!(
            ResponseFormat::new("my answer!", serde_json::json!({})).name,
            "my_answer_"
        );
        assert_eq!(
            ResponseFormat::new("", serde_json::json!({})).name,
            "answer"
        );
        assert_eq!(
            ResponseFormat::new("x".repeat(80), serde_json::json!({}))
                .name
                .len(),
            64
        );
        assert_eq!(
            ResponseFormat::for_type::<Vec<Item>>().name,
            "Array_of_Item"
        );
    }

    #[test]
    fn non_object_answers_wrap_and_unwrap() {
        let object = ResponseFormat::for_type::<Order>();
        assert!(object.is_object());
        assert_eq!(object.object_schema(), object.schema);
        assert_eq!(object.unwrap_answer(GOOD), GOOD);

        let list = ResponseFormat::for_type::<Vec<Item>>();
        assert!(!list.is_object());
        let wrapped = list.object_schema();
        assert!(wrapped["$defs"]["Item"].is_object(), "{wrapped}");
        assert!(wrapped["properties"]["value"].get("$defs").is_none());
        assert_eq!(
            list.unwrap_answer(r#"{"value": [{"name": "tea", "price": 1.0}]}"#),
            r#"[{"name":"tea","price":1.0}]"#
        );
        // Anything else comes back as it was, for the parser to report.
        for raw in [
            r#"{"value": [1"#,
            "[1, 2]",
            r#"{"value": 1, "more": 2}"#,
            "nope",
        ] {
            assert_eq!(list.unwrap_answer(raw), raw);
        }
    }

    #[tokio::test]
    async fn a_good_first_answer_needs_no_repair_and_the_request_carries_the_format() {
        let model = ScriptedModel::new([
            Expect::any().reply(ModelResponse::from_text(GOOD).with_usage(Usage::new(10, 4)))
        ]);
        let answer = model.complete_typed::<Order>(&request()).await.unwrap();
        assert_eq!(answer.value.items[0].name, "tea");
        assert_eq!((answer.attempts, answer.usage), (1, Usage::new(10, 4)));
        let sent = &model.requests()[0];
        let format = sent.response_format.as_ref().unwrap();
        assert_eq!(format.name, "Order");
        assert_eq!(format.schema["properties"]["id"]["type"], "integer");
    }

    #[tokio::test]
    async fn a_mismatch_gets_one_repair_turn_with_the_answer_and_the_error() {
        let bad = r#"{"id": 7, "items": [{"name": "tea", "price": "cheap"}]}"#;
        let model = ScriptedModel::new([
            Expect::any().reply(ModelResponse::from_text(bad).with_usage(Usage::new(10, 4))),
            Expect::any().reply(ModelResponse::from_text(GOOD).with_usage(Usage::new(30, 5))),
        ]);
        let answer = model.complete_typed::<Order>(&request()).await.unwrap();
        assert_eq!(answer.attempts, 2);
        assert_eq!(answer.usage, Usage::new(40, 9));
        let repair = &model.requests()[1];
        assert_eq!(repair.messages.len(), 3);
        assert_eq!(repair.messages[1], Message::assistant(bad));
        let prompt = repair.messages[2].text();
        assert!(prompt.contains("at `items[0].price`"), "{prompt}");
        assert!(prompt.contains("\"properties\""), "{prompt}");
    }

    #[tokio::test]
    async fn a_second_mismatch_is_a_typed_error_with_the_raw_answer() {
        let model = ScriptedModel::new([
            Expect::any().reply(ModelResponse::from_text("not json")),
            Expect::any().reply(ModelResponse::from_text(r#"{"id": -1, "items": []}"#)),
        ]);
        let error = model.complete_typed::<Order>(&request()).await.unwrap_err();
        let TypedAnswerError::Mismatch {
            raw,
            mismatch,
            attempts,
            ..
        } = &error
        else {
            panic!("{error}");
        };
        assert_eq!((raw.as_str(), *attempts), (r#"{"id": -1, "items": []}"#, 2));
        assert_eq!(mismatch.path, "id");
        let message = error.to_string();
        assert!(
            message.contains("Order") && message.contains("at `id`"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn tool_calls_instead_of_an_answer_are_handed_back() {
        let call = crate::llm::ToolCall::new("c1", "lookup", serde_json::json!({ "id": 7 }));
        let model = ScriptedModel::new([Expect::any()
            .reply(ModelResponse::from_tool_call(call.clone()).with_usage(Usage::new(5, 2)))]);
        let error = model.complete_typed::<Order>(&request()).await.unwrap_err();
        let TypedAnswerError::ToolCalls {
            response, usage, ..
        } = &error
        else {
            panic!("{error}");
        };
        assert_eq!(response.tool_calls().next(), Some(&call));
        assert_eq!(*usage, Usage::new(5, 2));
        assert!(error.to_string().contains("`lookup`"), "{error}");
        assert_eq!(model.requests().len(), 1, "no repair turn for tool calls");
    }

    #[tokio::test]
    async fn shared_and_unsized_models_answer_typed_too() {
        let model: std::sync::Arc<dyn crate::llm::LanguageModel> =
            std::sync::Arc::new(ScriptedModel::new([
                Expect::any().reply(ModelResponse::from_text(GOOD)),
                Expect::any().reply(ModelResponse::from_text(GOOD)),
            ]));
        assert_eq!(
            model
                .complete_typed::<Order>(&request())
                .await
                .unwrap()
                .value
                .id,
            7
        );
        let unsized_model: &dyn crate::llm::LanguageModel = &*model;
        assert_eq!(
            unsized_model
                .complete_typed::<Order>(&request())
                .await
                .unwrap()
                .value
                .id,
            7
        );
    }

    #[tokio::test]
    async fn a_failed_call_is_a_model_error() {
        let model = ScriptedModel::new([Expect::any().fail(ModelError::Auth {
            message: "bad key".into(),
        })]);
        let error = model.complete_typed::<Order>(&request()).await.unwrap_err();
        assert!(
            matches!(
                &error,
                TypedAnswerError::Model {
                    source: ModelError::Auth { .. },
                    ..
                }
            ),
            "{error}"
        );
    }
}
