//! Answers the run refuses (a wrong type, or the step's own check), names
//! given to `expect_answer`, a studio given another store than its
//! harness's, and the wording of a few client mistakes.

use crate::support::{eventually, get, post, request};
use harness::session::SessionStore;
use harness::{Agent, Cx, Harness, HarnessState, JsonSchema, SubAgent, create_agent};
use harness_stores::MemoryStore;
use harness_studio::{Serving, Studio, StudioError};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
pub struct Order {
    #[field(reduce = append)]
    pub log: Vec<String>,
}

/// `approve` reads a `bool`; `copies` takes its time, then reads a `u32`
/// that its own check keeps between 1 and 10.
fn order_harness(store: Arc<dyn SessionStore>) -> Harness<Order> {
    Harness::<Order>::builder()
        .step("approve")
        .run(|cx: Cx<()>| async move {
            let ok: bool = cx.interrupt("approve?")?;
            Ok(OrderUpdate::new().log(vec![format!("approved={ok}")]))
        })
        .next("copies")
        .step("copies")
        .run(|cx: Cx<()>| async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let n: u32 = cx.interrupt_with("how many copies (1-10)?", |n: u32| {
                if (1..=10).contains(&n) {
                    Ok(n)
                } else {
                    Err(format!("{n} is not between 1 and 10"))
                }
            })?;
            Ok(OrderUpdate::new().log(vec![format!("copies={n}")]))
        })
        .end()
        .start("approve")
        .store(store)
        .build()
        .unwrap()
}

async fn serve(studio: Studio) -> Serving {
    studio
        .poll_interval(Duration::from_millis(100))
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap()
}

/// A session of `agent` waiting on `step`, and its interrupt.
async fn waiting_on(agent: &Agent<Order>, step: &str) -> (String, String) {
    let out = agent.run(Order::default()).await.unwrap();
    let mut interrupt = out.interrupt.unwrap();
    let session = out.session_id.clone();
    while interrupt.step != step {
        interrupt = agent
            .resume(json!(true), &session, &interrupt.id)
            .await
            .unwrap()
            .await
            .unwrap()
            .interrupt
            .unwrap();
    }
    (session.to_string(), interrupt.id.to_string())
}

/// A studio for an `orders` agent (its own store) with `tune` applied,
/// and a session of it waiting on `step`: the studio, the session, its
/// interrupt.
async fn orders_waiting_on(
    step: &str,
    tune: impl FnOnce(Studio) -> Studio,
) -> (Serving, String, String) {
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    let harness = order_harness(Arc::clone(&store));
    let agent = create_agent("orders", &harness);
    let (session, interrupt) = waiting_on(&agent, step).await;
    let studio = tune(Studio::for_agent(&agent, &harness, store).unwrap());
    (serve(studio).await, session, interrupt)
}

async fn detail(s: &Serving, session: &str) -> Value {
    get(s, &format!("/api/sessions/{session}")).await.json()
}

