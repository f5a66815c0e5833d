//! The working directory's git repository, through the `git` command.
//! Identity and signing are set in the repository's own config; no global
//! or system configuration is read.

use std::path::{Path, PathBuf};

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
        // Confined like the model's commands: the repository is the
        // model's to write, and git runs what its config says (filters,
        // fsmonitor), so it gets no more of the host than they do.
        let mut command = super::verify::confined("git").map_err(|e| GitError::Spawn {
            args: args.join(" "),
            dir: self.dir.clone(),
            source: std::io::Error::other(e),
        })?;
        let output = command
            // No hooks: a hook the model wrote would run at the host's
            // commit.
            .args([
                "-c",
                "core.hooksPath=/dev/null",
                "-c",
                "core.fsmonitor=false",
            ])
            .args(args)
            .current_dir(&self.dir)
            // Neither the system's nor the user's configuration: identity
            // and signing come from the repository's own config, so the
            // project behaves the same on every machine.
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_TERMINAL_PROMPT", "0")
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .map_err(|source| GitError::Spawn {
                args: args.join(" "),
                dir: self.dir.clone(),
                source,
            })?;
        if !output.status.success() {
            return Err(GitError::Failed {
                args: args.join(" "),
                dir: self.dir.clone(),
                status: output.status.to_string(),
                stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
            });
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// Whether the directory is the top of a git repository.
    pub fn is_repository(&self) -> bool {
        self.dir.join(".git").exists()
    }

    /// Makes the directory a repository (branch `main`) with its own
    /// identity and no signing; does nothing to an existing repository but
    /// set those.
    pub async fn init(&self) -> Result<(), GitError> {
        if !self.is_repository() {
            self.run(&["init", "-q", "-b", "main"]).await?;
        }
        for (key, value) in [
            ("user.name", "harness project agent"),
            ("user.email", "project-agent@harness.invalid"),
            ("commit.gpgsign", "false"),
            ("core.hooksPath", "/dev/null"),
        ] {
            self.run(&["config", "--local", key, value]).await?;
        }
        Ok(())
    }

    /// The id of `HEAD`; `None` before the first commit.
    pub async fn head(&self) -> Result<Option<String>, GitError> {
        match self.run(&["rev-parse", "--verify", "-q", "HEAD"]).await {
            Ok(id) => Ok(Some(id.trim().to_owned())),
            Err(GitError::Failed { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The full message of `commit`.
    pub async fn message(&self, commit: &str) -> Result<String, GitError> {
        self.run(&["log", "-1", "--format=%B", commit]).await
    }

    /// The content of `path` at `commit`.
    pub async fn show(&self, commit: &str, path: &str) -> Result<String, GitError> {
        self.run(&["show", &format!("{commit}:{path}")]).await
    }

    /// Stages everything and commits it with `message` (an empty commit if
    /// nothing changed); the new commit's id.
    pub async fn commit_all(&self, message: &str) -> Result<String, GitError> {
        self.run(&["add", "-A"]).await?;
        self.run(&["commit", "-q", "--allow-empty", "-m", message])
            .await?;
        self.head().await?.ok_or_else(|| GitError::Failed {
            args: "rev-parse HEAD".into(),
            dir: self.dir.clone(),
            status: "no commit".into(),
            stderr: "HEAD does not exist after a commit".into(),
        })
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

    /// Whether tracked or new (not ignored) files differ from `HEAD`.
    pub async fn is_dirty(&self) -> Result<bool, GitError> {
        Ok(!self
            .run(&["status", "--porcelain"])
            .await?
            .trim()
            .is_empty())
    }

    /// Moves the branch to `commit` and makes the working tree match it:
    /// changes and new files are discarded (ignored files are kept).
    pub async fn reset_hard(&self, commit: &str) -> Result<(), GitError> {
        self.run(&["reset", "-q", "--hard", commit]).await?;
        self.run(&["clean", "-q", "-fd"]).await?;
        Ok(())
    }
}
