//! What a stdio server starts ends with it: the server runs in a process
//! group of its own, which is killed when the client stops the server (it
//! is dropped or closed) or the server exits. Unix only.
#![cfg(unix)]

use std::time::Instant;

use harness_mcp::{McpClient, McpOptions};
use serde_json::json;

use super::*;

fn hostile_command() -> tokio::process::Command {
    let mut command = tokio::process::Command::new(python());
    command
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/servers/hostile_server.py"))
        .arg("extra");
    command
}

/// Whether process `pid` runs: it exists and is not a zombie (the test's
/// container may have no init to reap the orphans killed).
fn runs(pid: u32) -> bool {
    if !std::path::Path::new("/proc/self").exists() {
        // No /proc (macOS): `kill -0`, which finds a zombie too.
        return std::process::Command::new("kill")
            .args(["-0", &pid.to_string()])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
    }
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // `pid (comm) state …`: the state follows the last `)`.
    let state = stat.rsplit(')').next().unwrap_or("").trim_start();
    !state.starts_with('Z') && !state.starts_with('X')
}

/// Kills what is left of `pids` when dropped, so that a failing test
/// leaves nothing running.
struct Leftovers(Vec<u32>);

impl Drop for Leftovers {
    fn drop(&mut self) {
        for pid in &self.0 {
            if runs(*pid) {
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
        }
    }
}

/// Starts a server, has it start `n` processes that ignore SIGTERM; their
/// pids.
async fn server_with_children(n: usize) -> (McpClient, Leftovers) {
    let options = McpOptions::default()
        .connect_timeout(PATIENCE)
        .call_timeout(PATIENCE);
    let client = McpClient::stdio_with("spawner", hostile_command(), options)
        .await
        .unwrap();
    let pids: Vec<u32> =
        serde_json::from_str(&client.call("spawn", json!({"n": n})).await.unwrap()).unwrap();
    assert_eq!(pids.len(), n);
    let leftovers = Leftovers(pids);
    for pid in &leftovers.0 {
        assert!(runs(*pid), "{pid} was started");
    }
    (client, leftovers)
}

/// Waits until none of `pids` runs, failing after [`PATIENCE`] / 2.
async fn all_end(pids: &Leftovers, case: &str) {
    let started = Instant::now();
    while pids.0.iter().any(|pid| runs(*pid)) {
        assert!(
            started.elapsed() < PATIENCE / 2,
            "{case}: still running after {:?}: {:?}",
            started.elapsed(),
            pids.0.iter().filter(|pid| runs(**pid)).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn what_a_server_starts_ends_when_the_server_is_stopped_or_exits() {
    // Dropped: only the server itself was killed; what it started ran on.
    let (client, pids) = server_with_children(2).await;
    drop(client);
    all_end(&pids, "dropped").await;

    // Closed.
    let (client, pids) = server_with_children(3).await;
    client.close();
    all_end(&pids, "closed").await;
    assert!(client.is_closed());

    // Dropped while a tool handed out is held: the server runs on, and so
    // does what it started, until the last tool goes.
    let (client, pids) = server_with_children(1).await;
    let tools = client.tools();
    drop(client);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        pids.0.iter().all(|pid| runs(*pid)),
        "the server still serves"
    );
    drop(tools);
    all_end(&pids, "last tool dropped").await;

    // The server exits by itself, leaving them behind.
    let (client, pids) = server_with_children(2).await;
    assert_eq!(client.call("exit", json!({})).await.unwrap(), "bye");
    all_end(&pids, "exited").await;

    // The host (this test) is in none of those groups: it is still here.
}
