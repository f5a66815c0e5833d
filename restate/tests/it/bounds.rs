//! What an effect, a call and a run's input may carry, against the real
//! server, with agents served in this process as virtual objects of their
//! own names: an effect whose outcome is larger than Restate journals in
//! one entry fails its step once (rather than the effect running again
//! on every retry of an entry Restate refuses); an idempotency key that
//! cannot go in a header is refused before anything is sent; an input
//! whose field has the wrong type is refused naming the field.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use harness::session::SessionPhase;
use harness::{Cx, Harness, HarnessState, SessionId, create_agent};
use harness_restate::{
    Admin, AgentClient, Durable, Ingress, MAX_EFFECT_BYTES, MAX_IDEMPOTENCY_KEY_BYTES, Reply,
    RestateError, agent_object,
};
use restate_sdk::prelude::Endpoint;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::var;

agent_object!(
    /// The agent with the default bound on an effect's entry.
    struct Bounds = "HarnessTestBounds";
);
agent_object!(
    /// The agent whose effects' entries take at most 1 MiB.
    struct SmallBounds = "HarnessTestBoundsSmall";
);

const OBJECT: &str = "HarnessTestBounds";
const SMALL: &str = "HarnessTestBoundsSmall";
const SMALL_BYTES: usize = 1 << 20;

/// Held by each test here: each registers a deployment of the objects
/// served by its own runtime, and new invocations go to the latest one.
static SERVED: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How often each effect ran, by `{session}/{effect}`.
static RAN: Mutex<BTreeMap<String, usize>> = Mutex::new(BTreeMap::new());

fn ran(session: &str, effect: &str) -> usize {
    RAN.lock()
        .unwrap()
        .get(&format!("{session}/{effect}"))
        .copied()
        .unwrap_or(0)
}

