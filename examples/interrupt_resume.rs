//! Pause for a human in one process, resume in another.
//!
//! ```text
//! cargo run -p harness-examples --example interrupt_resume
//!     # runs until the approval step asks, prints the session and interrupt ids, exits
//! cargo run -p harness-examples --example interrupt_resume -- --resume SESSION --answer yes
//!     # a new process: loads the session from the store, answers, completes
//! ```
//!
//! Sessions live in a sled database (`--store DIR`, default
//! `.harness/sessions`). `interrupt_resume sessions list|show ID|history
//! ID|resume ID ANSWER|stop ID` is a command-line view of them (`harness::cli`,
//! feature `cli`). The side effect before the question (notifying a
//! manager) is journaled with `cx.once`, so resuming does not repeat it.

use harness::cli::{CommandError, SessionsCommand};
use harness::session::SessionPhase;
use harness::{
    Context, Cx, Harness, HarnessState, InterruptId, JsonSchema, SessionId, Signal, StepResult,
    create_agent, schemars,
};
use harness_examples::args::{Args, Usage, existing_store, in_store, not_waiting};
use harness_stores::SledStore;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::Arc;

/// An expense claim going through approval.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
struct Claim {
    employee: String,
    amount_cents: u64,
    #[field(reduce = append)]
    log: Vec<String>,
    approved: Option<bool>,
}

#[derive(Context)]
struct Deps {
    /// Where notifications go; here, standard output.
    #[slot(fixed)]
    notify: Arc<dyn Fn(&str) + Send + Sync>,
}

async fn review(claim: Arc<Claim>) -> StepResult<ClaimUpdate> {
    let note = format!(
        "{} claims {}.{:02} EUR",
        claim.employee,
        claim.amount_cents / 100,
        claim.amount_cents % 100
    );
    Ok(ClaimUpdate::new().log(vec![note]))
}

async fn approve(claim: Arc<Claim>, cx: Cx<Deps>) -> StepResult<ClaimUpdate> {
    let ticket: String = cx
        .once("notify-manager", async {
            let ticket = format!("ticket-{}", cx.run_id().as_str().get(..8).unwrap_or("0"));
            (cx.notify)(&format!("notified the manager ({ticket})"));
            ticket
        })
        .await?;
    let answer: String = cx.interrupt(serde_json::json!({
        "question": "approve this claim?",
        "claim": claim.log.last(),
        "ticket": ticket,
    }))?;
    let yes = answer.eq_ignore_ascii_case("yes");
    Ok(ClaimUpdate::new()
        .approved(Some(yes))
        .log(vec![format!("manager answered {answer} on {ticket}")]))
}

async fn pay(claim: Arc<Claim>) -> StepResult<ClaimUpdate> {
    Ok(ClaimUpdate::new().log(vec![format!("paid {} cents", claim.amount_cents)]))
}

const USAGE: Usage = Usage {
    synopsis: "usage: interrupt_resume [--store DIR]
       interrupt_resume [--store DIR] --resume SESSION --answer TEXT [--interrupt ID]
       interrupt_resume [--store DIR] sessions list | show SESSION | history SESSION | resume SESSION ANSWER | stop SESSION",
    options: "  --store DIR       the sled store of the sessions (default .harness/sessions);
                    a new run creates it, the other modes read an existing one
  --resume SESSION  answer the question SESSION waits on, in this process
  --answer TEXT     the answer (yes approves the claim)
  --interrupt ID    the question answered (default: the one SESSION waits on)
  sessions ...      a command-line view of the stored sessions (sessions --help)",
};

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// What the command line asks for.
enum Mode {
    /// A new claim, run until it asks.
    New,
    /// An answer to a stored session's question.
    Resume {
        session: SessionId,
        answer: String,
        interrupt: Option<InterruptId>,
    },
    /// A `sessions` command.
    Sessions(SessionsCommand),
}

