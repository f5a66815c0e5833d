//! Timeouts and the retry policy.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use harness::llm::ModelError;

/// When and how long to wait before retrying a failed HTTP request to a
/// model provider. (Not [`harness::RetryPolicy`], which retries a loop
/// step.)
///
/// Only retryable failures ([`ModelError::is_retryable`]: rate limits,
/// overload, timeouts, transport errors) are retried, at most
/// `max_attempts - 1` times. The wait is the provider's `Retry-After` when it
/// sent one, else exponential backoff (`initial_backoff`, doubling, capped at
/// `max_backoff`) with jitter: a random wait between half and all of it.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpRetryPolicy {
    /// Attempts in all, the first included; 1 disables retries.
    pub max_attempts: u32,
    /// The backoff before the first retry.
    pub initial_backoff: Duration,
    /// The longest backoff.
    pub max_backoff: Duration,
    /// The longest `Retry-After` to honour; a provider asking for more gets
    /// its error returned instead, carrying the wait it asked for.
    pub max_retry_after: Duration,
}

impl Default for HttpRetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

impl HttpRetryPolicy {
    /// A policy that never retries.
    pub fn none() -> Self {
        Self {
            max_attempts: 1,
            ..Self::default()
        }
    }

    /// How long to wait before the next attempt, after attempt number
    /// `attempt` (from 1) failed with `error`; `None` means give up.
    /// `retry_after` is what the provider asked for, if anything.
    pub fn delay_before_retry(
        &self,
        attempt: u32,
        error: &ModelError,
        retry_after: Option<Duration>,
    ) -> Option<Duration> {
        if !error.is_retryable() || attempt >= self.max_attempts {
            return None;
        }
        if let Some(wait) = retry_after.or(error.retry_after()) {
            return (wait <= self.max_retry_after).then_some(wait);
        }
        let doubling = 2u32.saturating_pow(attempt.saturating_sub(1));
        let backoff = self
            .initial_backoff
            .saturating_mul(doubling)
            .min(self.max_backoff);
        Some(jittered(backoff, random_fraction()))
    }
}

/// Between half and all of `backoff`, by `fraction` in `[0, 1)`; never
/// more than `backoff`, however large (`Duration::mul_f64` panics when the
/// product rounds past `Duration::MAX`).
fn jittered(backoff: Duration, fraction: f64) -> Duration {
    Duration::try_from_secs_f64(backoff.as_secs_f64() * (0.5 + 0.5 * fraction))
        .map_or(backoff, |wait| wait.min(backoff))
}

/// A random number in `[0, 1)`; the standard library's per-instance random
/// hash keys are enough for jitter.
fn random_fraction() -> f64 {
    let bits = RandomState::new().build_hasher().finish();
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

/// Timeouts, size limits and retries for a provider client.
///
/// Every limit holds whatever the server sends: a body without a length, a
/// stream that trickles without end, a line that never ends. Going past
/// one is a [`ModelError`] that names the limit (never a panic, never
/// unbounded memory). [`HttpTransport::new`](crate::HttpTransport::new)
/// refuses zero limits; the largest values (`Duration::MAX`, `u64::MAX`)
/// mean no limit.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpOptions {
    /// Limit for one attempt: connecting, sending and receiving the whole
    /// answer, or, when streaming, the response headers.
    pub timeout: Duration,
    /// Limit for the gap between two chunks of a stream.
    pub stream_idle_timeout: Duration,
    /// Limit for a whole stream, from its headers to its last event
    /// (default 30 min): a stream that keeps sending but never ends fails
    /// with [`ModelError::Timeout`]. `Duration::MAX` means no deadline.
    pub stream_deadline: Duration,
    /// Limit for establishing a connection.
    pub connect_timeout: Duration,
    /// The largest answer body read, in bytes (default 32 MiB); larger is
    /// [`ModelError::ResponseTooLarge`]. Error bodies are read up to 64 KiB
    /// (or this, if smaller) and the rest is dropped.
    pub max_body_bytes: u64,
    /// The largest server-sent event, and so the longest line of a stream,
    /// in bytes (default 4 MiB); larger is [`ModelError::ResponseTooLarge`].
    pub max_event_bytes: u64,
    /// The most bytes one stream may carry in all, its events together
    /// (default 256 MiB); past it the stream ends with
    /// [`ModelError::ResponseTooLarge`]. A streamed answer is gathered in
    /// memory by whoever reads it, so without this a server sending valid
    /// events fast would be limited only by
    /// [`stream_deadline`](Self::stream_deadline). The default is well above
    /// the longest answers (128k tokens take about 40 MiB of events).
    pub max_stream_bytes: u64,
    /// Retries of failed attempts.
    pub retry: HttpRetryPolicy,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(300),
            stream_idle_timeout: Duration::from_secs(120),
            stream_deadline: Duration::from_secs(30 * 60),
            connect_timeout: Duration::from_secs(15),
            max_body_bytes: 32 << 20,
            max_event_bytes: 4 << 20,
            max_stream_bytes: 256 << 20,
            retry: HttpRetryPolicy::default(),
        }
    }
}

