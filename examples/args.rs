//! The examples' command lines, read the same way by each: `--help` (or
//! `-h`) prints the usage on standard output and exits with status 0; an
//! unknown argument, a missing value or a bad one is `error: …` then the
//! usage on standard error, status 2. And the checks a mode that reads an
//! existing session makes of its `--store` (opening a sled store creates
//! one where there is none), with its errors in words.

use std::fmt::Display;
use std::path::Path;
use std::str::FromStr;

use harness::SessionId;
use harness::cli::CommandError;
use harness::session::{SessionError, SessionPhase};

/// What an example takes: its synopsis (`usage: NAME …`, a line per form),
/// and what its options do, which `--help` adds.
#[derive(Clone, Copy, Debug)]
pub struct Usage {
    /// `usage: NAME [OPTION …]`, one line per form.
    pub synopsis: &'static str,
    /// What each option does; may be empty.
    pub options: &'static str,
}

impl Usage {
    /// Prints the usage and the options on standard output; exits with 0.
    pub fn help(self) -> ! {
        println!("{}", self.synopsis);
        if !self.options.is_empty() {
            println!("\n{}", self.options);
        }
        std::process::exit(0)
    }

    /// Prints `error: MESSAGE` and the usage on standard error; exits with
    /// 2, a usage error.
    pub fn fail(self, message: impl Display) -> ! {
        eprintln!("error: {message}\n{}", self.synopsis);
        std::process::exit(2)
    }
}

fn is_help(arg: &str) -> bool {
    arg == "--help" || arg == "-h"
}

/// The process's arguments, read one at a time.
#[derive(Debug)]
pub struct Args {
    usage: Usage,
    rest: std::vec::IntoIter<String>,
}

impl Args {
    /// The arguments after the program's name. One that is not UTF-8 is a
    /// usage error.
    pub fn from_env(usage: Usage) -> Self {
        let args: Vec<String> = std::env::args_os()
            .skip(1)
            .map(|arg| {
                arg.into_string()
                    .unwrap_or_else(|arg| usage.fail(format!("{arg:?} is not UTF-8 text")))
            })
            .collect();
        Self {
            usage,
            rest: args.into_iter(),
        }
    }

    /// The usage these arguments are read against.
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// The next argument, `None` after the last; `--help` or `-h` prints
    /// the help and exits.
    #[allow(clippy::should_implement_trait)] // it exits on --help: not an iterator's next
    pub fn next(&mut self) -> Option<String> {
        let arg = self.rest.next()?;
        if is_help(&arg) {
            self.usage.help()
        }
        Some(arg)
    }

    /// The arguments not read yet, as they are (a subcommand's own).
    pub fn rest(&mut self) -> Vec<String> {
        self.rest.by_ref().collect()
    }

    /// The value of `flag`: the next argument. None is a usage error;
    /// `--help` there prints the help.
    pub fn value(&mut self, flag: &str) -> String {
        match self.rest.next() {
            Some(value) if is_help(&value) => self.usage.help(),
            Some(value) => value,
            None => self.usage.fail(format!("{flag} needs a value")),
        }
    }

    /// The value of `flag` read as a `T` that `ok` accepts; else a usage
    /// error saying what to give (`what`: "a whole number ≥ 1").
    pub fn number<T: FromStr>(&mut self, flag: &str, what: &str, ok: impl Fn(&T) -> bool) -> T {
        let value = self.value(flag);
        match value.trim().parse::<T>() {
            Ok(n) if ok(&n) => n,
            _ => self.usage.fail(format!("{flag} {value:?}: give {what}")),
        }
    }

    /// `arg` is not one this example takes: a usage error naming it.
    pub fn unknown(&self, arg: &str) -> ! {
        self.usage.fail(format!("unknown argument {arg:?}"))
    }
}

/// Checks that `dir` holds a sled store, before a mode that only reads or
/// continues a session there opens it: opening creates a store where there
/// is none, so a mistyped `--store` would leave an empty one behind and
/// find no session. The error names the path.
pub fn existing_store(dir: &Path) -> Result<(), String> {
    let shown = dir.display();
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(format!(
            "no store at {shown}: nothing is there (check --store; a new run creates the store)"
        )),
        Err(e) => Err(format!("cannot read the store at {shown}: {e}")),
        Ok(meta) if !meta.is_dir() => Err(format!(
            "no store at {shown}: it is a file, not a store's directory"
        )),
        // sled's two files (what `SledStore::open_read_only` looks for).
        Ok(_) if !dir.join("db").is_file() && !dir.join("conf").is_file() => Err(format!(
            "no store at {shown}: the directory holds no sled database (check --store)"
        )),
        Ok(_) => Ok(()),
    }
}

/// `e`, where a missing session is named with the store it was looked
/// for in.
pub fn in_store(e: SessionError, store: &Path) -> Box<dyn std::error::Error> {
    match e {
        SessionError::NoSession(missing) => format!(
            "no session {} in the store at {}",
            missing.session,
            store.display()
        )
        .into(),
        other => other.into(),
    }
}

/// A session's phase in words, as harness's `sessions` commands say it:
/// `completed with `$end``, `failed: …`.
pub fn phase_in_words(phase: &SessionPhase) -> String {
    match phase {
        SessionPhase::Running => "running".into(),
        SessionPhase::Interrupted { interrupt } => {
            format!("interrupted at `{}` ({})", interrupt.step, interrupt.id)
        }
        SessionPhase::Completed { signal } => format!("completed with `{signal}`"),
        SessionPhase::Failed { error } => format!("failed: {error}"),
    }
}

/// The error for an answer to `session`, which waits for none: the one
/// `sessions resume` gives ("session … is not waiting for an answer: it
/// is completed with `$end`").
pub fn not_waiting(session: &SessionId, phase: &SessionPhase) -> CommandError {
    CommandError::NotWaiting {
        session: session.clone(),
        phase: phase_in_words(phase),
    }
}
