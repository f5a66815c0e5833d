//! Every change to a session's head, in one place.
//!
//! Each function here takes the stored head and returns the [`Commit`] that
//! moves it on: the next head (its version one higher), the checkpoints to
//! append and the snapshots to drop. Nothing else in the crate builds a
//! head, so the rules a head obeys (versions, leases, the snapshot policy,
//! the run queue) can be read in this file. [`commit_with_retry`] is the one
//! compare-and-set loop, for transitions that may be decided again when
//! another writer wins the race; a run's own transitions go through its
//! [`SessionCursor`](super::SessionCursor), which holds the lease and never
//! needs to retry.

use super::{
    BranchRecord, Checkpoint, CheckpointKind, Commit, Durability, ForkRecord, JoinRecord, Lease,
    SCHEMA_VERSION, SessionConfig, SessionError, SessionInFlight, SessionPendingInterrupt,
    SessionPhase, SessionStore, StoreError, StoreLoad, StoredRun, now_millis,
};
use crate::ids::{RunId, SessionId, TaskPath};
use crate::signal::Signal;
use crate::step::StepJournal;
use serde_json::Value;
use std::collections::BTreeMap;

/// The step name of a session's first snapshot.
pub(crate) const START: &str = "$start";
/// The step name of a run's input merged into an existing session.
pub(crate) const INPUT: &str = "$input";
/// The step name of a value saved outside any run ([`save_value`]).
pub(crate) const SAVED: &str = "$saved";

/// The most a head's counters (`version`, `steps`, `last_seq`) may be for
/// a writer to move the session on: `i64::MAX` (also the most the
/// PostgreSQL store keeps as a version).
///
/// Every transition adds to them, and a counter that overflowed would
/// panic (debug) or wrap (release: `last_seq` back to 0, whose checkpoint
/// then overwrites the session's first snapshot). No session counts that
/// far by its own commits, so a head past this was edited or damaged:
/// [`check_counters`] refuses it wherever a head is read to be moved on
/// (the agent's reads of its sessions through [`check_owner`],
/// [`commit_with_retry`], [`load_saved`]), and from a head within it a run
/// would need some 2^63 commits to reach `u64::MAX`. The transitions that
/// return a `Result` add with `checked_add` all the same; those that
/// cannot fail (a run's own commits, after its head was checked) add with
/// `saturating_add`, which never wraps.
pub(crate) const MAX_COUNTER: u64 = i64::MAX as u64;

/// Refuses a head whose `version`, `steps` or `last_seq` is past
/// [`MAX_COUNTER`], naming the counter: nothing is written over it.
pub(crate) fn check_counters(head: &StoredRun) -> Result<(), StoreLoad> {
    let counters = [
        ("version", head.version),
        ("steps", head.steps),
        ("last_seq", head.last_seq),
    ];
    match counters.into_iter().find(|(_, value)| *value > MAX_COUNTER) {
        Some((name, value)) => Err(past_limit(head, name, value)),
        None => Ok(()),
    }
}

/// The error for counter `name` of `head`, at `value`, which cannot be
/// moved on.
fn past_limit(head: &StoredRun, name: &str, value: u64) -> StoreLoad {
    StoreLoad::new(
        head.session_id.clone(),
        "head",
        format!(
            "its `{name}` is {value}, past {MAX_COUNTER}, the most a session's counters reach: \
             the next value would not fit (the head was edited or damaged); the session is \
             left as it is"
        ),
    )
}

/// `value + by` for counter `name` of `head`; a [`StoreLoad`] naming the
/// counter where the sum would overflow.
fn checked(head: &StoredRun, name: &str, value: u64, by: u64) -> Result<u64, StoreLoad> {
    value
        .checked_add(by)
        .ok_or_else(|| past_limit(head, name, value))
}

/// The journals of a run's current steps, by task: the root's and, while
/// a fork is under way, each branch's.
pub(crate) type Journals = BTreeMap<TaskPath, StepJournal>;

/// Writes `journals` into `head`: the root's as its journal, the others as
/// its branch journals.
fn set_journals(head: &mut StoredRun, mut journals: Journals) {
    head.journal = journals.remove(&TaskPath::root()).unwrap_or_default();
    journals.retain(|_, j| *j != StepJournal::default());
    head.branch_journals = journals;
}

/// The journals `head` holds, by task.
pub(crate) fn journals(head: &StoredRun) -> Journals {
    let mut all = head.branch_journals.clone();
    all.insert(TaskPath::root(), head.journal.clone());
    all
}

/// The durability a step's commit asks for.
fn step_durable(config: &SessionConfig, steps_this_run: u64) -> bool {
    match config.durability {
        Durability::EveryStep => true,
        Durability::EveryN(n) => n <= 1 || steps_this_run.is_multiple_of(u64::from(n)),
        Durability::AtExit => false,
    }
}

/// A lease for `owner` from `now` (the store's clock, see
/// [`SessionStore::now`]) until the configured time to live.
pub(crate) fn lease(owner: &str, config: &SessionConfig, now: u64) -> Lease {
    Lease {
        owner: owner.to_string(),
        expires_at: now.saturating_add(ttl_millis(config)),
    }
}

/// The lease's time to live in ms.
pub(crate) fn ttl_millis(config: &SessionConfig) -> u64 {
    u64::try_from(config.lease_ttl.as_millis()).unwrap_or(u64::MAX)
}

/// A new owner id: one per run attempt.
pub(crate) fn owner_id() -> String {
    format!("{}-{}", std::process::id(), uuid::Uuid::new_v4())
}

/// The error for a session whose lease is live at `now`, if it is.
pub(crate) fn in_flight(head: &StoredRun, now: u64) -> Option<SessionInFlight> {
    head.lease
        .as_ref()
        .filter(|l| l.is_live(now))
        .map(|l| SessionInFlight {
            session: head.session_id.clone(),
            owner: l.owner.clone(),
            expires_at: l.expires_at,
        })
}

/// The next version of `head`, written at `now`.
fn next_of(head: &StoredRun, now: u64) -> StoredRun {
    next_with(head, now, head.lease.clone(), head.next_step.clone())
}

