//! The step cache: hits skip the step's body, keys follow what the step
//! reads, its version and its harness, bad entries are misses, and only
//! successful updates are stored.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use async_trait::async_trait;
use futures::StreamExt;
use harness::observe::Observer;
use harness::{
    CachePolicy, Cx, Harness, HarnessState, MemoryCache, RetryPolicy, RunError, RunEvent, RunInfo,
    StepCache, StepCacheError, StepError, StepInfo, StepResult, create_agent,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Doc {
    text: String,
    #[field(reduce = extend)]
    tags: HashMap<String, u32>,
    /// Written by the cached step.
    summary: String,
    /// Read by nobody: a counter a run bumps on its way.
    #[field(reduce = add)]
    visits: u32,
}

fn doc(text: &str) -> Doc {
    Doc {
        text: text.into(),
        ..Doc::default()
    }
}

/// A step body that counts its executions and summarizes the text.
fn summarizer(
    calls: &Arc<AtomicUsize>,
    label: &'static str,
) -> impl Fn(Arc<Doc>) -> futures::future::BoxFuture<'static, StepResult<DocUpdate>>
+ Send
+ Sync
+ 'static {
    let calls = Arc::clone(calls);
    move |s: Arc<Doc>| {
        let calls = Arc::clone(&calls);
        Box::pin(async move {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok(DocUpdate::new()
                .summary(format!("{label}: {} chars", s.text.len()))
                .visits(1))
        })
    }
}

fn summarize_loop(policy: CachePolicy, calls: &Arc<AtomicUsize>) -> Harness<Doc> {
    Harness::<Doc>::builder()
        .step("summarize")
        .run(summarizer(calls, "v"))
        .cache(policy)
        .end()
        .start("summarize")
        .build()
        .unwrap()
}

async fn run_once(h: &Harness<Doc>, input: Doc) -> Doc {
    create_agent("cache", h).run(input).await.unwrap().state
}

#[tokio::test]
async fn a_hit_skips_the_body_and_gives_the_same_final_state() {
    let cache = MemoryCache::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let h = summarize_loop(CachePolicy::new(cache.clone(), "app/summaries"), &calls);

    let first = run_once(&h, doc("hello")).await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(first.summary, "v: 5 chars");
    assert_eq!(cache.len(), 1);

    let second = run_once(&h, doc("hello")).await;
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the hit did not run the body"
    );
    assert_eq!(second, first);
    assert_eq!(cache.len(), 1);

    // Another agent of another build of the same loop hits too.
    let again = summarize_loop(CachePolicy::new(cache.clone(), "app/summaries"), &calls);
    assert_eq!(run_once(&again, doc("hello")).await, first);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[derive(Debug, Default)]
struct Finished(Mutex<Vec<(String, Option<String>)>>);

#[async_trait]
impl Observer<Doc> for Arc<Finished> {
    async fn step_finished(&self, _: &RunInfo, step: &StepInfo, update: &DocUpdate, _: Duration) {
        self.0
            .lock()
            .unwrap()
            .push((step.name.to_string(), update.summary.clone()));
    }
}

#[tokio::test]
async fn a_hit_is_an_ordinary_step_completion_for_events_and_observers() {
    let cache = MemoryCache::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(Finished::default());
    let h = Harness::<Doc>::builder()
        .step("summarize")
        .run(summarizer(&calls, "v"))
        .cache(CachePolicy::new(cache.clone(), "app"))
        .end()
        .start("summarize")
        .observer(Arc::clone(&seen))
        .build()
        .unwrap();
    let agent = create_agent("cache", &h);
    agent.run(doc("abc")).await.unwrap();
    let run = agent.run(doc("abc"));
    let events = run.events();
    let out = run.await.unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(out.steps, 1);
    assert_eq!(out.state.visits, 1, "the cached update is applied");
    let finished: Vec<_> = events
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .filter_map(|e| match e {
            RunEvent::StepFinished { step, update, .. } => Some((step.to_string(), update.summary)),
            _ => None,
        })
        .collect();
    assert_eq!(
        finished,
        [("summarize".to_string(), Some("v: 3 chars".to_string()))]
    );
    assert_eq!(
        *seen.0.lock().unwrap(),
        [
            ("summarize".to_string(), Some("v: 3 chars".to_string())),
            ("summarize".to_string(), Some("v: 3 chars".to_string())),
        ]
    );
}

