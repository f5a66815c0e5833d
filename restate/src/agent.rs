//! Harness agents served as Restate virtual objects.
//!
//! One virtual object per agent, `HarnessAgent` unless named, keyed by
//! session id.
//! Its handlers are exclusive, so the runs of one session go one after the
//! other (Restate queues later calls), while sessions run side by side.
//!
//! - `run` (an update of the agent's state, a JSON object of the fields to
//!   change) starts a run on the session: its stored state with the update
//!   merged, from the start step ([`Agent::continue_session`]); a session
//!   that does not exist yet starts from the state's defaults. Its input
//!   must be a JSON object: any other JSON (an array, which serde would
//!   read as the update's fields in order; a string, a number, a boolean,
//!   `null`) is refused with a terminal error, 400, as
//!   [`AgentClient::run`] refuses it before sending, and nothing runs. An
//!   object whose field does not read as the update's is refused so too
//!   (400), naming the field by its path (`kb`, `parts[1]`).
//! - `resume` (`{"interrupt": id, "answer": …}`, a JSON object too: any
//!   other JSON is refused, 400) answers the interrupt the session waits
//!   on ([`Agent::resume`]).
//! - `stop` ends the run that waits for an answer, as stopped (see
//!   **Stop** below).
//! - `session` (shared: it does not wait for a running handler) reads the
//!   session's head and checkpoint log ([`Snapshot`]).
//!
//! # How a run is made durable
//!
//! The session lives in the object's Restate state: its head under `head`,
//! each run's checkpoints under a key of their own (`cp/{first}-{last}`). A
//! handler attempt
//! loads the head and the checkpoints from the latest snapshot on (what a
//! run needs) into a [`MemoryStore`] of its own, runs the agent on it
//! ([`RestateSessions`], the core's `SessionStore`), and when the run
//! settles saves what changed: the new head, the checkpoints it added, the
//! superseded snapshots it removed. That change is the size of the run,
//! not of the session: a session of many runs costs each run no more.
//! A replayed handler must write the same bytes (Restate checks each state
//! write against its journal). A run of one task at a time takes its ids
//! and times from its journal, so its change is written as plain state,
//! with no round trip of its own; any other run (a fork, a fan-out, a
//! sub-agent, a cancelled or failed run, one with no effect) journals its change in
//! an entry of its own first (`save session`); see [`replayable`].
//! Large values go by reference: a field of a checkpoint's state or update
//! of [`BY_REFERENCE_BYTES`](crate::BY_REFERENCE_BYTES) or more
//! is kept once under `val/{sha256}` (counted in `vals`, cleared when no
//! kept checkpoint holds it), written by the run that first holds it (and
//! journaled in an entry of its own when its save is), and the checkpoint
//! keeps its hash.
//! Every `cx.once` of the run's steps, its sub-agents' included,
//! goes through `ctx.run` ([`RestateEffects`], the core's
//! [`EffectJournal`]). Both reach the attempt through a task-local of the
//! run's task (a run is one future: its branches and sub-agents are in it),
//! so an attempt Restate gave up on cannot touch the next one's session or
//! journal; a step that spawns a task of its own must not use `cx` in it.
//!
//! **An effect's entry and its completion go out together** where they
//! can. Until a `ctx.run` of the attempt has started its closure, Restate
//! may still be replaying the journal, so a step waits to be told to run
//! its effect: the closure tells it (Restate, answering from the journal,
//! never calls it), and the SDK sends the entry when the `ctx.run` is made
//! and its completion when the effect ends, in two writes. Once a closure
//! has started, the journal has been replayed to its end (the SDK starts
//! one only then) and no later effect of the attempt can be answered from
//! it: the step runs each later effect as soon as it asks, and the
//! `ctx.run` is made with the outcome in hand, so its closure returns at
//! once and the SDK queues the entry and its completion together, which
//! then usually go out in one write, as a bare handler's do with an effect
//! that takes no time. So the effects asked before the first closure of
//! an attempt starts (its first effect, or the first round of a fork, on
//! each attempt: retries and resumptions too) pay for the second write
//! (with Nagle's algorithm on the service's sockets, a completion sent
//! alone waits for the server's delayed ACK, about 40 ms; see
//! [`nodelay_listener`](crate::nodelay_listener)). The entry is the same
//! either way, and a replay reads both alike. An effect run ahead runs
//! before its entry exists: a service that dies (or a handler that
//! suspends) between the two runs it again on the next attempt, as one
//! that dies before its completion is acknowledged does. A cancellation
//! that arrives while an effect runs ahead is seen when its entry is made
//! or acknowledged: the effect has run (its outcome is journaled if the
//! cancellation came after the entry was made), and the step gets the
//! cancellation's failure. Were Restate ever to answer an effect run ahead
//! from its journal (past a started closure, the SDK does not), the step
//! fails with an error saying so, logged.
//!
//! When the service dies mid-run, Restate
//! invokes the handler again, the run starts again from the state saved
//! before it, and each effect already journaled returns its journaled
//! outcome instead of running again. So every effect runs once, and steps
//! must follow the rule of [`harness::effect`]: I/O only through `cx`.
//!
//! An interrupt ends the handler: the session is saved waiting, and a
//! `resume` (from any process, through the ingress) continues it. Waiting
//! for a human does not hold the session's lock, so a wrongly shaped answer
//! is refused (the reply says why) and the session still waits.
//!
//! **Stop** is Restate's cancellation of the invocation
//! ([`Admin::cancel`](crate::Admin::cancel)). A cancellation reaches a run
//! at its next journaled operation, not before: a step that waits, or
//! makes no effect (a model's turn through `cx.complete`), runs on
//! meanwhile.
//! - At an effect (when its entry is made or acknowledged, so an effect
//!   run ahead has run; see above), the step gets the cancellation's
//!   failure: the run ends there, failed with a message saying it was
//!   cancelled, and the session is saved.
//! - Past the run's last effect, at the save of its session, where that
//!   save is journaled (a fork, a fan-out, a sub-agent, a run that made no
//!   effect or failed; see [`replayable`]): the run has ended, and ends
//!   failed all the same, with a message saying it was cancelled after its
//!   steps had ended and how it had ended (completed, paused for an answer,
//!   which it then no longer waits for, or failed); its session is saved
//!   with what it did (its input, the steps it completed) and that
//!   failure, which its caller gets. A `resume` whose answer was refused
//!   ([`Reply::Rejected`]) ran nothing, and stays as it is.
//! - Never, for a cancellation that arrives after the run's last journaled
//!   operation: a run of one task at a time that made an effect saves its
//!   session as plain state, with no journaled operation after its last
//!   effect, and so does a run whose save was journaled before the
//!   cancellation came. The run ends as it would have, and its session is
//!   saved so: the cancellation changes nothing.
//!
//! The session is saved in every case.
//!
//! **A run after a cancelled or failed one** starts, as every `run` does,
//! from the start step, with the state the session saved (the updates of
//! the steps the earlier run completed included): it does not pick up
//! where that run stopped. The steps it runs again run their effects
//! again, for their journal was the earlier invocation's: an effect that
//! must not run twice needs a step that checks, from the state or the
//! world, whether it ran.
//!
//! **A run that waits for an answer** has no invocation under way: the
//! handler that paused it has returned, so there is nothing to cancel
//! (Restate answers a cancellation of that invocation 409, *already
//! completed*), and a new run is refused while the session waits (409).
//! [`AgentClient::stop`] (the object's `stop` handler) ends it. The core's
//! [`Agent::stop_session`] leaves a session paused for a human as it is
//! ([`Stopping::NotRunning`]), for in the core a pause is a run's end as
//! far as stopping goes; here `stop` is the way to end exactly that run,
//! and it ends it as the core ends a run no process holds (one waiting for
//! a worker, [`Stopping::Stopped`]), through that same call of the core:
//! the session completes with `$stopped` (its state as the interrupt left
//! it, the interrupted step kept as the step to run next, with what its
//! journal held, as a stopped run keeps them), the interrupt is no longer
//! pending, and the reply is [`Reply::Completed`] with that signal, as a
//! run stopped in its own process reports it. No step runs, and no answer
//! is recorded. The session then takes new runs; a late answer to the old
//! interrupt is refused (`resume` answers 404, a
//! [`RestateError::Status`](crate::RestateError::Status) saying the run is
//! not paused on that interrupt), never applied. A completed or failed
//! session is left as it is, as the core leaves it: `stop` answers 409
//! saying how its last run ended (404 for no session). The handler is
//! exclusive: called while a run of the session is under way, it waits for
//! that run to settle (as every call on the session does), then stops it if
//! it paused for an answer; to stop a run under way, cancel its invocation.
//!
//! **Divergence**: a replay that asks for an effect other than the one the
//! journal holds at that point is refused by Restate (a journal mismatch,
//! retried by its policy); [`Admin::invocation`](crate::Admin::invocation)
//! shows it ([`Invocation::divergence`](crate::Invocation::divergence)):
//! Restate's message names both effects when the journal holds an effect
//! there, only the two calls' types when it holds another kind of call (a
//! replay that asks for fewer effects, and saves where the journal holds
//! one); the journal's call and the replay's are then named apart
//! ([`Invocation::journaled_call`](crate::Invocation::journaled_call),
//! [`Invocation::failed_call`](crate::Invocation::failed_call)).
//! Its session waits behind it until it is killed
//! ([`Admin::kill`](crate::Admin::kill)). The killed run is not saved: the
//! session keeps what it held before the run (a session the run created
//! has nothing: [`AgentClient::session`] answers `None`), for a handler
//! writes the session only when the run settles. The effects it ran are
//! not undone. The next run starts afresh from that last saved state, at
//! the start step, and runs its effects anew.
//!
//! **Reading sessions**: [`RestateSessionReader`](crate::RestateSessionReader)
//! reads them from the admin API as a `SessionStore`, for the studio.
//!
//! **Forks and fan-outs** run their branches side by side, and their
//! effects side by side by rounds. Restate replays a journal by call order,
//! so the entries a run makes must not depend on timing; and the Rust SDK
//! (0.13) runs one `ctx.run` at a time (with two under way, it asks for the
//! first to be run again when the second is made: restatedev/sdk-rust#72).
//! So the branches' effects are handed over a round at a time
//! ([`EffectJournal::batches`]): every branch's first effect, then every
//! branch's second, and so on (at most the fork's limit per round), each
//! round one `ctx.run` (`round of N: first … last #digest`, the digest of
//! every effect's name in it) whose closure runs its effects at once and
//! journals their outcomes together, each with its effect's name: a replay
//! that asks for another effect anywhere in a round is a journal mismatch,
//! refused and retried as a single effect's is. A round is made
//! once each of its branches has asked for its effect or ended, so a
//! replay makes the same rounds. The price: a crash mid-round runs the
//! whole round again, its finished effects included (one entry holds
//! them all). A fan-out killed between rounds is replayed like any run:
//! the rounds journaled before the kill are answered from the journal, the
//! rest run once.
//!
//! **Several agents**: an [`AgentObject`] bound as it is serves as
//! `HarnessAgent`; [`agent_object!`](crate::agent_object) declares an
//! object of another name, so that one deployment (and one Restate server)
//! serves several agents; [`AgentClient::object`] calls it.
//!
//! ```no_run
//! use harness::{Cx, Harness, HarnessState, StepResult, create_agent, schemars};
//! use harness_restate::Durable;
//! use restate_sdk::prelude::{Endpoint, HttpServer};
//! use std::sync::Arc;
//!
//! #[derive(Clone, Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema, HarnessState)]
//! struct Job {
//!     #[field(reduce = append)]
//!     log: Vec<String>,
//! }
//!
//! async fn work(_: Arc<Job>, cx: Cx<()>) -> StepResult<JobUpdate> {
//!     let receipt: String = cx.once("charge", async { "charged".to_string() }).await?;
//!     Ok(JobUpdate::new().log(vec![receipt]))
//! }
//!
//! # async fn serve() -> Result<(), Box<dyn std::error::Error>> {
//! let durable = Durable::new();
//! let harness = Harness::<Job>::builder()
//!     .step("work").run(work).end()
//!     .start("work")
//!     .store(durable.store())
//!     .effects(durable.effects())
//!     .build()?;
//! let object = durable.object(create_agent("job", &harness))?;
//! // TCP_NODELAY: see `nodelay_listener`.
//! let listener = harness_restate::nodelay_listener("127.0.0.1:9080".parse()?)?;
//! HttpServer::new(Endpoint::builder().bind(object).build())
//!     .serve(listener)
//!     .await;
//! # Ok(()) }
//! ```

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::future::BoxFuture;
use harness::effect::{EffectError, EffectId, EffectJournal, Journaled, PendingEffect};
use harness::session::{
    Checkpoint, Commit, SessionError, SessionPhase, SessionStore, StoreError, StoredRun,
};
use harness::slots::NoSlots;
use harness::step::Interrupt;
use harness::{
    Agent, Context, HarnessState, InterruptId, RunError, SessionId, Signal, Stopping, secrets,
};
use harness_stores::MemoryStore;
use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

