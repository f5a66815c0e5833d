//! A run's save as plain object state, made a function of the journal.
//!
//! The save of a run (its head, the checkpoints it added, the reply) is
//! written with `ctx.set`, and Restate checks, on a replay, that every
//! state write the journal holds is made again with the same bytes. The
//! run's own ids (its run id, a new interrupt's id) and times (when each
//! checkpoint was written) are made by the core from the machine's clock
//! and its random numbers, which a replay makes anew. Journaling the save
//! in a `ctx.run` of its own keeps them, at the price of one more
//! acknowledged round trip to the server per run.
//!
//! This module takes them from the journal instead, where a run allows it
//! (collected as the run goes):
//! - each effect's entry journals, beside its outcome, when it started and
//!   ended, and the run's first entry a random seed;
//! - a checkpoint's time is that of the last entry completed before the
//!   commit that wrote it (the first entry's start for those before it):
//!   the run's time as its journal tells it, late by at most the pure
//!   computation between an effect's end and the next commit;
//! - the run's id is decided before the run starts, from what the journal
//!   holds by then (the object's key and the head loaded, or a new
//!   session's input), and given to the core through
//!   `EffectJournal::run_id`: steps (`cx.run_id()`), traces and the
//!   session all see that one;
//! - a new interrupt's id (which no step sees) is derived from the first
//!   entry's seed, and the head's version is the loaded one plus one.
//!
//! Only a run whose commits follow one another in an order the journal
//! fixes qualifies: one task at a time (no fork, fan-out or sub-agent
//! record added, not resumed inside a fork), at least one effect
//! journaled with its stamp, not cancelled, settled (no lease, nothing
//! queued), and with nothing that time itself may have decided: not
//! failed, and no effect its step gave up on (a step's time limit, which
//! a replay answered from the journal would not reach). Any other run journals
//! its save in an entry of its own (`save session`), which a replay is
//! answered from. Which of the two a run takes depends only on its
//! journal, so a replay takes the path of the attempt it replays.
//!
//! Checked against the real server by restarting a finished invocation as
//! a new one that replays its journal up to its last state write (the
//! restate tests' `a_loops_save_is_plain_state_that_a_replay_of_its_journal_writes_again`):
//! any byte a replay makes otherwise is a journal mismatch.

use std::collections::BTreeMap;

use harness::session::{CheckpointKind, SessionPhase, StoredRun};
use harness::{InterruptId, RunId};
use serde::{Deserialize, Serialize};

use super::{Outcome, Reply, Saved};

/// An effect's entry as journaled: its outcome (the shape it always had,
/// so that an entry journaled before stamps reads), when it ran (ms since
/// the epoch) and a random seed.
#[derive(Serialize, Deserialize)]
pub(super) struct Stamped {
    #[serde(flatten)]
    pub(super) outcome: Outcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) at: Option<(u64, u64)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) seed: Option<String>,
}

/// What a run's journal tells of its times, collected as the run goes.
#[derive(Debug, Default)]
pub(super) struct Clock {
    /// The entries journaled so far: when each started and ended.
    entries: Vec<(u64, u64)>,
    /// The seed of the run's first entry.
    seed: Option<String>,
    /// Set when the journal cannot fix the run's ids and times: an entry
    /// without a stamp, a round of a fork's effects, a cancellation, an
    /// effect its step gave up on.
    untimed: bool,
    /// For each checkpoint the run wrote, the number of entries completed
    /// when its commit was made.
    written_after: BTreeMap<u64, usize>,
}

impl Clock {
    /// An effect's entry, as journaled (or replayed): when it ran, and the
    /// seed the run's first entry carries.
    pub(super) fn entry(&mut self, at: Option<(u64, u64)>, seed: Option<String>) {
        match at {
            Some(at) => {
                if self.entries.is_empty() {
                    self.seed = seed;
                }
                self.entries.push(at);
            }
            None => self.untimed = true,
        }
    }

