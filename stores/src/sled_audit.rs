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

fn audit_segment(
    segment: &[u8],
    base: u64,
    segment_size: usize,
    stable_lsn: u64,
    path: &Path,
) -> Option<Lost> {
    if segment.iter().all(|&b| b == 0) {
        return None;
    }
    if segment.len() < SEG_HEADER_LEN {
        return Some(Lost {
            offset: base,
            what: format!(
                "the log ends {} bytes into a segment, inside its header: {} was cut short",
                segment.len(),
                path.display()
            ),
        });
    }
    let stored = u32::from_le_bytes(segment[0..4].try_into().ok()?) ^ 0xFFFF_FFFF;
    if crc32(&[&segment[4..SEG_HEADER_LEN]]) != stored {
        return Some(Lost {
            offset: base,
            what: "a segment header of sled's log fails its checksum".into(),
        });
    }
    let lsn = u64::from_le_bytes(segment[4..12].try_into().ok()?) ^ 0x7FFF_FFFF_FFFF_FFFF;
    let number = lsn / segment_size as u64;
    // Walk the segment's messages as recovery reads them, one after the
    // other, to the first that is not a whole message of this segment.
    let mut at = SEG_HEADER_LEN;
    loop {
        match message_at(segment, at, number, segment_size) {
            Message::Whole(len) => at += len,
            Message::CutShort => {
                return Some(Lost {
                    offset: base + at as u64,
                    what: format!(
                        "the log ends inside a record (the file {} was cut short, or a crash \
                         tore the write)",
                        path.display()
                    ),
                });
            }
            Message::None => break,
        }
    }
    // The file ends in this segment: past the last whole message there is
    // nothing, or zeros. Anything else is a record cut short, its header
    // perhaps too short to read.
    if segment.len() < segment_size && segment[at..].iter().any(|&b| b != 0) {
        return Some(Lost {
            offset: base + at as u64,
            what: format!(
                "the log ends inside a record (the file {} was cut short, or a crash tore the \
                 write)",
                path.display()
            ),
        });
    }
    // Recovery stops there (in the last segment it reads) or skips the rest
    // of the segment (in the others): a whole message of this segment
    // further on would be lost. What follows the last message is zeros or
    // stale messages of the segment's earlier use, of another number.
    for later in at + 1..segment.len() {
        match message_at(segment, later, number, segment_size) {
            Message::None => {}
            Message::Whole(_) | Message::CutShort => {
                return Some(Lost {
                    offset: base + at as u64,
                    what: format!(
                        "a record of sled's log fails its checksum there, and sled's recovery \
                         would drop the records after it, the first whole one at offset {}",
                        base + later as u64
                    ),
                });
            }
        }
    }
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
        });
    }
    None
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
    if at + header_len + len > segment_size {
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
}
