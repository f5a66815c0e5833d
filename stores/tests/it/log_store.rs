//! The log store: the suite, reopening, a torn end set aside, damage before
//! the end refused (or set aside when asked), files it refuses to read,
//! records it cannot read, its lock, compaction (during reads and commits,
//! failed, on a damaged log, and what a crash leaves of one), permissions.
//!
//! The layout, as the rustdoc and `log_store/frame.rs` document it: a
//! directory holding `LOCK` and `log.{generation}`; a log is a 16-byte
//! header (`harness-log\0`, then the format as a little-endian u32: 1) and
//! one frame per commit: the payload's length (u32 LE), the crc32 of the
//! payload (u32 LE), the payload. A damaged end goes to
//! `log.{generation}.tail-{offset}`.

use crate::{GARBAGE, create_sample, id};
use harness::SessionId;
use harness::session::{Checkpoint, CheckpointKind, Commit, SessionStore, StoreError, StoredRun};
use harness_stores::conformance::{self, advance, create, head, snapshot, update};
use harness_stores::{LogOptions, LogStore, ReadOnlyError};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The header's length.
const HEADER_LEN: usize = 16;
/// A frame's length and checksum fields.
const FRAME_HEAD: usize = 8;

/// What a store holds: each listed session's head and checkpoints.
pub(crate) type Contents = BTreeMap<SessionId, (StoredRun, Vec<Checkpoint>)>;

/// Reads everything `store` holds through its API.
pub(crate) async fn contents(store: &dyn SessionStore) -> Contents {
    let mut out = Contents::new();
    for session in store.sessions().await.unwrap() {
        let head = store.load(&session).await.unwrap().unwrap();
        let checkpoints = store.checkpoints(&session, 0).await.unwrap();
        out.insert(session, (head, checkpoints));
    }
    out
}

/// What `commit` makes of `model`: the new head, the removed checkpoints
/// gone, the appended ones in.
fn apply(model: &mut Contents, commit: &Commit) {
    let (head, checkpoints) = model
        .entry(commit.head.session_id.clone())
        .or_insert_with(|| (commit.head.clone(), Vec::new()));
    *head = commit.head.clone();
    checkpoints.retain(|cp| {
        !commit.remove.contains(&cp.seq) && !commit.append.iter().any(|a| a.seq == cp.seq)
    });
    checkpoints.extend(commit.append.iter().cloned());
    checkpoints.sort_by_key(|cp| cp.seq);
}

/// Commits `commit` to `store` and to `model`.
async fn commit(store: &LogStore, model: &mut Contents, commit: Commit) {
    store.commit(&commit.clone()).await.unwrap();
    apply(model, &commit);
}

/// A frame, by the documented layout: the payload's length and crc32,
/// then the payload: flags (bit 0: a head follows), the id (u16 length),
/// the removed seqs (u32 count, u64 each), a table of the appended
/// checkpoints (u32 count; u64 seq, u8 is a snapshot, u32 length each),
/// the head's length (u32), the checkpoints' bodies, the head's body.
fn encode_frame(
    session: &str,
    remove: &[u64],
    append: &[(u64, bool, Vec<u8>)],
    head: Option<&[u8]>,
) -> Vec<u8> {
    let u32_le = |n: usize| u32::try_from(n).unwrap().to_le_bytes();
    let mut payload = vec![u8::from(head.is_some())];
    payload.extend_from_slice(&u16::try_from(session.len()).unwrap().to_le_bytes());
    payload.extend_from_slice(session.as_bytes());
    payload.extend_from_slice(&u32_le(remove.len()));
    for seq in remove {
        payload.extend_from_slice(&seq.to_le_bytes());
    }
    payload.extend_from_slice(&u32_le(append.len()));
    for (seq, snapshot, body) in append {
        payload.extend_from_slice(&seq.to_le_bytes());
        payload.push(u8::from(*snapshot));
        payload.extend_from_slice(&u32_le(body.len()));
    }
    payload.extend_from_slice(&u32_le(head.map_or(0, <[u8]>::len)));
    for (_, _, body) in append {
        payload.extend_from_slice(body);
    }
    payload.extend_from_slice(head.unwrap_or_default());
    let mut out = u32_le(payload.len()).to_vec();
    out.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
    out
}

/// The frame of `commit`: its checkpoints and head as JSON.
fn commit_frame(commit: &Commit) -> Vec<u8> {
    let append: Vec<(u64, bool, Vec<u8>)> = commit
        .append
        .iter()
        .map(|cp| {
            let snapshot = matches!(cp.kind, CheckpointKind::Snapshot(_));
            (cp.seq, snapshot, serde_json::to_vec(cp).unwrap())
        })
        .collect();
    let head = serde_json::to_vec(&commit.head).unwrap();
    encode_frame(
        commit.head.session_id.as_str(),
        &commit.remove,
        &append,
        Some(&head),
    )
}

/// Where each frame of a log file is, by its length fields; panics unless
/// the file is a header and whole frames with matching checksums.
pub(crate) fn frames(bytes: &[u8]) -> Vec<Range<usize>> {
    assert_eq!(&bytes[..HEADER_LEN], &header(1), "the log's header");
    let mut out = Vec::new();
    let mut at = HEADER_LEN;
    while at < bytes.len() {
        let field = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().unwrap());
        let (len, crc) = (field(at) as usize, field(at + 4));
        let end = at + FRAME_HEAD + len;
        assert_eq!(crc, crc32fast::hash(&bytes[at + FRAME_HEAD..end]));
        out.push(at..end);
        at = end;
    }
    out
}

/// The header of a log in `format`.
pub(crate) fn header(format: u32) -> Vec<u8> {
    let mut out = b"harness-log\0".to_vec();
    out.extend_from_slice(&format.to_le_bytes());
    out
}

/// The generation of a log file's path: the number after `log.`.
fn generation(path: &Path) -> u64 {
    let name = path.file_name().unwrap().to_str().unwrap();
    name.strip_prefix("log.").unwrap().parse().unwrap()
}

/// Every file under `dir`, with its bytes.
pub(crate) fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else {
                out.insert(path.clone(), std::fs::read(&path).unwrap());
            }
        }
    }
    out
}

/// `n` bytes of a xorshift sequence.
pub(crate) fn random(n: usize, mut x: u64) -> Vec<u8> {
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The names of the files in `dir`.
pub(crate) fn listing(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect()
}

/// A state of about 1 KiB.
fn big_state(n: u64) -> serde_json::Value {
    json!({"n": n, "messages": vec!["a message of some length, as agents keep"; 24]})
}

/// The store passes the conformance suite, each check on a fresh directory.
/// (No corruption hook: the store reads records from its in-memory index
/// and checksummed frames; damaged files are the tests below.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn log_store_conforms() {
    let base = tempfile::tempdir().unwrap();
    let n = AtomicUsize::new(0);
    let make = || {
        LogStore::open(
            base.path()
                .join(n.fetch_add(1, Ordering::Relaxed).to_string()),
        )
        .unwrap()
    };
    conformance::run_all(make).await;
}

