//! The event stream: server-sent events over a plain HTTP connection.

use crate::support::{World, dechunk, post, request};
use harness_studio::Serving;
use serde_json::{Value, json};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// An open `/api/events` stream.
pub(crate) struct Events {
    conn: TcpStream,
    raw: Vec<u8>,
    /// Where the body starts in `raw`.
    body_at: usize,
    /// Events already returned.
    taken: usize,
}

impl Events {
    async fn open(serving: &Serving) -> (u16, String, Events) {
        Events::open_with(serving, "").await
    }

    /// The stream with `query` (`&watch=…`) after the token.
    pub(crate) async fn open_with(serving: &Serving, query: &str) -> (u16, String, Events) {
        let mut conn = TcpStream::connect(serving.local_addr()).await.unwrap();
        let req = format!(
            "GET /api/events?token={}{query} HTTP/1.1\r\nHost: studio\r\nAccept: text/event-stream\r\n\r\n",
            serving.token()
        );
        conn.write_all(req.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        let mut buf = [0u8; 4096];
        let end = loop {
            if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                break end;
            }
            let n = conn.read(&mut buf).await.unwrap();
            assert!(n > 0, "the stream closed before its head");
            raw.extend_from_slice(&buf[..n]);
        };
        let head = String::from_utf8_lossy(&raw[..end]).to_string();
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        let events = Events {
            conn,
            body_at: end + 4,
            raw,
            taken: 0,
        };
        (status, head, events)
    }

    /// The events decoded so far: (name, data) of each complete one.
    fn decoded(&self) -> Vec<(String, String)> {
        // The body is chunked; decode what is complete.
        let mut body = self.raw[self.body_at..].to_vec();
        body.extend_from_slice(b"0\r\n\r\n");
        let text = dechunk(&body).map(|b| String::from_utf8(b).unwrap());
        let text = text.unwrap_or_default();
        let mut out = Vec::new();
        let complete = text.rfind("\n\n").map_or("", |i| &text[..i]);
        for block in complete.split("\n\n") {
            let (mut name, mut data) = (String::new(), String::new());
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event:") {
                    name = v.trim().to_owned();
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.trim_start());
                }
            }
            if !name.is_empty() {
                out.push((name, data));
            }
        }
        out
    }

    /// The next event; `None` when the stream ends. The timeout is a safety
    /// net.
    pub(crate) async fn next(&mut self) -> Option<(String, Value)> {
        let mut buf = [0u8; 4096];
        loop {
            let decoded = self.decoded();
            if decoded.len() > self.taken {
                let (name, data) = decoded[self.taken].clone();
                self.taken += 1;
                return Some((name, serde_json::from_str(&data).unwrap()));
            }
            let n = tokio::time::timeout(Duration::from_secs(30), self.conn.read(&mut buf))
                .await
                .expect("an event within 30 s")
                .unwrap();
            if n == 0 {
                return None;
            }
            self.raw.extend_from_slice(&buf[..n]);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_starts_with_every_session_then_follows_an_answered_run() {
    let w = World::new("events").await;
    let s = w.studio().await;
    let (status, head, mut events) = Events::open(&s).await;
    assert_eq!(status, 200, "{head}");
    assert!(
        head.to_lowercase()
            .contains("content-type: text/event-stream"),
        "{head}"
    );
    let (name, first) = events.next().await.unwrap();
    assert_eq!(name, "sessions");
    let phases: Vec<_> = first
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["id"].as_str().unwrap().to_owned(),
                s["phase"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(phases.len(), 3);
    assert!(phases.contains(&(w.waiting.clone(), "waiting".to_owned())));

    let answer = json!({"interrupt": w.interrupt, "answer": {"approve": true, "note": "live"}});
    let r = post(
        &s,
        &format!("/api/sessions/{}/answer", w.waiting),
        &answer.to_string(),
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.body);
    // Each event is a change of the answered session, until it is done.
    let mut seen = Vec::new();
    loop {
        let (name, data) = events.next().await.expect("the stream goes on");
        assert_eq!(name, "session", "{data}");
        assert_eq!(
            data["id"],
            w.waiting.as_str(),
            "only the answered session changes"
        );
        let phase = data["phase"].as_str().unwrap().to_owned();
        seen.push(data["version"].as_u64().unwrap());
        if phase == "done" {
            assert_eq!(data["steps"], 3);
            break;
        }
        assert_ne!(phase, "failed", "{data}");
    }
    // Each event is a new version: none repeats what was sent.
    assert!(seen.windows(2).all(|p| p[0] < p[1]), "{seen:?}");

    // Stopping the studio ends the stream.
    s.shutdown().await.unwrap();
    while let Some((name, data)) = events.next().await {
        assert_eq!(name, "session", "{data}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_made_elsewhere_appears_on_the_stream() {
    let w = World::new("events-fork").await;
    let s = w.read_only().await;
    let (_, _, mut events) = Events::open(&s).await;
    let (name, _) = events.next().await.unwrap();
    assert_eq!(name, "sessions");
    // Another writer of the store: the application itself.
    let fork = w.agent.fork(&w.done.clone().into(), 1, None).await.unwrap();
    let (name, data) = events.next().await.unwrap();
    assert_eq!(name, "session");
    assert_eq!(data["id"], fork.as_str());
    assert_eq!(data["phase"], "done");
    let r = request(&s, "GET", "/api/events", &[], None).await;
    assert_eq!(r.status, 401);
    s.shutdown().await.unwrap();
}
