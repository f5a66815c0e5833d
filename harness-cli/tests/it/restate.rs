//! `harness sessions --store restate://…`: the real binary reading the
//! sessions of an agent served on the real Restate server (started by
//! `scripts/restate`), one completed and one paused on an interrupt,
//! through the server's admin API.

use std::sync::Arc;
use std::time::Duration;

use harness::{Cx, Harness, HarnessState, SessionId, StepResult, create_agent};
use harness_restate::{Admin, AgentClient, Durable, Ingress, Reply};
use restate_sdk::prelude::{Endpoint, HttpServer};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::sessions::{fails, field, runtime, sessions};

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Ticket {
    #[field(reduce = append)]
    notes: Vec<String>,
}

async fn triage(_: Arc<Ticket>, cx: Cx<()>) -> StepResult<TicketUpdate> {
    let note: String = cx.once("triage", async { "triaged".to_owned() }).await?;
    Ok(TicketUpdate::new().notes(vec![note]))
}

async fn ask(_: Arc<Ticket>, cx: Cx<()>) -> StepResult<TicketUpdate> {
    let close: bool = cx.interrupt(json!({"question": "close the ticket?"}))?;
    Ok(TicketUpdate::new().notes(vec![format!("close: {close}")]))
}

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run the tests with ./scripts/test (scripts/restate starts the server)")
    })
}

/// `http://host:port` → `restate://host:port`.
fn restate_url(admin: &str) -> String {
    format!("restate://{}", admin.trim_start_matches("http://"))
}

#[test]
fn lists_shows_and_histories_the_sessions_of_an_agent_served_on_restate() {
    let admin_url = var("HARNESS_RESTATE_ADMIN");
    let ingress_url = var("HARNESS_RESTATE_INGRESS");
    let rt = runtime();
    let run = format!("{}-{}", std::process::id(), line!());
    let (paused, interrupt, completed) = rt.block_on(async {
        let durable = Durable::new();
        let harness = Harness::<Ticket>::builder()
            .step("triage")
            .run(triage)
            .next("ask")
            .step("ask")
            .run(ask)
            .route(|_: &Ticket| "done")
            .on("done")
            .end()
            .start("triage")
            .store(durable.store())
            .effects(durable.effects())
            .build()
            .unwrap();
        let object = durable.object(create_agent("tickets", &harness)).unwrap();
        let listener = harness_restate::nodelay_listener("127.0.0.1:0".parse().unwrap()).unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(HttpServer::new(Endpoint::builder().bind(object).build()).serve(listener));
        let admin = Admin::new(admin_url.clone()).unwrap();
        admin
            .register(&format!("http://127.0.0.1:{port}"), true)
            .await
            .unwrap();
        let client = AgentClient::new(Ingress::new(ingress_url, Duration::from_secs(60)).unwrap());
        let opened = json!({"notes": ["opened"]});
        let paused = SessionId::from(format!("cli-paused-{run}"));
        let Reply::Interrupted { interrupt, .. } = client.run(&paused, &opened).await.unwrap()
        else {
            panic!("the run should ask")
        };
        let completed = SessionId::from(format!("cli-completed-{run}"));
        let Reply::Interrupted {
            interrupt: asked, ..
        } = client.run(&completed, &opened).await.unwrap()
        else {
            panic!("the run should ask")
        };
        let done = client
            .resume(&completed, &asked.id, json!(true))
            .await
            .unwrap();
        assert!(matches!(done, Reply::Completed { .. }), "{done:?}");
        (paused, interrupt.id, completed)
    });
    let store = restate_url(&admin_url);

    let list = sessions(&store, &["list"]);
    let line = |id: &SessionId| {
        list.lines()
            .find(|l| l.starts_with(id.as_str()))
            .unwrap_or_else(|| panic!("{id} not listed: {list}"))
            .to_owned()
    };
    let listed = line(&paused);
    assert!(listed.contains("agent tickets"), "{listed}");
    assert!(listed.contains("interrupted at `ask`"), "{listed}");
    assert!(listed.contains(interrupt.as_str()), "{listed}");
    let listed = line(&completed);
    assert!(listed.contains("completed with `done`"), "{listed}");

    let show = sessions(&store, &["show", paused.as_str()]);
    assert_eq!(field(&show, "session"), paused.as_str());
    assert_eq!(
        field(&show, "phase"),
        format!("interrupted at `ask` ({interrupt})")
    );
    let asks: serde_json::Value = serde_json::from_str(field(&show, "asks")).unwrap();
    assert_eq!(asks, json!({"question": "close the ticket?"}));
    assert!(
        show.contains("\"triaged\""),
        "the journaled effect's note: {show}"
    );

    let history = sessions(&store, &["history", completed.as_str()]);
    let steps: Vec<&str> = history
        .lines()
        .skip(2)
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect();
    assert!(
        steps.ends_with(&["triage", "ask"]),
        "{steps:?} in {history}"
    );

    // The object named: the same sessions; an object the server has not
    // registered: refused, naming those it has (not an empty store).
    let named = sessions(&format!("{store}/HarnessAgent"), &["list"]);
    assert!(named.contains(paused.as_str()), "{named}");
    let err = fails(
        &[
            "sessions",
            "list",
            "--store",
            &format!("{store}/HarnessNoSuchObject"),
        ],
        1,
    );
    assert!(
        err.contains("no virtual object `HarnessNoSuchObject` is registered"),
        "{err}"
    );
    assert!(err.contains("`HarnessAgent`"), "{err}");

    // A session the object does not hold.
    let err = fails(
        &["sessions", "show", "cli-no-such-session", "--store", &store],
        1,
    );
    assert!(err.contains("cli-no-such-session"), "{err}");
}

