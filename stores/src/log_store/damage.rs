//! Damage in a log: telling a torn end from damage before the end, and
//! checking a log's frames before a compaction replaces it.
//!
//! A crash of the process cuts the log short: the write it interrupted is
//! a prefix of its frames, so the frame it cut is the last thing in the
//! file and nothing whole follows it. Damage to bytes already written (the
//! disk, a stray write) is followed by the whole frames written after it.
//! So when a log stops reading at a frame, [`whole_frames_after`] looks
//! past it, at every byte, for a whole frame: a length that fits before
//! the end, the flags the store writes, a table whose lengths add up to
//! the payload exactly, an id in UTF-8 and a matching crc32. That is what
//! the checksum and [`frame::decode`] accept, and a little stricter (flag
//! bits other than the head's, which the store never writes, are refused).
//!
//! Bytes that are not a frame pass by chance with negligible probability.
//! At a position in random bytes, the length field must equal the one
//! value the table (bytes other than it) adds up to, and the crc32 field
//! must equal the crc32 of the payload (bytes other than it): each holds
//! with probability 2^-32, both with 2^-64, so even a gigabyte of random
//! bytes (2^30 positions) holds a false frame with probability below
//! 2^-34. Inside a frame cut short by a crash the bytes are its table and
//! JSON: a false frame would need its removal count (at most 2^27, so a
//! byte below 0x20) outside the JSON text, which escapes every byte below
//! 0x20, and its crc32 to match.
//!
//! A power cut can do more than a crash of the process to the bytes
//! written since the last sync: the disk may have stored some of their
//! pages and not others, so whole frames can follow a hole there. None of
//! them was acknowledged as durable (their sync never returned). The log
//! does not record where the last sync ended, but a page the disk never
//! stored reads as zeros: [`zero_page_between`] finds a page-aligned page
//! of zeros in the damage, which no frame holds (a frame's JSON has no
//! zero byte, and its head and table have a few at most), and the store
//! takes such damage for a power cut's, a torn end whose whole frames are
//! set aside with it. Other damage before the end (a byte changed, a
//! length, a checksum, zeros short of a page) is reported, not cut.

use super::frame::{self, FRAME_HEAD, HAS_HEAD, MAX_PAYLOAD, MIN_PAYLOAD};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// The most bytes of the log a search holds in memory at once.
const WINDOW: usize = 1 << 20;

/// The whole frames found after a damaged one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Beyond {
    /// Where the first starts.
    pub(super) first: u64,
    /// How many there are from there to the end of the log, counting
    /// those past any further damage.
    pub(super) frames: u64,
}

impl Beyond {
    /// Says how many whole frames follow and where the first is.
    pub(super) fn describe(&self) -> String {
        let (frames, first) = (self.frames, self.first);
        let s = if frames == 1 { "" } else { "s" };
        format!("{frames} whole frame{s} (commits) follow it, the first at offset {first}")
    }
}

/// Looks for whole frames in `file` (of `size` bytes) from `from` on: at
/// each byte until one starts, then frame by frame, and past any further
/// damage byte by byte again. Reads only, at most [`WINDOW`] bytes held at
/// once.
pub(super) fn whole_frames_after(file: &File, from: u64, size: u64) -> io::Result<Option<Beyond>> {
    let mut window = Window {
        file,
        size,
        start: 0,
        buf: Vec::new(),
    };
    let (mut first, mut frames) = (None, 0);
    let mut at = from;
    let last_start = size.saturating_sub((FRAME_HEAD + MIN_PAYLOAD) as u64);
    while at <= last_start {
        match whole_frame_at(&mut window, at)? {
            Some(len) => {
                first.get_or_insert(at);
                frames += 1;
                at += len;
            }
            None => at += 1,
        }
    }
    Ok(first.map(|first| Beyond { first, frames }))
}

/// The page size a hole left by a power cut is made of (at least).
const PAGE: u64 = 4096;

