//! Runs: executing a loop on tokio, stopping it, watching it, and pausing it
//! for a human.
//!
//! [`Agent::run`](crate::Agent::run) returns a [`Run`]. Like any Rust future it
//! does nothing until polled: await it (or `tokio::spawn` it) for an
//! [`Outcome`]. Before that, [`Run::events`] subscribes to its live events and
//! [`Run::stop_handle`] gives a handle that stops it from elsewhere.
//!
//! A step that calls [`Cx::interrupt`](crate::Cx::interrupt) makes the run settle with the signal
//! `$interrupt`; [`Run::resume`] gives the answer, and awaiting the run again
//! continues it: the interrupted step runs again, and its `interrupt` call now
//! returns the answer.

mod control;
mod engine;
pub(crate) use engine::stored_checked;
mod events;
mod outcome;
mod sub;

pub use crate::error::{NoInterrupt, RunError};
pub use control::StopHandle;
pub(crate) use engine::{Execution, SessionLink, attach_sub_journals, task_from};
pub use events::{RunEvent, RunEvents};
pub use outcome::Outcome;
pub use sub::{Dispatch, SubAgent, SubOutcome};

use crate::graph::HarnessInner;
use crate::ids::{InterruptId, RunId, SessionId};
use crate::signal::Signal;
use crate::slots::Context;
use crate::state::HarnessState;
use crate::step::{Interrupt, RunInfo};
use control::RunControl;
use engine::{Driven, Settle};
use events::EventHub;
use futures::future::BoxFuture;
use serde_json::Value;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::task::{self, Poll};

enum RunPhase<S: HarnessState> {
    Ready(Execution<S>),
    Running(BoxFuture<'static, Driven<S>>),
    Paused(Execution<S>, Interrupt),
    Failed(Execution<S>),
    Done,
}

/// Names given to [`Run::pause_before`] or [`Run::pause_after`] that are
/// not steps of the loop.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{} of this loop (its steps: {})", unknown_names(unknown), steps.join(", "))]
pub struct UnknownStep {
    /// The names given that are not steps, in the order given, each once.
    pub unknown: Vec<String>,
    /// The loop's steps.
    pub steps: Vec<String>,
}

/// "`a` is not a step", "`a` and `b` are not steps", "`a`, `b` and `c` are
/// not steps".
fn unknown_names(unknown: &[String]) -> String {
    let quoted: Vec<String> = unknown.iter().map(|n| format!("`{n}`")).collect();
    match quoted.as_slice() {
        [] => "no name is not a step".to_owned(),
        [one] => format!("{one} is not a step"),
        [rest @ .., last] => format!("{} and {last} are not steps", rest.join(", ")),
    }
}

/// A run of an agent. Await it for its [`Outcome`].
///
/// `Run` is a future: it does nothing until polled, and `(&mut run).await`
/// keeps the handle for a later [`resume`](Run::resume).
pub struct Run<S: HarnessState, C: Context> {
    harness: Arc<HarnessInner<S, C>>,
    ctx: Arc<C>,
    control: Arc<RunControl<S>>,
    info: RunInfo,
    phase: RunPhase<S>,
}

impl<S: HarnessState, C: Context> fmt::Debug for Run<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let phase = match &self.phase {
            RunPhase::Ready(_) => "ready",
            RunPhase::Running(_) => "running",
            RunPhase::Paused(..) => "paused",
            RunPhase::Failed(_) => "failed",
            RunPhase::Done => "done",
        };
        f.debug_struct("Run")
            .field("agent_id", &self.info.agent_id)
            .field("run_id", &self.info.run_id)
            .field("session_id", &self.info.session_id)
            .field("phase", &phase)
            .finish()
    }
}

impl<S: HarnessState, C: Context> Run<S, C> {
    pub(crate) fn new(
        harness: Arc<HarnessInner<S, C>>,
        agent_id: Arc<str>,
        ctx: C,
        exec: Execution<S>,
        run_id: RunId,
        session_id: SessionId,
    ) -> Self {
        let info = RunInfo {
            agent_id,
            run_id,
            session_id,
        };
        Self {
            harness,
            ctx: Arc::new(ctx),
            control: Arc::new(RunControl {
                stop: Arc::new(AtomicBool::new(false)),
                events: Arc::new(EventHub::new()),
                breakpoints: std::sync::Mutex::default(),
            }),
            info,
            phase: RunPhase::Ready(exec),
        }
    }

    /// The run's id.
    pub fn run_id(&self) -> &RunId {
        &self.info.run_id
    }

    /// The run's session.
    pub fn session_id(&self) -> &SessionId {
        &self.info.session_id
    }

