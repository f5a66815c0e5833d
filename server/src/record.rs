//! A run as the server keeps it: its fields, its status, and the frames of
//! its stream, which every client that streams or joins it reads.

use crate::time::iso;
use harness::StopHandle;
use harness::session::now_millis;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::watch;

/// What a frame is, to filter a stream by (the stream modes); `Always` frames
/// (`metadata`, `error`) go to every stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Values,
    Updates,
    Custom,
    Debug,
    Events,
    /// `messages-tuple`: each token as `[chunk, metadata]`.
    Messages,
    /// `messages`: `messages/metadata` once per message, then the message
    /// so far (`messages/partial`) at each token and whole
    /// (`messages/complete`) when its step ends.
    MessagesFull,
    Always,
}

impl Mode {
    /// A stream mode by the name the SDK sends; `None` if this server does not
    /// know it.
    pub(crate) fn parse(name: &str) -> Option<Mode> {
        Some(match name {
            "values" => Mode::Values,
            "updates" => Mode::Updates,
            "custom" => Mode::Custom,
            "debug" => Mode::Debug,
            "events" => Mode::Events,
            "messages-tuple" => Mode::Messages,
            "messages" => Mode::MessagesFull,
            _ => return None,
        })
    }

    /// The name a stored frame gives its mode ([`parse`](Self::parse)'s,
    /// and `always`).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::Values => "values",
            Mode::Updates => "updates",
            Mode::Custom => "custom",
            Mode::Debug => "debug",
            Mode::Events => "events",
            Mode::Messages => "messages-tuple",
            Mode::MessagesFull => "messages",
            Mode::Always => "always",
        }
    }

    /// The names [`parse`](Self::parse) knows.
    pub(crate) const NAMES: &'static [&'static str] = &[
        "values",
        "updates",
        "custom",
        "debug",
        "events",
        "messages-tuple",
        "messages",
    ];

    /// Whether a run in these modes streams its model's tokens.
    pub(crate) fn wants_tokens(modes: &[Mode]) -> bool {
        modes
            .iter()
            .any(|m| matches!(m, Mode::Messages | Mode::MessagesFull))
    }
}

/// One event of a run's stream.
#[derive(Debug)]
pub(crate) struct Frame {
    /// Its position in the run's stream (the SSE event id).
    pub(crate) seq: u64,
    pub(crate) mode: Mode,
    /// The SSE event name, without the namespace (`values`, `updates`, ...).
    pub(crate) event: &'static str,
    /// The task of a sub-agent it comes from, if it does (`|ns` in the SSE
    /// event name, with `stream_subgraphs`).
    pub(crate) ns: Option<String>,
    pub(crate) data: Value,
}

/// The SSE event names frames carry.
const EVENTS: [&str; 11] = [
    "metadata",
    "values",
    "updates",
    "custom",
    "debug",
    "events",
    "messages",
    "messages/metadata",
    "messages/partial",
    "messages/complete",
    "error",
];

impl Frame {
    /// The frame as a replica stores it: `[seq, mode, event, ns, data]`, or
    /// `[seq, mode, event, ns, null, text]` with the data as JSON text when
    /// it nests too deeply to be stored as it is (a state at a session
    /// store's depth limit, in the frames' batch and a debug event's
    /// payload).
    pub(crate) fn to_stored(&self) -> Value {
        // The batch (an array) and the frame (an array) around the data.
        let room = harness::session::MAX_VALUE_DEPTH - 2;
        if crate::app::too_deep(&self.data, room).is_some() {
            return json!([
                self.seq,
                self.mode.name(),
                self.event,
                self.ns,
                null,
                self.data.to_string()
            ]);
        }
        json!([self.seq, self.mode.name(), self.event, self.ns, self.data])
    }

