//! The stdio transport: the server's process, and what it writes read line
//! by line with a size limit before the SDK sees it.
//!
//! The SDK drops a line that is too long or is not JSON with only a log
//! line, and the call waiting for that answer then waits its whole timeout
//! and reports that the server "did not answer". Here every line is read
//! first (never more than [`McpOptions::max_message_bytes`] of it held). A
//! line too long is read through a [`Sniffer`] as it is skipped: if it is
//! an answer whose `id` was found, the SDK is given a
//! [stand-in](Faults::stand_in) error answer to that request in its place
//! (the call waiting for it, if any still does, fails saying what the
//! server sent; no other call does); if it is a notification or a request
//! of the server's, it is only logged. Any other line that cannot be a
//! message is reported to the calls that wait ([`Faults`]), which then
//! fail saying what the server sent.
//!
//! [`McpOptions::max_message_bytes`]: crate::McpOptions::max_message_bytes

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

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
/// `kill_on_drop`), and ends, killing it, when the reader is dropped or the
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

/// Whether `line` is JSON, read through without keeping any of it; the
/// SDK decides what message it is.
fn is_json(line: &[u8]) -> bool {
    serde_json::from_slice::<serde::de::IgnoredAny>(line).is_ok()
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
                if is_json(text) {
                    let sent = tokio::select! {
                        _ = &mut closed => break,
                        sent = out.write_all(&line) => sent,
                    };
                    if sent.is_err() {
                        break;
                    }
                } else if text.starts_with(b"{") {
                    faults.drop_message(format!("a message that is not JSON ({})", quote(text)));
                } else {
                    faults.note_noise(quote(text));
                }
            }
            Ok(Line::TooLong(Owner::Answer(id))) => {
                // In its place, an error answer: the call waiting for it
                // fails, saying why; if none waits any more (it gave up),
                // the SDK drops it.
                let mut stand_in = faults.stand_in(id, &faults::too_large(limit));
                stand_in.push(b'\n');
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
    let exited = tokio::time::timeout(EXIT_GRACE, child.wait()).await;
    if server_ended {
        faults.end(match exited {
            Ok(Ok(status)) => Ending::Exited(status.to_string()),
            Ok(Err(error)) => Ending::Exited(format!("its status could not be read: {error}")),
            Err(_) => Ending::Killed,
        });
    }
    drop(child);
}
