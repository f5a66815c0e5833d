//! The content-addressed blob store: durable writes through a temporary
//! file, reads checked against the hash, typed errors naming the path.

#![allow(clippy::unwrap_used)]

use std::fs;

use harness_code::blobs::{BlobError, BlobStore};

const HELLO: &str = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";

fn names(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn put_leaves_only_the_blob_behind() {
    let dir = tempfile::tempdir().unwrap();
    let store = BlobStore::open(dir.path().join("a/new/root")).unwrap();
    let hash = store.put(b"hello").unwrap();
    assert_eq!(hash, HELLO);
    assert_eq!(store.put(b"hello").unwrap(), HELLO);
    assert_eq!(names(&store.root().join("sha256/2c")), [HELLO]);
    assert!(names(&store.root().join("tmp")).is_empty());
    assert_eq!(store.get(HELLO).unwrap(), b"hello");
}

#[test]
fn put_replaces_a_blob_of_the_wrong_size() {
    let dir = tempfile::tempdir().unwrap();
    let store = BlobStore::open(dir.path()).unwrap();
    store.put(b"hello").unwrap();
    // What a crash can leave of a write that was not durable: the name
    // without the data.
    let path = store.path(HELLO).unwrap();
    fs::write(&path, b"").unwrap();
    assert!(matches!(store.get(HELLO), Err(BlobError::Corrupt { .. })));
    store.put(b"hello").unwrap();
    assert_eq!(store.get(HELLO).unwrap(), b"hello");
    assert!(names(&store.root().join("tmp")).is_empty());
}

#[test]
fn reads_are_checked_against_the_hash() {
    let dir = tempfile::tempdir().unwrap();
    let store = BlobStore::open(dir.path()).unwrap();
    store.put(b"hello").unwrap();
    fs::write(store.path(HELLO).unwrap(), b"jello").unwrap();
    match store.get(HELLO) {
        Err(BlobError::Corrupt { hash, actual }) => {
            assert_eq!(hash, HELLO);
            assert_ne!(actual, HELLO);
        }
        other => panic!("expected a corrupt blob, got {other:?}"),
    }
    let absent = "0".repeat(64);
    assert!(matches!(store.get(&absent), Err(BlobError::Missing(h)) if h == absent));
    assert!(matches!(
        store.get("not-a-hash"),
        Err(BlobError::InvalidHash(_))
    ));
}

#[test]
fn a_failed_put_names_the_path_and_leaves_no_temporary_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = BlobStore::open(dir.path()).unwrap();
    // A file where the blob's directory should be.
    let shard = store.root().join("sha256/2c");
    fs::write(&shard, b"").unwrap();
    let error = store.put(b"hello").unwrap_err();
    let BlobError::Io { path, .. } = &error else {
        panic!("expected an I/O error, got {error:?}");
    };
    assert!(path.starts_with(&shard), "{path:?}");
    assert!(
        error.to_string().contains(&shard.display().to_string()),
        "{error}"
    );
    assert!(names(&store.root().join("tmp")).is_empty());
}

#[test]
fn sync_fsyncs_what_exists_skips_what_does_not_and_refuses_bad_names() {
    let dir = tempfile::tempdir().unwrap();
    let store = BlobStore::open(dir.path()).unwrap();
    // Written the way the kernel writes: straight into place, no fsync.
    let path = store.path(HELLO).unwrap();
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(&path, b"hello").unwrap();
    let absent = "0".repeat(64);
    store.sync([HELLO, absent.as_str()]).unwrap();
    assert_eq!(store.get(HELLO).unwrap(), b"hello");
    assert!(matches!(
        store.sync(["../../etc/passwd"]),
        Err(BlobError::InvalidHash(_))
    ));
}

