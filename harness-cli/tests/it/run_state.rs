//! `harness run`'s notebook directory (needs `python3`): a script of any
//! name gets a directory of its own under `.harness/code/`; `--fresh`
//! deletes only what harness wrote there and refuses when anything else is
//! there; two runs on one directory do not interleave.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::workdir;
use serde_json::Value;

/// `harness run --quiet ARGS…` in `cwd`.
fn harness_run(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_harness"))
        .current_dir(cwd)
        .arg("run")
        .arg("--quiet")
        .args(args)
        .output()
        .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn succeeds(cwd: &Path, args: &[&str]) -> Output {
    let out = harness_run(cwd, args);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    out
}

/// Every file under `dir` with its bytes (symbolic links as their target).
fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let kind = entry.file_type().unwrap();
            let rel = path.strip_prefix(dir).unwrap().to_path_buf();
            if kind.is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                out.insert(rel, target.into_os_string().into_encoded_bytes());
            } else if kind.is_dir() {
                out.insert(rel, Vec::new());
                stack.push(path);
            } else {
                out.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    out
}

/// Fails naming the paths that differ between two [`tree`]s.
#[track_caller]
fn assert_same(
    after: &BTreeMap<PathBuf, Vec<u8>>,
    before: &BTreeMap<PathBuf, Vec<u8>>,
    what: &str,
) {
    let differ: Vec<&PathBuf> = before
        .keys()
        .chain(after.keys())
        .filter(|p| before.get(*p) != after.get(*p))
        .collect();
    assert!(differ.is_empty(), "{what}: changed {differ:?}");
}