/// The store's directory and the mode; a usage error exits.
fn options() -> (PathBuf, Mode) {
    let mut store_dir = PathBuf::from(".harness/sessions");
    let (mut resume, mut answer, mut interrupt) = (None, None, None);
    let mut sessions_args = None;
    let mut args = Args::from_env(USAGE);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "sessions" => {
                sessions_args = Some(args.rest());
                break;
            }
            "--store" => store_dir = PathBuf::from(args.value("--store")),
            "--resume" => resume = Some(SessionId::from(args.value("--resume"))),
            "--answer" => answer = Some(args.value("--answer")),
            "--interrupt" => interrupt = Some(InterruptId::from(args.value("--interrupt"))),
            other => args.unknown(other),
        }
    }
    let mode = match (sessions_args, resume, answer) {
        (Some(sessions_args), None, None) if interrupt.is_none() => {
            // Its usage, or its help: exits 2 (0 for --help).
            match SessionsCommand::parse_args(sessions_args) {
                Ok(command) => Mode::Sessions(command),
                Err(CommandError::Usage(e)) => e.exit(),
                Err(e) => USAGE.fail(e),
            }
        }
        (Some(_), ..) => {
            USAGE.fail("`sessions` does not go with --resume, --answer or --interrupt")
        }
        (None, None, None) if interrupt.is_none() => Mode::New,
        (None, Some(session), Some(answer)) => Mode::Resume {
            session,
            answer,
            interrupt,
        },
        (None, Some(_), None) => USAGE.fail("--resume needs --answer TEXT"),
        (None, None, _) => USAGE.fail("--answer and --interrupt go with --resume SESSION"),
    };
    (store_dir, mode)
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let (store_dir, mode) = options();
    // Only a new run may create the store: the other modes read a session
    // that must be there already.
    if !matches!(mode, Mode::New) {
        existing_store(&store_dir)?;
    }
    let store = SledStore::open(&store_dir)?;
    let notify: Arc<dyn Fn(&str) + Send + Sync> =
        Arc::new(|m: &str| println!("  side effect: {m}"));
    let harness = Harness::<Claim, Deps>::builder_with(DepsFixed { notify })
        .step("review")
        .run(review)
        .next("approve")
        .step("approve")
        .run(approve)
        .route(|c: &Claim| {
            if c.approved == Some(true) {
                "approved"
            } else {
                "rejected"
            }
        })
        .on("approved")
        .to("pay")
        .on("rejected")
        .end()
        .step("pay")
        .run(pay)
        .end()
        .start("review")
        .store(store)
        .build()?;
    let agent = create_agent("expenses", &harness);

    let outcome = match mode {
        Mode::Sessions(command) => {
            match command.run(&agent, || ()).await {
                Ok(text) => print!("{text}"),
                Err(CommandError::Session(e)) => return Err(in_store(e, &store_dir)),
                Err(e) => {
                    // What could be read, before the error says what could not.
                    if let CommandError::Unreadable { shown, .. } = &e {
                        print!("{shown}");
                    }
                    return Err(e.into());
                }
            }
            return Ok(());
        }
        Mode::New => {
            let claim = Claim {
                employee: "Ada".into(),
                amount_cents: 12_345,
                log: vec![],
                approved: None,
            };
            agent.run(claim).await?
        }
        Mode::Resume {
            session,
            answer,
            interrupt,
        } => {
            // The session knows what it waits for.
            let head = agent
                .session(&session)
                .await
                .map_err(|e| in_store(e, &store_dir))?;
            let id = match (interrupt, head.phase) {
                (Some(id), SessionPhase::Interrupted { .. }) => id,
                (None, SessionPhase::Interrupted { interrupt }) => interrupt.id,
                (_, other) => return Err(not_waiting(&session, &other).into()),
            };
            println!("resuming session {session} with answer {answer:?}");
            agent.resume(answer, &session, &id).await?.await?
        }
    };

    if outcome.signal == Signal::INTERRUPT {
        let i = outcome
            .interrupt
            .as_ref()
            .ok_or("an interrupt outcome carries its interrupt")?;
        println!("paused: {}", i.payload);
        println!("session:   {}", outcome.session_id);
        println!("interrupt: {}", i.id);
        println!(
            "continue in another process:\n  cargo run -p harness-examples --example interrupt_resume -- --store {} --resume {} --answer yes",
            store_dir.display(),
            outcome.session_id
        );
    } else {
        println!(
            "completed with `{}` after {} steps in this run",
            outcome.signal, outcome.steps
        );
        for line in &outcome.state.log {
            println!("  log: {line}");
        }
        let history = agent.history(&outcome.session_id).await?;
        let steps: Vec<_> = history.iter().map(|c| c.step.as_str()).collect();
        println!("checkpoints: {}", steps.join(" → "));
    }
    Ok(())
}