    /// Subscribes to the run's events from now on. Subscribe before awaiting
    /// to see every event.
    pub fn events(&self) -> RunEvents<S> {
        self.control.events.subscribe()
    }

    /// Like [`events`](Self::events), with the text of the model calls its
    /// steps make through [`Cx::complete`](crate::Cx::complete), as
    /// [`RunEvent::Token`] events (the calls then stream). Filter the
    /// stream by kind to keep what a view needs.
    pub fn events_with_tokens(&self) -> RunEvents<S> {
        self.control.events.want_tokens();
        self.control.events.subscribe()
    }

    /// Makes the run pause before each of `steps` (step names of the
    /// loop), as if the step had asked a human: the run settles with
    /// `$interrupt`, its session waits on an [`Interrupt`] whose
    /// [`breakpoint`](Interrupt::breakpoint) is [`Breakpoint::Before`](crate::Breakpoint::Before), and a
    /// resume (with any answer, which no step sees) runs the step. The step a
    /// run resumes at does not pause again. Breakpoints apply to the run's
    /// own loop: a step run by a fork's branch or a sub-agent does not
    /// pause. Set them before the run starts; a resumed or continued run has
    /// only the breakpoints it is given.
    ///
    /// # Errors
    ///
    /// [`UnknownStep`] naming every name that is not a step of the loop
    /// (the run is dropped with the error).
    pub fn pause_before<I, N>(self, steps: I) -> Result<Self, UnknownStep>
    where
        I: IntoIterator<Item = N>,
        N: AsRef<str>,
    {
        self.breakpoints(steps, true)
    }

    /// Makes the run pause after each of `steps` completes (its update
    /// recorded), before the next one: the interrupt's
    /// [`breakpoint`](Interrupt::breakpoint) is [`Breakpoint::After`](crate::Breakpoint::After) and
    /// its [`step`](Interrupt::step) is the step to run next. A step that
    /// ends the run, or whose next is a fork, does not pause after. See
    /// [`pause_before`](Self::pause_before).
    ///
    /// # Errors
    ///
    /// [`UnknownStep`] naming every name that is not a step of the loop.
    pub fn pause_after<I, N>(self, steps: I) -> Result<Self, UnknownStep>
    where
        I: IntoIterator<Item = N>,
        N: AsRef<str>,
    {
        self.breakpoints(steps, false)
    }

    fn breakpoints<I, N>(self, steps: I, before: bool) -> Result<Self, UnknownStep>
    where
        I: IntoIterator<Item = N>,
        N: AsRef<str>,
    {
        let mut found = Vec::new();
        let mut unknown: Vec<String> = Vec::new();
        for name in steps {
            let name = name.as_ref();
            match self.harness.steps.iter().position(|s| &*s.name == name) {
                Some(i) => found.push(i),
                None if unknown.iter().any(|u| u == name) => {}
                None => unknown.push(name.to_owned()),
            }
        }
        if !unknown.is_empty() {
            return Err(UnknownStep {
                unknown,
                steps: self
                    .harness
                    .steps
                    .iter()
                    .map(|s| s.name.to_string())
                    .collect(),
            });
        }
        {
            let mut points = self
                .control
                .breakpoints
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if before {
                points.before.extend(found);
            } else {
                points.after.extend(found);
            }
        }
        Ok(self)
    }

    /// Stops the run at its next step boundary (see [`StopHandle::stop`]).
    pub fn stop(&self) {
        self.stop_handle().stop();
    }

    /// A handle that stops the run from another task.
    pub fn stop_handle(&self) -> StopHandle {
        StopHandle {
            flag: Arc::clone(&self.control.stop),
        }
    }

    /// The interrupt the run is paused on, if it is.
    pub fn pending_interrupt(&self) -> Option<&Interrupt> {
        match &self.phase {
            RunPhase::Paused(_, i) => Some(i),
            _ => None,
        }
    }

    /// The state after the last completed step, when the run is not running:
    /// before it starts, while paused, and after it failed.
    pub fn state(&self) -> Option<&S> {
        match &self.phase {
            RunPhase::Ready(e) | RunPhase::Paused(e, _) | RunPhase::Failed(e) => {
                Some(&e.task.state)
            }
            RunPhase::Running(_) | RunPhase::Done => None,
        }
    }

