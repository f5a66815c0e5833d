//! Agents: a harness with its agent slots, ready to run, and the operations
//! on its stored sessions (resume, continue, recover, time travel).

use crate::graph::{Harness, HarnessInner};
use crate::ids::{InterruptId, RunId, SessionId};
use crate::run::{Execution, NoInterrupt, Run, SessionLink, StepJournal};
use crate::session::{
    CheckpointInfo, NoSession, SessionCursor, SessionError, SessionInFlight,
    SessionPendingInterrupt, SessionPhase, SessionStore, StoreError, StoreLoad, StoredRun, rebuild,
};
use crate::slots::{Context, Phase, SlotError, SlotSource, Slots};
use crate::state::HarnessState;
use serde_json::Value;
use std::fmt;
use std::sync::Arc;

pub(crate) struct AgentInner<S: HarnessState, C> {
    pub(crate) id: Arc<str>,
    pub(crate) harness: Arc<HarnessInner<S, C>>,
    pub(crate) slots: Slots,
}

/// A harness with its agent slots: runs are started from it.
///
/// Cheap to clone (shared).
pub struct Agent<S: HarnessState, C: Context = ()> {
    inner: Arc<AgentInner<S, C>>,
}

impl<S: HarnessState, C: Context> Clone for Agent<S, C> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<S: HarnessState, C: Context> fmt::Debug for Agent<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Agent")
            .field("id", &self.inner.id)
            .field("slots", &self.inner.slots)
            .finish_non_exhaustive()
    }
}

/// What to do with a run submitted to a session that is busy (running, or
/// runnable and waiting for a worker).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Busy {
    /// Refuse it with [`SessionError::InFlight`].
    Reject,
    /// Queue it: it starts when the runs before it complete.
    Queue,
}

/// Where a submitted run is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Submitted {
    /// Waiting for a worker to take it.
    Runnable,
    /// Queued behind the session's current run, at this position (1 = next).
    Queued {
        /// Its place in the queue.
        position: usize,
    },
}

/// Creates an agent named `id` from `harness`, with its agent slots.
///
/// The fixed slots (given to the harness) and the agent slots are checked
/// here: every missing, misplaced, unknown or mistyped slot is reported in one
/// [`SlotError`].
pub fn create_agent<S: HarnessState, C: Context>(
    id: impl Into<String>,
    harness: &Harness<S, C>,
    slots: Slots,
) -> Result<Agent<S, C>, SlotError> {
    let none = Slots::new();
    SlotSource::new(&harness.inner.fixed, &slots, &none)
        .check::<C>(&[Phase::Fixed, Phase::Agent])?;
    Ok(Agent {
        inner: Arc::new(AgentInner {
            id: Arc::from(id.into()),
            harness: Arc::clone(&harness.inner),
            slots,
        }),
    })
}

impl<S: HarnessState, C: Context> Agent<S, C> {
    /// The agent's id.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// Starts a run from `state` with the run slots, in a new session.
    ///
    /// Returns the [`Run`]; await it for the outcome. The run slots are
    /// checked here, all problems reported together. With a session store,
    /// the session is created when the run starts.
    pub fn run(&self, state: S, slots: Slots) -> Result<Run<S, C>, SlotError> {
        self.run_in(SessionId::random(), state, slots)
    }

    /// Starts a run from `state` in a new session named `session_id`.
    pub fn run_in(
        &self,
        session_id: SessionId,
        state: S,
        slots: Slots,
    ) -> Result<Run<S, C>, SlotError> {
        let ctx = self.context(&slots)?;
        let harness = &self.inner.harness;
        let link = match &harness.store {
            Some(store) => SessionLink::New(Arc::clone(store), harness.session_config.clone()),
            None => SessionLink::Detached,
        };
        let exec = Execution::new(state, harness.start, StepJournal::default(), link);
        Ok(Run::new(
            Arc::clone(&self.inner),
            ctx,
            exec,
            RunId::random(),
            session_id,
        ))
    }

