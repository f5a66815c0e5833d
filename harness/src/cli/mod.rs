//! The `sessions` command line (feature `cli`), declared once with clap and
//! run two ways:
//!
//! - **typed**, in the application's own binary, which knows the state type
//!   and the steps: [`sessions_command`] (or [`SessionsCommand::run`] when
//!   the application embeds [`SessionsCommand`] in its own clap parser)
//!   lists, shows and lists the history of the agent's sessions, with the
//!   state merged through the reducers, resumes a session waiting for an
//!   answer, and stops a session's run wherever it runs;
//! - **untyped and read-only**, on any
//!   [`SessionStore`](crate::session::SessionStore):
//!   [`InspectCommand::run`], which the `harness` binary runs as
//!   `harness sessions list|show|history --store …`. Without the state type
//!   the reducers cannot be applied, so `show` prints what is stored: the
//!   latest snapshot and the updates after it.
//!
//! ```text
//! my-agent sessions list
//! my-agent sessions show SESSION          # phase, next step, the question asked, the state
//! my-agent sessions history SESSION       # the checkpoints: index, time and step of each
//! my-agent sessions resume SESSION ANSWER
//! my-agent sessions stop SESSION          # the run going, at its next step boundary
//! ```
//!
//! ```no_run
//! # #[derive(Clone, Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema, harness::HarnessState)]
//! # struct MyState { n: u32 }
//! # async fn f(agent: harness::Agent<MyState>) {
//! use harness::cli::{CommandError, sessions_command};
//!
//! let args = std::env::args_os().skip(2); // after `my-agent sessions`
//! match sessions_command(&agent, args, || ()).await {
//!     Ok(text) => print!("{text}"),
//!     // Prints the usage (or the help) and exits with clap's status.
//!     Err(CommandError::Usage(e)) => e.exit(),
//!     // What could be read, then what could not.
//!     Err(e @ CommandError::Unreadable { .. }) => {
//!         if let CommandError::Unreadable { shown, .. } = &e {
//!             print!("{shown}");
//!         }
//!         eprintln!("error: {e}");
//!         std::process::exit(1);
//!     }
//!     Err(e) => {
//!         eprintln!("error: {e}");
//!         std::process::exit(1);
//!     }
//! }
//! # }
//! ```

mod inspect;
mod render;

use crate::agent::Agent;
use crate::ids::SessionId;
use crate::session::{SessionError, SessionPhase, Stopping, StoreLoad};
use crate::slots::Context;
use crate::state::HarnessState;
use clap::{Parser, Subcommand};
use std::ffi::OsString;
use std::fmt::Write;

/// The subcommands that only read, which any store can answer: the `harness`
/// binary runs them on a store given by path or URL ([`InspectCommand::run`]);
/// an application's binary runs them as part of [`SessionsCommand`].
#[derive(Clone, Debug, PartialEq, Eq, Subcommand)]
pub enum InspectCommand {
    /// List the sessions: id, agent, steps taken, phase.
    List,
    /// Show a session: its phase, next step, the question it waits on, and
    /// its state as JSON.
    Show {
        /// The session's id.
        session: String,
    },
    /// List a session's checkpoints, one per step: its index (what a fork
    /// takes), when it was written and the step that wrote it (`show`
    /// prints the state).
    History {
        /// The session's id.
        session: String,
    },
}

/// The `sessions` command line of an application's binary: the read-only
/// subcommands of [`InspectCommand`], `resume` and `stop`.
///
/// Embed it in your own clap parser (`#[command(subcommand)]`) and call
/// [`run`](Self::run), or hand the raw arguments to [`sessions_command`].
#[derive(Clone, Debug, PartialEq, Eq, Subcommand)]
pub enum SessionsCommand {
    /// `list`, `show SESSION`, `history SESSION`.
    #[command(flatten)]
    Inspect(InspectCommand),
    /// Answer the question a session waits on, and run it on until it ends
    /// or asks again.
    Resume {
        /// The session's id.
        session: String,
        /// The answer: read as JSON when it parses as JSON (`true`, `3`,
        /// `{"a":1}`), else as a string.
        answer: String,
    },
    /// Stop the session's run wherever it runs
    /// ([`Agent::stop_session`]): a run a process holds stops at its next
    /// step boundary (the step running now completes and is kept); a run
    /// waiting for a worker is stopped at once; a run queued behind it then
    /// starts. A session not running is left as it is.
    Stop {
        /// The session's id.
        session: String,
    },
}

/// `sessions SUBCOMMAND …`: the parser of [`sessions_command`].
#[derive(Debug, Parser)]
#[command(name = "sessions", bin_name = "sessions", no_binary_name = true)]
struct SessionsArgs {
    #[command(subcommand)]
    command: SessionsCommand,
}

