//! The conversation as units: a [`Transcript`] never splits an assistant
//! message from the results of its tool calls.

use harness::llm::{ContentPart, Message, Role, ToolCall, ToolResult};
use harness::state::reduce::Appendable;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// One unit of a [`Transcript`]: what working memory keeps or evicts whole.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Unit {
    /// The unit's id in its transcript, given when it was appended.
    pub id: u64,
    /// A pinned unit is never evicted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pinned: bool,
    /// What it holds.
    pub body: UnitBody,
}

/// What a [`Unit`] holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum UnitBody {
    /// A message on its own: from the user, or a system note.
    Message {
        /// The message.
        message: Message,
    },
    /// An assistant message with the results of its tool calls.
    Turn(Turn),
    /// A summary of evicted units, written by a model.
    Summary {
        /// The summary.
        text: String,
        /// How many units it stands for, earlier summaries' included.
        replaced: u64,
    },
}

/// An assistant message and the results of its tool calls: one unit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Turn {
    /// The assistant's message, tool calls included.
    pub message: Message,
    /// The results of its calls, one per call, in the order they arrived.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub results: Vec<ToolResult>,
    /// The arguments the model first proposed, by call id, for calls whose
    /// arguments a person edited before they ran.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub proposed: BTreeMap<String, Value>,
}

impl Turn {
    /// The tool calls of the assistant's message, in order.
    pub fn calls(&self) -> impl Iterator<Item = &ToolCall> {
        self.message.tool_calls()
    }

    /// The result of call `id`, if it has one.
    pub fn result(&self, id: &str) -> Option<&ToolResult> {
        self.results.iter().find(|r| r.call_id == id)
    }

    /// The calls that have no result yet, in order.
    pub fn pending(&self) -> Vec<&ToolCall> {
        self.calls()
            .filter(|c| self.result(&c.id).is_none())
            .collect()
    }

    /// Whether every call has its result.
    pub fn is_complete(&self) -> bool {
        self.pending().is_empty()
    }

    /// The turn as messages for a model: the assistant's message, then one
    /// tool message with the results in the order of the calls.
    fn render(&self, out: &mut Vec<Message>) {
        out.push(self.message.clone());
        let results: Vec<ToolResult> = self
            .calls()
            .filter_map(|c| self.result(&c.id).cloned())
            .collect();
        if !results.is_empty() {
            out.push(Message::tool_results(results));
        }
    }
}

/// A change to a transcript, carried by an update (see [`Transcript`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Change {
    /// Results for calls, each attached to the turn that made the call.
    Results { results: Vec<ToolResult> },
    /// New arguments for a call that has no result yet.
    Edit { call_id: String, arguments: Value },
    /// Units removed, with a summary in the place of the first.
    Evict {
        units: Vec<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        summary: Option<String>,
    },
    /// A unit pinned or unpinned.
    Pin { unit: u64, pinned: bool },
}

/// The conversation of an agent as [`Unit`]s, oldest first.
///
/// A transcript is its own update: a transcript field with the `append`
/// reducer (`#[field(reduce = append)]`) applies the update's changes —
/// results attached to the turns that made the calls, edited arguments,
/// evictions — then appends the update's units after its own (giving them
/// new ids). A step builds such an update with the methods below or the
/// kit's steps build it for it; no change can split a turn from its
/// results, and a result for a call the transcript does not hold, or a
/// second result for the same call, is dropped.
///
/// ```
/// use harness_kit::Transcript;
///
/// let transcript = Transcript::new().pinned_user("Keep answers short.").user("What is 2 + 2?");
/// assert_eq!(transcript.units().len(), 2);
/// assert!(transcript.units()[0].pinned);
/// assert_eq!(transcript.messages().len(), 2);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Transcript {
    #[serde(default)]
    units: Vec<Unit>,
    #[serde(default)]
    next_id: u64,
    /// Changes to apply: only an update carries them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    changes: Vec<Change>,
}

impl Transcript {
    /// An empty transcript.
    pub fn new() -> Self {
        Self::default()
    }

    fn push(mut self, pinned: bool, body: UnitBody) -> Self {
        self.units.push(Unit {
            id: self.next_id,
            pinned,
            body,
        });
        self.next_id += 1;
        self
    }