    fn context(&self, slots: &Slots) -> Result<C, SlotError> {
        let inner = &self.inner;
        let source = SlotSource::new(&inner.harness.fixed, &inner.slots, slots);
        source.check::<C>(&[Phase::Run])?;
        C::from_slots(&source)
    }

    pub(crate) fn store_handle(&self) -> Option<Arc<dyn SessionStore>> {
        self.inner.harness.store.clone()
    }

    fn store(&self) -> Result<&Arc<dyn SessionStore>, SessionError> {
        self.inner
            .harness
            .store
            .as_ref()
            .ok_or(SessionError::NoStore)
    }

    /// Submits a run from `state` in a new session, for a
    /// [`Worker`](crate::worker::Worker) to take; returns the session.
    pub async fn submit(&self, state: S) -> Result<SessionId, SessionError> {
        let session = SessionId::random();
        self.create_runnable(session.clone(), state).await?;
        Ok(session)
    }

    async fn create_runnable(&self, session: SessionId, state: S) -> Result<(), SessionError> {
        let harness = &self.inner.harness;
        let state = serde_json::to_value(&state).map_err(|e| {
            SessionError::Store(StoreError::backend(format!(
                "the state cannot be serialized: {e}"
            )))
        })?;
        SessionCursor::create(
            Arc::clone(self.store()?),
            harness.session_config.clone(),
            &self.inner.id,
            RunId::random(),
            session,
            state,
            &harness.steps[harness.start].name,
            false,
        )
        .await?;
        Ok(())
    }