/// [`next_of`] with the lease and the next step given, for the commits that
/// set them: they are not copied from `head` only to be replaced.
fn next_with(
    head: &StoredRun,
    now: u64,
    lease: Option<Lease>,
    next_step: Option<String>,
) -> StoredRun {
    // Every field named, so that a field added to the head is not missed.
    let StoredRun {
        schema_version,
        session_id,
        agent_id,
        run_id,
        phase,
        next_step: _,
        ended_with,
        steps,
        journal,
        branch_journals,
        version,
        lease: _,
        snapshot_seq,
        snapshot_index,
        state_bytes,
        bytes_since_snapshot,
        measured_index,
        last_seq,
        created_at,
        updated_at: _,
        queued,
        stop_requested,
        run_start,
    } = head;
    StoredRun {
        schema_version: *schema_version,
        session_id: session_id.clone(),
        agent_id: agent_id.clone(),
        run_id: run_id.clone(),
        phase: phase.clone(),
        next_step,
        ended_with: ended_with.clone(),
        steps: *steps,
        journal: journal.clone(),
        branch_journals: branch_journals.clone(),
        // Never wraps: see `MAX_COUNTER` for why it cannot saturate either.
        version: version.saturating_add(1),
        lease,
        snapshot_seq: *snapshot_seq,
        snapshot_index: *snapshot_index,
        state_bytes: *state_bytes,
        bytes_since_snapshot: *bytes_since_snapshot,
        measured_index: *measured_index,
        last_seq: *last_seq,
        created_at: *created_at,
        updated_at: now,
        queued: queued.clone(),
        // A request for another run than this head's is spent.
        stop_requested: stop_requested.as_ref().filter(|r| *r == run_id).cloned(),
        run_start: *run_start,
    }
}

fn commit(
    head: StoredRun,
    expected: Option<u64>,
    append: Vec<Checkpoint>,
    remove: Vec<u64>,
    durable: bool,
) -> Commit {
    Commit {
        head,
        expected_version: expected,
        append,
        remove,
        durable,
    }
}

/// A commit of the head `next` alone, made from `prev`.
fn head_only(next: StoredRun, prev: &StoredRun, durable: bool) -> Commit {
    commit(next, Some(prev.version), Vec::new(), Vec::new(), durable)
}

/// What a new session starts with.
pub(crate) struct NewSession<'a> {
    /// The agent whose loop it runs.
    pub agent_id: &'a str,
    /// Its first run.
    pub run_id: RunId,
    /// Its id.
    pub session_id: SessionId,
    /// The whole initial state.
    pub state: Value,
    /// The step its run starts at.
    pub next_step: &'a str,
    /// The run holding it from the start; `None` for a submitted run that a
    /// worker takes.
    pub lease: Option<Lease>,
}

/// A new session: its head and first snapshot. Fails on commit if the
/// session exists.
pub(crate) fn create(new: NewSession<'_>, config: &SessionConfig) -> Commit {
    let now = now_millis();
    let head = StoredRun {
        schema_version: SCHEMA_VERSION,
        session_id: new.session_id,
        agent_id: new.agent_id.to_string(),
        run_id: new.run_id,
        phase: SessionPhase::Running,
        next_step: Some(new.next_step.to_string()),
        ended_with: None,
        steps: 0,
        journal: StepJournal::default(),
        branch_journals: BTreeMap::new(),
        version: 1,
        lease: new.lease,
        snapshot_seq: 0,
        snapshot_index: 0,
        state_bytes: json_len(&new.state),
        bytes_since_snapshot: 0,
        measured_index: 0,
        last_seq: 0,
        created_at: now,
        updated_at: now,
        queued: Vec::new(),
        stop_requested: None,
        run_start: Some(0),
    };
    let first = Checkpoint {
        seq: 0,
        index: 0,
        step: START.into(),
        time: now,
        kind: CheckpointKind::Snapshot(new.state),
    };
    commit(
        head,
        None,
        vec![first],
        Vec::new(),
        config.durability == Durability::EveryStep,
    )
}

/// A new run takes the lease of an existing session, at `next_step` with
/// `journal`, optionally under a new run id and with its input merged.
/// The caller checks that no live lease is held.
pub(crate) fn acquire(
    head: &StoredRun,
    lease: Lease,
    run_id: Option<RunId>,
    next_step: Option<String>,
    journals: Journals,
    input: Option<Value>,
) -> Commit {
    let now = now_millis();
    let mut next = next_of(head, now);
    next.lease = Some(lease);
    next.phase = SessionPhase::Running;
    let new_run = run_id.is_some();
    if let Some(run_id) = run_id {
        next.run_id = run_id;
    }
    next.next_step = next_step;
    set_journals(&mut next, journals);
    let append = input
        .map(|input| vec![push_input(&mut next, input, now)])
        .unwrap_or_default();
    if new_run {
        next.run_start = Some(next.steps);
    }
    commit(next, Some(head.version), append, Vec::new(), true)
}

/// A paused run resumed in its own process takes its lease again.
pub(crate) fn reacquire(head: &StoredRun, lease: Lease, journals: Journals) -> Commit {
    let mut next = next_of(head, now_millis());
    next.lease = Some(lease);
    next.phase = SessionPhase::Running;
    set_journals(&mut next, journals);
    head_only(next, head, true)
}

/// The current step's journal recorded while the step runs (a `once`
/// result), merged into the head's: results are only ever added within a
/// visit, so records that cross in flight lose nothing. Always durable: the
/// effect it records has already happened.
pub(crate) fn record_journal(
    head: &StoredRun,
    path: &TaskPath,
    journal: &StepJournal,
    lease: Lease,
) -> Commit {
    let mut next = next_of(head, now_millis());
    let held = if path.is_root() {
        &mut next.journal
    } else {
        next.branch_journals.entry(path.clone()).or_default()
    };
    for (key, value) in &journal.once {
        held.once
            .entry(key.clone())
            .or_insert_with(|| value.clone());
    }
    if journal.responses.len() > held.responses.len() {
        held.responses.clone_from(&journal.responses);
    }
    next.lease = Some(lease);
    head_only(next, head, true)
}

