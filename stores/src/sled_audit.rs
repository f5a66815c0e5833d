//! Finding what sled's recovery dropped: the check behind
//! [`SledStore::open_read_only`](crate::SledStore::open_read_only).
//!
//! sled 0.34 recovers its log by reading messages from its last snapshot
//! on, and stops at the first message that fails its checksum; everything
//! after it is then zeroed on disk, and the database opens as it was
//! before that message, without an error. A flipped bit therefore shows an
//! older state (or none) and destroys the rest of the log.
//!
//! A clean open rewrites bytes too (measured: a cleanly closed 1 MB store
//! had 197,595 bytes rewritten by its first open), which is why comparing
//! the files before and after an open cannot tell damage: sled zeroes the
//! segments it had freed, and the end of its last segment after the point
//! it had written to, which holds stale messages of the segment's earlier
//! use. Stale messages carry the number of the segment they were written
//! in, which is never the segment's present number.
//!
//! So the check reads the log as it was before the open (the original
//! file, which the reader never writes) from the point where recovery
//! stopped (the stable log sequence number of the snapshot recovery
//! wrote): any whole message there that passes sled's checksum and belongs
//! to the segment it is in was written after the point recovery stopped
//! at, and would be lost, unless a crash left it unacknowledged (a batch
//! not all written, or padding: see [`audit`]). A message cut short by the
//! end of the file is reported too (a truncated file, or a write a crash
//! tore). Segment headers that fail their checksum are reported as damage.
//!
//! Before an open ([`audit_before_open`]), the same walk notes which
//! records keep their value in a blob file, and [`audit_blobs`] checks the
//! blobs sled's recovery would read or that hold a present value: sled
//! stops its recovery at a blob that fails its checksum, and skips a
//! record whose blob is missing, without an error either way.
//!
//! The layout read here is sled 0.34's (`pagecache/logger.rs`,
//! `serialization.rs`): a segment starts with a 20-byte header (a CRC32
//! xor `0xFFFF_FFFF`, the segment's first LSN and the highest stable LSN,
//! each xor `0x7FFF_FFFF_FFFF_FFFF`, little-endian); a message is a CRC32,
//! a kind byte, its body's length, its segment number and its page id
//! (three of sled's variable-length integers), then the body.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The length of a segment header.
const SEG_HEADER_LEN: usize = 20;
/// The highest message kind sled 0.34 writes (`BlobLink`).
const MAX_KIND: u8 = 11;

/// What the check found: where the log's recovered part ends and what
/// follows it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Lost {
    /// The offset in the file from which bytes are lost.
    pub(crate) offset: u64,
    /// What is there.
    pub(crate) what: String,
    /// Only the end of the file is cut short (inside a record or a segment
    /// header, nothing whole after it): what a crash leaves, which sled's
    /// recovery drops as it should.
    pub(crate) torn_end: bool,
    /// Whole records after the point sled's recovery stops at that no
    /// commit was acknowledged for, as a crash leaves them (see [`audit`]):
    /// recovery drops them as it should, and nothing acknowledged is lost.
    pub(crate) unacknowledged: bool,
}

