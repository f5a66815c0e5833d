//! The long-running project agent: the ledger's integrity, sessions over a
//! real git repository and a sled store, decision memory in the next
//! session's prompt, pause, abandon and revert.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use harness::llm::{Expect, ModelResponse, ScriptedModel, ToolCall, Turn};
use harness::session::SessionConfig;
use harness_recipes::project::{
    CategoryAgent, FeatureSpec, FeatureStatus, Ledger, LedgerError, ProjectAgent, ProjectError,
    ProjectPlan, ProjectState, SessionEnd, StepOutcome, VerificationRun, VerificationStep,
    read_decisions, read_ledger, read_progress, workspace_tools,
};
use harness_stores::SledStore;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

pub(crate) const WORDS: &str =
    "if [ \"$1\" = \"-l\" ]; then wc -l | tr -d ' '; else wc -w | tr -d ' '; fi\n";

/// The initializer's answer: two features of a word-count command.
pub(crate) fn plan() -> serde_json::Value {
    json!({
        "features": [
            {
                "id": "count-words", "category": "cli", "priority": 1,
                "description": "`sh wc.sh` prints the number of words of its input",
                "verification": [{
                    "description": "three words", "command": "echo 'a b c' | sh wc.sh",
                    "expect_stdout": "3"
                }]
            },
            {
                "id": "count-lines", "category": "cli", "priority": 2,
                "description": "`sh wc.sh -l` prints the number of lines of its input",
                "verification": [{
                    "description": "two lines", "command": "printf 'a\\nb\\n' | sh wc.sh -l",
                    "expect_stdout": "2"
                }]
            }
        ],
        "smoke": [{ "description": "the ledger is there", "command": "test -f .harness/ledger.json" }]
    })
}

pub(crate) fn text(value: serde_json::Value) -> ModelResponse {
    ModelResponse::from_text(value.to_string())
}

pub(crate) fn pick(feature: &str) -> Turn {
    Expect::any().reply(text(
        json!({ "feature": feature, "plan": format!("write wc.sh for {feature}") }),
    ))
}

pub(crate) fn write(id: &str, path: &str, content: &str) -> Turn {
    Expect::any().reply(ModelResponse::from_tool_call(ToolCall::new(
        id,
        "write_file",
        json!({ "path": path, "content": content }),
    )))
}

pub(crate) fn answer(words: &str) -> Turn {
    Expect::any().reply(ModelResponse::from_text(words))
}

pub(crate) fn reflect(lesson: &str) -> Turn {
    Expect::any().reply(text(json!({
        "context": "an empty repository",
        "decision": "a shell script around wc",
        "reasoning": "wc is everywhere",
        "lesson": lesson
    })))
}

pub(crate) fn store(dir: &Path) -> Arc<SledStore> {
    Arc::new(SledStore::open(dir.join("store")).unwrap())
}

pub(crate) fn agent(dir: &Path, store: Arc<SledStore>, model: Arc<ScriptedModel>) -> ProjectAgent {
    let repo = dir.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    ProjectAgent::builder("wc", repo, store, model)
        .session_config(SessionConfig {
            lease_ttl: Duration::from_millis(500),
            ..SessionConfig::default()
        })
        .build()
        .unwrap()
}