#[tokio::test]
async fn a_change_in_the_state_misses() {
    let cache = MemoryCache::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let h = summarize_loop(CachePolicy::new(cache.clone(), "app"), &calls);
    run_once(&h, doc("hello")).await;
    // Text, a map entry, a field the step does not even read: the whole
    // state is the key.
    let mut tagged = doc("hello");
    tagged.tags.insert("lang".into(), 1);
    let mut visited = doc("hello");
    visited.visits = 7;
    for (i, input) in [doc("hello!"), tagged, visited].into_iter().enumerate() {
        let out = run_once(&h, input.clone()).await;
        assert_eq!(calls.load(Ordering::SeqCst), i + 2, "{input:?}");
        assert_eq!(out.summary, format!("v: {} chars", input.text.len()));
    }
    assert_eq!(cache.len(), 4);
}

#[tokio::test]
async fn maps_filled_in_another_order_hit() {
    let cache = MemoryCache::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let h = summarize_loop(CachePolicy::new(cache.clone(), "app"), &calls);
    let mut a = doc("x");
    for (k, v) in [("b", 2), ("a", 1), ("c", 3)] {
        a.tags.insert(k.into(), v);
    }
    let mut b = doc("x");
    for (k, v) in [("c", 3), ("b", 2), ("a", 1)] {
        b.tags.insert(k.into(), v);
    }
    run_once(&h, a).await;
    run_once(&h, b).await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

fn projected_loop(cache: &MemoryCache, calls: &Arc<AtomicUsize>) -> Harness<Doc> {
    Harness::<Doc>::builder()
        .step("summarize")
        .run(summarizer(calls, "p"))
        .cache_reads(CachePolicy::new(cache.clone(), "app"), |s| {
            (s.text.clone(), s.tags.get("lang").copied())
        })
        .end()
        .start("summarize")
        .build()
        .unwrap()
}

#[tokio::test]
async fn with_a_projection_a_change_inside_it_misses_and_outside_it_hits() {
    let cache = MemoryCache::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let h = projected_loop(&cache, &calls);
    let first = run_once(&h, doc("hello")).await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // Outside the projection: the visits counter, another tag.
    let mut outside = doc("hello");
    outside.visits = 41;
    outside.tags.insert("topic".into(), 9);
    let out = run_once(&h, outside).await;
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "a change outside the projection hits"
    );
    assert_eq!(out.summary, first.summary);
    assert_eq!(
        out.visits, 42,
        "the cached update merges into the new state"
    );

    // Inside: the text, the `lang` tag.
    let mut lang = doc("hello");
    lang.tags.insert("lang".into(), 2);
    run_once(&h, lang).await;
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    run_once(&h, doc("hello, world")).await;
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_projection_and_the_whole_state_key_differently() {
    // The same step, state and namespace cached by the whole state and by a
    // projection: the projection `(text, None)` of doc("hello") is not the
    // state, so neither reads the other's entry.
    let cache = MemoryCache::new();
    let calls = Arc::new(AtomicUsize::new(0));
    run_once(&projected_loop(&cache, &calls), doc("hello")).await;
    run_once(
        &summarize_loop(CachePolicy::new(cache.clone(), "app"), &calls),
        doc("hello"),
    )
    .await;
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(cache.len(), 2);
}

#[tokio::test]
async fn bumping_the_version_misses() {
    let cache = MemoryCache::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let v1 = summarize_loop(CachePolicy::new(cache.clone(), "app").version(1), &calls);
    let v2 = summarize_loop(CachePolicy::new(cache.clone(), "app").version(2), &calls);
    run_once(&v1, doc("hello")).await;
    run_once(&v1, doc("hello")).await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    run_once(&v2, doc("hello")).await;
    assert_eq!(calls.load(Ordering::SeqCst), 2, "version 2 misses");
    run_once(&v2, doc("hello")).await;
    run_once(&v1, doc("hello")).await;
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "each version hits its own entry"
    );
}

