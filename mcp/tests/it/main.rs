//! harness-mcp against a real MCP server process: `tests/servers/harness_test_server.py`,
//! on the official Python SDK, over stdio and streamable HTTP.
#![allow(clippy::unwrap_used, missing_docs)]

use std::path::PathBuf;
use std::time::Duration;

mod environment;
mod hostile;
mod hostile_http;
mod http;
mod late_answers;
mod malformed;
mod process_group;
mod stdio;
mod unreadable_http;
mod url_secrets;

/// A safety net for waits that should end at once; no test relies on it.
const PATIENCE: Duration = Duration::from_secs(60);

/// The Python of the venv `scripts/test` makes (with the `mcp` package):
/// `HARNESS_MCP_PYTHON`, else `target/mcp-venv/bin/python`. The tests fail,
/// never skip, when it is missing.
fn python() -> PathBuf {
    let path = std::env::var_os("HARNESS_MCP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/mcp-venv/bin/python")
        });
    assert!(
        path.exists(),
        "no Python with the MCP SDK at {}: run scripts/test (it makes the venv), or set HARNESS_MCP_PYTHON \
         to a python with `pip install mcp==1.30.0`",
        path.display()
    );
    path
}

/// The test server's script.
fn server_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/servers/harness_test_server.py")
}
