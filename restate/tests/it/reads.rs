//! The object's shared `session` handler read while runs write the
//! session, against the real server, with an agent served in this process
//! as a virtual object of its own name: every read is one state of the
//! session, its head and its log agreeing.

use std::sync::Arc;
use std::time::Duration;

use harness::{Cx, Harness, HarnessState, SessionId, create_agent};
use harness_restate::{Admin, AgentClient, Durable, Ingress, Snapshot, agent_object};
use restate_sdk::prelude::Endpoint;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::var;

agent_object!(
    /// The agent of these tests.
    struct Reads = "HarnessTestReads";
);

const OBJECT: &str = "HarnessTestReads";

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Desk {
    #[field(reduce = append)]
    log: Vec<String>,
    /// Overwritten by each run: the session's updates outgrow its state,
    /// so it takes snapshots and drops the superseded ones; from 64 KiB
    /// it is kept by reference, and cleared when no checkpoint holds it.
    note: String,
    /// The size of the note a run writes, in bytes.
    bytes: u64,
}

fn desk(durable: &Durable) -> harness::Agent<Desk> {
    let harness = Harness::<Desk>::builder()
        .step("write")
        .run(|s: Arc<Desk>, cx: Cx<()>| async move {
            let done: String = cx.once("w", async { "wrote".to_string() }).await?;
            let n = usize::try_from(s.bytes).unwrap();
            Ok(DeskUpdate::new()
                .log(vec![done])
                .note(format!("{n}:{}", "y".repeat(n))))
        })
        .end()
        .start("write")
        .store(durable.store())
        .effects(durable.effects())
        .build()
        .unwrap();
    create_agent("reads", &harness)
}

/// What is wrong with `read`, if its head and log disagree: the log must
/// end at the head's `last_seq` and hold every checkpoint from the head's
/// latest snapshot on.
fn torn(read: &Snapshot) -> Option<String> {
    let head = &read.head;
    let seqs: Vec<u64> = read.log.iter().map(|cp| cp.seq).collect();
    let from_snapshot: Vec<u64> = seqs
        .iter()
        .copied()
        .filter(|s| *s >= head.snapshot_seq)
        .collect();
    let whole = from_snapshot
        .iter()
        .copied()
        .eq(head.snapshot_seq..=head.last_seq);
    (!whole).then(|| {
        format!(
            "head version {} last_seq {} snapshot_seq {}, log seqs {seqs:?}",
            head.version, head.last_seq, head.snapshot_seq
        )
    })
}

/// Reads taken while 50 runs write the session (each replacing a note of
/// 1 KiB to 70 KiB, so that the session takes snapshots, drops superseded
/// ones and clears values kept by reference) each see one state of it:
/// the head and the log agree. (Read key by key, a head read before a
/// save and checkpoints after it disagreed: a head at `last_seq` 2 with a
/// log up to 5, a snapshot the head names missing from the log.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_read_while_runs_write_it_is_one_state_of_it() {
    let admin = Admin::new(var("HARNESS_RESTATE_ADMIN")).unwrap();
    let ingress = Ingress::new(var("HARNESS_RESTATE_INGRESS"), Duration::from_secs(60)).unwrap();
    let durable = Durable::new();
    let endpoint = Endpoint::builder()
        .bind(Reads(durable.object(desk(&durable)).unwrap()))
        .build();
    let (services, port) = crate::serve_registered(&admin, endpoint).await;
    assert_eq!(services, [OBJECT]);
    let agent = AgentClient::new(ingress).object(OBJECT);
    let session = SessionId::from(format!("read-{}-{port}", std::process::id()));
    let writer = {
        let (agent, session) = (agent.clone(), session.clone());
        tokio::spawn(async move {
            for i in 0..50_u64 {
                let bytes = if i % 5 == 4 {
                    70_000
                } else {
                    1_000 + 100 * (i % 3)
                };
                agent.run(&session, &json!({"bytes": bytes})).await.unwrap();
            }
        })
    };
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (agent, session) = (agent.clone(), session.clone());
            tokio::spawn(async move {
                let mut reads = 0;
                let mut bad = Vec::new();
                loop {
                    let done = writer_done(&session);
                    match agent.session(&session).await {
                        Ok(None) => {}
                        Ok(Some(read)) => {
                            reads += 1;
                            bad.extend(torn(&read));
                        }
                        Err(e) => bad.push(format!("{e}")),
                    }
                    if done {
                        return (reads, bad);
                    }
                }
            })
        })
        .collect();
    writer.await.unwrap();
    finished(&session);
    let mut reads = 0;
    let mut bad = Vec::new();
    for reader in readers {
        let (n, b) = reader.await.unwrap();
        reads += n;
        bad.extend(b);
    }
    assert!(reads > 20, "only {reads} reads");
    assert!(
        bad.is_empty(),
        "{} of {reads} reads torn: {bad:#?}",
        bad.len()
    );
    // Read at rest.
    let last = agent.session(&session).await.unwrap().unwrap();
    assert_eq!(torn(&last), None);
    assert!(
        matches!(
            last.head.phase,
            harness::session::SessionPhase::Completed { .. }
        ),
        "{:?}",
        last.head.phase
    );
}

static FINISHED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

fn finished(session: &SessionId) {
    FINISHED.lock().unwrap().push(session.as_str().to_owned());
}

fn writer_done(session: &SessionId) -> bool {
    FINISHED
        .lock()
        .unwrap()
        .iter()
        .any(|s| s == session.as_str())
}