    /// A frame a replica stored; `None` if it does not read as one.
    pub(crate) fn from_stored(value: &Value) -> Option<Frame> {
        let (seq, mode, event, ns, data) = match value.as_array()?.as_slice() {
            [seq, mode, event, ns, data] => (seq, mode, event, ns, data.clone()),
            [seq, mode, event, ns, Value::Null, Value::String(text)] => {
                (seq, mode, event, ns, serde_json::from_str(text).ok()?)
            }
            _ => return None,
        };
        let mode = match mode.as_str()? {
            "always" => Mode::Always,
            name => Mode::parse(name)?,
        };
        let event = EVENTS.into_iter().find(|e| Some(*e) == event.as_str())?;
        Some(Frame {
            seq: seq.as_u64()?,
            mode,
            event,
            ns: ns.as_str().map(str::to_string),
            data,
        })
    }
}

/// Where a run is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RunStatus {
    Pending,
    Running,
    Success,
    Error,
    /// Paused on an interrupt, or cancelled.
    Interrupted,
}

impl RunStatus {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RunStatus::Pending => "pending",
            RunStatus::Running => "running",
            RunStatus::Success => "success",
            RunStatus::Error => "error",
            RunStatus::Interrupted => "interrupted",
        }
    }

    pub(crate) fn is_done(self) -> bool {
        !matches!(self, RunStatus::Pending | RunStatus::Running)
    }

    pub(crate) const NAMES: &'static [&'static str] =
        &["pending", "running", "success", "error", "interrupted"];

    /// The status named `name` ([`as_str`](Self::as_str)).
    pub(crate) fn parse(name: &str) -> Option<RunStatus> {
        Some(match name {
            "pending" => RunStatus::Pending,
            "running" => RunStatus::Running,
            "success" => RunStatus::Success,
            "error" => RunStatus::Error,
            "interrupted" => RunStatus::Interrupted,
            _ => return None,
        })
    }
}

/// How a run ended.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct RunResult {
    /// The thread's state at the end.
    pub(crate) values: Value,
    /// The interrupts it paused on (`{"value", "id"}`).
    pub(crate) interrupts: Vec<Value>,
    /// `(kind, message)` if it failed.
    pub(crate) error: Option<(String, String)>,
}

impl RunResult {
    /// The body of `wait` and `join`: the state, with `__interrupt__` when it
    /// paused, or `__error__` when it failed.
    pub(crate) fn output(&self) -> Value {
        if let Some((kind, message)) = &self.error {
            return json!({ "__error__": { "error": kind, "message": message } });
        }
        let mut out = self.values.clone();
        if !self.interrupts.is_empty()
            && let Value::Object(map) = &mut out
        {
            map.insert(
                "__interrupt__".into(),
                Value::Array(self.interrupts.clone()),
            );
        }
        out
    }
}

/// What the last event of a run stopped by a stopping server says.
const SERVER_STOPPING: &str = "the server is stopping: the run stopped at a step boundary; \
its thread keeps every step the run made, and a new run on it goes on from there";

struct Live {
    status: RunStatus,
    updated_at: u64,
    frames: Vec<Arc<Frame>>,
    result: Option<RunResult>,
    stop: Option<StopHandle>,
    cancelled: bool,
    /// The session and its step count when the run started (`None` for a
    /// thread that had no state): where a rollback takes the thread back.
    start_point: Option<Option<(String, u64)>>,
    /// The session the run was started on and its last checkpoint's
    /// sequence number then (`None` if it had none): how a replica that
    /// takes the run over tells whether it had started.
    launched: Option<(String, Option<u64>)>,
    /// Stopped to be handed to another replica, not settled.
    handing_over: bool,
    /// Stopped because this server is stopping (without replicas).
    server_stopping: bool,
}

/// A run of the server.
pub(crate) struct RunRecord {
    pub(crate) run_id: String,
    pub(crate) thread_id: String,
    pub(crate) assistant_id: String,
    pub(crate) created_at: u64,
    pub(crate) metadata: Value,
    pub(crate) kwargs: Value,
    /// What a new run on the busy thread did to this one's predecessors.
    pub(crate) multitask_strategy: &'static str,
    /// The stream modes the run was created with: what a reconnecting
    /// client gets by default.
    pub(crate) modes: Vec<Mode>,
    live: Mutex<Live>,
    /// The number of frames, bumped at each new frame and at the end.
    tick: watch::Sender<u64>,
    /// A copy of a run another replica runs, following what it stores
    /// (see `replica`); a cancel of it is passed on through the store.
    mirror: AtomicBool,
}

