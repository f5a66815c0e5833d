//! A model that follows a script: for tests and examples without a network.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;

use crate::llm::error::ModelError;
use crate::llm::message::{ContentPart, Message, Role};
use crate::llm::request::ModelRequest;
use crate::llm::response::ModelResponse;
use crate::llm::stream::{ModelStream, StreamEvent, collect_stream};
use crate::llm::{LanguageModel, ToolSpec};

type Check = Box<dyn Fn(&ModelRequest) -> Result<(), String> + Send + Sync>;

/// What one scripted turn expects of the request it answers. Start with
/// [`Expect::any`], add conditions, and finish with an answer
/// ([`Expect::reply`], [`Expect::fail`], [`Expect::stream`]) to get a [`Turn`].
///
/// ```
/// use harness::llm::{Expect, ModelResponse, Role};
///
/// let turn = Expect::any()
///     .last_role(Role::User)
///     .last_message_contains("weather")
///     .offers_tool("get_weather")
///     .check("at most 10 messages", |request| request.messages.len() <= 10)
///     .reply(ModelResponse::from_text("Sunny."));
/// # let _ = turn;
/// ```
pub struct Expect {
    checks: Vec<(String, Check)>,
}

impl fmt::Debug for Expect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.checks.iter().map(|(description, _)| description))
            .finish()
    }
}

impl Expect {
    /// Accepts any request.
    pub fn any() -> Self {
        Self { checks: Vec::new() }
    }

    fn add(
        mut self,
        description: String,
        check: impl Fn(&ModelRequest) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.checks.push((description, Box::new(check)));
        self
    }

    /// Requires `predicate` to hold; `description` names it in the error when
    /// it does not.
    pub fn check(
        self,
        description: impl Into<String>,
        predicate: impl Fn(&ModelRequest) -> bool + Send + Sync + 'static,
    ) -> Self {
        let description = description.into();
        let message = format!("expected {description}, but the request does not satisfy it");
        self.add(description, move |request| {
            if predicate(request) {
                Ok(())
            } else {
                Err(message.clone())
            }
        })
    }

    /// Requires the last message's text (text parts, tool results and tool
    /// call arguments) to contain `needle`.
    pub fn last_message_contains(self, needle: impl Into<String>) -> Self {
        let needle = needle.into();
        self.add(
            format!("last message contains {needle:?}"),
            move |request| {
                let text = request
                    .last_message()
                    .map(searchable_text)
                    .unwrap_or_default();
                if text.contains(&needle) {
                    Ok(())
                } else {
                    Err(format!(
                        "expected the last message to contain {needle:?}, but it reads {text:?}"
                    ))
                }
            },
        )
    }

    /// Requires some message's text to contain `needle`.
    pub fn any_message_contains(self, needle: impl Into<String>) -> Self {
        let needle = needle.into();
        self.add(
            format!("some message contains {needle:?}"),
            move |request| {
                if request
                    .messages
                    .iter()
                    .any(|m| searchable_text(m).contains(&needle))
                {
                    Ok(())
                } else {
                    Err(format!(
                        "expected some message to contain {needle:?}, but none does"
                    ))
                }
            },
        )
    }

    /// Requires the last message to be from `role`.
    pub fn last_role(self, role: Role) -> Self {
        self.add(
            format!("last message from {role:?}"),
            move |request| match request.last_message().map(|m| m.role) {
                Some(last) if last == role => Ok(()),
                Some(last) => Err(format!(
                    "expected the last message to be from {role:?}, but it is from {last:?}"
                )),
                None => Err(format!(
                    "expected the last message to be from {role:?}, but there are no messages"
                )),
            },
        )
    }

    /// Requires a tool named `name` among the tools offered.
    pub fn offers_tool(self, name: impl Into<String>) -> Self {
        let name = name.into();
        self.add(format!("tool {name:?} offered"), move |request| {
            if request.tools.iter().any(|tool| tool.name == name) {
                Ok(())
            } else {
                Err(format!(
                    "expected tool {name:?} to be offered, but the tools are [{}]",
                    tool_names(&request.tools)
                ))
            }
        })
    }

    /// Requires that no tools are offered.
    pub fn offers_no_tools(self) -> Self {
        self.add("no tools offered".to_owned(), |request| {
            if request.tools.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "expected no tools to be offered, but the tools are [{}]",
                    tool_names(&request.tools)
                ))
            }
        })
    }

    /// Answers with `response` (streamed as its events if the caller streams).
    pub fn reply(self, response: ModelResponse) -> Turn {
        Turn {
            expect: self,
            answer: Answer::Reply(response),
        }
    }

    /// Answers with `error`.
    pub fn fail(self, error: ModelError) -> Turn {
        Turn {
            expect: self,
            answer: Answer::Fail(error),
        }
    }

    /// Answers with these events (collected into a response if the caller
    /// does not stream).
    pub fn stream(self, events: impl IntoIterator<Item = StreamEvent>) -> Turn {
        self.stream_results(events.into_iter().map(Ok))
    }

    /// Answers with these stream items; an `Err` item simulates a stream that
    /// breaks mid-way.
    pub fn stream_results(
        self,
        items: impl IntoIterator<Item = Result<StreamEvent, ModelError>>,
    ) -> Turn {
        Turn {
            expect: self,
            answer: Answer::Stream(items.into_iter().collect()),
        }
    }

    fn verify(&self, request: &ModelRequest) -> Result<(), String> {
        self.checks.iter().try_for_each(|(_, check)| check(request))
    }
}

