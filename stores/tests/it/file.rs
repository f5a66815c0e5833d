//! The file store: the suite, its documented layout, permissions,
//! reopening, crash leftovers, ids that try to escape.

use crate::{GARBAGE, create_sample, id};
use harness::SessionId;
use harness::session::{SessionStore, StoreError};
use harness_stores::FileStore;
use harness_stores::conformance::{
    self, Record, RoundRobin, advance, create, head, snapshot, update,
};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The directory of `session` under `root`, as [`FileStore`] documents it:
/// `s-{id}` for an id made of `a-z`, `0-9`, `-` and `_`.
pub(crate) fn session_dir(root: &Path, session: &str) -> PathBuf {
    assert!(
        session
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_'),
        "{session:?} is escaped in its directory name; use a plain id"
    );
    root.join(format!("s-{session}"))
}

/// `head.json` in the session's directory.
fn head_path(root: &Path, session: &str) -> PathBuf {
    session_dir(root, session).join("head.json")
}

/// `cp-{seq:020}.json` in the session's directory.
pub(crate) fn checkpoint_path(root: &Path, session: &str, seq: u64) -> PathBuf {
    session_dir(root, session).join(format!("cp-{seq:020}.json"))
}

/// Fresh stores in numbered subdirectories of `base`.
fn file_stores(base: &Path) -> impl Fn() -> FileStore + '_ {
    let n = AtomicUsize::new(0);
    move || FileStore::open(base.join(n.fetch_add(1, Ordering::Relaxed).to_string())).unwrap()
}

fn corrupt_file(store: &FileStore, session: &SessionId, record: Record) {
    let path = match record {
        Record::Head => head_path(store.root(), session.as_str()),
        Record::Checkpoint(seq) => checkpoint_path(store.root(), session.as_str(), seq),
    };
    assert!(path.exists(), "no record to corrupt at {}", path.display());
    std::fs::write(path, GARBAGE).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn file_store_conforms() {
    let base = tempfile::tempdir().unwrap();
    conformance::run_all_with(file_stores(base.path()), Some(&corrupt_file)).await;
}

/// Two handles on one root, as two processes would have: each call goes to
/// the other handle, so only the lock files keep commits apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_file_stores_on_one_root_conform() {
    let base = tempfile::tempdir().unwrap();
    let n = AtomicUsize::new(0);
    let make = || {
        let root = base
            .path()
            .join(n.fetch_add(1, Ordering::Relaxed).to_string());
        RoundRobin::new(vec![
            FileStore::open(&root).unwrap(),
            FileStore::open(&root).unwrap(),
        ])
    };
    let corrupt = |rr: &RoundRobin<FileStore>, s: &SessionId, r: Record| {
        corrupt_file(&rr.stores()[0], s, r);
    };
    conformance::run_all_with(make, Some(&corrupt)).await;
}

#[cfg(unix)]
#[tokio::test]
async fn file_store_creates_private_files() {
    use std::os::unix::fs::PermissionsExt;
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("a/b/root");
    let store = FileStore::open(&root).unwrap();
    let c = create_sample(&store, "perm", 2).await;
    let mut next = advance(&c.head, vec![update(3, 3, "x", json!(3))], vec![]);
    next.durable = false;
    store.commit(&next).await.unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    for dir in [
        base.path().join("a"),
        root.clone(),
        session_dir(store.root(), "perm"),
    ] {
        assert_eq!(mode(&dir), 0o700, "{}", dir.display());
    }
    let dir = session_dir(store.root(), "perm");
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        assert_eq!(mode(&path), 0o600, "{}", path.display());
        files += 1;
    }
    // head, lock, four checkpoints.
    assert_eq!(files, 6);
}