#[tokio::test]
async fn two_harnesses_sharing_a_cache_never_see_each_others_results() {
    let cache = MemoryCache::new();
    let (calls_a, calls_b) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let build = |namespace: &str, calls: &Arc<AtomicUsize>, label: &'static str| {
        Harness::<Doc>::builder()
            .step("summarize")
            .run(summarizer(calls, label))
            .cache(CachePolicy::new(cache.clone(), namespace))
            .end()
            .start("summarize")
            .build()
            .unwrap()
    };
    let a = build("app-a", &calls_a, "A");
    let b = build("app-b", &calls_b, "B");
    assert_eq!(run_once(&a, doc("same")).await.summary, "A: 4 chars");
    assert_eq!(run_once(&b, doc("same")).await.summary, "B: 4 chars");
    assert_eq!(run_once(&a, doc("same")).await.summary, "A: 4 chars");
    assert_eq!(run_once(&b, doc("same")).await.summary, "B: 4 chars");
    assert_eq!(calls_a.load(Ordering::SeqCst), 1);
    assert_eq!(calls_b.load(Ordering::SeqCst), 1);
    assert_eq!(cache.len(), 2);
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Other {
    text: String,
    summary: String,
    #[field(reduce = add)]
    visits: u32,
}

#[tokio::test]
async fn two_state_types_with_the_same_json_and_namespace_key_differently() {
    let cache = MemoryCache::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let other = Harness::<Other>::builder()
        .step("summarize")
        .run(move |s: Arc<Other>| {
            counted.fetch_add(1, Ordering::SeqCst);
            async move { Ok(OtherUpdate::new().summary(format!("other {}", s.text))) }
        })
        .cache(CachePolicy::new(cache.clone(), "app"))
        .end()
        .start("summarize")
        .build()
        .unwrap();
    let doc_loop = summarize_loop(CachePolicy::new(cache.clone(), "app"), &calls);
    let o = create_agent("o", &other)
        .run(Other {
            text: "t".into(),
            summary: String::new(),
            visits: 0,
        })
        .await
        .unwrap()
        .state;
    assert_eq!(o.summary, "other t");
    let d = run_once(&doc_loop, doc("t")).await;
    assert_eq!(d.summary, "v: 1 chars");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_corrupt_or_mismatched_entry_is_a_miss_and_is_replaced() {
    let cache = MemoryCache::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let h = summarize_loop(CachePolicy::new(cache.clone(), "app"), &calls);
    let good = run_once(&h, doc("hello")).await;
    let key = cache.keys().pop().unwrap();
    let entry = cache_get(&cache, &key).await;

    let mut tampered_update = entry.clone();
    tampered_update["update"]["summary"] = json!("forged");
    let mut wrong_update_type = entry.clone();
    wrong_update_type["update"] = json!({"summary": 5});
    let mut unknown_field = entry.clone();
    unknown_field["update"] = json!({"nope": true});
    let mut other_step = entry.clone();
    other_step["step"] = json!("another");
    let mut other_namespace = entry.clone();
    other_namespace["namespace"] = json!("app-b");
    let mut other_version = entry.clone();
    other_version["version"] = json!(3);
    let mut other_format = entry.clone();
    other_format["format"] = json!(99);
    let corrupt = [
        json!("garbage"),
        json!(null),
        json!(42),
        json!({}),
        json!({"summary": "forged"}),
        tampered_update,
        wrong_update_type,
        unknown_field,
        other_step,
        other_namespace,
        other_version,
        other_format,
    ];
    for (i, bad) in corrupt.into_iter().enumerate() {
        cache.insert(key.clone(), bad.clone());
        let out = run_once(&h, doc("hello")).await;
        assert_eq!(out, good, "{bad}");
        assert_eq!(calls.load(Ordering::SeqCst), i + 2, "{bad} is a miss");
        assert_eq!(cache_get(&cache, &key).await, entry, "{bad} is replaced");
    }
    // And the replaced entry hits again.
    run_once(&h, doc("hello")).await;
    assert_eq!(calls.load(Ordering::SeqCst), 13);
}

async fn cache_get(cache: &MemoryCache, key: &str) -> Value {
    cache.get(key).await.unwrap().unwrap()
}

/// A cache whose every read and write fails.
#[derive(Debug, Default)]
struct Broken {
    tries: AtomicUsize,
}

#[async_trait]
impl StepCache for Broken {
    async fn get(&self, key: &str) -> Result<Option<Value>, StepCacheError> {
        self.tries.fetch_add(1, Ordering::SeqCst);
        Err(StepCacheError::new(
            format!("reading {key}"),
            std::io::Error::other("disk on fire"),
        ))
    }

    async fn put(&self, key: &str, _: Value) -> Result<(), StepCacheError> {
        self.tries.fetch_add(1, Ordering::SeqCst);
        Err(StepCacheError::new(
            format!("writing {key}"),
            std::io::Error::other("disk on fire"),
        ))
    }
}

#[tokio::test]
async fn a_failing_cache_runs_the_step_and_never_fails_the_run() {
    let broken = Arc::new(Broken::default());
    let calls = Arc::new(AtomicUsize::new(0));
    let h = summarize_loop(CachePolicy::new(Arc::clone(&broken), "app"), &calls);
    for n in 1..=2 {
        assert_eq!(run_once(&h, doc("hello")).await.summary, "v: 5 chars");
        assert_eq!(calls.load(Ordering::SeqCst), n);
    }
    assert_eq!(
        broken.tries.load(Ordering::SeqCst),
        4,
        "a get and a put per run"
    );
}

#[tokio::test]
async fn a_projection_that_cannot_be_serialized_runs_the_step_uncached() {
    let cache = MemoryCache::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let h = Harness::<Doc>::builder()
        .step("summarize")
        .run(summarizer(&calls, "v"))
        // JSON object keys are strings: a map keyed by pairs is refused.
        .cache_reads(CachePolicy::new(cache.clone(), "app"), |s| {
            HashMap::from([((1_u8, 2_u8), s.text.clone())])
        })
        .end()
        .start("summarize")
        .build()
        .unwrap();
    for n in 1..=2 {
        assert_eq!(run_once(&h, doc("hi")).await.summary, "v: 2 chars");
        assert_eq!(calls.load(Ordering::SeqCst), n);
    }
    assert!(cache.is_empty());
}

#[tokio::test]
async fn failures_are_not_cached_and_a_retried_success_is() {
    let cache = MemoryCache::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    // Fails on every odd call.
    let h = Harness::<Doc>::builder()
        .step("flaky")
        .run(move |s: Arc<Doc>| {
            let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                if n % 2 == 1 {
                    return Err(StepError::msg(format!("call {n} fails")));
                }
                Ok(DocUpdate::new().summary(format!("{} after {n}", s.text)))
            }
        })
        .cache(CachePolicy::new(cache.clone(), "app"))
        .end()
        .start("flaky")
        .build()
        .unwrap();
    let err = create_agent("a", &h).run(doc("x")).await.unwrap_err();
    assert!(matches!(err, RunError::Step { .. }), "{err}");
    assert!(cache.is_empty(), "a failure is not cached");
    let out = run_once(&h, doc("x")).await;
    assert_eq!(out.summary, "x after 2", "the failure was not replayed");
    assert_eq!(cache.len(), 1);
    assert_eq!(run_once(&h, doc("x")).await.summary, "x after 2");
    assert_eq!(calls.load(Ordering::SeqCst), 2);

    // With a retry policy: the failed attempt stores nothing, the retried
    // success is stored.
    let retried = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&retried);
    let cache = MemoryCache::new();
    let h = Harness::<Doc>::builder()
        .step("flaky")
        .run(move |s: Arc<Doc>| {
            let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                if n == 1 {
                    return Err(StepError::msg("first attempt fails"));
                }
                Ok(DocUpdate::new().summary(format!("{} after {n}", s.text)))
            }
        })
        .cache(CachePolicy::new(cache.clone(), "app"))
        .retry(RetryPolicy::attempts(2))
        .end()
        .start("flaky")
        .build()
        .unwrap();
    assert_eq!(run_once(&h, doc("y")).await.summary, "y after 2");
    assert_eq!(run_once(&h, doc("y")).await.summary, "y after 2");
    assert_eq!(retried.load(Ordering::SeqCst), 2);
    assert_eq!(cache.len(), 1);
}

