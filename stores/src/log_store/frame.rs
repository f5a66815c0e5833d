//! The log's bytes: its header, and commits as checksummed frames.
//!
//! ```text
//! file   := header frame*
//! header := "harness-log\0" u32(FORMAT)                      16 bytes
//! frame  := u32(len) u32(crc32 of payload) payload[len]
//! payload:= u8(flags) u16(id len) id
//!           u32(removed) u64(seq)*removed
//!           u32(appended) (u64(seq) u8(snapshot) u32(len))*appended
//!           u32(head len)
//!           checkpoint bodies in order, then the head body (JSON)
//! ```
//!
//! Integers are little-endian. Flag bit 0: the frame carries a head (a
//! compaction writes a large session's checkpoints in frames without one,
//! the head in the last). A frame is one commit: it is read whole or not at
//! all, which is what makes a commit atomic across a crash.

use harness::SessionId;

/// The first bytes of every log file.
pub(crate) const MAGIC: &[u8; 12] = b"harness-log\0";
/// The format this build writes and reads.
pub(crate) const FORMAT: u32 = 1;
/// The header's length.
pub(crate) const HEADER_LEN: u64 = 16;
/// A frame's length and checksum.
pub(crate) const FRAME_HEAD: usize = 8;
/// The largest payload a frame may have: larger commits are refused, and
/// a length field beyond it marks a damaged frame.
pub(crate) const MAX_PAYLOAD: usize = 1 << 30;
/// The smallest payload a frame can have: flags, an empty id, nothing
/// removed or appended, no head body.
pub(crate) const MIN_PAYLOAD: usize = 1 + 2 + 4 + 4 + 4;
/// Flag bit: the frame carries a head.
pub(crate) const HAS_HEAD: u8 = 1;

/// The header of a new log file.
pub(crate) fn header() -> [u8; HEADER_LEN as usize] {
    let mut out = [0u8; HEADER_LEN as usize];
    out[..12].copy_from_slice(MAGIC);
    out[12..].copy_from_slice(&FORMAT.to_le_bytes());
    out
}

/// Why a file's first bytes are not a log this build reads.
pub(crate) fn check_header(bytes: &[u8]) -> Result<(), String> {
    if bytes.len() < HEADER_LEN as usize || &bytes[..12] != MAGIC {
        return Err("it does not start with the harness log header".into());
    }
    let mut format = [0u8; 4];
    format.copy_from_slice(&bytes[12..16]);
    match u32::from_le_bytes(format) {
        FORMAT => Ok(()),
        other => Err(format!(
            "it is in log format {other}; this build reads format {FORMAT}"
        )),
    }
}

/// One checkpoint a frame appends: where its body is, from the frame's
/// first byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Appended {
    pub(crate) seq: u64,
    pub(crate) snapshot: bool,
    pub(crate) at: u32,
    pub(crate) len: u32,
}

/// A frame's contents, its bodies located from the frame's first byte.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Frame {
    pub(crate) session: SessionId,
    pub(crate) remove: Vec<u64>,
    pub(crate) append: Vec<Appended>,
    /// Where the head's body is, if the frame has one.
    pub(crate) head: Option<(u32, u32)>,
}

/// Encodes a frame: the session, the checkpoints it removes, the ones it
/// appends (seq, is a snapshot, JSON body) and its head's JSON body.
/// Returns the frame's bytes and where each body is in them.
pub(crate) fn encode(
    session: &SessionId,
    remove: &[u64],
    append: &[(u64, bool, &[u8])],
    head: Option<&[u8]>,
) -> Result<(Vec<u8>, Frame), String> {
    let bodies: usize =
        append.iter().map(|(_, _, b)| b.len()).sum::<usize>() + head.map_or(0, <[u8]>::len);
    let mut out =
        Vec::with_capacity(FRAME_HEAD + table_len(session, remove, append.len()) + bodies);
    let frame = encode_into(
        &mut out,
        session,
        remove,
        append.iter().map(|&(seq, snapshot, _)| (seq, snapshot)),
        head.is_some(),
        |body, out| {
            out.extend_from_slice(match body {
                Some(i) => append[i].2,
                None => head.unwrap_or_default(),
            });
            Ok(())
        },
    )?;
    Ok((out, frame))
}

/// The length of a frame's table (its payload before the bodies).
fn table_len(session: &SessionId, remove: &[u64], appended: usize) -> usize {
    1 + 2 + session.as_str().len() + 4 + 8 * remove.len() + 4 + 13 * appended + 4
}

