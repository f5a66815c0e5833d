//! Against the real Restate server (`scripts/restate`, started by
//! `./scripts/test`): what harness on Restate will rely on, checked with a
//! bare virtual object written with the official SDK (`restate-probe`).

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod agents;
mod bounds;
mod calls;
mod cancels;
mod divergence;
mod listing;
mod named;
mod reads;

use harness_restate::{Admin, Ingress, RestateError};
use serde_json::json;

/// Serves `endpoint` in this runtime on a free loopback port and registers
/// it with the admin API (with force: the tests register their objects
/// again); the services it offers, and its port.
async fn serve_registered(
    admin: &Admin,
    endpoint: restate_sdk::prelude::Endpoint,
) -> (Vec<String>, u16) {
    let listener = harness_restate::nodelay_listener("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(restate_sdk::prelude::HttpServer::new(endpoint).serve(listener));
    let services = admin
        .register(&format!("http://127.0.0.1:{port}"), true)
        .await
        .unwrap();
    (services, port)
}

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: start the server with `eval \"$(scripts/restate)\"`, \
             or run the whole suite with ./scripts/test"
        )
    })
}

/// A service binary on `port` (files in `dir`), killed with SIGKILL when
/// dropped.
struct Service(Child);

impl Service {
    /// `restate-probe`, hanging after effect `hang_after` if given.
    fn start(dir: &Path, port: u16, hang_after: Option<u32>) -> Service {
        let env: Vec<_> = hang_after
            .map(|i| ("PROBE_HANG_AFTER", i.to_string()))
            .into_iter()
            .collect();
        Self::spawn(env!("CARGO_BIN_EXE_restate-probe"), dir, port, &env)
    }

