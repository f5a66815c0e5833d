//! A state too large to send whole, opened in a browser where the studio
//! cut it as an object: a value nested past the depth a cut document is
//! opened to comes as a cut value, and "show more" opens it as a tree (its
//! own entries, cut again where they are large); an object of more
//! entries than a cut document keeps comes with the first hundred, and
//! "show more" adds the rest under their keys.

use std::sync::Arc;

use crate::browser::Browser;
use crate::support::{TempDir, temp_dir};
use harness::session::SessionStore;
use harness::{Harness, HarnessState, JsonSchema, create_agent};
use harness_stores::SledStore;
use harness_studio::Studio;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, HarnessState)]
pub struct Blob {
    pub data: Value,
}

/// Levels of `{"in": …}` above the deep value's leaf: past the 32 levels a
/// cut document is opened to.
const LEVELS: usize = 40;

/// Keys of the wide object: past the 100 entries a cut one keeps.
const KEYS: usize = 150;

/// The wide object's value at key `i`: large enough that the object is
/// over the 2 KiB a value is kept whole at.
fn count(i: usize) -> usize {
    i * 1_000_003
}

/// The state: the deep value, the wide object, and enough text (600 KiB)
/// that the whole is past what is sent uncut.
fn blob() -> Value {
    // Over the 2 KiB a value is kept whole at, at every level: each is
    // opened, down to the depth limit.
    let mut deep = json!({"leaf": "found at the bottom", "pad": "y".repeat(3000)});
    for _ in 0..LEVELS {
        deep = json!({ "in": deep });
    }
    let wide: serde_json::Map<String, Value> = (0..KEYS)
        .map(|i| (format!("key{i:03}"), json!(count(i))))
        .collect();
    let bulk: Vec<String> = (0..300)
        .map(|i| format!("{i} {}", "x".repeat(2000)))
        .collect();
    // (Its fields are walked in key order: `counts` and `deep` before the
    // text fills what a cut document keeps.)
    json!({ "counts": wide, "deep": deep, "text": bulk })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_a_cut_object_opens_as_a_tree_and_a_wide_one_shows_its_other_keys() {
    let dir = temp_dir("cuts");
    let _dir = TempDir(dir.clone());
    let store: Arc<dyn SessionStore> = Arc::new(SledStore::open(dir.join("db")).unwrap());
    let harness = Harness::<Blob>::builder()
        .step("fill")
        .run(async |_: Arc<Blob>| Ok(BlobUpdate::new().data(blob())))
        .end()
        .start("fill")
        .store(Arc::clone(&store))
        .build()
        .unwrap();
    let agent = create_agent("cuts", &harness);
    let session = agent.run(Blob::default()).await.unwrap().session_id;
    let studio = Studio::for_agent(&agent, &harness, Arc::clone(&store))
        .unwrap()
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let mut b = Browser::open_session(&studio.url(), &session).await;

    // The deep value is cut where the document stops being opened: one cut
    // value, some levels down.
    let deep = "#state-tree span.cut[data-pointer^=\"/state/data/deep\"]";
    b.wait_for(
        "the deep value cut",
        &format!("document.querySelector('{deep} button')"),
    )
    .await;
    let pointers = b
        .eval(&format!(
            "[...document.querySelectorAll('{deep}')].map(e => e.dataset.pointer)"
        ))
        .await;
    let [pointer] = serde_json::from_value::<[String; 1]>(pointers.clone()).unwrap();
    let levels = pointer
        .strip_prefix("/state/data/deep")
        .unwrap()
        .split_terminator('/')
        .skip(1)
        .inspect(|segment| assert_eq!(*segment, "in", "{pointers}"))
        .count();
    assert!((20..LEVELS).contains(&levels), "{pointers}");
    let cut = format!("#state-tree span.cut[data-pointer=\"{pointer}\"]");
    // The leaf is below the cut: in its preview, not in the tree.
    let leaf_keys = "[...document.querySelectorAll('#state-tree .k')].filter(k => k.textContent === 'leaf').length";
    assert_eq!(b.eval(leaf_keys).await, json!(0));
    // Opened: a tree in its place, down to the leaf.
    b.click(&format!("{cut} button")).await;
    b.wait_for(
        "the deep value as a tree",
        &format!("!document.querySelector('{cut}') && {leaf_keys} === 1"),
    )
    .await;
    let leaf = b
        .eval(
            "[...document.querySelectorAll('#state-tree li')].filter(li => \
             li.querySelector(':scope > .k') && li.querySelector(':scope > .k').textContent === 'leaf')\
             .map(li => li.querySelector(':scope > .t-string').textContent)",
        )
        .await;
    assert_eq!(leaf, json!(["\"found at the bottom\""]));
    // Nested as stored: the leaf's object is LEVELS "in"s down from `deep`
    // (an object's key is in its `summary`).
    let depth = b
        .eval(
            "(() => { const k = [...document.querySelectorAll('#state-tree .k')]\
             .find(k => k.textContent === 'leaf'); let n = 0; \
             for (let li = k.parentElement; li; li = li.parentElement.closest('li')) { \
               const key = li.querySelector(':scope > .k, :scope > details > summary > .k'); \
               if (key && key.textContent === 'in') n++; \
               if (key && key.textContent === 'deep') break; } return n; })()",
        )
        .await;
    assert_eq!(depth, json!(LEVELS));

    // The wide object: its first hundred keys, then the rest on demand.
    let more = "#state-tree li.cut[data-pointer=\"/state/data/counts\"]";
    b.wait_for(
        "the wide object's first keys",
        &format!("document.querySelector('{more}')"),
    )
    .await;
    assert!(
        b.text(more).await.contains("50 more of 150"),
        "{}",
        b.text(more).await
    );
    // Its list, kept by the page for after the cut entry is replaced.
    b.eval(&format!(
        "window.wide = document.querySelector('{more}').parentElement"
    ))
    .await;
    let wide = "window.wide";
    let keys = format!(
        "[...({wide}).querySelectorAll(':scope > li:not(.cut)')].map(li => \
         li.querySelector(':scope > .k').textContent + '=' + li.querySelector(':scope > .t-number').textContent)"
    );
    let shown = b.eval(&keys).await;
    let first: Vec<String> = (0..100)
        .map(|i| format!("key{i:03}={}", count(i)))
        .collect();
    assert_eq!(shown, json!(first));
    b.eval(&format!("document.querySelector('{more} button').click()"))
        .await;
    b.wait_for(
        "every key",
        &format!("!document.querySelector('{more}') && ({keys}).length === {KEYS}"),
    )
    .await;
    let every: Vec<String> = (0..KEYS)
        .map(|i| format!("key{i:03}={}", count(i)))
        .collect();
    assert_eq!(b.eval(&keys).await, json!(every));
    assert_eq!(b.errors().await, "", "no error on the page");
    b.close().await;
    studio.shutdown().await.unwrap();
}
