//! What a server sent that the client could not read, and how a stdio
//! server went away, as the transports report it to the calls (and the
//! handshake, and listings) that wait.
//!
//! The SDK, when it drops a message, fails no request for it (a stdio line
//! too long or not JSON is only logged) or fails one without saying why
//! (an HTTP answer over its limit is "a transport error", an SSE event over
//! it "a stream closed before its final response"). So the transports
//! deal with such a message first, so that whatever waits fails saying
//! what the server sent, and only what waits for it:
//! - an answer over the limit to a request the transport can tell (a stdio
//!   line whose `id` was read as it was skipped; anything on an HTTP POST's
//!   own answer), or a stdio line that is JSON, and an answer by its `id`,
//!   but not a JSON-RPC message the SDK reads (no `jsonrpc: "2.0"`, an
//!   `error` without a number `code`, both a `result` and an `error`), is
//!   replaced by a [stand-in](Faults::stand_in): an error
//!   answer to that request, which the SDK hands to the call waiting for
//!   it, if one still does (a call that gave up is not waiting: the SDK
//!   drops it), and which the call knows for the client's own
//!   ([`Faults::stood_in`]);
//! - a notification or a request of the server's over the limit is no
//!   call's answer, and only logged ([`Faults::drop_notice`]);
//! - any other message dropped that may be an answer is reported here
//!   ([`Faults::drop_message`]), and every call waiting fails for it: a
//!   stdio line that starts as JSON but is not, or whose request cannot be
//!   told (an answer in a batch, an error without an `id`).
//!
//! Likewise the SDK says only "connection closed" when a stdio server's
//! process exits; the stdio transport reports how it ended.

use std::hash::{BuildHasher, RandomState};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use rmcp::model::{ErrorCode, ErrorData, RequestId, ServerJsonRpcMessage};
use serde_json::Value;
use tokio::sync::watch;

/// The key, in the `data` of a [stand-in](Faults::stand_in) error answer,
/// of the client's mark.
const STAND_IN_MARK: &str = "harnessMcpDroppedAnswer";

/// The most bytes of what a [stand-in](Faults::stand_in) says was dropped;
/// the rest is cut.
const STAND_IN_WHAT_BYTES: usize = 1024;

/// The longest a [stand-in](Faults::stand_in) line can be, in bytes: its
/// frame, the mark, an id of at most
/// [`ID_BYTES`](crate::sniff::ID_BYTES) as the server wrote it (as JSON it
/// is no longer), and what it says, each byte of which JSON may write as
/// six. The SDK's own limit on a stdio line is at least this, so that a
/// stand-in always reaches it, whatever
/// [`McpOptions::max_message_bytes`](crate::McpOptions::max_message_bytes)
/// is.
pub(crate) const STAND_IN_MAX_BYTES: usize =
    256 + STAND_IN_MARK.len() + 32 + crate::sniff::ID_BYTES + 6 * (STAND_IN_WHAT_BYTES + 3);

/// What the server sent that the client could not read.
#[derive(Debug)]
pub(crate) struct Faults {
    /// Messages dropped that may have been an answer: messages over the
    /// size limit, and stdio lines that start as JSON but do not parse. The
    /// count, and what the last one was.
    dropped: watch::Sender<(u64, String)>,
    /// Other stdio lines that are not JSON (a banner, a stray `print`):
    /// servers write those by mistake, and the answer may still come. The
    /// count, and a quote of the last one.
    noise: Mutex<(u64, String)>,
    /// How a stdio server went away, once it has (never over HTTP).
    ended: watch::Sender<Option<Ending>>,
    /// Marks the [stand-in](Faults::stand_in) answers as this client's
    /// (random, so that a server cannot make one).
    mark: String,
}

/// How a stdio server went away.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ending {
    /// It closed its output; its process has not exited yet.
    OutputClosed,
    /// Its process exited, so: `exit status: 2`, `signal: 9 (SIGKILL)`.
    Exited(String),
    /// It closed its output, did not exit within the grace given, and was
    /// killed.
    Killed,
}

impl Faults {
    pub(crate) fn new() -> Self {
        Self {
            dropped: watch::channel((0, String::new())).0,
            noise: Mutex::new((0, String::new())),
            ended: watch::channel(None).0,
            mark: format!(
                "{:016x}{:016x}",
                RandomState::new().hash_one(1u8),
                RandomState::new().hash_one(2u8)
            ),
        }
    }

    /// The error answer to request `id` that takes the place of its
    /// answer, dropped for `what` (e.g. from [`too_large`]; cut to
    /// [`STAND_IN_WHAT_BYTES`]); logged. The call waiting for the answer,
    /// if one still does, fails with it ([`stood_in`](Self::stood_in)); a
    /// call that gave up is not waiting any more, and the SDK drops it.
    pub(crate) fn stand_in_message(&self, id: RequestId, what: &str) -> ServerJsonRpcMessage {
        let what = match what
            .char_indices()
            .find(|(at, c)| at + c.len_utf8() > STAND_IN_WHAT_BYTES)
        {
            Some((cut, _)) => format!("{}…", &what[..cut]),
            None => what.to_owned(),
        };
        tracing::warn!(
            problem = %what,
            request = %id,
            "dropped an answer from an MCP server (its call, if it still waits, fails)"
        );
        let mut data = serde_json::Map::new();
        data.insert(STAND_IN_MARK.to_owned(), Value::String(self.mark.clone()));
        let error = ErrorData::new(ErrorCode::INTERNAL_ERROR, what, Some(Value::Object(data)));
        ServerJsonRpcMessage::error(error, Some(id))
    }

