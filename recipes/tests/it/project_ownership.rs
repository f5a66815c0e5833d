//! The project agent owns only what it wrote: pointed at a user's
//! repository it never writes the repository's config, never commits a
//! file it did not write, works on a branch of its own, stops at
//! uncommitted changes and at commits it did not make, and rolls back only
//! its own work, listing it. Real git in temporary directories.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use super::project::{WORDS, answer, git, pick, plan, reflect, store, text, write};
use harness::llm::{Expect, ScriptedModel, Turn};
use harness::session::SessionConfig;
use harness_recipes::project::{
    PROJECT_BRANCH, ProjectAgent, ProjectError, SessionEnd, read_progress,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

const TOKEN: &str = "sk-live-0123456789-do-not-commit";

/// `git ARGS` as the user runs it, with the user's identity.
fn user_git(repo: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=A User",
            "-c",
            "user.email=user@example.com",
            "-c",
            "commit.gpgsign=false",
            "-c",
            "core.hooksPath=/dev/null",
        ])
        .args(args)
        .current_dir(repo)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

fn project(repo: &Path, store_dir: &Path, model: Arc<ScriptedModel>) -> ProjectAgent {
    ProjectAgent::builder("wc", repo, store(store_dir), model)
        .session_config(SessionConfig {
            lease_ttl: Duration::from_millis(500),
            ..SessionConfig::default()
        })
        .build()
        .unwrap()
}

/// Every file under `dir` but `.git`, with its bytes.
fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.file_name().unwrap() == ".git" {
                continue;
            }
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                out.insert(path.strip_prefix(root).unwrap().to_owned(), bytes);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// What a repository's state is, outside the working tree: its config
/// (bytes), `HEAD`, every ref.
fn repository_state(repo: &Path) -> (Vec<u8>, String, String) {
    (
        std::fs::read(repo.join(".git/config")).unwrap(),
        std::fs::read_to_string(repo.join(".git/HEAD")).unwrap(),
        git(repo, &["for-each-ref", "--format=%(refname) %(objectname)"]),
    )
}

/// Every commit of every ref, with its patch and file names.
fn all_history(repo: &Path) -> String {
    git(
        repo,
        &["log", "--all", "-p", "--name-only", "--format=%H %an %s"],
    )
}

/// A session's turns: pick, then `work` (tool calls), an answer, a
/// reflection.
fn session(feature: &str, work: Vec<Turn>) -> Vec<Turn> {
    let mut turns = vec![pick(feature)];
    turns.extend(work);
    turns.push(answer("done"));
    turns.push(reflect("own only what you wrote"));
    turns
}

fn push(model: &ScriptedModel, turns: Vec<Turn>) {
    for turn in turns {
        model.push(turn);
    }
}

