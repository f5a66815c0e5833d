//! The loop's interpreter: one step after another until a signal ends it.

use super::control::RunControl;
use super::events::RunEvent;
use crate::error::RunError;
use crate::graph::{CompiledStep, Exits, HarnessInner, Target};
use crate::session::head::StepDone;
use crate::session::{
    Holder, SessionConfig, SessionCursor, SessionPhase, SessionStore, StoreError,
};
use crate::signal::Signal;
use crate::slots::Context;
use crate::state::HarnessState;
use crate::step::{
    Cx, CxShared, Interrupt, JournalSink, RunInfo, StepError, StepInfo, StepJournal,
};
use futures::FutureExt;
use futures::future::BoxFuture;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tracing::Instrument;

/// How a run is tied to a session store.
pub(crate) enum SessionLink {
    /// No store: the run lives in memory only.
    Detached,
    /// A new session, created when the run starts.
    New(Arc<dyn SessionStore>, SessionConfig),
    /// An existing session; `leased` says whether this run holds its lease.
    Attached {
        cursor: Arc<SessionCursor>,
        leased: bool,
    },
}

/// Where a run is: what survives a pause.
pub(crate) struct Execution<S> {
    /// The state after the last completed step. Shared with the running
    /// step, and copied on write only if the step kept a reference.
    pub(crate) state: Arc<S>,
    /// The step to run next.
    pub(crate) at: usize,
    /// Steps completed.
    pub(crate) steps: u64,
    /// The current step's journal.
    pub(crate) journal: StepJournal,
    /// The interrupt whose answer was just given (the last one in the
    /// journal): the run waits on it again if the answer is rejected.
    pub(crate) answering: Option<Interrupt>,
    /// The session store, if any.
    pub(crate) session: SessionLink,
}

impl<S> Execution<S> {
    pub(crate) fn new(state: S, at: usize, journal: StepJournal, session: SessionLink) -> Self {
        Self {
            state: Arc::new(state),
            at,
            steps: 0,
            journal,
            answering: None,
            session,
        }
    }
}

/// How a run settled without error.
pub(crate) enum Settle {
    Ended(Signal),
    Stopped,
    Interrupted(Interrupt),
    /// Paused again on the interrupt it was answered on, whose answer the
    /// step could not read (the reason).
    Rejected(Interrupt, String),
}

/// A finished drive: where the run got to, and how it settled.
pub(crate) struct Driven<S> {
    pub(crate) exec: Execution<S>,
    pub(crate) result: Result<Settle, RunError>,
}

/// Why a step did not produce an update.
enum Halt {
    Interrupt(Interrupt),
    Rejected(Interrupt, String),
    Error(RunError),
}

pub(crate) fn start<S: HarnessState, C: Context>(
    harness: Arc<HarnessInner<S, C>>,
    ctx: Arc<C>,
    control: Arc<RunControl<S>>,
    info: RunInfo,
    mut exec: Execution<S>,
) -> BoxFuture<'static, Driven<S>> {
    let span = tracing::info_span!(
        "harness.run",
        agent = %info.agent_id,
        run_id = %info.run_id,
        session_id = %info.session_id,
    );
    async move {
        let result = match attach(&harness, &info, &mut exec).await {
            Ok(cursor) => {
                // Keep the lease alive while a long step runs; if it is
                // lost, the step is cancelled (its future dropped) before it
                // can commit anything.
                let (lost_tx, lost_rx) = tokio::sync::oneshot::channel();
                let renewer = cursor
                    .clone()
                    .map(|c| AbortOnDrop(tokio::spawn(keep_lease(c, lost_tx))));
                let driving = drive(
                    &harness,
                    &ctx,
                    &control,
                    &info,
                    &mut exec,
                    cursor.as_deref(),
                );
                let result = if renewer.is_some() {
                    tokio::select! {
                        biased;
                        Ok(reason) = lost_rx => Err(RunError::LeaseLost {
                            session: info.session_id.clone(),
                            reason,
                        }),
                        result = driving => result,
                    }
                } else {
                    driving.await
                };
                drop(renewer);
                match cursor {
                    Some(c) => persist_settle(&harness, &c, &mut exec, result).await,
                    None => result,
                }
            }
            Err(e) => Err(e),
        };
        Driven { exec, result }
    }
    .instrument(span)
    .boxed()
}

