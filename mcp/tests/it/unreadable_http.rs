//! A streamable-HTTP server that answers with what is not a JSON-RPC
//! message the client reads: a JSON body or an SSE event that is not JSON,
//! not JSON-RPC, an error without an `id`, a result that is not an object.
//! A small server written here (just enough HTTP/1.1 and JSON-RPC), since
//! no SDK sends such answers. Each must fail the call at once with
//! [`McpError::BadMessage`], naming what was sent; the client stays open,
//! and the next call works.

use std::sync::Arc;
use std::time::Instant;

use harness_mcp::{McpClient, McpError, McpOptions};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Mutex, Notify};

use super::*;

/// How long a call refused for what was sent may take, at most: well
/// under the call's timeout ([`PATIENCE`]).
const AT_ONCE: Duration = Duration::from_secs(10);

/// What the connections share: the events to send on the standing GET
/// stream.
#[derive(Default)]
struct State {
    push: Notify,
    pushed: Mutex<Vec<String>>,
}

/// Starts the server; its URL. `initialize`, `tools/list` (one tool,
/// `answer`) and notifications are answered as MCP says, with a session
/// id, and a GET stream stays open. `tools/call` of `answer` answers as
/// its arguments say, `{id}` in `body` standing for the request's id:
///
/// - `{"kind": "good"}`: the text `ok`;
/// - `{"kind": "json", "body": b}`: a JSON body `b`;
/// - `{"kind": "sse", "body": b, "end": bool}`: an SSE stream of one event
///   whose data is `b`, which then ends or stays open;
/// - `{"kind": "get", "body": b}`: an SSE stream that stays empty and
///   open, and an event whose data is `b` on the GET stream.
async fn start() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let state = Arc::new(State::default());
    tokio::spawn(async move {
        while let Ok((connection, _)) = listener.accept().await {
            tokio::spawn(serve(BufReader::new(connection), Arc::clone(&state)));
        }
    });
    url
}

/// One request: its method and body.
async fn read_request(connection: &mut BufReader<TcpStream>) -> Option<(String, Vec<u8>)> {
    let mut line = String::new();
    if connection.read_line(&mut line).await.ok()? == 0 {
        return None;
    }
    let method = line.split(' ').next()?.to_owned();
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
    Some((method, body))
}

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

async fn respond_json(connection: &mut BufReader<TcpStream>, body: &[u8]) -> std::io::Result<()> {
    respond(
        connection,
        "200 OK",
        "content-type: application/json\r\nmcp-session-id: s1\r\n",
        body,
    )
    .await
}

const SSE_HEAD: &str = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nmcp-session-id: s1\r\ntransfer-encoding: chunked\r\n\r\n";

/// One chunk of a chunked body.
async fn chunk(socket: &mut TcpStream, bytes: &[u8]) -> std::io::Result<()> {
    socket
        .write_all(format!("{:x}\r\n", bytes.len()).as_bytes())
        .await?;
    socket.write_all(bytes).await?;
    socket.write_all(b"\r\n").await
}

/// An SSE event whose data is `data` (one `data:` line).
fn event(data: &str) -> Vec<u8> {
    format!("data: {data}\n\n").into_bytes()
}

/// Reads until the client closes the connection.
async fn stay_open(connection: &mut BufReader<TcpStream>) -> std::io::Result<()> {
    let mut rest = Vec::new();
    connection.read_to_end(&mut rest).await.map(drop)
}