    /// `bin` with `env`, once it says it listens.
    fn spawn(bin: &str, dir: &Path, port: u16, env: &[(&str, String)]) -> Service {
        let mut command = Command::new(bin);
        command
            .arg(format!("127.0.0.1:{port}"))
            .env("PROBE_DIR", dir)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdout(Stdio::piped());
        let mut child = command.spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.starts_with("listening"), "{line}");
        Service(child)
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A port free now and not handed out before in this process: the tests
/// run side by side, and the system can give a port just released (by an
/// earlier call whose service has not bound it yet) again.
fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

fn lines(file: &Path) -> Vec<String> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn wait_for_lines(file: &Path, n: usize) {
    let began = Instant::now();
    while lines(file).len() < n {
        assert!(
            began.elapsed() < Duration::from_secs(60),
            "{} never had {n} lines: {:?}",
            file.display(),
            lines(file)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn effects_run_exactly_once_across_a_sigkill_and_calls_on_one_key_run_in_turn() {
    let admin = Admin::new(var("HARNESS_RESTATE_ADMIN")).unwrap();
    let ingress = Ingress::new(var("HARNESS_RESTATE_INGRESS"), Duration::from_secs(60)).unwrap();
    assert!(admin.healthy().await);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let run = format!("{}-{}", std::process::id(), port);

    // A service that hangs after its first effect, killed there.
    let first = Service::start(dir.path(), port, Some(0));
    let uri = format!("http://127.0.0.1:{port}");
    let services = admin.register(&uri, true).await.unwrap();
    assert!(services.contains(&"Probe".to_owned()), "{services:?}");
    let key = format!("killed-{run}");
    let file = dir.path().join(format!("{key}.log"));
    let id = ingress
        .send("Probe", Some(&key), "run", &json!({"steps": 3}), None)
        .await
        .unwrap();
    // Killed once effect 0 is journaled: the line in the file is written
    // while it runs, before Restate has it.
    let hung = dir.path().join(format!("{key}.hung"));
    while !hung.exists() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(lines(&file).len(), 1);
    let killed = first.pid();
    drop(first); // SIGKILL, mid-invocation
    // The same endpoint comes back; Restate retries the invocation and
    // replays its journal: effect 0 is not run again.
    let second = Service::start(dir.path(), port, None);
    let answer = ingress.attach(&id).await.unwrap();
    let effects: Vec<&str> = answer["effects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    let restarted = second.pid();
    assert_eq!(
        effects,
        [
            format!("effect 0 by {killed}"),
            format!("effect 1 by {restarted}"),
            format!("effect 2 by {restarted}")
        ]
    );
    assert_eq!(lines(&file), effects, "each effect ran once");

    // Two calls on one key: the second waits for the first.
    let key = format!("queued-{run}");
    let file = dir.path().join(format!("{key}.log"));
    let a = ingress
        .send(
            "Probe",
            Some(&key),
            "run",
            &json!({"steps": 3, "tag": "a ", "pause_ms": 50}),
            None,
        )
        .await
        .unwrap();
    let b = ingress
        .send(
            "Probe",
            Some(&key),
            "run",
            &json!({"steps": 3, "tag": "b ", "pause_ms": 50}),
            None,
        )
        .await
        .unwrap();
    ingress.attach(&a).await.unwrap();
    ingress.attach(&b).await.unwrap();
    let tags: String = lines(&file).iter().map(|l| &l[..1]).collect();
    assert!(
        tags == "aaabbb" || tags == "bbbaaa",
        "one after the other: {:?}",
        lines(&file)
    );
    // An idempotency key makes a repeated send the same invocation.
    let idem = format!("idem-{run}");
    let once = ingress
        .send(
            "Probe",
            Some(&key),
            "run",
            &json!({"steps": 1}),
            Some(&idem),
        )
        .await
        .unwrap();
    let again = ingress
        .send(
            "Probe",
            Some(&key),
            "run",
            &json!({"steps": 1}),
            Some(&idem),
        )
        .await
        .unwrap();
    assert_eq!(once, again);
    drop(second);
}

#[tokio::test]
async fn what_the_server_refuses_is_a_typed_error_naming_what() {
    let admin = Admin::new(var("HARNESS_RESTATE_ADMIN")).unwrap();
    let ingress = Ingress::new(var("HARNESS_RESTATE_INGRESS"), Duration::from_secs(10)).unwrap();
    // No such service; nothing listening at a deployment's URI.
    match ingress.call("NoSuchService", None, "run", &json!({})).await {
        Err(RestateError::Status { status, url, .. }) => {
            assert_eq!(status, 404);
            assert!(url.contains("NoSuchService"), "{url}");
        }
        other => panic!("{other:?}"),
    }
    // Port 1 (tcpmux, privileged): nothing listens there. A port found
    // free could be taken meanwhile by a service another test starts.
    let nowhere = "http://127.0.0.1:1";
    match admin.register(nowhere, false).await {
        Err(RestateError::Status { status, body, .. }) => {
            assert!(status >= 400, "{status}: {body}");
        }
        other => panic!("{other:?}"),
    }
    // A server that is not there.
    let gone = Admin::new(nowhere).unwrap();
    assert!(!gone.healthy().await);
    assert!(matches!(
        gone.register("http://x", false).await,
        Err(RestateError::Transport { .. })
    ));
}

#[tokio::test]
async fn an_invocation_id_the_server_does_not_know_is_none_and_a_malformed_one_is_refused() {
    let admin = Admin::new(var("HARNESS_RESTATE_ADMIN")).unwrap();
    let ingress = Ingress::new(var("HARNESS_RESTATE_INGRESS"), Duration::from_secs(10)).unwrap();
    // Well-formed (`inv_1`, 33 base62 digits), and no invocation's.
    for unknown in [
        "inv_1000000000000000000000000000000000",
        "inv_10jbAz9k9FrW2zeIOlzyPEh5SbPGq9ky7x",
    ] {
        assert_eq!(admin.invocation(unknown).await.unwrap(), None, "{unknown}");
        for e in [
            ingress.attach(unknown).await.unwrap_err(),
            admin.cancel(unknown).await.unwrap_err(),
        ] {
            assert!(
                matches!(e, RestateError::Status { status: 404, .. }),
                "{unknown}: {e:?}"
            );
        }
    }
    // What the server answered 500 or 400 to: refused here, nothing sent.
    for malformed in [
        "inv_nope",
        "inv_1234",
        "inv_doesnotexist123",
        "inv_1zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz",
        "inv_20jbAz9k9FrW2zeIOlzyPEh5SbPGq9ky7n",
        "inv_10jbAz9k9FrW2zeIOlzyPEh5SbPGq9ky7",
    ] {
        for e in [
            admin.invocation(malformed).await.unwrap_err(),
            admin.cancel(malformed).await.unwrap_err(),
            ingress.attach(malformed).await.unwrap_err(),
        ] {
            assert!(
                matches!(e, RestateError::Input { .. }),
                "{malformed}: {e:?}"
            );
            assert!(e.to_string().contains("is not an invocation id"), "{e}");
        }
    }
    // The ids the server writes pass the check.
    let rows = admin
        .query("SELECT id FROM sys_invocation LIMIT 20")
        .await
        .unwrap();
    for row in rows {
        let id = row["id"].as_str().unwrap();
        assert!(admin.invocation(id).await.is_ok(), "{id}");
    }
}
