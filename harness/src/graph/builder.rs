//! The fluent loop builder.

use super::{CompiledStep, Exits, HarnessInner, RouteFn, RunFn, Target, validate};
use crate::Cx;
use crate::graph::{Harness, LoopValidationError};
use crate::observe::Observer;
use crate::run::StepError;
use crate::session::{SessionConfig, SessionStore};
use crate::signal::Signal;
use crate::slots::{Context, Slots};
use crate::state::HarnessState;
use futures::FutureExt;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// How often a failing step is tried, and how long to wait in between.
///
/// The wait doubles after each failure, from `backoff` up to `max_backoff`.
/// Interrupts are never retried; a step's `cx.once` results are kept across
/// attempts, so a retry does not repeat a side effect that already happened.
///
/// ```
/// use harness::RetryPolicy;
/// use std::time::Duration;
/// let p = RetryPolicy::attempts(3).backoff(Duration::from_millis(50));
/// assert_eq!(p.delay_before(2), Duration::from_millis(50));
/// assert_eq!(p.delay_before(3), Duration::from_millis(100));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    attempts: u32,
    backoff: Duration,
    max_backoff: Duration,
}

impl Default for RetryPolicy {
    /// One attempt: no retry.
    fn default() -> Self {
        Self::attempts(1)
    }
}

impl RetryPolicy {
    /// Up to `attempts` tries in all (at least 1), with no wait in between.
    pub fn attempts(attempts: u32) -> Self {
        Self {
            attempts: attempts.max(1),
            backoff: Duration::ZERO,
            max_backoff: Duration::from_secs(30),
        }
    }

    /// Waits `initial` before the second attempt, doubling each time after.
    #[must_use]
    pub fn backoff(mut self, initial: Duration) -> Self {
        self.backoff = initial;
        self
    }

    /// Caps the wait between attempts (default 30 s).
    #[must_use]
    pub fn max_backoff(mut self, max: Duration) -> Self {
        self.max_backoff = max;
        self
    }

    /// The number of attempts in all.
    pub fn max_attempts(&self) -> u32 {
        self.attempts
    }

    /// The wait before attempt number `attempt` (1-based; attempt 1 has none).
    pub fn delay_before(&self, attempt: u32) -> Duration {
        if attempt <= 1 || self.backoff.is_zero() {
            return Duration::ZERO;
        }
        let doublings = (attempt - 2).min(31);
        self.backoff
            .saturating_mul(1_u32 << doublings)
            .min(self.max_backoff)
    }
}

/// Where a declared transition leads, by name, before validation.
pub(super) enum Dest {
    Step(String),
    End,
}

/// A step as declared, before validation.
pub(super) struct StepDef<S: HarnessState, C> {
    pub(super) name: String,
    pub(super) run: Option<RunFn<S, C>>,
    pub(super) route: Option<RouteFn<S>>,
    pub(super) on: Vec<(Signal, Dest)>,
    pub(super) next: Option<String>,
    pub(super) timeout: Option<Duration>,
    pub(super) retry: RetryPolicy,
}

/// Builds a [`Harness`]: declare steps, transitions, the start step and the
/// fixed slots, then [`build`](HarnessBuilder::build) it.
pub struct HarnessBuilder<S: HarnessState, C: Context = ()> {
    steps: Vec<StepDef<S, C>>,
    start: Option<String>,
    fixed: Slots,
    observers: Vec<Arc<dyn Observer<S>>>,
    step_limit: u64,
    store: Option<Arc<dyn SessionStore>>,
    session_config: SessionConfig,
}

impl<S: HarnessState, C: Context> fmt::Debug for HarnessBuilder<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HarnessBuilder")
            .field(
                "steps",
                &self.steps.iter().map(|s| &s.name).collect::<Vec<_>>(),
            )
            .field("start", &self.start)
            .finish_non_exhaustive()
    }
}

/// The default step limit: generous for real agents, finite for runaway loops.
pub const DEFAULT_STEP_LIMIT: u64 = 10_000;

