//! Parallel branches in a session store: an interrupt inside a branch is
//! answered from another agent (as another process would), the branches
//! that had completed do not run again, and the log, history and time
//! travel show every branch under its path.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use harness::session::{CheckpointKind, SessionPhase, SessionStore};
use harness::{Cx, Harness, HarnessState, SessionId, TaskPath, create_agent};
use harness_stores::SledStore;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Review {
    #[field(reduce = append)]
    log: Vec<String>,
    topics: Vec<String>,
}

/// Counts of each step's runs, by name.
#[derive(Default)]
struct Runs {
    research: AtomicU32,
    approve: AtomicU32,
    draft: AtomicU32,
}

fn review(store: SledStore, runs: Arc<Runs>) -> Harness<Review> {
    let (r1, r2, r3) = (Arc::clone(&runs), Arc::clone(&runs), runs);
    Harness::<Review>::builder()
        .step("plan")
        .run(async |_: Arc<Review>| Ok(ReviewUpdate::new().log(vec!["plan".into()])))
        .fork(["research", "draft"])
        .join("publish")
        .step("research")
        .run(move |_: Arc<Review>| {
            let runs = Arc::clone(&r1);
            async move {
                runs.research.fetch_add(1, Ordering::SeqCst);
                Ok(ReviewUpdate::new().log(vec!["research".into()]))
            }
        })
        .writes(["log"])
        .next("approve")
        .step("approve")
        .run(move |cx: Cx<()>| {
            let runs = Arc::clone(&r2);
            async move {
                runs.approve.fetch_add(1, Ordering::SeqCst);
                let ok: bool = cx.interrupt("publish the research?")?;
                Ok(ReviewUpdate::new().log(vec![format!("approved {ok}")]))
            }
        })
        .writes(["log"])
        .next("publish")
        .step("draft")
        .run(move |_: Arc<Review>| {
            let runs = Arc::clone(&r3);
            async move {
                runs.draft.fetch_add(1, Ordering::SeqCst);
                Ok(ReviewUpdate::new().log(vec!["draft".into()]))
            }
        })
        .writes(["log"])
        .next("publish")
        .step("publish")
        .run(async |s: Arc<Review>| {
            Ok(ReviewUpdate::new().log(vec![format!("publish {}", s.log.len())]))
        })
        .end()
        .start("plan")
        .store(store)
        .build()
        .unwrap()
}

