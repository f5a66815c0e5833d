//! The last pass over each span before it leaves the process: the GenAI
//! conventions' types and shapes, contents only when asked for, nothing
//! that looks like a credential, no secret the process holds.

use crate::content;
use opentelemetry::trace::Status;
use opentelemetry::{Array, Context, Key, KeyValue, StringValue, Value};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use std::borrow::Cow;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// The name of the span event the core emits with a call's contents.
const CONTENT_EVENT: &str = "harness.gen_ai.content";

/// What the pipeline lost, counted as it happens; each flush takes the
/// counts since the last one.
#[derive(Debug, Default)]
pub(crate) struct Losses {
    /// Spans handed to the batch processor and not yet to the exporter:
    /// the queue [`Queue`] bounds.
    waiting: AtomicUsize,
    /// Spans dropped because the queue was full.
    dropped: AtomicUsize,
    /// Spans in exports that failed (after the exporter's own retries).
    failed: AtomicUsize,
    /// The last failed export's error.
    error: Mutex<Option<String>>,
}

/// The losses since they were last taken.
#[derive(Debug, Default)]
pub(crate) struct Lost {
    pub(crate) dropped: usize,
    pub(crate) failed: usize,
    pub(crate) error: Option<String>,
}

impl Losses {
    /// The losses counted since the last call, and the counts set back to
    /// zero.
    pub(crate) fn take(&self) -> Lost {
        Lost {
            dropped: self.dropped.swap(0, Ordering::AcqRel),
            failed: self.failed.swap(0, Ordering::AcqRel),
            error: self
                .error
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        }
    }

    fn exporting(&self, spans: usize) {
        // Saturating: only spans that went through the queue are exported,
        // but an underflow would drop every span after it.
        let _ = self
            .waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                Some(n.saturating_sub(spans))
            });
    }

    fn failed(&self, spans: usize, error: String) {
        self.failed.fetch_add(spans, Ordering::AcqRel);
        *self.error.lock().unwrap_or_else(PoisonError::into_inner) = Some(error);
    }
}

/// The batch processor behind a bound of its own: at most `capacity`
/// spans wait for the exporter, and a span that finishes while as many
/// wait is dropped here and counted in [`Losses`], where the SDK's
/// processor would drop it with no count anyone can read. `capacity` is
/// the processor's own queue size, so the processor never drops one
/// itself: its channel holds at most the spans counted as waiting.
#[derive(Debug)]
pub(crate) struct Queue<P> {
    pub(crate) inner: P,
    pub(crate) capacity: usize,
    pub(crate) losses: Arc<Losses>,
}