impl<S: HarnessState, C: Context> HarnessBuilder<S, C> {
    pub(super) fn new() -> Self {
        Self {
            steps: Vec::new(),
            start: None,
            fixed: Slots::new(),
            observers: Vec::new(),
            step_limit: DEFAULT_STEP_LIMIT,
            store: None,
            session_config: SessionConfig::default(),
        }
    }

    /// Declares a step named `name`; configure it on the returned builder.
    pub fn step(self, name: impl Into<String>) -> StepBuilder<S, C> {
        StepBuilder {
            harness: self,
            step: StepDef {
                name: name.into(),
                run: None,
                route: None,
                on: Vec::new(),
                next: None,
                timeout: None,
                retry: RetryPolicy::default(),
            },
        }
    }

    /// The step every run starts at.
    #[must_use]
    pub fn start(mut self, name: impl Into<String>) -> Self {
        self.start = Some(name.into());
        self
    }

    /// The fixed slots, shared by every agent created from this harness.
    #[must_use]
    pub fn slots(mut self, fixed: Slots) -> Self {
        self.fixed = fixed;
        self
    }

    /// Adds an observer of every run of every agent of this harness.
    #[must_use]
    pub fn observer(mut self, observer: impl Observer<S> + 'static) -> Self {
        self.observers.push(Arc::new(observer));
        self
    }

    /// The most steps one run may take before it fails with
    /// [`RunError::StepLimit`](crate::RunError::StepLimit)
    /// (default [`DEFAULT_STEP_LIMIT`]).
    #[must_use]
    pub fn step_limit(mut self, limit: u64) -> Self {
        self.step_limit = limit;
        self
    }

    /// Persists every run in `store`: a checkpoint at every step boundary,
    /// so a run can be resumed in another process. The store can be shared
    /// by several harnesses and agents.
    #[must_use]
    pub fn store(mut self, store: impl SessionStore + 'static) -> Self {
        self.store = Some(Arc::new(store));
        self
    }

    /// How runs are persisted: durability, snapshot interval, lease length.
    #[must_use]
    pub fn session_config(mut self, config: SessionConfig) -> Self {
        self.session_config = config;
        self
    }

    /// Validates the loop and builds it. Every violation is reported at once.
    pub fn build(self) -> Result<Harness<S, C>, LoopValidationError> {
        let start = validate::validate(&self.steps, self.start.as_deref())?;
        let index = |name: &str| {
            self.steps
                .iter()
                .position(|s| s.name == name)
                .unwrap_or_default()
        };
        let exits: Vec<Exits> = self
            .steps
            .iter()
            .map(|s| match s.next.as_deref() {
                Some(next) => Exits::Next(index(next)),
                None => Exits::On(
                    s.on.iter()
                        .map(|(sig, dest)| {
                            let t = match dest {
                                Dest::Step(name) => Target::Step(index(name)),
                                Dest::End => Target::End,
                            };
                            (sig.clone(), t)
                        })
                        .collect(),
                ),
            })
            .collect();
        let steps = self
            .steps
            .into_iter()
            .zip(exits)
            .map(|(s, exits)| CompiledStep {
                name: Arc::from(s.name),
                run: s.run,
                route: s.route,
                exits,
                timeout: s.timeout,
                retry: s.retry,
            })
            .collect();
        Ok(Harness {
            inner: Arc::new(HarnessInner {
                steps,
                start,
                fixed: self.fixed,
                observers: self.observers,
                step_limit: self.step_limit,
                store: self.store,
                session_config: self.session_config,
            }),
        })
    }
}

/// Configures one step; every [`HarnessBuilder`] method is also here, and
/// ends this step's declaration.
pub struct StepBuilder<S: HarnessState, C: Context = ()> {
    harness: HarnessBuilder<S, C>,
    step: StepDef<S, C>,
}

impl<S: HarnessState, C: Context> fmt::Debug for StepBuilder<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StepBuilder")
            .field("step", &self.step.name)
            .finish_non_exhaustive()
    }
}

impl<S: HarnessState, C: Context> StepBuilder<S, C> {
    /// The step's async body: reads the state and the context, returns a
    /// partial update. This is the only place the state changes.
    ///
    /// `f` is an `async fn(Arc<S>, Cx<C>) -> StepResult<S::Update>` or a
    /// closure of that shape.
    #[must_use]
    pub fn run<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Arc<S>, Cx<C>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<S::Update, StepError>> + Send + 'static,
    {
        self.step.run = Some(Arc::new(move |s, cx| f(s, cx).boxed()));
        self
    }

