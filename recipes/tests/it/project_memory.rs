//! The project agent's decision memory in long-term memory: each session's
//! decision is put there once committed, and a session is told the earlier
//! decisions closest in meaning to the features still open, not merely the
//! latest.

use crate::project::{answer, git, pick, reflect, store, text, write};
use harness::llm::{Expect, ScriptedModel};
use harness::memory::{HashedWords, IndexConfig, Memory, Namespace, Search};
use harness::session::SessionConfig;
use harness_recipes::project::{ProjectAgent, read_decisions};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

const SCRIPT: &str =
    "case \"$1\" in -l) wc -l | tr -d ' ';; -c) wc -c | tr -d ' ';; *) wc -w | tr -d ' ';; esac\n";

fn plan() -> serde_json::Value {
    let feature = |id: &str, priority: u32, description: &str, command: &str, out: &str| {
        json!({
            "id": id, "category": "cli", "priority": priority, "description": description,
            "verification": [{"description": id, "command": command, "expect_stdout": out}]
        })
    };
    json!({
        "features": [
            feature("count-words", 1, "`sh wc.sh` prints the number of words", "echo 'a b c' | sh wc.sh", "3"),
            feature("count-lines", 2, "`sh wc.sh -l` prints the number of lines", "printf 'a\\nb\\n' | sh wc.sh -l", "2"),
            feature("count-bytes", 3, "`sh wc.sh -c` prints the number of bytes", "printf 'abcd' | sh wc.sh -c", "4"),
        ],
        "smoke": []
    })
}

#[tokio::test]
async fn a_session_is_told_the_decisions_closest_to_what_is_open() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let model = Arc::new(ScriptedModel::new([
        Expect::any().reply(text(plan())),
        // Session 1's lesson is about bytes; session 2's about lines.
        pick("count-words"),
        write("c1", "wc.sh", SCRIPT),
        answer("wc.sh counts words"),
        reflect("LESSON-BYTES: counting bytes needs wc -c, whose output has padding"),
        pick("count-lines"),
        write("c2", "wc.sh", SCRIPT),
        answer("wc.sh -l counts lines"),
        reflect("LESSON-LINES: a last line without a newline is not counted"),
        // Session 3 (count-bytes, the one open feature) is told the lesson
        // on bytes, although session 2's is the latest.
        Expect::any()
            .any_message_contains("LESSON-BYTES")
            .reply(text(json!({ "feature": "count-bytes", "plan": "add -c" }))),
        write("c3", "wc.sh", SCRIPT),
        answer("wc.sh -c counts bytes"),
        reflect("LESSON-THREE: one case statement"),
    ]));
    let memory = Memory::in_memory().with_index(IndexConfig::new(
        Arc::new(HashedWords::new(64).min_word_len(4)),
        64,
    ));
    let namespace = Namespace::new(["projects", "wc", "decisions"]).unwrap();
    let project = ProjectAgent::builder("wc", repo.clone(), store(dir.path()), model.clone())
        .session_config(SessionConfig {
            lease_ttl: Duration::from_millis(500),
            ..SessionConfig::default()
        })
        .lessons(1)
        .decision_memory(memory.clone(), namespace.clone())
        .build()
        .unwrap();
    project.initialize("A word-count command").await.unwrap();
    let status = project.run_until_complete(5).await.unwrap();
    assert_eq!(status.sessions, 3);
    assert_eq!(model.remaining(), 0);
    // Session 3's pick was told the bytes lesson, not the lines one.
    let pick_3 = model.requests()[9]
        .messages
        .iter()
        .map(|m| m.text())
        .collect::<String>();
    assert!(pick_3.contains("LESSON-BYTES"), "{pick_3}");
    assert!(!pick_3.contains("LESSON-LINES"), "{pick_3}");

    // Every committed decision is in memory, as committed, the last one
    // included; another agent finds them by meaning.
    let stored = memory
        .search(&Search::under(namespace.clone()).limit(10))
        .await
        .unwrap();
    let keys: Vec<&str> = stored.iter().map(|h| h.item.key.as_str()).collect();
    assert_eq!(keys, ["session-1", "session-2", "session-3"]);
    let committed = read_decisions(&repo).unwrap();
    for (hit, decision) in stored.iter().zip(&committed) {
        assert_eq!(hit.item.value, serde_json::to_value(decision).unwrap());
    }
    let found = memory
        .search(
            &Search::under(namespace.clone())
                .text("lines without a newline")
                .limit(1),
        )
        .await
        .unwrap();
    assert_eq!(found[0].item.key, "session-2");

    // A revert to session 1's commit: memory holds only what that commit
    // holds.
    let log = git(&repo, &["log", "--format=%H"]);
    let session_1 = log.lines().nth(2).unwrap().to_owned();
    project.revert_to(&session_1).await.unwrap();
    let keys: Vec<String> = memory
        .search(&Search::under(namespace).limit(10))
        .await
        .unwrap()
        .into_iter()
        .map(|h| h.item.key)
        .collect();
    assert_eq!(keys, ["session-1"]);
}
