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

use harness::session::SessionPhase;
use harness::{
    Context, Cx, Harness, HarnessState, JsonSchema, SessionId, Signal, StepResult, create_agent,
    schemars,
};
use harness_stores::SledStore;
use serde::{Deserialize, Serialize};
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

fn usage() -> ! {
    eprintln!(
        "usage: interrupt_resume [--store DIR]\n       interrupt_resume [--store DIR] --resume SESSION --answer TEXT [--interrupt ID]\n       interrupt_resume [--store DIR] sessions list | show SESSION | history SESSION | resume SESSION ANSWER | stop SESSION"
    );
    std::process::exit(2)
}

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut store_dir = ".harness/sessions".to_string();
    let (mut resume, mut answer, mut interrupt) = (None, None, None);
    let mut sessions_args = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "sessions" {
            sessions_args = Some(args.by_ref().collect::<Vec<_>>());
            break;
        }
        let mut value = || args.next().unwrap_or_else(|| usage());
        match arg.as_str() {
            "--store" => store_dir = value(),
            "--resume" => resume = Some(SessionId::from(value())),
            "--answer" => answer = Some(value()),
            "--interrupt" => interrupt = Some(harness::InterruptId::from(value())),
            _ => usage(),
        }
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

    if let Some(args) = sessions_args {
        match harness::cli::sessions_command(&agent, args, || ()).await {
            Ok(text) => print!("{text}"),
            // The usage, or the help; exits 2 (0 for --help).
            Err(harness::cli::CommandError::Usage(e)) => e.exit(),
            Err(e) => {
                // What could be read, before the error says what could not.
                if let harness::cli::CommandError::Unreadable { shown, .. } = &e {
                    print!("{shown}");
                }
                return Err(e.into());
            }
        }
        return Ok(());
    }

    let outcome = match (resume, answer) {
        (None, None) => {
            let claim = Claim {
                employee: "Ada".into(),
                amount_cents: 12_345,
                log: vec![],
                approved: None,
            };
            agent.run(claim).await?
        }
        (Some(session), Some(answer)) => {
            let id = match interrupt {
                Some(id) => id,
                // The session knows what it waits for.
                None => match agent.session(&session).await?.phase {
                    SessionPhase::Interrupted { interrupt } => interrupt.id,
                    other => {
                        return Err(format!("session {session} is not waiting: {other:?}").into());
                    }
                },
            };
            println!("resuming session {session} with answer {answer:?}");
            agent.resume(answer, &session, &id).await?.await?
        }
        _ => usage(),
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
            "continue in another process:\n  cargo run -p harness-examples --example interrupt_resume -- --store {store_dir} --resume {} --answer yes",
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