#[tokio::test]
async fn file_store_reopened_sees_commits() {
    let base = tempfile::tempdir().unwrap();
    let store = FileStore::open(base.path()).unwrap();
    let c = create_sample(&store, "kept", 3).await;
    let mut next = advance(&c.head, vec![update(4, 4, "x", json!(4))], vec![2]);
    next.durable = false;
    store.commit(&next.clone()).await.unwrap();
    store.flush().await.unwrap();
    let log = store.checkpoints(&id("kept"), 0).await.unwrap();
    drop(store);

    let store = FileStore::open(base.path()).unwrap();
    assert_eq!(
        store.load(&id("kept")).await.unwrap(),
        Some(next.head.clone())
    );
    assert_eq!(store.checkpoints(&id("kept"), 0).await.unwrap(), log);
    assert_eq!(
        log.iter().map(|cp| cp.seq).collect::<Vec<_>>(),
        vec![0, 1, 3, 4]
    );
    assert_eq!(store.sessions().await.unwrap(), vec![id("kept")]);
    // And it goes on from there.
    store
        .commit(&advance(
            &next.head,
            vec![update(5, 5, "x", json!(5))],
            vec![],
        ))
        .await
        .unwrap();
}

/// A crash between writing checkpoints and writing the head leaves files
/// beyond the head's `last_seq`: readers ignore them, the next commit
/// overwrites them.
#[tokio::test]
async fn file_store_ignores_checkpoints_beyond_the_head() {
    let base = tempfile::tempdir().unwrap();
    let store = FileStore::open(base.path()).unwrap();
    let c = create_sample(&store, "crash", 2).await;
    let before = store.checkpoints(&id("crash"), 0).await.unwrap();
    // A complete leftover, a torn one, and a temp file.
    std::fs::write(
        checkpoint_path(store.root(), "crash", 3),
        serde_json::to_vec(&update(3, 3, "lost", json!("lost"))).unwrap(),
    )
    .unwrap();
    std::fs::write(
        checkpoint_path(store.root(), "crash", 4),
        b"{\"seq\": 4, \"ind",
    )
    .unwrap();
    // Temporary files of interrupted writes: the unique names of
    // `harness::durable`, the fixed ones of earlier versions; and a file
    // that only looks like one, which is not the store's to delete.
    let dir = session_dir(store.root(), "crash");
    let leftovers = [
        ".head.json.0123456789abcdef0123456789abcdef.tmp",
        ".cp-00000000000000000003.json.fedcba9876543210fedcba9876543210.tmp",
        ".head.json.tmp",
    ];
    for name in leftovers {
        std::fs::write(dir.join(name), GARBAGE).unwrap();
    }
    std::fs::write(dir.join(".notes.tmp"), b"mine").unwrap();

    assert_eq!(store.checkpoints(&id("crash"), 0).await.unwrap(), before);
    assert_eq!(store.checkpoints(&id("crash"), 3).await.unwrap(), vec![]);
    assert_eq!(
        store.load(&id("crash")).await.unwrap(),
        Some(c.head.clone())
    );

    // The restarted process retries the step, writing seq 3 again; the
    // torn 4 stays invisible, the leftovers are gone.
    let store = FileStore::open(base.path()).unwrap();
    let cp3 = update(3, 3, "retried", json!("retried"));
    let next = advance(&c.head, vec![cp3.clone()], vec![]);
    store.commit(&next.clone()).await.unwrap();
    for name in leftovers {
        assert!(!dir.join(name).exists(), "{name} is left");
    }
    assert_eq!(std::fs::read(dir.join(".notes.tmp")).unwrap(), b"mine");
    let mut want = before.clone();
    want.push(cp3);
    assert_eq!(store.checkpoints(&id("crash"), 0).await.unwrap(), want);

    // A commit that moves last_seq past the torn file without writing it
    // (the engine never does) must not expose it.
    let mut jump = advance(&next.head, vec![update(5, 5, "x", json!(5))], vec![]);
    jump.head.last_seq = 5;
    store.commit(&jump).await.unwrap();
    let seqs: Vec<u64> = store
        .checkpoints(&id("crash"), 0)
        .await
        .unwrap()
        .iter()
        .map(|cp| cp.seq)
        .collect();
    assert_eq!(seqs, vec![0, 1, 2, 3, 5]);
}