#[tokio::test]
async fn an_interrupt_in_a_branch_is_answered_from_another_agent_without_rerunning_what_completed()
{
    let dir = tempfile::tempdir().unwrap();
    let store = SledStore::open(dir.path().join("s")).unwrap();
    let runs = Arc::new(Runs::default());
    let first = create_agent("review", &review(store.clone(), Arc::clone(&runs)));
    let session = SessionId::from("r1");
    let out = first
        .run_in(session.clone(), Review::default())
        .await
        .unwrap();
    let interrupt = out.interrupt.unwrap();
    assert_eq!(interrupt.path, TaskPath::from("research"));
    assert_eq!(interrupt.step, "approve");
    drop(first);

    // Another agent on the same store, as a second process would have.
    let second = create_agent("review", &review(store.clone(), Arc::clone(&runs)));
    let head = store.load(&session).await.unwrap().unwrap();
    assert!(matches!(head.phase, SessionPhase::Interrupted { .. }));
    let out = second
        .resume(true, &session, &interrupt.id)
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!(
        out.state.log,
        ["plan", "research", "approved true", "draft", "publish 4"]
    );
    assert_eq!(
        runs.research.load(Ordering::SeqCst),
        1,
        "completed: not re-run"
    );
    assert_eq!(
        runs.draft.load(Ordering::SeqCst),
        1,
        "completed: not re-run"
    );
    assert_eq!(
        runs.approve.load(Ordering::SeqCst),
        2,
        "asked, then answered"
    );

    // The log holds the fork, each branch's steps under its path, and the
    // join, in that order.
    let log = store.checkpoints(&session, 0).await.unwrap();
    let kinds: Vec<String> = log
        .iter()
        .map(|cp| match &cp.kind {
            CheckpointKind::Snapshot(_) => format!("snapshot {}", cp.step),
            CheckpointKind::Update(_) => format!("update {}", cp.step),
            CheckpointKind::Fork(f) => format!("fork {} -> {}", cp.step, f.join),
            CheckpointKind::Branch(b) => format!("branch {} {}", b.path, cp.step),
            CheckpointKind::Join(j) => format!("join {} of {}", cp.step, j.branches.len()),
            _ => "other".to_string(),
        })
        .collect();
    let research_done = kinds
        .iter()
        .position(|k| k == "branch research research")
        .unwrap();
    let approve_done = kinds
        .iter()
        .position(|k| k == "branch research approve")
        .unwrap();
    assert!(research_done < approve_done, "{kinds:?}");
    assert_eq!(
        kinds[..3],
        ["snapshot $start", "update plan", "fork plan -> publish"]
    );
    assert!(
        kinds.contains(&"branch draft draft".to_string()),
        "{kinds:?}"
    );
    assert_eq!(
        kinds[kinds.len() - 2..],
        ["join publish of 2", "update publish"]
    );

    // History names each branch's steps by path; time travel gives the
    // run's own state, which takes the branches' updates at the join.
    let history = second.history(&session).await.unwrap();
    let paths: Vec<(String, String)> = history
        .iter()
        .map(|h| (h.path.as_str().to_string(), h.step.clone()))
        .collect();
    assert!(
        paths.contains(&("research".into(), "approve".into())),
        "{paths:?}"
    );
    assert!(
        paths.contains(&("draft".into(), "draft".into())),
        "{paths:?}"
    );
    let before_join = history.iter().find(|h| h.step == "research").unwrap().index;
    let state = second.state_at(&session, Some(before_join)).await.unwrap();
    assert_eq!(state.log, ["plan"], "branch updates count at the join");
    let last = second.state_at(&session, None).await.unwrap();
    assert_eq!(last.log, out.state.log);
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Notes {
    topic: String,
    #[field(reduce = append)]
    notes: Vec<String>,
    approved: bool,
}

fn with_sub_agent(store: SledStore, gathered: Arc<AtomicU32>) -> Harness<Review> {
    let child = Harness::<Notes>::builder()
        .step("gather")
        .run(move |s: Arc<Notes>| {
            let gathered = Arc::clone(&gathered);
            async move {
                gathered.fetch_add(1, Ordering::SeqCst);
                Ok(NotesUpdate::new().notes(vec![format!("on {}", s.topic)]))
            }
        })
        .next("approve")
        .step("approve")
        .run(async |cx: Cx<()>| {
            let ok: bool = cx.interrupt("keep?")?;
            Ok(NotesUpdate::new().approved(ok))
        })
        .end()
        .start("gather")
        .build()
        .unwrap();
    Harness::<Review>::builder()
        .step("plan")
        .run(async |_: Arc<Review>| Ok(ReviewUpdate::new().log(vec!["plan".into()])))
        .next("research")
        .step("research")
        .sub_agent(harness::SubAgent::new(
            &child,
            |_: &Review| Notes {
                topic: "tides".into(),
                notes: vec![],
                approved: false,
            },
            |_: &Review, done| {
                ReviewUpdate::new().log(vec![format!(
                    "{:?} {}",
                    done.state.notes, done.state.approved
                )])
            },
        ))
        .end()
        .start("plan")
        .store(store)
        .build()
        .unwrap()
}

#[tokio::test]
async fn an_interrupt_inside_a_sub_agent_is_answered_from_another_agent_without_rerunning_its_steps()
 {
    let dir = tempfile::tempdir().unwrap();
    let store = SledStore::open(dir.path().join("s")).unwrap();
    let gathered = Arc::new(AtomicU32::new(0));
    let session = SessionId::from("sub1");
    let first = create_agent("sub", &with_sub_agent(store.clone(), Arc::clone(&gathered)));
    let out = first
        .run_in(session.clone(), Review::default())
        .await
        .unwrap();
    let interrupt = out.interrupt.unwrap();
    assert_eq!(
        (interrupt.path.as_str(), interrupt.step.as_str()),
        ("research", "approve")
    );
    drop(first);

    let second = create_agent("sub", &with_sub_agent(store.clone(), Arc::clone(&gathered)));
    // The wrong interrupt id is refused, and nothing changes.
    assert!(
        second
            .resume(true, &session, &harness::InterruptId::from("nope"))
            .await
            .is_err()
    );
    let out = second
        .resume(true, &session, &interrupt.id)
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!(out.state.log, ["plan", "[\"on tides\"] true"]);
    assert_eq!(
        gathered.load(Ordering::SeqCst),
        1,
        "the sub-agent's gather ran once"
    );

    // The sub-agent's steps are in the parent's session, under its path.
    let history = second.history(&session).await.unwrap();
    let steps: Vec<(String, String)> = history
        .iter()
        .map(|h| (h.path.as_str().to_string(), h.step.clone()))
        .collect();
    assert_eq!(
        steps,
        [
            (String::new(), "$start".to_string()),
            (String::new(), "plan".to_string()),
            ("research".to_string(), "gather".to_string()),
            ("research".to_string(), "approve".to_string()),
            (String::new(), "research".to_string()),
        ]
    );
    let log = store.checkpoints(&session, 0).await.unwrap();
    assert!(log.iter().any(|cp| matches!(&cp.kind,
        CheckpointKind::Child(c) if c.path == TaskPath::from("research") && cp.step == "gather")));
    // Time travel: the parent's state, which the sub-agent changes only
    // through its step.
    let mid = history.iter().find(|h| h.step == "gather").unwrap().index;
    assert_eq!(
        second.state_at(&session, Some(mid)).await.unwrap().log,
        ["plan"]
    );
}
