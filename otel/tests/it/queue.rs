//! What the pipeline loses is told: a burst that overflows the batch queue
//! (the shape of 3 runs × 3 000 steps), exports the collector refuses, a
//! guard dropped with spans it could not send. And a queue sized for the
//! burst loses nothing.

use crate::collector::Collector;
use harness::{Harness, HarnessState, StepResult, create_agent};
use harness_otel::{OtelConfig, OtelError};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};
use tracing_subscriber::layer::SubscriberExt;

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema, HarnessState)]
struct Count {
    #[field(reduce = add)]
    n: u32,
}

async fn bump() -> StepResult<CountUpdate> {
    Ok(CountUpdate::new().n(1))
}

/// A loop of `steps` trivial steps: `steps` step spans and one
/// `invoke_agent` span per run.
fn counter(steps: u32) -> Harness<Count> {
    Harness::<Count>::builder()
        .step("bump")
        .run(bump)
        .route(move |s: &Count| if s.n < steps { "again" } else { "done" })
        .on("again")
        .to("bump")
        .on("done")
        .end()
        .start("bump")
        .step_limit(1_000_000)
        .build()
        .unwrap()
}

/// Runs the counter `runs` times under a layer configured with `config`,
/// the collector holding every export until the runs are over (so the
/// first export is in flight and every other span waits in the queue, or
/// is dropped); then flushes. The flush's outcome, and the spans made.
fn flood(
    collector: &Collector,
    config: OtelConfig,
    runs: u32,
    steps: u32,
) -> (Result<(), OtelError>, usize) {
    let _serial = crate::serial();
    // Long enough for the held export to wait for the runs.
    let (layer, guard) = harness_otel::layer(config.timeout(Duration::from_secs(120))).unwrap();
    let subscriber = tracing_subscriber::registry().with(layer);
    collector.hold();
    tracing::subscriber::with_default(subscriber, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async {
                let agent = create_agent("counter", &counter(steps));
                for _ in 0..runs {
                    let out = agent.run(Count { n: 0 }).await.unwrap();
                    assert_eq!(out.state.n, steps);
                }
            });
    });
    collector.release();
    let flushed = guard.flush();
    // Everything is told once: the next flush has nothing to report.
    guard.flush().unwrap();
    guard.shutdown().unwrap();
    (flushed, (runs * (steps + 1)) as usize)
}

#[test]
fn a_full_queue_drops_spans_and_the_flush_says_how_many() {
    let collector = Collector::start();
    let config = OtelConfig::new(&collector.endpoint)
        .max_queue_size(64)
        .max_export_batch_size(16);
    let (flushed, made) = flood(&collector, config, 3, 100);
    let received = collector.spans().len();
    let Err(OtelError::SpansLost {
        dropped,
        failed,
        max_queue_size,
        endpoint,
        error,
    }) = &flushed
    else {
        panic!("{flushed:?}");
    };
    assert_eq!(*failed, 0);
    assert_eq!(*max_queue_size, 64);
    assert_eq!(endpoint, &format!("{}/v1/traces", collector.endpoint));
    assert!(error.is_none(), "{error:?}");
    // Every span is accounted for: received, or counted as dropped. The
    // first export (16 spans) was in flight, 64 waited.
    assert_eq!(received + dropped, made, "{flushed:?}");
    assert_eq!(received, 16 + 64, "{flushed:?}");
    let shown = flushed.as_ref().unwrap_err().to_string();
    assert!(
        shown.contains(&format!("{dropped} spans were dropped before export")),
        "{shown}"
    );
    assert!(shown.contains("max_queue_size"), "{shown}");
    assert!(shown.contains(&collector.endpoint), "{shown}");
}

/// The reproducer's shape, 3 runs × 3 000 steps, with the collector
/// answering nothing until they are over: the default queue (2 048 spans)
/// keeps what fits and says what it dropped; a queue sized for the burst
/// keeps all 9 003.
#[test]
fn three_runs_of_3000_steps_overflow_the_default_queue_and_fit_a_larger_one() {
    let collector = Collector::start();
    let (flushed, made) = flood(&collector, OtelConfig::new(&collector.endpoint), 3, 3000);
    assert_eq!(made, 9003);
    let received = collector.spans().len();
    match &flushed {
        Err(OtelError::SpansLost {
            dropped,
            failed: 0,
            max_queue_size: 2048,
            ..
        }) => {
            assert_eq!(received + dropped, made);
            // One export of 512 in flight, 2 048 waiting.
            assert_eq!(received, 512 + 2048);
        }
        other => panic!("{other:?}"),
    }

    let collector = Collector::start();
    let config = OtelConfig::new(&collector.endpoint).max_queue_size(16_384);
    let (flushed, made) = flood(&collector, config, 3, 3000);
    flushed.unwrap();
    assert_eq!(collector.spans().len(), made);
}

