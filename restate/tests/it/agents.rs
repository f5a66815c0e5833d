//! A harness agent served as Restate's `HarnessAgent` virtual object
//! (`restate-agent-probe`), against the real server.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use harness::session::SessionPhase;
use harness::session::SessionStore;
use harness::{SessionId, Signal};
use harness_restate::{Admin, AgentClient, Ingress, Reply, RestateError, RestateSessionReader};
use serde_json::json;

use super::{Service, free_port, lines, var, wait_for_lines};

/// Held by each test that registers a `HarnessAgent` deployment on the
/// shared server: new invocations go to the latest deployment of a
/// service, so two such tests at once would call each other's services.
static SHARED_SERVER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `restate-agent-probe` on `port`, with `env`.
fn agent_service(dir: &Path, port: u16, env: &[(&str, String)]) -> Service {
    Service::spawn(env!("CARGO_BIN_EXE_restate-agent-probe"), dir, port, env)
}

fn log_of(reply: &Reply) -> Vec<String> {
    match reply {
        Reply::Completed { state, .. } | Reply::Interrupted { state, .. } => state["log"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_str().unwrap().to_owned())
            .collect(),
        other => panic!("{other:?}"),
    }
}

/// One test's agent service: its admin and client, a directory for the
/// effects' files, and a port of its own.
struct Rig {
    admin: Admin,
    agent: AgentClient,
    dir: tempfile::TempDir,
    port: u16,
}

impl Rig {
    /// On the suite's shared server.
    fn shared() -> Rig {
        Rig::on(var("HARNESS_RESTATE_ADMIN"), var("HARNESS_RESTATE_INGRESS"))
    }

    fn on(admin: String, ingress: String) -> Rig {
        Rig {
            admin: Admin::new(admin).unwrap(),
            agent: AgentClient::new(Ingress::new(ingress, Duration::from_secs(90)).unwrap()),
            dir: tempfile::tempdir().unwrap(),
            port: free_port(),
        }
    }

    /// The service with `env`, on the rig's port.
    fn service(&self, env: &[(&str, String)]) -> Service {
        agent_service(self.dir.path(), self.port, env)
    }

    /// The service, hanging once after effect `after` (and `env`).
    fn hanging(&self, after: u32, env: &[(&str, String)]) -> Service {
        let mut env = env.to_vec();
        env.push(("PROBE_HANG_AFTER", after.to_string()));
        env.push(("PROBE_HANG_ONCE", self.marker().display().to_string()));
        self.service(&env)
    }

    fn marker(&self) -> std::path::PathBuf {
        self.dir.path().join("hung")
    }