/// Encodes a frame at the end of `out`, its bodies written in place by
/// `write`: `write(Some(i), out)` appends the JSON body of the `i`th
/// checkpoint of `append` (seq, is a snapshot), `write(None, out)` the head's, when
/// `has_head`. Nothing is copied but the bytes `write` appends; the
/// returned frame locates each body from the frame's first byte. On an
/// error, `out` keeps what was written of the frame.
pub(crate) fn encode_into(
    out: &mut Vec<u8>,
    session: &SessionId,
    remove: &[u64],
    append: impl ExactSizeIterator<Item = (u64, bool)> + Clone,
    has_head: bool,
    mut write: impl FnMut(Option<usize>, &mut Vec<u8>) -> Result<(), String>,
) -> Result<Frame, String> {
    let id = session.as_str().as_bytes();
    let id_len = u16::try_from(id.len())
        .map_err(|_| format!("the session id is {} bytes; at most 65535 fit", id.len()))?;
    let start = out.len();
    out.extend_from_slice(&[0u8; FRAME_HEAD]);
    out.push(if has_head { HAS_HEAD } else { 0 });
    out.extend_from_slice(&id_len.to_le_bytes());
    out.extend_from_slice(id);
    out.extend_from_slice(&len32(remove.len()).to_le_bytes());
    for seq in remove {
        out.extend_from_slice(&seq.to_le_bytes());
    }
    out.extend_from_slice(&len32(append.len()).to_le_bytes());
    // Each body's length is filled in once it is written.
    let lens = out.len();
    for (seq, snapshot) in append.clone() {
        out.extend_from_slice(&seq.to_le_bytes());
        out.push(u8::from(snapshot));
        out.extend_from_slice(&[0u8; 4]);
    }
    let head_len = out.len();
    out.extend_from_slice(&[0u8; 4]);
    let mut appended = Vec::with_capacity(append.len());
    let mut body = |which: Option<usize>, out: &mut Vec<u8>| -> Result<(u32, u32), String> {
        let at = out.len();
        write(which, out)?;
        let len = out.len() - at;
        if len > MAX_PAYLOAD {
            return Err(format!(
                "a body is {len} bytes; one commit may be at most {MAX_PAYLOAD}"
            ));
        }
        Ok((len32(at - start), len32(len)))
    };
    for (i, (seq, snapshot)) in append.enumerate() {
        let (at, len) = body(Some(i), out)?;
        let field = lens + 13 * i + 9;
        out[field..field + 4].copy_from_slice(&len.to_le_bytes());
        appended.push(Appended {
            seq,
            snapshot,
            at,
            len,
        });
    }
    let head = if has_head {
        let (at, len) = body(None, out)?;
        out[head_len..head_len + 4].copy_from_slice(&len.to_le_bytes());
        Some((at, len))
    } else {
        None
    };
    let payload = out.len() - start - FRAME_HEAD;
    if payload > MAX_PAYLOAD {
        return Err(format!(
            "the commit is {payload} bytes; one commit may be at most {MAX_PAYLOAD}"
        ));
    }
    let crc = crc32fast::hash(&out[start + FRAME_HEAD..]);
    out[start..start + 4].copy_from_slice(&len32(payload).to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    Ok(Frame {
        session: session.clone(),
        remove: remove.to_vec(),
        append: appended,
        head,
    })
}

/// A length known to fit: payloads are at most [`MAX_PAYLOAD`].
fn len32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The payload length and checksum of a frame head.
pub(crate) fn frame_head(bytes: &[u8; FRAME_HEAD]) -> (usize, u32) {
    let [a, b, c, d, e, f, g, h] = *bytes;
    (
        u32::from_le_bytes([a, b, c, d]) as usize,
        u32::from_le_bytes([e, f, g, h]),
    )
}

/// Reads the payload of a frame whose checksum matched; bodies are located
/// from the frame's first byte (its length field). Refuses, rather than
/// panics on, a payload that does not parse.
pub(crate) fn decode(payload: &[u8]) -> Result<Frame, String> {
    let mut r = Reader {
        bytes: payload,
        at: 0,
    };
    let flags = r.u8()?;
    let id_len = usize::from(r.u16()?);
    let id = std::str::from_utf8(r.take(id_len)?)
        .map_err(|e| format!("the session id is not UTF-8: {e}"))?;
    let removed = r.u32()? as usize;
    let mut remove = Vec::with_capacity(removed.min(payload.len() / 8));
    for _ in 0..removed {
        remove.push(r.u64()?);
    }
    let appended = r.u32()? as usize;
    let mut lens = Vec::with_capacity(appended.min(payload.len() / 13));
    for _ in 0..appended {
        lens.push((r.u64()?, r.u8()? != 0, r.u32()?));
    }
    let head_len = r.u32()?;
    let mut at = r.at;
    let mut append = Vec::with_capacity(lens.len());
    for (seq, snapshot, len) in lens {
        append.push(Appended {
            seq,
            snapshot,
            at: len32(FRAME_HEAD + at),
            len,
        });
        at += len as usize;
    }
    let head = (flags & HAS_HEAD != 0).then(|| (len32(FRAME_HEAD + at), head_len));
    at += if head.is_some() { head_len as usize } else { 0 };
    if at != payload.len() {
        return Err(format!(
            "its bodies take {at} bytes of a {}-byte payload",
            payload.len()
        ));
    }
    Ok(Frame {
        session: SessionId::from(id.to_string()),
        remove,
        append,
        head,
    })
}

/// Bounds-checked reads of a payload.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&end| end <= self.bytes.len())
            .ok_or_else(|| format!("it ends inside its table, at byte {}", self.at))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.array::<1>()?[0])
    }

    fn u16(&mut self) -> Result<u16, String> {
        self.array().map(u16::from_le_bytes)
    }

    fn u32(&mut self) -> Result<u32, String> {
        self.array().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Result<u64, String> {
        self.array().map(u64::from_le_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(frame: &[u8], at: u32, len: u32) -> &[u8] {
        &frame[at as usize..(at + len) as usize]
    }

    /// A frame reads back as written, its bodies where it says, with and
    /// without a head, removals and appends.
    #[test]
    fn frames_read_back_as_written() {
        let id = SessionId::from("s-é");
        type Case<'a> = (Vec<u64>, Vec<(u64, bool, &'a [u8])>, Option<&'a [u8]>);
        let cases: Vec<Case<'_>> = vec![
            (vec![], vec![], Some(b"{\"h\":1}")),
            (
                vec![3, 9],
                vec![(10, true, b"{}"), (11, false, b"[1,2]")],
                Some(b"{}"),
            ),
            (vec![], vec![(0, false, b"")], None),
        ];
        for (remove, append, head) in cases {
            let (bytes, frame) = encode(&id, &remove, &append, head).unwrap();
            let (len, crc) = frame_head(bytes[..8].try_into().unwrap());
            assert_eq!(len, bytes.len() - FRAME_HEAD);
            assert_eq!(crc, crc32fast::hash(&bytes[FRAME_HEAD..]));
            let read = decode(&bytes[FRAME_HEAD..]).unwrap();
            assert_eq!(read, frame);
            for (a, (seq, snapshot, b)) in read.append.iter().zip(&append) {
                assert_eq!((a.seq, a.snapshot), (*seq, *snapshot));
                assert_eq!(body(&bytes, a.at, a.len), *b);
            }
            assert_eq!(read.head.map(|(at, len)| body(&bytes, at, len)), head);
        }
    }

    /// Payloads that pass no checksum test but do not parse are refused,
    /// never panicked on: cut anywhere, lengths that overrun, bytes left
    /// over, an id that is not UTF-8.
    #[test]
    fn payloads_that_do_not_parse_are_refused() {
        let id = SessionId::from("s");
        let (bytes, _) = encode(&id, &[1], &[(2, false, b"{}")], Some(b"{}")).unwrap();
        let payload = &bytes[FRAME_HEAD..];
        for cut in 0..payload.len() {
            assert!(decode(&payload[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = payload.to_vec();
        longer.push(0);
        assert!(decode(&longer).unwrap_err().contains("payload"));
        let mut huge = payload.to_vec();
        // The removal count: four billion seqs in a 40-byte payload.
        huge[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(&huge).is_err());
        let mut bad_id = payload.to_vec();
        bad_id[3] = 0xff;
        assert!(decode(&bad_id).unwrap_err().contains("UTF-8"));
    }

    #[test]
    fn headers_of_other_files_and_formats_are_refused() {
        assert!(check_header(&header()).is_ok());
        assert!(check_header(b"short").is_err());
        assert!(check_header(&[0u8; 16]).unwrap_err().contains("header"));
        let mut v2 = header();
        v2[12] = 2;
        assert!(check_header(&v2).unwrap_err().contains("format 2"));
    }
}
