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
    /// What [`EffectJournal::ordered`] answers.
    ordered: bool,
    /// What [`EffectJournal::batches`] answers.
    batches: bool,
    /// The names of each round asked with `begin_all`.
    rounds: Arc<Mutex<Vec<Vec<String>>>>,
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

    fn ordered(&self) -> bool {
        self.ordered
    }

    fn batches(&self) -> bool {
        self.batches
    }

    fn begin_all<'a>(
        &'a self,
        effects: &'a [EffectId],
    ) -> BoxFuture<'a, Result<Vec<Journaled>, EffectError>> {
        self.rounds
            .lock()
            .unwrap()
            .push(effects.iter().map(EffectId::name).collect());
        Box::pin(async move {
            let mut answers = Vec::new();
            for effect in effects {
                answers.push(self.begin(effect).await?);
            }
            Ok(answers)
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

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Spread {
    parts: Vec<u64>,
    #[field(reduce = append)]
    log: Vec<String>,
}

/// Effects running at once: now, and the most seen.
#[derive(Debug, Default)]
struct Overlap {
    now: AtomicU32,
    most: AtomicU32,
}

impl Overlap {
    async fn during<T>(&self, work: impl std::future::Future<Output = T>) -> T {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        let out = work.await;
        self.now.fetch_sub(1, Ordering::SeqCst);
        out
    }
}

/// A fan-out over `parts`: each branch makes two effects, the first taking
/// `part` × 30 ms, so that side by side the later parts ask first; at most
/// `limit` branches at once, if given.
fn spread(
    journal: Recorder,
    ran: Arc<AtomicU32>,
    overlap: Arc<Overlap>,
    limit: Option<usize>,
) -> Harness<Spread> {
    let fork = Harness::<Spread>::builder()
        .step("split")
        .route(|_: &Spread| "parts")
        .on("parts")
        .fan_out("part", |s: &Spread| s.parts.clone());
    let fork = match limit {
        Some(n) => fork.limit(n),
        None => fork,
    };
    fork.join("done")
        .step("part")
        .run_each(move |part: u64, _: Arc<Spread>, cx: Cx<()>| {
            let (ran, overlap) = (Arc::clone(&ran), Arc::clone(&overlap));
            async move {
                let mut log = Vec::new();
                for i in 0..2 {
                    let line: String = cx
                        .once(
                            &format!("effect-{i}"),
                            overlap.during(async {
                                if i == 0 {
                                    tokio::time::sleep(Duration::from_millis(part * 30)).await;
                                }
                                ran.fetch_add(1, Ordering::SeqCst);
                                format!("part {part} effect {i}")
                            }),
                        )
                        .await?;
                    log.push(line);
                }
                Ok(SpreadUpdate::new().log(log))
            }
        })
        .writes(["log"])
        .next("done")
        .step("done")
        .run(async |_: Arc<Spread>| Ok(SpreadUpdate::new()))
        .end()
        .start("split")
        .effects(journal)
        .build()
        .unwrap()
}

/// What one run of the fan-out over `parts` shows, and its replay: the
/// order the journal was asked in, the replay's order, the log, and the
/// most effects that ran at once.
async fn asked_in(
    parts: &[u64],
    ordered: bool,
    limit: Option<usize>,
) -> (Vec<String>, Vec<String>, Vec<String>, u32) {
    let journal = Recorder {
        ordered,
        ..Recorder::default()
    };
    asked_of(journal, parts, limit).await
}

/// [`asked_in`], on `journal`.
async fn asked_of(
    journal: Recorder,
    parts: &[u64],
    limit: Option<usize>,
) -> (Vec<String>, Vec<String>, Vec<String>, u32) {
    let ran = Arc::new(AtomicU32::new(0));
    let overlap = Arc::new(Overlap::default());
    let harness = spread(
        journal.clone(),
        Arc::clone(&ran),
        Arc::clone(&overlap),
        limit,
    );
    let agent = create_agent("spread", &harness);
    let state = Spread {
        parts: parts.to_vec(),
        ..Spread::default()
    };
    let first = agent
        .run_in(SessionId::from("spread"), state.clone())
        .await
        .unwrap();
    let order: Vec<String> = journal
        .asked
        .lock()
        .unwrap()
        .drain(..)
        .map(|(name, _)| name)
        .collect();
    // A replay: answered from the journal, in the same order.
    let replay = agent
        .run_in(SessionId::from("spread"), state)
        .await
        .unwrap();
    let again: Vec<(String, bool)> = journal.asked.lock().unwrap().clone();
    assert_eq!(replay.state.log, first.state.log);
    assert_eq!(
        ran.load(Ordering::SeqCst),
        2 * parts.len() as u32,
        "each effect ran once"
    );
    assert!(again.iter().all(|(_, recorded)| *recorded), "{again:?}");
    let replayed: Vec<String> = again.into_iter().map(|(name, _)| name).collect();
    (
        order,
        replayed,
        first.state.log,
        overlap.most.load(Ordering::SeqCst),
    )
}

/// Each branch's first effect, in branch order, then each branch's second.
fn by_turns(branches: usize) -> Vec<String> {
    (0..2)
        .flat_map(|i| (0..branches).map(move |b| format!("part#{b}/part#1.1:effect-{i}")))
        .collect()
}

#[tokio::test]
async fn under_an_ordered_journal_a_fan_outs_branches_run_side_by_side_and_ask_by_turns() {
    // The later parts are quicker: they reach their second effect first.
    let (order, replayed, log, most) = asked_in(&[3, 2, 1], true, None).await;
    assert_eq!(order, by_turns(3), "by turns, whatever the timing");
    assert_eq!(replayed, order, "the replay asks in the same order");
    assert!(
        most >= 2,
        "effects ran side by side: at most {most} at once"
    );
    assert_eq!(
        log,
        [3, 2, 1]
            .iter()
            .flat_map(|p| (0..2).map(move |i| format!("part {p} effect {i}")))
            .collect::<Vec<_>>()
    );
    // The other way round: the same order.
    let (order, replayed, _, _) = asked_in(&[1, 2, 3], true, None).await;
    assert_eq!(order, by_turns(3));
    assert_eq!(replayed, order);

    // Without ordering, the branches run side by side and the order is set
    // by timing: the replay, whose effects return at once, asks in another.
    let (order, replayed, _, _) = asked_in(&[3, 2, 1], false, None).await;
    assert_ne!(
        order,
        by_turns(3),
        "side by side, the shortest part asks first"
    );
    assert_ne!(replayed, order);
}

#[tokio::test]
async fn under_an_ordered_journal_a_forks_limit_bounds_the_effects_running_at_once() {
    for limit in [1, 2] {
        let (order, replayed, _, most) = asked_in(&[3, 2, 1, 2], true, Some(limit)).await;
        assert_eq!(order, by_turns(4), "limit {limit}");
        assert_eq!(replayed, order, "limit {limit}");
        assert_eq!(most, limit as u32, "limit {limit}");
    }
}

/// A branch whose step times out while its effect waits for its turn gives
/// the turn up: the branches after it are not held back for ever, and its
/// retry asks again.
#[tokio::test]
async fn a_branch_cut_short_while_it_waits_for_its_turn_holds_no_one_back() {
    for batches in [false, true] {
        cut_short(batches).await;
    }
}

async fn cut_short(batches: bool) {
    let tries = Arc::new(AtomicU32::new(0));
    let journal = Recorder {
        ordered: true,
        batches,
        ..Recorder::default()
    };
    let harness = Harness::<Spread>::builder()
        .step("split")
        .route(|_: &Spread| "parts")
        .on("parts")
        .fan_out("part", |s: &Spread| s.parts.clone())
        .join("done")
        .step("part")
        .run_each(move |part: u64, _: Arc<Spread>, cx: Cx<()>| {
            let tries = Arc::clone(&tries);
            async move {
                // Branch 0's first three attempts are cut short by the 40 ms
                // timeout before they ask for their effect; branches 1 and
                // 2 ask at once and wait for branch 0's turn until the
                // timeout cuts them short too, attempt after attempt.
                if part == 0 && tries.fetch_add(1, Ordering::SeqCst) < 3 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                let line: String = cx
                    .once("effect", async move { format!("part {part}") })
                    .await?;
                Ok(SpreadUpdate::new().log(vec![line]))
            }
        })
        .timeout(Duration::from_millis(40))
        .retry(RetryPolicy::attempts(50).backoff(Duration::ZERO))
        .writes(["log"])
        .next("done")
        .step("done")
        .run(async |_: Arc<Spread>| Ok(SpreadUpdate::new()))
        .end()
        .start("split")
        .effects(journal.clone())
        .build()
        .unwrap();
    let state = Spread {
        parts: vec![0, 1, 2],
        ..Spread::default()
    };
    let done = tokio::time::timeout(
        Duration::from_secs(20),
        create_agent("spread", &harness).run_in(SessionId::from("cut"), state),
    )
    .await
    .expect("no branch is held back for ever")
    .unwrap();
    assert_eq!(done.state.log, ["part 0", "part 1", "part 2"]);
    let asked = journal.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 3, "each branch's effect asked once: {asked:?}");
    assert!(asked[0].0.starts_with("part#0/part#1.4:"), "{asked:?}");
    assert!(
        !asked[1].0.contains(".1:") && !asked[2].0.contains(".1:"),
        "branches 1 and 2 were cut short while they waited: {asked:?}"
    );
}

/// The names of turns `(n, i)` for `i` in `branches`.
fn round(n: usize, branches: std::ops::Range<usize>) -> Vec<String> {
    branches
        .map(|b| format!("part#{b}/part#1.1:effect-{n}"))
        .collect()
}

#[tokio::test]
async fn a_journal_that_batches_is_handed_a_round_at_a_time_the_same_on_a_replay() {
    for (parts, limit, rounds) in [
        (vec![3, 2, 1], None, vec![round(0, 0..3), round(1, 0..3)]),
        (vec![1, 2, 3], None, vec![round(0, 0..3), round(1, 0..3)]),
        (
            vec![3, 2, 1, 2],
            Some(2),
            vec![
                round(0, 0..2),
                round(0, 2..4),
                round(1, 0..2),
                round(1, 2..4),
            ],
        ),
    ] {
        let journal = Recorder {
            ordered: true,
            batches: true,
            ..Recorder::default()
        };
        let (order, replayed, log, most) = asked_of(journal.clone(), &parts, limit).await;
        let handed = journal.rounds.lock().unwrap().clone();
        let (first, again) = handed.split_at(handed.len() / 2);
        assert_eq!(first, rounds, "{parts:?}, limit {limit:?}");
        assert_eq!(again, rounds, "the replay: {parts:?}, limit {limit:?}");
        assert_eq!(order, rounds.concat());
        assert_eq!(replayed, order);
        assert_eq!(
            most,
            limit.unwrap_or(parts.len()) as u32,
            "a round's effects run side by side: {parts:?}, limit {limit:?}"
        );
        assert_eq!(
            log,
            parts
                .iter()
                .flat_map(|p| (0..2).map(move |i| format!("part {p} effect {i}")))
                .collect::<Vec<_>>()
        );
    }
}

/// A model that keeps each call 40 ms and counts the calls at once.
struct SlowModel {
    overlap: Arc<Overlap>,
}

#[async_trait::async_trait]
impl harness::llm::LanguageModel for SlowModel {
    async fn complete(
        &self,
        _: &harness::llm::ModelRequest,
    ) -> Result<harness::llm::ModelResponse, harness::llm::ModelError> {
        self.overlap
            .during(tokio::time::sleep(Duration::from_millis(40)))
            .await;
        Ok(harness::llm::ModelResponse::from_text("ok"))
    }
}

/// Under an ordered journal every branch of a fork runs, so its limit
/// bounds their model calls made with `cx.complete` (not journaled) as it
/// bounds their effects: at most `limit` at once, those made from a task
/// a step spawned included. Without a limit they
/// all run at once, and without an ordered journal the limit bounds the
/// branches themselves.
#[tokio::test]
async fn under_an_ordered_journal_a_forks_limit_bounds_its_model_calls() {
    for (ordered, limit, expected) in [
        (true, Some(1), 1),
        (true, Some(2), 2),
        (true, None, 4),
        (false, Some(2), 2),
    ] {
        let overlap = Arc::new(Overlap::default());
        let model: Arc<dyn harness::llm::LanguageModel> = Arc::new(SlowModel {
            overlap: Arc::clone(&overlap),
        });
        let fork = Harness::<Spread>::builder()
            .step("split")
            .route(|_: &Spread| "parts")
            .on("parts")
            .fan_out("part", |s: &Spread| s.parts.clone());
        let fork = match limit {
            Some(n) => fork.limit(n),
            None => fork,
        };
        let harness = fork
            .join("done")
            .step("part")
            .run_each(move |part: u64, _: Arc<Spread>, cx: Cx<()>| {
                let model = Arc::clone(&model);
                async move {
                    let request =
                        harness::llm::ModelRequest::new(vec![harness::llm::Message::user(
                            format!("part {part}"),
                        )]);
                    let first = cx.once("before", async { part }).await?;
                    // Even parts call from a task of their own: the limit
                    // holds there too.
                    let answer = if part.is_multiple_of(2) {
                        let cx = cx.clone();
                        tokio::spawn(async move { cx.complete(&*model, &request).await })
                            .await
                            .unwrap()?
                    } else {
                        cx.complete(&*model, &request).await?
                    };
                    Ok(SpreadUpdate::new().log(vec![format!("{first} {}", answer.text())]))
                }
            })
            .writes(["log"])
            .next("done")
            .step("done")
            .run(async |_: Arc<Spread>| Ok(SpreadUpdate::new()))
            .end()
            .start("split")
            .effects(Recorder {
                ordered,
                ..Recorder::default()
            })
            .build()
            .unwrap();
        let out = create_agent("spread", &harness)
            .run_in(
                SessionId::from("calls"),
                Spread {
                    parts: vec![1, 2, 3, 4],
                    ..Spread::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(out.state.log.len(), 4);
        let most = overlap.most.load(Ordering::SeqCst);
        assert_eq!(most, expected, "ordered {ordered}, limit {limit:?}");
    }
}
