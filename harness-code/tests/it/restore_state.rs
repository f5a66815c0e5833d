//! Restoring a cell's inputs keeps what a fresh run of the cells has: a
//! list held by a function's default or closure stays the object the
//! function changes, state kept in a closure is traced as changed, a name
//! rebound after an alias is restored apart from it, and a name bound by a
//! cell that failed is put back by re-running that cell.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;

use crate::support::{config, user};
use harness_code::CellId;
use harness_code::kernel::Kernel;
use harness_code::notebook::{Notebook, NotebookError};

fn output(notebook: &Notebook, cell: CellId, name: &str) -> String {
    let record = notebook.record(cell).unwrap();
    match record.outputs.get(name) {
        Some(value) => value.repr.clone(),
        None => panic!("no {name} in cell {cell}: {:?}", record.error),
    }
}

/// Cells `xs = [1]`, a definition holding `xs`, a call appending to it and
/// `n = len(xs)`; the call is edited to append twice: the call and `n`
/// run again, and `n` is what a fresh run gives.
async fn edited_call_appends_to_the_held_list(definition: &str, call: &str, edited: &str) {
    let dir = tempfile::tempdir().unwrap();
    let mut notebook = Notebook::create(dir.path(), config()).unwrap();
    let mut ids = Vec::new();
    for source in ["xs = [1]", definition, call, "n = len(xs)"] {
        ids.push(notebook.add_cell(source, user()).unwrap());
    }
    let report = notebook.replay().await.unwrap();
    assert!(report.succeeded(), "{report:#?}");
    assert_eq!(output(&notebook, ids[3], "n"), "2");
    notebook.replace_cell(ids[2], edited, user()).unwrap();
    let report = notebook.replay().await.unwrap();
    assert!(report.succeeded(), "{report:#?}");
    assert_eq!(report.executed(), [ids[2], ids[3]], "{report:#?}");
    assert_eq!(
        output(&notebook, ids[3], "n"),
        "3",
        "{definition}: {report:#?}"
    );
    notebook.shutdown().await;
}

#[tokio::test]
async fn a_list_held_by_a_default_is_restored_with_its_function() {
    edited_call_appends_to_the_held_list(
        "def f(v, acc=xs):\n    acc.append(v)",
        "f(2)",
        "f(2); f(3)",
    )
    .await;
}

#[tokio::test]
async fn a_list_held_by_a_lambda_default_is_restored_with_it() {
    edited_call_appends_to_the_held_list(
        "f = lambda v, acc=xs: acc.append(v)",
        "f(2)",
        "f(2); f(3)",
    )
    .await;
}

#[tokio::test]
async fn a_list_held_by_a_closure_is_restored_with_it() {
    edited_call_appends_to_the_held_list(
        "def mk(acc):\n    def add(v):\n        acc.append(v)\n    return add\nadd = mk(xs)",
        "add(2)",
        "add(2); add(3)",
    )
    .await;
}

#[tokio::test]
async fn state_kept_in_a_closure_is_traced_as_changed() {
    let dir = tempfile::tempdir().unwrap();
    let mut notebook = Notebook::create(dir.path(), config()).unwrap();
    let mut ids = Vec::new();
    for source in [
        "def mk():\n    c = [0]\n    def inc():\n        c[0] += 1\n        return c[0]\n    return inc\ninc = mk()",
        "inc()",
        "cur = inc()",
        "def mk2():\n    n = 0\n    def bump():\n        nonlocal n\n        n += 1\n        return n\n    return bump\nbump = mk2()",
        "bump()",
        "now = bump()",
    ] {
        ids.push(notebook.add_cell(source, user()).unwrap());
    }
    let report = notebook.replay().await.unwrap();
    assert!(report.succeeded(), "{report:#?}");
    assert_eq!(output(&notebook, ids[2], "cur"), "2");
    assert_eq!(output(&notebook, ids[5], "now"), "2");
    notebook
        .replace_cell(ids[1], "inc(); inc()", user())
        .unwrap();
    notebook
        .replace_cell(ids[4], "bump(); bump()", user())
        .unwrap();
    let report = notebook.replay().await.unwrap();
    assert!(report.succeeded(), "{report:#?}");
    assert_eq!(
        report.executed(),
        [ids[1], ids[2], ids[4], ids[5]],
        "{report:#?}"
    );
    assert_eq!(output(&notebook, ids[2], "cur"), "3");
    assert_eq!(output(&notebook, ids[5], "now"), "3");
    notebook.shutdown().await;
}

#[tokio::test]
async fn a_default_shares_its_list_again_after_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut notebook = Notebook::create(dir.path(), config()).unwrap();
    for source in ["xs = [1]", "def f(v, acc=xs):\n    acc.append(v)", "f(2)"] {
        notebook.add_cell(source, user()).unwrap();
    }
    assert!(notebook.replay().await.unwrap().succeeded());
    notebook.shutdown().await;
    notebook.save().unwrap();
    drop(notebook);
    let mut notebook = Notebook::open(dir.path(), config()).unwrap();
    let run = notebook
        .execute("f(3)\nr = (xs, f.__defaults__[0] is xs)", user())
        .await
        .unwrap();
    assert!(run.result.is_ok(), "{:?}", run.result.error);
    assert_eq!(run.result.outputs["r"].repr, "([1, 2, 3], True)");
    notebook.shutdown().await;
}