/// Every commit is in the log when the store is opened again: heads,
/// checkpoints and removals of several sessions, over hundreds of commits,
/// those not durable too (written, not synced: the process ending keeps
/// them). Opening a whole log changes none of its bytes, and the store goes
/// on from where it was.
#[tokio::test]
async fn log_store_reopened_sees_every_commit() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("store");
    let store = LogStore::open(&dir).unwrap();
    assert_eq!(store.dir(), dir);
    assert_eq!(store.log_path(), dir.join("log.1"));
    let mut model = Contents::new();
    let sessions = ["alpha", "beta", "gamma", "delta"];
    for s in sessions {
        let c = create_sample(&store, s, 2).await;
        apply(&mut model, &c);
    }
    for round in 0..100u64 {
        for (i, s) in sessions.iter().enumerate() {
            let prev = model[&id(s)].0.clone();
            let seq = prev.last_seq + 1;
            let index = prev.steps + 1;
            // Every 7th a snapshot that removes what came before it; every
            // other commit not durable.
            let mut next = if (round + i as u64) % 7 == 6 {
                let remove = model[&id(s)].1.iter().map(|cp| cp.seq).collect();
                advance(&prev, vec![snapshot(seq, index, big_state(seq))], remove)
            } else {
                advance(
                    &prev,
                    vec![update(seq, index, "think", json!({"round": round}))],
                    vec![],
                )
            };
            next.durable = round % 2 == 0;
            commit(&store, &mut model, next).await;
        }
    }
    // A session's last commit removes without appending.
    let prev = model[&id("delta")].0.clone();
    let oldest = model[&id("delta")].1[0].seq;
    commit(&store, &mut model, advance(&prev, vec![], vec![oldest])).await;
    assert_eq!(contents(&store).await, model);
    let path = store.log_path();
    drop(store);
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(frames(&bytes).len(), sessions.len() * 101 + 1);

    let store = LogStore::open(&dir).unwrap();
    assert_eq!(store.set_aside(), None);
    assert_eq!(store.log_path(), path);
    assert_eq!(contents(&store).await, model);
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "opening wrote nothing"
    );
    let prev = model[&id("alpha")].0.clone();
    let next = advance(
        &prev,
        vec![update(prev.last_seq + 1, prev.steps + 1, "x", json!("x"))],
        vec![],
    );
    commit(&store, &mut model, next).await;
    drop(store);
    let store = LogStore::open(&dir).unwrap();
    assert_eq!(contents(&store).await, model);
}

/// A log of commits to three sessions (creations, updates, a snapshot
/// that removes what came before it, a commit that only removes, one that
/// is not durable), one frame per commit.
pub(crate) struct Fixture {
    /// The log file.
    pub(crate) bytes: Vec<u8>,
    /// Where each commit's frame is in it.
    pub(crate) frames: Vec<Range<usize>>,
    /// `after[k]`: what the store holds once the first `k` commits are in.
    pub(crate) after: Vec<Contents>,
}

impl Fixture {
    pub(crate) async fn new() -> Self {
        let a = create(
            head("a"),
            vec![
                snapshot(0, 0, json!({"n": 0})),
                update(1, 1, "think", json!({"n": 1})),
            ],
        );
        let b = create(head("b"), vec![snapshot(0, 0, json!({"m": "x"}))]);
        let a2 = advance(
            &a.head,
            vec![
                update(2, 2, "think", json!({"n": 2})),
                update(3, 3, "act", json!({"n": 3})),
            ],
            vec![],
        );
        let mut b2 = advance(&b.head, vec![update(1, 1, "think", json!("é"))], vec![]);
        b2.durable = false;
        let a3 = advance(
            &a2.head,
            vec![snapshot(4, 3, big_state(3))],
            vec![0, 1, 2, 3],
        );
        let c = create(head("c"), vec![snapshot(0, 0, json!(null))]);
        let b3 = advance(&b2.head, vec![], vec![0]);
        let a4 = advance(
            &a3.head,
            vec![update(5, 4, "think", json!({"n": 4}))],
            vec![],
        );
        let c2 = advance(
            &c.head,
            vec![update(1, 1, "think", json!([1, 2, 3]))],
            vec![],
        );
        let script = [a, b, a2, b2, a3, c, b3, a4, c2];

        let base = tempfile::tempdir().unwrap();
        let store = LogStore::open(base.path()).unwrap();
        let mut model = Contents::new();
        let mut after = vec![model.clone()];
        for c in &script {
            commit(&store, &mut model, c.clone()).await;
            assert_eq!(contents(&store).await, model);
            after.push(model.clone());
        }
        let bytes = std::fs::read(store.log_path()).unwrap();
        let frames = frames(&bytes);
        assert_eq!(frames.len(), script.len(), "one frame per commit");
        for (frame, c) in frames.iter().zip(&script) {
            assert_eq!(
                &bytes[frame.clone()],
                commit_frame(c),
                "the frame of {c:?}, laid out as documented"
            );
        }
        Self {
            bytes,
            frames,
            after,
        }
    }

    /// The number of commits.
    fn commits(&self) -> usize {
        self.frames.len()
    }

    /// Where the last frame starts.
    fn last(&self) -> usize {
        self.frames.last().unwrap().start
    }
}

/// Damaged logs, each opened from a directory of its own.
struct Damaged {
    base: tempfile::TempDir,
    n: usize,
}

impl Damaged {
    fn new() -> Self {
        Self {
            base: tempfile::tempdir().unwrap(),
            n: 0,
        }
    }

    /// A new directory whose `log.1` is `bytes`, beside the `LOCK` file
    /// the store leaves.
    fn dir(&mut self, bytes: &[u8]) -> PathBuf {
        self.n += 1;
        let dir = self.base.path().join(self.n.to_string());
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("LOCK"), b"").unwrap();
        std::fs::write(dir.join("log.1"), bytes).unwrap();
        dir
    }

    /// Opens `bytes` as a log and checks that the end from `cut` on was set
    /// aside: its bytes, exactly, in `log.1.tail-{cut}`, the log cut there,
    /// the store holding `want`. The store then takes commits, and opens
    /// again with nothing more set aside, the tail kept.
    async fn check(&mut self, case: &str, bytes: &[u8], cut: usize, want: &Contents) {
        self.check_with(case, bytes, cut, want, LogOptions::default())
            .await;
    }

    /// [`Damaged::check`], the store opened with `options`.
    async fn check_with(
        &mut self,
        case: &str,
        bytes: &[u8],
        cut: usize,
        want: &Contents,
        options: LogOptions,
    ) {
        let dir = self.dir(bytes);
        let store = LogStore::open_with(&dir, options).unwrap();
        let tail = dir.join(format!("log.1.tail-{cut}"));
        assert_eq!(store.set_aside(), Some(tail.as_path()), "{case}");
        assert_eq!(std::fs::read(&tail).unwrap(), &bytes[cut..], "{case}: tail");
        assert_eq!(
            std::fs::read(dir.join("log.1")).unwrap(),
            &bytes[..cut],
            "{case}: the log ends where the damage began"
        );
        assert_eq!(contents(&store).await, *want, "{case}");

        let mut model = want.clone();
        let c = create_sample(&store, "after", 2).await;
        apply(&mut model, &c);
        if let Some((prev, _)) = want.get(&id("a")) {
            let next = advance(
                prev,
                vec![update(prev.last_seq + 1, prev.steps + 1, "x", json!("x"))],
                vec![],
            );
            commit(&store, &mut model, next).await;
        }
        assert_eq!(contents(&store).await, model, "{case}: new commits");
        drop(store);

        let store = LogStore::open(&dir).unwrap();
        assert_eq!(store.set_aside(), None, "{case}: reopened");
        assert_eq!(contents(&store).await, model, "{case}: reopened");
        assert_eq!(std::fs::read(&tail).unwrap(), &bytes[cut..], "{case}: kept");
        frames(&std::fs::read(store.log_path()).unwrap());
    }
}

/// A log cut inside its last frame (inside the length and checksum, right
/// after them, inside the payload, one byte short) loses that commit and no
/// other; a log cut between frames is whole.
#[tokio::test]
async fn a_log_cut_inside_its_last_frame_loses_only_that_commit() {
    let fx = Fixture::new().await;
    let (start, end) = (fx.last(), fx.bytes.len());
    let mut damaged = Damaged::new();
    for cut in [
        start + 1,
        start + 4,
        start + 7,
        start + FRAME_HEAD,
        start + FRAME_HEAD + 1,
        (start + end) / 2,
        end - 1,
    ] {
        let case = format!("cut at {cut} of the frame {start}..{end}");
        damaged
            .check(&case, &fx.bytes[..cut], start, &fx.after[fx.commits() - 1])
            .await;
    }

    let dir = damaged.dir(&fx.bytes[..start]);
    let store = LogStore::open(&dir).unwrap();
    assert_eq!(store.set_aside(), None);
    assert_eq!(contents(&store).await, fx.after[fx.commits() - 1]);
    assert_eq!(listing(&dir), ["LOCK", "log.1"].map(String::from).into());
}

