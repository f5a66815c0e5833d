//! `harness run` and a link at its notebook directory (needs `python3`):
//! the directory is under the kernel's working directory, so a cell can
//! replace it (or `.harness`, `.harness/code` above it) with a link to
//! somewhere else. The run refuses, and writes nothing there.

#![cfg(unix)]

use crate::support::workdir;
use std::process::Command;

const SCRIPT: &str = "# %%\nx = 1\n\n# %%\ny = x + 1\n";

#[test]
fn a_link_at_the_notebook_directory_or_above_it_is_refused_and_nothing_is_written_there() {
    // (where the link is, relative to the script's directory; extra args)
    let cases: [(&str, &[&str]); 4] = [
        (".harness/code/s", &[]),
        (".harness/code", &[]),
        (".harness", &[]),
        ("chosen", &["--state", "chosen"]),
    ];
    for (link, extra) in cases {
        let dir = workdir("run-state-links");
        std::fs::write(dir.join("s.py"), SCRIPT).unwrap();
        let elsewhere = dir.join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        let at = dir.join(link);
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &at).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_harness"))
            .current_dir(&dir)
            .args(["run", "--quiet"])
            .args(extra)
            .arg("s.py")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{link}: {stderr}");
        assert!(stderr.contains("symbolic link"), "{link}: {stderr}");
        let written: Vec<_> = std::fs::read_dir(&elsewhere)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(
            written.is_empty(),
            "{link}: wrote {written:?} through the link"
        );
    }
}
