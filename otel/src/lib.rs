//! OpenTelemetry traces of [harness] runs, following the
//! [GenAI semantic conventions](https://opentelemetry.io/docs/specs/semconv/gen-ai/),
//! exported over OTLP/HTTP with protobuf bodies to a collector (the
//! OpenTelemetry Collector, Jaeger, Grafana Tempo, Langfuse, Phoenix, …).
//!
//! One call sets it up; the guard it returns flushes the last spans when it
//! is dropped:
//!
//! ```no_run
//! # fn main() -> Result<(), harness_otel::OtelError> {
//! let traces = harness_otel::init(
//!     harness_otel::OtelConfig::new("http://localhost:4318").service_name("support-bot"),
//! )?;
//! // ... run agents ...
//! traces.shutdown()?; // or let it drop
//! # Ok(()) }
//! ```
//!
//! Spans are exported in the background and runs never wait for the
//! collector, so what goes wrong there (a collector down, a queue
//! overflowing) is told by [`OtelGuard::flush`] and [`OtelGuard::shutdown`]:
//! call them to see it. A guard merely dropped (`let _traces = ...;` to the
//! end of `main`) reports a failure once itself, on stderr for the guard of
//! [`init`]; see [`OtelGuard`].
//!
//! [`OtelConfig::from_env`] reads the standard `OTEL_EXPORTER_OTLP_ENDPOINT`
//! and `OTEL_SERVICE_NAME` instead.
//!
//! An application that has its own `tracing` subscriber adds [`layer`] to
//! it instead:
//!
//! ```
//! use harness_otel::OtelConfig;
//! use tracing_subscriber::layer::SubscriberExt;
//!
//! # fn main() -> Result<(), harness_otel::OtelError> {
//! let (otel, guard) = harness_otel::layer(OtelConfig::new("http://localhost:4318"))?;
//! let subscriber = tracing_subscriber::registry().with(otel);
//! tracing::subscriber::with_default(subscriber, || {
//!     // ... run agents ...
//! });
//! guard.shutdown()?; // or drop it
//! # Ok(()) }
//! ```
//!
//! # What a run looks like
//!
//! ```text
//! invoke_agent support       INTERNAL  gen_ai.operation.name=invoke_agent, gen_ai.agent.name,
//! │                                    gen_ai.conversation.id = the session id, run_id
//! ├─ step plan               INTERNAL  step, path, index, gen_ai.conversation.id
//! │  └─ chat gpt-4o-mini     CLIENT    gen_ai.operation.name=chat, gen_ai.provider.name,
//! │                                    gen_ai.request.model, gen_ai.usage.input_tokens,
//! │                                    gen_ai.usage.output_tokens (+ cache_read, cache_creation,
//! │                                    reasoning when reported), gen_ai.response.finish_reasons,
//! │                                    error.type (when it failed)
//! └─ step act                INTERNAL
//!    └─ execute_tool search  INTERNAL  gen_ai.operation.name=execute_tool, gen_ai.tool.name,
//!                                      gen_ai.tool.call.id, gen_ai.tool.type
//! ```
//!
//! A run resumed after an interrupt is a second `invoke_agent` trace with
//! the same `gen_ai.conversation.id`. Model calls and tool calls appear when
//! steps make them through [`Cx::complete`](harness::Cx::complete) and
//! [`Cx::call_tool`](harness::Cx::call_tool). The attributes samplers use
//! (operation, agent, provider, model) are set when each span starts; a
//! [`sampler`](OtelConfig::sampler) sees them.
//!
//! `gen_ai.provider.name` is set on `chat` spans only: a run is not tied to
//! one provider (a loop may call several models, or none).
//!
//! A sub-agent's run is an `invoke_agent {step}` span under its parent's
//! step, with its `path` and without a `run_id` of its own (it is part of
//! its parent's run). A failed run's `invoke_agent` span has the status
//! `Error` and `error.type` (`step_failed` for a step's error); the failed
//! step's own span keeps the status unset, as every step span does. Spans
//! also carry harness's own attributes beside those above
//! (`harness.step`, `harness.path` on `chat` and `execute_tool`,
//! `session_id`, `agent`), and a provider crate's HTTP call is a
//! `model_request` span (`provider`, `model`, `attempt`) under its `chat`.
//!
//! # Contents stay out unless asked for
//!
//! By default no message content leaves the process: not the messages sent
//! to models, not their answers, not tool arguments or results. With
//! [`OtelConfig::capture_content`]`(true)` the `chat` spans carry
//! `gen_ai.input.messages`, `gen_ai.system_instructions` and
//! `gen_ai.output.messages` (JSON, in the conventions' shapes), and the
//! `execute_tool` spans `gen_ai.tool.call.arguments` and
//! `gen_ai.tool.call.result`.
//!
//! How: the core cannot know whether you opted in, so it emits contents as
//! a TRACE-level `tracing` event under the target
//! [`CONTENT_TARGET`], and only when some subscriber enables that target
//! (so nothing is serialized otherwise). This crate's layer disables it
//! unless `capture_content` is set, and its exporter drops such events
//! regardless when capture is off. If another layer of yours logs TRACE
//! for every target, it receives the contents too: filter
//! `harness::gen_ai::content` out of it. The same holds for the events of
//! the libraries that quote what they carry ([`CONTENT_CARRYING_TARGETS`]:
//! the MCP SDK logs a server's notifications whole), and a tool's failure,
//! which the model is told, is a DEBUG event naming the tool and the kind
//! of failure, never its text.
//!
//! Whatever the setting, attributes whose names look like credentials
//! (`authorization`, `api_key`, `cookie`, `password`, `secret`,
//! `access_token`, …) are dropped from every span, event and link before
//! export, whoever recorded them. Model requests carry no keys (providers
//! hold them), and the providers' spans record no headers. And whatever an
//! attribute is named, the secrets the process holds (its provider keys,
//! the values of its secret-looking environment variables; see
//! [`harness::secrets`]) are replaced with `[redacted]` in every string
//! attribute (of a span, an event or a link), span name, event name (an
//! event's `tracing` message) and status message, so a tool result that
//! printed the environment is exported without the keys. That includes a
//! secret's JSON-escaped forms (a password with a quote, quoted in JSON a
//! model wrote, then serialized again into `gen_ai.output.messages`), and
//! numbers: an integer or float attribute whose digits hold a secret
//! (`tracing::info!(account = 98765432101234_i64)` with that account
//! number registered) is exported as its text, redacted (a string). With no
//! secret registered, none of this costs anything.
//!
//! # Transport
//!
//! OTLP over HTTP with protobuf bodies (`application/x-protobuf`), posted by
//! a batch processor on its own thread with a blocking HTTP client, so it
//! needs no async runtime and never blocks a run. Plain `http://` only: no
//! TLS is compiled in; point it at a collector on the same machine or
//! network, which forwards over TLS.
//!
//! Finished spans wait for export in a bounded queue (2048 spans by default,
//! [`OtelConfig::max_queue_size`]); one that finishes while it is full is
//! dropped rather than make a run wait, and counted: the next flush or
//! shutdown fails with [`OtelError::SpansLost`]. A burst of thousands of
//! quick steps can fill it.

