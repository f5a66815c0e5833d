//! Loop validation and export.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use harness::{Cx, Harness, HarnessState, StepResult, Violation};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct S {
    #[field(reduce = add)]
    n: u32,
}

async fn inc(_: Arc<S>, _: Cx<()>) -> StepResult<SUpdate> {
    Ok(SUpdate::new().n(1))
}

fn done_when_three(s: &S) -> &'static str {
    if s.n >= 3 { "done" } else { "again" }
}

#[test]
fn every_violation_is_reported_at_once() {
    let err = Harness::<S>::builder()
        // unknown target
        .step("a")
        .run(inc)
        .next("nowhere")
        // duplicate name
        .step("b")
        .run(inc)
        .next("a")
        .step("b")
        .run(inc)
        .next("a")
        // reserved name
        .step("$interrupt")
        .run(inc)
        .next("a")
        // neither run nor route
        .step("empty")
        // route without on
        .step("router")
        .route(done_when_three)
        // next with on
        .step("both")
        .run(inc)
        .route(done_when_three)
        .next("a")
        .on("done")
        .end()
        // a cycle with no way out, unreachable too
        .step("x")
        .run(inc)
        .next("y")
        .step("y")
        .run(inc)
        .next("x")
        // a reserved signal
        .step("sig")
        .route(done_when_three)
        .on("$stopped")
        .end()
        .on("again")
        .to("sig")
        .start("a")
        .build()
        .unwrap_err();
    let v = &err.violations;
    let has = |want: &Violation| v.contains(want);
    assert!(
        has(&Violation::UnknownTarget {
            from: "a".into(),
            via: "next".into(),
            target: "nowhere".into()
        }),
        "{err}"
    );
    assert!(has(&Violation::DuplicateStep { step: "b".into() }), "{err}");
    assert!(
        v.iter()
            .any(|x| matches!(x, Violation::ReservedName { name, .. } if name == "$interrupt")),
        "{err}"
    );
    assert!(
        v.iter()
            .any(|x| matches!(x, Violation::ReservedName { name, .. } if name == "$stopped")),
        "{err}"
    );
    assert!(
        has(&Violation::NoBehaviour {
            step: "empty".into()
        }),
        "{err}"
    );
    assert!(
        has(&Violation::RouteWithoutOn {
            step: "router".into()
        }),
        "{err}"
    );
    assert!(
        has(&Violation::NextWithOn {
            step: "both".into()
        }),
        "{err}"
    );
    assert!(
        has(&Violation::NoWayOut {
            steps: vec!["x".into(), "y".into()]
        }),
        "{err}"
    );
    assert!(has(&Violation::Unreachable { step: "x".into() }), "{err}");
    // The unknown target is said once: not again as a step with no way out.
    assert!(
        !v.iter()
            .any(|x| matches!(x, Violation::NoWayOut { steps } if steps.contains(&"a".to_string()) || steps.contains(&"b".to_string()))),
        "{err}"
    );
    assert!(v.len() >= 9, "{err}");
    // The message lists each violation on its own line.
    assert_eq!(err.to_string().lines().count(), v.len() + 1, "{err}");
}

#[test]
fn missing_start_is_reported() {
    let err = Harness::<S>::builder()
        .step("a")
        .run(inc)
        .next("a")
        .build()
        .unwrap_err();
    assert!(err.violations.contains(&Violation::NoStart), "{err}");
    let err = Harness::<S>::builder()
        .step("a")
        .route(done_when_three)
        .on("done")
        .end()
        .on("again")
        .to("a")
        .start("b")
        .build()
        .unwrap_err();
    assert_eq!(
        err.violations,
        vec![Violation::UnknownStart { step: "b".into() }]
    );
}

#[test]
fn step_with_run_only_and_no_transition_is_reported() {
    let err = Harness::<S>::builder()
        .step("a")
        .run(inc)
        .start("a")
        .build()
        .unwrap_err();
    assert_eq!(
        err.violations,
        vec![Violation::NoTransition { step: "a".into() }]
    );
}

