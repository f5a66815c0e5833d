//! Runs: outcomes, stop, limits, timeouts, retries, interrupts, journals,
//! events and observers.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use futures::StreamExt;
use harness::observe::Observer;
use harness::{
    Context, Cx, Harness, HarnessState, InterruptId, RetryPolicy, RunError, RunEvent, RunInfo,
    Signal, StepError, StepInfo, StepResult, SubAgent, create_agent, create_agent_with,
};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Counter {
    #[field(reduce = add)]
    count: u32,
    #[field(reduce = append)]
    seen: Vec<u32>,
    #[field(default = 3)]
    until: u32,
}

async fn bump(s: Arc<Counter>, _: Cx<()>) -> StepResult<CounterUpdate> {
    Ok(CounterUpdate::new().count(1).seen(vec![s.count + 1]))
}

fn counter_loop() -> Harness<Counter> {
    Harness::<Counter>::builder()
        .step("bump")
        .run(bump)
        .next("check")
        .step("check")
        .route(|s: &Counter| if s.count < s.until { "again" } else { "done" })
        .on("again")
        .to("bump")
        .on("done")
        .end()
        .start("bump")
        .build()
        .unwrap()
}

#[tokio::test]
async fn run_applies_updates_through_reducers_and_ends_on_the_signal() {
    let agent = create_agent("counter", &counter_loop());
    let run = agent.run(Counter::default());
    let run_id = run.run_id().clone();
    let out = run.await.unwrap();
    assert_eq!(out.signal, "done");
    assert_eq!(out.state.count, 3);
    assert_eq!(out.state.seen, [1, 2, 3]);
    assert_eq!(out.steps, 6, "three bumps and three checks");
    assert_eq!(out.run_id, run_id);
    assert!(out.interrupt.is_none());
}

#[tokio::test]
async fn step_limit_ends_a_runaway_loop() {
    let h = Harness::<Counter>::builder()
        .step("bump")
        .run(bump)
        .route(|_: &Counter| "again")
        .on("again")
        .to("bump")
        .on("never")
        .end()
        .start("bump")
        .step_limit(50)
        .build()
        .unwrap();
    let agent = create_agent("a", &h);
    let mut run = agent.run(Counter::default());
    let err = (&mut run).await.unwrap_err();
    assert!(
        matches!(err, RunError::StepLimit { limit: 50, ref step } if step == "bump"),
        "{err}"
    );
    assert_eq!(
        run.state().unwrap().count,
        50,
        "the state of the completed steps is kept"
    );
}

#[tokio::test]
async fn undeclared_signal_is_a_typed_error_naming_step_and_signal() {
    let h = Harness::<Counter>::builder()
        .step("bump")
        .run(bump)
        .route(|_: &Counter| Signal::from("sideways".to_string()))
        .on("done")
        .end()
        .start("bump")
        .build()
        .unwrap();
    let agent = create_agent("a", &h);
    let err = agent.run(Counter::default()).await.unwrap_err();
    match &err {
        RunError::UndeclaredSignal {
            step,
            signal,
            declared,
        } => {
            assert_eq!(step, "bump");
            assert_eq!(signal, "sideways");
            assert_eq!(declared, &[Signal::from("done")]);
        }
        other => panic!("unexpected {other}"),
    }
    assert!(err.to_string().contains("`sideways`"), "{err}");
}

