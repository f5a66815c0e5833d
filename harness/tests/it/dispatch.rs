//! Dispatch: a fan-out whose branches each run the sub-agent of their
//! item's role, with its own state type; unknown roles fail their branch,
//! mistyped items are refused when built, and an interrupt inside one
//! dispatched sub-agent pauses the run and is answered inside it.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use futures::StreamExt;
use harness::{
    Cx, Dispatch, Harness, HarnessState, RunError, RunEvent, SubAgent, TaskPath, Violation,
    create_agent,
};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct Job {
    id: u32,
    role: String,
    text: String,
}

fn job(id: u32, role: &str, text: &str) -> Job {
    Job {
        id,
        role: role.into(),
        text: text.into(),
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Board {
    jobs: Vec<Job>,
    #[field(reduce = append)]
    results: Vec<String>,
    #[field(reduce = append)]
    failures: Vec<String>,
}

/// One role's state: a text to shout.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Shout {
    text: String,
    loud: String,
}

/// Another role's state, of another type: words to count, and a person's
/// correction.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Count {
    text: String,
    words: usize,
    #[field(reduce = append)]
    notes: Vec<String>,
}

#[derive(Default)]
struct Seen {
    shout: AtomicU32,
    count: AtomicU32,
    review: AtomicU32,
    running: AtomicUsize,
    peak: AtomicUsize,
}

impl Seen {
    async fn busy(&self) {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(30)).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
    }
}

fn shouter(seen: Arc<Seen>) -> Harness<Shout> {
    Harness::<Shout>::builder()
        .step("shout")
        .run(move |s: Arc<Shout>| {
            let seen = Arc::clone(&seen);
            async move {
                seen.shout.fetch_add(1, Ordering::SeqCst);
                seen.busy().await;
                Ok(ShoutUpdate::new().loud(s.text.to_uppercase()))
            }
        })
        .end()
        .start("shout")
        .build()
        .unwrap()
}

/// Counts words; with `review`, then asks a person, whose answer is kept
/// as a note of this sub-agent only.
fn counter(seen: Arc<Seen>, review: bool) -> Harness<Count> {
    let (s1, s2) = (Arc::clone(&seen), seen);
    let b = Harness::<Count>::builder()
        .step("count")
        .run(move |s: Arc<Count>| {
            let seen = Arc::clone(&s1);
            async move {
                seen.count.fetch_add(1, Ordering::SeqCst);
                seen.busy().await;
                Ok(CountUpdate::new().words(s.text.split_whitespace().count()))
            }
        });
    if !review {
        return b.end().start("count").build().unwrap();
    }
    b.next("review")
        .step("review")
        .run(move |s: Arc<Count>, cx: Cx<()>| {
            let seen = Arc::clone(&s2);
            async move {
                seen.review.fetch_add(1, Ordering::SeqCst);
                let note: String = cx.interrupt(format!("{} words in `{}`?", s.words, s.text))?;
                Ok(CountUpdate::new().notes(vec![note]))
            }
        })
        .end()
        .start("count")
        .build()
        .unwrap()
}

fn board(seen: &Arc<Seen>, review: bool, limit: usize, collect: bool) -> Harness<Board> {
    let shout = SubAgent::each(
        &shouter(Arc::clone(seen)),
        |_: &Board, j: &Job| Shout {
            text: j.text.clone(),
            loud: String::new(),
        },
        |_: &Board, j: &Job, out| {
            BoardUpdate::new().results(vec![format!("{}:{}", j.id, out.state.loud)])
        },
    );
    let count = SubAgent::each(
        &counter(Arc::clone(seen), review),
        |_: &Board, j: &Job| Count {
            text: j.text.clone(),
            ..Count::default()
        },
        |_: &Board, j: &Job, out| {
            let notes = out.state.notes.join(";");
            BoardUpdate::new().results(vec![format!("{}:{} words{notes}", j.id, out.state.words)])
        },
    );
    let fork = Harness::<Board>::builder()
        .step("plan")
        .run(async |_: Arc<Board>| Ok(BoardUpdate::new()))
        .fan_out("job", |b: &Board| b.jobs.clone())
        .limit(limit);
    let fork = if collect {
        fork.collect_errors(|f| {
            BoardUpdate::new().failures(vec![format!("{}: {}", f.path, f.error)])
        })
    } else {
        fork
    };
    fork.join("done")
        .step("job")
        .dispatch(
            Dispatch::by(|j: &Job| j.role.clone())
                .agent("shout", shout)
                .agent("count", count),
        )
        .writes(["results"])
        .next("done")
        .step("done")
        .run(async |_: Arc<Board>| Ok(BoardUpdate::new()))
        .end()
        .start("plan")
        .build()
        .unwrap()
}