    /// Waits until the hanging service hangs: the effect before it is
    /// journaled (`once` returned, which waits for Restate's
    /// acknowledgement).
    async fn hung(&self) {
        while !self.marker().exists() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn register(&self) {
        let services = self
            .admin
            .register(&format!("http://127.0.0.1:{}", self.port), true)
            .await
            .unwrap();
        assert!(
            services.contains(&"HarnessAgent".to_owned()),
            "{services:?}"
        );
    }

    /// A session of this test, and the file its effects write.
    fn session(&self, name: &str) -> (SessionId, std::path::PathBuf) {
        let id = SessionId::from(format!("{name}-{}-{}", std::process::id(), self.port));
        let file = self.dir.path().join(format!("{id}.log"));
        (id, file)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_harness_agent_on_restate_runs_each_effect_once_and_waits_for_a_human() {
    let _serial = SHARED_SERVER.lock().await;
    let admin = Admin::new(var("HARNESS_RESTATE_ADMIN")).unwrap();
    let ingress = Ingress::new(var("HARNESS_RESTATE_INGRESS"), Duration::from_secs(90)).unwrap();
    let agent = AgentClient::new(ingress.clone());
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let run = format!("{}-{port}", std::process::id());
    let uri = format!("http://127.0.0.1:{port}");

    // 1. A plain run; the session is kept in Restate and continued by the
    //    next run.
    let service = agent_service(dir.path(), port, &[]);
    let services = admin.register(&uri, true).await.unwrap();
    assert!(
        services.contains(&"HarnessAgent".to_owned()),
        "{services:?}"
    );
    let plain = SessionId::from(format!("plain-{run}"));
    let first = agent.run(&plain, &json!({"tag": "a "})).await.unwrap();
    let pid = service.pid();
    assert!(
        matches!(&first, Reply::Completed { signal, .. } if signal == "done"),
        "{first:?}"
    );
    assert_eq!(
        log_of(&first),
        (0..3)
            .map(|i| format!("a effect {i} by {pid}"))
            .collect::<Vec<_>>()
    );
    let second = agent.run(&plain, &json!({"tag": "b "})).await.unwrap();
    let Reply::Completed { state, .. } = &second else {
        panic!("{second:?}")
    };
    assert_eq!(state["runs"], 2, "the second run continues the session");
    assert_eq!(log_of(&second).len(), 6);
    let snapshot = agent.session(&plain).await.unwrap().unwrap();
    assert!(matches!(
        snapshot.head.phase,
        SessionPhase::Completed { .. }
    ));
    assert!(snapshot.log.len() >= 3, "{:?}", snapshot.log);
    assert!(
        agent
            .session(&SessionId::from(format!("none-{run}")))
            .await
            .unwrap()
            .is_none()
    );

    // 2. Input that is not an update of the state: a typed error, nothing
    //    run.
    for bad in [json!({"runs": "many"}), json!({"nope": 1})] {
        match agent
            .run(&SessionId::from(format!("bad-{run}")), &bad)
            .await
        {
            Err(RestateError::Status { status, body, .. }) => {
                assert_eq!(status, 400, "{body}");
                assert!(body.contains("Job"), "{body}");
            }
            other => panic!("{bad}: {other:?}"),
        }
    }
    // `null` is `{}`, the empty update, to `run` and to `submit` alike:
    // a run with no change.
    let unchanged = SessionId::from(format!("null-{run}"));
    let ran = agent.run(&unchanged, &json!(null)).await.unwrap();
    let Reply::Completed { state, .. } = &ran else {
        panic!("{ran:?}")
    };
    assert_eq!(state["runs"], 1, "{ran:?}");
    let submitted = agent.submit(&unchanged, &json!(null), None).await.unwrap();
    let ran = agent.outcome(&submitted).await.unwrap();
    let Reply::Completed { state, .. } = &ran else {
        panic!("{ran:?}")
    };
    assert_eq!(state["runs"], 2, "{ran:?}");
    // What is no JSON object is no update at all: refused before it is
    // sent, saying what an update is.
    for bad in [json!([1, 2]), json!("x"), json!(3)] {
        match agent
            .run(&SessionId::from(format!("bad-{run}")), &bad)
            .await
        {
            Err(e @ RestateError::Input { .. }) => {
                assert!(e.to_string().contains("a JSON object"), "{e}");
            }
            other => panic!("{bad}: {other:?}"),
        }
    }
    drop(service);

    // 3. SIGKILL mid-step, after the first effect; the service comes back
    //    on the same address and Restate replays the handler: effect 0 is
    //    answered from the journal, 1 and 2 run once, in the new process.
    // Killed once the step hangs: after effect 0's `once` returned, which
    // waits for Restate to journal it (the line in the file comes before
    // that, while the effect runs).
    let hung = dir.path().join("hung");
    let killed = agent_service(
        dir.path(),
        port,
        &[
            ("PROBE_HANG_AFTER", "0".into()),
            ("PROBE_HANG_ONCE", hung.display().to_string()),
        ],
    );
    let session = SessionId::from(format!("killed-{run}"));
    let file = dir.path().join(format!("{session}.log"));
    let invocation = agent.submit(&session, &json!({}), None).await.unwrap();
    while !hung.exists() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(lines(&file).len(), 1);
    let first_pid = killed.pid();
    drop(killed);
    let service = agent_service(dir.path(), port, &[]);
    let done = agent.outcome(&invocation).await.unwrap();
    let pid = service.pid();
    let expected = [
        format!("effect 0 by {first_pid}"),
        format!("effect 1 by {pid}"),
        format!("effect 2 by {pid}"),
    ];
    assert_eq!(log_of(&done), expected);
    assert_eq!(lines(&file), expected, "each effect ran exactly once");

    // 4. Two runs submitted on one session at once: one after the other.
    let session = SessionId::from(format!("queued-{run}"));
    let file = dir.path().join(format!("{session}.log"));
    drop(service);
    let service = agent_service(dir.path(), port, &[("PROBE_PAUSE_MS", "40".into())]);
    let a = agent
        .submit(&session, &json!({"tag": "a "}), None)
        .await
        .unwrap();
    let b = agent
        .submit(&session, &json!({"tag": "b "}), None)
        .await
        .unwrap();
    let (a, b) = (
        agent.outcome(&a).await.unwrap(),
        agent.outcome(&b).await.unwrap(),
    );
    let tags: String = lines(&file).iter().map(|l| &l[..1]).collect();
    assert!(tags == "aaabbb" || tags == "bbbaaa", "{:?}", lines(&file));
    let runs = |r: &Reply| match r {
        Reply::Completed { state, .. } => state["runs"].as_u64().unwrap(),
        other => panic!("{other:?}"),
    };
    let mut counts = [runs(&a), runs(&b)];
    counts.sort_unstable();
    assert_eq!(counts, [1, 2], "the later run saw the earlier one's state");

    // 5. An interrupt: the run ends waiting; the answer comes from this
    //    process to a service restarted in between (another process).
    let session = SessionId::from(format!("ask-{run}"));
    let file = dir.path().join(format!("{session}.log"));
    let asked = agent
        .run(&session, &json!({"approve": true}))
        .await
        .unwrap();
    let Reply::Interrupted { interrupt, .. } = &asked else {
        panic!("{asked:?}")
    };
    assert_eq!(interrupt.payload, "ship it?");
    drop(service);
    let service = agent_service(dir.path(), port, &[]);
    // Wrongly shaped answers are refused; the session still waits.
    for wrong in [json!("yes"), json!({"ship": true}), json!(1)] {
        let refused = agent
            .resume(&session, &interrupt.id, wrong.clone())
            .await
            .unwrap();
        assert!(
            matches!(&refused, Reply::Rejected { interrupt: id, reason } if *id == interrupt.id && reason.contains("bool")),
            "{wrong}: {refused:?}"
        );
        let head = agent.session(&session).await.unwrap().unwrap().head;
        assert!(
            matches!(&head.phase, SessionPhase::Interrupted { interrupt: i } if i.id == interrupt.id),
            "{:?}",
            head.phase
        );
    }
    // An answer to an interrupt that is not pending: refused by name.
    match agent
        .resume(&session, &"no-such-interrupt".into(), json!(true))
        .await
    {
        Err(RestateError::Status { status, .. }) => assert_eq!(status, 404),
        other => panic!("{other:?}"),
    }
    // A new run on the waiting session: refused, saying how to answer.
    match agent.run(&session, &json!({})).await {
        Err(RestateError::Status { status, body, .. }) => {
            assert_eq!(status, 409, "{body}");
            assert!(body.contains("AgentClient::resume"), "{body}");
        }
        other => panic!("{other:?}"),
    }
    let done = agent
        .resume(&session, &interrupt.id, json!(true))
        .await
        .unwrap();
    assert!(matches!(&done, Reply::Completed { .. }), "{done:?}");
    assert_eq!(log_of(&done).last().unwrap(), "shipped");
    assert_eq!(lines(&file).len(), 4, "{:?}", lines(&file));
    assert_eq!(lines(&file)[3], "shipped");

    // 6. The sessions read back as a store, from the admin API (the service
    //    need not be up): by the core's readers and by the studio.
    let reader = RestateSessionReader::new(admin.clone());
    let listed = reader.sessions().await.unwrap();
    for name in ["plain", "killed", "queued", "ask"] {
        let id = SessionId::from(format!("{name}-{run}"));
        assert!(listed.contains(&id), "{id} in {listed:?}");
    }
    let head = reader.load(&plain).await.unwrap().unwrap();
    assert_eq!(head.agent_id, "probe");
    let log = reader.checkpoints(&plain, 0).await.unwrap();
    assert_eq!(log, agent.session(&plain).await.unwrap().unwrap().log);
    assert!(
        reader
            .checkpoints(&plain, u64::MAX)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        reader
            .load(&SessionId::from("none"))
            .await
            .unwrap()
            .is_none()
    );
    let commit = harness::session::Commit {
        head: head.clone(),
        expected_version: Some(head.version),
        append: vec![],
        remove: vec![],
        durable: true,
    };
    let refused = reader.commit(&commit).await.unwrap_err().to_string();
    assert!(refused.contains("read-only"), "{refused}");
    let studio = harness_studio::Studio::read_only(std::sync::Arc::new(reader))
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    // Every page of the list, in the studio's order (by id; the server
    // keeps the sessions of earlier runs of the suite too).
    let mut listed = String::new();
    let mut after: Option<String> = None;
    loop {
        let mut url = format!("http://{}/api/sessions", studio.local_addr());
        if let Some(after) = &after {
            // Percent-encoded by the server, ready for the query string.
            url = format!("{url}?after={after}");
        }
        let page = reqwest::Client::new()
            .get(&url)
            .header("x-studio-token", studio.token())
            .send()
            .await
            .unwrap();
        assert_eq!(page.status(), 200);
        after = page
            .headers()
            .get("x-next-after")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        listed.push_str(&page.text().await.unwrap());
        if after.is_none() {
            break;
        }
    }
    assert!(listed.contains(&format!("plain-{run}")), "{listed}");
    assert!(listed.contains(&format!("ask-{run}")), "{listed}");
    drop(service);
}

/// A Restate server of this test's own (its ports and data), stopped when
/// dropped: restarting the shared one would break the other tests' calls.
struct OwnServer {
    env: Vec<(&'static str, String)>,
    admin: String,
    ingress: String,
}

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/restate");

impl OwnServer {
    fn script(env: &[(&'static str, String)], arg: &str) -> String {
        let out = Command::new(SCRIPT)
            .arg(arg)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "scripts/restate {arg}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn start(data: &Path) -> OwnServer {
        Self::start_with(data, &[])
    }

    /// A server with more settings (`RESTATE_…` variables).
    fn start_with(data: &Path, settings: &[(&'static str, &str)]) -> OwnServer {
        // Three ports: the node's 10 below the ingress, the admin 10 above.
        let base = (0..200)
            .map(|_| free_port())
            .find(|p| {
                (11..65_000).contains(p)
                    && [p - 10, p + 10]
                        .iter()
                        .all(|q| std::net::TcpListener::bind(("127.0.0.1", *q)).is_ok())
            })
            .unwrap();
        let mut env = vec![
            ("HARNESS_RESTATE_PORT", base.to_string()),
            ("HARNESS_RESTATE_DATA", data.display().to_string()),
        ];
        env.extend(settings.iter().map(|(k, v)| (*k, (*v).to_owned())));
        let urls = Self::script(&env, "start");
        let url = |name: &str| {
            urls.lines()
                .find_map(|l| l.strip_prefix(&format!("export {name}=")))
                .unwrap()
                .to_owned()
        };
        OwnServer {
            admin: url("HARNESS_RESTATE_ADMIN"),
            ingress: url("HARNESS_RESTATE_INGRESS"),
            env,
        }
    }

    fn restart(&self) {
        Self::script(&self.env, "restart");
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        let _ = Command::new(SCRIPT)
            .arg("stop")
            .envs(self.env.iter().map(|(k, v)| (*k, v.as_str())))
            .output();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_survives_a_restart_of_the_restate_server_itself() {
    var("HARNESS_RESTATE_ADMIN"); // the suite's server: the package is installed
    let data = tempfile::tempdir().unwrap();
    let server = OwnServer::start(data.path());
    let rig = Rig::on(server.admin.clone(), server.ingress.clone());
    let service = rig.hanging(1, &[]);
    rig.register().await;
    let (session, file) = rig.session("restarted");
    let invocation = rig.agent.submit(&session, &json!({}), None).await.unwrap();
    rig.hung().await;
    // The server goes down mid-step and comes back on the same data; the
    // service stays up, its handler cut off. The invocation goes on from
    // its journal. (A new client: the old one's pooled connections went
    // with the server.)
    server.restart();
    let client =
        AgentClient::new(Ingress::new(server.ingress.clone(), Duration::from_secs(90)).unwrap());
    let done = client.outcome(&invocation).await.unwrap();
    let pid = service.pid();
    let expected: Vec<String> = (0..3).map(|i| format!("effect {i} by {pid}")).collect();
    assert_eq!(log_of(&done), expected);
    assert_eq!(
        lines(&file),
        expected,
        "each journaled effect ran exactly once"
    );
}

/// The object's state is read key by key: a session whose kept history
/// (here 8 notes of 400 KB, by reference) outgrows what the server lets
/// one invocation read (2 MiB here) still runs, each run reading its head
/// and its checkpoints from the latest snapshot on. Read whole (Restate's
/// eager state), the history would pause every later invocation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_history_outgrows_what_one_invocation_may_read_still_runs() {
    var("HARNESS_RESTATE_ADMIN"); // the suite's server: the package is installed
    let data = tempfile::tempdir().unwrap();
    let server = OwnServer::start_with(
        data.path(),
        &[(
            "RESTATE_WORKER__INVOKER__PER_INVOCATION_MEMORY_LIMIT",
            "2MiB",
        )],
    );
    let rig = Rig::on(server.admin.clone(), server.ingress.clone());
    let _service = rig.service(&[]);
    rig.register().await;
    let (session, _) = rig.session("long-history");
    let note = |i: usize| format!("{i}").repeat(400_000 / format!("{i}").len());
    for i in 0..8 {
        let invocation = rig
            .agent
            .submit(&session, &json!({"note": note(i)}), None)
            .await
            .unwrap();
        let done = tokio::time::timeout(Duration::from_secs(60), rig.agent.outcome(&invocation))
            .await
            .unwrap_or_else(|_| panic!("run {i} did not end within 60 s"))
            .unwrap();
        let Reply::Completed { state, .. } = &done else {
            panic!("run {i}: {done:?}")
        };
        assert_eq!(state["note"], note(i), "run {i}");
    }
    // Every note is still kept: the history is past the limit.
    let kept: usize = state_of(&rig.admin, session.as_str())
        .await
        .iter()
        .filter(|(key, _)| key.starts_with("val/"))
        .map(|(_, value)| value.len())
        .sum();
    assert!(kept > 3_000_000, "{kept} bytes of notes kept");
}

/// A fan-out on a service of its own, hung after its first round: `work`
/// makes one effect, then three `part` branches make two each, by rounds
/// (the parts' first effects side by side in one `ctx.run`, then their
/// second ones), each part effect taking `pause_ms`; the service hangs in
/// part 1 after its first effect. Waits for the first round's three
/// effects (after the step's own), up to 60 s, and a moment more (the
/// second round waits for part 1's second effect, which never comes).
/// The settings for the service's next start, the hung service, the
/// invocation and the session's effect log.
async fn hung_after_a_round(
    rig: &Rig,
    name: &str,
    pause_ms: u64,
) -> (
    [(&'static str, String); 2],
    Service,
    String,
    std::path::PathBuf,
) {
    let env = [
        ("PROBE_EFFECTS", "1".to_owned()),
        ("PROBE_PAUSE_MS", pause_ms.to_string()),
    ];
    let hung = rig.hanging(
        0,
        &[
            env[0].clone(),
            env[1].clone(),
            ("PROBE_HANG_PART", "1".into()),
        ],
    );
    rig.register().await;
    let (session, file) = rig.session(name);
    let invocation = rig
        .agent
        .submit(&session, &json!({"parts": [0, 1, 2]}), None)
        .await
        .unwrap();
    rig.hung().await;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while lines(&file).len() < 4 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(2 * pause_ms + 100)).await;
    (env, hung, invocation, file)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fan_out_runs_its_effects_side_by_side_and_killed_mid_way_each_once() {
    let _serial = SHARED_SERVER.lock().await;
    let rig = Rig::shared();
    // `work` makes one effect, then three `part` branches make two each, by
    // rounds: the parts' first effects side by side in one `ctx.run`, then
    // their second ones. Each part effect takes 300 ms. The service hangs
    // in part 1 after its first effect, and is killed.
    let (env, killed, invocation, file) = hung_after_a_round(&rig, "fanned", 300).await;
    let first_pid = killed.pid();
    drop(killed);
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    let first_round = [
        format!("part 0 effect 0 by {first_pid}"),
        format!("part 1 effect 0 by {first_pid}"),
        format!("part 2 effect 0 by {first_pid}"),
    ];
    let before_kill = lines(&file);
    assert_eq!(
        before_kill.first(),
        Some(&format!("effect 0 by {first_pid}"))
    );
    assert_eq!(
        sorted(before_kill[1..].to_vec()),
        first_round,
        "killed after the first round"
    );
    let service = rig.service(&env);
    let done = rig.agent.outcome(&invocation).await.unwrap();
    let pid = service.pid();
    let second_round = [
        format!("part 0 effect 1 by {pid}"),
        format!("part 1 effect 1 by {pid}"),
        format!("part 2 effect 1 by {pid}"),
    ];
    assert!(matches!(&done, Reply::Completed { .. }), "{done:?}");
    let after = lines(&file);
    assert_eq!(
        after[..4],
        before_kill[..],
        "the replay ran none of them again"
    );
    assert_eq!(
        sorted(after[4..].to_vec()),
        second_round,
        "each effect ran exactly once; the second round by the restarted service"
    );
    let expected: Vec<String> = std::iter::once(format!("effect 0 by {first_pid}"))
        .chain((0..3).flat_map(|p| [first_round[p].clone(), second_round[p].clone()]))
        .collect();
    assert_eq!(log_of(&done), expected, "merged in branch order");
    let most = lines(&file.with_extension("overlap"))
        .iter()
        .map(|n| n.parse::<u32>().unwrap())
        .max();
    assert_eq!(most, Some(3), "each round's three effects ran side by side");
}

/// The bytes of `invocation`'s journal from its save on (its first state
/// write, or its `save session` entry when journaled): the state it
/// writes, values kept by reference, the reply; less the reply itself,
/// `reply` bytes, which is journaled once as the handler's output and once
/// more in a journaled save.
async fn saved_bytes(admin: &Admin, invocation: &str, reply: usize) -> usize {
    let rows = admin
        .query(&format!(
            "SELECT index, entry_type, name, raw FROM sys_journal WHERE id = '{invocation}' ORDER BY index"
        ))
        .await
        .unwrap();
    let is_save = |r: &serde_json::Value| {
        let name = r["name"].as_str().unwrap_or_default();
        let ty = r["entry_type"].as_str().unwrap_or_default();
        name.starts_with("save ") || ty.contains("SetState") || ty.contains("ClearState")
    };
    let save = rows
        .iter()
        .position(is_save)
        .unwrap_or_else(|| panic!("no save in {invocation}: {rows:?}"));
    let journaled = rows
        .iter()
        .any(|r| r["name"].as_str() == Some("save session"));
    rows[save..]
        .iter()
        .filter_map(|r| r["raw"].as_str())
        .map(|hex| hex.len() / 2)
        .sum::<usize>()
        - reply * (1 + usize::from(journaled))
}

/// The session as the object's handler gives it, checked to be what the
/// admin API's reader reads.
async fn agreed_session(rig: &Rig, session: &SessionId) -> harness_restate::Snapshot {
    let kept = rig.agent.session(session).await.unwrap().unwrap();
    let read = RestateSessionReader::new(rig.admin.clone())
        .snapshot(session)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read, kept);
    kept
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_journals_and_writes_only_the_checkpoints_it_adds() {
    let _serial = SHARED_SERVER.lock().await;
    let rig = Rig::shared();
    let _service = rig.service(&[("PROBE_EFFECTS", "1".to_owned())]);
    rig.register().await;
    let (session, _) = rig.session("long");
    let mut saves = Vec::new();
    for i in 0..12 {
        // Each run writes a long note over the last one: a whole-session
        // save would journal every earlier run's note again, and the
        // session takes snapshots (its updates outgrow its state).
        let note = format!("run-{i}-{}", "x".repeat(30_000));
        let invocation = rig
            .agent
            .submit(&session, &json!({"note": note}), None)
            .await
            .unwrap();
        let done = rig.agent.outcome(&invocation).await.unwrap();
        assert_eq!(log_of(&done).len(), i + 1);
        // The reply carries the state, which grows by a line each run.
        let reply = serde_json::to_string(&done).unwrap().len();
        saves.push(saved_bytes(&rig.admin, &invocation, reply).await);
    }
    eprintln!("bytes saved per run, beside the reply: {saves:?}");
    // What the eighth run saves beside its reply is what the first did
    // (give or take the digits), not eight times the checkpoints.
    assert!(
        saves[7] < saves[0] + 200,
        "the saved bytes grow with the session: {saves:?}"
    );
    // And the session holds every run.
    let kept = agreed_session(&rig, &session).await;
    assert_eq!(kept.head.last_seq, kept.log.last().unwrap().seq);
    let snapshots: Vec<u64> = kept
        .log
        .iter()
        .filter(|cp| matches!(cp.kind, harness::session::CheckpointKind::Snapshot(_)))
        .map(|cp| cp.seq)
        .collect();
    // Snapshots were taken, and the superseded ones removed from the kept
    // keys (the run's key rewritten without them).
    assert!(kept.head.snapshot_seq > 0, "{snapshots:?}");
    assert_eq!(
        snapshots.last(),
        Some(&kept.head.snapshot_seq),
        "{snapshots:?}"
    );
    assert!(
        snapshots.len() <= 2,
        "superseded snapshots kept: {snapshots:?}"
    );
    // Nothing else is gone: of the checkpoints 0..=last, only the one
    // superseded snapshot (taken at run 6, replaced at run 11) is missing;
    // those before the latest snapshot are kept (the history), the run
    // keys that held them rewritten without it.
    let seqs: Vec<u64> = kept.log.iter().map(|cp| cp.seq).collect();
    let missing: Vec<u64> = (0..=kept.head.last_seq)
        .filter(|seq| !seqs.contains(seq))
        .collect();
    assert_eq!(
        missing.len(),
        1,
        "checkpoints lost: {missing:?} of {seqs:?}"
    );
    assert!(
        missing[0] > 0 && missing[0] < kept.head.snapshot_seq,
        "{missing:?}, snapshots {snapshots:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_values_are_kept_and_journaled_once_by_reference() {
    let _serial = SHARED_SERVER.lock().await;
    let rig = Rig::shared();
    let _service = rig.service(&[]);
    rig.register().await;
    let (session, _) = rig.session("large");
    let note = |c: char| c.to_string().repeat(200_000);
    let mut saves = Vec::new();
    for c in ['a', 'a', 'a', 'b', 'b'] {
        let invocation = rig
            .agent
            .submit(&session, &json!({"note": note(c)}), None)
            .await
            .unwrap();
        let done = rig.agent.outcome(&invocation).await.unwrap();
        let Reply::Completed { state, .. } = &done else {
            panic!("{done:?}")
        };
        assert_eq!(state["note"], note(c));
        // The reply carries the state, note included.
        let reply = serde_json::to_string(&done).unwrap().len();
        saves.push(saved_bytes(&rig.admin, &invocation, reply).await);
    }
    eprintln!("bytes saved per run, beside the reply: {saves:?}");
    // A note journaled once (its entry, and the state write of its key),
    // by the run that first held it; a run giving the same note again
    // journals under 2 KB.
    for (i, save) in saves.iter().enumerate() {
        if i == 0 || i == 3 {
            assert!(*save > 200_000, "run {i} journaled no note: {saves:?}");
        } else {
            assert!(*save < 20_000, "run {i} journaled a note again: {saves:?}");
        }
    }
    // Kept once each: two values, and checkpoint keys of a few KB.
    let rows = rig
        .admin
        .query(&format!(
            "SELECT key, length(value) AS len FROM state \
             WHERE service_name = 'HarnessAgent' AND service_key = '{session}'"
        ))
        .await
        .unwrap();
    let len_of = |prefix: &str| -> Vec<u64> {
        rows.iter()
            .filter(|r| r["key"].as_str().unwrap().starts_with(prefix))
            .map(|r| r["len"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(len_of("val/").len(), 2, "{rows:?}");
    assert!(len_of("val/").iter().all(|n| *n > 200_000), "{rows:?}");
    let cps = len_of("cp/");
    assert_eq!(cps.len(), 5, "{rows:?}");
    assert!(cps.iter().all(|n| *n < 10_000), "{rows:?}");
    // Read whole by the handler and by the reader alike: the first run's
    // start snapshot and each later run's input hold its note.
    let kept = agreed_session(&rig, &session).await;
    let notes: Vec<char> = kept
        .log
        .iter()
        .filter_map(|cp| match &cp.kind {
            harness::session::CheckpointKind::Update(v)
            | harness::session::CheckpointKind::Snapshot(v)
                if cp.step == "$input" || cp.step == "$start" =>
            {
                v["note"].as_str().and_then(|n| n.chars().next())
            }
            _ => None,
        })
        .collect();
    assert_eq!(notes, ['a', 'a', 'a', 'b', 'b']);
}

/// Killed ([`Admin::kill`]), the diverged run is not saved: the session
/// keeps the state its last saved run left, the effects the killed run
/// ran stay done, and the next run starts afresh from that state, running
/// its effects anew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_that_asks_for_other_effects_is_a_divergence_naming_both() {
    let _serial = SHARED_SERVER.lock().await;
    let rig = Rig::shared();
    // A run saved first.
    let service = rig.service(&[]);
    rig.register().await;
    let (session, file) = rig.session("diverged");
    let first = rig.agent.run(&session, &json!({})).await.unwrap();
    assert_eq!(log_of(&first).len(), 3, "{first:?}");
    let saved = rig.agent.session(&session).await.unwrap().unwrap();
    drop(service);
    let hanging = rig.hanging(0, &[]);
    let invocation = rig.agent.submit(&session, &json!({}), None).await.unwrap();
    rig.hung().await;
    drop(hanging);
    // The service comes back with code that names its effects otherwise:
    // its replay asks for `work#0.1:v2-effect-0` where the journal holds
    // `work#0.1:effect-0`.
    let _changed = rig.service(&[("PROBE_KEY_PREFIX", "v2-".into())]);
    let admin = &rig.admin;
    let began = std::time::Instant::now();
    let divergence = loop {
        let info = admin.invocation(&invocation).await.unwrap().unwrap();
        if let Some(d) = info.divergence() {
            break d.to_owned();
        }
        assert!(
            began.elapsed() < Duration::from_secs(60),
            "no divergence reported: {info:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Named `{step}#{visit}.{attempt}:{key}`: the second run's visit of
    // `work`, the same on both sides.
    let visit = divergence
        .split("work#")
        .nth(1)
        .and_then(|rest| rest.split(':').next())
        .unwrap_or_default();
    assert!(
        divergence.contains(&format!("work#{visit}:effect-0"))
            && divergence.contains(&format!("work#{visit}:v2-effect-0")),
        "{divergence}"
    );
    // And each side on its own: the journal's call, the replay's.
    let info = admin.invocation(&invocation).await.unwrap().unwrap();
    assert_eq!(
        info.journaled_call,
        Some(format!("work#{visit}:effect-0")),
        "{info:?}"
    );
    assert_eq!(
        info.failed_call,
        Some(format!("work#{visit}:v2-effect-0")),
        "{info:?}"
    );
    let ran = lines(&file);
    assert_eq!(ran.len(), 4, "the diverging replay ran no effect: {ran:?}");
    admin.kill(&invocation).await.unwrap();
    // Its caller learns it was killed; the session is as the first run
    // saved it; the effect the killed run ran is not undone.
    match rig.agent.outcome(&invocation).await {
        Err(RestateError::Status { status, body, .. }) => {
            assert_eq!(status, 409, "{body}");
            assert!(body.contains("killed"), "{body}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(rig.agent.session(&session).await.unwrap().unwrap(), saved);
    assert_eq!(lines(&file), ran);
    // The next run starts afresh from the saved state, its effects anew
    // (their keys as the changed code names them).
    let next = rig.agent.run(&session, &json!({})).await.unwrap();
    let Reply::Completed { state, .. } = &next else {
        panic!("{next:?}")
    };
    assert_eq!(state["runs"], 2, "from the first run's state: {next:?}");
    assert_eq!(log_of(&next)[..3], log_of(&first)[..]);
    let after = lines(&file);
    assert_eq!(after.len(), 7, "{after:?}");
    assert_eq!(after[..4], ran[..]);
    assert_eq!(log_of(&next)[3..], after[4..]);
    // Ids that are not invocation ids never reach a URL or a query.
    for bad in ["", "inv_x' OR 1=1 --", "../deployments", "inv_a/b"] {
        assert!(
            matches!(admin.invocation(bad).await, Err(RestateError::Input { .. })),
            "{bad}"
        );
        assert!(
            matches!(admin.kill(bad).await, Err(RestateError::Input { .. })),
            "{bad}"
        );
    }
}

/// A replay that asks for fewer effects than its journal holds (it goes on
/// to save where the journal holds an effect) is a divergence too: Restate
/// names the two calls' types only, and `Admin::invocation` reads the
/// journal for the call it holds there (see `Invocation::divergence`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_that_asks_for_fewer_effects_is_a_divergence_naming_the_calls_types() {
    let _serial = SHARED_SERVER.lock().await;
    let rig = Rig::shared();
    // Three effects, hanging after the second: two journaled.
    let hanging = rig.hanging(1, &[]);
    rig.register().await;
    let (session, file) = rig.session("fewer");
    let invocation = rig.agent.submit(&session, &json!({}), None).await.unwrap();
    rig.hung().await;
    drop(hanging);
    // Back with code that makes one effect.
    let _fewer = rig.service(&[("PROBE_EFFECTS", "1".into())]);
    let admin = &rig.admin;
    let began = std::time::Instant::now();
    let info = loop {
        let info = admin.invocation(&invocation).await.unwrap().unwrap();
        if info.divergence().is_some() {
            break info;
        }
        assert!(
            began.elapsed() < Duration::from_secs(60),
            "no divergence reported: {info:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let divergence = info.divergence().unwrap();
    assert_eq!(info.last_failure_code.as_deref(), Some("RT0016"));
    assert!(
        divergence.contains("'run'") && divergence.contains("'set state'"),
        "{divergence}"
    );
    // The journal's call, by its name (the effect the replay no longer
    // asks for); the replay's, by its type.
    assert_eq!(
        info.journaled_call.as_deref(),
        Some("work#0.1:effect-1"),
        "{info:?}"
    );
    assert_eq!(info.failed_call.as_deref(), Some("SetState"), "{info:?}");
    assert_eq!(lines(&file).len(), 2, "the diverging replay ran no effect");
    admin.kill(&invocation).await.unwrap();
}

/// A replay that asks for another effect in the middle of a round (the
/// round's first and last effects the same) is refused by Restate as a
/// journal mismatch and retried, as for a single effect: the run neither
/// goes on nor fails for good, and no effect runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_that_asks_for_another_effect_inside_a_round_is_a_divergence() {
    let _serial = SHARED_SERVER.lock().await;
    let rig = Rig::shared();
    let (env, killed, invocation, file) = hung_after_a_round(&rig, "round-diverged", 100).await;
    drop(killed);
    let before = lines(&file);
    assert_eq!(before.len(), 4, "{before:?}");
    // Back with code that names part 1's effects otherwise.
    let mut changed = env.to_vec();
    changed.push(("PROBE_DIVERGE_PART", "1".into()));
    let _changed = rig.service(&changed);
    let admin = &rig.admin;
    let began = std::time::Instant::now();
    let (divergence, status) = loop {
        let info = admin.invocation(&invocation).await.unwrap().unwrap();
        if let Some(d) = info.divergence() {
            break (d.to_owned(), info.status.clone());
        }
        assert!(
            began.elapsed() < Duration::from_secs(60),
            "no divergence reported: {info:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(divergence.contains("round of 3"), "{divergence}");
    assert_ne!(status, "completed", "{divergence}");
    assert_eq!(lines(&file), before, "the diverging replay ran no effect");
    admin.kill(&invocation).await.unwrap();
}

/// Until a `ctx.run` closure of an attempt has started, an effect's entry
/// is made before the effect runs (the journal may still answer it); from
/// then on, once the effect has run, with its outcome (see the agent
/// module's docs). Each effect takes 1.5 s and then writes its line: a look
/// at the journal and then at the file that finds an effect's entry and not
/// yet its line shows the entry was made before the effect ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_journals_end_an_effects_entry_is_made_once_it_has_run() {
    let _serial = SHARED_SERVER.lock().await;
    let rig = Rig::shared();
    let _service = rig.service(&[
        ("PROBE_PAUSE_MS", "1500".into()),
        ("PROBE_EFFECTS", "3".into()),
    ]);
    rig.register().await;
    let (session, file) = rig.session("ahead");
    let invocation = rig.agent.submit(&session, &json!({}), None).await.unwrap();
    let mut entry_before_line = [false; 3];
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        assert!(std::time::Instant::now() < deadline, "the run did not end");
        // The journal first, then the file.
        let journal = journal_of(&rig.admin, &invocation).await;
        let written = lines(&file);
        for (i, early) in entry_before_line.iter_mut().enumerate() {
            let entry = journal.iter().any(|(_, kind, name)| {
                // Named `{step}#{run}.{task}:{effect}`.
                kind == "Command: Run" && name.ends_with(&format!(":effect-{i}"))
            });
            let line = written
                .iter()
                .any(|l| l.starts_with(&format!("effect {i} by")));
            *early |= entry && !line;
        }
        if journal.iter().any(|(_, kind, _)| kind == "Command: Output") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(lines(&file).len(), 3);
    assert_eq!(
        entry_before_line,
        [true, false, false],
        "whether each effect's entry was seen before it had run"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_invocation_stops_the_run_and_keeps_its_session() {
    let _serial = SHARED_SERVER.lock().await;
    let rig = Rig::shared();
    let _service = rig.service(&[
        ("PROBE_EFFECTS", "6".into()),
        ("PROBE_PAUSE_MS", "300".into()),
    ]);
    rig.register().await;
    let (session, file) = rig.session("stopped");
    let (admin, agent) = (&rig.admin, &rig.agent);
    let invocation = agent.submit(&session, &json!({}), None).await.unwrap();
    wait_for_lines(&file, 1);
    admin.cancel(&invocation).await.unwrap();
    let reply = agent.outcome(&invocation).await;
    let done = lines(&file).len();
    assert!(
        done < 6,
        "the run went on after the cancellation: {reply:?}"
    );
    // The session is kept, settled (not left running), with what the run
    // did before it stopped.
    let head = agent.session(&session).await.unwrap().unwrap().head;
    assert!(
        !matches!(head.phase, SessionPhase::Running),
        "{:?} after {reply:?}",
        head.phase
    );
    // The step waiting on its effect learns of the cancellation: the run
    // ends there, failed, saying why.
    assert!(
        matches!(&reply, Ok(Reply::Failed { error }) if error.contains("cancelled")),
        "{reply:?}"
    );
    assert!(
        matches!(&head.phase, SessionPhase::Failed { error } if error.contains("cancelled")),
        "{:?}",
        head.phase
    );
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(lines(&file).len(), done, "no effect ran after the stop");
    // A new run starts at the start step, from the state saved: the
    // effects of the step the stopped run had begun run again, from the
    // first.
    let again = agent.run(&session, &json!({})).await.unwrap();
    let Reply::Completed { state, .. } = &again else {
        panic!("{again:?}")
    };
    assert_eq!(state["runs"], 1, "{again:?}");
    let written = lines(&file);
    assert_eq!(written.len(), done + 6, "{written:?}");
    assert!(written[0].starts_with("effect 0 by"), "{written:?}");
    assert!(written[done].starts_with("effect 0 by"), "{written:?}");
    assert_eq!(log_of(&again), written[done..]);
}

/// A run that waits for an answer no one gives has no invocation under
/// way to cancel: `stop` ends it as stopped, as the core records a stop of
/// a run no process holds; the session then takes new runs, and a late
/// answer to the old interrupt is refused, never applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_waiting_for_an_answer_is_stopped_and_its_session_runs_again() {
    let _serial = SHARED_SERVER.lock().await;
    let rig = Rig::shared();
    let _service = rig.service(&[]);
    rig.register().await;
    let (session, file) = rig.session("unanswered");
    let (admin, agent) = (&rig.admin, &rig.agent);
    let invocation = agent
        .submit(&session, &json!({"approve": true, "tag": "a "}), None)
        .await
        .unwrap();
    let asked = agent.outcome(&invocation).await.unwrap();
    let Reply::Interrupted { interrupt, .. } = &asked else {
        panic!("{asked:?}")
    };
    // The handler that paused the run has ended: cancelling its invocation
    // stops nothing, and the session still waits.
    match admin.cancel(&invocation).await {
        Err(RestateError::Status { status, body, .. }) => assert_eq!(status, 409, "{body}"),
        other => panic!("{other:?}"),
    }
    let waits = agent.session(&session).await.unwrap().unwrap().head;
    assert!(
        matches!(&waits.phase, SessionPhase::Interrupted { interrupt: i } if i.id == interrupt.id),
        "{:?}",
        waits.phase
    );

    // Stopped: the run ends as a run stopped in its own process ends, with
    // the state the interrupt left; no step ran, no answer is recorded.
    let stopped = agent.stop(&session).await.unwrap();
    assert!(
        matches!(&stopped, Reply::Completed { signal, .. } if signal == "$stopped"),
        "{stopped:?}"
    );
    assert_eq!(log_of(&stopped).len(), 3, "{stopped:?}");
    let head = agent.session(&session).await.unwrap().unwrap().head;
    assert_eq!(
        head.phase,
        SessionPhase::Completed {
            signal: Signal::STOPPED
        }
    );
    assert_eq!(
        head.next_step.as_deref(),
        Some("ask"),
        "the step it stopped at"
    );
    assert!(head.journal.responses.is_empty(), "{:?}", head.journal);
    assert_eq!(head.run_id, waits.run_id, "the same run, ended");
    assert_eq!(head.version, waits.version + 1);
    let read = RestateSessionReader::new(admin.clone())
        .load(&session)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        read.phase, head.phase,
        "the admin API's reader sees it stopped"
    );
    assert_eq!(lines(&file).len(), 3, "{:?}", lines(&file));
    // The stop's save is journaled: a replay of its invocation writes the
    // same bytes (Restate refuses any other) and replies the same.
    let stops = admin
        .query(&format!(
            "SELECT id FROM sys_invocation WHERE target_service_key = {} \
             AND target_handler_name = 'stop'",
            literal(session.as_str())
        ))
        .await
        .unwrap();
    assert_eq!(stops.len(), 1, "{stops:?}");
    let replayed = replayed_to_its_last_write(&rig, stops[0]["id"].as_str().unwrap()).await;
    assert_eq!(replayed, stopped);
    assert_eq!(agent.session(&session).await.unwrap().unwrap().head, head);
    // Nothing waits any more: another stop changes nothing, saying why; a
    // session that does not exist has nothing to stop.
    match agent.stop(&session).await {
        Err(RestateError::Status { status, body, .. }) => {
            assert_eq!(status, 409, "{body}");
            assert!(body.contains("completed with `$stopped`"), "{body}");
        }
        other => panic!("{other:?}"),
    }
    let (none, _) = rig.session("never-ran");
    match agent.stop(&none).await {
        Err(RestateError::Status { status, body, .. }) => assert_eq!(status, 404, "{body}"),
        other => panic!("{other:?}"),
    }
    let unchanged = agent.session(&session).await.unwrap().unwrap().head;
    assert_eq!(unchanged.version, head.version);

    // A new run on the session: it runs from the state the stopped run
    // left, and pauses on an interrupt of its own.
    let again = agent.run(&session, &json!({"tag": "b "})).await.unwrap();
    let Reply::Interrupted {
        interrupt: second,
        state,
    } = &again
    else {
        panic!("{again:?}")
    };
    assert_ne!(second.id, interrupt.id);
    assert_eq!(state["runs"], 2, "{again:?}");
    // The late answer to the old interrupt: refused, naming both; the new
    // run still waits on its own, and nothing ran.
    match agent.resume(&session, &interrupt.id, json!(true)).await {
        Err(RestateError::Status { status, body, .. }) => {
            assert_eq!(status, 404, "{body}");
            assert!(
                body.contains(interrupt.id.as_str()) && body.contains(second.id.as_str()),
                "{body}"
            );
        }
        other => panic!("{other:?}"),
    }
    let head = agent.session(&session).await.unwrap().unwrap().head;
    assert!(
        matches!(&head.phase, SessionPhase::Interrupted { interrupt: i } if i.id == second.id),
        "{:?}",
        head.phase
    );
    assert_eq!(lines(&file).len(), 6, "{:?}", lines(&file));
    // The new run, answered, completes; the old interrupt is still refused.
    let done = agent
        .resume(&session, &second.id, json!(false))
        .await
        .unwrap();
    assert_eq!(log_of(&done).last().unwrap(), "held", "{done:?}");
    match agent.resume(&session, &interrupt.id, json!(true)).await {
        Err(RestateError::Status { status, body, .. }) => {
            assert_eq!(status, 404, "{body}");
            assert!(body.contains("not paused"), "{body}");
        }
        other => panic!("{other:?}"),
    }
    let written = lines(&file);
    assert_eq!(written.len(), 7, "{written:?}");
    assert!(
        !written.iter().any(|l| l == "shipped"),
        "the late answer was applied: {written:?}"
    );
}

/// The names of `invocation`'s journal entries, in order, with their
/// types (`Command: Run`, `Command: SetState`, …).
async fn journal_of(admin: &Admin, invocation: &str) -> Vec<(u64, String, String)> {
    admin
        .query(&format!(
            "SELECT index, entry_type, name FROM sys_journal WHERE id = '{invocation}' ORDER BY index"
        ))
        .await
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["index"].as_u64().unwrap(),
                r["entry_type"].as_str().unwrap_or_default().to_owned(),
                r["name"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// Restarts the ended `invocation` as a new one that replays its journal
/// up to its last state write, included (Restate's restart-as-new), and
/// waits for the new one to end: a replay that writes other bytes than the
/// journal holds is a journal mismatch, which Restate retries without end.
async fn replayed_to_its_last_write(rig: &Rig, invocation: &str) -> Reply {
    let journal = journal_of(&rig.admin, invocation).await;
    let (last_write, _, _) = journal
        .iter()
        .rev()
        .find(|(_, ty, _)| ty.contains("SetState"))
        .unwrap_or_else(|| panic!("no state write in {journal:?}"));
    let url = format!(
        "{}/invocations/{invocation}/restart-as-new?from={last_write}",
        rig.admin.base()
    );
    let text = reqwest::Client::new()
        .patch(&url)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let answer: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{url}: {e}: {text}"));
    let again = answer["new_invocation_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{url}: {answer}"))
        .to_owned();
    let began = std::time::Instant::now();
    loop {
        let info = rig.admin.invocation(&again).await.unwrap().unwrap();
        if info.status == "completed" {
            break;
        }
        assert!(
            info.last_failure.is_none() && began.elapsed() < Duration::from_secs(60),
            "the replay of {invocation}'s journal did not end: {info:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    rig.agent.outcome(&again).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loops_save_is_plain_state_that_a_replay_of_its_journal_writes_again() {
    let _serial = SHARED_SERVER.lock().await;
    let rig = Rig::shared();
    // Each run's work step notes a value made from its run id.
    let _service = rig.service(&[("PROBE_RUN_TAG", "1".into())]);
    rig.register().await;
    let (session, _) = rig.session("plain-save");
    let (admin, agent) = (&rig.admin, &rig.agent);
    let began = harness::session::now_millis();

    // A run of one task: its save is written as plain state, with no
    // entry of its own; its checkpoints carry the journal's times.
    let first = agent
        .submit(&session, &json!({"tag": "a "}), None)
        .await
        .unwrap();
    let done = agent.outcome(&first).await.unwrap();
    assert!(matches!(&done, Reply::Completed { .. }), "{done:?}");
    let journal = journal_of(admin, &first).await;
    assert!(
        !journal.iter().any(|(_, _, name)| name == "save session"),
        "{journal:?}"
    );
    assert!(journal.iter().any(|(_, ty, _)| ty.contains("SetState")));
    let kept = agreed_session(&rig, &session).await;
    let ended = harness::session::now_millis();
    let times: Vec<u64> = kept.log.iter().map(|cp| cp.time).collect();
    assert!(
        times.windows(2).all(|w| w[0] <= w[1]) && times.iter().all(|t| (began..=ended).contains(t)),
        "checkpoint times {times:?} out of order or outside {began}..={ended}"
    );
    assert!((*times.last().unwrap()..=ended).contains(&kept.head.updated_at));
    assert_eq!(kept.head.created_at, times[0]);
    // The id the step saw is the one the session keeps.
    let Reply::Completed { state, .. } = &done else {
        unreachable!()
    };
    assert_eq!(
        state["note"],
        format!("run {}", &kept.head.run_id.as_str()[..8])
    );

    // A run that stops for a human: the interrupt's id is the journal's,
    // and a resume with it from the reply continues the run.
    let asked = agent
        .submit(&session, &json!({"tag": "b ", "approve": true}), None)
        .await
        .unwrap();
    let Reply::Interrupted { interrupt, .. } = agent.outcome(&asked).await.unwrap() else {
        panic!("no interrupt")
    };
    let kept = agreed_session(&rig, &session).await;
    assert!(
        matches!(&kept.head.phase, SessionPhase::Interrupted { interrupt: i } if i.id == interrupt.id),
        "{:?}",
        kept.head.phase
    );
    assert!(
        !journal_of(admin, &asked)
            .await
            .iter()
            .any(|(_, _, name)| name == "save session")
    );
    // Replayed up to its last state write, the run writes the same bytes
    // (else Restate reports a mismatch and retries): the same ids, the
    // same times, the same interrupt.
    let replayed = replayed_to_its_last_write(&rig, &asked).await;
    assert!(
        matches!(&replayed, Reply::Interrupted { interrupt: again, .. } if again.id == interrupt.id),
        "{replayed:?}"
    );
    assert_eq!(agreed_session(&rig, &session).await, kept);
    let resumed = agent
        .resume(&session, &interrupt.id, json!(true))
        .await
        .unwrap();
    assert!(
        log_of(&resumed).contains(&"shipped".to_owned()),
        "{resumed:?}"
    );

    // A fan-out's branches commit side by side, in an order the journal
    // does not fix: its save is journaled, and replays just the same.
    let (spread, _) = rig.session("spread-save");
    let fanned = agent
        .submit(&spread, &json!({"parts": [1, 2]}), None)
        .await
        .unwrap();
    let done = agent.outcome(&fanned).await.unwrap();
    assert!(matches!(&done, Reply::Completed { .. }), "{done:?}");
    assert!(
        journal_of(admin, &fanned)
            .await
            .iter()
            .any(|(_, _, name)| name == "save session")
    );
    let kept = agreed_session(&rig, &spread).await;
    assert_eq!(replayed_to_its_last_write(&rig, &fanned).await, done);
    assert_eq!(agreed_session(&rig, &spread).await, kept);
}

#[derive(
    Clone, Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema, harness::HarnessState,
)]
struct Bare {
    n: u32,
}

#[test]
fn an_agent_whose_harness_lacks_the_store_or_the_journal_is_refused() {
    use harness::{Harness, create_agent};
    use harness_restate::Durable;
    let durable = Durable::new();
    let build = |store: bool, effects: bool| {
        let mut builder = Harness::<Bare>::builder()
            .step("one")
            .run(async |_: std::sync::Arc<Bare>| Ok(BareUpdate::new().n(1)))
            .end()
            .start("one");
        if store {
            builder = builder.store(durable.store());
        }
        if effects {
            builder = builder.effects(durable.effects());
        }
        create_agent("bare", &builder.build().unwrap())
    };
    for (store, effects, missing) in [
        (false, true, ".store("),
        (true, false, ".effects("),
        (false, false, "` and `"),
    ] {
        let err = durable.object(build(store, effects)).unwrap_err();
        assert_eq!(err.agent, "bare");
        assert!(err.to_string().contains(missing), "{err}");
    }
    assert!(durable.object(build(true, true)).is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_services_secrets_are_kept_out_of_restate() {
    let _serial = SHARED_SERVER.lock().await;
    let rig = Rig::shared();
    let (admin, agent) = (&rig.admin, &rig.agent);
    let secret = "sk-harness-restate-test-0123456789";
    // The service holds the key in a variable whose name says so.
    let key = ("PROBE_API_KEY", secret.to_owned());
    let hanging = rig.hanging(0, std::slice::from_ref(&key));
    rig.register().await;
    let (session, file) = rig.session("secret");
    // The key reaches the state (the input) and an effect's result.
    let invocation = agent
        .submit(&session, &json!({"tag": format!("{secret} ")}), None)
        .await
        .unwrap();
    rig.hung().await;
    // What the service journaled so far (the input, entry 0, is the
    // caller's): effect 0's result, without the key.
    let rows = admin
        .query(&format!(
            "SELECT raw FROM sys_journal WHERE id = '{invocation}' AND index > 0"
        ))
        .await
        .unwrap();
    let journal: Vec<u8> = rows
        .iter()
        .filter_map(|r| r["raw"].as_str())
        .flat_map(|hex| {
            (0..hex.len() / 2)
                .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
                .collect::<Vec<_>>()
        })
        .collect();
    let journal = String::from_utf8_lossy(&journal);
    assert!(journal.contains("[redacted] effect 0"), "{journal}");
    assert!(!journal.contains(secret), "{journal}");
    drop(hanging);
    let _service = rig.service(&[key]);
    let reply = agent.outcome(&invocation).await.unwrap();
    let reply = serde_json::to_string(&reply).unwrap();
    assert!(reply.contains("[redacted]"), "{reply}");
    assert!(!reply.contains(secret), "{reply}");
    let kept = RestateSessionReader::new(admin.clone())
        .snapshot(&session)
        .await
        .unwrap()
        .unwrap();
    let kept = serde_json::to_string(&kept).unwrap();
    assert!(!kept.contains(secret), "{kept}");
    // What the effect itself did is the application's: the file has it.
    let written = lines(&file);
    assert_eq!(written.len(), 3);
    assert!(written[0].starts_with(secret), "{written:?}");
}

/// `text` as an SQL string literal.
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_id_is_one_key_whatever_it_holds_and_never_addresses_another() {
    let _serial = SHARED_SERVER.lock().await;
    let rig = Rig::shared();
    let _service = rig.service(&[("PROBE_CLOCK", "1".to_owned())]);
    rig.register().await;
    let run = format!("{}-{}", std::process::id(), rig.port);
    let victim = SessionId::from(format!("alice-{run}"));
    for id in [
        format!("bob/../alice-{run}"),
        format!("../HarnessAgent/alice-{run}"),
        format!("x?y=1#z %41-{run}"),
        format!("é/ü\\{run}"),
        format!("./alice-{run}/."),
    ] {
        let session = SessionId::from(id.as_str());
        let reply = rig
            .agent
            .run(&session, &json!({"tag": "t "}))
            .await
            .unwrap();
        assert!(matches!(reply, Reply::Completed { .. }), "{id}: {reply:?}");
        // Kept under the key as given, and read back by it.
        let rows = rig
            .admin
            .query(&format!(
                "SELECT service_key FROM state WHERE service_name = 'HarnessAgent' \
                 AND key = 'head' AND service_key = {}",
                literal(&id)
            ))
            .await
            .unwrap();
        assert_eq!(rows.len(), 1, "{id}: {rows:?}");
        let kept = rig.agent.session(&session).await.unwrap().unwrap();
        assert_eq!(kept.head.session_id, session);
        // No other session was touched.
        assert!(
            rig.agent.session(&victim).await.unwrap().is_none(),
            "{id} ran on {victim}"
        );
    }
    for id in ["", ".", ".."] {
        let e = rig
            .agent
            .run(&SessionId::from(id), &json!({}))
            .await
            .unwrap_err();
        assert!(matches!(e, RestateError::Input { .. }), "{id:?}: {e:?}");
    }
}

/// Kills the invocations of `service`'s object `key` that have not ended
/// (a handler the old code retried without end).
async fn kill_unfinished(admin: &Admin, service: &str, key: &str) {
    let rows = admin
        .query(&format!(
            "SELECT id FROM sys_invocation WHERE target_service_name = {} \
             AND target_service_key = {} AND status != 'completed'",
            literal(service),
            literal(key)
        ))
        .await
        .unwrap();
    for id in rows.iter().filter_map(|r| r["id"].as_str()) {
        let _ = admin.kill(id).await;
    }
}

/// The state of `key` of `HarnessAgent`, key by key, as bytes.
async fn state_of(admin: &Admin, key: &str) -> BTreeMap<String, Vec<u8>> {
    admin
        .query(&format!(
            "SELECT key, value FROM state WHERE service_name = 'HarnessAgent' \
             AND service_key = {}",
            literal(key)
        ))
        .await
        .unwrap()
        .iter()
        .filter_map(|r| {
            // The bytes in hex.
            let hex = r["value"].as_str()?;
            let bytes = (0..hex.len() / 2)
                .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
                .collect();
            Some((r["key"].as_str()?.to_owned(), bytes))
        })
        .collect()
}

/// Replaces the state of `key` of `HarnessAgent` with `state` through the
/// admin API (as `restate kv edit` does), and waits until it is applied.
async fn set_state(admin_url: &str, admin: &Admin, key: &str, state: BTreeMap<String, Vec<u8>>) {
    let body = json!({ "object_key": key, "new_state": state });
    let answer = reqwest::Client::new()
        .post(format!("{admin_url}/services/HarnessAgent/state"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert!(answer.status().is_success(), "{answer:?}");
    let began = std::time::Instant::now();
    loop {
        let now = state_of(admin, key).await;
        if now == state {
            break;
        }
        assert!(
            began.elapsed() < Duration::from_secs(20),
            "state never set: {now:?} for {state:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_state_does_not_read_fails_at_once_and_holds_no_key() {
    let _serial = SHARED_SERVER.lock().await;
    let admin_url = var("HARNESS_RESTATE_ADMIN");
    let rig = Rig::shared();
    let _service = rig.service(&[("PROBE_CLOCK", "1".to_owned())]);
    rig.register().await;
    // A client that waits 20 s: a handler retried without end is a
    // timeout here, not an answer.
    let client = AgentClient::new(
        Ingress::new(var("HARNESS_RESTATE_INGRESS"), Duration::from_secs(20)).unwrap(),
    );
    // Which key is damaged, how, and whether the shared `session` handler
    // reads it too.
    let cases: [(&str, &[u8], bool); 5] = [
        ("head", br#"{"not": "a run"}"#, true),
        ("head", b"\xff\xfe not JSON", true),
        ("cp/", br#"[{"seq": "first"}]"#, true),
        ("cp/", b"[", true),
        ("vals", b"[1, 2]", false),
    ];
    for (i, (damaged, bytes, read_by_session)) in cases.into_iter().enumerate() {
        let (session, _) = rig.session(&format!("damaged-{i}"));
        let first = client.run(&session, &json!({"tag": "a "})).await.unwrap();
        assert!(matches!(first, Reply::Completed { .. }), "{first:?}");
        let mut state = state_of(&rig.admin, session.as_str()).await;
        let key = if damaged == "cp/" {
            state
                .keys()
                .rfind(|k| k.starts_with("cp/"))
                .unwrap_or_else(|| panic!("no checkpoints in {state:?}"))
                .clone()
        } else {
            damaged.to_owned()
        };
        state.insert(key.clone(), bytes.to_vec());
        set_state(&admin_url, &rig.admin, session.as_str(), state).await;

        let refused = |what: &str, answer: Result<String, RestateError>| match answer {
            Err(RestateError::Status { status, body, .. }) => {
                assert_eq!(status, 500, "{what}: {body}");
                assert!(
                    body.contains(&format!("state key `{key}`"))
                        && body.contains(session.as_str())
                        && body.contains("not part of a session"),
                    "{what}: {body}"
                );
            }
            other => panic!("{what} on a damaged `{key}`: {other:?}"),
        };
        // Twice: the first attempt ended, so the second is not queued
        // behind it.
        let mut runs = Vec::new();
        for _ in 0..2 {
            let began = std::time::Instant::now();
            let answer = client.run(&session, &json!({"tag": "b "})).await;
            runs.push((answer.map(|r| format!("{r:?}")), began.elapsed()));
        }
        let read = client.session(&session).await;
        // Before anything is checked: a handler retried without end would
        // go on holding the key on the shared server, and a damaged
        // session there would fail the other tests' listings of sessions.
        kill_unfinished(&rig.admin, "HarnessAgent", session.as_str()).await;
        set_state(&admin_url, &rig.admin, session.as_str(), BTreeMap::new()).await;
        for (attempt, (answer, took)) in runs.into_iter().enumerate() {
            refused(&format!("run {attempt}"), answer);
            assert!(
                took < Duration::from_secs(10),
                "run {attempt} took {took:?}"
            );
        }
        if read_by_session {
            refused("session", read.map(|s| format!("{s:?}")));
        } else {
            assert!(read.unwrap().is_some());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_call_keeps_the_services_secrets_out_of_its_error() {
    let _serial = SHARED_SERVER.lock().await;
    let rig = Rig::shared();
    let secret = "sk-harness-restate-refused-0123456789";
    let _service = rig.service(&[
        ("PROBE_CLOCK", "1".to_owned()),
        ("PROBE_API_KEY", secret.to_owned()),
    ]);
    rig.register().await;
    let (session, _) = rig.session("refused");
    let done = rig
        .agent
        .run(&session, &json!({"tag": "a "}))
        .await
        .unwrap();
    assert!(matches!(done, Reply::Completed { .. }), "{done:?}");
    let check = |what: &str, answer: Result<Reply, RestateError>, code: u16| match answer {
        Err(RestateError::Status { status, body, .. }) => {
            assert_eq!(status, code, "{what}: {body}");
            assert!(!body.contains(secret), "{what}: {body}");
            assert!(body.contains("[redacted]"), "{what}: {body}");
        }
        other => panic!("{what}: {other:?}"),
    };
    // serde quotes the values and names of an input that is no update.
    for bad in [
        json!({"runs": secret}),
        json!({"parts": [secret]}),
        json!({ secret: 1 }),
    ] {
        let answer = rig.agent.run(&session, &bad).await;
        check(&bad.to_string(), answer, 400);
    }
    // A session error quotes the interrupt id the caller gave.
    let answer = rig
        .agent
        .resume(&session, &harness::InterruptId::from(secret), json!(true))
        .await;
    check("resume", answer, 404);
}
