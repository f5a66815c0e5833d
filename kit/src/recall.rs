//! Long-term memory as tools a model uses: [`remember`](Remember),
//! [`recall`](Recall) and [`forget`](Forget), over a
//! [`harness::memory::Memory`] and one namespace.
//!
//! The namespace is the application's choice: one per user
//! (`["users", user_id, "memories"]`), per agent, per project. The tools
//! are ordinary tools, so approval policies apply as to any other: a
//! sensible start is to allow `recall`, and to ask about `remember` and
//! `forget` until the user trusts the agent with them.
//!
//! ```
//! use harness::llm::{ToolCall, ToolSet};
//! use harness::memory::{Memory, Namespace};
//! use harness_kit::recall::memory_tools;
//! use serde_json::json;
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let memory = Memory::in_memory();
//! let tools: ToolSet = memory_tools(memory.clone(), Namespace::new(["users", "u-17"])?);
//! let saved = tools
//!     .dispatch(&ToolCall::new("c1", "remember", json!({"key": "editor", "content": "prefers helix"})))
//!     .await?;
//! assert_eq!(saved.content, "remembered as editor");
//! let found = tools
//!     .dispatch(&ToolCall::new("c2", "recall", json!({"query": "helix"})))
//!     .await?;
//! assert!(found.content.contains("prefers helix"), "{}", found.content);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

use harness::llm::{Tool, ToolSet};
use harness::memory::{Filter, Hit, Memory, MemoryError, Namespace, Search};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use std::collections::HashSet;

/// The most memories one `recall` returns.
pub const MAX_RECALL: usize = 20;

/// Without an index, `recall` looks through at most this many memories.
const SCAN_LIMIT: usize = 2_000;

/// Without an index, `recall` matches at most this many distinct words of
/// the query (the first ones): a query is a few words, and the matching
/// costs a set lookup per word of each memory, whatever the query's length.
pub const MAX_QUERY_WORDS: usize = 64;

/// The three tools over `memory` in `namespace`.
pub fn memory_tools(memory: Memory, namespace: Namespace) -> ToolSet {
    ToolSet::new()
        .with(Remember::new(memory.clone(), namespace.clone()))
        .with(Recall::new(memory.clone(), namespace.clone()))
        .with(Forget::new(memory, namespace))
}

/// The arguments of `remember`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct RememberArgs {
    /// What to remember, in a sentence or two.
    pub content: String,
    /// A short name for it (letters, digits, `-`, `_`); the same key
    /// replaces what was remembered under it. Made up when left out.
    #[serde(default)]
    pub key: Option<String>,
    /// What kind of memory: e.g. `preference`, `fact`, `decision`.
    #[serde(default)]
    pub kind: Option<String>,
}

/// The `remember` tool: puts `{"content", "kind"}` under a key.
#[derive(Clone, Debug)]
pub struct Remember {
    memory: Memory,
    namespace: Namespace,
}

impl Remember {
    /// Remembers into `namespace` of `memory`.
    pub fn new(memory: Memory, namespace: Namespace) -> Self {
        Self { memory, namespace }
    }
}

/// The longest word of the content a made-up key keeps, in characters:
/// four of them and the hash stay far below the store's key limit, however
/// long the content's words (a token, a URL).
const KEY_WORD_CHARS: usize = 24;

/// A key made from the content: its first words (each cut to
/// [`KEY_WORD_CHARS`]), then a short hash of all of it.
fn made_up_key(content: &str) -> String {
    let words: Vec<String> = content
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .take(4)
        .map(|w| {
            w.chars()
                .take(KEY_WORD_CHARS)
                .collect::<String>()
                .to_lowercase()
        })
        .collect();
    let hash = content.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    format!("{}-{:06x}", words.join("-"), hash & 0xff_ffff)
}

#[async_trait::async_trait]
impl Tool for Remember {
    type Args = RememberArgs;
    type Output = String;
    type Error = MemoryError;
    fn name(&self) -> &str {
        "remember"
    }
    fn description(&self) -> &str {
        "Remembers something for later conversations (a preference, a fact, a decision). Returns the key it is kept under."
    }
    async fn call(&self, args: RememberArgs) -> Result<String, MemoryError> {
        let key = match args.key.filter(|k| !k.trim().is_empty()) {
            Some(key) => key.trim().to_owned(),
            None => made_up_key(&args.content),
        };
        let mut value = json!({ "content": args.content });
        if let Some(kind) = args.kind {
            value["kind"] = json!(kind);
        }
        self.memory.put(&self.namespace, &key, value).await?;
        Ok(format!("remembered as {key}"))
    }
}

/// The arguments of `recall`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct RecallArgs {
    /// What to look for, in words.
    pub query: String,
    /// Only memories of this kind.
    #[serde(default)]
    pub kind: Option<String>,
    /// At most this many (default 5, at most 20).
    #[serde(default)]
    #[schemars(range(min = 1, max = 20))]
    pub limit: Option<usize>,
}

/// The `recall` tool: the memories closest in meaning to a query when the
/// memory has an index, else those whose content (and kind) shares the most
/// words with it. Only the memories of its namespace itself, those
/// `remember` makes and `forget` deletes: not those of the namespaces below
/// it (an application's own data there).
#[derive(Clone, Debug)]
pub struct Recall {
    memory: Memory,
    namespace: Namespace,
}

impl Recall {
    /// Recalls from `namespace` of `memory`.
    pub fn new(memory: Memory, namespace: Namespace) -> Self {
        Self { memory, namespace }
    }

