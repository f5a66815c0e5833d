//! What a session stores reads back as it was: a field set to `None` stays
//! `None` through the store and the step cache, and a float JSON cannot
//! hold (NaN, an infinity) is refused where it is written, naming the
//! field, instead of being stored as a `null` that a later read takes for
//! "not set"; a map key JSON cannot write is refused naming the field.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use harness::session::SessionStore;
use harness::{
    CachePolicy, Cx, Harness, HarnessState, MemoryCache, RunError, StepResult, create_agent,
};
use harness_stores::{MemoryStore, SledStore};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Pick {
    draft: String,
    pick: Option<String>,
    #[field(reduce = append)]
    log: Vec<String>,
}

fn picked() -> Pick {
    Pick {
        draft: "d".into(),
        pick: Some("x".into()),
        log: Vec::new(),
    }
}

async fn clear(_: Arc<Pick>) -> StepResult<PickUpdate> {
    Ok(PickUpdate::new().pick(None).log(vec!["cleared".into()]))
}

async fn ask(s: Arc<Pick>, cx: Cx<()>) -> StepResult<PickUpdate> {
    let _: bool = cx.interrupt("go on?")?;
    Ok(PickUpdate::new().log(vec![format!("ask saw {:?}", s.pick)]))
}

fn clear_then_ask(store: impl SessionStore + 'static) -> Harness<Pick> {
    Harness::<Pick>::builder()
        .step("clear")
        .run(clear)
        .next("ask")
        .step("ask")
        .run(ask)
        .end()
        .start("clear")
        .store(store)
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_field_set_to_none_is_none_when_the_session_is_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let sled = SledStore::open(dir.path().join("db")).unwrap();
    let memory = MemoryStore::new();
    for (name, harness) in [
        ("memory", clear_then_ask(memory)),
        ("sled", clear_then_ask(sled)),
    ] {
        let out = create_agent("pick", &harness).run(picked()).await.unwrap();
        assert_eq!(out.state.pick, None, "{name}: live");
        // A fresh agent, as another process would make, reads the session.
        let agent = create_agent("pick", &harness);
        let stored = agent.state_at(&out.session_id, None).await.unwrap();
        assert_eq!(stored.pick, None, "{name}: read back");
        let interrupt = out.interrupt.unwrap().id;
        let resumed = agent
            .resume(true, &out.session_id, &interrupt)
            .await
            .unwrap()
            .await
            .unwrap();
        assert_eq!(resumed.state.pick, None, "{name}: resumed");
        assert_eq!(
            resumed.state.log,
            ["cleared", "ask saw None"],
            "{name}: the resumed step saw the field cleared"
        );
    }
}

