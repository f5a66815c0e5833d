//! The effect journal (`HarnessBuilder::effects`): what a durable-execution
//! engine sees of a run's side effects, and a replay answered from it.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use futures::future::BoxFuture;
use harness::effect::{EffectError, EffectId, EffectJournal, Journaled, PendingEffect};
use harness::{
    Cx, Harness, HarnessState, RetryPolicy, SessionId, StepError, SubAgent, create_agent,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A journal in memory: outcomes by effect name, and every `begin` in order.
#[derive(Clone, Debug, Default)]
struct Recorder {
    outcomes: Arc<Mutex<HashMap<String, Result<Value, String>>>>,
    asked: Arc<Mutex<Vec<(String, bool)>>>,
}

struct Pending {
    outcomes: Arc<Mutex<HashMap<String, Result<Value, String>>>>,
    name: String,
}

impl PendingEffect for Pending {
    fn finish(
        self: Box<Self>,
        outcome: Result<Value, String>,
    ) -> BoxFuture<'static, Result<Result<Value, String>, EffectError>> {
        self.outcomes
            .lock()
            .unwrap()
            .insert(self.name, outcome.clone());
        Box::pin(async move { Ok(outcome) })
    }
}

impl EffectJournal for Recorder {
    fn begin<'a>(&'a self, effect: &'a EffectId) -> BoxFuture<'a, Result<Journaled, EffectError>> {
        let name = effect.name();
        let recorded = self.outcomes.lock().unwrap().get(&name).cloned();
        self.asked
            .lock()
            .unwrap()
            .push((name.clone(), recorded.is_some()));
        Box::pin(async move {
            Ok(match recorded {
                Some(outcome) => Journaled::Recorded(outcome),
                None => Journaled::Run(Box::new(Pending {
                    outcomes: Arc::clone(&self.outcomes),
                    name,
                })),
            })
        })
    }
}

/// A journal that cannot record.
#[derive(Debug)]
struct Broken;

