//! A session's log replayed through the agent's reducers, one record at a
//! time, holding only the states it needs: the run's, and those of the
//! branches whose records are asked about (with the branches they are
//! in). Nothing is kept per record.
//!
//! What a record changed is read from the fields its updates write
//! ([`HarnessState::written`]): the items an `append` field gets are the
//! updates' own, each other field written is serialized before and after,
//! and the rest of the state is not looked at. So asking what a page of
//! records changed costs one pass of the reducers over the log plus the
//! size of those records, not the whole state at each of them (which
//! grows at every step of a long session). A state that does not say its
//! fields, or that serde renames, is serialized whole at the records asked
//! about.

use crate::diff::{self, Bound, Changes};
use crate::error::ApiError;
use crate::pick;
use harness::session::{Checkpoint, CheckpointKind};
use harness::state::ReducerKind;
use harness::{HarnessState, SessionId, TaskPath};
use serde_json::Value;
use std::collections::BTreeMap;

/// What a record changed.
#[derive(Debug)]
pub(crate) struct Changed {
    /// Whose state: `run`, or `branch` (the branch's own state: for a
    /// branch's step, or a join inside a branch).
    pub(crate) of: &'static str,
    pub(crate) changes: Changes,
}

/// The states after a record.
#[derive(Debug)]
pub(crate) struct StatesAt {
    /// The run's state (null before its first snapshot).
    pub(crate) run: Value,
    /// After a branch's step, or a join inside a branch: that branch's
    /// own state.
    pub(crate) task: Option<Value>,
}

/// What the records of `log` at the indexes `asked` (ascending) changed,
/// one for each, within `bound`. The replay stops at the last one asked.
pub(crate) fn changes<S: HarnessState>(
    session: &SessionId,
    log: &[Checkpoint],
    asked: &[usize],
    bound: Bound,
) -> Result<Vec<Changed>, ApiError> {
    let tracked = asked
        .iter()
        .filter_map(|&i| log.get(i).and_then(|cp| own_task(&cp.kind)))
        .collect();
    let mut replay = Replay::<S>::new(session, tracked);
    let mut out = Vec::with_capacity(asked.len());
    let mut next = asked.iter().copied().peekable();
    for (i, cp) in log.iter().enumerate() {
        let Some(&wanted) = next.peek() else { break };
        let ask = (wanted == i).then_some(bound);
        let changed = replay.record(cp, ask)?;
        if ask.is_some() {
            next.next();
            out.push(changed.unwrap_or(Changed {
                of: "run",
                changes: Changes::default(),
            }));
        }
    }
    Ok(out)
}

/// The states after the record of `log` at index `at`; the replay stops
/// there.
pub(crate) fn states_at<S: HarnessState>(
    session: &SessionId,
    log: &[Checkpoint],
    at: usize,
) -> Result<StatesAt, ApiError> {
    let task = log.get(at).and_then(|cp| own_task(&cp.kind));
    let mut replay = Replay::<S>::new(session, task.iter().cloned().collect());
    for cp in log.iter().take(at + 1) {
        replay.record(cp, None)?;
    }
    let seq = log.get(at).map_or(0, |cp| cp.seq);
    let json = |s: &S| {
        serde_json::to_value(s).map_err(|e| unreadable(session, seq, "state", e.to_string()))
    };
    let run = match &replay.run {
        Some(s) => json(s)?,
        None => Value::Null,
    };
    let task = match task.and_then(|path| replay.branches.get(&path)) {
        Some(Some(s)) => Some(json(s)?),
        _ => None,
    };
    Ok(StatesAt { run, task })
}

/// The branch whose own state a record changes: a branch's step, or a
/// join inside a branch.
fn own_task(kind: &CheckpointKind) -> Option<TaskPath> {
    match kind {
        CheckpointKind::Branch(b) => Some(b.path.clone()),
        CheckpointKind::Join(j) if !j.path.is_root() => Some(j.path.clone()),
        _ => None,
    }
}

fn unreadable(session: &SessionId, seq: u64, what: &'static str, error: String) -> ApiError {
    ApiError::Unreadable {
        session: session.clone(),
        seq,
        what,
        error,
    }
}

struct Replay<'a, S: HarnessState> {
    session: &'a SessionId,
    /// The run's state, once a snapshot was read.
    run: Option<S>,
    /// Each branch under way, with its state when it is tracked.
    branches: BTreeMap<TaskPath, Option<S>>,
    /// The updates of branches under way, by branch: the task that forked
    /// gets them at the join, in the join's order.
    pending: BTreeMap<TaskPath, Vec<&'a Value>>,
    /// The branches asked about: a branch's state is kept when it is one of
    /// them or holds one.
    tracked: Vec<TaskPath>,
}

