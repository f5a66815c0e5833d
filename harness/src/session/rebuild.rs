//! Reading a session's log, checked against its head, and rebuilding its
//! state from it: the nearest snapshot, then the updates after it through
//! the reducers.
//!
//! Every read of the log goes through [`read_log`], which refuses a log that
//! does not add up to what the head says with a [`StoreLoad`] naming the
//! break ([`LogGap`]): a missing record is never skipped, so no state is
//! rebuilt without it, and no run goes on to commit over the loss.

use super::{
    Checkpoint, CheckpointKind, ForkRecord, SessionStore, StoreError, StoreLoad, StoredRun,
};
use crate::error::{GapKind, LogGap};
use crate::ids::TaskPath;
use crate::state::HarnessState;
use serde_json::Value;
use std::collections::BTreeMap;

/// Which part of a session's log [`read_log`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Span {
    /// From the first snapshot: the whole history.
    Whole,
    /// From the latest snapshot, which the head names.
    Latest,
}

/// The checkpoints of `head`'s session in `span`, up to the head's last
/// one, checked to be complete:
///
/// - the first is the snapshot the read starts at: seq 0 at index 0 for
///   the whole log (or, for a value saved with
///   [`save_value`](super::save_value), whose earlier snapshots are all
///   superseded, the head's snapshot), the head's `snapshot_seq` at its
///   `snapshot_index` for the latest;
/// - seqs increase; each update is the next step (its index one more than
///   the record before), each later snapshot restates the step before it;
/// - the only seqs that may be absent are snapshots the whole log does
///   not need: single seqs between two updates, up to the head's latest
///   snapshot (which a read from the latest starts at, so must be there);
/// - the last is the head's `last_seq`, at the head's `steps`.
///
/// Records past the head's `last_seq` (a commit made after the head was
/// read) are left out.
///
/// A log that does not add up is refused with [`StoreError::Load`], whose
/// [`StoreLoad`]'s `gap` names the break ([`LogGap`]: the seq expected,
/// and the one found or that the log ends there). Nothing is written: this is how a tool that only reads a store
/// (the CLI's `sessions history`, the studio) tells a damaged session from
/// a short one, as a run would.
///
/// ```
/// # async fn f(store: &dyn harness::session::SessionStore, head: &harness::session::StoredRun)
/// # -> Result<(), harness::session::StoreError> {
/// use harness::session::{Span, StoreError, read_log};
///
/// match read_log(store, head, Span::Whole).await {
///     Ok(log) => println!("{} checkpoints", log.len()),
///     Err(StoreError::Load(load)) if load.gap.is_some() => println!("damaged: {load}"),
///     Err(e) => return Err(e),
/// }
/// # Ok(()) }
/// ```
pub async fn read_log(
    store: &dyn SessionStore,
    head: &StoredRun,
    span: Span,
) -> Result<Vec<Checkpoint>, StoreError> {
    let (from, index) = start_of(head, span);
    let log = store.checkpoints(&head.session_id, from).await?;
    Ok(check_log(head, span, from, index, log)?)
}

/// The seq and step index a read of `span` starts at.
fn start_of(head: &StoredRun, span: Span) -> (u64, u64) {
    match span {
        Span::Latest => (head.snapshot_seq, head.snapshot_index),
        // A saved value replaces its one snapshot: seq 0 is gone and the
        // head's snapshot, at index 0, is the start.
        Span::Whole if head.snapshot_index == 0 => (head.snapshot_seq, 0),
        Span::Whole => (0, 0),
    }
}

/// Whether a record is a completed step (its index one more than the
/// record before).
pub(crate) fn counts_as_step(kind: &CheckpointKind) -> bool {
    match kind {
        CheckpointKind::Update(_) | CheckpointKind::Branch(_) => true,
        CheckpointKind::Child(c) => counts_as_step(&c.record),
        _ => false,
    }
}

/// A record as named in messages.
fn name(cp: &Checkpoint) -> String {
    format!("checkpoint {} (step {} `{}`)", cp.seq, cp.index, cp.step)
}

