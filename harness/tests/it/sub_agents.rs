//! Sub-agents: a loop run as a step of another, mapped in and out by code;
//! an interrupt inside it pauses the parent and is resumed where it asked.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use futures::StreamExt;
use harness::{
    BranchFailure, Cx, Harness, HarnessState, RunError, RunEvent, StepError, SubAgent, TaskPath,
    create_agent,
};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Research {
    question: String,
    #[field(reduce = append)]
    notes: Vec<String>,
    /// A field the parent has no field for: `map_out` sees it all the same.
    #[field(reduce = add)]
    sources: u32,
    approved: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Report {
    topic: String,
    #[field(reduce = append)]
    log: Vec<String>,
}

#[derive(Default)]
struct Counts {
    gather: AtomicU32,
    approve: AtomicU32,
    outline: AtomicU32,
}

fn research(counts: Arc<Counts>, ask: bool) -> Harness<Research> {
    let (c1, c2) = (Arc::clone(&counts), counts);
    Harness::<Research>::builder()
        .step("gather")
        .run(move |s: Arc<Research>, cx: Cx<()>| {
            let counts = Arc::clone(&c1);
            async move {
                counts.gather.fetch_add(1, Ordering::SeqCst);
                cx.emit("found", serde_json::json!({ "about": s.question }));
                Ok(ResearchUpdate::new()
                    .notes(vec![format!("about {}", s.question)])
                    .sources(3))
            }
        })
        .next("approve")
        .step("approve")
        .run(move |cx: Cx<()>| {
            let counts = Arc::clone(&c2);
            async move {
                counts.approve.fetch_add(1, Ordering::SeqCst);
                let ok = if ask {
                    cx.interrupt::<_, bool>("keep these notes?")?
                } else {
                    true
                };
                Ok(ResearchUpdate::new().approved(ok))
            }
        })
        .route(|s: &Research| if s.approved { "kept" } else { "dropped" })
        .on("kept")
        .end()
        .on("dropped")
        .end()
        .start("gather")
        .build()
        .unwrap()
}

fn report(counts: Arc<Counts>, ask: bool) -> Harness<Report> {
    let c = Arc::clone(&counts);
    Harness::<Report>::builder()
        .step("outline")
        .run(move |_: Arc<Report>| {
            let counts = Arc::clone(&c);
            async move {
                counts.outline.fetch_add(1, Ordering::SeqCst);
                Ok(ReportUpdate::new().log(vec!["outline".into()]))
            }
        })
        .next("research")
        .step("research")
        .sub_agent(SubAgent::new(
            &research(counts, ask),
            |r: &Report| Research {
                question: r.topic.clone(),
                ..Research::default()
            },
            |_: &Report, done| {
                // Every field of the sub-agent's state is here; what is not
                // mapped is dropped by this code, visibly.
                ReportUpdate::new().log(vec![format!(
                    "{} ({} sources, {})",
                    done.state.notes.join("; "),
                    done.state.sources,
                    done.signal
                )])
            },
        ))
        .next("write")
        .step("write")
        .run(async |s: Arc<Report>| {
            Ok(ReportUpdate::new().log(vec![format!("write {}", s.log.len())]))
        })
        .end()
        .start("outline")
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_sub_agent_runs_as_a_step_mapped_in_and_out_with_its_events_under_its_path() {
    let counts = Arc::new(Counts::default());
    let agent = create_agent("report", &report(Arc::clone(&counts), false));
    let run = agent.run(Report {
        topic: "tides".into(),
        log: vec![],
    });
    let events = run.events();
    let out = run.await.unwrap();
    assert_eq!(
        out.state.log,
        ["outline", "about tides (3 sources, kept)", "write 2"]
    );
    assert_eq!(out.steps, 3, "the parent's own steps");
    let events: Vec<RunEvent<Report>> = events.collect().await;
    let child: Vec<(String, String, String)> = events
        .iter()
        .filter_map(|e| match e {
            RunEvent::Child {
                path, step, kind, ..
            } => Some((path.to_string(), step.to_string(), kind.to_string())),
            _ => None,
        })
        .collect();
    assert_eq!(
        child,
        [
            ("research".into(), "gather".into(), "step_started".into()),
            ("research".into(), "gather".into(), "step_finished".into()),
            ("research".into(), "approve".into(), "step_started".into()),
            ("research".into(), "approve".into(), "step_finished".into()),
        ]
    );
    let finished_update = events.iter().find_map(|e| match e {
        RunEvent::Child { kind, detail, .. } if &**kind == "step_finished" => {
            Some(detail["update"].clone())
        }
        _ => None,
    });
    assert_eq!(
        finished_update.unwrap(),
        serde_json::json!({ "notes": ["about tides"], "sources": 3 })
    );
    assert!(events.iter().any(|e| matches!(e,
        RunEvent::Custom { path, kind, .. } if *path == TaskPath::from("research") && &**kind == "found")));
}

#[tokio::test]
async fn an_interrupt_inside_a_sub_agent_pauses_the_parent_and_resumes_inside_it() {
    let counts = Arc::new(Counts::default());
    let agent = create_agent("report", &report(Arc::clone(&counts), true));
    let mut run = agent.run(Report {
        topic: "tides".into(),
        log: vec![],
    });
    let out = (&mut run).await.unwrap();
    let interrupt = out.interrupt.unwrap();
    assert_eq!(interrupt.path, TaskPath::from("research"));
    assert_eq!(interrupt.step, "approve");
    assert_eq!(interrupt.payload, "keep these notes?");
    // A wrong answer is refused and the same interrupt still waits.
    run.resume("sure", &interrupt.id).unwrap();
    let err = (&mut run).await.unwrap_err();
    assert!(
        matches!(err, RunError::AnswerRejected { interrupt: ref id, .. } if *id == interrupt.id),
        "{err}"
    );
    run.resume(false, &interrupt.id).unwrap();
    let out = run.await.unwrap();
    assert_eq!(
        out.state.log,
        ["outline", "about tides (3 sources, dropped)", "write 2"]
    );
    assert_eq!(counts.outline.load(Ordering::SeqCst), 1);
    assert_eq!(
        counts.gather.load(Ordering::SeqCst),
        1,
        "the sub-agent's completed step did not run again"
    );
    assert_eq!(
        counts.approve.load(Ordering::SeqCst),
        3,
        "asked, refused, answered"
    );
}

#[tokio::test]
async fn a_failing_sub_agent_fails_its_step_naming_its_path() {
    let child = Harness::<Research>::builder()
        .step("gather")
        .run(
            async |_: Arc<Research>| -> harness::StepResult<ResearchUpdate> {
                Err(StepError::msg("no sources"))
            },
        )
        .end()
        .start("gather")
        .build()
        .unwrap();
    let parent = Harness::<Report>::builder()
        .step("research")
        .sub_agent(SubAgent::new(
            &child,
            |_: &Report| Research::default(),
            |_: &Report, _| ReportUpdate::new(),
        ))
        .end()
        .start("research")
        .build()
        .unwrap();
    let err = create_agent("r", &parent)
        .run(Report::default())
        .await
        .unwrap_err();
    let RunError::SubAgent { path, source } = &err else {
        panic!("{err}");
    };
    assert_eq!(path.as_str(), "research");
    assert!(matches!(**source, RunError::Step { ref step, .. } if step == "gather"));
    assert!(err.to_string().contains("no sources"), "{err}");
}

#[test]
fn mermaid_and_dot_draw_a_sub_agent_nested_in_its_step() {
    let h = report(Arc::default(), false);
    let mermaid = h.to_mermaid();
    assert!(mermaid.contains("s1[[\"research\"]]"), "{mermaid}");
    assert!(
        mermaid.contains("subgraph s1__sub[\"research (sub-agent)\"]"),
        "{mermaid}"
    );
    assert!(mermaid.contains("s1__c0 --> s1__c1"), "{mermaid}");
    assert!(
        mermaid.contains("s1__c1 -->|\"kept\"| s1__end"),
        "{mermaid}"
    );
    assert!(mermaid.contains("s1 -.-o s1__c0"), "{mermaid}");
    let dot = h.to_dot();
    assert!(dot.contains("subgraph \"cluster_research\""), "{dot}");
    assert!(
        dot.contains("\"research/gather\" -> \"research/approve\";"),
        "{dot}"
    );
    assert!(
        dot.contains("\"research\" -> \"research/gather\" [style=dotted];"),
        "{dot}"
    );
}

#[tokio::test]
async fn a_sub_agent_in_a_branch_pauses_the_run_under_the_branch_and_resumes_there() {
    let counts = Arc::new(Counts::default());
    let child = research(Arc::clone(&counts), true);
    let h = Harness::<Report>::builder()
        .step("plan")
        .run(async |_: Arc<Report>| Ok(ReportUpdate::new().log(vec!["plan".into()])))
        .fork(["study", "other"])
        .join("write")
        .step("study")
        .sub_agent(SubAgent::new(
            &child,
            |r: &Report| Research {
                question: r.topic.clone(),
                ..Research::default()
            },
            |_: &Report, done| {
                ReportUpdate::new().log(vec![format!(
                    "{} {}",
                    done.state.notes.join(";"),
                    done.state.approved
                )])
            },
        ))
        .writes(["log"])
        .next("write")
        .step("other")
        .run(async |_: Arc<Report>| Ok(ReportUpdate::new().log(vec!["other".into()])))
        .writes(["log"])
        .next("write")
        .step("write")
        .run(async |s: Arc<Report>| {
            Ok(ReportUpdate::new().log(vec![format!("write {}", s.log.len())]))
        })
        .end()
        .start("plan")
        .build()
        .unwrap();
    let agent = create_agent("nested", &h);
    let mut run = agent.run(Report {
        topic: "tides".into(),
        log: vec![],
    });
    let interrupt = (&mut run).await.unwrap().interrupt.unwrap();
    assert_eq!(interrupt.path, TaskPath::from("study/study"));
    assert_eq!(interrupt.step, "approve");
    run.resume(true, &interrupt.id).unwrap();
    let out = run.await.unwrap();
    assert_eq!(
        out.state.log,
        ["plan", "about tides true", "other", "write 3"]
    );
    assert_eq!(counts.gather.load(Ordering::SeqCst), 1);
}

/// A child that sleeps for an hour in its one step.
fn sleeping_child(deadline: Option<Duration>) -> Harness<Research> {
    let builder = Harness::<Research>::builder()
        .step("gather")
        .run(
            async |_: Arc<Research>| -> harness::StepResult<ResearchUpdate> {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok(ResearchUpdate::new().sources(1))
            },
        )
        .end()
        .start("gather");
    match deadline {
        Some(limit) => builder.deadline(limit),
        None => builder.without_deadline(),
    }
    .build()
    .unwrap()
}

fn parent_of(child: &Harness<Research>, timeout: Option<Duration>) -> Harness<Report> {
    let step = Harness::<Report>::builder()
        .step("research")
        .sub_agent(SubAgent::new(
            child,
            |_: &Report| Research::default(),
            |_: &Report, _| ReportUpdate::new(),
        ));
    let step = match timeout {
        Some(limit) => step.timeout(limit),
        None => step,
    };
    step.end()
        .start("research")
        .without_deadline()
        .build()
        .unwrap()
}

/// A sub-agent step's timeout bounds the sub-agent's run: the step times
/// out, named, where the sub-agent ran on for good.
#[tokio::test(start_paused = true)]
async fn a_sub_agent_steps_timeout_bounds_its_sub_agent() {
    let parent = parent_of(&sleeping_child(None), Some(Duration::from_secs(5)));
    let began = tokio::time::Instant::now();
    let err = create_agent("r", &parent)
        .run(Report::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, RunError::Timeout { step, limit, .. }
            if step == "research" && *limit == Duration::from_secs(5)),
        "{err:?}"
    );
    assert!(
        began.elapsed() < Duration::from_secs(6),
        "{:?}",
        began.elapsed()
    );
}

/// A sub-agent keeps its own harness's deadline inside a parent with none.
#[tokio::test(start_paused = true)]
async fn a_sub_agent_keeps_its_own_deadline() {
    let parent = parent_of(&sleeping_child(Some(Duration::from_secs(7))), None);
    let began = tokio::time::Instant::now();
    let err = create_agent("r", &parent)
        .run(Report::default())
        .await
        .unwrap_err();
    let RunError::SubAgent { source, .. } = &err else {
        panic!("{err:?}")
    };
    assert!(
        matches!(&**source, RunError::Deadline { step, limit }
            if step == "gather" && *limit == Duration::from_secs(7)),
        "{err:?}"
    );
    assert!(
        began.elapsed() < Duration::from_secs(8),
        "{:?}",
        began.elapsed()
    );
}

/// A fork that collects its branches' errors is told which of them the
/// run's deadline cut short, and which failed on their own: a step's
/// timeout, a sub-agent's own deadline falling first.
#[tokio::test(start_paused = true)]
async fn a_collected_branch_says_whether_the_runs_deadline_cut_it_short() {
    let own = sleeping_child(Some(Duration::from_secs(7)));
    let none = sleeping_child(None);
    let into = |_: &Report| Research::default();
    let out = |_: &Report, _| ReportUpdate::new();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = Arc::clone(&seen);
    let hang = async |_: Arc<Report>| -> harness::StepResult<ReportUpdate> {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        Ok(ReportUpdate::new())
    };
    let h = Harness::<Report>::builder()
        .step("plan")
        .run(async |_: Arc<Report>| Ok(ReportUpdate::new()))
        .fork(["own", "cut", "timed", "hangs"])
        .collect_errors(move |f: BranchFailure| {
            s.lock().unwrap().push((f.path.to_string(), f.deadline));
            ReportUpdate::new().log(vec![f.path.to_string()])
        })
        .join("join")
        .step("own")
        .sub_agent(SubAgent::new(&own, into, out))
        .writes(["log"])
        .next("join")
        .step("cut")
        .sub_agent(SubAgent::new(&none, into, out))
        .writes(["log"])
        .next("join")
        .step("timed")
        .run(hang)
        .timeout(Duration::from_secs(5))
        .writes(["log"])
        .next("join")
        .step("hangs")
        .run(hang)
        .writes(["log"])
        .next("join")
        .step("join")
        .run(async |_: Arc<Report>| Ok(ReportUpdate::new()))
        .end()
        .start("plan")
        .deadline(Duration::from_secs(60))
        .build()
        .unwrap();
    let began = tokio::time::Instant::now();
    let ended = create_agent("r", &h).run(Report::default()).await;
    assert!(began.elapsed() < Duration::from_secs(61), "{ended:?}");
    let mut seen = seen.lock().unwrap().clone();
    seen.sort();
    let expected = [
        ("cut", true),
        ("hangs", true),
        ("own", false),
        ("timed", false),
    ];
    assert_eq!(seen, expected.map(|(p, d)| (p.to_owned(), d)), "{ended:?}");
}
