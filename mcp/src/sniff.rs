//! Whose answer a stdio line too long to keep is: read through as it is
//! skipped, byte by byte, keeping nothing of it but the few bytes of its
//! top-level `id`.
//!
//! A message over [`McpOptions::max_message_bytes`] is dropped unread; but
//! an answer's `id` (wherever it is among its fields: the Python SDK writes
//! it first, the TypeScript SDK after the `result`) tells which request it
//! answers, so that only the call waiting for that request fails, and none
//! if that call gave up already. [`Sniffer`] follows the JSON's nesting and
//! strings to find the top-level keys `id`, `method`, `result` and `error`,
//! and checks that the object ends where the line does; it does not check
//! the rest of the JSON.
//!
//! [`McpOptions::max_message_bytes`]: crate::McpOptions::max_message_bytes

use rmcp::model::RequestId;

/// The longest top-level key kept while it is read: the longest of those
/// looked for.
const KEY_BYTES: usize = 6;

/// The longest `id` value kept, in bytes: a longer one is no id of this
/// client's (its ids are numbers).
pub(crate) const ID_BYTES: usize = 256;

/// What a message is, as far as whose answer it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Owner {
    /// An answer (a `result` or an `error`) to request `id`.
    Answer(RequestId),
    /// A notification or a request of the server's (a `method`): no
    /// call's answer.
    NoAnswer,
    /// Not a JSON object of either kind: anyone's answer, for all the
    /// client can tell.
    Unknown,
}

/// A top-level key looked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    Id,
    Method,
    Outcome,
    Other,
}

/// Reads a JSON object in pieces, keeping its top-level `id` and whether
/// it has a `method`, a `result` or an `error`.
#[derive(Debug, Default)]
pub(crate) struct Sniffer {
    /// The first `{` was read.
    started: bool,
    /// The object ended (its last `}` was read); only whitespace may
    /// follow.
    ended: bool,
    /// Not an object of the kind: nothing more is looked at.
    broken: bool,
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// At the top level, the next string is a key.
    expect_key: bool,
    /// The top-level key being read, while it is.
    key: Option<Vec<u8>>,
    /// The last top-level key read, whose value comes.
    current: Option<Key>,
    /// The `id`'s value is being read.
    in_id: bool,
    id: Vec<u8>,
    ids: usize,
    method: bool,
    outcome: bool,
}

