//! Where the studio's sessions come from: any store, read-only, or an
//! application's typed agent, which can also answer and fork.

use crate::diff::Bound;
use crate::error::ApiError;
use crate::graph::Graph;
use crate::replay::{self, Changed, StatesAt};
use futures::StreamExt;
use futures::future::BoxFuture;
use harness::session::{Checkpoint, SessionError, SessionStore};
use harness::step::Interrupt;
use harness::{Agent, Context, HarnessState, RunError, RunEvent, SessionId};
use serde_json::Value;
use std::sync::Arc;

/// A run resumed with an answer, to be driven to where it settles.
pub(crate) struct Resumed {
    /// Drives the run until it settles (done, failed, asking again, or
    /// refusing the answer); resolves with the reason when the run refused
    /// the answer ([`RunError::AnswerRejected`]): nothing of it was kept,
    /// and the session waits on the same interrupt.
    pub(crate) run: BoxFuture<'static, Option<String>>,
    /// Resolves as soon as the answer is known to be kept (the step that
    /// asked finished its visit past it), which may be long before the run
    /// settles; never resolves otherwise (the run's end tells then).
    pub(crate) kept: BoxFuture<'static, ()>,
}

/// What the server reads and writes through.
pub(crate) trait Source: Send + Sync + 'static {
    /// The store holding the sessions.
    fn store(&self) -> &dyn SessionStore;

    /// The agent served, when the studio writes through one.
    fn agent_id(&self) -> Option<&str>;

    /// The loop as declared, when the studio has the harness.
    fn graph(&self) -> Option<&Graph>;

    /// The JSON schemas of the state and of an update, when known.
    fn schemas(&self) -> Option<(Value, Value)>;

    /// What each record of `log` (which starts at a snapshot) at the
    /// indexes `asked` (ascending) changed, merged through the reducers,
    /// within `bound`; `None` without the state type.
    fn changes(
        &self,
        session: &SessionId,
        log: &[Checkpoint],
        asked: &[usize],
        bound: Bound,
    ) -> Option<Result<Vec<Changed>, ApiError>>;

    /// The states after the record of `log` at index `at`, merged through
    /// the reducers; `None` without the state type.
    fn states_at(
        &self,
        session: &SessionId,
        log: &[Checkpoint],
        at: usize,
    ) -> Option<Result<StatesAt, ApiError>>;

    /// Answers the interrupt and returns the continued run, to be driven to
    /// its end, and how to know whether the run kept the answer.
    fn answer<'a>(
        &'a self,
        session: &'a SessionId,
        interrupt: &'a Interrupt,
        answer: Value,
    ) -> BoxFuture<'a, Result<Resumed, ApiError>>;

    /// Forks the session after `index` steps with `update` merged in.
    fn fork<'a>(
        &'a self,
        session: &'a SessionId,
        index: u64,
        update: Value,
    ) -> BoxFuture<'a, Result<SessionId, ApiError>>;
}

/// Any store, read-only.
pub(crate) struct ReadOnly {
    pub(crate) store: Arc<dyn SessionStore>,
}

impl Source for ReadOnly {
    fn store(&self) -> &dyn SessionStore {
        &*self.store
    }

    fn agent_id(&self) -> Option<&str> {
        None
    }

    fn graph(&self) -> Option<&Graph> {
        None
    }

    fn schemas(&self) -> Option<(Value, Value)> {
        None
    }

    fn changes(
        &self,
        _: &SessionId,
        _: &[Checkpoint],
        _: &[usize],
        _: Bound,
    ) -> Option<Result<Vec<Changed>, ApiError>> {
        None
    }

    fn states_at(
        &self,
        _: &SessionId,
        _: &[Checkpoint],
        _: usize,
    ) -> Option<Result<StatesAt, ApiError>> {
        None
    }

    fn answer<'a>(
        &'a self,
        _: &'a SessionId,
        _: &'a Interrupt,
        _: Value,
    ) -> BoxFuture<'a, Result<Resumed, ApiError>> {
        Box::pin(async { Err(ApiError::ReadOnly) })
    }

    fn fork<'a>(
        &'a self,
        _: &'a SessionId,
        _: u64,
        _: Value,
    ) -> BoxFuture<'a, Result<SessionId, ApiError>> {
        Box::pin(async { Err(ApiError::ReadOnly) })
    }
}

/// Makes the run slots of each resumed run.
pub(crate) type Slots<C> = Arc<dyn Fn() -> <C as Context>::Run + Send + Sync>;

