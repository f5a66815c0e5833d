//! The stdio transport: the server's process, and what it writes read line
//! by line with a size limit before the SDK sees it.
//!
//! The SDK drops a line that is too long, is not JSON, or is JSON but not a
//! JSON-RPC message it reads (no `"jsonrpc": "2.0"`, an error whose `code`
//! is not a number, both a `result` and an `error`, a batch), with only a
//! log line, and the call waiting for that answer then waits its whole
//! timeout and reports that the server "did not answer". Here every line
//! is read first (never more than [`McpOptions::max_message_bytes`] of it
//! held), and only the messages the SDK reads are passed on. A line too
//! long, or JSON that is not such a message, is read through a [`Sniffer`]:
//! if it is an answer whose `id` was found, the SDK is given a
//! [stand-in](Faults::stand_in) error answer to that request in its place
//! (the call waiting for it, if any still does, fails saying what the
//! server sent; no other call does); if it is a notification or a request
//! of the server's, it is only logged (one within the limit is passed on,
//! for the SDK to answer or ignore as it does). Any other line that may
//! have been an answer (a line that starts as JSON but is not; an answer in
//! a batch, or without an `id`) is reported to the calls that wait
//! ([`Faults`]), which then fail saying what the server sent. Text that
//! cannot be an answer (a banner, a log line, JSON or not) is noted as
//! noise: a call that times out says it came.
//!
//! The server runs in a process group of its own (on Unix), which is
//! killed when the connection ends: what the server started and left
//! running ends with it ([`Group`]).
//!
//! [`McpOptions::max_message_bytes`]: crate::McpOptions::max_message_bytes

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rmcp::model::{RequestId, ServerJsonRpcMessage, ServerResult};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader, DuplexStream, ReadBuf};
use tokio::process::{Child, ChildStdout};
use tokio::sync::oneshot;

use crate::faults::{self, Ending, Faults};
use crate::sniff::{Owner, Sniffer};

/// How much of a line that is not a message an error quotes, in characters.
const QUOTED_CHARS: usize = 100;

/// How long a server whose connection ended may take to exit by itself
/// before it is killed.
const EXIT_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

/// `text` quoted for an error: secrets redacted, then cut to
/// [`QUOTED_CHARS`] characters (in this order, so that a secret at the cut
/// is still found whole).
pub(crate) fn quote(bytes: &[u8]) -> String {
    // The characters shown and a margin for a secret that straddles them.
    let head = &bytes[..bytes.len().min(QUOTED_CHARS * 4 + (64 << 10))];
    let text = String::from_utf8_lossy(head);
    let text = harness::secrets::redact(&text);
    match text.char_indices().nth(QUOTED_CHARS) {
        Some((cut, _)) => format!("{:?}…", &text[..cut]),
        None if head.len() < bytes.len() => format!("{text:?}…"),
        None => format!("{text:?}"),
    }
}

/// The SDK's end of the pipe [`pump`] writes to. Dropping it (the SDK closes
/// the connection, or the client is dropped) stops the pump, and so the
/// server's process.
#[derive(Debug)]
pub(crate) struct Reader {
    inner: DuplexStream,
    _closed: oneshot::Sender<()>,
}

impl AsyncRead for Reader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

/// Starts reading `stdout` of `child` in a task; the reader the SDK reads
/// the messages from. The task owns the child (spawned with
/// `kill_on_drop`, in a process group of its own on Unix), and ends,
/// killing it and its [group](Group), when the reader is dropped or the
/// server closes its output.
pub(crate) fn start(
    child: Child,
    stdout: ChildStdout,
    faults: Arc<Faults>,
    max_message_bytes: usize,
) -> Reader {
    let (ours, theirs) = tokio::io::duplex(64 << 10);
    let (closed_tx, closed_rx) = oneshot::channel();
    tokio::spawn(pump(
        child,
        stdout,
        theirs,
        closed_rx,
        faults,
        max_message_bytes,
    ));
    Reader {
        inner: ours,
        _closed: closed_tx,
    }
}

/// One line read by [`next_line`].
enum Line {
    /// A whole line is in the buffer (its newline included).
    Whole,
    /// The line was longer than the limit; it was skipped, read through
    /// only to tell whose answer it was.
    TooLong(Owner),
    /// The output ended.
    End,
}