    /// Answers the interrupt `id` with `response`. Await the run again to
    /// continue it: the interrupted step runs again and its `interrupt` call
    /// returns `response`.
    pub fn resume(
        &mut self,
        response: impl Into<Value>,
        id: &InterruptId,
    ) -> Result<(), NoInterrupt> {
        match std::mem::replace(&mut self.phase, RunPhase::Done) {
            RunPhase::Paused(mut exec, interrupt) if interrupt.id == *id => {
                // The task that asked: the run's own loop, a branch, or a
                // sub-agent's loop.
                let path = interrupt.path.clone();
                let response = response.into();
                if interrupt.breakpoint.is_some() {
                    // No step asked: the run goes on with the step named.
                    exec.task.past_breakpoint = true;
                } else if !exec.task.answer(&path, response.clone(), interrupt.clone()) {
                    exec.task.journal.responses.push(response);
                    exec.task.answering = Some(interrupt);
                }
                self.phase = RunPhase::Ready(exec);
                Ok(())
            }
            RunPhase::Paused(exec, interrupt) => {
                let pending = Some(interrupt.id.clone());
                self.phase = RunPhase::Paused(exec, interrupt);
                Err(NoInterrupt {
                    given: id.clone(),
                    pending,
                })
            }
            other => {
                self.phase = other;
                Err(NoInterrupt {
                    given: id.clone(),
                    pending: None,
                })
            }
        }
    }

    /// Waits for the run to settle; the same as `(&mut run).await`.
    pub async fn outcome(&mut self) -> Result<Outcome<S>, RunError> {
        self.await
    }

    fn settle(&mut self, driven: Driven<S>) -> Result<Outcome<S>, RunError> {
        let Driven { exec, result } = driven;
        let steps = exec.steps;
        let outcome = |signal, state, interrupt| Outcome {
            signal,
            state,
            run_id: self.info.run_id.clone(),
            session_id: self.info.session_id.clone(),
            steps,
            interrupt,
        };
        match result {
            // A finished run gives its state away: no copy unless a step
            // kept a reference to it.
            Ok(Settle::Ended(signal)) => {
                let out = outcome(signal, Arc::unwrap_or_clone(exec.task.state), None);
                self.phase = RunPhase::Done;
                Ok(out)
            }
            Ok(Settle::Stopped) => {
                let out = outcome(Signal::STOPPED, Arc::unwrap_or_clone(exec.task.state), None);
                self.phase = RunPhase::Done;
                Ok(out)
            }
            Ok(Settle::Rejected(interrupt, reason)) => {
                let error = RunError::AnswerRejected {
                    interrupt: interrupt.id.clone(),
                    reason,
                };
                self.phase = RunPhase::Paused(exec, interrupt);
                Err(error)
            }
            Ok(Settle::Interrupted(interrupt)) => {
                let out = outcome(
                    Signal::INTERRUPT,
                    (*exec.task.state).clone(),
                    Some(interrupt.clone()),
                );
                self.phase = RunPhase::Paused(exec, interrupt);
                Ok(out)
            }
            Err(e) => {
                self.phase = RunPhase::Failed(exec);
                Err(e)
            }
        }
    }
}

// A run is driven through boxed futures and never relies on being pinned.
impl<S: HarnessState, C: Context> Unpin for Run<S, C> {}

impl<S: HarnessState, C: Context> Future for Run<S, C> {
    type Output = Result<Outcome<S>, RunError>;

    fn poll(self: Pin<&mut Self>, cx: &mut task::Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        loop {
            // The common case, polled in place: the phase (and the
            // execution it may hold) is moved only when it changes.
            if let RunPhase::Running(fut) = &mut this.phase {
                return match fut.as_mut().poll(cx) {
                    Poll::Pending => Poll::Pending,
                    Poll::Ready(driven) => {
                        this.phase = RunPhase::Done;
                        Poll::Ready(this.settle(driven))
                    }
                };
            }
            match std::mem::replace(&mut this.phase, RunPhase::Done) {
                RunPhase::Ready(exec) => {
                    this.phase = RunPhase::Running(engine::start(
                        Arc::clone(&this.harness),
                        Arc::clone(&this.ctx),
                        Arc::clone(&this.control),
                        this.info.clone(),
                        exec,
                    ));
                }
                // Polled above.
                running @ RunPhase::Running(_) => this.phase = running,
                RunPhase::Paused(exec, interrupt) => {
                    let id = interrupt.id.clone();
                    this.phase = RunPhase::Paused(exec, interrupt);
                    return Poll::Ready(Err(RunError::Paused { interrupt: id }));
                }
                RunPhase::Failed(exec) => {
                    this.phase = RunPhase::Failed(exec);
                    return Poll::Ready(Err(RunError::Settled));
                }
                RunPhase::Done => return Poll::Ready(Err(RunError::Settled)),
            }
        }
    }
}