    /// Appends a message as a unit of its own, builder-style. An assistant
    /// message with tool calls becomes a [`Turn`] waiting for its results;
    /// a call id that is empty or repeats an earlier call's of the same
    /// message is made unique (`call_2` → `call_2~2`), since results are
    /// matched to calls by id.
    #[must_use]
    pub fn message(self, mut message: Message) -> Self {
        let body = if message.role == Role::Assistant {
            unique_call_ids(&mut message);
            UnitBody::Turn(Turn {
                message,
                results: Vec::new(),
                proposed: BTreeMap::new(),
            })
        } else {
            UnitBody::Message { message }
        };
        self.push(false, body)
    }

    /// Appends a user message, builder-style.
    #[must_use]
    pub fn user(self, text: impl Into<String>) -> Self {
        self.message(Message::user(text))
    }

    /// Appends a user message that working memory never evicts (the task,
    /// standing instructions), builder-style.
    #[must_use]
    pub fn pinned_user(self, text: impl Into<String>) -> Self {
        self.push(
            true,
            UnitBody::Message {
                message: Message::user(text),
            },
        )
    }

    /// Appends a message that working memory never evicts, builder-style.
    #[must_use]
    pub fn pinned(self, message: Message) -> Self {
        let mut this = self.message(message);
        if let Some(unit) = this.units.last_mut() {
            unit.pinned = true;
        }
        this
    }

    /// An update attaching `results` to the turns that made their calls.
    pub fn results(results: Vec<ToolResult>) -> Self {
        Self::change(Change::Results { results })
    }

    /// An update replacing the arguments of call `call_id` (which must not
    /// have a result yet); the model's own arguments are kept in
    /// [`Turn::proposed`].
    pub fn edit(call_id: impl Into<String>, arguments: Value) -> Self {
        Self::change(Change::Edit {
            call_id: call_id.into(),
            arguments,
        })
    }

    /// An update removing the units `ids` (pinned ones stay), with
    /// `summary`, if any, in the place of the first removed.
    pub fn evict(ids: Vec<u64>, summary: Option<String>) -> Self {
        Self::change(Change::Evict {
            units: ids,
            summary,
        })
    }

    /// An update pinning (or unpinning) the unit `id`.
    pub fn pin(id: u64, pinned: bool) -> Self {
        Self::change(Change::Pin { unit: id, pinned })
    }

    fn change(change: Change) -> Self {
        Self {
            changes: vec![change],
            ..Self::default()
        }
    }

    /// This update followed by `other`: both updates' units are appended,
    /// and both's changes applied, when merged.
    #[must_use]
    pub fn then(mut self, other: Transcript) -> Self {
        self.units.extend(other.units);
        self.changes.extend(other.changes);
        self
    }

    /// Whether this value changes nothing when merged.
    pub fn is_empty_update(&self) -> bool {
        self.units.is_empty() && self.changes.is_empty()
    }

    /// The units, oldest first.
    pub fn units(&self) -> &[Unit] {
        &self.units
    }

    /// The last turn, if the last unit is one.
    pub fn last_turn(&self) -> Option<&Turn> {
        match self.units.last().map(|u| &u.body) {
            Some(UnitBody::Turn(turn)) => Some(turn),
            _ => None,
        }
    }

    /// Every call of the transcript that has no result yet, in order.
    pub fn pending_calls(&self) -> Vec<&ToolCall> {
        self.units
            .iter()
            .filter_map(|u| match &u.body {
                UnitBody::Turn(turn) => Some(turn.pending()),
                _ => None,
            })
            .flatten()
            .collect()
    }

    /// The conversation as messages for a model, oldest first. A summary
    /// is a system message saying what it stands for.
    pub fn messages(&self) -> Vec<Message> {
        let mut out = Vec::with_capacity(self.units.len() * 2);
        for unit in &self.units {
            render_unit(unit, &mut out);
        }
        out
    }

    /// Applies one change; see the type's docs for what is dropped.
    fn apply(&mut self, change: Change) {
        match change {
            Change::Results { results } => {
                for result in results {
                    if let Some(turn) = self.turn_of_call_mut(&result.call_id) {
                        turn.results.push(result);
                    }
                }
            }
            Change::Edit { call_id, arguments } => {
                if let Some(turn) = self.turn_of_call_mut(&call_id) {
                    for part in &mut turn.message.content {
                        if let ContentPart::ToolCall(call) = part
                            && call.id == call_id
                        {
                            let before = std::mem::replace(&mut call.arguments, arguments);
                            turn.proposed.entry(call_id).or_insert(before);
                            break;
                        }
                    }
                }
            }
            Change::Evict { units, summary } => {
                let first = self
                    .units
                    .iter()
                    .position(|u| units.contains(&u.id) && !u.pinned);
                let Some(first) = first else { return };
                let mut replaced = 0u64;
                self.units.retain(|u| {
                    let gone = units.contains(&u.id) && !u.pinned;
                    if gone {
                        replaced += match &u.body {
                            UnitBody::Summary { replaced, .. } => *replaced,
                            _ => 1,
                        };
                    }
                    !gone
                });
                if let Some(text) = summary {
                    let unit = Unit {
                        id: self.next_id,
                        pinned: false,
                        body: UnitBody::Summary { text, replaced },
                    };
                    self.next_id += 1;
                    self.units.insert(first, unit);
                }
            }
            Change::Pin { unit, pinned } => {
                if let Some(u) = self.units.iter_mut().find(|u| u.id == unit) {
                    u.pinned = pinned;
                }
            }
        }
    }

