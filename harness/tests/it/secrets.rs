//! Secrets redacted by value (`harness::secrets`): the set's matching, the
//! environment's secret-looking names, and a loop whose tool prints the
//! environment and a configuration file: the model, the state written to a
//! store and the state read back from it see `[redacted]`.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use async_trait::async_trait;
use harness::llm::{
    ContentPart, Expect, Message, ModelError, ModelRequest, ModelResponse, ScriptedModel, Tool,
    ToolCall, ToolError, ToolSet,
};
use harness::secrets::{self, MIN_SECRET_LEN, REDACTED, SecretSet, is_secret_name};
use harness::session::{Checkpoint, Commit, SessionStore, StoreError, StoredRun};
use harness::{Cx, Harness, HarnessState, SessionId, create_agent};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

fn set(values: &[&str]) -> SecretSet {
    let mut set = SecretSet::new();
    for value in values {
        assert!(set.register(value), "{value}");
    }
    set
}

#[test]
fn with_no_secret_the_text_comes_back_borrowed() {
    let empty = SecretSet::new();
    let some = set(&["sk-abcdefgh12345678"]);
    for text in [
        "",
        "short",
        "an ordinary sentence without a key",
        "sk-abcdefgh1234567",
        "ключ: 🙂",
    ] {
        assert!(matches!(empty.redact(text), Cow::Borrowed(t) if t == text));
        assert!(matches!(some.redact(text), Cow::Borrowed(t) if t == text));
        assert!(!some.contains_secret(text));
    }
    let mut json = serde_json::json!({"a": ["x", {"b": "sk-abcdefgh1234567"}], "n": 1});
    let before = json.clone();
    assert!(!empty.redact_json(&mut json));
    assert!(!some.redact_json(&mut json));
    assert_eq!(json, before);
}

#[test]
fn short_values_and_the_marker_are_not_registered() {
    let mut set = SecretSet::new();
    for value in [
        "",
        "a",
        "1234567",
        "  1234567  ",
        "\t\n",
        "ééé",
        "redacted",
        "[redacted]",
        "edacted]",
    ] {
        assert!(!set.register(value), "{value:?}");
    }
    assert!(set.is_empty());
    assert_eq!(MIN_SECRET_LEN, 8);
    // Eight bytes (four two-byte characters) is enough; a value is trimmed.
    assert!(set.register("éééé"));
    assert!(set.register("  12345678\n"));
    assert_eq!(set.redact("a 12345678 b"), "a [redacted] b");
    assert_eq!(set.redact("xéééé"), "x[redacted]");
    // Registering twice adds nothing.
    let len = set.len();
    assert!(set.register("12345678"));
    assert_eq!(set.len(), len);
    // A short text cannot hold a registered value.
    assert_eq!(set.redact("1234567"), "1234567");
}

#[test]
fn every_occurrence_is_replaced_at_the_start_the_end_and_twice() {
    let set = set(&["s3cr3t-value"]);
    for (text, expected) in [
        ("s3cr3t-value", "[redacted]"),
        ("s3cr3t-value at the start", "[redacted] at the start"),
        ("at the end s3cr3t-value", "at the end [redacted]"),
        ("s3cr3t-value and s3cr3t-value", "[redacted] and [redacted]"),
        ("s3cr3t-values3cr3t-value", "[redacted][redacted]"),
        (
            "inside-a-words3cr3t-valueword",
            "inside-a-word[redacted]word",
        ),
        ("line\ns3cr3t-value\n", "line\n[redacted]\n"),
        ("S3CR3T-VALUE", "S3CR3T-VALUE"),
    ] {
        assert_eq!(set.redact(text), expected, "{text}");
    }
}