mod config;
mod content;
mod export;

// The core's guide chapter on traces uses this crate, so its example is
// doctested here.
#[cfg(doctest)]
#[doc = include_str!("../../harness/src/docs/guide/traces.md")]
mod guide_traces {}

pub use config::{OtelConfig, OtelError};

use opentelemetry::InstrumentationScope;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};
use std::sync::Arc;
use tracing::Subscriber;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;

/// The `tracing` target under which the core emits message contents (at
/// TRACE level), for subscribers that opted in; see the crate docs.
pub const CONTENT_TARGET: &str = "harness::gen_ai::content";

/// Targets of libraries harness runs on whose events quote what they
/// carry, at every level: exported only with
/// [`capture_content`](OtelConfig::capture_content). `rmcp`, the MCP SDK
/// under `harness-mcp`, logs each notification a server sends (`info`)
/// and each message it did not expect (`warn`) whole; `harness-mcp`
/// reports its own failures without the payloads.
pub const CONTENT_CARRYING_TARGETS: &[&str] = &["rmcp"];

/// Keeps the export pipeline alive; dropping it flushes the spans not yet
/// sent and stops the pipeline. Keep it for as long as the program runs
/// agents (`let _traces = ...`, not `let _ = ...`, which drops it at once).
///
/// Runs never wait for the collector; [`flush`](Self::flush),
/// [`shutdown`](Self::shutdown) and the drop do, each at most 5 s (the
/// OpenTelemetry SDK's limit) for a collector that takes connections and
/// does not answer.
///
/// # Errors are seen at `flush` and `shutdown`
///
/// Spans are exported in the background, and what goes wrong there (a
/// collector down or refusing, a [queue](OtelConfig::max_queue_size)
/// overflowing) is counted, not reported as it happens: the next
/// [`flush`](Self::flush) or [`shutdown`](Self::shutdown) returns it, as
/// [`OtelError::SpansLost`] with how many spans were lost and the last
/// export's error. So call them, where the program can say what went wrong,
/// rather than rely on the drop:
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let traces = harness_otel::init(harness_otel::OtelConfig::new("http://localhost:4318"))?;
/// // ... run agents; a long-running program may call traces.flush() now and
/// // then, and log what it returns ...
/// if let Err(e) = traces.shutdown() {
///     eprintln!("traces: {e}");
/// }
/// # Ok(()) }
/// ```
///
/// A guard dropped without them has no caller to return the error to, so
/// the drop reports it itself, once: the guard of [`init`] writes one line
/// to stderr (`harness-otel: ...`), because with `init` this crate's layer
/// is the program's only `tracing` subscriber and an event would reach no
/// one; the guard of [`layer`] emits it as a WARN event of the target
/// `harness_otel`, to the subscriber the program composed (the one current
/// where the guard is dropped). A program that wants neither calls
/// [`shutdown`](Self::shutdown).
#[derive(Debug)]
#[must_use = "dropping the guard stops exporting spans"]
pub struct OtelGuard {
    provider: Option<SdkTracerProvider>,
    /// Where spans go, as an error names it (without its query).
    endpoint: String,
    /// What the pipeline lost since the last flush.
    losses: Arc<export::Losses>,
    /// The batch queue's bound.
    max_queue_size: usize,
    /// How the drop reports an error.
    on_drop: DropReport,
}

