//! Runs and steps emit `tracing` spans with the fields a subscriber needs.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use harness::{Cx, Harness, HarnessState, StepResult, create_agent};
use serde::{Deserialize, Serialize};
use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// A span's name and its fields, rendered.
type SeenSpan = (String, Vec<(String, String)>);

/// Records every span's name and fields.
#[derive(Default)]
struct Spans {
    next: AtomicU64,
    seen: Mutex<Vec<SeenSpan>>,
}

struct Fields(Vec<(String, String)>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        self.0
            .push((field.name().to_string(), format!("{value:?}")));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.push((field.name().to_string(), value.to_string()));
    }
}

impl Subscriber for &'static Spans {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let mut fields = Fields(Vec::new());
        span.record(&mut fields);
        self.seen
            .lock()
            .unwrap()
            .push((span.metadata().name().to_string(), fields.0));
        Id::from_u64(self.next.fetch_add(1, Ordering::SeqCst) + 1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, _: &Event<'_>) {}
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct N {
    #[field(reduce = add)]
    n: u32,
}

async fn inc(_: Arc<N>, _: Cx<()>) -> StepResult<NUpdate> {
    Ok(NUpdate::new().n(1))
}

#[test]
fn run_and_step_spans_carry_ids_and_names() {
    let spans: &'static Spans = Box::leak(Box::default());
    let outcome = tracing::subscriber::with_default(spans, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let h = Harness::<N>::builder()
                .step("inc")
                .run(inc)
                .route(|s: &N| if s.n < 2 { "again" } else { "done" })
                .on("again")
                .to("inc")
                .on("done")
                .end()
                .start("inc")
                .build()
                .unwrap();
            let agent = create_agent("traced", &h);
            agent.run(N::default()).await.unwrap()
        })
    });
    let seen = spans.seen.lock().unwrap();
    let get = |fields: &[(String, String)], k: &str| {
        fields.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    };
    let runs: Vec<_> = seen.iter().filter(|(n, _)| n == "harness.run").collect();
    assert_eq!(runs.len(), 1);
    assert_eq!(get(&runs[0].1, "agent").as_deref(), Some("traced"));
    assert_eq!(get(&runs[0].1, "run_id"), Some(outcome.run_id.to_string()));
    assert_eq!(
        get(&runs[0].1, "session_id"),
        Some(outcome.session_id.to_string())
    );
    let steps: Vec<_> = seen
        .iter()
        .filter(|(n, _)| n == "harness.step")
        .map(|(_, f)| (get(f, "step").unwrap(), get(f, "index").unwrap()))
        .collect();
    assert_eq!(
        steps,
        [("inc".into(), "0".into()), ("inc".into(), "1".into())]
    );
}

/// Records each span's name and its parent's id, following the spans
/// entered on this thread, as a subscriber that nests spans does.
#[derive(Default)]
struct Tree {
    next: AtomicU64,
    /// Name, parent id and metadata of each span, by id - 1.
    spans: Mutex<Vec<(String, Option<u64>, &'static Metadata<'static>)>>,
    entered: Mutex<Vec<u64>>,
}

impl Subscriber for &'static Tree {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let parent = if span.is_contextual() {
            self.entered.lock().unwrap().last().copied()
        } else {
            span.parent().map(Id::into_u64)
        };
        let id = self.next.fetch_add(1, Ordering::SeqCst) + 1;
        self.spans.lock().unwrap().push((
            span.metadata().name().to_string(),
            parent,
            span.metadata(),
        ));
        Id::from_u64(id)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, _: &Event<'_>) {}
    fn enter(&self, id: &Id) {
        self.entered.lock().unwrap().push(id.into_u64());
    }
    fn exit(&self, _: &Id) {
        self.entered.lock().unwrap().pop();
    }
    fn current_span(&self) -> tracing_core::span::Current {
        let entered = self.entered.lock().unwrap().last().copied();
        match entered {
            Some(id) => {
                let metadata = self.spans.lock().unwrap()[(id - 1) as usize].2;
                tracing_core::span::Current::new(Id::from_u64(id), metadata)
            }
            None => tracing_core::span::Current::none(),
        }
    }
}

/// A model or tool call that a step makes from a task it spawned (where
/// no span is current) nests under the step's span all the same, as one
/// made in the step does: before, it was a trace of its own.
#[test]
fn calls_made_from_a_task_the_step_spawned_nest_under_the_step() {
    let tree: &'static Tree = Box::leak(Box::default());
    tracing::subscriber::with_default(tree, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let model = Arc::new(harness::llm::ScriptedModel::new([
                harness::llm::Expect::any().reply(harness::llm::ModelResponse::from_text("a")),
                harness::llm::Expect::any().reply(harness::llm::ModelResponse::from_text("b")),
            ]));
            let h = Harness::<N>::builder()
                .step("ask")
                .run(move |cx: Cx<()>| {
                    let model = Arc::clone(&model);
                    async move {
                        let request =
                            harness::llm::ModelRequest::new(vec![harness::llm::Message::user(
                                "hi",
                            )]);
                        cx.complete(&*model, &request).await?;
                        let (cx, request) = (cx.clone(), request.clone());
                        tokio::spawn(async move { cx.complete(&*model, &request).await })
                            .await
                            .unwrap()?;
                        Ok(NUpdate::new().n(1))
                    }
                })
                .end()
                .start("ask")
                .build()
                .unwrap();
            create_agent("spawner", &h).run(N::default()).await.unwrap();
        });
    });
    let spans = tree.spans.lock().unwrap();
    let step = spans
        .iter()
        .position(|(name, _, _)| name == "harness.step")
        .map(|i| i as u64 + 1)
        .unwrap();
    let chats: Vec<Option<u64>> = spans
        .iter()
        .filter(|(name, _, _)| name == "gen_ai.chat")
        .map(|(_, parent, _)| *parent)
        .collect();
    assert_eq!(
        chats,
        [Some(step), Some(step)],
        "{:?}",
        spans.iter().map(|(n, p, _)| (n, p)).collect::<Vec<_>>()
    );
}