pub use crate::sessions::{OBJECT, Snapshot};

pub(crate) use crate::sessions::{HEAD, checkpoints_key, checkpoints_range};
use crate::sessions::{Kept, VALUES, account, by_reference, hashes, restore, value_key};
use std::collections::{BTreeMap, HashMap};

pub mod replayable;
use replayable::{Before, Clock, Stamped};

/// How a `run` or `resume` settled (or a `stop` ended a run: `Completed`
/// with `$stopped`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Reply {
    /// The run ended with `signal`.
    Completed {
        /// The final signal.
        signal: String,
        /// The final state.
        state: Value,
    },
    /// The run waits for an answer to `interrupt`.
    Interrupted {
        /// What was asked, and the id a resume must give.
        interrupt: Interrupt,
        /// The state so far.
        state: Value,
    },
    /// The answer does not have the shape the step reads: it was not kept,
    /// and the session still waits on `interrupt`.
    Rejected {
        /// The interrupt, still pending.
        interrupt: InterruptId,
        /// What is wrong with the answer.
        reason: String,
    },
    /// The run failed; the session records the failure.
    Failed {
        /// The error, rendered.
        error: String,
    },
}

/// What `resume` is given.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    /// The interrupt answered.
    pub interrupt: InterruptId,
    /// The answer, in the shape the step reads.
    pub answer: Value,
}

/// The default bound on the bytes of one effect's entry in Restate's
/// journal ([`Durable::max_effect_bytes`]): 31 MiB, a margin under the
/// 32 MiB a message between the Restate server and a service may take by
/// default (the server's `worker.invoker.message-size-limit`), for the
/// rest of the message.
pub const MAX_EFFECT_BYTES: usize = 31 << 20;

/// The store and effect journal of agents served on Restate; see the
/// [module docs](self).
#[derive(Clone, Debug)]
pub struct Durable {
    store: RestateSessions,
    effects: RestateEffects,
    max_effect_bytes: usize,
}

impl Default for Durable {
    fn default() -> Self {
        Self {
            store: RestateSessions::default(),
            effects: RestateEffects::default(),
            max_effect_bytes: MAX_EFFECT_BYTES,
        }
    }
}

impl Durable {
    /// A store and a journal with nothing in them.
    pub fn new() -> Self {
        Self::default()
    }

    /// The most bytes one effect's entry in Restate's journal may take
    /// (as JSON: the effect's outcome, its value or its failure's message,
    /// and a few bytes more; for a round of a fork's effects, which share
    /// one entry, their outcomes together), [`MAX_EFFECT_BYTES`] unless
    /// set. Restate refuses a message larger than its limit and retries
    /// it without end, the effect running again each time while the
    /// session's later calls wait; so an outcome that would make a larger
    /// entry is not journaled: the entry holds a failure instead, saying
    /// which effect returned how many bytes, and the step that asked for
    /// it fails (once: its effect has run, and a later run runs it again).
    /// In a round, the largest outcomes are replaced until the entry fits.
    ///
    /// Set it under the Restate server's message size limit when that is
    /// lowered, or raise both together; the objects this `Durable` makes
    /// ([`object`](Self::object)) take the bound it has then.
    #[must_use]
    pub fn max_effect_bytes(mut self, bytes: usize) -> Self {
        self.max_effect_bytes = bytes;
        self
    }

    /// The session store to build the agent's harness with
    /// ([`HarnessBuilder::store`](harness::graph::HarnessBuilder::store)).
    pub fn store(&self) -> RestateSessions {
        self.store.clone()
    }

    /// The effect journal to build the agent's harness with
    /// ([`HarnessBuilder::effects`](harness::graph::HarnessBuilder::effects)).
    pub fn effects(&self) -> RestateEffects {
        self.effects.clone()
    }

    /// The virtual object serving `agent`, whose harness was built with
    /// [`store`](Self::store) and [`effects`](Self::effects): bind it to a
    /// Restate endpoint.
    ///
    /// # Errors
    ///
    /// [`NotDurable`] if the harness has no session store or no effect
    /// journal: its effects would run again on every replay.
    pub fn object<S, C>(&self, agent: Agent<S, C>) -> Result<AgentObject, NotDurable>
    where
        S: HarnessState,
        C: Context,
        C::Run: NoSlots,
    {
        let missing = match (agent.has_store(), agent.journals_effects()) {
            (true, true) => {
                return Ok(AgentObject {
                    driver: Arc::new(agent),
                    max_effect_bytes: self.max_effect_bytes,
                });
            }
            (false, true) => "`.store(durable.store())`",
            (true, false) => "`.effects(durable.effects())`",
            (false, false) => "`.store(durable.store())` and `.effects(durable.effects())`",
        };
        Err(NotDurable {
            agent: agent.id().to_owned(),
            missing,
        })
    }
}

/// An agent whose harness lacks what a run on Restate needs.
#[derive(Debug, thiserror::Error)]
#[error("agent `{agent}` cannot be served on Restate: build its harness with {missing}")]
pub struct NotDurable {
    /// The agent.
    pub agent: String,
    /// What its harness builder lacks.
    pub missing: &'static str,
}

/// What one attempt of a handler lends the run it drives: the channel to
/// the handler (which owns the Restate context) and the session, loaded
/// from Restate. A task-local of the run's task: a run is one future (its
/// branches and sub-agents included), so everything it does sees its own
/// attempt, and a stale attempt's run (Restate gave up on it) can reach
/// neither the new attempt's journal nor its session.
struct Attempt {
    effects: mpsc::UnboundedSender<EffectRequest>,
    store: MemoryStore,
    /// Stops the run when the invocation is cancelled.
    stop: std::sync::Mutex<Option<harness::StopHandle>>,
    /// The run's times and seed as its journal tells them (see
    /// [`replayable`]).
    clock: std::sync::Mutex<Clock>,
    /// The id of a run this attempt starts (see [`replayable`]).
    run_id: harness::RunId,
    /// Set once a `ctx.run` of this attempt has started its closure: Restate
    /// has replayed the whole journal, so no later effect of the attempt
    /// can be answered from it, and a step runs each effect before its
    /// entry is made ([`Go::Ahead`]). Cleared for good when the invocation
    /// is cancelled.
    ahead: AtomicBool,
    /// [`Durable::max_effect_bytes`]: the most one effect's entry takes.
    max_effect_bytes: usize,
}

impl Attempt {
    fn clock(&self) -> std::sync::MutexGuard<'_, Clock> {
        self.clock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

tokio::task_local! {
    static ATTEMPT: Arc<Attempt>;
}

fn attempt() -> Option<Arc<Attempt>> {
    ATTEMPT.try_with(Arc::clone).ok()
}

const OUTSIDE: &str = "outside a Restate handler's run (a step that spawns a task of its own must not use `cx` in it)";

/// The core's [`EffectJournal`] on Restate: each effect is a `ctx.run` of
/// the handler attempt that drives the run.
#[derive(Clone, Debug, Default)]
pub struct RestateEffects(());

/// The core's [`SessionStore`] on Restate: the session of the handler
/// attempt that drives the run, loaded from the virtual object's state and
/// saved back when the run settles. Fails outside a handler's run.
#[derive(Clone, Debug, Default)]
pub struct RestateSessions(());

fn store() -> Result<Arc<Attempt>, StoreError> {
    attempt().ok_or_else(|| StoreError::Backend {
        message: format!("the Restate session store was used {OUTSIDE}"),
    })
}

#[async_trait::async_trait]
impl SessionStore for RestateSessions {
    async fn load(&self, session: &SessionId) -> Result<Option<StoredRun>, StoreError> {
        store()?.store.load(session).await
    }

    async fn commit(&self, commit: &Commit) -> Result<(), StoreError> {
        let attempt = store()?;
        attempt.store.commit(commit).await?;
        attempt
            .clock()
            .committed(commit.append.iter().map(|cp| cp.seq));
        Ok(())
    }

    async fn checkpoints(
        &self,
        session: &SessionId,
        from_seq: u64,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        store()?.store.checkpoints(session, from_seq).await
    }

    async fn sessions(&self) -> Result<Vec<SessionId>, StoreError> {
        store()?.store.sessions().await
    }

