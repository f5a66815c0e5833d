//! The blob files of a sled database: sled keeps a value too large for a
//! record of its log (over a quarter of a segment) in `blobs/N`, a CRC32 of
//! the rest (little-endian), a kind byte, then the value, and the record
//! of the log holds N. sled's recovery reads the blobs of the log it
//! replays: one that fails its checksum stops the recovery there (every
//! record written after it dropped, and their blobs deleted, without an
//! error); a missing one is skipped with its record. The application's
//! open refuses both before sled opens the database, naming the blob, and
//! changes nothing; the reader names the blob too.

use crate::{create_sample, id};
use harness::memory::MemoryError;
use harness::session::{SessionStore, StoreError};
use harness_stores::conformance::{create, head, snapshot};
use harness_stores::{ReadOnlyError, SledStore};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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

/// A copy of the database at `from` in the new directory `to`, blobs too.
fn copy_db(from: &Path, to: &Path) {
    for (path, bytes) in files(from) {
        let path = to.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
}

/// Waits until no handle holds the lock of the database at `path` (sled's
/// threads release it a moment after the last handle is dropped).
async fn closed(path: &Path) {
    let db = std::fs::File::open(path.join("db")).unwrap();
    for _ in 0..600 {
        if db.try_lock().is_ok() {
            db.unlock().unwrap();
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("sled still holds the lock of {} after 60 s", path.display());
}

/// The value of `big`'s state: 1 MiB, kept in a blob.
fn big_text() -> String {
    "x".repeat(1 << 20)
}

/// A closed database at `path`: 11 sessions, then `big` (its snapshot 1
/// MiB, which sled keeps in a blob), then 3 more sessions. With `reopened`,
/// the application opened and closed it once more after (sled's recovery
/// then wrote a `snap.*` file that holds the blob's page).
async fn db_with_a_blob(path: &Path, reopened: bool) {
    let store = SledStore::open(path).unwrap();
    for i in 0..11 {
        create_sample(&store, &format!("s{i}"), 3).await;
    }
    let big = create(
        head("big"),
        vec![snapshot(0, 0, serde_json::json!({ "text": big_text() }))],
    );
    store.commit(&big).await.unwrap();
    for i in 11..14 {
        create_sample(&store, &format!("s{i}"), 3).await;
    }
    store.flush().await.unwrap();
    drop(store);
    closed(path).await;
    if reopened {
        let store = SledStore::open(path).unwrap();
        assert_eq!(store.sessions().await.unwrap().len(), 15);
        drop(store);
        closed(path).await;
        assert!(
            std::fs::read_dir(path).unwrap().any(|e| e
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("snap.")),
            "a snapshot was written"
        );
    }
}

/// The blob that holds `big`'s snapshot now: of the blobs holding its
/// text, the newest (sled names a blob by the LSN of the record that wrote
/// it; an older one is a value sled replaced, deleted in time).
fn big_blob(path: &Path) -> PathBuf {
    let marker = "x".repeat(4096);
    let mut blobs: Vec<(u64, PathBuf)> = std::fs::read_dir(path.join("blobs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            std::fs::read(p)
                .unwrap()
                .windows(marker.len())
                .any(|w| w == marker.as_bytes())
        })
        .map(|p| (p.file_name().unwrap().to_str().unwrap().parse().unwrap(), p))
        .collect();
    blobs.sort();
    blobs.pop().expect("a blob holds big's state").1
}

/// Every session of the database at `path` reads whole, `big` with its
/// state.
async fn reads_whole(store: &SledStore, name: &str) {
    let listed = store.sessions().await.unwrap();
    assert_eq!(listed.len(), 15, "{name}: {listed:?}");
    for session in &listed {
        store.load(session).await.unwrap().unwrap();
        store.checkpoints(session, 0).await.unwrap();
    }
    let log = store.checkpoints(&id("big"), 0).await.unwrap();
    let state = serde_json::to_string(&log[0]).unwrap();
    assert!(state.contains(&big_text()), "{name}: big's state");
}

/// A blob file damaged in any way sled's check sees (a byte of the value,
/// of its checksum or of its kind flipped; cut short by one byte or to
/// fewer than its header's 5; emptied) or deleted is refused by the
/// application's open ([`SledStore::open`], and `SledMemory::open`) before
/// sled opens the database, as [`StoreError::Damaged`] naming the blob
/// file; no byte of any file changes (before, the open succeeded: sled's
/// recovery stopped at the blob, `big` was gone and every blob deleted).
/// The reader ([`SledStore::open_read_only`]) names the blob too (before,
/// it named the log at an offset). In a database sled has a snapshot of
/// too. Put back, the blob reads again.
#[tokio::test]
async fn a_damaged_or_missing_blob_is_refused_naming_it_and_nothing_changes() {
    let base = tempfile::tempdir().unwrap();
    type Damage = (&'static str, fn(&Path));
    let damages: [Damage; 8] = [
        ("a byte of the value flipped", |p| {
            let mut bytes = std::fs::read(p).unwrap();
            let at = 300_000.min(bytes.len() - 1);
            bytes[at] ^= 0x20;
            std::fs::write(p, bytes).unwrap();
        }),
        ("its last byte flipped", |p| {
            let mut bytes = std::fs::read(p).unwrap();
            let at = bytes.len() - 1;
            bytes[at] ^= 0x01;
            std::fs::write(p, bytes).unwrap();
        }),
        ("a byte of its checksum flipped", |p| {
            let mut bytes = std::fs::read(p).unwrap();
            bytes[2] ^= 0x80;
            std::fs::write(p, bytes).unwrap();
        }),
        ("its kind byte changed", |p| {
            let mut bytes = std::fs::read(p).unwrap();
            bytes[4] ^= 0x03;
            std::fs::write(p, bytes).unwrap();
        }),
        ("cut one byte short", |p| {
            let len = std::fs::metadata(p).unwrap().len();
            let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
            f.set_len(len - 1).unwrap();
        }),
        ("cut to 3 bytes", |p| {
            let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
            f.set_len(3).unwrap();
        }),
        ("emptied", |p| std::fs::write(p, b"").unwrap()),
        ("deleted", |p| std::fs::remove_file(p).unwrap()),
    ];
    let mut failures = Vec::new();
    for reopened in [false, true] {
        let pristine = base.path().join(format!("pristine-{reopened}"));
        db_with_a_blob(&pristine, reopened).await;
        let blob = big_blob(&pristine);
        let blob_name = blob.strip_prefix(&pristine).unwrap().to_path_buf();
        for (i, (name, damage)) in damages.iter().enumerate() {
            let name = format!("{name} (snapshot: {reopened})");
            let case = base.path().join(format!("case-{reopened}-{i}"));
            copy_db(&pristine, &case);
            let blob = case.join(&blob_name);
            damage(&blob);
            if let Err(failed) = refused(&case, &blob).await {
                failures.push(format!("{name}: {failed}"));
                continue;
            }
            // Put back, it opens with every session whole.
            std::fs::write(&blob, std::fs::read(pristine.join(&blob_name)).unwrap()).unwrap();
            let store = SledStore::open_read_only(&case).unwrap();
            reads_whole(&store, &name).await;
            drop(store);
            let store = SledStore::open(&case).unwrap_or_else(|e| panic!("{name}: {e}"));
            reads_whole(&store, &name).await;
            drop(store);
            closed(&case).await;
            std::fs::remove_dir_all(&case).unwrap();
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Whether the database at `case`, its blob `blob` damaged, is refused as
/// damage naming the blob by the reader, the application's open and the
/// memory's, no byte of it changed; what went otherwise.
async fn refused(case: &Path, blob: &Path) -> Result<(), String> {
    let before = files(case);
    let unchanged = |who: &str| {
        if files(case) == before {
            Ok(())
        } else {
            Err(format!("{who} changed the store"))
        }
    };
    match SledStore::open_read_only(case) {
        Err(ReadOnlyError::Damaged(d)) if d.file == blob && d.store == case => {}
        Err(other) => return Err(format!("the reader: {other}")),
        Ok(_) => return Err("the reader opened it".into()),
    }
    unchanged("the reader")?;
    match SledStore::open(case) {
        Err(e @ StoreError::Damaged { .. }) => {
            let shown = e.to_string();
            let StoreError::Damaged {
                store, file, what, ..
            } = e
            else {
                unreachable!()
            };
            if store != case
                || file != blob
                || !what.contains("nothing was changed")
                || !shown.contains(&format!("is damaged: {}", blob.display()))
            {
                return Err(format!("the store: {shown}"));
            }
        }
        Err(other) => return Err(format!("the store: {other}")),
        Ok(store) => {
            let listed = store.sessions().await.unwrap();
            return Err(format!("the store opened, with {listed:?}"));
        }
    }
    unchanged("the store's open")?;
    match harness_stores::SledMemory::open(case) {
        Err(MemoryError::Damaged { file, .. }) if file == blob => {}
        Err(other) => return Err(format!("the memory: {other}")),
        Ok(_) => return Err("the memory opened".into()),
    }
    unchanged("the memory's open")
}

/// A store whose large values sled keeps in blobs, replaced again and
/// again (sled deletes the blob of a value it replaced once the new one is
/// written, while records of the log still point to it) and closed and
/// opened between rounds, opens every time with nothing reported (by the
/// application's open and by the reader), and holds what was committed.
#[tokio::test]
async fn a_healthy_store_with_blobs_reopens_through_the_check_of_its_blobs() {
    use harness_stores::conformance::advance;
    let base = tempfile::tempdir().unwrap();
    let path = base.path().join("db");
    let mut heads: BTreeMap<String, harness::session::StoredRun> = BTreeMap::new();
    for round in 0..6u64 {
        let store = crate::reopen(|| SledStore::open(&path));
        for (session, head) in &heads {
            assert_eq!(
                store.load(&id(session)).await.unwrap().as_ref(),
                Some(head),
                "round {round}"
            );
        }
        for s in 0..4 {
            let session = format!("big{s}");
            let mut prev = match heads.get(&session) {
                Some(head) => head.clone(),
                None => create_sample(&store, &session, 1).await.head,
            };
            for step in 0..4u64 {
                let seq = prev.last_seq + 1;
                let text = format!("{round}-{step}-").repeat(20_000 + 1000 * s);
                let next = advance(
                    &prev,
                    vec![snapshot(
                        seq,
                        prev.steps + 1,
                        serde_json::json!({ "text": text }),
                    )],
                    (0..seq).collect(),
                );
                store.commit(&next).await.unwrap();
                prev = next.head;
            }
            heads.insert(session, prev);
        }
        for s in 0..10 {
            create_sample(&store, &format!("r{round}-{s}"), 2).await;
        }
        store.flush().await.unwrap();
        drop(store);
        closed(&path).await;
        let reader = SledStore::open_read_only(&path)
            .unwrap_or_else(|e| panic!("round {round}: the reader: {e}"));
        for (session, head) in &heads {
            assert_eq!(
                reader.load(&id(session)).await.unwrap().as_ref(),
                Some(head),
                "round {round}"
            );
        }
    }
    let blobs = std::fs::read_dir(path.join("blobs")).unwrap().count();
    assert!(blobs > 0, "values were kept in blobs");
}