async fn answer(
    s: &Serving,
    session: &str,
    interrupt: &str,
    answer: Value,
) -> crate::support::Response {
    post(
        s,
        &format!("/api/sessions/{session}/answer"),
        &json!({ "interrupt": interrupt, "answer": answer }).to_string(),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_the_run_refuses_is_answered_as_refused_and_the_session_still_waits() {
    // No answer declared: the run's own check is all there is.
    let (s, session, first) = orders_waiting_on("approve", |studio| studio).await;

    let r = answer(&s, &session, &first, json!("yes")).await;
    assert_eq!(r.status, 422, "{}", r.body);
    let body = r.json();
    assert_eq!(body["kind"], "answer_rejected", "{body}");
    assert_eq!(body["field"], "answer", "{body}");
    assert_eq!(body["interrupt"], first.as_str(), "{body}");
    let reason = body["reason"].as_str().unwrap();
    assert!(reason.contains("expects `bool`"), "{body}");
    let error = r.error();
    for says in [first.as_str(), "`approve`", "expects `bool`", "still waits"] {
        assert!(error.contains(says), "{says}: {error}");
    }
    // Nothing was kept: the same question, with why the last answer was
    // refused.
    let d = detail(&s, &session).await;
    assert_eq!(d["summary"]["phase"], "waiting", "{d}");
    assert_eq!(d["interrupt"]["id"], first.as_str());
    assert_eq!(d["summary"]["steps"], 0, "{d}");
    assert_eq!(d["refused"]["interrupt"], first.as_str(), "{d}");
    assert_eq!(d["refused"]["reason"], reason);

    // A good answer is kept, and the refusal forgotten.
    let r = answer(&s, &session, &first, json!(true)).await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(r.json()["kept"], true, "{}", r.body);
    let second = eventually("the run to ask for copies", || {
        let (s, session, first) = (&s, &session, &first);
        async move {
            let d = detail(s, session).await;
            let id = d["interrupt"]["id"].as_str()?.to_owned();
            (id != *first).then_some((id, d))
        }
    })
    .await;
    let (second, d) = second;
    assert_eq!(d["refused"], Value::Null, "{d}");

    // The step's own check refuses too, with its reason.
    let r = answer(&s, &session, &second, json!(99)).await;
    assert_eq!(r.status, 422, "{}", r.body);
    assert!(
        r.json()["reason"]
            .as_str()
            .unwrap()
            .contains("99 is not between 1 and 10"),
        "{}",
        r.body
    );
    assert_eq!(
        detail(&s, &session).await["interrupt"]["id"],
        second.as_str()
    );

    let r = answer(&s, &session, &second, json!(3)).await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(r.json()["kept"], true, "{}", r.body);
    let state = eventually("the run to end", || {
        let (s, session) = (&s, &session);
        async move {
            (detail(s, session).await["summary"]["phase"] == "done").then_some(())?;
            Some(
                get(s, &format!("/api/sessions/{session}/state"))
                    .await
                    .json(),
            )
        }
    })
    .await;
    assert_eq!(state["state"]["log"], json!(["approved=true", "copies=3"]));
    s.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_that_comes_after_the_request_is_answered_shows_with_the_session() {
    // `copies` takes 300 ms before it reads the answer: longer than the
    // request waits.
    let (s, session, interrupt) = orders_waiting_on("copies", |studio| {
        studio.answer_wait(Duration::from_millis(20))
    })
    .await;
    let r = answer(&s, &session, &interrupt, json!(0)).await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(r.json()["kept"], false, "{}", r.body);
    let d = eventually("the refusal", || {
        let (s, session) = (&s, &session);
        async move {
            let d = detail(s, session).await;
            (!d["refused"].is_null()).then_some(d)
        }
    })
    .await;
    assert_eq!(d["refused"]["interrupt"], interrupt.as_str(), "{d}");
    assert!(
        d["refused"]["reason"]
            .as_str()
            .unwrap()
            .contains("0 is not between 1 and 10"),
        "{d}"
    );
    assert_eq!(d["summary"]["phase"], "waiting", "{d}");
    assert_eq!(d["interrupt"]["id"], interrupt.as_str(), "{d}");
    s.shutdown().await.unwrap();
}

/// A step that reads its answer and then works on (here, until the test
/// lets it go): the request learns the answer was kept as soon as the step
/// read it, not when the step finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_is_kept_as_soon_as_the_step_reads_it() {
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    let go = Arc::new(tokio::sync::Notify::new());
    let g = Arc::clone(&go);
    let harness = Harness::<Order>::builder()
        .step("approve")
        .run(move |cx: Cx<()>| {
            let go = Arc::clone(&g);
            async move {
                let ok: bool = cx.interrupt("approve?")?;
                go.notified().await;
                Ok(OrderUpdate::new().log(vec![format!("approved={ok}")]))
            }
        })
        .end()
        .start("approve")
        .store(Arc::clone(&store))
        .build()
        .unwrap();
    let agent = create_agent("orders", &harness);
    let (session, interrupt) = waiting_on(&agent, "approve").await;
    // The default wait, 10 s: the step does not finish within it.
    let s = serve(Studio::for_agent(&agent, &harness, Arc::clone(&store)).unwrap()).await;
    let r = answer(&s, &session, &interrupt, json!(true)).await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(r.json()["kept"], true, "{}", r.body);
    let d = detail(&s, &session).await;
    assert_eq!(d["summary"]["steps"], 0, "the step still works: {d}");
    go.notify_one();
    eventually("the run to end", || {
        let (s, session) = (&s, &session);
        async move { (detail(s, session).await["summary"]["phase"] == "done").then_some(()) }
    })
    .await;
    s.shutdown().await.unwrap();
}

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
pub struct Inner {
    #[field(reduce = append)]
    pub notes: Vec<String>,
}

/// `sub` runs a sub-agent whose only step, `ask`, reads a `bool`; the
/// loop's own `ask` (which asks nothing) runs after it.
fn nested_harness(store: Arc<dyn SessionStore>) -> Harness<Order> {
    let child = Harness::<Inner>::builder()
        .step("ask")
        .run(|cx: Cx<()>| async move {
            let ok: bool = cx.interrupt("proceed?")?;
            Ok(InnerUpdate::new().notes(vec![format!("child got {ok}")]))
        })
        .end()
        .start("ask")
        .build()
        .unwrap();
    Harness::<Order>::builder()
        .step("sub")
        .sub_agent(SubAgent::new(
            &child,
            |_: &Order| Inner::default(),
            |_: &Order, done| OrderUpdate::new().log(done.state.notes),
        ))
        .next("ask")
        .step("ask")
        .run(|| async { Ok(OrderUpdate::new().log(vec!["asked nothing".into()])) })
        .end()
        .start("sub")
        .store(store)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_a_sub_agent_refuses_is_answered_as_refused() {
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    let harness = nested_harness(Arc::clone(&store));
    let agent = create_agent("nested", &harness);
    let out = agent.run(Order::default()).await.unwrap();
    let (session, interrupt) = (
        out.session_id.to_string(),
        out.interrupt.unwrap().id.to_string(),
    );
    let s = serve(Studio::for_agent(&agent, &harness, Arc::clone(&store)).unwrap()).await;
    let d = detail(&s, &session).await;
    assert_eq!(d["interrupt_node"], "sub/ask", "{d}");

    let r = answer(&s, &session, &interrupt, json!("yes")).await;
    assert_eq!(r.status, 422, "{}", r.body);
    assert!(
        r.json()["reason"].as_str().unwrap().contains("bool"),
        "{}",
        r.body
    );
    assert_eq!(
        detail(&s, &session).await["interrupt"]["id"],
        interrupt.as_str()
    );

    let r = answer(&s, &session, &interrupt, json!(true)).await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(r.json()["kept"], true, "{}", r.body);
    eventually("the run to end", || {
        let (s, session) = (&s, &session);
        async move { (detail(s, session).await["summary"]["phase"] == "done").then_some(()) }
    })
    .await;
    s.shutdown().await.unwrap();

    // The read-only studio draws the sub-agent's question in its box, not
    // on the loop's step of the same name (which has not run).
    let waiting = agent.run(Order::default()).await.unwrap().session_id;
    let ro = serve(Studio::read_only(Arc::clone(&store))).await;
    let d = detail(&ro, waiting.as_str()).await;
    assert_eq!(d["interrupt_node"], "sub/ask", "{d}");
    let at: Vec<&Value> = d["positions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["waiting"] == true)
        .collect();
    assert_eq!(at.len(), 1, "{d}");
    assert_eq!(at[0]["node"], "sub/ask", "{d}");
    ro.shutdown().await.unwrap();
}

#[tokio::test]
async fn expect_answer_refuses_a_step_the_loop_does_not_have() {
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    let harness = nested_harness(Arc::clone(&store));
    let agent = create_agent("nested", &harness);
    let studio = || Studio::for_agent(&agent, &harness, Arc::clone(&store)).unwrap();
    let addr = "127.0.0.1:0".parse().unwrap();

    let e = studio()
        .expect_answer::<bool>("sub/ask")
        .expect_answer::<bool>("aks")
        .bind(addr)
        .await
        .unwrap_err();
    assert!(
        matches!(&e, StudioError::UnknownStep { step, .. } if step == "aks"),
        "{e}"
    );
    let message = e.to_string();
    for says in ["`aks`", "`sub`", "`ask`", "`sub/ask`"] {
        assert!(message.contains(says), "{says}: {message}");
    }
    let (_, stopping) = tokio::sync::watch::channel(false);
    let e = studio()
        .expect_answer::<bool>("sub/aks")
        .mount("/studio", stopping.clone())
        .unwrap_err();
    assert!(e.to_string().contains("`sub/aks`"), "{e}");

    // The loop's steps, a sub-agent's step by its node and by its name.
    for name in ["ask", "sub/ask", "sub"] {
        let s = studio().expect_answer::<bool>(name).bind(addr).await;
        assert!(s.is_ok(), "{name}: {:?}", s.err());
    }
    // A read-only studio knows no steps, and answers nothing.
    assert!(
        Studio::read_only(Arc::clone(&store))
            .expect_answer::<bool>("anything")
            .mount("/studio", stopping)
            .is_ok()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_studio_given_another_store_than_its_harness_says_so() {
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    let other: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    let harness = order_harness(Arc::clone(&store));
    let agent = create_agent("orders", &harness);
    // A session of the same agent, in the other store.
    let elsewhere = create_agent("orders", &order_harness(Arc::clone(&other)));
    let (session, interrupt) = waiting_on(&elsewhere, "approve").await;

    let s = serve(Studio::for_agent(&agent, &harness, Arc::clone(&other)).unwrap()).await;
    let r = answer(&s, &session, &interrupt, json!(true)).await;
    assert_eq!(r.status, 500, "{}", r.body);
    for says in [
        session.as_str(),
        "not in the store agent `orders`",
        "another store",
    ] {
        assert!(r.error().contains(says), "{says}: {}", r.body);
    }
    let r = post(
        &s,
        &format!("/api/sessions/{session}/fork"),
        &json!({"index": 0}).to_string(),
    )
    .await;
    assert_eq!(r.status, 500, "{}", r.body);
    assert!(r.error().contains("another store"), "{}", r.body);
    s.shutdown().await.unwrap();

    // An agent without a store can answer nothing.
    let bare = Harness::<Order>::builder()
        .step("approve")
        .run(|| async { Ok(OrderUpdate::new()) })
        .end()
        .start("approve")
        .build()
        .unwrap();
    let e = Studio::for_agent(&create_agent("bare", &bare), &bare, store).unwrap_err();
    assert!(
        matches!(&e, StudioError::NoStore { agent } if agent == "bare"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_session_id_or_fork_index_is_a_json_error_naming_it() {
    let (s, session, _) = orders_waiting_on("copies", |studio| studio).await;

    for path in [
        "/api/sessions/%00%ff",
        "/api/sessions/%ff/timeline",
        "/api/sessions/%ff/state",
        "/api/sessions/%ff/summary",
    ] {
        let r = get(&s, path).await;
        assert_eq!(r.status, 400, "{path}: {}", r.body);
        assert!(
            r.header("content-type")
                .unwrap()
                .starts_with("application/json"),
            "{path}: {r:?}"
        );
        let body = r.json();
        assert_eq!(body["kind"], "parameter", "{path}: {body}");
        assert_eq!(body["parameter"], "id", "{path}: {body}");
        assert!(r.error().contains("UTF-8"), "{path}: {body}");
    }
    let r = request(
        &s,
        "POST",
        "/api/sessions/%ff/answer",
        &[
            ("x-studio-token", s.token()),
            ("content-type", "application/json"),
        ],
        Some(r#"{"interrupt": "i", "answer": true}"#),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.json()["parameter"], "id", "{}", r.body);

    // One step taken (`approve`): checkpoints after 0 and 1 steps.
    let steps = detail(&s, &session).await["summary"]["steps"]
        .as_u64()
        .unwrap();
    assert_eq!(steps, 1);
    let r = post(
        &s,
        &format!("/api/sessions/{session}/fork"),
        &json!({"index": 999}).to_string(),
    )
    .await;
    assert_eq!(r.status, 404, "{}", r.body);
    assert_eq!(r.json()["field"], "index", "{}", r.body);
    assert!(
        r.error().contains("`index` is 0 (its start) to 1"),
        "{}",
        r.body
    );
    assert!(!r.error().contains("it has 1 steps"), "{}", r.body);
    s.shutdown().await.unwrap();
}