/// Renews the run's lease every third of its time to live, until the run
/// ends (the task is aborted) or the lease is lost, which it reports on
/// `lost`: another run took the session over, or renewals failed (the store
/// unreachable) until the lease was about to expire. Failed renewals are
/// retried with backoff; the lease is given up a tenth of its time to live
/// before it expires by the store's clock, so that the step is cancelled
/// before any other worker may take the session.
async fn keep_lease(cursor: Arc<SessionCursor>, lost: tokio::sync::oneshot::Sender<String>) {
    let ttl = cursor.config.lease_ttl;
    let every = ttl / 3;
    let margin = ttl / 10;
    let margin_ms = u64::try_from(margin.as_millis()).unwrap_or(u64::MAX);
    let first_retry = (ttl / 30).max(Duration::from_millis(5));
    let reason = 'renewing: loop {
        tokio::time::sleep(every).await;
        let mut retry = first_retry;
        let mut last = String::new();
        loop {
            // How long until the lease must be given up.
            let left = cursor
                .lease_expires_at()
                .saturating_sub(margin_ms)
                .saturating_sub(cursor.store.now());
            if left == 0 {
                break 'renewing format!(
                    "its renewals failed until it was about to expire; the last error: {last}"
                );
            }
            let left = Duration::from_millis(left);
            let error = match tokio::time::timeout(left, cursor.renew()).await {
                Ok(Ok(())) => continue 'renewing,
                Ok(Err(StoreError::Conflict { .. })) => {
                    break 'renewing "another run took the session over".to_string();
                }
                Ok(Err(e)) => e.to_string(),
                Err(_) => "renewing it did not finish before it was about to expire".into(),
            };
            tracing::warn!(error = %error, "cannot renew the run's lease; retrying");
            last = error;
            tokio::time::sleep(retry.min(left)).await;
            retry = (retry * 2).min(every);
        }
    };
    tracing::error!(reason = %reason, "the run's lease is lost; cancelling the step");
    let _ = lost.send(reason);
}

/// Aborts a background task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Creates or re-leases the run's session, if it has a store.
async fn attach<S: HarnessState, C: Context>(
    harness: &HarnessInner<S, C>,
    info: &RunInfo,
    exec: &mut Execution<S>,
) -> Result<Option<Arc<SessionCursor>>, RunError> {
    let link = std::mem::replace(&mut exec.session, SessionLink::Detached);
    let cursor = match link {
        SessionLink::Detached => return Ok(None),
        SessionLink::New(store, config) => {
            let state = serde_json::to_value(&*exec.state).map_err(|e| {
                RunError::Store(StoreError::backend(format!(
                    "the state cannot be serialized: {e}"
                )))
            })?;
            let next = &harness.steps[exec.at].name;
            Arc::new(
                SessionCursor::create(
                    store,
                    config,
                    &info.agent_id,
                    info.run_id.clone(),
                    info.session_id.clone(),
                    state,
                    next,
                    Holder::ThisRun,
                )
                .await
                .map_err(RunError::Store)?,
            )
        }
        SessionLink::Attached { cursor, leased } => {
            if !leased && let Err(e) = cursor.reacquire(exec.journal.clone()).await {
                exec.session = SessionLink::Attached {
                    cursor,
                    leased: false,
                };
                return Err(RunError::Store(e));
            }
            cursor
        }
    };
    exec.session = SessionLink::Attached {
        cursor: Arc::clone(&cursor),
        leased: true,
    };
    Ok(Some(cursor))
}

