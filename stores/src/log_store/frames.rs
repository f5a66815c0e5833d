//! Frames added to the log and not yet written: bytes in fixed-size chunks
//! that are reused once written.
//!
//! One growing `Vec` would copy everything added so far each time it
//! doubled, and a burst (ten thousand sessions starting at once add
//! megabytes between two writes) would have it allocate and fault in fresh
//! memory at every doubling. Chunks are never copied once filled, and the
//! written ones go back to a [`Pool`] for the next frames, so a store that
//! commits steadily writes into memory it has already touched.

use std::fs::File;
use std::os::unix::fs::FileExt;

/// The size of one chunk.
pub(super) const CHUNK: usize = 256 << 10;

/// Bytes appended in order, in chunks of [`CHUNK`] bytes (the last one
/// partly filled).
#[derive(Debug, Default)]
pub(super) struct Frames {
    chunks: Vec<Vec<u8>>,
    len: usize,
}

/// Emptied chunks kept to take the next frames, up to a limit.
#[derive(Debug)]
pub(super) struct Pool {
    free: Vec<Vec<u8>>,
    /// The most chunks kept.
    keep: usize,
}

impl Pool {
    /// A pool that keeps at most `bytes` of chunks.
    pub(super) fn new(bytes: usize) -> Self {
        Self {
            free: Vec::new(),
            keep: bytes / CHUNK,
        }
    }

    fn take(&mut self) -> Vec<u8> {
        self.free.pop().unwrap_or_else(|| Vec::with_capacity(CHUNK))
    }

    /// Keeps the chunks of `frames` (emptied) for the next frames, as many
    /// as the pool has room for.
    pub(super) fn put(&mut self, frames: Frames) {
        for mut chunk in frames.chunks {
            if self.free.len() >= self.keep {
                break;
            }
            chunk.clear();
            self.free.push(chunk);
        }
    }
}

impl Frames {
    /// How many bytes were added.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends `bytes`, taking chunks from `pool` as the last one fills.
    pub(super) fn extend(&mut self, mut bytes: &[u8], pool: &mut Pool) {
        self.len += bytes.len();
        while !bytes.is_empty() {
            let last = match self.chunks.last_mut() {
                Some(last) if last.len() < CHUNK => last,
                _ => {
                    self.chunks.push(pool.take());
                    self.chunks.last_mut().expect("a chunk was just pushed")
                }
            };
            let (now, rest) = bytes.split_at(bytes.len().min(CHUNK - last.len()));
            last.extend_from_slice(now);
            bytes = rest;
        }
    }

    /// Appends every byte of `later`, whose chunks go to `pool`.
    pub(super) fn append(&mut self, later: Frames, pool: &mut Pool) {
        for chunk in &later.chunks {
            self.extend(chunk, pool);
        }
        pool.put(later);
    }

    /// A copy of the `len` bytes from `at`, if they were all added.
    pub(super) fn get(&self, at: usize, len: usize) -> Option<Vec<u8>> {
        if at.checked_add(len)? > self.len {
            return None;
        }
        let mut out = Vec::with_capacity(len);
        let mut chunk = at / CHUNK;
        let mut from = at % CHUNK;
        while out.len() < len {
            let bytes = self.chunks.get(chunk)?;
            let take = (len - out.len()).min(bytes.len() - from);
            out.extend_from_slice(&bytes[from..from + take]);
            chunk += 1;
            from = 0;
        }
        Some(out)
    }

    /// Writes every byte to `file` from `offset` on.
    pub(super) fn write_at(&self, file: &File, mut offset: u64) -> std::io::Result<()> {
        for chunk in &self.chunks {
            file.write_all_at(chunk, offset)?;
            offset += chunk.len() as u64;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes that tell their position apart.
    fn bytes(from: usize, len: usize) -> Vec<u8> {
        (from..from + len).map(|i| (i % 251) as u8).collect()
    }

    #[test]
    fn bytes_come_back_in_order_across_chunk_boundaries() {
        let mut pool = Pool::new(4 * CHUNK);
        let mut frames = Frames::default();
        // Pieces that straddle chunk boundaries, one larger than a chunk.
        let sizes = [10, CHUNK - 20, 30, 2 * CHUNK + 7, 1, CHUNK];
        let mut at = 0;
        for size in sizes {
            frames.extend(&bytes(at, size), &mut pool);
            at += size;
        }
        assert_eq!(frames.len(), at);
        assert_eq!(frames.get(0, at), Some(bytes(0, at)));
        for (from, len) in [
            (0, 10),
            (CHUNK - 5, 10),
            (CHUNK - 10, 2 * CHUNK),
            (at - 1, 1),
        ] {
            assert_eq!(
                frames.get(from, len),
                Some(bytes(from, len)),
                "{from}+{len}"
            );
        }
        assert_eq!(frames.get(at - 1, 2), None, "past the end");
        assert_eq!(frames.get(usize::MAX, 2), None, "overflowing");
        assert_eq!(frames.get(at, 0), Some(Vec::new()));

        let dir = tempfile::tempdir().expect("a temporary directory");
        let file = File::create_new(dir.path().join("f")).expect("the file is created");
        frames.write_at(&file, 3).expect("the frames are written");
        let written = std::fs::read(dir.path().join("f")).expect("the file is read");
        assert_eq!(&written[..3], &[0, 0, 0]);
        assert_eq!(&written[3..], &bytes(0, at)[..]);
    }

    #[test]
    fn written_chunks_are_reused_up_to_the_pool_limit() {
        let mut pool = Pool::new(2 * CHUNK);
        let mut frames = Frames::default();
        frames.extend(&bytes(0, 3 * CHUNK + 1), &mut pool);
        let kept: Vec<*const u8> = frames.chunks[..2].iter().map(|c| c.as_ptr()).collect();
        pool.put(frames);
        assert_eq!(pool.free.len(), 2, "kept up to the limit");
        assert!(pool.free.iter().all(Vec::is_empty));
        let mut next = Frames::default();
        next.extend(&bytes(5, 100), &mut pool);
        assert_eq!(pool.free.len(), 1);
        assert!(
            kept.contains(&next.chunks[0].as_ptr()),
            "a kept chunk is taken rather than a new one"
        );
        assert_eq!(next.get(0, 100), Some(bytes(5, 100)));

        let mut later = Frames::default();
        later.extend(&bytes(105, CHUNK), &mut pool);
        next.append(later, &mut pool);
        assert_eq!(next.get(0, CHUNK + 100), Some(bytes(5, CHUNK + 100)));
    }
}
