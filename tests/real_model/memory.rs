//! Search by meaning with a real embedding model: all-MiniLM-L6-v2 behind
//! `scripts/local-embedder`'s OpenAI-compatible server, through
//! harness-openai's `EmbeddingModel`. A labelled set of our own: 30 items
//! (facts, preferences, notes) and 15 queries that paraphrase one item
//! each, sharing few of its words. Needs `HARNESS_EMBED_URL` and
//! `HARNESS_EMBED_MODEL` (`eval "$(scripts/local-embedder)"`, or
//! `scripts/services`) and fails without them.

use harness::memory::{Filter, IndexConfig, Memory, Namespace, Search};
use serde_json::json;
use std::sync::Arc;

fn embedder() -> harness_openai::EmbeddingModel {
    let var = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| {
            panic!(
                "{name} is not set: start the local embedding model with \
                 `eval \"$(scripts/local-embedder)\"`, or run the whole suite with ./scripts/test"
            )
        })
    };
    harness_openai::Client::builder()
        .base_url(var("HARNESS_EMBED_URL"))
        .max_attempts(1)
        .timeout(std::time::Duration::from_secs(120))
        .build()
        .unwrap()
        .embedding_model(var("HARNESS_EMBED_MODEL"))
}

/// (key, kind, text): a user's memory.
const ITEMS: [(&str, &str, &str); 30] = [
    (
        "tea",
        "preference",
        "Prefers green tea over coffee in the morning.",
    ),
    (
        "editor",
        "preference",
        "Uses the helix editor with a dark theme.",
    ),
    (
        "seat",
        "preference",
        "Always books an aisle seat on flights.",
    ),
    (
        "vegetarian",
        "preference",
        "Eats no meat; vegetarian for ten years.",
    ),
    (
        "units",
        "preference",
        "Wants distances in kilometres, not miles.",
    ),
    ("meetings", "preference", "Dislikes meetings before 10 am."),
    (
        "music",
        "preference",
        "Listens to jazz piano while working.",
    ),
    ("language", "preference", "Writes backend services in Rust."),
    (
        "email",
        "preference",
        "Wants short emails with the answer in the first line.",
    ),
    ("pets", "fact", "Has a grey cat named Pixel."),
    ("city", "fact", "Lives in Lyon, France."),
    ("birthday", "fact", "Was born on the 14th of March."),
    ("allergy", "fact", "Is allergic to peanuts."),
    ("car", "fact", "Drives an electric car, a Renault Zoe."),
    ("kids", "fact", "Has two daughters, aged 6 and 9."),
    (
        "job",
        "fact",
        "Works as a site reliability engineer at a bank.",
    ),
    ("sport", "fact", "Runs half marathons, best time 1 h 41."),
    ("degree", "fact", "Studied physics at university."),
    (
        "languages",
        "fact",
        "Speaks French, English and some Portuguese.",
    ),
    (
        "house",
        "fact",
        "Is renovating the kitchen of an old house.",
    ),
    (
        "deploy",
        "note",
        "The payments service deploys only on Tuesdays after the change board.",
    ),
    ("oncall", "note", "On call the first week of every month."),
    (
        "db",
        "note",
        "The main database is PostgreSQL 16 with streaming replication.",
    ),
    (
        "budget",
        "note",
        "The team's cloud budget is 12 000 euros a month.",
    ),
    (
        "trip",
        "note",
        "Flying to Tokyo on 3 May for a conference talk.",
    ),
    ("book", "note", "Reading a history of the Roman empire."),
    (
        "dentist",
        "note",
        "Dentist appointment next Thursday at 4 pm.",
    ),
    (
        "plants",
        "note",
        "Water the basil and the tomatoes every other day.",
    ),
    (
        "password",
        "note",
        "The router password was changed last week.",
    ),
    (
        "gift",
        "note",
        "Buy a telescope for the older daughter's birthday.",
    ),
];

