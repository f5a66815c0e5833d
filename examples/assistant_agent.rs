//! The assistant's loop: the agent kit's loop with local tools (read a
//! file, list a directory, run a shell command), each shell command asked
//! about first. The `assistant` example runs it on a terminal; `serve`
//! serves it.

use harness::llm::ToolSet;
use harness_kit::fs::{FsError, ListDir, ReadFile, Root, Window, path_policy};
use harness_kit::shell::{self, Shell};
use harness_kit::{AgentChat, AgentLoop, Limits, MemoryConfig, ModelDeps};
use std::path::Path;
use std::time::Duration;

/// Of a file, the model sees at most its first 8 KiB.
pub const READ_WINDOW: Window = Window::Head(8 * 1024);

/// A command runs for at most this long.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// The loop on the directory `root`: inside it files are read and listed
/// unasked, outside it only with an approval; every shell command, run in
/// `root`, waits for one. The system prompt says the model is `role`
/// ("a careful assistant in a terminal").
///
/// ```
/// use harness_kit::{AgentChat, AgentLoop, ModelDeps};
///
/// let dir = std::env::temp_dir();
/// let assistant: AgentLoop<AgentChat, ModelDeps> =
///     harness_examples::assistant_agent::agent_loop(&dir, "a careful assistant")?;
/// let harness = assistant.builder().build()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn agent_loop(root: &Path, role: &str) -> Result<AgentLoop<AgentChat, ModelDeps>, FsError> {
    let root_dir = root;
    let root = Root::open(root_dir)?.allow_outside();
    let tools = ToolSet::new()
        .with(ReadFile::new(root.clone(), READ_WINDOW))
        .with(ListDir::new(root.clone()))
        .with(Shell::new(root_dir, COMMAND_TIMEOUT));
    Ok(AgentLoop::<AgentChat, ModelDeps>::new(tools)
        .system(format!(
            "You are {role}. Use the tools to look before you answer; prefer reading and \
             listing to the shell. Answer briefly."
        ))
        .policy("read_file", path_policy(&root, "read_file", "path"))
        .policy("list_dir", path_policy(&root, "list_dir", "path"))
        .policy("shell", shell::policy())
        .limits(Limits::none().turns(12).tokens(200_000))
        .memory(MemoryConfig::budget(24_000)))
}