/// Answers the call `id` as `how` says (see [`start`]).
async fn answer(
    connection: &mut BufReader<TcpStream>,
    state: &State,
    id: &Value,
    how: &Value,
) -> std::io::Result<()> {
    let body = how["body"]
        .as_str()
        .unwrap_or("")
        .replace("{id}", &id.to_string());
    match how["kind"].as_str().unwrap() {
        "good" => {
            let result = json!({"content": [{"type": "text", "text": "ok"}]});
            let message = json!({"jsonrpc": "2.0", "id": id, "result": result});
            respond_json(connection, message.to_string().as_bytes()).await
        }
        "json" => respond_json(connection, body.as_bytes()).await,
        "sse" => {
            let socket = connection.get_mut();
            socket.write_all(SSE_HEAD.as_bytes()).await?;
            chunk(socket, &event(&body)).await?;
            if how["end"].as_bool().unwrap() {
                socket.write_all(b"0\r\n\r\n").await
            } else {
                stay_open(connection).await
            }
        }
        "get" => {
            connection.get_mut().write_all(SSE_HEAD.as_bytes()).await?;
            state.pushed.lock().await.push(body);
            state.push.notify_one();
            stay_open(connection).await
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
        let pushed = std::mem::take(&mut *state.pushed.lock().await);
        for data in pushed {
            chunk(socket, &event(&data)).await?;
        }
    }
}

/// Serves one connection's requests until the client closes it.
async fn serve(mut connection: BufReader<TcpStream>, state: Arc<State>) {
    while let Some((method, body)) = read_request(&mut connection).await {
        let served = match method.as_str() {
            "GET" => get_stream(&mut connection, &state).await,
            "DELETE" => respond(&mut connection, "200 OK", "", b"").await,
            _ => {
                let message: Value = serde_json::from_slice(&body).unwrap();
                let method = message["method"].as_str().unwrap_or("");
                match (method, message.get("id")) {
                    (_, None) => respond(&mut connection, "202 Accepted", "", b"").await,
                    ("initialize", Some(id)) => {
                        let version = message["params"]["protocolVersion"].clone();
                        let result = json!({
                            "protocolVersion": version,
                            "capabilities": { "tools": {} },
                            "serverInfo": { "name": "unreadable", "version": "1" },
                        });
                        let answer = json!({"jsonrpc": "2.0", "id": id, "result": result});
                        respond_json(&mut connection, answer.to_string().as_bytes()).await
                    }
                    ("tools/list", Some(id)) => {
                        let tools = [json!({"name": "answer", "inputSchema": {"type": "object"}})];
                        let answer =
                            json!({"jsonrpc": "2.0", "id": id, "result": {"tools": tools}});
                        respond_json(&mut connection, answer.to_string().as_bytes()).await
                    }
                    ("tools/call", Some(id)) => {
                        let how = message["params"]["arguments"].clone();
                        answer(&mut connection, &state, id, &how).await
                    }
                    (method, Some(id)) => {
                        let error =
                            json!({"code": -32601, "message": format!("no method {method}")});
                        let answer = json!({"jsonrpc": "2.0", "id": id, "error": error});
                        respond_json(&mut connection, answer.to_string().as_bytes()).await
                    }
                }
            }
        };
        if served.is_err() {
            return;
        }
    }
}

async fn connect(url: &str) -> McpClient {
    let options = McpOptions::default()
        .call_timeout(PATIENCE)
        .connect_timeout(PATIENCE);
    tokio::time::timeout(PATIENCE, McpClient::http_with("unreadable", url, options))
        .await
        .expect("connecting hangs")
        .unwrap()
}

/// Calls `answer` with `how`, which must fail at once with
/// [`McpError::BadMessage`] saying `says`; the client must stay open, and
/// the next call work. What went wrong, if anything.
async fn refused(client: &McpClient, how: &Value, says: &str) -> Result<(), String> {
    let started = Instant::now();
    let called = tokio::time::timeout(PATIENCE, client.call("answer", how.clone()))
        .await
        .map_err(|_| "the call hangs".to_owned())?;
    let took = started.elapsed();
    let error = match called {
        Ok(text) => return Err(format!("answered {text:?}")),
        Err(error) => error,
    };
    let named = matches!(&error, McpError::BadMessage { server, tool, problem }
        if server == "unreadable" && tool == "answer" && problem.contains(says));
    if !named {
        return Err(format!("{error:?}"));
    }
    if took > AT_ONCE {
        return Err(format!("refused after {took:?}"));
    }
    if client.is_closed() {
        return Err("the client is closed".into());
    }
    let next = tokio::time::timeout(PATIENCE, client.call("answer", json!({"kind": "good"})))
        .await
        .map_err(|_| "the next call hangs".to_owned())?;
    match next {
        Ok(text) if text == "ok" => Ok(()),
        other => Err(format!("the next call: {other:?}")),
    }
}

/// Every case of `cases` (what the tool is asked to answer, and what the
/// error must say) [`refused`], in turn, on one connection.
async fn assert_all_refused(cases: &[(Value, &str)]) {
    let url = start().await;
    let client = connect(&url).await;
    let mut failed = Vec::new();
    for (how, says) in cases {
        if let Err(problem) = refused(&client, how, says).await {
            failed.push(format!("{how}: {problem}"));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// Bodies that are not a message the client reads, each the answer to
/// request `{id}`, and what the error says of each.
fn bad_bodies() -> Vec<(&'static str, &'static str)> {
    vec![
        (r#"{"id":{id},"result":{}}"#, "it has no `jsonrpc`"),
        (
            r#"{"jsonrpc":"1.0","id":{id},"result":{}}"#,
            "its `jsonrpc` is not \"2.0\"",
        ),
        (
            r#"{"jsonrpc":"2.0","id":{id},"error":{"code":"bad","message":"x"}}"#,
            "its `error` is not an object with a whole-number `code`",
        ),
        (
            r#"{"jsonrpc":"2.0","id":{id},"result":{},"error":{"code":1,"message":"x"}}"#,
            "it has both a `result` and an `error`",
        ),
        (
            r#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error"}}"#,
            "an error without an `id`",
        ),
        (
            r#"{"jsonrpc":"2.0","id":{id},"result":5}"#,
            "its `result` is not an object",
        ),
        ("[1,2", "a message that is not JSON (\"[1,2\""),
    ]
}

#[tokio::test]
async fn unreadable_json_bodies_fail_the_call_at_once_and_the_client_goes_on() {
    let cases: Vec<(Value, &str)> = bad_bodies()
        .into_iter()
        .map(|(body, says)| (json!({"kind": "json", "body": body}), says))
        .collect();
    assert_all_refused(&cases).await;
}

#[tokio::test]
async fn unreadable_sse_events_fail_the_call_at_once_and_the_client_goes_on() {
    let mut bodies = bad_bodies();
    bodies.extend([
        (
            r#"{"jsonrpc":"2.0","id":{id},"result":[]}"#,
            "its `result` is not an object",
        ),
        ("not json at all", "a message that is not JSON"),
        (
            r#"{"jsonrpc":"2.0","id":{id},"result":{"#,
            "a message that is not JSON",
        ),
    ]);
    let mut cases = Vec::new();
    for (body, says) in bodies {
        for end in [false, true] {
            cases.push((json!({"kind": "sse", "body": body, "end": end}), says));
        }
    }
    assert_all_refused(&cases).await;
}

#[tokio::test]
async fn an_unreadable_answer_on_the_get_stream_fails_the_call_waiting() {
    assert_all_refused(&[
        (
            json!({"kind": "get", "body": r#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error"}}"#}),
            "an error without an `id`",
        ),
        (
            json!({"kind": "get", "body": r#"{"jsonrpc":"2.0","result":{"content":[]}}"#}),
            "it is not of the shape of a JSON-RPC message",
        ),
        (
            json!({"kind": "get", "body": r#"{"jsonrpc":"2.0","id":{id},"result":{"#}),
            "a message that is not JSON",
        ),
    ])
    .await;
}

#[tokio::test]
async fn notices_and_noise_on_a_stream_fail_no_call() {
    // A notification the SDK cannot read, or JSON that is not JSON-RPC, on
    // the GET stream: no call fails for it.
    let url = start().await;
    let client = connect(&url).await;
    for body in [
        r#"{"jsonrpc":"1.0","method":"notifications/message","params":{}}"#,
        r#"{"level":"info","msg":"not a message"}"#,
    ] {
        let called = tokio::time::timeout(
            PATIENCE,
            client.call("answer", json!({"kind": "get", "body": body})),
        );
        // Nothing answers this call: it waits (here, until dropped).
        assert!(
            tokio::time::timeout(Duration::from_secs(1), called)
                .await
                .is_err(),
            "{body}"
        );
        assert!(!client.is_closed());
    }
    let text = client
        .call("answer", json!({"kind": "good"}))
        .await
        .unwrap();
    assert_eq!(text, "ok");
}
