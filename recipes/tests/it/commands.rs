//! The commands a model writes (the `run` tool, verification steps) run
//! without the host's secrets and without outliving their time.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use harness_recipes::project::{PASS_ENV, VerificationStep, run_steps};
use std::path::Path;
use std::time::{Duration, Instant};

async fn run(dir: &Path, command: &str, timeout: Duration) -> (bool, String) {
    let step = VerificationStep::new("a command", command);
    let out = run_steps(dir, &[step], timeout).await.remove(0);
    (out.passed, out.output)
}

#[tokio::test]
async fn a_command_sees_neither_the_hosts_environment_nor_its_memory() {
    let dir = tempfile::tempdir().unwrap();
    // Variables the host has and a command must not see: cargo sets these
    // for a test run.
    let secrets: Vec<(String, String)> = std::env::vars()
        .filter(|(k, v)| !PASS_ENV.contains(&k.as_str()) && v.len() >= 4)
        .collect();
    assert!(
        secrets.iter().any(|(k, _)| k == "CARGO_MANIFEST_DIR"),
        "the test needs host variables to hide"
    );
    for command in [
        "env",
        "set",
        "printenv CARGO_MANIFEST_DIR; echo ${CARGO_PKG_NAME:-unset}",
        "cat /proc/$PPID/environ | tr '\\0' '\\n'",
        "cat /proc/$PPID/cmdline /proc/$PPID/mem 2>&1 | head -c 4096",
        "for p in /proc/[0-9]*; do cat $p/environ 2>/dev/null | tr '\\0' '\\n'; done",
    ] {
        let (_, output) = run(dir.path(), command, Duration::from_secs(20)).await;
        for (k, v) in &secrets {
            assert!(
                !output.contains(&format!("{k}={v}")),
                "`{command}` showed {k}: {output}"
            );
        }
    }
    // What a shell needs is still there.
    let (passed, output) = run(
        dir.path(),
        "echo $PATH; command -v sh",
        Duration::from_secs(20),
    )
    .await;
    assert!(passed, "{output}");
    assert!(output.contains("/bin"), "{output}");
}

/// Whether process `pid` is gone (or a zombie waiting to be reaped).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

