//! Values nested as deep as `MAX_VALUE_DEPTH` are stored and read back by
//! every store; a deeper one (which `serde_json` would write and, past 128
//! levels, never read back) fails its step with `ValueTooDeep` naming the
//! step and the depth, and nothing of it is stored.

use harness::session::{
    MAX_VALUE_DEPTH, SessionError, SessionPhase, SessionStore, StoreError, ValueTooDeep,
};
use harness::{Cx, Harness, HarnessState, RunError, SessionId, Signal, StepResult, create_agent};
use harness_stores::conformance::nested;
use harness_stores::{FileStore, MemoryStore};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;

/// A linked chain: each node is one object, `Option` and `Box` add none.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
struct Node {
    label: u32,
    child: Option<Box<Node>>,
}

fn chain(nodes: usize) -> Option<Node> {
    (0..nodes).fold(None, |child, i| {
        Some(Node {
            label: u32::try_from(i).unwrap(),
            child: child.map(Box::new),
        })
    })
}

/// An enum: a variant with data is `{"Variant": ..}`, one level each.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
enum Shape {
    Leaf(u32),
    Wrap(Box<Shape>),
}

/// `Leaf` (1 level) in `wraps` `Wrap`s.
fn shape(wraps: usize) -> Option<Shape> {
    Some((0..wraps).fold(Shape::Leaf(1), |inner, _| Shape::Wrap(Box::new(inner))))
}

/// The state is an object: one level above each field's own.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Deep {
    tree: Value,
    chain: Option<Node>,
    shape: Option<Shape>,
    #[field(reduce = add)]
    steps: u32,
}

fn depth_of(state: &impl Serialize) -> usize {
    fn walk(v: &Value) -> usize {
        match v {
            Value::Array(a) => 1 + a.iter().map(walk).max().unwrap_or(0),
            Value::Object(m) => 1 + m.values().map(walk).max().unwrap_or(0),
            _ => 0,
        }
    }
    walk(&serde_json::to_value(state).unwrap())
}

const MAX: usize = MAX_VALUE_DEPTH;

/// Grows the state to the limit one field per step, then asks with a
/// payload at the limit, after a `once` result at the limit; the answer is
/// at the limit too.
async fn grow(s: Arc<Deep>) -> StepResult<DeepUpdate> {
    let update = DeepUpdate::new().steps(1);
    Ok(match s.steps {
        0 => update.tree(nested(MAX - 1, false)),
        1 => update.chain(chain(MAX - 1)),
        _ => update.shape(shape(MAX - 2)),
    })
}

async fn ask(_: Arc<Deep>, cx: Cx<()>) -> StepResult<DeepUpdate> {
    let kept: Value = cx.once("deep", async { nested(MAX, true) }).await?;
    assert_eq!(kept, nested(MAX, true));
    let answer: Value = cx.interrupt(nested(MAX, false))?;
    assert_eq!(answer, nested(MAX, true));
    Ok(DeepUpdate::new().steps(1))
}

