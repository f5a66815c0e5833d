//! Conversations as alternating turns, for APIs that require them.

use harness::llm::{ContentPart, Message, Role};

/// The non-system messages of `messages` as `(role, parts)` turns, for APIs
/// that want user and assistant turns to alternate.
///
/// An assistant message becomes a turn of role `assistant` (the API's name
/// for it), any other message (user, tool) one of role `"user"`. Its parts
/// are the content parts `part` converts; a message with none is skipped,
/// and consecutive turns of one role are merged. System messages are left
/// to the caller.
///
/// ```
/// use harness::llm::{ContentPart, Message};
///
/// let messages = [
///     Message::system("Be brief."),
///     Message::user("Hi"),
///     Message::user("there"),
///     Message::assistant("Hello"),
/// ];
/// let turns = harness_provider_http::merged_turns(&messages, "model", |part| match part {
///     ContentPart::Text { text } => Some(text.clone()),
///     _ => None,
/// });
/// assert_eq!(
///     turns,
///     [("user", vec!["Hi".to_owned(), "there".to_owned()]), ("model", vec!["Hello".to_owned()])]
/// );
/// ```
pub fn merged_turns<P>(
    messages: &[Message],
    assistant: &'static str,
    mut part: impl FnMut(&ContentPart) -> Option<P>,
) -> Vec<(&'static str, Vec<P>)> {
    let mut turns: Vec<(&'static str, Vec<P>)> = Vec::new();
    for message in messages {
        if message.role == Role::System {
            continue;
        }
        let role = if message.role == Role::Assistant {
            assistant
        } else {
            "user"
        };
        let parts: Vec<P> = message.content.iter().filter_map(&mut part).collect();
        if parts.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(parts),
            _ => turns.push((role, parts)),
        }
    }
    turns
}
