//! Agents: a harness with its agent slots, ready to run, and the operations
//! on its stored sessions (resume, continue, recover, time travel).

use crate::error::{
    NoInterrupt, NoSession, SessionError, SessionPendingInterrupt, StoreError, StoreLoad,
};
use crate::graph::{Harness, HarnessInner};
use crate::ids::TaskPath;
use crate::ids::{InterruptId, RunId, SessionId};
use crate::run::{Execution, Run, SessionLink, attach_sub_journals, task_from};
use crate::session::head::{self, check_owner};
use crate::session::{
    Busy, CheckpointInfo, Holder, Journals, SessionCursor, SessionPhase, SessionStore, Span,
    Stopping, StoredRun, Submitted, end_open_fork, journals, read_log, rebuild, rebuild_tasks,
};
use crate::signal::Signal;
use crate::slots::{Context, NoSlots};
use crate::state::HarnessState;
use crate::step::{Interrupt, StepJournal};
use serde_json::Value;
use std::fmt;
use std::sync::Arc;

struct AgentInner<S: HarnessState, C: Context> {
    id: Arc<str>,
    harness: Arc<HarnessInner<S, C>>,
    slots: C::Agent,
}

/// A harness with its agent slots: runs are started from it.
///
/// Cheap to clone (shared). The operations that start or continue a run
/// (`run`, `run_in`, `resume`, `continue_session`, `recover`) are here when
/// the context has no run slots; otherwise give them first with
/// [`with`](Agent::with), which has the same operations.
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
            .finish_non_exhaustive()
    }
}

/// Creates an agent named `id` from `harness`, whose context has no agent
/// slots (give those with [`create_agent_with`]).
///
/// The id names the agent's sessions in a store: an agent refuses sessions
/// of another id.
pub fn create_agent<S: HarnessState, C: Context>(
    id: impl Into<String>,
    harness: &Harness<S, C>,
) -> Agent<S, C>
where
    C::Agent: NoSlots,
{
    create_agent_with(id, harness, C::Agent::none())
}

/// Creates an agent named `id` from `harness`, with the context's agent
/// slots, shared by the agent's runs.
pub fn create_agent_with<S: HarnessState, C: Context>(
    id: impl Into<String>,
    harness: &Harness<S, C>,
    slots: C::Agent,
) -> Agent<S, C> {
    Agent {
        inner: Arc::new(AgentInner {
            id: Arc::from(id.into()),
            harness: Arc::clone(&harness.inner),
            slots,
        }),
    }
}

impl<S: HarnessState, C: Context> Agent<S, C> {
    /// The agent's id.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// Whether its harness was built with a session store
    /// ([`HarnessBuilder::store`](crate::graph::HarnessBuilder::store)).
    pub fn has_store(&self) -> bool {
        self.inner.harness.store.is_some()
    }

    /// Whether its harness journals effects in an
    /// [`EffectJournal`](crate::effect::EffectJournal)
    /// ([`HarnessBuilder::effects`](crate::graph::HarnessBuilder::effects)).
    pub fn journals_effects(&self) -> bool {
        self.inner.harness.effects.is_some()
    }