/// Bytes after the last frame are set aside and every commit is kept:
/// text, a few zeros, zeros the size of a frame head (a frame of no bytes,
/// whose checksum matches but which does not parse), a page of zeros, a
/// frame head whose length runs past the end, one whose checksum fails.
#[tokio::test]
async fn bytes_after_the_last_frame_are_set_aside() {
    let fx = Fixture::new().await;
    let mut bad_crc = 5u32.to_le_bytes().to_vec();
    bad_crc.extend_from_slice(&crc32fast::hash(b"hello").wrapping_add(1).to_le_bytes());
    bad_crc.extend_from_slice(b"hello");
    let cases: [(&str, Vec<u8>); 6] = [
        ("text", GARBAGE.to_vec()),
        ("three zeros", vec![0; 3]),
        ("an empty frame", vec![0; FRAME_HEAD]),
        ("a page of zeros", vec![0; 4096]),
        ("a length past the end", vec![0xff; FRAME_HEAD + 3]),
        ("a bad checksum", bad_crc),
    ];
    let mut damaged = Damaged::new();
    for (case, extra) in cases {
        let mut bytes = fx.bytes.clone();
        bytes.extend_from_slice(&extra);
        damaged
            .check(case, &bytes, fx.bytes.len(), &fx.after[fx.commits()])
            .await;
    }
}

/// One bit flipped anywhere in the last frame (its length, its checksum,
/// its flags, the id, a body, the last byte) loses that commit and no
/// other.
#[tokio::test]
async fn a_flipped_bit_in_the_last_frame_loses_only_that_commit() {
    let fx = Fixture::new().await;
    let (start, end) = (fx.last(), fx.bytes.len());
    let mut damaged = Damaged::new();
    for (at, bit) in [
        (start, 0),
        (start + 3, 7),
        (start + 5, 2),
        (start + FRAME_HEAD, 0),
        (start + FRAME_HEAD + 3, 1),
        ((start + end) / 2, 4),
        (end - 1, 6),
    ] {
        let mut bytes = fx.bytes.clone();
        bytes[at] ^= 1 << bit;
        let case = format!("bit {bit} of byte {at} of the frame {start}..{end}");
        damaged
            .check(&case, &bytes, start, &fx.after[fx.commits() - 1])
            .await;
    }
}

/// Logs damaged before their end, each with whole commits after the
/// damage: (what, the log, the frame where the damage begins, how many
/// whole frames follow it).
fn damaged_before_the_end(fx: &Fixture) -> Vec<(String, Vec<u8>, usize, usize)> {
    let n = fx.commits();
    let frame = |k: usize| fx.frames[k].clone();
    let mut out = Vec::new();
    for k in [0, 1, n / 2, n - 2] {
        let at = frame(k).start + FRAME_HEAD + frame(k).len() / 3;
        let mut bytes = fx.bytes.clone();
        bytes[at] ^= 0x10;
        out.push((
            format!("a byte flipped in frame {k}'s payload"),
            bytes,
            k,
            n - k - 1,
        ));
    }
    for at in [4, 7] {
        let mut bytes = fx.bytes.clone();
        bytes[frame(2).start + at] ^= 0xff;
        out.push((format!("byte {at} of frame 2's checksum"), bytes, 2, n - 3));
    }
    // Zeros from inside frame 3 to past frame 4's length.
    let mut bytes = fx.bytes.clone();
    bytes[frame(3).end - 5..frame(4).start + 6].fill(0);
    out.push((
        "zeros across the boundary of frames 3 and 4".into(),
        bytes,
        3,
        n - 5,
    ));
    for len in [0x3fff_ffff, u32::MAX] {
        let mut bytes = fx.bytes.clone();
        bytes[frame(1).start..frame(1).start + 4].copy_from_slice(&len.to_le_bytes());
        out.push((format!("frame 1's length made {len}"), bytes, 1, n - 2));
    }
    let mut bytes = fx.bytes.clone();
    let short = (frame(5).len() - FRAME_HEAD - 1) as u32;
    bytes[frame(5).start..frame(5).start + 4].copy_from_slice(&short.to_le_bytes());
    out.push(("frame 5's length one short".into(), bytes, 5, n - 6));
    // Past further damage, the frames after it are counted too.
    let mut bytes = fx.bytes.clone();
    for k in [1, 4] {
        bytes[frame(k).start + FRAME_HEAD + 2] ^= 0x01;
    }
    out.push(("frames 1 and 4 damaged".into(), bytes, 1, n - 3));
    out
}

/// How [`LogStore`] reports how many whole frames follow damage, and where.
fn whole_frames_follow(fx: &Fixture, bytes: &[u8], k: usize, whole: usize) -> String {
    // The first frame after frame `k` that is as written.
    let first = fx.frames[k + 1..]
        .iter()
        .find(|f| bytes[(*f).clone()] == fx.bytes[(*f).clone()])
        .unwrap()
        .start;
    let s = if whole == 1 { "" } else { "s" };
    format!("{whole} whole frame{s} (commits) follow it, the first at offset {first}")
}

/// A log damaged before its end (a byte flipped in an early frame's
/// payload, in a checksum, zeros across a frame boundary, a length made
/// huge or one short, two frames damaged), with whole commits after the
/// damage, is refused with `StoreError::Damaged` naming the store, the log
/// and the offset of the damaged frame, how many whole frames follow and
/// what to do, and no file in the directory changes (nothing is set
/// aside, nothing cut), however often it is opened. The reader reports the
/// same. Before, the store opened and silently set aside every commit
/// after the damage.
#[tokio::test]
async fn a_log_damaged_before_its_end_is_refused_and_left_unchanged() {
    let fx = Fixture::new().await;
    let mut damaged = Damaged::new();
    for (case, bytes, k, whole) in damaged_before_the_end(&fx) {
        let dir = damaged.dir(&bytes);
        let log = dir.join("log.1");
        let offset = fx.frames[k].start as u64;
        let follow = whole_frames_follow(&fx, &bytes, k, whole);
        let before = files(&dir);
        for options in [
            LogOptions::default(),
            LogOptions::default().compact_at(1),
            LogOptions::default().set_aside_damage(false),
        ] {
            let err = LogStore::open_with(&dir, options).unwrap_err();
            let shown = err.to_string();
            let StoreError::Damaged {
                store,
                file,
                offset: at,
                what,
            } = err
            else {
                panic!("{case}: {err:?}");
            };
            assert_eq!(
                (store, file, at),
                (dir.clone(), log.clone(), Some(offset)),
                "{case}"
            );
            for says in [
                &follow[..],
                "damaged before its end",
                "nothing was changed",
                "LogOptions::default().set_aside_damage(true)",
                &format!("log.1.tail-{offset}"),
            ] {
                assert!(what.contains(says), "{case}: `{says}` in {what}");
            }
            assert!(
                shown.contains(&format!(
                    "the store {} is damaged: {} at offset {offset}: ",
                    dir.display(),
                    log.display()
                )),
                "{case}: {shown}"
            );
            assert_eq!(files(&dir), before, "{case}: a file changed");
        }
        match LogStore::open_read_only(&dir) {
            Err(ReadOnlyError::Damaged(d)) => {
                assert_eq!(d.offset, Some(offset), "{case}: {d}");
                assert!(d.what.contains(&follow), "{case}: {d}");
                assert!(d.what.contains("set_aside_damage"), "{case}: {d}");
            }
            other => panic!("{case}: {other:?}"),
        }
        assert_eq!(files(&dir), before, "{case}: the reader changed a file");
    }
}