fn count(session: &str, effect: &str) {
    *RAN.lock()
        .unwrap()
        .entry(format!("{session}/{effect}"))
        .or_default() += 1;
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Desk {
    /// The lengths of the outcomes the effects returned.
    #[field(reduce = append)]
    got: Vec<u64>,
    /// `big`: one effect returning `kb` KiB; `err`: one effect failing
    /// with a message of `kb` KiB; `fan`: a branch per part, each an
    /// effect returning `kb` KiB (the branches' effects one round).
    mode: String,
    kb: u64,
    parts: Vec<u32>,
}

fn desk(durable: &Durable) -> harness::Agent<Desk> {
    let harness = Harness::<Desk>::builder()
        .step("route")
        .route(|s: &Desk| if s.mode == "fan" { "fan" } else { "big" })
        .on("big")
        .to("big")
        .on("fan")
        .fan_out("part", |s: &Desk| s.parts.clone())
        .join("gather")
        .step("big")
        .run(|s: Arc<Desk>, cx: Cx<()>| async move {
            let session = cx.session_id().to_string();
            let n = usize::try_from(s.kb).unwrap() * 1024;
            let out: String = cx
                .try_once("big", async {
                    count(&session, "big");
                    if s.mode == "err" {
                        Err(harness::StepError::msg("e".repeat(n)))
                    } else {
                        Ok("x".repeat(n))
                    }
                })
                .await?;
            Ok(DeskUpdate::new().got(vec![out.len() as u64]))
        })
        .end()
        .step("part")
        .run_each(|p: u32, s: Arc<Desk>, cx: Cx<()>| async move {
            let session = cx.session_id().to_string();
            let n = usize::try_from(s.kb).unwrap() * 1024;
            let key = format!("part-{p}");
            let out: String = cx
                .once(&key, async {
                    count(&session, &key);
                    "x".repeat(n)
                })
                .await?;
            Ok(DeskUpdate::new().got(vec![out.len() as u64]))
        })
        .writes(["got"])
        .next("gather")
        .step("gather")
        .run(async |_: Arc<Desk>| Ok(DeskUpdate::new()))
        .end()
        .start("route")
        .store(durable.store())
        .effects(durable.effects())
        .build()
        .unwrap();
    create_agent("bounds", &harness)
}

/// Both agents served in this runtime and registered; their clients (the
/// default bound's, the small bound's).
async fn serve() -> (Admin, AgentClient, AgentClient) {
    let admin = Admin::new(var("HARNESS_RESTATE_ADMIN")).unwrap();
    let ingress = Ingress::new(var("HARNESS_RESTATE_INGRESS"), Duration::from_secs(60)).unwrap();
    let durable = Durable::new();
    let small = Durable::new().max_effect_bytes(SMALL_BYTES);
    let endpoint = Endpoint::builder()
        .bind(Bounds(durable.object(desk(&durable)).unwrap()))
        .bind(SmallBounds(small.object(desk(&small)).unwrap()))
        .build();
    let (mut services, _) = crate::serve_registered(&admin, endpoint).await;
    services.sort();
    assert_eq!(services, [OBJECT, SMALL]);
    (
        admin,
        AgentClient::new(ingress.clone()).object(OBJECT),
        AgentClient::new(ingress).object(SMALL),
    )
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

/// The outcome of a run of `session` with `input`, within 60 s; an
/// invocation that has not ended by then is killed (Restate would retry
/// it without end), and the test fails saying where it was.
async fn outcome_of(
    admin: &Admin,
    agent: &AgentClient,
    session: &SessionId,
    input: &Value,
) -> Reply {
    let invocation = agent.submit(session, input, None).await.unwrap();
    match tokio::time::timeout(Duration::from_secs(60), agent.outcome(&invocation)).await {
        Ok(outcome) => outcome.unwrap(),
        Err(_) => {
            let info = admin.invocation(&invocation).await;
            admin.kill(&invocation).await.unwrap();
            panic!("{input}: no outcome within 60 s: {info:?}")
        }
    }
}

/// An effect whose outcome (a value, or a failure's message) is over the
/// bound on an entry (Restate refuses a message of more than 32 MiB, and
/// retries the refused entry without end, its effect running again each
/// time): its step fails once, saying which effect returned how much; the
/// effect ran once, the failure is saved, and the session takes its next
/// call at once. Under the bound, an effect journals as ever. A round of a
/// fan-out's effects, one entry, is bounded as a whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_effect_whose_outcome_outgrows_an_entry_fails_its_step_once() {
    let _served = SERVED.lock().await;
    let (admin, default, small) = serve().await;
    let cases: [(&AgentClient, Value, Option<&[&str]>); 6] = [
        // 34 000 KiB, over Restate's own 32 MiB message: the default bound.
        (
            &default,
            json!({"mode": "big", "kb": 34_000}),
            Some(&["big"]),
        ),
        // Over 1 MiB; a failure's message over it.
        (&small, json!({"mode": "big", "kb": 2_000}), Some(&["big"])),
        (&small, json!({"mode": "err", "kb": 1_500}), Some(&["big"])),
        // A round of three effects of 600 KiB: 1.8 MiB together.
        (
            &small,
            json!({"mode": "fan", "kb": 600, "parts": [0, 1, 2]}),
            Some(&["part-0", "part-1", "part-2"]),
        ),
        // Under the bound: journaled as ever, alone or in a round.
        (&small, json!({"mode": "big", "kb": 900}), None),
        (
            &small,
            json!({"mode": "fan", "kb": 200, "parts": [0, 1, 2]}),
            None,
        ),
    ];
    for (i, (agent, input, failing)) in cases.into_iter().enumerate() {
        let session = session(&format!("big-{i}"));
        let bound = if std::ptr::eq(agent, &default) {
            MAX_EFFECT_BYTES
        } else {
            SMALL_BYTES
        };
        let reply = outcome_of(&admin, agent, &session, &input).await;
        let effects: Vec<String> = match input["parts"].as_array() {
            Some(parts) => parts.iter().map(|p| format!("part-{p}")).collect(),
            None => vec!["big".to_owned()],
        };
        for effect in &effects {
            assert_eq!(ran(session.as_str(), effect), 1, "{input}: {effect}");
        }
        match failing {
            Some(named) => {
                let Reply::Failed { error } = &reply else {
                    panic!("{input}: {reply:?}")
                };
                assert!(
                    error.contains(&format!("more than the {bound} bytes"))
                        && named.iter().any(|n| error.contains(n)),
                    "{input}: {error}"
                );
                let head = head_of(agent, &session).await;
                assert!(
                    matches!(&head.phase, SessionPhase::Failed { .. }),
                    "{input}: {:?}",
                    head.phase
                );
            }
            None => {
                let Reply::Completed { state, .. } = &reply else {
                    panic!("{input}: {reply:?}")
                };
                let kb = input["kb"].as_u64().unwrap();
                assert!(
                    state["got"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .all(|n| n.as_u64() == Some(kb * 1024)),
                    "{input}: {state}"
                );
            }
        }
        // The session's next call runs at once.
        let next = tokio::time::timeout(
            Duration::from_secs(30),
            agent.run(&session, &json!({"mode": "big", "kb": 1})),
        )
        .await
        .unwrap_or_else(|_| panic!("{input}: the session's next call waits"))
        .unwrap();
        assert!(matches!(next, Reply::Completed { .. }), "{input}: {next:?}");
    }
}

async fn head_of(agent: &AgentClient, session: &SessionId) -> harness::session::StoredRun {
    agent.session(session).await.unwrap().unwrap().head
}

/// How many invocations the server knows of on `key` of `object`.
async fn invocations_on(admin: &Admin, object: &str, key: &str) -> usize {
    admin
        .query(&format!(
            "SELECT id FROM sys_invocation WHERE target_service_name = '{object}' \
             AND target_service_key = '{}'",
            key.replace('\'', "''")
        ))
        .await
        .unwrap()
        .len()
}

/// An idempotency key goes in a header: one that is not visible ASCII, is
/// empty or is longer than the bound is refused by every call that takes
/// one, naming it, and nothing is sent (a line break failed in the HTTP
/// client with "builder error"; an `é`, sent, was refused by the server
/// 400, saying nothing of the key).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotency_key_that_cannot_go_in_a_header_is_refused_naming_it() {
    let _served = SERVED.lock().await;
    let (admin, agent, _) = serve().await;
    let ingress = Ingress::new(var("HARNESS_RESTATE_INGRESS"), Duration::from_secs(60)).unwrap();
    let session = session("idem");
    let long = "k".repeat(MAX_IDEMPOTENCY_KEY_BYTES + 1);
    for (key, why) in [
        ("a\nb", "'\\n'"),
        ("é", "'é'"),
        ("", "empty"),
        (" padded", "' '"),
        ("tab\tkey", "'\\t'"),
        ("nul\0", "'\\0'"),
        (long.as_str(), "bytes"),
    ] {
        let interrupt = harness::InterruptId::from("i");
        for e in [
            agent
                .submit(&session, &json!({}), Some(key))
                .await
                .unwrap_err(),
            agent
                .submit_resume(&session, &interrupt, json!(true), Some(key))
                .await
                .unwrap_err(),
            agent.submit_stop(&session, Some(key)).await.unwrap_err(),
            ingress
                .send(OBJECT, Some(session.as_str()), "run", &json!({}), Some(key))
                .await
                .unwrap_err(),
        ] {
            let RestateError::Input { message, .. } = &e else {
                panic!("{key:?}: {e:?}")
            };
            let shown: String = format!("{key:?}").chars().take(40).collect();
            assert!(
                message.contains("idempotency key")
                    && message.contains(&shown)
                    && message.contains(why)
                    && message.contains("nothing was sent"),
                "{key:?}: {message}"
            );
            assert!(e.to_string().len() < 2 * harness_restate::QUOTED_BYTES);
        }
    }
    assert_eq!(invocations_on(&admin, OBJECT, session.as_str()).await, 0);
    // Visible ASCII up to the bound is sent, and makes a repeated submit
    // the same invocation.
    for key in [
        format!("order-17_retry.2:{}", session.as_str()),
        format!(
            "{}{}",
            session.as_str(),
            "~".repeat(MAX_IDEMPOTENCY_KEY_BYTES - session.as_str().len())
        ),
    ] {
        let once = agent
            .submit(&session, &json!({}), Some(&key))
            .await
            .unwrap();
        let again = agent
            .submit(&session, &json!({}), Some(&key))
            .await
            .unwrap();
        assert_eq!(once, again, "{key}");
        assert!(matches!(
            agent.outcome(&once).await.unwrap(),
            Reply::Completed { .. }
        ));
    }
}

/// A run's input whose field does not read as the update's field is
/// refused (400, terminal) naming the field, nested ones by their path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_whose_field_has_the_wrong_type_is_refused_naming_it() {
    let _served = SERVED.lock().await;
    let (_, agent, _) = serve().await;
    let session = session("typed");
    for (input, path) in [
        (json!({"kb": "x"}), "kb"),
        (json!({"mode": 3}), "mode"),
        (json!({"parts": [1, "x"]}), "parts[1]"),
        (json!({"got": [1, -2], "kb": 1}), "got[1]"),
        (json!({"mode": "big", "kb": 1.5}), "kb"),
    ] {
        match agent.run(&session, &input).await {
            Err(RestateError::Status { status, body, .. }) => {
                assert_eq!(status, 400, "{input}: {body}");
                assert!(
                    body.contains(&format!("field `{path}`")) && body.contains("invalid"),
                    "{input}: {body}"
                );
            }
            other => panic!("{input}: {other:?}"),
        }
    }
    assert!(agent.session(&session).await.unwrap().is_none());
}