#[tokio::test]
async fn a_command_that_runs_out_of_time_is_killed_with_what_it_started() {
    let dir = tempfile::tempdir().unwrap();
    for (command, times_out) in [
        // Waits on its background child: runs out of time.
        ("sleep 60 & echo $! > bg.pid; wait", true),
        // Blocks in the foreground after starting one in the background.
        ("sleep 60 & echo $! > bg.pid; sleep 60", true),
        // Ends at once, leaving one behind.
        ("sleep 60 & echo $! > bg.pid; echo left", false),
    ] {
        // A limit the command that ends at once meets on a loaded machine
        // too; the file of the last case's child is gone first.
        let _ = std::fs::remove_file(dir.path().join("bg.pid"));
        let started = Instant::now();
        let (passed, output) = run(dir.path(), command, Duration::from_secs(3)).await;
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "`{command}` was not stopped"
        );
        assert_eq!(
            output.contains("timed out after 3 s"),
            times_out,
            "`{command}`: {output}"
        );
        assert_eq!(passed, !times_out, "`{command}`: {output}");
        let pid: u32 = std::fs::read_to_string(dir.path().join("bg.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !gone(pid) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(gone(pid), "`{command}` left process {pid} running");
    }
}

#[tokio::test]
async fn read_file_reads_the_end_of_a_regular_file_and_refuses_endless_ones() {
    use harness::llm::ToolCall;
    use harness_recipes::project::workspace_tools;
    let dir = tempfile::tempdir().unwrap();
    let tools = workspace_tools(dir.path(), Duration::from_secs(20));
    let read = |path: &str| {
        let call = ToolCall::new("c1", "read_file", serde_json::json!({ "path": path }));
        let tools = &tools;
        async move { serde_json::to_string(&tools.dispatch_or_report(&call).await).unwrap() }
    };
    // A big file: its end, quickly.
    let big: String = (0..200_000).map(|i| format!("line {i}\n")).collect();
    std::fs::write(dir.path().join("big.txt"), &big).unwrap();
    let out = read("big.txt").await;
    assert!(
        out.contains("line 199999"),
        "{}",
        &out[..200.min(out.len())]
    );
    assert!(!out.contains("line 1000\\n"), "only the end is read");
    // Links a command could make to endless or special files, a directory,
    // a path outside: refused, at once.
    for (name, target, refusal) in [
        ("zero", "/dev/zero", "leads outside"),
        ("urandom", "/dev/urandom", "leads outside"),
        ("environ", "/proc/self/environ", "leads outside"),
        ("here", ".", "is a directory, not a regular file"),
    ] {
        std::os::unix::fs::symlink(target, dir.path().join(name)).unwrap();
        let started = Instant::now();
        let out = read(name).await;
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(out.contains(refusal), "{name}: {out}");
    }
    for path in ["../x", "/etc/passwd", "a/../../b"] {
        let out = read(path).await;
        assert!(out.contains("leads outside"), "{path}: {out}");
    }
}

/// The model makes links and hard links with its own commands, then reads
/// and writes through them: nothing outside the project is read or
/// written, and the host's environment never comes back.
#[tokio::test]
async fn links_the_models_commands_make_do_not_lead_the_file_tools_out() {
    use harness::llm::ToolCall;
    use harness_recipes::project::workspace_tools;
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "OUTSIDE-SECRET").unwrap();
    let tools = workspace_tools(dir.path(), Duration::from_secs(20));
    let call = |name: &str, args: serde_json::Value| {
        let call = ToolCall::new("c1", name, args);
        let tools = &tools;
        async move { tools.dispatch_or_report(&call).await }
    };
    let secret = outside.path().join("secret.txt");
    let out_dir = outside.path().display().to_string();
    for command in [
        "ln -s /proc/self/environ env.txt".to_owned(),
        "ln -s /proc/self/cwd cwd".to_owned(),
        "ln -s .. up".to_owned(),
        format!("ln -s {out_dir} out"),
        format!("ln -s {} leak.txt", secret.display()),
        format!("ln {} hard.txt", secret.display()),
        "mkdir -p a/b && ln -s ../../.. a/b/top".to_owned(),
    ] {
        let out = call("run", serde_json::json!({ "command": command })).await;
        assert!(!out.is_error, "{command}: {}", out.content);
    }
    for path in [
        "env.txt",
        "cwd/environ",
        "up/secret.txt",
        "out/secret.txt",
        "leak.txt",
        "hard.txt",
        "a/b/top/x",
    ] {
        let out = call("read_file", serde_json::json!({ "path": path })).await;
        assert!(out.is_error, "{path}: {}", out.content);
        assert!(
            !out.content.contains("OUTSIDE-SECRET"),
            "{path}: {}",
            out.content
        );
        assert!(!out.content.contains("PATH="), "{path}: {}", out.content);
    }
    for path in ["out", "up", "a/b/top"] {
        let out = call("list_dir", serde_json::json!({ "path": path })).await;
        assert!(
            out.is_error && out.content.contains("leads outside"),
            "{path}: {}",
            out.content
        );
    }
    // Writes through the links: the outside file keeps its content, and
    // nothing is created outside.
    for path in ["out/new.txt", "leak.txt", "hard.txt", "up/x.txt"] {
        let _ = call(
            "write_file",
            serde_json::json!({ "path": path, "content": "overwritten" }),
        )
        .await;
    }
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "OUTSIDE-SECRET");
    assert!(!outside.path().join("new.txt").exists());
    assert!(!outside.path().join("x.txt").exists());
}

