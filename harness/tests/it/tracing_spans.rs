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