impl<'a, S: HarnessState> Replay<'a, S> {
    fn new(session: &'a SessionId, tracked: Vec<TaskPath>) -> Self {
        Replay {
            session,
            run: None,
            branches: BTreeMap::new(),
            pending: BTreeMap::new(),
            tracked,
        }
    }

    fn tracks(&self, branch: &TaskPath) -> bool {
        self.tracked.iter().any(|t| t.starts_with(branch))
    }

    /// The state of task `path`: `Err` when no such task is under way,
    /// `Ok(None)` for a branch that is not tracked.
    fn state_mut(&mut self, path: &TaskPath) -> Result<Option<&mut S>, ()> {
        if path.is_root() {
            return self.run.as_mut().map(Some).ok_or(());
        }
        self.branches.get_mut(path).map(Option::as_mut).ok_or(())
    }

    /// Applies `cp`; with `ask`, returns what it changed.
    fn record(
        &mut self,
        cp: &'a Checkpoint,
        ask: Option<Bound>,
    ) -> Result<Option<Changed>, ApiError> {
        let session = self.session;
        let seq = cp.seq;
        // Read from the log's JSON in place: a record is not copied.
        let read = |v: &Value| {
            <S::Update as serde::Deserialize>::deserialize(v)
                .map_err(|e| unreadable(session, seq, "update", e.to_string()))
        };
        let no_snapshot =
            || unreadable(session, seq, "update", "no snapshot comes before it".into());
        let unchanged = |of| {
            ask.map(|_| Changed {
                of,
                changes: Changes::default(),
            })
        };
        match &cp.kind {
            CheckpointKind::Snapshot(v) => {
                let s = <S as serde::Deserialize>::deserialize(v)
                    .map_err(|e| unreadable(session, seq, "state", e.to_string()))?;
                let changed = match (ask, &self.run) {
                    (Some(bound), Some(before)) => {
                        let json = |s: &S| {
                            serde_json::to_value(s)
                                .map_err(|e| unreadable(session, seq, "state", e.to_string()))
                        };
                        Some(Changed {
                            of: "run",
                            changes: diff::diff(&json(before)?, &json(&s)?, bound),
                        })
                    }
                    // The state at the start.
                    _ => unchanged("run"),
                };
                self.run = Some(s);
                Ok(changed)
            }
            CheckpointKind::Update(v) => {
                let update = read(v)?;
                let run = self.run.as_mut().ok_or_else(no_snapshot)?;
                let changes = apply(run, vec![update], ask, session, seq)?;
                Ok(changes.map(|changes| Changed { of: "run", changes }))
            }
            CheckpointKind::Fork(f) => {
                let any = f.branches.iter().any(|b| self.tracks(&b.path));
                let from = self.state_mut(&f.path).map_err(|()| no_snapshot())?;
                // Copied only for the branches asked about.
                let from = if any { from.map(|s| s.clone()) } else { None };
                for b in &f.branches {
                    let state = if self.tracks(&b.path) {
                        from.clone()
                    } else {
                        None
                    };
                    self.branches.insert(b.path.clone(), state);
                    self.pending.insert(b.path.clone(), Vec::new());
                }
                Ok(unchanged("run"))
            }
            CheckpointKind::Branch(b) => {
                let update = read(&b.update)?;
                let state = self.state_mut(&b.path).map_err(|()| {
                    unreadable(
                        session,
                        seq,
                        "branch",
                        format!("no fork started branch `{}`", b.path),
                    )
                })?;
                let changed = match state {
                    Some(state) => {
                        apply(state, vec![update], ask, session, seq)?.map(|changes| Changed {
                            of: "branch",
                            changes,
                        })
                    }
                    None => unchanged("branch"),
                };
                self.pending
                    .entry(b.path.clone())
                    .or_default()
                    .push(&b.update);
                Ok(changed)
            }
            CheckpointKind::Join(j) => {
                let mut merged = Vec::new();
                for path in &j.branches {
                    // A nested fork's branches were merged into their
                    // parent branch at its own join.
                    merged.extend(self.pending.remove(path).unwrap_or_default());
                    self.branches.retain(|p, _| !p.starts_with(path));
                    self.pending.retain(|p, _| !p.starts_with(path));
                }
                let of = if j.path.is_root() { "run" } else { "branch" };
                let state = self.state_mut(&j.path).map_err(|()| {
                    unreadable(
                        session,
                        seq,
                        "join",
                        format!("no state of task `{}`", j.path),
                    )
                })?;
                let changed = match state {
                    Some(state) => {
                        let updates = merged
                            .iter()
                            .map(|v| read(v))
                            .collect::<Result<Vec<_>, _>>()?;
                        apply(state, updates, ask, session, seq)?
                            .map(|changes| Changed { of, changes })
                    }
                    None => unchanged(of),
                };
                if !j.path.is_root() {
                    self.pending
                        .entry(j.path.clone())
                        .or_default()
                        .extend(merged);
                }
                Ok(changed)
            }
            // A sub-agent's records are in its own state type: they do
            // not change this run's state.
            CheckpointKind::Child(_) => Ok(unchanged("run")),
        }
    }
}

