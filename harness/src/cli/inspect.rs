//! The read-only commands on any store, without the state type.

use super::render;
use super::{CommandError, InspectCommand};
use crate::ids::SessionId;
use crate::session::{
    Checkpoint, CheckpointInfo, CheckpointKind, NoSession, SessionError, SessionStore, Span,
    StoreError, StoreLoad, StoredRun, read_log,
};
use std::fmt::Write;

impl InspectCommand {
    /// Runs the command on `store` and returns what to print. It only reads
    /// (`sessions`, `load`, `checkpoints`): it never commits.
    ///
    /// Without the state type the reducers cannot be applied, so `show`
    /// prints the state as stored, and says so: the latest snapshot, and
    /// the updates written after it, each with its step and index. It never
    /// prints a merged state, which could be wrong.
    ///
    /// ```
    /// # async fn f(store: &dyn harness::session::SessionStore) -> Result<(), harness::cli::CommandError> {
    /// use harness::cli::InspectCommand;
    ///
    /// let text = InspectCommand::Show { session: "2e406897".into() }.run(store).await?;
    /// print!("{text}");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`CommandError::Session`]: [`SessionError::NoSession`] for an unknown
    /// id, [`SessionError::Load`] for a record that cannot be read (naming
    /// the session and the record), [`SessionError::Store`] when the store
    /// fails. [`CommandError::Unreadable`] when `list` finds heads that do
    /// not read (the others are listed) or `show` a log that does not (the
    /// head is shown).
    pub async fn run(self, store: &dyn SessionStore) -> Result<String, CommandError> {
        let mut out = String::new();
        match self {
            InspectCommand::List => {
                let (mut heads, mut unreadable) = (Vec::new(), Vec::new());
                for id in store.sessions().await.map_err(SessionError::from)? {
                    // Listed, then gone (finished and expired, or removed):
                    // not a session any more.
                    match store.load(&id).await {
                        Ok(Some(head)) => heads.push(head),
                        Ok(None) => {}
                        Err(StoreError::Load(load)) => unreadable.push(load),
                        Err(e) => return Err(SessionError::from(e).into()),
                    }
                }
                render::list(&mut out, heads, &unreadable);
                if !unreadable.is_empty() {
                    return Err(CommandError::Unreadable {
                        shown: out,
                        unreadable,
                    });
                }
            }
            InspectCommand::Show { session } => {
                let head = load(store, &SessionId::from(session)).await?;
                render::head(&mut out, &head);
                match stored_state(&mut out, store, &head).await {
                    Ok(()) => {}
                    Err(SessionError::Load(load)) => {
                        return Err(CommandError::Unreadable {
                            shown: out,
                            unreadable: vec![load],
                        });
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            InspectCommand::History { session } => {
                let head = load(store, &SessionId::from(session)).await?;
                let log = read_log(store, &head, Span::Whole)
                    .await
                    .map_err(SessionError::from)?;
                render::history(&mut out, &head.session_id, &CheckpointInfo::history(log));
            }
        }
        Ok(out)
    }
}

async fn load(store: &dyn SessionStore, id: &SessionId) -> Result<StoredRun, SessionError> {
    store.load(id).await?.ok_or_else(|| {
        NoSession {
            session: id.clone(),
        }
        .into()
    })
}

/// The latest snapshot, pretty, then each later checkpoint on a line.
async fn stored_state(
    out: &mut String,
    store: &dyn SessionStore,
    head: &StoredRun,
) -> Result<(), SessionError> {
    let from = head.snapshot_seq;
    // Checked against the head: it starts at the snapshot the head names
    // and has every update after it.
    let mut log = read_log(store, head, Span::Latest).await?.into_iter();
    let snapshot = match log.next() {
        Some(Checkpoint {
            index,
            step,
            kind: CheckpointKind::Snapshot(state),
            ..
        }) => (index, step, state),
        _ => {
            return Err(StoreLoad::new(
                head.session_id.clone(),
                format!("checkpoint {from}"),
                "the head names it as the latest snapshot, but it is not one",
            )
            .into());
        }
    };
    let later: Vec<_> = log.collect();
    let _ = writeln!(
        out,
        "state: as stored, not merged (merging the updates into the snapshot takes the \
         application's state type and reducers; `sessions show` in its own binary prints \
         the merged state)"
    );
    let (index, step, state) = snapshot;
    let _ = writeln!(
        out,
        "snapshot after step {index} (`{step}`, checkpoint {from}):"
    );
    let _ = writeln!(out, "{}", render::pretty(&state));
    let _ = writeln!(out, "updates after the snapshot: {}", later.len());
    for cp in later {
        let shown;
        let (kind, value) = match &cp.kind {
            CheckpointKind::Update(v) => ("update".to_string(), v),
            // A later snapshot would be the latest; print it for what it is.
            CheckpointKind::Snapshot(v) => ("snapshot".to_string(), v),
            CheckpointKind::Branch(b) => (format!("update in branch `{}`", b.path), &b.update),
            CheckpointKind::Fork(f) => {
                shown = serde_json::json!(
                    f.branches
                        .iter()
                        .map(|b| b.path.as_str())
                        .collect::<Vec<_>>()
                );
                ("fork into branches".to_string(), &shown)
            }
            CheckpointKind::Child(c) => (
                format!("record of sub-agent `{}`", c.path),
                match &*c.record {
                    CheckpointKind::Update(v) | CheckpointKind::Snapshot(v) => v,
                    CheckpointKind::Branch(b) => &b.update,
                    _ => &serde_json::Value::Null,
                },
            ),
            CheckpointKind::Join(j) => {
                shown =
                    serde_json::json!(j.branches.iter().map(|b| b.as_str()).collect::<Vec<_>>());
                ("join of branches".to_string(), &shown)
            }
        };
        let _ = writeln!(
            out,
            "{kind} of step {} (`{}`, checkpoint {}): {}",
            cp.index,
            cp.step,
            cp.seq,
            render::compact(value)
        );
    }
    Ok(())
}