    /// Whether no entry has been journaled yet: the next one is the run's
    /// first, and carries its seed.
    pub(super) fn unseeded(&self) -> bool {
        self.entries.is_empty() && !self.untimed
    }

    /// Something the journal cannot order: the save is journaled.
    pub(super) fn untimed(&mut self) {
        self.untimed = true;
    }

    /// A commit that appended the checkpoints `seqs`, made now.
    pub(super) fn committed(&mut self, seqs: impl IntoIterator<Item = u64>) {
        let done = self.entries.len();
        for seq in seqs {
            self.written_after.insert(seq, done);
        }
    }

    /// The time of a commit made after `done` entries.
    fn time(&self, done: usize) -> u64 {
        match done.checked_sub(1) {
            None => self.entries[0].0,
            Some(last) => self.entries[last.min(self.entries.len() - 1)].1,
        }
    }
}

/// What the run's save must keep of the head it loaded.
#[derive(Debug, Default)]
pub(super) struct Before {
    pub(super) run_id: Option<RunId>,
    pub(super) interrupt: Option<InterruptId>,
    pub(super) version: u64,
    /// A fork was under way: the run may go on in its branches.
    pub(super) in_fork: bool,
}

impl Before {
    pub(super) fn of(head: &StoredRun) -> Self {
        Self {
            run_id: Some(head.run_id.clone()),
            interrupt: match &head.phase {
                SessionPhase::Interrupted { interrupt } => Some(interrupt.id.clone()),
                _ => None,
            },
            version: head.version,
            in_fork: !head.branch_journals.is_empty()
                || matches!(&head.phase, SessionPhase::Interrupted { interrupt } if !interrupt.path.is_root()),
        }
    }
}

/// The id of the run an attempt starts: derived from the object's `key`
/// and the head loaded (its run and version), or, for a new session, from
/// its `input`: what the journal holds before the run, so that a replay
/// of the attempt, and an invocation restarted from its journal, derive
/// the same id, while each run of a session gets its own (every run moves
/// the head on).
pub(super) fn run_id(key: &str, before: &Before, input: Option<&serde_json::Value>) -> RunId {
    let basis = match &before.run_id {
        Some(run) => serde_json::json!([key, run, before.version]),
        None => serde_json::json!([key, input]),
    };
    RunId::from(derived(&basis.to_string(), "run"))
}

