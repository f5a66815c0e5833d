//! Serve: the quickstart agent and the terminal assistant over HTTP (the
//! Agent Protocol, as the LangGraph SDK clients call it), with the studio
//! on the same port, on the embedded default store (sled).
//!
//! ```text
//! cargo run -p harness-examples --example serve
//!     # http://127.0.0.1:2024 (API) and http://127.0.0.1:2024/studio; Ctrl-C stops
//! cargo run -p harness-examples --example serve -- --addr 127.0.0.1:8123 --store DIR
//! HARNESS_PROVIDER=openai OPENAI_BASE_URL=http://127.0.0.1:PORT/v1 HARNESS_MODEL=NAME \
//!     cargo run -p harness-examples --example serve
//! ```
//!
//! Then, from Python (`pip install langgraph-sdk`):
//!
//! ```text
//! from langgraph_sdk import get_sync_client
//! client = get_sync_client(url="http://127.0.0.1:2024")
//! thread = client.threads.create()
//! question = {"role": "user", "content": [{"type": "text", "text": "Paris or Oslo?"}]}
//! for part in client.runs.stream(thread["thread_id"], "quickstart",
//!                                input={"messages": [question]}, stream_mode="updates"):
//!     print(part.event, part.data)
//! ```
//!
//! The agents are those of `quickstart.rs` (`quickstart`: a weather tool)
//! and `assistant.rs` (`assistant`: the agent kit's loop with file tools
//! and a shell whose every command waits for an approval, given with
//! `command={"resume": {"decisions": …}}`), built by the same functions of
//! the examples' library ([`harness_examples::quickstart_agent`],
//! [`harness_examples::assistant_agent`]). Offline, each runs on a
//! scripted model that answers every conversation the same way (by its
//! turn); `HARNESS_PROVIDER` picks a real one (see `providers_select`).
//! The server listens on this machine only; the studio reads the same
//! store, and follows the runs live.

use harness::create_agent_with;
use harness::llm::{
    LanguageModel, ModelError, ModelRequest, ModelResponse, Role, ScriptedModel, ToolCall,
};
use harness_examples::args::{Args, Usage};
use harness_examples::{assistant_agent, quickstart_agent};
use harness_kit::ModelDepsAgent;
use harness_server::Server;
use harness_stores::SledStore;
use harness_studio::Studio;
use serde_json::json;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

type Error = Box<dyn std::error::Error>;

// ---- the offline model: the same turns for every conversation ----

/// A scripted model for a server: it answers each conversation with the
/// turn its number of assistant messages points at (the last turn once
/// the script is done), so every run gets the whole script, whatever runs
/// came before or run beside it. A `ScriptedModel` plays its turns once,
/// for one run.
struct PerConversation {
    turns: Vec<ModelResponse>,
}

#[async_trait::async_trait]
impl LanguageModel for PerConversation {
    async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        let taken = request
            .messages
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .count();
        let last = self.turns.len().saturating_sub(1);
        self.turns
            .get(taken.min(last))
            .cloned()
            .ok_or_else(|| ModelError::ScriptMismatch {
                turn: taken + 1,
                message: "the script has no turns".into(),
            })
    }

    fn provider(&self) -> &str {
        "scripted"
    }

    fn model_name(&self) -> &str {
        "scripted"
    }
}

fn assistant_turns() -> Vec<ModelResponse> {
    vec![
        ModelResponse::from_tool_call(ToolCall::new("call_1", "list_dir", json!({ "path": "." }))),
        ModelResponse::from_tool_call(ToolCall::new(
            "call_2",
            "shell",
            json!({ "command": "wc -l README.md" }),
        )),
        ModelResponse::from_text("I listed the directory and counted README.md's lines."),
    ]
}

/// The model `HARNESS_PROVIDER` names, or, offline, `turns` for every
/// conversation.
fn model(turns: Vec<ModelResponse>) -> Result<Arc<dyn LanguageModel>, Error> {
    let chosen = harness_examples::providers_select::model_from_env(ScriptedModel::new([]))?;
    Ok(if chosen.provider() == "scripted" {
        Arc::new(PerConversation { turns })
    } else {
        chosen
    })
}

