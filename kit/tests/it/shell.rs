//! Shell commands as argv: what is approved is exactly what runs, and
//! "always allow" covers that command line and nothing else.

use crate::support::agent;
use harness::llm::{Expect, ModelResponse, ToolCall, ToolSet};
use harness_kit::shell::{self, CommandLine, CommandLineError, Shell};
use harness_kit::{AgentChat, AgentLoop, ApprovalRequest, Decisions};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

fn argv(line: &str) -> Vec<String> {
    CommandLine::parse(line)
        .unwrap_or_else(|e| panic!("{line:?} parses: {e}"))
        .argv()
        .to_vec()
}

#[test]
fn words_quotes_and_escapes_become_argv() {
    assert_eq!(argv("wc -l README.md"), ["wc", "-l", "README.md"]);
    assert_eq!(argv("  wc\t-l   README.md  "), ["wc", "-l", "README.md"]);
    assert_eq!(argv("grep 'a b' \"c d\""), ["grep", "a b", "c d"]);
    assert_eq!(argv("echo 'it'\\''s'"), ["echo", "it's"]);
    assert_eq!(
        argv(r#"echo "say \"hi\" \$HOME""#),
        ["echo", r#"say "hi" $HOME"#]
    );
    assert_eq!(argv(r"echo a\ b"), ["echo", "a b"]);
    assert_eq!(argv("echo ''"), ["echo", ""]);
    assert_eq!(argv("echo 'a;b|c&d>e$f`g'"), ["echo", "a;b|c&d>e$f`g"]);
    assert_eq!(argv("git log --format=%H"), ["git", "log", "--format=%H"]);
}

#[test]
fn everything_but_one_plain_command_is_refused() {
    for line in [
        "wc -l README.md; touch PWNED",
        "wc -l README.md;touch PWNED",
        "ls && rm -rf x",
        "ls || rm -rf x",
        "ls | sh",
        "ls & rm x",
        "cat README.md > /etc/passwd",
        "cat < /etc/shadow",
        "wc -l 2>&1",
        "echo $(touch PWNED)",
        "echo `touch PWNED`",
        "echo \"$(touch PWNED)\"",
        "echo \"`touch PWNED`\"",
        "echo $HOME",
        "echo ${HOME}",
        "cat ~/.ssh/id_rsa",
        "ls\ntouch PWNED",
        "ls\rtouch PWNED",
        "(touch PWNED)",
        "ls *.rs",
        "ls # comment",
    ] {
        match CommandLine::parse(line) {
            Err(CommandLineError::Operator { at, .. }) => assert!(at >= 1, "{line:?}"),
            other => panic!("{line:?} should be refused, got {other:?}"),
        }
    }
    assert_eq!(CommandLine::parse(""), Err(CommandLineError::Empty));
    assert_eq!(CommandLine::parse("   "), Err(CommandLineError::Empty));
    assert!(matches!(
        CommandLine::parse("echo 'open"),
        Err(CommandLineError::Unclosed {
            quote: "single",
            ..
        })
    ));
    assert!(matches!(
        CommandLine::parse("echo \"open"),
        Err(CommandLineError::Unclosed {
            quote: "double",
            ..
        })
    ));
    assert_eq!(
        CommandLine::parse("echo \\"),
        Err(CommandLineError::TrailingBackslash)
    );
}

#[test]
fn the_allow_key_is_the_whole_argv_quoted_back() {
    let key = |line: &str| shell::allow_key(&json!({ "command": line }));
    assert_eq!(key("wc -l README.md"), "shell: wc -l README.md");
    // The same argv, spelt otherwise: the same key.
    assert_eq!(key("wc  -l 'README.md'"), "shell: wc -l README.md");
    assert_eq!(key("grep -c 'an agent' x"), "shell: grep -c 'an agent' x");
    // Other arguments, another key; an operator never shares a key with
    // the command before it.
    assert_ne!(key("wc -w README.md"), key("wc -l README.md"));
    assert_ne!(key("wc -l README.md; touch PWNED"), key("wc -l README.md"));
    assert_ne!(key("wc -l README.md;"), key("wc -l README.md"));
    // Quoting round-trips: the key parses back to the same argv.
    for line in ["echo 'it'\\''s'", "echo 'a b' c", "printf '%s\\n' x"] {
        let shown = key(line);
        let back = shown.trim_start_matches("shell: ");
        assert_eq!(argv(back), argv(line), "{line}");
    }
}

async fn until_asked(
    run: &mut harness::Run<AgentChat, harness_kit::ModelDeps>,
) -> (harness::InterruptId, ApprovalRequest) {
    let paused = run
        .outcome()
        .await
        .unwrap_or_else(|e| panic!("the run pauses: {e}"));
    let interrupt = paused
        .interrupt
        .unwrap_or_else(|| panic!("the run asks, but ended with {}", paused.signal));
    let request = serde_json::from_value(interrupt.payload.clone())
        .unwrap_or_else(|e| panic!("an approval request: {e}"));
    (interrupt.id, request)
}

/// "Always" for `wc -l README.md` lets that command line run again
/// unasked, and nothing else: not another argument, not the same command
/// with `; touch PWNED` after it (refused without asking, and never run).
#[tokio::test]
async fn always_allows_exactly_the_command_line_approved() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(dir.path().join("README.md"), "one\ntwo\n").unwrap_or_else(|e| panic!("{e}"));
    let call = |id: &str, command: &str| {
        ModelResponse::from_tool_call(ToolCall::new(id, "shell", json!({ "command": command })))
    };
    let model = Arc::new(harness::llm::ScriptedModel::new([
        Expect::any().reply(call("c1", "wc -l README.md")),
        Expect::any().reply(call("c2", "wc -l README.md; touch PWNED")),
        Expect::any().reply(call("c3", "wc  -l  'README.md'")),
        Expect::any().reply(call("c4", "wc -w README.md")),
        Expect::any().reply(ModelResponse::from_text("counted")),
    ]));
    let tools = ToolSet::new().with(Shell::new(dir.path(), Duration::from_secs(30)));
    let recipe = AgentLoop::new(tools).policy("shell", shell::policy());
    let agent = agent(recipe, model.clone());
    let mut run = agent.run(AgentChat::with_task("count"));
    let (id, request) = until_asked(&mut run).await;
    assert_eq!(request.calls[0].allow_key, "shell: wc -l README.md");
    run.resume(
        serde_json::to_value(Decisions::new().always_allow("c1")).unwrap_or_default(),
        &id,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    // c2 is refused by the policy, c3 runs unasked: the next question is c4.
    let (id, request) = until_asked(&mut run).await;
    assert_eq!(request.calls.len(), 1);
    assert_eq!(request.calls[0].call_id, "c4");
    assert_eq!(request.calls[0].allow_key, "shell: wc -w README.md");
    run.resume(
        serde_json::to_value(Decisions::new().reject("c4", "enough")).unwrap_or_default(),
        &id,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let outcome = run.outcome().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(outcome.signal.as_str(), "answered");
    assert!(
        !dir.path().join("PWNED").exists(),
        "the chained command ran"
    );
    let requests = model.requests();
    let result_of = |n: usize, id: &str| {
        requests[n]
            .messages
            .iter()
            .flat_map(|m| m.content.iter())
            .find_map(|p| match p {
                harness::llm::ContentPart::ToolResult(r) if r.call_id == id => Some(r),
                _ => None,
            })
            .map(|r| (r.is_error, r.content.clone()))
            .unwrap_or_else(|| panic!("a result for {id}"))
    };
    assert_eq!(result_of(1, "c1"), (false, "2 README.md\n".to_owned()));
    let (refused, why) = result_of(2, "c2");
    assert!(refused && why.contains("`;`"), "{why}");
    assert_eq!(result_of(3, "c3"), (false, "2 README.md\n".to_owned()));
}

#[tokio::test]
async fn the_shell_tool_runs_argv_without_a_shell_or_the_hosts_secrets() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let tools = ToolSet::new().with(Shell::new(dir.path(), Duration::from_secs(5)));
    let run = |command: &str| {
        let call = ToolCall::new("c", "shell", json!({ "command": command }));
        let tools = tools.clone();
        async move { tools.dispatch_or_report(&call).await }
    };
    // An argument with shell syntax in it is one literal argument.
    let out = run("echo 'a;b' '$(x)'").await;
    assert_eq!(out.content, "a;b $(x)\n");
    // The environment is cleared but for PASS_ENV: a variable such as an
    // API key is not there (a process-wide variable the test sets can be
    // seen by other tests, so a fresh name).
    let out = run("env").await;
    assert!(!out.is_error);
    for line in out.content.lines().filter(|l| !l.starts_with('[')) {
        let name = line.split('=').next().unwrap_or("");
        assert!(
            shell::PASS_ENV.contains(&name),
            "{name} leaked into the command"
        );
    }
    // The host's own environment cannot be read through /proc either: the
    // host is made non-dumpable before the first command.
    let out = run(&format!("cat /proc/{}/environ", std::process::id())).await;
    assert!(out.is_error, "{}", out.content);
    assert!(!out.content.contains("PATH="), "{}", out.content);
    // Output is bounded.
    let small = ToolSet::new().with(Shell::new(dir.path(), Duration::from_secs(5)).max_output(10));
    let out = small
        .dispatch_or_report(&ToolCall::new(
            "c",
            "shell",
            json!({ "command": "printf 0123456789abcdef" }),
        ))
        .await;
    assert_eq!(out.content, "0123456789\n[cut: the command wrote 16 bytes]");
    // A timeout stops the command.
    let slow = ToolSet::new().with(Shell::new(dir.path(), Duration::from_millis(200)));
    let out = slow
        .dispatch_or_report(&ToolCall::new(
            "c",
            "shell",
            json!({ "command": "sleep 30" }),
        ))
        .await;
    assert!(
        out.is_error && out.content.contains("did not finish"),
        "{}",
        out.content
    );
}

/// Whether process `pid` has ended (gone, or a zombie left to its new
/// parent), waiting up to 5 s for it.
#[cfg(target_os = "linux")]
async fn ended(pid: &str) -> bool {
    for _ in 0..50 {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => return true,
            Ok(stat)
                if stat
                    .rsplit(')')
                    .next()
                    .is_some_and(|rest| rest.trim_start().starts_with('Z')) =>
            {
                return true;
            }
            Ok(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    false
}

/// What a command starts in the background ends with it: when the command
/// ends (its output is there at once, not after the timeout), when its
/// time is up, and when the call is dropped while it runs.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn what_a_command_starts_in_the_background_ends_with_it() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let pid = |name: &str| {
        std::fs::read_to_string(dir.path().join(name))
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .trim()
            .to_owned()
    };
    // The command ends: its output, no timeout, the background gone.
    let patient = ToolSet::new().with(Shell::new(dir.path(), Duration::from_secs(120)));
    let quick = [
        "sh -c 'sleep 300 & echo $! > p1; echo started'",
        "sh -c '(sleep 300; echo late) & echo $! > p2; echo started'",
        "sh -c 'sh -c \"sleep 300\" & echo $! > p3; echo started; exit 3'",
    ];
    for (i, command) in quick.iter().enumerate() {
        let out = patient
            .dispatch_or_report(&ToolCall::new("c", "shell", json!({ "command": command })))
            .await;
        assert!(
            out.content.contains("started"),
            "{command}: {}",
            out.content
        );
        assert!(
            !out.content.contains("did not finish"),
            "{command}: {}",
            out.content
        );
        assert_eq!(out.is_error, i == 2, "{command}: {}", out.content);
        let p = pid(&format!("p{}", i + 1));
        assert!(ended(&p).await, "{command}: {p} still runs");
    }
    // Its time is up.
    // (Time enough to write the pid on a loaded machine.)
    let slow = ToolSet::new().with(Shell::new(dir.path(), Duration::from_secs(3)));
    let out = slow
        .dispatch_or_report(&ToolCall::new(
            "c",
            "shell",
            json!({ "command": "sh -c 'sleep 300 & echo $! > p4; sleep 300'" }),
        ))
        .await;
    assert!(
        out.is_error && out.content.contains("did not finish"),
        "{}",
        out.content
    );
    assert!(
        ended(&pid("p4")).await,
        "the background of a stopped command still runs"
    );
    // The call is dropped while the command runs: once the background
    // process has started (its pid written), the call's task is aborted.
    let call = ToolCall::new(
        "c",
        "shell",
        json!({ "command": "sh -c 'sleep 300 & echo $! > p5.tmp; mv p5.tmp p5; sleep 300'" }),
    );
    let running = tokio::spawn(async move { patient.dispatch_or_report(&call).await });
    for _ in 0..300 {
        if dir.path().join("p5").exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!running.is_finished(), "the call ended on its own");
    running.abort();
    assert!(running.await.is_err_and(|e| e.is_cancelled()));
    assert!(
        ended(&pid("p5")).await,
        "the background of a dropped call still runs"
    );
}

/// The peak resident memory of this process (Linux's `VmHWM`), in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

#[tokio::test]
async fn a_command_s_output_costs_the_host_its_bound_not_its_size() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let tools =
        ToolSet::new().with(Shell::new(dir.path(), Duration::from_secs(60)).max_output(1000));
    const SIZE: u64 = 512 << 20;
    let before = peak_rss();
    let mut outs = Vec::new();
    for (command, is_error) in [
        // On standard output, with success.
        (format!("head -c {SIZE} /dev/zero"), false),
        // On standard output, then a failure.
        (format!("head -c {SIZE} /dev/zero /nonexistent-file"), true),
        // On standard error.
        (
            format!(
                "dd if=/dev/zero of=/dev/stderr bs=1M count={} status=none",
                SIZE >> 20
            ),
            false,
        ),
        // In small lines rather than one block.
        (format!("seq {}", SIZE / 10), false),
    ] {
        let out = tools
            .dispatch_or_report(&ToolCall::new("c", "shell", json!({ "command": command })))
            .await;
        outs.push((command, is_error, out));
    }
    // Each command wrote at least 512 MiB; reading it all (as before) took
    // at least that much memory, twice over for the text.
    let grown = peak_rss().saturating_sub(before);
    assert!(
        grown < 128 << 20,
        "the peak memory grew by {} MiB",
        grown >> 20
    );
    for (command, is_error, out) in outs {
        assert_eq!(out.is_error, is_error, "{command}: {}", out.content);
        assert!(
            out.content.len() < 1200,
            "{command}: {} bytes",
            out.content.len()
        );
        if command.starts_with("dd") {
            // Its errors, on a success, are not shown: nothing to cut.
            assert_eq!(out.content, "", "{command}");
        } else {
            assert!(
                out.content.contains("[cut: the command wrote"),
                "{command}: {}",
                out.content
            );
        }
    }
}

#[tokio::test]
async fn a_secret_at_the_cut_is_redacted_before_the_output_is_cut() {
    let secret = "shell-straddle-secret-5d8e1f0a7b9c2d4e";
    assert!(harness::secrets::register(secret));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let max = 200;
    let tools =
        ToolSet::new().with(Shell::new(dir.path(), Duration::from_secs(10)).max_output(max));
    // The secret starting before the cut, across it and just after it, on
    // standard output and in a failure's message.
    // (`ls` quotes its argument after about 20 bytes of its own.)
    for start in (max - 45..=max + 5).step_by(2) {
        for fails in [false, true] {
            let pad = "p".repeat(start);
            let command = if fails {
                format!("ls {pad}{secret}")
            } else {
                format!("printf %s {pad}{secret}")
            };
            let out = tools
                .dispatch_or_report(&ToolCall::new("c", "shell", json!({ "command": command })))
                .await;
            assert_eq!(out.is_error, fails, "{}", out.content);
            // No 8 bytes of it in a row (cut first, then redacted, its
            // first part was left whole).
            for window in secret.as_bytes().windows(8) {
                let part = std::str::from_utf8(window).unwrap_or_default();
                assert!(
                    !out.content.contains(part),
                    "start {start}, fails {fails}: {:?} has {part:?}",
                    out.content
                );
            }
        }
    }
}