/// Applies `updates` to `state` through the reducers; with `bound`,
/// returns what they changed (see the module's docs for what that costs).
fn apply<S: HarnessState>(
    state: &mut S,
    updates: Vec<S::Update>,
    bound: Option<Bound>,
    session: &SessionId,
    seq: u64,
) -> Result<Option<Changes>, ApiError> {
    let Some(bound) = bound else {
        for u in updates {
            state.apply(u);
        }
        return Ok(None);
    };
    let failed = |e: serde_json::Error| unreadable(session, seq, "state", e.to_string());
    if let Some(fields) = S::fields() {
        let known: Vec<&str> = fields.iter().map(|f| f.name).collect();
        let mut written: Vec<&'static str> = Vec::new();
        for u in &updates {
            for name in S::written(u) {
                if !written.contains(&name) {
                    written.push(name);
                }
            }
        }
        // The items each `append` field gets are the updates' own; a field
        // whose update is not an array (text appended to a string) is
        // diffed like the others.
        let mut items: BTreeMap<&str, Vec<Value>> = written
            .iter()
            .filter(|name| {
                fields
                    .iter()
                    .any(|f| f.name == **name && f.reducer == ReducerKind::Append)
            })
            .map(|name| (*name, Vec::new()))
            .collect();
        if !items.is_empty() {
            let mut not_arrays = Vec::new();
            for u in &updates {
                let u = serde_json::to_value(u).map_err(failed)?;
                for (name, list) in &mut items {
                    match u.get(*name) {
                        Some(Value::Array(a)) => list.extend(a.iter().cloned()),
                        Some(Value::Null) | None => {}
                        Some(_) => not_arrays.push(*name),
                    }
                }
            }
            for name in not_arrays {
                items.remove(name);
            }
        }
        let marked: Vec<&str> = items.keys().copied().collect();
        let others: Vec<&str> = written
            .iter()
            .copied()
            .filter(|name| !items.contains_key(name))
            .collect();
        if let Some(mut before) = pick::fields(&*state, &known, &others, &marked) {
            for u in updates {
                state.apply(u);
            }
            // The same type picked again: only a serializer that fails
            // after an update could refuse it, and then nothing is shown.
            let Some(mut after) = pick::fields(&*state, &known, &others, &marked) else {
                return Ok(Some(Changes::default()));
            };
            for (name, list) in items {
                if let Some(v) = before.get_mut(name) {
                    *v = Value::Array(Vec::new());
                }
                if let Some(v) = after.get_mut(name) {
                    *v = Value::Array(list);
                }
            }
            return Ok(Some(diff::diff(
                &Value::Object(before),
                &Value::Object(after),
                bound,
            )));
        }
    }
    let before = serde_json::to_value(&*state).map_err(failed)?;
    for u in updates {
        state.apply(u);
    }
    let after = serde_json::to_value(&*state).map_err(failed)?;
    Ok(Some(diff::diff(&before, &after, bound)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use harness::session::{BranchRecord, BranchStart, ForkRecord, JoinRecord};
    use serde_json::json;
    use std::sync::atomic::{AtomicUsize, Ordering};

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

    const WIDE: Bound = Bound {
        value_bytes: usize::MAX,
        changes: usize::MAX,
    };

    fn s() -> SessionId {
        SessionId::from("s")
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
        let at = |i: usize| states_at::<Tally>(&s(), &log, i).expect("merges");
        // The run's state changes only at its join, in branch order, with
        // the nested branches in theirs.
        assert_eq!(at(8).run["log"], json!([]));
        assert_eq!(at(9).run["log"], json!(["a1", "x", "y", "a2", "b"]));
        assert!(at(9).task.is_none());
        // A branch's record changes the branch's own state; the nested
        // join changes branch `a`'s.
        let own = |i: usize| at(i).task.expect("a branch's record");
        assert_eq!(own(4), json!({ "log": ["a1", "y"] }));
        assert_eq!(own(6), json!({ "log": ["a1", "x", "y"] }));
        assert_eq!(own(8), json!({ "log": ["a1", "x", "y", "a2"] }));
        // What each record changed, asked all at once or one by one.
        let every: Vec<usize> = (0..log.len()).collect();
        let all = changes::<Tally>(&s(), &log, &every, WIDE).expect("merges");
        let said = |c: &Changed| {
            let list: Vec<_> = c
                .changes
                .list
                .iter()
                .map(|c| (c.path.clone(), c.op, c.after.clone()))
                .collect();
            (c.of, list)
        };
        let appended = |of, items: Value| (of, vec![("/log".to_owned(), "appended", Some(items))]);
        assert_eq!(said(&all[0]), ("run", vec![]));
        assert_eq!(said(&all[1]), ("run", vec![]));
        assert_eq!(said(&all[4]), appended("branch", json!(["y"])));
        assert_eq!(said(&all[6]), appended("branch", json!(["x", "y"])));
        assert_eq!(said(&all[8]), appended("branch", json!(["a2"])));
        assert_eq!(
            said(&all[9]),
            appended("run", json!(["a1", "x", "y", "a2", "b"]))
        );
        for i in every {
            let one = changes::<Tally>(&s(), &log, &[i], WIDE).expect("merges");
            assert_eq!(said(&one[0]), said(&all[i]), "record {i}");
        }
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
            let every: Vec<usize> = (0..log.len()).collect();
            let last = log.len() - 1;
            for e in [
                changes::<Tally>(&s(), &log, &every, WIDE).expect_err(says),
                states_at::<Tally>(&s(), &log, last).expect_err(says),
            ] {
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

    static SERIALIZED: AtomicUsize = AtomicUsize::new(0);

    /// An item that counts how often it is serialized.
    #[derive(Clone, Debug, serde::Deserialize, harness::JsonSchema)]
    struct Item(u64);

    impl serde::Serialize for Item {
        fn serialize<Se: serde::Serializer>(&self, s: Se) -> Result<Se::Ok, Se::Error> {
            SERIALIZED.fetch_add(1, Ordering::SeqCst);
            s.serialize_u64(self.0)
        }
    }

    #[derive(
        Clone, Debug, serde::Serialize, serde::Deserialize, harness::JsonSchema, HarnessState,
    )]
    struct Growing {
        #[field(reduce = append)]
        items: Vec<Item>,
        #[field(reduce = add)]
        steps: u64,
    }

    #[test]
    fn a_page_of_a_long_log_costs_its_records_not_the_state_at_each_of_them() {
        let n: u64 = 2000;
        let log: Vec<Checkpoint> = std::iter::once(cp(
            0,
            "$start",
            CheckpointKind::Snapshot(json!({ "items": [], "steps": 0 })),
        ))
        .chain((1..n).map(|i| {
            cp(
                i,
                "grow",
                CheckpointKind::Update(json!({ "items": [i], "steps": 1 })),
            )
        }))
        .collect();
        let count = || SERIALIZED.load(Ordering::SeqCst);

        // The last hundred records: each one's item, not the state's.
        let page: Vec<usize> = (1900..2000).collect();
        let before = count();
        let c = changes::<Growing>(&s(), &log, &page, WIDE).expect("merges");
        let spent = count() - before;
        assert!(spent <= 2 * page.len(), "{spent} items serialized");
        assert_eq!(c.len(), 100);
        let last = &c[99].changes.list;
        assert_eq!(
            serde_json::to_value(last).unwrap(),
            json!([
                {"path": "/items", "op": "appended", "after": [1999]},
                {"path": "/steps", "op": "changed", "before": 1998, "after": 1999},
            ])
        );

        // The state at a checkpoint: the state there, once.
        let before = count();
        let at = states_at::<Growing>(&s(), &log, 1000).expect("merges");
        assert_eq!(count() - before, 1000);
        assert_eq!(at.run["steps"], 1000);
        assert_eq!(at.run["items"].as_array().unwrap().len(), 1000);
        assert_eq!(at.run["items"][999], 1000);
    }

    #[derive(
        Clone, Debug, serde::Serialize, serde::Deserialize, harness::JsonSchema, HarnessState,
    )]
    #[serde(rename_all = "camelCase")]
    struct Renamed {
        #[field(reduce = append)]
        my_log: Vec<String>,
        my_name: Option<String>,
    }

    #[test]
    fn a_state_serde_renames_is_diffed_whole_and_named_as_serialized() {
        let log = [
            cp(
                0,
                "$start",
                CheckpointKind::Snapshot(json!({ "myLog": [], "myName": null })),
            ),
            cp(
                1,
                "p",
                CheckpointKind::Update(json!({ "my_log": ["a"], "my_name": "n" })),
            ),
        ];
        let c = changes::<Renamed>(&s(), &log, &[1], WIDE).expect("merges");
        assert_eq!(
            serde_json::to_value(&c[0].changes.list).unwrap(),
            json!([
                {"path": "/myLog", "op": "appended", "after": ["a"]},
                {"path": "/myName", "op": "changed", "before": null, "after": "n"},
            ])
        );
    }
}