    /// [`stand_in_message`](Self::stand_in_message) as a line of JSON,
    /// without its newline: at most [`STAND_IN_MAX_BYTES`].
    pub(crate) fn stand_in(&self, id: RequestId, what: &str) -> Vec<u8> {
        // A message of the SDK's own types always serializes.
        serde_json::to_vec(&self.stand_in_message(id, what)).unwrap_or_default()
    }

    /// If `error` is a [stand-in](Self::stand_in) of this client's, what
    /// was dropped.
    pub(crate) fn stood_in(&self, error: &ErrorData) -> Option<String> {
        let mark = error.data.as_ref()?.get(STAND_IN_MARK)?;
        (mark.as_str() == Some(self.mark.as_str())).then(|| error.message.to_string())
    }

    /// Reports a message dropped that is no call's answer (a notification,
    /// or a request of the server's); only logged.
    pub(crate) fn drop_notice(&self, what: &str) {
        tracing::warn!(
            problem = %what,
            "dropped a notification or request from an MCP server (no call's answer)"
        );
    }

    /// Reports how the server went away, or (after
    /// [`Ending::OutputClosed`]) how its process ended.
    pub(crate) fn end(&self, ending: Ending) {
        self.ended.send_replace(Some(ending));
    }

    /// Whether the server went away.
    pub(crate) fn has_ended(&self) -> bool {
        self.ended.borrow().is_some()
    }

    /// If the server went away, how, in words: waiting up to `within`
    /// for its process to exit if it has only closed its output yet.
    pub(crate) async fn ending(&self, within: Duration) -> Option<String> {
        let mut ended = self.ended.subscribe();
        ended.borrow().as_ref()?;
        let _ = tokio::time::timeout(
            within,
            ended.wait_for(|e| !matches!(e, Some(Ending::OutputClosed))),
        )
        .await;
        let ending = ended.borrow().clone();
        ending.map(|ending| match ending {
            Ending::OutputClosed => "the server closed its output".to_owned(),
            Ending::Exited(status) => format!("the server's process exited ({status})"),
            Ending::Killed => {
                "the server closed its output and, as it did not exit, was stopped".to_owned()
            }
        })
    }

    /// A watch of the dropped messages, marked seen as they are now.
    pub(crate) fn dropped(&self) -> watch::Receiver<(u64, String)> {
        let mut receiver = self.dropped.subscribe();
        receiver.borrow_and_update();
        receiver
    }

    /// How many lines of noise there have been, and a quote of the last.
    pub(crate) fn noise(&self) -> (u64, String) {
        self.noise
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Reports a message dropped; `what` says what it was, e.g. from
    /// [`too_large`].
    pub(crate) fn drop_message(&self, what: String) {
        tracing::warn!(problem = %what, "dropped a message from an MCP server");
        self.dropped.send_modify(|(count, last)| {
            *count += 1;
            *last = what;
        });
    }

    pub(crate) fn note_noise(&self, quote: String) {
        tracing::debug!(line = %quote, "an MCP server wrote a line that is not JSON-RPC");
        let mut noise = self.noise.lock().unwrap_or_else(PoisonError::into_inner);
        noise.0 += 1;
        noise.1 = quote;
    }
}

/// What a message over `limit` bytes is reported as.
pub(crate) fn too_large(limit: usize) -> String {
    format!("a message of more than {limit} bytes (the limit, McpOptions::max_message_bytes)")
}

/// Waits until a message is dropped; what it was.
pub(crate) async fn next_dropped(receiver: &mut watch::Receiver<(u64, String)>) -> String {
    if receiver.changed().await.is_err() {
        // The faults outlive every wait on them; never reached.
        std::future::pending::<()>().await;
    }
    receiver.borrow_and_update().1.clone()
}

/// What was dropped since `receiver` last looked, if anything. A request
/// that failed meanwhile may have failed for it: over HTTP, the SDK fails
/// the request whose answer was too large just after it is reported here.
pub(crate) fn dropped_since(receiver: &mut watch::Receiver<(u64, String)>) -> Option<String> {
    receiver
        .has_changed()
        .unwrap_or(false)
        .then(|| receiver.borrow_and_update().1.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stand_in_is_never_longer_than_its_bound() {
        let faults = Faults::new();
        // The longest id the sniffer keeps, of characters JSON escapes, and
        // a long text of them.
        let id = RequestId::String("\u{1}".repeat(crate::sniff::ID_BYTES / 6).into());
        let what = "\u{2}\"\\".repeat(10_000);
        let line = faults.stand_in(id.clone(), &what);
        assert!(line.len() <= STAND_IN_MAX_BYTES, "{}", line.len());
        // What it says is cut, and still the client's own.
        let Ok(ServerJsonRpcMessage::Error(error)) = serde_json::from_slice(&line) else {
            panic!("{}", String::from_utf8_lossy(&line));
        };
        assert_eq!(error.id, Some(id));
        let said = faults.stood_in(&error.error).unwrap();
        assert!(said.len() <= STAND_IN_WHAT_BYTES + 3 && said.ends_with('…'));
        assert!(what.starts_with(said.trim_end_matches('…')));
    }
}