/// Reads the log `file` (sled's `db`, as it was before recovery) in
/// segments of `segment_size`, given the LSN recovery reached: the first
/// place where records the log holds would be lost, if any.
///
/// Whole records after the point recovery stopped at are lost records,
/// unless a crash left them unacknowledged, which recovery drops as it
/// should ([`Lost::unacknowledged`], reported only when nothing else is),
/// by the rules [`audit_before_open`] reads a log with:
/// - recovery stopped at the manifest of a batch (a transaction) whose
///   records were not all written: the log holds no whole record at the
///   batch's last LSN, and what stands where the walk of that segment
///   stops is bytes never written (zeros, or the segment's earlier use),
///   not a record of the segment. No commit of the batch, nor any after it,
///   was acknowledged;
/// - or the records after that point are no data: the padding that closes
///   a segment, a canceled reservation, a batch's manifest (recovery stops
///   before the padding of the last segment it finds when the next segment
///   was never written).
pub(crate) fn audit(
    file: &mut File,
    path: &Path,
    segment_size: usize,
    stable_lsn: u64,
) -> std::io::Result<Option<Lost>> {
    let mut buf = vec![0u8; segment_size];
    let mut base: u64 = 0;
    let mut walks: Vec<Walk> = Vec::new();
    // The batch whose manifest stands where recovery stopped: its last LSN.
    let mut manifest = None;
    loop {
        let got = read_full(file, &mut buf)?;
        if got == 0 {
            break;
        }
        let segment = &buf[..got];
        match scan_segment(segment, base, segment_size, path, None) {
            Scan::Zero => {}
            Scan::Found(lost) | Scan::Skipped { lost, .. } => return Ok(Some(lost)),
            Scan::Walked { lsn, at } => {
                let number = lsn / segment_size as u64;
                if let Some(offset) = stable_lsn
                    .checked_sub(lsn)
                    .and_then(|o| usize::try_from(o).ok())
                    .filter(|o| *o < segment.len())
                {
                    manifest =
                        manifest.or(batch_manifest_at(segment, offset, number, segment_size));
                }
                walks.push(Walk {
                    lsn,
                    base,
                    at,
                    own_record_at_end: own_record_at(segment, at, number),
                    data_after_stable: data_from(
                        segment,
                        at,
                        number,
                        segment_size,
                        lsn,
                        stable_lsn,
                    ),
                });
            }
        }
        if got < segment_size {
            break;
        }
        base += segment_size as u64;
    }
    // A batch not all written: no whole record at its last LSN, and bytes
    // never written where the walk of its segment stops.
    let torn_batch = manifest.is_some_and(|last: u64| {
        match walks
            .iter()
            .find(|w| (w.lsn..w.lsn.saturating_add(segment_size as u64)).contains(&last))
        {
            None => true,
            Some(w) => last >= w.lsn.saturating_add(w.at as u64) && !w.own_record_at_end,
        }
    });
    let mut unacknowledged = None;
    for w in walks {
        // Whole messages beyond where recovery stopped (in an earlier
        // segment) would be lost too.
        let end = w.lsn.saturating_add(w.at as u64);
        if w.at <= SEG_HEADER_LEN || end <= stable_lsn {
            continue;
        }
        let from = usize::try_from(stable_lsn.saturating_sub(w.lsn))
            .unwrap_or(usize::MAX)
            .max(SEG_HEADER_LEN);
        let bytes = w.at - from;
        if torn_batch || !w.data_after_stable {
            unacknowledged = unacknowledged.or(Some(Lost {
                offset: w.base + from as u64,
                what: format!(
                    "the log ends with {} a crash left (from log sequence number {stable_lsn}), \
                     which sled's recovery drops: no commit was acknowledged for them, and the \
                     next open of the store drops them from the log",
                    if torn_batch {
                        "the records of a batch (a transaction) not all written"
                    } else {
                        "padding and markers, no data,"
                    }
                ),
                torn_end: false,
                unacknowledged: true,
            }));
            continue;
        }
        return Ok(Some(Lost {
            offset: w.base + from as u64,
            what: format!(
                "sled's recovery stops before this part of the log (at log sequence number \
                 {stable_lsn}, earlier in the log) and would drop its {bytes} bytes of records"
            ),
            torn_end: false,
            unacknowledged: false,
        }));
    }
    Ok(unacknowledged)
}

/// A segment [`audit`] walked.
struct Walk {
    /// Its LSN.
    lsn: u64,
    /// Where it is in the file.
    base: u64,
    /// Where its whole records end.
    at: usize,
    /// Whether a record of the segment (whole or not) starts at `at`.
    own_record_at_end: bool,
    /// Whether a record of data (not padding, a canceled reservation or a
    /// batch's manifest) among its whole ones starts at or after the
    /// stable LSN.
    data_after_stable: bool,
}

/// Whether one of the whole records of segment `number` (at LSN `lsn`)
/// before `end` that start at or after `stable_lsn` holds data: a page's
/// change (kinds 4 to 11), not the padding that closes a segment (2), a
/// canceled reservation (1) or a batch's manifest (3).
fn data_from(
    segment: &[u8],
    end: usize,
    number: u64,
    segment_size: usize,
    lsn: u64,
    stable_lsn: u64,
) -> bool {
    let mut at = SEG_HEADER_LEN;
    while at < end {
        let Message::Whole(len) = message_at(segment, at, number, segment_size) else {
            return true;
        };
        if lsn.saturating_add(at as u64) >= stable_lsn && segment[at + 4] > 3 {
            return true;
        }
        at += len;
    }
    false
}

/// The last LSN of the batch whose manifest (a whole record of kind 3, its
/// body that LSN as 8 little-endian bytes) starts at `at`, if one does.
fn batch_manifest_at(segment: &[u8], at: usize, number: u64, segment_size: usize) -> Option<u64> {
    if !matches!(
        message_at(segment, at, number, segment_size),
        Message::Whole(_)
    ) || segment[at + 4] != 3
    {
        return None;
    }
    let record = parse_record(&segment[at..])?;
    let body: [u8; 8] = record.body.try_into().ok()?;
    u64::try_from(i64::from_le_bytes(body)).ok()
}