    /// The step's pure router: reads the state after `run` and returns the
    /// signal that picks the transition (declared with [`on`](Self::on)).
    #[must_use]
    pub fn route<F, R>(mut self, f: F) -> Self
    where
        F: Fn(&S) -> R + Send + Sync + 'static,
        R: Into<Signal>,
    {
        self.step.route = Some(Arc::new(move |s| f(s).into()));
        self
    }

    /// Declares what happens when `route` returns `signal`.
    pub fn on(self, signal: impl Into<Signal>) -> OnBuilder<S, C> {
        OnBuilder {
            step: self,
            signal: signal.into(),
        }
    }

    /// After `run`, always continue at `step` (no `route`, no `on`).
    #[must_use]
    pub fn next(mut self, step: impl Into<String>) -> Self {
        self.step.next = Some(step.into());
        self
    }

    /// Fails an attempt of `run` that takes longer than `limit`.
    #[must_use]
    pub fn timeout(mut self, limit: Duration) -> Self {
        self.step.timeout = Some(limit);
        self
    }

    /// Retries a failing `run` by this policy.
    #[must_use]
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.step.retry = policy;
        self
    }

    fn finish(mut self) -> HarnessBuilder<S, C> {
        self.harness.steps.push(self.step);
        self.harness
    }

    /// Ends this step and declares the next one.
    pub fn step(self, name: impl Into<String>) -> StepBuilder<S, C> {
        self.finish().step(name)
    }

    /// Ends this step; see [`HarnessBuilder::start`].
    #[must_use]
    pub fn start(self, name: impl Into<String>) -> HarnessBuilder<S, C> {
        self.finish().start(name)
    }

    /// Ends this step; see [`HarnessBuilder::slots`].
    #[must_use]
    pub fn slots(self, fixed: Slots) -> HarnessBuilder<S, C> {
        self.finish().slots(fixed)
    }

    /// Ends this step; see [`HarnessBuilder::observer`].
    #[must_use]
    pub fn observer(self, observer: impl Observer<S> + 'static) -> HarnessBuilder<S, C> {
        self.finish().observer(observer)
    }

    /// Ends this step; see [`HarnessBuilder::step_limit`].
    #[must_use]
    pub fn step_limit(self, limit: u64) -> HarnessBuilder<S, C> {
        self.finish().step_limit(limit)
    }

    /// Ends this step; see [`HarnessBuilder::store`].
    #[must_use]
    pub fn store(self, store: impl SessionStore + 'static) -> HarnessBuilder<S, C> {
        self.finish().store(store)
    }

    /// Ends this step; see [`HarnessBuilder::session_config`].
    #[must_use]
    pub fn session_config(self, config: SessionConfig) -> HarnessBuilder<S, C> {
        self.finish().session_config(config)
    }

    /// Ends this step; see [`HarnessBuilder::build`].
    pub fn build(self) -> Result<Harness<S, C>, LoopValidationError> {
        self.finish().build()
    }
}

/// The target of one `.on(signal)` transition.
pub struct OnBuilder<S: HarnessState, C: Context = ()> {
    step: StepBuilder<S, C>,
    signal: Signal,
}

impl<S: HarnessState, C: Context> fmt::Debug for OnBuilder<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OnBuilder")
            .field("step", &self.step.step.name)
            .field("signal", &self.signal)
            .finish()
    }
}

impl<S: HarnessState, C: Context> OnBuilder<S, C> {
    /// On this signal, continue at `step`.
    pub fn to(mut self, step: impl Into<String>) -> StepBuilder<S, C> {
        self.step
            .step
            .on
            .push((self.signal, Dest::Step(step.into())));
        self.step
    }

    /// On this signal, end the run; the signal is the run's outcome.
    pub fn end(mut self) -> StepBuilder<S, C> {
        self.step.step.on.push((self.signal, Dest::End));
        self.step
    }
}
