//! A session killed with SIGKILL in the middle of its work leaves the
//! repository and the ledger consistent, and goes on in another process
//! where it stood.
//!
//! The killed process is this test binary run again on `crash_worker`,
//! which is ignored in a normal run (it is a process to kill, not a test)
//! and refuses to run without `PROJECT_CRASH_DIR`.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use super::project::{
    agent, assert_consistent, git, pick, plan, reflect, store, text, write_words_then,
};
use harness::llm::{Expect, ModelResponse, ScriptedModel};
use harness_recipes::project::{FeatureStatus, SessionEnd, read_ledger, read_progress};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

/// The work turn: writes wc.sh, then runs a command that marks the moment
/// and sleeps (the first time), so the test can kill the process there.
fn work_turn(marker: &Path) -> harness::llm::Turn {
    let marker = marker.display();
    write_words_then(format!(
        "test -e {marker} || {{ touch {marker}; sleep 20; }}"
    ))
}

#[test]
#[ignore = "the process the crash test runs and kills; not a test of its own"]
fn crash_worker() {
    let dir = std::env::var_os("PROJECT_CRASH_DIR")
        .map(PathBuf::from)
        .expect("crash_worker is run by the crash test, with PROJECT_CRASH_DIR set");
    let model = Arc::new(ScriptedModel::new([
        pick("count-words"),
        work_turn(&dir.join("marker")),
    ]));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let project = agent(&dir, store(&dir), model);
        let end = project.run_session().await;
        panic!("the session should have been killed, but it ended: {end:?}");
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_killed_mid_work_leaves_repository_and_ledger_consistent_and_resumes_in_another_process()
 {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    let init = {
        let model = Arc::new(ScriptedModel::new([Expect::any().reply(text(plan()))]));
        let project = agent(dir.path(), store(dir.path()), model);
        project.initialize("wc").await.unwrap()
    }; // the store is closed: the worker opens it

    let mut worker = Command::new(std::env::current_exe().unwrap())
        .args([
            "project_crash::crash_worker",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("PROJECT_CRASH_DIR", dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let marker = dir.path().join("marker");
    let mut waited = 0;
    while !marker.exists() {
        if let Some(status) = worker.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(&mut worker.stderr.take().unwrap(), &mut err).unwrap();
            panic!("the worker ended before its work ({status}): {err}");
        }
        std::thread::sleep(Duration::from_millis(50));
        waited += 1;
        assert!(waited < 2400, "the worker never reached its work");
    }
    worker.kill().unwrap(); // SIGKILL
    worker.wait().unwrap();

    // Killed mid-work: the work is in the tree, uncommitted; the ledger on
    // disk is the committed one, whole; HEAD is still the initializer's.
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), init);
    assert_consistent(&repo);
    assert!(git(&repo, &["status", "--porcelain"]).contains("wc.sh"));
    assert_eq!(
        read_ledger(&repo).unwrap().features[0].status,
        FeatureStatus::NotStarted
    );

    // Another process (this one) goes on with the session where it stood:
    // the model is asked only for what comes after the killed turn.
    let model = Arc::new(ScriptedModel::new([
        Expect::any()
            .last_message_contains("exit code 0")
            .reply(ModelResponse::from_text("wc.sh counts words")),
        reflect("a crash is not the end"),
    ]));
    let project = agent(dir.path(), store(dir.path()), Arc::clone(&model));
    let status = project.status().await.unwrap();
    assert_eq!(status.current, Some(1));
    assert_eq!(
        status.features[0],
        ("count-words".to_owned(), FeatureStatus::InProgress)
    );

    let SessionEnd::Recorded(entry) = project.run_session().await.unwrap() else {
        panic!("the recovered session recorded nothing");
    };
    assert_eq!(model.remaining(), 0);
    assert_eq!(entry.number, 1);
    assert_eq!(entry.status, Some(FeatureStatus::Passing));
    let head = git(&repo, &["rev-parse", "HEAD"]);
    assert_eq!(entry.commit.as_deref(), Some(head.as_str()));
    assert_eq!(git(&repo, &["rev-parse", "HEAD~1"]), init);
    assert_eq!(
        git(&repo, &["status", "--porcelain"]),
        "",
        "everything committed"
    );
    assert_consistent(&repo);
    let ledger = read_ledger(&repo).unwrap();
    assert_eq!(ledger.features[0].status, FeatureStatus::Passing);
    let evidence = ledger.features[0].evidence.clone().unwrap();
    assert!(project.env().run(&evidence).await.unwrap().unwrap().passed);
    let progress = read_progress(&repo).unwrap();
    assert_eq!(
        progress.last().unwrap().commit.as_deref(),
        Some(head.as_str())
    );
    // The next session starts from there.
    assert_eq!(project.status().await.unwrap().current, None);
}