#[tokio::test]
async fn a_timed_out_step_is_not_cached() {
    let cache = MemoryCache::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let h = Harness::<Doc>::builder()
        .step("slow")
        .run(move |_: Arc<Doc>| {
            let n = counted.fetch_add(1, Ordering::SeqCst);
            async move {
                if n == 0 {
                    futures::future::pending::<()>().await;
                }
                Ok(DocUpdate::new().summary("done"))
            }
        })
        .cache(CachePolicy::new(cache.clone(), "app"))
        .timeout(Duration::from_millis(20))
        .end()
        .start("slow")
        .build()
        .unwrap();
    let err = create_agent("a", &h).run(doc("x")).await.unwrap_err();
    assert!(matches!(err, RunError::Timeout { .. }), "{err}");
    assert!(cache.is_empty());
    assert_eq!(run_once(&h, doc("x")).await.summary, "done");
    assert_eq!(cache.len(), 1);
}

#[tokio::test]
async fn an_interrupt_is_not_cached_and_the_answered_result_is() {
    let cache = MemoryCache::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let effects = Arc::new(AtomicUsize::new(0));
    let (counted, effected) = (Arc::clone(&calls), Arc::clone(&effects));
    let h = Harness::<Doc>::builder()
        .step("ask")
        .run(move |s: Arc<Doc>, cx: Cx<()>| {
            counted.fetch_add(1, Ordering::SeqCst);
            let effected = Arc::clone(&effected);
            async move {
                let draft: String = cx
                    .once("draft", async move {
                        effected.fetch_add(1, Ordering::SeqCst);
                        format!("draft of {}", s.text)
                    })
                    .await?;
                let verdict: String = cx.interrupt(format!("approve {draft}?"))?;
                Ok(DocUpdate::new().summary(format!("{draft}: {verdict}")))
            }
        })
        .cache(CachePolicy::new(cache.clone(), "app"))
        .end()
        .start("ask")
        .build()
        .unwrap();
    let agent = create_agent("a", &h);
    let mut run = agent.run(doc("x"));
    let paused = (&mut run).await.unwrap();
    assert!(paused.is_interrupted());
    assert!(cache.is_empty(), "a paused step stores nothing");
    run.resume("approved", &paused.interrupt.unwrap().id)
        .unwrap();
    let done = (&mut run).await.unwrap();
    assert_eq!(done.state.summary, "draft of x: approved");
    assert_eq!(cache.len(), 1, "the answered visit's update is stored");
    assert_eq!(calls.load(Ordering::SeqCst), 2);

    // The same input again: the stored update, without asking or drafting.
    let again = agent.run(doc("x")).await.unwrap();
    assert!(!again.is_interrupted());
    assert_eq!(again.state.summary, "draft of x: approved");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(effects.load(Ordering::SeqCst), 1);
}

