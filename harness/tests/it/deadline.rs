//! The run's deadline: a run past it is cancelled where it stands, with a
//! typed error naming the step; a step's own timeout still comes first when
//! it falls first; waiting for a human does not count.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use harness::{
    Context, Cx, DEFAULT_DEADLINE, Harness, HarnessState, RetryPolicy, RunError, RunEvent, Signal,
    StepResult, Violation, create_agent, create_agent_with,
};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Work {
    #[field(reduce = add)]
    done: u32,
}

/// Each step sleeps this long (time is paused in these tests: sleeps end
/// as soon as nothing else can run, in the order they fall).
#[derive(Context)]
struct Pace {
    #[slot(agent)]
    step: Duration,
    #[slot(agent)]
    calls: Arc<AtomicU32>,
}

async fn slow(_: Arc<Work>, cx: Cx<Pace>) -> StepResult<WorkUpdate> {
    cx.calls.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(cx.step).await;
    Ok(WorkUpdate::new().done(1))
}

fn looping(steps: u32) -> harness::HarnessBuilder<Work, Pace> {
    Harness::<Work, Pace>::builder()
        .step("work")
        .run(slow)
        .route(move |w: &Work| if w.done < steps { "again" } else { "done" })
        .on("again")
        .to("work")
        .on("done")
        .end()
        .start("work")
}

fn pace(step: Duration) -> (PaceAgent, Arc<AtomicU32>) {
    let calls = Arc::new(AtomicU32::new(0));
    (
        PaceAgent {
            step,
            calls: calls.clone(),
        },
        calls,
    )
}

#[tokio::test(start_paused = true)]
async fn a_step_running_past_the_deadline_is_cancelled_and_not_retried() {
    let harness = looping(1)
        .deadline(Duration::from_secs(60))
        .build()
        .unwrap();
    // Retries would only wait for the same deadline again.
    let harness_retrying = Harness::<Work, Pace>::builder()
        .step("work")
        .run(slow)
        .retry(RetryPolicy::attempts(3).backoff(Duration::from_millis(1)))
        .end()
        .start("work")
        .deadline(Duration::from_secs(60))
        .build()
        .unwrap();
    for harness in [harness, harness_retrying] {
        let (slots, calls) = pace(Duration::from_secs(3600));
        let agent = create_agent_with("a", &harness, slots);
        let began = tokio::time::Instant::now();
        let err = agent.run(Work::default()).await.unwrap_err();
        match &err {
            RunError::Deadline { limit, step } => {
                assert_eq!(*limit, Duration::from_secs(60));
                assert_eq!(step, "work");
            }
            other => panic!("the deadline: {other}"),
        }
        assert!(
            err.to_string().contains(".deadline("),
            "says what to do: {err}"
        );
        assert_eq!(
            began.elapsed(),
            Duration::from_secs(60),
            "cut at the deadline"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1, "not retried");
    }
}

#[tokio::test(start_paused = true)]
async fn a_retried_step_is_not_retried_past_the_deadline() {
    let harness = Harness::<Work, Pace>::builder()
        .step("work")
        .run(slow)
        .retry(RetryPolicy::attempts(5).backoff(Duration::from_millis(1)))
        .timeout(Duration::from_secs(100))
        .end()
        .start("work")
        .deadline(Duration::from_secs(250))
        .build()
        .unwrap();
    let (slots, calls) = pace(Duration::from_secs(3600));
    let agent = create_agent_with("a", &harness, slots);
    let run = agent.run(Work::default());
    let mut events = run.events();
    let err = run.await.unwrap_err();
    assert!(matches!(err, RunError::Deadline { .. }), "{err}");
    // Two attempts timed out at 100 s each, the third was cut at 250 s.
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    let mut failed = Vec::new();
    while let Some(event) = events.recv().await {
        if let RunEvent::StepFailed {
            error, will_retry, ..
        } = event
        {
            failed.push((error, will_retry));
        }
    }
    assert_eq!(failed.len(), 3, "{failed:?}");
    assert!(
        failed[..2]
            .iter()
            .all(|(e, retry)| e.contains("timed out") && *retry)
    );
    assert!(
        failed[2].0.contains("deadline") && !failed[2].1,
        "{failed:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_step_timeout_that_falls_first_is_still_a_timeout() {
    let harness = Harness::<Work, Pace>::builder()
        .step("work")
        .run(slow)
        .timeout(Duration::from_secs(5))
        .end()
        .start("work")
        .deadline(Duration::from_secs(600))
        .build()
        .unwrap();
    let (slots, _) = pace(Duration::from_secs(3600));
    let err = create_agent_with("a", &harness, slots)
        .run(Work::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err, RunError::Timeout { ref step, limit, .. } if step == "work" && limit == Duration::from_secs(5)),
        "{err}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_run_of_short_steps_is_cut_in_the_step_that_passes_the_deadline() {
    // Each step takes 10 s; the tenth is running when the 95 s fall.
    let harness = looping(100)
        .deadline(Duration::from_secs(95))
        .build()
        .unwrap();
    let (slots, calls) = pace(Duration::from_secs(10));
    let err = create_agent_with("a", &harness, slots)
        .run(Work::default())
        .await
        .unwrap_err();
    assert!(matches!(err, RunError::Deadline { .. }), "{err}");
    assert_eq!(calls.load(Ordering::SeqCst), 10);
}

#[tokio::test(start_paused = true)]
async fn every_run_has_a_deadline_unless_told_otherwise() {
    let (slots, _) = pace(DEFAULT_DEADLINE + Duration::from_secs(1));
    let with_default = looping(1).build().unwrap();
    let err = create_agent_with("a", &with_default, slots)
        .run(Work::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err, RunError::Deadline { limit, .. } if limit == DEFAULT_DEADLINE),
        "{err}"
    );

    let (slots, _) = pace(DEFAULT_DEADLINE + Duration::from_secs(1));
    let unbounded = looping(2).without_deadline().build().unwrap();
    let done = create_agent_with("a", &unbounded, slots)
        .run(Work::default())
        .await
        .unwrap();
    assert_eq!(done.state.done, 2);
}