/// A power cut can leave whole frames after pages the disk never stored,
/// which read as zeros: damage holding a page-aligned page of zeros is a
/// torn end, set aside with the whole frames after it (never acknowledged
/// as durable), the commits before it kept. Zeros short of an aligned page
/// are damage before the end, refused as any other.
#[tokio::test]
async fn whole_frames_after_a_page_of_zeros_are_a_power_cuts_torn_end() {
    let fx = Fixture::new().await;
    let mut damaged = Damaged::new();
    for k in 1..fx.commits() - 1 {
        for torn in [0, 3, FRAME_HEAD + 1] {
            for pages in [1u64, 2] {
                // Frame `k` cut `torn` bytes in, then zeros through `pages`
                // whole aligned pages, then the frames after `k` as written.
                let start = fx.frames[k].start;
                let bytes = fx.bytes[..start + torn].to_vec();
                let through = (bytes.len() as u64).div_ceil(4096) * 4096 + 4096 * pages;
                let short = |bytes: &mut Vec<u8>, by: u64| {
                    bytes.resize(usize::try_from(through - by).unwrap(), 0);
                    bytes.extend_from_slice(&fx.bytes[fx.frames[k + 1].start..]);
                };
                let case = format!("frame {k} cut {torn} bytes in, {pages} page(s) of zeros");
                let mut cut = bytes.clone();
                short(&mut cut, 0);
                damaged.check(&case, &cut, start, &fx.after[k]).await;
                if pages == 1 {
                    // One byte short of the aligned page: not a power cut's.
                    let mut near = bytes.clone();
                    short(&mut near, 1);
                    let dir = damaged.dir(&near);
                    let before = files(&dir);
                    match LogStore::open(&dir) {
                        Err(StoreError::Damaged { offset, .. }) => {
                            assert_eq!(offset, Some(start as u64), "{case}, one byte short");
                        }
                        other => panic!("{case}, one byte short: {other:?}"),
                    }
                    assert_eq!(files(&dir), before, "{case}, one byte short");
                }
            }
        }
    }
}

/// With `LogOptions::set_aside_damage(true)`, a log damaged before its end
/// opens: the damaged frame and everything after it (the whole commits
/// among them) are set aside byte for byte, `set_aside` names the file, the
/// store holds exactly the commits before the damage, takes new ones, and
/// opens again with the default options. A torn end is set aside as
/// without the option, an intact log is left alone.
#[tokio::test]
async fn set_aside_damage_opens_a_log_damaged_before_its_end_with_the_commits_before_it() {
    let fx = Fixture::new().await;
    let aside = || LogOptions::default().set_aside_damage(true);
    let mut damaged = Damaged::new();
    for (case, bytes, k, _) in damaged_before_the_end(&fx) {
        damaged
            .check_with(&case, &bytes, fx.frames[k].start, &fx.after[k], aside())
            .await;
    }
    let torn = &fx.bytes[..fx.bytes.len() - 3];
    damaged
        .check_with(
            "a torn end",
            torn,
            fx.last(),
            &fx.after[fx.commits() - 1],
            aside(),
        )
        .await;
    let dir = damaged.dir(&fx.bytes);
    let store = LogStore::open_with(&dir, aside()).unwrap();
    assert_eq!(store.set_aside(), None);
    assert_eq!(contents(&store).await, fx.after[fx.commits()]);
    assert_eq!(std::fs::read(dir.join("log.1")).unwrap(), fx.bytes);
}

