//! The kernel's trace across the ways a namespace changes: what each cell
//! bound, deleted and mutated, and the alias groups, are kept up to date
//! from one cell to the next (the kernel re-reads only what a cell could
//! have touched), and anything that changes the namespace between cells
//! (a restore, a reset, a thread) makes the next trace start afresh.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use harness_code::CellTrace;
use harness_code::blobs::BlobStore;
use harness_code::kernel::{CellResult, Kernel, KernelConfig, RestoreValue};

use crate::support::config;

fn names(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|name| (*name).to_owned()).collect()
}

fn trace(result: &CellResult) -> &CellTrace {
    assert!(result.is_ok(), "{:?}", result.error);
    result.trace.as_ref().unwrap()
}

/// Runs `source` and checks its trace: names bound, deleted, mutated, and
/// the alias groups at its end.
async fn step(
    kernel: &mut Kernel,
    cell: u32,
    source: &str,
    bound: &[&str],
    deleted: &[&str],
    mutated: &[&str],
    aliases: &[&[&str]],
) {
    let result = kernel.execute(cell, source).await.unwrap();
    let trace = trace(&result);
    let context = format!("cell {cell} `{source}`: {trace:?}");
    assert_eq!(trace.bound, names(bound), "bound, {context}");
    assert_eq!(trace.deleted, names(deleted), "deleted, {context}");
    assert_eq!(trace.mutated, names(mutated), "mutated, {context}");
    let groups: Vec<BTreeSet<String>> = aliases.iter().map(|group| names(group)).collect();
    assert_eq!(trace.aliases, groups, "aliases, {context}");
}

#[tokio::test]
async fn each_cell_sees_what_it_bound_deleted_and_changed_however_it_did_it() {
    let mut kernel = Kernel::spawn(config()).await.unwrap();
    let k = &mut kernel;
    step(
        k,
        0,
        "xs = [1]\nys = xs\na = 1",
        &["a", "xs", "ys"],
        &[],
        &[],
        &[&["xs", "ys"]],
    )
    .await;
    // Rebinding one name of a group ends the group.
    step(k, 1, "ys = [2]", &["ys"], &[], &[], &[]).await;
    step(k, 2, "del a", &[], &["a"], &[], &[]).await;
    // A name deleted and bound again comes last in the namespace.
    step(k, 3, "a = 5", &["a"], &[], &[], &[]).await;
    step(k, 4, "del xs\nxs = ys", &["xs"], &[], &[], &[&["xs", "ys"]]).await;
    // A change through one name is a change of every name of its object,
    // read or not.
    step(
        k,
        5,
        "xs.append(3)",
        &[],
        &[],
        &["xs", "ys"],
        &[&["xs", "ys"]],
    )
    .await;
    // Bound through `globals()` and by a function's `global` statement
    // (which Python writes without the namespace's methods).
    step(
        k,
        6,
        "globals()['zz'] = [0]",
        &["zz"],
        &[],
        &[],
        &[&["xs", "ys"]],
    )
    .await;
    step(
        k,
        7,
        "def put():\n    global gg\n    gg = zz\nput()",
        &["gg", "put"],
        &[],
        &[],
        &[&["gg", "zz"], &["xs", "ys"]],
    )
    .await;
    // Changed by a function that reads the global itself: the cell loads
    // only the function.
    step(
        k,
        8,
        "def grow():\n    gg.append(1)\ngrow()",
        &["grow"],
        &[],
        &["gg", "zz"],
        &[&["gg", "zz"], &["xs", "ys"]],
    )
    .await;
    // Deleted through the namespace and through a function.
    step(
        k,
        9,
        "def drop():\n    global gg\n    del gg\ndrop()\ndel globals()['ys']",
        &["drop"],
        &["gg", "ys"],
        &[],
        &[],
    )
    .await;
    // A cell that changes nothing leaves every record empty.
    step(k, 10, "print(len(xs))", &[], &[], &[], &[]).await;
    // Many names at once.
    let many: Vec<String> = (0..300)
        .map(|i| format!("v{i}"))
        .chain(["i".into()])
        .collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let source = "for i in range(300):\n    globals()[f'v{i}'] = [i]";
    step(k, 11, source, &many, &[], &[], &[]).await;
    step(
        k,
        12,
        "def grow_v(n):\n    globals()[f'v{n}'].append(0)",
        &["grow_v"],
        &[],
        &[],
        &[],
    )
    .await;
    step(k, 13, "grow_v(123)", &[], &[], &["v123"], &[]).await;
    kernel.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_namespace_changed_between_cells_is_read_again() {
    let dir = tempfile::tempdir().unwrap();
    let blobs = BlobStore::open(dir.path().join("blobs")).unwrap();
    let config = KernelConfig {
        blob_dir: Some(blobs.root().to_path_buf()),
        ..config()
    };
    let mut kernel = Kernel::spawn(config).await.unwrap();
    let first = kernel.execute(0, "xs = [1, 2]").await.unwrap();
    let saved = first.outputs["xs"].stored.hash().unwrap().to_owned();
    step(&mut kernel, 1, "xs.append(3)", &[], &[], &["xs"], &[]).await;

    // A restore puts another object under `xs`: the next cell's change to
    // it is a change of that object, not of the one the last cell left.
    let report = kernel
        .restore(&[RestoreValue::Blob {
            name: "xs".into(),
            blob: saved.clone(),
        }])
        .await
        .unwrap();
    assert_eq!(report.restored, ["xs"]);
    step(&mut kernel, 2, "xs.append(4)", &[], &[], &["xs"], &[]).await;
    let check = kernel.execute(3, "print(xs)").await.unwrap();
    assert_eq!(check.stdout.text, "[1, 2, 4]\n");

    // Restored under a second name, then made an alias of the first.
    kernel
        .restore(&[RestoreValue::Blob {
            name: "ys".into(),
            blob: saved,
        }])
        .await
        .unwrap();
    step(&mut kernel, 4, "ys.append(5)", &[], &[], &["ys"], &[]).await;
    step(
        &mut kernel,
        5,
        "zs = xs",
        &["zs"],
        &[],
        &[],
        &[&["xs", "zs"]],
    )
    .await;
    step(
        &mut kernel,
        6,
        "zs.append(6)",
        &[],
        &[],
        &["xs", "zs"],
        &[&["xs", "zs"]],
    )
    .await;

    // A thread started by a cell rebinds a name after the cell ended, then
    // says so in a file.
    let dir = tempfile::tempdir().unwrap();
    let done = dir.path().join("done");
    kernel
        .execute(
            7,
            &format!(
                "import threading, time\n\
                 box = [0]\n\
                 def later():\n    time.sleep(0.2)\n    globals()['box'] = [5]\n    \
                 open({done:?}, 'w').close()\n\
                 threading.Thread(target=later).start()"
            ),
        )
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !done.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the thread never rebound `box`"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    step(
        &mut kernel,
        8,
        "box.append(1)",
        &[],
        &[],
        &["box"],
        &[&["xs", "zs"]],
    )
    .await;
    let check = kernel.execute(9, "print(box)").await.unwrap();
    assert_eq!(check.stdout.text, "[5, 1]\n");

    // After a reset the namespace starts empty, and so does the trace.
    kernel.reset().await.unwrap();
    step(
        &mut kernel,
        10,
        "xs = [9]\nys = xs",
        &["xs", "ys"],
        &[],
        &[],
        &[&["xs", "ys"]],
    )
    .await;
    step(
        &mut kernel,
        11,
        "ys.append(1)",
        &[],
        &[],
        &["xs", "ys"],
        &[&["xs", "ys"]],
    )
    .await;
    kernel.shutdown().await.unwrap();
}