#[test]
fn overlapping_and_nested_secrets_are_replaced_whole() {
    // Two secrets that share characters: neither part may be left.
    let set = set(&["abcdefgh12", "gh12345xyz", "token-inner", "x-token-inner-y"]);
    for (text, expected) in [
        ("<abcdefgh12345xyz>", "<[redacted]>"),
        ("<gh12345xyzabcdefgh12>", "<[redacted][redacted]>"),
        ("<abcdefgh12>", "<[redacted]>"),
        ("<gh12345xyz>", "<[redacted]>"),
        // One inside another: the longer goes whole.
        ("[x-token-inner-y]", "[[redacted]]"),
        ("[token-inner]", "[[redacted]]"),
        ("abcdefgh12345xyz x-token-inner-y", "[redacted] [redacted]"),
    ] {
        let out = set.redact(text);
        assert_eq!(out, expected, "{text}");
        for fragment in ["abcdefgh", "12345", "gh12", "345xyz", "token-inner"] {
            assert!(!out.contains(fragment), "{text} → {out}");
        }
    }
}

#[test]
fn unicode_around_and_inside_a_secret_stays_whole() {
    let set = set(&["pässwörd-ünïcode", "KEY0123456789"]);
    for (text, expected) in [
        ("ключ=KEY0123456789🙂", "ключ=[redacted]🙂"),
        ("日本KEY0123456789語", "日本[redacted]語"),
        ("→pässwörd-ünïcode←", "→[redacted]←"),
        (
            "🙂pässwörd-ünïcodeKEY0123456789🙂",
            "🙂[redacted][redacted]🙂",
        ),
        ("pässwörd-ünïcod", "pässwörd-ünïcod"),
    ] {
        assert_eq!(set.redact(text), expected, "{text}");
    }
}

#[test]
fn json_strings_and_keys_are_redacted_and_numbers_stay() {
    let set = set(&["sk-json-0123456789"]);
    let mut value = serde_json::json!({
        "sk-json-0123456789": "sk-json-0123456789",
        "nested": [1, true, null, {"deep": ["k=sk-json-0123456789;", 12345678]}],
        "plain": "nothing here",
    });
    assert!(set.redact_json(&mut value));
    assert_eq!(
        value,
        serde_json::json!({
            "[redacted]": "[redacted]",
            "nested": [1, true, null, {"deep": ["k=[redacted];", 12345678]}],
            "plain": "nothing here",
        })
    );
    // Keys that become the same keep their values apart; a key alone is
    // enough to count as a change.
    let mut keyed = serde_json::json!({
        "tokens": {"sk-json-0123456789": 1, "[redacted]": 2, "a sk-json-0123456789": 3},
    });
    assert!(set.redact_json(&mut keyed));
    assert_eq!(
        keyed,
        serde_json::json!({
            "tokens": {"[redacted]": 2, "[redacted]#2": 1, "a [redacted]": 3},
        })
    );
    // Nested deeper than a recursion of a debug build's test thread could
    // go (serde_json itself serializes and drops recursively, so the value
    // is taken apart by hand).
    let mut deep = serde_json::json!("sk-json-0123456789");
    for _ in 0..100_000 {
        deep = serde_json::Value::Array(vec![deep]);
    }
    assert!(set.redact_json(&mut deep));
    while let serde_json::Value::Array(mut items) = deep {
        deep = items.pop().unwrap_or_default();
    }
    assert_eq!(deep, REDACTED);
}