fn check_log(
    head: &StoredRun,
    span: Span,
    from: u64,
    start_index: u64,
    mut log: Vec<Checkpoint>,
) -> Result<Vec<Checkpoint>, StoreLoad> {
    let session = &head.session_id;
    let gap = |record: String, kind: GapKind, expected_seq: u64, found_seq: Option<u64>| {
        let found = match found_seq {
            Some(seq) => format!("found checkpoint {seq}"),
            None => "the log ends there".to_string(),
        };
        StoreLoad::gap(
            session.clone(),
            record,
            format!(
                "the checkpoint log is broken ({kind}): expected checkpoint {expected_seq}, \
                 {found} (the head is at checkpoint {} after {} steps); the session is left \
                 as it is, unread and unchanged, until the record is restored",
                head.last_seq, head.steps
            ),
            LogGap {
                kind,
                expected_seq,
                found_seq,
            },
        )
    };

    // Records of a later head than the one read are not this head's; a
    // record out of order among them is reported below, not dropped.
    if let Some(end) = log.iter().position(|cp| cp.seq > head.last_seq)
        && log[end..].iter().all(|cp| cp.seq > head.last_seq)
    {
        log.truncate(end);
    }

    let Some(first) = log.first() else {
        return Err(gap(
            format!("checkpoint {from}"),
            GapKind::Missing,
            from,
            None,
        ));
    };
    if first.seq != from {
        let kind = if first.seq < from {
            GapKind::OutOfOrder
        } else {
            GapKind::Missing
        };
        return Err(gap(name(first), kind, from, Some(first.seq)));
    }
    if !matches!(first.kind, CheckpointKind::Snapshot(_)) {
        return Err(StoreLoad::new(
            session.clone(),
            name(first),
            "expected a snapshot, found an update",
        ));
    }
    if first.index != start_index {
        return Err(StoreLoad::new(
            session.clone(),
            name(first),
            format!(
                "the snapshot is of step {}, the head says step {start_index}",
                first.index
            ),
        ));
    }

    // Seqs and step indexes are stored numbers: the arithmetic on them
    // never overflows (an edited or damaged record at `u64::MAX` is a load
    // error, not a panic nor a wrap).
    let mut prev = first;
    for cp in &log[1..] {
        if cp.seq <= prev.seq {
            let kind = if cp.seq == prev.seq {
                GapKind::Duplicate
            } else {
                GapKind::OutOfOrder
            };
            return Err(gap(
                name(cp),
                kind,
                prev.seq.saturating_add(1),
                Some(cp.seq),
            ));
        }
        // `prev.seq < cp.seq`: no overflow.
        let expected = prev.seq + 1;
        let is_update = counts_as_step(&cp.kind);
        let want_index = if is_update {
            prev.index.checked_add(1).ok_or_else(|| {
                StoreLoad::new(
                    session.clone(),
                    name(cp),
                    format!(
                        "it is a step after step {}, the most a step index can be: the record \
                         before it was edited or damaged",
                        prev.index
                    ),
                )
            })?
        } else {
            prev.index
        };
        if cp.index != want_index {
            let kind = if cp.index > want_index {
                GapKind::Missing
            } else if cp.index == prev.index {
                GapKind::Duplicate
            } else {
                GapKind::OutOfOrder
            };
            return Err(gap(name(cp), kind, expected, Some(cp.seq)));
        }
        if cp.seq > expected {
            // One snapshot, between the update of its step and the next,
            // superseded (or, for a read racing a commit, being
            // superseded): the updates around it say the same. Anything
            // else is a lost record.
            let superseded = span == Span::Whole
                && cp.seq == expected + 1
                && is_update
                && matches!(prev.kind, CheckpointKind::Update(_))
                && expected <= head.snapshot_seq;
            if !superseded {
                return Err(gap(name(cp), GapKind::Missing, expected, Some(cp.seq)));
            }
        }
        prev = cp;
    }
    if prev.seq != head.last_seq || prev.index != head.steps {
        if prev.seq < head.last_seq || prev.index < head.steps {
            // The head's steps may be past the log's last record at seq
            // `u64::MAX`, after which no record can come.
            let next = prev.seq.saturating_add(1);
            return Err(gap(
                format!("checkpoint {next}"),
                GapKind::EndsEarly,
                next,
                None,
            ));
        }
        return Err(StoreLoad::new(
            session.clone(),
            name(prev),
            format!(
                "the log's last record is of step {}, the head says checkpoint {} after {} steps",
                prev.index, head.last_seq, head.steps
            ),
        ));
    }
    Ok(log)
}