    async fn flush(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

/// Effects a step (or a round of a fork's branches) asks for, sent to the
/// handler that owns the context: one `ctx.run` journals them all.
struct EffectRequest {
    effects: Vec<Asked>,
}

/// One effect of an [`EffectRequest`].
struct Asked {
    name: String,
    go: Go,
    /// The outcome as journaled.
    done: oneshot::Sender<Result<Outcome, String>>,
}

/// How the step that asked for an effect learns that it runs it.
enum Go {
    /// While the journal may hold the effect: sent a channel for the
    /// outcome when `ctx.run` runs its closure; dropped unsent when Restate
    /// answers from its journal.
    Decide(oneshot::Sender<oneshot::Sender<Outcome>>),
    /// Past the journal's end ([`Attempt::ahead`]): the step was told to run
    /// the effect when it asked (at `started`, ms since the epoch), and
    /// sends its outcome here. The `ctx.run` is made once the outcome is
    /// in, so its closure returns at once and the SDK queues the entry and
    /// its completion together (usually one write), as a handler whose
    /// effect runs inside `ctx.run` does with an effect that takes no
    /// time; made with the effect still running, the entry would go out
    /// alone, and the completion after it in a second write.
    Ahead {
        started: u64,
        outcome: oneshot::Receiver<Outcome>,
    },
}

/// An effect's outcome, as journaled: its value or its failure's message.
type Outcome = Result<Value, String>;

struct Pending {
    outcome: oneshot::Sender<Outcome>,
    done: oneshot::Receiver<Result<Outcome, String>>,
    name: String,
}

fn journal_lost(name: &str, why: &str) -> EffectError {
    EffectError::new(format!("effect {name}: the Restate handler {why}"))
}

impl PendingEffect for Pending {
    fn finish(
        self: Box<Self>,
        outcome: Outcome,
    ) -> BoxFuture<'static, Result<Outcome, EffectError>> {
        let Pending {
            outcome: tx,
            done,
            name,
        } = *self;
        Box::pin(async move {
            let _ = tx.send(outcome);
            match done.await {
                Ok(Ok(outcome)) => Ok(outcome),
                Ok(Err(e)) => Err(journal_lost(&name, &format!("could not journal it: {e}"))),
                Err(_) => Err(journal_lost(&name, "ended before journaling it")),
            }
        })
    }
}

impl RestateEffects {
    /// Sends `effects` to the handler as one request, and gives each its
    /// answer: run it now, or its outcome from the journal.
    async fn ask(effects: &[EffectId]) -> Result<Vec<Journaled>, EffectError> {
        let names: Vec<String> = effects.iter().map(EffectId::name).collect();
        let first = names.first().cloned().unwrap_or_default();
        let attempt =
            attempt().ok_or_else(|| EffectError::new(format!("effect {first}: {OUTSIDE}")))?;
        let tx = attempt.effects.clone();
        if attempt.ahead.load(Ordering::Acquire) {
            let started = harness::session::now_millis();
            let mut asked = Vec::with_capacity(names.len());
            let mut answers = Vec::with_capacity(names.len());
            for name in names {
                let (outcome_tx, outcome) = oneshot::channel();
                let (done_tx, done) = oneshot::channel();
                asked.push(Asked {
                    name: name.clone(),
                    go: Go::Ahead { started, outcome },
                    done: done_tx,
                });
                answers.push(Journaled::Run(Box::new(Pending {
                    outcome: outcome_tx,
                    done,
                    name,
                })));
            }
            tx.send(EffectRequest { effects: asked })
                .map_err(|_| journal_lost(&first, "has ended"))?;
            return Ok(answers);
        }
        let mut asked = Vec::with_capacity(names.len());
        let mut waiting = Vec::with_capacity(names.len());
        for name in names {
            let (decide, decided) = oneshot::channel();
            let (done_tx, done) = oneshot::channel();
            asked.push(Asked {
                name: name.clone(),
                go: Go::Decide(decide),
                done: done_tx,
            });
            waiting.push((name, decided, done));
        }
        tx.send(EffectRequest { effects: asked })
            .map_err(|_| journal_lost(&first, "has ended"))?;
        let mut answers = Vec::with_capacity(waiting.len());
        for (name, decided, done) in waiting {
            answers.push(match decided.await {
                Ok(outcome) => Journaled::Run(Box::new(Pending {
                    outcome,
                    done,
                    name,
                })),
                // Answered from the journal: the closure never ran.
                Err(_) => match done.await {
                    Ok(Ok(outcome)) => Journaled::Recorded(outcome),
                    Ok(Err(e)) => {
                        return Err(journal_lost(&name, &format!("could not replay it: {e}")));
                    }
                    Err(_) => return Err(journal_lost(&name, "ended before answering")),
                },
            });
        }
        Ok(answers)
    }
}

impl EffectJournal for RestateEffects {
    /// The attempt's: derived from what its journal holds before the run
    /// (see [`replayable`]).
    fn run_id(&self) -> Option<harness::RunId> {
        attempt().map(|a| a.run_id.clone())
    }

    fn begin<'a>(&'a self, effect: &'a EffectId) -> BoxFuture<'a, Result<Journaled, EffectError>> {
        Box::pin(async move {
            let mut answers = Self::ask(std::slice::from_ref(effect)).await?;
            answers
                .pop()
                .ok_or_else(|| journal_lost(&effect.name(), "gave no answer"))
        })
    }

    /// Restate replays a journal by call order: a fork's branches hand
    /// their effects over by rounds.
    fn ordered(&self) -> bool {
        true
    }

    /// The SDK runs one `ctx.run` at a time: a round of a fork's effects
    /// is one `ctx.run`, whose closure runs them side by side.
    fn batches(&self) -> bool {
        true
    }

    fn begin_all<'a>(
        &'a self,
        effects: &'a [EffectId],
    ) -> BoxFuture<'a, Result<Vec<Journaled>, EffectError>> {
        Box::pin(Self::ask(effects))
    }
}

/// A refusal of a call: its HTTP-like code and message.
#[derive(Debug)]
struct Refused {
    code: u16,
    message: String,
}

impl Refused {
    fn of(e: &SessionError) -> Self {
        let code = match e {
            SessionError::NoInterrupt(_) | SessionError::NoSession(_) => 404,
            SessionError::PendingInterrupt(_)
            | SessionError::InFlight(_)
            | SessionError::Unfinished { .. } => 409,
            _ => 500,
        };
        let message = match e {
            // Said the way a Restate client answers it.
            SessionError::PendingInterrupt(p) => format!(
                "session {} waits for an answer to interrupt {}: answer it with the object's \
                 `resume` handler (AgentClient::resume), or end its run with `stop` \
                 (AgentClient::stop), before a new run",
                p.session, p.interrupt
            ),
            _ => e.to_string(),
        };
        Self { code, message }
    }
}

/// A typed agent behind one object-safe interface.
trait Driver: Send + Sync + 'static {
    fn start(&self, session: SessionId, input: Value)
    -> BoxFuture<'static, Result<Reply, Refused>>;
    fn resume(
        &self,
        session: SessionId,
        answer: Answer,
    ) -> BoxFuture<'static, Result<Reply, Refused>>;
    fn stop(&self, session: SessionId) -> BoxFuture<'static, Result<Reply, Refused>>;
}

impl<S, C> Driver for Agent<S, C>
where
    S: HarnessState,
    C: Context,
    C::Run: NoSlots,
{
    fn start(
        &self,
        session: SessionId,
        input: Value,
    ) -> BoxFuture<'static, Result<Reply, Refused>> {
        let agent = self.clone();
        Box::pin(async move {
            // The path of the field that does not read, nested ones too
            // (`parts[1]`).
            let update: S::Update = serde_path_to_error::deserialize(input).map_err(|e| {
                let path = e.path().to_string();
                let at = if path == "." {
                    String::new()
                } else {
                    format!("field `{path}`: ")
                };
                Refused {
                    code: 400,
                    message: format!(
                        "the input is not an update of `{}`: {at}{}",
                        harness::short_type_name::<S>(),
                        e.into_inner()
                    ),
                }
            })?;
            let run = agent
                .continue_session(&session, update)
                .await
                .map_err(|e| Refused::of(&e))?;
            Ok(settle(run).await)
        })
    }

    fn resume(
        &self,
        session: SessionId,
        answer: Answer,
    ) -> BoxFuture<'static, Result<Reply, Refused>> {
        let agent = self.clone();
        Box::pin(async move {
            let run = agent
                .resume(answer.answer, &session, &answer.interrupt)
                .await
                .map_err(|e| Refused::of(&e))?;
            Ok(settle(run).await)
        })
    }

    /// Ends the run that waits for an answer as the core's stop ends a run
    /// no process holds: the head, presented to the core as what it is (a
    /// run held by no process) rather than as paused, is settled by
    /// [`Agent::stop_session`] (`$stopped`, the interrupted step next, its
    /// journal kept). Only the attempt's own copy of the head is presented
    /// so; what is saved is the core's commit.
    fn stop(&self, session: SessionId) -> BoxFuture<'static, Result<Reply, Refused>> {
        let agent = self.clone();
        Box::pin(async move {
            let head = agent.session(&session).await.map_err(|e| Refused::of(&e))?;
            if !matches!(head.phase, SessionPhase::Interrupted { .. }) {
                return Err(Refused {
                    code: 409,
                    message: nothing_waits(&session, &head.phase),
                });
            }
            let attempt = attempt().ok_or_else(|| Refused {
                code: 500,
                message: format!("the stop of session {session} ran {OUTSIDE}"),
            })?;
            let Some((mut waiting, log)) = attempt.store.export(&session) else {
                return Err(Refused {
                    code: 500,
                    message: format!("session {session} was loaded, yet is not in the attempt"),
                });
            };
            waiting.phase = SessionPhase::Running;
            waiting.lease = None;
            attempt.store.import(waiting, log);
            match agent
                .stop_session(&session)
                .await
                .map_err(|e| Refused::of(&e))?
            {
                Stopping::Stopped => {}
                other => {
                    return Err(Refused {
                        code: 500,
                        message: format!(
                            "the stop of session {session}, which waited for an answer, was \
                             not recorded: the core answered {other:?}"
                        ),
                    });
                }
            }
            let state = agent
                .state_at(&session, None)
                .await
                .map_err(|e| Refused::of(&e))?;
            Ok(Reply::Completed {
                signal: Signal::STOPPED.to_string(),
                state: redacted(&state),
            })
        })
    }
}

/// Why `stop` has nothing to stop in a session in `phase`.
fn nothing_waits(session: &SessionId, phase: &SessionPhase) -> String {
    let how = match phase {
        SessionPhase::Completed { signal } => format!("its last run completed with `{signal}`"),
        SessionPhase::Failed { error } => format!("its last run failed: {error}"),
        SessionPhase::Running => "its run is under way (cancel its invocation to stop it: \
                                  Admin::cancel)"
            .to_owned(),
        SessionPhase::Interrupted { interrupt } => {
            format!("it waits for an answer to interrupt {}", interrupt.id)
        }
    };
    format!(
        "session {session} has no run waiting for an answer to stop: {how}; nothing was changed"
    )
}

/// `state` as a reply holds it: the process's secrets replaced, as in
/// everything the session keeps.
fn redacted<S: serde::Serialize>(state: &S) -> Value {
    let mut value = serde_json::to_value(state).unwrap_or(Value::Null);
    secrets::redact_json(&mut value);
    value
}