/// A completed step, as [`step_done`] records it.
#[derive(Clone)]
pub(crate) struct StepDone<'a> {
    /// The step's name.
    pub step: &'a str,
    /// Its update, as stored.
    pub update: Value,
    /// The step to run next; `None` when the run ends.
    pub next_step: Option<&'a str>,
    /// The signal the step's route gave, if it has one.
    pub signal: Option<&'a Signal>,
    /// Steps completed by this run so far (for `Durability::EveryN`).
    pub steps_this_run: u64,
    /// The fork the step leads into, recorded with it.
    pub fork: Option<ForkRecord>,
}

/// What [`step_done`] moved into a commit that was refused: the step's
/// update and its fork, to make the commit again from a newer head.
pub(crate) fn take_back_step(refused: Commit) -> Result<(Value, Option<ForkRecord>), StoreError> {
    let (mut update, mut fork) = (None, None);
    for checkpoint in refused.append {
        match checkpoint.kind {
            CheckpointKind::Update(value) if update.is_none() => update = Some(value),
            CheckpointKind::Fork(record) => fork = Some(record),
            _ => {}
        }
    }
    let update = update.ok_or_else(|| {
        StoreError::backend("a step's refused commit holds no update to make it again with")
    })?;
    Ok((update, fork))
}

/// A completed step: its update, the step to run next, the lease renewed,
/// and a snapshot of the state when one pays (see [`SessionConfig`]).
/// `measure` gives the state's size as JSON, `snapshot` the state.
pub(crate) fn step_done(
    head: &StoredRun,
    done: StepDone<'_>,
    lease: Lease,
    config: &SessionConfig,
    measure: impl FnOnce() -> u64,
    snapshot: impl FnOnce() -> Result<Value, StoreError>,
) -> Result<Commit, StoreError> {
    let StepDone {
        step,
        update,
        next_step,
        signal,
        steps_this_run,
        fork,
    } = done;
    let now = now_millis();
    let mut next = next_with(head, now, Some(lease), next_step.map(str::to_string));
    next.version = checked(head, "version", head.version, 1)?;
    next.steps = checked(head, "steps", head.steps, 1)?;
    next.last_seq = checked(head, "last_seq", head.last_seq, 1)?;
    // The last step: its signal, for `recover` should the process die
    // before `settle` records the end.
    next.ended_with = match next_step {
        None => Some(signal.cloned().unwrap_or(Signal::END)),
        Some(_) => None,
    };
    next.journal = StepJournal::default();
    next.bytes_since_snapshot = head.bytes_since_snapshot.saturating_add(json_len(&update));
    // Every K steps since the last measure, and whenever the updates since
    // the last snapshot reach twice the state's size as last measured, the
    // state is measured again. A snapshot pays only when replaying those
    // updates reads at least twice the bytes of reading the state: when
    // steps overwrite what earlier steps wrote. A session whose steps only
    // add to its state gains nothing from one, since its updates are its
    // state, and is stored once, not twice.
    let since = next.bytes_since_snapshot;
    let every = config.snapshot_every;
    let last_measure = head.snapshot_index.max(head.measured_index);
    let by_steps = every > 0 && next.steps >= last_measure.saturating_add(every);
    let by_bytes = since
        >= head
            .state_bytes
            .max(config.snapshot_min_bytes)
            .saturating_mul(2);
    let mut append = vec![Checkpoint {
        seq: next.last_seq,
        index: next.steps,
        step: step.to_string(),
        time: now,
        kind: CheckpointKind::Update(update),
    }];
    let mut remove = Vec::new();
    // A step that forks records the fork with it, and no snapshot: the log
    // of a fork under way is read from before it.
    if let Some(fork) = fork {
        next.last_seq = checked(head, "last_seq", next.last_seq, 1)?;
        append.push(Checkpoint {
            seq: next.last_seq,
            index: next.steps,
            step: step.to_string(),
            time: now,
            kind: CheckpointKind::Fork(fork),
        });
    } else if by_steps || by_bytes {
        next.state_bytes = measure();
        next.measured_index = next.steps;
        if since >= next.state_bytes.saturating_mul(2) {
            next.bytes_since_snapshot = 0;
            next.last_seq = checked(head, "last_seq", next.last_seq, 1)?;
            append.push(Checkpoint {
                seq: next.last_seq,
                index: next.steps,
                step: step.to_string(),
                time: now,
                kind: CheckpointKind::Snapshot(snapshot()?),
            });
            // The first snapshot stays for time travel; a later one is
            // only a shortcut, superseded by this one.
            if head.snapshot_seq != 0 {
                remove.push(head.snapshot_seq);
            }
            next.snapshot_seq = next.last_seq;
            next.snapshot_index = next.steps;
        }
    }
    let durable = step_durable(config, steps_this_run);
    Ok(commit(next, Some(head.version), append, remove, durable))
}

/// A completed step of a branch, as [`branch_done`] records it.
pub(crate) struct BranchDone<'a> {
    /// The step's name.
    pub step: &'a str,
    /// What the branch's record says.
    pub record: BranchRecord,
    /// Steps completed by this run so far (for `Durability::EveryN`).
    pub steps_this_run: u64,
    /// The fork the step leads into, recorded with it.
    pub fork: Option<ForkRecord>,
}

/// A completed step of a branch: its record, the branch's journal cleared,
/// the lease renewed. Never a snapshot: the state of the task that forked
/// changes only at the join.
pub(crate) fn branch_done(
    head: &StoredRun,
    done: &BranchDone<'_>,
    lease: Lease,
    config: &SessionConfig,
) -> Commit {
    let now = now_millis();
    let mut next = next_of(head, now);
    // Saturating, never wrapping (see `MAX_COUNTER`).
    next.steps = next.steps.saturating_add(1);
    next.last_seq = next.last_seq.saturating_add(1);
    next.lease = Some(lease);
    next.branch_journals.remove(&done.record.path);
    next.bytes_since_snapshot = head
        .bytes_since_snapshot
        .saturating_add(json_len(&done.record.update));
    let mut append = vec![Checkpoint {
        seq: next.last_seq,
        index: next.steps,
        step: done.step.to_string(),
        time: now,
        kind: CheckpointKind::Branch(done.record.clone()),
    }];
    if let Some(fork) = &done.fork {
        next.last_seq = next.last_seq.saturating_add(1);
        append.push(Checkpoint {
            seq: next.last_seq,
            index: next.steps,
            step: done.step.to_string(),
            time: now,
            kind: CheckpointKind::Fork(fork.clone()),
        });
    }
    let durable = step_durable(config, done.steps_this_run);
    commit(next, Some(head.version), append, Vec::new(), durable)
}