/// An application's agent, with its state type.
pub(crate) struct Typed<S: HarnessState, C: Context> {
    pub(crate) agent: Agent<S, C>,
    pub(crate) store: Arc<dyn SessionStore>,
    pub(crate) graph: Graph,
    pub(crate) slots: Slots<C>,
}

impl<S: HarnessState, C: Context> Typed<S, C> {
    /// The agent's error, except that a session the studio's store holds
    /// (the handlers read its head there first) but the agent's does not
    /// says so: the studio was given another store than the harness's.
    fn own_store(&self, session: &SessionId, error: SessionError) -> ApiError {
        match error {
            SessionError::NoSession(missing) if missing.session == *session => {
                ApiError::NotInAgentStore {
                    session: missing.session,
                    agent: self.agent.id().to_owned(),
                }
            }
            other => ApiError::Session(other),
        }
    }
}

impl<S: HarnessState, C: Context> Source for Typed<S, C> {
    fn store(&self) -> &dyn SessionStore {
        &*self.store
    }

    fn agent_id(&self) -> Option<&str> {
        Some(self.agent.id())
    }

    fn graph(&self) -> Option<&Graph> {
        Some(&self.graph)
    }

    fn schemas(&self) -> Option<(Value, Value)> {
        Some((S::state_schema().to_value(), S::update_schema().to_value()))
    }

    fn changes(
        &self,
        session: &SessionId,
        log: &[Checkpoint],
        asked: &[usize],
        bound: Bound,
    ) -> Option<Result<Vec<Changed>, ApiError>> {
        Some(replay::changes::<S>(session, log, asked, bound))
    }

    fn states_at(
        &self,
        session: &SessionId,
        log: &[Checkpoint],
        at: usize,
    ) -> Option<Result<StatesAt, ApiError>> {
        Some(replay::states_at::<S>(session, log, at))
    }

    fn answer<'a>(
        &'a self,
        session: &'a SessionId,
        interrupt: &'a Interrupt,
        answer: Value,
    ) -> BoxFuture<'a, Result<Resumed, ApiError>> {
        Box::pin(async move {
            let run = self
                .agent
                .with((self.slots)())
                .resume(answer, session, &interrupt.id)
                .await
                .map_err(|e| self.own_store(session, e))?;
            // Subscribed before the run is driven: no event is missed.
            let events = run.events();
            let (path, step) = (interrupt.path.clone(), interrupt.step.clone());
            let id = interrupt.id.clone();
            let kept: BoxFuture<'static, ()> = Box::pin(async move {
                let mut events = events;
                while let Some(event) = events.next().await {
                    // The step that asked read the answer and kept it, or
                    // finished its visit (the answer to a breakpoint,
                    // which no step reads): a refused answer ends the
                    // visit with neither.
                    let finished = match &event {
                        RunEvent::AnswerAccepted { interrupt, .. } => *interrupt == id,
                        RunEvent::StepFinished {
                            path: p, step: s, ..
                        } => *p == path && **s == *step,
                        RunEvent::Child {
                            path: p,
                            step: s,
                            kind,
                            ..
                        } => &**kind == "step_finished" && *p == path && **s == *step,
                        _ => false,
                    };
                    if finished {
                        return;
                    }
                }
                // The run settled: its outcome tells.
                futures::future::pending::<()>().await;
            });
            let answered = interrupt.id.clone();
            // The run records how it ends (done, failed, asking again) in
            // the session, which is what the page shows; a refused answer
            // is recorded nowhere, so it is returned.
            let run: BoxFuture<'static, Option<String>> = Box::pin(async move {
                match run.await {
                    Err(RunError::AnswerRejected { interrupt, reason })
                        if interrupt == answered =>
                    {
                        Some(reason)
                    }
                    _ => None,
                }
            });
            Ok(Resumed { run, kept })
        })
    }

    fn fork<'a>(
        &'a self,
        session: &'a SessionId,
        index: u64,
        update: Value,
    ) -> BoxFuture<'a, Result<SessionId, ApiError>> {
        Box::pin(async move {
            let update = if update.is_null() {
                None
            } else {
                Some(
                    serde_json::from_value::<S::Update>(update)
                        .map_err(|e| ApiError::BadUpdate(e.to_string()))?,
                )
            };
            self.agent
                .fork(session, index, update)
                .await
                .map_err(|e| self.own_store(session, e))
        })
    }
}
