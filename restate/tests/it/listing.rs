//! What listing sessions costs (`harness sessions list`: the ids, then
//! each session's head), measured against the real server: as the reader
//! read them before (each session's whole state, a query each) and as it
//! reads them now (the heads alone, a batch at a time, by partition key).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::session::{SessionStore, StoredRun};
use harness::{Cx, Harness, HarnessState, SessionId, create_agent};
use harness_restate::{
    Admin, AgentClient, Durable, Ingress, Reply, RestateSessionReader, agent_object,
};
use restate_sdk::prelude::Endpoint;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::var;

agent_object!(
    /// The agent whose sessions are listed.
    struct Listed = "HarnessTestListing";
);

const OBJECT: &str = "HarnessTestListing";

/// The sessions made (once: they stay on the server for the next
/// measurement), each with two runs of a note of its own of
/// `NOTE_BYTES`, kept by reference.
const SESSIONS: usize = 200;
const NOTE_BYTES: usize = 70_000;

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Notes {
    #[field(reduce = append)]
    log: Vec<String>,
    note: String,
}

fn notes(durable: &Durable) -> harness::Agent<Notes> {
    let harness = Harness::<Notes>::builder()
        .step("work")
        .run(|_: Arc<Notes>, cx: Cx<()>| async move {
            let done: String = cx.once("work", async { "noted".to_string() }).await?;
            Ok(NotesUpdate::new().log(vec![done]))
        })
        .end()
        .start("work")
        .store(durable.store())
        .effects(durable.effects())
        .build()
        .unwrap();
    create_agent("notes", &harness)
}

/// `text` as an SQL string literal.
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// What each listed session's head read as, by id: the head, or the
/// error's message.
type Heads = Vec<(SessionId, Result<Option<StoredRun>, String>)>;

/// The listing of `object` as the reader made it before: the ids (no
/// value), then each session's whole state, a query each, naming no
/// partition key; the bytes of values read.
async fn as_before(admin: &Admin, object: &str) -> (Heads, usize) {
    let rows = admin
        .query(&format!(
            "SELECT service_key FROM state WHERE service_name = {} AND key = 'head' \
             ORDER BY service_key",
            literal(object)
        ))
        .await
        .unwrap();
    let mut heads = Vec::new();
    let mut bytes = 0;
    for row in rows {
        let id = SessionId::from(row["service_key"].as_str().unwrap());
        let state = admin
            .query(&format!(
                "SELECT key, value_utf8 FROM state WHERE service_name = {} AND service_key = {}",
                literal(object),
                literal(id.as_str())
            ))
            .await
            .unwrap();
        let mut head = Ok(None);
        for row in &state {
            let text = row["value_utf8"].as_str().unwrap_or_default();
            bytes += text.len();
            if row["key"] == "head" {
                head = serde_json::from_str::<StoredRun>(text)
                    .map(Some)
                    .map_err(|e| e.to_string());
            }
        }
        heads.push((id, head));
    }
    (heads, bytes)
}

/// The listing of `object` through the reader, as `harness sessions list`
/// makes it: the ids, then `load` for each.
async fn as_now(admin: &Admin, object: &str) -> Heads {
    let reader = RestateSessionReader::new(admin.clone()).object(object);
    let mut heads = Vec::new();
    for id in reader.sessions().await.unwrap() {
        let head = reader.load(&id).await.map_err(|e| e.to_string());
        heads.push((id, head));
    }
    heads
}

/// Both listings of `object`, timed; the same heads.
async fn measure(admin: &Admin, object: &str) {
    // Once before the timing: the reader's check that the server has the
    // object, and the server's caches, for both alike.
    as_now(admin, object).await;
    let began = Instant::now();
    let (before, bytes) = as_before(admin, object).await;
    let before_took = began.elapsed();
    let began = Instant::now();
    let now = as_now(admin, object).await;
    let now_took = began.elapsed();
    assert_eq!(before.len(), now.len());
    for ((id, old), (same, new)) in before.iter().zip(&now) {
        assert_eq!(id, same);
        match (old, new) {
            (Ok(old), Ok(new)) => assert_eq!(old, new, "{id}"),
            (Err(_), Err(new)) => assert!(new.contains("is not part of a session"), "{new}"),
            other => panic!("{id}: {other:?}"),
        }
    }
    let ratio = before_took.as_secs_f64() / now_took.as_secs_f64().max(1e-6);
    eprintln!(
        "{object}: {} sessions, {:.1} MB of state: before {before_took:.2?} ({} queries), \
         now {now_took:.2?}: {ratio:.0}x faster",
        before.len(),
        bytes as f64 / 1e6,
        before.len() + 1,
    );
}

/// Makes `SESSIONS` sessions with large state (once), then lists them as
/// the reader did and as it does, and the suite's `HarnessAgent` sessions
/// too, printing the times. A measurement, run on demand:
/// `cargo test -p harness-restate --test it listing -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: makes 200 sessions with large state on the server (once), then times listing them"]
async fn listing_sessions_reads_their_heads_alone() {
    let admin = Admin::new(var("HARNESS_RESTATE_ADMIN")).unwrap();
    let ingress = Ingress::new(var("HARNESS_RESTATE_INGRESS"), Duration::from_secs(120)).unwrap();
    let durable = Durable::new();
    let endpoint = Endpoint::builder()
        .bind(Listed(durable.object(notes(&durable)).unwrap()))
        .build();
    crate::serve_registered(&admin, endpoint).await;
    let agent = AgentClient::new(ingress).object(OBJECT);
    let have: HashSet<SessionId> = RestateSessionReader::new(admin.clone())
        .object(OBJECT)
        .sessions()
        .await
        .unwrap()
        .into_iter()
        .collect();
    let mut making = tokio::task::JoinSet::new();
    let slots = Arc::new(tokio::sync::Semaphore::new(4));
    for i in 0..SESSIONS {
        let id = SessionId::from(format!("listing-{i:03}"));
        if have.contains(&id) {
            continue;
        }
        let (agent, slots) = (agent.clone(), Arc::clone(&slots));
        making.spawn(async move {
            let _slot = slots.acquire().await.unwrap();
            for run in 0..2 {
                let note = format!("{i:03}/{run} ").repeat(NOTE_BYTES / 6);
                let done = agent.run(&id, &json!({ "note": note })).await.unwrap();
                assert!(matches!(done, Reply::Completed { .. }), "{done:?}");
            }
        });
    }
    while let Some(made) = making.join_next().await {
        made.unwrap();
    }
    measure(&admin, OBJECT).await;
    if admin
        .virtual_objects()
        .await
        .unwrap()
        .iter()
        .any(|o| o == "HarnessAgent")
    {
        measure(&admin, "HarnessAgent").await;
    }
}