/// Records of a sub-agent's loop, as [`child_done`] commits them.
pub(crate) struct ChildDone<'a> {
    /// The step of the sub-agent's loop they are about.
    pub step: &'a str,
    /// The records, in order.
    pub records: Vec<super::ChildRecord>,
    /// Whether the first record is a completed step (counted in the
    /// session's steps).
    pub is_step: bool,
    /// The tasks whose journals they close.
    pub clear: Vec<TaskPath>,
    /// Steps completed by this run so far (for `Durability::EveryN`).
    pub steps_this_run: u64,
}

/// Records of a sub-agent's loop (a step of it, a fork, a join), in the
/// session of the loop that runs it.
pub(crate) fn child_done(
    head: &StoredRun,
    done: &ChildDone<'_>,
    lease: Lease,
    config: &SessionConfig,
) -> Commit {
    let now = now_millis();
    let mut next = next_of(head, now);
    // Saturating, never wrapping (see `MAX_COUNTER`).
    if done.is_step {
        next.steps = next.steps.saturating_add(1);
        // A sub-agent's step is the session's (its checkpoints' indexes
        // count it), not the run's own: the run counts the steps of its
        // own loop (its step limit, its outcome), as the process that runs
        // it does, so a run resumed from here counts as one resumed in
        // that process.
        next.run_start = next.run_start.map(|start| start.saturating_add(1));
    }
    next.lease = Some(lease);
    for path in &done.clear {
        next.branch_journals.retain(|p, _| !p.starts_with(path));
    }
    let mut append = Vec::with_capacity(done.records.len());
    for record in &done.records {
        next.last_seq = next.last_seq.saturating_add(1);
        append.push(Checkpoint {
            seq: next.last_seq,
            index: next.steps,
            step: done.step.to_string(),
            time: now,
            kind: CheckpointKind::Child(record.clone()),
        });
    }
    let durable = step_durable(config, done.steps_this_run);
    commit(next, Some(head.version), append, Vec::new(), durable)
}

/// Every branch of a fork reached the join `step`: the merge, recorded.
pub(crate) fn joined(
    head: &StoredRun,
    step: &str,
    record: JoinRecord,
    lease: Lease,
    config: &SessionConfig,
    steps_this_run: u64,
) -> Commit {
    let now = now_millis();
    let mut next = next_of(head, now);
    // Saturating, never wrapping (see `MAX_COUNTER`).
    next.last_seq = next.last_seq.saturating_add(1);
    next.lease = Some(lease);
    next.branch_journals
        .retain(|path, _| !record.branches.iter().any(|b| path.starts_with(b)));
    let append = vec![Checkpoint {
        seq: next.last_seq,
        index: next.steps,
        step: step.to_string(),
        time: now,
        kind: CheckpointKind::Join(record),
    }];
    let durable = step_durable(config, steps_this_run);
    commit(next, Some(head.version), append, Vec::new(), durable)
}

/// How the run settled, with the lease released. When the run ended
/// (completed, was stopped or failed) and another run is queued on the
/// session, that run's input is merged and the session becomes runnable
/// again at `start`: a failed run does not strand the runs queued behind
/// it (as with LangGraph's `enqueue`, each queued run is a run of its own).
/// A run that paused for a human keeps them queued until it is resumed.
pub(crate) fn settle(
    head: &StoredRun,
    phase: SessionPhase,
    next_step: Option<&str>,
    journals: Journals,
    start: &str,
    config: &SessionConfig,
) -> Commit {
    let now = now_millis();
    let mut next = next_with(head, now, None, next_step.map(str::to_string));
    next.ended_with = None;
    next.stop_requested = None;
    set_journals(&mut next, journals);
    let mut append = Vec::new();
    let ended = matches!(
        phase,
        SessionPhase::Completed { .. } | SessionPhase::Failed { .. }
    );
    if ended && !next.queued.is_empty() {
        let input = next.queued.remove(0);
        append.push(push_input(&mut next, input, now));
        // The new run starts afresh, as one submitted to the ended session
        // would: the journal a failed or stopped step kept (its `once`
        // results, its answers) is not the new run's.
        set_journals(&mut next, Journals::new());
        next.phase = SessionPhase::Running;
        next.next_step = Some(start.to_string());
        next.run_id = RunId::random();
        next.run_start = Some(next.steps);
    } else {
        next.phase = phase;
    }
    // A run that ended where its last step's commit says (`ended_with`),
    // that commit durable: the end is on disk already, since `recover`
    // records it with that signal should the process die before this
    // commit reaches the disk. This commit then does not wait for a flush.
    // Every other settle does: a pause, a failure, a stop, an end after a
    // step not flushed, and the start of a queued run.
    let end_on_disk = append.is_empty()
        && config.durability == Durability::EveryStep
        && matches!(&next.phase, SessionPhase::Completed { signal }
            if head.ended_with.as_ref() == Some(signal));
    commit(next, Some(head.version), append, Vec::new(), !end_on_disk)
}

/// The lease extended, if a third of it has passed at `now` (the store's
/// clock, as `lease` was made); `None` if not due.
pub(crate) fn renew(
    head: &StoredRun,
    lease: Lease,
    config: &SessionConfig,
    now: u64,
) -> Option<Commit> {
    let held = head.lease.as_ref()?;
    if held.expires_at.saturating_sub(now) >= ttl_millis(config) / 3 * 2 {
        return None;
    }
    let mut next = next_of(head, now_millis());
    next.lease = Some(lease);
    Some(head_only(next, head, false))
}

/// `head` with the lease `owner` holds given up, the session left as it
/// is (a run dropped without settling: its session can be resumed,
/// recovered or taken by a worker at once); `None` if `owner` does not
/// hold the lease.
pub(crate) fn release(head: &StoredRun, owner: &str) -> Option<Commit> {
    head.lease.as_ref().filter(|l| l.owner == owner)?;
    let next = next_with(head, now_millis(), None, head.next_step.clone());
    Some(head_only(next, head, false))
}