async fn settle<S: HarnessState, C: Context>(mut run: harness::Run<S, C>) -> Reply {
    if let Some(attempt) = attempt() {
        *attempt
            .stop
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(run.stop_handle());
    }
    // The reply is journaled (and goes to the caller): the process's
    // secrets are replaced in it, as in everything the session keeps.
    let state = redacted::<S>;
    let text = |mut text: String| {
        secrets::redact_string(&mut text);
        text
    };
    match run.outcome().await {
        Ok(out) => match out.interrupt {
            Some(mut interrupt) => {
                secrets::redact_json(&mut interrupt.payload);
                Reply::Interrupted {
                    interrupt,
                    state: state(&out.state),
                }
            }
            None => Reply::Completed {
                signal: out.signal.to_string(),
                state: state(&out.state),
            },
        },
        Err(RunError::AnswerRejected { interrupt, reason }) => Reply::Rejected {
            interrupt,
            reason: text(reason),
        },
        Err(e) => Reply::Failed {
            error: text(e.to_string()),
        },
    }
}

/// What a handler runs.
enum Op {
    Start(Value),
    Resume(Answer),
    Stop,
}

/// The journaled end of a handler: what changed in the session, and the
/// reply. Only the run's own checkpoints are journaled and written, not the
/// session's whole log.
#[derive(Clone, Serialize, Deserialize)]
struct Saved {
    /// The session's new head, if it has one.
    head: Option<StoredRun>,
    /// The checkpoints the run added, their large values by reference
    /// (each journaled after this, in an entry of its own).
    append: Vec<Kept>,
    /// The checkpoints it removed (superseded snapshots).
    remove: Vec<u64>,
    reply: Reply,
}

/// What a handler loaded of its session: the head's `last_seq` (`None`
/// for a new session) and the checkpoint keys read, with what each holds.
struct Loaded {
    last_seq: Option<u64>,
    chunks: Vec<(String, Vec<Kept>)>,
    /// How many kept checkpoints hold each value kept by reference.
    counts: BTreeMap<String, u64>,
    /// The checkpoints given to the run (from the latest snapshot on): the
    /// only ones it can remove. A run's key may also hold older ones.
    imported: Vec<u64>,
    /// What the save keeps of the head loaded.
    before: Before,
}

/// The value of the state key `$key` as a `$ty`, or `None` if the key is
/// unset (a macro, as [`read_chunks`]). The value is read as bytes and
/// decoded here: the SDK's own decoding failure is a retryable error, so a
/// value that does not read (written by another version of harness, or
/// edited by hand) would be retried without end while later calls for the
/// key wait behind it. Here it is a terminal error naming the key and the
/// session: retrying cannot help.
macro_rules! get_state {
    ($ctx:expr, $key:expr, $ty:ty) => {{
        let key: &str = $key;
        match $ctx.get::<Vec<u8>>(key).await? {
            None => None,
            Some(bytes) => Some(serde_json::from_slice::<$ty>(&bytes).map_err(|e| {
                terminal(
                    500,
                    format!(
                        "state key `{key}` of session {} is not part of a session: {e}",
                        $ctx.key()
                    ),
                )
            })?),
        }
    }};
}

/// The object's checkpoint keys with what they hold, in order, keeping the
/// keys whose checkpoints reach `$from` or later (a macro: the exclusive
/// and the shared context each read them, and the SDK's state trait ties a
/// key's borrow to the context's lifetime).
macro_rules! read_chunks {
    ($ctx:expr, $from:expr) => {{
        let from: u64 = $from;
        let mut keys: Vec<(u64, String)> = $ctx
            .get_keys()
            .await?
            .into_iter()
            .filter_map(|k| checkpoints_range(&k).map(|(first, last)| (first, last, k)))
            .filter(|(_, last, _)| *last >= from)
            .map(|(first, _, k)| (first, k))
            .collect();
        keys.sort_unstable();
        let mut chunks: Vec<(String, Vec<Kept>)> = Vec::with_capacity(keys.len());
        for (_, key) in keys {
            if let Some(cps) = get_state!($ctx, &key, Vec<Kept>) {
                chunks.push((key, cps));
            }
        }
        chunks
    }};
}

/// `kept` whole again, with the values they hold by reference read from
/// the object's state (a macro, as [`read_chunks`]); a value whose key is
/// missing is a terminal error naming it (the state is damaged: retrying
/// cannot help).
macro_rules! restore_all {
    ($ctx:expr, $kept:expr) => {{
        let kept: Vec<Kept> = $kept;
        let mut values = HashMap::new();
        for hash in hashes(&kept) {
            if let Some(value) = get_state!($ctx, &value_key(&hash), Value) {
                values.insert(hash, value);
            }
        }
        let mut log = Vec::with_capacity(kept.len());
        for k in kept {
            let seq = k.cp.seq;
            log.push(restore(k, &values).map_err(|hash| {
                terminal(
                    500,
                    format!(
                        "checkpoint {seq} of session {} holds a value by reference whose key \
                         `{}` is missing from the object's state",
                        $ctx.key(),
                        value_key(&hash)
                    ),
                )
            })?);
        }
        log
    }};
}

/// The part of a session a run needs, from the object's state: its head
/// and its checkpoints from the latest snapshot on.
async fn load(ctx: &ObjectContext<'_>, store: &MemoryStore) -> Result<Loaded, HandlerError> {
    let Some(head) = get_state!(ctx, HEAD, StoredRun) else {
        return Ok(Loaded {
            last_seq: None,
            chunks: Vec::new(),
            counts: BTreeMap::new(),
            imported: Vec::new(),
            before: Before::default(),
        });
    };
    let before = Before::of(&head);
    let chunks = read_chunks!(ctx, head.snapshot_seq);
    let needed: Vec<Kept> = chunks
        .iter()
        .flat_map(|(_, cps)| cps.iter())
        .filter(|k| k.cp.seq >= head.snapshot_seq)
        .cloned()
        .collect();
    let log = restore_all!(ctx, needed);
    let counts = get_state!(ctx, VALUES, BTreeMap<String, u64>).unwrap_or_default();
    let imported = log.iter().map(|cp| cp.seq).collect();
    let last_seq = Some(head.last_seq);
    store.import(head, log);
    Ok(Loaded {
        last_seq,
        chunks,
        counts,
        imported,
        before,
    })
}

/// The virtual object serving one agent; made by [`Durable::object`].
pub struct AgentObject {
    driver: Arc<dyn Driver>,
    /// [`Durable::max_effect_bytes`].
    max_effect_bytes: usize,
}

impl fmt::Debug for AgentObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentObject").finish_non_exhaustive()
    }
}

