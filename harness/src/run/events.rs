//! A live stream of a run's events.

use crate::ids::{InterruptId, RunId, SessionId, TaskPath};
use crate::signal::Signal;
use crate::state::HarnessState;
use crate::step::{Emitter, Interrupt};
use futures::Stream;
use serde_json::Value;
use std::fmt;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::mpsc;

/// Something that happened in a run, as seen by [`Run::events`](crate::Run::events).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum RunEvent<S: HarnessState> {
    /// The run started, or resumed after an interrupt.
    Started {
        /// The run.
        run_id: RunId,
        /// Its session.
        session_id: SessionId,
    },
    /// A step is about to run.
    StepStarted {
        /// The task it runs in (the root for the run's own loop).
        path: TaskPath,
        /// The step's name.
        step: Arc<str>,
        /// How many steps the run completed before it.
        index: u64,
    },
    /// A step completed; its update has been applied (in a branch, to the
    /// branch's own state; the run's state gets it at the join).
    StepFinished {
        /// The task it ran in.
        path: TaskPath,
        /// The step's name.
        step: Arc<str>,
        /// How many steps the run completed before it.
        index: u64,
        /// Time spent in the step, retries included.
        elapsed: Duration,
        /// The update the step returned (empty for a route-only step).
        update: S::Update,
        /// The signal its route returned, if it has a route.
        signal: Option<Signal>,
    },
    /// An attempt of a step failed.
    StepFailed {
        /// The task it ran in.
        path: TaskPath,
        /// The step's name.
        step: Arc<str>,
        /// Which attempt failed.
        attempt: u32,
        /// The error, rendered.
        error: String,
        /// Whether the step will be tried again.
        will_retry: bool,
    },
    /// The run paused for a human; the interrupt's `path` says which task
    /// asked.
    Interrupted(Interrupt),
    /// The answer a resume gave to an interrupt was refused: it does not
    /// have the shape the step reads it as, and nothing of it was kept. The
    /// run pauses on the same interrupt again, so an
    /// [`Interrupted`](Self::Interrupted) follows, and the run settles with
    /// [`RunError::AnswerRejected`](crate::RunError::AnswerRejected).
    AnswerRejected {
        /// The task whose step asked (the interrupt's `path`).
        path: TaskPath,
        /// The interrupt, still pending.
        interrupt: InterruptId,
        /// What is wrong with the answer, and the type the step expects.
        reason: String,
    },
    /// A step read the answer a resume gave to its interrupt, and kept it:
    /// it has the shape the step reads it as, and passed the step's check
    /// ([`Cx::interrupt_with`](crate::Cx::interrupt_with)). Sent once a
    /// run, as soon as the step's `interrupt` call returns the answer,
    /// which may be well before the step finishes. Not sent for the answer
    /// to a breakpoint, which no step reads.
    AnswerAccepted {
        /// The task whose step asked (the interrupt's `path`).
        path: TaskPath,
        /// The step that asked.
        step: Arc<str>,
        /// The interrupt answered.
        interrupt: InterruptId,
    },
    /// A step forked: its branches start.
    Forked {
        /// The task that forked.
        path: TaskPath,
        /// The step it forked after.
        step: Arc<str>,
        /// The branches, in merge order.
        branches: Vec<TaskPath>,
    },
    /// Every branch of a fork reached its join; their updates are merged,
    /// in branch order, into the state of the task that forked.
    Joined {
        /// The task that forked.
        path: TaskPath,
        /// The join step, which runs next.
        join: Arc<str>,
        /// The branches merged, in order.
        branches: Vec<TaskPath>,
    },
    /// Something happened in a sub-agent's loop (a step run by a step of
    /// this run), whose state type is not this run's: what, as data. Its
    /// custom events and interrupts come as [`Custom`](Self::Custom) and
    /// [`Interrupted`](Self::Interrupted), with the sub-agent's path.
    Child {
        /// The task in the sub-agent's loop.
        path: TaskPath,
        /// The step.
        step: Arc<str>,
        /// `step_started`, `step_finished`, `step_failed`, `forked` or `joined`.
        kind: Arc<str>,
        /// The event's fields: `index`, `elapsed_ms`, `update` and `signal`
        /// for a finished step, `attempt`, `error` and `will_retry` for a
        /// failed one, `branches` for a fork or a join.
        detail: Value,
    },
    /// Text a model is streaming to a step that called it through
    /// [`Cx::complete`](crate::Cx::complete); sent only to subscribers from
    /// [`Run::events_with_tokens`](crate::Run::events_with_tokens).
    Token {
        /// The task the step runs in (a branch's, a sub-agent's).
        path: TaskPath,
        /// The step.
        step: Arc<str>,
        /// The new text.
        text: Arc<str>,
    },
    /// A step sent an event of its own with [`Cx::emit`](crate::Cx::emit).
    Custom {
        /// The task the step runs in.
        path: TaskPath,
        /// The step.
        step: Arc<str>,
        /// What kind of event, as the step named it.
        kind: Arc<str>,
        /// The event's data.
        payload: Value,
    },
    /// The run ended with this signal.
    Finished {
        /// The final signal (`$stopped` when stopped).
        signal: Signal,
        /// Steps taken in all.
        steps: u64,
    },
    /// The run failed.
    Failed {
        /// The error, rendered.
        error: String,
    },
}