// ---- the server ----

/// A model for an agent, given the offline turns it would play.
type PickModel = fn(Vec<ModelResponse>) -> Result<Arc<dyn LanguageModel>, Error>;

/// The two agents on the sled store in `dir` (the assistant's files under
/// `root`), each on the model `pick` gives, the studio beside them.
fn server(dir: &Path, root: &Path, pick: PickModel) -> Result<Server, Error> {
    let store = Arc::new(SledStore::open(dir)?);

    let quickstart_loop = quickstart_agent::harness()
        .store(Arc::clone(&store))
        .build()?;
    let quickstart = create_agent_with(
        "quickstart",
        &quickstart_loop,
        quickstart_agent::DepsAgent {
            model: pick(quickstart_agent::turns().into())?,
        },
    );

    // Files are read and listed inside `root` unasked, outside it with an
    // approval; every shell command waits for one.
    let assistant_loop = assistant_agent::agent_loop(root, "a careful assistant")?
        .builder()
        .store(Arc::clone(&store))
        .build()?;
    let assistant = create_agent_with(
        "assistant",
        &assistant_loop,
        ModelDepsAgent {
            model: pick(assistant_turns())?,
            summarizer: None,
        },
    );

    Ok(Server::new()
        .agent(&quickstart, &quickstart_loop)
        .agent(&assistant, &assistant_loop)
        .studio(Studio::read_only(store.clone()))
        .store(store))
}