impl EffectJournal for Broken {
    fn begin<'a>(&'a self, effect: &'a EffectId) -> BoxFuture<'a, Result<Journaled, EffectError>> {
        Box::pin(async move { Err(EffectError::new(format!("journal unreachable at {effect}"))) })
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Job {
    #[field(reduce = append)]
    log: Vec<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Inner {
    #[field(reduce = append)]
    log: Vec<String>,
}

#[derive(Debug, Default)]
struct Effects {
    charge: AtomicU32,
    flaky: AtomicU32,
    inner: AtomicU32,
}

fn job(effects: &Arc<Effects>, journal: impl EffectJournal + 'static) -> Harness<Job> {
    let (a, b, c) = (
        Arc::clone(effects),
        Arc::clone(effects),
        Arc::clone(effects),
    );
    let inner = Harness::<Inner>::builder()
        .step("lookup")
        .run(move |_: Arc<Inner>, cx: Cx<()>| {
            let effects = Arc::clone(&c);
            async move {
                let n: u32 = cx
                    .once("fetch", async {
                        effects.inner.fetch_add(1, Ordering::SeqCst) + 1
                    })
                    .await?;
                Ok(InnerUpdate::new().log(vec![format!("fetched {n}")]))
            }
        })
        .end()
        .start("lookup")
        .build()
        .unwrap();
    Harness::<Job>::builder()
        .step("work")
        .run(move |_: Arc<Job>, cx: Cx<()>| {
            let (a, b) = (Arc::clone(&a), Arc::clone(&b));
            async move {
                let receipt: String = cx
                    .once("charge", async {
                        format!("charge {}", a.charge.fetch_add(1, Ordering::SeqCst) + 1)
                    })
                    .await?;
                // Fails on its first try: the step's retry runs it again.
                let flaky: Result<u32, StepError> = cx
                    .try_once("flaky", async {
                        match b.flaky.fetch_add(1, Ordering::SeqCst) {
                            0 => Err(StepError::msg("503 from the payment API")),
                            n => Ok(n + 1),
                        }
                    })
                    .await;
                let flaky = match flaky {
                    Ok(n) => n,
                    Err(e) => return Err(StepError::msg(format!("flaky: {e}"))),
                };
                Ok(JobUpdate::new().log(vec![receipt, format!("flaky {flaky}")]))
            }
        })
        .retry(RetryPolicy::attempts(2).backoff(Duration::ZERO))
        .next("sub")
        .step("sub")
        .sub_agent(SubAgent::new(
            &inner,
            |_: &Job| Inner::default(),
            |_: &Job, done| JobUpdate::new().log(done.state.log.clone()),
        ))
        .end()
        .start("work")
        .effects(journal)
        .build()
        .unwrap()
}

#[tokio::test]
async fn every_effect_goes_through_the_journal_and_a_replay_is_answered_from_it() {
    let effects = Arc::new(Effects::default());
    let journal = Recorder::default();
    let agent = create_agent("job", &job(&effects, journal.clone()));
    let session = SessionId::from("job-1");
    let first = agent.run_in(session.clone(), Job::default()).await.unwrap();
    assert_eq!(first.state.log, ["charge 1", "flaky 2", "fetched 1"]);
    let asked: Vec<_> = journal.asked.lock().unwrap().clone();
    assert_eq!(
        asked,
        [
            ("work#0.1:charge".to_string(), false),
            ("work#0.1:flaky".to_string(), false),
            // The retry keeps the step's journal: `charge` is not asked
            // again, the failed `flaky` is, under its new attempt.
            ("work#0.2:flaky".to_string(), false),
            // A sub-agent's visit counts its own steps when the run has
            // no store.
            ("sub/lookup#0.1:fetch".to_string(), false),
        ],
        "every effect, the sub-agent's included, is named by path, step, visit, attempt and key"
    );
    assert_eq!(
        journal.outcomes.lock().unwrap()["work#0.1:flaky"],
        Err("503 from the payment API".to_string()),
        "a failure is journaled with its message"
    );

    // A replay (as an engine replays a handler after a crash): the same
    // run again, answered from the journal; no effect runs twice.
    journal.asked.lock().unwrap().clear();
    let replay = agent.run_in(session, Job::default()).await.unwrap();
    assert_eq!(replay.state.log, first.state.log);
    assert_eq!(effects.charge.load(Ordering::SeqCst), 1);
    assert_eq!(effects.flaky.load(Ordering::SeqCst), 2);
    assert_eq!(effects.inner.load(Ordering::SeqCst), 1);
    let asked = journal.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 4);
    assert!(asked.iter().all(|(_, recorded)| *recorded), "{asked:?}");
}

#[tokio::test]
async fn a_journal_that_cannot_record_fails_the_step_before_the_effect_runs() {
    let effects = Arc::new(Effects::default());
    let agent = create_agent("job", &job(&effects, Broken));
    let err = agent.run(Job::default()).await.unwrap_err().to_string();
    assert!(err.contains("work"), "{err}");
    assert_eq!(
        effects.charge.load(Ordering::SeqCst),
        0,
        "nothing runs that cannot be recorded"
    );
}

#[tokio::test]
async fn a_recorded_value_of_another_type_is_an_error_naming_the_effect() {
    let effects = Arc::new(Effects::default());
    let journal = Recorder::default();
    for attempt in [1, 2] {
        journal.outcomes.lock().unwrap().insert(
            format!("work#0.{attempt}:charge"),
            Ok(serde_json::json!({"not": "a string"})),
        );
    }
    let agent = create_agent("job", &job(&effects, journal.clone()));
    let err = format!("{:?}", agent.run(Job::default()).await.unwrap_err());
    assert!(err.contains("work#0.2:charge"), "{err}");
    assert!(err.contains("is not a `String`"), "{err}");
    assert_eq!(effects.charge.load(Ordering::SeqCst), 0);
}