/// Random bytes after the last frame, of many lengths and seeds, are a
/// torn end: set aside, every commit kept (their chance of forming a whole
/// frame, a table that adds up to the length and a matching crc32, is
/// about 2^-64 a position). The same bytes followed by a whole frame are
/// damage before the end, and refused.
#[tokio::test]
async fn random_bytes_after_the_last_frame_are_a_torn_end_unless_a_whole_frame_follows() {
    let fx = Fixture::new().await;
    let end = fx.bytes.len();
    let mut damaged = Damaged::new();
    for seed in 1..=20u64 {
        for len in [1, FRAME_HEAD, 23, 200, 4096, 1 << 16] {
            let mut bytes = fx.bytes.clone();
            bytes.extend(random(len, seed));
            let case = format!("{len} random bytes, seed {seed}");
            let dir = damaged.dir(&bytes);
            let store = LogStore::open(&dir).unwrap();
            let tail = dir.join(format!("log.1.tail-{end}"));
            assert_eq!(store.set_aside(), Some(tail.as_path()), "{case}");
            assert_eq!(std::fs::read(&tail).unwrap(), &bytes[end..], "{case}");
            assert_eq!(contents(&store).await, fx.after[fx.commits()], "{case}");
        }
    }
    let later = create(head("later"), vec![snapshot(0, 0, json!("later"))]);
    let mut bytes = fx.bytes.clone();
    bytes.extend(random(300, 42));
    let first = bytes.len();
    bytes.extend(commit_frame(&later));
    let dir = damaged.dir(&bytes);
    let before = files(&dir);
    match LogStore::open(&dir) {
        Err(StoreError::Damaged { offset, what, .. }) => {
            assert_eq!(offset, Some(end as u64), "{what}");
            let follow = format!("1 whole frame (commits) follow it, the first at offset {first}");
            assert!(what.contains(&follow), "{what}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(files(&dir), before);
}

/// A log damaged under an open store (a letter of a live checkpoint
/// changed, so that it is still JSON) is never compacted: the compaction
/// checks every frame of the log it would replace, finds the damage, keeps
/// the log as it was, and the store takes no more commits, refusing them
/// naming the damage. Opened again, the store reports the damage where it
/// is. Before, the compaction copied the changed checkpoint under a new,
/// matching checksum and deleted the damaged log: the damage was gone, and
/// the store opened showing a checkpoint that was never committed.
#[tokio::test]
async fn a_compaction_never_rewrites_a_damaged_log() {
    use std::os::unix::fs::FileExt;
    const COMPACT_AT: u64 = 16 * 1024;
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("store");
    let store = LogStore::open_with(&dir, LogOptions::default().compact_at(COMPACT_AT)).unwrap();
    let log = dir.join("log.1");
    let mut model = Contents::new();
    let keep = create(
        head("keep"),
        vec![snapshot(0, 0, json!({"text": "unchanged"}))],
    );
    commit(&store, &mut model, keep).await;
    let bytes = std::fs::read(&log).unwrap();
    let at = bytes.windows(9).position(|w| w == b"unchanged").unwrap() + 8;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .unwrap()
        .write_all_at(b"e", at as u64)
        .unwrap();
    let c = create(head("s"), vec![snapshot(0, 0, big_state(0))]);
    commit(&store, &mut model, c).await;
    // Each commit replaces the one snapshot: the log is soon mostly dead.
    let mut refused = None;
    for step in 1..=2_000u64 {
        let (prev, live) = &model[&id("s")];
        let remove = live.iter().map(|cp| cp.seq).collect();
        let next = advance(prev, vec![snapshot(step, step, big_state(step))], remove);
        if let Err(e) = store.commit(&next).await {
            refused = Some(e.to_string());
            break;
        }
        apply(&mut model, &next);
        assert_eq!(
            store.log_path(),
            log,
            "step {step}: the damaged log was replaced"
        );
    }
    let refused = refused.expect("the store went on taking commits");
    assert!(
        refused.contains(&format!(
            "{} is damaged at offset {HEADER_LEN}",
            log.display()
        )),
        "{refused}"
    );
    assert!(refused.contains("found by a compaction"), "{refused}");
    assert_eq!(listing(&dir), ["LOCK", "log.1"].map(String::from).into());
    drop(store);
    assert_eq!(std::fs::read(&log).unwrap()[at], b'e', "the damage is kept");
    match LogStore::open(&dir) {
        Err(StoreError::Damaged { file, offset, .. }) => {
            assert_eq!((file, offset), (log, Some(HEADER_LEN as u64)));
        }
        other => panic!("{other:?}"),
    }
}

/// A `log.1` that is not a log this build reads is refused, with an error
/// naming the file and saying why, and left as it was: random bytes, an
/// empty file, JSON, a header cut short, the header of format 2 or 0. Once
/// the file is gone the directory opens (the refused open let go of the
/// lock).
#[tokio::test]
async fn files_that_are_not_a_log_of_this_format_are_refused_and_left_alone() {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let random: Vec<u8> = (0..200)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    let fx = Fixture::new().await;
    let mut format2 = header(2);
    format2.extend_from_slice(&fx.bytes[HEADER_LEN..]);
    let not_a_log = "does not start with the harness log header";
    let cases: [(&str, Vec<u8>, &str); 6] = [
        ("random bytes", random, not_a_log),
        ("an empty file", Vec::new(), not_a_log),
        (
            "a JSON file",
            br#"{"sessions": {"a": {"version": 1}}}"#.to_vec(),
            not_a_log,
        ),
        ("a header cut short", header(1)[..12].to_vec(), not_a_log),
        (
            "format 2",
            format2,
            "it is in log format 2; this build reads format 1",
        ),
        ("format 0", header(0), "it is in log format 0"),
    ];
    let mut damaged = Damaged::new();
    for (case, bytes, why) in cases {
        let dir = damaged.dir(&bytes);
        let path = dir.join("log.1");
        let err = LogStore::open(&dir).unwrap_err().to_string();
        assert!(err.contains(&path.display().to_string()), "{case}: {err}");
        assert!(
            err.contains("is not a log this build can read"),
            "{case}: {err}"
        );
        assert!(err.contains(why), "{case}: {err}");
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "{case}");
        assert_eq!(
            listing(&dir),
            ["LOCK", "log.1"].map(String::from).into(),
            "{case}"
        );
        std::fs::remove_file(&path).unwrap();
        let store = LogStore::open(&dir).unwrap();
        assert_eq!(contents(&store).await, Contents::new(), "{case}");
    }
}

/// A directory opens in one store at a time: a second open fails, saying
/// the directory is in use, for as long as any handle of the first store
/// lives; once the last is dropped it opens, with what was committed.
#[tokio::test]
async fn a_directory_opens_in_one_store_at_a_time() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("store");
    let first = LogStore::open(&dir).unwrap();
    let c = create_sample(&first, "s", 1).await;
    let clone = first.clone();
    for _ in 0..2 {
        let err = LogStore::open(&dir).unwrap_err().to_string();
        assert!(err.contains(&dir.display().to_string()), "{err}");
        assert!(err.contains("is open in another process"), "{err}");
        assert!(err.contains("LOCK"), "{err}");
        let err = LogStore::open_with(&dir, LogOptions::default().compact_at(1))
            .unwrap_err()
            .to_string();
        assert!(err.contains("is open in another process"), "{err}");
        drop(first.clone());
    }
    drop(first);
    assert!(LogStore::open(&dir).is_err(), "a clone still holds it");
    drop(clone);
    let store = LogStore::open(&dir).unwrap();
    assert_eq!(store.load(&id("s")).await.unwrap(), Some(c.head));
}

/// Three sessions commit past the compaction threshold, each snapshot
/// removing the checkpoints before it, so that most of the log is dead:
/// the log is rewritten into higher generations, ends much smaller than
/// what was written, holds exactly what was committed, and opens again to
/// the same.
#[tokio::test]
async fn compaction_rewrites_the_log_with_only_what_is_live() {
    const COMPACT_AT: u64 = 64 * 1024;
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("store");
    let store = LogStore::open_with(&dir, LogOptions::default().compact_at(COMPACT_AT)).unwrap();
    assert_eq!(store.log_path(), dir.join("log.1"));
    let sessions = ["x", "y", "z"];
    let mut model = Contents::new();
    let mut written = HEADER_LEN;
    for s in sessions {
        let c = create(head(s), vec![snapshot(0, 0, big_state(0))]);
        written += commit_frame(&c).len();
        commit(&store, &mut model, c).await;
    }
    for step in 1..=150u64 {
        for s in sessions {
            let (prev, live) = &model[&id(s)];
            let seq = prev.last_seq + 1;
            let mut next = if step % 5 == 0 {
                let remove = live.iter().map(|cp| cp.seq).collect();
                advance(prev, vec![snapshot(seq, step, big_state(step))], remove)
            } else {
                let text = "words ".repeat(40);
                advance(
                    prev,
                    vec![update(seq, step, "think", json!({"n": step, "text": text}))],
                    vec![],
                )
            };
            next.durable = step % 10 == 0;
            written += commit_frame(&next).len();
            commit(&store, &mut model, next).await;
        }
    }
    assert_eq!(contents(&store).await, model);
    assert!(generation(&store.log_path()) > 1, "{:?}", store.log_path());
    assert!(written as u64 > 6 * COMPACT_AT, "{written} bytes written");
    drop(store);

    // Dropped, the store has finished any compaction it began.
    let names = listing(&dir);
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.contains("LOCK"), "{names:?}");
    let log = dir.join(names.iter().find(|n| n.starts_with("log.")).unwrap());
    let size = std::fs::metadata(&log).unwrap().len();
    assert!(generation(&log) > 1, "{}", log.display());
    assert!(
        size * 4 < written as u64 && size < 2 * COMPACT_AT,
        "{size} bytes in the log of {written} written"
    );
    frames(&std::fs::read(&log).unwrap());

    let store = LogStore::open(&dir).unwrap();
    assert_eq!(store.log_path(), log);
    assert_eq!(store.set_aside(), None);
    assert_eq!(contents(&store).await, model);
    let prev = model[&id("x")].0.clone();
    let next = advance(
        &prev,
        vec![update(prev.last_seq + 1, 151, "x", json!("x"))],
        vec![],
    );
    commit(&store, &mut model, next).await;
    drop(store);
    let store = LogStore::open(&dir).unwrap();
    assert_eq!(store.log_path(), log);
    assert_eq!(contents(&store).await, model);
}