/// (query, expected key): paraphrases, avoiding the item's own words
/// where a person would.
const QUERIES: [(&str, &str); 15] = [
    (
        "what hot drink does the user like when they wake up?",
        "tea",
    ),
    ("which text editor do they code in?", "editor"),
    ("where do they like to sit on a plane?", "seat"),
    ("does the user eat steak?", "vegetarian"),
    ("what animal lives with them?", "pets"),
    ("which town is their home?", "city"),
    ("food they must avoid for health reasons", "allergy"),
    ("what kind of vehicle do they own?", "car"),
    ("how many children do they have?", "kids"),
    ("what is their profession?", "job"),
    ("which weekday can we release the billing system?", "deploy"),
    ("what database engine do we run in production?", "db"),
    ("how much can we spend on hosting each month?", "budget"),
    ("when is the trip to Japan?", "trip"),
    ("present idea for a child who likes astronomy", "gift"),
];

async fn remembered() -> (Memory, Namespace) {
    let config = IndexConfig::new(Arc::new(embedder()), 384).fields(["text"]);
    let memory = Memory::in_memory().with_index(config);
    let ns = Namespace::new(["users", "u-17"]).unwrap();
    for (key, kind, text) in ITEMS {
        memory
            .put(&ns, key, json!({"text": text, "kind": kind}))
            .await
            .unwrap();
    }
    // Another user's memory, which a search under u-17 never returns.
    let other = Namespace::new(["users", "u-18"]).unwrap();
    memory
        .put(
            &other,
            "tea",
            json!({"text": "Prefers green tea over coffee in the morning.", "kind": "preference"}),
        )
        .await
        .unwrap();
    (memory, ns)
}

/// Each paraphrased query finds its item in the top 3: at least 13 of 15
/// (the figure is printed), with scores in order and within the user's
/// namespace.
#[tokio::test]
async fn paraphrased_queries_find_their_items_in_the_top_3() {
    let (memory, ns) = remembered().await;
    let mut found = 0;
    for (query, want) in QUERIES {
        let hits = memory
            .search(&Search::under(ns.clone()).text(query).limit(3))
            .await
            .unwrap();
        assert_eq!(hits.len(), 3);
        assert!(hits.iter().all(|h| h.item.namespace == ns));
        let scores: Vec<f32> = hits.iter().map(|h| h.score.unwrap()).collect();
        assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
        let keys: Vec<&str> = hits.iter().map(|h| h.item.key.as_str()).collect();
        let hit = keys.contains(&want);
        found += usize::from(hit);
        println!(
            "{} {query:?} -> {keys:?} (want {want})",
            if hit { "hit " } else { "MISS" }
        );
    }
    println!("hit rate in the top 3: {found}/15");
    assert!(found >= 13, "only {found}/15 paraphrases found their item");
}

/// Filters combine with meaning: a query about a fact, restricted to
/// preferences, returns preferences only; restricted to facts it finds the
/// fact first.
#[tokio::test]
async fn filters_combine_with_meaning() {
    let (memory, ns) = remembered().await;
    let query = "what animal lives with them?";
    let facts = memory
        .search(
            &Search::under(ns.clone())
                .text(query)
                .filter(Filter::eq("kind", "fact"))
                .limit(3),
        )
        .await
        .unwrap();
    assert_eq!(facts[0].item.key, "pets");
    assert!(facts.iter().all(|h| h.item.value["kind"] == "fact"));
    let prefs = memory
        .search(
            &Search::under(ns.clone())
                .text(query)
                .filter(Filter::eq("kind", "preference"))
                .limit(5),
        )
        .await
        .unwrap();
    assert_eq!(prefs.len(), 5);
    assert!(prefs.iter().all(|h| h.item.value["kind"] == "preference"));
    // A related and an unrelated text score far apart.
    let tea = memory
        .search(
            &Search::under(ns.clone())
                .text("a cup of green tea")
                .filter(Filter::eq("kind", "preference"))
                .limit(9),
        )
        .await
        .unwrap();
    let first = tea.first().unwrap();
    let last = tea.last().unwrap();
    assert_eq!(first.item.key, "tea");
    assert!(
        first.score.unwrap() > last.score.unwrap() + 0.3,
        "{:?} vs {:?}",
        first.score,
        last.score
    );
}