/// Whether `file` holds, between `from` and `to`, a page-aligned page of
/// zeros: what a page the disk never stored before a power cut reads as.
/// Reads only, a page at a time.
pub(super) fn zero_page_between(file: &File, from: u64, to: u64) -> io::Result<bool> {
    let mut page = [0u8; PAGE as usize];
    let mut at = from.div_ceil(PAGE) * PAGE;
    while at + PAGE <= to {
        FileExt::read_exact_at(file, &mut page, at)?;
        if page.iter().all(|&b| b == 0) {
            return Ok(true);
        }
        at += PAGE;
    }
    Ok(false)
}

/// Where a window reads from: the log file (or, in tests, bytes).
trait ReadAt {
    fn read_exact_at(&self, buf: &mut [u8], at: u64) -> io::Result<()>;
}

impl ReadAt for File {
    fn read_exact_at(&self, buf: &mut [u8], at: u64) -> io::Result<()> {
        FileExt::read_exact_at(self, buf, at)
    }
}

/// The bytes of a file from `start`, read a window at a time.
struct Window<'a> {
    file: &'a dyn ReadAt,
    size: u64,
    start: u64,
    buf: Vec<u8>,
}

impl Window<'_> {
    /// The `len` bytes from `at` (`len` at most [`WINDOW`]), or `None` if
    /// they run past the end.
    fn get(&mut self, at: u64, len: usize) -> io::Result<Option<&[u8]>> {
        let Some(end) = at.checked_add(len as u64).filter(|&end| end <= self.size) else {
            return Ok(None);
        };
        if at < self.start || end > self.start + self.buf.len() as u64 {
            let n = (self.size - at).min(WINDOW as u64) as usize;
            self.buf.resize(n, 0);
            self.file.read_exact_at(&mut self.buf, at)?;
            self.start = at;
        }
        let from = (at - self.start) as usize;
        Ok(self.buf.get(from..from + len))
    }

    /// The little-endian integer of the `n` bytes (at most 8) from `at`,
    /// if they end by `end`.
    fn int(&mut self, at: u64, n: usize, end: u64) -> io::Result<Option<u64>> {
        if at.saturating_add(n as u64) > end {
            return Ok(None);
        }
        Ok(self.get(at, n)?.map(|bytes| {
            let mut le = [0u8; 8];
            le[..n].copy_from_slice(bytes);
            u64::from_le_bytes(le)
        }))
    }

    /// The crc32 of the `len` bytes from `at`, which are in the file.
    fn crc(&mut self, mut at: u64, len: usize) -> io::Result<u32> {
        let mut hasher = crc32fast::Hasher::new();
        let end = at + len as u64;
        while at < end {
            let n = (end - at).min(WINDOW as u64) as usize;
            let bytes = self
                .get(at, n)?
                .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
            hasher.update(bytes);
            at += n as u64;
        }
        Ok(hasher.finalize())
    }
}

/// The length of the whole frame that starts at `at`, if one does.
fn whole_frame_at(window: &mut Window<'_>, at: u64) -> io::Result<Option<u64>> {
    let Some(head) = window.get(at, FRAME_HEAD)? else {
        return Ok(None);
    };
    let mut bytes = [0u8; FRAME_HEAD];
    bytes.copy_from_slice(head);
    let (len, crc) = frame::frame_head(&bytes);
    let payload = at + FRAME_HEAD as u64;
    let end = payload + len as u64;
    if !(MIN_PAYLOAD..=MAX_PAYLOAD).contains(&len) || end > window.size {
        return Ok(None);
    }
    // The table first: it fails at once where the checksum would read the
    // whole payload.
    if !table_fits(window, payload, end)? || window.crc(payload, len)? != crc {
        return Ok(None);
    }
    Ok(Some(end - at))
}

