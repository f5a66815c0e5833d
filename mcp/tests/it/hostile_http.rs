//! A streamable-HTTP server that answers too much: a JSON body or an SSE
//! event over the client's [`McpOptions::max_message_bytes`], or a data line
//! that never ends. A small server written here (just enough HTTP/1.1 and
//! JSON-RPC) rather than an SDK's, since no SDK sends such answers. Each
//! answer must fail the call at once, naming the limit, with no more than
//! the limit (and fixed buffers) read; the connection stays usable.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use harness_mcp::{McpClient, McpError, McpOptions};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::{Notify, watch};

use super::*;

/// The client's limit in these tests.
const LIMIT: usize = 1 << 20;

/// How much more than the limit the server may get written before the
/// client stops reading: what the client reads past its limit in one
/// piece, and the sockets' buffers on both sides (the server's is kept
/// small; the client's grows with how fast it reads). Some 400 KiB when
/// written; the SDK's own limit would let 16 MiB through.
const MARGIN: usize = 4 << 20;

/// Where an answer "without end" stops anyway, should the client read on.
const ENDLESS: usize = 256 << 20;

/// The size of the server's writes.
const PIECE: usize = 64 << 10;

/// How long a call refused for its size may take, at most.
const AT_ONCE: Duration = Duration::from_secs(20);

/// What the server counted of the answer it sent last.
#[derive(Debug, Default)]
struct Sent {
    /// Bytes of the answer written to the socket (the body, without the
    /// chunked framing).
    bytes: AtomicUsize,
}

/// The test's handle on a running server.
struct Server {
    url: String,
    sent: Arc<Sent>,
    /// Bumped each time an answer's writing ends (written whole, or the
    /// client went away).
    answered: watch::Receiver<u64>,
}

/// What the server's connections share.
struct State {
    port: u16,
    sent: Arc<Sent>,
    answered: watch::Sender<u64>,
    /// Wakes the standing GET stream to send its event (the size).
    push: Notify,
    push_bytes: AtomicUsize,
}

/// Starts the server: `initialize`, `tools/list` (one tool, `answer`) and
/// notifications answered as MCP says, a session id given, and a GET
/// stream that stays open. Requests to `/moved` are redirected to `/mcp`
/// (307), to `/elsewhere` to `/mcp` at another origin (`localhost` for
/// `127.0.0.1`), and to `/see-other` to `/mcp` with a 303. At
/// `/huge-handshake` and `/huge-list`, the answer to `initialize` or to
/// `tools/list` is a JSON body without end. `tools/call` of `answer`
/// answers as its arguments say:
///
/// - `{"kind": "json", "bytes": n, "length": bool}`: a JSON body of `n`
///   bytes, with a `Content-Length` or chunked;
/// - `{"kind": "sse", "bytes": n, "line": l}`: an SSE event whose message
///   of `n` bytes is cut into `data:` lines of `l` bytes;
/// - `{"kind": "endless-line"}`: an SSE stream of one `data:` line that
///   never ends;
/// - `{"kind": "get", "bytes": n}`: an SSE stream that stays empty, and an
///   event of `n` bytes in one line on the GET stream.
///
/// With `"delay_ms": ms`, the answer starts after `ms` milliseconds; with
/// `"pause_ms": ms` (`sse` only), its event comes `ms` milliseconds after
/// its stream opened.
async fn start() -> Server {
    // The server's send buffer small, so that what it counts as written is
    // close to what the client read.
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_send_buffer_size(PIECE as u32).unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(16).unwrap();
    let port = listener.local_addr().unwrap().port();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let (answered, answered_rx) = watch::channel(0);
    let sent = Arc::new(Sent::default());
    let state = Arc::new(State {
        port,
        sent: Arc::clone(&sent),
        answered,
        push: Notify::new(),
        push_bytes: AtomicUsize::new(0),
    });
    tokio::spawn(async move {
        while let Ok((connection, _)) = listener.accept().await {
            tokio::spawn(serve(BufReader::new(connection), Arc::clone(&state)));
        }
    });
    Server {
        url,
        sent,
        answered: answered_rx,
    }
}