#[tokio::test]
async fn stop_settles_at_the_next_step_boundary() {
    #[derive(Context)]
    struct Gate {
        #[slot(run)]
        entered: Arc<tokio::sync::Notify>,
        #[slot(run)]
        release: Arc<tokio::sync::Notify>,
    }
    async fn wait(_: Arc<Counter>, cx: Cx<Gate>) -> StepResult<CounterUpdate> {
        cx.entered.notify_one();
        cx.release.notified().await;
        Ok(CounterUpdate::new().count(1))
    }
    let h = Harness::<Counter, Gate>::builder()
        .step("wait")
        .run(wait)
        .route(|_: &Counter| "again")
        .on("again")
        .to("wait")
        .on("done")
        .end()
        .start("wait")
        .build()
        .unwrap();
    let agent = create_agent("a", &h);
    let entered = Arc::new(tokio::sync::Notify::new());
    let release = Arc::new(tokio::sync::Notify::new());
    let run = agent
        .with(GateRun {
            entered: entered.clone(),
            release: release.clone(),
        })
        .run(Counter::default());
    let stop = run.stop_handle();
    let task = tokio::spawn(run);
    entered.notified().await;
    stop.stop();
    release.notify_one();
    let out = task.await.unwrap().unwrap();
    assert_eq!(out.signal, Signal::STOPPED);
    assert_eq!(out.state.count, 1, "the step that was running completed");
    assert_eq!(out.steps, 1);
}