/// Why a `sessions` command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CommandError {
    /// The command line is wrong (or asks for `--help`): clap's error, which
    /// renders with the usage. [`clap::Error::exit`] prints it and exits
    /// with status 2 (0 for `--help`).
    #[error("{0}")]
    Usage(#[from] clap::Error),
    /// Reading or running the session failed: no such session, a stored
    /// record that cannot be read, the store failed, the resumed run failed.
    /// Each names the session.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// `resume` of a session that waits for no answer.
    #[error("session {session} is not waiting for an answer: it is {phase}")]
    NotWaiting {
        /// The session.
        session: SessionId,
        /// Its phase, described.
        phase: String,
    },
    /// Some stored records could not be read (damaged, of another schema
    /// version, missing from a log), and what could be read is in `shown`:
    /// `list` of a store where some heads do not read lists every other
    /// session, with a line for each of those; `show` of a session whose
    /// head reads and whose log does not shows the head. Print `shown`,
    /// then this error. Nothing was changed: the records are left as they
    /// are, for their owner to restore.
    #[error("{}", unreadable_text(unreadable))]
    Unreadable {
        /// What could be read, ready to print.
        shown: String,
        /// Each record that could not be read, naming its session.
        unreadable: Vec<StoreLoad>,
    },
}

/// The most unreadable records an [`CommandError::Unreadable`] names.
const UNREADABLE_SHOWN: usize = 8;

fn unreadable_text(unreadable: &[StoreLoad]) -> String {
    let [one] = unreadable else {
        let shown: Vec<String> = unreadable
            .iter()
            .take(UNREADABLE_SHOWN)
            .map(ToString::to_string)
            .collect();
        let more = match unreadable.len().saturating_sub(UNREADABLE_SHOWN) {
            0 => String::new(),
            more => format!("; and {more} more"),
        };
        return format!(
            "{} sessions cannot be read (the rest is shown): {}{more}",
            unreadable.len(),
            shown.join("; ")
        );
    };
    format!("{one} (what could be read is shown)")
}