/// A crash after writing the head but before deleting removed checkpoints:
/// the head lists them, so readers skip them, and the next commit deletes
/// them.
#[tokio::test]
async fn file_store_skips_removed_checkpoints_left_by_a_crash() {
    let base = tempfile::tempdir().unwrap();
    let store = FileStore::open(base.path()).unwrap();
    let c = create_sample(&store, "rm", 3).await;
    let path2 = checkpoint_path(store.root(), "rm", 2);
    let bytes2 = std::fs::read(&path2).unwrap();
    let next = advance(&c.head, vec![update(4, 4, "x", json!(4))], vec![2]);
    store.commit(&next.clone()).await.unwrap();
    assert!(!path2.exists());
    std::fs::write(&path2, &bytes2).unwrap();
    let seqs =
        |log: Vec<harness::session::Checkpoint>| log.iter().map(|cp| cp.seq).collect::<Vec<_>>();
    assert_eq!(
        seqs(store.checkpoints(&id("rm"), 0).await.unwrap()),
        vec![0, 1, 3, 4]
    );
    store
        .commit(&advance(&next.head, vec![], vec![]))
        .await
        .unwrap();
    assert!(!path2.exists(), "the next commit deletes the leftover");
    assert_eq!(
        seqs(store.checkpoints(&id("rm"), 0).await.unwrap()),
        vec![0, 1, 3, 4]
    );
}