#[test]
fn on_without_route_and_duplicate_signal_are_reported() {
    let err = Harness::<S>::builder()
        .step("a")
        .run(inc)
        .on("done")
        .end()
        .step("b")
        .route(done_when_three)
        .on("done")
        .end()
        .on("done")
        .to("a")
        .start("b")
        .build()
        .unwrap_err();
    assert!(
        err.violations
            .contains(&Violation::OnWithoutRoute { step: "a".into() }),
        "{err}"
    );
    assert!(
        err.violations.contains(&Violation::DuplicateSignal {
            step: "b".into(),
            signal: "done".into()
        }),
        "{err}"
    );
}

#[test]
fn a_step_that_only_leads_into_a_closed_cycle_has_no_way_out() {
    let err = Harness::<S>::builder()
        .step("start")
        .route(done_when_three)
        .on("again")
        .to("spin")
        .on("done")
        .end()
        .step("spin")
        .run(inc)
        .next("spin")
        .start("start")
        .build()
        .unwrap_err();
    assert_eq!(
        err.violations,
        vec![Violation::NoWayOut {
            steps: vec!["spin".into()]
        }]
    );
}

fn valid() -> Harness<S> {
    Harness::<S>::builder()
        .step("work")
        .run(inc)
        .next("check")
        .step("check")
        .route(done_when_three)
        .on("again")
        .to("work")
        .on("done")
        .end()
        .start("work")
        .build()
        .unwrap()
}

#[test]
fn valid_loop_builds_and_keeps_declaration_order() {
    let h = valid();
    assert_eq!(h.step_names().collect::<Vec<_>>(), ["work", "check"]);
    assert_eq!(h.start(), "work");
}

#[test]
fn mermaid_export_has_every_edge() {
    let m = valid().to_mermaid();
    assert!(m.starts_with("flowchart TD\n"), "{m}");
    assert!(m.contains("s0[\"work\"]"), "{m}");
    assert!(
        m.contains("s1{\"check\"}"),
        "route-only step is a decision: {m}"
    );
    assert!(m.contains("start__ --> s0"), "{m}");
    assert!(m.contains("s0 --> s1"), "{m}");
    assert!(m.contains("s1 -->|\"again\"| s0"), "{m}");
    assert!(m.contains("s1 -->|\"done\"| end__"), "{m}");
}

#[test]
fn dot_export_has_every_edge() {
    let d = valid().to_dot();
    assert!(d.starts_with("digraph harness {"), "{d}");
    assert!(d.contains("\"$start\" -> \"work\";"), "{d}");
    assert!(d.contains("\"work\" -> \"check\";"), "{d}");
    assert!(
        d.contains("\"check\" -> \"work\" [label=\"again\"];"),
        "{d}"
    );
    assert!(d.contains("\"check\" -> \"$end\" [label=\"done\"];"), "{d}");
    assert!(d.contains("\"check\" [shape=diamond];"), "{d}");
    assert!(d.trim_end().ends_with('}'));
}

#[test]
fn dot_export_escapes_quotes_in_names() {
    let h = Harness::<S>::builder()
        .step("say \"hi\"")
        .route(done_when_three)
        .on("done")
        .end()
        .on("again")
        .to("say \"hi\"")
        .start("say \"hi\"")
        .build()
        .unwrap();
    assert!(
        h.to_dot().contains("\"say \\\"hi\\\"\" [shape=diamond];"),
        "{}",
        h.to_dot()
    );
    assert!(
        h.to_mermaid().contains("say #quot;hi#quot;"),
        "{}",
        h.to_mermaid()
    );
}

#[tokio::test]
async fn a_run_only_step_can_end_the_run_without_a_route() {
    let h = Harness::<S>::builder()
        .step("first")
        .run(inc)
        .next("last")
        .step("last")
        .run(inc)
        .end()
        .start("first")
        .build()
        .unwrap();
    assert!(
        h.to_mermaid().contains("s1 --> end__"),
        "{}",
        h.to_mermaid()
    );
    let out = harness::create_agent("a", &h)
        .run(S::default())
        .await
        .unwrap();
    assert_eq!(
        (out.signal, out.state.n, out.steps),
        (harness::Signal::END, 2, 2)
    );
}

