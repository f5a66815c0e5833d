//! Where the studio's sessions come from: any store, read-only, or an
//! application's typed agent, which can also answer and fork.

use crate::error::ApiError;
use crate::graph::Graph;
use futures::future::BoxFuture;
use harness::session::{Checkpoint, CheckpointKind, SessionStore};
use harness::{Agent, Context, HarnessState, InterruptId, SessionId};
use serde_json::Value;
use std::sync::Arc;

/// What the server reads and writes through.
pub(crate) trait Source: Send + Sync + 'static {
    /// The store holding the sessions.
    fn store(&self) -> &dyn SessionStore;

    /// The agent served, when the studio writes through one.
    fn agent_id(&self) -> Option<&str>;

    /// The loop as declared, when the studio has the harness.
    fn graph(&self) -> Option<&Graph>;

    /// The JSON schemas of the state and of an update, when known.
    fn schemas(&self) -> Option<(Value, Value)>;

    /// The state after each record of `log` (which starts at a snapshot),
    /// merged through the reducers; `None` without the state type.
    fn merge(
        &self,
        session: &SessionId,
        log: &[Checkpoint],
    ) -> Option<Result<Vec<Value>, ApiError>>;

    /// Answers the interrupt and returns the continued run, to be driven to
    /// its end.
    fn answer<'a>(
        &'a self,
        session: &'a SessionId,
        interrupt: &'a InterruptId,
        answer: Value,
    ) -> BoxFuture<'a, Result<BoxFuture<'static, ()>, ApiError>>;

    /// Forks the session after `index` steps with `update` merged in.
    fn fork<'a>(
        &'a self,
        session: &'a SessionId,
        index: u64,
        update: Value,
    ) -> BoxFuture<'a, Result<SessionId, ApiError>>;
}

/// Any store, read-only.
pub(crate) struct ReadOnly {
    pub(crate) store: Arc<dyn SessionStore>,
}

impl Source for ReadOnly {
    fn store(&self) -> &dyn SessionStore {
        &*self.store
    }

    fn agent_id(&self) -> Option<&str> {
        None
    }

    fn graph(&self) -> Option<&Graph> {
        None
    }

    fn schemas(&self) -> Option<(Value, Value)> {
        None
    }

    fn merge(&self, _: &SessionId, _: &[Checkpoint]) -> Option<Result<Vec<Value>, ApiError>> {
        None
    }

    fn answer<'a>(
        &'a self,
        _: &'a SessionId,
        _: &'a InterruptId,
        _: Value,
    ) -> BoxFuture<'a, Result<BoxFuture<'static, ()>, ApiError>> {
        Box::pin(async { Err(ApiError::ReadOnly) })
    }

    fn fork<'a>(
        &'a self,
        _: &'a SessionId,
        _: u64,
        _: Value,
    ) -> BoxFuture<'a, Result<SessionId, ApiError>> {
        Box::pin(async { Err(ApiError::ReadOnly) })
    }
}

/// Makes the run slots of each resumed run.
pub(crate) type Slots<C> = Arc<dyn Fn() -> <C as Context>::Run + Send + Sync>;

/// An application's agent, with its state type.
pub(crate) struct Typed<S: HarnessState, C: Context> {
    pub(crate) agent: Agent<S, C>,
    pub(crate) store: Arc<dyn SessionStore>,
    pub(crate) graph: Graph,
    pub(crate) slots: Slots<C>,
}

impl<S: HarnessState, C: Context> Source for Typed<S, C> {
    fn store(&self) -> &dyn SessionStore {
        &*self.store
    }

    fn agent_id(&self) -> Option<&str> {
        Some(self.agent.id())
    }

    fn graph(&self) -> Option<&Graph> {
        Some(&self.graph)
    }

    fn schemas(&self) -> Option<(Value, Value)> {
        Some((S::state_schema().to_value(), S::update_schema().to_value()))
    }

