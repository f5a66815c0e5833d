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