#[tokio::test]
async fn generators_are_traced_when_advanced_through_library_code() {
    let mut kernel = Kernel::spawn(config()).await.unwrap();
    kernel
        .execute(0, "import random\nrandom.seed(1)")
        .await
        .unwrap();
    // Drawn inside the standard library (the cell loads only `random`).
    let drawn = kernel
        .execute(1, "random.shuffle([1, 2, 3])")
        .await
        .unwrap();
    assert!(trace(&drawn).mutated.contains("@random"), "{drawn:?}");
    let quiet = kernel.execute(2, "x = 1").await.unwrap();
    assert!(!trace(&quiet).mutated.contains("@random"), "{quiet:?}");
    // Re-seeded to where it was: the state differs from the last cell's.
    let reseeded = kernel.execute(3, "random.seed(1)").await.unwrap();
    assert!(trace(&reseeded).mutated.contains("@random"), "{reseeded:?}");
    // A whole Mersenne Twister period of words later the index is where it
    // was: the state words still differ.
    let words = kernel
        .execute(4, "random.getrandbits(32 * 624)")
        .await
        .unwrap();
    assert!(trace(&words).mutated.contains("@random"), "{words:?}");
    kernel.shutdown().await.unwrap();
}

/// numpy arrays over one memory are one group: a view is grouped with its
/// base when it is made, and an array that comes to share another's memory
/// in place (its buffer replaced, without a rebind) joins that array's
/// group then; one that stops sharing leaves it.
#[tokio::test]
async fn arrays_that_come_to_share_memory_in_place_are_grouped() {
    let mut kernel = Kernel::spawn(crate::notebooks::config()).await.unwrap();
    let k = &mut kernel;
    // (`.data` is deprecated: its warning is silenced.)
    let imports = "import warnings\nwarnings.simplefilter('ignore')\nimport numpy as np";
    trace(&k.execute(0, imports).await.unwrap());
    step(
        k,
        1,
        "a = np.zeros(4)\nb = np.arange(4.0)\nv = b[1:]",
        &["a", "b", "v"],
        &[],
        &[],
        &[&["b", "v"]],
    )
    .await;
    // `a`'s buffer becomes `b`'s: its base is now `b`.
    step(k, 2, "a.data = b", &[], &[], &["a"], &[&["a", "b", "v"]]).await;
    // A copy made in place leaves the group: `v`'s buffer is its own again.
    step(k, 3, "v.data = v.copy()", &[], &[], &["v"], &[&["a", "b"]]).await;
    kernel.shutdown().await.unwrap();
}