/// Reads the log `file` (sled's `db`) before sled opens it, as
/// [`SledStore::open`](crate::SledStore::open) does: the first place where
/// the log is damaged in its middle, so that sled's recovery would drop
/// or skip records written after the damage, if any. A log whose end only
/// is cut short ([`Lost::torn_end`]) is reported too; the caller opens it
/// (crash recovery).
///
/// Unlike [`audit`] this needs no recovery first, so it reads nothing but
/// the log, once: damage in the middle is a record of the segment's own
/// number (one sled wrote there) that fails its checksum, followed by a
/// whole record written later (in the segment, or in a later segment), or
/// a segment header that fails its checksum. What a crash leaves (bytes
/// never written: zeros, or a segment's earlier use, also between records
/// written out of order) is not a record of the segment, and is not
/// reported. A bit flipped in the segment number of the damaged record is
/// not told from that.
///
/// The whole records it reads are noted in `pages`, for [`audit_blobs`].
pub(crate) fn audit_before_open(
    file: &mut File,
    path: &Path,
    segment_size: usize,
    pages: &mut Pages,
) -> std::io::Result<Option<Lost>> {
    let mut buf = vec![0u8; segment_size];
    let mut base: u64 = 0;
    let mut torn = None;
    // Segments whose walk stopped at a record of their own number that is
    // not whole: (its LSN, where in the file).
    let mut broken: Vec<(u64, u64)> = Vec::new();
    // Segments holding whole records: (LSN, where the first one is).
    let mut written: Vec<(u64, u64)> = Vec::new();
    loop {
        let got = read_full(file, &mut buf)?;
        if got == 0 {
            break;
        }
        let segment = &buf[..got];
        match scan_segment(segment, base, segment_size, path, Some(&mut *pages)) {
            Scan::Zero => {}
            Scan::Found(lost) if lost.torn_end => torn = Some(lost),
            Scan::Found(lost) => return Ok(Some(lost)),
            Scan::Skipped { lost, lsn, at } => {
                if own_record_at(segment, at, lsn / segment_size as u64) {
                    return Ok(Some(lost));
                }
                // Bytes never written (zeros, or the segment's earlier
                // use) between records: writes a crash left out of order,
                // which recovery drops as it should.
                written.push((lsn, base + SEG_HEADER_LEN as u64));
            }
            Scan::Walked { lsn, at } => {
                let number = lsn / segment_size as u64;
                if at > SEG_HEADER_LEN {
                    written.push((lsn, base + SEG_HEADER_LEN as u64));
                }
                if own_record_at(segment, at, number) {
                    broken.push((lsn, base + at as u64));
                }
            }
        }
        if got < segment_size {
            break;
        }
        base += segment_size as u64;
    }
    for (lsn, at) in broken {
        if let Some((_, first)) = written
            .iter()
            .filter(|(later, _)| *later > lsn)
            .min_by_key(|(later, _)| *later)
        {
            return Ok(Some(Lost {
                offset: at,
                what: format!(
                    "a record of sled's log fails its checksum there, and records written \
                     after it follow (the first in a later segment, at offset {first}): \
                     sled's recovery would drop or skip them"
                ),
                torn_end: false,
                unacknowledged: false,
            }));
        }
    }
    Ok(torn)
}

/// What reading one segment found.
enum Scan {
    /// All zeros: a segment sled freed, or never wrote.
    Zero,
    /// Damage, or the file's end cut short.
    Found(Lost),
    /// Whole records of the segment from its header to `at` (in the
    /// segment), and no whole record of the segment after.
    Walked { lsn: u64, at: usize },
    /// Whole records of the segment from its header to `at`, then
    /// something else, then a whole record of the segment again: sled's
    /// recovery stops at `at` or skips the rest of the segment.
    Skipped { lost: Lost, lsn: u64, at: usize },
}

/// Reads one segment (at `base` in the file). The whole records its walk
/// meets are noted in `pages`, when given.
fn scan_segment(
    segment: &[u8],
    base: u64,
    segment_size: usize,
    path: &Path,
    mut pages: Option<&mut Pages>,
) -> Scan {
    if segment.iter().all(|&b| b == 0) {
        return Scan::Zero;
    }
    let cut_short = |offset: u64| {
        Scan::Found(Lost {
            offset,
            what: format!(
                "the log ends inside a record (the file {} was cut short, or a crash tore the \
                 write)",
                path.display()
            ),
            torn_end: true,
            unacknowledged: false,
        })
    };
    if segment.len() < SEG_HEADER_LEN {
        return Scan::Found(Lost {
            offset: base,
            what: format!(
                "the log ends {} bytes into a segment, inside its header: {} was cut short",
                segment.len(),
                path.display()
            ),
            torn_end: true,
            unacknowledged: false,
        });
    }
    let header_ok = segment[0..4]
        .try_into()
        .map(|b| u32::from_le_bytes(b) ^ 0xFFFF_FFFF)
        .is_ok_and(|stored| crc32(&[&segment[4..SEG_HEADER_LEN]]) == stored);
    let lsn = segment[4..12]
        .try_into()
        .map(|b| u64::from_le_bytes(b) ^ 0x7FFF_FFFF_FFFF_FFFF);
    let (true, Ok(lsn)) = (header_ok, lsn) else {
        return Scan::Found(Lost {
            offset: base,
            what: "a segment header of sled's log fails its checksum".into(),
            torn_end: false,
            unacknowledged: false,
        });
    };
    let number = lsn / segment_size as u64;
    // Walk the segment's messages as recovery reads them, one after the
    // other, to the first that is not a whole message of this segment.
    let mut at = SEG_HEADER_LEN;
    loop {
        match message_at(segment, at, number, segment_size) {
            Message::Whole(len) => {
                if let (Some(pages), Some(record)) =
                    (pages.as_deref_mut(), parse_record(&segment[at..]))
                {
                    pages.note(&record, lsn + at as u64, base + at as u64);
                }
                at += len;
            }
            Message::CutShort => return cut_short(base + at as u64),
            Message::None => break,
        }
    }
    // Recovery stops there (in the last segment it reads) or skips the rest
    // of the segment (in the others): a whole message of this segment
    // further on would be lost. What follows the last message is zeros or
    // stale messages of the segment's earlier use, of another number (or,
    // in a file that ends in this segment, a record cut short).
    for later in at + 1..segment.len() {
        if let Message::Whole(_) = message_at(segment, later, number, segment_size) {
            return Scan::Skipped {
                lost: Lost {
                    offset: base + at as u64,
                    what: format!(
                        "a record of sled's log fails its checksum there, and sled's recovery \
                         would drop the records after it, the first whole one at offset {}",
                        base + later as u64
                    ),
                    torn_end: false,
                    unacknowledged: false,
                },
                lsn,
                at,
            };
        }
    }
    // The file ends in this segment: past the last whole message there is
    // nothing, or zeros. Anything else is a record cut short, its header
    // perhaps too short to read.
    if segment.len() < segment_size && segment[at..].iter().any(|&b| b != 0) {
        return cut_short(base + at as u64);
    }
    Scan::Walked { lsn, at }
}

