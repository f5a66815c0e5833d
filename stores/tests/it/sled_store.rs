//! The sled store: the suite, its documented layout (three trees; keys of
//! the id's length, the id and the seq), reopening, segment sizes.

use crate::{GARBAGE, create_sample, id};
use harness::SessionId;
use harness::session::{SessionStore, StoreError};
use harness_stores::SledStore;
use harness_stores::conformance::{self, Record, advance, snapshot, update};
use harness_stores::sled::Tree;
use serde_json::json;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The segment size [`SledStore`] documents for the databases it creates.
const SEGMENT_SIZE: usize = 128 * 1024;

/// One of the store's trees, by its documented name.
pub(crate) fn tree(store: &SledStore, name: &str) -> Tree {
    store.db().open_tree(name).unwrap()
}

/// A head's key in `heads`: the id's UTF-8 bytes.
fn head_key(session: &SessionId) -> Vec<u8> {
    session.as_str().as_bytes().to_vec()
}

/// A checkpoint's key in `checkpoints` and `snapshots`: the id's length as
/// 8 big-endian bytes, the id, the seq as 8 big-endian bytes.
pub(crate) fn checkpoint_key(session: &SessionId, seq: u64) -> Vec<u8> {
    let id = session.as_str().as_bytes();
    let mut key = (id.len() as u64).to_be_bytes().to_vec();
    key.extend_from_slice(id);
    key.extend_from_slice(&seq.to_be_bytes());
    key
}