/// One request: its method, path and body.
struct Request {
    method: String,
    path: String,
    body: Vec<u8>,
}

async fn read_request(connection: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut line = String::new();
    if connection.read_line(&mut line).await.ok()? == 0 {
        return None;
    }
    let mut words = line.split(' ');
    let method = words.next()?.to_owned();
    let path = words.next()?.to_owned();
    let mut length = 0;
    loop {
        line.clear();
        connection.read_line(&mut line).await.ok()?;
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().ok()?;
        }
    }
    let mut body = vec![0; length];
    connection.read_exact(&mut body).await.ok()?;
    Some(Request { method, path, body })
}

/// A whole response with a `Content-Length`.
async fn respond(
    connection: &mut BufReader<TcpStream>,
    status: &str,
    headers: &str,
    body: &[u8],
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\n{headers}content-length: {}\r\n\r\n",
        body.len()
    );
    let socket = connection.get_mut();
    socket.write_all(head.as_bytes()).await?;
    socket.write_all(body).await
}

async fn respond_json(connection: &mut BufReader<TcpStream>, body: &Value) -> std::io::Result<()> {
    respond(
        connection,
        "200 OK",
        "content-type: application/json\r\nmcp-session-id: s1\r\n",
        body.to_string().as_bytes(),
    )
    .await
}

/// A body written piece by piece, counted in [`Sent`].
struct Body<'a> {
    socket: &'a mut TcpStream,
    chunked: bool,
    sent: &'a Sent,
}

impl Body<'_> {
    async fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        if self.chunked {
            let size = format!("{:x}\r\n", bytes.len());
            self.socket.write_all(size.as_bytes()).await?;
            self.socket.write_all(bytes).await?;
            self.socket.write_all(b"\r\n").await?;
        } else {
            self.socket.write_all(bytes).await?;
        }
        self.sent.bytes.fetch_add(bytes.len(), Ordering::SeqCst);
        Ok(())
    }

    async fn end(&mut self) -> std::io::Result<()> {
        if self.chunked {
            self.socket.write_all(b"0\r\n\r\n").await?;
        }
        Ok(())
    }
}

/// The answer to request `id` as a JSON-RPC message of exactly `bytes`
/// bytes (a text of `x`s), in pieces.
fn answer_pieces(id: &Value, bytes: usize) -> impl Iterator<Item = Vec<u8>> {
    let prefix =
        format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":""#);
    let suffix = br#""}]}}"#;
    let text = bytes - prefix.len() - suffix.len();
    std::iter::once(prefix.into_bytes())
        .chain(
            (0..text)
                .step_by(PIECE)
                .map(move |at| vec![b'x'; PIECE.min(text - at)]),
        )
        .chain(std::iter::once(suffix.to_vec()))
}

/// Whether `text` is the text of an answer of `bytes` bytes: all `x`s, as
/// long as the message less its JSON-RPC frame (whose id has a few digits).
fn is_text_of(text: &str, bytes: usize) -> bool {
    let frame = r#"{"jsonrpc":"2.0","id":,"result":{"content":[{"type":"text","text":""}]}}"#.len();
    let most = bytes - frame - 1;
    text.bytes().all(|b| b == b'x') && (most - 4..=most).contains(&text.len())
}

/// Writes one SSE event carrying `message`, cut into `data:` lines of
/// `line` bytes.
async fn sse_event(
    body: &mut Body<'_>,
    message: impl Iterator<Item = Vec<u8>>,
    line: usize,
) -> std::io::Result<()> {
    let mut in_line = 0;
    for piece in message {
        let mut rest = &piece[..];
        while !rest.is_empty() {
            if in_line == 0 {
                body.write(b"data: ").await?;
            }
            let take = rest.len().min(line - in_line);
            body.write(&rest[..take]).await?;
            in_line += take;
            rest = &rest[take..];
            if in_line == line {
                body.write(b"\n").await?;
                in_line = 0;
            }
        }
    }
    if in_line > 0 {
        body.write(b"\n").await?;
    }
    body.write(b"\n").await
}

