//! Long-term memory as the model's tools: what one session remembers
//! another recalls, approval applies as to any tool, bad keys are refused
//! to the model.

use crate::support::agent;
use harness::llm::{ContentPart, Expect, ModelResponse, ScriptedModel, ToolCall};
use harness::memory::{Memory, Namespace};
use harness_kit::recall::memory_tools;
use harness_kit::{AgentChat, AgentLoop, ApprovalRequest, Decisions, Policy};
use serde_json::json;
use std::sync::Arc;

fn user() -> Namespace {
    Namespace::new(["users", "u-17"]).unwrap_or_else(|e| panic!("{e}"))
}

fn results(model: &ScriptedModel, turn: usize) -> Vec<(bool, String)> {
    model.requests()[turn]
        .messages
        .iter()
        .flat_map(|m| m.content.iter())
        .filter_map(|p| match p {
            ContentPart::ToolResult(r) => Some((r.is_error, r.content.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn what_one_session_remembers_the_next_recalls() {
    let memory = Memory::in_memory();
    // Session 1: the model remembers two things; `remember` is asked about.
    let first = Arc::new(ScriptedModel::new([
        Expect::any().reply(ModelResponse::from_tool_calls([
            ToolCall::new(
                "r1",
                "remember",
                json!({"key": "editor", "content": "Ana edits in helix", "kind": "preference"}),
            ),
            ToolCall::new(
                "r2",
                "remember",
                json!({"content": "Ana's team ships on Thursdays", "kind": "fact"}),
            ),
        ])),
        Expect::any().reply(ModelResponse::from_text("noted")),
    ]));
    let recipe = AgentLoop::new(memory_tools(memory.clone(), user()))
        .policy("remember", Policy::ask())
        .policy("forget", Policy::ask());
    let agent1 = agent(recipe, first.clone());
    let mut run = agent1.run(AgentChat::with_task("I use helix; we ship on Thursdays"));
    let paused = run.outcome().await.unwrap_or_else(|e| panic!("{e}"));
    let interrupt = paused
        .interrupt
        .unwrap_or_else(|| panic!("remember is asked about"));
    let request: ApprovalRequest =
        serde_json::from_value(interrupt.payload.clone()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(request.calls.len(), 2);
    // The person approves one and rejects the other.
    run.resume(
        serde_json::to_value(Decisions::new().approve("r1").reject("r2", "not that"))
            .unwrap_or_default(),
        &interrupt.id,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    run.outcome().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        results(&first, 1)[0],
        (false, "remembered as editor".to_owned())
    );
    let stored = memory
        .get(&user(), "editor")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        stored.map(|i| i.value),
        Some(json!({"content": "Ana edits in helix", "kind": "preference"}))
    );

    // Session 2, another run: recall finds it (by words: no index), and
    // forget deletes it.
    let second = Arc::new(ScriptedModel::new([
        Expect::any().reply(ModelResponse::from_tool_call(ToolCall::new(
            "q1",
            "recall",
            json!({"query": "which editor does Ana use?"}),
        ))),
        Expect::any().reply(ModelResponse::from_tool_calls([
            ToolCall::new("q2", "recall", json!({"query": "editor", "kind": "fact"})),
            ToolCall::new("f1", "forget", json!({"key": "editor"})),
            ToolCall::new("f2", "forget", json!({"key": "never-was"})),
            ToolCall::new("bad", "remember", json!({"key": "a\u{0}b", "content": "x"})),
        ])),
        Expect::any().reply(ModelResponse::from_text("done")),
    ]));
    let recipe = AgentLoop::new(memory_tools(memory.clone(), user()));
    let agent2 = agent(recipe, second.clone());
    let outcome = agent2
        .run(AgentChat::with_task("what editor?"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(outcome.signal.as_str(), "answered");
    let first_recall = results(&second, 1);
    assert_eq!(
        first_recall[0],
        (
            false,
            "- editor (preference): Ana edits in helix".to_owned()
        )
    );
    let rest = results(&second, 2);
    // Only facts: none matches `editor`.
    assert_eq!(rest[1], (false, "nothing remembered matches".to_owned()));
    assert_eq!(rest[2], (false, "forgot editor".to_owned()));
    assert_eq!(
        rest[3],
        (false, "nothing is remembered as never-was".to_owned())
    );
    assert!(
        rest[4].0 && rest[4].1.contains("control character"),
        "{:?}",
        rest[4]
    );
    assert_eq!(
        memory
            .get(&user(), "editor")
            .await
            .unwrap_or_else(|e| panic!("{e}")),
        None
    );
}

#[tokio::test]
async fn without_an_index_recall_ranks_by_distinct_shared_words_of_a_bounded_query() {
    use harness::llm::ToolSet;
    use harness_kit::recall::MAX_QUERY_WORDS;
    let memory = Memory::in_memory();
    let tools: ToolSet = memory_tools(memory.clone(), user());
    let remember = |key: &str, content: &str| {
        ToolCall::new("r", "remember", json!({"key": key, "content": content}))
    };
    for (key, content) in [
        ("pets", "Ana has two cats"),
        ("zoo", "Ana watches dogs and birds"),
        ("far", "zebra crossing near the office"),
    ] {
        tools
            .dispatch(&remember(key, content))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let recall = |query: String| {
        let tools = tools.clone();
        async move {
            tools
                .dispatch(&ToolCall::new(
                    "q",
                    "recall",
                    json!({"query": query, "limit": 1}),
                ))
                .await
                .unwrap_or_else(|e| panic!("{e}"))
                .content
        }
    };
    // A word said four times counts once: `zoo` shares two words, `pets`
    // one (before, each repetition counted, and `pets` came first).
    for query in [
        "cats cats cats cats dogs birds",
        "CATS cats Cats cats birds dogs dogs",
        "dogs cats birds cats cats cats cats",
    ] {
        let found = recall(query.to_owned()).await;
        assert!(found.starts_with("- zoo:"), "{query}: {found}");
    }
    // A long query: only its first distinct words are looked for, and the
    // answer says so (the matching costs no more than for a short one).
    let fillers: Vec<String> = (0..MAX_QUERY_WORDS).map(|i| format!("filler{i}")).collect();
    for repeat in [1, 100, 10_000] {
        let query = format!("{} zebra", fillers.join(" ").repeat_words(repeat));
        let found = recall(query).await;
        assert!(found.starts_with("nothing remembered matches"), "{found}");
        assert!(
            found.contains(&format!("first {MAX_QUERY_WORDS} distinct words")),
            "{found}"
        );
    }
    let found = recall(format!("zebra {}", fillers.join(" "))).await;
    assert!(found.starts_with("- far:"), "{found}");
    // Within the limit, nothing is said of it.
    let found = recall("zebra office".to_owned()).await;
    assert!(!found.contains("distinct words"), "{found}");
}

/// `self` (words separated by spaces) `n` times over.
trait RepeatWords {
    fn repeat_words(&self, n: usize) -> String;
}

impl RepeatWords for String {
    fn repeat_words(&self, n: usize) -> String {
        vec![self.as_str(); n].join(" ")
    }
}

/// The application's own data below the tools' namespace, closer to the
/// query than anything the model remembered.
async fn with_private_data_below(memory: &Memory) {
    let private = Namespace::new(["users", "u-17", "private"]).unwrap_or_else(|e| panic!("{e}"));
    for i in 0..30 {
        memory
            .put(
                &private,
                &format!("bank{i}"),
                json!({"content": "bank password is hunter2", "kind": "secret"}),
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
}

#[tokio::test]
async fn recall_reads_only_its_own_namespace_not_those_below_it() {
    use harness::llm::ToolSet;
    use harness::memory::{HashedWords, IndexConfig};
    let indexed = Memory::in_memory()
        .with_index(IndexConfig::new(Arc::new(HashedWords::new(64)), 64).fields(["content"]));
    for memory in [Memory::in_memory(), indexed] {
        with_private_data_below(&memory).await;
        let tools: ToolSet = memory_tools(memory.clone(), user());
        tools
            .dispatch(&ToolCall::new(
                "r",
                "remember",
                json!({"key": "bank", "content": "banks Ana with Nordea; the password manager is in use"}),
            ))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        for args in [
            json!({"query": "bank password"}),
            json!({"query": "bank password", "limit": 20}),
            json!({"query": "password", "kind": "secret"}),
        ] {
            let found = tools
                .dispatch(&ToolCall::new("q", "recall", args.clone()))
                .await
                .unwrap_or_else(|e| panic!("{e}"))
                .content;
            assert!(!found.contains("hunter2"), "{args}: {found}");
            if args.get("kind").is_none() {
                assert!(found.starts_with("- bank: banks Ana"), "{args}: {found}");
            }
        }
    }
}

#[tokio::test]
async fn without_an_index_recall_matches_content_not_the_keys_of_its_json() {
    use harness::llm::ToolSet;
    let memory = Memory::in_memory();
    let tools: ToolSet = memory_tools(memory.clone(), user());
    tools
        .dispatch(&ToolCall::new(
            "r",
            "remember",
            json!({"key": "tea", "content": "green tea", "kind": "preference"}),
        ))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    for (query, matches) in [("content", false), ("kind", false), ("preference", true)] {
        let found = tools
            .dispatch(&ToolCall::new("q", "recall", json!({"query": query})))
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .content;
        assert_eq!(found.starts_with("- tea"), matches, "{query}: {found}");
    }
}

#[tokio::test]
async fn a_key_made_up_from_content_with_long_words_fits_the_store() {
    use harness::llm::ToolSet;
    let memory = Memory::in_memory();
    let tools: ToolSet = memory_tools(memory.clone(), user());
    for content in [
        format!("the token is {}", "A".repeat(1100)),
        "x".repeat(600_000),
        format!(
            "{} {} {} {}",
            "é".repeat(900),
            "b".repeat(900),
            "ü".repeat(900),
            "d".repeat(900)
        ),
    ] {
        let saved = tools
            .dispatch(&ToolCall::new(
                "r",
                "remember",
                json!({ "content": content }),
            ))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(!saved.is_error, "{}", saved.content);
        let key = saved
            .content
            .strip_prefix("remembered as ")
            .unwrap_or_else(|| panic!("{}", saved.content));
        assert!(key.len() < 200, "{key}");
        let item = memory
            .get(&user(), key)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            item.map(|i| i.value["content"].clone()),
            Some(json!(content))
        );
    }
}

#[tokio::test]
async fn recall_reads_to_its_scan_limit_whatever_the_page_size() {
    // Thousands of the application's items below the namespace, closer to
    // the query than the model's own: `recall` pages through to its scan
    // limit, whose last page is shorter than the others (a limit of 6
    // pages by 24, which 2 000 is no multiple of).
    use harness::llm::ToolSet;
    use harness::memory::{HashedWords, IndexConfig, Op, PutOptions};
    let memory = Memory::in_memory()
        .with_index(IndexConfig::new(Arc::new(HashedWords::new(64)), 64).fields(["content"]));
    let docs = Namespace::new(["users", "u-17", "docs"]).unwrap_or_else(|e| panic!("{e}"));
    let ops = (0..2_100)
        .map(|i| Op::Put {
            namespace: docs.clone(),
            key: format!("d{i}"),
            value: json!({"content": format!("the quarterly report number {i}")}),
            options: PutOptions::default(),
        })
        .collect();
    memory.batch(ops).await.unwrap_or_else(|e| panic!("{e}"));
    let tools: ToolSet = memory_tools(memory.clone(), user());
    for limit in [1, 6, 7, 8, 16, 20] {
        let found = tools
            .dispatch(&ToolCall::new(
                "q",
                "recall",
                json!({"query": "quarterly report", "limit": limit}),
            ))
            .await
            .unwrap_or_else(|e| panic!("{limit}: {e}"))
            .content;
        assert_eq!(found, "nothing remembered matches", "{limit}");
    }
}