const USAGE: Usage = Usage {
    synopsis: "usage: serve [--addr 127.0.0.1:2024] [--store DIR]",
    options: "  --addr ADDR   where to listen: a loopback address and port (default
                127.0.0.1:2024; port 0 picks a free one); this machine only
  --store DIR   the sled store of the sessions (default .harness/serve)",
};

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), Error> {
    let mut addr: SocketAddr = harness_server::DEFAULT_ADDR;
    let mut store = PathBuf::from(".harness/serve");
    let mut args = Args::from_env(USAGE);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--addr" => {
                addr = args.number(
                    "--addr",
                    "a loopback address and port, e.g. 127.0.0.1:2024 or [::1]:2024",
                    |_: &SocketAddr| true,
                );
                // The server refuses others (it has no API key); refused
                // here, before the store is created.
                if !addr.ip().is_loopback() {
                    USAGE.fail(format!(
                        "--addr {addr}: not a loopback address; this example listens on this \
                         machine only (e.g. 127.0.0.1:2024)"
                    ));
                }
            }
            "--store" => store = PathBuf::from(args.value("--store")),
            other => args.unknown(other),
        }
    }
    let bound = server(&store, Path::new("."), model)?.bind(addr).await?;
    let url = format!("http://{}", bound.addr());
    println!("serving the agents quickstart and assistant at {url}");
    println!("studio: {url}/studio");
    println!("sessions in {}; Ctrl-C stops", store.display());
    bound
        .serve(async {
            // Without a signal handler, the process ends at once.
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    println!("stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    //! The example's server driven by the real Python `langgraph-sdk`
    //! (the venv of `scripts/server-venv`), the studio read from the same
    //! port.

    use super::{Error, PerConversation, server};
    use harness::llm::{LanguageModel, ModelResponse};
    use serde_json::Value;
    use std::path::{Path, PathBuf};
    use std::sync::Arc;
    use std::time::Duration;

    /// A run of the quickstart agent streamed with the SDK, then the
    /// studio's page and API over plain HTTP from the same port.
    const DRIVE: &str = r#"
import json, sys
import httpx
from langgraph_sdk import get_sync_client

url = sys.argv[1]
client = get_sync_client(url=url)
seen = {"assistants": sorted(a["assistant_id"] for a in client.assistants.search())}
thread = client.threads.create()["thread_id"]
question = {"role": "user", "content": [{"type": "text", "text": "Is it warmer in Paris or in Oslo?"}]}
events = []
for part in client.runs.stream(thread, "quickstart", input={"messages": [question]},
                               stream_mode=["updates", "values"]):
    events.append(part.event)
    if part.event == "updates":
        seen.setdefault("steps", []).extend(part.data.keys())
state = client.threads.get_state(thread)
seen["events"] = sorted(set(events))
seen["model_calls"] = state["values"]["model_calls"]
seen["roles"] = [m["role"] for m in state["values"]["messages"]]
seen["session"] = state["checkpoint"]["checkpoint_id"].split(".", 1)[1]
page = httpx.get(url + "/studio")
seen["page"] = [page.status_code, "harness studio" in page.text, "/studio/studio.js" in page.text]
seen["studio_sessions"] = httpx.get(url + "/studio/api/sessions").json()
timeline = httpx.get(url + "/studio/api/sessions/" + seen["session"] + "/timeline")
seen["timeline_status"] = timeline.status_code
print(json.dumps(seen))
"#;

    fn python() -> PathBuf {
        let path = std::env::var_os("HARNESS_SERVER_PYTHON")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/server-venv/bin/python")
            });
        assert!(
            path.exists(),
            "no Python with langgraph-sdk at {}: run `eval \"$(scripts/server-venv)\"`",
            path.display()
        );
        path
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_sdk_runs_the_quickstart_and_the_studio_on_the_same_port_lists_its_session() {
        // Offline: the scripted model, whatever the environment names.
        fn scripted(turns: Vec<ModelResponse>) -> Result<Arc<dyn LanguageModel>, Error> {
            Ok(Arc::new(PerConversation { turns }))
        }
        let dir = tempfile::tempdir().unwrap();
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let bound = server(&dir.path().join("store"), root, scripted)
            .unwrap()
            .bind("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let url = format!("http://{}", bound.addr());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(bound.serve(async move {
            let _ = stopped.await;
        }));
        let out = tokio::time::timeout(
            Duration::from_secs(120),
            tokio::process::Command::new(python())
                .arg("-c")
                .arg(DRIVE)
                .arg(&url)
                .env_remove("LANGGRAPH_API_KEY")
                .env_remove("LANGSMITH_API_KEY")
                .env_remove("LANGCHAIN_API_KEY")
                .kill_on_drop(true)
                .output(),
        )
        .await
        .expect("the SDK script did not finish in 120 s")
        .unwrap();
        let _ = stop.send(());
        tokio::time::timeout(Duration::from_secs(20), serving)
            .await
            .expect("the server did not stop")
            .unwrap()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}\n{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        let seen: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
            .unwrap_or_else(|e| panic!("no JSON ({e}): {stdout}"));

        assert_eq!(
            seen["assistants"],
            serde_json::json!(["assistant", "quickstart"])
        );
        assert_eq!(
            seen["events"],
            serde_json::json!(["metadata", "updates", "values"])
        );
        assert_eq!(
            seen["steps"],
            serde_json::json!(["think", "call_tools", "think"]),
            "{seen}"
        );
        assert_eq!(seen["model_calls"], 2);
        assert_eq!(
            seen["roles"],
            serde_json::json!(["user", "assistant", "tool", "assistant"])
        );
        assert_eq!(seen["page"], serde_json::json!([200, true, true]));
        let listed: Vec<&Value> = seen["studio_sessions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["id"] == seen["session"])
            .collect();
        assert_eq!(listed.len(), 1, "the run's session is not listed: {seen}");
        let agents: Vec<&Value> = seen["studio_sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| &s["agent"])
            .collect();
        assert_eq!(agents, ["quickstart"], "{seen}");
        assert_eq!(listed[0]["agent"], "quickstart");
        assert_eq!(listed[0]["phase"], "done");
        assert_eq!(seen["timeline_status"], 200);
    }
}