#[tokio::test]
async fn a_cached_update_that_clears_a_field_clears_it_on_a_hit() {
    let cache = MemoryCache::new();
    let harness = Harness::<Pick>::builder()
        .step("clear")
        .run(clear)
        .cache_reads(CachePolicy::new(cache, "picks"), |s| s.draft.clone())
        .end()
        .start("clear")
        .build()
        .unwrap();
    let agent = create_agent("pick", &harness);
    let miss = agent.run(picked()).await.unwrap();
    let hit = agent.run(picked()).await.unwrap();
    assert_eq!(miss.state.pick, None);
    assert_eq!(hit.state.pick, None, "the cached update read back");
    assert_eq!(hit.state.log, ["cleared"]);
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
struct Point {
    x: f64,
    y: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Scores {
    score: f64,
    #[field(reduce = append)]
    samples: Vec<f64>,
    at: Point,
    best: Option<f64>,
    #[field(reduce = append)]
    log: Vec<String>,
}

fn scores() -> Scores {
    Scores {
        score: 1.0,
        samples: vec![0.5],
        at: Point::default(),
        best: None,
        log: Vec::new(),
    }
}

/// A loop whose first step writes `bad` and whose second asks a human:
/// a run that stores its steps stops at the first, naming the field.
fn scoring(store: Arc<MemoryStore>, bad: fn() -> ScoresUpdate) -> Harness<Scores> {
    Harness::<Scores>::builder()
        .step("ok")
        .run(async |_: Arc<Scores>| Ok(ScoresUpdate::new().log(vec!["ok".into()])))
        .next("score")
        .step("score")
        .run(move |_: Arc<Scores>| async move { Ok(bad()) })
        .end()
        .start("ok")
        .store(store)
        .build()
        .unwrap()
}

#[tokio::test]
async fn an_update_holding_a_float_json_cannot_hold_is_refused_naming_the_field() {
    type Bad = fn() -> ScoresUpdate;
    let cases: [(&str, Bad); 5] = [
        ("score", || ScoresUpdate::new().score(f64::NAN)),
        ("score", || ScoresUpdate::new().score(f64::INFINITY)),
        ("samples", || {
            ScoresUpdate::new().samples(vec![1.0, f64::NEG_INFINITY])
        }),
        ("at", || {
            ScoresUpdate::new().at(Point {
                x: 0.0,
                y: f64::NAN,
            })
        }),
        ("score", || {
            ScoresUpdate::new()
                .log(vec!["fine".into()])
                .score(-f64::NAN)
        }),
    ];
    for (field, bad) in cases {
        let store = Arc::new(MemoryStore::new());
        let harness = scoring(Arc::clone(&store), bad);
        let agent = create_agent("scores", &harness);
        let run = agent.run(scores());
        let session = run.session_id().clone();
        let error = run.await.unwrap_err();
        let message = error.to_string();
        assert!(matches!(error, RunError::Store(_)), "{field}: {error:?}");
        assert!(
            message.contains("step `score`") && message.contains(&format!("`{field}`")),
            "{field}: {message}"
        );
        // What was stored before is intact and reads back.
        let state = agent.state_at(&session, None).await.unwrap();
        assert_eq!(state.score, 1.0, "{field}");
        assert_eq!(state.samples, [0.5], "{field}");
        assert_eq!(state.log, ["ok"], "{field}");
    }
}

#[tokio::test]
async fn a_null_the_type_allows_is_stored_and_one_it_does_not_is_refused_at_the_start() {
    // `best: None` is a null that reads back: the session is created.
    let store = Arc::new(MemoryStore::new());
    let harness = scoring(Arc::clone(&store), || {
        ScoresUpdate::new().best(Some(2.0)).best(None)
    });
    let out = create_agent("scores", &harness)
        .run(scores())
        .await
        .unwrap();
    assert_eq!(out.state.best, None);

    // A first state holding a NaN is refused before anything is stored.
    for bad in [
        Scores {
            score: f64::NAN,
            ..scores()
        },
        Scores {
            samples: vec![f64::INFINITY],
            ..scores()
        },
    ] {
        let store = Arc::new(MemoryStore::new());
        let harness = scoring(Arc::clone(&store), ScoresUpdate::new);
        let error = create_agent("scores", &harness).run(bad).await.unwrap_err();
        assert!(
            error.to_string().contains("the state cannot be stored"),
            "{error}"
        );
        assert!(store.sessions().await.unwrap().is_empty());
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Pairs {
    #[field(reduce = extend)]
    by_pair: std::collections::BTreeMap<(u32, u32), String>,
    #[field(reduce = append)]
    nested: Vec<std::collections::BTreeMap<Vec<u8>, u32>>,
}

#[tokio::test]
async fn an_update_json_cannot_hold_is_refused_naming_where_it_is() {
    // Map keys JSON cannot write (a tuple, a list): serde_json's own error
    // says only "key must be a string"; the field is named.
    type Make = fn() -> PairsUpdate;
    let cases: [(Make, &str); 2] = [
        (
            || PairsUpdate::new().by_pair([((1, 2), "x".to_string())].into()),
            "by_pair",
        ),
        (
            || PairsUpdate::new().nested(vec![Default::default(), [(vec![1], 2)].into()]),
            "nested",
        ),
    ];
    for (make, at) in cases {
        let store = Arc::new(MemoryStore::new());
        let harness = Harness::<Pairs>::builder()
            .step("set")
            .run(move |_: Arc<Pairs>| async move { Ok(make()) })
            .end()
            .start("set")
            .store(Arc::clone(&store))
            .build()
            .unwrap();
        let error = create_agent("pairs", &harness)
            .run(Pairs::default())
            .await
            .unwrap_err();
        let text = error.to_string();
        assert!(text.contains("key must be a string"), "{text}");
        assert!(text.contains(&format!("`{at}`")), "{at}: {text}");
    }
}