const SSE_HEAD: &str = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nmcp-session-id: s1\r\ntransfer-encoding: chunked\r\n\r\n";

/// Answers the call `id` as `how` says (see [`start`]).
async fn answer(
    connection: &mut BufReader<TcpStream>,
    state: &State,
    id: &Value,
    how: &Value,
) -> std::io::Result<()> {
    if let Some(delay) = how["delay_ms"].as_u64() {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    let bytes = how["bytes"].as_u64().map_or(0, |n| n as usize);
    state.sent.bytes.store(0, Ordering::SeqCst);
    let socket = connection.get_mut();
    match how["kind"].as_str().unwrap() {
        "json" => {
            let length = how["length"].as_bool().unwrap();
            let framing = if length {
                format!("content-length: {bytes}")
            } else {
                "transfer-encoding: chunked".to_owned()
            };
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nmcp-session-id: s1\r\n{framing}\r\n\r\n"
            );
            socket.write_all(head.as_bytes()).await?;
            let mut body = Body {
                socket,
                chunked: !length,
                sent: &state.sent,
            };
            for piece in answer_pieces(id, bytes) {
                body.write(&piece).await?;
            }
            body.end().await
        }
        "sse" => {
            socket.write_all(SSE_HEAD.as_bytes()).await?;
            if let Some(pause) = how["pause_ms"].as_u64() {
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
            let mut body = Body {
                socket,
                chunked: true,
                sent: &state.sent,
            };
            let line = how["line"].as_u64().unwrap() as usize;
            sse_event(&mut body, answer_pieces(id, bytes), line).await?;
            body.end().await
        }
        "endless-line" => {
            socket.write_all(SSE_HEAD.as_bytes()).await?;
            let mut body = Body {
                socket,
                chunked: true,
                sent: &state.sent,
            };
            body.write(b"data: ").await?;
            for _ in (0..ENDLESS).step_by(PIECE) {
                body.write(&vec![b'y'; PIECE]).await?;
            }
            body.end().await
        }
        "get" => {
            socket.write_all(SSE_HEAD.as_bytes()).await?;
            state.push_bytes.store(bytes, Ordering::SeqCst);
            state.push.notify_one();
            // The answer never comes here; the connection stays open until
            // the client closes it.
            let mut rest = Vec::new();
            let _ = connection.read_to_end(&mut rest).await;
            Ok(())
        }
        other => panic!("no answer of kind {other}"),
    }
}

/// The standing GET stream: open and silent until a call asks for an
/// event on it.
async fn get_stream(connection: &mut BufReader<TcpStream>, state: &State) -> std::io::Result<()> {
    let socket = connection.get_mut();
    socket.write_all(SSE_HEAD.as_bytes()).await?;
    loop {
        state.push.notified().await;
        let bytes = state.push_bytes.load(Ordering::SeqCst);
        let mut body = Body {
            socket,
            chunked: true,
            sent: &state.sent,
        };
        let written = sse_event(&mut body, answer_pieces(&json!(99), bytes), usize::MAX).await;
        state.answered.send_modify(|n| *n += 1);
        written?;
    }
}

/// Serves one connection's requests until the client closes it.
async fn serve(mut connection: BufReader<TcpStream>, state: Arc<State>) {
    while let Some(request) = read_request(&mut connection).await {
        let moved = match request.path.as_str() {
            "/moved" => Some(("307 Temporary Redirect", "/mcp".to_owned())),
            "/elsewhere" => Some((
                "307 Temporary Redirect",
                format!("http://localhost:{}/mcp", state.port),
            )),
            "/see-other" => Some(("303 See Other", "/mcp".to_owned())),
            _ => None,
        };
        if let Some((status, location)) = moved {
            let headers = format!("location: {location}\r\n");
            if respond(&mut connection, status, &headers, b"")
                .await
                .is_err()
            {
                return;
            }
            continue;
        }
        let served = match request.method.as_str() {
            "GET" => get_stream(&mut connection, &state).await,
            "DELETE" => respond(&mut connection, "200 OK", "", b"").await,
            _ => {
                let message: Value = serde_json::from_slice(&request.body).unwrap();
                let id = message.get("id").cloned();
                let method = message["method"].as_str().unwrap_or("");
                let huge = matches!(
                    (request.path.as_str(), method),
                    ("/huge-handshake", "initialize") | ("/huge-list", "tools/list")
                );
                match (method, id) {
                    (_, None) => respond(&mut connection, "202 Accepted", "", b"").await,
                    (_, Some(id)) if huge => {
                        let how = json!({"kind": "json", "bytes": ENDLESS, "length": false});
                        answer(&mut connection, &state, &id, &how).await
                    }
                    ("initialize", Some(id)) => {
                        let version = message["params"]["protocolVersion"].clone();
                        let result = json!({
                            "protocolVersion": version,
                            "capabilities": { "tools": {} },
                            "serverInfo": { "name": "too-much", "version": "1" },
                        });
                        respond_json(
                            &mut connection,
                            &json!({"jsonrpc": "2.0", "id": id, "result": result}),
                        )
                        .await
                    }
                    ("tools/list", Some(id)) => {
                        let tools = [json!({"name": "answer", "inputSchema": {"type": "object"}})];
                        respond_json(
                            &mut connection,
                            &json!({"jsonrpc": "2.0", "id": id, "result": {"tools": tools}}),
                        )
                        .await
                    }
                    ("tools/call", Some(id)) => {
                        let how = message["params"]["arguments"].clone();
                        let answered = answer(&mut connection, &state, &id, &how).await;
                        if how["kind"] != "get" {
                            state.answered.send_modify(|n| *n += 1);
                        }
                        answered
                    }
                    (method, Some(id)) => {
                        let error =
                            json!({"code": -32601, "message": format!("no method {method}")});
                        respond_json(
                            &mut connection,
                            &json!({"jsonrpc": "2.0", "id": id, "error": error}),
                        )
                        .await
                    }
                }
            }
        };
        if served.is_err() {
            return;
        }
    }
}

async fn connect_to(url: &str, limit: usize) -> Result<McpClient, McpError> {
    let options = McpOptions::default()
        .max_message_bytes(limit)
        .max_output_bytes(64 << 20)
        .call_timeout(PATIENCE)
        .connect_timeout(PATIENCE);
    tokio::time::timeout(PATIENCE, McpClient::http_with("too-much", url, options))
        .await
        .expect("connecting hangs")
}

async fn connect(server: &Server, limit: usize) -> McpClient {
    connect_to(&server.url, limit).await.unwrap()
}

/// Calls `answer` with `how`, which must fail at once naming the limit,
/// and the server must have written no more than the limit and a margin;
/// then a call with a small answer must work. What went wrong, if anything.
async fn refused(server: &mut Server, client: &McpClient, how: &Value) -> Result<(), String> {
    server.answered.borrow_and_update();
    let started = Instant::now();
    let called = tokio::time::timeout(PATIENCE, client.call("answer", how.clone()))
        .await
        .map_err(|_| "the call hangs".to_owned())?;
    let error = match called {
        Ok(text) => return Err(format!("answered, {} bytes", text.len())),
        Err(error) => error,
    };
    let took = started.elapsed();
    let names_the_limit = matches!(&error, McpError::BadMessage { server, tool, problem }
        if server == "too-much" && tool == "answer"
            && problem.contains(&format!("a message of more than {LIMIT} bytes"))
            && problem.contains("McpOptions::max_message_bytes"));
    if !names_the_limit {
        return Err(format!("{error:?}"));
    }
    if took > AT_ONCE {
        return Err(format!("refused after {took:?}"));
    }
    // The server's writing ends once the client has closed the response.
    tokio::time::timeout(PATIENCE, server.answered.changed())
        .await
        .map_err(|_| "the client reads on".to_owned())?
        .unwrap();
    let sent = server.sent.bytes.load(Ordering::SeqCst);
    if sent >= LIMIT + MARGIN {
        return Err(format!(
            "{sent} bytes written to a client whose limit is {LIMIT}"
        ));
    }
    // The session goes on.
    let text = client
        .call(
            "answer",
            json!({"kind": "json", "bytes": 100, "length": true}),
        )
        .await
        .map_err(|e| format!("the next call: {e}"))?;
    if !is_text_of(&text, 100) {
        return Err(format!("the next call: {text}"));
    }
    Ok(())
}

/// Every case of `hows` [`refused`], in turn, on one connection.
async fn assert_all_refused(hows: &[Value]) {
    let mut server = start().await;
    let client = connect(&server, LIMIT).await;
    let mut failed = Vec::new();
    for how in hows {
        if let Err(problem) = refused(&mut server, &client, how).await {
            failed.push(format!("{how}: {problem}"));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

#[tokio::test]
async fn json_answers_over_the_limit_fail_at_once_naming_it() {
    assert_all_refused(&[
        // Refused on its Content-Length.
        json!({"kind": "json", "bytes": LIMIT + 1, "length": true}),
        json!({"kind": "json", "bytes": ENDLESS, "length": true}),
        // Counted as read.
        json!({"kind": "json", "bytes": LIMIT + 1, "length": false}),
        json!({"kind": "json", "bytes": 3 * LIMIT, "length": false}),
        json!({"kind": "json", "bytes": ENDLESS, "length": false}),
    ])
    .await;
}

#[tokio::test]
async fn sse_events_over_the_limit_fail_at_once_naming_it() {
    assert_all_refused(&[
        // One data line.
        json!({"kind": "sse", "bytes": 2 * LIMIT, "line": usize::MAX}),
        json!({"kind": "sse", "bytes": ENDLESS, "line": usize::MAX}),
        // Lines each well within the limit, the event not.
        json!({"kind": "sse", "bytes": 2 * LIMIT, "line": 1000}),
        json!({"kind": "sse", "bytes": ENDLESS, "line": PIECE}),
        // A line that never ends.
        json!({"kind": "endless-line"}),
        // On the standing GET stream, while the call's own stream is
        // silent.
        json!({"kind": "get", "bytes": ENDLESS}),
    ])
    .await;
}

#[tokio::test]
async fn answers_of_exactly_the_limit_are_read() {
    let server = start().await;
    let client = connect(&server, LIMIT).await;
    for how in [
        json!({"kind": "json", "bytes": LIMIT, "length": true}),
        json!({"kind": "json", "bytes": LIMIT, "length": false}),
        json!({"kind": "sse", "bytes": LIMIT, "line": usize::MAX}),
    ] {
        let text = client.call("answer", how.clone()).await;
        let text = text.unwrap_or_else(|e| panic!("{how}: {e}"));
        assert!(is_text_of(&text, LIMIT), "{how}: {} bytes", text.len());
    }
}

#[tokio::test]
async fn a_limit_above_16_mib_lets_larger_answers_through() {
    // The SDK's own limit is 16 MiB an answer; the client's is the one that
    // holds.
    let limit = 24 << 20;
    let bytes = 20 << 20;
    let server = start().await;
    let client = connect(&server, limit).await;
    for how in [
        json!({"kind": "json", "bytes": bytes, "length": true}),
        json!({"kind": "sse", "bytes": bytes, "line": usize::MAX}),
    ] {
        let text = client.call("answer", how.clone()).await;
        let text = text.unwrap_or_else(|e| panic!("{how}: {e}"));
        assert!(is_text_of(&text, bytes), "{how}: {} bytes", text.len());
    }
}

#[tokio::test]
async fn redirects_are_followed_only_within_the_origin_and_keeping_the_request() {
    let server = start().await;
    let base = server.url.trim_end_matches("/mcp");
    let client = connect_to(&format!("{base}/moved"), LIMIT).await.unwrap();
    let text = client
        .call(
            "answer",
            json!({"kind": "json", "bytes": 100, "length": true}),
        )
        .await
        .unwrap();
    assert!(is_text_of(&text, 100), "{text}");
    // Another origin would be sent the session and the headers; a 303
    // would turn the POST into a GET without its message.
    for path in ["/elsewhere", "/see-other"] {
        let error = connect_to(&format!("{base}{path}"), LIMIT)
            .await
            .unwrap_err();
        assert!(
            matches!(&error, McpError::Connect { server, .. } if server == "too-much"),
            "{path}: {error}"
        );
    }
}

#[tokio::test]
async fn a_handshake_or_listing_over_the_limit_fails_at_once_naming_it() {
    let server = start().await;
    let base = server.url.trim_end_matches("/mcp");
    let said = format!("a message of more than {LIMIT} bytes");
    let started = Instant::now();
    let error = connect_to(&format!("{base}/huge-handshake"), LIMIT)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, McpError::Connect { message, .. }
            if message.contains(&said) && message.contains("during the handshake")),
        "{error}"
    );
    let error = connect_to(&format!("{base}/huge-list"), LIMIT)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, McpError::List { message, .. }
            if message.contains(&said) && message.contains("while listing its tools")),
        "{error}"
    );
    assert!(started.elapsed() < AT_ONCE, "{:?}", started.elapsed());
}

