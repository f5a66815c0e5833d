//! A run whose invocation is cancelled ([`Admin::cancel`]) while its step
//! makes no effect: the cancellation reaches it at its next journaled
//! operation, the save of its session, and the run ends there, failed
//! with a message saying it was cancelled, its session saved (its input,
//! the steps it completed, its failure); an agent served in this process
//! as a virtual object of its own name, against the real server.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use harness::session::SessionPhase;
use harness::{Cx, Harness, HarnessState, SessionId, StepError, create_agent};
use harness_restate::{Admin, AgentClient, Durable, Ingress, Reply, RestateError, agent_object};
use restate_sdk::prelude::Endpoint;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::var;

agent_object!(
    /// The agent of these tests.
    struct Cancels = "HarnessTestCancels";
);

const OBJECT: &str = "HarnessTestCancels";

/// Held by each test here: each registers a deployment of `OBJECT` served
/// by its own runtime, and new invocations go to the latest one.
static SERVED: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How many steps (or branches) of each session wait at the gate.
static ENTERED: Mutex<BTreeMap<String, usize>> = Mutex::new(BTreeMap::new());
/// The sessions whose gate is open.
static OPEN: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// Waits (making no effect: a model's turn, say) until the test opens the
/// gate of `session`.
async fn gate(session: &str) {
    *ENTERED
        .lock()
        .unwrap()
        .entry(session.to_owned())
        .or_default() += 1;
    while !OPEN.lock().unwrap().contains(session) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Desk {
    #[field(reduce = append)]
    log: Vec<String>,
    /// What the run does: `plain` (one effect), `think` (waits at the gate,
    /// no effect), `ask` (`think`, then waits for an answer), `fail`
    /// (`think`, then fails), `fan` (a branch per part, each an effect then
    /// the gate; joined by a step without effect), `late` (an effect, then
    /// the gate).
    mode: String,
    parts: Vec<u32>,
}

fn desk(durable: &Durable) -> harness::Agent<Desk> {
    let harness = Harness::<Desk>::builder()
        .step("route")
        .route(|s: &Desk| match s.mode.as_str() {
            "plain" => "plain",
            "fan" => "fan",
            "late" => "late",
            _ => "think",
        })
        .on("plain")
        .to("plain")
        .on("late")
        .to("late")
        .on("think")
        .to("think")
        .on("fan")
        .fan_out("part", |s: &Desk| s.parts.clone())
        .join("gather")
        .step("plain")
        .run(|_: Arc<Desk>, cx: Cx<()>| async move {
            let done: String = cx.once("work", async { "worked".to_string() }).await?;
            Ok(DeskUpdate::new().log(vec![done]))
        })
        .end()
        .step("think")
        .run(|s: Arc<Desk>, cx: Cx<()>| async move {
            gate(cx.session_id().as_str()).await;
            if s.mode == "fail" {
                return Err(StepError::msg("the model was unreachable"));
            }
            Ok(DeskUpdate::new().log(vec!["thought".to_string()]))
        })
        .route(|s: &Desk| if s.mode == "ask" { "ask" } else { "done" })
        .on("ask")
        .to("ask")
        .on("done")
        .end()
        .step("ask")
        .run(|_: Arc<Desk>, cx: Cx<()>| async move {
            let ok: bool = cx.interrupt("ok?")?;
            Ok(DeskUpdate::new().log(vec![format!("answered {ok}")]))
        })
        .end()
        .step("part")
        .run_each(|p: u32, _: Arc<Desk>, cx: Cx<()>| async move {
            let done: String = cx
                .once(&format!("part-{p}"), async move { format!("part {p}") })
                .await?;
            gate(cx.session_id().as_str()).await;
            Ok(DeskUpdate::new().log(vec![done]))
        })
        .writes(["log"])
        .next("gather")
        .step("gather")
        .run(|s: Arc<Desk>| async move {
            Ok(DeskUpdate::new().log(vec![format!("gathered {}", s.log.len())]))
        })
        .end()
        .step("late")
        .run(|_: Arc<Desk>, cx: Cx<()>| async move {
            let done: String = cx.once("first", async { "first".to_string() }).await?;
            gate(cx.session_id().as_str()).await;
            Ok(DeskUpdate::new().log(vec![done, "after the last effect".to_string()]))
        })
        .end()
        .start("route")
        .store(durable.store())
        .effects(durable.effects())
        .build()
        .unwrap();
    create_agent("cancels", &harness)
}

/// The agent served in this runtime and registered; its client.
async fn serve() -> (Admin, AgentClient) {
    let admin = Admin::new(var("HARNESS_RESTATE_ADMIN")).unwrap();
    let ingress = Ingress::new(var("HARNESS_RESTATE_INGRESS"), Duration::from_secs(60)).unwrap();
    let durable = Durable::new();
    let endpoint = Endpoint::builder()
        .bind(Cancels(durable.object(desk(&durable)).unwrap()))
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

/// Submits a run of `session` with `input`, cancels its invocation once
/// `waiting` of its steps wait at the gate, opens the gate (for good) once
/// the cancellation has had time to reach the service, and gives the
/// invocation and its outcome.
async fn cancelled(
    admin: &Admin,
    agent: &AgentClient,
    session: &SessionId,
    input: &Value,
    waiting: usize,
) -> (String, Result<Reply, RestateError>) {
    let invocation = agent.submit(session, input, None).await.unwrap();
    let began = std::time::Instant::now();
    while ENTERED
        .lock()
        .unwrap()
        .get(session.as_str())
        .is_none_or(|n| *n < waiting)
    {
        assert!(
            began.elapsed() < Duration::from_secs(60),
            "{session}: the steps never waited"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    admin.cancel(&invocation).await.unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    OPEN.lock().unwrap().insert(session.as_str().to_owned());
    let outcome = tokio::time::timeout(Duration::from_secs(60), agent.outcome(&invocation))
        .await
        .unwrap_or_else(|_| panic!("{session}: the cancelled run never ended"));
    (invocation, outcome)
}

/// The outcome of `invocation` restarted from its journal up to its last
/// state write (Restate's `restart-as-new`): a replay of its journal, which
/// Restate refuses if it makes another call than the journal holds, or
/// writes other bytes.
async fn replayed(admin: &Admin, agent: &AgentClient, invocation: &str) -> Reply {
    let journal = admin
        .query(&format!(
            "SELECT index, entry_type FROM sys_journal WHERE id = '{invocation}' ORDER BY index"
        ))
        .await
        .unwrap();
    let last_write = journal
        .iter()
        .rev()
        .find(|r| r["entry_type"].as_str().unwrap().contains("SetState"))
        .unwrap_or_else(|| panic!("no state write in {journal:?}"))["index"]
        .as_u64()
        .unwrap();
    let url = format!(
        "{}/invocations/{invocation}/restart-as-new?from={last_write}",
        admin.base()
    );
    let text = reqwest::Client::new()
        .patch(&url)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let answer: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{url}: {e}: {text}"));
    let again = answer["new_invocation_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{url}: {answer}"))
        .to_owned();
    let began = std::time::Instant::now();
    loop {
        let info = admin.invocation(&again).await.unwrap().unwrap();
        if info.status == "completed" {
            break;
        }
        assert!(
            info.last_failure.is_none() && began.elapsed() < Duration::from_secs(60),
            "the replay of {invocation}'s journal did not end: {info:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    agent.outcome(&again).await.unwrap()
}

/// The steps of the checkpoints of `session` after `after` (all of them
/// for `None`).
fn steps_after(log: &[harness::session::Checkpoint], after: Option<u64>) -> Vec<String> {
    log.iter()
        .filter(|cp| after.is_none_or(|a| cp.seq > a))
        .map(|cp| cp.step.clone())
        .collect()
}

/// A run cancelled while its step makes no effect learns of it when its
/// session is saved (its first journaled operation after the
/// cancellation): it ends failed, saying it was cancelled and how it had
/// ended, and the session holds it: its input, the steps it completed,
/// the failure. The session then takes a new run, from the state saved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_cancelled_while_it_makes_no_effect_is_saved_failed_as_cancelled() {
    let _served = SERVED.lock().await;
    let (admin, agent) = serve().await;
    // (the run's input, a run saved before it, what the failure adds to
    // "cancelled", the steps the cancelled run saved)
    let cases: [(Value, bool, &str, &[&str]); 5] = [
        // A new session: the cancelled run makes it.
        (
            json!({"mode": "think"}),
            false,
            "completed with `done`",
            &["think"],
        ),
        // After a run that completed: its checkpoints and the cancelled
        // run's both.
        (
            json!({"mode": "think"}),
            true,
            "completed with `done`",
            &["think"],
        ),
        // A run that then waited for an answer: it waits no more.
        (
            json!({"mode": "ask"}),
            true,
            "wait for an answer",
            &["think"],
        ),
        // A run that then failed: both said.
        (
            json!({"mode": "fail"}),
            true,
            "the model was unreachable",
            &[],
        ),
        // A fan-out: each branch's effect journaled in a round, then the
        // gate; the join makes no effect.
        (
            json!({"mode": "fan", "parts": [0, 1, 2]}),
            true,
            "completed with `$end`",
            &["part", "gather"],
        ),
    ];
    for (i, (input, before, how, steps)) in cases.into_iter().enumerate() {
        let session = session(&format!("no-effect-{i}"));
        let saved_before = if before {
            let first = agent
                .run(&session, &json!({"mode": "plain"}))
                .await
                .unwrap();
            assert!(matches!(first, Reply::Completed { .. }), "{first:?}");
            Some(
                agent
                    .session(&session)
                    .await
                    .unwrap()
                    .unwrap()
                    .head
                    .last_seq,
            )
        } else {
            None
        };
        let waiting = input["parts"].as_array().map_or(1, Vec::len);
        let (invocation, outcome) = cancelled(&admin, &agent, &session, &input, waiting).await;
        let Ok(Reply::Failed { error }) = &outcome else {
            panic!("{input}: not a failed run: {outcome:?}")
        };
        assert!(
            error.contains("cancelled") && error.contains(how),
            "{input}: {error}"
        );
        let kept = agent.session(&session).await.unwrap().unwrap();
        assert!(
            matches!(&kept.head.phase, SessionPhase::Failed { error: e } if e == error),
            "{input}: {:?}",
            kept.head.phase
        );
        if let Some(last) = saved_before {
            assert!(
                kept.head.last_seq > last,
                "{input}: the cancelled run saved nothing"
            );
        }
        assert_eq!(
            kept.log.last().map(|cp| cp.seq),
            Some(kept.head.last_seq),
            "{input}"
        );
        let added = steps_after(&kept.log, saved_before);
        assert!(
            added.iter().any(|s| s == "$input" || s == "$start"),
            "{input}: its input is not kept: {added:?}"
        );
        for step in steps {
            assert!(
                added.iter().any(|s| s == step),
                "{input}: step {step} is not kept: {added:?}"
            );
        }
        // A replay of its journal (which holds the cancellation, the save
        // it refused and the save marked cancelled) writes the same bytes
        // and replies the same.
        assert_eq!(
            replayed(&admin, &agent, &invocation).await,
            outcome.unwrap(),
            "{input}"
        );
        assert_eq!(agent.session(&session).await.unwrap().unwrap(), kept);
        // The session takes a new run (no answer is awaited), from the
        // state the cancelled run saved.
        let next = agent
            .run(&session, &json!({"mode": "plain"}))
            .await
            .unwrap();
        let Reply::Completed { state, .. } = &next else {
            panic!("{input}: {next:?}")
        };
        let log: Vec<&str> = state["log"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_str().unwrap())
            .collect();
        if steps.contains(&"think") {
            assert!(log.contains(&"thought"), "{input}: {log:?}");
        }
        if steps.contains(&"gather") {
            assert!(
                log.contains(&"part 2") && log.iter().any(|l| l.starts_with("gathered")),
                "{input}: {log:?}"
            );
        }
        assert_eq!(log.last(), Some(&"worked"), "{input}: {log:?}");
    }
}

/// A cancellation that arrives after a run's last journaled operation, in
/// a run whose save is plain state (one task at a time, an effect made:
/// no journaled operation follows its last effect), does not reach it:
/// the run ends as it would have, and its session is saved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancellation_after_a_loops_last_effect_leaves_the_run_as_it_ended_and_saved() {
    let _served = SERVED.lock().await;
    let (admin, agent) = serve().await;
    for before in [false, true] {
        let session = session(&format!("late-{before}"));
        let last = if before {
            agent
                .run(&session, &json!({"mode": "plain"}))
                .await
                .unwrap();
            Some(
                agent
                    .session(&session)
                    .await
                    .unwrap()
                    .unwrap()
                    .head
                    .last_seq,
            )
        } else {
            None
        };
        let (_, outcome) = cancelled(&admin, &agent, &session, &json!({"mode": "late"}), 1).await;
        let Ok(Reply::Completed { state, .. }) = &outcome else {
            panic!("{outcome:?}")
        };
        assert_eq!(
            state["log"].as_array().unwrap().last().unwrap(),
            "after the last effect"
        );
        let kept = agent.session(&session).await.unwrap().unwrap();
        assert!(
            matches!(&kept.head.phase, SessionPhase::Completed { .. }),
            "{:?}",
            kept.head.phase
        );
        assert!(
            steps_after(&kept.log, last).iter().any(|s| s == "late"),
            "{:?}",
            kept.log
        );
    }
}