impl Sniffer {
    /// Reads the next piece of the message.
    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        let mut i = 0;
        while i < bytes.len() && !self.broken {
            // Most of a long message is in strings: skip to their ends.
            if self.in_string && !self.escaped && self.key.is_none() && !self.in_id {
                match bytes[i..].iter().position(|&b| b == b'"' || b == b'\\') {
                    Some(at) => i += at,
                    None => return,
                }
            }
            self.byte(bytes[i]);
            i += 1;
        }
    }

    fn byte(&mut self, b: u8) {
        if self.in_id && !(self.depth == 1 && !self.in_string && matches!(b, b',' | b'}')) {
            if self.id.len() < ID_BYTES {
                self.id.push(b);
            } else {
                self.broken = true;
                return;
            }
        }
        if self.in_string {
            if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.in_string = false;
                if let Some(key) = self.key.take() {
                    self.current = Some(match key.as_slice() {
                        b"id" => Key::Id,
                        b"method" => Key::Method,
                        b"result" | b"error" => Key::Outcome,
                        _ => Key::Other,
                    });
                }
                return;
            }
            if let Some(key) = &mut self.key {
                if key.len() < KEY_BYTES {
                    key.push(b);
                } else {
                    // Longer than every key looked for.
                    key.clear();
                    key.extend_from_slice(b"-------");
                }
            }
            return;
        }
        if b.is_ascii_whitespace() {
            return;
        }
        if self.ended || (!self.started && b != b'{') {
            self.broken = true;
            return;
        }
        match b {
            b'"' => {
                self.in_string = true;
                if self.depth == 1 && self.expect_key {
                    self.expect_key = false;
                    self.key = Some(Vec::new());
                }
            }
            b'{' | b'[' => {
                if !self.started {
                    self.started = true;
                    self.expect_key = true;
                }
                self.depth += 1;
            }
            b'}' | b']' => {
                if self.depth == 1 {
                    self.in_id = false;
                    if b == b'}' {
                        self.ended = true;
                    } else {
                        self.broken = true;
                    }
                }
                self.depth = self.depth.saturating_sub(1);
            }
            b':' if self.depth == 1 => match self.current {
                Some(Key::Id) => {
                    self.ids += 1;
                    self.in_id = true;
                    self.id.clear();
                }
                Some(Key::Method) => self.method = true,
                Some(Key::Outcome) => self.outcome = true,
                Some(Key::Other) => {}
                None => self.broken = true,
            },
            b',' if self.depth == 1 => {
                self.in_id = false;
                self.current = None;
                self.expect_key = true;
            }
            _ => {}
        }
    }

    /// What the message read was.
    pub(crate) fn finish(self) -> Owner {
        if self.broken || !self.ended {
            return Owner::Unknown;
        }
        match (self.method, self.outcome, self.ids) {
            (true, false, _) => Owner::NoAnswer,
            (false, true, 1) => serde_json::from_slice::<RequestId>(self.id.trim_ascii())
                .map_or(Owner::Unknown, Owner::Answer),
            _ => Owner::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner_in_pieces(message: &str, piece: usize) -> Owner {
        let mut sniffer = Sniffer::default();
        for chunk in message.as_bytes().chunks(piece) {
            sniffer.feed(chunk);
        }
        sniffer.finish()
    }

    fn owner(message: &str) -> Owner {
        let whole = owner_in_pieces(message, message.len().max(1));
        for piece in [1, 2, 3, 7] {
            assert_eq!(
                owner_in_pieces(message, piece),
                whole,
                "{message} in {piece}s"
            );
        }
        whole
    }

    #[test]
    fn answers_are_told_by_their_id_wherever_it_is() {
        let n = |id: i64| Owner::Answer(RequestId::Number(id));
        assert_eq!(owner(r#"{"jsonrpc":"2.0","id":5,"result":{}}"#), n(5));
        assert_eq!(
            owner(
                r#"{"result":{"content":[{"type":"text","text":"a \"}\" ,\"id\": 9"}]},"jsonrpc":"2.0","id":12}"#
            ),
            n(12)
        );
        assert_eq!(
            owner(" { \"id\" : \"abc\" , \"error\" : {\"code\": 1, \"id\": 3} } \r\n"),
            Owner::Answer(RequestId::String("abc".into()))
        );
        assert_eq!(
            owner(r#"{"id":7,"result":{"id":8,"nested":[{"id":9}]}}"#),
            n(7)
        );
        assert_eq!(owner(r#"{"id":1e2,"result":1}"#), n(100));
    }

    #[test]
    fn notifications_and_requests_are_no_answers() {
        for message in [
            r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"x"}}"#,
            r#"{"params":{"id":3,"result":1},"method":"sampling/createMessage","id":4,"jsonrpc":"2.0"}"#,
        ] {
            assert_eq!(owner(message), Owner::NoAnswer, "{message}");
        }
    }

    #[test]
    fn anything_else_is_unknown() {
        let long_id = format!(r#"{{"id":"{}","result":1}}"#, "i".repeat(ID_BYTES));
        for message in [
            "",
            "plain text",
            r#"[{"id":1,"result":1}]"#,
            r#"{"result":1}"#,
            r#"{"id":null,"result":1}"#,
            r#"{"id":{"n":1},"result":1}"#,
            r#"{"id":1.5,"result":1}"#,
            r#"{"id":1,"id":2,"result":1}"#,
            r#"{"id":1,"method":"x","result":1}"#,
            r#"{"id":1}"#,
            r#"{"id":1,"result":{"text":"cut"#,
            r#"{"id":1,"result":1} trailing"#,
            r#"{"id":1,"result":1}{}"#,
            r#"{"id":1,"result":1]"#,
            r#"{"id" 1,"result":1}"#,
            r#"{"\u0069d":1,"result":1}"#,
            &long_id,
        ] {
            assert_eq!(owner(message), Owner::Unknown, "{message}");
        }
    }
}
