//! The notebook file on disk (`DIR/session.json`) as something a cell can
//! read and write: what it holds (no registered secret; readable by its
//! owner alone), what opening a damaged or oversized one does (a typed
//! error naming the file, never a panic, the file left as it was), and
//! what a save will not replace.

#![allow(clippy::unwrap_used)]

use std::path::Path;

use crate::support::{config, user};
use harness::SessionId;
use harness::session::SessionStore;
use harness_code::CellId;
use harness_code::notebook::{MAX_NOTEBOOK_BYTES, Notebook, NotebookError};
use harness_stores::MemoryStore;
use serde_json::{Value, json};

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle.as_bytes())
}

/// Registered with `harness::secrets` by the test that uses it; the cells
/// build it from two halves, so that their code does not hold it.
const SECRET: &str = "hx-saved-notebook-secret-7f3a91c2";
const SECRET_IN_PYTHON: &str = "'hx-saved-notebook-' + 'secret-7f3a91c2'";

#[cfg(unix)]
#[tokio::test]
async fn a_saved_notebook_holds_no_registered_secret_and_only_its_owner_reads_it() {
    use std::os::unix::fs::PermissionsExt;

    assert!(harness::secrets::register(SECRET));
    let dir = tempfile::tempdir().unwrap();
    let mut notebook = Notebook::create(dir.path(), config()).unwrap();
    let cells = [
        format!("token = {SECRET_IN_PYTHON}"),
        // stdout, stderr, the last expression's repr, a value's repr.
        "print('the token is', token)".to_owned(),
        "import sys\nprint('on stderr:', token, file=sys.stderr)".to_owned(),
        "token".to_owned(),
        "holder = {'key': token, 'n': 1}".to_owned(),
        "print(token * 2)".to_owned(),
        // An exception's text and its traceback.
        "def check(t):\n    raise ValueError('bad token ' + t)\ncheck(token)".to_owned(),
    ];
    for source in &cells {
        notebook.execute(source.as_str(), user()).await.unwrap();
    }
    let failed = notebook.record(CellId::new(6)).unwrap();
    assert!(
        failed.error.as_deref().unwrap().contains(SECRET),
        "the test needs the secret in the error: {:?}",
        failed.error
    );
    notebook.save().unwrap();
    let path = dir.path().join("session.json");
    let bytes = std::fs::read(&path).unwrap();
    assert!(
        !contains(&bytes, SECRET),
        "the saved notebook holds the secret"
    );
    assert!(contains(&bytes, harness::secrets::REDACTED));
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "mode {mode:o}");

    // Saved again over the file: still private.
    notebook.save().unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "mode {mode:o}");

    // The store's copy.
    let store = MemoryStore::new();
    let id = SessionId::from("saved-with-a-secret");
    notebook.save_to_store(&store, &id).await.unwrap();
    let value = harness::session::load_value(&store, harness_code::notebook::STORE_OWNER, &id)
        .await
        .unwrap()
        .unwrap();
    assert!(
        !value.to_string().contains(SECRET),
        "the store holds the secret"
    );
    let checkpoints = store.checkpoints(&id, 0).await.unwrap();
    assert!(!format!("{checkpoints:?}").contains(SECRET));
    notebook.shutdown().await;

    // What was saved still opens.
    let reopened = Notebook::open(dir.path(), config()).unwrap();
    assert_eq!(reopened.graph().len(), cells.len());
}

/// A notebook of three linked cells saved in `dir` (no kernel needed);
/// returns the saved JSON.
fn saved_notebook(dir: &Path) -> Value {
    let mut notebook = Notebook::create(dir, config()).unwrap();
    for source in ["a = 1", "b = a + 1", "c = a + b"] {
        notebook.add_cell(source, user()).unwrap();
    }
    notebook.save().unwrap();
    serde_json::from_slice(&std::fs::read(dir.join("session.json")).unwrap()).unwrap()
}

