//! The working directory's git repository, through the `git` command.
//!
//! The repository's configuration is never written: the agent's identity,
//! no signing and no hooks are given to each command as `-c` options, and
//! neither the system's nor the user's configuration is read. Files are
//! staged by name (never `git add -A` of the whole tree), and nothing here
//! runs `git clean` or `git reset --hard`.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// The name the agent's commits are made with.
pub const AGENT_NAME: &str = "harness project agent";
/// The email the agent's commits are made with.
pub const AGENT_EMAIL: &str = "project-agent@harness.invalid";

/// A git command that failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GitError {
    /// `git` could not be started (is it installed?).
    #[error("cannot run `git {args}` in {}: {source}; is git installed?", dir.display())]
    Spawn {
        /// The arguments.
        args: String,
        /// The repository.
        dir: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// `git` ran and failed.
    #[error("`git {args}` failed in {} ({status}): {stderr}", dir.display())]
    Failed {
        /// The arguments.
        args: String,
        /// The repository.
        dir: PathBuf,
        /// Its exit status.
        status: String,
        /// What it wrote to standard error.
        stderr: String,
    },
}

/// One commit of the log.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CommitInfo {
    /// The full id.
    pub id: String,
    /// The first line of its message.
    pub subject: String,
}

/// One commit with its author and whole message.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CommitDetail {
    /// The full id.
    pub id: String,
    /// The author's name.
    pub author: String,
    /// The author's email.
    pub email: String,
    /// The whole message.
    pub message: String,
}

impl CommitDetail {
    /// The id and first line.
    pub fn info(&self) -> CommitInfo {
        CommitInfo {
            id: self.id.clone(),
            subject: self.message.lines().next().unwrap_or_default().to_owned(),
        }
    }
}

/// One path `git status` reports: a change to a tracked file, or a file
/// git does not track and does not ignore.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusEntry {
    /// Git's two-letter code (`" M"`, `"D "`, `"??"`, …).
    pub code: String,
    /// The path, relative to the repository's top.
    pub path: PathBuf,
}

impl StatusEntry {
    /// Whether git does not track the file.
    pub fn is_untracked(&self) -> bool {
        self.code == "??"
    }
}

impl std::fmt::Display for StatusEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.code.as_str() {
            "??" => "untracked",
            c if c.contains('D') => "deleted",
            c if c.contains('A') => "added",
            _ => "modified",
        };
        write!(f, "{} ({what})", self.path.display())
    }
}

/// A git repository in a directory.
#[derive(Clone, Debug)]
pub struct Git {
    dir: PathBuf,
}

impl Git {
    /// The repository in `dir` (which may not be one yet: see [`init`](Self::init)).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Runs `git ARGS` in the directory; its standard output.
    pub async fn run(&self, args: &[&str]) -> Result<String, GitError> {
        let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
        let out = self.exec(&args, None).await?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    /// Runs `git ARGS` with `input` on its standard input; its standard
    /// output, as bytes.
    async fn exec(&self, args: &[&OsStr], input: Option<Vec<u8>>) -> Result<Vec<u8>, GitError> {
        let shown = || {
            args.iter()
                .map(|a| a.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" ")
        };
        // Confined like the model's commands: the repository is the
        // model's to write, and git runs what its config says (filters,
        // fsmonitor), so it gets no more of the host than they do.
        let mut command = super::verify::confined("git").map_err(|e| GitError::Spawn {
            args: shown(),
            dir: self.dir.clone(),
            source: std::io::Error::other(e),
        })?;
        let identity_name = format!("user.name={AGENT_NAME}");
        let identity_email = format!("user.email={AGENT_EMAIL}");
        command
            // Per command, never written to the repository's config: no
            // hooks (a hook the model wrote would run at the host's
            // commit), no fsmonitor, the agent's identity, no signing.
            .args([
                "-c",
                "core.hooksPath=/dev/null",
                "-c",
                "core.fsmonitor=false",
                "-c",
                &identity_name,
                "-c",
                &identity_email,
                "-c",
                "commit.gpgsign=false",
                "-c",
                "tag.gpgsign=false",
            ])
            .args(args)
            .current_dir(&self.dir)
            // Neither the system's nor the user's configuration, so the
            // project behaves the same on every machine.
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_TERMINAL_PROMPT", "0")
            // git's messages in English, whatever the user's locale: a
            // failure is told apart by its words (see `session.rs`).
            .env("LC_ALL", "C")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .stdin(if input.is_some() {
                std::process::Stdio::piped()
            } else {
                std::process::Stdio::null()
            });
        let spawn_error = |source| GitError::Spawn {
            args: shown(),
            dir: self.dir.clone(),
            source,
        };
        let mut child = command.spawn().map_err(spawn_error)?;
        if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
            use tokio::io::AsyncWriteExt;
            // Written while the output is read: a long list does not wait
            // on a full pipe.
            let writer = tokio::spawn(async move {
                let _ = stdin.write_all(&input).await;
            });
            let output = child.wait_with_output().await.map_err(spawn_error)?;
            let _ = writer.await;
            return self.finish(output, shown());
        }
        let output = child.wait_with_output().await.map_err(spawn_error)?;
        self.finish(output, shown())
    }