/// Records how the run settled in its session and releases the lease.
async fn persist_settle<S: HarnessState, C: Context>(
    harness: &HarnessInner<S, C>,
    cursor: &SessionCursor,
    exec: &mut Execution<S>,
    result: Result<Settle, RunError>,
) -> Result<Settle, RunError> {
    let here = harness.steps.get(exec.at).map(|s| &*s.name);
    let (phase, next, journal) = match &result {
        Ok(Settle::Ended(signal)) => (
            SessionPhase::Completed {
                signal: signal.clone(),
            },
            None,
            StepJournal::default(),
        ),
        Ok(Settle::Stopped) => (
            SessionPhase::Completed {
                signal: Signal::STOPPED,
            },
            here,
            exec.journal.clone(),
        ),
        Ok(Settle::Interrupted(interrupt) | Settle::Rejected(interrupt, _)) => (
            SessionPhase::Interrupted {
                interrupt: interrupt.clone(),
            },
            here,
            exec.journal.clone(),
        ),
        // A value too deep to store was refused before it was written: the
        // session is still ours, and records the failure.
        Err(e @ RunError::Store(StoreError::TooDeep(_))) => (
            SessionPhase::Failed {
                error: e.to_string(),
            },
            here,
            exec.journal.clone(),
        ),
        // The session is no longer ours to write.
        Err(RunError::Store(_) | RunError::LeaseLost { .. }) => return result,
        Err(e) => (
            SessionPhase::Failed {
                error: e.to_string(),
            },
            here,
            exec.journal.clone(),
        ),
    };
    if let SessionLink::Attached { leased, .. } = &mut exec.session {
        *leased = false;
    }
    match cursor
        .settle(phase, next, journal, harness.start_name())
        .await
    {
        Ok(()) => result,
        // What the settle would store (an interrupt's payload, a journal
        // value) is too deep: the session records the failure instead,
        // without them, rather than stay leased by a run that is over.
        Err(StoreError::TooDeep(too_deep)) => {
            let failed = SessionPhase::Failed {
                error: too_deep.to_string(),
            };
            let _ = cursor
                .settle(failed, next, StepJournal::default(), harness.start_name())
                .await;
            Err(RunError::Store(StoreError::TooDeep(too_deep)))
        }
        Err(e) => Err(RunError::Store(e)),
    }
}