/// Reads the next line into `line`, holding at most `limit` bytes of it
/// (and its newline): a longer one is skipped to its end, through a
/// [`Sniffer`].
async fn next_line(
    reader: &mut BufReader<ChildStdout>,
    line: &mut Vec<u8>,
    limit: usize,
) -> std::io::Result<Line> {
    line.clear();
    let mut too_long: Option<Sniffer> = None;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            // A last line without a newline is no message either.
            return Ok(match too_long {
                Some(sniffer) => Line::TooLong(sniffer.finish()),
                None => Line::End,
            });
        }
        let newline = available.iter().position(|&b| b == b'\n');
        let take = newline.map_or(available.len(), |i| i + 1);
        let content = &available[..newline.unwrap_or(take)];
        match &mut too_long {
            Some(sniffer) => sniffer.feed(content),
            None if line.len() + content.len() > limit => {
                let mut sniffer = Sniffer::default();
                sniffer.feed(line);
                sniffer.feed(content);
                line.clear();
                too_long = Some(sniffer);
            }
            None => line.extend_from_slice(&available[..take]),
        }
        reader.consume(take);
        if newline.is_some() {
            return Ok(match too_long {
                Some(sniffer) => Line::TooLong(sniffer.finish()),
                None => Line::Whole,
            });
        }
    }
}

/// What a whole line within the limit is, as [`check`] finds it.
#[derive(Debug, PartialEq)]
enum Checked {
    /// A message the SDK reads (or, a notification or a request of the
    /// server's, decides about): passed on.
    Message,
    /// The answer to request `id`, which the SDK would drop: a
    /// [stand-in](Faults::stand_in) takes its place.
    Answer(RequestId, String),
    /// What may have been an answer, whose request cannot be told.
    Dropped(String),
    /// Text that is no message and no answer (a banner, a log line).
    Noise,
}

/// What `text` (a line, trimmed, not empty) is: a message the SDK reads;
/// or, if not, what the server sent, in words, and whose answer it was, as
/// far as a [`Sniffer`] tells.
fn check(text: &[u8]) -> Checked {
    let what = |problem: &str| {
        format!(
            "an answer that is not a valid MCP message ({problem}: {})",
            quote(text)
        )
    };
    match serde_json::from_slice::<ServerJsonRpcMessage>(text) {
        // The SDK drops an error without an id (the answer to a request
        // the server could not read): it may be the answer a call waits
        // for.
        Ok(ServerJsonRpcMessage::Error(error)) if error.id.is_none() => {
            return Checked::Dropped(format!("an error without an `id` ({})", quote(text)));
        }
        // An MCP result is an object; the SDK reads `[]` as an empty one
        // (and so as a tool's result without content), and a number or a
        // string as a custom one.
        Ok(ServerJsonRpcMessage::Response(response))
            if matches!(
                response.result,
                ServerResult::EmptyResult(_) | ServerResult::CustomResult(_)
            ) && serde_json::from_slice::<Value>(text)
                .is_ok_and(|value| value.get("result").is_some_and(|r| !r.is_object())) =>
        {
            return Checked::Answer(response.id, what("its `result` is not an object"));
        }
        Ok(_) => return Checked::Message,
        Err(_) => {}
    }
    let Ok(value) = serde_json::from_slice::<Value>(text) else {
        return if text.starts_with(b"{") {
            Checked::Dropped(format!("a message that is not JSON ({})", quote(text)))
        } else {
            Checked::Noise
        };
    };
    let mut sniffer = Sniffer::default();
    sniffer.feed(text);
    match sniffer.finish() {
        Owner::Answer(id) => Checked::Answer(id, what(json_rpc_problem(&value))),
        Owner::NoAnswer => Checked::Message,
        Owner::Unknown if may_answer(&value) => Checked::Dropped(what(json_rpc_problem(&value))),
        Owner::Unknown => Checked::Noise,
    }
}

/// Whether `value` is, or holds (a batch), an object with a `result` or an
/// `error`: an answer, for all the client can tell.
pub(crate) fn may_answer(value: &Value) -> bool {
    let answer = |value: &Value| {
        value
            .as_object()
            .is_some_and(|o| o.contains_key("result") || o.contains_key("error"))
    };
    match value {
        Value::Array(items) => items.iter().any(answer),
        other => answer(other),
    }
}

/// Why `value`, JSON the SDK does not read as a message, is not one, in
/// words.
pub(crate) fn json_rpc_problem(value: &Value) -> &'static str {
    let Some(object) = value.as_object() else {
        return if value.is_array() {
            "a batch of messages, which MCP does not have"
        } else {
            "not a JSON object"
        };
    };
    let error = object.get("error");
    let error_ok = error.is_none_or(|error| {
        error
            .get("code")
            .is_some_and(|code| code.as_i64().is_some_and(|c| i32::try_from(c).is_ok()))
            && error.get("message").is_some_and(Value::is_string)
    });
    match object.get("jsonrpc") {
        None => "it has no `jsonrpc`",
        Some(version) if version != "2.0" => "its `jsonrpc` is not \"2.0\"",
        Some(_) if object.contains_key("result") && error.is_some() => {
            "it has both a `result` and an `error`"
        }
        Some(_) if !error_ok => {
            "its `error` is not an object with a whole-number `code` and a `message`"
        }
        Some(_) => "it is not of the shape of a JSON-RPC message",
    }
}