/// Whether a record header of segment `number` starts at `at` (whole or
/// not: neither its checksum nor its kind is checked): what sled wrote
/// there, as opposed to zeros or a segment's earlier use (whose records
/// carry another segment number).
fn own_record_at(segment: &[u8], at: usize, number: u64) -> bool {
    let Some(bytes) = segment.get(at..) else {
        return false;
    };
    if bytes.len() < 5 || bytes[..5].iter().all(|&b| b == 0) {
        return false;
    }
    let mut rest = &bytes[5..];
    matches!(
        (varint(&mut rest), varint(&mut rest)),
        (Some(_), Some(found)) if found == number
    )
}

enum Message {
    /// No message of this segment starts here.
    None,
    /// A whole message of this segment, its checksum good, this long
    /// with its header.
    Whole(usize),
    /// A message header of this segment whose body runs past the end of
    /// the file (which ends in this segment).
    CutShort,
}

/// Whether a message of segment `number` starts at `at`.
fn message_at(segment: &[u8], at: usize, number: u64, segment_size: usize) -> Message {
    let bytes = &segment[at..];
    if bytes.len() < 5 || bytes[4] == 0 || bytes[4] > MAX_KIND {
        return Message::None;
    }
    let mut rest = &bytes[5..];
    let (Some(len), Some(found)) = (varint(&mut rest), varint(&mut rest)) else {
        return Message::None;
    };
    if found != number || varint(&mut rest).is_none() {
        return Message::None;
    }
    let header_len = bytes.len() - rest.len();
    let Ok(len) = usize::try_from(len) else {
        return Message::None;
    };
    // The length is whatever bytes stand there: stale bytes of a reused
    // segment can read as any length up to `u64::MAX`.
    if at
        .checked_add(header_len)
        .and_then(|end| end.checked_add(len))
        .is_none_or(|end| end > segment_size)
    {
        return Message::None;
    }
    if rest.len() < len {
        // The segment is the last, cut short by the end of the file.
        return if segment.len() < segment_size {
            Message::CutShort
        } else {
            Message::None
        };
    }
    let stored = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    if crc32(&[&rest[..len], &bytes[4..header_len]]) ^ 0xFFFF_FFFF == stored {
        Message::Whole(header_len + len)
    } else {
        Message::None
    }
}

/// A record's header and body, as the walk of a segment found it whole.
struct Record<'a> {
    kind: u8,
    page: u64,
    body: &'a [u8],
}

/// The record starting at `bytes[0]` (its checksum not checked: the caller
/// found it whole).
fn parse_record(bytes: &[u8]) -> Option<Record<'_>> {
    let kind = *bytes.get(4)?;
    let mut rest = bytes.get(5..)?;
    let len = usize::try_from(varint(&mut rest)?).ok()?;
    varint(&mut rest)?;
    let page = varint(&mut rest)?;
    Some(Record {
        kind,
        page,
        body: rest.get(..len)?,
    })
}

/// sled's record kinds that keep their value in a blob file of their own
/// (`BlobMeta`, `BlobNode`, `BlobLink`), their body the blob's number.
const BLOB_KINDS: [u8; 3] = [7, 9, 11];
/// sled's record kinds that replace a page (`Counter`, `InlineMeta`,
/// `BlobMeta`, `InlineNode`, `BlobNode`), after `Free` (4), which frees it.
const REPLACE_KINDS: std::ops::RangeInclusive<u8> = 5..=9;
/// sled's record kinds that add a change to a page (`InlineLink`,
/// `BlobLink`).
const LINK_KINDS: [u8; 2] = [10, 11];

/// What the walk of a log found of sled's pages (see [`audit_blobs`]): the
/// newest record that replaced or freed each page, and every record that
/// keeps its value in a blob.
#[derive(Default)]
pub(crate) struct Pages {
    /// Per page: the LSN of the newest record that replaced or freed it,
    /// and whether it freed it.
    resets: std::collections::HashMap<u64, (u64, bool)>,
    /// The records that keep their value in a blob.
    blobs: Vec<BlobRef>,
}

/// A record that keeps its value in a blob file.
#[derive(Clone, Copy)]
struct BlobRef {
    /// The record's LSN.
    lsn: u64,
    /// Where the record is in the log file.
    offset: u64,
    page: u64,
    kind: u8,
    /// The blob's number (its file's name in `blobs`).
    blob: i64,
}