async fn drive<S: HarnessState, C: Context>(
    harness: &HarnessInner<S, C>,
    ctx: &Arc<C>,
    control: &RunControl<S>,
    info: &RunInfo,
    exec: &mut Execution<S>,
    cursor: Option<&SessionCursor>,
) -> Result<Settle, RunError> {
    let observers = &harness.observers;
    for o in observers {
        o.run_started(info).await;
    }
    control.events.send(RunEvent::Started {
        run_id: info.run_id.clone(),
        session_id: info.session_id.clone(),
    });
    let settled = loop {
        if control.stop.load(Ordering::Acquire) {
            break Ok(Settle::Stopped);
        }
        let step = &harness.steps[exec.at];
        if exec.steps >= harness.step_limit {
            break Err(RunError::StepLimit {
                limit: harness.step_limit,
                step: step.name.to_string(),
            });
        }
        let step_info = StepInfo {
            name: Arc::clone(&step.name),
            index: exec.steps,
        };
        for o in observers {
            o.step_started(info, &step_info).await;
        }
        control.events.send(RunEvent::StepStarted {
            step: Arc::clone(&step.name),
            index: exec.steps,
        });
        let began = Instant::now();

        let update = match &step.run {
            Some(run) => {
                let span =
                    tracing::info_span!("harness.step", step = %step.name, index = exec.steps);
                match run_step(run, step, ctx, control, info, exec)
                    .instrument(span)
                    .await
                {
                    Ok(update) => Some(update),
                    Err(Halt::Interrupt(interrupt)) => break Ok(Settle::Interrupted(interrupt)),
                    Err(Halt::Rejected(interrupt, reason)) => {
                        break Ok(Settle::Rejected(interrupt, reason));
                    }
                    Err(Halt::Error(e)) => break Err(e),
                }
            }
            None => None,
        };
        if let Some(update) = &update {
            // Observers see the update before it is merged, by reference, so
            // observing costs no copy of it.
            for o in observers {
                o.step_finished(info, &step_info, update, began.elapsed())
                    .await;
            }
        }
        let event_update = if control.events.active() {
            update.clone()
        } else {
            None
        };
        // Serialized before it is merged: the stored update is the step's own.
        let stored_update = match cursor {
            Some(_) => Some(match &update {
                Some(u) => match serde_json::to_value(u) {
                    Ok(v) => v,
                    Err(e) => {
                        break Err(RunError::Store(StoreError::backend(format!(
                            "the update of step `{}` cannot be serialized: {e}",
                            step.name
                        ))));
                    }
                },
                None => serde_json::Value::Object(serde_json::Map::new()),
            }),
            None => None,
        };
        if let Some(update) = update {
            Arc::make_mut(&mut exec.state).apply(update);
        }

        let (next, signal) = match &step.exits {
            Exits::Next(t) => (*t, None),
            Exits::On(on) => {
                let Some(route) = &step.route else {
                    // Validation guarantees a route wherever there is `.on`.
                    break Err(RunError::UndeclaredSignal {
                        step: step.name.to_string(),
                        signal: Signal::new(""),
                        declared: on.iter().map(|(s, _)| s.clone()).collect(),
                    });
                };
                let signal = route(&exec.state);
                match on.iter().find(|(s, _)| *s == signal) {
                    Some((_, t)) => (*t, Some(signal)),
                    None => {
                        break Err(RunError::UndeclaredSignal {
                            step: step.name.to_string(),
                            signal,
                            declared: on.iter().map(|(s, _)| s.clone()).collect(),
                        });
                    }
                }
            }
        };
        exec.steps += 1;
        exec.journal = StepJournal::default();
        exec.answering = None;
        if let (Some(cursor), Some(stored)) = (cursor, stored_update) {
            let next_name = match next {
                Target::Step(i) => Some(&*harness.steps[i].name),
                Target::End => None,
            };
            let state = &exec.state;
            let measure = || crate::session::head::json_len(&**state);
            let snapshot = || {
                serde_json::to_value(&**state).map_err(|e| {
                    StoreError::backend(format!("the state cannot be serialized: {e}"))
                })
            };
            if let Err(e) = cursor
                .step_done(
                    StepDone {
                        step: &step.name,
                        update: stored,
                        next_step: next_name,
                        signal: signal.as_ref(),
                        steps_this_run: exec.steps,
                    },
                    measure,
                    snapshot,
                )
                .await
            {
                break Err(match e {
                    StoreError::Conflict { .. } => RunError::LeaseLost {
                        session: info.session_id.clone(),
                        reason: "another run took the session over".into(),
                    },
                    e => RunError::Store(e),
                });
            }
        }
        if control.events.active() {
            control.events.send(RunEvent::StepFinished {
                step: Arc::clone(&step.name),
                index: step_info.index,
                elapsed: began.elapsed(),
                update: event_update.unwrap_or_default(),
                signal: signal.clone(),
            });
        }
        match next {
            Target::Step(i) => exec.at = i,
            Target::End => {
                break Ok(Settle::Ended(signal.unwrap_or(Signal::END)));
            }
        }
    };

    match &settled {
        Ok(Settle::Ended(signal)) => {
            finished(observers, control, info, signal, exec.steps).await;
        }
        Ok(Settle::Stopped) => {
            finished(observers, control, info, &Signal::STOPPED, exec.steps).await;
        }
        Ok(Settle::Interrupted(interrupt) | Settle::Rejected(interrupt, _)) => {
            for o in observers {
                o.interrupted(info, interrupt).await;
            }
            control
                .events
                .send(RunEvent::Interrupted(interrupt.clone()));
        }
        Err(e) => {
            tracing::warn!(error = %e, "run failed");
            for o in observers {
                o.run_failed(info, e).await;
            }
            control.events.send(RunEvent::Failed {
                error: e.to_string(),
            });
        }
    }
    settled
}

