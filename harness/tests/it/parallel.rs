//! Parallel branches, fan-out and join: the loop is checked when built, the
//! join runs once, branch updates merge in branch order, a failing branch
//! fails the run (cancelling the others) or is collected, an interrupt in a
//! branch pauses the run and resumes where it asked.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use futures::StreamExt;
use harness::{
    BranchFailure, Cx, Harness, HarnessState, RunError, RunEvent, StepError, StepResult, TaskPath,
    Violation, create_agent,
};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Work {
    /// Written by every branch: merged.
    #[field(reduce = append)]
    log: Vec<String>,
    #[field(reduce = add)]
    total: u64,
    /// Replaced: only one writer at a time may touch it.
    summary: String,
    items: Vec<u64>,
}

fn note(s: &str) -> WorkUpdate {
    WorkUpdate::new().log(vec![s.to_string()])
}

/// `slow` and `slow2` (a two-step branch that takes a while) and `fast` (one
/// step, done at once) fork after `plan` and join at `join`, which counts
/// its runs in `joins`.
fn unequal(joins: Arc<AtomicU32>) -> Harness<Work> {
    Harness::<Work>::builder()
        .step("plan")
        .run(async |_: Arc<Work>| Ok(note("plan")))
        .fork(["slow", "fast"])
        .join("join")
        .step("slow")
        .run(async |_: Arc<Work>| {
            tokio::time::sleep(Duration::from_millis(30)).await;
            Ok(note("slow"))
        })
        .writes(["log"])
        .next("slow2")
        .step("slow2")
        .run(async |s: Arc<Work>| {
            // A branch sees its own updates, not its siblings'.
            assert_eq!(s.log, ["plan", "slow"]);
            Ok(note("slow2"))
        })
        .writes(["log"])
        .next("join")
        .step("fast")
        .run(async |_: Arc<Work>| Ok(note("fast").total(1)))
        .writes(["log", "total"])
        .next("join")
        .step("join")
        .run(move |s: Arc<Work>| {
            let joins = Arc::clone(&joins);
            async move {
                joins.fetch_add(1, Ordering::SeqCst);
                Ok(WorkUpdate::new().summary(s.log.join(",")))
            }
        })
        .end()
        .start("plan")
        .build()
        .unwrap()
}

#[tokio::test]
async fn the_join_runs_once_after_branches_of_unequal_length_merged_in_branch_order() {
    let joins = Arc::new(AtomicU32::new(0));
    let agent = create_agent("unequal", &unequal(Arc::clone(&joins)));
    for round in 1..=3 {
        let out = agent.run(Work::default()).await.unwrap();
        // `fast` finished long before `slow2`, yet merges after it: branch
        // order, not finishing order.
        assert_eq!(out.state.log, ["plan", "slow", "slow2", "fast"]);
        assert_eq!(out.state.summary, "plan,slow,slow2,fast");
        assert_eq!(out.state.total, 1);
        assert_eq!(out.steps, 5, "plan, slow, slow2, fast, join");
        assert_eq!(
            joins.load(Ordering::SeqCst),
            round,
            "the join runs once per run"
        );
    }
}