#[test]
fn a_restate_url_that_does_not_reach_an_admin_api_or_names_no_object_is_refused_naming_it() {
    let admin_url = var("HARNESS_RESTATE_ADMIN");
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let tls_to_plain = format!(
        "restate+https://{}",
        admin_url.trim_start_matches("http://")
    );
    for (store, named) in [
        (format!("restate://127.0.0.1:{closed}"), None),
        (
            format!("restate://ops:hunter2@127.0.0.1:{closed}"),
            Some(format!("restate://ops@127.0.0.1:{closed}")),
        ),
        (tls_to_plain.clone(), None),
        ("restate://".to_owned(), None),
        (format!("{}/bad'name", restate_url(&admin_url)), None),
        (format!("{}/a b", restate_url(&admin_url)), None),
    ] {
        let err = fails(&["sessions", "list", "--store", &store], 1);
        let named = named.unwrap_or_else(|| store.clone());
        assert!(err.contains(&named), "{store}: {err}");
        assert!(!err.contains("hunter2"), "the password is not shown: {err}");
    }
}

/// The services list of [`FakeAdmin`]: two virtual objects and a service.
const SERVICES: &str = r#"{"services": [
    {"name": "HarnessAgent", "ty": "VirtualObject"},
    {"name": "Orders", "ty": "VirtualObject"},
    {"name": "Greeter", "ty": "Service"}]}"#;

/// A fake Restate admin API on 127.0.0.1: `/health` answers 200,
/// `/services` [`SERVICES`], a query what `query` gives for its SQL (status
/// and body); it records the `authorization` header of every request.
struct FakeAdmin {
    port: u16,
    authorizations: Arc<std::sync::Mutex<Vec<Option<String>>>>,
}

impl FakeAdmin {
    fn start(query: fn(&str) -> (u16, String)) -> FakeAdmin {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let authorizations = Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = Arc::clone(&authorizations);
        std::thread::spawn(move || {
            for mut stream in listener.incoming().flatten() {
                let mut head = Vec::new();
                let mut byte = [0_u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if stream.read(&mut byte).unwrap_or(0) == 0 {
                        break;
                    }
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let header = |name: &str| {
                    head.lines()
                        .filter_map(|l| l.split_once(':'))
                        .find(|(n, _)| n.trim().eq_ignore_ascii_case(name))
                        .map(|(_, v)| v.trim().to_owned())
                };
                let length = header("content-length")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                let mut body = vec![0; length];
                let _ = stream.read_exact(&mut body);
                record.lock().unwrap().push(header("authorization"));
                let (status, answer) = if head.starts_with("GET /health") {
                    (200, "ok".to_owned())
                } else if head.starts_with("GET /services") {
                    (200, SERVICES.to_owned())
                } else {
                    let sql = serde_json::from_slice::<serde_json::Value>(&body)
                        .ok()
                        .and_then(|b| b["query"].as_str().map(str::to_owned))
                        .unwrap_or_default();
                    query(&sql)
                };
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: \
                     {}\r\nconnection: close\r\n\r\n{answer}",
                    answer.len()
                );
            }
        });
        FakeAdmin {
            port,
            authorizations,
        }
    }