/// Each way of damaging the stored graph: what it is, what the error
/// says, the damaged notebook.
fn corruptions(good: &Value) -> Vec<(&'static str, &'static str, Value)> {
    let mut cases = Vec::new();
    let mut case = |name: &'static str, says: &'static str, change: &dyn Fn(&mut Value)| {
        let mut value = good.clone();
        change(&mut value);
        assert_ne!(&value, good, "{name} changes nothing");
        cases.push((name, says, value));
    };
    fn at(v: &mut Value) -> &mut Value {
        &mut v["graph"]["graph"]
    }
    case("an id out of range", "position 1 has id 1000", &|v| {
        at(v)["nodes"][1]["id"] = json!(1000)
    });
    case("a duplicate id", "position 2 has id 1", &|v| {
        at(v)["nodes"][2]["id"] = json!(1)
    });
    case("ids out of order", "position 0 has id 1", &|v| {
        at(v)["nodes"][0]["id"] = json!(1);
        at(v)["nodes"][1]["id"] = json!(0);
    });
    case("a hole after the cells", "hole at position 3", &|v| {
        at(v)["node_holes"] = json!([3])
    });
    case("a hole among the cells", "hole at position 1", &|v| {
        at(v)["node_holes"] = json!([1]);
        for (index, node) in at(v)["nodes"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .enumerate()
        {
            // The ids the positions will have, so that only the hole is wrong.
            node["id"] = json!(if index == 0 { 0 } else { index + 1 });
        }
    });
    case("an edge into a hole", "hole at position 3", &|v| {
        at(v)["node_holes"] = json!([3]);
        at(v)["edges"]
            .as_array_mut()
            .unwrap()
            .push(json!([0, 3, {"names": ["a"], "explicit": true, "conservative": false}]));
    });
    case(
        "an edge to a missing cell",
        "to cell 7, in a graph of 3 cells",
        &|v| {
            at(v)["edges"]
                .as_array_mut()
                .unwrap()
                .push(json!([0, 7, {"names": ["a"], "explicit": true, "conservative": false}]));
        },
    );
    case(
        "an edge backwards",
        "from cell 2 to cell 0 does not point forward",
        &|v| {
            at(v)["edges"]
                .as_array_mut()
                .unwrap()
                .push(json!([2, 0, {"names": ["c"], "explicit": true, "conservative": false}]));
        },
    );
    case(
        "an edge from a cell to itself",
        "from cell 1 to cell 1 does not point forward",
        &|v| {
            at(v)["edges"]
                .as_array_mut()
                .unwrap()
                .push(json!([1, 1, {"names": ["b"], "explicit": true, "conservative": false}]));
        },
    );
    case("the same edge twice", "two edges from cell", &|v| {
        let edges = at(v)["edges"].as_array_mut().unwrap();
        let first = edges.iter().find(|e| !e.is_null()).unwrap().clone();
        edges.push(first);
    });
    case(
        "a record of a cell that does not exist",
        "record of cell 9",
        &|v| {
            let output = json!({"text": "", "total_bytes": 0, "truncated": false});
            v["records"]["9"] = json!({
                "version": 1, "source_hash": "00", "cache_key": "00",
                "inputs": {}, "outputs": {}, "deleted": [], "error": null,
                "stdout": output, "stderr": output, "display": null,
                "read_check": null, "duration_us": 0, "ran_at": 0
            });
        },
    );
    cases
}

#[test]
fn a_damaged_graph_is_a_typed_error_naming_the_file_and_the_file_is_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let good = saved_notebook(dir.path());
    let path = dir.path().join("session.json");
    for (name, says, damaged) in corruptions(&good) {
        let bytes = serde_json::to_vec(&damaged).unwrap();
        std::fs::write(&path, &bytes).unwrap();
        for (how, result) in [
            ("open", Notebook::open(dir.path(), config()).map(|_| ())),
            ("read_graph", Notebook::read_graph(dir.path()).map(|_| ())),
        ] {
            match result {
                Err(NotebookError::Format { location, detail }) => {
                    assert!(
                        location.contains("session.json"),
                        "{name}, {how}: {location}"
                    );
                    assert!(detail.contains(says), "{name}, {how}: {detail}");
                }
                Err(other) => panic!("{name}, {how}: not a format error: {other}"),
                Ok(()) => panic!("{name}, {how}: the damaged notebook was accepted"),
            }
        }
        assert_eq!(
            std::fs::read(&path).unwrap(),
            bytes,
            "{name}: the file changed"
        );
    }
    // The undamaged file still opens.
    std::fs::write(&path, serde_json::to_vec(&good).unwrap()).unwrap();
    assert_eq!(
        Notebook::open(dir.path(), config()).unwrap().graph().len(),
        3
    );
}

/// A file over the limit (sparse: nothing is written to disk) is refused
/// before it is read, whoever reads it.
#[test]
fn a_notebook_file_over_the_size_limit_is_refused_unread() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("session.json");
    for size in [MAX_NOTEBOOK_BYTES + 1, 1 << 30] {
        let file = std::fs::File::create(&path).unwrap();
        file.set_len(size).unwrap();
        drop(file);
        for (how, result) in [
            ("open", Notebook::open(dir.path(), config()).map(|_| ())),
            ("read_graph", Notebook::read_graph(dir.path()).map(|_| ())),
        ] {
            match result {
                Err(error @ NotebookError::TooLarge { .. }) => {
                    let text = error.to_string();
                    assert!(text.contains("session.json"), "{how}: {text}");
                    assert!(
                        text.contains(&MAX_NOTEBOOK_BYTES.to_string()),
                        "{how}: {text}"
                    );
                }
                Err(other) => panic!("{size} bytes, {how}: {other}"),
                Ok(()) => panic!("{size} bytes, {how}: accepted"),
            }
        }
        assert_eq!(std::fs::metadata(&path).unwrap().len(), size);
    }
}

/// `create` then `save` replaces a notebook of this format, never a file
/// that is something else.
#[test]
fn a_new_notebook_does_not_replace_a_file_that_is_not_a_notebook() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("session.json");
    let foreign: [&[u8]; 5] = [
        b"my notes, not a notebook\n",
        br#"{"name": "another program's session"}"#,
        br#"{"format":2,"graph":{}}"#,
        br#"{"format":10,"graph":{}}"#,
        b"",
    ];
    for bytes in foreign {
        std::fs::write(&path, bytes).unwrap();
        let mut notebook = Notebook::create(dir.path(), config()).unwrap();
        notebook.add_cell("x = 1", user()).unwrap();
        match notebook.save() {
            Err(NotebookError::NotANotebook { path: named, .. }) => {
                assert_eq!(named, path);
            }
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(bytes)),
        }
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
    }
    #[cfg(unix)]
    {
        let elsewhere = dir.path().join("elsewhere.txt");
        std::fs::write(&elsewhere, b"keep").unwrap();
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        let notebook = Notebook::create(dir.path(), config()).unwrap();
        assert!(matches!(
            notebook.save(),
            Err(NotebookError::NotANotebook { .. })
        ));
        assert!(std::fs::symlink_metadata(&path).unwrap().is_symlink());
        std::fs::remove_file(&path).unwrap();
    }

    // A notebook of this format is replaced, as `create` asks.
    saved_notebook(dir.path());
    let mut notebook = Notebook::create(dir.path(), config()).unwrap();
    notebook.add_cell("y = 2", user()).unwrap();
    notebook.save().unwrap();
    assert_eq!(
        Notebook::open(dir.path(), config()).unwrap().graph().len(),
        1
    );
}