/// The state of `session` after `index` steps (the latest when `None`):
/// the nearest snapshot at or before it, then the updates after it, from
/// a log checked by [`read_log`]. Updates of branches count at their
/// join: the state is the run's own, not a branch's.
pub(crate) async fn rebuild<S: HarnessState>(
    store: &dyn SessionStore,
    head: &StoredRun,
    index: Option<u64>,
) -> Result<S, StoreError> {
    let mut tasks = rebuild_tasks::<S>(store, head, index).await?;
    Ok(tasks
        .remove(&TaskPath::root())
        .map(|t| t.state)
        .unwrap_or_default())
}

/// A task as the log leaves it: the run's own loop, or a branch of a fork
/// under way.
#[derive(Debug)]
pub(crate) struct TaskRebuilt<S: HarnessState> {
    /// Its state: for a branch, the state at its fork and its own updates.
    pub(crate) state: S,
    /// A branch's updates so far, to merge at its join (with those of the
    /// branches of its own forks that have joined).
    pub(crate) updates: Vec<S::Update>,
    /// A branch's next step; `None` once it has reached its join.
    pub(crate) next: Option<String>,
    /// A fan-out branch's input, until its first step completes.
    pub(crate) input: Option<Value>,
    /// Its fork under way, if any; its branches are tasks of their own.
    pub(crate) open: Option<ForkRecord>,
    /// The session's steps when that fork started.
    pub(crate) open_at: u64,
    /// A branch's steps so far.
    pub(crate) steps: u64,
}

/// Every task of `session` after `index` steps (the latest when `None`),
/// by path: the root, and each branch of the forks under way.
pub(crate) async fn rebuild_tasks<S: HarnessState>(
    store: &dyn SessionStore,
    head: &StoredRun,
    index: Option<u64>,
) -> Result<BTreeMap<TaskPath, TaskRebuilt<S>>, StoreError> {
    let target = index.unwrap_or(head.steps);
    let span = if target >= head.snapshot_index {
        Span::Latest
    } else {
        Span::Whole
    };
    let session = &head.session_id;
    let log = read_log(store, head, span).await?;
    let bad = |cp: &Checkpoint, reason: String| {
        StoreError::Load(StoreLoad::new(session.clone(), name(cp), reason))
    };
    // `read_log` checked that the first is a snapshot.
    let mut iter = log.iter();
    let root_state: S = match iter.next().map(|cp| (cp, &cp.kind)) {
        Some((cp, CheckpointKind::Snapshot(v))) => {
            serde_json::from_value(v.clone()).map_err(|e| {
                bad(
                    cp,
                    format!("the snapshot does not fit this state type: {e}"),
                )
            })?
        }
        Some((cp, _)) => {
            return Err(bad(cp, "expected a snapshot".into()));
        }
        None => {
            return Err(StoreError::Load(StoreLoad::new(
                session.clone(),
                "checkpoint log",
                "it is empty",
            )));
        }
    };
    let records = iter
        .take_while(|cp| cp.index <= target)
        .map(|cp| (cp, &cp.kind, None));
    replay(session, TaskPath::root(), root_state, records)
}

/// A new run's start (its `$input`) where the run before it failed or was
/// stopped with a fork of `root` under way: that fork ends with it. Its
/// branches never joined, so nothing of theirs reaches the state; the new
/// run starts from the state the fork started from, with `root` the only
/// task left. The loader (`replay`, at the input's record) and a new run
/// started in this process (before its input is committed) both end it
/// here, so that the run and its log agree.
pub(crate) fn end_open_fork<S: HarnessState>(
    tasks: &mut BTreeMap<TaskPath, TaskRebuilt<S>>,
    root: &TaskPath,
) {
    let own = tasks.remove(root).map(|mut own| {
        own.open = None;
        own
    });
    tasks.clear();
    tasks.extend(own.map(|own| (root.clone(), own)));
}

