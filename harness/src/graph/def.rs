//! A loop as declared, before validation: steps by name, their transitions,
//! and their retry policies.

use crate::signal::Signal;
use crate::state::HarnessState;
use crate::step::{Cx, StepError};
use futures::future::BoxFuture;
use std::sync::Arc;
use std::time::Duration;

/// The async half of a step, boxed.
pub(crate) type RunFn<S, C> = Arc<
    dyn Fn(Arc<S>, Cx<C>) -> BoxFuture<'static, Result<<S as HarnessState>::Update, StepError>>
        + Send
        + Sync,
>;
/// The pure half of a step.
pub(crate) type RouteFn<S> = Arc<dyn Fn(&S) -> Signal + Send + Sync>;

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
pub(crate) enum Dest {
    Step(String),
    End,
}

/// A step as declared, before validation.
pub(crate) struct StepDef<S: HarnessState, C> {
    pub(crate) name: String,
    pub(crate) run: Option<RunFn<S, C>>,
    pub(crate) route: Option<RouteFn<S>>,
    pub(crate) on: Vec<(Signal, Dest)>,
    /// `.next(step)` or `.end()`: where the step always goes after `run`.
    pub(crate) next: Option<Dest>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) retry: RetryPolicy,
}