fn jobs(jobs: Vec<Job>) -> Board {
    Board {
        jobs,
        ..Board::default()
    }
}

#[tokio::test]
async fn each_item_runs_the_sub_agent_of_its_role_concurrently_and_merges_in_item_order() {
    let seen = Arc::new(Seen::default());
    let agent = create_agent("board", &board(&seen, false, 2, false));
    let run = agent.run(jobs(vec![
        job(1, "count", "one two three"),
        job(2, "shout", "hey"),
        job(3, "shout", "you"),
        job(4, "count", "a b"),
    ]));
    let events = run.events();
    let out = run.await.unwrap();
    assert_eq!(
        out.state.results,
        ["1:3 words", "2:HEY", "3:YOU", "4:2 words"],
        "each item went to its role's sub-agent, merged in item order"
    );
    assert_eq!(seen.shout.load(Ordering::SeqCst), 2);
    assert_eq!(seen.count.load(Ordering::SeqCst), 2);
    assert_eq!(
        seen.peak.load(Ordering::SeqCst),
        2,
        "two branches ran at once, within the limit"
    );
    // Each sub-agent's steps arrive under its branch's path.
    let children: Vec<(TaskPath, Arc<str>)> = events
        .filter_map(|e| async move {
            match e {
                RunEvent::Child { path, step, .. } => Some((path, step)),
                _ => None,
            }
        })
        .collect()
        .await;
    for (path, step) in [
        ("job#0/job", "count"),
        ("job#1/job", "shout"),
        ("job#3/job", "count"),
    ] {
        assert!(
            children
                .iter()
                .any(|(p, s)| *p == TaskPath::from(path) && &**s == step),
            "no `{step}` under `{path}` in {children:?}"
        );
    }
}

#[tokio::test]
async fn an_item_whose_role_has_no_sub_agent_fails_its_branch_naming_the_role() {
    for role in ["painter", "", "Shout", "count "] {
        let seen = Arc::new(Seen::default());
        // Without collecting errors, the run fails with the branch's error.
        let agent = create_agent("board", &board(&seen, false, 4, false));
        let err = agent
            .run(jobs(vec![job(1, "shout", "hi"), job(2, role, "x")]))
            .await
            .unwrap_err();
        let RunError::Branch { path, source } = &err else {
            panic!("{err}")
        };
        assert_eq!(*path, TaskPath::from("job#1"));
        let RunError::SubAgentStart { path, reason } = source.as_ref() else {
            panic!("{source}")
        };
        assert_eq!(*path, TaskPath::from("job#1/job"));
        assert!(
            reason.contains(&format!("no sub-agent is registered for role `{role}`"))
                && reason.contains("roles: count, shout"),
            "{reason}"
        );
        // Collected, the failure is a value, and the other items are done.
        let agent = create_agent("board", &board(&seen, false, 4, true));
        let out = agent
            .run(jobs(vec![job(1, "shout", "hi"), job(2, role, "x")]))
            .await
            .unwrap();
        assert_eq!(out.state.results, ["1:HI"]);
        assert_eq!(out.state.failures.len(), 1, "{:?}", out.state.failures);
        assert!(
            out.state.failures[0].contains(&format!("role `{role}`")),
            "{:?}",
            out.state.failures
        );
    }
}