pub(crate) fn git(repo: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(repo)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// The ledger on disk is the ledger at HEAD, and nothing is uncommitted
/// but what `allowed` lists.
pub(crate) fn assert_consistent(repo: &Path) {
    let disk = std::fs::read_to_string(repo.join(".harness/ledger.json")).unwrap();
    assert_eq!(
        disk,
        git(repo, &["show", "HEAD:.harness/ledger.json"]) + "\n"
    );
    Ledger::parse(&disk, "disk").unwrap();
}

fn spec(id: &str) -> FeatureSpec {
    FeatureSpec {
        id: id.into(),
        category: "cli".into(),
        priority: 1,
        description: format!("does {id}"),
        verification: vec![VerificationStep::new("works", format!("test {id}"))],
    }
}

fn sealed() -> Ledger {
    Ledger::from_plan(
        "a project",
        ProjectPlan {
            features: vec![spec("a"), spec("b")],
            smoke: vec![],
        },
    )
    .unwrap()
}

fn run(id: &str, feature: &str, passed: bool) -> VerificationRun {
    VerificationRun {
        id: id.into(),
        feature: feature.into(),
        session: "s".into(),
        steps: vec![StepOutcome {
            command: "test".into(),
            exit_code: Some(if passed { 0 } else { 1 }),
            passed,
            output: String::new(),
        }],
        passed,
    }
}

#[test]
fn the_ledger_refuses_edits_other_than_status_changes_with_evidence() {
    let sealed = sealed();
    // (an edit, the error it must get)
    type Edit = Box<dyn Fn(&mut Ledger)>;
    let cases: Vec<(Edit, LedgerError)> = vec![
        (
            Box::new(|l| l.features[0].spec.description = "does less".into()),
            LedgerError::Edited {
                feature: "a".into(),
                field: "description",
            },
        ),
        (
            Box::new(|l| l.features[1].spec.verification[0].command = "true".into()),
            LedgerError::Edited {
                feature: "b".into(),
                field: "verification",
            },
        ),
        (
            Box::new(|l| l.features[1].spec.verification.clear()),
            LedgerError::Edited {
                feature: "b".into(),
                field: "verification",
            },
        ),
        (
            Box::new(|l| l.features[0].spec.category = "docs".into()),
            LedgerError::Edited {
                feature: "a".into(),
                field: "category",
            },
        ),
        (
            Box::new(|l| l.features[1].spec.priority = 0),
            LedgerError::Edited {
                feature: "b".into(),
                field: "priority",
            },
        ),
        (
            Box::new(|l| {
                l.features.remove(1);
            }),
            LedgerError::Removed {
                feature: "b".into(),
            },
        ),
        (
            Box::new(|l| {
                let mut extra = l.features[0].clone();
                extra.spec.id = "c".into();
                l.features.push(extra);
            }),
            LedgerError::Added {
                feature: "c".into(),
            },
        ),
        (
            Box::new(|l| l.project = "another".into()),
            LedgerError::ProjectEdited { field: "project" },
        ),
        (
            Box::new(|l| l.smoke.push(VerificationStep::new("x", "true"))),
            LedgerError::ProjectEdited { field: "smoke" },
        ),
    ];
    for (edit, expected) in cases {
        let mut ledger = sealed.clone();
        edit(&mut ledger);
        assert_eq!(ledger.check_sealed(&sealed), Err(expected.clone()));
        // The message names the feature or field.
        let message = expected.to_string();
        assert!(
            message.contains("edited") || message.contains("added") || message.contains("removed"),
            "{message}"
        );
    }
    // Statuses may change, with evidence.
    let runs: BTreeMap<String, VerificationRun> = [
        run("ok-a", "a", true),
        run("bad-a", "a", false),
        run("ok-b", "b", true),
    ]
    .into_iter()
    .map(|r| (r.id.clone(), r))
    .collect();
    let mut ledger = sealed.clone();
    ledger
        .set_status("a", FeatureStatus::Passing, Some(&runs["ok-a"]))
        .unwrap();
    ledger
        .set_status("b", FeatureStatus::Failing, Some(&runs["ok-b"]))
        .unwrap();
    assert_eq!(ledger.check_sealed(&sealed), Ok(()));
    assert_eq!(ledger.check_evidence(&runs), Ok(()));

    // Passing without evidence, with a failed run, with another feature's
    // run, with a run that does not exist: refused by name.
    let mut ledger = sealed.clone();
    assert_eq!(
        ledger.set_status("a", FeatureStatus::Passing, None),
        Err(LedgerError::NoEvidence {
            feature: "a".into()
        })
    );
    assert_eq!(
        ledger.set_status("a", FeatureStatus::Passing, Some(&runs["bad-a"])),
        Err(LedgerError::EvidenceFailed {
            feature: "a".into(),
            run: "bad-a".into()
        })
    );
    assert_eq!(
        ledger.set_status("a", FeatureStatus::Passing, Some(&runs["ok-b"])),
        Err(LedgerError::EvidenceOfOtherFeature {
            feature: "a".into(),
            run: "ok-b".into(),
            other: "b".into()
        })
    );
    assert_eq!(
        ledger.set_status("z", FeatureStatus::Blocked, None),
        Err(LedgerError::UnknownFeature {
            feature: "z".into()
        })
    );
    assert_eq!(ledger, sealed, "a refused change changes nothing");

    // The same edits made to the file directly are caught when it is read.
    for (status, evidence, expected) in [
        (
            FeatureStatus::Passing,
            None,
            LedgerError::NoEvidence {
                feature: "a".into(),
            },
        ),
        (
            FeatureStatus::Passing,
            Some("bad-a"),
            LedgerError::EvidenceFailed {
                feature: "a".into(),
                run: "bad-a".into(),
            },
        ),
        (
            FeatureStatus::Passing,
            Some("forged"),
            LedgerError::EvidenceMissing {
                feature: "a".into(),
                run: "forged".into(),
            },
        ),
        (
            FeatureStatus::Failing,
            Some("ok-b"),
            LedgerError::EvidenceOfOtherFeature {
                feature: "a".into(),
                run: "ok-b".into(),
                other: "b".into(),
            },
        ),
    ] {
        let mut ledger = sealed.clone();
        ledger.features[0].status = status;
        ledger.features[0].evidence = evidence.map(str::to_owned);
        let reread = Ledger::parse(&ledger.to_json(), "test").unwrap();
        assert_eq!(reread.check_evidence(&runs), Err(expected));
    }
    // A file that is not a ledger.
    for bad in ["", "{", "[]", "{\"project\": 1}"] {
        assert!(
            matches!(
                Ledger::parse(bad, "ledger.json"),
                Err(LedgerError::Malformed { .. })
            ),
            "{bad:?}"
        );
    }
}

#[test]
fn a_plan_the_ledger_cannot_hold_is_refused_by_name() {
    let plan = |features: Vec<FeatureSpec>| ProjectPlan {
        features,
        smoke: vec![],
    };
    assert_eq!(
        Ledger::from_plan("p", plan(vec![])),
        Err(LedgerError::EmptyPlan)
    );
    assert_eq!(
        Ledger::from_plan("p", plan(vec![spec("a"), spec("a")])),
        Err(LedgerError::DuplicateFeature {
            feature: "a".into()
        })
    );
    for id in ["", "a b", "../x", "é"] {
        assert_eq!(
            Ledger::from_plan("p", plan(vec![spec(id)])),
            Err(LedgerError::BadId { feature: id.into() })
        );
    }
    let mut unverifiable = spec("a");
    unverifiable.verification.clear();
    assert_eq!(
        Ledger::from_plan("p", plan(vec![unverifiable])),
        Err(LedgerError::NoVerification {
            feature: "a".into()
        })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_build_the_project_and_decision_memory_reaches_the_next_prompt() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    let model = Arc::new(ScriptedModel::new([
        Expect::any().reply(text(plan())),
        // Session 1: count-words, with a first wc.sh.
        pick("count-words"),
        write("c1", "wc.sh", "wc -w | tr -d ' '\n"),
        answer("wc.sh counts words"),
        reflect("LESSON-ONE: tr strips the padding wc adds"),
        // Session 2 must be told session 1's lesson, when it picks and
        // when it works.
        Expect::any()
            .any_message_contains("LESSON-ONE: tr strips the padding wc adds")
            .reply(text(json!({ "feature": "count-lines", "plan": "add -l" }))),
        Expect::any()
            .any_message_contains("LESSON-ONE")
            .reply(ModelResponse::from_tool_call(ToolCall::new(
                "c2",
                "write_file",
                json!({ "path": "wc.sh", "content": WORDS }),
            ))),
        answer("wc.sh -l counts lines"),
        reflect("LESSON-TWO: keep one script"),
    ]));
    let project = agent(dir.path(), store(dir.path()), Arc::clone(&model));
    let init = project
        .initialize("A word-count command: wc.sh counts words, and lines with -l.")
        .await
        .unwrap();
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), init);
    assert!(matches!(
        project.initialize("again").await,
        Err(ProjectError::AlreadyInitialized { .. })
    ));

    let status = project.run_until_complete(5).await.unwrap();
    assert_eq!(model.remaining(), 0, "every scripted turn was used");
    assert_eq!(status.state, ProjectState::Complete);
    assert_eq!(status.count(FeatureStatus::Passing), 2);
    assert_eq!(status.sessions, 2);

    // Session 2's pick request holds the lesson (captured, not only
    // checked by the script).
    let requests = model.requests();
    let session_2_pick = requests[5]
        .messages
        .iter()
        .map(|m| m.text())
        .collect::<String>();
    assert!(session_2_pick.contains("LESSON-ONE"), "{session_2_pick}");
    assert!(
        !requests[1]
            .messages
            .iter()
            .any(|m| m.text().contains("LESSON-ONE"))
    );

    // A commit per session, each with its trailer, the ledger at HEAD is
    // the ledger on disk, and every passing status names a run that passed.
    let log = git(&repo, &["log", "--format=%s"]);
    assert_eq!(
        log.lines().collect::<Vec<_>>(),
        [
            "session 2: count-lines is passing",
            "session 1: count-words is passing",
            "initialize the project: 2 features"
        ]
    );
    assert_consistent(&repo);
    let ledger = read_ledger(&repo).unwrap();
    for feature in &ledger.features {
        let evidence = feature.evidence.as_deref().unwrap();
        let run = project.env().run(evidence).await.unwrap().unwrap();
        assert!(run.passed && run.feature == feature.spec.id, "{run:?}");
    }
    // The progress log names each session's commit.
    let progress = read_progress(&repo).unwrap();
    let commits: Vec<String> = git(&repo, &["log", "--format=%H"])
        .lines()
        .map(str::to_owned)
        .collect();
    let by_session: Vec<(u32, Option<String>)> = progress
        .iter()
        .map(|e| (e.session, e.commit.clone()))
        .collect();
    assert!(
        by_session.contains(&(0, Some(commits[2].clone()))),
        "{progress:?}"
    );
    assert!(
        by_session.contains(&(1, Some(commits[1].clone()))),
        "{progress:?}"
    );
    assert!(
        by_session.contains(&(2, Some(commits[0].clone()))),
        "{progress:?}"
    );
    // Decision memory, committed.
    let decisions = read_decisions(&repo).unwrap();
    assert_eq!(decisions.len(), 2);
    assert_eq!(decisions[0].outcome, "passing");
    assert!((decisions[0].score - 1.0).abs() < f32::EPSILON);

    let report = project.report_markdown().await.unwrap();
    assert!(report.contains("**Features passing:** 2 of 2"), "{report}");
    assert!(report.contains("LESSON-TWO"), "{report}");

    // Revert to session 1's commit: count-lines is open again.
    project.revert_to(&commits[1]).await.unwrap();
    let status = project.status().await.unwrap();
    assert_eq!(status.state, ProjectState::Active);
    assert_eq!(status.count(FeatureStatus::Passing), 1);
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), commits[1]);
    assert_consistent(&repo);
    // Not to a commit outside the project's history.
    assert!(matches!(
        project
            .revert_to("0000000000000000000000000000000000000000")
            .await,
        Err(ProjectError::NotInHistory { .. })
    ));

    project
        .abandon("the word count is good enough")
        .await
        .unwrap();
    assert!(matches!(
        project.run_until_complete(1).await,
        Err(ProjectError::Abandoned { reason, .. }) if reason == "the word count is good enough"
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_that_rewrites_the_ledger_is_caught_and_its_edit_discarded() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    let model = Arc::new(ScriptedModel::new([Expect::any().reply(text(plan()))]));
    let project = agent(dir.path(), store(dir.path()), Arc::clone(&model));
    project.initialize("wc").await.unwrap();

    // The working agent rewrites the ledger: count-lines "passes" with a
    // forged run, and count-words gets an easier check.
    let mut forged = read_ledger(&repo).unwrap();
    forged.features[1].status = FeatureStatus::Passing;
    forged.features[1].evidence = Some("forged".into());
    forged.features[0].spec.verification[0].command = "true".into();
    for turn in [
        pick("count-words"),
        write("c1", ".harness/ledger.json", &forged.to_json()),
        Expect::any().reply(ModelResponse::from_tool_call(ToolCall::new(
            "c2",
            "write_file",
            json!({ "path": "wc.sh", "content": WORDS }),
        ))),
        answer("done"),
        reflect("do not touch the ledger"),
    ] {
        model.push(turn);
    }
    let SessionEnd::Recorded(entry) = project.run_session().await.unwrap() else {
        panic!("the session recorded nothing");
    };
    assert_eq!(entry.status, Some(FeatureStatus::Passing));
    assert_consistent(&repo);
    let ledger = read_ledger(&repo).unwrap();
    assert_eq!(ledger.features[1].status, FeatureStatus::NotStarted);
    assert_eq!(
        ledger.features[0].spec.verification[0].command,
        "echo 'a b c' | sh wc.sh"
    );
    let progress = read_progress(&repo).unwrap();
    let last = progress.last().unwrap();
    assert!(
        last.outcome.contains("discarded an edit of the ledger")
            && last.outcome.contains("count-words")
            && last.outcome.contains("verification"),
        "{last:?}"
    );

    // The forged file, put back by hand, is refused when checked.
    std::fs::write(repo.join(".harness/ledger.json"), forged.to_json()).unwrap();
    let on_disk = project.env().ledger_on_disk().unwrap();
    assert!(matches!(
        project.env().check(&on_disk).await,
        Err(ProjectError::Ledger(LedgerError::Edited { ref feature, field: "verification" })) if feature == "count-words"
    ));
    let mut status_only = read_ledger(&repo).unwrap();
    status_only.features[0].spec.verification[0].command = "echo 'a b c' | sh wc.sh".into();
    assert!(matches!(
        project.env().check(&status_only).await,
        Err(ProjectError::Ledger(LedgerError::EvidenceMissing { ref feature, ref run })) if feature == "count-lines" && run == "forged"
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_verification_records_failing_and_a_paused_project_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    let model = Arc::new(ScriptedModel::new([
        Expect::any().reply(text(plan())),
        pick("count-words"),
        write("c1", "wc.sh", "echo four\n"),
        answer("done"),
        reflect("check the output before answering"),
    ]));
    let project = agent(dir.path(), store(dir.path()), Arc::clone(&model));
    project.initialize("wc").await.unwrap();
    let status = project.run_until_complete(1).await.unwrap();
    assert_eq!(
        status.features[0],
        ("count-words".to_owned(), FeatureStatus::Failing)
    );
    let ledger = read_ledger(&repo).unwrap();
    let run = project
        .env()
        .run(ledger.features[0].evidence.as_deref().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(!run.passed);
    assert_eq!(read_decisions(&repo).unwrap()[0].score, 0.0);

    project.pause().await.unwrap();
    assert!(matches!(
        project.run_session().await,
        Err(ProjectError::Paused { .. })
    ));
    let status = project.run_until_complete(3).await.unwrap();
    assert_eq!(status.state, ProjectState::Paused);
    assert_eq!(status.sessions, 1, "a paused project starts no session");
    project.resume().await.unwrap();
    assert_eq!(project.status().await.unwrap().state, ProjectState::Active);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_feature_is_worked_on_by_the_sub_agent_of_its_category() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let model = Arc::new(ScriptedModel::new([
        Expect::any().reply(text(plan())),
        pick("count-words"),
        reflect("the cli sub-agent knows shell"),
    ]));
    let cli = Arc::new(ScriptedModel::new([
        Expect::any()
            .any_message_contains("Your feature: `count-words` (cli)")
            .reply(ModelResponse::from_tool_call(ToolCall::new(
                "c1",
                "write_file",
                json!({ "path": "wc.sh", "content": WORDS }),
            ))),
        answer("the cli sub-agent wrote wc.sh"),
    ]));
    let project = ProjectAgent::builder("wc", &repo, store(dir.path()), model.clone())
        .category(
            "cli",
            CategoryAgent::new(cli.clone(), workspace_tools(&repo, Duration::from_secs(30)))
                .system("You write portable shell."),
        )
        .build()
        .unwrap();
    let mermaid = project.session_loop_mermaid();
    assert!(mermaid.contains("work-cli"), "{mermaid}");
    println!("{mermaid}");

    project.initialize("wc").await.unwrap();
    let SessionEnd::Recorded(entry) = project.run_session().await.unwrap() else {
        panic!("the session recorded nothing");
    };
    assert_eq!(entry.status, Some(FeatureStatus::Passing));
    assert_eq!((model.remaining(), cli.remaining()), (0, 0));
    // The main model never did the work: it was asked to plan, pick and
    // reflect only.
    assert_eq!(model.requests().len(), 3);
    assert_eq!(
        cli.requests()[0].messages[0].text(),
        "You write portable shell."
    );
    let state = project
        .session_agent()
        .state_at(&harness::SessionId::from(entry.session_id.as_str()), None)
        .await
        .unwrap();
    assert_eq!(state.work.as_deref(), Some("the cli sub-agent wrote wc.sh"));
    assert_consistent(&repo);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_pick_fails_the_session_by_name_and_the_session_goes_on_when_asked_again() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    let model = Arc::new(ScriptedModel::new([
        Expect::any().reply(text(plan())),
        pick("count-words"),
        write("c1", "wc.sh", WORDS),
        answer("done"),
        reflect("fine"),
    ]));
    let project = agent(dir.path(), store(dir.path()), Arc::clone(&model));
    project.initialize("wc").await.unwrap();
    project.run_session().await.unwrap();

    // (the model's answer, what the error must name)
    for (answer, named) in [
        (
            json!({ "feature": "count-chars", "plan": "?" }).to_string(),
            "count-chars",
        ),
        (
            json!({ "feature": "count-words", "plan": "again" }).to_string(),
            "count-words",
        ),
        ("I will do count-lines".to_owned(), "Pick"),
        (json!({ "feature": 3 }).to_string(), "Pick"),
    ] {
        // Not JSON of a pick gets one repair turn, which fails the same way.
        model.push(Expect::any().reply(ModelResponse::from_text(answer.clone())));
        model.push(Expect::any().reply(ModelResponse::from_text(answer.clone())));
        let error = project.run_session().await.unwrap_err();
        let ProjectError::Session { number: 2, .. } = &error else {
            panic!("{error:?}");
        };
        let message = error.to_string();
        assert!(message.contains(named), "{answer}: {message}");
        // A pick that was a picked feature used one turn, not two.
        while model.remaining() > 0 {
            let _ = harness::llm::LanguageModel::complete(
                &*model,
                &harness::llm::ModelRequest::builder().build(),
            )
            .await;
        }
        assert_consistent(&repo);
        assert_eq!(
            git(&repo, &["log", "--format=%s", "-1"]),
            "session 1: count-words is passing"
        );
    }
    // The same session 2 goes on, and picks again.
    for turn in [
        pick("count-lines"),
        answer("nothing to write"),
        reflect("read first"),
    ] {
        model.push(turn);
    }
    let SessionEnd::Recorded(entry) = project.run_session().await.unwrap() else {
        panic!("session 2 recorded nothing");
    };
    assert_eq!(entry.number, 2);
    assert_eq!(
        entry.status,
        Some(FeatureStatus::Passing),
        "session 1's wc.sh has -l"
    );
}

/// A work turn that writes the word-count script, then runs `command`.
pub(crate) fn write_words_then(command: String) -> harness::llm::Turn {
    Expect::any().reply(ModelResponse::from_tool_calls([
        ToolCall::new(
            "c1",
            "write_file",
            json!({ "path": "wc.sh", "content": WORDS }),
        ),
        ToolCall::new("c2", "run", json!({ "command": command })),
    ]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_stops_the_session_at_a_step_boundary_and_resume_goes_on_where_it_stood() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    let marker = dir.path().join("marker");
    let go = dir.path().join("go");
    // The command runs until the pause has been asked for (up to 60 s).
    let model = Arc::new(ScriptedModel::new([
        Expect::any().reply(text(plan())),
        pick("count-words"),
        write_words_then(format!(
            "touch {}; i=0; while [ ! -e {} ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done",
            marker.display(),
            go.display()
        )),
    ]));
    let project = Arc::new(agent(dir.path(), store(dir.path()), Arc::clone(&model)));
    project.initialize("wc").await.unwrap();

    let running = tokio::spawn({
        let project = Arc::clone(&project);
        async move { project.run_session().await }
    });
    while !marker.exists() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    project.pause().await.unwrap();
    std::fs::write(&go, "").unwrap();
    assert_eq!(running.await.unwrap().unwrap(), SessionEnd::Stopped);
    let status = project.status().await.unwrap();
    assert_eq!(status.state, ProjectState::Paused);
    assert_eq!(status.current, Some(1));
    assert_eq!(status.features[0].1, FeatureStatus::InProgress);
    assert_consistent(&repo);
    assert!(matches!(
        project.run_session().await,
        Err(ProjectError::Paused { .. })
    ));

    // Resumed: the same session goes on after its tools, not from the
    // start (the model is not asked to pick again).
    project.resume().await.unwrap();
    for turn in [answer("wc.sh counts"), reflect("pauses are cheap")] {
        model.push(turn);
    }
    let SessionEnd::Recorded(entry) = project.run_session().await.unwrap() else {
        panic!("the resumed session recorded nothing");
    };
    assert_eq!(entry.number, 1);
    assert_eq!(entry.status, Some(FeatureStatus::Passing));
    assert_eq!(model.remaining(), 0);
    assert_consistent(&repo);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_the_ledger_refuses_is_sent_back_with_the_reason_up_to_three_plans() {
    let twice = {
        let mut p = plan();
        p["features"][1]["id"] = json!("count-words");
        p
    };
    let unverified = {
        let mut p = plan();
        p["features"][0]["verification"] = json!([]);
        p
    };
    // Two refused plans, then a good one: initialized, and each repair turn
    // said what was wrong with the plan before.
    let dir = tempfile::tempdir().unwrap();
    let model = Arc::new(ScriptedModel::new([
        Expect::any().reply(text(twice.clone())),
        Expect::any()
            .last_message_contains("two features with the id `count-words`")
            .reply(text(unverified.clone())),
        Expect::any()
            .last_message_contains("has no verification steps")
            .reply(text(plan())),
    ]));
    let project = agent(dir.path(), store(dir.path()), Arc::clone(&model));
    project.initialize("wc").await.unwrap();
    let ledger = read_ledger(dir.path().join("repo")).unwrap();
    assert_eq!(ledger.features.len(), 2);
    assert_eq!(model.remaining(), 0);

    // Three refused plans: the project is not initialized, and the error
    // names the last reason.
    let dir = tempfile::tempdir().unwrap();
    let model = Arc::new(ScriptedModel::new([
        Expect::any().reply(text(twice.clone())),
        Expect::any().reply(text(unverified)),
        Expect::any().reply(text(twice)),
    ]));
    let project = agent(dir.path(), store(dir.path()), Arc::clone(&model));
    let error = project.initialize("wc").await.unwrap_err().to_string();
    assert!(error.contains("3 plans"), "{error}");
    assert!(error.contains("count-words"), "{error}");
    assert!(!dir.path().join("repo/.harness/ledger.json").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_initializer_is_named_as_the_initializer_not_as_a_session_0() {
    let dir = tempfile::tempdir().unwrap();
    let model = Arc::new(ScriptedModel::new([
        answer("I would rather chat than plan."),
        answer("Still no plan."),
    ]));
    let project = agent(dir.path(), store(dir.path()), model);
    let error = project.initialize("wc").await.unwrap_err();
    assert!(
        matches!(error, ProjectError::Session { number: 0, .. }),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.starts_with("the initializer (session `wc-init`; `initialize` again goes on"),
        "{message}"
    );
    assert!(message.contains("of project `wc` failed: "), "{message}");
    assert!(!message.contains("session 0"), "{message}");
}

/// A planner whose first answer takes a minute; later ones come at once.
struct SlowFirst(std::sync::atomic::AtomicU32);

#[async_trait::async_trait]
impl harness::llm::LanguageModel for SlowFirst {
    async fn complete(
        &self,
        _: &harness::llm::ModelRequest,
    ) -> Result<ModelResponse, harness::llm::ModelError> {
        if self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_secs(60)).await;
        }
        Ok(text(plan()))
    }
}

/// The initializer's deadline cuts a planner that does not answer: the
/// initializer fails with the run's deadline, naming the step, nothing is
/// committed, and `initialize` again goes on with a deadline of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_initializers_deadline_cuts_a_planner_that_does_not_answer() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let model = Arc::new(SlowFirst(std::sync::atomic::AtomicU32::new(0)));
    // Long enough for the second initializer's own steps (git, the store)
    // on a loaded machine, far shorter than the planner's 60 s.
    let limit = Duration::from_secs(5);
    let project = ProjectAgent::builder("wc", &repo, store(dir.path()), Arc::clone(&model) as _)
        .init_deadline(limit)
        .build()
        .unwrap();
    let began = std::time::Instant::now();
    let error = project.initialize("wc").await.unwrap_err();
    assert!(began.elapsed() < Duration::from_secs(30), "{error}");
    let ProjectError::Session {
        number: 0, source, ..
    } = &error
    else {
        panic!("{error:?}")
    };
    assert!(
        matches!(&**source, harness::RunError::Deadline { limit: l, step } if *l == limit && step == "plan"),
        "{source:?}"
    );
    assert!(!repo.join(".harness/ledger.json").exists());
    project.initialize("wc").await.unwrap();
    assert_eq!(read_ledger(&repo).unwrap().features.len(), 2);
}
