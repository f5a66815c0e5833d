//! Reading stored records: JSON to heads and checkpoints, refusing what
//! cannot be read (corrupt, another schema version, another session's).

use harness::SessionId;
use harness::session::{Checkpoint, SCHEMA_VERSION, StoreError, StoreLoad, StoredRun};
use serde_json::Value;

/// A [`StoreError::Load`] for `record` of `session`.
pub(crate) fn load_error(
    session: &SessionId,
    record: impl Into<String>,
    reason: impl Into<String>,
) -> StoreError {
    StoreError::Load(StoreLoad::new(session.clone(), record, reason))
}

/// Refuses a head of another schema version or of another session.
pub(crate) fn check_head(session: &SessionId, head: &StoredRun) -> Result<(), StoreError> {
    if head.schema_version != SCHEMA_VERSION {
        return Err(schema_mismatch(session, u64::from(head.schema_version)));
    }
    if head.session_id != *session {
        return Err(load_error(
            session,
            "head",
            format!(
                "the record belongs to session {:?}",
                head.session_id.as_str()
            ),
        ));
    }
    Ok(())
}

fn schema_mismatch(session: &SessionId, found: u64) -> StoreError {
    load_error(
        session,
        "head",
        format!("schema version {found}, this build reads version {SCHEMA_VERSION}"),
    )
}

/// The head of `session` from its JSON value. The schema version is checked
/// before the rest, so that a record of another version is reported as such
/// rather than as a shape error.
pub(crate) fn head_from_value(session: &SessionId, value: Value) -> Result<StoredRun, StoreError> {
    match value.get("schema_version").and_then(Value::as_u64) {
        Some(v) if v == u64::from(SCHEMA_VERSION) => {}
        Some(v) => return Err(schema_mismatch(session, v)),
        None => {
            return Err(load_error(
                session,
                "head",
                "no schema_version: not a session head",
            ));
        }
    }
    let head: StoredRun = serde_json::from_value(value)
        .map_err(|e| load_error(session, "head", format!("malformed head: {e}")))?;
    check_head(session, &head)?;
    Ok(head)
}

/// The head of `session` from its JSON bytes.
#[cfg_attr(not(feature = "sled"), allow(dead_code))]
pub(crate) fn head_from_slice(session: &SessionId, bytes: &[u8]) -> Result<StoredRun, StoreError> {
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| load_error(session, "head", format!("invalid JSON: {e}")))?;
    head_from_value(session, value)
}

/// Checkpoint `seq` of `session` from its JSON bytes; its own `seq` must be
/// the one it is stored under.
pub(crate) fn checkpoint_from_slice(
    session: &SessionId,
    seq: u64,
    bytes: &[u8],
) -> Result<Checkpoint, StoreError> {
    let record = || format!("checkpoint {seq}");
    let cp: Checkpoint = serde_json::from_slice(bytes)
        .map_err(|e| load_error(session, record(), format!("invalid checkpoint JSON: {e}")))?;
    if cp.seq != seq {
        return Err(load_error(
            session,
            record(),
            format!("the record says seq {}, stored as seq {seq}", cp.seq),
        ));
    }
    Ok(cp)
}

/// JSON bytes of a head. Serializing the harness's own types cannot fail
/// short of a bug, which is reported rather than panicked on.
#[cfg_attr(not(feature = "sled"), allow(dead_code))]
pub(crate) fn head_to_vec(head: &StoredRun) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(head).map_err(|e| encode_error(&head.session_id, "the head", &e))
}

/// JSON value of a head (see [`head_to_vec`]).
pub(crate) fn head_to_value(head: &StoredRun) -> Result<Value, StoreError> {
    serde_json::to_value(head).map_err(|e| encode_error(&head.session_id, "the head", &e))
}

/// JSON bytes of a checkpoint of `session` (see [`head_to_vec`]).
pub(crate) fn checkpoint_to_vec(
    session: &SessionId,
    cp: &Checkpoint,
) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(cp).map_err(|e| encode_error(session, &format!("checkpoint {}", cp.seq), &e))
}

fn encode_error(session: &SessionId, what: &str, e: &serde_json::Error) -> StoreError {
    StoreError::backend(format!("session {session}: cannot encode {what}: {e}"))
}
