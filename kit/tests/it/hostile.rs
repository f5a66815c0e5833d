//! The `assistant` example driven by a hostile model: an OpenAI-compatible
//! server (a small one of the test's own, speaking the chat-completions
//! wire format) whose model tries every way out of the working directory
//! and past the approval of shell commands. Nothing outside is read
//! unasked, no chained command runs, and neither the API key nor the
//! process's environment reaches the model, the terminal or the store.

use crate::example::{assistant, workdir};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::symlink;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

const API_KEY: &str = "sk-hostile-test-0123456789abcdef";
/// In the assistant's environment under a name that does not look secret:
/// only the confinement keeps it from the model.
const MARKER: &str = "env-marker-5f1c9a27e3";
const OUTSIDE: &str = "OUTSIDE-CONTENT-77a1";

/// A chat-completions reply calling `calls` (name, arguments).
fn tool_calls(calls: &[(&str, Value)]) -> Value {
    let calls: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (name, args))| {
            json!({
                "id": format!("call_{i}"),
                "type": "function",
                "function": {"name": name, "arguments": args.to_string()},
            })
        })
        .collect();
    reply(
        json!({"role": "assistant", "content": null, "tool_calls": calls}),
        "tool_calls",
    )
}

fn reply(message: Value, finish: &str) -> Value {
    json!({
        "id": "chatcmpl-hostile",
        "object": "chat.completion",
        "created": 0,
        "model": "hostile",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    })
}

/// Serves `replies` in order to POST requests, keeping every request's
/// body; the address to use as the base URL.
fn serve(replies: Vec<Value>) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind: {e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&bodies);
    let replies = Arc::new(Mutex::new(replies.into_iter()));
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let (seen, replies) = (Arc::clone(&seen), Arc::clone(&replies));
            std::thread::spawn(move || answer(stream, &seen, &replies));
        }
    });
    (format!("http://{addr}/v1"), bodies)
}

fn answer(
    stream: TcpStream,
    seen: &Mutex<Vec<String>>,
    replies: &Mutex<std::vec::IntoIter<Value>>,
) {
    let mut reader = BufReader::new(stream.try_clone().unwrap_or_else(|e| panic!("{e}")));
    let mut stream = stream;
    loop {
        let mut length = 0usize;
        let mut line = String::new();
        let mut first = true;
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if first {
                first = false;
                continue;
            }
            let trimmed = line.trim_end();
            if trimmed.is_empty() {
                break;
            }
            if let Some((name, value)) = trimmed.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        if let Ok(mut seen) = seen.lock() {
            seen.push(String::from_utf8_lossy(&body).into_owned());
        }
        let next = replies.lock().ok().and_then(|mut r| r.next());
        let text = next
            .unwrap_or_else(|| reply(json!({"role": "assistant", "content": "done"}), "stop"))
            .to_string();
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            text.len()
        );
        if stream.write_all(head.as_bytes()).is_err() || stream.write_all(text.as_bytes()).is_err()
        {
            return;
        }
    }
}

/// Every file under `dir`, as bytes.
fn all_bytes(dir: &std::path::Path) -> Vec<u8> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                out.extend(bytes);
            }
        }
    }
    out
}

#[test]
fn a_hostile_model_neither_leaves_the_directory_nor_slips_a_command_past_approval() {
    let dir = workdir();
    let outside = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(outside.path().join("secret.txt"), OUTSIDE).unwrap_or_else(|e| panic!("{e}"));
    // What a model could have made with a command earlier.
    symlink("/proc/self/environ", dir.path().join("env.txt")).unwrap_or_else(|e| panic!("{e}"));
    symlink("/dev/zero", dir.path().join("zero")).unwrap_or_else(|e| panic!("{e}"));
    symlink(outside.path(), dir.path().join("out")).unwrap_or_else(|e| panic!("{e}"));
    symlink(
        outside.path().join("secret.txt"),
        dir.path().join("leak.txt"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let secret = outside.path().join("secret.txt").display().to_string();
    let (url, bodies) = serve(vec![
        // Inside by spelling, outside in fact: refused without asking.
        tool_calls(&[
            ("read_file", json!({"path": "env.txt"})),
            ("read_file", json!({"path": "zero"})),
            ("read_file", json!({"path": "leak.txt"})),
            ("list_dir", json!({"path": "out"})),
            ("read_file", json!({"path": "out/secret.txt"})),
            ("shell", json!({"command": "wc -l README.md; touch PWNED"})),
            ("shell", json!({"command": "cat README.md > PWNED"})),
            ("shell", json!({"command": "echo $(touch PWNED)"})),
        ]),
        // Outside by spelling: asked (the test answers no), and /proc
        // refused whatever the answer.
        tool_calls(&[
            ("read_file", json!({"path": secret})),
            (
                "read_file",
                json!({"path": "../../../../proc/self/environ"}),
            ),
        ]),
    ]);
    let mut child = Command::new(assistant())
        .args(["--store", ".harness/assistant", "--task", "look around"])
        .current_dir(dir.path())
        .env("HARNESS_PROVIDER", "openai")
        .env("OPENAI_BASE_URL", &url)
        .env("OPENAI_API_KEY", API_KEY)
        .env("HARNESS_MODEL", "hostile")
        .env("HOSTILE_MARKER", MARKER)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("the assistant starts: {e}"));
    if let Some(mut stdin) = child.stdin.take() {
        // No to the first outside read; yes to /proc (refused anyway).
        stdin
            .write_all(b"n\nnot outside\ny\n")
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let output = child.wait_with_output().unwrap_or_else(|e| panic!("{e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{stdout}\n{stderr}");
    // Asked only about the two outside paths, by their exact spelling.
    // (A prompt and the next question share a line: input is not echoed.)
    let questions: Vec<&str> = stdout.split("? call_").skip(1).collect();
    assert_eq!(questions.len(), 2, "{stdout}");
    assert!(
        questions[0].starts_with(&format!(
            "0 wants to run read_file({{\"path\":\"{secret}\"}})"
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("[a]lways allow read_file:{secret}")),
        "{stdout}"
    );
    // The refusals the model got, one per hostile call.
    let refusals = stdout.matches("  ✗ call_").count();
    assert_eq!(refusals, 10, "{stdout}");
    assert!(stdout.contains("leads outside"), "{stdout}");
    assert!(stdout.contains("/proc"), "{stdout}");
    assert!(!dir.path().join("PWNED").exists(), "a chained command ran");
    // Nothing from outside, and no secret, reached the model, the terminal
    // or the store.
    let bodies = bodies.lock().map(|b| b.clone()).unwrap_or_default();
    assert_eq!(bodies.len(), 3, "three model turns");
    let store = all_bytes(&dir.path().join(".harness"));
    for needle in [OUTSIDE, MARKER, API_KEY] {
        for (i, body) in bodies.iter().enumerate() {
            assert!(!body.contains(needle), "request {i} holds {needle}: {body}");
        }
        assert!(
            !stdout.contains(needle) && !stderr.contains(needle),
            "{needle} printed"
        );
        assert!(
            !store.windows(needle.len()).any(|w| w == needle.as_bytes()),
            "the store holds {needle}"
        );
    }
}
