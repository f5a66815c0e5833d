//! The Python `langgraph-sdk`, as published, against a server on a loopback
//! port.

use harness_server::{Scope, Server};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::Duration;

/// The Python of the venv `scripts/server-venv` makes (with `langgraph-sdk`):
/// `HARNESS_SERVER_PYTHON`, else `target/server-venv/bin/python`. The test
/// fails, never skips, when it is missing.
pub(crate) fn python() -> PathBuf {
    let path = std::env::var_os("HARNESS_SERVER_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/server-venv/bin/python")
        });
    assert!(
        path.exists(),
        "no Python with langgraph-sdk at {}: run `eval \"$(scripts/server-venv)\"` (it makes the \
         venv and sets HARNESS_SERVER_PYTHON)",
        path.display()
    );
    path
}

pub(crate) fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(name)
}

/// Serves the test agents on an ephemeral loopback port, runs `name` with
/// the server's URL, and returns the JSON line it printed last.
async fn drive(name: &str, setup: impl FnOnce(Server) -> Server) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let bound = setup(crate::server(dir.path()))
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let url = format!("http://{}", bound.addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(bound.serve(async move {
        let _ = stopped.await;
    }));
    let child = tokio::process::Command::new(python())
        .arg(script(name))
        .arg(&url)
        // The SDK sends a key from the environment when it finds one.
        .env_remove("LANGGRAPH_API_KEY")
        .env_remove("LANGSMITH_API_KEY")
        .env_remove("LANGCHAIN_API_KEY")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), child)
        .await
        .expect("the SDK script did not finish in 120 s")
        .unwrap();
    let _ = stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), serving).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{name} failed ({}):\n{stderr}\n{stdout}",
        out.status
    );
    let last = stdout.lines().last().unwrap_or_default();
    println!("{name} saw: {last}");
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{name} printed no JSON ({e}): {stdout}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_drives_threads_streams_interrupts_history_and_runs() {
    let seen = drive("sdk_flow.py", |s| s).await;

    // Assistants, their graph and schemas.
    assert_eq!(seen["assistants"], json!(["chat", "ticket", "ticks"]));
    assert_eq!(
        seen["graph_nodes"],
        json!(["__end__", "__start__", "draft", "review"])
    );
    assert_eq!(
        seen["graph_edges"],
        json!([
            ["__start__", "draft"],
            ["draft", "review"],
            ["review", "__end__"]
        ])
    );
    assert_eq!(seen["state_fields"], json!(["decision", "drafts", "log"]));
    assert_eq!(seen["unknown_assistant"], 404);

    // The stream: metadata first, ids in order, the modes asked for.
    assert_eq!(seen["first_event"], "metadata");
    assert_eq!(seen["ids_increase"], true);
    let events: Vec<&str> = seen["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        events,
        [
            "metadata", "values", "custom", "updates", "values", "updates", "values"
        ],
        "{events:?}"
    );
    assert_eq!(
        seen["custom"],
        json!([{"kind": "progress", "step": "draft", "payload": {"drafted": 1}}])
    );

    // The interrupt, a refused input, a refused answer, the right answer.
    assert_eq!(seen["status_paused"], "interrupted");
    assert_eq!(seen["paused_next"], json!(["review"]));
    assert_eq!(seen["input_while_paused"], 409);
    assert_eq!(seen["bad_resume"], json!([422, "command.resume"]));
    assert_eq!(
        seen["bad_resume_stream"],
        json!(["metadata", "values", "values", "error"])
    );
    assert_eq!(
        seen["final_values"],
        json!({"log": ["hello", "draft 1", "review: approved"], "drafts": 1, "decision": "approved"})
    );
    assert_eq!(seen["status_done"], "idle");

    // History, newest first; the fork at the first draft.
    let steps: Vec<u64> = seen["history_steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    assert!(steps.windows(2).all(|w| w[0] >= w[1]), "{steps:?}");
    assert_eq!(
        seen["history_logs"][0],
        json!(["hello", "draft 1", "review: approved"])
    );
    assert_eq!(seen["forked_log"], json!(["hello", "draft 1", "edited"]));
    assert_eq!(seen["bad_update_field"], "values.log");

    // Background, join, cancel, list, stateless, search, delete.
    assert_eq!(seen["joined"], json!({"ticks": 3, "limit": 3}));
    assert_eq!(seen["background_status"], "success");
    assert_eq!(seen["busy_refused"], 409);
    assert_eq!(seen["cancelled_status"], "interrupted");
    let ticks = seen["cancelled_ticks"].as_u64().unwrap();
    assert!(ticks > 3 && ticks < 1000, "{ticks}");
    assert_eq!(seen["runs_listed"], json!(["interrupted", "success"]));
    assert_eq!(seen["stateless"], json!({"ticks": 2, "limit": 2}));
    assert_eq!(seen["search"], json!([true, true]));

    // Double-texting. enqueue: the first run reached 4, the second went on
    // from there to 6.
    assert_eq!(
        seen["enqueue"],
        json!([{"ticks": 6, "limit": 6}, {"ticks": 4, "limit": 4}])
    );
    assert_eq!(seen["enqueue_status"], json!(["success", "success"]));
    // interrupt: the first stopped with its progress kept; one more tick.
    assert_eq!(seen["interrupt"]["first"], "interrupted");
    assert_eq!(seen["interrupt"]["second"], "success");
    let ticks = seen["interrupt"]["ticks"].as_u64().unwrap();
    assert!((3..1000).contains(&ticks), "{ticks}");
    // rollback: back to the 2 ticks before the first run, plus one; the
    // rolled-back run and its steps are gone.
    assert_eq!(seen["rollback_forgot"], true);
    assert_eq!(seen["rollback_ticks"], 3);
    assert_eq!(seen["rollback_history_max_ticks"], 3);

    // The other stream modes.
    assert_eq!(seen["debug_types"], json!(["task", "task_result"]));
    assert_eq!(
        seen["events_kinds"],
        json!(["on_chain_start", "on_chain_end"])
    );
    assert_eq!(seen["tokens"], json!(["Hel", "lo ", "there"]));
    assert_eq!(seen["token_node"], "reply");

    // Replay from an event id; a disconnect that cancels; a copy.
    assert!(!seen["replay"][1].as_array().unwrap().is_empty());
    assert_eq!(
        seen["resumable_events"],
        json!(["metadata", "updates", "updates"])
    );
    assert_eq!(seen["rejoined_events"], json!(["metadata", "updates"]));
    assert_eq!(seen["disconnected_status"], "interrupted");
    let ticks = seen["disconnected_ticks"].as_u64().unwrap();
    assert!((2..1000).contains(&ticks), "{ticks}");
    assert_eq!(seen["copy_values_equal"], true);
    assert_eq!(
        seen["copy_history_len"],
        seen["forked_history_len"].as_u64().unwrap() + 1
    );
    assert_eq!(seen["deleted"], 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_is_held_to_its_api_key_and_scope() {
    let seen = drive("sdk_auth.py", |s| {
        s.api_key("key-read-0123456789", Scope::Read)
            .api_key("key-run-0123456789", Scope::Run)
            .api_key("key-admin-0123456789", Scope::Admin)
    })
    .await;
    assert_eq!(
        seen,
        json!({
            "no_key": 401,
            "wrong_key": 401,
            "health": true,
            "reader_reads": true,
            "reader_creates": 403,
            "runner_runs": {"ticks": 1, "limit": 1},
            "runner_deletes": 403,
            "admin_deletes": 404,
        })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_puts_gets_searches_and_deletes_memory_items() {
    let seen = drive("sdk_store.py", |s| s).await;
    assert_eq!(
        seen["got"]["value"],
        json!({"text": "likes rust and hiking", "weight": 9})
    );
    assert_eq!(seen["got"]["namespace"], json!(["users", "u1", "prefs"]));
    assert_eq!(seen["filtered"], json!(["hobby"]));
    assert_eq!(seen["by_text_first"], "hobby");
    assert_eq!(seen["by_text_scored"], true);
    assert_eq!(
        seen["namespaces"],
        json!([["users", "u1"], ["users", "u2"]])
    );
    assert_eq!(seen["deleted"], 404);
    assert_eq!(seen["bad_value_field"], "value");
    assert_eq!(seen["bad_op_field"], "filter.weight.$near");
}

/// The `node_modules` that `scripts/server-venv` fills (with
/// `@langchain/langgraph-sdk`): `HARNESS_SERVER_NODE_PATH`, else
/// `target/server-node/node_modules`. The test fails, never skips, when it
/// is missing.
fn node_modules() -> PathBuf {
    let path = std::env::var_os("HARNESS_SERVER_NODE_PATH")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/server-node/node_modules")
        });
    assert!(
        path.join("@langchain/langgraph-sdk").exists(),
        "no @langchain/langgraph-sdk in {}: run `eval \"$(scripts/server-venv)\"` (it installs \
         it and sets HARNESS_SERVER_NODE_PATH)",
        path.display()
    );
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_javascript_sdk_streams_a_run_to_its_interrupt_and_resumes_it() {
    let dir = tempfile::tempdir().unwrap();
    let bound = crate::server(dir.path())
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let url = format!("http://{}", bound.addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(bound.serve(async move {
        let _ = stopped.await;
    }));
    let child = tokio::process::Command::new("node")
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/js/sdk_flow.cjs"))
        .arg(&url)
        .env("NODE_PATH", node_modules())
        .env_remove("LANGGRAPH_API_KEY")
        .env_remove("LANGSMITH_API_KEY")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), child)
        .await
        .expect("the JS SDK script did not finish in 120 s")
        .expect("node runs (the `nodejs` package)");
    let _ = stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), serving).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "sdk_flow.cjs failed ({}):\n{}\n{stdout}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap();
    assert_eq!(
        seen["events"],
        json!([
            "metadata", "values", "updates", "values", "updates", "values"
        ])
    );
    assert_eq!(
        seen["interrupt"],
        json!({"question": "approve this draft?", "drafts": 1})
    );
    assert_eq!(seen["paused_next"], json!(["review"]));
    assert_eq!(seen["paused_interrupt_matches"], true);
    assert_eq!(
        seen["final"],
        json!({"log": ["from js", "draft 1", "review: approved"], "drafts": 1, "decision": "approved"})
    );
    assert_eq!(seen["status"], "idle");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_calls_its_webhook_signed_and_again_after_a_failure() {
    let seen = drive("sdk_webhook.py", |s| s).await;
    // The listener failed the first call with a 500: the second came.
    assert_eq!(seen["calls"], 2);
    assert_eq!(seen["signatures_valid"], json!([true, true]));
    assert_eq!(seen["status"], "success");
    assert_eq!(seen["values"], json!({"ticks": 1, "limit": 1}));
    assert_eq!(seen["same_run"], true);
    assert_eq!(seen["refused_host_field"], "webhook");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_schedules_runs_with_a_cron_and_deletes_it() {
    let seen = drive("sdk_cron.py", |s| s).await;
    assert_eq!(
        seen,
        json!({
            "next_run_set": true,
            "ticked": true,
            "run_metadata": true,
            "searched": [true],
            "quiet_after_delete": true,
            "deleted_twice": 404,
            "bad_schedule": "schedule",
            "unknown_assistant": 404,
            "zone_kept": "Asia/Tokyo",
            "tokyo_next": "00:00:00",
            "new_york_next": true,
            "utc_next": "09:00:00",
            "bad_zones": ["timezone", "timezone", "timezone"],
        })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_delays_runs_updates_state_by_command_and_streams_whole_messages() {
    let seen = drive("sdk_options.py", |s| s).await;

    // after_seconds: pending until its time, then run; cancelled before
    // it, never run; bad delays named.
    assert_eq!(seen["delayed_created"], "pending");
    assert_eq!(seen["delayed_before"], "pending");
    assert_eq!(seen["delayed_state_before"]["ticks"], Value::Null);
    assert_eq!(seen["delayed_joined"], json!({"ticks": 1, "limit": 1}));
    assert_eq!(seen["delayed_waited"], true);
    assert_eq!(seen["delayed_after"], "success");
    assert_eq!(seen["cancelled_quickly"], true);
    assert_eq!(seen["cancelled_status"], "interrupted");
    assert_eq!(seen["cancelled_state"]["ticks"], Value::Null);
    assert_eq!(seen["after_cancel"], json!({"ticks": 2, "limit": 2}));
    assert_eq!(
        seen["bad_delays"],
        json!([
            [422, "after_seconds"],
            [422, "after_seconds"],
            [422, "after_seconds"]
        ])
    );

    // command.update alone: merged, then the loop goes on from it (as an
    // object, and as LangGraph's list of pairs).
    assert_eq!(seen["update_before"], json!({"ticks": 2, "limit": 2}));
    assert_eq!(seen["update_object"], json!({"ticks": 4, "limit": 4}));
    assert_eq!(seen["update_pairs"], json!({"ticks": 5, "limit": 5}));
    assert_eq!(seen["update_history_max"], 5);
    assert_eq!(
        seen["bad_updates"],
        json!([
            [422, "command.update"],
            [422, "command.update.limit"],
            [422, "command.update.nope"],
            [422, "command.update[0]"],
            [422, "command.update[0]"]
        ])
    );
    assert_eq!(seen["update_while_paused"], json!([409, null]));
    assert_eq!(
        seen["bad_update_with_resume"],
        json!([422, "command.update.nope"])
    );
    assert_eq!(seen["still_waiting"], json!(["approve this draft?"]));
    // The note is merged before the review step runs again and logs.
    assert_eq!(
        seen["update_with_resume"]["log"],
        json!(["hello", "draft 1", "note", "review: approved"])
    );
    assert_eq!(seen["update_with_resume"]["decision"], "approved");

    // Breakpoints: paused before `review` (after `draft`), no interrupt
    // shown; a run with no input goes on, and `review` asks its own.
    assert_eq!(
        seen["before_review"],
        json!({"log": ["bp", "draft 1"], "interrupt_shown": false, "next": ["review"],
               "interrupts": [], "status": "interrupted"})
    );
    assert_eq!(seen["past_before"], json!(["approve this draft?"]));
    assert_eq!(seen["before_all_next"], json!(["draft"]));
    assert_eq!(seen["before_all_log"], json!(["all"]));
    assert_eq!(seen["after_draft_next"], json!(["review"]));
    assert_eq!(seen["past_after"], json!(["approve this draft?"]));
    assert_eq!(
        seen["after_done"],
        json!(["after", "draft 1", "review: approved"])
    );

    // The `messages` mode: metadata once, the message growing, then whole.
    assert_eq!(
        seen["messages_events"],
        json!([
            "metadata",
            "messages/metadata",
            "messages/partial",
            "messages/partial",
            "messages/partial",
            "messages/complete"
        ])
    );
    assert_eq!(
        seen["messages_partial"],
        json!(["Hel", "Hello ", "Hello there"])
    );
    assert_eq!(seen["messages_complete"], json!(["Hello there"]));
    assert_eq!(seen["messages_one_id"], true);
    assert_eq!(seen["messages_node"], "reply");
    assert_eq!(
        seen["both_modes"],
        json!([
            "messages",
            "messages/complete",
            "messages/metadata",
            "messages/partial",
            "metadata"
        ])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_sees_one_history_across_forks_and_options_it_cannot_have_refused() {
    let seen = drive("sdk_threads.py", |s| s).await;

    // Two forks: every checkpoint once, newest first, the original
    // session's whole history kept, the head the thread's state.
    assert_eq!(seen["history_len"], json!([3, 5]), "{seen}");
    assert_eq!(seen["history_unique"], true, "{seen}");
    assert_eq!(seen["history_newest_first"], true, "{seen}");
    assert_eq!(seen["history_has_all_before"], true, "{seen}");
    assert_eq!(seen["history_head"], json!(["a", "draft 1", "f"]));
    assert_eq!(seen["history_head_is_state"], true);

    // `before` as a checkpoint id, as the object.
    assert_eq!(seen["before_by_id"], true, "{seen}");
    assert_eq!(seen["before_same"], true, "{seen}");
    assert_eq!(seen["before_unknown"], json!([404, null]), "{seen}");

    // A fork's session: not a thread, not named.
    assert_eq!(seen["fork_is_new_session"], true);
    assert_eq!(seen["paused_input"], 409);
    assert_eq!(seen["paused_message_names_fork"], false, "{seen}");
    assert_eq!(seen["fork_get"], 404);
    assert_eq!(seen["fork_delete"], 404);
    assert_eq!(seen["fork_run"], 404);
    assert_eq!(seen["fork_listed"], false);
    assert_eq!(seen["thread_after"], "interrupted");

    // The interrupt a thread waits on is kept through `update_state` and
    // `copy`, and answered on the updated state.
    assert_eq!(
        seen["waiting_after_update"],
        json!(["interrupted", ["review"], true]),
        "{seen}"
    );
    assert_eq!(
        seen["waiting_in_copy"],
        json!(["interrupted", true]),
        "{seen}"
    );
    assert_eq!(
        seen["answered_after_update"],
        json!(["w", "draft 1", "edited while waiting", "review: approved"]),
        "{seen}"
    );
    assert_eq!(seen["answered_in_copy"], "rejected", "{seen}");

    // Options not honoured: a 422 naming each; no run started.
    assert_eq!(
        seen["options_refused"],
        json!([
            [422, "config.recursion_limit"],
            [422, "config.configurable"],
            [422, "context"],
            [422, "durability"],
            [422, "strict_resume"],
            [422, "feedback_keys"],
            [422, "surprise"]
        ]),
        "{seen}"
    );
    assert_eq!(seen["no_run_started"], json!([]));
    assert_eq!(seen["options_taken"], json!({"ticks": 2, "limit": 2}));
    assert_eq!(seen["unknown_null_taken"], json!({"ticks": 3, "limit": 3}));
}
