//! Tools for working in the project's directory: read and write files,
//! list a directory, run a command. The file tools are confined to the
//! directory by [`harness_kit::fs::Root`]: a path may not leave it, by
//! `..`, an absolute path or a link (one the model made with a command
//! included), and `/proc`, devices, FIFOs and hard-linked files are not
//! read.

use harness::llm::{Tool, ToolSet};
use harness_kit::fs::{FsError, Root, Window};
use schemars::JsonSchema;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The tools of [`workspace_tools`]: `read_file`, `write_file`,
/// `list_dir` and `run`, confined to `dir`. Commands run with `sh -c` in
/// `dir`, for at most `timeout` each.
///
/// ```
/// let tools = harness_recipes::project::workspace_tools("/tmp", std::time::Duration::from_secs(30));
/// assert_eq!(tools.specs().len(), 4);
/// ```
pub fn workspace_tools(dir: impl Into<PathBuf>, timeout: Duration) -> ToolSet {
    let dir: Arc<Path> = Arc::from(dir.into());
    ToolSet::new()
        .with(ReadFile(Arc::clone(&dir)))
        .with(WriteFile(Arc::clone(&dir)))
        .with(ListDir(Arc::clone(&dir)))
        .with(RunCommand { dir, timeout })
}

/// The most of a file `read_file` reads: its end (it shows the last 4 KiB).
const READ_LIMIT: u64 = 16 * 1024;

/// The project directory as the file tools' [`Root`], opened at each call
/// (the directory may be made after the tools are).
fn root(dir: &Path) -> Result<Root, String> {
    Root::open(dir).map_err(|e| format!("the project directory: {e}"))
}

/// Runs a file operation off the async threads; its error as text for the
/// model.
async fn blocking<T: Send + 'static>(
    dir: &Arc<Path>,
    work: impl FnOnce(Root) -> Result<T, FsError> + Send + 'static,
) -> Result<T, String> {
    let dir = Arc::clone(dir);
    tokio::task::spawn_blocking(move || work(root(&dir)?).map_err(|e| e.to_string()))
        .await
        .map_err(|e| format!("the file operation did not finish: {e}"))?
}

#[derive(Deserialize, JsonSchema)]
struct PathArgs {
    /// A path relative to the project directory.
    path: String,
}

#[derive(Debug)]
struct ReadFile(Arc<Path>);

#[async_trait::async_trait]
impl Tool for ReadFile {
    type Args = PathArgs;
    type Output = String;
    type Error = String;
    fn name(&self) -> &str {
        "read_file"
    }
    fn description(&self) -> &str {
        "Reads a text file of the project (the last 4 KiB of a longer one)."
    }
    async fn call(&self, args: PathArgs) -> Result<String, String> {
        // Only the end is kept: no more than it is read.
        let read = blocking(&self.0, move |root| {
            root.read(&args.path, Window::Tail(READ_LIMIT))
        })
        .await?;
        Ok(super::verify::tail(read.text))
    }
}

#[derive(Deserialize, JsonSchema)]
struct WriteArgs {
    /// A path relative to the project directory.
    path: String,
    /// The file's whole new content.
    content: String,
}

#[derive(Debug)]
struct WriteFile(Arc<Path>);

#[async_trait::async_trait]
impl Tool for WriteFile {
    type Args = WriteArgs;
    type Output = String;
    type Error = String;
    fn name(&self) -> &str {
        "write_file"
    }
    fn description(&self) -> &str {
        "Writes a file of the project (creating its directories), replacing its content."
    }
    async fn call(&self, args: WriteArgs) -> Result<String, String> {
        let done = format!("wrote {} bytes to {}", args.content.len(), args.path);
        blocking(&self.0, move |root| {
            root.write(&args.path, args.content.as_bytes())
        })
        .await?;
        Ok(done)
    }
}

#[derive(Debug)]
struct ListDir(Arc<Path>);

#[async_trait::async_trait]
impl Tool for ListDir {
    type Args = PathArgs;
    type Output = String;
    type Error = String;
    fn name(&self) -> &str {
        "list_dir"
    }
    fn description(&self) -> &str {
        "Lists a directory of the project: one entry per line, directories ending with /."
    }
    async fn call(&self, args: PathArgs) -> Result<String, String> {
        let (entries, more) = blocking(&self.0, move |root| root.list(&args.path)).await?;
        let mut names: Vec<String> = entries
            .into_iter()
            .map(|e| {
                if e.is_dir {
                    format!("{}/", e.name)
                } else {
                    e.name
                }
            })
            .collect();
        if more > 0 {
            names.push(format!("[{more} more entries not shown]"));
        }
        Ok(names.join("\n"))
    }
}

#[derive(Deserialize, JsonSchema)]
struct CommandArgs {
    /// A command line for `sh -c`, run in the project directory.
    command: String,
}

#[derive(Debug)]
struct RunCommand {
    dir: Arc<Path>,
    timeout: Duration,
}

#[async_trait::async_trait]
impl Tool for RunCommand {
    type Args = CommandArgs;
    type Output = String;
    type Error = String;
    fn name(&self) -> &str {
        "run"
    }
    fn description(&self) -> &str {
        "Runs a command with `sh -c` in the project directory; returns its exit code and output."
    }
    async fn call(&self, args: CommandArgs) -> Result<String, String> {
        let step = super::verify::VerificationStep::new("a command", args.command);
        let outcome = super::verify::run_steps(&self.dir, &[step], self.timeout)
            .await
            .remove(0);
        let code = outcome
            .exit_code
            .map_or_else(|| "none".to_owned(), |c| c.to_string());
        let text = format!("exit code {code}\n{}", outcome.output);
        if outcome.passed { Ok(text) } else { Err(text) }
    }
}