/// What a crash in a compaction leaves: the old generation beside the new
/// one (a crash before the old was deleted), or a `.tmp` of the next (a
/// crash before the rename). Opening reads the newest whole generation and
/// deletes the rest, and keeps a tail set aside earlier.
#[tokio::test]
async fn opening_after_a_crash_in_a_compaction_reads_the_newest_generation() {
    let base = tempfile::tempdir().unwrap();
    // Two logs of different contents.
    let mut logs = Vec::new();
    for (name, updates) in [("old", 1), ("new", 3)] {
        let dir = base.path().join(name);
        let store = LogStore::open(&dir).unwrap();
        let c = create_sample(&store, name, updates).await;
        let mut model = Contents::new();
        apply(&mut model, &c);
        assert_eq!(contents(&store).await, model);
        logs.push((std::fs::read(store.log_path()).unwrap(), model));
    }
    let [(old, old_model), (new, new_model)] = <[_; 2]>::try_from(logs).unwrap();

    type Files<'a> = &'a [(&'a str, &'a [u8])];
    let cases: [(&str, Files<'_>, &str, &Contents, &[u8]); 2] = [
        (
            "a stale log.1 beside log.2, and a log.3.tmp",
            &[
                ("log.1", &old),
                ("log.2", &new),
                ("log.3.tmp", GARBAGE),
                ("log.2.tail-16", b"evidence"),
            ],
            "log.2",
            &new_model,
            &new,
        ),
        (
            "log.1 and a log.2.tmp cut short",
            &[("log.1", &old), ("log.2.tmp", &new[..new.len() / 2])],
            "log.1",
            &old_model,
            &old,
        ),
    ];
    for (i, (case, files, read, want, bytes)) in cases.into_iter().enumerate() {
        let dir = base.path().join(i.to_string());
        std::fs::create_dir(&dir).unwrap();
        for (name, bytes) in files {
            std::fs::write(dir.join(name), bytes).unwrap();
        }
        let store = LogStore::open(&dir).unwrap();
        assert_eq!(store.log_path(), dir.join(read), "{case}");
        assert_eq!(store.set_aside(), None, "{case}");
        assert_eq!(contents(&store).await, *want, "{case}");
        let mut kept: BTreeSet<String> = ["LOCK", read].map(String::from).into();
        kept.extend(
            files
                .iter()
                .filter(|(n, _)| n.contains(".tail-"))
                .map(|(n, _)| n.to_string()),
        );
        assert_eq!(listing(&dir), kept, "{case}");
        assert_eq!(std::fs::read(dir.join(read)).unwrap(), bytes, "{case}");
        if let Some((_, tail)) = files.iter().find(|(n, _)| n.contains(".tail-")) {
            let path = dir.join("log.2.tail-16");
            assert_eq!(std::fs::read(path).unwrap(), *tail, "{case}");
        }
        // New commits go to the generation read.
        let mut model = want.clone();
        let c = create_sample(&store, "after", 0).await;
        apply(&mut model, &c);
        drop(store);
        let store = LogStore::open(&dir).unwrap();
        assert_eq!(store.log_path(), dir.join(read), "{case}");
        assert_eq!(contents(&store).await, model, "{case}");
    }
}

/// The store's directory is `0700`, and every file it writes `0600`: the
/// lock, the log, a compacted log, a tail set aside.
#[cfg(unix)]
#[tokio::test]
async fn log_store_creates_private_files() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("a/store");
    let store = LogStore::open_with(&dir, LogOptions::default().compact_at(4096)).unwrap();
    assert_eq!(mode(&dir), 0o700);
    for name in ["LOCK", "log.1"] {
        assert_eq!(mode(&dir.join(name)), 0o600, "{name}");
    }
    let mut prev = create_sample(&store, "perm", 0).await.head;
    for seq in 1..=60 {
        let next = advance(
            &prev,
            vec![snapshot(seq, seq, big_state(seq))],
            vec![seq - 1],
        );
        store.commit(&next.clone()).await.unwrap();
        prev = next.head;
    }
    // Dropped, the store has finished any compaction it began: the log is
    // the one `log.N` left.
    drop(store);
    let names = listing(&dir);
    let log = dir.join(names.iter().find(|n| n.starts_with("log.")).unwrap());
    assert!(generation(&log) > 1, "{}", log.display());
    std::fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .unwrap()
        .write_all(GARBAGE)
        .unwrap();
    let store = LogStore::open(&dir).unwrap();
    let tail = store.set_aside().unwrap().to_path_buf();
    assert_eq!(listing(&dir).len(), 3, "{:?}", listing(&dir));
    assert_eq!(mode(&dir), 0o700);
    for path in [dir.join("LOCK"), log, tail] {
        assert_eq!(mode(&path), 0o600, "{}", path.display());
    }
}

/// A crash that tears the first commit after a reopen that set a tail
/// aside damages the log at the same offset again: the second tail is set
/// aside and the first is kept, both byte for byte.
#[tokio::test]
async fn a_second_damaged_end_at_the_same_offset_keeps_the_first_tail() {
    let fx = Fixture::new().await;
    let mut damaged = Damaged::new();
    let mut bytes = fx.bytes.clone();
    bytes.extend_from_slice(GARBAGE);
    let dir = damaged.dir(&bytes);
    let store = LogStore::open(&dir).unwrap();
    let first = store.set_aside().unwrap().to_path_buf();
    drop(store);
    let torn = b"\x40\x00\x00\x00 a commit torn by a second crash";
    std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join("log.1"))
        .unwrap()
        .write_all(torn)
        .unwrap();
    let store = LogStore::open(&dir).unwrap();
    let second = store.set_aside().unwrap().to_path_buf();
    assert_eq!(std::fs::read(&second).unwrap(), torn);
    assert_eq!(contents(&store).await, fx.after[fx.commits()]);
    let tails: BTreeSet<Vec<u8>> = listing(&dir)
        .iter()
        .filter(|n| n.contains(".tail-"))
        .map(|n| std::fs::read(dir.join(n)).unwrap())
        .collect();
    assert_eq!(
        tails,
        [GARBAGE.to_vec(), torn.to_vec()].into(),
        "the first tail ({}) is kept beside the second ({})",
        first.display(),
        second.display()
    );
}

/// Checkpoint frames of a session whose head frame is lost (a compaction
/// writes a large session's checkpoints in frames without a head, the head
/// last; damage in the head frame sets it aside) do not resurface: the
/// session is absent, and one created anew under its id has only its own
/// checkpoints.
#[tokio::test]
async fn checkpoints_without_a_head_do_not_join_a_session_created_anew() {
    let orphans: Vec<(u64, bool, Vec<u8>)> = (1..=3)
        .map(|seq| {
            let cp = update(seq, seq, "orphan", json!({"orphan": seq}));
            (seq, false, serde_json::to_vec(&cp).unwrap())
        })
        .collect();
    let mut bytes = header(1);
    bytes.extend(encode_frame("s", &[], &orphans, None));
    let head_at = bytes.len();
    let lost_head = serde_json::to_vec(&head("s")).unwrap();
    let mut head_frame = encode_frame("s", &[], &[], Some(&lost_head));
    let last = head_frame.len() - 1;
    head_frame[last] ^= 1;
    bytes.extend(head_frame);

    let mut damaged = Damaged::new();
    let dir = damaged.dir(&bytes);
    let store = LogStore::open(&dir).unwrap();
    let tail = dir.join(format!("log.1.tail-{head_at}"));
    assert_eq!(store.set_aside(), Some(tail.as_path()));
    assert_eq!(store.sessions().await.unwrap(), Vec::<SessionId>::new());
    assert_eq!(store.load(&id("s")).await.unwrap(), None);
    let c = create(head("s"), vec![snapshot(0, 0, json!({"n": 0}))]);
    store.commit(&c.clone()).await.unwrap();
    assert_eq!(store.checkpoints(&id("s"), 0).await.unwrap(), c.append);
}

/// Sessions committing at once while compactions run, and readers reading
/// all the while: every read finds each checkpoint it is told of, with its
/// own body, and every head it loads is one that was committed; in the end
/// the store holds exactly what was committed, also when opened again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reads_and_commits_during_compactions_see_whole_sessions() {
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;
    const SESSIONS: usize = 6;
    const STEPS: u64 = 120;
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("store");
    let store = LogStore::open_with(&dir, LogOptions::default().compact_at(32 * 1024)).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for i in 0..SESSIONS {
        let store = store.clone();
        writers.push(tokio::spawn(async move {
            let name = format!("w{i}");
            let mut model = Contents::new();
            let c = create(head(&name), vec![snapshot(0, 0, big_state(0))]);
            commit(&store, &mut model, c).await;
            for step in 1..=STEPS {
                let (prev, live) = &model[&id(&name)];
                let next = if step % 4 == 0 {
                    let remove = live.iter().map(|cp| cp.seq).collect();
                    advance(prev, vec![snapshot(step, step, big_state(step))], remove)
                } else {
                    advance(
                        prev,
                        vec![update(step, step, "think", json!({"n": step}))],
                        vec![],
                    )
                };
                let mut next = next;
                next.durable = step % 8 == 0;
                commit(&store, &mut model, next).await;
            }
            model
        }));
    }
    let mut readers = Vec::new();
    for _ in 0..2 {
        let (store, done) = (store.clone(), Arc::clone(&done));
        readers.push(tokio::spawn(async move {
            let mut reads = 0u64;
            while !done.load(Ordering::Relaxed) {
                for session in store.sessions().await.unwrap() {
                    let head = store.load(&session).await.unwrap().unwrap();
                    let cps = store.checkpoints(&session, 0).await.unwrap();
                    // Seqs in order, starting with a snapshot, each body
                    // its own; none beyond a head loaded after them.
                    assert!(matches!(cps[0].kind, CheckpointKind::Snapshot(_)));
                    for (k, cp) in cps.iter().enumerate() {
                        assert_eq!(cp.seq, cps[0].seq + k as u64, "{session}: {cps:?}");
                        let want = if cp.seq % 4 == 0 {
                            CheckpointKind::Snapshot(big_state(cp.seq))
                        } else {
                            CheckpointKind::Update(json!({"n": cp.seq}))
                        };
                        assert_eq!(cp.kind, want, "{session} seq {cp:?}");
                    }
                    let after = store.load(&session).await.unwrap().unwrap();
                    assert!(cps.last().unwrap().seq <= after.last_seq);
                    assert!(head.version <= after.version);
                    reads += 1;
                }
                tokio::task::yield_now().await;
            }
            reads
        }));
    }
    let mut model = Contents::new();
    for w in writers {
        model.extend(w.await.unwrap());
    }
    done.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.await.unwrap() > 0, "the readers read");
    }
    assert_eq!(contents(&store).await, model);
    assert!(generation(&store.log_path()) > 2, "{:?}", store.log_path());
    drop(store);
    let store = LogStore::open(&dir).unwrap();
    assert_eq!(store.set_aside(), None);
    assert_eq!(contents(&store).await, model);
}