/// Where the guard's drop reports what it cannot return.
#[derive(Clone, Copy, Debug)]
enum DropReport {
    /// A `tracing` WARN event: the program has its own subscriber.
    Event,
    /// A line on stderr: this crate's layer is the only subscriber.
    Stderr,
}

impl OtelGuard {
    /// Sends every finished span now and waits until the collector has
    /// answered.
    ///
    /// Fails with [`OtelError::SpansLost`] if spans were lost since the last
    /// flush (dropped from a full queue, or in exports that failed, these
    /// included), with [`OtelError::Export`] if the flush itself failed
    /// with nothing known lost (e.g. the collector did not answer within
    /// 5 s: the export goes on, and the next flush tells how it ended).
    pub fn flush(&self) -> Result<(), OtelError> {
        match &self.provider {
            Some(provider) => self.outcome(provider.force_flush()),
            None => Ok(()),
        }
    }

    /// Flushes, then stops the pipeline; what dropping the guard does, with
    /// the error if there was one (as [`flush`](Self::flush) tells it).
    pub fn shutdown(mut self) -> Result<(), OtelError> {
        match self.provider.take() {
            Some(provider) => self.outcome(provider.shutdown()),
            None => Ok(()),
        }
    }

    /// The error of a flush or a shutdown that returned `result`: the spans
    /// lost since the last one first, else `result`'s own.
    fn outcome(&self, result: OTelSdkResult) -> Result<(), OtelError> {
        let lost = self.losses.take();
        if lost.dropped == 0 && lost.failed == 0 {
            return result.map_err(|e| self.failed(&e));
        }
        let error = lost.error.or_else(|| {
            result
                .err()
                .map(|e| harness::secrets::redact(&e.to_string()).into_owned())
        });
        Err(OtelError::SpansLost {
            dropped: lost.dropped,
            failed: lost.failed,
            max_queue_size: self.max_queue_size,
            endpoint: self.endpoint.clone(),
            error,
        })
    }

    fn failed(&self, error: &dyn std::fmt::Display) -> OtelError {
        let error = harness::secrets::redact(&error.to_string()).into_owned();
        OtelError::Export(format!("to {}: {error}", self.endpoint))
    }
}

impl Drop for OtelGuard {
    fn drop(&mut self) {
        let Some(provider) = self.provider.take() else {
            return;
        };
        let Err(error) = self.outcome(provider.shutdown()) else {
            return;
        };
        // No caller to return it to; see the type's documentation.
        match self.on_drop {
            DropReport::Event => tracing::warn!(
                target: "harness_otel",
                %error,
                "the OtelGuard was dropped with spans not exported; call OtelGuard::shutdown() to handle this error"
            ),
            DropReport::Stderr => eprintln!(
                "harness-otel: {error} (reported by the dropped OtelGuard; call its shutdown() to handle it)"
            ),
        }
    }
}