/// A session a worker sets aside because it cannot be run as it is: marked
/// failed with `reason` and its lease released; `None` if it is not `agent`'s,
/// is no longer waiting for a worker at `now` (the store's clock), or its
/// version is at `u64::MAX` (no commit can follow it: it is left as it is).
/// A head past [`MAX_COUNTER`] otherwise is set aside: that is why it
/// cannot run.
pub(crate) fn quarantine(head: &StoredRun, agent: &str, reason: &str, now: u64) -> Option<Commit> {
    if head.agent_id != agent
        || head.phase != SessionPhase::Running
        || in_flight(head, now).is_some()
    {
        return None;
    }
    let version = head.version.checked_add(1)?;
    let mut next = next_of(head, now_millis());
    next.version = version;
    next.phase = SessionPhase::Failed {
        error: format!("quarantined by a worker: {reason}"),
    };
    next.lease = None;
    // A stop asked of the run is spent: a recover once the cause is fixed
    // runs it, never stops it at once.
    next.stop_requested = None;
    Some(head_only(next, head, true))
}

/// What to do with a run submitted to a session that is busy (running, or
/// runnable and waiting for a worker).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Busy {
    /// Refuse it with [`SessionError::InFlight`].
    Reject,
    /// Queue it: it starts when the runs before it end (complete, fail or
    /// are stopped), in the order they were queued.
    Queue,
}

/// Where a submitted run is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Submitted {
    /// Waiting for a worker to take it.
    Runnable,
    /// Queued behind the session's current run, at this position (1 = next).
    Queued {
        /// Its place in the queue.
        position: usize,
    },
}

/// A new run submitted on an existing session with `input` to merge: made
/// runnable at `start` if the session is idle, queued or refused if busy.
/// An ended session that still has runs queued (one a worker quarantined
/// keeps them) is busy with them: the first of them is made runnable, and
/// `input` queued behind the rest, never ahead of them.
pub(crate) fn submit(
    head: &StoredRun,
    input: &Value,
    busy: Busy,
    start: &str,
) -> Result<(Commit, Submitted), SessionError> {
    check_counters(head)?;
    let now = now_millis();
    let mut next = next_of(head, now);
    let mut append = Vec::new();
    let submitted = match &head.phase {
        SessionPhase::Interrupted { interrupt } => {
            return Err(SessionPendingInterrupt {
                session: head.session_id.clone(),
                interrupt: interrupt.id.clone(),
            }
            .into());
        }
        SessionPhase::Running => match busy {
            Busy::Reject => {
                let (owner, expires_at) = head
                    .lease
                    .as_ref()
                    .map_or(("a waiting run".to_string(), 0), |l| {
                        (l.owner.clone(), l.expires_at)
                    });
                return Err(SessionInFlight {
                    session: head.session_id.clone(),
                    owner,
                    expires_at,
                }
                .into());
            }
            Busy::Queue => {
                next.queued.push(input.clone());
                Submitted::Queued {
                    position: next.queued.len(),
                }
            }
        },
        SessionPhase::Completed { .. } | SessionPhase::Failed { .. } => {
            let submitted = if next.queued.is_empty() {
                append.push(push_input(&mut next, input.clone(), now));
                Submitted::Runnable
            } else if busy == Busy::Reject {
                return Err(SessionInFlight {
                    session: head.session_id.clone(),
                    owner: format!("{} queued runs", head.queued.len()),
                    expires_at: 0,
                }
                .into());
            } else {
                let first = next.queued.remove(0);
                append.push(push_input(&mut next, first, now));
                next.queued.push(input.clone());
                Submitted::Queued {
                    position: next.queued.len(),
                }
            };
            next.phase = SessionPhase::Running;
            next.lease = None;
            next.run_id = RunId::random();
            next.run_start = Some(next.steps);
            // Afresh: the journals an ended run's step kept, of the root
            // and of the branches of a fork it ended in, are not this run's.
            set_journals(&mut next, Journals::new());
            next.next_step = Some(start.to_string());
            submitted
        }
    };
    Ok((
        commit(next, Some(head.version), append, Vec::new(), true),
        submitted,
    ))
}

/// What [`Agent::stop_session`](crate::Agent::stop_session) did.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Stopping {
    /// No run held the session (it waited for a worker, or its worker
    /// died): the run is recorded as stopped (`$stopped`) now, or, if its
    /// last step had ended it and only the end was not yet recorded, as
    /// ended with that step's signal; a run queued behind it starts.
    Stopped,
    /// A run holds the session: it is asked to stop, and stops at its next
    /// step boundary, as [`StopHandle::stop`](crate::StopHandle::stop)
    /// stops a run of this process (the step running now is not
    /// cancelled), in whichever process it runs. Should that process die
    /// first, the worker that takes the session over stops it before it
    /// runs a step.
    Asked {
        /// The lease's owner: the run asked.
        owner: String,
    },
    /// No run is going: the session paused for a human, completed or
    /// failed. Nothing is written.
    NotRunning(SessionPhase),
    /// The run that was going when the stop was asked ended meanwhile;
    /// another run of the session (one queued behind it) may be going now,
    /// and is not stopped. Nothing is written.
    Ended,
}

/// What a stop asked of the session `head` at `now` (the store's clock)
/// makes of it: the run settled as stopped at once if no run holds it,
/// else the request recorded for the run that does.
pub(crate) fn stop(
    head: &StoredRun,
    now: u64,
    start: &str,
    config: &SessionConfig,
) -> (Option<Commit>, Stopping) {
    if head.phase != SessionPhase::Running {
        return (None, Stopping::NotRunning(head.phase.clone()));
    }
    match in_flight(head, now) {
        None => {
            // A run whose last step ended it, its end not yet recorded,
            // ended as that step said.
            let signal = head.ended_with.clone().unwrap_or(Signal::STOPPED);
            let phase = SessionPhase::Completed { signal };
            let next_step = head
                .ended_with
                .is_none()
                .then_some(head.next_step.as_deref())
                .flatten();
            let settled = settle(head, phase, next_step, journals(head), start, config);
            (Some(settled), Stopping::Stopped)
        }
        Some(held) => {
            let asked = Stopping::Asked { owner: held.owner };
            if head.stop_requested.as_ref() == Some(&head.run_id) {
                return (None, asked);
            }
            let mut next = next_of(head, now_millis());
            next.stop_requested = Some(head.run_id.clone());
            (Some(head_only(next, head, true)), asked)
        }
    }
}