#[test]
fn a_dispatch_is_refused_when_built_if_its_items_are_mistyped_or_it_is_not_a_branch_start() {
    let seen = Arc::new(Seen::default());
    let shout = || {
        SubAgent::each(
            &shouter(Arc::clone(&seen)),
            |_: &Board, j: &Job| Shout {
                text: j.text.clone(),
                loud: String::new(),
            },
            |_: &Board, _: &Job, _| BoardUpdate::new(),
        )
    };
    // The fan-out sends strings; the dispatch takes jobs.
    let err = Harness::<Board>::builder()
        .step("plan")
        .run(async |_: Arc<Board>| Ok(BoardUpdate::new()))
        .fan_out("job", |b: &Board| {
            b.jobs
                .iter()
                .map(|j| j.text.clone())
                .collect::<Vec<String>>()
        })
        .join("done")
        .step("job")
        .dispatch(Dispatch::by(|j: &Job| j.role.clone()).agent("shout", shout()))
        .next("done")
        .step("done")
        .run(async |_: Arc<Board>| Ok(BoardUpdate::new()))
        .end()
        .start("plan")
        .build()
        .unwrap_err();
    assert!(
        err.violations.iter().any(|v| matches!(v,
            Violation::InputMismatch { step, sends, takes, .. }
                if step == "job" && sends.contains("String") && takes.contains("Job"))),
        "{err}"
    );
    // A sub-agent that takes an item, reached as a plain step, and a
    // dispatch as the start step: neither would have an item.
    let err = Harness::<Board>::builder()
        .step("job")
        .dispatch(Dispatch::by(|j: &Job| j.role.clone()).agent("shout", shout()))
        .next("one")
        .step("one")
        .sub_agent(shout())
        .end()
        .start("job")
        .build()
        .unwrap_err();
    let reached: Vec<&str> = err
        .violations
        .iter()
        .filter_map(|v| match v {
            Violation::InputStepReached { step, .. } => Some(step.as_str()),
            _ => None,
        })
        .collect();
    assert!(
        reached.contains(&"job") && reached.contains(&"one"),
        "{err}"
    );
}

#[tokio::test]
async fn an_interrupt_inside_one_dispatched_sub_agent_pauses_the_run_and_is_answered_inside_it() {
    let seen = Arc::new(Seen::default());
    let agent = create_agent("board", &board(&seen, true, 3, false));
    let mut run = agent.run(jobs(vec![
        job(1, "shout", "hi"),
        job(2, "count", "x y"),
        job(3, "shout", "yo"),
    ]));
    let interrupt = (&mut run).await.unwrap().interrupt.unwrap();
    assert_eq!(interrupt.path, TaskPath::from("job#1/job"));
    assert_eq!(interrupt.step, "review");
    assert_eq!(interrupt.payload, "2 words in `x y`?");
    // A wrong answer is refused; the same interrupt still waits.
    run.resume(42, &interrupt.id).unwrap();
    let err = (&mut run).await.unwrap_err();
    assert!(matches!(err, RunError::AnswerRejected { .. }), "{err}");
    run.resume(" checked", &interrupt.id).unwrap();
    let out = run.await.unwrap();
    assert_eq!(out.state.results, ["1:HI", "2:2 words checked", "3:YO"]);
    assert_eq!(seen.shout.load(Ordering::SeqCst), 2, "shouts ran once each");
    assert_eq!(
        seen.count.load(Ordering::SeqCst),
        1,
        "the asking sub-agent's completed step did not run again"
    );
    assert_eq!(
        seen.review.load(Ordering::SeqCst),
        3,
        "asked, refused, answered"
    );
}

#[test]
fn mermaid_and_dot_draw_one_nested_loop_per_role() {
    let seen = Arc::new(Seen::default());
    let h = board(&seen, true, 2, false);
    let mermaid = h.to_mermaid();
    assert!(mermaid.contains("\"job: count (sub-agent)\""), "{mermaid}");
    assert!(mermaid.contains("\"job: shout (sub-agent)\""), "{mermaid}");
    assert!(
        mermaid.contains("s1__0_c0 -->"),
        "count's own edge: {mermaid}"
    );
    let dot = h.to_dot();
    assert!(
        dot.contains("\"job:count/count\" -> \"job:count/review\""),
        "{dot}"
    );
    assert!(
        dot.contains("\"job:shout/shout\" -> \"job:shout/$end\""),
        "{dot}"
    );
    assert!(
        dot.contains("\"job\" -> \"job:shout/shout\" [style=dotted]"),
        "{dot}"
    );
}