/// Whether the payload from `payload` to `end` is a table, as
/// [`frame::decode`] reads it, whose bodies fill the payload exactly, with
/// no flag but the head's and an id in UTF-8.
fn table_fits(window: &mut Window<'_>, payload: u64, end: u64) -> io::Result<bool> {
    let Some(flags) = window.int(payload, 1, end)? else {
        return Ok(false);
    };
    if flags & !u64::from(HAS_HEAD) != 0 {
        return Ok(false);
    }
    let Some(id_len) = window.int(payload + 1, 2, end)? else {
        return Ok(false);
    };
    let id = payload + 3;
    let mut at = id + id_len;
    let Some(removed) = window.int(at, 4, end)? else {
        return Ok(false);
    };
    at += 4 + 8 * removed;
    let Some(appended) = window.int(at, 4, end)? else {
        return Ok(false);
    };
    at += 4;
    let table = at;
    at += 13 * appended;
    // Read only once the table is known to end by `end`.
    let Some(head_len) = window.int(at, 4, end)? else {
        return Ok(false);
    };
    at += 4;
    let mut bodies = if flags & u64::from(HAS_HEAD) != 0 {
        head_len
    } else {
        0
    };
    for i in 0..appended {
        let Some(len) = window.int(table + 13 * i + 9, 4, end)? else {
            return Ok(false);
        };
        bodies += len;
        if at + bodies > end {
            return Ok(false);
        }
    }
    if at + bodies != end {
        return Ok(false);
    }
    Ok(window
        .get(id, id_len as usize)?
        .is_some_and(|id| std::str::from_utf8(id).is_ok()))
}

/// Where a log stops being whole frames, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Bad {
    /// Where the frame that fails starts.
    pub(super) offset: u64,
    pub(super) why: String,
}

/// Checks the frames of a log fed to it in order, in pieces of any size:
/// each one's length within bounds and its crc32 matching. Holds no more
/// than a frame's head.
#[derive(Debug)]
pub(super) struct Checker {
    /// The offset of the next byte fed.
    at: u64,
    /// Where the frame being read starts.
    frame: u64,
    head: [u8; FRAME_HEAD],
    /// Bytes of `head` fed so far.
    got: usize,
    /// Bytes of the payload still to come, and the crc32 it must have.
    left: usize,
    crc: u32,
    hasher: crc32fast::Hasher,
}

impl Checker {
    /// A checker whose first byte fed is the log's byte `at`, where a frame
    /// starts.
    pub(super) fn new(at: u64) -> Self {
        Self {
            at,
            frame: at,
            head: [0; FRAME_HEAD],
            got: 0,
            left: 0,
            crc: 0,
            hasher: crc32fast::Hasher::new(),
        }
    }

    /// Feeds the next bytes of the log; fails at the first frame that is
    /// not whole (after which the checker is not to be fed again).
    pub(super) fn feed(&mut self, mut bytes: &[u8]) -> Result<(), Bad> {
        while !bytes.is_empty() {
            if self.got < FRAME_HEAD {
                if self.got == 0 {
                    self.frame = self.at;
                }
                let n = (FRAME_HEAD - self.got).min(bytes.len());
                self.head[self.got..self.got + n].copy_from_slice(&bytes[..n]);
                self.got += n;
                self.at += n as u64;
                bytes = &bytes[n..];
                if self.got == FRAME_HEAD {
                    let (len, crc) = frame::frame_head(&self.head);
                    if !(MIN_PAYLOAD..=MAX_PAYLOAD).contains(&len) {
                        return Err(self.bad(format!("a frame has a length of {len} bytes")));
                    }
                    (self.left, self.crc) = (len, crc);
                    self.hasher = crc32fast::Hasher::new();
                }
                continue;
            }
            // `left` is at least MIN_PAYLOAD once a head is read.
            let n = self.left.min(bytes.len());
            self.hasher.update(&bytes[..n]);
            self.left -= n;
            self.at += n as u64;
            bytes = &bytes[n..];
            if self.left == 0 {
                if std::mem::take(&mut self.hasher).finalize() != self.crc {
                    return Err(self.bad("a frame fails its checksum".into()));
                }
                self.got = 0;
            }
        }
        Ok(())
    }

