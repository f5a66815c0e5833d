//! Sessions end to end on the in-memory store: checkpoints, resume from a
//! fresh agent, the named errors, time travel, recovery and storage growth.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use futures::StreamExt;
use harness::session::{
    CheckpointKind, Durability, SessionConfig, SessionError, SessionPhase, SessionStore,
};
use harness::{
    Agent, Context, Cx, Harness, HarnessState, InterruptId, RunError, RunEvent, SessionId, Signal,
    StepResult, create_agent, create_agent_with,
};
use harness_stores::MemoryStore;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Tally {
    #[field(reduce = add)]
    count: u32,
    #[field(reduce = append)]
    log: Vec<String>,
    #[field(default = 3)]
    until: u32,
}

#[derive(Context)]
struct Effects {
    #[slot(agent)]
    side_effects: Arc<AtomicU32>,
}

async fn work(s: Arc<Tally>) -> StepResult<TallyUpdate> {
    Ok(TallyUpdate::new()
        .count(1)
        .log(vec![format!("work {}", s.count + 1)]))
}

async fn approve(s: Arc<Tally>, cx: Cx<Effects>) -> StepResult<TallyUpdate> {
    let receipt: u32 = cx
        .once("effect", async {
            cx.side_effects.fetch_add(1, Ordering::SeqCst) + 1
        })
        .await?;
    let ok: bool = cx.interrupt(serde_json::json!({"count": s.count, "receipt": receipt}))?;
    Ok(TallyUpdate::new().log(vec![format!("approved={ok} receipt={receipt}")]))
}

fn harness(store: Arc<dyn SessionStore>, config: SessionConfig) -> Harness<Tally, Effects> {
    Harness::<Tally, Effects>::builder()
        .step("work")
        .run(work)
        .route(|s: &Tally| if s.count < s.until { "again" } else { "enough" })
        .on("again")
        .to("work")
        .on("enough")
        .to("approve")
        .step("approve")
        .run(approve)
        .route(|_: &Tally| "done")
        .on("done")
        .end()
        .start("work")
        .store(store)
        .session_config(config)
        .build()
        .unwrap()
}

/// A tally agent on a memory store and a counter of its own.
fn fresh_agent() -> harness::Agent<Tally, Effects> {
    agent(&Arc::new(MemoryStore::new()), &Arc::new(AtomicU32::new(0)))
}

/// Runs a new session of `agent` until it pauses for approval.
async fn paused(agent: &harness::Agent<Tally, Effects>) -> (SessionId, InterruptId) {
    let run = agent.run(Tally::default());
    let session = run.session_id().clone();
    (session, run.await.unwrap().interrupt.unwrap().id)
}

fn agent(store: &Arc<MemoryStore>, effects: &Arc<AtomicU32>) -> harness::Agent<Tally, Effects> {
    create_agent_with(
        "tally",
        &harness(store.clone(), SessionConfig::default()),
        EffectsAgent {
            side_effects: effects.clone(),
        },
    )
}

#[tokio::test]
async fn every_step_is_checkpointed_and_any_checkpoint_can_be_read_back() {
    let agent = fresh_agent();
    let run = agent.run(Tally::default());
    let session = run.session_id().clone();
    let out = run.await.unwrap();
    assert_eq!(out.signal, Signal::INTERRUPT);

    let head = agent.session(&session).await.unwrap();
    assert!(matches!(head.phase, SessionPhase::Interrupted { .. }));
    assert_eq!(head.next_step.as_deref(), Some("approve"));
    assert_eq!(head.steps, 3);
    assert!(head.lease.is_none(), "a paused session holds no lease");

    let history = agent.history(&session).await.unwrap();
    let steps: Vec<_> = history.iter().map(|c| (c.index, c.step.as_str())).collect();
    assert_eq!(
        steps,
        [(0, "$start"), (1, "work"), (2, "work"), (3, "work")]
    );
    for i in 0..=3 {
        let s = agent.state_at(&session, Some(i)).await.unwrap();
        assert_eq!(s.count as u64, i);
    }
    let err = agent.state_at(&session, Some(9)).await.unwrap_err();
    assert!(
        matches!(
            err,
            SessionError::NoCheckpoint {
                index: 9,
                last: 3,
                ..
            }
        ),
        "{err}"
    );
}

#[tokio::test]
async fn a_fresh_agent_resumes_a_stored_interrupt_and_the_side_effect_runs_once() {
    let store = Arc::new(MemoryStore::new());
    let effects = Arc::new(AtomicU32::new(0));
    let (session, interrupt) = {
        let agent = agent(&store, &effects);
        let run = agent.run(Tally::default());
        let session = run.session_id().clone();
        let out = run.await.unwrap();
        assert_eq!(out.interrupt.as_ref().unwrap().payload["receipt"], 1);
        (session, out.interrupt.unwrap().id)
    };
    // Everything in memory is gone but the store: a new harness and agent.
    let agent = agent(&store, &effects);
    let run = agent.resume(true, &session, &interrupt).await.unwrap();
    let out = run.await.unwrap();
    assert_eq!(out.signal, "done");
    assert_eq!(out.state.count, 3);
    assert_eq!(out.state.log.last().unwrap(), "approved=true receipt=1");
    assert_eq!(
        effects.load(Ordering::SeqCst),
        1,
        "the journaled side effect ran once"
    );
    let head = agent.session(&session).await.unwrap();
    assert_eq!(
        head.phase,
        SessionPhase::Completed {
            signal: "done".into()
        }
    );
    assert_eq!(head.steps, 4);
}

