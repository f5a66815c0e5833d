//! Reading a log store without changing it ([`LogStore::open_read_only`]):
//! what it holds is shown as it is, damage is reported naming the file and
//! the offset (never shown as another state, never moved aside), nothing is
//! created, and no byte of any file changes.

use crate::log_store::{Contents, Fixture, contents, files, header, listing, random};
use crate::{create_sample, id};
use harness::session::{SessionStore, StoreError};
use harness_stores::conformance::{advance, update};
use harness_stores::{Damage, LogOptions, LogStore, ReadOnlyError};
use serde_json::json;
use std::path::{Path, PathBuf};

/// A directory holding `LOCK` (empty, as the store leaves it) and the
/// given files.
fn store_dir(base: &Path, name: &str, logs: &[(&str, &[u8])]) -> PathBuf {
    let dir = base.join(name);
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("LOCK"), b"").unwrap();
    for (file, bytes) in logs {
        std::fs::write(dir.join(file), bytes).unwrap();
    }
    dir
}

/// An intact store opened read-only holds what the writer left, commits
/// are refused, flush does nothing, and no file changes: not the log, nor
/// an older generation or an interrupted compaction (which the writer's
/// open deletes), which are not read either.
#[tokio::test]
async fn an_intact_log_store_read_only_shows_what_it_holds_and_changes_nothing() {
    let fx = Fixture::new().await;
    let base = tempfile::tempdir().unwrap();
    let stale = random(300, 7);
    let dir = store_dir(
        base.path(),
        "store",
        &[
            ("log.2", &fx.bytes),
            ("log.1", &stale),
            ("log.3.tmp", &stale),
        ],
    );
    let before = files(&dir);
    let store = LogStore::open_read_only(&dir).unwrap();
    assert!(store.is_read_only());
    assert_eq!(store.log_path(), dir.join("log.2"));
    let want = fx.after.last().unwrap();
    assert_eq!(&contents(&store).await, want);
    let (a, _) = &want[&id("a")];
    let next = advance(a, vec![update(a.last_seq + 1, 9, "x", json!(1))], vec![]);
    let err = store.commit(&next).await.unwrap_err().to_string();
    assert!(err.contains("read-only"), "{err}");
    assert!(err.contains(&dir.display().to_string()), "{err}");
    store.flush().await.unwrap();
    assert_eq!(
        &contents(&store).await,
        want,
        "the refused commit left no trace"
    );
    drop(store);
    assert_eq!(files(&dir), before, "reading changed the store");
}

/// What is no log store is refused and nothing is created there: a missing
/// path (its parent too), a file, an empty directory, a directory of other
/// files, a directory whose only log-like names are not the store's.
#[test]
fn what_is_no_log_store_is_refused_and_nothing_is_created() {
    let base = tempfile::tempdir().unwrap();
    let missing = base.path().join("missing/store");
    let file = base.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let empty = base.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let other = base.path().join("other");
    std::fs::create_dir(&other).unwrap();
    for name in ["notes.txt", "log.02", "log.x", "log.1.tmp", "log.1.tail-16"] {
        std::fs::write(other.join(name), b"x").unwrap();
    }
    let before = files(base.path());
    for path in [&missing, &file, &empty, &other] {
        match LogStore::open_read_only(path) {
            Err(ReadOnlyError::NotAStore { path: p, why }) => {
                assert_eq!(&p, path);
                assert!(!why.is_empty());
            }
            other => panic!("{path:?}: expected NotAStore, got {other:?}"),
        }
    }
    assert!(
        !missing.parent().unwrap().exists(),
        "a directory was created"
    );
    assert_eq!(files(base.path()), before);
    assert_eq!(listing(&empty).len(), 0, "nothing created in {empty:?}");
}