    /// Fails unless the bytes fed end where a frame ends.
    pub(super) fn finish(&self) -> Result<(), Bad> {
        if self.got == 0 {
            Ok(())
        } else {
            Err(self.bad("the log ends inside a frame".into()))
        }
    }

    fn bad(&self, why: String) -> Bad {
        Bad {
            offset: self.frame,
            why,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use harness::SessionId;

    /// `n` bytes of a xorshift sequence.
    fn random(n: usize, mut x: u64) -> Vec<u8> {
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    fn sample_frames() -> Vec<Vec<u8>> {
        let id = SessionId::from("s-é");
        let big = vec![b'x'; 3 * WINDOW / 2];
        type Case<'a> = (Vec<u64>, Vec<(u64, bool, &'a [u8])>, Option<&'a [u8]>);
        let cases: Vec<Case<'_>> = vec![
            (vec![], vec![], Some(b"{\"h\":1}")),
            (
                vec![3, 9],
                vec![(10, true, b"{}"), (11, false, b"[1,2]")],
                Some(b"{}"),
            ),
            (vec![], vec![(0, false, b"")], None),
            (vec![1], vec![(2, true, &big)], Some(b"{}")),
        ];
        cases
            .into_iter()
            .map(|(remove, append, head)| frame::encode(&id, &remove, &append, head).unwrap().0)
            .collect()
    }

    /// What the store reads as a whole frame at the start of `bytes`: its
    /// checksum matches and `decode` reads it (and its flags are ones the
    /// store writes).
    fn reads_whole(bytes: &[u8]) -> Option<u64> {
        let head: [u8; FRAME_HEAD] = bytes.get(..FRAME_HEAD)?.try_into().ok()?;
        let (len, crc) = frame::frame_head(&head);
        let payload = bytes.get(FRAME_HEAD..FRAME_HEAD.checked_add(len)?)?;
        let whole = len <= MAX_PAYLOAD
            && !payload.is_empty()
            && crc32fast::hash(payload) == crc
            && payload[0] & !HAS_HEAD == 0
            && frame::decode(payload).is_ok();
        whole.then_some((FRAME_HEAD + len) as u64)
    }

    impl ReadAt for Vec<u8> {
        fn read_exact_at(&self, buf: &mut [u8], at: u64) -> io::Result<()> {
            let at = at as usize;
            buf.copy_from_slice(&self[at..at + buf.len()]);
            Ok(())
        }
    }

    fn found_at(bytes: &[u8], at: u64) -> Option<u64> {
        let bytes = bytes.to_vec();
        let mut window = Window {
            file: &bytes,
            size: bytes.len() as u64,
            start: 0,
            buf: Vec::new(),
        };
        whole_frame_at(&mut window, at).unwrap()
    }

    /// The search takes a frame as whole exactly when the store reads it
    /// whole: frames as written (one larger than the window), and each
    /// with a byte changed anywhere in its head and table, or cut short,
    /// or its checksum made to match a changed table.
    #[test]
    fn the_search_takes_as_whole_exactly_what_the_store_reads_whole() {
        for bytes in sample_frames() {
            assert_eq!(found_at(&bytes, 0), Some(bytes.len() as u64));
            // The large frame's table is like the others'.
            let table = if bytes.len() > WINDOW {
                0
            } else {
                (FRAME_HEAD + 40).min(bytes.len())
            };
            for at in 0..table {
                for value in [0u8, 1, 2, 0x7f, 0xff, bytes[at] ^ 1] {
                    let mut changed = bytes.clone();
                    changed[at] = value;
                    assert_eq!(found_at(&changed, 0), reads_whole(&changed), "{at}={value}");
                    // The same with the checksum made to match: only the
                    // table decides.
                    let len = frame::frame_head(changed[..FRAME_HEAD].try_into().unwrap()).0;
                    if at >= FRAME_HEAD && len + FRAME_HEAD == changed.len() {
                        let crc = crc32fast::hash(&changed[FRAME_HEAD..]);
                        changed[4..8].copy_from_slice(&crc.to_le_bytes());
                        assert_eq!(
                            found_at(&changed, 0),
                            reads_whole(&changed),
                            "{at}={value}, checksum matched"
                        );
                    }
                }
            }
            for cut in [1, FRAME_HEAD, FRAME_HEAD + 1, bytes.len() - 1] {
                assert_eq!(found_at(&bytes[..cut], 0), None, "cut to {cut}");
            }
        }
    }

    /// Whole frames are found after random bytes and past further damage,
    /// each counted; random bytes alone hold none.
    #[test]
    fn whole_frames_are_found_after_random_bytes_and_random_bytes_alone_hold_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let search = |bytes: &[u8], from: u64| {
            std::fs::write(&path, bytes).unwrap();
            whole_frames_after(&File::open(&path).unwrap(), from, bytes.len() as u64).unwrap()
        };
        // Several windows of random bytes, and short runs of many seeds.
        assert_eq!(search(&random(3 * WINDOW + 17, 0x9e37_79b9), 0), None);
        for seed in 1..200 {
            assert_eq!(search(&random(200, seed), 0), None, "seed {seed}");
        }
        assert_eq!(search(&[0; 4096], 0), None, "zeros");

        let frames = sample_frames();
        let mut bytes = random(1000, 5);
        let first = bytes.len() as u64;
        bytes.extend(&frames[0]);
        bytes.extend(&frames[1]);
        bytes.extend(random(77, 6));
        bytes.extend(&frames[3]);
        bytes.extend(&frames[2]);
        assert_eq!(search(&bytes, 0), Some(Beyond { first, frames: 4 }));
        // Searched from inside the first frame, the others are found.
        assert_eq!(
            search(&bytes, first + 1),
            Some(Beyond {
                first: first + frames[0].len() as u64,
                frames: 3
            })
        );
        // A frame cut by the end of the file is not whole.
        let cut = &bytes[..bytes.len() - 1];
        assert_eq!(search(cut, first + 1).map(|b| b.frames), Some(2));
    }