#[tokio::test]
async fn resume_with_the_wrong_interrupt_id_is_no_interrupt() {
    let agent = fresh_agent();
    let (session, real) = paused(&agent).await;
    let err = agent
        .resume(true, &session, &InterruptId::from("wrong"))
        .await
        .unwrap_err();
    match err {
        SessionError::NoInterrupt(e) => assert_eq!(e.pending, Some(real)),
        other => panic!("{other}"),
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Asks {
    #[field(reduce = add)]
    n: u32,
}

/// A loop whose one step asks a human each time, six times over, with a
/// step limit of `limit`.
fn asking(store: Arc<MemoryStore>, limit: u64) -> Harness<Asks> {
    Harness::<Asks>::builder()
        .step("ask")
        .run(async |cx: Cx<()>| {
            let _: bool = cx.interrupt("go on?")?;
            Ok(AsksUpdate::new().n(1))
        })
        .route(|s: &Asks| if s.n < 6 { "again" } else { "done" })
        .on("again")
        .to("ask")
        .on("done")
        .end()
        .start("ask")
        .step_limit(limit)
        .store(store)
        .build()
        .unwrap()
}

/// What each settling of a run of `asking` gave: the steps its outcome
/// counts, or the step limit's error.
fn settled(out: Result<harness::Outcome<Asks>, RunError>) -> Result<u64, u64> {
    match out {
        Ok(o) => Ok(o.steps),
        Err(RunError::StepLimit { limit, .. }) => Err(limit),
        Err(e) => panic!("{e}"),
    }
}

#[tokio::test]
async fn a_run_resumed_from_the_store_counts_its_steps_as_one_resumed_in_its_process() {
    for limit in [3, 4, 100] {
        // In its process: one run handle, resumed each time.
        let agent = create_agent("asks", &asking(Arc::new(MemoryStore::new()), limit));
        let mut run = agent.run(Asks::default());
        let mut in_process = Vec::new();
        loop {
            let out = (&mut run).await;
            let interrupt = out.as_ref().ok().and_then(|o| o.interrupt.clone());
            in_process.push(settled(out));
            match interrupt {
                Some(i) => run.resume(true, &i.id).unwrap(),
                None => break,
            }
        }
        // Through the store: a fresh agent for each answer, as another
        // process would resume it.
        let store = Arc::new(MemoryStore::new());
        let out = create_agent("asks", &asking(Arc::clone(&store), limit))
            .run(Asks::default())
            .await;
        let (session, mut interrupt) = {
            let o = out.as_ref().unwrap();
            (o.session_id.clone(), o.interrupt.clone().unwrap().id)
        };
        let mut stored = vec![settled(out)];
        loop {
            let agent = create_agent("asks", &asking(Arc::clone(&store), limit));
            let out = agent
                .resume(true, &session, &interrupt)
                .await
                .unwrap()
                .await;
            let next = out.as_ref().ok().and_then(|o| o.interrupt.clone());
            stored.push(settled(out));
            match next {
                Some(i) => interrupt = i.id,
                None => break,
            }
        }
        assert_eq!(stored, in_process, "limit {limit}");
        if limit < 6 {
            assert_eq!(stored.last(), Some(&Err(limit)), "limit {limit}");
        } else {
            assert_eq!(stored.last(), Some(&Ok(6)), "limit {limit}");
        }
    }
}

#[tokio::test]
async fn a_new_session_under_the_id_of_one_that_exists_is_refused_as_such() {
    let agent = fresh_agent();
    let (session, interrupt) = paused(&agent).await;
    let before = agent.session(&session).await.unwrap();
    for state in [
        Tally::default(),
        Tally {
            count: 7,
            ..Tally::default()
        },
    ] {
        let err = agent.run_in(session.clone(), state).await.unwrap_err();
        assert!(
            matches!(
                &err,
                RunError::Store(harness::session::StoreError::Conflict { .. })
            ),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(
            text.contains(&format!("session {session} already exists")),
            "{text}"
        );
    }
    // The session is as it was, and still waits for its answer.
    let after = agent.session(&session).await.unwrap();
    assert_eq!(after.version, before.version);
    agent
        .resume(true, &session, &interrupt)
        .await
        .unwrap()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_new_run_on_a_session_waiting_for_an_answer_is_refused() {
    let agent = fresh_agent();
    let (session, interrupt) = paused(&agent).await;
    let err = agent
        .continue_session(&session, TallyUpdate::new())
        .await
        .unwrap_err();
    match err {
        SessionError::PendingInterrupt(e) => assert_eq!(e.interrupt, interrupt),
        other => panic!("{other}"),
    }
}

#[tokio::test]
async fn two_resumes_of_one_session_cannot_both_proceed() {
    let agent = fresh_agent();
    let (session, interrupt) = paused(&agent).await;
    let first = agent.resume(true, &session, &interrupt).await.unwrap();
    // The first resume holds the lease: the second is refused by name.
    let second = agent.resume(false, &session, &interrupt).await.unwrap_err();
    assert!(matches!(second, SessionError::InFlight(_)), "{second}");
    // It says when the lease ends, counted from now: a run dropped without
    // settling keeps it until then.
    let text = second.to_string();
    assert!(
        text.contains("whose lease ends at") && text.contains(" s) unless renewed"),
        "{text}"
    );
    let out = first.await.unwrap();
    assert_eq!(out.state.log.last().unwrap(), "approved=true receipt=1");
    // Now the session is completed, so the interrupt is gone.
    let third = agent.resume(true, &session, &interrupt).await.unwrap_err();
    assert!(matches!(third, SessionError::NoInterrupt(_)), "{third}");
}

/// A memory store whose next two commits, once armed, wait for each
/// other: two runs that both read the head before either writes.
#[derive(Debug, Default)]
struct Gated {
    inner: MemoryStore,
    gate: std::sync::Mutex<Option<Arc<tokio::sync::Barrier>>>,
}

#[async_trait::async_trait]
impl SessionStore for Gated {
    async fn load(
        &self,
        s: &SessionId,
    ) -> Result<Option<harness::session::StoredRun>, harness::session::StoreError> {
        self.inner.load(s).await
    }
    async fn commit(
        &self,
        c: &harness::session::Commit,
    ) -> Result<(), harness::session::StoreError> {
        let gate = self.gate.lock().unwrap().clone();
        if let Some(gate) = gate
            && gate.wait().await.is_leader()
        {
            *self.gate.lock().unwrap() = None;
        }
        self.inner.commit(c).await
    }
    async fn checkpoints(
        &self,
        s: &SessionId,
        from: u64,
    ) -> Result<Vec<harness::session::Checkpoint>, harness::session::StoreError> {
        self.inner.checkpoints(s, from).await
    }
    async fn sessions(&self) -> Result<Vec<SessionId>, harness::session::StoreError> {
        self.inner.sessions().await
    }
    async fn flush(&self) -> Result<(), harness::session::StoreError> {
        Ok(())
    }
}

#[tokio::test]
async fn the_loser_of_two_resumes_at_once_is_told_when_the_winners_lease_ends() {
    let store = Arc::new(Gated::default());
    let effects = Arc::new(AtomicU32::new(0));
    let agent = create_agent_with(
        "tally",
        &harness(store.clone(), SessionConfig::default()),
        EffectsAgent {
            side_effects: effects,
        },
    );
    let (session, interrupt) = paused(&agent).await;
    *store.gate.lock().unwrap() = Some(Arc::new(tokio::sync::Barrier::new(2)));
    let (a, b) = tokio::join!(
        agent.resume(true, &session, &interrupt),
        agent.resume(false, &session, &interrupt)
    );
    let (winner, loser) = match (a, b) {
        (Ok(run), Err(e)) | (Err(e), Ok(run)) => (run, e),
        (a, b) => panic!("one resume must win: {:?} {:?}", a.err(), b.err()),
    };
    let SessionError::InFlight(held) = &loser else {
        panic!("{loser}");
    };
    // The lease the winner took, not "ends now": a caller retrying at
    // `expires_at` would otherwise retry at once, again and again.
    let head = store.load(&session).await.unwrap().unwrap();
    let lease = head.lease.as_ref().unwrap();
    assert_eq!(held.expires_at, lease.expires_at, "{loser}");
    assert_eq!(held.owner, lease.owner, "{loser}");
    assert!(
        held.expires_at > store.now() + 1_000,
        "{loser}: the lease ends at {}, now is {}",
        held.expires_at,
        store.now()
    );
    winner.await.unwrap();
}

#[tokio::test]
async fn racing_resumes_from_many_tasks_let_exactly_one_through() {
    let agent = fresh_agent();
    let (session, interrupt) = paused(&agent).await;
    let mut tasks = Vec::new();
    for i in 0..8 {
        let (agent, session, interrupt) = (agent.clone(), session.clone(), interrupt.clone());
        tasks.push(tokio::spawn(async move {
            match agent.resume(i == 0, &session, &interrupt).await {
                Ok(run) => Some(run.await.unwrap()),
                Err(SessionError::InFlight(_) | SessionError::NoInterrupt(_)) => None,
                Err(other) => panic!("{other}"),
            }
        }));
    }
    let mut winners = 0;
    for t in tasks {
        winners += usize::from(t.await.unwrap().is_some());
    }
    assert_eq!(winners, 1);
    let state = agent.state_at(&session, None).await.unwrap();
    assert_eq!(
        state
            .log
            .iter()
            .filter(|l| l.starts_with("approved"))
            .count(),
        1
    );
}

#[tokio::test]
async fn a_session_of_another_agent_is_a_store_load_error() {
    let store = Arc::new(MemoryStore::new());
    let effects = Arc::new(AtomicU32::new(0));
    let run = agent(&store, &effects).run(Tally::default());
    let session = run.session_id().clone();
    run.await.unwrap();
    let other = create_agent_with(
        "someone-else",
        &harness(store.clone(), SessionConfig::default()),
        EffectsAgent {
            side_effects: effects.clone(),
        },
    );
    let err = other.state_at(&session, None).await.unwrap_err();
    assert!(
        matches!(err, SessionError::Load(ref l) if l.reason.contains("tally")),
        "{err}"
    );
    let err = other
        .state_at(&SessionId::from("nope"), None)
        .await
        .unwrap_err();
    assert!(matches!(err, SessionError::NoSession(_)), "{err}");
}

#[tokio::test]
async fn a_chat_thread_continues_from_the_stored_state_with_the_input_merged() {
    let agent = fresh_agent();
    let session = SessionId::from("thread-1");
    // A session that does not exist yet is created.
    let first = agent
        .continue_session(
            &session,
            TallyUpdate::new().until(1).log(vec!["hello".into()]),
        )
        .await
        .unwrap();
    let out = first.await.unwrap();
    let interrupt = out.interrupt.unwrap().id;
    agent
        .resume(true, &session, &interrupt)
        .await
        .unwrap()
        .await
        .unwrap();

    let second = agent
        .continue_session(
            &session,
            TallyUpdate::new().until(2).log(vec!["again".into()]),
        )
        .await
        .unwrap();
    let out = second.await.unwrap();
    assert!(out.is_interrupted());
    assert_eq!(out.state.count, 2, "continued from the stored count");
    assert_eq!(
        out.state.log,
        [
            "hello",
            "work 1",
            "approved=true receipt=1",
            "again",
            "work 2"
        ]
    );
    let history = agent.history(&session).await.unwrap();
    assert!(history.iter().any(|c| c.step == "$input"), "{history:?}");
}

#[tokio::test]
async fn fork_starts_a_new_session_from_any_checkpoint_with_an_update() {
    let agent = fresh_agent();
    let run = agent.run(Tally::default());
    let session = run.session_id().clone();
    run.await.unwrap();
    let fork = agent
        .fork(
            &session,
            1,
            Some(TallyUpdate::new().until(2).log(vec!["forked".into()])),
        )
        .await
        .unwrap();
    assert_ne!(fork, session);
    let forked = agent.state_at(&fork, None).await.unwrap();
    assert_eq!((forked.count, forked.until), (1, 2));
    assert_eq!(forked.log, ["work 1", "forked"]);
    let out = agent
        .continue_session(&fork, TallyUpdate::new())
        .await
        .unwrap()
        .await
        .unwrap();
    assert!(out.is_interrupted());
    assert_eq!(out.state.count, 2);
    // The original is untouched.
    assert_eq!(agent.state_at(&session, None).await.unwrap().count, 3);
}

#[tokio::test]
async fn a_run_that_died_mid_step_is_recovered_without_repeating_completed_steps() {
    use std::sync::atomic::{AtomicBool, Ordering};
    /// Set when a step begins to hang.
    static HUNG: AtomicBool = AtomicBool::new(false);
    let store = Arc::new(MemoryStore::new());
    let config = SessionConfig {
        lease_ttl: Duration::from_millis(1_500),
        ..SessionConfig::default()
    };

    #[derive(Context)]
    struct Gate {
        #[slot(run)]
        hang_at: u32,
    }
    async fn step(s: Arc<Tally>, cx: Cx<Gate>) -> StepResult<TallyUpdate> {
        if s.count == cx.hang_at {
            HUNG.store(true, Ordering::SeqCst);
            std::future::pending::<()>().await;
        }
        Ok(TallyUpdate::new()
            .count(1)
            .log(vec![format!("step {}", s.count + 1)]))
    }
    let build = || {
        Harness::<Tally, Gate>::builder()
            .step("step")
            .run(step)
            .route(|s: &Tally| if s.count < 5 { "again" } else { "done" })
            .on("again")
            .to("step")
            .on("done")
            .end()
            .start("step")
            .store(store.clone())
            .session_config(config.clone())
            .build()
            .unwrap()
    };
    let agent = create_agent("crashy", &build());
    let mut run = agent.with(GateRun { hang_at: 2 }).run(Tally::default());
    let session = run.session_id().clone();
    let hung = async {
        while !HUNG.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), async {
        tokio::select! {
            out = &mut run => panic!("the run ended: {out:?}"),
            () = hung => {}
        }
    })
    .await
    .expect("step 3 did not begin within 60 s");
    // The "process" dies while step 3 runs: nothing of the run is dropped
    // (a run dropped in a live process gives its lease up), it is never
    // polled again.
    std::mem::forget(run);
    let head = store.load(&session).await.unwrap().unwrap();
    assert_eq!(head.phase, SessionPhase::Running);
    assert_eq!(head.steps, 2);

    let fresh = create_agent("crashy", &build());
    let early = fresh
        .with(GateRun { hang_at: 99 })
        .recover(&session)
        .await
        .unwrap_err();
    assert!(
        matches!(early, SessionError::InFlight(_)),
        "lease still live: {early}"
    );
    tokio::time::sleep(Duration::from_millis(1_600)).await;
    let out = fresh
        .with(GateRun { hang_at: 99 })
        .recover(&session)
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!(out.signal, "done");
    assert_eq!(
        out.state.log,
        ["step 1", "step 2", "step 3", "step 4", "step 5"],
        "no step lost, none applied twice"
    );
}

#[tokio::test]
async fn in_process_resume_reacquires_the_session_and_persists() {
    let agent = fresh_agent();
    let mut run = agent.run(Tally::default());
    let session = run.session_id().clone();
    let paused = (&mut run).await.unwrap();
    run.resume(false, &paused.interrupt.unwrap().id).unwrap();
    let done = (&mut run).await.unwrap();
    assert_eq!(done.state.log.last().unwrap(), "approved=false receipt=1");
    let head = agent.session(&session).await.unwrap();
    assert_eq!(
        head.phase,
        SessionPhase::Completed {
            signal: "done".into()
        }
    );
    assert_eq!(agent.state_at(&session, None).await.unwrap(), done.state);
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Long {
    #[field(reduce = append)]
    chunks: Vec<String>,
}

async fn add_kib() -> StepResult<LongUpdate> {
    Ok(LongUpdate::new().chunks(vec!["x".repeat(1024)]))
}

/// Runs 500 steps that each append 1 KiB; returns the session and the final
/// state's size in bytes.
async fn long_session(
    store: impl SessionStore + 'static,
) -> (harness::Agent<Long>, SessionId, usize) {
    let h = Harness::<Long>::builder()
        .step("add")
        .run(add_kib)
        .route(|s: &Long| {
            if s.chunks.len() < 500 {
                "again"
            } else {
                "done"
            }
        })
        .on("again")
        .to("add")
        .on("done")
        .end()
        .start("add")
        .store(store)
        .build()
        .unwrap();
    let agent = create_agent("long", &h);
    let run = agent.run(Long { chunks: vec![] });
    let session = run.session_id().clone();
    let out = run.await.unwrap();
    let size = serde_json::to_vec(&out.state).unwrap().len();
    assert_eq!(
        agent.state_at(&session, None).await.unwrap().chunks,
        out.state.chunks
    );
    (agent, session, size)
}

fn dir_size(path: &std::path::Path) -> u64 {
    std::fs::read_dir(path)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let meta = e.metadata().unwrap();
            if meta.is_dir() {
                dir_size(&e.path())
            } else {
                meta.len()
            }
        })
        .sum()
}

/// The sequence numbers and step indexes of the snapshots in `session`'s log.
async fn snapshots(store: &dyn SessionStore, session: &SessionId) -> Vec<(u64, u64)> {
    store
        .checkpoints(session, 0)
        .await
        .unwrap()
        .iter()
        .filter(|cp| matches!(cp.kind, CheckpointKind::Snapshot(_)))
        .map(|cp| (cp.seq, cp.index))
        .collect()
}

/// The bytes of the update records after the latest snapshot.
async fn updates_since_snapshot(store: &dyn SessionStore, session: &SessionId) -> usize {
    let log = store.checkpoints(session, 0).await.unwrap();
    log.iter()
        .rev()
        .take_while(|cp| matches!(cp.kind, CheckpointKind::Update(_)))
        .map(|cp| match &cp.kind {
            CheckpointKind::Update(v) => serde_json::to_vec(v).unwrap().len(),
            _ => 0,
        })
        .sum()
}

#[tokio::test]
async fn a_session_that_only_appends_is_stored_once_not_twice() {
    let store = Arc::new(MemoryStore::new());
    let (_, session, final_size) = long_session(store.clone()).await;
    // Its updates are its state: no snapshot but the initial one.
    assert_eq!(snapshots(store.as_ref(), &session).await, vec![(0, 0)]);
    let log = store.checkpoints(&session, 0).await.unwrap();
    let stored: usize = log
        .iter()
        .map(|cp| serde_json::to_vec(cp).unwrap().len())
        .sum::<usize>()
        + serde_json::to_vec(&store.load(&session).await.unwrap().unwrap())
            .unwrap()
            .len();
    let ratio = stored as f64 / final_size as f64;
    println!(
        "memory: 500 steps x 1 KiB: stored {stored} bytes, final state {final_size} bytes, ratio {ratio:.2}"
    );
    assert!(ratio < 1.2, "ratio {ratio}");
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Draft {
    /// Rewritten by every step.
    text: String,
    #[field(reduce = add)]
    steps: u64,
}

/// The text step `n` writes: `len` bytes that differ from step to step.
fn draft_text(n: u64, len: usize) -> String {
    format!("{n:0>len$}")
}

/// An agent whose step rewrites a `len`-byte text until `steps` steps
/// have run, then ends with `enough`.
fn draft_agent(
    store: impl SessionStore + 'static,
    config: SessionConfig,
    steps: u64,
    len: usize,
) -> harness::Agent<Draft> {
    let h = Harness::<Draft>::builder()
        .step("rewrite")
        .run(move |s: Arc<Draft>| async move {
            Ok(DraftUpdate::new()
                .text(draft_text(s.steps + 1, len))
                .steps(1))
        })
        .route(move |s: &Draft| if s.steps < steps { "again" } else { "enough" })
        .on("again")
        .to("rewrite")
        .on("enough")
        .end()
        .start("rewrite")
        .store(store)
        .session_config(config)
        .build()
        .unwrap();
    create_agent("draft", &h)
}

/// Runs `steps` steps that each rewrite a `len`-byte text.
async fn rewriting_session(
    store: Arc<MemoryStore>,
    config: SessionConfig,
    steps: u64,
    len: usize,
) -> (harness::Agent<Draft>, SessionId, Draft) {
    let agent = draft_agent(store, config, steps, len);
    let run = agent.run(Draft::default());
    let session = run.session_id().clone();
    let out = run.await.unwrap();
    (agent, session, out.state)
}

/// Checks the head's accounting against the log: the bytes it counts since
/// the latest snapshot are those of the updates after it, and less than
/// twice the larger of the state as last measured and the minimum.
async fn assert_bounded_tail(store: &dyn SessionStore, session: &SessionId, min: u64) {
    let head = store.load(session).await.unwrap().unwrap();
    let tail = updates_since_snapshot(store, session).await as u64;
    assert_eq!(head.bytes_since_snapshot, tail, "the head's count");
    assert!(
        tail < 2 * head.state_bytes.max(min),
        "tail of {tail} bytes, state {} bytes",
        head.state_bytes
    );
}

#[tokio::test]
async fn a_session_that_overwrites_is_snapshotted_and_replays_a_bounded_tail() {
    let len = 10 * 1024;
    for steps in [137, 200] {
        let store = Arc::new(MemoryStore::new());
        let (agent, session, last) =
            rewriting_session(store.clone(), SessionConfig::default(), steps, len).await;
        assert_eq!(last.text, draft_text(steps, len));

        let snaps = snapshots(store.as_ref(), &session).await;
        // The initial snapshot and the latest: each new one replaced the one
        // before it.
        assert_eq!(snaps.len(), 2, "{snaps:?}");
        assert_eq!(snaps[0], (0, 0));
        assert!(
            snaps[1].1 > steps - 20,
            "latest snapshot at step {}",
            snaps[1].1
        );
        assert_bounded_tail(store.as_ref(), &session, 64 * 1024).await;
        // With a minimum of 64 KiB and ~10 KiB per step, the tail holds at
        // most 12 updates.
        assert!(steps - snaps[1].1 <= 12, "{snaps:?}");
        // All updates are kept: any step can still be read back, before,
        // at and after the latest snapshot.
        for index in [1, 57, snaps[1].1 - 1, snaps[1].1, steps] {
            let state = agent.state_at(&session, Some(index)).await.unwrap();
            assert_eq!(state.text, draft_text(index, len));
            assert_eq!(state.steps, index);
        }
    }
}

/// A string that counts how often it is serialized (this test's own).
#[derive(Clone, Debug, Deserialize, schemars::JsonSchema)]
struct Counted(String);

static SERIALIZED: AtomicU32 = AtomicU32::new(0);

impl Serialize for Counted {
    fn serialize<Z: serde::Serializer>(&self, s: Z) -> Result<Z::Ok, Z::Error> {
        SERIALIZED.fetch_add(1, Ordering::Relaxed);
        self.0.serialize(s)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Pile {
    #[field(reduce = append)]
    items: Vec<Counted>,
}

#[tokio::test]
async fn the_state_is_measured_once_per_doubling_not_per_step() {
    let store = Arc::new(MemoryStore::new());
    let h = Harness::<Pile>::builder()
        .step("add")
        .run(|| async { Ok(PileUpdate::new().items(vec![Counted("x".repeat(1024))])) })
        .route(|s: &Pile| if s.items.len() < 500 { "again" } else { "done" })
        .on("again")
        .to("add")
        .on("done")
        .end()
        .start("add")
        .store(store.clone())
        .build()
        .unwrap();
    let agent = create_agent("pile", &h);
    let run = agent.run(Pile { items: vec![] });
    let session = run.session_id().clone();
    run.await.unwrap();
    // Each update is serialized a few times (stored, counted); the state,
    // 1 to 500 items, only when the updates doubled: about 128 + 256 items.
    // Measuring it at every step would serialize 125,250 items.
    let serialized = SERIALIZED.load(Ordering::Relaxed);
    assert!(serialized < 3000, "{serialized} items serialized");
    let head = store.load(&session).await.unwrap().unwrap();
    assert!(
        head.measured_index > 0 && head.measured_index < 500,
        "{head:?}"
    );
    assert_eq!(snapshots(store.as_ref(), &session).await, vec![(0, 0)]);
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Chat {
    /// Replaced by each turn's input.
    doc: String,
    #[field(reduce = add)]
    replies: u64,
}

#[tokio::test]
async fn run_inputs_count_toward_snapshots() {
    // Each turn's input rewrites a 20 KiB document, then one small step
    // runs: the inputs are what make a snapshot pay.
    let store = Arc::new(MemoryStore::new());
    let h = Harness::<Chat>::builder()
        .step("reply")
        .run(|| async { Ok(ChatUpdate::new().replies(1)) })
        .end()
        .start("reply")
        .store(store.clone())
        .session_config(SessionConfig {
            snapshot_every: 10,
            ..SessionConfig::default()
        })
        .build()
        .unwrap();
    let agent = create_agent("chat", &h);
    let session = SessionId::from("chat-1");
    for turn in 1..=60u64 {
        let input = ChatUpdate::new().doc(draft_text(turn, 20 * 1024));
        let out = agent
            .continue_session(&session, input)
            .await
            .unwrap()
            .await
            .unwrap();
        assert_eq!(out.state.replies, turn);
        assert_bounded_tail(store.as_ref(), &session, 64 * 1024).await;
    }
    let snaps = snapshots(store.as_ref(), &session).await;
    assert_eq!(snaps.len(), 2, "{snaps:?}");
    assert!(snaps[1].1 > 100, "{snaps:?}");
    let at = agent
        .state_at(&session, Some(snaps[1].1 + 1))
        .await
        .unwrap();
    assert_eq!(at.replies, snaps[1].1.div_ceil(2));
}

#[tokio::test]
async fn every_k_steps_a_snapshot_is_taken_when_it_pays() {
    let config = SessionConfig {
        snapshot_every: 10,
        ..SessionConfig::default()
    };
    // Small rewrites: the size rule never fires, the step rule does.
    let store = Arc::new(MemoryStore::new());
    let (agent, session, _) = rewriting_session(store.clone(), config.clone(), 45, 100).await;
    let snaps = snapshots(store.as_ref(), &session).await;
    assert_eq!(snaps.iter().map(|s| s.1).collect::<Vec<_>>(), vec![0, 40]);
    assert_eq!(
        agent.state_at(&session, Some(33)).await.unwrap().text,
        draft_text(33, 100)
    );

    // Appending: the updates are the state, so no snapshot pays.
    let h = Harness::<Long>::builder()
        .step("add")
        .run(add_kib)
        .route(|s: &Long| if s.chunks.len() < 45 { "again" } else { "done" })
        .on("again")
        .to("add")
        .on("done")
        .end()
        .start("add")
        .store(store.clone())
        .session_config(config)
        .build()
        .unwrap();
    let agent = create_agent("long", &h);
    let run = agent.run(Long { chunks: vec![] });
    let session = run.session_id().clone();
    run.await.unwrap();
    assert_eq!(snapshots(store.as_ref(), &session).await, vec![(0, 0)]);
}

#[tokio::test]
async fn on_disk_a_500_step_session_stays_under_three_times_its_final_state() {
    let dir = tempfile::tempdir().unwrap();
    let (_, _, final_size) =
        long_session(harness_stores::FileStore::open(dir.path()).unwrap()).await;
    let on_disk = dir_size(dir.path());
    let ratio = on_disk as f64 / final_size as f64;
    println!(
        "file store: {on_disk} bytes on disk, final state {final_size} bytes, ratio {ratio:.2}"
    );
    assert!(ratio < 1.5, "file store: ratio {ratio}");

    let dir = tempfile::tempdir().unwrap();
    let store = harness_stores::SledStore::open(dir.path()).unwrap();
    let (_, _, final_size) = long_session(store).await;
    // The store is closed (and flushed) with the agent.
    let on_disk = dir_size(dir.path());
    let ratio = on_disk as f64 / final_size as f64;
    println!(
        "sled store: {on_disk} bytes on disk, final state {final_size} bytes, ratio {ratio:.2}"
    );
    assert!(ratio < 3.0, "sled store: ratio {ratio}");
}

#[tokio::test]
async fn a_stale_writer_fails_with_a_store_error_instead_of_overwriting() {
    let agent = fresh_agent();
    let mut run = agent.run(Tally::default());
    let session = run.session_id().clone();
    let paused = (&mut run).await.unwrap();
    let id = paused.interrupt.unwrap().id;
    // Another process answers first…
    agent
        .resume(true, &session, &id)
        .await
        .unwrap()
        .await
        .unwrap();
    // …so this process's in-memory resume must not write over it.
    run.resume(false, &id).unwrap();
    let err = (&mut run).await.unwrap_err();
    assert!(matches!(err, RunError::Store(_)), "{err}");
    let state = agent.state_at(&session, None).await.unwrap();
    assert_eq!(state.log.last().unwrap(), "approved=true receipt=1");
}

#[tokio::test]
async fn the_sessions_command_lists_shows_and_resumes() {
    use harness::cli::{CommandError, sessions_command};
    let agent = fresh_agent();
    let run = agent.run(Tally::default());
    let session = run.session_id().to_string();
    run.await.unwrap();

    let list = sessions_command(&agent, ["list"], || ()).await.unwrap();
    assert!(
        list.contains(&session) && list.contains("interrupted at `approve`"),
        "{list}"
    );
    let show = sessions_command(&agent, ["show", &session], || ())
        .await
        .unwrap();
    assert!(show.contains("next step: approve"), "{show}");
    assert!(show.contains("\"count\": 3"), "state as JSON: {show}");
    let history = sessions_command(&agent, ["history", &session], || ())
        .await
        .unwrap();
    let steps: Vec<&str> = history
        .lines()
        .skip(2)
        .filter_map(|l| l.split_whitespace().last())
        .collect();
    assert_eq!(steps, ["$start", "work", "work", "work"], "{history}");
    let resumed = sessions_command(&agent, ["resume", &session, "true"], || ())
        .await
        .unwrap();
    // The run's steps in all: three `work`s before the pause, `approve` after.
    assert!(resumed.contains("done after 4 steps"), "{resumed}");
    let state = agent
        .state_at(&SessionId::from(session.as_str()), None)
        .await
        .unwrap();
    assert_eq!(
        state.log.last().unwrap(),
        "approved=true receipt=1",
        "the answer was read as JSON"
    );
    // Answered: nothing to resume any more.
    match sessions_command(&agent, ["resume", &session, "true"], || ()).await {
        Err(CommandError::NotWaiting { session: s, phase }) => {
            assert_eq!(s.as_str(), session);
            assert!(phase.contains("completed"), "{phase}");
        }
        other => panic!("expected NotWaiting, got {other:?}"),
    }
    match sessions_command(&agent, ["show", "no-such-session"], || ()).await {
        Err(CommandError::Session(SessionError::NoSession(e))) => {
            assert_eq!(e.session.as_str(), "no-such-session")
        }
        other => panic!("expected NoSession, got {other:?}"),
    }
    for bad in [&["bogus"][..], &["show"], &["resume", &session]] {
        match sessions_command(&agent, bad, || ()).await {
            Err(CommandError::Usage(e)) => {
                assert!(e.to_string().contains("Usage: sessions"), "{e}")
            }
            other => panic!("{bad:?}: expected a usage error, got {other:?}"),
        }
    }
}

/// A head that does not read hides no other session from the typed
/// `sessions list`: it lists the agent's other sessions and a line for the
/// unreadable one, and fails with both ([`CommandError::Unreadable`]);
/// `show` of a session whose log does not read shows its head.
/// `Agent::sessions` still fails on the head, naming it. Nothing is
/// written.
#[tokio::test]
async fn the_sessions_command_lists_what_reads_beside_a_damaged_head() {
    use harness::cli::{CommandError, sessions_command};
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn SessionStore> =
        Arc::new(harness_stores::FileStore::open(dir.path()).unwrap());
    let agent = create_agent_with(
        "tally",
        &harness(store, SessionConfig::default()),
        EffectsAgent {
            side_effects: Arc::new(AtomicU32::new(0)),
        },
    );
    let (healthy, _) = paused(&agent).await;
    let (broken_log, _) = paused(&agent).await;
    let (broken_head, _) = paused(&agent).await;
    // The file store's documented layout: `s-{id}/head.json`,
    // `s-{id}/cp-{seq:020}.json`.
    let session_dir = |id: &SessionId| dir.path().join(format!("s-{id}"));
    std::fs::write(session_dir(&broken_head).join("head.json"), b"{\"torn").unwrap();
    std::fs::write(
        session_dir(&broken_log).join(format!("cp-{:020}.json", 2)),
        b"not json",
    )
    .unwrap();
    let files = |id: &SessionId| {
        let mut all: Vec<_> = std::fs::read_dir(session_dir(id))
            .unwrap()
            .map(|e| {
                let path = e.unwrap().path();
                let bytes = std::fs::read(&path).unwrap();
                (path, bytes)
            })
            .collect();
        all.sort();
        all
    };
    let before: Vec<_> = [&healthy, &broken_log, &broken_head].map(files).into();

    match sessions_command(&agent, ["list"], || ()).await {
        Err(CommandError::Unreadable { shown, unreadable }) => {
            let lines: Vec<&str> = shown.lines().collect();
            assert_eq!(lines.len(), 3, "{shown}");
            assert!(
                shown.contains(&format!("{healthy}  agent tally")),
                "{shown}"
            );
            assert!(
                shown.contains(&format!("{broken_log}  agent tally")),
                "{shown}"
            );
            assert!(
                shown.contains(&format!("{broken_head}  cannot be read: its head")),
                "{shown}"
            );
            assert_eq!(unreadable.len(), 1);
            assert_eq!(unreadable[0].session, broken_head);
        }
        other => panic!("expected the listing and the unreadable head, got {other:?}"),
    }
    match sessions_command(&agent, ["show", broken_log.as_str()], || ()).await {
        Err(e @ CommandError::Unreadable { .. }) => {
            assert!(e.to_string().contains("checkpoint 2"), "{e}");
            let CommandError::Unreadable { shown, .. } = e else {
                unreachable!()
            };
            assert!(shown.contains("next step: approve"), "{shown}");
            assert!(!shown.contains("state:"), "{shown}");
        }
        other => panic!("expected the head and the unreadable log, got {other:?}"),
    }
    match sessions_command(&agent, ["show", broken_head.as_str()], || ()).await {
        Err(CommandError::Session(SessionError::Load(e))) => {
            assert_eq!(e.session, broken_head)
        }
        other => panic!("expected the unreadable head, got {other:?}"),
    }
    match agent.sessions().await {
        Err(SessionError::Load(e)) => assert_eq!(e.session, broken_head),
        other => panic!("expected the unreadable head, got {other:?}"),
    }
    let after: Vec<_> = [&healthy, &broken_log, &broken_head].map(files).into();
    assert!(after == before, "the commands changed the store");
}

/// A memory store that shows every commit to `watch` first, which may
/// refuse it.
struct Watched {
    inner: MemoryStore,
    #[allow(clippy::type_complexity)] // one closure, named by its field
    watch: Box<
        dyn Fn(&harness::session::Commit) -> Result<(), harness::session::StoreError> + Send + Sync,
    >,
}

impl Watched {
    fn new(
        watch: impl Fn(&harness::session::Commit) -> Result<(), harness::session::StoreError>
        + Send
        + Sync
        + 'static,
    ) -> Self {
        Self {
            inner: MemoryStore::new(),
            watch: Box::new(watch),
        }
    }
}

impl std::fmt::Debug for Watched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watched").finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl SessionStore for Watched {
    async fn load(
        &self,
        session: &SessionId,
    ) -> Result<Option<harness::session::StoredRun>, harness::session::StoreError> {
        self.inner.load(session).await
    }
    async fn commit(
        &self,
        commit: &harness::session::Commit,
    ) -> Result<(), harness::session::StoreError> {
        (self.watch)(commit)?;
        self.inner.commit(commit).await
    }
    async fn checkpoints(
        &self,
        session: &SessionId,
        from_seq: u64,
    ) -> Result<Vec<harness::session::Checkpoint>, harness::session::StoreError> {
        self.inner.checkpoints(session, from_seq).await
    }
    async fn sessions(&self) -> Result<Vec<SessionId>, harness::session::StoreError> {
        self.inner.sessions().await
    }
    async fn flush(&self) -> Result<(), harness::session::StoreError> {
        self.inner.flush().await
    }
}

/// A store whose commits that record a completed run fail while `fail_end`
/// is set: a process that dies between a run's last checkpoint and the
/// record of its end.
fn loses_the_end(fail_end: &Arc<std::sync::atomic::AtomicBool>) -> Watched {
    let fail_end = Arc::clone(fail_end);
    Watched::new(move |commit| {
        if matches!(commit.head.phase, SessionPhase::Completed { .. })
            && fail_end.load(Ordering::SeqCst)
        {
            return Err(harness::session::StoreError::backend("the process died"));
        }
        Ok(())
    })
}

/// Polls `recover` until the session is free, for at most 20 s (its lease
/// is 10 minutes): how long a dropped run's lease takes to be given up.
async fn recover_within<C: Context>(
    agent: &harness::Agent<Tally, C>,
    session: &SessionId,
) -> harness::Run<Tally, C>
where
    C::Run: harness::slots::NoSlots,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        match agent.recover(session).await {
            Ok(run) => return run,
            Err(SessionError::InFlight(_)) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => panic!("the dropped run's lease was not given up: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_dropped_mid_step_gives_its_lease_up_at_once() {
    let store = Arc::new(MemoryStore::new());
    let long = SessionConfig {
        lease_ttl: Duration::from_secs(600),
        ..SessionConfig::default()
    };
    let hang = Arc::new(AtomicU32::new(2));
    let hung = Arc::new(tokio::sync::Notify::new());
    let h = {
        let (hang, hung) = (Arc::clone(&hang), Arc::clone(&hung));
        Harness::<Tally>::builder()
            .step("step")
            .run(move |s: Arc<Tally>, _cx: Cx<()>| {
                let (hang, hung) = (Arc::clone(&hang), Arc::clone(&hung));
                async move {
                    if s.count == hang.load(Ordering::SeqCst) {
                        hung.notify_one();
                        std::future::pending::<()>().await;
                    }
                    Ok(TallyUpdate::new()
                        .count(1)
                        .log(vec![format!("step {}", s.count + 1)]))
                }
            })
            .route(|s: &Tally| if s.count < 5 { "again" } else { "done" })
            .on("again")
            .to("step")
            .on("done")
            .end()
            .start("step")
            .store(store.clone())
            .session_config(long)
            .build()
            .unwrap()
    };
    let agent = create_agent("dropped", &h);
    // Dropped mid-step, as `tokio::time::timeout` or `select!` drop a run.
    let run = agent.run(Tally::default());
    let session = run.session_id().clone();
    let waited = tokio::time::timeout(Duration::from_secs(60), async {
        tokio::select! {
            out = run => panic!("the run ended: {out:?}"),
            () = hung.notified() => {}
        }
    })
    .await;
    assert!(waited.is_ok(), "step 3 did not begin within 60 s");
    hang.store(99, Ordering::SeqCst);
    let out = recover_within(&agent, &session).await.await.unwrap();
    assert_eq!(out.signal, "done");
    assert_eq!(
        out.state.log,
        ["step 1", "step 2", "step 3", "step 4", "step 5"],
        "no step lost, none applied twice"
    );

    // Dropped in a task that is aborted.
    hang.store(1, Ordering::SeqCst);
    let run = agent.run(Tally::default());
    let session = run.session_id().clone();
    let task = tokio::spawn(run);
    tokio::time::timeout(Duration::from_secs(60), hung.notified())
        .await
        .expect("step 2 did not begin within 60 s");
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    hang.store(99, Ordering::SeqCst);
    let out = recover_within(&agent, &session).await.await.unwrap();
    assert_eq!(out.state.count, 5);
    assert_eq!(out.steps, 5, "the steps before the abort still count");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_run_dropped_before_it_is_awaited_gives_its_lease_up() {
    let store = Arc::new(MemoryStore::new());
    let config = SessionConfig {
        lease_ttl: Duration::from_secs(600),
        ..SessionConfig::default()
    };
    let agent = asking_agent(&store, config);
    let paused = agent.run(Tally::default()).await.unwrap();
    let (session, asked) = (paused.session_id, paused.interrupt.unwrap());
    // `resume` takes the lease and records the answer; the run it gives is
    // dropped unpolled.
    let taken = agent.resume(4, &session, &asked.id).await.unwrap();
    let held = store.load(&session).await.unwrap().unwrap();
    assert!(held.lease.is_some(), "resume holds the lease");
    drop(taken);
    let done = recover_within(&agent, &session).await.await.unwrap();
    assert_eq!((done.signal, done.state.count), (Signal::END, 4));
}

#[tokio::test]
async fn a_run_that_died_after_its_last_checkpoint_is_recorded_as_completed() {
    let fail_end = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let store = Arc::new(loses_the_end(&fail_end));
    let agent = draft_agent(store.clone(), SessionConfig::default(), 3, 8);
    let run = agent.run(Draft::default());
    let session = run.session_id().clone();
    assert!(matches!(run.await, Err(RunError::Store(_))));
    let head = store.load(&session).await.unwrap().unwrap();
    assert_eq!(head.phase, SessionPhase::Running);
    assert_eq!((head.steps, head.next_step.as_deref()), (3, None));
    // A later run of this session is queued behind the lost end.
    agent
        .submit_input(
            &session,
            DraftUpdate::new().text(String::from("queued")),
            harness::Busy::Queue,
        )
        .await
        .unwrap();

    // The process is gone; its lease runs out, and a worker recovers.
    fail_end.store(false, Ordering::SeqCst);
    let mut head = store.load(&session).await.unwrap().unwrap();
    let expected = head.version;
    head.version += 1;
    head.lease = None;
    store
        .commit(&harness::session::Commit {
            head,
            expected_version: Some(expected),
            append: vec![],
            remove: vec![],
            durable: true,
        })
        .await
        .unwrap();
    match agent.recover(&session).await {
        Err(SessionError::NothingToRecover { why, .. }) => {
            assert!(why.contains("`enough`"), "{why}");
        }
        Err(e) => panic!("expected NothingToRecover, got {e}"),
        Ok(_) => panic!("expected NothingToRecover, got a run"),
    }
    // The end is recorded, and the queued run has started in its place.
    let head = store.load(&session).await.unwrap().unwrap();
    assert_eq!(head.phase, SessionPhase::Running);
    assert_eq!(head.next_step.as_deref(), Some("rewrite"));
    assert!(head.queued.is_empty());
    let history = agent.history(&session).await.unwrap();
    assert_eq!(
        history.iter().map(|c| c.step.as_str()).collect::<Vec<_>>(),
        ["$start", "rewrite", "rewrite", "rewrite", "$input"]
    );
    // And it runs.
    let out = agent.recover(&session).await.unwrap().await.unwrap();
    assert_eq!(out.signal.as_str(), "enough");
    assert_eq!(out.state.steps, 4);
}

/// Asks how many to add: the answer must be a number.
async fn ask_amount(_: Arc<Tally>, cx: Cx<()>) -> StepResult<TallyUpdate> {
    let amount: u32 = cx.interrupt("how many?")?;
    Ok(TallyUpdate::new().count(amount))
}

/// An agent of one step that asks for an amount, its sessions in `store`.
fn asking_agent(store: &Arc<MemoryStore>, config: SessionConfig) -> Agent<Tally> {
    let h = Harness::<Tally>::builder()
        .step("ask")
        .run(ask_amount)
        .end()
        .start("ask")
        .store(store.clone())
        .session_config(config)
        .build()
        .unwrap();
    create_agent("amounts", &h)
}

#[tokio::test]
async fn a_stored_session_refuses_a_wrongly_shaped_answer_and_keeps_waiting() {
    let store = Arc::new(MemoryStore::new());
    let build = || asking_agent(&store, SessionConfig::default());
    let paused = build().run(Tally::default()).await.unwrap();
    let (session, asked) = (paused.session_id, paused.interrupt.unwrap());
    // Each wrong answer comes from a fresh agent, as from another process.
    for bad in [
        serde_json::json!("three"),
        serde_json::json!(-1),
        serde_json::json!(2.5),
        serde_json::json!({"amount": 3}),
        serde_json::json!(null),
    ] {
        let agent = build();
        let mut run = agent
            .resume(bad.clone(), &session, &asked.id)
            .await
            .unwrap();
        let events = run.events();
        let err = (&mut run).await.unwrap_err();
        drop(run);
        // The stream says why the run paused again, then that it did.
        let events: Vec<_> = events.collect().await;
        let kinds: Vec<&str> = events.iter().map(RunEvent::kind).collect();
        assert_eq!(
            kinds[kinds.len() - 2..],
            ["answer_rejected", "interrupted"],
            "{bad}: {kinds:?}"
        );
        match &events[events.len() - 2] {
            RunEvent::AnswerRejected {
                path,
                interrupt,
                reason,
            } => {
                assert_eq!((interrupt, path), (&asked.id, &asked.path), "{bad}");
                assert!(reason.contains("u32"), "{bad}: {reason}");
            }
            other => panic!("{bad}: {other:?}"),
        }
        assert!(
            matches!(&err, RunError::AnswerRejected { interrupt, .. } if *interrupt == asked.id),
            "{bad}: {err}"
        );
        // Stored: still waiting on the same interrupt, the answer not kept.
        let head = agent.session(&session).await.unwrap();
        match &head.phase {
            SessionPhase::Interrupted { interrupt } => assert_eq!(interrupt.id, asked.id, "{bad}"),
            other => panic!("{bad}: the session is {other:?}"),
        }
        assert!(
            head.journal.responses.is_empty(),
            "{bad}: {:?}",
            head.journal
        );
        assert!(head.lease.is_none(), "{bad}: the lease is released");
    }
    let done = build()
        .resume(3, &session, &asked.id)
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!((done.signal, done.state.count), (Signal::END, 3));
}

#[tokio::test]
async fn recover_drops_an_unreadable_answer_left_in_an_old_journal_and_asks_again() {
    // Before answers were checked, a bad answer failed the run and stayed in
    // the journal; such a session must not stay bricked.
    let store = Arc::new(MemoryStore::new());
    let agent = asking_agent(&store, SessionConfig::default());
    let paused = agent.run(Tally::default()).await.unwrap();
    let (session, asked) = (paused.session_id, paused.interrupt.unwrap());
    for bad in [serde_json::json!("three"), serde_json::json!({"n": 3})] {
        let head = agent.session(&session).await.unwrap();
        let mut broken = head.clone();
        broken.version += 1;
        broken.phase = SessionPhase::Failed {
            error: "step `ask` failed: the response does not have the expected shape".into(),
        };
        broken.journal.responses = vec![bad.clone()];
        store
            .commit(&harness::session::Commit {
                head: broken,
                expected_version: Some(head.version),
                append: vec![],
                remove: vec![],
                durable: true,
            })
            .await
            .unwrap();
        let again = agent
            .recover(&session)
            .await
            .unwrap()
            .await
            .unwrap_or_else(|e| panic!("{bad}: {e}"));
        let asks = again.interrupt.expect("asks again");
        assert_eq!(asks.payload, "how many?", "{bad}");
        assert_ne!(asks.id, asked.id, "{bad}: a new question, not the lost one");
        let head = agent.session(&session).await.unwrap();
        assert!(
            head.journal.responses.is_empty(),
            "{bad}: {:?}",
            head.journal
        );
    }
    let paused = agent.session(&session).await.unwrap();
    let SessionPhase::Interrupted { interrupt } = paused.phase else {
        panic!("not waiting: {:?}", paused.phase)
    };
    let done = agent
        .resume(4, &session, &interrupt.id)
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!(done.state.count, 4);
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Errand {
    #[field(reduce = add)]
    n: u64,
    /// What the last step does: `end`, `ask` (a person), `fail` or `stop`.
    then: String,
    answer: String,
}

fn errand_agent(store: Arc<Watched>, config: SessionConfig) -> harness::Agent<Errand> {
    let h = Harness::<Errand>::builder()
        .step("work")
        .run(|s: Arc<Errand>| async move {
            if s.n == 1 && s.then == "fail" {
                return Err(harness::StepError::msg("the errand failed"));
            }
            Ok(ErrandUpdate::new().n(1))
        })
        .route(|s: &Errand| match (s.n, s.then.as_str()) {
            (n, _) if n < 2 => "again",
            (_, "ask") => "ask",
            _ => "done",
        })
        .on("again")
        .to("work")
        .on("ask")
        .to("ask")
        .on("done")
        .end()
        .step("ask")
        .run(|cx: Cx<()>| async move {
            let answer: String = cx.interrupt("go on?")?;
            Ok(ErrandUpdate::new().answer(answer))
        })
        .next("work")
        .start("work")
        .store(store)
        .session_config(config)
        .build()
        .unwrap();
    create_agent("errand", &h)
}

/// The last commit of a run (its settle) and the one before, as recorded.
async fn settle_of(
    then: &str,
    config: SessionConfig,
) -> ((SessionPhase, bool, bool), (SessionPhase, bool, bool)) {
    // Each commit: the head's phase, whether it holds the signal the run
    // ended with, and whether it is durable.
    let commits = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&commits);
    let store = Arc::new(Watched::new(move |commit| {
        seen.lock().unwrap().push((
            commit.head.phase.clone(),
            commit.head.ended_with.is_some(),
            commit.durable,
        ));
        Ok(())
    }));
    let agent = errand_agent(store, config);
    let _ = agent
        .run(Errand {
            then: then.into(),
            ..Errand::default()
        })
        .await;
    let commits = commits.lock().unwrap();
    let n = commits.len();
    assert!(n >= 3, "{commits:?}");
    (commits[n - 2].clone(), commits[n - 1].clone())
}

/// A run that ends where its last step's durable commit says it does
/// records its end without waiting for a flush: that commit holds the end
/// already, for `recover` should the process die (see
/// `a_run_that_died_after_its_last_checkpoint_is_recorded_as_completed`).
/// Every other settle waits for one.
#[tokio::test]
async fn only_an_end_already_in_a_durable_step_commit_is_settled_without_a_flush() {
    let every_step = SessionConfig::default();
    let (last_step, settle) = settle_of("end", every_step.clone()).await;
    assert_eq!(last_step, (SessionPhase::Running, true, true));
    assert!(matches!(settle.0, SessionPhase::Completed { .. }));
    assert!(!settle.2, "the end was waited for: {settle:?}");

    // A pause: the interrupt is in the settle alone.
    let (_, settle) = settle_of("ask", every_step.clone()).await;
    assert!(matches!(settle.0, SessionPhase::Interrupted { .. }));
    assert!(settle.2, "{settle:?}");
    // A failure.
    let (_, settle) = settle_of("fail", every_step).await;
    assert!(matches!(settle.0, SessionPhase::Failed { .. }));
    assert!(settle.2, "{settle:?}");
    // An end whose last step was not flushed.
    for durability in [Durability::AtExit, Durability::EveryN(3)] {
        let config = SessionConfig {
            durability,
            ..SessionConfig::default()
        };
        let (last_step, settle) = settle_of("end", config).await;
        assert!(!last_step.2 && last_step.1, "{durability:?}: {last_step:?}");
        assert!(matches!(settle.0, SessionPhase::Completed { .. }));
        assert!(
            settle.2,
            "{durability:?}: the end was not flushed: {settle:?}"
        );
    }
}

#[tokio::test]
async fn a_fork_of_a_session_waiting_on_an_interrupt_waits_on_it_too() {
    let store = Arc::new(MemoryStore::new());
    let effects = Arc::new(AtomicU32::new(0));
    /// Charges once, then asks how many to add, and logs the answer.
    async fn charge_then_ask(s: Arc<Tally>, cx: Cx<Effects>) -> StepResult<TallyUpdate> {
        let charged: u32 = cx
            .once("charge", async {
                cx.side_effects.fetch_add(1, Ordering::SeqCst) + 1
            })
            .await?;
        let amount: u32 = cx.interrupt("how many?")?;
        Ok(TallyUpdate::new()
            .count(amount)
            .log(vec![format!("charge {charged}, {amount} on {:?}", s.log)]))
    }
    let h = Harness::<Tally, Effects>::builder()
        .step("ask")
        .run(charge_then_ask)
        .end()
        .start("ask")
        .store(store.clone())
        .build()
        .unwrap();
    let agent = create_agent_with(
        "forks",
        &h,
        EffectsAgent {
            side_effects: Arc::clone(&effects),
        },
    );
    let paused = agent.run(Tally::default()).await.unwrap();
    let (session, asked) = (paused.session_id, paused.interrupt.unwrap());
    assert_eq!(effects.load(Ordering::SeqCst), 1);

    // Forked where it waits, with an update: the fork waits on the same
    // interrupt, and answering it runs the step on the fork's state
    // without charging again.
    let fork = agent
        .fork_waiting(
            &session,
            paused.steps,
            Some(TallyUpdate::new().log(vec!["edited".into()])),
        )
        .await
        .unwrap();
    let head = agent.session(&fork).await.unwrap();
    match &head.phase {
        SessionPhase::Interrupted { interrupt } => assert_eq!(interrupt.id, asked.id),
        other => panic!("the fork does not wait: {other:?}"),
    }
    let done = agent
        .resume(5, &fork, &asked.id)
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!(done.state.count, 5);
    assert_eq!(done.state.log, ["edited", "charge 1, 5 on [\"edited\"]"]);
    assert_eq!(
        effects.load(Ordering::SeqCst),
        1,
        "the charge is not repeated"
    );

    // The session forked from still waits on its own, and is answered
    // apart.
    let original = agent
        .resume(2, &session, &asked.id)
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!(original.state.count, 2);
    assert_eq!(original.state.log, ["charge 1, 2 on []"]);

    // `fork` makes a completed session, as it always did; so does
    // `fork_waiting` at a checkpoint where the session did not wait.
    let again = agent.run(Tally::default()).await.unwrap();
    let plain = agent
        .fork(&again.session_id, again.steps, None)
        .await
        .unwrap();
    assert!(matches!(
        agent.session(&plain).await.unwrap().phase,
        SessionPhase::Completed { .. }
    ));
    let finished = agent.fork_waiting(&session, 1, None).await.unwrap();
    assert!(matches!(
        agent.session(&finished).await.unwrap().phase,
        SessionPhase::Completed { .. }
    ));
}

/// A parent whose step runs a sub-agent of three steps that asks a human
/// after its second, then one step of its own; a step limit of `limit`.
fn nested(store: Arc<dyn SessionStore>, limit: u64) -> Harness<Tally> {
    let child = Harness::<Tally>::builder()
        .step("one")
        .run(work)
        .next("two")
        .step("two")
        .run(work)
        .next("ask")
        .step("ask")
        .run(async |cx: Cx<()>| {
            let ok: bool = cx.interrupt("go on?")?;
            Ok(TallyUpdate::new().log(vec![format!("asked {ok}")]))
        })
        .end()
        .start("one")
        .build()
        .unwrap();
    Harness::<Tally>::builder()
        .step("first")
        .run(work)
        .next("nested")
        .step("nested")
        .sub_agent(harness::SubAgent::new(
            &child,
            |_: &Tally| Tally::default(),
            |_: &Tally, done| TallyUpdate::new().log(done.state.log),
        ))
        .next("last")
        .step("last")
        .run(work)
        .end()
        .start("first")
        .store(store)
        .step_limit(limit)
        .build()
        .unwrap()
}

/// A run counts the steps of its own loop (its outcome, its step limit),
/// not its sub-agents' (which the session's checkpoints count): the same
/// whether it was resumed in its own process or, from the store, in
/// another. Before, a run resumed from the store counted the sub-agent's
/// steps too: 5 steps where the process that ran it said 3, and a limit
/// of 3 failed it there only.
#[tokio::test]
async fn a_run_resumed_from_the_store_counts_its_steps_as_its_own_process_does() {
    for limit in [3, 100] {
        let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
        let agent = create_agent("nested", &nested(Arc::clone(&store), limit));
        let mut run = agent.run(Tally::default());
        let paused = (&mut run).await.unwrap();
        let interrupt = paused.interrupt.unwrap();
        run.resume(true, &interrupt.id).unwrap();
        let here = run.await.unwrap();

        let paused = agent.run(Tally::default()).await.unwrap();
        let session = paused.session_id.clone();
        let interrupt = paused.interrupt.unwrap();
        let elsewhere = create_agent("nested", &nested(Arc::clone(&store), limit));
        let there = elsewhere
            .resume(true, &session, &interrupt.id)
            .await
            .unwrap()
            .await
            .unwrap();
        assert_eq!(here.steps, 3, "limit {limit}: first, nested, last");
        assert_eq!(there.steps, here.steps, "limit {limit}");
        assert_eq!(there.state, here.state, "limit {limit}");
        // The session counts every step, the sub-agent's too.
        assert_eq!(elsewhere.session(&session).await.unwrap().steps, 6);
    }
}
