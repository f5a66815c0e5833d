//! A worker process for the fan-out crash test: fans out over `ITEMS` items
//! on a sled store, three branches at a time, each branch two steps, and
//! reports each branch step once its checkpoint is durable.
//!
//! `fanout_worker start|recover STORE_DIR SESSION ITEMS LEASE_MS [sub]`
//!
//! With `sub`, the loop is a sub-agent instead: one step of the parent runs
//! a child loop of `ITEMS` ticks, each reported once durable.

use futures::StreamExt;
use harness::session::SessionConfig;
use harness::{Cx, Harness, HarnessState, RunEvent, SessionId, create_agent};
use harness_stores::SledStore;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

/// What the branches did, and by which process.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Fan {
    items: Vec<u64>,
    /// (item, process) for each branch's first step.
    #[field(reduce = append)]
    worked: Vec<(u64, u32)>,
    /// (item, process) for each branch's second step.
    #[field(reduce = append)]
    checked: Vec<(u64, u32)>,
    /// The join's runs.
    #[field(reduce = add)]
    joins: u32,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (mode, dir, session, items, lease_ms, sub) = match args.as_slice() {
        [_, mode, dir, session, items, lease_ms] => (mode, dir, session, items, lease_ms, false),
        [_, mode, dir, session, items, lease_ms, sub] if sub == "sub" => {
            (mode, dir, session, items, lease_ms, true)
        }
        _ => {
            return Err(
                "usage: fanout_worker start|recover STORE_DIR SESSION ITEMS LEASE_MS [sub]".into(),
            );
        }
    };
    if sub {
        return sub_agent(mode, dir, session, items.parse()?, lease_ms.parse()?).await;
    }
    let items: u64 = items.parse()?;
    let config = SessionConfig {
        lease_ttl: Duration::from_millis(lease_ms.parse()?),
        ..SessionConfig::default()
    };
    let harness = Harness::<Fan>::builder()
        .step("split")
        .route(|_: &Fan| "items")
        .on("items")
        .fan_out("work", |s: &Fan| s.items.clone())
        .limit(3)
        .join("join")
        .step("work")
        .run_each(async |item: u64, _: Arc<Fan>, _: Cx<()>| {
            tokio::time::sleep(Duration::from_millis(15)).await;
            Ok(FanUpdate::new().worked(vec![(item, std::process::id())]))
        })
        .writes(["worked"])
        .next("check")
        .step("check")
        .run(async |s: Arc<Fan>| {
            tokio::time::sleep(Duration::from_millis(5)).await;
            // The branch sees its own first step: exactly one entry.
            let [(item, _)] = s.worked[..] else {
                return Err(harness::StepError::msg(format!(
                    "a branch saw {:?}",
                    s.worked
                )));
            };
            Ok(FanUpdate::new().checked(vec![(item, std::process::id())]))
        })
        .writes(["checked"])
        .next("join")
        .step("join")
        .run(async |_: Arc<Fan>| Ok(FanUpdate::new().joins(1)))
        .end()
        .start("split")
        .store(SledStore::open(dir)?)
        .session_config(config)
        .build()?;
    let agent = create_agent("fanout", &harness);
    let session = SessionId::from(session.as_str());
    let run = match mode.as_str() {
        "start" => agent.run_in(
            session,
            Fan {
                items: (0..items).collect(),
                ..Fan::default()
            },
        ),
        "recover" => harness_tests::recover_when_free(&agent, &session).await?,
        other => return Err(format!("unknown mode {other}").into()),
    };
    let mut events = run.events();
    let printer = tokio::spawn(async move {
        while let Some(e) = events.next().await {
            if let RunEvent::StepFinished { path, step, .. } = e
                && !path.is_root()
            {
                // Sent after the step's checkpoint was committed and flushed.
                println!("durable {path} {step}");
            }
        }
    });
    let outcome = run.await?;
    printer.await?;
    println!(
        "final {}",
        serde_json::to_string(&(
            outcome.state.worked,
            outcome.state.checked,
            outcome.state.joins
        ))?
    );
    Ok(())
}

/// The child loop's state: its ticks, each with the process that ran it.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Ticks {
    until: u64,
    #[field(reduce = append)]
    ticks: Vec<(u64, u32)>,
}

/// The parent's state: what the sub-agent's step mapped out.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Parent {
    ticks: u64,
    #[field(reduce = append)]
    done: Vec<(u64, u32)>,
    #[field(reduce = add)]
    ends: u32,
}

async fn sub_agent(
    mode: &str,
    dir: &str,
    session: &str,
    ticks: u64,
    lease_ms: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    let child = Harness::<Ticks>::builder()
        .step("tick")
        .run(async |s: Arc<Ticks>| {
            tokio::time::sleep(Duration::from_millis(3)).await;
            Ok(TicksUpdate::new().ticks(vec![(s.ticks.len() as u64, std::process::id())]))
        })
        .route(|s: &Ticks| {
            if (s.ticks.len() as u64) < s.until {
                "again"
            } else {
                "done"
            }
        })
        .on("again")
        .to("tick")
        .on("done")
        .end()
        .start("tick")
        .build()?;
    let harness = Harness::<Parent>::builder()
        .step("work")
        .sub_agent(harness::SubAgent::new(
            &child,
            |p: &Parent| Ticks {
                until: p.ticks,
                ticks: vec![],
            },
            |_: &Parent, done| ParentUpdate::new().done(done.state.ticks).ends(1),
        ))
        .end()
        .start("work")
        .store(SledStore::open(dir)?)
        .session_config(SessionConfig {
            lease_ttl: Duration::from_millis(lease_ms),
            ..SessionConfig::default()
        })
        .build()?;
    let agent = create_agent("sub", &harness);
    let session = SessionId::from(session);
    let run = match mode {
        "start" => agent.run_in(
            session,
            Parent {
                ticks,
                done: vec![],
                ends: 0,
            },
        ),
        "recover" => harness_tests::recover_when_free(&agent, &session).await?,
        other => return Err(format!("unknown mode {other}").into()),
    };
    let mut events = run.events();
    let printer = tokio::spawn(async move {
        while let Some(e) = events.next().await {
            if let RunEvent::Child {
                path,
                step,
                kind,
                detail,
            } = e
                && &*kind == "step_finished"
            {
                // Sent after the child step's record was committed and flushed.
                println!("durable {path} {step} {}", detail["index"]);
            }
        }
    });
    let outcome = run.await?;
    printer.await?;
    println!(
        "final {}",
        serde_json::to_string(&(outcome.state.done, outcome.state.ends))?
    );
    Ok(())
}
