//! The loop's interpreter: one step after another until a signal ends it.

use super::cx::{CxShared, StepJournal};
use super::{Interrupt, RunControl, RunError, RunEvent, RunInfo, StepError, StepInfo};
use crate::Cx;
use crate::agent::AgentInner;
use crate::graph::{CompiledStep, Exits, RunFn, Target};
use crate::signal::Signal;
use crate::slots::Context;
use crate::state::HarnessState;
use futures::FutureExt;
use futures::future::BoxFuture;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tracing::Instrument;

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
}

impl<S> Execution<S> {
    pub(crate) fn new(state: S, start: usize) -> Self {
        Self {
            state: Arc::new(state),
            at: start,
            steps: 0,
            journal: StepJournal::default(),
        }
    }
}

/// How a run settled without error.
pub(crate) enum Settle {
    Ended(Signal),
    Stopped,
    Interrupted(Interrupt),
}

/// A finished drive: where the run got to, and how it settled.
pub(crate) struct Driven<S> {
    pub(crate) exec: Execution<S>,
    pub(crate) result: Result<Settle, RunError>,
}

/// Why a step did not produce an update.
enum Halt {
    Interrupt(Interrupt),
    Error(RunError),
}

pub(crate) fn start<S: HarnessState, C: Context>(
    agent: Arc<AgentInner<S, C>>,
    ctx: Arc<C>,
    control: Arc<RunControl<S>>,
    info: RunInfo,
    mut exec: Execution<S>,
) -> BoxFuture<'static, super::engine::Driven<S>> {
    let span = tracing::info_span!(
        "harness.run",
        agent = %info.agent_id,
        run_id = %info.run_id,
        session_id = %info.session_id,
    );
    async move {
        let result = drive(&agent, &ctx, &control, &info, &mut exec).await;
        Driven { exec, result }
    }
    .instrument(span)
    .boxed()
}

async fn drive<S: HarnessState, C: Context>(
    agent: &AgentInner<S, C>,
    ctx: &Arc<C>,
    control: &RunControl<S>,
    info: &RunInfo,
    exec: &mut Execution<S>,
) -> Result<Settle, RunError> {
    let harness = &*agent.harness;
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
        if let Some(update) = update {
            Arc::make_mut(&mut exec.state).apply(update);
        }

        let (next, signal) = match &step.exits {
            Exits::Next(i) => (Target::Step(*i), None),
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
                break Ok(Settle::Ended(signal.unwrap_or_else(|| Signal::new("$end"))));
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
        Ok(Settle::Interrupted(interrupt)) => {
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
    run: &RunFn<S, C>,
    step: &CompiledStep<S, C>,
    ctx: &Arc<C>,
    control: &RunControl<S>,
    info: &RunInfo,
    exec: &mut Execution<S>,
) -> Result<S::Update, Halt> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let shared = Arc::new(CxShared::new(
            info.run_id.clone(),
            info.session_id.clone(),
            Arc::clone(&step.name),
            exec.steps,
            attempt,
            std::mem::take(&mut exec.journal),
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
        let (journal, pending) = shared.finish();
        exec.journal = journal;
        // An interrupt wins over the step's own result: the step asked to
        // pause, even if it swallowed the error.
        if let Some(interrupt) = pending {
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