#[tokio::test]
async fn the_hosts_git_runs_no_hook_and_gives_a_filter_none_of_the_hosts_secrets() {
    use harness_recipes::project::Git;
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let git = Git::new(dir.path());
    git.init().await.unwrap();
    // What a model's commands could leave in the repository: hooks, and a
    // filter driver that every `git add` runs.
    for hook in ["pre-commit", "post-commit", "commit-msg"] {
        let path = dir.path().join(".git/hooks").join(hook);
        std::fs::write(&path, format!("#!/bin/sh\nenv > {hook}.env\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let config = dir.path().join(".git/config");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("[filter \"spy\"]\n\tclean = \"sh -c 'env > filter.env; cat'\"\n");
    std::fs::write(&config, text).unwrap();
    std::fs::write(dir.path().join(".gitattributes"), "*.txt filter=spy\n").unwrap();
    std::fs::write(dir.path().join("a.txt"), "words\n").unwrap();
    git.commit_paths("work", &[".gitattributes".into(), "a.txt".into()])
        .await
        .unwrap();

    for hook in ["pre-commit", "post-commit", "commit-msg"] {
        assert!(
            !dir.path().join(format!("{hook}.env")).exists(),
            "the {hook} hook ran"
        );
    }
    let seen = std::fs::read_to_string(dir.path().join("filter.env")).expect("the filter ran");
    assert!(seen.contains("PATH="), "{seen}");
    for (k, v) in std::env::vars().filter(|(k, v)| !PASS_ENV.contains(&k.as_str()) && v.len() >= 4)
    {
        assert!(!seen.contains(&format!("{k}={v}")), "the filter saw {k}");
    }
}

/// A line `key:  N kB` of `/proc/self/status`, in bytes.
fn status_bytes(key: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with(key)).unwrap();
    let kb: u64 = line[key.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap();
    kb * 1024
}

/// A command (the `run` tool's, or a verification step) that writes
/// hundreds of megabytes costs the host the output it keeps, not what it
/// wrote; the end of the output is what is kept.
#[tokio::test]
async fn a_commands_output_costs_the_host_its_bound_not_its_size() {
    let dir = tempfile::tempdir().unwrap();
    const BIG: u64 = 600 << 20;
    for (command, end) in [
        (format!("head -c {BIG} /dev/zero; echo OUT-END"), "OUT-END"),
        (
            format!("head -c {BIG} /dev/zero | tr '\\0' x >&2; echo ERR-END >&2"),
            "ERR-END",
        ),
        (
            format!("head -c {BIG} /dev/zero | tr '\\0' 'é'; echo UTF-END"),
            "UTF-END",
        ),
    ] {
        let before = status_bytes("VmHWM:").max(status_bytes("VmRSS:"));
        let (passed, output) = run(dir.path(), &command, Duration::from_secs(60)).await;
        let grew = status_bytes("VmHWM:").saturating_sub(before);
        assert!(grew < 100 << 20, "`{command}` took {} MB", grew >> 20);
        assert!(passed, "`{command}`: {}", &output[output.len() - 200..]);
        assert!(output.starts_with("[…]"), "`{command}`");
        assert!(output.trim_end().ends_with(end), "`{command}`");
        assert!(
            output.len() <= 4 * 1024 + 8,
            "`{command}`: {}",
            output.len()
        );
    }
}

/// `expect_stdout` is looked for in all of the output, not only in the end
/// that is kept.
#[tokio::test]
async fn expected_text_is_found_anywhere_in_a_long_output() {
    let dir = tempfile::tempdir().unwrap();
    for (command, expect, passes) in [
        (
            "echo needle-here; head -c 10000000 /dev/zero",
            "needle-here",
            true,
        ),
        (
            "head -c 10000000 /dev/zero; echo needle-here",
            "needle-here",
            true,
        ),
        (
            "head -c 100000 /dev/zero | tr '\\0' n; echo",
            "needle-here",
            false,
        ),
        (
            "echo needle-here >&2; head -c 100000 /dev/zero",
            "needle-here",
            false,
        ),
        ("echo short", "short", true),
        ("echo short", "", true),
    ] {
        let step = VerificationStep::new("a command", command).expecting(expect);
        let out = run_steps(dir.path(), &[step], Duration::from_secs(30))
            .await
            .remove(0);
        assert_eq!(out.passed, passes, "`{command}`: {}", out.output);
        assert_eq!(out.exit_code, Some(0), "`{command}`");
        assert_eq!(
            out.output.contains("[expected the output to contain"),
            !passes,
            "`{command}`"
        );
    }
}