impl std::fmt::Debug for RunRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunRecord")
            .field("run_id", &self.run_id)
            .field("thread_id", &self.thread_id)
            .finish_non_exhaustive()
    }
}

impl RunRecord {
    /// A pending run; its first frame is `metadata`, as LangGraph sends it.
    pub(crate) fn new(
        run_id: String,
        thread_id: String,
        assistant_id: String,
        metadata: Value,
        kwargs: Value,
        multitask_strategy: &'static str,
        modes: Vec<Mode>,
    ) -> Arc<Self> {
        let record = Self::restore(
            run_id,
            thread_id,
            assistant_id,
            now_millis(),
            metadata,
            kwargs,
            multitask_strategy,
            modes,
            false,
        );
        let meta = json!({ "run_id": record.run_id, "attempt": 1 });
        record.push(Mode::Always, "metadata", None, meta);
        record
    }

    /// A run as a replica stored it, without its frames (see
    /// [`push_stored`](Self::push_stored)): a mirror of it, or the run
    /// taken over.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn restore(
        run_id: String,
        thread_id: String,
        assistant_id: String,
        created_at: u64,
        metadata: Value,
        kwargs: Value,
        multitask_strategy: &'static str,
        modes: Vec<Mode>,
        mirror: bool,
    ) -> Arc<Self> {
        Arc::new(RunRecord {
            run_id,
            thread_id,
            assistant_id,
            created_at,
            metadata,
            kwargs,
            multitask_strategy,
            modes,
            live: Mutex::new(Live {
                status: RunStatus::Pending,
                updated_at: created_at,
                frames: Vec::new(),
                result: None,
                stop: None,
                cancelled: false,
                start_point: None,
                launched: None,
                handing_over: false,
                server_stopping: false,
            }),
            tick: watch::channel(0).0,
            mirror: AtomicBool::new(mirror),
        })
    }

    /// Whether this is a copy of a run another replica runs.
    pub(crate) fn is_mirror(&self) -> bool {
        self.mirror.load(Ordering::Acquire)
    }

    /// This replica runs it now (it took it over).
    pub(crate) fn own(&self) {
        self.mirror.store(false, Ordering::Release);
    }

    /// Appends a stored frame if it is the next one (frames already here
    /// are skipped); whether it was appended.
    pub(crate) fn push_stored(&self, frame: Frame) -> bool {
        let count = {
            let mut live = self.live();
            if frame.seq != live.frames.len() as u64 {
                return false;
            }
            live.frames.push(Arc::new(frame));
            live.frames.len() as u64
        };
        self.tick.send_replace(count);
        true
    }

    /// A mirror's status, as the replica running it stored it.
    pub(crate) fn mirror_status(&self, status: RunStatus, updated_at: u64) {
        let mut live = self.live();
        if !live.status.is_done() {
            live.status = status;
            live.updated_at = updated_at;
        }
    }

    /// Records where the run was started: the session and its last
    /// checkpoint then.
    pub(crate) fn set_launched(&self, session: String, seq: Option<u64>) {
        self.live().launched = Some((session, seq));
    }

    pub(crate) fn launched(&self) -> Option<(String, Option<u64>)> {
        self.live().launched.clone()
    }

    /// Stops the run at its next step boundary so that another replica
    /// goes on with it: it is not cancelled, and its replica does not
    /// settle it.
    pub(crate) fn hand_over(&self) {
        let mut live = self.live();
        if live.status.is_done() {
            return;
        }
        live.handing_over = true;
        if let Some(stop) = &live.stop {
            stop.stop();
        }
    }

    pub(crate) fn is_handing_over(&self) -> bool {
        self.live().handing_over
    }

    /// When the run last changed.
    pub(crate) fn updated_at(&self) -> u64 {
        self.live().updated_at
    }

    fn live(&self) -> std::sync::MutexGuard<'_, Live> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends a frame to the stream.
    pub(crate) fn push(
        &self,
        mode: Mode,
        event: &'static str,
        ns: Option<String>,
        mut data: Value,
    ) {
        // What leaves the process never holds its secrets (state, errors,
        // custom events alike).
        harness::secrets::redact_json(&mut data);
        let count = {
            let mut live = self.live();
            let seq = live.frames.len() as u64;
            live.frames.push(Arc::new(Frame {
                seq,
                mode,
                event,
                ns,
                data,
            }));
            live.frames.len() as u64
        };
        self.tick.send_replace(count);
    }

    /// The run has started; `stop` stops it. A cancel that came before is
    /// passed on now.
    pub(crate) fn running(&self, stop: StopHandle) {
        let mut live = self.live();
        if live.cancelled || live.handing_over {
            stop.stop();
        }
        live.status = RunStatus::Running;
        live.updated_at = now_millis();
        live.stop = Some(stop);
    }

    /// The run settled. A run the stopping server stopped ends its stream
    /// with an `error` event that says so (a client that reads to the end
    /// otherwise could not tell it from a run that finished).
    pub(crate) fn finish(&self, status: RunStatus, mut result: RunResult) {
        harness::secrets::redact_json(&mut result.values);
        if let Some((_, message)) = &mut result.error {
            harness::secrets::redact_string(message);
        }
        let stopped_by_server = self.live().server_stopping;
        if status == RunStatus::Interrupted && result.interrupts.is_empty() && stopped_by_server {
            self.push(
                Mode::Always,
                "error",
                None,
                json!({"error": "ServerStopping", "message": SERVER_STOPPING}),
            );
        }
        {
            let mut live = self.live();
            live.status = status;
            live.updated_at = now_millis();
            live.result = Some(result);
            live.stop = None;
        }
        self.tick.send_modify(|_| {});
    }

    /// [`cancel`](Self::cancel), because this server is stopping.
    pub(crate) fn cancel_for_shutdown(&self) -> bool {
        self.live().server_stopping = true;
        self.cancel()
    }

    /// Asks the run to stop at its next step boundary; `false` if it has
    /// already settled.
    pub(crate) fn cancel(&self) -> bool {
        {
            let mut live = self.live();
            if live.status.is_done() {
                return false;
            }
            live.cancelled = true;
            if let Some(stop) = &live.stop {
                stop.stop();
            }
        }
        // Wakes a run that waits for its time (`after_seconds`).
        self.tick.send_modify(|_| {});
        true
    }

    /// Waits `delay`; `false` as soon as the run is cancelled.
    pub(crate) async fn wait_unless_cancelled(&self, delay: std::time::Duration) -> bool {
        let mut ticks = self.ticks();
        let sleep = tokio::time::sleep(delay);
        tokio::pin!(sleep);
        loop {
            if self.was_cancelled() {
                return false;
            }
            tokio::select! {
                () = &mut sleep => return !self.was_cancelled(),
                changed = ticks.changed() => if changed.is_err() {
                    (&mut sleep).await;
                    return !self.was_cancelled();
                },
            }
        }
    }

    /// Waits until `other` settles; `false` as soon as this run is
    /// cancelled (a run queued behind `other` settles at its cancel, not
    /// once the runs before it have).
    pub(crate) async fn wait_for_unless_cancelled(&self, other: &RunRecord) -> bool {
        let mut mine = self.ticks();
        let mut theirs = other.ticks();
        loop {
            if self.was_cancelled() {
                return false;
            }
            if other.result().is_some() {
                return true;
            }
            tokio::select! {
                changed = mine.changed() => if changed.is_err() {
                    other.settled().await;
                    return !self.was_cancelled();
                },
                changed = theirs.changed() => if changed.is_err() {
                    return !self.was_cancelled();
                },
            }
        }
    }

    /// Fails the run before it started: an `error` frame and the status.
    pub(crate) fn fail(&self, kind: &str, message: String) {
        self.push(
            Mode::Always,
            "error",
            None,
            json!({"error": kind, "message": message}),
        );
        self.finish(
            RunStatus::Error,
            RunResult {
                values: Value::Null,
                interrupts: Vec::new(),
                error: Some((kind.to_string(), message)),
            },
        );
    }

    /// Settles a run cancelled before it started.
    pub(crate) fn cancelled_before_start(&self) {
        self.finish(RunStatus::Interrupted, RunResult::default());
    }

    pub(crate) fn was_cancelled(&self) -> bool {
        self.live().cancelled
    }

    /// Records where the thread stood when the run started.
    pub(crate) fn set_start_point(&self, point: Option<(String, u64)>) {
        self.live().start_point = Some(point);
    }

    /// Where the thread stood when the run started; `None` if it never
    /// started.
    pub(crate) fn start_point(&self) -> Option<Option<(String, u64)>> {
        self.live().start_point.clone()
    }

    pub(crate) fn status(&self) -> RunStatus {
        self.live().status
    }

    pub(crate) fn result(&self) -> Option<RunResult> {
        self.live().result.clone()
    }

    /// The frames after `after` (all when `None`), and whether the run has
    /// settled (no frame will follow).
    pub(crate) fn frames_after(&self, after: Option<u64>) -> (Vec<Arc<Frame>>, bool) {
        let live = self.live();
        let from = after.map_or(0, |a| {
            usize::try_from(a.saturating_add(1)).unwrap_or(usize::MAX)
        });
        let frames = live
            .frames
            .get(from..)
            .map(<[_]>::to_vec)
            .unwrap_or_default();
        (frames, live.status.is_done())
    }

    /// How many frames the stream has.
    pub(crate) fn frame_count(&self) -> u64 {
        self.live().frames.len() as u64
    }

    /// A receiver that changes at every new frame and at the end.
    pub(crate) fn ticks(&self) -> watch::Receiver<u64> {
        self.tick.subscribe()
    }

    /// Waits until the run settles; its result.
    pub(crate) async fn settled(&self) -> RunResult {
        let mut ticks = self.ticks();
        loop {
            if let Some(result) = self.result() {
                return result;
            }
            if ticks.changed().await.is_err() {
                return self.result().unwrap_or_default();
            }
        }
    }

    /// The run as the API shows it.
    pub(crate) fn to_json(&self) -> Value {
        let (status, updated_at) = {
            let live = self.live();
            (live.status, live.updated_at)
        };
        json!({
            "run_id": self.run_id,
            "thread_id": self.thread_id,
            "assistant_id": self.assistant_id,
            "created_at": iso(self.created_at),
            "updated_at": iso(updated_at),
            "status": status.as_str(),
            "metadata": self.metadata,
            "multitask_strategy": self.multitask_strategy,
            "kwargs": self.kwargs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{Frame, Mode};
    use crate::app::too_deep;
    use harness::session::MAX_VALUE_DEPTH;
    use serde_json::{Value, json};

    fn nested(levels: usize) -> Value {
        (1..levels).fold(json!({}), |inner, _| json!({ "a": inner }))
    }

    #[test]
    fn frames_of_any_storable_depth_are_stored_and_read_back_as_they_were() {
        for levels in [
            0,
            1,
            50,
            MAX_VALUE_DEPTH - 2,
            MAX_VALUE_DEPTH - 1,
            MAX_VALUE_DEPTH,
            110,
        ] {
            let data = if levels == 0 {
                json!(7)
            } else {
                nested(levels)
            };
            let frame = Frame {
                seq: 3,
                mode: Mode::Values,
                event: "values",
                ns: Some("task:1".into()),
                data: data.clone(),
            };
            let batch = Value::Array(vec![frame.to_stored()]);
            assert!(
                too_deep(&batch, MAX_VALUE_DEPTH).is_none(),
                "a batch holding data of {levels} levels is too deep to store"
            );
            let back = Frame::from_stored(&batch[0]).unwrap();
            assert_eq!(back.data, data, "{levels} levels");
            assert_eq!(
                (back.seq, back.event, back.ns),
                (3, "values", Some("task:1".into()))
            );
        }
        // Neither form reads with anything else in its place.
        for bad in [
            json!([1, "values", "values", null, null, "{not json"]),
            json!([1, "values", "values", null, {}, "{}"]),
            json!([1, "values", "values", null]),
            json!([1, "values", "values", null, 1, "1", 2]),
        ] {
            assert!(Frame::from_stored(&bad).is_none(), "{bad}");
        }
    }
}