#[test]
fn end_with_on_is_a_violation_like_next_with_on() {
    let err = Harness::<S>::builder()
        .step("a")
        .run(inc)
        .route(done_when_three)
        .end()
        .on("done")
        .end()
        .on("again")
        .to("a")
        .start("a")
        .build()
        .unwrap_err();
    assert_eq!(err.violations, [Violation::NextWithOn { step: "a".into() }]);
    assert!(err.to_string().contains(".end()"), "{err}");
}

#[test]
fn settings_no_run_can_work_with_are_violations_listed_with_the_others() {
    use harness::session::SessionConfig;
    use std::time::Duration;
    let lease = |ttl: Duration| SessionConfig {
        lease_ttl: ttl,
        ..SessionConfig::default()
    };
    // (step limit, lease, the settings reported)
    for (limit, ttl, expected) in [
        (0, Duration::from_secs(30), vec!["step_limit"]),
        (10, Duration::ZERO, vec!["session_config.lease_ttl"]),
        (
            10,
            Duration::from_millis(29),
            vec!["session_config.lease_ttl"],
        ),
        (
            0,
            Duration::from_nanos(1),
            vec!["step_limit", "session_config.lease_ttl"],
        ),
    ] {
        let err = Harness::<S>::builder()
            .step("a")
            .route(done_when_three)
            .on("done")
            .end()
            .on("again")
            .to("a")
            .start("a")
            .step_limit(limit)
            .session_config(lease(ttl))
            .build()
            .unwrap_err();
        let settings: Vec<&str> = err
            .violations
            .iter()
            .map(|v| match v {
                Violation::InvalidSetting { setting, .. } => setting.as_str(),
                other => panic!("unexpected {other}"),
            })
            .collect();
        assert_eq!(settings, expected, "{err}");
    }
    // With a graph violation: both reported.
    let err = Harness::<S>::builder()
        .step("a")
        .run(inc)
        .next("nowhere")
        .start("a")
        .step_limit(0)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("nowhere") && err.to_string().contains("step_limit"));
    // At the bounds: builds.
    Harness::<S>::builder()
        .step("a")
        .route(done_when_three)
        .on("done")
        .end()
        .on("again")
        .to("a")
        .start("a")
        .step_limit(1)
        .session_config(lease(harness::MIN_LEASE_TTL))
        .build()
        .unwrap();
}