/// Aborts the run's task when the handler's future is dropped (Restate
/// gave up on this attempt): a stale attempt must not go on committing.
struct AbortOnDrop(tokio::task::JoinHandle<Result<Reply, Refused>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A handler's terminal error: the caller gets its message, and Restate
/// keeps it in the invocation's record. The message may quote what the
/// caller sent (serde quotes a bad input's values), an id it gave, or a
/// step's panic, so the process's secrets are replaced in it, as in the
/// replies.
fn terminal(code: u16, message: impl fmt::Display) -> HandlerError {
    terminal_error(code, message).into()
}

/// [`terminal`]'s error, before it becomes a handler's.
fn terminal_error(code: u16, message: impl fmt::Display) -> TerminalError {
    let mut message = message.to_string();
    secrets::redact_string(&mut message);
    TerminalError::new_with_code(code, message)
}

impl AgentObject {
    async fn invoke(&self, ctx: &ObjectContext<'_>, op: Op) -> Result<Json<Reply>, HandlerError> {
        let session = SessionId::from(ctx.key());
        let store = MemoryStore::new();
        let loaded = load(ctx, &store).await?;
        let last_seq = loaded.last_seq;
        let input = match &op {
            Op::Start(input) => Some(input),
            Op::Resume(_) | Op::Stop => None,
        };
        let run_id = replayable::run_id(ctx.key(), &loaded.before, input);
        let (tx, mut requests) = mpsc::unbounded_channel();
        let attempt = Arc::new(Attempt {
            effects: tx,
            store,
            stop: std::sync::Mutex::new(None),
            clock: std::sync::Mutex::new(Clock::default()),
            run_id,
            ahead: AtomicBool::new(false),
            max_effect_bytes: self.max_effect_bytes,
        });
        let driver = Arc::clone(&self.driver);
        let id = session.clone();
        let mut task = AbortOnDrop(tokio::spawn(ATTEMPT.scope(
            Arc::clone(&attempt),
            async move {
                match op {
                    Op::Start(input) => driver.start(id, input).await,
                    Op::Resume(answer) => driver.resume(id, answer).await,
                    Op::Stop => driver.stop(id).await,
                }
            },
        )));
        let mut cancelled = false;
        let ended = loop {
            tokio::select! {
                ended = &mut task.0 => break ended,
                Some(request) = requests.recv() => {
                    if cancelled {
                        // Not journaled, and the same on a replay: every
                        // effect after the cancellation fails.
                        for asked in request.effects {
                            let _ = asked.done.send(Ok(Err(STOPPED.to_string())));
                        }
                        continue;
                    }
                    match effect(ctx, request, &attempt).await {
                        Ok(()) => {}
                        // Cancelled (Restate's 409): the run stops at its
                        // next step boundary, and the session is saved.
                        Err(e) if e.code() == 409 => {
                            cancelled = true;
                            attempt.ahead.store(false, Ordering::Release);
                            attempt.clock().untimed();
                            if let Some(stop) = attempt
                                .stop
                                .lock()
                                .unwrap_or_else(std::sync::PoisonError::into_inner)
                                .as_ref()
                            {
                                stop.stop();
                            }
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        };
        let reply = match ended {
            Ok(Ok(reply)) => reply,
            Ok(Err(refused)) => return Err(terminal(refused.code, refused.message)),
            Err(e) => return Err(terminal(500, format!("the run panicked: {e}"))),
        };
        // The values the save moves out of its checkpoints, by hash.
        let mut moved = HashMap::new();
        let mut saved = save_of(
            &attempt,
            &session,
            &loaded.imported,
            last_seq,
            reply,
            &mut moved,
        );
        // Written as plain state when the journal fixes its ids and times
        // (see `replayable`); else journaled in an entry of its own, which
        // a replay answers from the journal.
        let fixed = replayable::canonical(&mut saved, &attempt.clock(), &loaded.before);
        if !fixed {
            saved = journal_save(ctx, saved).await?;
        }
        // Values kept by reference: each new one kept once (journaled in an
        // entry of its own when the save is); one no kept checkpoint holds
        // any more is cleared.
        let mut counts = loaded.counts.clone();
        let removed = loaded
            .chunks
            .iter()
            .flat_map(|(_, ks)| ks.iter())
            .filter(|k| saved.remove.contains(&k.cp.seq));
        let (new, gone) = account(&mut counts, &saved.append, removed);
        for hash in &new {
            let value = moved.remove(hash).ok_or_else(|| {
                format!(
                    "value {hash} of session {session} is not what this replay's run made: \
                     the run is not deterministic (see harness::effect)"
                )
            });
            let value = if fixed {
                // The journal fixes the save, and so the values it holds.
                value.map_err(|e| terminal(500, e))?
            } else {
                journal_value(ctx, hash, &value).await?
            };
            ctx.set(&value_key(hash), Json(value));
        }
        for hash in &gone {
            ctx.clear(&value_key(hash));
        }
        if !new.is_empty() || !gone.is_empty() {
            if counts.is_empty() {
                ctx.clear(VALUES);
            } else {
                ctx.set(VALUES, Json(counts));
            }
        }
        // A removed checkpoint (a superseded snapshot) leaves its run's key
        // rewritten without it, or cleared.
        for (key, cps) in loaded.chunks {
            if !cps.iter().any(|k| saved.remove.contains(&k.cp.seq)) {
                continue;
            }
            let kept: Vec<Kept> = cps
                .into_iter()
                .filter(|k| !saved.remove.contains(&k.cp.seq))
                .collect();
            if kept.is_empty() {
                ctx.clear(&key);
            } else {
                ctx.set(&key, Json(kept));
            }
        }
        if let (Some(first), Some(last)) = (saved.append.first(), saved.append.last()) {
            let key = checkpoints_key(first.cp.seq, last.cp.seq);
            ctx.set(&key, Json(saved.append));
        }
        if let Some(head) = saved.head {
            ctx.set(HEAD, Json(head));
        }
        Ok(Json(saved.reply))
    }
}

/// How many cancellations a save journals again before it gives up (the
/// SDK reports a cancellation once: a second means a second cancel).
const SAVE_TRIES: usize = 8;

/// Journals `saved` in an entry of its own (`save session`) and gives it
/// as journaled (a replay's is the attempt's it replays).
///
/// A cancellation of the invocation reaches the run at its next journaled
/// operation: a run that made none after it (its step waited, or made no
/// effect) learns of it here, once (Restate's 409). The run has ended, and
/// its save is not dropped: it is marked cancelled ([`cancelled_at_save`])
/// and journaled again, so that the session holds the run and its caller
/// gets the failure.
async fn journal_save(ctx: &ObjectContext<'_>, mut saved: Saved) -> Result<Saved, HandlerError> {
    let mut cancels = 0;
    loop {
        let save = &saved;
        match ctx
            .run(|| async move { Ok(Json(save.clone())) })
            .name("save session")
            .await
        {
            Ok(Json(journaled)) => return Ok(journaled),
            Err(e) if e.code() == 409 && cancels < SAVE_TRIES => {
                cancels += 1;
                cancelled_at_save(&mut saved);
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Journals the value `hash` kept by reference (`save value {hash}`) and
/// gives it as journaled. A cancellation that reaches the run here, once
/// its save is journaled, comes too late to change how it ended: the
/// value is journaled again, as the save holds it.
async fn journal_value(
    ctx: &ObjectContext<'_>,
    hash: &str,
    value: &Result<Value, String>,
) -> Result<Value, HandlerError> {
    let mut cancels = 0;
    loop {
        match ctx
            .run(|| async move {
                value
                    .clone()
                    .map(Json)
                    .map_err(|e| TerminalError::new(e).into())
            })
            .name(format!("save value {}", &hash[..12.min(hash.len())]))
            .await
        {
            Ok(Json(value)) => return Ok(value),
            Err(e) if e.code() == 409 && cancels < SAVE_TRIES => cancels += 1,
            Err(e) => return Err(e.into()),
        }
    }
}

/// What the failure of a run whose cancellation reached it only at its
/// save starts with.
const CANCELLED_AT_SAVE: &str = "the run was stopped: its Restate invocation was cancelled, which \
     reached the run only when its session was saved, after its steps had ended";

/// `saved` as the save of a cancelled run: its session failed with a
/// message saying it was cancelled and how the run had ended (its
/// checkpoints, the steps it completed, are kept), and the reply that
/// failure. A run already stopped by the cancellation (seen at an effect)
/// stays as it is, and so does a `resume` whose answer was rejected
/// (nothing ran, and the session still waits).
fn cancelled_at_save(saved: &mut Saved) {
    let had = match &saved.reply {
        Reply::Failed { error } if error.contains(STOPPED) => return,
        Reply::Rejected { .. } => return,
        Reply::Completed { signal, .. } => format!("completed with `{signal}`"),
        Reply::Interrupted { interrupt, .. } => format!(
            "paused to wait for an answer to interrupt {}, which it no longer waits for",
            interrupt.id
        ),
        Reply::Failed { error } => format!("failed: {error}"),
    };
    let error = format!("{CANCELLED_AT_SAVE} (it had {had})");
    if let Some(head) = saved.head.as_mut() {
        head.phase = SessionPhase::Failed {
            error: error.clone(),
        };
    }
    saved.reply = Reply::Failed { error };
}

/// What the run of `attempt` changed in `session`: the head, the
/// checkpoints added after `last_seq` (their large values moved into
/// `moved`, by hash) and those of `loaded` it removed; with `reply`.
fn save_of(
    attempt: &Attempt,
    session: &SessionId,
    loaded: &[u64],
    last_seq: Option<u64>,
    reply: Reply,
    moved: &mut HashMap<String, Value>,
) -> Saved {
    let (head, append, remove) = match attempt.store.export(session) {
        Some((head, log)) => {
            let remove = loaded
                .iter()
                .filter(|seq| {
                    last_seq.is_some_and(|last| **seq <= last)
                        && !log.iter().any(|cp| cp.seq == **seq)
                })
                .copied()
                .collect();
            let append = log
                .into_iter()
                .filter(|cp| last_seq.is_none_or(|last| cp.seq > last))
                .map(|cp| {
                    let (kept, values) = by_reference(cp);
                    moved.extend(values);
                    kept
                })
                .collect();
            (Some(head), append, remove)
        }
        None => (None, Vec::new(), Vec::new()),
    };
    Saved {
        head,
        append,
        remove,
        reply,
    }
}

/// Journals the effects of `request` with one `ctx.run` (named after the
/// effect, or `round of N: first … last #digest`): its closure lets the steps run
/// the effects, side by side, and waits for their outcomes; on a replay
/// Restate answers from the journal without calling it.
async fn effect(
    ctx: &ObjectContext<'_>,
    request: EffectRequest,
    attempt: &Attempt,
) -> Result<(), TerminalError> {
    let EffectRequest { effects } = request;
    let name = match effects.as_slice() {
        [one] => one.name.clone(),
        [first, .., last] => round_name(
            &effects.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(),
            &first.name,
            &last.name,
        ),
        [] => return Ok(()),
    };
    let names: Vec<String> = effects.iter().map(|a| a.name.clone()).collect();
    let (gos, dones): (Vec<_>, Vec<_>) = effects.into_iter().map(|a| (a.go, a.done)).unzip();
    let single = gos.len() == 1;
    let journaled_names = names.clone();
    // The run's first entry carries its seed (see `replayable`).
    let seeded = attempt.clock().unseeded();
    let max = attempt.max_effect_bytes;
    let ahead = match gos.first() {
        Some(Go::Ahead { started, .. }) => Some(*started),
        _ => None,
    };
    let journaled = if let Some(started) = ahead {
        // Run ahead: journaled as it would have been inside the closure.
        let outcomes = futures::future::join_all(gos.into_iter().map(outcome_of)).await;
        let entry = entry_of(
            journaled_names,
            outcomes,
            (started, harness::session::now_millis()),
            seeded,
            max,
        );
        let ran = AtomicBool::new(false);
        let journaled = ctx
            .run(|| async {
                ran.store(true, Ordering::Relaxed);
                Ok(Json(entry))
            })
            .name(name)
            .await;
        if journaled.is_ok() && !ran.load(Ordering::Relaxed) {
            // Answered from the journal: the effect ran twice. Past a closure
            // that ran, the SDK (0.13) never does this; say so if one does.
            let why = "answered from the journal after the step had run it ahead (past the \
                       journal's end, which this SDK version should not do)";
            tracing::error!(effect = %names.join(", "), "harness-restate: an effect was {why}");
            for done in dones {
                let _ = done.send(Err(format!("the effect was {why}")));
            }
            return Ok(());
        }
        journaled
    } else {
        let past_the_journal = &attempt.ahead;
        ctx.run(|| async move {
            // The closure runs: Restate holds no entry from here on.
            past_the_journal.store(true, Ordering::Release);
            let start = harness::session::now_millis();
            let outcomes = futures::future::join_all(gos.into_iter().map(outcome_of)).await;
            Ok(Json(entry_of(
                journaled_names,
                outcomes,
                (start, harness::session::now_millis()),
                seeded,
                max,
            )))
        })
        .name(name)
        .await
    };
    match journaled {
        Ok(Json(value)) => {
            let outcomes = if single {
                serde_json::from_value::<Stamped>(value)
                    .map(|entry| {
                        let mut clock = attempt.clock();
                        clock.entry(entry.at, entry.seed);
                        // A step that gave up waiting (its time limit) may
                        // not give up on a replay, answered at once.
                        if matches!(&entry.outcome, Err(e) if e == ABANDONED || e == UNWAITED) {
                            clock.untimed();
                        }
                        vec![Ok(entry.outcome)]
                    })
                    .map_err(|e| e.to_string())
            } else {
                attempt.clock().untimed();
                round_outcomes(&names, value)
            };
            match outcomes {
                Ok(outcomes) => {
                    for (done, outcome) in dones.into_iter().zip(outcomes) {
                        let _ = done.send(outcome);
                    }
                }
                Err(why) => {
                    for done in dones {
                        let _ = done.send(Err(why.clone()));
                    }
                }
            }
            Ok(())
        }
        Err(e) => {
            for done in dones {
                let _ = done.send(if e.code() == 409 {
                    Ok(Err(STOPPED.to_string()))
                } else {
                    Err(e.to_string())
                });
            }
            Err(e)
        }
    }
}

/// One effect of a round, as journaled: its name and its outcome.
#[derive(Serialize, Deserialize)]
struct RoundEntry {
    effect: String,
    outcome: Outcome,
}

/// The name of a round's entry: `round of N: first … last #digest`, the
/// digest (of every effect's name, in order) making a replay that asks
/// for another effect anywhere in the round a journal mismatch Restate
/// refuses and retries, as for a single effect, where a name of the first
/// and last alone would let a change in between through.
fn round_name(names: &[&str], first: &str, last: &str) -> String {
    let each: String = names.iter().map(|n| format!("{}:{n}", n.len())).collect();
    let digest = crate::sessions::sha256(each.as_bytes());
    format!(
        "round of {}: {first} … {last} #{}",
        names.len(),
        &digest[..12.min(digest.len())]
    )
}

/// The outcomes of a round journaled as `value`, each checked against the
/// effect asked for in its place: a replay that asks for other effects (a
/// divergence the round's name alone would not show) gets, for each one,
/// an error naming the effect asked for and the one journaled.
fn round_outcomes(asked: &[String], value: Value) -> Result<Vec<Result<Outcome, String>>, String> {
    let round: Vec<RoundEntry> = serde_json::from_value(value)
        .map_err(|e| format!("the journaled round cannot be read: {e}"))?;
    if round.len() != asked.len() {
        return Err(format!(
            "the journal holds a round of {} effects where this run asks for {}",
            round.len(),
            asked.len()
        ));
    }
    Ok(asked
        .iter()
        .zip(round)
        .map(|(asked, entry)| {
            if *asked == entry.effect {
                Ok(entry.outcome)
            } else {
                Err(format!(
                    "the run diverged from its journal: it asks for effect {asked} where the \
                     journaled round holds {}",
                    entry.effect
                ))
            }
        })
        .collect())
}

/// The entry journaled for `outcomes`, which ran from `at.0` to `at.1`
/// (ms since the epoch). One effect is journaled as its outcome (as it
/// always was), stamped with when it ran (and the run's first with a seed;
/// see `replayable`); a round as its effects, each named with its outcome.
/// An entry that would take more than `max` bytes has its largest
/// outcomes replaced with a failure saying so ([`bounded`]).
fn entry_of(
    names: Vec<String>,
    mut outcomes: Vec<Outcome>,
    at: (u64, u64),
    seeded: bool,
    max: usize,
) -> Value {
    bounded(&names, &mut outcomes, max);
    if let [_] = outcomes.as_slice() {
        outcomes.into_iter().next().map_or(Value::Null, |outcome| {
            let stamped = Stamped {
                outcome,
                at: Some(at),
                seed: seeded.then(|| harness::RunId::random().to_string()),
            };
            serde_json::to_value(stamped).unwrap_or(Value::Null)
        })
    } else {
        let round: Vec<RoundEntry> = names
            .into_iter()
            .zip(outcomes)
            .map(|(effect, outcome)| RoundEntry { effect, outcome })
            .collect();
        serde_json::to_value(round).unwrap_or(Value::Null)
    }
}

/// What an entry holds beside its outcomes, at most: the JSON around them,
/// a single effect's stamp and seed, a round's names (counted apart).
const ENTRY_AROUND: usize = 256;

/// Replaces the largest of `outcomes` (of the effects `names`, one entry)
/// with a failure saying how large it was, until the entry takes at most
/// `max` bytes as JSON: Restate refuses a message over its limit, and
/// retries it without end, the effect running again on each attempt. The
/// step then fails on that effect, once.
fn bounded(names: &[String], outcomes: &mut [Outcome], max: usize) {
    let sizes: Vec<usize> = outcomes.iter().map(json_len).collect();
    let around = ENTRY_AROUND + names.iter().map(|n| n.len() + 32).sum::<usize>();
    let mut total = around + sizes.iter().sum::<usize>();
    if total <= max {
        return;
    }
    let mut largest: Vec<usize> = (0..outcomes.len()).collect();
    largest.sort_by_key(|i| std::cmp::Reverse(sizes[*i]));
    for i in largest {
        if total <= max {
            break;
        }
        let name = names.get(i).map_or("", String::as_str);
        let what = match &outcomes[i] {
            Ok(_) => "returned",
            Err(_) => "failed with a message of",
        };
        let round = match outcomes.len() {
            1 => String::new(),
            n => format!(
                " (with the outcomes of the other effects of its round of {n}, which share \
                 its entry)"
            ),
        };
        let failure = format!(
            "effect {name} {what} {} bytes as JSON{round}, more than the {max} bytes an \
             effect's entry in Restate's journal may take (Durable::max_effect_bytes; a \
             Restate message takes at most 32 MiB unless the server is set otherwise): its \
             outcome was not journaled, and a later run runs the effect again",
            sizes[i]
        );
        total = total - sizes[i] + failure.len() + 16;
        tracing::warn!(
            effect = %name,
            bytes = sizes[i],
            max,
            "harness-restate: an effect's outcome is too large to journal"
        );
        outcomes[i] = Err(failure);
    }
}

/// Counts the bytes written to it.
struct Counted(usize);

impl std::io::Write for Counted {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0 += bytes.len();
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The bytes of `value` as JSON, counted without writing them anywhere.
fn json_len<T: Serialize>(value: &T) -> usize {
    let mut counted = Counted(0);
    let _ = serde_json::to_writer(&mut counted, value);
    counted.0
}

/// Lets a step run one effect (inside `ctx.run`'s closure, or already
/// under way when run ahead) and waits for its outcome, as journaled:
/// without the process's secrets. The step goes on with the outcome as
/// journaled, so a replay sees the same.
async fn outcome_of(go: Go) -> Outcome {
    let outcome = match go {
        Go::Decide(decide) => {
            let (tx, rx) = oneshot::channel();
            if decide.send(tx).is_err() {
                return Err(UNWAITED.to_string());
            }
            rx.await
        }
        Go::Ahead { outcome, .. } => outcome.await,
    };
    let mut outcome = outcome.unwrap_or_else(|_| Err(ABANDONED.to_string()));
    match &mut outcome {
        Ok(value) => secrets::redact_json(value),
        Err(message) => secrets::redact_string(message),
    };
    outcome
}

/// The outcome journaled for an effect whose step stopped waiting before
/// it was let run.
const UNWAITED: &str = "the step no longer waits for this effect";

/// The outcome journaled for an effect whose step was cancelled while it
/// ran (a time limit).
const ABANDONED: &str = "the step was cancelled while the effect ran";

/// What an effect asked for after the invocation was cancelled fails with.
const STOPPED: &str = "the run was stopped: its Restate invocation was cancelled";

impl AgentObject {
    /// The `run` handler: starts a run on the session (the object's key)
    /// with `input`, an update of the state. For an object of another name
    /// ([`agent_object!`](crate::agent_object)), or one with handlers of
    /// its own.
    ///
    /// An `input` that is no JSON object is refused, a terminal error (400,
    /// not retried) saying what it is, as [`AgentClient::run`] refuses it,
    /// and nothing is read or run: serde would read an array as the
    /// update's fields in order.
    pub async fn handle_run(
        &self,
        ctx: ObjectContext<'_>,
        input: Json<Value>,
    ) -> Result<Json<Reply>, HandlerError> {
        if let Some(what) = not_an_object(&input.0) {
            return Err(terminal(400, no_update(what, &input.0)));
        }
        self.invoke(&ctx, Op::Start(input.0)).await
    }

    /// The `resume` handler: answers the interrupt the session waits on.
    /// Its input is an [`Answer`] as a JSON object
    /// (`{"interrupt": ID, "answer": …}`); any other JSON (an array, which
    /// serde would read as its fields in order) is refused, a terminal
    /// error (400), and nothing runs.
    pub async fn handle_resume(
        &self,
        ctx: ObjectContext<'_>,
        answer: Json<Value>,
    ) -> Result<Json<Reply>, HandlerError> {
        let answer = answer_of(answer.0).map_err(|message| terminal(400, message))?;
        self.invoke(&ctx, Op::Resume(answer)).await
    }

    /// The `stop` handler: ends the run that waits for an answer on the
    /// session, as stopped (see the [module docs](self), **A run that
    /// waits for an answer**).
    pub async fn handle_stop(&self, ctx: ObjectContext<'_>) -> Result<Json<Reply>, HandlerError> {
        self.invoke(&ctx, Op::Stop).await
    }

    /// The shared `session` handler: the session's head and log, if it
    /// exists. It does not wait for a running handler.
    ///
    /// Its keys are read one by one (the head, the checkpoint keys, the
    /// values they hold by reference) while a run of the session may be
    /// saving it, key by key: a read is kept only when its log agrees with
    /// its head (it holds every checkpoint from the head's latest snapshot
    /// to its last, and every value they name; later checkpoints, of a save
    /// under way, are left out), and is made again otherwise, at most
    /// [`SESSION_READS`] times (over a second or so), then answered with a
    /// terminal error: 503 when the session kept changing, 500 when its
    /// head did not change and its state still does not read whole.
    pub async fn handle_session(
        &self,
        ctx: SharedObjectContext<'_>,
    ) -> Result<Json<Option<Snapshot>>, HandlerError> {
        let mut first: Option<u64> = None;
        let mut changed = false;
        let mut why = String::new();
        for read in 0..SESSION_READS {
            if read > 0 {
                tokio::time::sleep(std::time::Duration::from_millis(10 << read.min(5))).await;
            }
            let Some(head) = get_state!(ctx, HEAD, StoredRun) else {
                return Ok(Json(None));
            };
            changed |= first.is_some_and(|v| v != head.version);
            first.get_or_insert(head.version);
            // A save under way may have written its checkpoints and not
            // yet its head: those past the head's are not the head's.
            let kept: Vec<Kept> = read_chunks!(ctx, 0)
                .into_iter()
                .flat_map(|(_, cps)| cps)
                .filter(|k| k.cp.seq <= head.last_seq)
                .collect();
            let mut values = HashMap::new();
            for hash in hashes(&kept) {
                if let Some(value) = get_state!(ctx, &value_key(&hash), Value) {
                    values.insert(hash, value);
                }
            }
            match agreeing(&head, kept, &values) {
                Ok(log) => return Ok(Json(Some(Snapshot { head, log }))),
                Err(torn) => why = torn,
            }
        }
        Err(if changed {
            terminal(
                503,
                format!(
                    "session {} changed while it was read, {SESSION_READS} times in a row (the \
                     last read: {why}): read it again",
                    ctx.key()
                ),
            )
        } else {
            terminal(
                500,
                format!(
                    "session {} does not read whole: {why} (read {SESSION_READS} times, its \
                     head unchanged)",
                    ctx.key()
                ),
            )
        })
    }
}

/// How many times the shared `session` handler reads a session whose
/// head and log disagree (a save under way) before it gives up.
pub const SESSION_READS: u32 = 8;

/// The log of `head`, from the checkpoints read (`kept`, in order, none
/// past the head's last) and the values they hold by reference; or why it
/// is not the head's: a checkpoint from the head's latest snapshot on is
/// missing (a later save removed it, or has not written it), or a value a
/// checkpoint names is gone.
fn agreeing(
    head: &StoredRun,
    kept: Vec<Kept>,
    values: &HashMap<String, Value>,
) -> Result<Vec<Checkpoint>, String> {
    let from_snapshot = kept
        .iter()
        .map(|k| k.cp.seq)
        .filter(|seq| *seq >= head.snapshot_seq);
    if !from_snapshot.eq(head.snapshot_seq..=head.last_seq) {
        return Err(format!(
            "its log does not hold every checkpoint from {} to {} of its head (version {})",
            head.snapshot_seq, head.last_seq, head.version
        ));
    }
    kept.into_iter()
        .map(|k| {
            let seq = k.cp.seq;
            restore(k, values).map_err(|hash| {
                format!(
                    "the value `{}` checkpoint {seq} holds by reference is missing",
                    value_key(&hash)
                )
            })
        })
        .collect()
}

#[allow(missing_docs, unreachable_pub)] // the SDK's macro generates items without docs
mod object {
    use super::*;

    #[restate_sdk::object(name = "HarnessAgent", lazy_state)]
    impl AgentObject {
        /// Starts a run on the session with this update of the state.
        #[handler]
        async fn run(
            &self,
            ctx: ObjectContext<'_>,
            input: Json<Value>,
        ) -> Result<Json<Reply>, HandlerError> {
            self.handle_run(ctx, input).await
        }

        /// Answers the interrupt the session waits on.
        #[handler]
        async fn resume(
            &self,
            ctx: ObjectContext<'_>,
            answer: Json<Value>,
        ) -> Result<Json<Reply>, HandlerError> {
            self.handle_resume(ctx, answer).await
        }

        /// Ends the run that waits for an answer, as stopped.
        #[handler]
        async fn stop(&self, ctx: ObjectContext<'_>) -> Result<Json<Reply>, HandlerError> {
            self.handle_stop(ctx).await
        }

        /// The session's head and log, if it exists.
        #[handler]
        async fn session(
            &self,
            ctx: SharedObjectContext<'_>,
        ) -> Result<Json<Option<Snapshot>>, HandlerError> {
            self.handle_session(ctx).await
        }
    }
}

/// An agent's virtual object under a name of your choosing, so that one
/// Restate server (and one deployment) serves several agents; an
/// [`AgentObject`] bound as it is serves as `HarnessAgent`.
///
/// `agent_object!(pub struct Orders = "Orders");` declares `Orders`, a
/// newtype over [`AgentObject`] served as the virtual object `Orders` with
/// the same handlers (`run`, `resume`, `stop`, shared `session`). Call it with
/// [`AgentClient::object`] and read its sessions with
/// [`RestateSessionReader::object`](crate::RestateSessionReader::object).
/// The crate that calls the macro depends on `restate-sdk`, as a service
/// does to serve.
///
/// ```no_run
/// use harness_restate::{Durable, agent_object};
/// use restate_sdk::prelude::{Endpoint, HttpServer};
/// # use harness::{Harness, HarnessState, StepResult, create_agent, schemars};
/// # #[derive(Clone, Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema, HarnessState)]
/// # struct Job { n: u32 }
///
/// agent_object!(pub struct Orders = "Orders");
/// agent_object!(pub struct Refunds = "Refunds");
///
/// # async fn serve(orders: Harness<Job>, refunds: Harness<Job>) -> Result<(), Box<dyn std::error::Error>> {
/// let durable = Durable::new();
/// let endpoint = Endpoint::builder()
///     .bind(Orders(durable.object(create_agent("orders", &orders))?))
///     .bind(Refunds(durable.object(create_agent("refunds", &refunds))?))
///     .build();
/// let listener = harness_restate::nodelay_listener("0.0.0.0:9080".parse()?)?;
/// HttpServer::new(endpoint).serve(listener).await;
/// # Ok(()) }
/// ```
#[macro_export]
macro_rules! agent_object {
    ($(#[$meta:meta])* $vis:vis struct $ty:ident = $name:tt $(;)?) => {
        $(#[$meta])*
        $vis struct $ty(pub $crate::AgentObject);

        // State read key by key: a run reads its head and its checkpoints
        // from the latest snapshot on, never the session's whole history.
        #[::restate_sdk::object(name = $name, lazy_state)]
        impl $ty {
            #[handler]
            async fn run(
                &self,
                ctx: ::restate_sdk::prelude::ObjectContext<'_>,
                input: ::restate_sdk::prelude::Json<$crate::__private::Value>,
            ) -> ::core::result::Result<
                ::restate_sdk::prelude::Json<$crate::Reply>,
                ::restate_sdk::prelude::HandlerError,
            > {
                self.0.handle_run(ctx, input).await
            }

            #[handler]
            async fn resume(
                &self,
                ctx: ::restate_sdk::prelude::ObjectContext<'_>,
                answer: ::restate_sdk::prelude::Json<$crate::__private::Value>,
            ) -> ::core::result::Result<
                ::restate_sdk::prelude::Json<$crate::Reply>,
                ::restate_sdk::prelude::HandlerError,
            > {
                self.0.handle_resume(ctx, answer).await
            }

            #[handler]
            async fn stop(
                &self,
                ctx: ::restate_sdk::prelude::ObjectContext<'_>,
            ) -> ::core::result::Result<
                ::restate_sdk::prelude::Json<$crate::Reply>,
                ::restate_sdk::prelude::HandlerError,
            > {
                self.0.handle_stop(ctx).await
            }

            #[handler]
            async fn session(
                &self,
                ctx: ::restate_sdk::prelude::SharedObjectContext<'_>,
            ) -> ::core::result::Result<
                ::restate_sdk::prelude::Json<::core::option::Option<$crate::Snapshot>>,
                ::restate_sdk::prelude::HandlerError,
            > {
                self.0.handle_session(ctx).await
            }
        }
    };
}

/// What `input` is when it is no JSON object; `None` for an object.
fn not_an_object(input: &Value) -> Option<&'static str> {
    match input {
        Value::Object(_) => None,
        Value::Null => Some("null"),
        Value::Array(_) => Some("an array"),
        Value::String(_) => Some("a string"),
        Value::Number(_) => Some("a number"),
        Value::Bool(_) => Some("a boolean"),
    }
}

/// Why `input` (`what`: no JSON object) is no run's input: the refusal of
/// [`AgentClient::run`] and of the `run` handler alike.
fn no_update(what: &str, input: &Value) -> String {
    format!(
        "the input of a run is an update of the agent's state, a JSON object of the fields to \
         change (`{{}}` for none), not {what}: {}",
        crate::excerpt(&input.to_string())
    )
}

/// `input` as the `resume` handler's [`Answer`], or why it is none: a JSON
/// object with the answer's fields, never an array read as them in order.
fn answer_of(input: Value) -> Result<Answer, String> {
    const SHAPE: &str = r#"`{"interrupt": ID, "answer": …}`"#;
    if let Some(what) = not_an_object(&input) {
        return Err(format!(
            "the input of `resume` is an answer to the interrupt the session waits on, a JSON \
             object {SHAPE}, not {what}: {}",
            crate::excerpt(&input.to_string())
        ));
    }
    serde_json::from_value(input).map_err(|e| {
        format!("the input of `resume` is not an answer to an interrupt ({SHAPE}): {e}")
    })
}

/// What a caller of [`AgentClient::run`] is told when no answer came in
/// time.
const RUN_TIMEOUT: &str = "; the run may still be under way: Restate goes on with it (the \
     session (`session`) shows where it is; to wait for a run without a call held open, send it \
     with `submit` and pick it up with `outcome`)";
/// What a caller of [`AgentClient::resume`] is told when no answer came
/// in time.
const RESUME_TIMEOUT: &str = "; the answer may have been taken and the run it resumes still be \
     under way: Restate goes on with it (the session (`session`) shows where it is; to wait \
     without a call held open, send the answer with `submit_resume` and pick the run up with \
     `outcome`)";
/// What a caller of [`AgentClient::stop`] is told when no answer came in
/// time.
const STOP_TIMEOUT: &str = "; the stop may still be under way: Restate makes it once the \
     session's earlier calls are done (the session (`session`) shows whether its run was \
     stopped; to wait without a call held open, send it with `submit_stop` and pick it up with \
     `outcome`)";
/// What a caller of [`AgentClient::session`] is told when no answer came
/// in time.
const SESSION_TIMEOUT: &str = "; reading a session changes nothing: read it again";

/// Calls a served agent through a Restate ingress: a run, an answer to an
/// interrupt, the stop of a run that waits for one, a session read back.
///
/// Every call names a session: an id longer than
/// [`MAX_SESSION_ID_BYTES`](crate::MAX_SESSION_ID_BYTES) as sent
/// (percent-encoded) is refused with
/// [`RestateError::SessionIdTooLong`](crate::RestateError::SessionIdTooLong)
/// before anything is sent.
#[derive(Clone, Debug)]
pub struct AgentClient {
    ingress: crate::Ingress,
    object: String,
}

fn reply<T: serde::de::DeserializeOwned>(
    answer: Value,
    what: &str,
) -> Result<T, crate::RestateError> {
    serde_json::from_value(answer.clone()).map_err(|e| crate::RestateError::Answer {
        url: what.to_owned(),
        message: format!(
            "not a {}: {e}: {}",
            harness::short_type_name::<T>(),
            crate::excerpt(&answer.to_string())
        ),
    })
}

impl AgentClient {
    /// `session` as a call's key, or a
    /// [`RestateError::SessionIdTooLong`](crate::RestateError::SessionIdTooLong)
    /// when it is longer than
    /// [`MAX_SESSION_ID_BYTES`](crate::MAX_SESSION_ID_BYTES) as sent.
    fn key<'s>(&self, session: &'s SessionId) -> Result<&'s str, crate::RestateError> {
        let id = session.as_str();
        let bytes = crate::segment_len(id);
        if bytes <= crate::MAX_SESSION_ID_BYTES {
            return Ok(id);
        }
        Err(crate::RestateError::SessionIdTooLong {
            url: self.ingress.service_url(&self.object)?,
            start: id.chars().take(32).collect(),
            chars: id.chars().count(),
            bytes,
            limit: crate::MAX_SESSION_ID_BYTES,
        })
    }

    /// `input` as the body of a run: an object as it is, `null` as `{}`
    /// (no change); anything else is a [`RestateError::Input`](crate::RestateError::Input)
    /// naming what it is, and nothing is sent.
    fn update(&self, session: &SessionId, input: &Value) -> Result<Value, crate::RestateError> {
        let what = match not_an_object(input) {
            None => return Ok(input.clone()),
            Some("null") => return Ok(Value::Object(serde_json::Map::new())),
            Some(what) => what,
        };
        Err(crate::RestateError::Input {
            url: self
                .ingress
                .handler_url(&self.object, Some(session.as_str()), "run")?,
            message: no_update(what, input),
        })
    }

    /// A client of the agent served behind `ingress` as `HarnessAgent`.
    pub fn new(ingress: crate::Ingress) -> Self {
        Self {
            ingress,
            object: OBJECT.to_owned(),
        }
    }

    /// The same client, for the agent served as the virtual object `name`
    /// ([`agent_object!`](crate::agent_object)).
    pub fn object(mut self, name: impl Into<String>) -> Self {
        self.object = name.into();
        self
    }

    /// Runs the agent on `session` with `input` (an update of its state)
    /// and waits for the run to settle.
    ///
    /// `input` is a JSON object of the fields to change, as the state's
    /// update type reads it: `{}` is the empty update (run again with no
    /// change), and `null` is the same as `{}`. Any other JSON (an array, a
    /// string, a number, a boolean) is a
    /// [`RestateError::Input`](crate::RestateError::Input), and nothing is
    /// sent (the `run` handler refuses it too, 400, when another client
    /// sends it). [`submit`](Self::submit) reads `input` the same way.
    ///
    /// Every run starts from the start step with the state the session
    /// saved, the update merged: after a run that was cancelled or failed
    /// too, which it does not pick up where it stopped. The steps it runs
    /// again run their effects again (see the [module docs](self), **A run
    /// after a cancelled or failed one**).
    ///
    /// A run that does not settle within the ingress's timeout is a
    /// [`RestateError::Transport`](crate::RestateError::Transport) saying
    /// so: the run goes on, and the session ([`session`](Self::session))
    /// shows where it is; [`submit`](Self::submit) and
    /// [`outcome`](Self::outcome) wait for a run without a call held open.
    pub async fn run(
        &self,
        session: &SessionId,
        input: &Value,
    ) -> Result<Reply, crate::RestateError> {
        let key = self.key(session)?;
        let input = self.update(session, input)?;
        let answer = self
            .ingress
            .call_advising(&self.object, Some(key), "run", &input, RUN_TIMEOUT)
            .await?;
        reply(answer, "run")
    }

    /// Submits a run without waiting: returns the invocation's id, for
    /// [`outcome`](Self::outcome). A repeated submit with the same
    /// `idempotency_key` is the same run. `input` is read as
    /// [`run`](Self::run) reads it (`{}` or `null`: no change; what is not
    /// an object is refused before anything is sent). An
    /// `idempotency_key` that cannot go in a header (empty, longer than
    /// [`MAX_IDEMPOTENCY_KEY_BYTES`](crate::MAX_IDEMPOTENCY_KEY_BYTES),
    /// not all visible ASCII) is a
    /// [`RestateError::Input`](crate::RestateError::Input) naming it, and
    /// nothing is sent; so for [`submit_resume`](Self::submit_resume) and
    /// [`submit_stop`](Self::submit_stop).
    pub async fn submit(
        &self,
        session: &SessionId,
        input: &Value,
        idempotency_key: Option<&str>,
    ) -> Result<String, crate::RestateError> {
        let key = self.key(session)?;
        let input = self.update(session, input)?;
        self.ingress
            .send(&self.object, Some(key), "run", &input, idempotency_key)
            .await
    }

    /// Waits for the submitted run `invocation` to settle (or the submitted
    /// answer's run: [`submit_resume`](Self::submit_resume); or the
    /// submitted stop: [`submit_stop`](Self::submit_stop)).
    pub async fn outcome(&self, invocation: &str) -> Result<Reply, crate::RestateError> {
        reply(self.ingress.attach(invocation).await?, "attach")
    }

    /// Answers the interrupt `interrupt` of `session` and waits for the run
    /// to settle.
    ///
    /// An interrupt the session does not wait on (answered already, or
    /// whose run was [stopped](Self::stop)) is refused and nothing runs: a
    /// [`RestateError::Status`](crate::RestateError::Status) 404 saying the
    /// run is not paused on it (and which interrupt it is paused on, if
    /// any).
    ///
    /// An answer whose run does not settle within the ingress's timeout is
    /// a [`RestateError::Transport`](crate::RestateError::Transport) saying
    /// so: the answer may have been taken and its run go on; the session
    /// ([`session`](Self::session)) shows where it is.
    /// [`submit_resume`](Self::submit_resume) and
    /// [`outcome`](Self::outcome) wait for it without a call held open.
    pub async fn resume(
        &self,
        session: &SessionId,
        interrupt: &InterruptId,
        answer: Value,
    ) -> Result<Reply, crate::RestateError> {
        let key = self.key(session)?;
        let input = answer_input(interrupt, answer);
        let answer = self
            .ingress
            .call_advising(&self.object, Some(key), "resume", &input, RESUME_TIMEOUT)
            .await?;
        reply(answer, "resume")
    }

    /// Sends the answer to `interrupt` of `session` without waiting;
    /// returns the invocation's id, for [`outcome`](Self::outcome), which
    /// gives what [`resume`](Self::resume) would have. A repeated send with
    /// the same `idempotency_key` is the same invocation.
    pub async fn submit_resume(
        &self,
        session: &SessionId,
        interrupt: &InterruptId,
        answer: Value,
        idempotency_key: Option<&str>,
    ) -> Result<String, crate::RestateError> {
        let key = self.key(session)?;
        let input = answer_input(interrupt, answer);
        self.ingress
            .send(&self.object, Some(key), "resume", &input, idempotency_key)
            .await
    }

    /// Ends the run of `session` that waits for an answer (to an interrupt
    /// no one will answer), as stopped, and waits for that to be recorded.
    ///
    /// The reply is [`Reply::Completed`] with the signal `$stopped` and the
    /// state as the interrupt left it, as a run stopped in its own process
    /// ends. The session then takes new runs ([`run`](Self::run)), and an
    /// answer to the old interrupt is refused ([`resume`](Self::resume):
    /// 404). No step runs. See the [module docs](self), **A run that waits
    /// for an answer**.
    ///
    /// # Errors
    ///
    /// A [`RestateError::Status`](crate::RestateError::Status): 409 if the
    /// session waits for no answer (its last run completed or failed; the
    /// message says which, and nothing is changed), 404 if there is no such
    /// session. Called while a run of the session is under way, the stop
    /// waits for it to settle (Restate runs a session's calls one after the
    /// other), then stops it if it paused for an answer, or answers 409 if
    /// it ended; a run under way is stopped by cancelling its invocation
    /// ([`Admin::cancel`](crate::Admin::cancel)).
    ///
    /// A stop that gets no answer within the ingress's timeout (it waits
    /// behind the session's earlier calls) is a
    /// [`RestateError::Transport`](crate::RestateError::Transport) saying
    /// so: the stop goes on, and the session ([`session`](Self::session))
    /// shows whether its run was stopped. [`submit_stop`](Self::submit_stop)
    /// and [`outcome`](Self::outcome) wait for it without a call held open.
    pub async fn stop(&self, session: &SessionId) -> Result<Reply, crate::RestateError> {
        let key = self.key(session)?;
        let answer = self
            .ingress
            .call_advising(&self.object, Some(key), "stop", &Value::Null, STOP_TIMEOUT)
            .await?;
        reply(answer, "stop")
    }

    /// Sends the stop of `session`'s run that waits for an answer without
    /// waiting; returns the invocation's id, for
    /// [`outcome`](Self::outcome), which gives what [`stop`](Self::stop)
    /// would have (its refusal too, as a
    /// [`RestateError::Status`](crate::RestateError::Status)). A repeated
    /// send with the same `idempotency_key` is the same invocation.
    pub async fn submit_stop(
        &self,
        session: &SessionId,
        idempotency_key: Option<&str>,
    ) -> Result<String, crate::RestateError> {
        let key = self.key(session)?;
        self.ingress
            .send(
                &self.object,
                Some(key),
                "stop",
                &Value::Null,
                idempotency_key,
            )
            .await
    }

    /// The session's head and checkpoint log, or `None` if it has none.
    ///
    /// Read while a run saves the session, it is one state of it all the
    /// same: its log holds every checkpoint from its head's latest snapshot
    /// to its last, and none past it (the handler reads the session again
    /// when a save under way left its head and its log disagreeing; see
    /// [`AgentObject::handle_session`]). A session that kept changing while
    /// it was read, [`SESSION_READS`] times in a row, is a
    /// [`RestateError::Status`](crate::RestateError::Status) 503: read it
    /// again.
    pub async fn session(
        &self,
        session: &SessionId,
    ) -> Result<Option<Snapshot>, crate::RestateError> {
        let key = self.key(session)?;
        let answer = self
            .ingress
            .call_advising(
                &self.object,
                Some(key),
                "session",
                &Value::Null,
                SESSION_TIMEOUT,
            )
            .await?;
        reply(answer, "session")
    }
}

/// The input of `resume`: the answer to `interrupt`.
fn answer_input(interrupt: &InterruptId, answer: Value) -> Value {
    serde_json::to_value(Answer {
        interrupt: interrupt.clone(),
        answer,
    })
    .unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A terminal error quotes what it is given (an input, an id, a
    /// panic's message) without the process's secrets.
    #[test]
    fn a_terminal_errors_message_holds_no_secret() {
        let secret = "sk-harness-restate-terminal-0123456789";
        assert!(secrets::register(secret));
        for message in [
            format!("the run panicked: key={secret}"),
            format!("invalid type: string \"{secret}\", expected u32"),
            format!("the run is not paused on interrupt {secret}: it is not paused at all"),
        ] {
            let e = terminal_error(400, &message);
            assert_eq!(e.code(), 400);
            assert!(!e.message().contains(secret), "{}", e.message());
            assert!(e.message().contains("[redacted]"), "{}", e.message());
        }
    }

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| (*s).to_string()).collect()
    }

    /// A round read back on a replay: its outcomes in place, or an error
    /// for each effect the replay asks for in another's place.
    #[test]
    fn a_replayed_round_answers_only_the_effects_it_journaled() {
        let journaled = json!([
            {"effect": "part#0/part#1.1:a", "outcome": {"Ok": 1}},
            {"effect": "part#1/part#1.1:a", "outcome": {"Err": "503"}},
            {"effect": "part#2/part#1.1:a", "outcome": {"Ok": "three"}},
        ]);
        let asked = names(&[
            "part#0/part#1.1:a",
            "part#1/part#1.1:a",
            "part#2/part#1.1:a",
        ]);
        let outcomes = round_outcomes(&asked, journaled.clone()).unwrap();
        assert_eq!(
            outcomes,
            [
                Ok(Ok(json!(1))),
                Ok(Err("503".to_string())),
                Ok(Ok(json!("three")))
            ]
        );

        // The same first and last effect, another in the middle: the name
        // of the round (first … last) is the same, the entry is not.
        let other = names(&[
            "part#0/part#1.1:a",
            "part#1/part#1.1:b",
            "part#2/part#1.1:a",
        ]);
        let outcomes = round_outcomes(&other, journaled.clone()).unwrap();
        assert!(outcomes[0].is_ok() && outcomes[2].is_ok());
        let e = outcomes[1].clone().unwrap_err();
        assert!(
            e.contains("part#1/part#1.1:b") && e.contains("part#1/part#1.1:a"),
            "{e}"
        );

        // Another number of effects, or what is not a round.
        let two = names(&["part#0/part#1.1:a", "part#2/part#1.1:a"]);
        let e = round_outcomes(&two, journaled).unwrap_err();
        assert!(e.contains("3 effects") && e.contains("asks for 2"), "{e}");
        for bad in [json!({"Ok": 1}), json!([{"effect": 1}]), json!(null)] {
            let e = round_outcomes(&asked, bad.clone()).unwrap_err();
            assert!(e.contains("cannot be read"), "{bad}: {e}");
        }
    }
}