#[test]
fn retain_removes_unreferenced_blobs_and_leftover_temporary_files() {
    let dir = tempfile::tempdir().unwrap();
    let store = BlobStore::open(dir.path()).unwrap();
    let kept = store.put(b"hello").unwrap();
    let dropped = store.put(b"bye").unwrap();
    // What a crash in the middle of a put or of a kernel snapshot leaves.
    let shard = store.root().join("sha256/2c");
    fs::write(shard.join(format!(".{HELLO}.0123.tmp")), b"he").unwrap();
    fs::write(store.root().join("tmp/snapshot"), b"by").unwrap();
    let removed = store.retain(&[kept.clone()].into()).unwrap();
    assert_eq!(removed, 1);
    assert!(!store.contains(&dropped));
    assert_eq!(names(&shard), [HELLO]);
    assert!(names(&store.root().join("tmp")).is_empty());
}

#[test]
fn put_replaces_a_blob_corrupted_at_the_same_size() {
    let dir = tempfile::tempdir().unwrap();
    let store = BlobStore::open(dir.path()).unwrap();
    store.put(b"hello").unwrap();
    let path = store.path(HELLO).unwrap();
    for corrupt in [&b"jello"[..], b"hellO", b"\0\0\0\0\0"] {
        fs::write(&path, corrupt).unwrap();
        assert!(matches!(store.get(HELLO), Err(BlobError::Corrupt { .. })));
        assert_eq!(store.put(b"hello").unwrap(), HELLO);
        assert_eq!(store.get(HELLO).unwrap(), b"hello");
    }
}

/// A FIFO made with `mkfifo`: what a cell can put where a file is read.
#[cfg(unix)]
fn fifo(path: &std::path::Path) {
    let made = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(made.success());
}

/// A cell can replace a blob or the notebook's file with a FIFO or a link:
/// reading one is never a wait for a writer that never comes, and what is
/// not a regular file of the store is no blob.
#[cfg(unix)]
#[test]
fn fifos_and_links_in_place_of_blobs_are_no_blobs_and_never_block() {
    let dir = tempfile::tempdir().unwrap();
    let store = BlobStore::open(dir.path()).unwrap();
    let elsewhere = dir.path().join("elsewhere");
    fs::write(&elsewhere, b"hello").unwrap();
    for plant in ["fifo", "link"] {
        let hash = store.put(b"hello").unwrap();
        let path = store.path(&hash).unwrap();
        fs::remove_file(&path).unwrap();
        match plant {
            "fifo" => fifo(&path),
            _ => std::os::unix::fs::symlink(&elsewhere, &path).unwrap(),
        }
        let started = std::time::Instant::now();
        assert!(!store.contains(&hash), "{plant}");
        assert!(
            matches!(store.get(&hash), Err(BlobError::Missing(_))),
            "{plant}"
        );
        store.sync([hash.as_str()]).unwrap();
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        // A put writes the blob back in its place.
        assert_eq!(store.put(b"hello").unwrap(), hash);
        assert_eq!(store.get(&hash).unwrap(), b"hello");
    }
    // The notebook's own file as a FIFO: an error, at once.
    let notebook = dir.path().join("nb");
    fs::create_dir(&notebook).unwrap();
    fifo(&notebook.join("session.json"));
    let opened = harness_code::notebook::Notebook::open(&notebook, Default::default());
    let error = opened.err().unwrap().to_string();
    assert!(error.contains("not a regular file"), "{error}");
}

/// `retain` deletes only in the store's own directories: a link a cell put
/// in place of `tmp` or of a shard is not walked into.
#[cfg(unix)]
#[test]
fn retain_deletes_nothing_through_links_in_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = BlobStore::open(dir.path().join("blobs")).unwrap();
    let victim = dir.path().join("victim");
    fs::create_dir(&victim).unwrap();
    let precious = [
        "precious.txt".to_string(),
        format!(".{HELLO}.0123.tmp"),
        HELLO.to_string(),
    ];
    for name in &precious {
        fs::write(victim.join(name), b"mine").unwrap();
    }
    fs::remove_dir(store.root().join("tmp")).unwrap();
    std::os::unix::fs::symlink(&victim, store.root().join("tmp")).unwrap();
    std::os::unix::fs::symlink(&victim, store.root().join("sha256/2c")).unwrap();
    let kept = store.put(b"bye").unwrap();
    assert_eq!(store.list().unwrap(), [kept.clone()].into());
    assert_eq!(store.retain(&[].into()).unwrap(), 1);
    let mut left = names(&victim);
    left.sort();
    let mut want = precious.to_vec();
    want.sort();
    assert_eq!(left, want);
}