    /// `restate://USERINFO@127.0.0.1:PORT`.
    fn url(&self, userinfo: &str) -> String {
        format!("restate://{userinfo}@127.0.0.1:{}", self.port)
    }
}

/// Userinfos, the basic auth each makes (base64), and what of each must
/// never be shown.
const USERINFOS: [(&str, &str, &[&str]); 3] = [
    ("ops:hunter2", "b3BzOmh1bnRlcjI=", &["hunter2"]),
    ("ops:hun/ter2", "b3BzOmh1bi90ZXIy", &["hun/ter2", "ter2"]),
    (
        "ops:hun%2Fter2",
        "b3BzOmh1bi90ZXIy",
        &["hun%2Fter2", "hun/ter2"],
    ),
];

#[test]
fn a_password_in_a_restate_url_is_never_shown_when_the_admin_api_answers_with_an_error() {
    let refusing = FakeAdmin::start(|_| (401, "denied".to_owned()));
    let not_json = FakeAdmin::start(|_| (200, "not json".to_owned()));
    let no_rows = FakeAdmin::start(|_| (200, "{\"x\": 1}".to_owned()));
    for (userinfo, basic, hidden) in USERINFOS {
        for fake in [&refusing, &not_json, &no_rows] {
            let store = fake.url(userinfo);
            for command in [&["list"][..], &["show", "s1"], &["history", "s1"]] {
                let mut args = vec!["sessions"];
                args.extend_from_slice(command);
                args.extend_from_slice(&["--store", &store]);
                let err = fails(&args, 1);
                for secret in hidden {
                    assert!(!err.contains(secret), "{store}: {err}");
                }
                let shown = format!("restate://ops@127.0.0.1:{}", fake.port);
                assert!(err.contains(&shown), "{store}: {err}");
            }
            // The credentials still reach the server.
            for sent in fake.authorizations.lock().unwrap().drain(..) {
                assert_eq!(sent, Some(format!("Basic {basic}")), "{store}");
            }
        }
    }
    // Nothing listening, and a password with a `/` (never read as the
    // object's name, nor quoted as one).
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    for store in [
        format!("restate://ops:hun/ter2@127.0.0.1:{closed}"),
        format!("restate://ops:hun/ter2@127.0.0.1:{closed}/Orders"),
        format!("restate://ops:hun/ter2@127.0.0.1:{closed}/bad'name"),
    ] {
        let err = fails(&["sessions", "list", "--store", &store], 1);
        assert!(!err.contains("ter2"), "{store}: {err}");
        assert!(err.contains("restate://ops@127.0.0.1"), "{store}: {err}");
    }
}

#[test]
fn the_studio_on_a_restate_url_never_shows_its_password() {
    let refusing = FakeAdmin::start(|_| (401, "denied".to_owned()));
    let serving = FakeAdmin::start(|sql| {
        let rows = if sql.contains("key = 'head'") {
            r#"[{"service_key": "s1"}]"#
        } else {
            "[]"
        };
        (200, format!("{{\"rows\": {rows}}}"))
    });
    for (userinfo, _, hidden) in USERINFOS {
        for fake in [&refusing, &serving] {
            let store = fake.url(userinfo);
            let studio = super::studio::Studio::start(std::path::Path::new(&store));
            let shown = format!("restate://ops@127.0.0.1:{}", fake.port);
            assert!(
                studio
                    .printed
                    .contains(&format!("harness studio: {shown} (read-only)")),
                "{}",
                studio.printed
            );
            let mut seen = vec![studio.printed.clone()];
            for path in [
                "/api/sessions",
                "/api/sessions/s1",
                "/api/sessions/s1/timeline",
                "/api/info",
            ] {
                let (status, body) = studio.get_any(path);
                seen.push(format!("{path}: {status} {body}"));
            }
            for text in &seen {
                for secret in hidden {
                    assert!(!text.contains(secret), "{store}: {text}");
                }
            }
            if std::ptr::eq(fake, &refusing) {
                assert!(seen[1].contains("401"), "the error is shown: {seen:?}");
            }
        }
    }
}

