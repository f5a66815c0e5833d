//! A real tool-using agent built with the agent kit's `AgentLoop`, on a
//! scripted model that asks for two tool calls needing approval, with its
//! sessions in a temporary sled store and its tools working on files in a
//! temporary directory.

use crate::support::{TempDir, temp_dir};
use harness::llm::{
    ContentPart, Expect, ModelRequest, ModelResponse, ScriptedModel, Tool, ToolCall, ToolResult,
    ToolSet,
};
use harness::session::{SessionPhase, SessionStore};
use harness::{Agent, Harness, create_agent_with};
use harness_kit::{AgentChat, AgentLoop, ModelDeps, ModelDepsAgent, Policy};
use harness_stores::SledStore;
use harness_studio::{Serving, Studio};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The call that writes `summary.txt`.
pub const WRITE: &str = "call_write";
/// The call that deletes `notes.txt`.
pub const DELETE: &str = "call_delete";
/// What the notes file holds before and, unless deleted, after.
pub const NOTES: &str = "buy milk\ncall the plumber\n";

/// A file in the workspace, relative to it.
fn inside(root: &Path, path: &str) -> Result<PathBuf, String> {
    let rel = Path::new(path);
    if path.is_empty()
        || rel.is_absolute()
        || rel
            .components()
            .any(|c| !matches!(c, std::path::Component::Normal(_)))
    {
        return Err(format!("`{path}` is not a plain path inside the workspace"));
    }
    Ok(root.join(rel))
}

#[derive(Deserialize, JsonSchema)]
pub struct WriteArgs {
    /// The file, relative to the workspace.
    #[schemars(length(min = 1))]
    pub path: String,
    /// Its new contents.
    pub text: String,
}

/// Writes a file in the workspace.
pub struct WriteFile(pub PathBuf);

#[async_trait::async_trait]
impl Tool for WriteFile {
    type Args = WriteArgs;
    type Output = String;
    type Error = String;
    fn name(&self) -> &str {
        "write_file"
    }
    fn description(&self) -> &str {
        "Writes a text file in the workspace."
    }
    async fn call(&self, args: WriteArgs) -> Result<String, String> {
        let file = inside(&self.0, &args.path)?;
        std::fs::write(&file, &args.text)
            .map_err(|e| format!("cannot write {}: {e}", args.path))?;
        Ok(format!("wrote {} bytes to {}", args.text.len(), args.path))
    }
}

#[derive(Deserialize, JsonSchema)]
pub struct PathArgs {
    /// The file, relative to the workspace.
    pub path: String,
}

/// Deletes a file in the workspace.
pub struct DeleteFile(pub PathBuf);

#[async_trait::async_trait]
impl Tool for DeleteFile {
    type Args = PathArgs;
    type Output = String;
    type Error = String;
    fn name(&self) -> &str {
        "delete_file"
    }
    fn description(&self) -> &str {
        "Deletes a file in the workspace."
    }
    async fn call(&self, args: PathArgs) -> Result<String, String> {
        let file = inside(&self.0, &args.path)?;
        std::fs::remove_file(&file).map_err(|e| format!("cannot delete {}: {e}", args.path))?;
        Ok(format!("deleted {}", args.path))
    }
}

/// The assistant, its store and workspace, and one session waiting for a
/// decision on [`WRITE`] and [`DELETE`].
pub struct ApprovalWorld {
    pub store: Arc<dyn SessionStore>,
    pub harness: Harness<AgentChat, ModelDeps>,
    pub agent: Agent<AgentChat, ModelDeps>,
    /// Records every request it gets.
    pub model: Arc<ScriptedModel>,
    pub workspace: PathBuf,
    pub waiting: String,
    pub interrupt: String,
    _dir: TempDir,
}