impl Pages {
    fn note(&mut self, record: &Record<'_>, lsn: u64, offset: u64) {
        if record.kind == 4 || REPLACE_KINDS.contains(&record.kind) {
            let newest = self.resets.entry(record.page).or_insert((lsn, false));
            if lsn >= newest.0 {
                *newest = (lsn, record.kind == 4);
            }
        }
        if BLOB_KINDS.contains(&record.kind)
            && let Ok(body) = <[u8; 8]>::try_from(record.body)
        {
            self.blobs.push(BlobRef {
                lsn,
                offset,
                page: record.page,
                kind: record.kind,
                blob: i64::from_le_bytes(body),
            });
        }
    }
}

/// What [`audit_blobs`] found wrong with a blob.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct BadBlob {
    /// The blob file.
    pub(crate) file: PathBuf,
    /// What is wrong with it, and what it costs.
    pub(crate) what: String,
}

/// Checks the blob files the log of the database in `dir` points to, as
/// sled 0.34 writes and reads them (`pagecache/blob_io.rs`): a value too
/// large for a record of the log (over a quarter of a segment) is kept in
/// `blobs/N`, N the LSN of the record that wrote it, as a CRC32
/// (little-endian) of the rest, a kind byte, then the value; the record
/// holds N.
///
/// sled's recovery reads the blob of every such record from the segment of
/// its snapshot's stable LSN on: a blob that fails its checksum stops
/// recovery there, which then drops every record after it and deletes the
/// blobs written after it, without an error; a missing one skips its
/// record. Both are refused here (the first found, in the log's order):
/// - a blob that a record recovery reads points to, present and failing
///   its checksum (or too short to hold one);
/// - a blob that holds a page's present value, missing or failing its
///   checksum: pointed to by the newest record that replaced the page, or
///   a change added to the page after it (whichever `snap.*` file sled
///   reads, the pages it holds, then the log after it). A blob of an
///   older value of a page is deleted by sled once a newer one is
///   written, and is not looked for.
///
/// `pages` is what [`audit_before_open`] noted of the log `db`.
pub(crate) fn audit_blobs(
    dir: &Path,
    db: &Path,
    segment_size: usize,
    pages: &Pages,
) -> std::io::Result<Option<BadBlob>> {
    let snapshot = read_snapshot(dir);
    let stable = snapshot.as_ref().map_or(0, |s| s.stable);
    let segment = segment_size as u64;
    let first_read = stable / segment * segment;
    // The newest record that replaced or freed a page, if recovery applies
    // it (from the snapshot's stable LSN on).
    let reset = |page: u64| pages.resets.get(&page).filter(|(lsn, _)| *lsn >= stable);
    // (LSN of the record, its offset, the blob, whether it holds a present
    // value): those to check, in the log's order.
    let mut checks: Vec<(u64, u64, i64, bool)> = Vec::new();
    for b in &pages.blobs {
        let present = b.lsn >= stable
            && match reset(b.page) {
                Some(&(lsn, freed)) => {
                    (b.lsn == lsn && !LINK_KINDS.contains(&b.kind))
                        || (b.lsn > lsn && !freed && LINK_KINDS.contains(&b.kind))
                }
                None => {
                    LINK_KINDS.contains(&b.kind)
                        && snapshot
                            .as_ref()
                            .is_some_and(|s| s.present.contains_key(&b.page))
                }
            };
        if present || b.lsn >= first_read {
            checks.push((b.lsn, b.offset, b.blob, present));
        }
    }
    if let Some(snapshot) = &snapshot {
        for (page, blobs) in &snapshot.present {
            if reset(*page).is_none() {
                for &(lsn, offset, blob) in blobs {
                    checks.push((lsn, offset, blob, true));
                }
            }
        }
    }
    checks.sort_unstable_by_key(|&(lsn, _, blob, _)| (lsn, blob));
    let mut seen = std::collections::HashSet::new();
    for (lsn, offset, blob, present) in checks {
        if !seen.insert((blob, present)) {
            continue;
        }
        let file = dir.join("blobs").join(blob.to_string());
        let (wrong, cost) = match blob_checksum(&file) {
            Ok(None) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !present => continue,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (
                "is missing".to_owned(),
                "it holds a value the store holds now: sled's recovery would skip the record and \
                 open the store without that value",
            ),
            Err(e) => return Err(e),
            Ok(Some(why)) if lsn >= first_read => (
                why,
                "sled's recovery reads it, and would stop at that record, drop every record \
                 written after it and delete their blobs",
            ),
            Ok(Some(why)) => (
                why,
                "it holds a value the store holds now, which could not be read",
            ),
        };
        return Ok(Some(BadBlob {
            file: file.clone(),
            what: format!(
                "sled's blob file {}, which the record at offset {offset} of {} points to, \
                 {wrong}: {cost}",
                file.display(),
                db.display()
            ),
        }));
    }
    Ok(None)
}