#[test]
fn a_restate_url_naming_an_object_the_server_has_not_registered_is_refused_naming_those_it_has() {
    let fake = FakeAdmin::start(|_| (200, r#"{"rows": []}"#.to_owned()));
    let base = format!("restate://127.0.0.1:{}", fake.port);
    for object in ["NoSuchObj", "harnessagent", "Order", "Greeter"] {
        let store = format!("{base}/{object}");
        let err = fails(&["sessions", "list", "--store", &store], 1);
        assert!(err.contains(&store), "{err}");
        assert!(
            err.contains(&format!("no virtual object `{object}` is registered")),
            "{err}"
        );
        assert!(
            err.contains("its virtual objects: `HarnessAgent`, `Orders`"),
            "{err}"
        );
    }
    // The objects it has: read (no sessions).
    for store in [
        base.clone(),
        format!("{base}/Orders"),
        format!("{base}/HarnessAgent/"),
    ] {
        let list = sessions(&store, &["list"]);
        assert!(list.contains("no sessions"), "{store}: {list}");
    }
}

#[test]
fn a_restate_url_with_no_host_or_a_bad_port_is_refused_saying_so_and_no_port_is_9070() {
    for (store, says) in [
        ("restate://", "has no host"),
        ("restate+https://", "has no host"),
        ("restate:///HarnessAgent", "has no host"),
        ("restate://ops:hunter2@", "has no host"),
        ("restate://:9070", "has no host"),
        ("restate://127.0.0.1:abc", "the port `abc` is not a number"),
        (
            "restate://127.0.0.1:99999",
            "the port `99999` is not a number",
        ),
        ("restate://127.0.0.1:", "no port follows"),
        ("restate://[::1", "no closing `]`"),
        ("restate://127.0.0.1:9070?x=1", "no query or fragment"),
    ] {
        let err = fails(&["sessions", "list", "--store", store], 1);
        assert!(err.contains("not a Restate URL"), "{store}: {err}");
        assert!(err.contains(says), "{store}: {err}");
        assert!(!err.contains("hunter2"), "{store}: {err}");
    }
    // No port: the admin API's default, 9070 (nothing listens there here).
    for (store, asked) in [
        ("restate://127.0.0.1", "http://127.0.0.1:9070"),
        ("restate://127.0.0.1/Orders", "http://127.0.0.1:9070"),
        ("restate+https://127.0.0.1", "https://127.0.0.1:9070"),
    ] {
        let err = fails(&["sessions", "list", "--store", store], 1);
        assert!(
            err.contains(&format!("no Restate admin API answers at {asked}")),
            "{store}: {err}"
        );
    }
}

#[test]
fn an_at_in_a_restate_urls_path_never_sends_the_requests_to_another_host() {
    let named = FakeAdmin::start(|_| (200, r#"{"rows": []}"#.to_owned()));
    let other = FakeAdmin::start(|_| (200, r#"{"rows": []}"#.to_owned()));
    for store in [
        format!(
            "restate://127.0.0.1:{}/Orders@127.0.0.1:{}",
            named.port, other.port
        ),
        format!(
            "restate://127.0.0.1:{}/x@127.0.0.1:{}/Orders",
            named.port, other.port
        ),
        format!(
            "restate://ops:pw@127.0.0.1:{}/Orders@127.0.0.1:{}",
            named.port, other.port
        ),
    ] {
        let err = fails(&["sessions", "list", "--store", &store], 1);
        assert!(err.contains("%40"), "{store}: {err}");
    }
    assert!(named.authorizations.lock().unwrap().is_empty());
    assert!(other.authorizations.lock().unwrap().is_empty());
}
