//! A command-line view of an agent's sessions, for embedding in the
//! application's own binary (only it knows the state type and the steps):
//!
//! ```text
//! my-agent sessions list
//! my-agent sessions show SESSION        # phase, next step, state as JSON, history
//! my-agent sessions resume SESSION ANSWER
//! ```
//!
//! ```no_run
//! # #[derive(Clone, Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema, harness::HarnessState)]
//! # struct MyState { n: u32 }
//! # async fn f(agent: harness::Agent<MyState>) {
//! let args: Vec<String> = std::env::args().skip(2).collect(); // after `sessions`
//! match harness::session::cli::sessions_command(&agent, &args, || ()).await {
//!     Ok(text) => println!("{text}"),
//!     Err(e) => eprintln!("error: {e}"),
//! }
//! # }
//! ```

use super::{SessionError, SessionPhase, StoredRun};
use crate::agent::Agent;
use crate::slots::Context;
use crate::state::HarnessState;
use std::fmt::Write;

/// The usage text of [`sessions_command`].
pub const USAGE: &str = "usage: sessions list | show SESSION | resume SESSION ANSWER\n\
    ANSWER is read as JSON when it parses as JSON (true, 3, {\"a\":1}), else as a string";

fn phase(head: &StoredRun) -> String {
    match &head.phase {
        SessionPhase::Running => match &head.lease {
            Some(l) if l.is_live(super::now_millis()) => format!("running ({})", l.owner),
            _ => "unfinished (its run stopped mid-way; recover it)".into(),
        },
        SessionPhase::Interrupted { interrupt } => {
            format!("interrupted at `{}` ({})", interrupt.step, interrupt.id)
        }
        SessionPhase::Completed { signal } => format!("completed with `{signal}`"),
        SessionPhase::Failed { error } => format!("failed: {error}"),
    }
}

/// Runs one `sessions` subcommand for `agent` and returns what to print.
/// `slots` gives the run slots a resumed run needs.
pub async fn sessions_command<S: HarnessState, C: Context>(
    agent: &Agent<S, C>,
    args: &[String],
    slots: impl Fn() -> C::Run,
) -> Result<String, SessionError> {
    let mut out = String::new();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["list"] => {
            let heads = agent.sessions().await?;
            if heads.is_empty() {
                out.push_str("no sessions\n");
            }
            for h in heads {
                let _ = writeln!(out, "{}  {} steps  {}", h.session_id, h.steps, phase(&h));
            }
        }
        ["show", id] => {
            let id = crate::SessionId::from(*id);
            let head = agent.session(&id).await?;
            let state = agent.state_at(&id, None).await?;
            let _ = writeln!(out, "session:   {}", head.session_id);
            let _ = writeln!(out, "agent:     {}", head.agent_id);
            let _ = writeln!(out, "phase:     {}", phase(&head));
            if let SessionPhase::Interrupted { interrupt } = &head.phase {
                let _ = writeln!(out, "asks:      {}", interrupt.payload);
            }
            let _ = writeln!(
                out,
                "next step: {}",
                head.next_step.as_deref().unwrap_or("(none)")
            );
            let _ = writeln!(out, "steps:     {}", head.steps);
            let json = serde_json::to_string_pretty(&state)
                .unwrap_or_else(|e| format!("(cannot render: {e})"));
            let _ = writeln!(out, "state:\n{json}");
            let _ = writeln!(out, "history:");
            for cp in agent.history(&id).await? {
                let _ = writeln!(out, "  {:>4}  {:<20} {}", cp.index, cp.step, cp.time);
            }
        }
        ["resume", id, answer] => {
            let id = crate::SessionId::from(*id);
            let head = agent.session(&id).await?;
            let SessionPhase::Interrupted { interrupt } = head.phase else {
                let _ = writeln!(
                    out,
                    "session {id} is not waiting for an answer: {}",
                    phase(&head)
                );
                return Ok(out);
            };
            let response = serde_json::from_str(answer)
                .unwrap_or_else(|_| serde_json::Value::String((*answer).to_string()));
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
        _ => out.push_str(USAGE),
    }
    Ok(out)
}