/// `retain` empties `tmp/` through the directory it opened: a process that
/// outlives the kernel and swaps `tmp/` for a link to another directory
/// while `retain` is emptying it (here, as soon as the first leftover is
/// gone) sends no deletion there.
#[cfg(unix)]
#[test]
fn retain_deletes_nothing_through_a_tmp_swapped_for_a_link_while_it_is_emptied() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    const LEFTOVERS: usize = 5_000;
    // Tries until one swap lands mid-walk (a loaded machine may not run the
    // swapper before `retain` is done), every try checking the victim.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let (mut swapped_mid_walk, mut tries) = (0, 0);
    while swapped_mid_walk == 0 && std::time::Instant::now() < deadline {
        tries += 1;
        let dir = tempfile::tempdir().unwrap();
        let store = BlobStore::open(dir.path().join("blobs")).unwrap();
        let tmp = store.root().join("tmp");
        let victim = dir.path().join("victim");
        fs::create_dir(&victim).unwrap();
        for i in 0..LEFTOVERS {
            let name = format!("leftover-{i}");
            fs::write(tmp.join(&name), b"kernel").unwrap();
            fs::write(victim.join(&name), b"mine").unwrap();
        }
        // The leftover `retain` lists, and so deletes, first.
        let first = fs::read_dir(&tmp).unwrap().next().unwrap().unwrap().path();
        let moved = store.root().join("tmp-moved");
        let stop = Arc::new(AtomicBool::new(false));
        let left_at_swap = Arc::new(AtomicUsize::new(0));
        let swapper = {
            let (tmp, victim, moved) = (tmp.clone(), victim.clone(), moved.clone());
            let (stop, left_at_swap) = (stop.clone(), left_at_swap.clone());
            std::thread::spawn(move || {
                while fs::symlink_metadata(&first).is_ok() {
                    if stop.load(Ordering::Relaxed) {
                        return false;
                    }
                    std::hint::spin_loop();
                }
                fs::rename(&tmp, &moved).unwrap();
                std::os::unix::fs::symlink(&victim, &tmp).unwrap();
                left_at_swap.store(fs::read_dir(&moved).unwrap().count(), Ordering::Relaxed);
                true
            })
        };
        store.retain(&Default::default()).unwrap();
        stop.store(true, Ordering::Relaxed);
        let swapped = swapper.join().unwrap();
        assert_eq!(
            names(&victim).len(),
            LEFTOVERS,
            "retain deleted files through the link"
        );
        if swapped && left_at_swap.load(Ordering::Relaxed) > 0 {
            swapped_mid_walk += 1;
        }
    }
    assert!(
        swapped_mid_walk > 0,
        "in {tries} tries over 60 s, the swap never happened while retain was emptying tmp/"
    );
}

/// A store whose directory was replaced by a link after it was opened (a
/// cell can do that to a notebook's `blobs`) is not walked into: `retain`
/// fails, and deletes nothing where the link points.
#[cfg(unix)]
#[test]
fn retain_does_not_walk_a_store_directory_swapped_for_a_link() {
    let dir = tempfile::tempdir().unwrap();
    let store = BlobStore::open(dir.path().join("blobs")).unwrap();
    let victim = dir.path().join("victim");
    fs::create_dir_all(victim.join("tmp")).unwrap();
    fs::create_dir_all(victim.join("sha256/2c")).unwrap();
    fs::write(victim.join("tmp/notes.txt"), b"mine").unwrap();
    fs::write(victim.join("sha256/2c").join(HELLO), b"mine").unwrap();
    fs::rename(store.root(), dir.path().join("blobs-moved")).unwrap();
    std::os::unix::fs::symlink(&victim, store.root()).unwrap();
    assert!(store.retain(&[].into()).is_err());
    assert_eq!(names(&victim.join("tmp")), ["notes.txt"]);
    assert_eq!(names(&victim.join("sha256/2c")), [HELLO]);
}