#[tokio::test]
async fn timeout_and_retry_are_per_step() {
    #[derive(Context)]
    struct Calls {
        #[slot(agent)]
        calls: Arc<AtomicU32>,
    }
    async fn slow_then_fast(_: Arc<Counter>, cx: Cx<Calls>) -> StepResult<CounterUpdate> {
        if cx.calls.fetch_add(1, Ordering::SeqCst) < 2 {
            tokio::time::sleep(Duration::from_secs(60)).await;
        }
        Ok(CounterUpdate::new().count(1))
    }
    let calls = Arc::new(AtomicU32::new(0));
    let build = |attempts| {
        Harness::<Counter, Calls>::builder()
            .step("s")
            .run(slow_then_fast)
            .timeout(Duration::from_millis(20))
            .retry(RetryPolicy::attempts(attempts).backoff(Duration::from_millis(1)))
            .route(|_: &Counter| "done")
            .on("done")
            .end()
            .start("s")
            .build()
            .unwrap()
    };
    let agent = create_agent_with(
        "a",
        &build(2),
        CallsAgent {
            calls: calls.clone(),
        },
    );
    let err = agent.run(Counter::default()).await.unwrap_err();
    assert!(
        matches!(err, RunError::Timeout { attempts: 2, .. }),
        "{err}"
    );

    calls.store(0, Ordering::SeqCst);
    let agent = create_agent_with(
        "a",
        &build(3),
        CallsAgent {
            calls: calls.clone(),
        },
    );
    let out = agent.run(Counter::default()).await.unwrap();
    assert_eq!(out.state.count, 1);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn failing_step_reports_the_step_and_its_error_as_source() {
    async fn fail(_: Arc<Counter>, _: Cx<()>) -> StepResult<CounterUpdate> {
        let n: u32 = "not a number".parse()?;
        Ok(CounterUpdate::new().count(n))
    }
    let h = Harness::<Counter>::builder()
        .step("parse")
        .run(fail)
        .retry(RetryPolicy::attempts(2))
        .route(|_: &Counter| "done")
        .on("done")
        .end()
        .start("parse")
        .build()
        .unwrap();
    let agent = create_agent("a", &h);
    let err = agent.run(Counter::default()).await.unwrap_err();
    let RunError::Step {
        step,
        attempts,
        source,
    } = &err
    else {
        panic!("{err}")
    };
    assert_eq!((step.as_str(), *attempts), ("parse", 2));
    assert!(source.downcast_ref::<std::num::ParseIntError>().is_some());
    assert!(std::error::Error::source(&err).is_some());
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Order {
    #[field(reduce = append)]
    log: Vec<String>,
}

#[derive(Context)]
struct Shop {
    #[slot(agent)]
    charges: Arc<AtomicU32>,
}

async fn checkout(_: Arc<Order>, cx: Cx<Shop>) -> StepResult<OrderUpdate> {
    let receipt: String = cx
        .once("charge", async {
            let n = cx.charges.fetch_add(1, Ordering::SeqCst) + 1;
            format!("charge #{n}")
        })
        .await?;
    let address: String =
        cx.interrupt(serde_json::json!({"ask": "address?", "receipt": receipt}))?;
    let approved: bool = cx.interrupt("ship it?")?;
    Ok(OrderUpdate::new().log(vec![receipt, address, approved.to_string()]))
}

fn shop() -> Harness<Order, Shop> {
    Harness::<Order, Shop>::builder()
        .step("checkout")
        .run(checkout)
        .route(|_: &Order| "shipped")
        .on("shipped")
        .end()
        .start("checkout")
        .build()
        .unwrap()
}

#[tokio::test]
async fn interrupt_resume_runs_the_journaled_side_effect_exactly_once() {
    let charges = Arc::new(AtomicU32::new(0));
    let agent = create_agent_with(
        "shop",
        &shop(),
        ShopAgent {
            charges: charges.clone(),
        },
    );
    let mut run = agent.run(Order::default());

    let first = (&mut run).await.unwrap();
    assert_eq!(first.signal, Signal::INTERRUPT);
    let asked = first.interrupt.clone().unwrap();
    assert_eq!(asked.step, "checkout");
    assert_eq!(asked.payload["receipt"], "charge #1");
    assert!(
        first.state.log.is_empty(),
        "the interrupted step's update is not applied"
    );

    run.resume("1 Main St", &asked.id).unwrap();
    let second = (&mut run).await.unwrap();
    let asked2 = second.interrupt.clone().unwrap();
    assert_ne!(asked2.id, asked.id, "each pause has its own id");
    assert_eq!(asked2.payload, "ship it?");

    run.resume(true, &asked2.id).unwrap();
    let done = (&mut run).await.unwrap();
    assert_eq!(done.signal, "shipped");
    assert_eq!(done.state.log, ["charge #1", "1 Main St", "true"]);
    assert_eq!(
        charges.load(Ordering::SeqCst),
        1,
        "the side effect ran exactly once"
    );
}

#[tokio::test]
async fn resume_with_wrong_interrupt_id_is_rejected() {
    let agent = create_agent_with(
        "shop",
        &shop(),
        ShopAgent {
            charges: Arc::new(AtomicU32::new(0)),
        },
    );
    let mut run = agent.run(Order::default());
    let out = (&mut run).await.unwrap();
    let real = out.interrupt.unwrap().id;
    let wrong = InterruptId::from("not-the-id");
    let err = run.resume("x", &wrong).unwrap_err();
    assert_eq!(err.given, wrong);
    assert_eq!(err.pending.as_ref(), Some(&real));
    assert!(err.to_string().contains("not-the-id"), "{err}");
    // Still paused on the real one, which still works.
    assert_eq!(run.pending_interrupt().map(|i| &i.id), Some(&real));
    let again = (&mut run).await.unwrap_err();
    assert!(matches!(again, RunError::Paused { .. }), "{again}");
    run.resume("1 Main St", &real).unwrap();
    let next = (&mut run).await.unwrap();
    assert!(next.is_interrupted());
}

#[tokio::test]
async fn resume_of_a_run_that_is_not_paused_is_rejected() {
    let agent = create_agent("counter", &counter_loop());
    let mut run = agent.run(Counter::default());
    (&mut run).await.unwrap();
    let err = run.resume("x", &InterruptId::from("any")).unwrap_err();
    assert_eq!(err.pending, None);
    assert!(matches!((&mut run).await, Err(RunError::Settled)));
}

#[tokio::test]
async fn swallowed_interrupt_still_pauses_the_run() {
    async fn sneaky(_: Arc<Order>, cx: Cx<()>) -> StepResult<OrderUpdate> {
        let answer: Result<String, StepError> = cx.interrupt("ok?");
        Ok(OrderUpdate::new().log(vec![answer.unwrap_or_else(|_| "ignored".into())]))
    }
    let h = Harness::<Order>::builder()
        .step("s")
        .run(sneaky)
        .route(|_: &Order| "done")
        .on("done")
        .end()
        .start("s")
        .build()
        .unwrap();
    let agent = create_agent("a", &h);
    let mut run = agent.run(Order::default());
    let out = (&mut run).await.unwrap();
    assert!(out.is_interrupted());
    assert!(out.state.log.is_empty());
    run.resume("yes", &out.interrupt.unwrap().id).unwrap();
    assert_eq!((&mut run).await.unwrap().state.log, ["yes"]);
}

#[tokio::test]
async fn events_stream_reports_each_step_live() {
    let agent = create_agent("counter", &counter_loop());
    let run = agent.run(Counter {
        until: 2,
        ..Counter::default()
    });
    let events = run.events();
    let out = run.await.unwrap();
    let events: Vec<_> = events.collect().await;
    assert!(matches!(events.first(), Some(RunEvent::Started { .. })));
    let finished: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            RunEvent::StepFinished {
                step,
                update,
                signal,
                ..
            } => Some((step.to_string(), update.count, signal.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        finished,
        [
            ("bump".to_string(), Some(1), None),
            ("check".to_string(), None, Some(Signal::from("again"))),
            ("bump".to_string(), Some(1), None),
            ("check".to_string(), None, Some(Signal::from("done"))),
        ]
    );
    assert!(matches!(
        events.last(),
        Some(RunEvent::Finished { steps: 4, .. })
    ));
    assert_eq!(out.steps, 4);
}

#[derive(Default)]
struct Tally {
    started: AtomicU32,
    steps: AtomicU32,
    added: AtomicU32,
    finished: AtomicU32,
}

#[async_trait::async_trait]
impl Observer<Counter> for Tally {
    async fn run_started(&self, _: &RunInfo) {
        self.started.fetch_add(1, Ordering::SeqCst);
    }
    async fn step_started(&self, _: &RunInfo, _: &StepInfo) {
        self.steps.fetch_add(1, Ordering::SeqCst);
    }
    async fn step_finished(&self, _: &RunInfo, _: &StepInfo, update: &CounterUpdate, _: Duration) {
        self.added
            .fetch_add(update.count.unwrap_or(0), Ordering::SeqCst);
    }
    async fn run_finished(&self, _: &RunInfo, signal: &Signal, _: u64) {
        assert_eq!(signal, "done");
        self.finished.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn composed_observers_each_see_every_hook() {
    let a = Arc::new(Tally::default());
    let b = Arc::new(Tally::default());
    let h = Harness::<Counter>::builder()
        .step("bump")
        .run(bump)
        .next("check")
        .step("check")
        .route(|s: &Counter| if s.count < 3 { "again" } else { "done" })
        .on("again")
        .to("bump")
        .on("done")
        .end()
        .start("bump")
        .observer(a.clone().and(b.clone()))
        .build()
        .unwrap();
    let agent = create_agent("a", &h);
    agent.run(Counter::default()).await.unwrap();
    for t in [&a, &b] {
        assert_eq!(t.started.load(Ordering::SeqCst), 1);
        assert_eq!(t.steps.load(Ordering::SeqCst), 6);
        assert_eq!(t.added.load(Ordering::SeqCst), 3);
        assert_eq!(t.finished.load(Ordering::SeqCst), 1);
    }
}

#[tokio::test]
async fn a_step_keeping_the_state_does_not_see_later_updates() {
    // Copy-on-write: a step that holds on to its state snapshot keeps it.
    let kept: Arc<std::sync::Mutex<Vec<Arc<Counter>>>> = Arc::default();
    #[derive(Context)]
    struct Keep {
        #[slot(run)]
        kept: Arc<std::sync::Mutex<Vec<Arc<Counter>>>>,
    }
    async fn keep(s: Arc<Counter>, cx: Cx<Keep>) -> StepResult<CounterUpdate> {
        cx.kept.lock().unwrap().push(s);
        Ok(CounterUpdate::new().count(1))
    }
    let h = Harness::<Counter, Keep>::builder()
        .step("keep")
        .run(keep)
        .route(|s: &Counter| if s.count < 2 { "again" } else { "done" })
        .on("again")
        .to("keep")
        .on("done")
        .end()
        .start("keep")
        .build()
        .unwrap();
    let agent = create_agent("a", &h);
    let out = agent
        .with(KeepRun { kept: kept.clone() })
        .run(Counter::default())
        .await
        .unwrap();
    assert_eq!(out.state.count, 2);
    let counts: Vec<u32> = kept.lock().unwrap().iter().map(|s| s.count).collect();
    assert_eq!(counts, [0, 1]);
}

#[tokio::test]
async fn a_step_function_takes_only_what_it_uses() {
    #[derive(Context)]
    struct Step {
        #[slot(run)]
        by: u32,
    }
    async fn both(s: Arc<Counter>, cx: Cx<Step>) -> StepResult<CounterUpdate> {
        Ok(CounterUpdate::new().count(s.count + cx.by))
    }
    async fn state_only(s: Arc<Counter>) -> StepResult<CounterUpdate> {
        Ok(CounterUpdate::new().count(s.count))
    }
    async fn context_only(cx: Cx<Step>) -> StepResult<CounterUpdate> {
        Ok(CounterUpdate::new().count(cx.by))
    }
    async fn nothing() -> StepResult<CounterUpdate> {
        Ok(CounterUpdate::new().count(1))
    }
    let h = Harness::<Counter, Step>::builder()
        .step("both")
        .run(both)
        .next("state")
        .step("state")
        .run(state_only)
        .next("context")
        .step("context")
        .run(context_only)
        .next("nothing")
        .step("nothing")
        .run(nothing)
        .next("closure")
        .step("closure")
        .run(|s: Arc<Counter>| async move { Ok(CounterUpdate::new().count(s.count)) })
        .end()
        .start("both")
        .build()
        .unwrap();
    let out = create_agent("a", &h)
        .with(StepRun { by: 5 })
        .run(Counter::default())
        .await
        .unwrap();
    // count is added: 0+5 → 5, +5 → 10, +5 → 15, +1 → 16, +16 → 32.
    assert_eq!(out.state.count, 32);
    assert_eq!(out.signal, Signal::END);
}

#[derive(Debug, serde::Deserialize)]
struct Approval {
    approve: bool,
    note: String,
}

/// Asks a name (a string), then an approval (a struct); logs both.
async fn two_questions(_: Arc<Order>, cx: Cx<()>) -> StepResult<OrderUpdate> {
    let name: String = cx.interrupt("name?")?;
    let approval: Approval = cx.interrupt(format!("approve {name}?"))?;
    Ok(OrderUpdate::new().log(vec![
        name,
        format!("{}: {}", approval.approve, approval.note),
    ]))
}

#[tokio::test]
async fn an_answer_of_the_wrong_shape_is_rejected_and_the_run_waits_on_the_same_interrupt() {
    let h = Harness::<Order>::builder()
        .step("ask")
        .run(two_questions)
        .end()
        .start("ask")
        .build()
        .unwrap();
    let agent = create_agent("a", &h);
    let mut run = agent.run(Order::default());
    let first = (&mut run).await.unwrap().interrupt.unwrap();
    // Not a string, each way a model or a form can get it wrong.
    for bad in [
        serde_json::json!(true),
        serde_json::json!(3),
        serde_json::json!(null),
        serde_json::json!({"name": "Ada"}),
        serde_json::json!(["Ada"]),
    ] {
        run.resume(bad.clone(), &first.id).unwrap();
        let err = (&mut run).await.unwrap_err();
        match &err {
            RunError::AnswerRejected { interrupt, reason } => {
                assert_eq!(*interrupt, first.id, "{bad}");
                assert!(reason.contains("String"), "{bad}: {reason}");
            }
            other => panic!("{bad}: expected AnswerRejected, got {other}"),
        }
        assert_eq!(run.pending_interrupt().unwrap().id, first.id, "{bad}");
    }
    run.resume("Ada", &first.id).unwrap();
    let second = (&mut run).await.unwrap().interrupt.unwrap();
    assert_ne!(second.id, first.id);
    assert_eq!(second.payload, "approve Ada?");
    // The second answer is checked as well; the first stays accepted.
    for bad in [
        serde_json::json!({"approve": "yes", "note": "ok"}),
        serde_json::json!({"note": "missing approve"}),
        serde_json::json!("approve"),
    ] {
        run.resume(bad.clone(), &second.id).unwrap();
        let err = (&mut run).await.unwrap_err();
        assert!(
            matches!(&err, RunError::AnswerRejected { interrupt, .. } if *interrupt == second.id),
            "{bad}: {err}"
        );
    }
    run.resume(
        serde_json::json!({"approve": true, "note": "fine"}),
        &second.id,
    )
    .unwrap();
    let done = (&mut run).await.unwrap();
    assert_eq!(done.state.log, ["Ada", "true: fine"]);
}

#[tokio::test]
async fn a_run_pauses_before_and_after_the_steps_it_is_given_and_goes_on_when_resumed() {
    use harness::Breakpoint;
    let agent = create_agent("counter", &counter_loop());

    // Before `bump`: each time the loop comes back to it, not after a resume.
    let mut run = agent
        .run(Counter::default())
        .pause_before(["bump"])
        .unwrap();
    let mut pauses = 0;
    let out = loop {
        let out = (&mut run).await.unwrap();
        if out.signal != Signal::INTERRUPT {
            break out;
        }
        let i = out.interrupt.unwrap();
        assert_eq!(i.breakpoint, Some(Breakpoint::Before));
        assert_eq!(i.step, "bump");
        assert_eq!(i.payload["breakpoint"], "before");
        // Nothing ran yet at this pause but the bumps before it.
        assert_eq!(out.state.count, pauses);
        pauses += 1;
        // The answer goes to no step.
        run.resume("any answer", &i.id).unwrap();
    };
    assert_eq!(pauses, 3);
    assert_eq!(out.signal, "done");
    assert_eq!(out.state.seen, [1, 2, 3]);

    // After `bump`: the interrupt names the step to run next.
    let mut run = agent
        .run(Counter {
            until: 1,
            ..Counter::default()
        })
        .pause_after(["bump"])
        .unwrap();
    let out = (&mut run).await.unwrap();
    let i = out.interrupt.unwrap();
    assert_eq!(i.breakpoint, Some(Breakpoint::After));
    assert_eq!(
        (i.step.as_str(), &i.payload["step"]),
        ("check", &"bump".into())
    );
    assert_eq!(out.state.count, 1, "bump's update is in before the pause");
    run.resume(serde_json::Value::Null, &i.id).unwrap();
    let out = run.await.unwrap();
    assert_eq!((out.signal.as_str(), out.state.count), ("done", 1));

    // Not a step: refused, naming it and the steps.
    for name in ["Bump", "", "bump "] {
        let err = agent
            .run(Counter::default())
            .pause_before([name])
            .err()
            .unwrap();
        assert_eq!(err.unknown, [name]);
        assert_eq!(err.steps, ["bump", "check"]);
        assert!(err.to_string().contains("bump, check"), "{err}");
        assert!(err.to_string().contains("is not a step"), "{err}");
    }
    // Every unknown name, each once, in the order given.
    for (names, unknown, said) in [
        (
            vec!["nope", "bump", "Check"],
            vec!["nope", "Check"],
            "`nope` and `Check` are not steps",
        ),
        (
            vec!["a", "b", "a", "check", "c"],
            vec!["a", "b", "c"],
            "`a`, `b` and `c` are not steps",
        ),
    ] {
        let err = agent
            .run(Counter::default())
            .pause_after(&names)
            .err()
            .unwrap();
        assert_eq!(err.unknown, unknown);
        assert!(err.to_string().starts_with(said), "{err}");
    }
}

/// How a step panics: before its future exists (in the closure itself),
/// or inside it, with a `&str`, a `String` or another payload.
#[derive(Clone, Copy, Debug)]
enum Panic {
    BeforeTheFuture,
    WithStr,
    WithString,
    WithNumber,
}

/// A step that panics in attempts up to `panics` as `how`, then counts;
/// with a timeout if `limited` (its future is then polled once before the
/// timer starts).
fn panicking(
    how: Panic,
    limited: bool,
    panics: u32,
    attempts: u32,
    calls: Arc<AtomicU32>,
) -> Harness<Counter> {
    let step = Harness::<Counter>::builder()
        .step("bump")
        .run(move |_: Arc<Counter>| {
            let call = calls.fetch_add(1, Ordering::SeqCst) + 1;
            if call <= panics && matches!(how, Panic::BeforeTheFuture) {
                panic!("boom before the future, call {call}");
            }
            async move {
                if call <= panics {
                    match how {
                        Panic::BeforeTheFuture => unreachable!(),
                        Panic::WithStr => panic!("boom"),
                        Panic::WithString => panic!("boom in call {call}"),
                        Panic::WithNumber => std::panic::panic_any(42_u8),
                    }
                }
                Ok(CounterUpdate::new().count(1))
            }
        })
        .retry(RetryPolicy::attempts(attempts).backoff(Duration::from_millis(1)));
    let step = if limited {
        step.timeout(Duration::from_secs(30))
    } else {
        step
    };
    step.end().start("bump").build().unwrap()
}

#[tokio::test]
async fn a_panicking_step_fails_as_an_error_would_and_is_retried() {
    let ways = [
        Panic::BeforeTheFuture,
        Panic::WithStr,
        Panic::WithString,
        Panic::WithNumber,
    ];
    for (how, limited) in ways.into_iter().flat_map(|how| [(how, false), (how, true)]) {
        // Panics on every attempt: the run fails, naming the step and the
        // panic; the process (this test) goes on.
        let calls = Arc::new(AtomicU32::new(0));
        let agent = create_agent(
            "panics",
            &panicking(how, limited, u32::MAX, 2, Arc::clone(&calls)),
        );
        let err = agent.run(Counter::default()).await.unwrap_err();
        let RunError::Step { step, attempts, .. } = &err else {
            panic!("{how:?}: {err:?}");
        };
        assert_eq!((step.as_str(), *attempts), ("bump", 2), "{how:?}");
        assert_eq!(calls.load(Ordering::SeqCst), 2, "{how:?}");
        let shown = err.to_string();
        assert!(shown.contains("the step panicked"), "{how:?}: {shown}");
        if matches!(how, Panic::WithStr | Panic::WithString) {
            assert!(shown.contains("boom"), "{how:?}: {shown}");
        }
        // Panics once: the retry succeeds.
        let calls = Arc::new(AtomicU32::new(0));
        let agent = create_agent("panics", &panicking(how, limited, 1, 2, Arc::clone(&calls)));
        let out = agent.run(Counter::default()).await.unwrap();
        assert_eq!(out.state.count, 1, "{how:?}");
        assert_eq!(calls.load(Ordering::SeqCst), 2, "{how:?}");
    }
}

/// A reducer that panics on 13.
fn thirteen_panics(into: &mut u32, value: u32) {
    assert!(value != 13, "thirteen");
    *into += value;
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Fragile {
    #[field(reduce = thirteen_panics)]
    total: u32,
    #[field(reduce = append)]
    items: Vec<u32>,
}

#[tokio::test]
async fn a_panic_in_a_route_reducer_fan_out_or_sub_agent_mapping_is_the_steps_error() {
    let child = Harness::<Counter>::builder()
        .step("bump")
        .run(bump)
        .end()
        .start("bump")
        .build()
        .unwrap();
    let ok = |_: Arc<Fragile>| async { Ok(FragileUpdate::new().total(1)) };
    let cases: Vec<(&str, &str, Harness<Fragile>)> = vec![
        (
            "route",
            "a",
            Harness::<Fragile>::builder()
                .step("a")
                .run(ok)
                .route(|_: &Fragile| -> &'static str { panic!("route boom") })
                .on("x")
                .end()
                .start("a")
                .build()
                .unwrap(),
        ),
        (
            "reducer",
            "a",
            Harness::<Fragile>::builder()
                .step("a")
                .run(async |_: Arc<Fragile>| Ok(FragileUpdate::new().total(13)))
                .end()
                .start("a")
                .build()
                .unwrap(),
        ),
        (
            "fan-out's items",
            "split",
            Harness::<Fragile>::builder()
                .step("split")
                .run(ok)
                .fan_out("each", |_: &Fragile| -> Vec<u32> { panic!("items boom") })
                .join("done")
                .step("each")
                .run_each(async |i: u32, _: Arc<Fragile>, _: Cx<()>| {
                    Ok(FragileUpdate::new().items(vec![i]))
                })
                .writes(["items"])
                .next("done")
                .step("done")
                .run(ok)
                .end()
                .start("split")
                .build()
                .unwrap(),
        ),
        (
            "collect_errors",
            "each",
            Harness::<Fragile>::builder()
                .step("split")
                .run(ok)
                .fan_out("each", |_: &Fragile| vec![1_u32, 2])
                .collect_errors(|_| -> FragileUpdate { panic!("collect boom") })
                .join("done")
                .step("each")
                .run_each(async |i: u32, _: Arc<Fragile>, _: Cx<()>| {
                    if i == 2 {
                        return Err(StepError::msg("two"));
                    }
                    Ok(FragileUpdate::new().items(vec![i]))
                })
                .writes(["items"])
                .next("done")
                .step("done")
                .run(ok)
                .end()
                .start("split")
                .build()
                .unwrap(),
        ),
        (
            "reducer",
            "each",
            // In the branch that sets 13, as it merges its own update.
            Harness::<Fragile>::builder()
                .step("split")
                .run(ok)
                .fan_out("each", |_: &Fragile| vec![1_u32, 13])
                .join("done")
                .step("each")
                .run_each(async |i: u32, _: Arc<Fragile>, _: Cx<()>| {
                    Ok(FragileUpdate::new().total(i))
                })
                .writes(["total"])
                .next("done")
                .step("done")
                .run(ok)
                .end()
                .start("split")
                .build()
                .unwrap(),
        ),
        (
            "map_in",
            "sub",
            Harness::<Fragile>::builder()
                .step("sub")
                .sub_agent(SubAgent::new(
                    &child,
                    |_: &Fragile| -> Counter { panic!("map_in boom") },
                    |_: &Fragile, _| FragileUpdate::new(),
                ))
                .end()
                .start("sub")
                .build()
                .unwrap(),
        ),
        (
            "map_out",
            "sub",
            Harness::<Fragile>::builder()
                .step("sub")
                .sub_agent(SubAgent::new(
                    &child,
                    |_: &Fragile| Counter {
                        count: 0,
                        seen: Vec::new(),
                        until: 1,
                    },
                    |_: &Fragile, _| -> FragileUpdate { panic!("map_out boom") },
                ))
                .end()
                .start("sub")
                .build()
                .unwrap(),
        ),
    ];
    for (what, step, harness) in cases {
        // On a task of its own, as a server runs it: the panic must not
        // end the task.
        let run = create_agent("fragile", &harness).run(Fragile {
            total: 0,
            items: Vec::new(),
        });
        let out = tokio::spawn(run).await;
        let err = match out {
            Ok(Err(err)) => err,
            Ok(Ok(o)) => panic!("{what}: the run ended {:?}", o.signal),
            Err(join) => panic!("{what}: the panic ended the run's task: {join}"),
        };
        let shown = err.to_string();
        assert!(
            shown.contains(&format!("`{step}`")) && shown.contains(&format!("its {what} panicked")),
            "{what}: {shown}"
        );
    }
}