impl<S: HarnessState> RunEvent<S> {
    /// The event's kind, to filter a stream by (in place of LangGraph's
    /// "stream modes"): `started`, `step_started`, `step_finished`,
    /// `step_failed`, `forked`, `joined`, `child`, `token`, `custom`,
    /// `interrupted`, `answer_accepted`, `answer_rejected`, `finished`,
    /// `failed`.
    ///
    /// ```
    /// # use harness::{HarnessState, RunEvent, RunEvents};
    /// # use futures::StreamExt;
    /// # async fn f<S: HarnessState>(events: RunEvents<S>) {
    /// let tokens = events.filter(|e| std::future::ready(e.kind() == "token"));
    /// # let _ = tokens; }
    /// ```
    pub fn kind(&self) -> &'static str {
        match self {
            RunEvent::Started { .. } => "started",
            RunEvent::StepStarted { .. } => "step_started",
            RunEvent::StepFinished { .. } => "step_finished",
            RunEvent::StepFailed { .. } => "step_failed",
            RunEvent::Forked { .. } => "forked",
            RunEvent::Joined { .. } => "joined",
            RunEvent::Child { .. } => "child",
            RunEvent::Token { .. } => "token",
            RunEvent::Custom { .. } => "custom",
            RunEvent::Interrupted(_) => "interrupted",
            RunEvent::AnswerRejected { .. } => "answer_rejected",
            RunEvent::AnswerAccepted { .. } => "answer_accepted",
            RunEvent::Finished { .. } => "finished",
            RunEvent::Failed { .. } => "failed",
        }
    }

    /// The task the event happened in, for the events of a step (the root
    /// for the run's own events).
    pub fn path(&self) -> TaskPath {
        match self {
            RunEvent::StepStarted { path, .. }
            | RunEvent::StepFinished { path, .. }
            | RunEvent::StepFailed { path, .. }
            | RunEvent::Forked { path, .. }
            | RunEvent::Joined { path, .. }
            | RunEvent::Child { path, .. }
            | RunEvent::Token { path, .. }
            | RunEvent::Custom { path, .. }
            | RunEvent::AnswerRejected { path, .. }
            | RunEvent::AnswerAccepted { path, .. } => path.clone(),
            RunEvent::Interrupted(i) => i.path.clone(),
            RunEvent::Started { .. } | RunEvent::Finished { .. } | RunEvent::Failed { .. } => {
                TaskPath::root()
            }
        }
    }
}

/// The subscribers of one run; sending costs nothing while there are none.
pub(crate) struct EventHub<S: HarnessState> {
    count: AtomicUsize,
    senders: Mutex<Vec<mpsc::UnboundedSender<RunEvent<S>>>>,
    /// For a sub-agent's loop: the run's stream its events go to.
    forward: Option<Arc<dyn Emitter>>,
    /// Whether a subscriber asked for model tokens.
    tokens: std::sync::atomic::AtomicBool,
}

