//! The answer to an interrupt is told accepted (`RunEvent::AnswerAccepted`)
//! as soon as the step that asked reads and keeps it, once, whatever the
//! step does next; a refused answer is never told accepted.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use futures::StreamExt;
use harness::{
    Cx, Harness, HarnessState, InterruptId, RunEvent, StepError, SubAgent, TaskPath, create_agent,
};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use tokio::sync::Notify;

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Form {
    #[field(reduce = append)]
    answers: Vec<u32>,
}

/// The accepted answers among `events`: (path, step, interrupt).
fn accepted(events: &[RunEvent<Form>]) -> Vec<(TaskPath, String, InterruptId)> {
    events
        .iter()
        .filter_map(|e| match e {
            RunEvent::AnswerAccepted {
                path,
                step,
                interrupt,
            } => Some((path.clone(), step.to_string(), interrupt.clone())),
            _ => None,
        })
        .collect()
}

/// The step reads its answer, then waits until `go` is notified: the
/// answer is told accepted while the step still works.
#[tokio::test]
async fn an_answer_is_told_accepted_as_soon_as_the_step_reads_it() {
    let go = Arc::new(Notify::new());
    let g = Arc::clone(&go);
    let h = Harness::<Form>::builder()
        .step("ask")
        .run(move |cx: Cx<()>| {
            let go = Arc::clone(&g);
            async move {
                let n: u32 = cx.interrupt("how many?")?;
                go.notified().await;
                Ok(FormUpdate::new().answers(vec![n]))
            }
        })
        .end()
        .start("ask")
        .build()
        .unwrap();
    let agent = create_agent("form", &h);
    let mut run = agent.run(Form::default());
    let mut events = run.events();
    let interrupt = (&mut run).await.unwrap().interrupt.unwrap();
    run.resume(3, &interrupt.id).unwrap();
    let running = tokio::spawn(run.into_future());
    let told = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(event) = events.next().await {
            if let RunEvent::AnswerAccepted {
                path,
                step,
                interrupt,
            } = event
            {
                return (path, step.to_string(), interrupt);
            }
            assert!(
                !matches!(event, RunEvent::StepFinished { .. }),
                "the step finished before its answer was told accepted"
            );
        }
        panic!("the stream ended without the answer told accepted");
    })
    .await
    .expect("the answer is told accepted while the step still waits");
    assert_eq!(told, (TaskPath::root(), "ask".to_owned(), interrupt.id));
    go.notify_one();
    let out = running.await.unwrap().unwrap();
    assert_eq!(out.state.answers, [3]);
}

/// A step that asks twice: each answer is told once, on the resume that
/// gave it; the step's retry after a failure reads its answers untold; a
/// refused answer is not told.
#[tokio::test]
async fn each_answer_is_told_once_and_a_refused_one_never() {
    let failures = Arc::new(AtomicU32::new(0));
    let f = Arc::clone(&failures);
    let h = Harness::<Form>::builder()
        .step("ask")
        .run(move |cx: Cx<()>| {
            let f = Arc::clone(&f);
            async move {
                let first: u32 = cx.interrupt("first?")?;
                let second: u32 = cx.interrupt_with("second (under 10)?", |n: u32| {
                    if n < 10 {
                        Ok(n)
                    } else {
                        Err(format!("{n} is not under 10"))
                    }
                })?;
                // Fails once after reading both answers: the retry reads
                // them again.
                if f.fetch_add(1, Ordering::SeqCst) == 0 {
                    return Err(StepError::msg("flaky"));
                }
                Ok(FormUpdate::new().answers(vec![first, second]))
            }
        })
        .retry(harness::RetryPolicy::attempts(2))
        .end()
        .start("ask")
        .build()
        .unwrap();
    let agent = create_agent("form", &h);
    let mut run = agent.run(Form::default());
    let events = run.events();
    let first = (&mut run).await.unwrap().interrupt.unwrap();
    run.resume(1, &first.id).unwrap();
    let second = (&mut run).await.unwrap().interrupt.unwrap();
    assert_ne!(first.id, second.id);
    // Refused by the check, then by its shape.
    run.resume(12, &second.id).unwrap();
    assert!((&mut run).await.is_err());
    run.resume("two", &second.id).unwrap();
    assert!((&mut run).await.is_err());
    run.resume(2, &second.id).unwrap();
    let out = (&mut run).await.unwrap();
    assert_eq!(out.state.answers, [1, 2]);
    assert_eq!(failures.load(Ordering::SeqCst), 2, "the step was retried");
    drop(run);
    let events: Vec<_> = events.collect().await;
    let root = TaskPath::root;
    assert_eq!(
        accepted(&events),
        [
            (root(), "ask".to_owned(), first.id),
            (root(), "ask".to_owned(), second.id)
        ]
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| e.kind() == "answer_rejected")
            .count(),
        2
    );
}