/// Why the blob file at `path` fails sled's check (`Ok(None)`: it passes):
/// its first 4 bytes are the CRC32 (little-endian) of the rest.
fn blob_checksum(path: &Path) -> std::io::Result<Option<String>> {
    let mut file = File::open(path)?;
    let mut stored = [0u8; 4];
    let mut buf = vec![0u8; 64 * 1024];
    let mut hasher = crc32fast::Hasher::new();
    let mut len: u64 = 0;
    loop {
        let got = read_full(&mut file, &mut buf)?;
        let mut chunk = &buf[..got];
        while len < 4 && !chunk.is_empty() {
            stored[len as usize] = chunk[0];
            chunk = &chunk[1..];
            len += 1;
        }
        len += chunk.len() as u64;
        hasher.update(chunk);
        if got < buf.len() {
            break;
        }
    }
    if len < 5 {
        return Ok(Some(format!(
            "is {len} bytes long, too short for a blob (a checksum and a kind byte before the \
             value)"
        )));
    }
    Ok((hasher.finalize() != u32::from_le_bytes(stored))
        .then(|| format!("fails its checksum ({len} bytes long)")))
}

/// What [`audit_blobs`] needs of the snapshot sled's recovery starts from.
struct Snapshot {
    /// Its stable LSN: recovery applies the log's records from there on.
    stable: u64,
    /// The blobs of the pages it holds present: per page, (the LSN of the
    /// record, its offset in the log, the blob).
    present: std::collections::HashMap<u64, Vec<(u64, u64, i64)>>,
}

/// The snapshot sled's recovery reads (`pagecache/snapshot.rs`): of the
/// files `snap.*` in `dir` (but `*.in___motion`), the last by name, its
/// bytes followed by their length (8 bytes) and their CRC32 (4 bytes,
/// little-endian). `None` when there is none, or it cannot be read (sled's
/// open then fails by itself).
fn read_snapshot(dir: &Path) -> Option<Snapshot> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with("snap.") && !name.ends_with(".in___motion"))
        .collect();
    names.sort();
    let bytes = std::fs::read(dir.join(names.pop()?)).ok()?;
    let body = bytes.get(..bytes.len().checked_sub(12)?)?;
    let stored = u32::from_le_bytes(bytes[bytes.len() - 4..].try_into().ok()?);
    if crc32(&[body]) != stored {
        return None;
    }
    parse_snapshot(body)
}

/// A snapshot's bytes (`serialization.rs`): its stable LSN (an `i64`, 8
/// bytes, plus one, 0 for none), its active segment (a varint plus one),
/// then each page: 0, an LSN and a pointer (freed); or 1 plus its number of
/// changes, then as many (LSN, pointer, size). A pointer is 0 and an
/// offset (a varint), or 1, an offset and a blob's number (8 bytes).
fn parse_snapshot(mut buf: &[u8]) -> Option<Snapshot> {
    fn take8(buf: &mut &[u8]) -> Option<i64> {
        let bytes: [u8; 8] = buf.get(..8)?.try_into().ok()?;
        *buf = &buf[8..];
        Some(i64::from_le_bytes(bytes))
    }
    fn pointer(buf: &mut &[u8]) -> Option<(u64, Option<i64>)> {
        let (&tag, rest) = buf.split_first()?;
        *buf = rest;
        let offset = varint(buf)?;
        match tag {
            0 => Some((offset, None)),
            1 => Some((offset, Some(take8(buf)?))),
            _ => None,
        }
    }
    let stable = match take8(&mut buf)? {
        0 => 0,
        shifted if shifted > 0 => u64::try_from(shifted - 1).ok()?,
        _ => return None,
    };
    varint(&mut buf)?;
    let mut present = std::collections::HashMap::new();
    let mut page: u64 = 0;
    while let Some((&tag, rest)) = buf.split_first() {
        buf = rest;
        if tag == 0 {
            take8(&mut buf)?;
            pointer(&mut buf)?;
        } else {
            let mut blobs = Vec::new();
            for _ in 0..tag {
                let lsn = u64::try_from(take8(&mut buf)?).ok()?;
                let (offset, blob) = pointer(&mut buf)?;
                varint(&mut buf)?;
                if let Some(blob) = blob {
                    blobs.push((lsn, offset, blob));
                }
            }
            present.insert(page, blobs);
        }
        page += 1;
    }
    Some(Snapshot { stable, present })
}

/// sled's variable-length integer (`serialization.rs`).
fn varint(buf: &mut &[u8]) -> Option<u64> {
    let first = *buf.first()?;
    let (value, used) = match first {
        0..=240 => (u64::from(first), 1),
        241..=248 => (
            240 + 256 * (u64::from(first) - 241) + u64::from(*buf.get(1)?),
            2,
        ),
        249 => (
            2288 + 256 * u64::from(*buf.get(1)?) + u64::from(*buf.get(2)?),
            3,
        ),
        other => {
            let size = usize::from(other) - 247;
            let mut le = [0u8; 8];
            le[..size].copy_from_slice(buf.get(1..=size)?);
            (u64::from_le_bytes(le), size + 1)
        }
    };
    *buf = &buf[used..];
    Some(value)
}

fn crc32(parts: &[&[u8]]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    for part in parts {
        hasher.update(part);
    }
    hasher.finalize()
}

