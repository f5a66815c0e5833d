//! What an agent's calls refuse, and the calls that do not wait, against
//! the real server, with an agent served in this process as a virtual
//! object of its own name: a session id too long to carry (refused before
//! anything is sent), an input that is no JSON object (refused by the
//! handler itself, whoever sends it), an answer and a stop sent without
//! waiting.

use std::sync::Arc;
use std::time::Duration;

use harness::session::SessionPhase;
use harness::{Cx, Harness, HarnessState, SessionId, create_agent};
use harness_restate::{
    Admin, AgentClient, Durable, Ingress, MAX_SESSION_ID_BYTES, QUOTED_BYTES, Reply, RestateError,
    agent_object,
};
use restate_sdk::prelude::Endpoint;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::var;

agent_object!(
    /// The agent of these tests.
    struct Calls = "HarnessTestCalls";
);

const OBJECT: &str = "HarnessTestCalls";

/// Held by each test here: each registers a deployment of `OBJECT` served
/// by its own runtime, and new invocations go to the latest one.
static SERVED: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Desk {
    /// First: what an array read in order would set.
    #[field(reduce = append)]
    log: Vec<String>,
    /// Whether `work` asks for an answer after it.
    ask: bool,
}

/// `work` journals an effect; with `ask`, `ask` then waits for a `bool`.
fn desk(durable: &Durable) -> harness::Agent<Desk> {
    let harness = Harness::<Desk>::builder()
        .step("work")
        .run(|_: Arc<Desk>, cx: Cx<()>| async move {
            let done: String = cx.once("work", async { "worked".to_string() }).await?;
            Ok(DeskUpdate::new().log(vec![done]))
        })
        .route(|s: &Desk| if s.ask { "ask" } else { "done" })
        .on("ask")
        .to("ask")
        .on("done")
        .end()
        .step("ask")
        .run(|_: Arc<Desk>, cx: Cx<()>| async move {
            let ok: bool = cx.interrupt("ok?")?;
            Ok(DeskUpdate::new()
                .log(vec![format!("answered {ok}")])
                .ask(false))
        })
        .end()
        .start("work")
        .store(durable.store())
        .effects(durable.effects())
        .build()
        .unwrap();
    create_agent("calls", &harness)
}

/// The agent served in this runtime and registered; its client.
async fn serve() -> (Admin, AgentClient) {
    let admin = Admin::new(var("HARNESS_RESTATE_ADMIN")).unwrap();
    let ingress = Ingress::new(var("HARNESS_RESTATE_INGRESS"), Duration::from_secs(60)).unwrap();
    let durable = Durable::new();
    let endpoint = Endpoint::builder()
        .bind(Calls(durable.object(desk(&durable)).unwrap()))
        .build();
    let (services, _) = crate::serve_registered(&admin, endpoint).await;
    assert_eq!(services, [OBJECT]);
    (admin, AgentClient::new(ingress).object(OBJECT))
}