/// An answer given to a sub-agent's step is told with the sub-agent's
/// path, on the parent's stream.
#[tokio::test]
async fn an_answer_in_a_sub_agent_is_told_with_its_path() {
    let child = Harness::<Form>::builder()
        .step("confirm")
        .run(async |cx: Cx<()>| {
            let n: u32 = cx.interrupt("confirm?")?;
            Ok(FormUpdate::new().answers(vec![n]))
        })
        .end()
        .start("confirm")
        .build()
        .unwrap();
    let h = Harness::<Form>::builder()
        .step("review")
        .sub_agent(SubAgent::new(
            &child,
            |_: &Form| Form::default(),
            |_: &Form, out: harness::SubOutcome<Form>| FormUpdate::new().answers(out.state.answers),
        ))
        .end()
        .start("review")
        .build()
        .unwrap();
    let agent = create_agent("parent", &h);
    let mut run = agent.run(Form::default());
    let events = run.events();
    let interrupt = (&mut run).await.unwrap().interrupt.unwrap();
    assert_eq!(interrupt.path, TaskPath::from("review"));
    run.resume(5, &interrupt.id).unwrap();
    assert_eq!((&mut run).await.unwrap().state.answers, [5]);
    drop(run);
    let events: Vec<_> = events.collect().await;
    assert_eq!(
        accepted(&events),
        [(TaskPath::from("review"), "confirm".to_owned(), interrupt.id)]
    );
}

/// An answer kept, then refused by the step's retry (a check that reads
/// the world, which changed): the refusal is the run's as for any refused
/// answer, on the same interrupt, which still waits.
#[tokio::test]
async fn an_answer_told_kept_that_a_retry_refuses_is_refused_on_the_same_interrupt() {
    let checks = Arc::new(AtomicU32::new(0));
    let c = Arc::clone(&checks);
    let h = Harness::<Form>::builder()
        .step("book")
        .run(move |cx: Cx<()>| {
            let c = Arc::clone(&c);
            async move {
                let check = c.fetch_add(1, Ordering::SeqCst);
                // Kept at the first reading; the slot is gone by the second.
                let n: u32 = cx.interrupt_with("which slot?", |n: u32| {
                    if check == 1 {
                        Ok(n)
                    } else {
                        Err(format!("slot {n} is taken"))
                    }
                })?;
                Err(StepError::msg(format!("could not book slot {n}")))
            }
        })
        .retry(harness::RetryPolicy::attempts(2))
        .end()
        .start("book")
        .build()
        .unwrap();
    let agent = create_agent("book", &h);
    let mut run = agent.run(Form::default());
    let events = run.events();
    let asked = (&mut run).await.unwrap().interrupt.unwrap();
    run.resume(4, &asked.id).unwrap();
    let err = (&mut run).await.unwrap_err();
    let harness::RunError::AnswerRejected { interrupt, reason } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(*interrupt, asked.id);
    assert!(reason.contains("slot 4 is taken"), "{reason}");
    drop(run);
    let events: Vec<_> = events.collect().await;
    let kinds: Vec<&str> = events.iter().map(RunEvent::kind).collect();
    let at = |kind: &str| {
        kinds
            .iter()
            .position(|k| *k == kind)
            .unwrap_or_else(|| panic!("no {kind}: {kinds:?}"))
    };
    assert!(at("answer_accepted") < at("step_failed"), "{kinds:?}");
    assert!(at("step_failed") < at("answer_rejected"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"interrupted"), "{kinds:?}");
    assert_eq!(accepted(&events).len(), 1, "{kinds:?}");
}