fn read_full(file: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// The stable LSN recovery reached: the newest snapshot file (`snap.` and
/// the LSN in 16 hexadecimal digits) in the database's directory.
pub(crate) fn stable_lsn(dir: &Path) -> std::io::Result<u64> {
    let mut newest = 0;
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        if let Some(lsn) = name
            .to_str()
            .and_then(|n| n.strip_prefix("snap."))
            .filter(|hex| hex.len() == 16)
            .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        {
            newest = newest.max(lsn);
        }
    }
    Ok(newest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_read_as_sled_writes_them() {
        for (bytes, value) in [
            (&[7u8][..], 7u64),
            (&[240], 240),
            (&[241, 0], 240),
            (&[248, 255], 2287),
            (&[249, 0, 0], 2288),
            (&[250, 1, 2, 3], 0x03_0201),
        ] {
            let mut b = bytes;
            assert_eq!(varint(&mut b), Some(value));
            assert!(b.is_empty());
        }
        let mut short: &[u8] = &[249, 1];
        assert_eq!(varint(&mut short), None);
    }

    /// A small deterministic generator, so that a failure repeats.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// A varint of any of sled's widths, its value drawn at random (up to
    /// `u64::MAX`).
    fn any_varint(rng: &mut Rng) -> Vec<u8> {
        match rng.below(5) {
            0 => vec![rng.below(241) as u8],
            1 => vec![241 + rng.below(8) as u8, rng.next() as u8],
            2 => vec![249, rng.next() as u8, rng.next() as u8],
            _ => {
                let size = 3 + rng.below(6);
                // Near the width's end as often as anywhere.
                let value = match rng.below(3) {
                    0 => rng.next(),
                    1 => u64::MAX - rng.below(4096) as u64,
                    _ => 1 << rng.below(64),
                };
                let mut v = vec![247 + size as u8];
                v.extend_from_slice(&value.to_le_bytes()[..size]);
                v
            }
        }
    }

    /// A segment as a damaged or reused log may hold it: a header whose
    /// checksum is good, then whole messages of its own number, stale
    /// message headers of any number with lengths of any size (up to
    /// `u64::MAX`), random bytes and zeros, cut anywhere.
    fn any_segment(rng: &mut Rng, segment_size: usize, number: u64) -> Vec<u8> {
        let mut seg = vec![0u8; SEG_HEADER_LEN];
        let lsn = number * segment_size as u64;
        seg[4..12].copy_from_slice(&(lsn ^ 0x7FFF_FFFF_FFFF_FFFF).to_le_bytes());
        let crc = crc32(&[&seg[4..SEG_HEADER_LEN]]) ^ 0xFFFF_FFFF;
        seg[0..4].copy_from_slice(&crc.to_le_bytes());
        while seg.len() < segment_size {
            match rng.below(4) {
                // A whole message of this segment.
                0 => {
                    let body: Vec<u8> = (0..rng.below(64)).map(|_| rng.next() as u8).collect();
                    // Kind, body length, segment number (both under 241:
                    // one byte each), page id.
                    let mut head = vec![
                        1 + rng.below(usize::from(MAX_KIND)) as u8,
                        body.len() as u8,
                        number as u8,
                    ];
                    head.extend(any_varint(rng));
                    let crc = crc32(&[&body, &head]) ^ 0xFFFF_FFFF;
                    seg.extend_from_slice(&crc.to_le_bytes());
                    seg.extend_from_slice(&head);
                    seg.extend_from_slice(&body);
                }
                // A message header of any number and any length.
                1 => {
                    seg.extend((0..4).map(|_| rng.next() as u8));
                    seg.push(rng.below(usize::from(MAX_KIND) + 2) as u8);
                    seg.extend(any_varint(rng));
                    if rng.below(2) == 0 {
                        seg.push(number as u8);
                    } else {
                        seg.extend(any_varint(rng));
                    }
                    seg.extend(any_varint(rng));
                }
                2 => seg.extend((0..rng.below(40)).map(|_| rng.next() as u8)),
                _ => seg.extend(std::iter::repeat_n(0, rng.below(40))),
            }
        }
        seg.truncate(segment_size);
        if rng.below(4) == 0 {
            seg.truncate(rng.below(segment_size));
        }
        seg
    }

    /// Whatever bytes a log holds, reading it is an answer, never a panic:
    /// thousands of segments made of whole messages, stale headers of any
    /// length, random bytes and zeros, each scanned, audited and read as
    /// a whole file.
    #[test]
    fn any_bytes_in_a_log_are_read_without_a_panic() {
        let segment_size = 512;
        let path = Path::new("db");
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for case in 0..3_000u64 {
            // Under 241: one byte as a varint.
            let number = case % 200;
            let segment = any_segment(&mut rng, segment_size, number);
            let mut pages = Pages::default();
            let _ = scan_segment(&segment, 0, segment_size, path, Some(&mut pages));
            let stable = rng.next();
            for at in 0..segment.len() {
                let _ = message_at(&segment, at, number, segment_size);
                let _ = own_record_at(&segment, at, number);
                let _ = batch_manifest_at(&segment, at, number, segment_size);
                let _ = parse_record(&segment[at..]);
                let _ = data_from(&segment, at, number, segment_size, 0, stable);
            }
        }
        let dir = tempfile::tempdir().unwrap();
        for case in 0..200u64 {
            let mut bytes = Vec::new();
            for number in 0..(1 + rng.below(4)) as u64 {
                let mut segment = any_segment(&mut rng, segment_size, number + case % 100);
                segment.resize(segment_size, 0);
                bytes.extend(segment);
            }
            bytes.truncate(rng.below(bytes.len() + 1));
            let file = dir.path().join("db");
            std::fs::write(&file, &bytes).unwrap();
            let _ = audit(
                &mut File::open(&file).unwrap(),
                &file,
                segment_size,
                rng.next(),
            );
            let mut pages = Pages::default();
            let _ = audit_before_open(
                &mut File::open(&file).unwrap(),
                &file,
                segment_size,
                &mut pages,
            );
            let _ = audit_blobs(dir.path(), &file, segment_size, &pages);
        }
    }

    /// Stale bytes that look like a header but give a length near
    /// `u64::MAX` (or merely past the segment) are no message, never an
    /// overflow: CI once met them in a reused segment.
    #[test]
    fn a_header_whose_length_runs_past_the_segment_is_no_message() {
        let segment_size = 4096;
        for len in [
            &[255, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF][..],
            &[255, 0xF0, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF],
            &[255, 0, 0, 0, 0, 0, 0, 0, 0x80],
            &[250, 0, 0x10, 0],
            &[249, 0x0F, 0xF0],
        ] {
            for at in [0, 17, 4000] {
                let mut segment = vec![0u8; segment_size];
                let header = [&[1, 2, 3, 4, 1][..], len, &[3], &[9]].concat();
                segment[at..at + header.len()].copy_from_slice(&header);
                assert!(
                    matches!(message_at(&segment, at, 3, segment_size), Message::None),
                    "length {len:?} at {at}"
                );
            }
        }
    }

    /// A snapshot as sled 0.34 serializes one (`serialization.rs`): the
    /// pages it holds present, with the blobs they point to, and its stable
    /// LSN; any bytes at all are an answer, never a panic.
    #[test]
    fn snapshots_read_as_sled_writes_them() {
        let mut bytes = Vec::new();
        // Stable LSN 70,000 (plus one), active segment 3 (plus one).
        bytes.extend_from_slice(&70_001i64.to_le_bytes());
        bytes.push(4);
        // Page 0: present, a base inline (LSN 20, offset 20, size 30).
        bytes.push(1);
        bytes.extend_from_slice(&20i64.to_le_bytes());
        bytes.extend_from_slice(&[0, 20, 30]);
        // Page 1: freed (LSN 40, inline at 40).
        bytes.push(0);
        bytes.extend_from_slice(&40i64.to_le_bytes());
        bytes.extend_from_slice(&[0, 40]);
        // Page 2: present, a base in blob 5000 (offset 2288 as a varint of
        // 3 bytes) and a change in blob 6000 (offset 300).
        bytes.push(2);
        bytes.extend_from_slice(&5000i64.to_le_bytes());
        bytes.extend_from_slice(&[1, 249, 0, 0]);
        bytes.extend_from_slice(&5000i64.to_le_bytes());
        bytes.push(9);
        bytes.extend_from_slice(&6000i64.to_le_bytes());
        bytes.extend_from_slice(&[1, 241, 60]);
        bytes.extend_from_slice(&6000i64.to_le_bytes());
        bytes.push(9);
        let snapshot = parse_snapshot(&bytes).unwrap();
        assert_eq!(snapshot.stable, 70_000);
        assert_eq!(snapshot.present.len(), 2);
        assert_eq!(snapshot.present[&0], vec![]);
        assert_eq!(
            snapshot.present[&2],
            vec![(5000, 2288, 5000), (6000, 300, 6000)]
        );
        for cut in 0..bytes.len() {
            let _ = parse_snapshot(&bytes[..cut]);
        }
        let mut rng = Rng(0x2545_F491_4F6C_DD1D);
        for _ in 0..2_000 {
            let noise: Vec<u8> = (0..rng.below(200)).map(|_| rng.next() as u8).collect();
            let _ = parse_snapshot(&noise);
        }
    }

    /// A blob passes sled's check when its first 4 bytes are the CRC32 of
    /// the rest (a kind byte, then the value); any change to it, or a
    /// length under 5 bytes, fails it.
    #[test]
    fn blobs_are_checked_as_sled_reads_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1234");
        let mut blob = vec![0u8; 4];
        blob.push(9);
        blob.extend((0..100_000u32).map(|i| (i * 7) as u8));
        let crc = crc32(&[&blob[4..]]);
        blob[..4].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(&path, &blob).unwrap();
        assert_eq!(blob_checksum(&path).unwrap(), None);
        for at in [0, 3, 4, 5, 65_535, 65_536, blob.len() - 1] {
            let mut bad = blob.clone();
            bad[at] ^= 0x10;
            std::fs::write(&path, &bad).unwrap();
            assert!(blob_checksum(&path).unwrap().is_some(), "{at}");
        }
        for len in [0, 3, 4, blob.len() - 1] {
            std::fs::write(&path, &blob[..len]).unwrap();
            assert!(blob_checksum(&path).unwrap().is_some(), "{len}");
        }
    }
}
