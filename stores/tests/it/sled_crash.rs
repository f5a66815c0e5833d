//! What a kill of a sled writer leaves at the end of its log, which sled's
//! recovery drops as it should (no commit was acknowledged for it): the
//! reader ([`SledStore::open_read_only`]) reads the store as recovery
//! leaves it, as the application's open does, rather than calling it
//! damaged.
//!
//! The shapes are those of logs a `kill -9` of a writer committing
//! concurrently left (4 of 12 kills were reported as damage), built here
//! on a real log through sled's layout (a segment: a 20-byte header, a
//! CRC32 xor `0xFFFF_FFFF`, its LSN xor `0x7FFF_FFFF_FFFF_FFFF`; a record: a
//! CRC32 of its body then its header, xor `0xFFFF_FFFF`, a kind byte, its
//! body's length, its segment's number and its page, three varints, then
//! the body):
//! - the manifest of a batch (kind 3, its body the LSN of the batch's last
//!   record) whose records were never written: after it, the bytes of the
//!   segment's earlier use (`yyyy…`, stale) or zeros;
//! - the same with one record of the batch written whole after the
//!   manifest, the rest not;
//! - the padding that closes a segment (kind 2) when the next segment was
//!   never written: sled's recovery stops before the padding.

use crate::{create_sample, id};
use harness::session::SessionStore;
use harness_stores::SledStore;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const SEGMENT_SIZE: usize = 128 * 1024;
const SEG_HEADER_LEN: usize = 20;
/// sled's page numbers of a batch's manifest and of a segment's padding.
const BATCH_MANIFEST_PAGE: u64 = u64::MAX - 666;
const CAP_PAGE: u64 = u64::MAX;

fn crc32(parts: &[&[u8]]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    for part in parts {
        hasher.update(part);
    }
    hasher.finalize()
}

/// sled's variable-length integer.
fn varint(value: u64) -> Vec<u8> {
    match value {
        0..=240 => vec![value as u8],
        241..=2287 => vec![
            ((value - 240) / 256 + 241) as u8,
            ((value - 240) % 256) as u8,
        ],
        2288..=67823 => vec![
            249,
            ((value - 2288) / 256) as u8,
            ((value - 2288) % 256) as u8,
        ],
        _ => {
            let size = (8 - value.leading_zeros() as usize / 8).max(3);
            let mut out = vec![247 + size as u8];
            out.extend_from_slice(&value.to_le_bytes()[..size]);
            out
        }
    }
}

fn read_varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let first = *bytes.first()?;
    Some(match first {
        0..=240 => (u64::from(first), 1),
        241..=248 => (
            240 + 256 * (u64::from(first) - 241) + u64::from(*bytes.get(1)?),
            2,
        ),
        249 => (
            2288 + 256 * u64::from(*bytes.get(1)?) + u64::from(*bytes.get(2)?),
            3,
        ),
        other => {
            let size = usize::from(other) - 247;
            let mut le = [0u8; 8];
            le[..size].copy_from_slice(bytes.get(1..=size)?);
            (u64::from_le_bytes(le), size + 1)
        }
    })
}

/// A record of segment `number` as sled writes it.
fn record(kind: u8, number: u64, page: u64, body: &[u8]) -> Vec<u8> {
    let mut header = vec![kind];
    header.extend(varint(body.len() as u64));
    header.extend(varint(number));
    header.extend(varint(page));
    let crc = crc32(&[body, &header]) ^ 0xFFFF_FFFF;
    let mut out = crc.to_le_bytes().to_vec();
    out.extend(header);
    out.extend_from_slice(body);
    out
}

/// The length of the whole record of segment `number` at `bytes[0]`, if
/// one is there.
fn whole_record(bytes: &[u8], number: u64) -> Option<usize> {
    if bytes.len() < 5 || !(1..=11).contains(&bytes[4]) {
        return None;
    }
    let mut at = 5;
    let (len, used) = read_varint(&bytes[at..])?;
    at += used;
    let (found, used) = read_varint(&bytes[at..])?;
    at += used;
    let (_, used) = read_varint(&bytes[at..])?;
    at += used;
    let len = usize::try_from(len).ok()?;
    if found != number || bytes.len() < at.checked_add(len)? {
        return None;
    }
    let stored = u32::from_le_bytes(bytes[..4].try_into().unwrap());
    (crc32(&[&bytes[at..at + len], &bytes[4..at]]) ^ 0xFFFF_FFFF == stored).then_some(at + len)
}

/// The end of the log `db`: the segment of the highest LSN (where in the
/// file, its LSN) and where its whole records end in it.
fn log_end(db: &[u8]) -> (usize, u64, usize) {
    let mut last: Option<(usize, u64)> = None;
    for base in (0..db.len()).step_by(SEGMENT_SIZE) {
        let segment = &db[base..db.len().min(base + SEGMENT_SIZE)];
        if segment.len() < SEG_HEADER_LEN {
            continue;
        }
        let stored = u32::from_le_bytes(segment[..4].try_into().unwrap()) ^ 0xFFFF_FFFF;
        if crc32(&[&segment[4..SEG_HEADER_LEN]]) != stored {
            continue;
        }
        let lsn = u64::from_le_bytes(segment[4..12].try_into().unwrap()) ^ 0x7FFF_FFFF_FFFF_FFFF;
        if last.is_none_or(|(_, newest)| lsn > newest) {
            last = Some((base, lsn));
        }
    }
    let (base, lsn) = last.expect("a segment");
    let number = lsn / SEGMENT_SIZE as u64;
    let segment = &db[base..db.len().min(base + SEGMENT_SIZE)];
    let mut at = SEG_HEADER_LEN;
    while let Some(len) = whole_record(&segment[at..], number) {
        at += len;
    }
    (base, lsn, at)
}

