//! Tools for working in the project's directory: read and write files,
//! list a directory, run a command. Paths are relative to the directory
//! and may not leave it.

use harness::llm::{Tool, ToolSet};
use schemars::JsonSchema;
use serde::Deserialize;
use std::path::{Component, Path, PathBuf};
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
const READ_LIMIT: usize = 16 * 1024;

/// `relative` inside `dir`, refusing absolute paths and `..`.
fn inside(dir: &Path, relative: &str) -> Result<PathBuf, String> {
    let path = Path::new(relative);
    if path
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(format!(
            "the path {relative:?} leaves the project directory; give a path relative to it, without `..`"
        ));
    }
    Ok(dir.join(path))
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
        use tokio::io::{AsyncReadExt, AsyncSeekExt};
        let file = inside(&self.0, &args.path)?;
        let cannot = |e: std::io::Error| format!("cannot read {}: {e}", args.path);
        let mut f = tokio::fs::File::open(&file).await.map_err(cannot)?;
        let meta = f.metadata().await.map_err(cannot)?;
        // A device, a pipe or a directory (say, a link a command made to
        // /dev/zero) is not read: it could be endless.
        if !meta.is_file() {
            return Err(format!("{} is not a regular file", args.path));
        }
        // Only the end is kept: read no more than it.
        let keep = READ_LIMIT as u64;
        f.seek(std::io::SeekFrom::Start(meta.len().saturating_sub(keep)))
            .await
            .map_err(cannot)?;
        let mut bytes = Vec::new();
        f.take(keep).read_to_end(&mut bytes).await.map_err(cannot)?;
        Ok(super::verify::tail(
            String::from_utf8_lossy(&bytes).into_owned(),
        ))
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
        let file = inside(&self.0, &args.path)?;
        if let Some(parent) = file.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|e| format!("cannot create the directory of {}: {e}", args.path))?;
        }
        tokio::fs::write(&file, args.content.as_bytes())
            .await
            .map_err(|e| format!("cannot write {}: {e}", args.path))?;
        Ok(format!(
            "wrote {} bytes to {}",
            args.content.len(),
            args.path
        ))
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
        let dir = inside(&self.0, &args.path)?;
        let mut entries = tokio::fs::read_dir(&dir)
            .await
            .map_err(|e| format!("cannot list {}: {e}", args.path))?;
        let mut names = Vec::new();
        while let Ok(Some(entry)) = entries.next_entry().await {
            let name = entry.file_name().to_string_lossy().into_owned();
            let is_dir = entry.file_type().await.is_ok_and(|t| t.is_dir());
            names.push(if is_dir { format!("{name}/") } else { name });
        }
        names.sort();
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