/// The notebook directories under `dir/.harness/code`.
fn notebooks(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.join(".harness/code"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn scripts_with_odd_names_get_a_notebook_directory_of_their_own() {
    let dir = workdir("run-odd-names");
    std::fs::create_dir_all(dir.join("a")).unwrap();
    // (the path given, where the script is, its notebook directory)
    let cases: &[(&str, &str, &str)] = &[
        ("...py", "...py", "%2E%2E"),
        ("..py", "..py", "%2E"),
        (".py", ".py", ".py"),
        ("my script.py", "my script.py", "my script"),
        ("données é.py", "données é.py", "données é"),
        ("%2E.py", "%2E.py", "%252E"),
        ("a/../b.py", "b.py", "b"),
    ];
    for (i, (given, file, _)) in cases.iter().enumerate() {
        std::fs::write(dir.join(file), format!("x = {i}\nprint(x)\n")).unwrap();
        succeeds(&dir, &[given]);
    }
    let mut expected: Vec<String> = cases.iter().map(|c| c.2.to_owned()).collect();
    expected.sort();
    assert_eq!(notebooks(&dir), expected);
    for (_, _, name) in cases {
        let nb = dir.join(".harness/code").join(name);
        assert!(nb.join("session.json").is_file(), "{name}");
        assert!(nb.join(".harness-run").is_file(), "{name}");
    }
    // Nothing above the notebook directories was used as one.
    for path in [".harness/session.json", ".harness/code/session.json"] {
        assert!(!dir.join(path).exists(), "{path}");
    }
    // `--fresh` on each forgets its own notebook and nobody else's.
    for (given, _, name) in cases {
        let before = tree(&dir.join(".harness"));
        succeeds(&dir, &["--fresh", given]);
        assert_eq!(notebooks(&dir), expected, "--fresh {given}");
        let after = tree(&dir.join(".harness"));
        let others = |t: &BTreeMap<PathBuf, Vec<u8>>| {
            t.iter()
                .filter(|(p, _)| !p.starts_with(Path::new("code").join(name)))
                .map(|(p, b)| (p.clone(), b.clone()))
                .collect::<BTreeMap<_, _>>()
        };
        assert_same(
            &others(&after),
            &others(&before),
            &format!("--fresh {given}"),
        );
    }
}

/// A script whose cells only assign: its notebook directory after one run.
fn notebook_dir(name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let dir = workdir(name);
    let script = dir.join("job.py");
    std::fs::write(&script, "# %%\nx = [1, 2, 3]\n# %%\ny = sum(x)\nprint(y)\n").unwrap();
    let state = dir.join("state");
    succeeds(&dir, &["--state", "state", "job.py"]);
    (dir, script, state)
}

fn executed(out: &Output) -> usize {
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    report["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "executed")
        .count()
}

#[test]
fn fresh_deletes_only_the_notebook_harness_wrote() {
    let (dir, _, state) = notebook_dir("run-fresh-own");
    assert!(state.join("blobs/sha256").is_dir());
    let second = succeeds(&dir, &["--json", "--state", "state", "job.py"]);
    assert_eq!(executed(&second), 0, "reused");
    let fresh = succeeds(&dir, &["--json", "--fresh", "--state", "state", "job.py"]);
    assert_eq!(executed(&fresh), 2, "--fresh forgot the notebook");
    // A directory written before the marker existed is still harness's.
    std::fs::remove_file(state.join(".harness-run")).unwrap();
    let fresh = succeeds(&dir, &["--json", "--fresh", "--state", "state", "job.py"]);
    assert_eq!(executed(&fresh), 2);
    assert!(state.join(".harness-run").is_file());
}

#[test]
fn fresh_refuses_a_directory_holding_anything_else_and_deletes_nothing() {
    let (dir, _, state) = notebook_dir("run-fresh-foreign");
    let outside = dir.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("precious.txt"), "keep me").unwrap();
    // (what to add to the notebook directory, the entry the error names)
    type Add = fn(&Path, &Path);
    let cases: [(Add, &str); 5] = [
        (
            |s, _| std::fs::write(s.join("notes.txt"), "mine").unwrap(),
            "notes.txt",
        ),
        (
            |s, _| std::fs::create_dir_all(s.join("data/raw")).unwrap(),
            "data",
        ),
        (
            |s, _| std::fs::write(s.join("blobs/sha256/not-a-shard"), "x").unwrap(),
            "blobs/sha256/not-a-shard",
        ),
        (
            |s, _| {
                let shard = std::fs::read_dir(s.join("blobs/sha256"))
                    .unwrap()
                    .next()
                    .unwrap()
                    .unwrap()
                    .path();
                std::fs::write(shard.join("README"), "x").unwrap();
            },
            "README",
        ),
        (
            |s, outside| std::os::unix::fs::symlink(outside, s.join("linked")).unwrap(),
            "linked",
        ),
    ];
    for (add, named) in cases {
        add(&state, &outside);
        let before = tree(&dir);
        let out = harness_run(&dir, &["--fresh", "--state", "state", "job.py"]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{named}: {err}");
        assert!(
            err.contains(named) && err.contains("did not write") && err.contains("--fresh"),
            "{named}: {err}"
        );
        assert_same(&tree(&dir), &before, named);
        // Without --fresh the notebook is still used, unless a link could
        // lead its writes out of it.
        if named == "linked" {
            let out = harness_run(&dir, &["--state", "state", "job.py"]);
            assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
            assert!(stderr(&out).contains("symbolic link"), "{}", stderr(&out));
        } else {
            succeeds(&dir, &["--state", "state", "job.py"]);
        }
        // Put the directory back as harness left it.
        for entry in ["notes.txt", "data", "blobs/sha256/not-a-shard", "linked"] {
            let path = state.join(entry);
            if path.is_symlink() || path.is_file() {
                std::fs::remove_file(&path).unwrap();
            } else if path.is_dir() {
                std::fs::remove_dir_all(&path).unwrap();
            }
        }
        for shard in std::fs::read_dir(state.join("blobs/sha256")).unwrap() {
            let _ = std::fs::remove_file(shard.unwrap().path().join("README"));
        }
    }
    assert_eq!(
        std::fs::read_to_string(outside.join("precious.txt")).unwrap(),
        "keep me"
    );
}

#[test]
fn a_directory_that_is_not_harnesss_is_never_used_as_the_notebook() {
    let dir = workdir("run-foreign-dirs");
    std::fs::write(dir.join("job.py"), "x = 1\n").unwrap();
    std::fs::create_dir_all(dir.join("mine")).unwrap();
    std::fs::write(dir.join("mine/session.json"), "{\"my\": \"data\"}").unwrap();
    std::fs::write(dir.join("plain-file"), "text").unwrap();
    let before = tree(&dir);
    // (--state, what the error names)
    for (state, named) in [
        (".", "job.py"),
        ("mine", "session.json"),
        ("plain-file", "not a directory"),
    ] {
        for fresh in [false, true] {
            let mut args = vec!["--state", state, "job.py"];
            if fresh {
                args.insert(0, "--fresh");
            }
            let out = harness_run(&dir, &args);
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
            assert!(err.contains(named), "{args:?}: {err}");
            assert_same(&tree(&dir), &before, &format!("{args:?}"));
        }
    }
}

/// Waits for `path` to exist; a safety net, not a measurement.
fn wait_for(path: &Path) {
    let start = Instant::now();
    while !path.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_second_run_on_the_same_notebook_is_refused_while_the_first_holds_it() {
    let dir = workdir("run-concurrent");
    let ready = dir.join("ready");
    let go = dir.join("go");
    // The first cell signals that the run is under way, then waits to be
    // let go: the first run holds the notebook while the others try.
    std::fs::write(
        dir.join("slow.py"),
        format!(
            "# %%\nimport os, time\nopen({ready:?}, 'w').close()\n\
             while not os.path.exists({go:?}):\n    time.sleep(0.01)\nx = 1\n\
             # %%\ny = x + 1\n",
            ready = ready.to_str().unwrap(),
            go = go.to_str().unwrap()
        ),
    )
    .unwrap();
    let mut first = Command::new(env!("CARGO_BIN_EXE_harness"))
        .current_dir(&dir)
        .args(["run", "--quiet", "slow.py"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&ready);
    let nb = dir.join(".harness/code/slow");
    let before = tree(&nb);
    for args in [
        vec!["slow.py"],
        vec!["--fresh", "slow.py"],
        vec!["--state", ".harness/code/slow", "slow.py"],
    ] {
        // Bounded, should one get through and wait on the first cell.
        let mut args = args;
        args.extend(["--timeout", "30"]);
        let out = harness_run(&dir, &args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("another harness run holds")
                && err.contains(".harness/code/slow (pid ")
                && err.contains(&format!("(pid {})", first.id())),
            "{args:?}: {err}"
        );
        assert_same(&tree(&nb), &before, &format!("{args:?}"));
    }
    std::fs::write(&go, "").unwrap();
    let status = first.wait().unwrap();
    assert!(status.success());
    let saved: Value =
        serde_json::from_slice(&std::fs::read(nb.join("session.json")).unwrap()).unwrap();
    assert_eq!(saved["format"], 1);
    // Released: the next run goes ahead and reuses what the first ran.
    succeeds(&dir, &["slow.py"]);
}
