//! A sled database another program wrote is refused, never read as a store
//! without sessions, and left as it was; the databases harness wrote (of
//! this version, of earlier ones, shared with an application's trees, of
//! long-term memory) still open.

use crate::{create_sample, id, reopen};
use harness::memory::{Memory, MemoryError, Namespace};
use harness::session::{SessionStore, StoreError};
use harness_stores::sled::{Config, Db};
use harness_stores::{ReadOnlyError, SledMemory, SledStore};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The segment size [`SledStore`] documents for the databases it creates.
const SEGMENT_SIZE: usize = 128 * 1024;

/// Every file and directory under `dir` with its permission bits, and each
/// file's bytes.
fn contents(dir: &Path) -> BTreeMap<PathBuf, (u32, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::metadata(&path).unwrap();
            let bytes = if meta.is_dir() {
                todo.push(path.clone());
                Vec::new()
            } else {
                std::fs::read(&path).unwrap()
            };
            out.insert(path, (mode(&meta), bytes));
        }
    }
    out
}

#[cfg(unix)]
fn mode(meta: &std::fs::Metadata) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    meta.permissions().mode() & 0o7777
}

#[cfg(not(unix))]
fn mode(_: &std::fs::Metadata) -> u32 {
    0
}

/// Waits until no handle holds the database at `path` (sled's threads let
/// go of its lock a moment after the last handle is dropped).
fn closed(path: &Path) {
    let db = std::fs::File::open(path.join("db")).unwrap();
    for _ in 0..600 {
        if db.try_lock().is_ok() {
            db.unlock().unwrap();
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("sled still holds the lock of {} after 60 s", path.display());
}

/// A database of another program at `path`, as `fill` leaves it, closed:
/// sled's own segment size, as a program using sled's defaults has it.
fn foreign_db(path: &Path, fill: impl FnOnce(&Db)) {
    let db = Config::new()
        .path(path)
        .flush_every_ms(None)
        .open()
        .unwrap();
    fill(&db);
    db.flush().unwrap();
    drop(db);
    closed(path);
}

/// A tree's keys and values, in order.
type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// Every tree of the database at `path` (sled's default one too) with its
/// keys and values, read by sled itself.
fn trees(path: &Path) -> BTreeMap<Vec<u8>, Entries> {
    // sled's `conf`: `segment_size: N` on a line, then a binary checksum.
    let conf = std::fs::read(path.join("conf")).unwrap();
    let segment_size: usize = String::from_utf8_lossy(&conf)
        .lines()
        .find_map(|l| l.strip_prefix("segment_size:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap();
    let db = reopen(|| {
        Config::new()
            .path(path)
            .segment_size(segment_size)
            .flush_every_ms(None)
            .open()
    });
    let out = db
        .tree_names()
        .into_iter()
        .map(|name| {
            let tree = db.open_tree(&name).unwrap();
            let entries = tree
                .iter()
                .map(|e| {
                    let (k, v) = e.unwrap();
                    (k.to_vec(), v.to_vec())
                })
                .collect();
            (name.to_vec(), entries)
        })
        .collect();
    drop(db);
    closed(path);
    out
}

/// Copies the files of the database at `from` to `to`.
fn copy_db(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

/// `SledStore::open`'s refusal of `path`: its message, checked to name the
/// path and what the database holds.
fn store_refusal(path: &Path, holds: &[&str]) -> String {
    let e = SledStore::open(path).expect_err("another program's database opened");
    let StoreError::NotAStore { path: at, found } = &e else {
        panic!("not the refusal of another program's database: {e:?}");
    };
    let shown = e.to_string();
    assert_eq!(at, path);
    assert!(
        shown.starts_with(&format!(
            "{} is not a harness session store: another program's sled database",
            path.display()
        )),
        "{shown}"
    );
    assert!(found.contains("none of harness's trees"), "{shown}");
    for what in holds {
        assert!(found.contains(what), "{what} not named: {shown}");
    }
    closed(path);
    shown
}

/// `SledStore::open_read_only`'s refusal of `path`, checked like
/// [`store_refusal`].
fn read_only_refusal(path: &Path, holds: &[&str]) {
    match SledStore::open_read_only(path) {
        Err(ReadOnlyError::NotAStore { path: at, why }) => {
            assert_eq!(at, path);
            assert!(why.starts_with("another program's sled database"), "{why}");
            for what in holds {
                assert!(why.contains(what), "{what} not named: {why}");
            }
        }
        Err(e) => panic!("not the refusal of another program's database: {e:?}"),
        Ok(_) => panic!("another program's database opened read-only"),
    }
}

/// `SledMemory::open`'s refusal of `path`, checked like [`store_refusal`].
fn memory_refusal(path: &Path, holds: &[&str]) {
    let e = SledMemory::open(path).expect_err("another program's database opened as memory");
    let shown = e.to_string();
    assert!(matches!(e, MemoryError::NotAStore { .. }), "{e:?}");
    assert!(
        shown.starts_with(&format!(
            "{} is not a harness memory: another program's sled database",
            path.display()
        )),
        "{shown}"
    );
    for what in holds {
        assert!(shown.contains(what), "{what} not named: {shown}");
    }
    closed(path);
}

/// Databases of another program: trees of its own, keys in sled's default
/// tree only, one empty tree of its own, many trees. Each is refused by
/// every open (the session store's, read-only or not, and the memory's),
/// naming what it holds, and keeps its trees and keys. Harness writes
/// nothing: the read-only open changes no byte; the writer's open leaves
/// only what sled's own open does (its first after the program closed the
/// database: zeros and a `snap.*` file), and, the database settled by it,
/// no open changes a byte nor a permission.
#[test]
fn another_programs_database_is_refused_and_left_as_it_was() {
    let base = tempfile::tempdir().unwrap();
    type Fill = Box<dyn Fn(&Db)>;
    let cases: Vec<(&str, Fill, Vec<&str>)> = vec![
        (
            "trees",
            Box::new(|db: &Db| {
                let users = db.open_tree("users").unwrap();
                for i in 0..200u32 {
                    users.insert(i.to_be_bytes(), vec![b'u'; 64]).unwrap();
                }
                db.open_tree("orders").unwrap();
            }),
            vec!["the trees `orders`, `users`"],
        ),
        (
            "default-tree",
            Box::new(|db: &Db| {
                for i in 0..3u8 {
                    db.insert([b'k', i], &b"value"[..]).unwrap();
                }
            }),
            vec!["3 keys in sled's default tree"],
        ),
        (
            "trees-and-default-tree",
            Box::new(|db: &Db| {
                db.open_tree("settings")
                    .unwrap()
                    .insert("theme", "dark")
                    .unwrap();
                db.insert("version", "7").unwrap();
            }),
            vec!["the tree `settings` and 1 key in sled's default tree"],
        ),
        (
            "empty-tree",
            Box::new(|db: &Db| {
                db.open_tree("cache").unwrap();
            }),
            vec!["the tree `cache`"],
        ),
        (
            "many-trees",
            Box::new(|db: &Db| {
                for i in 0..11 {
                    db.open_tree(format!("t{i:02}")).unwrap();
                }
            }),
            vec!["`t00`", "`t07`", " and 3 more"],
        ),
    ];
    for (name, fill, holds) in cases {
        let path = base.path().join(name);
        foreign_db(&path, fill);
        let pristine = contents(&path);
        let copy = base.path().join(format!("{name}.copy"));
        copy_db(&path, &copy);

        // Read-only: a private copy is opened, the database only read.
        read_only_refusal(&path, &holds);
        assert_eq!(
            contents(&path),
            pristine,
            "{name}: the read-only open wrote"
        );

        // The writer's: sled opens the database to list its trees; its
        // recovery may zero freed space and write a snapshot, but no tree
        // or key changes, and harness adds none of its trees.
        let shown = store_refusal(&path, &holds);
        assert!(shown.contains("with_config"), "{name}: {shown}");
        let expected = trees(&copy);
        assert_eq!(trees(&path), expected, "{name}: its trees or keys changed");
        // Permissions as they were (sled may replace its `snap.*` file).
        for (file, (was, _)) in &pristine {
            let Ok(now) = std::fs::metadata(file) else {
                continue;
            };
            assert_eq!(mode(&now), *was, "{name}: {file:?}");
        }

        // Settled by sled's open: no further open writes a byte.
        let settled = contents(&path);
        store_refusal(&path, &holds);
        assert_eq!(contents(&path), settled, "{name}: the writer's open wrote");
        memory_refusal(&path, &holds);
        assert_eq!(contents(&path), settled, "{name}: the memory's open wrote");
        read_only_refusal(&path, &holds);
        assert_eq!(contents(&path), settled, "{name}: the read-only open wrote");
        assert_eq!(trees(&path), expected, "{name}: its trees or keys changed");
    }
}

/// A store's records as the current code writes them, tree by tree, and
/// the session they hold, for building the databases earlier versions left.
async fn current_records() -> (BTreeMap<&'static str, Entries>, harness_stores::MemoryStore) {
    let store = SledStore::temporary().unwrap();
    create_sample(&store, "kept", 3).await;
    let mut out = BTreeMap::new();
    for name in ["heads", "checkpoints", "snapshots"] {
        let tree = store.db().open_tree(name).unwrap();
        let entries = tree
            .iter()
            .map(|e| {
                let (k, v) = e.unwrap();
                (k.to_vec(), v.to_vec())
            })
            .collect();
        out.insert(name, entries);
    }
    let expected = harness_stores::MemoryStore::new();
    create_sample(&expected, "kept", 3).await;
    (out, expected)
}

/// The databases earlier versions of the store left, without the trees
/// later ones added (the first wrote `heads` and `checkpoints`, snapshots
/// among the updates; then `snapshots`; `created` last), still open,
/// read-only or not, and show their session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layouts_of_earlier_versions_still_open() {
    let base = tempfile::tempdir().unwrap();
    let (records, expected) = current_records().await;
    assert_eq!(records["heads"].len(), 1);
    let layouts: [(&str, &[&str]); 2] = [
        ("first", &["heads", "checkpoints"]),
        ("snapshots", &["heads", "checkpoints", "snapshots"]),
    ];
    for (name, kept) in layouts {
        let path = base.path().join(name);
        let db = Config::new()
            .path(&path)
            .segment_size(SEGMENT_SIZE)
            .flush_every_ms(None)
            .open()
            .unwrap();
        for (tree, entries) in &records {
            // A layout without `snapshots` kept them with the updates.
            let into = if kept.contains(tree) {
                *tree
            } else {
                "checkpoints"
            };
            let into = db.open_tree(into).unwrap();
            for (k, v) in entries {
                into.insert(k.as_slice(), v.as_slice()).unwrap();
            }
        }
        let names: Vec<Vec<u8>> = db.tree_names().iter().map(|n| n.to_vec()).collect();
        assert_eq!(names.len(), kept.len() + 1, "{name}: {names:?}");
        db.flush().unwrap();
        drop(db);
        closed(&path);

        let session = id("kept");
        let want = (
            expected.load(&session).await.unwrap(),
            expected.checkpoints(&session, 0).await.unwrap(),
        );
        let read_only = SledStore::open_read_only(&path).unwrap();
        assert_eq!(read_only.sessions().await.unwrap(), vec![session.clone()]);
        assert_eq!(
            (
                read_only.load(&session).await.unwrap(),
                read_only.checkpoints(&session, 0).await.unwrap()
            ),
            want,
            "{name}"
        );
        drop(read_only);
        let store = reopen(|| SledStore::open(&path));
        assert_eq!(
            (
                store.load(&session).await.unwrap(),
                store.checkpoints(&session, 0).await.unwrap()
            ),
            want,
            "{name}"
        );
        create_sample(&store, "new", 1).await;
        assert_eq!(store.sessions().await.unwrap().len(), 2, "{name}");
    }
}

/// A store of the current code, with trees and keys of the application's
/// own beside harness's (through `SledStore::db`), is still harness's: it
/// reopens, read-only or not, with its sessions and the application's data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_with_an_applications_trees_beside_harnesss_still_opens() {
    let base = tempfile::tempdir().unwrap();
    let path = base.path().join("db");
    let store = SledStore::open(&path).unwrap();
    create_sample(&store, "s1", 2).await;
    let app = store.db().open_tree("app").unwrap();
    app.insert("user", "ada").unwrap();
    store.db().insert("mine", "too").unwrap();
    store.flush().await.unwrap();
    drop((app, store));
    closed(&path);

    let read_only = SledStore::open_read_only(&path).unwrap();
    assert_eq!(read_only.sessions().await.unwrap(), vec![id("s1")]);
    drop(read_only);
    let store = reopen(|| SledStore::open(&path));
    assert_eq!(store.sessions().await.unwrap(), vec![id("s1")]);
    let app = store.db().open_tree("app").unwrap();
    assert_eq!(app.get("user").unwrap().as_deref(), Some(&b"ada"[..]));
    assert_eq!(
        store.db().get("mine").unwrap().as_deref(),
        Some(&b"too"[..])
    );
    create_sample(&store, "s2", 0).await;
}

/// A database of long-term memory is harness's: the session store opens
/// it (its segment size is sled's own), and the memory opens a session
/// store's database (128 KiB segments); each keeps the other's data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_and_sessions_open_each_others_databases() {
    let base = tempfile::tempdir().unwrap();
    let users = Namespace::new(["users"]).unwrap();

    let memory_db = base.path().join("memory");
    let memory = Memory::new(SledMemory::open(&memory_db).unwrap());
    memory
        .put(&users, "language", json!({"value": "Rust"}))
        .await
        .unwrap();
    drop(memory);
    closed(&memory_db);
    let store = reopen(|| SledStore::open(&memory_db));
    assert!(store.sessions().await.unwrap().is_empty());
    create_sample(&store, "s", 0).await;
    drop(store);
    closed(&memory_db);
    assert!(SledStore::open_read_only(&memory_db).is_ok());
    let memory = Memory::new(reopen(|| SledMemory::open(&memory_db)));
    let item = memory.get(&users, "language").await.unwrap().unwrap();
    assert_eq!(item.value, json!({"value": "Rust"}));
    drop(memory);

    let store_db = base.path().join("store");
    let store = SledStore::open(&store_db).unwrap();
    create_sample(&store, "s", 1).await;
    drop(store);
    closed(&store_db);
    let memory = Memory::new(reopen(|| SledMemory::open(&store_db)));
    memory
        .put(&users, "editor", json!({"value": "helix"}))
        .await
        .unwrap();
    drop(memory);
    closed(&store_db);
    let store = reopen(|| SledStore::open(&store_db));
    assert_eq!(store.sessions().await.unwrap(), vec![id("s")]);
}

/// A new database, and an empty one another program left (no tree but
/// sled's default, nothing in it), are used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_or_empty_database_is_used() {
    let base = tempfile::tempdir().unwrap();
    let new = base.path().join("new").join("db");
    let store = SledStore::open(&new).unwrap();
    create_sample(&store, "s", 0).await;
    drop(store);
    closed(&new);
    let store = reopen(|| SledStore::open(&new));
    assert_eq!(store.sessions().await.unwrap(), vec![id("s")]);

    let empty = base.path().join("empty");
    foreign_db(&empty, |_| {});
    let read_only = SledStore::open_read_only(&empty).unwrap();
    assert!(read_only.sessions().await.unwrap().is_empty());
    drop(read_only);
    let store = reopen(|| SledStore::open(&empty));
    create_sample(&store, "s", 0).await;
    assert_eq!(store.sessions().await.unwrap(), vec![id("s")]);

    let empty_memory = base.path().join("empty-memory");
    foreign_db(&empty_memory, |_| {});
    let memory = Memory::new(reopen(|| SledMemory::open(&empty_memory)));
    let users = Namespace::new(["users"]).unwrap();
    memory.put(&users, "k", json!({"v": 1})).await.unwrap();
}

/// A directory that holds no sled database but other things (a project's
/// files, a `LogStore`'s, a `FileStore`'s, a sub-directory): every open
/// refuses it, naming what it holds, and creates nothing there (sled
/// would have added its files among them). An empty directory, one with
/// hidden entries only, a volume's root (`lost+found`) and a path that
/// does not exist yet are used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_without_a_database_is_refused_unless_empty() {
    let base = tempfile::tempdir().unwrap();
    let notes = base.path().join("notes");
    std::fs::create_dir(&notes).unwrap();
    std::fs::write(notes.join("notes.txt"), "not a store").unwrap();
    std::fs::write(notes.join("db.sqlite"), "not sled's").unwrap();
    let many = base.path().join("many");
    std::fs::create_dir(&many).unwrap();
    for i in 0..12 {
        std::fs::write(many.join(format!("f{i:02}")), "x").unwrap();
    }
    let nested = base.path().join("nested");
    std::fs::create_dir_all(nested.join("src")).unwrap();
    let log = base.path().join("log");
    let store = harness_stores::LogStore::open(&log).unwrap();
    create_sample(&store, "s", 1).await;
    drop(store);
    let files = base.path().join("files");
    let store = harness_stores::FileStore::open(&files).unwrap();
    create_sample(&store, "s", 1).await;
    drop(store);

    for (dir, holds) in [
        (
            &notes,
            &[
                "a directory that is not a sled database",
                "`db.sqlite`, `notes.txt`",
            ][..],
        ),
        (&many, &["`f00`", "`f07`", "and 4 more"][..]),
        (&nested, &["`src`"][..]),
        (&log, &["`LogStore`", "LogStore::open"][..]),
        (&files, &["`FileStore`", "FileStore::open"][..]),
    ] {
        let before = contents(dir);
        let e = SledStore::open(dir).expect_err("a directory of other files opened");
        let shown = e.to_string();
        let StoreError::NotAStore { path, found } = e else {
            panic!("{}: not refused as no store: {shown}", dir.display());
        };
        assert_eq!(&path, dir);
        assert!(
            shown.starts_with(&format!("{} is not a harness session store", dir.display())),
            "{shown}"
        );
        assert!(found.contains("Nothing was written there"), "{shown}");
        for what in holds {
            assert!(found.contains(what), "{what} not named: {shown}");
        }
        assert_eq!(
            contents(dir),
            before,
            "{}: the open changed it",
            dir.display()
        );

        let e = SledMemory::open(dir).expect_err("a directory of other files opened as memory");
        let shown = e.to_string();
        let MemoryError::NotAStore { path, found } = e else {
            panic!("{}: not refused as no memory: {shown}", dir.display());
        };
        assert_eq!(&path, dir);
        for what in holds {
            assert!(found.contains(what), "{what} not named: {shown}");
        }
        assert_eq!(
            contents(dir),
            before,
            "{}: the memory changed it",
            dir.display()
        );

        assert!(
            matches!(
                SledStore::open_read_only(dir),
                Err(ReadOnlyError::NotAStore { .. })
            ),
            "{}",
            dir.display()
        );
        assert_eq!(
            contents(dir),
            before,
            "{}: the reader changed it",
            dir.display()
        );
    }
    // The log and file stores still open as what they are.
    let store = harness_stores::LogStore::open(&log).unwrap();
    assert_eq!(store.sessions().await.unwrap(), vec![id("s")]);
    let store = harness_stores::FileStore::open(&files).unwrap();
    assert_eq!(store.sessions().await.unwrap(), vec![id("s")]);

    let empty = base.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let hidden = base.path().join("hidden");
    std::fs::create_dir(&hidden).unwrap();
    std::fs::write(hidden.join(".gitkeep"), "").unwrap();
    // The root of a volume, as a container mounts it.
    let volume = base.path().join("volume");
    std::fs::create_dir_all(volume.join("lost+found")).unwrap();
    for dir in [&empty, &hidden, &volume, &base.path().join("not-yet")] {
        let store = SledStore::open(dir).unwrap();
        create_sample(&store, "s", 0).await;
        drop(store);
        closed(dir);
        let store = reopen(|| SledStore::open(dir));
        assert_eq!(store.sessions().await.unwrap(), vec![id("s")]);
        drop(store);
        closed(dir);
    }
    assert_eq!(std::fs::read(hidden.join(".gitkeep")).unwrap(), b"");
    let memory_dir = base.path().join("memory-empty");
    std::fs::create_dir(&memory_dir).unwrap();
    let memory = Memory::new(SledMemory::open(&memory_dir).unwrap());
    memory
        .put(&Namespace::new(["users"]).unwrap(), "k", json!({"v": 1}))
        .await
        .unwrap();
}