    fn merge(
        &self,
        session: &SessionId,
        log: &[Checkpoint],
    ) -> Option<Result<Vec<Value>, ApiError>> {
        Some(merge::<S>(session, log))
    }

    fn answer<'a>(
        &'a self,
        session: &'a SessionId,
        interrupt: &'a InterruptId,
        answer: Value,
    ) -> BoxFuture<'a, Result<BoxFuture<'static, ()>, ApiError>> {
        Box::pin(async move {
            let run = self
                .agent
                .with((self.slots)())
                .resume(answer, session, interrupt)
                .await?;
            // The run records how it ends (done, failed, asking again) in
            // the session, which is what the page shows.
            let drive: BoxFuture<'static, ()> = Box::pin(async move {
                let _ = run.await;
            });
            Ok(drive)
        })
    }

    fn fork<'a>(
        &'a self,
        session: &'a SessionId,
        index: u64,
        update: Value,
    ) -> BoxFuture<'a, Result<SessionId, ApiError>> {
        Box::pin(async move {
            let update = if update.is_null() {
                None
            } else {
                Some(
                    serde_json::from_value::<S::Update>(update)
                        .map_err(|e| ApiError::BadUpdate(e.to_string()))?,
                )
            };
            Ok(self.agent.fork(session, index, update).await?)
        })
    }
}

/// The state after each record of `log`: the snapshot read as `S`, each
/// update read as `S::Update` and merged through the reducers.
fn merge<S: HarnessState>(session: &SessionId, log: &[Checkpoint]) -> Result<Vec<Value>, ApiError> {
    let unreadable = |seq, what, error: String| ApiError::Unreadable {
        session: session.clone(),
        seq,
        what,
        error,
    };
    let mut state: Option<S> = None;
    let mut out = Vec::with_capacity(log.len());
    // Updates of branches under way, by branch: the run's state gets them
    // at the join, in the join's order.
    let mut pending: std::collections::BTreeMap<harness::TaskPath, Vec<S::Update>> =
        std::collections::BTreeMap::new();
    for cp in log {
        match &cp.kind {
            CheckpointKind::Branch(b) => {
                let update: S::Update = serde_json::from_value(b.update.clone())
                    .map_err(|e| unreadable(cp.seq, "update", e.to_string()))?;
                pending.entry(b.path.clone()).or_default().push(update);
            }
            CheckpointKind::Join(j) => {
                let mut merged = Vec::new();
                for path in &j.branches {
                    // A nested fork's branches were merged into their parent
                    // branch at its own join.
                    let inner: Vec<harness::TaskPath> = pending
                        .keys()
                        .filter(|p| p.starts_with(path))
                        .cloned()
                        .collect();
                    for p in inner {
                        merged.extend(pending.remove(&p).unwrap_or_default());
                    }
                }
                if j.path.is_root() {
                    let target = state.as_mut().ok_or_else(|| {
                        unreadable(cp.seq, "join", "no snapshot comes before it".into())
                    })?;
                    for u in merged {
                        target.apply(u);
                    }
                } else {
                    pending.entry(j.path.clone()).or_default().extend(merged);
                }
            }
            // A fork starts branches, and a sub-agent's records are its
            // own: neither changes the run's state.
            CheckpointKind::Fork(_) | CheckpointKind::Child(_) => {}
            CheckpointKind::Snapshot(v) => {
                state = Some(
                    serde_json::from_value(v.clone())
                        .map_err(|e| unreadable(cp.seq, "state", e.to_string()))?,
                );
            }
            CheckpointKind::Update(v) => {
                let update: S::Update = serde_json::from_value(v.clone())
                    .map_err(|e| unreadable(cp.seq, "update", e.to_string()))?;
                state
                    .as_mut()
                    .ok_or_else(|| {
                        unreadable(cp.seq, "update", "no snapshot comes before it".into())
                    })?
                    .apply(update);
            }
        }
        let value =
            serde_json::to_value(&state).map_err(|e| unreadable(cp.seq, "state", e.to_string()))?;
        out.push(value);
    }
    Ok(out)
}
