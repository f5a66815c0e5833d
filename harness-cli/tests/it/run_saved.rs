//! `harness run` and `harness analyze --trace` on a notebook file a cell
//! damaged (needs `python3`): the state directory is under the kernel's
//! working directory, so a cell can rewrite `session.json`. A damaged or
//! oversized file is refused with a message naming it (exit status 2),
//! never a panic, and is left as it was.

use crate::support::{harness_in, workdir};
use serde_json::{Value, json};

const SCRIPT: &str = "# %%\na = 1\n\n# %%\nb = a + 1\n\n# %%\nc = a + b\nprint(c)\n";

/// A change a cell could make to the saved notebook.
type Damage = fn(&mut Value);

/// Ways a cell could damage the stored graph: name, change.
fn damages() -> Vec<(&'static str, Damage)> {
    fn cells(v: &mut Value) -> &mut Value {
        &mut v["graph"]["graph"]
    }
    vec![
        ("an id out of range", |v| {
            cells(v)["nodes"][1]["id"] = json!(1000)
        }),
        ("a duplicate id", |v| cells(v)["nodes"][2]["id"] = json!(0)),
        ("a hole", |v| cells(v)["node_holes"] = json!([3])),
        ("an edge backwards", |v| {
            let dependency = json!({"names": ["c"], "explicit": true, "conservative": false});
            cells(v)["edges"]
                .as_array_mut()
                .unwrap()
                .push(json!([2, 0, dependency]));
        }),
        ("a record of a cell that is not there", |v| {
            let record = v["records"]["0"].clone();
            v["records"]["40"] = record;
        }),
    ]
}

#[test]
fn a_damaged_notebook_is_refused_by_name_and_left_as_it_was() {
    let dir = workdir("run-saved-damaged");
    std::fs::write(dir.join("s.py"), SCRIPT).unwrap();
    let out = harness_in(&dir, &["run", "--quiet", "s.py"]);
    assert_eq!(out.status.code(), Some(0));
    let path = dir.join(".harness/code/s/session.json");
    let good: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    for (name, damage) in damages() {
        let mut damaged = good.clone();
        damage(&mut damaged);
        let bytes = serde_json::to_vec(&damaged).unwrap();
        std::fs::write(&path, &bytes).unwrap();
        for args in [
            &["run", "--quiet", "s.py"][..],
            &["analyze", "--trace", "s.py"][..],
        ] {
            let out = harness_in(&dir, args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{name}, {args:?}: {stderr}");
            assert!(
                stderr.contains("session.json"),
                "{name}, {args:?}: {stderr}"
            );
            assert!(!stderr.contains("panicked"), "{name}, {args:?}: {stderr}");
            assert_eq!(
                std::fs::read(&path).unwrap(),
                bytes,
                "{name}: the file changed"
            );
        }
    }
}

#[test]
fn a_notebook_file_over_the_limit_is_refused_unread() {
    let dir = workdir("run-saved-oversized");
    std::fs::write(dir.join("s.py"), SCRIPT).unwrap();
    let out = harness_in(&dir, &["run", "--quiet", "s.py"]);
    assert_eq!(out.status.code(), Some(0));
    let path = dir.join(".harness/code/s/session.json");
    // Sparse: nothing is written to disk.
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(1 << 30).unwrap();
    drop(file);
    for args in [
        &["run", "--quiet", "s.py"][..],
        &["analyze", "--trace", "s.py"][..],
    ] {
        let started = std::time::Instant::now();
        let out = harness_in(&dir, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("session.json") && stderr.contains("268435456"),
            "{args:?}: {stderr}"
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
    }
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 1 << 30);
}
