//! A secret a verification command prints is redacted everywhere the
//! project agent keeps or shows the command's output: the evidence record
//! in the store, the progress log, the decisions, the markdown report and
//! the model's prompts.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use super::project::{agent, answer, pick, reflect, store, text};
use harness::llm::{Expect, ScriptedModel};
use harness_recipes::project::{FeatureStatus, SessionEnd, read_decisions, read_progress};
use serde_json::json;
use std::path::Path;
use std::sync::Arc;

/// Registered by this test only (the process's set is shared by every
/// test of the binary; no other text holds this value).
const SECRET: &str = "sk-recipes-redaction-test-7f3a9c2e41b8d605";

/// Every file under `dir` (not `.git`) that holds `SECRET`.
fn files_holding_secret(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != ".git") {
                    stack.push(path);
                }
            } else if std::fs::read(&path)
                .unwrap()
                .windows(SECRET.len())
                .any(|w| w == SECRET.as_bytes())
            {
                found.push(path.display().to_string());
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_printed_by_a_verification_command_is_redacted_wherever_it_is_kept() {
    harness::secrets::register(SECRET);
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    // A configuration file outside the project, holding the key: the
    // ledger names the file, not the key.
    let config = dir.path().join("provider.conf");
    std::fs::write(&config, format!("api_key={SECRET}\n")).unwrap();
    let show = format!("cat {}", config.display());
    let plan = json!({
        "features": [{
            "id": "show-config", "category": "cli", "priority": 1,
            "description": "the provider is configured",
            // Prints the key, then fails: a failed run's output goes into
            // the progress log and the report.
            "verification": [{ "description": "configured", "command": format!("{show}; false") }]
        }],
        "smoke": [{ "description": "the configuration is there", "command": show }]
    });
    let model = Arc::new(ScriptedModel::new([
        Expect::any().reply(text(plan)),
        pick("show-config"),
        answer("nothing to change"),
        reflect("the configuration prints its key"),
    ]));
    let project = agent(dir.path(), store(dir.path()), Arc::clone(&model));
    project.initialize("a configured provider").await.unwrap();
    let SessionEnd::Recorded(entry) = project.run_session().await.unwrap() else {
        panic!("the session should have recorded its feature");
    };
    assert_eq!(entry.status, Some(FeatureStatus::Failing));
    assert_eq!(model.remaining(), 0);

    // The evidence record, as the store keeps it.
    let run = project
        .env()
        .run("wc-session-1-verify")
        .await
        .unwrap()
        .expect("the verification run is kept");
    let output = &run.steps[0].output;
    assert!(!output.contains(SECRET), "evidence: {output}");
    assert!(output.contains("api_key=[redacted]"), "evidence: {output}");

    // The session's state (which the engine redacts too).
    let state = project
        .session_agent()
        .state_at(&harness::SessionId::from("wc-session-1"), None)
        .await
        .unwrap();
    let verification = serde_json::to_string(&state.verification).unwrap();
    assert!(!verification.contains(SECRET), "{verification}");

    // The progress log quotes the failed run's output, redacted.
    let progress = read_progress(&repo).unwrap();
    let quoted = progress
        .iter()
        .find(|e| e.outcome.contains("api_key="))
        .unwrap_or_else(|| panic!("the failed run's output is in the log: {progress:?}"));
    assert!(
        quoted.outcome.contains("api_key=[redacted]"),
        "{}",
        quoted.outcome
    );
    assert!(
        files_holding_secret(&repo).is_empty(),
        "{:?}",
        files_holding_secret(&repo)
    );
    let decisions = serde_json::to_string(&read_decisions(&repo).unwrap()).unwrap();
    assert!(!decisions.contains(SECRET));

    // The report shows the log.
    let report = project.report_markdown().await.unwrap();
    assert!(report.contains("api_key=[redacted]"), "{report}");
    assert!(!report.contains(SECRET), "{report}");

    // The model's prompts (the smoke check's and the verification's
    // output reach `pick` and `record`).
    let requests = serde_json::to_string(&model.requests()).unwrap();
    assert!(requests.contains("api_key=[redacted]"), "{requests}");
    assert!(!requests.contains(SECRET));
}