#[test]
fn a_cache_without_a_run_before_it_is_refused_when_built() {
    let cache = MemoryCache::new();
    for declared_run_later in [false, true] {
        let calls = Arc::new(AtomicUsize::new(0));
        let b = Harness::<Doc>::builder().step("s");
        let b = if declared_run_later {
            b.cache(CachePolicy::new(cache.clone(), "app"))
                .run(summarizer(&calls, "v"))
                .end()
        } else {
            b.route(|_: &Doc| "go")
                .cache(CachePolicy::new(cache.clone(), "app"))
                .on("go")
                .end()
        };
        let err = b.start("s").build().unwrap_err();
        assert_eq!(
            err.violations,
            [harness::Violation::CacheWithoutRun { step: "s".into() }],
            "run declared later: {declared_run_later}"
        );
        assert!(
            err.to_string()
                .contains("declare the cache after the step's run")
        );
    }
}

#[tokio::test]
async fn a_hit_sends_a_cache_hit_event_with_the_key() {
    let cache = MemoryCache::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let h = summarize_loop(CachePolicy::new(cache.clone(), "app").version(4), &calls);
    let agent = create_agent("cache", &h);
    let custom = |events: Vec<RunEvent<Doc>>| -> Vec<(String, String, Value)> {
        events
            .into_iter()
            .filter_map(|e| match e {
                RunEvent::Custom {
                    step,
                    kind,
                    payload,
                    ..
                } => Some((step.to_string(), kind.to_string(), payload)),
                _ => None,
            })
            .collect()
    };
    let run = agent.run(doc("hello"));
    let events = run.events();
    run.await.unwrap();
    assert_eq!(custom(events.collect().await), [], "a miss sends nothing");

    let run = agent.run(doc("hello"));
    let events = run.events();
    run.await.unwrap();
    let key = cache.keys().pop().unwrap();
    assert_eq!(
        custom(events.collect().await),
        [(
            "summarize".to_string(),
            harness::graph::cache::HIT.to_string(),
            json!({"key": key, "namespace": "app", "version": 4})
        )]
    );
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Work {
    items: Vec<u64>,
    #[field(reduce = add)]
    total: u64,
    #[field(reduce = append)]
    log: Vec<String>,
}

fn squares(cache: &MemoryCache, calls: &Arc<AtomicUsize>) -> Harness<Work> {
    let calls = Arc::clone(calls);
    Harness::<Work>::builder()
        .step("split")
        .route(|_: &Work| "items")
        .on("items")
        .fan_out("square", |s: &Work| s.items.clone())
        .join("done")
        .step("square")
        .run_each(move |item: u64, _: Arc<Work>, _: Cx<()>| {
            calls.fetch_add(1, Ordering::SeqCst);
            async move {
                Ok(WorkUpdate::new()
                    .total(item * item)
                    .log(vec![format!("{item}")]))
            }
        })
        // The branch's input is always in the key; of the state, the step
        // reads nothing.
        .cache_reads(CachePolicy::new(cache.clone(), "squares"), |_| ())
        .writes(["total", "log"])
        .next("done")
        .step("done")
        .route(|_: &Work| "end")
        .on("end")
        .end()
        .start("split")
        .build()
        .unwrap()
}

#[tokio::test]
async fn fan_out_branches_key_by_their_input() {
    let cache = MemoryCache::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let agent = create_agent("map", &squares(&cache, &calls));
    let work = |items: &[u64]| Work {
        items: items.to_vec(),
        ..Work::default()
    };
    let out = agent.run(work(&[1, 2, 3])).await.unwrap();
    assert_eq!(out.state.total, 1 + 4 + 9, "each branch computed its own");
    assert_eq!(out.state.log, ["1", "2", "3"]);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    assert_eq!(cache.len(), 3);

    // Items seen before hit, in any place; a new one misses.
    let out = agent.run(work(&[4, 3, 2, 1])).await.unwrap();
    assert_eq!(out.state.total, 16 + 9 + 4 + 1);
    assert_eq!(out.state.log, ["4", "3", "2", "1"]);
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    assert_eq!(cache.len(), 4);
}

#[tokio::test]
async fn a_step_that_swallows_its_interrupt_stores_nothing_and_gets_its_answer() {
    let cache = MemoryCache::new();
    let h = Harness::<Doc>::builder()
        .step("ask")
        .run(async |cx: harness::Cx<()>| {
            // The error of `interrupt` is swallowed: the step returns `Ok`
            // while it pauses.
            let answer: String = cx
                .interrupt("summary?")
                .unwrap_or_else(|_| "unanswered".into());
            Ok(DocUpdate::new().summary(answer))
        })
        .cache(CachePolicy::new(cache.clone(), "app"))
        .end()
        .start("ask")
        .build()
        .unwrap();
    let agent = create_agent("cache", &h);
    let mut run = agent.run(doc("a"));
    let interrupt = (&mut run).await.unwrap().interrupt.unwrap();
    assert!(cache.is_empty(), "the discarded update was not cached");
    run.resume("the answer", &interrupt.id).unwrap();
    assert_eq!(run.await.unwrap().state.summary, "the answer");
    // The answered visit's update is what a later visit reuses.
    let mut again = agent.run(doc("a"));
    let out = (&mut again).await.unwrap();
    assert!(out.interrupt.is_none(), "a hit does not ask again");
    assert_eq!(out.state.summary, "the answer");
}