impl ApprovalWorld {
    pub async fn new(name: &str) -> ApprovalWorld {
        let dir = temp_dir(name);
        let workspace = dir.join("workspace");
        std::fs::create_dir_all(&workspace).unwrap();
        std::fs::write(workspace.join("notes.txt"), NOTES).unwrap();
        let store: Arc<dyn SessionStore> = Arc::new(SledStore::open(dir.join("db")).unwrap());
        let model = Arc::new(ScriptedModel::new([
            Expect::any().reply(ModelResponse::from_tool_calls([
                ToolCall::new(
                    WRITE,
                    "write_file",
                    json!({"path": "summary.txt", "text": "two notes"}),
                ),
                ToolCall::new(DELETE, "delete_file", json!({"path": "notes.txt"})),
            ])),
            Expect::any().reply(ModelResponse::from_text("Done: I wrote summary.txt.")),
        ]));
        let tools = ToolSet::new()
            .with(WriteFile(workspace.clone()))
            .with(DeleteFile(workspace.clone()));
        let harness = AgentLoop::<AgentChat, ModelDeps>::new(tools)
            .policy("write_file", Policy::ask())
            .policy("delete_file", Policy::ask())
            .builder()
            .store(Arc::clone(&store))
            .build()
            .unwrap();
        let agent = create_agent_with(
            "assistant",
            &harness,
            ModelDepsAgent {
                model: model.clone(),
                summarizer: None,
            },
        );
        let out = agent
            .run(AgentChat::with_task("summarize my notes, then tidy up"))
            .await
            .unwrap();
        let interrupt = out.interrupt.clone().expect("the agent asks");
        assert_eq!(interrupt.payload["kind"], "tool_approval");
        ApprovalWorld {
            store,
            harness,
            agent,
            model,
            workspace,
            waiting: out.session_id.to_string(),
            interrupt: interrupt.id.to_string(),
            _dir: TempDir(dir),
        }
    }

    /// The agent's studio, declaring nothing: the approval request is
    /// recognized by its payload.
    pub async fn studio(&self) -> Serving {
        Studio::for_agent(&self.agent, &self.harness, Arc::clone(&self.store))
            .unwrap()
            .poll_interval(Duration::from_millis(100))
            .bind("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap()
    }

    /// The session's phase in the store.
    pub async fn phase(&self) -> SessionPhase {
        self.store
            .load(&self.waiting.clone().into())
            .await
            .unwrap()
            .unwrap()
            .phase
    }

    /// Whether `file` is in the workspace, and what it holds.
    pub fn file(&self, file: &str) -> Option<String> {
        std::fs::read_to_string(self.workspace.join(file)).ok()
    }

    /// Asserts that nothing was decided: still waiting on the same
    /// interrupt, no tool ran, the model asked once.
    pub async fn untouched(&self, what: &str) {
        match self.phase().await {
            SessionPhase::Interrupted { interrupt } => {
                assert_eq!(interrupt.id.to_string(), self.interrupt, "{what}")
            }
            other => panic!("{what}: the session is {other:?}, not waiting"),
        }
        assert_eq!(self.file("summary.txt"), None, "{what}: nothing written");
        assert_eq!(
            self.file("notes.txt").as_deref(),
            Some(NOTES),
            "{what}: nothing deleted"
        );
        assert_eq!(
            self.model.requests().len(),
            1,
            "{what}: the model was not asked again"
        );
    }
}

/// Each tool result the model was sent in `request`.
pub fn results_of(request: &ModelRequest) -> Vec<ToolResult> {
    request
        .messages
        .iter()
        .flat_map(|m| m.content.iter())
        .filter_map(|p| match p {
            ContentPart::ToolResult(r) => Some(r.clone()),
            _ => None,
        })
        .collect()
}

/// The result of call `id` the model was sent in `request`.
pub fn result_of(request: &ModelRequest, id: &str) -> ToolResult {
    results_of(request)
        .into_iter()
        .find(|r| r.call_id == id)
        .unwrap_or_else(|| panic!("call {id} has a result in {request:?}"))
}
