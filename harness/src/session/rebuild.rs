//! Rebuilding a session's state from its log: the nearest snapshot, then the
//! updates after it through the reducers.

use super::{Checkpoint, CheckpointKind, SessionStore, StoreError, StoreLoad, StoredRun};
use crate::state::HarnessState;

/// The state of `session` after `index` steps (the latest when `None`):
/// the nearest snapshot at or before it, then the updates after it.
pub(crate) async fn rebuild<S: HarnessState>(
    store: &dyn SessionStore,
    head: &StoredRun,
    index: Option<u64>,
) -> Result<S, StoreError> {
    let target = index.unwrap_or(head.steps);
    let from = if target >= head.snapshot_index {
        head.snapshot_seq
    } else {
        0
    };
    let session = &head.session_id;
    let log = store.checkpoints(session, from).await?;
    let bad = |cp: &Checkpoint, reason: String| {
        StoreError::Load(StoreLoad {
            session: session.clone(),
            record: format!("checkpoint {} (step {} `{}`)", cp.seq, cp.index, cp.step),
            reason,
        })
    };
    let mut iter = log.iter();
    let mut state: S = match iter.next() {
        Some(cp) if cp.seq == from => match &cp.kind {
            CheckpointKind::Snapshot(v) => serde_json::from_value(v.clone()).map_err(|e| {
                bad(
                    cp,
                    format!("the snapshot does not fit this state type: {e}"),
                )
            })?,
            CheckpointKind::Update(_) => {
                return Err(bad(cp, "expected a snapshot, found an update".into()));
            }
        },
        _ => {
            return Err(StoreError::Load(StoreLoad {
                session: session.clone(),
                record: format!("checkpoint {from}"),
                reason: "the snapshot is missing".into(),
            }));
        }
    };
    for cp in iter {
        if cp.index > target {
            break;
        }
        if let CheckpointKind::Update(v) = &cp.kind {
            let update: S::Update = serde_json::from_value(v.clone())
                .map_err(|e| bad(cp, format!("the update does not fit this state type: {e}")))?;
            state.apply(update);
        }
    }
    Ok(state)
}