/// Every file under `dir` (by its path under `dir`), with its bytes.
fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                out.insert(path.strip_prefix(dir).unwrap().to_path_buf(), bytes);
            }
        }
    }
    out
}

/// A store of 12 sessions at `path`, closed when it returns: written by
/// the application, then put as it was when its writer was killed: the
/// end of its log, from where its whole records end, made of `tail`
/// (given the LSN where it starts), then `filler` up to the end of the
/// segment.
async fn killed_store(path: &Path, tail: impl Fn(u64) -> Vec<u8>, filler: u8) {
    let store = SledStore::open(path).unwrap();
    for i in 0..12 {
        create_sample(&store, &format!("s{i}"), 3).await;
    }
    store.flush().await.unwrap();
    drop(store);
    let lock = std::fs::File::open(path.join("db")).unwrap();
    let mut waited = 0;
    while lock.try_lock().is_err() {
        assert!(waited < 600, "sled still holds the lock");
        waited += 1;
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    lock.unlock().unwrap();
    let mut db = std::fs::read(path.join("db")).unwrap();
    let (base, lsn, at) = log_end(&db);
    assert!(
        at + 200 < SEGMENT_SIZE,
        "room at the end of the last segment"
    );
    let tail = tail(lsn + at as u64);
    db.resize(db.len().max(base + SEGMENT_SIZE), 0);
    db[base + at..base + at + tail.len()].copy_from_slice(&tail);
    db[base + at + tail.len()..base + SEGMENT_SIZE].fill(filler);
    std::fs::write(path.join("db"), db).unwrap();
}

/// The manifest of a batch at `lsn` whose last record is `last`.
fn manifest(lsn: u64, last: u64) -> Vec<u8> {
    let number = lsn / SEGMENT_SIZE as u64;
    record(3, number, BATCH_MANIFEST_PAGE, &last.to_le_bytes())
}

/// What a kill left at the end of a log: sled's recovery drops it, and the
/// reader reads the store as recovery leaves it, every session whole,
/// without a word of damage and without changing a byte; the
/// application's open opens it too, with the same sessions. Before, the
/// reader called each of these "damaged" ("sled's recovery stops before
/// this part of the log … would drop its 24 bytes of records").
#[tokio::test]
async fn the_reader_reads_a_log_a_kill_left_as_recovery_leaves_it() {
    type Tail = Box<dyn Fn(u64) -> Vec<u8>>;
    let cases: Vec<(&str, Tail, u8)> = vec![
        (
            "a batch's manifest, its records never written (stale bytes)",
            Box::new(|lsn| manifest(lsn, lsn + 3768)),
            b'y',
        ),
        (
            "a batch's manifest, its records never written (zeros)",
            Box::new(|lsn| manifest(lsn, lsn + 11_269)),
            0,
        ),
        (
            "a batch's manifest and one of its records, the rest never written",
            Box::new(|lsn| {
                let number = lsn / SEGMENT_SIZE as u64;
                let mut out = manifest(lsn, lsn + 4000);
                // A change to a page (kind 10, an inline link), whole.
                out.extend(record(10, number, 37, &[b'y'; 120]));
                out
            }),
            b'y',
        ),
        (
            "the padding that closes the last segment, the next never written",
            Box::new(|lsn| {
                // Up to 14 bytes before the segment's end, as sled pads it.
                let number = lsn / SEGMENT_SIZE as u64;
                let room = SEGMENT_SIZE - (lsn % SEGMENT_SIZE as u64) as usize - 14;
                let fixed = 4 + 1 + varint(number).len() + varint(CAP_PAGE).len();
                let body = (1..=5)
                    .map(|len| room - fixed - len)
                    .find(|body| varint(*body as u64).len() + fixed + body == room)
                    .unwrap();
                let cap = record(2, number, CAP_PAGE, &vec![0; body]);
                assert_eq!(cap.len(), room);
                cap
            }),
            0,
        ),
    ];
    let base = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for (i, (name, tail, filler)) in cases.iter().enumerate() {
        let path = base.path().join(format!("case-{i}"));
        killed_store(&path, tail, *filler).await;
        let writer_copy = base.path().join(format!("writer-{i}"));
        for (file, bytes) in files(&path) {
            let to = writer_copy.join(file);
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::write(to, bytes).unwrap();
        }
        if let Err(failed) = reads_as_recovery_leaves_it(&path, &writer_copy).await {
            failures.push(format!("{name}: {failed}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Whether the reader reads the store at `path` whole (its 12 sessions),
/// changing no byte, and the application's open of the copy `writer_copy`
/// shows the same sessions; what went otherwise.
async fn reads_as_recovery_leaves_it(path: &Path, writer_copy: &Path) -> Result<(), String> {
    let before = files(path);
    let reader = SledStore::open_read_only(path).map_err(|e| format!("the reader: {e}"))?;
    let mut listed = reader.sessions().await.unwrap();
    listed.sort();
    let mut want: Vec<_> = (0..12).map(|i| id(&format!("s{i}"))).collect();
    want.sort();
    if listed != want {
        return Err(format!("the reader listed {listed:?}"));
    }
    for session in &listed {
        reader.load(session).await.unwrap().unwrap();
        let log = reader.checkpoints(session, 0).await.unwrap();
        if log.len() != 4 {
            return Err(format!(
                "the reader read {} checkpoints of {session}",
                log.len()
            ));
        }
    }
    drop(reader);
    if files(path) != before {
        return Err("the read changed the store".into());
    }
    let writer =
        SledStore::open(writer_copy).map_err(|e| format!("the application's open: {e}"))?;
    let mut opened = writer.sessions().await.unwrap();
    opened.sort();
    if opened != want {
        return Err(format!("the application's open listed {opened:?}"));
    }
    Ok(())
}