/// Whether the run of `head` was asked to stop from outside its process.
pub(crate) fn stop_asked(head: &StoredRun) -> bool {
    head.stop_requested.as_ref() == Some(&head.run_id)
}

/// Commits what `decide` makes of the session's current head (`None` if
/// there is no such session; `decide` may make no commit), deciding again from the new head each time
/// another writer wins the compare-and-set, up to 16 times. A head whose
/// counters cannot be moved on is refused ([`check_counters`]) before
/// `decide` sees it. After each
/// lost race it waits a random while, up to twice as long each time (50 µs
/// to 25 ms): a writer that saves again and again at once would otherwise
/// win every race against one whose read and commit take longer.
pub(crate) async fn commit_with_retry<T>(
    store: &dyn SessionStore,
    session: &SessionId,
    mut decide: impl FnMut(Option<&StoredRun>) -> Result<(Option<Commit>, T), SessionError>,
) -> Result<T, SessionError> {
    for lost in 0..16u32 {
        if lost > 0 {
            let most = 50u64 << lost.min(9);
            let micros = (uuid::Uuid::new_v4().as_u128() as u64) % (most + 1);
            tokio::time::sleep(std::time::Duration::from_micros(micros)).await;
        }
        let head = store.load(session).await?;
        if let Some(head) = &head {
            check_counters(head)?;
        }
        let (commit, value) = decide(head.as_ref())?;
        let Some(mut commit) = commit else {
            return Ok(value);
        };
        super::depth::redact_commit(&mut commit);
        super::check_commit(&commit).map_err(StoreError::from)?;
        match store.commit(&commit).await {
            Ok(()) => return Ok(value),
            Err(StoreError::Conflict { .. }) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(SessionError::Store(StoreError::backend(format!(
        "session {session} kept changing while it was being written"
    ))))
}

/// Saves `value` as the whole state of session `session` of `owner`,
/// outside any run: a completed session whose one snapshot holds the value,
/// replacing the previous one. For data that is kept in a session store but
/// is not a loop's state (a code notebook, say); [`load_value`] reads it
/// back. Workers never take such a session, since it is not running.
///
/// # Errors
///
/// [`SessionError::Load`] if `session` exists and belongs to another owner,
/// or its counters are past what a session reaches (an edited head; see
/// [`load_saved`]); nothing is written. Or the store's error.
pub async fn save_value(
    store: &dyn SessionStore,
    owner: &str,
    session: &SessionId,
    value: Value,
) -> Result<(), SessionError> {
    commit_with_retry(store, session, |head| {
        if let Some(head) = head {
            check_owner(head, owner)?;
        }
        Ok((Some(save_commit(head, owner, session, value.clone())), ()))
    })
    .await
}

/// The commit [`save_value`] makes: `value` saved as session `session` of
/// `owner` in place of `prev`, the head it was read under (`None` for a
/// new session), on the condition that nobody wrote the session since (the
/// store answers [`StoreError::Conflict`] otherwise). For a read-decide-
/// write of a saved value: read it with [`load_saved`], decide, commit
/// this, and read again on a conflict.
///
/// `prev` is a head [`load_saved`] read, which refuses one whose counters
/// are past what a session reaches (its version and last checkpoint are
/// moved on here); past `u64::MAX` they would stay where they are, never
/// wrap.
pub fn save_commit(
    prev: Option<&StoredRun>,
    owner: &str,
    session: &SessionId,
    value: Value,
) -> Commit {
    let now = now_millis();
    let seq = prev.map_or(0, |h| h.last_seq.saturating_add(1));
    let next = StoredRun {
        schema_version: SCHEMA_VERSION,
        session_id: session.clone(),
        agent_id: owner.to_string(),
        run_id: prev.map_or_else(RunId::random, |h| h.run_id.clone()),
        phase: SessionPhase::Completed {
            signal: Signal::new(SAVED),
        },
        next_step: None,
        ended_with: None,
        steps: 0,
        journal: StepJournal::default(),
        branch_journals: BTreeMap::new(),
        version: prev.map_or(1, |h| h.version.saturating_add(1)),
        lease: None,
        snapshot_seq: seq,
        snapshot_index: 0,
        state_bytes: json_len(&value),
        bytes_since_snapshot: 0,
        measured_index: 0,
        last_seq: seq,
        created_at: prev.map_or(now, |h| h.created_at),
        updated_at: now,
        queued: Vec::new(),
        stop_requested: None,
        run_start: Some(0),
    };
    let saved = Checkpoint {
        seq,
        index: 0,
        step: SAVED.into(),
        time: now,
        kind: CheckpointKind::Snapshot(value),
    };
    let remove = prev.map(|h| vec![h.snapshot_seq]).unwrap_or_default();
    commit(next, prev.map(|h| h.version), vec![saved], remove, true)
}

/// The value saved with [`save_value`] as session `session` of `owner`;
/// `None` if there is no such session.
///
/// # Errors
///
/// As [`load_saved`].
pub async fn load_value(
    store: &dyn SessionStore,
    owner: &str,
    session: &SessionId,
) -> Result<Option<Value>, SessionError> {
    Ok(load_saved(store, owner, session).await?.map(|s| s.value))
}

/// A value saved with [`save_value`], with the head it was read under.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Saved {
    /// The session's head: [`save_commit`] takes it, to write the value
    /// again on the condition that nobody wrote it since.
    pub head: StoredRun,
    /// The value.
    pub value: Value,
}

/// The value saved with [`save_value`] as session `session` of `owner`,
/// with its head; `None` if there is no such session.
///
/// The head and the value are two reads: a writer that saves the session
/// in between replaces the snapshot the head names, and the head is then
/// read again (up to 16 times).
///
/// # Errors
///
/// [`SessionError::Load`] if the session belongs to another owner, if its
/// counters are past what a session reaches (an edited head, which
/// [`save_commit`] could not move on), or if its snapshot is missing while
/// its head stays the same (damage); the store's error, also when the
/// session keeps changing while it is read.
pub async fn load_saved(
    store: &dyn SessionStore,
    owner: &str,
    session: &SessionId,
) -> Result<Option<Saved>, SessionError> {
    let mut read_under = None;
    for _ in 0..16 {
        let Some(head) = store.load(session).await? else {
            return Ok(None);
        };
        check_owner(&head, owner)?;
        let snapshot = store
            .checkpoints(session, head.snapshot_seq)
            .await?
            .into_iter()
            .find(|c| c.seq == head.snapshot_seq);
        match snapshot {
            Some(Checkpoint {
                kind: CheckpointKind::Snapshot(value),
                ..
            }) => return Ok(Some(Saved { head, value })),
            _ if read_under == Some(head.version) => {
                return Err(super::StoreLoad::new(
                    session.clone(),
                    format!("checkpoint {}", head.snapshot_seq),
                    "the saved value's snapshot is missing",
                )
                .into());
            }
            // Replaced since the head was read, or damaged: read again.
            _ => read_under = Some(head.version),
        }
    }
    Err(SessionError::Store(StoreError::backend(format!(
        "session {session} kept changing while it was being read"
    ))))
}

/// A session of another owner is refused by name, before anything is read
/// or written; so is one whose counters cannot be moved on
/// ([`check_counters`]): every read of a head that an agent or a saved
/// value acts on goes through here.
pub(crate) fn check_owner(head: &StoredRun, owner: &str) -> Result<(), SessionError> {
    if head.agent_id == owner {
        check_counters(head)?;
        return Ok(());
    }
    Err(super::StoreLoad::new(
        head.session_id.clone(),
        "head",
        format!("the session belongs to `{}`, not `{owner}`", head.agent_id),
    )
    .into())
}

/// Appends `input` (a run's input, merged through the reducers) to `head`'s
/// log as an `$input` update, counted like any update; returns the
/// checkpoint to commit with the head.
fn push_input(head: &mut StoredRun, input: Value, time: u64) -> Checkpoint {
    // Saturating, never wrapping (see `MAX_COUNTER`; `submit` checks).
    head.last_seq = head.last_seq.saturating_add(1);
    head.steps = head.steps.saturating_add(1);
    head.bytes_since_snapshot = head.bytes_since_snapshot.saturating_add(json_len(&input));
    Checkpoint {
        seq: head.last_seq,
        index: head.steps,
        step: INPUT.into(),
        time,
        kind: CheckpointKind::Update(input),
    }
}

/// The size of `value` as stored (compact JSON), counted without building
/// the text.
pub(crate) fn json_len<T: serde::Serialize + ?Sized>(value: &T) -> u64 {
    struct Count(u64);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // The sink cannot fail; a value that cannot be serialized counts what
    // was written before the error (callers serialize it for real anyway).
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A running session of agent `a`, with these counters.
    fn stored(version: u64, steps: u64, last_seq: u64) -> StoredRun {
        let new = NewSession {
            agent_id: "a",
            run_id: RunId::from("r"),
            session_id: SessionId::from("s"),
            state: json!({}),
            next_step: "think",
            lease: None,
        };
        let mut head = create(new, &SessionConfig::default()).head;
        head.version = version;
        head.steps = steps;
        head.last_seq = last_seq;
        head
    }

    fn lease() -> Lease {
        Lease {
            owner: "me".into(),
            expires_at: u64::MAX,
        }
    }

    fn done() -> StepDone<'static> {
        StepDone {
            step: "think",
            update: json!({"n": 1}),
            next_step: Some("think"),
            signal: None,
            steps_this_run: 1,
            fork: None,
        }
    }

    fn step(head: &StoredRun, config: &SessionConfig) -> Result<Commit, StoreError> {
        step_done(head, done(), lease(), config, || 0, || Ok(json!({})))
    }

    #[test]
    fn counters_past_the_limit_are_refused_by_name() {
        for (name, head) in [
            ("version", stored(MAX_COUNTER + 1, 0, 0)),
            ("version", stored(u64::MAX, 0, 0)),
            ("steps", stored(1, MAX_COUNTER + 1, 0)),
            ("steps", stored(1, u64::MAX, 0)),
            ("last_seq", stored(1, 0, MAX_COUNTER + 1)),
            ("last_seq", stored(1, 0, u64::MAX)),
        ] {
            let e = check_counters(&head).unwrap_err();
            assert_eq!(e.record, "head");
            assert!(e.reason.contains(&format!("`{name}` is")), "{e}");
        }
        let at_limit = stored(MAX_COUNTER, MAX_COUNTER, MAX_COUNTER);
        assert_eq!(check_counters(&at_limit), Ok(()));
        assert!(check_owner(&at_limit, "a").is_ok());
        assert!(matches!(
            check_owner(&stored(u64::MAX, 0, 0), "a"),
            Err(SessionError::Load(_))
        ));
    }

    /// A step whose counters would overflow is a load error naming the
    /// counter; one that reaches `u64::MAX` exactly is made.
    #[test]
    fn a_step_past_u64_max_is_a_load_error_not_an_overflow() {
        let plain = SessionConfig {
            snapshot_every: 0,
            ..SessionConfig::default()
        };
        // Every step measures and snapshots: two seqs per step.
        let snapshots = SessionConfig {
            snapshot_every: 1,
            ..SessionConfig::default()
        };
        let max = u64::MAX;
        for (config, head, counter) in [
            (&plain, stored(max, 0, 0), "version"),
            (&plain, stored(1, max, 0), "steps"),
            (&plain, stored(1, 0, max), "last_seq"),
            (&snapshots, stored(1, 0, max - 1), "last_seq"),
        ] {
            match step(&head, config) {
                Err(StoreError::Load(e)) => {
                    assert!(e.reason.contains(&format!("`{counter}` is")), "{e}")
                }
                other => panic!("{counter}: expected a load error, got {other:?}"),
            }
        }
        let c = step(&stored(max - 1, max - 1, max - 1), &plain).unwrap();
        assert_eq!(
            (c.head.version, c.head.steps, c.head.last_seq),
            (max, max, max)
        );
        assert_eq!(c.expected_version, Some(max - 1));
        assert_eq!(c.append[0].seq, max);
    }

    /// `submit` refuses a head it cannot move on; `quarantine` sets aside a
    /// head past the limit while its version can still be moved on, and
    /// leaves one at `u64::MAX` as it is.
    #[test]
    fn submit_and_quarantine_never_overflow() {
        let mut finished = stored(u64::MAX, 3, 3);
        finished.phase = SessionPhase::Failed { error: "e".into() };
        for head in [
            finished.clone(),
            stored(u64::MAX, 3, 3),
            stored(1, u64::MAX, 3),
            stored(1, 3, u64::MAX),
        ] {
            assert!(matches!(
                submit(&head, &json!({"n": 1}), Busy::Queue, "think"),
                Err(SessionError::Load(_))
            ));
        }
        assert!(quarantine(&stored(u64::MAX, 0, 0), "a", "why", 0).is_none());
        let set_aside = quarantine(&stored(MAX_COUNTER + 1, 0, 0), "a", "why", 0).unwrap();
        assert_eq!(set_aside.head.version, MAX_COUNTER + 2);
        assert!(matches!(set_aside.head.phase, SessionPhase::Failed { .. }));
    }

    /// An ended session that still has runs queued (a quarantined one
    /// keeps them) starts the first of them on the next submit, and queues
    /// the new run behind the rest; `Reject` refuses it and changes nothing.
    #[test]
    fn a_submit_on_an_ended_session_never_jumps_its_queue() {
        for phase in [
            SessionPhase::Failed {
                error: "quarantined".into(),
            },
            SessionPhase::Completed {
                signal: Signal::from("done"),
            },
        ] {
            let mut head = stored(5, 3, 3);
            head.phase = phase.clone();
            head.queued = vec![json!({"n": 1}), json!({"n": 2})];
            let (commit, submitted) =
                submit(&head, &json!({"n": 3}), Busy::Queue, "think").unwrap();
            assert_eq!(submitted, Submitted::Queued { position: 2 }, "{phase:?}");
            assert_eq!(commit.head.phase, SessionPhase::Running);
            assert_eq!(commit.head.next_step.as_deref(), Some("think"));
            assert_eq!(commit.head.queued, [json!({"n": 2}), json!({"n": 3})]);
            assert_eq!(commit.append.len(), 1);
            assert!(
                matches!(&commit.append[0].kind, CheckpointKind::Update(v) if *v == json!({"n": 1})),
                "the first queued run starts: {:?}",
                commit.append[0].kind
            );
            assert!(matches!(
                submit(&head, &json!({"n": 3}), Busy::Reject, "think"),
                Err(SessionError::InFlight(_))
            ));
            // Without a queue, the run starts at once.
            head.queued.clear();
            let (commit, submitted) =
                submit(&head, &json!({"n": 3}), Busy::Reject, "think").unwrap();
            assert_eq!(submitted, Submitted::Runnable);
            assert!(commit.head.queued.is_empty());
        }
    }

    /// A run that fails, or is stopped, starts the next run queued on its
    /// session, as one that completes does; one that pauses keeps it.
    #[test]
    fn an_ended_run_starts_the_next_queued_one_a_paused_run_keeps_it() {
        let config = SessionConfig::default();
        let ends = [
            SessionPhase::Failed {
                error: "boom".into(),
            },
            SessionPhase::Completed {
                signal: Signal::from("$stopped"),
            },
            SessionPhase::Completed {
                signal: Signal::from("done"),
            },
        ];
        for phase in ends {
            let mut head = stored(5, 3, 3);
            head.queued = vec![json!({"n": 1}), json!({"n": 2})];
            // The journals the ended run's step kept (a failed step keeps
            // its `once` results, for a recover).
            let mut kept = Journals::new();
            let mut journal = StepJournal::default();
            journal.once.insert("charge".into(), json!("paid"));
            kept.insert(TaskPath::root(), journal.clone());
            kept.insert(TaskPath::from("branch-0"), journal);
            let c = settle(&head, phase.clone(), Some("think"), kept, "think", &config);
            assert_eq!(c.head.journal, StepJournal::default(), "{phase:?}");
            assert!(c.head.branch_journals.is_empty(), "{phase:?}");
            assert_eq!(c.head.phase, SessionPhase::Running, "{phase:?}");
            assert_eq!(c.head.queued, [json!({"n": 2})]);
            assert_eq!(c.head.next_step.as_deref(), Some("think"));
            assert_ne!(c.head.run_id, head.run_id);
            assert!(c.durable, "the start of a queued run waits for the disk");
        }
        let mut head = stored(5, 3, 3);
        head.queued = vec![json!({"n": 1})];
        let paused = SessionPhase::Interrupted {
            interrupt: crate::step::Interrupt {
                id: "i1".into(),
                step: "ask".into(),
                path: TaskPath::default(),
                payload: json!("ok?"),
                breakpoint: None,
            },
        };
        let c = settle(
            &head,
            paused.clone(),
            Some("ask"),
            Journals::new(),
            "think",
            &config,
        );
        assert_eq!(c.head.phase, paused);
        assert_eq!(c.head.queued, [json!({"n": 1})]);
        assert!(c.append.is_empty());
    }

    /// A quarantine spends a stop asked of the run: a recover after it
    /// runs the session instead of stopping it at once.
    #[test]
    fn a_quarantine_spends_a_stop_asked_of_the_run() {
        let mut head = stored(5, 3, 3);
        head.stop_requested = Some(head.run_id.clone());
        assert!(stop_asked(&head));
        let set_aside = quarantine(&head, "a", "why", 0).unwrap();
        assert_eq!(set_aside.head.stop_requested, None);
        assert!(!stop_asked(&set_aside.head));
    }

    /// Past `u64::MAX` (a head that did not come from `load_saved`, which
    /// refuses it) `save_commit` keeps the counters where they are rather
    /// than wrapping `last_seq` to 0, the seq of a first snapshot.
    #[test]
    fn save_commit_never_wraps() {
        let mut prev = stored(u64::MAX, 0, u64::MAX);
        prev.snapshot_seq = u64::MAX;
        let c = save_commit(Some(&prev), "a", &SessionId::from("s"), json!(1));
        assert_eq!(c.head.last_seq, u64::MAX);
        assert_eq!(c.head.version, u64::MAX);
        assert_eq!(c.append[0].seq, u64::MAX);
    }
}
