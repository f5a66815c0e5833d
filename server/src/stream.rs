//! A run's frames as server-sent events: each with its id (its position in
//! the run's stream), filtered by the stream modes the client asked for.

use crate::limits::StreamSlot;
use crate::record::{Frame, Mode, RunRecord};
use axum::http::{HeaderValue, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::stream::{self, Stream};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;

/// What a client streams.
#[derive(Clone, Debug)]
pub(crate) struct Want {
    pub(crate) modes: Vec<Mode>,
    pub(crate) subgraphs: bool,
    /// Frames after this one only (`Last-Event-ID`).
    pub(crate) after: Option<u64>,
    /// Stop the run when the client goes away before it settles.
    pub(crate) cancel_on_disconnect: bool,
}

impl Want {
    fn shows(&self, frame: &Frame) -> bool {
        (frame.mode == Mode::Always || self.modes.contains(&frame.mode))
            && (frame.ns.is_none() || self.subgraphs)
    }
}

/// Cancels the run when dropped, unless disarmed: a client that goes away
/// mid-stream with `on_disconnect: cancel`.
struct CancelGuard(Option<Arc<RunRecord>>);

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if let Some(run) = self.0.take() {
            run.cancel();
        }
    }
}

struct Cursor {
    run: Arc<RunRecord>,
    want: Want,
    after: Option<u64>,
    queue: VecDeque<Arc<Frame>>,
    ticks: tokio::sync::watch::Receiver<u64>,
    stopping: tokio::sync::watch::Receiver<bool>,
    done: bool,
    /// Ended by the server's stop, the run not settled here: the stream's
    /// last event says so.
    cut: bool,
    guard: CancelGuard,
    /// Counts this stream among the server's open ones until it ends.
    _slot: StreamSlot,
}

fn event(frame: &Frame) -> Event {
    let name = match &frame.ns {
        Some(ns) => format!("{}|{ns}", frame.event),
        None => frame.event.to_string(),
    };
    Event::default()
        .id(frame.seq.to_string())
        .event(name)
        .data(frame.data.to_string())
}

/// What the last event of a stream says when the server stops before the
/// run has ended (a replica hands its runs over to the others).
const CUT: &str = "this server is stopping before the run's end; with replicas, another one \
goes on with it: join the run's stream there, with the Last-Event-ID of the last event read, \
to read on";

/// The events of `run` that `want` asks for, until it settles.
pub(crate) fn frames(
    run: Arc<RunRecord>,
    want: Want,
    stopping: tokio::sync::watch::Receiver<bool>,
    slot: StreamSlot,
) -> impl Stream<Item = Event> + Send {
    let guard = CancelGuard(want.cancel_on_disconnect.then(|| Arc::clone(&run)));
    let cursor = Cursor {
        ticks: run.ticks(),
        after: want.after,
        run,
        want,
        queue: VecDeque::new(),
        stopping,
        done: false,
        cut: false,
        guard,
        _slot: slot,
    };
    stream::unfold(cursor, |mut c| async move {
        loop {
            if let Some(frame) = c.queue.pop_front() {
                return Some((event(&frame), c));
            }
            if c.done {
                if std::mem::take(&mut c.cut) {
                    // Not one of the run's frames (those are the store's,
                    // numbered for every replica): no id, so a client
                    // that joins elsewhere with its Last-Event-ID reads on
                    // from the last frame it had.
                    let data = serde_json::json!({
                        "error": "ServerStopping",
                        "message": CUT,
                    });
                    return Some((Event::default().event("error").data(data.to_string()), c));
                }
                c.guard.0.take();
                return None;
            }
            // Marks the ticks seen before reading, so that a frame pushed
            // after the read wakes the wait below.
            c.ticks.borrow_and_update();
            let (frames, done) = c.run.frames_after(c.after);
            if let Some(last) = frames.last() {
                c.after = Some(last.seq);
            }
            c.queue
                .extend(frames.into_iter().filter(|f| c.want.shows(f)));
            if done {
                c.done = true;
                // Stopped here to be handed to another replica.
                c.cut = c.run.is_handing_over();
                continue;
            }
            if *c.stopping.borrow() {
                c.done = true;
                c.cut = true;
                continue;
            }
            if c.queue.is_empty() {
                tokio::select! {
                    changed = c.ticks.changed() => if changed.is_err() { c.done = true },
                    stop = c.stopping.changed() => if stop.is_err() { c.done = true },
                }
            }
        }
    })
}

/// The SSE response of a run's stream; `location` names the run
/// (`Content-Location`, which the SDK reads the run id from).
pub(crate) fn response(
    run: Arc<RunRecord>,
    want: Want,
    location: &str,
    stopping: tokio::sync::watch::Receiver<bool>,
    slot: StreamSlot,
) -> Response {
    let events = frames(run, want, stopping, slot);
    let body = Sse::new(stream_ok(events)).keep_alive(KeepAlive::default());
    let mut response = body.into_response();
    if let Ok(v) = HeaderValue::from_str(location) {
        response.headers_mut().insert(header::CONTENT_LOCATION, v);
    }
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn stream_ok(
    events: impl Stream<Item = Event> + Send,
) -> impl Stream<Item = Result<Event, Infallible>> + Send {
    use futures::StreamExt;
    events.map(Ok)
}
