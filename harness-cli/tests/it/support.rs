//! Helpers shared by the test modules.

#![allow(dead_code)] // each module uses what it needs

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A fresh, empty directory `name` under the target's temporary directory.
pub(crate) fn workdir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `harness ARGS…` run in `cwd`, its output collected.
pub(crate) fn harness_in(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_harness"))
        .current_dir(cwd)
        .args(args)
        .output()
        .unwrap()
}