async fn finished<S: HarnessState>(
    observers: &[Arc<dyn crate::observe::Observer<S>>],
    control: &RunControl<S>,
    info: &RunInfo,
    signal: &Signal,
    steps: u64,
) {
    for o in observers {
        o.run_finished(info, signal, steps).await;
    }
    control.events.send(RunEvent::Finished {
        signal: signal.clone(),
        steps,
    });
}

enum Failure {
    Error(StepError),
    Timeout(Duration),
}

/// Runs a step's `run`, with its timeout and retry policy.
async fn run_step<S: HarnessState, C: Context>(
    run: &crate::graph::RunFn<S, C>,
    step: &CompiledStep<S, C>,
    ctx: &Arc<C>,
    control: &RunControl<S>,
    info: &RunInfo,
    exec: &mut Execution<S>,
) -> Result<S::Update, Halt> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let (visit, sink) = match &exec.session {
            SessionLink::Attached { cursor, .. } => (
                cursor.steps(),
                Some(Arc::clone(cursor) as Arc<dyn JournalSink>),
            ),
            _ => (exec.steps, None),
        };
        let shared = Arc::new(CxShared::new(
            info.run_id.clone(),
            info.session_id.clone(),
            Arc::clone(&step.name),
            exec.steps,
            visit,
            attempt,
            std::mem::take(&mut exec.journal),
            sink,
        ));
        let cx = Cx {
            ctx: Arc::clone(ctx),
            shared: Arc::clone(&shared),
        };
        let fut = run(Arc::clone(&exec.state), cx);
        let result = match step.timeout {
            None => fut.await.map_err(Failure::Error),
            Some(limit) => match tokio::time::timeout(limit, fut).await {
                Ok(r) => r.map_err(Failure::Error),
                Err(_) => Err(Failure::Timeout(limit)),
            },
        };
        let visit = shared.finish();
        exec.journal = visit.journal;
        if let Some(rejected) = visit.rejected {
            // The unreadable answer is dropped, never replayed, and the run
            // waits on the interrupt it answered. Without that interrupt (a
            // journal written before answers were checked), the step runs
            // again without the answer and asks anew.
            exec.journal.responses.truncate(rejected.index);
            match exec.answering.take() {
                Some(interrupt) => return Err(Halt::Rejected(interrupt, rejected.reason)),
                None => {
                    attempt -= 1;
                    continue;
                }
            }
        }
        // An interrupt wins over the step's own result: the step asked to
        // pause, even if it swallowed the error.
        if let Some(interrupt) = visit.pending {
            return Err(Halt::Interrupt(interrupt));
        }
        let failure = match result {
            Ok(update) => return Ok(update),
            Err(f) => f,
        };
        let will_retry = attempt < step.retry.max_attempts();
        let rendered = match &failure {
            Failure::Error(e) => e.to_string(),
            Failure::Timeout(limit) => format!("timed out after {limit:?}"),
        };
        tracing::debug!(step = %step.name, attempt, will_retry, error = %rendered, "step attempt failed");
        control.events.send(RunEvent::StepFailed {
            step: Arc::clone(&step.name),
            attempt,
            error: rendered,
            will_retry,
        });
        if will_retry {
            let delay = step.retry.delay_before(attempt + 1);
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            continue;
        }
        return Err(Halt::Error(match failure {
            Failure::Error(e) => RunError::Step {
                step: step.name.to_string(),
                attempts: attempt,
                source: e.into_source(),
            },
            Failure::Timeout(limit) => RunError::Timeout {
                step: step.name.to_string(),
                limit,
                attempts: attempt,
            },
        }));
    }
}