    /// The checker accepts whole frames fed in pieces of any size, and
    /// names the frame where a changed byte or a cut is.
    #[test]
    fn the_checker_names_the_first_frame_that_is_not_whole() {
        let frames = sample_frames();
        let log: Vec<u8> = frames.concat();
        let starts: Vec<usize> = frames
            .iter()
            .scan(0, |at, f| {
                let start = *at;
                *at += f.len();
                Some(start)
            })
            .collect();
        let check = |bytes: &[u8], piece: usize| {
            let mut checker = Checker::new(16);
            for chunk in bytes.chunks(piece) {
                checker.feed(chunk)?;
            }
            checker.finish()
        };
        for piece in [1, 3, 8, 1000, log.len()] {
            assert_eq!(check(&log, piece), Ok(()), "pieces of {piece}");
        }
        for (k, start) in starts.iter().enumerate() {
            for at in [
                *start,
                start + 5,
                start + FRAME_HEAD,
                start + frames[k].len() - 1,
            ] {
                let mut changed = log.clone();
                changed[at] ^= 0x40;
                let bad = check(&changed, 4096).unwrap_err();
                assert_eq!(bad.offset, 16 + *start as u64, "byte {at}: {bad:?}");
            }
        }
        let last = *starts.last().unwrap();
        let bad = check(&log[..log.len() - 1], 7).unwrap_err();
        assert_eq!(bad.offset, 16 + last as u64);
        assert!(bad.why.contains("ends inside"), "{bad:?}");
        // Zeros are not frames: a zero length is out of bounds.
        let bad = check(&[0; 64], 64).unwrap_err();
        assert_eq!(bad.offset, 16);
    }
}