/// While the application has the store open the reader is refused; a
/// reader does not keep the application out (its lock is let go once the
/// log is read), and goes on showing the log as it read it while the
/// application commits and compacts (deleting the file the reader reads).
#[tokio::test]
async fn a_reader_is_refused_while_the_store_is_open_and_never_keeps_the_writer_out() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("store");
    let writer = LogStore::open(&dir).unwrap();
    create_sample(&writer, "s1", 3).await;
    match LogStore::open_read_only(&dir) {
        Err(e @ ReadOnlyError::InUse { .. }) => {
            assert!(e.to_string().contains(&dir.display().to_string()), "{e}");
        }
        other => panic!("expected InUse, got {other:?}"),
    }
    drop(writer);
    let reader = LogStore::open_read_only(&dir).unwrap();
    let seen = contents(&reader).await;
    assert_eq!(seen.len(), 1);
    let first_log = reader.log_path();

    let writer = LogStore::open_with(&dir, LogOptions::default().compact_at(4 << 10)).unwrap();
    let (mut prev, _) = seen[&id("s1")].clone();
    for i in 0..40 {
        let seq = prev.last_seq + 1;
        let next = advance(
            &prev,
            vec![harness_stores::conformance::snapshot(
                seq,
                prev.steps + 1,
                json!({"big": "x".repeat(500), "i": i}),
            )],
            (0..seq).collect(),
        );
        writer.commit(&next).await.unwrap();
        prev = next.head;
    }
    create_sample(&writer, "s2", 1).await;
    // The compaction runs in the background and syncs: up to 60 s.
    for _ in 0..12_000 {
        if writer.log_path() != first_log {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert_ne!(writer.log_path(), first_log, "no compaction ran in 60 s");
    assert!(!first_log.exists(), "the compaction deleted the old log");
    assert_eq!(contents(&reader).await, seen, "the reader's view changed");
}

/// How one damage of a log shows.
struct Case {
    name: String,
    /// The store's files.
    logs: Vec<(&'static str, Vec<u8>)>,
    /// The file named, and the offset.
    file: &'static str,
    offset: Option<u64>,
    /// Words of the message.
    says: &'static str,
}

/// A log damaged in any of many ways is reported naming the store, the
/// file and the offset where the log stops reading, never opened as the
/// part before it: a bit flipped in the header, in a frame's length, in
/// its checksum, in a record's JSON (the session id, a step name, a value),
/// in the last byte; the log cut inside a frame (the last and one in the
/// middle); bytes after the last frame; a file of random bytes; an empty
/// file; a newer generation of garbage beside a whole log; the log
/// deleted. No file changes, nothing is set aside. Where whole frames
/// follow the damage (damage before the end) the reader says so, and the
/// writer's open refuses the log too, changing nothing, unless asked to
/// set the damage aside; a torn end it sets aside. Either way it sets
/// aside exactly the bytes the reader named.
#[tokio::test]
async fn a_damaged_log_is_reported_where_it_is_and_never_changed() {
    let fx = Fixture::new().await;
    let bytes = &fx.bytes;
    let len = bytes.len();
    let mid = fx.frames[fx.frames.len() / 2].clone();
    let last = fx.frames.last().unwrap().clone();
    let flip = |at: usize| {
        let mut b = bytes.clone();
        b[at] ^= 0x01;
        b
    };
    let find = |text: &[u8], from: usize| {
        from + bytes[from..]
            .windows(text.len())
            .position(|w| w == text)
            .unwrap_or_else(|| panic!("{:?} not in the log", String::from_utf8_lossy(text)))
    };
    let frame_of = |at: usize| {
        fx.frames
            .iter()
            .find(|f| f.contains(&at))
            .map(|f| f.start as u64)
            .unwrap()
    };
    let mut cases: Vec<Case> = Vec::new();
    let log1 = |name: String, b: Vec<u8>, offset: u64, says: &'static str| Case {
        name,
        logs: vec![("log.1", b)],
        file: "log.1",
        offset: Some(offset),
        says,
    };
    for at in [0, 11, 12] {
        cases.push(log1(
            format!("bit flipped in the header at {at}"),
            flip(at),
            0,
            "not a log",
        ));
    }
    for (what, at) in [
        ("the length", mid.start + 1),
        ("the checksum", mid.start + 5),
        ("the flags", mid.start + 8),
    ] {
        cases.push(log1(
            format!("bit flipped in {what} of a middle frame"),
            flip(at),
            mid.start as u64,
            "",
        ));
    }
    for text in [&b"\"think\""[..], b"\"act\"", b"\"m\":\"x\""] {
        let at = find(text, 16) + 2;
        cases.push(log1(
            format!("bit flipped in `{}`", String::from_utf8_lossy(text)),
            flip(at),
            frame_of(at),
            "checksum",
        ));
    }
    cases.push(log1(
        "bit flipped in the last byte".into(),
        flip(len - 1),
        last.start as u64,
        "checksum",
    ));
    for cut in [
        last.start + 3,
        last.start + 8,
        last.end - 1,
        mid.start + 20,
        len / 2 + 1,
    ] {
        if fx.frames.iter().any(|f| f.start == cut) {
            continue;
        }
        cases.push(log1(
            format!("cut to {cut} bytes"),
            bytes[..cut].to_vec(),
            frame_of(cut),
            "",
        ));
    }
    for (name, tail) in [
        ("text after the last frame", b"garbage after".to_vec()),
        ("random bytes after the last frame", random(64, 3)),
    ] {
        let mut b = bytes.clone();
        b.extend_from_slice(&tail);
        cases.push(log1(name.into(), b, len as u64, ""));
    }
    cases.push(log1(
        "a file of random bytes".into(),
        random(len, 11),
        0,
        "not a log",
    ));
    cases.push(log1("an empty file".into(), Vec::new(), 0, "not a log"));
    let mut just_header = header(1);
    just_header.extend_from_slice(&random(40, 5));
    cases.push(log1(
        "a header and random bytes".into(),
        just_header,
        16,
        "",
    ));
    cases.push(Case {
        name: "a newer generation of garbage".into(),
        logs: vec![("log.1", bytes.clone()), ("log.2", random(500, 9))],
        file: "log.2",
        offset: Some(0),
        says: "not a log",
    });
    cases.push(Case {
        name: "the log deleted".into(),
        logs: vec![],
        file: "",
        offset: None,
        says: "no log file",
    });

    assert!(cases.len() >= 20, "{} cases", cases.len());
    let base = tempfile::tempdir().unwrap();
    let mut before_the_end = 0;
    for (i, case) in cases.iter().enumerate() {
        let name = &case.name;
        let logs: Vec<(&str, &[u8])> = case.logs.iter().map(|(f, b)| (*f, &b[..])).collect();
        let dir = store_dir(base.path(), &format!("case-{i}"), &logs);
        let before = files(&dir);
        // Frames of the fixture as written after damage to a frame:
        // damage before the end (a header that is not a log's is no
        // frame's damage).
        let log1 = logs.iter().find(|(f, _)| *f == "log.1").map(|(_, b)| *b);
        let whole_after = fx
            .frames
            .iter()
            .filter(|f| {
                case.file == "log.1"
                    && case.offset.is_some_and(|o| o != 0 && f.start as u64 > o)
                    && log1.and_then(|b| b.get((*f).clone())) == Some(&bytes[(*f).clone()])
            })
            .count();
        before_the_end += usize::from(whole_after > 0);
        for _ in 0..2 {
            match LogStore::open_read_only(&dir) {
                Err(ReadOnlyError::Damaged(damage)) => {
                    let Damage {
                        store,
                        file,
                        offset,
                        what,
                    } = &damage;
                    assert_eq!(store, &dir, "{name}");
                    let want = if case.file.is_empty() {
                        dir.clone()
                    } else {
                        dir.join(case.file)
                    };
                    assert_eq!(file, &want, "{name}: {damage}");
                    assert_eq!(*offset, case.offset, "{name}: {damage}");
                    assert!(what.contains(case.says), "{name}: {damage}");
                    assert_eq!(
                        what.contains("whole frame"),
                        whole_after > 0,
                        "{name}: {damage}"
                    );
                    if whole_after > 0 {
                        let s = if whole_after == 1 { "" } else { "s" };
                        let follow = format!("{whole_after} whole frame{s} (commits) follow");
                        assert!(what.contains(&follow), "{name}: {damage}");
                    }
                    let shown = ReadOnlyError::Damaged(damage.clone()).to_string();
                    assert!(
                        shown.contains(&format!(
                            "the store {} is damaged: {}",
                            dir.display(),
                            want.display()
                        )),
                        "{name}: {shown}"
                    );
                    if let Some(offset) = offset {
                        assert!(shown.contains(&format!("at offset {offset}")), "{shown}");
                    }
                }
                other => panic!("{name}: expected damage, got {other:?}"),
            }
            assert_eq!(files(&dir), before, "{name}: the reader changed the store");
        }
        // The writer's open refuses damage before the end, and changes
        // nothing; asked to, it sets aside exactly what the reader named,
        // as it does a torn end.
        if case.file == "log.1" && case.offset != Some(0) {
            let offset = case.offset.unwrap();
            let mut options = LogOptions::default();
            if whole_after > 0 {
                match LogStore::open(&dir) {
                    Err(StoreError::Damaged {
                        file, offset: o, ..
                    }) => {
                        assert_eq!((file, o), (dir.join("log.1"), Some(offset)), "{name}");
                    }
                    other => panic!("{name}: expected damage, got {other:?}"),
                }
                assert_eq!(files(&dir), before, "{name}: the writer changed the store");
                options = options.set_aside_damage(true);
            }
            let store = LogStore::open_with(&dir, options).unwrap();
            let tail = dir.join(format!("log.1.tail-{offset}"));
            assert_eq!(store.set_aside(), Some(tail.as_path()), "{name}");
            let k = fx
                .frames
                .iter()
                .position(|f| f.start as u64 >= offset)
                .unwrap_or(fx.frames.len());
            if offset as usize <= len {
                assert_eq!(contents(&store).await, fx.after[k], "{name}");
            }
        }
    }
    assert!(
        before_the_end >= 5,
        "{before_the_end} cases of damage before the end"
    );
}

/// An intact store written by the application (sessions, updates,
/// snapshots, a compaction) reads the same read-only as reopened by the
/// writer, with no byte changed.
#[tokio::test]
async fn a_compacted_store_reads_the_same_as_the_writer_reads_it() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("store");
    {
        let store = LogStore::open_with(&dir, LogOptions::default().compact_at(8 << 10)).unwrap();
        for i in 0..30 {
            let mut prev = create_sample(&store, &format!("s{i}"), 4).await.head;
            // Each snapshot replaces what came before: the log turns
            // mostly dead, and is compacted.
            for round in 0..4 {
                let seq = prev.last_seq + 1;
                let next = advance(
                    &prev,
                    vec![harness_stores::conformance::snapshot(
                        seq,
                        prev.steps + 1,
                        json!({"big": "y".repeat(300), "round": round}),
                    )],
                    (0..seq).collect(),
                );
                store.commit(&next).await.unwrap();
                prev = next.head;
            }
        }
        store.flush().await.unwrap();
    }
    assert!(
        !dir.join("log.1").exists(),
        "the store was compacted: {:?}",
        listing(&dir)
    );
    let before = files(&dir);
    let read: Contents = contents(&LogStore::open_read_only(&dir).unwrap()).await;
    assert_eq!(read.len(), 30);
    assert_eq!(files(&dir), before);
    let written = contents(&LogStore::open(&dir).unwrap()).await;
    assert_eq!(read, written);
}