#[tokio::test]
async fn an_oversized_late_answer_to_a_call_that_gave_up_fails_no_other_call_over_http() {
    let server = start().await;
    let mut client = connect(&server, LIMIT).await;
    for late in [
        json!({"kind": "json", "bytes": 3 * LIMIT, "length": false, "delay_ms": 1000}),
        json!({"kind": "json", "bytes": 3 * LIMIT, "length": true, "delay_ms": 1000}),
        json!({"kind": "sse", "bytes": 3 * LIMIT, "line": usize::MAX, "delay_ms": 1000}),
        // The answer's stream open when the call gives up; its event after.
        json!({"kind": "sse", "bytes": 3 * LIMIT, "line": usize::MAX, "pause_ms": 1000}),
        json!({"kind": "sse", "bytes": 3 * LIMIT, "line": 1000, "pause_ms": 1000}),
    ] {
        client = client.with_call_timeout(Duration::from_millis(300));
        let error = client.call("answer", late.clone()).await.unwrap_err();
        assert!(matches!(error, McpError::Timeout { .. }), "{late}: {error}");
        // Answered after the late answer came, and dropped.
        client = client.with_call_timeout(PATIENCE);
        let started = Instant::now();
        let text = client
            .call(
                "answer",
                json!({"kind": "json", "bytes": 100, "length": true, "delay_ms": 2000}),
            )
            .await
            .unwrap_or_else(|e| panic!("{late}: after {:?}: {e}", started.elapsed()));
        assert!(is_text_of(&text, 100), "{late}: {text}");
    }

    // An oversized answer to a call that waits fails that call, and only
    // it: a call answered after it goes on.
    for big in [
        json!({"kind": "json", "bytes": 3 * LIMIT, "length": false, "delay_ms": 500}),
        json!({"kind": "sse", "bytes": 3 * LIMIT, "line": usize::MAX, "delay_ms": 500}),
    ] {
        let (refused, answered) = tokio::join!(
            client.call("answer", big.clone()),
            client.call(
                "answer",
                json!({"kind": "json", "bytes": 100, "length": true, "delay_ms": 1500}),
            ),
        );
        let error = refused.unwrap_err();
        assert!(
            matches!(&error, McpError::BadMessage { problem, .. }
                if problem.contains(&format!("a message of more than {LIMIT} bytes"))),
            "{big}: {error}"
        );
        let text = answered.unwrap_or_else(|e| panic!("{big}: {e}"));
        assert!(is_text_of(&text, 100), "{big}: {text}");
    }
}
