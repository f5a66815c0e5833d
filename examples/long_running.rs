//! A long-running project agent (`harness-recipes`) builds a tiny project —
//! a word-count command — over several sessions in a git repository: the
//! initializer plans it into a feature ledger and makes the first commit;
//! each session orients itself, runs the smoke check, picks one feature,
//! works on it with tools, verifies it, records the result (with a lesson
//! for later sessions) and commits.
//!
//! ```text
//! cargo run -p harness-examples --example long_running
//!     # offline (scripted model), in a new temporary directory
//! cargo run -p harness-examples --example long_running -- --dir /tmp/wc --sessions 1
//! cargo run -p harness-examples --example long_running -- --sessions 1 --turns 6 --seconds 120
//!     # each session's working agent stops after 6 model turns (default 30)
//!     # or 120 s of work, whichever comes first; planning the project may
//!     # take 120 s too
//! cargo run -p harness-examples --example long_running -- --dir /tmp/wc
//!     # a second process goes on with the same project where the first stopped
//! HARNESS_PROVIDER=anthropic cargo run -p harness-examples --example long_running
//! ```
//!
//! The project lives in `DIR/repo` (a git repository: look at `git log`
//! and `.harness/`), its sessions in a sled store in `DIR/store`.

use harness::llm::{Expect, ModelResponse, ScriptedModel, ToolCall, Turn};
use harness_examples::args::{Args, Usage};
use harness_kit::Limits;
use harness_recipes::project::{FeatureStatus, ProjectAgent, ProjectError, SessionEnd};
use harness_stores::SledStore;
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;

const DESCRIPTION: &str = "A word-count command: `sh wc.sh` prints the number of words of its \
standard input, `sh wc.sh -l` the number of lines and `sh wc.sh -c` the number of bytes, as bare numbers.";

type Error = Box<dyn std::error::Error>;

/// The longest `--seconds`: a year.
const MAX_SECONDS: u64 = 365 * 24 * 3600;

const USAGE: Usage = Usage {
    synopsis: "usage: long_running [--dir DIR] [--sessions N] [--turns N] [--seconds N]",
    options: "  --dir DIR      the project's directory: its repository in DIR/repo, its sessions
                 in DIR/store (default: a new temporary directory); an existing
                 project goes on where it stopped
  --sessions N   at most N working sessions in this process (default 10; 0: none)
  --turns N      each session's agent stops after N model turns (default 30)
  --seconds N    each session's agent stops after N s of work; planning the
                 project may take N s too",
};

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), Error> {
    let (mut dir, mut sessions, mut turns, mut seconds) = (None, 10u32, None, None);
    let mut args = Args::from_env(USAGE);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--dir" => dir = Some(PathBuf::from(args.value("--dir"))),
            "--sessions" => {
                sessions = args.number("--sessions", "a whole number ≥ 0", |_: &u32| true);
            }
            "--turns" => {
                turns = Some(args.number("--turns", "a whole number ≥ 1", |n: &u32| *n >= 1));
            }
            "--seconds" => {
                seconds = Some(args.number(
                    "--seconds",
                    &format!("a whole number of seconds from 1 to {MAX_SECONDS}"),
                    |n: &u64| (1..=MAX_SECONDS).contains(n),
                ));
            }
            other => args.unknown(other),
        }
    }
    let dir = dir.unwrap_or_else(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        std::env::temp_dir().join(format!(
            "harness-long-running-{}-{nanos}",
            std::process::id()
        ))
    });
    let repo = dir.join("repo");
    std::fs::create_dir_all(&repo).map_err(|e| {
        format!(
            "--dir {}: cannot create the project's repository directory {}: {e}",
            dir.display(),
            repo.display()
        )
    })?;
    let store = Arc::new(
        SledStore::open(dir.join("store"))
            .map_err(|e| format!("--dir {}: cannot open its store: {e}", dir.display()))?,
    );
    println!("project directory: {}", repo.display());

    // The offline script, from where the project stands (a second process
    // goes on after the sessions the first one finished).
    let probe = ProjectAgent::builder("wc", &repo, store.clone(), Arc::new(ScriptedModel::new([])))
        .build()?;
    let done = match probe.status().await {
        Ok(status) => Some(status.sessions),
        Err(ProjectError::NotInitialized { .. }) => None,
        Err(e) => return Err(e.into()),
    };
    drop(probe);
    // HARNESS_PROVIDER=openai|anthropic|gemini runs the same project on a real model.
    let model = harness_examples::providers_select::model_from_env(script(done))?;
    let mut builder = ProjectAgent::builder("wc", &repo, store, model);
    if turns.is_some() || seconds.is_some() {
        let mut limits = Limits::none();
        if let Some(turns) = turns {
            limits = limits.turns(turns);
        }
        if let Some(seconds) = seconds {
            let bound = std::time::Duration::from_secs(seconds);
            limits = limits.time(bound);
            // The planning too: a model that rambles is cut there as well.
            builder = builder.init_deadline(bound);
        }
        builder = builder.limits(limits);
    }
    let project = builder.build()?;

    if done.is_none() {
        let commit = project.initialize(DESCRIPTION).await?;
        let ledger = project.env().head_ledger().await?;
        println!(
            "initialized: {} features, commit {}",
            ledger.features.len(),
            short(&commit)
        );
        for f in &ledger.features {
            println!(
                "  feature {} ({}): {}",
                f.spec.id, f.spec.category, f.spec.description
            );
        }
    }

    for _ in 0..sessions {
        match project.run_session().await? {
            SessionEnd::Recorded(entry) => println!(
                "session {}: {} → {} (commit {})",
                entry.number,
                entry.feature.as_deref().unwrap_or("-"),
                entry.status.map_or("-".into(), |s| s.to_string()),
                entry.commit.as_deref().map_or("-", short)
            ),
            SessionEnd::Complete => {
                println!("every feature passes");
                break;
            }
            SessionEnd::Stopped => break,
        }
    }
    let status = project.status().await?;
    println!(
        "passing: {} of {}",
        status.count(FeatureStatus::Passing),
        status.features.len()
    );
    println!("\n{}", project.report_markdown().await?);
    println!(
        "continue in another process:\n  cargo run -p harness-examples --example long_running -- --dir {}",
        shell_quote(&dir.to_string_lossy())
    );
    Ok(())
}