impl SessionsCommand {
    /// Parses the arguments after `sessions` (no program name).
    ///
    /// # Errors
    ///
    /// [`CommandError::Usage`] for an unknown subcommand, a missing or
    /// extra argument, or `--help`.
    pub fn parse_args<I, T>(args: I) -> Result<Self, CommandError>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        Ok(SessionsArgs::try_parse_from(args)?.command)
    }

    /// Runs the command for `agent` and returns what to print. `slots` gives
    /// the run slots a resumed run needs.
    ///
    /// `list` lists the agent's sessions only, and `show`, `history`,
    /// `resume` and `stop` refuse another agent's session; `show` prints
    /// the state merged through the reducers. `stop` of a session that is
    /// not running says so and changes nothing (it is not an error: the
    /// session is stopped either way).
    ///
    /// # Errors
    ///
    /// [`CommandError::Session`] when the session cannot be read or the
    /// resumed run fails; [`CommandError::NotWaiting`] for `resume` of a
    /// session that asked nothing.
    pub async fn run<S: HarnessState, C: Context>(
        self,
        agent: &Agent<S, C>,
        slots: impl Fn() -> C::Run,
    ) -> Result<String, CommandError> {
        let mut out = String::new();
        match self {
            SessionsCommand::Inspect(InspectCommand::List) => {
                let (heads, unreadable) = agent.readable_sessions().await?;
                render::list(&mut out, heads, &unreadable);
                if !unreadable.is_empty() {
                    return Err(CommandError::Unreadable {
                        shown: out,
                        unreadable,
                    });
                }
            }
            SessionsCommand::Inspect(InspectCommand::Show { session }) => {
                let id = SessionId::from(session);
                let head = agent.session(&id).await?;
                render::head(&mut out, &head);
                match agent.state_at(&id, Some(head.steps)).await {
                    Ok(state) => {
                        let _ = writeln!(out, "state:\n{}", render::pretty(&state));
                    }
                    Err(SessionError::Load(load)) => {
                        return Err(CommandError::Unreadable {
                            shown: out,
                            unreadable: vec![load],
                        });
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            SessionsCommand::Inspect(InspectCommand::History { session }) => {
                let id = SessionId::from(session);
                render::history(&mut out, &id, &agent.history(&id).await?);
            }
            SessionsCommand::Resume { session, answer } => {
                let id = SessionId::from(session);
                let head = agent.session(&id).await?;
                let SessionPhase::Interrupted { interrupt } = &head.phase else {
                    return Err(CommandError::NotWaiting {
                        phase: render::phase(&head),
                        session: id,
                    });
                };
                let response =
                    serde_json::from_str(&answer).unwrap_or(serde_json::Value::String(answer));
                let outcome = agent
                    .with(slots())
                    .resume(response, &id, &interrupt.id)
                    .await?
                    .await
                    .map_err(|e| SessionError::Run(Box::new(e)))?;
                let _ = writeln!(
                    out,
                    "session {id}: {} after {} steps",
                    outcome.signal, outcome.steps
                );
                if let Some(i) = outcome.interrupt {
                    let _ = writeln!(out, "asks again: {} ({})", i.payload, i.id);
                }
            }
            SessionsCommand::Stop { session } => {
                let id = SessionId::from(session);
                let text = match agent.stop_session(&id).await? {
                    Stopping::Stopped => {
                        format!("session {id}: stopped (no run held it; it ends with `$stopped`)")
                    }
                    Stopping::Asked { owner } => format!(
                        "session {id}: asked to stop; the run held by {owner} stops at its next \
                         step boundary"
                    ),
                    Stopping::NotRunning(phase) => format!(
                        "session {id}: not running, nothing to stop: it is {}",
                        render::phase_of(&phase)
                    ),
                    Stopping::Ended => format!(
                        "session {id}: the run asked to stop ended meanwhile; a run queued behind \
                         it may be going, and was not stopped"
                    ),
                };
                let _ = writeln!(out, "{text}");
            }
        }
        Ok(out)
    }
}

/// Parses `args` (the arguments after `sessions`, without a program name)
/// and runs the command for `agent`: [`SessionsCommand::parse_args`] then
/// [`SessionsCommand::run`]. Returns what to print.
///
/// # Errors
///
/// [`CommandError::Usage`] for a bad command line (print it, or call
/// `exit()` on it), and the errors of [`SessionsCommand::run`].
pub async fn sessions_command<S, C, I, T>(
    agent: &Agent<S, C>,
    args: I,
    slots: impl Fn() -> C::Run,
) -> Result<String, CommandError>
where
    S: HarnessState,
    C: Context,
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    SessionsCommand::parse_args(args)?.run(agent, slots).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::error::ErrorKind;

    fn parse(args: &[&str]) -> Result<SessionsCommand, clap::Error> {
        match SessionsCommand::parse_args(args) {
            Ok(c) => Ok(c),
            Err(CommandError::Usage(e)) => Err(e),
            Err(other) => panic!("not a usage error: {other}"),
        }
    }

    #[test]
    fn every_subcommand_parses() {
        assert_eq!(
            parse(&["list"]).ok(),
            Some(SessionsCommand::Inspect(InspectCommand::List))
        );
        assert_eq!(
            parse(&["show", "s-1"]).ok(),
            Some(SessionsCommand::Inspect(InspectCommand::Show {
                session: "s-1".into()
            }))
        );
        assert_eq!(
            parse(&["history", "s-1"]).ok(),
            Some(SessionsCommand::Inspect(InspectCommand::History {
                session: "s-1".into()
            }))
        );
        assert_eq!(
            parse(&["resume", "s-1", "{\"a\":1}"]).ok(),
            Some(SessionsCommand::Resume {
                session: "s-1".into(),
                answer: "{\"a\":1}".into()
            })
        );
        assert_eq!(
            parse(&["stop", "s-1"]).ok(),
            Some(SessionsCommand::Stop {
                session: "s-1".into()
            })
        );
    }

    #[test]
    fn a_bad_command_line_is_a_usage_error_that_shows_the_usage() {
        let cases: [(&[&str], ErrorKind); 7] = [
            (&["bogus"], ErrorKind::InvalidSubcommand),
            (&["show"], ErrorKind::MissingRequiredArgument),
            (&["resume", "s-1"], ErrorKind::MissingRequiredArgument),
            (&["stop"], ErrorKind::MissingRequiredArgument),
            (&["stop", "s-1", "s-2"], ErrorKind::UnknownArgument),
            (&["list", "extra"], ErrorKind::UnknownArgument),
            (&[], ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand),
        ];
        for (args, kind) in cases {
            let err = parse(args).expect_err("a usage error");
            assert_eq!(err.kind(), kind, "{args:?}: {err}");
            let text = err.to_string();
            assert!(text.contains("sessions"), "{args:?}: {text}");
            assert_eq!(err.exit_code(), 2, "{args:?}");
        }
        let missing = parse(&["show"]).expect_err("usage").to_string();
        assert!(missing.contains("<SESSION>"), "{missing}");
        let help = parse(&["--help"]).expect_err("help");
        assert_eq!(help.kind(), ErrorKind::DisplayHelp);
        assert_eq!(help.exit_code(), 0);
        for sub in ["list", "show", "history", "resume", "stop"] {
            assert!(help.to_string().contains(sub), "{sub} in {help}");
        }
    }
}
