//! Three server processes (the `replica` example) on one real PostgreSQL,
//! driven by the Python `langgraph-sdk`: runs shared across replicas (the
//! multitask strategies decided by the store, a cancel reaching the replica
//! that runs the run), a replica stopped mid-run handing its run over, and
//! a replica killed with SIGKILL mid-run whose run another replica
//! finishes — once, no step applied twice — while a client joined to it
//! there sees its stream end with the outcome.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The PostgreSQL `scripts/services` starts; the test fails without it
/// unless `HARNESS_SKIP_SERVER_TESTS=1`.
fn postgres() -> Option<String> {
    match std::env::var("HARNESS_TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var("HARNESS_SKIP_SERVER_TESTS").as_deref() == Ok("1") => None,
        _ => panic!(
            "HARNESS_TEST_POSTGRES_URL is not set: run `eval \"$(scripts/services)\"` first \
             (or set HARNESS_SKIP_SERVER_TESTS=1 to skip the tests that need servers)"
        ),
    }
}

/// The `replica` example, built beside this test by `cargo test`.
fn replica_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("examples/replica");
    assert!(
        bin.exists(),
        "{} is missing: `cargo test -p harness-server` builds it (or `cargo build -p \
         harness-server --example replica`)",
        bin.display()
    );
    bin
}

/// How long step `two` takes: long enough that a loaded machine still
/// stops or kills a replica in the middle of it (the test waits for the
/// SDK script's line, then for the step to begin, then 400 ms).
const TWO_MS: &str = "3000";

/// Starts a replica; its child process and its URL.
async fn start(url: &str, schema: &str, dir: &Path) -> (Child, String) {
    start_as(url, schema, dir, &[]).await
}

/// Starts the `replica` example with `more` arguments (`--single`: a
/// server of its own); its child process and its URL.
async fn start_as(url: &str, schema: &str, dir: &Path, more: &[&str]) -> (Child, String) {
    // No schema for a sled store.
    let schema: &[&str] = if schema.is_empty() {
        &[]
    } else {
        &["--schema", schema]
    };
    let mut child = Command::new(replica_bin())
        .args(["--store", url])
        .args(schema)
        .arg("--dir")
        .arg(dir)
        .args(more)
        .env("TWO_MS", TWO_MS)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("the replica did not start in 60 s")
        .unwrap()
        .expect("the replica ended before it listened");
    let addr: Value = serde_json::from_str(&line).unwrap();
    (child, format!("http://{}", addr["addr"].as_str().unwrap()))
}