#[tokio::test]
async fn every_event_of_a_branch_carries_its_path_and_steps_can_emit_their_own() {
    let h = Harness::<Work>::builder()
        .step("plan")
        .run(async |_: Arc<Work>| Ok(note("plan")))
        .fork(["a", "b"])
        .join("join")
        .step("a")
        .run(async |cx: Cx<()>| {
            cx.emit("progress", serde_json::json!({ "half": true }));
            Ok(note("a"))
        })
        .writes(["log"])
        .next("join")
        .step("b")
        .run(async |_: Arc<Work>| Ok(note("b")))
        .writes(["log"])
        .next("join")
        .step("join")
        .route(|_: &Work| "done")
        .on("done")
        .end()
        .start("plan")
        .build()
        .unwrap();
    let agent = create_agent("events", &h);
    let run = agent.run(Work::default());
    let events = run.events();
    run.await.unwrap();
    let events: Vec<RunEvent<Work>> = events.collect().await;
    let finished: Vec<(String, String)> = events
        .iter()
        .filter_map(|e| match e {
            RunEvent::StepFinished { path, step, .. } => {
                Some((path.as_str().to_string(), step.to_string()))
            }
            _ => None,
        })
        .collect();
    assert!(finished.contains(&(String::new(), "plan".into())));
    assert!(finished.contains(&("a".into(), "a".into())));
    assert!(finished.contains(&("b".into(), "b".into())));
    assert!(finished.contains(&(String::new(), "join".into())));
    let custom: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            RunEvent::Custom {
                path,
                step,
                kind,
                payload,
            } => Some((
                path.clone(),
                step.to_string(),
                kind.to_string(),
                payload.clone(),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        custom,
        [(
            TaskPath::from("a"),
            "a".to_string(),
            "progress".to_string(),
            serde_json::json!({ "half": true })
        )]
    );
    let forked = events.iter().any(|e| {
        matches!(e, RunEvent::Forked { branches, .. } if *branches == [TaskPath::from("a"), TaskPath::from("b")])
    });
    let joined = events
        .iter()
        .any(|e| matches!(e, RunEvent::Joined { join, .. } if &**join == "join"));
    assert!(forked && joined, "{events:?}");
}

fn map_reduce(limit: usize, running: Arc<AtomicU32>, peak: Arc<AtomicU32>) -> Harness<Work> {
    Harness::<Work>::builder()
        .step("split")
        .route(|_: &Work| "items")
        .on("items")
        .fan_out("square", |s: &Work| s.items.clone())
        .limit(limit)
        .join("sum")
        .step("square")
        .run_each(move |item: u64, _: Arc<Work>, _: Cx<()>| {
            let running = Arc::clone(&running);
            let peak = Arc::clone(&peak);
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                // Later items finish first.
                tokio::time::sleep(Duration::from_millis(40 - item * 5)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                Ok(WorkUpdate::new()
                    .total(item * item)
                    .log(vec![format!("{item}")]))
            }
        })
        .writes(["total", "log"])
        .next("sum")
        .step("sum")
        .run(async |s: Arc<Work>| Ok(WorkUpdate::new().summary(format!("{}", s.total))))
        .end()
        .start("split")
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_fan_out_runs_one_branch_per_item_within_its_limit_and_merges_in_item_order() {
    for limit in [1, 2, 5] {
        let running = Arc::new(AtomicU32::new(0));
        let peak = Arc::new(AtomicU32::new(0));
        let agent = create_agent(
            "map",
            &map_reduce(limit, Arc::clone(&running), Arc::clone(&peak)),
        );
        let state = Work {
            items: vec![1, 2, 3, 4, 5],
            ..Work::default()
        };
        let out = agent.run(state).await.unwrap();
        assert_eq!(out.state.total, 1 + 4 + 9 + 16 + 25);
        assert_eq!(out.state.log, ["1", "2", "3", "4", "5"], "limit {limit}");
        assert_eq!(out.state.summary, "55");
        assert_eq!(
            peak.load(Ordering::SeqCst),
            u32::try_from(limit).unwrap(),
            "at most (and here exactly) {limit} branches at once"
        );
    }
    // No item: no branch, and the join still runs once.
    let agent = create_agent("map", &map_reduce(2, Arc::default(), Arc::default()));
    let out = agent.run(Work::default()).await.unwrap();
    assert_eq!(out.state.summary, "0");
    assert_eq!(out.steps, 2);
}

/// A fan-out of `items` to a step that counts its runs in `ran`, bounded
/// by `max` branches (the default without).
fn wide(max: Option<usize>, ran: Arc<AtomicU32>) -> Harness<Work> {
    let fork = Harness::<Work>::builder()
        .step("split")
        .run(async |_: Arc<Work>| Ok(note("split")))
        .fan_out("one", |s: &Work| s.items.clone());
    let fork = match max {
        Some(n) => fork.max_branches(n),
        None => fork,
    };
    fork.join("sum")
        .step("one")
        .run_each(move |item: u64, _: Arc<Work>, _: Cx<()>| {
            ran.fetch_add(1, Ordering::SeqCst);
            async move { Ok(WorkUpdate::new().total(item)) }
        })
        .writes(["total"])
        .next("sum")
        .step("sum")
        .run(async |_: Arc<Work>| Ok(note("sum")))
        .end()
        .start("split")
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_fan_out_wider_than_its_max_branches_fails_before_any_branch_starts() {
    let cases = [
        (Some(3), 2, true),
        (Some(3), 3, true),
        (Some(3), 4, false),
        (Some(1), 50, false),
        (None, harness::MAX_BRANCHES, true),
        (None, harness::MAX_BRANCHES + 1, false),
        (None, 3 * harness::MAX_BRANCHES, false),
    ];
    for (max, count, fits) in cases {
        let ran = Arc::new(AtomicU32::new(0));
        let agent = create_agent("wide", &wide(max, Arc::clone(&ran)));
        let items: Vec<u64> = (1..=u64::try_from(count).unwrap()).collect();
        let state = Work {
            items,
            ..Work::default()
        };
        let result = agent.run(state).await;
        let case = format!("max {max:?}, {count} inputs");
        if fits {
            let out = result.unwrap();
            let n = u64::try_from(count).unwrap();
            assert_eq!(out.state.total, n * (n + 1) / 2, "{case}");
            assert_eq!(ran.load(Ordering::SeqCst), u32::try_from(count).unwrap());
        } else {
            let err = result.unwrap_err();
            let RunError::FanOut { step, reason } = &err else {
                panic!("{case}: {err}");
            };
            assert_eq!(step, "split", "{case}");
            assert!(
                reason.contains(&format!("{count} inputs")),
                "{case}: {reason}"
            );
            assert!(reason.contains("max_branches"), "{case}: {reason}");
            assert_eq!(ran.load(Ordering::SeqCst), 0, "{case}: a branch ran");
        }
    }
}

#[test]
fn max_branches_of_zero_or_on_a_fork_of_named_steps_is_refused_when_built() {
    let v = violations(
        Harness::<Work>::builder()
            .step("plan")
            .run(async |_: Arc<Work>| Ok(note("p")))
            .fork(["a", "b"])
            .max_branches(5)
            .join("join")
            .step("a")
            .run(async |_: Arc<Work>| Ok(note("a")))
            .writes(["log"])
            .next("join")
            .step("b")
            .run(async |_: Arc<Work>| Ok(note("b")))
            .writes(["log"])
            .next("join")
            .step("join")
            .route(|_: &Work| "more")
            .on("more")
            .fan_out("each", |s: &Work| s.items.clone())
            .max_branches(0)
            .join("done")
            .step("each")
            .run_each(async |_: u64, _: Arc<Work>, _: Cx<()>| Ok(note("e")))
            .writes(["log"])
            .next("done")
            .step("done")
            .run(async |_: Arc<Work>| Ok(note("d")))
            .end()
            .start("plan")
            .build(),
    );
    let rendered: Vec<String> = v.iter().map(ToString::to_string).collect();
    assert_eq!(rendered.len(), 2, "{rendered:#?}");
    assert!(
        rendered
            .iter()
            .any(|r| r.contains("the setting max_branches of the fork at `plan` is invalid")),
        "{rendered:#?}"
    );
    assert!(
        rendered
            .iter()
            .any(|r| r.contains("max_branches of the fan-out at `join/more`") && r.contains("0")),
        "{rendered:#?}"
    );
}

fn failing(collect: bool, finished_late: Arc<AtomicBool>) -> Harness<Work> {
    let fork = Harness::<Work>::builder()
        .step("plan")
        .run(async |_: Arc<Work>| Ok(note("plan")))
        .fork(["ok", "slow", "bad"]);
    let fork = if collect {
        fork.collect_errors(|f: BranchFailure| {
            WorkUpdate::new().log(vec![format!(
                "{} failed at {}: {}",
                f.path, f.step, f.error
            )])
        })
    } else {
        fork
    };
    fork.join("join")
        .step("ok")
        .run(async |_: Arc<Work>| Ok(note("ok")))
        .writes(["log"])
        .next("join")
        .step("slow")
        .run(move |_: Arc<Work>| {
            let finished_late = Arc::clone(&finished_late);
            async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                finished_late.store(true, Ordering::SeqCst);
                Ok(note("slow"))
            }
        })
        .writes(["log"])
        .next("join")
        .step("bad")
        .run(async |_: Arc<Work>| -> StepResult<WorkUpdate> { Err(StepError::msg("no luck")) })
        .writes(["log"])
        .next("join")
        .step("join")
        .run(async |_: Arc<Work>| Ok(note("join")))
        .end()
        .start("plan")
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_failing_branch_fails_the_run_and_cancels_the_others_by_default() {
    let finished_late = Arc::new(AtomicBool::new(false));
    let agent = create_agent("fail", &failing(false, Arc::clone(&finished_late)));
    let err = agent.run(Work::default()).await.unwrap_err();
    match &err {
        RunError::Branch { path, source } => {
            assert_eq!(path.as_str(), "bad");
            assert!(matches!(**source, RunError::Step { ref step, .. } if step == "bad"));
        }
        other => panic!("expected a branch error, got {other}"),
    }
    assert!(err.to_string().contains("no luck"), "{err}");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        !finished_late.load(Ordering::SeqCst),
        "the slow branch was cancelled, not left running"
    );
}

/// A fan-out whose branch step declares it writes `total` only, and whose
/// collected failures set `collected(path)`.
fn collecting_fan_out(
    collected: impl Fn(&TaskPath) -> WorkUpdate + Send + Sync + 'static,
) -> Harness<Work> {
    Harness::<Work>::builder()
        .step("split")
        .run(async |_: Arc<Work>| Ok(WorkUpdate::new().items(vec![1, 2, 3])))
        .fan_out("each", |w: &Work| w.items.clone())
        .collect_errors(move |f: BranchFailure| collected(&f.path))
        .join("done")
        .step("each")
        .run_each(async |i: u64, _: Arc<Work>, _: Cx<()>| {
            if i > 1 {
                Err(StepError::msg(format!("bad {i}")))
            } else {
                Ok(WorkUpdate::new().total(i))
            }
        })
        .writes(["total"])
        .next("done")
        .step("done")
        .run(async |_: Arc<Work>| Ok(WorkUpdate::new()))
        .end()
        .start("split")
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_collected_failure_sets_a_field_that_keeps_one_value_only_if_its_step_declares_it() {
    // `summary` keeps one value and the step does not declare it: two
    // failed branches would each set it, one silently lost. The run fails
    // naming the branch, the step and the field, before anything is merged.
    type Collected = Box<dyn Fn(&TaskPath) -> WorkUpdate + Send + Sync>;
    let refused: [Collected; 3] = [
        Box::new(|p: &TaskPath| WorkUpdate::new().summary(format!("{p} failed"))),
        Box::new(|p: &TaskPath| WorkUpdate::new().total(0).summary(p.to_string())),
        Box::new(|p: &TaskPath| note("x").summary(p.to_string()).total(1)),
    ];
    for collected in refused {
        let agent = create_agent("collect", &collecting_fan_out(collected));
        let err = agent.run(Work::default()).await.unwrap_err();
        match &err {
            RunError::UndeclaredCollectedWrite {
                branch,
                step,
                field,
            } => {
                assert_eq!(branch, "each#1", "{err}");
                assert_eq!(step, "each");
                assert_eq!(field, "summary");
            }
            other => panic!("expected UndeclaredCollectedWrite, got {other}"),
        }
        assert!(err.to_string().contains(".writes("), "{err}");
    }
    // A field the step declares, or one that merges (`log` appends), may
    // be set: both failures count.
    let agent = create_agent(
        "collect",
        &collecting_fan_out(|p: &TaskPath| note(&format!("{p} failed")).total(100)),
    );
    let out = agent.run(Work::default()).await.unwrap();
    assert_eq!(out.state.total, 201);
    assert_eq!(out.state.log, ["each#1 failed", "each#2 failed"]);
}

#[tokio::test]
async fn a_collected_failure_may_set_what_an_earlier_step_of_its_branch_declares() {
    // Branch `a`: `a1` declares `summary`, then `a2` (which declares
    // `total`) fails; branch `b` writes `log` only. `summary` is the
    // branch's own: its failure may set it. A field no step of the branch
    // declares (`items`) is still refused.
    let fork = |collected: fn(&BranchFailure) -> WorkUpdate| {
        Harness::<Work>::builder()
            .step("plan")
            .run(async |_: Arc<Work>| Ok(note("plan")))
            .fork(["a1", "b"])
            .collect_errors(move |f: BranchFailure| collected(&f))
            .join("join")
            .step("a1")
            .run(async |_: Arc<Work>| Ok(WorkUpdate::new().summary("a1")))
            .writes(["summary"])
            .next("a2")
            .step("a2")
            .run(async |_: Arc<Work>| -> StepResult<WorkUpdate> { Err(StepError::msg("no")) })
            .writes(["total"])
            .next("join")
            .step("b")
            .run(async |_: Arc<Work>| Ok(note("b")))
            .writes(["log"])
            .next("join")
            .step("join")
            .run(async |_: Arc<Work>| Ok(note("join")))
            .end()
            .start("plan")
            .build()
            .unwrap()
    };
    let out = create_agent(
        "a",
        &fork(|f| WorkUpdate::new().summary(format!("{} failed", f.step))),
    )
    .run(Work::default())
    .await
    .unwrap();
    assert_eq!(out.state.summary, "a2 failed");
    let err = create_agent("a", &fork(|_| WorkUpdate::new().items(vec![1])))
        .run(Work::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, RunError::UndeclaredCollectedWrite { branch, step, field }
            if branch == "a1" && step == "a2" && field == "items"),
        "{err}"
    );
}

#[tokio::test]
async fn a_fork_that_collects_errors_merges_the_failure_as_a_value() {
    let agent = create_agent("collect", &failing(true, Arc::default()));
    let out = agent.run(Work::default()).await.unwrap();
    assert_eq!(
        out.state.log,
        [
            "plan",
            "ok",
            "slow",
            "bad failed at bad: step `bad` failed after 1 attempt(s): no luck",
            "join"
        ]
    );
}

#[tokio::test]
async fn an_interrupt_in_a_branch_pauses_the_run_and_resumes_in_that_branch() {
    let asked = Arc::new(AtomicU32::new(0));
    let other = Arc::new(AtomicU32::new(0));
    let (a, o) = (Arc::clone(&asked), Arc::clone(&other));
    let h = Harness::<Work>::builder()
        .step("plan")
        .run(async |_: Arc<Work>| Ok(note("plan")))
        .fork(["ask", "other"])
        .join("join")
        .step("ask")
        .run(move |cx: Cx<()>| {
            let a = Arc::clone(&a);
            async move {
                a.fetch_add(1, Ordering::SeqCst);
                let answer: String = cx.interrupt("name?")?;
                Ok(note(&format!("answer {answer}")))
            }
        })
        .writes(["log"])
        .next("join")
        .step("other")
        .run(move |_: Arc<Work>| {
            let o = Arc::clone(&o);
            async move {
                o.fetch_add(1, Ordering::SeqCst);
                Ok(note("other"))
            }
        })
        .writes(["log"])
        .next("join")
        .step("join")
        .run(async |_: Arc<Work>| Ok(note("join")))
        .end()
        .start("plan")
        .build()
        .unwrap();
    let agent = create_agent("ask", &h);
    let mut run = agent.run(Work::default());
    let out = (&mut run).await.unwrap();
    let interrupt = out.interrupt.unwrap();
    assert_eq!(interrupt.path.as_str(), "ask");
    assert_eq!(interrupt.step, "ask");
    // An answer of the wrong shape is refused; the run still waits.
    run.resume(serde_json::json!(42), &interrupt.id).unwrap();
    let err = (&mut run).await.unwrap_err();
    assert!(matches!(err, RunError::AnswerRejected { .. }), "{err}");
    run.resume("Ada", &interrupt.id).unwrap();
    let out = run.await.unwrap();
    assert_eq!(out.state.log, ["plan", "answer Ada", "other", "join"]);
    assert_eq!(other.load(Ordering::SeqCst), 1, "the other branch ran once");
    assert_eq!(
        asked.load(Ordering::SeqCst),
        3,
        "ask, rejected answer, answer"
    );
}

#[tokio::test]
async fn interrupt_with_refuses_answers_its_check_rejects_and_keeps_waiting() {
    let h = Harness::<Work>::builder()
        .step("ask")
        .run(async |cx: Cx<()>| {
            let n: u64 = cx.interrupt_with("1..=10?", |n: u64| {
                if (1..=10).contains(&n) {
                    Ok(n)
                } else {
                    Err(format!("{n} is out of range"))
                }
            })?;
            Ok(WorkUpdate::new().total(n))
        })
        .end()
        .start("ask")
        .build()
        .unwrap();
    let agent = create_agent("check", &h);
    let mut run = agent.run(Work::default());
    let interrupt = (&mut run).await.unwrap().interrupt.unwrap();
    for bad in [
        serde_json::json!(0),
        serde_json::json!(11),
        serde_json::json!("x"),
    ] {
        run.resume(bad.clone(), &interrupt.id).unwrap();
        let err = (&mut run).await.unwrap_err();
        let RunError::AnswerRejected {
            interrupt: id,
            reason,
        } = err
        else {
            panic!("{bad} was not rejected");
        };
        assert_eq!(id, interrupt.id, "the same interrupt still waits");
        assert!(reason.contains("interrupt #1 of step `ask`"), "{reason}");
    }
    run.resume(7, &interrupt.id).unwrap();
    assert_eq!(run.await.unwrap().state.total, 7);
}

fn violations(built: Result<Harness<Work>, harness::LoopValidationError>) -> Vec<Violation> {
    built.unwrap_err().violations
}

#[test]
fn branches_that_may_both_write_a_replaced_field_are_refused_when_built() {
    // Undeclared writes: each branch may write anything, `summary` and
    // `items` included.
    let v = violations(
        Harness::<Work>::builder()
            .step("plan")
            .run(async |_: Arc<Work>| Ok(note("p")))
            .fork(["a", "b"])
            .join("join")
            .step("a")
            .run(async |_: Arc<Work>| Ok(note("a")))
            .next("join")
            .step("b")
            .run(async |_: Arc<Work>| Ok(note("b")))
            .next("join")
            .step("join")
            .route(|_: &Work| "x")
            .on("x")
            .end()
            .start("plan")
            .build(),
    );
    let fields: Vec<&str> = v
        .iter()
        .filter_map(|v| match v {
            Violation::ParallelWrite {
                field,
                branches,
                fork,
            } => {
                assert_eq!(fork, "plan");
                assert_eq!(branches, &["a", "b"]);
                Some(field.as_str())
            }
            _ => None,
        })
        .collect();
    assert_eq!(fields, ["summary", "items"], "{v:?}");

    // Declared, and both name `summary`; a third branch is fine.
    let v = violations(
        Harness::<Work>::builder()
            .step("plan")
            .run(async |_: Arc<Work>| Ok(note("p")))
            .fork(["a", "b", "c"])
            .join("join")
            .step("a")
            .run(async |_: Arc<Work>| Ok(note("a")))
            .writes(["log", "summary"])
            .next("a2")
            .step("a2")
            .route(|_: &Work| "on")
            .on("on")
            .to("join")
            .step("b")
            .run(async |_: Arc<Work>| Ok(note("b")))
            .writes(["total"])
            .next("b2")
            .step("b2")
            .run(async |_: Arc<Work>| Ok(note("b")))
            .writes(["summary"])
            .next("join")
            .step("c")
            .run(async |_: Arc<Work>| Ok(note("c")))
            .writes(["log", "total"])
            .next("join")
            .step("join")
            .route(|_: &Work| "x")
            .on("x")
            .end()
            .start("plan")
            .build(),
    );
    assert_eq!(
        v,
        [Violation::ParallelWrite {
            fork: "plan".into(),
            field: "summary".into(),
            branches: vec!["a".into(), "b".into()],
        }]
    );

    // A fan-out's step competes with itself.
    let v = violations(
        Harness::<Work>::builder()
            .step("split")
            .run(async |_: Arc<Work>| Ok(note("p")))
            .fan_out("each", |s: &Work| s.items.clone())
            .join("join")
            .step("each")
            .run_each(async |_: u64, _: Arc<Work>, _: Cx<()>| Ok(note("x")))
            .writes(["log", "summary"])
            .next("join")
            .step("join")
            .route(|_: &Work| "x")
            .on("x")
            .end()
            .start("split")
            .build(),
    );
    assert!(
        matches!(&v[..], [Violation::ParallelWrite { field, branches, .. }]
            if field == "summary" && branches == &["each#*"]),
        "{v:?}"
    );
    assert!(v[0].to_string().contains("give it a reducer that merges"));
}

#[test]
fn joins_that_branches_cannot_reach_and_mistyped_fan_outs_are_refused_when_built() {
    let v = violations(
        Harness::<Work>::builder()
            .step("plan")
            .run(async |_: Arc<Work>| Ok(note("p")))
            .fork(["ends", "loops", "fine"])
            .join("join")
            // Ends the run before the join.
            .step("ends")
            .run(async |_: Arc<Work>| Ok(note("e")))
            .writes(["log"])
            .end()
            // Never leaves its loop towards the join.
            .step("loops")
            .run(async |_: Arc<Work>| Ok(note("l")))
            .writes(["log"])
            .route(|_: &Work| "again")
            .on("again")
            .to("loops")
            .on("out")
            .to("elsewhere")
            .step("elsewhere")
            .run(async |_: Arc<Work>| Ok(note("x")))
            .writes(["log"])
            .end()
            .step("fine")
            .run(async |_: Arc<Work>| Ok(note("f")))
            .writes(["log", "nope"])
            .next("join")
            .step("join")
            .route(|_: &Work| "x")
            .on("x")
            .end()
            // A fan-out of numbers to a step that takes text, and one to a
            // step that takes nothing.
            .step("split")
            .route(|_: &Work| "go")
            .on("go")
            .fan_out("texts", |s: &Work| s.items.clone())
            .join("join2")
            .on("again")
            .fan_out("plain", |s: &Work| s.items.clone())
            .join("join2")
            .step("texts")
            .run_each(async |_: String, _: Arc<Work>, _: Cx<()>| Ok(note("t")))
            .writes(["log"])
            .next("join2")
            .step("plain")
            .run(async |_: Arc<Work>| Ok(note("p")))
            .writes(["log"])
            .next("join2")
            .step("join2")
            .route(|_: &Work| "x")
            .on("x")
            .to("texts")
            .start("plan")
            .build(),
    );
    let rendered: Vec<String> = v.iter().map(ToString::to_string).collect();
    let has = |needle: &str| rendered.iter().any(|r| r.contains(needle));
    assert!(
        has(
            "the branch `ends` of the fork at `plan` never reaches its join `join`: it can end the run at step `ends`"
        ),
        "{rendered:#?}"
    );
    assert!(
        has(
            "the branch `loops` of the fork at `plan` never reaches its join `join`: it can end the run at step `elsewhere`"
        ),
        "{rendered:#?}"
    );
    assert!(
        has("step `fine` declares that it writes `nope`"),
        "{rendered:#?}"
    );
    assert!(
        has("the fan-out at `split/go` sends `u64` to step `texts`, which takes `String`"),
        "{rendered:#?}"
    );
    assert!(
        has("the fan-out at `split/again` sends `u64` to step `plain`, which takes no input"),
        "{rendered:#?}"
    );
    assert!(
        has(
            "step `texts` takes an input (run_each) and can only start a fan-out's branch, but it is reached from step `join2` on signal `x`"
        ),
        "{rendered:#?}"
    );
    assert!(!has("`fine` of the fork"), "{rendered:#?}");
}

#[test]
fn mermaid_and_dot_draw_branches_fan_outs_and_joins() {
    let h = map_reduce(3, Arc::default(), Arc::default());
    let mermaid = h.to_mermaid();
    assert!(
        mermaid.contains("==>|\"items: each, 3 at once\"|"),
        "{mermaid}"
    );
    assert!(mermaid.contains("-.->|\"join\"|"), "{mermaid}");
    let dot = unequal(Arc::default()).to_dot();
    assert!(dot.contains("\"plan\" -> \"slow\" [style=bold];"), "{dot}");
    assert!(dot.contains("\"plan\" -> \"fast\" [style=bold];"), "{dot}");
    assert!(
        dot.contains("\"plan\" -> \"join\" [label=\"join\", style=dashed];"),
        "{dot}"
    );
}

#[tokio::test]
async fn events_filter_by_kind_and_path() {
    let agent = create_agent("map", &map_reduce(2, Arc::default(), Arc::default()));
    let run = agent.run(Work {
        items: vec![1, 2, 3],
        ..Work::default()
    });
    let events = run.events();
    run.await.unwrap();
    let events: Vec<RunEvent<Work>> = events.collect().await;
    let kinds: Vec<&str> = events.iter().map(RunEvent::kind).collect();
    assert_eq!(kinds.first(), Some(&"started"));
    assert_eq!(kinds.last(), Some(&"finished"));
    assert_eq!(kinds.iter().filter(|k| **k == "forked").count(), 1);
    assert_eq!(kinds.iter().filter(|k| **k == "joined").count(), 1);
    let mut in_branches: Vec<String> = events
        .iter()
        .filter(|e| e.kind() == "step_finished" && !e.path().is_root())
        .map(|e| e.path().to_string())
        .collect();
    in_branches.sort();
    assert_eq!(in_branches, ["square#0", "square#1", "square#2"]);
}