/// A session of this test run.
fn session(name: &str) -> SessionId {
    SessionId::from(format!(
        "{name}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ))
}

/// How many invocations the server knows of on `key`.
async fn invocations_on(admin: &Admin, key: &str) -> usize {
    admin
        .query(&format!(
            "SELECT id FROM sys_invocation WHERE target_service_name = '{OBJECT}' \
             AND target_service_key = '{}'",
            key.replace('\'', "''")
        ))
        .await
        .unwrap()
        .len()
}

/// A session id of up to `MAX_SESSION_ID_BYTES` as sent runs, whatever
/// its characters; a longer one is refused by every call with a typed
/// error naming its length and the bound, and nothing reaches the server
/// (an id of 16 000 characters would make an invocation Restate retries
/// without end, the key blocked behind it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_id_too_long_to_carry_is_refused_before_anything_is_sent() {
    let _served = SERVED.lock().await;
    let (admin, agent) = serve().await;
    // At the bound, each after a stamp of this run (ASCII letters, digits
    // and `-`: a byte each as sent): unreserved characters; `é` (two bytes
    // in UTF-8, six as sent); `/` (three as sent).
    let stamp = session("long");
    let room = MAX_SESSION_ID_BYTES - stamp.as_str().len();
    let at_bound = [
        format!("{stamp}{}", "x".repeat(room)),
        format!("{stamp}{}{}", "é".repeat(room / 6), "a".repeat(room % 6)),
        format!("{stamp}{}{}", "/".repeat(room / 3), "a".repeat(room % 3)),
    ];
    for id in &at_bound {
        let id = SessionId::from(id.as_str());
        let ran = agent.run(&id, &json!({})).await.unwrap();
        assert!(
            matches!(&ran, Reply::Completed { state, .. } if state["log"] == json!(["worked"])),
            "{ran:?}"
        );
        let kept = agent.session(&id).await.unwrap().unwrap();
        assert_eq!(kept.head.session_id, id);
    }
    // Past it: one byte more, one `é` more (six bytes), 20 000 characters.
    for (id, bytes) in [
        (format!("{}x", at_bound[0]), MAX_SESSION_ID_BYTES + 1),
        (format!("{}é", at_bound[1]), MAX_SESSION_ID_BYTES + 6),
        (format!("{}/", at_bound[2]), MAX_SESSION_ID_BYTES + 3),
        ("y".repeat(20_000), 20_000),
    ] {
        let chars = id.chars().count();
        let session = SessionId::from(id.as_str());
        let interrupt = harness::InterruptId::from("i");
        let refused = [
            agent.run(&session, &json!({})).await.map(drop),
            agent.submit(&session, &json!({}), None).await.map(drop),
            agent
                .resume(&session, &interrupt, json!(true))
                .await
                .map(drop),
            agent
                .submit_resume(&session, &interrupt, json!(true), None)
                .await
                .map(drop),
            agent.stop(&session).await.map(drop),
            agent.submit_stop(&session, None).await.map(drop),
            agent.session(&session).await.map(drop),
            // The input is not looked at before the id.
            agent.run(&session, &json!([1])).await.map(drop),
        ];
        for e in refused {
            let e = e.unwrap_err();
            let RestateError::SessionIdTooLong {
                url,
                start,
                chars: c,
                bytes: b,
                limit,
            } = &e
            else {
                panic!("{e:?}")
            };
            assert_eq!((*c, *b, *limit), (chars, bytes, MAX_SESSION_ID_BYTES));
            assert!(url.ends_with(&format!("/{OBJECT}")), "{url}");
            assert!(id.starts_with(start.as_str()) && start.chars().count() == 32);
            let shown = e.to_string();
            assert!(
                shown.contains(&format!("{chars} characters, {bytes} bytes as sent"))
                    && shown.contains(&format!("more than the {MAX_SESSION_ID_BYTES} bytes"))
                    && shown.contains("nothing was sent"),
                "{shown}"
            );
            assert!(shown.len() < QUOTED_BYTES, "{} bytes", shown.len());
        }
        assert_eq!(invocations_on(&admin, &id).await, 0, "nothing was sent");
    }
}

/// The bodies no `run` takes, whoever sends them: what the client refuses
/// before sending, the handler refuses too, terminally (400, not retried),
/// with the client's words; nothing runs and the key is free at once.
const NO_OBJECTS: [(&str, &str); 6] = [
    // Read by serde, in order, as the fields `log` (and `ask`).
    ("[[\"set by position\"]]", "an array"),
    ("[[\"set by position\"], true]", "an array"),
    ("[1]", "an array"),
    ("5", "a number"),
    ("\"x\"", "a string"),
    ("null", "null"),
];

/// `body` posted as JSON to `handler` of the session `key`, as curl would:
/// the status and the error's message.
async fn post(handler: &str, key: &SessionId, body: &str) -> (u16, String) {
    let url = format!(
        "{}/{OBJECT}/{key}/{handler}",
        var("HARNESS_RESTATE_INGRESS")
    );
    let response = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_owned())
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    let message = serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|v| v["message"].as_str().map(str::to_owned))
        .unwrap_or(text);
    (status, message)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_that_is_no_json_object_is_refused_by_the_handler_itself() {
    let _served = SERVED.lock().await;
    let (_admin, agent) = serve().await;
    for (body, what) in NO_OBJECTS {
        let key = session("raw-run");
        let (status, message) = post("run", &key, body).await;
        assert_eq!(status, 400, "{body}: {message}");
        assert!(
            message.starts_with(
                "the input of a run is an update of the agent's state, a JSON object of the \
                 fields to change (`{}` for none), not "
            ) && message.contains(&format!("not {what}: ")),
            "{body}: {message}"
        );
        // The client's words, where the client refuses it (it sends `null`
        // as `{}`).
        if body != "null" {
            let input: Value = serde_json::from_str(body).unwrap();
            match agent.run(&key, &input).await {
                Err(RestateError::Input {
                    message: client, ..
                }) => {
                    assert_eq!(client, message, "{body}");
                }
                other => panic!("{body}: {other:?}"),
            }
        }
        // Nothing ran, nothing was saved, and the key is free.
        assert!(agent.session(&key).await.unwrap().is_none(), "{body}");
        let ran = agent.run(&key, &json!({})).await.unwrap();
        assert!(
            matches!(&ran, Reply::Completed { state, .. } if state["log"] == json!(["worked"])),
            "{body}: {ran:?}"
        );
    }

    // `resume` alike: an answer is a JSON object, never fields by position.
    let key = session("raw-resume");
    let asked = agent.run(&key, &json!({"ask": true})).await.unwrap();
    let Reply::Interrupted { interrupt, .. } = &asked else {
        panic!("{asked:?}")
    };
    let positional = json!([interrupt.id, true]).to_string();
    let nested = json!([[interrupt.id], [true]]).to_string();
    for (body, what) in [
        (positional.as_str(), "an array"),
        (nested.as_str(), "an array"),
        ("5", "a number"),
        ("\"x\"", "a string"),
        ("null", "null"),
    ] {
        let (status, message) = post("resume", &key, body).await;
        assert_eq!(status, 400, "{body}: {message}");
        assert!(
            message.starts_with("the input of `resume` is an answer to the interrupt")
                && message.contains(&format!("not {what}: ")),
            "{body}: {message}"
        );
    }
    let (status, message) = post("resume", &key, r#"{"answer": true}"#).await;
    assert_eq!(status, 400, "{message}");
    assert!(message.contains("missing field `interrupt`"), "{message}");
    // The session still waits on its interrupt; the answer then applies.
    let head = agent.session(&key).await.unwrap().unwrap().head;
    assert!(
        matches!(&head.phase, SessionPhase::Interrupted { interrupt: i } if i.id == interrupt.id),
        "{:?}",
        head.phase
    );
    let done = agent
        .resume(&key, &interrupt.id, json!(true))
        .await
        .unwrap();
    assert!(
        matches!(&done, Reply::Completed { state, .. }
            if state["log"] == json!(["worked", "answered true"])),
        "{done:?}"
    );
}

/// An answer and a stop sent without waiting (`submit_resume`,
/// `submit_stop`), picked up with `outcome`: the replies `resume` and
/// `stop` give; a stop with nothing to stop is refused there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_and_a_stop_are_sent_without_waiting_and_picked_up() {
    let _served = SERVED.lock().await;
    let (_admin, agent) = serve().await;
    let key = session("sent");
    let asked = agent.run(&key, &json!({"ask": true})).await.unwrap();
    let Reply::Interrupted { interrupt, .. } = &asked else {
        panic!("{asked:?}")
    };
    let sent = agent
        .submit_resume(&key, &interrupt.id, json!(false), Some("answer-once"))
        .await
        .unwrap();
    let again = agent
        .submit_resume(&key, &interrupt.id, json!(false), Some("answer-once"))
        .await
        .unwrap();
    assert_eq!(sent, again, "the same idempotency key: the same invocation");
    let done = agent.outcome(&sent).await.unwrap();
    assert!(
        matches!(&done, Reply::Completed { state, .. }
            if state["log"] == json!(["worked", "answered false"])),
        "{done:?}"
    );

    let asked = agent.run(&key, &json!({"ask": true})).await.unwrap();
    assert!(matches!(&asked, Reply::Interrupted { .. }), "{asked:?}");
    let sent = agent.submit_stop(&key, None).await.unwrap();
    let stopped = agent.outcome(&sent).await.unwrap();
    assert!(
        matches!(&stopped, Reply::Completed { signal, .. } if signal == "$stopped"),
        "{stopped:?}"
    );
    // Nothing waits now: the stop sent is refused when picked up.
    let sent = agent.submit_stop(&key, None).await.unwrap();
    match agent.outcome(&sent).await {
        Err(RestateError::Status { status, body, .. }) => {
            assert_eq!(status, 409, "{body}");
            assert!(body.contains("completed with `$stopped`"), "{body}");
        }
        other => panic!("{other:?}"),
    }
}