/// Files whose names only look like a generation (`log.02`, `log.+2`, a
/// copy someone made) are not the store's: it reads `log.2` and deletes
/// neither it nor them.
#[tokio::test]
async fn names_that_only_look_like_a_generation_are_left_alone() {
    let base = tempfile::tempdir().unwrap();
    let source = LogStore::open(base.path().join("source")).unwrap();
    let mut model = Contents::new();
    commit(
        &source,
        &mut model,
        create(head("s"), vec![snapshot(0, 0, json!(0))]),
    )
    .await;
    let bytes = std::fs::read(source.log_path()).unwrap();
    drop(source);
    for (i, other) in ["log.02", "log.+2", "log.002.tmp"].into_iter().enumerate() {
        let dir = base.path().join(i.to_string());
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("log.2"), &bytes).unwrap();
        std::fs::write(dir.join(other), &bytes).unwrap();
        let store = LogStore::open(&dir).unwrap();
        assert_eq!(store.log_path(), dir.join("log.2"), "{other}");
        assert_eq!(contents(&store).await, model, "{other}");
        let want: BTreeSet<String> = ["LOCK", "log.2", other].map(String::from).into();
        assert_eq!(listing(&dir), want, "{other}");
        drop(store);
        let store = LogStore::open(&dir).unwrap();
        assert_eq!(contents(&store).await, model, "{other}");
    }
}

/// A frame's contents by the documented layout: its session, what it
/// removes, and where in the file each appended checkpoint's body and the
/// head's body are.
#[derive(Debug)]
struct Parsed {
    session: String,
    remove: Vec<u64>,
    append: Vec<(u64, bool, Range<usize>)>,
    head: Option<Range<usize>>,
}

/// Reads the frame at `frame` of a log file by the documented layout.
fn parse_frame(bytes: &[u8], frame: Range<usize>) -> Parsed {
    let mut at = frame.start + FRAME_HEAD;
    // The next `n` bytes' place in the file.
    let mut take = |n: usize| {
        at += n;
        at - n..at
    };
    let int = |r: Range<usize>| {
        let mut le = [0u8; 8];
        le[..r.len()].copy_from_slice(&bytes[r]);
        u64::from_le_bytes(le)
    };
    let has_head = int(take(1)) & 1 == 1;
    let id_len = int(take(2)) as usize;
    let session = String::from_utf8(bytes[take(id_len)].to_vec()).unwrap();
    let removed = int(take(4));
    let remove = (0..removed).map(|_| int(take(8))).collect();
    let appended = int(take(4));
    let table: Vec<(u64, bool, usize)> = (0..appended)
        .map(|_| (int(take(8)), int(take(1)) == 1, int(take(4)) as usize))
        .collect();
    let head_len = int(take(4)) as usize;
    let append = table
        .into_iter()
        .map(|(seq, snapshot, len)| (seq, snapshot, take(len)))
        .collect();
    let head = has_head.then(|| take(head_len));
    assert_eq!(take(0).start, frame.end, "the bodies fill the frame");
    Parsed {
        session,
        remove,
        append,
        head,
    }
}

/// Overwrites, in place, the body of checkpoint `seq` of `session` in the
/// store's log (where its last frame appending it has it) with bytes that
/// are not JSON.
#[cfg(unix)]
fn corrupt_checkpoint_in_place(store: &LogStore, session: &SessionId, seq: u64) {
    use std::os::unix::fs::FileExt;
    let path = store.log_path();
    let bytes = std::fs::read(&path).unwrap();
    let body = frames(&bytes)
        .into_iter()
        .map(|f| parse_frame(&bytes, f))
        .filter(|p| p.session == session.as_str())
        .flat_map(|p| p.append)
        .filter(|(s, _, _)| *s == seq)
        .map(|(_, _, body)| body)
        .next_back()
        .unwrap_or_else(|| panic!("no checkpoint {seq} of {session} in the log"));
    let garbage: Vec<u8> = GARBAGE.iter().copied().cycle().take(body.len()).collect();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.write_all_at(&garbage, body.start as u64).unwrap();
}

/// Checkpoint bodies are read from the log when asked for: one damaged in
/// place under an open store fails `checkpoints` with `StoreError::Load`
/// naming it whenever it is in the asked range, and only then (the
/// conformance check with a hook that finds the body by the documented
/// layout). Opened again, the damaged frame fails its checksum and is set
/// aside with everything after it.
#[cfg(unix)]
#[tokio::test]
async fn a_checkpoint_damaged_under_an_open_store_fails_to_load() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("store");
    let store = LogStore::open(&dir).unwrap();
    let corrupt = |session: &SessionId, record: conformance::Record| match record {
        conformance::Record::Checkpoint(seq) => corrupt_checkpoint_in_place(&store, session, seq),
        conformance::Record::Head => unreachable!("heads are read from memory"),
    };
    conformance::corrupt_checkpoint(&store, &corrupt)
        .await
        .unwrap();
    drop(store);
    let store = LogStore::open(&dir).unwrap();
    assert_eq!(
        store.set_aside(),
        Some(dir.join(format!("log.1.tail-{HEADER_LEN}")).as_path())
    );
    assert_eq!(store.sessions().await.unwrap(), Vec::<SessionId>::new());
}