/// Starts the SDK script `name` (in `server/tests/python`) with `args`,
/// its standard streams piped, without the host's LangChain keys.
fn sdk_script(name: &str, args: &[&str]) -> Child {
    Command::new(crate::sdk::python())
        .arg(crate::sdk::script(name))
        .args(args)
        .env_remove("LANGGRAPH_API_KEY")
        .env_remove("LANGSMITH_API_KEY")
        .env_remove("LANGCHAIN_API_KEY")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// Waits for the SDK script `name` to end, and fails with its stderr
/// unless it succeeded.
async fn succeeded(script: Child, name: &str) {
    let out = script.wait_with_output().await.unwrap();
    assert!(
        out.status.success(),
        "{name} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The lines of the effect log: `step pid`.
fn effects(dir: &Path) -> Vec<(String, u32)> {
    std::fs::read_to_string(dir.join("effects"))
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let (step, pid) = l.split_once(' ').unwrap();
            (step.to_string(), pid.parse().unwrap())
        })
        .collect()
}

/// A trail whose last run went through every step, after runs that
/// stopped before `three`.
fn ends_once_whole(trail: &Value) {
    let trail: Vec<&str> = trail
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert!(trail.ends_with(&["one", "two", "three"]), "{trail:?}");
    assert_eq!(
        trail.iter().filter(|s| **s == "three").count(),
        1,
        "{trail:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_on_postgres_share_runs_and_finish_the_run_of_one_killed_mid_run() {
    let Some(url) = postgres() else { return };
    let schema = format!("replicas_{}", uuid::Uuid::new_v4().simple());
    let dir = tempfile::tempdir().unwrap();
    let (mut a, url_a) = start(&url, &schema, dir.path()).await;
    let (b, url_b) = start(&url, &schema, dir.path()).await;
    let (mut c, url_c) = start(&url, &schema, dir.path()).await;
    let (pid_a, pid_b, pid_c) = (a.id().unwrap(), b.id().unwrap(), c.id().unwrap());

    let mut script = sdk_script("sdk_replicas.py", &[&url_a, &url_b, &url_c]);
    let mut lines = BufReader::new(script.stdout.take().unwrap()).lines();
    let mut stages = Vec::new();
    let mut killed = false;
    let twos_on = |dir: &Path, on: u32| {
        effects(dir)
            .iter()
            .filter(|(step, pid)| step == "two" && *pid == on)
            .count()
    };
    let twos_on_a = |dir: &Path| twos_on(dir, pid_a);
    let mut twos_before = 0;
    let mut handed_over = None;
    let drive = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let stage: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("the script printed no JSON ({e}): {line}"));
            if stage["stage"] == "shared" {
                // Every run so far has settled.
                twos_before = twos_on_a(dir.path());
            }
            if stage["stage"] == "joined-c" {
                // Stop C (as Ctrl-C would) once it has begun step `two`.
                for _ in 0..6_000 {
                    if twos_on(dir.path(), pid_c) > 0 {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                assert!(twos_on(dir.path(), pid_c) > 0, "C never began step two");
                let sent = Command::new("kill")
                    .args(["-INT", &pid_c.to_string()])
                    .status()
                    .await
                    .unwrap();
                assert!(sent.success());
                let exited = tokio::time::timeout(Duration::from_secs(30), c.wait())
                    .await
                    .expect("C did not stop within 30 s of SIGINT")
                    .unwrap();
                handed_over = Some(exited);
            }
            if stage["stage"] == "joined" {
                // Kill A once it has begun step `two` of the joined run.
                for _ in 0..6_000 {
                    if twos_on_a(dir.path()) > twos_before {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                assert!(
                    twos_on_a(dir.path()) > twos_before,
                    "A never began step two of the joined run"
                );
                // Mid-step, with what A streamed so far written (a
                // replica writes its frames as they come).
                tokio::time::sleep(Duration::from_millis(400)).await;
                a.start_kill().unwrap();
                a.wait().await.unwrap();
                killed = true;
            }
            stages.push(stage);
        }
    };
    tokio::time::timeout(Duration::from_secs(120), drive)
        .await
        .expect("the SDK script did not finish in 120 s");
    succeeded(script, "sdk_replicas.py").await;
    assert!(killed, "the script never joined the run: {stages:?}");
    let seen = stages.last().unwrap();
    println!("sdk_replicas.py saw: {seen}");

    // 1. Shared runs: B refused a second run on the thread A ran one on,
    // queued another, and cancelled A's; both replicas agree on the end.
    assert_eq!(seen["reject"], 409, "{seen}");
    assert_eq!(seen["queued_status"], "pending", "{seen}");
    assert_eq!(seen["cancelled_on_a"], "interrupted", "{seen}");
    assert_eq!(seen["cancelled_on_b"], "interrupted", "{seen}");
    assert_eq!(seen["queued_on_a"], "success", "{seen}");
    assert_eq!(seen["runs_listed_on_a"], seen["runs_created"], "{seen}");
    // `/runs/search` on C, which never saw the thread, lists both runs
    // with their ends, by thread and among all runs.
    // C's stream of the thread's events followed both runs to their ends.
    assert_eq!(
        seen["c_stream_ended"],
        serde_json::json!([
            [seen["first_run"], "interrupted"],
            [seen["queued_run"], "completed"]
        ]),
        "{seen}"
    );
    let updated = seen["c_stream_updated"].as_array().unwrap();
    assert!(
        updated.ends_with(&[
            serde_json::json!("one"),
            serde_json::json!("two"),
            serde_json::json!("three")
        ]),
        "{seen}"
    );
    assert_eq!(seen["searched_first"], "interrupted", "{seen}");
    assert_eq!(seen["searched_queued"], "success", "{seen}");
    assert_eq!(
        seen["searched_on_c"].as_object().unwrap().len(),
        2,
        "{seen}"
    );
    assert_eq!(seen["searched_all_on_c"], seen["runs_created"], "{seen}");
    // The cancelled run stopped before `three`; the queued one ran whole.
    ends_once_whole(&seen["trail_1"]);

    assert_eq!(seen["interrupted_status"], "interrupted", "{seen}");
    assert_eq!(seen["interrupting_status"], "success", "{seen}");
    ends_once_whole(&seen["trail_interrupt"]);
    assert_eq!(seen["deleted_thread_run"], "interrupted", "{seen}");
    // The rolled-back run is gone, and so are its steps.
    assert_eq!(
        seen["rollback_listed"],
        serde_json::json!([seen["rollback_run"]])
    );
    let whole = serde_json::json!(["one", "two", "three"]);
    assert_eq!(seen["trail_rollback"], whole, "{seen}");

    // 2. Handing over: C stopped cleanly; another replica ran the step
    // after C's last, and only that one.
    let exited = handed_over.expect("the script never joined C's run");
    assert!(exited.success(), "C exited with {exited}");
    assert_eq!(seen["handover_status"], "success", "{seen}");
    assert_eq!(seen["handover_updated"], whole, "{seen}");
    assert_eq!(seen["handover_last"]["trail"], whole, "{seen}");
    // A client joined on C was told C handed the run over.
    assert_eq!(seen["handover_on_c"]["last_event"], "error", "{seen}");
    assert_eq!(
        seen["handover_on_c"]["last_error"], "ServerStopping",
        "{seen}"
    );
    // The run queued behind it on C ran elsewhere, after it.
    assert_eq!(seen["handover_queued_status"], "success", "{seen}");
    assert_eq!(
        seen["handover_trail"],
        serde_json::json!(["one", "two", "three", "one", "two", "three"]),
        "{seen}"
    );
    let all = effects(dir.path());
    let on_c: Vec<&str> = all
        .iter()
        .filter(|(_, pid)| *pid == pid_c)
        .map(|(s, _)| s.as_str())
        .collect();
    assert_eq!(on_c, ["one", "two"], "{all:?}");
    // A or B (whichever reaped it first) went on with `three`.
    let after_c = all.iter().rposition(|(_, pid)| *pid == pid_c).unwrap() + 1;
    assert_eq!(all[after_c].0, "three", "{all:?}");
    assert!([pid_a, pid_b].contains(&all[after_c].1), "{all:?}");

    // 3. Failover: the run completed once, each step applied once.
    assert_eq!(seen["failover_status"], "success", "{seen}");
    assert_eq!(seen["failover_state"]["trail"], whole, "{seen}");
    assert_eq!(
        seen["history_steps"],
        serde_json::json!(["$start", "one", "two", "three"]),
        "{seen}"
    );
    // The joined stream (on B) ended with the outcome.
    assert_eq!(seen["last_values"]["trail"], whole, "{seen}");
    let events: Vec<&str> = seen["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert_eq!(events.first(), Some(&"metadata"), "{events:?}");
    // Each step's update streamed once: `one` by A, the others by B.
    assert_eq!(
        seen["updated"],
        serde_json::json!(["one", "two", "three"]),
        "{seen}"
    );
    assert_eq!(events.last(), Some(&"values"), "{events:?}");
    // Effects of the failover run: `one` once, on A; `two` begun on A and
    // run again on B (the step A died in); `three` once, on B.
    let all = effects(dir.path());
    let start = all.iter().rposition(|(s, _)| s == "one").unwrap();
    let run_effects = &all[start..];
    assert_eq!(
        run_effects,
        &[
            ("one".to_string(), pid_a),
            ("two".to_string(), pid_a),
            ("two".to_string(), pid_b),
            ("three".to_string(), pid_b),
        ],
        "the killed run's effects, in order"
    );
}

/// A server of its own (no replicas) on PostgreSQL, killed with SIGKILL in
/// the middle of two runs and started again: once the dead process's
/// leases end, a run with no input continues one thread's run from its
/// last checkpoint (the step under way runs again, no completed one
/// does), and a run with an input starts the other thread over from its
/// last checkpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_left_unfinished_by_a_killed_server_is_usable_once_its_lease_ends() {
    let Some(url) = postgres() else { return };
    let schema = format!("recovery_{}", uuid::Uuid::new_v4().simple());
    let dir = tempfile::tempdir().unwrap();
    let (mut first, url_1) = start_as(&url, &schema, dir.path(), &["--single"]).await;
    let pid_1 = first.id().unwrap();
    let mut script = sdk_script("sdk_recovery.py", &[&url_1]);
    let mut stdin = script.stdin.take().unwrap();
    let mut lines = BufReader::new(script.stdout.take().unwrap()).lines();
    let mut second = None;
    let mut last = Value::Null;
    let drive = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let stage: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("the script printed no JSON ({e}): {line}"));
            if stage["stage"] == "started" {
                // Both runs in step `two`, then the process dies.
                for _ in 0..6_000 {
                    if effects(dir.path())
                        .iter()
                        .filter(|(s, _)| s == "two")
                        .count()
                        == 2
                    {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                tokio::time::sleep(Duration::from_millis(400)).await;
                first.start_kill().unwrap();
                first.wait().await.unwrap();
                let (child, url_2) = start_as(&url, &schema, dir.path(), &["--single"]).await;
                second = Some(child);
                use tokio::io::AsyncWriteExt;
                stdin
                    .write_all(format!("{url_2}\n").as_bytes())
                    .await
                    .unwrap();
                stdin.flush().await.unwrap();
            }
            last = stage;
        }
    };
    tokio::time::timeout(Duration::from_secs(120), drive)
        .await
        .expect("the SDK script did not finish in 120 s");
    succeeded(script, "sdk_recovery.py").await;
    let seen = last;
    println!("sdk_recovery.py saw: {seen}");
    let pid_2 = second.as_ref().and_then(Child::id).unwrap();
    let whole = serde_json::json!(["one", "two", "three"]);

    // Left unfinished: not busy once the lease ended; `next` names the
    // step under way when the process died.
    assert_eq!(seen["status_unfinished"], "error", "{seen}");
    assert_eq!(
        seen["next_unfinished"],
        serde_json::json!(["two"]),
        "{seen}"
    );
    assert_eq!(
        seen["values_unfinished"]["trail"],
        serde_json::json!(["one"])
    );
    // No input: continued, and each step applied once.
    assert_eq!(seen["continued"]["trail"], whole, "{seen}");
    assert_eq!(seen["continued_runs"], serde_json::json!(["success"]));
    assert_eq!(seen["continued_status"], "idle");
    // An input: from the last checkpoint, the input merged, then the loop.
    assert_eq!(
        seen["restarted"]["trail"],
        serde_json::json!(["one", "again", "one", "two", "three"]),
        "{seen}"
    );
    assert_eq!(seen["restarted_status"], "idle");
    assert_eq!(seen["restarted_history_unique"], true, "{seen}");
    assert_eq!(seen["restarted_history_head"], seen["restarted"]["trail"]);
    assert_eq!(
        seen["again"]["trail"],
        serde_json::json!(["one", "two", "three", "more", "one", "two", "three"]),
        "{seen}"
    );
    // The first process ran `one` twice and began `two` twice; the second
    // ran the rest: `two` and `three` of the continued run, and the whole
    // loop twice more.
    let all = effects(dir.path());
    let count = |pid: u32, step: &str| all.iter().filter(|(s, p)| *p == pid && s == step).count();
    assert_eq!(
        (
            count(pid_1, "one"),
            count(pid_1, "two"),
            count(pid_1, "three")
        ),
        (2, 2, 0),
        "{all:?}"
    );
    assert_eq!(
        (
            count(pid_2, "one"),
            count(pid_2, "two"),
            count(pid_2, "three")
        ),
        (2, 3, 3),
        "{all:?}"
    );
}

/// One server process on a sled store, as a replica of its own, stopped
/// (SIGINT) while a run is under way and two more wait behind it on its
/// thread (`enqueue`), then started again on the same store: the runs
/// waiting to start were kept in the store, not in the stopped process's
/// memory, and every run finishes in the second process, each step applied
/// once. (Without [`Replicas`](harness_server::Replicas) those two are
/// lost with the process: `--single`, the negative control.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_server_on_sled_keeps_its_waiting_runs_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let store = store.to_str().unwrap();
    let (mut first, url_1) = start(store, "", dir.path()).await;
    let pid_1 = first.id().unwrap();
    let mut script = sdk_script("sdk_restart.py", &[&url_1]);
    let mut stdin = script.stdin.take().unwrap();
    let mut lines = BufReader::new(script.stdout.take().unwrap()).lines();
    let mut second = None;
    let mut stages = Vec::new();
    let drive = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let stage: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("the script printed no JSON ({e}): {line}"));
            if stage["stage"] == "started" {
                // The first run in step `two`, then the process is told to stop.
                for _ in 0..6_000 {
                    if effects(dir.path()).iter().any(|(s, _)| s == "two") {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                tokio::time::sleep(Duration::from_millis(400)).await;
                let status = std::process::Command::new("kill")
                    .args(["-INT", &pid_1.to_string()])
                    .status()
                    .unwrap();
                assert!(status.success());
                let exit = tokio::time::timeout(Duration::from_secs(60), first.wait())
                    .await
                    .expect("the server did not stop in 60 s")
                    .unwrap();
                assert!(exit.success(), "the stopped server exited with {exit}");
                let (child, url_2) = start(store, "", dir.path()).await;
                second = Some(child);
                use tokio::io::AsyncWriteExt;
                stdin
                    .write_all(format!("{url_2}\n").as_bytes())
                    .await
                    .unwrap();
                stdin.flush().await.unwrap();
            }
            stages.push(stage);
        }
    };
    tokio::time::timeout(Duration::from_secs(120), drive)
        .await
        .expect("the SDK script did not finish in 120 s");
    succeeded(script, "sdk_restart.py").await;
    println!("sdk_restart.py saw: {stages:?}");
    let pid_2 = second.as_ref().and_then(Child::id).unwrap();
    let [started, done] = &stages[..] else {
        panic!("{stages:?}")
    };
    // The two behind the first wait to start when the process is stopped.
    assert_eq!(started["statuses"][1], "pending", "{started}");
    assert_eq!(started["statuses"][2], "pending", "{started}");
    assert_eq!(
        done["statuses"],
        serde_json::json!(["success", "success", "success"]),
        "{done}"
    );
    assert_eq!(done["thread_status"], "idle", "{done}");
    let whole = ["one", "two", "three"];
    assert_eq!(done["trail"], serde_json::json!(whole.repeat(3)), "{done}");
    // The first process ran the first run's `one` and `two` (stopped at
    // the boundary after it); the second ran the rest, each step once.
    let all = effects(dir.path());
    let count = |pid: u32, step: &str| all.iter().filter(|(s, p)| *p == pid && s == step).count();
    let counts = |pid| whole.map(|step| count(pid, step));
    assert_eq!(counts(pid_1), [1, 1, 0], "{all:?}");
    assert_eq!(counts(pid_2), [2, 2, 3], "{all:?}");
}