/// The records of the current visit of the sub-agent at `child` (run by a
/// step of the task at `parent`), unwrapped: those after the parent task's
/// last record, each with the sub-agent's next step for its own updates.
pub(crate) fn child_visit<'a>(
    log: &'a [Checkpoint],
    parent: &TaskPath,
    child: &TaskPath,
) -> Vec<(&'a Checkpoint, &'a CheckpointKind, Option<Option<String>>)> {
    let mut visit = Vec::new();
    for cp in log {
        let task = match &cp.kind {
            CheckpointKind::Snapshot(_) | CheckpointKind::Update(_) => Some(TaskPath::root()),
            CheckpointKind::Fork(f) => Some(f.path.clone()),
            CheckpointKind::Join(j) => Some(j.path.clone()),
            CheckpointKind::Branch(b) => Some(b.path.clone()),
            CheckpointKind::Child(c) if c.path == *child => {
                visit.push((cp, &*c.record, Some(c.next.clone())));
                None
            }
            CheckpointKind::Child(_) => None,
        };
        // A record of the parent task ends the visit before it.
        if task.as_ref() == Some(parent) {
            visit.clear();
        }
    }
    visit
}

/// Every task as `records` leave them, from the task at `root` in state
/// `root_state`: the root, and each branch of the forks under way. A
/// record's third part is, for an update of the root, its next step (for a
/// sub-agent's records, whose head is not the session's).
pub(crate) fn replay<'a, S: HarnessState>(
    session: &crate::ids::SessionId,
    root: TaskPath,
    root_state: S,
    records: impl Iterator<Item = (&'a Checkpoint, &'a CheckpointKind, Option<Option<String>>)>,
) -> Result<BTreeMap<TaskPath, TaskRebuilt<S>>, StoreError> {
    let bad = |cp: &Checkpoint, reason: String| {
        StoreError::Load(StoreLoad::new(session.clone(), name(cp), reason))
    };
    let update = |cp: &Checkpoint, v: &Value| {
        serde_json::from_value::<S::Update>(v.clone())
            .map_err(|e| bad(cp, format!("the update does not fit this state type: {e}")))
    };
    let mut tasks: BTreeMap<TaskPath, TaskRebuilt<S>> = BTreeMap::new();
    tasks.insert(
        root.clone(),
        TaskRebuilt {
            state: root_state,
            updates: Vec::new(),
            next: None,
            input: None,
            open: None,
            open_at: 0,
            steps: 0,
        },
    );
    for (cp, kind, root_next) in records {
        let task = |tasks: &mut BTreeMap<TaskPath, TaskRebuilt<S>>, path: &TaskPath| {
            tasks.remove(path).ok_or_else(|| {
                bad(
                    cp,
                    format!("it names the task `{path}`, which no fork under way started"),
                )
            })
        };
        match kind {
            // Later snapshots restate the updates before them.
            CheckpointKind::Snapshot(_) => {}
            CheckpointKind::Update(v) => {
                let u = update(cp, v)?;
                if tasks.get(&root).is_some_and(|own| own.open.is_some()) {
                    if cp.step != super::head::INPUT {
                        return Err(bad(
                            cp,
                            "an update of the run while a fork is under way".into(),
                        ));
                    }
                    end_open_fork(&mut tasks, &root);
                }
                let mut own = task(&mut tasks, &root)?;
                own.state.apply(u);
                if let Some(next) = root_next {
                    own.next = next;
                }
                tasks.insert(root.clone(), own);
            }
            // A sub-agent's records are its own.
            CheckpointKind::Child(_) => {}
            CheckpointKind::Fork(record) => {
                let mut parent = task(&mut tasks, &record.path)?;
                if parent.open.is_some() {
                    return Err(bad(cp, "a fork of a task that is already forked".into()));
                }
                for b in &record.branches {
                    if !b.path.starts_with(&record.path) || b.path == record.path {
                        return Err(bad(
                            cp,
                            format!("its branch `{}` is not under `{}`", b.path, record.path),
                        ));
                    }
                    tasks.insert(
                        b.path.clone(),
                        TaskRebuilt {
                            state: parent.state.clone(),
                            updates: Vec::new(),
                            next: Some(b.step.clone()),
                            input: b.input.clone(),
                            open: None,
                            open_at: 0,
                            steps: 0,
                        },
                    );
                }
                parent.open = Some(record.clone());
                parent.open_at = cp.index;
                parent.next = Some(record.join.clone());
                tasks.insert(record.path.clone(), parent);
            }
            CheckpointKind::Branch(record) => {
                let u = update(cp, &record.update)?;
                let mut branch = task(&mut tasks, &record.path)?;
                if branch.next.is_none() {
                    return Err(bad(
                        cp,
                        "a step of a branch that had reached its join".into(),
                    ));
                }
                branch.state.apply(u.clone());
                branch.updates.push(u);
                branch.next.clone_from(&record.next);
                branch.input = None;
                branch.steps += 1;
                tasks.insert(record.path.clone(), branch);
            }
            CheckpointKind::Join(record) => {
                let mut parent = task(&mut tasks, &record.path)?;
                let Some(fork) = parent.open.take() else {
                    return Err(bad(cp, "a join without a fork under way".into()));
                };
                let started: Vec<&TaskPath> = fork.branches.iter().map(|b| &b.path).collect();
                if record.branches.iter().collect::<Vec<_>>() != started {
                    return Err(bad(
                        cp,
                        "it merges other branches than its fork started".into(),
                    ));
                }
                for path in &record.branches {
                    let branch = task(&mut tasks, path)?;
                    if branch.next.is_some() || branch.open.is_some() {
                        return Err(bad(
                            cp,
                            format!("its branch `{path}` had not reached the join"),
                        ));
                    }
                    for u in branch.updates {
                        parent.state.apply(u.clone());
                        if record.path != root {
                            parent.updates.push(u);
                        }
                    }
                }
                tasks.insert(record.path.clone(), parent);
            }
        }
    }
    Ok(tasks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{RunId, SessionId};
    use crate::session::{SCHEMA_VERSION, SessionPhase};
    use serde_json::json;

    fn cp(seq: u64, index: u64, snapshot: bool) -> Checkpoint {
        Checkpoint {
            seq,
            index,
            step: "s".into(),
            time: 0,
            kind: if snapshot {
                CheckpointKind::Snapshot(json!({}))
            } else {
                CheckpointKind::Update(json!({}))
            },
        }
    }

    fn head(last_seq: u64, steps: u64, snapshot_seq: u64, snapshot_index: u64) -> StoredRun {
        StoredRun {
            schema_version: SCHEMA_VERSION,
            session_id: SessionId::from("s"),
            agent_id: "a".into(),
            run_id: RunId::from("r"),
            phase: SessionPhase::Running,
            next_step: None,
            ended_with: None,
            steps,
            journal: Default::default(),
            branch_journals: BTreeMap::new(),
            version: 1,
            lease: None,
            snapshot_seq,
            snapshot_index,
            state_bytes: 0,
            bytes_since_snapshot: 0,
            measured_index: 0,
            last_seq,
            created_at: 0,
            updated_at: 0,
            queued: Vec::new(),
            stop_requested: None,
            run_start: None,
        }
    }

    /// A log of 0 (snapshot), 1..=3 updates, 4 snapshot (superseded,
    /// removed), 5..=6 updates, 7 snapshot (the latest), 8 update.
    fn sample() -> (StoredRun, Vec<Checkpoint>) {
        let log = vec![
            cp(0, 0, true),
            cp(1, 1, false),
            cp(2, 2, false),
            cp(3, 3, false),
            cp(5, 4, false),
            cp(6, 5, false),
            cp(7, 5, true),
            cp(8, 6, false),
        ];
        (head(8, 6, 7, 5), log)
    }

    fn whole(head: &StoredRun, log: Vec<Checkpoint>) -> Result<Vec<Checkpoint>, StoreLoad> {
        let (from, index) = start_of(head, Span::Whole);
        check_log(head, Span::Whole, from, index, log)
    }

    fn latest(head: &StoredRun, log: Vec<Checkpoint>) -> Result<Vec<Checkpoint>, StoreLoad> {
        let log = log
            .into_iter()
            .filter(|c| c.seq >= head.snapshot_seq)
            .collect();
        let (from, index) = start_of(head, Span::Latest);
        check_log(head, Span::Latest, from, index, log)
    }

    fn gap_of(r: Result<Vec<Checkpoint>, StoreLoad>) -> Option<LogGap> {
        r.err().and_then(|e| e.gap.map(|g| *g))
    }

    #[test]
    fn a_complete_log_with_a_superseded_snapshot_passes() {
        let (head, log) = sample();
        assert_eq!(whole(&head, log.clone()).map(|l| l.len()), Ok(8));
        assert_eq!(latest(&head, log).map(|l| l.len()), Ok(2));
    }

    #[test]
    fn each_missing_record_is_a_gap() {
        let (head, log) = sample();
        for seq in [0, 1, 2, 3, 5, 6, 8] {
            let damaged: Vec<_> = log.iter().filter(|c| c.seq != seq).cloned().collect();
            let found = gap_of(whole(&head, damaged.clone()));
            assert!(found.is_some(), "whole log without {seq}: {found:?}");
            if seq >= 7 {
                assert!(
                    gap_of(latest(&head, damaged)).is_some(),
                    "latest without {seq}"
                );
            }
        }
        // The latest snapshot only shortens a read from it: the whole log
        // has every update without it.
        let damaged: Vec<_> = log.iter().filter(|c| c.seq != 7).cloned().collect();
        assert!(whole(&head, damaged.clone()).is_ok());
        let found = gap_of(latest(&head, damaged));
        assert_eq!(
            found,
            Some(LogGap {
                kind: GapKind::Missing,
                expected_seq: 7,
                found_seq: Some(8)
            })
        );
    }

    #[test]
    fn duplicates_and_swaps_are_gaps() {
        let (head, log) = sample();
        for i in 0..log.len() {
            let mut dup = log.clone();
            dup.insert(i, log[i].clone());
            let found = gap_of(whole(&head, dup));
            assert_eq!(
                found.map(|g| g.kind),
                Some(GapKind::Duplicate),
                "dup of {i}"
            );
        }
        for i in 0..log.len() - 1 {
            let mut swapped = log.clone();
            swapped.swap(i, i + 1);
            let found = whole(&head, swapped);
            assert!(found.is_err(), "swap {i}");
        }
    }

    /// Seqs and step indexes at `u64::MAX` (an edited or damaged log or
    /// head) are load errors naming the record, never an overflow.
    #[test]
    fn counters_at_their_end_are_load_errors_not_overflows() {
        let max = u64::MAX;
        // A step after a snapshot at step u64::MAX, and two steps from one
        // at u64::MAX - 1 (the review's edited file store).
        for (h, log) in [
            (
                head(1, max, 0, max),
                vec![cp(0, max, true), cp(1, 5, false)],
            ),
            (
                head(2, max, 0, max - 1),
                vec![cp(0, max - 1, true), cp(1, max, false), cp(2, 0, false)],
            ),
            (
                head(3, max, 1, max),
                vec![cp(1, max, true), cp(2, max, true), cp(3, 0, false)],
            ),
        ] {
            let e = latest(&h, log.clone()).unwrap_err();
            assert!(e.reason.contains("the most a step index can be"), "{e}");
            assert!(e.record.starts_with("checkpoint"), "{e}");
        }
        // The log ends at seq u64::MAX short of the head's steps.
        let h = head(max, 3, max, 0);
        let found = gap_of(latest(&h, vec![cp(max, 0, true)]));
        assert_eq!(
            found,
            Some(LogGap {
                kind: GapKind::EndsEarly,
                expected_seq: max,
                found_seq: None,
            })
        );
        // Seq u64::MAX twice, and once more after its update.
        let h = head(max, 0, max, 0);
        let found = gap_of(latest(&h, vec![cp(max, 0, true), cp(max, 0, true)]));
        assert_eq!(found.map(|g| g.kind), Some(GapKind::Duplicate));
        let h = head(max, 1, max - 1, 0);
        let log = vec![cp(max - 1, 0, true), cp(max, 1, false), cp(max, 1, false)];
        assert_eq!(
            gap_of(latest(&h, log)).map(|g| g.kind),
            Some(GapKind::Duplicate)
        );
        // Up to u64::MAX exactly is a log like any other.
        let h = head(max, max, max - 1, max - 1);
        let log = vec![cp(max - 1, max - 1, true), cp(max, max, false)];
        assert_eq!(latest(&h, log).map(|l| l.len()), Ok(2));
    }

    #[test]
    fn records_past_the_head_are_left_out() {
        // The head as read: latest snapshot 4 at step 3, last checkpoint 6.
        // A later commit added 7 and 8 and removed 4 before the log was read.
        let (_, mut log) = sample();
        log.retain(|c| c.seq != 4);
        let head = head(6, 5, 4, 3);
        assert_eq!(whole(&head, log).map(|l| l.len()), Ok(6));
    }
}
