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

/// The fields of a head a commit's compare-and-set reads.
#[cfg_attr(not(feature = "sled"), allow(dead_code))]
#[derive(serde::Deserialize)]
struct HeadVersion<'a> {
    schema_version: u64,
    #[serde(borrow)]
    session_id: std::borrow::Cow<'a, str>,
    version: u64,
}

/// The version of the head of `session` in its JSON bytes, for a commit's
/// compare-and-set: the schema version and the session id are checked as
/// [`head_from_slice`] checks them, the other fields only for being JSON
/// (read in full by [`head_from_slice`] on every load). Nothing is built
/// but the three fields, so this costs a fraction of a full read; a record
/// it cannot read is read in full, for the error that says what is wrong.
#[cfg_attr(not(feature = "sled"), allow(dead_code))]
pub(crate) fn head_version(session: &SessionId, bytes: &[u8]) -> Result<u64, StoreError> {
    match serde_json::from_slice::<HeadVersion<'_>>(bytes) {
        Ok(head)
            if head.schema_version == u64::from(SCHEMA_VERSION)
                && head.session_id == session.as_str() =>
        {
            Ok(head.version)
        }
        _ => head_from_slice(session, bytes).map(|head| head.version),
    }
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

/// The first byte of a checksummed record: not a byte JSON starts with.
const FRAME_MAGIC: u8 = 0xC5;
/// The format of a checksummed record.
const FRAME_VERSION: u8 = 1;
/// The magic byte, the format byte and the CRC32.
const FRAME_HEADER: usize = 6;

/// `json` as a checksummed record: [`FRAME_MAGIC`], [`FRAME_VERSION`], the
/// CRC32 of `json` (4 bytes, little-endian), then `json`.
#[cfg_attr(not(feature = "sled"), allow(dead_code))]
pub(crate) fn frame(json: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(FRAME_HEADER + json.len());
    out.push(FRAME_MAGIC);
    out.push(FRAME_VERSION);
    out.extend_from_slice(&crc32fast::hash(json).to_le_bytes());
    out.extend_from_slice(json);
    out
}

/// The JSON of `record` of `session` from its stored bytes: a checksummed
/// record (see [`frame`]) whose checksum is verified, or a record written
/// before checksums (bare JSON), returned as it is. A checksum that does
/// not match, or an unknown format, is a [`StoreError::Load`].
#[cfg_attr(not(feature = "sled"), allow(dead_code))]
pub(crate) fn unframe<'a>(
    session: &SessionId,
    record: &str,
    bytes: &'a [u8],
) -> Result<&'a [u8], StoreError> {
    if bytes.first() != Some(&FRAME_MAGIC) {
        return Ok(bytes);
    }
    if bytes.len() < FRAME_HEADER {
        return Err(load_error(
            session,
            record,
            format!("a checksummed record of {} bytes, cut short", bytes.len()),
        ));
    }
    if bytes[1] != FRAME_VERSION {
        return Err(load_error(
            session,
            record,
            format!(
                "record format {}, this build reads format {FRAME_VERSION}",
                bytes[1]
            ),
        ));
    }
    let stored = u32::from_le_bytes([bytes[2], bytes[3], bytes[4], bytes[5]]);
    let json = &bytes[FRAME_HEADER..];
    let computed = crc32fast::hash(json);
    if stored != computed {
        return Err(load_error(
            session,
            record,
            format!(
                "the record is damaged: its checksum is {stored:08x}, its bytes have \
                 {computed:08x}"
            ),
        ));
    }
    Ok(json)
}

/// JSON bytes of a head. Serializing the harness's own types cannot fail
/// short of a bug, which is reported rather than panicked on.
#[cfg_attr(not(feature = "sled"), allow(dead_code))]
pub(crate) fn head_to_vec(head: &StoredRun) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(head).map_err(|e| encode_error(&head.session_id, "the head", &e))
}

/// Appends the JSON bytes of a head to `out` (see [`head_to_vec`]).
pub(crate) fn write_head(out: &mut Vec<u8>, head: &StoredRun) -> Result<(), String> {
    serde_json::to_writer(out, head).map_err(|e| format!("cannot encode the head: {e}"))
}

/// Appends the JSON bytes of a checkpoint to `out` (see
/// [`checkpoint_to_vec`]).
pub(crate) fn write_checkpoint(out: &mut Vec<u8>, cp: &Checkpoint) -> Result<(), String> {
    serde_json::to_writer(out, cp).map_err(|e| format!("cannot encode checkpoint {}: {e}", cp.seq))
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

#[cfg(all(test, feature = "conformance"))]
mod tests {
    use super::*;
    use crate::conformance::head;
    use serde_json::json;

    fn bytes(value: &Value) -> Vec<u8> {
        serde_json::to_vec(value).expect("a JSON value encodes")
    }

    /// The light read a commit's compare-and-set makes finds the version
    /// of a head as written, also with its id escaped in the JSON.
    #[test]
    fn head_version_reads_the_version_of_a_written_head() {
        let mut h = head("s\"1");
        h.version = 42;
        let written = head_to_vec(&h).unwrap();
        assert_eq!(head_version(&h.session_id, &written).unwrap(), 42);
    }

    /// What the full read refuses, the light read refuses with the same
    /// error: not JSON, another session's head, another schema version, no
    /// schema version, a version that is not a number.
    #[test]
    fn head_version_refuses_what_a_full_read_refuses_with_its_error() {
        let id = SessionId::from("s1");
        let good = head_to_value(&head("s1")).unwrap();
        let with = |field: &str, v: Value| {
            let mut value = good.clone();
            value[field] = v;
            bytes(&value)
        };
        let mut no_schema = good.clone();
        no_schema.as_object_mut().unwrap().remove("schema_version");
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (b"\x00garbage{".to_vec(), "invalid JSON"),
            (b"[1, 2]".to_vec(), "no schema_version"),
            (with("session_id", json!("s2")), "belongs to session"),
            (with("schema_version", json!(2)), "schema version 2"),
            (bytes(&no_schema), "no schema_version"),
            (with("version", json!("seven")), "malformed head"),
        ];
        for (record, expected) in cases {
            let err = head_version(&id, &record).unwrap_err();
            let full = head_from_slice(&id, &record).unwrap_err();
            assert!(
                matches!(err, StoreError::Load(_)) && err.to_string().contains(expected),
                "{} gave {err}",
                String::from_utf8_lossy(&record)
            );
            assert_eq!(err.to_string(), full.to_string());
        }
    }
}
