//! How long a request may take, and how many streams may be open at once.

use crate::error::ApiError;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The middleware of the requests that do not wait for a run: a request
/// whose response is not ready within `limit` is answered with a 504
/// naming the limit. A stream's response is ready once its run has
/// started: the events that follow are not timed.
pub(crate) async fn timed(State(limit): State<Duration>, request: Request, next: Next) -> Response {
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::Timeout { limit }.into_response(),
    }
}

/// The streams open at once, at most `limit` (clones count together).
#[derive(Clone, Debug)]
pub(crate) struct Streams {
    open: Arc<Semaphore>,
    limit: usize,
}

/// One open stream: it counts until dropped (the stream ended, or its
/// client went away).
#[derive(Debug)]
pub(crate) struct StreamSlot {
    _permit: OwnedSemaphorePermit,
}

impl Streams {
    pub(crate) fn new(limit: usize) -> Self {
        Streams {
            open: Arc::new(Semaphore::new(limit.min(Semaphore::MAX_PERMITS))),
            limit,
        }
    }

    /// A slot for one more stream, or a 429 naming the limit.
    pub(crate) fn open(&self) -> Result<StreamSlot, ApiError> {
        Arc::clone(&self.open)
            .try_acquire_owned()
            .map(|permit| StreamSlot { _permit: permit })
            .map_err(|_| ApiError::TooManyStreams { limit: self.limit })
    }
}

/// The runs that wait to start at once (queued behind a thread's runs, or
/// delayed), at most `limit`: each holds its task and its input in memory
/// until it starts.
#[derive(Clone, Debug)]
pub(crate) struct Waiting {
    slots: Arc<Semaphore>,
    limit: usize,
}

/// One waiting run: it counts until dropped (the run started, or was
/// cancelled before it did).
#[derive(Debug)]
pub(crate) struct WaitSlot {
    _permit: OwnedSemaphorePermit,
}

impl Waiting {
    pub(crate) fn new(limit: usize) -> Self {
        Waiting {
            slots: Arc::new(Semaphore::new(limit.min(Semaphore::MAX_PERMITS))),
            limit,
        }
    }

    /// A slot for one more waiting run, or a 429 naming the limit.
    pub(crate) fn take(&self) -> Result<WaitSlot, ApiError> {
        Arc::clone(&self.slots)
            .try_acquire_owned()
            .map(|permit| WaitSlot { _permit: permit })
            .map_err(|_| ApiError::TooManyRuns { limit: self.limit })
    }
}

/// The middleware of a mounted studio: its event stream (`/api/events`,
/// one per open page) takes a slot among the server's open streams,
/// which it holds until its body is dropped (the page went away, or the
/// server stops); without a free slot it is a 429 naming the limit.
#[cfg(feature = "studio")]
pub(crate) async fn studio_stream(
    State(streams): State<Streams>,
    request: Request,
    next: Next,
) -> Response {
    use futures::StreamExt;
    if !request.uri().path().ends_with("/api/events") {
        return next.run(request).await;
    }
    let slot = match streams.open() {
        Ok(slot) => slot,
        Err(e) => return e.into_response(),
    };
    let (parts, body) = next.run(request).await.into_parts();
    let body = body.into_data_stream().map(move |chunk| {
        let _held = &slot;
        chunk
    });
    Response::from_parts(parts, axum::body::Body::from_stream(body))
}

#[cfg(test)]
mod tests {
    use super::Streams;

    #[test]
    fn a_slot_returns_when_dropped() {
        for limit in [0, 1, 3] {
            let streams = Streams::new(limit);
            let slots: Vec<_> = (0..limit).map(|_| streams.open().unwrap()).collect();
            let refused = streams.open().unwrap_err();
            assert!(
                refused
                    .to_string()
                    .contains(&format!("limit of {limit} open"))
            );
            drop(slots);
            if limit > 0 {
                assert!(streams.open().is_ok());
            }
        }
    }
}