/// Builds the pipeline: the OTLP exporter behind the GenAI pass, a batch
/// processor behind a counted bound, the resource.
/// Returns it with the queue's bound.
fn provider(
    config: OtelConfig,
    losses: &Arc<export::Losses>,
) -> Result<(SdkTracerProvider, usize), OtelError> {
    let url = config.check()?;
    let (max_queue_size, max_export_batch_size) = config.queue(|name| std::env::var(name).ok())?;
    // With reqwest's rustls compiled in by another crate (the harness
    // providers), its client refuses to build without a crypto provider.
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race with another installer leaves theirs, which is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(url)
        .with_timeout(config.timeout)
        .with_headers(config.headers.into_iter().collect())
        .build()
        .map_err(|e| OtelError::Exporter(e.to_string()))?;
    let exporter = export::GenAiExporter {
        inner: exporter,
        capture_content: config.capture_content,
        losses: Arc::clone(losses),
    };
    // The SDK's defaults and environment (`OTEL_BSP_SCHEDULE_DELAY`, ...),
    // with the bounds resolved above.
    let batch = BatchConfigBuilder::default()
        .with_max_queue_size(max_queue_size)
        .with_max_export_batch_size(max_export_batch_size)
        .build();
    let processor = export::Queue {
        inner: BatchSpanProcessor::builder(exporter)
            .with_batch_config(batch)
            .build(),
        capacity: max_queue_size,
        losses: Arc::clone(losses),
    };
    let resource = Resource::builder()
        .with_service_name(config.service_name)
        .build();
    let mut builder = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(resource);
    if let Some(sampler) = config.sampler {
        builder = builder.with_sampler(sampler);
    }
    Ok((builder.build(), max_queue_size))
}

/// A `tracing` layer exporting spans as configured by `config`, and the
/// guard that keeps its pipeline alive (flushing when dropped). Add the
/// layer to your own subscriber; [`init`] does it for you.
///
/// The layer takes spans and events of `config`'s level and above, and the
/// core's message contents only with
/// [`capture_content`](OtelConfig::capture_content).
pub fn layer<S>(config: OtelConfig) -> Result<(impl Layer<S> + 'static, OtelGuard), OtelError>
where
    S: Subscriber + for<'span> LookupSpan<'span>,
{
    let capture = config.capture_content;
    let level = config.level;
    let url = config.traces_url()?;
    let endpoint = url.split('?').next().unwrap_or_default().to_owned();
    let losses = Arc::default();
    let (provider, max_queue_size) = provider(config, &losses)?;
    let scope = InstrumentationScope::builder("harness")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build();
    let tracer = provider.tracer_with_scope(scope);
    let mut filter = Targets::new()
        .with_default(LevelFilter::from_level(level))
        .with_target(
            CONTENT_TARGET,
            if capture {
                LevelFilter::TRACE
            } else {
                LevelFilter::OFF
            },
        );
    for target in CONTENT_CARRYING_TARGETS {
        filter = filter.with_target(
            *target,
            if capture {
                LevelFilter::from_level(level)
            } else {
                LevelFilter::OFF
            },
        );
    }
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(filter);
    Ok((
        layer,
        OtelGuard {
            provider: Some(provider),
            endpoint,
            losses,
            max_queue_size,
            on_drop: DropReport::Event,
        },
    ))
}

/// Sets up traces for the whole program: a global `tracing` subscriber
/// with [`layer`] in it. Keep the guard while agents run.
///
/// Fails with [`OtelError::SubscriberAlreadySet`] if the program already
/// has a global subscriber: add [`layer`] to it instead.
pub fn init(config: OtelConfig) -> Result<OtelGuard, OtelError> {
    let (layer, mut guard) = layer(config)?;
    let subscriber = tracing_subscriber::registry().with(layer);
    tracing::subscriber::set_global_default(subscriber)
        .map_err(|e| OtelError::SubscriberAlreadySet(e.to_string()))?;
    // This crate's layer is the program's only subscriber: a WARN event
    // from the guard's drop would reach no one.
    guard.on_drop = DropReport::Stderr;
    Ok(guard)
}
