//! Where the studio's sessions come from: any store, read-only, or an
//! application's typed agent, which can also answer and fork.

use crate::error::ApiError;
use crate::graph::Graph;
use futures::future::BoxFuture;
use harness::session::{Checkpoint, CheckpointKind, SessionStore};
use harness::{Agent, Context, HarnessState, InterruptId, SessionId, TaskPath};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The states after one record.
#[derive(Clone, Debug)]
pub(crate) struct Merged {
    /// The run's state (the root task's).
    pub(crate) run: Value,
    /// For a record of a branch (its step, or a join of a fork inside
    /// it): the branch's own state before and after it.
    pub(crate) task: Option<(Value, Value)>,
}

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
    ) -> Option<Result<Vec<Merged>, ApiError>>;

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

    fn merge(&self, _: &SessionId, _: &[Checkpoint]) -> Option<Result<Vec<Merged>, ApiError>> {
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
    ) -> Option<Result<Vec<Merged>, ApiError>> {
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
/// update read as `S::Update` and merged through the reducers. A branch's
/// updates change its own state (its task's state at the fork, plus them),
/// and the state of the task that forked at the join, in the join's order.
fn merge<S: HarnessState>(
    session: &SessionId,
    log: &[Checkpoint],
) -> Result<Vec<Merged>, ApiError> {
    let unreadable = |seq, what, error: String| ApiError::Unreadable {
        session: session.clone(),
        seq,
        what,
        error,
    };
    let root = TaskPath::root();
    // The state of each task: the run's (the root), each branch's.
    let mut states: BTreeMap<TaskPath, S> = BTreeMap::new();
    let mut out = Vec::with_capacity(log.len());
    // Updates of branches under way, by branch: the task that forked gets
    // them at the join, in the join's order.
    let mut pending: BTreeMap<TaskPath, Vec<Value>> = BTreeMap::new();
    for cp in log {
        let read = |v: &Value| {
            serde_json::from_value::<S::Update>(v.clone())
                .map_err(|e| unreadable(cp.seq, "update", e.to_string()))
        };
        let no_snapshot = || unreadable(cp.seq, "update", "no snapshot comes before it".into());
        let json =
            |s: &S| serde_json::to_value(s).map_err(|e| unreadable(cp.seq, "state", e.to_string()));
        let mut task = None;
        match &cp.kind {
            CheckpointKind::Snapshot(v) => {
                let s: S = serde_json::from_value(v.clone())
                    .map_err(|e| unreadable(cp.seq, "state", e.to_string()))?;
                states.insert(root.clone(), s);
            }
            CheckpointKind::Update(v) => {
                let update = read(v)?;
                states.get_mut(&root).ok_or_else(no_snapshot)?.apply(update);
            }
            CheckpointKind::Fork(f) => {
                let from = states.get(&f.path).ok_or_else(no_snapshot)?.clone();
                for b in &f.branches {
                    states.insert(b.path.clone(), from.clone());
                    pending.insert(b.path.clone(), Vec::new());
                }
            }
            CheckpointKind::Branch(b) => {
                let update = read(&b.update)?;
                let state = states.get_mut(&b.path).ok_or_else(|| {
                    unreadable(
                        cp.seq,
                        "branch",
                        format!("no fork started branch `{}`", b.path),
                    )
                })?;
                let before = json(state)?;
                state.apply(update);
                task = Some((before, json(state)?));
                pending
                    .entry(b.path.clone())
                    .or_default()
                    .push(b.update.clone());
            }
            CheckpointKind::Join(j) => {
                let mut merged = Vec::new();
                for path in &j.branches {
                    // A nested fork's branches were merged into their
                    // parent branch at its own join.
                    merged.extend(pending.remove(path).unwrap_or_default());
                    states.retain(|p, _| !p.starts_with(path));
                    pending.retain(|p, _| !p.starts_with(path));
                }
                let state = states.get_mut(&j.path).ok_or_else(|| {
                    unreadable(cp.seq, "join", format!("no state of task `{}`", j.path))
                })?;
                let before = json(state)?;
                for v in &merged {
                    state.apply(read(v)?);
                }
                if !j.path.is_root() {
                    task = Some((before, json(state)?));
                    pending.entry(j.path.clone()).or_default().extend(merged);
                }
            }
            // A sub-agent's records are in its own state type: they do
            // not change this run's state.
            CheckpointKind::Child(_) => {}
        }
        let run = match states.get(&root) {
            Some(s) => json(s)?,
            None => Value::Null,
        };
        out.push(Merged { run, task });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use harness::session::{BranchRecord, BranchStart, ForkRecord, JoinRecord};
    use serde_json::json;

    #[derive(
        Clone, Debug, serde::Serialize, serde::Deserialize, harness::JsonSchema, HarnessState,
    )]
    struct Tally {
        #[field(reduce = append)]
        log: Vec<String>,
    }

    fn cp(seq: u64, step: &str, kind: CheckpointKind) -> Checkpoint {
        Checkpoint {
            seq,
            index: seq,
            step: step.into(),
            time: 0,
            kind,
        }
    }

    fn fork(path: &str, branches: &[&str]) -> CheckpointKind {
        CheckpointKind::Fork(ForkRecord {
            path: TaskPath::from(path),
            fork: "f".into(),
            join: "j".into(),
            branches: branches
                .iter()
                .map(|b| BranchStart {
                    path: TaskPath::from(*b),
                    step: (*b).into(),
                    input: None,
                })
                .collect(),
        })
    }

    fn branch(path: &str, item: &str) -> CheckpointKind {
        CheckpointKind::Branch(BranchRecord {
            path: TaskPath::from(path),
            update: json!({ "log": [item] }),
            next: None,
            failed: None,
        })
    }

    fn join(path: &str, branches: &[&str]) -> CheckpointKind {
        CheckpointKind::Join(JoinRecord {
            path: TaskPath::from(path),
            branches: branches.iter().map(|b| TaskPath::from(*b)).collect(),
        })
    }

    #[test]
    fn a_nested_fork_merges_into_its_branch_then_the_branch_into_the_run() {
        let log = [
            cp(0, "$start", CheckpointKind::Snapshot(json!({ "log": [] }))),
            cp(1, "f", fork("", &["a", "b"])),
            cp(2, "a", branch("a", "a1")),
            cp(3, "a", fork("a", &["a/x", "a/y"])),
            cp(4, "y", branch("a/y", "y")),
            cp(5, "x", branch("a/x", "x")),
            cp(6, "a", join("a", &["a/x", "a/y"])),
            cp(7, "b", branch("b", "b")),
            cp(8, "a", branch("a", "a2")),
            cp(9, "j", join("", &["a", "b"])),
        ];
        let m = merge::<Tally>(&SessionId::from("s"), &log).expect("merges");
        let run = |i: usize| m[i].run["log"].clone();
        // The run's state changes only at its join, in branch order, with
        // the nested branches in theirs.
        assert_eq!(run(8), json!([]));
        assert_eq!(run(9), json!(["a1", "x", "y", "a2", "b"]));
        assert!(m[9].task.is_none());
        // A branch's record changes the branch's own state; the nested
        // join changes branch `a`'s.
        let own = |i: usize| m[i].task.clone().expect("a branch's record");
        assert_eq!(
            own(4),
            (json!({ "log": ["a1"] }), json!({ "log": ["a1", "y"] }))
        );
        assert_eq!(
            own(6),
            (json!({ "log": ["a1"] }), json!({ "log": ["a1", "x", "y"] }))
        );
        assert_eq!(own(8).1, json!({ "log": ["a1", "x", "y", "a2"] }));
    }

    #[test]
    fn records_that_do_not_fit_their_log_are_refused_naming_the_checkpoint() {
        let start = || cp(0, "$start", CheckpointKind::Snapshot(json!({ "log": [] })));
        for (log, seq, says) in [
            (
                vec![start(), cp(1, "a", branch("a", "a"))],
                1,
                "no fork started branch `a`",
            ),
            (
                vec![start(), cp(1, "j", join("z", &["z/a"]))],
                1,
                "no state of task `z`",
            ),
            (vec![cp(0, "f", fork("", &["a"]))], 0, "no snapshot"),
            (
                vec![cp(0, "p", CheckpointKind::Update(json!({ "log": [] })))],
                0,
                "no snapshot",
            ),
            (
                vec![
                    start(),
                    cp(1, "p", CheckpointKind::Update(json!({ "log": "x" }))),
                ],
                1,
                "update",
            ),
            (
                vec![
                    start(),
                    cp(1, "f", fork("", &["a"])),
                    cp(
                        2,
                        "a",
                        CheckpointKind::Branch(BranchRecord {
                            path: TaskPath::from("a"),
                            update: json!({ "log": 3 }),
                            next: None,
                            failed: None,
                        }),
                    ),
                ],
                2,
                "update",
            ),
            (
                vec![CheckpointKind::Snapshot(json!([1]))]
                    .into_iter()
                    .map(|k| cp(0, "$start", k))
                    .collect(),
                0,
                "state",
            ),
        ] {
            let e = merge::<Tally>(&SessionId::from("s"), &log).expect_err(says);
            let text = e.to_string();
            assert!(
                matches!(e, ApiError::Unreadable { seq: s, .. } if s == seq),
                "{says}: {text}"
            );
            assert!(
                text.contains(says) && text.contains(&format!("checkpoint {seq}")),
                "{text}"
            );
        }
    }
}