/// The one `DeclaredTwice` violation of `err`, as (step, what).
fn declared_twice(err: &harness::LoopValidationError) -> Vec<(String, String)> {
    err.violations
        .iter()
        .filter_map(|v| match v {
            Violation::DeclaredTwice { step, what } => Some((step.clone(), what.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_step_that_declares_its_body_router_or_exit_twice_is_refused_naming_it() {
    type Declare = fn(harness::StepBuilder<S>) -> harness::StepBuilder<S>;
    let cases: [(&str, Declare); 7] = [
        ("body", |b| b.run(inc).run(inc).end()),
        ("router", |b| {
            b.run(inc)
                .route(done_when_three)
                .route(|_: &S| "done")
                .on("done")
                .end()
                .on("again")
                .to("b")
        }),
        ("after `run`", |b| b.run(inc).next("b").next("c")),
        ("after `run`", |b| b.run(inc).end().next("c")),
        ("after `run`", |b| b.run(inc).next("b").end()),
        ("after `run`", |b| {
            b.run(inc).fork(["b", "c"]).join("d").end()
        }),
        ("after `run`", |b| {
            b.run(inc).next("b").fork(["b", "c"]).join("d")
        }),
    ];
    for (i, (what, declare)) in cases.into_iter().enumerate() {
        let builder = declare(Harness::<S>::builder().step("a"));
        let err = builder
            .step("b")
            .run(inc)
            .next("d")
            .step("c")
            .run(inc)
            .next("d")
            .step("d")
            .run(inc)
            .end()
            .start("a")
            .build()
            .unwrap_err();
        let twice = declared_twice(&err);
        assert_eq!(twice.len(), 1, "case {i}: {err}");
        assert_eq!(twice[0].0, "a", "case {i}: {err}");
        assert!(twice[0].1.contains(what), "case {i}: {err}");
        assert!(
            err.to_string().contains("step `a` declares"),
            "case {i}: {err}"
        );
    }
}

#[test]
fn declaring_each_part_once_or_a_cache_after_the_body_is_no_violation() {
    let cache = harness::CachePolicy::new(harness::MemoryCache::new(), "graph");
    Harness::<S>::builder()
        .step("a")
        .run(inc)
        .cache(cache)
        .route(done_when_three)
        .on("again")
        .to("a")
        .on("done")
        .end()
        .start("a")
        .build()
        .unwrap();
    // A cache declared first is its own violation, and the run after it
    // is not a second body.
    let cache = harness::CachePolicy::new(harness::MemoryCache::new(), "graph");
    let err = Harness::<S>::builder()
        .step("a")
        .cache(cache)
        .run(inc)
        .end()
        .start("a")
        .build()
        .unwrap_err();
    assert_eq!(
        err.violations,
        [Violation::CacheWithoutRun { step: "a".into() }]
    );
}

#[test]
fn a_fork_whose_join_is_one_of_its_branches_is_refused() {
    for branches in [vec!["x", "j"], vec!["j"], vec!["j", "x"]] {
        let err = Harness::<S>::builder()
            .step("plan")
            .run(inc)
            .fork(branches.clone())
            .join("j")
            .step("x")
            .run(inc)
            .writes(["n"])
            .next("j")
            .step("j")
            .run(inc)
            .writes(["n"])
            .end()
            .start("plan")
            .build()
            .unwrap_err();
        assert!(
            err.violations.iter().any(|v| matches!(v,
                Violation::BadFork { fork, reason } if fork == "plan" && reason.contains("own join `j`"))),
            "{branches:?}: {err}"
        );
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Pick {
    choice: String,
}

#[test]
fn a_branch_named_twice_is_one_violation_not_a_branch_racing_itself() {
    let err = Harness::<Pick>::builder()
        .step("plan")
        .run(async |_: Arc<Pick>| Ok(PickUpdate::new()))
        .fork(["x", "x"])
        .join("j")
        .step("x")
        .run(async |_: Arc<Pick>| Ok(PickUpdate::new().choice("x")))
        .writes(["choice"])
        .next("j")
        .step("j")
        .run(async |_: Arc<Pick>| Ok(PickUpdate::new()))
        .end()
        .start("plan")
        .build()
        .unwrap_err();
    assert_eq!(
        err.violations,
        [Violation::BadFork {
            fork: "plan".into(),
            reason: "names a branch more than once".into()
        }],
        "{err}"
    );
    // Two different branches writing the field still race.
    let err = Harness::<Pick>::builder()
        .step("plan")
        .run(async |_: Arc<Pick>| Ok(PickUpdate::new()))
        .fork(["x", "y"])
        .join("j")
        .step("x")
        .run(async |_: Arc<Pick>| Ok(PickUpdate::new().choice("x")))
        .writes(["choice"])
        .next("j")
        .step("y")
        .run(async |_: Arc<Pick>| Ok(PickUpdate::new().choice("y")))
        .writes(["choice"])
        .next("j")
        .step("j")
        .run(async |_: Arc<Pick>| Ok(PickUpdate::new()))
        .end()
        .start("plan")
        .build()
        .unwrap_err();
    assert!(
        err.violations
            .iter()
            .any(|v| matches!(v, Violation::ParallelWrite { field, .. } if field == "choice")),
        "{err}"
    );
}
