//! Branches side by side on a journal that replays by order
//! ([`EffectJournal::ordered`]): their effects are handed to the journal in
//! an order fixed by the branches' own logic, never by timing, while the
//! effects themselves run at once.
//!
//! The order is by turns: every branch's first effect, in branch order,
//! then every branch's second effect, and so on; a branch that has ended
//! (reached the join, paused, failed) is passed over. Turn `(n, i)` — the
//! `n`-th effect of branch `i` — is handed to the journal only after every
//! turn before it has been handed over or can no longer come. A branch
//! that takes long to reach its next effect holds back the branches after
//! it only until it asks (or ends), not until its effect is done; effects
//! handed over run side by side, at most the fork's limit at once.
//!
//! A replay asks for the same effects of each branch in the same order (the
//! rule for steps), so it hands the journal the same sequence.

use super::{EffectError, EffectId, EffectJournal, Journaled};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::Notify;

tokio::task_local! {
    /// The branch a future runs as, in the turns of its fork.
    static BRANCH: Branch;
}

/// One branch of a fork whose effects take turns.
#[derive(Clone)]
struct Branch {
    turns: Arc<Turns>,
    index: usize,
}

/// The turns of one fork's branches.
pub(crate) struct Turns {
    state: Mutex<State>,
    changed: Notify,
    limit: usize,
}

struct State {
    /// Per branch: the effects it has asked for so far.
    asked: Vec<u64>,
    /// Per branch: whether it has ended (it asks for no more).
    ended: Vec<bool>,
    /// Turns given up before they were handed over (a step cut short by
    /// its timeout while it waited): passed over.
    abandoned: Vec<(u64, usize)>,
    /// The next turn to hand over: (round, branch).
    next: (u64, usize),
    /// Effects handed over and not yet done.
    running: usize,
    /// Whether a turn is being handed over now.
    handing: bool,
}

impl State {
    /// Moves `next` to the turn after it.
    fn step(&mut self) {
        let (round, i) = self.next;
        self.next = if i + 1 == self.asked.len() {
            (round + 1, 0)
        } else {
            (round, i + 1)
        };
    }

    /// Moves `next` past the turns that can no longer come.
    fn pass_over(&mut self) {
        while !self.ended.iter().all(|e| *e) || self.asked.iter().any(|a| *a > self.next.0) {
            let (round, i) = self.next;
            let gone = self.ended[i] && self.asked[i] <= round;
            let abandoned = self.abandoned.contains(&(round, i));
            if !gone && !abandoned {
                return;
            }
            if abandoned {
                self.abandoned.retain(|t| *t != (round, i));
            }
            self.step();
        }
    }
}

impl Turns {
    /// Turns for `branches` branches, those in `ended` already at the join;
    /// at most `limit` effects running at once.
    pub(crate) fn new(branches: usize, ended: &[bool], limit: usize) -> Arc<Self> {
        let mut state = State {
            asked: vec![0; branches],
            ended: ended.to_vec(),
            abandoned: Vec::new(),
            next: (0, 0),
            running: 0,
            handing: false,
        };
        state.pass_over();
        Arc::new(Self {
            state: Mutex::new(state),
            changed: Notify::new(),
            limit: limit.max(1),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `fut` as branch `index`: its effects take their turns, and the
    /// branch ends when `fut` returns or is dropped.
    pub(crate) async fn branch<F: std::future::Future>(
        self: &Arc<Self>,
        index: usize,
        fut: F,
    ) -> F::Output {
        let _ended = EndOnDrop {
            turns: Arc::clone(self),
            index,
        };
        BRANCH
            .scope(
                Branch {
                    turns: Arc::clone(self),
                    index,
                },
                fut,
            )
            .await
    }
}

/// Whether the current future runs as a branch whose effects take turns
/// (a fork inside it then runs its branches one after the other: they are
/// part of this branch's sequence).
pub(crate) fn taking_turns() -> bool {
    BRANCH.try_with(|_| ()).is_ok()
}

struct EndOnDrop {
    turns: Arc<Turns>,
    index: usize,
}

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        let mut state = self.turns.lock();
        state.ended[self.index] = true;
        state.pass_over();
        drop(state);
        self.turns.changed.notify_waiters();
    }
}

/// An effect handed to the journal in its turn: running until dropped.
pub(crate) struct Running(Option<Arc<Turns>>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(turns) = self.0.take() {
            turns.lock().running -= 1;
            turns.changed.notify_waiters();
        }
    }
}

/// A turn taken and not yet handed over: given up if dropped.
struct Waiting {
    turns: Arc<Turns>,
    turn: (u64, usize),
    handed: bool,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut state = self.turns.lock();
        if self.handed {
            state.handing = false;
        }
        if state.next == self.turn {
            // Not handed over (its step was cut short while it waited or
            // while the journal answered): the next turn may go.
            state.step();
        } else if !self.handed {
            state.abandoned.push(self.turn);
        }
        state.pass_over();
        drop(state);
        self.turns.changed.notify_waiters();
    }
}

/// Asks `journal` about `effect`: at once, or, in a branch whose effects
/// take turns, in its turn. The returned guard holds the effect's place
/// among those running until it is dropped (after its outcome is
/// recorded).
pub(crate) async fn begin(
    journal: &dyn EffectJournal,
    effect: &EffectId,
) -> Result<(Journaled, Running), EffectError> {
    let Ok(branch) = BRANCH.try_with(Branch::clone) else {
        return Ok((journal.begin(effect).await?, Running(None)));
    };
    let turns = &branch.turns;
    let turn = {
        let mut state = turns.lock();
        let round = state.asked[branch.index];
        state.asked[branch.index] += 1;
        (round, branch.index)
    };
    let mut waiting = Waiting {
        turns: Arc::clone(turns),
        turn,
        handed: false,
    };
    loop {
        let changed = turns.changed.notified();
        {
            let mut state = turns.lock();
            if state.next == turn && !state.handing && state.running < turns.limit {
                state.handing = true;
                waiting.handed = true;
                break;
            }
        }
        changed.await;
    }
    let journaled = journal.begin(effect).await;
    let running = {
        let mut state = turns.lock();
        let run = matches!(journaled, Ok(Journaled::Run(_)));
        if run {
            state.running += 1;
        }
        // The turn is handed over: the next one may go.
        state.step();
        run
    };
    // Clears `handing`, passes over what can no longer come, wakes the
    // waiting turns.
    drop(waiting);
    Ok((
        journaled?,
        Running(running.then(|| Arc::clone(&branch.turns))),
    ))
}