#[tokio::test(start_paused = true)]
async fn time_waiting_for_a_human_does_not_count() {
    #[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
    struct Asked {
        #[field(reduce = add)]
        steps: u32,
    }
    async fn ask(_: Arc<Asked>, cx: Cx<()>) -> StepResult<AskedUpdate> {
        tokio::time::sleep(Duration::from_secs(40)).await;
        let _: bool = cx.interrupt("go on?")?;
        Ok(AskedUpdate::new().steps(1))
    }
    async fn work(_: Arc<Asked>, _: Cx<()>) -> StepResult<AskedUpdate> {
        tokio::time::sleep(Duration::from_secs(40)).await;
        Ok(AskedUpdate::new().steps(1))
    }
    let harness = Harness::<Asked>::builder()
        .step("ask")
        .run(ask)
        .next("work")
        .step("work")
        .run(work)
        .end()
        .start("ask")
        .deadline(Duration::from_secs(60))
        .build()
        .unwrap();
    let agent = create_agent("a", &harness);
    let mut run = agent.run(Asked { steps: 0 });
    let paused = (&mut run).await.unwrap();
    assert_eq!(paused.signal, Signal::INTERRUPT);
    // A human answers a day later. Counted from the first start, the
    // resumed run would be cut at once, in `ask`.
    tokio::time::advance(Duration::from_secs(24 * 3600)).await;
    let asked = paused.interrupt.unwrap();
    run.resume(true, &asked.id).unwrap();
    let err = (&mut run).await.unwrap_err();
    // Counted from the resume: `ask` runs again to its interrupt (40 s),
    // which now has its answer, then 40 s of `work` pass the 60 s.
    match err {
        RunError::Deadline { step, .. } => assert_eq!(step, "work"),
        other => panic!("{other}"),
    }
}

#[test]
fn a_zero_deadline_is_refused_when_built() {
    let err = looping(1).deadline(Duration::ZERO).build().unwrap_err();
    let settings: Vec<&str> = err
        .violations
        .iter()
        .map(|v| match v {
            Violation::InvalidSetting { setting, .. } => setting.as_str(),
            other => panic!("unexpected {other}"),
        })
        .collect();
    assert_eq!(settings, ["deadline"], "{err}");
}

#[tokio::test]
async fn a_step_that_yields_really_yields_under_a_deadline() {
    async fn yielding(_: Arc<Work>, _: Cx<()>) -> StepResult<WorkUpdate> {
        tokio::task::yield_now().await;
        Ok(WorkUpdate::new().done(1))
    }
    let harness = Harness::<Work>::builder()
        .step("work")
        .run(yielding)
        .route(|w: &Work| if w.done < 100 { "again" } else { "done" })
        .on("again")
        .to("work")
        .on("done")
        .end()
        .start("work")
        .build()
        .unwrap();
    // On this one thread, the other task runs only when a step yields.
    let others = Arc::new(AtomicU32::new(0));
    let counting = others.clone();
    let other = tokio::spawn(async move {
        loop {
            counting.fetch_add(1, Ordering::SeqCst);
            tokio::task::yield_now().await;
        }
    });
    let done = create_agent("a", &harness)
        .run(Work::default())
        .await
        .unwrap();
    other.abort();
    assert_eq!(done.state.done, 100);
    assert!(others.load(Ordering::SeqCst) >= 50, "{others:?}");
}