    /// The first `limit` hits of `search` in the namespace itself (a
    /// search reaches the namespaces below its prefix too), read a page at
    /// a time, at most [`SCAN_LIMIT`] hits in all. A key is kept once:
    /// pages of a search by meaning are separate searches, which an index
    /// may rank a little differently.
    async fn own_hits(&self, search: &Search, limit: usize) -> Result<Vec<Hit>, MemoryError> {
        let mut found: Vec<Hit> = Vec::new();
        let mut keys = HashSet::new();
        let mut offset = 0;
        while offset < SCAN_LIMIT {
            // At least 20, and no further than SCAN_LIMIT (which the last
            // page may leave fewer than 20 of).
            let page = (limit * 4).max(20).min(SCAN_LIMIT - offset);
            let hits = self
                .memory
                .search(&search.clone().limit(page).offset(offset))
                .await?;
            let read = hits.len();
            found.extend(hits.into_iter().filter(|hit| {
                hit.item.namespace == self.namespace && keys.insert(hit.item.key.clone())
            }));
            if found.len() >= limit || read < page {
                break;
            }
            offset += page;
        }
        found.truncate(limit);
        Ok(found)
    }
}

/// The words a memory is matched on without an index: its content and its
/// kind (not the JSON's keys: a query "content" matches no memory for that).
fn matched_text(value: &serde_json::Value) -> String {
    let field = |name: &str| value.get(name).and_then(|v| v.as_str()).unwrap_or_default();
    match value.get("content") {
        Some(_) => format!("{} {}", field("content"), field("kind")),
        // A memory the application put in another shape: all of it.
        None => value.to_string(),
    }
}

fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() > 2)
        .map(str::to_lowercase)
}

/// The distinct words of `query`, the first [`MAX_QUERY_WORDS`]; and
/// whether there were more.
fn query_words(query: &str) -> (HashSet<String>, bool) {
    let mut wanted = HashSet::new();
    for word in words(query) {
        if wanted.len() == MAX_QUERY_WORDS && !wanted.contains(&word) {
            return (wanted, true);
        }
        wanted.insert(word);
    }
    (wanted, false)
}

/// How many distinct words of `wanted` `text` has: one pass over `text`,
/// a set lookup per word (not a comparison with every word of the query).
fn shared_words(wanted: &HashSet<String>, text: &str) -> usize {
    let mut found = HashSet::new();
    for word in words(text) {
        if let Some(known) = wanted.get(&word) {
            found.insert(known);
        }
    }
    found.len()
}

fn render(hits: &[Hit]) -> String {
    if hits.is_empty() {
        return "nothing remembered matches".to_owned();
    }
    hits.iter()
        .map(|hit| {
            let content = hit.item.value.get("content").and_then(|c| c.as_str());
            let content = content.map_or_else(|| hit.item.value.to_string(), str::to_owned);
            match hit.item.value.get("kind").and_then(|k| k.as_str()) {
                Some(kind) => format!("- {} ({kind}): {content}", hit.item.key),
                None => format!("- {}: {content}", hit.item.key),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[async_trait::async_trait]
impl Tool for Recall {
    type Args = RecallArgs;
    type Output = String;
    type Error = MemoryError;
    fn name(&self) -> &str {
        "recall"
    }
    fn description(&self) -> &str {
        "Recalls what was remembered in earlier conversations that bears on a query."
    }
    async fn call(&self, args: RecallArgs) -> Result<String, MemoryError> {
        let limit = args.limit.unwrap_or(5).clamp(1, MAX_RECALL);
        let mut search = Search::under(self.namespace.clone());
        if let Some(kind) = &args.kind {
            search = search.filter(Filter::eq("kind", kind.as_str()));
        }
        match self
            .own_hits(&search.clone().text(args.query.clone()), limit)
            .await
        {
            Ok(hits) => return Ok(render(&hits)),
            // No index: by shared words below.
            Err(MemoryError::Query { .. }) => {}
            Err(e) => return Err(e),
        }
        let (wanted, cut) = query_words(&args.query);
        let all = self.own_hits(&search, SCAN_LIMIT).await?;
        let mut scored: Vec<(usize, Hit)> = all
            .into_iter()
            .filter_map(|hit| {
                let shared = shared_words(&wanted, &matched_text(&hit.item.value));
                (shared > 0).then_some((shared, hit))
            })
            .collect();
        scored.sort_by(|a, b| {
            b.0.cmp(&a.0)
                .then(b.1.item.updated_at.cmp(&a.1.item.updated_at))
        });
        let hits: Vec<Hit> = scored.into_iter().take(limit).map(|(_, h)| h).collect();
        let mut text = render(&hits);
        if cut {
            text.push_str(&format!(
                "\n(only the first {MAX_QUERY_WORDS} distinct words of the query were looked for)"
            ));
        }
        Ok(text)
    }
}

/// The arguments of `forget`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ForgetArgs {
    /// The key of the memory, as `remember` or `recall` named it.
    pub key: String,
}

/// The `forget` tool: deletes a memory by key.
#[derive(Clone, Debug)]
pub struct Forget {
    memory: Memory,
    namespace: Namespace,
}

impl Forget {
    /// Forgets from `namespace` of `memory`.
    pub fn new(memory: Memory, namespace: Namespace) -> Self {
        Self { memory, namespace }
    }
}

#[async_trait::async_trait]
impl Tool for Forget {
    type Args = ForgetArgs;
    type Output = String;
    type Error = MemoryError;
    fn name(&self) -> &str {
        "forget"
    }
    fn description(&self) -> &str {
        "Forgets a memory, by its key."
    }
    async fn call(&self, args: ForgetArgs) -> Result<String, MemoryError> {
        if self.memory.get(&self.namespace, &args.key).await?.is_none() {
            return Ok(format!("nothing is remembered as {}", args.key));
        }
        self.memory.delete(&self.namespace, &args.key).await?;
        Ok(format!("forgot {}", args.key))
    }
}