/// The [stand-in](Faults::stand_in) for the answer to request `id`, dropped
/// for `what`, as a line.
fn stand_in(faults: &Faults, id: RequestId, what: &str) -> Vec<u8> {
    let mut line = faults.stand_in(id, what);
    line.push(b'\n');
    line
}

/// Passes the server's messages on to the SDK, one line each; reports the
/// lines that are not messages to `faults`.
async fn pump(
    mut child: Child,
    stdout: ChildStdout,
    mut out: DuplexStream,
    mut closed: oneshot::Receiver<()>,
    faults: Arc<Faults>,
    limit: usize,
) {
    // Dropped before `child` if this task is: killed while the server has
    // not been waited for.
    let mut group = Group::of(&child);
    let mut reader = BufReader::with_capacity(64 << 10, stdout);
    let mut line = Vec::new();
    // Whether the server ended the connection, rather than the client.
    let mut server_ended = false;
    loop {
        let read = tokio::select! {
            _ = &mut closed => break,
            read = next_line(&mut reader, &mut line, limit) => read,
        };
        match read {
            Ok(Line::Whole) => {
                let text = line.trim_ascii();
                if text.is_empty() {
                    continue;
                }
                let stand_in_line;
                let passed: &[u8] = match check(text) {
                    Checked::Message => &line,
                    // In its place, an error answer, as for one too long.
                    Checked::Answer(id, what) => {
                        stand_in_line = stand_in(&faults, id, &what);
                        &stand_in_line
                    }
                    Checked::Dropped(what) => {
                        faults.drop_message(what);
                        continue;
                    }
                    Checked::Noise => {
                        faults.note_noise(quote(text));
                        continue;
                    }
                };
                let sent = tokio::select! {
                    _ = &mut closed => break,
                    sent = out.write_all(passed) => sent,
                };
                if sent.is_err() {
                    break;
                }
            }
            Ok(Line::TooLong(Owner::Answer(id))) => {
                // In its place, an error answer: the call waiting for it
                // fails, saying why; if none waits any more (it gave up),
                // the SDK drops it.
                let stand_in = stand_in(&faults, id, &faults::too_large(limit));
                let sent = tokio::select! {
                    _ = &mut closed => break,
                    sent = out.write_all(&stand_in) => sent,
                };
                if sent.is_err() {
                    break;
                }
            }
            Ok(Line::TooLong(Owner::NoAnswer)) => {
                faults.drop_notice(&faults::too_large(limit));
            }
            Ok(Line::TooLong(Owner::Unknown)) => faults.drop_message(faults::too_large(limit)),
            Ok(Line::End) | Err(_) => {
                server_ended = true;
                break;
            }
        }
    }
    // Reported before the SDK sees the end, so that the calls it fails
    // then find the client closed, and can wait for how the process ended.
    if server_ended {
        faults.end(Ending::OutputClosed);
    }
    // The SDK sees the end of the output. The process, its input closed
    // by now or soon, gets a moment to exit by itself (as the SDK's own
    // transport gives it), then is killed as the child is dropped.
    drop(out);
    let exited = exited_within(&mut child, EXIT_GRACE).await;
    // What the server started and left running ends with it; so does the
    // server, if it is still there: killed before the server is waited for
    // (reaped), while its pid, the group's id, is still its own.
    group.kill_now();
    let status = if exited {
        Some(child.wait().await)
    } else {
        let _ = child.start_kill();
        None
    };
    if server_ended {
        faults.end(match status {
            Some(Ok(status)) => Ending::Exited(status.to_string()),
            Some(Err(error)) => Ending::Exited(format!("its status could not be read: {error}")),
            None => Ending::Killed,
        });
    }
    drop(child);
}