/// `word` as one word of a POSIX shell command line: as it is if it holds
/// only characters no shell treats specially, else in single quotes, where
/// every character is literal (`$`, `` ` ``, `\`, spaces, newlines) but the
/// single quote itself, which is written `'\''` (close, an escaped quote,
/// reopen).
fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:@%+,".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

fn short(commit: &str) -> &str {
    &commit[..commit.len().min(10)]
}

/// The scripted model's turns: the initializer's plan, then four turns a
/// session (pick, write wc.sh, answer, reflect), from after the `done`
/// sessions (`None`: the project is not initialized).
fn script(done: Option<usize>) -> ScriptedModel {
    let text = |value: serde_json::Value| ModelResponse::from_text(value.to_string());
    let check = |description: &str, command: &str, expect: &str| json!({ "description": description, "command": command, "expect_stdout": expect });
    let plan = Expect::any().reply(text(json!({
        "features": [
            { "id": "count-words", "category": "cli", "priority": 1,
              "description": "`sh wc.sh` prints the number of words of its input",
              "verification": [check("three words", "echo 'a b c' | sh wc.sh", "3")] },
            { "id": "count-lines", "category": "cli", "priority": 2,
              "description": "`sh wc.sh -l` prints the number of lines of its input",
              "verification": [check("two lines", "printf 'a\\nb\\n' | sh wc.sh -l", "2")] },
            { "id": "count-bytes", "category": "cli", "priority": 3,
              "description": "`sh wc.sh -c` prints the number of bytes of its input",
              "verification": [check("five bytes", "printf hello | sh wc.sh -c", "5")] }
        ],
        "smoke": [{ "description": "the ledger is there", "command": "test -f .harness/ledger.json" }]
    })));
    let session = |feature: &str, script: &str, lesson: &str| -> [Turn; 4] {
        [
            Expect::any().reply(text(json!({
                "feature": feature,
                "plan": format!("extend wc.sh for {feature}")
            }))),
            Expect::any().reply(ModelResponse::from_tool_call(ToolCall::new(
                format!("write-{feature}"),
                "write_file",
                json!({ "path": "wc.sh", "content": script }),
            ))),
            Expect::any().reply(ModelResponse::from_text(format!(
                "wc.sh now handles {feature}"
            ))),
            Expect::any().reply(text(json!({
                "context": format!("wc.sh before {feature}"),
                "decision": "wrap the system's wc and strip its padding",
                "reasoning": "wc is on every system; tr removes the spaces some wc versions print",
                "lesson": lesson
            }))),
        ]
    };
    let sessions = [
        session(
            "count-words",
            "wc -w | tr -d ' '\n",
            "pipe through tr -d ' ': wc pads its numbers",
        ),
        session(
            "count-lines",
            "case \"$1\" in -l) wc -l ;; *) wc -w ;; esac | tr -d ' '\n",
            "one case over the flag keeps every mode in one script",
        ),
        session(
            "count-bytes",
            "case \"$1\" in -l) wc -l ;; -c) wc -c ;; *) wc -w ;; esac | tr -d ' '\n",
            "extend the case; the smoke check guards the rest",
        ),
    ];
    let turns: Vec<Turn> = match done {
        None => std::iter::once(plan)
            .chain(sessions.into_iter().flatten())
            .collect(),
        Some(done) => sessions.into_iter().skip(done).flatten().collect(),
    };
    ScriptedModel::new(turns)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

    use super::shell_quote;

    /// Each word, quoted, is read back by `sh` as exactly itself.
    #[test]
    fn a_quoted_word_is_read_back_by_the_shell_as_itself() {
        for word in [
            "/tmp/wc",
            "/tmp/my project/wc",
            "/tmp/it's/wc",
            "/tmp/'quoted'/''",
            "/tmp/\"double\"/wc",
            "/tmp/$HOME/${PATH}/$(touch pwned)/`id`",
            "/tmp/new\nline/wc",
            "/tmp/semi;colon & amp | pipe > out < in * ? [a] ~ # !",
            "/tmp/back\\slash\\n",
            "/tmp/tab\there",
            "/tmp/ünïcødé/wc",
            "-starts-with-dash",
            "",
        ] {
            let quoted = shell_quote(word);
            let out = std::process::Command::new("sh")
                .args(["-c", &format!("printf '%s' {quoted}")])
                .current_dir(std::env::temp_dir())
                .output()
                .unwrap();
            assert!(out.status.success(), "{word:?} as {quoted}");
            assert_eq!(String::from_utf8(out.stdout).unwrap(), word, "{quoted}");
        }
        // Plain words stay as they are, for reading.
        assert_eq!(shell_quote("/tmp/wc-1.2_x"), "/tmp/wc-1.2_x");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
    }
}