impl<P: SpanProcessor> SpanProcessor for Queue<P> {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        let waiting = &self.losses.waiting;
        if waiting.fetch_add(1, Ordering::AcqRel) >= self.capacity {
            waiting.fetch_sub(1, Ordering::AcqRel);
            self.losses.dropped.fetch_add(1, Ordering::AcqRel);
            return;
        }
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// Wraps the OTLP exporter; see [`finish`]. Counts the spans of failed
/// exports in `losses`.
#[derive(Debug)]
pub(crate) struct GenAiExporter<E> {
    pub(crate) inner: E,
    pub(crate) capture_content: bool,
    pub(crate) losses: Arc<Losses>,
}

impl<E: SpanExporter> SpanExporter for GenAiExporter<E> {
    fn export(
        &self,
        mut batch: Vec<SpanData>,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        let spans = batch.len();
        self.losses.exporting(spans);
        for span in &mut batch {
            finish(span, self.capture_content);
        }
        let export = self.inner.export(batch);
        let losses = Arc::clone(&self.losses);
        async move {
            let result = export.await;
            if let Err(error) = &result {
                // A collector's answer may quote what it was sent.
                let error = harness::secrets::redact(&error.to_string()).into_owned();
                losses.failed(spans, error);
            }
            result
        }
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// Whether an attribute named `key` may carry a credential: HTTP
/// authorization or cookies, API keys, tokens, passwords. Such attributes
/// are dropped whoever recorded them (a user's own span in a step, an HTTP
/// instrumentation recording headers).
pub(crate) fn looks_secret(key: &str) -> bool {
    let key = key.to_ascii_lowercase().replace(['-', '_'], "");
    [
        "authorization",
        "apikey",
        "cookie",
        "password",
        "secret",
        "accesstoken",
        "bearer",
        "xgoogapikey",
    ]
    .iter()
    .any(|word| key.contains(word))
}

/// Readies `span` for export:
/// - `gen_ai.response.finish_reasons`, recorded by the core as a JSON array
///   in a string, becomes the string array the conventions define;
/// - the core's content event of a model or tool call becomes the
///   conventions' attributes on the call's span when `capture_content`
///   (`gen_ai.input.messages`, `gen_ai.system_instructions`,
///   `gen_ai.output.messages`; `gen_ai.tool.call.arguments`,
///   `gen_ai.tool.call.result`), and is dropped otherwise (the layer's
///   filter already keeps it out; this holds even if another layer let it
///   in);
/// - attributes that look like credentials are dropped, on the span, its
///   events and its links;
/// - the secrets the process holds are redacted from what is left (see
///   [`redact`]).
pub(crate) fn finish(span: &mut SpanData, capture_content: bool) {
    span.attributes.retain(|kv| !looks_secret(kv.key.as_str()));
    for kv in &mut span.attributes {
        if kv.key.as_str() == "gen_ai.response.finish_reasons"
            && let Value::String(s) = &kv.value
            && let Ok(reasons) = serde_json::from_str::<Vec<String>>(s.as_str())
        {
            let reasons: Vec<StringValue> = reasons.into_iter().map(StringValue::from).collect();
            kv.value = Value::Array(Array::String(reasons));
        }
    }
    let mut moved = Vec::new();
    span.events.events.retain(|event| {
        if event.name != CONTENT_EVENT {
            return true;
        }
        if capture_content {
            moved.extend(content_attributes(&event.attributes));
        }
        false
    });
    span.attributes.extend(moved);
    for event in &mut span.events.events {
        event.attributes.retain(|kv| !looks_secret(kv.key.as_str()));
    }
    for link in &mut span.links.links {
        link.attributes.retain(|kv| !looks_secret(kv.key.as_str()));
    }
    redact(span);
}

/// Replaces every secret the process holds (see [`harness::secrets`]) in
/// every text of the span: its name, its status message, its events' names
/// (tracing-opentelemetry puts an event's message there: `warn!("tool
/// printed: {out}")` is an event named by what the tool printed), and the
/// string values of its attributes, its events' attributes and its links'
/// attributes, and their numbers whose text holds a secret (replaced by
/// that text, redacted). A tool result, a model's answer or an error
/// message may quote a key whatever carries it. Nothing to do, and nothing
/// done, when the process holds no secret.
fn redact(span: &mut SpanData) {
    if !harness::secrets::is_active() {
        return;
    }
    redact_cow(&mut span.name);
    if let Status::Error { description } = &mut span.status {
        redact_cow(description);
    }
    for event in &mut span.events.events {
        redact_cow(&mut event.name);
    }
    let events = span.events.events.iter_mut();
    let links = span.links.links.iter_mut();
    let attributes = span
        .attributes
        .iter_mut()
        .chain(events.flat_map(|e| e.attributes.iter_mut()))
        .chain(links.flat_map(|l| l.attributes.iter_mut()));
    for kv in attributes {
        match &mut kv.value {
            Value::String(text) => {
                if let Cow::Owned(redacted) = harness::secrets::redact(text.as_str()) {
                    *text = StringValue::from(redacted);
                }
            }
            Value::Array(Array::String(texts)) => {
                for text in texts {
                    if let Cow::Owned(redacted) = harness::secrets::redact(text.as_str()) {
                        *text = StringValue::from(redacted);
                    }
                }
            }
            // A number holds a secret too when its digits do (an account
            // number registered as text): it is exported as its text,
            // redacted, and so becomes a string. The text of a `bool`, or of
            // an integer of under 8 characters, is shorter than any secret:
            // none is made.
            Value::I64(n) if (-999_999..=9_999_999).contains(&*n) => {}
            number @ (Value::I64(_) | Value::F64(_)) => {
                let text = number.as_str().into_owned();
                if let Cow::Owned(redacted) = harness::secrets::redact(&text) {
                    *number = Value::String(redacted.into());
                }
            }
            Value::Array(numbers @ (Array::I64(_) | Array::F64(_))) => {
                let texts: Vec<String> = match numbers {
                    Array::I64(items) => items.iter().map(ToString::to_string).collect(),
                    Array::F64(items) => items.iter().map(ToString::to_string).collect(),
                    _ => Vec::new(),
                };
                if texts.iter().any(|t| harness::secrets::contains_secret(t)) {
                    // One type per array: all of it becomes text.
                    let texts = texts
                        .iter()
                        .map(|t| StringValue::from(harness::secrets::redact(t).into_owned()))
                        .collect();
                    *numbers = Array::String(texts);
                }
            }
            _ => {}
        }
    }
}

fn redact_cow(text: &mut Cow<'static, str>) {
    if let Cow::Owned(redacted) = harness::secrets::redact(text) {
        *text = Cow::Owned(redacted);
    }
}

/// The conventions' attributes made from the core's content event.
fn content_attributes(fields: &[KeyValue]) -> Vec<KeyValue> {
    let get = |name: &str| {
        fields
            .iter()
            .find(|kv| kv.key.as_str() == name)
            .map(|kv| kv.value.as_str().into_owned())
    };
    let mut out = Vec::new();
    if let Some(messages) = get("harness.request.messages") {
        match content::input(&messages) {
            Some((input, system)) => {
                out.push(KeyValue::new("gen_ai.input.messages", input));
                if let Some(system) = system {
                    out.push(KeyValue::new("gen_ai.system_instructions", system));
                }
            }
            None => out.push(KeyValue::new("gen_ai.input.messages", messages)),
        }
    }
    if let Some(response) = get("harness.response") {
        let output = content::output(&response).unwrap_or(response);
        out.push(KeyValue::new("gen_ai.output.messages", output));
    }
    if let Some(arguments) = get("harness.tool.arguments") {
        out.push(KeyValue::new(
            Key::new("gen_ai.tool.call.arguments"),
            arguments,
        ));
    }
    if let Some(result) = get("harness.tool.result") {
        out.push(KeyValue::new(Key::new("gen_ai.tool.call.result"), result));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::looks_secret;

    #[test]
    fn credential_names_are_recognised_and_ordinary_ones_are_not() {
        for key in [
            "http.request.header.authorization",
            "Authorization",
            "x-api-key",
            "api_key",
            "openai.apiKey",
            "http.request.header.cookie",
            "db.password",
            "client_secret",
            "access_token",
            "x-goog-api-key",
        ] {
            assert!(looks_secret(key), "{key}");
        }
        for key in [
            "gen_ai.usage.input_tokens",
            "gen_ai.request.model",
            "gen_ai.tool.call.id",
            "gen_ai.conversation.id",
            "harness.step",
            "http.response.status_code",
        ] {
            assert!(!looks_secret(key), "{key}");
        }
    }
}