impl HttpOptions {
    /// Refuses limits that would fail every request: a zero time or size.
    pub fn check(&self) -> Result<(), ModelError> {
        let zero_time = [
            ("timeout", self.timeout),
            ("stream_idle_timeout", self.stream_idle_timeout),
            ("stream_deadline", self.stream_deadline),
            ("connect_timeout", self.connect_timeout),
        ]
        .into_iter()
        .find(|(_, d)| d.is_zero());
        let zero_size = [
            ("max_body_bytes", self.max_body_bytes),
            ("max_event_bytes", self.max_event_bytes),
            ("max_stream_bytes", self.max_stream_bytes),
        ]
        .into_iter()
        .find(|(_, n)| *n == 0);
        match (zero_time, zero_size) {
            (Some((name, _)), _) | (None, Some((name, _))) => Err(ModelError::Configuration {
                message: format!("HttpOptions::{name} is zero: every request would fail"),
            }),
            (None, None) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_of_the_largest_backoffs_never_panics_nor_exceeds_them() {
        let largest_fraction = 1.0 - f64::EPSILON / 2.0;
        for backoff in [
            Duration::MAX,
            Duration::MAX / 3,
            Duration::from_secs(u64::MAX),
        ] {
            for fraction in [0.0, 0.5, largest_fraction] {
                let wait = jittered(backoff, fraction);
                // Half of it at least, within the precision of an `f64`.
                assert!(
                    wait <= backoff && wait >= backoff / 3,
                    "{backoff:?} {fraction}"
                );
            }
        }
        assert_eq!(
            jittered(Duration::from_secs(2), 0.0),
            Duration::from_secs(1)
        );
        let policy = HttpRetryPolicy {
            max_attempts: u32::MAX,
            initial_backoff: Duration::MAX,
            max_backoff: Duration::MAX,
            max_retry_after: Duration::MAX,
        };
        for attempt in [1, 2, 40, u32::MAX - 1] {
            assert!(
                policy
                    .delay_before_retry(attempt, &overloaded(), None)
                    .is_some()
            );
        }
    }

    fn overloaded() -> ModelError {
        ModelError::Overloaded {
            status: Some(503),
            message: "busy".into(),
            retry_after: None,
        }
    }

    #[test]
    fn backoff_doubles_with_jitter_and_is_capped() {
        let policy = HttpRetryPolicy {
            max_attempts: 10,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(350),
            ..HttpRetryPolicy::default()
        };
        for (attempt, full) in [(1, 100), (2, 200), (3, 350), (6, 350)] {
            let delay = policy
                .delay_before_retry(attempt, &overloaded(), None)
                .expect("retryable");
            let full = Duration::from_millis(full);
            assert!(delay >= full / 2 && delay <= full, "{attempt}: {delay:?}");
        }
    }

    #[test]
    fn retry_after_wins_within_its_cap() {
        let policy = HttpRetryPolicy::default();
        let limited = ModelError::RateLimited {
            retry_after: Some(Duration::from_secs(2)),
            message: "slow".into(),
        };
        assert_eq!(
            policy.delay_before_retry(1, &limited, None),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            policy.delay_before_retry(1, &overloaded(), Some(Duration::from_secs(3))),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            policy.delay_before_retry(1, &overloaded(), Some(Duration::from_secs(600))),
            None
        );
    }

    #[test]
    fn gives_up_on_permanent_errors_and_after_the_last_attempt() {
        let policy = HttpRetryPolicy::default();
        let auth = ModelError::Auth {
            message: "no".into(),
        };
        assert_eq!(policy.delay_before_retry(1, &auth, None), None);
        assert_eq!(policy.delay_before_retry(3, &overloaded(), None), None);
        assert_eq!(
            HttpRetryPolicy::none().delay_before_retry(1, &overloaded(), None),
            None
        );
    }
}