#[test]
fn a_secret_with_quotes_is_found_in_json_text_too() {
    let secret = r#"pa"ss\word-1234"#;
    let set = set(&[secret]);
    let text = serde_json::to_string(&serde_json::json!({ "said": secret })).unwrap();
    assert!(!text.contains(secret), "escaped in JSON text");
    let out = set.redact(&text);
    assert_eq!(out, r#"{"said":"[redacted]"}"#);
    assert_eq!(set.redact(secret), "[redacted]");
}

#[test]
fn a_sets_debug_output_shows_no_value() {
    let set = set(&["sk-debug-0123456789"]);
    let shown = format!("{set:?} {set:#?}");
    assert!(!shown.contains("sk-debug"), "{shown}");
    assert!(shown.contains("values"), "{shown}");
}

#[test]
fn secret_looking_names_are_told_from_ordinary_ones() {
    for name in [
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "GEMINI_API_KEY",
        "GOOGLE_API_KEY",
        "GITHUB_TOKEN",
        "gh_token",
        "HF_TOKEN",
        "CARGO_REGISTRY_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "CLIENT_SECRET",
        "PGPASSWORD",
        "MYSQL_PASSWORD",
        "DB_PASS",
        "SMTP_PASSWD",
        "AZURE_CREDENTIALS",
        "MY_APIKEY",
        "service.accesstoken",
        "KEY",
        "SSH_KEYS",
        "RSA-PRIVATEKEY",
    ] {
        assert!(is_secret_name(name), "{name}");
    }
    for name in [
        "PATH",
        "HOME",
        "MAX_TOKENS",
        "TOKENIZERS_PARALLELISM",
        "KEYBOARD_LAYOUT",
        "MONKEY_MODE",
        "SSH_KEY_PATH",
        "PRIVATE_KEY_FILE",
        "PASSWORD_FILE",
        "SECRETS_DIR",
        "PASSPORT_ID",
        "OPENAI_BASE_URL",
        "",
        "_",
    ] {
        assert!(!is_secret_name(name), "{name}");
    }
}

#[test]
fn the_process_set_redacts_errors_of_models_and_tools() {
    const SECRET: &str = "sk-global-test-4f3e2d1c0b";
    assert!(secrets::register(SECRET));
    assert!(!secrets::register("short"));
    assert!(secrets::is_active());
    assert!(secrets::contains_secret(&format!("key {SECRET}")));
    assert!(matches!(
        secrets::redact("nothing"),
        Cow::Borrowed("nothing")
    ));
    assert_eq!(secrets::redact(&format!("<{SECRET}>")), "<[redacted]>");

    let message = || format!("the key {SECRET} was refused");
    for error in [
        ModelError::Auth { message: message() },
        ModelError::RateLimited {
            retry_after: None,
            message: message(),
        },
        ModelError::Overloaded {
            status: Some(503),
            message: message(),
            retry_after: None,
        },
        ModelError::InvalidRequest {
            status: Some(400),
            message: message(),
        },
        ModelError::malformed(message()),
        ModelError::Transport { message: message() },
        ModelError::Configuration { message: message() },
        ModelError::other(message()),
        ModelError::ContentFiltered { reason: message() },
        ModelError::ResponseTooLarge {
            what: message(),
            limit: 1,
        },
        ModelError::Recording {
            path: PathBuf::from("/tmp/r.json"),
            message: message(),
        },
    ] {
        let redacted = error.clone().redacted();
        for text in [redacted.to_string(), format!("{redacted:?}")] {
            assert!(!text.contains(SECRET), "{text}");
            assert!(text.contains("the key [redacted] was refused"), "{text}");
        }
    }
    let error = ToolError::Failed {
        tool: "cat".into(),
        message: message(),
    }
    .redacted();
    assert!(!error.to_string().contains(SECRET), "{error}");
}

// ---------------------------------------------------------------------------
// A loop whose tools print secrets, with a store on disk.

/// A session store that appends every commit to a JSON-lines file, as a
/// store writes what it is given, and keeps the sessions in memory to
/// answer reads.
#[derive(Debug)]
struct JsonLinesStore {
    path: PathBuf,
    sessions: Mutex<BTreeMap<SessionId, Session>>,
}

/// A session's head and checkpoint log.
type Session = (StoredRun, BTreeMap<u64, Checkpoint>);

impl JsonLinesStore {
    fn new(path: &Path) -> Self {
        Self {
            path: path.to_owned(),
            sessions: Mutex::default(),
        }
    }
}

#[async_trait]
impl SessionStore for JsonLinesStore {
    async fn load(&self, session: &SessionId) -> Result<Option<StoredRun>, StoreError> {
        Ok(self
            .sessions
            .lock()
            .unwrap()
            .get(session)
            .map(|(h, _)| h.clone()))
    }

    async fn commit(&self, commit: &Commit) -> Result<(), StoreError> {
        let mut sessions = self.sessions.lock().unwrap();
        let id = commit.head.session_id.clone();
        let found = sessions.get(&id).map(|(h, _)| h.version);
        if found != commit.expected_version {
            return Err(StoreError::Conflict {
                session: id,
                expected: commit.expected_version,
                found,
            });
        }
        let line = serde_json::json!({
            "head": commit.head,
            "append": commit.append,
            "remove": commit.remove,
        });
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(|e| StoreError::backend(e.to_string()))?;
        writeln!(file, "{line}").map_err(|e| StoreError::backend(e.to_string()))?;
        let (head, log) = sessions
            .entry(id)
            .or_insert_with(|| (commit.head.clone(), BTreeMap::new()));
        *head = commit.head.clone();
        for seq in &commit.remove {
            log.remove(seq);
        }
        for cp in &commit.append {
            log.insert(cp.seq, cp.clone());
        }
        Ok(())
    }

    async fn checkpoints(
        &self,
        session: &SessionId,
        from_seq: u64,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        Ok(self
            .sessions
            .lock()
            .unwrap()
            .get(session)
            .map(|(_, log)| log.range(from_seq..).map(|(_, c)| c.clone()).collect())
            .unwrap_or_default())
    }

    async fn sessions(&self) -> Result<Vec<SessionId>, StoreError> {
        Ok(self.sessions.lock().unwrap().keys().cloned().collect())
    }

    async fn flush(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Chat {
    #[field(reduce = append)]
    messages: Vec<Message>,
    note: String,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct NoArgs {}

/// What `env` prints: the process's environment, from
/// `/proc/self/environ` where there is one.
struct Environ;

#[async_trait]
impl Tool for Environ {
    type Args = NoArgs;
    type Output = String;
    type Error = String;
    fn name(&self) -> &str {
        "environ"
    }
    fn description(&self) -> &str {
        "prints the environment"
    }
    async fn call(&self, _: NoArgs) -> Result<String, String> {
        match std::fs::read("/proc/self/environ") {
            Ok(bytes) => Ok(String::from_utf8_lossy(&bytes).replace('\0', "\n")),
            Err(_) => Ok(std::env::vars()
                .map(|(k, v)| format!("{k}={v}\n"))
                .collect()),
        }
    }
}

/// Reads a file; fails quoting it when asked to.
struct ReadFile(PathBuf);

#[derive(Deserialize, schemars::JsonSchema)]
struct ReadArgs {
    fail: bool,
}

#[async_trait]
impl Tool for ReadFile {
    type Args = ReadArgs;
    type Output = String;
    type Error = String;
    fn name(&self) -> &str {
        "read_config"
    }
    fn description(&self) -> &str {
        "reads the configuration"
    }
    async fn call(&self, args: ReadArgs) -> Result<String, String> {
        let text = std::fs::read_to_string(&self.0).map_err(|e| e.to_string())?;
        if args.fail {
            return Err(format!("cannot parse {text:?}"));
        }
        Ok(text)
    }
}

/// remember (writes a secret into the state itself) → ask (model) ⇄ act
/// (tools), until the model answers without calls.
fn chat(
    model: Arc<ScriptedModel>,
    tools: ToolSet,
    remembered: String,
    store: Arc<JsonLinesStore>,
) -> Harness<Chat> {
    let ask_tools = tools.clone();
    Harness::<Chat>::builder()
        .step("remember")
        .run(move |_cx: Cx<()>| {
            let note = remembered.clone();
            async move { Ok(ChatUpdate::new().note(note)) }
        })
        .next("ask")
        .step("ask")
        .run(move |chat: Arc<Chat>, cx: Cx<()>| {
            let model = Arc::clone(&model);
            let specs = ask_tools.specs();
            async move {
                let request = ModelRequest::builder()
                    .messages(chat.messages.clone())
                    .tools(specs)
                    .build();
                let answer = cx.complete(&*model, &request).await?;
                Ok(ChatUpdate::new().messages(vec![answer.into_message()]))
            }
        })
        .route(|chat: &Chat| {
            let calls = chat
                .messages
                .last()
                .is_some_and(|m| m.tool_calls().next().is_some());
            if calls { "act" } else { "done" }
        })
        .on("act")
        .to("act")
        .on("done")
        .end()
        .step("act")
        .run(move |chat: Arc<Chat>, cx: Cx<()>| {
            let tools = tools.clone();
            async move {
                let calls: Vec<ToolCall> = chat
                    .messages
                    .last()
                    .map(|m| m.tool_calls().cloned().collect())
                    .unwrap_or_default();
                let mut results = Vec::new();
                for call in &calls {
                    results.push(cx.call_tool(&tools, call).await);
                }
                Ok(ChatUpdate::new().messages(vec![Message::tool_results(results)]))
            }
        })
        .next("ask")
        .start("remember")
        .store(store)
        .build()
        .unwrap()
}

/// The child's environment: a secret by its name, and values that are not.
const ENV_SECRET_NAME: &str = "HARNESS_IT_SERVICE_TOKEN";
const ENV_SECRET: &str = "tok-env-5b1f0c9e2d7a4e31";
const VISIBLE: [(&str, &str); 3] = [
    ("HARNESS_IT_GREETING", "visible-greeting-value"),
    ("HARNESS_IT_MAX_TOKENS", "409600000"),
    ("HARNESS_IT_KEY_FILE", "/etc/harness-it/key.pem"),
];
/// Registered by the child, as a provider's key is.
const REGISTERED: &str = "sk-registered-9a8b7c6d5e4f";
/// Set in the child only.
const CHILD: &str = "HARNESS_IT_SECRETS_CHILD";

#[test]
fn tool_outputs_reach_the_model_and_the_store_redacted() {
    // The environment is read at the first redaction of a process, and
    // this binary's other tests redact: the loop runs in a process of its
    // own, this binary again, with the variables set.
    let exe = std::env::current_exe().unwrap();
    let mut child = std::process::Command::new(exe);
    child
        .args([
            "--exact",
            "secrets::tool_outputs_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .env(ENV_SECRET_NAME, ENV_SECRET);
    for (name, value) in VISIBLE {
        child.env(name, value);
    }
    let out = child.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "the child failed:\n{stdout}\n{stderr}"
    );
}

#[tokio::test]
#[ignore = "run in a process of its own by `tool_outputs_reach_the_model_and_the_store_redacted`"]
async fn tool_outputs_child() {
    assert_eq!(
        std::env::var(CHILD).as_deref(),
        Ok("1"),
        "run by its parent"
    );
    assert!(secrets::register(REGISTERED));
    let dir = std::env::temp_dir().join(format!(
        "harness-it-secrets-{}-{:?}",
        std::process::id(),
        std::time::SystemTime::now()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        format!("api_key = \"{REGISTERED}\"\ntoken = \"{ENV_SECRET}\"\nmodel = \"m-1\"\n"),
    )
    .unwrap();
    let store_file = dir.join("sessions.jsonl");

    let model = Arc::new(ScriptedModel::new([
        Expect::any().reply(ModelResponse::from_tool_calls([
            ToolCall::new("c1", "environ", serde_json::json!({})),
            ToolCall::new("c2", "read_config", serde_json::json!({ "fail": false })),
            ToolCall::new("c3", "read_config", serde_json::json!({ "fail": true })),
        ])),
        Expect::any().reply(ModelResponse::from_text("done")),
    ]));
    let tools = ToolSet::new().with(Environ).with(ReadFile(config));
    let harness = chat(
        Arc::clone(&model),
        tools,
        format!("configured with {REGISTERED} and {ENV_SECRET}"),
        Arc::new(JsonLinesStore::new(&store_file)),
    );
    let agent = create_agent("chat", &harness);
    let out = agent
        .run(Chat {
            messages: vec![Message::user("what is configured?")],
            note: String::new(),
        })
        .await
        .unwrap();
    assert_eq!(out.signal, "done");

    // What the model was sent after the tools ran.
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    let results: Vec<_> = requests[1]
        .messages
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|p| match p {
            ContentPart::ToolResult(r) => Some(r.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 3);
    let environ = &results[0].content;
    assert!(
        environ.contains(&format!("{ENV_SECRET_NAME}=[redacted]")),
        "{environ}"
    );
    for (name, value) in VISIBLE {
        assert!(
            environ.contains(&format!("{name}={value}")),
            "not a secret, not redacted: {name}"
        );
    }
    assert_eq!(
        results[1].content,
        "api_key = \"[redacted]\"\ntoken = \"[redacted]\"\nmodel = \"m-1\"\n"
    );
    assert!(results[2].is_error);
    assert!(
        results[2].content.contains("[redacted]"),
        "{}",
        results[2].content
    );
    let sent = serde_json::to_string(&requests[1]).unwrap();
    assert!(
        !sent.contains(REGISTERED) && !sent.contains(ENV_SECRET),
        "{sent}"
    );

    // What the store was given, byte for byte, and the state read back.
    let written = std::fs::read_to_string(&store_file).unwrap();
    assert!(written.lines().count() >= 4, "{written}");
    assert!(!written.contains(REGISTERED), "{written}");
    assert!(!written.contains(ENV_SECRET), "{written}");
    assert!(written.contains("configured with [redacted] and [redacted]"));
    let back = agent.state_at(&out.session_id, None).await.unwrap();
    assert_eq!(back.note, "configured with [redacted] and [redacted]");
    assert_eq!(back.messages.len(), 4);
    let back = serde_json::to_string(&back).unwrap();
    assert!(!back.contains(REGISTERED) && !back.contains(ENV_SECRET));

    // What a session's head carries besides the state: a `once` result and
    // an interrupt's payload quoting a secret, then a failure quoting one.
    let heads_file = dir.join("heads.jsonl");
    let harness = Harness::<Chat>::builder()
        .step("fetch")
        .run(|cx: Cx<()>| async move {
            let fetched: String = cx
                .once("fetch", async { format!("fetched with {REGISTERED}") })
                .await?;
            let _: String = cx.interrupt(serde_json::json!({ "confirm": fetched }))?;
            Ok(ChatUpdate::new())
        })
        .next("fail")
        .step("fail")
        .run(|_cx: Cx<()>| async move {
            Err::<ChatUpdate, _>(
                std::io::Error::other(format!("upstream said {ENV_SECRET}")).into(),
            )
        })
        .end()
        .start("fetch")
        .store(Arc::new(JsonLinesStore::new(&heads_file)))
        .build()
        .unwrap();
    let agent = create_agent("heads", &harness);
    let paused = agent
        .run(Chat {
            messages: Vec::new(),
            note: String::new(),
        })
        .await
        .unwrap();
    // (The application's own process sees the payload as the step made it;
    // what leaves the process, the store's copy, is redacted.)
    let interrupt = paused.interrupt.expect("the step asks");
    let written = std::fs::read_to_string(&heads_file).unwrap();
    assert!(written.contains("fetched with [redacted]"), "{written}");
    assert!(!written.contains(REGISTERED), "{written}");
    let failed = agent
        .resume(serde_json::json!("yes"), &paused.session_id, &interrupt.id)
        .await
        .unwrap()
        .await;
    assert!(failed.is_err());
    let written = std::fs::read_to_string(&heads_file).unwrap();
    assert!(written.contains("upstream said [redacted]"), "{written}");
    assert!(
        !written.contains(ENV_SECRET) && !written.contains(REGISTERED),
        "{written}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A step's own error (a tool's stderr, say) can quote a secret: the
/// event that reports the failed attempt carries it redacted, as the
/// run's error does.
#[tokio::test]
async fn a_failed_steps_error_is_redacted_in_its_event() {
    const SECRET: &str = "sk-step-error-test-7d1e9a";
    assert!(secrets::register(SECRET));
    let harness = Harness::<Chat>::builder()
        .step("fail")
        .run(|_cx: Cx<()>| async move {
            Err::<ChatUpdate, _>(harness::StepError::msg(format!(
                "git push failed: remote: token {SECRET} refused"
            )))
        })
        .end()
        .start("fail")
        .build()
        .unwrap();
    let agent = create_agent("failing", &harness);
    let run = agent.run(Chat::default());
    let mut events = run.events();
    let error = run.await.unwrap_err();
    assert!(!error.to_string().contains(SECRET), "{error}");
    let mut failed = Vec::new();
    while let Some(event) = events.recv().await {
        if let harness::RunEvent::StepFailed { error, .. } = event {
            failed.push(error);
        }
    }
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(failed[0].contains("git push failed"), "{failed:?}");
    assert!(!failed[0].contains(SECRET), "{failed:?}");
}

/// An error that shows a secret only in its `Debug`, or through its cause.
#[derive(Debug)]
struct Upstream {
    token: String,
    cause: Option<std::io::Error>,
}

impl std::fmt::Display for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the upstream refused the push")
    }
}

impl std::error::Error for Upstream {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause
            .as_ref()
            .map(|c| c as &(dyn std::error::Error + 'static))
    }
}

/// The run's error as a step failing with `error` leaves it.
async fn failed_with(error: fn() -> harness::StepError) -> harness::RunError {
    let harness = Harness::<Chat>::builder()
        .step("fail")
        .run(move |_cx: Cx<()>| async move { Err::<ChatUpdate, _>(error()) })
        .end()
        .start("fail")
        .build()
        .unwrap();
    create_agent("failing", &harness)
        .run(Chat::default())
        .await
        .unwrap_err()
}

/// `main` returning a run's error prints its `Debug`: no secret may be in
/// it, whether the step's error shows it in its message, its `Debug` or a
/// cause. An error with no secret in it is kept as the step returned it.
#[tokio::test]
async fn a_failed_steps_error_keeps_no_secret_in_its_debug() {
    const SECRET: &str = "sk-step-debug-test-3b8e1f";
    assert!(secrets::register(SECRET));
    let cases: [fn() -> harness::StepError; 4] = [
        || harness::StepError::msg(format!("token {SECRET} refused")),
        || {
            harness::StepError::from(Upstream {
                token: SECRET.into(),
                cause: None,
            })
        },
        || {
            harness::StepError::from(Upstream {
                token: "none".into(),
                cause: Some(std::io::Error::other(format!("401 for {SECRET}"))),
            })
        },
        || harness::StepError::from(std::io::Error::other(format!("{SECRET}{SECRET}"))),
    ];
    for (i, error) in cases.into_iter().enumerate() {
        let error = failed_with(error).await;
        for text in [
            error.to_string(),
            format!("{error:?}"),
            format!("{error:#?}"),
        ] {
            assert!(!text.contains(SECRET), "case {i}: {text}");
        }
        // Where the message quoted it, the message says what stood there.
        if i != 1 {
            assert!(
                format!("{error:?}").contains("[redacted]"),
                "case {i}: {error:?}"
            );
        }
    }
    // No secret: the step's own error, whose type a caller may look for.
    let error = failed_with(|| {
        harness::StepError::from(Upstream {
            token: "public".into(),
            cause: None,
        })
    })
    .await;
    let harness::RunError::Step { source, .. } = &error else {
        panic!("{error:?}");
    };
    let upstream = source.downcast_ref::<Upstream>();
    assert_eq!(
        upstream.map(|u| u.token.as_str()),
        Some("public"),
        "{error:?}"
    );
}

/// A fan-out's inputs come from the state, which can quote a secret: each
/// branch runs on its input whole, and the session keeps it redacted, as
/// it keeps the state.
#[tokio::test]
async fn a_fan_outs_inputs_are_kept_redacted() {
    const SECRET: &str = "sk-fan-out-input-4c2d9b1e";
    assert!(secrets::register(SECRET));
    let dir =
        std::env::temp_dir().join(format!("harness-it-fan-out-secrets-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("commits.jsonl");
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let got = Arc::clone(&seen);
    let harness = Harness::<Chat>::builder()
        .step("plan")
        .run(|_cx: Cx<()>| async move { Ok(ChatUpdate::new().note(format!("use {SECRET}"))) })
        .fan_out("each", |chat: &Chat| {
            vec![
                chat.note.clone(),
                format!("{SECRET}{SECRET}"),
                format!("{{\"nested\": [\"{SECRET}\"]}}"),
            ]
        })
        .join("done")
        .step("each")
        .run_each(move |input: String, _: Arc<Chat>, _: Cx<()>| {
            got.lock().unwrap().push(input);
            async move { Ok(ChatUpdate::new()) }
        })
        .writes(Vec::<&str>::new())
        .next("done")
        .step("done")
        .run(|_cx: Cx<()>| async move { Ok(ChatUpdate::new()) })
        .end()
        .start("plan")
        .store(Arc::new(JsonLinesStore::new(&file)))
        .build()
        .unwrap();
    let agent = create_agent("fan-out", &harness);
    agent.run(Chat::default()).await.unwrap();
    let mut seen = seen.lock().unwrap().clone();
    seen.sort();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(seen.iter().all(|s| s.contains(SECRET)), "{seen:?}");
    let written = std::fs::read_to_string(&file).unwrap();
    assert!(written.contains("\"each\""), "{written}");
    assert!(written.contains("[redacted]"), "{written}");
    assert!(!written.contains(SECRET), "{written}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Set in the panicking child only.
const PANIC_CHILD: &str = "HARNESS_IT_PANIC_CHILD";
const PANIC_SECRET: &str = "sk-panicking-3e8d1c0b9a7f";

/// Rust prints a panic's message to standard error before anything catches
/// it: once a secret is registered, a message holding one is printed
/// redacted; other panics are printed as they were.
#[test]
fn a_panic_message_holding_a_secret_is_printed_redacted() {
    for backtrace in ["0", "1"] {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "secrets::panicking_child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(PANIC_CHILD, "1")
            .env("RUST_BACKTRACE", backtrace)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "the child failed:\n{stdout}\n{stderr}"
        );
        assert!(!stderr.contains(PANIC_SECRET), "{stderr}");
        assert!(!stdout.contains(PANIC_SECRET), "{stdout}");
        for said in [
            "boom with [redacted] in the middle",
            "the key [redacted] again",
            "a panic without secrets",
            "before any secret",
        ] {
            assert!(stderr.contains(said), "{said}: {stderr}");
        }
        assert!(
            stderr.contains("panicked at harness/tests/it/secrets.rs:"),
            "{stderr}"
        );
        assert_eq!(
            stderr.contains("stack backtrace:"),
            backtrace == "1",
            "{stderr}"
        );
    }
}

#[test]
#[ignore = "run in a process of its own by `a_panic_message_holding_a_secret_is_printed_redacted`"]
fn panicking_child() {
    assert_eq!(
        std::env::var(PANIC_CHILD).as_deref(),
        Ok("1"),
        "run by its parent"
    );
    let caught = |f: fn()| assert!(std::panic::catch_unwind(f).is_err());
    caught(|| panic!("before any secret"));
    assert!(secrets::register(PANIC_SECRET));
    caught(|| panic!("boom with {PANIC_SECRET} in the middle"));
    // On another thread, and with a formatted payload.
    std::thread::spawn(move || caught(|| panic!("the key {} again", PANIC_SECRET)))
        .join()
        .unwrap();
    caught(|| panic!("a panic without secrets"));
}
