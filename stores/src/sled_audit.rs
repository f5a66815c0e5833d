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
//! at, and would be lost. A message cut short by the end of the file is
//! reported too (a truncated file, or a write a crash tore). Segment
//! headers that fail their checksum are reported as damage.
//!
//! The layout read here is sled 0.34's (`pagecache/logger.rs`,
//! `serialization.rs`): a segment starts with a 20-byte header (a CRC32
//! xor `0xFFFF_FFFF`, the segment's first LSN and the highest stable LSN,
//! each xor `0x7FFF_FFFF_FFFF_FFFF`, little-endian); a message is a CRC32,
//! a kind byte, its body's length, its segment number and its page id
//! (three of sled's variable-length integers), then the body.

use std::fs::File;
use std::io::Read;
use std::path::Path;

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
}

/// Reads the log `file` (sled's `db`, as it was before recovery) in
/// segments of `segment_size`, given the LSN recovery reached: the first
/// place where records the log holds would be lost, if any.
pub(crate) fn audit(
    file: &mut File,
    path: &Path,
    segment_size: usize,
    stable_lsn: u64,
) -> std::io::Result<Option<Lost>> {
    let mut buf = vec![0u8; segment_size];
    let mut base: u64 = 0;
    loop {
        let got = read_full(file, &mut buf)?;
        if got == 0 {
            return Ok(None);
        }
        let segment = &buf[..got];
        if let Some(lost) = audit_segment(segment, base, segment_size, stable_lsn, path) {
            return Ok(Some(lost));
        }
        if got < segment_size {
            return Ok(None);
        }
        base += segment_size as u64;
    }
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
pub(crate) fn audit_before_open(
    file: &mut File,
    path: &Path,
    segment_size: usize,
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
        match scan_segment(segment, base, segment_size, path) {
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

fn audit_segment(
    segment: &[u8],
    base: u64,
    segment_size: usize,
    stable_lsn: u64,
    path: &Path,
) -> Option<Lost> {
    let (lsn, at) = match scan_segment(segment, base, segment_size, path) {
        Scan::Zero => return None,
        Scan::Found(lost) | Scan::Skipped { lost, .. } => return Some(lost),
        Scan::Walked { lsn, at } => (lsn, at),
    };
    // Whole messages beyond where recovery stopped (in an earlier segment)
    // would be lost too.
    let end = lsn.saturating_add(at as u64);
    if at > SEG_HEADER_LEN && end > stable_lsn {
        let from = usize::try_from(stable_lsn.saturating_sub(lsn))
            .unwrap_or(usize::MAX)
            .max(SEG_HEADER_LEN);
        return Some(Lost {
            offset: base + from as u64,
            what: format!(
                "sled's recovery stops before this part of the log (at log sequence number \
                 {stable_lsn}, earlier in the log) and would drop its {} bytes of records",
                at - from
            ),
            torn_end: false,
        });
    }
    None
}

fn scan_segment(segment: &[u8], base: u64, segment_size: usize, path: &Path) -> Scan {
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
        });
    };
    let number = lsn / segment_size as u64;
    // Walk the segment's messages as recovery reads them, one after the
    // other, to the first that is not a whole message of this segment.
    let mut at = SEG_HEADER_LEN;
    loop {
        match message_at(segment, at, number, segment_size) {
            Message::Whole(len) => at += len,
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
            let _ = scan_segment(&segment, 0, segment_size, path);
            let _ = audit_segment(&segment, 0, segment_size, rng.next(), path);
            for at in 0..segment.len() {
                let _ = message_at(&segment, at, number, segment_size);
                let _ = own_record_at(&segment, at, number);
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
            let _ = audit_before_open(&mut File::open(&file).unwrap(), &file, segment_size);
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
}