/// Frames that pass their checksums but hold records this build cannot
/// read (a head that is not JSON, a checkpoint that is not JSON) are not
/// set aside: the session stays listed; its head fails `load`, commits
/// and creates with `StoreError::Load` and is not written over; its bad
/// checkpoint fails `checkpoints` when in range; other sessions are
/// unaffected.
#[tokio::test]
async fn records_that_are_not_json_in_whole_frames_are_refused_not_skipped() {
    let good = create(head("good"), vec![snapshot(0, 0, json!(0))]);
    let bad_cp = create(
        head("badlog"),
        vec![snapshot(0, 0, json!(0)), update(1, 1, "x", json!(1))],
    );
    let mut bytes = header(1);
    bytes.extend(commit_frame(&good));
    bytes.extend(encode_frame("bad", &[], &[], Some(GARBAGE)));
    let frame = commit_frame(&bad_cp);
    let at = bytes.len();
    bytes.extend(&frame);
    let parsed = parse_frame(&bytes, at..at + frame.len());
    assert_eq!(parsed.session, "badlog");
    assert!(parsed.remove.is_empty());
    assert_eq!(
        parsed.head.as_ref().map(ExactSizeIterator::len),
        Some(serde_json::to_vec(&bad_cp.head).unwrap().len())
    );
    let (seq, is_snapshot, body) = parsed.append[1].clone();
    assert_eq!((seq, is_snapshot), (1, false));
    bytes.splice(
        body.clone(),
        GARBAGE.iter().copied().cycle().take(body.len()),
    );
    // Checksum the frame again: it is whole, its body is not JSON.
    let crc = crc32fast::hash(&bytes[at + FRAME_HEAD..]);
    bytes[at + 4..at + 8].copy_from_slice(&crc.to_le_bytes());

    let mut damaged = Damaged::new();
    let dir = damaged.dir(&bytes);
    for _ in 0..2 {
        let store = LogStore::open(&dir).unwrap();
        assert_eq!(store.set_aside(), None);
        assert_eq!(
            store.sessions().await.unwrap(),
            vec![id("bad"), id("badlog"), id("good")]
        );
        let unreadable = |e: harness::session::StoreError, record: &str, session: &str| match e {
            harness::session::StoreError::Load(l) => {
                assert_eq!(l.session, id(session));
                assert!(l.record.contains(record), "{l:?}");
            }
            other => panic!("{other:?} instead of a StoreError::Load of {record}"),
        };
        unreadable(store.load(&id("bad")).await.unwrap_err(), "head", "bad");
        let mut over = advance(&head("bad"), vec![], vec![]);
        unreadable(
            store.commit(&over.clone()).await.unwrap_err(),
            "head",
            "bad",
        );
        over.expected_version = None;
        unreadable(store.commit(&over).await.unwrap_err(), "head", "bad");
        let create_over = create(head("bad"), vec![snapshot(0, 0, json!(0))]);
        unreadable(store.commit(&create_over).await.unwrap_err(), "head", "bad");
        for from in [0, 1] {
            let e = store.checkpoints(&id("badlog"), from).await.unwrap_err();
            unreadable(e, "checkpoint 1", "badlog");
        }
        assert_eq!(store.checkpoints(&id("badlog"), 2).await.unwrap(), vec![]);
        assert_eq!(
            store.load(&id("badlog")).await.unwrap(),
            Some(bad_cp.head.clone())
        );
        assert_eq!(
            store.load(&id("good")).await.unwrap(),
            Some(good.head.clone())
        );
        assert_eq!(
            store.checkpoints(&id("good"), 0).await.unwrap(),
            good.append
        );
    }
    let log = std::fs::read(dir.join("log.1")).unwrap();
    assert_eq!(log, bytes, "nothing was written over");
}

/// A compaction that fails (here: its `.tmp` cannot be created, a
/// directory stands in its place) leaves the log as it was: commits go on
/// into it, nothing is lost; once the obstacle is gone a later compaction
/// succeeds, and the store opens again to what was committed.
#[tokio::test]
async fn a_failed_compaction_leaves_the_log_as_it_was() {
    const COMPACT_AT: u64 = 16 * 1024;
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("store");
    let store = LogStore::open_with(&dir, LogOptions::default().compact_at(COMPACT_AT)).unwrap();
    std::fs::create_dir(dir.join("log.2.tmp")).unwrap();
    let mut model = Contents::new();
    let c = create(head("s"), vec![snapshot(0, 0, big_state(0))]);
    commit(&store, &mut model, c).await;
    // Each commit replaces the one snapshot: nearly all of the log is dead.
    let mut step = 0;
    let mut next_step = async |store: &LogStore, model: &mut Contents| {
        step += 1;
        let (prev, live) = &model[&id("s")];
        let remove = live.iter().map(|cp| cp.seq).collect();
        let next = advance(prev, vec![snapshot(step, step, big_state(step))], remove);
        commit(store, model, next).await;
    };
    while std::fs::metadata(store.log_path()).unwrap().len() < 4 * COMPACT_AT {
        next_step(&store, &mut model).await;
    }
    assert_eq!(
        store.log_path(),
        dir.join("log.1"),
        "no compaction succeeded"
    );
    assert_eq!(contents(&store).await, model);
    assert_eq!(
        listing(&dir),
        ["LOCK", "log.1", "log.2.tmp"].map(String::from).into()
    );

    std::fs::remove_dir(dir.join("log.2.tmp")).unwrap();
    let written = std::fs::metadata(store.log_path()).unwrap().len();
    for _ in 0..200 {
        if store.log_path() != dir.join("log.1") {
            break;
        }
        next_step(&store, &mut model).await;
    }
    assert_eq!(store.log_path(), dir.join("log.2"));
    assert_eq!(contents(&store).await, model);
    drop(store);
    assert_eq!(listing(&dir), ["LOCK", "log.2"].map(String::from).into());
    assert!(std::fs::metadata(dir.join("log.2")).unwrap().len() < written / 4);
    let store = LogStore::open(&dir).unwrap();
    assert_eq!(contents(&store).await, model);
}

/// Panics of the log store's compaction threads, counted by the panic hook
/// [`watch_compactor_panics`] installs (a panic there ends the thread, not
/// the test).
static COMPACTOR_PANICS: AtomicUsize = AtomicUsize::new(0);

/// Counts the panics of threads named `harness-log-compact`, then hands
/// every panic on to the hook there was.
fn watch_compactor_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if std::thread::current().name() == Some("harness-log-compact") {
                COMPACTOR_PANICS.fetch_add(1, Ordering::SeqCst);
            }
            previous(info);
        }));
    });
}

/// A log at the last generation there is (`log.18446744073709551615`,
/// renamed by hand) has no next one to compact into: compaction fails (a
/// warning) and is tried again later, the log stays as it is, commits go on
/// and nothing is lost. A log one generation short of it is compacted into
/// the last one, then kept. Before, the compaction thread panicked on the
/// overflow in debug builds (leaving the store believing a compaction ran,
/// so none ever ran again), and in release builds wrapped to `log.0`, a
/// generation older than the log it replaced.
#[tokio::test]
async fn a_log_at_the_last_generation_is_kept_uncompacted() {
    const COMPACT_AT: u64 = 16 * 1024;
    watch_compactor_panics();
    for first in [u64::MAX, u64::MAX - 1] {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("store");
        let mut model = Contents::new();
        {
            let store = LogStore::open(&dir).unwrap();
            let c = create(head("s"), vec![snapshot(0, 0, big_state(0))]);
            commit(&store, &mut model, c).await;
        }
        std::fs::rename(dir.join("log.1"), dir.join(format!("log.{first}"))).unwrap();
        let store =
            LogStore::open_with(&dir, LogOptions::default().compact_at(COMPACT_AT)).unwrap();
        assert_eq!(contents(&store).await, model, "{first}");
        let last = dir.join(format!("log.{}", u64::MAX));
        // Each commit replaces the one snapshot: nearly all of the log is
        // dead, so compaction is due again and again.
        let mut step = 0;
        while store.log_path() != last || std::fs::metadata(&last).unwrap().len() < 8 * COMPACT_AT {
            step += 1;
            assert!(
                step < 2_000,
                "{first}: the log never reached its last generation"
            );
            let (prev, live) = &model[&id("s")];
            let remove = live.iter().map(|cp| cp.seq).collect();
            let next = advance(prev, vec![snapshot(step, step, big_state(step))], remove);
            commit(&store, &mut model, next).await;
        }
        assert_eq!(contents(&store).await, model, "{first}");
        drop(store);
        assert_eq!(
            listing(&dir),
            ["LOCK".to_string(), format!("log.{}", u64::MAX)].into(),
            "{first}"
        );
        let store = LogStore::open(&dir).unwrap();
        assert_eq!(store.log_path(), last, "{first}");
        assert_eq!(contents(&store).await, model, "{first}");
    }
    assert_eq!(
        COMPACTOR_PANICS.load(Ordering::SeqCst),
        0,
        "a compaction thread panicked"
    );
}