    fn finish(&self, output: std::process::Output, args: String) -> Result<Vec<u8>, GitError> {
        if !output.status.success() {
            return Err(GitError::Failed {
                args,
                dir: self.dir.clone(),
                status: output.status.to_string(),
                stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
            });
        }
        Ok(output.stdout)
    }

    /// Whether the directory is the top of a git repository.
    pub fn is_repository(&self) -> bool {
        self.dir.join(".git").exists()
    }

    /// Makes the directory a new repository (branch `main`); does nothing
    /// to an existing one. Nothing is written to its configuration but what
    /// `git init` writes. Whether it made one.
    pub async fn init(&self) -> Result<bool, GitError> {
        if self.is_repository() {
            return Ok(false);
        }
        self.run(&["init", "-q", "-b", "main"]).await?;
        Ok(true)
    }

    /// The id of `HEAD`; `None` before the first commit.
    pub async fn head(&self) -> Result<Option<String>, GitError> {
        match self.run(&["rev-parse", "--verify", "-q", "HEAD"]).await {
            Ok(id) => Ok(Some(id.trim().to_owned())),
            Err(GitError::Failed { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The branch `HEAD` is on (also before its first commit); `None` when
    /// `HEAD` is detached.
    pub async fn branch(&self) -> Result<Option<String>, GitError> {
        match self.run(&["symbolic-ref", "-q", "--short", "HEAD"]).await {
            Ok(name) => Ok(Some(name.trim().to_owned())),
            Err(GitError::Failed { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Whether branch `name` exists.
    pub async fn branch_exists(&self, name: &str) -> Result<bool, GitError> {
        match self
            .run(&["show-ref", "--verify", "-q", &format!("refs/heads/{name}")])
            .await
        {
            Ok(_) => Ok(true),
            Err(GitError::Failed { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Whether the repository has any ref (branch, tag, …).
    pub async fn has_refs(&self) -> Result<bool, GitError> {
        Ok(!self
            .run(&["for-each-ref", "--count=1"])
            .await?
            .trim()
            .is_empty())
    }

    /// Creates branch `name` at `HEAD` and checks it out; the working tree
    /// and the index are not changed (the new branch is at the same commit).
    pub async fn create_branch(&self, name: &str) -> Result<(), GitError> {
        self.run(&["switch", "-q", "-c", name]).await?;
        Ok(())
    }

    /// The full message of `commit`.
    pub async fn message(&self, commit: &str) -> Result<String, GitError> {
        self.run(&["log", "-1", "--format=%B", commit]).await
    }

    /// The content of `path` at `commit`.
    pub async fn show(&self, commit: &str, path: &str) -> Result<String, GitError> {
        self.run(&["show", &format!("{commit}:{path}")]).await
    }

    /// The changes to tracked files and the untracked files that are not
    /// ignored, each file by name (no directory stands for its contents).
    pub async fn status(&self) -> Result<Vec<StatusEntry>, GitError> {
        let out = self
            .exec(
                &[
                    OsStr::new("status"),
                    OsStr::new("--porcelain=v1"),
                    OsStr::new("-z"),
                    OsStr::new("--untracked-files=all"),
                    OsStr::new("--no-renames"),
                ],
                None,
            )
            .await?;
        Ok(out
            .split(|b| *b == 0)
            .filter(|entry| entry.len() > 3)
            .map(|entry| StatusEntry {
                code: String::from_utf8_lossy(&entry[..2]).into_owned(),
                path: PathBuf::from(OsString::from_vec(entry[3..].to_vec())),
            })
            .collect())
    }

    /// Whether tracked or new (not ignored) files differ from `HEAD`.
    pub async fn is_dirty(&self) -> Result<bool, GitError> {
        Ok(!self.status().await?.is_empty())
    }

    /// The ignored files and directories there are now (a directory whose
    /// files are all ignored is one entry, ending in `/`).
    pub async fn ignored(&self) -> Result<Vec<PathBuf>, GitError> {
        let out = self
            .exec(
                &[
                    OsStr::new("ls-files"),
                    OsStr::new("-z"),
                    OsStr::new("--others"),
                    OsStr::new("--ignored"),
                    OsStr::new("--exclude-standard"),
                    OsStr::new("--directory"),
                ],
                None,
            )
            .await?;
        Ok(out
            .split(|b| *b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| PathBuf::from(OsString::from_vec(p.to_vec())))
            .collect())
    }

    /// Makes the index hold `HEAD` (empty before the first commit); the
    /// working tree is not touched.
    pub(crate) async fn reset_index(&self) -> Result<(), GitError> {
        match self.head().await? {
            Some(_) => self.run(&["read-tree", "HEAD"]).await?,
            None => self.run(&["read-tree", "--empty"]).await?,
        };
        Ok(())
    }

    /// `git ARGS` with `paths` given literally on its standard input.
    async fn with_paths(&self, args: &[&str], paths: &[PathBuf]) -> Result<(), GitError> {
        let mut input = Vec::new();
        for path in paths {
            input.extend_from_slice(path.as_os_str().as_bytes());
            input.push(0);
        }
        let mut all: Vec<&OsStr> = vec![OsStr::new("--literal-pathspecs")];
        all.extend(args.iter().map(OsStr::new));
        all.push(OsStr::new("--pathspec-from-file=-"));
        all.push(OsStr::new("--pathspec-file-nul"));
        self.exec(&all, Some(input)).await?;
        Ok(())
    }

    /// Commits exactly `paths` (their changes, additions and deletions) as
    /// they are in the working tree, with `message`, on the branch checked
    /// out: anything else staged is unstaged first, and no other file is
    /// looked at. An empty commit if nothing changed. The new commit's id.
    pub async fn commit_paths(&self, message: &str, paths: &[PathBuf]) -> Result<String, GitError> {
        self.reset_index().await?;
        if !paths.is_empty() {
            // `--force`: the agent's own files are committed even where the
            // user's `.gitignore` would leave them out.
            self.with_paths(&["add", "-A", "--force"], paths).await?;
        }
        self.run(&[
            "commit",
            "-q",
            "--allow-empty",
            "--no-verify",
            "-m",
            message,
        ])
        .await?;
        self.head().await?.ok_or_else(|| GitError::Failed {
            args: "rev-parse HEAD".into(),
            dir: self.dir.clone(),
            status: "no commit".into(),
            stderr: "HEAD does not exist after a commit".into(),
        })
    }

    /// Puts the tracked files `paths` back as `HEAD` holds them (in the
    /// index and the working tree). Untracked files are not touched.
    pub async fn restore(&self, paths: &[PathBuf]) -> Result<(), GitError> {
        self.reset_index().await?;
        if !paths.is_empty() {
            self.with_paths(&["checkout", "-q", "HEAD"], paths).await?;
        }
        Ok(())
    }

    /// The last `n` commits, newest first.
    pub async fn log(&self, n: usize) -> Result<Vec<CommitInfo>, GitError> {
        if self.head().await?.is_none() {
            return Ok(Vec::new());
        }
        let text = self
            .run(&["log", &format!("-{n}"), "--format=%H %s"])
            .await?;
        Ok(text
            .lines()
            .filter_map(|line| {
                let (id, subject) = line.split_once(' ').unwrap_or((line, ""));
                (!id.is_empty()).then(|| CommitInfo {
                    id: id.to_owned(),
                    subject: subject.to_owned(),
                })
            })
            .collect())
    }

    /// The commits reachable from `to` and not from `from`, newest first,
    /// with their authors and messages.
    pub async fn commits_between(
        &self,
        from: &str,
        to: &str,
    ) -> Result<Vec<CommitDetail>, GitError> {
        let text = self
            .run(&[
                "log",
                "--format=%H%x1f%an%x1f%ae%x1f%B%x1e",
                &format!("{from}..{to}"),
                "--",
            ])
            .await?;
        Ok(text
            .split('\x1e')
            .filter_map(|record| {
                let mut fields = record.trim_start_matches('\n').splitn(4, '\x1f');
                let id = fields.next()?.trim();
                (!id.is_empty()).then(|| CommitDetail {
                    id: id.to_owned(),
                    author: fields.next().unwrap_or_default().to_owned(),
                    email: fields.next().unwrap_or_default().to_owned(),
                    message: fields.next().unwrap_or_default().trim_end().to_owned(),
                })
            })
            .collect())
    }

    /// Whether `ancestor` is `commit` or one of its ancestors.
    pub async fn is_ancestor(&self, ancestor: &str, commit: &str) -> Result<bool, GitError> {
        match self
            .run(&["merge-base", "--is-ancestor", ancestor, commit])
            .await
        {
            Ok(_) => Ok(true),
            Err(GitError::Failed { status, .. }) if status.contains("exit status: 1") => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The full id of `rev`.
    pub async fn resolve(&self, rev: &str) -> Result<String, GitError> {
        Ok(self
            .run(&["rev-parse", "--verify", &format!("{rev}^{{commit}}")])
            .await?
            .trim()
            .to_owned())
    }

    /// Moves the branch checked out back to `commit` with `git reset
    /// --keep`: files the commits in between changed follow, and git
    /// refuses (changing nothing) if that would lose an uncommitted change.
    /// Untracked and ignored files are not touched.
    pub async fn reset_keep(&self, commit: &str) -> Result<(), GitError> {
        self.run(&["reset", "-q", "--keep", commit]).await?;
        Ok(())
    }
}
