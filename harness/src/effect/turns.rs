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
//!
//! A journal that [`batches`](EffectJournal::batches) is handed a round at a
//! time instead: the turns `(n, 0)`, `(n, 1)`, … of one round (at most the
//! fork's limit of them), once every one of them has been asked for or can
//! no longer come and the effects of the round before are done. Which
//! turns make a round depends on the branches' logic only, so a replay
//! hands over the same rounds.

use super::{EffectError, EffectId, EffectJournal, Journaled};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::{Notify, oneshot};

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
    /// Handed over a round at a time ([`EffectJournal::batches`]).
    batched: bool,
    /// The branches' model calls that are not journaled (`cx.complete`):
    /// at most `limit` at once, as their effects ([`call_permits`]).
    calls: Arc<tokio::sync::Semaphore>,
}

/// What a turn waiting in a round is answered with: the journal's answer,
/// and the effect's place among those running (given up with the answer
/// if the turn's step is gone).
type Answer = Result<(Journaled, Running), EffectError>;

/// A turn asked for and waiting for its round to be handed over.
struct Asked {
    effect: EffectId,
    answer: oneshot::Sender<Answer>,
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
    /// Whether a turn (or round) is being handed over now.
    handing: bool,
    /// Rounds only: the turns asked for and not yet handed over.
    asked_for: BTreeMap<(u64, usize), Asked>,
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

    /// The round that can be handed over now, if one can: from `next`, the
    /// turns of its round (at most `limit`), each asked for or passed over
    /// as unable to come, with none running. Taken out of `asked_for`, and
    /// `next` moved past them.
    fn round(&mut self, limit: usize) -> Option<Vec<Asked>> {
        if self.handing || self.running > 0 {
            return None;
        }
        self.pass_over();
        let (round, _) = self.next;
        let mut at = self.next;
        let mut turns = Vec::new();
        while at.0 == round && turns.len() < limit {
            let (n, i) = at;
            let gone = self.ended[i] && self.asked[i] <= n;
            if self.asked_for.contains_key(&at) {
                turns.push(at);
            } else if !gone && !self.abandoned.contains(&at) {
                // A branch still to ask for its effect of this round.
                return None;
            }
            at = if i + 1 == self.asked.len() {
                (n + 1, 0)
            } else {
                (n, i + 1)
            };
        }
        if turns.is_empty() {
            return None;
        }
        let from = self.next;
        self.abandoned.retain(|t| *t < from || *t >= at);
        self.next = at;
        self.handing = true;
        Some(
            turns
                .iter()
                .filter_map(|t| self.asked_for.remove(t))
                .collect(),
        )
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
    /// at most `limit` effects running at once; handed over a round at a
    /// time if `batched`.
    pub(crate) fn new(branches: usize, ended: &[bool], limit: usize, batched: bool) -> Arc<Self> {
        let mut state = State {
            asked: vec![0; branches],
            ended: ended.to_vec(),
            abandoned: Vec::new(),
            next: (0, 0),
            running: 0,
            handing: false,
            asked_for: BTreeMap::new(),
        };
        state.pass_over();
        Arc::new(Self {
            state: Mutex::new(state),
            changed: Notify::new(),
            limit: limit.max(1),
            batched,
            calls: Arc::new(tokio::sync::Semaphore::new(
                limit.clamp(1, tokio::sync::Semaphore::MAX_PERMITS),
            )),
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

/// In a branch of a fork whose effects take turns, the permits of the
/// model calls that are not journaled (`cx.complete`), one held while a
/// call runs: at most the fork's limit of them at once, as for its
/// effects, since every branch runs. `None` elsewhere (the fork's limit
/// bounds the branches themselves there). Taken when a step's context is
/// made, so that its calls from a task it spawned hold them too. Which
/// call gets a permit first depends on timing, which is harmless: nothing
/// of it is journaled.
pub(crate) fn call_permits() -> Option<Arc<tokio::sync::Semaphore>> {
    BRANCH.try_with(|b| Arc::clone(&b.turns.calls)).ok()
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
    if turns.batched {
        return in_round(journal, effect, turns, turn).await;
    }
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

/// A turn asked for and waiting in its round: given up if dropped before
/// its round is handed over.
struct InRound {
    turns: Arc<Turns>,
    turn: (u64, usize),
}

impl Drop for InRound {
    fn drop(&mut self) {
        let mut state = self.turns.lock();
        if state.asked_for.remove(&self.turn).is_some() {
            state.abandoned.push(self.turn);
            state.pass_over();
        }
        drop(state);
        self.turns.changed.notify_waiters();
    }
}

/// A round being handed over: `handing` is cleared when done, or when the
/// step that hands it over is cut short (its turns then fail).
struct Handing(Arc<Turns>);

impl Drop for Handing {
    fn drop(&mut self) {
        self.0.lock().handing = false;
        self.0.changed.notify_waiters();
    }
}

/// `effect`, the turn `turn`, in its round: whichever branch finds the
/// round complete hands it over for all of its turns.
async fn in_round(
    journal: &dyn EffectJournal,
    effect: &EffectId,
    turns: &Arc<Turns>,
    turn: (u64, usize),
) -> Result<(Journaled, Running), EffectError> {
    let (answer, mut answered) = oneshot::channel();
    turns.lock().asked_for.insert(
        turn,
        Asked {
            effect: effect.clone(),
            answer,
        },
    );
    let _waiting = InRound {
        turns: Arc::clone(turns),
        turn,
    };
    loop {
        let changed = turns.changed.notified();
        let round = turns.lock().round(turns.limit);
        if let Some(round) = round {
            hand_over(journal, turns, round).await;
            continue;
        }
        tokio::select! {
            answer = &mut answered => {
                return answer.unwrap_or_else(|_| {
                    Err(EffectError::new(format!(
                        "effect {effect}: its round was being handed to the journal by a step \
                         that was cut short"
                    )))
                });
            }
            () = changed => {}
        }
    }
}

/// Hands `round` to the journal and each turn its answer.
async fn hand_over(journal: &dyn EffectJournal, turns: &Arc<Turns>, round: Vec<Asked>) {
    let _handing = Handing(Arc::clone(turns));
    let effects: Vec<EffectId> = round.iter().map(|a| a.effect.clone()).collect();
    match journal.begin_all(&effects).await {
        Ok(answers) if answers.len() == round.len() => {
            for (asked, journaled) in round.into_iter().zip(answers) {
                let running = if matches!(journaled, Journaled::Run(_)) {
                    turns.lock().running += 1;
                    Running(Some(Arc::clone(turns)))
                } else {
                    Running(None)
                };
                // A turn whose step is gone drops its answer, and with it
                // its place among those running.
                let _ = asked.answer.send(Ok((journaled, running)));
            }
        }
        Ok(answers) => {
            let message = format!(
                "the journal answered {} of a round of {} effects",
                answers.len(),
                round.len()
            );
            for asked in round {
                let _ = asked.answer.send(Err(EffectError::new(&message)));
            }
        }
        Err(e) => {
            let message = e.to_string();
            for asked in round {
                let _ = asked.answer.send(Err(EffectError::new(&message)));
            }
        }
    }
}