    /// The latest turn where call `call_id` waits for its result (ids may
    /// repeat across turns: some providers number calls per answer).
    fn turn_of_call_mut(&mut self, call_id: &str) -> Option<&mut Turn> {
        self.units.iter_mut().rev().find_map(|u| match &mut u.body {
            UnitBody::Turn(turn)
                if turn.calls().any(|c| c.id == call_id) && turn.result(call_id).is_none() =>
            {
                Some(turn)
            }
            _ => None,
        })
    }
}

impl Appendable for Transcript {
    /// Applies `update`'s changes, then appends its units (with new ids).
    fn append_from(&mut self, update: Self) {
        for change in update.changes {
            self.apply(change);
        }
        for unit in update.units {
            self.units.push(Unit {
                id: self.next_id,
                ..unit
            });
            self.next_id += 1;
        }
    }
}

/// Renames calls of `message` whose id is empty or already used.
fn unique_call_ids(message: &mut Message) {
    let mut seen = std::collections::BTreeSet::new();
    for part in &mut message.content {
        if let ContentPart::ToolCall(call) = part {
            let base = if call.id.is_empty() {
                "call".to_owned()
            } else {
                call.id.clone()
            };
            let mut id = base.clone();
            let mut n = 1;
            while call.id.is_empty() && n == 1 || seen.contains(&id) {
                n += 1;
                id = format!("{base}~{n}");
            }
            call.id = id.clone();
            seen.insert(id);
        }
    }
}

/// A unit as messages for a model.
pub(crate) fn render_unit(unit: &Unit, out: &mut Vec<Message>) {
    match &unit.body {
        UnitBody::Message { message } => out.push(message.clone()),
        UnitBody::Turn(turn) => turn.render(out),
        UnitBody::Summary { text, replaced } => out.push(Message::system(format!(
            "Summary of the {replaced} earliest parts of this conversation, which were removed to save space:\n{text}"
        ))),
    }
}

/// Where a list of messages breaks the rule that every tool call is
/// answered by exactly one result before the next assistant message, and
/// every result answers a call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PairingError {
    /// A call has no result before the next assistant message (or the end).
    #[error("tool call `{call_id}` (message {message}) has no result")]
    Unanswered {
        /// The call's id.
        call_id: String,
        /// Index of the assistant message that made it.
        message: usize,
    },
    /// A call has more than one result.
    #[error("tool call `{call_id}` (message {message}) has {count} results")]
    Repeated {
        /// The call's id.
        call_id: String,
        /// Index of the assistant message that made it.
        message: usize,
        /// How many results it has.
        count: usize,
    },
    /// A result answers no call of the preceding assistant message.
    #[error("the tool result for `{call_id}` in message {message} answers no call before it")]
    Orphan {
        /// The id the result names.
        call_id: String,
        /// Index of the message holding the result.
        message: usize,
    },
}