/// The kernel's alias groups: a function or lambda shares what its
/// defaults or closure hold with the names that hold it too; a function
/// held by another value (a list of callbacks) does not.
#[tokio::test]
async fn functions_share_what_their_defaults_and_closures_hold() {
    let mut kernel = Kernel::spawn(config()).await.unwrap();
    let groups = |result: &harness_code::kernel::CellResult| {
        assert!(result.is_ok(), "{:?}", result.error);
        result.trace.as_ref().unwrap().aliases.clone()
    };
    let names = |list: &[&str]| -> BTreeSet<String> {
        list.iter().map(|name| (*name).to_owned()).collect()
    };
    let result = kernel
        .execute(0, "xs = [1]\ndef f(acc=xs):\n    pass")
        .await
        .unwrap();
    assert_eq!(groups(&result), [names(&["f", "xs"])]);
    let result = kernel
        .execute(1, "ys = []\ng = (lambda: ys.append(1))\ndel f")
        .await
        .unwrap();
    // `g` reaches `ys` through its globals, not a closure: not shared.
    assert_eq!(groups(&result), Vec::<BTreeSet<String>>::new());
    let result = kernel
        .execute(
            2,
            "def mk(a):\n    return lambda: a\nh = mk(ys)\ncallbacks = [h]",
        )
        .await
        .unwrap();
    assert_eq!(groups(&result), [names(&["h", "ys"])]);
    kernel.shutdown().await.unwrap();
}

/// `b = a` then `a = [5]`: after a kernel restart (in the same process, or
/// saved and reopened), a cell reading both gets `([5], [1])`, by `execute`
/// and by `replay`.
#[tokio::test]
async fn a_name_rebound_after_an_alias_is_restored_apart_from_it() {
    for reopen in [false, true] {
        for by_replay in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let mut notebook = Notebook::create(dir.path(), config()).unwrap();
            for source in ["a = [1]", "b = a", "a = [5]"] {
                notebook.add_cell(source, user()).unwrap();
            }
            assert!(notebook.replay().await.unwrap().succeeded());
            notebook.shutdown().await;
            if reopen {
                notebook.save().unwrap();
                drop(notebook);
                notebook = Notebook::open(dir.path(), config()).unwrap();
            }
            let context = format!("reopen {reopen}, replay {by_replay}");
            let probe = "r = (a, b, a is b)";
            let cell = if by_replay {
                let cell = notebook.add_cell(probe, user()).unwrap();
                let report = notebook.replay().await.unwrap();
                assert!(report.succeeded(), "{context}: {report:#?}");
                assert_eq!(report.executed(), [cell], "{context}");
                cell
            } else {
                let run = notebook.execute(probe, user()).await.unwrap();
                assert!(run.result.is_ok(), "{context}: {:?}", run.result.error);
                run.cell
            };
            assert_eq!(
                output(&notebook, cell, "r"),
                "([5], [1], False)",
                "{context}"
            );
            // And the names keep their values for the next cell.
            let run = notebook.execute("s = (a, b)", user()).await.unwrap();
            assert_eq!(run.result.outputs["s"].repr, "([5], [1])", "{context}");
            notebook.shutdown().await;
        }
    }
}

/// A cell that binds a function and then raises: after a kernel restart a
/// later cell calling the function re-runs it, accepting the failure it
/// recorded; a failure that differs is a `Restore` error.
#[tokio::test]
async fn names_a_failed_cell_bound_are_restored_by_re_running_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut notebook = Notebook::create(dir.path(), config()).unwrap();
    let failing = notebook
        .add_cell("def f():\n    return 1\nraise ValueError('boom')", user())
        .unwrap();
    let run = notebook.run_cell(failing).await.unwrap();
    assert_eq!(run.result.error.as_ref().unwrap().type_name, "ValueError");
    notebook.execute("x = 5", user()).await.unwrap();
    notebook.shutdown().await;
    let run = notebook.execute("z = f() + x", user()).await.unwrap();
    assert!(run.result.is_ok(), "{:?}", run.result.error);
    assert_eq!(run.result.outputs["z"].repr, "6");
    assert_eq!(run.recomputed, [failing]);
    // A cell that defeats the analysis restores every name, `f` among them.
    notebook.shutdown().await;
    let run = notebook
        .execute("w = sorted(k for k in globals() if k in 'fxz')", user())
        .await
        .unwrap();
    assert!(run.result.is_ok(), "{:?}", run.result.error);
    assert_eq!(run.result.outputs["w"].repr, "['f', 'x', 'z']");

    // The same cell failing otherwise when re-run (what it reads from a
    // file changed) is not accepted.
    let work = dir.path().join("work");
    std::fs::write(work.join("flag.txt"), "one").unwrap();
    let reads = notebook
        .add_cell(
            "def g():\n    return 2\nraise ValueError(open('flag.txt').read())",
            user(),
        )
        .unwrap();
    notebook.run_cell(reads).await.unwrap();
    notebook.shutdown().await;
    std::fs::write(work.join("flag.txt"), "two").unwrap();
    let error = notebook.execute("y = g()", user()).await.unwrap_err();
    assert!(
        matches!(&error, NotebookError::Restore { producer, .. } if *producer == reads),
        "{error}"
    );

    // Or runs through: `h` would return 2, where the failed run left the
    // `h` that returns 1.
    std::fs::write(work.join("flag.txt"), "stop").unwrap();
    let through = notebook
        .add_cell(
            "def h():\n    return 1\nassert open('flag.txt').read() == 'go'\ndef h():\n    return 2",
            user(),
        )
        .unwrap();
    notebook.run_cell(through).await.unwrap();
    notebook.shutdown().await;
    std::fs::write(work.join("flag.txt"), "go").unwrap();
    let error = notebook.execute("kk = h()", user()).await.unwrap_err();
    assert!(
        matches!(&error, NotebookError::Unsettled { names, .. } if names == &["h"]),
        "{error}"
    );
    notebook.shutdown().await;
}