fn uncommitted(error: &ProjectError) -> &[String] {
    match error {
        ProjectError::UncommittedChanges { paths, .. } => paths,
        other => panic!("not UncommittedChanges: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_repository_with_changes_is_refused_untouched_then_worked_on_a_branch_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("user repo");
    std::fs::create_dir_all(&repo).unwrap();
    user_git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("README.md"), "# mine\n").unwrap();
    std::fs::write(repo.join("src.txt"), "first\n").unwrap();
    user_git(&repo, &["add", "README.md", "src.txt"]);
    user_git(&repo, &["commit", "-q", "-m", "user: first"]);
    std::fs::write(repo.join("src.txt"), "first\nsecond\n").unwrap();
    user_git(&repo, &["commit", "-q", "-am", "user: second"]);
    let user_head = git(&repo, &["rev-parse", "HEAD"]);
    // Uncommitted: a modified tracked file, an untracked secret, a staged
    // new file.
    std::fs::write(
        repo.join("src.txt"),
        "first\nsecond\nthird, not committed\n",
    )
    .unwrap();
    std::fs::write(repo.join(".env.local"), format!("TOKEN={TOKEN}\n")).unwrap();
    std::fs::write(repo.join("notes.txt"), "staged\n").unwrap();
    user_git(&repo, &["add", "notes.txt"]);
    let state = repository_state(&repo);
    let before = files(&repo);

    let model = Arc::new(ScriptedModel::new([Expect::any().reply(text(plan()))]));
    let agent = project(&repo, dir.path(), Arc::clone(&model));
    let error = agent.initialize("wc").await.unwrap_err();
    let paths = uncommitted(&error);
    for name in [
        "src.txt (modified)",
        ".env.local (untracked)",
        "notes.txt (added)",
    ] {
        assert!(paths.iter().any(|p| p == name), "{name}: {paths:?}");
    }
    let message = error.to_string();
    assert!(
        message.contains(".env.local") && message.contains("commit them, stash them"),
        "{message}"
    );
    // Refused before anything: the model was not asked, and nothing of the
    // repository changed, nor a byte of the user's files.
    assert_eq!(model.remaining(), 1);
    assert_eq!(repository_state(&repo), state);
    assert_eq!(files(&repo), before);
    assert_eq!(
        git(&repo, &["diff", "--cached", "--name-only"]),
        "notes.txt"
    );
    assert!(!all_history(&repo).contains(TOKEN));

    // The user commits their work and ignores the secret: the agent takes
    // the repository on a branch of its own, at the user's HEAD.
    std::fs::write(repo.join(".gitignore"), ".env.local").unwrap(); // no final newline
    user_git(&repo, &["add", "src.txt", ".gitignore"]);
    user_git(&repo, &["commit", "-q", "-m", "user: third"]);
    let user_head = {
        assert_ne!(git(&repo, &["rev-parse", "HEAD"]), user_head);
        git(&repo, &["rev-parse", "HEAD"])
    };
    let config = std::fs::read(repo.join(".git/config")).unwrap();
    let user_files: Vec<(PathBuf, Vec<u8>)> = files(&repo)
        .into_iter()
        .filter(|(p, _)| p != Path::new(".gitignore"))
        .collect();

    let init = agent.initialize("wc").await.unwrap();
    assert_eq!(git(&repo, &["branch", "--show-current"]), PROJECT_BRANCH);
    assert_eq!(
        git(&repo, &["rev-parse", "main"]),
        user_head,
        "main untouched"
    );
    assert_eq!(git(&repo, &["rev-parse", "HEAD~1"]), user_head);
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), init);
    assert_eq!(
        git(&repo, &["show", "--name-only", "--format=", "HEAD"]),
        ".gitignore\n.harness/decisions.json\n.harness/ledger.json"
    );
    // The user's .gitignore is extended, its last line kept whole.
    let ignore = std::fs::read_to_string(repo.join(".gitignore")).unwrap();
    assert!(
        ignore.starts_with(".env.local\n/.harness/progress.json\n"),
        "{ignore:?}"
    );
    let progress = read_progress(&repo).unwrap();
    assert!(
        progress[0]
            .outcome
            .contains("created branch `harness/project`")
            && progress[0].outcome.contains("`git switch main`"),
        "{progress:?}"
    );

    // A session whose work also un-ignores the secret (a `.gitignore`
    // rewrite): the secret, ignored when the session started, stays out
    // of its commit.
    push(
        &model,
        session(
            "count-words",
            vec![
                write("c1", "wc.sh", WORDS),
                write("c2", ".gitignore", "/.harness/progress.json\n"),
            ],
        ),
    );
    let SessionEnd::Recorded(entry) = agent.run_session().await.unwrap() else {
        panic!("session 1 recorded nothing");
    };
    assert_eq!(
        git(&repo, &["show", "--name-only", "--format=", "HEAD"]),
        ".gitignore\n.harness/decisions.json\n.harness/ledger.json\nwc.sh"
    );
    assert_eq!(
        entry.commit.as_deref(),
        Some(git(&repo, &["rev-parse", "HEAD"]).as_str())
    );
    // The secret never reached a commit, by name or content, on any ref;
    // every commit on the agent's branch since the user's is the agent's.
    let history = all_history(&repo);
    assert!(!history.contains(TOKEN), "{history}");
    assert!(!history.lines().any(|l| l == ".env.local"), "{history}");
    assert_eq!(
        git(
            &repo,
            &["log", "--format=%an", &format!("{user_head}..HEAD")]
        ),
        "harness project agent\nharness project agent"
    );
    // The repository's config is the user's, byte for byte; the user's
    // files are as they were.
    assert_eq!(std::fs::read(repo.join(".git/config")).unwrap(), config);
    let now = files(&repo);
    for (path, bytes) in &user_files {
        if path.starts_with(".harness") {
            continue;
        }
        assert_eq!(now.get(path), Some(bytes), "{}", path.display());
    }

    // The secret is now visible to git: the next session names it and
    // stops, deleting nothing.
    let error = agent.run_session().await.unwrap_err();
    assert_eq!(uncommitted(&error), [".env.local (untracked)".to_owned()]);
    assert_eq!(
        std::fs::read_to_string(repo.join(".env.local")).unwrap(),
        format!("TOKEN={TOKEN}\n")
    );
    assert_eq!(std::fs::read(repo.join(".git/config")).unwrap(), config);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_with_files_that_is_not_a_repository_is_refused_and_left_alone() {
    for held in [
        vec!["notes.md"],
        vec![".env"],
        vec!["src/main.rs", "Cargo.toml"],
    ] {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        for name in &held {
            let file = repo.join(name);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(&file, format!("{name}: {TOKEN}\n")).unwrap();
        }
        let before = files(&repo);
        let model = Arc::new(ScriptedModel::new([Expect::any().reply(text(plan()))]));
        let agent = project(&repo, dir.path(), Arc::clone(&model));
        let error = agent.initialize("wc").await.unwrap_err();
        let ProjectError::NotEmpty { paths, .. } = &error else {
            panic!("{held:?}: {error:?}");
        };
        let top = held[0].split('/').next().unwrap();
        assert!(paths.iter().any(|p| p == top), "{held:?}: {paths:?}");
        assert!(
            error.to_string().contains("not a git repository"),
            "{error}"
        );
        assert!(!repo.join(".git").exists(), "no repository made");
        assert_eq!(files(&repo), before);
        assert_eq!(model.remaining(), 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_session_stops_at_the_users_changes_naming_them_and_deletes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let model = Arc::new(ScriptedModel::new([Expect::any().reply(text(plan()))]));
    let agent = project(&repo, dir.path(), Arc::clone(&model));
    agent.initialize("wc").await.unwrap();
    push(
        &model,
        session(
            "count-words",
            vec![write("c1", "wc.sh", "wc -w | tr -d ' '\n")],
        ),
    );
    agent.run_session().await.unwrap();
    let config = std::fs::read(repo.join(".git/config")).unwrap();
    let head = git(&repo, &["rev-parse", "HEAD"]);

    // (what the user does, the paths the error must name, how to undo it)
    type Change = Box<dyn Fn(&Path)>;
    let cases: Vec<(Change, Vec<&str>, Change)> = vec![
        (
            Box::new(|r| std::fs::write(r.join("mine.txt"), "my notes\n").unwrap()),
            vec!["mine.txt (untracked)"],
            Box::new(|r| std::fs::remove_file(r.join("mine.txt")).unwrap()),
        ),
        (
            Box::new(|r| std::fs::write(r.join("wc.sh"), "my own edit\n").unwrap()),
            vec!["wc.sh (modified)"],
            Box::new(|r| {
                git(r, &["checkout", "-q", "--", "wc.sh"]);
            }),
        ),
        (
            Box::new(|r| {
                std::fs::create_dir_all(r.join("deep/er")).unwrap();
                std::fs::write(r.join("deep/er/x.txt"), "x\n").unwrap();
                std::fs::write(r.join("wc.sh"), "edited too\n").unwrap();
            }),
            vec!["deep/er/x.txt (untracked)", "wc.sh (modified)"],
            Box::new(|r| {
                std::fs::remove_dir_all(r.join("deep")).unwrap();
                git(r, &["checkout", "-q", "--", "wc.sh"]);
            }),
        ),
        (
            Box::new(|r| {
                std::fs::write(r.join("staged.txt"), "staged\n").unwrap();
                git(r, &["add", "staged.txt"]);
            }),
            vec!["staged.txt (added)"],
            Box::new(|r| {
                git(r, &["rm", "-q", "--cached", "staged.txt"]);
                std::fs::remove_file(r.join("staged.txt")).unwrap();
            }),
        ),
        (
            Box::new(|r| std::fs::remove_file(r.join("wc.sh")).unwrap()),
            vec!["wc.sh (deleted)"],
            Box::new(|r| {
                git(r, &["checkout", "-q", "--", "wc.sh"]);
            }),
        ),
    ];
    for (change, named, undo) in cases {
        change(&repo);
        let before = files(&repo);
        let error = agent.run_session().await.unwrap_err();
        let mut paths = uncommitted(&error).to_vec();
        paths.sort();
        assert_eq!(paths, named, "{error}");
        assert!(error.to_string().contains(named[0]), "{error}");
        // Nothing deleted, reset or committed; the model was not asked;
        // no session was started.
        assert_eq!(files(&repo), before);
        assert_eq!(git(&repo, &["rev-parse", "HEAD"]), head);
        assert_eq!(model.remaining(), 0);
        assert_eq!(agent.status().await.unwrap().current, None);
        undo(&repo);
    }
    assert_eq!(std::fs::read(repo.join(".git/config")).unwrap(), config);

    // Clean again: the next session runs.
    push(
        &model,
        session("count-lines", vec![write("c2", "wc.sh", WORDS)]),
    );
    let SessionEnd::Recorded(entry) = agent.run_session().await.unwrap() else {
        panic!("session 2 recorded nothing");
    };
    assert_eq!(entry.number, 2);
    assert_eq!(std::fs::read(repo.join(".git/config")).unwrap(), config);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_after_a_failed_session_discards_only_the_agents_work_and_lists_it() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let model = Arc::new(ScriptedModel::new([Expect::any().reply(text(plan()))]));
    let agent = project(&repo, dir.path(), Arc::clone(&model));
    let init = agent.initialize("wc").await.unwrap();
    push(
        &model,
        session(
            "count-words",
            vec![write("c1", "wc.sh", "wc -w | tr -d ' '\n")],
        ),
    );
    agent.run_session().await.unwrap();
    let session_1 = git(&repo, &["rev-parse", "HEAD"]);
    // The user's ignored files: a secret, and a build directory.
    std::fs::write(repo.join(".git/info/exclude"), ".env.local\nbuild/\n").unwrap();
    std::fs::write(repo.join(".env.local"), format!("TOKEN={TOKEN}\n")).unwrap();
    std::fs::create_dir_all(repo.join("build")).unwrap();
    std::fs::write(repo.join("build/cache.bin"), [0u8, 1, 2]).unwrap();
    let config = std::fs::read(repo.join(".git/config")).unwrap();

    // Session 2 rewrites wc.sh, adds a helper in a new directory,
    // un-ignores the secret, writes into the user's ignored directory, and
    // then fails (its reflection is not JSON, twice).
    for turn in [
        pick("count-lines"),
        write("c1", "wc.sh", "broken\n"),
        write("c2", "extra/helper.sh", "echo help\n"),
        write("c3", ".gitignore", "/.harness/progress.json\n!.env.local\n"),
        write("c4", "build/cache.bin", "overwritten"),
        answer("done"),
        answer("not a reflection"),
        answer("still not one"),
    ] {
        model.push(turn);
    }
    let error = agent.run_session().await.unwrap_err();
    assert!(
        matches!(error, ProjectError::Session { number: 2, .. }),
        "{error:?}"
    );
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), session_1);

    let rollback = agent.roll_back().await.unwrap();
    assert_eq!(rollback.session, Some(2));
    assert_eq!(
        rollback.restored,
        [PathBuf::from(".gitignore"), PathBuf::from("wc.sh")]
    );
    assert_eq!(rollback.removed, [PathBuf::from("extra/helper.sh")]);
    assert_eq!(rollback.kept, [PathBuf::from(".env.local")]);
    assert!(rollback.commits.is_empty());
    // Its own work is gone; what was there before it is kept, byte for
    // byte (ignored files are never removed or restored: the session's
    // write into build/ stays, as the user's build directory does).
    assert_eq!(
        std::fs::read_to_string(repo.join("wc.sh")).unwrap(),
        "wc -w | tr -d ' '\n"
    );
    assert!(!repo.join("extra/helper.sh").exists());
    assert_eq!(
        std::fs::read_to_string(repo.join(".env.local")).unwrap(),
        format!("TOKEN={TOKEN}\n")
    );
    assert!(repo.join("build/cache.bin").exists());
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), session_1);
    assert_eq!(std::fs::read(repo.join(".git/config")).unwrap(), config);
    // Listed in the progress log, file by file.
    let last = read_progress(&repo).unwrap().pop().unwrap();
    assert_eq!(last.session, 2);
    assert!(
        last.outcome.contains("restored: .gitignore, wc.sh")
            && last.outcome.contains("removed: extra/helper.sh")
            && last
                .outcome
                .contains("kept (not the session's): .env.local"),
        "{last:?}"
    );
    assert!(
        agent
            .report_markdown()
            .await
            .unwrap()
            .contains("extra/helper.sh")
    );
    assert!(!all_history(&repo).contains(TOKEN));

    // Reverting to the initializer's commit moves back past the agent's
    // own commit only, and names it.
    let rollback = agent.revert_to(&init).await.unwrap();
    assert_eq!(rollback.session, None);
    assert_eq!(rollback.commits.len(), 1);
    assert_eq!(rollback.commits[0].id, session_1);
    let last = read_progress(&repo).unwrap().pop().unwrap();
    assert!(
        last.outcome.contains(&session_1[..10])
            && last.outcome.contains("session 1: count-words is passing"),
        "{last:?}"
    );
    assert!(repo.join(".env.local").exists() && repo.join("build/cache.bin").exists());

    // With no session under way, a change is the user's: a rollback
    // refuses rather than discard it.
    std::fs::write(repo.join("mine.txt"), "mine\n").unwrap();
    let error = agent.roll_back().await.unwrap_err();
    assert_eq!(uncommitted(&error), ["mine.txt (untracked)".to_owned()]);
    assert!(repo.join("mine.txt").exists());
}