    /// Submits a new run on `session_id` with `input` merged into its state
    /// (a session that does not exist is created from `S::default()`), for a
    /// [`Worker`](crate::worker::Worker) to take. If the session is busy,
    /// `busy` says whether to refuse the run or queue it behind the current
    /// one.
    pub async fn submit_input(
        &self,
        session_id: &SessionId,
        input: S::Update,
        busy: Busy,
    ) -> Result<Submitted, SessionError> {
        let store = Arc::clone(self.store()?);
        let input_json = serde_json::to_value(&input).map_err(|e| {
            SessionError::Store(StoreError::backend(format!(
                "the input cannot be serialized: {e}"
            )))
        })?;
        // Compare-and-set can lose to a worker settling the session at the
        // same moment; read again and decide again.
        for _ in 0..16 {
            let Some(head) = self.find_session(session_id).await? else {
                let mut state = S::default();
                state.apply(input);
                return self
                    .create_runnable(session_id.clone(), state)
                    .await
                    .map(|()| Submitted::Runnable);
            };
            let mut next = head.clone();
            next.version += 1;
            next.updated_at = crate::session::now_millis();
            let mut append = Vec::new();
            let submitted = match &head.phase {
                SessionPhase::Interrupted { interrupt } => {
                    return Err(SessionPendingInterrupt {
                        session: session_id.clone(),
                        interrupt: interrupt.id.clone(),
                    }
                    .into());
                }
                SessionPhase::Running => match busy {
                    Busy::Reject => {
                        let (owner, expires_at) = head
                            .lease
                            .as_ref()
                            .map_or(("a waiting run".to_string(), 0), |l| {
                                (l.owner.clone(), l.expires_at)
                            });
                        return Err(SessionInFlight {
                            session: session_id.clone(),
                            owner,
                            expires_at,
                        }
                        .into());
                    }
                    Busy::Queue => {
                        next.queued.push(input_json.clone());
                        Submitted::Queued {
                            position: next.queued.len(),
                        }
                    }
                },
                SessionPhase::Completed { .. } | SessionPhase::Failed { .. } => {
                    let time = next.updated_at;
                    append.push(crate::session::push_input(
                        &mut next,
                        input_json.clone(),
                        time,
                    ));
                    next.phase = SessionPhase::Running;
                    next.lease = None;
                    next.run_id = RunId::random();
                    next.journal = StepJournal::default();
                    next.next_step = Some(
                        self.inner.harness.steps[self.inner.harness.start]
                            .name
                            .to_string(),
                    );
                    Submitted::Runnable
                }
            };
            match store
                .commit(crate::session::Commit {
                    head: next,
                    expected_version: Some(head.version),
                    append,
                    remove: Vec::new(),
                    durable: true,
                })
                .await
            {
                Ok(()) => return Ok(submitted),
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(SessionError::Store(StoreError::backend(format!(
            "session {session_id} kept changing while a run was submitted to it"
        ))))
    }

    /// The heads of this agent's sessions in the store.
    pub async fn sessions(&self) -> Result<Vec<StoredRun>, SessionError> {
        let store = self.store()?;
        let mut heads = Vec::new();
        for id in store.sessions().await? {
            if let Some(head) = store.load(&id).await?
                && head.agent_id == *self.inner.id
            {
                heads.push(head);
            }
        }
        Ok(heads)
    }

    /// The head of a stored session of this agent.
    pub async fn session(&self, session_id: &SessionId) -> Result<StoredRun, SessionError> {
        self.find_session(session_id).await?.ok_or_else(|| {
            NoSession {
                session: session_id.clone(),
            }
            .into()
        })
    }

    /// The head of `session_id` if it exists, checked to be this agent's.
    async fn find_session(
        &self,
        session_id: &SessionId,
    ) -> Result<Option<StoredRun>, SessionError> {
        let Some(head) = self.store()?.load(session_id).await? else {
            return Ok(None);
        };
        if head.agent_id != *self.inner.id {
            return Err(StoreLoad {
                session: session_id.clone(),
                record: "head".into(),
                reason: format!(
                    "the session belongs to agent `{}`, not `{}`",
                    head.agent_id, self.inner.id
                ),
            }
            .into());
        }
        Ok(Some(head))
    }

    /// A session whose lease is live belongs to another run.
    fn check_not_in_flight(head: &StoredRun) -> Result<(), SessionError> {
        match &head.lease {
            Some(l) if l.is_live(crate::session::now_millis()) => Err(SessionInFlight {
                session: head.session_id.clone(),
                owner: l.owner.clone(),
                expires_at: l.expires_at,
            }
            .into()),
            _ => Ok(()),
        }
    }

    fn step_at(&self, head: &StoredRun) -> Result<usize, SessionError> {
        let name = head.next_step.as_deref().unwrap_or_default();
        self.inner.harness.step_index(name).ok_or_else(|| {
            StoreLoad {
                session: head.session_id.clone(),
                record: "head".into(),
                reason: format!("its next step `{name}` is not a step of this loop"),
            }
            .into()
        })
    }

    async fn attached_run(
        &self,
        head: StoredRun,
        slots: Slots,
        run_id: Option<RunId>,
        at: usize,
        journal: StepJournal,
        input: Option<Value>,
    ) -> Result<Run<S, C>, SessionError> {
        let ctx = self.context(&slots)?;
        let store = Arc::clone(self.store()?);
        let mut state: S = rebuild(&*store, &head, None).await?;
        let input_update = match &input {
            Some(v) => Some(serde_json::from_value::<S::Update>(v.clone()).map_err(|e| {
                SessionError::Store(StoreError::backend(format!(
                    "the input cannot be read back: {e}"
                )))
            })?),
            None => None,
        };
        let session_id = head.session_id.clone();
        let next_step = Some(self.inner.harness.steps[at].name.to_string());
        let run_id_used = run_id.clone().unwrap_or_else(|| head.run_id.clone());
        let cursor = SessionCursor::acquire(
            Arc::clone(&store),
            self.inner.harness.session_config.clone(),
            head,
            run_id,
            next_step,
            journal.clone(),
            input,
        )
        .await?;
        if let Some(u) = input_update {
            state.apply(u);
        }
        let exec = Execution::new(
            state,
            at,
            journal,
            SessionLink::Attached {
                cursor: Arc::new(cursor),
                leased: true,
            },
        );
        Ok(Run::new(
            Arc::clone(&self.inner),
            ctx,
            exec,
            run_id_used,
            session_id,
        ))
    }

    /// Answers the interrupt `interrupt_id` of a stored session — from this
    /// process or another — and returns the continued run: the interrupted
    /// step runs again and its `cx.interrupt` call returns `response`.
    ///
    /// Fails with [`NoInterrupt`] if the session is not paused on that
    /// interrupt, with `SessionInFlight` if another run holds it.
    pub async fn resume(
        &self,
        response: impl Into<Value>,
        session_id: &SessionId,
        interrupt_id: &InterruptId,
        slots: Slots,
    ) -> Result<Run<S, C>, SessionError> {
        let head = self.session(session_id).await?;
        Self::check_not_in_flight(&head)?;
        let pending = match &head.phase {
            SessionPhase::Interrupted { interrupt } => Some(interrupt.id.clone()),
            _ => None,
        };
        if pending.as_ref() != Some(interrupt_id) {
            return Err(NoInterrupt {
                given: interrupt_id.clone(),
                pending,
            }
            .into());
        }
        let at = self.step_at(&head)?;
        let mut journal = head.journal.clone();
        journal.responses.push(response.into());
        self.attached_run(head, slots, None, at, journal, None)
            .await
    }

    /// Starts a new run on an existing session (a chat thread): its stored
    /// state with `input` merged through the reducers, from the start step.
    /// A session that does not exist yet is created from `S::default()`.
    ///
    /// Fails with `SessionPendingInterrupt` if the session waits for an
    /// answer, `SessionInFlight` if another run holds it, and
    /// `SessionError::Unfinished` if a run died mid-way (see [`recover`](Self::recover)).
    pub async fn continue_session(
        &self,
        session_id: &SessionId,
        input: S::Update,
        slots: Slots,
    ) -> Result<Run<S, C>, SessionError> {
        let Some(head) = self.find_session(session_id).await? else {
            let mut state = S::default();
            state.apply(input);
            return Ok(self.run_in(session_id.clone(), state, slots)?);
        };
        Self::check_not_in_flight(&head)?;
        match &head.phase {
            SessionPhase::Interrupted { interrupt } => {
                return Err(SessionPendingInterrupt {
                    session: session_id.clone(),
                    interrupt: interrupt.id.clone(),
                }
                .into());
            }
            // Not in flight, yet running: its run died mid-way.
            SessionPhase::Running => {
                return Err(SessionError::Unfinished {
                    session: session_id.clone(),
                });
            }
            SessionPhase::Completed { .. } | SessionPhase::Failed { .. } => {}
        }
        let input = serde_json::to_value(&input).map_err(|e| {
            SessionError::Store(StoreError::backend(format!(
                "the input cannot be serialized: {e}"
            )))
        })?;
        let at = self.inner.harness.start;
        self.attached_run(
            head,
            slots,
            Some(RunId::random()),
            at,
            StepJournal::default(),
            Some(input),
        )
        .await
    }

    /// Continues a session whose run did not finish: a process that died
    /// mid-run (its lease expired), a stopped run, or a failed one. The run
    /// goes on from the step after the last checkpoint, with that step's
    /// journal, so completed steps are neither lost nor repeated.
    pub async fn recover(
        &self,
        session_id: &SessionId,
        slots: Slots,
    ) -> Result<Run<S, C>, SessionError> {
        let head = self.session(session_id).await?;
        Self::check_not_in_flight(&head)?;
        let why = match &head.phase {
            SessionPhase::Running | SessionPhase::Failed { .. } => None,
            SessionPhase::Completed { signal } if *signal == crate::Signal::STOPPED => None,
            SessionPhase::Completed { signal } => Some(format!("it completed with `{signal}`")),
            SessionPhase::Interrupted { interrupt } => Some(format!(
                "it waits for an answer to interrupt {}",
                interrupt.id
            )),
        };
        if let Some(why) = why {
            return Err(SessionError::NothingToRecover {
                session: session_id.clone(),
                why,
            });
        }
        if head.phase == SessionPhase::Running && head.next_step.is_none() {
            return Err(self.record_lost_end(head).await?);
        }
        let at = self.step_at(&head)?;
        let journal = head.journal.clone();
        self.attached_run(head, slots, None, at, journal, None)
            .await
    }

    /// A run's last step was checkpointed but its process died before it
    /// recorded the end: records it now (and starts the next queued run,
    /// if any, as the run would have), and says so.
    async fn record_lost_end(&self, head: StoredRun) -> Result<SessionError, SessionError> {
        let session = head.session_id.clone();
        let signal = head
            .ended_with
            .clone()
            .unwrap_or_else(|| crate::Signal::new(crate::session::END));
        let cursor = SessionCursor::acquire(
            Arc::clone(self.store()?),
            self.inner.harness.session_config.clone(),
            head,
            None,
            None,
            StepJournal::default(),
            None,
        )
        .await?;
        let start = &self.inner.harness.steps[self.inner.harness.start].name;
        cursor
            .settle(
                SessionPhase::Completed {
                    signal: signal.clone(),
                },
                None,
                StepJournal::default(),
                start,
            )
            .await?;
        Ok(SessionError::NothingToRecover {
            session,
            why: format!(
                "its run had completed with `{signal}` before its process stopped; \
                 the end is now recorded"
            ),
        })
    }

    /// The checkpoints of a session: one per completed step, plus the start.
    pub async fn history(
        &self,
        session_id: &SessionId,
    ) -> Result<Vec<CheckpointInfo>, SessionError> {
        let head = self.session(session_id).await?;
        let log = self.store()?.checkpoints(&head.session_id, 0).await?;
        Ok(CheckpointInfo::history(log))
    }

    /// The state of a session after `index` steps; the latest when `None`.
    pub async fn state_at(
        &self,
        session_id: &SessionId,
        index: Option<u64>,
    ) -> Result<S, SessionError> {
        let head = self.session(session_id).await?;
        if let Some(i) = index
            && i > head.steps
        {
            return Err(SessionError::NoCheckpoint {
                session: session_id.clone(),
                index: i,
                last: head.steps,
            });
        }
        Ok(rebuild(&**self.store()?, &head, index).await?)
    }

    /// Creates a new session whose state is `session_id`'s after `index`
    /// steps, with `update` merged in through the reducers. The fork is
    /// completed (not running): continue it with
    /// [`continue_session`](Self::continue_session).
    pub async fn fork(
        &self,
        session_id: &SessionId,
        index: u64,
        update: Option<S::Update>,
    ) -> Result<SessionId, SessionError> {
        let mut state = self.state_at(session_id, Some(index)).await?;
        if let Some(u) = update {
            state.apply(u);
        }
        let store = Arc::clone(self.store()?);
        let fork = SessionId::random();
        let state_json = serde_json::to_value(&state).map_err(|e| {
            SessionError::Store(StoreError::backend(format!(
                "the state cannot be serialized: {e}"
            )))
        })?;
        let start = &self.inner.harness.steps[self.inner.harness.start].name;
        let cursor = SessionCursor::create(
            store,
            self.inner.harness.session_config.clone(),
            &self.inner.id,
            RunId::random(),
            fork.clone(),
            state_json,
            start,
            true,
        )
        .await?;
        cursor
            .settle(
                SessionPhase::Completed {
                    signal: crate::Signal::new(format!("$fork:{session_id}@{index}")),
                },
                None,
                StepJournal::default(),
                start,
            )
            .await?;
        Ok(fork)
    }
}