/// An id derived from `seed` for `what`, in the shape of a UUID.
fn derived(seed: &str, what: &str) -> String {
    let hex = crate::sessions::sha256(format!("{seed}/{what}").as_bytes());
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// Whether a record can only come from tasks running side by side.
fn side_by_side(kind: &CheckpointKind) -> bool {
    matches!(
        kind,
        CheckpointKind::Fork(_)
            | CheckpointKind::Branch(_)
            | CheckpointKind::Join(_)
            | CheckpointKind::Child(_)
    )
}

/// Takes `saved`'s ids and times from the journal and answers `true`, or
/// answers `false` and leaves it as it is when the run does not qualify
/// (see the module docs): its save must then be journaled.
pub(super) fn canonical(saved: &mut Saved, clock: &Clock, before: &Before) -> bool {
    let Some(seed) = clock.seed.as_deref() else {
        return false;
    };
    let Some(head) = saved.head.as_ref() else {
        return false;
    };
    if clock.untimed
        || clock.entries.is_empty()
        || before.in_fork
        || head.lease.is_some()
        || !head.queued.is_empty()
        || head.stop_requested.is_some()
        || !head.branch_journals.is_empty()
        // A failure may come from time itself (a step's time limit: the
        // replay, answered from the journal, would not run out of it).
        || matches!(head.phase, SessionPhase::Running | SessionPhase::Failed { .. })
        || saved
            .append
            .iter()
            .any(|k| side_by_side(&k.cp.kind) || !clock.written_after.contains_key(&k.cp.seq))
    {
        return false;
    }
    // A new interrupt's id, to be replaced where the save is known to hold
    // it; found anywhere else (no step sees it, but an error may quote it)
    // it would keep a value the journal does not fix.
    let new_interrupt = match &head.phase {
        SessionPhase::Interrupted { interrupt }
            if before.interrupt.as_ref() != Some(&interrupt.id) =>
        {
            Some(interrupt.id.clone())
        }
        _ => None,
    };
    if let Some(id) = &new_interrupt {
        let Ok(text) = serde_json::to_string(&(&saved.head, &saved.append, &saved.reply)) else {
            return false;
        };
        let in_reply =
            matches!(&saved.reply, Reply::Interrupted { interrupt, .. } if interrupt.id == *id);
        if text.matches(id.as_str()).count() != 1 + usize::from(in_reply) {
            return false;
        }
    }
    for kept in &mut saved.append {
        kept.cp.time = clock.time(clock.written_after[&kept.cp.seq]);
    }
    // The settle came after every entry.
    let last = clock.time(clock.entries.len());
    let first = saved.append.first().map_or(last, |k| k.cp.time);
    let id = new_interrupt
        .as_ref()
        .map(|_| InterruptId::from(derived(seed, "interrupt")));
    if let Some(head) = saved.head.as_mut() {
        head.updated_at = last;
        if before.run_id.is_none() {
            head.created_at = first;
        }
        head.version = before.version + 1;
        if let (Some(id), SessionPhase::Interrupted { interrupt }) = (&id, &mut head.phase) {
            interrupt.id = id.clone();
        }
    }
    if let (Some(made), Some(id)) = (new_interrupt, id)
        && let Reply::Interrupted { interrupt, .. } = &mut saved.reply
        && interrupt.id == made
    {
        interrupt.id = id;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamped(entries: &[(u64, u64)]) -> Clock {
        let mut clock = Clock::default();
        for (i, at) in entries.iter().enumerate() {
            clock.entry(Some(*at), (i == 0).then(|| format!("seed-{i}")));
        }
        clock
    }

    #[test]
    fn a_commit_takes_the_time_of_the_last_entry_before_it() {
        let clock = stamped(&[(10, 20), (30, 45)]);
        assert_eq!(clock.time(0), 10, "before any entry: the first's start");
        assert_eq!(clock.time(1), 20);
        assert_eq!(clock.time(2), 45);
        assert_eq!(
            clock.seed.as_deref(),
            Some("seed-0"),
            "the first entry's seed"
        );
    }

    #[test]
    fn an_entry_without_a_stamp_or_a_round_leaves_the_run_untimed() {
        let mut clock = stamped(&[(1, 2)]);
        assert!(!clock.untimed);
        assert!(!clock.unseeded(), "the seed came with the first entry");
        clock.entry(None, None);
        assert!(clock.untimed);
        // A round first: no seed is asked for, and a stamped entry after
        // it does not make the run timed again.
        let mut round = Clock::default();
        assert!(round.unseeded());
        round.untimed();
        assert!(!round.unseeded());
        round.entry(Some((3, 4)), None);
        assert!(round.untimed && round.seed.is_none());
    }

    /// The save of a run that completed a new session, with its one
    /// checkpoint committed after `done` entries of `clock`.
    fn saved(clock: &mut Clock, done: usize, state: serde_json::Value) -> Saved {
        let commit = harness::session::save_commit(
            None,
            "probe",
            &harness::SessionId::from("s"),
            state.clone(),
        );
        let mut stamps = std::mem::take(&mut clock.entries);
        let later = stamps.split_off(done);
        clock.entries = stamps;
        clock.committed(commit.append.iter().map(|cp| cp.seq));
        clock.entries.extend(later);
        Saved {
            head: Some(commit.head),
            append: commit
                .append
                .into_iter()
                .map(|cp| crate::sessions::Kept {
                    cp,
                    refs: BTreeMap::new(),
                })
                .collect(),
            remove: Vec::new(),
            reply: Reply::Completed {
                signal: "done".into(),
                state,
            },
        }
    }

    fn text(saved: &Saved) -> String {
        serde_json::to_string(&(&saved.head, &saved.append, &saved.reply)).unwrap()
    }

    #[test]
    fn a_qualifying_save_takes_its_times_and_ids_from_the_journal_alone() {
        let run = run_id("s", &Before::default(), Some(&serde_json::json!({"n": 1})));
        let make = |wall_clock_shift: u64| {
            let mut clock = stamped(&[(100, 150), (160, 200)]);
            let mut save = saved(&mut clock, 1, serde_json::json!({"n": 1}));
            // What the core wrote from the machine's clock, with the run id
            // the journal gave it.
            let head = save.head.as_mut().unwrap();
            head.updated_at += wall_clock_shift;
            head.created_at += wall_clock_shift;
            head.version += wall_clock_shift;
            head.run_id = run.clone();
            save.append[0].cp.time += wall_clock_shift;
            assert!(canonical(&mut save, &clock, &Before::default()));
            save
        };
        let (a, b) = (make(0), make(7));
        assert_eq!(text(&a), text(&b), "two attempts, one save");
        let head = a.head.as_ref().unwrap();
        assert_eq!(a.append[0].cp.time, 150, "committed after the first entry");
        assert_eq!(
            (head.created_at, head.updated_at, head.version),
            (150, 200, 1),
            "created at its first checkpoint, updated after the last entry"
        );
        assert_eq!(head.run_id, run, "the run keeps the id it ran with");
    }

    #[test]
    fn a_new_interrupt_takes_the_journals_id_in_the_head_and_the_reply() {
        let mut clock = stamped(&[(1, 2)]);
        let mut save = saved(&mut clock, 1, serde_json::json!({}));
        let asked = harness::step::Interrupt {
            id: InterruptId::random(),
            step: "ask".into(),
            path: Default::default(),
            payload: serde_json::json!("ship it?"),
            breakpoint: None,
        };
        save.head.as_mut().unwrap().phase = SessionPhase::Interrupted {
            interrupt: asked.clone(),
        };
        save.reply = Reply::Interrupted {
            interrupt: asked.clone(),
            state: serde_json::json!({}),
        };
        assert!(canonical(&mut save, &clock, &Before::default()));
        let want = derived("seed-0", "interrupt");
        let SessionPhase::Interrupted { interrupt } = &save.head.as_ref().unwrap().phase else {
            panic!()
        };
        assert_eq!(interrupt.id.as_str(), want);
        assert!(
            matches!(&save.reply, Reply::Interrupted { interrupt, .. } if interrupt.id.as_str() == want)
        );
        assert!(!text(&save).contains(asked.id.as_str()));
        // A run that goes on waiting on the interrupt it loaded keeps its id.
        let mut clock = stamped(&[(1, 2)]);
        let mut again = saved(&mut clock, 1, serde_json::json!({}));
        again.head.as_mut().unwrap().phase = SessionPhase::Interrupted {
            interrupt: asked.clone(),
        };
        let before = Before {
            interrupt: Some(asked.id.clone()),
            ..Before::default()
        };
        assert!(canonical(&mut again, &clock, &before));
        assert!(matches!(
            &again.head.as_ref().unwrap().phase,
            SessionPhase::Interrupted { interrupt } if interrupt.id == asked.id
        ));
    }

    /// Makes a qualifying run one that does not qualify.
    type Spoil = dyn Fn(&mut Saved, &mut Clock, &mut Before);

    #[test]
    fn a_run_the_journal_does_not_fix_keeps_its_save_as_it_is() {
        let cases: Vec<(&str, Box<Spoil>)> = vec![
            (
                "failed",
                Box::new(|s, _, _| {
                    s.head.as_mut().unwrap().phase = SessionPhase::Failed {
                        error: "late".into(),
                    };
                }),
            ),
            (
                "running",
                Box::new(|s, _, _| {
                    s.head.as_mut().unwrap().phase = SessionPhase::Running;
                }),
            ),
            (
                "a fork",
                Box::new(|s, _, _| {
                    s.append[0].cp.kind = CheckpointKind::Join(harness::session::JoinRecord {
                        path: Default::default(),
                        branches: Vec::new(),
                    });
                }),
            ),
            ("untimed", Box::new(|_, c, _| c.untimed())),
            ("no entry", Box::new(|_, c, _| c.entries.clear())),
            ("uncommitted", Box::new(|_, c, _| c.written_after.clear())),
            (
                "queued",
                Box::new(|s, _, _| s.head.as_mut().unwrap().queued.push(serde_json::json!({}))),
            ),
            (
                "leased",
                Box::new(|s, _, _| {
                    s.head.as_mut().unwrap().lease = Some(harness::session::Lease {
                        owner: "w".into(),
                        expires_at: 9,
                    });
                }),
            ),
            (
                "its new interrupt's id quoted",
                Box::new(|s, _, _| {
                    let id = InterruptId::random();
                    s.head.as_mut().unwrap().phase = SessionPhase::Interrupted {
                        interrupt: harness::step::Interrupt {
                            id: id.clone(),
                            step: "ask".into(),
                            path: Default::default(),
                            payload: serde_json::json!({"asked": id.as_str()}),
                            breakpoint: None,
                        },
                    };
                }),
            ),
            ("in a fork", Box::new(|_, _, b| b.in_fork = true)),
        ];
        for (what, spoil) in cases {
            let mut clock = stamped(&[(1, 2)]);
            let mut save = saved(&mut clock, 1, serde_json::json!({"n": 1}));
            let mut before = Before::default();
            spoil(&mut save, &mut clock, &mut before);
            let as_it_was = text(&save);
            assert!(!canonical(&mut save, &clock, &before), "{what}");
            assert_eq!(text(&save), as_it_was, "{what}: changed");
        }
    }

    #[test]
    fn a_runs_id_is_fixed_by_what_the_journal_holds_before_it() {
        let input = serde_json::json!({"n": 1});
        let new = Before::default();
        let first = run_id("s", &new, Some(&input));
        assert_eq!(first, run_id("s", &new, Some(&input)), "a replay's");
        assert_ne!(first, run_id("t", &new, Some(&input)), "another session's");
        assert_ne!(first, run_id("s", &new, Some(&serde_json::json!({"n": 2}))));
        let after = |version| Before {
            run_id: Some(first.clone()),
            version,
            ..Before::default()
        };
        let second = run_id("s", &after(3), Some(&input));
        assert_ne!(second, first, "the next run of the session");
        assert_ne!(second, run_id("s", &after(4), Some(&input)));
        assert_eq!(first.as_str().len(), 36);
    }

    #[test]
    fn derived_ids_are_uuid_shaped_and_differ_by_seed_and_purpose() {
        let a = derived("s", "run");
        assert_eq!(a.len(), 36);
        assert_eq!(a.matches('-').count(), 4);
        assert_eq!(a, derived("s", "run"));
        assert_ne!(a, derived("s", "interrupt"));
        assert_ne!(a, derived("t", "run"));
    }

    #[test]
    fn a_stamped_entry_reads_an_entry_journaled_before_stamps() {
        let old: Stamped = serde_json::from_str(r#"{"Ok":{"n":1}}"#).unwrap();
        assert!(old.at.is_none() && old.seed.is_none());
        assert_eq!(old.outcome, Ok(serde_json::json!({"n": 1})));
        let failed: Stamped = serde_json::from_str(r#"{"Err":"no"}"#).unwrap();
        assert_eq!(failed.outcome, Err("no".to_string()));
        let new = Stamped {
            outcome: Ok(serde_json::json!([1, 2])),
            at: Some((5, 9)),
            seed: Some("x".into()),
        };
        let text = serde_json::to_string(&new).unwrap();
        let back: Stamped = serde_json::from_str(&text).unwrap();
        assert_eq!(
            (back.outcome, back.at, back.seed),
            (new.outcome, new.at, new.seed)
        );
    }
}