fn tool_names(tools: &[ToolSpec]) -> String {
    tools
        .iter()
        .map(|t| t.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Text of a message for matching: its text, tool results and tool calls.
fn searchable_text(message: &Message) -> String {
    let mut text = String::new();
    for part in &message.content {
        match part {
            ContentPart::Text { text: t } => text.push_str(t),
            ContentPart::ToolResult(result) => text.push_str(&result.content),
            ContentPart::ToolCall(call) => {
                text.push_str(&call.name);
                text.push_str(&call.arguments.to_string());
            }
            _ => {}
        }
    }
    text
}

#[derive(Debug)]
enum Answer {
    Reply(ModelResponse),
    Fail(ModelError),
    Stream(Vec<Result<StreamEvent, ModelError>>),
}

/// One scripted exchange: what the request must look like and the answer.
/// Made by [`Expect`].
#[derive(Debug)]
pub struct Turn {
    expect: Expect,
    answer: Answer,
}

#[derive(Debug, Default)]
struct Script {
    turns: VecDeque<Turn>,
    requests: Vec<ModelRequest>,
}

/// A [`LanguageModel`] that answers from a queue of [`Turn`]s, in order, like
/// a mock handle: each request is checked against the next turn's
/// expectations and gets its answer.
///
/// A request past the end of the script, or one that fails its turn's
/// expectations, gets a [`ModelError::ScriptMismatch`] naming the turn
/// (counted from 1); the turn is used up either way.
///
/// ```
/// use harness::llm::{Expect, LanguageModel, ModelRequest, ModelResponse, ScriptedModel, ToolCall};
/// use serde_json::json;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let model = ScriptedModel::new([
///     Expect::any()
///         .last_message_contains("Paris")
///         .reply(ModelResponse::from_tool_call(ToolCall::new("c1", "get_weather", json!({ "city": "Paris" })))),
///     Expect::any()
///         .last_message_contains("18")
///         .reply(ModelResponse::from_text("It is 18°C in Paris.")),
/// ]);
/// let first = model.complete(&ModelRequest::builder().user("Weather in Paris?").build()).await;
/// assert!(first.unwrap().has_tool_calls());
/// assert_eq!(model.remaining(), 1);
/// # }
/// ```
#[derive(Debug, Default)]
pub struct ScriptedModel {
    script: Mutex<Script>,
}

impl ScriptedModel {
    /// A model that plays `turns` in order.
    pub fn new(turns: impl IntoIterator<Item = Turn>) -> Self {
        Self {
            script: Mutex::new(Script {
                turns: turns.into_iter().collect(),
                requests: Vec::new(),
            }),
        }
    }

    /// Appends a turn to the script (also while the model is in use).
    pub fn push(&self, turn: Turn) {
        self.lock().turns.push_back(turn);
    }

    /// How many turns are left.
    pub fn remaining(&self) -> usize {
        self.lock().turns.len()
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<ModelRequest> {
        self.lock().requests.clone()
    }

    fn lock(&self) -> MutexGuard<'_, Script> {
        // A panic in another test thread must not hide this model's script.
        self.script
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn next_answer(&self, request: &ModelRequest) -> Result<Answer, ModelError> {
        let mut script = self.lock();
        script.requests.push(request.clone());
        let turn = script.requests.len();
        let Some(Turn { expect, answer }) = script.turns.pop_front() else {
            return Err(ModelError::ScriptMismatch {
                turn,
                message: format!(
                    "the script has no turn left for this request (its last message reads {:?})",
                    request
                        .last_message()
                        .map(searchable_text)
                        .unwrap_or_default()
                ),
            });
        };
        drop(script);
        expect
            .verify(request)
            .map_err(|message| ModelError::ScriptMismatch { turn, message })?;
        Ok(answer)
    }
}

#[async_trait]
impl LanguageModel for ScriptedModel {
    async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        match self.next_answer(request)? {
            Answer::Reply(response) => Ok(response),
            Answer::Fail(error) => Err(error),
            Answer::Stream(items) => collect_stream(futures::stream::iter(items)).await,
        }
    }

    async fn stream(&self, request: &ModelRequest) -> Result<ModelStream, ModelError> {
        match self.next_answer(request)? {
            Answer::Reply(response) => Ok(response.into_stream()),
            Answer::Fail(error) => Err(error),
            Answer::Stream(items) => Ok(Box::pin(futures::stream::iter(items))),
        }
    }

    fn provider(&self) -> &str {
        "scripted"
    }

    fn model_name(&self) -> &str {
        "scripted"
    }
}