/// Checks that every tool call in `messages` is answered by exactly one
/// result, in the tool messages between its assistant message and the next
/// one, and that every result answers a call: what every provider requires
/// of a conversation it is sent.
///
/// ```
/// use harness::llm::{Message, ModelResponse, ToolCall, ToolResult};
/// use harness_kit::transcript::{check_pairing, PairingError};
/// use serde_json::json;
///
/// let call = ToolCall::new("c1", "ls", json!({}));
/// let asked = ModelResponse::from_tool_call(call.clone()).into_message();
/// assert!(matches!(check_pairing(&[asked.clone()]), Err(PairingError::Unanswered { .. })));
/// let answered = [asked, Message::tool_result(ToolResult::success(&call, "a.txt"))];
/// assert_eq!(check_pairing(&answered), Ok(()));
/// ```
pub fn check_pairing(messages: &[Message]) -> Result<(), PairingError> {
    // The calls of the last assistant message and how many results each got.
    let mut open: Vec<(String, usize)> = Vec::new();
    let mut asked_at = 0;
    let close = |open: &mut Vec<(String, usize)>, at: usize| -> Result<(), PairingError> {
        for (call_id, count) in open.drain(..) {
            match count {
                1 => {}
                0 => {
                    return Err(PairingError::Unanswered {
                        call_id,
                        message: at,
                    });
                }
                count => {
                    return Err(PairingError::Repeated {
                        call_id,
                        message: at,
                        count,
                    });
                }
            }
        }
        Ok(())
    };
    for (i, message) in messages.iter().enumerate() {
        if message.role == Role::Assistant {
            close(&mut open, asked_at)?;
            asked_at = i;
            open = message.tool_calls().map(|c| (c.id.clone(), 0)).collect();
        }
        for part in &message.content {
            if let ContentPart::ToolResult(result) = part {
                match open.iter_mut().find(|(id, _)| *id == result.call_id) {
                    Some((_, count)) => *count += 1,
                    None => {
                        return Err(PairingError::Orphan {
                            call_id: result.call_id.clone(),
                            message: i,
                        });
                    }
                }
            }
        }
    }
    close(&mut open, asked_at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use harness::llm::ModelResponse;
    use serde_json::json;

    fn asks(ids: &[&str]) -> Message {
        ModelResponse::from_tool_calls(ids.iter().map(|id| ToolCall::new(*id, "t", json!({}))))
            .into_message()
    }

    fn result(id: &str) -> ToolResult {
        ToolResult::success(&ToolCall::new(id, "t", json!({})), "ok")
    }

    #[test]
    fn results_attach_to_their_turn_in_any_order_and_only_once() {
        let mut t = Transcript::new().user("go").message(asks(&["a", "b"]));
        t.append_from(Transcript::results(vec![result("b")]));
        assert_eq!(t.pending_calls().len(), 1);
        t.append_from(Transcript::results(vec![
            result("a"),
            result("a"),
            result("zz"),
        ]));
        assert!(t.pending_calls().is_empty());
        assert_eq!(t.last_turn().map(|turn| turn.results.len()), Some(2));
        // Rendered in call order, whatever the arrival order.
        let messages = t.messages();
        let ids: Vec<_> = messages[2]
            .content
            .iter()
            .filter_map(|p| match p {
                ContentPart::ToolResult(r) => Some(r.call_id.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(ids, ["a", "b"]);
        assert_eq!(check_pairing(&messages), Ok(()));
    }

    #[test]
    fn eviction_keeps_pinned_units_and_puts_the_summary_first() {
        let mut t = Transcript::new()
            .pinned_user("task")
            .user("one")
            .user("two")
            .user("three");
        t.append_from(Transcript::evict(vec![0, 1, 2], Some("s".into())));
        let kinds: Vec<_> = t
            .units()
            .iter()
            .map(|u| match &u.body {
                UnitBody::Message { message } => message.text(),
                UnitBody::Summary { replaced, .. } => format!("summary of {replaced}"),
                UnitBody::Turn(_) => "turn".into(),
            })
            .collect();
        assert_eq!(kinds, ["task", "summary of 2", "three"]);
    }

    #[test]
    fn an_edit_keeps_what_the_model_proposed() {
        let mut t = Transcript::new().message(asks(&["a"]));
        t.append_from(Transcript::edit("a", json!({"x": 1})));
        let turn = t.last_turn().cloned().unwrap_or_else(|| panic!("a turn"));
        assert_eq!(
            turn.calls().next().map(|c| &c.arguments),
            Some(&json!({"x": 1}))
        );
        assert_eq!(turn.proposed["a"], json!({}));
    }

    #[test]
    fn pairing_finds_each_kind_of_break() {
        let a = asks(&["a"]);
        assert!(matches!(
            check_pairing(&[a.clone(), Message::user("x")]),
            Err(PairingError::Unanswered { .. })
        ));
        assert!(matches!(
            check_pairing(&[a.clone(), Message::tool_results([result("a"), result("a")])]),
            Err(PairingError::Repeated { count: 2, .. })
        ));
        assert!(matches!(
            check_pairing(&[a, Message::tool_results([result("a"), result("b")])]),
            Err(PairingError::Orphan { .. })
        ));
        assert!(matches!(
            check_pairing(&[Message::user("x"), Message::tool_result(result("a"))]),
            Err(PairingError::Orphan { .. })
        ));
    }
}
