//! The environment a stdio server's process gets: never the host's secrets
//! unless asked for.

use std::collections::BTreeMap;

use harness_mcp::{McpClient, McpError, McpOptions, PASS_ENV};
use serde_json::json;

use super::*;

/// Set in this test binary when it runs [`the_test`] again as the host.
const AS_HOST: &str = "HARNESS_MCP_TEST_AS_HOST";
/// A host secret the server must not get.
const HOST_KEY: &str = "HARNESS_MCP_TEST_API_KEY";
/// A host variable whose name looks harmless, not named: not passed either.
const HOST_PLAIN: &str = "HARNESS_MCP_TEST_PLAIN";
/// A host variable the application names with `pass_env`.
const NAMED: &str = "HARNESS_MCP_TEST_NAMED";
/// A host variable named with `pass_env`, then removed from the command.
const REMOVED: &str = "HARNESS_MCP_TEST_REMOVED";
/// A variable set on the command.
const SET_TOKEN: &str = "HARNESS_MCP_TEST_SET_TOKEN";

/// The full name of [`the_test`], to run it alone.
const THE_TEST: &str = "environment::a_stdio_server_gets_only_the_allowed_environment";

/// The server's environment, as its `environment` tool reports it.
async fn server_environment(client: &McpClient) -> BTreeMap<String, String> {
    let text = client.call("environment", json!({})).await.unwrap();
    serde_json::from_str(&text).unwrap()
}

fn command() -> tokio::process::Command {
    let mut command = tokio::process::Command::new(python());
    command.arg(server_script()).arg("stdio");
    command
}

/// The host's environment cannot be changed in a running test (that is
/// `unsafe`, and other tests read it at the same time), so the test runs
/// this binary again, as the host, with the variables set.
#[tokio::test]
async fn a_stdio_server_gets_only_the_allowed_environment() {
    if std::env::var_os(AS_HOST).is_none() {
        let output = tokio::process::Command::new(std::env::current_exe().unwrap())
            .args([THE_TEST, "--exact", "--nocapture", "--test-threads=1"])
            .env(AS_HOST, "1")
            .env(HOST_KEY, "sk-host-secret-value-42424242")
            .env(HOST_PLAIN, "plain-host-value")
            .env(NAMED, "named-host-value")
            .env(REMOVED, "removed-host-value")
            .output()
            .await
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success() && stdout.contains("1 passed"),
            "the test as the host failed:\n{stdout}\n{stderr}"
        );
        return;
    }
    the_test().await;
}

/// [`a_stdio_server_gets_only_the_allowed_environment`], in the process
/// with the host's variables.
async fn the_test() {
    let mut confined = command();
    confined
        .env(SET_TOKEN, "tok-set-on-the-command-31337")
        .env_remove(REMOVED);
    let options = McpOptions::default().pass_env(NAMED).pass_env(REMOVED);
    let client = McpClient::stdio_with("confined", confined, options)
        .await
        .unwrap();
    let seen = server_environment(&client).await;

    // Named and set: passed (the token redacted in what the server says).
    assert_eq!(
        seen.get(NAMED).map(String::as_str),
        Some("named-host-value")
    );
    assert_eq!(seen.get(SET_TOKEN).map(String::as_str), Some("[redacted]"));
    // The basics, as the host has them.
    let path = std::env::var("PATH").unwrap();
    assert_eq!(seen.get("PATH"), Some(&path));
    // Nothing else: not the secret, not the plain variable, not the
    // removed one, not the test's own (`HARNESS_MCP_PYTHON`, AS_HOST).
    for name in seen.keys() {
        assert!(
            PASS_ENV.contains(&name.as_str()) || [NAMED, SET_TOKEN].contains(&name.as_str()),
            "the server got `{name}` (it has {:?})",
            seen.keys()
        );
    }
    assert!(!seen.contains_key(HOST_KEY) && !seen.contains_key(REMOVED));

    // Asked for, the whole environment.
    let options = McpOptions::default().inherit_env(true);
    let client = McpClient::stdio_with("inheriting", command(), options)
        .await
        .unwrap();
    let seen = server_environment(&client).await;
    assert_eq!(seen.get(HOST_KEY).map(String::as_str), Some("[redacted]"));
    assert_eq!(
        seen.get(HOST_PLAIN).map(String::as_str),
        Some("plain-host-value")
    );
}

#[tokio::test]
async fn a_name_that_cannot_be_a_variable_s_is_a_spawn_error() {
    for (name, problem) in [
        ("", "it is empty"),
        ("A=B", "it has a `=`"),
        ("A\0B", "it has a NUL byte"),
    ] {
        let options = McpOptions::default().pass_env("LANG").pass_env(name);
        let error = McpClient::stdio_with("named", command(), options)
            .await
            .unwrap_err();
        let McpError::Spawn {
            server, message, ..
        } = &error
        else {
            panic!("{error}");
        };
        assert_eq!(server, "named");
        assert_eq!(
            message,
            &format!(
                "McpOptions::pass_env names {name:?}, which cannot be an environment variable's name: {problem}"
            )
        );
    }
}
