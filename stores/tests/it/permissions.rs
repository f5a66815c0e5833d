//! Every store created at a fresh path keeps its files to their owner:
//! directories `0700`, files without group or other permissions.

use crate::create_sample;
use harness::session::SessionStore;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Every directory and file under `dir` (and `dir`), with its mode.
fn modes(dir: &Path) -> Vec<(PathBuf, u32, bool)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        out.push((d.clone(), mode(&d), true));
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else {
                out.push((path.clone(), mode(&path), false));
            }
        }
    }
    out
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// `store` (at `root`, made under `base` with missing parents) after a
/// session and a flush: `0700` directories from `base` down, files with no
/// group or other bits.
async fn check(base: &Path, root: &Path, store: &dyn SessionStore) {
    create_sample(store, "private", 3).await;
    store.flush().await.unwrap();
    let all = modes(root);
    assert!(all.iter().any(|(_, _, dir)| !dir), "no files in {all:?}");
    for (path, mode, dir) in all {
        if dir {
            assert_eq!(mode, 0o700, "{}", path.display());
        } else {
            assert_eq!(mode & 0o077, 0, "{} is {mode:o}", path.display());
        }
    }
    // The parents the store created.
    let mut parent = root.parent().unwrap();
    while parent != base {
        assert_eq!(mode(parent), 0o700, "{}", parent.display());
        parent = parent.parent().unwrap();
    }
}

#[cfg(feature = "sled")]
#[tokio::test]
async fn a_new_sled_store_and_its_parents_are_private() {
    let base = tempfile::tempdir().unwrap();
    // The assistant example's default path: `.harness/assistant`.
    let root = base.path().join(".harness").join("assistant");
    let store = harness_stores::SledStore::open(&root).unwrap();
    check(base.path(), &root, &store).await;
}

#[tokio::test]
async fn a_new_file_store_and_its_parents_are_private() {
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("a").join("sessions");
    let store = harness_stores::FileStore::open(&root).unwrap();
    check(base.path(), &root, &store).await;
}

#[tokio::test]
async fn a_new_log_store_and_its_parents_are_private() {
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("a").join("log");
    let store = harness_stores::LogStore::open(&root).unwrap();
    check(base.path(), &root, &store).await;
}

/// Opening a sled store, or sled memory, whose directory also holds other
/// files (a data directory shared with other software, files put there
/// after the database was made) takes group and other permissions away
/// from sled's own files only: `db`, `conf`, `blobs`. The directory itself
/// and everything else in it keep their modes, also names that look like
/// sled's and files behind a link. Before, the open stripped them from the
/// whole tree. (A directory of other files that holds no database yet is
/// refused: `sled_foreign`.)
#[cfg(feature = "sled")]
#[tokio::test]
async fn a_sled_database_opened_among_other_files_changes_only_its_own() {
    use std::os::unix::fs::symlink;
    for kind in ["store", "memory"] {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("shared");
        // The database first, in its own directory; the other files after.
        match kind {
            "store" => drop(harness_stores::SledStore::open(&dir).unwrap()),
            _ => drop(harness_stores::SledMemory::open(&dir).unwrap()),
        }
        wait_unlocked(&dir);
        let outside = base.path().join("outside.txt");
        std::fs::write(&outside, b"elsewhere").unwrap();
        std::fs::create_dir_all(dir.join("site/sub")).unwrap();
        std::fs::create_dir_all(dir.join("conf.d")).unwrap();
        let files: [(&str, u32); 9] = [
            ("notes.txt", 0o644),
            ("site/sub/run.sh", 0o755),
            ("db.bak", 0o640),
            ("database", 0o664),
            ("snap-1.txt", 0o644),
            ("snapshot", 0o644),
            ("blobsy", 0o644),
            ("conf.d/app.conf", 0o644),
            ("config", 0o666),
        ];
        for (name, mode) in files {
            std::fs::write(dir.join(name), b"user data").unwrap();
            set_mode(&dir.join(name), mode);
        }
        for (name, mode) in [("site", 0o755), ("site/sub", 0o750), ("conf.d", 0o755)] {
            set_mode(&dir.join(name), mode);
        }
        set_mode(&outside, 0o644);
        symlink(&outside, dir.join("link")).unwrap();
        set_mode(&dir, 0o755);
        let before: Vec<(PathBuf, u32)> = files
            .iter()
            .map(|(name, _)| *name)
            .chain(["site", "site/sub", "conf.d"])
            .map(|name| dir.join(name))
            .chain([dir.clone(), outside.clone()])
            .map(|path| {
                let m = mode(&path);
                (path, m)
            })
            .collect();

        for name in ["db", "conf"] {
            set_mode(&dir.join(name), 0o644);
        }
        set_mode(&dir.join("blobs"), 0o755);
        match kind {
            "store" => {
                let store = harness_stores::SledStore::open(&dir).unwrap();
                create_sample(&store, "s", 2).await;
                store.flush().await.unwrap();
            }
            _ => drop(harness_stores::SledMemory::open(&dir).unwrap()),
        }

        for (path, was) in before {
            assert_eq!(mode(&path), was, "{kind}: {} changed", path.display());
        }
        for name in ["db", "conf"] {
            let m = mode(&dir.join(name));
            assert_eq!(m & 0o077, 0, "{kind}: {name} is {m:o}");
        }
        let m = mode(&dir.join("blobs"));
        assert_eq!(m & 0o077, 0, "{kind}: blobs is {m:o}");
    }
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Waits until sled's threads let go of the database at `dir` (a moment
/// after its last handle is dropped).
#[cfg(feature = "sled")]
fn wait_unlocked(dir: &std::path::Path) {
    let db = std::fs::File::open(dir.join("db")).unwrap();
    for _ in 0..600 {
        if db.try_lock().is_ok() {
            db.unlock().unwrap();
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("sled still holds {} after 60 s", dir.display());
}