fn corrupt_sled(store: &SledStore, session: &SessionId, record: Record) {
    let previous = match record {
        Record::Head => tree(store, "heads")
            .insert(head_key(session), GARBAGE)
            .unwrap(),
        Record::Checkpoint(seq) => {
            // Snapshots and updates live in trees of their own.
            let key = checkpoint_key(session, seq);
            let snapshots = tree(store, "snapshots");
            let tree = if snapshots.contains_key(&key).unwrap() {
                snapshots
            } else {
                tree(store, "checkpoints")
            };
            tree.insert(key, GARBAGE).unwrap()
        }
    };
    assert!(
        previous.is_some(),
        "no record to corrupt: {session:?} {record:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn temporary_sled_store_conforms() {
    conformance::run_all_with(|| SledStore::temporary().unwrap(), Some(&corrupt_sled)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_disk_sled_store_conforms() {
    let base = tempfile::tempdir().unwrap();
    let n = AtomicUsize::new(0);
    let make = || {
        SledStore::open(
            base.path()
                .join(n.fetch_add(1, Ordering::Relaxed).to_string()),
        )
        .unwrap()
    };
    conformance::run_all_with(make, Some(&corrupt_sled)).await;
}

#[tokio::test]
async fn sled_store_reopened_sees_commits() {
    let base = tempfile::tempdir().unwrap();
    let path = base.path().join("db");
    let store = SledStore::open(&path).unwrap();
    let c = create_sample(&store, "kept", 3).await;
    let mut next = advance(&c.head, vec![update(4, 4, "x", json!(4))], vec![2]);
    next.durable = false;
    store.commit(&next.clone()).await.unwrap();
    create_sample(&store, "kept-too", 0).await;
    store.flush().await.unwrap();
    let log = store.checkpoints(&id("kept"), 0).await.unwrap();
    drop(store);

    let store = reopen_sled(&path).await;
    assert_eq!(
        store.load(&id("kept")).await.unwrap(),
        Some(next.head.clone())
    );
    assert_eq!(store.checkpoints(&id("kept"), 0).await.unwrap(), log);
    assert_eq!(
        log.iter().map(|cp| cp.seq).collect::<Vec<_>>(),
        vec![0, 1, 3, 4]
    );
    let mut listed = store.sessions().await.unwrap();
    listed.sort();
    assert_eq!(listed, vec![id("kept"), id("kept-too")]);
    store
        .commit(&advance(
            &next.head,
            vec![update(5, 5, "x", json!(5))],
            vec![],
        ))
        .await
        .unwrap();
}

/// Sled releases its lock when its last handle (some held by its own
/// threads) is gone; retry briefly.
async fn reopen_sled(path: &Path) -> SledStore {
    crate::reopen(|| SledStore::open(path))
}

#[tokio::test]
async fn sled_store_keeps_snapshots_apart_and_merges_them_in_order() {
    let store = SledStore::temporary().unwrap();
    let c = create_sample(&store, "s", 2).await;
    let next = advance(
        &c.head,
        vec![
            update(3, 3, "x", json!(3)),
            snapshot(4, 3, json!({"n": 3})),
            update(5, 4, "x", json!(4)),
        ],
        vec![],
    );
    store.commit(&next).await.unwrap();
    let key = |seq| checkpoint_key(&id("s"), seq);
    let (snapshots, checkpoints) = (tree(&store, "snapshots"), tree(&store, "checkpoints"));
    assert!(snapshots.contains_key(key(0)).unwrap());
    assert!(snapshots.contains_key(key(4)).unwrap());
    assert!(!checkpoints.contains_key(key(4)).unwrap());
    assert!(checkpoints.contains_key(key(3)).unwrap());
    let seqs =
        |log: Vec<harness::session::Checkpoint>| log.iter().map(|cp| cp.seq).collect::<Vec<_>>();
    assert_eq!(
        seqs(store.checkpoints(&id("s"), 0).await.unwrap()),
        vec![0, 1, 2, 3, 4, 5]
    );
    assert_eq!(
        seqs(store.checkpoints(&id("s"), 4).await.unwrap()),
        vec![4, 5]
    );

    // A seq stored in both trees is corrupt, not read twice.
    let update_3 = checkpoints.get(key(3)).unwrap().unwrap();
    snapshots.insert(key(3), update_3).unwrap();
    match store.checkpoints(&id("s"), 0).await {
        Err(StoreError::Load(e)) => {
            assert_eq!(e.record, "checkpoint 3");
            assert!(e.reason.contains("both"), "{e}");
        }
        other => panic!("expected a load error, got {other:?}"),
    }
}

#[tokio::test]
async fn sled_store_opens_a_database_made_with_another_segment_size() {
    let base = tempfile::tempdir().unwrap();
    let fresh = base.path().join("fresh");
    drop(SledStore::open(&fresh).unwrap());
    let conf = String::from_utf8_lossy(&std::fs::read(fresh.join("conf")).unwrap()).into_owned();
    assert!(
        conf.contains(&format!("segment_size: {SEGMENT_SIZE}")),
        "{conf}"
    );

    // A database made with sled's own default of 512 KiB.
    let old = base.path().join("old");
    let config = harness_stores::sled::Config::new().path(&old);
    let store = SledStore::with_config(&config).unwrap();
    let c = create_sample(&store, "kept", 2).await;
    store.flush().await.unwrap();
    drop(store);
    drop(config);
    let conf = String::from_utf8_lossy(&std::fs::read(old.join("conf")).unwrap()).into_owned();
    assert!(conf.contains("segment_size: 524288"), "{conf}");
    let store = reopen_sled(&old).await;
    assert_eq!(store.load(&id("kept")).await.unwrap(), Some(c.head));
    assert_eq!(store.checkpoints(&id("kept"), 0).await.unwrap().len(), 3);
}

/// A key of the `heads` tree that is not UTF-8 (no session id is: another
/// tool's, or an edit) is skipped: `sessions` lists every other session,
/// and so the default `runnable`, which lists first, still finds them.
/// Before, one such key failed both for every session.
#[tokio::test]
async fn sled_sessions_skip_a_heads_key_that_is_not_utf8() {
    let foreign: [&[u8]; 4] = [b"\xff", b"a\xfe\xffb", b"\xc3(", b"ok\xe2\x82"];
    for key in foreign {
        let store = SledStore::temporary().unwrap();
        create_sample(&store, "a", 1).await;
        create_sample(&store, "b", 0).await;
        tree(&store, "heads").insert(key, GARBAGE).unwrap();
        let listed = store.sessions().await;
        let listed = listed.unwrap_or_else(|e| panic!("{key:?}: {e}"));
        assert_eq!(listed, vec![id("a"), id("b")], "{key:?}");
        let now = harness::session::now_millis();
        let found = store.runnable("conformance", now, 10).await;
        let mut found = found.unwrap_or_else(|e| panic!("{key:?}: {e}"));
        found.sort();
        assert_eq!(found, vec![id("a"), id("b")], "{key:?}");
        // Left as it is.
        assert_eq!(
            tree(&store, "heads").get(key).unwrap().as_deref(),
            Some(GARBAGE)
        );
    }
}

/// Set in the child that holds a database open for
/// [`a_database_open_in_another_process_is_refused_naming_it`]: the path,
/// and `store` or `memory`.
const HOLDER: &str = "HARNESS_IT_SLED_HOLDER";

/// The child of [`a_database_open_in_another_process_is_refused_naming_it`]:
/// opens the database its parent names, says so, and holds it until its
/// standard input closes.
#[test]
#[ignore = "run in a process of its own by `a_database_open_in_another_process_is_refused_naming_it`"]
fn sled_holder_child() {
    let Ok(held) = std::env::var(HOLDER) else {
        return;
    };
    let (kind, path) = held.split_once(':').unwrap();
    // Retried while the parent's sled threads still hold the lock of the
    // handle it dropped (see `reopen`).
    let store = (kind == "store").then(|| crate::reopen(|| SledStore::open(path)));
    let memory =
        (kind == "memory").then(|| crate::reopen(|| harness_stores::SledMemory::open(path)));
    // On the line libtest begins with the test's name.
    println!("sled-holder: holding {path}");
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut std::io::stdin(), &mut rest);
    drop((store, memory));
}

/// A sled database another process has open (through the store, or the
/// long-term memory) is refused by the application's open
/// ([`SledStore::open`], `SledMemory::open`) saying so and naming the
/// path, never with sled's Debug dump ("IO error: could not acquire lock
/// on \"…/db\": Os { code: 11, kind: WouldBlock, … }"); once that process
/// is gone, it opens.
#[tokio::test]
async fn a_database_open_in_another_process_is_refused_naming_it() {
    let base = tempfile::tempdir().unwrap();
    for holder in ["store", "memory"] {
        let path = base.path().join(holder);
        if holder == "store" {
            let store = SledStore::open(&path).unwrap();
            create_sample(&store, "s", 1).await;
            store.flush().await.unwrap();
            drop(store);
            crate::reopen(|| SledStore::open(&path));
        }
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "sled_store::sled_holder_child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(HOLDER, format!("{holder}:{}", path.display()))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        while !line.contains("sled-holder: holding") {
            line.clear();
            let read = std::io::BufRead::read_line(&mut out, &mut line).unwrap();
            assert!(
                read > 0,
                "the child ended before holding {}",
                path.display()
            );
        }
        let named = path.display().to_string();
        let check = |who: &str, shown: String| {
            assert!(
                shown.contains(&format!("{named} is open in another process")),
                "{holder} held, {who}: {shown}"
            );
            for debug in ["Os {", "WouldBlock", "code: 11", "could not acquire"] {
                assert!(!shown.contains(debug), "{holder} held, {who}: {shown}");
            }
        };
        for _ in 0..2 {
            match SledStore::open(&path) {
                Err(e @ StoreError::Backend { .. }) => check("the store", e.to_string()),
                other => panic!("{holder} held: expected a refusal, got {other:?}"),
            }
            match harness_stores::SledMemory::open(&path) {
                Err(e) => check("the memory", e.to_string()),
                Ok(_) => panic!("{holder} held: the memory opened"),
            }
        }
        drop(child.stdin.take());
        assert!(child.wait().unwrap().success());
        crate::reopen(|| SledStore::open(&path));
    }
}