/// A session whose command put a link out of the project where `.harness`
/// was fails; the rollback then removes the link (not what it points to),
/// puts the directory back, and clears the session, in one call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_removes_a_link_the_session_put_in_place_of_a_tracked_directory() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let model = Arc::new(ScriptedModel::new([Expect::any().reply(text(plan()))]));
    let agent = project(&repo, dir.path(), Arc::clone(&model));
    agent.initialize("wc").await.unwrap();
    let head = git(&repo, &["rev-parse", "HEAD"]);
    let tracked = files(&repo.join(".harness"));
    let swap = format!(
        "cp -r .harness ../copy && rm -rf .harness && ln -s {} .harness && cp ../copy/* .harness/",
        outside.display()
    );
    push(
        &model,
        vec![
            pick("count-words"),
            super::project::write_words_then(swap),
            answer("done"),
            reflect("links"),
        ],
    );
    let error = agent.run_session().await.unwrap_err();
    assert!(
        matches!(error, ProjectError::Session { number: 1, .. }),
        "{error:?}"
    );
    assert!(
        std::fs::symlink_metadata(repo.join(".harness"))
            .unwrap()
            .is_symlink()
    );
    let outside_before = files(&outside);

    let rollback = agent.roll_back().await.unwrap();
    assert_eq!(rollback.session, Some(1));
    assert!(
        rollback.removed.contains(&PathBuf::from(".harness"))
            && rollback.removed.contains(&PathBuf::from("wc.sh")),
        "{rollback:?}"
    );
    // The directory is back, as committed; what the link pointed to is
    // left as it was; the session is over.
    assert!(
        std::fs::symlink_metadata(repo.join(".harness"))
            .unwrap()
            .is_dir()
    );
    let mut restored = files(&repo.join(".harness"));
    restored.remove(Path::new("progress.json"));
    let mut committed = tracked.clone();
    committed.remove(Path::new("progress.json"));
    assert_eq!(restored, committed);
    assert!(!repo.join("wc.sh").exists());
    assert_eq!(files(&outside), outside_before);
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), head);
    assert_eq!(agent.status().await.unwrap().current, None);
    let last = read_progress(&repo).unwrap().pop().unwrap();
    assert_eq!(last.session, 1, "{last:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_commit_or_another_branch_stops_the_agent_and_is_never_reset_over() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let model = Arc::new(ScriptedModel::new([Expect::any().reply(text(plan()))]));
    let agent = project(&repo, dir.path(), Arc::clone(&model));
    let init = agent.initialize("wc").await.unwrap();
    push(
        &model,
        session("count-words", vec![write("c1", "wc.sh", WORDS)]),
    );
    agent.run_session().await.unwrap();
    let agents = git(&repo, &["rev-parse", "HEAD"]);

    // The user commits on the agent's branch.
    std::fs::write(repo.join("mine.txt"), "mine\n").unwrap();
    user_git(&repo, &["add", "mine.txt"]);
    user_git(&repo, &["commit", "-q", "-m", "user: my own commit"]);
    let users = git(&repo, &["rev-parse", "HEAD"]);
    for attempt in 0..3 {
        let error = match attempt {
            0 => agent.run_session().await.unwrap_err(),
            1 => agent.revert_to(&init).await.unwrap_err(),
            _ => agent.roll_back().await.unwrap_err(),
        };
        let ProjectError::ForeignCommits {
            foreign, last_own, ..
        } = &error
        else {
            panic!("{attempt}: {error:?}");
        };
        assert_eq!(foreign.len(), 1);
        assert_eq!(foreign[0].id, users);
        assert_eq!(last_own.as_deref(), Some(agents.as_str()));
        let message = error.to_string();
        assert!(message.contains("user: my own commit"), "{message}");
        assert!(message.contains(&agents[..10]), "{message}");
        assert_eq!(
            git(&repo, &["rev-parse", "HEAD"]),
            users,
            "never reset over"
        );
        assert!(repo.join("mine.txt").exists());
    }
    assert_eq!(model.remaining(), 0, "no session started");

    // Put back as the message says: the agent goes on.
    user_git(&repo, &["branch", "my-work"]);
    user_git(&repo, &["reset", "-q", "--keep", &agents]);
    // On another branch: stopped, with the way back.
    user_git(&repo, &["switch", "-q", "my-work"]);
    let error = agent.run_session().await.unwrap_err();
    let ProjectError::WrongBranch {
        expected, found, ..
    } = &error
    else {
        panic!("{error:?}");
    };
    assert_eq!(
        (expected.as_str(), found.as_deref()),
        ("main", Some("my-work"))
    );
    assert!(error.to_string().contains("git switch main"), "{error}");
    // Detached: the same.
    user_git(&repo, &["switch", "-q", "--detach", &agents]);
    let error = agent.run_session().await.unwrap_err();
    assert!(
        matches!(&error, ProjectError::WrongBranch { found: None, .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("detached HEAD"), "{error}");
    assert_eq!(git(&repo, &["rev-parse", "my-work"]), users);

    user_git(&repo, &["switch", "-q", "main"]);
    push(&model, session("count-lines", vec![]));
    let SessionEnd::Recorded(entry) = agent.run_session().await.unwrap() else {
        panic!("session 2 recorded nothing");
    };
    assert_eq!(entry.number, 2);
    assert_eq!(
        git(&repo, &["rev-parse", "my-work"]),
        users,
        "the user's commit kept"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_users_repository_another_branch_checked_out_stops_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    user_git(&repo, &["init", "-q", "-b", "trunk"]);
    std::fs::write(repo.join("README.md"), "# mine\n").unwrap();
    user_git(&repo, &["add", "README.md"]);
    user_git(&repo, &["commit", "-q", "-m", "user: readme"]);
    let config = std::fs::read(repo.join(".git/config")).unwrap();
    let model = Arc::new(ScriptedModel::new([Expect::any().reply(text(plan()))]));
    let agent = project(&repo, dir.path(), Arc::clone(&model));
    agent.initialize("wc").await.unwrap();
    assert_eq!(git(&repo, &["branch", "--show-current"]), PROJECT_BRANCH);

    user_git(&repo, &["switch", "-q", "trunk"]);
    let before = files(&repo);
    let error = agent.run_session().await.unwrap_err();
    let ProjectError::WrongBranch {
        expected, found, ..
    } = &error
    else {
        panic!("{error:?}");
    };
    assert_eq!(expected, PROJECT_BRANCH);
    assert_eq!(found.as_deref(), Some("trunk"));
    assert!(
        error.to_string().contains("git switch harness/project"),
        "{error}"
    );
    assert_eq!(files(&repo), before);
    assert_eq!(git(&repo, &["branch", "--show-current"]), "trunk");

    user_git(&repo, &["switch", "-q", PROJECT_BRANCH]);
    push(
        &model,
        session("count-words", vec![write("c1", "wc.sh", WORDS)]),
    );
    agent.run_session().await.unwrap();
    assert_eq!(
        git(&repo, &["log", "--format=%s", "trunk"]),
        "user: readme",
        "the user's branch never moves"
    );
    assert_eq!(std::fs::read(repo.join(".git/config")).unwrap(), config);

    // A second project initialized in the same repository finds the branch
    // taken and refuses, changing nothing.
    user_git(&repo, &["switch", "-q", "trunk"]);
    let other = Arc::new(ScriptedModel::new([Expect::any().reply(text(plan()))]));
    let second = ProjectAgent::builder("other", &repo, store(&dir.path().join("2")), other)
        .build()
        .unwrap();
    let error = second.initialize("wc").await.unwrap_err();
    assert!(
        matches!(&error, ProjectError::NotOwned { reason, .. } if reason.contains("exists already")),
        "{error:?}"
    );
    assert_eq!(git(&repo, &["branch", "--show-current"]), "trunk");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_commits_only_on_its_branch_on_top_of_where_it_started() {
    use super::project::write_words_then;
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    let model = Arc::new(ScriptedModel::new([Expect::any().reply(text(plan()))]));
    let agent = project(&repo, dir.path(), Arc::clone(&model));
    let init = agent.initialize("wc").await.unwrap();

    // The model's command switches to another branch during the work: the
    // session does not commit there.
    push(
        &model,
        vec![
            pick("count-words"),
            write_words_then("git switch -q -c elsewhere".into()),
            answer("done"),
            reflect("stay on the branch"),
        ],
    );
    let error = agent.run_session().await.unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(error, ProjectError::Session { number: 1, .. })
            && message.contains("not the project's branch `main`")
            && message.contains("`elsewhere`"),
        "{message}"
    );
    assert_eq!(git(&repo, &["rev-parse", "elsewhere"]), init);
    assert_eq!(git(&repo, &["rev-parse", "main"]), init);
    // Back on the branch, the same session goes on and commits there.
    user_git(&repo, &["switch", "-q", "main"]);
    let SessionEnd::Recorded(entry) = agent.run_session().await.unwrap() else {
        panic!("session 1 recorded nothing");
    };
    assert_eq!(entry.number, 1);
    assert_eq!(git(&repo, &["rev-parse", "main"]), entry.commit.unwrap());
    assert_eq!(git(&repo, &["rev-parse", "elsewhere"]), init);

    // The model's command commits by itself: HEAD moved under the
    // session, which does not commit on top of that.
    let before = git(&repo, &["rev-parse", "HEAD"]);
    push(
        &model,
        vec![
            pick("count-lines"),
            write_words_then(
                "git -c user.name=model -c user.email=m@x -c commit.gpgsign=false commit -q --allow-empty -m sneaky".into(),
            ),
            answer("done"),
            reflect("do not commit"),
        ],
    );
    let error = agent.run_session().await.unwrap_err();
    let message = error.to_string();
    assert!(message.contains("HEAD moved from"), "{message}");
    assert_eq!(git(&repo, &["log", "-1", "--format=%s"]), "sneaky");
    assert_eq!(git(&repo, &["rev-parse", "HEAD~1"]), before);
    // And the next call names the commit that is not the agent's.
    let error = agent.run_session().await.unwrap_err();
    assert!(
        matches!(&error, ProjectError::ForeignCommits { foreign, .. } if foreign[0].subject == "sneaky"),
        "{error:?}"
    );
}

#[test]
fn a_project_name_that_cannot_name_its_sessions_and_trailers_is_refused_by_build() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let build = |name: &str| {
        ProjectAgent::builder(
            name,
            dir.path().join("repo"),
            Arc::clone(&store) as _,
            Arc::new(ScriptedModel::new(Vec::<Turn>::new())),
        )
        .build()
    };
    // (name, what the error says is wrong, and where)
    for (name, reason) in [
        ("", "it is empty"),
        ("x\ny", r"'\n' at byte 1"),
        ("a\nProject-Session: b", r"'\n' at byte 1"),
        ("a b/../c", "' ' at byte 1"),
        ("a/b", "'/' at byte 1"),
        ("wc:", "':' at byte 2"),
        ("café", "'é' at byte 3"),
    ] {
        let error = build(name).unwrap_err();
        let ProjectError::InvalidName {
            name: refused,
            reason: why,
        } = &error
        else {
            panic!("{name:?}: {error:?}");
        };
        assert_eq!(refused, name);
        assert!(why.contains(reason), "{name:?}: {why}");
        let message = error.to_string();
        assert!(message.contains(&format!("{name:?}")), "{message}");
        assert!(message.contains(reason), "{message}");
    }
    assert!(!dir.path().join("repo").exists(), "nothing was made");
    for name in ["wc", "foo-session-x", "A_1"] {
        build(name).unwrap();
    }
}

/// `git ARGS` with the agent's identity: a commit only its trailer can
/// tell from the agent's own.
fn agent_identity_git(repo: &Path, args: &[&str]) {
    let name = format!("user.name={}", harness_recipes::project::AGENT_NAME);
    let email = format!("user.email={}", harness_recipes::project::AGENT_EMAIL);
    let out = Command::new("git")
        .args(["-c", &name, "-c", &email, "-c", "commit.gpgsign=false"])
        .args(args)
        .current_dir(repo)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_trailer_naming_exactly_this_projects_session_makes_a_commit_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let model = Arc::new(ScriptedModel::new([Expect::any().reply(text(plan()))]));
    let agent = ProjectAgent::builder("foo", &repo, store(dir.path()), model)
        .build()
        .unwrap();
    let init = agent.initialize("wc").await.unwrap();
    // (the trailer's value, whether the commit is project `foo`'s)
    for (session, own) in [
        // A session of the project `foo-session-x`.
        ("foo-session-x-session-1", false),
        ("foo-session-", false),
        ("foo-session-1 and more", false),
        ("foo-session-1/2", false),
        ("foo-sessions-1", false),
        ("foo-session-12", true),
    ] {
        agent_identity_git(
            &repo,
            &[
                "commit",
                "-q",
                "--allow-empty",
                "-m",
                &format!("crafted\n\nProject-Session: {session}\n"),
            ],
        );
        let crafted = git(&repo, &["rev-parse", "HEAD"]);
        match agent.roll_back().await {
            Ok(_) => assert!(own, "{session:?} was taken for foo's own"),
            Err(ProjectError::ForeignCommits { foreign, .. }) => {
                assert!(!own, "{session:?} was taken for a foreign commit");
                assert_eq!(foreign.len(), 1);
                assert_eq!(foreign[0].id, crafted);
            }
            Err(other) => panic!("{session:?}: {other}"),
        }
        user_git(&repo, &["reset", "-q", "--keep", &init]);
    }
}

/// Two directories, one store, one name: the second directory is told the
/// project of that name is another directory's, not given git's error or
/// advice to switch branches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_directory_under_the_same_name_is_told_the_project_is_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let (one, two) = (dir.path().join("one"), dir.path().join("two"));
    std::fs::create_dir_all(&one).unwrap();
    std::fs::create_dir_all(&two).unwrap();
    let model = Arc::new(ScriptedModel::new([Expect::any().reply(text(plan()))]));
    let store = store(dir.path());
    let first = ProjectAgent::builder("same", &one, Arc::clone(&store) as _, model)
        .build()
        .unwrap();
    let init = first.initialize("wc").await.unwrap();
    let second = ProjectAgent::builder(
        "same",
        &two,
        store,
        Arc::new(ScriptedModel::new(Vec::<Turn>::new())),
    )
    .build()
    .unwrap();
    let error = second.initialize("wc").await.unwrap_err();
    assert!(
        error.to_string().contains("needs a name of its own"),
        "{error}"
    );
    // Not a repository, then a repository without the commit.
    for setup in [None, Some(["init", "-q"])] {
        if let Some(args) = setup {
            user_git(&two, &args);
        }
        for error in [
            second.status().await.unwrap_err(),
            second.run_session().await.unwrap_err(),
            second.roll_back().await.unwrap_err(),
        ] {
            let ProjectError::NotOwned { reason, .. } = &error else {
                panic!("{setup:?}: {error:?}");
            };
            assert!(
                reason.contains(&format!("initialized with commit {}", &init[..10])),
                "{reason}"
            );
            assert!(reason.contains("in another directory"), "{reason}");
        }
    }
    assert!(first.status().await.is_ok());
}