impl<S: HarnessState> EventHub<S> {
    pub(crate) fn new() -> Self {
        Self {
            count: AtomicUsize::new(0),
            senders: Mutex::new(Vec::new()),
            forward: None,
            tokens: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Also sends the tokens of model calls.
    pub(crate) fn want_tokens(&self) {
        self.tokens.store(true, Ordering::Release);
    }

    /// The hub of a sub-agent's loop, whose events go to `run`'s stream.
    pub(crate) fn forwarding(run: Arc<dyn Emitter>) -> Self {
        Self {
            forward: Some(run),
            ..Self::new()
        }
    }

    pub(crate) fn subscribe(&self) -> RunEvents<S> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut senders = self
            .senders
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        senders.push(tx);
        self.count.store(senders.len(), Ordering::Release);
        RunEvents { rx }
    }

    /// Whether anyone listens; check before building an expensive event.
    pub(crate) fn active(&self) -> bool {
        self.count.load(Ordering::Acquire) > 0 || self.forward.as_ref().is_some_and(|f| f.active())
    }

    pub(crate) fn send(&self, event: RunEvent<S>) {
        if !self.active() {
            return;
        }
        if let Some(run) = &self.forward {
            forward(&**run, &event);
        }
        if self.count.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut senders = self
            .senders
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        senders.retain(|tx| tx.send(event.clone()).is_ok());
        self.count.store(senders.len(), Ordering::Release);
    }
}

/// Sends a sub-agent's event to the run's stream, as data.
fn forward<S: HarnessState>(run: &dyn Emitter, event: &RunEvent<S>) {
    use serde_json::json;
    match event {
        RunEvent::StepStarted { path, step, index } => {
            run.child(path, step, "step_started", json!({ "index": index }));
        }
        RunEvent::StepFinished {
            path,
            step,
            index,
            elapsed,
            update,
            signal,
        } => run.child(
            path,
            step,
            "step_finished",
            json!({
                "index": index,
                "elapsed_ms": u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
                "update": serde_json::to_value(update).unwrap_or(Value::Null),
                "signal": signal,
            }),
        ),
        RunEvent::StepFailed {
            path,
            step,
            attempt,
            error,
            will_retry,
        } => run.child(
            path,
            step,
            "step_failed",
            json!({ "attempt": attempt, "error": error, "will_retry": will_retry }),
        ),
        RunEvent::Forked {
            path,
            step,
            branches,
        } => run.child(path, step, "forked", json!({ "branches": branches })),
        RunEvent::Joined {
            path,
            join,
            branches,
        } => run.child(path, join, "joined", json!({ "branches": branches })),
        RunEvent::Custom {
            path,
            step,
            kind,
            payload,
        } => run.emit(path, step, kind, payload.clone()),
        RunEvent::Child {
            path,
            step,
            kind,
            detail,
        } => run.child(path, step, kind, detail.clone()),
        RunEvent::Token { path, step, text } => run.token(path, step, text),
        RunEvent::AnswerAccepted {
            path,
            step,
            interrupt,
        } => run.accepted(path, step, interrupt),
        // The run that holds the sub-agent reports these itself.
        RunEvent::Started { .. }
        | RunEvent::Interrupted(_)
        | RunEvent::AnswerRejected { .. }
        | RunEvent::Finished { .. }
        | RunEvent::Failed { .. } => {}
    }
}

impl<S: HarnessState> Emitter for EventHub<S> {
    fn wants_tokens(&self) -> bool {
        (self.tokens.load(Ordering::Acquire) && self.count.load(Ordering::Acquire) > 0)
            || self.forward.as_ref().is_some_and(|f| f.wants_tokens())
    }

    fn token(&self, path: &TaskPath, step: &Arc<str>, text: &str) {
        self.send(RunEvent::Token {
            path: path.clone(),
            step: Arc::clone(step),
            text: text.into(),
        });
    }

    fn child(&self, path: &TaskPath, step: &Arc<str>, kind: &str, detail: Value) {
        self.send(RunEvent::Child {
            path: path.clone(),
            step: Arc::clone(step),
            kind: kind.into(),
            detail,
        });
    }

    fn active(&self) -> bool {
        EventHub::active(self)
    }

    fn accepted(&self, path: &TaskPath, step: &Arc<str>, interrupt: &InterruptId) {
        self.send(RunEvent::AnswerAccepted {
            path: path.clone(),
            step: Arc::clone(step),
            interrupt: interrupt.clone(),
        });
    }

    fn emit(&self, path: &TaskPath, step: &Arc<str>, kind: &str, payload: Value) {
        self.send(RunEvent::Custom {
            path: path.clone(),
            step: Arc::clone(step),
            kind: kind.into(),
            payload,
        });
    }
}

/// The events of one run, as a [`Stream`]. It ends when the run's handle is
/// dropped; events are buffered until read.
pub struct RunEvents<S: HarnessState> {
    rx: mpsc::UnboundedReceiver<RunEvent<S>>,
}

impl<S: HarnessState> fmt::Debug for RunEvents<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunEvents").finish_non_exhaustive()
    }
}

impl<S: HarnessState> RunEvents<S> {
    /// The next event, or `None` once the run's handle is gone.
    pub async fn recv(&mut self) -> Option<RunEvent<S>> {
        self.rx.recv().await
    }

    /// The next event if one is buffered now.
    pub fn try_recv(&mut self) -> Option<RunEvent<S>> {
        self.rx.try_recv().ok()
    }
}

impl<S: HarnessState> Stream for RunEvents<S> {
    type Item = RunEvent<S>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}