#[tokio::test]
async fn file_store_keeps_every_id_inside_its_root() {
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("root");
    let store = FileStore::open(&root).unwrap();
    let ids = [
        "../x",
        "../../etc/passwd",
        "..",
        ".",
        "a/b",
        "/abs",
        "a\\b",
        "",
        "~",
        "a/../..",
        "C:\\x",
        "nul",
        "x\0y",
    ];
    for s in ids {
        create_sample(&store, s, 1).await;
    }
    // Nothing was written next to the root.
    let beside: Vec<_> = std::fs::read_dir(base.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(beside, vec![std::ffi::OsString::from("root")]);
    // Every entry of the root is a session directory, one per id, but the
    // feed of created sessions.
    assert_eq!(std::fs::read_dir(&root).unwrap().count(), ids.len() + 1);
    assert!(feed_path(&root).is_file());
    for entry in std::fs::read_dir(&root).unwrap() {
        let entry = entry.unwrap();
        if entry.path() == feed_path(&root) {
            continue;
        }
        assert!(entry.file_type().unwrap().is_dir());
        assert!(entry.file_name().to_str().unwrap().starts_with("s-"));
    }
    let mut listed = store.sessions().await.unwrap();
    listed.sort();
    let mut want: Vec<SessionId> = ids.iter().map(|s| id(s)).collect();
    want.sort();
    assert_eq!(listed, want);
}

#[tokio::test]
async fn file_store_refuses_ids_too_long_for_a_file_name() {
    let base = tempfile::tempdir().unwrap();
    let store = FileStore::open(base.path()).unwrap();
    // Too long as they are, or once each byte outside a-z, 0-9, - and _
    // is written as three.
    for long in [
        "x".repeat(300),
        "X".repeat(90),
        "/".repeat(100),
        "\u{e9}".repeat(45),
    ] {
        let err = store
            .commit(&create(head(&long), vec![snapshot(0, 0, json!(0))]))
            .await;
        match err {
            Err(StoreError::SessionIdNotKept { session, why }) => {
                assert_eq!(session.as_str(), long);
                assert!(why.contains("at most 255"), "{why}");
            }
            other => panic!("{long}: {other:?}"),
        }
        assert!(matches!(
            store.load(&id(&long)).await,
            Err(StoreError::SessionIdNotKept { .. })
        ));
    }
    // Short enough once encoded.
    create_sample(&store, &"x".repeat(250), 0).await;
    create_sample(&store, &"X".repeat(80), 0).await;
}

/// A truncated or garbled record is reported, and left as it is.
#[tokio::test]
async fn file_store_reports_and_keeps_unreadable_records() {
    let base = tempfile::tempdir().unwrap();
    let store = FileStore::open(base.path()).unwrap();
    let c = create_sample(&store, "torn", 2).await;
    let head_path = head_path(store.root(), "torn");
    let full = std::fs::read(&head_path).unwrap();
    let torn = &full[..full.len() / 2];
    std::fs::write(&head_path, torn).unwrap();
    for _ in 0..2 {
        match store.load(&id("torn")).await {
            Err(StoreError::Load(l)) => {
                assert_eq!(l.session, id("torn"));
                assert_eq!(l.record, "head");
                assert!(l.reason.contains("JSON"), "{}", l.reason);
            }
            other => panic!("expected a load error, got {other:?}"),
        }
        let next = advance(&c.head, vec![update(3, 3, "x", json!(3))], vec![]);
        assert!(matches!(
            store.commit(&next).await,
            Err(StoreError::Load(_))
        ));
        assert!(matches!(
            store.checkpoints(&id("torn"), 0).await,
            Err(StoreError::Load(_))
        ));
    }
    assert_eq!(
        std::fs::read(&head_path).unwrap(),
        torn,
        "the torn head is left as it is"
    );
    assert!(!checkpoint_path(store.root(), "torn", 3).exists());

    // An empty checkpoint file (torn write) names its record.
    let c = create_sample(&store, "torn-log", 2).await;
    let cp1 = checkpoint_path(store.root(), "torn-log", 1);
    std::fs::write(&cp1, b"").unwrap();
    match store.checkpoints(&id("torn-log"), 0).await {
        Err(StoreError::Load(l)) => assert_eq!(l.record, "checkpoint 1"),
        other => panic!("expected a load error, got {other:?}"),
    }
    assert_eq!(std::fs::read(&cp1).unwrap(), b"");
    // A checkpoint stored under the wrong seq.
    std::fs::write(
        &cp1,
        serde_json::to_vec(&update(7, 1, "x", json!(1))).unwrap(),
    )
    .unwrap();
    match store.checkpoints(&id("torn-log"), 0).await {
        Err(StoreError::Load(l)) => assert!(l.reason.contains("seq 7"), "{}", l.reason),
        other => panic!("expected a load error, got {other:?}"),
    }
    assert_eq!(store.load(&id("torn-log")).await.unwrap(), Some(c.head));
}

/// Commits whose appended seqs the file store cannot make atomic are
/// refused before anything is written.
#[tokio::test]
async fn file_store_refuses_commits_that_rewrite_the_log() {
    let base = tempfile::tempdir().unwrap();
    let store = FileStore::open(base.path()).unwrap();
    let c = create_sample(&store, "inv", 2).await;
    let before = store.checkpoints(&id("inv"), 0).await.unwrap();
    // Rewrites a committed checkpoint.
    let rewrite = advance(&c.head, vec![update(2, 2, "again", json!("again"))], vec![]);
    // Appends beyond the new head's last_seq.
    let mut beyond = advance(&c.head, vec![update(3, 3, "x", json!(3))], vec![]);
    beyond.head.last_seq = 2;
    for commit in [rewrite, beyond] {
        match store.commit(&commit).await {
            Err(StoreError::Backend { message }) => {
                assert!(message.contains("invalid commit"), "{message}")
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
    assert_eq!(store.load(&id("inv")).await.unwrap(), Some(c.head));
    assert_eq!(store.checkpoints(&id("inv"), 0).await.unwrap(), before);
    assert!(!checkpoint_path(store.root(), "inv", 3).exists());
}

/// Files and directories the store did not make are not sessions.
#[tokio::test]
async fn file_store_lists_only_its_sessions() {
    let base = tempfile::tempdir().unwrap();
    let store = FileStore::open(base.path()).unwrap();
    create_sample(&store, "real", 0).await;
    std::fs::write(base.path().join("notes.txt"), b"hi").unwrap();
    std::fs::create_dir(base.path().join("s-%zz")).unwrap();
    std::fs::create_dir(base.path().join("s-Upper")).unwrap();
    // A first commit that crashed before its head: not a session yet.
    std::fs::create_dir(base.path().join("s-half")).unwrap();
    std::fs::write(
        base.path().join("s-half/cp-00000000000000000000.json"),
        b"{}",
    )
    .unwrap();
    assert_eq!(store.sessions().await.unwrap(), vec![id("real")]);
    // A page skips them too, and is still full when it can be.
    create_sample(&store, "zed", 0).await;
    assert_eq!(
        store.sessions_page("", None, 2).await.unwrap(),
        vec![id("real"), id("zed")]
    );
    assert_eq!(
        store.sessions_page("", Some(&id("a")), 1).await.unwrap(),
        vec![id("real")]
    );
    assert!(store.sessions_page("h", None, 5).await.unwrap().is_empty());
    assert_eq!(store.load(&id("half")).await.unwrap(), None);
    assert_eq!(store.checkpoints(&id("half"), 0).await.unwrap(), vec![]);
    // And it can be created over the leftover.
    let c = create_sample(&store, "half", 0).await;
    assert_eq!(store.checkpoints(&id("half"), 0).await.unwrap(), c.append);
}

/// An entry named like a session directory that is no directory (a stray
/// file `s-backup`, an empty one, a symlink to a file, a dangling symlink)
/// is not a session: listing, a page and finding work skip it and go on
/// with every session, and it is left as it is. Before, one such file
/// failed all three for the whole store ("cannot read …/s-backup/head.json:
/// Not a directory").
#[tokio::test]
async fn file_store_skips_an_entry_named_like_a_session_that_is_no_directory() {
    type Stray = Box<dyn Fn(&Path)>;
    let mut strays: Vec<(&str, Stray)> = vec![
        (
            "s-backup",
            Box::new(|p| std::fs::write(p, b"a backup of something").unwrap()),
        ),
        ("s-empty", Box::new(|p| std::fs::write(p, b"").unwrap())),
        // The name of id `x.y` (escaped), a file holding JSON.
        (
            "s-x%2Ey",
            Box::new(|p| std::fs::write(p, b"{\"not\": \"a head\"}").unwrap()),
        ),
    ];
    #[cfg(unix)]
    {
        strays.push((
            "s-link",
            Box::new(|p| {
                let target = p.with_file_name("target.txt");
                std::fs::write(&target, b"x").unwrap();
                std::os::unix::fs::symlink(target, p).unwrap();
            }),
        ));
        strays.push((
            "s-dangling",
            Box::new(|p| std::os::unix::fs::symlink(p.with_file_name("gone"), p).unwrap()),
        ));
    }
    let mut failures = Vec::new();
    for (name, make) in &strays {
        let base = tempfile::tempdir().unwrap();
        let store = FileStore::open(base.path()).unwrap();
        create_sample(&store, "a", 1).await;
        create_sample(&store, "z", 0).await;
        let stray = base.path().join(name);
        make(&stray);
        let before = std::fs::symlink_metadata(&stray).unwrap();
        let before_bytes = std::fs::read(&stray).ok();
        if let Err(failed) = lists_past_it(&store).await {
            failures.push(format!("{name}: {failed}"));
        }
        // Left as it is.
        let after = std::fs::symlink_metadata(&stray).unwrap();
        assert_eq!(after.file_type(), before.file_type(), "{name}");
        assert_eq!(std::fs::read(&stray).ok(), before_bytes, "{name}");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Whether `store` (holding `a` and `z`) lists both, gives both in a page,
/// finds both to run, and a read-only store of its root lists both; what
/// went otherwise.
async fn lists_past_it(store: &FileStore) -> Result<(), String> {
    let both = vec![id("a"), id("z")];
    let check = |what: &str, found: Result<Vec<SessionId>, StoreError>| match found {
        Ok(mut found) => {
            found.sort();
            if found == both {
                Ok(())
            } else {
                Err(format!("{what} gave {found:?}"))
            }
        }
        Err(e) => Err(format!("{what}: {e}")),
    };
    check("sessions", store.sessions().await)?;
    check("a page", store.sessions_page("", None, 10).await)?;
    let now = harness::session::now_millis();
    check("runnable", store.runnable("conformance", now, 10).await)?;
    let reader = FileStore::open_read_only(store.root()).map_err(|e| e.to_string())?;
    check("a read-only store", reader.sessions().await)
}

/// The feed of created sessions, as [`FileStore`] documents it.
fn feed_path(root: &Path) -> PathBuf {
    root.join("created.feed")
}

/// Appends `bytes` to the feed of the store at `root`, as another writer
/// (or a crash) would have left them.
fn append_to_feed(root: &Path, bytes: &[u8]) {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(feed_path(root))
        .unwrap()
        .write_all(bytes)
        .unwrap();
}

/// The feed after `since`, whole: the ids and the position after them.
async fn feed_from(store: &FileStore, since: Option<u64>) -> (Vec<String>, u64) {
    let page = store
        .created_since(since, 1000)
        .await
        .unwrap()
        .expect("the file store keeps a feed");
    let names = page
        .sessions
        .iter()
        .map(|s| s.as_str().to_owned())
        .collect();
    (names, page.next)
}

/// The feed from its start to `len`, read by pages of one: each page moves
/// the position forward (past a line skipped too), and ends at `len`.
async fn feed_a_line_at_a_time(store: &FileStore, len: u64) -> Vec<String> {
    let mut at = 0;
    let mut names = Vec::new();
    while at < len {
        let page = store.created_since(Some(at), 1).await.unwrap().unwrap();
        assert!(page.next > at, "stuck at {at}: {page:?}");
        names.extend(page.sessions.iter().map(|s| s.as_str().to_owned()));
        at = page.next;
    }
    assert_eq!(at, len);
    names
}

#[tokio::test]
async fn file_feed_skips_each_line_that_names_no_session_and_gives_the_rest() {
    let base = tempfile::tempdir().unwrap();
    let store = FileStore::open(base.path()).unwrap();
    create_sample(&store, "first", 0).await;
    let lines: [&[u8]; 8] = [
        b"\n",
        b"s-%\n",
        b"notes\n",
        b"s-%zz\n",
        b"s-%61\n",
        b"s-Upper\n",
        b"s-\xff\xfe\n",
        b"s-a/b\n",
    ];
    let mut expected = vec!["first".to_owned()];
    for (i, line) in lines.iter().enumerate() {
        append_to_feed(base.path(), line);
        let name = format!("after-{i}");
        create_sample(&store, &name, 0).await;
        expected.push(name);
    }
    let len = std::fs::metadata(feed_path(base.path())).unwrap().len();
    assert_eq!(feed_from(&store, Some(0)).await, (expected.clone(), len));
    // A page at a time: each skipped line moves the position past it.
    assert_eq!(feed_a_line_at_a_time(&store, len).await, expected);
}

#[tokio::test]
async fn file_feed_ends_a_line_a_crash_cut_short_before_the_next_creation() {
    // A cut escape and a byte that is not UTF-8 name no session; `s-` (the
    // empty id) and `s-half-writ` name ones that may not exist, which a
    // reader loads and does not find.
    let torn_lines: [(&[u8], Option<&str>); 4] = [
        (b"s-ab%4", None),
        (b"s-", Some("")),
        (b"\xff", None),
        (b"s-half-writ", Some("half-writ")),
    ];
    for (torn, read_as) in torn_lines {
        let base = tempfile::tempdir().unwrap();
        let store = FileStore::open(base.path()).unwrap();
        create_sample(&store, "first", 0).await;
        let whole = std::fs::metadata(feed_path(base.path())).unwrap().len();
        append_to_feed(base.path(), torn);
        // The position now is the end of the last whole line.
        let (none, tip) = feed_from(&store, None).await;
        assert!(none.is_empty());
        assert_eq!(tip, whole, "{torn:?}");
        assert_eq!(feed_from(&store, Some(tip)).await, (vec![], tip));
        create_sample(&store, "after", 0).await;
        let mut expected: Vec<String> = read_as.iter().map(|s| (*s).to_owned()).collect();
        expected.push("after".into());
        let len = std::fs::metadata(feed_path(base.path())).unwrap().len();
        assert_eq!(
            feed_from(&store, Some(tip)).await,
            (expected, len),
            "{torn:?}"
        );
        let bytes = std::fs::read(feed_path(base.path())).unwrap();
        let mut ends = torn.to_vec();
        ends.extend_from_slice(b"\ns-after\n");
        assert!(bytes.ends_with(&ends), "{torn:?}: {bytes:?}");
    }
}

#[tokio::test]
async fn file_feed_from_a_position_of_another_feed_reads_from_its_start() {
    let base = tempfile::tempdir().unwrap();
    let store = FileStore::open(base.path()).unwrap();
    for s in ["b", "a", "c"] {
        create_sample(&store, s, 0).await;
    }
    let all = feed_from(&store, Some(0)).await;
    assert_eq!(all.0, ["b", "a", "c"]);
    let len = all.1;
    assert_eq!(
        len,
        std::fs::metadata(feed_path(base.path())).unwrap().len()
    );
    // Inside a line, or past the end: not a position of this feed.
    // Lines of 4 bytes (`s-b\n`).
    assert_eq!(len, 12);
    for since in [1, 2, 3, 5, 7, len - 1, len + 1, u64::MAX] {
        assert_eq!(feed_from(&store, Some(since)).await, all, "from {since}");
    }
    // After each line: the lines after it.
    assert_eq!(
        feed_from(&store, Some(4)).await,
        (vec!["a".to_owned(), "c".to_owned()], len)
    );
    assert_eq!(
        feed_from(&store, Some(8)).await,
        (vec!["c".to_owned()], len)
    );
    assert_eq!(feed_from(&store, Some(len)).await, (vec![], len));
}

#[tokio::test]
async fn file_feed_is_made_by_the_first_creation_and_read_by_a_read_only_store() {
    let base = tempfile::tempdir().unwrap();
    let store = FileStore::open(base.path()).unwrap();
    // A store made before the feed: its sessions are listed, not in it.
    create_sample(&store, "older", 0).await;
    std::fs::remove_file(feed_path(base.path())).unwrap();
    let reader = FileStore::open_read_only(base.path()).unwrap();
    assert_eq!(feed_from(&reader, None).await, (vec![], 0));
    assert_eq!(feed_from(&reader, Some(0)).await, (vec![], 0));
    assert_eq!(feed_from(&reader, Some(9)).await, (vec![], 0));
    assert!(
        !feed_path(base.path()).exists(),
        "a reader made the feed file"
    );
    assert_eq!(reader.sessions().await.unwrap(), vec![id("older")]);
    // A commit that only advances a session adds nothing.
    let older = store.load(&id("older")).await.unwrap().unwrap();
    store
        .commit(&advance(&older, vec![update(1, 1, "x", json!(1))], vec![]))
        .await
        .unwrap();
    assert!(!feed_path(base.path()).exists());
    create_sample(&store, "newer", 0).await;
    assert_eq!(
        feed_from(&reader, Some(0)).await.0,
        vec!["newer".to_owned()]
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(feed_path(base.path()))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}

#[tokio::test]
async fn file_feed_skips_a_line_longer_than_any_it_writes_and_finds_the_end_before_one_cut_short() {
    let base = tempfile::tempdir().unwrap();
    let store = FileStore::open(base.path()).unwrap();
    create_sample(&store, "first", 0).await;
    // A line of a megabyte, ended, and one of 64 KiB, not ended (yet).
    let mut long = vec![b's', b'-'];
    long.extend(std::iter::repeat_n(b'x', 1 << 20));
    long.push(b'\n');
    append_to_feed(base.path(), &long);
    create_sample(&store, "second", 0).await;
    let before_cut = std::fs::metadata(feed_path(base.path())).unwrap().len();
    append_to_feed(base.path(), &vec![b'y'; 1 << 16]);
    assert_eq!(
        feed_from(&store, Some(0)).await,
        (vec!["first".to_owned(), "second".to_owned()], before_cut)
    );
    assert_eq!(feed_from(&store, None).await, (vec![], before_cut));
    // The next creation ends the cut line: it is skipped, whole.
    create_sample(&store, "third", 0).await;
    let len = std::fs::metadata(feed_path(base.path())).unwrap().len();
    assert_eq!(
        feed_from(&store, Some(before_cut)).await,
        (vec!["third".to_owned()], len)
    );
    // A page at a time, past each long line.
    assert_eq!(
        feed_a_line_at_a_time(&store, len).await,
        ["first", "second", "third"]
    );
}