#[test]
fn exports_the_collector_refuses_are_counted_by_the_next_flush() {
    let collector = Collector::start();
    // Refused, and not retried (the exporter retries 429, 502, 503, 504).
    collector.answer(400);
    let _serial = crate::serial();
    let config = OtelConfig::new(&collector.endpoint).max_export_batch_size(4);
    let (layer, guard) = harness_otel::layer(config).unwrap();
    let subscriber = tracing_subscriber::registry().with(layer);
    tracing::subscriber::with_default(subscriber, || {
        for i in 0..12 {
            tracing::info_span!("work", i).in_scope(|| {});
        }
    });
    // Full batches are exported at once, in the background: the first is
    // refused, then the collector takes them again.
    let start = Instant::now();
    while collector.refused() == 0 {
        assert!(start.elapsed() < Duration::from_secs(20), "no export came");
        std::thread::sleep(Duration::from_millis(5));
    }
    collector.answer(200);
    let flushed = guard.flush();
    let Err(OtelError::SpansLost {
        dropped: 0,
        failed,
        error: Some(error),
        ..
    }) = &flushed
    else {
        panic!("{flushed:?}");
    };
    // Every span is accounted for: received, or in a refused export.
    assert!(*failed >= 1, "{flushed:?}");
    assert_eq!(failed + collector.spans().len(), 12, "{flushed:?}");
    assert!(error.contains("400"), "{error}");
    // Told once.
    guard.flush().unwrap();
    guard.shutdown().unwrap();
}

/// A collector that cannot be reached: the flush names where the spans
/// were going (without the endpoint's query) and how many were lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_export_names_its_endpoint_and_counts_its_spans() {
    let endpoint = format!("http://127.0.0.1:{}/otlp/v1/traces", free_port());
    let config = OtelConfig::new(format!("{endpoint}?tenant=t-1"));
    let (layer, guard) = harness_otel::layer(config).unwrap();
    let subscriber = tracing_subscriber::registry().with(layer);
    tracing::subscriber::with_default(subscriber, || {
        tracing::info_span!("doomed").in_scope(|| {});
    });
    let err = tokio::task::spawn_blocking(move || guard.flush())
        .await
        .unwrap()
        .unwrap_err();
    let shown = err.to_string();
    assert!(
        matches!(
            &err,
            OtelError::SpansLost {
                failed: 1,
                dropped: 0,
                error: Some(_),
                ..
            }
        ),
        "{err:?}"
    );
    assert!(shown.contains(&endpoint), "{shown}");
    assert!(
        shown.contains("1 span was sent in exports that failed"),
        "{shown}"
    );
    assert!(!shown.contains("tenant"), "{shown}");
}

/// A port nothing listens on: bound, then let go.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Collects the WARN events of the target `harness_otel`.
#[derive(Clone, Default)]
struct Warnings(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Warnings {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Fields(String);
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!("{}={value:?} ", field.name()));
            }
        }
        let meta = event.metadata();
        if meta.target() == "harness_otel" && *meta.level() == tracing::Level::WARN {
            let mut fields = Fields(String::new());
            event.record(&mut fields);
            self.0.lock().unwrap().push(fields.0);
        }
    }
}

#[test]
fn the_guard_of_layer_dropped_with_spans_lost_warns_through_tracing() {
    let _serial = crate::serial();
    let endpoint = format!("http://127.0.0.1:{}", free_port());
    let (layer, guard) = harness_otel::layer(OtelConfig::new(&endpoint)).unwrap();
    let warnings = Warnings::default();
    let subscriber = tracing_subscriber::registry()
        .with(layer)
        .with(warnings.clone());
    tracing::subscriber::with_default(subscriber, || {
        tracing::info_span!("doomed").in_scope(|| {});
        drop(guard);
    });
    let warnings = warnings.0.lock().unwrap().clone();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("1 span was sent in exports that failed"),
        "{warnings:?}"
    );
    assert!(warnings[0].contains(&endpoint), "{warnings:?}");
    assert!(
        warnings[0].contains("OtelGuard::shutdown()"),
        "{warnings:?}"
    );

    // Nothing lost, nothing said.
    let collector = Collector::start();
    let (layer, guard) = harness_otel::layer(OtelConfig::new(&collector.endpoint)).unwrap();
    let warnings = Warnings::default();
    let subscriber = tracing_subscriber::registry()
        .with(layer)
        .with(warnings.clone());
    tracing::subscriber::with_default(subscriber, || {
        tracing::info_span!("kept").in_scope(|| {});
        drop(guard);
    });
    assert!(warnings.0.lock().unwrap().is_empty());
    assert_eq!(collector.spans().len(), 1);
}

/// The docs' pattern, `let _traces = harness_otel::init(..)?;` with the
/// collector down, in a process of its own (`init` sets the global
/// subscriber): the dropped guard writes one line to stderr.
#[test]
fn the_guard_of_init_dropped_with_spans_lost_writes_one_line_to_stderr() {
    const CHILD: &str = "HARNESS_OTEL_TEST_DROPPED_INIT_GUARD";
    if let Ok(endpoint) = std::env::var(CHILD) {
        let _traces = harness_otel::init(OtelConfig::new(endpoint)).unwrap();
        tracing::info_span!("doomed").in_scope(|| {});
        return;
    }
    let endpoint = format!("http://127.0.0.1:{}", free_port());
    let run = |endpoint: &str| {
        std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "queue::the_guard_of_init_dropped_with_spans_lost_writes_one_line_to_stderr",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, endpoint)
            .output()
            .unwrap()
    };
    let out = run(&endpoint);
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("harness-otel: "))
        .collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].contains("1 span was sent in exports that failed"),
        "{stderr}"
    );
    assert!(lines[0].contains(&endpoint), "{stderr}");

    // A collector that takes the span: nothing written.
    let collector = Collector::start();
    let out = run(&collector.endpoint);
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("harness-otel"), "{stderr}");
    assert_eq!(collector.spans().len(), 1);
}