/// Whether `child` exits within `grace`; on Linux, without reaping it (its
/// pid stays its own until it is waited for).
#[cfg(any(target_os = "linux", target_os = "android"))]
async fn exited_within(child: &mut Child, grace: std::time::Duration) -> bool {
    use rustix::process::{Pid, WaitId, WaitIdOptions, waitid};
    let Some(pid) = child
        .id()
        .and_then(|pid| i32::try_from(pid).ok())
        .and_then(Pid::from_raw)
    else {
        // Already waited for.
        return true;
    };
    let deadline = tokio::time::Instant::now() + grace;
    loop {
        let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
        match waitid(WaitId::Pid(pid), options) {
            Ok(None) => {}
            // Exited; or it cannot be asked about, as when it is no child.
            Ok(Some(_)) | Err(_) => return true,
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// Whether `child` exits within `grace` (waited for).
#[cfg(not(any(target_os = "linux", target_os = "android")))]
async fn exited_within(child: &mut Child, grace: std::time::Duration) -> bool {
    tokio::time::timeout(grace, child.wait()).await.is_ok()
}

/// The process group of a server's process, which was started in a group
/// of its own (`process_group(0)`, Unix): the server and what it started,
/// unless they left the group (`setsid`). Killed (`SIGKILL`) once, when the
/// connection has ended and the server had its moment to exit ([`pump`]),
/// or when dropped (the task reading the server's output was dropped, as
/// when the runtime shuts down). Elsewhere than on Unix, nothing: only the
/// server's own process is killed.
///
/// The group's id is the server's pid, which is never the host's own
/// group's: a pid is not given to a new process while a group of that id
/// exists, and the host's exists while the host runs (and the host's own
/// pid is never signalled). Nor, while the server has not been waited
/// for, any other group's: on Linux the group is killed before the
/// server is reaped. (Elsewhere on Unix, a server that exited by itself is
/// reaped first; its pid then stays unused while a process of its group
/// is left, which is when there is something to kill.)
#[derive(Debug)]
struct Group(Option<u32>);

impl Group {
    /// The group `child` leads; started in a group of its own, and not
    /// waited for yet.
    fn of(child: &Child) -> Self {
        Self(
            child
                .id()
                .filter(|&pid| pid > 1 && pid != std::process::id()),
        )
    }

    /// Kills the group now, if not done yet.
    fn kill_now(&mut self) {
        let Some(pid) = self.0.take() else {
            return;
        };
        #[cfg(unix)]
        {
            let group = i32::try_from(pid)
                .ok()
                .and_then(rustix::process::Pid::from_raw);
            if let Some(group) = group {
                let killed =
                    rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
                tracing::debug!(?killed, "killed an MCP server's process group");
            }
        }
        #[cfg(not(unix))]
        let _ = pid;
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(id: i64) -> Checked {
        Checked::Answer(RequestId::Number(id), String::new())
    }

    /// [`check`], without what it says.
    fn checked(line: &str) -> Checked {
        match check(line.as_bytes()) {
            Checked::Answer(id, _) => Checked::Answer(id, String::new()),
            Checked::Dropped(_) => Checked::Dropped(String::new()),
            other => other,
        }
    }

    #[test]
    fn messages_the_sdk_reads_are_passed_on() {
        for line in [
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"x"}]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"no"}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#,
            r#"{"jsonrpc":"2.0","id":"s1","method":"ping"}"#,
            // The SDK's to ignore or to answer.
            r#"{"jsonrpc":"2.0","method":"notifications/bogus","params":{"a":1}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/message","params":"bad"}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"sampling/createMessage","params":7}"#,
        ] {
            assert_eq!(checked(line), Checked::Message, "{line}");
        }
    }

    #[test]
    fn answers_the_sdk_would_drop_are_stood_in_for() {
        for line in [
            r#"{"id":4,"result":{}}"#,
            r#"{"jsonrpc":"1.0","id":4,"result":{}}"#,
            r#"{"jsonrpc":2,"id":4,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":4,"error":{"code":"bad","message":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":4,"error":{"code":1.5,"message":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":4,"error":{"code":1}}"#,
            r#"{"jsonrpc":"2.0","id":4,"error":"boom"}"#,
            r#"{"jsonrpc":"2.0","id":4,"result":{},"error":{"code":1,"message":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":4,"result":5}"#,
            r#"{"jsonrpc":"2.0","id":4,"result":[]}"#,
            r#"{"jsonrpc":"2.0","id":4,"result":null}"#,
        ] {
            assert_eq!(checked(line), answer(4), "{line}");
        }
        let Checked::Answer(_, what) = check(br#"{"jsonrpc":"1.0","id":4,"result":{}}"#) else {
            unreachable!()
        };
        assert_eq!(
            what,
            r#"an answer that is not a valid MCP message (its `jsonrpc` is not "2.0": "{\"jsonrpc\":\"1.0\",\"id\":4,\"result\":{}}")"#
        );
    }

    #[test]
    fn what_may_be_anyone_s_answer_is_dropped_and_the_rest_is_noise() {
        for line in [
            r#"[{"jsonrpc":"2.0","id":4,"result":{}}]"#,
            r#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error"}}"#,
            r#"{"jsonrpc":"2.0","id":null,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":4,"method":"x","result":{}}"#,
            r#"{"jsonrpc":"2.0","result":{"content":[]}}"#,
            r#"{"jsonrpc":"2.0","id":4,"result":{"#,
        ] {
            assert_eq!(checked(line), Checked::Dropped(String::new()), "{line}");
        }
        for line in [
            r#"{"level":"info","msg":"server starting"}"#,
            "42",
            r#"["a","b"]"#,
            r#""a string""#,
            "Server ready",
            "[not json",
        ] {
            assert_eq!(checked(line), Checked::Noise, "{line}");
        }
    }
}