fn growing_agent(store: Arc<dyn SessionStore>) -> harness::Agent<Deep> {
    let h = Harness::<Deep>::builder()
        .step("grow")
        .run(grow)
        .route(|s: &Deep| if s.steps < 3 { "again" } else { "full" })
        .on("again")
        .to("grow")
        .on("full")
        .to("ask")
        .step("ask")
        .run(ask)
        .end()
        .start("grow")
        .store(store)
        .build()
        .unwrap();
    create_agent("deep", &h)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_as_deep_as_the_limit_are_stored_and_read_back_by_every_store() {
    let dir = tempfile::tempdir().unwrap();
    let file_root = dir.path().join("file");
    let sled_path = dir.path().join("sled");
    type Reopen<'a> = Box<dyn Fn() -> Arc<dyn SessionStore> + 'a>;
    let memory: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    let mut stores: Vec<(&str, Reopen<'_>)> = vec![
        ("memory", Box::new(move || memory.clone())),
        (
            "file",
            Box::new(|| Arc::new(FileStore::open(&file_root).unwrap())),
        ),
    ];
    #[cfg(feature = "sled")]
    stores.push((
        "sled",
        Box::new(|| {
            Arc::new(crate::reopen(|| {
                harness_stores::SledStore::open(&sled_path)
            }))
        }),
    ));
    #[cfg(not(feature = "sled"))]
    let _ = &sled_path;
    for (name, open) in stores {
        let session = SessionId::from(format!("deep-{name}"));
        let interrupt = {
            let agent = growing_agent(open());
            let run = agent.run_in(session.clone(), Deep::default());
            let paused = run.await.unwrap();
            assert_eq!(depth_of(&paused.state), MAX, "{name}");
            paused.interrupt.unwrap().id
        };
        // Another handle (another process, for the disk stores) reads it
        // all back and answers at the limit.
        let agent = growing_agent(open());
        let out = agent
            .resume(nested(MAX, true), &session, &interrupt)
            .await
            .unwrap()
            .await
            .unwrap();
        assert_eq!(out.signal, Signal::END, "{name}");
        drop(agent);
        let agent = growing_agent(open());
        let stored = agent.state_at(&session, None).await.unwrap();
        assert_eq!(stored, out.state, "{name}");
        assert_eq!(depth_of(&stored), MAX, "{name}");
        assert_eq!(stored.tree, nested(MAX - 1, false), "{name}");
        assert_eq!(stored.chain, chain(MAX - 1), "{name}");
        assert_eq!(stored.shape, shape(MAX - 2), "{name}");
        assert_eq!(agent.history(&session).await.unwrap().len(), 5, "{name}");
        for i in 0..=4 {
            agent.state_at(&session, Some(i)).await.unwrap();
        }
    }
}

/// One step whose update is `update`, on `store`.
fn one_step_agent(
    store: Arc<dyn SessionStore>,
    update: impl Fn() -> DeepUpdate + Send + Sync + 'static,
) -> harness::Agent<Deep> {
    let h = Harness::<Deep>::builder()
        .step("deepen")
        .run(move || {
            let update = update();
            async move { Ok(update) }
        })
        .end()
        .start("deepen")
        .store(store)
        .build()
        .unwrap();
    create_agent("deep", &h)
}

fn too_deep(err: &RunError) -> &ValueTooDeep {
    match err {
        RunError::Store(StoreError::TooDeep(e)) => e,
        other => panic!("not ValueTooDeep: {other}"),
    }
}

/// Every record of `session` in the file store at `root`, read back by a
/// fresh handle: none is unreadable.
async fn all_readable(root: &Path, session: &SessionId) -> Vec<harness::session::Checkpoint> {
    let store = FileStore::open(root).unwrap();
    store.load(session).await.unwrap().unwrap();
    store.checkpoints(session, 0).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_deeper_than_the_limit_fails_its_step_and_is_not_stored() {
    let dir = tempfile::tempdir().unwrap();
    type Make = fn() -> DeepUpdate;
    let cases: [(&str, Make, usize); 6] = [
        (
            "arrays",
            || DeepUpdate::new().tree(nested(MAX, false)),
            MAX + 1,
        ),
        (
            "objects",
            || DeepUpdate::new().tree(nested(MAX, true)),
            MAX + 1,
        ),
        // Past serde_json's own limit: written, never read, before.
        (
            "130 arrays",
            || DeepUpdate::new().tree(nested(130, false)),
            131,
        ),
        (
            "500 objects",
            || DeepUpdate::new().tree(nested(500, true)),
            501,
        ),
        (
            "typed chain",
            || DeepUpdate::new().chain(chain(MAX)),
            MAX + 1,
        ),
        ("enum", || DeepUpdate::new().shape(shape(MAX - 1)), MAX + 1),
    ];
    for (i, (name, make, depth)) in cases.into_iter().enumerate() {
        let root = dir.path().join(i.to_string());
        let store: Arc<dyn SessionStore> = Arc::new(FileStore::open(&root).unwrap());
        let agent = one_step_agent(store, make);
        let run = agent.run(Deep::default());
        let session = run.session_id().clone();
        let err = run.await.unwrap_err();
        let e = too_deep(&err);
        assert_eq!(
            (e.step.as_str(), e.what.as_str(), e.depth, e.limit),
            ("deepen", "the update", depth, MAX),
            "{name}"
        );
        assert_eq!(e.session, session, "{name}");
        let text = err.to_string();
        assert!(
            text.contains("step `deepen`") && text.contains(&format!("nests {depth} levels")),
            "{name}: {text}"
        );
        // The session records the failure, at the step, and holds only
        // what was stored before: its first snapshot.
        let head = agent.session(&session).await.unwrap();
        assert!(
            matches!(&head.phase, SessionPhase::Failed { error } if error.contains("nests")),
            "{name}: {:?}",
            head.phase
        );
        assert_eq!(head.next_step.as_deref(), Some("deepen"), "{name}");
        assert_eq!(head.lease, None, "{name}");
        assert_eq!(
            agent.state_at(&session, None).await.unwrap(),
            Deep::default(),
            "{name}"
        );
        assert_eq!(all_readable(&root, &session).await.len(), 1, "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_initial_state_deeper_than_the_limit_creates_no_session() {
    for (name, state, depth) in [
        (
            "tree",
            Deep {
                tree: nested(MAX, false),
                ..Deep::default()
            },
            MAX + 1,
        ),
        (
            "chain",
            Deep {
                chain: chain(200),
                ..Deep::default()
            },
            201,
        ),
    ] {
        let store = Arc::new(MemoryStore::new());
        let agent = one_step_agent(store.clone(), DeepUpdate::new);
        let err = agent.run(state).await.unwrap_err();
        let e = too_deep(&err);
        assert_eq!(
            (e.step.as_str(), e.what.as_str(), e.depth),
            ("$start", "the state", depth),
            "{name}"
        );
        assert!(store.sessions().await.unwrap().is_empty(), "{name}");
    }
}

/// Asks with `payload`, once.
fn asking_agent(store: Arc<dyn SessionStore>, payload: Value) -> harness::Agent<Deep> {
    let h = Harness::<Deep>::builder()
        .step("ask")
        .run(move |cx: Cx<()>| {
            let payload = payload.clone();
            async move {
                let _: Value = cx.interrupt(payload)?;
                Ok(DeepUpdate::new())
            }
        })
        .end()
        .start("ask")
        .store(store)
        .build()
        .unwrap();
    create_agent("deep", &h)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_payload_or_answer_deeper_than_the_limit_is_not_stored() {
    // A payload too deep: the run fails naming the asking step; the session
    // records the failure instead of the interrupt.
    let store = Arc::new(MemoryStore::new());
    let agent = asking_agent(store.clone(), nested(MAX + 1, true));
    let run = agent.run(Deep::default());
    let session = run.session_id().clone();
    let err = run.await.unwrap_err();
    let e = too_deep(&err);
    assert_eq!((e.step.as_str(), e.depth), ("ask", MAX + 1));
    assert!(e.what.starts_with("the payload of interrupt"), "{}", e.what);
    let head = store.load(&session).await.unwrap().unwrap();
    assert!(
        matches!(head.phase, SessionPhase::Failed { .. }),
        "{:?}",
        head.phase
    );
    assert_eq!(head.lease, None);

    // An answer too deep: refused before anything is written; the session
    // still waits, and a flat answer goes through.
    let agent = asking_agent(store.clone(), Value::from("how deep?"));
    let paused = agent.run(Deep::default()).await.unwrap();
    let (session, interrupt) = (paused.session_id, paused.interrupt.unwrap().id);
    let before = store.load(&session).await.unwrap().unwrap();
    for answer in [
        nested(MAX + 1, false),
        nested(MAX + 1, true),
        nested(300, false),
    ] {
        let depth = depth_of(&answer);
        match agent.resume(answer, &session, &interrupt).await {
            Err(SessionError::Store(StoreError::TooDeep(e))) => {
                assert_eq!((e.step.as_str(), e.depth), ("ask", depth));
                assert_eq!(e.what, "interrupt answer 0");
            }
            Err(other) => panic!("{depth}: {other}"),
            Ok(_) => panic!("{depth}: the answer was taken"),
        }
        assert_eq!(store.load(&session).await.unwrap().unwrap(), before);
    }
    let out = agent
        .resume(nested(MAX, false), &session, &interrupt)
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!(out.signal, Signal::END);
}