    /// Gives the run slots of the next operation: `agent.with(run_slots)`
    /// then `.run(state)`, `.resume(..)`, `.continue_session(..)` or
    /// `.recover(..)`.
    pub fn with(&self, slots: C::Run) -> AgentWith<'_, S, C> {
        AgentWith { agent: self, slots }
    }

    /// Starts a run from `state` in a new session.
    ///
    /// Returns the [`Run`]; await it for the outcome. With a session store,
    /// the session is created when the run starts.
    pub fn run(&self, state: S) -> Run<S, C>
    where
        C::Run: NoSlots,
    {
        self.with(C::Run::none()).run(state)
    }

    /// Starts a run from `state` in a new session named `session_id`.
    pub fn run_in(&self, session_id: SessionId, state: S) -> Run<S, C>
    where
        C::Run: NoSlots,
    {
        self.with(C::Run::none()).run_in(session_id, state)
    }

    fn start_run(&self, session_id: SessionId, state: S, slots: C::Run) -> Run<S, C> {
        let harness = &self.inner.harness;
        let link = match &harness.store {
            Some(store) => SessionLink::New(Arc::clone(store), harness.session_config.clone()),
            None => SessionLink::Detached,
        };
        let exec = Execution::new(state, harness.start, StepJournal::default(), link);
        self.new_run(slots, exec, self.fresh_run_id(), session_id)
    }

    /// A new run's id: the effect journal's when it fixes one
    /// ([`EffectJournal::run_id`](crate::effect::EffectJournal::run_id)),
    /// else a random one.
    fn fresh_run_id(&self) -> RunId {
        self.inner
            .harness
            .effects
            .as_ref()
            .and_then(|journal| journal.run_id())
            .unwrap_or_else(RunId::random)
    }

    fn new_run(
        &self,
        slots: C::Run,
        exec: Execution<S>,
        run_id: RunId,
        session_id: SessionId,
    ) -> Run<S, C> {
        let inner = &self.inner;
        let ctx = C::assemble(&inner.harness.fixed, &inner.slots, slots);
        Run::new(
            Arc::clone(&inner.harness),
            Arc::clone(&inner.id),
            ctx,
            exec,
            run_id,
            session_id,
        )
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
        SessionCursor::create(
            Arc::clone(self.store()?),
            harness.session_config.clone(),
            &self.inner.id,
            RunId::random(),
            session,
            to_json(&state, "state")?,
            harness.start_name(),
            Holder::AWorker,
        )
        .await?;
        Ok(())
    }

    /// Submits a new run on `session_id` with `input` merged into its state
    /// (a session that does not exist is created from `S::default()`), for a
    /// [`Worker`](crate::worker::Worker) to take. If the session is busy,
    /// `busy` says whether to refuse the run or queue it behind the current
    /// one.
    ///
    /// The session's log is read first (from its latest snapshot), as a
    /// run would read it: a broken one is a [`SessionError::Load`] naming
    /// the gap, and nothing is committed over the session.
    pub async fn submit_input(
        &self,
        session_id: &SessionId,
        input: S::Update,
        busy: Busy,
    ) -> Result<Submitted, SessionError> {
        let store = Arc::clone(self.store()?);
        let input_json = to_json(&input, "input")?;
        let harness = &self.inner.harness;
        // A log that is broken is left as it is, as every other write
        // leaves it (the guide's "Verified reads"): the run submitted would
        // fail on it, and a worker retry it until it is quarantined.
        // A step committed meanwhile may have taken a new snapshot and
        // dropped the one the head read names: a gap read against a head
        // that has moved on is read again, and only one that stays is
        // the log's.
        let mut tries = 0;
        while let Some(head) = store.load(session_id).await? {
            check_owner(&head, &self.inner.id)?;
            match read_log(&*store, &head, Span::Latest).await {
                Ok(_) => break,
                Err(e) => {
                    tries += 1;
                    let moved = store
                        .load(session_id)
                        .await?
                        .is_some_and(|now| now.version != head.version);
                    if !moved || tries == 8 {
                        return Err(e.into());
                    }
                }
            }
        }
        // Compare-and-set can lose to a worker settling the session at the
        // same moment, or to another submitter creating it: decide again.
        head::commit_with_retry(&*store, session_id, |current| match current {
            Some(current) => {
                check_owner(current, &self.inner.id)?;
                head::submit(current, &input_json, busy, harness.start_name())
                    .map(|(commit, submitted)| (Some(commit), submitted))
            }
            None => {
                let mut state = S::default();
                state.apply(input.clone());
                let commit = head::create(
                    head::NewSession {
                        agent_id: &self.inner.id,
                        run_id: RunId::random(),
                        session_id: session_id.clone(),
                        state: to_json(&state, "state")?,
                        next_step: harness.start_name(),
                        lease: None,
                    },
                    &harness.session_config,
                );
                Ok((Some(commit), Submitted::Runnable))
            }
        })
        .await
    }

    /// Stops the run of `session_id` wherever it runs: in a worker of
    /// another process, say, which a [`StopHandle`](crate::StopHandle)
    /// cannot reach. A run that holds the session is asked to stop, through
    /// the store, and stops at its next step boundary (the step running now
    /// is not cancelled; its update is kept), with the signal `$stopped`; a
    /// run that waits for a worker is recorded as stopped at once. Either
    /// way, a run queued behind it then starts.
    ///
    /// The running process sees the request when it next writes the
    /// session: when the step running now completes.
    ///
    /// The stop is for the run going when it is asked: should that run end
    /// meanwhile, and a run queued behind it start, the answer is
    /// [`Stopping::Ended`] and the new run goes on.
    ///
    /// # Errors
    ///
    /// [`NoSession`](SessionError::NoSession) if there is no such session,
    /// [`SessionError::Load`] if it is another agent's, or the store's
    /// error.
    pub async fn stop_session(&self, session_id: &SessionId) -> Result<Stopping, SessionError> {
        let store = Arc::clone(self.store()?);
        let harness = &self.inner.harness;
        // The run the stop is for: the one going now.
        let mut asked_of: Option<RunId> = None;
        head::commit_with_retry(&*store, session_id, |current| match current {
            Some(current) => {
                check_owner(current, &self.inner.id)?;
                let run = asked_of.get_or_insert_with(|| current.run_id.clone());
                if current.run_id != *run {
                    return Ok((None, Stopping::Ended));
                }
                Ok(head::stop(
                    current,
                    store.now(),
                    harness.start_name(),
                    &harness.session_config,
                ))
            }
            None => Err(NoSession {
                session: session_id.clone(),
            }
            .into()),
        })
        .await
    }

    /// The heads of this agent's sessions in the store.
    ///
    /// # Errors
    ///
    /// [`SessionError::Load`] for the first head that does not read
    /// (naming its session), or the store's error.
    pub async fn sessions(&self) -> Result<Vec<StoredRun>, SessionError> {
        let (heads, unreadable) = self.readable_sessions().await?;
        match unreadable.into_iter().next() {
            Some(load) => Err(load.into()),
            None => Ok(heads),
        }
    }

    /// The heads of this agent's sessions that read, and the heads in the
    /// store that do not (whose agent cannot be told).
    pub(crate) async fn readable_sessions(
        &self,
    ) -> Result<(Vec<StoredRun>, Vec<StoreLoad>), SessionError> {
        let store = self.store()?;
        let (mut heads, mut unreadable) = (Vec::new(), Vec::new());
        for id in store.sessions().await? {
            match store.load(&id).await {
                Ok(Some(head)) if head.agent_id == *self.inner.id => heads.push(head),
                Ok(_) => {}
                Err(StoreError::Load(load)) => unreadable.push(load),
                Err(e) => return Err(e.into()),
            }
        }
        Ok((heads, unreadable))
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
        check_owner(&head, &self.inner.id)?;
        Ok(Some(head))
    }

    /// A session whose lease is live belongs to another run.
    fn check_not_in_flight(&self, head: &StoredRun) -> Result<(), SessionError> {
        match head::in_flight(head, self.store()?.now()) {
            Some(held) => Err(held.into()),
            None => Ok(()),
        }
    }

    /// Marks `session` failed with `reason` if it still waits for a worker;
    /// whether it did. For a worker that cannot run it (see
    /// [`Worker`](crate::worker::Worker)).
    pub(crate) async fn quarantine(
        &self,
        session: &SessionId,
        reason: &str,
    ) -> Result<bool, SessionError> {
        let store = self.store()?;
        for _ in 0..16 {
            let Some(current) = store.load(session).await? else {
                return Ok(false);
            };
            let Some(commit) = head::quarantine(&current, &self.inner.id, reason, store.now())
            else {
                return Ok(false);
            };
            match store.commit(&commit).await {
                Ok(()) => return Ok(true),
                Err(StoreError::Conflict { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(false)
    }

    fn step_at(&self, head: &StoredRun) -> Result<usize, SessionError> {
        let name = head.next_step.as_deref().unwrap_or_default();
        self.inner.harness.step_index(name).ok_or_else(|| {
            crate::error::StoreLoad::new(
                head.session_id.clone(),
                "head",
                format!("its next step `{name}` is not a step of this loop"),
            )
            .into()
        })
    }

    async fn attached_run(
        &self,
        head: StoredRun,
        slots: C::Run,
        from: Continuation,
    ) -> Result<Run<S, C>, SessionError> {
        let Continuation {
            run_id,
            at,
            mut journals,
            input,
            answering,
            past_breakpoint,
        } = from;
        let store = Arc::clone(self.store()?);
        let mut tasks = rebuild_tasks::<S>(&*store, &head, None).await?;
        if input.is_some() {
            // A new run: it never finishes a fork the run before it left.
            end_open_fork(&mut tasks, &TaskPath::root());
        }
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
        let mut root = task_from(
            &self.inner.harness,
            &head.session_id,
            &mut tasks,
            &mut journals,
            TaskPath::root(),
            at,
            None,
        )?;
        attach_sub_journals(&mut root, journals);
        // The steps the run has taken before: none for a new run; for the
        // same run resumed or recovered, what its head counts, so that its
        // step limit and outcome count it whole, as one resumed in its own
        // process does.
        let steps_before = if run_id.is_some() {
            0
        } else {
            head.run_steps()
        };
        let cursor = SessionCursor::acquire(
            Arc::clone(&store),
            self.inner.harness.session_config.clone(),
            head,
            run_id,
            next_step,
            root.all_journals(),
            input,
        )
        .await?;
        if let Some(u) = input_update {
            Arc::make_mut(&mut root.state).apply(u);
        }
        if let Some(interrupt) = answering {
            root.mark_answering(interrupt);
        }
        root.past_breakpoint = past_breakpoint;
        let mut exec = Execution::new(
            S::default(),
            at,
            StepJournal::default(),
            SessionLink::Attached {
                cursor: Arc::new(cursor),
                leased: true,
            },
        );
        exec.task = root;
        exec.steps = steps_before;
        Ok(self.new_run(slots, exec, run_id_used, session_id))
    }

    /// Answers the interrupt `interrupt_id` of a stored session — from this
    /// process or another — and returns the continued run: the interrupted
    /// step runs again and its `cx.interrupt` call returns `response`.
    ///
    /// Fails with [`NoInterrupt`] if the session is not paused on that
    /// interrupt, with `SessionInFlight` if another run holds it.
    async fn resume_with(
        &self,
        response: Value,
        session_id: &SessionId,
        interrupt_id: &InterruptId,
        update: Option<S::Update>,
        slots: C::Run,
    ) -> Result<Run<S, C>, SessionError> {
        let update = match &update {
            Some(u) => Some(to_json(u, "update")?),
            None => None,
        };
        let head = self.session(session_id).await?;
        self.check_not_in_flight(&head)?;
        let pending = match &head.phase {
            SessionPhase::Interrupted { interrupt } if interrupt.id == *interrupt_id => {
                interrupt.clone()
            }
            other => {
                return Err(NoInterrupt {
                    given: interrupt_id.clone(),
                    pending: match other {
                        SessionPhase::Interrupted { interrupt } => Some(interrupt.id.clone()),
                        _ => None,
                    },
                }
                .into());
            }
        };
        let at = self.step_at(&head)?;
        let mut journals = journals(&head);
        // A breakpoint's answer is no step's: the run goes on with the step
        // it names, which does not pause again.
        let past_breakpoint = pending.breakpoint.is_some();
        if !past_breakpoint {
            journals
                .entry(pending.path.clone())
                .or_default()
                .responses
                .push(response);
        }
        let from = Continuation {
            run_id: None,
            at,
            journals,
            input: update,
            answering: (!past_breakpoint).then_some(pending),
            past_breakpoint,
        };
        self.attached_run(head, slots, from).await
    }

    /// Starts a new run on an existing session (a chat thread): its stored
    /// state with `input` merged through the reducers, from the start step.
    /// A session that does not exist yet is created from `S::default()`.
    ///
    /// Fails with `SessionPendingInterrupt` if the session waits for an
    /// answer, `SessionInFlight` if another run holds it, and
    /// `SessionError::Unfinished` if a run died mid-way (see [`recover`](Self::recover)).
    async fn continue_with(
        &self,
        session_id: &SessionId,
        input: S::Update,
        slots: C::Run,
    ) -> Result<Run<S, C>, SessionError> {
        let Some(head) = self.find_session(session_id).await? else {
            let mut state = S::default();
            state.apply(input);
            return Ok(self.start_run(session_id.clone(), state, slots));
        };
        self.check_not_in_flight(&head)?;
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
        let input = to_json(&input, "input")?;
        let at = self.inner.harness.start;
        let from = Continuation {
            run_id: Some(self.fresh_run_id()),
            at,
            journals: Journals::new(),
            input: Some(input),
            answering: None,
            past_breakpoint: false,
        };
        self.attached_run(head, slots, from).await
    }

    /// Continues a session whose run did not finish: a process that died
    /// mid-run (its lease expired), a stopped run, or a failed one. The run
    /// goes on from the step after the last checkpoint, with that step's
    /// journal, so completed steps are neither lost nor repeated.
    async fn recover_with(
        &self,
        session_id: &SessionId,
        slots: C::Run,
    ) -> Result<Run<S, C>, SessionError> {
        self.recover_from(session_id, slots, false).await
    }

    /// [`recover_with`](Self::recover_with); `running_only`: a session
    /// that is not running (it failed, was stopped or quarantined since it
    /// was listed) is [`SessionError::NothingToRecover`], never restarted.
    /// The head is read once, and the run takes it by its version: a
    /// session changed after it was read is a lost race.
    async fn recover_from(
        &self,
        session_id: &SessionId,
        slots: C::Run,
        running_only: bool,
    ) -> Result<Run<S, C>, SessionError> {
        let head = self.session(session_id).await?;
        self.check_not_in_flight(&head)?;
        let why = match &head.phase {
            SessionPhase::Running => None,
            SessionPhase::Failed { .. } if running_only => {
                Some("it failed (a worker only takes running sessions)".to_owned())
            }
            SessionPhase::Completed { signal } if running_only => Some(format!(
                "it completed with `{signal}` (a worker only takes running sessions)"
            )),
            SessionPhase::Failed { .. } => None,
            SessionPhase::Completed { signal } if *signal == Signal::STOPPED => None,
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
        let journals = journals(&head);
        let from = Continuation {
            run_id: None,
            at,
            journals,
            input: None,
            answering: None,
            past_breakpoint: false,
        };
        self.attached_run(head, slots, from).await
    }

    /// A run's last step was checkpointed but its process died before it
    /// recorded the end: records it now (and starts the next queued run,
    /// if any, as the run would have), and says so.
    async fn record_lost_end(&self, head: StoredRun) -> Result<SessionError, SessionError> {
        let session = head.session_id.clone();
        let signal = head.ended_with.clone().unwrap_or(Signal::END);
        let cursor = SessionCursor::acquire(
            Arc::clone(self.store()?),
            self.inner.harness.session_config.clone(),
            head,
            None,
            None,
            Journals::new(),
            None,
        )
        .await?;
        let start = self.inner.harness.start_name();
        cursor
            .settle(
                SessionPhase::Completed {
                    signal: signal.clone(),
                },
                None,
                Journals::new(),
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
    ) -> Result<Run<S, C>, SessionError>
    where
        C::Run: NoSlots,
    {
        self.with(C::Run::none())
            .resume(response, session_id, interrupt_id)
            .await
    }

    /// Answers the interrupt `interrupt_id` as [`resume`](Self::resume)
    /// does, with `update` merged into the state through the reducers
    /// first: the interrupted step runs again on the updated state (a
    /// human who edits what the step proposed as they approve it;
    /// LangGraph's `Command(update=…, resume=…)`). The update is recorded
    /// in the session's log, in the same commit as the answer.
    ///
    /// Fails as [`resume`](Self::resume) does; nothing is merged then.
    pub async fn resume_with_update(
        &self,
        response: impl Into<Value>,
        session_id: &SessionId,
        interrupt_id: &InterruptId,
        update: S::Update,
    ) -> Result<Run<S, C>, SessionError>
    where
        C::Run: NoSlots,
    {
        self.with(C::Run::none())
            .resume_with_update(response, session_id, interrupt_id, update)
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
    ) -> Result<Run<S, C>, SessionError>
    where
        C::Run: NoSlots,
    {
        self.with(C::Run::none())
            .continue_session(session_id, input)
            .await
    }

    /// Continues a session whose run did not finish: a process that died
    /// mid-run (its lease expired), a stopped run, or a failed one. The run
    /// goes on from the step after the last checkpoint, with that step's
    /// journal, so completed steps are neither lost nor repeated.
    pub async fn recover(&self, session_id: &SessionId) -> Result<Run<S, C>, SessionError>
    where
        C::Run: NoSlots,
    {
        self.with(C::Run::none()).recover(session_id).await
    }

    /// The checkpoints of a session: one per completed step, plus the start.
    pub async fn history(
        &self,
        session_id: &SessionId,
    ) -> Result<Vec<CheckpointInfo>, SessionError> {
        let head = self.session(session_id).await?;
        let log = read_log(&**self.store()?, &head, Span::Whole).await?;
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
        self.fork_as(session_id, index, update, false).await
    }

    /// [`fork`](Self::fork), except that a fork at the checkpoint where the
    /// session waits on an interrupt (its last, while it waits) waits on
    /// that interrupt too: the same id, the step that asked it, and what
    /// that step journaled before it asked (its `once` results are not
    /// repeated). [`resume`](Self::resume) answers it on the fork, whose
    /// step then runs on the fork's state, `update` merged; the session
    /// forked from still waits on its own. This is what LangGraph's
    /// `update_state` does to a thread waiting on an interrupt.
    ///
    /// Only an interrupt asked by the loop's own steps is kept: one asked
    /// inside a branch of a fork or a sub-agent is not (the fork is then
    /// completed, as [`fork`](Self::fork) makes it), nor is one at an
    /// earlier checkpoint.
    pub async fn fork_waiting(
        &self,
        session_id: &SessionId,
        index: u64,
        update: Option<S::Update>,
    ) -> Result<SessionId, SessionError> {
        self.fork_as(session_id, index, update, true).await
    }

    async fn fork_as(
        &self,
        session_id: &SessionId,
        index: u64,
        update: Option<S::Update>,
        keep_interrupt: bool,
    ) -> Result<SessionId, SessionError> {
        let head = self.session(session_id).await?;
        // The interrupt the fork waits on, its step and that step's journal.
        let waiting = match &head.phase {
            SessionPhase::Interrupted { interrupt }
                if keep_interrupt
                    && index == head.steps
                    && interrupt.path.is_root()
                    && head.branch_journals.is_empty() =>
            {
                head.next_step
                    .clone()
                    .map(|step| (interrupt.clone(), step, head.journal.clone()))
            }
            _ => None,
        };
        let mut state = self.state_at(session_id, Some(index)).await?;
        if let Some(u) = update {
            state.apply(u);
        }
        let store = Arc::clone(self.store()?);
        let fork = SessionId::random();
        let state_json = to_json(&state, "state")?;
        let start = self.inner.harness.start_name();
        let cursor = SessionCursor::create(
            store,
            self.inner.harness.session_config.clone(),
            &self.inner.id,
            RunId::random(),
            fork.clone(),
            state_json,
            start,
            Holder::ThisRun,
        )
        .await?;
        match waiting {
            Some((interrupt, step, journal)) => {
                let mut journals = Journals::new();
                journals.insert(TaskPath::root(), journal);
                cursor
                    .settle(
                        SessionPhase::Interrupted { interrupt },
                        Some(&step),
                        journals,
                        start,
                    )
                    .await?;
            }
            None => {
                cursor
                    .settle(
                        SessionPhase::Completed {
                            signal: Signal::new(format!("$fork:{session_id}@{index}")),
                        },
                        None,
                        Journals::new(),
                        start,
                    )
                    .await?;
            }
        }
        Ok(fork)
    }
}

/// Where a run on a stored session goes on from.
struct Continuation {
    /// A new run id, or the session's current run's.
    run_id: Option<RunId>,
    /// The step to run.
    at: usize,
    /// The journals of the current steps, by task.
    journals: Journals,
    /// A run input to merge first (a continued chat thread).
    input: Option<Value>,
    /// The interrupt the journal's last answer answers, if it does.
    answering: Option<Interrupt>,
    /// Resumed from a breakpoint: the step at `at` runs without pausing.
    past_breakpoint: bool,
}

/// `value` as JSON for the store, the process's secrets redacted
/// ([`crate::secrets`]), or a typed error saying what could not be stored
/// (see [`stored_checked`](crate::run::stored_checked)).
fn to_json<T>(value: &T, what: &str) -> Result<Value, SessionError>
where
    T: serde::Serialize + serde::de::DeserializeOwned,
{
    crate::run::stored_checked(value).map_err(|e| {
        SessionError::Store(StoreError::backend(format!(
            "the {what} cannot be stored: {e}"
        )))
    })
}

/// An agent with the run slots of its next operation; see [`Agent::with`].
///
/// Each operation consumes it: the run slots go to that run's context.
pub struct AgentWith<'a, S: HarnessState, C: Context> {
    agent: &'a Agent<S, C>,
    slots: C::Run,
}

impl<S: HarnessState, C: Context> fmt::Debug for AgentWith<'_, S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentWith")
            .field("agent", &self.agent.id())
            .finish_non_exhaustive()
    }
}

impl<S: HarnessState, C: Context> AgentWith<'_, S, C> {
    /// Starts a run from `state` in a new session; see [`Agent::run`].
    pub fn run(self, state: S) -> Run<S, C> {
        self.agent.start_run(SessionId::random(), state, self.slots)
    }

    /// Starts a run from `state` in a new session named `session_id`.
    pub fn run_in(self, session_id: SessionId, state: S) -> Run<S, C> {
        self.agent.start_run(session_id, state, self.slots)
    }

    /// Answers an interrupt of a stored session; see [`Agent::resume`].
    pub async fn resume(
        self,
        response: impl Into<Value>,
        session_id: &SessionId,
        interrupt_id: &InterruptId,
    ) -> Result<Run<S, C>, SessionError> {
        self.agent
            .resume_with(response.into(), session_id, interrupt_id, None, self.slots)
            .await
    }

    /// Answers an interrupt with an update merged first; see
    /// [`Agent::resume_with_update`].
    pub async fn resume_with_update(
        self,
        response: impl Into<Value>,
        session_id: &SessionId,
        interrupt_id: &InterruptId,
        update: S::Update,
    ) -> Result<Run<S, C>, SessionError> {
        self.agent
            .resume_with(
                response.into(),
                session_id,
                interrupt_id,
                Some(update),
                self.slots,
            )
            .await
    }

    /// Starts a new run on an existing session; see
    /// [`Agent::continue_session`].
    pub async fn continue_session(
        self,
        session_id: &SessionId,
        input: S::Update,
    ) -> Result<Run<S, C>, SessionError> {
        self.agent
            .continue_with(session_id, input, self.slots)
            .await
    }

    /// Continues a session whose run did not finish; see [`Agent::recover`].
    pub async fn recover(self, session_id: &SessionId) -> Result<Run<S, C>, SessionError> {
        self.agent.recover_with(session_id, self.slots).await
    }

    /// What a worker takes: [`recover`](Self::recover) of a session that
    /// is still running, and nothing else (one listed as runnable may have
    /// failed, been stopped or quarantined by another worker since).
    pub(crate) async fn take_running(
        self,
        session_id: &SessionId,
    ) -> Result<Run<S, C>, SessionError> {
        self.agent.recover_from(session_id, self.slots, true).await
    }
}
